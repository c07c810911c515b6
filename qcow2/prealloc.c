/*
 * qcow2/prealloc.c: preallocation of the area a resize grows (resize.c
 * invariant 3) -- which is also how a new image is preallocated, since
 * create resizes a minimal image from size 0 (create.c step d), as QEMU
 * does: `qemu-img create -o preallocation=M` and `qemu-img resize
 * --preallocation=M` are this one code.
 *
 * Owns: where preallocated clusters go and how they are linked: the runs
 * of metadata preallocation (also every mode with an external data file),
 * the refcount area, data area and L2 tables of falloc/full, the batches
 * of new L2 tables, the copy-on-write tail of an unaligned end, and
 * growing the file (or the data file) over what is linked.
 *
 * Invariants (cited as "prealloc.c invariant N"):
 *  1. Placement is QEMU's, so that a fresh image is byte for byte the one
 *     qemu-img writes (create.c), through the one allocator (alloc.c).
 *     Metadata: guest clusters from the start of the area in runs, a run
 *     being the unallocated clusters of one L2 table, at most INT_MAX bytes;
 *     a missing L2 table is allocated before its run's data clusters, which
 *     are one contiguous allocation.  With an external data file guest
 *     cluster n is data file cluster n (not refcounted, nothing allocated
 *     but the L2 tables).  falloc/full without one: a refcount area (alloc.c
 *     invariant 3) past the last cluster in use, exact, counting the data
 *     clusters and an L2 table per L2 range plus one; the data clusters
 *     right after it; the file grown over them with the mode; then every
 *     cluster of the area linked, the L2 tables where the allocator puts
 *     them.
 *  2. What is linked reads as zeros, as the grown area must: metadata data
 *     clusters are not written, so they are never taken inside the file as
 *     it was when the preallocation started (old bytes would show), and
 *     where they fall on a refcount table replaced since (qemu-img leaves
 *     the table's bytes there for the guest to read) they are zeroed before
 *     they are linked; an unaligned end gets its
 *     copy-on-write tail written as zeros up to the (sub)cluster end (as
 *     QEMU); extended L2 entries keep their subcluster bitmap (0 in a new
 *     table: preallocated, unallocated subclusters, as QEMU); falloc/full
 *     clusters are allocated (fallocate) or written as zeros by the
 *     protocol.  An entry replaced by falloc/full drops its old cluster
 *     only once the table is durable (deferred, alloc.c invariant 2).
 *  3. Order (DESIGN.md rules 1 and 2), per batch: the clusters are
 *     allocated (refcounts raised in the cache, alloc.c invariant 1; the
 *     refcount blocks this makes are hooked once, when the planning ends,
 *     alloc.c invariant 3), the zero tail written and the data node grown
 *     to hold every cluster the batch links (so no entry points past the
 *     end of the file); then the
 *     new L2 tables are linked at once (l2.c invariant 6: refcounts and
 *     data flushed, tables written and flushed, L1 entries written and
 *     flushed), and entries in existing tables are set in the cache, which
 *     writes them only after the refcount blocks and a flush of the data
 *     (write.c invariants 1 and 2).
 *  4. Memory is bounded: a batch holds at most BATCH_TABLE_BYTES of new L2
 *     tables (and at least one), and a run record per run.
 *  5. A failure frees the clusters that no table links yet; what is linked
 *     stays linked (it is consistent); the caller keeps the old size.
 *  6. The lock is held while metadata changes and dropped while data moves
 *     (the zero tail, growing or preallocating a file), and the area is
 *     registered as a write in the in-flight list throughout (write.c
 *     invariant 6), so no vmstate write meets half-linked clusters.
 *  7. A resize from an unaligned size preallocates from the cluster that
 *     holds the old end when that cluster is unallocated and nothing can
 *     show through it (no backing file, no data file): as QEMU, which
 *     starts there, so that writes into it later allocate nothing (QEMU
 *     iotest 125's host sizes); metadata preallocation writes zeros over
 *     its part below the old end, as QEMU's copy-on-write does.  Otherwise
 *     from the next whole cluster.
 */
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <limits.h>

/* QEMU allocates at most one request's worth at a time: INT_MAX rounded
 * down to 512 bytes (invariant 1). */
