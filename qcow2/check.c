/*
 * qcow2/check.c: consistency check of a qcow2 image, as qemu-img check
 * (QEMU 7.2) reports it; the repairs it triggers are in repair.c.
 *
 * Owns: the in-memory refcount table (expected reference counts), the walk
 * over every structure that references clusters (header, active and
 * snapshot L1/L2 tables, data and compressed clusters, refcount table and
 * blocks, snapshot table, bitmap directory and tables), the comparison with
 * the on-disk refcounts, the OFLAG_COPIED check, and the classification of
 * each finding.  Reading the snapshot table and every write are in
 * repair.c (the table's codec is snapshot-codec.c).
 *
 * The order of one check (qcow2_check_image), QEMU's:
 *   1. read the snapshot table (dropping what -r all drops),
 *   2. count references (calculate), compare with the on-disk refcounts
 *      (fixing leaks / corruptions, or rebuilding the refcount structure),
 *      check OFLAG_COPIED,
 *   3. rewrite the snapshot table if it had fixable corruptions,
 *   4. clear the dirty and corrupt bits after a successful repair.
 *
 * Invariants (cited as "check.c invariant N"):
 *  1. Classification and messages are QEMU's: on-disk refcount below the
 *     references is a corruption ("ERROR cluster N refcount=R reference=F"),
 *     above is a leak ("Leaked cluster ..."); a referenced cluster with
 *     refcount 0 needs the refcount structure rebuilt.  Every line is
 *     printed as qemu-img prints it, into res->messages.
 *  2. The in-memory refcount table has one entry per host cluster up to the
 *     end of the file (at most INT_MAX clusters, QEMU's limit), of the
 *     image's refcount width, saturating at the width's maximum (a further
 *     reference is an overflow corruption).  A reference that reaches a
 *     cluster or more past the end of the file is a corruption and is not
 *     counted, so a pointer to 32 PB costs nothing (iotest 138).  The table
 *     grows only by the one cluster a reference may legally overhang, by
 *     what a rebuild allocates, and by at most twice its size when -r all
 *     grows the file to hold a refcount block.  It is allocated zeroed and
 *     untouched, so a huge sparse file costs address space, not memory.
 *  3. Everything read from the image is bounds-checked before use; reads
 *     past the end of the file return zeros, as QEMU reads them.  Sizes that
 *     decide an allocation are validated first (L1 <= 32 MiB, snapshot table
 *     <= 64 MiB, bitmap directory <= 64 MiB, bitmap table <= 512 MiB / cluster).
 *  4. Work is bounded by the size of the file, not by the pointers in it: an
 *     L2 table past the end of the file is all zeros and skipped; a clean L2
 *     table (no finding) referenced again is replayed, and once the replay
 *     budget is spent its further references are counted and applied at once
 *     at the end of the walk (same counts; only the order of overflow
 *     messages can differ from QEMU's).  Re-walking broken tables, unaligned
 *     L2 tables and L1 entries beyond what the file can hold draw on a fixed
 *     budget; when it runs out the check stops with an error instead of
 *     running for hours on a hostile image.
 *  5. Nothing is written unless fix says so; every write goes through
 *     repair.c (overlap-checked, caches kept coherent).
 *  6. qcow2_check_image returns -errno only when the check could not run to
 *     its end; error->message is then the line qemu-img prints with its
 *     prefix before "Check failed" ("ERROR failed to read the snapshot
 *     table: ..."), or just strerror(errno) when qemu-img prints none.
 */
#include "qcow2/check.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>

#define CHECK_FRAG_INFO 1

/* check.c invariant 4: entries that may be walked again on purpose. */
#define CHECK_REPLAY_BUDGET (UINT64_C(1) << 28)
#define CHECK_BAD_BUDGET (UINT64_C(1) << 26)
/* Lines kept in res->messages; further ones are counted, not kept.  The
 * overflow pair (two lines per reference a cluster cannot count) has its
 * own, smaller cap, so a hostile image cannot crowd out the rest. */
#define CHECK_MAX_MESSAGES 1000000u
#define CHECK_MAX_OVERFLOW_MESSAGES 10000u

