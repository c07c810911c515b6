/*
 * qcow2/alloc.c: cluster allocation and reference count updates.
 *
 * Owns: the free-cluster search (free_cluster_index), refcount increases
 * and decreases through the refcount block cache, byte-granular allocation
 * for compressed clusters, and freeing; with its part alloc-refmeta.c,
 * making refcount blocks and replacing the refcount table where QEMU puts
 * them.  It is the one allocator: create builds new images through it too
 * (create.c).  (Reading refcounts and the entry encoding is refcount.c.)
 *
 * Invariants (cited as "alloc.c invariant N"):
 *  1. DESIGN.md rule 1, raising: a cluster is handed out with its refcount
 *     raised in the refcount cache.  Callers make that durable before any
 *     table that references the cluster reaches the disk: L2 tables through
 *     the L2 -> refcount cache dependency (write.c), L1 entries, new tables
 *     and header switches by flushing the refcount cache first (l2.c,
 *     prealloc.c and alloc-refmeta.c).
 *  2. DESIGN.md rule 1, lowering: a refcount is lowered only once the last
 *     reference is gone *on disk*, and so a freed cluster is never handed out
 *     again while a durable table still points at it (reusing it would let
 *     the old guest offset read the new owner's data after a power loss, or
 *     give two offsets one cluster).  A reference dropped in a cached L2
 *     table is freed with qcow2_free_clusters_deferred_locked(): the
 *     decrease waits in s->pending_frees (refcount unchanged, cluster still
 *     in use) until a flush has written the L2 tables and made them durable
 *     (meta.c invariant 11), then qcow2_apply_pending_frees_locked() lowers
 *     it; its refcount block entries are looked up when it is queued, so
 *     a broken one is the freeing request's corruption (QEMU's), and the
 *     clusters leak.  More than QCOW2_MAX_PENDING_FREES waiting ranges force that
 *     barrier at the end of a request.  Tables unlinked by a synced write
 *     (L1 entry, header switch) and fresh clusters nothing references yet
 *     are freed at once (qcow2_free_clusters_locked).  So no decrease waits
 *     for a cached L2 table: the refcount cache never depends on the L2
 *     cache, and freeing never writes an L2 table behind a request's back.
 *  3. Refcount metadata is placed by QEMU's rules (so that a fresh image is
 *     the one qemu-img writes, create.c), one structure per round, never by
 *     recursion through the caches.  When clusters about to be counted lack
 *     a refcount block, the block for the first of them goes at the first
 *     free cluster past them and the free index (never inside a range being
 *     counted); it counts itself when it lies in the range it covers, else
 *     the existing block of its own range counts it -- and when that block
 *     is missing too, that one is made in this round instead.  A block whose
 *     index is past the refcount table comes with a new table: blocks for
 *     every index up to what the new structures need and the table after
 *     them (1.5x room), at the first block boundary past the clusters
 *     involved (QEMU's refcount area; qcow2_refcount_area_locked() puts an
 *     exact-size one where preallocation asks).  Each round is committed
 *     before the allocation searches again (QEMU's -EAGAIN), so nothing
 *     planned overlaps.  Each new block's own refcount is set in the block
 *     that covers it (itself when self-describing).  Order: new blocks and
 *     raised counts on disk, file flushed; then either the reftable entries,
 *     one block's reftable entry (synced) -- its own refcount lives in itself
 *     or in a hooked block, so no state names a block whose count reads
 *     0 -- or the new table (synced) and the one header write that
 *     switches to it; the old table is freed after the switch (and may serve
 *     the search that follows).  Batched (preallocation, lock held
 *     throughout, qcow2_defer_refblocks_locked): a round puts its block in
 *     the refcount cache and its entry in memory only, and
 *     qcow2_settle_refblocks_locked() -- before anything else is written,
 *     the lock dropped, or the table replaced (the waiting entries go into
 *     the old table first) -- flushes the blocks and every count, then
 *     writes the entries in rounds, each flushed, a block only once the
 *     block holding its own count is hooked.  Every write of a table that
 *     may reference clusters asserts that nothing waits.
 *  4. Widths 1..64 bits (refcount.c invariant 1).  An increase past
 *     refcount_max or a decrease below 0 fails with -EINVAL and changes
 *     nothing (QEMU's update_refcount; iotest 112).
 *  5. The search is first fit from free_cluster_index (QEMU's), and not
 *     quadratic: the index moves forward past every run handed out and back
 *     only to a cluster just freed; a missing refcount block, or the area
 *     past the reftable, is skipped in one step, and used clusters are
 *     skipped a block at a time.  A round of invariant 3 searches again from
 *     the same place.
 *  6. When a refcount drops to 0 the cluster leaves both metadata caches (a
 *     stale table must never be written over a reused cluster) and the
 *     compressed packing cursor leaves it.
 *  7. Host offsets stay below 2^56 (the L2 entry offset field); anything
 *     past that fails with -EFBIG.
 *  8. With an external data file, guest data clusters are not refcounted
 *     (QEMU): freeing an L2 entry's data does nothing there.
 *  9. Space given back (QEMU's discard passing): a cluster whose refcount
 *     drops to 0 in a free of a kind the image passes (s->pass_discard:
 *     shrinks always; discards and unmapping zero writes, snapshot
 *     deletion and emptying by default; replaced metadata only with
 *     pass-discard-other) is discarded in the image file before the free
 *     returns, with the lock still held: by invariant 2 no durable table
 *     references it, and nothing can reuse it before the discard.  A
 *     failed discard changes nothing (discards are advisory, as in QEMU).
 10. Freed clusters are reused before the file grows, as QEMU reuses them
 *     at once (QEMU iotest 250: a discard, then writes elsewhere, with
 *     writeback): when a guest write's new clusters would lie past the end
 *     of the file while frees wait for a flush (invariant 2) that hold the
 *     clusters and at least QCOW2_REUSE_PENDING_BYTES, the image is flushed
 *     first (all metadata written, file synced, the frees applied), and
 *     the search then finds them.  The bound keeps a guest that mixes
 *     small discards with writes to one flush per MiB it discarded.
 * All functions run with the metadata lock held.
 */
