/*
 * tests/test-qcow2-bitmap-codec-table.c: the persistent bitmaps' codec
 * (qcow2/bitmap-codec.c): bitmap tables, and directories and tables on
 * images qemu-img wrote.  Each test cites the invariants it checks
 * ("bitmap-codec.c invariant N"):
 *
 *  - bitmap tables: round trip and each reserved-bit rule (bitmap-codec.c
 *    invariant 8), the table size a disk needs against QEMU's formula;
 *  - directories and tables created by qemu-img bitmap --add (and filled
 *    by qemu-io): decoded as qemu-img describes them and re-encoded byte
 *    for byte (bitmap-codec.c invariants 1, 3, 4, 7, 8); the in-use flag
 *    meta.c sets through the codec (bitmap-codec.c invariants 5, 7).
 *
 * The header extension and the directory on bytes in memory are
 * test-qcow2-bitmap-codec-dir.c's.
 */
#include "test-qcow2-bitmap-codec-fixture.h"

/* ---- bitmap tables (bitmap-codec.c invariants 7, 8) ---- */

static void test_table(void **state)
{
    static const uint64_t entries[] = {
        0, QCOW2_BTE_ALL_ONES, 2 * CS, UINT64_C(0x3fff0000), (UINT64_C(1) << 30) - CS, 0};
    const uint32_t n = G_N_ELEMENTS(entries);
    Qcow2Bitmap bm = make_bm("b0", 0, 16, 2 * CS, n, 0);
    uint8_t buf[G_N_ELEMENTS(entries) * 8], again[sizeof(buf)];
    uint64_t out[G_N_ELEMENTS(entries)];

    memset(buf, 0xa5, sizeof(buf));
    qcow2_bitmap_table_encode(entries, n, buf);
    assert_int_equal(load_be64(buf + 8), 1);
    assert_int_equal(load_be64(buf + 16), 2 * CS);
    for (size_t k = 0; k < G_N_ELEMENTS(policies); k++) {
        memset(out, 0xa5, sizeof(out));
        assert_int_equal(qcow2_bitmap_table_decode(buf, &bm, 0, &img, policies[k], out),
                         0);
        assert_memory_equal(out, entries, sizeof(entries));
        qcow2_bitmap_table_encode(out, n, again);
        assert_memory_equal(again, buf, sizeof(buf));
    }

    static const struct {
        uint64_t v;
        const char *why; /* NULL: only the strict decoder refuses it */
    } bad[] = {
        {UINT64_C(1) << 1, "has reserved bits set"},
        {UINT64_C(1) << 8, "has reserved bits set"},
        {2 * CS | (UINT64_C(1) << 56), "has reserved bits set"},
        {UINT64_C(1) << 63, "has reserved bits set"},
        {2 * CS | QCOW2_BTE_ALL_ONES, "has the all-ones flag set with a cluster offset"},
        {2 * CS + 512, "points to an offset not aligned to the cluster size"},
        {UINT64_C(1) << 30, NULL}, /* past the end of the file */
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autofree char *want = NULL;

        store_be64(buf + 24, bad[i].v);
        blk_error_clear();
        want = g_strdup_printf(
            "Bitmap 'b0': bitmap table entry 3 (0x%016" PRIx64 ") %s", bad[i].v,
            bad[i].why ? bad[i].why : "points past the end of the file");
        expect_error(qcow2_bitmap_table_decode(buf, &bm, 5, &img, QCOW2_BITMAP_OPEN, out),
                     EINVAL, want);
        if (bad[i].why) {
            expect_error(
                qcow2_bitmap_table_decode(buf, &bm, 5, &img, QCOW2_BITMAP_CHECK, out),
                EINVAL,
                "Could not read bitmap_table table from image for bitmap 5: "
                "Invalid argument");
        } else {
            assert_int_equal(
                qcow2_bitmap_table_decode(buf, &bm, 5, &img, QCOW2_BITMAP_CHECK, out), 0);
        }
    }
    qcow2_bitmap_clear(&bm);
}

/* The table size a disk needs, against QEMU's check_dir_entry formula:
 * a table of T entries covers (T * cluster_size * 8) << granularity bytes
 * (bitmap-codec.c invariant 3). */
