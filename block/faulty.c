/*
 * block/faulty.c: a fault-injecting protocol node for tests (QEMU's blkdebug).
 *
 * Owns: failing chosen writes and flushes (and, when asked, reads) of the
 * file under a format driver, selected by the metadata step the driver
 * announced with blk_event().
 *
 * RULES is a file name (no '='): QEMU's blkdebug config file, read into
 * these rules by faulty-config.c.  Otherwise rules (';'-separated), each a
 * ','-separated list of:
 *   event=NAME   step whose requests count (blk_event_name(); "any" = all;
 *                flush_to_os, flush_to_disk: QEMU's, for arm and
 *                new_state rules, raised by the format above: invariant 12;
 *                "cow_write" also counts cow_data_write, "refblock_alloc"
 *                refblock_hookup, "l1_grow" l1_grow_activate; "write_aio"
 *                is QEMU's: data_write and cow_data_write)
 *   errno=N      error to return (default 5, EIO)
 *   nth=N        fail the N-th matching request (default 1)
 *   once         fail only that request (default: it and every later match)
 *   offset=N     only requests that cover byte N count (a bad sector)
 *   op=write|flush|all|read   which requests count (default write: writes
 *                and zero writes; flush for event=flush; all = those and
 *                flushes; read = reads only, with event=any: a source that
 *                fails mid-copy); QEMU's I/O types pwrite (writes alone),
 *                write-zeroes, discard, block-status, and io (QEMU's
 *                default: reads, writes, zero writes, discards, flushes),
 *                io-no-flush (those but flushes)
 *   state=N      only in state N (QEMU's blkdebug states; 0: any)
 *   arm          QEMU's blkdebug rule (invariant 7): the step arms it, and
 *                from then on every request of op fails, whatever step
 *                it is in; nth does not apply; with event=any (QEMU's
 *                event "none") the open arms it, in state 1 or any
 *   new_state=N  not a failure: entering the step switches to state N
 *                (QEMU's [set-state]; the state starts at 1)
 * A rule "limits,KEY=N,..." is no rule but the node's request limits
 * (BlkLimits, honoured by block/limits.c), with QEMU's blkdebug keys align,
 * max-transfer, opt-write-zero, max-write-zero, opt-discard, max-discard.
 *
 * The node sits under a format (blk_open_faulty: over a file, the format's
 * steps announced on it) or over one (blk_open_faulty_over: QEMU's
 * blkdebug with a format as its image, a filter that sees the requests of
 * the image's user and the steps announced on it: copy-on-read's
 * cor_write).
 *
 * Breakpoints (QEMU's break/resume, for qimg io): a request reaching the
 * step of a breakpoint is suspended under its tag until resumed.
 *
 * Invariants:
 *  1. Reads are failed only by an op=read rule: a test reads back what the
 *     image holds.
 *  2. A failed request has no effect on the file (it is not passed down), so
 *     the file holds exactly what a crash at that point would leave, minus
 *     the page cache (which the tests' checks don't depend on).
 *  3. The announced step is per thread, as metadata steps run on the thread
 *     that holds the driver's metadata lock.
 *  4. States as QEMU's: a step is judged in the state it began in (every
 *     rule's state= is compared with the state before the step's
 *     new_state rules switch it), so a rule and the switch on one step do
 *     not see each other.
 *  5. A breakpoint stops one request and is gone (as QEMU's).  A request
 *     that reaches one on the thread that set it is not suspended -- that
 *     thread is the one that must resume it -- but fails with EDEADLK;
 *     close resumes every suspended request (BLK_DEBUG_RESUME_ALL) before
 *     it drains, so nothing waits for ever.
 *  6. Limits as QEMU's blkdebug_open checks them ("Cannot meet constraints
 *     with KEY N"): align a power of two below 2^31, the others below 2^31
 *     and multiples of max(align, the child's alignment), max-write-zero
 *     and max-discard also of their opt- values.  As QEMU's driver, the
 *     node refuses (-ENOTSUP) a zero write shorter than max(align,
 *     opt-write-zero) and a discard shorter than align, so the layer above
 *     writes zeros (limits.c fact 2) or skips it (fact 3).
 *  7. Armed rules as QEMU's active rules: a step whose event an arm rule
 *     names (in its state, invariant 4) arms it, node-wide, and disarms
 *     every arm rule of other events (QEMU replaces its active list when
 *     an event has inject-error rules); an armed rule fails every later
 *     request of its ops and range on any thread, reads too when op says
 *     so (invariant 1's exception: QEMU's default I/O types include
 *     reads).  With once the first failure disarms it for good (QEMU
 *     removes the rule).  An event=any arm rule (QEMU's "none", raised
 *     once, when the node opens) is armed by the open if its state is the
 *     first one, and by nothing else.  Flushes too (QEMU's default I/O
 *     types), but not through a node over a format unless the rule names
 *     flushes alone: QEMU's close flushes through it and fails silently,
 *     where qimg_image_close reports a failed flush.
 *  8. As QEMU's block layer, a flush with no write-like request (failed ones
 *     too) since the node's last good flush never reaches the rules: it is
 *     passed to the child, which has nothing to flush either.
 *  9. A format's data read (BLKEV_DATA_READ, QEMU's read_aio) arms its
 *     rules and switches the state as any step does, but is not the
 *     thread's step: the writes that follow count for the step announced
 *     before it.  A read the format did not announce (its probe, its
 *     metadata) arms nothing, so rules on read_aio never fail a probe.
 * 10. As QEMU's blkdebug (a protocol node without an allocated-size
 *     callback), the node has no allocated size (-ENOTSUP): qemu-img info
 *     says "disk size: unavailable" for an image over or under it, and
 *     qcow2's metadata-preallocation heuristic (which ignores the error)
 *     finds none.
 * 11. An armed rule's failure (QEMU's inject-error) is its errno alone, with
 *     no message, as QEMU's blkdebug: a convert says qemu-img's one line
 *     ("error while reading at byte N: Input/output error", api/copy.c),
 *     with no qimg detail under it.  qimg's own rules (not armed) say
 *     "Injected error (blkdebug, STEP #N)".
 * 12. QEMU's flush events come from the format above (block.h invariant
 *     7): its flush announces BLKEV_FLUSH_TO_OS, and BLKEV_FLUSH_TO_DISK is
 *     raised as this node's flush on that thread begins, before
 *     invariant 8's check, when the format had writes to cover.  Like
 *     BLKEV_DATA_READ (invariant 9) they arm rules, switch the state and
 *     stop at breakpoints, but are no thread's step.  The node's own flush
 *     is the step BLKEV_FLUSH (qimg's event=flush rules), which arms only
 *     rules that name it.
 */
