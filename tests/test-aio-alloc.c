/*
 * tests/test-aio-alloc.c: allocating writes through the io_uring engine
 * (api/aio.c invariant 13, qcow2/write.c invariant 18), through libqimg.so
 * and the public headers, as an event loop drives them:
 *
 *  - random writes (sizes 512 B to 256 KiB, 512-byte aligned, none
 *    overlapping another in flight) at depth 32 into a fresh image with
 *    cache=none, against a byte model: 4k, 64k and 2M clusters, extended
 *    L2, and a backing file (so partial-cluster writes that need its bytes
 *    fall back to the pool).  The ring must have planned some of them
 *    (stats.ring_allocs), the backing configurations must have sent some
 *    to the pool; qemu-img convert reads back exactly the model, and
 *    qemu-img check is clean;
 *  - sequential writes at depth 32 (a window kept full, 4 KiB or 4-80 KiB
 *    each) into a fresh image, against a byte model: the writes into a
 *    cluster whose first write is planning it join that plan
 *    (stats.ring_joins; qcow2/write-ring.c invariant 1) where it allows
 *    them -- not with extended L2, nor where every write is a cluster --
 *    and none runs again on the pool; qemu-img convert reads back exactly
 *    the model, qemu-img check is clean and qemu-img compare finds the
 *    image identical to the model;
 *  - the same past a file size limit set inside a cluster, so that whole
 *    plans and single joined writes fail: every request's outcome matches
 *    its bytes (qemu-img convert reads its data where it succeeded, zeros
 *    where it failed: a plan whose own write failed links nothing, the
 *    writes that joined it run again on the pool), and qemu-img check is
 *    clean;
 *  - a ring write that fails (the file size limit, RLIMIT_FSIZE, makes the
 *    kernel refuse writes past it with EFBIG): the request runs again on
 *    the pool (stats.ring_retries), fails there with its error, and
 *    nothing is linked: qemu-io reads zeros where it failed and the data
 *    where it did not, and qemu-img check is clean.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-util.h"

#include "test-aio-util.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define DEPTH 32
#define SECTOR 512u

typedef struct Req {
    uint64_t off, len;
    uint8_t *buf;
    struct iovec v;
} Req;

typedef struct Batch {
    int done, errors;
    char *msg;
} Batch;

static void batch_cb(void *opaque, int ret, const GError *err)
{
    Batch *b = opaque;

    b->done++;
    if (ret < 0) {
        b->errors++;
        if (!b->msg) {
            b->msg = g_strdup(err->message);
        }
    }
}

static void wait_batch(QimgImage *img, Batch *b, int n)
{
    while (b->done < n) {
        qimg_image_aio_wait(img);
    }
}

static bool overlaps(const Req *r, int n, uint64_t off, uint64_t len)
{
    for (int i = 0; i < n; i++) {
        if (off < r[i].off + r[i].len && r[i].off < off + len) {
            return true;
        }
    }
    return false;
}

/* qemu-img check finds p clean, and qemu-img convert and compare read
 * exactly model from it. */
static void assert_image_is(const char *p, const uint8_t *model, uint64_t size)
{
    g_autofree char *raw = tu_fresh("got.raw");
    g_autofree char *want = tu_fresh("want.raw");
    g_autofree char *got = NULL;
    gsize got_len = 0;

    tu_run("qemu-img check -q '%s'", p);
    tu_run("qemu-img convert -O raw '%s' '%s'", p, raw);
    assert_true(g_file_get_contents(raw, &got, &got_len, NULL));
    assert_int_equal(got_len, size);
    assert_memory_equal(got, model, size);
    assert_true(g_file_set_contents(want, (const char *)model, (gssize)size, NULL));
    tu_run("qemu-img compare -q -f qcow2 -F raw '%s' '%s'", p, want);
}

typedef struct Config {
    const char *opts; /* qemu-img create -o */
    bool backing;     /* a raw backing file with a pattern */
} Config;

