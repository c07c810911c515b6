/*
 * qcow2/cache.c: LRU cache of metadata tables of one size.
 *
 * Owns: the L2 cache (its tables are L2 slices, cluster.c invariant 6) and
 * the refcount block cache (one-cluster blocks), one Qcow2Cache each.
 * Tables are kept raw (big-endian), as on disk (qcow2.h invariant 3).
 * Callers hold the image metadata lock around every call (hence _locked);
 * the cache has no lock of its own.
 *
 * Invariants (cited as "cache.c invariant N"):
 *  1. At most one entry holds a given host offset; the hash table maps
 *     offset -> entry for exactly the valid entries.
 *  2. An entry with ref > 0 is never evicted, discarded or reused: the
 *     pointer handed out by get stays valid until put.
 *  3. A dirty entry is never dropped by eviction: it is written back first
 *     through ops.write (without a write hook it is simply not evictable).
 *  4. Before any dirty entry of a cache reaches the disk, every dirty entry
 *     of its dependency has been written *and made durable* (the dependency
 *     is written, then the file flushed: written is not durable, a power
 *     loss may keep a later write and lose an earlier one), and if
 *     depends_on_flush is set the file has been flushed.  This is the hook
 *     the write path uses for "refcount before L2" and "data before L2".
 *     Checked where the write is issued: the dependency has nothing dirty
 *     left, and the entry's own requirement (need_gen, the write generation
 *     its newest reference needs durable) is met by ops.is_durable.
 *  5. Memory is bounded: at most max_entries tables of table_size bytes,
 *     allocated on first use.
 *  6. Cleaning (QEMU's cache-clean-interval, clean.c) frees the memory of
 *     the entries nobody took since the previous cleaning, except those
 *     referenced (invariant 2) or dirty (invariant 3): a later get reads
 *     the table again.
 *
 * The LRU order is an intrusive doubly linked list: head = most recently
 * used, tail = least recently used; eviction walks from the tail.
 */
#include "qcow2/cache.h"

#include "block/block.h"

#include <errno.h>
#include <glib.h>
#include <inttypes.h>

typedef struct Qcow2CacheEntry Qcow2CacheEntry;

struct Qcow2CacheEntry {
    uint64_t offset; /* host offset of the table; the hash key when valid */
    uint8_t *data;
    unsigned ref;
    bool valid;
    bool dirty;
    bool used;                    /* taken since the last cleaning (inv. 6) */
    uint64_t need_gen;            /* invariant 4: durable before this entry is written */
    Qcow2CacheEntry *prev, *next; /* LRU list */
};

struct Qcow2Cache {
    Qcow2CacheOps ops;
    size_t table_size;
    unsigned max_entries;
    GPtrArray *entries;    /* every allocated entry (owned) */
    GHashTable *by_offset; /* uint64_t * (entry->offset) -> entry */
    GHashTable *by_data;   /* entry->data -> entry (for put / mark_dirty) */
    Qcow2CacheEntry *head, *tail;
    Qcow2Cache *depends;
    bool depends_on_flush;
    Qcow2CacheStats stats;
};

static void lru_unlink(Qcow2Cache *c, Qcow2CacheEntry *e)
{
    if (e->prev) {
        e->prev->next = e->next;
    } else {
        c->head = e->next;
    }
    if (e->next) {
        e->next->prev = e->prev;
    } else {
        c->tail = e->prev;
    }
    e->prev = e->next = NULL;
}

static void lru_push_head(Qcow2Cache *c, Qcow2CacheEntry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head) {
        c->head->prev = e;
    } else {
        c->tail = e;
    }
    c->head = e;
}

static void lru_push_tail(Qcow2Cache *c, Qcow2CacheEntry *e)
{
    e->next = NULL;
    e->prev = c->tail;
    if (c->tail) {
        c->tail->next = e;
    } else {
        c->head = e;
    }
    c->tail = e;
}

static void entry_free(gpointer p)
{
    Qcow2CacheEntry *e = p;
    g_free(e->data);
    g_free(e);
}

Qcow2Cache *qcow2_cache_new(unsigned max_entries, size_t table_size,
                            const Qcow2CacheOps *ops)
{
    Qcow2Cache *c = g_new0(Qcow2Cache, 1);

    g_assert(max_entries >= 1 && table_size > 0 && ops && ops->read);
    c->ops = *ops;
    c->table_size = table_size;
    c->max_entries = max_entries;
    c->entries = g_ptr_array_new_with_free_func(entry_free);
    c->by_offset = g_hash_table_new(g_int64_hash, g_int64_equal);
    c->by_data = g_hash_table_new(g_direct_hash, g_direct_equal);
    return c;
}

void qcow2_cache_free(Qcow2Cache *c)
{
    if (!c) {
        return;
    }
    g_hash_table_destroy(c->by_offset);
    g_hash_table_destroy(c->by_data);
    g_ptr_array_free(c->entries, TRUE);
    g_free(c);
}

