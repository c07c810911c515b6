/*
 * qcow2/check-bitmap.c: the check's references from persistent dirty
 * bitmaps (QEMU's qcow2_check_bitmaps_refcounts; part of check.c's design).
 *
 * Owns: parsing and validating the bitmap directory as QEMU's
 * bitmap_list_load does, and counting the references of the directory, the
 * bitmap tables and their data clusters.
 *
 * Invariants: check.c's list, cited as "check.c invariant N"; this file
 * keeps 3 (every size validated before it decides an allocation: bitmap
 * directory <= 64 MiB, bitmap table <= 512 MiB / cluster; reads within the
 * file).
 */
#include "qcow2/check.h"

#include <errno.h>

/* QEMU's BME_* limits for the bitmap directory. */
#define BME_MAX_TABLE_SIZE 0x8000000u
#define BME_MAX_PHYS_SIZE 0x20000000u
#define BME_MIN_GRANULARITY_BITS 9
#define BME_MAX_GRANULARITY_BITS 31
#define BME_MAX_NAME_SIZE 1023u
#define BME_RESERVED_FLAGS 0xfffffffcu
#define BME_FLAG_IN_USE 1u
#define BME_DIR_ENTRY_SIZE 24
#define BME_TABLE_ENTRY_RESERVED_MASK UINT64_C(0xff000000000001fe)
#define BME_TABLE_ENTRY_OFFSET_MASK UINT64_C(0x00fffffffffffe00)
#define BME_TABLE_ENTRY_FLAG_ALL_ONES UINT64_C(1)

/* ---- bitmaps (QEMU's qcow2_check_bitmaps_refcounts) ---- */

typedef struct BitmapEntry {
    uint64_t table_offset;
    uint32_t table_size;
} BitmapEntry;

/* QEMU's check_dir_entry. */
static bool bitmap_entry_ok(const Qcow2State *s, const uint8_t *e)
{
    uint64_t table_offset = load_be64(e);
    uint32_t table_size = load_be32(e + 8);
    uint32_t flags = load_be32(e + 12);
    uint8_t type = e[16];
    uint8_t gran = e[17];
    uint16_t name_size = load_be16(e + 18);
    uint64_t phys;

    if (table_size == 0 || table_offset == 0 ||
        qcow2_offset_into_cluster(s, table_offset) || table_size > BME_MAX_TABLE_SIZE ||
        gran > BME_MAX_GRANULARITY_BITS || gran < BME_MIN_GRANULARITY_BITS ||
        (flags & BME_RESERVED_FLAGS) || name_size > BME_MAX_NAME_SIZE || type != 1) {
        return false;
    }
    phys = (uint64_t)table_size * s->cluster_size;
    if (phys > BME_MAX_PHYS_SIZE) {
        return false;
    }
    /* phys <= 2^29 and gran <= 31: no overflow */
    if (!(flags & BME_FLAG_IN_USE) && s->img->size > ((phys * 8) << gran)) {
        return false;
    }
    return true;
}

/* Parse the bitmap directory (QEMU's bitmap_list_load).  NULL if broken,
 * with the reason recorded (QEMU's words). */
