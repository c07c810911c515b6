/*
 * api/abi.c: the growable structs of the public ABI (include/qimg/qimg.h,
 * "ABI" rules 1 and 2) and the library's version.
 *
 * Owns: reading a caller's struct whatever header it was built with, and
 * writing results back into it.
 *
 * Invariants:
 *  1. A public function reads a caller-filled struct only through
 *     api_struct_in(): a full-size local copy of the bytes struct_size
 *     covers, zeros (the defaults, ABI rule 2) past them.
 *  2. Bytes past the struct this library knows must be zero: anything else
 *     is a field of a newer header, which this library cannot honour, so
 *     the call fails with EINVAL naming the struct (never ignored).
 *  3. api_struct_out() writes no byte past the caller's struct_size and
 *     keeps the caller's struct_size.
 */
#include "api/api.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

const char *qimg_version(void)
{
    return QIMG_VERSION_STRING;
}

gboolean api_struct_in(void *dst, size_t dst_size, const void *src, const char *type,
                       GError **error)
{
    uint32_t size;

    g_assert(dst_size >= sizeof(uint32_t) && dst_size <= UINT32_MAX);
    memset(dst, 0, dst_size);
    size = (uint32_t)dst_size;
    if (!src) { /* NULL: every default */
        memcpy(dst, &size, sizeof(size));
        return TRUE;
    }
    memcpy(&size, src, sizeof(size));
    if (size < sizeof(uint32_t)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "%s.struct_size is %" PRIu32 ": initialise the struct with its "
                    "*_INIT macro",
                    type, size);
        return FALSE;
    }
    memcpy(dst, src, MIN(size, dst_size));
    for (size_t i = dst_size; i < size; i++) { /* invariant 2 */
        if (((const uint8_t *)src)[i]) {
            g_set_error(
                error, QIMG_ERROR, EINVAL,
                "%s has fields this libqimg %s does not know (struct_size %" PRIu32
                ", known %zu)",
                type, QIMG_VERSION_STRING, size, dst_size);
            return FALSE;
        }
    }
    size = (uint32_t)dst_size;
    memcpy(dst, &size, sizeof(size));
    return TRUE;
}

gboolean api_snapshot_params_in(QimgSnapshotParams *dst, const QimgSnapshotParams *src,
                                GError **error)
{
    if (!api_struct_in(dst, sizeof(*dst), src, "QimgSnapshotParams", error)) {
        return FALSE;
    }
    if (!dst->name) {
        g_set_error(error, QIMG_ERROR, EINVAL, "A snapshot name is required");
        return FALSE;
    }
    if (dst->has_icount && dst->icount > INT64_MAX) {
        g_set_error(error, QIMG_ERROR, EINVAL, "icount %" PRIu64 " is out of range",
                    dst->icount);
        return FALSE;
    }
    return TRUE;
}

int64_t api_snapshot_icount(const QimgSnapshotParams *params)
{
    return params->has_icount ? (int64_t)params->icount : -1;
}

void api_struct_out(void *dst, const void *src, size_t src_size)
{
    uint32_t size;

    memcpy(&size, dst, sizeof(size));
    if (size > sizeof(uint32_t)) { /* invariant 3 */
        memcpy((uint8_t *)dst + sizeof(size), (const uint8_t *)src + sizeof(size),
               MIN(size, src_size) - sizeof(size));
    }
}
