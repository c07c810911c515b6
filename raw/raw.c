/*
 * raw/raw.c: the raw format driver.
 *
 * Owns: presenting a protocol node (a file or block device) byte for byte
 * as a virtual disk.
 *
 * Invariants:
 *  1. Guest offset + the window's offset (invariant 6; 0 without one) ==
 *     file offset; every request is passed to img->file otherwise
 *     unchanged (block.h invariant 1: no direct file access).  A data read
 *     or write is announced first (BLKEV_DATA_READ, BLKEV_DATA_WRITE: QEMU's
 *     read_aio and write_aio, which its raw format raises on its file
 *     before each one); zero writes and discards are not, as in QEMU.
 *  2. The virtual size is the file size (past the window's offset) rounded
 *     up to 512 bytes (the tail reads as zeros), refreshed after every
 *     truncate; with a window's size, that size.
 *  3. Block status is the file's own (holes read as zeros), with the file
 *     as the node the offset refers to, or the node the file's answer
 *     names (a blkverify node answers with its raw copy, as QEMU's).
 *  4. When the format was probed (img->probed), a write may not make block
 *     0 (the first 512 bytes) probe as another format, as QEMU refuses it:
 *     a guest could otherwise write a qcow2 header naming a host file as
 *     its backing file and have it opened at the next probe.  The check
 *     runs on the block as it will be (current bytes with the write laid
 *     over them) and writes those checked bytes, not the caller's buffer
 *     again; block-0 writes of probed images are serialised so no two can
 *     combine into a header between check and write.  Zero writes and
 *     discards cannot create a header (the magic is not zeros, and zeroing
 *     cannot raise a version below 2 to 2 or more).
 *  5. What belongs to the protocol is the protocol's, as QEMU's raw format
 *     passes it through: creation (an RBD image's object size from
 *     cluster_size), the cluster size and snapshot list qemu-img info
 *     shows, and internal snapshots (RBD snapshots; a file has none:
 *     "Format 'raw' does not support internal snapshots").  The virtual
 *     size follows the protocol's after a snapshot is applied.
 *  6. QEMU's options offset and size (BlkOpenOptions.raw_offset,
 *     raw_size) make the node a window of the file: bytes [offset,
 *     offset + size) (without a size, to the end of the file), checked at
 *     open as qemu-img 7.2 checks them, in its order and words: "Offset
 *     (O) cannot be greater than size of the containing file (F)", "The
 *     sum of offset (O) and size (S) has to be smaller or equal to the
 *     actual size of the containing file (F)" (with QEMU's two spaces),
 *     "Specified size is not multiple of 512".  A window with a size is
 *     not resized ("Cannot resize fixed-size raw disks"); one without
 *     grows the file past its offset.  Block status maps into the file at
 *     the window's offset; block 0 (invariant 4) is the window's first.
 */
#include "raw/raw.h"
#include "aio/mutex.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

/* Invariant 6: where the node's bytes start in the file. */
static uint64_t off0(const BlkNode *img)
{
    return img->opts.raw_offset;
}

/* Invariants 2, 6: the virtual size of the node over the file now. */
static uint64_t window_size(const BlkNode *img)
{
    uint64_t fsize = img->file->size;

    if (img->opts.raw_size_set) {
        return img->opts.raw_size;
    }
    return ROUND_UP(fsize > off0(img) ? fsize - off0(img) : 0, 512);
}

static int raw_probe(const uint8_t *buf, size_t len, const char *filename)
{
    return 1; /* anything can be raw; real formats score higher */
}

static int raw_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    if (opts->snapshot) {
        blk_error(ENOTSUP,
                  "Failed to load snapshot: Block format 'raw' used by device '' "
                  "does not support temporarily loading internal snapshots");
        return -ENOTSUP;
    }
    uint64_t fsize = img->file->size;
    if (opts->raw_offset > fsize) { /* invariant 6 */
        return blk_error(EINVAL,
                         "Offset (%" PRIu64 ") cannot be greater than size of the "
                         "containing file (%" PRIu64 ")",
                         opts->raw_offset, fsize);
    }
    if (opts->raw_size_set && opts->raw_size > fsize - opts->raw_offset) {
        return blk_error(EINVAL,
                         "The sum of offset (%" PRIu64 ") and size (%" PRIu64 ") has to "
                         "be smaller or equal to the  actual size of the containing "
                         "file (%" PRIu64 ")",
                         opts->raw_offset, opts->raw_size, fsize);
    }
    if (opts->raw_size_set && opts->raw_size % 512) {
        return blk_error(EINVAL, "Specified size is not multiple of 512");
    }
    /* invariant 2; the block layer works in 512-byte sectors, as QEMU's does */
    img->size = window_size(img);
    return 0;
}

static int raw_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    blk_event(img->file, BLKEV_DATA_READ); /* QEMU's read_aio */
    return blk_preadv(img->file, off0(img) + offset, qiov, flags);
}

static GMutex block0_lock; /* invariant 4 */

