/*
 * block/rbd-int.h: what block/rbd.c and block/rbd-meta.c share -- the
 * state of an open RBD image, and rbd-meta.c's driver functions that
 * rbd.c's driver table names.  Internal to block/.
 *
 * Invariants: rbd.c's (cited as "rbd.c invariant N") hold in both files.
 */
#ifndef QIMG_BLOCK_RBD_INT_H
#define QIMG_BLOCK_RBD_INT_H

#include "block/rbd.h"
#include "block/rbd-lib.h"

#include <pthread.h>

/* rbd.c invariant 9: librados and librbd through the table rbd-lib.c loads */
#define RL blk_rbd_lib

typedef struct RbdConn {
    rados_t cluster;
    rados_ioctx_t ioctx;
    bool have_cluster, have_ioctx;
} RbdConn;

typedef struct RbdState {
    RbdConn conn;
    rbd_image_t image;
    bool have_image;
    char *name;                  /* the image's name, for messages */
    uint64_t object_size;        /* bytes */
    unsigned close_bound;        /* seconds (0: none), invariant 8 */
    pthread_mutex_t resize_lock; /* invariant 4 */
} RbdState;

/* rbd-meta.c: block status (rbd.c invariant 5), size and information
 * (invariant 4), snapshots (invariant 6) */
int blk_rbd_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st);
int blk_rbd_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                     bool shrink);
GArray *blk_rbd_snapshot_list(BlkNode *img);
int blk_rbd_get_info(BlkNode *img, BlkInfo *info);
int blk_rbd_snapshot_create(BlkNode *img, BlkSnapshotInfo *sn);
int blk_rbd_snapshot_goto(BlkNode *img, const char *id_or_name);
int blk_rbd_snapshot_delete(BlkNode *img, const char *id_or_name);
int64_t blk_rbd_get_allocated_size(BlkNode *img);
bool blk_rbd_has_zero_init(BlkNode *img);

#endif
