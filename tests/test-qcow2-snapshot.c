/*
 * tests/test-qcow2-snapshot.c: internal snapshots of the qcow2 driver
 * (create, apply, delete, list; qcow2/snapshot-write.c), with qemu-img as
 * the oracle.  Skipped without qemu-img / qemu-io.
 *
 *  - sequences of create / apply / delete with writes in between, on
 *    several image variants (v2, v3, 512-byte and 2 MiB clusters,
 *    extended L2, 4-bit refcounts, lazy refcounts, compressed clusters):
 *    after every step the image is closed and qemu-img check finds it
 *    clean (no leaks), the active disk and every snapshot (qemu-img convert
 *    [-l ID]) equal a byte model, and qemu-img lists the snapshots (name,
 *    ID, VM state size) the model expects;
 *  - the VM state: written with the driver's save_vmstate (also from
 *    several threads at once), captured by a snapshot with vm_state_size;
 *    QEMU reads it back (qemu-img snapshot -a + qemu-io read -b -P), and so
 *    does the driver (load_vmstate in a snapshot view and after an apply);
 *    the active copy is dropped; a state size past 4 GiB writes 0 into the
 *    32-bit field;
 *  - apply restores the snapshot's disk size after a grow and a shrink;
 *  - I/O errors at the snapshot_table, l1_update and refblock_update steps
 *    of create, apply and delete ("blkdebug:RULES:FILE"): the error reaches
 *    the caller, qemu-img check finds no corruption (leaks allowed), the
 *    disk and the snapshots hold what they held (or the finished result);
 *  - refcount overflow (1- and 2-bit refcounts) fails cleanly; the limits
 *    and refusals (65536 snapshots, external data file, unknown snapshot);
 *    IDs, long names and unknown extra data in the table.
 *
 * make test fails the 1st and 2nd write of each fault step and crashes a
 * savevm at every 3rd write; QIMG_LONG=1 adds the 3rd write of each step
 * and crashes at every write.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qimg/qimg.h"
#include "test-api.h"
#include "qcow2/qcow2.h"
#include "qimg/snapshot.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB_(x) ((uint64_t)(x) << 10)
#define MiB_(x) ((uint64_t)(x) << 20)

static QimgImage *open_img(const char *name, bool read_only, const char *snapshot)
{
    BlkOpenOptions o = {.format = "qcow2",
                        .read_only = read_only,
                        .snapshot = snapshot,
                        .cache = BLK_CACHE_UNSAFE};
    g_autoptr(GError) err = NULL;
    QimgImage *img = tu_open_handle(name, &o, &err);

    if (!img) {
        fail_msg("open %s: %s", name, err->message);
    }
    return img;
}

static void close_img(QimgImage *img)
{
    g_autoptr(GError) err = NULL;
    if (!qimg_image_close(img, &err)) {
        fail_msg("close: %s", err->message);
    }
}

static uint8_t *read_file(const char *path, uint64_t *size)
{
    gchar *data = NULL;
    gsize n = 0;
    if (!g_file_get_contents(path, &data, &n, NULL)) {
        fail_msg("cannot read %s", path);
    }
    *size = n;
    return (uint8_t *)data;
}

static void fill(uint8_t *buf, uint64_t len, uint8_t seed)
{
    for (uint64_t i = 0; i < len; i++) {
        buf[i] = (uint8_t)(seed + i * 7 + (i >> 9));
    }
}

/* ---- the model ---- */

typedef struct Snap {
    char *id, *name;
    uint64_t vm_size;
    uint8_t *data;
    uint64_t size;
} Snap;

typedef struct Model {
    uint8_t *data;
    uint64_t size;
    GPtrArray *snaps; /* Snap *, in table order */
} Model;

static void snap_free(gpointer p)
{
    Snap *sn = p;
    g_free(sn->id);
    g_free(sn->name);
    g_free(sn->data);
    g_free(sn);
}

static void model_init_from(Model *m, const char *path)
{
    g_autofree char *raw = g_strdup_printf("%s.init.raw", path);
    tu_run("qemu-img convert -O raw '%s' '%s'", path, raw);
    m->data = read_file(raw, &m->size);
    m->snaps = g_ptr_array_new_with_free_func(snap_free);
}

static void model_clear(Model *m)
{
    g_free(m->data);
    g_ptr_array_unref(m->snaps);
}

