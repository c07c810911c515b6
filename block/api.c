/*
 * block/api.c: the public libqimg API (include/qimg/qimg.h) over the
 * generic image layer.
 *
 * Owns: argument checks at the API edge, the GError conversion of internal
 * -errno results (block.h invariant 2), writethrough semantics for format
 * nodes, and chain-wide block status as qemu-img map reports it.
 *
 * Invariants:
 *  1. Every failing call sets the GError, with the file name where useful.
 *  2. With cache=writethrough or directsync, a write through a format node
 *     is followed by a flush of that node before the call returns, so
 *     metadata it changed is durable too (the protocol node alone is O_DSYNC).
 *  3. qimg_image_close() flushes a writable image (writeback must still
 *     flush at close) and reports a failed flush.
 */
#include "block/block.h"

#include <errno.h>
#include <string.h>

static const char *const cache_names[] = {
    [QIMG_CACHE_WRITEBACK] = "writeback", [QIMG_CACHE_WRITETHROUGH] = "writethrough",
    [QIMG_CACHE_NONE] = "none",           [QIMG_CACHE_DIRECTSYNC] = "directsync",
    [QIMG_CACHE_UNSAFE] = "unsafe",
};

gboolean qimg_cache_mode_parse(const char *s, QimgCacheMode *mode, GError **error)
{
    for (size_t i = 0; i < G_N_ELEMENTS(cache_names); i++) {
        if (strcmp(s, cache_names[i]) == 0) {
            *mode = (QimgCacheMode)i;
            return TRUE;
        }
    }
    if (strcmp(s, "off") == 0) {
        *mode = QIMG_CACHE_NONE;
        return TRUE;
    }
    g_set_error(error, QIMG_ERROR, EINVAL, "Invalid cache option: %s", s);
    return FALSE;
}

const char *qimg_cache_mode_name(QimgCacheMode mode)
{
    return (unsigned)mode < G_N_ELEMENTS(cache_names) ? cache_names[mode] : "?";
}

gboolean qimg_prealloc_parse(const char *s, QimgPrealloc *out, GError **error)
{
    static const char *const names[] = {"off", "metadata", "falloc", "full"};
    for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (QimgPrealloc)i;
            return TRUE;
        }
    }
    g_set_error(error, QIMG_ERROR, EINVAL, "Invalid parameter '%s'", s);
    return FALSE;
}

QimgImage *qimg_image_open(const char *filename, const QimgOpenOptions *opts,
                           GError **error)
{
    QimgOpenOptions def = QIMG_OPEN_OPTIONS_INIT;

    if (!filename || !*filename) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Expecting one image file name");
        return NULL;
    }
    blk_error_clear();
    return blk_open_image(filename, opts ? opts : &def, NULL, error);
}

gboolean qimg_image_close(QimgImage *img, GError **error)
{
    int ret = 0;

    if (!img) {
        return TRUE;
    }
    if (!img->read_only) {
        ret = blk_flush(img); /* invariant 3 */
    }
    if (ret < 0) {
        g_autofree char *p = g_strdup_printf("Failed to flush '%s'", img->filename);
        blk_error_propagate(error, ret, p);
    }
    blk_close(img);
    return ret == 0;
}

void qimg_image_free(QimgImage *img)
{
    qimg_image_close(img, NULL);
}

gboolean qimg_image_create(const char *filename, const QimgCreateOptions *opts,
                           GError **error)
{
    if (!opts || !opts->format) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No image format given");
        return FALSE;
    }
    const QimgDriver *drv = blk_find_format(opts->format);
    if (!drv || drv->is_protocol) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Unknown file format '%s'", opts->format);
        return FALSE;
    }
    if (!drv->create) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Format driver '%s' does not support image creation", opts->format);
        return FALSE;
    }
    blk_error_clear();
    return drv->create(filename, opts, error) == 0;
}

static gboolean io_result(QimgImage *img, int ret, const char *what, GError **error)
{
    if (ret < 0) {
        g_autofree char *p = g_strdup_printf("%s '%s'", what, img->filename);
        blk_error_propagate(error, ret, p);
        return FALSE;
    }
    return TRUE;
}

/* Invariant 2. */
static int after_write(QimgImage *img, int ret)
{
    if (ret == 0 && !img->drv->is_protocol &&
        (img->cache == QIMG_CACHE_WRITETHROUGH || img->cache == QIMG_CACHE_DIRECTSYNC)) {
        ret = blk_flush(img);
    }
    return ret;
}

gboolean qimg_image_preadv(QimgImage *img, uint64_t offset, const struct iovec *iov,
                           int iovcnt, GError **error)
{
    QimgIOV q;
    iov_init_external(&q, (struct iovec *)iov, iovcnt);
    return io_result(img, blk_preadv(img, offset, &q, 0), "Could not read", error);
}

gboolean qimg_image_pwritev(QimgImage *img, uint64_t offset, const struct iovec *iov,
                            int iovcnt, GError **error)
{
    QimgIOV q;
    iov_init_external(&q, (struct iovec *)iov, iovcnt);
    int ret = after_write(img, blk_pwritev(img, offset, &q, 0));
    return io_result(img, ret, "Could not write", error);
}

gboolean qimg_image_pread(QimgImage *img, uint64_t offset, void *buf, size_t len,
                          GError **error)
{
    return io_result(img, blk_pread(img, offset, buf, len), "Could not read", error);
}

gboolean qimg_image_pwrite(QimgImage *img, uint64_t offset, const void *buf, size_t len,
                           GError **error)
{
    int ret = after_write(img, blk_pwrite(img, offset, buf, len, 0));
    return io_result(img, ret, "Could not write", error);
}

