/*
 * tests/test-qcow2-check.c: qcow2 consistency check and repair (check*.c,
 * repair.c, api/check.c): every corruption class built in memory,
 * counted exactly, repaired, and checked again; the same counts as
 * qemu-img check --output=json (without qemu-img: a failure under CI=true,
 * else the test is skipped at its first comparison).
 *
 * Covers check.c invariants 1-4 and 6 (and step 4 of its check order), repair.c
 * invariants 2, 3 and 5, api/check.c invariants 2 and 3, refcount.c
 * invariant 1, alloc.c invariant 4 and qcow2.c invariants 6 and 8.
 *
 * Images come from test-qcow2-image.h (cluster 0 header, 1 reftable,
 * 2 refblock, 3 L1, 4 L2, 5 data, 6-7 spare), with the spare clusters'
 * refcounts cleared so that the base image is clean.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-qcow2-image.h"
#include "test-api.h"
#include "test-util.h"

#include "qcow2/check.h"
#include "qimg/check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/wait.h>

static char *dir;
static bool oracle_missing; /* a comparison in the running test had no qemu-img */

/* ---- building images ---- */

/* A clean image: the spare clusters 6 and 7 are not in use. */
static TImg base(int version, uint32_t cb)
{
    TImg t = timg_new(version, cb, 1 << 20, false);
    timg_set16(&t, timg_c(&t, 2) + 2 * 6, 0);
    timg_set16(&t, timg_c(&t, 2) + 2 * 7, 0);
    return t;
}

static void grow(TImg *t, unsigned clusters)
{
    size_t len = (size_t)clusters << t->cb;
    if (len > t->len) {
        t->buf = g_realloc(t->buf, len);
        memset(t->buf + t->len, 0, len - t->len);
        t->len = len;
    }
}

static void set_ref(TImg *t, unsigned cluster, uint16_t v)
{
    timg_set16(t, timg_c(t, 2) + 2 * cluster, v);
}

/* Append a snapshot entry at *pos (cluster 6 by default) sharing L1 at
 * l1_offset; extra bytes of extra data.  Updates the header. */
static void add_snapshot(TImg *t, size_t *pos, uint32_t nb, uint64_t l1_offset,
                         uint32_t l1_size, uint32_t extra)
{
    uint8_t *e;
    char id[16];

    *pos = (*pos + 7) & ~(size_t)7;
    g_snprintf(id, sizeof(id), "%u", nb);
    e = t->buf + *pos;
    store_be64(e, l1_offset);
    store_be32(e + 8, l1_size);
    store_be16(e + 12, (uint16_t)strlen(id));
    store_be16(e + 14, 4);
    store_be32(e + 16, 1700000000);
    store_be32(e + 36, extra);
    if (extra >= 16) {
        store_be64(e + 48, 1 << 20);
    }
    if (extra >= 24) {
        store_be64(e + 56, UINT64_MAX);
    }
    *pos += 40 + extra;
    memcpy(t->buf + *pos, id, strlen(id));
    *pos += strlen(id);
    memcpy(t->buf + *pos, "snap", 4);
    *pos += 4;
    timg_set32(t, QCOW2_HDR_NB_SNAPSHOTS, nb);
    timg_set64(t, QCOW2_HDR_SNAPSHOTS_OFFSET, timg_c(t, 6));
}

/* ---- running the check ---- */

static BlkNode *open_check(const char *path, bool rw)
{
    BlkOpenOptions o = {.format = "qcow2", .read_only = !rw, .check_mode = true};
    g_autoptr(GError) err = NULL;
    BlkNode *img = api_open_node(path, &o, NULL, &err);
    if (!img) {
        fprintf(stderr, "open %s: %s\n", path, err->message);
        fail();
    }
    return img;
}

typedef struct Run {
    BlkCheckResult res;
    gboolean ok;
    int err_code;
    char *err_msg;
} Run;

static void run_free(Run *r)
{
    blk_check_result_clear(&r->res);
    g_free(r->err_msg);
    memset(r, 0, sizeof(*r));
}

/* qimg_image_check on path (with the double check after a repair); the
 * public result is copied into r->res. */
static void run(const char *path, unsigned fix, Run *r)
{
    QimgImage *img = api_image_new(open_check(path, fix != 0));
    QimgCheckResult pub = {.struct_size = sizeof(QimgCheckResult)};
    GError *err = NULL;

    memset(r, 0, sizeof(*r));
    r->ok = qimg_image_check(img, &pub, fix, &err);
    if (err) {
        r->err_code = err->code;
        r->err_msg = g_strdup(err->message);
        g_error_free(err);
    }
    r->res.corruptions = pub.corruptions;
    r->res.leaks = pub.leaks;
    r->res.check_errors = pub.check_errors;
    r->res.corruptions_fixed = pub.corruptions_fixed;
    r->res.leaks_fixed = pub.leaks_fixed;
    r->res.image_end_offset = pub.image_end_offset;
    r->res.total_clusters = pub.total_clusters;
    r->res.allocated_clusters = pub.allocated_clusters;
    r->res.fragmented_clusters = pub.fragmented_clusters;
    r->res.compressed_clusters = pub.compressed_clusters;
    r->res.unsupported = pub.unsupported;
    r->res.messages = g_steal_pointer(&pub.messages);
    qimg_check_result_clear(&pub);
    assert_true(qimg_image_close(img, NULL));
}