#include "qcow2/alloc.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

/*
 * Length of the run of clusters from idx that share idx's state (free or
 * used), at most max (>= 1).  *is_free tells which.  Invariant 5: a missing
 * refcount block or the area past the table counts as one free run.
 */
static int run_from_locked(Qcow2State *s, uint64_t idx, uint64_t max, bool *is_free,
                           uint64_t *len)
{
    uint64_t ti = idx >> s->refcount_block_bits;
    uint64_t bi = idx & (alloc_rb_entries(s) - 1);
    uint64_t block_offset, n = 0;
    void *block;
    int ret;

    ret = qcow2_refblock_offset_locked(s, ti, &block_offset);
    if (ret < 0) {
        return ret;
    }
    if (block_offset == 0) {
        *is_free = true;
        *len = ti >= s->refcount_table_size ? max : MIN(max, alloc_rb_entries(s) - bi);
        return 0;
    }
    ret = qcow2_cache_get_locked(s->refcount_cache, block_offset, &block);
    if (ret < 0) {
        return ret;
    }
    *is_free = qcow2_refblock_get(block, bi, s->refcount_order) == 0;
    while (bi + n < alloc_rb_entries(s) && n < max &&
           (qcow2_refblock_get(block, bi + n, s->refcount_order) == 0) == *is_free) {
        n++;
    }
    qcow2_cache_put_locked(s->refcount_cache, &block);
    *len = n;
    return 0;
}

