/*
 * tools/convert.h: what the two halves of "qimg convert" share: the set-up
 * (convert.c: options, source and target) fills in a Convert, the copy
 * (convert-copy.c) runs on it.  Internal to tools/.
 */
#ifndef QIMG_TOOL_CONVERT_H
#define QIMG_TOOL_CONVERT_H

#include "qimg-tool.h"

#define SECTOR 512u
#define BUF_SIZE (2u * 1024 * 1024)

typedef struct Convert {
    QimgImage *src;
    QimgImage *dst;
    uint64_t size;
    uint64_t src_align;  /* bytes, >= 512 */
    unsigned min_sparse; /* sectors; 0 = no sparse detection */
    unsigned alignment;  /* sectors */
    bool zero_init;      /* target already reads as zeros (convert.c facts 2, 3) */
    bool target_has_backing;
    bool top_only; /* -B: status of the source's top layer (convert-copy.c fact 4) */
    int64_t target_backing; /* size of the target's backing file, -1 unknown */
    bool compress;          /* -c: whole clusters through pwrite_compressed */
    uint32_t cluster;       /* target cluster size (with -c) */
    uint8_t *buf;           /* BUF_SIZE bytes */
} Convert;

/* Copy the source to the target (convert-copy.c facts 1-4, or cluster by
 * cluster with -c), updating prog; prints the error and returns false on
 * failure.  Neither flushes nor closes the target. */
bool convert_copy(Convert *s, ToolProgress *prog);

#endif
