/*
 * qcow2/alloc.h: shared by the allocator's files (alloc.c and
 * alloc-refmeta.c) and nothing else; their invariants are alloc.c's.
 */
#ifndef QIMG_QCOW2_ALLOC_H
#define QIMG_QCOW2_ALLOC_H

#include "qcow2/qcow2.h"

#define QCOW2_HOST_OFFSET_LIMIT (UINT64_C(1) << 56) /* alloc.c invariant 7 */

static inline uint64_t alloc_rb_entries(const Qcow2State *s)
{
    return UINT64_C(1) << s->refcount_block_bits;
}

/* alloc.c */
/* First cluster index >= from starting n free clusters (alloc.c inv. 5). */
int alloc_find_free_run_locked(Qcow2State *s, uint64_t from, uint64_t n, uint64_t *start);
/* Every cluster below end is inside the file (qcow2.h invariant 7). */
void alloc_raise_file_size(Qcow2State *s, uint64_t end);
/* A refcount update on clusters whose refcount blocks exist (alloc.c
 * invariant 4); a missing block is a decrease below 0. */
int alloc_update_core_locked(Qcow2State *s, uint64_t offset, uint64_t length,
                             uint64_t addend, bool decrease);

/* alloc-refmeta.c */
/* One round of alloc.c invariant 3 for the first cluster of [first, first
 * + n) without a refcount block: 1 when it made something (search again),
 * 0 when every cluster has its block, or -errno. */
int alloc_cover_round_locked(Qcow2State *s, uint64_t first, uint64_t n);

#endif
