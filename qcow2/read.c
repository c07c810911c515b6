/*
 * qcow2/read.c: guest reads and block status of one qcow2 layer.
 *
 * Owns: splitting a request into extents (cluster.c), moving the data of
 * each extent (data file, backing node, zeros, decompression), and the
 * block status answer for this layer.
 *
 * Invariants (cited as "read.c invariant N"):
 *  1. The metadata lock is held only while an extent is looked up; it is
 *     dropped before any guest data is read (qcow2.h invariant 1), so
 *     readers of different clusters run in parallel.
 *  2. Bytes past the end of the data file or the backing node read as
 *     zeros, as QEMU reads them: protocol nodes (image and data file) do
 *     that themselves (file.c invariant 3; blk_preadv, which also does not
 *     look at a size that concurrent writes grow), the backing node goes
 *     through blk_preadv_padded().
 *  3. Unallocated extents read from img->backing, or zeros without one.
 *  4. A compressed extent lies in one cluster (cluster.c invariant 2); it is
 *     decompressed whole into a per-request buffer of cluster_size bytes,
 *     from at most 2 * cluster_size compressed bytes (compress.c inv. 1).
 *  5. Block status reports for this layer only, with QEMU's flags:
 *     normal -> DATA|OFFSET_VALID, zero-alloc -> ZERO|OFFSET_VALID,
 *     zero-plain -> ZERO, compressed -> DATA|COMPRESSED (all ALLOCATED),
 *     unallocated -> 0 (OFFSET_VALID alone for an unallocated subcluster
 *     of an allocated cluster); pnum is the extent length (cluster.c
 *     inv. 2, 3).
 *     On an image detected as metadata-preallocated, data extents also ask
 *     the file whether they read as zeros (QEMU's BDRV_BLOCK_RECURSE).
 *     An encrypted image reports no host offsets (OFFSET_VALID never) and
 *     asks the file nothing: its bytes there are ciphertext (QEMU's rule).
 *     Nor does an image whose data file a metadata-only open left closed
 *     (qcow2.c invariant 11).  The extent looked up is learnt for fast
 *     reads (learn_status_locked, fastmap.c invariant 1); the answer does
 *     not depend on it.
 *  6. On a writable image a read registers its range in the in-flight list
 *     (write.c invariant 6), so no cluster it reads is replaced or freed by
 *     a concurrent write, zero or discard until its data has been read.
 *  7. An extent reads as zeros without any file being read when it is a
 *     zero cluster (plain or allocated) or unallocated with no backing
 *     node; the fast path learns such whole clusters as zero entries
 *     (fastmap.c invariant 9) and fills them with zeros, exactly as
 *     read_guest does, so a read across data and holes takes no lock.
 */
#include "qcow2/bitmap.h"
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

typedef struct ReadBuffers {
    uint8_t *compressed; /* 2 * cluster_size */
    uint8_t *cluster;    /* cluster_size */
} ReadBuffers;

static int read_compressed(Qcow2State *s, uint64_t l2_entry, uint64_t guest_offset,
                           const BlkIOV *part, ReadBuffers *rb)
{
    uint64_t coffset, csize;
    BlkIOV cio;
    int ret;

    qcow2_parse_compressed_entry(s, l2_entry, &coffset, &csize);
    if (!rb->compressed) {
        rb->compressed = g_try_malloc(2 * s->cluster_size);
        rb->cluster = g_try_malloc(s->cluster_size);
        if (!rb->compressed || !rb->cluster) {
            return blk_error(ENOMEM, "cannot allocate buffers for compressed clusters");
        }
    }
    g_assert(csize <= 2 * s->cluster_size); /* compress.c invariant 1 */
    iov_init_buf(&cio, rb->compressed, csize);
    ret = blk_preadv(s->img->file, coffset, &cio, 0);
    if (ret < 0) {
        return ret;
    }
    ret = qcow2_decompress(s->compression_type, rb->cluster, s->cluster_size,
                           rb->compressed, csize);
    if (ret < 0) {
        return blk_error(EIO,
                         "Could not decompress the %s-compressed cluster at guest "
                         "offset 0x%" PRIx64 " (host offset 0x%" PRIx64 ", %" PRIu64
                         " bytes)",
                         s->compression_type == QCOW2_COMPRESSION_ZSTD ? "zstd" : "zlib",
                         guest_offset & ~(s->cluster_size - 1), coffset, csize);
    }
    iov_from_buf(part, 0, rb->cluster + qcow2_offset_into_cluster(s, guest_offset),
                 part->size);
    return 0;
}

