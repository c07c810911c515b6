/*
 * tests/test-qcow2-inflight-threads.c: sixteen 4 KiB writes into one new
 * cluster at once through the asynchronous API (issue 30: sequential
 * allocating writes) -- qcow2/write.c invariant 6 with the interleaving
 * forced by breakpoints (blkdebug, api/debug.c).
 *
 * The first write allocates the cluster and is stopped at its data write,
 * holding its registration; the fifteen others, submitted then, must wait
 * for it.  While they wait, allocating writes into other clusters come
 * and go: a registration that ends wakes only the waiters whose range it
 * overlaps (aio/waiters.c invariant 2), so the waiters' wake-up count does
 * not move.  Then the first write goes on: the fifteen find the cluster
 * allocated and write in place side by side -- with one of them stopped at
 * its data write, the fourteen others complete, and it holds no
 * registration (a waiter that had registered before writing in place
 * would hold the others back until it is resumed).  At the
 * end the image reads as the byte model, qemu-img reads the same, the
 * cluster was allocated once (qemu-img check: clean, no leak, the
 * expected number of allocated clusters).  Built under ThreadSanitizer
 * by `make test` (the name says thread).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include "test-aio-util.h"

#include <string.h>

#define CS 65536u      /* cluster size */
#define BS 4096u       /* request size */
#define NREQ (CS / BS) /* requests into cluster 0 */
#define NOTHER 8u      /* allocating writes into clusters 2, 3, ... */

typedef struct Done {
    int ret; /* 1: not yet */
} Done;

static void done_cb(void *opaque, int ret, const GError *err)
{
    Done *d = opaque;
    d->ret = ret;
    if (err) {
        fail_msg("asynchronous write: %s", err->message);
    }
}

static void submit_len(QimgImage *img, uint64_t off, uint8_t *buf, size_t len, Done *d)
{
    g_autoptr(GError) err = NULL;
    struct iovec iov = {.iov_base = buf, .iov_len = len};

    d->ret = 1;
    assert_true(qimg_image_aio_pwritev(img, off, &iov, 1, 0, done_cb, d, &err));
}

static void submit_write(QimgImage *img, uint64_t off, uint8_t *buf, Done *d)
{
    submit_len(img, off, buf, BS, d);
}

/* Run completions until d has completed (10 s at most: a bound, not a
 * measurement); it must have succeeded. */
static void wait_for(QimgImage *img, Done *d)
{
    for (int i = 0; i < 1000 && d->ret == 1; i++) {
        aio_poll_for(img, 10);
    }
    if (d->ret == 1) {
        fail_msg("a write did not complete");
    }
    assert_int_equal(d->ret, 0);
}

static unsigned completed(const Done *d, unsigned n)
{
    unsigned c = 0;
    for (unsigned i = 0; i < n; i++) {
        c += d[i].ret != 1;
    }
    return c;
}

static unsigned waiting_locked(Qcow2State *s)
{
    unsigned n = 0;
    for (const Waiter *w = s->inflight_waiters.head; w; w = w->next) {
        n++;
    }
    return n;
}

/* Wait until n requests wait for their range (10 s at most). */
static void wait_waiters(Qcow2State *s, unsigned n)
{
    unsigned have = 0;

    for (int i = 0; i < 10000; i++) {
        qcow2_lock(s);
        have = waiting_locked(s);
        qcow2_unlock(s);
        if (have == n) {
            return;
        }
        g_usleep(1000);
    }
    fail_msg("%u requests wait for their range, not %u", have, n);
}

static unsigned count_tag(QimgImage *img, const char *tag)
{
    g_auto(GStrv) s = qimg_image_debug_suspended(img, FALSE);
    unsigned n = 0;
    for (char **p = s; p && *p; p++) {
        n += strcmp(*p, tag) == 0;
    }
    return n;
}

/* Wait until n requests are stopped as tag (10 s at most); how many are. */
static unsigned wait_stopped(QimgImage *img, const char *tag, unsigned n)
{
    unsigned have = 0;

    for (int i = 0; i < 10000 && (have = count_tag(img, tag)) < n; i++) {
        g_usleep(1000);
    }
    return have;
}

