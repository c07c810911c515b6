/*
 * tests/test-qcow2-cluster.c: L1/L2 entry decoding and validation
 * (cluster.c invariants 1-4), block status of this layer (read.c
 * invariant 5), on images built in memory.
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

static int seq;

static BlkNode *open_ok(const TImg *t)
{
    g_autofree char *name = g_strdup_printf("img-%d.qcow2", ++seq);
    g_autofree char *path = timg_write(t, tu_tmpdir(), name);
    g_autoptr(GError) err = NULL;
    BlkNode *img = timg_open(path, true, NULL, &err);
    if (!img) {
        fprintf(stderr, "open failed: %s\n", err->message);
        fail();
    }
    return img;
}

static void expect_read_error(const TImg *t, uint64_t off, size_t len, const char *want)
{
    BlkNode *img = open_ok(t);
    g_autofree uint8_t *buf = g_malloc(len);
    int ret = blk_pread(img, off, buf, len);
    const char *msg = blk_error_message();

    if (ret != -EIO || !msg || !strstr(msg, want)) {
        fprintf(stderr, "ret %d, message: %s\nexpected: %s\n", ret, msg ? msg : "(none)",
                want);
        fail();
    }
    blk_error_clear();
    blk_close(img);
}

static void test_l1_entries(void **state)
{
    TImg t = timg_new(3, 10, 1 << 20, false);
    uint64_t l1 = timg_c(&t, 3);

    timg_set64(&t, l1, timg_c(&t, 4) | QCOW2_OFLAG_COPIED | 1);
    expect_read_error(&t, 0, 512,
                      "Image is corrupt: L1 entry 0x8000000000001001 has "
                      "reserved bits set (L1 index: 0)");
    timg_set64(&t, l1, timg_c(&t, 4) | (UINT64_C(1) << 56));
    expect_read_error(&t, 0, 512, "L1 entry 0x0100000000001000 has reserved bits set");
    timg_set64(&t, l1, 0x1200);
    expect_read_error(&t, 0, 512, "L2 table offset 0x1200 unaligned (L1 index: 0)");
    timg_set64(&t, l1 + 8, 0x100000);
    timg_set64(&t, l1, timg_c(&t, 4));
    expect_read_error(&t, 128 * 1024, 512,
                      "L2 table offset 0x100000 (L1 index: 0x1) is "
                      "beyond the end of the file (8192 bytes)");
    timg_free(&t);
}

static void test_l2_entries(void **state)
{
    TImg t = timg_new(3, 10, 1 << 20, false);

    timg_set_l2(&t, 0, timg_c(&t, 5) | QCOW2_OFLAG_COPIED | 2, 0);
    expect_read_error(&t, 0, 512,
                      "L2 entry 0x8000000000001402 has reserved bits set "
                      "(L2 offset: 0x1000, L2 index: 0)");
    timg_set_l2(&t, 0, timg_c(&t, 5) | (UINT64_C(1) << 61), 0);
    expect_read_error(&t, 0, 512, "has reserved bits set");
    timg_set_l2(&t, 0, 0x1600 | QCOW2_OFLAG_COPIED, 0);
    expect_read_error(&t, 0, 512,
                      "Cluster allocation offset 0x1600 unaligned (L2 offset: "
                      "0x1000, L2 index: 0)");
    timg_set_l2(&t, 0, 0x1600 | QCOW2_OFLAG_ZERO, 0);
    expect_read_error(&t, 0, 512, "Cluster allocation offset 0x1600 unaligned");
    /* the garbage compressed cluster: 0xab bytes are no deflate stream */
    timg_set_l2(&t, 0, QCOW2_OFLAG_COMPRESSED | timg_c(&t, 5), 0);
    expect_read_error(&t, 0, 512,
                      "Could not decompress the zlib-compressed cluster at "
                      "guest offset 0x0 (host offset 0x1400, 512 bytes)");
    timg_free(&t);

    t = timg_new(2, 10, 1 << 20, false);
    timg_set_l2(&t, 1, QCOW2_OFLAG_ZERO, 0);
    expect_read_error(&t, 1024, 512,
                      "Zero cluster entry found in pre-v3 image (L2 offset: "
                      "0x1000, L2 index: 0x1)");
    timg_free(&t);

    /* small clusters: compressed host offsets must stay below 2^56 */
    t = timg_new(3, 9, 1 << 20, false);
    timg_set_l2(&t, 0, QCOW2_OFLAG_COMPRESSED | (UINT64_C(1) << 57), 0);
    expect_read_error(&t, 0, 512, "has a host offset beyond 2^56");
    timg_free(&t);
}