static void alloc_model(const Config *c, uint64_t size, int batches)
{
    g_autofree char *p = tu_fresh("alloc.qcow2");
    g_autofree char *base = NULL;
    g_autofree uint8_t *model = g_malloc0(size);
    g_autoptr(GError) err = NULL;
    g_autoptr(GRand) rnd = g_rand_new_with_seed(33);
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    Req req[DEPTH];
    uint64_t writes = 0;

    if (c->backing) {
        base = tu_fresh("alloc-base.raw");
        for (uint64_t i = 0; i < size; i++) {
            model[i] = (uint8_t)(0x80 | ((i / 4096) * 7));
        }
        g_assert_true(g_file_set_contents(base, (char *)model, (gssize)size, NULL));
        tu_run("qemu-img create -q -f qcow2 -b '%s' -F raw %s%s '%s' %" PRIu64, base,
               c->opts ? "-o " : "", c->opts ? c->opts : "", p, size);
    } else {
        tu_run("qemu-img create -q -f qcow2 %s%s '%s' %" PRIu64, c->opts ? "-o " : "",
               c->opts ? c->opts : "", p, size);
    }
    QimgImage *img = open_image(p, QIMG_CACHE_NONE);
    ao.engine = QIMG_AIO_ENGINE_IO_URING;
    assert_true(qimg_image_aio_setup(img, &ao, &err));
    for (int b = 0; b < batches; b++) {
        Batch bt = {0};
        int n = 0;
        while (n < DEPTH) {
            uint64_t len = SECTOR * (uint64_t)g_rand_int_range(rnd, 1, 513);
            uint64_t off =
                SECTOR * (uint64_t)g_rand_int_range(rnd, 0, (gint32)(size / SECTOR));
            if (g_rand_boolean(rnd)) { /* mostly 4k aligned: O_DIRECT's */
                len = (len + 4095) & ~UINT64_C(4095);
                off &= ~UINT64_C(4095);
            }
            len = MIN(len, size - off);
            if (overlaps(req, n, off, len)) {
                continue;
            }
            req[n] = (Req){.off = off, .len = len, .buf = aligned_buf(len)};
            memset(req[n].buf, (int)(writes % 251) + 1, len);
            req[n].v = (struct iovec){.iov_base = req[n].buf, .iov_len = len};
            memcpy(model + off, req[n].buf, len);
            assert_true(
                qimg_image_aio_pwritev(img, off, &req[n].v, 1, 0, batch_cb, &bt, &err));
            writes++;
            n++;
        }
        wait_batch(img, &bt, n);
        assert_int_equal(bt.errors, 0);
        for (int i = 0; i < n; i++) {
            free(req[i].buf);
        }
    }
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    print_message("%s%s: %" PRIu64 " writes, ring %" PRIu64 " (allocating %" PRIu64
                  "), retries %" PRIu64 "\n",
                  c->opts ? c->opts : "default", c->backing ? " +backing" : "", writes,
                  st.ring_writes, st.ring_allocs, st.ring_retries);
    assert_int_equal(st.completed, writes);
    assert_true(st.ring_allocs >= 16); /* invariant 13 took them */
    assert_int_equal(st.ring_retries, 0);
    if (c->backing) {
        assert_true(st.ring_writes < writes); /* COW reads the backing: pool */
    }
    assert_true(qimg_image_close(img, &err));
    assert_image_is(p, model, size);
}

static const Config configs[] = {
    {"cluster_size=4096", false},
    {NULL, false},
    {"cluster_size=2M", false},
    {"extended_l2=on", false},
    {NULL, true},
    {"extended_l2=on,cluster_size=32k", true},
};

static void test_alloc_model(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
        alloc_model(&configs[i], i == 2 ? 64 * MiB : 16 * MiB, 12);
    }
}

/* A window of DEPTH writes kept full (write-ring.c), in the order of
 * starts/lens. */
typedef struct Seq {
    QimgImage *img;
    uint8_t *model;   /* what each write puts there */
    uint64_t *starts; /* per request: its offset, length, outcome */
    uint64_t *lens;
    int *rets;
    int n, in_flight, errors;
} Seq;

typedef struct SeqReq {
    Seq *q;
    int i;
    uint8_t *buf;
    struct iovec v;
} SeqReq;

/* Sequential requests over [start, end): 4 KiB each, or (rnd) 4-80 KiB. */
static void seq_plan(Seq *q, uint64_t start, uint64_t end, GRand *rnd)
{
    int max = (int)((end - start) / 4096);

    q->starts = g_new0(uint64_t, (size_t)max);
    q->lens = g_new0(uint64_t, (size_t)max);
    q->rets = g_new0(int, (size_t)max);
    for (uint64_t off = start; off < end; q->n++) {
        uint64_t len = rnd ? 4096u * (uint64_t)g_rand_int_range(rnd, 1, 21) : 4096;
        q->starts[q->n] = off;
        q->lens[q->n] = MIN(len, end - off);
        off += q->lens[q->n];
    }
}

static void seq_cb(void *opaque, int ret, const GError *err)
{
    SeqReq *r = opaque;

    r->q->rets[r->i] = ret;
    r->q->in_flight--;
    if (ret < 0) {
        r->q->errors++;
        assert_non_null(err);
    }
    free(r->buf);
    g_free(r);
}

