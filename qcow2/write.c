/*
 * qcow2/write.c: guest writes (also the vmstate area) and the in-flight
 * request list.
 *
 * Owns: splitting a write into chunks (each planned by write-plan.c:
 * whether a cluster is written in place, reused with new metadata, or
 * moved to a fresh cluster), writing the data with the copy-on-write parts
 * the request does not cover, linking the L2 entries
 * after the data, freeing what they replaced; and the list of requests in
 * flight that keeps concurrent requests on the same clusters apart.
 *
 * A chunk is a run of clusters inside one L2 table handled with one data
 * write:
 *
 *     guest:   |  cluster 0  |  cluster 1  |  cluster 2  |
 *     request:        [=============================]
 *     written:  [head][  guest data                 ][tail]
 *               ^fstart ^wstart                      ^wend ^fend
 *
 * head and tail are the copy-on-write parts (old contents of the bytes the
 * request does not cover); they are empty for aligned writes, and for
 * clusters written in place.
 *
 * Invariants (cited as "write.c invariant N"):
 *  1. DESIGN.md rule 2, data before L2: an L2 entry points at a new or
 *     reused host cluster only after the guest data and the COW parts were
 *     written to it, and the L2 table reaches the disk only after they are
 *     durable: the L2 cache depends on a flush of the file (QEMU's
 *     depends_on_flush, which QEMU sets only for COW; without it a power
 *     loss can keep the entry and lose the data and the file size it
 *     needs: the guest then reads another offset's old data, or the entry
 *     points past the end of the file).  The table records the data's
 *     write generation, checked where the table is written (cache.c
 *     invariant 4).
 *  2. DESIGN.md rule 1, linking: while refcounts are accurate the L2 cache
 *     depends on the refcount cache (the new clusters' refcounts reach the
 *     disk first); with lazy refcounts the dirty bit is set, synced, before
 *     anything is allocated (meta.c invariant 5).
 *  3. Replaced clusters are freed after the L2 entries point away from them
 *     (in the cache): alloc.c invariant 2 then orders the refcount block
 *     after the L2 table.
 *  4. qcow2.h invariant 1: the plan (L2 table ready, clusters allocated,
 *     overlap checked) is made under the lock, no cache reference is kept,
 *     the lock is dropped while data moves, then retaken to link.
 *  5. A cluster is written in place only when its L2 entry has COPIED
 *     (refcount 1); a shared or compressed cluster, or one without a host
 *     cluster, gets a fresh cluster (allocated contiguously for a run).
 *     A COPIED entry with a host offset that is not cluster aligned is
 *     refused as QEMU refuses to keep it: a fatal corruption, "Data (or
 *     Preallocated zero) cluster offset .. unaligned (guest offset: ..)",
 *     the write's offset (write-plan.c); other bad entries are cluster.c
 *     invariant 1's.
 *  6. In-flight list: every request registers its cluster-aligned guest
 *     range before it looks at the mapping, and waits while a conflicting
 *     request (a write against anything) overlaps it.  So two writers of the
 *     same cluster are serialised and the second sees the first's mapping,
 *     no cluster is replaced or freed under a request still moving its data,
 *     and COW reads see stable old contents.  Registration is all or
 *     nothing, taken before any other wait, so it cannot deadlock.  A guest
 *     write that the fast path could take (fastmap.c) and that finds a
 *     conflict waits without registering, then starts again from the fast
 *     path: the request in its way -- typically the one allocating its
 *     cluster, with sequential 4 KiB writes 15 more per 64 KiB cluster
 *     (issue 30) -- has linked and learnt the cluster by then, so they
 *     write in place side by side instead of one registration after
 *     another; a write registers only when nothing is in its way (so
 *     whatever allocates or replaces a cluster still does it registered).
 *     Such a wait holds nothing either.  One that finds nothing in its way
 *     looks its clusters up again before it registers: if the fast path
 *     missed them just before the request that allocated them linked them
 *     (issue 30: about 950 of 2152 registrations in the sequential case),
 *     they are allocated and COPIED now, and it holds them as the fast
 *     path does (fastmap.c invariants 1, 8; read.c's prime from the cached
 *     L2 entry) and writes in place unregistered -- no registration that
 *     forgets the cluster and waits for its fast writers, no relearning;
 *     the turn of its ticket passes, nothing planned, once the data is
 *     written and the hold given back (invariant 12).
 *     The end of a registration wakes only the waiters whose range it kept
 *     waiting (aio/waiters.c, the implementation order.c invariant 6
 *     uses), with no system call when there are none.
 *  7. COW follows the spec: without extended L2 a new cluster is written
 *     whole (head and tail from the old contents: old cluster, compressed
 *     cluster, backing file or zeros).  With extended L2 only subclusters
 *     that become allocated are written: the touched ones (their untouched
 *     bytes from the old contents) and, when the data moves to a fresh
 *     cluster, every subcluster from the first to the last of those
 *     touched or allocated in the old one (the ones between from the old
 *     contents: backing data or zeros), as QEMU's copy-on-write (iotest
 *     271); other unallocated subclusters stay unallocated (backing) and
 *     other zero ones stay zero.
 *  8. Guest data and the COW parts of a chunk go out as one vectored write,
 *     announced as cow_write when it has COW parts, else data_write.
 *  9. A failure after allocating frees the fresh clusters (nothing points at
 *     them yet); what was linked stays linked (it is consistent).
 * 10. With an external data file, a guest cluster's host offset is its
 *     guest offset and is not refcounted (QEMU); entries get COPIED.
 * 11. When the COW parts of a fresh chunk are all zeros (no backing data,
 *     zero or unallocated clusters), the chunk's host range is zeroed
 *     without writing zeros (blk_pwrite_zeroes with NO_FALLBACK: fallocate
 *     ZERO_RANGE, BLKZEROOUT) and then only the guest data is written, as
 *     QEMU's handle_alloc_space does; the file bytes are the same as with
 *     invariant 8.  Scattered 4 KiB allocating writes into 64 KiB clusters
 *     then write 4 KiB instead of 64 KiB each.  Without cheap zeroing
 *     (ENOTSUP) invariant 8 applies.  Invariant 1's flush dependency holds
 *     for the zeroed parts as for written COW parts.  Clusters that the
 *     file grown ahead holds as zeros already (grow.c invariant 2) are not
 *     zeroed at all: only the guest data is written.
 * 12. On a thread with an allocation ticket (block/order.c) every chunk is
 *     planned in the ticket's turn, and the turn passes once the request's
 *     last chunk is planned: host clusters are assigned in ticket order
 *     while the data writes run in parallel.  The turn is awaited before
 *     the request registers (invariant 6): a later ticket never holds a
 *     registration an earlier one waits for while it waits for its turn.
 * 13. A fresh chunk's COW parts are not read when the planned entries of
 *     its first and last clusters have no host cluster of their own (or
 *     the zero flag, without extended L2) and there is no backing file:
 *     they read as zeros, so invariant 11 applies without two reads of the
 *     guest view (each a trip through the metadata lock).
 * 14. A guest write takes the metadata lock twice when its clusters need
 *     no more than one chunk: registration (invariant 6) and the plan in
 *     one hold, the link, the end of the registration and the request's
 *     finish in the other.
 * 15. On an encrypted image every chunk's host write covers whole 512-byte
 *     sectors (crypt.c invariant 4): [fstart, fend) is widened to sector
 *     boundaries and the widening is read from the current contents, as
 *     COW parts are, while the request's write registration keeps every
 *     other writer of the cluster out -- fast requests included (fastmap.c
 *     invariant 2) -- so the read-modify-write of a partial sector loses no
 *     concurrent write.  Fast-path rewrites are taken only when already
 *     sector aligned.  COW parts known to be zero (invariant 13) are still
 *     written, as encrypted zeros: zeroed ciphertext is not zeroed
 *     plaintext, so neither the file grown ahead (grow.c invariant 2) nor a
 *     zero write without fallback stands in for them.
 * 16. Clusters written in place and clusters reused with a new entry
 *     (CHUNK_REUSE: a preallocated zero cluster, new subclusters) that
 *     follow each other on the host form one chunk, so one data write
 *     (QEMU issues one write_aio there: its 066); the chunk is REUSE and
 *     its link rewrites the in-place clusters' entries as they were
 *     (host | COPIED, the same bitmap).  A cluster written in place at
 *     either end of it gets no COW part (it keeps its data).  Fresh
 *     clusters never join them: they are allocated in one contiguous run.
 * 17. copy_in (qemu-img convert -C) is a guest write whose data is moved by
 *     the kernel from a protocol node (blk_copy_in on the data node)
 *     instead of from memory: the same registration, turns, plan, COW
 *     parts and link, so invariants 1-14 hold as for any write; its COW
 *     parts are written apart from the data (not invariant 8's one
 *     write).  Not on an encrypted image, nor where the data node cannot
 *     take the copy (blk_can_copy_range): -ENOTSUP before anything is
 *     planned.
 * 18. An allocating write for the io_uring engine (qcow2_alloc_begin, api/
 *     aio.c invariant 13) is a guest write whose phases run on other
 *     threads: registration and plan in one hold of the lock on the
 *     submitting thread -- only when nothing is in its way (no wait), the
 *     request fits one chunk and its COW parts need no read (zeros, or
 *     none: the ring writes them with the data as invariant 8 does, or not
 *     at all on clusters the file grown ahead holds as zeros, invariant
 *     11) -- then the data write on the ring, then (qcow2_alloc_end, on
 *     the thread that reaps it) the link, the end of the registration and
 *     the request's finish in one hold, exactly as write_locked does:
 *     invariants 1-3, 6, 9, 12 and 14 hold as for any write.  Not on an
 *     encrypted image nor with a data file (refused before planning).  A
 *     data write that failed or came back short links nothing: the fresh
 *     clusters are freed and the registration ends; the request runs
 *     again the normal way.  The thread that reaps never waits for the
 *     lock (wait false): a holder of the lock may wait for ring writes to
 *     drop the file lock (grow.c's sparse resize), which needs the reaper; nor
 *     does it do I/O under the lock (a metadata write may wait for that
 *     file lock too): a link that needs any (its L2 slice not cached, old
 *     clusters to free, the frees' flush due) or an undo runs on a
 *     worker.  Requests of the asynchronous API run outside any
 *     allocation order (a worker holds no ticket), so the plan takes no
 *     turn (invariant 12).  A write whose clusters such a plan holds may
 *     join it instead of waiting (write-ring.c, which implements this
 *     invariant): its data goes to the planned cluster on the ring, and
 *     the plan links once after the last of its writes.
 * 19. Before the old contents of a chunk's COW parts are read (not
 *     invariant 15's widening of a write in place, nor parts invariant 13
 *     knows to be zeros), QEMU's cow_read step is announced on the image's
 *     file (BLKEV_COW_READ), wherever the read goes: once when both parts
 *     are read and the data between them is at most 16 KiB (QEMU reads
 *     the two in one request then), else before each part.  A write that
 *     gets there after the image was marked corrupt (say while it was
 *     stopped at a breakpoint there) fails with ENOMEDIUM, as QEMU's,
 *     whose driver is gone by then (meta.c invariant 2).
 * 20. New clusters of a chunk that is not the request's first go right
 *     after the host clusters of the chunk before it, as many of them as
 *     are free there (QEMU's handle_alloc, qcow2_alloc_clusters_at: one
 *     request keeps its host clusters contiguous while it can; 060: a
 *     write over an allocated cluster and a new one, whose refcount
 *     structure calls the header free, then meets QEMU's "Preventing
 *     invalid allocation of refcount block at offset 0"); when none is,
 *     the chunk's clusters come from the free search (alloc.c).
 */
