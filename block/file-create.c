/*
 * block/file-create.c: resizing and creating files for the file protocol
 * (part of file.c's design).
 *
 * Owns: resizing with preallocation (off, falloc, full) and restoring the
 * old size on failure, the protocol's truncate (regular files and block
 * devices), and blk_file_create().
 *
 * Invariants: file.c's list, cited as "file.c invariant N"; this file
 * keeps 5 (img->size set after a resize), 6 (a resize holds s->lock
 * exclusively, a growth by fallocate shared), 9 (a resize bumps the
 * write generation), 10 (no resize after a failed flush) and 11 (the
 * resize permission, the creation locks before anything is truncated).
 */
#include "block/file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * Resize a regular file from cur to size with preallocation.  Caller holds
 * s->lock exclusively (file.c invariant 6).  On failure the old size is restored.
 */
static int file_resize(BlkNode *img, FileState *s, uint64_t cur, uint64_t size,
                       BlkPrealloc prealloc, const char **what)
{
    int ret;

    *what = NULL;
    if (prealloc == BLK_PREALLOC_FALLOC && size > cur) {
        ret = -posix_fallocate(s->fd, (off_t)cur, (off_t)(size - cur));
        if (ret < 0) {
            *what = "Could not preallocate new data";
            file_do_ftruncate(s->fd, cur);
        }
        return ret;
    }
    ret = file_do_ftruncate(s->fd, size);
    if (ret < 0 || prealloc != BLK_PREALLOC_FULL || size <= cur) {
        return ret;
    }
    /* full: write the zeros so the space is really allocated. */
    ret = file_write_zeroes_slow(img, s, cur, size - cur);
    if (ret == 0 && !s->no_flush) {
        ret = file_fdatasync_sticky(s);
    }
    if (ret < 0) {
        *what = "Could not preallocate new data";
        file_do_ftruncate(s->fd, cur);
    }
    return ret;
}

/*
 * Grow a regular file to size with fallocate(2), s->lock held shared (file.c
 * invariant 6): the call only adds bytes, so writes in flight -- ring writes
 * that hold the lock until the reaper takes their completion included --
 * keep running instead of draining first.  Returns 1 when this path does
 * not apply (not a growth; no fallocate on this file system: file_resize's
 * emulation writes, so it runs exclusively), else 0 or -errno with the file
 * back at its old length or at the end of what a write extended meanwhile.
 */
static int file_grow_falloc(BlkNode *img, FileState *s, uint64_t size, const char **what)
{
    struct stat st;
    uint64_t cur;
    int ret;

    file_lock(s, LOCK_SHARED);
    if (fstat(s->fd, &st) < 0) {
        ret = -errno;
        file_unlock(s, LOCK_SHARED);
        return ret;
    }
    cur = (uint64_t)st.st_size;
    ret = size > cur ? file_do_fallocate(s->fd, 0, cur, size - cur) : 1;
    if (ret == 0) {
        file_size_grow(img, size); /* file.c invariant 5: after the bytes */
    }
    file_unlock(s, LOCK_SHARED);
    if (ret < 0 && file_errno_unsupported(-ret)) {
        return 1;
    }
    if (ret < 0) {
        *what = "Could not preallocate new data";
        file_lock(s, LOCK_EXCL); /* an ftruncate: every extending write is done */
        file_do_ftruncate(s->fd, MAX(cur, file_size_get(img)));
        file_unlock(s, LOCK_EXCL);
    }
    return ret;
}

int file_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                  bool shrink)
{
    FileState *s = img->opaque;
    const char *what = NULL;
    struct stat st;
    int ret;

    (void)shrink; /* a policy of the layers above; the protocol resizes exactly */
    if (s->read_only) {
        blk_error(EACCES, "Could not resize '%s': Image is read-only", s->name);
        return -EACCES;
    }
    if (img->is_block_device) {
        uint64_t dev = file_size_get(img);
        if (exact && size != dev) {
            blk_error(ENOTSUP, "Cannot resize device files");
            return -ENOTSUP;
        }
        if (size > dev) {
            blk_error(EINVAL, "Cannot grow device files");
            return -EINVAL;
        }
        return 0;
    }
    if (size > (uint64_t)INT64_MAX) {
        blk_error(EFBIG, "Could not resize '%s': %s", s->name, g_strerror(EFBIG));
        return -EFBIG;
    }
    if (prealloc == BLK_PREALLOC_METADATA) {
        /* like file-posix: metadata means nothing to a protocol */
        blk_error(ENOTSUP, "Unsupported preallocation mode: metadata");
        return -ENOTSUP;
    }
    ret = file_check_sticky(s, "resize");
    if (ret == 0) {
        /* file.c invariant 11: as qemu-io's truncate, take the resize permission now. */
        ret = blk_lock_add(&s->locks, s->fd, BLK_PERM_RESIZE, s->name);
    }
    if (ret == 0 && prealloc == BLK_PREALLOC_FALLOC) {
        ret = file_grow_falloc(img, s, size, &what);
        if (ret <= 0) {
            goto out;
        }
        ret = 0;
    }
    if (ret < 0) {
        return ret;
    }
    file_lock(s, LOCK_EXCL);
    if (fstat(s->fd, &st) < 0) {
        ret = -errno;
    } else if (size < (uint64_t)st.st_size && prealloc != BLK_PREALLOC_OFF) {
        file_unlock(s, LOCK_EXCL);
        blk_error(ENOTSUP,
                  "Could not resize '%s': Cannot use preallocation for shrinking files",
                  s->name);
        return -ENOTSUP;
    } else {
        ret = file_resize(img, s, (uint64_t)st.st_size, size, prealloc, &what);
    }
    if (ret == 0) {
        file_size_set(img, size);
    }
    file_unlock(s, LOCK_EXCL);
out:
    blk_gen_bump(img); /* file.c invariant 9 */
    if (ret < 0) {
        blk_error(-ret, "Could not resize '%s': %s%s%s", s->name, what ? what : "",
                  what ? ": " : "", g_strerror(-ret));
    }
    return ret;
}