#include "block/block.h"
#include "block/faulty-int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct FaultSuspended {
    char *tag;
    bool resumed, reported;
} FaultSuspended;

typedef struct FaultBreak {
    int event; /* BlkEvent, BLK_FAULTY_WRITE_AIO, or -1: read requests */
    char *tag;
    pthread_t owner; /* the thread that set it (invariant 5) */
} FaultBreak;

typedef struct FaultyState {
    BlkNode *child;
    GArray *rules;    /* FaultRule */
    int state;        /* atomic; invariant 4 */
    BlkLimits limits; /* invariant 6 */
    pthread_mutex_t lock;
    pthread_cond_t resumed;
    GPtrArray *breaks;    /* [lock] FaultBreak */
    GPtrArray *suspended; /* [lock] FaultSuspended, oldest first */
    uint64_t writes;      /* atomic: write-like requests (invariant 8) */
    uint64_t flushed;     /* atomic: writes when the last good flush began */
    bool over_format;     /* blk_open_faulty_over's (invariant 7) */
} FaultyState;

static _Thread_local int current_event;    /* invariant 3 */
static _Thread_local int event_state = -1; /* invariant 4: when it began */
static _Thread_local int pending_error;    /* invariant 5: for the next request */

/* Whether a rule's or breakpoint's event (BLK_FAULTY_WRITE_AIO, a
 * BlkEvent; the caller handles -1) counts the step ev. */