static void test_table_size_for(void **state)
{
    static const uint64_t disks[] = {0,
                                     1,
                                     512,
                                     65536,
                                     DISK,
                                     DISK + 1,
                                     UINT64_C(1) << 30,
                                     UINT64_C(3) << 40,
                                     (UINT64_C(1) << 44) + 512};
    static const uint32_t grans[] = {9, 16, 17, 31};
    static const uint32_t cbs[] = {9, 12, 16, 21};

    assert_int_equal(qcow2_bitmap_table_size_for(DISK, 16, 16), 1);
    assert_int_equal(qcow2_bitmap_table_size_for(UINT64_C(1) << 30, 9, 16), 4);
    assert_int_equal(qcow2_bitmap_table_size_for(0, 9, 9), 0);
    assert_int_equal(qcow2_bitmap_table_size_for(UINT64_MAX, 0, 9), UINT64_C(1) << 52);
    assert_int_equal(qcow2_bitmap_table_size_for(UINT64_MAX, 63, 21), 1);
    for (size_t d = 0; d < G_N_ELEMENTS(disks); d++) {
        for (size_t g = 0; g < G_N_ELEMENTS(grans); g++) {
            for (size_t c = 0; c < G_N_ELEMENTS(cbs); c++) {
                uint64_t t = qcow2_bitmap_table_size_for(disks[d], grans[g], cbs[c]);
                uint64_t covers = ((t << cbs[c]) * 8) << grans[g];
                uint64_t less = (((t - 1) << cbs[c]) * 8) << grans[g];

                assert_true(disks[d] <= covers);
                if (t > 0) {
                    assert_true(disks[d] > less);
                }
            }
        }
    }
}

/* ---- reading through a source (bitmap-codec.c invariants 3, 4, 6) ---- */

typedef struct MemFile {
    const uint8_t *buf;
    uint64_t base, len;
} MemFile;

/* [base, base + len) holds buf; anything else fails (-EIO, no message). */
static int mem_read(void *opaque, uint64_t offset, void *buf, uint64_t len)
{
    MemFile *f = opaque;

    if (offset < f->base || offset - f->base > f->len ||
        len > f->len - (offset - f->base)) {
        return -EIO;
    }
    memcpy(buf, f->buf + (offset - f->base), len);
    return 0;
}

static void test_read(void **state)
{
    Qcow2Bitmap bms[3];
    g_autofree char *eio =
        g_strdup_printf("Failed to read bitmap directory: %s", g_strerror(EIO));
    g_autofree char *teio = g_strdup_printf(
        "Could not read bitmap_table table from image for bitmap 1: %s", g_strerror(EIO));
    g_autofree char *topen = g_strdup_printf(
        "Bitmap 'b1': failed to read its bitmap table: %s", g_strerror(EIO));
    Qcow2BitmapDir dir;
    uint64_t *table;

    base_bms(bms);
    g_autoptr(GByteArray) a = encode(bms, 3);
    MemFile f = {.buf = a->data, .base = 5 * CS, .len = a->len};
    const Qcow2BitmapSource src = {.read = mem_read, .opaque = &f};
    Qcow2BitmapsExt x = {
        .nb_bitmaps = 3, .directory_size = a->len, .directory_offset = 5 * CS};

    for (size_t k = 0; k < G_N_ELEMENTS(policies); k++) {
        blk_error_clear();
        assert_int_equal(qcow2_bitmap_dir_read(&src, &x, &img, policies[k], &dir), 0);
        assert_int_equal(dir.nb, 3);
        assert_bm_equal(&dir.bms[2], &bms[2]);
        qcow2_bitmap_dir_free(&dir);
    }
    /* a read error, in qemu-img check's words or prefixed */
    x.directory_offset = 6 * CS;
    expect_error(qcow2_bitmap_dir_read(&src, &x, &img, QCOW2_BITMAP_CHECK, &dir), EIO,
                 "Failed to read bitmap directory");
    expect_error(qcow2_bitmap_dir_read(&src, &x, &img, QCOW2_BITMAP_OPEN, &dir), EIO,
                 eio);
    expect_error(qcow2_bitmap_dir_read(&src, &x, &img, QCOW2_BITMAP_RAW, &dir), EIO, eio);
    /* the strict decoder wants the directory inside the file, before reading */
    x.directory_offset = img.file_size - 64;
    expect_error(qcow2_bitmap_dir_read(&src, &x, &img, QCOW2_BITMAP_OPEN, &dir), EINVAL,
                 "Bitmap directory at 0x3fffffc0 (96 bytes) lies outside the file");
    /* the size is checked before anything is allocated or read */
    x.directory_size = UINT64_C(1) << 40;
    expect_error(qcow2_bitmap_dir_read(&src, &x, &img, QCOW2_BITMAP_CHECK, &dir), EINVAL,
                 "Requested bitmap directory size is too big");

    /* tables: the table of b1 (one entry) is read from the "file" */
    uint8_t tb[8];
    MemFile tf = {.buf = tb, .base = 3 * CS, .len = sizeof(tb)};
    const Qcow2BitmapSource tsrc = {.read = mem_read, .opaque = &tf};
    store_be64(tb, 7 * CS);
    for (size_t k = 0; k < G_N_ELEMENTS(policies); k++) {
        blk_error_clear();
        assert_int_equal(
            qcow2_bitmap_table_read(&tsrc, &bms[1], 1, &img, policies[k], &table), 0);
        assert_int_equal(table[0], 7 * CS);
        g_free(table);
    }
    bms[1].table_offset = 8 * CS;
    expect_error(
        qcow2_bitmap_table_read(&tsrc, &bms[1], 1, &img, QCOW2_BITMAP_CHECK, &table), EIO,
        teio);
    assert_null(table);
    expect_error(
        qcow2_bitmap_table_read(&tsrc, &bms[1], 1, &img, QCOW2_BITMAP_OPEN, &table), EIO,
        topen);
    bms[1].table_size = 0x2001; /* more than 512 MiB of clusters: not even allocated */
    expect_error(
        qcow2_bitmap_table_read(&tsrc, &bms[1], 1, &img, QCOW2_BITMAP_CHECK, &table),
        EFBIG, "Bitmap 'b1': bitmap table size 8193 exceeds the supported maximum");
    clear_bms(bms, 3);
}

