/*
 * Unit tests for block/protocol.c (protocol.c invariants 1-4) and the
 * format table's probes (api/formats.c invariants 1 and 3).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/block.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <string.h>

/* Invariant 1: names select their protocol by prefix; anything else is a
 * file. */
static void test_protocol_for(void **state)
{
    static const struct {
        const char *name, *proto;
    } cases[] = {
        {"disk.qcow2", "file"},
        {"/abs/disk.raw", "file"},
        {"file:disk.qcow2", "file"},
        {"nbd://localhost/x", "nbd"},
        {"nbd+unix:///x?socket=/s", "nbd"},
        {"nbds://h/x", "nbd"},
        {"nbd:unix:/s:exportname=x", "nbd"},
        {"blkdebug::disk", "blkdebug"},
        {"record:log:disk", "record"},
        {"rbd:pool/image", "rbd"},
        {"rbd:pool/ns/image@snap:conf=/c", "rbd"},
        {"ssh://h/x", "ssh"},
        {"ssh://u@h:22/x?host_key_check=no", "ssh"},
        {"sshish.img", "file"},
        {"rbdish.img", "file"},
        {"nbdish.img", "file"}, /* no prefix of the table */
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        const BlkProtocol *p = blk_protocol_for(cases[i].name, BLK_OPEN_USER_NAME);
        assert_string_equal(p->name, cases[i].proto);
        /* invariant 2: from an image, every name is a file */
        assert_string_equal(blk_protocol_for(cases[i].name, 0)->name, "file");
    }
}

/* Invariants 3 and 4: test-node prefixes come off; what is under them
 * decides whether the name is a path. */
static void test_plain_name(void **state)
{
    assert_string_equal(blk_plain_name("disk"), "disk");
    assert_string_equal(blk_plain_name("blkdebug:event=flush:disk"), "disk");
    assert_string_equal(blk_plain_name("record:l:blkdebug::d.qcow2"), "d.qcow2");
    assert_string_equal(blk_plain_name("record:l:nbd://h/x"), "nbd://h/x");
    assert_string_equal(blk_plain_name("blkdebug:nocolon"), "blkdebug:nocolon");
    assert_true(blk_protocol_is_path("record:l:disk", BLK_OPEN_USER_NAME));
    assert_false(blk_protocol_is_path("record:l:nbd://h/x", BLK_OPEN_USER_NAME));
    assert_false(blk_protocol_is_path("nbd:unix:/s", BLK_OPEN_USER_NAME));
    assert_true(blk_protocol_is_path("nbd:unix:/s", 0));
    assert_false(blk_protocol_is_path("record:l:rbd:p/i", BLK_OPEN_USER_NAME));
    assert_true(blk_protocol_is_path("rbd:p/i", 0));
}

/* Invariant 8: a ':' before the first '/' names a protocol. */
static void test_unknown_protocol(void **state)
{
    static const char *const ok[] = {
        "disk.qcow2", "./a:b",   "/x/a:b",        "file:a:b",          "nbd://h/x",
        "rbd:p/i",    "json:{}", "blkverify:a:b", "blkdebug::d.qcow2", "dir/a:b",
    };
    for (size_t i = 0; i < G_N_ELEMENTS(ok); i++) {
        assert_int_equal(blk_protocol_check_name(ok[i]), 0);
    }
    assert_int_equal(blk_protocol_check_name("a:b"), -ENOENT);
    assert_string_equal(blk_error_message(), "Unknown protocol 'a'");
    blk_error_clear();
    assert_int_equal(blk_protocol_check_name("blkdebug::x y:z"), -ENOENT);
    assert_string_equal(blk_error_message(), "Unknown protocol 'x y'");
    blk_error_clear();
    assert_int_equal(blk_protocol_check_name(":z"), -ENOENT);
    assert_string_equal(blk_error_message(), "Unknown protocol ''");
    blk_error_clear();
    assert_int_equal(blk_protocol_check_name("http://h/x"), -ENOTSUP);
    assert_string_equal(blk_error_message(),
                        "the 'http' protocol is not supported by qimg");
    blk_error_clear();
    /* QEMU's protocol[128]: the name cut at 127 bytes */
    g_autofree char *longname = g_strnfill(200, 'p');
    g_autofree char *name = g_strconcat(longname, ":x", NULL);
    assert_int_equal(blk_protocol_check_name(name), -ENOENT);
    g_autofree char *want = g_strdup_printf("Unknown protocol '%.127s'", longname);
    assert_string_equal(blk_error_message(), want);
    blk_error_clear();
}