static bool event_matches(int want, int ev)
{
    if (want == BLK_FAULTY_WRITE_AIO) {
        return ev == BLKEV_DATA_WRITE || ev == BLKEV_COW_DATA_WRITE;
    }
    return want == ev || (want == BLKEV_COW_WRITE && ev == BLKEV_COW_DATA_WRITE) ||
           (want == BLKEV_REFBLOCK_ALLOC && ev == BLKEV_REFBLOCK_HOOKUP) ||
           (want == BLKEV_L1_GROW && ev == BLKEV_L1_GROW_ACTIVATE);
}

static void break_free(gpointer p)
{
    FaultBreak *b = p;
    g_free(b->tag);
    g_free(b);
}

/* Invariant 7: the arm rules of step ev, judged in state old, replace the
 * armed ones when there are any. */
static void arm_rules(FaultyState *s, int ev, int old)
{
    bool any = false;

    for (guint pass = 0; pass < 2; pass++) {
        for (guint i = 0; i < s->rules->len; i++) {
            FaultRule *r = &g_array_index(s->rules, FaultRule, i);
            if (!r->arm || r->event == -1 ||
                __atomic_load_n(&r->spent, __ATOMIC_SEQ_CST)) {
                continue; /* event=any: armed at the open, for good */
            }
            bool mine = event_matches(r->event, ev) && (r->state == 0 || r->state == old);
            if (pass == 0) {
                any |= mine;
            } else if (any) {
                __atomic_store_n(&r->armed, mine, __ATOMIC_SEQ_CST);
            }
        }
    }
}

/* A step begins (invariant 4): remember its state, arm its rules
 * (invariant 7), then switch. */
static void begin_step(FaultyState *s, int ev, FaultOp op)
{
    int old = __atomic_load_n(&s->state, __ATOMIC_SEQ_CST), next = old;

    if (ev >= 0) {
        arm_rules(s, ev, old);
    }
    for (guint i = 0; i < s->rules->len; i++) {
        FaultRule *r = &g_array_index(s->rules, FaultRule, i);
        if (r->new_state >= 0 && (r->ops & op) &&
            (r->event == -1 || event_matches(r->event, ev)) &&
            (r->state == 0 || r->state == old)) {
            next = r->new_state;
        }
    }
    event_state = old;
    if (next != old) {
        __atomic_store_n(&s->state, next, __ATOMIC_SEQ_CST);
    }
}

/* Suspend the caller at each breakpoint on ev (-1: a read) there is as it
 * arrives, one after the other, until each is resumed (invariant 5; a
 * breakpoint set meanwhile is for the next request, as QEMU's). */
static void maybe_suspend(FaultyState *s, int ev)
{
    g_autoptr(GPtrArray) mine = NULL;

    pthread_mutex_lock(&s->lock);
    for (guint i = 0; i < s->breaks->len;) {
        FaultBreak *b = g_ptr_array_index(s->breaks, i);
        if (b->event == -1 ? ev != -1 : ev == -1 || !event_matches(b->event, ev)) {
            i++;
            continue;
        }
        if (!mine) {
            mine = g_ptr_array_new_with_free_func(break_free);
        }
        g_ptr_array_add(mine, g_ptr_array_steal_index(s->breaks, i));
    }
    for (guint i = 0; mine && i < mine->len; i++) {
        FaultBreak *b = g_ptr_array_index(mine, i);
        if (pthread_equal(b->owner, pthread_self())) {
            pending_error = -EDEADLK;
            blk_error(EDEADLK,
                      "blkdebug: request '%s' reached its breakpoint on the thread "
                      "that must resume it",
                      b->tag);
            continue;
        }
        FaultSuspended *q = g_new0(FaultSuspended, 1);
        q->tag = g_strdup(b->tag);
        g_ptr_array_add(s->suspended, q);
        while (!q->resumed) {
            pthread_cond_wait(&s->resumed, &s->lock);
        }
        g_ptr_array_remove(s->suspended, q);
        g_free(q->tag);
        g_free(q);
    }
    pthread_mutex_unlock(&s->lock);
}

