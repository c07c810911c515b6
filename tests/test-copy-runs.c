/*
 * tests/test-copy-runs.c: sparse detection in a data chunk (copy-plan.c
 * fact 2, copy_chunk_runs): runs of 512-byte sectors, zero runs shorter
 * than min_sparse taken into the data run before them when data follows,
 * boundaries moved to the alignment (qemu-img's is_allocated_sectors_min
 * rounding), and a zero run found while a data run is measured handed on
 * as the next run (each sector looked at once).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/copy-plan.h"
#include "test-util.h"

#include <string.h>

#define NSEC 64
#define D COPY_RUN_DATA

/* buf of NSEC sectors, data (0xa5) in the sectors [from, to) of each pair */
static void fill(uint8_t *buf, const unsigned *ranges, size_t n)
{
    memset(buf, 0, NSEC * COPY_SECTOR);
    for (size_t i = 0; i + 1 < n; i += 2) {
        memset(buf + ranges[i] * COPY_SECTOR, 0xa5,
               (ranges[i + 1] - ranges[i]) * COPY_SECTOR);
    }
}

static void check(unsigned min, uint64_t sector, const unsigned *ranges, size_t nr,
                  const uint32_t *want, size_t nwant)
{
    CopyPlan p = {.min_sparse = min, .alignment = min};
    uint8_t *buf = g_malloc(NSEC * COPY_SECTOR);
    uint32_t runs[NSEC];
    size_t n;

    fill(buf, ranges, nr);
    n = copy_chunk_runs(&p, buf, NSEC * COPY_SECTOR, sector, runs);
    assert_int_equal(n, nwant);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(runs[i], want[i]);
    }
    g_free(buf);
}

static void test_long_zero_run_splits(void **state)
{
    (void)state;
    /* data 0-8, zeros 8-24 (>= 8 sectors: its own run, found while the
     * data run was measured), data 24-64 */
    check(8, 0, (const unsigned[]){0, 8, 24, 64}, 4,
          (const uint32_t[]){8 | D, 16, 40 | D}, 3);
}

static void test_short_zero_run_joins(void **state)
{
    (void)state;
    /* zeros 8-11 (3 < 8) between data: one data run */
    check(8, 0, (const unsigned[]){0, 8, 11, 64}, 4, (const uint32_t[]){64 | D}, 1);
}

static void test_alignment(void **state)
{
    (void)state;
    /* data 0-5, zeros 5-31, data 31-64: boundaries on multiples of 8 */
    check(8, 0, (const unsigned[]){0, 5, 31, 64}, 4,
          (const uint32_t[]){8 | D, 16, 40 | D}, 3);
    /* the same bytes at sector 4 of the image: boundaries move with it */
    check(8, 4, (const unsigned[]){0, 5, 31, 64}, 4,
          (const uint32_t[]){12 | D, 16, 36 | D}, 3);
}

static void test_zero_and_trailing(void **state)
{
    (void)state;
    check(8, 0, NULL, 0, (const uint32_t[]){64}, 1);
    /* a zero run at the end after data stays zeros */
    check(8, 0, (const unsigned[]){0, 16}, 2, (const uint32_t[]){16 | D, 48}, 2);
    /* leading zeros, then data to the end */
    check(8, 0, (const unsigned[]){40, 64}, 2, (const uint32_t[]){40, 24 | D}, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_zero_run_splits),
        cmocka_unit_test(test_short_zero_run_joins),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_zero_and_trailing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
