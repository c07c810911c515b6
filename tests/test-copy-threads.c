/*
 * tests/test-copy-threads.c: allocation turns (block/order.c invariants
 * 1-7) and the copy pipeline (api/copy.c invariants 1-6, qimg/copy.h rules)
 * with many threads; built under TSan too (the Makefile's *thread* list).
 *
 *  - tickets taken in order by 8 threads pass their turns in order, however
 *    long each holds its chunk; cancel wakes a waiter whose predecessor
 *    never comes;
 *  - deferred jobs (invariants 4-7) run in ticket order among the tickets
 *    that wait for their turn, in batches in ticket order, each once, at
 *    most 64 stored; a ticket left before its turn does not wait for it; a
 *    failed job fails the later defers and the drain, and stops the
 *    batches after it; after a cancel the jobs left are discarded by the
 *    drain and nothing more is deferred;
 *  - qimg_copy with 16 requests in flight copies a qcow2 with a backing
 *    file, zero clusters and data into a new qcow2 (and a raw) target:
 *    qemu-img compare equal, check clean, no fragmented clusters;
 *  - qimg_copy with 16 requests in flight into a streamOptimized VMDK makes
 *    qemu-img's grains and tables (vmdk/write.c invariants 5, 6);
 *  - a progress callback that says stop ends the copy with ECANCELED and
 *    every worker stopped; options out of range are refused;
 *  - qimg_copy_sources (rule 6) with 16 requests in flight puts each
 *    source at the sum of the sizes before it, compressed too, where a
 *    cluster takes from two sources; several sources with top_only are
 *    refused;
 *  - copy_offload (rule 7) with 16 requests in flight into a new qcow2
 *    from a qcow2 with a backing file: the same contents, a clean check;
 *    refused with compress.
 *  - stats (rule 8, copy.c invariant 9): the requests and bytes the
 *    pipeline issued (data read and written, holes as zeroes requests or
 *    nothing), the workers that ran, every time counted once (their sum
 *    within workers x wall), compression counted with compress; a caller
 *    with a smaller QimgCopyStats gets nothing past its struct_size.
 *  - into a target the pipeline orders itself (invariant 1: no
 *    allocations of its own), a hole's zeroes request passes the turn when
 *    it is issued: the next chunk's write is issued while it still runs
 *    (a zeroes request onto a block device waits for the device's queue).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/block.h"
#include "qimg/copy.h"
#include "qimg/qimg.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB (UINT64_C(1) << 20)
#define TICKETS 400u
#define THREADS 8u

typedef struct Turns {
    BlkOrder *order;
    pthread_mutex_t lock;
    uint64_t next_ticket;
    uint64_t log[TICKETS];
    unsigned logged;
} Turns;

static void *turn_worker(void *opaque)
{
    Turns *t = opaque;

    for (;;) {
        pthread_mutex_lock(&t->lock);
        uint64_t ticket = t->next_ticket++;
        pthread_mutex_unlock(&t->lock);
        if (ticket >= TICKETS) {
            return NULL;
        }
        blk_order_enter(t->order, ticket);
        if (ticket % 3 == 0) {
            g_usleep(ticket % 7 * 50); /* out of step with the others */
        }
        if (ticket % 5 != 0) { /* some tickets allocate nothing */
            blk_order_wait();
            pthread_mutex_lock(&t->lock);
            t->log[t->logged++] = ticket;
            pthread_mutex_unlock(&t->lock);
            blk_order_mark_last();
            blk_order_allocated(); /* invariant 2: the turn passes here */
            blk_order_allocated(); /* and only once */
        }
        blk_order_leave();
    }
}

static void test_order_turns(void **state)
{
    Turns t = {.order = blk_order_new()};
    pthread_t th[THREADS];

    pthread_mutex_init(&t.lock, NULL);
    for (unsigned i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, turn_worker, &t), 0);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
    }
    assert_int_equal(t.logged, TICKETS - TICKETS / 5);
    for (unsigned i = 1; i < t.logged; i++) {
        assert_true(t.log[i - 1] < t.log[i]); /* invariant 1 */
    }
    blk_order_free(t.order);
    pthread_mutex_destroy(&t.lock);
}

