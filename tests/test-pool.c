/*
 * tests/test-pool.c: unit tests for the task pool (aio/pool.c).
 *
 * Numbers in comments refer to the invariants in aio/pool.h.  Nothing here
 * asserts on timing: where a test gives another thread a moment to run (to
 * make a broken pool more likely to show), the asserted facts hold for a
 * correct pool under any schedule.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <glib.h>
#include <stdatomic.h>

#include "aio/pool.h"

/* Turns a hang (a broken pool never waking us) into a test failure. */
#define HANG_US (30 * G_TIME_SPAN_SECOND)

/*
 * A gate: tasks wait on it until the test opens it.  Its state is atomic
 * because ThreadSanitizer cannot see glib's futex-based GMutex; the mutex and
 * condition are only for sleeping.
 */
typedef struct Gate {
    GMutex lock;
    GCond cond;
    atomic_bool open;
    atomic_uint arrived; /* tasks that reached the gate */
} Gate;

static void gate_init(Gate *g)
{
    g_mutex_init(&g->lock);
    g_cond_init(&g->cond);
    atomic_init(&g->open, false);
    atomic_init(&g->arrived, 0);
}

static void gate_clear(Gate *g)
{
    g_mutex_clear(&g->lock);
    g_cond_clear(&g->cond);
}

static void gate_open(Gate *g)
{
    g_mutex_lock(&g->lock);
    atomic_store(&g->open, true);
    g_cond_broadcast(&g->cond);
    g_mutex_unlock(&g->lock);
}

/* Called by tasks: announce arrival, then wait until the gate opens. */
static void gate_pass(Gate *g)
{
    g_mutex_lock(&g->lock);
    atomic_fetch_add(&g->arrived, 1);
    g_cond_broadcast(&g->cond);
    while (!atomic_load(&g->open)) {
        g_cond_wait(&g->cond, &g->lock);
    }
    g_mutex_unlock(&g->lock);
}

/* Waits until n tasks have arrived at the gate; false if that never happens. */
static bool gate_wait_arrived(Gate *g, unsigned n)
{
    gint64 deadline = g_get_monotonic_time() + HANG_US;
    bool ok = true;

    g_mutex_lock(&g->lock);
    while (ok && atomic_load(&g->arrived) < n) {
        ok = g_cond_wait_until(&g->cond, &g->lock, deadline);
    }
    g_mutex_unlock(&g->lock);
    return atomic_load(&g->arrived) >= n;
}

/* ---- ordering (invariant 1) ---- */

enum { ORDER_TASKS = 1000 };

typedef struct OrderCtx {
    atomic_uint next; /* next slot in started[] */
    unsigned started[ORDER_TASKS];
    atomic_uint runs[ORDER_TASKS];
    Gate *gate; /* test_unbounded_never_blocks */
} OrderCtx;

typedef struct OrderTask {
    OrderCtx *ctx;
    unsigned index;
} OrderTask;

static int order_task(void *opaque)
{
    OrderTask *t = opaque;
    unsigned slot = atomic_fetch_add(&t->ctx->next, 1);

    if (slot < ORDER_TASKS) {
        t->ctx->started[slot] = t->index;
    }
    atomic_fetch_add(&t->ctx->runs[t->index], 1);
    g_free(t); /* invariant 4: the task owns its opaque */
    return 0;
}

static void run_order_tasks(Pool *p, OrderCtx *ctx)
{
    for (unsigned i = 0; i < ORDER_TASKS; i++) {
        OrderTask *t = g_new(OrderTask, 1);
        *t = (OrderTask){.ctx = ctx, .index = i};
        assert_int_equal(pool_submit(p, order_task, t), 0);
    }
    assert_int_equal(pool_wait_all(p), 0);
    assert_int_equal(pool_in_flight(p), 0);
    assert_int_equal(atomic_load(&ctx->next), ORDER_TASKS);
    for (unsigned i = 0; i < ORDER_TASKS; i++) {
        assert_int_equal(atomic_load(&ctx->runs[i]), 1); /* each ran exactly once */
    }
}

