/*
 * tests/test-rbd-name.c: block/rbd-name.c and the RBD fields of
 * api/json-name.c, without a cluster: QEMU's "rbd:" grammar (rbd-name.c
 * invariants 1, 2), names built back round-trip (invariant 3), QEMU's
 * json: name of the node (invariant 4: its key order is QEMU's QDict
 * order, recomputed here from QEMU's hash), json:/--image-opts fields
 * (json-name.c invariant 11), and that a backing name read from an image
 * never names rbd (rbd.h invariant 1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/rbd.h"
#include "test-util.h"

#include <errno.h>
#include <string.h>

static const char *setting(const BlkRbdLocation *loc, guint i)
{
    return loc->settings && i < loc->settings->len ? loc->settings->pdata[i] : NULL;
}

/* Invariant 2: the fields QEMU finds in a name. */
static void test_parse(void **state)
{
    BlkRbdLocation loc;
    (void)state;

    assert_int_equal(blk_rbd_parse_name("rbd:pool/img", &loc), 0);
    assert_string_equal(loc.pool, "pool");
    assert_string_equal(loc.image, "img");
    assert_string_equal(loc.namespace, "");
    assert_null(loc.snapshot);
    assert_null(loc.conf);
    assert_null(loc.user);
    assert_null(loc.settings);
    blk_rbd_location_clear(&loc);

    assert_int_equal(blk_rbd_parse_name("rbd:p/ns/img@snap:conf=/etc/c.conf:id=u1:"
                                        "rados_osd_op_timeout=5:id=u2:a=b",
                                        &loc),
                     0);
    assert_string_equal(loc.pool, "p");
    assert_string_equal(loc.namespace, "ns");
    assert_string_equal(loc.image, "img");
    assert_string_equal(loc.snapshot, "snap");
    assert_string_equal(loc.conf, "/etc/c.conf");
    assert_string_equal(loc.user, "u2"); /* the last id= counts */
    assert_string_equal(setting(&loc, 0), "rados_osd_op_timeout");
    assert_string_equal(setting(&loc, 1), "5");
    assert_string_equal(setting(&loc, 2), "a");
    assert_string_equal(setting(&loc, 3), "b");
    assert_null(setting(&loc, 4));
    blk_rbd_location_clear(&loc);

    /* invariant 1: escapes keep separators in a field */
    assert_int_equal(blk_rbd_parse_name("rbd:p\\/q/we\\:ird\\@na\\/me\\\\x", &loc), 0);
    assert_string_equal(loc.pool, "p/q");
    assert_string_equal(loc.image, "we:ird@na/me\\x");
    assert_string_equal(loc.namespace, "");
    blk_rbd_location_clear(&loc);

    /* QEMU's quirk: an '@' anywhere after the pool ends the image there,
     * and a '/' before it then splits off a namespace */
    assert_int_equal(blk_rbd_parse_name("rbd:p/img:conf=/a@b", &loc), 0);
    assert_string_equal(loc.namespace, "img:conf=");
    assert_string_equal(loc.image, "a");
    assert_string_equal(loc.snapshot, "b");
    assert_null(loc.conf);
    blk_rbd_location_clear(&loc);
}

static void test_parse_errors(void **state)
{
    static const struct {
        const char *name, *msg;
    } bad[] = {
        {"rbd:pool", "Pool name is required"},
        {"rbd:", "Pool name is required"},
        {"rbd:p/i:foo", "conf option foo has no value"},
        {"rbd:p/i:conf=x:bar", "conf option bar has no value"},
        {"file:p/i", "File name must start with 'rbd:'"},
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        BlkRbdLocation loc;
        blk_error_clear();
        assert_int_equal(blk_rbd_parse_name(bad[i].name, &loc), -EINVAL);
        assert_string_equal(blk_error_message(), bad[i].msg);
        blk_rbd_location_clear(&loc);
    }
    blk_error_clear();
}

