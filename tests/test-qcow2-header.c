/*
 * tests/test-qcow2-header.c: qcow2 header and extension decoding, and
 * every validation rule of header.c / snapshot.c, one bad field at a time,
 * through the real open path (api_open_node) with the exact message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-qcow2-image.h"
#include "test-util.h"

#include <errno.h>
#include <stdlib.h>

static int seq;

/* Open t and expect failure with a message containing 'want'. */
static void expect_open_error_rw(const TImg *t, bool read_only, const char *want)
{
    g_autofree char *name = g_strdup_printf("bad-%d.qcow2", ++seq);
    g_autofree char *path = timg_write(t, tu_tmpdir(), name);
    g_autoptr(GError) err = NULL;
    BlkNode *img = timg_open(path, read_only, NULL, &err);

    if (img) {
        fprintf(stderr, "open succeeded, expected: %s\n", want);
        blk_close(img);
        fail();
    }
    g_autofree char *prefix = g_strdup_printf("Could not open '%s': ", path);
    if (!g_str_has_prefix(err->message, prefix) || !strstr(err->message, want)) {
        fprintf(stderr, "message: %s\nexpected: %s\n", err->message, want);
        fail();
    }
}

static void expect_open_error(const TImg *t, const char *want)
{
    expect_open_error_rw(t, true, want);
}

static BlkNode *open_ok(const TImg *t, bool read_only)
{
    g_autofree char *name = g_strdup_printf("good-%d.qcow2", ++seq);
    g_autofree char *path = timg_write(t, tu_tmpdir(), name);
    g_autoptr(GError) err = NULL;
    BlkNode *img = timg_open(path, read_only, NULL, &err);

    if (!img) {
        fprintf(stderr, "open failed: %s\n", err->message);
        fail();
    }
    return img;
}

static void assert_reads_ab(BlkNode *img)
{
    uint8_t b[512];
    assert_int_equal(blk_pread(img, 0, b, sizeof(b)), 0);
    for (size_t i = 0; i < sizeof(b); i++) {
        assert_int_equal(b[i], 0xab);
    }
}

/* The driver's info of img (free with blk_info_clear + g_free). */
static BlkInfo *driver_info(BlkNode *img)
{
    BlkInfo *info = g_new0(BlkInfo, 1);
    assert_int_equal(img->drv->get_info(img, info), 0);
    return info;
}

static void test_decode_fields(void **state)
{
    TImg t = timg_new(3, 16, 1 << 30, false);
    Qcow2Header h;

    timg_set64(&t, QCOW2_HDR_BACKING_FILE_OFFSET, 0x1000);
    timg_set32(&t, QCOW2_HDR_BACKING_FILE_SIZE, 7);
    timg_set32(&t, QCOW2_HDR_CRYPT_METHOD, 0);
    timg_set32(&t, QCOW2_HDR_NB_SNAPSHOTS, 3);
    timg_set64(&t, QCOW2_HDR_SNAPSHOTS_OFFSET, 0x70000);
    timg_set64(&t, QCOW2_HDR_COMPATIBLE_FEATURES, 1);
    timg_set64(&t, QCOW2_HDR_AUTOCLEAR_FEATURES, 0x8000000000000002ull);
    timg_set32(&t, QCOW2_HDR_REFCOUNT_ORDER, 6);
    assert_int_equal(qcow2_header_decode(t.buf, t.len, &h), 0);
    assert_int_equal(h.magic, QCOW2_MAGIC);
    assert_int_equal(h.version, 3);
    assert_int_equal(h.backing_file_offset, 0x1000);
    assert_int_equal(h.backing_file_size, 7);
    assert_int_equal(h.cluster_bits, 16);
    assert_int_equal(h.size, 1 << 30);
    assert_int_equal(h.l1_size, 2);
    assert_int_equal(h.l1_table_offset, 3 << 16);
    assert_int_equal(h.refcount_table_offset, 1 << 16);
    assert_int_equal(h.refcount_table_clusters, 1);
    assert_int_equal(h.nb_snapshots, 3);
    assert_int_equal(h.snapshots_offset, 0x70000);
    assert_int_equal(h.compatible_features, 1);
    assert_int_equal(h.autoclear_features, 0x8000000000000002ull);
    assert_int_equal(h.refcount_order, 6);
    assert_int_equal(h.header_length, 112);
    timg_free(&t);

    /* v2: fields past byte 72 are not part of the header */
    t = timg_new(2, 9, 1 << 20, false);
    timg_set32(&t, QCOW2_HDR_REFCOUNT_ORDER, 7);
    timg_set32(&t, QCOW2_HDR_HEADER_LENGTH, 5);
    assert_int_equal(qcow2_header_decode(t.buf, t.len, &h), 0);
    assert_int_equal(h.refcount_order, 4);
    assert_int_equal(h.header_length, 72);
    assert_int_equal(h.incompatible_features, 0);
    BlkNode *img = open_ok(&t, true);
    assert_reads_ab(img);
    assert_int_equal(img->size, 1 << 20);
    blk_close(img);
    timg_free(&t);
}

