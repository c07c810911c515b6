/*
 * api/copy.c: the copy pipeline (include/qimg/copy.h): in_flight workers,
 * each taking the next chunk of the plan (copy-plan.c) in order and moving
 * it -- read, sparse detection, write -- in parallel with the others.
 *
 * Owns: the workers and their buffers, the order of allocations in the
 * target, the first error, and progress.
 *
 * Invariants (cited as "copy.c invariant N"):
 *  1. Chunks are taken under the lock in guest order, each with the next
 *     ticket (block/order.c).  Into a qcow2 target every allocating write
 *     of chunk k is planned after those of chunks < k (write.c invariant
 *     12), with or without out_of_order: host clusters in guest order is
 *     what the format needs not to fragment.  The chunk's last data write
 *     is marked last so that its data moves while chunk k + 1 allocates
 *     (order.c invariant 2).  Into other targets, unless out_of_order, the
 *     pipeline takes the turn itself before each write (issue_turn): writes
 *     are issued in guest order, then run in parallel; with out_of_order
 *     they are issued in any order.  Chunks that write nothing (holes on a
 *     target that reads as zeros, what the backing file shows) take no
 *     ticket, so they never wait for a turn.  A hole's zeroes request is
 *     its chunk's only one, so its last: its turn passes once it is issued,
 *     as a data chunk's does.  Holding the turn until it was done
 *     serialised a convert onto a block device, where BLKZEROOUT waits for
 *     every write queued on the device before it (`-n -O raw` of 1 GiB of
 *     data in 1 GiB of holes onto a loop device: the workers waited 13.3 s
 *     for turns in a 2.36 s copy, 2.3 s in 1.18 s without it).
 *  2. A zero range is written (as zeroes) only where the plan says zeros and
 *     the target may not read as zeros; no range gets both a zeroes request
 *     and data (copy-plan.c facts 2, 3).
 *  3. The first error (or a progress callback's FALSE) stops the taking of
 *     chunks and cancels the order (order.c invariant 3); workers finish
 *     the chunk they hold and stop.  qimg_copy returns only when every
 *     worker has stopped, with the error at the lowest guest offset of
 *     those that arrived -- the one qemu-img, copying in order, reports --
 *     not whichever worker failed first (with every write failing, that
 *     was a race: iotest 014).
 *  4. done counts bytes of chunks completed, not taken; the progress
 *     callback runs under the lock, so calls never overlap.
 *  5. Memory: one COPY_BUF_SIZE buffer per worker, aligned for O_DIRECT,
 *     and its chunk's runs (COPY_MAX_RUNS, 16 KiB): sparse detection looks
 *     at each sector once per chunk.
 *  6. A target may defer a write's in-order part (order.c invariant 4: a
 *     streamOptimized VMDK's appends): the write returns before it is
 *     done.  Its failure is the copy's: later writes return it, and after
 *     the workers stopped the order's drain does (order.c invariant 7).
 *  7. Salvage warns as qemu-img does: its walk of the source before the
 *     copy (which counts the allocated bytes) reports each block status
 *     that fails (copy-plan.c fact 5), and the copy reports them again,
 *     with the reads that fail, in guest order: one worker.
 *  8. Copy offloading (qimg/copy.h rule 7): while it works, a data chunk
 *     is moved whole by the target's copy_in (no read, no sparse
 *     detection), in pieces mapped by copy-offload.c, each issued as a
 *     data write is (invariant 1: the turn, the last piece marked last).
 *     The first piece that fails turns offloading off for the whole copy
 *     (atomic flag) and its chunk is read and written as without it, as
 *     qemu-img falls back from copy_range; what was copied of it is
 *     written again with the same bytes (and when the failing piece had
 *     passed the turn already, that chunk's fallback allocates out of
 *     turn: once per copy, fragmentation at worst).
 *  9. Stats (qimg/copy.h rule 8): each worker counts into its own
 *     QimgCopyStats (wst, thread-local: no lock, no sharing); the time of
 *     a request is the clock around it, less what block/order.c counted
 *     for this thread in the meantime (the turn, compression: order.c
 *     invariant 8), so each nanosecond is in one field.  The counts are
 *     always kept (a few clock reads per chunk); qimg_copy_sources adds
 *     them up after the join and copies them out only when asked.
 */
