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
 *     moves while the next ticket allocates.
 *  3. blk_order_cancel() wakes every waiter for good: after an error the
 *     order no longer matters, and no thread may wait for a ticket whose
 *     holder stopped.
 *  4. Deferred jobs: the last request of a ticket may hand its in-order
 *     part to the order instead of waiting (blk_order_defer): the ticket
 *     passes at once for its thread, and the job runs when 'next' reaches
 *     it, in the thread that brought 'next' there (the one passing the
 *     ticket before, or the one deferring when its turn has come), together
 *     with the deferred jobs of the tickets right after it that have the
 *     same run function and opaque (one call, in ticket order); 'next'
 *     then moves past them.  One thread runs jobs at a time (only the
 *     holder of the turn moves 'next').
 *  5. At most ORDER_WINDOW tickets are ahead of 'next' with a job stored:
 *     a deferring thread further ahead waits (memory stays bounded while a
 *     slow ticket holds the turn).
 *  6. Only the waiters whose condition holds are woken when 'next' moves
 *     (each waits on a condition of its own); cancel wakes them all.
 *  7. A failed job's error (the first) is kept: later defers return it
 *     and blk_order_drain() does.  After cancel or a failure nothing is
 *     deferred and no stored job runs any more: blk_order_drain() hands
 *     the jobs left to their run function to be discarded, so that each
 *     job goes to it exactly once.
 */
#include "block/block.h"

#include <errno.h>
#include <pthread.h>

#define ORDER_WINDOW 64u /* invariant 5 */

typedef struct OrderWaiter {
    uint64_t until; /* wake when next >= until */
    pthread_cond_t cond;
    struct OrderWaiter *next;
} OrderWaiter;

struct BlkOrder {
    pthread_mutex_t lock;
    uint64_t next;                   /* [lock] invariant 1 */
    bool cancelled;                  /* [lock] invariant 3 */
    bool running;                    /* [lock] invariant 4: a thread runs jobs */
    OrderWaiter *waiters;            /* [lock] invariant 6 */
    BlkOrderJob *slot[ORDER_WINDOW]; /* [lock] ticket t's job at t % WINDOW */
    unsigned stored;                 /* [lock] jobs in slot[] */
    int error;                       /* [lock] invariant 7: the first failure */
    char *error_msg;                 /* [lock] its message */
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

    pthread_mutex_init(&o->lock, NULL);
    return o;
}

void blk_order_free(BlkOrder *o)
{
    if (o) {
        g_assert(o->stored == 0 && !o->waiters); /* invariant 7: drained */
        pthread_mutex_destroy(&o->lock);
        g_free(o->error_msg);
        g_free(o);
    }
}

/* Invariant 6: wake the waiters whose condition holds (all if cancelled). */
static void wake_locked(BlkOrder *o)
{
    for (OrderWaiter *w = o->waiters; w; w = w->next) {
        if (o->cancelled || o->next >= w->until) {
            pthread_cond_signal(&w->cond);
        }
    }
}

/* Wait until next >= until (or cancel); o->lock held. */
static void wait_locked(BlkOrder *o, uint64_t until)
{
    OrderWaiter w = {.until = until};

    if (o->next >= until || o->cancelled) {
        return;
    }
    pthread_cond_init(&w.cond, NULL);
    w.next = o->waiters;
    o->waiters = &w;
    while (o->next < until && !o->cancelled) {
        pthread_cond_wait(&w.cond, &o->lock);
    }
    for (OrderWaiter **p = &o->waiters;; p = &(*p)->next) {
        if (*p == &w) {
            *p = w.next;
            break;
        }
    }
    pthread_cond_destroy(&w.cond);
}

void blk_order_cancel(BlkOrder *o)
{
    pthread_mutex_lock(&o->lock);
    o->cancelled = true;
    wake_locked(o);
    pthread_mutex_unlock(&o->lock);
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
        pthread_mutex_lock(&o->lock);
        if (!o->error) {
            o->error = ret;
            o->error_msg = msg ? g_steal_pointer(&msg) : g_strdup(g_strerror(-ret));
            o->cancelled = true; /* invariant 7: nothing more is deferred */
            wake_locked(o);
        }
        pthread_mutex_unlock(&o->lock);
    }
    blk_error_clear();
    if (own) {
        blk_error(own_code ? own_code : EIO, "%s", own);
    }
}

