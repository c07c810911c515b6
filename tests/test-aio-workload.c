/*
 * tests/test-aio-workload.c: reads that run beside other requests return
 * the image's bytes (issue 31), through libqimg.so and the public headers,
 * as an event loop drives the asynchronous API: one thread submits and
 * runs the callbacks.
 *
 *  - a random workload of reads, writes, zero writes, discards and flushes
 *    against a byte model, 64 requests in flight, read back after a reopen,
 *    `qemu-img check` clean: 64k clusters, 4k clusters with lazy refcounts,
 *    extended L2, and the io_uring engine with cache=none (fastmap.c,
 *    uring.c), on a 32 MiB image as before and on a 2 MiB one where
 *    requests meet in the same clusters all the time;
 *  - the harness's own rule, as a deterministic interleaving: a flush that
 *    completes beside a read leaves the read's blocks claimed;
 *  - reads stopped at a breakpoint while a discard or an unmapping zero
 *    write of their cluster, a flush and an allocating write that would
 *    reuse the freed host cluster are submitted: the read returns the
 *    bytes the cluster held (read.c invariant 6, fastmap.c invariant 2),
 *    on the slow path and on the fast map.
 *
 * The workload's rule (cited as "workload rule N"):
 *  1. No two requests in flight touch the same 4 KiB block: a request
 *     claims its blocks when it is submitted and releases exactly those
 *     when its callback runs; a flush claims none.  release() checks that
 *     every block it frees is the request's own.  (Issue 31: a flush kept
 *     the range drawn for it and freed those blocks when it completed, so
 *     a write could be submitted over a read still in flight; the read
 *     then correctly returned the bytes from before the write, which the
 *     model no longer held: "read at block N differs from the model".)
 *  2. The model changes when a request is submitted; a read's bytes are
 *     compared when its callback runs, and on a difference the history of
 *     the read's clusters is printed (what each differing block holds: the
 *     data of which earlier write, zeros, or unknown bytes).
 *
 * Environment, for stress runs (scripts/aio-stress.sh): QIMG_TEST_SEED
 * (default 42), QIMG_TEST_AIO_MIB and QIMG_TEST_AIO_REQUESTS override the
 * size and request count of every workload; QIMG_TEST_FILTER runs only the
 * tests whose names match (cmocka's pattern).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-util.h"

#include "test-aio-util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define BLOCK 4096u

enum { OP_WRITE, OP_READ, OP_ZERO, OP_DISCARD, OP_FLUSH };
static const char *const op_names[] = {"write", "read", "zero", "discard", "flush"};

typedef struct Work Work;

typedef struct Req {
    Work *w;
    int op;
    uint64_t block, nblocks; /* the blocks claimed (none for a flush) */
    uint8_t *buf;
    struct iovec iov;
    unsigned id; /* index in Work.hist */
} Req;

/* The history a failure is explained with (rule 2). */
typedef struct Hist {
    int op;
    uint64_t block, nblocks;
    unsigned sub, done; /* order of submission, of completion (0: not yet) */
    uint8_t *data;      /* a write's bytes */
} Hist;

struct Work {
    QimgImage *img;
    uint8_t *model;
    unsigned *owner; /* per block: 1 + the id of the request holding it (rule 1) */
    uint64_t nblocks;
    uint64_t cs;
    int in_flight, done, failures;
    char *why;
    GArray *hist; /* Hist, by request id */
    unsigned seq;
    guint32 seed;
};

static void work_init(Work *w, uint64_t size, uint64_t cs, guint32 seed)
{
    *w = (Work){.nblocks = size / BLOCK, .cs = cs, .seed = seed};
    w->model = g_malloc0(size);
    w->owner = g_new0(unsigned, w->nblocks);
    w->hist = g_array_new(FALSE, TRUE, sizeof(Hist));
}

static void work_clear(Work *w)
{
    for (guint i = 0; i < w->hist->len; i++) {
        free(g_array_index(w->hist, Hist, i).data);
    }
    g_array_free(w->hist, TRUE);
    g_free(w->model);
    g_free(w->owner);
    g_free(w->why);
}

static void work_fail(Work *w, char *why)
{
    if (w->failures++ == 0) {
        w->why = why;
    } else {
        g_free(why);
    }
}

