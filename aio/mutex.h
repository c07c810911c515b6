/*
 * aio/mutex.h: a GMutex taken, dropped and waited on where
 * ThreadSanitizer can see it -- the one implementation of the lock calls
 * every lock of qimg goes through (aio/pool.c's, block/order.c's, qcow2.h's
 * metadata lock, the VHD, VHDX, VDI and QED drivers' locks).
 *
 * glib builds GMutex and GCond on raw futexes, which TSan cannot see:
 * without these annotations every table guarded by such a lock reads as a
 * data race under TSan.  Outside TSan they are plain glib calls.
 *
 * Invariants (cited as "mutex.h invariant N"):
 *  1. A GMutex of qimg is taken, dropped and waited on only through
 *     mutex_lock(), mutex_trylock(), mutex_unlock(), mutex_cond_wait() and
 *     mutex_cond_wait_until().
 *  2. Before any of them can sleep -- mutex_lock() on a lock that is taken,
 *     either wait -- ring requests held back for a batch go to the kernel
 *     (aio/plug.h invariant 2), so that no sleeper waits for one.  Only
 *     while some are held (one atomic load otherwise).
 */
#ifndef QIMG_AIO_MUTEX_H
#define QIMG_AIO_MUTEX_H

#include "aio/plug.h"

#include <glib.h>
#include <stdbool.h>

#if defined(__SANITIZE_THREAD__)
#define QIMG_MUTEX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QIMG_MUTEX_TSAN 1
#endif
#endif
#ifdef QIMG_MUTEX_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* The lock if it is free; false at once otherwise. */
static inline bool mutex_trylock(GMutex *m)
{
    bool ok;
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_pre_lock(m, __tsan_mutex_try_lock);
#endif
    ok = g_mutex_trylock(m);
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_post_lock(
        m, __tsan_mutex_try_lock | (ok ? 0 : __tsan_mutex_try_lock_failed), 0);
#endif
    return ok;
}

static inline void mutex_lock(GMutex *m)
{
    if (plug_any_held()) { /* invariant 2: kick only before a sleep */
        if (mutex_trylock(m)) {
            return;
        }
        plug_kick_slow();
    }
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_pre_lock(m, 0);
#endif
    g_mutex_lock(m);
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_post_lock(m, 0, 0);
#endif
}

static inline void mutex_unlock(GMutex *m)
{
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_pre_unlock(m, 0);
#endif
    g_mutex_unlock(m);
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_post_unlock(m, 0);
#endif
}

/* g_cond_wait(): drops m while it waits and retakes it. */
static inline void mutex_cond_wait(GCond *c, GMutex *m)
{
    plug_kick(); /* invariant 2 */
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_pre_unlock(m, 0);
    __tsan_mutex_post_unlock(m, 0);
#endif
    g_cond_wait(c, m);
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_pre_lock(m, 0);
    __tsan_mutex_post_lock(m, 0, 0);
#endif
}

/* g_cond_wait_until(): as mutex_cond_wait(), until end_time (the monotonic
 * clock, g_get_monotonic_time()); false when that time passed. */
static inline bool mutex_cond_wait_until(GCond *c, GMutex *m, gint64 end_time)
{
    bool signalled;

    plug_kick(); /* invariant 2 */
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_pre_unlock(m, 0);
    __tsan_mutex_post_unlock(m, 0);
#endif
    signalled = g_cond_wait_until(c, m, end_time);
#ifdef QIMG_MUTEX_TSAN
    __tsan_mutex_pre_lock(m, 0);
    __tsan_mutex_post_lock(m, 0, 0);
#endif
    return signalled;
}

#endif
