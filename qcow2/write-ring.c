/*
 * qcow2/write-ring.c: the io_uring engine's allocating writes (write.c
 * invariant 18; api/aio.c invariant 13): a plan made on the submitting
 * thread, its data written through the ring, its link on the thread that
 * reaps -- and the writes that join a plan in flight.
 *
 * Owns: RingPlan (a registration, a planned chunk, the requests writing
 * into it) from qcow2_alloc_begin to the qcow2_alloc_end that ends it.
 *
 * Why joins: sequential 4 KiB writes at depth 32 into 64 KiB clusters
 * (issue 30) put 16 requests in each new cluster.  The first plans it; the
 * 15 others found its registration and went to the pool, where a worker
 * each waited for the link (which comes on the reaper or the links thread)
 * and then wrote in place: 1.30 s against 0.78 s without ring plans.  A
 * request that joins the plan instead writes its data into the planned
 * host cluster through the ring at once, and the plan links once when the
 * last of them is written.
 *
 * Invariants (cited as "write-ring.c invariant N"):
 *  1. A write joins a plan only where the plan's own write leaves its
 *     bytes alone and they read as zeros until then: the chunk is fresh,
 *     its COW parts are zeros the file grown ahead holds already (write.c
 *     invariant 11: the plan writes only its request's data, no zeros that
 *     could land over a joined write's), without extended L2 (the link
 *     allocates whole clusters, so every joined byte is covered by it;
 *     with subclusters it would set only the planned ones), and the plan
 *     is the one registration in the write's way, its clusters holding
 *     the write's whole range.  The write does not overlap the bytes of
 *     the plan's other writes ([lo, hi) contains them all): concurrent
 *     writes of one plan never race on a byte.  'joinable' is published
 *     once the plan's file growth is done (it decides the zeros).
 *  2. 'pending' counts the plan's data writes that have not ended: 1 for
 *     the owner's from the plan on, +1 per join (only while it is above 0,
 *     by compare-and-swap: a plan whose writes all ended takes no more),
 *     -1 at each end (alloc_end, once per request: BlkDirect.ended).  The
 *     end that brings it to 0 ends the plan -- so the link (write.c
 *     invariant 1: data before the L2 entry, its write generation read
 *     then) follows every joined data write, and the registration (write.c
 *     invariant 6) keeps every other request off the clusters until then.
 *  3. Every request of a plan completes after the plan ended, handed back
 *     to the caller that ended it (BlkDirect.group): a callback comes after
 *     the L2 entry, so a flush submitted after it covers both (uring.c
 *     invariant 1).  A plan whose owner's data write failed links nothing
 *     and frees its clusters (write.c invariant 9); its requests run again
 *     the normal way (BlkDirect.unlinked), as do joined ones whose own
 *     write failed (the plan links: their bytes read as zeros until run
 *     again).  Nothing else ever writes into the freed clusters' old bytes
 *     as if zeros: a freed cluster is zeroed when reused (grow.c inv. 2).
 */
#include "qcow2/bitmap.h"
#include "qcow2/write.h"
#include "qcow2/meta.h"

#include <errno.h>

typedef struct RingPlan {
    Qcow2Inflight reg;
    Chunk c;
    BlkDirect *owner;  /* the planning request's mapping */
    BlkDirect *joined; /* [lock] the joined requests' (invariant 1), by ->group */
    uint64_t lo, hi;   /* [lock] guest bytes its requests write (invariant 1) */
    unsigned pending;  /* atomic: invariant 2 */
    bool joinable;     /* atomic: invariant 1 */
    int data_ret;      /* the owner's data write's outcome (invariant 2) */
} RingPlan;

/* Invariant 1: join the plan in the way of [offset, offset + bytes), if
 * any will take it.  Lock held. */