#include "qcow2/bitmap.h"
#include "qcow2/write.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

/* ---- in-flight list (invariant 6) ---- */

/* The cluster-aligned range a request over [offset, offset + bytes) holds
 * (offset + bytes <= INT64_MAX: block.h invariant 3; vmstate requests are
 * checked in resize.c). */
static Qcow2Inflight inflight_range(const Qcow2State *s, uint64_t offset, uint64_t bytes,
                                    bool write)
{
    return (Qcow2Inflight){
        .start = offset & ~(s->cluster_size - 1),
        .end = ROUND_UP(offset + MAX(bytes, 1), s->cluster_size),
        .write = write,
    };
}

/* Must one of a and b wait for the other (invariant 6)? */
static bool inflight_overlap(const Qcow2Inflight *a, const Qcow2Inflight *b)
{
    return (a->write || b->write) && a->start < b->end && b->start < a->end;
}

static bool range_conflicts_locked(const Qcow2State *s, const Qcow2Inflight *r)
{
    for (const Qcow2Inflight *a = s->inflight; a; a = a->next) {
        if (inflight_overlap(a, r)) {
            return true;
        }
    }
    return false;
}

bool qcow2_inflight_conflicts_locked(const Qcow2State *s, uint64_t offset, uint64_t bytes,
                                     bool write)
{
    Qcow2Inflight r = inflight_range(s, offset, bytes, write);
    return range_conflicts_locked(s, &r);
}