static void m_write(Model *m, QimgImage *img, uint64_t off, uint64_t len, uint8_t seed)
{
    g_autofree uint8_t *buf = g_malloc(len);
    fill(buf, len, seed);
    assert_true(off + len <= m->size);
    memcpy(m->data + off, buf, len);
    assert_int_equal(blk_pwrite(img->node, off, buf, len, 0), 0);
}

static Snap *m_find(Model *m, const char *id_or_name)
{
    for (guint i = 0; i < m->snaps->len; i++) {
        Snap *sn = g_ptr_array_index(m->snaps, i);
        if (strcmp(sn->id, id_or_name) == 0) {
            return sn;
        }
    }
    for (guint i = 0; i < m->snaps->len; i++) {
        Snap *sn = g_ptr_array_index(m->snaps, i);
        if (strcmp(sn->name, id_or_name) == 0) {
            return sn;
        }
    }
    return NULL;
}

static char *m_create(Model *m, QimgImage *img, const char *name, uint64_t vm_size)
{
    QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams),
                            .name = name,
                            .vm_state_size = vm_size};
    g_autoptr(GError) err = NULL;
    char *id = qimg_snapshot_create(img, &p, &err);
    Snap *sn;

    if (!id) {
        fail_msg("create %s: %s", name, err->message);
    }
    sn = g_new0(Snap, 1);
    sn->id = g_strdup(id);
    sn->name = g_strdup(name);
    sn->vm_size = vm_size;
    sn->data = g_memdup2(m->data, m->size);
    sn->size = m->size;
    g_ptr_array_add(m->snaps, sn);
    return id;
}

static void m_apply(Model *m, QimgImage *img, const char *id_or_name)
{
    g_autoptr(GError) err = NULL;
    Snap *sn = m_find(m, id_or_name);

    assert_non_null(sn);
    if (!qimg_snapshot_apply(img, id_or_name, &err)) {
        fail_msg("apply %s: %s", id_or_name, err->message);
    }
    g_free(m->data);
    m->data = g_memdup2(sn->data, sn->size);
    m->size = sn->size;
    assert_int_equal(img->node->size, m->size);
}

static void m_delete(Model *m, QimgImage *img, const char *id_or_name)
{
    g_autoptr(GError) err = NULL;
    Snap *sn = m_find(m, id_or_name);

    assert_non_null(sn);
    if (!qimg_snapshot_delete(img, id_or_name, &err)) {
        fail_msg("delete %s: %s", id_or_name, err->message);
    }
    g_ptr_array_remove(m->snaps, sn);
}

static void m_resize(Model *m, QimgImage *img, uint64_t size)
{
    blk_error_clear();
    if (blk_truncate(img->node, size, true, BLK_PREALLOC_OFF, true) < 0) {
        fail_msg("resize: %s", blk_error_message());
    }
    m->data = g_realloc(m->data, size);
    if (size > m->size) {
        memset(m->data + m->size, 0, size - m->size);
    }
    m->size = size;
}

/* "id:name:vm-state-size;" for each snapshot in qemu-img info's output. */
static char *snapshot_list_of(const char *info)
{
    g_autoptr(GRegex) re = NULL;
    g_autoptr(GMatchInfo) mi = NULL;
    GString *s = g_string_new("");

    re = g_regex_new("\"name\": \"([^\"]*)\",.*?\"id\": \"([^\"]*)\",\\s*"
                     "\"vm-state-size\": ([0-9]+)",
                     G_REGEX_DOTALL, 0, NULL);
    g_regex_match(re, info, 0, &mi);
    while (g_match_info_matches(mi)) {
        g_autofree char *name = g_match_info_fetch(mi, 1);
        g_autofree char *id = g_match_info_fetch(mi, 2);
        g_autofree char *vm = g_match_info_fetch(mi, 3);
        g_string_append_printf(s, "%s:%s:%s;", id, name, vm);
        g_match_info_next(mi, NULL);
    }
    return g_string_free(s, FALSE);
}

/* qemu-img info --output=json of path; the virtual size in *vsize (if not
 * NULL). */
static char *qemu_info(const char *path, uint64_t *vsize)
{
    static const char key[] = "\"virtual-size\": ";
    char *out = NULL;
    const char *at;

    if (tu_run_status(&out, "qemu-img info --output=json '%s'", path) != 0) {
        fail_msg("qemu-img info: %s", out);
    }
    if (vsize) {
        at = strstr(out, key);
        if (!at) {
            fail_msg("no virtual size in qemu-img info's output: %s", out);
        }
        *vsize = g_ascii_strtoull(at + strlen(key), NULL, 10);
    }
    return out;
}

