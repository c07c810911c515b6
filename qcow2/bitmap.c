/*
 * qcow2/bitmap.c: the persistent dirty bitmaps of an open image, as
 * readers see them -- the list qemu-img info prints and what a copy of
 * them takes (measure).  The on-disk structures are bitmap-codec.c's.
 *
 * Invariants (cited as "bitmap.c invariant N"):
 *  1. The directory is read from the file every time, under the strict
 *     rules (QCOW2_BITMAP_OPEN), as QEMU's bitmap_list_load reads it for
 *     info: flags as on disk; none without the autoclear bit.  A directory
 *     that does not decode is the caller's error, never an empty list.
 *  2. Sizes of a copy (measure.c invariant 3): per bitmap its data in whole
 *     clusters (assumed all allocated) and its table in whole clusters,
 *     plus the directory (entries without extra data) in whole clusters.
 *  3. Every open of an image with bitmaps (the extension and the autoclear
 *     bit) decodes the directory under QEMU's rules (QCOW2_BITMAP_CHECK,
 *     QEMU's bitmap_list_load at qcow2_do_open) and fails with its message
 *     ("Bitmap 'x' doesn't satisfy the constraints"), as every qemu-img
 *     and qemu-io command does: QEMU refuses what the spec allows it not to
 *     support (extra data, the extra_data_compatible flag).
 */
#include "qcow2/bitmap.h"
#include "qcow2/qcow2.h"

#include <errno.h>
#include <string.h>

static int bitmap_read(void *opaque, uint64_t offset, void *buf, uint64_t len)
{
    return blk_pread(opaque, offset, buf, len);
}

Qcow2BitmapSource qcow2_bitmap_source(const Qcow2State *s)
{
    return (Qcow2BitmapSource){.read = bitmap_read, .opaque = s->img->file};
}

Qcow2BitmapImage qcow2_bitmap_image(const Qcow2State *s)
{
    return (Qcow2BitmapImage){.cluster_bits = s->cluster_bits,
                              .disk_size = s->img->size,
                              .file_size = s->file_size};
}

int qcow2_bitmap_check_consistent(const Qcow2Bitmap *bm)
{
    if (bm->flags & QCOW2_BITMAP_IN_USE) { /* QEMU's words, its hint too */
        return blk_error(EBUSY,
                         "Bitmap '%s' is inconsistent and cannot be used\n"
                         "Try block-dirty-bitmap-remove to delete this bitmap from disk",
                         bm->name);
    }
    return 0;
}

/* Invariant 1. */
int qcow2_bitmap_dir_read_locked(Qcow2State *s, Qcow2BitmapDir *dir)
{
    const Qcow2BitmapSource src = qcow2_bitmap_source(s);
    const Qcow2BitmapImage bimg = qcow2_bitmap_image(s);

    memset(dir, 0, sizeof(*dir));
    if (!s->ext.has_bitmaps || !(s->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        return 0;
    }
    return qcow2_bitmap_dir_read(&src, &s->ext.bitmaps, &bimg, QCOW2_BITMAP_OPEN, dir);
}

/* Invariant 3. */
int qcow2_bitmap_dir_check_open(Qcow2State *s)
{
    const Qcow2BitmapSource src = qcow2_bitmap_source(s);
    const Qcow2BitmapImage bimg = qcow2_bitmap_image(s);
    Qcow2BitmapDir dir;
    int ret;

    if (!s->ext.has_bitmaps || !(s->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        return 0;
    }
    ret = qcow2_bitmap_dir_read(&src, &s->ext.bitmaps, &bimg, QCOW2_BITMAP_CHECK, &dir);
    if (ret == 0) {
        qcow2_bitmap_dir_free(&dir);
    }
    return ret;
}

int qcow2_bitmaps_list_locked(Qcow2State *s, GArray **out)
{
    Qcow2BitmapDir dir;
    int ret = qcow2_bitmap_dir_read_locked(s, &dir);

    *out = NULL;
    if (ret < 0 || dir.nb == 0) {
        qcow2_bitmap_dir_free(&dir);
        return ret;
    }
    *out = g_array_sized_new(FALSE, TRUE, sizeof(BlkBitmapInfo), dir.nb);
    g_array_set_clear_func(*out, blk_bitmap_info_clear);
    for (uint32_t i = 0; i < dir.nb; i++) {
        BlkBitmapInfo bi = {
            .name = g_strdup(dir.bms[i].name),
            .granularity = 1u << dir.bms[i].granularity_bits,
            .in_use = (dir.bms[i].flags & QCOW2_BITMAP_IN_USE) != 0,
            .enabled = (dir.bms[i].flags & QCOW2_BITMAP_AUTO) != 0,
        };
        g_array_append_val(*out, bi);
    }
    qcow2_bitmap_dir_free(&dir);
    return 0;
}

/* Invariant 2: measure.c invariant 3's source side. */
int qcow2_bitmaps_size(BlkNode *img, uint64_t cluster_size, uint64_t *bytes)
{
    Qcow2State *s = img->opaque;
    const Qcow2BitmapSource src = {.read = bitmap_read, .opaque = img->file};
    Qcow2BitmapImage bimg;
    Qcow2BitmapDir dir = {0};
    uint64_t total = 0, dir_size = 0;
    int ret = 0;

    if (s->qcow_version < 3) {
        return -ENOTSUP;
    }
    *bytes = 0;
    qcow2_lock(s);
    bimg = (Qcow2BitmapImage){.cluster_bits = s->cluster_bits,
                              .disk_size = img->size,
                              .file_size = s->file_size};
    if (s->ext.has_bitmaps && (s->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        ret =
            qcow2_bitmap_dir_read(&src, &s->ext.bitmaps, &bimg, QCOW2_BITMAP_OPEN, &dir);
    }
    qcow2_unlock(s);
    if (ret < 0) {
        return ret;
    }
    for (uint32_t i = 0; i < dir.nb; i++) {
        const Qcow2Bitmap *bm = &dir.bms[i];
        uint64_t gran = 1ull << bm->granularity_bits;
        uint64_t bits = DIV_ROUND_UP(img->size, gran);
        uint64_t clusters = DIV_ROUND_UP(DIV_ROUND_UP(bits, 8), cluster_size);

        total += clusters * cluster_size + ROUND_UP(clusters * 8, cluster_size);
        dir_size += ROUND_UP(24 + (uint64_t)bm->name_size, 8);
    }
    qcow2_bitmap_dir_free(&dir);
    *bytes = total + ROUND_UP(dir_size, cluster_size);
    return 0;
}