/* QEMU's BME_* limits for the bitmap directory. */
#define BME_MAX_TABLE_SIZE 0x8000000u
#define BME_MAX_PHYS_SIZE 0x20000000u
#define BME_MIN_GRANULARITY_BITS 9
#define BME_MAX_GRANULARITY_BITS 31
#define BME_MAX_NAME_SIZE 1023u
#define BME_RESERVED_FLAGS 0xfffffffcu
#define BME_FLAG_IN_USE 1u
#define BME_DIR_ENTRY_SIZE 24
#define BME_TABLE_ENTRY_RESERVED_MASK UINT64_C(0xff000000000001fe)
#define BME_TABLE_ENTRY_OFFSET_MASK UINT64_C(0x00fffffffffffe00)
#define BME_TABLE_ENTRY_FLAG_ALL_ONES UINT64_C(1)

/* QEMU's cluster types (qcow2_get_cluster_type). */
typedef enum ClusterType {
    CT_UNALLOCATED,
    CT_ZERO_PLAIN,
    CT_ZERO_ALLOC,
    CT_NORMAL,
    CT_COMPRESSED,
} ClusterType;

/* What an L2 table gave the first time it was walked (invariant 4). */
typedef struct L2Memo {
    bool clean;
    int64_t allocated, fragmented, compressed;
    uint64_t pending; /* further references not yet applied */
} L2Memo;

/* State of one calculate pass (besides Qcow2Check). */
typedef struct Walk {
    GHashTable *l2memo; /* uint64_t offset -> L2Memo */
    uint64_t replay_budget;
    uint64_t bad_budget;
    uint64_t l1_budget;
    bool deferred; /* some L2Memo has pending references */
} Walk;

void check_msg(Qcow2Check *c, const char *fmt, ...)
{
    va_list ap;

    if (c->messages->len >= CHECK_MAX_MESSAGES) {
        c->messages_dropped++;
        return;
    }
    va_start(ap, fmt);
    g_ptr_array_add(c->messages, g_strdup_vprintf(fmt, ap));
    va_end(ap);
}