/* "id:name:vm-state-size;" for each snapshot qemu-img lists. */
static char *qemu_snapshot_list(const char *path)
{
    g_autofree char *out = qemu_info(path, NULL);
    return snapshot_list_of(out);
}

/* The file at path (qemu-img's raw output) is size bytes long and holds
 * want[0..want_size) then zeros: compared in chunks, without a buffer of
 * the disk's size (those page faults were most of this test's CPU time). */
static void expect_file(const char *what, const char *step, const uint8_t *want,
                        uint64_t want_size, const char *path, uint64_t size)
{
    uint64_t got_size;
    int64_t at = tu_file_cmp(path, want, want_size, &got_size);

    assert_int_equal(got_size, size);
    if (at >= 0) {
        g_autofree uint8_t *got = read_file(path, &got_size);
        uint8_t w = (uint64_t)at < want_size ? want[at] : 0;
        fail_msg("%s: %s differs at byte %" PRId64 " (0x%02x, want 0x%02x)", step, what,
                 at, got[at], w);
    }
}

/* The checks after every step (image closed). */
static void verify(const char *path, Model *m, const char *step)
{
    g_autofree char *raw = g_strdup_printf("%s.raw", path);
    g_autofree char *out = NULL;
    g_autofree char *list = NULL;
    g_autofree char *info = NULL;
    GString *want = g_string_new("");
    uint64_t size;
    int rc;

    rc = tu_run_status(&out, "qemu-img check '%s'", path);
    if (rc != 0) {
        fail_msg("%s: qemu-img check exit %d:\n%s", step, rc, out);
    }
    info = qemu_info(path, &size);
    assert_int_equal(size, m->size);
    tu_run("qemu-img convert -O raw '%s' '%s'", path, raw);
    expect_file("active disk", step, m->data, m->size, raw, m->size);
    for (guint i = 0; i < m->snaps->len; i++) {
        Snap *sn = g_ptr_array_index(m->snaps, i);
        tu_run("qemu-img convert -l '%s' -O raw '%s' '%s'", sn->id, path, raw);
        g_autofree char *what = g_strdup_printf("snapshot %s (%s)", sn->id, sn->name);
        /* convert -l keeps the current size (zeros past the snapshot's) */
        expect_file(what, step, sn->data, sn->size, raw, m->size);
        g_string_append_printf(want, "%s:%s:%" PRIu64 ";", sn->id, sn->name, sn->vm_size);
    }
    list = snapshot_list_of(info);
    if (strcmp(list, want->str) != 0) {
        fail_msg("%s: qemu-img lists '%s', want '%s'", step, list, want->str);
    }
    g_string_free(want, TRUE);
    unlink(raw);
}

/* ---- sequences ---- */

static void sequence(const char *opts, bool compressed)
{
    g_autofree char *p = tu_fresh("seq.qcow2");
    uint64_t size = MiB_(8);
    Model m;
    QimgImage *img;
    g_autofree char *id1 = NULL, *id2 = NULL, *id3 = NULL, *id4 = NULL;

    tu_run("qemu-img create -q -f qcow2 %s%s '%s' %" PRIu64, *opts ? "-o " : "", opts, p,
           size);
    tu_run("qemu-io -c 'write -q -P 0x11 0 1M' -c 'write -q -P 0x12 %" PRIu64
           " 70000' '%s' >/dev/null",
           MiB_(5) + 3, p);
    if (compressed) {
        tu_run("qemu-io -c 'write -c -q -P 0x13 2M 256k' '%s' >/dev/null", p);
    }
    model_init_from(&m, p);

    img = open_img(p, false, NULL);
    m_write(&m, img, KiB_(512), MiB_(1), 1);
    id1 = m_create(&m, img, "s1", 0);
    assert_string_equal(id1, "1");
    close_img(img);
    verify(p, &m, "create s1");

    img = open_img(p, false, NULL);
    m_write(&m, img, 0, 100000, 2);
    m_write(&m, img, MiB_(7) + 5, 4000, 3);
    id2 = m_create(&m, img, "s2", 0);
    id3 = m_create(&m, img, "s1", 0); /* names need not be unique */
    assert_string_equal(id3, "3");
    m_write(&m, img, MiB_(2) + 100, 300000, 4);
    close_img(img);
    verify(p, &m, "create s2, s1");

    img = open_img(p, false, NULL);
    m_apply(&m, img, "s1"); /* not an ID: the first s1 by name */
    close_img(img);
    verify(p, &m, "apply s1");

    img = open_img(p, false, NULL);
    m_write(&m, img, MiB_(3), 12345, 5);
    m_apply(&m, img, "2"); /* by ID */
    m_write(&m, img, MiB_(6), KiB_(64), 6);
    close_img(img);
    verify(p, &m, "write, apply 2, write");

    img = open_img(p, false, NULL);
    m_delete(&m, img, "1");
    m_write(&m, img, 1000, 3000, 7);
    m_delete(&m, img, "s1"); /* the remaining s1, ID 3 */
    id4 = m_create(&m, img, "s4", 0);
    assert_string_equal(id4, "3"); /* highest ID (2) + 1 */
    close_img(img);
    verify(p, &m, "delete 1, write, delete s1, create s4");

    img = open_img(p, false, NULL);
    m_apply(&m, img, "s4");
    m_delete(&m, img, "s2");
    m_write(&m, img, MiB_(4), KiB_(200), 8);
    m_delete(&m, img, "s4");
    close_img(img);
    verify(p, &m, "apply s4, delete s2, write, delete s4");
    model_clear(&m);
}

