/*
 * Unit tests for raw/raw.c and the generic layer's request checks
 * (raw.c invariants 1-4, block.h invariant 3, api.c invariants 1-3).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qimg/qimg.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static char *tmpdir;

static int setup(void **state)
{
    const char *base = g_getenv("QIMG_TEST_TMPDIR");
    g_autofree char *tmpl =
        g_build_filename(base ? base : g_get_tmp_dir(), "raw-XXXXXX", NULL);
    tmpdir = g_mkdtemp(g_steal_pointer(&tmpl));
    return tmpdir ? 0 : -1;
}

static int teardown(void **state)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", tmpdir);
    assert_int_equal(system(cmd), 0);
    g_free(tmpdir);
    return 0;
}

static char *path(const char *name)
{
    return g_build_filename(tmpdir, name, NULL);
}

static QimgImage *create_and_open(const char *name, uint64_t size, QimgCacheMode cache)
{
    g_autofree char *p = path(name);
    QimgCreateOptions co = {.struct_size = sizeof(QimgCreateOptions),
                            .format = "raw",
                            .size = size,
                            .size_set = true};
    QimgOpenOptions oo = {
        .struct_size = sizeof(QimgOpenOptions), .format = "raw", .cache = cache};
    g_autoptr(GError) err = NULL;

    assert_true(qimg_image_create(p, &co, &err));
    QimgImage *img = qimg_image_open(p, &oo, &err);
    assert_non_null(img);
    return img;
}

static void test_rw_roundtrip(void **state)
{
    static const QimgCacheMode modes[] = {QIMG_CACHE_WRITEBACK, QIMG_CACHE_WRITETHROUGH,
                                          QIMG_CACHE_UNSAFE};
    for (size_t m = 0; m < G_N_ELEMENTS(modes); m++) {
        g_autoptr(GError) err = NULL;
        QimgImage *img = create_and_open("rt.raw", 1 << 20, modes[m]);
        char buf[1000], out[1000];

        memset(buf, 0x5a, sizeof(buf));
        assert_true(qimg_image_pwrite(img, 4095, buf, sizeof(buf), &err));
        assert_true(qimg_image_pread(img, 4095, out, sizeof(out), &err));
        assert_memory_equal(buf, out, sizeof(buf)); /* invariant 1 */
        assert_true(qimg_image_close(img, &err));

        /* The bytes are in the file at the same offset. */
        g_autofree char *p = path("rt.raw");
        int fd = open(p, O_RDONLY);
        assert_true(fd >= 0);
        assert_int_equal(pread(fd, out, sizeof(out), 4095), (ssize_t)sizeof(out));
        close(fd);
        assert_memory_equal(buf, out, sizeof(out));
    }
}

static void test_bounds_and_readonly(void **state)
{
    g_autoptr(GError) err = NULL;
    QimgImage *img = create_and_open("b.raw", 65536, QIMG_CACHE_WRITEBACK);
    char buf[16] = {0};

    /* block.h invariant 3: requests stay inside the virtual disk. */
    assert_false(qimg_image_pread(img, 65530, buf, sizeof(buf), &err));
    assert_int_equal(err->code, EIO);
    assert_non_null(strstr(err->message, "beyond the end"));
    g_clear_error(&err);
    assert_false(qimg_image_pwrite(img, UINT64_MAX - 4, buf, sizeof(buf), &err));
    assert_non_null(strstr(err->message, "overflows"));
    g_clear_error(&err);
    assert_true(qimg_image_close(img, &err));

    g_autofree char *p = path("b.raw");
    QimgOpenOptions ro = {.struct_size = sizeof(QimgOpenOptions), .read_only = true};
    img = qimg_image_open(p, &ro, &err);
    assert_non_null(img);
    assert_string_equal(qimg_image_format(img), "raw"); /* probed */
    assert_false(qimg_image_pwrite(img, 0, buf, 1, &err));
    assert_int_equal(err->code, EACCES);
    g_clear_error(&err);
    assert_true(qimg_image_close(img, &err));
}

