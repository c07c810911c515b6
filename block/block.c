/*
 * block/block.c: the generic image layer.
 *
 * Owns: the driver table, format probing, opening an image with its
 * protocol child and its backing chain, and the request checks every
 * request passes before it reaches a driver (block.h invariant 3).
 *
 * Invariants (besides block.h's):
 *  1. A backing chain never contains the same file twice: each file is
 *     identified by its canonical path, and a repeat refuses the open
 *     ("Backing file 'x' creates an infinite loop").
 *  2. Backing nodes are always opened read-only.
 *  3. Reads of a backing node past its end return zeros
 *     (blk_preadv_padded), as QEMU reads a shorter backing file.
 *  4. Format probing never guesses anything but raw for an unknown file;
 *     a driver claims a file only by its magic.
 *  5. Locks (block.h invariant 6): once the format is known, and before
 *     its driver reads the file, the protocol node holds the permissions of
 *     the driver's file_role; force_share, no_io and deny_write reach every
 *     file of the chain, resize only the image's own file.  A read-write
 *     open with force_share is refused, as QEMU refuses it, before any file
 *     is opened.  A backing file's failure reads as QEMU words it: "Could
 *     not open backing file: " and the backing file's own message.
 */
#include "block/block.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const QimgDriver *const format_drivers[] = {
    &blk_qcow2_driver,
    &blk_raw_driver,
};

const QimgDriver *blk_find_format(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(format_drivers); i++) {
        if (strcmp(format_drivers[i]->format_name, name) == 0) {
            return format_drivers[i];
        }
    }
    if (strcmp(name, "file") == 0) {
        return &blk_file_driver;
    }
    return NULL;
}

/* Invariant 4: highest probe score wins; raw scores 1 for anything. */
const QimgDriver *blk_probe_buf(const uint8_t *buf, size_t n)
{
    const QimgDriver *best = &blk_raw_driver;
    int best_score = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(format_drivers); i++) {
        const QimgDriver *d = format_drivers[i];
        int score = d->probe ? d->probe(buf, n) : 0;
        if (score > best_score) {
            best_score = score;
            best = d;
        }
    }
    return best;
}

static const QimgDriver *probe_format(QimgImage *file)
{
    uint8_t buf[BLK_PROBE_BUF_SIZE] = {0};
    int64_t len = blk_getlength(file);
    size_t n = len < 0 ? 0 : (size_t)MIN((int64_t)sizeof(buf), len);

    if (n > 0 && blk_pread(file, 0, buf, n) < 0) {
        n = 0;
    }
    return blk_probe_buf(buf, n);
}

QimgImage *blk_open_file_opts(const char *filename, const QimgOpenOptions *opts,
                              BlkNodeRole role, GError **error)
{
    QimgImage *img = g_new0(QimgImage, 1);
    QimgOpenOptions o = {
        .read_only = opts->read_only,
        .cache = opts->cache,
        .force_share = opts->force_share,
        .no_io = opts->no_io,
        .resize = opts->resize,
        .deny_write = opts->deny_write,
    };
    int ret;

    img->drv = &blk_file_driver;
    img->filename = g_strdup(filename);
    img->read_only = o.read_only;
    img->cache = o.cache;
    img->request_alignment = 1;
    img->opts = o;
    if (img->drv->open(img, filename, &o, error) < 0) {
        g_free(img->filename);
        g_free(img);
        return NULL;
    }
    if (role != BLK_ROLE_PROTOCOL) {
        ret = blk_set_role_perm(img, role, &o);
        if (ret < 0) {
            g_set_error(error, QIMG_ERROR, -ret, "Could not open '%s': %s", filename,
                        blk_error_message());
            blk_error_clear();
            blk_close(img);
            return NULL;
        }
    }
    return img;
}

QimgImage *blk_open_file(const char *filename, bool read_only, QimgCacheMode cache,
                         GError **error)
{
    QimgOpenOptions o = {.read_only = read_only, .cache = cache};

    return blk_open_file_opts(filename, &o, BLK_ROLE_PROTOCOL, error);
}