static void *wait_for_one(void *opaque)
{
    blk_order_enter(opaque, 1); /* ticket 0 never comes */
    blk_order_wait();
    blk_order_leave();
    return NULL;
}

static void test_order_cancel(void **state)
{
    BlkOrder *o = blk_order_new();
    pthread_t th;

    assert_int_equal(pthread_create(&th, NULL, wait_for_one, o), 0);
    g_usleep(20000);
    blk_order_cancel(o); /* invariant 3 */
    pthread_join(th, NULL);
    blk_order_wait(); /* no ticket on this thread: returns */
    blk_order_free(o);
}

/* ---- deferred jobs (order.c invariants 4-7) ---- */

typedef struct Job {
    BlkOrderJob job;
    int state; /* 0 not handed over, 1 queued, 2 ran, 3 discarded, 4 refused */
} Job;

typedef struct Defers {
    BlkOrder *order;
    pthread_mutex_t lock;
    uint64_t next_ticket;
    uint64_t log[TICKETS];
    unsigned logged, queued, max_queued, refused;
    uint64_t fail_at; /* the ticket whose job fails (UINT64_MAX: none) */
    Job jobs[TICKETS];
} Defers;

static int run_jobs(void *opaque, BlkOrderJob *jobs, bool discard)
{
    Defers *d = opaque;
    int ret = 0;

    pthread_mutex_lock(&d->lock);
    for (BlkOrderJob *j = jobs; j; j = j->next) {
        Job *job = (Job *)(void *)j;
        assert_int_equal(job->state, 1);                      /* invariant 7: once */
        assert_true(!j->next || j->next->ticket > j->ticket); /* invariant 4 */
        job->state = discard ? 3 : 2;
        d->queued--;
        if (!discard) {
            d->log[d->logged++] = j->ticket;
            if (j->ticket == d->fail_at) {
                ret = blk_error(EIO, "job %" PRIu64 " failed", j->ticket);
            }
        }
    }
    pthread_mutex_unlock(&d->lock);
    return ret;
}

/* Ticket t: nothing (t % 5 == 0), in line in its turn (1), or a job. */
static void defer_one(Defers *d, uint64_t ticket)
{
    blk_order_enter(d->order, ticket);
    if (ticket == 0) {
        g_usleep(30000); /* the others run a window ahead (invariant 5) */
    } else if (ticket % 3 == 0) {
        g_usleep(ticket % 7 * 50);
    }
    if (ticket % 5 == 1) {
        blk_order_wait();
        pthread_mutex_lock(&d->lock);
        d->log[d->logged++] = ticket;
        pthread_mutex_unlock(&d->lock);
        blk_order_mark_last();
        blk_order_allocated();
    } else if (ticket % 5 != 0) {
        Job *job = &d->jobs[ticket];
        job->job.run = run_jobs;
        job->job.opaque = d;
        blk_order_mark_last();
        pthread_mutex_lock(&d->lock);
        job->state = 1;
        d->queued++;
        d->max_queued = MAX(d->max_queued, d->queued);
        pthread_mutex_unlock(&d->lock);
        int ret = blk_order_defer(&job->job);
        if (ret != 1) { /* invariant 7: refused after a failure */
            assert_int_equal(ret, -EIO);
            assert_non_null(strstr(blk_error_message(), "failed"));
            blk_error_clear();
            pthread_mutex_lock(&d->lock);
            job->state = 4;
            d->queued--;
            d->refused++;
            pthread_mutex_unlock(&d->lock);
        }
    }
    blk_order_leave();
}

static void *defer_worker(void *opaque)
{
    Defers *d = opaque;

    for (;;) {
        pthread_mutex_lock(&d->lock);
        uint64_t ticket = d->next_ticket++;
        pthread_mutex_unlock(&d->lock);
        if (ticket >= TICKETS) {
            return NULL;
        }
        defer_one(d, ticket);
    }
}

static void run_defers(Defers *d)
{
    pthread_t th[THREADS];

    d->order = blk_order_new();
    pthread_mutex_init(&d->lock, NULL);
    for (unsigned i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, defer_worker, d), 0);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
    }
}

