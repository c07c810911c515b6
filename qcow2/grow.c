/*
 * qcow2/grow.c: growing the image file ahead of the allocator.
 *
 * Owns: s->phys_end (the file's length as this handle last made or saw
 * it) and s->fresh_end, growing the file in large preallocated steps when
 * an allocation passes it, knowing which fresh clusters read as zeros
 * without being written, and giving the unused tail back at close.
 *
 * Why: every new cluster lies past the end of the file.  Zeroing the rest
 * of it there (write.c invariant 11) was one fallocate per cluster under
 * the file node's exclusive lock (file.c invariant 6: it extends the
 * file), and the data write into it an extending write, which ext4 and XFS
 * serialise on the inode.  Grown ahead with fallocate, the file holds
 * unwritten extents that O_DIRECT writes fill concurrently, and a cluster
 * that nothing ever used reads as zeros already.
 *
 * Invariants (cited as "grow.c invariant N"):
 *  1. Growth is the data node's resize with preallocation (falloc: the
 *     new bytes read as zeros, blocks reserved; where that fails, a sparse
 *     resize), to at least the end of the clusters a guest write was just
 *     given (write.c plan_chunk_locked), rounded up by a step of file_size
 *     / 8 within [1 MiB, 64 MiB].  It runs under the metadata lock before
 *     the data is written, so the file covers every cluster an L2 entry
 *     may reference; the resize bumps the node's write generation, so the
 *     flush that write.c invariant 1 puts before the L2 entry makes the
 *     length durable too (DESIGN rule 1: no reference past the end of the
 *     file).  Growth that fails is given up for the handle (the zeroing
 *     path of write.c invariant 11 extends the file, as before).
 *  2. A fresh cluster reads as zeros without a write when it lies at or
 *     past file_size as it was before the allocation that handed it out
 *     (every earlier allocation of the handle ends below that, and so does
 *     the file as it was at open) and inside phys_end (grown as zeros).
 *     Clusters below are zeroed as write.c invariant 11 says: a freed
 *     cluster holds old bytes.
 *  3. Only a writable handle without an external data file (its data
 *     clusters live there) on a regular file, or a test node over one
 *     (which passes the resize down and logs it), grows its file.
 *  4. Anything else that resizes the file (resize, preallocation, repair:
 *     qcow2_grow_stop_locked first) or closes the handle cuts it back to
 *     the length it would have without growth -- the largest of its length
 *     at open, the end of the furthest write the handle asked of it
 *     (blk_wr_highest: metadata and compressed clusters with their exact
 *     length, where QEMU leaves them; not file_size, which rounds them up
 *     to their cluster) and the end of the furthest fresh guest clusters
 *     (s->fresh_end: their unwritten parts read as zeros by invariant 2,
 *     as QEMU's zeroed COW areas) -- so nothing referenced is cut, and
 *     growth stops for the handle.  Nothing depends on the cut being
 *     durable: a power loss keeps zeros past the last cluster, which
 *     qemu-img check accepts.
 */
#include "qcow2/qcow2.h"

#include <errno.h>

#define GROW_MIN (UINT64_C(1) << 20)
#define GROW_MAX (UINT64_C(64) << 20)

void qcow2_grow_init(Qcow2State *s, uint64_t len)
{
    s->phys_end = len;
    s->open_end = len;
    s->grow_on = s->writable && !qcow2_has_data_file(s) && !s->img->file->is_block_device;
}

/* Invariant 1.  Lock held. */
void qcow2_grow_locked(Qcow2State *s, uint64_t end)
{
    uint64_t step, target;
    int ret;

    s->fresh_end = MAX(s->fresh_end, end); /* invariant 4 */
    if (!s->grow_on || end <= s->phys_end) {
        return;
    }
    step = MIN(MAX(s->file_size / 8, GROW_MIN), GROW_MAX);
    target = ROUND_UP(MAX(end, s->phys_end + step), GROW_MIN);
    bool had_error = blk_error_mark();
    ret = blk_truncate(s->img->file, target, false, BLK_PREALLOC_FALLOC, false);
    if (ret < 0) {
        ret = blk_truncate(s->img->file, target, false, BLK_PREALLOC_OFF, false);
    }
    blk_error_unwind(had_error);
    if (ret < 0) {
        s->grow_on = false; /* invariant 1: the zeroing path extends the file */
        return;
    }
    s->phys_end = target;
}

bool qcow2_grown_zero_locked(const Qcow2State *s, uint64_t host, uint64_t len,
                             uint64_t before)
{
    return s->grow_on && host >= before && host + len <= s->phys_end; /* invariant 2 */
}

void qcow2_grow_stop_locked(Qcow2State *s)
{
    uint64_t keep = MAX(MAX(s->open_end, s->fresh_end), blk_wr_highest(s->img->file));

    if (s->phys_end > keep) {
        bool had_error = blk_error_mark();
        if (blk_truncate(s->img->file, keep, false, BLK_PREALLOC_OFF, true) == 0) {
            s->phys_end = keep; /* invariant 4 */
        }
        blk_error_unwind(had_error);
    }
    s->grow_on = false;
}