/* The driver check alone, with options (no double check). */
static int run_opts(const char *path, unsigned fix, const Qcow2CheckOptions *o,
                    BlkCheckResult *res, char **msg)
{
    BlkNode *img = open_check(path, fix != 0);
    int ret;

    memset(res, 0, sizeof(*res));
    blk_error_clear();
    ret = qcow2_check_image_opts(img, res, fix, o);
    if (msg) {
        *msg = ret < 0 ? blk_error_take() : NULL;
    }
    blk_error_clear();
    blk_close(img);
    return ret;
}

static bool has_msg(const BlkCheckResult *res, const char *line)
{
    for (guint i = 0; res->messages && i < res->messages->len; i++) {
        if (strcmp(res->messages->pdata[i], line) == 0) {
            return true;
        }
    }
    return false;
}

static void dump_msgs(const BlkCheckResult *res)
{
    for (guint i = 0; res->messages && i < res->messages->len; i++) {
        fprintf(stderr, "  | %s\n", (const char *)res->messages->pdata[i]);
    }
}

/* qemu-img check --output=json FIX on a copy of path (the oracle): true
 * with its counts in c, or false when the check itself failed (exit 1, no
 * JSON) with the errno of its "Check failed: " message in *errnum.  A
 * qemu-img that does not run, ends with an exit code that is no check
 * verdict (0-3), or prints neither a check result nor "Check failed: "
 * fails the test: a comparison never passes without qemu-img's answer. */
static bool qemu_check(const char *path, const char *fix, int64_t c[5], int *errnum)
{
    g_autofree char *copy = g_strdup_printf("%s.qemu", path);
    g_autofree char *cmd = NULL, *out = NULL, *err = NULL;
    const char *keys[] = {"\"corruptions\": ", "\"leaks\": ", "\"check-errors\": ",
                          "\"corruptions-fixed\": ", "\"leaks-fixed\": "};
    const char *failed;
    int status = 0;

    cmd = g_strdup_printf("sh -c \"cp '%s' '%s' && exec qemu-img check %s --output=json "
                          "'%s'\"",
                          path, copy, fix, copy);
    if (!g_spawn_command_line_sync(cmd, &out, &err, &status, NULL)) {
        fail_msg("%s: could not run qemu-img check", path);
    }
    failed = strstr(err, "qemu-img: Check failed: ");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 1 && !strstr(out, keys[2]) &&
        failed) {
        failed += strlen("qemu-img: Check failed: ");
        *errnum = 0;
        for (int e = 1; e < 200; e++) {
            if (strncmp(failed, g_strerror(e), strlen(g_strerror(e))) == 0) {
                *errnum = e;
                break;
            }
        }
        return false;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) > 3 || !strstr(out, keys[2])) {
        fail_msg("%s: qemu-img check%s%s gave no check result (exit status 0x%x)\n"
                 "stdout: %s\nstderr: %s",
                 path, *fix ? " " : "", fix, status, out, err);
    }
    /* qemu-img leaves out the counts that are 0, never "check-errors" */
    for (int i = 0; i < 5; i++) {
        const char *k = strstr(out, keys[i]);
        c[i] = k ? g_ascii_strtoll(k + strlen(keys[i]), NULL, 10) : 0;
    }
    return true;
}

/* Our counts must be qemu-img's (on the same bytes: check.c invariant 1);
 * when qemu-img's check fails, ours must fail with the same errno (check.c
 * invariant 6).  Without qemu-img the comparison is noted and the test ends
 * as with_oracle() says. */
static void expect_like_qemu(const char *path, const char *fix, const Run *r)
{
    int64_t q[5];
    int errnum = 0;

    if (!tu_have_qemu_img()) {
        oracle_missing = true;
        return;
    }
    if (!qemu_check(path, fix, q, &errnum)) {
        if (r->ok || r->err_code != errnum) {
            fail_msg("%s %s: qemu-img check failed with %s, qimg %s (%s)", path, fix,
                     g_strerror(errnum), r->ok ? "succeeded" : g_strerror(r->err_code),
                     r->err_msg ? r->err_msg : "");
        }
        return;
    }
    if (q[0] != r->res.corruptions || q[1] != r->res.leaks ||
        q[2] != r->res.check_errors || q[3] != r->res.corruptions_fixed ||
        q[4] != r->res.leaks_fixed) {
        fprintf(stderr,
                "%s %s: qemu-img c=%" PRId64 " l=%" PRId64 " e=%" PRId64 " cf=%" PRId64
                " lf=%" PRId64 ", qimg c=%" PRId64 " l=%" PRId64 " e=%" PRId64
                " cf=%" PRId64 " lf=%" PRId64 "\n",
                path, fix, q[0], q[1], q[2], q[3], q[4], r->res.corruptions, r->res.leaks,
                r->res.check_errors, r->res.corruptions_fixed, r->res.leaks_fixed);
        dump_msgs(&r->res);
        fail();
    }
}