int blk_set_role_perm(QimgImage *img, BlkNodeRole role, const QimgOpenOptions *opts)
{
    unsigned perm, shared;

    if (!img->drv->set_perm) {
        return 0;
    }
    blk_lock_perms(role, opts, &perm, &shared);
    return img->drv->set_perm(img, perm, shared);
}

const char *blk_open_error_detail(const GError *err, const char *filename)
{
    g_autofree char *prefix = g_strdup_printf("Could not open '%s': ", filename);
    const char *rest;

    if (!g_str_has_prefix(err->message, prefix)) {
        return err->message;
    }
    rest = err->message + strlen(prefix);
    return strcmp(rest, g_strerror(err->code)) == 0 ? err->message : rest;
}

char *blk_resolve_backing_name(const char *image_filename, const char *backing)
{
    if (g_path_is_absolute(backing) || strstr(backing, "://") != NULL) {
        return g_strdup(backing);
    }
    g_autofree char *dir = g_path_get_dirname(image_filename);
    if (strcmp(dir, ".") == 0) {
        return g_strdup(backing);
    }
    return g_build_filename(dir, backing, NULL);
}

static bool chain_contains(GSList *chain, const char *canon)
{
    for (GSList *l = chain; l; l = l->next) {
        if (strcmp(l->data, canon) == 0) {
            return true;
        }
    }
    return false;
}

static int open_backing(QimgImage *img, const QimgOpenOptions *opts, GSList *chain,
                        GError **error)
{
    QimgOpenOptions bo = *opts;
    g_autoptr(GError) local = NULL;

    bo.format = img->backing_format;
    bo.read_only = true; /* invariant 2 */
    bo.resize = false;
    bo.snapshot = NULL;
    bo.check_mode = false;
    img->backing = blk_open_image(img->full_backing_filename, &bo, chain, &local);
    if (!img->backing) {
        g_set_error(error, QIMG_ERROR, local->code, "Could not open backing file: %s",
                    blk_open_error_detail(local, img->full_backing_filename));
        return -local->code;
    }
    return 0;
}

static const char *const event_names[BLKEV__MAX] = {
    [BLKEV_NONE] = "none",
    [BLKEV_DATA_WRITE] = "data_write",
    [BLKEV_COW_WRITE] = "cow_write",
    [BLKEV_COMPRESSED_WRITE] = "compressed_write",
    [BLKEV_REFBLOCK_UPDATE] = "refblock_update",
    [BLKEV_REFBLOCK_ALLOC] = "refblock_alloc",
    [BLKEV_REFTABLE_GROW] = "reftable_grow",
    [BLKEV_L2_ALLOC] = "l2_alloc",
    [BLKEV_L2_UPDATE] = "l2_update",
    [BLKEV_L1_UPDATE] = "l1_update",
    [BLKEV_L1_GROW] = "l1_grow",
    [BLKEV_HEADER_UPDATE] = "header_update",
    [BLKEV_SNAPSHOT_TABLE] = "snapshot_table",
    [BLKEV_CLUSTER_FREE] = "cluster_free",
    [BLKEV_FLUSH] = "flush",
};

const char *blk_event_name(BlkEvent ev)
{
    return (unsigned)ev < BLKEV__MAX ? event_names[ev] : NULL;
}

void blk_event(QimgImage *img, BlkEvent ev)
{
    if (img && img->drv->event) {
        img->drv->event(img, ev);
    }
}

/*
 * Test nodes the caller may ask for by name (block.h invariant 5):
 * "blkdebug:RULES:FILE" puts a fault-injecting node under the format,
 * "record:LOG:FILE" a recording node (FILE may itself be blkdebug:...).
 */
