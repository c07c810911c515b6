/*
 * block/file.c: the file protocol driver (regular files and block devices).
 *
 * Owns: the file descriptor of a protocol node and everything about how a
 * request reaches it: the open flags of each cache mode and what flush
 * means, O_DIRECT alignment detection and the bounce buffers that hide it
 * from callers, zeroing and discard through fallocate() and the block
 * device ioctls, SEEK_DATA/SEEK_HOLE block status, resizing, and
 * blk_file_create().  The image locks on the descriptor are block/lock.c's;
 * this file takes them at open (invariant 11).
 *
 * This file holds open and close, the driver's request functions and its
 * table; file-io.c the path of a request to the descriptor (the
 * read/write loop, O_DIRECT bounce buffers, flush and its sticky failure);
 * file-create.c resizing and blk_file_create().  The invariants below are
 * the whole driver's; those files and file.h cite them as "file.c
 * invariant N".
 *
 * Invariants:
 *  1. Every request reaching the kernel on an O_DIRECT descriptor is aligned
 *     to img->request_alignment in its offset, its length and every buffer
 *     address and length.  Anything else goes through an aligned bounce
 *     buffer: a write whose range is aligned but whose buffers are not is
 *     copied and written as is (a caller's g_malloc'ed buffers); only an
 *     unaligned range needs read-modify-write.
 *  2. Durability follows the cache mode: writethrough and directsync writes
 *     are durable when they return (O_DSYNC); writeback and none data is
 *     durable after flush (fdatasync), or after one write with BLK_REQ_FUA;
 *     unsafe never syncs.
 *  3. Bytes past the end of the file read as zeros: a short read at EOF is
 *     zero-filled, never left as whatever the caller's buffer held.
 *  4. A request moves all its bytes or fails with -errno: short transfers
 *     and EINTR are retried.
 *  5. img->size is the file's size after every completed request and never
 *     above the real size while requests run (it only grows, atomically,
 *     after the bytes are in the file; truncate does not run concurrently
 *     with I/O).  So a write ending at or below img->size cannot extend the
 *     file.
 *  6. s->lock (a rwlock) orders the operations that would otherwise lose
 *     data when they run concurrently.  Held exclusively: O_DIRECT
 *     read-modify-write of an unaligned range (it writes back bytes it did not get from
 * the caller) and anything that sets the size with ftruncate() (it could cut off a
 * concurrent extending write).  Held shared: writes that may extend the file (end >
 * img->size), with O_DIRECT every request that modifies the file, and a growth with
 * preallocation by fallocate(2) (it only adds bytes: nothing to cut, and writes in
 * flight -- ring writes, which hold the lock until their completion is reaped -- need
 * not drain first; its fallback, which writes, and undoing a failed growth with
 * ftruncate() are exclusive).  Reads and block status never take it.
 *  7. Large (>= 128 KiB) buffered writes to a regular file go to the kernel
 *     one at a time (s->wlock).  The kernel serialises them anyway on the
 *     inode lock, where waiters spin on the owner: with many writer threads
 *     on few cores the spinning took CPU from the copy (perf: 19% of the
 *     samples of 16 sequential 1 MiB writers); waiting on our mutex sleeps
 *     instead.  Small writes hold the inode lock briefly and lost 8% to the
 *     mutex, so they bypass it; O_DIRECT writes and all reads stay
 *     concurrent.
 *  8. A buffered write of 1 MiB or more to a regular file or a block
 *     device starts the
 *     writeback of its range at once (sync_file_range WRITE, which neither
 *     waits for it nor makes anything durable: flush semantics are
 *     unchanged).  Large writes are streams (convert, savevm, sequential
 *     guest I/O) whose bytes go to the disk anyway; starting early keeps
 *     the disk busy during the copy instead of leaving it all for the
 *     final flush.  Measured: 2 GiB of data converted to raw, sync
 *     included, 0.94 s against 1.35 s without it (qemu-img 1.34 s).
 *     Smaller buffered writes that land near the end of the current stream
 *     (s->wb_stream, file_stream_note: within FILE_STREAM_GAP past its end,
 *     or inside it) extend it; another write starts a new stream.  Once a
 *     stream holds FILE_STREAM_KICK bytes beyond a tail of FILE_STREAM_LAG
 *     (left to the parallel writes still landing there), the writeback of
 *     everything before the tail starts.  So a stream of small appends (a
 *     compressed convert's 64 KiB clusters and packed compressed ones) is
 *     written during the copy too, while random small writes (which rarely
 *     grow one stream that far) stay to the kernel's writeback.  Measured
 *     (block:block_rq_issue): a -c convert of 256 MiB of incompressible
 *     data issued 240 MiB of its output's writes itself during the copy,
 *     none without it -- the kernel's flusher waits 30 s or for 10% of
 *     memory dirty, so a convert that ends sooner left its whole output to
 *     the final sync (this disk writes ~370 MB/s: ~3 s for 1 GiB).
 *     A block device is no different (its page cache is written back the
 *     same way, sync_file_range accepts it), and left alone its dirty
 *     pages waited for the last close (the kernel syncs a block device
 *     then): `qimg convert -n` onto a loop device spent 0.7 s (1 GiB of
 *     data) to 1.7 s (2 GiB) in that close after the copy, the disk idle
 *     for writes during it.
 *  9. Every request that may have changed the file (write, zero, discard,
 *     resize; failed ones too) bumps img->write_gen when it is done; a
 *     flush records the generation it started at once fdatasync worked
 *     (block.h invariant 4), and returns at once when nothing was written
 *     since the last one (as QEMU's write_gen/flushed_gen).
 * 10. A failed fdatasync is sticky: the kernel may already have dropped the
 *     dirty pages it could not write, so a later fdatasync that succeeds
 *     proves nothing about them.  From then on every flush and every write,
 *     zero, discard and resize of the node fails with EIO and says why,
 *     until the node is closed.  Reads still work.
 * 11. The descriptor holds QEMU's image locks (block/lock.c) from open to
 *     close: file_open takes the protocol's permissions for the open mode
 *     and refuses the open on a conflict, the node above raises them
 *     (set_perm), a resize first takes the resize permission, and
 *     blk_file_create holds the creation locks before it truncates
 *     anything.
 * 12. A zero request to a block device reaches BLKZEROOUT only in whole
 *     logical blocks (the kernel refuses anything else with EINVAL, cache
 *     mode or not); the unaligned head and tail are written as zeros.
 *     BLKZEROOUT is the cheapest correct way: the kernel sends WRITE ZEROES
 *     (which may unmap, and always reads back zeros) and writes zero pages
 *     itself where the device has none; BLKDISCARD is never used to zero,
 *     since a discarded range need not read back zeros.  When the ioctl is
 *     refused (EOPNOTSUPP, ENOTTY) the range is written as zeros.
 * 13. O_DIRECT bounce buffers (invariant 1) are reused: a node keeps up to
 *     FILE_POOL_SLOTS idle buffers of FILE_CHUNK_MAX bytes in lock-free
 *     slots (taken by exchange, given back by compare-and-swap, freed when
 *     every slot is taken and at close), so a stream of unaligned requests
 *     (an NBD server's buffers, `qimg nbd --cache=none`) neither maps nor
 *     unmaps memory per request.  Idle memory is bounded by 16 MiB per
 *     node; a buffer is only ever in a slot or with one request.
 * 14. copy_in (qemu-img convert -C) moves bytes from another file node
 *     with copy_file_range, locked, checked and counted as a write of the
 *     same range (invariants 5, 6, 9, 10); any failure of the kernel's
 *     (EXDEV, EOPNOTSUPP, ENOSYS, EINVAL, a source that ends first) is
 *     returned as is, unrecorded: the caller reads and writes instead, as
 *     qemu-img falls back.
 * 15. blk_advise reaches the kernel as posix_fadvise on the whole
 *     descriptor (its read-ahead state is the open file's): SEQUENTIAL
 *     doubles the read-ahead window of a buffered descriptor, NORMAL
 *     restores it.  O_DIRECT descriptors have no read-ahead and get no
 *     hint.  A refused hint is ignored: it changes speed, never bytes.
 * 16. On a block device the early writeback of invariant 8 is started by
 *     a thread of the node's (file-wb.c), not by the writer: the device's
 *     queue throttles buffered writeback (wbt_lat_usec, 2 ms on a loop
 *     device or an SSD) by putting the submitter to sleep, and a convert's
 *     worker asleep there is one reader fewer for the source.  Measured
 *     (perf sched_switch; `convert -n -O qcow2` of 1 GiB of data in 2 GiB
 *     onto a loop device): the workers slept 0.62 s in wbt_wait; with the
 *     thread, the copy phase took 0.97 s against 1.18 s, the run with its
 *     final sync 1.97 s against 2.19 s (medians of 5 interleaved rounds,
 *     load 7-9).  Regular files keep starting it inline (their queue, the
 *     disk's, throttles at 75 ms here, and the pipeline there was not
 *     measured to wait on it).
 */
