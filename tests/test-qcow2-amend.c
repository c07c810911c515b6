/*
 * tests/test-qcow2-amend.c: I/O errors at every step of qemu-img amend's
 * metadata changes (qcow2/amend*.c), on the fault-injecting node.
 *
 * For each step a change goes through and errno EIO, persistent (the file
 * stays as a crash at that step leaves it: faulty.c invariant 2) and once:
 *  - a refcount width change (amend.c invariant 5): after the close
 *    `qemu-img check` finds no error and no leak, the refcount width is
 *    the old or the new one, and the contents are as before;
 *  - a downgrade that expands zero clusters over a snapshot (invariant 4:
 *    tables of the active L1 only, and one it shares with the snapshot):
 *    no corruption (leaks allowed), the image reads as before, and the
 *    snapshot too;
 *  - and without a fault both succeed with a clean image.
 * Each case's image is made once per run; every amend works on a copy.
 * make test fails the 1st and the 2nd write of each step; QIMG_LONG=1 the
 * 3rd too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "api/api.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct Case {
    const char *create; /* qemu-img create -o */
    const char *setup;  /* shell commands on '%1$s' (the image) */
    const char *key, *value;
    bool no_leaks;
} Case;

static const Case refcount_case = {
    .create = "cluster_size=4k",
    .setup = "qemu-io -c 'write -P 7 0 1M' -c 'write -P 8 6M 512k' '%1$s' >/dev/null",
    .key = "refcount_bits",
    .value = "4",
    .no_leaks = true,
};

static const Case downgrade_case = {
    .create = "cluster_size=4k",
    .setup = "qemu-io -c 'write -P 7 0 1M' -c 'write -z 0 64k' -c 'write -P 9 6M 64k' "
             "-c 'write -z 6M 32k' '%1$s' >/dev/null && "
             "qemu-img snapshot -c s '%1$s' && "
             "qemu-io -c 'write -z 512k 64k' -c 'write -z 2M 8k' '%1$s' >/dev/null",
    .key = "compat",
    .value = "0.10",
    .no_leaks = false,
};

/* The case's image, made once per run (and its raw contents, and its
 * snapshot's): every amend works on a fresh copy. */
typedef struct Template {
    char *path, *raw, *snap;
} Template;

static const Template *case_template(const Case *c)
{
    static Template t[2];
    Template *tp = &t[c == &downgrade_case];

    if (!tp->path) {
        g_autofree char *setup = NULL;

        tp->path = tu_fresh("template.qcow2");
        tp->raw = g_strdup_printf("%s.raw", tp->path);
        tp->snap = g_strdup_printf("%s.snap.raw", tp->path);
        setup = g_strdup_printf(c->setup, tp->path);
        tu_run("qemu-img create -q -f qcow2 -o '%s' '%s' 16M && %s && "
               "qemu-img convert -O raw '%s' '%s'",
               c->create, tp->path, setup, tp->path, tp->raw);
        if (strstr(c->setup, "snapshot")) {
            tu_run("qemu-img convert -l s -O raw '%s' '%s'", tp->path, tp->snap);
        }
    }
    return tp;
}

/* Amend a copy of the case's image with the rule (NULL: none); returns the
 * driver's result. */
static int amend_case(const Case *c, const char *rule, bool *changed)
{
    const Template *t = case_template(c);
    g_autofree char *p = tu_fresh("amend.qcow2");
    g_autofree char *snap = g_strdup_printf("%s.snap.raw", p);
    g_autofree char *name =
        rule ? g_strdup_printf("blkdebug:%s:%s", rule, p) : g_strdup(p);
    g_autofree char *out = NULL;
    g_autofree uint8_t *hdr = NULL;
    g_autoptr(GError) err = NULL;
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);
    BlkOpenOptions o = {.cache = BLK_CACHE_WRITEBACK};
    BlkAmendOptions ao = {.options = opts};
    BlkNode *img;
    gsize n = 0;
    int ret, rc;

    tu_copy_file(t->path, p);
    g_hash_table_insert(opts, (gpointer)c->key, (gpointer)c->value);
    img = api_open_node(name, &o, NULL, &err);
    if (!img) {
        fail_msg("open %s: %s", name, err->message);
    }
    ret = img->drv->amend(img, &ao);
    blk_error_clear();
    blk_close(img);

    rc = tu_run_status(&out, "qemu-img check '%s'", p);
    if ((c->no_leaks || !rule) ? rc != 0 : rc != 0 && rc != 3) {
        fail_msg("%s %s=%s: qemu-img check exit %d\n%s", rule ? rule : "no fault", c->key,
                 c->value, rc, out);
    }
    tu_run("qemu-img compare -q -f raw -F qcow2 '%s' '%s'", t->raw, p);
    if (strstr(c->setup, "snapshot")) {
        tu_run("qemu-img convert -l s -O raw '%s' '%s'", p, snap);
        assert_true(tu_same_file(t->snap, snap));
        unlink(snap);
    }
    /* the header qemu-img check just read: version 2, or refcount order 2 */
    assert_true(g_file_get_contents(p, (gchar **)&hdr, &n, NULL));
    assert_true(n >= QCOW2_HDR_V3_FULL_LENGTH);
    *changed = strcmp(c->key, "compat") == 0
                   ? load_be32(hdr + QCOW2_HDR_VERSION) == 2
                   : load_be32(hdr + QCOW2_HDR_REFCOUNT_ORDER) == 2;
    unlink(p);
    return ret;
}