/* With one worker, tasks start (and so run) in submission order. */
static void test_order_fifo_one_worker(void **state)
{
    (void)state;
    OrderCtx *ctx = g_new0(OrderCtx, 1);
    Pool *p = pool_new(1);

    assert_non_null(p);
    assert_int_equal(pool_max_in_flight(p), 1);
    run_order_tasks(p, ctx);
    for (unsigned i = 0; i < ORDER_TASKS; i++) {
        assert_int_equal(ctx->started[i], i);
    }
    pool_free(p);
    g_free(ctx);
}

/* With N workers, every task runs exactly once. */
static void test_order_all_run_n_workers(void **state)
{
    (void)state;
    OrderCtx *ctx = g_new0(OrderCtx, 1);
    Pool *p = pool_new(8);

    assert_non_null(p);
    assert_int_equal(pool_max_in_flight(p), 8);
    run_order_tasks(p, ctx);
    pool_free(p);
    g_free(ctx);
}

/* threads = max_in_flight: N tasks can all be running at the same time. */
static int park_task(void *opaque)
{
    gate_pass(opaque);
    return 0;
}

static void test_workers_run_in_parallel(void **state)
{
    (void)state;
    enum { N = 6 };
    Gate gate;
    Pool *p = pool_new(N);

    assert_non_null(p);
    gate_init(&gate);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(pool_submit(p, park_task, &gate), 0);
    }
    /* Fewer than N threads would leave some task queued behind the gate. */
    bool all_arrived = gate_wait_arrived(&gate, N);
    unsigned in_flight = pool_in_flight(p);
    gate_open(&gate); /* before asserting, so a failure leaves no task parked */
    assert_true(all_arrived);
    assert_int_equal(in_flight, N);
    assert_int_equal(pool_wait_all(p), 0);
    assert_int_equal(pool_in_flight(p), 0);
    pool_free(p);
    gate_clear(&gate);
}

/* ---- backpressure ---- */

typedef struct BpCtx {
    Pool *pool;
    Gate gate;
    atomic_uint finished;     /* gated tasks that returned */
    atomic_bool entering;     /* submitter is about to call pool_submit() */
    atomic_bool returned;     /* submitter's pool_submit() returned */
    unsigned finished_at_ret; /* 'finished' seen when pool_submit() returned */
    int submit_ret;
    atomic_bool third_ran;
} BpCtx;

static int bp_gated_task(void *opaque)
{
    BpCtx *c = opaque;

    gate_pass(&c->gate);
    atomic_fetch_add(&c->finished, 1);
    return 0;
}

static int bp_third_task(void *opaque)
{
    BpCtx *c = opaque;

    atomic_store(&c->third_ran, true);
    return 0;
}

static gpointer bp_submitter(gpointer opaque)
{
    BpCtx *c = opaque;

    atomic_store(&c->entering, true);
    c->submit_ret = pool_submit(c->pool, bp_third_task, c);
    c->finished_at_ret = atomic_load(&c->finished);
    atomic_store(&c->returned, true);
    return NULL;
}

/* With max 2 in flight, a third submit blocks until one of the two finishes. */
static void test_backpressure(void **state)
{
    (void)state;
    BpCtx c = {0};

    c.pool = pool_new(2);
    assert_non_null(c.pool);
    gate_init(&c.gate);
    assert_int_equal(pool_submit(c.pool, bp_gated_task, &c), 0);
    assert_int_equal(pool_submit(c.pool, bp_gated_task, &c), 0);
    assert_true(gate_wait_arrived(&c.gate, 2));
    assert_int_equal(pool_in_flight(c.pool), 2);

    GThread *t = g_thread_new("bp-submitter", bp_submitter, &c);
    while (!atomic_load(&c.entering)) {
        g_thread_yield();
    }
    /* Give a broken (non-blocking) submit time to return; not an assertion. */
    g_usleep(20 * 1000);

    /* Both tasks are held at the gate, so no slot is free: the submit cannot
     * have returned, and nothing beyond max was queued. */
    bool returned_early = atomic_load(&c.returned);
    bool third_ran_early = atomic_load(&c.third_ran);
    unsigned in_flight = pool_in_flight(c.pool);

    gate_open(&c.gate); /* before asserting, so a failure leaves no thread behind */
    g_thread_join(t);
    assert_false(returned_early);
    assert_false(third_ran_early);
    assert_int_equal(in_flight, 2);
    assert_int_equal(c.submit_ret, 0);
    /* The submit returned only after a slot had been freed. */
    assert_true(c.finished_at_ret >= 1);

    assert_int_equal(pool_wait_all(c.pool), 0);
    assert_true(atomic_load(&c.third_ran));
    assert_int_equal(atomic_load(&c.finished), 2);
    pool_free(c.pool);
    gate_clear(&c.gate);
}