static bool split_prefix(const char *filename, const char *prefix, char **arg,
                         const char **rest)
{
    const char *p, *colon;

    if (!g_str_has_prefix(filename, prefix)) {
        return false;
    }
    p = filename + strlen(prefix);
    colon = strchr(p, ':');
    if (!colon) {
        return false;
    }
    *arg = g_strndup(p, (gsize)(colon - p));
    *rest = colon + 1;
    return true;
}

QimgImage *blk_open_protocol(const char *filename, const QimgOpenOptions *opts,
                             BlkNodeRole role, unsigned flags, GError **error)
{
    g_autofree char *arg = NULL;
    const char *rest;
    QimgImage *node;

    if (!(flags & BLK_OPEN_USER_NAME)) {
        return blk_open_file_opts(filename, opts, role, error);
    }
    if (split_prefix(filename, "blkdebug:", &arg, &rest)) {
        node = blk_open_faulty(arg, rest, opts->read_only, opts->cache, error);
    } else if (split_prefix(filename, "record:", &arg, &rest)) {
        QimgImage *child = blk_open_protocol(rest, opts, BLK_ROLE_PROTOCOL, flags, error);
        node = child ? blk_open_record(arg, child, error) : NULL;
    } else if (g_str_has_prefix(filename, "blkdebug:") ||
               g_str_has_prefix(filename, "record:")) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not open '%s': expected blkdebug:RULES:FILE or "
                    "record:LOG:FILE",
                    filename);
        return NULL;
    } else {
        return blk_open_file_opts(filename, opts, role, error);
    }
    /* block.h invariant 6: the test node passes the role's locks down */
    if (node && role != BLK_ROLE_PROTOCOL) {
        int ret = blk_set_role_perm(node, role, opts);
        if (ret < 0) {
            g_set_error(error, QIMG_ERROR, -ret, "Could not open '%s': %s", filename,
                        blk_error_message());
            blk_error_clear();
            blk_close(node);
            return NULL;
        }
    }
    return node;
}

const char *blk_plain_name(const char *filename)
{
    const char *p = filename;

    for (;;) {
        const char *colon;
        if (g_str_has_prefix(p, "blkdebug:")) {
            colon = strchr(p + strlen("blkdebug:"), ':');
        } else if (g_str_has_prefix(p, "record:")) {
            colon = strchr(p + strlen("record:"), ':');
        } else {
            return p;
        }
        if (!colon) {
            return p;
        }
        p = colon + 1;
    }
}

QimgImage *blk_open_file_like(QimgImage *like, const char *filename,
                              const QimgOpenOptions *opts, BlkNodeRole role,
                              GError **error)
{
    QimgImage *child = blk_open_file_opts(filename, opts, role, error);

    /* A recorded image records its data file in the same log. */
    if (child && blk_is_record_node(like)) {
        return blk_open_record(blk_record_log_path(like), child, error);
    }
    return child;
}

static QimgImage *open_format(QimgImage *file, const QimgDriver *drv,
                              const char *filename, const char *canon,
                              const QimgOpenOptions *opts, GSList *chain, bool user_name,
                              GError **error)
{
    bool ro = opts->read_only || opts->snapshot != NULL;
    bool probed = !drv;
    QimgImage *img;
    GSList link;

    if (!drv) {
        drv = probe_format(file);
    }
    if (drv->is_protocol) {
        return file;
    }

    img = g_new0(QimgImage, 1);
    img->drv = drv;
    img->file = file;
    img->filename = g_strdup(filename);
    img->read_only = ro;
    img->probed = probed;
    img->cache = opts->cache;
    img->request_alignment = file->request_alignment;
    img->opts = *opts;
    img->opts.format = NULL;
    img->opts.backing_format_hint = NULL;
    img->opts.snapshot = NULL;

    g_autoptr(GError) local = NULL;
    /* Invariant 5: the locks of the driver's role before it reads the file. */
    QimgOpenOptions lo = *opts;
    lo.read_only = ro;
    int ret = blk_set_role_perm(file, drv->file_role, &lo);
    if (ret < 0) {
        g_set_error(error, QIMG_ERROR, -ret, "Could not open '%s': %s", filename,
                    blk_error_message());
        blk_error_clear();
        goto fail_noclose;
    }
    if (drv->open(img, filename, opts, &local) < 0) {
        g_propagate_prefixed_error(error, g_steal_pointer(&local),
                                   "Could not open '%s': ", filename);
        goto fail_noclose;
    }
    if (img->backing_filename) {
        img->full_backing_filename = blk_resolve_backing_name(
            user_name ? blk_plain_name(filename) : filename, img->backing_filename);
        if (!opts->no_backing) {
            link.data = (void *)canon;
            link.next = chain;
            if (open_backing(img, opts, &link, &local) < 0) {
                g_propagate_prefixed_error(error, g_steal_pointer(&local),
                                           "Could not open '%s': ", filename);
                goto fail;
            }
        }
    }
    if (drv->open_finish && drv->open_finish(img, &local) < 0) {
        g_propagate_prefixed_error(error, g_steal_pointer(&local),
                                   "Could not open '%s': ", filename);
        goto fail;
    }
    return img;

fail:
    blk_close(img);
    return NULL;
fail_noclose:
    blk_close(img->file);
    g_free(img->filename);
    g_free(img->backing_filename);
    g_free(img->backing_format);
    g_free(img);
    return NULL;
}

