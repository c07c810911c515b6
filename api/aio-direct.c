/*
 * api/aio-direct.c: the engines that take a request without a worker
 * (api/aio.c invariants 7 and 10): the io_uring engine for a request the
 * driver maps straight onto an O_DIRECT file, the protocol engine for a
 * node that takes asynchronous requests itself, and the encryption of what
 * either moves (invariant 12).
 *
 * Owns: the decision whether a request goes to an engine, its submission,
 * and its completion on the engine's thread (a failure runs the request
 * again on the pool where invariant 7 says so).  The invariants are
 * aio.c's (cited as "invariant N" here).
 */
#include "api/aio-int.h"
#include "crypto/block.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* invariant 12: larger encrypted requests run on the pool */
#define AIO_CRYPT_DIRECT_MAX (64u << 10)
#define AIO_BOUNCE_ALIGN 4096u

/* Invariant 12, once the driver mapped the request (r->direct): set
 * r->out, encrypting a write into r->bounce.  false: nothing to undo but
 * the mapping; run the request on the pool. */
static bool crypt_begin(ApiAioReq *r)
{
    CryptoBlock *c = r->direct.crypto;

    r->out = &r->q;
    if (!c) {
        return true;
    }
    if (r->len > AIO_CRYPT_DIRECT_MAX) {
        return false;
    }
    if (r->op != API_IO_WRITE) {
        return true;
    }
    if (posix_memalign((void **)&r->bounce, AIO_BOUNCE_ALIGN, MAX(r->len, 1u)) != 0) {
        r->bounce = NULL;
        return false;
    }
    if (crypto_block_encrypt_to(c, r->direct.iv_offset, &r->q, r->bounce) < 0) {
        blk_error_clear(); /* the pool's run reports it */
        free(r->bounce);
        r->bounce = NULL;
        return false;
    }
    iov_init_buf(&r->bq, r->bounce, r->len);
    r->out = &r->bq;
    return true;
}

/* Invariant 12, when the transfer ended with ret (after direct_end): a
 * read that succeeded decrypted, the bounce freed.  ret, or the
 * decryption's error (its message recorded on this thread). */
static int crypt_end(ApiAioReq *r, int ret)
{
    free(r->bounce);
    r->bounce = NULL;
    if (ret >= 0 && r->direct.crypto && r->op == API_IO_READ) {
        ret = crypto_block_decrypt(r->direct.crypto, r->direct.iv_offset, &r->q);
    }
    return ret;
}

/* Invariant 13: the caller's data with the plan's zeros around it, in
 * r->bq (r->out); false: no memory. */
static bool alloc_out(ApiAioReq *r)
{
    size_t zlen = (size_t)MAX(r->direct.head, r->direct.tail);
    int n = 0;

    r->out = &r->q;
    if (zlen == 0) {
        return true;
    }
    if (posix_memalign((void **)&r->bounce, AIO_BOUNCE_ALIGN, zlen) != 0) {
        r->bounce = NULL;
        return false;
    }
    memset(r->bounce, 0, zlen);
    r->ovec = g_new(struct iovec, (size_t)r->q.niov + 2);
    if (r->direct.head) {
        r->ovec[n++] = (struct iovec){.iov_base = r->bounce, .iov_len = r->direct.head};
    }
    for (int i = 0; i < r->q.niov; i++) {
        r->ovec[n++] = r->q.iov[i];
    }
    if (r->direct.tail) {
        r->ovec[n++] = (struct iovec){.iov_base = r->bounce, .iov_len = r->direct.tail};
    }
    iov_init_external(&r->bq, r->ovec, n);
    r->out = &r->bq;
    return true;
}

/* Invariant 13: free what alloc_out made; r->out is the caller's data. */
static void alloc_release(ApiAioReq *r)
{
    free(r->bounce);
    r->bounce = NULL;
    g_free(r->ovec);
    r->ovec = NULL;
    r->alloc = false;
    r->out = &r->q;
}

/* Invariant 13: the plan's end is done (ret: the link's outcome); the
 * request completes, or runs again on the pool if its data write failed
 * or the plan linked nothing.  reaped: on the ring's reaping thread
 * (handed on at the batch's end).  The thread's error message is the
 * caller's to clear. */
static void alloc_finish(ApiAioReq *r, int ret, bool reaped)
{
    ApiAio *a = r->aio;
    bool again = r->ring_ret < 0 || r->direct.unlinked;

    alloc_release(r);
    if (again) {
        __atomic_add_fetch(&a->stats.ring_retries, 1, __ATOMIC_RELAXED);
        if (pool_submit(a->pool, api_aio_run_req, r) == 0) {
            return;
        }
        ret = r->ring_ret < 0 ? r->ring_ret : -EIO;
        g_set_error(&r->error, QIMG_ERROR, -ret, "Could not write '%s': %s",
                    a->img->node->filename, g_strerror(-ret));
    } else if (ret < 0) {
        api_io_error(a->img, r->op, ret, &r->error); /* invariant 4 */
    }
    r->ret = ret;
    if (reaped) {
        r->next = a->reaped; /* handed on at the batch's end (uring.c inv. 4) */
        a->reaped = r;
    } else {
        api_aio_complete(r);
    }
}