/* Invariant 7: an armed rule fails the request (-errno) or not (0). */
static int armed_fails(FaultRule *r, FaultOp op, uint64_t offset, uint64_t bytes)
{
    if (!__atomic_load_n(&r->armed, __ATOMIC_SEQ_CST) || !(r->ops & op) ||
        (r->has_offset && (r->offset < offset || r->offset - offset >= bytes))) {
        return 0;
    }
    if (r->once && __atomic_exchange_n(&r->spent, 1, __ATOMIC_SEQ_CST)) {
        return 0; /* another request took the one failure */
    }
    if (r->once) {
        __atomic_store_n(&r->armed, 0, __ATOMIC_SEQ_CST);
    }
    __atomic_add_fetch(&r->seen, 1, __ATOMIC_SEQ_CST);
    return -r->errnum; /* invariant 11: the errno alone, as QEMU's */
}

/* Returns -errno if this request must fail. */
static int should_fail(FaultyState *s, FaultOp op, uint64_t offset, uint64_t bytes)
{
    /* outside any step: the state now */
    int st =
        event_state >= 0 ? event_state : __atomic_load_n(&s->state, __ATOMIC_SEQ_CST);
    if (pending_error) {
        int ret = pending_error;
        pending_error = 0;
        return ret;
    }
    for (guint i = 0; i < s->rules->len; i++) {
        FaultRule *r = &g_array_index(s->rules, FaultRule, i);
        if (r->arm) {
            if (op == OP_FLUSH && s->over_format && r->ops != OP_FLUSH) {
                continue; /* invariant 7: a close's silent flush in QEMU */
            }
            int ret = armed_fails(r, op, offset, bytes);
            if (ret < 0) {
                return ret;
            }
            continue;
        }
        if (r->new_state >= 0 || (r->state && r->state != st)) {
            continue;
        }
        if (!(r->ops & op) ||
            (r->event != -1 && !event_matches(r->event, current_event)) ||
            (r->has_offset && (r->offset < offset || r->offset - offset >= bytes))) {
            continue;
        }
        uint64_t n = __atomic_add_fetch(&r->seen, 1, __ATOMIC_SEQ_CST);
        if (n == r->nth || (!r->once && n > r->nth)) {
            return blk_error(r->errnum,
                             "Injected error (blkdebug, %s #%" G_GUINT64_FORMAT ")",
                             blk_event_name((BlkEvent)(current_event)), n);
        }
    }
    return 0;
}

static int faulty_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                         unsigned flags)
{
    FaultyState *s = img->opaque;
    int saved = event_state;
    begin_step(s, -1, OP_READ);
    maybe_suspend(s, -1);
    int ret = should_fail(s, OP_READ, offset, qiov->size); /* invariant 1 */
    event_state = saved;
    return ret < 0 ? ret : blk_preadv(s->child, offset, qiov, flags);
}

static int faulty_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                          unsigned flags)
{
    FaultyState *s = img->opaque;
    int ret = should_fail(s, OP_WRITE, offset, qiov->size); /* invariant 2 */
    __atomic_add_fetch(&s->writes, 1, __ATOMIC_SEQ_CST);    /* invariant 8 */
    if (ret == 0) {
        ret = blk_pwritev(s->child, offset, qiov, flags);
        blk_filter_size_update(img, true);
    }
    return ret;
}

static int faulty_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                                unsigned flags)
{
    FaultyState *s = img->opaque;
    if (bytes < MAX(s->limits.align, s->limits.opt_write_zero)) {
        return -ENOTSUP; /* invariant 6 */
    }
    int ret = should_fail(s, OP_ZERO, offset, bytes);
    __atomic_add_fetch(&s->writes, 1, __ATOMIC_SEQ_CST); /* invariant 8 */
    if (ret == 0) {
        ret = blk_pwrite_zeroes(s->child, offset, bytes, flags);
        blk_filter_size_update(img, true);
    }
    return ret;
}

