/*
 * block/uring.c: an io_uring for O_DIRECT reads and writes of file nodes,
 * completed on a reaper thread (the asynchronous API's io_uring engine,
 * api/aio.c).
 *
 * Owns: the ring, the mutex that serialises submissions (an SQ has one
 * producer), the reaper thread that waits for completions and hands each
 * to its callback, and the test of which requests may bypass the file
 * node's own path.
 *
 * Invariants (cited as "uring.c invariant N"):
 *  1. Only requests the file node would send to the kernel unchanged go to
 *     the ring: the node is a file protocol node opened O_DIRECT, the range
 *     and every buffer are aligned (file.c invariant 1) and the range ends
 *     inside the file (no zero fill, file.c invariant 3; no write extends
 *     it, invariant 5).  A read takes no lock and changes no generation, as
 *     on the node's path.  A write does what the node's path does around
 *     the kernel's write: it is refused once a flush failed (file.c
 *     invariant 10), holds s->lock shared from before its submission until
 *     its completion (invariant 6: no read-modify-write or truncate runs
 *     meanwhile; while a writer holds it, the write goes to the node's path
 *     instead of blocking the submitter), raises the node's highest
 *     write (blk_note_write) when it is submitted, and bumps the node's
 *     write generation when it completed (invariant 9), before its callback,
 *     so that a flush submitted after the callback syncs it.
 *  2. A completion that moved fewer bytes than asked, or failed, is
 *     reported as such (-EAGAIN for short): the caller runs the request
 *     again through the node (file.c invariant 4 retries short transfers)
 *     so the error and its message come from there.
 *  3. Every submitted request gets exactly one callback, from the reaper
 *     thread or a consumer (invariant 5).  blk_uring_free() is called only
 *     with nothing in flight; it stops the reaper with a NOP whose user
 *     data is the ring itself.
 *  4. Whoever reaps -- the reaper or a consumer (invariant 5) -- takes
 *     every completion the ring has posted, one callback each, then calls
 *     batch_end once, all under cq_lock: a caller can hand a whole batch on
 *     with one lock and one wake-up (a wake-up per completion cost as much
 *     as the I/O at depth 32), and callbacks never run concurrently.
 *  5. A consumer is a thread that waits for completions itself
 *     (blk_uring_consumer_enter/reap/leave: api/aio.c's waiter polls the
 *     ring's fd), so a completion reaches the thread that waits for it
 *     without a handoff.  While a consumer is there, or has been within the
 *     last REAPER_PARK_NS, the reaper parks instead of waiting on the ring
 *     (where it would wake for every completion too); it then waits on the
 *     ring again, so a completion nobody asks for (a write holding the file
 *     lock that a synchronous call needs, say) is reaped within about
 *     2 * REAPER_PARK_NS.
 *  6. A recording node (block/record.c) over a file node takes ring
 *     requests as that file node would (invariant 1 applies to the child:
 *     its descriptor, lock, size and generation; the highest write is
 *     raised on both nodes, as blk_pwritev through the record node does).
 *     A write's completion is handed to the recording node
 *     (blk_record_ring_done, record.c invariant 5) after the child's
 *     generation was bumped and before the callback, with the result the
 *     log leaves (a log that failed fails the request: invariant 2 runs
 *     it again through the node).  Reads are not logged.
 *  7. Plug scopes (issue 30: one io_uring_enter per request was 14-17% of the
 *     CPU at depth 32).  Inside a scope a thread opened on this ring
 *     (blk_uring_plug .. blk_uring_unplug: api/aio.c runs a batch of callbacks,
 *     which resubmit, in one), a request is prepared in the SQ and held back
 *     ('held'); the scope's end submits every held request in one system call,
 *     and waits until the kernel took them: nothing stays held once the scope
 *     ended.  A request prepared outside any scope of this ring
 *     (blk_uring_plug(NULL) opens a scope of none: an allocating write,
 *     api/aio.c invariant 14), a read, or a write while URING_PLUG_MAX are
 *     held, is submitted at once with what is held, as before (held reads made
 *     read-d32 8-25% slower in every variant measured: the device idled while
 *     the batch ran).  Held requests never wait for a reap (the reverted
 *     batching did, and cost reads at depth 32) -- only for the rest of their
 *     scope, or less: any thread about to sleep in a lock of qimg first submits
 *     them all (aio/plug.h invariant 2, through the rings' registry), since a
 *     held write holds the file lock shared and a held request its fast map
 *     hold, which a sleeper may wait for.  That kick does not wait for a
 *     refusing kernel (the reap that makes room may need the sleeper's lock): a
 *     refused kick marks the ring 'stalled', and the next reap submits again.
 *  8. The ring is set up with IORING_SETUP_COOP_TASKRUN (Linux 5.19+; without
 *     it where the kernel refuses the flag).  A completion is posted to the CQ
 *     by task work of the thread that submitted it; without the flag the
 *     kernel interrupts that thread with an IPI when it is running (issue 30:
 *     at depth 32 the submitter is always running, one interruption per
 *     completion, in a VM a VM exit each), with it the work waits for the
 *     thread's next kernel entry -- its next submission or poll, in the I/O
 *     loop at once -- or the next timer tick.  A sleeping submitter is woken
 *     for it either way (an interruptible sleep: every wait of qimg's on a
 *     completion -- futex, poll -- is one; the kernel's own waits on a DIO,
 *     inode_dio_wait, end before the task work), so nothing waits on a CQE
 *     that only its own thread could post: no new hang.  Measured
 *     (alloc-d32, 20000 requests, a loaded machine): the process's CPU
 *     seconds, median, 5-19% lower in four interleaved A/Bs (4, 5, 5, 8
 *     rounds); the wall time inside that machine's noise.  TASKRUN_FLAG
 *     is not set: a reaper other than the submitter could not run the
 *     submitter's task work, only spend a system call finding that out.
 */
