/*
 * qcow2/alloc.c: cluster allocation and reference count updates.
 *
 * Owns: the free-cluster search (free_cluster_index), refcount increases
 * and decreases through the refcount block cache, creating refcount blocks
 * and growing the refcount table, byte-granular allocation for compressed
 * clusters, and freeing.  (Reading refcounts and the entry encoding is
 * refcount.c.)
 *
 * Invariants (cited as "alloc.c invariant N"):
 *  1. DESIGN.md rule 1, raising: a cluster is handed out with its refcount
 *     raised in the refcount cache.  Callers make that durable before any
 *     table that references the cluster reaches the disk: L2 tables through
 *     the L2 -> refcount cache dependency (write.c), L1 entries, new tables
 *     and header switches by flushing the refcount cache first (l2.c and
 *     the planner below).
 *  2. DESIGN.md rule 1, lowering: a refcount is lowered only once the last
 *     reference is gone *on disk*, and so a freed cluster is never handed out
 *     again while a durable table still points at it (reusing it would let
 *     the old guest offset read the new owner's data after a power loss, or
 *     give two offsets one cluster).  A reference dropped in a cached L2
 *     table is freed with qcow2_free_clusters_deferred_locked(): the
 *     decrease waits in s->pending_frees (refcount unchanged, cluster still
 *     in use) until a flush has written the L2 tables and made them durable
 *     (meta.c invariant 11), then qcow2_apply_pending_frees_locked() lowers
 *     it.  More than QCOW2_MAX_PENDING_FREES waiting ranges force that
 *     barrier at the end of a request.  Tables unlinked by a synced write
 *     (L1 entry, header switch) and fresh clusters nothing references yet
 *     are freed at once (qcow2_free_clusters_locked).  So no decrease waits
 *     for a cached L2 table: the refcount cache never depends on the L2
 *     cache, and freeing never writes an L2 table behind a request's back.
 *  3. Refcount metadata is created only by the planner (plan_cover +
 *     plan_commit), never recursively: new refcount blocks and a new
 *     refcount table are placed after the clusters being allocated, on
 *     clusters whose refcount is 0, at a cursor that only moves forward (so
 *     nothing planned overlaps).  Each new block's own refcount is set in
 *     the block that covers it (itself when self-describing).  Order: new
 *     blocks and raised counts on disk, file flushed; then either the
 *     reftable entries, hooked in rounds -- a block only once the block that
 *     holds its own refcount is hooked and flushed, so no state names a block
 *     whose count reads 0 -- or the new table (synced) and the one header
 *     write that switches to it; the old table is freed after the switch.
 *  4. Widths 1..64 bits (refcount.c invariant 1).  An increase past
 *     refcount_max or a decrease below 0 fails with -EINVAL and changes
 *     nothing (QEMU's update_refcount; iotest 112).
 *  5. The search is not quadratic: free_cluster_index moves forward past
 *     every run handed out and back only to a cluster just freed; a missing
 *     refcount block, or the area past the reftable, is skipped in one step,
 *     and used clusters are skipped a block at a time.
 *  6. When a refcount drops to 0 the cluster leaves both metadata caches (a
 *     stale table must never be written over a reused cluster) and the
 *     compressed packing cursor leaves it.
 *  7. Host offsets stay below 2^56 (the L2 entry offset field); anything
 *     past that fails with -EFBIG.
 *  8. With an external data file, guest data clusters are not refcounted
 *     (QEMU): freeing an L2 entry's data does nothing there.
 * All functions run with the metadata lock held.
 */
#include "qcow2/qcow2.h"

#include <errno.h>
#include <inttypes.h>

#define HOST_OFFSET_LIMIT (UINT64_C(1) << 56) /* invariant 7 */

static inline uint64_t rb_entries(const Qcow2State *s)
{
    return UINT64_C(1) << s->refcount_block_bits;
}

/*
 * Length of the run of clusters from idx that share idx's state (free or
 * used), at most max (>= 1).  *is_free tells which.  Invariant 5: a missing
 * refcount block or the area past the table counts as one free run.
 */