/* Read invariant 7: an extent of this type reads as zeros, no file read. */
static bool reads_zeros(const Qcow2State *s, Qcow2SubclusterType type)
{
    switch (type) {
    case QCOW2_SC_ZERO_PLAIN:
    case QCOW2_SC_ZERO_ALLOC:
        return true;
    case QCOW2_SC_UNALLOCATED_PLAIN:
    case QCOW2_SC_UNALLOCATED_ALLOC:
        return !s->img->backing; /* invariant 3 */
    default:
        return false;
    }
}

/* fastmap.c invariant 1: the NORMAL clusters of an extent read by a
 * request registered over them (or of a read-only image) are remembered
 * for fast reads: every cluster the extent touches (it lies inside the
 * request), with extended L2 only those it covers whole.  So are the
 * clusters an extent that reads as zeros covers whole (fastmap.c
 * invariant 9, read.c invariant 7). */
static void learn_read_locked(Qcow2State *s, uint64_t pos, const Qcow2Mapping *m)
{
    uint64_t cs = s->cluster_size, in = qcow2_offset_into_cluster(s, pos);
    uint64_t end = pos + m->bytes;

    if (reads_zeros(s, m->type)) {
        for (uint64_t gc = ROUND_UP(pos, cs); gc < end && end - gc >= cs; gc += cs) {
            qcow2_fastmap_learn_zero_locked(s->fastmap, gc);
        }
        return;
    }
    if (m->type != QCOW2_SC_NORMAL) {
        return;
    }
    for (uint64_t gc = pos - in; gc < end && gc < s->img->size; gc += cs) {
        if (!s->extended_l2 || (gc >= pos && end - gc >= cs)) {
            qcow2_fastmap_learn_locked(s->fastmap, gc,
                                       m->host_offset - in + (gc - (pos - in)), false, 0);
        }
    }
}

/* Guest clusters a slow read learns past its end (below). */
#define LEARN_AHEAD 64u

/*
 * fastmap.c invariant 1, read-ahead: after a slow read, the NORMAL clusters
 * (and those that read as zeros, fastmap.c invariant 9) of the next
 * LEARN_AHEAD clusters in the same, cached, L2 table are learnt
 * as qcow2_prime_locked learns (no I/O, only while no write registration covers
 * them), so a sequential reader's next requests (nbdcopy's, convert's)
 * take the fast path instead of the lock.
 */
static void learn_ahead_locked(Qcow2State *s, uint64_t pos)
{
    uint64_t cs = s->cluster_size, start = ROUND_UP(pos, cs);
    uint64_t slice = cs << s->l2_slice_bits, end; /* cluster.c invariant 6 */

    if (start >= s->img->size || qcow2_has_data_file(s) ||
        !qcow2_l2_cached_locked(s, start)) {
        return;
    }
    end =
        MIN(MIN(start + LEARN_AHEAD * cs, s->img->size), (start & ~(slice - 1)) + slice);
    if (qcow2_inflight_conflicts_locked(s, start, end - start, false)) {
        return;
    }
    while (start < end) {
        Qcow2Mapping m;
        if (qcow2_get_host_offset_locked(s, start, end - start, &m) < 0) {
            blk_error_clear(); /* a request of the slow path reports it */
            return;
        }
        learn_read_locked(s, start, &m);
        start += m.bytes;
    }
}

