/*
 * api/vmstate-read.c: the vmstate engine's read path (loadvm): direct reads,
 * the read-ahead queue and split reads of struct ApiVmstate (api/vmstate.h).
 * The engine, its buffers, errors and write path are api/vmstate.c, whose
 * invariants (1-5, 7, 9, 10) and locking rules apply here as stated there;
 * these two complete its numbering (cited in the code as "invariant N"):
 *
 *  6. Read-ahead starts at a read at pos 0 or where the previous read
 *     ended, prefetches up to max_in_flight buffers on the grid of
 *     invariant 1, and never past the state size when it is known (the
 *     load stream's vm_state_size).  Any other read drops the read-ahead,
 *     after waiting for its tasks, and reads directly.  A state read from a
 *     local file through the page cache (cache modes other than none and
 *     directsync) is always read directly into the caller's buffer: the
 *     kernel reads ahead of a sequential reader itself, and our read-ahead
 *     would only add a copy and a thread hand-off per buffer (measured:
 *     512 MiB from the page cache took 2.5x dd's CPU through it, 1.2x
 *     without); no pool threads are started for it.  Read-ahead is for
 *     O_DIRECT and remote images.  While such page-cached reads are
 *     sequential (at pos 0 or where the previous read ended) the file is
 *     told so (blk_advise SEQUENTIAL: the kernel reads twice as far ahead,
 *     file.c invariant 15); the first other read, the end of a stream
 *     session and release withdraw the hint (NORMAL).
 *  8. Split reads.  A read of at least 2 B bytes of a state that is not
 *     page-cached is not read ahead (it is a large request by itself, and
 *     read-ahead would copy every byte once more): it takes what the
 *     read-ahead already holds for its start (nothing is read twice), the
 *     read-ahead stops, and the rest is cut into pieces the pool and the
 *     calling thread read in parallel straight into the caller's buffer.
 *     The pieces lie on a grid of S = B x 2^k, the largest such S of at
 *     most VMSTATE_SPLIT_PIECE (4 MiB, dd's bs) that still gives every
 *     thread a piece (S x max_in_flight <= len), at least B: a piece never
 *     crosses a multiple of B, and a large read is made of few large
 *     requests (1 MiB pieces cost 1.25x the CPU of 4 MiB ones: a thread
 *     hand-off, a mapping lookup and an I/O wait each).  The read returns
 *     once every piece is done, with the error at the lowest position if
 *     any failed (api/error.c invariant 1; not sticky, as invariant 4's
 *     read-ahead errors).  qimg vmstate load -t none reads this way, as
 *     dd reads with iflag=direct, without the copy.
 */
#include "api/vmstate.h"
#include "api/api.h"

#include "aio/pool.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

/* [pos, pos + len) of the state into buf with one driver call; on failure
 * *msg is the error's message (vs_io_error_message), else NULL. */
static int load_range(ApiVmstate *vs, uint64_t pos, uint8_t *buf, size_t len, char **msg)
{
    BlkNode *node = vs->img->node;
    BlkIOV q;
    int ret;

    iov_init_buf(&q, buf, len);
    ret = node->drv->load_vmstate(node, pos, &q);
    *msg = ret < 0 ? vs_io_error_message("read", pos, ret) : NULL;
    return ret < 0 ? ret : 0;
}

/* ---- tasks (run on pool threads; they never take op_lock) ---- */

/* Read-ahead errors stay with their buffer (invariant 4): always returns 0. */
static int read_task(void *opaque)
{
    VmBuf *b = opaque;
    ApiVmstate *vs = b->vs;
    char *msg = NULL;
    int ret;

    blk_error_clear();
    ret = load_range(vs, b->pos, b->data, b->len, &msg);
    pthread_mutex_lock(&vs->lock);
    b->ret = ret < 0 ? ret : 0;
    b->msg = msg;
    b->done = true;
    pthread_cond_broadcast(&vs->cond);
    pthread_mutex_unlock(&vs->lock);
    return 0; /* b belongs to the read-ahead queue again */
}