#define MAX_RUN_BYTES ((uint64_t)INT_MAX & ~UINT64_C(511))
/* invariant 4 */
#define BATCH_TABLE_BYTES (UINT64_C(4) << 20)

typedef struct Run {
    uint64_t guest; /* first guest cluster (offset) */
    uint64_t host;  /* its host offset */
    uint64_t nb;    /* clusters */
    int table;      /* index into Batch.tables, or -1: an existing table */
    bool owned;     /* its clusters are freed if it is not linked */
    bool linked;
} Run;

typedef struct Batch {
    GArray *tables;    /* Qcow2NewL2 (table: g_malloc0, one cluster) */
    GArray *runs;      /* Run */
    GArray *zeros;     /* Qcow2Range: written as zeros before linking */
    uint64_t data_end; /* the data node must reach this */
    bool linked;       /* the new tables are linked */
} Batch;

/* What the batches of one preallocation share (invariant 2). */
typedef struct Prealloc {
    uint64_t floor;            /* where the file ended: data clusters come after it */
    GArray *stale;             /* Qcow2Range: refcount tables past floor replaced since */
    uint64_t head, head_bytes; /* invariant 7: the old end's cluster, and its
                                * bytes below the old end (copy-on-write) */
} Prealloc;

static void batch_init(Batch *b)
{
    memset(b, 0, sizeof(*b));
    b->tables = g_array_new(FALSE, FALSE, sizeof(Qcow2NewL2));
    b->runs = g_array_new(FALSE, FALSE, sizeof(Run));
    b->zeros = g_array_new(FALSE, FALSE, sizeof(Qcow2Range));
}

static void batch_free(Batch *b)
{
    for (guint i = 0; i < b->tables->len; i++) {
        g_free(g_array_index(b->tables, Qcow2NewL2, i).table);
    }
    g_array_free(b->tables, TRUE);
    g_array_free(b->runs, TRUE);
    g_array_free(b->zeros, TRUE);
}

static void add_zeros(Batch *b, uint64_t off, uint64_t len)
{
    Qcow2Range z = {off, len};
    if (len) {
        g_array_append_val(b->zeros, z);
    }
}

/* After an allocation (lock held): a refcount table that it replaced, and
 * that was written past the floor, holds old bytes where data may go now. */
static void note_table_locked(Qcow2State *s, Prealloc *pa, uint64_t old_offset,
                              uint64_t old_entries)
{
    uint64_t end = old_offset + ROUND_UP(old_entries * 8, s->cluster_size);

    if (s->refcount_table_offset != old_offset && end > pa->floor) {
        Qcow2Range r = {MAX(old_offset, pa->floor), 0};
        r.len = end - r.off;
        g_array_append_val(pa->stale, r);
    }
}

/* Invariant 5 (lock held): free what the batch holds and nothing links. */
static void batch_undo_locked(Qcow2State *s, Batch *b)
{
    bool had_error = blk_error_mark();

    for (guint i = 0; i < b->runs->len; i++) {
        Run *r = &g_array_index(b->runs, Run, i);
        if (r->owned && !r->linked && !(r->table >= 0 && b->linked)) {
            qcow2_free_clusters_locked(s, r->host, r->nb << s->cluster_bits);
        }
    }
    for (guint i = 0; i < b->tables->len && !b->linked; i++) {
        qcow2_free_clusters_locked(s, g_array_index(b->tables, Qcow2NewL2, i).offset,
                                   s->cluster_size);
    }
    blk_error_unwind(had_error);
}

/* The end of planning (lock held): the refcount blocks made meanwhile
 * hooked (invariant 3), and on failure the batch undone. */
static int settle_locked(Qcow2State *s, Batch *b, int ret)
{
    int r = qcow2_settle_refblocks_locked(s);

    ret = ret < 0 ? ret : r;
    if (ret < 0) {
        batch_undo_locked(s, b);
    }
    return ret;
}

/* The batch's new table for L1 entry l1_index, allocated first if there is
 * none yet (invariant 1: before the clusters of its run). */