/* A request on blocks [block, block + nblocks); a flush covers none. */
static Req *req_new(Work *w, int op, uint64_t block, uint64_t nblocks)
{
    Req *r = g_new0(Req, 1);

    r->w = w;
    r->op = op;
    r->block = block;
    r->nblocks = op == OP_FLUSH ? 0 : nblocks; /* rule 1 */
    r->id = w->hist->len;
    if (op == OP_WRITE || op == OP_READ) {
        r->buf = aligned_buf(r->nblocks * BLOCK);
        r->iov = (struct iovec){.iov_base = r->buf, .iov_len = r->nblocks * BLOCK};
    }
    return r;
}

static void req_free(Req *r)
{
    free(r->buf);
    g_free(r);
}

/* Rule 1: take r's blocks, or nothing if one is held. */
static bool claim(Work *w, const Req *r)
{
    for (uint64_t i = 0; i < r->nblocks; i++) {
        if (w->owner[r->block + i]) {
            return false;
        }
    }
    for (uint64_t i = 0; i < r->nblocks; i++) {
        w->owner[r->block + i] = r->id + 1;
    }
    return true;
}

/* Rule 1: give back r's blocks, each of which must be r's. */
static void release(Work *w, const Req *r)
{
    for (uint64_t i = 0; i < r->nblocks; i++) {
        if (w->owner[r->block + i] != r->id + 1) {
            work_fail(w, g_strdup_printf("%s %u freed block %" PRIu64 " held by %d",
                                         op_names[r->op], r->id, r->block + i,
                                         (int)w->owner[r->block + i] - 1));
        }
        w->owner[r->block + i] = 0;
    }
}

/* What one block read as, against what was written there (rule 2). */
static char *explain_block(Work *w, const uint8_t *got, uint64_t block)
{
    bool zero = true, same = true;
    for (unsigned i = 0; i < BLOCK; i++) {
        zero &= got[i] == 0;
        same &= got[i] == got[0];
    }
    if (zero) {
        return g_strdup("zeros");
    }
    for (guint i = w->hist->len; i-- > 0;) {
        Hist *h = &g_array_index(w->hist, Hist, i);
        if (h->data && block >= h->block && block < h->block + h->nblocks &&
            memcmp(h->data + (block - h->block) * BLOCK, got, BLOCK) == 0) {
            return g_strdup_printf("the data of write %u (sub %u, done %u)", i, h->sub,
                                   h->done);
        }
    }
    return same ? g_strdup_printf("all bytes 0x%02x", got[0]) : g_strdup("unknown bytes");
}

/* The failing read's story on stderr (rule 2). */
static void explain_read(Work *w, const Req *r)
{
    const Hist *me = &g_array_index(w->hist, Hist, r->id);
    uint64_t bpc = MAX(w->cs / BLOCK, 1);
    uint64_t c0 = r->block / bpc, c1 = (r->block + r->nblocks - 1) / bpc;

    fprintf(stderr,
            "seed %u: read %u (sub %u, done %u) of blocks %" PRIu64 "+%" PRIu64
            " differs\n",
            w->seed, r->id, me->sub, me->done, r->block, r->nblocks);
    for (uint64_t b = 0; b < r->nblocks; b++) {
        const uint8_t *got = r->buf + b * BLOCK,
                      *want = w->model + (r->block + b) * BLOCK;
        if (memcmp(got, want, BLOCK) != 0) {
            g_autofree char *what = explain_block(w, got, r->block + b);
            g_autofree char *should = explain_block(w, want, r->block + b);
            fprintf(stderr, "  block %" PRIu64 ": read %s, model %s\n", r->block + b,
                    what, should);
        }
    }
    for (guint i = 0; i < w->hist->len; i++) {
        const Hist *h = &g_array_index(w->hist, Hist, i);
        bool near = h->sub + 64 > me->sub && h->sub < me->sub + 64;
        bool on =
            h->nblocks && h->block / bpc <= c1 && (h->block + h->nblocks - 1) / bpc >= c0;
        if (on || (h->op == OP_FLUSH && near)) {
            fprintf(stderr,
                    "  %6u %-7s blocks %6" PRIu64 "+%" PRIu64 " sub %6u done %6u%s\n", i,
                    op_names[h->op], h->block, h->nblocks, h->sub, h->done,
                    i == r->id ? "  <- this read" : "");
        }
    }
}

