/*
 * tests/test-json-name.c: api/json-name.c, parsing only (no file is
 * opened): a backing name read from an image opens nothing but a plain
 * file and its format is the image's (invariant 1); the caller's backing
 * and data-file options fill the layers (invariant 4), a node name is
 * refused, and without the backing chain backing options are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "test-util.h"

#include <errno.h>
#include <string.h>

/* Invariant 1: a backing name with anything but the file protocol. */
static void test_backing_name_refuses_protocols(void **state)
{
    static const char *const names[] = {
        "json:{\"driver\":\"qcow2\",\"file\":{\"driver\":\"blkdebug\","
        "\"image\":{\"driver\":\"file\",\"filename\":\"b\"}}}",
        "json:{\"driver\":\"qcow2\",\"file\":{\"driver\":\"nbd\",\"path\":\"/s\"}}",
        "json:{\"driver\":\"qcow2\",\"file\":{\"driver\":\"null-co\"}}",
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
        BlkOpenOptions o = {.format = "qcow2"};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;

        assert_false(api_json_backing_name(names[i], &o, &path, &err));
        assert_int_equal(err->code, ENOTSUP);
        assert_non_null(strstr(err->message, "only as a plain file: driver '"));
        assert_null(path);
    }
}

/* Invariant 1: the image's format wins; without one, only qcow2 or raw. */
static void test_backing_name_format(void **state)
{
    const char *name = "json:{\"driver\":\"raw\",\"file\":{\"driver\":\"file\","
                       "\"filename\":\"sub/b.qcow2\"}}";
    BlkOpenOptions o = {.format = "qcow2"};
    g_autofree char *path = NULL;
    g_autoptr(GError) err = NULL;
    (void)state;

    assert_true(api_json_backing_name(name, &o, &path, &err));
    assert_string_equal(o.format, "qcow2");
    assert_string_equal(path, "sub/b.qcow2"); /* as written: relative to the cwd */

    BlkOpenOptions none = {0};
    g_clear_pointer(&path, g_free);
    assert_false(api_json_backing_name(
        "json:{\"driver\":\"blkdebug\",\"image\":{\"filename\":\"b\"}}", &none, &path,
        &err));
    assert_non_null(strstr(err->message, "driver 'blkdebug' refused"));
    g_clear_error(&err);
    /* a top-level filename is not a file for a backing name (QEMU) */
    assert_false(api_json_backing_name("json:{\"driver\":\"qcow2\",\"filename\":\"b\"}",
                                       &o, &path, &err));
    assert_string_equal(err->message, "A block device must be specified for \"file\"");
}

/* Invariant 1: a backing name takes no layers of its own. */
static void test_backing_name_no_layers(void **state)
{
    BlkOpenOptions o = {.format = "qcow2"};
    g_autofree char *path = NULL;
    g_autoptr(GError) err = NULL;
    (void)state;

    assert_false(api_json_backing_name("json:{\"file\":{\"filename\":\"a\"},\"backing\":{"
                                       "\"file\":{\"filename\":\"b\"}}}",
                                       &o, &path, &err));
    assert_int_equal(err->code, ENOTSUP);
}

