/*
 * qcow2/write.h: the planning half of a guest write (write-plan.c), shared
 * with write.c, which writes the data and links what was planned.  Internal
 * to qcow2/; the rules are write.c's invariants.
 */
#ifndef QCOW2_WRITE_H
#define QCOW2_WRITE_H

#include "qcow2/grow.h"

typedef enum ChunkKind {
    CHUNK_IN_PLACE, /* COPIED cluster(s), no metadata change */
    CHUNK_REUSE,    /* one COPIED cluster whose entry changes (bits, zero flag) */
    CHUNK_FRESH,    /* new contiguous clusters replace the old entries */
} ChunkKind;

typedef struct Chunk {
    ChunkKind kind;
    uint64_t guest;        /* guest offset of the first cluster */
    uint64_t nb;           /* clusters */
    uint64_t host;         /* host offset of the first cluster */
    uint64_t wstart, wend; /* guest bytes of the request in this chunk */
    uint64_t fstart, fend; /* guest bytes written to the host (with COW) */
    uint64_t *old_entry;   /* nb entries as planned */
    uint64_t *new_bitmap;  /* nb bitmaps to link (extended L2) */
    bool refcounted;       /* host clusters were allocated (not a data file) */
    uint64_t data_gen;     /* write generation once the data was written */
    uint32_t meta_gen;     /* fastmap generation before the overlap check */
    bool learn;            /* a guest write: remember the mapping (fastmap.c) */
    Qcow2GrowPlan grow;    /* fresh clusters: the file's growth (grow.c) */
    bool cow_zero;         /* the COW parts read as zeros (invariant 13) */
} Chunk;

void qcow2_chunk_clear(Chunk *c);
/* Plan the chunk starting at guest pos (< end).  Lock held (write.c
 * invariants 4, 5, 7, 10-13, 15, 16, 20).  ring: only a chunk the io_uring
 * engine can write in one go, else -EAGAIN with nothing done (inv. 18).
 * next_host: where the request's previous chunk ends on the host, 0 for
 * the first chunk (invariant 20). */
int qcow2_plan_chunk_locked(Qcow2State *s, uint64_t pos, uint64_t end, bool ring,
                            uint64_t next_host, Chunk *c);
/* write.c: remember c's clusters if c->learn (fastmap.c invariant 1), and
 * link a planned chunk whose data is written (invariants 1-3).  Lock held. */
void qcow2_learn_chunk_locked(Qcow2State *s, const Chunk *c);
int qcow2_link_chunk_locked(Qcow2State *s, const Chunk *c);
/* write.c: the one registration a write over [offset, offset + bytes)
 * would wait for (invariant 6), or NULL when none or several.  Lock held. */
Qcow2Inflight *qcow2_inflight_sole_conflict_locked(Qcow2State *s, uint64_t offset,
                                                   uint64_t bytes);

#endif