#define EXPECT(r, c, l, e)                                                               \
    do {                                                                                 \
        if ((r)->res.corruptions != (c) || (r)->res.leaks != (l) ||                      \
            (r)->res.check_errors != (e)) {                                              \
            dump_msgs(&(r)->res);                                                        \
        }                                                                                \
        assert_int_equal((r)->res.corruptions, (c));                                     \
        assert_int_equal((r)->res.leaks, (l));                                           \
        assert_int_equal((r)->res.check_errors, (e));                                    \
    } while (0)

/* Check (oracle-compared), repair with fix on a copy, expect the fixed
 * counts and a clean second check. */
static void check_and_repair(const TImg *t, const char *name, int64_t c, int64_t l,
                             unsigned fix, int64_t cf, int64_t lf)
{
    g_autofree char *p = timg_write(t, dir, name);
    g_autofree char *copy = g_strdup_printf("%s-fix", name);
    g_autofree char *pc = timg_write(t, dir, copy);
    Run r;

    run(p, 0, &r);
    EXPECT(&r, c, l, 0);
    expect_like_qemu(p, "", &r);
    run_free(&r);

    /* api/check.c invariant 3: after a repair the counts are the double
     * check's, with the repair's *_fixed */
    run(pc, fix, &r);
    if (r.res.corruptions_fixed != cf || r.res.leaks_fixed != lf || !r.ok) {
        dump_msgs(&r.res);
    }
    assert_true(r.ok);
    assert_int_equal(r.res.corruptions_fixed, cf);
    assert_int_equal(r.res.leaks_fixed, lf);
    EXPECT(&r, 0, 0, 0);
    expect_like_qemu(p, fix == BLK_CHECK_FIX_LEAKS ? "-r leaks" : "-r all", &r);
    run_free(&r);

    run(pc, 0, &r);
    EXPECT(&r, 0, 0, 0);
    run_free(&r);
}

/* ---- tests ---- */

/* A clean image: no finding and no message (check.c invariant 1), and
 * qemu-img check's image end offset and allocated / total clusters. */
static void test_clean(void **state)
{
    TImg t = base(3, 9);
    g_autofree char *p = timg_write(&t, dir, "clean.qcow2");
    Run r;

    run(p, 0, &r);
    assert_true(r.ok);
    EXPECT(&r, 0, 0, 0);
    assert_int_equal(r.res.messages->len, 0);
    assert_int_equal(r.res.image_end_offset, 6 * 512);
    assert_int_equal(r.res.total_clusters, 2048);
    assert_int_equal(r.res.allocated_clusters, 1);
    expect_like_qemu(p, "", &r);
    run_free(&r);
    timg_free(&t);
}

/* api/check.c invariant 5: a repair of an image opened read-only is
 * refused before the driver runs; the image is left as it was. */
static void test_repair_read_only(void **state)
{
    TImg t = base(3, 9);
    g_autofree char *p = timg_write(&t, dir, "ro-repair.qcow2");
    QimgImage *img = api_image_new(open_check(p, false));
    QimgCheckResult pub = QIMG_CHECK_RESULT_INIT;
    g_autoptr(GError) err = NULL;
    g_autofree char *want =
        g_strdup_printf("Image '%s' is read-only; cannot repair it", p);

    assert_false(qimg_image_check(img, &pub, QIMG_CHECK_FIX_LEAKS, &err));
    assert_true(g_error_matches(err, QIMG_ERROR, EACCES));
    assert_string_equal(err->message, want);
    assert_int_equal(pub.corruptions_fixed + pub.leaks_fixed, 0);
    qimg_check_result_clear(&pub);
    qimg_image_free(img);
    timg_free(&t);
}

/* Refcounts above the references are leaks, "Leaked cluster N refcount=R
 * reference=F" (check.c invariant 1); -r leaks and -r all free them. */
static void test_leaks(void **state)
{
    TImg t = base(3, 9);
    set_ref(&t, 6, 1);
    set_ref(&t, 7, 3);
    check_and_repair(&t, "leaks.qcow2", 0, 2, BLK_CHECK_FIX_LEAKS, 0, 2);
    check_and_repair(&t, "leaks-all.qcow2", 0, 2,
                     BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, 0, 2);

    g_autofree char *p = timg_write(&t, dir, "leaks-msg.qcow2");
    Run r;
    run(p, 0, &r);
    assert_true(has_msg(&r.res, "Leaked cluster 6 refcount=1 reference=0"));
    assert_true(has_msg(&r.res, "Leaked cluster 7 refcount=3 reference=0"));
    run_free(&r);
    timg_free(&t);
}

/* refcount 2 for a data cluster referenced once: a leak, and the COPIED
 * flag no longer matches (a corruption; check.c invariant 1); -r leaks fixes
 * both: the refcounts are fixed before OFLAG_COPIED is checked (check.c's
 * check order, step 2), so the flag matches again. */