static int read_guest(Qcow2State *s, uint64_t offset, const BlkIOV *qiov, bool learn)
{
    BlkNode *img = s->img;
    ReadBuffers rb = {0};
    size_t done = 0;
    int ret = 0;

    while (done < qiov->size) {
        uint64_t pos = offset + done;
        Qcow2Mapping m;
        BlkIOV part;

        qcow2_lock(s);
        ret = qcow2_get_host_offset_locked(s, pos, qiov->size - done, &m);
        if (ret == 0 && learn) {
            learn_read_locked(s, pos, &m);
            if (m.bytes >= qiov->size - done) {
                learn_ahead_locked(s, offset + qiov->size);
            }
        }
        qcow2_unlock(s); /* read.c invariant 1 */
        if (ret < 0) {
            break;
        }
        size_t n = (size_t)MIN(m.bytes, (uint64_t)(qiov->size - done));
        iov_slice(&part, qiov, done, n);
        switch (m.type) {
        case QCOW2_SC_ZERO_PLAIN:
        case QCOW2_SC_ZERO_ALLOC:
            iov_memset(&part, 0, 0, n);
            break;
        case QCOW2_SC_UNALLOCATED_PLAIN:
        case QCOW2_SC_UNALLOCATED_ALLOC:
            if (img->backing) { /* read.c invariant 3 */
                ret = blk_preadv_padded(img->backing, pos, &part);
            } else {
                iov_memset(&part, 0, 0, n);
            }
            break;
        case QCOW2_SC_NORMAL:
            /* read.c invariant 2: a protocol node reads zeros past its end;
             * crypt.c invariant 1: decrypted there */
            blk_event(s->img->file, BLKEV_DATA_READ); /* QEMU's read_aio */
            ret = qcow2_data_preadv(s, m.host_offset, pos, &part);
            break;
        case QCOW2_SC_COMPRESSED:
            ret = read_compressed(s, m.host_offset, pos, &part, &rb);
            break;
        }
        iov_destroy(&part);
        if (ret < 0) {
            break;
        }
        done += n;
    }
    g_free(rb.compressed);
    g_free(rb.cluster);
    return ret < 0 ? ret : 0;
}

int qcow2_read_guest(Qcow2State *s, uint64_t offset, const BlkIOV *qiov)
{
    return read_guest(s, offset, qiov, false);
}

static int read_registered(Qcow2State *s, uint64_t offset, const BlkIOV *qiov, bool learn)
{
    Qcow2Inflight r;
    int ret;

    if (!s->writable) {
        return read_guest(s, offset, qiov, learn);
    }
    /* invariant 6 */
    qcow2_lock(s);
    qcow2_inflight_begin_locked(s, &r, offset, qiov->size, false);
    qcow2_unlock(s);
    ret = read_guest(s, offset, qiov, learn);
    qcow2_lock(s);
    qcow2_inflight_end_locked(s, &r);
    qcow2_unlock(s);
    return ret;
}

int qcow2_read_registered(Qcow2State *s, uint64_t offset, const BlkIOV *qiov)
{
    return read_registered(s, offset, qiov, false);
}

int qcow2_fast_io(Qcow2State *s, const Qcow2FastSpan *sp, uint64_t offset,
                  const BlkIOV *qiov, bool write)
{
    uint64_t cs = s->cluster_size;
    size_t done = 0;
    int ret = 0;

    /* fastmap.c invariant 8: one data request per run of host-contiguous
     * clusters, each at its own held mapping; zeros for a run of zero
     * entries (fastmap.c invariant 9, read.c invariant 7; reads only) */
    for (unsigned i = 0; i < sp->n && ret == 0;) {
        uint64_t host = sp->ref[i].host;
        bool zero = sp->ref[i].zero;
        uint64_t len = cs - qcow2_offset_into_cluster(s, offset + done);
        BlkIOV part;

        while (++i < sp->n && sp->ref[i].zero == zero &&
               (zero || sp->ref[i].host == host + len)) {
            len += cs;
        }
        len = MIN(len, (uint64_t)(qiov->size - done));
        iov_slice(&part, qiov, done, (size_t)len);
        g_assert(!(zero && write)); /* a zero entry is never writable */
        if (zero) {
            iov_memset(&part, 0, 0, (size_t)len);
        } else {
            if (!write) {
                blk_event(s->img->file, BLKEV_DATA_READ); /* QEMU's read_aio */
            }
            ret = write ? qcow2_data_pwritev(s, host, offset + done, &part, 0)
                        : qcow2_data_preadv(s, host, offset + done, &part);
        }
        iov_destroy(&part);
        done += (size_t)len;
    }
    return ret;
}

/* meta.c invariant 2: a read after the image was marked corrupt while
 * open finds QEMU's driver gone. */
static bool gone(Qcow2State *s)
{
    return __atomic_load_n(&s->corrupt_fatal, __ATOMIC_ACQUIRE);
}

