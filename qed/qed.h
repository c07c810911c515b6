/*
 * qed/qed.h: the QED driver, for the driver table (api/ registers it).
 * See qed.c for the invariants.
 */
#ifndef QIMG_QED_H
#define QIMG_QED_H

#include "block/block.h"
#include "qed/format.h"

extern const BlkDriver blk_qed_driver;

/* qed/create.c: qimg does not create QED images (refused, with why). */
int qed_create(const char *filename, const BlkCreateOptions *opts);

#endif
