/*
 * tests/test-qcow2-bitmap-codec.c: the persistent bitmaps' codec
 * (qcow2/bitmap-codec.c) on bytes in memory and on images qemu-img wrote.
 * Each test cites the invariants it checks ("bitmap-codec.c invariant N"):
 *
 *  - the bitmaps extension: round trip, each of QEMU's rules, inconsistent
 *    bitmaps ignored (bitmap-codec.c invariants 2, 7);
 *  - the directory: encode -> decode -> equal -> the same bytes again,
 *    with names of odd lengths up to 1023 bytes, every flag, extra data
 *    (bitmap-codec.c invariants 1, 7); one broken field at a time with the
 *    exact message of the strict decoder and of qemu-img check's
 *    (bitmap-codec.c invariants 3, 4); what the framing-only decoder keeps
 *    (bitmap-codec.c invariant 5); 65535 entries and the 64 MiB limit
 *    (bitmap-codec.c invariant 6);
 *  - bitmap tables: round trip and each reserved-bit rule (bitmap-codec.c
 *    invariant 8), the table size a disk needs against QEMU's formula;
 *  - directories and tables created by qemu-img bitmap --add (and filled
 *    by qemu-io): decoded as qemu-img describes them and re-encoded byte
 *    for byte (bitmap-codec.c invariants 1, 3, 4, 7, 8); the in-use flag
 *    meta.c sets through the codec (bitmap-codec.c invariants 5, 7).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/block.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define CB 16
#define CS (UINT64_C(1) << CB)
#define DISK (UINT64_C(64) << 20)

static const Qcow2BitmapImage img = {
    .cluster_bits = CB, .disk_size = DISK, .file_size = UINT64_C(1) << 30};

static const Qcow2BitmapPolicy policies[] = {QCOW2_BITMAP_OPEN, QCOW2_BITMAP_CHECK,
                                             QCOW2_BITMAP_RAW};

/* ---- helpers ---- */

static void expect_error(int ret, int errnum, const char *want)
{
    const char *msg = blk_error_message();

    assert_int_equal(ret, -errnum);
    if (!msg || strcmp(msg, want) != 0) {
        fail_msg("message '%s', want '%s'", msg ? msg : "(none)", want);
    }
    blk_error_clear();
}

/* An entry the encoder writes as given (it validates nothing). */
static Qcow2Bitmap make_bm(const char *name, uint32_t flags, uint8_t gran,
                           uint64_t table_offset, uint32_t table_size, uint32_t extra)
{
    Qcow2Bitmap bm = {
        .table_offset = table_offset,
        .table_size = table_size,
        .flags = flags,
        .type = QCOW2_BITMAP_TYPE_DIRTY_TRACKING,
        .granularity_bits = gran,
        .name_size = (uint16_t)strlen(name),
        .name = g_strdup(name),
        .extra_data_size = extra,
    };
    if (extra) {
        bm.extra_data = g_malloc(extra);
        for (uint32_t i = 0; i < extra; i++) {
            bm.extra_data[i] = (uint8_t)(0x80 + i);
        }
    }
    return bm;
}

static void clear_bms(Qcow2Bitmap *bms, uint32_t nb)
{
    for (uint32_t i = 0; i < nb; i++) {
        qcow2_bitmap_clear(&bms[i]);
    }
}

static GByteArray *encode(const Qcow2Bitmap *bms, uint32_t nb)
{
    GByteArray *a = g_byte_array_new();
    uint64_t size = 0;

    assert_true(qcow2_bitmap_dir_size(bms, nb, &size));
    g_byte_array_set_size(a, (guint)size);
    memset(a->data, 0xa5, a->len); /* the encoder writes every byte */
    qcow2_bitmap_dir_encode(bms, nb, a->data);
    return a;
}

static int decode(const GByteArray *a, uint64_t size, uint32_t nb,
                  Qcow2BitmapPolicy policy, Qcow2BitmapDir *dir)
{
    blk_error_clear();
    return qcow2_bitmap_dir_decode(a->data, size, nb, &img, policy, dir);
}

