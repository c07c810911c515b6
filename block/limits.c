/*
 * block/limits.c: a node's request limits (BlkLimits: QEMU's BlockLimits
 * as its blkdebug node sets them) honoured by the request functions of
 * block.c before a request reaches the node's driver -- the splitting and
 * aligning QEMU's block layer (block/io.c) does for the node's parent.
 *
 * Owns: padding reads and writes to the alignment (read-modify-write for
 * writes), cutting them at max_transfer, QEMU's zero-write and discard
 * fragmentation, and aligned block status queries.
 *
 * Facts (QEMU 7.2's block/io.c, cited as "limits.c fact N"):
 *  1. Reads and writes are padded to align: a read reads the whole aligned
 *     range, a write reads the unaligned head and tail blocks first and
 *     writes the whole aligned range; each driver request is at most
 *     max_transfer (rounded down to align) bytes.  A read of a format
 *     node's padding past its end reads zeros; a write there is cut at
 *     the end.
 *  2. Zero writes: the parts not aligned to align are written as padded
 *     writes of zeros (fact 1); the aligned rest is cut at multiples of
 *     A = max(opt_write_zero, align): a head piece up to the first
 *     multiple of A (at most max_transfer bytes), then pieces of at most
 *     max_write_zero (rounded down to A), the last one shortened to end on
 *     a multiple of A when it is longer than A.  A piece the driver
 *     refuses (-ENOTSUP, or no zero-write) is written as zeros, at most
 *     max_transfer (default 16 MiB) bytes at a time, unless the caller
 *     asked for no fallback.
 *  3. Discards are cut at multiples of D = max(opt_discard, align): a head
 *     piece up to the first multiple of D (shortened to its remainder
 *     modulo align when it is not a multiple of align), then pieces of at
 *     most max_discard (rounded down to D), a tail past the last multiple
 *     of D split off the same way; a piece the driver refuses (-ENOTSUP)
 *     is skipped, as discard is advisory.
 *  4. Block status asks the driver for the range widened to align and
 *     answers for the caller's range (block.c clamps it).
 *
 * Invariants:
 *  1. Only whole requests reach the driver: every driver request is within
 *     the caller's range widened to align, aligned to align (but the
 *     unaligned zero-write and discard pieces of facts 2 and 3, which the
 *     driver may refuse, and a piece cut at a format node's end, fact 1),
 *     and within max_transfer.
 *  2. Memory: a padded request bounces through one buffer of its padded
 *     size (the caller's buffers already hold the request); a zero
 *     fallback through one of at most max_transfer bytes.
 *  3. A write that reads before it writes (fact 1) runs alone: writes of a
 *     node with align > 1 take l->rmw, so no other write lands between
 *     the read and the write (QEMU serialises them with tracked requests).
 */
#include "block/limits.h"
#include "aio/mutex.h"

#include <errno.h>
#include <string.h>

#define BOUNCE_MAX ((uint64_t)16 << 20) /* QEMU's MAX_BOUNCE_BUFFER */

static uint64_t align_of(const BlkLimits *l)
{
    return l->align ? l->align : 1;
}

/* Fact 1: the largest driver read or write. */
static uint64_t transfer_max(const BlkLimits *l)
{
    uint64_t a = align_of(l);
    uint64_t m = l->max_transfer ? l->max_transfer : (uint64_t)INT32_MAX;
    return MAX(ROUND_DOWN(m, a), a);
}

/* Fact 1: aligned [offset, offset + q->size) to the driver in pieces. */
static int split_rw(BlkNode *img, bool write, uint64_t offset, const BlkIOV *q,
                    unsigned flags)
{
    uint64_t max = transfer_max(img->limits), done = 0;

    while (done < q->size) {
        BlkIOV part;
        uint64_t n = MIN(q->size - done, max);
        int ret;

        iov_slice(&part, q, (size_t)done, (size_t)n);
        ret = write ? img->drv->pwritev(img, offset + done, &part, flags)
                    : img->drv->preadv(img, offset + done, &part, flags);
        iov_destroy(&part);
        if (ret < 0) {
            return ret;
        }
        done += n;
    }
    return 0;
}

