/*
 * api/vmstate.c: the vmstate writer and reader (savevm / loadvm): the engine
 * and its write path; the read path is api/vmstate-read.c.
 *
 * Owns: struct ApiVmstate (img->vmstate) -- the buffer that collects
 * sequential writes, the write buffers in flight, the read-ahead queue, the
 * task pool they share and the sticky error -- and the public API of
 * include/qimg/vmstate.h (in api/vmstate-api.c: positional calls, the save
 * stream, the load stream).  It never touches the image format: bytes go through the
 * driver's save_vmstate/load_vmstate, snapshots through the driver-level operations
 * (api/snapshot.c).
 *
 * A position ("pos") is an offset in the node's active vmstate area; pos 0
 * is the start of the area, which the driver puts on a cluster boundary.
 * B is the buffer size.
 *
 * Invariants (cited in the code as "invariant N"; one numbering for the
 * engine: 6 and 8 are the read path's, stated in api/vmstate-read.c):
 *  1. Buffer grid.  B = max(cluster_size, 1 MiB), or the configured size,
 *     rounded up to a multiple of the cluster size.  Buffers sit on a grid
 *     of multiples of B in position space: a buffer never crosses a
 *     multiple of B.  A full buffer covers exactly [kB, (k+1)B) and is
 *     written by one save_vmstate call as whole clusters, so the driver
 *     needs no read-modify-write and no zero-fill for it.  Only the first
 *     buffer of a run that starts off the grid and the last, partial,
 *     buffer (written at drain) are not whole.
 *  2. Order.  Writes are grouped in runs: a write that starts where the
 *     previous one ended (run_end) extends the run; any other write first
 *     submits the current buffer and waits for every write in flight, then
 *     starts a new run.  Buffers of one run cover disjoint, increasing
 *     ranges, so no write ever overtakes an older pending buffer covering
 *     the same bytes, and no two write requests in flight overlap.
 *  3. Reads see pending writes: a read that is not served from the
 *     read-ahead first submits the current buffer and waits for every
 *     write in flight.  Writes and read-ahead are never in flight together:
 *     a write drops the read-ahead (it may hold stale bytes) and a read
 *     drains the writes.
 *  4. Errors.  Drain (blk_flush, qimg_vmstate_flush, commit) submits the
 *     current buffer, waits for the pool and returns the write error at
 *     the lowest position among the buffers that failed (api/error.c
 *     invariant 1: QEMU, writing in order, meets that one; which buffer
 *     fails first is the threads' timing), with the driver's message.
 *     That error is sticky from the first failure on: every later write,
 *     read, drain and commit returns it, and nothing more is submitted,
 *     until the state is released (blk_vmstate_release at close) or the
 *     stream session that met it ends (commit, abort).  An empty or failed
 *     buffer is never submitted.  A read-ahead error is reported only to
 *     the read that needs the buffer, and is not sticky.
 *  5. Memory.  At most max_in_flight write buffers are queued or running
 *     (the pool blocks the submitter while full) plus the current buffer,
 *     which is allocated only after the previous one was handed to the
 *     pool; the read-ahead queue holds at most max_in_flight buffers and
 *     exists only while no write buffer does.  So at most
 *     (max_in_flight + 1) x B bytes of buffers are live.  Every buffer's
 *     memory is B bytes; a freed buffer's memory is kept as a spare and
 *     reused (allocating and faulting in 1 MiB per buffer halved the
 *     stream's speed), so spares plus live buffers never exceed the most
 *     buffers ever live at once, and the same bound holds.  Spares are
 *     released when B changes, when a stream session ends and at release.
 *  6. (Read-ahead: api/vmstate-read.c, the read path.)
 *  7. Stream lifetime.  An open save or load stream is registered with the
 *     state of the image it was begun on (stream).  Closing the image
 *     (blk_vmstate_release) drains the writes and invalidates the stream:
 *     it forgets the image, its state and (load from a view) closes the
 *     view; a later append, read or commit fails with EBADF ("the image was
 *     closed"), abort and end only free it.  Nothing of a stream outlives
 *     the image but the stream object itself.
 *  8. (Split reads: api/vmstate-read.c, the read path.)
 *  9. Allocation order.  Write buffers take tickets of vs->order (block/
 *     order.c) in submission order, which is position order within a run
 *     (invariant 2): the driver assigns host space in position order while
 *     the data of the buffers in flight moves in parallel (qcow2 write.c
 *     invariant 12).  So the state lies in the file in order, and a
 *     failure that depends on how much was allocated before (ENOSPC, a
 *     metadata error injected at the Nth allocation: QEMU iotest 026) hits
 *     the same buffer in every run, as in QEMU's sequential writer.  The
 *     first write error cancels the order (order.c invariant 3); it is
 *     replaced by a new one when the error is forgotten (invariant 4).
 * 10. Told once at close: the sticky error is returned to every caller of
 *     invariant 4, but the close of the handle (api_quiesce_close) returns
 *     it only if no caller was given it before -- a write whose buffer
 *     failed after the call returned -- as QEMU's synchronous writer
 *     reports a failed vmstate write once, to that write (iotest 026).
 *
 * Locking.  op_lock serialises the callers of one node's state (positional
 * calls from several threads, the stream, blk_flush) and protects
 * everything not listed below; it is held while waiting for the pool, so a
 * task never takes it.  'lock' protects what tasks touch: the sticky
 * error, read buffers' completion, the buffer counters.  Neither is held
 * while calling blk_flush() or a snapshot operation (those drain, which
 * takes op_lock).  Our own sync objects are pthread ones, which
 * ThreadSanitizer understands; the pool annotates its GMutex itself.
 */
