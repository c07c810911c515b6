/*
 * block/tcache.h: a bounded cache of the pages of one flat on-disk table
 * (a VHD or VHDX BAT, a VDI block map, QED L2 tables), so that a table is
 * never loaded whole.  See tcache.c for the invariants.
 */
#ifndef QIMG_BLOCK_TCACHE_H
#define QIMG_BLOCK_TCACHE_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct BlkTCache BlkTCache;

typedef struct BlkTCacheOps {
    /* Fill buf (len bytes) with the page at 'key' (a byte offset the
     * driver chooses: usually where the page lies in the file). */
    int (*read)(void *opaque, uint64_t key, void *buf, size_t len);
    /* Every page is dirty and one must go: write the dirty pages back in
     * the driver's order (blk_tcache_dirty_keys(), then blk_tcache_clean()).
     * NULL: pages are never dirtied. */
    int (*writeback)(void *opaque);
    void *opaque;
} BlkTCacheOps;

/* At most max_pages (>= 1) pages of page_size bytes each, allocated on
 * first use. */
BlkTCache *blk_tcache_new(size_t page_size, unsigned max_pages, const BlkTCacheOps *ops);
void blk_tcache_free(BlkTCache *c);

/* The page at key (a multiple of page_size), read on a miss.  The pointer
 * stays valid until the next call on c (the caller holds the driver's
 * lock). */
int blk_tcache_get(BlkTCache *c, uint64_t key, uint8_t **page);
/* The page at key if it is held (no I/O, no change to the LRU order),
 * else NULL: for a writeback, which must not evict. */
uint8_t *blk_tcache_peek(BlkTCache *c, uint64_t key);
/* A table entry of width 4 or 8 bytes at byte offset off (entries never
 * cross pages: off is a multiple of width), in the table's byte order;
 * its page key is off rounded down to the page size.  store marks the page
 * dirty. */
int blk_tcache_load(BlkTCache *c, uint64_t off, unsigned width, bool big_endian,
                    uint64_t *value);
int blk_tcache_store(BlkTCache *c, uint64_t off, unsigned width, bool big_endian,
                     uint64_t value);
/* Is the page at key held (a get would do no I/O)? */
bool blk_tcache_holds(const BlkTCache *c, uint64_t key);
/* Mark the page at key (held) modified. */
void blk_tcache_mark_dirty(BlkTCache *c, uint64_t key);
bool blk_tcache_has_dirty(const BlkTCache *c);
/* The keys of the dirty pages, in increasing order (g_array_unref). */
GArray *blk_tcache_dirty_keys(const BlkTCache *c);
/* The dirty pages were written: mark them clean. */
void blk_tcache_clean(BlkTCache *c);
/* Forget every page (dirty ones too). */
void blk_tcache_drop(BlkTCache *c);

#endif