#include "api/copy-plan.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COPY_DEFAULT_IN_FLIGHT 8u
#define COPY_MAX_IN_FLIGHT 16u
#define NO_TICKET UINT64_MAX

typedef struct Copy {
    QimgImage *const *srcs; /* copy-plan.c fact 7 */
    unsigned n_srcs;
    QimgImage *dst;
    QimgCopyOptions o;
    pthread_mutex_t lock;
    pthread_mutex_t warn_lock;        /* salvage's warnings (copy_warn) */
    CopyPlan plan;                    /* [lock] */
    uint64_t ticket;                  /* [lock] the next chunk's (invariant 1) */
    BlkOrder *order;                  /* NULL: no ordering */
    bool issue_order;                 /* invariant 1: the pipeline orders the writes */
    uint64_t done;                    /* [lock] invariant 4 */
    uint64_t alloc_done, alloc_total; /* [lock] progress_allocated */
    bool *offload_ok;    /* invariant 8: per source (copy-offload.c fact 1) */
    bool offload;        /* invariant 8, atomic: still offloading */
    ApiLowestError fail; /* [lock] invariant 3 */
} Copy;

typedef struct Worker {
    Copy *c;
    QimgCopyStats st; /* invariant 9 */
    uint8_t *buf;
    uint32_t runs[COPY_MAX_RUNS]; /* write_chunk's */
    pthread_t thread;
} Worker;

static __thread QimgCopyStats *wst; /* invariant 9: this worker's */

/* Invariant 9: a request's clock, less the turn and compression that
 * order.c counted for this thread meanwhile. */
typedef struct ReqClock {
    uint64_t t0, turn0, compress0;
} ReqClock;

static void req_start(ReqClock *r)
{
    const BlkThreadTimes *tt = blk_thread_times();

    r->turn0 = tt->turn_ns;
    r->compress0 = tt->compress_ns;
    r->t0 = blk_now_ns();
}

static uint64_t req_ns(const ReqClock *r)
{
    const BlkThreadTimes *tt = blk_thread_times();
    uint64_t ns = blk_now_ns() - r->t0;
    uint64_t other = (tt->turn_ns - r->turn0) + (tt->compress_ns - r->compress0);

    return ns > other ? ns - other : 0;
}

/* Invariant 9: c->lock, its wait counted. */
static void copy_lock(Copy *c)
{
    uint64_t t0 = blk_now_ns();

    pthread_mutex_lock(&c->lock);
    if (wst) {
        wst->lock_ns += blk_now_ns() - t0;
    }
}

/* Invariant 3: keep the error at the lowest offset (UINT64_MAX: none),
 * api/error.c invariant 1. */
static void copy_fail(Copy *c, uint64_t offset, GError *err)
{
    copy_lock(c);
    if (api_lowest_error_offer(&c->fail, offset, err) && c->order) {
        blk_order_cancel(c->order);
    }
    pthread_mutex_unlock(&c->lock);
}

static bool copy_stopped(Copy *c)
{
    copy_lock(c);
    bool stopped = c->fail.error != NULL;
    pthread_mutex_unlock(&c->lock);
    return stopped;
}

static bool io_failed(Copy *c, QimgImage *img, ApiIoOp op, int ret, const char *what,
                      uint64_t offset)
{
    GError *err = NULL, *full = NULL;

    if (ret >= 0) {
        return false;
    }
    /* a failure with no message below it (an errno alone: QEMU's blkdebug,
     * block/faulty.c invariant 11) has no detail to add */
    bool detail = blk_error_message() != NULL;
    api_io_error(img, op, ret, &err);
    /* qemu-img's line (the bare strerror), qimg's detail on a second line
     * when it says more (issue 15: "qimg's extra detail goes on a second
     * line") */
    const char *bare = g_strerror(err->code > 0 ? err->code : EIO);
    detail = detail && strcmp(err->message, bare) != 0;
    g_set_error(&full, QIMG_ERROR, err->code,
                "error while %s at byte %" PRIu64 ": %s%s%s", what, offset, bare,
                detail ? "\n" : "", detail ? err->message : "");
    g_error_free(err);
    copy_fail(c, offset, full);
    return true;
}