static void test_open_valid(void **state)
{
    for (int v = 2; v <= 3; v++) {
        for (uint32_t cb = 9; cb <= 21; cb += 3) {
            TImg t = timg_new(v, cb, 3 << 20, false);
            BlkNode *img = open_ok(&t, true);
            assert_reads_ab(img);
            assert_int_equal(img->size, 3 << 20);
            blk_close(img);
            timg_free(&t);
        }
    }
    /* QEMU keeps whole sectors: 1000 bytes -> 512 */
    TImg t = timg_new(3, 9, 1000, false);
    BlkNode *img = open_ok(&t, true);
    assert_int_equal(img->size, 512);
    blk_close(img);
    timg_free(&t);
}

typedef struct FieldCase {
    int version;
    size_t offset;
    int width;
    uint64_t value;
    const char *want;
} FieldCase;

static const FieldCase field_cases[] = {
    {3, QCOW2_HDR_MAGIC, 4, 0x514649fa, "Image is not in qcow2 format"},
    {3, QCOW2_HDR_VERSION, 4, 1, "Unsupported qcow2 version 1"},
    {3, QCOW2_HDR_VERSION, 4, 4, "Unsupported qcow2 version 4"},
    {3, QCOW2_HDR_CLUSTER_BITS, 4, 8, "Unsupported cluster size: 2^8"},
    {3, QCOW2_HDR_CLUSTER_BITS, 4, 22, "Unsupported cluster size: 2^22"},
    {3, QCOW2_HDR_HEADER_LENGTH, 4, 100, "qcow2 header too short (header_length 100"},
    {3, QCOW2_HDR_HEADER_LENGTH, 4, 1024, "qcow2 header exceeds cluster size"},
    {2, QCOW2_HDR_BACKING_FILE_OFFSET, 8, 0x1000, "Invalid backing file offset 0x1000"},
    {3, QCOW2_HDR_COMPRESSION_TYPE, 1, 2, "qcow2: unknown compression type: 2"},
    {3, QCOW2_HDR_COMPRESSION_TYPE, 1, 1,
     "Compression type incompatible feature bit must be set"},
    {3, QCOW2_HDR_INCOMPATIBLE_FEATURES, 8, QCOW2_INCOMPAT_COMPRESSION,
     "Compression type incompatible feature bit must not be set"},
    {3, QCOW2_HDR_INCOMPATIBLE_FEATURES, 8, 0x21,
     "Unsupported qcow2 feature(s): Unknown incompatible feature: 20"},
    {3, QCOW2_HDR_REFCOUNT_ORDER, 4, 7,
     "Reference count entry width too large; may not exceed 64 bits"},
    {3, QCOW2_HDR_CRYPT_METHOD, 4, 3, "Unsupported encryption method 3"},
    {3, QCOW2_HDR_CRYPT_METHOD, 4, 1,
     "Parameter 'encrypt.key-secret' is required for cipher"},
    {2, QCOW2_HDR_CRYPT_METHOD, 4, 2,
     "Parameter 'encrypt.key-secret' is required for cipher"},
    {3, QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS, 4, 0,
     "Image does not contain a reference count table"},
    {3, QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS, 4, 16385, "Reference count table too large"},
    {3, QCOW2_HDR_REFCOUNT_TABLE_OFFSET, 8, 0x201,
     "Reference count table offset 0x201 is not aligned to the cluster size"},
    {3, QCOW2_HDR_REFCOUNT_TABLE_OFFSET, 8, 0xc800,
     "Reference count table (offset 0xc800, 512 bytes) extends past the end of the file"},
    {3, QCOW2_HDR_REFCOUNT_TABLE_OFFSET, 8, 0xfffffffffffffe00ull,
     "Reference count table offset 0xfffffffffffffe00 invalid"},
    {3, QCOW2_HDR_NB_SNAPSHOTS, 4, 65537, "Snapshot table too large"},
    {3, QCOW2_HDR_SNAPSHOTS_OFFSET, 8, 0x123,
     "Snapshot table offset 0x123 is not aligned to the cluster size"},
    {3, QCOW2_HDR_L1_SIZE, 4, 4194305, "L1 table too large"},
    {3, QCOW2_HDR_L1_TABLE_OFFSET, 8, 0x1234,
     "L1 table offset 0x1234 is not aligned to the cluster size"},
    {2, QCOW2_HDR_L1_TABLE_OFFSET, 8, 0x10000,
     "L1 table (offset 0x10000, 256 bytes) "
     "extends past the end of the file (4096"},
    {3, QCOW2_HDR_L1_SIZE, 4, 31, "L1 table is too small (l1_size 31, 32 entries needed"},
    {3, QCOW2_HDR_SIZE, 8, UINT64_C(1) << 62, "Image is too big"},
    {3, QCOW2_HDR_SIZE, 8, UINT64_MAX, "Image is too big"},
    {3, QCOW2_HDR_AUTOCLEAR_FEATURES, 8, QCOW2_AUTOCLEAR_DATA_FILE_RAW,
     "data-file-raw requires a data file"},
    {3, QCOW2_HDR_INCOMPATIBLE_FEATURES, 8, QCOW2_INCOMPAT_DATA_FILE,
     "'data-file' is required for this image"},
    {3, QCOW2_HDR_BACKING_FILE_OFFSET, 8, 513, "Invalid backing file offset 0x201"},
};

