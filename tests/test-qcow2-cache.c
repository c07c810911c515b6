/*
 * tests/test-qcow2-cache.c: the LRU metadata cache (cache.c invariants
 * 1-5): hits and misses, LRU eviction, pinned entries, read errors, dirty
 * entries and the write-back ordering hooks; cleaning (invariant 6), by
 * hand and by the qcow2 driver's cache-clean-interval timer (clean.c);
 * discarding a range of tables, and the qcow2 L2 cache of slices
 * (l2-cache-entry-size, cluster.c invariant 6).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/block.h"
#include "qcow2/cache.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define TS 64

typedef struct Mock {
    GString *log; /* "r100 w200 f " ... */
    uint64_t fail_read_at;
    int fail_write;
} Mock;

static int mock_read(void *opaque, uint64_t offset, void *buf, size_t len)
{
    Mock *m = opaque;
    g_string_append_printf(m->log, "r%" G_GUINT64_FORMAT " ", offset);
    if (offset == m->fail_read_at) {
        return blk_error(EIO, "mock read error");
    }
    memset(buf, (int)(offset & 0xff), len);
    return 0;
}

static int mock_write(void *opaque, uint64_t offset, const void *buf, size_t len)
{
    Mock *m = opaque;
    g_string_append_printf(m->log, "w%" G_GUINT64_FORMAT " ", offset);
    return m->fail_write ? -EIO : 0;
}

static int mock_flush(void *opaque)
{
    Mock *m = opaque;
    g_string_append(m->log, "f ");
    return 0;
}

static Mock *mock_new(void)
{
    Mock *m = g_new0(Mock, 1);
    m->log = g_string_new(NULL);
    m->fail_read_at = UINT64_MAX;
    return m;
}

static void mock_free(Mock *m)
{
    g_string_free(m->log, TRUE);
    g_free(m);
}

static void get_put(Qcow2Cache *c, uint64_t off)
{
    void *t;
    assert_int_equal(qcow2_cache_get_locked(c, off, &t), 0);
    assert_int_equal(((uint8_t *)t)[TS - 1], off & 0xff);
    qcow2_cache_put_locked(c, &t);
    assert_null(t);
}

static void test_lru(void **state)
{
    Mock *m = mock_new();
    Qcow2CacheOps ops = {.read = mock_read, .opaque = m};
    Qcow2Cache *c = qcow2_cache_new(3, TS, &ops);
    Qcow2CacheStats st;

    get_put(c, 1);
    get_put(c, 2);
    get_put(c, 3);
    get_put(c, 1); /* hit; 2 is now the least recently used */
    get_put(c, 4); /* evicts 2 */
    get_put(c, 3); /* hit */
    get_put(c, 2); /* miss again, evicts 1 */
    get_put(c, 1); /* miss */
    assert_string_equal(m->log->str, "r1 r2 r3 r4 r2 r1 ");
    qcow2_cache_get_stats_locked(c, &st);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 6);
    assert_int_equal(st.evictions, 3);
    assert_int_equal(st.entries, 3);
    qcow2_cache_free(c);
    mock_free(m);
}

static void test_pinned_and_errors(void **state)
{
    Mock *m = mock_new();
    Qcow2CacheOps ops = {.read = mock_read, .opaque = m};
    Qcow2Cache *c = qcow2_cache_new(2, TS, &ops);
    void *a, *b, *x;

    assert_int_equal(qcow2_cache_get_locked(c, 10, &a), 0);
    assert_int_equal(qcow2_cache_get_locked(c, 20, &b), 0);
    /* both pinned: no room (invariant 2) */
    assert_int_equal(qcow2_cache_get_locked(c, 30, &x), -ENOSPC);
    /* the same table twice: one entry, two references */
    assert_int_equal(qcow2_cache_get_locked(c, 10, &x), 0);
    assert_ptr_equal(x, a);
    qcow2_cache_put_locked(c, &x);
    qcow2_cache_put_locked(c, &a);
    /* a read error leaves nothing behind and is retried next time */
    m->fail_read_at = 30;
    assert_int_equal(qcow2_cache_get_locked(c, 30, &x), -EIO);
    m->fail_read_at = UINT64_MAX;
    assert_int_equal(qcow2_cache_get_locked(c, 30, &x), 0);
    qcow2_cache_put_locked(c, &x);
    /* 20 was pinned throughout, so 10 was the victim */
    assert_int_equal(qcow2_cache_get_locked(c, 10, &x), 0);
    qcow2_cache_put_locked(c, &x);
    assert_string_equal(m->log->str, "r10 r20 r30 r30 r10 ");
    qcow2_cache_put_locked(c, &b);
    /* discard forgets a table */
    qcow2_cache_discard_locked(c, 10);
    get_put(c, 10);
    assert_string_equal(m->log->str, "r10 r20 r30 r30 r10 r10 ");
    qcow2_cache_free(c);
    mock_free(m);
}

