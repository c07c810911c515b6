/*
 * tests/test-copy-threads.c: allocation turns (block/order.c invariants
 * 1-3) and the copy pipeline (api/copy.c invariants 1-5, qimg/copy.h rules)
 * with many threads; built under TSan too (the Makefile's *thread* list).
 *
 *  - tickets taken in order by 8 threads pass their turns in order, however
 *    long each holds its chunk; cancel wakes a waiter whose predecessor
 *    never comes;
 *  - qimg_copy with 16 requests in flight copies a qcow2 with a backing
 *    file, zero clusters and data into a new qcow2 (and a raw) target:
 *    qemu-img compare equal, check clean, no fragmented clusters;
 *  - a progress callback that says stop ends the copy with ECANCELED and
 *    every worker stopped; options out of range are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qimg/copy.h"
#include "qimg/qimg.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_turns),
        cmocka_unit_test(test_order_cancel),
        cmocka_unit_test(test_copy_qcow2),
        cmocka_unit_test(test_copy_stop_and_refuse),
    };
    return tu_run_group_tests("test-copy-threads", tests);
}
