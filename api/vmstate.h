/*
 * api/vmstate.h: internal hooks of the vmstate writer/reader
 * (api/vmstate.c) for unit tests.  Nothing here is part of libqimg's
 * public API; api.h declares what the rest of api/ calls (api_quiesce,
 * api_release).
 */
#ifndef QIMG_API_VMSTATE_H
#define QIMG_API_VMSTATE_H

#include "api/api.h"

typedef struct ApiVmstateStats {
    size_t buffer_size; /* B of vmstate.c invariant 1 */
    unsigned max_in_flight;
    unsigned live_buffers;     /* buffers allocated now */
    unsigned max_live_buffers; /* most buffers ever allocated at once
                                * (vmstate.c invariant 5) */
} ApiVmstateStats;

/* Current numbers of img's vmstate state (zeros if it has none). */
void api_vmstate_get_stats(QimgImage *img, ApiVmstateStats *st);

#endif
