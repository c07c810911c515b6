/*
 * tests/test-aio-interleave.c: deterministic interleavings of
 * asynchronous requests through libqimg.so and the public headers, with
 * breakpoints on the fault node, over the harness of
 * test-aio-workload-fixture.c ("workload rule N"):
 *
 *  - the harness's own rule: a flush that completes beside a read leaves
 *    the read's blocks claimed;
 *  - reads stopped at a breakpoint while a discard or an unmapping zero
 *    write of their cluster, a flush and an allocating write that would
 *    reuse the freed host cluster are submitted: the read returns the
 *    bytes the cluster held (read.c invariant 6, fastmap.c invariant 7),
 *    on the slow path and on the fast map.  (The random runs of
 *    test-aio-workload.c cannot tell whether a read holds its cluster: a
 *    freed host cluster is reused only after a flush (alloc.c invariant
 *    2), far outside a read's window.)
 */
#include "test-aio-workload-fixture.h"

/* ---- deterministic interleavings, with breakpoints on the fault node ---- */

/* Wait (at most 10 s) until a request is stopped as tag. */
static void wait_suspended(QimgImage *img, const char *tag)
{
    for (int i = 0; i < 10000; i++) {
        g_auto(GStrv) s = qimg_image_debug_suspended(img, FALSE);
        if (s && g_strv_contains((const char *const *)s, tag)) {
            return;
        }
        g_usleep(1000);
    }
    fail_msg("no request stopped at breakpoint %s", tag);
}

/* Run callbacks until request id's has run (at most ms milliseconds);
 * whether it has. */
static bool wait_done(Work *w, unsigned id, int ms)
{
    gint64 end = g_get_monotonic_time() + (gint64)ms * 1000;

    while (g_array_index(w->hist, Hist, id).done == 0) {
        gint64 left = (end - g_get_monotonic_time()) / 1000;
        if (left <= 0) {
            return false;
        }
        aio_poll_for(w->img, (int)MIN(left, 100));
    }
    return true;
}

/* (Re)open w's image through a fault node, for breakpoints. */
static void open_work(Work *w, const char *p)
{
    g_autofree char *name = g_strdup_printf("blkdebug::%s", p);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;

    w->img = open_image(name, QIMG_CACHE_WRITEBACK);
    ao.engine = QIMG_AIO_ENGINE_THREADS;
    assert_true(qimg_image_aio_setup(w->img, &ao, &err));
}

/* Submit a claimed request and wait for it; a write fills its blocks with
 * byte v. */
static void run_one(Work *w, int op, uint64_t block, uint64_t nblocks, uint8_t v,
                    unsigned flags)
{
    Req *r = req_new(w, op, block, nblocks);
    unsigned id = r->id;

    assert_true(claim(w, r));
    if (op == OP_WRITE) {
        memset(r->buf, v, nblocks * BLOCK);
    }
    submit(w, r, flags);
    assert_true(wait_done(w, id, 10000));
}

/* Workload rule 1: a read stopped at its data read, a flush submitted and
 * completed beside it (its range drawn over the read's block, as the
 * workload draws one for every request), and the read's block is still the
 * read's: the write the workload would submit there next is refused until
 * the read's callback ran, and the read returns what the block held. */
