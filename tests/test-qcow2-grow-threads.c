/*
 * tests/test-qcow2-grow-threads.c: the image file grows outside the
 * metadata lock (qcow2/grow.c invariants 1, 4 and 5).
 *
 * A gate node between the qcow2 node and its file holds every growing
 * resize until the test opens it, so the states are reached without
 * timing:
 *  - writer A's first allocation lies past the file: A reserves the growth
 *    and runs it before its data (invariant 1), without the metadata lock
 *    (the test takes it while A is held in the resize: invariant 5);
 *  - writer B, whose clusters lie past the file too, waits for A's growth
 *    and writes its data only after the resize returned (invariant 1);
 *  - writer C, whose clusters the file covers but within one step of its
 *    end, grows the file ahead after its own data write, still without the
 *    lock (invariant 5);
 *  - the data reads back, qemu-img check is clean, and close cuts the
 *    grown tail back (invariant 4);
 *  - the steps grow with the file (invariant 1: file_size / 4 within
 *    [1 MiB, 256 MiB]), so 64 MiB of fresh clusters take few resizes:
 *    each one drains the file's writes in flight.
 * Built under ThreadSanitizer by `make test` (the name says thread).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "api/api.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

typedef struct Gate {
    BlkNode *child;
    GMutex m;
    GCond c;
    bool held;             /* a growing resize waits for the test */
    bool open;             /* the test let it go on */
    bool pass;             /* growing resizes do not wait */
    unsigned seq;          /* requests that reached the file */
    unsigned grown;        /* seq when the last growing resize returned */
    unsigned grows;        /* growing resizes */
    unsigned written[256]; /* seq of the last write whose first byte is i */
} Gate;

static int gate_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    Gate *g = img->opaque;
    return blk_preadv(g->child, offset, qiov, flags);
}

static int gate_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    Gate *g = img->opaque;
    int ret = blk_pwritev(g->child, offset, qiov, flags);
    uint8_t first = 0;

    blk_filter_size_update(img, true);
    if (qiov->niov > 0 && qiov->iov[0].iov_len > 0) {
        first = *(const uint8_t *)qiov->iov[0].iov_base;
    }
    mutex_lock(&g->m);
    g->written[first] = ++g->seq;
    mutex_unlock(&g->m);
    return ret;
}

static int gate_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                              unsigned flags)
{
    Gate *g = img->opaque;
    int ret = blk_pwrite_zeroes(g->child, offset, bytes, flags);
    blk_filter_size_update(img, true);
    return ret;
}

static int gate_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    Gate *g = img->opaque;
    return blk_pdiscard(g->child, offset, bytes);
}

static int gate_flush(BlkNode *img)
{
    Gate *g = img->opaque;
    return blk_flush(g->child);
}

static int gate_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    Gate *g = img->opaque;
    int ret = blk_block_status(g->child, offset, bytes, st);
    if (st->file == g->child) {
        st->file = img;
    }
    return ret;
}

/* A growing resize waits until the test opens the gate. */
static int gate_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                         bool shrink)
{
    Gate *g = img->opaque;
    bool growing = size > g->child->size;
    int ret;

    if (growing) {
        mutex_lock(&g->m);
        g->held = !g->pass;
        g_cond_broadcast(&g->c);
        while (!g->open && !g->pass) {
            mutex_cond_wait(&g->c, &g->m);
        }
        g->held = false;
        g->open = false;
        mutex_unlock(&g->m);
    }
    ret = blk_truncate(g->child, size, exact, prealloc, shrink);
    blk_filter_size_update(img, false);
    if (growing) {
        mutex_lock(&g->m);
        g->grown = ++g->seq;
        g->grows++;
        mutex_unlock(&g->m);
    }
    return ret;
}

static void gate_close(BlkNode *img)
{
    Gate *g = img->opaque;
    blk_close(g->child);
    g_mutex_clear(&g->m);
    g_cond_clear(&g->c);
    g_free(g);
}

