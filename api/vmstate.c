/*
 * block/vmstate.c: the vmstate writer and reader (savevm / loadvm).
 *
 * Owns: struct ApiVmstate (img->vmstate) -- the buffer that collects
 * sequential writes, the write buffers in flight, the read-ahead queue, the
 * task pool they share and the sticky error -- and the public API of
 * include/qimg/vmstate.h: positional calls, the save stream, the load
 * stream.  It never touches the image format: bytes go through the
 * driver's save_vmstate/load_vmstate, snapshots through block/snapshot.c.
 *
 * A position ("pos") is an offset in the node's active vmstate area; pos 0
 * is the start of the area, which the driver puts on a cluster boundary.
 * B is the buffer size.
 *
 * Invariants (cited in the code as "invariant N"):
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
 *     current buffer, waits for the pool and returns the first write error,
 *     with the driver's message.  That error is sticky: every later write,
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
 *  6. Read-ahead starts at a read at pos 0 or where the previous read
 *     ended, prefetches up to max_in_flight buffers on the grid of
 *     invariant 1, and never past the state size when it is known (the
 *     load stream's vm_state_size).  Any other read drops the read-ahead,
 *     after waiting for its tasks, and reads directly.
 *  7. Stream lifetime.  An open save or load stream is registered with the
 *     state of the image it was begun on (stream).  Closing the image
 *     (blk_vmstate_release) drains the writes and invalidates the stream:
 *     it forgets the image, its state and (load from a view) closes the
 *     view; a later append, read or commit fails with EBADF ("the image was
 *     closed"), abort and end only free it.  Nothing of a stream outlives
 *     the image but the stream object itself.
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

#define VMSTATE_DEFAULT_IN_FLIGHT 8
#define VMSTATE_MAX_IN_FLIGHT 64
#define VMSTATE_MIN_BUFFER ((size_t)1 << 20)
#define VMSTATE_MAX_BUFFER ((size_t)256 << 20)
#define VMSTATE_MEM_ALIGN 4096

typedef struct ApiVmstate ApiVmstate;

typedef struct VmBuf {
    ApiVmstate *vs;
    uint64_t pos; /* position of data[0] */
    size_t len;   /* bytes held (write) or to read (read-ahead) */
    size_t cap;   /* bytes up to the grid line (invariant 1) */
    size_t size;  /* bytes allocated at data, >= cap (invariant 5) */
    uint8_t *data;
    /* read-ahead only; under vs->lock */
    bool done;
    int ret;
    char *msg;
} VmBuf;

struct ApiVmstate {
    QimgImage *img; /* immutable */

    pthread_mutex_t op_lock;
    /* --- under op_lock --- */
    Pool *pool; /* created at the first I/O */
    unsigned max_in_flight;
    size_t buf_size;         /* B */
    size_t buf_size_request; /* as configured (0: default) */
    VmBuf *cur;              /* collects the current run's bytes, or NULL */
    bool run_valid;
    uint64_t run_end; /* where the current run ends (invariant 2) */
    bool ra_active;
    GQueue ra;                    /* read-ahead buffers in position order (invariant 6) */
    uint64_t ra_pos;              /* next position the reader wants; inside ra's head */
    uint64_t ra_next;             /* next position to prefetch */
    uint64_t last_end;            /* end of the previous read */
    uint64_t limit;               /* state size, or UINT64_MAX when unknown */
    bool session;                 /* a save or load stream owns the state */
    struct QimgVmstateSave *save; /* the open streams begun here (invariant 7) */
    struct QimgVmstateLoad *load;

    pthread_mutex_t lock;
    pthread_cond_t cond; /* a read-ahead buffer completed */
    /* --- under lock --- */
    int error; /* sticky first write error (invariant 4) */
    char *error_msg;
    unsigned live, max_live; /* buffers allocated now / at most (invariant 5) */
    GSList *spares;          /* B-byte blocks of freed buffers (invariant 5) */
    size_t spare_size;       /* their size */
};

