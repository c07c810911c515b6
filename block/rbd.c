/*
 * block/rbd.c: the Ceph RBD protocol node, over librbd and librados.
 *
 * Owns: the cluster connection of one open image (its rados_t, I/O
 * context and librbd image), requests on it, opening, closing and creating
 * images.  Block status, size, information and RBD snapshots are
 * rbd-meta.c's (invariants 4-6 hold there too); where an image is (names)
 * is rbd-name.c's.
 *
 * Invariants (cited as "rbd.c invariant N"):
 *  1. Connecting follows QEMU 7.2: librados reads the configuration file
 *     (the name's conf=; without one its default search -- CEPH_CONF,
 *     /etc/ceph/ceph.conf, ... -- whose failure is ignored), then come
 *     qimg's timeouts (invariant 2), then the name's settings in order;
 *     librbd's cache is on unless the cache mode is none or directsync.
 *  2. Bounded waits: client_mount_timeout, rados_mon_op_timeout and
 *     rados_osd_op_timeout become BLK_RBD_* (rbd.h) unless the
 *     configuration file changed them from librados' defaults (300 s to
 *     connect, no limit for monitor and OSD requests); a setting in the
 *     name comes after and wins (":rados_osd_op_timeout=0" is librados'
 *     "wait forever").  A cluster that does not answer fails the open, an
 *     OSD that does not answer fails the request, with ETIMEDOUT.
 *  3. Requests go out through librbd's asynchronous calls (rbd_aio_*),
 *     each with its own completion the calling thread waits for: every
 *     thread of the asynchronous API's pool keeps a request in flight.
 *     Every completion's return value is checked: a negative one fails the
 *     request with its errno; a read returning less than asked is
 *     zero-filled (librbd stops short only at the image's end, which
 *     another client may have moved); a write, zero write or discard
 *     reporting a length other than 0 or its own fails with EIO.
 *  4. Writes past the end grow the image first (rbd_resize, as QEMU's
 *     driver does), serialised by resize_lock; img->size follows the
 *     image atomically (grow-only while requests run, set by truncate and
 *     snapshot rollback).  Reads past the end return zeros.
 *  5. Block status through rbd_diff_iterate2 (whole objects) only while
 *     the fast-diff feature is on and valid; otherwise, and when the diff
 *     fails, everything is data: a failure can only make a range look
 *     allocated, never zero.  With librbd < 1.17 the query starts at the
 *     object boundary (Ceph tracker 53784) and images with striping v2 or
 *     a parent are all data, as QEMU does.
 *  6. Snapshots are RBD snapshots: the ID is the name, the VM size the
 *     image size at the snapshot, no date or VM clock (QEMU's listing);
 *     an "@snap" name opens the snapshot, read-only ("rbd snapshots are
 *     read-only" for a read-write open).
 *  7. Writes bump write_gen, a successful flush records it (block.h
 *     invariant 4); a flush always reaches librbd (its cache may hold
 *     writes), whatever the cache mode, and with writethrough or directsync
 *     every write is followed by one.  Like a regular file, the image is
 *     resized exactly (truncate's "exact" is a block device's).
 *  8. Closing is bounded too: librbd's close of an image whose OSDs stopped
 *     answering waits for requests it queued behind each other, or longer
 *     (seen: minutes, on a cluster whose only OSDs were stopped).  It runs
 *     as rbd_aio_close, waited for at most 4 OSD timeouts + 10 s (forever
 *     when the OSD timeout is 0); past that the node lets go of the image
 *     and its connection without waiting (they are leaked to librados'
 *     threads) -- the flush before the close reported the failure.
 *  9. Every librados and librbd call goes through blk_rbd_lib (rbd-lib.h
 *     invariant 1), loaded by conn_open before anything else: a process
 *     that never opens an RBD image never loads the Ceph libraries.
 * 10. The asynchronous API's reads and writes (BlkDriver.aio_rw) go to
 *     librbd from the submitting thread and complete from librbd's
 *     callback thread, with no thread of ours waiting in between: each
 *     request costs librbd's own wake-ups only.  Only a request within the
 *     image that needs nothing else (no growing, no flush after it, a
 *     vector librbd takes) starts there; its result is checked as
 *     invariant 3 says, a write bumps write_gen (invariant 7).
 */
