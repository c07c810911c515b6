/* Unit tests for block/iov.c (iov.h invariants 1 and 2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/iov.h"

#include <string.h>

static void test_slice_and_copy(void **state)
{
    char a[5] = "abcde", b[3] = "fgh", c[7] = "ijklmno";
    struct iovec v[3] = {{a, 5}, {b, 3}, {c, 7}};
    BlkIOV q, s;
    char out[16] = {0};

    iov_init_external(&q, v, 3);
    assert_int_equal(q.size, 15); /* invariant 1 */
    iov_slice(&s, &q, 4, 6);      /* "efghij" */
    assert_int_equal(s.size, 6);
    assert_int_equal(s.niov, 3);
    assert_int_equal(iov_to_buf(&s, 0, out, 6), 6);
    assert_memory_equal(out, "efghij", 6);
    assert_int_equal(iov_from_buf(&s, 1, "XYZ", 3), 3);
    assert_memory_equal(b, "XYZ", 3);
    iov_memset(&s, 4, 0, 1);
    assert_int_equal(c[1], 'j');
    assert_int_equal(c[0], 0);
    iov_destroy(&s);

    /* Slice at an exact boundary and of length zero. */
    iov_slice(&s, &q, 5, 3);
    assert_int_equal(s.niov, 1);
    assert_ptr_equal(s.iov[0].iov_base, b);
    iov_destroy(&s);
    iov_slice(&s, &q, 15, 0);
    assert_int_equal(s.size, 0);
    iov_destroy(&s);
}

static void test_slice_many(void **state)
{
    enum { N = 64 };
    char bufs[N][4];
    struct iovec v[N];
    BlkIOV q, s;

    for (int i = 0; i < N; i++) {
        memset(bufs[i], 'a' + i % 26, 4);
        v[i].iov_base = bufs[i];
        v[i].iov_len = 4;
    }
    iov_init_external(&q, v, N);
    iov_slice(&s, &q, 2, 4 * 20);
    assert_true(s.owned); /* invariant 2: more than IOV_INLINE entries */
    assert_int_equal(s.niov, 21);
    char out[80];
    iov_to_buf(&s, 0, out, 80);
    assert_int_equal(out[0], 'a');
    assert_int_equal(out[2], 'b');
    assert_int_equal(out[79], 'a' + 20 % 26);
    iov_destroy(&s);
}

static void test_is_zero(void **state)
{
    static char big[4096 + 13];
    BlkIOV q;

    memset(big, 0, sizeof(big));
    iov_init_buf(&q, big + 1, sizeof(big) - 1);
    assert_true(iov_is_zero(&q, 0, q.size));
    for (size_t pos = 0; pos < sizeof(big) - 1; pos += 97) {
        big[1 + pos] = 1;
        assert_false(iov_is_zero(&q, 0, q.size));
        assert_false(buf_is_zero(big + 1, sizeof(big) - 1));
        assert_true(pos == 0 || iov_is_zero(&q, 0, pos));
        big[1 + pos] = 0;
    }
    assert_true(buf_is_zero(big, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slice_and_copy),
        cmocka_unit_test(test_slice_many),
        cmocka_unit_test(test_is_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
