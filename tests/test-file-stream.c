/*
 * tests/test-file-stream.c: which small buffered writes start their
 * writeback early (block/file.c invariant 8, file_stream_note): a stream of
 * appends does, every FILE_STREAM_KICK bytes, up to a tail of
 * FILE_STREAM_LAG; random small writes do not.  The syscall itself only
 * changes timing (test-file-io.c says why it has no test); this is the
 * decision.  Also the pending ranges of a block device's writeback thread
 * (file-wb.c invariant 1): every range added is covered by what is taken,
 * touching ones merged, at most FILE_WB_RANGES kept.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/file.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)

/* Appends of len bytes from offset to end; the ranges handed to writeback,
 * checked to follow each other; returns how many. */
static unsigned append(FileStream *st, uint64_t offset, uint64_t end, uint64_t len,
                       uint64_t *first, uint64_t *last)
{
    unsigned kicks = 0;
    uint64_t from, to;

    for (uint64_t pos = offset; pos < end; pos += len) {
        if (file_stream_note(st, pos, len, &from, &to)) {
            assert_true(to > from);
            assert_true(to % 4096 == 0);
            assert_true(to + MIB <= pos + len); /* the tail stays */
            if (kicks == 0) {
                *first = from;
            } else {
                assert_int_equal(from, *last); /* no byte twice, none skipped */
            }
            *last = to;
            kicks++;
        }
    }
    return kicks;
}

/* 64 KiB appends (a compressed convert's incompressible clusters). */
static void test_appends(void **state)
{
    FileStream st = {0};
    uint64_t first = 0, last = 0;

    (void)state;
    /* 9 MiB - 64 KiB: not enough beyond the tail yet */
    assert_int_equal(append(&st, 0, 9 * MIB - 64 * KIB, 64 * KIB, &first, &last), 0);
    assert_int_equal(append(&st, 9 * MIB - 64 * KIB, 9 * MIB, 64 * KIB, &first, &last),
                     1);
    assert_int_equal(first, 0);
    assert_int_equal(last, 8 * MIB);
    /* 64 MiB more: one kick per 8 MiB, contiguous */
    assert_int_equal(append(&st, 9 * MIB, 73 * MIB, 64 * KIB, &first, &last), 8);
    assert_int_equal(last, 72 * MIB);
}

/* Packed compressed clusters: unaligned sizes, each where the last ended. */
static void test_packed_appends(void **state)
{
    FileStream st = {0};
    uint64_t first = 0, last = 0;

    (void)state;
    assert_int_equal(
        append(&st, 5 * MIB + 77, 5 * MIB + 77 + 3001 * 6000, 3001, &first, &last), 2);
    assert_int_equal(first, 5 * MIB + 77);
}

/* Parallel writers finish out of order, behind the end or a little past it
 * (within FILE_STREAM_GAP): still one stream. */
static void test_out_of_order(void **state)
{
    FileStream st = {0};
    uint64_t from = 0, to = 0;
    unsigned kicks = 0;

    (void)state;
    for (uint64_t pos = 0; pos < 64 * MIB; pos += 4 * 64 * KIB) {
        static const unsigned order[] = {2, 0, 3, 1};
        for (unsigned i = 0; i < 4; i++) {
            kicks +=
                file_stream_note(&st, pos + order[i] * 64 * KIB, 64 * KIB, &from, &to);
        }
    }
    assert_int_equal(kicks, 7);
}

/* Random small writes over a large range never grow a stream that far. */
static void test_random(void **state)
{
    FileStream st = {0};
    uint64_t from, to, x = 12345;

    (void)state;
    for (unsigned i = 0; i < 100000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t pos = (x >> 20) % (64 * 1024) * 64 * KIB; /* in 4 GiB */
        assert_false(file_stream_note(&st, pos, 4 * KIB, &from, &to));
    }
}

/* A write far from the stream starts a new one: the old one's bytes are
 * not handed on with it. */
static void test_new_stream(void **state)
{
    FileStream st = {0};
    uint64_t first = 0, last = 0;

    (void)state;
    assert_int_equal(append(&st, 0, 8 * MIB, 64 * KIB, &first, &last), 0);
    assert_int_equal(append(&st, 100 * MIB, 108 * MIB, 64 * KIB, &first, &last), 0);
    assert_int_equal(append(&st, 108 * MIB, 110 * MIB, 64 * KIB, &first, &last), 1);
    assert_int_equal(first, 100 * MIB);
}

/* Is [from, to) covered by one of the n ranges? */
static bool covered(const FileWbRange *r, unsigned n, uint64_t from, uint64_t to)
{
    for (unsigned i = 0; i < n; i++) {
        if (r[i].from <= from && to <= r[i].to) {
            return true;
        }
    }
    return false;
}

static void test_wb_queue(void **state)
{
    FileWbQueue q = {0};
    FileWbRange r[FILE_WB_RANGES];
    uint64_t x = 777;

    (void)state;
    assert_false(file_wb_queue_add(&q, 5 * MIB, 5 * MIB)); /* empty */
    assert_int_equal(q.n, 0);
    /* parallel writers' ranges landing out of order: one range */
    assert_true(file_wb_queue_add(&q, 2 * MIB, 3 * MIB));
    assert_true(file_wb_queue_add(&q, 0, 1 * MIB));
    assert_true(file_wb_queue_add(&q, 1 * MIB, 2 * MIB));
    assert_true(file_wb_queue_add(&q, 512 * KIB, 2560 * KIB));
    assert_int_equal(file_wb_queue_take(&q, r), 1);
    assert_true(r[0].from == 0 && r[0].to == 3 * MIB);
    assert_int_equal(q.n, 0);
    assert_int_equal(file_wb_queue_take(&q, r), 0);

    /* apart: kept apart up to FILE_WB_RANGES, then the nearest grows */
    for (unsigned i = 0; i < FILE_WB_RANGES; i++) {
        assert_true(file_wb_queue_add(&q, i * 10 * MIB, i * 10 * MIB + MIB));
    }
    assert_int_equal(q.n, FILE_WB_RANGES);
    assert_true(file_wb_queue_add(&q, 33 * MIB, 34 * MIB)); /* nearest: [30M, 31M) */
    assert_int_equal(file_wb_queue_take(&q, r), FILE_WB_RANGES);
    assert_true(covered(r, FILE_WB_RANGES, 30 * MIB, 34 * MIB));
    assert_true(covered(r, FILE_WB_RANGES, 20 * MIB, 21 * MIB));
    assert_false(covered(r, FILE_WB_RANGES, 31 * MIB, 40 * MIB) &&
                 covered(r, FILE_WB_RANGES, 40 * MIB, 41 * MIB) &&
                 covered(r, FILE_WB_RANGES, 21 * MIB, 30 * MIB)); /* no more than that */

    /* random ranges: every one added is covered by what is taken */
    FileWbRange added[200];
    for (unsigned i = 0; i < 200; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        added[i].from = (x >> 24) % (1024 * MIB);
        added[i].to = added[i].from + 4 * KIB + (x >> 40) % (2 * MIB);
        assert_true(file_wb_queue_add(&q, added[i].from, added[i].to));
        assert_true(q.n <= FILE_WB_RANGES);
    }
    unsigned n = file_wb_queue_take(&q, r);
    for (unsigned i = 0; i < 200; i++) {
        assert_true(covered(r, n, added[i].from, added[i].to));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_appends),      cmocka_unit_test(test_packed_appends),
        cmocka_unit_test(test_out_of_order), cmocka_unit_test(test_random),
        cmocka_unit_test(test_new_stream),   cmocka_unit_test(test_wb_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