#include "aio/plug.h"
#include "block/block.h"
#include "block/file.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#define REAPER_PARK_NS 2000000L /* invariant 5 */
#define URING_PLUG_MAX 32u      /* invariant 7 */

/* The kernel hands a request from the submitter to the reaper, which
 * ThreadSanitizer cannot see: tell it (release at submission, acquire at
 * the completion), as aio/pool.c does for its futexes. */
#if defined(__SANITIZE_THREAD__)
#define URING_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define URING_TSAN 1
#endif
#endif
#ifdef URING_TSAN
#include <sanitizer/tsan_interface.h>
#define uring_release(p) __tsan_release(p)
#define uring_acquire(p) __tsan_acquire(p)
#else
#define uring_release(p) ((void)(p))
#define uring_acquire(p) ((void)(p))
#endif

struct BlkUring {
    struct io_uring ring;
    pthread_mutex_t sq_lock; /* invariant 3: one producer at a time */
    pthread_mutex_t cq_lock; /* invariant 4: one reaper at a time */
    pthread_t reaper;
    void (*batch_end)(void *opaque); /* invariant 4 */
    void *batch_opaque;
    pthread_mutex_t park_lock; /* invariant 5 */
    pthread_cond_t park_cond;
    unsigned consumers;    /* [park_lock] threads between enter and leave */
    uint64_t consumer_gen; /* [park_lock] bumped by each enter */
    bool quit;             /* [park_lock] blk_uring_free() asks the reaper to go */
    bool stop;             /* [cq_lock] the stop NOP was reaped (invariant 3) */
    unsigned held;         /* [sq_lock, read atomically] invariant 7 */
    bool stalled;          /* [sq_lock, read atomically] a kick was refused (inv. 7) */
    uint64_t submits;      /* atomic: system calls that handed requests over */
    BlkUring *reg_next;    /* [reg_lock] the registry (invariant 7) */
};

/* Invariant 7: every ring, for plug_kick() (aio/plug.h invariant 2). */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static BlkUring *reg_head; /* [reg_lock] */
/* Invariant 7: the ring of this thread's innermost plug scope, or NULL. */
static __thread BlkUring *tls_plug;

typedef struct UringReq {
    BlkUringDone cb;
    void *opaque;
    size_t len;
    BlkNode *wnode; /* a write's node: its lock and generation (invariant 1) */
    BlkNode *rec;   /* a write's recording node (invariant 6), or NULL */
    uint64_t offset;
    const BlkIOV *q; /* rec's: the data, alive until the callback */
} UringReq;

/* One completion (invariant 2); false for the stop NOP (invariant 3).
 * cq_lock held. */