static int run_from_locked(Qcow2State *s, uint64_t idx, uint64_t max, bool *is_free,
                           uint64_t *len)
{
    uint64_t ti = idx >> s->refcount_block_bits;
    uint64_t bi = idx & (rb_entries(s) - 1);
    uint64_t block_offset, n = 0;
    void *block;
    int ret;

    ret = qcow2_refblock_offset_locked(s, ti, &block_offset);
    if (ret < 0) {
        return ret;
    }
    if (block_offset == 0) {
        *is_free = true;
        *len = ti >= s->refcount_table_size ? max : MIN(max, rb_entries(s) - bi);
        return 0;
    }
    ret = qcow2_cache_get_locked(s->refcount_cache, block_offset, &block);
    if (ret < 0) {
        return ret;
    }
    *is_free = qcow2_refblock_get(block, bi, s->refcount_order) == 0;
    while (bi + n < rb_entries(s) && n < max &&
           (qcow2_refblock_get(block, bi + n, s->refcount_order) == 0) == *is_free) {
        n++;
    }
    qcow2_cache_put_locked(s->refcount_cache, &block);
    *len = n;
    return 0;
}

/* First cluster index >= from starting n free clusters. */
static int find_free_run_locked(Qcow2State *s, uint64_t from, uint64_t n, uint64_t *start)
{
    uint64_t idx = from, run = 0;

    *start = from;
    while (run < n) {
        bool is_free;
        uint64_t len;
        int ret;

        if (idx + (n - run) > (HOST_OFFSET_LIMIT >> s->cluster_bits)) {
            return blk_error(EFBIG, "qcow2: no free host clusters below 2^56 bytes");
        }
        ret = run_from_locked(s, idx, n - run, &is_free, &len);
        if (ret < 0) {
            return ret;
        }
        idx += len;
        if (is_free) {
            run += len;
        } else {
            run = 0;
            *start = idx;
        }
    }
    return 0;
}

/* ---- the refcount metadata planner (invariant 3) ---- */

typedef struct PlannedBlock {
    uint64_t ti;     /* reftable index it serves */
    uint64_t offset; /* host offset */
    uint8_t *buf;
    bool hooked; /* its reftable entry is written */
} PlannedBlock;

typedef struct RefPlan {
    GArray *blocks; /* PlannedBlock */
    bool grow;
    uint64_t table_offset;
    uint64_t table_clusters;
    uint64_t table_entries;
    uint64_t cursor; /* next cluster index to place something at */
} RefPlan;

static PlannedBlock *plan_block(RefPlan *p, uint64_t ti)
{
    for (guint i = 0; i < p->blocks->len; i++) {
        PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
        if (b->ti == ti) {
            return b;
        }
    }
    return NULL;
}

static uint64_t plan_table_entries(const Qcow2State *s, const RefPlan *p)
{
    return p->grow ? p->table_entries : s->refcount_table_size;
}

/* Plan a refcount table of at least min_entries (QEMU grows by 1.5). */
static int plan_grow_locked(Qcow2State *s, RefPlan *p, uint64_t min_entries)
{
    uint64_t per_cluster = s->cluster_size / 8;
    uint64_t clusters = MAX(plan_table_entries(s, p) / per_cluster, 1);
    uint64_t start;
    int ret;

    while (clusters * per_cluster < min_entries) {
        clusters = (clusters * 3 + 1) / 2;
        if (clusters > (QCOW2_MAX_REFTABLE_BYTES >> s->cluster_bits)) {
            return blk_error(EFBIG, "qcow2: the refcount table would exceed 8 MiB");
        }
    }
    ret = find_free_run_locked(s, p->cursor, clusters, &start);
    if (ret < 0) {
        return ret;
    }
    p->grow = true;
    p->table_offset = start << s->cluster_bits;
    p->table_clusters = clusters;
    p->table_entries = clusters * per_cluster;
    p->cursor = start + clusters;
    return 0;
}

/* Plan whatever makes every cluster of [first, first + n) covered by a
 * reftable entry; returns 1 if something changed, 0 if all was in place. */
