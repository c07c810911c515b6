/*
 * block/null.c: QEMU's null-co and null-aio protocol nodes -- a device of a
 * given size that stores nothing (tests and benchmarks of the layers
 * above, as QEMU's block/null.c serves them).
 *
 * Owns: the node's options (BlkOpenOptions.null_*: size, read-zeroes,
 * latency-ns, from json:/--image-opts by api/json-name.c) and its
 * requests.
 *
 * Facts learnt from running qemu-img/qemu-io 7.2:
 *  1. The only name the protocol takes is "null-co://" ("null-aio://"
 *     for null-aio); any other after the prefix is refused with "Could not
 *     open 'NAME': The only allowed filename for this driver is
 *     'null-co://'".
 *  2. size defaults to 1 GiB; "disk size" is 0 B; resize is refused
 *     ("Image format driver does not support resize"); creating one is
 *     "Format driver 'null-co' does not support image creation".
 *  3. Without read-zeroes, a read leaves the caller's buffer as it was and
 *     block status reports nothing allocated; with read-zeroes=on a read
 *     returns zeros and block status reports zeros at offset 0 of the
 *     node ("present": true, "zero": true, "data": false).
 *  4. Writes, write-zeroes, discards and flushes succeed and store
 *     nothing.  latency-ns delays every request by that many nanoseconds.
 *  5. The node is named "null-co://" when every option has its default,
 *     else by its options as QEMU's json: name.
 *
 * Invariants:
 *  1. No request touches memory outside the caller's vector, and a read
 *     without read-zeroes writes none of it (fact 3).
 */
#include "block/block.h"

#include <errno.h>
#include <string.h>
#include <time.h>

typedef struct NullState {
    bool read_zeroes;
    uint64_t latency_ns;
} NullState;

static void null_delay(BlkNode *img)
{
    NullState *s = img->opaque;
    if (s->latency_ns) {
        struct timespec ts = {.tv_sec = (time_t)(s->latency_ns / 1000000000u),
                              .tv_nsec = (long)(s->latency_ns % 1000000000u)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
    }
}

static int null_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    NullState *s = img->opaque;
    (void)offset;
    (void)flags;
    null_delay(img);
    if (s->read_zeroes) { /* fact 3 */
        iov_memset(qiov, 0, 0, qiov->size);
    }
    return 0;
}

static int null_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    (void)offset;
    (void)qiov;
    (void)flags;
    null_delay(img);
    return 0;
}

static int null_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                              unsigned flags)
{
    (void)offset;
    (void)bytes;
    (void)flags;
    null_delay(img);
    return 0;
}

static int null_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    (void)offset;
    (void)bytes;
    null_delay(img);
    return 0;
}

static int null_flush(BlkNode *img)
{
    null_delay(img);
    return 0;
}

static int null_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    NullState *s = img->opaque;
    st->pnum = bytes;
    st->flags = 0;
    if (s->read_zeroes) { /* fact 3 */
        st->flags = BLK_STATUS_ZERO | BLK_STATUS_ALLOCATED | BLK_STATUS_OFFSET_VALID;
        st->map = offset;
        st->file = img;
    }
    return 0;
}

static int null_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                         bool shrink)
{
    (void)img;
    (void)size;
    (void)exact;
    (void)prealloc;
    (void)shrink;
    return blk_error(ENOTSUP, "Image format driver does not support resize"); /* 2 */
}

static int64_t null_get_allocated_size(BlkNode *img)
{
    (void)img;
    return 0; /* fact 2 */
}

static bool null_has_zero_init(BlkNode *img)
{
    NullState *s = img->opaque;
    return s->read_zeroes;
}

static void null_close(BlkNode *img)
{
    g_free(img->opaque);
    img->opaque = NULL;
}

#define NULL_DRIVER(name)                                                                \
    {                                                                                    \
        .format_name = name, .is_protocol = true, .close = null_close,                   \
        .preadv = null_preadv, .pwritev = null_pwritev,                                  \
        .pwrite_zeroes = null_pwrite_zeroes, .pdiscard = null_pdiscard,                  \
        .flush = null_flush, .block_status = null_block_status,                          \
        .truncate = null_truncate, .get_allocated_size = null_get_allocated_size,        \
        .has_zero_init = null_has_zero_init,                                             \
    }

const BlkDriver blk_null_co_driver = NULL_DRIVER("null-co");
const BlkDriver blk_null_aio_driver = NULL_DRIVER("null-aio");

BlkNode *blk_open_null(const char *filename, const BlkOpenOptions *opts)
{
    bool aio = g_str_has_prefix(filename, "null-aio:");
    const char *want = aio ? "null-aio://" : "null-co://";
    const BlkDriver *drv = aio ? &blk_null_aio_driver : &blk_null_co_driver;

    if (strcmp(filename, want) != 0) { /* fact 1 */
        blk_error(EINVAL,
                  "Could not open '%s': The only allowed filename for this driver is "
                  "'%s'",
                  filename, want);
        return NULL;
    }
    NullState *s = g_new0(NullState, 1);
    s->read_zeroes = opts->null_read_zeroes;
    s->latency_ns = opts->null_latency_ns;

    BlkNode *img = g_new0(BlkNode, 1);
    img->drv = drv;
    img->opaque = s;
    img->read_only = opts->read_only;
    img->cache = opts->cache;
    img->size = opts->null_size_set ? opts->null_size : 1ull << 30; /* fact 2 */
    img->request_alignment = 1;
    if (!opts->null_size_set && !s->read_zeroes && !s->latency_ns) { /* fact 5 */
        img->filename = g_strdup(want);
    } else {
        g_autoptr(GString) j = g_string_new("json:{");
        if (s->read_zeroes) {
            g_string_append(j, "\"read-zeroes\": true, ");
        }
        if (s->latency_ns) {
            g_string_append_printf(j, "\"latency-ns\": %" G_GUINT64_FORMAT ", ",
                                   s->latency_ns);
        }
        g_string_append_printf(j, "\"driver\": \"%s\"", drv->format_name);
        if (opts->null_size_set) {
            g_string_append_printf(j, ", \"size\": %" G_GUINT64_FORMAT, img->size);
        }
        g_string_append_c(j, '}');
        img->filename = g_string_free(g_steal_pointer(&j), FALSE);
    }
    return img;
}