/* Invariant 4: the caller's backing and data-file options. */
static void test_caller_layers(void **state)
{
    BlkOpenOptions o = {0};
    ApiOpenLayers l = {0};
    g_autofree char *path = NULL;
    g_autoptr(GError) err = NULL;
    (void)state;

    assert_true(api_json_name("json:{\"driver\":\"qcow2\",\"file\":{\"filename\":\"t\"},"
                              "\"backing\":{\"driver\":\"raw\",\"file\":{\"driver\":"
                              "\"file\",\"filename\":\"b\"},"
                              "\"cache\":{\"direct\":true}},\"data-file\":{\"driver\":"
                              "\"file\",\"filename\":\"d\"}}",
                              &o, &path, &l, &err));
    assert_string_equal(path, "t");
    assert_string_equal(o.backing_path, "b");
    assert_ptr_equal(o.backing_opts, &l.backing);
    assert_string_equal(l.backing.format, "raw");
    assert_int_equal(l.backing.cache, BLK_CACHE_NONE);
    assert_int_equal(o.cache, BLK_CACHE_WRITEBACK); /* the top's own */
    assert_string_equal(o.data_file_path, "d");
    api_open_layers_clear(&l);

    /* --image-opts' dotted form */
    BlkOpenOptions d = {0};
    g_clear_pointer(&path, g_free);
    assert_true(api_image_opts_name(
        "driver=qcow2,file.filename=t,backing.file.filename=b2,data-file.filename=d2", &d,
        &path, &l, &err));
    assert_string_equal(d.backing_path, "b2");
    assert_string_equal(d.data_file_path, "d2");
    api_open_layers_clear(&l);
}

/* Invariant 4: node names, nested layers, other protocols, no chain. */
static void test_caller_layer_refusals(void **state)
{
    static const struct {
        const char *name;
        bool no_backing;
        const char *msg;
    } cases[] = {
        {"json:{\"file\":{\"filename\":\"t\"},\"backing\":\"n0\"}", false,
         "Could not open backing file: Cannot find device='n0' nor node-name='n0'"},
        {"json:{\"file\":{\"filename\":\"t\"},\"data-file\":\"n0\"}", false,
         "Cannot find device='n0' nor node-name='n0'"},
        {"json:{\"driver\":\"qcow2\",\"file\":{\"filename\":\"t\"},\"backing\":\"n0\"}",
         true, "Block format 'qcow2' does not support the option 'backing'"},
        {"json:{\"driver\":\"qcow2\",\"file\":{\"filename\":\"t\"},"
         "\"backing\":{\"file\":{\"driver\":\"file\",\"filename\":\"b\"}}}",
         true,
         "Block format 'qcow2' does not support the option 'backing.file.filename'"},
        {"json:{\"file\":{\"filename\":\"t\"},\"data-file\":{\"driver\":\"nbd\"}}", false,
         "qimg opens a data file only as a plain file: driver 'nbd' refused"},
        {"json:{\"file\":{\"filename\":\"t\"},\"data-file\":{\"driver\":\"file\"}}",
         false, "The 'file' block driver requires a file name"},
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        BlkOpenOptions o = {.no_backing = cases[i].no_backing};
        ApiOpenLayers l = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;

        assert_false(api_json_name(cases[i].name, &o, &path, &l, &err));
        assert_string_equal(err->message, cases[i].msg);
        assert_null(o.backing_path);
        api_open_layers_clear(&l);
    }

    /* the backing's own backing by options: refused (one level) */
    BlkOpenOptions o = {0};
    ApiOpenLayers l = {0};
    g_autofree char *path = NULL;
    g_autoptr(GError) err = NULL;
    assert_false(
        api_json_name("json:{\"file\":{\"filename\":\"t\"},\"backing\":{\"file\":"
                      "{\"filename\":\"b\"},\"backing\":{\"file\":{\"filename\":"
                      "\"c\"}}}}",
                      &o, &path, &l, &err));
    assert_int_equal(err->code, ENOTSUP);
    api_open_layers_clear(&l);
}

/* Invariants 6-8: lists flattened; options beside a name win over a json:
 * name's, name a plain name's file, and a probed format's wait. */
