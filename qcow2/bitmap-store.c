/*
 * qcow2/bitmap-store.c: maintaining the persistent dirty bitmaps of an
 * image opened read-write -- loaded and marked in use before the first
 * guest write, their bits set by every guest write, zero write and
 * discard (dirty.c), written back at close or on request -- and reading
 * or merging the dirty extents of one bitmap.
 *
 * Owns: which bitmaps are maintained (s->dirty), the in-use marking of
 * the directory and the order of a store.
 *
 * Invariants (cited as "bitmap-store.c invariant N"):
 *  1. Maintained are the enabled ("auto"), consistent (not in use) dirty
 *     tracking bitmaps without extra data whose table and data load; they
 *     are loaded, then -- at a read-write open, as QEMU's
 *     qcow2_load_dirty_bitmaps, and before the first guest write, zero,
 *     discard or compressed write after a store -- every consistent
 *     bitmap, enabled or not, is marked in use, one synced in-place write
 *     of the directory (encode(decode) gives every other byte back,
 *     bitmap-codec.c invariant 7).  So a crash of a read-write user leaves
 *     them in use, as QEMU's do (qemu-img-bitmaps).  An enabled bitmap
 *     qimg cannot maintain stays in use: QEMU then refuses to trust it
 *     rather than miss qimg's writes.  The bits of a disabled bitmap are
 *     never changed: a store only clears its in-use flag (Qcow2DirtySet's
 *     held).  A directory that does not decode strictly is only framed
 *     (QCOW2_BITMAP_RAW) and every entry marked in use.
 *  2. A request sets its bits before it is issued: the slow path under
 *     the metadata lock after invariant 1 (qcow2_check_data_writable_locked),
 *     the lock-free path (qcow2_bitmaps_note) before it tests whether fast
 *     writes are on, with a full fence between.  A store turns fast writes
 *     off, fences, and only then reads the bits: a fast write either set
 *     its bits before the store read them or finds fast writes off and
 *     takes the slow path, which marks the bitmaps in use again first.
 *     The vmstate area, snapshot creation and deletion set no bits;
 *     reverting to a snapshot and emptying the image (commit) set all.
 *  3. A store is bitmap-ops.c invariants 1-2: each bitmap with new bits
 *     gets new data clusters (all-zero ones stay unallocated, table entry
 *     0) and a new table, the directory with in-use cleared is written to
 *     new clusters, everything is flushed, one synced header write
 *     switches to it, then the old tables and data are freed.  A power
 *     loss before the switch leaves the bitmaps in use (QEMU: "must not
 *     trust"), never wrong bits.  A store with no new bit in any
 *     maintained bitmap (an open that wrote nothing, as before qemu-img
 *     bitmap's operation) writes no cluster: it clears the in-use flags it
 *     set (maintained and held bitmaps) in place, as invariant 1 set them,
 *     so the operation places its clusters as qemu-img does (bitmap-ops.c
 *     invariant 5).  After a store the bits stay in memory and the next
 *     write marks the bitmaps in use again.
 *  6. The store at close is QEMU's (qcow2_inactivate: every bitmap it
 *     loaded is stored, changed or not; QEMU iotest 303): each maintained
 *     and held bitmap, in directory order, gets new data clusters and a
 *     new table (a held one its bits as on disk, bitmap-ops.c invariant
 *     5; one whose table no longer reads keeps it, in-use cleared as
 *     invariant 1 says), then the directory, as invariant 3 switches to
 *     it, also when no bit is new.  The other stores (before an
 *     operation, on request) write only the bitmaps with new bits.
 *  4. An operation on the directory (bitmap-ops.c, merge) first stores,
 *     then retires the maintained set (dirty.c invariant 1); the next write
 *     loads the bitmaps anew from what the operation wrote.
 *  5. Extents of a maintained bitmap come from memory, of any other from
 *     the disk; a bitmap in use that qimg does not maintain is refused as
 *     inconsistent (QEMU's "Bitmap 'NAME' is inconsistent and cannot be
 *     used").
 */
#include "qcow2/bitmap.h"
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <string.h>