static int plan_range_locked(Qcow2State *s, RefPlan *p, uint64_t first, uint64_t n)
{
    uint64_t ti_end = ((first + n - 1) >> s->refcount_block_bits) + 1;
    int changed = 0;

    for (uint64_t ti = first >> s->refcount_block_bits; ti < ti_end; ti++) {
        uint64_t block_offset = 0, at;
        int ret;

        if (ti >= plan_table_entries(s, p)) {
            ret = plan_grow_locked(s, p, ti + 1);
            if (ret < 0) {
                return ret;
            }
            changed = 1;
        }
        if (plan_block(p, ti)) {
            continue;
        }
        ret = qcow2_refblock_offset_locked(s, ti, &block_offset);
        if (ret < 0) {
            return ret;
        }
        if (block_offset != 0) {
            continue;
        }
        ret = find_free_run_locked(s, p->cursor, 1, &at);
        if (ret < 0) {
            return ret;
        }
        PlannedBlock b = {.ti = ti, .offset = at << s->cluster_bits};
        g_array_append_val(p->blocks, b);
        p->cursor = at + 1;
        changed = 1;
    }
    return changed;
}

/* Cover the allocation and everything planned for it, to a fixed point:
 * each round adds a block or a bigger table, and each block covers >= 64
 * clusters while the cursor moves by one per block, so it terminates. */
static int plan_cover_locked(Qcow2State *s, RefPlan *p, uint64_t first, uint64_t n)
{
    int changed;

    do {
        changed = plan_range_locked(s, p, first, n);
        for (guint i = 0; changed >= 0 && i < p->blocks->len; i++) {
            PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
            int c = plan_range_locked(s, p, b->offset >> s->cluster_bits, 1);
            changed = c < 0 ? c : (changed | c);
        }
        if (changed >= 0 && p->grow) {
            int c = plan_range_locked(s, p, p->table_offset >> s->cluster_bits,
                                      p->table_clusters);
            changed = c < 0 ? c : (changed | c);
        }
    } while (changed > 0);
    return changed;
}

static void raise_file_size(Qcow2State *s, uint64_t end)
{
    if (end > s->file_size) {
        s->file_size = end; /* qcow2.h invariant 5 */
    }
}

/* +1 (or -1) on one cluster whose refcount block exists, in the cache. */
static int add_existing_locked(Qcow2State *s, uint64_t idx, bool decrease)
{
    return qcow2_update_refcount_locked(s, idx << s->cluster_bits, 1, 1, decrease);
}

/* Mark cluster idx used by something the plan creates. */
static int plan_count_locked(Qcow2State *s, RefPlan *p, uint64_t idx)
{
    PlannedBlock *b = plan_block(p, idx >> s->refcount_block_bits);

    if (b) {
        qcow2_refblock_set(b->buf, idx & (rb_entries(s) - 1), s->refcount_order, 1);
        return 0;
    }
    return add_existing_locked(s, idx, false);
}

