/*
 * luks/luks.h: the luks format driver (QEMU's "luks": a LUKS1 header, then
 * the encrypted payload), for the driver table (api/ registers it).  See
 * luks.c for its invariants.
 */
#ifndef QIMG_LUKS_H
#define QIMG_LUKS_H

#include "block/block.h"

extern const BlkDriver blk_luks_driver;

#endif