/* A write to block 0 of a probed image (invariant 4). */
static int raw_pwritev_block0(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                              unsigned flags)
{
    uint8_t sector[BLK_PROBE_BUF_SIZE] = {0};
    size_t head = (size_t)MIN(qiov->size, BLK_PROBE_BUF_SIZE - offset);
    uint64_t fsize = img->file->size;
    uint64_t left = fsize > off0(img) ? fsize - off0(img) : 0;
    size_t have = (size_t)MIN(left, BLK_PROBE_BUF_SIZE);
    int ret = 0;

    mutex_lock(&block0_lock);
    if (have > 0) {
        ret = blk_pread(img->file, off0(img), sector, have);
    }
    if (ret == 0) {
        iov_to_buf(qiov, 0, sector + offset, head);
        if (blk_probe_buf(sector, BLK_PROBE_BUF_SIZE, NULL) != &blk_raw_driver) {
            ret = blk_error(EPERM,
                            "Write to block 0 of '%s' refused: it would make the image "
                            "probe as another format (the raw format was probed; "
                            "specify it to remove this restriction)",
                            img->filename);
        }
    }
    if (ret == 0) {
        /* the checked bytes, then whatever the write has past block 0 */
        blk_event(img->file, BLKEV_DATA_WRITE); /* QEMU's write_aio */
        ret = blk_pwrite(img->file, off0(img) + offset, sector + offset, head, flags);
    }
    if (ret == 0 && qiov->size > head) {
        BlkIOV tail;
        iov_slice(&tail, qiov, head, qiov->size - head);
        ret = blk_pwritev(img->file, off0(img) + offset + head, &tail, flags);
        iov_destroy(&tail);
    }
    mutex_unlock(&block0_lock);
    return ret;
}

static int raw_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    if (img->probed && offset < BLK_PROBE_BUF_SIZE && qiov->size > 0) {
        return raw_pwritev_block0(img, offset, qiov, flags);
    }
    blk_event(img->file, BLKEV_DATA_WRITE); /* QEMU's write_aio */
    return blk_pwritev(img->file, off0(img) + offset, qiov, flags);
}

/* Invariant 1: the bytes are the file's at the same offset (api/aio.c's
 * direct engines), except a write to block 0 of a probed image, which
 * needs raw_pwritev_block0's check (invariant 4). */
static bool raw_direct_begin(BlkNode *img, uint64_t offset, uint64_t bytes, bool write,
                             BlkDirect *d)
{
    if (write && img->probed && offset < BLK_PROBE_BUF_SIZE && bytes > 0) {
        return false;
    }
    *d = (BlkDirect){.node = img->file, .offset = off0(img) + offset};
    return true;
}

/* Invariant 1: the file's copy at the same offset, except into block 0 of
 * a probed image (invariant 4 checks bytes a copy never shows it). */
static int raw_copy_in(BlkNode *img, uint64_t offset, uint64_t bytes, BlkNode *src,
                       uint64_t src_offset)
{
    if (img->probed && offset < BLK_PROBE_BUF_SIZE) {
        return -ENOTSUP;
    }
    return blk_copy_in(img->file, off0(img) + offset, bytes, src, src_offset);
}

static void raw_direct_end(BlkNode *img, BlkDirect *d)
{
    (void)img;
    (void)d; /* nothing held */
}

static int raw_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                             unsigned flags)
{
    return blk_pwrite_zeroes(img->file, off0(img) + offset, bytes, flags);
}

static int raw_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    return blk_pdiscard(img->file, off0(img) + offset, bytes);
}

static int raw_flush(BlkNode *img)
{
    return blk_flush(img->file);
}

static int raw_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    /* invariants 3, 6 */
    int ret = blk_block_status(img->file, off0(img) + offset, bytes, st);
    if (ret < 0) {
        return ret;
    }
    /* the file's bytes are at their own offset, past its end and in an NBD
     * hole too, as QEMU's protocols say; a node whose bytes lie in no one
     * file (a quorum's) gives none (invariant 3) */
    if (!(st->flags & BLK_STATUS_OFFSET_VALID) && !img->file->drv->no_offsets) {
        st->map = off0(img) + offset;
        st->flags |= BLK_STATUS_OFFSET_VALID;
        st->file = NULL;
    }
    /* the node the file's answer names (a blkverify node's raw copy), or the
     * file itself */
    st->file = st->file ? st->file : img->file;
    st->flags |= BLK_STATUS_ALLOCATED;
    return 0;
}

static int raw_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                        bool shrink)
{
    if (img->opts.raw_size_set) { /* invariant 6 */
        return blk_error(ENOTSUP, "Cannot resize fixed-size raw disks");
    }
    int ret = blk_truncate(img->file, off0(img) + size, exact, prealloc, shrink);
    img->size = window_size(img); /* invariant 2 */
    return ret;
}

