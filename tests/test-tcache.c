/*
 * tests/test-tcache.c: block/tcache.c (invariants 1-3) and block/crc32c.c
 * (invariants 1, 2), the two helpers the foreign-format drivers share.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/crc32c.h"
#include "block/tcache.h"
#include "test-util.h"

#include <errno.h>
#include <string.h>

#define PAGE 64

typedef struct Backing {
    uint8_t table[PAGE * 32]; /* the "file" */
    unsigned reads, writebacks;
    bool fail_reads;
    BlkTCache *c;
} Backing;

static int tread(void *opaque, uint64_t key, void *buf, size_t len)
{
    Backing *b = opaque;

    b->reads++;
    if (b->fail_reads) {
        return -EIO;
    }
    memcpy(buf, b->table + key, len);
    return 0;
}

/* Writes every dirty page back into the table, then cleans them. */
static int twriteback(void *opaque)
{
    Backing *b = opaque;
    g_autoptr(GArray) keys = blk_tcache_dirty_keys(b->c);

    b->writebacks++;
    for (guint i = 0; i < keys->len; i++) {
        uint64_t k = g_array_index(keys, uint64_t, i);
        uint8_t *p = blk_tcache_peek(b->c, k);
        assert_non_null(p);
        if (i > 0) { /* in increasing order */
            assert_true(g_array_index(keys, uint64_t, i - 1) < k);
        }
        memcpy(b->table + k, p, PAGE);
    }
    blk_tcache_clean(b->c);
    return 0;
}

static BlkTCache *make(Backing *b, unsigned max_pages)
{
    BlkTCacheOps ops = {.read = tread, .writeback = twriteback, .opaque = b};

    for (size_t i = 0; i < sizeof(b->table); i++) {
        b->table[i] = (uint8_t)(i / PAGE);
    }
    b->c = blk_tcache_new(PAGE, max_pages, &ops);
    return b->c;
}

/* Invariant 1: never more than max_pages pages; evicted pages are read again. */
static void test_bounded(void **state)
{
    Backing b = {0};
    BlkTCache *c = make(&b, 4);
    uint8_t *p;

    for (unsigned round = 0; round < 3; round++) {
        for (uint64_t k = 0; k < 32; k++) {
            assert_int_equal(blk_tcache_get(c, k * PAGE, &p), 0);
            assert_int_equal(p[0], (uint8_t)k);
        }
    }
    assert_int_equal(b.reads, 96); /* 4 pages cannot hold 32: every get misses */
    unsigned held = 0;
    for (uint64_t k = 0; k < 32; k++) {
        held += blk_tcache_holds(c, k * PAGE);
    }
    assert_int_equal(held, 4);
    /* the most recent pages stay: hits do no I/O */
    assert_int_equal(blk_tcache_get(c, 31 * PAGE, &p), 0);
    assert_int_equal(b.reads, 96);
    blk_tcache_free(c);
}

/* Invariant 2: dirty pages are written back, never dropped, by eviction. */
static void test_dirty_not_dropped(void **state)
{
    Backing b = {0};
    BlkTCache *c = make(&b, 2);
    uint8_t *p;

    assert_int_equal(blk_tcache_get(c, 0, &p), 0);
    p[0] = 0xaa;
    blk_tcache_mark_dirty(c, 0);
    assert_int_equal(blk_tcache_get(c, PAGE, &p), 0);
    p[0] = 0xbb;
    blk_tcache_mark_dirty(c, PAGE);
    assert_true(blk_tcache_has_dirty(c));
    assert_int_equal(b.writebacks, 0);
    /* a third page: both are dirty, so the driver's writeback runs first */
    assert_int_equal(blk_tcache_get(c, 2 * PAGE, &p), 0);
    assert_int_equal(b.writebacks, 1);
    assert_int_equal(b.table[0], 0xaa);
    assert_int_equal(b.table[PAGE], 0xbb);
    assert_false(blk_tcache_has_dirty(c));
    /* a dirty page survives eviction of clean ones */
    assert_int_equal(blk_tcache_get(c, 2 * PAGE, &p), 0);
    p[1] = 0xcc;
    blk_tcache_mark_dirty(c, 2 * PAGE);
    for (uint64_t k = 3; k < 10; k++) {
        assert_int_equal(blk_tcache_get(c, k * PAGE, &p), 0);
    }
    assert_int_equal(b.writebacks, 1);
    assert_non_null(blk_tcache_peek(c, 2 * PAGE));
    assert_int_equal(blk_tcache_peek(c, 2 * PAGE)[1], 0xcc);
    blk_tcache_drop(c);
    assert_null(blk_tcache_peek(c, 2 * PAGE));
    blk_tcache_free(c);
}

/* Invariant 3: a failed read caches nothing. */
static void test_failed_read(void **state)
{
    Backing b = {0};
    BlkTCache *c = make(&b, 2);
    uint8_t *p;

    b.fail_reads = true;
    assert_int_equal(blk_tcache_get(c, PAGE, &p), -EIO);
    assert_false(blk_tcache_holds(c, PAGE));
    b.fail_reads = false;
    assert_int_equal(blk_tcache_get(c, PAGE, &p), 0);
    assert_int_equal(p[0], 1);
    blk_tcache_free(c);
}

/* crc32c.c invariants 1 and 2. */
static void test_crc32c(void **state)
{
    static const char check[] = "123456789";
    uint8_t buf[1000];

    assert_int_equal(blk_crc32c(0, check, 9), 0xe3069283u);
    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (uint8_t)(i * 37 + 11);
    }
    for (size_t cut = 0; cut <= sizeof(buf); cut += 77) {
        uint32_t whole = blk_crc32c(0, buf, sizeof(buf));
        uint32_t part = blk_crc32c(blk_crc32c(0, buf, cut), buf + cut, sizeof(buf) - cut);
        assert_int_equal(whole, part);
    }
    /* 32 bytes of zeros: the iSCSI (RFC 3720) test vector */
    memset(buf, 0, 32);
    assert_int_equal(blk_crc32c(0, buf, 32), 0x8a9136aau);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_dirty_not_dropped),
        cmocka_unit_test(test_failed_read),
        cmocka_unit_test(test_crc32c),
    };
    return tu_run_group_tests("tcache", tests);
}