static void test_siblings_in_place_at_once(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("inflight.qcow2", 4 * MiB, "cluster_size=64k");
    g_autofree char *name = g_strdup_printf("blkdebug::%s", p);
    g_autofree char *raw = tu_fresh("inflight.raw");
    g_autofree uint8_t *model = g_malloc0(4 * MiB);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    uint8_t *buf[NREQ + NOTHER];
    Done d[NREQ + NOTHER];
    g_autofree char *out = NULL;
    QimgImage *img;
    Qcow2State *s;
    uint64_t wakeups;
    unsigned done;
    bool registered;

    img = open_image(name, QIMG_CACHE_WRITEBACK);
    ao.engine = QIMG_AIO_ENGINE_THREADS; /* every request on a pool thread */
    ao.threads = 32;                     /* room for all of them at once */
    assert_true(qimg_image_aio_setup(img, &ao, &err));
    s = img->node->opaque;
    for (unsigned i = 0; i < NREQ + NOTHER; i++) {
        uint64_t off = i < NREQ ? i * BS : (2 + i - NREQ) * (uint64_t)CS;
        buf[i] = aligned_buf(BS);
        memset(buf[i], 0x40 + i, BS);
        memcpy(model + off, buf[i], BS);
    }

    /* The allocating write, stopped at its data write. */
    assert_true(qimg_image_debug_break(img, "write_aio", "alloc", &err));
    submit_write(img, 0, buf[0], &d[0]);
    assert_int_equal(wait_stopped(img, "alloc", 1), 1);
    for (unsigned i = 1; i < NREQ; i++) {
        submit_write(img, i * BS, buf[i], &d[i]);
    }
    wait_waiters(s, NREQ - 1);

    /* Writes elsewhere wake none of them (aio/waiters.c invariant 2). */
    qcow2_lock(s);
    wakeups = s->inflight_waiters.wakeups;
    qcow2_unlock(s);
    for (unsigned i = NREQ; i < NREQ + NOTHER; i++) {
        submit_write(img, (2 + i - NREQ) * (uint64_t)CS, buf[i], &d[i]);
        wait_for(img, &d[i]);
    }
    qcow2_lock(s);
    assert_int_equal(s->inflight_waiters.wakeups, wakeups);
    assert_int_equal(waiting_locked(s), NREQ - 1);
    qcow2_unlock(s);

    /* The allocation done, the fifteen write in place side by side: one
     * stopped at its data write holds none of the others back. */
    assert_true(qimg_image_debug_break(img, "write_aio", "inplace", &err));
    assert_true(qimg_image_debug_resume(img, "alloc", &err));
    wait_for(img, &d[0]);
    assert_int_equal(wait_stopped(img, "inplace", 1), 1);
    for (int t = 0; t < 1000 && (done = completed(d + 1, NREQ - 1)) < NREQ - 2; t++) {
        aio_poll_for(img, 10); /* 10 s at most: a bound, not a measurement */
    }
    qcow2_lock(s);
    registered = s->inflight != NULL;
    qcow2_unlock(s);
    if (done != NREQ - 2 || registered) {
        fail_msg("with one in-place write stopped, %u of the %u others completed, and it "
                 "%s registered (write.c invariant 6)",
                 done, NREQ - 2, registered ? "is" : "is not");
    }
    assert_true(qimg_image_debug_resume(img, "inplace", &err));
    for (unsigned i = 1; i < NREQ; i++) {
        wait_for(img, &d[i]);
    }

    assert_true(qimg_image_close(img, &err));
    assert_true(g_file_set_contents(raw, (const char *)model, 4 * MiB, NULL));
    tu_run("qemu-img compare -q -f qcow2 -F raw '%s' '%s'", p, raw);
    /* Allocated once, by the first write: the header, refcount table and
     * block and L1 (qemu-img create), the L2 table, then guest cluster 0's
     * host cluster before the others'; nothing leaked or freed between. */
    assert_int_equal(tu_run_status(&out, "qemu-img check --output=json '%s'", p), 0);
    if (!strstr(out, "\"allocated-clusters\": 9,") ||
        !strstr(out, "\"image-end-offset\": 917504,") || strstr(out, "leaks")) {
        fail_msg("qemu-img check: %s", out);
    }
    g_free(out);
    out = NULL;
    assert_int_equal(tu_run_status(&out, "qemu-img map --output=json '%s'", p), 0);
    if (!strstr(out, "\"start\": 0, \"length\": 65536, \"depth\": 0, "
                     "\"present\": true, \"zero\": false, \"data\": true, "
                     "\"offset\": 327680}")) {
        fail_msg("guest cluster 0 not at host cluster 5: %s", out);
    }
    for (unsigned i = 0; i < NREQ + NOTHER; i++) {
        free(buf[i]);
    }
    (void)state;
}

static bool registered(Qcow2State *s)
{
    bool r;

    qcow2_lock(s);
    r = s->inflight != NULL;
    qcow2_unlock(s);
    return r;
}

/* One write of len bytes at off stopped at its data write as tag: is it
 * registered there (write.c invariant 6)?  Resumed and completed. */