/* ---- the in-memory refcount table (invariant 2) ---- */

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

    if (n > (uint64_t)INT_MAX + 2) {
        return -ENOMEM; /* QEMU's realloc would fail the same way */
    }
    bytes = refs_bytes_for(c->s, n);
    if (bytes > SIZE_MAX) {
        return -ENOMEM;
    }
    if (!c->refs) {
        /* calloc: pages nothing is counted in are never touched, so a
         * sparse file costs address space, not memory (invariant 2) */
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

/* ---- reading the image ---- */

int check_pread(Qcow2Check *c, uint64_t offset, void *buf, size_t len)
{
    size_t n = 0;

    /* invariant 3: only the part inside the file is read */
    if (offset < c->file_size) {
        n = (size_t)MIN((uint64_t)len, c->file_size - offset);
    }
    if (n < len) {
        memset((uint8_t *)buf + n, 0, len - n);
    }
    if (n == 0) {
        return 0;
    }
    int ret = blk_pread(c->file, offset, buf, n);
    return ret < 0 ? ret : 0;
}

int check_refresh_file_size(Qcow2Check *c)
{
    int64_t len = blk_getlength(c->file);

    if (len < 0) {
        return (int)len;
    }
    c->file_size = (uint64_t)len;
    /* qcow2.h invariant 7: the driver's idea of the file only grows */
    c->s->file_size = MAX(c->s->file_size, c->file_size);
    return 0;
}

/* "qcow2: Image is corrupt: ...", once per open image like QEMU's
 * non-fatal corruption events. */
static void report_corruption(Qcow2Check *c, const char *what)
{
    if (c->s->corruption_events++ == 0) {
        check_msg(c,
                  "qcow2: Image is corrupt: %s; further non-fatal corruption "
                  "events will be suppressed",
                  what);
    }
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
        g_autofree char *what = g_strdup_printf(
            "Refblock offset %#" PRIx64 " unaligned (reftable index: %#" PRIx64 ")",
            offset, index);
        report_corruption(c, what);
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

/* ---- progress ---- */

static void progress_add(Qcow2Check *c, uint64_t units)
{
    c->progress_done += units;
    if (c->progress && c->progress_total) {
        c->progress(c->progress_opaque, MIN(c->progress_done, c->progress_total),
                    c->progress_total);
    }
}

/* ---- counting references ---- */

/*
 * Count mult references to every cluster that [offset, offset + size)
 * touches (QEMU's qcow2_inc_refcounts_imrt, mult times).  Invariant 2.
 */
static int inc_refcounts_n(Qcow2Check *c, Qcow2CheckCounts *res, uint64_t offset,
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

static int inc_refcounts(Qcow2Check *c, Qcow2CheckCounts *res, uint64_t offset,
                         uint64_t size)
{
    return inc_refcounts_n(c, res, offset, size, 1);
}

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
        qcow2_cache_discard_locked(s->l2_cache, l2_offset);
    }
    res->corruptions--;
    res->corruptions_fixed++;
    return true;
}

/*
 * Walk one L2 table (QEMU's check_refcounts_l2).  mult > 1 applies the
 * increments of a clean table for mult references at once (invariant 4);
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
            ret = inc_refcounts_n(c, res, coffset, csize, mult);
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
                ret = inc_refcounts_n(c, res, offset, s->cluster_size, mult);
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

/* Charge n entries of deliberate re-walking (invariant 4). */
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

/* One reference to the L2 table at l2_offset (invariant 4). */
static int check_l2(Qcow2Check *c, Walk *w, Qcow2CheckCounts *res, uint64_t l2_offset,
                    int flags, bool active)
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

/* Apply the references counted but not yet walked (invariant 4). */
static int apply_deferred(Qcow2Check *c, Walk *w, Qcow2CheckCounts *res)
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
static int check_l1(Qcow2Check *c, Walk *w, Qcow2CheckCounts *res, uint64_t l1_offset,
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
    ret = inc_refcounts(c, res, l1_offset, bytes);
    if (ret < 0) {
        return ret;
    }
    /* Entries past the end of the file are zeros (invariant 3). */
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
        ret = inc_refcounts(c, res, l2_offset, s->cluster_size);
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
    progress_add(c, in_file);
    return 0;
}

/* ---- bitmaps (QEMU's qcow2_check_bitmaps_refcounts) ---- */

typedef struct BitmapEntry {
    uint64_t table_offset;
    uint32_t table_size;
} BitmapEntry;

/* QEMU's check_dir_entry. */
static bool bitmap_entry_ok(const Qcow2State *s, const uint8_t *e)
{
    uint64_t table_offset = load_be64(e);
    uint32_t table_size = load_be32(e + 8);
    uint32_t flags = load_be32(e + 12);
    uint8_t type = e[16];
    uint8_t gran = e[17];
    uint16_t name_size = load_be16(e + 18);
    uint64_t phys;

    if (table_size == 0 || table_offset == 0 ||
        qcow2_offset_into_cluster(s, table_offset) || table_size > BME_MAX_TABLE_SIZE ||
        gran > BME_MAX_GRANULARITY_BITS || gran < BME_MIN_GRANULARITY_BITS ||
        (flags & BME_RESERVED_FLAGS) || name_size > BME_MAX_NAME_SIZE || type != 1) {
        return false;
    }
    phys = (uint64_t)table_size * s->cluster_size;
    if (phys > BME_MAX_PHYS_SIZE) {
        return false;
    }
    /* phys <= 2^29 and gran <= 31: no overflow */
    if (!(flags & BME_FLAG_IN_USE) && s->img->size > ((phys * 8) << gran)) {
        return false;
    }
    return true;
}

/* Parse the bitmap directory (QEMU's bitmap_list_load).  NULL if broken,
 * with the reason recorded (QEMU's words). */
static GArray *load_bitmap_directory(Qcow2Check *c)
{
    Qcow2State *s = c->s;
    uint64_t size = s->ext.bitmap_directory_size;
    g_autofree uint8_t *dir = NULL;
    g_autoptr(GArray) list = g_array_new(FALSE, FALSE, sizeof(BitmapEntry));
    uint64_t pos = 0;

    /* header.c capped size at QCOW2_MAX_BITMAP_DIRECTORY_SIZE (invariant 3) */
    if (size == 0 || size > QCOW2_MAX_BITMAP_DIRECTORY_SIZE) {
        blk_error(EINVAL, "Requested bitmap directory size is %s",
                  size ? "too big" : "zero");
        return NULL;
    }
    dir = g_try_malloc(size);
    if (!dir) {
        blk_error(ENOMEM, "Failed to allocate space for bitmap directory");
        return NULL;
    }
    if (check_pread(c, s->ext.bitmap_directory_offset, dir, size) < 0) {
        blk_error(EIO, "Failed to read bitmap directory");
        return NULL;
    }
    while (pos < size) {
        const uint8_t *e = dir + pos;
        uint64_t entry_size;

        if (size - pos < BME_DIR_ENTRY_SIZE) {
            blk_error(EINVAL, "Broken bitmap directory");
            return NULL;
        }
        if (list->len >= s->ext.nb_bitmaps) {
            blk_error(EINVAL, "More bitmaps found than specified in header extension");
            return NULL;
        }
        entry_size = ROUND_UP(
            BME_DIR_ENTRY_SIZE + (uint64_t)load_be16(e + 18) + load_be32(e + 20), 8);
        if (entry_size > size - pos) {
            blk_error(EINVAL, "Broken bitmap directory");
            return NULL;
        }
        if (load_be32(e + 20) != 0) {
            blk_error(EINVAL, "Bitmap extra data is not supported");
            return NULL;
        }
        if (!bitmap_entry_ok(s, e)) {
            blk_error(EINVAL, "Bitmap '%.*s' doesn't satisfy the constraints",
                      (int)load_be16(e + 18), (const char *)e + BME_DIR_ENTRY_SIZE);
            return NULL;
        }
        BitmapEntry be = {.table_offset = load_be64(e), .table_size = load_be32(e + 8)};
        g_array_append_val(list, be);
        pos += entry_size;
    }
    if (list->len != s->ext.nb_bitmaps) {
        blk_error(EINVAL, "Less bitmaps found than specified in header extension");
        return NULL;
    }
    return g_steal_pointer(&list);
}

static int check_bitmaps(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    g_autoptr(GArray) list = NULL;
    int ret;

    if (!s->ext.has_bitmaps || s->ext.nb_bitmaps == 0) {
        return 0;
    }
    ret = inc_refcounts(c, res, s->ext.bitmap_directory_offset,
                        s->ext.bitmap_directory_size);
    if (ret < 0) {
        return ret;
    }
    list = load_bitmap_directory(c);
    if (!list) {
        res->corruptions++;
        return -EINVAL; /* the reason is recorded */
    }
    for (guint b = 0; b < list->len; b++) {
        const BitmapEntry *be = &g_array_index(list, BitmapEntry, b);
        /* table_size * cluster_size <= 512 MiB: at most 8 MiB of entries */
        uint64_t bytes = (uint64_t)be->table_size * 8;
        g_autofree uint8_t *table = NULL;

        ret = inc_refcounts(c, res, be->table_offset, bytes);
        if (ret < 0) {
            return ret;
        }
        table = g_try_malloc(bytes);
        if (!table) {
            res->corruptions++;
            return blk_error(ENOMEM, "%s", g_strerror(ENOMEM));
        }
        ret = check_pread(c, be->table_offset, table, bytes);
        for (uint32_t i = 0; ret == 0 && i < be->table_size; i++) {
            uint64_t e = load_be64(table + 8 * (uint64_t)i);
            uint64_t off = e & BME_TABLE_ENTRY_OFFSET_MASK;
            if ((e & BME_TABLE_ENTRY_RESERVED_MASK) ||
                (off && ((e & BME_TABLE_ENTRY_FLAG_ALL_ONES) ||
                         qcow2_offset_into_cluster(s, off)))) {
                ret = -EINVAL;
            }
        }
        if (ret < 0) {
            res->corruptions++;
            return blk_error(-ret,
                             "Could not read bitmap_table table from image for "
                             "bitmap %u: %s",
                             b, g_strerror(-ret));
        }
        for (uint32_t i = 0; i < be->table_size; i++) {
            uint64_t off =
                load_be64(table + 8 * (uint64_t)i) & BME_TABLE_ENTRY_OFFSET_MASK;
            if (off) {
                ret = inc_refcounts(c, res, off, s->cluster_size);
                if (ret < 0) {
                    return ret;
                }
            }
        }
    }
    return 0;
}

/* ---- refcount blocks (QEMU's check_refblocks) ---- */

static int check_refblocks(Qcow2Check *c, Qcow2CheckCounts *res, bool *rebuild)
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
            /* Grow the file to hold the block, as QEMU does, unless that
             * would more than double the clusters to count (invariant 2:
             * a pointer far past the end costs nothing; the rebuild then
             * replaces the block instead).  QEMU grows the file in any case. */
            ret = -EFBIG;
            if (cluster < 2 * c->nb_clusters + 1024) {
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
            ret = inc_refcounts(c, res, offset, s->cluster_size);
            if (ret < 0) {
                return ret;
            }
            continue;
        }
        if (offset != 0) {
            ret = inc_refcounts(c, res, offset, s->cluster_size);
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

/* ---- calculate: every reference (QEMU's calculate_refcounts) ---- */

static int calculate_refcounts(Qcow2Check *c, Qcow2CheckCounts *res, bool *rebuild)
{
    Qcow2State *s = c->s;
    Walk w = {
        .l2memo = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free),
        .replay_budget = c->replay_budget,
        .bad_budget = c->bad_budget,
        /* L1 tables of a sane image do not overlap: at most the file */
        .l1_budget = c->file_size / 8 + c->bad_budget,
    };
    int ret;

    ret = check_refresh_file_size(c);
    if (ret < 0) {
        res->check_errors++;
        goto out;
    }
    if (!c->refs) {
        ret = check_refs_resize(c, c->nb_clusters);
        if (ret < 0) {
            res->check_errors++;
            goto out;
        }
    }

    /* header */
    ret = inc_refcounts(c, res, 0, s->cluster_size);
    if (ret < 0) {
        goto out;
    }
    /* active L1 (validated at open: <= 32 MiB) */
    ret = check_l1(c, &w, res, s->l1_table_offset, s->l1_size, CHECK_FRAG_INFO, true);
    if (ret < 0) {
        goto out;
    }
    if (qcow2_has_data_file(s) && s->nb_snapshots) {
        check_msg(c, "ERROR %" PRIu32 " snapshots in image with data file",
                  s->nb_snapshots);
        res->corruptions++;
    }
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        const Qcow2Snapshot *sn = &s->snapshots[i];

        if (qcow2_offset_into_cluster(s, sn->l1_table_offset)) {
            check_msg(c,
                      "ERROR snapshot %s (%s) l1_offset=%#" PRIx64 ": L1 table is not "
                      "cluster aligned; snapshot table entry corrupted",
                      sn->id_str, sn->name, sn->l1_table_offset);
            res->corruptions++;
            continue;
        }
        if (sn->l1_size > QCOW2_MAX_L1_BYTES / 8) {
            check_msg(c,
                      "ERROR snapshot %s (%s) l1_size=%#" PRIx32 ": L1 table is too "
                      "large; snapshot table entry corrupted",
                      sn->id_str, sn->name, sn->l1_size);
            res->corruptions++;
            continue;
        }
        ret = check_l1(c, &w, res, sn->l1_table_offset, sn->l1_size, 0, false);
        if (ret < 0) {
            goto out;
        }
    }
    ret = apply_deferred(c, &w, res);
    if (ret < 0) {
        goto out;
    }
    ret = inc_refcounts(c, res, s->snapshots_offset, s->snapshots_size);
    if (ret < 0) {
        goto out;
    }
    ret = inc_refcounts(c, res, s->refcount_table_offset, s->refcount_table_size * 8);
    if (ret < 0) {
        goto out;
    }
    if (s->ext.has_crypto) {
        ret = inc_refcounts(c, res, s->ext.crypto_offset, s->ext.crypto_length);
        if (ret < 0) {
            goto out;
        }
    }
    ret = check_bitmaps(c, res);
    if (ret < 0) {
        goto out;
    }
    ret = check_refblocks(c, res, rebuild);

out:
    g_hash_table_destroy(w.l2memo);
    return ret;
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

static void compare_refcounts(Qcow2Check *c, Qcow2CheckCounts *res, unsigned fix,
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
                progress_add(c, end - i);
                i = end - 1;
                continue;
            }
            progress_add(c, end - i);
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

/* ---- OFLAG_COPIED (QEMU's check_oflag_copied) ---- */

static int check_oflag_copied(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    uint8_t *l2 = c->l2_buf;
    /* L2 offset -> SEEN_CLEAN or SEEN_BROKEN (invariant 4) */
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

        /* invariant 4: a table found clean (or repaired) is clean again;
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
                qcow2_cache_discard_locked(s->l2_cache, l2_offset);
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

/* ---- the refcount part (QEMU's qcow2_check_refcounts) ---- */

static int check_refcounts(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    Qcow2CheckCounts pre;
    uint64_t highest = 0;
    bool rebuild = false;
    int ret;

    ret = check_refresh_file_size(c);
    if (ret < 0) {
        res->check_errors++;
        return ret;
    }
    c->nb_clusters = DIV_ROUND_UP(c->file_size, s->cluster_size);
    if (c->nb_clusters > (uint64_t)INT_MAX) {
        res->check_errors++;
        return blk_error(EFBIG, "%s", g_strerror(EFBIG));
    }
    res->total_clusters = (int64_t)DIV_ROUND_UP(s->img->size, s->cluster_size);
    c->progress_total = c->nb_clusters + s->l1_size;
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        c->progress_total += MIN(s->snapshots[i].l1_size, QCOW2_MAX_L1_BYTES / 8);
    }

    ret = calculate_refcounts(c, res, &rebuild);
    if (ret < 0) {
        return ret;
    }

    /* Overwritten below when something gets fixed without a rebuild. */
    pre = *res;
    compare_refcounts(c, res, 0, &rebuild, &highest);

    if (rebuild && (c->fix & BLK_CHECK_FIX_ERRORS)) {
        Qcow2CheckCounts old = *res;
        int64_t fresh_leaks = 0;

        check_msg(c, "Rebuilding refcount structure");
        ret = repair_rebuild_refcounts(c, res);
        if (ret < 0) {
            return ret;
        }
        res->corruptions = 0;
        res->leaks = 0;

        /* The old structures are now leaked: count again. */
        rebuild = false;
        memset(c->refs, 0, (size_t)c->refs_bytes);
        c->refs_high = 0;
        res->allocated_clusters = 0;
        res->fragmented_clusters = 0;
        res->compressed_clusters = 0;
        ret = calculate_refcounts(c, res, &rebuild);
        if (ret < 0) {
            return ret;
        }
        if (c->fix & BLK_CHECK_FIX_LEAKS) {
            Qcow2CheckCounts saved = *res;

            memset(res, 0, sizeof(*res));
            compare_refcounts(c, res, BLK_CHECK_FIX_LEAKS, &rebuild, &highest);
            if (rebuild) {
                check_msg(c, "ERROR rebuilt refcount structure is still broken");
            }
            /* leaks the rebuild itself made and could not fix */
            fresh_leaks = res->leaks;
            *res = saved;
        }
        if (res->corruptions < old.corruptions) {
            res->corruptions_fixed += old.corruptions - res->corruptions;
        }
        if (res->leaks < old.leaks) {
            res->leaks_fixed += old.leaks - res->leaks;
        }
        res->leaks += fresh_leaks;
    } else if (c->fix) {
        if (rebuild) {
            check_msg(c, "ERROR need to rebuild refcount structures");
            res->check_errors++;
            return blk_error(EIO, "%s", g_strerror(EIO));
        }
        if (res->leaks || res->corruptions) {
            *res = pre;
            compare_refcounts(c, res, c->fix, &rebuild, &highest);
        }
    }

    ret = check_oflag_copied(c, res);
    if (ret < 0) {
        return ret;
    }
    res->image_end_offset = (int64_t)((highest + 1) << s->cluster_bits);
    return 0;
}

/* ---- entry point ---- */

static void result_add(BlkCheckResult *res, const Qcow2CheckCounts *in, bool alloc_info)
{
    res->corruptions += in->corruptions;
    res->leaks += in->leaks;
    res->check_errors += in->check_errors;
    res->corruptions_fixed += in->corruptions_fixed;
    res->leaks_fixed += in->leaks_fixed;
    if (alloc_info) {
        res->image_end_offset = in->image_end_offset;
        res->total_clusters = in->total_clusters;
        res->allocated_clusters = in->allocated_clusters;
        res->fragmented_clusters = in->fragmented_clusters;
        res->compressed_clusters = in->compressed_clusters;
    }
}

static int check_locked(Qcow2Check *c, BlkCheckResult *result)
{
    Qcow2CheckCounts snap = {0}, refs = {0};
    int ret;

    ret = repair_read_snapshot_table(c, &snap);
    if (ret < 0) {
        result_add(result, &snap, false);
        return ret;
    }
    ret = check_refcounts(c, &refs);
    result_add(result, &refs, true);
    if (ret < 0) {
        result_add(result, &snap, false);
        return ret;
    }
    ret = repair_fix_snapshot_table(c, &snap);
    result_add(result, &snap, false);
    if (ret < 0) {
        return ret;
    }
    if (c->fix && result->check_errors == 0 && result->corruptions == 0) {
        /* clean and consistent now (QEMU's mark_clean, mark_consistent) */
        ret = repair_mark_consistent(c);
    }
    return ret;
}

int qcow2_check_image_opts(BlkNode *img, BlkCheckResult *res, unsigned fix,
                           const Qcow2CheckOptions *opts)
{
    Qcow2State *s = img->opaque;
    Qcow2Check c = {
        .s = s,
        .file = img->file,
        .fix = fix & (BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS),
        .progress = opts ? opts->progress : NULL,
        .progress_opaque = opts ? opts->progress_opaque : NULL,
        .replay_budget =
            opts && opts->replay_budget ? opts->replay_budget : CHECK_REPLAY_BUDGET,
        .bad_budget = opts && opts->bad_budget ? opts->bad_budget : CHECK_BAD_BUDGET,
    };
    int ret;

    if (!res->messages) {
        res->messages = g_ptr_array_new_with_free_func(g_free);
    }
    c.messages = res->messages;
    if (c.fix && img->read_only) {
        return blk_error(EACCES, "Image '%s' is read-only; cannot repair", img->filename);
    }
    c.l2_buf = g_malloc(s->cluster_size);
    qcow2_lock(s);
    blk_error_clear();
    ret = check_refresh_file_size(&c);
    if (ret == 0 && c.fix) {
        /* nothing may be pending in the caches before tables are written
         * behind their back (check.c invariant 5) */
        ret = repair_flush_refcounts(&c);
    }
    if (ret == 0) {
        ret = check_locked(&c, res);
    }
    if (ret == 0 && c.fix) {
        ret = repair_flush_refcounts(&c);
    }
    if (c.overflow_dropped) {
        g_ptr_array_add(c.messages,
                        g_strdup_printf("(%" PRIu64 " further overflow errors were not "
                                        "printed)",
                                        c.overflow_dropped));
    }
    if (c.messages_dropped) {
        g_ptr_array_add(c.messages, g_strdup_printf("(%u further messages were not kept)",
                                                    c.messages_dropped));
    }
    g_free(c.refs);
    g_free(c.l2_buf);
    qcow2_unlock(s);
    return ret;
}

int qcow2_check_image(BlkNode *img, BlkCheckResult *res, unsigned fix)
{
    Qcow2CheckOptions o = {.progress = res->progress,
                           .progress_opaque = res->progress_opaque};
    return qcow2_check_image_opts(img, res, fix, &o);
}
