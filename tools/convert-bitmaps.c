/*
 * tools/convert-bitmaps.c: qimg convert --bitmaps [--skip-broken-bitmaps]:
 * the source's persistent dirty bitmaps copied into a qcow2 target (what
 * oVirt's incremental backup needs from a copy).
 *
 * Facts learnt from running qemu-img 7.2 (its checks in its order):
 *  1. --skip-broken-bitmaps without --bitmaps: "Use of
 *     --skip-broken-bitmaps requires --bitmaps" (option checks).
 *  2. Before the target is created: a source that cannot hold persistent
 *     bitmaps (raw, qcow2 v2) is "Source lacks bitmap support"; a source
 *     bitmap in use is "Cannot copy inconsistent bitmap 'NAME'" and the
 *     hint "Try --skip-broken-bitmaps, or use 'qemu-img bitmap --remove'
 *     to delete it" unless --skip-broken-bitmaps.
 *  3. After the target is created and opened, before the copy: a target
 *     that cannot hold them is "Format driver 'FMT' does not support
 *     bitmaps" (the target file stays, exit 1).
 *  4. After the copy, per source bitmap in directory order: an
 *     inconsistent one skipped with "warning: Skipping inconsistent bitmap
 *     'NAME'"; the others added with the same name, granularity and
 *     enabled state ("Failed to create bitmap NAME: REASON", e.g. an
 *     existing one under -n) and given the source's bits ("Failed to
 *     populate bitmap NAME: REASON").
 *  5. QEMU goes through the bitmaps from the last in the directory to the
 *     first (its list of loaded bitmaps is in reverse): the first
 *     inconsistent one named is the last, and so are the warnings; the
 *     target's directory holds them in the source's order.
 */
#include "convert.h"

#include <string.h>

static bool holds_bitmaps(QimgImage *img)
{
    g_autoptr(GError) err = NULL;
    QimgInfo *info;
    bool v3;

    if (strcmp(qimg_image_format(img), "qcow2") != 0) {
        return false;
    }
    info = qimg_image_get_info(img, &err);
    v3 = info && info->compat && strcmp(info->compat, "0.10") != 0;
    qimg_info_free(info);
    return v3;
}

/* The source's bitmaps (QimgBitmapInfo *), NULL with the error printed. */
static GPtrArray *source_bitmaps(QimgImage *src)
{
    GError *err = NULL;
    QimgInfo *info = qimg_image_get_info(src, &err);
    GPtrArray *list;

    if (!info) {
        tool_report_gerror(err, NULL);
        return NULL;
    }
    list = info->bitmaps ? g_ptr_array_ref(info->bitmaps) : g_ptr_array_new();
    qimg_info_free(info);
    return list;
}

bool convert_bitmaps_check_source(QimgImage *src, bool skip_broken)
{
    g_autoptr(GPtrArray) list = NULL;

    if (!holds_bitmaps(src)) { /* fact 2 */
        tool_error("Source lacks bitmap support");
        return false;
    }
    list = source_bitmaps(src);
    for (guint i = list ? list->len : 0; i-- > 0;) { /* fact 5 */
        const QimgBitmapInfo *b = g_ptr_array_index(list, i);
        if (b->in_use && !skip_broken) {
            tool_error(
                "Cannot copy inconsistent bitmap '%s'\nTry --skip-broken-bitmaps, or "
                "use 'qemu-img bitmap --remove' to delete it",
                b->name);
            return false;
        }
    }
    return list != NULL;
}

bool convert_bitmaps_check_target(QimgImage *dst)
{
    if (!holds_bitmaps(dst)) { /* fact 3 */
        tool_error("Format driver '%s' does not support bitmaps", qimg_image_format(dst));
        return false;
    }
    return true;
}

bool convert_bitmaps_copy(QimgImage *src, QimgImage *dst)
{
    g_autoptr(GPtrArray) list = source_bitmaps(src);
    GError *err = NULL;

    for (guint i = list ? list->len : 0; i-- > 0;) { /* facts 4, 5 */
        const QimgBitmapInfo *b = g_ptr_array_index(list, i);
        if (b->in_use) {
            tool_warning("Skipping inconsistent bitmap '%s'", b->name);
        }
    }
    for (guint i = 0; list && i < list->len; i++) {
        const QimgBitmapInfo *b = g_ptr_array_index(list, i);
        g_autoptr(GArray) extents = NULL;

        if (b->in_use) {
            continue;
        }
        if (!qimg_image_bitmap_op(dst, QIMG_BITMAP_ADD, b->name, b->granularity, &err) ||
            (!b->enabled &&
             !qimg_image_bitmap_op(dst, QIMG_BITMAP_DISABLE, b->name, 0, &err))) {
            tool_error("Failed to create bitmap %s: %s", b->name, err->message);
            g_error_free(err);
            return false;
        }
        if (!qimg_image_bitmap_extents(src, b->name, &extents, &err) ||
            !qimg_image_bitmap_merge(dst, b->name,
                                     (const QimgRange *)(void *)extents->data,
                                     extents->len, &err)) {
            tool_error("Failed to populate bitmap %s: %s", b->name, err->message);
            g_error_free(err);
            return false;
        }
    }
    return list != NULL;
}