/* Invariant 5: creating follows the choice; each protocol refuses the
 * other's options before it touches anything. */
static void test_create_choice(void **state)
{
    g_autofree char *dir = g_dir_make_tmp("qimg-proto-XXXXXX", NULL);
    g_autofree char *f = g_build_filename(dir, "f.raw", NULL);

    blk_error_clear();
    assert_int_equal(blk_create_protocol("rbd:p/i", 1 << 20, BLK_PREALLOC_FULL, 0),
                     -EINVAL);
    assert_string_equal(blk_error_message(), "Invalid parameter 'preallocation'");
    blk_error_clear();
    assert_int_equal(blk_create_protocol(f, 1 << 20, BLK_PREALLOC_OFF, 65536), -EINVAL);
    assert_string_equal(blk_error_message(), "Invalid parameter 'cluster_size'");
    assert_false(g_file_test(f, G_FILE_TEST_EXISTS));
    blk_error_clear();
    assert_int_equal(blk_create_protocol(f, 1 << 20, BLK_PREALLOC_OFF, 0), 0);
    assert_true(g_file_test(f, G_FILE_TEST_EXISTS));
    g_unlink(f);
    g_rmdir(dir);
}

/* Invariant 3: a test-node prefix without its argument is refused, not
 * opened as a file of that name. */
static void test_test_node_needs_arg(void **state)
{
    BlkOpenOptions o = {.read_only = true};

    blk_error_clear();
    assert_null(
        blk_open_protocol("blkdebug:nofile", &o, BLK_ROLE_PROTOCOL, BLK_OPEN_USER_NAME));
    assert_int_equal(blk_error_code(), EINVAL);
    assert_non_null(strstr(blk_error_message(), "expected blkdebug:RULES:FILE"));
    blk_error_clear();
}

static const char *probe(const void *head, size_t n, const char *name)
{
    uint8_t buf[BLK_PROBE_BUF_SIZE] = {0};
    memcpy(buf, head, n);
    const BlkDriver *d = blk_probe_buf(buf, sizeof(buf), name);
    return d ? d->format_name : "(none)";
}

/* formats.c invariant 1: QEMU's magic, QEMU's fallback. */
static void test_probes(void **state)
{
    uint8_t vdi[512] = {0};
    vdi[0x40] = 0x7f, vdi[0x41] = 0x10, vdi[0x42] = 0xda, vdi[0x43] = 0xbe;

    api_register_drivers();
    assert_string_equal(probe("QFI\xfb\0\0\0\3", 8, NULL), "qcow2");
    assert_string_equal(probe("QFI\xfb\0\0\0\1", 8, NULL), "qcow");
    assert_string_equal(probe("conectix", 8, NULL), "vpc");
    assert_string_equal(probe("vhdxfile", 8, NULL), "vhdx");
    assert_string_equal(probe(vdi, sizeof(vdi), NULL), "vdi");
    assert_string_equal(probe("QED", 4, NULL), "qed");
    assert_string_equal(probe("WithoutFreeSpace\2\0\0\0", 20, NULL), "parallels");
    assert_string_equal(probe("LUKS\xba\xbe\0\1", 8, NULL), "luks");
    assert_string_equal(probe("LUKS\xba\xbe\0\2", 8, NULL), "raw");
    assert_string_equal(probe("", 0, "disk.dmg"), "dmg");
    assert_string_equal(probe("", 0, "disk.dmgx"), "raw");
    assert_string_equal(probe("QED!", 4, NULL), "raw");
    assert_string_equal(probe("WithoutFreeSpace\3\0\0\0", 20, NULL), "raw");
    /* the unread entries have nothing but their probe (invariant 2) */
    const BlkDriver *d = blk_find_format("parallels");
    assert_non_null(d);
    assert_non_null(d->unsupported);
    assert_null(d->open);
    assert_int_equal(api_format_usable(d), -ENOTSUP);
    assert_non_null(strstr(blk_error_message(), "'parallels' format (Parallels)"));
    blk_error_clear();
    assert_int_equal(api_format_usable(blk_find_format("raw")), 0);
    /* the formats read since (one builtin[] line each) have their driver */
    assert_int_equal(api_format_usable(blk_find_format("vdi")), 0);
    assert_non_null(blk_find_format("vpc")->open);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_protocol_for),        cmocka_unit_test(test_plain_name),
        cmocka_unit_test(test_unknown_protocol),    cmocka_unit_test(test_create_choice),
        cmocka_unit_test(test_test_node_needs_arg), cmocka_unit_test(test_probes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