static GArray *load_bitmap_directory(Qcow2Check *c)
{
    Qcow2State *s = c->s;
    uint64_t size = s->ext.bitmaps.directory_size;
    g_autofree uint8_t *dir = NULL;
    g_autoptr(GArray) list = g_array_new(FALSE, FALSE, sizeof(BitmapEntry));
    uint64_t pos = 0;

    /* header.c capped size at QCOW2_MAX_BITMAP_DIRECTORY_SIZE (check.c invariant 3) */
    if (size == 0 || size > QCOW2_MAX_BITMAP_DIRECTORY_SIZE) {
        blk_error(EINVAL, "Requested bitmap directory size is %s",
                  size ? "too big" : "zero");
        return NULL;
    }
    dir = g_try_malloc(size);
    if (!dir) {
        blk_error(ENOMEM, "Failed to allocate space for bitmap directory");
        return NULL;
    }
    if (check_pread(c, s->ext.bitmaps.directory_offset, dir, size) < 0) {
        blk_error(EIO, "Failed to read bitmap directory");
        return NULL;
    }
    while (pos < size) {
        const uint8_t *e = dir + pos;
        uint64_t entry_size;

        if (size - pos < BME_DIR_ENTRY_SIZE) {
            blk_error(EINVAL, "Broken bitmap directory");
            return NULL;
        }
        if (list->len >= s->ext.bitmaps.nb_bitmaps) {
            blk_error(EINVAL, "More bitmaps found than specified in header extension");
            return NULL;
        }
        entry_size = ROUND_UP(
            BME_DIR_ENTRY_SIZE + (uint64_t)load_be16(e + 18) + load_be32(e + 20), 8);
        if (entry_size > size - pos) {
            blk_error(EINVAL, "Broken bitmap directory");
            return NULL;
        }
        if (load_be32(e + 20) != 0) {
            blk_error(EINVAL, "Bitmap extra data is not supported");
            return NULL;
        }
        if (!bitmap_entry_ok(s, e)) {
            blk_error(EINVAL, "Bitmap '%.*s' doesn't satisfy the constraints",
                      (int)load_be16(e + 18), (const char *)e + BME_DIR_ENTRY_SIZE);
            return NULL;
        }
        BitmapEntry be = {.table_offset = load_be64(e), .table_size = load_be32(e + 8)};
        g_array_append_val(list, be);
        pos += entry_size;
    }
    if (list->len != s->ext.bitmaps.nb_bitmaps) {
        blk_error(EINVAL, "Less bitmaps found than specified in header extension");
        return NULL;
    }
    return g_steal_pointer(&list);
}

int check_bitmaps(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    g_autoptr(GArray) list = NULL;
    int ret;

    if (!s->ext.has_bitmaps || s->ext.bitmaps.nb_bitmaps == 0) {
        return 0;
    }
    ret = check_inc_refcounts(c, res, s->ext.bitmaps.directory_offset,
                              s->ext.bitmaps.directory_size);
    if (ret < 0) {
        return ret;
    }
    list = load_bitmap_directory(c);
    if (!list) {
        res->corruptions++;
        return -EINVAL; /* the reason is recorded */
    }
    for (guint b = 0; b < list->len; b++) {
        const BitmapEntry *be = &g_array_index(list, BitmapEntry, b);
        /* table_size * cluster_size <= 512 MiB: at most 8 MiB of entries */
        uint64_t bytes = (uint64_t)be->table_size * 8;
        g_autofree uint8_t *table = NULL;

        ret = check_inc_refcounts(c, res, be->table_offset, bytes);
        if (ret < 0) {
            return ret;
        }
        table = g_try_malloc(bytes);
        if (!table) {
            res->corruptions++;
            return blk_error(ENOMEM, "%s", g_strerror(ENOMEM));
        }
        ret = check_pread(c, be->table_offset, table, bytes);
        for (uint32_t i = 0; ret == 0 && i < be->table_size; i++) {
            uint64_t e = load_be64(table + 8 * (uint64_t)i);
            uint64_t off = e & BME_TABLE_ENTRY_OFFSET_MASK;
            if ((e & BME_TABLE_ENTRY_RESERVED_MASK) ||
                (off && ((e & BME_TABLE_ENTRY_FLAG_ALL_ONES) ||
                         qcow2_offset_into_cluster(s, off)))) {
                ret = -EINVAL;
            }
        }
        if (ret < 0) {
            res->corruptions++;
            return blk_error(-ret,
                             "Could not read bitmap_table table from image for "
                             "bitmap %u: %s",
                             b, g_strerror(-ret));
        }
        for (uint32_t i = 0; i < be->table_size; i++) {
            uint64_t off =
                load_be64(table + 8 * (uint64_t)i) & BME_TABLE_ENTRY_OFFSET_MASK;
            if (off) {
                ret = check_inc_refcounts(c, res, off, s->cluster_size);
                if (ret < 0) {
                    return ret;
                }
            }
        }
    }
    return 0;
}
