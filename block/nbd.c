/*
 * block/nbd.c: the NBD protocol node, a client built on libnbd.
 *
 * Names (the caller's own, block.h invariant 5): libnbd's URIs
 * (nbd://host[:port]/export, nbd+unix:///export?socket=PATH, nbds://...)
 * and qemu-img's nbd:unix:PATH[:exportname=NAME] and
 * nbd:HOST:PORT[:exportname=NAME].
 *
 * Owns: the connections to one export and how a request reaches one (the
 * open is block/nbd-open.c).
 *
 * Invariants (cited as "nbd.c invariant N"):
 *  1. Connections: one, or up to NBD_CONNS when the server advertises
 *     multi-conn (a flush on any connection then covers the writes that
 *     completed on all of them).  Requests go out with libnbd's async calls,
 *     many in flight per connection; the connection with the fewest in
 *     flight takes the next one.  Each connection has one poller thread, the
 *     only one that reads its socket (nbd_aio_notify_read/write); a
 *     submitter that leaves output pending wakes it (its eventfd), and
 *     completion callbacks, run by the poller, only record the result and
 *     wake the waiting caller.  Extra connections the server refuses (a
 *     client limit) are dropped at open: the node works with those it got.
 *     Their handshakes must end within NBD_EXTRA_CONNECT_US: a server at
 *     its client limit may leave one in its listen backlog, unanswered
 *     (qemu-nbd -e N), and the open must not wait for it.
 *  2. Every reply is checked: a failed command fails the request with the
 *     server's errno (EIO when it sent none); a connection that dies fails
 *     the commands in flight on it (libnbd retires them with ENOTCONN) and
 *     every later one with EIO, QEMU's client's errno for a lost
 *     connection (a server never sends ENOTCONN: NBD's errors are EPERM,
 *     EIO, ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP and ESHUTDOWN); a
 *     submission libnbd refuses on a live connection fails with libnbd's
 *     message.  A read succeeds only when its reply's chunks carried
 *     exactly the bytes asked for (libnbd checks that each lies inside the
 *     read, not that they cover it): a server whose reply covers less (or
 *     overlaps itself past the length) fails it with EIO, where QEMU 7.2
 *     returns the buffer's old bytes.  Chunks that overlap yet add up to
 *     the length are not caught; the bytes they miss read as zeros
 *     (libnbd zeroes read buffers first, nbd_set_pread_initialize's
 *     default), never as another request's.
 *  3. Requests are cut at the server's maximum block size (32 MiB when it
 *     says none); a server whose minimum block size is above 1 is refused
 *     at open (no read-modify-write here yet).
 *  4. Zeroes: NBD_CMD_WRITE_ZEROES (NO_HOLE unless MAY_UNMAP), with
 *     FAST_ZERO for NO_FALLBACK where the server has it, else -ENOTSUP;
 *     a server without zeroes gets written zeros (unless NO_FALLBACK).
 *     FUA is the server's where it has it, else a flush after the write.
 *  5. Block status from base:allocation: HOLE means no DATA, ZERO means
 *     reads return zeros (QEMU's nbd client), a HOLE without ZERO is not
 *     allocated at all (QEMU's block layer); without the context every
 *     range is data.  Writes bump write_gen, a good flush records it
 *     (block.h invariant 4).  With another meta context (QEMU's
 *     x-dirty-bitmap option: qemu:dirty-bitmap:NAME, qemu:allocation-depth)
 *     its values are read as base:allocation's flags, as QEMU's client
 *     reads them, and a server without it fails the open ("Could not
 *     open image: Invalid argument", QEMU's words).
 *  6. A server's refusal of the export (NBD_REP_ERR_UNKNOWN) is reported
 *     in QEMU's words, "Requested export not available", with the text
 *     the server sent under it ("server reported: ...").
 *  7. With QEMU's reconnect-delay (seconds; block/nbd-reconnect.c), the
 *     node keeps one connection; a request that failed because it died
 *     waits for a new connection -- attempts at once, then after 1, 2,
 *     4 ... 16 s, as QEMU's -- and runs again, until reconnect-delay has
 *     passed since its first failure; then it fails as it did.  A new
 *     connection must offer the export's size again.  The open itself is
 *     not retried (QEMU's open-timeout, which qimg refuses).
 *  8. Plain TCP names -- nbd://HOST[:PORT][/EXPORT] with no user, query or
 *     fragment (json's server.type=inet becomes one, api/json-name.c) and
 *     qemu-img's nbd:HOST[:PORT][:exportname=NAME] -- and Unix socket
 *     names -- nbd+unix:///[EXPORT]?socket=PATH with nothing else in it
 *     (json's server.type=unix) and nbd:unix:PATH[:exportname=NAME] -- are
 *     connected by qimg, as QEMU connects them (block/inet.c: its
 *     messages, "address resolution failed for HOST:PORT: ..." and
 *     "Failed to connect to 'HOST:PORT': ..." or "... to 'PATH': ..."),
 *     and the socket is handed to libnbd (nbd_connect_socket) for the
 *     handshake; a deadline (invariants 1 and 7) covers the connect too.
 *     Every connection, extra ones and reconnects, is made the same way
 *     from the name as given.  TLS (nbds://) and URIs with anything else
 *     in them are libnbd's to connect.
 *  9. An oldstyle handshake without flags (all 32 bits zero) is taken as
 *     QEMU's client takes it, an export with no optional feature, where
 *     libnbd refuses it (block/nbd-connect.c, fact 1).
 * 10. An export larger than QEMU's largest image (2^63 - 2^30 bytes,
 *     NBD_MAX_SIZE) is refused at open in QEMU's words ("Could not refresh
 *     total sector count: File too large"), and so is one of 2^63 bytes
 *     or more, which libnbd's int64_t size shows as negative (QEMU opens
 *     some of those, and refuses 2^64 - 1 with EPERM, the -1 of the size).
 */
