/*
 * api/copy-mirror.c: the plan of a commit (QimgCopyOptions.mirror_writes)
 * -- which ranges of the top are written into the base, and how, as
 * QEMU's commit job (a mirror job) writes them, so that the base ends up
 * with the allocation qemu-img commit gives it.
 *
 * Invariants (cited as "copy-mirror.c invariant N"):
 *  1. The work goes in chunks of the granularity G: the target's cluster
 *     size within [4 KiB, 64 KiB] (64 KiB without one), aligned to G.  A
 *     chunk is dirty when any of it is allocated in the layers above the
 *     base (copy_plan_layers_status; past the end of a layer between them
 *     counts, as zeros); clean chunks are not touched.
 *  2. In a run of dirty chunks the status of the whole chain (the top's
 *     view) at the run's next offset decides: a stretch without data that
 *     covers whole chunks, aligned to the target's clusters, is written as
 *     zeroes (may unmap); anything else is copied as data in whole chunks
 *     (so a chunk that is only partly defined above the base is rewritten
 *     whole, with the base's own bytes for the rest, as QEMU does).
 *  3. Reading through the chain while the base is written beside it (the
 *     commit's second handle) is safe: a range is read before it is
 *     written and never after, and the base's read-only node keeps, for
 *     ranges not yet written, what the base held at open.
 */
#include "api/copy-plan.h"

#include <inttypes.h>

void copy_plan_mirror_init(CopyPlan *p, QimgImage *dst)
{
    BlkInfo di = {0};

    if (dst->node->drv->get_info && dst->node->drv->get_info(dst->node, &di) == 0) {
        p->dst_cluster = di.cluster_size;
    }
    blk_info_clear(&di);
    p->granularity = p->dst_cluster ? MIN(MAX(p->dst_cluster, 4096u), 65536u) : 65536;
    p->dst_cluster = MAX(p->dst_cluster, 1u);
}

/* Allocation above the base at offset (invariant 1). */
static gboolean above_base(CopyPlan *p, uint64_t offset, QimgExtent *e, GError **error)
{
    g_autoptr(GError) err = NULL;
    gboolean ok = p->top_layers > 1
                      ? copy_plan_layers_status(p, offset, p->size - offset, e, &err)
                      : api_block_status(p->src, true, offset, p->size - offset, e, &err);

    if (!ok) {
        g_set_error(error, QIMG_ERROR, err->code,
                    "error while reading block status at offset %" PRIu64 ": %s", offset,
                    err->message);
        return FALSE;
    }
    if (e->length == 0) {
        g_set_error(error, QIMG_ERROR, EIO,
                    "error while reading block status at offset %" PRIu64, offset);
        return FALSE;
    }
    return TRUE;
}

/* Where the dirty run starting at the dirty chunk at offset ends: the
 * first chunk after it with nothing allocated above the base. */
static gboolean dirty_end(CopyPlan *p, uint64_t offset, uint64_t *end, GError **error)
{
    const uint64_t g = p->granularity;
    uint64_t pos = offset;

    while (pos < p->size && pos - offset < (64u << 20)) {
        QimgExtent e;
        if (!above_base(p, pos, &e, error)) {
            return FALSE;
        }
        if (!(e.flags & QIMG_STATUS_ALLOCATED)) {
            uint64_t first = ROUND_UP(pos, g);
            if (first > offset && first + g <= pos + e.length) {
                *end = first;
                return TRUE;
            }
            if (pos + e.length >= p->size) {
                break;
            }
        }
        pos += e.length;
    }
    *end = MIN(ROUND_UP(pos, g), p->size);
    return TRUE;
}

gboolean copy_plan_mirror_next(CopyPlan *p, CopyChunk *c, GError **error)
{
    const uint64_t g = p->granularity;
    uint64_t off = p->pos, end, io;
    g_autoptr(GError) err = NULL;
    QimgExtent e;

    /* invariant 1: a clean stretch of whole chunks is left alone */
    if (!above_base(p, off, &e, error)) {
        return FALSE;
    }
    if (!(e.flags & QIMG_STATUS_ALLOCATED)) {
        uint64_t clean = MIN(ROUND_DOWN(off + e.length, g), p->size);
        if (off + e.length >= p->size) {
            clean = p->size;
        }
        if (clean > off) {
            *c = (CopyChunk){.offset = off, .len = clean - off, .kind = COPY_BACKING};
            p->pos = clean;
            return TRUE;
        }
    }
    /* invariant 2 */
    if (!dirty_end(p, off, &end, error)) {
        return FALSE;
    }
    if (!api_block_status(p->src, false, off, end - off, &e, &err)) {
        g_set_error(error, QIMG_ERROR, err->code,
                    "error while reading block status at offset %" PRIu64 ": %s", off,
                    err->message);
        return FALSE;
    }
    io = MIN(e.length, end - off);
    if (!(e.flags & QIMG_STATUS_DATA) && io >= g) {
        io = ROUND_DOWN(io, g);
        if (off % p->dst_cluster == 0 &&
            ((off + io) % p->dst_cluster == 0 || off + io == p->size)) {
            *c = (CopyChunk){.offset = off, .len = io, .kind = COPY_ZERO};
            p->pos = off + io;
            return TRUE;
        }
    }
    io = MAX(ROUND_DOWN(io, g), g);
    io = MIN(MIN(io, (uint64_t)COPY_BUF_SIZE), end - off);
    *c = (CopyChunk){.offset = off, .len = io, .kind = COPY_DATA};
    p->pos = off + io;
    return TRUE;
}