/* ---- what qemu-img writes ---- */

typedef struct QemuImage {
    gchar *bytes;
    gsize len;
    Qcow2Header h;
    Qcow2Extensions ext;
    uint64_t ext_pos; /* the bitmaps extension's data in the file */
    Qcow2BitmapImage img;
} QemuImage;

static void qemu_image_load(QemuImage *q, const char *path)
{
    const uint8_t *b;
    uint64_t off;

    memset(q, 0, sizeof(*q));
    assert_true(g_file_get_contents(path, &q->bytes, &q->len, NULL));
    b = (const uint8_t *)q->bytes;
    assert_int_equal(qcow2_header_decode(b, q->len, &q->h), 0);
    assert_int_equal(qcow2_read_extensions(b, &q->h, &q->ext), 0);
    assert_true(q->ext.has_bitmaps);
    for (off = q->h.header_length;; off += 8 + ROUND_UP(load_be32(b + off + 4), 8)) {
        uint32_t type = load_be32(b + off);
        assert_int_not_equal(type, QCOW2_EXT_END);
        if (type == QCOW2_EXT_BITMAPS) {
            q->ext_pos = off + 8;
            break;
        }
    }
    q->img = (Qcow2BitmapImage){
        .cluster_bits = q->h.cluster_bits, .disk_size = q->h.size, .file_size = q->len};
}

static void qemu_image_free(QemuImage *q)
{
    qcow2_extensions_free(&q->ext);
    g_free(q->bytes);
}

typedef struct Want {
    const char *name;
    uint8_t gran;
    uint32_t flags;
} Want;

/*
 * Decode the directory of the image at path under OPEN and CHECK, compare
 * with want, and encode it (and the extension, and every table) again:
 * the bytes of the file.  The tables are returned (g_free each, then the
 * array) in dir->bms order.
 */