static void test_refcount_high(void **state)
{
    TImg t = base(3, 9);
    set_ref(&t, 5, 2);
    check_and_repair(&t, "rc-high.qcow2", 1, 1, BLK_CHECK_FIX_LEAKS, 0, 1);
    timg_free(&t);
}

/* refcount 1 for a cluster referenced twice (two L2 entries): a corruption
 * (check.c invariant 1) plus COPIED mismatches; -r all raises it and clears
 * COPIED. */
static void test_refcount_low(void **state)
{
    TImg t = base(3, 9);
    timg_set_l2(&t, 1, timg_c(&t, 5) | QCOW2_OFLAG_COPIED, 0);
    /* refcount 1 still matches COPIED; once raised to 2, both entries'
     * COPIED flags are wrong and get cleared too */
    check_and_repair(&t, "rc-low.qcow2", 1, 0, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS,
                     3, 0);

    /* -r leaks cannot fix a refcount that is too low (qemu-img check -r leaks) */
    g_autofree char *p = timg_write(&t, dir, "rc-low-leaks.qcow2");
    Run r;
    run(p, BLK_CHECK_FIX_LEAKS, &r);
    assert_true(r.ok);
    EXPECT(&r, 1, 0, 0);
    assert_true(has_msg(&r.res, "ERROR cluster 5 refcount=1 reference=2"));
    run_free(&r);
    timg_free(&t);
}

/* A referenced cluster with refcount 0: the refcount structure must be
 * rebuilt (check.c invariant 1); -r leaks cannot, so the check stops with a
 * check error and EIO, qemu-img's "Check failed" (check.c invariant 6). */
static void test_refcount_zero_rebuild(void **state)
{
    TImg t = base(3, 9);
    set_ref(&t, 5, 0);
    g_autofree char *p = timg_write(&t, dir, "rc-zero.qcow2");
    Run r;

    run(p, BLK_CHECK_FIX_LEAKS, &r);
    assert_false(r.ok);
    assert_int_equal(r.err_code, EIO);
    assert_true(has_msg(&r.res, "ERROR need to rebuild refcount structures"));
    expect_like_qemu(p, "-r leaks", &r);
    run_free(&r);

    /* cluster 5 + COPIED of its L2 entry */
    check_and_repair(&t, "rc-zero-all.qcow2", 2, 0,
                     BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, 1, 0);
    g_autofree char *p2 = timg_write(&t, dir, "rc-zero-msg.qcow2");
    run(p2, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &r);
    assert_true(has_msg(&r.res, "Rebuilding refcount structure"));
    /* repair.c invariant 2: new refblock at the first free cluster (6),
     * reftable after it (7), one header switch; the old reftable (1) and
     * refblock (2) are left leaked for the second count, which frees them */
    assert_true(has_msg(&r.res, "Repairing cluster 1 refcount=1 reference=0"));
    assert_true(has_msg(&r.res, "Repairing cluster 2 refcount=1 reference=0"));
    assert_int_equal(r.res.image_end_offset, 8 * 512);
    run_free(&r);
    timg_free(&t);
}

/* OFLAG_COPIED must say refcount == 1 (QEMU's check_oflag_copied; messages:
 * check.c invariant 1); with -r leaks it is fixed once the refcounts are
 * known to be right. */
static void test_copied(void **state)
{
    TImg t = base(3, 9);
    timg_set_l2(&t, 0, timg_c(&t, 5), 0); /* COPIED missing */
    check_and_repair(&t, "copied-l2.qcow2", 1, 0, BLK_CHECK_FIX_LEAKS, 1, 0);
    timg_free(&t);

    t = base(3, 9);
    timg_set64(&t, timg_c(&t, 3), timg_c(&t, 4)); /* L1 entry without COPIED */
    check_and_repair(&t, "copied-l1.qcow2", 1, 0,
                     BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, 1, 0);
    g_autofree char *p = timg_write(&t, dir, "copied-l1-msg.qcow2");
    Run r;
    run(p, 0, &r);
    assert_true(has_msg(&r.res, "ERROR OFLAG_COPIED L2 cluster: l1_index=0 "
                                "l1_entry=800 refcount=1"));
    run_free(&r);
    timg_free(&t);

    /* compressed clusters never carry COPIED (not repaired, as QEMU); the
     * compressed cluster count is qemu-img check's */
    t = base(3, 9);
    timg_set_l2(&t, 0, QCOW2_OFLAG_COMPRESSED | QCOW2_OFLAG_COPIED | timg_c(&t, 5), 0);
    g_autofree char *p2 = timg_write(&t, dir, "copied-compressed.qcow2");
    run(p2, 0, &r);
    EXPECT(&r, 1, 0, 0);
    assert_true(has_msg(&r.res, "ERROR: coffset=0xa00: copied flag must never be set for "
                                "compressed clusters"));
    assert_int_equal(r.res.compressed_clusters, 1);
    expect_like_qemu(p2, "", &r);
    run_free(&r);
    timg_free(&t);
}

/* Unaligned data, preallocated zero and L2 table offsets: QEMU's messages
 * and counts (check.c invariant 1) and QEMU's repairs of them. */
