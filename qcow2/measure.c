/*
 * qcow2/measure.c: qemu-img measure -O qcow2 -- the file size a new qcow2
 * image needs for a virtual size or to hold a given source, and what a
 * qcow2 source's persistent bitmaps take in a copy.
 *
 * Owns: the size rules below (QEMU 7.2's qcow2_measure, checked against
 * qemu-img on the same inputs in iotests/070).
 *
 * Invariants (cited as "measure.c invariant N"):
 *  1. fully-allocated = a header cluster + L2 tables for every cluster of
 *     the virtual size (rounded up to whole tables) + the L1 table (whole
 *     clusters) + the refcount blocks and table counting all of that and
 *     the data (qcow2_refblocks_for, exact) + the data clusters.  The
 *     virtual size is rounded up to the cluster size first.
 *  2. required = fully-allocated - the virtual size + the source's data
 *     clusters: those with data that does not read as zeros anywhere in its
 *     chain, counted in target clusters; all of them with a backing file
 *     (the target's backing file may share nothing) or with preallocation
 *     falloc or full; none without a source.  Metadata is counted as for a
 *     fully allocated image, which overestimates, as qemu-img does.
 *  3. bitmaps (only when the target is v3 and the source can have
 *     persistent bitmaps, i.e. it is a v3 qcow2): for each bitmap of the
 *     source, its bitmap data in whole clusters, assumed all allocated, and
 *     its table in whole clusters; plus the directory in whole clusters.
 *  4. A virtual size whose L1 table would pass 32 MiB is refused with
 *     qemu-img's "The image size is too large (try using a larger cluster
 *     size)" (for the size given; a source's size is not checked, as in
 *     qemu-img).
 */
#include "qcow2/create.h"

#include <errno.h>
#include <string.h>

/* Invariant 1. */
static uint64_t prealloc_size(uint64_t size, uint32_t cluster_bits,
                              uint32_t refcount_order, bool extended_l2)
{
    const uint64_t cs = 1ull << cluster_bits;
    const uint64_t l2e = extended_l2 ? 16 : 8;
    uint64_t meta = cs, aligned = ROUND_UP(size, cs), nl2e, nl1e, blocks, table;

    nl2e = ROUND_UP(aligned / cs, cs / l2e);
    meta += nl2e * l2e;
    nl1e = ROUND_UP(nl2e * l2e / cs, cs / 8);
    meta += nl1e * 8;
    blocks = qcow2_refblocks_for((meta + aligned) / cs, cluster_bits, refcount_order,
                                 false, &table);
    return meta + (blocks + table) * cs + aligned;
}

int qcow2_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                  BlkMeasure *out)
{
    CreateParams p;
    uint64_t vsize, required = 0, cs;
    int ret = create_parse_measure_params(opts, &p);

    if (ret < 0) {
        return ret;
    }
    cs = p.cluster_size;
    if (p.size > UINT64_MAX - cs) {
        return blk_error(EFBIG, "The image size is too large (try using a larger "
                                "cluster size)");
    }
    vsize = ROUND_UP(p.size, cs);
    /* invariant 4 */
    if (DIV_ROUND_UP(vsize / cs, cs / (p.extended_l2 ? 16 : 8)) * 8 >
        QCOW2_MAX_L1_BYTES) {
        return blk_error(EFBIG, "The image size is too large (try using a larger "
                                "cluster size)");
    }
    if (src) {
        vsize = ROUND_UP(src->size, cs);
        if (p.backing_file) {
            required = vsize; /* invariant 2 */
        } else if ((ret = src->data_bytes(src->opaque, cs, &required)) < 0) {
            return ret;
        }
    }
    if (p.prealloc == BLK_PREALLOC_FULL || p.prealloc == BLK_PREALLOC_FALLOC) {
        required = vsize;
    }
    memset(out, 0, sizeof(*out));
    out->fully_allocated =
        prealloc_size(vsize, p.cluster_bits, p.refcount_order, p.extended_l2) +
        ROUND_UP(p.luks_area, cs); /* the LUKS header area, whole clusters */
    out->required = out->fully_allocated - vsize + required;
    if (src && p.version >= 3) { /* invariant 3 */
        ret = src->bitmaps_bytes(src->opaque, cs, &out->bitmaps);
        if (ret == 0) {
            out->has_bitmaps = true;
        } else if (ret != -ENOTSUP) {
            return ret;
        }
    }
    return 0;
}