static pthread_mutex_t vs_global_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- buffers and errors ---- */

static size_t round_up_size(size_t n, size_t align)
{
    return (n + align - 1) / align * align;
}

/* Invariant 1. */
static size_t compute_buf_size(QimgImage *img, size_t requested)
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
static VmBuf *buf_new(ApiVmstate *vs, uint64_t pos, size_t cap)
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
static void buf_free(VmBuf *b)
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

/* Record the first error (invariant 4); takes ownership of msg. */
static void set_error(ApiVmstate *vs, int ret, char *msg)
{
    pthread_mutex_lock(&vs->lock);
    if (vs->error == 0) {
        vs->error = ret;
        vs->error_msg = msg;
        msg = NULL;
    }
    pthread_mutex_unlock(&vs->lock);
    g_free(msg);
}

/* The sticky error, recorded for the calling thread (block.h invariant 2). */
static int sticky_error(ApiVmstate *vs)
{
    int ret;

    pthread_mutex_lock(&vs->lock);
    ret = vs->error;
    if (ret < 0) {
        blk_error(-ret, "%s", vs->error_msg);
    }
    pthread_mutex_unlock(&vs->lock);
    return ret;
}

static void clear_error(ApiVmstate *vs)
{
    pthread_mutex_lock(&vs->lock);
    vs->error = 0;
    g_free(vs->error_msg);
    vs->error_msg = NULL;
    pthread_mutex_unlock(&vs->lock);
    if (vs->pool) {
        pool_reset_error(vs->pool);
    }
}

/* "what at position N: <driver message or strerror>"; clears the message. */
static char *io_error_message(const char *what, uint64_t pos, int ret)
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
    ret = node->drv->save_vmstate(node, b->pos, &q);
    if (ret < 0) {
        set_error(vs, ret, io_error_message("write", b->pos, ret));
    }
    buf_free(b);
    return ret < 0 ? ret : 0;
}

/* Read-ahead errors stay with their buffer (invariant 4): always returns 0. */
static int read_task(void *opaque)
{
    VmBuf *b = opaque;
    ApiVmstate *vs = b->vs;
    BlkNode *node = vs->img->node;
    char *msg = NULL;
    BlkIOV q;
    int ret;

    blk_error_clear();
    iov_init_buf(&q, b->data, b->len);
    ret = node->drv->load_vmstate(node, b->pos, &q);
    if (ret < 0) {
        msg = io_error_message("read", b->pos, ret);
    }
    pthread_mutex_lock(&vs->lock);
    b->ret = ret < 0 ? ret : 0;
    b->msg = msg;
    b->done = true;
    pthread_cond_broadcast(&vs->cond);
    pthread_mutex_unlock(&vs->lock);
    return 0; /* b belongs to the read-ahead queue again */
}

/* ---- the state ---- */

static ApiVmstate *vs_get(QimgImage *img, bool create)
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
        vs->buf_size = compute_buf_size(img, 0);
        vs->limit = UINT64_MAX;
        g_queue_init(&vs->ra);
        img->vmstate = vs;
    }
    pthread_mutex_unlock(&vs_global_lock);
    return vs;
}

static int ensure_pool_locked(ApiVmstate *vs)
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

static void wait_done(ApiVmstate *vs, VmBuf *b)
{
    pthread_mutex_lock(&vs->lock);
    while (!b->done) {
        pthread_cond_wait(&vs->cond, &vs->lock);
    }
    pthread_mutex_unlock(&vs->lock);
}

/* Invariant 6: wait for every read-ahead task, then free its buffer. */
static void ra_drop_locked(ApiVmstate *vs)
{
    VmBuf *b;

    while ((b = g_queue_pop_head(&vs->ra)) != NULL) {
        wait_done(vs, b);
        buf_free(b);
    }
    vs->ra_active = false;
}