static void test_unaligned_entries(void **state)
{
    Run r;
    TImg t = base(3, 12);

    /* data cluster at 5c + 0x200: counts clusters 5 and 6 */
    timg_set_l2(&t, 0, (timg_c(&t, 5) + 0x200) | QCOW2_OFLAG_COPIED, 0);
    g_autofree char *p = timg_write(&t, dir, "unaligned-data.qcow2");
    run(p, 0, &r);
    assert_true(has_msg(&r.res,
                        "ERROR offset=5200: Data cluster is not properly aligned; "
                        "L2 entry corrupted."));
    /* unaligned + cluster 6 referenced without a refcount */
    EXPECT(&r, 2, 0, 0);
    expect_like_qemu(p, "", &r);
    run_free(&r);
    run(p, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &r);
    EXPECT(&r, 1, 0, 0); /* still unaligned after the repair, as with QEMU */
    run_free(&r);
    timg_free(&t);

    /* an unaligned preallocated zero cluster is made a plain zero cluster */
    t = base(3, 12);
    timg_set_l2(&t, 0, (timg_c(&t, 5) + 0x200) | QCOW2_OFLAG_ZERO | QCOW2_OFLAG_COPIED,
                0);
    /* unaligned + cluster 6 referenced without a refcount; the repair
     * drops the reference, so cluster 5 is then a leak */
    check_and_repair(&t, "unaligned-zero.qcow2", 2, 0,
                     BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, 1, 1);
    timg_free(&t);

    /* unaligned L2 table in the L1 */
    t = base(3, 12);
    timg_set64(&t, timg_c(&t, 3), (timg_c(&t, 4) + 0x200) | QCOW2_OFLAG_COPIED);
    g_autofree char *p3 = timg_write(&t, dir, "unaligned-l2.qcow2");
    run(p3, 0, &r);
    assert_true(has_msg(&r.res, "ERROR l2_offset=4200: Table is not cluster aligned; L1 "
                                "entry corrupted"));
    expect_like_qemu(p3, "", &r);
    run_free(&r);
    timg_free(&t);
}

/* An L2 entry pointing past the end of the file: one cluster or more past
 * it is a corruption and not counted (check.c invariant 2: bounded memory,
 * iotest 138). */
static void test_past_eof(void **state)
{
    TImg t = base(3, 9);
    timg_set_l2(&t, 1, (UINT64_C(1) << 55) | QCOW2_OFLAG_COPIED, 0);
    g_autofree char *p = timg_write(&t, dir, "past-eof.qcow2");
    Run r;

    run(p, 0, &r);
    /* the reference, and its COPIED flag with refcount 0 */
    EXPECT(&r, 2, 0, 0);
    assert_true(has_msg(&r.res, "ERROR: counting reference for region exceeding the end "
                                "of the file by one cluster or more: offset "
                                "0x80000000000000 size 0x200"));
    assert_int_equal(r.res.image_end_offset, 6 * 512); /* the reference was not counted */
    expect_like_qemu(p, "", &r);
    run_free(&r);
    timg_free(&t);
}

static void test_refblock_broken(void **state)
{
    TImg t = base(3, 12);
    Run r;

    /* unaligned refblock: a corruption (QEMU's message), never read
     * (check.c invariant 3), so no refcount can be read (check errors);
     * -r all rebuilds (QEMU fails here; qimg repairs) */
    timg_set64(&t, timg_c(&t, 1), timg_c(&t, 2) + 0x200);
    g_autofree char *p = timg_write(&t, dir, "rb-unaligned.qcow2");
    run(p, 0, &r);
    assert_false(r.ok);
    EXPECT(&r, 1, 0, 8); /* every cluster's refcount unreadable */
    assert_true(has_msg(&r.res, "ERROR refcount block 0 is not cluster aligned; refcount "
                                "table entry corrupted"));
    assert_true(has_msg(&r.res, "Can't get refcount for cluster 5: Input/output error"));
    expect_like_qemu(p, "", &r);
    run_free(&r);
    run(p, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &r);
    assert_true(r.ok);
    EXPECT(&r, 0, 0, 0);
    run_free(&r);
    run(p, 0, &r);
    EXPECT(&r, 0, 0, 0);
    run_free(&r);
    timg_free(&t);

    /* refblock outside the image: -r all grows the file and the in-memory
     * table (check.c invariant 2), then rebuilds */
    t = base(3, 9);
    timg_set64(&t, timg_c(&t, 1), timg_c(&t, 64));
    check_and_repair(&t, "rb-outside.qcow2", 8, 0,
                     BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, 7, 0);
    timg_free(&t);

    /* the refcount table's own refcount 0: a rebuild (check.c invariant 1) */
    t = base(3, 9);
    set_ref(&t, 1, 0);
    check_and_repair(&t, "rt-zero.qcow2", 1, 0,
                     BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, 1, 0);
    timg_free(&t);
}