/* Fact 1: read [start, end) into buf, zeros past a format node's end. */
static int read_padded(BlkNode *img, uint64_t start, uint64_t end, uint8_t *buf,
                       unsigned flags)
{
    uint64_t stop = end;
    BlkIOV q;

    if (!img->drv->is_protocol) {
        stop = MAX(MIN(end, img->size), start);
        memset(buf + (stop - start), 0, (size_t)(end - stop));
    }
    iov_init_buf(&q, buf, (size_t)(stop - start));
    return split_rw(img, false, start, &q, flags);
}

int blk_limits_preadv(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    uint64_t a = align_of(img->limits);
    uint64_t start = ROUND_DOWN(offset, a), end = ROUND_UP(offset + q->size, a);
    g_autofree uint8_t *bounce = NULL;
    int ret;

    if (start == offset && end == offset + q->size &&
        (img->drv->is_protocol || end <= img->size)) {
        return split_rw(img, false, offset, q, flags);
    }
    bounce = g_try_malloc((size_t)(end - start)); /* invariant 2 */
    if (!bounce) {
        return blk_error(ENOMEM, "Cannot allocate %" G_GUINT64_FORMAT " bytes",
                         end - start);
    }
    ret = read_padded(img, start, end, bounce, flags);
    if (ret == 0) {
        iov_from_buf(q, 0, bounce + (offset - start), q->size);
    }
    return ret;
}

/* Fact 1 with the bytes already in the padded buffer buf of [start, end):
 * written up to a format node's end. */
static int write_padded(BlkNode *img, uint64_t start, uint64_t end, uint8_t *buf,
                        unsigned flags)
{
    BlkIOV q;

    if (!img->drv->is_protocol) {
        end = MAX(MIN(end, img->size), start);
    }
    iov_init_buf(&q, buf, (size_t)(end - start));
    return split_rw(img, true, start, &q, flags);
}

/* Fact 1: [offset, offset + len) of data (NULL q: zeros), padded. */
static int pwrite_rmw(BlkNode *img, uint64_t offset, uint64_t len, const BlkIOV *q,
                      unsigned flags)
{
    uint64_t a = align_of(img->limits);
    uint64_t start = ROUND_DOWN(offset, a), end = ROUND_UP(offset + len, a);
    g_autofree uint8_t *bounce = g_try_malloc((size_t)(end - start));
    int ret = 0;

    if (!bounce) {
        return blk_error(ENOMEM, "Cannot allocate %" G_GUINT64_FORMAT " bytes",
                         end - start);
    }
    if (offset != start) {
        ret = read_padded(img, start, start + a, bounce, 0);
    }
    if (ret == 0 && offset + len != end && (end - a != start || offset == start)) {
        ret = read_padded(img, end - a, end, bounce + (end - a - start), 0);
    }
    if (ret < 0) {
        return ret;
    }
    if (q) {
        iov_to_buf(q, 0, bounce + (offset - start), (size_t)len);
    } else {
        memset(bounce + (offset - start), 0, (size_t)len);
    }
    return write_padded(img, start, end, bounce, flags);
}

int blk_limits_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    uint64_t a = align_of(img->limits);
    int ret;

    if (a == 1) {
        return split_rw(img, true, offset, q, flags);
    }
    mutex_lock(&img->limits->rmw); /* invariant 3 */
    if (offset % a == 0 && q->size % a == 0 &&
        (img->drv->is_protocol || offset + q->size <= img->size)) {
        ret = split_rw(img, true, offset, q, flags);
    } else {
        ret = pwrite_rmw(img, offset, q->size, q, flags);
    }
    mutex_unlock(&img->limits->rmw);
    return ret;
}

/* Fact 2: a piece the driver refused, as zeros; *n cut to what went. */
static int zero_fallback(BlkNode *img, uint64_t offset, uint64_t *n, unsigned flags,
                         uint8_t **buf)
{
    uint64_t max = img->limits->max_transfer ? img->limits->max_transfer : BOUNCE_MAX;
    BlkIOV q;

    *n = MIN(*n, max);
    if (!*buf) {
        *buf = g_try_malloc0((size_t)max); /* invariant 2 */
        if (!*buf) {
            return blk_error(ENOMEM, "Cannot allocate %" G_GUINT64_FORMAT " bytes", max);
        }
    }
    iov_init_buf(&q, *buf, (size_t)*n);
    return img->drv->pwritev(img, offset, &q, flags & BLK_REQ_FUA);
}