static void test_order_defer(void **state)
{
    Defers *d = g_new0(Defers, 1);

    d->fail_at = UINT64_MAX;
    run_defers(d);
    assert_int_equal(blk_order_drain(d->order), 0);
    assert_int_equal(d->logged, TICKETS - TICKETS / 5);
    for (unsigned i = 1; i < d->logged; i++) {
        assert_true(d->log[i - 1] < d->log[i]); /* invariants 1, 4 */
    }
    for (unsigned t = 0; t < TICKETS; t++) {
        assert_int_equal(d->jobs[t].state, t % 5 > 1 ? 2 : 0);
    }
    assert_true(d->max_queued <= 64 + THREADS); /* invariant 5 */
    blk_order_free(d->order);
    pthread_mutex_destroy(&d->lock);
    g_free(d);
}

static void test_order_defer_fail(void **state)
{
    Defers *d = g_new0(Defers, 1);
    unsigned ran = 0;

    d->fail_at = 102;
    run_defers(d);
    assert_int_equal(blk_order_drain(d->order), -EIO); /* invariant 7 */
    assert_string_equal(blk_error_message(), "job 102 failed");
    blk_error_clear();
    for (unsigned t = 0; t < TICKETS; t++) {
        int st = d->jobs[t].state;
        assert_int_equal(st != 0, t % 5 > 1); /* each job handed over went... */
        assert_true(st != 1);                 /* ...to run, once */
        ran += st == 2;
        assert_true(st != 2 || t <= 102 + 64); /* no new batch after the failure */
    }
    assert_int_equal(d->jobs[102].state, 2);
    assert_true(d->refused > 0 && ran < TICKETS);
    blk_order_free(d->order);
    pthread_mutex_destroy(&d->lock);
    g_free(d);
}

static void test_order_defer_cancel(void **state)
{
    Defers *d = g_new0(Defers, 1);

    d->fail_at = UINT64_MAX;
    d->order = blk_order_new();
    pthread_mutex_init(&d->lock, NULL);
    blk_order_enter(d->order, 1);       /* invariant 2: left before its turn, */
    blk_order_leave();                  /* nothing allocated: no wait */
    for (uint64_t t = 2; t < 40; t++) { /* ticket 0 never comes */
        if (t % 5 > 1) {
            defer_one(d, t);
        }
    }
    assert_int_equal(d->logged, 0); /* all wait for it */
    assert_int_equal(d->queued, 24);
    blk_order_cancel(d->order);
    blk_order_enter(d->order, 40); /* after cancel: in line (invariant 7) */
    blk_order_mark_last();
    assert_int_equal(blk_order_defer(&d->jobs[40].job), 0);
    blk_order_leave();
    assert_int_equal(blk_order_drain(d->order), 0);
    assert_int_equal(d->queued, 0);
    for (uint64_t t = 2; t < 40; t++) {
        assert_int_equal(d->jobs[t].state, t % 5 > 1 ? 3 : 0); /* discarded */
    }
    blk_order_free(d->order);
    pthread_mutex_destroy(&d->lock);
    g_free(d);
}

/* ---- the pipeline ---- */

static QimgImage *open_rw(const char *p, const char *fmt)
{
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    QimgImage *img;

    o.format = fmt;
    img = qimg_image_open(p, &o, &err);
    if (!img) {
        fail_msg("open %s: %s", p, err->message);
    }
    return img;
}

static char *make_source(void)
{
    g_autofree char *base = tu_fresh("base.qcow2");
    char *src = tu_fresh("src.qcow2");

    tu_run("qemu-img create -q -f qcow2 '%s' 48M && "
           "qemu-io -c 'write -P 0x11 0 40M' '%s' >/dev/null && "
           "qemu-img create -q -f qcow2 -b '%s' -F qcow2 '%s' 48M && "
           "qemu-io -c 'write -P 0x22 3M 5M' -c 'write -z 10M 3M' -c 'write -P 0x33 30M "
           "12M' "
           "-c 'write -P 0x44 47M 4k' '%s' >/dev/null",
           base, base, base, src, src);
    return src;
}