/* Invariant 1: a target that does not order its own allocations gets its
 * writes issued in ticket order, unless out_of_order. */
static void issue_turn(const Copy *c)
{
    if (c->issue_order) {
        blk_order_wait();
        blk_order_allocated();
    }
}

static bool write_zeroes(Copy *c, uint64_t offset, uint64_t len)
{
    if (c->o.target_is_zero) {
        return true; /* invariant 2 */
    }
    ReqClock r;
    req_start(&r);
    issue_turn(c);
    int ret = api_io(
        c->dst, API_IO_ZERO, offset, len, NULL,
        c->plan.target_has_backing && !c->plan.mirror_writes ? 0 : BLK_REQ_MAY_UNMAP);
    wst->write_ns += req_ns(&r); /* invariant 9 */
    wst->zeroes++;
    wst->zero_bytes += len;
    return !io_failed(c, c->dst, API_IO_ZERO, ret, "writing", offset);
}

static bool write_data(Copy *c, uint64_t offset, uint8_t *buf, size_t len)
{
    BlkIOV q;
    ReqClock r;

    iov_init_buf(&q, buf, len);
    req_start(&r);
    issue_turn(c);
    int ret = api_io(c->dst, API_IO_WRITE, offset, len, &q, 0);
    wst->write_ns += req_ns(&r); /* invariant 9 */
    wst->writes++;
    wst->write_bytes += len;
    return !io_failed(c, c->dst, API_IO_WRITE, ret, "writing", offset);
}

/* Salvage's warnings (qimg/copy.h), one at a time (also the plan's). */
static void copy_warn(void *opaque, const char *msg)
{
    Copy *c = opaque;

    if (c->o.warn) {
        pthread_mutex_lock(&c->warn_lock);
        c->o.warn(c->o.warn_opaque, msg);
        pthread_mutex_unlock(&c->warn_lock);
    }
}

/* Salvage (qimg/copy.h): the failed read again, sector by sector (the
 * warning names the source's own offset, as qemu-img's). */
static void salvage_read(Copy *c, QimgImage *src, uint64_t offset, uint8_t *buf,
                         size_t len)
{
    for (size_t pos = 0; pos < len; pos += COPY_SECTOR) {
        size_t n = MIN((size_t)COPY_SECTOR, len - pos);
        BlkIOV q;
        int ret;

        iov_init_buf(&q, buf + pos, n);
        ret = api_io(src, API_IO_READ, offset + pos, n, &q, 0);
        if (ret < 0) {
            g_autofree char *msg =
                g_strdup_printf("error while reading offset %" PRIu64 ": %s",
                                offset + pos, g_strerror(-ret));
            memset(buf + pos, 0, n);
            copy_warn(c, msg);
            blk_error_clear();
        }
    }
}

/* The target's range [offset, offset + len) read from the sources; a
 * compressed cluster may take from two (copy-plan.c fact 7).  An error is
 * reported at the target's offset, as qemu-img's. */
static bool read_data(Copy *c, uint64_t offset, uint8_t *buf, size_t len)
{
    for (size_t pos = 0; pos < len;) {
        uint64_t local, avail;
        QimgImage *src =
            c->srcs[copy_plan_source_at(&c->plan, offset + pos, &local, &avail)];
        size_t n = (size_t)MIN((uint64_t)(len - pos), avail);
        BlkIOV q;
        ReqClock r;
        int ret;

        g_assert(n > 0);
        iov_init_buf(&q, buf + pos, n);
        req_start(&r);
        ret = api_io(src, API_IO_READ, local, n, &q, 0);
        wst->read_ns += req_ns(&r); /* invariant 9 */
        wst->reads++;
        wst->read_bytes += n;
        if (ret < 0 && c->o.salvage) {
            blk_error_clear();
            salvage_read(c, src, local, buf + pos, n);
        } else if (io_failed(c, src, API_IO_READ, ret, "reading", offset)) {
            return false;
        }
        pos += n;
    }
    return true;
}

