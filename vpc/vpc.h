/*
 * vpc/vpc.h: the VHD driver (qemu-img's "vpc"), for the driver table
 * (api/ registers it), and what vpc/'s files share.  See vpc.c for the
 * invariants.
 */
#ifndef QIMG_VPC_H
#define QIMG_VPC_H

#include "block/block.h"
#include "vpc/format.h"

extern const BlkDriver blk_vpc_driver;

/* vpc/create.c */
int vpc_create(const char *filename, const BlkCreateOptions *opts);
int vpc_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                BlkMeasure *out);
/* vpc/locator.c: the parent's name a differencing disk's header points
 * at (g_free), from the first locator that yields one (W2ru, MacX,
 * W2ku, then the parent unicode name); NULL with a message if none. */
int vpc_parent_name(BlkNode *file, const VpcDynHeader *h, char **name);

#endif
