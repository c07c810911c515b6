/*
 * tests/test-qcow2-fastmap.c: the lock-free request path (qcow2/fastmap.c
 * invariants 1-6), on the map alone and through a real image.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/block.h"
#include "qcow2/qcow2.h"
#include "qimg/snapshot.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define CB 16 /* 64 KiB clusters */
#define CS (UINT64_C(1) << CB)

/* ---- the map alone ---- */

static void test_learn_begin_end(void **state)
{
    Qcow2FastMap *fm = qcow2_fastmap_new(CB, 1024);
    Qcow2FastRef ref;
    Qcow2FastStats st;

    assert_false(qcow2_fastmap_begin(fm, 5 * CS, 4096, false, &ref)); /* nothing learnt */
    qcow2_fastmap_learn_locked(fm, 5 * CS, 77 * CS, false, 0);
    assert_true(qcow2_fastmap_begin(fm, 5 * CS + 100, 4096, false, &ref));
    assert_int_equal(ref.host, 77 * CS + 100);
    qcow2_fastmap_end(fm, &ref);
    /* invariant 6: inside one cluster only */
    assert_false(qcow2_fastmap_begin(fm, 6 * CS - 512, 1024, false, &ref));
    assert_false(qcow2_fastmap_begin(fm, 5 * CS, 0, false, &ref));
    /* a read entry is no write entry, and writes must be switched on */
    assert_false(qcow2_fastmap_begin(fm, 5 * CS, 4096, true, &ref));
    qcow2_fastmap_learn_locked(fm, 5 * CS, 77 * CS, true, qcow2_fastmap_gen(fm));
    assert_false(qcow2_fastmap_begin(fm, 5 * CS, 4096, true, &ref)); /* invariant 3 */
    qcow2_fastmap_set_writes_locked(fm, true);
    assert_true(qcow2_fastmap_begin(fm, 5 * CS, 4096, true, &ref));
    qcow2_fastmap_end(fm, &ref);
    /* a read learn keeps the writable entry (invariant 1) */
    qcow2_fastmap_learn_locked(fm, 5 * CS, 77 * CS, false, 0);
    assert_true(qcow2_fastmap_begin(fm, 5 * CS, 4096, true, &ref));
    qcow2_fastmap_end(fm, &ref);
    /* invariant 4: metadata allocated since the check: writes go slow */
    qcow2_fastmap_meta_changed(fm);
    assert_false(qcow2_fastmap_begin(fm, 5 * CS, 4096, true, &ref));
    assert_true(qcow2_fastmap_begin(fm, 5 * CS, 4096, false, &ref)); /* reads still */
    qcow2_fastmap_end(fm, &ref);
    qcow2_fastmap_stats(fm, &st);
    assert_int_equal(st.hits, 4);
    assert_int_equal(st.misses, 2); /* the early refusals are not lookups */
    qcow2_fastmap_free(fm);
}

static void test_forget_ranges(void **state)
{
    Qcow2FastMap *fm = qcow2_fastmap_new(CB, 64);
    Qcow2FastRef ref;

    for (uint64_t i = 0; i < 32; i++) {
        qcow2_fastmap_learn_locked(fm, i * CS, (100 + i) * CS, false, 0);
    }
    qcow2_fastmap_forget_locked(fm, 3 * CS + 1, 5 * CS); /* clusters 3 and 4 */
    assert_true(qcow2_fastmap_begin(fm, 2 * CS, 1, false, &ref));
    qcow2_fastmap_end(fm, &ref);
    assert_false(qcow2_fastmap_begin(fm, 3 * CS, 1, false, &ref));
    assert_false(qcow2_fastmap_begin(fm, 4 * CS, 1, false, &ref));
    assert_true(qcow2_fastmap_begin(fm, 5 * CS, 1, false, &ref));
    qcow2_fastmap_end(fm, &ref);
    /* a range larger than the map: every slot is scanned */
    qcow2_fastmap_forget_locked(fm, 0, UINT64_C(1) << 62);
    for (uint64_t i = 0; i < 32; i++) {
        assert_false(qcow2_fastmap_begin(fm, i * CS, 1, false, &ref));
    }
    qcow2_fastmap_free(fm);
}