/* A data chunk with sparse detection (fact 2; invariant 1 marks the last
 * data write); runs: room for COPY_MAX_RUNS. */
static bool write_chunk(Copy *c, uint64_t offset, uint8_t *buf, size_t len,
                        uint32_t *runs)
{
    size_t n, last, pos = 0;

    if (c->plan.min_sparse == 0) {
        blk_order_mark_last();
        return write_data(c, offset, buf, len);
    }
    n = copy_chunk_runs(&c->plan, buf, len, offset / COPY_SECTOR, runs);
    for (last = n; last > 0 && !(runs[last - 1] & COPY_RUN_DATA); last--) {
    }
    for (size_t i = 0; i < n; i++) {
        bool data = runs[i] & COPY_RUN_DATA;
        size_t bytes = MIN((size_t)(runs[i] & ~COPY_RUN_DATA) * COPY_SECTOR, len - pos);

        if (data && i + 1 == last) {
            blk_order_mark_last();
        }
        if (data ? !write_data(c, offset + pos, buf + pos, bytes)
                 : !write_zeroes(c, offset + pos, bytes)) {
            return false;
        }
        pos += bytes;
    }
    return true;
}

/* With compress: one cluster (copy.h rule 4). */
static bool write_compressed(Copy *c, const CopyChunk *k, uint8_t *buf)
{
    size_t n = (size_t)k->len;
    g_autoptr(GError) err = NULL;
    BlkIOV q;

    if (k->kind == COPY_ZERO) {
        memset(buf, 0, n);
    } else if (!read_data(c, k->offset, buf, n)) {
        return false;
    }
    if (!c->plan.zeros_as_data && copy_buf_is_zero(buf, n)) { /* -S 0: rule 4 */
        return write_zeroes(c, k->offset, n);
    }
    iov_init_buf(&q, buf, n);
    blk_order_mark_last();
    ReqClock r;
    req_start(&r);
    bool ok = api_pwrite_compressed(c->dst, k->offset, &q, &err);
    wst->write_ns += req_ns(&r); /* invariant 9: compression and turn apart */
    wst->writes++;
    wst->write_bytes += n;
    if (!ok) {
        /* qemu-img 7.2's line, qimg's detail on a second line (io_failed) */
        const char *bare = g_strerror(err->code > 0 ? err->code : EIO);
        bool more = strcmp(err->message, bare) != 0;
        copy_fail(c, k->offset,
                  g_error_new(QIMG_ERROR, err->code,
                              "error while writing at byte %" PRIu64 ": %s%s%s",
                              k->offset, bare, more ? "\n" : "",
                              more ? err->message : ""));
        return false;
    }
    return true;
}

/* Invariant 8: the data chunk moved by copy offloading; false when that
 * is (or just turned) off, for the caller to read and write it. */
static bool offload_chunk(Copy *c, const CopyChunk *k)
{
    int ret = 0;

    if (!__atomic_load_n(&c->offload, __ATOMIC_ACQUIRE)) {
        return false;
    }
    for (uint64_t pos = 0, n; pos < k->len && ret == 0; pos += n) {
        BlkNode *file;
        uint64_t host;

        ret = copy_offload_map(&c->plan, c->offload_ok, k->offset + pos, k->len - pos,
                               &file, &host, &n);
        if (ret == 0) {
            n = MIN(n, k->len - pos);
            if (pos + n == k->len) {
                blk_order_mark_last();
            }
            ReqClock r;
            req_start(&r);
            issue_turn(c);
            ret = api_copy_in(c->dst, k->offset + pos, n, file, host);
            wst->write_ns += req_ns(&r); /* invariant 9 */
            wst->writes++;
            wst->write_bytes += n;
        }
    }
    if (ret < 0) {
        __atomic_store_n(&c->offload, false, __ATOMIC_RELEASE);
        blk_error_clear();
        return false;
    }
    return true;
}