static void wait_done(ApiVmstate *vs, VmBuf *b)
{
    pthread_mutex_lock(&vs->lock);
    while (!b->done) {
        pthread_cond_wait(&vs->cond, &vs->lock);
    }
    pthread_mutex_unlock(&vs->lock);
}

/* Invariant 6: wait for every read-ahead task, then free its buffer. */
void vs_ra_drop_locked(ApiVmstate *vs)
{
    VmBuf *b;

    while ((b = g_queue_pop_head(&vs->ra)) != NULL) {
        wait_done(vs, b);
        vs_buf_free(b);
    }
    vs->ra_active = false;
}

static int direct_read(ApiVmstate *vs, uint64_t pos, uint8_t *buf, size_t len)
{
    g_autofree char *msg = NULL;
    int ret = load_range(vs, pos, buf, len, &msg);

    return ret < 0 ? blk_error(-ret, "%s", msg) : 0;
}

/* One piece of a split read (invariant 8): the caller's memory. */
typedef struct SplitPiece {
    ApiVmstate *vs;
    struct SplitRead *sr;
    uint64_t pos;
    uint8_t *buf;
    size_t len;
} SplitPiece;

typedef struct SplitRead {
    ApiLowestError error; /* [vs->lock] invariant 8, code = errno */
} SplitRead;

/* Errors stay with the read (invariant 4: not sticky): always returns 0. */
static int split_task(void *opaque)
{
    SplitPiece *p = opaque;
    g_autofree char *msg = NULL;
    int ret;

    blk_error_clear();
    ret = load_range(p->vs, p->pos, p->buf, p->len, &msg);
    if (ret < 0) {
        GError *err = g_error_new_literal(QIMG_ERROR, -ret, msg);
        pthread_mutex_lock(&p->vs->lock);
        (void)api_lowest_error_offer(&p->sr->error, p->pos, err);
        pthread_mutex_unlock(&p->vs->lock);
    }
    return 0;
}

/* Invariant 8: the size of the pieces of a split read of len bytes. */
static size_t split_piece_size(const ApiVmstate *vs, size_t len)
{
    size_t s = vs->buf_size;

    while (s <= VMSTATE_SPLIT_PIECE / 2 && s * 2 <= len / vs->max_in_flight) {
        s *= 2;
    }
    return s;
}

/* Invariant 8: [pos, pos + len) in pieces on the grid, read by the pool
 * (and this thread) straight into buf; no write or read-ahead is in
 * flight. */
static int split_read(ApiVmstate *vs, uint64_t pos, uint8_t *buf, size_t len)
{
    size_t n = 0, grid = split_piece_size(vs, len), max = len / grid + 2;
    g_autofree SplitPiece *pieces = g_new0(SplitPiece, max);
    SplitRead sr = {0};
    int ret = 0;

    for (size_t off = 0; off < len; n++) {
        uint64_t grid_end = ((pos + off) / grid + 1) * grid;
        size_t piece = (size_t)MIN(grid_end - (pos + off), (uint64_t)(len - off));
        g_assert(n < max);
        pieces[n] = (SplitPiece){vs, &sr, pos + off, buf + off, piece};
        if (pool_submit(vs->pool, split_task, &pieces[n]) < 0) {
            (void)split_task(&pieces[n]); /* the pool cannot take it: read it here */
        }
        off += piece;
    }
    while (pool_run_one(vs->pool)) {
    }
    (void)pool_wait_all(vs->pool); /* split_task never fails the pool */
    if (sr.error.error) {
        ret = blk_error(sr.error.error->code, "%s", sr.error.error->message);
        api_lowest_error_clear(&sr.error);
    }
    return ret;
}

/* Invariants 5, 6: keep up to max_in_flight buffers prefetched, up to limit. */
static void ra_fill_locked(ApiVmstate *vs)
{
    while (g_queue_get_length(&vs->ra) < vs->max_in_flight && vs->ra_next < vs->limit) {
        uint64_t grid_end = (vs->ra_next / vs->buf_size + 1) * vs->buf_size;
        uint64_t end = MIN(grid_end, vs->limit);
        VmBuf *b = vs_buf_new(vs, vs->ra_next, (size_t)(end - vs->ra_next));
        if (!b) {
            return; /* read-ahead is an optimisation; the reader reads directly */
        }
        b->len = b->cap;
        if (pool_submit(vs->pool, read_task, b) < 0) {
            vs_buf_free(b);
            return;
        }
        g_queue_push_tail(&vs->ra, b);
        vs->ra_next = end;
    }
}