/* ---- errors (invariants 3 and 4) ---- */

typedef struct ErrCtx {
    Gate gate;
    int gated_ret;
    atomic_uint ran;
} ErrCtx;

static int err_gated_task(void *opaque)
{
    ErrCtx *c = opaque;

    gate_pass(&c->gate);
    atomic_fetch_add(&c->ran, 1);
    return c->gated_ret;
}

static int eio_task(void *opaque)
{
    ErrCtx *c = opaque;

    atomic_fetch_add(&c->ran, 1);
    return -EIO;
}

static int ok_task(void *opaque)
{
    atomic_uint *ran = opaque;

    atomic_fetch_add(ran, 1);
    return 0;
}

static void test_error_sticky(void **state)
{
    (void)state;
    ErrCtx c = {.gated_ret = -ENOSPC};
    atomic_uint ran_after = 0;
    Pool *p = pool_new(2);

    assert_non_null(p);
    gate_init(&c.gate);
    assert_int_equal(pool_status(p), 0);

    /* A (submitted first) will fail with -ENOSPC, but only after B's -EIO. */
    assert_int_equal(pool_submit(p, err_gated_task, &c), 0);
    assert_int_equal(pool_submit(p, eio_task, &c), 0);
    /* The pool is full until B completes; when it does, its error is recorded
     * and this blocked submit fails with it without queuing the task. */
    assert_int_equal(pool_submit(p, ok_task, &ran_after), -EIO);
    assert_int_equal(pool_status(p), -EIO);

    /* Later submits fail too, and never run the task (invariant 4). */
    assert_int_equal(pool_submit(p, ok_task, &ran_after), -EIO);

    gate_open(&c.gate);
    /* Invariant 3: A's later -ENOSPC does not replace B's -EIO. */
    assert_int_equal(pool_wait_all(p), -EIO);
    assert_int_equal(pool_wait_all(p), -EIO);
    assert_int_equal(pool_status(p), -EIO);
    assert_int_equal(atomic_load(&c.ran), 2); /* tasks queued before the error ran */
    assert_int_equal(atomic_load(&ran_after), 0);
    assert_int_equal(pool_in_flight(p), 0);

    pool_reset_error(p);
    assert_int_equal(pool_status(p), 0);
    assert_int_equal(pool_wait_all(p), 0);
    assert_int_equal(pool_submit(p, ok_task, &ran_after), 0);
    assert_int_equal(pool_wait_all(p), 0);
    assert_int_equal(atomic_load(&ran_after), 1);

    /* After a reset, a new error sticks again. */
    assert_int_equal(pool_submit(p, eio_task, &c), 0);
    assert_int_equal(pool_wait_all(p), -EIO);
    assert_int_equal(pool_submit(p, ok_task, &ran_after), -EIO);
    assert_int_equal(atomic_load(&ran_after), 1);

    pool_free(p); /* with a sticky error still set */
    gate_clear(&c.gate);
}

/* ---- many threads ---- */

typedef struct ManyCtx {
    atomic_uint count;
    atomic_uint running;
    atomic_uint max_running;
} ManyCtx;

static int many_task(void *opaque)
{
    ManyCtx *c = opaque;
    unsigned now = atomic_fetch_add(&c->running, 1) + 1;
    unsigned seen = atomic_load(&c->max_running);

    while (now > seen && !atomic_compare_exchange_weak(&c->max_running, &seen, now)) {
    }
    atomic_fetch_add(&c->count, 1);
    atomic_fetch_sub(&c->running, 1);
    return 0;
}