/* First cluster index >= from starting n free clusters. */
int alloc_find_free_run_locked(Qcow2State *s, uint64_t from, uint64_t n, uint64_t *start)
{
    uint64_t idx = from, run = 0;

    *start = from;
    while (run < n) {
        bool is_free;
        uint64_t len;
        int ret;

        if (idx + (n - run) > (QCOW2_HOST_OFFSET_LIMIT >> s->cluster_bits)) {
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

void alloc_raise_file_size(Qcow2State *s, uint64_t end)
{
    if (end > s->file_size) {
        s->file_size = end; /* qcow2.h invariant 7 */
    }
}

/* ---- refcount updates ---- */

/* Invariant 9: the freed cluster at @offset, to give back to the file. */
static void queue_punch_locked(Qcow2State *s, uint64_t offset)
{
    Qcow2Range r = {offset, s->cluster_size};

    if (!s->pass_discard[s->free_kind] || qcow2_has_data_file(s)) {
        return;
    }
    if (!s->punch) {
        s->punch = g_array_new(FALSE, FALSE, sizeof(Qcow2Range));
    }
    if (s->punch->len > 0) {
        Qcow2Range *last = &g_array_index(s->punch, Qcow2Range, s->punch->len - 1);
        if (last->off + last->len == offset) {
            last->len += s->cluster_size;
            return;
        }
    }
    g_array_append_val(s->punch, r);
}

static void punch_locked(Qcow2State *s)
{
    g_autoptr(GArray) list = g_steal_pointer(&s->punch);
    bool had_error;

    if (!list) {
        return;
    }
    had_error = blk_error_mark();
    for (guint i = 0; i < list->len; i++) {
        const Qcow2Range *r = &g_array_index(list, Qcow2Range, i);
        (void)blk_pdiscard(s->img->file, r->off, r->len); /* advisory (invariant 9) */
    }
    blk_error_unwind(had_error);
}

static void on_freed_locked(Qcow2State *s, uint64_t idx)
{
    uint64_t offset = idx << s->cluster_bits;

    queue_punch_locked(s, offset);

    if (idx < s->free_cluster_index) {
        s->free_cluster_index = idx; /* invariant 5 */
    }
    qcow2_l2_cache_discard_table_locked(s, offset); /* invariant 6 */
    qcow2_cache_discard_locked(s->refcount_cache, offset);
    if (s->free_byte_offset && (s->free_byte_offset >> s->cluster_bits) == idx) {
        s->free_byte_offset = 0;
    }
}

/* Check the range of a refcount update; first and last cluster index. */
static int update_range(const Qcow2State *s, uint64_t offset, uint64_t length,
                        uint64_t *first, uint64_t *last)
{
    uint64_t end;

    if (qcow2_add(offset, length - 1, &end) || end >= QCOW2_HOST_OFFSET_LIMIT) {
        return blk_error(EINVAL, "qcow2: refcount update past 2^56 bytes");
    }
    *first = offset >> s->cluster_bits;
    *last = end >> s->cluster_bits;
    return 0;
}

int qcow2_update_refcount_locked(Qcow2State *s, uint64_t offset, uint64_t length,
                                 uint64_t addend, bool decrease)
{
    uint64_t first = 0, last = 0;
    int ret;

    if (length == 0) {
        return 0;
    }
    ret = update_range(s, offset, length, &first, &last);
    /* A decrease needs no refcount -> L2 cache edge: its caller made the
     * unlink durable first (invariant 2).  An increase first gets the
     * refcount blocks it needs (invariant 3; none inside the range). */
    while (ret == 0 && !decrease) {
        ret = alloc_cover_round_locked(s, first, last - first + 1);
        if (ret == 0) {
            break;
        }
        ret = ret < 0 ? ret : 0;
    }
    return ret < 0 ? ret : alloc_update_core_locked(s, offset, length, addend, decrease);
}

/* The update itself: every refcount block exists (or it is a decrease below
 * 0). */
int alloc_update_core_locked(Qcow2State *s, uint64_t offset, uint64_t length,
                             uint64_t addend, bool decrease)
{
    uint64_t first = 0, last = 0;
    int ret;

    if (length == 0) {
        return 0;
    }
    ret = update_range(s, offset, length, &first, &last);
    if (ret < 0) {
        return ret;
    }
    /* Two passes so that an error changes nothing (invariant 4): check all,
     * then apply. */
    for (int pass = 0; pass < 2; pass++) {
        uint64_t idx = first;
        while (idx <= last) {
            uint64_t ti = idx >> s->refcount_block_bits, block_offset;
            uint64_t bi = idx & (alloc_rb_entries(s) - 1);
            void *block;

            ret = qcow2_refblock_offset_locked(s, ti, &block_offset);
            if (ret < 0) {
                return ret;
            }
            if (pass == 0) { /* QEMU's alloc_refcount_block, per block */
                blk_event(s->img->file, BLKEV_REFBLOCK_GET);
                if (block_offset) {
                    blk_event(s->img->file, BLKEV_REFBLOCK_LOAD);
                }
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
            for (; idx <= last && bi < alloc_rb_entries(s); idx++, bi++) {
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

/* QEMU: a failed free leaks; it never corrupts.  An I/O error is reported
 * later (meta.c invariant 7); -EINVAL (a refcount that would go below 0)
 * only on a corrupt image. */
static void free_failed_locked(Qcow2State *s, uint64_t offset, uint64_t length, int ret,
                               bool had_error)
{
    g_debug("qcow2: freeing 0x%" PRIx64 "+%" PRIu64 " failed: %s", offset, length,
            g_strerror(-ret));
    if (ret != -EINVAL) {
        g_printerr("qcow2_free_clusters failed: %s\n", g_strerror(-ret)); /* QEMU's */
        qcow2_defer_error_locked(s, ret, had_error ? NULL : blk_error_message());
    }
}

void qcow2_free_clusters_as_locked(Qcow2State *s, uint64_t offset, uint64_t length,
                                   Qcow2DiscardKind kind)
{
    bool had_error = blk_error_mark(); /* a failed free is never reported here */
    int ret;

    if (s->sticky_error) {
        return; /* meta.c invariant 9: after a failed write, a leak */
    }
    blk_event(s->img->file, BLKEV_CLUSTER_FREE); /* QEMU's cluster_free */
    s->free_kind = kind; /* invariant 9: what on_freed_locked queues */
    ret = qcow2_update_refcount_locked(s, offset, length, 1, true);
    s->free_kind = QCOW2_DISCARD_NEVER;
    punch_locked(s);

    if (ret < 0) {
        free_failed_locked(s, offset, length, ret, had_error);
    }
    blk_error_unwind(had_error);
}

void qcow2_free_clusters_locked(Qcow2State *s, uint64_t offset, uint64_t length)
{
    qcow2_free_clusters_as_locked(s, offset, length, QCOW2_DISCARD_OTHER);
}

void qcow2_free_clusters_deferred_locked(Qcow2State *s, uint64_t offset, uint64_t length,
                                         Qcow2DiscardKind kind)
{
    uint64_t mask = s->cluster_size - 1;
    Qcow2Free r = {offset, length, kind};
    uint64_t ti, ti_last;

    if (length == 0) {
        return;
    }
    /* Invariant 2's waiting decrease looks up its refcount blocks now, as
     * QEMU's immediate one does: a broken reftable entry is reported (a
     * fatal corruption) by the request that frees, and the clusters leak,
     * instead of a later flush meeting it (060's discard). */
    ti_last = MIN(((offset + length - 1) >> s->cluster_bits) >> s->refcount_block_bits,
                  s->refcount_table_size);
    for (ti = (offset >> s->cluster_bits) >> s->refcount_block_bits; ti <= ti_last;
         ti++) {
        uint64_t block_offset;
        bool had_error = blk_error_mark();
        int ret = qcow2_refblock_offset_locked(s, ti, &block_offset);

        if (ret < 0) {
            free_failed_locked(s, offset, length, ret, had_error);
            blk_error_unwind(had_error);
            return;
        }
    }
    if (!s->pending_frees) {
        s->pending_frees = g_array_new(FALSE, FALSE, sizeof(Qcow2Free));
    }
    /* Merge whole adjacent clusters only: two compressed ranges in one
     * cluster are two references to it. */
    if (s->pending_frees->len > 0 && !(offset & mask) && !(length & mask)) {
        Qcow2Free *last =
            &g_array_index(s->pending_frees, Qcow2Free, s->pending_frees->len - 1);
        if (!(last->off & mask) && !(last->len & mask) &&
            last->off + last->len == offset && last->kind == kind) {
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
    qcow2_free_ranges_locked(s, list);
}

void qcow2_free_ranges_locked(Qcow2State *s, const GArray *frees)
{
    for (guint i = 0; i < frees->len; i++) {
        const Qcow2Free *r = &g_array_index(frees, Qcow2Free, i);
        qcow2_free_clusters_as_locked(s, r->off, r->len, r->kind);
    }
}

void qcow2_free_l2_entry_locked(Qcow2State *s, uint64_t l2_entry, bool deferred,
                                Qcow2DiscardKind kind)
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
        qcow2_free_clusters_deferred_locked(s, off, len, kind);
    } else {
        qcow2_free_clusters_as_locked(s, off, len, kind);
    }
}

/* ---- allocation ---- */

/*
 * n free clusters: the first run at or after the free index and 'from',
 * with the refcount blocks they need made first, a round at a time,
 * searching again after each (invariant 3, QEMU's retry); the free index
 * then moves past the run (invariant 5).
 */
static int64_t alloc_run_locked(Qcow2State *s, uint64_t from, uint64_t n)
{
    uint64_t start;
    int ret;

    g_assert(n > 0);
    do {
        ret = alloc_find_free_run_locked(s, MAX(s->free_cluster_index, from), n, &start);
        if (ret == 0) {
            ret = alloc_cover_round_locked(s, start, n);
        }
    } while (ret > 0);
    if (ret == 0) {
        ret = alloc_update_core_locked(s, start << s->cluster_bits, n << s->cluster_bits,
                                       1, false);
    }
    if (ret < 0) {
        return ret;
    }
    alloc_raise_file_size(s, (start + n) << s->cluster_bits);
    if (start + n > s->free_cluster_index) {
        s->free_cluster_index = start + n; /* invariant 5 */
    }
    return (int64_t)(start << s->cluster_bits);
}

int qcow2_reuse_pending_frees_locked(Qcow2State *s, uint64_t n)
{
    uint64_t pending = 0, start;
    int ret;

    for (guint i = 0; s->pending_frees && i < s->pending_frees->len; i++) {
        pending += g_array_index(s->pending_frees, Qcow2Free, i).len;
    }
    if (pending < MAX(QCOW2_REUSE_PENDING_BYTES, n << s->cluster_bits)) {
        return 0;
    }
    ret = alloc_find_free_run_locked(s, s->free_cluster_index, n, &start);
    if (ret < 0 || ((start + n) << s->cluster_bits) <= s->file_size) {
        return ret; /* it fits inside the file as it is */
    }
    return qcow2_flush_all_locked(s); /* invariant 10: applies them */
}

int64_t qcow2_alloc_clusters_from_locked(Qcow2State *s, uint64_t from, uint64_t n)
{
    blk_event(s->img->file, BLKEV_CLUSTER_ALLOC); /* QEMU's cluster_alloc */
    return alloc_run_locked(s, from >> s->cluster_bits, n);
}

int64_t qcow2_alloc_clusters_locked(Qcow2State *s, uint64_t n)
{
    blk_event(s->img->file, BLKEV_CLUSTER_ALLOC); /* QEMU's cluster_alloc */
    return alloc_run_locked(s, 0, n);
}

int qcow2_count_free_at_locked(Qcow2State *s, uint64_t offset, uint64_t n,
                               uint64_t *count)
{
    uint64_t idx = offset >> s->cluster_bits,
             limit = QCOW2_HOST_OFFSET_LIMIT >> s->cluster_bits;

    *count = 0;
    n = idx < limit ? MIN(n, limit - idx) : 0; /* invariant 7 */
    while (*count < n) {
        bool is_free;
        uint64_t len;
        int ret = run_from_locked(s, idx + *count, n - *count, &is_free, &len);

        if (ret < 0) {
            return ret;
        }
        if (!is_free) {
            break;
        }
        *count += len;
    }
    return 0;
}

int qcow2_alloc_clusters_at_locked(Qcow2State *s, uint64_t offset, uint64_t n)
{
    uint64_t idx = offset >> s->cluster_bits, done = 0;
    int ret;

    while (done < n) {
        bool is_free;
        uint64_t len;

        if (idx + n > (QCOW2_HOST_OFFSET_LIMIT >> s->cluster_bits)) {
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
    /* the rounds place nothing inside the range (invariant 3) */
    ret = qcow2_update_refcount_locked(s, offset, n << s->cluster_bits, 1, false);
    if (ret == 0) {
        alloc_raise_file_size(s, (idx + n) << s->cluster_bits);
    }
    return ret;
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
