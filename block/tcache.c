/*
 * block/tcache.c: the pages of a flat on-disk table, cached.
 *
 * Owns: up to max_pages buffers of page_size bytes, keyed by the driver's
 * page key, in LRU order.
 *
 * Invariants (cited as "tcache.c invariant N"):
 *  1. Memory is bounded: at most max_pages pages exist, whatever the table
 *     size an image claims (DESIGN.md, images from strangers).
 *  2. A dirty page is never dropped by eviction: when every page is dirty
 *     and another is needed, the driver's writeback writes them all (in the
 *     order its on-disk rules need) and marks them clean first.
 *  3. A failed read leaves nothing cached under that key.
 */
#include "block/tcache.h"

#include "block/endian.h"

#include <errno.h>

typedef struct Page {
    uint64_t key;
    bool dirty;
    struct Page *prev, *next; /* LRU: head = most recent */
    uint8_t data[];
} Page;

struct BlkTCache {
    size_t page_size;
    unsigned max_pages;
    unsigned npages;
    BlkTCacheOps ops;
    GHashTable *by_key; /* uint64 key -> Page* */
    Page *head, *tail;
};

static guint key_hash(gconstpointer k)
{
    uint64_t v = *(const uint64_t *)k;
    return (guint)(v ^ (v >> 32));
}

static gboolean key_equal(gconstpointer a, gconstpointer b)
{
    return *(const uint64_t *)a == *(const uint64_t *)b;
}

BlkTCache *blk_tcache_new(size_t page_size, unsigned max_pages, const BlkTCacheOps *ops)
{
    BlkTCache *c = g_new0(BlkTCache, 1);

    c->page_size = page_size;
    c->max_pages = max_pages ? max_pages : 1;
    c->ops = *ops;
    c->by_key = g_hash_table_new(key_hash, key_equal);
    return c;
}

static void unlink_page(BlkTCache *c, Page *p)
{
    if (p->prev) {
        p->prev->next = p->next;
    } else {
        c->head = p->next;
    }
    if (p->next) {
        p->next->prev = p->prev;
    } else {
        c->tail = p->prev;
    }
    p->prev = p->next = NULL;
}

static void push_head(BlkTCache *c, Page *p)
{
    p->prev = NULL;
    p->next = c->head;
    if (c->head) {
        c->head->prev = p;
    }
    c->head = p;
    if (!c->tail) {
        c->tail = p;
    }
}

void blk_tcache_drop(BlkTCache *c)
{
    Page *p = c->head;

    while (p) {
        Page *n = p->next;
        g_free(p);
        p = n;
    }
    c->head = c->tail = NULL;
    c->npages = 0;
    g_hash_table_remove_all(c->by_key);
}

void blk_tcache_free(BlkTCache *c)
{
    if (!c) {
        return;
    }
    blk_tcache_drop(c);
    g_hash_table_destroy(c->by_key);
    g_free(c);
}

/* A page to reuse (evicted, invariant 2) or a new one (invariant 1). */
static int take_page(BlkTCache *c, Page **out)
{
    Page *p;

    if (c->npages < c->max_pages) {
        *out = g_malloc(sizeof(Page) + c->page_size);
        c->npages++;
        return 0;
    }
    for (p = c->tail; p && p->dirty; p = p->prev) {
    }
    if (!p) {
        int ret = c->ops.writeback ? c->ops.writeback(c->ops.opaque) : -EIO;
        if (ret < 0) {
            return ret;
        }
        p = c->tail;
        if (!p || p->dirty) {
            return -EIO; /* the writeback left dirty pages: a driver bug */
        }
    }
    unlink_page(c, p);
    g_hash_table_remove(c->by_key, &p->key);
    *out = p;
    return 0;
}

int blk_tcache_get(BlkTCache *c, uint64_t key, uint8_t **page)
{
    Page *p = g_hash_table_lookup(c->by_key, &key);
    int ret;

    if (p) {
        unlink_page(c, p);
        push_head(c, p);
        *page = p->data;
        return 0;
    }
    ret = take_page(c, &p);
    if (ret < 0) {
        return ret;
    }
    ret = c->ops.read(c->ops.opaque, key, p->data, c->page_size);
    if (ret < 0) { /* invariant 3 */
        g_free(p);
        c->npages--;
        return ret;
    }
    p->key = key;
    p->dirty = false;
    g_hash_table_insert(c->by_key, &p->key, p);
    push_head(c, p);
    *page = p->data;
    return 0;
}

int blk_tcache_load(BlkTCache *c, uint64_t off, unsigned width, bool big_endian,
                    uint64_t *value)
{
    uint8_t *page;
    int ret = blk_tcache_get(c, off - off % c->page_size, &page);

    if (ret < 0) {
        return ret;
    }
    page += off % c->page_size;
    if (width == 8) {
        *value = big_endian ? load_be64(page) : load_le64(page);
    } else {
        *value = big_endian ? load_be32(page) : load_le32(page);
    }
    return 0;
}

int blk_tcache_store(BlkTCache *c, uint64_t off, unsigned width, bool big_endian,
                     uint64_t value)
{
    uint64_t key = off - off % c->page_size;
    uint8_t *page;
    int ret = blk_tcache_get(c, key, &page);

    if (ret < 0) {
        return ret;
    }
    page += off % c->page_size;
    if (width == 8) {
        big_endian ? store_be64(page, value) : store_le64(page, value);
    } else {
        big_endian ? store_be32(page, (uint32_t)value)
                   : store_le32(page, (uint32_t)value);
    }
    blk_tcache_mark_dirty(c, key);
    return 0;
}

uint8_t *blk_tcache_peek(BlkTCache *c, uint64_t key)
{
    Page *p = g_hash_table_lookup(c->by_key, &key);
    return p ? p->data : NULL;
}

bool blk_tcache_holds(const BlkTCache *c, uint64_t key)
{
    return g_hash_table_contains(c->by_key, &key);
}

void blk_tcache_mark_dirty(BlkTCache *c, uint64_t key)
{
    Page *p = g_hash_table_lookup(c->by_key, &key);

    if (p) {
        p->dirty = true;
    }
}

bool blk_tcache_has_dirty(const BlkTCache *c)
{
    for (const Page *p = c->head; p; p = p->next) {
        if (p->dirty) {
            return true;
        }
    }
    return false;
}

static gint cmp_u64(gconstpointer a, gconstpointer b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

GArray *blk_tcache_dirty_keys(const BlkTCache *c)
{
    GArray *keys = g_array_new(FALSE, FALSE, sizeof(uint64_t));

    for (const Page *p = c->head; p; p = p->next) {
        if (p->dirty) {
            g_array_append_val(keys, p->key);
        }
    }
    g_array_sort(keys, cmp_u64);
    return keys;
}

void blk_tcache_clean(BlkTCache *c)
{
    for (Page *p = c->head; p; p = p->next) {
        p->dirty = false;
    }
}