static void req_done(void *opaque, int ret, const GError *err)
{
    Req *r = opaque;
    Work *w = r->w;
    Hist *h = &g_array_index(w->hist, Hist, r->id);

    h->done = ++w->seq;
    if (ret < 0 || err) {
        work_fail(w,
                  g_strdup_printf("%s %u at block %" PRIu64 ": %d (%s)", op_names[r->op],
                                  r->id, r->block, ret, err ? err->message : "no error"));
    } else if (r->op == OP_READ &&
               memcmp(r->buf, w->model + r->block * BLOCK, r->nblocks * BLOCK) != 0) {
        if (w->failures == 0) {
            explain_read(w, r);
        }
        work_fail(w, g_strdup_printf("read at block %" PRIu64 " differs from the model",
                                     r->block));
    }
    release(w, r);
    w->in_flight--;
    w->done++;
    if (r->op == OP_WRITE) {
        h->data = r->buf; /* kept for explain_block */
        r->buf = NULL;
    }
    req_free(r);
}

/* Submit r (claimed; a write's buffer filled), updating the model (rule 2). */
static void submit(Work *w, Req *r, unsigned flags)
{
    g_autoptr(GError) err = NULL;
    uint64_t off = r->block * BLOCK, len = r->nblocks * BLOCK;
    Hist h = {.op = r->op, .block = r->block, .nblocks = r->nblocks, .sub = ++w->seq};
    bool ok;

    g_assert(r->id == w->hist->len);
    g_array_append_val(w->hist, h);
    switch (r->op) {
    case OP_WRITE:
        memcpy(w->model + off, r->buf, len);
        ok = qimg_image_aio_pwritev(w->img, off, &r->iov, 1, flags, req_done, r, &err);
        break;
    case OP_READ:
        ok = qimg_image_aio_preadv(w->img, off, &r->iov, 1, flags, req_done, r, &err);
        break;
    case OP_ZERO:
        memset(w->model + off, 0, len);
        ok = qimg_image_aio_pwrite_zeroes(w->img, off, len, flags, req_done, r, &err);
        break;
    case OP_DISCARD:
        memset(w->model + off, 0, len); /* whole clusters, no backing: zeros */
        ok = qimg_image_aio_pdiscard(w->img, off, len, flags, req_done, r, &err);
        break;
    default:
        ok = qimg_image_aio_flush(w->img, flags, req_done, r, &err);
        break;
    }
    if (!ok) {
        fail_msg("submit: %s", err->message);
    }
    w->in_flight++;
}

/* One random request on free blocks; false if its blocks were held. */
static bool submit_random(Work *w, GRand *rnd)
{
    uint64_t bpc = MAX(w->cs / BLOCK, 1), block, nblocks;
    int op = g_rand_int_range(rnd, 0, 100);
    unsigned flags = 0;

    op = op < 45   ? OP_WRITE
         : op < 80 ? OP_READ
         : op < 90 ? OP_ZERO
         : op < 97 ? OP_DISCARD
                   : OP_FLUSH;
    if (op == OP_DISCARD) { /* whole clusters */
        block = (uint64_t)g_rand_int_range(rnd, 0, (gint32)(w->nblocks / bpc)) * bpc;
        nblocks = bpc;
    } else {
        nblocks = (uint64_t)g_rand_int_range(rnd, 1, 5);
        block = (uint64_t)g_rand_int_range(rnd, 0, (gint32)(w->nblocks - nblocks));
    }
    Req *r = req_new(w, op, block, nblocks);
    if (!claim(w, r)) {
        req_free(r);
        return false;
    }
    if (op == OP_WRITE) {
        for (uint64_t i = 0; i < nblocks * BLOCK; i++) {
            r->buf[i] = (uint8_t)g_rand_int(rnd);
        }
        flags = g_rand_int_range(rnd, 0, 10) == 0 ? QIMG_AIO_FUA : 0;
    } else if (op == OP_ZERO) {
        flags = QIMG_AIO_MAY_UNMAP;
    }
    submit(w, r, flags);
    return true;
}

static guint64 env_u64(const char *name, guint64 dflt)
{
    const char *v = g_getenv(name);
    return v && *v ? g_ascii_strtoull(v, NULL, 10) : dflt;
}

typedef struct Config {
    const char *opts; /* qemu-img create -o */
    uint64_t cs;
    QimgCacheMode cache;
    QimgAioEngine engine;
} Config;