static int raw_create(const char *filename, const BlkCreateOptions *opts)
{
    BlkPrealloc prealloc = BLK_PREALLOC_OFF;
    uint64_t size = ROUND_UP(opts->size, 512); /* as qemu-img creates it */
    uint64_t object_size = 0;

    if (opts->backing_file) {
        blk_error(ENOTSUP, "Backing file not supported for file format 'raw'");
        return -ENOTSUP;
    }
    if (opts->options) {
        GHashTableIter it;
        gpointer k, v;
        g_hash_table_iter_init(&it, opts->options);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            if (strcmp(k, "preallocation") == 0) {
                int ret = blk_prealloc_parse(v, &prealloc);
                if (ret < 0) {
                    return ret;
                }
                if (prealloc == BLK_PREALLOC_METADATA) {
                    blk_error(EINVAL, "Unsupported preallocation mode: metadata");
                    return -EINVAL;
                }
            } else if (strcmp(k, "cluster_size") == 0) {
                /* the RBD object size (invariant 5) */
                char *end = NULL;
                object_size = g_ascii_strtoull(v, &end, 10);
                if (!*(const char *)v || *end) {
                    return blk_error(EINVAL, "Parameter 'cluster_size' expects a size");
                }
            } else if (strcmp(k, "password-secret") == 0 ||
                       g_str_has_prefix(k, "encrypt.")) {
                return blk_error(ENOTSUP,
                                 "librbd's own encryption and Ceph keys from "
                                 "secrets are not supported: '%s'",
                                 (const char *)k);
            } else if (strcmp(k, "size") != 0) {
                blk_error(EINVAL, "Invalid parameter '%s'", (const char *)k);
                return -EINVAL;
            }
        }
    }
    return blk_create_protocol(filename, size, prealloc, object_size);
}

/* qemu-img measure -O raw: the whole virtual size (rounded up to 512 bytes
 * without a source), holes included: a raw copy's file is that long. */
static int raw_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                       BlkMeasure *out)
{
    uint64_t size = opts->size;

    if (opts->options) {
        GHashTableIter it;
        gpointer k, v;
        g_hash_table_iter_init(&it, opts->options);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            BlkPrealloc prealloc;
            if (strcmp(k, "preallocation") == 0) {
                if (blk_prealloc_parse(v, &prealloc) < 0) {
                    return -EINVAL;
                }
            } else if (strcmp(k, "size") == 0) {
                if (!opts->size_set) {
                    size = g_ascii_strtoull(v, NULL, 10);
                }
            } else {
                return blk_error(EINVAL, "Invalid parameter '%s'", (const char *)k);
            }
        }
    }
    if (size > (uint64_t)INT64_MAX) {
        return blk_error(EFBIG, "Image size must be less than 8 EiB!");
    }
    memset(out, 0, sizeof(*out));
    out->required = src ? src->size : ROUND_UP(size, 512);
    out->fully_allocated = out->required;
    return 0;
}

/* Invariant 5. */
static int raw_get_info(BlkNode *img, BlkInfo *info)
{
    BlkNode *file = img->file;

    int ret = file->drv->get_info ? file->drv->get_info(file, info) : 0;

    info->format_specific = false; /* the protocol's own, not raw's (QEMU 7.2) */
    return ret;
}

static int no_snapshots(void)
{
    return blk_error(ENOTSUP, "Format 'raw' does not support internal snapshots");
}

static int raw_snapshot_create(BlkNode *img, BlkSnapshotInfo *sn)
{
    BlkNode *file = img->file;

    return file->drv->snapshot_create ? file->drv->snapshot_create(file, sn)
                                      : no_snapshots();
}

static int raw_snapshot_goto(BlkNode *img, const char *id_or_name)
{
    BlkNode *file = img->file;
    int ret;

    if (!file->drv->snapshot_goto) {
        return no_snapshots();
    }
    ret = file->drv->snapshot_goto(file, id_or_name);
    img->size = window_size(img); /* invariants 2, 5 */
    return ret;
}

static int raw_snapshot_delete(BlkNode *img, const char *id_or_name)
{
    BlkNode *file = img->file;

    return file->drv->snapshot_delete ? file->drv->snapshot_delete(file, id_or_name)
                                      : no_snapshots();
}

static GArray *raw_snapshot_list(BlkNode *img)
{
    BlkNode *file = img->file;

    return file->drv->snapshot_list ? file->drv->snapshot_list(file)
                                    : g_array_new(FALSE, TRUE, sizeof(BlkSnapshotInfo));
}

static bool raw_has_zero_init(BlkNode *img)
{
    return img->file->drv->has_zero_init && img->file->drv->has_zero_init(img->file);
}

const BlkDriver blk_raw_driver = {
    .format_name = "raw",
    .probe = raw_probe,
    .open = raw_open,
    .preadv = raw_preadv,
    .pwritev = raw_pwritev,
    .direct_begin = raw_direct_begin,
    .direct_end = raw_direct_end,
    .copy_in = raw_copy_in,
    .pwrite_zeroes = raw_pwrite_zeroes,
    .pdiscard = raw_pdiscard,
    .flush = raw_flush,
    .block_status = raw_block_status,
    .truncate = raw_truncate,
    .create = raw_create,
    .measure = raw_measure,
    .has_zero_init = raw_has_zero_init,
    .get_info = raw_get_info,
    .snapshot_create = raw_snapshot_create,
    .snapshot_goto = raw_snapshot_goto,
    .snapshot_delete = raw_snapshot_delete,
    .snapshot_list = raw_snapshot_list,
};