Qcow2Inflight *qcow2_inflight_sole_conflict_locked(Qcow2State *s, uint64_t offset,
                                                   uint64_t bytes)
{
    Qcow2Inflight r = inflight_range(s, offset, bytes, true), *found = NULL;

    for (Qcow2Inflight *a = s->inflight; a; a = a->next) {
        if (inflight_overlap(a, &r)) {
            if (found) {
                return NULL;
            }
            found = a;
        }
    }
    return found;
}

/* WaitersFn (aio/waiters.c): may the waiting range what register now? */
static bool range_free(const void *what, const void *opaque)
{
    return !range_conflicts_locked(opaque, what);
}

/* WaitersFn: did the registration that ended (opaque) hold what back? */
static bool range_released(const void *what, const void *opaque)
{
    return inflight_overlap(what, opaque);
}

void qcow2_inflight_wait_locked(Qcow2State *s, uint64_t offset, uint64_t bytes,
                                bool write)
{
    Qcow2Inflight r = inflight_range(s, offset, bytes, write);
    waiters_wait(&s->inflight_waiters, &s->lock, &r, range_free, s);
}

void qcow2_inflight_begin_locked(Qcow2State *s, Qcow2Inflight *r, uint64_t offset,
                                 uint64_t bytes, bool write)
{
    qcow2_inflight_wait_locked(s, offset, bytes, write);
    *r = inflight_range(s, offset, bytes, write);
    if (write) {
        qcow2_fastmap_forget_locked(s->fastmap, r->start, r->end); /* fastmap.c inv 2 */
    }
    r->prev = NULL;
    r->next = s->inflight;
    if (s->inflight) {
        s->inflight->prev = r;
    }
    s->inflight = r;
}

