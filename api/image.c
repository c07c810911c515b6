/*
 * api/image.c: the public libqimg API of include/qimg/qimg.h -- image
 * handles, I/O, block status, information -- over the node layer.
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
 *     flush at close) and reports a failed flush ("Failed to flush 'NAME':
 *     ..."), unless the format then retries its write-back
 *     (BlkDriver.close_retry, QEMU's inactivate): its result stands, its
 *     message as the format words it (qcow2: QEMU's close-time lines, one
 *     per line of the GError's message), nothing when the retry worked.
 *     A vmstate error a caller was already given is not reported again
 *     (api/vmstate.c invariant 10).
 *  4. An image opened with copy_on_read is writable (the open refuses a
 *     read-only one, as QEMU does); its reads copy (block/cor.c), and its
 *     reads and writes are serialized (cor.c invariant 4).
 *  5. A read past the end of an image that is a protocol node (driver
 *     file, a host device) fails with EIO, as QEMU's block backend refuses
 *     it; the node itself would read zeros there (block.h invariant 3).
 *  6. Creating with the format "file" (qemu-img create -f file, QEMU
 *     iotest 142) creates what the raw format would: a file of the size
 *     rounded up to 512 bytes, with the file protocol's preallocation.
 */
#include "api/api.h"

#include <errno.h>
#include <inttypes.h>
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
    BlkPrealloc p;
    int ret = blk_prealloc_parse(s, &p);

    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    *out = (QimgPrealloc)p;
    return TRUE;
}

/* A failure under a json: name -- the format's own (a bad header, the
 * wrong key) or a layer's (backing or data file): QEMU names the json:
 * name only, not the image file (path) as well; the file's own failure
 * (the bare strerror) keeps its name. */
static void drop_layer_prefix(GError *err, const char *path)
{
    g_autofree char *layer = g_strdup_printf("Could not open '%s': ", path);
    char *m;

    if (!g_str_has_prefix(err->message, layer) ||
        strcmp(err->message + strlen(layer), g_strerror(err->code)) == 0) {
        return;
    }
    m = g_strdup(err->message + strlen(layer));
    g_free(err->message);
    err->message = m;
}

QimgImage *qimg_image_open(const char *filename, const QimgOpenOptions *opts,
                           GError **error)
{
    QimgOpenOptions in;
    BlkOpenOptions o;
    BlkNode *node;
    g_autofree char *path = NULL;
    ApiOpenLayers layers = {0};
    bool named = true; /* a failure of path names filename first */

    if (!api_struct_in(&in, sizeof(in), opts, "QimgOpenOptions", error)) {
        return NULL;
    }
    if ((!filename || !*filename) && !in.options) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Expecting one image file name");
        return NULL;
    }
    if (in.options && (in.image_opts || in.backing_name)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "options cannot be given with image_opts or backing_name");
        return NULL;
    }
    api_register_drivers();
    api_open_options(&in, &o);
    /* json-name.c invariant 1: the caller's own name, or a backing name */
    if (in.options) { /* json-name.c invariant 7 */
        if (!api_options_name(filename && *filename ? filename : NULL, in.options, &o,
                              &path, &layers, error)) {
            if (filename && *filename) {
                g_prefix_error(error, "Could not open '%s': ", filename);
            }
            api_open_layers_clear(&layers);
            return NULL;
        }
        named = filename && g_str_has_prefix(filename, "json:");
    } else if ((in.image_opts &&
                !api_image_opts_name(filename, &o, &path, &layers, error)) ||
               (!in.image_opts && in.backing_name &&
                g_str_has_prefix(filename, "json:") &&
                !api_json_backing_name(filename, &o, &path, error)) ||
               (!in.image_opts && !in.backing_name &&
                g_str_has_prefix(filename, "json:") &&
                !api_json_name(filename, &o, &path, &layers, error))) {
        g_prefix_error(error, "Could not open '%s': ", filename);
        api_open_layers_clear(&layers);
        return NULL;
    } else if (!in.options && !in.image_opts && !in.backing_name &&
               !(o.format && strcmp(o.format, "file") == 0)) {
        blk_error_clear();
        if (blk_protocol_check_name(filename) < 0) { /* protocol.c invariant 8 */
            blk_error_propagate(error, 0, "Could not open '%s'", filename);
            return NULL;
        }
    }
    if (o.copy_on_read && (o.read_only || o.snapshot)) { /* invariant 4 */
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not open '%s': Can't use copy-on-read on read-only device",
                    filename && *filename ? filename
                    : path                ? path
                                          : "");
        api_open_layers_clear(&layers);
        return NULL;
    }
    blk_error_clear();
    node = layers.quorum.children ? api_open_quorum(&layers.quorum, &o, error)
           : layers.blkverify.set
               ? api_open_blkverify(&layers.blkverify, &o, error)
               : api_open_node(path ? path : filename, &o, NULL, error);
    if (node && layers.outer_format) { /* json-name.c invariant 15 */
        BlkOpenOptions outer = {.format = layers.outer_format,
                                .read_only = o.read_only,
                                .cache = o.cache,
                                .force_share = o.force_share};
        /* QEMU's name for it: the layers' options as JSON */
        g_autofree char *name =
            node->file && strcmp(node->file->drv->format_name, "file") == 0
                ? g_strdup_printf("json:{\"driver\": \"%s\", \"file\": {\"driver\": "
                                  "\"%s\", \"file\": {\"driver\": \"file\", "
                                  "\"filename\": \"%s\"}}}",
                                  layers.outer_format, node->drv->format_name,
                                  node->file->filename)
                : g_strdup(node->filename);
        node = api_open_node_on(node, name, &outer, error);
    }
    if (node && layers.file_qemu_name) {
        /* json-blkdebug.c invariant 6: QEMU names the format by its file */
        g_free(node->qemu_name);
        node->qemu_name =
            api_qemu_format_name(node->drv->format_name, layers.file_qemu_name);
    }
    if (node && layers.blkdebug_rules) { /* json-name.c invariant 14 */
        /* json-blkdebug.c invariant 6: QEMU names it by its image */
        g_autofree char *qemu_name = api_blkdebug_top_name(layers.blkdebug_name, node);
        node = blk_open_faulty_over(layers.blkdebug_rules, node);
        if (!node) {
            blk_error_propagate(error, 0, NULL);
        } else {
            g_free(node->qemu_name);
            node->qemu_name = g_steal_pointer(&qemu_name);
        }
    }
    if (!node && path && named) { /* QEMU names the json: name, then the file */
        if (error && *error) {
            drop_layer_prefix(*error, path);
        }
        g_prefix_error(error, "Could not open '%s': ", filename);
    }
    api_open_layers_clear(&layers);
    return node ? api_image_new(node) : NULL;
}