static void copy_into(const char *src_path, const char *fmt, unsigned in_flight)
{
    g_autofree char *dst_path = tu_fresh(strcmp(fmt, "raw") ? "dst.qcow2" : "dst.raw");
    QimgCopyOptions o = QIMG_COPY_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    g_autofree char *out = NULL;

    tu_run("qemu-img create -q -f %s '%s' 48M", fmt, dst_path);
    QimgImage *src = open_rw(src_path, NULL), *dst = open_rw(dst_path, fmt);
    o.in_flight = in_flight;
    o.target_is_zero = true;
    assert_true(qimg_copy(src, dst, &o, &err));
    assert_true(qimg_image_close(dst, &err));
    assert_true(qimg_image_close(src, &err));
    tu_run("qemu-img compare -q -F %s '%s' '%s'", fmt, src_path, dst_path);
    if (strcmp(fmt, "qcow2") == 0) {
        assert_int_equal(
            tu_run_status(&out, "qemu-img check --output=json '%s'", dst_path), 0);
        /* copy.h rule 3: qemu-img check leaves out a count of 0 */
        assert_null(strstr(out, "fragmented-clusters"));
    }
}

static void test_copy_qcow2(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *src = make_source();
    copy_into(src, "qcow2", 16);
    copy_into(src, "qcow2", 1);
    copy_into(src, "raw", 16);
}

/* Into a streamOptimized VMDK (vmdk/write.c invariants 5, 6): grains of
 * every compressibility deflated by 16 workers, appended by whichever has
 * the turn: the grains and tables of qemu-img's (one writer, guest order). */
static void test_copy_vmdk_stream(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *src_path = tu_fresh("mix.raw");
    g_autofree char *dst_path = tu_fresh("m.vmdk");
    g_autofree char *ref_path = tu_fresh("q.vmdk");
    g_autofree uint8_t *buf = g_malloc0(8 * MiB);
    QimgCopyOptions o = QIMG_COPY_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    g_autoptr(GRand) rng = g_rand_new_with_seed(32);
    struct stat st;

    for (unsigned g = 0; g < 128; g++) {
        uint8_t *p = buf + (size_t)g * 65536;
        unsigned kind = g_rand_int_range(rng, 0, 4), n = g_rand_int_range(rng, 1, 65536);
        if (kind < 2) {
            tu_fill_random(rng, p, kind == 1 ? n : 65536u);
        }
        for (unsigned i = 0; kind == 2 && i < 65536u; i++) {
            p[i] = (uint8_t)g_rand_int_range(rng, 0, 4);
        }
    }
    assert_true(g_file_set_contents(src_path, (char *)buf, 8 * MiB, NULL));
    tu_run("qemu-img create -q -f vmdk -o subformat=streamOptimized '%s' 8M && "
           "qemu-img convert -O vmdk -o subformat=streamOptimized '%s' '%s'",
           dst_path, src_path, ref_path);
    QimgImage *src = open_rw(src_path, "raw"), *dst = open_rw(dst_path, "vmdk");
    o.in_flight = 16;
    o.target_is_zero = true;
    assert_true(qimg_copy(src, dst, &o, &err));
    assert_true(qimg_image_close(dst, &err));
    assert_true(qimg_image_close(src, &err));
    tu_run("qemu-img compare -q '%s' '%s'", src_path, dst_path);
    assert_int_equal(stat(dst_path, &st), 0);
    tu_run("cmp -i 10752 -n %lld '%s' '%s'", (long long)st.st_size - 10752, ref_path,
           dst_path);
}

typedef struct StopAt {
    uint64_t at, calls, last_done;
} StopAt;

static gboolean stop_progress(void *opaque, uint64_t done, uint64_t total)
{
    StopAt *s = opaque;

    assert_true(done > s->last_done && done <= total); /* invariant 4 */
    s->last_done = done;
    s->calls++;
    return done < s->at;
}