static void test_zero_discard_status(void **state)
{
    g_autoptr(GError) err = NULL;
    const uint64_t size = 4 << 20;
    QimgImage *img = create_and_open("z.raw", size, QIMG_CACHE_WRITEBACK);
    g_autofree char *buf = g_malloc(1 << 20);
    QimgExtent e;

    memset(buf, 0xab, 1 << 20);
    /* Fresh file: the first block is allocated (as qemu-img creates raw
     * files), the rest is a hole that reads as zeros, present (invariant 3). */
    assert_true(qimg_image_block_status(img, 0, size, &e, &err));
    assert_int_equal(e.length, 4096);
    assert_true(e.flags & QIMG_STATUS_DATA);
    assert_true(qimg_image_block_status(img, 4096, size - 4096, &e, &err));
    assert_int_equal(e.length, size - 4096);
    assert_true(e.flags & QIMG_STATUS_ZERO);
    assert_false(e.flags & QIMG_STATUS_DATA);
    assert_true(e.flags & QIMG_STATUS_ALLOCATED);
    assert_int_equal(e.depth, 0);

    assert_true(qimg_image_pwrite(img, 1 << 20, buf, 1 << 20, &err));
    assert_true(qimg_image_block_status(img, 4096, size, &e, &err));
    assert_int_equal(e.length, (1 << 20) - 4096);
    assert_true(e.flags & QIMG_STATUS_ZERO);
    assert_true(qimg_image_block_status(img, 1 << 20, size - (1 << 20), &e, &err));
    assert_true(e.flags & QIMG_STATUS_DATA);
    assert_true(e.flags & QIMG_STATUS_OFFSET_VALID);
    assert_int_equal(e.offset, 1 << 20);
    assert_int_equal(e.length, 1 << 20);

    /* Zeroing with unmap leaves zeros and (on most filesystems) a hole. */
    assert_true(
        qimg_image_pwrite_zeroes(img, 1 << 20, 512 << 10, QIMG_ZERO_MAY_UNMAP, &err));
    assert_true(qimg_image_pread(img, (1 << 20) - 1, buf, (512 << 10) + 2, &err));
    assert_int_equal(buf[0], 0);
    assert_true(buf_is_zero(buf, 512 << 10));
    assert_int_equal((unsigned char)buf[(512 << 10) + 1], 0xab);

    /* Discard is advisory; it must not fail on a regular file. */
    assert_true(qimg_image_pdiscard(img, 0, 65536, &err));
    assert_true(qimg_image_close(img, &err));
}

static void test_truncate_and_info(void **state)
{
    g_autoptr(GError) err = NULL;
    QimgImage *img = create_and_open("t.raw", 1 << 20, QIMG_CACHE_WRITEBACK);

    assert_true(qimg_image_truncate(img, 3 << 20, false, QIMG_PREALLOC_OFF, &err));
    assert_int_equal(qimg_image_size(img), 3 << 20); /* invariant 2 */
    assert_false(qimg_image_truncate(img, 1 << 20, false, QIMG_PREALLOC_OFF, &err));
    assert_non_null(strstr(err->message, "--shrink"));
    g_clear_error(&err);
    assert_true(qimg_image_truncate(img, 1 << 19, true, QIMG_PREALLOC_OFF, &err));
    assert_int_equal(qimg_image_size(img), 1 << 19);

    g_autoptr(QimgInfo) info = qimg_image_get_info(img, &err);
    assert_non_null(info);
    assert_string_equal(info->format, "raw");
    assert_int_equal(info->virtual_size, 1 << 19);
    assert_true(info->actual_size >= 0);
    assert_null(info->backing_filename);
    assert_true(qimg_image_close(img, &err));
}

static void test_open_errors(void **state)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *p = path("missing.raw");
    QimgOpenOptions o = {.struct_size = sizeof(QimgOpenOptions)};

    assert_null(qimg_image_open(p, &o, &err));
    assert_int_equal(err->code, ENOENT);
    assert_non_null(strstr(err->message, "No such file or directory"));
    g_clear_error(&err);

    QimgImage *img = create_and_open("e.raw", 512, QIMG_CACHE_WRITEBACK);
    qimg_image_free(img);
    g_autofree char *e = path("e.raw");
    o.format = "vmdk-nope";
    assert_null(qimg_image_open(e, &o, &err));
    assert_non_null(strstr(err->message, "Unknown driver 'vmdk-nope'"));
    g_clear_error(&err);

    QimgCreateOptions co = {.struct_size = sizeof(QimgCreateOptions),
                            .format = "raw",
                            .size = 512,
                            .backing_file = "x"};
    assert_false(qimg_image_create(e, &co, &err));
    assert_non_null(strstr(err->message, "Backing file not supported"));
}