#include "block/block.h"
#include "block/nbd-int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* What one caller waits for: its commands' completions (invariant 1). */
typedef struct NbdWait {
    pthread_mutex_t m;
    pthread_cond_t cv;
    unsigned pending;
    int err; /* the first failure's errno */
    uint64_t err_offset;
    bool reported; /* err came from a refused submission, already reported */
} NbdWait;

/* One command of a caller; the completion callback's user data (and a
 * read's chunk callback's: invariant 2). */
typedef struct NbdCmd {
    NbdWait *w;
    NbdState *s;
    int conn;
    uint64_t offset;
    uint64_t want; /* a read: the bytes asked for */
    uint64_t seen; /* a read: the bytes its chunks carried, want + 1 past it */
} NbdCmd;

static void wait_init(NbdWait *w)
{
    pthread_mutex_init(&w->m, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->pending = 0;
    w->err = 0;
    w->err_offset = 0;
    w->reported = false;
}

static bool wait_note(NbdWait *w, int err, uint64_t offset)
{
    if (err && !w->err) {
        w->err = err;
        w->err_offset = offset;
        return true;
    }
    return false;
}

/* Blocks until every submitted command of @w completed; then destroys it. */
static int wait_finish(NbdWait *w)
{
    int err;

    pthread_mutex_lock(&w->m);
    while (w->pending > 0) {
        pthread_cond_wait(&w->cv, &w->m);
    }
    err = w->err;
    pthread_mutex_unlock(&w->m);
    pthread_mutex_destroy(&w->m);
    pthread_cond_destroy(&w->cv);
    return err;
}

/* Invariant 2: the failed submission's errno and libnbd's message. */
static int nbd_fail(const NbdState *s, const char *what, uint64_t offset)
{
    int err = NL.nbd_get_errno();
    const char *msg = NL.nbd_get_error();

    if (err <= 0) {
        err = EIO;
    }
    return blk_error(err, "Could not %s '%s' at offset %" PRIu64 ": %s", what, s->name,
                     offset, msg ? msg : g_strerror(err));
}

/* Invariant 2: a command the server (or a dead connection) failed. */
static int cmd_fail(const NbdState *s, const char *what, int err, uint64_t offset)
{
    return blk_error(err, "Could not %s '%s' at offset %" PRIu64 ": %s", what, s->name,
                     offset, g_strerror(err));
}

/* Invariant 2: a command's errno as the caller sees it. */
static int reply_errno(int err)
{
    if (err == ENOTCONN) {
        return EIO; /* the connection died under the command */
    }
    return err > 0 ? err : EIO;
}

/* Invariant 2: counts the bytes a read's reply carried (poller thread,
 * handle lock held, like cmd_done). */
static int read_chunk(void *opaque, const void *subbuf, size_t count, uint64_t offset,
                      unsigned status, int *error)
{
    NbdCmd *cmd = opaque;

    (void)subbuf;
    (void)offset;
    (void)error;
    if (status == LIBNBD_READ_DATA || status == LIBNBD_READ_HOLE) {
        cmd->seen = count > cmd->want - MIN(cmd->seen, cmd->want) ? cmd->want + 1
                                                                  : cmd->seen + count;
    }
    return 0;
}

/* Runs in the poller thread, handle lock held: no libnbd calls here. */
static int cmd_done(void *opaque, int *error)
{
    NbdCmd *cmd = opaque;
    NbdWait *w = cmd->w;
    NbdState *s = cmd->s;
    int err = *error ? reply_errno(*error) : 0;

    if (!err && cmd->seen != cmd->want) {
        err = EIO; /* invariant 2: a read whose reply did not cover it */
    }
    pthread_mutex_lock(&s->lock);
    s->c[cmd->conn].inflight--;
    pthread_mutex_unlock(&s->lock);
    if (*error == ENOTCONN) {
        __atomic_store_n(&s->c[cmd->conn].lost, true, __ATOMIC_RELEASE);
    }
    pthread_mutex_lock(&w->m);
    wait_note(w, err, cmd->offset);
    w->pending--;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->m);
    return 1; /* retire it */
}