/* Take the jobs stored from ticket t on that share the first one's run and
 * opaque (invariant 4), in ticket order; o->lock held.  *end: the ticket
 * after the last one taken. */
static BlkOrderJob *take_batch_locked(BlkOrder *o, uint64_t t, uint64_t *end)
{
    BlkOrderJob *first = o->slot[t % ORDER_WINDOW], **tail = &first;

    g_assert(first && first->ticket == t);
    for (unsigned n = 0; n < ORDER_WINDOW; n++, t++) {
        BlkOrderJob *j = o->slot[t % ORDER_WINDOW];
        if (!j || j->ticket != t || j->run != first->run || j->opaque != first->opaque) {
            break;
        }
        o->slot[t % ORDER_WINDOW] = NULL;
        o->stored--;
        *tail = j;
        tail = &j->next;
    }
    *tail = NULL;
    *end = t;
    return first;
}

/* Invariant 4: this thread brought 'next' where it is; run the jobs stored
 * from there on, moving 'next' past them.  o->lock held (dropped while a
 * batch runs). */
static void run_jobs_locked(BlkOrder *o)
{
    for (;;) {
        BlkOrderJob *j = o->slot[o->next % ORDER_WINDOW];
        uint64_t end;

        if (!j || j->ticket != o->next || o->cancelled) {
            return; /* invariant 7: after cancel, the jobs wait for drain */
        }
        g_assert(!o->running); /* invariant 4: only the turn's holder */
        o->running = true;
        j = take_batch_locked(o, o->next, &end);
        pthread_mutex_unlock(&o->lock);
        run_batch(o, j, false);
        pthread_mutex_lock(&o->lock);
        o->running = false;
        o->next = end; /* invariant 1 */
        wake_locked(o);
    }
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
    pthread_mutex_lock(&o->lock);
    wait_locked(o, tls.ticket);
    pthread_mutex_unlock(&o->lock);
}

/* Invariant 2: wait for the turn, then hand it on (running the jobs that
 * were waiting for it, invariant 4). */
static void order_pass(void)
{
    BlkOrder *o = tls.order;

    if (!o || tls.passed) {
        return;
    }
    pthread_mutex_lock(&o->lock);
    wait_locked(o, tls.ticket);
    if (o->next == tls.ticket) {
        o->next++;
        wake_locked(o);
        run_jobs_locked(o);
    }
    g_assert(o->cancelled || o->next > tls.ticket); /* invariant 1 */
    pthread_mutex_unlock(&o->lock);
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
    pthread_mutex_lock(&o->lock);
    if (tls.ticket >= ORDER_WINDOW) { /* invariant 5 */
        wait_locked(o, tls.ticket - ORDER_WINDOW + 1);
    }
    if (o->error) {
        ret = blk_error(-o->error, "%s", o->error_msg); /* invariant 7 */
    } else if (!o->cancelled) {
        g_assert(tls.ticket >= o->next && tls.ticket < o->next + ORDER_WINDOW &&
                 !o->slot[tls.ticket % ORDER_WINDOW]);
        job->ticket = tls.ticket;
        job->next = NULL;
        o->slot[tls.ticket % ORDER_WINDOW] = job;
        o->stored++;
        tls.passed = true;
        ret = 1;
        run_jobs_locked(o); /* runs if the turn is this ticket's */
    }
    pthread_mutex_unlock(&o->lock);
    return ret;
}

int blk_order_drain(BlkOrder *o)
{
    int ret = 0;

    if (!o) {
        return 0;
    }
    pthread_mutex_lock(&o->lock);
    g_assert(!o->running && (!o->stored || o->cancelled)); /* invariants 4, 7 */
    /* invariant 7: after cancel, the jobs left are discarded (every stored
     * ticket lies in [next, next + WINDOW), invariant 5) */
    for (uint64_t t = o->next; o->stored && t < o->next + ORDER_WINDOW; t++) {
        BlkOrderJob *j = o->slot[t % ORDER_WINDOW];
        uint64_t end;
        if (j && j->ticket == t) {
            j = take_batch_locked(o, t, &end);
            pthread_mutex_unlock(&o->lock);
            run_batch(o, j, true);
            pthread_mutex_lock(&o->lock);
            t = end - 1;
        }
    }
    g_assert(o->stored == 0);
    if (o->error) {
        ret = blk_error(-o->error, "%s", o->error_msg);
    }
    pthread_mutex_unlock(&o->lock);
    return ret;
}
