/*
 * tests/test-qcow2-check-refs.c: the qcow2 consistency check and repair
 * (check*.c, repair.c, api/check.c) on broken refcounts: leaks, refcounts
 * too high, too low and zero (the rebuild), broken refcount blocks and
 * table, 1-bit refcount overflow, every refcount width.  Each image is
 * built in memory, counted exactly, repaired and checked again, with the
 * same counts as qemu-img check --output=json (test-qcow2-check-fixture.h).
 * The L1/L2 tables, snapshots and the check's modes are
 * test-qcow2-check-tables.c's.
 */
#include "test-qcow2-check-fixture.h"

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

static void test_refblock_broken(void **state)
{
    TImg t = base(3, 12);
    Run r;

    /* unaligned refblock: a corruption (QEMU's message), never read
     * (check.c invariant 3), so no refcount can be read (check errors) */
    timg_set64(&t, timg_c(&t, 1), timg_c(&t, 2) + 0x200);
    g_autofree char *p = timg_write(&t, dir, "rb-unaligned.qcow2");
    g_autofree char *marked = g_strdup_printf(
        "qcow2: Marking image as corrupt: Refblock offset %#" PRIx64
        " unaligned (reftable index: 0); further corruption events will be suppressed",
        timg_c(&t, 2) + 0x200);
    run(p, 0, &r);
    assert_false(r.ok);
    EXPECT(&r, 1, 0, 8); /* every cluster's refcount unreadable */
    assert_true(has_msg(&r.res, "ERROR refcount block 0 is not cluster aligned; refcount "
                                "table entry corrupted"));
    assert_true(has_msg(&r.res, "Can't get refcount for cluster 5: Input/output error"));
    assert_false(has_msg(&r.res, marked)); /* read-only: not fatal */
    expect_like_qemu(p, "", &r);
    run_free(&r);
    /* -r all: the image is marked corrupt, the rebuild runs, the double
     * check fails with ENOMEDIUM and the old reftable's free is dropped
     * (check.c invariant 8), as qemu-img's; the next repair frees it.
     * (QEMU's rebuild fails on this image: its overlap check counts the
     * clusters of the unaligned block it replaces, which qimg's ignores,
     * repair.c invariant 1; iotest 197 compares the 060 case.) */
    run(p, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &r);
    assert_false(r.ok);
    assert_int_equal(r.err_code, ENOMEDIUM);
    assert_true(has_msg(&r.res, marked));
    assert_true(has_msg(&r.res, "Rebuilding refcount structure"));
    run_free(&r);
    run(p, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &r);
    assert_true(r.ok);
    assert_int_equal(r.res.leaks_fixed, 1);
    assert_true(has_msg(&r.res, "Leaked cluster 1 refcount=1 reference=0"));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        oracle_test(test_leaks),           oracle_test(test_refcount_high),
        oracle_test(test_refcount_low),    oracle_test(test_refcount_zero_rebuild),
        oracle_test(test_refblock_broken), oracle_test(test_refcount_overflow),
        oracle_test(test_widths),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, setup, teardown));
}