#define SEQ_TEST(name, opts, compressed)                                                 \
    static void test_seq_##name(void **state)                                            \
    {                                                                                    \
        TU_REQUIRE_QEMU();                                                               \
        sequence(opts, compressed);                                                      \
    }

SEQ_TEST(default, "", false)
SEQ_TEST(v2, "compat=0.10", false)
SEQ_TEST(c512, "cluster_size=512", false)
SEQ_TEST(c2m, "cluster_size=2M", false)
SEQ_TEST(extl2, "extended_l2=on,cluster_size=128k", false)
SEQ_TEST(refcount4, "refcount_bits=4", false)
SEQ_TEST(lazy, "lazy_refcounts=on", false)
SEQ_TEST(compressed, "cluster_size=4k", true)

/* ---- resize ---- */

static void test_resize(void **state)
{
    TU_REQUIRE_QEMU(); /* first: a skip must leave nothing allocated */
    g_autofree char *p = tu_fresh("resize.qcow2");
    g_autofree char *a = NULL, *b = NULL;
    QimgImage *img;
    Model m;

    tu_run("qemu-img create -q -f qcow2 '%s' 8M", p);
    tu_run("qemu-io -c 'write -q -P 0x21 7M 1M' '%s' >/dev/null", p);
    model_init_from(&m, p);

    img = open_img(p, false, NULL);
    a = m_create(&m, img, "small", 0);
    m_resize(&m, img, MiB_(16));
    m_write(&m, img, MiB_(12), MiB_(1), 9);
    b = m_create(&m, img, "big", 0);
    m_apply(&m, img, "small"); /* shrinks back to 8 MiB */
    close_img(img);
    verify(p, &m, "apply small after a grow");

    img = open_img(p, false, NULL);
    m_apply(&m, img, "big"); /* grows to 16 MiB */
    m_resize(&m, img, MiB_(4));
    m_write(&m, img, MiB_(3), 1000, 10);
    close_img(img);
    verify(p, &m, "apply big, shrink");

    img = open_img(p, false, NULL);
    m_apply(&m, img, "big");
    close_img(img);
    verify(p, &m, "apply big after a shrink");
    model_clear(&m);
}

/* ---- the VM state ---- */

#define VM_CONST 200192 /* bytes of 0xa5 first (qemu-io read -P checks them) */
#define VM_SIZE 300017

static void vm_pattern(uint8_t *buf)
{
    memset(buf, 0xa5, VM_CONST);
    fill(buf + VM_CONST, VM_SIZE - VM_CONST, 0x42);
}

static void save_vm(QimgImage *img, const uint8_t *buf, uint64_t from, uint64_t to,
                    uint64_t piece)
{
    for (uint64_t pos = from; pos < to; pos += piece) {
        BlkIOV q;
        iov_init_buf(&q, (void *)(buf + pos), (size_t)MIN(piece, to - pos));
        assert_int_equal(img->node->drv->save_vmstate(img->node, pos, &q), 0);
    }
}

static void load_vm_n_equal(QimgImage *img, const uint8_t *want, uint64_t n)
{
    g_autofree uint8_t *got = g_malloc(n);
    BlkIOV q;
    iov_init_buf(&q, got, n);
    assert_int_equal(img->node->drv->load_vmstate(img->node, 0, &q), 0);
    assert_memory_equal(got, want, n);
}

