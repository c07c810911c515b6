/*
 * tests/test-qcow2-refcount.c: refcount reading (refcount.c invariants
 * 1-3) for every width 1..64, on synthetic blocks, on images built in
 * memory and on images made by qemu-img; and QEMU's metadata
 * preallocation heuristic.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-qcow2-image.h"
#include "test-util.h"

#include <errno.h>
#include <stdlib.h>

static void test_refblock_decode(void **state)
{
    uint8_t b[64] = {0};

    /* 1 bit, LSB first: entries 0 and 3 set in byte 0, entry 9 in byte 1 */
    b[0] = 0x09;
    b[1] = 0x02;
    assert_int_equal(qcow2_refblock_get(b, 0, 0), 1);
    assert_int_equal(qcow2_refblock_get(b, 1, 0), 0);
    assert_int_equal(qcow2_refblock_get(b, 3, 0), 1);
    assert_int_equal(qcow2_refblock_get(b, 9, 0), 1);
    assert_int_equal(qcow2_refblock_get(b, 8, 0), 0);
    /* 2 bits: byte 0 = 0b11100100 -> entries 0,1,2,3 = 0,1,2,3 */
    b[0] = 0xe4;
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(qcow2_refblock_get(b, i, 1), i);
    }
    /* 4 bits: low nibble first */
    b[0] = 0x5a;
    assert_int_equal(qcow2_refblock_get(b, 0, 2), 0xa);
    assert_int_equal(qcow2_refblock_get(b, 1, 2), 0x5);
    /* 8..64 bits: big-endian */
    memset(b, 0, sizeof(b));
    b[3] = 0xfe;
    assert_int_equal(qcow2_refblock_get(b, 3, 3), 0xfe);
    store_be16(b + 2 * 5, 0xbeef);
    assert_int_equal(qcow2_refblock_get(b, 5, 4), 0xbeef);
    store_be32(b + 4 * 3, 0xdeadbeef);
    assert_int_equal(qcow2_refblock_get(b, 3, 5), 0xdeadbeef);
    store_be64(b + 8 * 7, UINT64_MAX - 1);
    assert_int_equal(qcow2_refblock_get(b, 7, 6), UINT64_MAX - 1);
}

static BlkNode *open_path(const char *path)
{
    g_autoptr(GError) err = NULL;
    BlkNode *img = timg_open(path, true, NULL, &err);
    if (!img) {
        fprintf(stderr, "%s\n", err->message);
        fail();
    }
    return img;
}

static int get_refcount(BlkNode *img, uint64_t cluster, uint64_t *rc)
{
    Qcow2State *s = img->opaque;
    g_mutex_lock(&s->lock);
    int ret = qcow2_get_refcount_locked(s, cluster, rc);
    g_mutex_unlock(&s->lock);
    return ret;
}

static void test_reftable_validation(void **state)
{
    TImg t = timg_new(3, 10, 1 << 20, false);
    uint64_t rt = timg_c(&t, 1), rc;
    g_autofree char *p1 = NULL, *p2 = NULL, *p3 = NULL, *p4 = NULL;

    p1 = timg_write(&t, tu_tmpdir(), "rc-good.qcow2");
    BlkNode *img = open_path(p1);
    for (unsigned i = 0; i < TIMG_CLUSTERS; i++) {
        assert_int_equal(get_refcount(img, i, &rc), 0);
        assert_int_equal(rc, 1);
    }
    assert_int_equal(get_refcount(img, TIMG_CLUSTERS, &rc), 0);
    assert_int_equal(rc, 0);
    /* past the refcount table: 0 (invariant 2) */
    assert_int_equal(get_refcount(img, UINT64_C(1) << 40, &rc), 0);
    assert_int_equal(rc, 0);
    blk_close(img);

    timg_set64(&t, rt, timg_c(&t, 2) + 512);
    p2 = timg_write(&t, tu_tmpdir(), "rc-unaligned.qcow2");
    img = open_path(p2);
    assert_int_equal(get_refcount(img, 0, &rc), -EIO);
    assert_non_null(strstr(blk_error_message(), "Refblock offset 0xa00 unaligned "
                                                "(reftable index: 0)"));
    blk_close(img);

    timg_set64(&t, rt, timg_c(&t, 2) | 3);
    p3 = timg_write(&t, tu_tmpdir(), "rc-reserved.qcow2");
    img = open_path(p3);
    assert_int_equal(get_refcount(img, 0, &rc), -EIO);
    assert_non_null(strstr(blk_error_message(), "Refcount table entry 0x0000000000000803 "
                                                "has reserved bits set"));
    blk_close(img);

    timg_set64(&t, rt, timg_c(&t, 64));
    p4 = timg_write(&t, tu_tmpdir(), "rc-eof.qcow2");
    img = open_path(p4);
    assert_int_equal(get_refcount(img, 0, &rc), -EIO);
    assert_non_null(strstr(blk_error_message(),
                           "Refblock offset 0x10000 (reftable index: "
                           "0) is beyond the end of the file"));
    blk_error_clear();
    blk_close(img);
    timg_free(&t);
}

