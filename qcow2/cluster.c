/*
 * qcow2/cluster.c: guest offset -> host mapping through the L1 and L2
 * tables (standard and extended L2 entries).
 *
 * Owns: the L2 table cache set-up, the decoding and validation of every
 * L1 and L2 entry used for a request, and the grouping of consecutive
 * (sub)clusters of the same kind into one extent, the way QEMU's
 * qcow2_get_host_offset() does it (same extents, same pnum).
 *
 * Invariants (cited as "cluster.c invariant N"):
 *  1. Every L1/L2 entry that contributes to an answer has been validated:
 *     no reserved bits, table and data offsets cluster aligned, L2 tables
 *     starting inside the file (the part of one past its end reads as
 *     zeros, as QEMU reads it: 060's L2 table that is the L1 table, the
 *     file's last 8 bytes; one wholly past the end would have a write-back
 *     grow the file to anywhere), zero flags only in v3, compressed
 *     entries only without a data file, subcluster bitmaps consistent,
 *     host offset == guest offset with an external data file.  A bad entry is reported as
 *     a corruption naming the entry and its location.  (A discard may drop
 *     an entry whose only fault is an unaligned host offset, leaking the
 *     cluster: zero.c invariant 7, qcow2_l2_entry_valid_to_drop.)
 *  2. An extent never crosses an L2 slice boundary (invariant 6), and a
 *     compressed extent never crosses a cluster boundary.
 *  3. An extent covers (sub)clusters of a single type; for types with a
 *     host offset (normal, zero-alloc, unallocated-alloc) the host clusters
 *     are contiguous, so host_offset + n maps guest offset + n.
 *  4. A bad entry after the first one ends the extent instead of failing it:
 *     the next lookup starts at that entry and reports it (so pnum matches
 *     QEMU's, and good data before a bad entry stays readable).
 *  5. Called with the metadata lock held; the L2 table reference is
 *     dropped before returning.
 *  6. The L2 cache holds slices, QEMU's l2-cache-entry-size: l2_slice_size
 *     consecutive entries of one table (the whole table by default), keyed
 *     by the slice's host offset; a miss reads one slice, a write-back
 *     writes one slice; the cache has l2-cache-size / slice bytes entries
 *     (at least QCOW2_MIN_L2_CACHE_ENTRIES).  Whoever takes an L2 reference
 *     (qcow2_get_l2_*) sees one slice and its index in it; a loop over a
 *     whole table walks it slice by slice; a table that leaves the image or
 *     is rewritten behind the cache has all its slices dropped.
 */
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

int qcow2_read_table(BlkNode *file, uint64_t offset, uint64_t count, uint64_t **out)
{
    uint64_t bytes;
    int ret;

    *out = NULL;
    if (qcow2_mul(count, 8, &bytes) || bytes > SIZE_MAX) {
        return blk_error(EFBIG, "table of %" PRIu64 " entries is too large", count);
    }
    uint64_t *t = g_try_malloc(MAX(bytes, 1));
    if (!t) {
        return blk_error(ENOMEM, "cannot allocate %" PRIu64 " bytes for a table", bytes);
    }
    if (bytes) {
        ret = blk_pread(file, offset, t, bytes);
        if (ret < 0) {
            g_free(t);
            return ret;
        }
    }
    for (uint64_t i = 0; i < count; i++) {
        t[i] = GUINT64_FROM_BE(t[i]);
    }
    *out = t;
    return 0;
}

/* An L2 table read into the cache: QEMU's l2_load step. */
static int l2_cache_read(void *opaque, uint64_t offset, void *buf, size_t len)
{
    Qcow2State *s = opaque;

    blk_event(s->img->file, BLKEV_L2_LOAD);
    return qcow2_cache_read_file(opaque, offset, buf, len);
}