/* Invariant 13: the plan ended in r's alloc_end with ret: finish the
 * plan's other requests (r->direct.group, write-ring.c invariant 3), then
 * r itself unless 'self' is false (the caller runs it on the pool). */
static void alloc_group_finish(ApiAioReq *r, int ret, bool reaped, bool self)
{
    BlkDirect *m = r->direct.group;

    r->direct.group = NULL;
    while (m) {
        BlkDirect *next = m->group;
        m->group = NULL;
        alloc_finish((ApiAioReq *)((char *)m - offsetof(ApiAioReq, direct)), ret, reaped);
        m = next;
    }
    if (self) {
        alloc_finish(r, ret, reaped);
    }
    blk_error_clear();
}

/* Invariant 13: the links thread ends the plan where the reaper could
 * not (it never waits for a registration: the request runs again on the
 * pool, not here). */
static int alloc_end_task(void *opaque)
{
    ApiAioReq *r = opaque;
    BlkNode *node = r->aio->img->node;

    blk_error_clear();
    alloc_group_finish(r, node->drv->alloc_end(node, &r->direct, r->ring_ret, true),
                       false, true);
    return 0;
}

/* Invariant 13: an allocating write's data write finished (on the thread
 * that reaps): end its plan if it was the plan's last, without waiting for
 * the metadata lock, else on the links thread. */
static void alloc_done(ApiAioReq *r, int ret)
{
    BlkNode *node = r->aio->img->node;

    r->ring_ret = ret;
    ret = node->drv->alloc_end(node, &r->direct, ret, false);
    if (ret == -EINPROGRESS) {
        return; /* parked: the plan's last write hands it back */
    }
    if (ret == -EWOULDBLOCK) {
        if (pool_submit(r->aio->links, alloc_end_task, r) == 0) {
            return;
        }
        ret = node->drv->alloc_end(node, &r->direct, r->ring_ret, true);
    }
    alloc_group_finish(r, ret, true, true);
}

/* Invariant 7: a ring request finished (on the reaper thread).  Anything
 * but a full transfer runs again on the pool, through the node, for its
 * error. */
static void uring_done(void *opaque, int ret)
{
    ApiAioReq *r = opaque;
    BlkNode *node = r->aio->img->node;

    if (r->alloc) {
        alloc_done(r, ret); /* invariant 13 */
        return;
    }
    node->drv->direct_end(node, &r->direct);
    ret = crypt_end(r, ret); /* invariant 12 */
    if (ret < 0) {
        blk_error_clear(); /* the pool's run makes the message */
    }
    if (ret < 0 && pool_submit(r->aio->pool, api_aio_run_req, r) == 0) {
        __atomic_add_fetch(&r->aio->stats.ring_retries, 1, __ATOMIC_RELAXED);
        return;
    }
    r->ret = ret < 0 ? -EIO : 0;
    if (ret < 0) {
        g_set_error(&r->error, QIMG_ERROR, EIO, "%s '%s': %s",
                    r->op == API_IO_READ ? "Could not read" : "Could not write",
                    node->filename, g_strerror(-ret));
    }
    r->next = r->aio->reaped; /* handed on at the batch's end (uring.c inv. 4) */
    r->aio->reaped = r;
}

void api_aio_uring_batch_end(void *opaque)
{
    ApiAio *a = opaque;
    ApiAioReq *list = a->reaped, *last = list;

    if (!list) {
        return;
    }
    while (last->next) {
        last = last->next;
    }
    a->reaped = NULL;
    api_aio_complete_list(a, list, last);
}

/* Invariant 13: a write that direct_begin did not take, planned by the
 * driver and its data written through the ring. */
