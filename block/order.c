/*
 * block/order.c: allocation turns -- requests on several threads that
 * allocate in the order of their tickets while their data moves in
 * parallel (api/copy.c's pipeline into a qcow2 target: host clusters in
 * guest order, so the output is not fragmented; into a streamOptimized
 * VMDK: compressed grains appended in guest order).
 *
 * Owns: BlkOrder (the ticket whose allocations may run now, the waiters,
 * the deferred jobs) and each thread's ticket.  A driver that allocates
 * calls blk_order_wait() before it plans its allocations and
 * blk_order_allocated() after; both do nothing on a thread without a
 * ticket.  Or it hands its in-order part to blk_order_defer() and does not
 * wait at all.
 *
 * Invariants (cited as "order.c invariant N"):
 *  1. Tickets are 0, 1, 2, ... and each is entered by exactly one thread and
 *     left once; 'next' only grows, by one per left or passed ticket, so
 *     the allocations of ticket t run after those of every ticket < t.
 *  2. A ticket passes the turn at the end of the allocations of the request
 *     marked last (blk_order_mark_last), or when it is left: its other
 *     requests keep the turn through their data writes, the last one's data
 *     moves while the next ticket allocates.  A ticket left before its turn
 *     came never allocated (that waits for the turn): it is marked passed
 *     and its thread goes on; 'next' moves past it when it gets there.
 *  3. blk_order_cancel() wakes every waiter for good: after an error the
 *     order no longer matters, and no thread may wait for a ticket whose
 *     holder stopped.
 *  4. Deferred jobs: the last request of a ticket may hand its in-order
 *     part to the order instead of waiting (blk_order_defer): the ticket
 *     passes at once for its thread, and the job runs when 'next' reaches
 *     it, in the thread that brought 'next' there (the one passing the
 *     ticket before, or the one deferring when its turn has come), together
 *     with the deferred jobs of the tickets after it that are stored with
 *     no ticket missing between (passed ones skipped) and have the same run
 *     function and opaque: one call, in ticket order; 'next' then moves
 *     past them.  One thread runs jobs at a time (only the holder of the
 *     turn moves 'next').
 *  5. Passed tickets and jobs are stored at most ORDER_RING tickets ahead
 *     of 'next', and at most ORDER_MAX_JOBS jobs are stored or running
 *     (the turn's own job aside: it runs at once): a thread further ahead waits (the
 * memory of the jobs stays bounded while a slow ticket holds the turn; passed tickets,
 * which cost nothing, may run far ahead of a slow one).
 *  6. Only the waiters whose condition holds are woken when 'next' moves
 *     (each waits on a condition of its own: aio/waiters.c); cancel wakes
 *     them all.
 *  7. A failed job's error (the first) is kept: later defers return it
 *     and blk_order_drain() does.  After cancel or a failure nothing is
 *     stored and no stored job runs any more: blk_order_drain() hands the
 *     jobs left to their run function to be discarded, so that each job
 *     goes to it exactly once.
 *  8. Each thread counts the time it waits here (blk_thread_times()
 *     turn_ns: the turn in blk_order_wait, a pass waiting for room in
 *     the ring); the count is the thread's, so it takes no lock.
 */
#include "block/block.h"

#include "aio/mutex.h"
#include "aio/waiters.h"

#include <errno.h>
#include <time.h>

#define ORDER_RING 4096u   /* tickets stored ahead of 'next' (invariant 5) */
#define ORDER_MAX_JOBS 64u /* jobs stored (invariant 5) */

/* What a waiter waits for (invariant 6). */
typedef enum OrderWait {
    WAIT_TURN, /* next == ticket */
    WAIT_PASS, /* room to store the ticket passed */
    WAIT_JOB,  /* room to store a job of the ticket */
} OrderWait;

typedef struct OrderWaiter {
    uint64_t ticket;
    OrderWait what;
} OrderWaiter;

/* A ticket ahead of 'next' that passed (invariant 2) or left a job (4). */
typedef struct OrderSlot {
    uint64_t ticket;
    BlkOrderJob *job; /* NULL: passed, nothing to run */
    bool used;
} OrderSlot;

struct BlkOrder {
    GMutex lock;
    uint64_t next;              /* [lock] invariant 1 */
    bool cancelled;             /* [lock] invariant 3 */
    bool running;               /* [lock] invariant 4: a thread runs jobs */
    Waiters waiters;            /* [lock] OrderWaiters, invariant 6 */
    OrderSlot slot[ORDER_RING]; /* [lock] ticket t's at t % RING (5) */
    unsigned stored;            /* [lock] used slots */
    unsigned jobs;              /* [lock] slots with a job (5) */
    int error;                  /* [lock] invariant 7: the first failure */
    char *error_msg;            /* [lock] its message */
};

/* This thread's ticket (invariant 1). */
static __thread struct {
    BlkOrder *order;
    uint64_t ticket;
    bool last, passed;
} tls;

