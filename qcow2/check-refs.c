/*
 * qcow2/check-refs.c: the reference accounting of the check (part of
 * check.c's design; see check.c for the order of one check).
 *
 * Owns: the in-memory refcount table (expected reference counts) and the
 * counting of references into it, the on-disk refcount as qemu-img check
 * reads it, the check of the refcount blocks themselves, and the comparison
 * of expected and on-disk refcounts with its classification (leak,
 * corruption, rebuild needed).
 *
 * Invariants: check.c's list, cited as "check.c invariant N"; this file
 * keeps 1 (classification and messages of the comparison), 2 (the
 * in-memory table and its bounds), 3 (refcount blocks read within the
 * file) and 5 (every fix goes through repair.c).
 */
#include "qcow2/check.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>

/* ---- the in-memory refcount table (check.c invariant 2) ---- */

uint64_t check_refs_get(const Qcow2Check *c, uint64_t cluster)
{
    g_assert(cluster < c->nb_clusters);
    return qcow2_refblock_get(c->refs, cluster, c->s->refcount_order);
}

void check_refs_set(Qcow2Check *c, uint64_t cluster, uint64_t value)
{
    g_assert(cluster < c->nb_clusters);
    qcow2_refblock_set(c->refs, cluster, c->s->refcount_order, value);
    if (value && cluster >= c->refs_high) {
        c->refs_high = cluster + 1;
    }
}

/* Bytes for n entries, in whole clusters so each cluster-sized slice is a
 * refcount block (nb_clusters <= INT_MAX + a few: no overflow). */
static uint64_t refs_bytes_for(const Qcow2State *s, uint64_t n)
{
    uint64_t bytes = DIV_ROUND_UP(n << s->refcount_order, 8);
    return ROUND_UP(bytes, s->cluster_size);
}

int check_refs_resize(Qcow2Check *c, uint64_t n)
{
    uint64_t bytes;
    uint8_t *p;

    if (n > CHECK_MAX_CLUSTERS) {
        return -ENOMEM; /* QEMU's realloc would fail the same way */
    }
    bytes = refs_bytes_for(c->s, n);
    if (bytes > SIZE_MAX) {
        return -ENOMEM;
    }
    if (!c->refs) {
        /* calloc: pages nothing is counted in are never touched, so a
         * sparse file costs address space, not memory (check.c invariant 2) */
        c->refs = g_try_malloc0((size_t)MAX(bytes, 1));
        if (!c->refs) {
            return -ENOMEM;
        }
        c->refs_bytes = bytes;
    } else if (bytes > c->refs_bytes) {
        p = g_try_realloc(c->refs, (size_t)bytes);
        if (!p) {
            return -ENOMEM;
        }
        memset(p + c->refs_bytes, 0, (size_t)(bytes - c->refs_bytes));
        c->refs = p;
        c->refs_bytes = bytes;
    }
    c->nb_clusters = n;
    return 0;
}

/* QEMU's fatal corruption event of qcow2_get_refcount: on a writable
 * image (a repair) the image is marked corrupt, "qcow2: Marking image as
 * corrupt: ..." once (check.c invariant 8); on a read-only one it is
 * non-fatal, "qcow2: Image is corrupt: ...", once per open image. */
static void report_corruption(Qcow2Check *c, const char *what)
{
    Qcow2State *s = c->s;

    if (s->writable) {
        bool was = s->corrupt_fatal, had_error = blk_error_mark();

        (void)qcow2_corrupt_locked(s, "%s", what);
        blk_error_unwind(had_error);
        if (!was && s->corrupt_fatal) {
            check_msg(c,
                      "qcow2: Marking image as corrupt: %s; further corruption events "
                      "will be suppressed",
                      what);
        }
        return;
    }
    if (s->corruption_events++ == 0) {
        check_msg(c,
                  "qcow2: Image is corrupt: %s; further non-fatal corruption "
                  "events will be suppressed",
                  what);
    }
}

/* report_corruption() of an unaligned refcount block, called for every
 * cluster it covers: the message is formatted only for the event that
 * prints it (the first fatal one, or the first one on a read-only image);
 * the others are only counted, as report_corruption() and meta.c would
 * (their messages were dropped; meta.c's g_debug line of each, seen with
 * G_MESSAGES_DEBUG only, is not written), so that a broken refcount table
 * of N clusters does not cost N formatted strings. */
static void report_unaligned_refblock(Qcow2Check *c, uint64_t offset, uint64_t index)
{
    Qcow2State *s = c->s;
    bool shown = s->writable ? !s->corrupt_fatal : s->corruption_events == 0;

    if (!shown) {
        s->corruption_events++;
        return;
    }
    g_autofree char *what = g_strdup_printf("Refblock offset %#" PRIx64
                                            " unaligned (reftable index: %#" PRIx64 ")",
                                            offset, index);
    report_corruption(c, what);
}

/* The on-disk refcount of a cluster, as QEMU's qcow2_get_refcount() reads
 * it: reserved bits of the reftable entry are ignored, a refcount block past
 * the end of the file reads as zeros, an unaligned one is an error.  Read
 * through the refcount block cache, so fixes made in it are seen at once
 * (repair.c invariant 3). */