static bool join_locked(Qcow2State *s, uint64_t offset, uint64_t bytes, BlkDirect *d)
{
    Qcow2Inflight *reg = qcow2_inflight_sole_conflict_locked(s, offset, bytes);
    RingPlan *p = reg ? reg->ring : NULL;
    uint64_t end = offset + bytes;
    unsigned n;

    if (!p || !__atomic_load_n(&p->joinable, __ATOMIC_ACQUIRE) || offset < p->c.guest ||
        end > p->c.guest + (p->c.nb << s->cluster_bits) ||
        (end > p->lo && offset < p->hi)) {
        return false;
    }
    n = __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE);
    do {
        if (n == 0) {
            return false; /* invariant 2: its writes ended, the link is coming */
        }
    } while (!__atomic_compare_exchange_n(&p->pending, &n, n + 1, false, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    p->lo = MIN(p->lo, offset);
    p->hi = MAX(p->hi, end);
    d->group = p->joined;
    p->joined = d;
    d->joined = true;
    d->hold = p;
    qcow2_data_direct_fill(s, p->c.host + (offset - p->c.guest), offset, d);
    return true;
}

bool qcow2_alloc_begin(BlkNode *img, uint64_t offset, uint64_t bytes, BlkDirect *d)
{
    Qcow2State *s = img->opaque;
    uint64_t end = offset + bytes;
    RingPlan *p;
    int ret;

    if (bytes == 0 || img->limits || !qcow2_data_direct_ok(s) || s->encrypted ||
        qcow2_has_data_file(s)) { /* limits: blk_pwritev's own path */
        return false;
    }
    qcow2_bitmaps_note(s, offset, bytes); /* bitmap-store.c invariant 2 */
    qcow2_lock(s);
    if (qcow2_check_data_writable_locked(s, offset, bytes) < 0 ||
        qcow2_check_writable_locked(s) < 0) {
        qcow2_unlock(s);
        blk_error_clear(); /* the normal path reports it */
        return false;
    }
    if (qcow2_inflight_conflicts_locked(s, offset, bytes, true)) {
        bool joined = join_locked(s, offset, bytes, d);
        qcow2_unlock(s);
        if (joined) {
            blk_event(d->node, BLKEV_DATA_WRITE);
        }
        return joined; /* else the normal path waits */
    }
    qcow2_fastmap_set_writes_locked(s->fastmap, true); /* fastmap.c invariant 3 */
    p = g_new0(RingPlan, 1);
    qcow2_inflight_begin_locked(s, &p->reg, offset, bytes, true); /* no wait */
    ret = qcow2_plan_chunk_locked(s, offset, end, true, 0, &p->c);
    if (ret < 0) {
        qcow2_inflight_end_locked(s, &p->reg);
        qcow2_unlock(s);
        blk_error_clear(); /* the normal path plans again and reports it */
        qcow2_chunk_clear(&p->c);
        g_free(p);
        return false;
    }
    p->c.learn = true;
    if (p->c.kind == CHUNK_IN_PLACE) {
        qcow2_learn_chunk_locked(s, &p->c);
    }
    p->reg.ring = p;
    p->owner = d;
    p->lo = offset;
    p->hi = end;
    p->pending = 1; /* invariant 2 */
    qcow2_unlock(s);

    Chunk *c = &p->c;
    /* grow.c invariants 1 and 5: the file covers the clusters before the
     * data is submitted, and the growth this request took on runs here,
     * before the data rather than after it as on the pool's path: the data
     * write completes on another thread.  A growth that stopped leaves the
     * clusters past the file's end: the ring refuses the write (uring.c
     * invariant 1) and the request runs again on the pool. */
    if (c->grow.cover) {
        qcow2_grow_cover(s, &c->grow);
    }
    qcow2_grow_finish(s, &c->grow);
    bool zeros_free = c->cow_zero && c->grow.zero; /* invariant 11 */
    uint64_t from = zeros_free ? c->wstart : c->fstart;
    qcow2_data_direct_fill(s, c->host + (from - c->guest), offset, d);
    d->head = c->wstart - from;
    d->tail = zeros_free ? 0 : c->fend - c->wend;
    d->hold = p;
    blk_event(d->node, d->head || d->tail ? BLKEV_COW_DATA_WRITE : BLKEV_DATA_WRITE);
    /* invariant 1: after the growth that made the zeros */
    __atomic_store_n(&p->joinable,
                     zeros_free && c->kind == CHUNK_FRESH && !s->extended_l2,
                     __ATOMIC_RELEASE);
    return true;
}

/* Invariant 18: can c's link run on the thread that reaps?  Only when it
 * needs no I/O -- its L2 slice cached, no old host cluster to free, no
 * cache to write for the refcount ordering (invariant 2), no flush of the
 * frees due (qcow2_finish_request_locked) -- since an I/O there may wait
 * for the file lock that ring writes hold until reaped. */
static bool link_in_memory_locked(Qcow2State *s, const Chunk *c)
{
    if (!qcow2_l2_cached_locked(s, c->guest) ||
        (s->pending_frees && s->pending_frees->len + c->nb >= QCOW2_MAX_PENDING_FREES) ||
        (c->refcounted && qcow2_need_accurate_refcounts(s) &&
         !qcow2_cache_can_depend_locked(s->l2_cache, s->refcount_cache))) {
        return false;
    }
    for (uint64_t i = 0; c->kind == CHUNK_FRESH && i < c->nb; i++) {
        if (c->old_entry[i] & (QCOW2_L2E_OFFSET_MASK | QCOW2_OFLAG_COMPRESSED)) {
            return false;
        }
    }
    return true;
}

/* Invariant 3: hand the plan's requests but d back through d->group, each
 * told whether the plan linked. */
static void hand_back(RingPlan *p, BlkDirect *d, bool unlinked)
{
    BlkDirect *list = NULL;

    for (BlkDirect *m = p->joined, *next; m; m = next) {
        next = m->group;
        if (m != d) {
            m->group = list;
            list = m;
        }
    }
    if (p->owner != d) {
        p->owner->group = list;
        list = p->owner;
    }
    for (BlkDirect *m = list; m; m = m->group) {
        m->unlinked = unlinked;
        m->hold = NULL;
    }
    d->unlinked = unlinked;
    d->hold = NULL;
    d->group = list;
}

int qcow2_alloc_end(BlkNode *img, BlkDirect *d, int ret, bool wait)
{
    Qcow2State *s = img->opaque;
    RingPlan *p = d->hold;
    Chunk *c = &p->c;

    if (!d->ended) { /* invariant 2 */
        d->ended = true;
        if (!d->joined) {
            p->data_ret = ret;
        }
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL) > 0) {
            return -EINPROGRESS;
        }
    }
    ret = p->data_ret;
    if (!wait) {
        /* invariant 18: no wait, and no I/O; an undo (rare) frees
         * clusters, which may write refcounts */
        if (ret < 0 || !qcow2_trylock(s)) {
            return -EWOULDBLOCK;
        }
        if (!link_in_memory_locked(s, c)) {
            qcow2_unlock(s);
            return -EWOULDBLOCK;
        }
    } else {
        qcow2_lock(s);
    }
    /* a failed data write links nothing: the normal path runs the
     * request again and reports it */
    int linked = 0;
    if (ret == 0) {
        c->data_gen = blk_write_gen(qcow2_data_node(s)); /* uring.c invariant 1 */
        linked = qcow2_link_chunk_locked(s, c);
    }
    if ((ret < 0 || linked < 0) && c->refcounted) {
        bool had_error = blk_error_mark(); /* write.c invariant 9 */
        qcow2_free_clusters_locked(s, c->host, c->nb << s->cluster_bits);
        blk_error_unwind(had_error);
    }
    qcow2_inflight_end_locked(s, &p->reg);
    hand_back(p, d, ret < 0); /* invariant 3; p->joined read under the lock */
    linked = qcow2_finish_request_locked(s, linked);
    qcow2_unlock(s);
    qcow2_chunk_clear(c);
    g_free(p);
    return linked;
}
