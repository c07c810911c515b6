/*
 * api/aio.c: asynchronous requests (include/qimg/aio.h) on the same path as
 * the synchronous calls.
 *
 * Owns: the per-handle context (struct ApiAio): an unbounded task pool
 * whose workers run each request through api_io() -- the code the
 * synchronous calls use, so a request behaves, fails and is ordered with the
 * metadata exactly as they do -- the list of completed requests, the
 * eventfd that signals them, and the drain at close.
 *
 * Invariants (cited as "aio.c invariant N"):
 *  1. A request is counted in 'live' from the moment it is queued until
 *     its callback returned; the context is freed only at live == 0
 *     (api_aio_close), so no worker or callback sees it gone.
 *  2. Callbacks run only in qimg_image_aio_poll/wait and api_aio_close, in
 *     the caller's thread, with no lock held (aio.h rules 1, 2).
 *  3. Once qimg_image_aio_fd() handed it out, the eventfd is readable
 *     exactly while 'done' is non-empty: a worker that makes it non-empty
 *     adds 1; poll reads it to 0 before it takes the whole list, and
 *     re-signals if more remain.  Before that nobody can wait on it, and it
 *     is left alone (two system calls per batch saved).
 *  4. A request's error message is taken on the worker thread that made it
 *     (block/error.c keeps it per thread) into the request's GError.
 *  5. Flags are checked against what each operation can honour before
 *     anything is queued (aio.h rule 1): nothing is accepted and ignored.
 *  6. A thread in qimg_image_aio_wait() with nothing completed runs a
 *     queued request itself before it sleeps -- but only one that no woken
 *     worker is on its way to (pool_run_unclaimed, pool.h invariant 7): the
 *     request path is the same, only the handoffs are saved.  Taking a
 *     request a worker was woken for gains nothing and costs the queue
 *     depth: while the waiter is inside a slow request (an O_DIRECT
 *     allocating write) it runs no callback, so completed requests are not
 *     replaced (issue 30: ~17 of 32 in flight).  Callbacks still run only
 *     as invariant 2 says.
 *  7. The io_uring engine: a read, or a write without flags on a
 *     cache=none image, that the driver can map straight onto an O_DIRECT
 *     file (qcow2: a fast map hit -- for a write, an allocated COPIED
 *     cluster rewritten in place -- held until the request completes,
 *     fastmap.c invariant 2; uring.c invariant 1) is submitted to the ring
 *     from the submitting thread, without a worker; any other request, and
 *     a ring request that came back short or failed, runs on the pool.
 *  8. QIMG_AIO_ENGINE_AUTO is io_uring on a cache=none image when the
 *     kernel gives us a ring, else threads (no error: the pool serves every
 *     request either way); stats.engine says which.
 *  9. A waiter with a ring waits on the ring itself (uring.c invariant 5):
 *     it polls the ring's fd and wake_fd, reaps what completed, and checks
 *     again; wake_fd is written for it (ring_waiters) where the condition
 *     variable is broadcast for the others -- by a completion from the pool
 *     or from the reaper thread, and by each callback's end, since 'live'
 *     going down may end its wait -- except by its own reaping.
 * 10. The protocol engine: a read, or a write without flags on an image
 *     that needs no flush after it, that lands on a protocol node taking
 *     asynchronous requests itself (BlkDriver.aio_rw: RBD) -- the image's
 *     own node, or its protocol child through direct_begin -- goes to that
 *     node from the submitting thread, and the node's completion (on its
 *     own thread) completes the request: no worker waits on it, no worker
 *     wakes for it.  A request the node does not take runs on the pool;
 *     a failure's message is the node's, taken on its thread (inv. 4).
 * 11. A completing thread touches the context only under 'lock': the
 *     eventfd writes happen before the unlock, since a protocol's thread
 *     (invariant 10) is not joined by api_aio_close as workers are.
 * 12. Encrypted images (BlkDirect.crypto, qcow2/crypt.c invariant 3) take
 *     the engines of invariants 7 and 10 too: a write is encrypted on the
 *     submitting thread into a bounce buffer of its own, which is what the
 *     ring or the node writes -- the caller's buffers are never modified and
 *     no plaintext reaches the node -- and a read is decrypted in the
 *     caller's buffers on the completing thread, before the request is
 *     handed to the poller, so a callback never sees ciphertext.  A
 *     transfer that failed is not decrypted: it runs again on the pool
 *     (invariant 7) or fails with its error.  Requests over
 *     AIO_CRYPT_DIRECT_MAX run on the pool instead, where their cipher work
 *     spreads over the workers rather than holding up the submitter or the
 *     thread that reaps.
 */