int qcow2_l2_cache_init(Qcow2State *s, uint64_t l2_bytes)
{
    const Qcow2CacheOps ops = {.read = l2_cache_read,
                               .write = qcow2_l2_cache_write,
                               .flush = qcow2_cache_flush_file,
                               .is_durable = qcow2_l2_cache_is_durable,
                               .opaque = s};
    uint64_t slice = qcow2_l2_slice_bytes(s);
    uint64_t entries = MAX(l2_bytes / slice, QCOW2_MIN_L2_CACHE_ENTRIES); /* inv 6 */

    s->l2_cache = qcow2_cache_new((unsigned)MIN(entries, UINT32_MAX), slice, &ops);
    return 0;
}

void qcow2_l2_cache_discard_table_locked(Qcow2State *s, uint64_t l2_offset)
{
    qcow2_cache_discard_range_locked(s->l2_cache, l2_offset, s->cluster_size); /* inv 6 */
}

static inline uint64_t l2_entry_at(const Qcow2State *s, const uint8_t *l2, uint64_t idx)
{
    return load_be64(l2 + idx * s->l2_entry_size);
}

static inline uint64_t l2_bitmap_at(const Qcow2State *s, const uint8_t *l2, uint64_t idx)
{
    return s->extended_l2 ? load_be64(l2 + idx * s->l2_entry_size + 8) : 0;
}

/* Low 32 bits of the bitmap: allocated subclusters; high: zero subclusters. */
#define SUB_ALLOC(i) (UINT64_C(1) << (i))
#define SUB_ZERO(i) (UINT64_C(1) << ((i) + 32))
#define SUB_ALLOC_RANGE(from, to)                                                        \
    (((UINT64_C(1) << (to)) - 1) & ~((UINT64_C(1) << (from)) - 1))

static inline unsigned ctz32_or_32(uint32_t v)
{
    return v ? (unsigned)__builtin_ctz(v) : 32;
}

static inline unsigned cto32(uint32_t v)
{
    return ctz32_or_32(~v);
}

/* Why an entry cannot be used (cluster.c invariant 1). */
typedef enum EntryFault {
    FAULT_NONE,
    FAULT_RESERVED,
    FAULT_ZERO_V2,
    FAULT_COMPRESSED_DATA_FILE,
    FAULT_COMPRESSED_OFFSET,
    FAULT_COMPRESSED_BITMAP,
    FAULT_BITMAP,
    FAULT_UNALIGNED,
    FAULT_DATA_FILE_OFFSET,
} EntryFault;

/*
 * Type of subcluster sc of an entry, and how many subclusters from sc on
 * share it (within this cluster).  Returns FAULT_NONE or the fault.
 */