static bool move_chunk(Copy *c, const CopyChunk *k, uint8_t *buf, uint32_t *runs)
{
    size_t n = (size_t)k->len;

    if (k->kind == COPY_BACKING) {
        return true; /* fact 4: the target's backing file shows through */
    }
    if (c->plan.compress) {
        return write_compressed(c, k, buf);
    }
    if (k->kind == COPY_DATA) {
        return offload_chunk(c, k) || (read_data(c, k->offset, buf, n) &&
                                       write_chunk(c, k->offset, buf, n, runs));
    }
    if (c->plan.zeros_as_data) { /* -S 0 */
        memset(buf, 0, n);
        blk_order_mark_last();
        return write_data(c, k->offset, buf, n);
    }
    if (c->issue_order) {
        blk_order_mark_last(); /* invariant 1: its one request, issued in turn */
    }
    return write_zeroes(c, k->offset, k->len);
}

/* Does moving the chunk write anything (invariant 2)? */
static bool chunk_writes(const Copy *c, const CopyChunk *k)
{
    switch (k->kind) {
    case COPY_BACKING:
        return false;
    case COPY_ZERO:
        return !c->o.target_is_zero || c->plan.zeros_as_data;
    case COPY_DATA:
        break;
    }
    return true;
}

/* What qemu-img convert -p counts (qimg/copy.h progress_allocated). */
static bool chunk_counts(const Copy *c, const CopyChunk *k)
{
    return k->kind == COPY_DATA || (k->kind == COPY_ZERO && c->plan.zeros_as_data);
}

/* Invariant 4: the progress callback; FALSE from it stops the copy. */
static void report_locked(Copy *c)
{
    bool alloc = c->o.progress_allocated;

    if (c->o.progress && !c->fail.error &&
        !c->o.progress(c->o.progress_opaque, alloc ? c->alloc_done : c->done,
                       alloc ? c->alloc_total : c->plan.size)) {
        /* invariant 3: at offset 0, nothing replaces it */
        (void)api_lowest_error_offer(
            &c->fail, 0, g_error_new(QIMG_ERROR, ECANCELED, "The copy was interrupted"));
        if (c->order) {
            blk_order_cancel(c->order);
        }
    }
}

/* progress_allocated: the total, from a walk of a second plan (a block
 * status that fails there is the copy's to report, but with salvage:
 * invariant 7). */
static void count_allocated(Copy *c)
{
    CopyPlan walk;
    CopyChunk k;
    bool more = true;

    copy_plan_init(&walk, c->srcs, c->n_srcs, c->dst, &c->o);
    walk.warn = copy_warn;
    walk.warn_opaque = c;
    while (more) {
        g_autoptr(GError) err = NULL;
        if (!copy_plan_next(&walk, &k, &more, &err)) {
            break;
        }
        if (chunk_counts(c, &k)) {
            c->alloc_total += k.len;
        }
    }
}

/* Invariant 1: the next chunk and its ticket (NO_TICKET for a chunk that
 * writes nothing: it must not hold up the turns of those that do), or
 * FALSE when done or stopped. */
static bool take_chunk(Copy *c, CopyChunk *k, uint64_t *ticket)
{
    GError *err = NULL;
    bool more, ok;

    copy_lock(c);
    uint64_t t0 = blk_now_ns();
    ok = !c->fail.error && copy_plan_next(&c->plan, k, &more, &err);
    wst->plan_ns += blk_now_ns() - t0; /* invariant 9 */
    *ticket = ok && chunk_writes(c, k) ? c->ticket++ : NO_TICKET;
    if (ok && c->o.progress_allocated && chunk_counts(c, k)) {
        c->alloc_done += k->len; /* qimg/copy.h: as qemu-img, when taken */
        report_locked(c);
    }
    pthread_mutex_unlock(&c->lock);
    if (!ok && err) {
        copy_fail(c, UINT64_MAX, err);
    }
    return ok;
}

static void chunk_done(Copy *c, uint64_t len)
{
    copy_lock(c);
    c->done += len; /* invariant 4 */
    report_locked(c);
    pthread_mutex_unlock(&c->lock);
}