static void test_bad_fields(void **state)
{
    for (size_t i = 0; i < G_N_ELEMENTS(field_cases); i++) {
        const FieldCase *c = &field_cases[i];
        TImg t = timg_new(c->version, 9, 1 << 20, false);
        switch (c->width) {
        case 1:
            timg_set8(&t, c->offset, (uint8_t)c->value);
            break;
        case 4:
            timg_set32(&t, c->offset, (uint32_t)c->value);
            break;
        case 8:
            timg_set64(&t, c->offset, c->value);
            break;
        }
        expect_open_error(&t, c->want);
        timg_free(&t);
    }
}

static void test_feature_names(void **state)
{
    TImg t = timg_new(3, 9, 1 << 20, false);
    uint8_t table[3 * 48] = {0};

    table[0] = QCOW2_FEAT_TYPE_INCOMPATIBLE;
    table[1] = 5;
    strcpy((char *)table + 2, "shiny feature");
    table[48] = QCOW2_FEAT_TYPE_COMPATIBLE; /* same bit, other type: not used */
    table[49] = 9;
    strcpy((char *)table + 50, "compat nine");
    table[96] = QCOW2_FEAT_TYPE_INCOMPATIBLE;
    table[97] = 0;
    strcpy((char *)table + 98, "dirty bit");
    timg_add_ext(&t, QCOW2_EXT_FEATURE_TABLE, table, sizeof(table));
    timg_set64(&t, QCOW2_HDR_INCOMPATIBLE_FEATURES, (1u << 5) | (1u << 9) | 1);
    expect_open_error(&t, "Unsupported qcow2 feature(s): shiny feature, Unknown "
                          "incompatible feature: 200");
    /* A broken extension area still names what it can (lenient first pass). */
    timg_set32(&t, t.ext_off, 0x99999999);
    timg_set32(&t, t.ext_off + 4, 0x10000);
    timg_set64(&t, QCOW2_HDR_INCOMPATIBLE_FEATURES, 1u << 5);
    expect_open_error(&t, "Unsupported qcow2 feature(s): shiny feature");
    timg_free(&t);
}