static const QimgDriver *lookup_format(const char *filename, const QimgOpenOptions *opts,
                                       GError **error)
{
    const QimgDriver *drv = blk_find_format(opts->format);
    if (!drv) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Could not open '%s': Unknown driver '%s'",
                    filename, opts->format);
    }
    return drv;
}

QimgImage *blk_open_image_on(QimgImage *file, const char *filename,
                             const QimgOpenOptions *opts, GError **error)
{
    const QimgDriver *drv = NULL;

    if (opts->format && !(drv = lookup_format(filename, opts, error))) {
        blk_close(file);
        return NULL;
    }
    return open_format(file, drv, filename, filename, opts, NULL, true, error);
}

QimgImage *blk_open_image(const char *filename, const QimgOpenOptions *opts,
                          GSList *chain, GError **error)
{
    char canon[PATH_MAX];
    const QimgDriver *drv = NULL;
    bool ro = opts->read_only || opts->snapshot != NULL;

    if (opts->force_share && !ro) { /* invariant 5 */
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not open '%s': force-share=on can only be used with "
                    "read-only images",
                    filename);
        return NULL;
    }
    if (opts->format && !(drv = lookup_format(filename, opts, error))) {
        return NULL;
    }
    /* block.h invariant 5: only the caller's own name (not a backing file
     * name from an image: chain != NULL) may select a test node. */
    bool user_name = chain == NULL;
    if (!realpath(user_name ? blk_plain_name(filename) : filename, canon)) {
        int e = errno;
        g_set_error(error, QIMG_ERROR, e, "Could not open '%s': %s", filename,
                    g_strerror(e));
        return NULL;
    }
    if (chain_contains(chain, canon)) { /* invariant 1 */
        g_set_error(error, QIMG_ERROR, ELOOP,
                    "Backing file '%s' creates an infinite loop.", filename);
        return NULL;
    }

    QimgOpenOptions po = *opts;
    po.read_only = ro;
    QimgImage *file = blk_open_protocol(filename, &po, BLK_ROLE_PROTOCOL,
                                        user_name ? BLK_OPEN_USER_NAME : 0, error);
    if (!file) {
        return NULL;
    }
    return open_format(file, drv, filename, canon, opts, chain, user_name, error);
}

void blk_close(QimgImage *img)
{
    if (!img) {
        return;
    }
    if (img->vmstate) {
        blk_vmstate_release(img);
    }
    if (img->drv && img->drv->close) {
        img->drv->close(img);
    }
    blk_close(img->backing);
    blk_close(img->file);
    g_free(img->filename);
    g_free(img->backing_filename);
    g_free(img->full_backing_filename);
    g_free(img->backing_format);
    g_free(img);
}

