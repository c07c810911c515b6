/*
 * api/bitmap.c: the persistent dirty bitmaps of include/qimg/qimg.h --
 * qemu-img bitmap's operations, the dirty extents a backup tool reads,
 * merging extents into a bitmap, and storing the bitmaps an open image
 * maintains (qcow2/bitmap-store.c).
 *
 * Invariants (cited as "api/bitmap.c invariant N"):
 *  1. Operations that change the directory drain the handle's buffered
 *     vmstate writes first (api_quiesce): they never interleave with it.
 *  2. QimgRange and BlkRange are the same layout (asserted), so extents
 *     cross the layer without a copy per range.
 */
#include "api/api.h"

#include <errno.h>
#include <stddef.h>

_Static_assert(sizeof(QimgRange) == sizeof(BlkRange) &&
                   offsetof(QimgRange, offset) == offsetof(BlkRange, offset) &&
                   offsetof(QimgRange, length) == offsetof(BlkRange, length),
               "api/bitmap.c invariant 2");

static gboolean result(int ret, GError **error)
{
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_image_bitmap_op(QimgImage *img, QimgBitmapOp op, const char *name,
                              uint32_t granularity, GError **error)
{
    BlkNode *node = img->node;
    int ret;

    if (!api_can_change(node, node->drv->bitmap_op, "persistent dirty bitmaps", error)) {
        return FALSE;
    }
    if ((unsigned)op > QIMG_BITMAP_DISABLE || !name) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Invalid bitmap operation");
        return FALSE;
    }
    ret = api_quiesce(img); /* invariant 1 */
    if (ret == 0) {
        blk_error_clear();
        ret = node->drv->bitmap_op(node, (BlkBitmapOp)op, name, granularity);
    }
    return result(ret, error);
}

gboolean qimg_image_bitmap_extents(QimgImage *img, const char *name, GArray **extents,
                                   GError **error)
{
    BlkNode *node = img->node;
    GArray *out = NULL;
    int ret;

    *extents = NULL;
    if (!name) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No bitmap name given");
        return FALSE;
    }
    if (!node->drv->bitmap_extents) { /* it has none (QEMU's words) */
        g_set_error(error, QIMG_ERROR, ENOENT, "Dirty bitmap '%s' not found", name);
        return FALSE;
    }
    blk_error_clear();
    ret = node->drv->bitmap_extents(node, name, &out);
    if (ret < 0) {
        return result(ret, error);
    }
    *extents = out; /* invariant 2: BlkRange is QimgRange */
    return TRUE;
}

gboolean qimg_image_bitmap_merge(QimgImage *img, const char *name,
                                 const QimgRange *ranges, size_t n, GError **error)
{
    BlkNode *node = img->node;
    int ret;

    if (!api_can_change(node, node->drv->bitmap_merge, "persistent dirty bitmaps",
                        error)) {
        return FALSE;
    }
    if (!name || (n && !ranges)) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Invalid bitmap merge");
        return FALSE;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t end;
        if (__builtin_add_overflow(ranges[i].offset, ranges[i].length, &end) ||
            end > node->size) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Range %zu lies past the end of the image", i);
            return FALSE;
        }
    }
    ret = api_quiesce(img); /* invariant 1 */
    if (ret == 0) {
        blk_error_clear();
        ret = node->drv->bitmap_merge(node, name, (const BlkRange *)ranges, n);
    }
    return result(ret, error);
}

gboolean qimg_image_bitmaps_store(QimgImage *img, GError **error)
{
    BlkNode *node = img->node;
    int ret;

    if (node->read_only || !node->drv->bitmaps_store) {
        return TRUE; /* nothing is maintained */
    }
    ret = api_quiesce(img); /* invariant 1 */
    if (ret == 0) {
        blk_error_clear();
        ret = node->drv->bitmaps_store(node);
    }
    return result(ret, error);
}