static void run_faults(const Case *c, const char *const *events, size_t nevents)
{
    /* the 1st and 2nd write of the step fail; QIMG_LONG=1: the 3rd too */
    uint64_t last = tu_long_run() ? 3 : 2;
    bool changed;

    TU_REQUIRE_QEMU();
    assert_int_equal(amend_case(c, NULL, &changed), 0);
    assert_true(changed);
    for (size_t e = 0; e < nevents; e++) {
        for (uint64_t nth = 1; nth <= last; nth++) {
            for (int once = 0; once < 2; once++) {
                g_autofree char *rule =
                    g_strdup_printf("event=%s,errno=%d,nth=%" PRIu64 "%s%s", events[e],
                                    EIO, nth, once ? ",once" : "",
                                    strcmp(events[e], "flush") == 0 ? ",op=flush" : "");
                int ret = amend_case(c, rule, &changed);
                /* a step the change went through failed it, and the image
                 * is the old one unless the switch itself was written */
                if (ret == 0) {
                    assert_true(changed);
                }
            }
        }
    }
}

static void test_refcount_width(void **state)
{
    static const char *const events[] = {"refblock_alloc", "reftable_grow",
                                         "header_update", "flush"};
    run_faults(&refcount_case, events, G_N_ELEMENTS(events));
}

static void test_downgrade(void **state)
{
    static const char *const events[] = {"data_write",      "l2_update",
                                         "refblock_update", "refblock_alloc",
                                         "header_update",   "flush"};
    run_faults(&downgrade_case, events, G_N_ELEMENTS(events));
}

/* amend.c invariant 1 for callers of the API that skip qimg's option
 * parsing: unknown keys and values not in the normalised form are refused
 * with qemu-img's messages, and nothing changes. */
static void test_bad_options(void **state)
{
    static const char *const bad[][3] = {
        {"foo", "1", "Invalid parameter 'foo'"},
        {"cluster_size", "512", "Invalid parameter 'cluster_size'"},
        {"size", "1G", "Parameter 'size' expects a number"},
        {"refcount_bits", "", "Parameter 'refcount_bits' expects a number"},
        {"refcount_bits", "3",
         "Refcount width must be a power of two and may not "
         "exceed 64 bits"},
        {"lazy_refcounts", "yes", "Parameter 'lazy_refcounts' expects 'on' or 'off'"},
        {"compat", "0.9", "Unknown compatibility level 0.9"},
        {"encrypt.state", "x", "Can't amend encryption options - encryption not present"},
    };
    g_autofree char *p = tu_fresh("bad.qcow2");
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.cache = BLK_CACHE_WRITEBACK};
    BlkNode *img;

    TU_REQUIRE_QEMU_IMG();
    tu_run("qemu-img create -q -f qcow2 '%s' 16M && cp '%s' '%s.orig'", p, p, p);
    img = api_open_node(p, &o, NULL, &err);
    assert_non_null(img);
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);
        BlkAmendOptions ao = {.options = opts};
        g_hash_table_insert(opts, (gpointer)bad[i][0], (gpointer)bad[i][1]);
        blk_error_clear();
        assert_int_equal(img->drv->amend(img, &ao), -EINVAL);
        assert_string_equal(blk_error_message(), bad[i][2]);
    }
    blk_error_clear();
    blk_close(img);
    tu_run("cmp -s '%s' '%s.orig'", p, p);
}

/* DESIGN.md rule 4: a reftable that names one refcount block twice (far
 * out, so a dense bitmap would be huge and the scan long) is a corruption,
 * reported before anything is written. */
static void test_duplicate_refblock(void **state)
{
    g_autofree char *p = tu_fresh("dup.qcow2");
    g_autoptr(GError) err = NULL;
    g_autoptr(GHashTable) opts = g_hash_table_new(g_str_hash, g_str_equal);
    BlkOpenOptions o = {.cache = BLK_CACHE_WRITEBACK};
    BlkAmendOptions ao = {.options = opts};
    BlkNode *img;

    TU_REQUIRE_QEMU_IMG();
    tu_run("qemu-img create -q -f qcow2 '%s' 64M && printf "
           "'\\000\\000\\000\\000\\000\\002\\000\\000' | dd of='%s' bs=1 "
           "seek=%d conv=notrunc 2>/dev/null",
           p, p, 0x10000 + 8 * 4000);
    g_hash_table_insert(opts, "refcount_bits", "4");
    img = api_open_node(p, &o, NULL, &err);
    assert_non_null(img);
    blk_error_clear();
    assert_int_equal(img->drv->amend(img, &ao), -EIO);
    assert_non_null(strstr(blk_error_message(), "is also another refcount structure"));
    blk_error_clear();
    blk_close(img);
    blk_error_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refcount_width),
        cmocka_unit_test(test_downgrade),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_duplicate_refblock),
    };
    return tu_run_group_tests("qcow2-amend", tests);
}