static void cmd_free(void *opaque)
{
    g_free(opaque);
}

/* Invariant 1: the least busy connection; counted in flight until done. */
static NbdCmd *cmd_new(NbdState *s, NbdWait *w, uint64_t offset)
{
    NbdCmd *cmd = g_new(NbdCmd, 1);
    int best = 0;

    pthread_mutex_lock(&s->lock);
    for (int i = 1; i < s->nconns; i++) {
        if (s->c[i].inflight < s->c[best].inflight) {
            best = i;
        }
    }
    s->c[best].inflight++;
    pthread_mutex_unlock(&s->lock);
    *cmd = (NbdCmd){.w = w, .s = s, .conn = best, .offset = offset};
    pthread_mutex_lock(&w->m);
    w->pending++;
    pthread_mutex_unlock(&w->m);
    return cmd;
}

typedef enum NbdOp { OP_READ, OP_WRITE, OP_ZERO, OP_TRIM, OP_FLUSH, OP_STATUS } NbdOp;

static const char *const op_what[] = {
    [OP_READ] = "read from",      [OP_WRITE] = "write to",
    [OP_ZERO] = "write zeros to", [OP_TRIM] = "discard",
    [OP_FLUSH] = "flush",         [OP_STATUS] = "get the block status of",
};

/*
 * Sends one command on the least busy connection; @w counts it until its
 * completion.  A command libnbd refuses (it freed cmd: callback lifetimes) is
 * undone here and fails with libnbd's message; an accepted one that left
 * output pending wakes the poller, so that it polls for writing.
 */