static int new_table_locked(Qcow2State *s, Batch *b, uint64_t l1_index)
{
    Qcow2NewL2 t = {.l1_index = l1_index};
    int64_t off;

    if (b->tables->len > 0 &&
        g_array_index(b->tables, Qcow2NewL2, b->tables->len - 1).l1_index == l1_index) {
        return (int)b->tables->len - 1;
    }
    off = qcow2_alloc_clusters_locked(s, 1);
    if (off < 0) {
        return (int)off;
    }
    qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
    if (off == 0) {
        return qcow2_corrupt_locked(s, "Preventing invalid allocation of L2 table at "
                                       "offset 0");
    }
    t.offset = (uint64_t)off;
    t.table = g_malloc0(s->cluster_size);
    g_array_append_val(b->tables, t);
    return (int)b->tables->len - 1;
}

/*
 * The table for the run at guest (lock held): *table is a batch table, or
 * -1 for an existing one (made writable: a shared one is copied, l2.c).
 * For an existing table under metadata preallocation, *n shrinks to the
 * unallocated entries from guest on (0: guest's cluster is taken already).
 */
static int run_table_locked(Qcow2State *s, Batch *b, uint64_t guest, bool all,
                            uint64_t *n, int *table)
{
    uint64_t l1_index = guest >> (s->cluster_bits + s->l2_bits), l2_offset, idx, r = 0;
    uint8_t *l2;
    int ret;

    *table = -1;
    if (l1_index >= s->l1_size) {
        return blk_error(EIO, "qcow2: the L1 table does not cover the preallocated area");
    }
    ret = qcow2_l1_entry_locked(s, l1_index, &l2_offset);
    if (ret < 0) {
        return ret;
    }
    if (l2_offset == 0) {
        ret = new_table_locked(s, b, l1_index);
        *table = ret;
        return ret < 0 ? ret : 0;
    }
    /* it may copy a shared table: nothing may wait then (invariant 3) */
    ret = qcow2_settle_refblocks_locked(s);
    if (ret == 0) {
        ret = qcow2_get_l2_for_write_locked(s, guest, &l2, &idx);
    }
    qcow2_defer_refblocks_locked(s);
    if (ret < 0) {
        return ret;
    }
    while (!all && r < *n && qcow2_l2_get(s, l2, idx + r) == 0 &&
           qcow2_l2_get_bitmap(s, l2, idx + r) == 0) {
        r++;
    }
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
    if (!all) {
        *n = r;
    }
    return 0;
}

/* Record a run (lock held); entries of a new table are set at once.  cow:
 * an unaligned end gets its zero tail (metadata, invariant 2). */
static void add_run(Qcow2State *s, Batch *b, const Run *r, uint64_t end, bool cow)
{
    uint64_t bytes = MIN(r->nb << s->cluster_bits, end - r->guest);
    uint64_t sc = UINT64_C(1) << s->subcluster_bits;

    if (r->table >= 0) {
        uint8_t *l2 = g_array_index(b->tables, Qcow2NewL2, r->table).table;
        uint64_t idx = (r->guest >> s->cluster_bits) & (s->l2_size - 1);
        for (uint64_t i = 0; i < r->nb; i++) {
            qcow2_l2_set(s, l2, idx + i,
                         (r->host + (i << s->cluster_bits)) | QCOW2_OFLAG_COPIED, 0);
        }
    }
    if (cow && (bytes & (sc - 1))) { /* invariant 2: the copy-on-write tail */
        add_zeros(b, r->host + bytes, ROUND_UP(bytes, sc) - bytes);
    }
    b->data_end = MAX(b->data_end, r->host + bytes);
    g_array_append_val(b->runs, *r);
}

static uint64_t batch_table_bytes(const Qcow2State *s, const Batch *b)
{
    return (uint64_t)b->tables->len * s->cluster_size;
}

/*
 * Plan a batch of metadata runs from *offset (lock held): invariant 1.
 * The data clusters are searched for from the floor on, where the
 * allocator's first fit puts them in a new image anyway; where they fall on
 * a refcount table replaced meanwhile they are zeroed (invariant 2).
 */
