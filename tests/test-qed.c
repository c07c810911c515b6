/*
 * tests/test-qed.c: the QED driver on images built here from the format:
 * header codec, open validation with QEMU's messages (qed.c invariant 1),
 * reads of data, zero and unallocated clusters through a backing file
 * (invariant 3), invalid offsets as errors, check and its repair
 * (invariant 4), and the refusal to create (qed/create.c invariant 1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/endian.h"
#include "qed/qed.h"
#include "qimg/check.h"
#include "test-util.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#define CS 4096u /* cluster size of the images built here; table_size 2 */

/*
 * A 4 MiB disk: header (cluster 0, backing name "base.raw" when backing),
 * L1 at cluster 1-2, one L2 table at cluster 3-4 for the first 1 MiB;
 * entries: cluster 0 -> data at cluster 5 (0xaa), cluster 1 -> zero
 * cluster, cluster 2 unallocated, cluster 3 -> data at cluster 6 (0xbb).
 */
static char *build(const char *name, bool backing, void (*tweak)(uint8_t *img))
{
    g_autofree uint8_t *img = g_malloc0(7 * CS);
    QedHeader h = {.magic = QED_MAGIC,
                   .cluster_size = CS,
                   .table_size = 2,
                   .header_size = 1,
                   .l1_offset = CS,
                   .image_size = 4 << 20};
    char *path = g_build_filename(tu_tmpdir(), name, NULL);

    if (backing) {
        h.features = QED_F_BACKING_FILE | QED_F_BACKING_FORMAT_NO_PROBE;
        h.backing_offset = QED_HEADER_SIZE;
        h.backing_size = 8;
        memcpy(img + QED_HEADER_SIZE, "base.raw", 8);
    }
    qed_header_encode(&h, img);
    store_le64(img + CS, 3 * CS);          /* L1[0] */
    store_le64(img + 3 * CS, 5 * CS);      /* L2[0] */
    store_le64(img + 3 * CS + 8, 1);       /* L2[1]: zero cluster */
    store_le64(img + 3 * CS + 24, 6 * CS); /* L2[3] */
    memset(img + 5 * CS, 0xaa, CS);
    memset(img + 6 * CS, 0xbb, CS);
    if (tweak) {
        tweak(img);
    }
    assert_true(g_file_set_contents(path, (char *)img, 7 * CS, NULL));
    return path;
}

static QimgImage *open_qed(const char *p, bool ro, GError **err)
{
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    oo.format = "qed";
    oo.read_only = ro;
    return qimg_image_open(p, &oo, err);
}

static void expect(QimgImage *img, uint64_t off, uint8_t v)
{
    g_autoptr(GError) err = NULL;
    uint8_t buf[CS];

    assert_true(qimg_image_pread(img, off, buf, sizeof(buf), &err));
    for (size_t i = 0; i < sizeof(buf); i++) {
        assert_int_equal(buf[i], v);
    }
}

/* Invariant 3: data, zero cluster, unallocated (backing), past the table. */
static void test_read(void **state)
{
    g_autofree char *p = build("r.qed", true, NULL);
    g_autofree char *base = g_build_filename(tu_tmpdir(), "base.raw", NULL);
    g_autofree uint8_t *b = g_malloc(8 * CS);
    g_autoptr(GError) err = NULL;

    memset(b, 0x33, 8 * CS);
    assert_true(g_file_set_contents(base, (char *)b, 8 * CS, NULL));
    QimgImage *img = open_qed(p, true, &err);
    assert_non_null(img);
    assert_int_equal(qimg_image_size(img), 4 << 20);
    expect(img, 0, 0xaa);
    expect(img, CS, 0);        /* zero cluster: not the backing file's */
    expect(img, 2 * CS, 0x33); /* unallocated: the backing file */
    expect(img, 3 * CS, 0xbb);
    expect(img, 9 * CS, 0);  /* past the backing file's end */
    expect(img, 3 << 20, 0); /* an L1 entry of 0, backing shorter */
    qimg_image_close(img, NULL);
}

static void corrupt_l2(uint8_t *img)
{
    store_le64(img + 3 * CS + 24, 6 * CS + 7); /* not cluster-aligned */
}

static void test_invalid_offset_read(void **state)
{
    g_autofree char *p = build("bad.qed", false, corrupt_l2);
    g_autoptr(GError) err = NULL;
    uint8_t buf[512];
    QimgImage *img = open_qed(p, true, &err);

    assert_non_null(img);
    assert_false(qimg_image_pread(img, 3 * CS, buf, sizeof(buf), &err));
    assert_non_null(strstr(err->message, "invalid cluster offset 24583"));
    qimg_image_close(img, NULL);
}

