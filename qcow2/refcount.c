/*
 * qcow2/refcount.c: reading reference counts (refcount table + refcount
 * blocks of 1..64-bit entries), for check, the write path and the
 * metadata-preallocation heuristic of block status.
 *
 * Owns: the in-memory refcount table, the refcount block cache, the
 * decoding and encoding of refcount block entries of every width, and
 * finding the last cluster in use (the write side, allocation and updates,
 * is alloc.c).
 *
 * Invariants (cited as "refcount.c invariant N"):
 *  1. refcount_bits = 1 << refcount_order, order 0..6 (header.c checked).
 *     Entries narrower than a byte are packed LSB first: entry i of a block
 *     is bits (i % per_byte) * width .. of byte i / per_byte.  Entries of
 *     8..64 bits are big-endian.
 *  2. A cluster whose reftable index is past the table, or whose reftable
 *     entry is 0, has refcount 0.
 *  3. A reftable entry is used only when it has no reserved bits, is cluster
 *     aligned and its refcount block lies inside the file; otherwise the
 *     lookup is a corruption naming the reftable index.
 *  4. Called with the metadata lock held (_locked); the refblock reference
 *     is dropped before returning.
 *  5. Where QEMU takes a refcount block straight from its cache, without
 *     looking at the reftable entry first (its shrink, alloc-refmeta.c), an
 *     unaligned block offset is the cache's fatal corruption, in QEMU's
 *     words: "Cannot get entry from refcount block cache: Offset .. is
 *     unaligned" (qcow2_refblock_unaligned_locked); everywhere else it is
 *     invariant 3's, naming the reftable index.
 */
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

int qcow2_refcount_init(Qcow2State *s, uint64_t refcount_cache_bytes)
{
    const Qcow2CacheOps ops = {.read = qcow2_cache_read_file,
                               .write = qcow2_refblock_cache_write,
                               .flush = qcow2_cache_flush_file,
                               .opaque = s};
    uint64_t entries =
        MAX(refcount_cache_bytes / s->cluster_size, QCOW2_MIN_REFCOUNT_CACHE_ENTRIES);
    int ret;

    s->refcount_table_offset = s->header.refcount_table_offset;
    /* <= 8 MiB / 8 entries (qcow2_header_check_tables) */
    s->refcount_table_size = (uint64_t)s->header.refcount_table_clusters
                             << (s->cluster_bits - 3);
    ret = qcow2_read_table(s->img->file, s->refcount_table_offset, s->refcount_table_size,
                           &s->refcount_table);
    if (ret < 0) {
        return ret;
    }
    qcow2_reftable_count_used(s);
    s->refcount_cache =
        qcow2_cache_new((unsigned)MIN(entries, UINT32_MAX), s->cluster_size, &ops);
    return 0;
}

void qcow2_reftable_count_used(Qcow2State *s)
{
    uint64_t n = s->refcount_table_size;

    while (n > 0 && !(s->refcount_table[n - 1] & QCOW2_REFT_OFFSET_MASK)) {
        n--;
    }
    s->refcount_table_used = n;
}

void qcow2_refcount_close(Qcow2State *s)
{
    qcow2_cache_free(s->refcount_cache);
    s->refcount_cache = NULL;
    g_free(s->refcount_table);
    s->refcount_table = NULL;
}

uint64_t qcow2_refblock_get(const void *block, uint64_t index, uint32_t refcount_order)
{
    const uint8_t *b = block;

    switch (refcount_order) {
    case 0:
    case 1:
    case 2: {
        /* refcount.c invariant 1: sub-byte entries, LSB first */
        unsigned width = 1u << refcount_order;
        unsigned per_byte = 8 / width;
        unsigned shift = (unsigned)(index % per_byte) * width;
        return (b[index / per_byte] >> shift) & ((1u << width) - 1);
    }
    case 3:
        return b[index];
    case 4:
        return load_be16(b + index * 2);
    case 5:
        return load_be32(b + index * 4);
    case 6:
        return load_be64(b + index * 8);
    default:
        g_assert_not_reached();
    }
}

void qcow2_refblock_set(void *block, uint64_t index, uint32_t refcount_order,
                        uint64_t value)
{
    uint8_t *b = block;

    switch (refcount_order) {
    case 0:
    case 1:
    case 2: {
        /* refcount.c invariant 1: sub-byte entries, LSB first */
        unsigned width = 1u << refcount_order;
        unsigned per_byte = 8 / width;
        unsigned shift = (unsigned)(index % per_byte) * width;
        uint8_t mask = (uint8_t)(((1u << width) - 1) << shift);
        b[index / per_byte] =
            (uint8_t)((b[index / per_byte] & ~mask) | ((value << shift) & mask));
        break;
    }
    case 3:
        b[index] = (uint8_t)value;
        break;
    case 4:
        store_be16(b + index * 2, (uint16_t)value);
        break;
    case 5:
        store_be32(b + index * 4, (uint32_t)value);
        break;
    case 6:
        store_be64(b + index * 8, value);
        break;
    default:
        g_assert_not_reached();
    }
}