static void test_options_name(void **state)
{
    (void)state;
    {
        BlkOpenOptions o = {0};
        ApiOpenLayers l = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;
        assert_true(api_options_name("json:{'driver': 'raw', 'file': {'filename': 'x'}}",
                                     "driver=qcow2,lazy-refcounts=on", &o, &path, &l,
                                     &err));
        assert_string_equal(o.format, "qcow2");
        assert_string_equal(path, "x");
        assert_int_equal(o.lazy_refcounts, 1);
        api_open_layers_clear(&l);
    }
    {
        BlkOpenOptions o = {0};
        ApiOpenLayers l = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;
        assert_true(
            api_options_name("img", "cache-size=1.5k,node-name=n", &o, &path, &l, &err));
        assert_null(o.format); /* probed: the qcow2 option waits */
        assert_string_equal(path, "img");
        assert_non_null(o.format_opts);
        assert_true(api_format_options("qcow2", &o, &err));
        assert_true(o.metadata_cache_size_set);
        assert_int_equal(o.metadata_cache_size, 1536);
        api_open_layers_clear(&l);
    }
    {
        BlkOpenOptions o = {0};
        ApiOpenLayers l = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;
        assert_true(api_options_name("img", "cache-size=1M", &o, &path, &l, &err));
        assert_false(api_format_options("raw", &o, &err));
        assert_string_equal(
            err->message, "Block format 'raw' does not support the option 'cache-size'");
        api_open_layers_clear(&l);
    }
    {
        BlkOpenOptions o = {0};
        ApiOpenLayers l = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;
        assert_false(api_options_name("img", "file.filename=x", &o, &path, &l, &err));
        assert_string_equal(err->message,
                            "Can't specify 'file' and 'filename' options at "
                            "the same time");
        api_open_layers_clear(&l);
    }
    {
        BlkOpenOptions o = {0};
        ApiOpenLayers l = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;
        /* a list is KEY.N: no longer refused as such, but a key the format
         * does not have */
        assert_false(api_json_name("json:{'driver': 'qcow2', 'file': {'filename': 'x'}, "
                                   "'l': [1, 2]}",
                                   &o, &path, &l, &err));
        assert_string_equal(err->message,
                            "Block format 'qcow2' does not support the option 'l.0'");
        api_open_layers_clear(&l);
    }
}

/* json-parse.c facts 4, 5: a \u escape that is not four hex digits, a
 * surrogate outside a pair or a noncharacter is QEMU's error (json-glib
 * leaked a string on some, took others as non-UTF-8); single-quoted and
 * backing names too. */
static void test_surrogates(void **state)
{
    static const struct {
        const char *name, *escape;
    } bad[] = {
        {"json:{\"file\":{\"filename\":\"a\\ud83d\\u0041\"}}", "\\ud83d"},
        {"json:{\"file\":{\"filename\":\"a\\ud83d\\ud83d\"}}", "\\ud83d"},
        {"json:{\"file\":{\"filename\":\"a\\uD83Dx\"}}", "\\uD83D"},
        {"json:{\"file\":{\"filename\":\"a\\udc00\"}}", "\\udc00"},
        {"json:{\"file\":{\"filename\":\"a\\ud83d\\u\"}}", "\\ud83d"},
        {"json:{'file':{'filename':'a\\\"\\ud83d'}}", "\\ud83d"},
        {"json:{\"\\ud83d\\u0041\":1}", "\\ud83d"},
        /* not four hex digits: up to the string's end */
        {"json:{\"file\":{\"filename\":\"a\\uzzzz\"}}", "\\uzzzz"},
        {"json:{\"file\":{\"filename\":\"a\\ude0\"}}", "\\ude0\""},
        {"json:{\"file\":{\"filename\":\"a\\ud83d\\uzz\"}}", "\\ud83d"},
        /* noncharacters, alone or as a pair */
        {"json:{\"file\":{\"filename\":\"a\\uFFFE\"}}", "\\uFFFE"},
        {"json:{\"file\":{\"filename\":\"a\\ufdd0\"}}", "\\ufdd0"},
        {"json:{\"file\":{\"filename\":\"a\\ud83f\\udffe\"}}", "\\ud83f\\udffe"},
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        for (int backing = 0; backing < 2; backing++) {
            BlkOpenOptions o = {.format = backing ? "raw" : NULL};
            ApiOpenLayers l = {0};
            g_autofree char *path = NULL;
            g_autoptr(GError) err = NULL;
            g_autofree char *want = g_strdup_printf(
                "Could not parse the JSON options: JSON parse error, %s is not a valid "
                "Unicode character",
                bad[i].escape);

            assert_false(backing ? api_json_backing_name(bad[i].name, &o, &path, &err)
                                 : api_json_name(bad[i].name, &o, &path, &l, &err));
            assert_string_equal(err->message, want);
            assert_null(path);
            api_open_layers_clear(&l);
        }
    }

    /* a pair, and an escaped backslash before a 'u', are fine */
    BlkOpenOptions o = {.format = "raw"};
    g_autofree char *path = NULL;
    g_autoptr(GError) err = NULL;
    assert_true(api_json_backing_name(
        "json:{\"file\":{\"filename\":\"a\\ud83d\\udc00\\\\ud83d\"}}", &o, &path, &err));
    assert_string_equal(path, "a\xf0\x9f\x90\x80\\ud83d");
}