#include "api/vmstate.h"
#include "api/api.h"

#include "aio/pool.h"
#include "qimg/vmstate.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t vs_global_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- buffers and errors ---- */

static size_t round_up_size(size_t n, size_t align)
{
    return (n + align - 1) / align * align;
}

/* Invariant 1. */
size_t vs_compute_buf_size(QimgImage *img, size_t requested)
{
    size_t cluster = img->node->cluster_size ? img->node->cluster_size : 512;
    size_t b = requested ? requested : MAX(cluster, VMSTATE_MIN_BUFFER);
    return round_up_size(b, cluster);
}

/* Free the spare blocks (invariant 5).  Caller holds vs->lock. */
static void spares_drop(ApiVmstate *vs)
{
    g_slist_free_full(g_steal_pointer(&vs->spares), free);
}

/* A buffer of cap <= B bytes at pos; its memory is B bytes, a spare when
 * there is one (invariant 5).  Caller holds op_lock. */
VmBuf *vs_buf_new(ApiVmstate *vs, uint64_t pos, size_t cap)
{
    size_t size = MAX(vs->buf_size, cap);
    VmBuf *b = g_try_new0(VmBuf, 1);
    void *mem = NULL;

    if (!b) {
        return NULL;
    }
    pthread_mutex_lock(&vs->lock);
    if (vs->spare_size != size) {
        spares_drop(vs);
        vs->spare_size = size;
    }
    if (vs->spares) {
        mem = vs->spares->data;
        vs->spares = g_slist_delete_link(vs->spares, vs->spares);
    }
    pthread_mutex_unlock(&vs->lock);
    if (!mem && posix_memalign(&mem, VMSTATE_MEM_ALIGN, size) != 0) {
        g_free(b);
        return NULL;
    }
    b->vs = vs;
    b->pos = pos;
    b->cap = cap;
    b->size = size;
    b->data = mem;
    pthread_mutex_lock(&vs->lock);
    vs->live++;
    vs->max_live = MAX(vs->max_live, vs->live); /* invariant 5 */
    pthread_mutex_unlock(&vs->lock);
    return b;
}

/* Called from tasks too: takes only vs->lock. */
void vs_buf_free(VmBuf *b)
{
    ApiVmstate *vs = b->vs;
    void *mem = b->data;

    pthread_mutex_lock(&vs->lock);
    vs->live--;
    if (b->size == vs->spare_size) {
        vs->spares = g_slist_prepend(vs->spares, g_steal_pointer(&mem));
    }
    pthread_mutex_unlock(&vs->lock);
    free(mem);
    g_free(b->msg);
    g_free(b);
}

