/*
 * tests/test-aio.c: the asynchronous API (include/qimg/aio.h rules 1-7,
 * api/aio.c invariants 1-5) through libqimg.so and the public headers, as
 * an event loop uses it: one thread submits and runs the callbacks (the
 * random workload against a byte model is test-aio-workload.c):
 *
 *  - the eventfd is readable exactly while completions wait (invariant 3),
 *    also for ring completions, and a ring write nobody waits for does not
 *    block a synchronous call (uring.c invariant 5);
 *  - the ring requests a batch of callbacks submits go to the kernel in one
 *    system call when the batch ends, none is left held back after it, and
 *    a callback that then waits in qimg -- a nested wait, a synchronous
 *    call that needs the file lock a held write has -- gets it submitted
 *    first (aio.h rule 8, aio.c invariant 14, uring.c invariant 7,
 *    aio/plug.h invariant 2);
 *  - close drains: every callback runs, once (rule 6, invariant 1);
 *  - flags an operation cannot honour, and a NULL callback, are refused at
 *    submission, with no callback (rule 1, invariant 5);
 *  - errors from the fault node (blkdebug:): a data write, a metadata write
 *    and a flush each fail in their own callback with the message, and the
 *    metadata and flush failures are sticky for later writes (rule 7).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-util.h"

#include "test-aio-util.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the eventfd, close drains ---- */

typedef struct Count {
    int calls, errors;
    int last_ret;
    char *last_msg;
} Count;

static void count_cb(void *opaque, int ret, const GError *err)
{
    Count *c = opaque;
    c->calls++;
    c->last_ret = ret;
    assert_true((ret < 0) == (err != NULL)); /* rule 1 */
    if (ret < 0) {
        c->errors++;
        g_free(c->last_msg);
        c->last_msg = g_strdup(err->message);
    }
}

static void test_eventfd(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("efd.qcow2", MiB, NULL);
    g_autoptr(GError) err = NULL;
    QimgImage *img = open_image(p, QIMG_CACHE_WRITEBACK);
    uint8_t buf[512] = {1};
    struct iovec v = {.iov_base = buf, .iov_len = sizeof(buf)};
    struct pollfd pfd;
    Count c = {0};
    int fd = qimg_image_aio_fd(img, &err);

    assert_true(fd >= 0);
    assert_false(fd_readable(fd));
    assert_true(qimg_image_aio_pwritev(img, 0, &v, 1, 0, count_cb, &c, &err));
    assert_int_equal(c.calls, 0); /* rule 2: not inside the submit */
    pfd = (struct pollfd){.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 10000), 1); /* invariant 3 */
    assert_int_equal(c.calls, 0);
    assert_int_equal(qimg_image_aio_poll(img, 0), 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.last_ret, 0);
    assert_false(fd_readable(fd));
    assert_int_equal(qimg_image_aio_poll(img, 0), 0);

    /* two completions, polled one at a time: still readable in between */
    assert_true(qimg_image_aio_preadv(img, 0, &v, 1, 0, count_cb, &c, &err));
    assert_true(qimg_image_aio_flush(img, 0, count_cb, &c, &err));
    while (qimg_image_aio_in_flight(img) > 0) {
        assert_int_equal(poll(&pfd, 1, 10000), 1);
        unsigned n = qimg_image_aio_poll(img, 1);
        assert_true(n <= 1);
    }
    assert_int_equal(c.calls, 3);
    assert_false(fd_readable(fd));
    assert_true(qimg_image_close(img, &err));
    g_free(c.last_msg);
}

