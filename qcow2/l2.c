/*
 * qcow2/l2.c: L1 and L2 table updates.
 *
 * Owns: getting an L2 table ready to be modified (allocating a new one, or
 * copying a shared one), linking batches of new tables, writing L1 entries,
 * growing and shrinking the active L1 table.
 *
 * Invariants (cited as "l2.c invariant N"):
 *  1. DESIGN.md rule 2, "L2 before L1": a new L2 table (zeroed, or a copy of
 *     a shared table) is written and the file flushed -- with its own
 *     refcount on disk by then (DESIGN.md rule 1, alloc.c invariant 1) --
 *     before the L1 entry that points at it is written.  One flush covers
 *     both: the refcount cache is written, then the table, then the file
 *     is flushed once.  Only the L1 entry references the new cluster, and
 *     the table's contents (zeros, or entries whose clusters the shared
 *     table counts already) reference nothing new, so the table may reach
 *     the disk before its refcount does: a power loss between them leaves
 *     a free cluster holding a table nothing points at.  (Issue 30: one
 *     fdatasync per new table fewer, under the metadata lock, which every
 *     allocating write waits for.)  The L1 write asserts, in debug builds,
 *     that both are durable.  L1 entry writes are synced.
 *  2. A shared L2 table (its L1 entry lacks COPIED) is never modified: the
 *     first write through it copies it.  The copy keeps the entries as they
 *     are (the data clusters stay shared: every table that references them
 *     counts), its L1 entry gets COPIED, and the old table loses one
 *     reference only after the synced L1 write (alloc.c invariant 2).
 *  3. L1 growth: new size = max(min, old x 1.5 steps) unless exact, at most
 *     32 MiB of entries; the new table's refcount is flushed, the table is
 *     written with its exact length (as QEMU: the file may end inside its
 *     last cluster) and flushed, then one synced 12-byte header write
 *     switches l1_size + l1_table_offset, then the old table is freed.  The
 *     in-memory L1 switches only after the header write worked.
 *  4. Memory describes what is in the file: a failed L1 write restores the
 *     in-memory entry, drops the new table from the cache and frees its
 *     cluster; a write that worked but whose flush failed keeps the new
 *     state and frees nothing the old one references (meta.c invariant 4).
 *  5. L1 writes are 512-byte pieces of the table (QEMU writes L1 sectors),
 *     overlap-checked without the active L1 itself.
 *  6. A batch of new L2 tables (preallocation, qcow2_link_new_l2_tables_locked)
 *     keeps invariant 1 for all of them at once: their refcounts and those
 *     of the clusters they link flushed, the data those clusters need
 *     durable, the tables written whole and flushed, then the L1 sectors
 *     that point at them written and flushed.
 * All functions run with the metadata lock held.
 */
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

#define L1_ENTRIES_PER_SECTOR 64

static int write_l1_sector_locked(Qcow2State *s, uint64_t l1_index, bool sync)
{
    uint64_t start = l1_index & ~(uint64_t)(L1_ENTRIES_PER_SECTOR - 1);
    uint64_t n = MIN((uint64_t)L1_ENTRIES_PER_SECTOR, s->l1_size - start);
    uint8_t buf[L1_ENTRIES_PER_SECTOR * 8];

    g_assert(l1_index < s->l1_size);
    for (uint64_t i = 0; i < n; i++) {
        store_be64(buf + i * 8, s->l1_table[start + i]);
    }
    /* invariant 5 */
    return qcow2_write_metadata_locked(s, BLKEV_L1_UPDATE, QCOW2_OL_ACTIVE_L1,
                                       s->l1_table_offset + start * 8, buf, n * 8, sync);
}

int qcow2_write_l1_entry_locked(Qcow2State *s, uint64_t l1_index)
{
    return write_l1_sector_locked(s, l1_index, true);
}