#include "qcow2/dirty.h"
#include "qcow2/fastmap.h"

static int load_set_locked(Qcow2State *s, const Qcow2BitmapDir *dir, Qcow2DirtySet **out)
{
    const Qcow2BitmapSource src = qcow2_bitmap_source(s);
    const Qcow2BitmapImage bimg = qcow2_bitmap_image(s);
    Qcow2DirtySet *d = g_new0(Qcow2DirtySet, 1);

    d->names = g_new0(char *, dir->nb ? dir->nb : 1);
    d->bits = g_new0(Qcow2DirtyBits *, dir->nb ? dir->nb : 1);
    d->held = g_new0(char *, dir->nb ? dir->nb : 1);
    for (uint32_t i = 0; i < dir->nb; i++) {
        const Qcow2Bitmap *bm = &dir->bms[i];
        g_autofree uint64_t *table = NULL;
        Qcow2DirtyBits *b;

        if ((bm->flags & QCOW2_BITMAP_IN_USE) ||
            bm->type != QCOW2_BITMAP_TYPE_DIRTY_TRACKING || bm->extra_data_size) {
            continue; /* invariant 1 */
        }
        if (!(bm->flags & QCOW2_BITMAP_AUTO)) {
            d->held[d->nheld++] = g_strdup(bm->name); /* invariant 1 */
            continue;
        }
        b = qcow2_dirty_bits_new(s->img->size, bm->granularity_bits, s->cluster_bits,
                                 bm->table_size);
        if (qcow2_bitmap_table_read(&src, bm, i, &bimg, QCOW2_BITMAP_OPEN, &table) < 0 ||
            qcow2_dirty_bits_load(b, s->img->file, table) < 0) {
            g_debug("qcow2: bitmap '%s' not loaded: %s", bm->name,
                    blk_error_message() ? blk_error_message() : "I/O error");
            blk_error_clear(); /* it stays in use: invariant 1 */
            qcow2_dirty_bits_free(b);
            continue;
        }
        d->names[d->n] = g_strdup(bm->name);
        d->bits[d->n++] = b;
    }
    *out = d;
    return 0;
}

static bool held(const Qcow2DirtySet *d, const char *name)
{
    for (uint32_t i = 0; d && i < d->nheld; i++) {
        if (strcmp(d->held[i], name) == 0) {
            return true;
        }
    }
    return false;
}

/* Invariants 1 and 3: dir, its flags changed, over the directory in place. */
static int write_dir_in_place_locked(Qcow2State *s, const Qcow2BitmapDir *dir)
{
    /* dir->size <= the directory's size (<= 64 MiB, header.c) */
    g_autofree uint8_t *buf = g_malloc(dir->size);

    qcow2_bitmap_dir_encode(dir->bms, dir->nb, buf);
    return qcow2_write_metadata_locked(s, BLKEV_HEADER_UPDATE, QCOW2_OL_BITMAP_DIRECTORY,
                                       s->ext.bitmaps.directory_offset, buf, dir->size,
                                       true);
}

/* Invariant 1: mark the enabled and held bitmaps (policy RAW: all) in use. */
static int mark_in_use_locked(Qcow2State *s, Qcow2BitmapDir *dir, bool all)
{
    bool changed = false;

    for (uint32_t i = 0; i < dir->nb; i++) {
        if ((all || (dir->bms[i].flags & QCOW2_BITMAP_AUTO) ||
             held(s->dirty, dir->bms[i].name)) &&
            !(dir->bms[i].flags & QCOW2_BITMAP_IN_USE)) {
            dir->bms[i].flags |= QCOW2_BITMAP_IN_USE;
            changed = true;
        }
    }
    return changed ? write_dir_in_place_locked(s, dir) : 0;
}

/* Invariant 3: no new bits since the load or the last store: the flags
 * the open set (maintained and held bitmaps) are cleared in place. */