static void test_corrupt_bit(void **state)
{
    TImg t = timg_new(3, 9, 1 << 20, false);

    timg_set64(&t, QCOW2_HDR_INCOMPATIBLE_FEATURES, QCOW2_INCOMPAT_CORRUPT);
    expect_open_error_rw(&t, false,
                         "qcow2: Image is corrupt; cannot be opened read/write");
    BlkNode *img = open_ok(&t, true); /* read-only is fine, as in QEMU */
    BlkInfo *info = driver_info(img);
    assert_true(info->corrupt);
    assert_string_equal(info->compat, "1.1");
    blk_info_clear(info);
    g_free(info);
    blk_close(img);
    timg_free(&t);
}

static void test_extended_l2_cluster_size(void **state)
{
    TImg t = timg_new(3, 13, 1 << 20, true);
    expect_open_error(&t, "Unsupported subcluster size: 256 (extended L2 entries require "
                          "a cluster size of at least 16384 bytes");
    timg_free(&t);
    t = timg_new(3, 14, 1 << 20, true);
    BlkNode *img = open_ok(&t, true);
    assert_reads_ab(img);
    blk_close(img);
    timg_free(&t);
}

static void test_extensions(void **state)
{
    TImg t = timg_new(3, 12, 1 << 20, false);
    const uint8_t unknown[5] = {1, 2, 3, 4, 5};
    Qcow2Header h;
    Qcow2Extensions ext;

    timg_add_ext(&t, QCOW2_EXT_BACKING_FORMAT, "qcow2", 5);
    timg_add_ext(&t, 0x12345678, unknown, sizeof(unknown));
    timg_add_ext(&t, QCOW2_EXT_DATA_FILE, "data.raw", 8);
    timg_set64(&t, QCOW2_HDR_BACKING_FILE_OFFSET, 0x800);
    timg_set32(&t, QCOW2_HDR_BACKING_FILE_SIZE, 8);
    memcpy(t.buf + 0x800, "base.img", 8);
    assert_int_equal(qcow2_header_parse(t.buf, t.cs, t.len, false, false, NULL, &h, &ext),
                     0);
    assert_string_equal(ext.backing_format, "qcow2");
    assert_string_equal(ext.data_file, "data.raw");
    assert_int_equal(ext.unknown->len, 1);
    Qcow2UnknownExt *u = g_ptr_array_index(ext.unknown, 0);
    assert_int_equal(u->magic, 0x12345678);
    assert_int_equal(u->len, 5);
    assert_memory_equal(u->data, unknown, 5);
    char *name = NULL;
    assert_int_equal(qcow2_read_backing_name(t.buf, &h, &name), 0);
    assert_string_equal(name, "base.img");
    g_free(name);
    qcow2_extensions_free(&ext);
    timg_free(&t);
}

static void test_bad_extensions(void **state)
{
    uint8_t bm[24] = {0};
    TImg t = timg_new(3, 9, 1 << 20, false);

    timg_set32(&t, t.ext_off, 0x99999999);
    timg_set32(&t, t.ext_off + 4, 0x10000);
    expect_open_error(&t, "Header extension too large (type 0x99999999, length 65536");
    timg_free(&t);

    t = timg_new(3, 9, 1 << 20, false);
    timg_add_ext(&t, QCOW2_EXT_BACKING_FORMAT, "0123456789abcdef", 16);
    expect_open_error(&t, "ERROR: ext_backing_format: len=16 too large (>=16)");
    timg_free(&t);

    t = timg_new(3, 9, 1 << 20, false);
    timg_add_ext(&t, QCOW2_EXT_CRYPTO_HEADER, bm, 16);
    expect_open_error(&t, "CRYPTO header extension only expected with LUKS");
    timg_free(&t);

    /* bitmaps: length checked always, the rest when the autoclear bit says
     * the extension is consistent */
    struct {
        uint32_t len, nb, reserved;
        uint64_t dir_size, dir_offset;
        const char *want;
    } bc[] = {
        {16, 1, 0, 0, 0, "bitmaps_ext: Invalid extension length 16"},
        {24, 0, 0, 0, 0, "found bitmaps extension with zero bitmaps"},
        {24, 1, 1, 0, 0, "bitmaps_ext: Reserved field is not zero"},
        {24, 65536, 0, 0, 0, "exceeding the QEMU supported maximum of 65535"},
        {24, 1, 0, 0, 0x201, "invalid bitmap directory offset 0x201"},
        {24, 1, 0, 0x7fffffff, 0, "bitmap directory size (2147483647) exceeds"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bc); i++) {
        t = timg_new(3, 9, 1 << 20, false);
        store_be32(bm, bc[i].nb);
        store_be32(bm + 4, bc[i].reserved);
        store_be64(bm + 8, bc[i].dir_size);
        store_be64(bm + 16, bc[i].dir_offset);
        timg_add_ext(&t, QCOW2_EXT_BITMAPS, bm, bc[i].len);
        timg_set64(&t, QCOW2_HDR_AUTOCLEAR_FEATURES, QCOW2_AUTOCLEAR_BITMAPS);
        expect_open_error(&t, bc[i].want);
        if (i > 0) { /* inconsistent bitmaps are ignored */
            timg_set64(&t, QCOW2_HDR_AUTOCLEAR_FEATURES, 0);
            blk_close(open_ok(&t, true));
        }
        timg_free(&t);
    }
}

