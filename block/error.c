/*
 * block/error.c: the error convention shared below the public API.
 *
 * Owns: the per-thread "last message" that internal code records with
 * blk_error() and the public API turns into a GError.
 *
 * Invariants:
 *  1. A message belongs to the thread that recorded it; it is cleared when
 *     propagated, so a later failure without a message never shows a stale one.
 *  2. blk_error() always returns -errnum (errnum > 0), so it can be used as
 *     `return blk_error(EINVAL, "...")`.
 */
#include "block/block.h"

#include <errno.h>
#include <stdarg.h>

/* Spelled out rather than G_DEFINE_QUARK(): clang-format puts spaces into
 * the macro's unquoted name, which made the string "qimg - error - quark". */
GQuark qimg_error_quark(void)
{
    return g_quark_from_static_string("qimg-error-quark");
}

static GPrivate last_msg = G_PRIVATE_INIT(g_free);

int blk_error(int errnum, const char *fmt, ...)
{
    va_list ap;

    g_assert(errnum > 0);
    va_start(ap, fmt);
    g_private_replace(&last_msg, g_strdup_vprintf(fmt, ap));
    va_end(ap);
    return -errnum;
}

void blk_error_clear(void)
{
    g_private_replace(&last_msg, NULL);
}

const char *blk_error_message(void)
{
    return g_private_get(&last_msg);
}

void blk_error_propagate(GError **error, int ret, const char *prefix)
{
    const char *msg = blk_error_message();
    int errnum = ret < 0 ? -ret : EIO;

    if (prefix && msg) {
        g_set_error(error, QIMG_ERROR, errnum, "%s: %s", prefix, msg);
    } else if (prefix) {
        g_set_error(error, QIMG_ERROR, errnum, "%s: %s", prefix, g_strerror(errnum));
    } else if (msg) {
        g_set_error_literal(error, QIMG_ERROR, errnum, msg);
    } else {
        g_set_error_literal(error, QIMG_ERROR, errnum, g_strerror(errnum));
    }
    blk_error_clear();
}