static int submit(NbdState *s, NbdWait *w, NbdOp op, void *buf, uint64_t len,
                  uint64_t offset, uint32_t flags, nbd_extent_callback *ext)
{
    NbdCmd *cmd = cmd_new(s, w, offset);
    int conn = cmd->conn;
    NbdConn *c = &s->c[conn];
    nbd_completion_callback cb = {
        .callback = cmd_done, .user_data = cmd, .free = cmd_free};
    int64_t cookie = -1;

    switch (op) {
    case OP_READ: {
        nbd_chunk_callback chunk = {.callback = read_chunk, .user_data = cmd};
        cmd->want = len; /* invariant 2 */
        cookie =
            NL.nbd_aio_pread_structured(c->h, buf, (size_t)len, offset, chunk, cb, flags);
        break;
    }
    case OP_WRITE:
        cookie = NL.nbd_aio_pwrite(c->h, buf, (size_t)len, offset, cb, flags);
        break;
    case OP_ZERO:
        cookie = NL.nbd_aio_zero(c->h, len, offset, cb, flags);
        break;
    case OP_TRIM:
        cookie = NL.nbd_aio_trim(c->h, len, offset, cb, flags);
        break;
    case OP_FLUSH:
        cookie = NL.nbd_aio_flush(c->h, cb, flags);
        break;
    case OP_STATUS:
        cookie = NL.nbd_aio_block_status(c->h, len, offset, *ext, cb, flags);
        break;
    }
    if (cookie < 0) {
        bool dead = __atomic_load_n(&c->lost, __ATOMIC_ACQUIRE) ||
                    NL.nbd_aio_is_dead(c->h) == 1 || NL.nbd_aio_is_closed(c->h) == 1;
        int ret = dead ? cmd_fail(s, op_what[op], EIO, offset)
                       : nbd_fail(s, op_what[op], offset);
        pthread_mutex_lock(&s->lock);
        c->inflight--;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_lock(&w->m);
        w->pending--;
        if (wait_note(w, -ret, offset)) {
            w->reported = true;
        }
        pthread_mutex_unlock(&w->m);
        return ret;
    }
    if (NL.nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE) {
        uint64_t one = 1;
        if (write(c->efd, &one, sizeof(one)) < 0) {
            /* the counter is non-zero already: the poller wakes anyway */
        }
    }
    return 0;
}

/* Waits for @w's commands; a failure the submitter did not report yet is
 * reported as the server's (invariant 2). */
static int wait_result(NbdState *s, NbdWait *w, NbdOp op)
{
    int err = wait_finish(w); /* no callback touches w after this */

    if (!err) {
        return 0;
    }
    return w->reported ? -err : cmd_fail(s, op_what[op], err, w->err_offset);
}

/* Invariant 1: the only reader of the connection's socket. */
static void *poller_main(void *opaque)
{
    NbdConn *c = opaque;
    int fd = NL.nbd_aio_get_fd(c->h);

    for (;;) {
        unsigned dir = NL.nbd_aio_get_direction(c->h);
        struct pollfd fds[2] = {
            {.fd = fd,
             .events = (short)((dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
                               (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0))},
            {.fd = c->efd, .events = POLLIN},
        };
        uint64_t v;

        if (NL.nbd_aio_is_dead(c->h) == 1 || NL.nbd_aio_is_closed(c->h) == 1) {
            break;
        }
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (fds[1].revents & POLLIN) {
            if (read(c->efd, &v, sizeof(v)) < 0) {
                /* drained by an earlier read */
            }
            if (__atomic_load_n(c->stop_flag, __ATOMIC_ACQUIRE)) {
                break;
            }
        }
        if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) &&
            (dir & LIBNBD_AIO_DIRECTION_READ)) {
            NL.nbd_aio_notify_read(c->h); /* a dead connection retires its commands */
        } else if ((fds[0].revents & (POLLOUT | POLLHUP | POLLERR)) &&
                   (dir & LIBNBD_AIO_DIRECTION_WRITE)) {
            NL.nbd_aio_notify_write(c->h);
        }
    }
    return NULL;
}

static void nbd_node_close(BlkNode *img)
{
    NbdState *s = img->opaque;

    __atomic_store_n(&s->stop, true, __ATOMIC_RELEASE);
    for (int i = 0; i < s->nconns; i++) {
        NbdConn *c = &s->c[i];
        blk_nbd_stop_poller(c);
        NL.nbd_shutdown(c->h, 0);
        NL.nbd_close(c->h);
        if (c->efd >= 0) {
            close(c->efd);
        }
    }
    pthread_mutex_destroy(&s->lock);
    pthread_rwlock_destroy(&s->rw);
    g_free(s->name);
    g_free(s->target);
    g_free(s->context);
    g_free(s);
}