#include "block/block.h"
#include "block/file.h"
#include "block/lock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* Largest O_DIRECT alignment we believe a detection result for. */
#define FILE_MAX_ALIGN (1u << 16)

static const char *cache_name(BlkCacheMode mode)
{
    switch (mode) {
    case BLK_CACHE_WRITEBACK:
        return "writeback";
    case BLK_CACHE_WRITETHROUGH:
        return "writethrough";
    case BLK_CACHE_NONE:
        return "none";
    case BLK_CACHE_DIRECTSYNC:
        return "directsync";
    case BLK_CACHE_UNSAFE:
        return "unsafe";
    }
    return "?";
}

static bool is_pow2(uint64_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

/* ---- open / close ---- */

static uint32_t probe_alignment(FileState *s, bool is_blk)
{
    if (is_blk) {
        int ssz = 0;
        if (ioctl(s->fd, BLKSSZGET, &ssz) == 0 && ssz > 0 && is_pow2((uint64_t)ssz) &&
            (uint32_t)ssz <= FILE_MAX_ALIGN) {
            return (uint32_t)ssz;
        }
    }
#ifdef STATX_DIOALIGN
    /* Linux >= 6.1 says it directly, even for files too short to probe. */
    struct statx stx;
    if (statx(s->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
        uint32_t a = MAX(stx.stx_dio_offset_align, stx.stx_dio_mem_align);
        if (is_pow2(a) && a <= FILE_MAX_ALIGN) {
            return a;
        }
    }
#endif
    /* Smallest aligned read at offset 0 that the kernel does not refuse. */
    void *buf = file_buf_alloc(FILE_MIN_BUF_ALIGN, FILE_MIN_BUF_ALIGN);
    if (buf) {
        for (uint32_t a = 512; a <= 4096; a *= 2) {
            ssize_t n;
            do {
                n = pread(s->fd, buf, a, 0);
            } while (n < 0 && errno == EINTR);
            if (n >= 0 || errno != EINVAL) {
                free(buf);
                return a;
            }
        }
        free(buf);
    }
    return 4096;
}

static int file_set_perm(BlkNode *img, unsigned perm, unsigned shared)
{
    FileState *s = img->opaque;

    return blk_lock_apply(&s->locks, s->fd, perm, shared, s->name);
}

static int file_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    bool ro = opts ? opts->read_only : img->read_only;
    BlkCacheMode cache = opts ? opts->cache : img->cache;
    int flags = (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    BlkLockState locks = {0};
    FileState *s;
    struct stat st;
    int fd, err;

    switch (cache) {
    case BLK_CACHE_WRITEBACK:
    case BLK_CACHE_UNSAFE:
        break;
    case BLK_CACHE_WRITETHROUGH:
        flags |= O_DSYNC;
        break;
    case BLK_CACHE_NONE:
        flags |= O_DIRECT;
        break;
    case BLK_CACHE_DIRECTSYNC:
        flags |= O_DIRECT | O_DSYNC;
        break;
    default:
        blk_error(EINVAL, "Could not open '%s': invalid cache mode %d", filename,
                  (int)cache);
        return -EINVAL;
    }

    do {
        fd = open(filename, flags);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        err = errno;
        if (err == EINVAL && (flags & O_DIRECT)) {
            blk_error(err,
                      "Could not open '%s': O_DIRECT (cache=%s) not supported by the "
                      "filesystem: %s",
                      filename, cache_name(cache), g_strerror(err));
        } else {
            blk_error(err, "Could not open '%s': %s", filename, g_strerror(err));
        }
        return -err;
    }
    if (fstat(fd, &st) < 0) {
        err = errno;
        goto fail_errno;
    }
    if (S_ISDIR(st.st_mode)) {
        err = EISDIR;
        goto fail_errno;
    }
    err = -blk_lock_role(&locks, fd, BLK_ROLE_PROTOCOL, opts, ro, filename);
    if (err) { /* invariant 11 */
        blk_error_prefix(-err, "Could not open '%s'", filename);
        close(fd);
        return -err;
    }

    s = g_new0(FileState, 1);
    s->fd = fd;
    s->locks = locks;
    s->name = g_strdup(filename);
    s->direct = (flags & O_DIRECT) != 0;
    s->dsync = (flags & O_DSYNC) != 0;
    s->no_flush = cache == BLK_CACHE_UNSAFE;
    s->read_only = ro;
    file_rwlock_init(&s->lock);
    g_mutex_init(&s->wlock);
    g_mutex_init(&s->wb_lock);
    s->serialize_writes = !s->direct && S_ISREG(st.st_mode); /* invariant 7 */
    /* invariant 8 */
    s->early_writeback =
        !s->direct && !s->dsync && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));

    img->is_block_device = S_ISBLK(st.st_mode);
    s->wb_thread = s->early_writeback && img->is_block_device; /* invariant 16 */
    if (img->is_block_device) {
        uint64_t bsize = 0;
        if (ioctl(fd, BLKGETSIZE64, &bsize) < 0) {
            err = errno;
            blk_error(err, "Could not open '%s': cannot get the device size: %s",
                      filename, g_strerror(err));
            file_rwlock_clear(&s->lock);
            g_mutex_clear(&s->wlock);
            g_mutex_clear(&s->wb_lock);
            g_free(s->name);
            g_free(s);
            close(fd);
            return -err;
        }
        img->size = bsize;
        int ssz = 0;
        s->lbs = ioctl(fd, BLKSSZGET, &ssz) == 0 && ssz > 0 && is_pow2((uint64_t)ssz)
                     ? (uint32_t)ssz
                     : 512; /* invariant 12 */
    } else {
        img->size = (uint64_t)st.st_size;
    }
    /* Invariant 1: the alignment the kernel demands with O_DIRECT. */
    img->request_alignment = s->direct ? probe_alignment(s, img->is_block_device) : 1;
    s->buf_align = MAX(img->request_alignment, FILE_MIN_BUF_ALIGN);
    img->read_only = ro;
    img->cache = cache;
    img->opaque = s;
    return 0;

fail_errno:
    blk_error(err, "Could not open '%s': %s", filename, g_strerror(err));
    close(fd);
    return -err;
}

