/*
 * tests/test-bitmap-threads.c: maintained persistent dirty bitmaps through the
 * public API (include/qimg/qimg.h 0.7; qcow2/bitmap-store.c invariants
 * 1-5, qcow2/dirty.c invariants 1-3), as a backup tool and a hypervisor
 * use them, against a byte model of the granules written:
 *
 *  - a random workload of writes, zero writes and discards: the extents of
 *    each enabled bitmap are exactly the granules it touched (read from
 *    memory while open, from the disk after close and reopen), a disabled
 *    bitmap keeps its bits, and qemu-img check is clean;
 *  - qimg_image_bitmaps_store: in use cleared on disk while the image stays
 *    open, the next write marks it again;
 *  - merge: ranges of any alignment set the granules they overlap; a range
 *    past the end, an unknown bitmap and one in use are refused;
 *  - four threads rewriting allocated clusters (the lock-free path) while
 *    the main thread stores again and again: every write is in memory,
 *    in what the next store writes (read by a second handle) and in what
 *    close stores (bitmap-store.c invariant 2); under TSan in make test
 *    (its name has "thread": the Makefile's build-tsan list).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qimg/qimg.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#define MiB (UINT64_C(1) << 20)
#define SIZE (32 * MiB)

static QimgImage *open_image(const char *p, bool read_only)
{
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    QimgImage *img;

    o.read_only = read_only;
    img = qimg_image_open(p, &o, &err);
    if (!img) {
        fail_msg("open %s: %s", p, err->message);
    }
    return img;
}

/* Granule model: one byte per granule of gbits. */
typedef struct Model {
    unsigned gbits;
    uint8_t *g;
} Model;

static void model_set(Model *m, uint64_t off, uint64_t len)
{
    if (!len) {
        return;
    }
    for (uint64_t i = off >> m->gbits; i <= (off + len - 1) >> m->gbits; i++) {
        m->g[i] = 1;
    }
}

static void check_extents(QimgImage *img, const char *name, const Model *m)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(GArray) ext = NULL;
    uint64_t n = SIZE >> m->gbits, pos = 0;
    g_autofree uint8_t *got = g_malloc0(n);

    if (!qimg_image_bitmap_extents(img, name, &ext, &err)) {
        fail_msg("extents of %s: %s", name, err->message);
    }
    for (guint i = 0; i < ext->len; i++) {
        QimgRange *r = &g_array_index(ext, QimgRange, i);
        assert_true(r->offset >= pos); /* ascending */
        assert_int_equal(r->offset % (UINT64_C(1) << m->gbits), 0);
        assert_true(r->length > 0 && r->offset + r->length <= SIZE);
        for (uint64_t o = r->offset; o < r->offset + r->length;
             o += UINT64_C(1) << m->gbits) {
            got[o >> m->gbits] = 1;
        }
        pos = r->offset + r->length + 1; /* adjacent ones are merged */
    }
    for (uint64_t i = 0; i < n; i++) {
        if (got[i] != m->g[i]) {
            fail_msg("bitmap %s: granule %" PRIu64 " is %d, the model says %d", name, i,
                     got[i], m->g[i]);
        }
    }
}

static bool bitmap_in_use(QimgImage *img, const char *name)
{
    g_autoptr(GError) err = NULL;
    QimgInfo *info = qimg_image_get_info(img, &err);
    bool in_use = false;

    assert_non_null(info);
    for (guint i = 0; info->bitmaps && i < info->bitmaps->len; i++) {
        QimgBitmapInfo *b = g_ptr_array_index(info->bitmaps, i);
        if (strcmp(b->name, name) == 0) {
            in_use = b->in_use;
        }
    }
    qimg_info_free(info);
    return in_use;
}