/* Reads or writes: pieces of max_request (invariant 3), NBD_WINDOW of them
 * in flight at once, through a bounce buffer when the vector has several
 * buffers. */
static int nbd_rw_once(NbdState *s, uint64_t offset, const BlkIOV *qiov, bool write,
                       uint32_t flags)
{
    NbdOp op = write ? OP_WRITE : OP_READ;
    size_t window = MIN(qiov->size, (size_t)s->max_request * NBD_WINDOW);
    g_autofree uint8_t *bounce = qiov->niov == 1 ? NULL : g_malloc(window);
    int ret = 0;

    for (size_t done = 0; done < qiov->size && ret == 0;) {
        size_t wlen = MIN(window, qiov->size - done);
        uint8_t *base = bounce ? bounce : (uint8_t *)qiov->iov[0].iov_base + done;
        NbdWait w;

        if (bounce && write) {
            iov_to_buf(qiov, done, bounce, wlen);
        }
        wait_init(&w);
        for (size_t off = 0; off < wlen;) {
            size_t n = MIN((size_t)s->max_request, wlen - off);
            if (submit(s, &w, op, base + off, n, offset + done + off, flags, NULL) < 0) {
                break;
            }
            off += n;
        }
        ret = wait_result(s, &w, op);
        if (ret == 0 && bounce && !write) {
            iov_from_buf(qiov, done, bounce, wlen);
        }
        done += wlen;
    }
    return ret;
}

/* Zero or trim requests, cut at max_request, all in flight at once. */
static int nbd_ranges_once(NbdState *s, NbdOp op, uint64_t offset, uint64_t bytes,
                           uint32_t flags)
{
    NbdWait w;

    wait_init(&w);
    while (bytes > 0) {
        uint64_t n = MIN(bytes, (uint64_t)s->max_request);
        if (submit(s, &w, op, NULL, n, offset, flags, NULL) < 0) {
            break;
        }
        offset += n;
        bytes -= n;
    }
    if (op == OP_ZERO && (flags & LIBNBD_CMD_FLAG_FAST_ZERO)) {
        int err = wait_finish(&w);
        if (err == ENOTSUP) {
            return -ENOTSUP; /* invariant 4: not fast, nothing reported */
        }
        return !err ? 0 : w.reported ? -err : cmd_fail(s, op_what[op], err, w.err_offset);
    }
    return wait_result(s, &w, op);
}

/* One request of any kind, as the functions below make it. */
typedef struct NbdReq {
    NbdOp op;
    uint64_t offset, bytes;
    const BlkIOV *qiov;
    uint32_t flags;
    nbd_extent_callback *ext;
} NbdReq;

static int run_once(NbdState *s, const NbdReq *r)
{
    NbdWait w;

    switch (r->op) {
    case OP_READ:
    case OP_WRITE:
        return nbd_rw_once(s, r->offset, r->qiov, r->op == OP_WRITE, r->flags);
    case OP_ZERO:
    case OP_TRIM:
        return nbd_ranges_once(s, r->op, r->offset, r->bytes, r->flags);
    default:
        wait_init(&w);
        submit(s, &w, r->op, NULL, r->bytes, r->offset, r->flags, r->ext);
        return wait_result(s, &w, r->op);
    }
}

/* Invariant 7: run again on a new connection while reconnect-delay lasts. */
static int run(NbdState *s, const NbdReq *r)
{
    int64_t deadline = 0;
    bool had = blk_error_mark();
    uint64_t gen;
    int ret;

    do {
        gen = blk_nbd_attempt(s);
        ret = run_once(s, r);
    } while (blk_nbd_retry(s, ret, gen, &deadline, had));
    return ret;
}

