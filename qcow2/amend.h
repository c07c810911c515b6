/*
 * qcow2/amend.h: what the parts of qemu-img amend (amend.c, amend-zero.c,
 * amend-refcount.c) share.  amend.c says what they own and lists the
 * invariants, cited as "amend.c invariant N".
 */
#ifndef QIMG_QCOW2_AMEND_H
#define QIMG_QCOW2_AMEND_H

#include "qcow2/qcow2.h"

/* QEMU's Qcow2AmendHelperCBInfo: the progress of several operations
 * reported as one (amend.c invariant 7). */
typedef struct Qcow2AmendProgress {
    const BlkAmendOptions *opts;
    unsigned total_ops;     /* operations that report progress */
    int last;               /* the operation of the last report (-1: none) */
    unsigned ops_completed; /* operations finished */
    uint64_t offset_done;   /* their work */
    uint64_t last_work;     /* the total work of the last operation reported */
} Qcow2AmendProgress;

/* Operation op (an index, distinct per operation) did done of total. */
void qcow2_amend_progress(Qcow2AmendProgress *p, int op, uint64_t done, uint64_t total);

/* amend-zero.c: QEMU's qcow2_expand_zero_clusters (amend.c invariant 4)
 * over the active and every snapshot's L1 table.  *compressed: an L2
 * table has a compressed cluster. */
int qcow2_amend_expand_zeros_locked(Qcow2State *s, Qcow2AmendProgress *p, int op,
                                    bool *compressed);

/* amend-refcount.c: switch to refcounts of 2^order bits (amend.c
 * invariant 5). */
int qcow2_amend_refcount_order_locked(Qcow2State *s, uint32_t order,
                                      Qcow2AmendProgress *p, int op);

#endif
