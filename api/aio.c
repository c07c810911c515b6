/*
 * api/aio.c: asynchronous requests (include/qimg/aio.h) on the same path as
 * the synchronous calls.
 *
 * Owns: the per-handle context (struct ApiAio, api/aio-int.h): an
 * unbounded task pool whose workers run each request through api_io() --
 * the code the synchronous calls use, so a request behaves, fails and is
 * ordered with the metadata exactly as they do -- the list of completed
 * requests, the eventfd that signals them, and the drain at close.  The
 * engines that take requests without a worker (invariants 7, 10, 12) are
 * api/aio-direct.c.
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
 * 13. The io_uring engine's allocating writes: a write that invariant 7
 *     does not take (no fast map hit), with the same conditions, is
 *     planned by the driver on the submitting thread (BlkDriver.
 *     alloc_begin: qcow2's write.c invariant 18 -- registered, allocated,
 *     the file covering it) and its data, with the zeros the plan asks
 *     around it, goes to the ring as one write; its completion ends the
 *     plan (alloc_end: the link) on the thread that reaps, or, when the
 *     metadata lock is busy or the link needs I/O (the reaper never waits
 *     for it), on 'links': a thread of its own that waits for nothing but
 *     the lock, since the pool's workers may all be waiting for the
 *     registration the link ends; and
 *     only then is the request completed -- so its callback comes after
 *     its L2 entry, and a flush submitted after it covers both (uring.c
 *     invariant 1).  A data write that failed or came back short links
 *     nothing and runs again on the pool (invariant 7).  A write into
 *     clusters such a plan is allocating may join it (alloc_begin sets
 *     BlkDirect.joined; qcow2/write-ring.c invariant 1; stats.ring_joins):
 *     its data goes to the ring at once instead of a worker waiting for
 *     the link, the last of the plan's data writes ends the plan, and the
 *     thread that ends it completes all of its requests (write-ring.c
 *     invariant 3), so the order above holds for each of them.
 * 14. A batch of callbacks runs in a plug scope of the ring (uring.c invariant
 *     7): the ring writes its callbacks submit go to the kernel together, in
 *     one system call, when the batch's last callback returned (issue 30: at
 *     depth 32 each callback submits one request, and one io_uring_enter each
 *     was 14-17% of the CPU) -- or earlier, when the thread or another would
 *     sleep in qimg (aio/plug.h invariant 2; wait_ring's poll too).  Nothing
 *     is held back once qimg_image_aio_poll() or _wait() returns
 *     (stats.ring_submits).  Reads are not held (uring.c invariant 7), nor an
 *     allocating write (invariant 13): it goes at once, with what is held --
 *     its registration keeps every other request on its clusters waiting for
 *     its link, and the callbacks after it plan (lock, growth) before the
 *     scope ends; held, alloc-d32 took 14-18% longer (issue 30's ABBA runs).
 */
#include "aio/plug.h"
#include "api/aio-int.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define AIO_DEFAULT_THREADS 64u

_Static_assert((int)QIMG_AIO_MAY_UNMAP == BLK_REQ_MAY_UNMAP, "flag values");
_Static_assert((int)QIMG_AIO_NO_FALLBACK == BLK_REQ_NO_FALLBACK, "flag values");
_Static_assert((int)QIMG_AIO_FUA == BLK_REQ_FUA, "flag values");

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
        a->uring = blk_uring_new(256, api_aio_uring_batch_end, a, &e);
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
    a->links = a->uring ? pool_new_unbounded(1) : NULL; /* invariant 13 */
    if (a->efd < 0 || a->wake_fd < 0 || !a->pool || (a->uring && !a->links)) {
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
        pool_free(a->links);
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
void api_aio_complete_list(ApiAio *a, ApiAioReq *list, ApiAioReq *last)
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

void api_aio_complete(ApiAioReq *r)
{
    api_aio_complete_list(r->aio, r, r);
}

/* The worker side: run, record the outcome, hand it to the poller. */
int api_aio_run_req(void *opaque)
{
    ApiAioReq *r = opaque;
    ApiAio *a = r->aio;

    blk_error_clear();
    r->ret = api_io(a->img, r->op, r->offset, r->len, &r->q, r->flags);
    if (r->ret < 0) {
        api_io_error(a->img, r->op, r->ret, &r->error); /* invariant 4 */
    }
    api_aio_complete(r);
    return 0; /* the outcome goes to the callback, not to the pool */
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
    if (api_aio_try_uring(a, r) || api_aio_try_node(a, r)) {
        return TRUE;
    }
    ret = pool_submit(a->pool, api_aio_run_req, r);
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

/* Run the callbacks of list (newest first), oldest first; invariant 2.
 * In a plug scope of the ring: invariant 14. */
static unsigned run_callbacks(ApiAio *a, ApiAioReq *list)
{
    ApiAioReq *rev = NULL;
    BlkUring *outer = NULL;
    unsigned n = 0;

    while (list) {
        ApiAioReq *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    if (a->uring && rev) {
        outer = blk_uring_plug(a->uring); /* invariant 14 */
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
    if (a->uring && n) {
        blk_uring_unplug(a->uring, outer); /* invariant 14: nothing stays held */
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
    plug_kick(); /* invariant 14: a nested wait sleeps on none held back */
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
        out.ring_allocs = __atomic_load_n(&a->stats.ring_allocs, __ATOMIC_RELAXED);
        out.ring_joins = __atomic_load_n(&a->stats.ring_joins, __ATOMIC_RELAXED);
        out.ring_submits = a->uring ? blk_uring_submits(a->uring) : 0;
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
    pool_free(a->links);
    blk_uring_free(a->uring); /* nothing in flight now */
    close(a->efd);
    close(a->wake_fd);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    g_free(a);
    img->aio = NULL;
}
