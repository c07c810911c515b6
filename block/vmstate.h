/*
 * block/vmstate.h: internal hooks of the vmstate writer/reader
 * (block/vmstate.c) for unit tests.  Nothing here is part of libqimg's
 * public API; block.h declares what the rest of the block layer calls
 * (blk_vmstate_drain, blk_vmstate_release).
 */
#ifndef QIMG_BLOCK_VMSTATE_H
#define QIMG_BLOCK_VMSTATE_H

#include "block/block.h"

typedef struct BlkVmstateStats {
    size_t buffer_size; /* B of vmstate.c invariant 1 */
    unsigned max_in_flight;
    unsigned live_buffers;     /* buffers allocated now */
    unsigned max_live_buffers; /* most buffers ever allocated at once
                                * (vmstate.c invariant 5) */
} BlkVmstateStats;

/* Current numbers of img's vmstate state (zeros if it has none). */
void blk_vmstate_get_stats(QimgImage *img, BlkVmstateStats *st);

/*
 * qimg_vmstate_load_begin(apply = false) reads the state through a
 * read-only view node of the snapshot.  By default the view is opened with
 * blk_open_image(); a unit test whose driver is not in the driver table
 * installs its own opener (NULL restores the default).
 */
typedef QimgImage *(*BlkVmstateViewOpener)(QimgImage *img, const char *snapshot_id,
                                           GError **error);
void blk_vmstate_set_view_opener(BlkVmstateViewOpener fn);

#endif
