/*
 * tests/test-debug-threads.c: breakpoints on the fault node through the
 * public API (qimg_image_debug_*, block/faulty.c invariant 5, api/debug.c),
 * with requests on the asynchronous API's workers; in make test's TSan list.
 *
 * Checks:
 *  - a write stopped at "write_aio" (its data write) is listed as
 *    suspended and stays incomplete while another write completes;
 *    after resume it completes and its bytes read back;
 *  - a breakpoint on "l2_update" (metadata, under the driver's lock) stops
 *    an allocating write into an existing L2 table (cache=writethrough:
 *    the table is written before the write returns); resume lets it and the writes queued
 * behind it finish, every byte as written;
 *  - a breakpoint stops one request only (the next one passes);
 *  - the errors: unknown event ENOENT, an event qimg cannot stop at
 *    ENOTSUP, resume/remove of an unknown tag ENOENT, no fault node
 *    ENOTSUP;
 *  - a synchronous write reaching a breakpoint set by its own thread fails
 *    with EDEADLK instead of stopping for ever;
 *  - close with a stopped request resumes it (api/debug.c invariant 2): the
 *    close returns and the write landed.
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
#include <string.h>

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

typedef struct Req {
    int done; /* 0 running, 1 ok, -errno failed */
} Req;

static void req_done(void *opaque, int ret, const GError *error)
{
    Req *r = opaque;
    (void)error;
    r->done = ret < 0 ? ret : 1;
}

static char *new_image(void)
{
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    char *p = tu_fresh("img.qcow2");

    co.format = "qcow2";
    co.size = 64 * MiB;
    co.size_set = true;
    assert_true(qimg_image_create(p, &co, &err));
    return p;
}

static QimgImage *open_debug(const char *p, QimgCacheMode cache)
{
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    g_autofree char *name = g_strdup_printf("blkdebug::%s", p);
    QimgImage *img;

    o.cache = cache;
    img = qimg_image_open(name, &o, &err);
    if (!img) {
        fail_msg("open %s: %s", name, err->message);
    }
    return img;
}

static void aio_write(QimgImage *img, uint64_t off, uint8_t *buf, size_t len, int fill,
                      Req *r)
{
    g_autoptr(GError) err = NULL;
    struct iovec iov = {.iov_base = buf, .iov_len = len};

    memset(buf, fill, len);
    r->done = 0;
    assert_true(qimg_image_aio_pwritev(img, off, &iov, 1, 0, req_done, r, &err));
}

/* Poll until tag is suspended (at most 10 s). */
static void wait_suspended(QimgImage *img, const char *tag)
{
    for (int i = 0; i < 10000; i++) {
        g_auto(GStrv) now = qimg_image_debug_suspended(img, FALSE);
        if (g_strv_contains((const char *const *)now, tag)) {
            return;
        }
        qimg_image_aio_poll(img, 0);
        g_usleep(1000);
    }
    fail_msg("request '%s' never stopped", tag);
}

static void wait_done(QimgImage *img, Req *r)
{
    while (!r->done) {
        qimg_image_aio_wait(img);
    }
    assert_int_equal(r->done, 1);
}

/* The bytes img reads at [off, +len) are fill (the handle's own view: the
 * metadata may still be in its cache). */
static void expect_bytes(QimgImage *img, uint64_t off, size_t len, int fill)
{
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *buf = g_malloc(len);

    assert_true(qimg_image_pread(img, off, buf, len, &err));
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != fill) {
            fail_msg("byte %" G_GUINT64_FORMAT ": %#x, not %#x", off + i, buf[i], fill);
        }
    }
}

static void test_write_aio(void **state)
{
    g_autofree char *p = new_image();
    g_autoptr(GError) err = NULL;
    QimgImage *img = open_debug(p, QIMG_CACHE_WRITEBACK);
    g_autofree uint8_t *a = g_malloc(64 * KiB), *b = g_malloc(64 * KiB);
    g_autofree uint8_t *c = g_malloc(64 * KiB);
    Req ra, rb, rc;

    (void)state;
    assert_true(qimg_image_debug_break(img, "write_aio", "A", &err));
    aio_write(img, 0, a, 64 * KiB, 0xa1, &ra);
    wait_suspended(img, "A");
    {
        g_auto(GStrv) fresh = qimg_image_debug_suspended(img, TRUE);
        g_auto(GStrv) again = qimg_image_debug_suspended(img, TRUE);
        assert_string_equal(fresh[0], "A");
        assert_null(fresh[1]);
        assert_null(again[0]); /* reported once */
    }
    /* the breakpoint is gone: another write passes while A waits */
    aio_write(img, 1 * MiB, b, 64 * KiB, 0xb2, &rb);
    wait_done(img, &rb);
    assert_int_equal(ra.done, 0);
    expect_bytes(img, 1 * MiB, 64 * KiB, 0xb2);
    assert_true(qimg_image_debug_resume(img, "A", &err));
    wait_done(img, &ra);
    expect_bytes(img, 0, 64 * KiB, 0xa1);
    {
        g_auto(GStrv) now = qimg_image_debug_suspended(img, FALSE);
        assert_null(now[0]);
    }
    /* remove_break resumes a stopped request; ENOENT: its breakpoint went */
    assert_true(qimg_image_debug_break(img, "write_aio", "C", &err));
    aio_write(img, 2 * MiB, c, 64 * KiB, 0xc3, &rc);
    wait_suspended(img, "C");
    assert_false(qimg_image_debug_remove_break(img, "C", &err));
    assert_int_equal(err->code, ENOENT);
    g_clear_error(&err);
    wait_done(img, &rc);
    expect_bytes(img, 2 * MiB, 64 * KiB, 0xc3);
    /* a breakpoint removed before it is reached stops nothing */
    assert_true(qimg_image_debug_break(img, "write_aio", "D", &err));
    assert_true(qimg_image_debug_remove_break(img, "D", &err));
    aio_write(img, 3 * MiB, c, 64 * KiB, 0xd4, &rc);
    wait_done(img, &rc);
    assert_true(qimg_image_close(img, &err));
    tu_run("qemu-img check -q '%s'", p);
}