QimgImage *qimg_image_open_layer(QimgImage *top, QimgImage *layer,
                                 const QimgOpenOptions *opts, GError **error)
{
    QimgOpenOptions in;
    BlkOpenOptions o;
    BlkNode *file, *node;
    const char *name = layer->node->filename;

    if (!api_struct_in(&in, sizeof(in), opts, "QimgOpenOptions", error)) {
        return NULL;
    }
    api_open_options(&in, &o);
    o.format = layer->node->drv->format_name;
    o.reopen = true; /* qcow2.c invariant 8: QEMU reopens it, quietly */
    if (!o.key_secret) {
        o.key_secret = layer->node->opts.key_secret; /* the layer's key, as QEMU */
    }
    blk_error_clear();
    /* the protocol stack of top's file: a recorded top records it too */
    file = blk_open_file_like(top->node->file, name, &o, BLK_ROLE_PROTOCOL);
    if (!file) {
        blk_error_propagate(error, 0, "Could not open '%s'", name);
        return NULL;
    }
    node = api_open_node_on(file, name, &o, error);
    return node ? api_image_new(node) : NULL;
}

QimgImage *qimg_image_open_backing(QimgImage *img, const QimgOpenOptions *opts,
                                   GError **error)
{
    QimgOpenOptions in;
    BlkOpenOptions o;
    BlkNode *node;
    g_autofree char *path = NULL;

    if (!img) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No image");
        return NULL;
    }
    if (!api_struct_in(&in, sizeof(in), opts, "QimgOpenOptions", error)) {
        return NULL;
    }
    if (in.options || in.image_opts) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "A backing file opens by the name its image records: options "
                    "and image_opts cannot be given");
        return NULL;
    }
    api_open_options(&in, &o);
    blk_error_clear();
    node = api_open_backing(img->node, &o, &path, error);
    if (!node && path && error && *error) { /* as qimg_image_open names it */
        drop_layer_prefix(*error, path);
        g_prefix_error(error, "Could not open '%s': ", img->node->full_backing_filename);
    }
    return node ? api_image_new(node) : NULL;
}