void qcow2_inflight_end_locked(Qcow2State *s, Qcow2Inflight *r)
{
    if (r->prev) {
        r->prev->next = r->next;
    } else {
        s->inflight = r->next;
    }
    if (r->next) {
        r->next->prev = r->prev;
    }
    /* invariant 6: only the waiters r held back */
    waiters_wake(&s->inflight_waiters, range_released, r);
}

/* ---- data ---- */

/* What a write puts into its clusters: the caller's buffers, or (invariant
 * 17) the bytes of protocol node 'node' from node_offset on. */
typedef struct WriteSrc {
    const BlkIOV *qiov;
    BlkNode *node;
    uint64_t node_offset;
    uint64_t size;
} WriteSrc;

/* Invariant 17: the COW parts of a chunk (head, tail: their bytes, NULL
 * for zeros; none at all with grown_zero: the file reads as zeros there
 * already, invariant 11), then the data by copy. */
static int copy_chunk_data(Qcow2State *s, const Chunk *c, uint64_t req_offset,
                           const WriteSrc *w, const uint8_t *head, const uint8_t *tail,
                           bool grown_zero)
{
    size_t head_len = grown_zero ? 0 : (size_t)(c->wstart - c->fstart);
    size_t tail_len = grown_zero ? 0 : (size_t)(c->fend - c->wend);
    g_autofree uint8_t *zeros = NULL;
    int ret = 0;

    if ((head_len && !head) || (tail_len && !tail)) {
        zeros = g_malloc0(MAX(head_len, tail_len));
    }
    if (head_len || tail_len) {
        blk_event(qcow2_data_node(s), BLKEV_COW_WRITE);
    }
    if (head_len) {
        ret = blk_pwrite(qcow2_data_node(s), c->host + (c->fstart - c->guest),
                         head ? head : zeros, head_len, 0);
    }
    if (ret == 0 && tail_len) {
        ret = blk_pwrite(qcow2_data_node(s), c->host + (c->wend - c->guest),
                         tail ? tail : zeros, tail_len, 0);
    }
    if (ret < 0) {
        return ret;
    }
    blk_event(qcow2_data_node(s), BLKEV_DATA_WRITE);
    return blk_copy_in(qcow2_data_node(s), c->host + (c->wstart - c->guest),
                       c->wend - c->wstart, w->node,
                       w->node_offset + (c->wstart - req_offset));
}