typedef struct Holder {
    Qcow2FastMap *fm;
    Qcow2FastRef ref;
    gint released;
} Holder;

static gpointer release_later(gpointer opaque)
{
    Holder *h = opaque;
    g_usleep(200 * 1000);
    g_atomic_int_set(&h->released, 1);
    qcow2_fastmap_end(h->fm, &h->ref);
    return NULL;
}

/* Invariant 2: forgetting waits for the requests holding the entry, and a
 * learn never replaces a held slot (invariant 1). */
static void test_forget_waits_for_holders(void **state)
{
    Holder h = {.fm = qcow2_fastmap_new(CB, 64)};
    Qcow2FastRef ref;
    GThread *t;

    qcow2_fastmap_learn_locked(h.fm, 0, 9 * CS, false, 0);
    assert_true(qcow2_fastmap_begin(h.fm, 0, 512, false, &h.ref));
    qcow2_fastmap_learn_locked(h.fm, 0, 10 * CS, false, 0); /* held: ignored */
    assert_true(qcow2_fastmap_begin(h.fm, 0, 512, false, &ref));
    assert_int_equal(ref.host, 9 * CS);
    qcow2_fastmap_end(h.fm, &ref);
    t = g_thread_new("holder", release_later, &h);
    qcow2_fastmap_forget_locked(h.fm, 0, CS);
    assert_int_equal(g_atomic_int_get(&h.released), 1); /* it waited */
    assert_false(qcow2_fastmap_begin(h.fm, 0, 512, false, &ref));
    g_thread_join(t);
    qcow2_fastmap_free(h.fm);
}

/* Invariant 9: a zero entry serves reads through begin_span only, is
 * never writable, and is learnt and forgotten as a read entry is. */
static void test_zero_entries(void **state)
{
    Qcow2FastMap *fm = qcow2_fastmap_new(CB, 64);
    Qcow2FastSpan sp;
    Qcow2FastRef ref;

    qcow2_fastmap_set_writes_locked(fm, true);
    qcow2_fastmap_learn_zero_locked(fm, 3 * CS);
    assert_true(qcow2_fastmap_begin_span(fm, 3 * CS + 100, 4096, false, &sp));
    assert_int_equal(sp.n, 1);
    assert_true(sp.ref[0].zero);
    assert_int_equal(sp.ref[0].host, 0);
    /* held: a learn of another mapping is ignored (invariant 1) */
    qcow2_fastmap_learn_locked(fm, 3 * CS, 40 * CS, true, qcow2_fastmap_gen(fm));
    qcow2_fastmap_end_span(fm, &sp);
    assert_true(qcow2_fastmap_begin_span(fm, 3 * CS, 4096, false, &sp));
    assert_true(sp.ref[0].zero);
    qcow2_fastmap_end_span(fm, &sp);
    /* never for the ring's single-cluster requests, never for a write */
    assert_false(qcow2_fastmap_begin(fm, 3 * CS, 4096, false, &ref));
    assert_false(qcow2_fastmap_begin_span(fm, 3 * CS, 4096, true, &sp));
    /* a read across a data cluster and a zero cluster holds both */
    qcow2_fastmap_learn_locked(fm, 2 * CS, 50 * CS, false, 0);
    assert_true(qcow2_fastmap_begin_span(fm, 2 * CS + CS / 2, CS, false, &sp));
    assert_int_equal(sp.n, 2);
    assert_false(sp.ref[0].zero);
    assert_int_equal(sp.ref[0].host, 50 * CS + CS / 2);
    assert_true(sp.ref[1].zero);
    qcow2_fastmap_end_span(fm, &sp);
    /* a write registration forgets it (invariant 2); a data learn replaces it */
    qcow2_fastmap_forget_locked(fm, 3 * CS, 4 * CS);
    assert_false(qcow2_fastmap_begin_span(fm, 3 * CS, 4096, false, &sp));
    qcow2_fastmap_learn_zero_locked(fm, 3 * CS);
    qcow2_fastmap_learn_locked(fm, 3 * CS, 60 * CS, false, 0);
    assert_true(qcow2_fastmap_begin_span(fm, 3 * CS, 4096, false, &sp));
    assert_false(sp.ref[0].zero);
    assert_int_equal(sp.ref[0].host, 60 * CS);
    qcow2_fastmap_end_span(fm, &sp);
    qcow2_fastmap_free(fm);
}

