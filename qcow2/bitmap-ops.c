/*
 * qcow2/bitmap-ops.c: qemu-img bitmap's operations on the persistent
 * bitmaps of an image -- add, remove, clear, enable, disable -- each a
 * crash-safe switch to a new bitmap directory.
 *
 * Owns: building the new directory and the order of the switch.
 *
 * Invariants (cited as "bitmap-ops.c invariant N"):
 *  1. Nothing the current directory references is written: a new
 *     directory (and, for add and clear, a new zeroed bitmap table) goes
 *     to newly allocated clusters; everything is made durable
 *     (qcow2_header_rewrite_locked flushes first), then one synced header
 *     write switches the bitmaps extension to it (backing.c invariants
 *     1-3).  A power loss before that leaves the old directory in force
 *     (and leaked clusters at worst), after it the new one.
 *  2. Only after the switch are the clusters the old directory alone
 *     referenced freed: the old directory, and for remove and clear the
 *     old table and the bitmap data clusters it points to.
 *  3. Entries other than the one operated on are re-encoded unchanged
 *     (the codec's invariant 7: extra data, reserved flags kept).  The
 *     directory is decoded strictly (QCOW2_BITMAP_OPEN): a damaged one is
 *     refused, never rewritten.  A bitmap in use can only be removed
 *     (QEMU refuses the rest: "Bitmap 'NAME' is inconsistent ...").
 *  4. The bitmaps an open image maintains are stored first and retired
 *     after the switch (bitmap-store.c invariant 4), so the operation sees
 *     their bits and the next guest write loads what it wrote -- a bitmap
 *     added is maintained from then on.  Messages are qemu-img's ("Bitmap already exists:
 * NAME", "Dirty bitmap 'NAME' not found", "Granularity must be power of 2 and at least
 * 512", v2: "Cannot store dirty bitmaps in qcow2 v2 files").
 *  5. Placement is qemu-img's, which stores every bitmap it loaded when it
 *     closes the image: each consistent dirty-tracking bitmap without
 *     extra data, in directory order (an added one last), gets new data
 *     clusters (its non-zero ones, in order; none for a cleared or added
 *     one) and then a new table; then the directory; tables and the
 *     directory are written with their own length, not padded to the
 *     cluster (so the file may end inside its last cluster, as QEMU's).
 *     After the switch the old tables and their data are freed.  remove
 *     is QEMU's two steps: a switch to the directory without the bitmap
 *     (whose clusters are then freed), then the store of the rest.
 */
#include "qcow2/header-edit.h"
#include "qcow2/bitmap.h"
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <string.h>

/* Invariant 2: what bm's table references, and the table itself. */
void qcow2_bitmap_free_data_locked(Qcow2State *s, const Qcow2Bitmap *bm, uint32_t index)
{
    const Qcow2BitmapSource src = qcow2_bitmap_source(s);
    const Qcow2BitmapImage bimg = qcow2_bitmap_image(s);
    g_autofree uint64_t *t = NULL;

    if (qcow2_bitmap_table_read(&src, bm, index, &bimg, QCOW2_BITMAP_OPEN, &t) == 0) {
        for (uint32_t i = 0; i < bm->table_size; i++) {
            uint64_t off = t[i] & QCOW2_BTE_OFFSET_MASK;
            if (off) { /* QEMU gives bitmap data back to the file always */
                qcow2_free_clusters_as_locked(s, off, s->cluster_size,
                                              QCOW2_DISCARD_ALWAYS);
            }
        }
    } else {
        blk_error_clear(); /* unreadable: its clusters leak, nothing breaks */
    }
    qcow2_free_clusters_locked(s, bm->table_offset,
                               ROUND_UP((uint64_t)bm->table_size * 8, s->cluster_size));
}

