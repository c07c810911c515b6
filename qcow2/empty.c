/*
 * qcow2/empty.c: emptying an image, qemu-img commit's last step (QEMU's
 * qcow2_make_empty), so the image reads through its backing file again.
 *
 * Owns: resetting an image to its bare structures (header, refcount table,
 * one refcount block, a zeroed L1 table) and the order of that reset.
 *
 * Invariants (cited as "empty.c invariant N"):
 *  1. An image is reset completely, as QEMU resets it, when nothing else
 *     lives in its file: v3 (the dirty bit exists), no snapshots, no
 *     bitmaps, no LUKS header, no external data file, and the header,
 *     refcount table, one refcount block and the L1 table fit in what one
 *     refcount block counts.  Any other image is emptied by a full discard
 *     of every cluster (unallocated, not zero: zero.c invariant 2).
 *  2. The reset runs with the whole guest range registered in flight
 *     (write.c invariant 6) and the fast map's entries forgotten, so no
 *     request uses a mapping it removes; the caches are written back and
 *     flushed (meta.c invariant 11), then forgotten.
 *  3. Crash order (QEMU's): the dirty bit is set and synced first; from
 *     then on refcounts may be anything, and an open of the image
 *     rebuilds them (repair.c), so every state a crash leaves is a valid
 *     image whose active clusters read as before or are unallocated.
 *     Then: the L1 table's clusters zeroed (l1_update); clusters 1 to
 *     2 + L1 clusters zeroed (empty_image_prepare); one synced header write
 *     of the L1 offset (cluster 3 + ...: 3 clusters in), the refcount
 *     table offset (cluster 1) and its size (one cluster) (l1_update,
 *     reftable_update); the refcount table's first entry, synced, naming
 *     cluster 2 as its block (refblock_alloc); the structures' clusters
 *     counted through the allocator; the caches written and flushed, and
 *     the dirty bit cleared (qcow2_mark_clean_locked); the file cut after
 *     the L1 table.  These writes replace metadata on purpose, so they are
 *     not overlap-checked (meta.c invariant 1's exception).
 *  4. A failed step after the dirty bit is sticky (meta.c invariant 9):
 *     memory no longer matches the file, so nothing more is written, and
 *     the next open repairs the image (QEMU ejects the node).
 */
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

/* Invariant 1. */
static bool can_reset(const Qcow2State *s, uint64_t l1_clusters)
{
    return s->qcow_version >= 3 && s->nb_snapshots == 0 && !s->ext.has_bitmaps &&
           s->header.crypt_method != QCOW2_CRYPT_LUKS && !qcow2_has_data_file(s) &&
           3 + l1_clusters <= (UINT64_C(1) << s->refcount_block_bits);
}