static EntryFault classify(const Qcow2State *s, uint64_t entry, uint64_t bitmap,
                           unsigned sc, uint64_t guest_cluster, Qcow2SubclusterType *type,
                           unsigned *count)
{
    uint64_t host = entry & QCOW2_L2E_OFFSET_MASK;
    unsigned spc = s->subclusters_per_cluster;

    if (entry & QCOW2_OFLAG_COMPRESSED) {
        if (qcow2_has_data_file(s)) {
            return FAULT_COMPRESSED_DATA_FILE;
        }
        /* Host offset bits above 55 must be 0 (spec, small clusters). */
        if ((entry & s->cluster_offset_mask) >> 56) {
            return FAULT_COMPRESSED_OFFSET;
        }
        if (s->extended_l2 && bitmap) {
            return FAULT_COMPRESSED_BITMAP;
        }
        *type = QCOW2_SC_COMPRESSED;
        *count = spc - sc;
        return FAULT_NONE;
    }
    if (entry & QCOW2_L2E_STD_RESERVED_MASK) {
        return FAULT_RESERVED;
    }

    bool allocated =
        host != 0 || (qcow2_has_data_file(s) && (entry & QCOW2_OFLAG_COPIED));
    if (!s->extended_l2) {
        if (entry & QCOW2_OFLAG_ZERO) {
            if (s->qcow_version < 3) {
                return FAULT_ZERO_V2;
            }
            *type = host ? QCOW2_SC_ZERO_ALLOC : QCOW2_SC_ZERO_PLAIN;
        } else {
            *type = allocated ? QCOW2_SC_NORMAL : QCOW2_SC_UNALLOCATED_PLAIN;
        }
        *count = 1;
    } else {
        uint32_t alloc = (uint32_t)bitmap, zero = (uint32_t)(bitmap >> 32);
        if (allocated) {
            if (alloc & zero) {
                return FAULT_BITMAP;
            }
            if (zero & (1u << sc)) {
                *type = QCOW2_SC_ZERO_ALLOC;
                *count = cto32(zero | (uint32_t)SUB_ALLOC_RANGE(0, sc)) - sc;
            } else if (alloc & (1u << sc)) {
                *type = QCOW2_SC_NORMAL;
                *count = cto32(alloc | (uint32_t)SUB_ALLOC_RANGE(0, sc)) - sc;
            } else {
                *type = QCOW2_SC_UNALLOCATED_ALLOC;
                *count =
                    ctz32_or_32((alloc | zero) & ~(uint32_t)SUB_ALLOC_RANGE(0, sc)) - sc;
            }
        } else {
            if (alloc) {
                return FAULT_BITMAP; /* allocated subclusters without a host cluster */
            }
            if (zero & (1u << sc)) {
                *type = QCOW2_SC_ZERO_PLAIN;
                *count = cto32(zero | (uint32_t)SUB_ALLOC_RANGE(0, sc)) - sc;
            } else {
                *type = QCOW2_SC_UNALLOCATED_PLAIN;
                *count = ctz32_or_32(zero & ~(uint32_t)SUB_ALLOC_RANGE(0, sc)) - sc;
            }
        }
    }
    if (*type == QCOW2_SC_NORMAL || *type == QCOW2_SC_ZERO_ALLOC ||
        *type == QCOW2_SC_UNALLOCATED_ALLOC) {
        if (host & (s->cluster_size - 1)) {
            return FAULT_UNALIGNED;
        }
        if (qcow2_has_data_file(s) && host != guest_cluster) {
            return FAULT_DATA_FILE_OFFSET;
        }
    }
    return FAULT_NONE;
}

static int report_fault_locked(Qcow2State *s, EntryFault f, uint64_t entry,
                               uint64_t bitmap, uint64_t l2_offset, uint64_t l2_index,
                               uint64_t guest_cluster)
{
    uint64_t host = entry & QCOW2_L2E_OFFSET_MASK;

    switch (f) {
    case FAULT_RESERVED:
        return qcow2_corrupt_locked(s,
                                    "L2 entry 0x%016" PRIx64 " has reserved bits set "
                                    "(L2 offset: %#" PRIx64 ", L2 index: %#" PRIx64 ")",
                                    entry, l2_offset, l2_index);
    case FAULT_ZERO_V2:
        return qcow2_corrupt_locked(s,
                                    "Zero cluster entry found in pre-v3 image "
                                    "(L2 offset: %#" PRIx64 ", L2 index: %#" PRIx64 ")",
                                    l2_offset, l2_index);
    case FAULT_COMPRESSED_DATA_FILE:
        return qcow2_corrupt_locked(s,
                                    "Compressed cluster entry found in image with "
                                    "external data file (L2 offset: %#" PRIx64
                                    ", L2 index: %#" PRIx64 ")",
                                    l2_offset, l2_index);
    case FAULT_COMPRESSED_OFFSET:
        return qcow2_corrupt_locked(s,
                                    "Compressed cluster entry 0x%016" PRIx64
                                    " has a host offset beyond 2^56 (L2 offset: %#" PRIx64
                                    ", L2 index: %#" PRIx64 ")",
                                    entry, l2_offset, l2_index);
    case FAULT_COMPRESSED_BITMAP:
        return qcow2_corrupt_locked(s,
                                    "Compressed cluster entry has a non-zero subcluster "
                                    "bitmap 0x%016" PRIx64 " (L2 offset: %#" PRIx64
                                    ", L2 index: %#" PRIx64 ")",
                                    bitmap, l2_offset, l2_index);
    case FAULT_BITMAP:
        return qcow2_corrupt_locked(s,
                                    "Invalid subcluster bitmap 0x%016" PRIx64
                                    " for L2 entry 0x%016" PRIx64 " (L2 offset: %#" PRIx64
                                    ", L2 index: %#" PRIx64 ")",
                                    bitmap, entry, l2_offset, l2_index);
    case FAULT_UNALIGNED:
        return qcow2_corrupt_locked(s,
                                    "Cluster allocation offset 0x%" PRIx64
                                    " unaligned (L2 offset: %#" PRIx64
                                    ", L2 index: %#" PRIx64 ")",
                                    host, l2_offset, l2_index);
    case FAULT_DATA_FILE_OFFSET:
        return qcow2_corrupt_locked(s,
                                    "External data file host cluster offset 0x%" PRIx64
                                    " does not match guest cluster offset: 0x%" PRIx64
                                    " (L2 index: %#" PRIx64 ")",
                                    host, guest_cluster, l2_index);
    case FAULT_NONE:
        break;
    }
    g_assert_not_reached();
}