/* Hands a full or final write buffer to the pool; b is gone either way. */
static int submit_write_locked(ApiVmstate *vs, VmBuf *b)
{
    int ret;

    /* Invariant 4: never an empty buffer.  Invariant 5: blocks while full. */
    g_assert(b->len > 0);
    ret = pool_submit(vs->pool, write_task, b);
    if (ret < 0) {
        /* Not queued (pool.h invariant 4).  The failing task recorded its
         * error before returning, so the sticky error is already set. */
        buf_free(b);
        set_error(vs, ret,
                  g_strdup_printf("Could not write VM state: %s", g_strerror(-ret)));
        return sticky_error(vs);
    }
    return 0;
}

/* Invariants 2-4: submit the current buffer unless an error is sticky, and
 * wait for every task. */
static int drain_writes_locked(ApiVmstate *vs)
{
    VmBuf *b = g_steal_pointer(&vs->cur);

    if (b) {
        if (sticky_error(vs) < 0 || !vs->pool) {
            buf_free(b);
        } else {
            (void)submit_write_locked(vs, b); /* its error is the sticky one */
        }
    }
    if (vs->pool) {
        (void)pool_wait_all(vs->pool); /* ours is authoritative: first by our lock */
    }
    blk_error_clear();
    return sticky_error(vs);
}