static int nbd_rw(NbdState *s, uint64_t offset, const BlkIOV *qiov, bool write,
                  uint32_t flags)
{
    NbdReq r = {
        .op = write ? OP_WRITE : OP_READ, .offset = offset, .qiov = qiov, .flags = flags};
    return run(s, &r);
}

static int nbd_ranges(NbdState *s, NbdOp op, uint64_t offset, uint64_t bytes,
                      uint32_t flags)
{
    NbdReq r = {.op = op, .offset = offset, .bytes = bytes, .flags = flags};
    return run(s, &r);
}

static int nbd_node_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                           unsigned flags)
{
    (void)flags;
    return nbd_rw(img->opaque, offset, qiov, false, 0);
}

static int nbd_node_flush(BlkNode *img)
{
    NbdState *s = img->opaque;
    uint64_t gen = __atomic_load_n(&img->write_gen, __ATOMIC_ACQUIRE);
    NbdReq r = {.op = OP_FLUSH};
    int ret;

    if (img->read_only || !s->can_flush ||
        gen == __atomic_load_n(&img->flushed_gen, __ATOMIC_ACQUIRE)) {
        return 0;
    }
    ret = run(s, &r);
    if (ret == 0) {
        blk_gen_flushed(img, gen); /* invariant 5 */
    }
    return ret;
}

/* Invariant 4: FUA natively or by a flush after the write. */
static int finish_write(BlkNode *img, int ret, unsigned flags, bool native_fua)
{
    blk_gen_bump(img);
    if (ret == 0 && (flags & BLK_REQ_FUA) && !native_fua) {
        ret = nbd_node_flush(img);
    }
    return ret;
}

static int nbd_node_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                            unsigned flags)
{
    NbdState *s = img->opaque;
    bool fua = (flags & BLK_REQ_FUA) && s->can_fua;

    return finish_write(img, nbd_rw(s, offset, qiov, true, fua ? LIBNBD_CMD_FLAG_FUA : 0),
                        flags, fua);
}

static int write_zeros_as_data(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    size_t n = (size_t)MIN(bytes, (uint64_t)(1u << 20));
    g_autofree uint8_t *buf = g_malloc0(n);
    int ret = 0;

    while (bytes > 0 && ret == 0) {
        BlkIOV q;
        size_t len = (size_t)MIN(bytes, (uint64_t)n);
        iov_init_buf(&q, buf, len);
        ret = nbd_rw(img->opaque, offset, &q, true, 0);
        offset += len;
        bytes -= len;
    }
    return ret;
}

static int nbd_node_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                                  unsigned flags)
{
    NbdState *s = img->opaque;
    bool fua = (flags & BLK_REQ_FUA) && s->can_fua;
    uint32_t f = (flags & BLK_REQ_MAY_UNMAP ? 0 : LIBNBD_CMD_FLAG_NO_HOLE) |
                 (fua ? LIBNBD_CMD_FLAG_FUA : 0);

    if (!s->can_zero || ((flags & BLK_REQ_NO_FALLBACK) && !s->can_fast_zero)) {
        if (flags & BLK_REQ_NO_FALLBACK) {
            return -ENOTSUP; /* invariant 4 */
        }
        return finish_write(img, write_zeros_as_data(img, offset, bytes), flags, false);
    }
    if (flags & BLK_REQ_NO_FALLBACK) {
        f |= LIBNBD_CMD_FLAG_FAST_ZERO;
    }
    return finish_write(img, nbd_ranges(s, OP_ZERO, offset, bytes, f), flags, fua);
}

static int nbd_node_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    NbdState *s = img->opaque;
    int ret;

    if (!s->can_trim) {
        return 0; /* discard is advisory */
    }
    ret = nbd_ranges(s, OP_TRIM, offset, bytes, 0);
    blk_gen_bump(img);
    return ret;
}

typedef struct StatusReply {
    uint64_t len;
    uint32_t flags;
    bool got;
} StatusReply;

