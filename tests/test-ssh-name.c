/*
 * Unit tests for block/ssh-name.c: "ssh://" URIs as QEMU 7.2 reads them
 * (ssh-name.c facts 1 and 2), the URIs qimg builds for json: options read
 * back unchanged, and the host key check settings (ssh.h invariant 2).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/ssh.h"

#include <errno.h>
#include <string.h>

static void test_parse(void **state)
{
    BlkSshLocation loc = {0};

    (void)state;
    assert_int_equal(blk_ssh_parse_name("ssh://h/p/x.raw", &loc), 0);
    assert_null(loc.user);
    assert_string_equal(loc.host, "h");
    assert_string_equal(loc.port, "22"); /* fact 1 */
    assert_string_equal(loc.path, "/p/x.raw");
    assert_null(loc.host_key_check);
    assert_int_equal(blk_ssh_parse_name("ssh://u@h:2222/x?a=b&host_key_check=no", &loc),
                     0);
    assert_string_equal(loc.user, "u");
    assert_string_equal(loc.port, "2222");
    assert_string_equal(loc.path, "/x");
    assert_string_equal(loc.host_key_check, "no");
    assert_true(loc.check_in_name);
    assert_int_equal(blk_ssh_parse_name("ssh://h:0/x", &loc), 0);
    assert_string_equal(loc.port, "22"); /* QEMU: port 0 in a URI is none */
    blk_ssh_location_clear(&loc);
}

static void test_parse_errors(void **state)
{
    static const struct {
        const char *name, *msg;
    } cases[] = {
        {"ssh:///x", "missing hostname in URI"}, /* fact 2 */
        {"ssh://h", "missing remote path in URI"},
        {"sftp://h/x", "URI scheme must be 'ssh'"},
        {"ssh://h/x?host_key_check=maybe", "unknown host_key_check setting (maybe)"},
        {"ssh://h:port/x", NULL}, /* not a URI: GLib's message */
    };
    BlkSshLocation loc = {0};

    (void)state;
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        blk_error_clear();
        assert_int_equal(blk_ssh_parse_name(cases[i].name, &loc), -EINVAL);
        if (cases[i].msg) {
            assert_string_equal(blk_error_message(), cases[i].msg);
        } else {
            assert_non_null(blk_error_message());
        }
        blk_ssh_location_clear(&loc);
    }
    blk_error_clear();
}

/* What json: options name reads back from the URI built for it. */
static void test_uri_round_trip(void **state)
{
    BlkSshLocation cases[] = {
        {.user = "u@x:y", .host = "h", .port = "22", .path = "/a b/%c?d#e"},
        {.host = "::1", .port = "2222", .path = "/x"},
        {.host = "h",
         .port = "1",
         .path = "/x",
         .host_key_check = "sha256:ab:cd",
         .check_in_name = true},
    };
    BlkSshLocation back = {0};

    (void)state;
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *uri = blk_ssh_uri(&cases[i]);
        assert_int_equal(blk_ssh_parse_name(uri, &back), 0);
        assert_string_equal(back.user ? back.user : "",
                            cases[i].user ? cases[i].user : "");
        assert_string_equal(back.host, cases[i].host);
        assert_string_equal(back.port, cases[i].port);
        assert_string_equal(back.path, cases[i].path);
        assert_int_equal(back.check_in_name, cases[i].check_in_name);
        if (cases[i].host_key_check) {
            assert_string_equal(back.host_key_check, cases[i].host_key_check);
        }
    }
    blk_ssh_location_clear(&back);
}

/* ssh.h invariant 2 */
static void test_settings(void **state)
{
    (void)state;
    assert_int_equal(blk_ssh_check_setting("no"), 0);
    assert_int_equal(blk_ssh_check_setting("yes"), 0);
    assert_int_equal(blk_ssh_check_setting("md5:00"), 0);
    assert_int_equal(blk_ssh_check_setting("sha1:00"), 0);
    assert_int_equal(blk_ssh_check_setting("sha256:00"), 0);
    assert_int_equal(blk_ssh_check_setting("sha512:00"), -EINVAL);
    assert_int_equal(blk_ssh_check_setting("none"), -EINVAL);
    blk_error_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_uri_round_trip),
        cmocka_unit_test(test_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