static void file_close(BlkNode *img)
{
    FileState *s = img->opaque;

    if (!s) {
        return;
    }
    file_wb_stop(s); /* file-wb.c invariant 3: before the descriptor goes */
    blk_lock_release(&s->locks, s->fd);
    close(s->fd);
    file_rwlock_clear(&s->lock);
    g_mutex_clear(&s->wlock);
    g_mutex_clear(&s->wb_lock);
    file_bounce_pool_clear(s); /* invariant 13 */
    g_free(s->name);
    g_free(s);
    img->opaque = NULL;
}

/* ---- requests ---- */

static int file_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    FileState *s = img->opaque;
    int ret;

    (void)flags;
    if (qiov->size == 0) {
        return 0;
    }
    if (s->direct && !file_qiov_aligned(qiov, offset, img->request_alignment)) {
        ret = file_bounce_read(img, s, offset, qiov); /* invariant 1 */
    } else {
        ret = file_fd_rw_full(s, img->request_alignment, false, qiov->iov, qiov->niov,
                              offset, qiov->size);
    }
    if (ret < 0) {
        blk_error(-ret, "Could not read from '%s' at offset %" PRIu64 ": %s", s->name,
                  offset, g_strerror(-ret));
    }
    return ret;
}

static int file_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    FileState *s = img->opaque;
    uint64_t end = offset + qiov->size;
    FileLockMode m;
    int ret;

    if (qiov->size == 0) {
        return 0;
    }
    /* Invariant 6. */
    if (s->direct && !file_range_aligned(offset, qiov->size, img->request_alignment)) {
        m = LOCK_EXCL;
    } else if (s->direct || end > file_size_get(img)) {
        m = LOCK_SHARED;
    } else {
        m = LOCK_NONE;
    }
    ret = file_check_sticky(s, "write to");
    if (ret < 0) {
        return ret;
    }
    file_lock(s, m);
    ret = file_do_pwritev(img, s, offset, qiov);
    file_unlock(s, m);
    blk_gen_bump(img); /* invariant 9 */
    if (ret < 0) {
        return blk_error(-ret, "Could not write to '%s' at offset %" PRIu64 ": %s",
                         s->name, offset, g_strerror(-ret));
    }
    /* Invariant 2: FUA is implied by O_DSYNC and ignored by unsafe. */
    if ((flags & BLK_REQ_FUA) && !s->dsync) {
        ret = file_sync_node(img, s);
    }
    return ret;
}