#include "aio/pool.h"
#include "api/api.h"
#include "crypto/block.h"
#include "qimg/aio.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define AIO_DEFAULT_THREADS 64u
/* invariant 12: larger encrypted requests run on the pool */
#define AIO_CRYPT_DIRECT_MAX (64u << 10)
#define AIO_BOUNCE_ALIGN 4096u

_Static_assert((int)QIMG_AIO_MAY_UNMAP == BLK_REQ_MAY_UNMAP, "flag values");
_Static_assert((int)QIMG_AIO_NO_FALLBACK == BLK_REQ_NO_FALLBACK, "flag values");
_Static_assert((int)QIMG_AIO_FUA == BLK_REQ_FUA, "flag values");

typedef struct ApiAio ApiAio;
typedef struct ApiAioReq ApiAioReq;

struct ApiAio {
    QimgImage *img;
    Pool *pool;
    BlkUring *uring; /* the io_uring engine (invariant 7), or NULL */
    int efd;
    int wake_fd;   /* invariant 9 */
    bool efd_used; /* [lock] invariant 3 */
    pthread_mutex_t lock;
    pthread_cond_t cond;   /* a request completed */
    ApiAioReq *done;       /* [lock] completed, callback not run (newest first) */
    ApiAioReq *reaped;     /* [reaper thread] ring requests done, not yet in done */
    unsigned live;         /* [lock] invariant 1 */
    unsigned waiters;      /* [lock] threads in qimg_image_aio_wait() */
    unsigned ring_waiters; /* [lock] of those, waiting on the ring (inv. 9) */
    QimgAioStats stats;    /* counters: atomic (relaxed) */
};

struct ApiAioReq {
    ApiAio *aio;
    ApiIoOp op;
    uint64_t offset, len;
    unsigned flags;
    BlkIOV q;
    struct iovec *vec; /* the caller's iovec array, copied (aio.h rule 3) */
    QimgAioFunc cb;
    void *opaque;
    int ret;
    GError *error;
    BlkDirect direct;  /* invariant 7: the mapping a ring read holds */
    bool held;         /* invariant 10: direct holds a mapping */
    const BlkIOV *out; /* what goes to the node: &q, or &bq (invariant 12) */
    uint8_t *bounce;   /* invariant 12: a write's ciphertext, or NULL */
    BlkIOV bq;
    ApiAioReq *next;
};

static void uring_batch_end(void *opaque);

static int aio_new(QimgImage *img, const QimgAioOptions *o, GError **error)
{
    ApiAio *a;

    if (o->engine != QIMG_AIO_ENGINE_AUTO && o->engine != QIMG_AIO_ENGINE_THREADS &&
        o->engine != QIMG_AIO_ENGINE_IO_URING) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Unknown asynchronous I/O engine %d",
                    (int)o->engine);
        return -EINVAL;
    }
    a = g_new0(ApiAio, 1);
    a->stats.engine = QIMG_AIO_ENGINE_THREADS;
    /* invariant 8 */
    if (o->engine == QIMG_AIO_ENGINE_IO_URING ||
        (o->engine == QIMG_AIO_ENGINE_AUTO && img->node->cache == BLK_CACHE_NONE)) {
        int e = 0;
        a->uring = blk_uring_new(256, uring_batch_end, a, &e);
        if (!a->uring && o->engine == QIMG_AIO_ENGINE_IO_URING) {
            g_set_error(error, QIMG_ERROR, e, "io_uring is not available here: %s",
                        g_strerror(e));
            g_free(a);
            return -e;
        }
        if (a->uring) {
            a->stats.engine = QIMG_AIO_ENGINE_IO_URING;
        }
    }
    a->img = img;
    a->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    a->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    a->pool = pool_new_unbounded(o->threads ? o->threads : AIO_DEFAULT_THREADS);
    if (a->efd < 0 || a->wake_fd < 0 || !a->pool) {
        int e = a->efd < 0 || a->wake_fd < 0 ? errno : EAGAIN;
        g_set_error(error, QIMG_ERROR, e, "Cannot set up asynchronous I/O: %s",
                    g_strerror(e));
        if (a->efd >= 0) {
            close(a->efd);
        }
        if (a->wake_fd >= 0) {
            close(a->wake_fd);
        }
        blk_uring_free(a->uring);
        pool_free(a->pool);
        g_free(a);
        return -e;
    }
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    img->aio = a;
    return 0;
}