static int plan_runs_locked(Qcow2State *s, Prealloc *pa, Batch *b, uint64_t *offset,
                            uint64_t end)
{
    const uint64_t max_run = MAX_RUN_BYTES >> s->cluster_bits;
    int ret = 0;

    while (*offset < end && batch_table_bytes(s, b) < BATCH_TABLE_BYTES && ret == 0) {
        uint64_t guest = *offset, l2_index = qcow2_l2_slice_index(s, guest);
        uint64_t n = MIN(MIN(DIV_ROUND_UP(end - guest, s->cluster_size),
                             s->l2_slice_size - l2_index), /* cluster.c inv 6 */
                         max_run);
        Run r = {.guest = guest, .owned = !qcow2_has_data_file(s)};
        uint64_t rt = s->refcount_table_offset, rt_entries = s->refcount_table_size;

        ret = run_table_locked(s, b, guest, false, &n, &r.table);
        note_table_locked(s, pa, rt, rt_entries);
        if (ret < 0) {
            break;
        }
        if (n == 0) {
            *offset += s->cluster_size; /* taken already: kept */
            continue;
        }
        r.nb = n;
        if (qcow2_has_data_file(s)) {
            r.host = guest; /* alloc.c invariant 8 */
        } else {
            int64_t host;
            rt = s->refcount_table_offset;
            rt_entries = s->refcount_table_size;
            host = qcow2_alloc_clusters_from_locked(s, pa->floor, n);
            note_table_locked(s, pa, rt, rt_entries);
            if (host < 0) {
                ret = (int)host;
                break;
            }
            r.host = (uint64_t)host;
            for (guint i = 0; i < pa->stale->len; i++) {
                const Qcow2Range *z = &g_array_index(pa->stale, Qcow2Range, i);
                uint64_t lo = MAX(z->off, r.host);
                uint64_t hi = MIN(z->off + z->len, r.host + (n << s->cluster_bits));
                add_zeros(b, lo, hi > lo ? hi - lo : 0);
            }
        }
        if (pa->head_bytes && r.guest == pa->head && r.owned) {
            add_zeros(b, r.host, pa->head_bytes); /* invariant 7, as QEMU's COW */
        }
        add_run(s, b, &r, end, true);
        *offset = guest + (n << s->cluster_bits);
    }
    return ret;
}

/*
 * Plan a batch of falloc/full links from *offset (lock held): every
 * cluster up to end, guest cluster g at host + g - area_guest.
 */
static int plan_links_locked(Qcow2State *s, Batch *b, uint64_t *offset, uint64_t end,
                             uint64_t area_guest, uint64_t area_host)
{
    int ret = 0;

    while (*offset < end && batch_table_bytes(s, b) < BATCH_TABLE_BYTES && ret == 0) {
        uint64_t guest = *offset, l2_index = qcow2_l2_slice_index(s, guest);
        uint64_t n = MIN(DIV_ROUND_UP(end - guest, s->cluster_size),
                         s->l2_slice_size - l2_index); /* cluster.c invariant 6 */
        Run r = {.guest = guest, .nb = n, .owned = true};

        r.host = area_host + (guest - area_guest);
        ret = run_table_locked(s, b, guest, true, &n, &r.table);
        if (ret == 0) {
            add_run(s, b, &r, end, false);
            *offset = guest + (n << s->cluster_bits);
        }
    }
    return ret;
}

/* Write zeros over [off, off + len) of node (lock not held). */
static int write_zeros(BlkNode *node, uint64_t off, uint64_t len)
{
    static const uint8_t zeros[65536];
    int ret = 0;

    blk_event(node, BLKEV_COW_WRITE);
    while (len && ret == 0) {
        size_t n = (size_t)MIN(len, sizeof(zeros));
        ret = blk_pwrite(node, off, zeros, n, 0);
        off += n;
        len -= n;
    }
    return ret;
}

/* Grow the node to size if it is shorter (lock not held): with the mode's
 * preallocation; a file grown from empty without one gets its first block
 * written, as QEMU's file protocol does. */
static int grow_node(BlkNode *node, uint64_t size, BlkPrealloc mode)
{
    static const uint8_t zeros[4096];
    int64_t len = blk_getlength(node);
    int ret;

    if (len < 0 || (uint64_t)len >= size) {
        return len < 0 ? (int)len : 0;
    }
    if (mode == BLK_PREALLOC_METADATA) {
        mode = BLK_PREALLOC_OFF;
    }
    ret = blk_truncate(node, size, false, mode, false);
    if (ret == 0 && len == 0 && mode == BLK_PREALLOC_OFF) {
        ret = blk_pwrite(node, 0, zeros, MIN(size, sizeof(zeros)), 0);
    }
    return ret;
}

