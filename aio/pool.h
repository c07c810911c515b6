/*
 * aio/pool.h: the task pool, the only source of parallelism in qimg.
 *
 * A fixed set of worker threads runs submitted tasks.  At most
 * 'max_in_flight' tasks are queued or running at once; submitting while
 * full blocks until one finishes (backpressure).  The first task error is
 * sticky: once a task returned < 0, later submissions fail with that error
 * without running, and every wait returns it until pool_reset_error().
 *
 * Invariants:
 *  1. Tasks start in submission order (FIFO queue); they may finish in any order.
 *  2. pool_wait_all() returns only when no task is queued or running.
 *  3. The sticky error is the first error any task returned (by completion time).
 *  4. A task function owns its opaque; when pool_submit() fails, the task was
 *     not queued and the caller still owns it.
 *  5. An unbounded pool (pool_new_unbounded) never blocks a submitter: its
 *     queue grows with memory (-ENOMEM when it cannot); 'threads' tasks run
 *     at once.
 *  6. pool_run_one() lets a waiting caller run a queued task itself, in
 *     queue order, counted like a worker's (invariants 1-3 hold).
 *  7. pool_run_unclaimed() does so only with a task that no worker has been
 *     woken for: while more tasks are queued than wake-ups are on their way
 *     to idle workers.  A task a woken worker is about to take is left to
 *     it, so the caller is not tied up in work the pool would have run in
 *     parallel anyway (issue 30: a submitter that took such tasks stopped
 *     refilling its queue while it ran them).
 */
#ifndef QIMG_AIO_POOL_H
#define QIMG_AIO_POOL_H

#include <stdbool.h>

typedef struct Pool Pool;
typedef int (*PoolFunc)(void *opaque); /* 0 or -errno; runs on a worker thread */

/* max_in_flight >= 1; threads = max_in_flight. */
Pool *pool_new(unsigned max_in_flight);
/* threads >= 1 workers, no bound on queued tasks (invariant 5). */
Pool *pool_new_unbounded(unsigned threads);
/* Waits for all tasks, then frees the pool. */
void pool_free(Pool *p);
/* Blocks while max_in_flight tasks are queued or running.
 * Returns 0, or the sticky error (task not queued). */
int pool_submit(Pool *p, PoolFunc fn, void *opaque);
/* Run the oldest queued task in the calling thread, if there is one
 * (invariant 6); false when nothing was queued. */
bool pool_run_one(Pool *p);
/* Run the oldest queued task in the calling thread only if no woken worker
 * is on its way to it (invariant 7); false when none was run. */
bool pool_run_unclaimed(Pool *p);
/* Waits until nothing is queued or running; returns the sticky error or 0. */
int pool_wait_all(Pool *p);
/* The sticky error or 0, without waiting. */
int pool_status(Pool *p);
/* Clear the sticky error (after the caller has handled it). */
void pool_reset_error(Pool *p);
unsigned pool_max_in_flight(Pool *p);
/* Number of tasks queued or running now. */
unsigned pool_in_flight(Pool *p);

#endif