static int vm_write_locked(ApiVmstate *vs, uint64_t pos, const uint8_t *buf, size_t len)
{
    int ret = sticky_error(vs);

    if (ret < 0 || len == 0) {
        return ret;
    }
    ret = ensure_pool_locked(vs);
    if (ret < 0) {
        return ret;
    }
    if (vs->ra_active) {
        ra_drop_locked(vs); /* invariant 3: stale bytes; not in flight with writes */
    }
    if (!vs->run_valid || pos != vs->run_end) {
        /* Invariant 2: a new run waits for everything older. */
        ret = drain_writes_locked(vs);
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
            b = buf_new(vs, pos, (size_t)(grid_end - pos));
            if (!b) {
                set_error(vs, -ENOMEM,
                          g_strdup_printf("Could not allocate a VM state buffer of "
                                          "%zu bytes",
                                          (size_t)(grid_end - pos)));
                return sticky_error(vs);
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

static int direct_read(ApiVmstate *vs, uint64_t pos, uint8_t *buf, size_t len)
{
    BlkNode *node = vs->img->node;
    BlkIOV q;
    int ret;

    iov_init_buf(&q, buf, len);
    ret = node->drv->load_vmstate(node, pos, &q);
    if (ret < 0) {
        g_autofree char *msg = io_error_message("read", pos, ret);
        return blk_error(-ret, "%s", msg);
    }
    return 0;
}

/* Invariants 5, 6: keep up to max_in_flight buffers prefetched, up to limit. */
static void ra_fill_locked(ApiVmstate *vs)
{
    while (g_queue_get_length(&vs->ra) < vs->max_in_flight && vs->ra_next < vs->limit) {
        uint64_t grid_end = (vs->ra_next / vs->buf_size + 1) * vs->buf_size;
        uint64_t end = MIN(grid_end, vs->limit);
        VmBuf *b = buf_new(vs, vs->ra_next, (size_t)(end - vs->ra_next));
        if (!b) {
            return; /* read-ahead is an optimisation; the reader reads directly */
        }
        b->len = b->cap;
        if (pool_submit(vs->pool, read_task, b) < 0) {
            buf_free(b);
            return;
        }
        g_queue_push_tail(&vs->ra, b);
        vs->ra_next = end;
    }
}

static int ra_read_locked(ApiVmstate *vs, uint64_t pos, uint8_t *buf, size_t len)
{
    int ret;

    g_assert(pos == vs->ra_pos);
    ra_fill_locked(vs);
    while (len > 0) {
        VmBuf *b = g_queue_peek_head(&vs->ra);
        if (!b) {
            /* Past the prefetch bound (or prefetch failed): read directly. */
            ra_drop_locked(vs);
            return direct_read(vs, pos, buf, len);
        }
        g_assert(b->pos <= pos && pos < b->pos + b->len);
        wait_done(vs, b);
        if (b->ret < 0) {
            ret = blk_error(-b->ret, "%s", b->msg);
            ra_drop_locked(vs);
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
            buf_free(b);
            ra_fill_locked(vs);
        }
    }
    return 0;
}

static int vm_read_locked(ApiVmstate *vs, uint64_t pos, uint8_t *buf, size_t len)
{
    int ret = sticky_error(vs);

    if (ret < 0 || len == 0) {
        return ret;
    }
    ret = ensure_pool_locked(vs);
    if (ret < 0) {
        return ret;
    }
    if (!vs->ra_active) {
        ret = drain_writes_locked(vs); /* invariant 3 */
        if (ret < 0) {
            return ret;
        }
    }
    if (!vs->ra_active || pos != vs->ra_pos) {
        ra_drop_locked(vs);
        if ((pos == 0 || pos == vs->last_end) && pos < vs->limit) { /* invariant 6 */
            vs->ra_active = true;
            vs->ra_pos = pos;
            vs->ra_next = pos;
        }
    }
    ret = vs->ra_active ? ra_read_locked(vs, pos, buf, len)
                        : direct_read(vs, pos, buf, len);
    vs->last_end = pos + len;
    return ret;
}

/* Ends a stream session: no more I/O, error forgotten (invariant 4). */
static void session_end(ApiVmstate *vs)
{
    pthread_mutex_lock(&vs->op_lock);
    if (vs->cur) {
        buf_free(g_steal_pointer(&vs->cur)); /* aborted: not worth writing */
    }
    (void)drain_writes_locked(vs);
    ra_drop_locked(vs);
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

static int session_claim(ApiVmstate *vs)
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

/* Invariant 7 (below the stream structs). */
static void streams_invalidate(ApiVmstate *vs);

/* ---- api.h: the handle's quiesce steps (api.h invariant 2) ---- */

int api_quiesce(QimgImage *img)
{
    ApiVmstate *vs = vs_get(img, false);
    int ret;

    if (!vs) {
        return 0;
    }
    pthread_mutex_lock(&vs->op_lock);
    ra_drop_locked(vs);
    ret = drain_writes_locked(vs);
    pthread_mutex_unlock(&vs->op_lock);
    return ret;
}

void api_release(QimgImage *img)
{
    ApiVmstate *vs = vs_get(img, false);

    if (!vs) {
        return;
    }
    pthread_mutex_lock(&vs->op_lock);
    ra_drop_locked(vs);
    (void)drain_writes_locked(vs); /* the caller flushed first if it cared */
    pthread_mutex_unlock(&vs->op_lock);
    streams_invalidate(vs); /* invariant 7 */
    pool_free(vs->pool);
    g_assert(vs->live == 0);
    spares_drop(vs);
    g_free(vs->error_msg);
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

/* ---- public API: positional ---- */

static bool check_range(QimgImage *img, uint64_t pos, size_t len, GError **error)
{
    uint64_t end;

    if (__builtin_add_overflow(pos, (uint64_t)len, &end) || end > INT64_MAX) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "VM state request at position %" PRIu64 " of %zu bytes is out of "
                    "range",
                    pos, len);
        return false;
    }
    return true;
}

static bool check_vmstate_ops(QimgImage *img, bool write, GError **error)
{
    BlkNode *node = img->node;

    if (!node->drv->save_vmstate || !node->drv->load_vmstate) {
        g_set_error(error, QIMG_ERROR, ENOTSUP, "Format '%s' does not support VM state",
                    node->drv->format_name);
        return false;
    }
    if (write && node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only", node->filename);
        return false;
    }
    return true;
}

gboolean qimg_vmstate_pwrite(QimgImage *img, uint64_t pos, const void *buf, size_t len,
                             GError **error)
{
    g_return_val_if_fail(img && (buf || len == 0), FALSE);
    if (!check_vmstate_ops(img, true, error) || !check_range(img, pos, len, error)) {
        return FALSE;
    }
    ApiVmstate *vs = vs_get(img, true);
    blk_error_clear();
    pthread_mutex_lock(&vs->op_lock);
    int ret = vm_write_locked(vs, pos, buf, len);
    pthread_mutex_unlock(&vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_vmstate_pread(QimgImage *img, uint64_t pos, void *buf, size_t len,
                            GError **error)
{
    g_return_val_if_fail(img && (buf || len == 0), FALSE);
    if (!check_vmstate_ops(img, false, error) || !check_range(img, pos, len, error)) {
        return FALSE;
    }
    ApiVmstate *vs = vs_get(img, true);
    blk_error_clear();
    pthread_mutex_lock(&vs->op_lock);
    int ret = vm_read_locked(vs, pos, buf, len);
    pthread_mutex_unlock(&vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_vmstate_flush(QimgImage *img, GError **error)
{
    g_return_val_if_fail(img, FALSE);
    blk_error_clear();
    int ret = api_quiesce(img); /* invariant 4 */
    if (ret == 0) {
        ret = blk_flush(img->node);
    }
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_vmstate_configure(QimgImage *img, const QimgVmstateOptions *opts,
                                GError **error)
{
    QimgVmstateOptions in;

    g_return_val_if_fail(img && opts, FALSE);
    if (!api_struct_in(&in, sizeof(in), opts, "QimgVmstateOptions", error)) {
        return FALSE;
    }
    opts = &in;
    unsigned max = opts->max_in_flight ? opts->max_in_flight : VMSTATE_DEFAULT_IN_FLIGHT;
    int ret = 0;

    if (max > VMSTATE_MAX_IN_FLIGHT) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "VM state max_in_flight must be between 1 and %d (got %u)",
                    VMSTATE_MAX_IN_FLIGHT, max);
        return FALSE;
    }
    if (opts->buffer_size > VMSTATE_MAX_BUFFER) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "VM state buffer size must be at most %zu bytes (got %zu)",
                    VMSTATE_MAX_BUFFER, opts->buffer_size);
        return FALSE;
    }
    ApiVmstate *vs = vs_get(img, true);
    blk_error_clear();
    pthread_mutex_lock(&vs->op_lock);
    if (vs->session) {
        ret = blk_error(EBUSY,
                        "Cannot reconfigure VM state I/O of '%s' while a save or "
                        "load is in progress",
                        img->node->filename);
        goto out;
    }
    ra_drop_locked(vs);
    ret = drain_writes_locked(vs);
    if (ret < 0) {
        goto out;
    }
    if (vs->pool && pool_max_in_flight(vs->pool) != max) {
        pool_free(vs->pool);
        vs->pool = NULL; /* recreated at the next I/O */
    }
    vs->max_in_flight = max;
    vs->buf_size_request = opts->buffer_size;
    vs->buf_size = compute_buf_size(img, opts->buffer_size);
out:
    pthread_mutex_unlock(&vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

/* ---- public API: the save stream ---- */

struct QimgVmstateSave {
    QimgImage *img; /* NULL once the image was closed (invariant 7) */
    ApiVmstate *vs;
    QimgSnapshotParams params;
    char *name;
    uint64_t size; /* bytes appended */
};

/* Invariant 7: EBADF for a stream whose image was closed. */
static bool stream_alive(const void *img, GError **error)
{
    if (!img) {
        g_set_error(error, QIMG_ERROR, EBADF,
                    "The vmstate stream is no longer usable: the image was closed");
        return false;
    }
    return true;
}

/* The driver's snapshot list (BlkSnapshotInfo), or NULL with error set. */
static GArray *snapshot_list(QimgImage *img, GError **error)
{
    BlkNode *node = img->node;
    GArray *list;

    if (!node->drv->snapshot_list) {
        return g_array_new(FALSE, TRUE, sizeof(BlkSnapshotInfo));
    }
    blk_error_clear();
    list = node->drv->snapshot_list(node);
    if (!list) {
        blk_error_propagate(error, -EIO, "Could not list the snapshots");
    }
    return list;
}

/* 1 if a snapshot is called name, 0 if not, -1 with error set. */
static int snapshot_name_exists(QimgImage *img, const char *name, GError **error)
{
    GArray *list = snapshot_list(img, error);
    int found = 0;

    if (!list) {
        return -1;
    }
    for (guint i = 0; i < list->len; i++) {
        const char *n = g_array_index(list, BlkSnapshotInfo, i).name;
        found |= n && strcmp(n, name) == 0;
    }
    blk_snapshot_list_free(list);
    return found;
}

QimgVmstateSave *qimg_vmstate_save_begin(QimgImage *img, const QimgSnapshotParams *params,
                                         GError **error)
{
    QimgSnapshotParams in;
    int ret;

    g_return_val_if_fail(img, NULL);
    if (!api_snapshot_params_in(&in, params, error)) {
        return NULL;
    }
    params = &in;
    if (!img->node->drv->save_vmstate || !img->node->drv->snapshot_create) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Format '%s' does not support internal snapshots",
                    img->node->drv->format_name);
        return NULL;
    }
    if (img->node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only",
                    img->node->filename);
        return NULL;
    }
    ret = snapshot_name_exists(img, params->name, error);
    if (ret != 0) {
        if (ret > 0) {
            g_set_error(error, QIMG_ERROR, EEXIST, "Snapshot '%s' already exists",
                        params->name);
        }
        return NULL;
    }
    ApiVmstate *vs = vs_get(img, true);
    blk_error_clear();
    ret = session_claim(vs);
    if (ret == 0) {
        /* Earlier positional writes land first, or their error is reported. */
        pthread_mutex_lock(&vs->op_lock);
        ra_drop_locked(vs);
        ret = drain_writes_locked(vs);
        vs->run_valid = false;
        pthread_mutex_unlock(&vs->op_lock);
        if (ret < 0) {
            pthread_mutex_lock(&vs->op_lock);
            vs->session = false; /* the error stays sticky: it was not ours */
            pthread_mutex_unlock(&vs->op_lock);
        }
    }
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return NULL;
    }
    QimgVmstateSave *s = g_new0(QimgVmstateSave, 1);
    s->img = img;
    s->vs = vs;
    s->params = *params;
    s->name = g_strdup(params->name);
    s->params.name = s->name;
    pthread_mutex_lock(&vs->op_lock);
    vs->save = s; /* invariant 7 */
    pthread_mutex_unlock(&vs->op_lock);
    return s;
}

gboolean qimg_vmstate_save_append(QimgVmstateSave *s, const void *buf, size_t len,
                                  GError **error)
{
    g_return_val_if_fail(s && (buf || len == 0), FALSE);
    if (!stream_alive(s->img, error) || !check_range(s->img, s->size, len, error)) {
        return FALSE;
    }
    blk_error_clear();
    pthread_mutex_lock(&s->vs->op_lock);
    int ret = vm_write_locked(s->vs, s->size, buf, len);
    pthread_mutex_unlock(&s->vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    s->size += len;
    return TRUE;
}

uint64_t qimg_vmstate_save_size(QimgVmstateSave *s)
{
    g_return_val_if_fail(s, 0);
    return s->size;
}

static void save_free(QimgVmstateSave *s)
{
    if (s->vs) {
        pthread_mutex_lock(&s->vs->op_lock);
        s->vs->save = NULL;
        pthread_mutex_unlock(&s->vs->op_lock);
        session_end(s->vs);
    }
    g_free(s->name);
    g_free(s);
}

char *qimg_vmstate_save_commit(QimgVmstateSave *s, GError **error)
{
    char *id = NULL;
    int ret;

    g_return_val_if_fail(s, NULL);
    if (!stream_alive(s->img, error)) {
        save_free(s);
        return NULL;
    }
    blk_error_clear();
    /* Invariant 4, then the driver's metadata (QEMU: qemu_fclose -> bdrv_flush). */
    ret = api_quiesce(s->img);
    if (ret == 0) {
        ret = blk_flush(s->img->node);
    }
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
    } else {
        /* the driver-level operation: the writer drained itself */
        BlkSnapshotInfo sn = {
            .name = (char *)s->params.name,
            .vm_state_size = s->size,
            .date_sec = s->params.date_sec,
            .date_nsec = s->params.date_nsec,
            .vm_clock_nsec = s->params.vm_clock_nsec,
            .icount = api_snapshot_icount(&s->params),
        };
        id = api_snapshot_create(s->img, &sn, error);
    }
    save_free(s);
    return id;
}

void qimg_vmstate_save_abort(QimgVmstateSave *s)
{
    if (s) {
        save_free(s);
    }
}

/* ---- public API: the load stream ---- */

struct QimgVmstateLoad {
    QimgImage *img;     /* NULL once the image was closed (invariant 7) */
    QimgImage *node;    /* img (apply) or view */
    QimgImage *view;    /* owned, or NULL */
    ApiVmstate *vs;     /* node's */
    ApiVmstate *img_vs; /* img's, where the stream is registered */
    uint64_t size;
    uint64_t pos;
};

/* A read-only view of snapshot_id through the normal open path (whatever
 * driver img has: tests register their own, api.h). */
static QimgImage *open_view(QimgImage *img, const char *snapshot_id, GError **error)
{
    /* A second node on the file img holds: img's locks already say what this
     * process does with it, so the view shares everything (block/lock.c). */
    BlkOpenOptions o = {
        .format = img->node->drv->format_name,
        .read_only = true,
        .snapshot = snapshot_id,
        .cache = img->node->cache,
        .no_backing = img->node->opts.no_backing,
        .force_share = true,
    };
    BlkNode *node = api_open_node(img->node->filename, &o, NULL, error);
    return node ? api_image_new(node) : NULL;
}

/* QEMU's order: ID first, then name (blk_snapshot_find).  Fills *out
 * (strings owned by the caller). */
static bool find_snapshot(QimgImage *img, const char *id_or_name, BlkSnapshotInfo *out)
{
    GArray *list = snapshot_list(img, NULL);
    int found = list ? blk_snapshot_find(list, id_or_name) : -1;

    blk_error_clear();
    if (found >= 0) {
        BlkSnapshotInfo *sn = &g_array_index(list, BlkSnapshotInfo, found);
        *out = *sn;
        sn->id = NULL; /* stolen */
        sn->name = NULL;
    }
    blk_snapshot_list_free(list);
    return found >= 0;
}

QimgVmstateLoad *qimg_vmstate_load_begin(QimgImage *img, const char *id_or_name,
                                         bool apply, GError **error)
{
    BlkSnapshotInfo sn = {0};
    QimgImage *view = NULL, *node = img;
    ApiVmstate *img_vs, *vs;
    int ret;

    g_return_val_if_fail(img && id_or_name, NULL);
    const BlkDriver *drv = img->node->drv;
    if (!drv->load_vmstate || !drv->snapshot_list || (apply && !drv->snapshot_goto)) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Format '%s' does not support internal snapshots", drv->format_name);
        return NULL;
    }
    if (!find_snapshot(img, id_or_name, &sn)) {
        g_set_error(error, QIMG_ERROR, ENOENT, "Snapshot '%s' does not exist",
                    id_or_name);
        return NULL;
    }
    g_autofree char *id = sn.id;
    g_free(sn.name);
    if (sn.vm_state_size == 0) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "This is a disk-only snapshot. Revert to it offline using qemu-img");
        return NULL;
    }

    img_vs = vs_get(img, true);
    blk_error_clear();
    if (apply) {
        /* Claimed before the disk changes, so a busy image is left alone. */
        ret = session_claim(img_vs);
        if (ret < 0) {
            blk_error_propagate(error, ret, NULL);
            return NULL;
        }
        ret = api_quiesce(img); /* api.h invariant 2 */
        if (ret < 0) {
            blk_error_propagate(error, ret, NULL);
        } else {
            ret = api_snapshot_goto(img, id, error);
        }
        if (ret < 0) {
            pthread_mutex_lock(&img_vs->op_lock);
            img_vs->session = false;
            pthread_mutex_unlock(&img_vs->op_lock);
            return NULL;
        }
        vs = img_vs;
    } else {
        /* The view reads the file: what is buffered or cached must be there. */
        ret = api_quiesce(img);
        if (ret == 0) {
            ret = blk_flush(img->node);
        }
        if (ret < 0) {
            blk_error_propagate(error, ret, NULL);
            return NULL;
        }
        view = open_view(img, id, error);
        if (!view) {
            return NULL;
        }
        node = view;
        vs = vs_get(view, true);
        pthread_mutex_lock(&img_vs->op_lock);
        size_t req = img_vs->buf_size_request;
        unsigned max = img_vs->max_in_flight;
        pthread_mutex_unlock(&img_vs->op_lock);
        vs->max_in_flight = max; /* nobody else knows the view yet */
        vs->buf_size_request = req;
        vs->buf_size = compute_buf_size(view, req);
        vs->session = true;
    }
    pthread_mutex_lock(&vs->op_lock);
    ra_drop_locked(vs);
    vs->limit = sn.vm_state_size; /* invariant 6 */
    vs->last_end = 0;
    pthread_mutex_unlock(&vs->op_lock);

    QimgVmstateLoad *l = g_new0(QimgVmstateLoad, 1);
    l->img = img;
    l->node = node;
    l->view = view;
    l->vs = vs;
    l->img_vs = img_vs;
    l->size = sn.vm_state_size;
    pthread_mutex_lock(&img_vs->op_lock);
    img_vs->load = l; /* invariant 7 */
    pthread_mutex_unlock(&img_vs->op_lock);
    return l;
}

