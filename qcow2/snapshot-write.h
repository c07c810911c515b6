/*
 * qcow2/snapshot-write.h: what the snapshot operations (snapshot-ops.c)
 * use of the snapshot write machinery (snapshot-write.c, whose rules R1-R10
 * and invariants 1-5 both files follow and cite).  Internal to qcow2/.
 */
#ifndef QIMG_QCOW2_SNAPSHOT_WRITE_H
#define QIMG_QCOW2_SNAPSHOT_WRITE_H

#include "qcow2/qcow2.h"

#define MAX_NAME_BYTES 255 /* snapshot-write.c invariant 3 */

/* A range of host clusters whose refcounts an operation raised (R6). */
typedef struct RefRange {
    uint64_t off, len;
} RefRange;

/* Count (or, with clear_copied, drop) an L1 tree's references (invariant 4);
 * increments logged in log for the undo (R6). */
int snapw_tree_walk_locked(Qcow2State *s, const uint64_t *l1, uint64_t n, GArray *log,
                           bool clear_copied);
/* Write the whole active L1 from memory; *written once the pwrite worked. */
int snapw_write_active_l1_locked(Qcow2State *s, const uint64_t *l1, bool *written);
/* snapw_commit_locked() after a step that may have failed (ret): the first
 * error is the one reported. */
int snapw_commit_keep_error_locked(Qcow2State *s, uint64_t *disk_l1, bool *reverted,
                                   int ret);
/* Validate an L1 entry of any L1 table (invariant 4). */
int snapw_l1_entry_locked(Qcow2State *s, uint64_t e, uint64_t index, uint64_t *l2);
/* Undo logged increments (R6); failures leave leaks. */
void snapw_undo_log_locked(Qcow2State *s, GArray *log);
/* Make the metadata in memory durable in R1/R5 order (R7, R8 on failure). */
int snapw_commit_locked(Qcow2State *s, uint64_t *disk_l1, bool *reverted);
/* Write both caches and flush the file (invariant 5). */
int snapw_write_all_locked(Qcow2State *s);

#endif