/* json-parse.c fact 3: one JSON value, as QEMU (json-glib took a
 * second object or list, and leaked). */
static void test_one_value(void **state)
{
    static const char *const bad[] = {
        "json:7{\"a\":\"b\"}",
        "json:{\"a\":1}{\"b\":2}",
        "json:[1]{}",
        "json:{}7",
        "json: {\"driver\":\"raw\"}x",
        "json:{\"a\":\"}{\"}]",
        "json:{'a':'}'}{}",
        "json:{\"a\":[1,{\"b\":\"]\"}]}{}",
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        BlkOpenOptions o = {0};
        ApiOpenLayers l = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;

        assert_false(api_json_name(bad[i], &o, &path, &l, &err));
        assert_string_equal(
            err->message,
            "Could not parse the JSON options: Expecting at most one JSON value");
        api_open_layers_clear(&l);
    }

    /* white space around the one value is fine */
    BlkOpenOptions o = {.format = "raw"};
    g_autofree char *path = NULL;
    g_autoptr(GError) err = NULL;
    assert_true(api_json_backing_name("json: {\"file\":{\"filename\":\"}{\"}}\n ", &o,
                                      &path, &err));
    assert_string_equal(path, "}{");
}

/* json-parse.c facts 1, 4, 5: a string's bytes and escapes as QEMU's lexer
 * and parser read them (messages compared with qemu-img 7.2). */
static void test_string_bytes(void **state)
{
    static const struct {
        const char *name, *detail;
    } bad[] = {
        /* the lexer's: the token from the opening quote to the byte */
        {"json:{\"file\":{\"filename\":\"a\x01"
         "b\"}}",
         "stray '\"a\x01'"},
        {"json:{'file':{'filename':'a\x1f'}}", "stray ''a\x1f'"},
        {"json:{\"file\":{\"filename\":\"a\\\x01\"}}", "stray '\"a\\\x01'"},
        {"json:{\"file\":{\"filename\":\"a\\u\x01\"}}", "stray '\"a\\u\x01'"},
        {"json:{\"file\":{\"filename\":\"a\\\"\xff\"}}", "stray '\"a\\\"\xff'"},
        {"json:{\"file\":{\"filename\":\"a\xfe\"}}", "stray '\"a\xfe'"},
        /* a backslash outside a string */
        {"json:{\"a\":\"\\ude0\"\\u004(b\"}", "stray '\\'"},
        /* before a parser's error earlier in the text */
        {"json:{\"a\":\"\\q\",\"b\":\"\x02\"}", "stray '\"\x02'"},
        /* the parser's */
        {"json:{\"file\":{\"filename\":\"a\\qb\"}}", "invalid escape sequence in string"},
        {"json:{\"file\":{\"filename\":\"a\\\xc3\xa9\"}}",
         "invalid escape sequence in string"},
        {"json:{\"file\":{\"filename\":\"a\x80\"}}", "invalid UTF-8 sequence in string"},
        {"json:{\"file\":{\"filename\":\"a\xc3\"}}", "invalid UTF-8 sequence in string"},
        {"json:{\"file\":{\"filename\":\"a\xc1\xbf\"}}",
         "invalid UTF-8 sequence in string"},
        {"json:{\"file\":{\"filename\":\"a\xe0\x80\x80\"}}",
         "invalid UTF-8 sequence in string"},
        {"json:{\"file\":{\"filename\":\"a\xed\xa0\x80\"}}",
         "invalid UTF-8 sequence in string"},
        {"json:{\"file\":{\"filename\":\"a\xf4\x90\x80\x80\"}}",
         "invalid UTF-8 sequence in string"},
        {"json:{\"file\":{\"filename\":\"a\xef\xb7\x90\"}}",
         "invalid UTF-8 sequence in string"},
        {"json:{\"file\":{\"filename\":\"a\xf8\x88\x80\x80\x80\"}}",
         "invalid UTF-8 sequence in string"},
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        BlkOpenOptions o = {0};
        ApiOpenLayers l = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;
        g_autofree char *want = g_strdup_printf(
            "Could not parse the JSON options: JSON parse error, %s", bad[i].detail);

        assert_false(api_json_name(bad[i].name, &o, &path, &l, &err));
        assert_string_equal(err->message, want);
        assert_null(path);
        api_open_layers_clear(&l);
    }
}