int qcow2_grow_l1_table_locked(Qcow2State *s, uint64_t min_size, bool exact)
{
    const uint64_t max_entries = QCOW2_MAX_L1_BYTES / 8;
    uint64_t new_size, bytes, old_offset = s->l1_table_offset, old_size = s->l1_size;
    g_autofree uint8_t *buf = NULL;
    uint64_t *mem;
    uint8_t hdr[12];
    int64_t offset;
    bool written = false;
    int ret;

    if (min_size <= s->l1_size) {
        return 0;
    }
    if (min_size > max_entries) {
        return blk_error(EFBIG,
                         "qcow2: the L1 table would need %" PRIu64
                         " entries (at most %" PRIu64 ")",
                         min_size, max_entries);
    }
    new_size = min_size;
    if (!exact) { /* invariant 3 */
        new_size = MAX(s->l1_size, 1);
        while (new_size < min_size) {
            new_size = DIV_ROUND_UP(new_size * 3, 2);
        }
        new_size = MIN(new_size, max_entries);
    }
    bytes = ROUND_UP(new_size * 8, s->cluster_size);
    blk_event(s->img->file, BLKEV_L1_GROW_ALLOC); /* QEMU's l1_grow_alloc_table */
    offset = qcow2_alloc_clusters_locked(s, bytes >> s->cluster_bits);
    if (offset < 0) {
        return (int)offset;
    }
    qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
    if (offset == 0) {
        return qcow2_corrupt_locked(s, "Preventing invalid allocation of L1 table at "
                                       "offset 0");
    }
    ret = qcow2_cache_flush_locked(s->refcount_cache);
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    if (ret < 0) {
        goto fail;
    }
    buf = g_malloc0(new_size * 8);
    for (uint64_t i = 0; i < s->l1_size; i++) {
        store_be64(buf + i * 8, s->l1_table[i]);
    }
    /* invariant 3: its exact length; the rest of its last cluster is not
     * part of it */
    ret = qcow2_write_metadata_locked(s, BLKEV_L1_GROW, 0, (uint64_t)offset, buf,
                                      new_size * 8, true);
    if (ret < 0) {
        goto fail;
    }
    store_be32(hdr, (uint32_t)new_size);
    store_be64(hdr + 4, (uint64_t)offset);
    qcow2_assert_refcounts_durable_locked(s, "l2.c invariant 3");
    qcow2_assert_durable(s->img->file, s->table_gen, "l2.c invariant 3");
    ret = qcow2_write_header_ex_locked(s, BLKEV_L1_GROW_ACTIVATE, QCOW2_HDR_L1_SIZE, hdr,
                                       sizeof(hdr), &written);
    if (!written) {
        goto fail;
    }
    /* The file names the new table now (meta.c invariant 4). */
    mem = g_new0(uint64_t, new_size);
    memcpy(mem, s->l1_table, old_size * 8);
    g_free(s->l1_table);
    s->l1_table = mem;
    s->l1_size = (uint32_t)new_size;
    s->l1_table_offset = (uint64_t)offset;
    if (ret == 0 && old_size > 0) {
        qcow2_free_clusters_locked(s, old_offset, old_size * 8);
    }
    return ret;

fail : {
    bool had_error = blk_error_mark();
    qcow2_free_clusters_locked(s, (uint64_t)offset, bytes);
    blk_error_unwind(had_error);
    return ret;
}
}

int qcow2_shrink_l1_table_locked(Qcow2State *s, uint64_t new_size)
{
    g_autofree uint8_t *zeros = NULL;
    int ret;

    if (new_size >= s->l1_size) {
        return 0;
    }
    zeros = g_malloc0((s->l1_size - new_size) * 8);
    ret = qcow2_write_metadata_locked(s, BLKEV_L1_UPDATE, QCOW2_OL_ACTIVE_L1,
                                      s->l1_table_offset + new_size * 8, zeros,
                                      (s->l1_size - new_size) * 8, false);
    if (ret < 0) {
        return ret;
    }
    /* Memory follows the file; the tables are freed only once the cleared
     * entries are durable (meta.c invariant 4). */
    ret = qcow2_flush_file(s);
    for (uint64_t i = new_size; i < s->l1_size; i++) {
        uint64_t l2 = s->l1_table[i] & QCOW2_L1E_OFFSET_MASK;
        s->l1_table[i] = 0;
        if (l2 && ret == 0) {
            qcow2_free_clusters_locked(s, l2, s->cluster_size); /* alloc.c inv. 2 */
        }
    }
    return ret;
}

