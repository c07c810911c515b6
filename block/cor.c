/*
 * block/cor.c: copy-on-read, as QEMU's block layer does it for qemu-io -C
 * (BDRV_O_COPY_ON_READ) and its copy-on-read filter driver.
 *
 * Owns: reading a range of a format node so that whatever of it the node
 * does not hold itself (the backing chain's data, or zeros) is written
 * into the node on the way.
 *
 * Invariants (cited as "cor.c invariant N"):
 *  1. The copy covers whole clusters: the request is widened to the
 *     node's cluster size (64 KiB when it has none), never past its end,
 *     as QEMU's bdrv_co_do_copy_on_readv rounds it.
 *  2. A range the node holds (block status ALLOCATED: data or zeros of its
 *     own) is read as it is, nothing written; any other range is read
 *     through the chain and written back as it reads -- as zeros (without
 *     unmapping) when it is all zero, else as data.  A failed write fails
 *     the read, as in QEMU.
 *  3. One bounce buffer of at most COR_CHUNK bytes (or one cluster when
 *     the clusters are larger) per step: memory is bounded whatever the
 *     request's size.
 *  4. blk_cor_lock() serializes copy-on-read requests with the writes of
 *     an image opened with copy-on-read (api/image.c), so a copy never
 *     writes back data older than a write that completed meanwhile (QEMU
 *     serializes them with its tracked requests).
 *  5. The write-back is announced on img as the step cor_write (QEMU's
 *     event, raised on the node that copies: a fault node over a format,
 *     block/faulty.c).
 */
#include "block/block.h"
#include "aio/mutex.h"

#include <errno.h>
#include <string.h>

#define COR_CHUNK (1u << 20)
#define COR_DEFAULT_CLUSTER 65536u

static GMutex cor_mutex; /* invariant 4 (static: no init needed) */

void blk_cor_lock(void)
{
    mutex_lock(&cor_mutex);
}

void blk_cor_unlock(void)
{
    mutex_unlock(&cor_mutex);
}

/* Copies bytes [from, from + n) of the image, held in buf (which starts at
 * image offset pos), into the caller's q (which starts at offset). */
static void copy_overlap(const BlkIOV *q, uint64_t offset, const uint8_t *buf,
                         uint64_t pos, uint64_t n)
{
    uint64_t lo = MAX(pos, offset);
    uint64_t hi = MIN(pos + n, offset + q->size);

    if (lo < hi) {
        iov_from_buf(q, (size_t)(lo - offset), buf + (lo - pos), (size_t)(hi - lo));
    }
}

int blk_cor_preadv(BlkNode *img, uint64_t offset, const BlkIOV *q)
{
    uint64_t cs = img->cluster_size ? img->cluster_size : COR_DEFAULT_CLUSTER;
    uint64_t chunk = MAX((uint64_t)COR_CHUNK, cs);
    uint64_t end, pos;
    g_autofree uint8_t *bounce = NULL;
    int ret;

    if (__builtin_add_overflow(offset, (uint64_t)q->size, &end) || end > img->size) {
        return blk_preadv(img, offset, q, 0); /* its own range error */
    }
    if (q->size == 0) {
        return 0;
    }
    pos = ROUND_DOWN(offset, cs);
    end = MIN(ROUND_UP(end, cs), img->size); /* invariant 1 */
    while (pos < end) {
        BlkStatus st;
        uint64_t n;

        ret = blk_block_status(img, pos, MIN(end - pos, chunk), &st);
        if (ret < 0) {
            return ret;
        }
        n = st.pnum;
        if (st.flags & BLK_STATUS_ALLOCATED) { /* invariant 2: as it is */
            uint64_t lo = MAX(pos, offset), hi = MIN(pos + n, offset + q->size);
            if (lo < hi) {
                BlkIOV part;
                iov_slice(&part, q, (size_t)(lo - offset), (size_t)(hi - lo));
                ret = blk_preadv(img, lo, &part, 0);
                iov_destroy(&part);
                if (ret < 0) {
                    return ret;
                }
            }
            pos += n;
            continue;
        }
        if (!bounce) {
            bounce = g_malloc((size_t)chunk); /* invariant 3 */
        }
        ret = blk_pread(img, pos, bounce, (size_t)n);
        if (ret < 0) {
            return ret;
        }
        blk_event(img, BLKEV_COR_WRITE); /* invariant 5 */
        if (buf_is_zero(bounce, (size_t)n)) {
            ret = blk_pwrite_zeroes(img, pos, n, 0);
        } else {
            ret = blk_pwrite(img, pos, bounce, (size_t)n, 0);
        }
        blk_event(img, BLKEV_NONE);
        if (ret < 0) {
            return ret;
        }
        copy_overlap(q, offset, bounce, pos, n);
        pos += n;
    }
    return 0;
}
