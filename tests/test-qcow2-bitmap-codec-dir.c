/*
 * tests/test-qcow2-bitmap-codec-dir.c: the persistent bitmaps' codec
 * (qcow2/bitmap-codec.c): the header extension and the bitmap directory,
 * on bytes in memory.  Each test cites the invariants it checks
 * ("bitmap-codec.c invariant N"):
 *
 *  - the bitmaps extension: round trip, each of QEMU's rules, inconsistent
 *    bitmaps ignored (bitmap-codec.c invariants 2, 7);
 *  - the directory: encode -> decode -> equal -> the same bytes again,
 *    with names of odd lengths up to 1023 bytes, every flag, extra data
 *    (bitmap-codec.c invariants 1, 7); one broken field at a time with the
 *    exact message of the strict decoder and of qemu-img check's
 *    (bitmap-codec.c invariants 3, 4); what the framing-only decoder keeps
 *    (bitmap-codec.c invariant 5); 65535 entries and the 64 MiB limit
 *    (bitmap-codec.c invariant 6).
 *
 * Bitmap tables and images qemu-img wrote are
 * test-qcow2-bitmap-codec-table.c's.
 */
#include "test-qcow2-bitmap-codec-fixture.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ext),
        cmocka_unit_test(test_dir_round_trip),
        cmocka_unit_test(test_dir_extra_data),
        cmocka_unit_test(test_dir_rules),
        cmocka_unit_test(test_dir_raw),
        cmocka_unit_test(test_dir_many),
    };
    return tu_run_group_tests("bitmap-codec", tests);
}