static void test_dirty_without_writeback(void **state)
{
    Mock *m = mock_new();
    Qcow2CacheOps ops = {.read = mock_read, .opaque = m};
    Qcow2Cache *c = qcow2_cache_new(1, TS, &ops);
    void *t;

    assert_int_equal(qcow2_cache_get_locked(c, 1, &t), 0);
    qcow2_cache_mark_dirty_locked(c, t);
    qcow2_cache_put_locked(c, &t);
    /* invariant 3: the only entry is dirty and cannot be written back */
    assert_int_equal(qcow2_cache_get_locked(c, 2, &t), -ENOSPC);
    assert_int_equal(qcow2_cache_flush_locked(c), -EROFS);
    blk_error_clear();
    qcow2_cache_free(c);
    mock_free(m);
}

static void test_writeback_and_ordering(void **state)
{
    Mock *m = mock_new();
    Qcow2CacheOps ops = {
        .read = mock_read, .write = mock_write, .flush = mock_flush, .opaque = m};
    Qcow2Cache *l2 = qcow2_cache_new(2, TS, &ops);
    Qcow2Cache *rc = qcow2_cache_new(2, TS, &ops);
    void *t;

    /* a dirty refcount block and a dirty L2 table that depends on it */
    assert_int_equal(qcow2_cache_get_locked(rc, 100, &t), 0);
    qcow2_cache_mark_dirty_locked(rc, t);
    qcow2_cache_put_locked(rc, &t);
    assert_int_equal(qcow2_cache_get_locked(l2, 200, &t), 0);
    qcow2_cache_mark_dirty_locked(l2, t);
    qcow2_cache_put_locked(l2, &t);
    assert_int_equal(qcow2_cache_set_dependency_locked(l2, rc), 0);
    qcow2_cache_depends_on_flush_locked(l2);
    g_string_truncate(m->log, 0);
    /* invariant 4: refcount block, then file flush, then the L2 table */
    assert_int_equal(qcow2_cache_flush_locked(l2), 0);
    assert_string_equal(m->log->str, "w100 f w200 ");
    /* clean now: flushing again writes nothing */
    g_string_truncate(m->log, 0);
    assert_int_equal(qcow2_cache_flush_locked(l2), 0);
    assert_int_equal(qcow2_cache_flush_locked(rc), 0);
    assert_string_equal(m->log->str, "");

    /* eviction of a dirty entry writes it back first */
    assert_int_equal(qcow2_cache_get_locked(l2, 300, &t), 0);
    qcow2_cache_mark_dirty_locked(l2, t);
    qcow2_cache_put_locked(l2, &t);
    get_put(l2, 200); /* 300 is now the LRU one */
    g_string_truncate(m->log, 0);
    get_put(l2, 400);
    assert_string_equal(m->log->str, "w300 r400 ");

    /* a failed write-back keeps the entry dirty and cached */
    assert_int_equal(qcow2_cache_get_locked(l2, 400, &t), 0);
    qcow2_cache_mark_dirty_locked(l2, t);
    qcow2_cache_put_locked(l2, &t);
    m->fail_write = 1;
    assert_int_equal(qcow2_cache_flush_locked(l2), -EIO);
    m->fail_write = 0;
    g_string_truncate(m->log, 0);
    assert_int_equal(qcow2_cache_flush_locked(l2), 0);
    assert_string_equal(m->log->str, "w400 ");

    /* no cycles: making rc depend on l2 first settles l2's own edge; the
     * refcount block is made durable (flushed) before the L2 table that
     * depends on it is written (invariant 4: written is not durable) */
    assert_int_equal(qcow2_cache_get_locked(rc, 100, &t), 0);
    qcow2_cache_mark_dirty_locked(rc, t);
    qcow2_cache_put_locked(rc, &t);
    assert_int_equal(qcow2_cache_set_dependency_locked(l2, rc), 0);
    assert_int_equal(qcow2_cache_get_locked(l2, 400, &t), 0);
    qcow2_cache_mark_dirty_locked(l2, t);
    qcow2_cache_put_locked(l2, &t);
    g_string_truncate(m->log, 0);
    assert_int_equal(qcow2_cache_set_dependency_locked(rc, l2), 0);
    assert_string_equal(m->log->str, "w100 f w400 ");

    qcow2_cache_free(l2);
    qcow2_cache_free(rc);
    mock_free(m);
}

/* Invariant 6: what nobody took since the last cleaning goes, unless it
 * is referenced or dirty; a later get reads it again. */