#include "block/rbd-int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static const struct {
    const char *key;
    int seconds;
} timeouts[] = {
    {"client_mount_timeout", BLK_RBD_MOUNT_TIMEOUT},
    {"rados_mon_op_timeout", BLK_RBD_MON_OP_TIMEOUT},
    {"rados_osd_op_timeout", BLK_RBD_OSD_OP_TIMEOUT},
};

static void conn_close(RbdConn *c)
{
    if (c->have_ioctx) {
        RL.rados_ioctx_destroy(c->ioctx);
        c->have_ioctx = false;
    }
    if (c->have_cluster) {
        RL.rados_shutdown(c->cluster);
        c->have_cluster = false;
    }
}

/* Invariant 1: connect to loc's cluster and pool; the reason of a failure
 * recorded as QEMU words it (no "Could not open" prefix).  Every open and
 * create starts here, so the libraries are loaded here (invariant 9). */
static int conn_open(const BlkRbdLocation *loc, bool cache, RbdConn *c)
{
    char before[G_N_ELEMENTS(timeouts)][32];
    int r;

    memset(c, 0, sizeof(*c));
    r = blk_rbd_lib_load();
    if (r < 0) {
        return r;
    }
    r = RL.rados_create(&c->cluster, loc->user);
    if (r < 0) {
        return blk_error(-r, "error initializing: %s", g_strerror(-r));
    }
    c->have_cluster = true;
    for (size_t i = 0; i < G_N_ELEMENTS(timeouts); i++) {
        if (RL.rados_conf_get(c->cluster, timeouts[i].key, before[i], sizeof(before[i])) <
            0) {
            before[i][0] = '\0';
        }
    }
    r = RL.rados_conf_read_file(c->cluster, loc->conf);
    if (loc->conf && r < 0) {
        blk_error(-r, "error reading conf file %s: %s", loc->conf, g_strerror(-r));
        goto fail;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(timeouts); i++) { /* invariant 2 */
        char now[32], want[16];
        if (RL.rados_conf_get(c->cluster, timeouts[i].key, now, sizeof(now)) == 0 &&
            strcmp(now, before[i]) == 0) {
            g_snprintf(want, sizeof(want), "%d", timeouts[i].seconds);
            RL.rados_conf_set(c->cluster, timeouts[i].key, want);
        }
    }
    for (guint i = 0; loc->settings && i + 1 < loc->settings->len; i += 2) {
        const char *key = loc->settings->pdata[i];
        r = RL.rados_conf_set(c->cluster, key, loc->settings->pdata[i + 1]);
        if (r < 0) {
            blk_error(EINVAL, "invalid conf option %s: %s", key, g_strerror(-r));
            r = -EINVAL;
            goto fail;
        }
    }
    /* librbd defaults to no caching where the option is missing: ignored */
    RL.rados_conf_set(c->cluster, "rbd_cache", cache ? "true" : "false");
    r = RL.rados_connect(c->cluster);
    if (r < 0) {
        blk_error(-r, "error connecting: %s", g_strerror(-r));
        goto fail;
    }
    r = RL.rados_ioctx_create(c->cluster, loc->pool, &c->ioctx);
    if (r < 0) {
        blk_error(-r, "error opening pool %s: %s", loc->pool, g_strerror(-r));
        goto fail;
    }
    c->have_ioctx = true;
    if (loc->namespace && *loc->namespace) {
        bool exists = false;
        r = RL.rbd_namespace_exists(c->ioctx, loc->namespace, &exists);
        if (r < 0) {
            blk_error(-r, "error checking namespace: %s", g_strerror(-r));
            goto fail;
        }
        if (!exists) {
            r = blk_error(ENOENT, "namespace '%s' does not exist", loc->namespace);
            goto fail;
        }
    }
    RL.rados_ioctx_set_namespace(c->ioctx, loc->namespace ? loc->namespace : "");
    return 0;

fail:
    conn_close(c);
    return r < 0 ? r : -EIO;
}