/* json-parse.c fact 5: U+0000 is C0 80 in the name, as QEMU stores
 * it, never the end of the name; the other escapes and UTF-8 stay. */
static void test_string_nul(void **state)
{
    static const struct {
        const char *name, *path;
    } good[] = {
        {"json:{\"file\":{\"filename\":\"a\\u0000b\"}}", "a\xc0\x80"
                                                         "b"},
        {"json:{\"file\":{\"filename\":\"a\xc0\x80"
         "b\"}}",
         "a\xc0\x80"
         "b"},
        {"json:{'file':{'filename':'\\u0000\\u0000'}}", "\xc0\x80\xc0\x80"},
        {"json:{\"file\":{\"filename\":\"a\\/\\'\xf0\x9f\x98\x80\\u00e9\"}}",
         "a/'\xf0\x9f\x98\x80\xc3\xa9"},
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(good); i++) {
        BlkOpenOptions o = {.format = "raw"};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;

        assert_true(api_json_backing_name(good[i].name, &o, &path, &err));
        assert_string_equal(path, good[i].path);
    }
}

/* json-parse.c facts 1-4: the text's structure, QEMU's messages
 * (compared with qemu-img 7.2). */
static void test_structure(void **state)
{
    static const struct {
        const char *name, *msg;
    } bad[] = {
        {"json:}{", "JSON parse error, expecting value"},
        {"json:{", "JSON parse error, premature EOI"},
        {"json:{\"a\"}", "JSON parse error, missing : in object pair"},
        {"json:{1:2}", "JSON parse error, key is not a string in object"},
        {"json:{\"a\":1 \"b\":2}", "JSON parse error, expected separator in dict"},
        {"json:[1 2]", "JSON parse error, expected separator in list"},
        {"json:{\"a\":1,\"a\":2}", "JSON parse error, duplicate key"},
        {"json:{\"a\":tru}", "JSON parse error, invalid keyword 'tru'"},
        {"json:{\"a\":-}", "JSON parse error, stray '-}'"},
        {"json:{\"a\":01}", "JSON parse error, stray '01'"},
        {"json:{\"a\":1e+}", "JSON parse error, stray '1e+}'"},
        {"json:{\"a\":\"x}", "JSON parse error, stray '\"x}'"},
        {"json: ", "Expecting a JSON value"},
        {"json:{\"a\":1}@", "Expecting at most one JSON value"},
    };
    (void)state;

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        BlkOpenOptions o = {0};
        ApiOpenLayers l = {0};
        g_autofree char *path = NULL;
        g_autoptr(GError) err = NULL;
        g_autofree char *want =
            g_strconcat("Could not parse the JSON options: ", bad[i].msg, NULL);

        assert_false(api_json_name(bad[i].name, &o, &path, &l, &err));
        assert_string_equal(err->message, want);
        api_open_layers_clear(&l);
    }

    /* 1024 levels are fine, 1025 are not (fact 2) */
    for (int depth = 1024; depth <= 1025; depth++) {
        g_autoptr(GString) name = g_string_new("json:{\"a\":");
        g_autoptr(GHashTable) flat =
            g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        g_autoptr(GError) err = NULL;

        for (int i = 1; i < depth; i++) {
            g_string_append_c(name, '[');
        }
        for (int i = 1; i < depth; i++) {
            g_string_append_c(name, ']');
        }
        g_string_append_c(name, '}');
        assert_int_equal(api_json_flat(name->str, flat, NULL, &err), depth == 1024);
        if (depth > 1024) {
            assert_string_equal(err->message,
                                "Could not parse the JSON options: JSON nesting "
                                "depth limit exceeded");
        }
    }
}

