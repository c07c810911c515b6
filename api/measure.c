/*
 * api/measure.c: qimg_measure(), qemu-img measure for a library caller --
 * the size a new image needs, for a virtual size or to hold a source.
 *
 * Owns: what the format drivers are told about the source
 * (BlkMeasureSource): its virtual size, its data through the whole chain
 * and its persistent bitmaps.  The size rules are the target driver's
 * (qcow2/measure.c, raw/raw.c).
 *
 * Invariants (cited as "api/measure.c invariant N"):
 *  1. A source's data is counted per target cluster: a cluster counts when
 *     any of it holds data that is not known to read as zeros, through the
 *     whole backing chain (qimg_image_block_status), as QEMU counts it.
 *  2. Bitmaps are asked of the source's top node only; a driver without
 *     persistent bitmaps answers -ENOTSUP ("no bitmaps" is not "0 bytes").
 */
#include "api/api.h"

#include <errno.h>
#include <string.h>

/* Invariant 1. */
static int src_data_bytes(void *opaque, uint64_t cs, uint64_t *bytes)
{
    QimgImage *img = opaque;
    uint64_t size = img->node->size, total = 0;

    for (uint64_t off = 0; off < size;) {
        g_autoptr(GError) err = NULL;
        QimgExtent e;
        uint64_t pnum;

        if (!api_block_status(img, false, off, size - off, &e, &err)) {
            return blk_error(err->code > 0 ? err->code : EIO,
                             "Unable to get block status: %s", err->message);
        }
        pnum = e.length;
        if (!(e.flags & QIMG_STATUS_ZERO) &&
            (e.flags & (QIMG_STATUS_DATA | QIMG_STATUS_ALLOCATED)) ==
                (QIMG_STATUS_DATA | QIMG_STATUS_ALLOCATED)) {
            pnum = ROUND_UP(off + pnum, cs) - off; /* the rest of the cluster */
            total += off % cs + pnum;
        }
        off += pnum;
    }
    *bytes = total;
    return 0;
}

/* Invariant 2. */
static int src_bitmaps_bytes(void *opaque, uint64_t cs, uint64_t *bytes)
{
    QimgImage *img = opaque;
    BlkNode *node = img->node;

    if (!node->drv->bitmaps_size) {
        return -ENOTSUP;
    }
    return node->drv->bitmaps_size(node, cs, bytes);
}

gboolean qimg_measure(const QimgCreateOptions *opts, QimgImage *src, QimgMeasure *out,
                      GError **error)
{
    QimgCreateOptions in;
    BlkCreateOptions co;
    BlkMeasureSource ms;
    BlkMeasure m;
    QimgMeasure res = {.struct_size = sizeof(QimgMeasure)};
    const BlkDriver *drv;
    int ret;

    if (!api_struct_in(&in, sizeof(in), opts, "QimgCreateOptions", error)) {
        return FALSE;
    }
    if (!in.format) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No image format given");
        return FALSE;
    }
    api_register_drivers();
    drv = blk_find_format(in.format);
    if (!drv || drv->is_protocol) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Unknown file format '%s'", in.format);
        return FALSE;
    }
    blk_error_clear();
    if (api_format_usable(drv) < 0) { /* formats.c invariant 2 */
        blk_error_propagate(error, 0, NULL);
        return FALSE;
    }
    if (!drv->measure) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Block driver '%s' does not support size measurement", in.format);
        return FALSE;
    }
    api_create_options(&in, &co);
    if (src) {
        ms = (BlkMeasureSource){.size = src->node->size,
                                .data_bytes = src_data_bytes,
                                .bitmaps_bytes = src_bitmaps_bytes,
                                .opaque = src};
    }
    blk_error_clear();
    ret = drv->measure(&co, src ? &ms : NULL, &m);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    res.required = m.required;
    res.fully_allocated = m.fully_allocated;
    res.has_bitmaps = m.has_bitmaps;
    res.bitmaps = m.bitmaps;
    api_struct_out(out, &res, sizeof(res));
    return TRUE;
}