static void seq_run(Seq *q)
{
    g_autoptr(GError) err = NULL;

    for (int next = 0; next < q->n || q->in_flight > 0;) {
        while (next < q->n && q->in_flight < DEPTH) {
            SeqReq *r = g_new0(SeqReq, 1);
            uint64_t off = q->starts[next], len = q->lens[next];
            r->q = q;
            r->i = next++;
            r->buf = aligned_buf(len);
            memset(r->buf, (r->i % 251) + 1, len);
            memcpy(q->model + off, r->buf, len);
            r->v = (struct iovec){.iov_base = r->buf, .iov_len = len};
            q->in_flight++;
            assert_true(
                qimg_image_aio_pwritev(q->img, off, &r->v, 1, 0, seq_cb, r, &err));
        }
        qimg_image_aio_wait(q->img);
    }
}

static void seq_free(Seq *q)
{
    g_free(q->model);
    g_free(q->starts);
    g_free(q->lens);
    g_free(q->rets);
}

/* joins: > 0, some writes joined a plan; 0, none may (write-ring.c
 * invariant 1 refuses); < 0, any number.  How many join depends on how
 * many writes arrive while a plan's data is in flight (426 to 1739 of the
 * 2048 4 KiB writes into 64 KiB clusters, by build and load; a 2M
 * cluster's joins end once its first writes linked it), so only "some"
 * is asserted, in the case where nearly every run has hundreds: it fails
 * with joins disabled; the model checks the bytes of every case. */
static void seq_model(const char *opts, uint64_t size, bool mixed, int joins)
{
    g_autofree char *p = new_qcow2("seq.qcow2", size, opts);
    g_autoptr(GError) err = NULL;
    g_autoptr(GRand) rnd = g_rand_new_with_seed(34);
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    Seq q = {.model = g_malloc0(size)};

    q.img = open_image(p, QIMG_CACHE_NONE);
    ao.engine = QIMG_AIO_ENGINE_IO_URING;
    assert_true(qimg_image_aio_setup(q.img, &ao, &err));
    seq_plan(&q, 0, size, mixed ? rnd : NULL);
    seq_run(&q);
    assert_true(qimg_image_aio_get_stats(q.img, &st, &err));
    print_message("%s%s: %d writes, ring %" PRIu64 " (allocating %" PRIu64
                  ", joined %" PRIu64 "), retries %" PRIu64 "\n",
                  opts ? opts : "default", mixed ? " 4-80k" : " 4k", q.n, st.ring_writes,
                  st.ring_allocs, st.ring_joins, st.ring_retries);
    assert_int_equal(q.errors, 0);
    assert_int_equal(st.completed, (uint64_t)q.n);
    assert_int_equal(st.ring_retries, 0);
    if (joins > 0) {
        /* write-ring.c invariant 1 (a write across a cluster boundary into
         * a cluster nobody plans yet takes the pool) */
        assert_true(st.ring_joins > 0);
    } else if (joins == 0) {
        assert_int_equal(st.ring_joins, 0); /* write-ring.c invariant 1 refuses */
    }
    assert_true(qimg_image_close(q.img, &err));
    assert_image_is(p, q.model, size);
    seq_free(&q);
}

static void test_seq_model(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    seq_model(NULL, 8 * MiB, false, 1);
    seq_model(NULL, 16 * MiB, true, -1);
    seq_model("cluster_size=2M", 16 * MiB, false, -1);
    seq_model("cluster_size=4096", 4 * MiB, false, 0);
    seq_model("extended_l2=on", 8 * MiB, false, 0);
}

/* Sequential writes past a file size limit set inside a cluster: plans
 * and joined writes fail (write-ring.c invariants 2, 3); every request's
 * outcome matches its bytes. */