/* Invariant 19: QEMU's cow_read step, before a COW part is read. */
static int cow_read_step(Qcow2State *s, const Chunk *c)
{
    bool gone;

    if (c->kind == CHUNK_IN_PLACE) {
        return 0; /* invariant 15's widening: no COW */
    }
    blk_event(s->img->file, BLKEV_COW_READ);
    qcow2_lock(s);
    gone = s->corrupt_fatal;
    qcow2_unlock(s);
    return gone ? blk_error(ENOMEDIUM, "qcow2: the image was marked corrupt during the "
                                       "write")
                : 0;
}

/* Write the chunk's data and COW parts; lock not held (invariant 4). */
static int write_chunk_data(Qcow2State *s, const Chunk *c, uint64_t req_offset,
                            const WriteSrc *w)
{
    const BlkIOV *qiov = w->qiov;
    size_t head_len = (size_t)(c->wstart - c->fstart);
    size_t tail_len = (size_t)(c->fend - c->wend);
    g_autofree uint8_t *head = NULL, *tail = NULL;
    bool zero_cow = c->cow_zero; /* invariant 13 */
    BlkIOV part, data, out;
    struct iovec *vec;
    int ret = 0, n = 0;

    if (!zero_cow) {
        /* invariant 19: one step for both parts, or one for each */
        bool one_step = head_len && tail_len && c->wend - c->wstart <= 16384;

        head = head_len ? g_malloc(head_len) : NULL;
        tail = tail_len ? g_malloc(tail_len) : NULL;
        if (head_len) {
            ret = cow_read_step(s, c);
            iov_init_buf(&part, head, head_len);
            ret = ret < 0 ? ret : qcow2_read_guest(s, c->fstart, &part);
        }
        if (ret == 0 && tail_len) {
            ret = one_step ? 0 : cow_read_step(s, c);
            iov_init_buf(&part, tail, tail_len);
            ret = ret < 0 ? ret : qcow2_read_guest(s, c->wend, &part);
        }
        if (ret < 0) {
            return ret;
        }
        zero_cow = c->kind == CHUNK_FRESH && buf_is_zero(head, head_len) &&
                   buf_is_zero(tail, tail_len);
    }
    if (!qiov) { /* invariant 17 */
        return copy_chunk_data(s, c, req_offset, w, head, tail,
                               zero_cow && c->grow.zero && !s->encrypted);
    }
    iov_slice(&data, qiov, (size_t)(c->wstart - req_offset),
              (size_t)(c->wend - c->wstart));
    if (zero_cow && (head_len || tail_len) && c->grow.zero && !s->encrypted) {
        /* invariant 11, grow.c invariant 2: the COW parts read as zeros
         * (not on an encrypted image: invariant 15) */
        blk_event(qcow2_data_node(s), BLKEV_DATA_WRITE);
        ret = blk_pwritev(qcow2_data_node(s), c->host + (c->wstart - c->guest), &data, 0);
        iov_destroy(&data);
        return ret;
    }
    if (zero_cow && (head_len || tail_len)) {
        /* invariant 11 */
        blk_event(qcow2_data_node(s), BLKEV_COW_WRITE);
        ret = qcow2_data_pwrite_zeroes(s, c->host + (c->fstart - c->guest), c->fstart,
                                       c->fend - c->fstart, BLK_REQ_NO_FALLBACK);
        if (ret == 0) {
            blk_event(qcow2_data_node(s), BLKEV_DATA_WRITE);
            ret = qcow2_data_pwritev(s, c->host + (c->wstart - c->guest), c->wstart,
                                     &data, 0);
            iov_destroy(&data);
            return ret;
        }
        if (ret != -ENOTSUP) {
            iov_destroy(&data);
            return ret;
        }
        blk_error_clear(); /* no cheap zeroing here: write the zeros */
    }
    if (c->cow_zero) { /* the zeros invariant 8 writes */
        head = head_len ? g_malloc0(head_len) : NULL;
        tail = tail_len ? g_malloc0(tail_len) : NULL;
    }
    vec = g_new(struct iovec, data.niov + 2);
    if (head_len) {
        vec[n++] = (struct iovec){.iov_base = head, .iov_len = head_len};
    }
    for (int i = 0; i < data.niov; i++) {
        vec[n++] = data.iov[i];
    }
    if (tail_len) {
        vec[n++] = (struct iovec){.iov_base = tail, .iov_len = tail_len};
    }
    iov_init_external(&out, vec, n);
    /* invariant 8 */
    blk_event(qcow2_data_node(s),
              head_len || tail_len ? BLKEV_COW_DATA_WRITE : BLKEV_DATA_WRITE);
    ret = qcow2_data_pwritev(s, c->host + (c->fstart - c->guest), c->fstart, &out, 0);
    iov_destroy(&data);
    g_free(vec);
    return ret;
}

