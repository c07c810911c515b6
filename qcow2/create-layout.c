/*
 * qcow2/create-layout.c: the in-memory model of a fresh image (struct
 * Layout) and qemu-img's allocator replayed on it (part of create.c's
 * design; create.c says why the allocator's choices are replayed).
 *
 * Owns: the refcount blocks and L2 tables kept in memory and written at
 * checkpoints, first-fit cluster allocation from the free index, refcount
 * blocks that describe themselves, the refcount table replaced by a bigger
 * one placed after everything else, and the L1 and L2 tables.
 *
 * Invariants: create.c's list, cited as "create.c invariant N"; this file
 * keeps 3 (tables written as qemu-img writes them, a replaced refcount
 * table written before its clusters can be reused, Layout.eof) and 4
 * (metadata in memory only until a checkpoint writes it).
 */
#include "qcow2/create.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#define CREATE_MAX_REFTABLE_ENTRIES (UINT64_C(8) * 1024 * 1024) /* QEMU's limit */
/* Refcount blocks kept in memory before they are written and dropped. */
#define CREATE_REFBLOCK_CACHE_BYTES (UINT64_C(64) * 1024 * 1024)

/* ---- the layout model ---- */

static void table_free(gpointer p)
{
    Table *t = p;
    g_free(t->data);
    g_free(t);
}

void create_note_extent(Layout *L, uint64_t offset, uint64_t len)
{
    L->eof = MAX(L->eof, offset + len);
}

int create_file_write(Layout *L, BlkNode *node, uint64_t offset, const void *buf,
                      uint64_t len)
{
    int ret = blk_pwrite(node, offset, buf, len, 0);
    if (ret < 0) {
        return blk_error(-ret, "Could not write to '%s': %s", node->filename,
                         g_strerror(-ret));
    }
    return 0;
}