BlkOrder *blk_order_new(void)
{
    BlkOrder *o = g_new0(BlkOrder, 1);

    g_mutex_init(&o->lock);
    return o;
}

void blk_order_free(BlkOrder *o)
{
    if (o) {
        g_assert(o->stored == 0 && waiters_empty(&o->waiters)); /* 7: drained */
        g_mutex_clear(&o->lock);
        g_free(o->error_msg);
        g_free(o);
    }
}

/* Has what ticket waits for come (invariants 5, 6)?  o->lock held. */
static bool ready_locked(const BlkOrder *o, uint64_t ticket, OrderWait what)
{
    switch (what) {
    case WAIT_TURN:
        return o->next >= ticket;
    case WAIT_JOB:
        if (o->jobs >= ORDER_MAX_JOBS && ticket != o->next) {
            return false; /* (the turn's own job is always stored: it runs) */
        }
        break;
    case WAIT_PASS:
        break;
    }
    return ticket < o->next + ORDER_RING;
}

/* Invariant 6: has the waiter's condition come, or was the order
 * cancelled?  (WaitersFn: what is an OrderWaiter, opaque the order.) */
static bool waiter_ready(const void *what, const void *opaque)
{
    const OrderWaiter *w = what;
    const BlkOrder *o = opaque;
    return o->cancelled || ready_locked(o, w->ticket, w->what);
}

/* Invariant 6: wake the waiters whose condition holds (all if cancelled). */
static void wake_locked(BlkOrder *o)
{
    waiters_wake(&o->waiters, waiter_ready, o);
}

/* Wait for what (or cancel); o->lock held. */
static void wait_locked(BlkOrder *o, uint64_t ticket, OrderWait what)
{
    OrderWaiter w = {.ticket = ticket, .what = what};

    waiters_wait(&o->waiters, &o->lock, &w, waiter_ready, o);
}

void blk_order_cancel(BlkOrder *o)
{
    mutex_lock(&o->lock);
    o->cancelled = true;
    wake_locked(o);
    mutex_unlock(&o->lock);
}

/* Run a batch (invariant 4) outside the lock; keep the first failure
 * (invariant 7).  This thread's own error message is left as it was. */
static void run_batch(BlkOrder *o, BlkOrderJob *first, bool discard)
{
    int own_code = blk_error_code();
    g_autofree char *own = blk_error_take();
    int ret = first->run(first->opaque, first, discard);

    if (ret < 0) {
        g_autofree char *msg = blk_error_take();
        mutex_lock(&o->lock);
        if (!o->error) {
            o->error = ret;
            o->error_msg = msg ? g_steal_pointer(&msg) : g_strdup(g_strerror(-ret));
            o->cancelled = true; /* invariant 7: nothing more is deferred */
            wake_locked(o);
        }
        mutex_unlock(&o->lock);
    }
    blk_error_clear();
    if (own) {
        blk_error(own_code ? own_code : EIO, "%s", own);
    }
}

/* Ticket t's slot if it is stored (invariant 5); o->lock held. */
static OrderSlot *stored_locked(BlkOrder *o, uint64_t t)
{
    OrderSlot *sl = &o->slot[t % ORDER_RING];
    return sl->used && sl->ticket == t ? sl : NULL;
}

/* (A job taken out still counts in o->jobs until it has run: invariant 5.) */
static void clear_locked(BlkOrder *o, OrderSlot *sl)
{
    sl->used = false;
    sl->job = NULL;
    o->stored--;
}

/* From ticket t on, the stored tickets with no one missing between: the
 * jobs among them that share the first job's run and opaque (invariant
 * 4), in ticket order (*n of them), their slots and the passed ones'
 * cleared; NULL if none.  *end: the first ticket not taken.  o->lock
 * held. */
static BlkOrderJob *take_batch_locked(BlkOrder *o, uint64_t t, uint64_t *end, unsigned *n)
{
    BlkOrderJob *first = NULL, **tail = &first;
    OrderSlot *sl;

    *n = 0;
    for (unsigned i = 0; i < ORDER_RING && (sl = stored_locked(o, t)); i++, t++) {
        BlkOrderJob *j = sl->job;
        if (j && first && (j->run != first->run || j->opaque != first->opaque)) {
            break;
        }
        if (j) {
            *tail = j;
            tail = &j->next;
            (*n)++;
        }
        clear_locked(o, sl);
    }
    *tail = NULL;
    *end = t;
    return first;
}

/* Invariant 4: this thread brought 'next' where it is; move it past the
 * tickets stored from there on, running their jobs.  o->lock held (dropped
 * while a batch runs). */