/* Invariant 3, from the dirty bit on (invariant 4 on failure). */
static int reset_locked(Qcow2State *s, uint64_t l1_clusters)
{
    BlkNode *file = s->img->file;
    uint64_t cs = s->cluster_size, end = (3 + l1_clusters) * cs;
    uint8_t hdr[QCOW2_HDR_NB_SNAPSHOTS - QCOW2_HDR_L1_TABLE_OFFSET], entry[8];
    int64_t first;
    int ret;

    ret = qcow2_update_incompat_locked(s, QCOW2_INCOMPAT_DIRTY, 0);
    if (ret < 0) {
        return ret;
    }
    blk_event(file, BLKEV_L1_UPDATE);
    ret = blk_pwrite_zeroes(file, s->l1_table_offset, l1_clusters * cs, 0);
    if (ret < 0) {
        return qcow2_set_sticky_locked(s, ret);
    }
    memset(s->l1_table, 0, (size_t)s->l1_size * sizeof(uint64_t));

    blk_event(file, BLKEV_EMPTY_IMAGE_PREPARE);
    ret = blk_pwrite_zeroes(file, cs, (2 + l1_clusters) * cs, 0);
    if (ret < 0) {
        return qcow2_set_sticky_locked(s, ret);
    }

    blk_event(file, BLKEV_L1_UPDATE);
    store_be64(hdr, 3 * cs);
    store_be64(hdr + QCOW2_HDR_REFCOUNT_TABLE_OFFSET - QCOW2_HDR_L1_TABLE_OFFSET, cs);
    store_be32(hdr + QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS - QCOW2_HDR_L1_TABLE_OFFSET, 1);
    ret = qcow2_write_header_locked(s, BLKEV_REFTABLE_UPDATE, QCOW2_HDR_L1_TABLE_OFFSET,
                                    hdr, sizeof(hdr));
    if (ret < 0) {
        return ret; /* sticky: the write or its flush */
    }
    s->l1_table_offset = 3 * cs;
    g_free(s->refcount_table);
    s->refcount_table_size = cs / sizeof(uint64_t);
    s->refcount_table = g_new0(uint64_t, s->refcount_table_size);
    s->refcount_table_offset = cs;
    s->refcount_table_used = 0;
    s->header.l1_table_offset = 3 * cs; /* as repair.c keeps them */
    s->header.refcount_table_offset = cs;
    s->header.refcount_table_clusters = 1;

    blk_event(file, BLKEV_REFBLOCK_GET); /* QEMU's refblock_alloc */
    store_be64(entry, 2 * cs);
    ret = blk_pwrite(file, cs, entry, sizeof(entry), 0);
    if (ret == 0) {
        ret = blk_flush(file);
    }
    if (ret < 0) {
        return qcow2_set_sticky_locked(s, ret);
    }
    s->refcount_table[0] = 2 * cs;
    qcow2_reftable_count_used(s);

    /* the header, the refcount table and block, the L1 table: from 0 */
    s->free_cluster_index = 0;
    s->free_byte_offset = 0;
    first = qcow2_alloc_clusters_locked(s, 3 + l1_clusters);
    if (first < 0) {
        return qcow2_set_sticky_locked(s, (int)first);
    }
    if (first != 0) {
        return qcow2_set_sticky_locked(
            s, qcow2_corrupt_locked(s, "First cluster in emptied image is in use"));
    }
    ret = qcow2_mark_clean_locked(s);
    if (ret < 0) {
        return ret;
    }
    s->prealloc_checked = false;
    qcow2_grow_stop_locked(s); /* grow.c invariant 4 */
    ret = blk_truncate(file, end, false, BLK_PREALLOC_OFF, true);
    if (ret < 0) {
        return ret; /* the image is consistent: only its tail stays */
    }
    s->file_size = end;
    qcow2_grow_init(s, end);
    return 0;
}

int qcow2_make_empty(BlkNode *img)
{
    Qcow2State *s = img->opaque;
    uint64_t end = ROUND_UP(img->size, s->cluster_size);
    uint64_t l1_clusters =
        DIV_ROUND_UP((uint64_t)s->l1_size * sizeof(uint64_t), s->cluster_size);
    Qcow2Inflight r;
    int ret;

    qcow2_lock(s);
    ret = qcow2_check_data_writable_locked(s, 0, img->size); /* meta.c inv. 8 */
    if (ret < 0) {
        qcow2_unlock(s);
        return ret;
    }
    qcow2_inflight_begin_locked(s, &r, 0, end, true); /* invariant 2 */
    if (can_reset(s, l1_clusters)) {
        qcow2_fastmap_forget_locked(s->fastmap, 0, end);
        ret = qcow2_flush_all_locked(s);
        if (ret == 0) { /* lazy refcounts: their blocks too (QEMU's cache_empty) */
            ret = qcow2_write_caches_locked(s, true);
        }
        if (ret == 0) {
            ret = qcow2_flush_file(s);
        }
        if (ret == 0) {
            qcow2_cache_empty_locked(s->l2_cache);
            qcow2_cache_empty_locked(s->refcount_cache);
            qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
            ret = reset_locked(s, l1_clusters);
        }
        qcow2_inflight_end_locked(s, &r);
        qcow2_unlock(s);
        return ret;
    }
    qcow2_unlock(s);

    ret = end ? qcow2_discard_registered(s, 0, end, true, QCOW2_DISCARD_SNAPSHOT) : 0;

    qcow2_lock(s);
    qcow2_inflight_end_locked(s, &r);
    ret = qcow2_finish_request_locked(s, ret);
    qcow2_unlock(s);
    return ret < 0 ? ret : qcow2_flush(img);
}