static int clear_in_use_locked(Qcow2State *s, Qcow2BitmapDir *dir)
{
    bool changed = false;

    for (uint32_t i = 0; i < dir->nb; i++) {
        if ((qcow2_dirty_set_find(s->dirty, dir->bms[i].name) >= 0 ||
             held(s->dirty, dir->bms[i].name)) &&
            (dir->bms[i].flags & QCOW2_BITMAP_IN_USE)) {
            dir->bms[i].flags &= ~(uint32_t)QCOW2_BITMAP_IN_USE;
            changed = true;
        }
    }
    return changed ? write_dir_in_place_locked(s, dir) : 0;
}

int qcow2_bitmaps_begin_write_locked(Qcow2State *s)
{
    const Qcow2BitmapSource src = qcow2_bitmap_source(s);
    const Qcow2BitmapImage bimg = qcow2_bitmap_image(s);
    Qcow2BitmapDir dir;
    bool all = false;
    int ret;

    if (!s->ext.has_bitmaps || !(s->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        s->bitmaps_in_use = true;
        return 0;
    }
    ret = qcow2_bitmap_dir_read(&src, &s->ext.bitmaps, &bimg, QCOW2_BITMAP_OPEN, &dir);
    if (ret < 0) {
        blk_error_clear();
        all = true; /* invariant 1: framing only, all in use */
        ret = qcow2_bitmap_dir_read(&src, &s->ext.bitmaps, &bimg, QCOW2_BITMAP_RAW, &dir);
    } else if (!s->dirty) {
        Qcow2DirtySet *d;
        ret = load_set_locked(s, &dir, &d);
        if (ret == 0) {
            __atomic_store_n(&s->dirty, d, __ATOMIC_SEQ_CST); /* dirty.c inv. 1 */
        }
    }
    if (ret == 0) {
        ret = mark_in_use_locked(s, &dir, all);
    }
    qcow2_bitmap_dir_free(&dir);
    if (ret == 0) {
        s->bitmaps_in_use = true;
    }
    return ret;
}

void qcow2_bitmaps_note(Qcow2State *s, uint64_t offset, uint64_t bytes)
{
    Qcow2DirtySet *d = __atomic_load_n(&s->dirty, __ATOMIC_ACQUIRE);

    if (d) {
        qcow2_dirty_set_note(d, offset, bytes);
        __atomic_thread_fence(__ATOMIC_SEQ_CST); /* invariant 2 */
    }
}

/* Invariant 3: b's chunks to new clusters, then a new table; *table_off. */
static int write_bits_locked(Qcow2State *s, const Qcow2DirtyBits *b, uint64_t *table_off)
{
    uint64_t tbytes = ROUND_UP((uint64_t)b->nchunks * 8, s->cluster_size);
    g_autofree uint64_t *table = g_new0(uint64_t, b->nchunks ? b->nchunks : 1);
    g_autofree uint8_t *tbuf = g_malloc0(tbytes);
    g_autofree uint8_t *c = g_malloc(s->cluster_size);
    int64_t off;
    int ret = 0;

    for (uint32_t i = 0; i < b->nchunks && ret == 0; i++) {
        if (!qcow2_dirty_bits_copy_chunk(b, i, c)) { /* dirty.c invariant 2 */
            continue;
        }
        off = qcow2_alloc_clusters_locked(s, 1);
        ret = off <= 0 ? (off < 0 ? (int)off : -EIO) : 0;
        if (ret == 0) {
            table[i] = (uint64_t)off;
            ret = qcow2_write_metadata_locked(s, BLKEV_HEADER_UPDATE, 0, (uint64_t)off, c,
                                              s->cluster_size, false);
        }
    }
    if (ret == 0) {
        off = qcow2_alloc_clusters_locked(s, tbytes >> s->cluster_bits);
        ret = off <= 0 ? (off < 0 ? (int)off : -EIO) : 0;
    }
    if (ret == 0) {
        /* QEMU writes the table's own bytes: the file may end inside its
         * last cluster */
        qcow2_bitmap_table_encode(table, b->nchunks, tbuf);
        ret = qcow2_write_metadata_locked(s, BLKEV_HEADER_UPDATE, 0, (uint64_t)off, tbuf,
                                          (uint64_t)b->nchunks * 8, false);
        if (ret < 0) {
            qcow2_free_clusters_locked(s, (uint64_t)off, tbytes);
        }
    }
    if (ret < 0) {
        for (uint32_t i = 0; i < b->nchunks; i++) {
            if (table[i]) {
                qcow2_free_clusters_locked(s, table[i], s->cluster_size); /* unlinked */
            }
        }
        return ret;
    }
    *table_off = (uint64_t)off;
    return 0;
}

/* Give bm the table of b; old gets what the switch frees afterwards (a
 * bitmap being added has none). */
static int replace_table_locked(Qcow2State *s, Qcow2Bitmap *bm, const Qcow2DirtyBits *b,
                                GArray *old)
{
    uint64_t t;
    int ret = write_bits_locked(s, b, &t);

    if (ret == 0 && bm->table_offset == 0) {
        bm->table_offset = t;
    } else if (ret == 0) {
        Qcow2Bitmap was = {.table_offset = bm->table_offset,
                           .table_size = bm->table_size,
                           .granularity_bits = bm->granularity_bits};
        g_array_append_val(old, was);
        bm->table_offset = t;
    }
    return ret;
}

static void note_fresh(GArray *fresh, const Qcow2Bitmap *bm)
{
    g_array_append_val(fresh, *bm);
    g_array_index(fresh, Qcow2Bitmap, fresh->len - 1).name = NULL;
    g_array_index(fresh, Qcow2Bitmap, fresh->len - 1).extra_data = NULL;
}

int qcow2_bitmap_restore_locked(Qcow2State *s, Qcow2Bitmap *bm, uint32_t index, bool zero,
                                GArray *old, GArray *fresh)
{
    const Qcow2BitmapSource src = qcow2_bitmap_source(s);
    const Qcow2BitmapImage bimg = qcow2_bitmap_image(s);
    g_autofree uint64_t *table = NULL;
    Qcow2DirtyBits *b = qcow2_dirty_bits_new(s->img->size, bm->granularity_bits,
                                             s->cluster_bits, bm->table_size);
    int ret = 0;

    if (!zero && bm->table_offset) {
        ret = qcow2_bitmap_table_read(&src, bm, index, &bimg, QCOW2_BITMAP_OPEN, &table);
        if (ret == 0) {
            ret = qcow2_dirty_bits_load(b, s->img->file, table);
        }
    }
    if (ret == 0) {
        ret = replace_table_locked(s, bm, b, old);
    }
    if (ret == 0) {
        note_fresh(fresh, bm);
    }
    qcow2_dirty_bits_free(b);
    return ret;
}

/* Invariant 3: tables no directory in force references any more (the old
 * ones after the switch, the new ones after a failure), with their data. */
void qcow2_bitmap_drop_tables_locked(Qcow2State *s, GArray *tables)
{
    for (guint i = 0; i < tables->len; i++) {
        qcow2_bitmap_free_data_locked(s, &g_array_index(tables, Qcow2Bitmap, i), i);
    }
}

int qcow2_bitmaps_store_locked(Qcow2State *s, bool at_close)
{
    const Qcow2BitmapSource src = qcow2_bitmap_source(s);
    const Qcow2BitmapImage bimg = qcow2_bitmap_image(s);
    Qcow2DirtySet *d = s->dirty;
    g_autoptr(GArray) old = g_array_new(FALSE, TRUE, sizeof(Qcow2Bitmap));
    g_autoptr(GArray) fresh = g_array_new(FALSE, TRUE, sizeof(Qcow2Bitmap));
    Qcow2BitmapDir dir;
    int ret;

    if (!d || !s->bitmaps_in_use || d->n + d->nheld == 0) {
        return 0;
    }
    qcow2_fastmap_set_writes_locked(s->fastmap, false); /* invariant 2 */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    ret = qcow2_bitmap_dir_read(&src, &s->ext.bitmaps, &bimg, QCOW2_BITMAP_OPEN, &dir);
    if (ret < 0) {
        return ret;
    }
    bool any = false; /* read after the fence (invariant 2) */
    for (uint32_t k = 0; k < d->n; k++) {
        any = any || __atomic_load_n(&d->bits[k]->changed, __ATOMIC_SEQ_CST);
    }
    if (!any && !at_close) { /* invariant 3: nothing new to write */
        ret = clear_in_use_locked(s, &dir);
        if (ret == 0) {
            s->bitmaps_in_use = false;
        }
        qcow2_bitmap_dir_free(&dir);
        return ret;
    }
    for (uint32_t i = 0; i < dir.nb && ret == 0; i++) {
        Qcow2Bitmap *bm = &dir.bms[i];
        int k = qcow2_dirty_set_find(d, bm->name);
        if (k < 0) {
            if (held(d, bm->name)) {
                if (at_close) { /* invariant 6 */
                    Qcow2Bitmap kept = *bm;
                    if (qcow2_bitmap_restore_locked(s, bm, i, false, old, fresh) < 0) {
                        blk_error_clear();
                        *bm = kept; /* its old table stays */
                    }
                }
                bm->flags &= ~(uint32_t)QCOW2_BITMAP_IN_USE; /* invariant 1 */
            }
            continue;
        }
        if (__atomic_exchange_n(&d->bits[k]->changed, 0, __ATOMIC_SEQ_CST) || at_close) {
            ret = replace_table_locked(s, bm, d->bits[k], old);
            if (ret < 0) {
                __atomic_store_n(&d->bits[k]->changed, 1, __ATOMIC_SEQ_CST);
                break;
            }
            note_fresh(fresh, bm);
        }
        bm->flags &= ~(uint32_t)QCOW2_BITMAP_IN_USE;
    }
    if (ret == 0) {
        ret = qcow2_bitmap_switch_dir_locked(s, &dir);
    }
    if (ret < 0) {
        /* the old directory is in force: the new tables are unreferenced */
        qcow2_bitmap_drop_tables_locked(s, fresh);
        for (uint32_t k = 0; k < d->n; k++) {
            __atomic_store_n(&d->bits[k]->changed, 1, __ATOMIC_SEQ_CST);
        }
    } else {
        qcow2_bitmap_drop_tables_locked(s, old);
        s->bitmaps_in_use = false; /* the next write marks them again */
    }
    qcow2_bitmap_dir_free(&dir);
    return ret;
}

void qcow2_bitmaps_retire_locked(Qcow2State *s)
{
    Qcow2DirtySet *d = s->dirty;

    qcow2_fastmap_set_writes_locked(s->fastmap, false); /* invariant 2 */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    s->bitmaps_in_use = false;
    if (!d) {
        return;
    }
    __atomic_store_n(&s->dirty, NULL, __ATOMIC_SEQ_CST);
    if (!s->dirty_retired) {
        s->dirty_retired =
            g_ptr_array_new_with_free_func((GDestroyNotify)qcow2_dirty_set_free);
    }
    g_ptr_array_add(s->dirty_retired, d); /* dirty.c invariant 1 */
}

void qcow2_bitmaps_free(Qcow2State *s)
{
    qcow2_dirty_set_free(s->dirty);
    s->dirty = NULL;
    if (s->dirty_retired) {
        g_ptr_array_free(s->dirty_retired, TRUE);
        s->dirty_retired = NULL;
    }
}

/* The bits of the bitmap named name in dir (loaded from the disk). */
static int load_bits_locked(Qcow2State *s, const Qcow2BitmapDir *dir, int i,
                            Qcow2DirtyBits **out)
{
    const Qcow2BitmapSource src = qcow2_bitmap_source(s);
    const Qcow2BitmapImage bimg = qcow2_bitmap_image(s);
    const Qcow2Bitmap *bm = &dir->bms[i];
    g_autofree uint64_t *table = NULL;
    Qcow2DirtyBits *b;
    int ret;

    /* invariant 5; a held bitmap is in use by this open only (invariant 1) */
    ret = s->bitmaps_in_use && held(s->dirty, bm->name)
              ? 0
              : qcow2_bitmap_check_consistent(bm);
    if (ret < 0) {
        return ret;
    }
    b = qcow2_dirty_bits_new(s->img->size, bm->granularity_bits, s->cluster_bits,
                             bm->table_size);
    ret =
        qcow2_bitmap_table_read(&src, bm, (uint32_t)i, &bimg, QCOW2_BITMAP_OPEN, &table);
    if (ret == 0) {
        ret = qcow2_dirty_bits_load(b, s->img->file, table);
    }
    if (ret < 0) {
        qcow2_dirty_bits_free(b);
        return ret;
    }
    *out = b;
    return 0;
}

static int find_locked(Qcow2State *s, const char *name, Qcow2BitmapDir *dir)
{
    int ret = qcow2_bitmap_dir_read_locked(s, dir);

    for (uint32_t i = 0; ret == 0 && i < dir->nb; i++) {
        if (strcmp(dir->bms[i].name, name) == 0) {
            return (int)i;
        }
    }
    return ret < 0 ? ret : blk_error(ENOENT, "Dirty bitmap '%s' not found", name);
}

int qcow2_bitmap_extents(BlkNode *img, const char *name, GArray **out)
{
    Qcow2State *s = img->opaque;
    Qcow2BitmapDir dir = {0};
    Qcow2DirtyBits *b = NULL;
    int i = -1, ret;

    *out = g_array_new(FALSE, FALSE, sizeof(BlkRange));
    qcow2_lock(s);
    i = qcow2_dirty_set_find(s->dirty, name);
    if (i >= 0) {
        qcow2_dirty_bits_extents(s->dirty->bits[i], *out); /* invariant 5 */
        ret = 0;
        goto out;
    }
    ret = i = find_locked(s, name, &dir);
    if (ret >= 0) {
        ret = load_bits_locked(s, &dir, i, &b);
    }
    if (ret == 0) {
        qcow2_dirty_bits_extents(b, *out);
    }
out:
    qcow2_unlock(s);
    qcow2_dirty_bits_free(b);
    qcow2_bitmap_dir_free(&dir);
    if (ret < 0) {
        g_array_free(*out, TRUE);
        *out = NULL;
    }
    return ret < 0 ? ret : 0;
}

int qcow2_bitmap_merge(BlkNode *img, const char *name, const BlkRange *r, size_t n)
{
    Qcow2State *s = img->opaque;
    g_autoptr(GArray) old = g_array_new(FALSE, TRUE, sizeof(Qcow2Bitmap));
    Qcow2BitmapDir dir = {0};
    Qcow2DirtyBits *b = NULL;
    int i = -1, ret;

    qcow2_lock(s);
    ret = qcow2_check_writable_locked(s);
    if (ret == 0) {
        ret = qcow2_bitmaps_store_locked(s, false); /* invariant 4 */
    }
    if (ret == 0) {
        ret = i = find_locked(s, name, &dir);
    }
    if (ret >= 0) {
        ret = load_bits_locked(s, &dir, i, &b);
    }
    if (ret < 0) {
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        qcow2_dirty_bits_set(b, r[k].offset, r[k].length);
    }
    if (b->changed) {
        ret = replace_table_locked(s, &dir.bms[i], b, old);
        if (ret == 0) {
            ret = qcow2_bitmap_switch_dir_locked(s, &dir);
            if (ret < 0) {
                qcow2_bitmap_free_data_locked(s, &dir.bms[i], (uint32_t)i);
            }
        }
        if (ret == 0) {
            qcow2_bitmap_drop_tables_locked(s, old);
            qcow2_bitmaps_retire_locked(s);
            ret = qcow2_flush_all_locked(s);
        }
    }
out:
    qcow2_unlock(s);
    qcow2_dirty_bits_free(b);
    qcow2_bitmap_dir_free(&dir);
    return ret;
}

int qcow2_bitmaps_store(BlkNode *img)
{
    Qcow2State *s = img->opaque;
    int ret;

    qcow2_lock(s);
    ret = qcow2_check_writable_locked(s);
    if (ret == 0) {
        ret = qcow2_bitmaps_store_locked(s, false);
    }
    if (ret == 0) {
        ret = qcow2_flush_all_locked(s);
    }
    qcow2_unlock(s);
    return ret;
}
