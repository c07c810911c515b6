/*
 * tests/test-qcow2-check-tables.c: the qcow2 consistency check and repair
 * (check*.c, repair.c, api/check.c) on what the L1/L2 tables and snapshot
 * tables say: a clean image, the read-only refusal, OFLAG_COPIED,
 * unaligned entries, references past EOF, snapshots, the deferred path
 * and its budget, the dirty and corrupt bits, unsupported images and I/O
 * errors.  Each image is built in memory, counted exactly, repaired and
 * checked again, with the same counts as qemu-img check --output=json
 * (test-qcow2-check-fixture.h).  Broken refcounts are
 * test-qcow2-check-refs.c's.
 */
#include "test-qcow2-check-fixture.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        oracle_test(test_clean),
        oracle_test(test_repair_read_only),
        oracle_test(test_copied),
        oracle_test(test_unaligned_entries),
        oracle_test(test_past_eof),
        oracle_test(test_snapshots),
        oracle_test(test_deferred_references),
        oracle_test(test_bad_budget),
        oracle_test(test_dirty_and_corrupt_bits),
        oracle_test(test_unsupported_and_errors),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, setup, teardown));
}
