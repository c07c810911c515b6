/*
 * qcow2/write.c: guest writes (also the vmstate area) and the in-flight
 * request list.
 *
 * Owns: splitting a write into chunks, deciding per cluster whether it is
 * written in place, reused with new metadata, or moved to a fresh cluster,
 * copy-on-write of what the write does not cover, linking the L2 entries
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
 *     Such a wait holds nothing either.  The end of a registration wakes
 *     only the waiters whose range it kept waiting (aio/waiters.c, the
 *     implementation order.c invariant 6 uses), with no system call when
 *     there are none.
 *  7. COW follows the spec: without extended L2 a new cluster is written
 *     whole (head and tail from the old contents: old cluster, compressed
 *     cluster, backing file or zeros).  With extended L2 only subclusters
 *     that become allocated are written: the touched ones (their untouched
 *     bytes from the old contents) and, when the data moves to a fresh
 *     cluster, those allocated in the old one; unallocated subclusters stay
 *     unallocated (backing) and zero ones stay zero.
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
 */
#include "qcow2/grow.h"

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

/* ---- planning ---- */

typedef enum ChunkKind {
    CHUNK_IN_PLACE, /* COPIED cluster(s), no metadata change */
    CHUNK_REUSE,    /* one COPIED cluster whose entry changes (bits, zero flag) */
    CHUNK_FRESH,    /* new contiguous clusters replace the old entries */
} ChunkKind;

typedef struct Chunk {
    ChunkKind kind;
    uint64_t guest;        /* guest offset of the first cluster */
    uint64_t nb;           /* clusters */
    uint64_t host;         /* host offset of the first cluster */
    uint64_t wstart, wend; /* guest bytes of the request in this chunk */
    uint64_t fstart, fend; /* guest bytes written to the host (with COW) */
    uint64_t *old_entry;   /* nb entries as planned */
    uint64_t *new_bitmap;  /* nb bitmaps to link (extended L2) */
    bool refcounted;       /* host clusters were allocated (not a data file) */
    uint64_t data_gen;     /* write generation once the data was written */
    uint32_t meta_gen;     /* fastmap generation before the overlap check */
    bool learn;            /* a guest write: remember the mapping (fastmap.c) */
    Qcow2GrowPlan grow;    /* fresh clusters: the file's growth (grow.c) */
    bool cow_zero;         /* the COW parts read as zeros (invariant 13) */
} Chunk;

static void chunk_clear(Chunk *c)
{
    g_free(c->old_entry);
    g_free(c->new_bitmap);
    memset(c, 0, sizeof(*c));
}

static inline uint32_t sc_mask(unsigned first, unsigned last)
{
    /* subclusters first..last inclusive (0 <= first <= last <= 31) */
    return (uint32_t)((((UINT64_C(1) << (last + 1)) - 1)) &
                      ~((UINT64_C(1) << first) - 1));
}

/* Has the entry a host cluster of its own (invariant 10 for data files)? */
static bool entry_has_host(const Qcow2State *s, uint64_t e)
{
    return !(e & QCOW2_OFLAG_COMPRESSED) &&
           ((e & QCOW2_L2E_OFFSET_MASK) ||
            (qcow2_has_data_file(s) && (e & QCOW2_OFLAG_COPIED)));
}

/*
 * What a write of bytes [a, b) of a cluster with entry e / bitmap bm needs
 * (invariant 5).  type is the (validated) type of the entry's subcluster 0.
 */
