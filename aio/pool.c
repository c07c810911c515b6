/*
 * aio/pool.c: the task pool (see pool.h for the API).
 *
 * Owns: the worker threads, the FIFO ring of queued tasks, the count of tasks
 * queued or running, and the sticky error.  Everything in struct Pool except
 * the immutable fields (max, threads, nthreads) is protected by Pool.lock.
 * It does not own task opaques: a queued task's opaque belongs to its function.
 *
 * Invariants (from pool.h):
 *  1. Tasks start in submission order (FIFO queue); they may finish in any order.
 *  2. pool_wait_all() returns only when no task is queued or running.
 *  3. The sticky error is the first error any task returned (by completion time).
 *  4. A task function owns its opaque; when pool_submit() fails, the task was
 *     not queued and the caller still owns it.
 *  7. pool_run_unclaimed() takes a task only while nqueued > task_wakes: the
 *     first task_wakes queued tasks are left to the workers woken for them.
 *
 * Internal bookkeeping (kept under Pool.lock):
 *  - Each condition variable has a count of the threads waiting on it, kept
 *    by pool_wait_locked(); it is signalled only when that count is not 0
 *    (glib's signal is a system call even with nobody to wake: at depth 32
 *    that was a futex call per task for space_cond alone, issue 30).
 *  - A submitter wakes a worker after it dropped the lock, so the worker
 *    does not wake into a lock still held (a futex wait and wake saved; the
 *    submitter may still use p then: pool_free's rule).  It wakes one only
 *    when more workers wait than wake-ups are on their way (task_wakes,
 *    taken back by each worker that returns from its wait): a worker
 *    signalled but not yet running is not counted twice, so a second task
 *    wakes a second worker instead of none.
 *  - 0 <= nqueued <= in_flight <= max, so the ring (max slots) never overflows
 *    and pool_submit() never allocates.
 *  - in_flight - nqueued is the number of tasks running; in_flight drops only
 *    after a task's function returned and its error (if any) was recorded, so
 *    anyone woken by in_flight falling sees that error (invariants 2, 3).
 *  - Tasks already queued when an error arrives still run: their functions own
 *    their opaques and must get the chance to release them (invariant 4).
 *
 * Tasks must not call pool_wait_all() or pool_free() on their own pool (it
 * would wait for itself; asserted).  A task may submit to its own pool, but if
 * every worker does so while the pool is full they deadlock.
 */
#include "aio/pool.h"
#include "aio/mutex.h"

#include <errno.h>
#include <glib.h>
#include <limits.h>

typedef struct PoolTask {
    PoolFunc fn;
    void *opaque;
} PoolTask;

struct Pool {
    GMutex lock;
    GCond task_cond;  /* a task was queued, or stopping was set */
    GCond space_cond; /* in_flight fell below max, or an error was recorded */
    GCond idle_cond;  /* in_flight reached 0 */
    /* threads waiting on each (see "Internal bookkeeping") */
    unsigned task_waiters, space_waiters, idle_waiters;
    unsigned task_wakes; /* task_cond signals not yet taken back by a worker */

    PoolTask *ring; /* cap slots; queued tasks are ring[head .. head+nqueued) */
    unsigned cap;   /* max, or for an unbounded pool grown as needed */
    unsigned head;
    unsigned nqueued;
    unsigned in_flight; /* queued + running */
    int error;          /* sticky: first task error, or 0 (invariant 3) */
    bool stopping;      /* set by pool_free(); workers exit once the ring is empty */

    unsigned max; /* immutable after pool_new() */
    GThread **threads;
    unsigned nthreads;
};

/* The pool whose task the current thread is running, if any. */
static _Thread_local Pool *pool_current;

/* Pool.lock goes through aio/mutex.h (mutex.h invariant 1). */
static void pool_lock(Pool *p)
{
    mutex_lock(&p->lock);
}

static void pool_unlock(Pool *p)
{
    mutex_unlock(&p->lock);
}

/* Drops and retakes p->lock; *waiters counts the threads in it. */
static void pool_wait_locked(Pool *p, GCond *cond, unsigned *waiters)
{
    (*waiters)++;
    mutex_cond_wait(cond, &p->lock);
    (*waiters)--;
}