/* ---- linking ---- */

/* fastmap.c invariant 1: the chunk's clusters are COPIED now (in place, or
 * just linked); writable entries where every subcluster is allocated.  Not
 * the vmstate area (past the disk size). */
void qcow2_learn_chunk_locked(Qcow2State *s, const Chunk *c)
{
    if (!c->learn) {
        return;
    }
    for (uint64_t i = 0; i < c->nb; i++) {
        uint64_t guest = c->guest + (i << s->cluster_bits);
        if (guest >= s->img->size) {
            break;
        }
        if (!s->extended_l2 || (uint32_t)c->new_bitmap[i] == UINT32_MAX) {
            qcow2_fastmap_learn_locked(
                s->fastmap, guest, c->host + (i << s->cluster_bits), true, c->meta_gen);
        }
    }
}

int qcow2_link_chunk_locked(Qcow2State *s, const Chunk *c)
{
    uint64_t l2_index;
    uint8_t *l2;
    int ret;

    if (c->kind == CHUNK_IN_PLACE) {
        return 0; /* learnt when planned */
    }
    if (c->refcounted && qcow2_need_accurate_refcounts(s)) {
        ret =
            qcow2_cache_set_dependency_locked(s->l2_cache, s->refcount_cache); /* inv 2 */
        if (ret < 0) {
            return ret;
        }
    }
    qcow2_cache_depends_on_flush_locked(s->l2_cache); /* invariant 1 */
    ret = qcow2_get_l2_for_write_locked(s, c->guest, &l2, &l2_index);
    if (ret < 0) {
        return ret;
    }
    for (uint64_t i = 0; i < c->nb; i++) {
        uint64_t host = c->host + (i << s->cluster_bits);
        qcow2_l2_set(s, l2, l2_index + i, host | QCOW2_OFLAG_COPIED, c->new_bitmap[i]);
    }
    qcow2_cache_mark_dirty_locked(s->l2_cache, l2);
    qcow2_cache_require_durable_locked(s->l2_cache, l2, c->data_gen); /* invariant 1 */
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
    if (c->kind == CHUNK_FRESH) {
        for (uint64_t i = 0; i < c->nb; i++) {
            qcow2_free_l2_entry_locked(s, c->old_entry[i], true,
                                       QCOW2_DISCARD_NEVER); /* invariant 3 */
        }
    }
    qcow2_learn_chunk_locked(s, c);
    return 0;
}

