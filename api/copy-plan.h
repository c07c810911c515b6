/*
 * api/copy-plan.h: what the copy pipeline (copy.c) writes where
 * (copy-plan.c): the source's block status cut into chunks, and the runs of
 * data and zeros inside a data chunk.  Internal to api/.
 */
#ifndef QIMG_API_COPY_PLAN_H
#define QIMG_API_COPY_PLAN_H

#include "api/api.h"
#include "qimg/copy.h"

#define COPY_SECTOR 512u
#define COPY_BUF_SIZE (2u * 1024 * 1024)

typedef enum CopyKind {
    COPY_DATA,    /* read and write (with sparse detection) */
    COPY_ZERO,    /* zeros: a zeroes request unless the target reads as zeros */
    COPY_BACKING, /* left unallocated: the target's backing file shows */
} CopyKind;

typedef struct CopyPlan {
    QimgImage *const *srcs; /* the sources, one after the other (fact 7) */
    unsigned n_srcs;
    QimgImage *src; /* the walk's current source, srcs[cur] */
    unsigned cur;
    uint64_t base;       /* where src begins in the target */
    uint64_t size;       /* bytes to copy: the sources' sizes added up */
    uint64_t src_align;  /* src's cluster size, >= 512 */
    unsigned min_sparse; /* sectors; 0: no sparse detection */
    bool zeros_as_data;  /* -S 0: the source's zeros are written as data */
    bool mirror_writes;  /* QimgCopyOptions.mirror_writes */
    unsigned alignment;  /* sectors: pow2floor(min_sparse), >= 1 */
    bool target_has_backing, top_only, compress;
    unsigned top_layers;    /* fact 4 */
    int64_t target_backing; /* -1: unknown */
    uint32_t cluster;       /* the target's cluster size (compress) */
    uint64_t granularity;   /* mirror_writes: copy-mirror.c invariant 1 */
    uint64_t dst_cluster;   /* mirror_writes: the target's cluster size */
    bool salvage;           /* QimgCopyOptions.salvage (fact 5) */
    void (*warn)(void *opaque, const char *message); /* salvage's warnings */
    void *warn_opaque;
    /* the walk, under the pipeline's lock */
    uint64_t pos, status_end;
    CopyKind status;
} CopyPlan;

typedef struct CopyChunk {
    uint64_t offset, len;
    CopyKind kind;
} CopyChunk;

/* copy-plan.c: the first layer of the top_layers that defines offset
 * (fact 4). */
gboolean copy_plan_layers_status(CopyPlan *p, uint64_t offset, uint64_t len,
                                 QimgExtent *ext, GError **err);
/* copy-mirror.c: the plan of a commit (mirror_writes). */
void copy_plan_mirror_init(CopyPlan *p, QimgImage *dst);
gboolean copy_plan_mirror_next(CopyPlan *p, CopyChunk *c, GError **error);

/* Set up the plan for copying the n_srcs sources srcs, one after the
 * other, into dst (copy-plan.c facts 1-4, 7); srcs must outlive the plan. */
void copy_plan_init(CopyPlan *p, QimgImage *const *srcs, unsigned n_srcs, QimgImage *dst,
                    const QimgCopyOptions *o);
/* The index in p->srcs of the source holding the target's offset (fact
 * 7), *local set to the offset in it and *avail to the bytes left in it
 * from there. */
unsigned copy_plan_source_at(const CopyPlan *p, uint64_t offset, uint64_t *local,
                             uint64_t *avail);

/* copy-offload.c: which of the sources can be offloaded (its fact 1; a
 * g_new array of n_srcs), and where the target's [offset, +len) starts in
 * a source's file, for *pnum bytes (its fact 2): 0, or -ENOTSUP (or the
 * block status's -errno) when it cannot be copied from there. */
bool *copy_offload_sources(QimgImage *const *srcs, unsigned n_srcs);
int copy_offload_map(const CopyPlan *p, const bool *src_ok, uint64_t offset, uint64_t len,
                     BlkNode **file, uint64_t *host, uint64_t *pnum);
/* The next chunk at p->pos (advancing it); FALSE at the end (*more false)
 * or on an error (*more true, error set). */
gboolean copy_plan_next(CopyPlan *p, CopyChunk *c, bool *more, GError **error);
/* The runs of data and zeros of a data chunk (buf, len bytes, first sector
 * number 'sector') into runs[] (room for one per sector), each its length
 * in sectors, | COPY_RUN_DATA for data; returns their count (fact 2). */
#define COPY_RUN_DATA 0x80000000u
#define COPY_MAX_RUNS (COPY_BUF_SIZE / COPY_SECTOR)
size_t copy_chunk_runs(const CopyPlan *p, const uint8_t *buf, size_t len, uint64_t sector,
                       uint32_t *runs);
bool copy_buf_is_zero(const uint8_t *buf, size_t len);

#endif