static void test_copy_stop_and_refuse(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *src_path = make_source();
    g_autofree char *dst_path = tu_fresh("stop.qcow2");
    g_autofree char *small = tu_fresh("small.qcow2");
    QimgCopyOptions o = QIMG_COPY_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    StopAt s = {.at = 8 * MiB};

    tu_run("qemu-img create -q -f qcow2 '%s' 48M && qemu-img create -q -f qcow2 '%s' 1M",
           dst_path, small);
    QimgImage *src = open_rw(src_path, NULL), *dst = open_rw(dst_path, "qcow2");
    o.in_flight = 16;
    o.progress = stop_progress;
    o.progress_opaque = &s;
    assert_false(qimg_copy(src, dst, &o, &err)); /* invariant 3 */
    assert_int_equal(err->code, ECANCELED);
    assert_true(s.last_done >= s.at && s.last_done < 48 * MiB);
    g_clear_error(&err);

    o = (QimgCopyOptions)QIMG_COPY_OPTIONS_INIT;
    o.in_flight = 17;
    assert_false(qimg_copy(src, dst, &o, &err));
    assert_int_equal(err->code, EINVAL);
    g_clear_error(&err);
    o.in_flight = 0;
    o.sparse_size = 1000;
    assert_false(qimg_copy(src, dst, &o, &err));
    assert_int_equal(err->code, EINVAL);
    g_clear_error(&err);
    QimgImage *tiny = open_rw(small, "qcow2");
    o.sparse_size = 0;
    assert_false(qimg_copy(src, tiny, &o, &err));
    assert_non_null(strstr(err->message, "smaller"));
    g_clear_error(&err);
    assert_true(qimg_image_close(tiny, &err));
    assert_true(qimg_image_close(dst, &err));
    assert_true(qimg_image_close(src, &err));
    tu_run("qemu-img check -q '%s'", dst_path);
}

/* Rule 6: two sources (the first 3000 bytes, 3072 for the block layer)
 * one after the other; with compress the target's first 64 KiB cluster
 * holds the end of the first and the start of the second. */
static void test_copy_sources(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *a = tu_fresh("a.raw");
    g_autofree char *b = tu_fresh("b.qcow2");
    g_autofree char *want = tu_fresh("want.raw");
    g_autofree char *dst_path = tu_fresh("cat.qcow2");
    g_autoptr(GError) err = NULL;

    (void)state;
    tu_run(
        "head -c 3000 /dev/urandom >'%s' && qemu-img create -q -f qcow2 '%s' 5M && "
        "qemu-io -c 'write -P 0x22 0 100k' -c 'write -P 0x33 3M 1M' '%s' >/dev/null && "
        "qemu-img convert -O raw '%s' '%s' '%s'",
        a, b, b, a, b, want);
    for (int compress = 0; compress < 2; compress++) {
        QimgCopyOptions o = QIMG_COPY_OPTIONS_INIT;
        tu_run("rm -f '%s' && qemu-img create -q -f qcow2 '%s' %" PRIu64, dst_path,
               dst_path, 5 * MiB + 3072);
        QimgImage *srcs[2] = {open_rw(a, "raw"), open_rw(b, "qcow2")};
        QimgImage *dst = open_rw(dst_path, "qcow2");
        o.in_flight = 16;
        o.compress = compress;
        o.target_is_zero = true;
        assert_true(qimg_copy_sources(srcs, 2, dst, &o, &err));
        if (!compress) {
            o.top_only = true;
            assert_false(qimg_copy_sources(srcs, 2, dst, &o, &err));
            assert_int_equal(err->code, EINVAL);
            g_clear_error(&err);
        }
        assert_true(qimg_image_close(dst, &err));
        assert_true(qimg_image_close(srcs[0], &err));
        assert_true(qimg_image_close(srcs[1], &err));
        tu_run("qemu-img compare -q -f raw -F qcow2 '%s' '%s' && qemu-img check -q '%s'",
               want, dst_path, dst_path);
    }
}

/* Rule 7: copy offloading into a qcow2 target from a qcow2 with a
 * backing file (the data of both layers is copied from their files). */
