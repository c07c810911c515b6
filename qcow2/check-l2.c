/*
 * qcow2/check-l2.c: the check's walk over the L1 and L2 tables (part of
 * check.c's design; see check.c for the order of one check).
 *
 * Owns: QEMU's classification of L2 entries (cluster types), the walk of
 * the active and snapshot L1 tables and every L2 table they reference
 * (counting the clusters they use, with their findings and the fix of an
 * unaligned preallocated zero cluster), the memo and budgets that bound
 * re-walking, and the OFLAG_COPIED check of the active tables.
 *
 * Invariants: check.c's list, cited as "check.c invariant N"; this file
 * keeps 1 (messages), 3 (tables read within the file), 4 (work bounded by
 * the file: the L2 memo, the replay and bad budgets) and 5 (every fix goes
 * through repair.c).
 */
#include "qcow2/check.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

/* QEMU's cluster types (qcow2_get_cluster_type). */
typedef enum ClusterType {
    CT_UNALLOCATED,
    CT_ZERO_PLAIN,
    CT_ZERO_ALLOC,
    CT_NORMAL,
    CT_COMPRESSED,
} ClusterType;

/* What an L2 table gave the first time it was walked (check.c invariant 4). */
typedef struct L2Memo {
    bool clean;
    int64_t allocated, fragmented, compressed;
    uint64_t pending; /* further references not yet applied */
} L2Memo;

static ClusterType cluster_type(const Qcow2State *s, uint64_t entry)
{
    if (entry & QCOW2_OFLAG_COMPRESSED) {
        return CT_COMPRESSED;
    }
    if ((entry & QCOW2_OFLAG_ZERO) && !s->extended_l2) {
        return (entry & QCOW2_L2E_OFFSET_MASK) ? CT_ZERO_ALLOC : CT_ZERO_PLAIN;
    }
    if (!(entry & QCOW2_L2E_OFFSET_MASK)) {
        /* With a data file offset 0 is valid; COPIED tells it apart. */
        return (qcow2_has_data_file(s) && (entry & QCOW2_OFLAG_COPIED)) ? CT_NORMAL
                                                                        : CT_UNALLOCATED;
    }
    return CT_NORMAL;
}

/* Repair an unaligned preallocated zero cluster: make the entry a plain
 * zero cluster (QEMU does the same).  Returns true if it was rewritten. */
static bool fix_unaligned_zero_entry(Qcow2Check *c, Qcow2CheckCounts *res, uint8_t *l2,
                                     uint64_t l2_offset, uint64_t i, bool active)
{
    Qcow2State *s = c->s;
    uint64_t entry_offset = l2_offset + i * s->l2_entry_size;
    int ret;

    store_be64(l2 + i * s->l2_entry_size, s->extended_l2 ? 0 : QCOW2_OFLAG_ZERO);
    ret = repair_overlap_check(c, QCOW2_OL_ACTIVE_L2, entry_offset, 8);
    if (ret < 0) {
        check_msg(c, "ERROR: Overlap check failed");
        res->check_errors++;
        return false;
    }
    ret = repair_write(c, BLKEV_L2_UPDATE, QCOW2_OL_ACTIVE_L2, entry_offset,
                       l2 + i * s->l2_entry_size, 8, true);
    if (ret < 0) {
        check_msg(c, "ERROR: Failed to overwrite L2 table entry: %s", g_strerror(-ret));
        res->check_errors++;
        return false;
    }
    if (active && !qcow2_offset_into_cluster(s, l2_offset)) {
        qcow2_l2_cache_discard_table_locked(s, l2_offset);
    }
    res->corruptions--;
    res->corruptions_fixed++;
    return true;
}

/*
 * Qcow2CheckWalk one L2 table (QEMU's check_refcounts_l2).  mult > 1 applies the
 * increments of a clean table for mult references at once (check.c invariant 4);
 * then nothing else can be reported but overflows.
 */