static void test_clean_unused(void **state)
{
    Mock *m = mock_new();
    Qcow2CacheOps ops = {.read = mock_read, .write = mock_write, .opaque = m};
    Qcow2Cache *c = qcow2_cache_new(5, TS, &ops);
    Qcow2CacheStats st;
    void *held, *t;

    for (uint64_t off = 1; off <= 4; off++) {
        get_put(c, off);
    }
    assert_int_equal(qcow2_cache_clean_unused_locked(c), 0); /* all just used */
    get_put(c, 1);
    assert_int_equal(qcow2_cache_get_locked(c, 2, &held), 0);
    assert_int_equal(qcow2_cache_get_locked(c, 3, &t), 0);
    qcow2_cache_mark_dirty_locked(c, t);
    qcow2_cache_put_locked(c, &t);
    assert_int_equal(qcow2_cache_clean_unused_locked(c), 1); /* 4 */
    assert_false(qcow2_cache_holds_locked(c, 4));
    assert_int_equal(qcow2_cache_clean_unused_locked(c), 1); /* 1; 2 held, 3 dirty */
    qcow2_cache_get_stats_locked(c, &st);
    assert_int_equal(st.entries, 2);
    assert_true(qcow2_cache_holds_locked(c, 2) && qcow2_cache_holds_locked(c, 3));
    qcow2_cache_put_locked(c, &held);
    assert_int_equal(qcow2_cache_flush_locked(c), 0);
    assert_int_equal(qcow2_cache_clean_unused_locked(c), 1); /* 3, written back */
    assert_int_equal(qcow2_cache_clean_unused_locked(c), 1); /* 2, used until put */
    g_string_truncate(m->log, 0);
    get_put(c, 1);
    get_put(c, 3);
    assert_string_equal(m->log->str, "r1 r3 ");
    qcow2_cache_free(c);
    mock_free(m);
}

/* discard_range drops every unreferenced table in the range, by lookups
 * (few tables) or by a walk of the entries (more tables than entries). */
static void test_discard_range(void **state)
{
    Mock *m = mock_new();
    Qcow2CacheOps ops = {.read = mock_read, .opaque = m};
    Qcow2Cache *c = qcow2_cache_new(4, TS, &ops);
    void *held;

    for (uint64_t off = 0; off < 4 * TS; off += TS) {
        get_put(c, off);
    }
    assert_int_equal(qcow2_cache_get_locked(c, 2 * TS, &held), 0);
    qcow2_cache_discard_range_locked(c, TS, 2 * TS); /* 2 tables: lookups */
    assert_true(qcow2_cache_holds_locked(c, 0));
    assert_false(qcow2_cache_holds_locked(c, TS));
    assert_true(qcow2_cache_holds_locked(c, 2 * TS)); /* referenced: kept */
    assert_true(qcow2_cache_holds_locked(c, 3 * TS));
    qcow2_cache_discard_range_locked(c, TS, 100 * TS); /* 100 tables: the walk */
    assert_true(qcow2_cache_holds_locked(c, 0));
    assert_true(qcow2_cache_holds_locked(c, 2 * TS));
    assert_false(qcow2_cache_holds_locked(c, 3 * TS));
    qcow2_cache_put_locked(c, &held);
    qcow2_cache_discard_range_locked(c, 0, 100 * TS);
    assert_false(qcow2_cache_holds_locked(c, 0) || qcow2_cache_holds_locked(c, 2 * TS));
    g_string_truncate(m->log, 0);
    get_put(c, 2 * TS);
    assert_string_equal(m->log->str, "r128 ");
    qcow2_cache_free(c);
    mock_free(m);
}

static void l2_stats(BlkNode *img, Qcow2CacheStats *st)
{
    Qcow2State *s = img->opaque;

    qcow2_lock(s);
    qcow2_cache_get_stats_locked(s->l2_cache, st);
    qcow2_unlock(s);
}

/* cluster.c invariant 6: with l2-cache-entry-size the L2 cache holds
 * slices of one table: three slices of one table do not fit a cache of
 * two slices (one table would); writes through a slice reach the image
 * (qemu-io reads them, qemu-img check is clean). */
