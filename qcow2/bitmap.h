/*
 * qcow2/bitmap.h: what the persistent-bitmap modules (bitmap.c, bitmap-ops.c,
 * bitmap-store.c) share with each other and offer the rest of qcow2/ (the
 * driver table, open and close, the write path's dirty tracking).  Their
 * invariants are those files' own.  Internal to qcow2/.
 */
#ifndef QIMG_QCOW2_BITMAP_H
#define QIMG_QCOW2_BITMAP_H

#include "qcow2/qcow2.h"

/* bitmap.c */
int qcow2_bitmaps_size(BlkNode *img, uint64_t cluster_size, uint64_t *bytes);
/* The persistent bitmaps as qemu-img info lists them (a GArray of
 * BlkBitmapInfo, NULL when there are none). */
int qcow2_bitmaps_list_locked(Qcow2State *s, GArray **out);
/* bitmap-ops.c: qemu-img bitmap's operations (granularity: add only, 0
 * for the default). */
int qcow2_bitmap_op(BlkNode *img, BlkBitmapOp op, const char *name, uint32_t granularity);
/* bitmap.c, bitmap-ops.c: shared by the bitmap modules */
Qcow2BitmapSource qcow2_bitmap_source(const Qcow2State *s);
Qcow2BitmapImage qcow2_bitmap_image(const Qcow2State *s);
/* 0, or QEMU's refusal of a bitmap in use ("... is inconsistent ..."). */
int qcow2_bitmap_check_consistent(const Qcow2Bitmap *bm);
/* At open: the directory under QEMU's rules (bitmap.c invariant 3). */
int qcow2_bitmap_dir_check_open(Qcow2State *s);
/* The directory (strict), empty without the extension or autoclear bit. */
int qcow2_bitmap_dir_read_locked(Qcow2State *s, Qcow2BitmapDir *dir);
/* Write dir to new clusters and switch the header to it (bitmap-ops.c
 * invariant 1); the old directory's clusters are freed. */
int qcow2_bitmap_switch_dir_locked(Qcow2State *s, Qcow2BitmapDir *dir);
/* Free bm's table and the data clusters it references (invariant 2). */
void qcow2_bitmap_free_data_locked(Qcow2State *s, const Qcow2Bitmap *bm, uint32_t index);
/* bitmap-store.c: the bitmaps an open image maintains */
int qcow2_bitmaps_begin_write_locked(Qcow2State *s);
/* A request about to write guest bytes [offset, +bytes) (lock-free). */
void qcow2_bitmaps_note(Qcow2State *s, uint64_t offset, uint64_t bytes);
/* Store the maintained bitmaps (at_close: all of them, invariant 6). */
int qcow2_bitmaps_store_locked(Qcow2State *s, bool at_close);
/* bitmap-ops.c invariant 5: bm (entry index of the directory in force)
 * gets new data clusters and a new table holding its bits as on disk (or
 * none: zero, or a bitmap being added, table_offset 0); its old table is
 * appended to old (freed after the switch), the new one to fresh (freed
 * if the switch fails). */
int qcow2_bitmap_restore_locked(Qcow2State *s, Qcow2Bitmap *bm, uint32_t index, bool zero,
                                GArray *old, GArray *fresh);
/* Free the tables of a GArray of Qcow2Bitmap, with their data. */
void qcow2_bitmap_drop_tables_locked(Qcow2State *s, GArray *tables);
void qcow2_bitmaps_retire_locked(Qcow2State *s);
void qcow2_bitmaps_free(Qcow2State *s);
int qcow2_bitmap_extents(BlkNode *img, const char *name, GArray **out);
int qcow2_bitmap_merge(BlkNode *img, const char *name, const BlkRange *r, size_t n);
int qcow2_bitmaps_store(BlkNode *img);

#endif