bool qcow2_l2_entry_valid(const Qcow2State *s, uint64_t entry, uint64_t bitmap,
                          uint64_t guest_cluster, Qcow2SubclusterType *type)
{
    unsigned count;
    return classify(s, entry, bitmap, 0, guest_cluster, type, &count) == FAULT_NONE;
}

bool qcow2_l2_entry_valid_to_drop(const Qcow2State *s, uint64_t entry, uint64_t bitmap,
                                  uint64_t guest_cluster, Qcow2SubclusterType *type,
                                  bool *unaligned)
{
    unsigned count;
    EntryFault f = classify(s, entry, bitmap, 0, guest_cluster, type, &count);

    *unaligned = f == FAULT_UNALIGNED; /* classify() has set *type by then */
    return f == FAULT_NONE || f == FAULT_UNALIGNED;
}

int qcow2_l2_entry_type_locked(Qcow2State *s, uint64_t entry, uint64_t bitmap,
                               unsigned sc, uint64_t l2_offset, uint64_t l2_index,
                               uint64_t guest_cluster, Qcow2SubclusterType *type,
                               unsigned *count)
{
    EntryFault f = classify(s, entry, bitmap, sc, guest_cluster, type, count);

    if (f != FAULT_NONE) {
        return report_fault_locked(s, f, entry, bitmap, l2_offset, l2_index,
                                   guest_cluster);
    }
    return 0;
}

/* Validate the L1 entry for l1_index and return its L2 table offset (0:
 * unallocated).  cluster.c invariant 1. */
int qcow2_l1_entry_locked(Qcow2State *s, uint64_t l1_index, uint64_t *l2_offset)
{
    uint64_t e = s->l1_table[l1_index];

    *l2_offset = e & QCOW2_L1E_OFFSET_MASK;
    if (e & QCOW2_L1E_RESERVED_MASK) {
        return qcow2_corrupt_locked(s,
                                    "L1 entry 0x%016" PRIx64 " has reserved bits set "
                                    "(L1 index: %#" PRIx64 ")",
                                    e, l1_index);
    }
    if (*l2_offset == 0) {
        return 0;
    }
    if (qcow2_offset_into_cluster(s, *l2_offset)) {
        return qcow2_corrupt_locked(s,
                                    "L2 table offset 0x%" PRIx64 " unaligned "
                                    "(L1 index: %#" PRIx64 ")",
                                    *l2_offset, l1_index);
    }
    if (*l2_offset >= s->file_size) { /* invariant 1: starts inside the file */
        return qcow2_corrupt_locked(s,
                                    "L2 table offset 0x%" PRIx64 " (L1 index: %#" PRIx64
                                    ") is beyond the end of the file (%" PRIu64 " bytes)",
                                    *l2_offset, l1_index, s->file_size);
    }
    return 0;
}

