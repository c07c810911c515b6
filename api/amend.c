/*
 * api/amend.c: qimg_image_amend, qemu-img amend through the driver's
 * .amend (qcow2/amend.c).
 *
 * Owns: the public request's checks and its hand-over to the driver.
 *
 * Invariants (cited as "api/amend.c invariant N"):
 *  1. The caller's QimgAmendOptions is read within its struct_size (qimg.h
 *     ABI rule 1); a read-only image is refused with EACCES, a format
 *     without amendment with ENOTSUP and qemu-img's message ("Format driver
 *     'raw' does not support option amendment").
 *  2. The handle is quiesced (buffered writes drained) before the driver
 *     changes metadata; the driver makes what it wrote durable.
 */
#include "api/api.h"

#include <errno.h>

gboolean qimg_image_amend(QimgImage *img, const QimgAmendOptions *opts, GError **error)
{
    QimgAmendOptions in;
    BlkAmendOptions bo;
    BlkNode *node = img->node;
    int ret;

    if (!api_struct_in(&in, sizeof(in), opts, "QimgAmendOptions", error)) {
        return FALSE;
    }
    if (!node->drv->amend) { /* invariant 1 */
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Format driver '%s' does not support option amendment",
                    node->drv->format_name);
        return FALSE;
    }
    if (node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only", node->filename);
        return FALSE;
    }
    bo = (BlkAmendOptions){.options = in.options,
                           .force = in.force,
                           .progress = in.progress,
                           .progress_opaque = in.progress_opaque,
                           .secrets = in.secret_values,
                           .secret_values = in.secret_values != NULL};
    ret = api_quiesce(img); /* invariant 2 */
    if (ret == 0) {
        blk_error_clear();
        ret = node->drv->amend(node, &bo);
    }
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}
