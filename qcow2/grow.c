/*
 * qcow2/grow.c: growing the image file ahead of the allocator.
 *
 * Owns: s->phys_end (the file's length as this handle last made or saw
 * it), s->fresh_end, s->grow_busy and s->grow_waiters, growing the file
 * in large preallocated steps ahead of the allocations, outside the
 * metadata lock, knowing which fresh clusters read as zeros without being
 * written, and giving the unused tail back at close.
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
 *     resize) by steps of file_size / 4 within [1 MiB, 256 MiB], ahead of
 *     the clusters guest writes are given (write-plan.c qcow2_plan_chunk_locked;
 *     invariant 5).  Few steps, since each one drains the file's writes:
 *     ext4's fallocate waits for the O_DIRECT writes in flight.  (Our
 *     resize takes the file lock only shared for it, file.c invariant 6;
 *     exclusively it also waited until the reaper took every ring write's
 *     completion: the 30 steps of issue 30's alloc-d32 bench took 37-61
 *     ms, median 49, of a 0.53-0.76 s run, now 4-15 ms, median 6.)  Measured
 *     (issue 30, allocating 4 KiB writes at depth 32, 3.75 GiB of fresh
 *     clusters): with file_size / 8 within [1 MiB, 64 MiB], 94 steps took
 *     0.65 s of a 4.7 s run on the submitting thread, 0.09 s of it in
 *     fallocate, the rest waiting for the drain.  The clusters of a guest write lie
 * inside phys_end before their data is written: a chunk whose clusters lie past it waits
 * for the growth in flight, or runs one, before its data write (qcow2_grow_cover).  So
 * the file covers every cluster an L2 entry may reference, and the resize's bump of the
 * node's write generation comes before the chunk's data generation: the flush that
 * write.c invariant 1 puts before the L2 entry makes the length durable too (DESIGN rule
 * 1: no reference past the end of the file).  Growth that fails is given up for the
 * handle (the zeroing path of write.c invariant 11 extends the file, as before).
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
 *     qcow2_grow_stop_locked first) or closes the handle waits for the
 *     growth in flight, then cuts the file back to the length it would
 *     have without growth -- the largest of its length at open, the end of
 *     the furthest write the handle asked of it (blk_wr_highest: metadata
 *     with its exact length, as QEMU leaves a bitmap directory or a
 *     compressed cluster at the end) and the end of the furthest fresh
 *     guest clusters (s->fresh_end: their unwritten parts read as zeros
 *     by invariant 2, as QEMU's zeroed COW areas) -- so nothing referenced
 *     is cut, and growth stops for the handle.  Nothing depends on the cut
 *     being durable: a power loss keeps zeros past the last cluster, which
 *     qemu-img check accepts.
 *  5. Grow ahead, out of the lock: fallocate takes 0.01 ms on an idle file
 *     but up to ~0.5 s while the kernel writes back (issue 30: a vmstate
 *     save waited 0.3-0.9 s behind it under the lock).  When a chunk's
 *     fresh clusters end less than one step before phys_end and no growth
 *     runs (s->grow_busy), the chunk reserves the next one under the lock
 *     -- bookkeeping only: target, busy -- and runs it with the lock
 *     dropped: after its own data write when its clusters are covered
 *     already, before it otherwise.  Ahead of need only in a request's
 *     last chunk: its allocation turn (write.c invariant 12) has passed
 *     then, so no other request's plan waits for the growth.  One growth
 *     runs at a time; its end (phys_end raised, or growth given up) wakes
 *     the waiters of invariant 1.  The preallocating resize never shrinks
 *     the file (it fails when the file is longer); the sparse fallback,
 *     which could cut a write that extended the file, runs under the lock
 *     to at least file_size: then only clusters below file_size were
 *     written (metadata under the lock, guest data of covered chunks) and
 *     nothing is cut.
 */
#include "qcow2/grow.h"

#include <errno.h>

#define GROW_MIN (UINT64_C(1) << 20)
#define GROW_MAX (UINT64_C(256) << 20)

void qcow2_grow_init(Qcow2State *s, uint64_t len)
{
    s->phys_end = len;
    s->open_end = len;
    s->grow_on = s->writable && !qcow2_has_data_file(s) && !s->img->file->is_block_device;
}

