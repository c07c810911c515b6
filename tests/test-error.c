/*
 * tests/test-error.c: the error convention (block/error.c, block.h
 * invariant 2): blk_error() returns -errno and records a message per
 * thread; blk_error_propagate() turns it into a GError in the QIMG_ERROR
 * domain, whose string is "qimg-error-quark"; the first message wins
 * (error.c invariant 2) unless replaced or prefixed on purpose.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/block.h"
#include "qimg/qimg.h"
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

/* error.c invariant 2: a failure while cleaning up keeps the first message */
static void test_first_message_wins(void **state)
{
    (void)state;
    g_autoptr(GError) err = NULL;

    blk_error_clear();
    blk_error(ENOSPC, "first");
    assert_int_equal(blk_error(EIO, "cleanup failed too"), -EIO);
    assert_string_equal(blk_error_message(), "first");
    assert_int_equal(blk_error_code(), ENOSPC);
    blk_error_propagate(&err, 0, NULL); /* 0: the recorded errno */
    assert_true(g_error_matches(err, QIMG_ERROR, ENOSPC));
    assert_string_equal(err->message, "first");
}

static void test_replace_and_prefix(void **state)
{
    (void)state;
    g_autofree char *taken = NULL;

    blk_error_clear();
    blk_error(EINVAL, "low level");
    assert_int_equal(blk_error_replace(EACCES, "reworded %s", "on purpose"), -EACCES);
    assert_string_equal(blk_error_message(), "reworded on purpose");
    assert_int_equal(blk_error_code(), EACCES);
    assert_int_equal(blk_error_prefix(-EACCES, "Could not open '%s'", "x"), -EACCES);
    assert_string_equal(blk_error_message(), "Could not open 'x': reworded on purpose");
    taken = blk_error_take();
    assert_string_equal(taken, "Could not open 'x': reworded on purpose");
    assert_null(blk_error_message());
    assert_int_equal(blk_error_code(), 0);
    /* a prefix with nothing recorded names the errno */
    blk_error_prefix(-ENOENT, "Could not open '%s'", "y");
    g_autofree char *want = g_strdup_printf("Could not open 'y': %s", g_strerror(ENOENT));
    assert_string_equal(blk_error_message(), want);
    blk_error_clear();
}

static gpointer other_thread(gpointer data)
{
    (void)data;
    blk_error(EIO, "other thread");
    return g_strdup(blk_error_message());
}

/* error.c invariant 1: a message belongs to its thread */
static void test_per_thread(void **state)
{
    (void)state;
    g_autofree char *theirs = NULL;

    blk_error_clear();
    blk_error(ENOSPC, "mine");
    theirs = g_thread_join(g_thread_new("err", other_thread, NULL));
    assert_string_equal(theirs, "other thread");
    assert_string_equal(blk_error_message(), "mine");
    blk_error_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_domain_name),
        cmocka_unit_test(test_message_and_propagate),
        cmocka_unit_test(test_first_message_wins),
        cmocka_unit_test(test_replace_and_prefix),
        cmocka_unit_test(test_per_thread),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
