/*
 * api/copy-offload.c: copy offloading for the copy pipeline (qimg/copy.h
 * rule 7, qemu-img convert -C): a data chunk moved from the source's files
 * into the target by the kernel (BlkDriver.copy_in: copy_file_range),
 * never through the pipeline's buffers.
 *
 * Owns: which sources can be copied this way, where a data chunk's bytes
 * lie in a source's files, and handing them to the target's copy_in.
 *
 * Facts (cited as "copy-offload.c fact N"):
 *  1. A source takes part when every layer of its chain has a format that
 *     keeps the guest's bytes as they are in its file (a driver with
 *     copy_in: raw, qcow2 -- the formats QEMU's copy_range goes through)
 *     and none is encrypted.
 *  2. A byte is copied from where the first layer that defines it maps it
 *     (block status OFFSET_VALID), neither compressed nor zero (a zero
 *     cluster's host bytes are not its contents).  Anything else -- a
 *     layer that does not map it, a run past a layer's end -- cannot be
 *     copied.
 *  3. copy.c moves a chunk in pieces, each a run copy_offload_map maps in
 *     one source (copy.c invariant 8).
 */
#include "api/copy-plan.h"

#include <errno.h>

/* Fact 1 for one chain. */
static bool chain_copyable(QimgImage *img)
{
    for (; img; img = img->backing) {
        BlkNode *node = img->node;
        BlkInfo info = {0};
        bool encrypted = false;

        if (!node->drv->copy_in || node->drv->is_protocol) {
            return false;
        }
        if (node->drv->get_info && node->drv->get_info(node, &info) == 0) {
            encrypted = info.encrypted;
        }
        blk_info_clear(&info);
        if (encrypted) {
            return false;
        }
    }
    return true;
}

bool *copy_offload_sources(QimgImage *const *srcs, unsigned n_srcs)
{
    bool *ok = g_new0(bool, n_srcs);

    for (unsigned i = 0; i < n_srcs; i++) {
        ok[i] = chain_copyable(srcs[i]);
    }
    return ok;
}

/* Fact 2: where [offset, +bytes) of the source starts in a file, and for
 * how many bytes (*pnum); -ENOTSUP where it cannot be copied. */
static int map_source(QimgImage *img, uint64_t offset, uint64_t bytes, BlkNode **file,
                      uint64_t *host, uint64_t *pnum)
{
    for (; img; img = img->backing) {
        BlkStatus st;
        int ret;

        if (offset >= img->node->size) {
            return -ENOTSUP; /* reads as zeros: nothing to copy from */
        }
        ret = blk_block_status(img->node, offset, bytes, &st);
        if (ret < 0) {
            return ret;
        }
        if (st.flags & BLK_STATUS_ALLOCATED) {
            if (!(st.flags & BLK_STATUS_OFFSET_VALID) || !st.file ||
                (st.flags & (BLK_STATUS_ZERO | BLK_STATUS_COMPRESSED))) {
                return -ENOTSUP;
            }
            *file = st.file;
            *host = st.map;
            *pnum = st.pnum;
            return 0;
        }
        bytes = st.pnum;
    }
    return -ENOTSUP;
}

int copy_offload_map(const CopyPlan *p, const bool *src_ok, uint64_t offset, uint64_t len,
                     BlkNode **file, uint64_t *host, uint64_t *pnum)
{
    uint64_t local, avail;
    unsigned i = copy_plan_source_at(p, offset, &local, &avail);

    if (!src_ok[i]) {
        return -ENOTSUP; /* fact 1 */
    }
    return map_source(p->srcs[i], local, MIN(len, avail), file, host, pnum);
}
