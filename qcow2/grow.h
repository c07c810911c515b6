/*
 * qcow2/grow.h: growing the image file ahead of a guest write's fresh
 * clusters, shared by grow.c and write.c; the invariants are grow.c's.
 */
#ifndef QIMG_QCOW2_GROW_H
#define QIMG_QCOW2_GROW_H

#include "qcow2/qcow2.h"

/* What a chunk of fresh clusters needs from the growth (grow.c). */
typedef struct Qcow2GrowPlan {
    uint64_t host, end; /* the fresh clusters [host, end) */
    uint64_t before;    /* file_size before the allocation that handed them out */
    uint64_t target;    /* > 0: this request runs the growth to target (inv. 5) */
    bool cover;         /* past phys_end: qcow2_grow_cover before the data (inv. 1) */
    bool zero;          /* they read as zeros without a write (invariant 2) */
} Qcow2GrowPlan;

/* Invariants 1, 2, 5: right after the allocation of [host, host + len),
 * which found file_size == before; last: the request's last chunk (its
 * order turn passes before the data moves, write.c invariant 12).  Lock
 * held. */
void qcow2_grow_plan_locked(Qcow2State *s, uint64_t host, uint64_t len, uint64_t before,
                            bool last, Qcow2GrowPlan *g);
/* Invariant 1: the file covers the clusters (or growth stopped) before their
 * data is written; sets g->zero.  Lock not held. */
void qcow2_grow_cover(Qcow2State *s, Qcow2GrowPlan *g);
/* Invariant 5: the growth this request took on (if any) runs now, after its
 * data write, failed or not.  Lock not held. */
void qcow2_grow_finish(Qcow2State *s, Qcow2GrowPlan *g);

#endif
