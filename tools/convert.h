/*
 * tools/convert.h: what the two halves of "qimg convert" share: the set-up
 * (convert.c: options, source and target) fills in a Convert, the copy
 * (convert-copy.c) runs on it.  Internal to tools/.
 */
#ifndef QIMG_TOOL_CONVERT_H
#define QIMG_TOOL_CONVERT_H

#include "qimg-tool.h"

#include <qimg/copy.h>

#define SECTOR 512u

typedef struct Convert {
    QimgImage **srcs; /* one after the other (convert.c fact 9) */
    unsigned n_srcs;
    QimgImage *dst;
    uint64_t size;       /* the sources' sizes added up */
    unsigned min_sparse; /* sectors; 0 = no sparse detection */
    bool zero_init;      /* target already reads as zeros (convert.c facts 2, 3) */
    bool target_has_backing;
    bool top_only; /* -B: status of the source's top layer (api/copy-plan.c fact 4) */
    int64_t target_backing; /* size of the target's backing file, -1 unknown */
    bool compress;          /* -c: compressed clusters */
    unsigned in_flight;     /* -m; 0: the pipeline's default */
    bool out_of_order;      /* -W */
    bool copy_offload;      /* -C (convert.c fact 8) */
    bool salvage;           /* --salvage (convert.c fact 7) */
    bool quiet;             /* -q: no salvage warnings */
} Convert;

/* Copy the source to the target (qimg/copy.h), updating prog; prints the
 * error and returns false on failure (convert-copy.c facts 1, 2).  Neither
 * flushes nor closes the target. */
bool convert_copy(Convert *s, ToolProgress *prog);
/* convert-copy.c fact 3: QIMG_COPY_STATS asks for the copy's stats; the
 * final flush's time printed after them. */
bool convert_stats_wanted(void);
void convert_stats_flush(uint64_t ns);
/* convert-bitmaps.c (its facts 2-4): --bitmaps; false with the error
 * printed. */
bool convert_bitmaps_check_source(QimgImage *src, bool skip_broken);
bool convert_bitmaps_check_target(QimgImage *dst);
bool convert_bitmaps_copy(QimgImage *src, QimgImage *dst);
/* SIGUSR1 (progress) and SIGINT/SIGTERM (stop) for the copy. */
void convert_signals_init(void);

#endif