int qcow2_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    Qcow2State *s = img->opaque;
    Qcow2FastSpan sp;
    int ret;

    if (gone(s)) {
        return blk_error(ENOMEDIUM, "%s", g_strerror(ENOMEDIUM));
    }
    if (qcow2_fastmap_begin_span(s->fastmap, offset, qiov->size, false, &sp)) {
        /* fastmap.c: allocated clusters, read without the lock */
        ret = qcow2_fast_io(s, &sp, offset, qiov, false);
        qcow2_fastmap_end_span(s->fastmap, &sp);
        return ret;
    }
    return read_registered(s, offset, qiov, true);
}

/* fastmap.c: a read of an allocated cluster, or a rewrite of an allocated
 * COPIED one, that goes straight to the data node (the io_uring engine);
 * the slot stays held until qcow2_direct_end. */
/* Guest offset's L2 slice is in the cache: looking it up needs no I/O. */
bool qcow2_l2_cached_locked(Qcow2State *s, uint64_t offset)
{
    uint64_t l1_index = offset >> (s->cluster_bits + s->l2_bits), l2_offset;

    if (l1_index >= s->l1_size) {
        return false;
    }
    l2_offset = s->l1_table[l1_index] & QCOW2_L1E_OFFSET_MASK;
    return l2_offset != 0 && !(s->l1_table[l1_index] & QCOW2_L1E_RESERVED_MASK) &&
           qcow2_cache_holds_locked(s->l2_cache,
                                    qcow2_l2_slice_offset(s, l2_offset, offset));
}

/*
 * fastmap.c invariant 1: learn guest cluster X (holding [offset, offset +
 * bytes)) for a request that missed the map, without I/O: X's L2 table only
 * if it is cached, and only while no write registration covers X -- so X's
 * mapping cannot change before a registration forgets it again.  A read
 * entry as a registered read learns it (learn_read_locked); a writable one
 * for a COPIED cluster that a write would rewrite in place (write.c
 * invariant 5: every subcluster allocated), overlap checked in the current
 * metadata generation (invariant 4).  false: nothing learnt.  Callers: a
 * direct request (below), which takes the metadata lock only if it is free
 * and so never waits, and a slow write with nothing in its way (write.c
 * invariant 6).
 */
bool qcow2_prime_locked(Qcow2State *s, uint64_t offset, uint64_t bytes, bool write)
{
    uint64_t cs = s->cluster_size, gc = offset & ~(cs - 1), l2_index;
    uint8_t *l2;
    Qcow2Mapping m;

    if (gc >= s->img->size || qcow2_has_data_file(s) ||
        !qcow2_l2_cached_locked(s, offset) ||
        qcow2_inflight_conflicts_locked(s, offset, bytes, false)) {
        return false;
    }
    if (!write) {
        if (qcow2_get_host_offset_locked(s, gc, cs, &m) < 0) {
            blk_error_clear(); /* the slow path reports it */
            return false;
        }
        learn_read_locked(s, gc, &m);
        return true;
    }
    if (qcow2_get_l2_locked(s, gc, &l2, &l2_index) < 0 || !l2) {
        blk_error_clear();
        return false;
    }
    uint64_t e = qcow2_l2_get(s, l2, l2_index), bm = qcow2_l2_get_bitmap(s, l2, l2_index);
    uint64_t host = e & QCOW2_L2E_OFFSET_MASK;
    Qcow2SubclusterType type;
    bool in_place =
        qcow2_l2_entry_valid(s, e, bm, gc, &type) && (e & QCOW2_OFLAG_COPIED) &&
        !(e & QCOW2_OFLAG_COMPRESSED) && host &&
        (s->extended_l2 ? (uint32_t)bm == UINT32_MAX : type == QCOW2_SC_NORMAL);
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
    if (!in_place) {
        return false;
    }
    uint32_t gen = qcow2_fastmap_gen(s->fastmap);
    if (qcow2_check_metadata_overlap_locked(s, 0, host, cs) != 0) {
        return false; /* the slow path's check reports it (meta.c invariant 2) */
    }
    qcow2_fastmap_learn_locked(s->fastmap, gc, host, true, gen);
    return true;
}

/*
 * fastmap.c invariant 7, where a ring request is issued (debug builds): the
 * hold maps [offset, offset + bytes) to host, as X's L2 entry does now --
 * checked when the metadata lock is free and the table cached, so the
 * submitting thread neither waits nor reads.
 */
