/*
 * block/faulty-int.h: what the files of the fault node share (block/faulty.c,
 * the node; block/faulty-rules.c, its rules read from text).
 *
 * Owns: FaultOp, the requests a rule counts, and FaultRule, one rule; the
 * invariants cited are block/faulty.c's.
 */
#ifndef QIMG_BLOCK_FAULTY_INT_H
#define QIMG_BLOCK_FAULTY_INT_H

#include "block/block.h"

typedef enum {
    OP_WRITE = 1,
    OP_FLUSH = 2,
    OP_READ = 4,
    OP_ZERO = 8,
    OP_DISCARD = 16,
    OP_STATUS = 32,
} FaultOp;

typedef struct FaultRule {
    int event; /* BlkEvent, BLK_FAULTY_WRITE_AIO, or -1 for any */
    int errnum;
    uint64_t nth;
    bool once;
    bool has_offset;
    uint64_t offset; /* has_offset: the byte a counted request covers */
    unsigned ops;
    int state;     /* 0: any (invariant 4) */
    int new_state; /* >= 0: a state switch, not a failure */
    uint64_t seen; /* matching requests so far (atomic) */
    bool arm;      /* invariant 7 */
    int armed;     /* atomic: arm rules, armed by their step */
    int spent;     /* atomic: an arm rule with once that failed a request */
} FaultRule;

/* RULES (faulty.c's header; or QEMU's config file, faulty-config.c) into
 * rules (FaultRule, appended to arr) and limits (*has_limits set when a
 * "limits,..." rule came); -EINVAL with the message recorded. */
int blk_faulty_parse_rules(const char *rules, GArray *arr, BlkLimits *limits,
                           bool *has_limits);

#endif