static void test_snapshots(void **state)
{
    TImg t;
    size_t pos;
    Run r;

    /* a snapshot sharing the active L1's tables, refcounts right: every L1
     * naming a table counts it and its clusters once (qemu-img check) */
    t = base(3, 12);
    grow(&t, 8);
    pos = timg_c(&t, 6);
    add_snapshot(&t, &pos, 1, timg_c(&t, 7), 1, 24);
    memcpy(t.buf + timg_c(&t, 7), t.buf + timg_c(&t, 3), 8);
    timg_set64(&t, timg_c(&t, 3), timg_c(&t, 4)); /* shared: no COPIED */
    timg_set_l2(&t, 0, timg_c(&t, 5), 0);
    set_ref(&t, 4, 2);
    set_ref(&t, 5, 2);
    set_ref(&t, 6, 1);
    set_ref(&t, 7, 1);
    g_autofree char *p = timg_write(&t, dir, "snap-ok.qcow2");
    run(p, 0, &r);
    EXPECT(&r, 0, 0, 0);
    expect_like_qemu(p, "", &r);
    run_free(&r);

    /* unaligned / too large snapshot L1: validated before it is read
     * (check.c invariant 3), a corruption, not repaired (as QEMU) */
    TImg u = t;
    u.buf = g_memdup2(t.buf, t.len);
    store_be64(u.buf + timg_c(&u, 6), timg_c(&u, 7) + 8);
    g_autofree char *pu = timg_write(&u, dir, "snap-l1-unaligned.qcow2");
    run(pu, 0, &r);
    assert_true(has_msg(&r.res, "ERROR snapshot 1 (snap) l1_offset=0x7008: L1 table is "
                                "not cluster aligned; snapshot table entry corrupted"));
    expect_like_qemu(pu, "", &r);
    run_free(&r);
    store_be64(u.buf + timg_c(&u, 6), timg_c(&u, 7));
    store_be32(u.buf + timg_c(&u, 6) + 8, 0x400001);
    g_autofree char *pb = timg_write(&u, dir, "snap-l1-big.qcow2");
    run(pb, 0, &r);
    assert_true(has_msg(&r.res, "ERROR snapshot 1 (snap) l1_size=0x400001: L1 table is "
                                "too large; snapshot table entry corrupted"));
    expect_like_qemu(pb, "", &r);
    run_free(&r);
    timg_free(&u);

    /* v3 entry with only 8 bytes of extra data: incomplete, -r all
     * rewrites the table (repair.c invariant 2: new clusters, one header
     * switch, the old one freed after it) */
    u = t;
    u.buf = g_memdup2(t.buf, t.len);
    memset(u.buf + timg_c(&u, 6), 0, u.cs);
    pos = timg_c(&u, 6);
    add_snapshot(&u, &pos, 1, timg_c(&u, 7), 1, 8);
    check_and_repair(&u, "snap-incomplete.qcow2", 1, 0,
                     BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, 1, 0);
    timg_free(&u);

    /* too much extra data (> 1024 bytes): the check cannot read the table
     * and fails with qemu-img's line (check.c invariant 6); -r all drops the
     * excess as QEMU's check-mode reader does (repair.c invariant 5) */
    u = t;
    u.buf = g_memdup2(t.buf, t.len);
    memset(u.buf + timg_c(&u, 6), 0, u.cs);
    pos = timg_c(&u, 6);
    add_snapshot(&u, &pos, 1, timg_c(&u, 7), 1, 1100);
    g_autofree char *px = timg_write(&u, dir, "snap-extra.qcow2");
    run(px, 0, &r);
    assert_false(r.ok);
    assert_int_equal(r.err_code, EFBIG);
    assert_non_null(strstr(r.err_msg, "ERROR failed to read the snapshot table: Too much "
                                      "extra metadata in snapshot table entry 0"));
    run_free(&r);
    g_autofree char *pxc = timg_write(&u, dir, "snap-extra-fix.qcow2");
    run(pxc, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &r);
    assert_true(r.ok);
    assert_true(has_msg(&r.res, "Discarding too much extra metadata in snapshot table "
                                "entry 0 (1100 > 1024)"));
    assert_int_equal(r.res.corruptions_fixed, 1);
    EXPECT(&r, 0, 0, 0);
    expect_like_qemu(px, "-r all", &r);
    run_free(&r);
    timg_free(&u);
    timg_free(&t);
}

/* 1-bit refcounts cannot count a shared cluster: the count saturates and
 * each further reference is an overflow corruption (check.c invariant 2). */
static void test_refcount_overflow(void **state)
{
    TImg t = base(3, 12);
    size_t pos;
    Run r;

    grow(&t, 8);
    timg_set32(&t, QCOW2_HDR_REFCOUNT_ORDER, 0);
    memset(t.buf + timg_c(&t, 2), 0, t.cs);
    t.buf[timg_c(&t, 2)] = 0xff; /* clusters 0..7 in use */
    pos = timg_c(&t, 6);
    add_snapshot(&t, &pos, 1, timg_c(&t, 7), 1, 24);
    memcpy(t.buf + timg_c(&t, 7), t.buf + timg_c(&t, 3), 8);
    g_autofree char *p = timg_write(&t, dir, "overflow.qcow2");
    run(p, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &r);
    EXPECT(&r, 2, 0, 0);
    assert_true(has_msg(&r.res, "ERROR: overflow cluster offset=0x4000"));
    assert_true(has_msg(&r.res, "ERROR: overflow cluster offset=0x5000"));
    expect_like_qemu(p, "-r all", &r);
    run_free(&r);
    timg_free(&t);
}