static uint64_t **check_qemu_image(QemuImage *q, const Want *want, uint32_t nb,
                                   Qcow2BitmapDir *dir)
{
    const uint8_t *b = (const uint8_t *)q->bytes;
    const Qcow2BitmapsExt *x = &q->ext.bitmaps;
    uint8_t ext[QCOW2_BITMAPS_EXT_SIZE];
    uint64_t **tables = g_new0(uint64_t *, nb);

    assert_int_equal(x->nb_bitmaps, nb);
    qcow2_bitmaps_ext_encode(x, ext);
    assert_memory_equal(ext, b + q->ext_pos, sizeof(ext));
    assert_true(qcow2_range_within(x->directory_offset, x->directory_size, q->len));

    for (int k = 1; k >= 0; k--) { /* CHECK, then OPEN (kept) */
        Qcow2BitmapPolicy policy = k ? QCOW2_BITMAP_CHECK : QCOW2_BITMAP_OPEN;

        blk_error_clear();
        if (qcow2_bitmap_dir_decode(b + x->directory_offset, x->directory_size, nb,
                                    &q->img, policy, dir) != 0) {
            fail_msg("policy %d: %s", policy, blk_error_message());
        }
        assert_int_equal(dir->nb, nb);
        assert_int_equal(dir->size, x->directory_size);
        if (k) {
            qcow2_bitmap_dir_free(dir);
        }
    }
    g_autoptr(GByteArray) a = encode(dir->bms, dir->nb);
    assert_int_equal(a->len, x->directory_size);
    assert_memory_equal(a->data, b + x->directory_offset, a->len);

    for (uint32_t i = 0; i < nb; i++) {
        const Qcow2Bitmap *bm = &dir->bms[i];
        uint64_t tbytes = UINT64_C(8) * bm->table_size;

        assert_int_equal(bm->name_size, strlen(want[i].name));
        assert_string_equal(bm->name, want[i].name);
        assert_int_equal(bm->granularity_bits, want[i].gran);
        assert_int_equal(bm->flags, want[i].flags);
        assert_int_equal(bm->type, QCOW2_BITMAP_TYPE_DIRTY_TRACKING);
        assert_int_equal(bm->extra_data_size, 0);
        /* qemu-img sizes the table exactly */
        assert_int_equal(bm->table_size,
                         qcow2_bitmap_table_size_for(q->h.size, bm->granularity_bits,
                                                     q->h.cluster_bits));
        assert_true(qcow2_range_within(bm->table_offset, tbytes, q->len));

        g_autofree uint8_t *again = g_malloc(tbytes);
        tables[i] = g_new(uint64_t, bm->table_size);
        for (size_t k = 0; k < G_N_ELEMENTS(policies); k++) {
            assert_int_equal(qcow2_bitmap_table_decode(b + bm->table_offset, bm, i,
                                                       &q->img, policies[k], tables[i]),
                             0);
        }
        qcow2_bitmap_table_encode(tables[i], bm->table_size, again);
        assert_memory_equal(again, b + bm->table_offset, tbytes);
    }
    return tables;
}

static void free_tables(uint64_t **tables, uint32_t nb)
{
    for (uint32_t i = 0; i < nb; i++) {
        g_free(tables[i]);
    }
    g_free(tables);
}

/* The byte of bitmap bm's data at offset i (0 if the cluster is not
 * allocated). */
static uint8_t data_byte(const QemuImage *q, const uint64_t *table, uint64_t i)
{
    uint64_t cs = UINT64_C(1) << q->h.cluster_bits;
    uint64_t off = table[i / cs] & QCOW2_BTE_OFFSET_MASK;

    return off ? (uint8_t)q->bytes[off + i % cs] : 0;
}

static void test_qemu_img(void **state)
{
    g_autofree char *path = NULL;
    g_autofree char *name1023 = g_strnfill(1023, 'q');
    const Want want[] = {
        {"b0", 16, QCOW2_BITMAP_AUTO},
        {"seven77", 17, 0},
        {"eight888", 9, QCOW2_BITMAP_AUTO},
        {name1023, 21, QCOW2_BITMAP_AUTO},
    };
    const uint32_t nb = G_N_ELEMENTS(want);
    QemuImage q;
    Qcow2BitmapDir dir;
    uint64_t **tables;

    TU_REQUIRE_QEMU_IMG();
    path = tu_fresh("qemu.qcow2");
    tu_run("qemu-img create -q -f qcow2 '%s' 4G", path);
    tu_run("qemu-img bitmap --add '%s' b0", path);
    tu_run("qemu-img bitmap --add -g 128k --disable '%s' seven77", path);
    tu_run("qemu-img bitmap --add -g 512 '%s' eight888", path);
    tu_run("qemu-img bitmap --add -g 2M '%s' %s", path, name1023);

    qemu_image_load(&q, path);
    tables = check_qemu_image(&q, want, nb, &dir);
    /* 4 GiB at 512 bytes: 1 MiB of bitmap, 16 clusters, none allocated yet */
    assert_int_equal(dir.bms[2].table_size, 16);
    for (uint32_t i = 0; i < nb; i++) {
        for (uint32_t k = 0; k < dir.bms[i].table_size; k++) {
            assert_int_equal(tables[i][k], 0);
        }
    }
    free_tables(tables, nb);
    qcow2_bitmap_dir_free(&dir);
    qemu_image_free(&q);

    /* qemu-io writes [0, 1M) and [10M, 10M + 64k); QEMU stores the enabled
     * bitmaps when it closes the image */
    TU_REQUIRE_QEMU();
    tu_run("qemu-io -f qcow2 -c 'write 0 1M' -c 'write 10M 64k' '%s'", path);
    qemu_image_load(&q, path);
    tables = check_qemu_image(&q, want, nb, &dir);
    /* b0, 64 KiB a bit: bits 0-15 and 160 */
    assert_int_equal(data_byte(&q, tables[0], 0), 0xff);
    assert_int_equal(data_byte(&q, tables[0], 1), 0xff);
    assert_int_equal(data_byte(&q, tables[0], 2), 0);
    assert_int_equal(data_byte(&q, tables[0], 20), 0x01);
    /* disabled: nothing stored */
    for (uint32_t k = 0; k < dir.bms[1].table_size; k++) {
        assert_int_equal(tables[1][k], 0);
    }
    /* 512 bytes a bit: bytes 0-255 and 2560-2575, all in the first cluster */
    assert_int_equal(data_byte(&q, tables[2], 255), 0xff);
    assert_int_equal(data_byte(&q, tables[2], 256), 0);
    assert_int_equal(data_byte(&q, tables[2], 2560), 0xff);
    assert_int_equal(data_byte(&q, tables[2], 2576), 0);
    assert_int_not_equal(tables[2][0], 0);
    for (uint32_t k = 1; k < dir.bms[2].table_size; k++) {
        assert_int_equal(tables[2][k], 0);
    }
    /* 2 MiB a bit: bits 0 and 5 */
    assert_int_equal(data_byte(&q, tables[3], 0), 0x21);
    free_tables(tables, nb);
    qcow2_bitmap_dir_free(&dir);
    qemu_image_free(&q);
}