/* Runs in the poller thread; the caller reads r after its wait. */
typedef struct StatusCall {
    StatusReply *r;
    const char *context;
} StatusCall;

static int status_cb(void *opaque, const char *context, uint64_t offset,
                     uint32_t *entries, size_t nr_entries, int *error)
{
    StatusCall *c = opaque;
    StatusReply *r = c->r;

    (void)offset;
    (void)error;
    if (strcmp(context, c->context) == 0 && nr_entries >= 2 && !r->got) {
        r->len = entries[0];
        r->flags = entries[1];
        r->got = true;
    }
    return 0;
}

/* Invariant 5. */
static int nbd_node_block_status(BlkNode *img, uint64_t offset, uint64_t bytes,
                                 BlkStatus *st)
{
    NbdState *s = img->opaque;
    StatusReply r = {0};
    StatusCall call = {.r = &r, .context = s->context};
    nbd_extent_callback ext = {.callback = status_cb, .user_data = &call};
    NbdReq req = {.op = OP_STATUS, .flags = LIBNBD_CMD_FLAG_REQ_ONE, .ext = &ext};
    int ret;

    st->flags = BLK_STATUS_DATA | BLK_STATUS_ALLOCATED | BLK_STATUS_OFFSET_VALID;
    st->pnum = bytes;
    st->map = offset;
    st->file = img;
    if (!s->has_status) {
        return 0;
    }
    bytes = MIN(bytes, (uint64_t)UINT32_MAX & ~(uint64_t)511);
    req.offset = offset;
    req.bytes = bytes;
    ret = run(s, &req);
    if (ret < 0) {
        return ret;
    }
    if (!r.got || r.len == 0) {
        return blk_error(EIO, "NBD server '%s' sent no %s extent at %" PRIu64, s->name,
                         s->context, offset);
    }
    st->pnum = MIN(r.len, bytes);
    st->flags = (r.flags & LIBNBD_STATE_HOLE ? 0 : BLK_STATUS_DATA) |
                (r.flags & LIBNBD_STATE_ZERO ? BLK_STATUS_ZERO : 0);
    if (st->flags) { /* a hole that does not read as zeros: not there (QEMU) */
        st->flags |= BLK_STATUS_ALLOCATED | BLK_STATUS_OFFSET_VALID;
    }
    return 0;
}

static int64_t nbd_node_get_allocated_size(BlkNode *img)
{
    (void)img;
    return -ENOTSUP; /* qemu-img info: "disk size: unavailable" */
}

static bool nbd_node_has_zero_init(BlkNode *img)
{
    (void)img;
    return false; /* an export holds whatever it held */
}

const BlkDriver blk_nbd_driver = {
    .format_name = "nbd",
    .is_protocol = true,
    .close = nbd_node_close,
    .preadv = nbd_node_preadv,
    .pwritev = nbd_node_pwritev,
    .pwrite_zeroes = nbd_node_pwrite_zeroes,
    .pdiscard = nbd_node_pdiscard,
    .flush = nbd_node_flush,
    .block_status = nbd_node_block_status,
    .get_allocated_size = nbd_node_get_allocated_size,
    .has_zero_init = nbd_node_has_zero_init,
};

/* Invariant 1: one poller per connection, each with its wake-up eventfd. */
int blk_nbd_start_poller(NbdState *s, int i)
{
    NbdConn *c = &s->c[i];
    int err;

    if (c->efd < 0 && (c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        return blk_error(errno, "Could not open '%s': eventfd: %s", s->name,
                         g_strerror(errno));
    }
    err = pthread_create(&c->poller, NULL, poller_main, c);
    if (err) {
        return blk_error(err, "Could not open '%s': cannot start a thread: %s", s->name,
                         g_strerror(err));
    }
    c->started = true;
    return 0;
}

void blk_nbd_stop_poller(NbdConn *c)
{
    uint64_t one = 1;

    if (c->started) {
        if (write(c->efd, &one, sizeof(one)) < 0) {
            /* already signalled */
        }
        pthread_join(c->poller, NULL);
        c->started = false;
    }
}
