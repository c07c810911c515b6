/*
 * tests/test-qcow2-snapshot-ops.c: internal snapshots of the qcow2 driver
 * (create, apply, delete, list; qcow2/snapshot-write.c), with qemu-img as
 * the oracle.  Skipped without qemu-img / qemu-io.
 *
 *  - sequences of create / apply / delete with writes in between, on
 *    several image variants (v2, v3, 512-byte and 2 MiB clusters,
 *    extended L2, 4-bit refcounts, lazy refcounts, compressed clusters):
 *    after every step the image is closed and qemu-img check finds it
 *    clean (no leaks), the active disk and every snapshot (qemu-img convert
 *    [-l ID]) equal a byte model, and qemu-img lists the snapshots (name,
 *    ID, VM state size) the model expects.  make test compares the disk,
 *    the snapshots and the list after every step of the default image, but
 *    on the other variants only after the last step and one earlier step
 *    each, in turn (so every step is compared on two images at least), and
 *    qemu-img check alone after the others: the 198 converts, 65 infos and
 *    66 checks of a run were most of this program's CPU (about 20 ms of
 *    CPU a qemu-img).  QIMG_LONG=1 compares after every step of every
 *    variant;
 *  - the VM state: written with the driver's save_vmstate (also from
 *    several threads at once), captured by a snapshot with vm_state_size;
 *    QEMU reads it back (qemu-img snapshot -a + qemu-io read -b -P), and so
 *    does the driver (load_vmstate in a snapshot view and after an apply);
 *    the active copy is dropped; a state size past 4 GiB writes 0 into the
 *    32-bit field;
 *  - apply restores the snapshot's disk size after a grow and a shrink;
 *  - refcount overflow (1- and 2-bit refcounts) fails cleanly; the limits
 *    and refusals (65536 snapshots, external data file, unknown snapshot);
 *    IDs, long names and unknown extra data in the table.
 *
 * I/O errors and crashes during these operations are
 * test-qcow2-snapshot-fault.c's.
 */
#include "test-qcow2-snapshot-fixture.h"

/* ---- sequences ---- */

/* After step 'step' (1..6) of variant 'variant' (0: the default image):
 * everything (verify()) where the header says, else qemu-img check. */
static void verify_step(const char *p, Model *m, const char *what, int variant, int step)
{
    if (tu_long_run() || variant == 0 || step == 6 || step == 1 + (variant - 1) % 5) {
        verify(p, m, what);
    } else {
        verify_check(p, what);
    }
}

static void sequence(const char *opts, bool compressed, int variant)
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
    verify_step(p, &m, "create s1", variant, 1);

    img = open_img(p, false, NULL);
    m_write(&m, img, 0, 100000, 2);
    m_write(&m, img, MiB_(7) + 5, 4000, 3);
    id2 = m_create(&m, img, "s2", 0);
    id3 = m_create(&m, img, "s1", 0); /* names need not be unique */
    assert_string_equal(id3, "3");
    m_write(&m, img, MiB_(2) + 100, 300000, 4);
    close_img(img);
    verify_step(p, &m, "create s2, s1", variant, 2);

    img = open_img(p, false, NULL);
    m_apply(&m, img, "s1"); /* not an ID: the first s1 by name */
    close_img(img);
    verify_step(p, &m, "apply s1", variant, 3);

    img = open_img(p, false, NULL);
    m_write(&m, img, MiB_(3), 12345, 5);
    m_apply(&m, img, "2"); /* by ID */
    m_write(&m, img, MiB_(6), KiB_(64), 6);
    close_img(img);
    verify_step(p, &m, "write, apply 2, write", variant, 4);

    img = open_img(p, false, NULL);
    m_delete(&m, img, "1");
    m_write(&m, img, 1000, 3000, 7);
    m_delete(&m, img, "s1"); /* the remaining s1, ID 3 */
    id4 = m_create(&m, img, "s4", 0);
    assert_string_equal(id4, "3"); /* highest ID (2) + 1 */
    close_img(img);
    verify_step(p, &m, "delete 1, write, delete s1, create s4", variant, 5);

    img = open_img(p, false, NULL);
    m_apply(&m, img, "s4");
    m_delete(&m, img, "s2");
    m_write(&m, img, MiB_(4), KiB_(200), 8);
    m_delete(&m, img, "s4");
    close_img(img);
    verify_step(p, &m, "apply s4, delete s2, write, delete s4", variant, 6);
    model_clear(&m);
}

#define SEQ_TEST(name, opts, compressed, variant)                                        \
    static void test_seq_##name(void **state)                                            \
    {                                                                                    \
        TU_REQUIRE_QEMU();                                                               \
        sequence(opts, compressed, variant);                                             \
    }

SEQ_TEST(default, "", false, 0)
SEQ_TEST(v2, "compat=0.10", false, 1)
SEQ_TEST(c512, "cluster_size=512", false, 2)
SEQ_TEST(c2m, "cluster_size=2M", false, 3)
SEQ_TEST(extl2, "extended_l2=on,cluster_size=128k", false, 4)
SEQ_TEST(refcount4, "refcount_bits=4", false, 5)
SEQ_TEST(lazy, "lazy_refcounts=on", false, 6)
SEQ_TEST(compressed, "cluster_size=4k", true, 7)

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
        cmocka_unit_test(test_seq_default),   cmocka_unit_test(test_seq_v2),
        cmocka_unit_test(test_seq_c512),      cmocka_unit_test(test_seq_c2m),
        cmocka_unit_test(test_seq_extl2),     cmocka_unit_test(test_seq_refcount4),
        cmocka_unit_test(test_seq_lazy),      cmocka_unit_test(test_seq_compressed),
        cmocka_unit_test(test_resize),        cmocka_unit_test(test_vmstate),
        cmocka_unit_test(test_vmstate_large), cmocka_unit_test(test_refcount_overflow),
        cmocka_unit_test(test_refusals),      cmocka_unit_test(test_limits),
        cmocka_unit_test(test_empty),
    };
    return tu_run_group_tests("qcow2-snapshot", tests);
}