static int walk_l2(Qcow2Check *c, Qcow2CheckCounts *res, uint64_t l2_offset, int flags,
                   bool active, uint64_t mult)
{
    Qcow2State *s = c->s;
    uint8_t *l2 = c->l2_buf;
    uint64_t next_contiguous = 0;
    int ret;

    ret = check_pread(c, l2_offset, l2, s->cluster_size);
    if (ret < 0) {
        check_msg(c, "ERROR: I/O error in check_refcounts_l2");
        res->check_errors++;
        return ret;
    }
    for (uint64_t i = 0; i < s->l2_size; i++) {
        uint64_t entry = load_be64(l2 + i * s->l2_entry_size);
        uint64_t bitmap = s->extended_l2 ? load_be64(l2 + i * s->l2_entry_size + 8) : 0;
        ClusterType type = cluster_type(s, entry);

        if (type != CT_COMPRESSED && (entry & QCOW2_L2E_STD_RESERVED_MASK)) {
            check_msg(c, "ERROR found l2 entry with reserved bits set: %" PRIx64, entry);
            res->corruptions++;
        }
        switch (type) {
        case CT_COMPRESSED: {
            uint64_t coffset, csize;

            if (entry & QCOW2_OFLAG_COPIED) {
                check_msg(c,
                          "ERROR: coffset=0x%" PRIx64 ": copied flag must never be set "
                          "for compressed clusters",
                          entry & s->cluster_offset_mask);
                entry &= ~QCOW2_OFLAG_COPIED;
                res->corruptions++;
            }
            if (qcow2_has_data_file(s)) {
                check_msg(c,
                          "ERROR compressed cluster %" PRIu64 " with data file, "
                          "entry=0x%" PRIx64,
                          i, entry);
                res->corruptions++;
                break;
            }
            if (bitmap) {
                check_msg(c,
                          "ERROR compressed cluster %" PRIu64 " with non-zero subcluster "
                          "allocation bitmap, entry=0x%" PRIx64,
                          i, entry);
                res->corruptions++;
                break;
            }
            qcow2_parse_compressed_entry(s, entry, &coffset, &csize);
            ret = check_inc_refcounts_n(c, res, coffset, csize, mult);
            if (ret < 0) {
                return ret;
            }
            if (flags & CHECK_FRAG_INFO) {
                /* compressed clusters are fragmented by nature */
                res->allocated_clusters++;
                res->compressed_clusters++;
                res->fragmented_clusters++;
            }
            break;
        }
        case CT_ZERO_ALLOC:
        case CT_NORMAL: {
            uint64_t offset = entry & QCOW2_L2E_OFFSET_MASK;

            if ((bitmap >> 32) & bitmap) {
                res->corruptions++;
                check_msg(c,
                          "ERROR offset=%" PRIx64 ": Allocated cluster has corrupted "
                          "subcluster allocation bitmap",
                          offset);
            }
            if (qcow2_offset_into_cluster(s, offset)) {
                bool has_data = s->extended_l2 ? (bitmap & UINT32_MAX) != 0
                                               : !(entry & QCOW2_OFLAG_ZERO);
                res->corruptions++;
                if (has_data) {
                    check_msg(c,
                              "ERROR offset=%" PRIx64 ": Data cluster is not properly "
                              "aligned; L2 entry corrupted.",
                              offset);
                } else {
                    bool fix = c->fix & BLK_CHECK_FIX_ERRORS;
                    check_msg(c,
                              "%s offset=%" PRIx64 ": Preallocated cluster is not "
                              "properly aligned; L2 entry corrupted.",
                              fix ? "Repairing" : "ERROR", offset);
                    if (fix &&
                        fix_unaligned_zero_entry(c, res, l2, l2_offset, i, active)) {
                        continue; /* the cluster is not used any more */
                    }
                }
            }
            if (flags & CHECK_FRAG_INFO) {
                res->allocated_clusters++;
                if (next_contiguous && offset != next_contiguous) {
                    res->fragmented_clusters++;
                }
                next_contiguous = offset + s->cluster_size;
            }
            if (!qcow2_has_data_file(s)) {
                ret = check_inc_refcounts_n(c, res, offset, s->cluster_size, mult);
                if (ret < 0) {
                    return ret;
                }
            }
            break;
        }
        case CT_ZERO_PLAIN:
            break;
        case CT_UNALLOCATED:
            if (bitmap & UINT32_MAX) {
                res->corruptions++;
                check_msg(c, "ERROR: Unallocated cluster has non-zero subcluster "
                             "allocation map");
            }
            break;
        }
    }
    return 0;
}