static void test_many_tasks(void **state)
{
    (void)state;
    enum { MAX = 16, TASKS = 10000 };
    ManyCtx c = {0};
    Pool *p = pool_new(MAX);

    assert_non_null(p);
    for (unsigned i = 0; i < TASKS; i++) {
        assert_int_equal(pool_submit(p, many_task, &c), 0);
        assert_true(pool_in_flight(p) <= MAX);
    }
    assert_int_equal(pool_wait_all(p), 0);
    assert_int_equal(atomic_load(&c.count), TASKS);
    assert_int_equal(atomic_load(&c.running), 0);
    assert_true(atomic_load(&c.max_running) <= MAX);
    assert_int_equal(pool_in_flight(p), 0);
    pool_free(p);
}

/* ---- edge cases ---- */

static void test_wait_all_empty(void **state)
{
    (void)state;
    atomic_uint ran = 0;
    Pool *p = pool_new(4);

    assert_non_null(p);
    assert_int_equal(pool_in_flight(p), 0);
    assert_int_equal(pool_wait_all(p), 0);
    assert_int_equal(pool_status(p), 0);
    /* And again once tasks have come and gone. */
    assert_int_equal(pool_submit(p, ok_task, &ran), 0);
    assert_int_equal(pool_wait_all(p), 0);
    assert_int_equal(pool_wait_all(p), 0);
    assert_int_equal(atomic_load(&ran), 1);
    pool_free(p);
}

typedef struct FreeCtx {
    Gate gate;
    atomic_uint done;
} FreeCtx;

typedef struct FreeTask {
    FreeCtx *ctx;
} FreeTask;

static int free_task(void *opaque)
{
    FreeTask *t = opaque;
    FreeCtx *c = t->ctx;

    gate_pass(&c->gate);
    g_free(t); /* invariant 4: leaks (LeakSanitizer) if the task never runs */
    atomic_fetch_add(&c->done, 1);
    return 0;
}

static gpointer free_opener(gpointer opaque)
{
    FreeCtx *c = opaque;

    /* Let pool_free() start waiting first; not an assertion. */
    g_usleep(20 * 1000);
    gate_open(&c->gate);
    return NULL;
}

/* pool_free() with tasks still running waits for them (invariant 2). */
static void test_free_with_pending(void **state)
{
    (void)state;
    enum { MAX = 4 };
    FreeCtx c = {0};
    Pool *p = pool_new(MAX);

    assert_non_null(p);
    gate_init(&c.gate);
    for (unsigned i = 0; i < MAX; i++) {
        FreeTask *t = g_new(FreeTask, 1);
        t->ctx = &c;
        assert_int_equal(pool_submit(p, free_task, t), 0);
    }
    assert_true(gate_wait_arrived(&c.gate, MAX));
    assert_int_equal(atomic_load(&c.done), 0);

    GThread *opener = g_thread_new("free-opener", free_opener, &c);
    pool_free(p);
    assert_int_equal(atomic_load(&c.done), MAX);
    g_thread_join(opener);
    gate_clear(&c.gate);
}

/* pool_free() right after submitting many tasks: every one runs. */
static void test_free_with_queued(void **state)
{
    (void)state;
    enum { TASKS = 1000 };
    ManyCtx c = {0};
    Pool *p = pool_new(3);

    assert_non_null(p);
    for (unsigned i = 0; i < TASKS; i++) {
        assert_int_equal(pool_submit(p, many_task, &c), 0);
    }
    pool_free(p);
    assert_int_equal(atomic_load(&c.count), TASKS);
}

static void test_new_zero(void **state)
{
    (void)state;
    assert_null(pool_new(0));
    assert_null(pool_new_unbounded(0));
    pool_free(NULL);
}

/* Invariant 5: with both workers held at a gate, an unbounded pool still
 * takes many more tasks than it has slots in its first ring (the ring
 * grows, in FIFO order: invariant 1), and every one runs once. */
static int gated_order_task(void *opaque)
{
    OrderTask *t = opaque;
    gate_pass(t->ctx->gate);
    return order_task(opaque);
}