/* Many snapshots sharing one L2 table: the deferred path (small replay
 * budget) counts exactly what the plain walk counts (check.c invariant 4). */
static void test_deferred_references(void **state)
{
    const uint32_t n = 40;
    TImg t = base(3, 12);
    Qcow2CheckOptions small = {.replay_budget = 512 * 3};
    BlkCheckResult a, b;
    size_t pos;

    grow(&t, 8);
    pos = timg_c(&t, 6);
    for (uint32_t i = 1; i <= n; i++) {
        add_snapshot(&t, &pos, i, timg_c(&t, 7), 1, 24);
    }
    memcpy(t.buf + timg_c(&t, 7), t.buf + timg_c(&t, 3), 8);
    timg_set64(&t, timg_c(&t, 3), timg_c(&t, 4));
    timg_set_l2(&t, 0, timg_c(&t, 5), 0);
    timg_set_l2(&t, 1, timg_c(&t, 5), 0); /* twice in the table */
    set_ref(&t, 4, (uint16_t)(n + 1));
    set_ref(&t, 5, (uint16_t)(2 * (n + 1) - 1)); /* one short: 1 corruption */
    set_ref(&t, 6, 1);
    set_ref(&t, 7, (uint16_t)n);
    g_autofree char *p = timg_write(&t, dir, "deferred.qcow2");

    assert_int_equal(run_opts(p, 0, NULL, &a, NULL), 0);
    assert_int_equal(run_opts(p, 0, &small, &b, NULL), 0);
    assert_int_equal(a.corruptions, 1);
    assert_int_equal(b.corruptions, a.corruptions);
    assert_int_equal(b.leaks, a.leaks);
    assert_int_equal(b.allocated_clusters, a.allocated_clusters);
    assert_int_equal(b.image_end_offset, a.image_end_offset);
    assert_true(has_msg(&b, "ERROR cluster 5 refcount=81 reference=82"));
    blk_check_result_clear(&a);
    blk_check_result_clear(&b);
    timg_free(&t);
}

/* Re-walking broken tables draws on a budget: a hostile L1 whose entries
 * all name the same unaligned L2 table stops with an error (check.c
 * invariant 4; a -errno result, check.c invariant 6). */
static void test_bad_budget(void **state)
{
    TImg t = base(3, 12);
    Qcow2CheckOptions small = {.bad_budget = 512 * 10};
    BlkCheckResult res;
    g_autofree char *msg = NULL;

    grow(&t, 9);
    timg_set32(&t, QCOW2_HDR_L1_SIZE, 64);
    timg_set64(&t, QCOW2_HDR_L1_TABLE_OFFSET, timg_c(&t, 8));
    for (unsigned i = 0; i < 64; i++) {
        timg_set64(&t, timg_c(&t, 8) + 8 * i, timg_c(&t, 4) + 0x200);
    }
    g_autofree char *p = timg_write(&t, dir, "hostile-l1.qcow2");
    assert_int_equal(run_opts(p, 0, &small, &res, &msg), -EFBIG);
    assert_non_null(strstr(msg, "too many times to be checked"));
    blk_check_result_clear(&res);
    /* with the default budget it completes */
    assert_int_equal(run_opts(p, 0, NULL, &res, NULL), 0);
    assert_true(res.corruptions > 64);
    blk_check_result_clear(&res);
    timg_free(&t);
}

/* A check_mode open takes the corrupt bit (qcow2.c invariant 6) and does not
 * repair the dirty image itself (qcow2.c invariant 8), so the repair finds
 * the leak; a successful repair clears both bits (check.c's check order,
 * step 4: QEMU's mark_clean, mark_consistent). */
static void test_dirty_and_corrupt_bits(void **state)
{
    TImg t = base(3, 9);
    Run r;

    timg_set64(&t, QCOW2_HDR_INCOMPATIBLE_FEATURES,
               QCOW2_INCOMPAT_DIRTY | QCOW2_INCOMPAT_CORRUPT);
    timg_set64(&t, QCOW2_HDR_COMPATIBLE_FEATURES, QCOW2_COMPAT_LAZY_REFCOUNTS);
    set_ref(&t, 6, 1); /* a leak, as a crash with lazy refcounts leaves */
    g_autofree char *p = timg_write(&t, dir, "bits.qcow2");

    run(p, 0, &r); /* a plain check changes nothing */
    EXPECT(&r, 0, 1, 0);
    run_free(&r);
    run(p, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &r);
    assert_true(r.ok);
    assert_int_equal(r.res.leaks_fixed, 1);
    run_free(&r);

    g_autofree char *bytes = NULL;
    gsize len;
    assert_true(g_file_get_contents(p, &bytes, &len, NULL));
    assert_int_equal(load_be64(bytes + QCOW2_HDR_INCOMPATIBLE_FEATURES), 0);
    assert_int_equal(load_be16(bytes + timg_c(&t, 2) + 2 * 6), 0);
    timg_free(&t);
}