/* Fact 2 on an aligned range. */
static int zero_aligned(BlkNode *img, uint64_t offset, uint64_t bytes, unsigned flags)
{
    const BlkLimits *l = img->limits;
    uint64_t za = MAX((uint64_t)l->opt_write_zero, align_of(l));
    uint64_t maxz =
        ROUND_DOWN(l->max_write_zero ? l->max_write_zero : (uint64_t)INT32_MAX, za);
    uint64_t head = offset % za, tail = (offset + bytes) % za;
    g_autofree uint8_t *buf = NULL;
    int ret = 0;

    while (bytes > 0 && ret == 0) {
        uint64_t n = bytes;
        if (head) {
            uint64_t mt = l->max_transfer ? l->max_transfer : BOUNCE_MAX;
            n = MIN(MIN(bytes, mt), za - head);
            head = (head + n) % za;
        } else if (tail && n > za) {
            n -= tail;
        }
        n = MIN(n, MAX(maxz, za));
        ret = img->drv->pwrite_zeroes ? img->drv->pwrite_zeroes(img, offset, n, flags)
                                      : -ENOTSUP;
        if (ret == -ENOTSUP && !(flags & BLK_REQ_NO_FALLBACK)) {
            ret = zero_fallback(img, offset, &n, flags, &buf);
        }
        offset += n;
        bytes -= n;
    }
    return ret;
}

int blk_limits_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                             unsigned flags)
{
    uint64_t a = align_of(img->limits);
    uint64_t lo = ROUND_UP(offset, a), hi = ROUND_DOWN(offset + bytes, a);
    int ret = 0;

    if (a > 1) {
        mutex_lock(&img->limits->rmw); /* invariant 3 */
    }
    if (lo >= hi) { /* within one or two blocks: one padded write */
        ret = pwrite_rmw(img, offset, bytes, NULL, flags & BLK_REQ_FUA);
    } else {
        if (offset < lo) {
            ret = pwrite_rmw(img, offset, lo - offset, NULL, flags & BLK_REQ_FUA);
        }
        if (ret == 0) {
            ret = zero_aligned(img, lo, hi - lo, flags);
        }
        if (ret == 0 && hi < offset + bytes) {
            ret = pwrite_rmw(img, hi, offset + bytes - hi, NULL, flags & BLK_REQ_FUA);
        }
    }
    if (a > 1) {
        mutex_unlock(&img->limits->rmw);
    }
    return ret;
}

int blk_limits_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    const BlkLimits *l = img->limits;
    uint64_t a = align_of(l), da = MAX((uint64_t)l->opt_discard, a);
    uint64_t maxd = ROUND_DOWN(l->max_discard ? l->max_discard : (uint64_t)INT64_MAX, da);
    uint64_t head = offset % da, tail = (offset + bytes) % da;

    while (bytes > 0) { /* fact 3 */
        uint64_t n = bytes;
        int ret;

        if (head) {
            n = MIN(bytes, da - head);
            if (n % a) {
                n %= a;
            }
            head = (head + n) % da;
        } else if (tail) {
            if (n > da) {
                n -= tail;
            } else if (tail % a && tail > a) {
                tail %= a;
                n -= tail;
            }
        }
        n = MIN(n, MAX(maxd, da));
        ret = img->drv->pdiscard(img, offset, n);
        if (ret < 0 && ret != -ENOTSUP) {
            return ret;
        }
        offset += n;
        bytes -= n;
    }
    return 0;
}

int blk_limits_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    uint64_t a = align_of(img->limits);
    uint64_t start = ROUND_DOWN(offset, a);
    uint64_t end = MIN(ROUND_UP(offset + bytes, a), MAX(img->size, offset + bytes));
    int ret = img->drv->block_status(img, start, end - start, st); /* fact 4 */

    if (ret < 0) {
        return ret;
    }
    if (st->pnum <= offset - start) {
        return blk_error(EIO, "Driver '%s' returned an invalid block status length",
                         img->drv->format_name);
    }
    st->pnum = MIN(st->pnum - (offset - start), bytes);
    if (st->flags & (BLK_STATUS_OFFSET_VALID | BLK_STATUS_RAW)) {
        st->map += offset - start;
    }
    return 0;
}
