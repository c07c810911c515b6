/*
 * tests/test-file-stream.c: which small buffered writes start their
 * writeback early (block/file.c invariant 8, file_stream_note): a stream of
 * appends does, every FILE_STREAM_KICK bytes, up to a tail of
 * FILE_STREAM_LAG; random small writes do not.  The syscall itself only
 * changes timing (test-file-io.c says why it has no test); this is the
 * decision.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_appends),      cmocka_unit_test(test_packed_appends),
        cmocka_unit_test(test_out_of_order), cmocka_unit_test(test_random),
        cmocka_unit_test(test_new_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