/* cluster.c invariant 4: a bad entry after good ones ends the extent. */
static void test_bad_entry_after_good(void **state)
{
    TImg t = timg_new(3, 10, 1 << 20, false);
    BlkStatus st;
    uint8_t buf[2048];

    timg_set_l2(&t, 1, 0x1a00 | QCOW2_OFLAG_COPIED, 0);
    BlkNode *img = open_ok(&t);
    assert_int_equal(blk_pread(img, 0, buf, 1024), 0);
    assert_int_equal(blk_pread(img, 0, buf, 2048), -EIO);
    assert_int_equal(img->drv->block_status(img, 0, 2048, &st), 0);
    assert_int_equal(st.pnum, 1024);
    assert_int_equal(img->drv->block_status(img, 1024, 1024, &st), -EIO);
    blk_error_clear();
    blk_close(img);
    timg_free(&t);
}

static void test_types_and_status(void **state)
{
    TImg t = timg_new(3, 10, 1 << 20, false);
    BlkStatus st;
    uint8_t buf[1024];

    memset(t.buf + timg_c(&t, 6), 0xcd, t.cs);
    timg_set_l2(&t, 1, timg_c(&t, 6) | QCOW2_OFLAG_COPIED, 0);   /* contiguous */
    timg_set_l2(&t, 2, QCOW2_OFLAG_ZERO, 0);                     /* zero plain */
    timg_set_l2(&t, 3, timg_c(&t, 7) | QCOW2_OFLAG_ZERO, 0);     /* zero alloc */
    timg_set_l2(&t, 4, 0, 0);                                    /* unallocated */
    timg_set_l2(&t, 5, timg_c(&t, 100) | QCOW2_OFLAG_COPIED, 0); /* past EOF */
    timg_set_l2(&t, 6, timg_c(&t, 5) | QCOW2_OFLAG_COPIED, 0);   /* not contiguous */
    BlkNode *img = open_ok(&t);

    struct {
        uint64_t off, pnum;
        unsigned flags;
        uint64_t map;
    } want[] = {
        {0, 2048, BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED,
         5 << 10},
        {100, 1948, BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED,
         (5 << 10) + 100},
        {2048, 1024, BLK_STATUS_ZERO | BLK_STATUS_ALLOCATED, 0},
        {3072, 1024, BLK_STATUS_ZERO | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED,
         7 << 10},
        {4096, 1024, 0, 0},
        {5120, 1024, BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED,
         100 << 10},
        {6144, 1024, BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED,
         5 << 10},
        {7168, 128 * 1024 - 7168, 0, 0}, /* unallocated up to the end of the L2 table */
        {128 * 1024, 128 * 1024, 0, 0},  /* unallocated L1 entry */
    };
    for (size_t i = 0; i < G_N_ELEMENTS(want); i++) {
        assert_int_equal(
            img->drv->block_status(img, want[i].off, img->size - want[i].off, &st), 0);
        assert_int_equal(st.pnum, want[i].pnum);
        assert_int_equal(st.flags, want[i].flags);
        if (st.flags & BLK_STATUS_OFFSET_VALID) {
            assert_int_equal(st.map, want[i].map);
            assert_ptr_equal(st.file, img->file);
        }
    }
    /* a request shorter than the extent is answered for the request */
    assert_int_equal(img->drv->block_status(img, 0, 10, &st), 0);
    assert_int_equal(st.pnum, 10);

    const uint8_t bytes[] = {0xab, 0xcd, 0, 0, 0, 0, 0xab, 0};
    for (size_t c = 0; c < G_N_ELEMENTS(bytes); c++) {
        assert_int_equal(blk_pread(img, c * 1024, buf, sizeof(buf)), 0);
        for (size_t i = 0; i < sizeof(buf); i++) {
            assert_int_equal(buf[i], bytes[c]);
        }
    }
    blk_close(img);
    timg_free(&t);
}