gboolean qimg_image_close(QimgImage *img, GError **error)
{
    bool retried = false;
    int ret = 0;

    if (!img) {
        return TRUE;
    }
    /* invariant 3; api.h invariant 2: the handle quiesces first (its
     * asynchronous requests, aio.h rule 6, then the vmstate writer) */
    api_debug_release(img); /* api/debug.c invariant 2 */
    api_aio_close(img);
    ret = api_quiesce_close(img);
    if (ret == 0 && !img->node->read_only) {
        ret = blk_flush(img->node);
        if (ret < 0 && img->node->drv->close_retry) { /* invariant 3 */
            ret = img->node->drv->close_retry(img->node, &retried);
        }
    }
    if (ret < 0 && retried) {
        blk_error_propagate(error, ret, NULL);
    } else if (ret < 0) {
        blk_error_propagate(error, ret, "Failed to flush '%s'", img->node->filename);
    }
    api_image_destroy(img);
    return ret == 0;
}

void qimg_image_free(QimgImage *img)
{
    qimg_image_close(img, NULL);
}

gboolean qimg_name_check(const char *filename, GError **error)
{
    if (!filename) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Expecting one image file name");
        return FALSE;
    }
    blk_error_clear();
    if (blk_protocol_check_name(filename) < 0) { /* protocol.c invariant 8 */
        blk_error_propagate(error, 0, NULL);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_image_create(const char *filename, const QimgCreateOptions *opts,
                           GError **error)
{
    QimgCreateOptions in;
    BlkCreateOptions co;

    if (!api_struct_in(&in, sizeof(in), opts, "QimgCreateOptions", error)) {
        return FALSE;
    }
    opts = &in;
    if (!opts->format) {
        g_set_error(error, QIMG_ERROR, EINVAL, "No image format given");
        return FALSE;
    }
    api_register_drivers();
    const BlkDriver *drv = blk_find_format(opts->format);
    if (drv == &blk_file_driver) { /* invariant 6 */
        drv = blk_find_format("raw");
    }
    if (!drv || drv->is_protocol) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Unknown file format '%s'", opts->format);
        return FALSE;
    }
    blk_error_clear();
    if (api_format_usable(drv) < 0) { /* formats.c invariant 2 */
        blk_error_propagate(error, 0, "Could not create '%s'", filename);
        return FALSE;
    }
    if (!drv->create) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Format driver '%s' does not support image creation", opts->format);
        return FALSE;
    }
    api_create_options(opts, &co);
    blk_error_clear();
    if (!qimg_name_check(filename, error)) { /* protocol.c invariant 8, -f file too */
        return FALSE;
    }
    int ret = drv->create(filename, &co);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

/* Invariant 2. */
static int after_write(BlkNode *node, int ret)
{
    if (ret == 0 && !node->drv->is_protocol &&
        (node->cache == BLK_CACHE_WRITETHROUGH || node->cache == BLK_CACHE_DIRECTSYNC)) {
        ret = blk_flush_fua(node); /* block.h invariant 7: QEMU's emulated FUA */
    }
    return ret;
}

/* A request of api_io() other than a flush (invariant 2 included). */
static int api_io_plain(BlkNode *node, ApiIoOp op, uint64_t offset, uint64_t len,
                        const BlkIOV *q, unsigned flags)
{
    switch (op) {
    case API_IO_WRITE:
        return after_write(node, blk_pwritev(node, offset, q, flags));
    case API_IO_ZERO:
        return after_write(node, blk_pwrite_zeroes(node, offset, len, flags));
    case API_IO_DISCARD:
        return after_write(node, blk_pdiscard(node, offset, len));
    default:
        return blk_preadv(node, offset, q, 0);
    }
}

static const char *const io_what[] = {
    [API_IO_READ] = "Could not read",
    [API_IO_WRITE] = "Could not write",
    [API_IO_ZERO] = "Could not write zeroes to",
    [API_IO_DISCARD] = "Could not discard",
    [API_IO_FLUSH] = "Could not flush",
};

int api_io(QimgImage *img, ApiIoOp op, uint64_t offset, uint64_t len, const BlkIOV *q,
           unsigned flags)
{
    BlkNode *node = img->node;
    int ret;

    if (node->opts.copy_on_read && op != API_IO_FLUSH) { /* invariant 4 */
        blk_cor_lock();
        ret = op == API_IO_READ ? blk_cor_preadv(node, offset, q)
                                : api_io_plain(node, op, offset, len, q, flags);
        blk_cor_unlock();
        return ret;
    }
    if (op == API_IO_READ && node->drv->is_protocol &&
        (offset > node->size || len > node->size - offset)) { /* invariant 5 */
        return blk_error(EIO,
                         "Read at offset %" PRIu64 " of %" PRIu64
                         " bytes is beyond the end of '%s'",
                         offset, len, node->filename);
    }
    if (op == API_IO_FLUSH) {
        ret = api_quiesce(img); /* api.h invariant 2 */
        return ret < 0 ? ret : blk_flush(node);
    }
    return api_io_plain(node, op, offset, len, q, flags);
}