static void assert_bm_equal(const Qcow2Bitmap *a, const Qcow2Bitmap *b)
{
    assert_int_equal(a->table_offset, b->table_offset);
    assert_int_equal(a->table_size, b->table_size);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->granularity_bits, b->granularity_bits);
    assert_int_equal(a->name_size, b->name_size);
    assert_memory_equal(a->name, b->name, a->name_size);
    assert_int_equal(a->name[a->name_size], '\0');
    assert_int_equal(a->extra_data_size, b->extra_data_size);
    if (a->extra_data_size) {
        assert_memory_equal(a->extra_data, b->extra_data, a->extra_data_size);
    } else {
        assert_null(a->extra_data);
    }
}

/* Decode a under policy, compare with want, encode again: the same bytes
 * (bitmap-codec.c invariant 7). */
static void round_trip(const GByteArray *a, const Qcow2Bitmap *want, uint32_t nb,
                       Qcow2BitmapPolicy policy)
{
    Qcow2BitmapDir dir;

    if (decode(a, a->len, nb, policy, &dir) != 0) {
        fail_msg("policy %d: %s", policy, blk_error_message());
    }
    assert_int_equal(dir.nb, nb);
    assert_int_equal(dir.size, a->len);
    for (uint32_t i = 0; i < nb; i++) {
        assert_bm_equal(&dir.bms[i], &want[i]);
    }
    g_autoptr(GByteArray) b = encode(dir.bms, dir.nb);
    assert_int_equal(b->len, a->len);
    assert_memory_equal(b->data, a->data, a->len);
    qcow2_bitmap_dir_free(&dir);
    assert_null(dir.bms);
}

/* ---- the extension (bitmap-codec.c invariants 2, 7) ---- */

