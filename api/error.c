/*
 * api/error.c: the public API's errors (api.h invariant 3): the QIMG_ERROR
 * domain, and the one place an internal -errno with its recorded message
 * (block/error.c) becomes a GError.
 */
#include "api/api.h"

#include <errno.h>
#include <stdarg.h>

/* Spelled out rather than G_DEFINE_QUARK(): clang-format puts spaces into
 * the macro's unquoted name, which made the string "qimg - error - quark". */
GQuark qimg_error_quark(void)
{
    return g_quark_from_static_string("qimg-error-quark");
}

void blk_error_propagate(GError **error, int ret, const char *fmt, ...)
{
    const char *msg = blk_error_message();
    int errnum = ret < 0 ? -ret : (blk_error_code() ? blk_error_code() : EIO);
    g_autofree char *prefix = NULL;
    va_list ap;

    if (fmt) {
        va_start(ap, fmt);
        prefix = g_strdup_vprintf(fmt, ap);
        va_end(ap);
    }
    if (prefix) {
        g_set_error(error, QIMG_ERROR, errnum, "%s: %s", prefix,
                    msg ? msg : g_strerror(errnum));
    } else {
        g_set_error_literal(error, QIMG_ERROR, errnum, msg ? msg : g_strerror(errnum));
    }
    blk_error_clear();
}
