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
#include <stdlib.h>

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

/* Invariant 7: a ring request finished (on the reaper thread).  Anything
 * but a full transfer runs again on the pool, through the node, for its
 * error. */
static void uring_done(void *opaque, int ret)
{
    ApiAioReq *r = opaque;
    BlkNode *node = r->aio->img->node;

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
        return false;
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