/* ---- through an image ---- */

static BlkNode *open_img(const char *path, bool rw)
{
    BlkOpenOptions o = {.cache = BLK_CACHE_WRITEBACK, .read_only = !rw};
    g_autoptr(GError) err = NULL;
    BlkNode *n = api_open_node(path, &o, NULL, &err);
    if (!n) {
        fail_msg("open %s: %s", path, err->message);
    }
    return n;
}

/* Rewrites of allocated clusters hit the map; a discard forgets them
 * (invariant 2) and the next write allocates again with the right data. */
static void test_image_rewrite_discard(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("fastmap.qcow2");
    uint8_t buf[4096], rd[4096];
    Qcow2FastStats a, b;

    tu_run("qemu-img create -q -f qcow2 '%s' 8M", p);
    BlkNode *img = open_img(p, true);
    Qcow2State *s = img->opaque;
    memset(buf, 1, sizeof(buf));
    for (int i = 0; i < 8; i++) {
        assert_int_equal(blk_pwrite(img, (uint64_t)i * CS, buf, sizeof(buf), 0), 0);
    }
    qcow2_fastmap_stats(s->fastmap, &a);
    memset(buf, 2, sizeof(buf));
    for (int i = 0; i < 8; i++) {
        assert_int_equal(blk_pwrite(img, (uint64_t)i * CS + 8192, buf, sizeof(buf), 0),
                         0);
        assert_int_equal(blk_pread(img, (uint64_t)i * CS + 8192, rd, sizeof(rd)), 0);
        assert_memory_equal(rd, buf, sizeof(buf));
    }
    qcow2_fastmap_stats(s->fastmap, &b);
    assert_true(b.hits - a.hits >= 16); /* every rewrite and read above */
    assert_int_equal(blk_pdiscard(img, 0, CS), 0);
    assert_int_equal(blk_pread(img, 8192, rd, sizeof(rd)), 0);
    memset(buf, 0, sizeof(buf));
    assert_memory_equal(rd, buf, sizeof(buf));
    memset(buf, 3, sizeof(buf));
    assert_int_equal(blk_pwrite(img, 8192, buf, sizeof(buf), 0), 0);
    assert_int_equal(blk_pread(img, 8192, rd, sizeof(rd)), 0);
    assert_memory_equal(rd, buf, sizeof(buf));
    blk_close(img);
    tu_run("qemu-img check -q '%s'", p);
    tu_run("qemu-io -c 'read -P 3 8192 4k' -c 'read -P 2 %" PRIu64 " 4k' '%s' >/dev/null",
           CS + 8192, p);
}

/* A snapshot taken while the image is open clears COPIED everywhere (it
 * registers the whole disk: invariant 2): the writes after it must copy the
 * cluster, never write in place over what the snapshot keeps. */
static void test_image_snapshot_copies(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("fastmap-snap.qcow2");
    QimgSnapshotParams sp = QIMG_SNAPSHOT_PARAMS_INIT;
    g_autoptr(GError) err = NULL;
    uint8_t buf[4096];

    tu_run("qemu-img create -q -f qcow2 '%s' 8M", p);
    QimgImage *img = qimg_image_open(p, NULL, &err);
    assert_non_null(img);
    Qcow2State *s = img->node->opaque;
    Qcow2FastStats a, b;
    memset(buf, 4, sizeof(buf));
    assert_true(qimg_image_pwrite(img, 0, buf, sizeof(buf), &err));
    qcow2_fastmap_stats(s->fastmap, &a);
    assert_true(qimg_image_pwrite(img, 0, buf, sizeof(buf), &err)); /* in place */
    qcow2_fastmap_stats(s->fastmap, &b);
    assert_int_equal(b.hits, a.hits + 1);
    sp.name = "s1";
    g_autofree char *id = qimg_snapshot_create(img, &sp, &err);
    assert_non_null(id);
    memset(buf, 5, sizeof(buf));
    assert_true(qimg_image_pwrite(img, 0, buf, sizeof(buf), &err));
    assert_true(qimg_image_close(img, &err));
    tu_run("qemu-img check -q '%s'", p);
    tu_run("qemu-io -c 'read -P 5 0 4k' '%s' >/dev/null", p);
    tu_run("qemu-img convert -l snapshot.name=s1 -O raw '%s' '%s.s1'", p, p);
    tu_run("qemu-io -f raw -c 'read -P 4 0 4k' '%s.s1' >/dev/null", p);
}

