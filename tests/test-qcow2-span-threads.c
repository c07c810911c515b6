/*
 * tests/test-qcow2-span-threads.c: fast requests across clusters
 * (qcow2/fastmap.c invariants 6-8) on an image of 4 KiB clusters, whose L2
 * tables map 2 MiB each, so requests cross cluster and L2-table boundaries.
 *
 * Cluster kinds, by index i:
 *  - hole (i % 16 == 5): never written, reads as zeros: once read, a zero
 *    entry (fastmap.c invariant 9), so a request over one in its middle
 *    stays on the fast path and reads zeros there;
 *  - moving (i % 16 == 11): a mover thread discards it and writes it again
 *    whole (a new host cluster each time, often the one another moving
 *    cluster just freed), every word (i << 32 | version); between the two
 *    readers may learn it as a zero entry, which the write must forget;
 *  - static: all others, rewritten in place by the thread owning its
 *    region, which keeps a byte model of it.
 * Readers check every byte they get: static bytes against the owner's
 * model, holes as zeros, moving clusters as zeros or one whole pattern of
 * their own index -- a fast request at a stale or a neighbour's host
 * offset shows as a wrong index, mixed versions or wrong static bytes.
 * Built under ThreadSanitizer by `make test` (the name says thread).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/block.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <inttypes.h>
#include <string.h>

#define CS UINT64_C(4096)
#define MB(x) ((uint64_t)(x) << 20)
#define SIZE MB(8)
#define NOWNERS 3 /* region t: [1 MiB + 2t MiB, 3 MiB + 2t MiB), across an L2 end */
#define REGION MB(2)

typedef enum { K_STATIC, K_HOLE, K_MOVING } Kind;

static Kind kind(uint64_t cluster)
{
    return cluster % 16 == 5 ? K_HOLE : cluster % 16 == 11 ? K_MOVING : K_STATIC;
}

typedef struct Run {
    BlkNode *img;
    uint8_t *model; /* static bytes of [0, SIZE); written by their owner */
    int ops;
    int stop;     /* atomic: the owners are done */
    int failures; /* atomic */
    char *why;    /* the first failure */
    GMutex why_lock;
} Run;