static const Config configs[] = {
    {NULL, 65536, QIMG_CACHE_WRITEBACK, QIMG_AIO_ENGINE_THREADS},
    {"cluster_size=4096,lazy_refcounts=on", 4096, QIMG_CACHE_WRITEBACK,
     QIMG_AIO_ENGINE_THREADS},
    {"extended_l2=on,cluster_size=131072", 131072, QIMG_CACHE_WRITEBACK,
     QIMG_AIO_ENGINE_THREADS},
    {NULL, 65536, QIMG_CACHE_NONE, QIMG_AIO_ENGINE_IO_URING},
    {"extended_l2=on", 65536, QIMG_CACHE_NONE, QIMG_AIO_ENGINE_IO_URING},
};

static void workload(const Config *c, uint64_t mib, int nreq)
{
    const uint64_t size = env_u64("QIMG_TEST_AIO_MIB", mib) * MiB;
    const int total = (int)env_u64("QIMG_TEST_AIO_REQUESTS", (guint64)nreq);
    const guint32 seed = (guint32)env_u64("QIMG_TEST_SEED", 42);
    g_autofree char *p = new_qcow2("aio.qcow2", size, c->opts);
    g_autoptr(GRand) rnd = g_rand_new_with_seed(seed);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    int submitted = 0;
    Work w;

    work_init(&w, size, c->cs, seed);
    w.img = open_image(p, c->cache);
    ao.threads = 8;
    ao.engine = c->engine;
    assert_true(qimg_image_aio_setup(w.img, &ao, &err));
    while (submitted < total) {
        while (w.in_flight < 64 && submitted < total) {
            submitted += submit_random(&w, rnd);
        }
        qimg_image_aio_wait(w.img);
    }
    while (qimg_image_aio_in_flight(w.img) > 0) {
        qimg_image_aio_wait(w.img);
    }
    assert_int_equal(w.done, submitted);
    if (w.failures) {
        fail_msg("seed %u: %d failures, first: %s", seed, w.failures, w.why);
    }
    /* where the requests went (aio.c invariant 7) */
    assert_true(qimg_image_aio_get_stats(w.img, &st, &err));
    assert_int_equal(st.submitted, (uint64_t)submitted);
    assert_int_equal(st.completed, (uint64_t)submitted);
    if (c->engine == QIMG_AIO_ENGINE_IO_URING && !c->opts && size >= 32 * MiB) {
        /* rewrites and reads of clusters written before take the ring
         * (seen: 1246 reads and 1304 writes of 6000 requests).  With
         * extended L2 the fast map knows only clusters whose every
         * subcluster is allocated, which these small writes rarely make. */
        assert_true(st.ring_reads > (uint64_t)total / 20 &&
                    st.ring_writes > (uint64_t)total / 20);
        assert_true(st.ring_reads + st.ring_writes < (uint64_t)submitted);
    } else if (c->engine != QIMG_AIO_ENGINE_IO_URING) {
        assert_int_equal(st.ring_reads + st.ring_writes + st.ring_retries, 0);
    }
    assert_true(qimg_image_close(w.img, &err));

    /* what the image holds now, read synchronously after a reopen */
    QimgImage *img = open_image(p, QIMG_CACHE_WRITEBACK);
    g_autofree uint8_t *all = g_malloc(size);
    assert_true(qimg_image_pread(img, 0, all, size, &err));
    assert_memory_equal(all, w.model, size);
    assert_true(qimg_image_close(img, &err));
    tu_run("qemu-img check -q '%s'", p);
    work_clear(&w);
}

static void test_workload_64k(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[0], 32, 6000);
}

static void test_workload_4k_lazy(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[1], 32, 6000);
}

static void test_workload_extl2(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[2], 32, 6000);
}

/* The io_uring engine (aio.c invariant 7): O_DIRECT, reads of clusters the
 * fast map knows go to the ring, the rest to the pool. */
static void test_workload_io_uring(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[3], 32, 6000);
    workload(&configs[4], 32, 6000);
}

/* Every configuration on 2 MiB (32 clusters of 64 KiB): 64 requests in
 * flight meet in the same clusters all the time.  With rule 1 broken as
 * issue 31 found it, each of these fails within its first few thousand
 * requests. */
static void test_workload_contended(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
        workload(&configs[i], 2, 8000);
    }
}

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