/* Called with p->lock held and a task queued: dequeue the oldest. */
static PoolTask pool_pop_locked(Pool *p)
{
    PoolTask t = p->ring[p->head]; /* invariant 1: the oldest is started first */

    g_assert(p->nqueued > 0);
    p->head = (p->head + 1) % p->cap;
    p->nqueued--;
    return t;
}

/* Called with p->lock held; returns false once stopping and nothing is queued. */
static bool pool_take_locked(Pool *p, PoolTask *out)
{
    while (p->nqueued == 0 && !p->stopping) {
        pool_wait_locked(p, &p->task_cond, &p->task_waiters);
        if (p->task_wakes > 0) {
            p->task_wakes--; /* this wake-up, or one another worker missed */
        }
    }
    if (p->nqueued == 0) {
        return false;
    }
    *out = pool_pop_locked(p);
    return true;
}

/* Called with p->lock held, after a task's function returned ret. */
static void pool_finish_locked(Pool *p, int ret)
{
    g_assert(ret <= 0); /* PoolFunc contract: 0 or -errno */
    g_assert(p->in_flight > p->nqueued);

    p->in_flight--;
    if (ret < 0 && p->error == 0) {
        /* Invariant 3: only the first completed error sticks.  Wake every
         * blocked submitter: they now fail instead of waiting for space. */
        p->error = ret;
        if (p->space_waiters) {
            g_cond_broadcast(&p->space_cond);
        }
    } else if (p->space_waiters) {
        g_cond_signal(&p->space_cond); /* one slot is free */
    }
    if (p->in_flight == 0 && p->idle_waiters) {
        g_cond_broadcast(&p->idle_cond); /* invariant 2 */
    }
}

static gpointer pool_worker(gpointer opaque)
{
    Pool *p = opaque;
    PoolTask t;

    pool_current = p;
    pool_lock(p);
    while (pool_take_locked(p, &t)) {
        pool_unlock(p);
        int ret = t.fn(t.opaque); /* the task now owns t.opaque (invariant 4) */
        pool_lock(p);
        pool_finish_locked(p, ret);
    }
    pool_unlock(p);
    pool_current = NULL;
    return NULL;
}

/* Tells the workers to exit once the ring is empty and joins them. */
static void pool_stop_threads(Pool *p)
{
    pool_lock(p);
    p->stopping = true;
    g_cond_broadcast(&p->task_cond);
    pool_unlock(p);

    for (unsigned i = 0; i < p->nthreads; i++) {
        g_thread_join(p->threads[i]);
    }
    p->nthreads = 0;
}

static void pool_destroy(Pool *p)
{
#ifdef POOL_TSAN
    __tsan_mutex_destroy(&p->lock, 0);
#endif
    g_mutex_clear(&p->lock);
    g_cond_clear(&p->task_cond);
    g_cond_clear(&p->space_cond);
    g_cond_clear(&p->idle_cond);
    g_free(p->threads);
    g_free(p->ring);
    g_free(p);
}

/*
 * Returns NULL if max_in_flight is 0 (a caller bug), or if memory or threads
 * cannot be had (the process is at its limits; the caller reports -ENOMEM or
 * -EAGAIN), rather than aborting.
 */
static Pool *pool_create(unsigned threads, unsigned max_in_flight)
{
    if (threads == 0 || max_in_flight == 0) {
        return NULL;
    }

    Pool *p = g_try_new0(Pool, 1);
    if (!p) {
        return NULL;
    }
    g_mutex_init(&p->lock);
    g_cond_init(&p->task_cond);
    g_cond_init(&p->space_cond);
    g_cond_init(&p->idle_cond);
    p->max = max_in_flight;
    p->cap = MIN(max_in_flight, MAX(threads * 2, 16u));
    p->ring = g_try_new(PoolTask, p->cap);
    p->threads = g_try_new0(GThread *, threads);
    if (!p->ring || !p->threads) {
        pool_destroy(p);
        return NULL;
    }

    for (unsigned i = 0; i < threads; i++) {
        GError *err = NULL;
        GThread *t = g_thread_try_new("qimg-pool", pool_worker, p, &err);
        if (!t) {
            g_error_free(err);
            pool_stop_threads(p);
            pool_destroy(p);
            return NULL;
        }
        p->threads[p->nthreads++] = t;
    }
    return p;
}