static gint cmp_u64(gconstpointer a, gconstpointer b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Write the dirty tables of one cache; drop them all when 'drop'. */
static int cache_flush(Layout *L, GHashTable *cache, bool drop)
{
    GHashTableIter it;
    gpointer v;
    g_autoptr(GArray) order = g_array_new(FALSE, FALSE, sizeof(uint64_t));

    /* in offset order, so the file grows the same way every time */
    g_hash_table_iter_init(&it, cache);
    while (g_hash_table_iter_next(&it, NULL, &v)) {
        Table *t = v;
        if (t->dirty) {
            g_array_append_val(order, t->offset);
        }
    }
    g_array_sort(order, cmp_u64);
    for (guint i = 0; i < order->len; i++) {
        uint64_t off = g_array_index(order, uint64_t, i);
        Table *t = g_hash_table_lookup(cache, &off);
        int ret = create_file_write(L, L->file, t->offset, t->data, L->cluster_size);
        if (ret < 0) {
            return ret;
        }
        t->dirty = false;
    }
    if (drop) {
        g_hash_table_remove_all(cache);
    }
    return 0;
}

/* A table of 'cache' at 'offset': from memory, or read back from the file. */
static int table_get(Layout *L, GHashTable *cache, uint64_t offset, Table **out)
{
    Table *t = g_hash_table_lookup(cache, &offset);

    if (!t) {
        int ret;
        t = g_new0(Table, 1);
        t->offset = offset;
        t->data = g_malloc(L->cluster_size);
        ret = blk_pread(L->file, offset, t->data, L->cluster_size);
        if (ret < 0) {
            table_free(t);
            return blk_error(-ret, "Could not read '%s': %s", L->file->filename,
                             g_strerror(-ret));
        }
        g_hash_table_insert(cache, &t->offset, t);
    }
    *out = t;
    return 0;
}

/* A new, zeroed, dirty table at 'offset' (replaces a cached one). */
static Table *table_new(Layout *L, GHashTable *cache, uint64_t offset)
{
    Table *t = g_new0(Table, 1);

    t->offset = offset;
    t->data = g_malloc0(L->cluster_size);
    t->dirty = true;
    g_hash_table_replace(cache, &t->offset, t);
    create_note_extent(L, offset, L->cluster_size);
    return t;
}

static uint64_t refblock_get(const Layout *L, const Table *rb, uint64_t index)
{
    return qcow2_refblock_get(rb->data, index, L->refcount_order);
}

static void refblock_set(const Layout *L, Table *rb, uint64_t index, uint64_t value)
{
    uint8_t *b = rb->data;

    switch (L->refcount_order) {
    case 0:
    case 1:
    case 2: {
        /* sub-byte entries, least significant bits first */
        unsigned width = 1u << L->refcount_order;
        unsigned per_byte = 8 / width;
        unsigned shift = (unsigned)(index % per_byte) * width;
        unsigned mask = ((1u << width) - 1) << shift;
        b[index / per_byte] = (uint8_t)((b[index / per_byte] & ~mask) | (value << shift));
        break;
    }
    case 3:
        b[index] = (uint8_t)value;
        break;
    case 4:
        store_be16(b + index * 2, (uint16_t)value);
        break;
    case 5:
        store_be32(b + index * 4, (uint32_t)value);
        break;
    default:
        store_be64(b + index * 8, value);
        break;
    }
    rb->dirty = true;
}

int create_get_refcount(Layout *L, uint64_t cluster, uint64_t *rc)
{
    uint64_t idx = cluster >> L->rb_bits;
    Table *rb;
    int ret;

    *rc = 0;
    if (idx >= L->reftable_size || !L->reftable[idx]) {
        return 0;
    }
    ret = table_get(L, L->refblocks, L->reftable[idx], &rb);
    if (ret < 0) {
        return ret;
    }
    *rc = refblock_get(L, rb, cluster & (L->rb_entries - 1));
    return 0;
}

/*
 * Reserve 'nb' free clusters, first fit from the free index, without
 * raising their refcounts (the free index stays after them).
 */
static int64_t alloc_noref(Layout *L, uint64_t nb)
{
    uint64_t i;

retry:
    for (i = 0; i < nb; i++) {
        uint64_t rc;
        int ret = create_get_refcount(L, L->free_index++, &rc);
        if (ret < 0) {
            return ret;
        }
        if (rc) {
            goto retry;
        }
    }
    if (((L->free_index - 1) << L->cluster_bits) >> L->cluster_bits !=
            L->free_index - 1 ||
        ((L->free_index - 1) << L->cluster_bits) > QCOW2_L2E_OFFSET_MASK) {
        return blk_error(EFBIG, "Image too large");
    }
    return (int64_t)((L->free_index - nb) << L->cluster_bits);
}

static int update_refcount(Layout *L, uint64_t offset, uint64_t length, uint64_t addend,
                           bool decrease);

/*
 * The refcount block for 'cluster'.  When there is none, one is created
 * (placed where it describes itself if it can) and hooked into the table,
 * growing the table when it is too small; then -EAGAIN tells the caller
 * that clusters it had picked may have been taken and it must search again.
 */
static int refblock_for(Layout *L, uint64_t cluster, Table **out)
{
    uint64_t idx = cluster >> L->rb_bits;
    int64_t nb, end;
    uint64_t blocks_used, meta;
    int ret;

    *out = NULL;
    if (idx < L->reftable_size && L->reftable[idx]) {
        return table_get(L, L->refblocks, L->reftable[idx], out);
    }

    nb = alloc_noref(L, 1);
    if (nb < 0) {
        return (int)nb;
    }
    if (nb == 0) {
        return blk_error(EIO, "Preventing invalid allocation of refcount block at "
                              "offset 0");
    }
    if (((uint64_t)nb >> (L->cluster_bits + L->rb_bits)) == idx) {
        /* the block describes itself */
        Table *rb = table_new(L, L->refblocks, (uint64_t)nb);
        refblock_set(L, rb, ((uint64_t)nb >> L->cluster_bits) & (L->rb_entries - 1), 1);
    } else {
        /* described by another block; recurses at most twice */
        ret = update_refcount(L, (uint64_t)nb, L->cluster_size, 1, false);
        if (ret < 0) {
            return ret;
        }
        table_new(L, L->refblocks, (uint64_t)nb);
    }

    if (idx < L->reftable_size) {
        L->reftable[idx] = (uint64_t)nb;
        return -EAGAIN;
    }

    /* The table is too small: a new one goes past everything in use. */
    blocks_used = DIV_ROUND_UP(MAX(cluster + 1, ((uint64_t)nb >> L->cluster_bits) + 1),
                               L->rb_entries);
    if (qcow2_mul(blocks_used, L->rb_entries << L->cluster_bits, &meta)) {
        return blk_error(EFBIG, "Image too large");
    }
    end = create_refcount_area(L, meta, 0, false, idx, (uint64_t)nb);
    return end < 0 ? (int)end : -EAGAIN;
}

/*
 * Add (or subtract) 'addend' to the refcount of every cluster touching
 * [offset, offset + length).  On failure the clusters already changed are
 * changed back; -EAGAIN also moves the free index back to the start.
 */
static int update_refcount(Layout *L, uint64_t offset, uint64_t length, uint64_t addend,
                           bool decrease)
{
    uint64_t start, last, cur;
    int ret = 0;

    if (length == 0) {
        return 0;
    }
    start = ROUND_DOWN(offset, L->cluster_size);
    last = ROUND_DOWN(offset + length - 1, L->cluster_size);
    for (cur = start; cur <= last; cur += L->cluster_size) {
        uint64_t ci = cur >> L->cluster_bits;
        uint64_t rc;
        Table *rb;

        ret = refblock_for(L, ci, &rb);
        if (ret == -EAGAIN && L->free_index > (start >> L->cluster_bits)) {
            L->free_index = start >> L->cluster_bits;
        }
        if (ret < 0) {
            break;
        }
        rc = refblock_get(L, rb, ci & (L->rb_entries - 1));
        if (decrease ? rc < addend : rc + addend > L->refcount_max) {
            ret = blk_error(EINVAL, "Refcount overflow at cluster %" PRIu64, ci);
            break;
        }
        rc = decrease ? rc - addend : rc + addend;
        if (rc == 0 && ci < L->free_index) {
            L->free_index = ci;
        }
        refblock_set(L, rb, ci & (L->rb_entries - 1), rc);
    }
    if (ret < 0 && cur > offset) {
        (void)update_refcount(L, offset, cur - offset, addend, !decrease);
    }
    return ret;
}

/* Allocate clusters for 'bytes' bytes (refcount 1); returns the offset. */
int64_t create_alloc_clusters(Layout *L, uint64_t bytes)
{
    int64_t off;
    int ret;

    do {
        off = alloc_noref(L, DIV_ROUND_UP(bytes, L->cluster_size));
        if (off < 0) {
            return off;
        }
        ret = update_refcount(L, (uint64_t)off, bytes, 1, false);
    } while (ret == -EAGAIN);
    return ret < 0 ? ret : off;
}

/* Allocate up to 'nb' clusters at 'offset', as many as are free in a row. */
int64_t create_alloc_clusters_at(Layout *L, uint64_t offset, uint64_t nb)
{
    uint64_t i;
    int ret;

    if (nb == 0) {
        return 0;
    }
    do {
        for (i = 0; i < nb; i++) {
            uint64_t rc;
            ret = create_get_refcount(L, (offset >> L->cluster_bits) + i, &rc);
            if (ret < 0) {
                return ret;
            }
            if (rc) {
                break;
            }
        }
        ret = update_refcount(L, offset, i << L->cluster_bits, 1, false);
    } while (ret == -EAGAIN);
    return ret < 0 ? ret : (int64_t)i;
}

/*
 * Number of refcount blocks needed to count 'clusters' clusters plus the
 * refcount structures themselves (a fixed point); 'generous' leaves room
 * for the table to grow by half.
 */
static uint64_t refblocks_needed(const Layout *L, uint64_t clusters, bool generous)
{
    uint64_t per_table_cluster = L->cluster_size / 8;
    uint64_t table = 0, blocks = 0, n = 0, last;

    do {
        last = n;
        blocks = DIV_ROUND_UP(clusters + table + blocks, L->rb_entries);
        table = DIV_ROUND_UP(blocks, per_table_cluster);
        n = clusters + blocks + table;
        if (n == last && generous) {
            clusters += DIV_ROUND_UP(table, 2);
            n = 0;
            generous = false;
        }
    } while (n != last);
    return blocks;
}

/* Write a table of host-order 64-bit entries (refcount table, L1) big-endian. */
static int write_u64_table(Layout *L, uint64_t offset, const uint64_t *table,
                           uint64_t size)
{
    g_autofree uint8_t *buf = g_try_malloc(size * 8);

    if (!buf) {
        return blk_error(ENOMEM, "Out of memory for the refcount table");
    }
    for (uint64_t i = 0; i < size; i++) {
        store_be64(buf + i * 8, table[i]);
    }
    return create_file_write(L, L->file, offset, buf, size * 8);
}

/*
 * Build new refcount structures at 'start' (which nothing uses yet): refcount
 * blocks for everything up to start + 'additional' clusters and a new
 * refcount table after them, then switch to that table and free the old one.
 * 'new_block' (if not 0) is a refcount block already made for table index
 * 'new_index'.  Returns the end of the new structures.
 */
int64_t create_refcount_area(Layout *L, uint64_t start, uint64_t additional, bool exact,
                             uint64_t new_index, uint64_t new_block)
{
    uint64_t total, area_index, table_size, table_clusters, nb_new = 0;
    uint64_t table_offset, end_offset, block_offset, max_index = 0;
    uint64_t old_offset, old_size;
    g_autofree uint64_t *table = NULL;
    int ret;

    total = refblocks_needed(L, (start >> L->cluster_bits) + additional, !exact);
    if (total > CREATE_MAX_REFTABLE_ENTRIES) {
        return blk_error(EFBIG, "Refcount table too large");
    }
    area_index = (start >> L->cluster_bits) >> L->rb_bits;
    table_size = exact ? total : total + DIV_ROUND_UP(total, 2);
    table_size = ROUND_UP(table_size, L->cluster_size / 8);
    table_clusters = table_size * 8 / L->cluster_size;
    if (table_size > CREATE_MAX_REFTABLE_ENTRIES) {
        return blk_error(EFBIG, "Refcount table too large");
    }
    table = g_try_new0(uint64_t, table_size);
    if (!table) {
        return blk_error(ENOMEM, "Out of memory for the refcount table");
    }

    for (uint64_t i = 0; i < L->reftable_size; i++) {
        if (L->reftable[i]) {
            max_index = i;
        }
    }
    memcpy(table, L->reftable, MIN(table_size, max_index + 1) * sizeof(uint64_t));
    if (new_block) {
        table[new_index] = new_block;
    }
    for (uint64_t i = area_index; i < total; i++) {
        nb_new += !table[i];
    }
    table_offset = start + nb_new * L->cluster_size;
    end_offset = table_offset + table_clusters * L->cluster_size;

    block_offset = start;
    for (uint64_t i = area_index; i < total; i++) {
        uint64_t first = (i << L->rb_bits) << L->cluster_bits;
        Table *rb;

        if (table[i]) {
            ret = table_get(L, L->refblocks, table[i], &rb);
            if (ret < 0) {
                return ret;
            }
        } else {
            rb = table_new(L, L->refblocks, block_offset);
            table[i] = block_offset;
            block_offset += L->cluster_size;
        }
        if (first < end_offset) {
            /* the new structures are in use */
            uint64_t j = first < start ? (start - first) >> L->cluster_bits : 0;
            uint64_t end = MIN((end_offset - first) >> L->cluster_bits, L->rb_entries);
            for (; j < end; j++) {
                refblock_set(L, rb, j, 1);
            }
        }
    }

    /* the new blocks first, then the new table (create.c invariant 3) */
    ret = cache_flush(L, L->refblocks, false);
    if (ret < 0) {
        return ret;
    }
    ret = write_u64_table(L, table_offset, table, table_size);
    if (ret < 0) {
        return ret;
    }
    create_note_extent(L, table_offset, table_size * 8);
    /* the old table keeps its last contents on disk */
    ret = write_u64_table(L, L->reftable_offset, L->reftable, L->reftable_size);
    if (ret < 0) {
        return ret;
    }

    old_offset = L->reftable_offset;
    old_size = L->reftable_size;
    g_free(L->reftable);
    L->reftable = g_steal_pointer(&table);
    L->reftable_size = table_size;
    L->reftable_offset = table_offset;
    (void)update_refcount(L, old_offset, old_size * 8, 1, true);
    return (int64_t)end_offset;
}

/* ---- L1 / L2 ---- */

int create_grow_l1(Layout *L, uint64_t entries)
{
    int64_t off;

    if (entries <= L->l1_size) {
        return 0;
    }
    if (entries > INT_MAX / 8 || entries > QCOW2_MAX_L1_BYTES / 8) {
        return blk_error(EFBIG, "L1 table too large");
    }
    g_free(L->l1);
    L->l1 = g_try_new0(uint64_t, entries);
    if (!L->l1) {
        return blk_error(ENOMEM, "Out of memory for the L1 table");
    }
    off = create_alloc_clusters(L, entries * 8);
    if (off < 0) {
        return (int)off;
    }
    L->l1_size = entries;
    L->l1_offset = (uint64_t)off;
    create_note_extent(L, L->l1_offset, entries * 8);
    return 0;
}

/* The L2 table mapping guest offset 'guest', allocated if there is none. */
int create_l2_for(Layout *L, uint64_t guest, Table **out)
{
    uint64_t idx = guest >> (L->cluster_bits + L->l2_bits);

    if (idx >= L->l1_size) {
        return blk_error(EIO, "Guest offset %" PRIu64 " beyond the L1 table", guest);
    }
    if (!(L->l1[idx] & QCOW2_OFLAG_COPIED)) {
        int64_t off = create_alloc_clusters(L, L->cluster_size);
        if (off < 0) {
            return (int)off;
        }
        if (off == 0) {
            return blk_error(EIO,
                             "Preventing invalid allocation of L2 table at offset 0");
        }
        table_new(L, L->l2s, (uint64_t)off);
        L->l1[idx] = (uint64_t)off | QCOW2_OFLAG_COPIED;
    }
    return table_get(L, L->l2s, L->l1[idx] & QCOW2_L1E_OFFSET_MASK, out);
}

/*
 * Map 'nb' guest clusters from 'guest' (cluster aligned, inside one L2
 * table) to host clusters from 'host', as preallocated clusters: the
 * subcluster bitmap of extended L2 entries stays 0.
 */
int create_link_l2(Layout *L, uint64_t guest, uint64_t host, uint64_t nb)
{
    uint64_t first = (guest >> L->cluster_bits) & (L->l2_entries - 1);
    Table *l2;
    int ret = create_l2_for(L, guest, &l2);

    if (ret < 0) {
        return ret;
    }
    for (uint64_t i = 0; i < nb; i++) {
        store_be64(l2->data + (first + i) * L->l2_entry_size,
                   (host + (i << L->cluster_bits)) | QCOW2_OFLAG_COPIED);
    }
    l2->dirty = true;
    return 0;
}

/* Write every table kept in memory (create.c invariant 4); drop the L2 tables and,
 * when there are many, the refcount blocks. */
int create_checkpoint(Layout *L)
{
    int ret = cache_flush(L, L->l2s, true);
    bool drop =
        g_hash_table_size(L->refblocks) * L->cluster_size > CREATE_REFBLOCK_CACHE_BYTES;

    if (ret == 0) {
        ret = cache_flush(L, L->refblocks, drop);
    }
    return ret;
}

int create_write_l1_and_reftable(Layout *L)
{
    int ret = write_u64_table(L, L->reftable_offset, L->reftable, L->reftable_size);

    if (ret == 0 && L->l1_size) {
        ret = write_u64_table(L, L->l1_offset, L->l1, L->l1_size);
    }
    return ret;
}

/* ---- putting it together ---- */

void create_layout_init(Layout *L, const CreateParams *p, BlkNode *file, BlkNode *data)
{
    memset(L, 0, sizeof(*L));
    L->p = p;
    L->file = file;
    L->data = data;
    L->cluster_bits = p->cluster_bits;
    L->cluster_size = p->cluster_size;
    L->refcount_order = p->refcount_order;
    L->rb_bits = p->cluster_bits + 3 - p->refcount_order;
    L->rb_entries = UINT64_C(1) << L->rb_bits;
    L->refcount_max = p->refcount_order == 6
                          ? UINT64_MAX
                          : (UINT64_C(1) << (1u << p->refcount_order)) - 1;
    L->l2_entry_size = p->extended_l2 ? 16 : 8;
    L->l2_bits = p->cluster_bits - (p->extended_l2 ? 4 : 3);
    L->l2_entries = UINT64_C(1) << L->l2_bits;
    L->subcluster_size =
        p->extended_l2 ? p->cluster_size / QCOW2_EXTL2_SUBCLUSTERS : p->cluster_size;
    L->refblocks = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, table_free);
    L->l2s = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, table_free);
}

void create_layout_free(Layout *L)
{
    g_free(L->reftable);
    g_free(L->l1);
    if (L->refblocks) {
        g_hash_table_destroy(L->refblocks);
    }
    if (L->l2s) {
        g_hash_table_destroy(L->l2s);
    }
}