static int faulty_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    FaultyState *s = img->opaque;
    if (bytes < s->limits.align) {
        return -ENOTSUP; /* invariant 6 */
    }
    int ret = should_fail(s, OP_DISCARD, offset, bytes);
    __atomic_add_fetch(&s->writes, 1, __ATOMIC_SEQ_CST); /* invariant 8 */
    return ret < 0 ? ret : blk_pdiscard(s->child, offset, bytes);
}

static int faulty_flush(BlkNode *img)
{
    FaultyState *s = img->opaque;
    int saved = current_event, saved_state = event_state;
    uint64_t gen = __atomic_load_n(&s->writes, __ATOMIC_SEQ_CST);

    if (blk_flush_to_disk_take(img)) { /* invariant 12 */
        begin_step(s, BLKEV_FLUSH_TO_DISK, OP_FLUSH);
        maybe_suspend(s, BLKEV_FLUSH_TO_DISK);
        event_state = saved_state;
    }
    if (gen == __atomic_load_n(&s->flushed, __ATOMIC_SEQ_CST)) {
        return blk_flush(s->child); /* invariant 8 */
    }
    current_event = BLKEV_FLUSH;
    begin_step(s, BLKEV_FLUSH, OP_FLUSH);
    maybe_suspend(s, BLKEV_FLUSH);
    int ret = should_fail(s, OP_FLUSH, 0, UINT64_MAX);
    current_event = saved;
    event_state = saved_state;
    ret = ret < 0 ? ret : blk_flush(s->child);
    if (ret == 0) {
        uint64_t cur = __atomic_load_n(&s->flushed, __ATOMIC_SEQ_CST);
        while (cur < gen &&
               !__atomic_compare_exchange_n(&s->flushed, &cur, gen, true,
                                            __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        }
    }
    return ret;
}

static int faulty_block_status(BlkNode *img, uint64_t offset, uint64_t bytes,
                               BlkStatus *st)
{
    FaultyState *s = img->opaque;
    int ret = should_fail(s, OP_STATUS, offset, bytes);
    if (ret < 0) {
        return ret;
    }
    if (!img->drv->is_protocol) { /* over a format: its answer (QEMU's RAW) */
        *st = (BlkStatus){
            .pnum = bytes, .flags = BLK_STATUS_RAW, .map = offset, .file = s->child};
        return 0;
    }
    ret = blk_block_status(s->child, offset, bytes, st);
    if (st->file == s->child) {
        st->file = img;
    }
    return ret;
}

static int faulty_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                           bool shrink)
{
    FaultyState *s = img->opaque;
    int ret = blk_truncate(s->child, size, exact, prealloc, shrink);
    __atomic_add_fetch(&s->writes, 1, __ATOMIC_SEQ_CST); /* invariant 8 */
    blk_filter_size_update(img, false);
    return ret;
}

/* Invariant 10: no allocated size ("disk size: unavailable"). */
static int64_t faulty_get_allocated_size(BlkNode *img)
{
    (void)img;
    return -ENOTSUP;
}

static bool faulty_has_zero_init(BlkNode *img)
{
    FaultyState *s = img->opaque;
    return s->child->drv->has_zero_init && s->child->drv->has_zero_init(s->child);
}

/* The locks are the file's (block.h invariant 6). */
static int faulty_set_perm(BlkNode *img, unsigned perm, unsigned shared)
{
    FaultyState *s = img->opaque;
    return s->child->drv->set_perm ? s->child->drv->set_perm(s->child, perm, shared) : 0;
}

static void faulty_event(BlkNode *img, BlkEvent ev)
{
    FaultyState *s = img->opaque;
    if (ev == BLKEV_DATA_READ) { /* invariant 9 */
        int saved = event_state;
        begin_step(s, ev, OP_WRITE);
        event_state = saved;
        return;
    }
    if (ev == BLKEV_FLUSH_TO_OS) { /* invariant 12 */
        int saved = event_state;
        begin_step(s, ev, OP_FLUSH);
        maybe_suspend(s, ev);
        event_state = saved;
        return;
    }
    current_event = ev;
    event_state = -1;
    if (ev != BLKEV_NONE) {
        begin_step(s, ev, OP_WRITE);
        maybe_suspend(s, ev);
    }
}

/* Resume the requests suspended as tag (NULL: all; first: only the
 * oldest); returns how many. */
