/*
 * api/debug.c: breakpoints for tests (include/qimg/qimg.h, 0.8) -- QEMU's
 * blkdebug break/remove_break/resume, as qimg io offers them -- on the
 * fault node under the image (block/faulty.c invariant 5); the verdict of
 * a blkverify node under it (0.12, block/blkverify.c invariant 2).
 *
 * Invariants (cited as "api/debug.c invariant N"):
 *  1. Errors carry the errno as their code, so a caller can print QEMU's
 *     "Could not set breakpoint: <strerror>" and qimg's detail apart.
 *  2. Closing a handle resumes every stopped request before it drains the
 *     asynchronous requests (api_debug_release, from qimg_image_close), so
 *     a close never waits for a resume that cannot come.
 */
#include "api/api.h"
#include "block/blkverify.h"

#include <errno.h>

static gboolean debug_op(QimgImage *img, BlkDebugOp op, const char *event,
                         const char *tag, GError **error)
{
    int ret;

    if (!img || !tag || (op == BLK_DEBUG_BREAK && !event)) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No image, event or tag");
        return FALSE;
    }
    blk_error_clear(); /* a message left by an earlier step is not this one's */
    ret = blk_debug_op(img->node, op, event, tag);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL); /* invariant 1 */
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_image_debug_break(QimgImage *img, const char *event, const char *tag,
                                GError **error)
{
    return debug_op(img, BLK_DEBUG_BREAK, event, tag, error);
}

gboolean qimg_image_debug_remove_break(QimgImage *img, const char *tag, GError **error)
{
    return debug_op(img, BLK_DEBUG_REMOVE_BREAK, NULL, tag, error);
}

gboolean qimg_image_debug_resume(QimgImage *img, const char *tag, GError **error)
{
    return debug_op(img, BLK_DEBUG_RESUME, NULL, tag, error);
}

char **qimg_image_debug_suspended(QimgImage *img, gboolean only_new)
{
    char **tags = img ? blk_debug_suspended(img->node, only_new) : NULL;
    return tags ? tags : g_new0(char *, 1);
}

void api_debug_release(QimgImage *img)
{
    if (img->owns_node) {
        blk_debug_op(img->node, BLK_DEBUG_RESUME_ALL, NULL, "");
    }
}

char *qimg_image_verify_verdict(QimgImage *img)
{
    return img ? blk_blkverify_verdict(img->node) : NULL;
}