static void load_vm_equal(QimgImage *img, const uint8_t *want)
{
    load_vm_n_equal(img, want, VM_SIZE);
}

typedef struct VmJob {
    QimgImage *img;
    const uint8_t *buf;
    uint64_t from, to;
} VmJob;

static gpointer vm_thread(gpointer opaque)
{
    VmJob *j = opaque;
    /* pieces that do not line up with clusters, in decreasing order */
    for (uint64_t pos = j->to; pos > j->from;) {
        uint64_t start = pos >= j->from + 7777 ? pos - 7777 : j->from;
        BlkIOV q;
        iov_init_buf(&q, (void *)(j->buf + start), (size_t)(pos - start));
        int ret = j->img->node->drv->save_vmstate(j->img->node, start, &q);
        if (ret < 0) {
            g_printerr("save_vmstate at %" PRIu64 " (+%" PRIu64 "): %s (%s)\n", start,
                       pos - start, g_strerror(-ret),
                       blk_error_message() ? blk_error_message() : "");
            return GINT_TO_POINTER(1);
        }
        pos = start;
    }
    return NULL;
}

static void vmstate_case(const char *opts, bool threads)
{
    g_autofree char *p = tu_fresh("vm.qcow2");
    g_autofree char *copy = g_strdup_printf("%s.copy", p);
    g_autofree char *id = NULL;
    g_autofree char *out = NULL;
    g_autofree uint8_t *vm = g_malloc(VM_SIZE);
    QimgImage *img;
    Model m;

    tu_run("qemu-img create -q -f qcow2 %s%s '%s' 8M", *opts ? "-o " : "", opts, p);
    tu_run("qemu-io -c 'write -q -P 0x31 0 1M' '%s' >/dev/null", p);
    model_init_from(&m, p);
    vm_pattern(vm);

    img = open_img(p, false, NULL);
    if (threads) {
        VmJob jobs[4];
        GThread *t[4];
        for (int i = 0; i < 4; i++) {
            jobs[i] = (VmJob){img, vm, (uint64_t)i * VM_SIZE / 4,
                              (uint64_t)(i + 1) * VM_SIZE / 4};
            t[i] = g_thread_new("vm", vm_thread, &jobs[i]);
        }
        for (int i = 0; i < 4; i++) {
            assert_null(g_thread_join(t[i]));
        }
    } else {
        save_vm(img, vm, 0, VM_SIZE, 4099);
    }
    load_vm_equal(img, vm); /* the active area before the snapshot */
    id = m_create(&m, img, "vm", VM_SIZE);
    close_img(img);
    verify(p, &m, "snapshot with VM state");

    /* the active copy was dropped: the active area reads as zeros */
    assert_int_equal(tu_run_status(&out, "qemu-io -c 'read -b -P 0 0 %d' '%s'",
                                   ROUND_UP(VM_SIZE, 512), p),
                     0);
    if (strstr(out, "Pattern verification failed") || !strstr(out, "read 300032/")) {
        fail_msg("active VM state area after the snapshot: %s", out);
    }
    g_clear_pointer(&out, g_free);

    /* QEMU's loadvm path reads the state */
    tu_run("cp '%s' '%s' && qemu-img snapshot -a vm '%s'", p, copy, copy);
    assert_int_equal(
        tu_run_status(&out, "qemu-io -c 'read -b -P 0xa5 0 %d' '%s'", VM_CONST, copy), 0);
    if (strstr(out, "Pattern verification failed") || !strstr(out, "read 200192/")) {
        fail_msg("qemu-io read -b after qemu-img snapshot -a: %s", out);
    }

    /* ours: in a snapshot view, and after apply */
    img = open_img(p, true, id);
    load_vm_equal(img, vm);
    api_image_destroy(img);
    img = open_img(p, false, NULL);
    m_apply(&m, img, "vm");
    load_vm_equal(img, vm);
    close_img(img);
    verify(p, &m, "apply vm");
    model_clear(&m);
}

static void test_vmstate(void **state)
{
    TU_REQUIRE_QEMU();
    vmstate_case("", false);
    vmstate_case("compat=0.10", false);
    vmstate_case("cluster_size=512", true);
    vmstate_case("extended_l2=on", true);
}

/* A state size that does not fit 32 bits: 0 in the old field, the size in
 * the extra data (QEMU). */