/* Invariant 14: the locking of file_pwritev, then the kernel's copy. */
static int file_copy_in(BlkNode *img, uint64_t offset, uint64_t bytes, BlkNode *src,
                        uint64_t src_offset)
{
    FileState *s = img->opaque;
    FileLockMode m;
    int ret;

    if (src->drv != img->drv) {
        return -ENOTSUP;
    }
    if (s->direct && !file_range_aligned(offset, bytes, img->request_alignment)) {
        return -ENOTSUP; /* invariant 1: no read-modify-write of a copy */
    }
    m = s->direct || offset + bytes > file_size_get(img) ? LOCK_SHARED : LOCK_NONE;
    ret = file_check_sticky(s, "write to");
    if (ret < 0) {
        return ret;
    }
    file_lock(s, m);
    ret = file_do_copy_in(img, s, offset, src->opaque, src_offset, bytes);
    file_unlock(s, m);
    blk_gen_bump(img); /* invariant 9 */
    return ret;
}

/*
 * Zero [offset, offset+bytes) of a regular file without writing data.
 * Returns 0, -ENOTSUP when no fallocate mode can do it, or -errno.  Caller
 * holds s->lock exclusively if the range ends past img->size (invariant 6).
 */
static int file_zero_fallocate(FileState *s, uint64_t offset, uint64_t bytes,
                               unsigned flags)
{
    uint64_t end = offset + bytes;
    int ret;

    if (flags & BLK_REQ_MAY_UNMAP) {
        ret = file_do_fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                                bytes);
        if (ret == 0) {
            struct stat st;
            if (fstat(s->fd, &st) < 0) {
                return -errno;
            }
            if ((uint64_t)st.st_size < end) {
                ret = file_do_ftruncate(s->fd, end); /* the new tail reads as zeros */
            }
            return ret;
        }
        if (!file_errno_unsupported(-ret)) {
            return ret;
        }
    }
    /* Zeroed and allocated; extends the file when past EOF. */
    ret = file_do_fallocate(s->fd, FALLOC_FL_ZERO_RANGE, offset, bytes);
    if (ret == 0 || !file_errno_unsupported(-ret)) {
        return ret;
    }
    /* Filesystems without ZERO_RANGE (tmpfs): punch, then allocate again. */
    ret = file_do_fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                            bytes);
    if (ret == 0) {
        ret = file_do_fallocate(s->fd, 0, offset, bytes);
    }
    if (ret < 0 && file_errno_unsupported(-ret)) {
        return -ENOTSUP;
    }
    return ret;
}