/* ---- requests (invariant 3) ---- */

typedef enum RbdOp { OP_READ, OP_WRITE, OP_DISCARD, OP_ZERO, OP_FLUSH } RbdOp;

static const char *const op_what[] = {
    [OP_READ] = "read from",      [OP_WRITE] = "write to", [OP_DISCARD] = "discard",
    [OP_ZERO] = "write zeros to", [OP_FLUSH] = "flush",
};

/* What a request's caller waits for (pthread primitives, which TSan sees:
 * glib's GMutex is a bare futex). */
typedef struct RbdWait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    bool published; /* atomic: the hand-off to librbd's thread (req_done) */
    ssize_t ret;
} RbdWait;

/* Runs on a librbd thread: only records the result and wakes the caller,
 * which releases the completion. */
static void req_done(rbd_completion_t c, void *arg)
{
    RbdWait *w = arg;
    ssize_t ret = RL.rbd_aio_get_return_value(c);

    /* pairs with run_request's release: librbd passes w on in ways a race
     * detector cannot see (the libraries are not instrumented) */
    (void)__atomic_load_n(&w->published, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&w->lock);
    w->ret = ret;
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Start one request with completion c; < 0: not started (no callback). */
static int submit_request(RbdState *s, RbdOp op, uint64_t offset, uint64_t len,
                          const struct iovec *iov, int niov, int zero_flags,
                          rbd_completion_t c)
{
    switch (op) {
    case OP_READ:
        return RL.rbd_aio_readv(s->image, iov, niov, offset, c);
    case OP_WRITE:
        return RL.rbd_aio_writev(s->image, iov, niov, offset, c);
    case OP_DISCARD:
        return RL.rbd_aio_discard(s->image, offset, len, c);
    case OP_ZERO:
        return RL.rbd_aio_write_zeroes(s->image, offset, (size_t)len, c, zero_flags, 0);
    case OP_FLUSH:
        return RL.rbd_aio_flush(s->image, c);
    }
    return -EINVAL;
}

/* One request; its completion's return value (or the submission's
 * failure), never before it completed. */
static ssize_t run_request(RbdState *s, RbdOp op, uint64_t offset, uint64_t len,
                           const struct iovec *iov, int niov, int zero_flags)
{
    rbd_completion_t c;
    RbdWait w = {.done = false};
    ssize_t ret;
    int r;

    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    __atomic_store_n(&w.published, true, __ATOMIC_RELEASE);
    r = RL.rbd_aio_create_completion(&w, req_done, &c);
    if (r < 0) {
        ret = r;
        goto out;
    }
    r = submit_request(s, op, offset, len, iov, niov, zero_flags, c);
    if (r < 0) {
        RL.rbd_aio_release(c); /* never submitted: no callback will run */
        ret = r;
        goto out;
    }
    pthread_mutex_lock(&w.lock);
    while (!w.done) {
        pthread_cond_wait(&w.cond, &w.lock);
    }
    ret = w.ret;
    pthread_mutex_unlock(&w.lock);
    RL.rbd_aio_release(c);
out:
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    return ret;
}

static int request_error(RbdState *s, RbdOp op, uint64_t offset, int err)
{
    return blk_error(err, "Could not %s RBD image '%s' at offset %" PRIu64 ": %s",
                     op_what[op], s->name, offset, g_strerror(err));
}

/* Invariant 3: a write-like request's result. */
static int check_length(RbdState *s, RbdOp op, uint64_t offset, uint64_t len, ssize_t ret)
{
    if (ret < 0) {
        return request_error(s, op, offset, (int)-ret);
    }
    if (ret != 0 && (uint64_t)ret != len) {
        return blk_error(EIO,
                         "Could not %s RBD image '%s' at offset %" PRIu64
                         ": librbd completed %zd of %" PRIu64 " bytes",
                         op_what[op], s->name, offset, ret, len);
    }
    return 0;
}

static uint64_t size_get(BlkNode *img)
{
    return __atomic_load_n(&img->size, __ATOMIC_ACQUIRE);
}

/* Invariant 4: the image holds at least end bytes. */
static int grow_to(BlkNode *img, uint64_t end)
{
    RbdState *s = img->opaque;
    int r = 0;

    if (end <= size_get(img)) {
        return 0;
    }
    pthread_mutex_lock(&s->resize_lock);
    if (end > size_get(img)) {
        r = RL.rbd_resize(s->image, end);
        if (r == 0) {
            __atomic_store_n(&img->size, end, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&s->resize_lock);
    if (r < 0) {
        return blk_error(-r, "Could not grow RBD image '%s' to %" PRIu64 " bytes: %s",
                         s->name, end, g_strerror(-r));
    }
    return 0;
}

/* Reads and writes of qiov at offset; a vector longer than librbd takes
 * goes through one buffer. */
static int rbd_rw(BlkNode *img, RbdOp op, uint64_t offset, const BlkIOV *q)
{
    RbdState *s = img->opaque;
    g_autofree uint8_t *bounce = NULL;
    struct iovec one;
    const struct iovec *iov = q->iov;
    int niov = q->niov;
    ssize_t ret;

    if (niov > IOV_MAX) {
        bounce = g_malloc(q->size);
        if (op == OP_WRITE) {
            iov_to_buf(q, 0, bounce, q->size);
        }
        one = (struct iovec){.iov_base = bounce, .iov_len = q->size};
        iov = &one;
        niov = 1;
    }
    ret = run_request(s, op, offset, q->size, iov, niov, 0);
    if (op == OP_WRITE) {
        return check_length(s, op, offset, q->size, ret);
    }
    if (ret < 0) {
        return request_error(s, op, offset, (int)-ret);
    }
    if (bounce) {
        iov_from_buf(q, 0, bounce, (size_t)MIN((uint64_t)ret, (uint64_t)q->size));
    }
    if ((size_t)ret < q->size) { /* invariant 3: librbd stopped at the end */
        iov_memset(q, (size_t)ret, 0, q->size - (size_t)ret);
    }
    return 0;
}

static int rbd_node_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                           unsigned flags)
{
    uint64_t size = size_get(img);
    size_t avail = offset >= size ? 0 : (size_t)MIN((uint64_t)qiov->size, size - offset);
    BlkIOV part;
    int ret;

    (void)flags;
    if (avail < qiov->size) {
        iov_memset(qiov, avail, 0, qiov->size - avail);
    }
    if (avail == 0) {
        return 0;
    }
    if (avail == qiov->size) {
        return rbd_rw(img, OP_READ, offset, qiov);
    }
    iov_slice(&part, qiov, 0, avail);
    ret = rbd_rw(img, OP_READ, offset, &part);
    iov_destroy(&part);
    return ret;
}

static int rbd_node_flush(BlkNode *img)
{
    RbdState *s = img->opaque;
    uint64_t gen = __atomic_load_n(&img->write_gen, __ATOMIC_ACQUIRE);
    ssize_t ret;

    if (gen == __atomic_load_n(&img->flushed_gen, __ATOMIC_ACQUIRE)) {
        return 0; /* block.h invariant 4 */
    }
    ret = run_request(s, OP_FLUSH, 0, 0, NULL, 0, 0);
    if (ret < 0) {
        return blk_error((int)-ret, "Could not flush RBD image '%s': %s", s->name,
                         g_strerror((int)-ret));
    }
    blk_gen_flushed(img, gen); /* invariant 7 */
    return 0;
}

/* Invariant 7; FUA as a flush after the write, as is every write in the
 * writethrough and directsync modes (a format node above flushes too: the
 * second flush finds nothing new). */
static int finish_write(BlkNode *img, int ret, unsigned flags)
{
    blk_gen_bump(img);
    if (img->cache == BLK_CACHE_WRITETHROUGH || img->cache == BLK_CACHE_DIRECTSYNC) {
        flags |= BLK_REQ_FUA;
    }
    if (ret == 0 && (flags & BLK_REQ_FUA)) {
        ret = rbd_node_flush(img);
    }
    return ret;
}

static int rbd_node_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                            unsigned flags)
{
    int ret = grow_to(img, offset + qiov->size);

    if (ret < 0) {
        return ret;
    }
    return finish_write(img, rbd_rw(img, OP_WRITE, offset, qiov), flags);
}

static int rbd_node_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                                  unsigned flags)
{
    RbdState *s = img->opaque;
    /* QEMU's: thick unless the range may be deallocated */
    int zflags = flags & BLK_REQ_MAY_UNMAP ? 0 : RBD_WRITE_ZEROES_FLAG_THICK_PROVISION;
    int ret;

    if (bytes > SSIZE_MAX) {
        return blk_error(EINVAL, "Zero write of %" PRIu64 " bytes is too long", bytes);
    }
    ret = grow_to(img, offset + bytes);
    if (ret == 0) {
        ret = check_length(s, OP_ZERO, offset, bytes,
                           run_request(s, OP_ZERO, offset, bytes, NULL, 0, zflags));
    }
    return finish_write(img, ret, flags);
}

