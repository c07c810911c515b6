/*
 * tests/test-error.c: the error convention (block/error.c, block.h
 * invariant 2): blk_error() returns -errno and records a message per
 * thread; blk_error_propagate() turns it into a GError in the QIMG_ERROR
 * domain, whose string is "qimg-error-quark".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "test-util.h"

#include <errno.h>

static void test_domain_name(void **state)
{
    (void)state;
    assert_string_equal(g_quark_to_string(QIMG_ERROR), "qimg-error-quark");
}

static void test_message_and_propagate(void **state)
{
    (void)state;
    g_autoptr(GError) err = NULL;

    assert_int_equal(blk_error(ENOSPC, "no room for %d", 3), -ENOSPC);
    assert_string_equal(blk_error_message(), "no room for 3");
    blk_error_propagate(&err, -ENOSPC, "Could not write");
    assert_true(g_error_matches(err, QIMG_ERROR, ENOSPC));
    assert_string_equal(err->message, "Could not write: no room for 3");
    assert_null(blk_error_message()); /* invariant 1: cleared */
    g_clear_error(&err);
    blk_error_propagate(&err, -EIO, NULL); /* no message: the errno's */
    assert_string_equal(err->message, g_strerror(EIO));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_domain_name),
        cmocka_unit_test(test_message_and_propagate),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