static void test_vmstate_large(void **state)
{
    TU_REQUIRE_QEMU(); /* first: a skip must leave nothing allocated */
    g_autofree char *p = tu_fresh("vmbig.qcow2");
    g_autofree uint8_t *file = NULL;
    const uint64_t big = (UINT64_C(5) << 30) + 3;
    QimgImage *img;
    uint64_t n, off;
    Model m;

    tu_run("qemu-img create -q -f qcow2 '%s' 8M", p);
    model_init_from(&m, p);
    img = open_img(p, false, NULL);
    g_free(m_create(&m, img, "big", big));
    close_img(img);
    verify(p, &m, "5 GiB state size");
    file = read_file(p, &n);
    off = load_be64(file + QCOW2_HDR_SNAPSHOTS_OFFSET);
    assert_int_equal(load_be32(file + QCOW2_HDR_NB_SNAPSHOTS), 1);
    assert_int_equal(load_be32(file + off + 32), 0);
    assert_int_equal(load_be32(file + off + 36), 24);
    assert_int_equal(load_be64(file + off + 40), big);
    assert_int_equal(load_be64(file + off + 48), MiB_(8));
    assert_int_equal((int64_t)load_be64(file + off + 56), -1);
    model_clear(&m);
}

/* ---- refcount overflow ---- */

static void test_refcount_overflow(void **state)
{
    TU_REQUIRE_QEMU(); /* first: a skip must leave nothing allocated */
    g_autofree char *p1 = tu_fresh("r1.qcow2");
    g_autofree char *p2 = tu_fresh("r2.qcow2");
    g_autoptr(GError) err = NULL;
    QimgSnapshotParams sp = {.struct_size = sizeof(QimgSnapshotParams), .name = "s"};
    QimgImage *img;
    Model m;

    /* 1 bit: no cluster can be shared */
    tu_run("qemu-img create -q -f qcow2 -o refcount_bits=1 '%s' 8M", p1);
    tu_run("qemu-io -c 'write -q -P 0x41 0 1M' '%s' >/dev/null", p1);
    model_init_from(&m, p1);
    img = open_img(p1, false, NULL);
    assert_null(qimg_snapshot_create(img, &sp, &err));
    assert_int_equal(err->code, EINVAL);
    g_clear_error(&err);
    m_write(&m, img, 4096, 4096, 11); /* still writable, in place */
    close_img(img);
    verify(p1, &m, "refcount_bits=1");
    model_clear(&m);

    /* 2 bits: two snapshots share a cluster (refcount 3), a third fails */
    tu_run("qemu-img create -q -f qcow2 -o refcount_bits=2 '%s' 8M", p2);
    tu_run("qemu-io -c 'write -q -P 0x42 0 1M' '%s' >/dev/null", p2);
    model_init_from(&m, p2);
    img = open_img(p2, false, NULL);
    g_free(m_create(&m, img, "a", 0));
    g_free(m_create(&m, img, "b", 0));
    assert_null(qimg_snapshot_create(img, &sp, &err));
    assert_int_equal(err->code, EINVAL);
    g_clear_error(&err);
    close_img(img);
    verify(p2, &m, "refcount_bits=2, third snapshot");
    img = open_img(p2, false, NULL);
    m_delete(&m, img, "a");
    g_free(m_create(&m, img, "c", 0));
    m_write(&m, img, 0, 70000, 12);
    close_img(img);
    verify(p2, &m, "refcount_bits=2, delete and create");
    model_clear(&m);
}

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

/* ---- refusals, limits, the table's contents ---- */