static void test_l2_update(void **state)
{
    g_autofree char *p = new_image();
    g_autoptr(GError) err = NULL;
    /* writethrough: each allocation writes its L2 table before it returns */
    QimgImage *img = open_debug(p, QIMG_CACHE_WRITETHROUGH);
    enum { N = 6 };
    uint8_t *bufs[N];
    Req r[N];

    (void)state;
    bufs[0] = g_malloc(512);
    memset(bufs[0], 1, 512);
    assert_true(qimg_image_pwrite(img, 0, bufs[0], 512, &err)); /* the L2 table */
    g_free(bufs[0]);
    assert_true(qimg_image_debug_break(img, "l2_update", "L", &err));
    for (int i = 0; i < N; i++) {
        bufs[i] = g_malloc(4 * KiB);
        aio_write(img, (uint64_t)(i + 1) * 3 * MiB + 512, bufs[i], 4 * KiB, 0x10 + i,
                  &r[i]);
        if (i == 0) {
            wait_suspended(img, "L");
        }
    }
    g_usleep(20000);
    assert_true(qimg_image_debug_resume(img, "L", &err));
    for (int i = 0; i < N; i++) {
        wait_done(img, &r[i]);
    }
    for (int i = 0; i < N; i++) {
        expect_bytes(img, (uint64_t)(i + 1) * 3 * MiB + 512, 4 * KiB, 0x10 + i);
        g_free(bufs[i]);
    }
    assert_true(qimg_image_close(img, &err));
    tu_run("qemu-img check -q '%s'", p);
}

static void test_errors(void **state)
{
    g_autofree char *p = new_image();
    g_autoptr(GError) err = NULL;
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    QimgImage *img = open_debug(p, QIMG_CACHE_WRITEBACK);
    uint8_t buf[512];

    (void)state;
    assert_false(qimg_image_debug_break(img, "nosuch", "A", &err));
    assert_int_equal(err->code, ENOENT);
    g_clear_error(&err);
    assert_false(qimg_image_debug_break(img, "l2_alloc_cow_read", "A", &err));
    assert_int_equal(err->code, ENOTSUP);
    assert_non_null(strstr(err->message, "l2_alloc_cow_read"));
    g_clear_error(&err);
    assert_false(qimg_image_debug_resume(img, "A", &err));
    assert_int_equal(err->code, ENOENT);
    g_clear_error(&err);
    assert_false(qimg_image_debug_remove_break(img, "A", &err));
    assert_int_equal(err->code, ENOENT);
    g_clear_error(&err);
    /* a synchronous write on the thread that set the breakpoint */
    assert_true(qimg_image_debug_break(img, "write_aio", "S", &err));
    memset(buf, 7, sizeof(buf));
    assert_false(qimg_image_pwrite(img, 0, buf, sizeof(buf), &err));
    assert_int_equal(err->code, EDEADLK);
    g_clear_error(&err);
    assert_true(qimg_image_pwrite(img, 0, buf, sizeof(buf), &err)); /* gone */
    assert_true(qimg_image_close(img, &err));
    /* no fault node */
    img = qimg_image_open(p, &o, &err);
    assert_non_null(img);
    assert_false(qimg_image_debug_break(img, "write_aio", "A", &err));
    assert_int_equal(err->code, ENOTSUP);
    g_clear_error(&err);
    {
        g_auto(GStrv) none = qimg_image_debug_suspended(img, TRUE);
        assert_null(none[0]);
    }
    assert_true(qimg_image_close(img, &err));
}

static void test_close_resumes(void **state)
{
    g_autofree char *p = new_image();
    g_autoptr(GError) err = NULL;
    QimgImage *img = open_debug(p, QIMG_CACHE_WRITEBACK);
    g_autofree uint8_t *a = g_malloc(64 * KiB);
    Req ra;

    (void)state;
    assert_true(qimg_image_debug_break(img, "write_aio", "A", &err));
    assert_true(qimg_image_debug_break(img, "write_aio", "B", &err));
    aio_write(img, 0, a, 64 * KiB, 0x5a, &ra);
    wait_suspended(img, "A");
    assert_true(qimg_image_debug_resume(img, "A", &err));
    wait_suspended(img, "B"); /* the second breakpoint on the step stops it again */
    assert_true(qimg_image_close(img, &err));
    assert_int_equal(ra.done, 1);
    img = open_debug(p, QIMG_CACHE_WRITEBACK);
    expect_bytes(img, 0, 64 * KiB, 0x5a);
    qimg_image_free(img);
    tu_run("qemu-img check -q '%s'", p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_aio),
        cmocka_unit_test(test_l2_update),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_close_resumes),
    };
    return tu_run_group_tests("test-debug-threads", tests);
}