static void check_direct_hold(Qcow2State *s, uint64_t offset, uint64_t bytes,
                              uint64_t host)
{
#ifndef NDEBUG
    Qcow2Mapping m;

    if (!qcow2_trylock(s)) {
        return;
    }
    if (qcow2_l2_cached_locked(s, offset)) {
        if (qcow2_get_host_offset_locked(s, offset, bytes, &m) < 0) {
            blk_error_clear(); /* a request of the slow path reports it */
        } else if (m.type != QCOW2_SC_NORMAL || m.host_offset != host ||
                   m.bytes < bytes) {
            g_error("fast map broken (fastmap.c invariant 7): guest 0x%" PRIx64
                    " is mapped as type %d at host 0x%" PRIx64 " for %" PRIu64
                    " bytes, but a ring request of %" PRIu64 " bytes goes to 0x%" PRIx64,
                    offset, (int)m.type, m.host_offset, m.bytes, bytes, host);
        }
    }
    qcow2_unlock(s);
#else
    (void)s, (void)offset, (void)bytes, (void)host;
#endif
}

bool qcow2_direct_begin(BlkNode *img, uint64_t offset, uint64_t bytes, bool write,
                        BlkDirect *d)
{
    Qcow2State *s = img->opaque;
    Qcow2FastRef ref;
    bool hit;

    /* Encrypted images without their key, and fault nodes, take no ring
     * requests (crypt.c invariant 3): answer before anything
     * is announced to a test node, or its step and breakpoints would run
     * on the submitting thread and again on the pool (faulty.c invariant
     * 5).  An encrypted write is of whole sectors (crypt.c invariant 4). */
    if (!qcow2_data_direct_ok(s) ||
        (write && !qcow2_data_write_aligned(s, offset, bytes)) || gone(s)) {
        return false; /* gone: qcow2_preadv's answer (meta.c invariant 2) */
    }
    /* A write: the in-place rewrite of qcow2_pwritev's fast path */
    if (write) {
        qcow2_bitmaps_note(s, offset, bytes); /* bitmap-store.c invariant 2 */
    }
    hit = qcow2_fastmap_begin(s->fastmap, offset, bytes, write, &ref);
    if (!hit && qcow2_trylock(s)) {
        bool learnt = qcow2_prime_locked(s, offset, bytes, write);
        qcow2_unlock(s);
        hit = learnt && qcow2_fastmap_begin(s->fastmap, offset, bytes, write, &ref);
    }
    if (!hit) {
        return false;
    }
    check_direct_hold(s, offset, bytes, ref.host);
    qcow2_data_direct_fill(s, ref.host, offset, d); /* crypt.c invariant 3 */
    if (write) {
        blk_event(d->node, BLKEV_DATA_WRITE);
    }
    d->hold = ref.slot;
    d->hold_aux = ref.stripe;
    return true;
}

void qcow2_direct_end(BlkNode *img, BlkDirect *d)
{
    Qcow2State *s = img->opaque;
    Qcow2FastRef ref = {.slot = d->hold, .stripe = d->hold_aux, .host = d->offset};

    qcow2_fastmap_end(s->fastmap, &ref);
}

/* Clusters one block status answer learns at most (below). */
#define LEARN_STATUS_MAX 1024u

/*
 * fastmap.c invariant 1, block status: the clusters of the extent just
 * looked up (its first LEARN_STATUS_MAX), under the metadata lock held
 * since the lookup, are learnt as learn_ahead_locked learns them (only
 * while no write registration covers them), so the reads a client such as
 * nbdcopy sends for what block status reported take the fast path.  Not
 * where the extent has no L2 table: a walk over an image's unallocated
 * ranges (qemu-img map, 010's 100 GiB image of 1 KiB clusters: 819200
 * answers of 128 clusters each) learnt every cluster of them, 100 million
 * stripe locks, 3.6 s against qemu-img's 0.25 s -- into a map of at most
 * 128 Ki entries; a table covers 512 MiB at the default cluster size, so
 * such extents are rare where there is data to read beside them.
 */