static void run_jobs_locked(BlkOrder *o)
{
    while (!o->cancelled && stored_locked(o, o->next)) { /* 7: not after cancel */
        uint64_t end;
        unsigned n;
        BlkOrderJob *j;

        g_assert(!o->running); /* invariant 4: only the turn's holder */
        j = take_batch_locked(o, o->next, &end, &n);
        if (j) {
            o->running = true;
            mutex_unlock(&o->lock);
            run_batch(o, j, false);
            mutex_lock(&o->lock);
            o->running = false;
            o->jobs -= n; /* invariant 5: done with their memory */
        }
        o->next = end; /* invariant 1 */
        wake_locked(o);
    }
}

static __thread BlkThreadTimes thread_times; /* invariant 8 */

BlkThreadTimes *blk_thread_times(void)
{
    return &thread_times;
}

uint64_t blk_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void blk_order_enter(BlkOrder *o, uint64_t ticket)
{
    g_assert(!tls.order); /* invariant 1: one ticket per thread at a time */
    tls.order = o;
    tls.ticket = ticket;
    tls.last = false;
    tls.passed = false;
}

void blk_order_mark_last(void)
{
    tls.last = true;
}

void blk_order_wait(void)
{
    BlkOrder *o = tls.order;

    if (!o || tls.passed) {
        return;
    }
    uint64_t t0 = blk_now_ns();
    mutex_lock(&o->lock);
    wait_locked(o, tls.ticket, WAIT_TURN);
    mutex_unlock(&o->lock);
    thread_times.turn_ns += blk_now_ns() - t0; /* invariant 8 */
}

/* Store this thread's ticket (invariants 2, 4, 5); o->lock held. */
static void store_locked(BlkOrder *o, BlkOrderJob *job)
{
    OrderSlot *sl = &o->slot[tls.ticket % ORDER_RING];

    g_assert(tls.ticket >= o->next && !sl->used &&
             ready_locked(o, tls.ticket, job ? WAIT_JOB : WAIT_PASS)); /* invariant 5 */
    if (job) {
        job->ticket = tls.ticket;
        job->next = NULL;
    }
    sl->ticket = tls.ticket;
    sl->job = job;
    sl->used = true;
    o->stored++;
    o->jobs += job != NULL;
}

/* Invariant 2: hand the turn on (running the jobs that were waiting for
 * it, invariant 4), or mark the ticket passed if its turn has not come. */
static void order_pass(void)
{
    BlkOrder *o = tls.order;

    if (!o || tls.passed) {
        return;
    }
    uint64_t t0 = blk_now_ns();
    mutex_lock(&o->lock);
    wait_locked(o, tls.ticket, WAIT_PASS);     /* invariant 5 */
    thread_times.turn_ns += blk_now_ns() - t0; /* invariant 8 */
    if (o->next == tls.ticket) {
        o->next++;
        wake_locked(o);
        run_jobs_locked(o);
    } else if (!o->cancelled) { /* invariant 2: passed before its turn */
        store_locked(o, NULL);
    }
    mutex_unlock(&o->lock);
    tls.passed = true;
}

void blk_order_allocated(void)
{
    if (tls.last) {
        order_pass();
    }
}

void blk_order_leave(void)
{
    order_pass();
    tls.order = NULL;
}

int blk_order_defer(BlkOrderJob *job)
{
    BlkOrder *o = tls.order;
    int ret = 0;

    if (!o || tls.passed || !tls.last) {
        return 0; /* no turn to hand over, or more requests of it follow */
    }
    mutex_lock(&o->lock);
    wait_locked(o, tls.ticket, WAIT_JOB); /* invariant 5 */
    if (o->error) {
        ret = blk_error(-o->error, "%s", o->error_msg); /* invariant 7 */
    } else if (!o->cancelled) {
        store_locked(o, job);
        tls.passed = true;
        ret = 1;
        run_jobs_locked(o); /* runs if the turn is this ticket's */
    }
    mutex_unlock(&o->lock);
    return ret;
}

int blk_order_drain(BlkOrder *o)
{
    int ret = 0;

    if (!o) {
        return 0;
    }
    mutex_lock(&o->lock);
    g_assert(!o->running && (!o->stored || o->cancelled)); /* invariants 4, 7 */
    /* invariant 7: after cancel, the jobs left are discarded (every stored
     * ticket lies in [next, next + RING), invariant 5) */
    for (uint64_t t = o->next; o->stored && t < o->next + ORDER_RING; t++) {
        OrderSlot *sl = stored_locked(o, t);
        BlkOrderJob *j = sl ? sl->job : NULL;
        if (sl) {
            clear_locked(o, sl);
        }
        if (j) {
            o->jobs--;
            j->next = NULL;
            mutex_unlock(&o->lock);
            run_batch(o, j, true);
            mutex_lock(&o->lock);
        }
    }
    g_assert(o->stored == 0 && o->jobs == 0);
    if (o->error) {
        ret = blk_error(-o->error, "%s", o->error_msg);
    }
    mutex_unlock(&o->lock);
    return ret;
}
