/*
 * qcow2/dirty.h: the bits of persistent dirty bitmaps in memory
 * (dirty.c says what it owns and its invariants).
 */
#ifndef QIMG_QCOW2_DIRTY_H
#define QIMG_QCOW2_DIRTY_H

#include "block/block.h"

#include <stdbool.h>
#include <stdint.h>

/* One bitmap's bits: chunk i is bitmap data cluster i (NULL: all zero). */
typedef struct Qcow2DirtyBits {
    uint64_t disk_size;
    uint8_t granularity_bits;
    uint32_t cluster_bits;
    uint64_t nbits;   /* ceil(disk_size / granularity) */
    uint32_t nchunks; /* the bitmap table's size */
    uint8_t **chunks; /* [atomic] each cluster_size bytes, or NULL */
    int changed;      /* [atomic] a bit was set since the load */
} Qcow2DirtyBits;

/* The enabled bitmaps an open image maintains (dirty.c invariant 1): the
 * set is never changed after it is published, only replaced. */
typedef struct Qcow2DirtySet {
    uint32_t n;
    char **names;          /* n */
    Qcow2DirtyBits **bits; /* n */
    /* disabled bitmaps marked in use with the others and cleared by a
     * store, their bits never changed (bitmap-store.c invariant 1) */
    uint32_t nheld;
    char **held; /* nheld */
} Qcow2DirtySet;

/* Bits for a disk of disk_size at granularity 2^granularity_bits, stored in
 * clusters of 2^cluster_bits; nchunks is the bitmap table's size. */
Qcow2DirtyBits *qcow2_dirty_bits_new(uint64_t disk_size, uint8_t granularity_bits,
                                     uint32_t cluster_bits, uint32_t nchunks);
void qcow2_dirty_bits_free(Qcow2DirtyBits *b);
/* Load the data a decoded bitmap table (host order) references. */
int qcow2_dirty_bits_load(Qcow2DirtyBits *b, BlkNode *file, const uint64_t *table);
/* Set the bits covering guest bytes [offset, offset + bytes), clipped to
 * the disk; lock-free (invariant 2). */
void qcow2_dirty_bits_set(Qcow2DirtyBits *b, uint64_t offset, uint64_t bytes);
/* Chunk i as it is now, or NULL when all its bits are zero. */
const uint8_t *qcow2_dirty_bits_chunk(const Qcow2DirtyBits *b, uint32_t i);
/* Copy chunk i into buf (cluster_size bytes) with atomic loads, as
 * requests may set bits meanwhile (invariant 2); false if all zero. */
bool qcow2_dirty_bits_copy_chunk(const Qcow2DirtyBits *b, uint32_t i, uint8_t *buf);
/* Append the dirty ranges (BlkRange: guest bytes, granularity-aligned,
 * the last clipped to the disk) to out, merged where adjacent. */
void qcow2_dirty_bits_extents(const Qcow2DirtyBits *b, GArray *out);

void qcow2_dirty_set_free(Qcow2DirtySet *d);
/* Index of name in d, or -1. */
int qcow2_dirty_set_find(const Qcow2DirtySet *d, const char *name);
/* Every bitmap of d records guest bytes [offset, offset + bytes). */
void qcow2_dirty_set_note(Qcow2DirtySet *d, uint64_t offset, uint64_t bytes);

#endif