static void learn_status_locked(Qcow2State *s, uint64_t pos, const Qcow2Mapping *m)
{
    uint64_t cs = s->cluster_size, l1_index = pos >> (s->cluster_bits + s->l2_bits);
    Qcow2Mapping part = *m;

    if (qcow2_has_data_file(s) || l1_index >= s->l1_size ||
        !(s->l1_table[l1_index] & QCOW2_L1E_OFFSET_MASK)) {
        return; /* (no L2 table: above) */
    }
    part.bytes =
        MIN(part.bytes, LEARN_STATUS_MAX * cs - qcow2_offset_into_cluster(s, pos));
    if (qcow2_inflight_conflicts_locked(s, pos, part.bytes, false)) {
        return;
    }
    learn_read_locked(s, pos, &part);
}

/* QEMU's BDRV_BLOCK_RECURSE for metadata-preallocated images: a data
 * extent that is a hole in the file reads as zeros. */
static void recurse_into_file(BlkStatus *st)
{
    int64_t fsize = blk_getlength(st->file);
    BlkStatus fst;

    if (fsize < 0) {
        blk_error_clear();
        return;
    }
    if (st->map >= (uint64_t)fsize) {
        st->flags |= BLK_STATUS_ZERO; /* past the end of the file */
        return;
    }
    uint64_t len = MIN(st->pnum, (uint64_t)fsize - st->map);
    if (blk_block_status(st->file, st->map, len, &fst) < 0 || fst.pnum == 0) {
        blk_error_clear(); /* extra information only: ignore errors */
        return;
    }
    if ((fst.flags & BLK_STATUS_ZERO) && st->map + fst.pnum >= (uint64_t)fsize) {
        st->flags |= BLK_STATUS_ZERO; /* zeros up to the end of the file */
        return;
    }
    st->pnum = MIN(st->pnum, fst.pnum);
    st->flags |= fst.flags & BLK_STATUS_ZERO;
}

int qcow2_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    Qcow2State *s = img->opaque;
    Qcow2Mapping m;
    int ret;

    memset(st, 0, sizeof(*st));
    qcow2_lock(s);
    if (!s->prealloc_checked) {
        ret = qcow2_detect_metadata_preallocation_locked(s);
        if (ret < 0) {
            blk_error_clear(); /* a heuristic; QEMU ignores its errors too */
        }
        s->metadata_preallocated = ret == 1;
        s->prealloc_checked = true;
    }
    ret = qcow2_get_host_offset_locked(s, offset, bytes, &m);
    if (ret == 0) {
        learn_status_locked(s, offset, &m);
    }
    qcow2_unlock(s);
    if (ret < 0) {
        return ret;
    }

    st->pnum = MIN(m.bytes, bytes);
    switch (m.type) { /* read.c invariant 5 */
    case QCOW2_SC_NORMAL:
        st->flags = BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED;
        st->map = m.host_offset;
        st->file = qcow2_data_node(s);
        if (s->metadata_preallocated && !s->encrypted && !s->data_file_skipped) {
            recurse_into_file(st);
        }
        break;
    case QCOW2_SC_ZERO_ALLOC:
        st->flags = BLK_STATUS_ZERO | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED;
        st->map = m.host_offset;
        st->file = qcow2_data_node(s);
        break;
    case QCOW2_SC_ZERO_PLAIN:
        st->flags = BLK_STATUS_ZERO | BLK_STATUS_ALLOCATED;
        break;
    case QCOW2_SC_COMPRESSED:
        st->flags = BLK_STATUS_DATA | BLK_STATUS_ALLOCATED | BLK_STATUS_COMPRESSED;
        break;
    case QCOW2_SC_UNALLOCATED_ALLOC:
        /* Not allocated here (the backing file decides), but QEMU still
         * reports where the preallocated host cluster is. */
        st->flags = BLK_STATUS_OFFSET_VALID;
        st->map = m.host_offset;
        st->file = qcow2_data_node(s);
        break;
    case QCOW2_SC_UNALLOCATED_PLAIN:
        st->flags = 0;
        break;
    }
    if (s->encrypted || s->data_file_skipped) {
        /* read.c invariant 5: the file holds ciphertext, no guest bytes;
         * qcow2.c invariant 11: no data file is open to point into */
        st->flags &= ~(unsigned)BLK_STATUS_OFFSET_VALID;
        st->map = 0;
        st->file = NULL;
    }
    return 0;
}
