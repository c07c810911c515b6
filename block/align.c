/*
 * block/align.c: a filter node that holds the requests reaching its child
 * to a forced alignment (QEMU's blkdebug "align" option: QEMU's block
 * layer pads every request to a node's request_alignment).
 *
 * Owns: padding requests as QEMU's block layer pads them -- reads widened
 * to the aligned blocks around them, writes with an unaligned head or
 * tail as read-modify-write of those blocks, zero writes as data writes
 * of zeros in their partial blocks around a zero write of the aligned
 * middle, discards shrunk to the whole blocks inside them.
 *
 * Invariants (cited as "align.c invariant N"):
 *  1. Every read, write, zero write and discard that reaches the child
 *     starts and ends on a multiple of the alignment.  A padded write
 *     past the child's end grows it to the aligned end (QEMU's padding
 *     does the same); the child reads zeros past its end (block.c,
 *     protocol nodes).
 *  2. A read-modify-write holds s->rmw exclusively from its read to its
 *     write, every other write-like request holds it shared, so no write
 *     lands between the read and the write and is lost (QEMU serialises
 *     the padded request).  Reads take no lock: the padding writes back
 *     the bytes they read.
 *  3. A zero write with BLK_REQ_NO_FALLBACK that is not aligned fails with
 *     ENOTSUP and changes nothing (QEMU: "can't make it efficient").
 *  4. Everything else -- events, breakpoints, permissions, flush, the
 *     write generations (block.h invariant 4), block status, truncation --
 *     is the child's (img->filtered).
 */
#include "block/block.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct AlignState {
    BlkNode *child;
    uint64_t align; /* a power of two > 1 */
    GRWLock rmw;    /* invariant 2 */
} AlignState;

static uint64_t down(const AlignState *s, uint64_t x)
{
    return x & ~(s->align - 1);
}

static uint64_t up(const AlignState *s, uint64_t x)
{
    return down(s, x + s->align - 1);
}

static bool aligned(const AlignState *s, uint64_t offset, uint64_t bytes)
{
    return ((offset | bytes) & (s->align - 1)) == 0;
}

static int align_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    AlignState *s = img->opaque;
    uint64_t start = down(s, offset), end = up(s, offset + qiov->size);

    if (aligned(s, offset, qiov->size)) {
        return blk_preadv(s->child, offset, qiov, flags);
    }
    g_autofree char *buf = g_try_malloc(end - start);
    if (!buf) {
        return -ENOMEM;
    }
    BlkIOV q;
    iov_init_buf(&q, buf, end - start);
    int ret = blk_preadv(s->child, start, &q, flags);
    if (ret == 0) {
        iov_from_buf(qiov, 0, buf + (offset - start), qiov->size);
    }
    return ret;
}

/*
 * Write [offset, offset + len) of the block-aligned span around it, the
 * bytes from qiov (NULL: zeros), read-modify-writing the partial blocks at
 * its ends (invariants 1 and 2; the caller holds s->rmw exclusively).  The
 * middle is passed as qiov's own iovecs, not copied.
 */
static int rmw_write_locked(AlignState *s, uint64_t offset, uint64_t len,
                            const BlkIOV *qiov, unsigned flags)
{
    uint64_t start = down(s, offset), end = up(s, offset + len);
    uint64_t head = offset - start, tail = end - (offset + len);
    g_autofree char *hbuf = g_try_malloc(s->align), *tbuf = g_try_malloc(s->align);
    BlkIOV mid = {0}, out;
    int ret = 0;

    if (!hbuf || !tbuf) {
        return -ENOMEM;
    }
    if (head) {
        ret = blk_pread(s->child, start, hbuf, s->align);
    }
    if (ret == 0 && tail && !(head && end - start == s->align)) {
        ret = blk_pread(s->child, end - s->align, tbuf, s->align);
    }
    if (ret < 0) {
        return ret;
    }
    if (end - start == s->align) { /* one block: its bytes are all in hbuf */
        if (!head) {
            memcpy(hbuf, tbuf, s->align);
        }
        if (qiov) {
            iov_to_buf(qiov, 0, hbuf + head, len);
        } else {
            memset(hbuf + head, 0, len);
        }
        return blk_pwrite(s->child, start, hbuf, s->align, flags);
    }
    g_autofree char *zeros = qiov ? NULL : g_try_malloc0(len);
    if (!qiov && !zeros) {
        return -ENOMEM;
    }
    if (qiov) {
        iov_slice(&mid, qiov, 0, len);
    } else {
        iov_init_buf(&mid, zeros, len);
    }
    g_autofree struct iovec *v = g_new(struct iovec, (gsize)mid.niov + 2);
    int n = 0;
    if (head) {
        v[n++] = (struct iovec){.iov_base = hbuf, .iov_len = head};
    }
    memcpy(v + n, mid.iov, sizeof(*v) * (size_t)mid.niov);
    n += mid.niov;
    if (tail) {
        v[n++] = (struct iovec){.iov_base = tbuf + (s->align - tail), .iov_len = tail};
    }
    iov_init_external(&out, v, n);
    ret = blk_pwritev(s->child, start, &out, flags);
    iov_destroy(&mid);
    return ret;
}

static int align_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                         unsigned flags)
{
    AlignState *s = img->opaque;
    int ret;

    if (aligned(s, offset, qiov->size)) {
        g_rw_lock_reader_lock(&s->rmw);
        ret = blk_pwritev(s->child, offset, qiov, flags);
        g_rw_lock_reader_unlock(&s->rmw);
    } else {
        g_rw_lock_writer_lock(&s->rmw);
        ret = rmw_write_locked(s, offset, qiov->size, qiov, flags);
        g_rw_lock_writer_unlock(&s->rmw);
    }
    blk_filter_size_update(img, true);
    return ret;
}

