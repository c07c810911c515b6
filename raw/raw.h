/*
 * raw/raw.h: the raw format driver, for the driver table (api/ registers
 * it).  See raw.c for its invariants.
 */
#ifndef QIMG_RAW_H
#define QIMG_RAW_H

#include "block/block.h"

extern const BlkDriver blk_raw_driver;

#endif
