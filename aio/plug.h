/*
 * aio/plug.h: submissions held back for a batch, and the one rule that
 * keeps them from deadlocking: whoever is about to sleep in a lock of
 * qimg hands them to the kernel first (as Linux flushes a task's blk_plug
 * when it sleeps).  block/uring.c holds requests back inside a plug scope
 * (uring.c invariant 7); aio/mutex.h kicks before every sleep.
 *
 * Invariants (cited as "plug.h invariant N"):
 *  1. plug_held counts the requests prepared and held back, in every ring
 *     of the process: raised before a request is held, lowered after the
 *     kernel took it.
 *  2. A thread about to sleep in a lock or a condition of qimg (mutex.h
 *     invariant 1, and the few pthread waits that may wait for a ring
 *     request: qcow2/fastmap.c) calls plug_kick() first: with plug_held
 *     non-zero, every held request goes to the kernel (without waiting for
 *     it to take them: the reaping that makes room may need the lock the
 *     sleeper holds; uring.c retries after its next reap).  So a sleeper
 *     never waits for a request that sits held back -- its own, or one of
 *     a thread that will wait for the sleeper.
 */
#ifndef QIMG_AIO_PLUG_H
#define QIMG_AIO_PLUG_H

#include <stdbool.h>

extern unsigned plug_held; /* atomic: invariant 1 */

/* The function that hands every held request to the kernel (one: the
 * rings' registry, block/uring.c), set before the first is held. */
void plug_set_kick(void (*kick)(void));
void plug_kick_slow(void);

static inline bool plug_any_held(void)
{
    return __atomic_load_n(&plug_held, __ATOMIC_SEQ_CST) != 0;
}

/* Invariant 2: call before sleeping. */
static inline void plug_kick(void)
{
    if (plug_any_held()) {
        plug_kick_slow();
    }
}

#endif