/* learn: a guest write (qcow2_pwritev), which changes each cluster's
 * mapping at most once (its chunk's link) and may remember the result
 * (fastmap.c invariant 1); other callers change mappings afterwards.
 * Invariant 14: called and returns with the lock held, the order turn of
 * the first chunk awaited by the caller before it took the lock; the lock
 * is dropped only while data moves and between chunks. */
static int write_locked(Qcow2State *s, uint64_t offset, const WriteSrc *w, bool learn)
{
    uint64_t end = offset + w->size, pos = offset, next_host = 0;
    int ret = 0;

    while (pos < end && ret == 0) {
        Chunk c = {0};

        if (pos != offset) {
            qcow2_unlock(s);
            blk_order_wait(); /* invariant 12 */
            qcow2_lock(s);
        }
        ret = qcow2_check_writable_locked(s);
        if (ret == 0) {
            ret = qcow2_plan_chunk_locked(s, pos, end, false, next_host, &c);
            c.learn = learn;
        }
        if (ret == 0 && c.kind == CHUNK_IN_PLACE) {
            qcow2_learn_chunk_locked(s, &c);
        }
        qcow2_unlock(s);
        if (ret < 0 || c.wend >= end) {
            blk_order_allocated(); /* invariant 12: the last plan is made */
        }
        if (ret == 0 && c.grow.cover) {
            qcow2_grow_cover(s, &c.grow); /* grow.c invariant 1 */
        }
        if (ret == 0) {
            ret = write_chunk_data(s, &c, offset, w);
            c.data_gen = blk_write_gen(qcow2_data_node(s));
        }
        qcow2_grow_finish(s, &c.grow); /* grow.c invariant 5 */
        qcow2_lock(s);
        if (ret == 0) {
            ret = qcow2_link_chunk_locked(s, &c);
        }
        if (ret < 0 && c.refcounted) {
            bool had_error = blk_error_mark(); /* invariant 9 */
            qcow2_free_clusters_locked(s, c.host, c.nb << s->cluster_bits);
            blk_error_unwind(had_error);
        }
        pos = c.wend;
        next_host = c.host + (c.nb << s->cluster_bits); /* invariant 20 */
        qcow2_chunk_clear(&c);
    }
    return ret;
}

int qcow2_write_registered_locked(Qcow2State *s, uint64_t offset, const BlkIOV *qiov)
{
    WriteSrc w = {.qiov = qiov, .size = qiov->size};

    return write_locked(s, offset, &w, false);
}

int qcow2_write_registered(Qcow2State *s, uint64_t offset, const BlkIOV *qiov)
{
    int ret;

    blk_order_wait(); /* invariant 12 */
    qcow2_lock(s);
    ret = qcow2_write_registered_locked(s, offset, qiov);
    qcow2_unlock(s);
    return ret;
}

/* write_request's answers besides 0 and -errno (invariant 6) */
enum {
    WRITE_RETRY = 1, /* waited unregistered: try the fast path again */
    WRITE_HELD = 2,  /* the span holds every cluster: write in place */
};

/*
 * Invariant 6: a write the fast path missed that finds nothing in its way
 * looks its clusters up again before it registers -- typically the request
 * that allocated them linked them after the miss -- and holds them as the
 * fast path does (fastmap.c invariants 1, 8) when every one is allocated
 * and COPIED now (qcow2_prime_locked: the cached L2 entry, the overlap check
 * in the current generation).  false: something else, or nothing held.
 */
static bool hold_in_place_locked(Qcow2State *s, uint64_t offset, uint64_t bytes,
                                 Qcow2FastSpan *sp)
{
    uint64_t cs = s->cluster_size, first = offset & ~(cs - 1);

    if (bytes == 0 ||
        (offset + bytes - 1 - first) >> s->cluster_bits >= QCOW2_FAST_SPAN_MAX) {
        return false; /* fastmap.c invariant 6 */
    }
    for (uint64_t gc = first; gc < offset + bytes; gc += cs) {
        if (!qcow2_prime_locked(s, gc, cs, true)) {
            return false;
        }
    }
    return qcow2_fastmap_begin_span(s->fastmap, offset, bytes, true, sp);
}