/* Invariant 3: build, parse, build again. */
static void test_round_trip(void **state)
{
    static const char *const names[] = {
        "rbd:pool/img",
        "rbd:p\\:o\\@o\\/l/n\\=s/i\\\\m@s\\:n:conf=/a\\:b:id=x\\@y:k\\=1=v\\:2",
        "rbd:p/ns/i@s:client_mount_timeout=3",
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
        BlkRbdLocation a, b;
        assert_int_equal(blk_rbd_parse_name(names[i], &a), 0);
        g_autofree char *built = blk_rbd_name(&a);
        assert_int_equal(blk_rbd_parse_name(built, &b), 0);
        assert_string_equal(a.pool, b.pool);
        assert_string_equal(a.namespace, b.namespace);
        assert_string_equal(a.image, b.image);
        assert_string_equal(a.snapshot ? a.snapshot : "-", b.snapshot ? b.snapshot : "-");
        assert_string_equal(a.conf ? a.conf : "-", b.conf ? b.conf : "-");
        assert_string_equal(a.user ? a.user : "-", b.user ? b.user : "-");
        assert_int_equal(a.settings ? a.settings->len : 0,
                         b.settings ? b.settings->len : 0);
        for (guint k = 0; a.settings && k < a.settings->len; k++) {
            assert_string_equal(setting(&a, k), setting(&b, k));
        }
        g_autofree char *again = blk_rbd_name(&b);
        assert_string_equal(built, again);
        blk_rbd_location_clear(&a);
        blk_rbd_location_clear(&b);
    }
}

/* QEMU's QDict bucket of a key (its tdb_hash modulo 512 buckets). */
static unsigned qdict_bucket(const char *key)
{
    uint32_t v = 0x238F13AFu * (uint32_t)strlen(key);

    for (size_t i = 0; key[i]; i++) {
        v += (uint32_t)(unsigned char)key[i] << (i * 5 % 24);
    }
    return (1103515243u * v + 12345u) % 512u;
}

/* Invariant 4: QEMU's name, keys in its QDict order. */
static void test_json_name(void **state)
{
    static const char *const order[] = {"pool",   "image",     "conf", "snapshot",
                                        "driver", "namespace", "user"};
    BlkRbdLocation loc;
    (void)state;

    for (size_t i = 1; i < G_N_ELEMENTS(order); i++) {
        assert_true(qdict_bucket(order[i - 1]) < qdict_bucket(order[i]));
    }
    assert_int_equal(blk_rbd_parse_name("rbd:rbd/t1", &loc), 0);
    g_autofree char *plain = blk_rbd_json_name(&loc);
    assert_string_equal(plain, "json:{\"pool\": \"rbd\", \"image\": \"t1\", \"driver\": "
                               "\"rbd\", \"namespace\": \"\"}");
    blk_rbd_location_clear(&loc);

    assert_int_equal(
        blk_rbd_parse_name("rbd:rbd/n/t\"1@s:conf=/c:id=admin:rados_osd_op_timeout=1",
                           &loc),
        0);
    g_autofree char *full = blk_rbd_json_name(&loc);
    assert_string_equal(full, "json:{\"pool\": \"rbd\", \"image\": \"t\\\"1\", \"conf\": "
                              "\"/c\", \"snapshot\": \"s\", \"driver\": \"rbd\", "
                              "\"namespace\": \"n\", \"user\": \"admin\"}");
    blk_rbd_location_clear(&loc);
}

static void test_json_escapes(void **state)
{
    GString *s = g_string_new(NULL);
    (void)state;

    blk_json_append_string(s, "a\"b\\c\n\t\x01\x7f\xc3\xa9\xf0\x9f\x98\x80\xff");
    assert_string_equal(s->str, "\"a\\\"b\\\\c\\n\\t\\u0001\\u007F\\u00E9"
                                "\\uD83D\\uDE00\\uFFFD\"");
    g_string_free(s, TRUE);
}