static Qcow2CacheEntry *entry_of(Qcow2Cache *c, const void *table)
{
    return g_hash_table_lookup(c->by_data, table);
}

/* Write one dirty entry back, honouring invariant 4. */
static int entry_writeback_locked(Qcow2Cache *c, Qcow2CacheEntry *e)
{
    int ret;

    if (!e->dirty) {
        return 0;
    }
    if (!c->ops.write) {
        return blk_error(
            EROFS, "metadata cache has no write-back for table at 0x%" PRIx64, e->offset);
    }
    if (c->depends) {
        ret = qcow2_cache_flush_locked(c->depends);
        if (ret < 0) {
            return ret;
        }
        g_assert(!qcow2_cache_has_dirty_locked(c->depends)); /* invariant 4 */
        c->depends = NULL;
        c->depends_on_flush = true; /* written is not durable */
    }
    if (c->depends_on_flush) {
        if (c->ops.flush) {
            ret = c->ops.flush(c->ops.opaque);
            if (ret < 0) {
                return ret;
            }
        }
        c->depends_on_flush = false;
    }
    /* invariant 4, checked where the write is issued */
    g_assert(!c->ops.is_durable || c->ops.is_durable(c->ops.opaque, e->need_gen));
    ret = c->ops.write(c->ops.opaque, e->offset, e->data, c->table_size);
    if (ret < 0) {
        return ret;
    }
    e->dirty = false;
    e->need_gen = 0;
    c->stats.writebacks++;
    return 0;
}

/* Find an entry to (re)use: a fresh one while below the limit, else the
 * least recently used unreferenced one (invariants 2, 3, 5). */
static int pick_victim_locked(Qcow2Cache *c, Qcow2CacheEntry **out)
{
    if (c->entries->len < c->max_entries) {
        Qcow2CacheEntry *e = g_new0(Qcow2CacheEntry, 1);
        e->data = g_malloc(c->table_size);
        g_ptr_array_add(c->entries, e);
        g_hash_table_insert(c->by_data, e->data, e);
        lru_push_tail(c, e);
        *out = e;
        return 0;
    }
    for (Qcow2CacheEntry *e = c->tail; e; e = e->prev) {
        if (e->ref > 0 || (e->dirty && !c->ops.write)) {
            continue;
        }
        int ret = entry_writeback_locked(c, e);
        if (ret < 0) {
            return ret;
        }
        if (e->valid) {
            g_hash_table_remove(c->by_offset, &e->offset);
            e->valid = false;
            c->stats.evictions++;
        }
        *out = e;
        return 0;
    }
    return blk_error(ENOSPC, "metadata cache: all %u tables are in use", c->max_entries);
}

int qcow2_cache_get_locked(Qcow2Cache *c, uint64_t offset, void **table)
{
    Qcow2CacheEntry *e = g_hash_table_lookup(c->by_offset, &offset);
    int ret;

    if (e) {
        c->stats.hits++;
    } else {
        c->stats.misses++;
        ret = pick_victim_locked(c, &e);
        if (ret < 0) {
            return ret;
        }
        ret = c->ops.read(c->ops.opaque, offset, e->data, c->table_size);
        if (ret < 0) {
            /* Leave it invalid at the cold end so it is reused first. */
            lru_unlink(c, e);
            lru_push_tail(c, e);
            return ret;
        }
        e->offset = offset;
        e->valid = true;
        e->dirty = false;
        e->need_gen = 0;
        g_hash_table_insert(c->by_offset, &e->offset, e);
    }
    e->ref++;
    e->used = true;
    lru_unlink(c, e);
    lru_push_head(c, e);
    *table = e->data;
    return 0;
}

int qcow2_cache_get_empty_locked(Qcow2Cache *c, uint64_t offset, void **table)
{
    Qcow2CacheEntry *e = g_hash_table_lookup(c->by_offset, &offset);
    int ret;

    if (!e) {
        ret = pick_victim_locked(c, &e);
        if (ret < 0) {
            return ret;
        }
        e->offset = offset;
        e->valid = true;
        g_hash_table_insert(c->by_offset, &e->offset, e);
    }
    /* The caller overwrites the whole table: whatever was pending in it is
     * superseded (invariant 1 still holds: one entry per offset). */
    e->dirty = false;
    e->need_gen = 0;
    e->ref++;
    e->used = true;
    lru_unlink(c, e);
    lru_push_head(c, e);
    *table = e->data;
    return 0;
}

void qcow2_cache_put_locked(Qcow2Cache *c, void **table)
{
    Qcow2CacheEntry *e = *table ? entry_of(c, *table) : NULL;

    g_assert(e && e->ref > 0);
    e->ref--;
    e->used = true; /* invariant 6: used until the reference ended */
    *table = NULL;
}

void qcow2_cache_mark_dirty_locked(Qcow2Cache *c, void *table)
{
    Qcow2CacheEntry *e = entry_of(c, table);

    g_assert(e && e->valid && e->ref > 0);
    e->dirty = true;
}