/* Read PATH's [0, len) through img twice and compare both with qemu-img's
 * raw conversion of it; the passes from 'fast' on (0, 1; 2: none) must be
 * served from the map alone. */
static void reads_as_qemu(BlkNode *img, const char *path, uint64_t len, int fast)
{
    g_autofree char *raw = g_strdup_printf("%s.raw", path);
    g_autofree uint8_t *want = NULL;
    g_autofree uint8_t *got = g_malloc(len);
    gsize n = 0;
    Qcow2State *s = img->opaque;
    Qcow2FastStats a, b;

    assert_int_equal(blk_flush(img), 0);
    tu_run("qemu-img convert -U -O raw '%s' '%s'", path, raw);
    assert_true(g_file_get_contents(raw, (char **)&want, &n, NULL));
    assert_true(n >= len);
    for (int pass = 0; pass < 2; pass++) {
        memset(got, 0xAA, len);
        qcow2_fastmap_stats(s->fastmap, &a);
        for (uint64_t off = 0; off < len; off += 4 * CS) { /* across clusters */
            assert_int_equal(
                blk_pread(img, off, got + off, (size_t)MIN(4 * CS, len - off)), 0);
        }
        qcow2_fastmap_stats(s->fastmap, &b);
        assert_memory_equal(got, want, len);
        if (pass >= fast) { /* every request from the map, zeros included */
            assert_int_equal(b.misses, a.misses);
            assert_int_equal(b.hits - a.hits, (len + 4 * CS - 1) / (4 * CS));
        }
    }
}

/* Invariant 9, read.c invariant 7: reads across data, zero clusters and
 * unallocated clusters take the map once learnt and read zeros there; a
 * write, a write of zeros and a discard afterwards are read back. */
static void test_image_zero_reads(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("fastmap-zero.qcow2");
    uint8_t buf[4096];

    tu_run("qemu-img create -q -f qcow2 '%s' 2M", p);
    tu_run(
        "qemu-io -c 'write -P 7 0 96k' -c 'write -z 192k 64k' -c 'write -P 8 320k 64k' "
        "-c 'write -P 9 512k 64k' -c 'write -z 512k 64k' '%s' >/dev/null",
        p);
    BlkNode *img = open_img(p, true);
    reads_as_qemu(img, p, 2 << 20, 1);
    memset(buf, 5, sizeof(buf));
    assert_int_equal(blk_pwrite(img, 128 * 1024 + 4096, buf, sizeof(buf), 0), 0);
    assert_int_equal(blk_pwrite(img, 192 * 1024, buf, sizeof(buf), 0), 0);
    assert_int_equal(blk_pwrite_zeroes(img, 320 * 1024, CS, 0), 0);
    assert_int_equal(blk_pdiscard(img, 0, CS), 0);
    reads_as_qemu(img, p, 2 << 20, 1); /* what the map held was forgotten */
    blk_close(img);
    tu_run("qemu-img check -q '%s'", p);
}

/* Invariant 9: unallocated clusters over a backing file are no zero entries
 * (read twice, they show the backing file's data), nor are clusters only
 * partly zero (extended L2, no backing file: their data stays). */