int qcow2_grow_data_file(Qcow2State *s, uint64_t size)
{
    return grow_node(s->data_file, size, BLK_PREALLOC_OFF);
}

/*
 * Link a planned batch (invariant 3).  Lock not held; taken for the
 * metadata, which is why the batch is undone here on failure.
 */
static int commit(Qcow2State *s, Batch *b, BlkPrealloc grow_mode)
{
    BlkNode *data = qcow2_data_node(s);
    uint64_t gen;
    int ret = 0;

    for (guint i = 0; i < b->zeros->len && ret == 0; i++) {
        const Qcow2Range *z = &g_array_index(b->zeros, Qcow2Range, i);
        ret = write_zeros(data, z->off, z->len);
    }
    if (ret == 0) {
        ret = grow_node(data, b->data_end, grow_mode);
    }
    gen = blk_write_gen(data);
    qcow2_lock(s);
    if (ret == 0) {
        ret = qcow2_link_new_l2_tables_locked(s, (Qcow2NewL2 *)(void *)b->tables->data,
                                              b->tables->len, gen, &b->linked);
    }
    for (guint i = 0; i < b->runs->len && ret == 0; i++) {
        Run *r = &g_array_index(b->runs, Run, i);
        uint64_t idx;
        uint8_t *l2;

        if (r->table >= 0) {
            continue;
        }
        if (!qcow2_has_data_file(s) && qcow2_need_accurate_refcounts(s)) {
            ret = qcow2_cache_set_dependency_locked(s->l2_cache, s->refcount_cache);
        }
        if (ret == 0) {
            qcow2_cache_depends_on_flush_locked(s->l2_cache); /* write.c invariant 1 */
            ret = qcow2_get_l2_for_write_locked(s, r->guest, &l2, &idx);
        }
        if (ret < 0) {
            break;
        }
        for (uint64_t k = 0; k < r->nb; k++) {
            uint64_t old = qcow2_l2_get(s, l2, idx + k);
            qcow2_l2_set(s, l2, idx + k,
                         (r->host + (k << s->cluster_bits)) | QCOW2_OFLAG_COPIED,
                         qcow2_l2_get_bitmap(s, l2, idx + k));
            qcow2_free_l2_entry_locked(s, old, true,
                                       QCOW2_DISCARD_NEVER); /* invariant 2 */
        }
        qcow2_cache_mark_dirty_locked(s->l2_cache, l2);
        qcow2_cache_require_durable_locked(s->l2_cache, l2, gen);
        qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
        r->linked = true;
    }
    if (ret < 0) {
        batch_undo_locked(s, b);
    }
    qcow2_unlock(s);
    return ret;
}

/* Metadata preallocation, and every mode with a data file (invariant 1). */
static int prealloc_runs(Qcow2State *s, uint64_t offset, uint64_t end, BlkPrealloc mode,
                         uint64_t head_bytes)
{
    Prealloc pa = {.stale = g_array_new(FALSE, FALSE, sizeof(Qcow2Range)),
                   .head = offset,
                   .head_bytes = head_bytes};
    int64_t len = blk_getlength(s->img->file);
    int ret = len < 0 ? (int)len : 0;

    pa.floor = len < 0 ? 0 : ROUND_UP((uint64_t)len, s->cluster_size);
    while (offset < end && ret == 0) {
        Batch b;
        batch_init(&b);
        qcow2_lock(s);
        qcow2_defer_refblocks_locked(s);
        ret = plan_runs_locked(s, &pa, &b, &offset, end);
        ret = settle_locked(s, &b, ret);
        qcow2_unlock(s);
        if (ret == 0) {
            ret = commit(s, &b, mode);
        }
        batch_free(&b);
    }
    g_array_free(pa.stale, TRUE);
    if (ret < 0) {
        blk_error_prefix(ret, "Allocating clusters failed");
    }
    return ret;
}

