/*
 * tests/test-qcow2-snapshot-fault.c: internal snapshots of the qcow2 driver
 * (qcow2/snapshot-write.c) under I/O errors and crashes, with qemu-img as
 * the oracle.  Skipped without qemu-img / qemu-io.
 *
 *  - I/O errors at the snapshot_table, l1_update and refblock_update steps
 *    of create, apply and delete ("blkdebug:RULES:FILE"): the error reaches
 *    the caller, qemu-img check finds no corruption (leaks allowed), the
 *    disk and the snapshots hold what they held (or the finished result);
 *  - a savevm crashed at its writes: no corruption, the snapshot is absent
 *    or complete.
 *
 * make test fails the 1st and 2nd write of each fault step and crashes a
 * savevm at every 3rd write; QIMG_LONG=1 adds the 3rd write of each step
 * and crashes at every write.  What the operations do without faults is
 * test-qcow2-snapshot-ops.c's.
 */
#include "test-qcow2-snapshot-fixture.h"

/* ---- fault injection ---- */

typedef enum { OP_CREATE, OP_GOTO, OP_DELETE } Op;
static const char *const op_names[] = {"create", "goto", "delete"};

/* Does op announce this step at least once on the prepared image? */
static bool op_touches(Op op, const char *event)
{
    return !(op == OP_GOTO && strcmp(event, "snapshot_table") == 0);
}

static bool same_file(const char *a, const char *b)
{
    return tu_same_file(a, b);
}

/* The dirty bit (incompatible bit 0, byte 79 of a v3 header). */
static bool image_is_dirty(const char *path)
{
    g_autofree char *data = NULL;
    gsize len = 0;

    return g_file_get_contents(path, &data, &len, NULL) && len > 79 &&
           (((const uint8_t *)data)[79] & 1);
}

/* The image every fault case starts from, made once per run (with the
 * raw contents of its active disk and of snapshot base): 512-byte
 * clusters, many L2 tables, some shared with the snapshot (L1 entries
 * without COPIED), some not (with COPIED). */
static const char *fault_template(const char **active, const char **base)
{
    static char *tpl, *tpl_active, *tpl_base;

    if (!tpl) {
        tpl = tu_fresh("fault-template.qcow2");
        tpl_active = g_strdup_printf("%s.active.raw", tpl);
        tpl_base = g_strdup_printf("%s.base.raw", tpl);
        tu_run("qemu-img create -q -f qcow2 -o cluster_size=512 '%s' 2M", tpl);
        tu_run("qemu-io -c 'write -q -P 0x51 0 1M' '%s' >/dev/null && qemu-img snapshot "
               "-c base '%s' && qemu-io -c 'write -q -P 0x52 256k 64k' -c 'write -q -P "
               "0x53 1536k 8k' '%s' >/dev/null",
               tpl, tpl, tpl);
        tu_run(
            "qemu-img convert -O raw '%s' '%s' && qemu-img convert -l base -O raw '%s' "
            "'%s'",
            tpl, tpl_active, tpl, tpl_base);
    }
    *active = tpl_active;
    *base = tpl_base;
    return tpl;
}