static Work open_work(const char *p, uint64_t size, uint64_t cs)
{
    g_autofree char *name = g_strdup_printf("blkdebug::%s", p);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    Work w;

    work_init(&w, size, cs, 0);
    w.img = open_image(name, QIMG_CACHE_WRITEBACK);
    ao.engine = QIMG_AIO_ENGINE_THREADS;
    assert_true(qimg_image_aio_setup(w.img, &ao, &err));
    return w;
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
    Work w = open_work(p, 4 * MiB, 65536);

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
 * Read.c invariant 6 and fastmap.c invariant 2 with the interleaving forced:
 * cluster 1 (64 KiB) holds 0x11; a read of its block 3 stops at its data
 * read -- on the slow path (the cluster unknown to the fast map: written by
 * qemu-io, its L2 table loaded by a read of cluster 2) or holding a fast-map
 * entry (the cluster read once before).  Meanwhile a discard of cluster 1
 * (or a zero write of it with MAY_UNMAP), a flush, and a write of 0x33 to
 * cluster 3 -- which gets cluster 1's host cluster if that was freed -- are
 * each given up to 200 ms to complete: an engine that did not hold the
 * discard back until the read is done would complete all three, and the
 * read would return 0x33.  The read was first, so it must return 0x11;
 * afterwards cluster 1 reads as zeros, cluster 3 as 0x33, check is clean.
 * (The discard covers the read's block, against workload rule 1, so it is
 * submitted outside the bookkeeping and the model follows it once both
 * are done.)
 */
static void read_beside_unmap(bool fast, int op)
{
    g_autofree char *p = new_qcow2("rbu.qcow2", 4 * MiB, NULL);
    g_autoptr(GError) err = NULL;
    const uint64_t bpc = 16, cl = 65536; /* blocks per cluster, cluster size */
    int un_ret = 0;

    tu_run("qemu-io -c 'write -q -P 0x11 64k 64k' -c 'write -q -P 0x55 128k 64k' '%s'",
           p);
    Work w = open_work(p, 4 * MiB, cl);
    memset(w.model + 1 * cl, 0x11, cl);
    memset(w.model + 2 * cl, 0x55, cl);
    run_one(&w, OP_READ, 2 * bpc, 1, 0, 0); /* loads the L2 table */
    if (fast) {
        run_one(&w, OP_READ, 1 * bpc + 7, 1, 0, 0); /* learns cluster 1 */
    }
    assert_true(qimg_image_debug_break(w.img, "read_aio", "r", &err));
    Req *rd = req_new(&w, OP_READ, 1 * bpc + 3, 1);
    unsigned rd_id = rd->id;
    assert_true(claim(&w, rd));
    submit(&w, rd, 0);
    wait_suspended(w.img, "r");

    assert_true(op == OP_DISCARD
                    ? qimg_image_aio_pdiscard(w.img, cl, cl, 0, plain_done, &un_ret, &err)
                    : qimg_image_aio_pwrite_zeroes(w.img, cl, cl, QIMG_AIO_MAY_UNMAP,
                                                   plain_done, &un_ret, &err));
    for (int i = 0; i < 20 && un_ret == 0; i++) {
        aio_poll_for(w.img, 10);
    }
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
    assert_true(wait_done(&w, rd_id, 10000));
    if (w.failures) {
        fail_msg("%s, %s beside: %s", fast ? "fast map" : "slow path", op_names[op],
                 w.why);
    }
    while (un_ret == 0) {
        aio_poll_for(w.img, 100);
    }
    assert_int_equal(un_ret, 1);
    assert_true(wait_done(&w, fl_id, 10000));
    assert_true(wait_done(&w, wr_id, 10000));
    memset(w.model + 1 * cl, 0, cl);
    for (uint64_t b = 0; b < 4 * bpc; b++) {
        run_one(&w, OP_READ, b, 1, 0, 0);
    }
    assert_int_equal(w.failures, 0);
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
        cmocka_unit_test(test_workload_contended),
        cmocka_unit_test(test_workload_64k),
        cmocka_unit_test(test_workload_4k_lazy),
        cmocka_unit_test(test_workload_extl2),
        cmocka_unit_test(test_workload_io_uring),
    };
    const char *filter = g_getenv("QIMG_TEST_FILTER");

    if (filter && *filter) {
        cmocka_set_test_filter(filter);
    }
    return tu_run_group_tests("test-aio-workload", tests);
}
