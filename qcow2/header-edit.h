/*
 * qcow2/header-edit.h: rewriting cluster 0 (backing.c invariants 1-6) for
 * the modules that change header fields (backing.c, amend.c,
 * amend-refcount.c, bitmap-ops.c).  Internal to qcow2/.
 */
#ifndef QIMG_QCOW2_HEADER_EDIT_H
#define QIMG_QCOW2_HEADER_EDIT_H

#include "qcow2/qcow2.h"

/* backing.c: cluster 0 rewritten (backing.c invariants 1-5). */
typedef struct Qcow2HeaderEdit {
    bool set_backing;
    const char *backing, *fmt; /* set_backing: the new name (NULL: none) */
    bool set_bitmaps;
    Qcow2BitmapsExt bitmaps; /* set_bitmaps: nb_bitmaps 0 drops the extension */
    /* amend.c (backing.c invariant 6): */
    bool set_version; /* version 2 or 3; v2 drops the feature fields */
    uint32_t version;
    bool set_features; /* the three feature words (v3) */
    uint64_t incompatible, compatible, autoclear;
    bool set_refcount; /* refcount_order and the refcount table together */
    uint32_t refcount_order, reftable_clusters;
    uint64_t reftable_offset;
    bool set_data_file;
    const char *data_file; /* set_data_file: the new name (NULL: none) */
} Qcow2HeaderEdit;
int qcow2_header_rewrite_locked(Qcow2State *s, const Qcow2HeaderEdit *e);

#endif