static void test_extended_l2(void **state)
{
    TImg t = timg_new(3, 14, 1 << 20, true); /* 16 KiB clusters, 512 B subclusters */
    BlkStatus st;
    uint64_t c5 = timg_c(&t, 5);

    /* subclusters 0-3 allocated, 8-9 zero, rest unallocated */
    timg_set_l2(&t, 0, c5 | QCOW2_OFLAG_COPIED, 0xfull | (0x300ull << 32));
    timg_set_l2(&t, 1, 0, 0xffffffffull << 32); /* all zero, no host cluster */
    timg_set_l2(&t, 2, 0, 0x0000ff00ull << 32); /* zero 8-15 */
    BlkNode *img = open_ok(&t);
    struct {
        uint64_t off, pnum;
        unsigned flags;
        uint64_t map;
    } want[] = {
        {0, 2048, BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED, c5},
        {512, 1536, BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED,
         c5 + 512},
        {2048, 2048, BLK_STATUS_OFFSET_VALID, c5 + 2048},
        {4096, 1024, BLK_STATUS_ZERO | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED,
         c5 + 4096},
        {5120, 16384 - 5120, BLK_STATUS_OFFSET_VALID, c5 + 5120},
        {16384, 16384, BLK_STATUS_ZERO | BLK_STATUS_ALLOCATED, 0},
        {32768 + 4096, 4096, BLK_STATUS_ZERO | BLK_STATUS_ALLOCATED, 0},
        {32768 + 8192, (1 << 20) - 32768 - 8192, 0, 0},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(want); i++) {
        assert_int_equal(
            img->drv->block_status(img, want[i].off, img->size - want[i].off, &st), 0);
        assert_int_equal(st.pnum, want[i].pnum);
        assert_int_equal(st.flags, want[i].flags);
        if (st.flags & BLK_STATUS_OFFSET_VALID) {
            assert_int_equal(st.map, want[i].map);
        }
    }
    uint8_t buf[16384];
    assert_int_equal(blk_pread(img, 0, buf, sizeof(buf)), 0);
    for (size_t i = 0; i < sizeof(buf); i++) {
        assert_int_equal(buf[i], i < 2048 ? 0xab : 0);
    }
    blk_close(img);

    timg_set_l2(&t, 0, c5 | QCOW2_OFLAG_COPIED, 1 | (1ull << 32));
    expect_read_error(&t, 0, 512,
                      "Invalid subcluster bitmap 0x0000000100000001 for L2 "
                      "entry 0x8000000000014000 (L2 offset: 0x10000, L2 index: "
                      "0)");
    timg_set_l2(&t, 0, 0, 1);
    expect_read_error(&t, 0, 512, "Invalid subcluster bitmap 0x0000000000000001");
    timg_set_l2(&t, 0, QCOW2_OFLAG_COMPRESSED | c5, 5);
    expect_read_error(&t, 0, 512,
                      "Compressed cluster entry has a non-zero subcluster "
                      "bitmap 0x0000000000000005");
    /* bit 0 is not the zero flag with extended L2 entries */
    timg_set_l2(&t, 0, c5 | QCOW2_OFLAG_COPIED | QCOW2_OFLAG_ZERO, 1);
    img = open_ok(&t);
    assert_int_equal(blk_pread(img, 0, buf, 512), 0);
    assert_int_equal(buf[0], 0xab);
    blk_close(img);
    timg_free(&t);
}

static void test_data_file(void **state)
{
    TImg t = timg_new(3, 10, 1 << 20, false);
    g_autofree char *data = g_build_filename(tu_tmpdir(), "data.raw", NULL);
    g_autofree uint8_t *raw = g_malloc(8192);

    memset(raw, 0x5a, 8192);
    assert_true(g_file_set_contents(data, (char *)raw, 8192, NULL));
    timg_add_ext(&t, QCOW2_EXT_DATA_FILE, "data.raw", 8);
    timg_set64(&t, QCOW2_HDR_INCOMPATIBLE_FEATURES, QCOW2_INCOMPAT_DATA_FILE);
    /* host offset 0 + COPIED = allocated at 0 with a data file */
    timg_set_l2(&t, 0, QCOW2_OFLAG_COPIED, 0);
    timg_set_l2(&t, 1, timg_c(&t, 1) | QCOW2_OFLAG_COPIED, 0);
    BlkNode *img = open_ok(&t);
    uint8_t buf[2048];
    assert_int_equal(blk_pread(img, 0, buf, sizeof(buf)), 0);
    assert_int_equal(buf[0], 0x5a);
    assert_int_equal(buf[2047], 0x5a);
    BlkStatus st;
    assert_int_equal(img->drv->block_status(img, 0, 4096, &st), 0);
    assert_int_equal(st.pnum, 2048);
    assert_ptr_not_equal(st.file, img->file);
    assert_int_equal(st.map, 0);
    blk_close(img);

    timg_set_l2(&t, 1, timg_c(&t, 5) | QCOW2_OFLAG_COPIED, 0);
    expect_read_error(&t, 1024, 512,
                      "External data file host cluster offset 0x1400 does "
                      "not match guest cluster offset: 0x400");
    timg_set_l2(&t, 1, QCOW2_OFLAG_COMPRESSED | timg_c(&t, 5), 0);
    expect_read_error(&t, 1024, 512,
                      "Compressed cluster entry found in image with "
                      "external data file");
    timg_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_l1_entries),
        cmocka_unit_test(test_l2_entries),
        cmocka_unit_test(test_bad_entry_after_good),
        cmocka_unit_test(test_types_and_status),
        cmocka_unit_test(test_extended_l2),
        cmocka_unit_test(test_data_file),
    };
    return tu_run_group_tests("qcow2-test", tests);
}
