/*
 * vdi/vdi.h: the VDI driver, for the driver table (api/ registers it),
 * and what vdi/'s files share.  See vdi.c for the invariants.
 */
#ifndef QIMG_VDI_H
#define QIMG_VDI_H

#include "block/block.h"
#include "vdi/format.h"

extern const BlkDriver blk_vdi_driver;

/* vdi/create.c */
int vdi_create(const char *filename, const BlkCreateOptions *opts);
int vdi_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                BlkMeasure *out);

#endif