static void *worker_main(void *opaque)
{
    Worker *w = opaque;
    Copy *c = w->c;
    CopyChunk k;
    uint64_t ticket;
    const BlkThreadTimes *tt = blk_thread_times();
    uint64_t turn0 = tt->turn_ns, compress0 = tt->compress_ns;

    wst = &w->st; /* invariant 9 */
    while (take_chunk(c, &k, &ticket)) {
        bool ok;
        bool ordered = c->order && ticket != NO_TICKET;
        if (ordered) {
            blk_order_enter(c->order, ticket);
        }
        blk_error_clear();
        ok = move_chunk(c, &k, w->buf, w->runs);
        if (ordered) {
            blk_order_leave(); /* order.c invariant 2 */
        }
        if (!ok || copy_stopped(c)) {
            break;
        }
        chunk_done(c, k.len);
    }
    struct timespec cpu;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0) {
        w->st.cpu_ns = (uint64_t)cpu.tv_sec * 1000000000u + (uint64_t)cpu.tv_nsec;
    }
    w->st.turn_ns = tt->turn_ns - turn0;
    w->st.compress_ns = tt->compress_ns - compress0;
    wst = NULL;
    return NULL;
}

/* Invariant 9: the workers' counts added up into the caller's stats. */
static void stats_out(QimgCopyStats *out, const Worker *w, unsigned started,
                      uint64_t wall_ns)
{
    QimgCopyStats sum = {.workers = started, .wall_ns = wall_ns};

    for (unsigned i = 0; i < started; i++) {
        const QimgCopyStats *s = &w[i].st;
        sum.cpu_ns += s->cpu_ns;
        sum.read_ns += s->read_ns;
        sum.write_ns += s->write_ns;
        sum.turn_ns += s->turn_ns;
        sum.lock_ns += s->lock_ns;
        sum.plan_ns += s->plan_ns;
        sum.compress_ns += s->compress_ns;
        sum.reads += s->reads;
        sum.writes += s->writes;
        sum.zeroes += s->zeroes;
        sum.read_bytes += s->read_bytes;
        sum.write_bytes += s->write_bytes;
        sum.zero_bytes += s->zero_bytes;
    }
    api_struct_out(out, &sum, sizeof(sum));
}

gboolean qimg_copy(QimgImage *src, QimgImage *dst, const QimgCopyOptions *opts,
                   GError **error)
{
    return qimg_copy_sources(&src, 1, dst, opts, error);
}

/* The sources as the copy can take them: at least one, none NULL, their
 * sizes added up (copy-plan.c fact 7); *size is the sum. */
