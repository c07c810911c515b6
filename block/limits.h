/*
 * block/limits.h: the request functions of block.c for a node with
 * request limits (BlkNode.limits; block/limits.c).  Called after the
 * request checks, with a non-empty request; internal to block/.
 */
#ifndef QIMG_BLOCK_LIMITS_H
#define QIMG_BLOCK_LIMITS_H

#include "block/block.h"

int blk_limits_preadv(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags);
int blk_limits_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags);
int blk_limits_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                             unsigned flags);
int blk_limits_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes);
/* The driver's answer for [offset, offset + bytes) widened to the
 * alignment, made the answer for offset (pnum not yet clamped to bytes
 * beyond what the driver said). */
int blk_limits_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st);

#endif