static int rbd_node_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    RbdState *s = img->opaque;
    uint64_t size = size_get(img);
    int ret;

    if (offset >= size) {
        return 0;
    }
    bytes = MIN(bytes, size - offset);
    ret = check_length(s, OP_DISCARD, offset, bytes,
                       run_request(s, OP_DISCARD, offset, bytes, NULL, 0, 0));
    blk_gen_bump(img);
    return ret;
}

/* ---- asynchronous reads and writes (invariant 10) ---- */

typedef struct RbdAio {
    BlkNode *img;
    RbdOp op;
    uint64_t offset;
    const BlkIOV *q;
    BlkAioDone *done;
    void *opaque;
    bool published; /* atomic: as RbdWait's */
} RbdAio;

/* Runs on a librbd thread: the result as rbd_rw and rbd_node_pwritev give
 * it (invariant 3), a failure's message recorded for this thread. */
static void aio_done(rbd_completion_t c, void *arg)
{
    RbdAio *a = arg;
    ssize_t ret = RL.rbd_aio_get_return_value(c);
    int r = 0;

    (void)__atomic_load_n(&a->published, __ATOMIC_ACQUIRE);
    RL.rbd_aio_release(c);
    blk_error_clear();
    if (a->op == OP_WRITE) {
        r = check_length(a->img->opaque, OP_WRITE, a->offset, a->q->size, ret);
        blk_gen_bump(a->img); /* invariant 7 */
    } else if (ret < 0) {
        r = request_error(a->img->opaque, OP_READ, a->offset, (int)-ret);
    } else if ((size_t)ret < a->q->size) { /* invariant 3: stopped at the end */
        iov_memset(a->q, (size_t)ret, 0, a->q->size - (size_t)ret);
    }
    BlkAioDone *done = a->done;
    void *opaque = a->opaque;
    g_free(a);
    done(opaque, r);
}

