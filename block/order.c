/*
 * block/order.c: allocation turns -- requests on several threads that
 * allocate in the order of their tickets while their data moves in
 * parallel (api/copy.c's pipeline into a qcow2 target: host clusters in
 * guest order, so the output is not fragmented).
 *
 * Owns: BlkOrder (the ticket whose allocations may run now) and each
 * thread's ticket.  A driver that allocates calls blk_order_wait() before it
 * plans its allocations and blk_order_allocated() after; both do nothing on
 * a thread without a ticket.
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
 */
#include "block/block.h"

#include <pthread.h>

struct BlkOrder {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t next;  /* [lock] invariant 1 */
    bool cancelled; /* [lock] invariant 3 */
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
    pthread_cond_init(&o->cond, NULL);
    return o;
}

void blk_order_free(BlkOrder *o)
{
    if (o) {
        pthread_mutex_destroy(&o->lock);
        pthread_cond_destroy(&o->cond);
        g_free(o);
    }
}

void blk_order_cancel(BlkOrder *o)
{
    pthread_mutex_lock(&o->lock);
    o->cancelled = true;
    pthread_cond_broadcast(&o->cond);
    pthread_mutex_unlock(&o->lock);
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
    while (o->next < tls.ticket && !o->cancelled) {
        pthread_cond_wait(&o->cond, &o->lock);
    }
    pthread_mutex_unlock(&o->lock);
}

/* Invariant 2: wait for the turn, then hand it on. */
static void order_pass(void)
{
    BlkOrder *o = tls.order;

    if (!o || tls.passed) {
        return;
    }
    blk_order_wait();
    pthread_mutex_lock(&o->lock);
    if (o->next == tls.ticket) {
        o->next++;
        pthread_cond_broadcast(&o->cond);
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