int check_get_refcount(Qcow2Check *c, uint64_t cluster, uint64_t *refcount)
{
    Qcow2State *s = c->s;
    uint64_t index = cluster >> s->refcount_block_bits;
    uint64_t offset;
    void *block;
    int ret;

    *refcount = 0;
    if (index >= s->refcount_table_size) {
        return 0;
    }
    offset = s->refcount_table[index] & QCOW2_REFT_OFFSET_MASK;
    if (offset == 0) {
        return 0;
    }
    if (qcow2_offset_into_cluster(s, offset)) {
        report_unaligned_refblock(c, offset, index);
        return -EIO;
    }
    ret = qcow2_cache_get_locked(s->refcount_cache, offset, &block);
    if (ret < 0) {
        return ret;
    }
    *refcount =
        qcow2_refblock_get(block, cluster & ((UINT64_C(1) << s->refcount_block_bits) - 1),
                           s->refcount_order);
    qcow2_cache_put_locked(s->refcount_cache, &block);
    return 0;
}

/* ---- counting references ---- */

/*
 * Count mult references to every cluster that [offset, offset + size)
 * touches (QEMU's qcow2_inc_refcounts_imrt, mult times).  check.c invariant 2.
 */
int check_inc_refcounts_n(Qcow2Check *c, Qcow2CheckCounts *res, uint64_t offset,
                          uint64_t size, uint64_t mult)
{
    Qcow2State *s = c->s;
    uint64_t end, first, last;
    int ret;

    if (size == 0) {
        return 0;
    }
    /* The last cluster may be partly past the end of the file, but a
     * reference may not reach a whole cluster beyond it. */
    if (qcow2_add(offset, size, &end) || end >= c->file_size + s->cluster_size) {
        for (uint64_t i = 0; i < mult; i++) {
            check_msg(c,
                      "ERROR: counting reference for region exceeding the end of the "
                      "file by one cluster or more: offset 0x%" PRIx64 " size 0x%" PRIx64,
                      offset, size);
        }
        res->corruptions += (int64_t)mult;
        return 0;
    }
    first = offset >> s->cluster_bits;
    last = (end - 1) >> s->cluster_bits;
    for (uint64_t k = first; k <= last; k++) {
        uint64_t rc, room;

        if (k >= c->nb_clusters) {
            ret = check_refs_resize(c, k + 1);
            if (ret < 0) {
                res->check_errors++;
                return ret;
            }
        }
        rc = check_refs_get(c, k);
        room = s->refcount_max - rc;
        if (mult <= room) {
            check_refs_set(c, k, rc + mult);
            continue;
        }
        check_refs_set(c, k, s->refcount_max);
        for (uint64_t i = room; i < mult; i++) {
            if (c->overflow_messages >= CHECK_MAX_OVERFLOW_MESSAGES) {
                c->overflow_dropped += mult - i;
                break;
            }
            c->overflow_messages++;
            check_msg(c, "ERROR: overflow cluster offset=0x%" PRIx64,
                      k << s->cluster_bits);
            check_msg(c, "Use qemu-img amend to increase the refcount entry width or "
                         "qemu-img convert to create a clean copy if the image cannot "
                         "be opened for writing");
        }
        res->corruptions += (int64_t)(mult - room);
    }
    return 0;
}

int check_inc_refcounts(Qcow2Check *c, Qcow2CheckCounts *res, uint64_t offset,
                        uint64_t size)
{
    return check_inc_refcounts_n(c, res, offset, size, 1);
}

/* ---- refcount blocks (QEMU's check_refblocks) ---- */