gboolean qimg_image_aio_setup(QimgImage *img, const QimgAioOptions *opts, GError **error)
{
    QimgAioOptions o;

    if (img->aio) {
        g_set_error(error, QIMG_ERROR, EBUSY,
                    "Asynchronous I/O is already set up for '%s'", img->node->filename);
        return FALSE;
    }
    if (!api_struct_in(&o, sizeof(o), opts, "QimgAioOptions", error)) {
        return FALSE;
    }
    return aio_new(img, &o, error) == 0;
}

static ApiAio *aio_get(QimgImage *img, GError **error)
{
    QimgAioOptions o = QIMG_AIO_OPTIONS_INIT;

    if (!img->aio && aio_new(img, &o, error) < 0) {
        return NULL;
    }
    return img->aio;
}

static void signal_fd(int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
}

static void signal_efd(ApiAio *a)
{
    signal_fd(a->efd);
}

int qimg_image_aio_fd(QimgImage *img, GError **error)
{
    ApiAio *a = aio_get(img, error);

    if (!a) {
        return -1;
    }
    pthread_mutex_lock(&a->lock);
    if (!a->efd_used) { /* invariant 3 from now on */
        a->efd_used = true;
        if (a->done) {
            signal_efd(a);
        }
    }
    pthread_mutex_unlock(&a->lock);
    return a->efd;
}

/* Set while this thread reaps the ring in qimg_image_aio_wait (inv. 9). */
static __thread bool tls_ring_waiter;

/* Wake the waiters (under a->lock); true: write wake_fd after unlocking. */
static bool wake_waiters_locked(ApiAio *a)
{
    if (a->waiters > a->ring_waiters) { /* no futex call when nobody waits */
        pthread_cond_broadcast(&a->cond);
    }
    return a->ring_waiters > (tls_ring_waiter ? 1u : 0u); /* invariant 9 */
}

/* Hand finished requests (list..last, linked by next) to the poller. */
static void complete_list(ApiAio *a, ApiAioReq *list, ApiAioReq *last)
{
    bool first, wake;

    pthread_mutex_lock(&a->lock);
    first = a->done == NULL && a->efd_used;
    last->next = a->done;
    a->done = list;
    wake = wake_waiters_locked(a);
    if (first) {
        signal_efd(a); /* invariant 3 */
    }
    if (wake) {
        signal_fd(a->wake_fd);
    }
    pthread_mutex_unlock(&a->lock); /* invariant 11: a is not touched after */
}

static void complete(ApiAioReq *r)
{
    complete_list(r->aio, r, r);
}

/* The worker side: run, record the outcome, hand it to the poller. */
static int run_req(void *opaque)
{
    ApiAioReq *r = opaque;
    ApiAio *a = r->aio;

    blk_error_clear();
    r->ret = api_io(a->img, r->op, r->offset, r->len, &r->q, r->flags);
    if (r->ret < 0) {
        api_io_error(a->img, r->op, r->ret, &r->error); /* invariant 4 */
    }
    complete(r);
    return 0; /* the outcome goes to the callback, not to the pool */
}

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
    if (ret < 0 && pool_submit(r->aio->pool, run_req, r) == 0) {
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

static void uring_batch_end(void *opaque)
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
    complete_list(a, list, last);
}

/* Invariant 7: send a read, or a write that needs nothing after it, to the
 * ring if the mapping allows it. */
static bool try_uring(ApiAio *a, ApiAioReq *r)
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
    complete(r);
}

/* Invariant 10: send a read, or a write that needs nothing after it, to a
 * protocol node that takes asynchronous requests. */
static bool try_node_aio(ApiAio *a, ApiAioReq *r)
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