/* faulty-config.c fact 1: a blkdebug config file is read bounded (the
 * name parsing reads it): a device that never ends is refused. */
static void test_blkdebug_config_bounded(void **state)
{
    BlkOpenOptions o = {0};
    ApiOpenLayers l = {0};
    g_autofree char *path = NULL;
    g_autoptr(GError) err = NULL;
    (void)state;

    assert_false(api_json_name("json:{\"driver\":\"blkdebug\",\"config\":\"/dev/zero\","
                               "\"image\":{\"driver\":\"file\",\"filename\":\"x\"}}",
                               &o, &path, &l, &err));
    assert_string_equal(err->message,
                        "Could not read blkdebug config file: File too large");
    api_open_layers_clear(&l);
}

/* json-flat.c invariants 1 and 3: QEMU's text of numbers that are not
 * int64s; a null (or non-string) driver, a null filename or file is no
 * option, any other null is "". */
static void test_flat_values(void **state)
{
    g_autoptr(GHashTable) flat =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GError) err = NULL;

    (void)state;
    assert_true(api_json_flat("json:{\"a\": 1.5, \"b\": 99999999999999999999, "
                              "\"c\": 18446744073709551615, \"d\": 0.1, \"e\": 1e3, "
                              "\"f\": null, \"driver\": null, \"file\": {\"driver\": 7, "
                              "\"filename\": null}, \"g\": {\"file\": null}}",
                              flat, NULL, &err));
    assert_string_equal(g_hash_table_lookup(flat, "a"), "1.5");
    assert_string_equal(g_hash_table_lookup(flat, "b"), "1e+20");
    assert_string_equal(g_hash_table_lookup(flat, "c"), "18446744073709551615");
    assert_string_equal(g_hash_table_lookup(flat, "d"), "0.10000000000000001");
    assert_string_equal(g_hash_table_lookup(flat, "e"), "1000");
    assert_string_equal(g_hash_table_lookup(flat, "f"), "");
    assert_int_equal(g_hash_table_size(flat), 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backing_name_refuses_protocols),
        cmocka_unit_test(test_flat_values),
        cmocka_unit_test(test_backing_name_format),
        cmocka_unit_test(test_backing_name_no_layers),
        cmocka_unit_test(test_caller_layers),
        cmocka_unit_test(test_caller_layer_refusals),
        cmocka_unit_test(test_options_name),
        cmocka_unit_test(test_surrogates),
        cmocka_unit_test(test_one_value),
        cmocka_unit_test(test_string_bytes),
        cmocka_unit_test(test_string_nul),
        cmocka_unit_test(test_structure),
        cmocka_unit_test(test_blkdebug_config_bounded),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