int check_refblocks(Qcow2Check *c, Qcow2CheckCounts *res, bool *rebuild)
{
    Qcow2State *s = c->s;
    int ret;

    for (uint64_t i = 0; i < s->refcount_table_size; i++) {
        uint64_t entry = s->refcount_table[i];
        uint64_t offset = entry & QCOW2_REFT_OFFSET_MASK;
        uint64_t cluster = offset >> s->cluster_bits;

        if (entry & QCOW2_REFT_RESERVED_MASK) {
            check_msg(c, "ERROR refcount table entry %" PRIu64 " has reserved bits set",
                      i);
            res->corruptions++;
            *rebuild = true;
            continue;
        }
        if (qcow2_offset_into_cluster(s, offset)) {
            check_msg(c,
                      "ERROR refcount block %" PRIu64 " is not cluster aligned; refcount "
                      "table entry corrupted",
                      i);
            res->corruptions++;
            *rebuild = true;
            continue;
        }
        if (cluster >= c->nb_clusters) {
            bool fix = c->fix & BLK_CHECK_FIX_ERRORS;

            res->corruptions++;
            check_msg(c, "%s refcount block %" PRIu64 " is outside image",
                      fix ? "Repairing" : "ERROR", i);
            if (!fix) {
                continue;
            }
            /* Grow the file to hold the block, as QEMU does, unless it
             * lies farther than check.c invariant 2 allows (the rebuild
             * then replaces the block instead), or the block's end would
             * overflow: EINVAL, as QEMU's. */
            ret = -EFBIG;
            if (offset > (uint64_t)INT64_MAX - s->cluster_size) {
                ret = -EINVAL;
            } else if (cluster < MAX(CHECK_GROW_CLUSTERS, 2 * c->nb_clusters + 1024)) {
                ret = repair_truncate(c, offset + s->cluster_size);
            }
            if (ret == 0) {
                uint64_t n = DIV_ROUND_UP(c->file_size, s->cluster_size);
                if (n > c->nb_clusters) {
                    ret = check_refs_resize(c, n);
                    if (ret < 0) {
                        res->check_errors++;
                        return ret;
                    }
                }
                if (cluster >= c->nb_clusters) {
                    ret = -EINVAL;
                }
            }
            if (ret < 0) {
                *rebuild = true;
                check_msg(c, "ERROR could not resize image: %s", g_strerror(-ret));
                continue;
            }
            res->corruptions--;
            res->corruptions_fixed++;
            ret = check_inc_refcounts(c, res, offset, s->cluster_size);
            if (ret < 0) {
                return ret;
            }
            continue;
        }
        if (offset != 0) {
            ret = check_inc_refcounts(c, res, offset, s->cluster_size);
            if (ret < 0) {
                return ret;
            }
            if (check_refs_get(c, cluster) != 1) {
                check_msg(c, "ERROR refcount block %" PRIu64 " refcount=%" PRIu64, i,
                          check_refs_get(c, cluster));
                res->corruptions++;
                *rebuild = true;
            }
        }
    }
    return 0;
}

/* ---- compare (QEMU's compare_refcounts) ---- */

/* True if the in-memory entries [from, to) are all zero; from is the first
 * entry of a refcount block, so it starts a byte. */
static bool refs_zero(const Qcow2Check *c, uint64_t from, uint64_t to)
{
    uint32_t order = c->s->refcount_order;
    uint64_t byte_from = (from << order) / 8, byte_to = (to << order) / 8;
    uint64_t i;

    for (uint64_t b = byte_from; b < byte_to; b++) {
        if (c->refs[b]) {
            return false;
        }
    }
    for (i = (byte_to * 8) >> order; i < to; i++) {
        if (check_refs_get(c, i)) {
            return false;
        }
    }
    return true;
}

void check_compare_refcounts(Qcow2Check *c, Qcow2CheckCounts *res, unsigned fix,
                             bool *rebuild, uint64_t *highest)
{
    Qcow2State *s = c->s;
    uint64_t per_block = UINT64_C(1) << s->refcount_block_bits;
    int ret;

    *highest = 0;
    for (uint64_t i = 0; i < c->nb_clusters; i++) {
        uint64_t disk, ref;

        /* Fast path: no refcount block and nothing referenced here. */
        if ((i & (per_block - 1)) == 0) {
            uint64_t index = i >> s->refcount_block_bits;
            uint64_t end = MIN(c->nb_clusters, i + per_block);
            bool no_block = index >= s->refcount_table_size ||
                            (s->refcount_table[index] & QCOW2_REFT_OFFSET_MASK) == 0;
            if (no_block &&
                (i >= c->refs_high || refs_zero(c, i, MIN(end, c->refs_high)))) {
                check_progress_add(c, end - i);
                i = end - 1;
                continue;
            }
            check_progress_add(c, end - i);
        }
        ret = check_get_refcount(c, i, &disk);
        if (ret < 0) {
            check_msg(c, "Can't get refcount for cluster %" PRIu64 ": %s", i,
                      g_strerror(-ret));
            res->check_errors++;
            continue;
        }
        ref = check_refs_get(c, i);
        if (disk > 0 || ref > 0) {
            *highest = i;
        }
        if (disk == ref) {
            continue;
        }

        int64_t *num_fixed = NULL;
        if (disk == 0) {
            *rebuild = true;
        } else if (disk > ref && (fix & BLK_CHECK_FIX_LEAKS)) {
            num_fixed = &res->leaks_fixed;
        } else if (disk < ref && (fix & BLK_CHECK_FIX_ERRORS)) {
            num_fixed = &res->corruptions_fixed;
        }
        check_msg(c, "%s cluster %" PRIu64 " refcount=%" PRIu64 " reference=%" PRIu64,
                  num_fixed    ? "Repairing"
                  : disk < ref ? "ERROR"
                               : "Leaked",
                  i, disk, ref);
        if (num_fixed) {
            ret = repair_set_refcount(c, i, disk, ref);
            if (ret >= 0) {
                (*num_fixed)++;
                continue;
            }
        }
        if (disk < ref) {
            res->corruptions++;
        } else {
            res->leaks++;
        }
    }
    if (fix) {
        ret = repair_flush_refcounts(c);
        if (ret < 0) {
            check_msg(c, "ERROR: Could not write refcount block: %s", g_strerror(-ret));
            res->check_errors++;
        }
    }
}
