/*
 * tests/test-qcow2-check-fixture.c: the qcow2 check tests' images, runs,
 * qemu-img oracle and oracle_test() (test-qcow2-check-fixture.h).
 */
#include "test-qcow2-check-fixture.h"

char *dir;
static bool oracle_missing; /* a comparison in the running test had no qemu-img */

/* ---- building images ---- */

/* A clean image: the spare clusters 6 and 7 are not in use. */
TImg base(int version, uint32_t cb)
{
    TImg t = timg_new(version, cb, 1 << 20, false);
    timg_set16(&t, timg_c(&t, 2) + 2 * 6, 0);
    timg_set16(&t, timg_c(&t, 2) + 2 * 7, 0);
    return t;
}

void grow(TImg *t, unsigned clusters)
{
    size_t len = (size_t)clusters << t->cb;
    if (len > t->len) {
        t->buf = g_realloc(t->buf, len);
        memset(t->buf + t->len, 0, len - t->len);
        t->len = len;
    }
}

void set_ref(TImg *t, unsigned cluster, uint16_t v)
{
    timg_set16(t, timg_c(t, 2) + 2 * cluster, v);
}

/* Append a snapshot entry at *pos (cluster 6 by default) sharing L1 at
 * l1_offset; extra bytes of extra data.  Updates the header. */
void add_snapshot(TImg *t, size_t *pos, uint32_t nb, uint64_t l1_offset, uint32_t l1_size,
                  uint32_t extra)
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

BlkNode *open_check(const char *path, bool rw)
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

void run_free(Run *r)
{
    blk_check_result_clear(&r->res);
    g_free(r->err_msg);
    memset(r, 0, sizeof(*r));
}

/* qimg_image_check on path (with the double check after a repair); the
 * public result is copied into r->res. */
void run(const char *path, unsigned fix, Run *r)
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
int run_opts(const char *path, unsigned fix, const Qcow2CheckOptions *o,
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

bool has_msg(const BlkCheckResult *res, const char *line)
{
    for (guint i = 0; res->messages && i < res->messages->len; i++) {
        if (strcmp(res->messages->pdata[i], line) == 0) {
            return true;
        }
    }
    return false;
}

void dump_msgs(const BlkCheckResult *res)
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
void expect_like_qemu(const char *path, const char *fix, const Run *r)
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

/* Check (oracle-compared), repair with fix on a copy, expect the fixed
 * counts and a clean second check. */
void check_and_repair(const TImg *t, const char *name, int64_t c, int64_t l, unsigned fix,
                      int64_t cf, int64_t lf)
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

int setup(void **state)
{
    dir = timg_tmpdir();
    return 0;
}

int teardown(void **state)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", dir);
    int ret = 0;

    if (!g_getenv("QIMG_TEST_KEEP")) { /* keep the images to look at them */
        ret = system(cmd) == 0 ? 0 : -1;
    }
    g_free(dir);
    return ret;
}

static void with_oracle(void **state)
{
    const OracleTest *t = *state;

    oracle_missing = false;
    t->fn(state);
    if (oracle_missing) {
        tu_require_tool_(__FILE__, __LINE__, t->name, "qemu-img");
    }
}

struct CMUnitTest oracle_test_(const char *name, OracleTest *t)
{
    return (struct CMUnitTest){
        .name = name, .test_func = with_oracle, .initial_state = t};
}