/* Invariant 12: BLKZEROOUT for the whole logical blocks of the range. */
static int file_zero_blkdev(BlkNode *img, FileState *s, uint64_t offset, uint64_t bytes,
                            unsigned flags)
{
    uint64_t end = offset + bytes;
    uint64_t start = ROUND_UP(offset, s->lbs), stop = end / s->lbs * s->lbs;
    int ret = 0;

    /* Nothing whole to zero, or NO_FALLBACK and edges that would need
     * writing: the caller writes the range, or refuses it. */
    if (start >= stop ||
        ((flags & BLK_REQ_NO_FALLBACK) && (start != offset || stop != end))) {
        return -ENOTSUP;
    }
    uint64_t range[2] = {start, stop - start};
    while (ioctl(s->fd, BLKZEROOUT, range) < 0) {
        if (errno != EINTR) {
            ret = file_errno_unsupported(errno) ? -ENOTSUP : -errno;
            break;
        }
    }
    if (ret == -ENOTSUP) {
        return ret; /* the caller writes the whole range, or refuses it */
    }
    if (ret == 0 && start > offset) {
        ret = file_write_zeroes_slow(img, s, offset, start - offset);
    }
    if (ret == 0 && end > stop) {
        ret = file_write_zeroes_slow(img, s, stop, end - stop);
    }
    return ret;
}

