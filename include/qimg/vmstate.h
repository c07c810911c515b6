/*
 * libqimg public API: VM state (savevm/loadvm) of qcow2 images.
 *
 * The VM state lives in the image's vmstate area, where QEMU puts it: from
 * the first L1-entry boundary after the end of the virtual disk.  Positional
 * calls address that area directly.  The stream calls are what an embedding
 * hypervisor uses for savevm/loadvm: small, unaligned, sequential writes are
 * coalesced into cluster-aligned buffers of max(cluster size, 1 MiB) written
 * by a task pool; loads read ahead.
 */
#ifndef QIMG_VMSTATE_H
#define QIMG_VMSTATE_H

#include "qimg/qimg.h"
#include "qimg/snapshot.h"

G_BEGIN_DECLS

/* Positional access to the active vmstate area.  Writes are buffered (see
 * above) and visible to reads at once; qimg_vmstate_flush() makes them
 * durable and reports the first error of any buffered write.  That error
 * is sticky: every later vmstate call on the image fails with it until the
 * image is closed.  Calls on one image may come from several threads; they
 * are serialised. */
gboolean qimg_vmstate_pwrite(QimgImage *img, uint64_t pos, const void *buf, size_t len,
                             GError **error);
gboolean qimg_vmstate_pread(QimgImage *img, uint64_t pos, void *buf, size_t len,
                            GError **error);
gboolean qimg_vmstate_flush(QimgImage *img, GError **error);

typedef struct QimgVmstateOptions {
    uint32_t struct_size;   /* sizeof(QimgVmstateOptions): QIMG_VMSTATE_OPTIONS_INIT */
    unsigned max_in_flight; /* buffers written at once; 0: 8 */
    size_t buffer_size;     /* 0: max(cluster size, 1 MiB); rounded to clusters */
} QimgVmstateOptions;

#define QIMG_VMSTATE_OPTIONS_INIT                                                        \
    {                                                                                    \
        .struct_size = sizeof(QimgVmstateOptions)                                        \
    }

/* Set the writer/reader parameters of an open image.  Pending writes are
 * drained first (their error, if any, is returned); refused with EBUSY while
 * a save or load stream is open.  max_in_flight <= 64, buffer_size <= 256 MiB;
 * memory used is at most (max_in_flight + 1) x buffer size. */
gboolean qimg_vmstate_configure(QimgImage *img, const QimgVmstateOptions *opts,
                                GError **error);

/* savevm: begin, append bytes in order, commit (flush, create the snapshot
 * with the written size, drop the active copy as QEMU does).  begin refuses
 * a read-only image, a format without internal snapshots, and a name that
 * is already in use ("Snapshot 'X' already exists").  One save or load
 * stream per image at a time.  A write error is sticky for the stream:
 * later appends and the commit return it. */
typedef struct QimgVmstateSave QimgVmstateSave;
QimgVmstateSave *qimg_vmstate_save_begin(QimgImage *img, const QimgSnapshotParams *params,
                                         GError **error);
gboolean qimg_vmstate_save_append(QimgVmstateSave *s, const void *buf, size_t len,
                                  GError **error);
uint64_t qimg_vmstate_save_size(QimgVmstateSave *s);
/* Returns the new snapshot's ID (g_free) and frees s, or NULL on failure
 * (s is freed too; nothing is left behind but leaked clusters at most). */
char *qimg_vmstate_save_commit(QimgVmstateSave *s, GError **error);
void qimg_vmstate_save_abort(QimgVmstateSave *s);

/* loadvm: open a snapshot's state as a stream.  With apply, the disk is
 * reverted to the snapshot first (QEMU's loadvm); without, the state is read
 * from the snapshot without touching the disk (extraction).  The snapshot is
 * looked up by ID first, then by name; a disk-only snapshot (no VM state) is
 * refused.  Reads are served with read-ahead (the kernel's for an image in a
 * local file through the page cache, the library's otherwise), never past
 * the state size. */
typedef struct QimgVmstateLoad QimgVmstateLoad;
QimgVmstateLoad *qimg_vmstate_load_begin(QimgImage *img, const char *id_or_name,
                                         bool apply, GError **error);
uint64_t qimg_vmstate_load_size(QimgVmstateLoad *l);
/* Reads up to len bytes; returns the count (0 at the end) or -1 with error. */
gssize qimg_vmstate_load_read(QimgVmstateLoad *l, void *buf, size_t len, GError **error);
void qimg_vmstate_load_end(QimgVmstateLoad *l);

G_END_DECLS

#endif