int qcow2_get_host_offset_locked(Qcow2State *s, uint64_t offset, uint64_t bytes,
                                 Qcow2Mapping *m)
{
    uint64_t in_cluster = qcow2_offset_into_cluster(s, offset);
    uint64_t l2_index = qcow2_l2_slice_index(s, offset);
    uint64_t l1_index = offset >> (s->cluster_bits + s->l2_bits);
    /* Up to the end of this L2 slice (cluster.c invariant 2); <= 2^39. */
    uint64_t available = (s->l2_slice_size - l2_index) << s->cluster_bits;
    uint64_t needed, l2_offset;
    uint8_t *l2 = NULL;
    int ret;

    g_assert(bytes > 0);
    if (qcow2_add(bytes, in_cluster, &needed) || needed > available) {
        needed = available;
    }
    m->type = QCOW2_SC_UNALLOCATED_PLAIN;
    m->host_offset = 0;

    if (l1_index >= s->l1_size) {
        goto out;
    }
    ret = qcow2_l1_entry_locked(s, l1_index, &l2_offset);
    if (ret < 0) {
        return ret;
    }
    if (l2_offset == 0) {
        goto out;
    }
    ret = qcow2_cache_get_locked(s->l2_cache, qcow2_l2_slice_offset(s, l2_offset, offset),
                                 (void **)&l2); /* invariant 6 */
    if (ret < 0) {
        return ret;
    }

    uint64_t nb_clusters = (needed + s->cluster_size - 1) >> s->cluster_bits;
    unsigned sc_index =
        (unsigned)((offset >> s->subcluster_bits) & (s->subclusters_per_cluster - 1));
    uint64_t guest_cluster = offset - in_cluster;
    uint64_t count = 0, expected = 0;
    Qcow2SubclusterType first_type = QCOW2_SC_UNALLOCATED_PLAIN;
    uint64_t entry0 = 0;

    for (uint64_t i = 0; i < nb_clusters; i++) {
        unsigned first_sc = i == 0 ? sc_index : 0;
        uint64_t e = l2_entry_at(s, l2, l2_index + i);
        uint64_t bm = l2_bitmap_at(s, l2, l2_index + i);
        uint64_t gc = guest_cluster + (i << s->cluster_bits);
        Qcow2SubclusterType t;
        unsigned n;
        EntryFault f = classify(s, e, bm, first_sc, gc, &t, &n);

        if (f != FAULT_NONE) {
            if (i == 0) {
                ret = report_fault_locked(s, f, e, bm, l2_offset, l2_index, gc);
                qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
                return ret;
            }
            break; /* cluster.c invariant 4 */
        }
        if (i == 0) {
            first_type = t;
            entry0 = e;
            expected = e & QCOW2_L2E_OFFSET_MASK;
            if (t == QCOW2_SC_COMPRESSED) {
                count = n;
                break; /* cluster.c invariant 2 */
            }
        } else if (t != first_type) {
            break;
        } else if (t == QCOW2_SC_NORMAL || t == QCOW2_SC_ZERO_ALLOC ||
                   t == QCOW2_SC_UNALLOCATED_ALLOC) {
            expected += s->cluster_size; /* cluster.c invariant 3 */
            if (expected != (e & QCOW2_L2E_OFFSET_MASK)) {
                break;
            }
        }
        count += n;
        if (first_sc + n < s->subclusters_per_cluster) {
            break; /* type changes inside this cluster */
        }
    }
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2);

    m->type = first_type;
    switch (first_type) {
    case QCOW2_SC_COMPRESSED:
        m->host_offset = entry0;
        break;
    case QCOW2_SC_NORMAL:
    case QCOW2_SC_ZERO_ALLOC:
    case QCOW2_SC_UNALLOCATED_ALLOC:
        m->host_offset = (entry0 & QCOW2_L2E_OFFSET_MASK) + in_cluster;
        break;
    default:
        break;
    }
    available = (count + sc_index) << s->subcluster_bits;

out:
    if (available > needed) {
        available = needed;
    }
    m->bytes = available - in_cluster;
    return 0;
}