static void test_ext(void **state)
{
    const Qcow2BitmapsExt x = {.nb_bitmaps = 65535,
                               .directory_size = QCOW2_MAX_BITMAP_DIRECTORY_SIZE,
                               .directory_offset = UINT64_C(0x7fff0000)};
    uint8_t buf[QCOW2_BITMAPS_EXT_SIZE], again[QCOW2_BITMAPS_EXT_SIZE];
    Qcow2BitmapsExt y;

    memset(buf, 0xa5, sizeof(buf));
    qcow2_bitmaps_ext_encode(&x, buf);
    assert_int_equal(load_be32(buf + QCOW2_BMX_RESERVED), 0);
    assert_int_equal(qcow2_bitmaps_ext_decode(buf, sizeof(buf), CB, true, &y), 0);
    assert_int_equal(y.nb_bitmaps, x.nb_bitmaps);
    assert_int_equal(y.directory_size, x.directory_size);
    assert_int_equal(y.directory_offset, x.directory_offset);
    qcow2_bitmaps_ext_encode(&y, again);
    assert_memory_equal(again, buf, sizeof(buf));

    /* the length first, even for inconsistent bitmaps */
    expect_error(qcow2_bitmaps_ext_decode(buf, 23, CB, false, &y), EINVAL,
                 "bitmaps_ext: Invalid extension length 23 (expected 24)");
    /* inconsistent bitmaps (autoclear bit clear): nothing else is read */
    store_be32(buf + QCOW2_BMX_RESERVED, 1);
    assert_int_equal(qcow2_bitmaps_ext_decode(buf, sizeof(buf), CB, false, &y), 0);
    assert_int_equal(y.nb_bitmaps, 0);
    assert_int_equal(y.directory_offset, 0);

    static const struct {
        uint32_t nb, reserved;
        uint64_t size, offset;
        const char *want;
    } bad[] = {
        {1, 1, 32, CS, "bitmaps_ext: Reserved field is not zero"},
        {65536, 0, 32, CS,
         "bitmaps_ext: Image has 65536 bitmaps, exceeding the QEMU supported maximum "
         "of 65535"},
        {0, 0, 32, CS, "found bitmaps extension with zero bitmaps"},
        {1, 0, 32, CS + 512, "bitmaps_ext: invalid bitmap directory offset 0x10200"},
        {1, 0, QCOW2_MAX_BITMAP_DIRECTORY_SIZE + 1, CS,
         "bitmaps_ext: bitmap directory size (67107841) exceeds the maximum supported "
         "size (67107840)"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        store_be32(buf + QCOW2_BMX_NB_BITMAPS, bad[i].nb);
        store_be32(buf + QCOW2_BMX_RESERVED, bad[i].reserved);
        store_be64(buf + QCOW2_BMX_DIRECTORY_SIZE, bad[i].size);
        store_be64(buf + QCOW2_BMX_DIRECTORY_OFFSET, bad[i].offset);
        expect_error(qcow2_bitmaps_ext_decode(buf, sizeof(buf), CB, true, &y), EINVAL,
                     bad[i].want);
    }
}

/* ---- directory round trips (bitmap-codec.c invariants 1, 7) ---- */

static void test_dir_round_trip(void **state)
{
    g_autofree char *name1023 = g_strnfill(1023, 'n');
    Qcow2Bitmap bms[] = {
        make_bm("a", QCOW2_BITMAP_AUTO, 16, 2 * CS, 1, 0),
        make_bm("seven77", 0, 9, 3 * CS, 16, 0),
        make_bm("eight888", QCOW2_BITMAP_IN_USE | QCOW2_BITMAP_AUTO, 31, 5 * CS, 1, 0),
        make_bm("nine99999", QCOW2_BITMAP_IN_USE, 20, 6 * CS, 1, 0),
        make_bm(name1023, QCOW2_BITMAP_AUTO, 17, 7 * CS, 1, 0),
    };
    const uint32_t nb = G_N_ELEMENTS(bms);
    g_autoptr(GByteArray) a = encode(bms, nb);
    uint64_t off = 0;

    /* the layout: 8-byte aligned entries, zero padding, the last one too */
    for (uint32_t i = 0; i < nb; i++) {
        const uint8_t *e = a->data + off;
        uint64_t body = QCOW2_BITMAP_ENTRY_HEADER_SIZE + bms[i].name_size;
        uint64_t len = qcow2_bitmap_entry_size(&bms[i]);

        assert_int_equal(len, ROUND_UP(body, 8));
        assert_int_equal(load_be64(e + QCOW2_BME_TABLE_OFFSET), bms[i].table_offset);
        assert_int_equal(load_be32(e + QCOW2_BME_TABLE_SIZE), bms[i].table_size);
        assert_int_equal(load_be32(e + QCOW2_BME_FLAGS), bms[i].flags);
        assert_int_equal(e[QCOW2_BME_TYPE], 1);
        assert_int_equal(e[QCOW2_BME_GRANULARITY_BITS], bms[i].granularity_bits);
        assert_int_equal(load_be16(e + QCOW2_BME_NAME_SIZE), bms[i].name_size);
        assert_int_equal(load_be32(e + QCOW2_BME_EXTRA_DATA_SIZE), 0);
        assert_memory_equal(e + QCOW2_BME_EXTRA, bms[i].name, bms[i].name_size);
        for (uint64_t k = body; k < len; k++) {
            assert_int_equal(e[k], 0);
        }
        off += len;
    }
    assert_int_equal(off, a->len);
    assert_int_equal(a->len % 8, 0);

    for (size_t k = 0; k < G_N_ELEMENTS(policies); k++) {
        round_trip(a, bms, nb, policies[k]);
    }
    clear_bms(bms, nb);
}

/* Extra data and extra_data_compatible: kept by the strict decoder and the
 * framing one, refused by QEMU's (bitmap-codec.c invariants 3, 4, 5). */
static void test_dir_extra_data(void **state)
{
    Qcow2Bitmap bms[] = {
        make_bm("x1", QCOW2_BITMAP_EXTRA_DATA_COMPATIBLE, 16, 2 * CS, 1, 1),
        make_bm("x8", 0, 16, 3 * CS, 1, 8),
        make_bm("x13", QCOW2_BITMAP_EXTRA_DATA_COMPATIBLE | QCOW2_BITMAP_AUTO, 16, 4 * CS,
                1, 13),
    };
    g_autoptr(GByteArray) a = encode(bms, 3);
    Qcow2BitmapDir dir;

    /* extra data sits between the header and the name */
    assert_int_equal(a->data[QCOW2_BME_EXTRA], 0x80);
    assert_int_equal(a->data[QCOW2_BME_EXTRA + 1], 'x');
    assert_int_equal(qcow2_bitmap_entry_size(&bms[1]), 40);
    round_trip(a, bms, 3, QCOW2_BITMAP_OPEN);
    round_trip(a, bms, 3, QCOW2_BITMAP_RAW);
    expect_error(decode(a, a->len, 3, QCOW2_BITMAP_CHECK, &dir), EINVAL,
                 "Bitmap extra data is not supported");
    assert_null(dir.bms);
    assert_int_equal(dir.nb, 0);

    /* extra_data_compatible without extra data: QEMU calls it reserved */
    Qcow2Bitmap edc =
        make_bm("edc", QCOW2_BITMAP_EXTRA_DATA_COMPATIBLE, 16, 2 * CS, 1, 0);
    g_autoptr(GByteArray) b = encode(&edc, 1);
    round_trip(b, &edc, 1, QCOW2_BITMAP_OPEN);
    expect_error(decode(b, b->len, 1, QCOW2_BITMAP_CHECK, &dir), EINVAL,
                 "Bitmap 'edc' doesn't satisfy the constraints");
    qcow2_bitmap_clear(&edc);
    clear_bms(bms, 3);
}

/* ---- the rules, one broken field at a time (bitmap-codec.c invariants 3-5) ---- */

typedef enum Edit {
    E_NONE,
    E_FLAG3,
    E_TYPE0,
    E_TYPE2,
    E_GRAN8,
    E_GRAN32,
    E_NAME0,
    E_NAME1024,
    E_TOFF0,
    E_TOFF_UNALIGNED,
    E_TSIZE0,
    E_TSIZE_BIG,
    E_TSIZE_PHYS,
    E_TSIZE_PHYS_MAX,
    E_TABLE_PAST_EOF,
    E_TABLE_AT_EOF,
    E_IN_USE2,
    E_PADDING,
    E_DUP,
    E_EXTRA_HUGE,
    E_NAME_PAST_END,
    E_TRAILING,
} Edit;

typedef struct Case {
    Edit edit;
    uint32_t nb;   /* 0: 3 */
    int64_t size;  /* -1: the bytes' length */
    uint64_t disk; /* 0: DISK */
    int open_errno;
    const char *open; /* NULL: accepted (also CHECK, RAW) */
    const char *check;
    const char *raw;
} Case;

#define CONSTRAINTS(n) "Bitmap '" n "' doesn't satisfy the constraints"
#define RUNS_PAST(i, off, len, size)                                                     \
    "Bitmap directory entry " #i " at offset " #off " (" #len " bytes) runs past the "   \
    "end of the directory (" #size " bytes)"

static const Case cases[] = {
    {E_NONE, 0, -1, 0, 0, NULL, NULL, NULL},
    {E_FLAG3, 0, -1, 0, EINVAL, "Bitmap 'b1': reserved flags 0x8 are set",
     CONSTRAINTS("b1"), NULL},
    {E_TYPE0, 0, -1, 0, EINVAL, "Bitmap 'b1': unknown type 0", CONSTRAINTS("b1"), NULL},
    {E_TYPE2, 0, -1, 0, EINVAL, "Bitmap 'b1': unknown type 2", CONSTRAINTS("b1"), NULL},
    {E_GRAN8, 0, -1, 0, EINVAL,
     "Bitmap 'b1': granularity_bits 8 is outside the supported 9..31", CONSTRAINTS("b1"),
     NULL},
    {E_GRAN32, 0, -1, 0, EINVAL,
     "Bitmap 'b1': granularity_bits 32 is outside the supported 9..31", CONSTRAINTS("b1"),
     NULL},
    /* QEMU does not check for an empty name */
    {E_NAME0, 0, -1, 0, EINVAL, "Bitmap directory entry 1 has an empty name", NULL, NULL},
    {E_NAME1024, 0, -1, 0, EINVAL,
     "Bitmap directory entry 1: name_size 1024 exceeds the maximum of 1023",
     "(1024 n) doesn't satisfy the constraints", NULL},
    {E_TOFF0, 0, -1, 0, EINVAL, "Bitmap 'b1': bitmap table offset 0x0 is zero",
     CONSTRAINTS("b1"), NULL},
    {E_TOFF_UNALIGNED, 0, -1, 0, EINVAL,
     "Bitmap 'b1': bitmap table offset 0x30200 is not aligned to the cluster size",
     CONSTRAINTS("b1"), NULL},
    {E_TSIZE0, 0, -1, 0, EINVAL, "Bitmap 'b1': bitmap table size is zero",
     CONSTRAINTS("b1"), NULL},
    {E_TSIZE_BIG, 0, -1, 0, EFBIG,
     "Bitmap 'b1': bitmap table size 134217729 exceeds the supported maximum "
     "(134217728 entries, 536870912 bytes of clusters)",
     CONSTRAINTS("b1"), NULL},
    {E_TSIZE_PHYS, 0, -1, 0, EFBIG,
     "Bitmap 'b1': bitmap table size 8193 exceeds the supported maximum (134217728 "
     "entries, 536870912 bytes of clusters)",
     CONSTRAINTS("b1"), NULL},
    {E_TSIZE_PHYS_MAX, 0, -1, 0, 0, NULL, NULL, NULL}, /* 512 MiB exactly */
    {E_TABLE_PAST_EOF, 0, -1, 0, EINVAL,
     "Bitmap 'b1': bitmap table at 0x40000000 (1 entries) lies outside the file", NULL,
     NULL},
    {E_TABLE_AT_EOF, 0, -1, 0, 0, NULL, NULL, NULL}, /* ends at the end of the file */
    /* b2 (granularity 512) needs 4 entries for 1 GiB, unless it is in use */
    {E_NONE, 0, -1, UINT64_C(1) << 30, EINVAL,
     "Bitmap 'b2': bitmap table size 1 is too small for a 1073741824-byte disk at "
     "granularity 512 (4 entries needed)",
     CONSTRAINTS("b2"), NULL},
    {E_IN_USE2, 0, -1, UINT64_C(1) << 30, 0, NULL, NULL, NULL},
    /* the spec's rules QEMU does not check */
    {E_PADDING, 0, -1, 0, EINVAL,
     "Bitmap 'b1': the padding of directory entry 1 is not zero", NULL, NULL},
    {E_DUP, 0, -1, 0, EINVAL, "Bitmap name 'b0' is used by directory entries 0 and 2",
     NULL, NULL},
    /* framing */
    {E_EXTRA_HUGE, 0, -1, 0, EINVAL, RUNS_PAST(1, 32, 4294967328, 96),
     "Broken bitmap directory", "Bitmap directory entry 1 is truncated"},
    {E_NAME_PAST_END, 0, -1, 0, EINVAL, RUNS_PAST(2, 64, 128, 96),
     "Broken bitmap directory", "Bitmap directory entry 2 is truncated"},
    {E_NONE, 0, 74, 0, EINVAL, RUNS_PAST(2, 64, 24, 74), "Broken bitmap directory",
     "Bitmap directory entry 2 is truncated"}, /* cut in the header */
    {E_NONE, 0, 89, 0, EINVAL, RUNS_PAST(2, 64, 32, 89), "Broken bitmap directory",
     "Bitmap directory entry 2 is truncated"}, /* cut in the name */
    {E_TRAILING, 0, -1, 0, EINVAL, RUNS_PAST(3, 96, 24, 104), "Broken bitmap directory",
     NULL},
    {E_NONE, 4, -1, 0, EINVAL,
     "Bitmap directory holds 3 bitmaps, the header extension announces 4",
     "Less bitmaps found than specified in header extension",
     "Bitmap directory entry 3 is truncated"},
    {E_NONE, 2, -1, 0, EINVAL,
     "Bitmap directory holds more than the 2 bitmaps the header extension announces",
     "More bitmaps found than specified in header extension", NULL},
    /* the directory's size and count */
    {E_NONE, 0, 0, 0, EINVAL,
     "Bitmap directory size is 0 (the header extension announces 3 bitmaps)",
     "Requested bitmap directory size is zero", "Bitmap directory entry 0 is truncated"},
    {E_NONE, 0, QCOW2_MAX_BITMAP_DIRECTORY_SIZE + 1, 0, EINVAL,
     "Bitmap directory size 67107841 exceeds the maximum supported size (67107840)",
     "Requested bitmap directory size is too big",
     "Bitmap directory size 67107841 exceeds the maximum supported size (67107840)"},
    {E_NONE, 65536, -1, 0, EINVAL,
     "Bitmap directory of 65536 bitmaps exceeds the QEMU supported maximum of 65535",
     "Bitmap directory of 65536 bitmaps exceeds the QEMU supported maximum of 65535",
     "Bitmap directory of 65536 bitmaps exceeds the QEMU supported maximum of 65535"},
};

/* The three entries every case starts from: 32 bytes each. */
static void base_bms(Qcow2Bitmap *bms)
{
    bms[0] = make_bm("b0", QCOW2_BITMAP_AUTO, 16, 2 * CS, 1, 0);
    bms[1] = make_bm("b1", 0, 17, 3 * CS, 1, 0);
    bms[2] = make_bm("b2", QCOW2_BITMAP_AUTO, 9, 4 * CS, 1, 0);
}

static GByteArray *case_bytes(const Case *c)
{
    g_autofree char *name1024 = g_strnfill(1024, 'n');
    Qcow2Bitmap bms[3];
    GByteArray *a;

    base_bms(bms);
    switch (c->edit) {
    case E_FLAG3:
        bms[1].flags = 8;
        break;
    case E_TYPE0:
    case E_TYPE2:
        bms[1].type = c->edit == E_TYPE0 ? 0 : 2;
        break;
    case E_GRAN8:
    case E_GRAN32:
        bms[1].granularity_bits = c->edit == E_GRAN8 ? 8 : 32;
        break;
    case E_NAME0:
    case E_NAME1024:
        g_free(bms[1].name);
        bms[1].name = g_strdup(c->edit == E_NAME0 ? "" : name1024);
        bms[1].name_size = (uint16_t)strlen(bms[1].name);
        break;
    case E_TOFF0:
    case E_TOFF_UNALIGNED:
        bms[1].table_offset = c->edit == E_TOFF0 ? 0 : 3 * CS + 512;
        break;
    case E_TSIZE0:
    case E_TSIZE_BIG:
    case E_TSIZE_PHYS:
    case E_TSIZE_PHYS_MAX:
        bms[1].table_size = c->edit == E_TSIZE0       ? 0
                            : c->edit == E_TSIZE_BIG  ? QCOW2_BITMAP_MAX_TABLE_SIZE + 1
                            : c->edit == E_TSIZE_PHYS ? 0x2001
                                                      : 0x2000;
        break;
    case E_TABLE_PAST_EOF:
        bms[1].table_offset = img.file_size;
        break;
    case E_TABLE_AT_EOF:
        bms[1].table_offset = img.file_size - CS;
        bms[1].table_size = (uint32_t)(CS / 8);
        break;
    case E_IN_USE2:
        bms[2].flags |= QCOW2_BITMAP_IN_USE;
        break;
    case E_DUP:
        memcpy(bms[2].name, "b0", 2);
        break;
    default:
        break;
    }
    a = encode(bms, 3);
    clear_bms(bms, 3);
    switch (c->edit) {
    case E_PADDING:
        a->data[32 + QCOW2_BITMAP_ENTRY_HEADER_SIZE + 2] = 1;
        break;
    case E_EXTRA_HUGE:
        store_be32(a->data + 32 + QCOW2_BME_EXTRA_DATA_SIZE, UINT32_MAX);
        break;
    case E_NAME_PAST_END:
        store_be16(a->data + 64 + QCOW2_BME_NAME_SIZE, 100);
        break;
    case E_TRAILING:
        g_byte_array_set_size(a, a->len + 8);
        memset(a->data + a->len - 8, 0, 8);
        break;
    default:
        break;
    }
    return a;
}

static void test_dir_rules(void **state)
{
    g_autofree char *name1024 = g_strnfill(1024, 'n');
    g_autofree char *constraints1024 =
        g_strdup_printf("Bitmap '%s' doesn't satisfy the constraints", name1024);

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        const Case *c = &cases[i];
        g_autoptr(GByteArray) a = case_bytes(c);
        Qcow2BitmapImage im = img;
        uint64_t size = c->size < 0 ? a->len : (uint64_t)c->size;
        uint32_t nb = c->nb ? c->nb : 3;

        if (c->disk) {
            im.disk_size = c->disk;
        }
        for (size_t k = 0; k < G_N_ELEMENTS(policies); k++) {
            const char *want = k == 0 ? c->open : k == 1 ? c->check : c->raw;
            Qcow2BitmapDir dir;
            int ret;

            if (want && strcmp(want, "(1024 n) doesn't satisfy the constraints") == 0) {
                want = constraints1024;
            }
            blk_error_clear();
            ret = qcow2_bitmap_dir_decode(a->data, size, nb, &im, policies[k], &dir);
            if (!want) {
                if (ret != 0) {
                    fail_msg("case %zu policy %zu: %s", i, k, blk_error_message());
                }
                /* accepted: encoded again, the same bytes, padding aside
                 * (bitmap-codec.c invariant 7) */
                g_autoptr(GByteArray) b = encode(dir.bms, dir.nb);
                assert_int_equal(b->len, dir.size);
                if (c->edit != E_PADDING) {
                    assert_memory_equal(b->data, a->data, b->len);
                }
                qcow2_bitmap_dir_free(&dir);
                continue;
            }
            if (ret == 0) {
                fail_msg("case %zu policy %zu: accepted, want '%s'", i, k, want);
            }
            expect_error(ret, k == 0 ? c->open_errno : EINVAL, want);
            assert_null(dir.bms);
            assert_int_equal(dir.nb, 0);
        }
    }
}

