/*
 * tests/test-aio.c: the asynchronous API (include/qimg/aio.h rules 1-7,
 * api/aio.c invariants 1-5) through libqimg.so and the public headers, as
 * an event loop uses it: one thread submits and runs the callbacks.
 *
 *  - a random workload of reads, writes, zero writes, discards and flushes
 *    against a byte model, many requests in flight (never two on the same
 *    bytes), read back after a reopen, `qemu-img check` clean;
 *  - the eventfd is readable exactly while completions wait (invariant 3),
 *    also for ring completions, and a ring write nobody waits for does not
 *    block a synchronous call (uring.c invariant 5);
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

#include "qimg/aio.h"
#include "qimg/qimg.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#define MiB (UINT64_C(1) << 20)
#define BLOCK 4096u

static char *new_qcow2(const char *stem, uint64_t size, const char *opts)
{
    char *p = tu_fresh(stem);
    tu_run("qemu-img create -q -f qcow2 %s%s '%s' %" PRIu64, opts ? "-o " : "",
           opts ? opts : "", p, size);
    return p;
}

static QimgImage *open_image(const char *p, QimgCacheMode cache)
{
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    QimgImage *img;

    o.cache = cache;
    img = qimg_image_open(p, &o, &err);
    if (!img) {
        fail_msg("open %s: %s", p, err->message);
    }
    return img;
}

static bool fd_readable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

/* ---- the random workload ---- */

typedef struct Work Work;

typedef struct Req {
    Work *w;
    int op; /* 0 write, 1 read, 2 zero, 3 discard, 4 flush */
    uint64_t block, nblocks;
    uint8_t *buf;
    struct iovec iov;
} Req;

struct Work {
    QimgImage *img;
    uint8_t *model;
    bool *busy; /* per block: a request in flight covers it */
    uint64_t nblocks;
    uint64_t cs;
    int in_flight, done, failures;
    char *why;
};

static void req_done(void *opaque, int ret, const GError *err)
{
    Req *r = opaque;
    Work *w = r->w;

    if (ret < 0 || err) {
        if (w->failures++ == 0) {
            w->why = g_strdup_printf("op %d at block %" PRIu64 ": %d (%s)", r->op,
                                     r->block, ret, err ? err->message : "no error");
        }
    } else if (r->op == 1 &&
               memcmp(r->buf, w->model + r->block * BLOCK, r->nblocks * BLOCK) != 0) {
        if (w->failures++ == 0) {
            w->why = g_strdup_printf("read at block %" PRIu64 " differs from the model",
                                     r->block);
        }
    }
    for (uint64_t i = 0; i < r->nblocks; i++) {
        w->busy[r->block + i] = false;
    }
    w->in_flight--;
    w->done++;
    free(r->buf);
    g_free(r);
}

/* O_DIRECT-aligned, so reads can take the io_uring path (uring.c inv. 1). */
static uint8_t *aligned_buf(size_t len)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 4096, len), 0);
    return p;
}