static void test_unsupported_and_errors(void **state)
{
    g_autofree char *raw = g_build_filename(dir, "plain.raw", NULL);
    BlkOpenOptions o = {.format = "raw", .read_only = true};
    QimgCheckResult res = {.struct_size = sizeof(QimgCheckResult)};
    g_autoptr(GError) err = NULL;
    QimgImage *img;

    /* api/check.c invariant 2: no check operation, res->unsupported and
     * qemu-img's message */
    assert_true(g_file_set_contents(raw, "hello", 5, NULL));
    img = tu_open_handle(raw, &o, NULL);
    assert_non_null(img);
    assert_false(qimg_image_check(img, &res, 0, &err));
    assert_true(res.unsupported);
    assert_int_equal(err->code, ENOTSUP);
    assert_string_equal(err->message, "This image format does not support checks");
    qimg_check_result_clear(&res);
    assert_false(res.unsupported);
    api_image_destroy(img);

    /* repairing needs a writable image (qemu-img check -r opens it
     * read-write): EACCES before the driver runs */
    TImg t = base(3, 9);
    g_autofree char *p = timg_write(&t, dir, "ro.qcow2");
    img = api_image_new(open_check(p, false));
    g_clear_error(&err);
    assert_false(qimg_image_check(img, &res, QIMG_CHECK_FIX_LEAKS, &err));
    assert_int_equal(err->code, EACCES);
    qimg_check_result_clear(&res);
    api_image_destroy(img);
    timg_free(&t);
}

/* Every width keeps its counts through the in-memory table (check.c
 * invariant 2), reads the refblock entries as QEMU does (refcount.c
 * invariant 1), and -r leaks lowers a count of each width (alloc.c
 * invariant 4, through the refcount cache: repair.c invariant 3). */
static void test_widths(void **state)
{
    for (uint32_t order = 0; order <= 6; order++) {
        TImg t = base(3, 12);
        uint64_t rb = timg_c(&t, 2);
        Run r;
        g_autofree char *name = g_strdup_printf("width-%u.qcow2", 1u << order);

        timg_set32(&t, QCOW2_HDR_REFCOUNT_ORDER, order);
        memset(t.buf + rb, 0, t.cs);
        for (uint64_t k = 0; k < 6; k++) {
            qcow2_refblock_set(t.buf + rb, k, order, 1);
        }
        qcow2_refblock_set(t.buf + rb, 7, order, 1); /* a leak */
        g_autofree char *p = timg_write(&t, dir, name);
        run(p, 0, &r);
        EXPECT(&r, 0, 1, 0);
        expect_like_qemu(p, "", &r);
        run_free(&r);
        run(p, BLK_CHECK_FIX_LEAKS, &r);
        assert_int_equal(r.res.leaks_fixed, 1);
        EXPECT(&r, 0, 0, 0);
        run_free(&r);
        timg_free(&t);
    }
}

static int setup(void **state)
{
    dir = timg_tmpdir();
    return 0;
}

static int teardown(void **state)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", dir);
    int ret = 0;

    if (!g_getenv("QIMG_TEST_KEEP")) { /* keep the images to look at them */
        ret = system(cmd) == 0 ? 0 : -1;
    }
    g_free(dir);
    return ret;
}

/* Every test runs through with_oracle(): its own checks all run, and if a
 * comparison with qemu-img could not be made the test then fails under CI
 * and is skipped otherwise (counted: the program exits 77), never passes. */
typedef struct OracleTest {
    CMUnitTestFunction fn;
    const char *name;
} OracleTest;

static void with_oracle(void **state)
{
    const OracleTest *t = *state;

    oracle_missing = false;
    t->fn(state);
    if (oracle_missing) {
        tu_require_tool_(__FILE__, __LINE__, t->name, "qemu-img");
    }
}

static struct CMUnitTest oracle_test_(const char *name, OracleTest *t)
{
    return (struct CMUnitTest){
        .name = name, .test_func = with_oracle, .initial_state = t};
}

#define oracle_test(f) oracle_test_(#f, &(OracleTest){f, #f})

int main(void)
{
    const struct CMUnitTest tests[] = {
        oracle_test(test_clean),
        oracle_test(test_repair_read_only),
        oracle_test(test_leaks),
        oracle_test(test_refcount_high),
        oracle_test(test_refcount_low),
        oracle_test(test_refcount_zero_rebuild),
        oracle_test(test_copied),
        oracle_test(test_unaligned_entries),
        oracle_test(test_past_eof),
        oracle_test(test_refblock_broken),
        oracle_test(test_snapshots),
        oracle_test(test_refcount_overflow),
        oracle_test(test_deferred_references),
        oracle_test(test_bad_budget),
        oracle_test(test_dirty_and_corrupt_bits),
        oracle_test(test_unsupported_and_errors),
        oracle_test(test_widths),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, setup, teardown));
}
