/*
 * libqimg public API: internal snapshots (qemu-img snapshot -c/-a/-d/-l,
 * and QEMU's savevm/loadvm disk side).
 */
#ifndef QIMG_SNAPSHOT_H
#define QIMG_SNAPSHOT_H

#include "qimg/qimg.h"

G_BEGIN_DECLS

typedef struct QimgSnapshotParams {
    uint32_t struct_size;   /* sizeof(QimgSnapshotParams): QIMG_SNAPSHOT_PARAMS_INIT */
    const char *name;       /* required; like qemu-img, qimg_snapshot_create
                             * accepts a name already in use (the savevm
                             * stream does not) */
    uint64_t vm_state_size; /* bytes of VM state already written to the vmstate area */
    uint64_t date_sec;      /* 0,0: now */
    uint32_t date_nsec;
    uint64_t vm_clock_nsec;
    bool has_icount; /* false (the default): icount off */
    uint64_t icount; /* instructions executed, when has_icount */
} QimgSnapshotParams;

#define QIMG_SNAPSHOT_PARAMS_INIT                                                        \
    {                                                                                    \
        .struct_size = sizeof(QimgSnapshotParams)                                        \
    }

/* Create a snapshot of the current disk state; returns its new ID (g_free).
 * Buffered vmstate writes are drained first.  Create, apply and delete refuse
 * read-only images (EACCES) and formats without internal snapshots (ENOTSUP,
 * "Format 'raw' does not support internal snapshots"); listing those gives
 * an empty list. */
char *qimg_snapshot_create(QimgImage *img, const QimgSnapshotParams *params,
                           GError **error);
/* Revert the disk to a snapshot (ID first, then name); restores its disk size. */
gboolean qimg_snapshot_apply(QimgImage *img, const char *id_or_name, GError **error);
gboolean qimg_snapshot_delete(QimgImage *img, const char *id_or_name, GError **error);
/* A new array of QimgSnapshotInfo * (ABI rule 3); free with
 * qimg_snapshot_list_free() or g_ptr_array_unref(). */
GPtrArray *qimg_snapshot_list(QimgImage *img, GError **error);
void qimg_snapshot_list_free(GPtrArray *list);

G_END_DECLS

#endif