int qcow2_get_l2_locked(Qcow2State *s, uint64_t offset, uint8_t **l2, uint64_t *l2_index)
{
    uint64_t l1_index = offset >> (s->cluster_bits + s->l2_bits);
    uint64_t l2_offset;
    int ret;

    *l2 = NULL;
    *l2_index = qcow2_l2_slice_index(s, offset); /* cluster.c invariant 6 */
    if (l1_index >= s->l1_size) {
        return 0;
    }
    ret = qcow2_l1_entry_locked(s, l1_index, &l2_offset);
    if (ret < 0 || l2_offset == 0) {
        return ret;
    }
    return qcow2_cache_get_locked(
        s->l2_cache, qcow2_l2_slice_offset(s, l2_offset, offset), (void **)l2);
}

int qcow2_get_l2_for_write_locked(Qcow2State *s, uint64_t offset, uint8_t **l2,
                                  uint64_t *l2_index)
{
    uint64_t l1_index = offset >> (s->cluster_bits + s->l2_bits);
    uint64_t old_offset, old_entry, slice = qcow2_l2_slice_bytes(s), at;
    g_autofree uint8_t *buf = NULL;
    uint8_t *table = NULL;
    int64_t new_offset;
    int ret;

    *l2 = NULL;
    *l2_index = qcow2_l2_slice_index(s, offset); /* cluster.c invariant 6 */
    if (l1_index >= s->l1_size) {
        ret = qcow2_grow_l1_table_locked(s, l1_index + 1, false);
        if (ret < 0) {
            return ret;
        }
    }
    ret = qcow2_l1_entry_locked(s, l1_index, &old_offset);
    if (ret < 0) {
        return ret;
    }
    if (old_offset && (s->l1_table[l1_index] & QCOW2_OFLAG_COPIED)) {
        return qcow2_cache_get_locked(
            s->l2_cache, qcow2_l2_slice_offset(s, old_offset, offset), (void **)l2);
    }

    /* A new table, or a copy of a shared one (invariants 1, 2). */
    new_offset = qcow2_alloc_clusters_locked(s, 1);
    if (new_offset < 0) {
        return (int)new_offset;
    }
    qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
    if (new_offset == 0) {
        return qcow2_corrupt_locked(s, "Preventing invalid allocation of L2 table at "
                                       "offset 0");
    }
    /* invariant 1: its refcount written now, made durable with the table
     * by the one flush below */
    ret = qcow2_cache_flush_locked(s->refcount_cache);
    if (ret < 0) {
        goto fail;
    }
    buf = g_malloc0(s->cluster_size);
    /* the copy goes slice by slice through the cache (cluster.c inv 6) */
    for (uint64_t i = 0; old_offset && i < s->cluster_size; i += slice) {
        ret = qcow2_cache_get_locked(s->l2_cache, old_offset + i, (void **)&table);
        if (ret < 0) {
            goto fail;
        }
        memcpy(buf + i, table, slice);
        qcow2_cache_put_locked(s->l2_cache, (void **)&table);
    }
    /* invariant 1: the whole table, all its slices; one flush for it and
     * its refcount */
    ret = qcow2_write_metadata_locked(s, BLKEV_L2_ALLOC, 0, (uint64_t)new_offset, buf,
                                      s->cluster_size, true);
    if (ret < 0) {
        goto fail;
    }
    at = qcow2_l2_slice_offset(s, (uint64_t)new_offset, offset) - (uint64_t)new_offset;
    ret = qcow2_cache_get_empty_locked(s->l2_cache, (uint64_t)new_offset + at,
                                       (void **)&table);
    if (ret < 0) {
        goto fail;
    }
    memcpy(table, buf + at, slice);
    old_entry = s->l1_table[l1_index];
    s->l1_table[l1_index] = (uint64_t)new_offset | QCOW2_OFLAG_COPIED;
    qcow2_assert_refcounts_durable_locked(s, "l2.c invariant 1");
    qcow2_assert_durable(s->img->file, s->table_gen, "l2.c invariant 1");
    ret = write_l1_sector_locked(s, l1_index, false);
    if (ret < 0) {
        s->l1_table[l1_index] = old_entry; /* invariant 4 */
        qcow2_cache_put_locked(s->l2_cache, (void **)&table);
        qcow2_l2_cache_discard_table_locked(s, (uint64_t)new_offset);
        goto fail;
    }
    ret = qcow2_flush_file(s);
    if (ret < 0) {
        /* The entry is in the file, maybe not durable: keep the new table
         * (memory = file) and leak the old one (meta.c invariant 4). */
        qcow2_cache_put_locked(s->l2_cache, (void **)&table);
        return ret;
    }
    if (old_offset) {
        qcow2_free_clusters_locked(s, old_offset, s->cluster_size); /* invariant 2 */
    }
    *l2 = table;
    return 0;

fail : {
    bool had_error = blk_error_mark();
    qcow2_free_clusters_locked(s, (uint64_t)new_offset, s->cluster_size);
    blk_error_unwind(had_error);
    return ret;
}
}