/* Record a write error at pos (invariants 4, 9); takes ownership of msg. */
static void set_error(ApiVmstate *vs, uint64_t pos, int ret, char *msg)
{
    GError *err = g_error_new_literal(QIMG_ERROR, -ret, msg);

    g_free(msg);
    pthread_mutex_lock(&vs->lock);
    if (api_lowest_error_offer(&vs->error, pos, err) && vs->order) {
        blk_order_cancel(vs->order); /* invariant 9 */
    }
    pthread_mutex_unlock(&vs->lock);
}

/* The sticky error, recorded for the calling thread (block.h invariant 2).
 * Once a write failed, the writes still in flight end first: one of them
 * may have failed at a lower position (invariant 4).  Caller holds op_lock. */
int vs_sticky_error(ApiVmstate *vs)
{
    bool failed;
    int ret = 0;

    pthread_mutex_lock(&vs->lock);
    failed = vs->error.error != NULL;
    pthread_mutex_unlock(&vs->lock);
    if (failed && vs->pool) {
        (void)pool_wait_all(vs->pool); /* ours is authoritative (invariant 4) */
    }
    pthread_mutex_lock(&vs->lock);
    if (vs->error.error) {
        ret = blk_error(vs->error.error->code, "%s", vs->error.error->message);
        vs->error_told = true; /* invariant 10: its caller returns it */
    }
    pthread_mutex_unlock(&vs->lock);
    return ret;
}

/* Invariant 9: the order goes (a new one comes with the next write); no
 * write is in flight.  vmstate writes defer no jobs (order.c invariant 4). */
static void order_drop(ApiVmstate *vs)
{
    if (vs->order) {
        (void)blk_order_drain(vs->order);
        blk_order_free(g_steal_pointer(&vs->order));
    }
    vs->next_ticket = 0;
}

/* Invariants 4, 9: no write is in flight. */
static void clear_error(ApiVmstate *vs)
{
    pthread_mutex_lock(&vs->lock);
    api_lowest_error_clear(&vs->error);
    vs->error_told = false;
    pthread_mutex_unlock(&vs->lock);
    if (vs->pool) {
        pool_reset_error(vs->pool);
    }
    order_drop(vs);
}

/* "what at position N: <driver message or strerror>"; clears the message. */
char *vs_io_error_message(const char *what, uint64_t pos, int ret)
{
    const char *m = blk_error_message();
    char *s = g_strdup_printf("Could not %s VM state at position %" PRIu64 ": %s", what,
                              pos, m ? m : g_strerror(-ret));
    blk_error_clear();
    return s;
}

/* ---- tasks (run on pool threads; they never take op_lock) ---- */

static int write_task(void *opaque)
{
    VmBuf *b = opaque;
    ApiVmstate *vs = b->vs;
    BlkNode *node = vs->img->node;
    BlkIOV q;
    int ret;

    blk_error_clear(); /* no stale message of this worker's last task */
    iov_init_buf(&q, b->data, b->len);
    blk_order_enter(vs->order, b->ticket); /* invariant 9 */
    blk_order_mark_last();
    ret = node->drv->save_vmstate(node, b->pos, &q);
    blk_order_leave();
    if (ret < 0) {
        set_error(vs, b->pos, ret, vs_io_error_message("write", b->pos, ret));
    }
    vs_buf_free(b);
    return ret < 0 ? ret : 0;
}

/* ---- the state ---- */