/* Charge n entries of deliberate re-walking (check.c invariant 4). */
static int charge(Qcow2Check *c, Qcow2CheckCounts *res, uint64_t *budget, uint64_t n)
{
    if (*budget < n) {
        res->check_errors++;
        return blk_error(EFBIG,
                         "The image references its metadata tables too many times to "
                         "be checked (broken or hostile image)");
    }
    *budget -= n;
    return 0;
}

/* One reference to the L2 table at l2_offset (check.c invariant 4). */
static int check_l2(Qcow2Check *c, Qcow2CheckWalk *w, Qcow2CheckCounts *res,
                    uint64_t l2_offset, int flags, bool active)
{
    Qcow2State *s = c->s;
    bool aligned = !qcow2_offset_into_cluster(s, l2_offset);
    L2Memo *m = NULL;
    unsigned msgs;
    Qcow2CheckCounts before;
    int ret;

    if (aligned && l2_offset >= c->file_size) {
        return 0; /* all zeros: nothing to count, nothing to report */
    }
    if (aligned) {
        m = g_hash_table_lookup(w->l2memo, &l2_offset);
    }
    if (m && m->clean && w->replay_budget < s->l2_size) {
        /* counted later, all references of this table at once */
        m->pending++;
        w->deferred = true;
        if (flags & CHECK_FRAG_INFO) {
            res->allocated_clusters += m->allocated;
            res->fragmented_clusters += m->fragmented;
            res->compressed_clusters += m->compressed;
        }
        return 0;
    }
    if (m && m->clean) {
        w->replay_budget -= s->l2_size;
    } else if (m || !aligned) {
        ret = charge(c, res, &w->bad_budget, s->l2_size);
        if (ret < 0) {
            return ret;
        }
    }

    msgs = c->messages->len + c->messages_dropped;
    before = *res;
    /* frag info is always computed, for the memo, and dropped below when
     * this reference does not ask for it */
    ret = walk_l2(c, res, l2_offset, CHECK_FRAG_INFO, active, 1);
    if (ret < 0) {
        return ret;
    }
    if (aligned && !m) {
        uint64_t *key = g_new(uint64_t, 1);
        m = g_new0(L2Memo, 1);
        *key = l2_offset;
        m->clean = c->messages->len + c->messages_dropped == msgs &&
                   res->corruptions == before.corruptions &&
                   res->check_errors == before.check_errors &&
                   res->corruptions_fixed == before.corruptions_fixed;
        m->allocated = res->allocated_clusters - before.allocated_clusters;
        m->fragmented = res->fragmented_clusters - before.fragmented_clusters;
        m->compressed = res->compressed_clusters - before.compressed_clusters;
        g_hash_table_insert(w->l2memo, key, m);
    }
    if (!(flags & CHECK_FRAG_INFO)) {
        res->allocated_clusters = before.allocated_clusters;
        res->fragmented_clusters = before.fragmented_clusters;
        res->compressed_clusters = before.compressed_clusters;
    }
    return 0;
}

/* Apply the references counted but not yet walked (check.c invariant 4). */
int check_apply_deferred(Qcow2Check *c, Qcow2CheckWalk *w, Qcow2CheckCounts *res)
{
    GHashTableIter it;
    gpointer key, value;
    int ret;

    if (!w->deferred) {
        return 0;
    }
    g_hash_table_iter_init(&it, w->l2memo);
    while (g_hash_table_iter_next(&it, &key, &value)) {
        L2Memo *m = value;
        if (m->pending == 0) {
            continue;
        }
        ret = walk_l2(c, res, *(uint64_t *)key, 0, false, m->pending);
        if (ret < 0) {
            return ret;
        }
        m->pending = 0;
    }
    w->deferred = false;
    return 0;
}