/* RAW keeps every field as on disk, padding aside (bitmap-codec.c invariants 5, 7). */
static void test_dir_raw(void **state)
{
    Qcow2Bitmap bms[3];
    Qcow2BitmapDir dir;

    base_bms(bms);
    bms[0].flags = 0xfffffff8u | QCOW2_BITMAP_AUTO;
    bms[1].type = 7;
    bms[1].granularity_bits = 0;
    bms[2].table_offset = 12345;
    g_autoptr(GByteArray) a = encode(bms, 3);
    g_byte_array_set_size(a, a->len + 40); /* bytes after the entries: ignored */
    memset(a->data + a->len - 40, 0xee, 40);
    a->data[64 + QCOW2_BITMAP_ENTRY_HEADER_SIZE + 5] = 0x55; /* b2's padding */

    assert_int_equal(decode(a, a->len, 3, QCOW2_BITMAP_RAW, &dir), 0);
    assert_int_equal(dir.nb, 3);
    assert_int_equal(dir.size, 96);
    for (uint32_t i = 0; i < 3; i++) {
        assert_bm_equal(&dir.bms[i], &bms[i]);
    }
    dir.bms[0].flags |= QCOW2_BITMAP_IN_USE; /* what meta.c does */
    g_autoptr(GByteArray) b = encode(dir.bms, dir.nb);
    assert_int_equal(load_be32(b->data + QCOW2_BME_FLAGS), 0xfffffffbu);
    assert_int_equal(b->data[64 + QCOW2_BITMAP_ENTRY_HEADER_SIZE + 5], 0);
    b->data[64 + QCOW2_BITMAP_ENTRY_HEADER_SIZE + 5] = 0x55;
    store_be32(b->data + QCOW2_BME_FLAGS, 0xfffffffau);
    assert_memory_equal(b->data, a->data, b->len);
    qcow2_bitmap_dir_free(&dir);

    /* the strict decoder refuses the same bytes at the first fault */
    expect_error(decode(a, 96, 3, QCOW2_BITMAP_OPEN, &dir), EINVAL,
                 "Bitmap 'b0': reserved flags 0xfffffff8 are set");
    clear_bms(bms, 3);
}