static void test_backing_name(void **state)
{
    TImg t = timg_new(3, 12, 1 << 20, false);

    timg_set64(&t, QCOW2_HDR_BACKING_FILE_OFFSET, 0x200);
    timg_set32(&t, QCOW2_HDR_BACKING_FILE_SIZE, 1024);
    expect_open_error(&t, "Backing file name too long (backing_file_size 1024");
    timg_set64(&t, QCOW2_HDR_BACKING_FILE_OFFSET, t.cs - 10);
    timg_set32(&t, QCOW2_HDR_BACKING_FILE_SIZE, 11);
    expect_open_error(&t, "Backing file name too long (backing_file_size 11");
    /* An empty name is no backing file (QEMU). */
    timg_set32(&t, QCOW2_HDR_BACKING_FILE_SIZE, 0);
    BlkNode *img = open_ok(&t, true);
    assert_null(img->backing_filename);
    blk_close(img);
    /* A missing backing file fails in the generic layer. */
    timg_set32(&t, QCOW2_HDR_BACKING_FILE_SIZE, 10);
    memcpy(t.buf + t.cs - 10, "nosuch.img", 10);
    expect_open_error(&t, "nosuch.img");
    timg_free(&t);
}

static void test_data_file_missing(void **state)
{
    TImg t = timg_new(3, 9, 1 << 20, false);
    timg_add_ext(&t, QCOW2_EXT_DATA_FILE, "missing.raw", 11);
    timg_set64(&t, QCOW2_HDR_INCOMPATIBLE_FEATURES, QCOW2_INCOMPAT_DATA_FILE);
    expect_open_error(&t, "Could not open '");
    timg_free(&t);
}

/* Snapshot table entry at cluster 6 with an L1 copy at cluster 7. */
static void put_snapshot(TImg *t, uint32_t extra_size, const char *id, const char *name)
{
    size_t o = timg_c(t, 6);
    timg_set32(t, QCOW2_HDR_NB_SNAPSHOTS, 1);
    timg_set64(t, QCOW2_HDR_SNAPSHOTS_OFFSET, o);
    timg_set64(t, o, timg_c(t, 7));
    timg_set32(t, o + 8, 1);
    timg_set16(t, o + 12, (uint16_t)strlen(id));
    timg_set16(t, o + 14, (uint16_t)strlen(name));
    timg_set32(t, o + 16, 1700000000);
    timg_set64(t, o + 24, 123456789);
    timg_set32(t, o + 32, 0x1000);
    timg_set32(t, o + 36, extra_size);
    if (extra_size >= 24) {
        timg_set64(t, o + 40, 0x100000000ull); /* vm_state_size_large */
        timg_set64(t, o + 48, 1 << 19);        /* disk_size */
        timg_set64(t, o + 56, 77);             /* icount */
    }
    size_t p = o + 40 + MIN(extra_size, 200u);
    memcpy(t->buf + p, id, strlen(id));
    memcpy(t->buf + p + strlen(id), name, strlen(name));
    timg_set64(t, timg_c(t, 7), timg_c(t, 4));
}