static void test_l2_slices(void **state)
{
    static const struct {
        const char *create;
        uint64_t entry, l2e;
    } cases[] = {{"cluster_size=64k", 4096, 8},
                 {"cluster_size=64k,extended_l2=on", 512, 16},
                 {"cluster_size=4k", 512, 8}};

    for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
        g_autofree char *p = tu_fresh("slices.qcow2");
        g_autoptr(GError) err = NULL;
        uint64_t slice_entries = cases[k].entry / cases[k].l2e;
        uint64_t cs = strstr(cases[k].create, "64k") ? 65536 : 4096;
        uint64_t span = slice_entries * cs; /* guest bytes one slice maps */
        BlkOpenOptions o = {.l2_cache_entry_size_set = true,
                            .l2_cache_entry_size = cases[k].entry,
                            .l2_cache_size_set = true,
                            .l2_cache_size = 2 * cases[k].entry};
        Qcow2CacheStats st;
        uint8_t buf[512];

        tu_require_tool("qemu-io");
        tu_run("qemu-img create -q -f qcow2 -o %s '%s' 1G", cases[k].create, p);
        tu_run("qemu-io -c 'write -P 1 0 512' -c 'write -P 2 %" PRIu64 " 512' "
               "-c 'write -P 3 %" PRIu64 " 512' '%s' >/dev/null",
               span, 2 * span, p);
        BlkNode *img = api_open_node(p, &o, NULL, &err);
        if (!img) {
            fail_msg("open: %s", err->message);
        }
        assert_int_equal(((Qcow2State *)img->opaque)->l2_slice_size, slice_entries);
        for (uint64_t i = 0; i < 3; i++) {
            assert_int_equal(blk_pread(img, i * span, buf, sizeof(buf)), 0);
            assert_int_equal(buf[0], i + 1);
            assert_int_equal(buf[511], i + 1);
        }
        l2_stats(img, &st);
        assert_int_equal(st.misses, 3);
        assert_int_equal(st.evictions, 1);
        assert_int_equal(st.entries, 2);
        /* a new cluster in slice 3, and rewrites in slices 0 and 1 */
        memset(buf, 0x44, sizeof(buf));
        assert_int_equal(blk_pwrite(img, 3 * span + cs, buf, sizeof(buf), 0), 0);
        memset(buf, 0x55, sizeof(buf));
        assert_int_equal(blk_pwrite(img, 512, buf, sizeof(buf), 0), 0);
        assert_int_equal(blk_pwrite(img, span + 5 * cs, buf, sizeof(buf), 0), 0);
        assert_int_equal(blk_flush(img), 0);
        blk_close(img);
        tu_run("qemu-io -c 'read -P 1 0 512' -c 'read -P 0x55 512 512' "
               "-c 'read -P 2 %" PRIu64 " 512' -c 'read -P 3 %" PRIu64 " 512' "
               "-c 'read -P 0x44 %" PRIu64 " 512' -c 'read -P 0x55 %" PRIu64 " 512' "
               "'%s' | { ! grep -q Pattern; }",
               span, 2 * span, 3 * span + cs, span + 5 * cs, p);
        tu_run("qemu-img check -q '%s'", p);
    }
}

static unsigned l2_entries(BlkNode *img)
{
    Qcow2State *s = img->opaque;
    Qcow2CacheStats st;

    qcow2_lock(s);
    qcow2_cache_get_stats_locked(s->l2_cache, &st);
    qcow2_unlock(s);
    return st.entries;
}

/* clean.c invariants 1-3: cache-clean-interval=1 empties the L2 cache of
 * an idle image; with 0 nothing runs.  No timing is asserted: the wait
 * for the timer is bounded only so that a missing timer fails. */
static void test_clean_timer(void **state)
{
    g_autofree char *p = tu_fresh("clean.qcow2");
    g_autoptr(GError) err = NULL;
    uint8_t buf[512];

    tu_require_tool("qemu-io");
    tu_run("qemu-img create -q -f qcow2 '%s' 1G", p);
    tu_run("qemu-io -c 'write 0 64k' -c 'write 512M 64k' '%s' >/dev/null", p);
    for (int interval = 0; interval <= 1; interval++) {
        BlkOpenOptions o = {.cache_clean_interval_set = true,
                            .cache_clean_interval = (uint64_t)interval};
        BlkNode *img = api_open_node(p, &o, NULL, &err);
        unsigned n = 0;

        if (!img) {
            fail_msg("open: %s", err->message);
        }
        assert_int_equal(blk_pread(img, 0, buf, sizeof(buf)), 0);
        assert_int_equal(blk_pread(img, 512 << 20, buf, sizeof(buf)), 0);
        assert_int_equal(l2_entries(img), 2);
        if (interval == 0) {
            assert_null(((Qcow2State *)img->opaque)->clean);
        }
        for (int i = 0; interval && i < 300 && (n = l2_entries(img)) != 0; i++) {
            g_usleep(100 * 1000);
        }
        assert_int_equal(n, 0);
        assert_int_equal(blk_pread(img, 512 << 20, buf, sizeof(buf)), 0);
        assert_int_equal(buf[0], 0xcd); /* qemu-io's pattern, read again */
        if (interval == 0) {
            assert_int_equal(l2_entries(img), 2);
        }
        blk_close(img);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru),
        cmocka_unit_test(test_pinned_and_errors),
        cmocka_unit_test(test_dirty_without_writeback),
        cmocka_unit_test(test_writeback_and_ordering),
        cmocka_unit_test(test_clean_unused),
        cmocka_unit_test(test_clean_timer),
        cmocka_unit_test(test_discard_range),
        cmocka_unit_test(test_l2_slices),
    };
    return tu_run_group_tests("qcow2-cache", tests);
}