static void test_close_drains(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("drain.qcow2", 8 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    QimgImage *img = open_image(p, QIMG_CACHE_WRITEBACK);
    g_autofree uint8_t *buf = g_malloc(8 * MiB);
    struct iovec v[128];
    Count c = {0};

    for (int i = 0; i < 128; i++) {
        memset(buf + i * 65536, i + 1, 65536);
        v[i] = (struct iovec){.iov_base = buf + i * 65536, .iov_len = 65536};
        assert_true(qimg_image_aio_pwritev(img, (uint64_t)i * 65536, &v[i], 1, 0,
                                           count_cb, &c, &err));
    }
    assert_true(qimg_image_close(img, &err)); /* rule 6 */
    assert_int_equal(c.calls, 128);
    assert_int_equal(c.errors, 0);
    img = open_image(p, QIMG_CACHE_WRITEBACK);
    g_autofree uint8_t *rd = g_malloc(8 * MiB);
    assert_true(qimg_image_pread(img, 0, rd, 8 * MiB, &err));
    assert_memory_equal(rd, buf, 8 * MiB);
    assert_true(qimg_image_close(img, &err));
    tu_run("qemu-img check -q '%s'", p);
}

static void test_refused(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("refuse.qcow2", MiB, NULL);
    QimgImage *img = open_image(p, QIMG_CACHE_WRITEBACK);
    uint8_t buf[512];
    struct iovec v = {.iov_base = buf, .iov_len = sizeof(buf)};
    Count c = {0};
    GError *err = NULL;

    /* invariant 5: each operation refuses what it cannot honour */
    assert_false(qimg_image_aio_preadv(img, 0, &v, 1, QIMG_AIO_FUA, count_cb, &c, &err));
    assert_int_equal(err->code, EINVAL);
    g_clear_error(&err);
    assert_false(
        qimg_image_aio_pwritev(img, 0, &v, 1, QIMG_AIO_MAY_UNMAP, count_cb, &c, &err));
    g_clear_error(&err);
    assert_false(qimg_image_aio_pdiscard(img, 0, 512, QIMG_AIO_FUA, count_cb, &c, &err));
    g_clear_error(&err);
    assert_false(qimg_image_aio_flush(img, 1u << 9, count_cb, &c, &err));
    g_clear_error(&err);
    assert_false(qimg_image_aio_pwritev(img, 0, &v, 1, 0, NULL, NULL, &err));
    g_clear_error(&err);
    assert_int_equal(qimg_image_aio_in_flight(img), 0);

    /* a request the image refuses is still a request: its callback says so */
    assert_true(qimg_image_aio_pwritev(img, 2 * MiB, &v, 1, 0, count_cb, &c, &err));
    qimg_image_aio_wait(img);
    assert_int_equal(c.calls, 1);
    assert_true(c.last_ret < 0);
    assert_true(qimg_image_close(img, &err));
    g_free(c.last_msg);
}

/* ---- errors from the fault node ---- */

static QimgImage *open_fault(const char *p, const char *rule)
{
    g_autofree char *name = g_strdup_printf("blkdebug:%s:%s", rule, p);
    return open_image(name, QIMG_CACHE_WRITEBACK);
}

static void write_one(QimgImage *img, uint64_t off, Count *c)
{
    static uint8_t buf[4096] = {7};
    struct iovec v = {.iov_base = buf, .iov_len = sizeof(buf)};
    g_autoptr(GError) err = NULL;
    int before = c->calls;

    assert_true(qimg_image_aio_pwritev(img, off, &v, 1, 0, count_cb, c, &err));
    while (c->calls == before) {
        qimg_image_aio_wait(img);
    }
}

static void flush_one(QimgImage *img, Count *c)
{
    g_autoptr(GError) err = NULL;
    int before = c->calls;

    assert_true(qimg_image_aio_flush(img, 0, count_cb, c, &err));
    while (c->calls == before) {
        qimg_image_aio_wait(img);
    }
}

static void test_error_data_write(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("edata.qcow2", 4 * MiB, NULL);
    QimgImage *img = open_fault(p, "event=data_write,errno=5,nth=1,once");
    g_autoptr(GError) err = NULL;
    Count c = {0};

    write_one(img, 0, &c);
    assert_int_equal(c.last_ret, -EIO);
    assert_non_null(strstr(c.last_msg, "Could not write"));
    write_one(img, 65536, &c); /* a data error is not sticky */
    assert_int_equal(c.last_ret, 0);
    flush_one(img, &c);
    assert_int_equal(c.last_ret, 0);
    assert_true(qimg_image_close(img, &err));
    tu_run("qemu-img check -q '%s'", p);
    g_free(c.last_msg);
}

static void test_error_metadata_sticky(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("emeta.qcow2", 4 * MiB, NULL);
    /* the L2 table is written back at the flush */
    QimgImage *img = open_fault(p, "event=l2_update,errno=5,nth=1");
    GError *err = NULL;
    Count c = {0};

    write_one(img, 0, &c);
    assert_int_equal(c.last_ret, 0);
    flush_one(img, &c);
    assert_int_equal(c.last_ret, -EIO); /* the flush's own callback */
    write_one(img, 2 * 65536, &c);      /* rule 7: sticky */
    assert_int_equal(c.last_ret, -EIO);
    assert_non_null(strstr(c.last_msg, "refused"));
    assert_false(qimg_image_close(img, &err));
    g_clear_error(&err);
    tu_run("qemu-img check -q '%s' || [ $? = 3 ]", p);
    g_free(c.last_msg);
}

/* read.c prime_locked (fastmap.c invariant 1): clusters another process
 * wrote, touched for the first time, still go to the ring once their L2
 * table is cached; the bytes are right both ways. */
static void test_io_uring_first_touch(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("first.qcow2", 4 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    uint8_t *buf = aligned_buf(4096);

    tu_run("qemu-io -c 'write -P 0x11 0 4M' '%s' >/dev/null", p);
    QimgImage *img = open_image(p, QIMG_CACHE_NONE);
    ao.engine = QIMG_AIO_ENGINE_IO_URING;
    assert_true(qimg_image_aio_setup(img, &ao, &err));
    for (uint64_t c = 0; c < 64; c++) { /* one read per cluster */
        memset(buf, 0, 4096);
        aio_one_4k(img, false, c * 65536 + 8192, buf);
        for (int i = 0; i < 4096; i++) {
            assert_int_equal(buf[i], 0x11);
        }
    }
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    /* the first loads the L2 table on the pool */
    assert_int_equal(st.ring_reads, 63);
    memset(buf, 0x22, 4096);
    for (uint64_t c = 63; c < 64; c--) { /* cluster 63 first: not read by this one */
        aio_one_4k(img, true, c * 65536 + 4096, buf);
    }
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    /* the first write switches fast writes on (fastmap.c invariant 3); it
     * is registered and planned, in place, for the ring (aio.c inv. 13) */
    assert_int_equal(st.ring_writes, 64);
    assert_int_equal(st.ring_allocs, 1);
    assert_int_equal(st.ring_retries, 0);
    assert_true(qimg_image_close(img, &err));
    free(buf);
    for (uint64_t c = 0; c < 64; c += 9) {
        tu_run("qemu-io -c 'read -q -P 0x11 %" PRIu64 " 4k' -c 'read -q -P 0x22 %" PRIu64
               " 4k' -c 'read -q -P 0x11 %" PRIu64 " 56k' '%s'",
               c * 65536, c * 65536 + 4096, c * 65536 + 8192, p);
    }
    tu_run("qemu-img check -q '%s'", p);
}

/* uring.c invariant 5: with nobody waiting, ring completions still come --
 * through the eventfd to an event loop, and to a synchronous call that
 * needs what a ring write holds (the file lock for a read-modify-write),
 * even right after a waiter parked the reaper. */
static void test_io_uring_no_waiter(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("nowait.qcow2", 4 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    uint8_t *buf = aligned_buf(4096), small[512];
    struct iovec v = {.iov_base = buf, .iov_len = 4096};
    struct pollfd pfd;
    Count c = {0};

    tu_run("qemu-io -c 'write -P 0x11 0 4M' '%s' >/dev/null", p);
    QimgImage *img = open_image(p, QIMG_CACHE_NONE);
    ao.engine = QIMG_AIO_ENGINE_IO_URING;
    assert_true(qimg_image_aio_setup(img, &ao, &err));
    aio_one_4k(img, false, 0, buf); /* loads the L2 table */
    int fd = qimg_image_aio_fd(img, &err);
    assert_true(fd >= 0);
    for (int i = 0; i < 20; i++) { /* event loop: the eventfd, then poll */
        assert_true(qimg_image_aio_preadv(img, (uint64_t)i * 65536, &v, 1, 0, count_cb,
                                          &c, &err));
        pfd = (struct pollfd){.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&pfd, 1, 10000), 1); /* aio.c invariant 3 */
        assert_int_equal(qimg_image_aio_poll(img, 0), 1);
        assert_false(fd_readable(fd));
    }
    assert_int_equal(c.calls, 20);
    assert_int_equal(c.errors, 0);
    memset(buf, 0x22, 4096);
    memset(small, 0x33, sizeof(small));
    for (int i = 0; i < 20; i++) {
        aio_one_4k(img, false, 65536, buf); /* a waiter: the reaper parks */
        memset(buf, 0x22, 4096);
        assert_true(qimg_image_aio_pwritev(img, (uint64_t)i * 65536, &v, 1, 0, count_cb,
                                           &c, &err));
        /* unaligned: a read-modify-write that takes the file lock the ring
         * write holds until it is reaped -- by nobody but the reaper */
        assert_true(qimg_image_pwrite(img, (uint64_t)i * 65536 + 4096 + 100, small,
                                      sizeof(small), &err));
        assert_int_equal(qimg_image_aio_wait(img), 1);
    }
    assert_int_equal(c.calls, 40);
    assert_int_equal(c.errors, 0);
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    assert_true(st.ring_writes >= 19); /* the path under test was taken */
    assert_true(qimg_image_close(img, &err));
    free(buf);
    for (int i = 0; i < 20; i += 7) {
        tu_run("qemu-io -c 'read -q -P 0x22 %d 4k' -c 'read -q -P 0x11 %d 100' "
               "-c 'read -q -P 0x33 %d 512' '%s'",
               i * 65536, i * 65536 + 4096, i * 65536 + 4196, p);
    }
    tu_run("qemu-img check -q '%s'", p);
    g_free(c.last_msg);
}

/* ---- plug scopes (aio.c invariant 14, uring.c invariant 7) ---- */

typedef struct Chain {
    QimgImage *img;
    uint8_t *buf;  /* 4 KiB per slot */
    int left;      /* reads still to submit */
    int done;      /* callbacks run */
    int mode;      /* CHAIN_*: what a callback does after it resubmits */
    int nested_ok; /* CHAIN_NESTED: the nested wait ran the read's callback */
} Chain;

enum { CHAIN_PLAIN, CHAIN_NESTED, CHAIN_SYNC_RMW };

static void chain_one_done(void *opaque, int ret, const GError *err)
{
    int *flag = opaque;
    assert_int_equal(ret, 0);
    (void)err;
    *flag = 1;
}

static void chain_cb(void *opaque, int ret, const GError *err)
{
    Chain *c = opaque;
    g_autoptr(GError) e = NULL;
    struct iovec v = {.iov_base = c->buf, .iov_len = 4096};
    uint8_t small[512];

    assert_int_equal(ret, 0);
    (void)err;
    c->done++;
    if (c->left == 0) {
        return;
    }
    c->left--;
    /* rewrites in place (direct ring writes, the held kind), all of the
     * bytes the image has there: 0x11 */
    assert_true(qimg_image_aio_pwritev(c->img, (uint64_t)(c->left % 64) * 65536 + 16384,
                                       &v, 1, 0, chain_cb, c, &e));
    if (c->mode == CHAIN_NESTED) {
        /* a ring write held back by this batch (a rewrite next to the
         * chain's), then a nested wait for it: wait_ring submits it before
         * it sleeps on the ring */
        int flag = 0;
        assert_true(qimg_image_aio_pwritev(c->img,
                                           (uint64_t)(c->left % 64) * 65536 + 32768, &v,
                                           1, 0, chain_one_done, &flag, &e));
        while (!flag) {
            qimg_image_aio_wait(c->img);
        }
        c->nested_ok++;
    } else if (c->mode == CHAIN_SYNC_RMW) {
        /* a ring write held back by this batch holds the file lock
         * shared; this read-modify-write needs it exclusively and sleeps
         * for it -- after submitting the write (plug.h invariant 2) */
        int flag = 0;
        struct iovec w = {.iov_base = c->buf + 4096, .iov_len = 4096};
        assert_true(qimg_image_aio_pwritev(c->img, (uint64_t)(c->left % 64) * 65536, &w,
                                           1, 0, chain_one_done, &flag, &e));
        memset(small, 0x33, sizeof(small));
        assert_true(qimg_image_pwrite(c->img,
                                      (uint64_t)(c->left % 64) * 65536 + 8192 + 100,
                                      small, sizeof(small), &e));
        while (!flag) {
            qimg_image_aio_wait(c->img);
        }
    }
}

/* An image of 4 MiB written by qemu-io, on the ring, its L2 table loaded. */
static QimgImage *open_ring_image(const char *p, uint8_t *buf)
{
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;

    tu_run("qemu-io -c 'write -P 0x11 0 4M' '%s' >/dev/null", p);
    QimgImage *img = open_image(p, QIMG_CACHE_NONE);
    ao.engine = QIMG_AIO_ENGINE_IO_URING;
    assert_true(qimg_image_aio_setup(img, &ao, &err));
    aio_one_4k(img, false, 0, buf); /* loads the L2 table */
    return img;
}

static uint64_t ring_submits(QimgImage *img)
{
    g_autoptr(GError) err = NULL;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    return st.ring_submits;
}

/* aio.c invariant 14: every poll's batch of callbacks, whatever its size,
 * hands the rewrites they submit over in one system call; after the poll
 * none is held back: with no further call of ours, all of them complete
 * (the eventfd turns readable) and no system call of ours was owed. */
static void test_io_uring_plug_batches(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("plug.qcow2", 4 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    uint8_t *buf = aligned_buf(8192);
    QimgImage *img = open_ring_image(p, buf);
    struct iovec v = {.iov_base = buf, .iov_len = 4096};
    Chain c = {.img = img, .buf = buf, .left = 320};
    uint64_t r0;
    unsigned batches = 0, big = 0;
    uint64_t s0, s1;
    int fd = qimg_image_aio_fd(img, &err);

    alarm(60); /* a request held back for good hangs: fail instead */
    assert_true(fd >= 0);
    s0 = ring_submits(img);
    for (int i = 0; i < 32; i++) { /* outside any scope: one call each */
        assert_true(qimg_image_aio_preadv(img, (uint64_t)i * 65536, &v, 1, 0, chain_cb,
                                          &c, &err));
    }
    assert_int_equal(ring_submits(img) - s0, 32);
    while (c.done < 352) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (batches == 0) {
            usleep(200000); /* let all 32 complete: one big batch first */
        }
        /* invariant 14: nothing is held back between polls, so the
         * completions come to the eventfd without a call of ours */
        assert_int_equal(poll(&pfd, 1, 20000), 1);
        QimgAioStats st = QIMG_AIO_STATS_INIT;
        assert_true(qimg_image_aio_get_stats(img, &st, &err));
        uint64_t a0 = st.ring_allocs;
        s0 = st.ring_submits;
        int before = c.left;
        unsigned n = qimg_image_aio_poll(img, 0);
        s1 = ring_submits(img);
        if (before > 0 && n > 0) {
            /* n callbacks, min(n, before) rewrites: one system call --
             * plus one per allocating write, never held (the first write
             * to a cluster the fast map has not learned writable is
             * planned in place, aio.c invariant 13), and one per kick of
             * another thread that slept meanwhile (plug.h invariant 2):
             * far fewer than n in a big batch, never more than n */
            assert_true(qimg_image_aio_get_stats(img, &st, &err));
            uint64_t calls = s1 - s0, allocs = st.ring_allocs - a0;
            if (calls < 1 || calls > n + allocs || (n >= 8 && calls * 2 > n)) {
                fail_msg("poll %u: %u callbacks, %d submitted (%" PRIu64
                         " allocating), %" PRIu64 " system calls",
                         batches, n, MIN((int)n, before), allocs, calls);
            }
            batches++;
            big += n >= 8;
        }
    }
    assert_true(big >= 1); /* the first poll ran ~32 callbacks */
    assert_int_equal(c.left, 0);
    assert_int_equal(qimg_image_aio_in_flight(img), 0);
    /* reads are never held (uring.c invariant 7): one call each */
    s0 = ring_submits(img);
    for (int i = 0; i < 8; i++) {
        aio_one_4k(img, false, (uint64_t)i * 65536, buf + 4096);
    }
    r0 = ring_submits(img) - s0;
    assert_int_equal(r0, 8);
    alarm(0);
    assert_true(qimg_image_close(img, &err));
    free(buf);
}

/* aio/plug.h invariant 2, uring.c invariant 7: a callback that waits in
 * qimg for what its own batch holds back -- a nested wait for a ring
 * write, a synchronous read-modify-write that needs the file lock a held
 * ring write has -- gets it submitted before it sleeps (else: a hang). */
static void test_io_uring_plug_waits(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    for (int mode = CHAIN_NESTED; mode <= CHAIN_SYNC_RMW; mode++) {
        g_autofree char *p = new_qcow2("plugw.qcow2", 4 * MiB, NULL);
        g_autoptr(GError) err = NULL;
        uint8_t *buf = aligned_buf(8192);
        QimgImage *img = open_ring_image(p, buf);
        struct iovec v = {.iov_base = buf, .iov_len = 4096};
        Chain c = {.img = img, .buf = buf, .left = 40, .mode = mode};

        memset(buf + 4096, 0x22, 4096);
        alarm(60);
        for (int i = 0; i < 8; i++) {
            assert_true(qimg_image_aio_preadv(img, (uint64_t)i * 65536, &v, 1, 0,
                                              chain_cb, &c, &err));
        }
        while (qimg_image_aio_in_flight(img) > 0) {
            qimg_image_aio_wait(img);
        }
        alarm(0);
        assert_int_equal(c.done, 48);
        if (mode == CHAIN_NESTED) {
            assert_int_equal(c.nested_ok, 40);
        }
        assert_true(qimg_image_close(img, &err));
        free(buf);
        if (mode == CHAIN_SYNC_RMW) {
            tu_run("qemu-io -c 'read -q -P 0x22 0 4k' -c 'read -q -P 0x11 4k 4196' "
                   "-c 'read -q -P 0x33 8292 512' -c 'read -q -P 0x11 8804 56732' '%s'",
                   p);
        }
        tu_run("qemu-img check -q '%s'", p);
    }
}

/* aio.c invariant 8: the default engine is io_uring where it serves. */
static void test_engine_auto(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("auto.qcow2", 4 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    uint8_t *buf = aligned_buf(4096);

    assert_int_equal(ao.engine, QIMG_AIO_ENGINE_AUTO);
    QimgImage *img = open_image(p, QIMG_CACHE_NONE);
    assert_true(qimg_image_aio_get_stats(img, &st, &err)); /* before any setup */
    assert_int_equal(st.engine, QIMG_AIO_ENGINE_AUTO);
    assert_int_equal(st.submitted, 0);
    memset(buf, 0x33, 4096);
    aio_one_4k(img, true, 0, buf); /* the first request sets up the defaults */
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    assert_int_equal(st.engine, QIMG_AIO_ENGINE_IO_URING); /* the CI kernel has it */
    assert_true(qimg_image_close(img, &err));

    img = open_image(p, QIMG_CACHE_WRITEBACK);
    ao.engine = (QimgAioEngine)7;
    assert_false(qimg_image_aio_setup(img, &ao, &err));
    assert_int_equal(err->code, EINVAL);
    g_clear_error(&err);
    ao.engine = QIMG_AIO_ENGINE_AUTO;
    assert_true(qimg_image_aio_setup(img, &ao, &err));
    aio_one_4k(img, false, 0, buf);
    assert_int_equal(buf[0], 0x33);
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    assert_int_equal(st.engine, QIMG_AIO_ENGINE_THREADS);
    assert_int_equal(st.ring_reads, 0);
    assert_true(qimg_image_close(img, &err));
    free(buf);
}

static void test_error_flush_sticky(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("eflush.qcow2", 4 * MiB, NULL);
    GError *err = NULL;
    Count c = {0};

    /* allocated beforehand: the rewrite below needs no flush of its own */
    tu_run("qemu-io -c 'write 0 64k' '%s' >/dev/null", p);
    QimgImage *img = open_fault(p, "event=flush,errno=5,nth=1,once,op=flush");
    write_one(img, 0, &c);
    assert_int_equal(c.last_ret, 0);
    flush_one(img, &c);
    assert_int_equal(c.last_ret, -EIO);
    flush_one(img, &c); /* a failed flush stays failed (once or not) */
    assert_int_equal(c.last_ret, -EIO);
    /* qcow2/meta.c invariant 13: close writes back once more, and the rule
     * is spent, so that works and close reports nothing */
    assert_true(qimg_image_close(img, &err));
    g_assert_no_error(err);
    g_free(c.last_msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_io_uring_first_touch),
        cmocka_unit_test(test_engine_auto),
        cmocka_unit_test(test_io_uring_no_waiter),
        cmocka_unit_test(test_io_uring_plug_batches),
        cmocka_unit_test(test_io_uring_plug_waits),
        cmocka_unit_test(test_eventfd),
        cmocka_unit_test(test_close_drains),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_error_data_write),
        cmocka_unit_test(test_error_metadata_sticky),
        cmocka_unit_test(test_error_flush_sticky),
    };
    return tu_run_group_tests("test-aio", tests);
}