ApiVmstate *vs_get(QimgImage *img, bool create)
{
    ApiVmstate *vs;

    pthread_mutex_lock(&vs_global_lock);
    vs = img->vmstate;
    if (!vs && create) {
        vs = g_new0(ApiVmstate, 1);
        vs->img = img;
        pthread_mutex_init(&vs->op_lock, NULL);
        pthread_mutex_init(&vs->lock, NULL);
        pthread_cond_init(&vs->cond, NULL);
        vs->max_in_flight = VMSTATE_DEFAULT_IN_FLIGHT;
        vs->buf_size = vs_compute_buf_size(img, 0);
        vs->limit = UINT64_MAX;
        g_queue_init(&vs->ra);
        img->vmstate = vs;
    }
    pthread_mutex_unlock(&vs_global_lock);
    return vs;
}

int vs_ensure_pool_locked(ApiVmstate *vs)
{
    if (!vs->pool) {
        vs->pool = pool_new(vs->max_in_flight);
        if (!vs->pool) {
            return blk_error(ENOMEM, "Could not start %u threads for VM state I/O",
                             vs->max_in_flight);
        }
    }
    return 0;
}

/* Hands a full or final write buffer to the pool with the next ticket
 * (invariant 9); b is gone either way. */
static int submit_write_locked(ApiVmstate *vs, VmBuf *b)
{
    uint64_t pos = b->pos;
    int ret;

    /* Invariant 4: never an empty buffer.  Invariant 5: blocks while full. */
    g_assert(b->len > 0);
    if (!vs->order) {
        vs->order = blk_order_new();
    }
    b->ticket = vs->next_ticket;
    ret = pool_submit(vs->pool, write_task, b);
    if (ret < 0) {
        /* Not queued (pool.h invariant 4), its ticket not taken.  The
         * failing task recorded its error before returning, so the sticky
         * error is already set. */
        vs_buf_free(b);
        set_error(vs, pos, ret,
                  g_strdup_printf("Could not write VM state: %s", g_strerror(-ret)));
        return vs_sticky_error(vs);
    }
    vs->next_ticket++;
    return 0;
}

/* Invariants 2-4: submit the current buffer unless an error is sticky, and
 * wait for every task. */
int vs_drain_writes_locked(ApiVmstate *vs)
{
    VmBuf *b = g_steal_pointer(&vs->cur);

    if (b) {
        if (vs_sticky_error(vs) < 0 || !vs->pool) {
            vs_buf_free(b);
        } else {
            (void)submit_write_locked(vs, b); /* its error is the sticky one */
        }
    }
    if (vs->pool) {
        (void)pool_wait_all(vs->pool); /* ours is authoritative: first by our lock */
    }
    blk_error_clear();
    return vs_sticky_error(vs);
}

int vs_write_locked(ApiVmstate *vs, uint64_t pos, const uint8_t *buf, size_t len)
{
    int ret = vs_sticky_error(vs);

    if (ret < 0 || len == 0) {
        return ret;
    }
    ret = vs_ensure_pool_locked(vs);
    if (ret < 0) {
        return ret;
    }
    if (vs->ra_active) {
        vs_ra_drop_locked(vs); /* invariant 3: stale bytes; not in flight with writes */
    }
    if (!vs->run_valid || pos != vs->run_end) {
        /* Invariant 2: a new run waits for everything older. */
        ret = vs_drain_writes_locked(vs);
        if (ret < 0) {
            return ret;
        }
        vs->run_valid = true;
        vs->run_end = pos;
    }
    while (len > 0) {
        VmBuf *b = vs->cur;
        if (!b) {
            /* Invariant 1: up to the next grid line.  Invariant 5: allocated
             * only after the previous buffer went to the pool. */
            uint64_t grid_end = (pos / vs->buf_size + 1) * vs->buf_size;
            b = vs_buf_new(vs, pos, (size_t)(grid_end - pos));
            if (!b) {
                set_error(vs, pos, -ENOMEM,
                          g_strdup_printf("Could not allocate a VM state buffer of "
                                          "%zu bytes",
                                          (size_t)(grid_end - pos)));
                return vs_sticky_error(vs);
            }
            vs->cur = b;
        }
        size_t n = MIN(len, b->cap - b->len);
        memcpy(b->data + b->len, buf, n);
        b->len += n;
        buf += n;
        len -= n;
        pos += n;
        vs->run_end = pos;
        if (b->len == b->cap) {
            vs->cur = NULL;
            ret = submit_write_locked(vs, b);
            if (ret < 0) {
                return ret;
            }
        }
    }
    return 0;
}