static void test_copy_offload(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *src_path = make_source();
    g_autofree char *dst_path = tu_fresh("offload.qcow2");
    QimgCopyOptions o = QIMG_COPY_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;

    (void)state;
    tu_run("qemu-img create -q -f qcow2 '%s' 48M", dst_path);
    QimgImage *src = open_rw(src_path, NULL), *dst = open_rw(dst_path, "qcow2");
    o.in_flight = 16;
    o.copy_offload = true;
    o.compress = true;
    assert_false(qimg_copy(src, dst, &o, &err));
    assert_int_equal(err->code, EINVAL);
    g_clear_error(&err);
    o.compress = false;
    o.target_is_zero = true;
    assert_true(qimg_copy(src, dst, &o, &err));
    assert_true(qimg_image_close(dst, &err));
    assert_true(qimg_image_close(src, &err));
    tu_run("qemu-img compare -q '%s' '%s' && qemu-img check -q '%s'", src_path, dst_path,
           dst_path);
}

/* Rule 8: src (8 MiB raw: data at [0, 2M) and [4M, 6M), holes
 * elsewhere) into a new image of fmt, in_flight 4; *st filled. */
static void copy_stats(const char *src_path, const char *fmt, bool compress,
                       bool target_is_zero, QimgCopyStats *st)
{
    g_autofree char *dst_path = tu_fresh("stats.img");
    QimgCopyOptions o = QIMG_COPY_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;

    tu_run("qemu-img create -q -f %s '%s' 8M", fmt, dst_path);
    QimgImage *src = open_rw(src_path, "raw"), *dst = open_rw(dst_path, fmt);
    o.in_flight = 4;
    o.compress = compress;
    o.target_is_zero = target_is_zero;
    o.stats = st;
    assert_true(qimg_copy(src, dst, &o, &err));
    assert_true(qimg_image_close(dst, &err));
    assert_true(qimg_image_close(src, &err));
    tu_run("qemu-img compare -q -f raw -F %s '%s' '%s'", fmt, src_path, dst_path);
}

/* Copy.c invariant 9: each nanosecond in one field, so the sum fits in the
 * workers' wall time. */
static void assert_times(const QimgCopyStats *st, bool compress)
{
    assert_int_equal(st->workers, 4);
    assert_true(st->wall_ns > 0 && st->cpu_ns > 0);
    assert_true(st->read_ns > 0 && st->write_ns > 0);
    assert_true(compress ? st->compress_ns > 0 : st->compress_ns == 0);
    uint64_t sum = st->read_ns + st->write_ns + st->turn_ns + st->lock_ns + st->plan_ns +
                   st->compress_ns;
    assert_true(sum <= st->workers * st->wall_ns);
}

static void test_copy_stats(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *src_path = tu_fresh("stats.raw");
    g_autofree uint8_t *buf = g_malloc0(8 * MiB);
    QimgCopyStats st = QIMG_COPY_STATS_INIT;

    for (size_t i = 0; i < 2 * MiB; i++) {
        buf[i] = buf[4 * MiB + i] = (uint8_t)(i * 7 + 1 + i / 4096);
    }
    assert_true(g_file_set_contents(src_path, (char *)buf, 8 * MiB, NULL));
    tu_run("fallocate -d '%s' || true", src_path); /* the holes as holes */

    copy_stats(src_path, "qcow2", false, true, &st);
    assert_int_equal(st.struct_size, sizeof(st));
    assert_times(&st, false);
    assert_int_equal(st.read_bytes, 4 * MiB);
    assert_int_equal(st.write_bytes, 4 * MiB);
    assert_true(st.reads >= 2 && st.writes >= 2);
    assert_int_equal(st.zeroes, 0); /* invariant 2: the target reads as zeros */
    assert_int_equal(st.zero_bytes, 0);

    st = (QimgCopyStats)QIMG_COPY_STATS_INIT;
    copy_stats(src_path, "raw", false, false, &st);
    assert_times(&st, false);
    assert_int_equal(st.write_bytes, 4 * MiB);
    assert_int_equal(st.zero_bytes, 4 * MiB); /* the holes, as zeroes requests */
    assert_true(st.zeroes >= 2);

    st = (QimgCopyStats)QIMG_COPY_STATS_INIT;
    copy_stats(src_path, "qcow2", true, true, &st);
    assert_times(&st, true);
    assert_int_equal(st.writes, 64); /* rule 4: one per 64 KiB cluster */
    assert_int_equal(st.write_bytes, 4 * MiB);

    /* an older caller's smaller struct: nothing written past it (ABI rule 1) */
    QimgCopyStats old;
    memset(&old, 0xa5, sizeof(old));
    old.struct_size = offsetof(QimgCopyStats, read_ns);
    copy_stats(src_path, "qcow2", false, true, &old);
    assert_int_equal(old.struct_size, offsetof(QimgCopyStats, read_ns));
    assert_int_equal(old.workers, 4);
    assert_true(old.wall_ns > 0 && old.wall_ns != UINT64_C(0xa5a5a5a5a5a5a5a5));
    assert_true(old.read_ns == UINT64_C(0xa5a5a5a5a5a5a5a5));
    assert_true(old.zero_bytes == UINT64_C(0xa5a5a5a5a5a5a5a5));
}