void qcow2_cache_require_durable_locked(Qcow2Cache *c, void *table, uint64_t gen)
{
    Qcow2CacheEntry *e = entry_of(c, table);

    g_assert(e && e->valid && e->ref > 0);
    e->need_gen = MAX(e->need_gen, gen);
}

int qcow2_cache_set_dependency_locked(Qcow2Cache *c, Qcow2Cache *dependency)
{
    int ret;

    g_assert(c != dependency);
    /* Never let two caches depend on each other: settle the reverse edge
     * first, and an existing different dependency too. */
    if (dependency->depends) {
        ret = qcow2_cache_flush_locked(dependency);
        if (ret < 0) {
            return ret;
        }
    }
    if (c->depends && c->depends != dependency) {
        ret = qcow2_cache_flush_locked(c->depends);
        if (ret < 0) {
            return ret;
        }
    }
    c->depends = dependency;
    return 0;
}

bool qcow2_cache_can_depend_locked(const Qcow2Cache *c, const Qcow2Cache *dependency)
{
    return !dependency->depends && (!c->depends || c->depends == dependency);
}

void qcow2_cache_depends_on_flush_locked(Qcow2Cache *c)
{
    c->depends_on_flush = true;
}

int qcow2_cache_flush_locked(Qcow2Cache *c)
{
    for (Qcow2CacheEntry *e = c->tail; e; e = e->prev) {
        if (e->valid && e->dirty) {
            int ret = entry_writeback_locked(c, e);
            if (ret < 0) {
                return ret;
            }
        }
    }
    /* Nothing of ours is pending, so the ordering edges are satisfied. */
    c->depends = NULL;
    return 0;
}

static void discard_entry_locked(Qcow2Cache *c, Qcow2CacheEntry *e)
{
    if (!e || e->ref > 0) {
        /* In use (only a corrupt image frees a table that is being
         * updated): the holder keeps it; invariant 2. */
        return;
    }
    g_hash_table_remove(c->by_offset, &e->offset);
    e->valid = false;
    e->dirty = false;
    e->need_gen = 0;
    lru_unlink(c, e);
    lru_push_tail(c, e);
}

void qcow2_cache_discard_locked(Qcow2Cache *c, uint64_t offset)
{
    discard_entry_locked(c, g_hash_table_lookup(c->by_offset, &offset));
}

void qcow2_cache_discard_range_locked(Qcow2Cache *c, uint64_t offset, uint64_t len)
{
    uint64_t tables = len / c->table_size;

    g_assert(offset % c->table_size == 0 && len % c->table_size == 0);
    if (tables <= c->entries->len) {
        for (uint64_t i = 0; i < tables; i++) {
            qcow2_cache_discard_locked(c, offset + i * c->table_size);
        }
        return;
    }
    /* More tables than entries: look at each entry once instead. */
    for (guint i = 0; i < c->entries->len; i++) {
        Qcow2CacheEntry *e = c->entries->pdata[i];
        if (e->valid && e->offset >= offset && e->offset - offset < len) {
            discard_entry_locked(c, e);
        }
    }
}

void qcow2_cache_empty_locked(Qcow2Cache *c)
{
    for (Qcow2CacheEntry *e = c->head; e; e = e->next) {
        /* written back first, and never held across the lock (qcow2.h
         * invariant 4) */
        g_assert(e->ref == 0 && !(e->valid && e->dirty));
        if (e->valid) {
            g_hash_table_remove(c->by_offset, &e->offset);
        }
        e->valid = false;
        e->need_gen = 0;
    }
    c->depends = NULL;
}

unsigned qcow2_cache_clean_unused_locked(Qcow2Cache *c)
{
    unsigned dropped = 0;

    for (guint i = c->entries->len; i-- > 0;) {
        Qcow2CacheEntry *e = c->entries->pdata[i];

        if (e->used || e->ref > 0 || (e->valid && e->dirty)) {
            e->used = false; /* invariant 6: kept, until the next cleaning */
            continue;
        }
        if (e->valid) {
            g_hash_table_remove(c->by_offset, &e->offset);
        }
        g_hash_table_remove(c->by_data, e->data);
        lru_unlink(c, e);
        g_ptr_array_remove_index_fast(c->entries, i); /* frees it */
        dropped++;
    }
    return dropped;
}

bool qcow2_cache_holds_locked(const Qcow2Cache *c, uint64_t offset)
{
    return g_hash_table_lookup(c->by_offset, &offset) != NULL;
}

bool qcow2_cache_has_dirty_locked(const Qcow2Cache *c)
{
    for (Qcow2CacheEntry *e = c->head; e; e = e->next) {
        if (e->valid && e->dirty) {
            return true;
        }
    }
    return false;
}

void qcow2_cache_get_stats_locked(const Qcow2Cache *c, Qcow2CacheStats *st)
{
    *st = c->stats;
    st->entries = g_hash_table_size(c->by_offset);
}