/* Ends a stream session: no more I/O, error forgotten (invariant 4). */
void vs_session_end(ApiVmstate *vs)
{
    pthread_mutex_lock(&vs->op_lock);
    if (vs->cur) {
        vs_buf_free(g_steal_pointer(&vs->cur)); /* aborted: not worth writing */
    }
    (void)vs_drain_writes_locked(vs);
    vs_ra_drop_locked(vs);
    vs_advise_end_locked(vs);
    clear_error(vs);
    blk_error_clear();
    pthread_mutex_lock(&vs->lock);
    spares_drop(vs);
    pthread_mutex_unlock(&vs->lock);
    vs->session = false;
    vs->limit = UINT64_MAX;
    vs->run_valid = false;
    vs->last_end = 0;
    pthread_mutex_unlock(&vs->op_lock);
}

int vs_session_claim(ApiVmstate *vs)
{
    int ret = 0;

    pthread_mutex_lock(&vs->op_lock);
    if (vs->session) {
        ret = blk_error(EBUSY, "A VM state save or load is already in progress on '%s'",
                        vs->img->node->filename);
    } else {
        vs->session = true;
    }
    pthread_mutex_unlock(&vs->op_lock);
    return ret;
}

/* ---- api.h: the handle's quiesce steps (api.h invariant 2) ---- */

/* closing: invariant 10. */
static int quiesce(QimgImage *img, bool closing)
{
    ApiVmstate *vs = vs_get(img, false);
    bool told;
    int ret;

    if (!vs) {
        return 0;
    }
    pthread_mutex_lock(&vs->op_lock);
    pthread_mutex_lock(&vs->lock);
    told = vs->error_told;
    pthread_mutex_unlock(&vs->lock);
    vs_ra_drop_locked(vs);
    ret = vs_drain_writes_locked(vs);
    pthread_mutex_unlock(&vs->op_lock);
    if (ret < 0 && closing && told) {
        blk_error_clear();
        ret = 0;
    }
    return ret;
}

int api_quiesce(QimgImage *img)
{
    return quiesce(img, false);
}

int api_quiesce_close(QimgImage *img)
{
    return quiesce(img, true);
}

void api_release(QimgImage *img)
{
    ApiVmstate *vs = vs_get(img, false);

    if (!vs) {
        return;
    }
    pthread_mutex_lock(&vs->op_lock);
    vs_ra_drop_locked(vs);
    vs_advise_end_locked(vs);
    (void)vs_drain_writes_locked(vs); /* the caller flushed first if it cared */
    pthread_mutex_unlock(&vs->op_lock);
    vs_streams_invalidate(vs); /* invariant 7 */
    pool_free(vs->pool);
    g_assert(vs->live == 0);
    spares_drop(vs);
    api_lowest_error_clear(&vs->error);
    order_drop(vs);
    pthread_cond_destroy(&vs->cond);
    pthread_mutex_destroy(&vs->lock);
    pthread_mutex_destroy(&vs->op_lock);
    pthread_mutex_lock(&vs_global_lock);
    img->vmstate = NULL;
    pthread_mutex_unlock(&vs_global_lock);
    g_free(vs);
    blk_error_clear();
}

/* ---- api/vmstate.h ---- */

void api_vmstate_get_stats(QimgImage *img, ApiVmstateStats *st)
{
    ApiVmstate *vs = vs_get(img, false);

    memset(st, 0, sizeof(*st));
    if (!vs) {
        return;
    }
    pthread_mutex_lock(&vs->op_lock);
    st->buffer_size = vs->buf_size;
    st->max_in_flight = vs->max_in_flight;
    pthread_mutex_unlock(&vs->op_lock);
    pthread_mutex_lock(&vs->lock);
    st->live_buffers = vs->live;
    st->max_live_buffers = vs->max_live;
    pthread_mutex_unlock(&vs->lock);
}