static void failed(Run *r, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void failed(Run *r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_mutex_lock(&r->why_lock);
    if (r->failures++ == 0) {
        r->why = g_strdup_vprintf(fmt, ap);
    }
    g_mutex_unlock(&r->why_lock);
    va_end(ap);
}

static uint64_t word_at(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static void moving_fill(uint8_t *buf, uint64_t cluster, uint32_t version)
{
    uint64_t v = cluster << 32 | version;
    for (uint64_t i = 0; i < CS; i += 8) {
        memcpy(buf + i, &v, sizeof(v));
    }
}

/* Check [off, off + len) as read in buf; model_ok: static bytes are stable
 * (read by their owner, or after the run). */
static void check(Run *r, uint64_t off, uint64_t len, const uint8_t *buf, bool model_ok)
{
    for (uint64_t pos = off; pos < off + len;) {
        uint64_t c = pos / CS, end = MIN((c + 1) * CS, off + len);
        const uint8_t *p = buf + (pos - off);
        uint64_t n = end - pos;

        switch (kind(c)) {
        case K_STATIC:
            if (model_ok && memcmp(p, r->model + pos, n) != 0) {
                failed(r, "static cluster %" PRIu64 " differs at %" PRIu64 "+%" PRIu64, c,
                       pos, n);
                return;
            }
            break;
        case K_HOLE:
            if (!buf_is_zero(p, n)) {
                failed(r, "hole cluster %" PRIu64 " not zero", c);
                return;
            }
            break;
        case K_MOVING: {
            /* a whole pattern of cluster c (one version), or zeros */
            uint64_t first = word_at(p); /* requests are 512-byte aligned */
            if (first == 0 ? !buf_is_zero(p, n) : first >> 32 != c) {
                failed(r, "moving cluster %" PRIu64 " reads 0x%" PRIx64, c, first);
                return;
            }
            for (uint64_t i = 0; first && i + 8 <= n; i += 8) {
                if (word_at(p + i) != first) {
                    failed(r, "moving cluster %" PRIu64 " mixes versions", c);
                    return;
                }
            }
            break;
        }
        }
        pos = end;
    }
}

/* The single-threaded checks fail the test at once. */
static void assert_clean(Run *r)
{
    if (r->failures) {
        fail_msg("%s", r->why);
    }
}

typedef struct Owner {
    Run *r;
    int id;
} Owner;

/* Rewrites of static spans and reads of any span in the owner's region:
 * 1 to 9 clusters, 512-byte aligned, often across the L2 boundary. */
static gpointer owner_main(gpointer opaque)
{
    Owner *o = opaque;
    Run *r = o->r;
    g_autoptr(GRand) rnd = g_rand_new_with_seed(100 + (guint32)o->id);
    uint64_t base = MB(1) + (uint64_t)o->id * REGION;
    g_autofree uint8_t *buf = g_malloc(10 * CS);

    for (int i = 0; i < r->ops && !g_atomic_int_get(&r->failures); i++) {
        uint64_t off =
            base + (uint64_t)g_rand_int_range(rnd, 0, (gint32)(REGION / 512)) * 512;
        uint64_t len = (uint64_t)g_rand_int_range(rnd, 1, (gint32)(9 * CS / 512)) * 512;
        bool all_static = true;
        int ret;

        if (g_rand_int_range(rnd, 0, 4) == 0) {
            off = MB(2) * (uint64_t)(o->id + 1) - len / 2; /* across the L2 end */
            off -= off % 512;
        }
        len = MIN(len, base + REGION - off);
        for (uint64_t c = off / CS; c <= (off + len - 1) / CS; c++) {
            all_static = all_static && kind(c) == K_STATIC;
        }
        if (all_static && g_rand_boolean(rnd)) {
            tu_fill_random(rnd, buf, len);
            memcpy(r->model + off, buf, len);
            ret = blk_pwrite(r->img, off, buf, len, 0);
        } else {
            ret = blk_pread(r->img, off, buf, len);
            if (ret == 0) {
                check(r, off, len, buf, true);
            }
        }
        if (ret < 0) {
            failed(r, "request at %" PRIu64 "+%" PRIu64 ": %d (%s)", off, len, ret,
                   blk_error_message());
        }
    }
    return NULL;
}

/* The allocating writer, until the owners are done: discard 8 moving
 * clusters, flush (which lets their host clusters be reused: alloc.c
 * invariant 2), and write them again in an order rotated each round, so
 * that each tends to get another's old host cluster (the search is first
 * fit) -- a read at a stale mapping then finds another cluster's index. */
static gpointer mover_main(gpointer opaque)
{
    Run *r = opaque;
    g_autofree uint8_t *buf = g_malloc(CS);
    uint64_t first = MB(1) / CS, end = (MB(1) + NOWNERS * REGION) / CS;
    uint64_t batch[8];
    uint32_t version = 1;
    int ret = 0;

    while (!g_atomic_int_get(&r->stop) && !g_atomic_int_get(&r->failures) && ret == 0) {
        for (uint64_t c = first; c < end && ret == 0;) {
            unsigned n = 0;
            for (; c < end && n < G_N_ELEMENTS(batch); c++) {
                if (kind(c) == K_MOVING) {
                    batch[n++] = c;
                }
            }
            for (unsigned i = 0; i < n && ret == 0; i++) {
                ret = blk_pdiscard(r->img, batch[i] * CS, CS);
            }
            if (ret == 0) {
                ret = blk_flush(r->img);
            }
            for (unsigned i = 0; i < n && ret == 0; i++) {
                uint64_t c2 = batch[(i + version) % n];
                moving_fill(buf, c2, version);
                ret = blk_pwrite(r->img, c2 * CS, buf, CS, 0);
            }
        }
        version++;
    }
    if (ret < 0) {
        failed(r, "mover: %d (%s)", ret, blk_error_message());
    }
    return NULL;
}

static BlkNode *open_rw(const char *path)
{
    BlkOpenOptions o = {.cache = BLK_CACHE_UNSAFE};
    g_autoptr(GError) err = NULL;
    BlkNode *n = api_open_node(path, &o, NULL, &err);
    if (!n) {
        fail_msg("open %s: %s", path, err->message);
    }
    return n;
}

static void write_cluster(Run *r, uint64_t c)
{
    uint8_t mv[CS];

    if (kind(c) == K_STATIC) {
        assert_int_equal(blk_pwrite(r->img, c * CS, r->model + c * CS, CS, 0), 0);
    } else if (kind(c) == K_MOVING) {
        moving_fill(mv, c, 0);
        assert_int_equal(blk_pwrite(r->img, c * CS, mv, CS, 0), 0);
    }
}

/* Fill every static and moving cluster: the first half of the image in
 * order (host-contiguous runs, one data request per fast span), the second
 * in a shuffled order (scattered: a data request per cluster). */
static void populate(Run *r)
{
    g_autoptr(GRand) rnd = g_rand_new_with_seed(7);
    uint64_t n = SIZE / CS, half = n / 2;
    g_autofree uint64_t *order = g_new(uint64_t, n - half);

    for (uint64_t i = 0; i < SIZE; i++) {
        r->model[i] = (uint8_t)g_rand_int(rnd);
    }
    for (uint64_t c = 0; c < half; c++) {
        write_cluster(r, c);
    }
    for (uint64_t i = 0; i < n - half; i++) {
        order[i] = half + i;
    }
    for (uint64_t i = n - half - 1; i > 0; i--) {
        uint64_t j = (uint64_t)g_rand_int_range(rnd, 0, (gint32)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (uint64_t i = 0; i < n - half; i++) {
        write_cluster(r, order[i]);
    }
}

/* Single-threaded: a span read twice (learnt by the slow path, then held
 * whole by the fast one), a rewrite across an L2 end, and a span with a
 * hole in its middle, whose second read is one fast request (the hole a
 * zero entry) with zeros there. */
static void test_span_single(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("span.qcow2");
    Run r = {.model = g_malloc0(SIZE)};

    g_mutex_init(&r.why_lock);
    g_autofree uint8_t *buf = g_malloc(48 * CS);
    Qcow2FastStats a, b;

    tu_run("qemu-img create -q -f qcow2 -o cluster_size=4096 '%s' 8M", p);
    r.img = open_rw(p);
    Qcow2State *s = r.img->opaque;
    populate(&r);
    /* spans of static clusters: contiguous (first half), scattered (second),
     * across the L2 end at 2 MiB and at 6 MiB */
    const uint64_t spans[][2] = {{CS * 16 + 512, 4 * CS},
                                 {MB(2) - 2 * CS, 4 * CS},
                                 {MB(6) - 2 * CS + 1024, 4 * CS - 2048},
                                 {MB(5) + CS * 6, 4 * CS},
                                 {CS * 32, 5 * CS}};
    for (size_t i = 0; i < G_N_ELEMENTS(spans); i++) {
        uint64_t off = spans[i][0], len = spans[i][1];
        for (uint64_t c = off / CS; c <= (off + len - 1) / CS; c++) {
            assert_int_equal(kind(c), K_STATIC);
        }
        assert_int_equal(blk_pread(r.img, off, buf, len), 0); /* learns */
        check(&r, off, len, buf, true);
        assert_clean(&r);
        qcow2_fastmap_stats(s->fastmap, &a);
        memset(buf, 0xee, len);
        assert_int_equal(blk_pread(r.img, off, buf, len), 0);
        qcow2_fastmap_stats(s->fastmap, &b);
        assert_int_equal(b.hits, a.hits + 1); /* one fast request */
        check(&r, off, len, buf, true);
        assert_clean(&r);
        /* rewrites of the same span in place: the first one (re)learns
         * writable entries in the current metadata generation (invariant
         * 4), the second is one fast request */
        for (int round = 0; round < 2; round++) {
            for (uint64_t k = 0; k < len; k++) {
                buf[k] = (uint8_t)(k * 7 + i + (uint64_t)round);
            }
            memcpy(r.model + off, buf, len);
            qcow2_fastmap_stats(s->fastmap, &a);
            assert_int_equal(blk_pwrite(r.img, off, buf, len, 0), 0);
            qcow2_fastmap_stats(s->fastmap, &b);
        }
        assert_int_equal(b.hits, a.hits + 1);
        memset(buf, 0xee, len);
        assert_int_equal(blk_pread(r.img, off, buf, len), 0);
        check(&r, off, len, buf, true);
        assert_clean(&r);
    }
    /* read-ahead (read.c learn_ahead_locked): on a fresh map, a slow read
     * of clusters 768..771 lets the read of 774..777 take the fast path */
    blk_close(r.img);
    r.img = open_rw(p);
    s = r.img->opaque;
    assert_int_equal(blk_pread(r.img, 768 * CS, buf, 4 * CS), 0);
    qcow2_fastmap_stats(s->fastmap, &a);
    assert_int_equal(blk_pread(r.img, 774 * CS, buf, 4 * CS), 0);
    qcow2_fastmap_stats(s->fastmap, &b);
    assert_int_equal(b.hits, a.hits + 1);
    check(&r, 774 * CS, 4 * CS, buf, true);
    assert_clean(&r);
    /* clusters 2..8: hole 5 in the middle; the slow path learns it as a
     * zero entry, the second read holds all 7 clusters (invariant 9) */
    assert_int_equal(blk_pread(r.img, 2 * CS, buf, 7 * CS), 0);
    qcow2_fastmap_stats(s->fastmap, &a);
    memset(buf, 0xee, 7 * CS);
    assert_int_equal(blk_pread(r.img, 2 * CS, buf, 7 * CS), 0);
    qcow2_fastmap_stats(s->fastmap, &b);
    assert_int_equal(b.hits, a.hits + 1);
    assert_int_equal(b.misses, a.misses);
    check(&r, 2 * CS, 7 * CS, buf, true);
    assert_clean(&r);
    /* longer than QCOW2_FAST_SPAN_MAX clusters: the slow path, right data */
    assert_int_equal(blk_pread(r.img, CS * 1024, buf, 40 * CS), 0);
    assert_int_equal(blk_pread(r.img, CS * 1024, buf, 40 * CS), 0);
    check(&r, CS * 1024, 40 * CS, buf, true);
    assert_clean(&r);
    blk_close(r.img);
    tu_run("qemu-img check -q '%s'", p);
    g_free(r.model);
    g_mutex_clear(&r.why_lock);
}

static void test_span_threads(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("span-threads.qcow2");
    Run r = {.model = g_malloc0(SIZE), .ops = tu_long_run() ? 20000 : 1500};
    Owner o[NOWNERS];
    GThread *th[NOWNERS], *mover;
    g_autofree uint8_t *all = g_malloc(SIZE);
    Qcow2FastStats a, b;

    g_mutex_init(&r.why_lock);
    tu_run("qemu-img create -q -f qcow2 -o cluster_size=4096 '%s' 8M", p);
    r.img = open_rw(p);
    Qcow2State *s = r.img->opaque;
    populate(&r);
    blk_close(r.img); /* a fresh map: entries come from the run's requests */
    r.img = open_rw(p);
    s = r.img->opaque;
    qcow2_fastmap_stats(s->fastmap, &a);
    mover = g_thread_new("mover", mover_main, &r);
    for (int i = 0; i < NOWNERS; i++) {
        o[i] = (Owner){.r = &r, .id = i};
        th[i] = g_thread_new("owner", owner_main, &o[i]);
    }
    for (int i = 0; i < NOWNERS; i++) {
        g_thread_join(th[i]);
    }
    g_atomic_int_set(&r.stop, 1);
    g_thread_join(mover);
    assert_clean(&r);
    qcow2_fastmap_stats(s->fastmap, &b);
    assert_true(b.hits > a.hits); /* fast spans ran beside the mover */
    assert_int_equal(blk_pread(r.img, 0, all, SIZE), 0);
    check(&r, 0, SIZE, all, true);
    assert_clean(&r);
    assert_int_equal(blk_flush(r.img), 0);
    blk_close(r.img);
    tu_run("qemu-img check -q '%s'", p);
    g_free(r.why);
    g_free(r.model);
    g_mutex_clear(&r.why_lock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_span_single),
        cmocka_unit_test(test_span_threads),
    };
    return tu_run_group_tests("test-qcow2-span-threads", tests);
}
