/*
 * raw/raw.c: the raw format driver.
 *
 * Owns: presenting a protocol node (a file or block device) byte for byte
 * as a virtual disk.
 *
 * Invariants:
 *  1. Guest offset == file offset; every request is passed to img->file
 *     unchanged (block.h invariant 1: no direct file access).
 *  2. The virtual size is the file size rounded up to 512 bytes (the tail
 *     reads as zeros), refreshed after every truncate.
 *  3. Block status is the file's own (holes read as zeros), with the file
 *     as the node the offset refers to.
 */
#include "block/block.h"

#include <errno.h>
#include <string.h>

static int raw_probe(const uint8_t *buf, size_t len)
{
    return 1; /* anything can be raw; real formats score higher */
}

static int raw_open(QimgImage *img, const char *filename, const QimgOpenOptions *opts,
                    GError **error)
{
    if (opts->snapshot) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Block format 'raw' does not support internal snapshots");
        return -ENOTSUP;
    }
    /* invariant 2; the block layer works in 512-byte sectors, as QEMU's does */
    img->size = ROUND_UP(img->file->size, 512);
    return 0;
}

static int raw_preadv(QimgImage *img, uint64_t offset, const QimgIOV *qiov,
                      unsigned flags)
{
    return blk_preadv(img->file, offset, qiov, flags);
}

static int raw_pwritev(QimgImage *img, uint64_t offset, const QimgIOV *qiov,
                       unsigned flags)
{
    return blk_pwritev(img->file, offset, qiov, flags);
}

static int raw_pwrite_zeroes(QimgImage *img, uint64_t offset, uint64_t bytes,
                             unsigned flags)
{
    return blk_pwrite_zeroes(img->file, offset, bytes, flags);
}

static int raw_pdiscard(QimgImage *img, uint64_t offset, uint64_t bytes)
{
    return blk_pdiscard(img->file, offset, bytes);
}

static int raw_flush(QimgImage *img)
{
    return blk_flush(img->file);
}

static int raw_block_status(QimgImage *img, uint64_t offset, uint64_t bytes,
                            BlkStatus *st)
{
    int ret = blk_block_status(img->file, offset, bytes, st); /* invariant 3 */
    if (ret < 0) {
        return ret;
    }
    if (!(st->flags & BLK_STATUS_OFFSET_VALID)) {
        st->map = offset;
        st->flags |= BLK_STATUS_OFFSET_VALID;
    }
    st->file = img->file;
    st->flags |= BLK_STATUS_ALLOCATED;
    return 0;
}

static int raw_truncate(QimgImage *img, uint64_t size, bool exact, QimgPrealloc prealloc,
                        bool shrink, GError **error)
{
    int ret = blk_truncate(img->file, size, exact, prealloc, shrink, error);
    img->size = ROUND_UP(img->file->size, 512); /* invariant 2 */
    return ret;
}

static int raw_create(const char *filename, const QimgCreateOptions *opts, GError **error)
{
    QimgPrealloc prealloc = QIMG_PREALLOC_OFF;
    uint64_t size = ROUND_UP(opts->size, 512); /* as qemu-img creates it */

    if (opts->backing_file) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Backing file not supported for file format 'raw'");
        return -ENOTSUP;
    }
    if (opts->options) {
        GHashTableIter it;
        gpointer k, v;
        g_hash_table_iter_init(&it, opts->options);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            if (strcmp(k, "preallocation") == 0) {
                if (!qimg_prealloc_parse(v, &prealloc, error)) {
                    return -EINVAL;
                }
                if (prealloc == QIMG_PREALLOC_METADATA) {
                    g_set_error(error, QIMG_ERROR, EINVAL,
                                "Unsupported preallocation mode 'metadata'");
                    return -EINVAL;
                }
            } else if (strcmp(k, "size") != 0) {
                g_set_error(error, QIMG_ERROR, EINVAL, "Invalid parameter '%s'",
                            (const char *)k);
                return -EINVAL;
            }
        }
    }
    return blk_file_create(filename, size, prealloc, error);
}

static bool raw_has_zero_init(QimgImage *img)
{
    return img->file->drv->has_zero_init && img->file->drv->has_zero_init(img->file);
}

const QimgDriver blk_raw_driver = {
    .format_name = "raw",
    .probe = raw_probe,
    .open = raw_open,
    .preadv = raw_preadv,
    .pwritev = raw_pwritev,
    .pwrite_zeroes = raw_pwrite_zeroes,
    .pdiscard = raw_pdiscard,
    .flush = raw_flush,
    .block_status = raw_block_status,
    .truncate = raw_truncate,
    .create = raw_create,
    .has_zero_init = raw_has_zero_init,
};