static void test_workload(void **state)
{
    g_autofree char *p = NULL;
    g_autofree uint8_t *buf = g_malloc(4 * MiB);
    Model fine = {.gbits = 12}, coarse = {.gbits = 20}, off = {.gbits = 16};
    g_autoptr(GError) err = NULL;
    GRand *rng = g_rand_new_with_seed(7);
    QimgImage *img;

    TU_REQUIRE_QEMU_IMG();
    p = tu_fresh("bm-api.qcow2");
    tu_run("qemu-img create -q -f qcow2 '%s' %" PRIu64, p, SIZE);
    tu_run("qemu-img bitmap --add -g 4k '%s' fine", p);
    tu_run("qemu-img bitmap --add -g 1M '%s' coarse", p);
    tu_run("qemu-img bitmap --add --disable '%s' off", p);
    fine.g = g_malloc0(SIZE >> fine.gbits);
    coarse.g = g_malloc0(SIZE >> coarse.gbits);
    off.g = g_malloc0(SIZE >> off.gbits);
    memset(buf, 0x3c, 4 * MiB);

    img = open_image(p, false);
    /* bitmap-store.c invariant 1: in use from the open, the disabled one too */
    assert_true(bitmap_in_use(img, "fine"));
    assert_true(bitmap_in_use(img, "off"));
    check_extents(img, "fine", &fine);
    check_extents(img, "off", &off); /* held by this open: not refused */
    for (int i = 0; i < 200; i++) {
        uint64_t o = g_rand_int_range(rng, 0, (gint32)(SIZE / 512)) * UINT64_C(512);
        uint64_t want = g_rand_int_range(rng, 1, 2 * 1024 * 1024);
        uint64_t len = MIN(want, SIZE - o); /* one draw: MIN() evaluates twice */
        gboolean ok;
        switch (g_rand_int_range(rng, 0, 4)) {
        case 0:
            ok = qimg_image_pwrite_zeroes(img, o, len, QIMG_ZERO_MAY_UNMAP, &err);
            break;
        case 1:
            ok = qimg_image_pdiscard(img, o, len, &err);
            break;
        default:
            ok = qimg_image_pwrite(img, o, buf, len, &err);
        }
        if (!ok) {
            fail_msg("request %d: %s", i, err->message);
        }
        model_set(&fine, o, len);
        model_set(&coarse, o, len);
        if (i == 100) {
            assert_true(bitmap_in_use(img, "fine"));
            assert_true(qimg_image_bitmaps_store(img, &err));
            assert_false(bitmap_in_use(img, "fine")); /* invariant 3 */
            assert_false(bitmap_in_use(img, "off"));
            check_extents(img, "fine", &fine);
        }
    }
    assert_true(bitmap_in_use(img, "fine")); /* marked again */
    check_extents(img, "fine", &fine);
    check_extents(img, "coarse", &coarse);
    check_extents(img, "off", &off);

    /* merge into the disabled one: any alignment, the granules overlapped */
    QimgRange r[] = {{.offset = 1000, .length = 1}, {.offset = 5 * MiB - 1, .length = 2}};
    assert_true(qimg_image_bitmap_merge(img, "off", r, G_N_ELEMENTS(r), &err));
    model_set(&off, 1000, 1);
    model_set(&off, 5 * MiB - 1, 2);
    check_extents(img, "off", &off);
    check_extents(img, "fine", &fine); /* stored and reloaded by the merge */
    QimgRange past = {.offset = SIZE - 1, .length = 2};
    assert_false(qimg_image_bitmap_merge(img, "off", &past, 1, &err));
    g_clear_error(&err);
    assert_false(qimg_image_bitmap_merge(img, "nosuch", r, 1, &err));
    assert_string_equal(err->message, "Dirty bitmap 'nosuch' not found");
    g_clear_error(&err);
    GArray *none = NULL;
    assert_false(qimg_image_bitmap_extents(img, "nosuch", &none, &err));
    assert_null(none);
    g_clear_error(&err);
    assert_true(qimg_image_close(img, &err));

    img = open_image(p, true); /* from the disk */
    assert_false(bitmap_in_use(img, "fine"));
    check_extents(img, "fine", &fine);
    check_extents(img, "coarse", &coarse);
    check_extents(img, "off", &off);
    assert_true(qimg_image_bitmaps_store(img, &err)); /* read-only: nothing to do */
    qimg_image_free(img);
    tu_run("qemu-img check -q '%s'", p);

    g_rand_free(rng);
    g_free(fine.g);
    g_free(coarse.g);
    g_free(off.g);
}

typedef struct Writer {
    QimgImage *img;
    unsigned id;
    Model *m; /* granules this thread wrote (its own stripe) */
} Writer;

static void *writer(void *opaque)
{
    Writer *w = opaque;
    uint8_t buf[4096];
    GRand *rng = g_rand_new_with_seed(w->id);
    g_autoptr(GError) err = NULL;

    memset(buf, (int)w->id, sizeof(buf));
    for (int i = 0; i < 400; i++) {
        /* thread id owns every 4th MiB: writes never overlap */
        uint64_t mib =
            (uint64_t)g_rand_int_range(rng, 0, (gint32)(SIZE / MiB / 4)) * 4 + w->id;
        uint64_t o = mib * MiB + (uint64_t)g_rand_int_range(rng, 0, 256) * 4096;
        if (!qimg_image_pwrite(w->img, o, buf, sizeof(buf), &err)) {
            fail_msg("thread %u: %s", w->id, err->message);
        }
        w->m->g[o >> w->m->gbits] = 1;
    }
    g_rand_free(rng);
    return NULL;
}

static void test_store_under_writes(void **state)
{
    g_autofree char *p = NULL;
    g_autoptr(GError) err = NULL;
    Model m = {.gbits = 12};
    pthread_t t[4];
    Writer w[4];
    QimgImage *img;

    TU_REQUIRE_QEMU_IMG();
    p = tu_fresh("bm-threads.qcow2");
    tu_run("qemu-img create -q -f qcow2 '%s' %" PRIu64, p, SIZE);
    tu_run("qemu-io -c 'write -P 1 0 %" PRIu64 "' '%s' >/dev/null", SIZE, p);
    tu_run("qemu-img bitmap --add -g 4k '%s' b", p);
    m.g = g_malloc0(SIZE >> m.gbits);

    img = open_image(p, false);
    for (unsigned i = 0; i < 4; i++) {
        w[i] = (Writer){.img = img, .id = i, .m = &m};
        assert_int_equal(pthread_create(&t[i], NULL, writer, &w[i]), 0);
    }
    for (int i = 0; i < 20; i++) {
        if (!qimg_image_bitmaps_store(img, &err)) {
            fail_msg("store %d: %s", i, err->message);
        }
        g_usleep(2000);
    }
    for (unsigned i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
    }
    check_extents(img, "b", &m);
    /* what the last store wrote, read by a second handle while open */
    assert_true(qimg_image_bitmaps_store(img, &err));
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    o.read_only = true;
    o.force_share = true;
    QimgImage *peek = qimg_image_open(p, &o, &err);
    assert_non_null(peek);
    assert_false(bitmap_in_use(peek, "b"));
    check_extents(peek, "b", &m);
    qimg_image_free(peek);
    assert_true(qimg_image_close(img, &err));
    img = open_image(p, true);
    check_extents(img, "b", &m);
    qimg_image_free(img);
    tu_run("qemu-img check -q '%s'", p);
    g_free(m.g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workload),
        cmocka_unit_test(test_store_under_writes),
    };
    return tu_run_group_tests("test-bitmap-threads", tests);
}