int qcow2_link_new_l2_tables_locked(Qcow2State *s, const Qcow2NewL2 *t, size_t n,
                                    uint64_t data_gen, bool *linked)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    g_autofree uint8_t *buf = NULL;
    uint64_t first, count;
    int ret;

    *linked = false;
    if (n == 0) {
        return 0;
    }
    /* invariant 6: refcounts, then the tables, then the L1 */
    ret = qcow2_cache_flush_locked(s->refcount_cache);
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    for (size_t i = 0; i < n && ret == 0; i++) {
        g_assert(t[i].l1_index < s->l1_size && s->l1_table[t[i].l1_index] == 0);
        qcow2_assert_refcounts_durable_locked(s, "l2.c invariant 6");
        qcow2_assert_durable(qcow2_data_node(s), data_gen, "l2.c invariant 6");
        ret = qcow2_write_metadata_locked(s, BLKEV_L2_ALLOC, 0, t[i].offset, t[i].table,
                                          s->cluster_size, false);
        lo = MIN(lo, t[i].l1_index);
        hi = MAX(hi, t[i].l1_index);
    }
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    if (ret < 0) {
        return ret; /* nothing links them: the caller frees them */
    }
    for (size_t i = 0; i < n; i++) {
        s->l1_table[t[i].l1_index] = t[i].offset | QCOW2_OFLAG_COPIED;
    }
    /* invariant 5: the 512-byte pieces holding [lo, hi], in one write */
    first = lo & ~(uint64_t)(L1_ENTRIES_PER_SECTOR - 1);
    count = MIN(ROUND_UP(hi + 1, L1_ENTRIES_PER_SECTOR), (uint64_t)s->l1_size) - first;
    buf = g_malloc(count * 8);
    for (uint64_t i = 0; i < count; i++) {
        store_be64(buf + i * 8, s->l1_table[first + i]);
    }
    qcow2_assert_durable(s->img->file, s->table_gen, "l2.c invariant 6");
    ret = qcow2_write_metadata_locked(s, BLKEV_L1_UPDATE, QCOW2_OL_ACTIVE_L1,
                                      s->l1_table_offset + first * 8, buf, count * 8,
                                      false);
    if (ret < 0) {
        for (size_t i = 0; i < n; i++) { /* invariant 4 */
            s->l1_table[t[i].l1_index] = 0;
        }
        return ret;
    }
    /* The entries are in the file now; a failed flush leaves them linked
     * (meta.c invariant 4). */
    *linked = true;
    return qcow2_flush_file(s);
}