static int file_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                              unsigned flags)
{
    FileState *s = img->opaque;
    uint64_t end = offset + bytes;
    uint64_t a = img->request_alignment;
    FileLockMode m;
    int ret;

    if (bytes == 0) {
        return 0;
    }
    ret = file_check_sticky(s, "write zeros to");
    if (ret < 0) {
        return ret;
    }
    /* Invariant 6: the fallback may read-modify-write, the punch path may ftruncate. */
    if (end > file_size_get(img) || (s->direct && (offset % a || bytes % a))) {
        m = LOCK_EXCL;
    } else if (s->direct) {
        m = LOCK_SHARED;
    } else {
        m = LOCK_NONE;
    }
    file_lock(s, m);
    if (img->is_block_device) {
        ret = file_zero_blkdev(img, s, offset, bytes, flags);
    } else {
        ret = file_zero_fallocate(s, offset, bytes, flags);
        if (ret == 0) {
            file_size_grow(img, end);
        }
    }
    if (ret == -ENOTSUP && !(flags & BLK_REQ_NO_FALLBACK)) {
        ret = file_write_zeroes_slow(img, s, offset, bytes);
    }
    file_unlock(s, m);
    blk_gen_bump(img); /* invariant 9 */
    if (ret == 0 && ((s->dsync && !img->is_block_device) || (flags & BLK_REQ_FUA))) {
        /* fallocate and BLKZEROOUT are not covered by O_DSYNC, and take no
         * FUA of their own: a FUA zero write is durable when it returns
         * (invariant 2). */
        ret = file_sync_node(img, s);
    }
    if (ret < 0 && ret != -ENOTSUP) {
        blk_error(-ret, "Could not write zeros to '%s' at offset %" PRIu64 ": %s",
                  s->name, offset, g_strerror(-ret));
    }
    return ret;
}

static int file_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    FileState *s = img->opaque;
    FileLockMode m = s->direct ? LOCK_SHARED : LOCK_NONE; /* invariant 6 */
    int ret = 0;

    if (bytes == 0) {
        return 0;
    }
    ret = file_check_sticky(s, "discard");
    if (ret < 0) {
        return ret;
    }
    file_lock(s, m);
    if (img->is_block_device) {
        uint64_t range[2] = {offset, bytes};
        while (ioctl(s->fd, BLKDISCARD, range) < 0) {
            if (errno != EINTR) {
                ret = -errno;
                break;
            }
        }
    } else {
        ret = file_do_fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                                bytes);
    }
    file_unlock(s, m);
    blk_gen_bump(img); /* invariant 9 */
    /* Discard is advisory. */
    if (ret < 0 && file_errno_unsupported(-ret)) {
        ret = 0;
    }
    if (ret < 0) {
        blk_error(-ret, "Could not discard '%s' at offset %" PRIu64 ": %s", s->name,
                  offset, g_strerror(-ret));
    }
    return ret;
}