static void test_unbounded_never_blocks(void **state)
{
    (void)state;
    Pool *p = pool_new_unbounded(1);
    OrderCtx *ctx = g_new0(OrderCtx, 1);
    Gate g;

    gate_init(&g);
    ctx->gate = &g;
    for (unsigned i = 0; i < ORDER_TASKS; i++) {
        OrderTask *t = g_new(OrderTask, 1);
        *t = (OrderTask){.ctx = ctx, .index = i};
        assert_int_equal(pool_submit(p, gated_order_task, t), 0); /* never blocks */
    }
    assert_int_equal(pool_in_flight(p), ORDER_TASKS);
    gate_open(&g);
    assert_int_equal(pool_wait_all(p), 0);
    for (unsigned i = 0; i < ORDER_TASKS; i++) {
        assert_int_equal(ctx->started[i], i); /* one worker: FIFO */
        assert_int_equal(atomic_load(&ctx->runs[i]), 1);
    }
    pool_free(p);
    gate_clear(&g);
    g_free(ctx);
}

/* ---- running a task in the caller (invariants 6, 7) ---- */

typedef struct WhereTask {
    GThread *ran_on; /* the thread that ran it */
    Gate *gate;      /* NULL: do not wait */
} WhereTask;

static int where_task(void *opaque)
{
    WhereTask *t = opaque;

    t->ran_on = g_thread_self();
    if (t->gate) {
        gate_pass(t->gate);
    }
    return 0;
}

/* Invariant 7: a task submitted to a pool whose worker waits idle has that
 * worker woken for it, so pool_run_unclaimed() leaves it to the worker
 * (pool_run_one() would take it here whenever it gets there first). */
static void test_run_unclaimed_leaves_woken(void **state)
{
    (void)state;
    Pool *p = pool_new_unbounded(1);
    WhereTask warm = {0};

    /* pool_wait_all() returns only once the worker that finished the last
     * task is back waiting for the next (it finishes and waits under one
     * hold of the pool's lock) */
    assert_int_equal(pool_submit(p, where_task, &warm), 0);
    assert_int_equal(pool_wait_all(p), 0);
    for (int i = 0; i < 200; i++) {
        WhereTask t = {0};
        assert_int_equal(pool_submit(p, where_task, &t), 0);
        assert_false(pool_run_unclaimed(p));
        assert_int_equal(pool_wait_all(p), 0);
        assert_true(t.ran_on != NULL && t.ran_on != g_thread_self());
    }
    pool_free(p);
}

/* Invariants 6, 7: with its only worker busy, a queued task has no worker
 * woken for it: pool_run_unclaimed() runs it in the caller, counted like a
 * worker's; with nothing queued it runs nothing. */
static void test_run_unclaimed_runs_queued(void **state)
{
    (void)state;
    Pool *p = pool_new_unbounded(1);
    WhereTask busy = {0}, queued = {0};
    Gate g;

    gate_init(&g);
    busy.gate = &g;
    assert_int_equal(pool_submit(p, where_task, &busy), 0);
    assert_true(gate_wait_arrived(&g, 1));
    assert_false(pool_run_unclaimed(p)); /* nothing queued */
    assert_int_equal(pool_submit(p, where_task, &queued), 0);
    assert_int_equal(pool_in_flight(p), 2);
    assert_true(pool_run_unclaimed(p));
    assert_true(queued.ran_on == g_thread_self());
    assert_int_equal(pool_in_flight(p), 1);
    gate_open(&g);
    assert_int_equal(pool_wait_all(p), 0);
    assert_true(busy.ran_on != g_thread_self());
    pool_free(p);
    gate_clear(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_fifo_one_worker),
        cmocka_unit_test(test_unbounded_never_blocks),
        cmocka_unit_test(test_order_all_run_n_workers),
        cmocka_unit_test(test_workers_run_in_parallel),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_error_sticky),
        cmocka_unit_test(test_many_tasks),
        cmocka_unit_test(test_wait_all_empty),
        cmocka_unit_test(test_free_with_pending),
        cmocka_unit_test(test_free_with_queued),
        cmocka_unit_test(test_new_zero),
        cmocka_unit_test(test_run_unclaimed_leaves_woken),
        cmocka_unit_test(test_run_unclaimed_runs_queued),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
