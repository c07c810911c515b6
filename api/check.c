/*
 * api/check.c: the public check API (include/qimg/check.h) over the
 * driver's check operation.
 *
 * Owns: what qemu-img check does around the driver: the "not supported"
 * answer for formats without a check, and the double check after a repair.
 *
 * Invariants:
 *  1. res is reset first (its old messages freed); it must be initialised
 *     (QIMG_CHECK_RESULT_INIT) or the result of an earlier call.  Only the
 *     bytes its struct_size covers are read or written (abi.c).
 *  2. A format without a check operation -- or whose check cannot repair,
 *     when asked to (the driver sets res->unsupported) -- fails with
 *     ENOTSUP "This image format does not support checks" (qemu-img
 *     exits 63 on it).
 *  3. When the repair fixed something, the image is checked again without
 *     fixing, and the result is that second check's, with corruptions_fixed
 *     and leaks_fixed of the repair ("Double checking the fixed image
 *     now...").  The messages of both passes are kept, in order.
 *  4. FALSE with *error set when a pass could not run to its end (the
 *     driver's errno and message, check.h of the driver); then the counters
 *     are zero, except the *_fixed counts when it was the second pass that
 *     failed.  FALSE without *error when the check ran but had internal
 *     errors (res->check_errors > 0).
 *  5. A repair (fix != 0) of an image opened read-only fails with EACCES
 *     before the driver runs ("Image 'F' is read-only; cannot repair it").
 */
#include "api/api.h"

#include "qimg/check.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

void qimg_check_result_clear(QimgCheckResult *res)
{
    QimgCheckResult in, zero = QIMG_CHECK_RESULT_INIT;

    if (!res || !api_struct_in(&in, sizeof(in), res, "QimgCheckResult", NULL)) {
        return;
    }
    if (in.messages) {
        g_ptr_array_unref(in.messages);
    }
    api_struct_out(res, &zero, sizeof(zero));
}

static void keep_only_messages(BlkCheckResult *res)
{
    BlkCheckResult keep = {.messages = res->messages,
                           .progress = res->progress,
                           .progress_opaque = res->progress_opaque,
                           .unsupported = res->unsupported};
    *res = keep;
}

/* The driver's result into the public one (messages move). */
static void result_out(BlkCheckResult *in, QimgCheckResult *out)
{
    out->corruptions = in->corruptions;
    out->leaks = in->leaks;
    out->check_errors = in->check_errors;
    out->corruptions_fixed = in->corruptions_fixed;
    out->leaks_fixed = in->leaks_fixed;
    out->image_end_offset = in->image_end_offset;
    out->total_clusters = in->total_clusters;
    out->allocated_clusters = in->allocated_clusters;
    out->fragmented_clusters = in->fragmented_clusters;
    out->compressed_clusters = in->compressed_clusters;
    out->unsupported = in->unsupported;
    out->messages = g_steal_pointer(&in->messages);
}

/* Run the driver's check (and the double check of invariant 3). */
static int run_check(BlkNode *node, BlkCheckResult *res, unsigned fix, GError **error)
{
    BlkCheckResult second = {0};
    int ret;

    if (!node->drv->check) {
        res->unsupported = true; /* invariant 2 */
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "This image format does not support checks");
        return -ENOTSUP;
    }
    if (fix && node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES,
                    "Image '%s' is read-only; cannot repair it", node->filename);
        return -EACCES;
    }
    blk_error_clear();
    ret = node->drv->check(node, res, fix);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        keep_only_messages(res); /* invariant 4 */
        return ret;
    }
    if (fix && (res->corruptions_fixed || res->leaks_fixed)) {
        /* invariant 3 */
        second.messages = res->messages;
        second.progress = res->progress;
        second.progress_opaque = res->progress_opaque;
        ret = node->drv->check(node, &second, 0);
        if (ret < 0) {
            blk_error_propagate(error, ret, NULL);
            keep_only_messages(&second);
        }
        second.corruptions_fixed = res->corruptions_fixed;
        second.leaks_fixed = res->leaks_fixed;
        *res = second;
    }
    return ret;
}

gboolean qimg_image_check(QimgImage *img, QimgCheckResult *res, unsigned fix,
                          GError **error)
{
    QimgCheckResult out;
    BlkCheckResult r = {0};
    int ret;

    if (!img || !res) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No image or result to check");
        return FALSE;
    }
    if (!api_struct_in(&out, sizeof(out), res, "QimgCheckResult", error)) {
        return FALSE;
    }
    r.progress = out.progress;
    r.progress_opaque = out.progress_opaque;
    r.messages = g_ptr_array_new_with_free_func(g_free);
    qimg_check_result_clear(res); /* invariant 1 */
    memset(&out, 0, sizeof(out));
    out.progress = r.progress;
    out.progress_opaque = r.progress_opaque;
    ret = api_quiesce(img);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
    } else {
        ret = run_check(img->node, &r, fix, error);
    }
    result_out(&r, &out);
    blk_check_result_clear(&r);
    api_struct_out(res, &out, sizeof(out));
    if (res->struct_size < offsetof(QimgCheckResult, messages) + sizeof(out.messages) &&
        out.messages) {
        /* the caller's (older) struct has no room for them: not handed out */
        g_ptr_array_unref(out.messages);
    }
    return ret == 0 && out.check_errors == 0;
}