/* Submit one random request on free blocks; false if none was free. */
static bool submit_random(Work *w, GRand *rnd)
{
    g_autoptr(GError) err = NULL;
    Req *r = g_new0(Req, 1);
    uint64_t bpc = w->cs / BLOCK ? w->cs / BLOCK : 1;
    bool ok;

    r->w = w;
    r->op = g_rand_int_range(rnd, 0, 100);
    r->op = r->op < 45 ? 0 : r->op < 80 ? 1 : r->op < 90 ? 2 : r->op < 97 ? 3 : 4;
    if (r->op == 3) { /* discards: whole clusters */
        r->block = (uint64_t)g_rand_int_range(rnd, 0, (gint32)(w->nblocks / bpc)) * bpc;
        r->nblocks = bpc;
    } else {
        r->nblocks = (uint64_t)g_rand_int_range(rnd, 1, 5);
        r->block = (uint64_t)g_rand_int_range(rnd, 0, (gint32)(w->nblocks - r->nblocks));
    }
    if (r->op != 4) {
        for (uint64_t i = 0; i < r->nblocks; i++) {
            if (w->busy[r->block + i]) {
                g_free(r);
                return false;
            }
        }
        for (uint64_t i = 0; i < r->nblocks; i++) {
            w->busy[r->block + i] = true;
        }
    }
    uint64_t off = r->block * BLOCK, len = r->nblocks * BLOCK;
    switch (r->op) {
    case 0:
        r->buf = aligned_buf(len);
        for (uint64_t i = 0; i < len; i++) {
            r->buf[i] = (uint8_t)g_rand_int(rnd);
        }
        memcpy(w->model + off, r->buf, len); /* rule 5: nothing else covers it */
        r->iov = (struct iovec){.iov_base = r->buf, .iov_len = len};
        ok = qimg_image_aio_pwritev(w->img, off, &r->iov, 1,
                                    g_rand_int_range(rnd, 0, 10) == 0 ? QIMG_AIO_FUA : 0,
                                    req_done, r, &err);
        break;
    case 1:
        r->buf = aligned_buf(len);
        r->iov = (struct iovec){.iov_base = r->buf, .iov_len = len};
        ok = qimg_image_aio_preadv(w->img, off, &r->iov, 1, 0, req_done, r, &err);
        break;
    case 2:
        memset(w->model + off, 0, len);
        ok = qimg_image_aio_pwrite_zeroes(w->img, off, len, QIMG_AIO_MAY_UNMAP, req_done,
                                          r, &err);
        break;
    case 3:
        memset(w->model + off, 0, len); /* a whole cluster, no backing: zeros */
        ok = qimg_image_aio_pdiscard(w->img, off, len, 0, req_done, r, &err);
        break;
    default:
        ok = qimg_image_aio_flush(w->img, 0, req_done, r, &err);
        break;
    }
    if (!ok) {
        fail_msg("submit: %s", err->message);
    }
    w->in_flight++;
    return true;
}

static void workload_with(const char *opts, uint64_t cs, QimgCacheMode cache,
                          QimgAioEngine engine)
{
    const uint64_t size = 32 * MiB;
    g_autofree char *p = new_qcow2("aio.qcow2", size, opts);
    g_autoptr(GRand) rnd = g_rand_new_with_seed(42);
    g_autoptr(GError) err = NULL;
    Work w = {.nblocks = size / BLOCK, .cs = cs};
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    int submitted = 0;

    w.model = g_malloc0(size);
    w.busy = g_new0(bool, w.nblocks);
    w.img = open_image(p, cache);
    ao.threads = 8;
    ao.engine = engine;
    assert_true(qimg_image_aio_setup(w.img, &ao, &err));
    while (submitted < 6000) {
        while (w.in_flight < 64 && submitted < 6000) {
            submitted += submit_random(&w, rnd);
        }
        qimg_image_aio_wait(w.img);
    }
    while (qimg_image_aio_in_flight(w.img) > 0) {
        qimg_image_aio_wait(w.img);
    }
    assert_int_equal(w.done, submitted);
    if (w.failures) {
        fail_msg("%d failures, first: %s", w.failures, w.why);
    }
    /* where the requests went (aio.c invariant 7) */
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    assert_true(qimg_image_aio_get_stats(w.img, &st, &err));
    assert_int_equal(st.submitted, (uint64_t)submitted);
    assert_int_equal(st.completed, (uint64_t)submitted);
    if (engine == QIMG_AIO_ENGINE_IO_URING && !opts) {
        /* rewrites and reads of clusters written before take the ring
         * (seen: 1246 reads and 1304 writes of 6000 requests).  With
         * extended L2 the fast map knows only clusters whose every
         * subcluster is allocated, which these small writes rarely make. */
        assert_true(st.ring_reads > 300 && st.ring_writes > 300);
        assert_true(st.ring_reads + st.ring_writes < (uint64_t)submitted);
    } else if (engine != QIMG_AIO_ENGINE_IO_URING) {
        assert_int_equal(st.ring_reads + st.ring_writes + st.ring_retries, 0);
    }
    assert_true(qimg_image_close(w.img, &err));

    /* what the image holds now, read synchronously after a reopen */
    QimgImage *img = open_image(p, QIMG_CACHE_WRITEBACK);
    g_autofree uint8_t *all = g_malloc(size);
    assert_true(qimg_image_pread(img, 0, all, size, &err));
    assert_memory_equal(all, w.model, size);
    assert_true(qimg_image_close(img, &err));
    tu_run("qemu-img check -q '%s'", p);
    g_free(w.model);
    g_free(w.busy);
}

