/*
 * tests/test-aio-workload-fixture.c: the asynchronous workload tests'
 * harness (test-aio-workload-fixture.h says what it owns; "workload rule
 * N" cites its rules).
 */
#include "test-aio-workload-fixture.h"

const char *const op_names[] = {"write", "read", "zero", "discard", "flush"};

void work_init(Work *w, uint64_t size, uint64_t cs, guint32 seed)
{
    *w = (Work){.nblocks = size / BLOCK, .cs = cs, .seed = seed};
    w->model = g_malloc0(size);
    w->owner = g_new0(unsigned, w->nblocks);
    w->ver = g_new0(GArray *, w->nblocks);
    w->hist = g_array_new(FALSE, TRUE, sizeof(Hist));
}

void work_clear(Work *w)
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
Req *req_new(Work *w, int op, uint64_t block, uint64_t nblocks)
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

void req_free(Req *r)
{
    free(r->buf);
    g_free(r);
}

/* Rule 1: take r's blocks, or nothing if one is held (rule 3: a read
 * takes none). */
bool claim(Work *w, const Req *r)
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
void submit(Work *w, Req *r, unsigned flags)
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
void work_wait(Work *w)
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
bool submit_random(Work *w, GRand *rnd)
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
        tu_fill_random(rnd, r->buf, nblocks * BLOCK);
        flags = g_rand_int_range(rnd, 0, 10) == 0 ? QIMG_AIO_FUA : 0;
    } else if (op == OP_ZERO) {
        flags = QIMG_AIO_MAY_UNMAP;
    }
    submit(w, r, flags);
    return true;
}

/* QIMG_TEST_FILTER: comma-separated glob patterns of test names; a test
 * runs if it matches a pattern and no "!pattern" */
int workload_run_filtered(const char *stem, const struct CMUnitTest *tests, size_t ntests)
{
    const char *filter = g_getenv("QIMG_TEST_FILTER");
    g_autofree struct CMUnitTest *run = g_new(struct CMUnitTest, ntests);
    size_t n = 0;

    g_auto(GStrv) pats = g_strsplit(filter && *filter ? filter : "*", ",", -1);
    for (size_t i = 0; i < ntests; i++) {
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
    return tu_run_group_tests_(stem, "tests", run, n);
}