static void test_snapshot_table(void **state)
{
    TImg t = timg_new(3, 9, 1 << 20, false);
    g_autoptr(GError) err = NULL;

    put_snapshot(&t, 24, "1", "snap one");
    BlkNode *img = open_ok(&t, true);
    BlkInfo *info = driver_info(img);
    assert_int_equal(info->snapshots->len, 1);
    BlkSnapshotInfo *si = &g_array_index(info->snapshots, BlkSnapshotInfo, 0);
    assert_string_equal(si->id, "1");
    assert_string_equal(si->name, "snap one");
    assert_int_equal(si->vm_state_size, 0x100000000ull);
    assert_int_equal(si->disk_size, 1 << 19);
    assert_int_equal(si->icount, 77);
    assert_int_equal(si->date_sec, 1700000000);
    assert_int_equal(si->vm_clock_nsec, 123456789);
    assert_int_equal(si->l1_offset, timg_c(&t, 7));
    blk_info_clear(info);
    g_free(info);
    blk_close(img);

    /* the view reads through the snapshot's L1, keeping the current size */
    g_autofree char *path = timg_write(&t, tu_tmpdir(), "snapview.qcow2");
    img = timg_open(path, true, "snap one", &err);
    assert_non_null(img);
    assert_reads_ab(img);
    assert_int_equal(img->size, 1 << 20);
    blk_close(img);
    img = timg_open(path, true, "2", &err);
    assert_null(img);
    assert_non_null(strstr(err->message, "Failed to load snapshot: Can't find snapshot"));
    g_clear_error(&err);

    /* without extra data: 32-bit VM state size, disk size = image size */
    put_snapshot(&t, 0, "1", "old");
    img = open_ok(&t, true);
    info = driver_info(img);
    si = &g_array_index(info->snapshots, BlkSnapshotInfo, 0);
    assert_int_equal(si->vm_state_size, 0x1000);
    assert_int_equal(si->disk_size, 1 << 20);
    assert_int_equal(si->icount, -1);
    blk_info_clear(info);
    g_free(info);
    blk_close(img);

    put_snapshot(&t, 1025, "1", "x");
    expect_open_error(&t,
                      "Too much extra metadata in snapshot table entry 0 (1025 bytes");

    /* the name runs past the end of the file: zeros there, as in QEMU
     * (snapshot.c invariant 2) */
    put_snapshot(&t, 24, "1", "x");
    timg_set16(&t, timg_c(&t, 6) + 14, 0xffff);
    img = open_ok(&t, true);
    info = driver_info(img);
    assert_int_equal(info->snapshots->len, 1);
    si = &g_array_index(info->snapshots, BlkSnapshotInfo, 0);
    assert_string_equal(si->id, "1");
    assert_true(g_str_has_prefix(si->name, "x"));
    blk_info_clear(info);
    g_free(info);
    blk_close(img);

    /* a bad L1 is only an error when the snapshot is used */
    put_snapshot(&t, 24, "1", "bigl1");
    timg_set32(&t, timg_c(&t, 6) + 8, 4194305);
    blk_close(open_ok(&t, true));
    g_autofree char *p2 = timg_write(&t, tu_tmpdir(), "snapbad.qcow2");
    img = timg_open(p2, true, "bigl1", &err);
    assert_null(img);
    assert_non_null(strstr(err->message, "Snapshot L1 table too large"));
    timg_free(&t);
}

/* header.c invariant 6: the encoder is the decoder's inverse, for v2 and
 * v3 headers of every cluster size, and the extensions it writes (backing
 * format, data file, the feature name table) are what the parser reads. */