static bool try_uring_alloc(ApiAio *a, ApiAioReq *r)
{
    BlkNode *node = a->img->node;
    int ret = -EAGAIN;

    r->direct = (BlkDirect){0};
    if (!node->drv->alloc_begin ||
        !node->drv->alloc_begin(node, r->offset, r->len, &r->direct)) {
        return false;
    }
    r->alloc = true;
    bool joined = r->direct.joined; /* r may be gone once submitted */
    if (alloc_out(r) && blk_uring_can_write(r->direct.node, r->direct.offset, r->out)) {
        /* invariant 14: not held back -- every request on its clusters
         * waits for its link, and its data write for the kernel */
        BlkUring *outer = blk_uring_plug(NULL);
        ret = blk_uring_writev(a->uring, r->direct.node, r->direct.offset, r->out,
                               uring_done, r);
        blk_uring_plug(outer);
    }
    if (ret < 0) {
        /* not written: ends like a failed data write (write-ring.c
         * invariant 2); a plan with other writes still running parks it */
        r->ring_ret = ret;
        ret = node->drv->alloc_end(node, &r->direct, ret, true);
        if (ret == -EINPROGRESS) {
            return true;
        }
        alloc_group_finish(r, ret, false, false);
        alloc_release(r);
        return false;
    }
    __atomic_add_fetch(&a->stats.ring_writes, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(joined ? &a->stats.ring_joins : &a->stats.ring_allocs, 1,
                       __ATOMIC_RELAXED);
    return true;
}

/* Invariant 7: send a read, or a write that needs nothing after it, to the
 * ring if the mapping allows it. */
bool api_aio_try_uring(ApiAio *a, ApiAioReq *r)
{
    BlkNode *node = a->img->node;
    bool write = r->op == API_IO_WRITE;
    uint64_t end;
    int ret;

    if (!a->uring || (r->op != API_IO_READ && !write) || !node->drv->direct_begin ||
        node->opts.copy_on_read || /* image.c invariant 4: api_io() */
        __builtin_add_overflow(r->offset, r->len, &end) || end > node->size) {
        return false;
    }
    /* a write with FUA, or on a read-only or writethrough image, needs the
     * sync path's checks or its flush (api.h invariant 2) */
    if (write && (r->flags != 0 || node->read_only || node->cache != BLK_CACHE_NONE)) {
        return false;
    }
    r->direct = (BlkDirect){0};
    if (!node->drv->direct_begin(node, r->offset, r->len, write, &r->direct)) {
        return write && try_uring_alloc(a, r); /* invariant 13 */
    }
    if (!crypt_begin(r)) { /* invariant 12 */
        node->drv->direct_end(node, &r->direct);
        return false;
    }
    if (write) {
        ret = blk_uring_can_write(r->direct.node, r->direct.offset, r->out)
                  ? blk_uring_writev(a->uring, r->direct.node, r->direct.offset, r->out,
                                     uring_done, r)
                  : -EAGAIN;
    } else {
        ret = blk_uring_can_read(r->direct.node, r->direct.offset, r->out)
                  ? blk_uring_readv(a->uring, r->direct.node, r->direct.offset, r->out,
                                    uring_done, r)
                  : -EAGAIN;
    }
    if (ret < 0) {
        crypt_end(r, ret); /* frees the bounce; nothing read */
        node->drv->direct_end(node, &r->direct);
        return false;
    }
    __atomic_add_fetch(write ? &a->stats.ring_writes : &a->stats.ring_reads, 1,
                       __ATOMIC_RELAXED);
    return true;
}

/* Invariant 10: a protocol node's completion, on its thread. */
static void node_aio_done(void *opaque, int ret)
{
    ApiAioReq *r = opaque;
    QimgImage *img = r->aio->img;

    if (r->held) {
        img->node->drv->direct_end(img->node, &r->direct);
    }
    ret = crypt_end(r, ret); /* invariant 12 */
    r->ret = ret;
    if (ret < 0) {
        api_io_error(img, r->op, ret, &r->error); /* invariant 4 */
        blk_error_clear();
    }
    api_aio_complete(r);
}

/* Invariant 10: send a read, or a write that needs nothing after it, to a
 * protocol node that takes asynchronous requests. */
bool api_aio_try_node(ApiAio *a, ApiAioReq *r)
{
    BlkNode *node = a->img->node;
    BlkNode *proto = node->drv->aio_rw ? node : node->file;
    bool write = r->op == API_IO_WRITE;
    uint64_t end;

    if ((r->op != API_IO_READ && !write) || !proto || !proto->drv->aio_rw ||
        node->opts.copy_on_read || /* image.c invariant 4: api_io() */
        __builtin_add_overflow(r->offset, r->len, &end) || end > node->size) {
        return false;
    }
    /* api.h invariant 2: a write with FUA, or on a read-only or
     * writethrough image, needs the sync path's checks or its flush */
    if (write &&
        (r->flags != 0 || node->read_only || node->cache == BLK_CACHE_WRITETHROUGH ||
         node->cache == BLK_CACHE_DIRECTSYNC)) {
        return false;
    }
    r->held = proto != node;
    r->direct = (BlkDirect){.node = node, .offset = r->offset};
    if (r->held &&
        (!node->drv->direct_begin ||
         !node->drv->direct_begin(node, r->offset, r->len, write, &r->direct))) {
        return false;
    }
    if (!crypt_begin(r)) { /* invariant 12 (only a held mapping is encrypted) */
        node->drv->direct_end(node, &r->direct);
        return false;
    }
    if (!r->direct.node->drv->aio_rw ||
        r->direct.node->drv->aio_rw(r->direct.node, write, r->direct.offset, r->out,
                                    node_aio_done, r) < 0) {
        crypt_end(r, -EIO); /* frees the bounce; nothing read */
        if (r->held) {
            node->drv->direct_end(node, &r->direct);
        }
        return false;
    }
    return true;
}