/* A qcow2 header's first 8 bytes: magic and version 3. */
static void qcow2_head(uint8_t *b)
{
    static const uint8_t h[8] = {'Q', 'F', 'I', 0xfb, 0, 0, 0, 3};
    memcpy(b, h, sizeof(h));
}

static QimgImage *open_probed(const char *p, const char *format)
{
    QimgOpenOptions oo = {.struct_size = sizeof(QimgOpenOptions),
                          .format = format,
                          .cache = QIMG_CACHE_WRITEBACK};
    g_autoptr(GError) err = NULL;
    QimgImage *img = qimg_image_open(p, &oo, &err);
    assert_non_null(img);
    assert_string_equal(qimg_image_format(img), "raw");
    return img;
}

static void assert_head(const char *p, const uint8_t *want, size_t len)
{
    g_autofree char *data = NULL;
    gsize n = 0;
    assert_true(g_file_get_contents(p, &data, &n, NULL));
    assert_true(n >= len);
    assert_memory_equal(data, want, len);
}

/* raw.c invariant 4: block 0 of a probed raw image cannot become a header. */
static void test_probed_block0(void **state)
{
    g_autofree char *p = path("probed.raw");
    uint8_t blk[1024], zero[1024] = {0}, cur[1024] = {0};
    g_autoptr(GError) err = NULL;
    QimgImage *img;

    assert_true(g_file_set_contents(p, (const char *)zero, sizeof(zero), NULL));
    img = open_probed(p, NULL);

    /* a whole header at 0: refused, nothing written */
    memset(blk, 0x11, sizeof(blk));
    qcow2_head(blk);
    assert_false(qimg_image_pwrite(img, 0, blk, sizeof(blk), &err));
    assert_int_equal(err->code, EPERM);
    assert_non_null(strstr(err->message, "block 0"));
    g_clear_error(&err);
    assert_head(p, zero, sizeof(zero));

    /* the magic alone (version still 0) probes as raw: allowed */
    assert_true(qimg_image_pwrite(img, 0, "QFI\xfb", 4, &err));
    memcpy(cur, "QFI\xfb", 4);
    assert_head(p, cur, sizeof(cur));
    /* then the version: with the magic already there it makes a header */
    assert_false(qimg_image_pwrite(img, 4, "\0\0\0\3", 4, &err));
    assert_int_equal(err->code, EPERM);
    g_clear_error(&err);
    assert_head(p, cur, sizeof(cur));

    /* a write across block 0 with harmless contents lands whole */
    memset(blk, 0x22, sizeof(blk));
    assert_true(qimg_image_pwrite(img, 300, blk, 600, &err));
    memset(cur + 300, 0x22, 600);
    assert_head(p, cur, sizeof(cur));
    /* past block 0 nothing is checked */
    qcow2_head(blk);
    assert_true(qimg_image_pwrite(img, 512, blk, 8, &err));
    memcpy(cur + 512, blk, 8);
    assert_head(p, cur, sizeof(cur));
    /* zeroing cannot make a header */
    assert_true(qimg_image_pwrite_zeroes(img, 0, 512, 0, &err));
    memset(cur, 0, 512);
    assert_head(p, cur, sizeof(cur));
    assert_true(qimg_image_close(img, &err));

    /* with the format given there is no restriction */
    img = open_probed(p, "raw");
    qcow2_head(blk);
    assert_true(qimg_image_pwrite(img, 0, blk, 512, &err));
    assert_true(qimg_image_close(img, &err));
    memcpy(cur, blk, 512);
    assert_head(p, cur, sizeof(cur));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rw_roundtrip),
        cmocka_unit_test(test_bounds_and_readonly),
        cmocka_unit_test(test_zero_discard_status),
        cmocka_unit_test(test_truncate_and_info),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_probed_block0),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