static gboolean submit(QimgImage *img, ApiIoOp op, uint64_t offset, uint64_t len,
                       const struct iovec *iov, int iovcnt, unsigned flags,
                       unsigned allowed, QimgAioFunc cb, void *opaque, GError **error)
{
    ApiAio *a;
    ApiAioReq *r;
    int ret;

    if (!cb || iovcnt < 0 || (iovcnt > 0 && !iov)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Invalid asynchronous request (no callback or no iovec)");
        return FALSE;
    }
    if (flags & ~allowed) { /* invariant 5 */
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Request flags 0x%x cannot be honoured by this operation",
                    flags & ~allowed);
        return FALSE;
    }
    a = aio_get(img, error);
    if (!a) {
        return FALSE;
    }
    r = g_new0(ApiAioReq, 1);
    r->aio = a;
    r->op = op;
    r->offset = offset;
    r->len = len;
    r->flags = flags;
    r->cb = cb;
    r->opaque = opaque;
    if (op == API_IO_READ || op == API_IO_WRITE) {
        r->vec = g_memdup2(iov, sizeof(*iov) * (size_t)iovcnt);
        iov_init_external(&r->q, r->vec, iovcnt);
        r->len = r->q.size;
    }
    pthread_mutex_lock(&a->lock);
    a->live++;
    pthread_mutex_unlock(&a->lock);
    __atomic_add_fetch(&a->stats.submitted, 1, __ATOMIC_RELAXED);
    if (try_uring(a, r) || try_node_aio(a, r)) {
        return TRUE;
    }
    ret = pool_submit(a->pool, run_req, r);
    if (ret < 0) {
        __atomic_sub_fetch(&a->stats.submitted, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&a->lock);
        a->live--;
        pthread_mutex_unlock(&a->lock);
        g_set_error(error, QIMG_ERROR, -ret, "Cannot queue the request: %s",
                    g_strerror(-ret));
        g_free(r->vec);
        g_free(r);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_image_aio_preadv(QimgImage *img, uint64_t offset, const struct iovec *iov,
                               int iovcnt, unsigned flags, QimgAioFunc cb, void *opaque,
                               GError **error)
{
    return submit(img, API_IO_READ, offset, 0, iov, iovcnt, flags, 0, cb, opaque, error);
}

gboolean qimg_image_aio_pwritev(QimgImage *img, uint64_t offset, const struct iovec *iov,
                                int iovcnt, unsigned flags, QimgAioFunc cb, void *opaque,
                                GError **error)
{
    return submit(img, API_IO_WRITE, offset, 0, iov, iovcnt, flags, QIMG_AIO_FUA, cb,
                  opaque, error);
}

gboolean qimg_image_aio_pwrite_zeroes(QimgImage *img, uint64_t offset, uint64_t len,
                                      unsigned flags, QimgAioFunc cb, void *opaque,
                                      GError **error)
{
    return submit(img, API_IO_ZERO, offset, len, NULL, 0, flags,
                  QIMG_AIO_FUA | QIMG_AIO_MAY_UNMAP | QIMG_AIO_NO_FALLBACK, cb, opaque,
                  error);
}

gboolean qimg_image_aio_pdiscard(QimgImage *img, uint64_t offset, uint64_t len,
                                 unsigned flags, QimgAioFunc cb, void *opaque,
                                 GError **error)
{
    return submit(img, API_IO_DISCARD, offset, len, NULL, 0, flags, 0, cb, opaque, error);
}

gboolean qimg_image_aio_flush(QimgImage *img, unsigned flags, QimgAioFunc cb,
                              void *opaque, GError **error)
{
    return submit(img, API_IO_FLUSH, 0, 0, NULL, 0, flags, 0, cb, opaque, error);
}

/* Run the callbacks of list (newest first), oldest first; invariant 2. */
static unsigned run_callbacks(ApiAio *a, ApiAioReq *list)
{
    ApiAioReq *rev = NULL;
    unsigned n = 0;

    while (list) {
        ApiAioReq *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    while (rev) {
        ApiAioReq *r = rev;
        rev = r->next;
        r->cb(r->opaque, r->ret, r->error);
        __atomic_add_fetch(&a->stats.completed, 1, __ATOMIC_RELAXED);
        g_clear_error(&r->error);
        g_free(r->vec);
        g_free(r);
        pthread_mutex_lock(&a->lock);
        a->live--; /* invariant 1 */
        bool wake = wake_waiters_locked(a);
        pthread_mutex_unlock(&a->lock);
        if (wake) {
            signal_fd(a->wake_fd);
        }
        n++;
    }
    return n;
}

/* Take up to max completed requests (0: all).  Lock held; invariant 3. */
static ApiAioReq *take_done_locked(ApiAio *a, unsigned max)
{
    uint64_t v;
    ApiAioReq *list = a->done, **tail = &list;

    if (!list) {
        return NULL;
    }
    while (a->efd_used && read(a->efd, &v, sizeof(v)) < 0 && errno == EINTR) {
    }
    if (max == 0) {
        a->done = NULL;
        return list;
    }
    /* keep the oldest beyond max for later: cut after max from the newest
     * end would reorder; take the whole list and put back the newest ones */
    unsigned len = 0;
    for (ApiAioReq *r = list; r; r = r->next) {
        len++;
    }
    if (len <= max) {
        a->done = NULL;
        return list;
    }
    for (unsigned i = 0; i < len - max; i++) {
        tail = &(*tail)->next;
    }
    a->done = list; /* the newest len - max stay */
    list = *tail;   /* the oldest max run now */
    *tail = NULL;
    if (a->efd_used) {
        signal_efd(a);
    }
    return list;
}

unsigned qimg_image_aio_poll(QimgImage *img, unsigned max)
{
    ApiAio *a = img->aio;
    ApiAioReq *list;

    if (!a) {
        return 0;
    }
    if (a->uring) {
        blk_uring_reap(a->uring); /* no handoff through the reaper */
    }
    pthread_mutex_lock(&a->lock);
    list = take_done_locked(a, max);
    pthread_mutex_unlock(&a->lock);
    return run_callbacks(a, list);
}

/* Invariant 9: reap the ring, or sleep until it or wake_fd has news. */
static void wait_ring(ApiAio *a)
{
    BlkUring *u = a->uring;

    blk_uring_consumer_enter(u);
    tls_ring_waiter = true;
    if (blk_uring_reap(u) == 0) {
        struct pollfd fds[2] = {{.fd = blk_uring_fd(u), .events = POLLIN},
                                {.fd = a->wake_fd, .events = POLLIN}};
        if (poll(fds, 2, -1) > 0) {
            uint64_t v;
            if (fds[1].revents & POLLIN) {
                while (read(a->wake_fd, &v, sizeof(v)) < 0 && errno == EINTR) {
                }
            }
            if (fds[0].revents & POLLIN) {
                blk_uring_reap(u);
            }
        }
    }
    tls_ring_waiter = false;
    blk_uring_consumer_leave(u);
}

unsigned qimg_image_aio_wait(QimgImage *img)
{
    ApiAio *a = img->aio;
    ApiAioReq *list;
    unsigned running;

    if (!a) {
        return 0;
    }
    pthread_mutex_lock(&a->lock);
    for (bool try_run = true;;) {
        running = a->live;
        for (ApiAioReq *r = a->done; r; r = r->next) {
            running--;
        }
        if (a->done || running == 0) {
            break;
        }
        if (try_run) {
            /* invariant 6: rather than sleep while requests wait for a
             * busy pool (two context switches each), run one here.  Without
             * the lock: a request may complete meanwhile, unseen by
             * complete() as a waiter, so the test above runs again before
             * any sleep. */
            pthread_mutex_unlock(&a->lock);
            try_run = pool_run_unclaimed(a->pool);
            pthread_mutex_lock(&a->lock);
            continue;
        }
        /* checked and sleeping under one hold of the lock: no completion
         * is missed (complete() signals waiters under it) */
        a->waiters++;
        if (a->uring) { /* invariant 9 */
            a->ring_waiters++;
            pthread_mutex_unlock(&a->lock);
            wait_ring(a);
            pthread_mutex_lock(&a->lock);
            a->ring_waiters--;
        } else {
            pthread_cond_wait(&a->cond, &a->lock);
        }
        a->waiters--;
        try_run = true;
    }
    list = take_done_locked(a, 0);
    pthread_mutex_unlock(&a->lock);
    return run_callbacks(a, list);
}

unsigned qimg_image_aio_in_flight(QimgImage *img)
{
    ApiAio *a = img->aio;
    unsigned n;

    if (!a) {
        return 0;
    }
    pthread_mutex_lock(&a->lock);
    n = a->live;
    pthread_mutex_unlock(&a->lock);
    return n;
}

gboolean qimg_image_aio_get_stats(QimgImage *img, QimgAioStats *stats, GError **error)
{
    QimgAioStats in, out = {.struct_size = sizeof(out)};
    ApiAio *a;

    if (!img || !stats) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No image or statistics to fill");
        return FALSE;
    }
    a = img->aio;
    if (!api_struct_in(&in, sizeof(in), stats, "QimgAioStats", error)) {
        return FALSE;
    }
    if (a) {
        out.engine = a->stats.engine;
        out.submitted = __atomic_load_n(&a->stats.submitted, __ATOMIC_RELAXED);
        out.completed = __atomic_load_n(&a->stats.completed, __ATOMIC_RELAXED);
        out.ring_reads = __atomic_load_n(&a->stats.ring_reads, __ATOMIC_RELAXED);
        out.ring_writes = __atomic_load_n(&a->stats.ring_writes, __ATOMIC_RELAXED);
        out.ring_retries = __atomic_load_n(&a->stats.ring_retries, __ATOMIC_RELAXED);
    }
    api_struct_out(stats, &out, sizeof(out));
    return TRUE;
}

void api_aio_close(QimgImage *img)
{
    ApiAio *a = img->aio;

    if (!a) {
        return;
    }
    while (qimg_image_aio_in_flight(img) > 0) { /* aio.h rule 6 */
        qimg_image_aio_wait(img);
    }
    pool_free(a->pool);
    blk_uring_free(a->uring); /* nothing in flight now */
    close(a->efd);
    close(a->wake_fd);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    g_free(a);
    img->aio = NULL;
}