static void test_encode_round_trip(void **state)
{
    (void)state;
    GRand *r = g_rand_new_with_seed(6);

    for (int round = 0; round < 200; round++) {
        uint32_t bits = 9 + (uint32_t)g_rand_int_range(r, 0, 13);
        size_t cs = (size_t)1 << bits;
        g_autofree uint8_t *buf = g_malloc0(cs);
        Qcow2Header h =
                        {
                            .magic = QCOW2_MAGIC,
                            .version = round % 3 == 0 ? 2 : 3,
                            .cluster_bits = bits,
                            .size = (uint64_t)g_rand_int(r) << 9,
                            .l1_size = g_rand_int(r),
                            .l1_table_offset = (uint64_t)g_rand_int(r) << bits,
                            .refcount_table_offset = (uint64_t)g_rand_int(r) << bits,
                            .refcount_table_clusters = g_rand_int(r),
                            .nb_snapshots = g_rand_int(r),
                            .snapshots_offset = (uint64_t)g_rand_int(r) << bits,
                            .crypt_method = 0,
                        },
                    d;
        if (h.version == 3) {
            h.incompatible_features = (uint64_t)g_rand_int(r) << 32 | g_rand_int(r);
            h.compatible_features = g_rand_int(r);
            h.autoclear_features = g_rand_int(r);
            h.refcount_order = (uint32_t)g_rand_int_range(r, 0, 7);
            h.header_length =
                round % 2 ? QCOW2_HDR_V3_FULL_LENGTH : QCOW2_HDR_V3_MIN_LENGTH;
            h.compression_type = h.header_length > QCOW2_HDR_COMPRESSION_TYPE ? 1 : 0;
        } else {
            h.refcount_order = 4;
            h.header_length = QCOW2_HDR_V2_LENGTH;
        }
        size_t pos = qcow2_header_encode(&h, buf, cs);
        assert_int_equal(pos, h.header_length);
        /* backing name just after the end extension, as qemu-img puts it */
        size_t n =
            qcow2_header_ext_encode(buf, pos, cs, QCOW2_EXT_BACKING_FORMAT, "qcow2", 5);
        assert_int_equal(n, 16);
        pos += n;
        pos += qcow2_header_ext_encode(buf, pos, cs, QCOW2_EXT_DATA_FILE, "d.raw", 5);
        if (h.version == 3 && cs > 4096) {
            n = qcow2_feature_table_encode(buf, pos, cs);
            assert_true(n > 0);
            pos += n;
        }
        pos += qcow2_header_ext_encode(buf, pos, cs, QCOW2_EXT_END, NULL, 0);
        h.backing_file_offset = pos;
        h.backing_file_size = 3;
        memcpy(buf + pos, "b.q", 3);
        qcow2_header_encode(&h, buf, cs);

        assert_int_equal(qcow2_header_decode(buf, cs, &d), 0);
        if (d.header_length > QCOW2_HDR_COMPRESSION_TYPE) {
            d.compression_type = buf[QCOW2_HDR_COMPRESSION_TYPE];
        }
        assert_memory_equal(&h, &d, sizeof(h));

        Qcow2Extensions ext = {0};
        assert_int_equal(qcow2_read_extensions(buf, &d, &ext), 0);
        assert_string_equal(ext.backing_format, "qcow2");
        assert_string_equal(ext.data_file, "d.raw");
        assert_int_equal(ext.nb_features, h.version == 3 && cs > 4096 ? 8 : 0);
        if (ext.nb_features) {
            assert_string_equal(ext.features[0].name, "dirty bit");
            assert_string_equal(ext.features[7].name, "raw external data");
        }
        qcow2_extensions_free(&ext);
        g_autofree char *name = NULL;
        assert_int_equal(qcow2_read_backing_name(buf, &d, &name), 0);
        assert_string_equal(name, "b.q");
    }
    /* an extension that does not fit is refused, not truncated */
    uint8_t small[64];
    assert_int_equal(
        qcow2_header_ext_encode(small, 48, sizeof(small), 1, "0123456789ab", 12), 0);
    g_rand_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_fields),
        cmocka_unit_test(test_encode_round_trip),
        cmocka_unit_test(test_open_valid),
        cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_feature_names),
        cmocka_unit_test(test_corrupt_bit),
        cmocka_unit_test(test_extended_l2_cluster_size),
        cmocka_unit_test(test_extensions),
        cmocka_unit_test(test_bad_extensions),
        cmocka_unit_test(test_backing_name),
        cmocka_unit_test(test_data_file_missing),
        cmocka_unit_test(test_snapshot_table),
    };
    return tu_run_group_tests("qcow2-test", tests);
}
