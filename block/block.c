/*
 * block/block.c: nodes and requests.
 *
 * Owns: the driver table (drivers are registered by the layer above, never
 * named here), opening file nodes (which protocol a name opens is
 * protocol.c's), closing nodes, the write generations, and the
 * request checks every request passes before it reaches a driver (block.h
 * invariant 3).  Opening a format with its backing chain is api/open.c's.
 *
 * Invariants (besides block.h's):
 *  3. Reads of a backing node past its end return zeros
 *     (blk_preadv_padded), as QEMU reads a shorter backing file.
 *  4. The driver table holds what was registered (api/ registers the
 *     built-in drivers, tests add their own); probing asks each format
 *     driver for a score and the highest wins.
 */
#include "block/block.h"
#include "aio/mutex.h"
#include "block/limits.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- the driver table (invariant 4): drivers are registered, not named ---- */

static GMutex registry_lock;
static const BlkDriver *registry[BLK_MAX_DRIVERS];
static unsigned registry_len;

int blk_driver_register(const BlkDriver *drv)
{
    int ret = 0;

    mutex_lock(&registry_lock);
    for (unsigned i = 0; i < registry_len; i++) {
        if (strcmp(registry[i]->format_name, drv->format_name) == 0) {
            registry[i] = drv; /* a test may replace a driver */
            mutex_unlock(&registry_lock);
            return 0;
        }
    }
    if (registry_len == BLK_MAX_DRIVERS) {
        ret = blk_error(ENOSPC, "Too many drivers");
    } else {
        registry[registry_len++] = drv;
    }
    mutex_unlock(&registry_lock);
    return ret;
}

const BlkDriver *blk_find_format(const char *name)
{
    const BlkDriver *found = NULL;

    mutex_lock(&registry_lock);
    for (unsigned i = 0; i < registry_len && !found; i++) {
        if (strcmp(registry[i]->format_name, name) == 0) {
            found = registry[i];
        }
    }
    mutex_unlock(&registry_lock);
    if (!found && strcmp(name, "file") == 0) {
        found = &blk_file_driver;
    }
    return found;
}

void blk_driver_names(GPtrArray *names)
{
    mutex_lock(&registry_lock);
    for (unsigned i = 0; i < registry_len; i++) {
        if (!registry[i]->unsupported) {
            g_ptr_array_add(names, (gpointer)registry[i]->format_name);
        }
    }
    mutex_unlock(&registry_lock);
}

/* Invariant 4: highest probe score wins; a driver claiming every file
 * (raw's 1) is the fallback; none at all: NULL. */
const BlkDriver *blk_probe_buf(const uint8_t *buf, size_t n, const char *filename)
{
    const BlkDriver *best = NULL;
    int best_score = 0;

    mutex_lock(&registry_lock);
    for (unsigned i = 0; i < registry_len; i++) {
        const BlkDriver *d = registry[i];
        int score = d->probe && !d->is_protocol ? d->probe(buf, n, filename) : 0;
        if (score > best_score) {
            best_score = score;
            best = d;
        }
    }
    mutex_unlock(&registry_lock);
    return best;
}

BlkNode *blk_open_file_opts(const char *filename, const BlkOpenOptions *opts,
                            BlkNodeRole role)
{
    BlkNode *img = g_new0(BlkNode, 1);
    BlkOpenOptions o = {
        .read_only = opts->read_only,
        .cache = opts->cache,
        .force_share = opts->force_share,
        .no_io = opts->no_io,
        .resize = opts->resize,
        .deny_write = opts->deny_write,
        .no_locking = opts->no_locking,
    };
    int ret;

    if (g_str_has_prefix(filename, "file:")) {
        filename += strlen("file:"); /* QEMU's file protocol prefix */
    }
    img->drv = &blk_file_driver;
    img->filename = g_strdup(filename);
    img->read_only = o.read_only;
    img->cache = o.cache;
    img->request_alignment = 1;
    img->opts = o;
    if (img->drv->open(img, filename, &o) < 0) {
        g_free(img->filename);
        g_free(img);
        return NULL;
    }
    if (role != BLK_ROLE_PROTOCOL) {
        ret = blk_set_role_perm(img, role, &o);
        if (ret < 0) {
            blk_error_prefix(ret, "Could not open '%s'", filename);
            blk_close(img);
            return NULL;
        }
    }
    return img;
}

