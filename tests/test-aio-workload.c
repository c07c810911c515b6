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
 *    requests meet in the same clusters all the time; and with reads
 *    beside writes, zero writes and discards of their own blocks (rule 3);
 *  - the harness's own rule, as a deterministic interleaving: a flush that
 *    completes beside a read leaves the read's blocks claimed;
 *  - the same workload over NBD (with libnbd): `nbdkit qimg` serving the
 *    image, so the requests reach it through the synchronous API from
 *    nbdkit's threads, the path of `qimg nbd`;
 *  - reads stopped at a breakpoint while a discard or an unmapping zero
 *    write of their cluster, a flush and an allocating write that would
 *    reuse the freed host cluster are submitted: the read returns the
 *    bytes the cluster held (read.c invariant 6, fastmap.c invariant 7),
 *    on the slow path and on the fast map.  (The random runs cannot tell
 *    whether a read holds its cluster: a freed host cluster is reused only
 *    after a flush (alloc.c invariant 2), far outside a read's window.)
 *
 * The workload's rules (cited as "workload rule N"):
 *  1. No two requests in flight touch the same 4 KiB block: a request
 *     claims its blocks when it is submitted and releases exactly those
 *     when its callback runs; a flush claims none.  release() checks that
 *     every block it frees is the request's own.  (Issue 31: a flush kept
 *     the range drawn for it and freed those blocks when it completed, so
 *     a write could be submitted over a read still in flight; the read
 *     then correctly returned the bytes from before the write, which the
 *     model no longer held: "read at block N differs from the model".)
 *  2. Every block keeps its versions: the writes, zero writes and discards
 *     submitted on it, in order.  A read passes when each byte it returned
 *     is that byte of the block as of the read's submission (its last
 *     version completed by then, or zeros) or of a later version (in
 *     flight then, or submitted while the read was).  Under rule 1 that is exactly the
 * block as of the read's submission; under rule 3 it is what a disk may return for a read
 * beside writes to the same bytes (torn at any byte), and never bytes the block did not
 * hold: another cluster's data after a discard freed and reuse took its host cluster,
 * stale or uninitialised memory. On a failure the history of the read's clusters is
 * printed.
 *  3. In overlap mode reads claim nothing: writes, zero writes and
 *     discards (still one at a time per block, rule 1) run beside reads of
 *     the same blocks -- discards and unmapping zero writes of whole
 *     clusters that reads are in, their host clusters reused at once.
 *
 * Environment, for stress runs (scripts/aio-stress.sh): QIMG_TEST_SEED
 * (default 42), QIMG_TEST_AIO_MIB and QIMG_TEST_AIO_REQUESTS override the
 * size and request count of every workload; QIMG_TEST_FILTER runs only the
 * tests whose names match one of its comma-separated glob patterns and
 * none of its "!pattern"s.
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
#ifdef QIMG_HAVE_LIBNBD
#include <libnbd.h>
#endif

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
    uint8_t *data;      /* a write's bytes (owned here from its submission) */
} Hist;

struct Work {
    QimgImage *img;
#ifdef QIMG_HAVE_LIBNBD
    struct nbd_handle *nbd; /* set: requests go over NBD instead (submit_nbd) */
#endif
    uint8_t *model;
    unsigned *owner; /* per block: 1 + the id of the request holding it (rule 1) */
    GArray **ver;    /* per block: ids of the requests that changed it (rule 2) */
    bool overlap;    /* rule 3 */
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
    w->ver = g_new0(GArray *, w->nblocks);
    w->hist = g_array_new(FALSE, TRUE, sizeof(Hist));
}