static void test_refusals(void **state)
{
    TU_REQUIRE_QEMU(); /* first: a skip must leave nothing allocated */
    g_autofree char *p = tu_fresh("ref.qcow2");
    g_autofree char *df = tu_fresh("data.qcow2");
    g_autofree char *dfraw = g_strdup_printf("%s.raw", df);
    g_autoptr(GError) err = NULL;
    QimgSnapshotParams sp = {.struct_size = sizeof(QimgSnapshotParams), .name = "x"};
    QimgImage *img;
    GPtrArray *list;

    tu_run("qemu-img create -q -f qcow2 '%s' 1M && qemu-img snapshot -c s1 '%s'", p, p);
    img = open_img(p, false, NULL);
    assert_false(qimg_snapshot_apply(img, "nope", &err));
    assert_int_equal(err->code, ENOENT);
    assert_string_equal(err->message, "Can't find snapshot");
    g_clear_error(&err);
    assert_false(qimg_snapshot_delete(img, "nope", &err));
    assert_int_equal(err->code, ENOENT);
    g_clear_error(&err);
    list = qimg_snapshot_list(img, &err);
    assert_non_null(list);
    assert_int_equal(list->len, 1);
    assert_string_equal(((QimgSnapshotInfo *)g_ptr_array_index(list, 0))->id, "1");
    assert_string_equal(((QimgSnapshotInfo *)g_ptr_array_index(list, 0))->name, "s1");
    assert_int_equal(((QimgSnapshotInfo *)g_ptr_array_index(list, 0))->disk_size,
                     MiB_(1));
    qimg_snapshot_list_free(list);
    api_image_destroy(img);

    /* read-only images */
    img = open_img(p, true, NULL);
    assert_null(qimg_snapshot_create(img, &sp, &err));
    assert_int_equal(err->code, EACCES);
    g_clear_error(&err);
    api_image_destroy(img);

    /* external data file: ENOTSUP (as qemu-img: "-95 (Operation not
     * supported)"; apply refuses before the lookup) */
    tu_run("qemu-img create -q -f qcow2 -o data_file='%s' '%s' 1M", dfraw, df);
    img = open_img(df, false, NULL);
    assert_null(qimg_snapshot_create(img, &sp, &err));
    assert_int_equal(err->code, ENOTSUP);
    g_clear_error(&err);
    assert_false(qimg_snapshot_apply(img, "x", &err));
    assert_int_equal(err->code, ENOTSUP);
    g_clear_error(&err);
    api_image_destroy(img);
}

/* Write a table of nb entries (extra data 24 + unknown, ID i + 1, name "n")
 * over the image's table (in_place: same offset, same L1 tables; it must
 * fit in the clusters of the old one) or at the end of the file (L1 offset
 * and size 0; the clusters are not refcounted). */
static void put_table(const char *path, uint32_t nb, const uint8_t *unknown,
                      uint32_t unknown_len, uint64_t disk_size, bool in_place)
{
    uint64_t len;
    g_autofree uint8_t *file = read_file(path, &len);
    uint64_t cs = UINT64_C(1) << load_be32(file + QCOW2_HDR_CLUSTER_BITS);
    uint64_t off = ROUND_UP(len, cs), pos = 0, old = 0, total;
    GByteArray *t = g_byte_array_new();

    if (in_place) {
        assert_int_equal(load_be32(file + QCOW2_HDR_NB_SNAPSHOTS), nb);
        off = old = load_be64(file + QCOW2_HDR_SNAPSHOTS_OFFSET);
    }
    for (uint32_t i = 0; i < nb; i++) {
        char id[16];
        uint8_t e[64] = {0};
        int id_len = snprintf(id, sizeof(id), "%u", i + 1);
        if (in_place) {
            old = ROUND_UP(old, 8);
            memcpy(e, file + old, 12); /* L1 offset and size */
            old += 40 + load_be32(file + old + 36) + load_be16(file + old + 12) +
                   load_be16(file + old + 14);
        }
        pos = ROUND_UP(pos, 8);
        g_byte_array_set_size(t, (guint)pos);
        store_be16(e + 12, (uint16_t)id_len);
        store_be16(e + 14, 1);
        store_be32(e + 36, 24 + unknown_len);
        store_be64(e + 48, disk_size);
        store_be64(e + 56, UINT64_MAX);
        g_byte_array_append(t, e, 64);
        if (unknown_len) {
            g_byte_array_append(t, unknown, unknown_len);
        }
        g_byte_array_append(t, (const uint8_t *)id, (guint)id_len);
        g_byte_array_append(t, (const uint8_t *)"n", 1);
        pos = t->len;
    }
    total = MAX(len, off + ROUND_UP(t->len, cs));
    if (in_place) {
        assert_true(t->len <= cs);
    }
    file = g_realloc(file, total);
    if (total > len) {
        memset(file + len, 0, total - len);
    }
    memcpy(file + off, t->data, t->len);
    store_be64(file + QCOW2_HDR_SNAPSHOTS_OFFSET, off);
    store_be32(file + QCOW2_HDR_NB_SNAPSHOTS, nb);
    assert_true(g_file_set_contents(path, (const char *)file, (gssize)total, NULL));
    g_byte_array_unref(t);
}

