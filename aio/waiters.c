/*
 * aio/waiters.c: per-condition waiting under one mutex (aio/waiters.h) --
 * the one implementation of "wake only the waiters whose condition may
 * hold" (block/order.c invariant 6, qcow2/write.c invariant 6).
 *
 * Owns: the list of waiters (Waiters) and each waiter's GCond, which lives
 * on its thread's stack while it is in waiters_wait().
 *
 * Invariants (cited as "waiters.c invariant N"):
 *  1. A Waiters and every waiter on it are guarded by the caller's mutex:
 *     every call is made with it held.  A waiter is on the list exactly
 *     while its thread is inside waiters_wait() and its condition did not
 *     hold at the last check.
 *  2. Each waiter sleeps on a GCond of its own, so waiters_wake() signals
 *     the ones whose match holds and no other thread wakes: a change that
 *     concerns none of them costs no system call and no context switch.
 *  3. waiters_wait() returns only when its ready condition holds, checked
 *     under the mutex after every wake-up (spurious ones included).  So a
 *     caller's match may be wider than ready (a waiter woken too early
 *     sleeps again) but must hold for every change that can make ready
 *     true, or the waiter sleeps forever.
 *  4. sleeps and wakeups count the waits and the wake-ups of all waiters on
 *     the list (tests prove with them which changes woke whom).
 */
#include "aio/waiters.h"

#include "aio/mutex.h"

void waiters_wait(Waiters *l, GMutex *m, const void *what, WaitersFn ready,
                  const void *opaque)
{
    Waiter w = {.what = what};

    if (ready(what, opaque)) {
        return;
    }
    g_cond_init(&w.cond);
    w.next = l->head;
    l->head = &w; /* invariant 1 */
    do {
        l->sleeps++; /* invariant 4 */
        mutex_cond_wait(&w.cond, m);
        l->wakeups++;
    } while (!ready(what, opaque)); /* invariant 3 */
    for (Waiter **p = &l->head;; p = &(*p)->next) {
        if (*p == &w) {
            *p = w.next;
            break;
        }
    }
    g_cond_clear(&w.cond);
}

unsigned waiters_wake(Waiters *l, WaitersFn match, const void *opaque)
{
    unsigned n = 0;

    for (Waiter *w = l->head; w; w = w->next) {
        if (match(w->what, opaque)) { /* invariant 2 */
            g_cond_signal(&w->cond);
            n++;
        }
    }
    return n;
}