/* Invariant 10: only what needs nothing before or after librbd's request
 * (no growing, no flush, no bounce buffer) starts here; -ENOTSUP sends the
 * rest to preadv/pwritev. */
static int rbd_node_aio_rw(BlkNode *img, bool write, uint64_t offset, const BlkIOV *q,
                           BlkAioDone *done, void *opaque)
{
    RbdState *s = img->opaque;
    RbdOp op = write ? OP_WRITE : OP_READ;
    RbdAio *a;
    rbd_completion_t c;
    uint64_t end;
    int r;

    if (q->niov > IOV_MAX || q->size == 0 ||
        __builtin_add_overflow(offset, q->size, &end) || end > size_get(img) ||
        (write && (img->read_only || img->cache == BLK_CACHE_WRITETHROUGH ||
                   img->cache == BLK_CACHE_DIRECTSYNC))) {
        return -ENOTSUP;
    }
    a = g_new(RbdAio, 1);
    *a = (RbdAio){
        .img = img, .op = op, .offset = offset, .q = q, .done = done, .opaque = opaque};
    /* the last touch of 'a' before librbd may complete it (its threads'
     * synchronisation is invisible to TSan: 'published' is the edge) */
    __atomic_store_n(&a->published, true, __ATOMIC_RELEASE);
    r = RL.rbd_aio_create_completion(a, aio_done, &c);
    if (r == 0) {
        r = submit_request(s, op, offset, q->size, q->iov, q->niov, 0, c);
        if (r < 0) {
            RL.rbd_aio_release(c); /* never submitted: no callback will run */
        }
    }
    if (r < 0) {
        g_free(a);
        return -ENOTSUP; /* the synchronous path reports it */
    }
    return 0;
}