/* QEMU's bdrv_co_do_zero_pwritev: the partial blocks as data, the aligned
 * middle as a zero write with the caller's flags. */
static int align_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                               unsigned flags)
{
    AlignState *s = img->opaque;
    uint64_t end = offset + bytes;
    uint64_t mid_start = up(s, offset), mid_end = down(s, end);
    int ret = 0;

    if (aligned(s, offset, bytes)) {
        g_rw_lock_reader_lock(&s->rmw);
        ret = blk_pwrite_zeroes(s->child, offset, bytes, flags);
        g_rw_lock_reader_unlock(&s->rmw);
        blk_filter_size_update(img, true);
        return ret;
    }
    if (flags & BLK_REQ_NO_FALLBACK) {
        return -ENOTSUP; /* invariant 3 */
    }
    g_rw_lock_writer_lock(&s->rmw);
    if (mid_start >= mid_end) { /* no whole block inside: one padded write */
        ret = rmw_write_locked(s, offset, bytes, NULL, flags & BLK_REQ_FUA);
        goto out;
    }
    if (offset < mid_start) {
        ret = rmw_write_locked(s, offset, mid_start - offset, NULL, flags & BLK_REQ_FUA);
    }
    if (ret == 0) {
        ret = blk_pwrite_zeroes(s->child, mid_start, mid_end - mid_start, flags);
    }
    if (ret == 0 && end > mid_end) {
        ret = rmw_write_locked(s, mid_end, end - mid_end, NULL, flags & BLK_REQ_FUA);
    }
out:
    g_rw_lock_writer_unlock(&s->rmw);
    blk_filter_size_update(img, true);
    return ret;
}

/* QEMU's bdrv_co_pdiscard: only the whole blocks inside the range. */
static int align_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    AlignState *s = img->opaque;
    uint64_t start = up(s, offset), end = down(s, offset + bytes);
    int ret;

    if (start >= end) {
        return 0;
    }
    g_rw_lock_reader_lock(&s->rmw);
    ret = blk_pdiscard(s->child, start, end - start);
    g_rw_lock_reader_unlock(&s->rmw);
    return ret;
}

static int align_flush(BlkNode *img)
{
    AlignState *s = img->opaque;
    return blk_flush(s->child);
}

static int align_block_status(BlkNode *img, uint64_t offset, uint64_t bytes,
                              BlkStatus *st)
{
    AlignState *s = img->opaque;
    int ret = blk_block_status(s->child, offset, bytes, st);
    if (st->file == s->child) {
        st->file = img;
    }
    return ret;
}

static int align_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                          bool shrink)
{
    AlignState *s = img->opaque;
    int ret;

    g_rw_lock_writer_lock(&s->rmw);
    ret = blk_truncate(s->child, size, exact, prealloc, shrink);
    g_rw_lock_writer_unlock(&s->rmw);
    blk_filter_size_update(img, false);
    return ret;
}

static int64_t align_get_allocated_size(BlkNode *img)
{
    AlignState *s = img->opaque;
    return blk_get_allocated_size(s->child);
}

static bool align_has_zero_init(BlkNode *img)
{
    AlignState *s = img->opaque;
    return s->child->drv->has_zero_init && s->child->drv->has_zero_init(s->child);
}

static void align_event(BlkNode *img, BlkEvent ev)
{
    AlignState *s = img->opaque;
    blk_event(s->child, ev);
}

static int align_set_perm(BlkNode *img, unsigned perm, unsigned shared)
{
    AlignState *s = img->opaque;
    return s->child->drv->set_perm ? s->child->drv->set_perm(s->child, perm, shared) : 0;
}

static void align_close(BlkNode *img)
{
    AlignState *s = img->opaque;
    blk_close(s->child);
    g_rw_lock_clear(&s->rmw);
    g_free(s);
}

static const BlkDriver align_driver = {
    .format_name = "blkdebug",
    .is_protocol = true,
    .close = align_close,
    .preadv = align_preadv,
    .pwritev = align_pwritev,
    .pwrite_zeroes = align_pwrite_zeroes,
    .pdiscard = align_pdiscard,
    .flush = align_flush,
    .block_status = align_block_status,
    .truncate = align_truncate,
    .get_allocated_size = align_get_allocated_size,
    .has_zero_init = align_has_zero_init,
    .event = align_event,
    .set_perm = align_set_perm,
};

BlkNode *blk_open_align(BlkNode *child, uint64_t align)
{
    if (align < 2 || align > INT32_MAX || (align & (align - 1))) {
        blk_close(child);
        blk_error(EINVAL, "Cannot meet constraints with align %" PRIu64, align);
        return NULL;
    }
    AlignState *s = g_new0(AlignState, 1);
    s->child = child;
    s->align = MAX(align, child->request_alignment);
    g_rw_lock_init(&s->rmw);

    BlkNode *img = g_new0(BlkNode, 1);
    img->drv = &align_driver;
    img->opaque = s;
    img->filename = g_strdup(child->filename);
    img->read_only = child->read_only;
    img->cache = child->cache;
    img->size = child->size;
    img->request_alignment = (uint32_t)s->align;
    img->is_block_device = child->is_block_device;
    img->filtered = child; /* invariant 4 */
    return img;
}