int blk_file_create(const char *filename, uint64_t size, BlkPrealloc prealloc)
{
    BlkNode tmp_img = {0};
    FileState tmp = {0};
    const char *what = NULL;
    struct stat st;
    int fd, ret;

    if (size > (uint64_t)INT64_MAX) {
        blk_error(EFBIG, "Could not create '%s': %s", filename, g_strerror(EFBIG));
        return -EFBIG;
    }
    /* file.c invariant 11: no O_TRUNC; an image in use is refused before it changes. */
    do {
        fd = open(filename, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        ret = -errno;
        goto out_err;
    }
    if (fstat(fd, &st) < 0) {
        ret = -errno;
        close(fd);
        goto out_err;
    }
    ret = blk_lock_role(&tmp.locks, fd, BLK_ROLE_CREATE, NULL, false, filename);
    if (ret < 0) { /* qemu-img prints it after "FILE: " alone */
        close(fd);
        return ret;
    }
    if (S_ISBLK(st.st_mode)) {
        /* A device keeps its size; it only has to be big enough. */
        uint64_t dev = 0;
        ret = ioctl(fd, BLKGETSIZE64, &dev) < 0 ? -errno : 0;
        close(fd);
        if (ret == 0 && dev < size) {
            blk_error(ENOSPC,
                      "Could not create '%s': Device is too small (%" PRIu64
                      " bytes, need %" PRIu64 ")",
                      filename, dev, size);
            return -ENOSPC;
        }
        if (ret < 0) {
            goto out_err;
        }
        return 0;
    }

    /* A plain (page cache) FileState so the resize code can be shared. */
    tmp.fd = fd;
    tmp.name = (char *)filename;
    tmp.buf_align = FILE_MIN_BUF_ALIGN;
    tmp_img.opaque = &tmp;
    tmp_img.request_alignment = 1;
    if (prealloc == BLK_PREALLOC_METADATA) {
        prealloc = BLK_PREALLOC_OFF; /* metadata means nothing at protocol level */
    }
    ret = file_do_ftruncate(fd, 0);
    if (ret == 0) {
        ret = file_resize(&tmp_img, &tmp, 0, size, prealloc, &what);
    }
    if (ret < 0) {
        close(fd);
        if (what) {
            blk_error(-ret, "Could not create '%s': %s: %s", filename, what,
                      g_strerror(-ret));
            return ret;
        }
        goto out_err;
    }
    /*
     * Like QEMU's file-posix, allocate the first block so that probing the
     * O_DIRECT alignment of the new file works and the map of a fresh image
     * starts with the same data extent as qemu-img's.
     */
    if (size > 0 && prealloc != BLK_PREALLOC_FULL) {
        static const char zeros[4096];
        size_t n = (size_t)MIN(size, (uint64_t)sizeof(zeros));
        if (pwrite(fd, zeros, n, 0) != (ssize_t)n) {
            ret = -errno;
            close(fd);
            goto out_err;
        }
    }
    if (close(fd) < 0) {
        ret = -errno;
        goto out_err;
    }
    return 0;

out_err:
    blk_error(-ret, "Could not create '%s': %s", filename, g_strerror(-ret));
    return ret;
}

BlkNode *blk_open_new_image(const char *filename, int *ret)
{
    BlkOpenOptions fo = {.cache = BLK_CACHE_WRITEBACK};
    BlkNode *file =
        blk_open_protocol(filename, &fo, BLK_ROLE_METADATA, BLK_OPEN_USER_NAME);

    *ret = file ? 0 : blk_error_code() ? -blk_error_code() : -EIO;
    return file;
}
