/*
 * tests/test-qcow2-bitmap-codec-fixture.c: the bitmap codec tests' image
 * geometry and helpers (test-qcow2-bitmap-codec-fixture.h).
 */
#include "test-qcow2-bitmap-codec-fixture.h"

const Qcow2BitmapImage img = {
    .cluster_bits = CB, .disk_size = DISK, .file_size = UINT64_C(1) << 30};

const Qcow2BitmapPolicy policies[] = {QCOW2_BITMAP_OPEN, QCOW2_BITMAP_CHECK,
                                      QCOW2_BITMAP_RAW};

/* ---- helpers ---- */

void expect_error(int ret, int errnum, const char *want)
{
    const char *msg = blk_error_message();

    assert_int_equal(ret, -errnum);
    if (!msg || strcmp(msg, want) != 0) {
        fail_msg("message '%s', want '%s'", msg ? msg : "(none)", want);
    }
    blk_error_clear();
}

/* An entry the encoder writes as given (it validates nothing). */
Qcow2Bitmap make_bm(const char *name, uint32_t flags, uint8_t gran, uint64_t table_offset,
                    uint32_t table_size, uint32_t extra)
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

void clear_bms(Qcow2Bitmap *bms, uint32_t nb)
{
    for (uint32_t i = 0; i < nb; i++) {
        qcow2_bitmap_clear(&bms[i]);
    }
}

GByteArray *encode(const Qcow2Bitmap *bms, uint32_t nb)
{
    GByteArray *a = g_byte_array_new();
    uint64_t size = 0;

    assert_true(qcow2_bitmap_dir_size(bms, nb, &size));
    g_byte_array_set_size(a, (guint)size);
    memset(a->data, 0xa5, a->len); /* the encoder writes every byte */
    qcow2_bitmap_dir_encode(bms, nb, a->data);
    return a;
}

int decode(const GByteArray *a, uint64_t size, uint32_t nb, Qcow2BitmapPolicy policy,
           Qcow2BitmapDir *dir)
{
    blk_error_clear();
    return qcow2_bitmap_dir_decode(a->data, size, nb, &img, policy, dir);
}

void assert_bm_equal(const Qcow2Bitmap *a, const Qcow2Bitmap *b)
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
void round_trip(const GByteArray *a, const Qcow2Bitmap *want, uint32_t nb,
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

/* The three entries every case starts from: 32 bytes each. */
void base_bms(Qcow2Bitmap *bms)
{
    bms[0] = make_bm("b0", QCOW2_BITMAP_AUTO, 16, 2 * CS, 1, 0);
    bms[1] = make_bm("b1", 0, 17, 3 * CS, 1, 0);
    bms[2] = make_bm("b2", QCOW2_BITMAP_AUTO, 9, 4 * CS, 1, 0);
}
