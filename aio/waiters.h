/*
 * aio/waiters.h: threads that wait under one GMutex, each for a condition
 * of its own, woken only when theirs may have come to hold -- not all of
 * them on every change (block/order.c's allocation turns, qcow2/write.c's
 * in-flight list).  See aio/waiters.c for the invariants.
 */
#ifndef QIMG_AIO_WAITERS_H
#define QIMG_AIO_WAITERS_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

/* A condition over what a waiter waits for (its 'what') and the caller's
 * state or the change just made (opaque). */
typedef bool (*WaitersFn)(const void *what, const void *opaque);

typedef struct Waiter {
    GCond cond;       /* this waiter's own (waiters.c invariant 2) */
    const void *what; /* what it waits for, as the caller describes it */
    struct Waiter *next;
} Waiter;

/* Guarded by the caller's mutex (waiters.c invariant 1); zero-initialised. */
typedef struct Waiters {
    Waiter *head;
    uint64_t sleeps;  /* times a waiter went to sleep (invariant 4) */
    uint64_t wakeups; /* times a waiter woke up (invariant 4) */
} Waiters;

/* Return once ready(what, opaque) holds, sleeping on m (held) until a
 * waiters_wake() whose match holds for what signals this waiter. */
void waiters_wait(Waiters *l, GMutex *m, const void *what, WaitersFn ready,
                  const void *opaque);
/* Signal the waiters whose match(what, opaque) holds; m held.  No system
 * call when none does.  Returns how many were signalled. */
unsigned waiters_wake(Waiters *l, WaitersFn match, const void *opaque);

static inline bool waiters_empty(const Waiters *l)
{
    return l->head == NULL;
}

#endif