static void work_clear(Work *w)
{
    for (guint i = 0; i < w->hist->len; i++) {
        free(g_array_index(w->hist, Hist, i).data);
    }
    for (uint64_t b = 0; b < w->nblocks; b++) {
        if (w->ver[b]) {
            g_array_free(w->ver[b], TRUE);
        }
    }
    g_array_free(w->hist, TRUE);
    g_free(w->model);
    g_free(w->owner);
    g_free(w->ver);
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

/* Rule 1: take r's blocks, or nothing if one is held (rule 3: a read
 * takes none). */
static bool claim(Work *w, const Req *r)
{
    if (w->overlap && r->op == OP_READ) {
        return true;
    }
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
    if (w->overlap && r->op == OP_READ) {
        return;
    }
    for (uint64_t i = 0; i < r->nblocks; i++) {
        if (w->owner[r->block + i] != r->id + 1) {
            work_fail(w, g_strdup_printf("%s %u freed block %" PRIu64 " held by %d",
                                         op_names[r->op], r->id, r->block + i,
                                         (int)w->owner[r->block + i] - 1));
        }
        w->owner[r->block + i] = 0;
    }
}

static const uint8_t zero_block[BLOCK];

/* Block b as request id (a write, zero write or discard on it) left it. */
static const uint8_t *version_bytes(Work *w, unsigned id, uint64_t b)
{
    const Hist *h = &g_array_index(w->hist, Hist, id);
    return h->op == OP_WRITE ? h->data + (b - h->block) * BLOCK : zero_block;
}

/* Rule 2: the versions of block b a read submitted at sub may return:
 * the result is the index in w->ver[b] of the block as of then -- its last
 * version that had completed (-1: none, zeros) -- and every later one
 * counts too (one was in flight then, or came while the read was). */
static int version_at(Work *w, uint64_t b, unsigned sub)
{
    GArray *v = w->ver[b];
    int k = v ? (int)v->len - 1 : -1;

    for (; k >= 0; k--) {
        const Hist *h = &g_array_index(w->hist, Hist, g_array_index(v, unsigned, k));
        if (h->done && h->done < sub) {
            break;
        }
    }
    return k;
}

/* Rule 2 for one block: the first byte that is none of the allowed
 * versions' at that offset, or -1. */
static int block_mismatch(Work *w, uint64_t b, unsigned sub, const uint8_t *got)
{
    GArray *v = w->ver[b];
    int k = version_at(w, b, sub);
    const uint8_t *base =
        k >= 0 ? version_bytes(w, g_array_index(v, unsigned, k), b) : zero_block;

    if (memcmp(got, base, BLOCK) == 0) {
        return -1;
    }
    for (int i = 0; i < (int)BLOCK; i++) {
        bool ok = got[i] == base[i];
        for (guint j = (guint)(k + 1); !ok && v && j < v->len; j++) {
            ok = got[i] == version_bytes(w, g_array_index(v, unsigned, j), b)[i];
        }
        if (!ok) {
            return i;
        }
    }
    return -1;
}

/* What one block read as: which version of it, zeros, or neither. */
static char *explain_block(Work *w, const uint8_t *got, uint64_t b)
{
    GArray *v = w->ver[b];

    for (guint j = v ? v->len : 0; j-- > 0;) {
        unsigned id = g_array_index(v, unsigned, j);
        const Hist *h = &g_array_index(w->hist, Hist, id);
        if (memcmp(version_bytes(w, id, b), got, BLOCK) == 0) {
            return g_strdup_printf("what %s %u left (sub %u, done %u)", op_names[h->op],
                                   id, h->sub, h->done);
        }
    }
    if (memcmp(got, zero_block, BLOCK) == 0) {
        return g_strdup("zeros");
    }
    for (guint i = w->hist->len; i-- > 0;) {
        const Hist *h = &g_array_index(w->hist, Hist, i);
        for (uint64_t k = 0; h->data && k < h->nblocks; k++) {
            if (memcmp(h->data + k * BLOCK, got, BLOCK) == 0) {
                return g_strdup_printf("block %" PRIu64 " of write %u (sub %u, done %u)",
                                       h->block + k, i, h->sub, h->done);
            }
        }
    }
    return g_strdup("bytes no request wrote");
}

/* The failing read's story on stderr (rule 2). */
static void explain_read(Work *w, const Req *r)
{
    const Hist *me = &g_array_index(w->hist, Hist, r->id);
    uint64_t bpc = MAX(w->cs / BLOCK, 1);
    uint64_t c0 = r->block / bpc, c1 = (r->block + r->nblocks - 1) / bpc;

    fprintf(stderr,
            "seed %u: read %u (sub %u, done %u) of blocks %" PRIu64 "+%" PRIu64
            " returned bytes its blocks never held%s\n",
            w->seed, r->id, me->sub, me->done, r->block, r->nblocks,
            w->overlap ? " (overlap mode)" : "");
    for (uint64_t b = 0; b < r->nblocks; b++) {
        const uint8_t *got = r->buf + b * BLOCK;
        int at = block_mismatch(w, r->block + b, me->sub, got);
        if (at >= 0) {
            int k = version_at(w, r->block + b, me->sub);
            g_autofree char *what = explain_block(w, got, r->block + b);
            fprintf(stderr,
                    "  block %" PRIu64 " from byte %d: read %s; as of the read: %s\n",
                    r->block + b, at, what,
                    k < 0 ? "never written"
                          : op_names[g_array_index(
                                         w->hist, Hist,
                                         g_array_index(w->ver[r->block + b], unsigned, k))
                                         .op]);
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

/* Rule 2 for a read whose callback runs now. */
static bool read_ok(Work *w, const Req *r)
{
    unsigned sub = g_array_index(w->hist, Hist, r->id).sub;

    for (uint64_t b = 0; b < r->nblocks; b++) {
        if (block_mismatch(w, r->block + b, sub, r->buf + b * BLOCK) >= 0) {
            return false;
        }
    }
    return true;
}

static void req_done(void *opaque, int ret, const GError *err)
{
    Req *r = opaque;
    Work *w = r->w;
    Hist *h = &g_array_index(w->hist, Hist, r->id);

    h->done = ++w->seq;
    if (ret < 0 || err) {
        work_fail(w, g_strdup_printf("%s %u at block %" PRIu64 ": %d (%s)",
                                     op_names[r->op], r->id, r->block, ret,
                                     err ? err->message : g_strerror(-ret)));
    } else if (r->op == OP_READ && !read_ok(w, r)) {
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
        r->buf = NULL; /* the history's (rule 2) */
    }
    req_free(r);
}

#ifdef QIMG_HAVE_LIBNBD
static int nbd_done(void *opaque, int *error)
{
    req_done(opaque, *error ? -*error : 0, NULL);
    return 1; /* retire the command */
}

/* submit() over NBD: the same requests (a zero write without NO_HOLE may
 * unmap; FUA as a flag). */
static void submit_nbd(Work *w, Req *r, unsigned flags)
{
    nbd_completion_callback cb = {.callback = nbd_done, .user_data = r};
    uint64_t off = r->block * BLOCK, len = r->nblocks * BLOCK;
    uint32_t f = (flags & QIMG_AIO_FUA) ? LIBNBD_CMD_FLAG_FUA : 0;
    int64_t cookie;

    switch (r->op) {
    case OP_WRITE:
        cookie = nbd_aio_pwrite(w->nbd, r->buf, len, off, cb, f);
        break;
    case OP_READ:
        cookie = nbd_aio_pread(w->nbd, r->buf, len, off, cb, 0);
        break;
    case OP_ZERO:
        cookie = nbd_aio_zero(w->nbd, len, off, cb, 0);
        break;
    case OP_DISCARD:
        cookie = nbd_aio_trim(w->nbd, len, off, cb, 0);
        break;
    default:
        cookie = nbd_aio_flush(w->nbd, cb, 0);
        break;
    }
    if (cookie < 0) {
        fail_msg("submit over NBD: %s", nbd_get_error());
    }
}
#endif

/* Submit r (claimed; a write's buffer filled), updating the model (rule 2). */
static void submit(Work *w, Req *r, unsigned flags)
{
    g_autoptr(GError) err = NULL;
    uint64_t off = r->block * BLOCK, len = r->nblocks * BLOCK;
    Hist h = {.op = r->op, .block = r->block, .nblocks = r->nblocks, .sub = ++w->seq};
    bool ok;

    g_assert(r->id == w->hist->len);
    if (r->op == OP_WRITE) {
        h.data = r->buf; /* rule 2 */
    }
    g_array_append_val(w->hist, h);
    for (uint64_t i = 0; i < r->nblocks && r->op != OP_READ; i++) {
        GArray **v = &w->ver[r->block + i];
        if (!*v) {
            *v = g_array_new(FALSE, FALSE, sizeof(unsigned));
        }
        g_array_append_val(*v, r->id);
    }
    if (r->op == OP_WRITE) {
        memcpy(w->model + off, r->buf, len);
    } else if (r->op == OP_ZERO || r->op == OP_DISCARD) {
        memset(w->model + off, 0, len); /* discards: whole clusters, no backing */
    }
    w->in_flight++;
#ifdef QIMG_HAVE_LIBNBD
    if (w->nbd) {
        submit_nbd(w, r, flags);
        return;
    }
#endif
    switch (r->op) {
    case OP_WRITE:
        ok = qimg_image_aio_pwritev(w->img, off, &r->iov, 1, flags, req_done, r, &err);
        break;
    case OP_READ:
        ok = qimg_image_aio_preadv(w->img, off, &r->iov, 1, flags, req_done, r, &err);
        break;
    case OP_ZERO:
        ok = qimg_image_aio_pwrite_zeroes(w->img, off, len, flags, req_done, r, &err);
        break;
    case OP_DISCARD:
        ok = qimg_image_aio_pdiscard(w->img, off, len, flags, req_done, r, &err);
        break;
    default:
        ok = qimg_image_aio_flush(w->img, flags, req_done, r, &err);
        break;
    }
    if (!ok) {
        fail_msg("submit: %s", err->message);
    }
}

/* Wait for at least one completion and run its callback. */
static void work_wait(Work *w)
{
#ifdef QIMG_HAVE_LIBNBD
    if (w->nbd) {
        if (nbd_poll(w->nbd, -1) < 0) {
            fail_msg("nbd_poll: %s", nbd_get_error());
        }
        return;
    }
#endif
    qimg_image_aio_wait(w->img);
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

/* The random requests, 64 in flight; how many were submitted. */
static int run_random(Work *w, int total)
{
    g_autoptr(GRand) rnd = g_rand_new_with_seed(w->seed);
    int submitted = 0;

    while (submitted < total) {
        while (w->in_flight < 64 && submitted < total) {
            submitted += submit_random(w, rnd);
        }
        work_wait(w);
    }
    while (w->in_flight > 0) {
        work_wait(w);
    }
    assert_int_equal(w->done, submitted);
    if (w->failures) {
        fail_msg("seed %u: %d failures, first: %s", w->seed, w->failures, w->why);
    }
    return submitted;
}

/* What the image holds after the workload, read synchronously after a
 * reopen, and qemu-img check. */
static void check_image(Work *w, const char *p, uint64_t size)
{
    g_autoptr(GError) err = NULL;
    QimgImage *img = open_image(p, QIMG_CACHE_WRITEBACK);
    g_autofree uint8_t *all = g_malloc(size);

    assert_true(qimg_image_pread(img, 0, all, size, &err));
    assert_memory_equal(all, w->model, size);
    assert_true(qimg_image_close(img, &err));
    tu_run("qemu-img check -q '%s'", p);
}

static void workload(const Config *c, uint64_t mib, int nreq, bool overlap)
{
    const uint64_t size = env_u64("QIMG_TEST_AIO_MIB", mib) * MiB;
    const int total = (int)env_u64("QIMG_TEST_AIO_REQUESTS", (guint64)nreq);
    g_autofree char *p = new_qcow2("aio.qcow2", size, c->opts);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    int submitted;
    Work w;

    work_init(&w, size, c->cs, (guint32)env_u64("QIMG_TEST_SEED", 42));
    w.overlap = overlap;
    w.img = open_image(p, c->cache);
    ao.threads = 8;
    ao.engine = c->engine;
    assert_true(qimg_image_aio_setup(w.img, &ao, &err));
    submitted = run_random(&w, total);
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
    check_image(&w, p, size);
    work_clear(&w);
}

/* The workload over NBD: nbdkit with the qimg plugin (nbd/qimg-plugin.c,
 * what `qimg nbd` runs) serves the image on a socket pair; its threads
 * call the synchronous API.  discard=unmap, so trims discard. */
static void workload_nbd(const Config *c, uint64_t mib, int nreq, bool overlap)
{
#ifdef QIMG_HAVE_LIBNBD
    const char *plugin = g_getenv("QIMG_NBD_PLUGIN");
    const uint64_t size = env_u64("QIMG_TEST_AIO_MIB", mib) * MiB;
    const int total = (int)env_u64("QIMG_TEST_AIO_REQUESTS", (guint64)nreq);
    g_autofree char *p = new_qcow2("nbd.qcow2", size, c->opts);
    g_autofree char *file = g_strdup_printf("file=%s", p);
    const char *cache = c->cache == QIMG_CACHE_NONE ? "cache=none" : "cache=writeback";
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    Work w;

#ifdef QIMG_NBD_PLUGIN_PATH
    if (!plugin) {
        plugin = QIMG_NBD_PLUGIN_PATH;
    }
#endif
#ifdef QIMG_NBD_PRELOAD
    /* A sanitizer build's plugin: nbdkit gets the runtime preloaded.  Its
     * reports stop nbdkit, which fails the test; nbdkit's own leaks at
     * exit are not ours to report. */
    g_ptr_array_add(argv, g_strdup("env"));
    g_ptr_array_add(argv, g_strdup("LD_PRELOAD=" QIMG_NBD_PRELOAD));
    g_ptr_array_add(argv, g_strdup("ASAN_OPTIONS=detect_leaks=0"));
    g_ptr_array_add(argv, g_strdup("TSAN_OPTIONS=halt_on_error=1"));
#endif
    g_ptr_array_add(argv, g_strdup("nbdkit"));
    g_ptr_array_add(argv, g_strdup("-s"));
    g_ptr_array_add(argv, g_strdup("--exit-with-parent"));
    g_ptr_array_add(argv, g_strdup(plugin));
    g_ptr_array_add(argv, g_strdup(file));
    g_ptr_array_add(argv, g_strdup(cache));
    g_ptr_array_add(argv, g_strdup("discard=unmap"));
    g_ptr_array_add(argv, NULL);

    if (!plugin || !g_file_test(plugin, G_FILE_TEST_EXISTS)) {
        if (tu_in_ci()) {
            fail_msg("the nbdkit plugin is not built (QIMG_NBD_PLUGIN=%s)", plugin);
        }
        tu_skip("the nbdkit plugin is not built (QIMG_NBD_PLUGIN)");
    }
    tu_require_tool("nbdkit");
    work_init(&w, size, c->cs, (guint32)env_u64("QIMG_TEST_SEED", 42));
    w.overlap = overlap;
    w.nbd = nbd_create();
    assert_non_null(w.nbd);
    if (nbd_connect_command(w.nbd, (char **)argv->pdata) < 0) {
        fail_msg("nbdkit %s: %s", plugin, nbd_get_error());
    }
    run_random(&w, total);
    assert_int_equal(nbd_shutdown(w.nbd, 0), 0);
    nbd_close(w.nbd); /* waits for nbdkit, which flushed and closed */
    check_image(&w, p, size);
    work_clear(&w);
#else
    (void)c, (void)mib, (void)nreq, (void)overlap;
    if (tu_in_ci()) {
        fail_msg("built without libnbd");
    }
    tu_skip("built without libnbd");
#endif
}

static void test_workload_64k(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[0], 32, 6000, false);
}

static void test_workload_4k_lazy(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[1], 32, 6000, false);
}

static void test_workload_extl2(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[2], 32, 6000, false);
}

/* The io_uring engine (aio.c invariant 7): O_DIRECT, reads of clusters the
 * fast map knows go to the ring, the rest to the pool. */
static void test_workload_io_uring(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[3], 32, 6000, false);
    workload(&configs[4], 32, 6000, false);
}

/* Every configuration on 2 MiB (32 clusters of 64 KiB): 64 requests in
 * flight meet in the same clusters all the time.  With rule 1 broken as
 * issue 31 found it, each of these fails within its first few thousand
 * requests. */
static void test_workload_contended(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
        workload(&configs[i], 2, 6000, false);
    }
}