static ChunkKind decide(const Qcow2State *s, uint64_t e, uint64_t bm,
                        Qcow2SubclusterType type, uint64_t a, uint64_t b)
{
    bool copied = e & QCOW2_OFLAG_COPIED;

    if (e & QCOW2_OFLAG_COMPRESSED) {
        return CHUNK_FRESH;
    }
    if (!s->extended_l2) {
        if (type == QCOW2_SC_NORMAL && copied) {
            return CHUNK_IN_PLACE;
        }
        return type == QCOW2_SC_ZERO_ALLOC && copied ? CHUNK_REUSE : CHUNK_FRESH;
    }
    if (entry_has_host(s, e) && copied) {
        unsigned f = (unsigned)(a >> s->subcluster_bits);
        unsigned l = (unsigned)((b - 1) >> s->subcluster_bits);
        return (sc_mask(f, l) & ~(uint32_t)bm) ? CHUNK_REUSE : CHUNK_IN_PLACE;
    }
    return CHUNK_FRESH;
}

/*
 * New bitmap (extended L2) and the bytes [*fa, *fb) of the cluster to write
 * for a write of [a, b) (invariant 7).
 */
static void plan_cluster(const Qcow2State *s, uint64_t e, uint64_t bm, bool fresh,
                         uint64_t a, uint64_t b, uint64_t *new_bm, uint64_t *fa,
                         uint64_t *fb)
{
    uint64_t scs = UINT64_C(1) << s->subcluster_bits;
    unsigned f = (unsigned)(a >> s->subcluster_bits);
    unsigned l = (unsigned)((b - 1) >> s->subcluster_bits);
    uint32_t touched = sc_mask(f, l), alloc = (uint32_t)bm, zero = (uint32_t)(bm >> 32);
    uint32_t new_alloc;

    if (!s->extended_l2 || (e & QCOW2_OFLAG_COMPRESSED)) {
        *new_bm = s->extended_l2 ? QCOW2_L2_BITMAP_ALL_ALLOC : 0;
        *fa = 0;
        *fb = s->cluster_size;
        return;
    }
    if (!fresh) {
        uint32_t need = touched & ~alloc;
        new_alloc = alloc | touched;
        *fa = (need & (1u << f)) ? f * scs : a;
        *fb = (need & (1u << l)) ? (l + 1) * scs : b;
    } else {
        new_alloc = touched | (entry_has_host(s, e) ? alloc : 0);
        *fa = (uint64_t)__builtin_ctz(new_alloc) * scs;
        *fb = (uint64_t)(32 - __builtin_clz(new_alloc)) * scs;
    }
    *new_bm = new_alloc | ((uint64_t)(zero & ~new_alloc) << 32);
}

/* Invariant 13: the old contents of a cluster with entry e read as zeros
 * without a read -- no host cluster of its own (or the zero flag), so
 * without a backing file they are zeros. */
static bool cow_reads_zero(const Qcow2State *s, uint64_t e)
{
    if (s->img->backing || (e & QCOW2_OFLAG_COMPRESSED)) {
        return false;
    }
    if (s->extended_l2) {
        return !entry_has_host(s, e);
    }
    return !entry_has_host(s, e) || (e & QCOW2_OFLAG_ZERO);
}