BlkNode *blk_open_file(const char *filename, bool read_only, BlkCacheMode cache)
{
    BlkOpenOptions o = {.read_only = read_only, .cache = cache};

    return blk_open_file_opts(filename, &o, BLK_ROLE_PROTOCOL);
}

int blk_set_role_perm(BlkNode *img, BlkNodeRole role, const BlkOpenOptions *opts)
{
    unsigned perm, shared;

    if (!img->drv->set_perm) {
        return 0;
    }
    blk_lock_perms(role, opts, &perm, &shared);
    return img->drv->set_perm(img, perm, shared);
}

const char *blk_open_error_detail(const char *msg, int code, const char *filename)
{
    g_autofree char *prefix = g_strdup_printf("Could not open '%s': ", filename);
    const char *rest;

    if (!g_str_has_prefix(msg, prefix)) {
        return msg;
    }
    rest = msg + strlen(prefix);
    return strcmp(rest, g_strerror(code)) == 0 ? msg : rest;
}

bool blk_backing_name_is_absolute(const char *backing)
{
    /* QEMU: a name with a protocol prefix ("file:NAME", relative to the
     * working directory, not the image's) is taken as it is; so is a
     * "json:{...}" name (its file.filename too, json-name.c invariant 1) */
    return g_path_is_absolute(backing) || strstr(backing, "://") != NULL ||
           g_str_has_prefix(backing, "file:") || g_str_has_prefix(backing, "json:");
}

char *blk_resolve_backing_name(const char *image_filename, const char *backing)
{
    if (blk_backing_name_is_absolute(backing)) {
        return g_strdup(backing);
    }
    /* QEMU's path_combine: the image's name up to its last '/' as written
     * ("./top" gives "./base", QEMU iotest 126), then the backing name */
    const char *slash = strrchr(image_filename, '/');
    if (!slash) {
        return g_strdup(backing);
    }
    return g_strdup_printf("%.*s%s", (int)(slash - image_filename + 1), image_filename,
                           backing);
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
    [BLKEV_COW_DATA_WRITE] = "cow_data_write",
    [BLKEV_COR_WRITE] = "cor_write",
    [BLKEV_L2_LOAD] = "l2_load",
    [BLKEV_REFBLOCK_LOAD] = "refblock_load",
    [BLKEV_CLUSTER_ALLOC] = "cluster_alloc",
    [BLKEV_L1_GROW_ALLOC] = "l1_grow_alloc_table",
    [BLKEV_EMPTY_IMAGE_PREPARE] = "empty_image_prepare",
    [BLKEV_REFTABLE_UPDATE] = "reftable_update",
    [BLKEV_REFBLOCK_GET] = "refblock_get",
    [BLKEV_REFBLOCK_HOOKUP] = "refblock_hookup",
    [BLKEV_L1_GROW_ACTIVATE] = "l1_grow_activate",
    [BLKEV_COW_READ] = "cow_read",
    [BLKEV_DATA_READ] = "data_read",
    [BLKEV_FLUSH_TO_OS] = "flush_to_os",
    [BLKEV_FLUSH_TO_DISK] = "flush_to_disk",
};

const char *blk_event_name(BlkEvent ev)
{
    return (unsigned)ev < BLKEV__MAX ? event_names[ev] : NULL;
}

void blk_event(BlkNode *img, BlkEvent ev)
{
    if (img && img->drv->event) {
        img->drv->event(img, ev);
    }
}

void blk_advise(BlkNode *img, BlkAdvice advice)
{
    for (BlkNode *n = img; n; n = n->file) {
        if (n->drv->advise) {
            n->drv->advise(n, advice);
            return;
        }
    }
}