static void test_limits(void **state)
{
    TU_REQUIRE_QEMU(); /* first: a skip must leave nothing allocated */
    g_autofree char *p = tu_fresh("many.qcow2");
    g_autofree char *q = tu_fresh("extra.qcow2");
    g_autofree char *name300 = g_strnfill(300, 'x');
    g_autofree char *id = NULL;
    g_autoptr(GError) err = NULL;
    QimgSnapshotParams sp = {.struct_size = sizeof(QimgSnapshotParams), .name = "x"};
    uint64_t len, off;
    QimgImage *img;
    GPtrArray *list;

    /* 65536 snapshots: refused with EFBIG before anything changes */
    tu_run("qemu-img create -q -f qcow2 '%s' 1M", p);
    put_table(p, QCOW2_MAX_SNAPSHOTS, NULL, 0, MiB_(1), false);
    img = open_img(p, false, NULL);
    assert_null(qimg_snapshot_create(img, &sp, &err));
    assert_int_equal(err->code, EFBIG);
    assert_string_equal(err->message, "File too large");
    g_clear_error(&err);
    api_image_destroy(img);

    /* unknown extra data is kept; IDs continue after the highest; long
     * names are cut to 255 bytes */
    static const uint8_t unknown[8] = "UNKNOWN!";
    tu_run("qemu-img create -q -f qcow2 '%s' 1M && qemu-io -c 'write -q -P 1 0 64k' '%s' "
           ">/dev/null",
           q, q);
    for (int i = 0; i < 3; i++) {
        tu_run("qemu-img snapshot -c n '%s'", q);
    }
    put_table(q, 3, unknown, sizeof(unknown), MiB_(1), true);
    img = open_img(q, false, NULL);
    sp.name = name300;
    id = qimg_snapshot_create(img, &sp, &err);
    assert_non_null(id);
    assert_string_equal(id, "4");
    list = qimg_snapshot_list(img, &err);
    assert_int_equal(list->len, 4);
    assert_int_equal(strlen(((QimgSnapshotInfo *)g_ptr_array_index(list, 3))->name), 255);
    qimg_snapshot_list_free(list);
    assert_true(qimg_snapshot_delete(img, "2", &err));
    api_image_destroy(img);
    g_autofree uint8_t *file = read_file(q, &len);
    off = load_be64(file + QCOW2_HDR_SNAPSHOTS_OFFSET);
    assert_int_equal(load_be32(file + QCOW2_HDR_NB_SNAPSHOTS), 3);
    assert_int_equal(load_be32(file + off + 36), 32);
    assert_memory_equal(file + off + 64, unknown, 8);
    assert_memory_equal(file + off + 72, "1n", 2);
    /* the next entry (ID 3), 8-byte aligned after 40 + 32 + 1 + 1 bytes */
    assert_int_equal(load_be32(file + off + 80 + 36), 32);
    assert_memory_equal(file + off + 80 + 64, unknown, 8);
    assert_memory_equal(file + off + 80 + 72, "3n", 2);
    assert_int_equal(load_be32(file + off + 160 + 36), 24);
    assert_int_equal(tu_run_status(NULL, "qemu-img check '%s'", q), 0);
}

/* Empty image: a snapshot of a 0-entry L1 (QEMU writes L1 offset 0). */
static void test_empty(void **state)
{
    TU_REQUIRE_QEMU(); /* first: a skip must leave nothing allocated */
    g_autofree char *p = tu_fresh("empty.qcow2");
    QimgImage *img;
    Model m;

    tu_run("qemu-img create -q -f qcow2 '%s' 0", p);
    model_init_from(&m, p);
    img = open_img(p, false, NULL);
    g_free(m_create(&m, img, "e", 0));
    m_apply(&m, img, "e");
    close_img(img);
    verify(p, &m, "empty image");
    img = open_img(p, false, NULL);
    m_delete(&m, img, "e");
    close_img(img);
    verify(p, &m, "empty image, deleted");
    model_clear(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seq_default),
        cmocka_unit_test(test_seq_v2),
        cmocka_unit_test(test_seq_c512),
        cmocka_unit_test(test_seq_c2m),
        cmocka_unit_test(test_seq_extl2),
        cmocka_unit_test(test_seq_refcount4),
        cmocka_unit_test(test_seq_lazy),
        cmocka_unit_test(test_seq_compressed),
        cmocka_unit_test(test_resize),
        cmocka_unit_test(test_vmstate),
        cmocka_unit_test(test_vmstate_large),
        cmocka_unit_test(test_refcount_overflow),
        cmocka_unit_test(test_fault_snapshot_table),
        cmocka_unit_test(test_fault_l1_update),
        cmocka_unit_test(test_fault_refblock_update),
        cmocka_unit_test(test_crash_savevm),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_empty),
    };
    return tu_run_group_tests("qcow2-snapshot", tests);
}
