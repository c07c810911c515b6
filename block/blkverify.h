/*
 * block/blkverify.h: QEMU's blkverify node (block/blkverify.c): an image
 * under test checked against a raw copy of its guest data, request by
 * request.
 *
 * Owns: the node and its verdict.
 */
#ifndef QIMG_BLOCK_BLKVERIFY_H
#define QIMG_BLOCK_BLKVERIFY_H

#include "block/block.h"

/* The blkverify node over raw (the copy: a protocol node, or any node)
 * and test (the image under test, a format node with its chain); takes
 * both. */
BlkNode *blk_open_blkverify(BlkNode *raw, BlkNode *test);
extern const BlkDriver blk_blkverify_driver;

/* The verdict of the blkverify node at or below top (down its file and
 * filter children), QEMU's line "blkverify: ...", g_free; NULL while its
 * children agree, or when there is no such node (blkverify.c invariant 2). */
char *blk_blkverify_verdict(BlkNode *top);

#endif