static void test_image_backing_not_zero(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *b = tu_fresh("fastmap-base.qcow2");
    g_autofree char *p = tu_fresh("fastmap-top.qcow2");
    g_autofree char *x = tu_fresh("fastmap-ext.qcow2");

    tu_run("qemu-img create -q -f qcow2 '%s' 1M", b);
    tu_run("qemu-io -c 'write -P 3 0 1M' '%s' >/dev/null", b);
    tu_run("qemu-img create -q -f qcow2 -b '%s' -F qcow2 '%s' 1M", b, p);
    tu_run("qemu-io -c 'write -P 4 64k 64k' -c 'write -z 256k 64k' '%s' >/dev/null", p);
    BlkNode *img = open_img(p, true);
    reads_as_qemu(img, p, 1 << 20, 2);
    blk_close(img);
    tu_run("qemu-img create -q -f qcow2 -o extended_l2=on '%s' 1M", x);
    tu_run("qemu-io -c 'write -P 4 0 4k' -c 'write -z 64k 32k' -c 'write -P 6 128k 64k' "
           "-c 'write -z 132k 4k' '%s' >/dev/null",
           x);
    img = open_img(x, true);
    reads_as_qemu(img, x, 1 << 20, 2);
    blk_close(img);
}

/* Invariant 1, read.c invariant 5: block status learns the clusters it
 * reports (data and zeros), so the reads that follow it take the map. */
static void test_image_status_learns(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("fastmap-status.qcow2");

    tu_run("qemu-img create -q -f qcow2 '%s' 4M", p);
    tu_run("qemu-io -c 'write -P 7 0 1M' -c 'write -z 1M 512k' -c 'write -P 8 2M 192k' "
           "'%s' >/dev/null",
           p);
    BlkNode *img = open_img(p, true);
    for (uint64_t off = 0; off < (4 << 20);) {
        BlkStatus st;
        assert_int_equal(blk_block_status(img, off, (4 << 20) - off, &st), 0);
        off += st.pnum;
    }
    reads_as_qemu(img, p, 4 << 20, 0);
    blk_close(img);
}

/* read.c learn_status_locked: block status learns nothing where the extent
 * has no L2 table (a map walk over a large empty image learnt every
 * cluster of it), and still learns the clusters of a table's extents. */
static void test_image_status_no_table(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("fastmap-status-sparse.qcow2");
    Qcow2FastStats a, b;

    /* 512-byte clusters: a table covers 32 KiB; data in the first only */
    tu_run("qemu-img create -q -f qcow2 -o cluster_size=512 '%s' 4M", p);
    tu_run("qemu-io -c 'write -P 7 0 4k' -c 'write -z 8k 8k' '%s' >/dev/null", p);
    BlkNode *img = open_img(p, false);
    Qcow2State *s = img->opaque;
    qcow2_fastmap_stats(s->fastmap, &a);
    for (uint64_t off = 0; off < (4 << 20);) {
        BlkStatus st;
        assert_int_equal(blk_block_status(img, off, (4 << 20) - off, &st), 0);
        off += st.pnum;
    }
    qcow2_fastmap_stats(s->fastmap, &b);
    /* the first table's 64 clusters at most (its 4 KiB of data: 8 of
     * them, the zeros 16, the rest unallocated without backing: zeros),
     * not the 8128 of the 127 table-less ranges */
    assert_true(b.learnt - a.learnt >= 8 + 16);
    assert_true(b.learnt - a.learnt <= 64);
    reads_as_qemu(img, p, 32 << 10, 2); /* what it learnt reads right */
    blk_close(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learn_begin_end),
        cmocka_unit_test(test_forget_ranges),
        cmocka_unit_test(test_forget_waits_for_holders),
        cmocka_unit_test(test_image_rewrite_discard),
        cmocka_unit_test(test_image_snapshot_copies),
        cmocka_unit_test(test_zero_entries),
        cmocka_unit_test(test_image_zero_reads),
        cmocka_unit_test(test_image_backing_not_zero),
        cmocka_unit_test(test_image_status_learns),
        cmocka_unit_test(test_image_status_no_table),
    };
    return tu_run_group_tests("test-qcow2-fastmap", tests);
}