static const BlkDriver gate_driver = {
    .format_name = "gate",
    .is_protocol = true,
    .close = gate_close,
    .preadv = gate_preadv,
    .pwritev = gate_pwritev,
    .pwrite_zeroes = gate_pwrite_zeroes,
    .pdiscard = gate_pdiscard,
    .flush = gate_flush,
    .block_status = gate_block_status,
    .truncate = gate_truncate,
};

/* Put a gate between the qcow2 node and its file (grow.c invariant 3: a
 * test node over a regular file grows it). */
static Gate *gate_insert(BlkNode *img)
{
    Gate *g = g_new0(Gate, 1);
    BlkNode *child = img->file;
    BlkNode *node = g_new0(BlkNode, 1);

    g_mutex_init(&g->m);
    g_cond_init(&g->c);
    g->child = child;
    node->drv = &gate_driver;
    node->opaque = g;
    node->filename = g_strdup(child->filename);
    node->cache = child->cache;
    node->size = child->size;
    node->request_alignment = child->request_alignment;
    node->filtered = child;
    img->file = node;
    return g;
}

static void gate_wait_held(Gate *g)
{
    mutex_lock(&g->m);
    while (!g->held) {
        mutex_cond_wait(&g->c, &g->m);
    }
    mutex_unlock(&g->m);
}

static void gate_open(Gate *g)
{
    mutex_lock(&g->m);
    g->open = true;
    g_cond_broadcast(&g->c);
    mutex_unlock(&g->m);
}

static unsigned gate_get(Gate *g, const unsigned *field)
{
    mutex_lock(&g->m);
    unsigned v = *field;
    mutex_unlock(&g->m);
    return v;
}

typedef struct Writer {
    BlkNode *img;
    uint64_t offset, len;
    uint8_t pattern;
    int ret;
} Writer;

static gpointer writer_main(gpointer opaque)
{
    Writer *w = opaque;
    g_autofree uint8_t *buf = g_malloc(w->len);

    memset(buf, w->pattern, w->len);
    w->ret = blk_pwrite(w->img, w->offset, buf, w->len, 0);
    return NULL;
}

static GThread *writer_start(Writer *w)
{
    return g_thread_new("grow-writer", writer_main, w);
}

/* The metadata lock is free (nobody holds it across the held resize). */
static bool lock_free(Qcow2State *s)
{
    if (!qcow2_trylock(s)) {
        return false;
    }
    qcow2_unlock(s);
    return true;
}