/* QEMU's check_refcounts_l1. */
int check_l1(Qcow2Check *c, Qcow2CheckWalk *w, Qcow2CheckCounts *res, uint64_t l1_offset,
             uint32_t l1_size, int flags, bool active)
{
    Qcow2State *s = c->s;
    uint64_t bytes = (uint64_t)l1_size * 8; /* l1_size <= 4M: validated by callers */
    uint64_t in_file = 0;
    g_autofree uint8_t *l1 = NULL;
    int ret;

    if (l1_size == 0) {
        return 0;
    }
    ret = check_inc_refcounts(c, res, l1_offset, bytes);
    if (ret < 0) {
        return ret;
    }
    /* Entries past the end of the file are zeros (check.c invariant 3). */
    if (l1_offset < c->file_size) {
        in_file = MIN(bytes, c->file_size - l1_offset) / 8;
    }
    if (in_file == 0) {
        return 0;
    }
    ret = charge(c, res, &w->l1_budget, in_file);
    if (ret < 0) {
        return ret;
    }
    l1 = g_try_malloc(in_file * 8);
    if (!l1) {
        res->check_errors++;
        return blk_error(ENOMEM, "%s", g_strerror(ENOMEM));
    }
    ret = check_pread(c, l1_offset, l1, in_file * 8);
    if (ret < 0) {
        check_msg(c, "ERROR: I/O error in check_refcounts_l1");
        res->check_errors++;
        return ret;
    }
    for (uint64_t i = 0; i < in_file; i++) {
        uint64_t entry = load_be64(l1 + i * 8);
        uint64_t l2_offset;

        if (!entry) {
            continue;
        }
        if (entry & QCOW2_L1E_RESERVED_MASK) {
            check_msg(c, "ERROR found L1 entry with reserved bits set: %" PRIx64, entry);
            res->corruptions++;
        }
        l2_offset = entry & QCOW2_L1E_OFFSET_MASK;
        ret = check_inc_refcounts(c, res, l2_offset, s->cluster_size);
        if (ret < 0) {
            return ret;
        }
        if (qcow2_offset_into_cluster(s, l2_offset)) {
            check_msg(c,
                      "ERROR l2_offset=%" PRIx64 ": Table is not cluster aligned; L1 "
                      "entry corrupted",
                      l2_offset);
            res->corruptions++;
        }
        ret = check_l2(c, w, res, l2_offset, flags, active);
        if (ret < 0) {
            return ret;
        }
    }
    check_progress_add(c, in_file);
    return 0;
}

/* ---- OFLAG_COPIED (QEMU's check_oflag_copied) ---- */