static void set_magic(uint8_t *img)
{
    store_le32(img, 0x12345678);
}
static void set_feature(uint8_t *img)
{
    store_le64(img + QED_H_FEATURES, 0x10);
}
static void set_cluster(uint8_t *img)
{
    store_le32(img + QED_H_CLUSTER_SIZE, 3000);
}
static void set_table(uint8_t *img)
{
    store_le32(img + QED_H_TABLE_SIZE, 1); /* QEMU's table check refuses it */
}
static void set_size(uint8_t *img)
{
    store_le64(img + QED_H_IMAGE_SIZE, 100);
}
static void set_l1(uint8_t *img)
{
    store_le64(img + QED_H_L1_OFFSET, 100 * CS);
}
static void set_header_size(uint8_t *img)
{
    store_le32(img + QED_H_HEADER_SIZE, 0x80000000u);
}
static void set_backing(uint8_t *img)
{
    store_le64(img + QED_H_FEATURES, QED_F_BACKING_FILE);
    store_le32(img + QED_H_BACKING_OFFSET, CS - 4);
    store_le32(img + QED_H_BACKING_SIZE, 8);
}

/* Invariant 1, one field at a time, QEMU's words. */
static void test_open_errors(void **state)
{
    static const struct {
        void (*tweak)(uint8_t *);
        const char *want;
    } cases[] = {
        {set_magic, "Image not in QED format"},
        {set_feature, "Unsupported QED features: 10"},
        {set_cluster, "QED cluster size is invalid"},
        {set_table, "QED table offset is invalid"},
        {set_size, "QED image size is invalid"},
        {set_l1, "QED table offset is invalid"},
        /* the L1 table then lies inside the header: QEMU checks that first */
        {set_header_size, "QED table offset is invalid"},
        {set_backing, "QED backing filename offset is invalid"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *name = g_strdup_printf("e%zu.qed", i);
        g_autofree char *p = build(name, false, cases[i].tweak);
        g_autoptr(GError) err = NULL;
        QimgImage *img = open_qed(p, true, &err);
        if (img) {
            fail_msg("case %zu opened", i);
        }
        if (!strstr(err->message, cases[i].want)) {
            fail_msg("case %zu: '%s'", i, err->message);
        }
    }
}

static void double_ref(uint8_t *img)
{
    store_le64(img + 3 * CS + 16, 5 * CS);   /* cluster 2 -> the data of cluster 0 */
    store_le64(img + 3 * CS + 32, 900 * CS); /* past the end of the file */
    store_le64(img + QED_H_FEATURES, QED_F_NEED_CHECK);
}

/* Invariant 4: qemu-img's counts, then the repair. */
static void test_check(void **state)
{
    g_autofree char *p = build("c.qed", false, NULL),
                    *q = build("d.qed", false, double_ref);
    g_autoptr(GError) err = NULL;
    QimgCheckResult r = QIMG_CHECK_RESULT_INIT;
    QimgImage *img = open_qed(p, true, &err);

    assert_true(qimg_image_check(img, &r, 0, &err));
    assert_int_equal(r.corruptions, 0);
    assert_int_equal(r.leaks, 0);
    assert_int_equal(r.allocated_clusters, 2);
    assert_int_equal(r.fragmented_clusters, 0);
    assert_int_equal(r.total_clusters, 1024);
    qimg_check_result_clear(&r);
    qimg_image_close(img, NULL);

    img = open_qed(q, true, &err);
    QimgInfo *info = qimg_image_get_info(img, &err);
    assert_true(info->dirty); /* the need-check flag */
    qimg_info_free(info);
    assert_true(qimg_image_check(img, &r, 0, &err));
    assert_int_equal(r.corruptions, 2); /* a cluster used twice, an offset past the end */
    assert_int_equal(r.allocated_clusters, 4);
    qimg_check_result_clear(&r);
    qimg_image_close(img, NULL);

    img = open_qed(q, false, &err);
    assert_non_null(img);
    assert_true(qimg_image_check(img, &r, QIMG_CHECK_FIX_ERRORS, &err) || err);
    assert_int_equal(r.corruptions_fixed, 1); /* the offset past the end is cleared */
    qimg_check_result_clear(&r);
    qimg_image_close(img, NULL);
    g_clear_error(&err);
    if (tu_have_qemu_img()) { /* qemu-img agrees with what is left */
        g_autofree char *out = NULL;
        assert_int_equal(tu_run_status(&out, "qemu-img check -f qed '%s'", q), 2);
        assert_non_null(strstr(out, "1 errors were found"));
    }
}

/* qed/create.c invariant 1. */
static void test_no_create(void **state)
{
    g_autofree char *p = g_build_filename(tu_tmpdir(), "new.qed", NULL);
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    struct stat st;

    co.format = "qed";
    co.size = 1 << 20;
    co.size_set = true;
    assert_false(qimg_image_create(p, &co, &err));
    assert_non_null(strstr(err->message, "qimg does not create QED images"));
    assert_int_not_equal(stat(p, &st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read),        cmocka_unit_test(test_invalid_offset_read),
        cmocka_unit_test(test_open_errors), cmocka_unit_test(test_check),
        cmocka_unit_test(test_no_create),
    };
    return tu_run_group_tests("qed", tests);
}