/* Rule 3: reads beside writes, zero writes and discards of their own
 * blocks, every configuration on 2 MiB, and over NBD: each byte a read
 * returns was its block's at some moment of the read (rule 2).  This is
 * the run that sees a read beside a discard, or an unmapping zero write,
 * of its cluster while the host cluster is freed and reused. */
static void test_workload_overlap(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
        workload(&configs[i], 2, 6000, true);
    }
}

/* Rule 3 over NBD: nbdkit's threads overlap the same way. */
static void test_workload_overlap_nbd(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload_nbd(&configs[0], 2, 4000, true);
    workload_nbd(&configs[1], 2, 4000, true);
}

/* Through `nbdkit qimg`: the synchronous API from nbdkit's threads, with
 * the page cache and with O_DIRECT, on both sizes. */
static void test_workload_nbd(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload_nbd(&configs[0], 2, 4000, false);
    workload_nbd(&configs[1], 2, 4000, false);
    workload_nbd(&configs[4], 2, 4000, false);
    workload_nbd(&configs[0], 32, 6000, false);
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
        cmocka_unit_test(test_workload_contended),
        cmocka_unit_test(test_workload_overlap),
        cmocka_unit_test(test_workload_overlap_nbd),
        cmocka_unit_test(test_workload_64k),
        cmocka_unit_test(test_workload_4k_lazy),
        cmocka_unit_test(test_workload_extl2),
        cmocka_unit_test(test_workload_io_uring),
        cmocka_unit_test(test_workload_nbd),
    };
    const char *filter = g_getenv("QIMG_TEST_FILTER");
    struct CMUnitTest run[G_N_ELEMENTS(tests)];
    size_t n = 0;

    /* QIMG_TEST_FILTER: comma-separated glob patterns of test names; a
     * test runs if it matches a pattern and no "!pattern" */
    g_auto(GStrv) pats = g_strsplit(filter && *filter ? filter : "*", ",", -1);
    for (size_t i = 0; i < G_N_ELEMENTS(tests); i++) {
        bool in = false, out = false;
        for (char **q = pats; *q; q++) {
            if (**q == '!') {
                out = out || g_pattern_match_simple(*q + 1, tests[i].name);
            } else {
                in = in || g_pattern_match_simple(*q, tests[i].name);
            }
        }
        if (in && !out) {
            run[n++] = tests[i];
        }
    }
    return tu_run_group_tests_("test-aio-workload", "tests", run, n);
}