int check_oflag_copied(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    uint8_t *l2 = c->l2_buf;
    /* L2 offset -> SEEN_CLEAN or SEEN_BROKEN (check.c invariant 4) */
    g_autoptr(GHashTable) seen =
        g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
    enum { SEEN_CLEAN = 1, SEEN_BROKEN = 2 };
    uint64_t budget = c->bad_budget;
    bool repair;
    int ret;

    if (c->fix & BLK_CHECK_FIX_ERRORS) {
        repair = true;
    } else if (c->fix & BLK_CHECK_FIX_LEAKS) {
        /* only when the refcounts are known to be right now */
        repair = !res->check_errors && !res->corruptions && !res->leaks;
    } else {
        repair = false;
    }

    for (uint32_t i = 0; i < s->l1_size; i++) {
        uint64_t l1_entry = s->l1_table[i];
        uint64_t l2_offset = l1_entry & QCOW2_L1E_OFFSET_MASK;
        uint64_t refcount;
        unsigned dirty = 0, mismatches = 0;
        int state;

        if (!l2_offset) {
            continue;
        }
        ret = check_get_refcount(c, l2_offset >> s->cluster_bits, &refcount);
        if (ret < 0) {
            continue; /* like QEMU: no message, no check error */
        }
        if ((refcount == 1) != ((l1_entry & QCOW2_OFLAG_COPIED) != 0)) {
            res->corruptions++;
            check_msg(c,
                      "%s OFLAG_COPIED L2 cluster: l1_index=%" PRIu32 " l1_entry=%" PRIx64
                      " refcount=%" PRIu64,
                      repair ? "Repairing" : "ERROR", i, l1_entry, refcount);
            if (repair) {
                s->l1_table[i] = refcount == 1 ? l1_entry | QCOW2_OFLAG_COPIED
                                               : l1_entry & ~QCOW2_OFLAG_COPIED;
                ret = repair_write_l1_entry(c, i);
                if (ret < 0) {
                    res->check_errors++;
                    return ret;
                }
                res->corruptions--;
                res->corruptions_fixed++;
            }
        }

        /* check.c invariant 4: a table found clean (or repaired) is clean again;
         * walking one again that was not, or an unaligned one, draws on
         * the budget; the first walk of each table of the file is free */
        state = GPOINTER_TO_INT(g_hash_table_lookup(seen, &l2_offset));
        if (state == SEEN_CLEAN) {
            continue;
        }
        if (!qcow2_offset_into_cluster(s, l2_offset) && l2_offset >= c->file_size) {
            continue; /* all zeros */
        }
        if (state == SEEN_BROKEN || qcow2_offset_into_cluster(s, l2_offset)) {
            ret = charge(c, res, &budget, s->l2_size);
            if (ret < 0) {
                return ret;
            }
        }

        ret = check_pread(c, l2_offset, l2, s->cluster_size);
        if (ret < 0) {
            check_msg(c, "ERROR: Could not read L2 table: %s", g_strerror(-ret));
            res->check_errors++;
            return ret;
        }
        for (uint64_t j = 0; j < s->l2_size; j++) {
            uint64_t entry = load_be64(l2 + j * s->l2_entry_size);
            ClusterType type = cluster_type(s, entry);

            if (type != CT_NORMAL && type != CT_ZERO_ALLOC) {
                continue;
            }
            if (qcow2_has_data_file(s)) {
                refcount = 1;
            } else {
                ret = check_get_refcount(
                    c, (entry & QCOW2_L2E_OFFSET_MASK) >> s->cluster_bits, &refcount);
                if (ret < 0) {
                    continue;
                }
            }
            if ((refcount == 1) != ((entry & QCOW2_OFLAG_COPIED) != 0)) {
                res->corruptions++;
                mismatches++;
                check_msg(c,
                          "%s OFLAG_COPIED data cluster: l2_entry=%" PRIx64
                          " refcount=%" PRIu64,
                          repair ? "Repairing" : "ERROR", entry, refcount);
                if (repair) {
                    store_be64(l2 + j * s->l2_entry_size,
                               refcount == 1 ? entry | QCOW2_OFLAG_COPIED
                                             : entry & ~QCOW2_OFLAG_COPIED);
                    dirty++;
                }
            }
        }
        if (dirty) {
            ret = repair_overlap_check(c, QCOW2_OL_ACTIVE_L2, l2_offset, s->cluster_size);
            if (ret < 0) {
                check_msg(c,
                          "ERROR: Could not write L2 table; metadata overlap check "
                          "failed: %s",
                          g_strerror(-ret));
                res->check_errors++;
                return ret;
            }
            ret = repair_write(c, BLKEV_L2_UPDATE, QCOW2_OL_ACTIVE_L2, l2_offset, l2,
                               s->cluster_size, false);
            if (ret < 0) {
                check_msg(c, "ERROR: Could not write L2 table: %s", g_strerror(-ret));
                res->check_errors++;
                return ret;
            }
            if (!qcow2_offset_into_cluster(s, l2_offset)) {
                qcow2_l2_cache_discard_table_locked(s, l2_offset);
            }
            res->corruptions -= dirty;
            res->corruptions_fixed += dirty;
        }
        {
            uint64_t *key = g_new(uint64_t, 1);
            *key = l2_offset;
            g_hash_table_replace(
                seen, key,
                GINT_TO_POINTER(mismatches == dirty ? SEEN_CLEAN : SEEN_BROKEN));
        }
    }
    return 0;
}