static bool reap_one_locked(BlkUring *u, struct io_uring_cqe *cqe)
{
    void *data = io_uring_cqe_get_data(cqe);
    int res = cqe->res, ret;

    io_uring_cqe_seen(&u->ring, cqe);
    uring_acquire(data);
    if (data == u) {
        u->stop = true;
        return false;
    }
    UringReq *r = data;
    ret = res < 0 ? res : (size_t)res == r->len ? 0 : -EAGAIN;
    if (r->wnode) { /* invariant 1 */
        file_unlock(r->wnode->opaque, LOCK_SHARED);
        blk_gen_bump(r->wnode);
    }
    if (r->rec) { /* invariant 6: after the bump, before the callback */
        ret = blk_record_ring_done(r->rec, r->offset, r->q, ret);
    }
    r->cb(r->opaque, ret);
    g_free(r);
    return true;
}

/* Submit what the SQ holds.  sq_lock held.  wait: until the kernel took
 * all of it (EAGAIN/EBUSY pass as the reaper empties the CQ); else, at a
 * refusal, leave the rest held and mark the ring stalled (invariant 7).
 * Once in the SQ a request cannot be taken back, so its one callback
 * needs it submitted (invariant 3); any other error is a broken ring. */
static void submit_locked(BlkUring *u, bool wait)
{
    unsigned before = u->held, left;

    for (;;) {
        int ret = io_uring_submit(&u->ring);
        if (ret > 0) {
            __atomic_add_fetch(&u->submits, 1, __ATOMIC_RELAXED);
        }
        left = io_uring_sq_ready(&u->ring);
        if (ret >= 0 && left == 0) {
            break;
        }
        if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
            g_error("io_uring_submit: %s", g_strerror(-ret));
        }
        if (!wait) {
            __atomic_store_n(&u->stalled, true, __ATOMIC_SEQ_CST);
            break;
        }
        sched_yield();
    }
    if (left == 0) {
        __atomic_store_n(&u->stalled, false, __ATOMIC_SEQ_CST);
    }
    /* plug.h invariant 1: what the kernel took is no longer held (the
     * held ones are the oldest in the SQ; only a wait submits others) */
    left = MIN(left, before);
    __atomic_store_n(&u->held, left, __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&plug_held, before - left, __ATOMIC_SEQ_CST);
}

uint64_t blk_uring_submits(BlkUring *u)
{
    return __atomic_load_n(&u->submits, __ATOMIC_RELAXED);
}

void blk_uring_flush(BlkUring *u)
{
    if (__atomic_load_n(&u->held, __ATOMIC_SEQ_CST) == 0) {
        return;
    }
    pthread_mutex_lock(&u->sq_lock);
    submit_locked(u, true);
    pthread_mutex_unlock(&u->sq_lock);
}

BlkUring *blk_uring_plug(BlkUring *u)
{
    BlkUring *outer = tls_plug;

    tls_plug = u;
    return outer;
}

void blk_uring_unplug(BlkUring *u, BlkUring *outer)
{
    tls_plug = outer;
    blk_uring_flush(u); /* invariant 7: nothing stays held */
}