int api_copy_in(QimgImage *img, uint64_t offset, uint64_t len, BlkNode *src,
                uint64_t src_offset)
{
    return after_write(img->node, blk_copy_in(img->node, offset, len, src, src_offset));
}

void api_io_error(QimgImage *img, ApiIoOp op, int ret, GError **error)
{
    blk_error_propagate(error, ret, "%s '%s'", io_what[op], img->node->filename);
}

static gboolean node_result(BlkNode *node, int ret, const char *what, GError **error)
{
    if (ret < 0) {
        blk_error_propagate(error, ret, "%s '%s'", what, node->filename);
        return FALSE;
    }
    return TRUE;
}

static gboolean io_result(QimgImage *img, ApiIoOp op, int ret, GError **error)
{
    if (ret < 0) {
        api_io_error(img, op, ret, error);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_image_preadv(QimgImage *img, uint64_t offset, const struct iovec *iov,
                           int iovcnt, GError **error)
{
    BlkIOV q;
    iov_init_external(&q, (struct iovec *)iov, iovcnt);
    return io_result(img, API_IO_READ, api_io(img, API_IO_READ, offset, q.size, &q, 0),
                     error);
}

gboolean qimg_image_pwritev(QimgImage *img, uint64_t offset, const struct iovec *iov,
                            int iovcnt, GError **error)
{
    BlkIOV q;
    iov_init_external(&q, (struct iovec *)iov, iovcnt);
    return io_result(img, API_IO_WRITE, api_io(img, API_IO_WRITE, offset, q.size, &q, 0),
                     error);
}

gboolean qimg_image_pread(QimgImage *img, uint64_t offset, void *buf, size_t len,
                          GError **error)
{
    struct iovec v = {.iov_base = buf, .iov_len = len};
    return qimg_image_preadv(img, offset, &v, 1, error);
}

gboolean qimg_image_pwrite(QimgImage *img, uint64_t offset, const void *buf, size_t len,
                           GError **error)
{
    struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
    return qimg_image_pwritev(img, offset, &v, 1, error);
}

gboolean qimg_image_pwrite_zeroes(QimgImage *img, uint64_t offset, uint64_t len,
                                  unsigned flags, GError **error)
{
    return io_result(img, API_IO_ZERO, api_io(img, API_IO_ZERO, offset, len, NULL, flags),
                     error);
}

gboolean qimg_image_pdiscard(QimgImage *img, uint64_t offset, uint64_t len,
                             GError **error)
{
    return io_result(img, API_IO_DISCARD,
                     api_io(img, API_IO_DISCARD, offset, len, NULL, 0), error);
}

gboolean qimg_image_flush(QimgImage *img, GError **error)
{
    return io_result(img, API_IO_FLUSH, api_io(img, API_IO_FLUSH, 0, 0, NULL, 0), error);
}

gboolean qimg_image_truncate(QimgImage *img, uint64_t size, bool shrink,
                             QimgPrealloc prealloc, GError **error)
{
    if (size < img->node->size && !shrink) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Use the --shrink option to perform a shrink operation.");
        return FALSE;
    }
    blk_error_clear();
    int ret = api_quiesce(img);
    if (ret < 0) {
        return node_result(img->node, ret, "Could not resize", error);
    }
    ret = blk_truncate(img->node, size, true, api_prealloc(prealloc), shrink);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return node_result(img->node, after_write(img->node, 0), "Could not flush", error);
}

gboolean api_pwrite_compressed(QimgImage *img, uint64_t offset, const BlkIOV *q,
                               GError **error)
{
    BlkNode *node = img->node;

    if (!node->drv->pwrite_compressed) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Compression is not supported for format '%s'",
                    node->drv->format_name);
        return FALSE;
    }
    if (node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only", node->filename);
        return FALSE;
    }
    int ret = after_write(node, node->drv->pwrite_compressed(node, offset, q));
    return node_result(node, ret, "Could not write compressed data to", error);
}

gboolean qimg_image_pwrite_compressed(QimgImage *img, uint64_t offset, const void *buf,
                                      size_t len, GError **error)
{
    BlkIOV q;
    iov_init_buf(&q, (void *)buf, len);
    return api_pwrite_compressed(img, offset, &q, error);
}

uint64_t qimg_image_size(QimgImage *img)
{
    return img->node->size;
}