static gboolean check_sources(QimgImage *const *srcs, unsigned n_srcs,
                              const QimgCopyOptions *o, uint64_t *size, GError **error)
{
    *size = 0;
    for (unsigned i = 0; i < n_srcs; i++) {
        if (!srcs[i]) {
            n_srcs = 0;
            break;
        }
        if (__builtin_add_overflow(*size, srcs[i]->node->size, size)) {
            g_set_error(error, QIMG_ERROR, EFBIG, "The sources add up to more than %s",
                        "2^64 bytes");
            return FALSE;
        }
    }
    if (o->copy_offload && (o->compress || o->salvage || o->mirror_writes)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Copy offloading cannot be combined with %s",
                    o->compress  ? "compress"
                    : o->salvage ? "salvage"
                                 : "mirror_writes");
        return FALSE;
    }
    if (n_srcs > 1 && (o->top_only || o->mirror_writes)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Several sources cannot be copied %s (it takes one source)",
                    o->top_only ? "with top_only" : "with mirror_writes");
        return FALSE;
    }
    if (n_srcs == 0) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No source or target image to copy");
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_copy_sources(QimgImage *const *srcs, unsigned n_srcs, QimgImage *dst,
                           const QimgCopyOptions *opts, GError **error)
{
    Copy c = {.srcs = srcs, .n_srcs = n_srcs, .dst = dst};
    Worker *w;
    unsigned n, started = 0;
    uint64_t size;

    if (!dst || !srcs) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No source or target image to copy");
        return FALSE;
    }
    if (!api_struct_in(&c.o, sizeof(c.o), opts, "QimgCopyOptions", error) ||
        !check_sources(srcs, n_srcs, &c.o, &size, error)) {
        return FALSE;
    }
    if (c.o.in_flight > COPY_MAX_IN_FLIGHT ||
        (c.o.sparse_size != QIMG_COPY_SPARSE_OFF &&
         (c.o.sparse_size % COPY_SECTOR || c.o.sparse_size > 16 * 1024 * 1024))) {
        g_set_error(
            error, QIMG_ERROR, EINVAL,
            "Invalid copy options: in_flight %u (at most %u), sparse_size %" PRIu32
            " (a multiple of 512, at most 16 MiB)",
            c.o.in_flight, COPY_MAX_IN_FLIGHT, c.o.sparse_size);
        return FALSE;
    }
    if (dst->node->size < size) {
        g_set_error(error, QIMG_ERROR, EINVAL, "output file is smaller than input file");
        return FALSE;
    }
    if (dst->node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only",
                    dst->node->filename);
        return FALSE;
    }
    if (!c.o.compress && dst->node->drv->get_info) { /* a target taking only those */
        BlkInfo di = {0};
        if (dst->node->drv->get_info(dst->node, &di) == 0) {
            c.o.compress = di.needs_compressed_writes;
        }
        blk_info_clear(&di);
    }
    if (c.o.compress && !dst->node->drv->pwrite_compressed) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Compression is not supported for format '%s'",
                    dst->node->drv->format_name);
        return FALSE;
    }
    copy_plan_init(&c.plan, srcs, n_srcs, dst, &c.o);
    if (c.o.copy_offload) { /* invariant 8 */
        c.offload_ok = copy_offload_sources(srcs, n_srcs);
        c.offload = !c.o.compress; /* (a target taking only compressed writes) */
    }
    c.plan.warn = copy_warn;
    c.plan.warn_opaque = &c;
    n = c.o.in_flight ? c.o.in_flight : COPY_DEFAULT_IN_FLIGHT;
    if (c.o.compress) { /* compression on every core */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n = MAX(n, (unsigned)MIN(MAX(cpus, 1), 64));
    }
    if (c.o.salvage) {
        n = 1; /* invariant 7 */
    }
    /* invariant 1 */
    bool allocates = dst->node->drv->allocates;
    if (n > 1 && (allocates || !c.o.out_of_order)) {
        c.order = blk_order_new();
        c.issue_order = !allocates;
    }
    pthread_mutex_init(&c.lock, NULL);
    pthread_mutex_init(&c.warn_lock, NULL);
    if ((c.o.progress_allocated && c.o.progress) || c.o.salvage) { /* invariant 7 */
        count_allocated(&c);
    }
    w = g_new0(Worker, n);
    uint64_t t0 = blk_now_ns();
    for (unsigned i = 0; i < n; i++) {
        w[i].c = &c;
        if (posix_memalign((void **)&w[i].buf, 4096, COPY_BUF_SIZE) != 0) {
            w[i].buf = NULL;
            break;
        }
        if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]) != 0) {
            free(w[i].buf);
            w[i].buf = NULL;
            break;
        }
        started++;
    }
    if (started == 0) {
        copy_fail(&c, UINT64_MAX,
                  g_error_new(QIMG_ERROR, ENOMEM, "Cannot start the copy's threads"));
    }
    for (unsigned i = 0; i < started; i++) { /* invariant 3 */
        pthread_join(w[i].thread, NULL);
        free(w[i].buf);
    }
    if (c.o.stats) {
        stats_out(c.o.stats, w, started, blk_now_ns() - t0);
    }
    g_free(w);
    if (c.order) { /* order.c invariant 7: a deferred write that failed */
        int ret = blk_order_drain(c.order);
        if (ret < 0 && !c.fail.error) {
            g_autofree char *msg = blk_error_take();
            c.fail.error = g_error_new(QIMG_ERROR, -ret, "error while %s: %s",
                                       c.o.compress ? "compressing" : "writing",
                                       msg ? msg : g_strerror(-ret));
        }
        blk_error_clear();
    }
    blk_order_free(c.order);
    g_free(c.offload_ok);
    pthread_mutex_destroy(&c.lock);
    pthread_mutex_destroy(&c.warn_lock);
    if (c.fail.error) {
        g_propagate_error(error, c.fail.error);
        return FALSE;
    }
    return TRUE;
}