static unsigned resume_locked(FaultyState *s, const char *tag, bool first)
{
    unsigned n = 0;
    for (guint i = 0; i < s->suspended->len; i++) {
        FaultSuspended *q = g_ptr_array_index(s->suspended, i);
        if (!q->resumed && (!tag || strcmp(q->tag, tag) == 0)) {
            q->resumed = true;
            n++;
            if (first) {
                break;
            }
        }
    }
    if (n) {
        pthread_cond_broadcast(&s->resumed);
    }
    return n;
}

static int faulty_debug_op(BlkNode *img, BlkDebugOp op, const char *event,
                           const char *tag)
{
    FaultyState *s = img->opaque;
    int ret = 0, ev;
    bool read;

    if (op == BLK_DEBUG_BREAK) {
        ret = blk_faulty_qemu_event(event, &ev, &read);
        if (ret < 0) {
            return ret;
        }
    }
    pthread_mutex_lock(&s->lock);
    switch (op) {
    case BLK_DEBUG_BREAK: {
        FaultBreak *b = g_new0(FaultBreak, 1);
        b->event = read ? -1 : ev;
        b->tag = g_strdup(tag);
        b->owner = pthread_self();
        g_ptr_array_add(s->breaks, b);
        break;
    }
    case BLK_DEBUG_REMOVE_BREAK:
        /* QEMU's: the tag's requests resume; ENOENT if no breakpoint went */
        ret = -ENOENT;
        for (guint i = s->breaks->len; i-- > 0;) {
            FaultBreak *b = g_ptr_array_index(s->breaks, i);
            if (strcmp(b->tag, tag) == 0) {
                g_ptr_array_remove_index(s->breaks, i);
                ret = 0;
            }
        }
        resume_locked(s, tag, false);
        break;
    case BLK_DEBUG_RESUME:
        ret = resume_locked(s, tag, true) ? 0 : -ENOENT;
        break;
    case BLK_DEBUG_RESUME_ALL:
        g_ptr_array_set_size(s->breaks, 0);
        resume_locked(s, NULL, false);
        break;
    }
    pthread_mutex_unlock(&s->lock);
    return ret;
}

static char **faulty_debug_suspended(BlkNode *img, bool only_new)
{
    FaultyState *s = img->opaque;
    GPtrArray *tags = g_ptr_array_new();

    pthread_mutex_lock(&s->lock);
    for (guint i = 0; i < s->suspended->len; i++) {
        FaultSuspended *q = g_ptr_array_index(s->suspended, i);
        if (!q->resumed && !(only_new && q->reported)) {
            g_ptr_array_add(tags, g_strdup(q->tag));
            q->reported |= only_new;
        }
    }
    pthread_mutex_unlock(&s->lock);
    g_ptr_array_add(tags, NULL);
    return (char **)g_ptr_array_free(tags, FALSE);
}

static void faulty_close(BlkNode *img)
{
    FaultyState *s = img->opaque;
    blk_close(s->child);
    g_array_unref(s->rules);
    g_ptr_array_unref(s->breaks);
    g_ptr_array_unref(s->suspended);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->resumed);
    g_mutex_clear(&s->limits.rmw);
    g_free(s);
}

/* What the node does in either position. */
#define FAULTY_DRIVER_COMMON                                                             \
    .format_name = "blkdebug", .close = faulty_close, .preadv = faulty_preadv,           \
    .pwritev = faulty_pwritev, .pwrite_zeroes = faulty_pwrite_zeroes,                    \
    .pdiscard = faulty_pdiscard, .flush = faulty_flush, .truncate = faulty_truncate,     \
    .get_allocated_size = faulty_get_allocated_size,                                     \
    .has_zero_init = faulty_has_zero_init, .event = faulty_event,                        \
    .debug_op = faulty_debug_op, .debug_suspended = faulty_debug_suspended,              \
    .block_status = faulty_block_status

/* Under a format: a protocol node over the file. */
static const BlkDriver faulty_driver = {
    FAULTY_DRIVER_COMMON,
    .is_protocol = true,
    .set_perm = faulty_set_perm,
};