/* Closing: shared by the closer and librbd's completion (invariant 8). */
typedef struct RbdClose {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int refs; /* [lock] */
} RbdClose;

static void close_unref(RbdClose *c)
{
    pthread_mutex_lock(&c->lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->lock);
    if (last) {
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        g_free(c);
    }
}

static void close_done(rbd_completion_t comp, void *arg)
{
    RbdClose *c = arg;

    (void)comp;
    (void)__atomic_load_n(&c->refs, __ATOMIC_ACQUIRE); /* as req_done */
    pthread_mutex_lock(&c->lock);
    c->done = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    close_unref(c);
}

/* Invariant 8: true when librbd closed the image within the bound. */
static bool close_image(RbdState *s)
{
    RbdClose *c = g_new0(RbdClose, 1);
    pthread_condattr_t attr;
    rbd_completion_t comp;
    struct timespec until;
    bool done;

    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &attr);
    pthread_condattr_destroy(&attr);
    __atomic_store_n(&c->refs, 2, __ATOMIC_RELEASE);
    if (RL.rbd_aio_create_completion(c, close_done, &comp) < 0 ||
        RL.rbd_aio_close(s->image, comp) < 0) {
        RL.rbd_close(s->image); /* not even queued: the plain way */
        c->refs = 1;
        close_unref(c);
        return true;
    }
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += s->close_bound;
    pthread_mutex_lock(&c->lock);
    while (!c->done) {
        if (s->close_bound == 0) {
            pthread_cond_wait(&c->cond, &c->lock);
        } else if (pthread_cond_timedwait(&c->cond, &c->lock, &until) == ETIMEDOUT) {
            break;
        }
    }
    done = c->done;
    pthread_mutex_unlock(&c->lock);
    if (done) {
        RL.rbd_aio_release(comp);
    }
    close_unref(c); /* the completion's reference stays if it never ran */
    return done;
}

static void rbd_node_close(BlkNode *img)
{
    RbdState *s = img->opaque;

    if (!s) {
        return;
    }
    if (!s->have_image || close_image(s)) {
        conn_close(&s->conn);
    } /* else the cluster's threads still use the connection: left to them */
    pthread_mutex_destroy(&s->resize_lock);
    g_free(s->name);
    g_free(s);
    img->opaque = NULL;
}

const BlkDriver blk_rbd_driver = {
    .format_name = "rbd",
    .is_protocol = true,
    .close = rbd_node_close,
    .preadv = rbd_node_preadv,
    .pwritev = rbd_node_pwritev,
    .aio_rw = rbd_node_aio_rw,
    .pwrite_zeroes = rbd_node_pwrite_zeroes,
    .pdiscard = rbd_node_pdiscard,
    .flush = rbd_node_flush,
    .block_status = blk_rbd_block_status,
    .truncate = blk_rbd_truncate,
    .get_allocated_size = blk_rbd_get_allocated_size,
    .get_info = blk_rbd_get_info,
    .has_zero_init = blk_rbd_has_zero_init,
    .snapshot_create = blk_rbd_snapshot_create,
    .snapshot_goto = blk_rbd_snapshot_goto,
    .snapshot_delete = blk_rbd_snapshot_delete,
    .snapshot_list = blk_rbd_snapshot_list,
};

/* ---- open and create ---- */