/* json-name.c invariant 11: the caller's fields, and their errors. */
static void test_json_fields(void **state)
{
    (void)state;
    {
        BlkOpenOptions o = {0};
        ApiOpenLayers layers = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;

        assert_true(api_json_name("json:{\"driver\":\"raw\",\"file\":{\"driver\":\"rbd\","
                                  "\"pool\":\"p\",\"image\":\"i:x\",\"user\":\"u\"}}",
                                  &o, &path, &layers, &err));
        assert_string_equal(o.format, "raw");
        assert_ptr_equal(o.rbd, &layers.rbd);
        assert_string_equal(path, "rbd:p/i\\:x:id=u");
        assert_null(layers.rbd.namespace); /* not given: not in QEMU's name */
        api_open_layers_clear(&layers);
    }
    {
        BlkOpenOptions o = {.read_only = true}; /* a reader (json-opts.c inv. 5) */
        ApiOpenLayers layers = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;

        assert_true(api_image_opts_name("driver=rbd,pool=p,image=i,namespace=n,"
                                        "snapshot=s,read-only=on",
                                        &o, &path, &layers, &err));
        assert_string_equal(o.format, "rbd");
        assert_true(o.read_only);
        assert_string_equal(path, "rbd:p/n/i@s");
        api_open_layers_clear(&layers);
    }
    {
        BlkOpenOptions o = {0}; /* a writer: QEMU's "Block node is read-only" */
        ApiOpenLayers layers = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;

        assert_false(api_image_opts_name("driver=rbd,pool=p,image=i,read-only=on", &o,
                                         &path, &layers, &err));
        assert_string_equal(err->message, "Block node is read-only");
        api_open_layers_clear(&layers);
    }
    static const struct {
        const char *name;
        int code;
        const char *msg;
    } bad[] = {
        {"json:{\"driver\":\"rbd\",\"pool\":\"p\"}", EINVAL,
         "Parameter 'image' is missing"},
        {"json:{\"driver\":\"rbd\",\"image\":\"i\"}", EINVAL,
         "Parameter 'pool' is missing"},
        {"json:{\"driver\":\"rbd\",\"pool\":\"p\",\"image\":\"i\",\"bogus\":1}", EINVAL,
         "Parameter 'bogus' is unexpected"},
        {"json:{\"driver\":\"rbd\",\"pool\":\"p\",\"image\":\"i\",\"key-secret\":\"k\"}",
         ENOTSUP, "The RBD option 'key-secret' is not supported by qimg"},
        {"json:{\"file\":{\"driver\":\"rbd\",\"pool\":\"p\",\"image\":\"i\","
         "\"server\":{\"host\":\"h\"}}}",
         ENOTSUP, "The RBD option 'server' is not supported by qimg"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        BlkOpenOptions o = {0};
        ApiOpenLayers layers = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;

        assert_false(api_json_name(bad[i].name, &o, &path, &layers, &err));
        assert_int_equal(err->code, bad[i].code);
        assert_true(g_str_has_prefix(err->message, bad[i].msg));
        assert_null(o.rbd);
        api_open_layers_clear(&layers);
    }
}

/* rbd.h invariant 1: an image's backing name never opens rbd. */
static void test_backing_name_never_rbd(void **state)
{
    static const char *const names[] = {
        "json:{\"driver\":\"rbd\",\"pool\":\"p\",\"image\":\"i\"}",
        "json:{\"driver\":\"raw\",\"file\":{\"driver\":\"rbd\",\"pool\":\"p\","
        "\"image\":\"i\"}}",
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
        BlkOpenOptions o = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;

        assert_false(api_json_backing_name(names[i], &o, &path, &err));
        assert_int_equal(err->code, ENOTSUP);
        assert_non_null(strstr(err->message, "only as a plain file: driver 'rbd'"));
        assert_null(o.rbd);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_json_name),
        cmocka_unit_test(test_json_escapes),
        cmocka_unit_test(test_json_fields),
        cmocka_unit_test(test_backing_name_never_rbd),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