static void test_seq_ring_error(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    const uint64_t cs = 65536, nclusters = 8;
    g_autofree char *p = new_qcow2("seqfail.qcow2", 4 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    QimgExtent ext;
    struct rlimit old, lim = {.rlim_max = RLIM_INFINITY};
    struct stat sb;
    uint8_t *buf = aligned_buf(4096);
    Seq q = {.model = g_malloc0(4 * MiB)};

    /* glib sets its error domains' lock up at the first GError, with
     * atomics an uninstrumented glib hides from TSan: make it here, before
     * the workers' failures make theirs at once */
    g_clear_error(&err);
    g_set_error_literal(&err, QIMG_ERROR, EFBIG, "first");
    g_clear_error(&err);
    q.img = open_image(p, QIMG_CACHE_NONE);
    ao.engine = QIMG_AIO_ENGINE_IO_URING;
    assert_true(qimg_image_aio_setup(q.img, &ao, &err));
    /* the first allocation grows the file ahead (grow.c: 1 MiB or more),
     * so the clusters below read as zeros unwritten and may be joined;
     * the writes below stay far enough under its end to grow no more */
    memset(buf, 0x5c, 4096);
    memset(q.model, 0x5c, 4096);
    assert_true(qimg_image_pwrite(q.img, 0, buf, 4096, &err));
    assert_true(qimg_image_block_status_layer(q.img, 0, cs, &ext, &err));
    assert_true(ext.flags & QIMG_STATUS_OFFSET_VALID);
    assert_int_equal(stat(p, &sb), 0);
    assert_true((uint64_t)sb.st_size >= ext.offset + (nclusters + 2) * cs + MiB);
    /* guest cluster k + 1 gets host cluster k + 1 after ext.offset: the
     * limit falls inside the third one's, so its first writes succeed,
     * its last ones and every later one fail */
    lim.rlim_cur = ext.offset + 3 * cs + cs / 2;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    /* each cluster's writes from its last 4 KiB down: the plan's own
     * write is the one past the limit, writes that joined it fit below */
    seq_plan(&q, cs, (nclusters + 1) * cs, NULL);
    for (int i = 0; i < q.n; i++) {
        q.starts[i] = cs * (1 + (uint64_t)i / 16) + (15 - (uint64_t)i % 16) * 4096;
    }
    seq_run(&q);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
    assert_true(qimg_image_aio_get_stats(q.img, &st, &err));
    print_message("%d writes: %d failed; ring allocating %" PRIu64 ", joined %" PRIu64
                  ", retries %" PRIu64 "\n",
                  q.n, q.errors, st.ring_allocs, st.ring_joins, st.ring_retries);
    assert_true(q.errors > 0 && q.errors < q.n);
    assert_true(st.ring_joins > 0);
    assert_true(st.ring_retries > 0);
    assert_true(qimg_image_close(q.img, &err));
    /* a request that failed left zeros, one that succeeded its bytes */
    for (int i = 0; i < q.n; i++) {
        if (q.rets[i] < 0) {
            memset(q.model + q.starts[i], 0, q.lens[i]);
        }
    }
    assert_image_is(p, q.model, 4 * MiB);
    free(buf);
    seq_free(&q);
}

/* A ring write the kernel refuses (EFBIG past RLIMIT_FSIZE): run again on
 * the pool, failed there, nothing linked. */
static void test_alloc_ring_error(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    const uint64_t cs = 65536, limit = 1 * MiB;
    g_autofree char *p = new_qcow2("efbig.qcow2", 4 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    struct rlimit old, lim = {.rlim_cur = limit, .rlim_max = RLIM_INFINITY};
    uint8_t *buf = aligned_buf(4096);
    struct iovec v = {.iov_base = buf, .iov_len = 4096};
    Batch bt = {0};
    bool ok[32];

    /* the file covers every cluster already: no growth, which the limit
     * would stop (grow.c), only data writes past it fail */
    tu_run("truncate -s 8M '%s'", p);
    QimgImage *img = open_image(p, QIMG_CACHE_NONE);
    ao.engine = QIMG_AIO_ENGINE_IO_URING;
    assert_true(qimg_image_aio_setup(img, &ao, &err));
    memset(buf, 0x5c, 4096);
    /* the L2 table is allocated and written below the limit first */
    assert_true(qimg_image_pwrite(img, 31 * cs, buf, 4096, &err));
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    for (uint64_t c = 0; c < 31; c++) {
        assert_true(qimg_image_aio_pwritev(img, c * cs, &v, 1, 0, batch_cb, &bt, &err));
    }
    wait_batch(img, &bt, 31);
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    print_message("31 writes: %d failed (%s); ring allocating %" PRIu64
                  ", retries %" PRIu64 "\n",
                  bt.errors, bt.msg ? bt.msg : "-", st.ring_allocs, st.ring_retries);
    assert_true(bt.errors > 0 && bt.errors < 31);
    assert_non_null(strstr(bt.msg, g_strerror(EFBIG)));
    assert_int_equal(st.ring_allocs, 31);
    assert_int_equal(st.ring_retries, (uint64_t)bt.errors);
    assert_true(qimg_image_close(img, &err));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
    /* which ones failed: qemu-io reads zeros there (nothing linked) */
    int zeros = 0;
    for (uint64_t c = 0; c < 31; c++) {
        ok[c] = tu_run_status(NULL, "qemu-io -c 'read -q -P 0x5c %" PRIu64 " 4k' '%s'",
                              c * cs, p) == 0;
        if (!ok[c]) {
            tu_run("qemu-io -c 'read -q -P 0 %" PRIu64 " 64k' '%s'", c * cs, p);
            zeros++;
        }
    }
    assert_int_equal(zeros, bt.errors);
    tu_run("qemu-img check -q '%s'", p);
    free(buf);
    g_free(bt.msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_model),
        cmocka_unit_test(test_seq_model),
        cmocka_unit_test(test_seq_ring_error),
        cmocka_unit_test(test_alloc_ring_error),
    };
    return tu_run_group_tests("test-aio-alloc", tests);
}