static uint64_t grow_step_locked(const Qcow2State *s)
{
    return MIN(MAX(s->file_size / 4, GROW_MIN), GROW_MAX); /* invariant 1 */
}

/* Invariant 5: reserve the growth past end.  Lock held. */
static uint64_t grow_reserve_locked(Qcow2State *s, uint64_t end)
{
    s->grow_busy = true;
    return ROUND_UP(MAX(end, s->phys_end) + grow_step_locked(s), GROW_MIN);
}

/* WaitersFn (aio/waiters.c), as ready and as match: no growth runs
 * (invariant 5).  opaque: the Qcow2State. */
static bool grow_idle(const void *what, const void *opaque)
{
    (void)what;
    return !((const Qcow2State *)opaque)->grow_busy;
}

/* Invariant 5: wait until no growth runs.  Lock held. */
static void grow_wait_idle_locked(Qcow2State *s)
{
    waiters_wait(&s->grow_waiters, &s->lock, NULL, grow_idle, s);
}

/* Invariant 5: run the growth to target reserved by this thread.  Lock not
 * held on entry, held on return. */
static void grow_run(Qcow2State *s, uint64_t target)
{
    bool had_error = blk_error_mark();
    int ret = blk_truncate(s->img->file, target, false, BLK_PREALLOC_FALLOC, false);

    qcow2_lock(s);
    if (ret < 0) {
        target = MAX(target, s->file_size); /* invariant 5: cuts nothing */
        ret = blk_truncate(s->img->file, target, false, BLK_PREALLOC_OFF, false);
    }
    blk_error_unwind(had_error);
    if (ret < 0) {
        s->grow_on = false; /* invariant 1: the zeroing path extends the file */
    } else {
        s->phys_end = MAX(s->phys_end, target);
    }
    s->grow_busy = false;
    waiters_wake(&s->grow_waiters, grow_idle, s); /* invariant 5 */
}

static bool grown_zero_locked(const Qcow2State *s, const Qcow2GrowPlan *g)
{
    return s->grow_on && g->host >= g->before && g->end <= s->phys_end; /* inv. 2 */
}

void qcow2_grow_plan_locked(Qcow2State *s, uint64_t host, uint64_t len, uint64_t before,
                            bool last, Qcow2GrowPlan *g)
{
    *g = (Qcow2GrowPlan){.host = host, .end = host + len, .before = before};
    s->fresh_end = MAX(s->fresh_end, g->end); /* invariant 4 */
    if (!s->grow_on) {
        return;
    }
    g->zero = grown_zero_locked(s, g);
    g->cover = g->end > s->phys_end; /* invariant 1 */
    if (!s->grow_busy &&
        (g->cover || (last && g->end + grow_step_locked(s) > s->phys_end))) {
        g->target = grow_reserve_locked(s, g->end); /* invariant 5 */
    }
}

void qcow2_grow_cover(Qcow2State *s, Qcow2GrowPlan *g)
{
    if (g->target) {
        grow_run(s, g->target); /* ours covers the chunk: before its data */
        g->target = 0;
    } else {
        qcow2_lock(s);
    }
    while (s->grow_on && g->end > s->phys_end) { /* invariant 1 */
        if (s->grow_busy) {
            grow_wait_idle_locked(s);
            continue;
        }
        uint64_t target = grow_reserve_locked(s, g->end);
        qcow2_unlock(s);
        grow_run(s, target);
    }
    g->zero = grown_zero_locked(s, g);
    qcow2_unlock(s);
}

void qcow2_grow_finish(Qcow2State *s, Qcow2GrowPlan *g)
{
    if (g->target) {
        grow_run(s, g->target); /* invariant 5: ahead, after the data write */
        g->target = 0;
        qcow2_unlock(s);
    }
}

void qcow2_grow_stop_locked(Qcow2State *s)
{
    uint64_t keep;

    grow_wait_idle_locked(s); /* invariant 4 */
    keep = MAX(MAX(s->open_end, s->fresh_end), blk_wr_highest(s->img->file));
    if (s->phys_end > keep) {
        bool had_error = blk_error_mark();
        if (blk_truncate(s->img->file, keep, false, BLK_PREALLOC_OFF, true) == 0) {
            s->phys_end = keep; /* invariant 4 */
        }
        blk_error_unwind(had_error);
    }
    s->grow_on = false;
}