Pool *pool_new(unsigned max_in_flight)
{
    return pool_create(max_in_flight, max_in_flight);
}

Pool *pool_new_unbounded(unsigned threads)
{
    return pool_create(threads, UINT_MAX);
}

/* Invariant 5: an unbounded pool's ring doubles when full.  Lock held. */
static int pool_grow_locked(Pool *p)
{
    unsigned ncap = p->cap > UINT_MAX / 2 ? UINT_MAX : p->cap * 2;
    PoolTask *ring = ncap > p->cap ? g_try_new(PoolTask, ncap) : NULL;

    if (!ring) {
        return -ENOMEM;
    }
    for (unsigned i = 0; i < p->nqueued; i++) {
        ring[i] = p->ring[(p->head + i) % p->cap];
    }
    g_free(p->ring);
    p->ring = ring;
    p->head = 0;
    p->cap = ncap;
    return 0;
}

/* No other thread may use p once pool_free() has been called. */
void pool_free(Pool *p)
{
    if (!p) {
        return;
    }
    /* The error has nowhere to go; a caller that cares calls pool_wait_all(). */
    (void)pool_wait_all(p);
    pool_stop_threads(p);
    pool_destroy(p);
}

/*
 * A submitter blocked on a full pool returns the sticky error as soon as one
 * is recorded, rather than queuing behind it.
 */
int pool_submit(Pool *p, PoolFunc fn, void *opaque)
{
    bool wake = false;
    int ret;

    g_assert(fn);
    pool_lock(p);
    g_assert(!p->stopping);
    while (p->error == 0 && p->in_flight >= p->max) {
        pool_wait_locked(p, &p->space_cond, &p->space_waiters);
    }
    ret = p->error;
    if (ret == 0 && p->nqueued == p->cap) {
        ret = pool_grow_locked(p);
    }
    if (ret == 0) {
        g_assert(p->nqueued < p->cap);
        p->ring[(p->head + p->nqueued) % p->cap] = (PoolTask){.fn = fn, .opaque = opaque};
        p->nqueued++;
        p->in_flight++;
        /* a worker that is not waiting takes the task when it looks next */
        if (p->task_waiters > p->task_wakes) {
            p->task_wakes++;
            wake = true;
        }
    }
    /* else invariant 4: not queued, the caller keeps opaque. */
    pool_unlock(p);
    if (wake) {
        g_cond_signal(&p->task_cond); /* after the unlock: see the top */
    }
    return ret;
}

/* Invariants 6, 7: run the oldest queued task here; with unclaimed, only
 * one that no woken worker is on its way to. */
static bool pool_run_here(Pool *p, bool unclaimed)
{
    PoolTask t;
    Pool *outer = pool_current;
    int ret;

    pool_lock(p);
    if (p->nqueued == 0 || (unclaimed && p->nqueued <= p->task_wakes)) {
        pool_unlock(p);
        return false;
    }
    t = pool_pop_locked(p);
    pool_unlock(p);
    pool_current = p;
    ret = t.fn(t.opaque);
    pool_current = outer;
    pool_lock(p);
    pool_finish_locked(p, ret);
    pool_unlock(p);
    return true;
}

bool pool_run_one(Pool *p)
{
    return pool_run_here(p, false);
}

bool pool_run_unclaimed(Pool *p)
{
    return pool_run_here(p, true);
}

int pool_wait_all(Pool *p)
{
    int ret;

    g_assert(pool_current != p); /* a task would wait for itself */
    pool_lock(p);
    /* Invariant 2. */
    while (p->in_flight > 0) {
        pool_wait_locked(p, &p->idle_cond, &p->idle_waiters);
    }
    ret = p->error;
    pool_unlock(p);
    return ret;
}

int pool_status(Pool *p)
{
    int ret;

    pool_lock(p);
    ret = p->error;
    pool_unlock(p);
    return ret;
}

void pool_reset_error(Pool *p)
{
    pool_lock(p);
    p->error = 0;
    pool_unlock(p);
}

unsigned pool_max_in_flight(Pool *p)
{
    return p->max; /* immutable: no lock */
}

unsigned pool_in_flight(Pool *p)
{
    unsigned n;

    pool_lock(p);
    n = p->in_flight;
    pool_unlock(p);
    return n;
}