static void sh(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
static void sh(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *cmd = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    assert_int_equal(system(cmd), 0);
}

static uint64_t host_of(BlkNode *img, uint64_t guest)
{
    BlkStatus st;
    assert_int_equal(img->drv->block_status(img, guest, 512, &st), 0);
    assert_true(st.flags & BLK_STATUS_OFFSET_VALID);
    return st.map;
}

/* qemu-img images of every width: every cluster of a fresh image is in
 * use exactly once; after a snapshot shared clusters count 2. */
static void test_qemu_images(void **state)
{
    TU_REQUIRE_QEMU();
    for (int order = 0; order <= 6; order++) {
        g_autofree char *p = g_strdup_printf("%s/w%d.qcow2", tu_tmpdir(), 1 << order);
        sh("qemu-img create -q -f qcow2 -o refcount_bits=%d,cluster_size=4096 '%s' 1M",
           1 << order, p);
        sh("qemu-io -f qcow2 -c 'write -P 1 0 64k' '%s' >/dev/null", p);
        if (order > 0) {
            sh("qemu-img snapshot -c s '%s'", p);
            sh("qemu-io -f qcow2 -c 'write -P 2 0 4k' '%s' >/dev/null", p);
        }
        BlkNode *img = open_path(p);
        Qcow2State *s = img->opaque;
        uint64_t clusters = s->file_size / 4096, rc, twos = 0;
        assert_int_equal(s->refcount_bits, 1 << order);
        for (uint64_t c = 0; c < clusters; c++) {
            assert_int_equal(get_refcount(img, c, &rc), 0);
            assert_true(rc >= 1 && rc <= 2);
            twos += rc == 2;
        }
        assert_int_equal(get_refcount(img, clusters + 10, &rc), 0);
        assert_int_equal(rc, 0);
        if (order > 0) {
            assert_int_equal(get_refcount(img, host_of(img, 0) / 4096, &rc), 0);
            assert_int_equal(rc, 1); /* rewritten after the snapshot */
            assert_int_equal(get_refcount(img, host_of(img, 8192) / 4096, &rc), 0);
            assert_int_equal(rc, 2); /* shared with the snapshot */
            assert_true(twos >= 15);
        }
        blk_close(img);
    }
}

static void test_metadata_preallocation(void **state)
{
    TU_REQUIRE_QEMU();
    const char *modes[] = {"off", "metadata"};
    for (int i = 0; i < 2; i++) {
        g_autofree char *p = g_strdup_printf("%s/pre-%s.qcow2", tu_tmpdir(), modes[i]);
        sh("qemu-img create -q -f qcow2 -o preallocation=%s '%s' 8M", modes[i], p);
        sh("qemu-io -f qcow2 -c 'write -P 1 0 64k' '%s' >/dev/null", p);
        BlkNode *img = open_path(p);
        Qcow2State *s = img->opaque;
        g_mutex_lock(&s->lock);
        assert_int_equal(qcow2_detect_metadata_preallocation_locked(s), i);
        g_mutex_unlock(&s->lock);
        blk_close(img);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refblock_decode),
        cmocka_unit_test(test_reftable_validation),
        cmocka_unit_test(test_qemu_images),
        cmocka_unit_test(test_metadata_preallocation),
    };
    return tu_run_group_tests("qcow2-test", tests);
}