int qcow2_refblock_offset_locked(Qcow2State *s, uint64_t table_index,
                                 uint64_t *block_offset)
{
    uint64_t entry;

    *block_offset = 0;
    if (table_index >= s->refcount_table_size) {
        return 0; /* refcount.c invariant 2 */
    }
    entry = s->refcount_table[table_index];
    if (entry & QCOW2_REFT_RESERVED_MASK) {
        return qcow2_corrupt_locked(s,
                                    "Refcount table entry 0x%016" PRIx64
                                    " has reserved bits set (reftable index: %#" PRIx64
                                    ")",
                                    entry, table_index);
    }
    entry &= QCOW2_REFT_OFFSET_MASK;
    if (entry == 0) {
        return 0;
    }
    if (qcow2_offset_into_cluster(s, entry)) {
        return qcow2_corrupt_locked(s,
                                    "Refblock offset 0x%" PRIx64 " unaligned "
                                    "(reftable index: %#" PRIx64 ")",
                                    entry, table_index);
    }
    if (!qcow2_range_within(entry, s->cluster_size, s->file_size)) {
        return qcow2_corrupt_locked(s,
                                    "Refblock offset 0x%" PRIx64
                                    " (reftable index: %#" PRIx64
                                    ") is beyond the end of the file (%" PRIu64 " bytes)",
                                    entry, table_index, s->file_size);
    }
    *block_offset = entry;
    return 0;
}

int qcow2_refblock_unaligned_locked(Qcow2State *s, uint64_t block_offset)
{
    return qcow2_corrupt_locked(
        s, "Cannot get entry from refcount block cache: Offset %#" PRIx64 " is unaligned",
        block_offset); /* invariant 5 */
}

int qcow2_get_refcount_locked(Qcow2State *s, uint64_t cluster_index, uint64_t *refcount)
{
    uint64_t table_index = cluster_index >> s->refcount_block_bits;
    uint64_t block_index = cluster_index & ((UINT64_C(1) << s->refcount_block_bits) - 1);
    uint64_t block_offset;
    void *block;
    int ret;

    *refcount = 0;
    ret = qcow2_refblock_offset_locked(s, table_index, &block_offset);
    if (ret < 0 || block_offset == 0) {
        return ret;
    }
    ret = qcow2_cache_get_locked(s->refcount_cache, block_offset, &block);
    if (ret < 0) {
        return ret;
    }
    *refcount = qcow2_refblock_get(block, block_index, s->refcount_order);
    qcow2_cache_put_locked(s->refcount_cache, &block);
    return 0;
}

/*
 * QEMU's heuristic (qcow2_detect_metadata_preallocation): the image was
 * created with preallocation=metadata if clearly more clusters are in use
 * (refcount > 0) than the file really has allocated.  Then data clusters
 * may be holes in the file, and block status asks the file whether they
 * read as zeros.  Returns 1 (yes), 0 (no) or -errno.
 */
int qcow2_detect_metadata_preallocation_locked(Qcow2State *s)
{
    int64_t real_allocation = blk_get_allocated_size(s->img->file);
    uint64_t real_clusters, threshold, end_cluster, count = 0;

    if (real_allocation < 0) {
        return (int)real_allocation;
    }
    real_clusters = (uint64_t)real_allocation / s->cluster_size;
    threshold = MAX(real_clusters * 10 / 9, real_clusters + 2);
    end_cluster = (s->file_size + s->cluster_size - 1) >> s->cluster_bits;
    for (uint64_t i = 0; i < end_cluster && count < threshold; i++) {
        uint64_t refcount;
        int ret = qcow2_get_refcount_locked(s, i, &refcount);
        if (ret < 0) {
            return ret;
        }
        count += refcount != 0;
    }
    return count >= threshold;
}

int64_t qcow2_last_used_cluster_locked(Qcow2State *s, uint64_t clusters)
{
    for (uint64_t i = clusters; i-- > 0;) {
        uint64_t refcount;
        int ret = qcow2_get_refcount_locked(s, i, &refcount);
        if (ret < 0) {
            return ret;
        }
        if (refcount) {
            return (int64_t)i;
        }
    }
    return qcow2_corrupt_locked(s, "There are no references in the refcount table.");
}

uint64_t qcow2_refblocks_for(uint64_t clusters, uint32_t cluster_bits,
                             uint32_t refcount_order, bool generous, uint64_t *table)
{
    const uint64_t per_table_cluster = (1ull << cluster_bits) / 8;
    const uint64_t per_block = (1ull << (cluster_bits + 3)) >> refcount_order;
    uint64_t t = 0, blocks = 0, n = 0, last;

    do {
        last = n;
        blocks = DIV_ROUND_UP(clusters + t + blocks, per_block);
        t = DIV_ROUND_UP(blocks, per_table_cluster);
        n = clusters + blocks + t;
        if (n == last && generous) {
            clusters += DIV_ROUND_UP(t, 2);
            n = 0;
            generous = false;
        }
    } while (n != last);
    if (table) {
        *table = t;
    }
    return blocks;
}