/* Plan the chunk starting at guest pos (< end).  Lock held. */
static int plan_chunk_locked(Qcow2State *s, uint64_t pos, uint64_t end, Chunk *c)
{
    const uint64_t max_bytes = UINT64_C(64) << 20;
    uint64_t cs = s->cluster_size, l2_index, l2_offset, max_nb;
    uint8_t *l2 = NULL;
    bool in_place_first = false, in_place_last = false; /* invariant 16 */
    int ret;

    memset(c, 0, sizeof(*c));
    ret = qcow2_get_l2_for_write_locked(s, pos, &l2, &l2_index);
    if (ret < 0) {
        return ret;
    }
    l2_offset =
        s->l1_table[pos >> (s->cluster_bits + s->l2_bits)] & QCOW2_L1E_OFFSET_MASK;
    c->guest = pos & ~(cs - 1);
    max_nb = MIN(s->l2_slice_size - l2_index, /* cluster.c invariant 6 */
                 (ROUND_UP(end, cs) - c->guest) >> s->cluster_bits);
    max_nb = MIN(max_nb, MAX(max_bytes >> s->cluster_bits, 1));
    c->old_entry = g_new(uint64_t, max_nb);
    c->new_bitmap = g_new(uint64_t, max_nb);

    for (uint64_t i = 0; i < max_nb; i++) {
        uint64_t gc = c->guest + (i << s->cluster_bits);
        uint64_t a = i == 0 ? pos - gc : 0, b = MIN(end - gc, cs);
        uint64_t e = qcow2_l2_get(s, l2, l2_index + i);
        uint64_t bm = qcow2_l2_get_bitmap(s, l2, l2_index + i);
        Qcow2SubclusterType type;
        unsigned n;
        ChunkKind k;

        if (!qcow2_l2_entry_valid(s, e, bm, gc, &type)) {
            if (i > 0) {
                break; /* reported when the next chunk starts there */
            }
            ret = qcow2_l2_entry_type_locked(s, e, bm, 0, l2_offset, l2_index + i, gc,
                                             &type, &n);
            goto out;
        }
        k = decide(s, e, bm, type, a, b);
        if (i == 0) {
            c->kind = k;
            c->host = e & QCOW2_L2E_OFFSET_MASK;
        } else if ((k == CHUNK_FRESH) != (c->kind == CHUNK_FRESH) ||
                   (k != CHUNK_FRESH &&
                    (e & QCOW2_L2E_OFFSET_MASK) != c->host + (i << s->cluster_bits))) {
            break; /* invariant 16: in place and reused clusters join when contiguous */
        }
        if (k == CHUNK_REUSE) {
            c->kind = CHUNK_REUSE;
        }
        in_place_last = k == CHUNK_IN_PLACE;
        if (i == 0) {
            in_place_first = in_place_last;
        }
        c->old_entry[i] = e;
        c->new_bitmap[i] = bm;
        c->nb = i + 1;
    }

    /* Bytes to write: the request's part, widened by COW (invariant 7). */
    uint64_t last = c->guest + ((c->nb - 1) << s->cluster_bits), fa, fb, bm;
    c->wstart = pos;
    c->wend = MIN(end, last + cs);
    c->fstart = pos;
    c->fend = c->wend;
    for (uint64_t i = 0; i < c->nb && c->kind != CHUNK_IN_PLACE; i++) {
        uint64_t gc = c->guest + (i << s->cluster_bits);
        uint64_t a = i == 0 ? pos - gc : 0, b = MIN(c->wend - gc, cs);
        plan_cluster(s, c->old_entry[i], c->new_bitmap[i], c->kind == CHUNK_FRESH, a, b,
                     &bm, &fa, &fb);
        if ((i == 0 && in_place_first) || (i == c->nb - 1 && in_place_last)) {
            fa = a; /* invariant 16: a cluster written in place needs no COW */
            fb = b;
        }
        c->new_bitmap[i] = bm;
        if (i == 0) {
            c->fstart = gc + fa;
        }
        if (i == c->nb - 1) {
            c->fend = gc + fb;
        }
    }

    if (s->encrypted) {
        /* invariant 15: whole sectors, the widening read like COW */
        c->fstart = ROUND_DOWN(c->fstart, CRYPTO_SECTOR_SIZE);
        c->fend = ROUND_UP(c->fend, CRYPTO_SECTOR_SIZE);
    }

    c->cow_zero = c->kind == CHUNK_FRESH && cow_reads_zero(s, c->old_entry[0]) &&
                  cow_reads_zero(s, c->old_entry[c->nb - 1]); /* invariant 13 */
    if (c->kind != CHUNK_IN_PLACE) {
        ret = qcow2_mark_dirty_locked(s); /* invariant 2 */
        if (ret < 0) {
            goto out;
        }
    }
    if (c->kind == CHUNK_FRESH) {
        if (qcow2_has_data_file(s)) {
            c->host = c->guest; /* invariant 10 */
        } else {
            uint64_t before, len = c->nb << s->cluster_bits;
            int64_t off;
            ret = qcow2_reuse_pending_frees_locked(s, c->nb); /* alloc.c inv. 10 */
            if (ret < 0) {
                goto out;
            }
            before = s->file_size;
            off = qcow2_alloc_clusters_locked(s, c->nb);
            if (off < 0) {
                ret = (int)off;
                goto out;
            }
            c->host = (uint64_t)off;
            c->refcounted = true;
            qcow2_grow_plan_locked(s, c->host, len, before, c->wend >= end,
                                   &c->grow); /* grow.c */
        }
    }
    c->meta_gen = qcow2_fastmap_gen(s->fastmap);
    if (!qcow2_has_data_file(s)) {
        ret = qcow2_pre_write_overlap_check_locked(s, 0, c->host + (c->fstart - c->guest),
                                                   c->fend - c->fstart);
        if (ret < 0 && c->refcounted) {
            bool had_error = blk_error_mark();
            qcow2_free_clusters_locked(s, c->host, c->nb << s->cluster_bits);
            blk_error_unwind(had_error);
            c->refcounted = false;
        }
    }
out:
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2); /* qcow2.h invariant 4 */
    return ret;
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
        head = head_len ? g_malloc(head_len) : NULL;
        tail = tail_len ? g_malloc(tail_len) : NULL;
        if (head_len) {
            iov_init_buf(&part, head, head_len);
            ret = qcow2_read_guest(s, c->fstart, &part);
        }
        if (ret == 0 && tail_len) {
            iov_init_buf(&part, tail, tail_len);
            ret = qcow2_read_guest(s, c->wend, &part);
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
static void learn_chunk_locked(Qcow2State *s, const Chunk *c)
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

static int link_chunk_locked(Qcow2State *s, const Chunk *c)
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
    learn_chunk_locked(s, c);
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
    uint64_t end = offset + w->size, pos = offset;
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
            ret = plan_chunk_locked(s, pos, end, &c);
            c.learn = learn;
        }
        if (ret == 0 && c.kind == CHUNK_IN_PLACE) {
            learn_chunk_locked(s, &c);
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
            ret = link_chunk_locked(s, &c);
        }
        if (ret < 0 && c.refcounted) {
            bool had_error = blk_error_mark(); /* invariant 9 */
            qcow2_free_clusters_locked(s, c.host, c.nb << s->cluster_bits);
            blk_error_unwind(had_error);
        }
        pos = c.wend;
        chunk_clear(&c);
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