/* Invariant 1: a target node ("gate", ordered by the pipeline) whose first
 * zeroes request runs until a write past it is issued, for at most 5 s. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t write_end; /* the end of the furthest write issued */
    unsigned zeroes;
    bool overtaken; /* the first zeroes request saw a later write issued */
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, false};

static int gate_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    (void)img;
    (void)flags;
    pthread_mutex_lock(&gate.lock);
    gate.write_end = MAX(gate.write_end, offset + qiov->size);
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
    return 0;
}

static int gate_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                              unsigned flags)
{
    struct timespec until;
    int ret = 0;

    (void)img;
    (void)flags;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&gate.lock);
    if (gate.zeroes++ == 0) {
        while (gate.write_end <= offset + bytes && ret == 0) {
            ret = pthread_cond_timedwait(&gate.cond, &gate.lock, &until);
        }
        gate.overtaken = gate.write_end > offset + bytes;
    }
    pthread_mutex_unlock(&gate.lock);
    return 0;
}

static int gate_flush(BlkNode *img)
{
    (void)img;
    return 0;
}

static const BlkDriver gate_driver = {
    .format_name = "gate",
    .is_protocol = true,
    .pwritev = gate_pwritev,
    .pwrite_zeroes = gate_pwrite_zeroes,
    .flush = gate_flush,
};

static void test_copy_zero_turn(void **state)
{
    g_autofree char *src_path = tu_fresh("zturn.raw");
    g_autofree uint8_t *buf = g_malloc0(12 * MiB);
    QimgCopyOptions o = QIMG_COPY_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;

    (void)state;
    for (size_t i = 0; i < 12 * MiB; i++) { /* data, hole, data, ... data */
        buf[i] = (i / MiB) % 2 ? 0 : (uint8_t)(i * 13 + 1 + i / 4096);
    }
    assert_true(g_file_set_contents(src_path, (char *)buf, 11 * MiB, NULL));
    tu_run("fallocate -d '%s' || true", src_path); /* the holes as holes */
    BlkNode *node = g_new0(BlkNode, 1);
    node->drv = &gate_driver;
    node->filename = g_strdup("gate");
    node->size = 11 * MiB;
    node->request_alignment = 1;
    QimgImage *src = open_rw(src_path, "raw"), *dst = api_image_new(node);
    o.in_flight = 4;
    assert_true(qimg_copy(src, dst, &o, &err));
    assert_true(qimg_image_close(dst, &err));
    assert_true(qimg_image_close(src, &err));
    assert_int_equal(gate.zeroes, 5);
    assert_true(gate.overtaken);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_turns),
        cmocka_unit_test(test_order_cancel),
        cmocka_unit_test(test_order_defer),
        cmocka_unit_test(test_order_defer_fail),
        cmocka_unit_test(test_order_defer_cancel),
        cmocka_unit_test(test_copy_qcow2),
        cmocka_unit_test(test_copy_vmdk_stream),
        cmocka_unit_test(test_copy_stop_and_refuse),
        cmocka_unit_test(test_copy_sources),
        cmocka_unit_test(test_copy_offload),
        cmocka_unit_test(test_copy_stats),
        cmocka_unit_test(test_copy_zero_turn),
    };
    return tu_run_group_tests("test-copy-threads", tests);
}
