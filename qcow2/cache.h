/*
 * qcow2/cache.h: LRU cache of metadata tables of one size (L2 slices,
 * refcount blocks).  See cache.c for the invariants.
 */
#ifndef QIMG_QCOW2_CACHE_H
#define QIMG_QCOW2_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Qcow2Cache Qcow2Cache;

/* Fill buf (len bytes) with the table stored at host offset 'offset'. */
typedef int (*Qcow2CacheReadFn)(void *opaque, uint64_t offset, void *buf, size_t len);
/* Write-back hook: store a dirty table at 'offset'. */
typedef int (*Qcow2CacheWriteFn)(void *opaque, uint64_t offset, const void *buf,
                                 size_t len);
/* Make earlier writes durable (used when depends_on_flush is set). */
typedef int (*Qcow2CacheFlushFn)(void *opaque);
/* True when every write that completed at write generation gen is durable
 * (block.h invariant 4); checks cache.c invariant 4 where tables are written. */
typedef bool (*Qcow2CacheDurableFn)(void *opaque, uint64_t gen);

typedef struct Qcow2CacheOps {
    Qcow2CacheReadFn read;
    Qcow2CacheWriteFn write;        /* NULL: dirty entries are never written back */
    Qcow2CacheFlushFn flush;        /* may be NULL */
    Qcow2CacheDurableFn is_durable; /* may be NULL */
    void *opaque;
} Qcow2CacheOps;

typedef struct Qcow2CacheStats {
    uint64_t hits;
    uint64_t misses;
    uint64_t evictions;
    uint64_t writebacks;
    unsigned entries; /* tables currently held */
} Qcow2CacheStats;

/* A cache of at most max_entries (>= 1) tables of table_size bytes each.
 * Memory is allocated one table at a time, on first use. */
Qcow2Cache *qcow2_cache_new(unsigned max_entries, size_t table_size,
                            const Qcow2CacheOps *ops);
/* Frees everything; dirty tables are dropped (flush first). */
void qcow2_cache_free(Qcow2Cache *c);

/* Take a reference to the table at 'offset', reading it on a miss.  The
 * pointer stays valid until the matching put. */
int qcow2_cache_get_locked(Qcow2Cache *c, uint64_t offset, void **table);
void qcow2_cache_put_locked(Qcow2Cache *c, void **table);
/* Like get, for a table the caller is about to fill completely (a new
 * table): nothing is read; the contents are undefined until the caller
 * writes them.  The entry is clean: mark it dirty, or write it yourself. */
int qcow2_cache_get_empty_locked(Qcow2Cache *c, uint64_t offset, void **table);
/* Mark a referenced table modified: it is written back before eviction. */
void qcow2_cache_mark_dirty_locked(Qcow2Cache *c, void *table);
/* The table now references something written at write generation gen: it
 * may reach the disk only once that is durable (cache.c invariant 4). */
void qcow2_cache_require_durable_locked(Qcow2Cache *c, void *table, uint64_t gen);
/* Write-back ordering: c's dirty tables reach the disk only after every
 * dirty table of 'dependency' has been written and made durable (cache.c
 * invariant 4). */
int qcow2_cache_set_dependency_locked(Qcow2Cache *c, Qcow2Cache *dependency);
/* Would qcow2_cache_set_dependency_locked(c, dependency) write nothing? */
bool qcow2_cache_can_depend_locked(const Qcow2Cache *c, const Qcow2Cache *dependency);
/* Write-back ordering: flush the file before writing c's dirty tables. */
void qcow2_cache_depends_on_flush_locked(Qcow2Cache *c);
/* Write every dirty table (dependencies first). */
int qcow2_cache_flush_locked(Qcow2Cache *c);
/* Forget the table at offset (it was freed or must be re-read), dirty or
 * not; a table someone holds a reference to is kept. */
void qcow2_cache_discard_locked(Qcow2Cache *c, uint64_t offset);
/* The same for every table in [offset, offset + len) (both multiples of
 * the table size): e.g. all the slices of one L2 table. */
void qcow2_cache_discard_range_locked(Qcow2Cache *c, uint64_t offset, uint64_t len);
/* Forget every table (QEMU's qcow2_cache_empty): none may be dirty or
 * referenced; the memory stays for later gets. */
void qcow2_cache_empty_locked(Qcow2Cache *c);
/* Free the tables nobody took since the previous call, unless referenced
 * or dirty (cache.c invariant 6); returns how many were freed. */
unsigned qcow2_cache_clean_unused_locked(Qcow2Cache *c);
/* True if some table is dirty (not yet written back). */
bool qcow2_cache_has_dirty_locked(const Qcow2Cache *c);
/* Is the table at offset in the cache (a get would do no I/O)? */
bool qcow2_cache_holds_locked(const Qcow2Cache *c, uint64_t offset);
void qcow2_cache_get_stats_locked(const Qcow2Cache *c, Qcow2CacheStats *st);

#endif
