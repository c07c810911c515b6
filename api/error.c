/*
 * api/error.c: the public API's errors (api.h invariant 3): the QIMG_ERROR
 * domain, the one place an internal -errno with its recorded message
 * (block/error.c) becomes a GError, and the choice among the errors of
 * requests that run in parallel.
 *
 * Invariants (cited as "api/error.c invariant N"):
 *  1. Of several requests in flight that fail, the error kept is the one at
 *     the lowest offset (ApiLowestError), not whichever failed first: that
 *     is the one a tool working in order (qemu-img convert, QEMU's savevm)
 *     meets and reports, and the one that does not depend on the threads'
 *     timing.  The first error to arrive is reported as such to the caller,
 *     which stops issuing requests then.
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

/* Invariant 1. */
bool api_lowest_error_offer(ApiLowestError *le, uint64_t offset, GError *err)
{
    if (!le->error) {
        le->error = err;
        le->offset = offset;
        return true;
    }
    if (offset < le->offset) {
        g_error_free(le->error);
        le->error = err;
        le->offset = offset;
    } else {
        g_error_free(err);
    }
    return false;
}

void api_lowest_error_clear(ApiLowestError *le)
{
    g_clear_error(&le->error);
    le->offset = 0;
}
