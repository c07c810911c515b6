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
        prealloc_size(vsize, p.cluster_bits, p.refcount_order, p.extended_l2);
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

static int bitmap_read(void *opaque, uint64_t offset, void *buf, uint64_t len)
{
    return blk_pread(opaque, offset, buf, len);
}

/* Invariant 3, the source side. */
int qcow2_bitmaps_size(BlkNode *img, uint64_t cluster_size, uint64_t *bytes)
{
    Qcow2State *s = img->opaque;
    const Qcow2BitmapSource src = {.read = bitmap_read, .opaque = img->file};
    Qcow2BitmapImage bimg;
    Qcow2BitmapDir dir = {0};
    uint64_t total = 0, dir_size = 0;
    int ret = 0;

    if (s->qcow_version < 3) {
        return -ENOTSUP;
    }
    *bytes = 0;
    qcow2_lock(s);
    bimg = (Qcow2BitmapImage){.cluster_bits = s->cluster_bits,
                              .disk_size = img->size,
                              .file_size = s->file_size};
    if (s->ext.has_bitmaps && (s->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        ret =
            qcow2_bitmap_dir_read(&src, &s->ext.bitmaps, &bimg, QCOW2_BITMAP_OPEN, &dir);
    }
    qcow2_unlock(s);
    if (ret < 0) {
        return ret;
    }
    for (uint32_t i = 0; i < dir.nb; i++) {
        const Qcow2Bitmap *bm = &dir.bms[i];
        uint64_t gran = 1ull << bm->granularity_bits;
        uint64_t bits = DIV_ROUND_UP(img->size, gran);
        uint64_t clusters = DIV_ROUND_UP(DIV_ROUND_UP(bits, 8), cluster_size);

        total += clusters * cluster_size + ROUND_UP(clusters * 8, cluster_size);
        dir_size += ROUND_UP(24 + (uint64_t)bm->name_size, 8);
    }
    qcow2_bitmap_dir_free(&dir);
    *bytes = total + ROUND_UP(dir_size, cluster_size);
    return 0;
}