/* 65535 entries with distinct names: the name check is a hash lookup, not
 * a quadratic walk; a repeated name at the end is found; a directory past
 * 64 MiB is not encoded (bitmap-codec.c invariant 6). */
static void test_dir_many(void **state)
{
    const uint32_t nb = QCOW2_MAX_BITMAPS;
    g_autofree Qcow2Bitmap *bms = g_new0(Qcow2Bitmap, nb);
    g_autofree char *name1023 = g_strnfill(1023, 'm');
    Qcow2BitmapDir dir;
    uint64_t size;

    for (uint32_t i = 0; i < nb; i++) {
        g_autofree char *name = g_strdup_printf("%" PRIu32, i);
        bms[i] = make_bm(name, QCOW2_BITMAP_AUTO, 16, 2 * CS, 1, 0);
    }
    g_autoptr(GByteArray) a = encode(bms, nb);
    assert_int_equal(a->len, UINT64_C(32) * nb);
    round_trip(a, bms, nb, QCOW2_BITMAP_OPEN);

    memcpy(bms[nb - 1].name, "7", 2); /* "65534" -> "7": entry 7's name */
    bms[nb - 1].name_size = 1;
    g_autoptr(GByteArray) b = encode(bms, nb);
    expect_error(decode(b, b->len, nb, QCOW2_BITMAP_OPEN, &dir), EINVAL,
                 "Bitmap name '7' is used by directory entries 7 and 65534");
    clear_bms(bms, nb);

    /* 65535 entries of 1023-byte names take 1048 bytes each: past 64 MiB */
    for (uint32_t i = 0; i < nb; i++) {
        bms[i] = (Qcow2Bitmap){.name = name1023, .name_size = 1023};
    }
    assert_false(qcow2_bitmap_dir_size(bms, nb, &size));
    assert_true(
        qcow2_bitmap_dir_size(bms, QCOW2_MAX_BITMAP_DIRECTORY_SIZE / 1048, &size));
    assert_int_equal(size, (QCOW2_MAX_BITMAP_DIRECTORY_SIZE / 1048) * UINT64_C(1048));
    assert_false(qcow2_bitmap_dir_size(bms, nb + 1, &size));
}

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
        cmocka_unit_test(test_ext),
        cmocka_unit_test(test_dir_round_trip),
        cmocka_unit_test(test_dir_extra_data),
        cmocka_unit_test(test_dir_rules),
        cmocka_unit_test(test_dir_raw),
        cmocka_unit_test(test_dir_many),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_table_size_for),
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_qemu_img),
        cmocka_unit_test(test_qemu_img_in_use),
    };
    return tu_run_group_tests("bitmap-codec", tests);
}