/* A guest write through the slow path: registered, planned, linked
 * (invariants 6, 12, 14); FUA is the caller's.  1 when a may_fast
 * request waited unregistered for one in its way: try the fast path again. */
static int write_request(Qcow2State *s, uint64_t offset, const WriteSrc *w, bool may_fast)
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
    if (may_fast && qcow2_inflight_conflicts_locked(s, offset, w->size, true)) {
        /* invariant 6: wait unregistered; the caller tries the fast path
         * again (the request in the way may have allocated our clusters) */
        qcow2_inflight_wait_locked(s, offset, w->size, true);
        qcow2_unlock(s);
        return 1;
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
    return write_request(s, offset, &w, false);
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
        /* fastmap.c: allocated COPIED clusters, written in place (whole
         * sectors if encrypted: invariant 15) */
        blk_event(qcow2_data_node(s), BLKEV_DATA_WRITE);
        ret = qcow2_fast_io(s, &sp, offset, qiov, true);
        qcow2_fastmap_end_span(s->fastmap, &sp);
        return ret;
    }
    ret =
        write_request(s, offset, &(WriteSrc){.qiov = qiov, .size = qiov->size}, may_fast);
    if (ret == 1) {
        goto retry; /* invariant 6 */
    }
    if (ret == 0 && (flags & BLK_REQ_FUA)) {
        ret = qcow2_flush(img);
    }
    return ret;
}