static int file_flush(BlkNode *img)
{
    FileState *s = img->opaque;

    if (s->read_only) {
        return 0;
    }
    return file_sync_node(img, s); /* invariants 2, 9, 10 */
}

static int file_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    FileState *s = img->opaque;
    uint64_t size = file_size_get(img);
    uint64_t limit;
    off_t data, hole;

    if (bytes == 0) {
        return -EINVAL;
    }
    st->file = img;
    st->map = offset;
    if (img->is_block_device) {
        st->flags = BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED;
        st->pnum = bytes;
        return 0;
    }
    if (offset >= size) {
        st->flags = BLK_STATUS_ZERO; /* past EOF */
        st->pnum = bytes;
        return 0;
    }
    limit = MIN(bytes, size - offset); /* one answer never crosses EOF */

    data = lseek(s->fd, (off_t)offset, SEEK_DATA);
    if (data < 0) {
        if (errno == ENXIO) {
            goto hole_to; /* no data after offset: a hole up to EOF */
        }
        if (file_errno_unsupported(errno)) {
            goto data_all;
        }
        return -errno;
    }
    if ((uint64_t)data > offset) {
        limit = MIN(limit, (uint64_t)data - offset);
        goto hole_to;
    }
    if ((uint64_t)data < offset) {
        goto data_all; /* should not happen; data is the safe answer */
    }
    hole = lseek(s->fd, (off_t)offset, SEEK_HOLE);
    if (hole < 0) {
        if (errno == ENXIO || file_errno_unsupported(errno)) {
            goto data_all;
        }
        return -errno;
    }
    if ((uint64_t)hole > offset) {
        limit = MIN(limit, (uint64_t)hole - offset);
    }
data_all:
    st->flags = BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED;
    st->pnum = MAX(limit, 1);
    return 0;
hole_to:
    /* Like qemu's file-posix: a hole reads as zeros and still has an offset. */
    st->flags = BLK_STATUS_ZERO | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED;
    st->pnum = MAX(limit, 1);
    return 0;
}

static int64_t file_get_allocated_size(BlkNode *img)
{
    FileState *s = img->opaque;
    struct stat st;

    /* As QEMU's: st_blocks, which is 0 for a block device ("disk size: 0 B"). */
    if (fstat(s->fd, &st) < 0) {
        return -errno;
    }
    return (int64_t)st.st_blocks * 512;
}

static bool file_has_zero_init(BlkNode *img)
{
    return !img->is_block_device;
}

/* Invariant 15. */
static void file_advise(BlkNode *img, BlkAdvice advice)
{
    FileState *s = img->opaque;
    int a = advice == BLK_ADVICE_SEQUENTIAL ? POSIX_FADV_SEQUENTIAL : POSIX_FADV_NORMAL;

    if (s && !s->direct) {
        (void)posix_fadvise(s->fd, 0, 0, a); /* a hint: its failure changes nothing */
    }
}

const BlkDriver blk_file_driver = {
    .format_name = "file",
    .is_protocol = true,
    .open = file_open,
    .close = file_close,
    .preadv = file_preadv,
    .pwritev = file_pwritev,
    .copy_in = file_copy_in,
    .pwrite_zeroes = file_pwrite_zeroes,
    .pdiscard = file_pdiscard,
    .flush = file_flush,
    .block_status = file_block_status,
    .truncate = file_truncate,
    .get_allocated_size = file_get_allocated_size,
    .has_zero_init = file_has_zero_init,
    .set_perm = file_set_perm,
    .advise = file_advise,
};