/* Over a format: a filter node that answers for the format. */
static const BlkDriver faulty_over_driver = {FAULTY_DRIVER_COMMON};

/* The node over child (taken, even on failure) with the rules parsed
 * (arr taken) and its limits; NULL with the message recorded. */
static BlkNode *faulty_new(const BlkDriver *drv, GArray *arr, const BlkLimits *limits,
                           bool has_limits, BlkNode *child)
{
    if (has_limits && blk_faulty_check_limits(limits, child->request_alignment) < 0) {
        g_array_unref(arr);
        blk_close(child);
        return NULL;
    }
    FaultyState *s = g_new0(FaultyState, 1);
    s->child = child;
    s->rules = arr;
    s->state = 1; /* invariant 4: QEMU's first state */
    s->over_format = drv == &faulty_over_driver;
    s->limits = *limits;
    g_mutex_init(&s->limits.rmw);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->resumed, NULL);
    s->breaks = g_ptr_array_new_with_free_func(break_free);
    s->suspended = g_ptr_array_new();
    for (guint i = 0; i < arr->len; i++) { /* invariant 7: QEMU's event "none" */
        FaultRule *r = &g_array_index(arr, FaultRule, i);
        r->armed = r->arm && r->event == -1 && (r->state == 0 || r->state == s->state);
    }

    BlkNode *img = g_new0(BlkNode, 1);
    img->drv = drv;
    img->opaque = s;
    img->read_only = child->read_only;
    img->cache = child->cache;
    img->size = child->size;
    img->request_alignment = MAX(child->request_alignment, limits->align);
    img->is_block_device = child->is_block_device;
    img->filtered = child; /* block.h invariant 4 */
    img->limits = has_limits ? &s->limits : NULL;
    return img;
}

/* json-name.c invariant 13: file.align over a "blkdebug:" name is the
 * node's alignment limit, checked as invariant 6's. */
int blk_faulty_set_align(BlkNode *img, uint64_t align)
{
    FaultyState *s = img->opaque;
    uint32_t old = s->limits.align;
    int ret;

    g_assert(img->drv->close == faulty_close);
    if (align > INT32_MAX) {
        return blk_error(EINVAL, "Cannot meet constraints with align %" PRIu64, align);
    }
    s->limits.align = (uint32_t)align;
    ret = blk_faulty_check_limits(&s->limits, s->child->request_alignment);
    if (ret < 0) {
        s->limits.align = old;
        return ret;
    }
    img->request_alignment = MAX(s->child->request_alignment, s->limits.align);
    img->limits = &s->limits;
    return 0;
}

/* The rules, then the node over child (taken), or over the file filename
 * opened after them when child is NULL: a bad rule opens nothing. */
static BlkNode *faulty_open(const BlkDriver *drv, const char *rules, BlkNode *child,
                            const char *filename, bool read_only, BlkCacheMode cache)
{
    GArray *arr = g_array_new(FALSE, TRUE, sizeof(FaultRule));
    BlkLimits limits = {0};
    bool has_limits = false;

    if (blk_faulty_parse_rules(rules, arr, &limits, &has_limits) < 0) {
        g_array_unref(arr);
        blk_close(child);
        return NULL;
    }
    if (!child && !(child = blk_open_file(filename, read_only, cache))) {
        g_array_unref(arr);
        return NULL;
    }
    return faulty_new(drv, arr, &limits, has_limits, child);
}

BlkNode *blk_open_faulty(const char *rules, const char *filename, bool read_only,
                         BlkCacheMode cache)
{
    BlkNode *img = faulty_open(&faulty_driver, rules, NULL, filename, read_only, cache);

    if (img) {
        img->filename = g_strdup(filename);
    }
    return img;
}

BlkNode *blk_open_faulty_over(const char *rules, BlkNode *child)
{
    BlkNode *img = faulty_open(&faulty_over_driver, rules, child, NULL, false, 0);

    if (img) {
        img->filename = g_strdup(child->filename);
        img->cluster_size = child->cluster_size;
        img->opts = child->opts;
    }
    return img;
}