static int find(const Qcow2BitmapDir *dir, const char *name)
{
    for (uint32_t i = 0; i < dir->nb; i++) {
        if (strcmp(dir->bms[i].name, name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* Invariants 1, 2: write dir (nb entries) and switch to it. */
int qcow2_bitmap_switch_dir_locked(Qcow2State *s, Qcow2BitmapDir *dir)
{
    Qcow2HeaderEdit e = {.set_bitmaps = true};
    const Qcow2BitmapsExt old = s->ext.bitmaps;
    const bool had = s->ext.has_bitmaps;
    g_autofree uint8_t *buf = NULL;
    uint64_t size = 0, alloc = 0;
    int64_t off = 0;
    int ret;

    if (dir->nb > 0) {
        if (!qcow2_bitmap_dir_size(dir->bms, dir->nb, &size)) {
            return blk_error(EFBIG, "The bitmap directory would exceed 64 MiB");
        }
        alloc = ROUND_UP(size, s->cluster_size);
        buf = g_malloc0(size);
        qcow2_bitmap_dir_encode(dir->bms, dir->nb, buf);
        off = qcow2_alloc_clusters_locked(s, alloc >> s->cluster_bits);
        if (off <= 0) {
            return off < 0 ? (int)off : -EIO;
        }
        ret = qcow2_write_metadata_locked(s, BLKEV_HEADER_UPDATE, 0, (uint64_t)off, buf,
                                          size, false); /* invariant 5 */
        if (ret < 0) {
            qcow2_free_clusters_locked(s, (uint64_t)off, alloc);
            return ret;
        }
        e.bitmaps = (Qcow2BitmapsExt){.nb_bitmaps = dir->nb,
                                      .directory_size = size,
                                      .directory_offset = (uint64_t)off};
    }
    ret = qcow2_header_rewrite_locked(s, &e);
    if (ret < 0) {
        if (off > 0) {
            qcow2_free_clusters_locked(s, (uint64_t)off, alloc); /* never referenced */
        }
        return ret;
    }
    if (had && old.directory_offset) {
        qcow2_free_clusters_locked(s, old.directory_offset,
                                   ROUND_UP(old.directory_size, s->cluster_size));
    }
    return 0;
}

/* Invariant 5: every bitmap qemu-img would have loaded gets new clusters
 * (the one at index zeroed: -1 none), then the switch to dir; what the old
 * directory alone referenced is freed after it. */
static int store_all_locked(Qcow2State *s, Qcow2BitmapDir *dir, int zeroed)
{
    g_autoptr(GArray) old = g_array_new(FALSE, TRUE, sizeof(Qcow2Bitmap));
    g_autoptr(GArray) fresh = g_array_new(FALSE, TRUE, sizeof(Qcow2Bitmap));
    int ret = 0;

    for (uint32_t i = 0; i < dir->nb && ret == 0; i++) {
        Qcow2Bitmap *bm = &dir->bms[i];
        if ((bm->flags & QCOW2_BITMAP_IN_USE) || bm->extra_data_size ||
            bm->type != QCOW2_BITMAP_TYPE_DIRTY_TRACKING) {
            continue; /* QEMU leaves an inconsistent bitmap as it is */
        }
        ret = qcow2_bitmap_restore_locked(s, bm, i, (int)i == zeroed, old, fresh);
    }
    if (ret == 0 && fresh->len == 0) {
        return 0; /* QEMU writes nothing when it stores no bitmap */
    }
    if (ret == 0) {
        ret = qcow2_bitmap_switch_dir_locked(s, dir); /* invariant 1 */
    }
    qcow2_bitmap_drop_tables_locked(s, ret == 0 ? old : fresh); /* invariant 2 */
    return ret;
}

int qcow2_bitmap_op(BlkNode *img, BlkBitmapOp op, const char *name, uint32_t granularity)
{
    Qcow2State *s = img->opaque;
    Qcow2BitmapDir dir = {0};
    Qcow2Bitmap dropped = {0}, added = {0};
    int i, zeroed = -1, ret;

    if (s->qcow_version < 3) {
        return blk_error(ENOTSUP, "Cannot store dirty bitmaps in qcow2 v2 files");
    }
    qcow2_lock(s);
    ret = qcow2_check_writable_locked(s);
    if (ret == 0) {
        ret = qcow2_bitmaps_store_locked(s, false); /* bitmap-store.c invariant 4 */
    }
    if (ret == 0) {
        ret = qcow2_bitmap_dir_read_locked(s, &dir);
    }
    if (ret < 0) {
        goto out;
    }
    i = find(&dir, name);
    if (op == BLK_BITMAP_ADD) {
        uint64_t g = granularity
                         ? granularity
                         : MIN(MAX(s->cluster_size, (uint64_t)4096), (uint64_t)65536);
        if (i >= 0) {
            ret = blk_error(EEXIST, "Bitmap already exists: %s", name);
            goto out;
        }
        if (g < 512 || (g & (g - 1)) || g > (1ull << 31)) {
            ret = blk_error(EINVAL, "Granularity must be power of 2 and at least 512");
            goto out;
        }
        if (strlen(name) > QCOW2_BITMAP_MAX_NAME_SIZE || !*name) {
            ret = blk_error(EINVAL, "Bitmap name '%s' must be 1..1023 bytes", name);
            goto out;
        }
        if (dir.nb >= QCOW2_MAX_BITMAPS) {
            ret = blk_error(EFBIG, "Too many bitmaps in the image");
            goto out;
        }
        added.granularity_bits = (uint8_t)__builtin_ctzll(g);
        added.table_size = (uint32_t)qcow2_bitmap_table_size_for(
            img->size, added.granularity_bits, s->cluster_bits);
        added.type = QCOW2_BITMAP_TYPE_DIRTY_TRACKING;
        added.flags = QCOW2_BITMAP_AUTO; /* invariant 4; its table: invariant 5 */
        added.name_size = (uint16_t)strlen(name);
        added.name = g_strdup(name);
        dir.bms = g_renew(Qcow2Bitmap, dir.bms, dir.nb + 1);
        dir.bms[dir.nb++] = added;
        added.name = NULL; /* dir owns it */
    } else if (i < 0) {
        ret = blk_error(ENOENT, "Dirty bitmap '%s' not found", name);
        goto out;
    } else if (op != BLK_BITMAP_REMOVE &&
               (ret = qcow2_bitmap_check_consistent(&dir.bms[i])) < 0) {
        goto out; /* invariant 3 */
    } else if (op == BLK_BITMAP_REMOVE) {
        /* invariant 5: QEMU's first step, the directory without it */
        dropped = dir.bms[i];
        memmove(&dir.bms[i], &dir.bms[i + 1],
                (dir.nb - (uint32_t)i - 1) * sizeof(*dir.bms));
        dir.nb--;
        ret = qcow2_bitmap_switch_dir_locked(s, &dir); /* invariant 1 */
        if (ret == 0) {
            qcow2_bitmap_free_data_locked(s, &dropped, (uint32_t)i); /* inv. 2 */
        }
        qcow2_bitmap_clear(&dropped);
        if (ret < 0) {
            goto out;
        }
    } else if (op == BLK_BITMAP_CLEAR) {
        zeroed = i;
    } else if (op == BLK_BITMAP_ENABLE) {
        dir.bms[i].flags |= QCOW2_BITMAP_AUTO;
    } else {
        dir.bms[i].flags &= ~(uint32_t)QCOW2_BITMAP_AUTO;
    }
    if (op != BLK_BITMAP_REMOVE || dir.nb > 0) {
        ret = store_all_locked(s, &dir, zeroed); /* invariants 1, 2, 5 */
    }
    if (ret == 0) {
        qcow2_bitmaps_retire_locked(s); /* invariant 4 */
        ret = qcow2_flush_all_locked(s);
    }
out:
    qcow2_bitmap_dir_free(&dir);
    qcow2_unlock(s);
    return ret;
}