static void fault_case(Op op, const char *event, int errnum, uint64_t nth, bool once)
{
    g_autofree char *p = tu_fresh("fault.qcow2");
    const char *active, *base;
    const char *tpl = fault_template(&active, &base);
    g_autofree char *now = g_strdup_printf("%s.now.raw", p);
    g_autofree char *name = NULL;
    g_autofree char *out = NULL;
    g_autofree char *list = NULL;
    g_autofree char *desc =
        g_strdup_printf("%s, event=%s errno=%d nth=%" PRIu64 "%s", op_names[op], event,
                        errnum, nth, once ? " once" : "");
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.cache = BLK_CACHE_UNSAFE};
    QimgSnapshotParams sp = {.struct_size = sizeof(QimgSnapshotParams), .name = "new"};
    QimgImage *img;
    bool ok;
    int rc;

    tu_copy_file(tpl, p);

    name = g_strdup_printf("blkdebug:event=%s,errno=%d,nth=%" PRIu64 "%s:%s", event,
                           errnum, nth, once ? ",once" : "", p);
    img = tu_open_handle(name, &o, &err);
    if (!img) {
        fail_msg("open %s: %s", name, err->message);
    }
    switch (op) {
    case OP_CREATE: {
        char *id = qimg_snapshot_create(img, &sp, &err);
        ok = id != NULL;
        g_free(id);
        break;
    }
    case OP_GOTO:
        ok = qimg_snapshot_apply(img, "base", &err);
        break;
    default:
        ok = qimg_snapshot_delete(img, "base", &err);
        break;
    }
    if (!ok && err->code != errnum) {
        fail_msg("%s: error %d (%s), want %d", desc, err->code, err->message, errnum);
    }
    if (ok && nth == 1 && op_touches(op, event)) {
        fail_msg("%s: the injected error did not reach the caller", desc);
    }
    api_image_destroy(img);

    /* no corruption (leaks allowed); or, when the failure came while the
     * refcounts were in flux (snapshot-write.c R10), the dirty bit is set
     * and a repair leaves the image clean, as QEMU's next open does */
    if (image_is_dirty(p)) {
        if (ok) {
            fail_msg("%s: the operation succeeded but left the image dirty", desc);
        }
        rc = tu_run_status(&out, "qemu-img check -r all '%s' && qemu-img check '%s'", p,
                           p);
        if (rc != 0) {
            fail_msg("%s: dirty image not clean after check -r all (exit %d)\n%s", desc,
                     rc, out);
        }
    } /* else no corruption: the check -r leaks at the end finds none */
    g_clear_pointer(&out, g_free);

    /* the disk and the snapshots: as before, or as after the operation */
    tu_run("qemu-img convert -O raw '%s' '%s'", p, now);
    if (!same_file(now, active) && !(op == OP_GOTO && same_file(now, base))) {
        fail_msg("%s: the active disk holds neither the old nor the new contents", desc);
    }
    list = qemu_snapshot_list(p);
    if (strstr(list, ":base:")) {
        tu_run("qemu-img convert -l base -O raw '%s' '%s'", p, now);
        if (!same_file(now, base)) {
            fail_msg("%s: snapshot base changed", desc);
        }
    } else if (op != OP_DELETE) {
        fail_msg("%s: snapshot base is gone (%s)", desc, list);
    }
    if (strstr(list, ":new:")) {
        tu_run("qemu-img convert -l new -O raw '%s' '%s'", p, now);
        if (!same_file(now, active)) {
            fail_msg("%s: the new snapshot does not hold the disk", desc);
        }
    }
    if (ok && op == OP_DELETE && strstr(list, ":base:")) {
        fail_msg("%s: delete succeeded but base is still listed", desc);
    }
    if (ok && op == OP_CREATE && !strstr(list, ":new:")) {
        fail_msg("%s: create succeeded but no snapshot new", desc);
    }
    /* only leaks: a repair of leaks makes it clean */
    rc = tu_run_status(&out, "qemu-img check -r leaks '%s' && qemu-img check '%s'", p, p);
    if (rc != 0) {
        fail_msg("%s: not clean after check -r leaks (exit %d)\n%s", desc, rc, out);
    }
    unlink(p);
    unlink(now);
}

static void run_event(const char *event)
{
    TU_REQUIRE_QEMU();
    /* the 1st and 2nd write of the step fail; QIMG_LONG=1: the 3rd too */
    uint64_t last = tu_long_run() ? 3 : 2;
    for (Op op = OP_CREATE; op <= OP_DELETE; op++) {
        for (uint64_t nth = 1; nth <= last; nth++) {
            fault_case(op, event, EIO, nth, false);
            fault_case(op, event, EIO, nth, true);
        }
        fault_case(op, event, ENOSPC, 1, false);
    }
}

