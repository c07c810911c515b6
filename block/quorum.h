/*
 * block/quorum.h: QEMU's quorum node (block/quorum.c): one guest disk kept
 * on several children, read by vote.
 *
 * Owns: the node's options as block/quorum.c takes them.
 */
#ifndef QIMG_BLOCK_QUORUM_H
#define QIMG_BLOCK_QUORUM_H

#include "block/block.h"

/* QEMU's quorum options qimg honours (api/json-quorum.c reads them). */
typedef struct BlkQuorumOptions {
    unsigned threshold; /* vote-threshold: 1..children */
    bool fifo;          /* read-pattern=fifo (else quorum) */
    bool rewrite;       /* rewrite-corrupted=on */
} BlkQuorumOptions;

/* The quorum node over children[0..n) (n >= 1, already open, all the same
 * size), read-only as they are; takes the children, even on failure (then
 * NULL with the message recorded). */
BlkNode *blk_open_quorum(BlkNode **children, unsigned n, const BlkQuorumOptions *qo);
extern const BlkDriver blk_quorum_driver;

#endif