static void test_flush_beside_read(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = new_qcow2("fbr.qcow2", 4 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    Work w;

    work_init(&w, 4 * MiB, 65536, 0);
    open_work(&w, p);
    run_one(&w, OP_WRITE, 5, 1, 0x11, 0);
    assert_true(qimg_image_debug_break(w.img, "read_aio", "r", &err));
    Req *rd = req_new(&w, OP_READ, 5, 1);
    unsigned rd_id = rd->id;
    assert_true(claim(&w, rd));
    submit(&w, rd, 0);
    wait_suspended(w.img, "r");

    Req *fl = req_new(&w, OP_FLUSH, 5, 1);
    unsigned fl_id = fl->id;
    assert_true(claim(&w, fl));
    submit(&w, fl, 0);
    assert_true(wait_done(&w, fl_id, 10000)); /* the flush does not wait */

    Req *wr = req_new(&w, OP_WRITE, 5, 1);
    assert_false(claim(&w, wr)); /* rule 1: block 5 is the read's */
    req_free(wr);
    assert_int_equal(w.failures, 0);

    assert_true(qimg_image_debug_resume(w.img, "r", &err));
    assert_true(wait_done(&w, rd_id, 10000));
    assert_int_equal(w.failures, 0);      /* it read 0x11, the model's */
    run_one(&w, OP_WRITE, 5, 1, 0x22, 0); /* now the block is free */
    run_one(&w, OP_READ, 5, 1, 0, 0);
    assert_int_equal(w.failures, 0);
    assert_true(qimg_image_close(w.img, &err));
    tu_run("qemu-img check -q '%s'", p);
    work_clear(&w);
}

/* A request outside the workload's bookkeeping: its result only. */
static void plain_done(void *opaque, int ret, const GError *err)
{
    *(int *)opaque = ret < 0 ? ret : 1;
    (void)err;
}

/*
 * Read.c invariant 6 and fastmap.c invariant 7 with the interleaving forced:
 * cluster 1 (64 KiB) holds 0x11; a read of its block 3 stops at its data
 * read -- on the slow path (after a reopen the fast map knows nothing; a
 * read of cluster 2 loads the L2 table) or holding a fast-map entry (the
 * cluster read once before).  Meanwhile a discard of cluster 1 (or a zero
 * write of it with MAY_UNMAP), a flush, and a write of 0x33 to cluster 3
 * -- which gets cluster 1's host cluster if that was freed -- are each
 * given up to 200 ms to complete: an engine that did not hold the discard
 * back until the read is done would complete all three, and the read would
 * return 0x33.  The read was first, so it returns 0x11; afterwards every
 * block reads as rule 2 says (cluster 1 zeros, cluster 3 0x33) and
 * qemu-img check is clean.  The read covers a block the discard covers,
 * against rule 1, so it runs outside the bookkeeping and is checked here.
 */
static void read_beside_unmap(bool fast, int op)
{
    g_autofree char *p = new_qcow2("rbu.qcow2", 4 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    const uint64_t bpc = 16, cl = 65536; /* blocks per cluster, cluster size */
    g_autofree uint8_t *buf = aligned_buf(BLOCK);
    struct iovec iov = {.iov_base = buf, .iov_len = BLOCK};
    int rd_ret = 0;
    Work w;

    work_init(&w, 4 * MiB, cl, 0);
    open_work(&w, p);
    run_one(&w, OP_WRITE, 1 * bpc, bpc, 0x11, 0);
    run_one(&w, OP_WRITE, 2 * bpc, bpc, 0x55, 0);
    assert_true(qimg_image_close(w.img, &err));
    open_work(&w, p);
    run_one(&w, OP_READ, 2 * bpc, 1, 0, 0); /* loads the L2 table */
    if (fast) {
        run_one(&w, OP_READ, 1 * bpc + 7, 1, 0, 0); /* learns cluster 1 */
    }
    assert_true(qimg_image_debug_break(w.img, "read_aio", "r", &err));
    assert_true(qimg_image_aio_preadv(w.img, cl + 3 * BLOCK, &iov, 1, 0, plain_done,
                                      &rd_ret, &err));
    wait_suspended(w.img, "r");

    Req *un = req_new(&w, op, 1 * bpc, bpc);
    unsigned un_id = un->id;
    assert_true(claim(&w, un));
    submit(&w, un, op == OP_ZERO ? QIMG_AIO_MAY_UNMAP : 0);
    (void)wait_done(&w, un_id, 200);
    Req *fl = req_new(&w, OP_FLUSH, 0, 0);
    unsigned fl_id = fl->id;
    submit(&w, fl, 0);
    (void)wait_done(&w, fl_id, 200);
    Req *wr = req_new(&w, OP_WRITE, 3 * bpc, bpc);
    unsigned wr_id = wr->id;
    assert_true(claim(&w, wr));
    memset(wr->buf, 0x33, cl);
    submit(&w, wr, 0);
    (void)wait_done(&w, wr_id, 200);

    assert_true(qimg_image_debug_resume(w.img, "r", &err));
    while (rd_ret == 0) {
        aio_poll_for(w.img, 100);
    }
    assert_int_equal(rd_ret, 1);
    for (unsigned i = 0; i < BLOCK; i++) {
        if (buf[i] != 0x11) {
            fail_msg("%s, %s beside: the read returned 0x%02x at byte %u, not 0x11",
                     fast ? "fast map" : "slow path", op_names[op], buf[i], i);
        }
    }
    assert_true(wait_done(&w, un_id, 10000));
    assert_true(wait_done(&w, fl_id, 10000));
    assert_true(wait_done(&w, wr_id, 10000));
    for (uint64_t b = 0; b < 4 * bpc; b++) {
        run_one(&w, OP_READ, b, 1, 0, 0);
    }
    if (w.failures) {
        fail_msg("%s", w.why);
    }
    assert_true(qimg_image_close(w.img, &err));
    tu_run("qemu-img check -q '%s'", p);
    work_clear(&w);
}

static void test_read_beside_discard(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    read_beside_unmap(false, OP_DISCARD);
    read_beside_unmap(true, OP_DISCARD);
}

static void test_read_beside_zero(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    read_beside_unmap(false, OP_ZERO);
    read_beside_unmap(true, OP_ZERO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flush_beside_read),
        cmocka_unit_test(test_read_beside_discard),
        cmocka_unit_test(test_read_beside_zero),
    };
    return workload_run_filtered("test-aio-interleave", tests, G_N_ELEMENTS(tests));
}
