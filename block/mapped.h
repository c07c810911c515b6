/*
 * block/mapped.h: reads and block status of formats that map each guest
 * range to file bytes, zeros or the backing file (VHD, VHDX, VDI, QED).
 * See mapped.c.
 */
#ifndef QIMG_BLOCK_MAPPED_H
#define QIMG_BLOCK_MAPPED_H

#include "block/block.h"

typedef enum BlkMapKind {
    BLK_MAP_DATA,    /* bytes of the image file, at file_offset */
    BLK_MAP_ZERO,    /* zeros, defined by this layer */
    BLK_MAP_BACKING, /* whatever the backing file holds (zeros without one) */
} BlkMapKind;

typedef struct BlkMapping {
    BlkMapKind kind;
    uint64_t len; /* guest bytes the answer covers, 1 to the max asked */
    uint64_t file_offset;
} BlkMapping;

/* The driver's lookup of guest bytes [offset, offset + max): one kind, its
 * length cut to what it covers.  Takes the driver's lock itself. */
typedef int (*BlkMapFn)(BlkNode *img, uint64_t offset, uint64_t max, BlkMapping *m);
/* Read file bytes for BLK_MAP_DATA (NULL: blk_preadv on img->file). */
typedef int (*BlkMapReadFn)(BlkNode *img, uint64_t file_offset, const BlkIOV *q);

int blk_mapped_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, BlkMapFn map,
                      BlkMapReadFn read);
int blk_mapped_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkMapFn map,
                            BlkStatus *st);

#endif