static void test_grow_outside_lock(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("grow.qcow2");
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.cache = BLK_CACHE_WRITEBACK};
    Writer a, b = {0}, c;
    GThread *ta, *tb = NULL, *tc;
    uint64_t open_len, len;
    bool free_a, free_c;
    struct stat st;

    (void)state;
    tu_run("qemu-img create -q -f qcow2 '%s' 16M", p);
    assert_int_equal(stat(p, &st), 0);
    open_len = (uint64_t)st.st_size;
    BlkNode *img = api_open_node(p, &o, NULL, &err);
    if (!img) {
        fail_msg("open: %s", err->message);
    }
    Qcow2State *s = img->opaque;
    Gate *g = gate_insert(img);

    /* A: the first fresh cluster lies past the file; A grows it first. */
    a = (Writer){.img = img, .offset = 0, .len = 64 * KiB, .pattern = 0xAA};
    ta = writer_start(&a);
    gate_wait_held(g);
    free_a = lock_free(s);
    if (free_a) {
        /* B: past the file too; it waits for A's growth (invariant 1). */
        b = (Writer){.img = img, .offset = MiB, .len = 64 * KiB, .pattern = 0xBB};
        tb = writer_start(&b);
        for (;;) {
            qcow2_lock(s);
            bool waiting = !waiters_empty(&s->grow_waiters);
            qcow2_unlock(s);
            if (waiting) {
                break;
            }
            g_usleep(1000);
        }
        assert_int_equal(gate_get(g, &g->written[0xBB]), 0);
    }
    gate_open(g);
    g_thread_join(ta);
    assert_true(free_a); /* invariant 5: the resize ran without the lock */
    g_thread_join(tb);
    assert_int_equal(a.ret, 0);
    assert_int_equal(b.ret, 0);
    assert_int_equal(gate_get(g, &g->grows), 1);
    assert_true(gate_get(g, &g->written[0xBB]) > gate_get(g, &g->grown)); /* inv. 1 */
    assert_true(gate_get(g, &g->written[0xAA]) > gate_get(g, &g->grown));

    /* C: covered, but its clusters end within one step (1 MiB here) of the
     * file's end: it grows the file ahead after its own data write. */
    qcow2_lock(s);
    len = s->phys_end - s->file_size - 64 * KiB;
    qcow2_unlock(s);
    c = (Writer){.img = img, .offset = 2 * MiB, .len = len, .pattern = 0xCC};
    tc = writer_start(&c);
    gate_wait_held(g);
    free_c = lock_free(s);
    unsigned c_written = gate_get(g, &g->written[0xCC]);
    gate_open(g);
    g_thread_join(tc);
    assert_int_equal(c.ret, 0);
    assert_true(free_c);
    assert_true(c_written > 0); /* its data went first */
    assert_int_equal(gate_get(g, &g->grows), 2);

    /* Everything reads back; close cuts the tail back (invariant 4). */
    g_autofree uint8_t *buf = g_malloc(len);
    const Writer *ws[] = {&a, &b, &c};
    for (size_t i = 0; i < G_N_ELEMENTS(ws); i++) {
        assert_int_equal(blk_pread(img, ws[i]->offset, buf, ws[i]->len), 0);
        for (uint64_t j = 0; j < ws[i]->len; j++) {
            if (buf[j] != ws[i]->pattern) {
                fail_msg("writer %zu: byte %" PRIu64 " differs", i, j);
            }
        }
    }
    qcow2_lock(s);
    uint64_t file_size = s->file_size;
    assert_true(s->phys_end > file_size);
    qcow2_unlock(s);
    assert_int_equal(blk_flush(img), 0);
    blk_close(img);
    assert_int_equal(stat(p, &st), 0);
    assert_true((uint64_t)st.st_size <= MAX(file_size, open_len));
    g_autofree char *out = NULL;
    if (tu_run_status(&out, "qemu-img check '%s'", p) != 0) {
        fail_msg("qemu-img check: %s", out);
    }
}

/* Invariant 1: the steps grow with the file.  4 KiB at the start of each
 * 64 KiB cluster (the allocating case of bench/io-bench.sh), 64 MiB of fresh
 * clusters: 17 resizes with steps of file_size / 4 (24 with file_size / 8,
 * each one a drain of the writes in flight). */
static void test_grow_steps(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("steps.qcow2");
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.cache = BLK_CACHE_WRITEBACK};
    uint8_t buf[4096];

    (void)state;
    tu_run("qemu-img create -q -f qcow2 '%s' 256M", p);
    BlkNode *img = api_open_node(p, &o, NULL, &err);
    if (!img) {
        fail_msg("open: %s", err->message);
    }
    Gate *g = gate_insert(img);
    g->pass = true;
    memset(buf, 0x5A, sizeof(buf));
    for (uint64_t off = 0; off < 64 * MiB; off += 64 * KiB) {
        assert_int_equal(blk_pwrite(img, off, buf, sizeof(buf), 0), 0);
    }
    unsigned grows = gate_get(g, &g->grows);
    if (grows > 20) {
        fail_msg("64 MiB of fresh clusters took %u resizes (at most 20)", grows);
    }
    assert_int_equal(blk_flush(img), 0);
    blk_close(img);
    g_autofree char *out = NULL;
    if (tu_run_status(&out, "qemu-img check '%s'", p) != 0) {
        fail_msg("qemu-img check: %s", out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_outside_lock),
        cmocka_unit_test(test_grow_steps),
    };
    return tu_run_group_tests("qcow2-grow-threads", tests);
}