static int plan_commit_locked(Qcow2State *s, RefPlan *p)
{
    g_autofree uint64_t *counted = NULL; /* clusters raised in existing blocks */
    g_autofree uint8_t *table = NULL;
    uint64_t ncounted = 0, nplaced = p->blocks->len + (p->grow ? p->table_clusters : 0);
    bool written = false;
    int ret = 0;

    if (nplaced == 0) {
        return 0;
    }
    qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
    counted = g_new(uint64_t, nplaced);
    for (guint i = 0; i < p->blocks->len; i++) {
        PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
        b->buf = g_malloc0(s->cluster_size);
        raise_file_size(s, b->offset + s->cluster_size);
    }
    if (p->grow) {
        raise_file_size(s, p->table_offset + p->table_clusters * s->cluster_size);
    }
    /* Raise the counts of everything placed (blocks, then the table). */
    for (uint64_t k = 0; k < nplaced && ret == 0; k++) {
        uint64_t idx =
            k < p->blocks->len
                ? g_array_index(p->blocks, PlannedBlock, k).offset >> s->cluster_bits
                : (p->table_offset >> s->cluster_bits) + (k - p->blocks->len);
        bool in_plan = plan_block(p, idx >> s->refcount_block_bits) != NULL;
        ret = plan_count_locked(s, p, idx);
        if (ret == 0 && !in_plan) {
            counted[ncounted++] = idx;
        }
    }
    for (guint i = 0; i < p->blocks->len && ret == 0; i++) {
        PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
        ret = qcow2_write_metadata_locked(s, BLKEV_REFBLOCK_ALLOC, 0, b->offset, b->buf,
                                          s->cluster_size, false);
    }
    if (ret == 0) {
        ret = qcow2_cache_flush_locked(s->refcount_cache);
    }
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    if (ret < 0) {
        goto rollback;
    }

    if (p->grow) {
        uint64_t bytes = p->table_clusters * s->cluster_size;
        uint64_t old_offset = s->refcount_table_offset, old_size = s->refcount_table_size;
        uint64_t *mem = g_new0(uint64_t, p->table_entries);
        uint8_t hdr[12];

        table = g_malloc0(bytes);
        memcpy(mem, s->refcount_table, old_size * 8);
        for (guint i = 0; i < p->blocks->len; i++) {
            PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
            mem[b->ti] = b->offset;
        }
        for (uint64_t i = 0; i < p->table_entries; i++) {
            store_be64(table + i * 8, mem[i]);
        }
        ret = qcow2_write_metadata_locked(s, BLKEV_REFTABLE_GROW, 0, p->table_offset,
                                          table, bytes, true);
        if (ret == 0) {
            qcow2_assert_refcounts_durable_locked(s, "alloc.c invariant 3");
            qcow2_assert_durable(s->img->file, s->table_gen, "alloc.c invariant 3");
            store_be64(hdr, p->table_offset);
            store_be32(hdr + 8, (uint32_t)p->table_clusters);
            ret = qcow2_write_header_ex_locked(s, BLKEV_REFTABLE_GROW,
                                               QCOW2_HDR_REFCOUNT_TABLE_OFFSET, hdr,
                                               sizeof(hdr), &written);
        }
        if (!written) {
            g_free(mem);
            goto rollback;
        }
        /* The file names the new table now, even if the flush failed
         * (meta.c invariant 4): memory follows, the old table is kept. */
        g_free(s->refcount_table);
        s->refcount_table = mem;
        s->refcount_table_offset = p->table_offset;
        s->refcount_table_size = p->table_entries;
        qcow2_reftable_count_used(s);
        if (ret < 0) {
            return ret;
        }
        qcow2_free_clusters_locked(s, old_offset, old_size * 8); /* invariant 2 */
    } else {
        uint8_t e[8];
        guint left = p->blocks->len;
        qcow2_assert_refcounts_durable_locked(s, "alloc.c invariant 3");
        /* Invariant 3: a block is hooked only once the block that holds its
         * own refcount is (an existing block, itself, or a new block hooked
         * in an earlier round, flushed since): a reftable entry must never
         * name a block whose refcount reads 0.  Each round hooks at least
         * the blocks counted by existing blocks or by themselves, and the
         * describer of a new block is placed before it, so this ends. */
        g_autofree guint *round_idx = g_new(guint, p->blocks->len);
        while (left > 0 && ret == 0) {
            guint round = 0;
            for (guint i = 0; i < p->blocks->len && ret == 0; i++) {
                PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
                PlannedBlock *d = plan_block(p, (b->offset >> s->cluster_bits) >>
                                                    s->refcount_block_bits);
                if (b->hooked || (d && d != b && !d->hooked)) {
                    continue;
                }
                store_be64(e, b->offset);
                ret = qcow2_write_metadata_locked(
                    s, BLKEV_REFBLOCK_ALLOC, QCOW2_OL_REFCOUNT_TABLE,
                    s->refcount_table_offset + b->ti * 8, e, 8, false);
                round_idx[round++] = i;
            }
            if (ret == 0) {
                ret = qcow2_flush_file(s);
            }
            for (guint k = 0; k < round && ret == 0; k++) {
                /* marked after the round's flush: durable now */
                g_array_index(p->blocks, PlannedBlock, round_idx[k]).hooked = true;
            }
            if (ret == 0 && round == 0) {
                ret = blk_error(EIO, "qcow2: refcount blocks that only describe each "
                                     "other cannot be hooked");
            }
            left -= round;
        }
        if (ret < 0) {
            goto rollback;
        }
        for (guint i = 0; i < p->blocks->len; i++) {
            PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
            s->refcount_table[b->ti] = b->offset;
            s->refcount_table_used = MAX(s->refcount_table_used, b->ti + 1);
        }
    }
    return 0;

rollback : {
    /* Nothing refers to the new blocks or table; undo the counts raised in
     * existing blocks (a failure here only leaks). */
    bool had_error = blk_error_mark();
    for (uint64_t k = 0; k < ncounted; k++) {
        (void)add_existing_locked(s, counted[k], true);
    }
    blk_error_unwind(had_error);
    return ret;
}
}

