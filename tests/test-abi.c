/*
 * tests/test-abi.c: the public ABI's growable structs (include/qimg/qimg.h
 * "ABI" rules 1-3, api/abi.c invariants 1-3), driven through libqimg.so
 * with the public headers only, as an embedder built against another
 * header version would call it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qimg/check.h"
#include "qimg/qimg.h"
#include "qimg/snapshot.h"
#include "test-util.h"

#include <errno.h>
#include <string.h>

#define MiB (1024 * 1024)

static char *new_qcow2(const char *stem)
{
    char *p = tu_fresh(stem);
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;

    co.format = "qcow2";
    co.size = MiB;
    co.size_set = true;
    assert_true(qimg_image_create(p, &co, &err));
    return p;
}

static QimgImage *open_rw(const char *p)
{
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    QimgImage *img = qimg_image_open(p, &o, &err);

    assert_non_null(img);
    return img;
}

static void test_version(void **state)
{
    (void)state;
    assert_string_equal(qimg_version(), QIMG_VERSION_STRING);
    /* the header's version is the project's (meson.build) */
    assert_string_equal(QIMG_VERSION_STRING, QIMG_PROJECT_VERSION);
}

/* Rule 1: struct_size 0 (a struct not made with its INIT macro) is refused. */
static void test_size_zero_refused(void **state)
{
    (void)state;
    g_autofree char *p = new_qcow2("zero.qcow2");
    QimgOpenOptions o;
    g_autoptr(GError) err = NULL;

    memset(&o, 0, sizeof(o));
    assert_null(qimg_image_open(p, &o, &err));
    assert_true(g_error_matches(err, QIMG_ERROR, EINVAL));
    assert_non_null(strstr(err->message, "QimgOpenOptions.struct_size is 0"));
}

/* Rule 1, abi.c invariant 1: an older caller's struct ends early; the
 * fields past its struct_size are never read (here has_icount and icount,
 * set to values that would show if they were). */
static void test_older_caller(void **state)
{
    (void)state;
    g_autofree char *p = new_qcow2("older.qcow2");
    QimgImage *img = open_rw(p);
    QimgSnapshotParams sp = QIMG_SNAPSHOT_PARAMS_INIT;
    g_autoptr(GError) err = NULL;

    sp.name = "old";
    sp.has_icount = true;
    sp.icount = 1234;
    sp.struct_size = offsetof(QimgSnapshotParams, has_icount);
    g_autofree char *id = qimg_snapshot_create(img, &sp, &err);
    assert_non_null(id);
    GPtrArray *list = qimg_snapshot_list(img, &err);
    assert_non_null(list);
    assert_int_equal(list->len, 1);
    const QimgSnapshotInfo *sn = g_ptr_array_index(list, 0);
    assert_string_equal(sn->name, "old");
    assert_int_equal(sn->icount, -1); /* rule 2: the default, off */
    qimg_snapshot_list_free(list);
    assert_true(qimg_image_close(img, &err));
}

/* Rule 2: a zero-initialised (INIT) struct means icount off; has_icount
 * records it. */
static void test_icount_default_off(void **state)
{
    (void)state;
    g_autofree char *p = new_qcow2("icount.qcow2");
    QimgImage *img = open_rw(p);
    QimgSnapshotParams off = QIMG_SNAPSHOT_PARAMS_INIT, on = QIMG_SNAPSHOT_PARAMS_INIT;
    g_autoptr(GError) err = NULL;

    off.name = "off";
    on.name = "on";
    on.has_icount = true;
    on.icount = 0; /* 0 is a value, not "off" */
    g_free(qimg_snapshot_create(img, &off, &err));
    g_free(qimg_snapshot_create(img, &on, &err));
    assert_null(err);
    g_autoptr(QimgInfo) info = qimg_image_get_info(img, &err);
    assert_non_null(info);
    assert_int_equal(info->snapshots->len, 2);
    assert_int_equal(((QimgSnapshotInfo *)g_ptr_array_index(info->snapshots, 0))->icount,
                     -1);
    assert_int_equal(((QimgSnapshotInfo *)g_ptr_array_index(info->snapshots, 1))->icount,
                     0);
    on.icount = (uint64_t)INT64_MAX + 1;
    assert_null(qimg_snapshot_create(img, &on, &err));
    assert_true(g_error_matches(err, QIMG_ERROR, EINVAL));
    assert_true(qimg_image_close(img, NULL));
}

/* A newer caller's struct is longer: zeros past what the library knows
 * are fine; anything else is a request it cannot honour (invariant 2). */
typedef struct NewerOpenOptions {
    QimgOpenOptions known;
    uint64_t future_field;
} NewerOpenOptions;

static void test_newer_caller(void **state)
{
    (void)state;
    g_autofree char *p = new_qcow2("newer.qcow2");
    NewerOpenOptions n;
    g_autoptr(GError) err = NULL;

    memset(&n, 0, sizeof(n));
    n.known.struct_size = sizeof(n);
    n.known.read_only = true;
    QimgImage *img = qimg_image_open(p, &n.known, &err);
    assert_non_null(img);
    assert_true(qimg_image_is_read_only(img));
    qimg_image_free(img);

    n.future_field = 1;
    assert_null(qimg_image_open(p, &n.known, &err));
    assert_true(g_error_matches(err, QIMG_ERROR, EINVAL));
    assert_non_null(strstr(err->message, "QimgOpenOptions has fields this libqimg"));
}

/* Invariant 3: results stay within the caller's struct_size. */
static void test_result_within_size(void **state)
{
    (void)state;
    g_autofree char *p = new_qcow2("check.qcow2");
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    size_t small = offsetof(QimgCheckResult, leaks);
    uint8_t *buf = g_malloc(sizeof(QimgCheckResult) + 16);
    QimgCheckResult *res = (QimgCheckResult *)buf;

    o.read_only = true;
    o.check_mode = true;
    QimgImage *img = qimg_image_open(p, &o, &err);
    assert_non_null(img);
    memset(buf, 0xAA, sizeof(QimgCheckResult) + 16);
    memset(buf, 0, small);
    res->struct_size = (uint32_t)small;
    assert_true(qimg_image_check(img, res, 0, &err));
    assert_int_equal(res->struct_size, small);
    assert_int_equal(res->corruptions, 0);
    for (size_t i = small; i < sizeof(QimgCheckResult) + 16; i++) {
        assert_int_equal(buf[i], 0xAA);
    }
    /* the full struct: messages and counters are written */
    QimgCheckResult full = QIMG_CHECK_RESULT_INIT;
    assert_true(qimg_image_check(img, &full, 0, &err));
    assert_true(full.total_clusters > 0);
    qimg_check_result_clear(&full);
    assert_int_equal(full.struct_size, sizeof(full));
    qimg_image_free(img);
    g_free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),      cmocka_unit_test(test_size_zero_refused),
        cmocka_unit_test(test_older_caller), cmocka_unit_test(test_icount_default_off),
        cmocka_unit_test(test_newer_caller), cmocka_unit_test(test_result_within_size),
    };
    return tu_run_group_tests("abi", tests);
}