static void test_fault_snapshot_table(void **state)
{
    run_event("snapshot_table");
}

static void test_fault_l1_update(void **state)
{
    run_event("l1_update");
}

static void test_fault_refblock_update(void **state)
{
    run_event("refblock_update");
}

/* A crash at every point of a savevm commit ("any" write fails from the
 * N-th on, as a kill would leave the file): no corruption, the snapshot is
 * absent or complete, the older snapshot and the disk are intact. */
static void test_crash_savevm(void **state)
{
    TU_REQUIRE_QEMU(); /* first: a skip must leave nothing allocated */
    g_autofree char *p = tu_fresh("crash.qcow2");
    g_autofree char *c = g_strdup_printf("%s.c", p);
    g_autofree char *disk = g_strdup_printf("%s.disk.raw", p);
    g_autofree char *now = g_strdup_printf("%s.now.raw", p);
    const uint64_t n = MiB_(2) + 5;
    g_autofree uint8_t *vm = g_malloc(n);
    BlkOpenOptions o = {.cache = BLK_CACHE_UNSAFE};
    bool clean_run = false;

    fill(vm, n, 0x77);
    tu_run(
        "qemu-img create -q -f qcow2 '%s' 8M && qemu-io -c 'write -q -P 0x61 0 3M' '%s' "
        ">/dev/null && qemu-img snapshot -c disk '%s' && qemu-img convert -O raw '%s' "
        "'%s'",
        p, p, p, p, disk);
    /* make test: every 3rd write (and on to the run with no crash);
     * QIMG_LONG=1: every write */
    const uint64_t stride = tu_long_run() ? 1 : 3;

    for (uint64_t nth = 1; nth < 400 && !clean_run; nth += stride) {
        g_autofree char *name =
            g_strdup_printf("blkdebug:event=any,nth=%" PRIu64 ":%s", nth, c);
        g_autofree char *out = NULL;
        g_autoptr(GError) err = NULL;
        QimgSnapshotParams sp = {
            .struct_size = sizeof(QimgSnapshotParams), .name = "new", .vm_state_size = n};
        QimgImage *img;
        bool ok = true;
        int rc;

        tu_copy_file(p, c);
        img = tu_open_handle(name, &o, &err);
        assert_non_null(img);
        for (uint64_t pos = 0; pos < n && ok; pos += 100000) {
            BlkIOV q;
            iov_init_buf(&q, vm + pos, (size_t)MIN(100000, n - pos));
            ok = img->node->drv->save_vmstate(img->node, pos, &q) == 0;
            blk_error_clear();
        }
        if (ok) {
            char *id = qimg_snapshot_create(img, &sp, &err);
            ok = id != NULL;
            g_free(id);
        }
        clean_run = ok && blk_flush(img->node) == 0;
        api_image_destroy(img);

        rc = tu_run_status(&out, "qemu-img check '%s'", c);
        if (rc != 0 && rc != 3) {
            fail_msg("crash at write %" PRIu64 ": qemu-img check exit %d\n%s", nth, rc,
                     out);
        }
        tu_run("qemu-img convert -O raw '%s' '%s'", c, now);
        assert_true(same_file(disk, now));
        tu_run("qemu-img convert -l disk -O raw '%s' '%s'", c, now);
        assert_true(same_file(disk, now));
        g_autofree char *list = qemu_snapshot_list(c);
        if (strstr(list, ":new:")) {
            img = open_img(c, true, "new");
            load_vm_n_equal(img, vm, n);
            api_image_destroy(img);
        } else if (ok) {
            fail_msg("crash at write %" PRIu64 ": create succeeded, no snapshot", nth);
        }
    }
    assert_true(clean_run);
}
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_snapshot_table),
        cmocka_unit_test(test_fault_l1_update),
        cmocka_unit_test(test_fault_refblock_update),
        cmocka_unit_test(test_crash_savevm),
    };
    return tu_run_group_tests("qcow2-snapshot", tests);
}