static void workload(const char *opts, uint64_t cs)
{
    workload_with(opts, cs, QIMG_CACHE_WRITEBACK, QIMG_AIO_ENGINE_THREADS);
}

/* The io_uring engine (aio.c invariant 7): O_DIRECT, reads of clusters the
 * fast map knows go to the ring, the rest to the pool. */
static void test_workload_io_uring(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload_with(NULL, 65536, QIMG_CACHE_NONE, QIMG_AIO_ENGINE_IO_URING);
    workload_with("extended_l2=on", 65536, QIMG_CACHE_NONE, QIMG_AIO_ENGINE_IO_URING);
}

static void test_workload_64k(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(NULL, 65536);
}

static void test_workload_4k_lazy(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload("cluster_size=4096,lazy_refcounts=on", 4096);
}

static void test_workload_extl2(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload("extended_l2=on,cluster_size=131072", 131072);
}

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
static void first_touch_done(void *opaque, int ret, const GError *err)
{
    *(int *)opaque = ret;
    (void)err;
}

static void one_request(QimgImage *img, bool write, uint64_t off, uint8_t *buf)
{
    g_autoptr(GError) err = NULL;
    struct iovec iov = {.iov_base = buf, .iov_len = 4096};
    int ret = 1;

    assert_true(
        write
            ? qimg_image_aio_pwritev(img, off, &iov, 1, 0, first_touch_done, &ret, &err)
            : qimg_image_aio_preadv(img, off, &iov, 1, 0, first_touch_done, &ret, &err));
    while (ret == 1) {
        qimg_image_aio_wait(img);
    }
    assert_int_equal(ret, 0);
}

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
        one_request(img, false, c * 65536 + 8192, buf);
        for (int i = 0; i < 4096; i++) {
            assert_int_equal(buf[i], 0x11);
        }
    }
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    /* the first loads the L2 table on the pool */
    assert_int_equal(st.ring_reads, 63);
    memset(buf, 0x22, 4096);
    for (uint64_t c = 63; c < 64; c--) { /* cluster 63 first: not read by this one */
        one_request(img, true, c * 65536 + 4096, buf);
    }
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    /* the first write switches fast writes on (fastmap.c invariant 3) */
    assert_int_equal(st.ring_writes, 63);
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
    one_request(img, false, 0, buf); /* loads the L2 table */
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
        one_request(img, false, 65536, buf); /* a waiter: the reaper parks */
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
    one_request(img, true, 0, buf); /* the first request sets up the defaults */
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
    one_request(img, false, 0, buf);
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
    assert_false(qimg_image_close(img, &err));
    g_clear_error(&err);
    g_free(c.last_msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workload_64k),
        cmocka_unit_test(test_workload_4k_lazy),
        cmocka_unit_test(test_workload_extl2),
        cmocka_unit_test(test_workload_io_uring),
        cmocka_unit_test(test_io_uring_first_touch),
        cmocka_unit_test(test_engine_auto),
        cmocka_unit_test(test_io_uring_no_waiter),
        cmocka_unit_test(test_eventfd),
        cmocka_unit_test(test_close_drains),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_error_data_write),
        cmocka_unit_test(test_error_metadata_sticky),
        cmocka_unit_test(test_error_flush_sticky),
    };
    return tu_run_group_tests("test-aio", tests);
}