/* A guest write through the slow path: registered, planned, linked
 * (invariants 6, 12, 14); FUA is the caller's.  With sp (a request the
 * fast path could take), WRITE_RETRY or WRITE_HELD instead of registering
 * (invariant 6). */
static int write_request(Qcow2State *s, uint64_t offset, const WriteSrc *w,
                         Qcow2FastSpan *sp)
{
    Qcow2Inflight r;
    int ret;

    blk_order_wait(); /* invariant 12, before registering: see there */
    qcow2_lock(s);
    ret = qcow2_check_data_writable_locked(s, offset, w->size); /* meta.c inv. 8 */
    if (ret < 0) {
        qcow2_unlock(s);
        return ret;
    }
    qcow2_fastmap_set_writes_locked(s->fastmap, true); /* fastmap.c invariant 3 */
    if (sp && qcow2_inflight_conflicts_locked(s, offset, w->size, true)) {
        /* invariant 6: wait unregistered; the caller tries the fast path
         * again (the request in the way may have allocated our clusters) */
        qcow2_inflight_wait_locked(s, offset, w->size, true);
        qcow2_unlock(s);
        return WRITE_RETRY;
    }
    if (sp && hold_in_place_locked(s, offset, w->size, sp)) {
        qcow2_unlock(s);
        return WRITE_HELD;
    }
    qcow2_inflight_begin_locked(s, &r, offset, w->size, true);
    ret = write_locked(s, offset, w, true); /* invariant 14 */
    qcow2_inflight_end_locked(s, &r);
    ret = qcow2_finish_request_locked(s, ret);
    qcow2_unlock(s);
    return ret;
}

int qcow2_copy_in(BlkNode *img, uint64_t offset, uint64_t bytes, BlkNode *src,
                  uint64_t src_offset)
{
    Qcow2State *s = img->opaque;
    WriteSrc w = {.node = src, .node_offset = src_offset, .size = bytes};

    if (s->encrypted || !blk_can_copy_range(qcow2_data_node(s), src)) {
        return -ENOTSUP; /* invariant 17 */
    }
    qcow2_bitmaps_note(s, offset, bytes); /* bitmap-store.c invariant 2 */
    return write_request(s, offset, &w, NULL);
}

/* The fast path's write: sp holds every cluster in place (fastmap.c
 * invariant 8; whole sectors if encrypted: invariant 15). */
static int write_fast(Qcow2State *s, Qcow2FastSpan *sp, uint64_t offset,
                      const BlkIOV *qiov)
{
    int ret;

    blk_event(qcow2_data_node(s), BLKEV_DATA_WRITE);
    ret = qcow2_fast_io(s, sp, offset, qiov, true);
    qcow2_fastmap_end_span(s->fastmap, sp);
    return ret;
}

int qcow2_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    Qcow2State *s = img->opaque;
    Qcow2FastSpan sp;
    bool may_fast =
        !(flags & BLK_REQ_FUA) && qcow2_data_write_aligned(s, offset, qiov->size);
    int ret;

    qcow2_bitmaps_note(s, offset, qiov->size); /* bitmap-store.c invariant 2 */
retry:
    if (may_fast && qcow2_fastmap_begin_span(s->fastmap, offset, qiov->size, true, &sp)) {
        return write_fast(s, &sp, offset, qiov); /* allocated COPIED clusters */
    }
    ret = write_request(s, offset, &(WriteSrc){.qiov = qiov, .size = qiov->size},
                        may_fast ? &sp : NULL);
    if (ret == WRITE_RETRY) {
        goto retry; /* invariant 6 */
    }
    if (ret == WRITE_HELD) {
        ret = write_fast(s, &sp, offset, qiov); /* invariant 6 */
        /* invariant 12: nothing was planned; the turn passes once no hold
         * is kept (the thread passing it may run deferred jobs, order.c
         * invariant 4, and a registration waits for holds) */
        blk_order_allocated();
        return ret;
    }
    if (ret == 0 && (flags & BLK_REQ_FUA)) {
        ret = qcow2_flush(img);
    }
    return ret;
}