/* bitmap-store.c invariant 1: a read-write open marks the bitmaps, the
 * disabled one too (as QEMU's), in use in place through the codec, every
 * other byte equal; invariant 3: close stores them, in use cleared, in a
 * new directory, the disabled one's bits unchanged. */
static void check_flags(const char *path, uint32_t first, uint32_t second,
                        const char *before)
{
    QemuImage q;
    Qcow2BitmapDir dir;

    qemu_image_load(&q, path);
    const Qcow2BitmapsExt *x = &q.ext.bitmaps;
    assert_int_equal(
        qcow2_bitmap_dir_decode((const uint8_t *)q.bytes + x->directory_offset,
                                x->directory_size, 2, &q.img, QCOW2_BITMAP_OPEN, &dir),
        0);
    assert_int_equal(dir.bms[0].flags, first);
    assert_int_equal(dir.bms[1].flags, second);
    if (before) {
        for (uint32_t i = 0; i < 2; i++) {
            dir.bms[i].flags &= ~(uint32_t)QCOW2_BITMAP_IN_USE;
        }
        g_autoptr(GByteArray) a = encode(dir.bms, dir.nb);
        assert_memory_equal(a->data, before + x->directory_offset, a->len);
    }
    qcow2_bitmap_dir_free(&dir);
    qemu_image_free(&q);
}

static void test_qemu_img_in_use(void **state)
{
    g_autofree char *path = NULL;
    g_autofree gchar *before = NULL;
    g_autoptr(GError) err = NULL;
    uint8_t data[4096];
    gsize len;

    TU_REQUIRE_QEMU_IMG();
    path = tu_fresh("inuse.qcow2");
    tu_run("qemu-img create -q -f qcow2 '%s' 64M", path);
    tu_run("qemu-img bitmap --add '%s' first", path);
    tu_run("qemu-img bitmap --add -g 1M --disable '%s' second-one", path);
    assert_true(g_file_get_contents(path, &before, &len, NULL));

    BlkOpenOptions o = {.format = "qcow2"};
    BlkNode *node = api_open_node(path, &o, NULL, &err);
    assert_non_null(node);
    check_flags(path, QCOW2_BITMAP_IN_USE | QCOW2_BITMAP_AUTO, QCOW2_BITMAP_IN_USE,
                before);
    memset(data, 0x5a, sizeof(data));
    assert_int_equal(blk_pwrite(node, 0, data, sizeof(data), 0), 0);
    check_flags(path, QCOW2_BITMAP_IN_USE | QCOW2_BITMAP_AUTO, QCOW2_BITMAP_IN_USE,
                before);
    blk_close(node);
    check_flags(path, QCOW2_BITMAP_AUTO, 0, NULL);
    tu_run("qemu-img check -q '%s'", path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_table_size_for),
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_qemu_img),
        cmocka_unit_test(test_qemu_img_in_use),
    };
    return tu_run_group_tests("bitmap-codec", tests);
}