gboolean qimg_image_pwrite_zeroes(QimgImage *img, uint64_t offset, uint64_t len,
                                  unsigned flags, GError **error)
{
    int ret = after_write(img, blk_pwrite_zeroes(img, offset, len, flags));
    return io_result(img, ret, "Could not write zeroes to", error);
}

gboolean qimg_image_pdiscard(QimgImage *img, uint64_t offset, uint64_t len,
                             GError **error)
{
    int ret = after_write(img, blk_pdiscard(img, offset, len));
    return io_result(img, ret, "Could not discard", error);
}

gboolean qimg_image_flush(QimgImage *img, GError **error)
{
    return io_result(img, blk_flush(img), "Could not flush", error);
}

gboolean qimg_image_truncate(QimgImage *img, uint64_t size, bool shrink,
                             QimgPrealloc prealloc, GError **error)
{
    if (size < img->size && !shrink) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Use the --shrink option to perform a shrink operation.");
        return FALSE;
    }
    blk_error_clear();
    if (blk_truncate(img, size, true, prealloc, shrink, error) < 0) {
        return FALSE;
    }
    return io_result(img, after_write(img, 0), "Could not flush", error);
}

gboolean qimg_image_pwrite_compressed(QimgImage *img, uint64_t offset, const void *buf,
                                      size_t len, GError **error)
{
    if (!img->drv->pwrite_compressed) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Compression is not supported for format '%s'",
                    img->drv->format_name);
        return FALSE;
    }
    if (img->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only", img->filename);
        return FALSE;
    }
    QimgIOV q;
    iov_init_buf(&q, (void *)buf, len);
    int ret = after_write(img, img->drv->pwrite_compressed(img, offset, &q));
    return io_result(img, ret, "Could not write compressed data to", error);
}

uint64_t qimg_image_size(QimgImage *img)
{
    return img->size;
}

const char *qimg_image_filename(QimgImage *img)
{
    return img->filename;
}

const char *qimg_image_format(QimgImage *img)
{
    return img->drv->format_name;
}

QimgImage *qimg_image_backing(QimgImage *img)
{
    return img->backing;
}

bool qimg_image_is_read_only(QimgImage *img)
{
    return img->read_only;
}

static void fill_extent(QimgExtent *out, uint64_t offset, const BlkStatus *st, int depth)
{
    out->start = offset;
    out->length = st->pnum;
    out->flags = st->flags;
    out->depth = depth;
    out->offset = (st->flags & BLK_STATUS_OFFSET_VALID) ? st->map : 0;
    out->filename = st->file ? st->file->filename : NULL;
}

gboolean qimg_image_block_status_layer(QimgImage *img, uint64_t offset, uint64_t len,
                                       QimgExtent *out, GError **error)
{
    BlkStatus st;
    int ret = blk_block_status(img, offset, len, &st);
    if (ret < 0) {
        return io_result(img, ret, "Could not get block status of", error);
    }
    fill_extent(out, offset, &st, 0);
    return TRUE;
}

/*
 * Walk down the chain until a layer defines the range, as qemu-img map does:
 * an unallocated range with no backing node below reads as zeros (and is not
 * "present"); so does a range past the end of the backing node.
 */
gboolean qimg_image_block_status(QimgImage *img, uint64_t offset, uint64_t len,
                                 QimgExtent *out, GError **error)
{
    QimgImage *cur = img;
    int depth = 0;
    BlkStatus st;

    if (offset >= img->size || len == 0) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Block status request out of range");
        return FALSE;
    }
    len = MIN(len, img->size - offset);
    for (;;) {
        int ret = blk_block_status(cur, offset, len, &st);
        if (ret < 0) {
            return io_result(cur, ret, "Could not get block status of", error);
        }
        len = st.pnum;
        if (st.flags & BLK_STATUS_ALLOCATED) {
            break;
        }
        if (!cur->backing) {
            st.flags |= BLK_STATUS_ZERO;
            break;
        }
        if (offset >= cur->backing->size) {
            st.flags |= BLK_STATUS_ZERO;
            break;
        }
        cur = cur->backing;
        depth++;
    }
    fill_extent(out, offset, &st, depth);
    return TRUE;
}

QimgInfo *qimg_image_get_info(QimgImage *img, GError **error)
{
    g_autoptr(QimgInfo) info = g_new0(QimgInfo, 1);

    info->filename = g_strdup(img->filename);
    info->format = g_strdup(img->drv->format_name);
    info->virtual_size = img->size;
    int64_t a = blk_get_allocated_size(img->file ? img->file : img);
    info->actual_size = a < 0 ? -1 : a;
    info->backing_filename = g_strdup(img->backing_filename);
    info->full_backing_filename = g_strdup(img->full_backing_filename);
    info->backing_format = g_strdup(img->backing_format);
    if (img->drv->get_info && img->drv->get_info(img, info, error) < 0) {
        return NULL;
    }
    return g_steal_pointer(&info);
}

void qimg_info_free(QimgInfo *info)
{
    if (!info) {
        return;
    }
    g_free(info->filename);
    g_free(info->format);
    g_free(info->backing_filename);
    g_free(info->full_backing_filename);
    g_free(info->backing_format);
    if (info->snapshots) {
        for (guint i = 0; i < info->snapshots->len; i++) {
            QimgSnapshotInfo *s = &g_array_index(info->snapshots, QimgSnapshotInfo, i);
            g_free(s->id);
            g_free(s->name);
        }
        g_array_unref(info->snapshots);
    }
    g_free(info->compat);
    g_free(info->compression_type);
    g_free(info->data_file);
    g_free(info);
}