void blk_filter_size_update(BlkNode *img, bool grow)
{
    uint64_t want = __atomic_load_n(&img->filtered->size, __ATOMIC_ACQUIRE);
    uint64_t cur = __atomic_load_n(&img->size, __ATOMIC_RELAXED);

    if (!grow) {
        __atomic_store_n(&img->size, want, __ATOMIC_RELEASE);
        return;
    }
    while (want > cur &&
           !__atomic_compare_exchange_n(&img->size, &cur, want, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
    }
}

/* The node blk_debug_op() works on: top itself, or down its protocol and
 * filter children, as QEMU looks for its blkdebug node. */
static BlkNode *debug_node(BlkNode *top)
{
    for (BlkNode *n = top; n; n = n->file ? n->file : n->filtered) {
        if (n->drv->debug_op) {
            return n;
        }
    }
    return NULL;
}

int blk_debug_op(BlkNode *top, BlkDebugOp op, const char *event, const char *tag)
{
    BlkNode *n = debug_node(top);
    return n ? n->drv->debug_op(n, op, event, tag) : -ENOTSUP;
}

char **blk_debug_suspended(BlkNode *top, bool only_new)
{
    BlkNode *n = debug_node(top);
    return n ? n->drv->debug_suspended(n, only_new) : NULL;
}

BlkNode *blk_open_file_like(BlkNode *like, const char *filename,
                            const BlkOpenOptions *opts, BlkNodeRole role)
{
    BlkNode *child = blk_open_file_opts(filename, opts, role);

    /* A recorded image records its data file in the same log. */
    if (child && blk_is_record_node(like)) {
        return blk_open_record(blk_record_log_path(like), child);
    }
    return child;
}

void blk_close(BlkNode *img)
{
    if (!img) {
        return;
    }
    if (img->drv && img->drv->close) {
        img->drv->close(img);
    }
    blk_close(img->backing);
    blk_close(img->file);
    g_free(img->filename);
    g_free(img->qemu_name);
    g_free(img->backing_filename);
    g_free(img->full_backing_filename);
    g_free(img->backing_format);
    g_free(img->backing_refused);
    g_free(img);
}

/* ---- write generations (block.h invariant 4) ---- */

BlkNode *blk_cow_backing(BlkNode *img)
{
    while (!img->backing && img->filtered) {
        img = img->filtered;
    }
    return img->backing;
}

static BlkNode *gen_node(BlkNode *img)
{
    while (img->filtered) {
        img = img->filtered;
    }
    return img;
}

uint64_t blk_write_gen(BlkNode *img)
{
    return __atomic_load_n(&gen_node(img)->write_gen, __ATOMIC_ACQUIRE);
}

uint64_t blk_flushed_gen(BlkNode *img)
{
    return __atomic_load_n(&gen_node(img)->flushed_gen, __ATOMIC_ACQUIRE);
}

bool blk_is_durable(BlkNode *img, uint64_t gen)
{
    return blk_flushed_gen(img) >= gen;
}

void blk_gen_bump(BlkNode *img)
{
    __atomic_add_fetch(&img->write_gen, 1, __ATOMIC_ACQ_REL);
}

void blk_gen_flushed(BlkNode *img, uint64_t gen)
{
    uint64_t cur = __atomic_load_n(&img->flushed_gen, __ATOMIC_RELAXED);

    while (gen > cur &&
           !__atomic_compare_exchange_n(&img->flushed_gen, &cur, gen, true,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    }
}

uint64_t blk_wr_highest(BlkNode *img)
{
    return __atomic_load_n(&img->wr_highest, __ATOMIC_ACQUIRE);
}

/* A write-like request for [offset, end) passed its checks. */
void blk_note_write(BlkNode *img, uint64_t end)
{
    uint64_t cur = __atomic_load_n(&img->wr_highest, __ATOMIC_RELAXED);

    while (end > cur &&
           !__atomic_compare_exchange_n(&img->wr_highest, &cur, end, true,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    }
}

/* ---- request checks (block.h invariant 3) ---- */

static int check_request(BlkNode *img, uint64_t offset, uint64_t bytes, bool write)
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

int blk_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    int ret = check_request(img, offset, qiov->size, false);
    if (ret < 0 || qiov->size == 0) {
        return ret;
    }
    if (img->limits) {
        return blk_limits_preadv(img, offset, qiov, flags);
    }
    return img->drv->preadv(img, offset, qiov, flags);
}

/* Invariant 7: the file of the format node img takes flush events. */
static bool flush_events(const BlkNode *img)
{
    return !img->drv->is_protocol && img->file && img->file->drv->event;
}

/* Invariant 7: a write-like request of img is done (ret: its result). */
static int fmt_done(BlkNode *img, int ret)
{
    if (flush_events(img)) {
        __atomic_add_fetch(&img->fmt_write_gen, 1, __ATOMIC_SEQ_CST);
    }
    return ret;
}

int blk_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    int ret = check_request(img, offset, qiov->size, true);
    if (ret < 0 || qiov->size == 0) {
        return ret;
    }
    if (!img->drv->pwritev) {
        return blk_error(ENOTSUP, "Writing is not supported for format '%s'",
                         img->drv->format_name);
    }
    blk_note_write(img, offset + qiov->size);
    if (img->limits) {
        return fmt_done(img, blk_limits_pwritev(img, offset, qiov, flags));
    }
    return fmt_done(img, img->drv->pwritev(img, offset, qiov, flags));
}

int blk_copy_in(BlkNode *img, uint64_t offset, uint64_t bytes, BlkNode *src,
                uint64_t src_offset)
{
    int ret = check_request(img, offset, bytes, true);
    if (ret == 0) {
        ret = check_request(src, src_offset, bytes, false);
    }
    if (ret < 0 || bytes == 0) {
        return ret;
    }
    if (!img->drv->copy_in || img->limits || src->limits) {
        return -ENOTSUP;
    }
    blk_note_write(img, offset + bytes);
    return fmt_done(img, img->drv->copy_in(img, offset, bytes, src, src_offset));
}

bool blk_can_copy_range(BlkNode *dst, BlkNode *src)
{
    return dst->drv->is_protocol && dst->drv == src->drv && dst->drv->copy_in &&
           !dst->limits && !src->limits;
}

int blk_pread(BlkNode *img, uint64_t offset, void *buf, size_t bytes)
{
    BlkIOV q;
    iov_init_buf(&q, buf, bytes);
    return blk_preadv(img, offset, &q, 0);
}

int blk_pwrite(BlkNode *img, uint64_t offset, const void *buf, size_t bytes,
               unsigned flags)
{
    BlkIOV q;
    iov_init_buf(&q, (void *)buf, bytes);
    return blk_pwritev(img, offset, &q, flags);
}

int blk_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes, unsigned flags)
{
    int ret = check_request(img, offset, bytes, true);
    if (ret < 0 || bytes == 0) {
        return ret;
    }
    blk_note_write(img, offset + bytes);
    if (img->limits) {
        return fmt_done(img, blk_limits_pwrite_zeroes(img, offset, bytes, flags));
    }
    if (img->drv->pwrite_zeroes) {
        ret = img->drv->pwrite_zeroes(img, offset, bytes, flags);
        if (ret != -ENOTSUP || (flags & BLK_REQ_NO_FALLBACK)) {
            return fmt_done(img, ret);
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

int blk_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    int ret = check_request(img, offset, bytes, true);
    if (ret < 0 || bytes == 0 || !img->drv->pdiscard) {
        return ret;
    }
    if (img->limits) {
        return fmt_done(img, blk_limits_pdiscard(img, offset, bytes));
    }
    return fmt_done(img, img->drv->pdiscard(img, offset, bytes));
}

/* Invariant 7: whose flush raises BLKEV_FLUSH_TO_DISK on this thread. */
static _Thread_local BlkNode *flush_to_disk_due;

/* A flush of img; back: writes done that it does not count (invariant 7). */
static int flush_node(BlkNode *img, uint64_t back)
{
    if (img->read_only || !img->drv->flush) {
        return 0;
    }
    if (!flush_events(img)) {
        return img->drv->flush(img);
    }
    BlkNode *saved = flush_to_disk_due;
    uint64_t gen = __atomic_load_n(&img->fmt_write_gen, __ATOMIC_SEQ_CST);
    gen -= MIN(gen, back);
    blk_event(img->file, BLKEV_FLUSH_TO_OS);
    bool due = img->cache != BLK_CACHE_UNSAFE &&
               gen != __atomic_load_n(&img->fmt_flushed_gen, __ATOMIC_SEQ_CST);
    flush_to_disk_due = due ? img->file : NULL;
    int ret = img->drv->flush(img);
    flush_to_disk_due = saved;
    if (ret == 0) {
        __atomic_store_n(&img->fmt_flushed_gen, gen, __ATOMIC_SEQ_CST);
    }
    return ret;
}

int blk_flush(BlkNode *img)
{
    return flush_node(img, 0);
}

int blk_flush_fua(BlkNode *img)
{
    return flush_node(img, 1);
}

bool blk_flush_to_disk_take(BlkNode *img)
{
    if (flush_to_disk_due != img) {
        return false;
    }
    flush_to_disk_due = NULL;
    return true;
}

int64_t blk_getlength(BlkNode *img)
{
    /* The file protocol grows img->size atomically while writes run (file.c
     * invariant 5): a driver reading its file's size under its own lock
     * races with another request's write. */
    return (int64_t)__atomic_load_n(&img->size, __ATOMIC_ACQUIRE);
}

int blk_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
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
    int ret = img->limits ? blk_limits_block_status(img, offset, bytes, st)
                          : img->drv->block_status(img, offset, bytes, st);
    if (ret < 0) {
        return ret;
    }
    if (st->flags & BLK_STATUS_RAW) { /* a filter: its child's answer */
        BlkNode *child = st->file;
        uint64_t map = st->map, n = MIN(st->pnum, bytes);
        return n == 0 ? blk_error(EIO,
                                  "Driver '%s' returned an invalid block status "
                                  "length",
                                  img->drv->format_name)
                      : blk_block_status(child, map, n, st);
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

/*
 * Walk down the chain until a layer defines the range, as qemu-img map does:
 * an unallocated range with no backing node below reads as zeros (and is not
 * "present"); so does a range past the end of the backing node.
 */
int blk_block_status_chain(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st,
                           int *depth, BlkNode **failed)
{
    BlkNode *cur = img;

    *depth = 0;
    bytes = MIN(bytes, img->size > offset ? img->size - offset : bytes);
    for (;;) {
        int ret = blk_block_status(cur, offset, bytes, st);
        if (ret < 0) {
            if (failed) {
                *failed = cur;
            }
            return ret;
        }
        bytes = st->pnum;
        if (st->flags & BLK_STATUS_ALLOCATED) {
            return 0;
        }
        BlkNode *below = blk_cow_backing(cur); /* past a filter too */
        if (!below) {
            /* a format's unallocated range reads as zeros (its driver
             * says so); a protocol's (an NBD hole that does not read as
             * zeros) is just not there, as QEMU's block layer says */
            if (!cur->drv->is_protocol) {
                st->flags |= BLK_STATUS_ZERO;
            }
            return 0;
        }
        if (offset >= below->size) {
            st->flags |= BLK_STATUS_ZERO;
            return 0;
        }
        cur = below;
        (*depth)++;
    }
}

int blk_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                 bool shrink)
{
    if (img->read_only) {
        return blk_error(EACCES, "Image '%s' is read-only", img->filename);
    }
    if (size > INT64_MAX) {
        return blk_error(EINVAL, "Image size too large");
    }
    if (!img->drv->truncate) {
        return blk_error(ENOTSUP, "Image format '%s' does not support resizing",
                         img->drv->format_name);
    }
    return fmt_done(img, img->drv->truncate(img, size, exact, prealloc, shrink));
}

int64_t blk_get_allocated_size(BlkNode *img)
{
    if (img->drv->get_allocated_size) {
        return img->drv->get_allocated_size(img);
    }
    if (img->file) {
        return blk_get_allocated_size(img->file);
    }
    return -ENOTSUP;
}

int blk_preadv_padded(BlkNode *img, uint64_t offset, const BlkIOV *qiov)
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
    BlkIOV part;
    iov_slice(&part, qiov, 0, (size_t)avail);
    int ret = blk_preadv(img, offset, &part, 0);
    iov_destroy(&part);
    iov_memset(qiov, (size_t)avail, 0, qiov->size - (size_t)avail);
    return ret;
}