static void plan_free(RefPlan *p)
{
    for (guint i = 0; i < p->blocks->len; i++) {
        g_free(g_array_index(p->blocks, PlannedBlock, i).buf);
    }
    g_array_free(p->blocks, TRUE);
}

/* Make sure every cluster of [first, first + n) has a refcount block. */
static int ensure_refblocks_locked(Qcow2State *s, uint64_t first, uint64_t n)
{
    RefPlan p = {.blocks = g_array_new(FALSE, TRUE, sizeof(PlannedBlock)),
                 .cursor = first + n};
    int ret = plan_cover_locked(s, &p, first, n);

    if (ret == 0 && (p.blocks->len > 0 || p.grow)) {
        ret = plan_commit_locked(s, &p);
    }
    plan_free(&p);
    return ret < 0 ? ret : 0;
}

/* ---- refcount updates ---- */

static void on_freed_locked(Qcow2State *s, uint64_t idx)
{
    uint64_t offset = idx << s->cluster_bits;

    if (idx < s->free_cluster_index) {
        s->free_cluster_index = idx; /* invariant 5 */
    }
    qcow2_cache_discard_locked(s->l2_cache, offset); /* invariant 6 */
    qcow2_cache_discard_locked(s->refcount_cache, offset);
    if (s->free_byte_offset && (s->free_byte_offset >> s->cluster_bits) == idx) {
        s->free_byte_offset = 0;
    }
}

int qcow2_update_refcount_locked(Qcow2State *s, uint64_t offset, uint64_t length,
                                 uint64_t addend, bool decrease)
{
    uint64_t first, last, end;
    int ret;

    if (length == 0) {
        return 0;
    }
    if (qcow2_add(offset, length - 1, &end) || end >= HOST_OFFSET_LIMIT) {
        return blk_error(EINVAL, "qcow2: refcount update past 2^56 bytes");
    }
    first = offset >> s->cluster_bits;
    last = end >> s->cluster_bits;
    /* A decrease needs no refcount -> L2 cache edge: its caller made the
     * unlink durable first (invariant 2). */
    if (!decrease) {
        ret = ensure_refblocks_locked(s, first, last - first + 1);
        if (ret < 0) {
            return ret;
        }
    }
    /* Two passes so that an error changes nothing (invariant 4): check all,
     * then apply. */
    for (int pass = 0; pass < 2; pass++) {
        uint64_t idx = first;
        while (idx <= last) {
            uint64_t ti = idx >> s->refcount_block_bits, block_offset;
            uint64_t bi = idx & (rb_entries(s) - 1);
            void *block;

            ret = qcow2_refblock_offset_locked(s, ti, &block_offset);
            if (ret < 0) {
                return ret;
            }
            if (block_offset == 0) {
                /* Increases have their blocks by now; a decrease of a
                 * cluster without a block is a decrease below 0. */
                return blk_error(EINVAL,
                                 "qcow2: refcount of cluster %" PRIu64
                                 " would drop below 0 (no refcount block)",
                                 idx);
            }
            ret = qcow2_cache_get_locked(s->refcount_cache, block_offset, &block);
            if (ret < 0) {
                return ret;
            }
            for (; idx <= last && bi < rb_entries(s); idx++, bi++) {
                uint64_t v = qcow2_refblock_get(block, bi, s->refcount_order);
                if (pass == 0) {
                    if (decrease ? v < addend : s->refcount_max - v < addend) {
                        qcow2_cache_put_locked(s->refcount_cache, &block);
                        return blk_error(EINVAL,
                                         "qcow2: refcount of cluster %" PRIu64
                                         " would %s (refcount %" PRIu64 ", %s%" PRIu64
                                         ", %u-bit refcounts)",
                                         idx, decrease ? "drop below 0" : "overflow", v,
                                         decrease ? "-" : "+", addend, s->refcount_bits);
                    }
                    continue;
                }
                v = decrease ? v - addend : v + addend;
                qcow2_refblock_set(block, bi, s->refcount_order, v);
                if (v == 0) {
                    on_freed_locked(s, idx);
                }
            }
            if (pass == 1) {
                qcow2_cache_mark_dirty_locked(s->refcount_cache, block);
            }
            qcow2_cache_put_locked(s->refcount_cache, &block);
        }
    }
    return 0;
}