/* A metadata operation on a writable node whose driver has it. */
gboolean api_can_change(BlkNode *node, bool has_op, const char *what, GError **error)
{
    if (node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only", node->filename);
        return FALSE;
    }
    if (!has_op) {
        g_set_error(error, QIMG_ERROR, ENOTSUP, "Format '%s' does not support %s",
                    node->drv->format_name, what);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_image_make_empty(QimgImage *img, GError **error)
{
    BlkNode *node = img->node;
    int ret;

    if (!api_can_change(node, node->drv->make_empty, "emptying", error)) {
        return FALSE;
    }
    ret = api_quiesce(img);
    if (ret == 0) {
        blk_error_clear();
        ret = node->drv->make_empty(node);
    }
    if (ret < 0) { /* QEMU's bdrv_make_empty: the errno's text */
        blk_error_clear();
        g_set_error(error, QIMG_ERROR, -ret, "Failed to empty %s: %s",
                    blk_node_name(node), g_strerror(-ret));
        return FALSE;
    }
    return TRUE;
}

char *qimg_image_resolve_backing(QimgImage *img, const char *backing_file)
{
    return blk_resolve_backing_name(blk_plain_name(img->node->filename), backing_file);
}

char *qimg_backing_name_resolve(const char *image_filename, const char *backing_file)
{
    return blk_resolve_backing_name(image_filename, backing_file);
}

gboolean qimg_format_name_valid(const char *fmt)
{
    return fmt && blk_qemu_driver_name(fmt);
}

int qimg_strtosz(const char *s, uint64_t *value, gboolean *hex_suffix)
{
    bool hex = false;
    int ret = s && value ? blk_strtosz(s, value, &hex) : -EINVAL;

    if (hex_suffix) {
        *hex_suffix = hex;
    }
    return ret;
}

gboolean qimg_image_set_backing(QimgImage *img, const char *backing_file,
                                const char *backing_fmt, GError **error)
{
    BlkNode *node = img->node;
    int ret;

    if (!api_can_change(node, node->drv->set_backing, "changing the backing file",
                        error)) {
        return FALSE;
    }
    if (backing_file && *backing_file && !backing_fmt) {
        g_set_error(error, QIMG_ERROR, EINVAL, "backing format must be specified");
        return FALSE;
    }
    ret = api_quiesce(img);
    if (ret == 0) {
        blk_error_clear();
        ret = node->drv->set_backing(node, backing_file, backing_fmt);
    }
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL); /* the caller names the file */
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_image_has_zero_init(QimgImage *img)
{
    const BlkDriver *drv = img->node->drv;
    return drv->has_zero_init && drv->has_zero_init(img->node);
}

const char *qimg_image_filename(QimgImage *img)
{
    return img->node->filename;
}

const char *qimg_image_format(QimgImage *img)
{
    return img->node->drv->format_name;
}

gboolean qimg_image_format_probed(QimgImage *img)
{
    return img->node->probed;
}

QimgImage *qimg_image_backing(QimgImage *img)
{
    return img->backing; /* api.h invariant 1 */
}

bool qimg_image_is_read_only(QimgImage *img)
{
    return img->node->read_only;
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

static gboolean status_layer(QimgImage *img, uint64_t offset, uint64_t len,
                             QimgExtent *out, GError **error)
{
    BlkStatus st;
    int ret = blk_block_status(img->node, offset, len, &st);
    if (ret < 0) {
        return node_result(img->node, ret, "Could not get block status of", error);
    }
    fill_extent(out, offset, &st, 0);
    return TRUE;
}

/* qemu-img map's answer for the whole chain (blk_block_status_chain). */
static gboolean status_chain(QimgImage *img, uint64_t offset, uint64_t len,
                             QimgExtent *out, GError **error)
{
    BlkNode *cur = img->node, *failed = NULL;
    int depth = 0;
    BlkStatus st;

    if (offset >= cur->size || len == 0) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Block status request out of range");
        return FALSE;
    }
    int ret = blk_block_status_chain(cur, offset, len, &st, &depth, &failed);
    if (ret < 0) {
        return node_result(failed, ret, "Could not get block status of", error);
    }
    fill_extent(out, offset, &st, depth);
    return TRUE;
}

gboolean api_block_status(QimgImage *img, bool layer, uint64_t offset, uint64_t len,
                          QimgExtent *out, GError **error)
{
    return layer ? status_layer(img, offset, len, out, error)
                 : status_chain(img, offset, len, out, error);
}

gboolean qimg_image_block_status_layer(QimgImage *img, uint64_t offset, uint64_t len,
                                       QimgExtent *out, GError **error)
{
    return status_layer(img, offset, len, out, error);
}

gboolean qimg_image_block_status(QimgImage *img, uint64_t offset, uint64_t len,
                                 QimgExtent *out, GError **error)
{
    return status_chain(img, offset, len, out, error);
}