/* falloc/full without a data file (invariant 1). */
static int prealloc_file(Qcow2State *s, uint64_t offset, uint64_t end, BlkPrealloc mode)
{
    uint64_t cs = s->cluster_size;
    uint64_t nb_data = end > offset ? (ROUND_UP(end, cs) - offset) >> s->cluster_bits : 0;
    uint64_t nb_l2 = DIV_ROUND_UP(nb_data, s->l2_size) + 1, host, start, guest = offset;
    int64_t len, last, area;
    int ret;

    qcow2_lock(s);
    len = blk_getlength(s->img->file);
    last = len < 0 ? len
                   : qcow2_last_used_cluster_locked(
                         s, DIV_ROUND_UP(MAX(s->file_size, (uint64_t)len), cs));
    if (last < 0) {
        qcow2_unlock(s);
        return blk_error_prefix((int)last, "Failed to find the last cluster");
    }
    start = MAX((uint64_t)last + 1, DIV_ROUND_UP((uint64_t)len, cs));
    area = qcow2_refcount_area_locked(s, start << s->cluster_bits, nb_data + nb_l2);
    if (area < 0) {
        qcow2_unlock(s);
        return blk_error_prefix((int)area, "Failed to resize refcount structures");
    }
    host = (uint64_t)area;
    ret = qcow2_alloc_clusters_at_locked(s, host, nb_data);
    qcow2_unlock(s);
    if (ret < 0) {
        if (ret == -EAGAIN) {
            ret = blk_error(EIO, "The data clusters are not free");
        }
        return blk_error_prefix(ret, "Failed to allocate data clusters");
    }

    ret = blk_truncate(s->img->file, host + (nb_data << s->cluster_bits), false, mode,
                       false);
    if (ret < 0) {
        blk_error_prefix(ret, "Failed to resize underlying file");
    }
    while (ret == 0 && guest < ROUND_UP(end, cs)) {
        Batch b;
        batch_init(&b);
        qcow2_lock(s);
        qcow2_defer_refblocks_locked(s);
        ret = plan_links_locked(s, &b, &guest, end, offset, host);
        ret = settle_locked(s, &b, ret);
        qcow2_unlock(s);
        if (ret == 0) {
            ret = commit(s, &b, BLK_PREALLOC_OFF);
        }
        batch_free(&b);
        if (ret < 0) {
            blk_error_prefix(ret, "Failed to update L2 tables");
        }
    }
    if (ret < 0 && guest < ROUND_UP(end, cs)) {
        /* invariant 5: the data clusters nothing links */
        uint64_t from = host + (guest - offset);
        qcow2_lock(s);
        qcow2_free_clusters_locked(s, from, host + (nb_data << s->cluster_bits) - from);
        qcow2_unlock(s);
    }
    return ret;
}

int qcow2_preallocate(Qcow2State *s, uint64_t offset, uint64_t end, BlkPrealloc mode)
{
    Qcow2Inflight r;
    int ret;

    if (mode == BLK_PREALLOC_OFF) {
        return 0;
    }
    uint64_t head = ROUND_DOWN(offset, s->cluster_size), old_end = offset;
    Qcow2Mapping m = {0};

    /* the grown part of a cluster reads zeros already (resize.c inv. 3);
     * invariant 7: the cluster itself is preallocated when nothing of it
     * can show */
    offset = ROUND_UP(offset, s->cluster_size);
    qcow2_lock(s);
    if (head < offset && head < end && !s->img->backing && !qcow2_has_data_file(s)) {
        ret = qcow2_get_host_offset_locked(s, head, s->cluster_size, &m);
        if (ret < 0) {
            qcow2_unlock(s);
            return ret;
        }
        if (m.type == QCOW2_SC_UNALLOCATED_PLAIN && m.bytes >= s->cluster_size) {
            offset = head;
        }
    }
    qcow2_grow_stop_locked(s); /* grow.c invariant 4 */
    qcow2_inflight_begin_locked(s, &r, offset, MAX(end, offset) - offset, true);
    qcow2_unlock(s);
    if (mode == BLK_PREALLOC_METADATA || qcow2_has_data_file(s)) {
        ret =
            prealloc_runs(s, offset, end, mode, offset < old_end ? old_end - offset : 0);
    } else {
        ret = prealloc_file(s, offset, end, mode);
    }
    qcow2_lock(s);
    qcow2_inflight_end_locked(s, &r);
    qcow2_unlock(s);
    return ret;
}