static bool registered_at_data_write(QimgImage *img, Qcow2State *s, uint64_t off,
                                     uint8_t *buf, size_t len, const char *tag)
{
    g_autoptr(GError) err = NULL;
    Done d;
    bool r;

    assert_true(qimg_image_debug_break(img, "write_aio", tag, &err));
    submit_len(img, off, buf, len, &d);
    assert_int_equal(wait_stopped(img, tag, 1), 1);
    r = registered(s);
    assert_true(qimg_image_debug_resume(img, tag, &err));
    wait_for(img, &d);
    return r;
}

/*
 * write.c invariant 6: a write that missed the fast path and, under the
 * lock, finds nothing in its way and its clusters allocated and COPIED
 * writes them in place without registering.  The miss is forced without a
 * race: guest clusters 0 and 1 are allocated (and learnt), then a write
 * into the second L2 table allocates that table, a new metadata
 * generation in which the learnt entries may not be written (fastmap.c
 * invariant 4).  A 4 KiB write across clusters 0 and 1 then misses the
 * map, and, stopped at its data write, holds no registration (it did
 * before: registered, it forgot both clusters and would hold back every
 * writer of them).  One across cluster 1 and the unallocated cluster 2
 * still allocates registered.  The image reads as the byte model,
 * qemu-img check counts every cluster allocated once and no leak.
 */
static void test_missed_fast_path_in_place(void **state)
{
    const uint64_t cs = 4096, size = 4 * MiB, far = 2 * MiB; /* 2nd L2 table */
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("missed.qcow2", size, "cluster_size=4k");
    g_autofree char *name = g_strdup_printf("blkdebug::%s", p);
    g_autofree char *raw = tu_fresh("missed.raw");
    g_autofree uint8_t *model = g_malloc0(size);
    g_autofree uint8_t *buf = aligned_buf(2 * cs);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    g_autofree char *out = NULL;
    Qcow2FastSpan sp;
    QimgImage *img;
    Qcow2State *s;
    Done d;

    img = open_image(name, QIMG_CACHE_WRITEBACK);
    ao.engine = QIMG_AIO_ENGINE_THREADS; /* every request through qcow2_pwritev */
    ao.threads = 4;
    assert_true(qimg_image_aio_setup(img, &ao, &err));
    s = img->node->opaque;

    memset(buf, 0x11, 2 * cs);
    memcpy(model, buf, 2 * cs);
    submit_len(img, 0, buf, 2 * cs, &d); /* allocates guest clusters 0 and 1 */
    wait_for(img, &d);
    assert_true(qcow2_fastmap_begin_span(s->fastmap, 0, 2 * cs, true, &sp)); /* learnt */
    qcow2_fastmap_end_span(s->fastmap, &sp);
    memset(buf, 0x22, cs);
    memcpy(model + far, buf, cs);
    submit_len(img, far, buf, cs, &d); /* a new L2 table: a new generation */
    wait_for(img, &d);
    assert_false(qcow2_fastmap_begin_span(s->fastmap, 0, 2 * cs, true, &sp));

    memset(buf, 0x33, cs);
    memcpy(model + cs / 2, buf, cs);
    if (registered_at_data_write(img, s, cs / 2, buf, cs, "inplace")) {
        fail_msg("a write into allocated COPIED clusters that missed the fast path "
                 "registered (write.c invariant 6)");
    }
    memset(buf, 0x44, cs);
    memcpy(model + cs + cs / 2, buf, cs);
    if (!registered_at_data_write(img, s, cs + cs / 2, buf, cs, "alloc")) {
        fail_msg("a write that allocates guest cluster 2 did not register");
    }

    assert_true(qimg_image_close(img, &err));
    assert_true(g_file_set_contents(raw, (const char *)model, (gssize)size, NULL));
    tu_run("qemu-img compare -q -f qcow2 -F raw '%s' '%s'", p, raw);
    /* Four guest clusters (0, 1, 2 and the one at 2 MiB), each allocated
     * once: with qemu-img create's header, refcount table and block and L1
     * and the two L2 tables, ten host clusters; nothing leaked. */
    assert_int_equal(tu_run_status(&out, "qemu-img check --output=json '%s'", p), 0);
    if (!strstr(out, "\"allocated-clusters\": 4,") ||
        !strstr(out, "\"image-end-offset\": 40960,") || strstr(out, "leaks")) {
        fail_msg("qemu-img check: %s", out);
    }
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_siblings_in_place_at_once),
        cmocka_unit_test(test_missed_fast_path_in_place),
    };
    return tu_run_group_tests("qcow2-inflight-threads", tests);
}