void qcow2_free_clusters_locked(Qcow2State *s, uint64_t offset, uint64_t length)
{
    bool had_error = blk_error_mark(); /* a failed free is never reported here */
    int ret = qcow2_update_refcount_locked(s, offset, length, 1, true);

    if (ret < 0) {
        /* QEMU: a failed free leaks; it never corrupts.  An I/O error is
         * reported later (meta.c invariant 7); -EINVAL (a refcount that
         * would go below 0) only on a corrupt image. */
        g_debug("qcow2: freeing 0x%" PRIx64 "+%" PRIu64 " failed: %s", offset, length,
                g_strerror(-ret));
        if (ret != -EINVAL) {
            qcow2_defer_error_locked(s, ret, had_error ? NULL : blk_error_message());
        }
    }
    blk_error_unwind(had_error);
}

void qcow2_free_clusters_deferred_locked(Qcow2State *s, uint64_t offset, uint64_t length)
{
    uint64_t mask = s->cluster_size - 1;
    Qcow2Range r = {offset, length};

    if (length == 0) {
        return;
    }
    if (!s->pending_frees) {
        s->pending_frees = g_array_new(FALSE, FALSE, sizeof(Qcow2Range));
    }
    /* Merge whole adjacent clusters only: two compressed ranges in one
     * cluster are two references to it. */
    if (s->pending_frees->len > 0 && !(offset & mask) && !(length & mask)) {
        Qcow2Range *last =
            &g_array_index(s->pending_frees, Qcow2Range, s->pending_frees->len - 1);
        if (!(last->off & mask) && !(last->len & mask) &&
            last->off + last->len == offset) {
            last->len += length;
            return;
        }
    }
    g_array_append_val(s->pending_frees, r); /* invariant 2 */
}

void qcow2_apply_pending_frees_locked(Qcow2State *s)
{
    g_autoptr(GArray) list = s->pending_frees;

    s->pending_frees = NULL;
    if (!list) {
        return;
    }
    /* invariant 2: the tables that dropped these references are durable
     * (meta.c invariant 10 checks it here) */
#ifndef NDEBUG
    if (qcow2_cache_has_dirty_locked(s->l2_cache)) {
        g_error("write ordering broken (alloc.c invariant 2): freeing clusters while "
                "an L2 table that dropped them is not written");
    }
    qcow2_assert_durable(s->img->file, s->l2_gen, "alloc.c invariant 2");
#endif
    for (guint i = 0; i < list->len; i++) {
        Qcow2Range *r = &g_array_index(list, Qcow2Range, i);
        qcow2_free_clusters_locked(s, r->off, r->len);
    }
}

void qcow2_free_l2_entry_locked(Qcow2State *s, uint64_t l2_entry, bool deferred)
{
    uint64_t off = 0, len = 0;

    if (l2_entry & QCOW2_OFLAG_COMPRESSED) {
        uint64_t coffset, csize;
        qcow2_parse_compressed_entry(s, l2_entry, &coffset, &csize);
        /* The whole sectors the entry names (as qemu-img check counts). */
        off = coffset & ~(uint64_t)(QCOW2_COMPRESSED_SECTOR_SIZE - 1);
        len = ROUND_UP(csize, QCOW2_COMPRESSED_SECTOR_SIZE);
    } else if ((l2_entry & QCOW2_L2E_OFFSET_MASK) && !qcow2_has_data_file(s)) {
        off = l2_entry & QCOW2_L2E_OFFSET_MASK; /* invariant 8 */
        len = s->cluster_size;
    }
    if (len == 0) {
        return;
    }
    if (deferred) {
        qcow2_free_clusters_deferred_locked(s, off, len);
    } else {
        qcow2_free_clusters_locked(s, off, len);
    }
}