static int open_image(BlkNode *img, const BlkRbdLocation *loc, const BlkOpenOptions *o)
{
    RbdState *s = img->opaque;
    bool ro = o->read_only || loc->snapshot;
    rbd_image_info_t info;
    int r;

    if (loc->snapshot && !o->read_only) {
        return blk_error(EACCES, "rbd snapshots are read-only"); /* invariant 6 */
    }
    r = conn_open(loc, o->cache != BLK_CACHE_NONE && o->cache != BLK_CACHE_DIRECTSYNC,
                  &s->conn);
    if (r < 0) {
        return r;
    }
    r = ro ? RL.rbd_open_read_only(s->conn.ioctx, loc->image, &s->image, loc->snapshot)
           : RL.rbd_open(s->conn.ioctx, loc->image, &s->image, loc->snapshot);
    if (r < 0) {
        return blk_error(-r, "error reading header from %s: %s", loc->image,
                         g_strerror(-r));
    }
    s->have_image = true;
    r = RL.rbd_stat(s->image, &info, sizeof(info));
    if (r < 0) {
        return blk_error(-r, "error getting image info from %s: %s", loc->image,
                         g_strerror(-r));
    }
    if (info.obj_size == 0 || (info.obj_size & (info.obj_size - 1)) != 0) {
        return blk_error(EIO, "RBD image '%s' has an invalid object size %" PRIu64,
                         loc->image, info.obj_size);
    }
    s->object_size = info.obj_size;
    char t[32];
    if (RL.rados_conf_get(s->conn.cluster, "rados_osd_op_timeout", t, sizeof(t)) == 0) {
        guint64 sec = g_ascii_strtoull(t, NULL, 10); /* "120" or "120.000000" */
        s->close_bound = sec ? (unsigned)MIN(sec * 4 + 10, (guint64)86400) : 0;
    }
    img->size = info.size;
    img->read_only = ro;
    return 0;
}

BlkNode *blk_open_rbd(const char *filename, const BlkOpenOptions *opts)
{
    BlkRbdLocation loc = {0};
    BlkNode *img = g_new0(BlkNode, 1);
    RbdState *s = g_new0(RbdState, 1);
    int ret;

    pthread_mutex_init(&s->resize_lock, NULL);
    img->drv = &blk_rbd_driver;
    img->opaque = s;
    img->cache = opts->cache;
    img->request_alignment = 1;
    img->filename = g_strdup(filename);
    if (opts->rbd) {
        blk_rbd_location_copy(&loc, opts->rbd);
        ret = 0;
    } else {
        ret = blk_rbd_parse_name(filename, &loc);
    }
    if (ret == 0) {
        s->name = g_strdup(loc.image);
        ret = open_image(img, &loc, opts);
    }
    if (ret < 0) {
        /* a json:/--image-opts location: the caller names it (image.c) */
        if (!opts->rbd) {
            blk_error_prefix(ret, "Could not open '%s'", filename);
        }
        blk_rbd_location_clear(&loc);
        blk_close(img);
        return NULL;
    }
    g_free(img->filename);
    img->filename = blk_rbd_json_name(&loc); /* QEMU's name for the node */
    blk_rbd_location_clear(&loc);
    return img;
}

int blk_rbd_create(const char *filename, uint64_t size, uint64_t object_size)
{
    BlkRbdLocation loc = {0};
    RbdConn c;
    int order = 0, ret;

    if (object_size) {
        if (object_size & (object_size - 1)) {
            return blk_error(EINVAL, "obj size needs to be power of 2");
        }
        if (object_size < 4096) {
            return blk_error(EINVAL, "obj size too small");
        }
        order = __builtin_ctzll(object_size);
    }
    if (size > (uint64_t)INT64_MAX - 511) {
        return blk_error(EFBIG, "Image size must be less than 8 EiB!");
    }
    /* as QEMU, a snapshot in the name is not looked at */
    ret = blk_rbd_parse_name(filename, &loc);
    if (ret == 0) {
        ret = conn_open(&loc, false, &c);
    }
    if (ret == 0) {
        ret = RL.rbd_create(c.ioctx, loc.image, ROUND_UP(size, 512), &order);
        if (ret < 0) {
            blk_error(-ret, "error rbd create: %s", g_strerror(-ret));
        }
        conn_close(&c);
    }
    blk_rbd_location_clear(&loc);
    return ret;
}