/* ---- write generations (block.h invariant 4) ---- */

static QimgImage *gen_node(QimgImage *img)
{
    while (img->filtered) {
        img = img->filtered;
    }
    return img;
}

uint64_t blk_write_gen(QimgImage *img)
{
    return __atomic_load_n(&gen_node(img)->write_gen, __ATOMIC_ACQUIRE);
}

uint64_t blk_flushed_gen(QimgImage *img)
{
    return __atomic_load_n(&gen_node(img)->flushed_gen, __ATOMIC_ACQUIRE);
}

bool blk_is_durable(QimgImage *img, uint64_t gen)
{
    return blk_flushed_gen(img) >= gen;
}

void blk_gen_bump(QimgImage *img)
{
    __atomic_add_fetch(&img->write_gen, 1, __ATOMIC_ACQ_REL);
}

void blk_gen_flushed(QimgImage *img, uint64_t gen)
{
    uint64_t cur = __atomic_load_n(&img->flushed_gen, __ATOMIC_RELAXED);

    while (gen > cur &&
           !__atomic_compare_exchange_n(&img->flushed_gen, &cur, gen, true,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    }
}

/* ---- request checks (block.h invariant 3) ---- */

static int check_request(QimgImage *img, uint64_t offset, uint64_t bytes, bool write)
{
    uint64_t end;

    if (__builtin_add_overflow(offset, bytes, &end) || end > INT64_MAX) {
        return blk_error(EINVAL,
                         "Request at offset %" PRIu64 " of %" PRIu64 " bytes overflows",
                         offset, bytes);
    }
    if (write && img->read_only) {
        return blk_error(EACCES, "Image '%s' is read-only", img->filename);
    }
    /* Protocol nodes may be read past EOF (zeros) and written to grow. */
    if (!img->drv->is_protocol && end > img->size) {
        return blk_error(EIO,
                         "Request at offset %" PRIu64 " of %" PRIu64
                         " bytes is beyond the end of '%s' (%" PRIu64 " bytes)",
                         offset, bytes, img->filename, img->size);
    }
    return 0;
}

int blk_preadv(QimgImage *img, uint64_t offset, const QimgIOV *qiov, unsigned flags)
{
    int ret = check_request(img, offset, qiov->size, false);
    if (ret < 0 || qiov->size == 0) {
        return ret;
    }
    return img->drv->preadv(img, offset, qiov, flags);
}

int blk_pwritev(QimgImage *img, uint64_t offset, const QimgIOV *qiov, unsigned flags)
{
    int ret = check_request(img, offset, qiov->size, true);
    if (ret < 0 || qiov->size == 0) {
        return ret;
    }
    if (!img->drv->pwritev) {
        return blk_error(ENOTSUP, "Writing is not supported for format '%s'",
                         img->drv->format_name);
    }
    return img->drv->pwritev(img, offset, qiov, flags);
}

int blk_pread(QimgImage *img, uint64_t offset, void *buf, size_t bytes)
{
    QimgIOV q;
    iov_init_buf(&q, buf, bytes);
    return blk_preadv(img, offset, &q, 0);
}

int blk_pwrite(QimgImage *img, uint64_t offset, const void *buf, size_t bytes,
               unsigned flags)
{
    QimgIOV q;
    iov_init_buf(&q, (void *)buf, bytes);
    return blk_pwritev(img, offset, &q, flags);
}

int blk_pwrite_zeroes(QimgImage *img, uint64_t offset, uint64_t bytes, unsigned flags)
{
    int ret = check_request(img, offset, bytes, true);
    if (ret < 0 || bytes == 0) {
        return ret;
    }
    if (img->drv->pwrite_zeroes) {
        ret = img->drv->pwrite_zeroes(img, offset, bytes, flags);
        if (ret != -ENOTSUP || (flags & BLK_REQ_NO_FALLBACK)) {
            return ret;
        }
    } else if (flags & BLK_REQ_NO_FALLBACK) {
        return -ENOTSUP;
    }
    /* Fallback: write zeros from a bounded buffer. */
    size_t chunk = (size_t)MIN(bytes, (uint64_t)1 << 20);
    g_autofree void *zero = g_malloc0(chunk);
    while (bytes > 0) {
        size_t n = (size_t)MIN(bytes, (uint64_t)chunk);
        ret = blk_pwrite(img, offset, zero, n, flags & BLK_REQ_FUA);
        if (ret < 0) {
            return ret;
        }
        offset += n;
        bytes -= n;
    }
    return 0;
}

int blk_pdiscard(QimgImage *img, uint64_t offset, uint64_t bytes)
{
    int ret = check_request(img, offset, bytes, true);
    if (ret < 0 || bytes == 0 || !img->drv->pdiscard) {
        return ret;
    }
    return img->drv->pdiscard(img, offset, bytes);
}

int blk_flush(QimgImage *img)
{
    if (img->vmstate) {
        int ret = blk_vmstate_drain(img);
        if (ret < 0) {
            return ret;
        }
    }
    if (img->read_only || !img->drv->flush) {
        return 0;
    }
    return img->drv->flush(img);
}

int64_t blk_getlength(QimgImage *img)
{
    return (int64_t)img->size;
}

int blk_block_status(QimgImage *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    memset(st, 0, sizeof(*st));
    if (offset >= img->size) {
        st->pnum = bytes;
        st->flags = BLK_STATUS_ZERO;
        return 0;
    }
    bytes = MIN(bytes, img->size - offset);
    if (bytes == 0) {
        return blk_error(EINVAL, "Block status of an empty range");
    }
    if (!img->drv->block_status) {
        st->pnum = bytes;
        st->flags = BLK_STATUS_DATA | BLK_STATUS_ALLOCATED | BLK_STATUS_OFFSET_VALID;
        st->map = offset;
        st->file = img;
        return 0;
    }
    int ret = img->drv->block_status(img, offset, bytes, st);
    if (ret < 0) {
        return ret;
    }
    if (st->pnum == 0 || st->pnum > bytes) {
        return blk_error(EIO, "Driver '%s' returned an invalid block status length",
                         img->drv->format_name);
    }
    if (st->flags & (BLK_STATUS_DATA | BLK_STATUS_ZERO)) {
        st->flags |= BLK_STATUS_ALLOCATED;
    }
    return 0;
}

int blk_truncate(QimgImage *img, uint64_t size, bool exact, QimgPrealloc prealloc,
                 bool shrink, GError **error)
{
    if (img->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only", img->filename);
        return -EACCES;
    }
    if (size > INT64_MAX) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Image size too large");
        return -EINVAL;
    }
    if (!img->drv->truncate) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Image format '%s' does not support resizing", img->drv->format_name);
        return -ENOTSUP;
    }
    return img->drv->truncate(img, size, exact, prealloc, shrink, error);
}

int64_t blk_get_allocated_size(QimgImage *img)
{
    if (img->drv->get_allocated_size) {
        return img->drv->get_allocated_size(img);
    }
    if (img->file) {
        return blk_get_allocated_size(img->file);
    }
    return -ENOTSUP;
}

int blk_preadv_padded(QimgImage *img, uint64_t offset, const QimgIOV *qiov)
{
    /* The file protocol grows img->size atomically while writes run. */
    uint64_t size = __atomic_load_n(&img->size, __ATOMIC_ACQUIRE);
    if (offset >= size) {
        iov_memset(qiov, 0, 0, qiov->size);
        return 0;
    }
    uint64_t avail = size - offset;
    if (avail >= qiov->size) {
        return blk_preadv(img, offset, qiov, 0);
    }
    QimgIOV part;
    iov_slice(&part, qiov, 0, (size_t)avail);
    int ret = blk_preadv(img, offset, &part, 0);
    iov_destroy(&part);
    iov_memset(qiov, (size_t)avail, 0, qiov->size - (size_t)avail);
    return ret;
}