/* split: a read of invariant 8, which takes the buffers already queued and
 * reads the rest itself. */
static int ra_read_locked(ApiVmstate *vs, uint64_t pos, uint8_t *buf, size_t len,
                          bool split)
{
    int ret;

    g_assert(pos == vs->ra_pos);
    if (!split) {
        ra_fill_locked(vs);
    }
    while (len > 0) {
        VmBuf *b = g_queue_peek_head(&vs->ra);
        if (!b) {
            /* Past the prefetch bound (or prefetch failed): read directly. */
            vs_ra_drop_locked(vs);
            return split ? split_read(vs, pos, buf, len) : direct_read(vs, pos, buf, len);
        }
        g_assert(b->pos <= pos && pos < b->pos + b->len);
        wait_done(vs, b);
        if (b->ret < 0) {
            ret = blk_error(-b->ret, "%s", b->msg);
            vs_ra_drop_locked(vs);
            return ret;
        }
        size_t off = (size_t)(pos - b->pos);
        size_t n = MIN(len, b->len - off);
        memcpy(buf, b->data + off, n);
        buf += n;
        len -= n;
        pos += n;
        vs->ra_pos = pos;
        if (off + n == b->len) {
            g_queue_pop_head(&vs->ra);
            vs_buf_free(b);
            if (!split) {
                ra_fill_locked(vs);
            }
        }
    }
    return 0;
}

/* Invariant 6: the state is read from a local file through the page cache,
 * which the kernel reads ahead of a sequential reader by itself. */
static bool page_cached(ApiVmstate *vs)
{
    const BlkNode *node = vs->img->node;
    const BlkNode *prot = node->file ? node->file : node;

    return prot->drv == &blk_file_driver && prot->cache != BLK_CACHE_NONE &&
           prot->cache != BLK_CACHE_DIRECTSYNC;
}

/* Invariant 6: sequential page-cached reads carry the hint, others not. */
static void advise_locked(ApiVmstate *vs, bool sequential)
{
    if (sequential != vs->advised) {
        blk_advise(vs->img->node, sequential ? BLK_ADVICE_SEQUENTIAL : BLK_ADVICE_NORMAL);
        vs->advised = sequential;
    }
}

void vs_advise_end_locked(ApiVmstate *vs)
{
    advise_locked(vs, false);
}

int vs_read_locked(ApiVmstate *vs, uint64_t pos, uint8_t *buf, size_t len)
{
    int ret = vs_sticky_error(vs);

    if (ret < 0 || len == 0) {
        return ret;
    }
    if (!vs->ra_active) {
        ret = vs_drain_writes_locked(vs); /* invariant 3 */
        if (ret < 0) {
            return ret;
        }
    }
    bool cached = page_cached(vs), split = !cached && len >= 2 * vs->buf_size;
    if (cached) {
        advise_locked(vs, pos == 0 || pos == vs->last_end); /* invariant 6 */
    }
    if (!vs->ra_active || pos != vs->ra_pos) {
        vs_ra_drop_locked(vs);
        if ((pos == 0 || pos == vs->last_end) && pos < vs->limit && !cached && !split) {
            /* invariant 6 */
            vs->ra_active = true;
            vs->ra_pos = pos;
            vs->ra_next = pos;
        }
    }
    if ((vs->ra_active || split) && (ret = vs_ensure_pool_locked(vs)) < 0) {
        return ret; /* invariant 6: no threads for a page-cached state */
    }
    ret = vs->ra_active ? ra_read_locked(vs, pos, buf, len, split)
          : split       ? split_read(vs, pos, buf, len)
                        : direct_read(vs, pos, buf, len);
    vs->last_end = pos + len;
    return ret;
}