/* plug.h invariant 2: submit what every ring holds, waiting for none. */
static void uring_kick_all(void)
{
    pthread_mutex_lock(&reg_lock);
    for (BlkUring *u = reg_head; u; u = u->reg_next) {
        if (__atomic_load_n(&u->held, __ATOMIC_SEQ_CST) > 0) {
            pthread_mutex_lock(&u->sq_lock);
            submit_locked(u, false);
            pthread_mutex_unlock(&u->sq_lock);
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

/* Invariant 4: every completion posted now, then one batch_end. */
unsigned blk_uring_reap(BlkUring *u)
{
    struct io_uring_cqe *cqe;
    unsigned n = 0;

    pthread_mutex_lock(&u->cq_lock);
    while (!u->stop && io_uring_peek_cqe(&u->ring, &cqe) == 0) {
        n += reap_one_locked(u, cqe);
    }
    if (n && u->batch_end) {
        u->batch_end(u->batch_opaque);
    }
    pthread_mutex_unlock(&u->cq_lock);
    if (__atomic_load_n(&u->stalled, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&u->sq_lock); /* invariant 7: a refused kick */
        submit_locked(u, false);
        pthread_mutex_unlock(&u->sq_lock);
    }
    return n;
}

int blk_uring_fd(BlkUring *u)
{
    return u->ring.ring_fd;
}

void blk_uring_consumer_enter(BlkUring *u)
{
    pthread_mutex_lock(&u->park_lock);
    u->consumers++;
    u->consumer_gen++;
    pthread_mutex_unlock(&u->park_lock);
}

void blk_uring_consumer_leave(BlkUring *u)
{
    pthread_mutex_lock(&u->park_lock);
    u->consumers--;
    pthread_mutex_unlock(&u->park_lock);
}

/* Invariant 5: if a consumer is here or came since *gen, park until one
 * whole REAPER_PARK_NS passed with none (or blk_uring_free asks). */
static void reaper_park(BlkUring *u, uint64_t *gen)
{
    pthread_mutex_lock(&u->park_lock);
    while (!u->quit && (u->consumers > 0 || u->consumer_gen != *gen)) {
        struct timespec ts;
        *gen = u->consumer_gen;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += REAPER_PARK_NS;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&u->park_cond, &u->park_lock, &ts);
    }
    pthread_mutex_unlock(&u->park_lock);
}

static void *reaper_main(void *opaque)
{
    BlkUring *u = opaque;
    uint64_t gen = 0;

    for (;;) {
        bool stop;
        int ret;

        reaper_park(u, &gen);
        /* Wait for a completion without touching the CQ (only reapers do,
         * under cq_lock): a consumer may reap it first (invariant 4). */
        struct pollfd pfd = {.fd = u->ring.ring_fd, .events = POLLIN};
        ret = poll(&pfd, 1, -1);
        if (ret < 0 && errno == EINTR) {
            continue;
        }
        if (ret < 0) {
            g_error("poll on the io_uring: %s", g_strerror(errno)); /* cannot recover */
        }
        blk_uring_reap(u);
        pthread_mutex_lock(&u->cq_lock);
        stop = u->stop;
        pthread_mutex_unlock(&u->cq_lock);
        if (stop) {
            return NULL; /* invariant 3: the stop NOP */
        }
    }
}

static void uring_destroy_locks(BlkUring *u)
{
    pthread_mutex_destroy(&u->sq_lock);
    pthread_mutex_destroy(&u->cq_lock);
    pthread_mutex_destroy(&u->park_lock);
    pthread_cond_destroy(&u->park_cond);
}

BlkUring *blk_uring_new(unsigned entries, void (*batch_end)(void *opaque),
                        void *batch_opaque, int *err)
{
    BlkUring *u = g_new0(BlkUring, 1);
    /* invariant 8 */
    int ret = io_uring_queue_init(entries, &u->ring, IORING_SETUP_COOP_TASKRUN);

    if (ret == -EINVAL) {
        ret = io_uring_queue_init(entries, &u->ring, 0); /* before Linux 5.19 */
    }

    u->batch_end = batch_end;
    u->batch_opaque = batch_opaque;
    if (ret < 0) {
        *err = -ret;
        g_free(u);
        return NULL;
    }
    pthread_mutex_init(&u->sq_lock, NULL);
    pthread_mutex_init(&u->cq_lock, NULL);
    pthread_mutex_init(&u->park_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* reaper_park's clock */
    pthread_cond_init(&u->park_cond, &ca);
    pthread_condattr_destroy(&ca);
    ret = pthread_create(&u->reaper, NULL, reaper_main, u);
    if (ret != 0) {
        *err = ret;
        io_uring_queue_exit(&u->ring);
        uring_destroy_locks(u);
        g_free(u);
        return NULL;
    }
    pthread_mutex_lock(&reg_lock); /* invariant 7 */
    u->reg_next = reg_head;
    reg_head = u;
    plug_set_kick(uring_kick_all);
    pthread_mutex_unlock(&reg_lock);
    return u;
}

/* Get an SQE, submitting what is queued when the SQ is full.  Lock held. */
static struct io_uring_sqe *get_sqe_locked(BlkUring *u)
{
    struct io_uring_sqe *sqe;

    while (!(sqe = io_uring_get_sqe(&u->ring))) {
        submit_locked(u, true); /* what is held, too (invariant 7) */
    }
    return sqe;
}

void blk_uring_free(BlkUring *u)
{
    struct io_uring_sqe *sqe;

    if (!u) {
        return;
    }
    pthread_mutex_lock(&reg_lock); /* invariant 7: no kick finds it now */
    for (BlkUring **p = &reg_head;; p = &(*p)->reg_next) {
        if (*p == u) {
            *p = u->reg_next;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    pthread_mutex_lock(&u->sq_lock);
    sqe = get_sqe_locked(u);
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data(sqe, u);
    uring_release(u);
    submit_locked(u, true);
    pthread_mutex_unlock(&u->sq_lock);
    pthread_mutex_lock(&u->park_lock); /* invariant 5: unpark it for the NOP */
    u->quit = true;
    pthread_cond_signal(&u->park_cond);
    pthread_mutex_unlock(&u->park_lock);
    pthread_join(u->reaper, NULL);
    io_uring_queue_exit(&u->ring);
    uring_destroy_locks(u);
    g_free(u);
}

/* Invariant 6: the file node a ring request on node goes to (node itself,
 * or a recording node's child), or NULL. */
static BlkNode *ring_file(BlkNode *node)
{
    BlkNode *file = blk_is_record_node(node) ? node->filtered : node;
    return file->drv == &blk_file_driver ? file : NULL;
}

bool blk_uring_node_ok(BlkNode *node)
{
    return ring_file(node) != NULL;
}

/* Invariant 1: the node's own path would hand this range to the kernel as
 * it is. */
static bool uring_can(BlkNode *node, uint64_t offset, const BlkIOV *q)
{
    BlkNode *file = ring_file(node);
    const FileState *s;
    uint64_t end;

    if (!file || q->niov > IOV_MAX) {
        return false;
    }
    s = file->opaque;
    return s->direct && q->size > 0 &&
           file_qiov_aligned(q, offset, file->request_alignment) &&
           !__builtin_add_overflow(offset, q->size, &end) && end <= file_size_get(file);
}

bool blk_uring_can_read(BlkNode *node, uint64_t offset, const BlkIOV *q)
{
    return uring_can(node, offset, q);
}

bool blk_uring_can_write(BlkNode *node, uint64_t offset, const BlkIOV *q)
{
    BlkNode *file = ring_file(node); /* invariant 6 */

    return file && uring_can(node, offset, q) && !node->read_only && !file->read_only &&
           !((const FileState *)file->opaque)->read_only;
}

static int uring_submit(BlkUring *u, BlkNode *node, bool write, uint64_t offset,
                        const BlkIOV *q, BlkUringDone cb, void *opaque)
{
    BlkNode *file = ring_file(node); /* invariant 6 */
    FileState *s;
    UringReq *r;
    struct io_uring_sqe *sqe;

    if (!file) {
        return -EAGAIN;
    }
    s = file->opaque;
    if (write) { /* invariant 1 */
        if (!file_lock_try_shared(s)) {
            return -EAGAIN;
        }
        if (__atomic_load_n(&s->flush_error, __ATOMIC_ACQUIRE) != 0 ||
            offset + q->size > file_size_get(file)) {
            file_unlock(s, LOCK_SHARED);
            return -EAGAIN; /* the node's path says why, or extends the file */
        }
    }
    r = g_new(UringReq, 1);
    r->cb = cb;
    r->opaque = opaque;
    r->len = q->size;
    r->wnode = write ? file : NULL;
    r->rec = write && file != node ? node : NULL;
    r->offset = offset;
    r->q = q;
    if (write) {
        blk_note_write(file, offset + q->size); /* as blk_pwritev does */
        if (r->rec) {
            blk_note_write(node, offset + q->size); /* invariant 6 */
        }
    }
    pthread_mutex_lock(&u->sq_lock);
    sqe = get_sqe_locked(u);
    if (write) {
        io_uring_prep_writev(sqe, s->fd, q->iov, (unsigned)q->niov, offset);
    } else {
        io_uring_prep_readv(sqe, s->fd, q->iov, (unsigned)q->niov, offset);
    }
    io_uring_sqe_set_data(sqe, r);
    uring_release(r);
    if (write && tls_plug == u && u->held < URING_PLUG_MAX) { /* invariant 7 */
        __atomic_add_fetch(&plug_held, 1, __ATOMIC_SEQ_CST);  /* plug.h inv. 1 */
        __atomic_store_n(&u->held, u->held + 1, __ATOMIC_SEQ_CST);
    } else {
        submit_locked(u, true); /* with what is held (invariant 7) */
    }
    pthread_mutex_unlock(&u->sq_lock);
    return 0;
}

int blk_uring_readv(BlkUring *u, BlkNode *node, uint64_t offset, const BlkIOV *q,
                    BlkUringDone cb, void *opaque)
{
    return uring_submit(u, node, false, offset, q, cb, opaque);
}

int blk_uring_writev(BlkUring *u, BlkNode *node, uint64_t offset, const BlkIOV *q,
                     BlkUringDone cb, void *opaque)
{
    return uring_submit(u, node, true, offset, q, cb, opaque);
}