uint64_t qimg_vmstate_load_size(QimgVmstateLoad *l)
{
    g_return_val_if_fail(l, 0);
    return l->size;
}

gssize qimg_vmstate_load_read(QimgVmstateLoad *l, void *buf, size_t len, GError **error)
{
    g_return_val_if_fail(l && (buf || len == 0), -1);
    if (!stream_alive(l->img, error)) {
        return -1;
    }
    uint64_t n = MIN((uint64_t)len, l->size - l->pos);
    n = MIN(n, (uint64_t)G_MAXSSIZE);
    if (n == 0) {
        return 0;
    }
    blk_error_clear();
    pthread_mutex_lock(&l->vs->op_lock);
    int ret = vm_read_locked(l->vs, l->pos, buf, (size_t)n);
    pthread_mutex_unlock(&l->vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return -1;
    }
    l->pos += n;
    return (gssize)n;
}

void qimg_vmstate_load_end(QimgVmstateLoad *l)
{
    if (!l) {
        return;
    }
    if (l->img) {
        pthread_mutex_lock(&l->img_vs->op_lock);
        l->img_vs->load = NULL;
        pthread_mutex_unlock(&l->img_vs->op_lock);
        session_end(l->vs);
        api_image_destroy(l->view); /* releases the view's state */
    }
    g_free(l);
}

/* Invariant 7: the image is going away; its streams forget it. */
static void streams_invalidate(ApiVmstate *vs)
{
    pthread_mutex_lock(&vs->op_lock);
    struct QimgVmstateSave *save = vs->save;
    struct QimgVmstateLoad *load = vs->load;
    vs->save = NULL;
    vs->load = NULL;
    pthread_mutex_unlock(&vs->op_lock);
    if (save) {
        save->img = NULL;
        save->vs = NULL;
    }
    if (load) {
        QimgImage *view = load->view;
        load->img = NULL;
        load->node = NULL;
        load->view = NULL;
        load->vs = NULL;
        load->img_vs = NULL;
        api_image_destroy(view); /* the view's own state goes with it */
    }
}