/* ---- allocation ---- */

static int64_t alloc_at_index_locked(Qcow2State *s, uint64_t start, uint64_t n)
{
    int ret = ensure_refblocks_locked(s, start, n);

    if (ret == 0) {
        ret = qcow2_update_refcount_locked(s, start << s->cluster_bits,
                                           n << s->cluster_bits, 1, false);
    }
    if (ret < 0) {
        return ret;
    }
    raise_file_size(s, (start + n) << s->cluster_bits);
    return (int64_t)(start << s->cluster_bits);
}

int64_t qcow2_alloc_clusters_from_locked(Qcow2State *s, uint64_t from, uint64_t n)
{
    uint64_t start;
    int ret;

    g_assert(n > 0);
    ret = find_free_run_locked(s, from >> s->cluster_bits, n, &start);
    if (ret < 0) {
        return ret;
    }
    return alloc_at_index_locked(s, start, n);
}

int64_t qcow2_alloc_clusters_locked(Qcow2State *s, uint64_t n)
{
    uint64_t start;
    int64_t ret;

    g_assert(n > 0);
    ret = find_free_run_locked(s, s->free_cluster_index, n, &start);
    if (ret < 0) {
        return ret;
    }
    ret = alloc_at_index_locked(s, start, n);
    if (ret >= 0 && start + n > s->free_cluster_index) {
        s->free_cluster_index = start + n; /* invariant 5 */
    }
    return ret;
}

int qcow2_alloc_clusters_at_locked(Qcow2State *s, uint64_t offset, uint64_t n)
{
    uint64_t idx = offset >> s->cluster_bits, done = 0;

    while (done < n) {
        bool is_free;
        uint64_t len;
        int ret;

        if (idx + n > (HOST_OFFSET_LIMIT >> s->cluster_bits)) {
            return -EAGAIN;
        }
        ret = run_from_locked(s, idx + done, n - done, &is_free, &len);
        if (ret < 0) {
            return ret;
        }
        if (!is_free) {
            return -EAGAIN;
        }
        done += len;
    }
    int64_t r = alloc_at_index_locked(s, idx, n);
    return r < 0 ? (int)r : 0;
}

int64_t qcow2_alloc_bytes_locked(Qcow2State *s, uint64_t size)
{
    uint64_t off = s->free_byte_offset;
    int64_t ret;

    g_assert(size > 0 && size <= s->cluster_size);
    if (off) {
        uint64_t in_cluster = qcow2_offset_into_cluster(s, off), refcount;
        int r = qcow2_get_refcount_locked(s, off >> s->cluster_bits, &refcount);
        if (r < 0) {
            return r;
        }
        /* Pack only while one more reference fits (invariant 4). */
        if (refcount == 0 || refcount >= s->refcount_max) {
            off = 0;
        } else if (in_cluster + size <= s->cluster_size) {
            r = qcow2_update_refcount_locked(s, off, 1, 1, false);
            if (r < 0) {
                return r;
            }
            s->free_byte_offset = in_cluster + size == s->cluster_size ? 0 : off + size;
            return (int64_t)off;
        } else {
            /* Spill into the next cluster if it is free. */
            uint64_t next = off - in_cluster + s->cluster_size;
            r = qcow2_alloc_clusters_at_locked(s, next, 1);
            if (r == 0) {
                r = qcow2_update_refcount_locked(s, off, 1, 1, false);
                if (r < 0) {
                    qcow2_free_clusters_locked(s, next, s->cluster_size);
                    return r;
                }
                s->free_byte_offset = off + size;
                if (qcow2_offset_into_cluster(s, s->free_byte_offset) == 0) {
                    s->free_byte_offset = 0;
                }
                return (int64_t)off;
            }
            if (r != -EAGAIN) {
                return r;
            }
            off = 0;
        }
    }
    ret = qcow2_alloc_clusters_locked(s, 1);
    if (ret < 0) {
        return ret;
    }
    s->free_byte_offset = size == s->cluster_size ? 0 : (uint64_t)ret + size;
    return ret;
}
