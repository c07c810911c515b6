/*
 * qcow2/amend-refcount.c: changing the refcount width (qemu-img amend -o
 * refcount_bits=N; part of amend.c's design).
 *
 * Owns: the plan of the new refcount structures (where the new refcount
 * blocks and table go, what each new entry holds), writing them, and the
 * in-memory switch to them.
 *
 * Invariants: amend.c's list, cited as "amend.c invariant N"; this file
 * keeps 5.  All functions run with the metadata lock held.
 */
#include "qcow2/header-edit.h"
#include "qcow2/alloc.h"
#include "qcow2/amend.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

/*
 * A bit per cluster, in chunks of BITS_CHUNK bits made when a bit in them
 * is first set: the memory follows the clusters in use, never the indexes
 * an image's reftable could name (DESIGN.md rule 4; a reftable entry far
 * out does not make a gigabyte bitmap).
 */
#define BITS_CHUNK (UINT64_C(1) << 16)

typedef struct Bits {
    GHashTable *chunks; /* chunk index (uint64_t *) -> BITS_CHUNK / 8 bytes */
} Bits;

static void bits_init(Bits *b)
{
    b->chunks = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
}

static void bits_free(Bits *b)
{
    g_hash_table_destroy(b->chunks);
}

static void bit_set(Bits *b, uint64_t i)
{
    uint64_t key = i / BITS_CHUNK;
    uint8_t *chunk = g_hash_table_lookup(b->chunks, &key);

    if (!chunk) {
        chunk = g_malloc0(BITS_CHUNK / 8);
        g_hash_table_insert(b->chunks, g_memdup2(&key, sizeof(key)), chunk);
    }
    i %= BITS_CHUNK;
    chunk[i / 8] |= (uint8_t)(1u << (i % 8));
}

static bool bit_get(const Bits *b, uint64_t i)
{
    uint64_t key = i / BITS_CHUNK;
    const uint8_t *chunk = g_hash_table_lookup(b->chunks, &key);

    i %= BITS_CHUNK;
    return chunk && (chunk[i / 8] >> (i % 8)) & 1;
}

typedef struct Reorder {
    Qcow2State *s;
    uint32_t order, block_bits; /* the new width and entries per block (log2) */
    uint64_t max;               /* the new largest refcount */
    Bits used;                  /* old refcount > 0 */
    Bits meta;                  /* an old refcount block or table cluster */
    Bits counted;               /* new refcount > 0 without the new structures */
    GArray *base_ranges; /* uint64_t: new reftable indexes 'counted' needs, ascending */
    GArray *blocks;      /* uint64_t: clusters of the new blocks, ascending */
    uint64_t table_start, table_clusters;
    GArray *ranges; /* uint64_t: new reftable indexes that get a block, ascending */
    Bits placed;    /* the clusters of the new structures (after place()) */
} Reorder;

static void reorder_free(Reorder *r)
{
    bits_free(&r->used);
    bits_free(&r->meta);
    bits_free(&r->counted);
    bits_free(&r->placed);
    g_array_free(r->base_ranges, TRUE);
    g_array_free(r->blocks, TRUE);
    g_array_free(r->ranges, TRUE);
}

/* The old structures (they read as free in the new ones, invariant 5). */
static int mark_meta_locked(Reorder *r)
{
    Qcow2State *s = r->s;
    uint64_t first = s->refcount_table_offset >> s->cluster_bits;
    uint64_t n = DIV_ROUND_UP(s->refcount_table_size * 8, s->cluster_size);

    for (uint64_t i = 0; i < n; i++) {
        bit_set(&r->meta, first + i);
    }
    for (uint64_t ti = 0; ti < s->refcount_table_used; ti++) {
        uint64_t off;
        int ret = qcow2_refblock_offset_locked(s, ti, &off);
        if (ret < 0) {
            return ret;
        }
        if (off && bit_get(&r->meta, off >> s->cluster_bits)) {
            /* the scan's work stays what the file holds (DESIGN.md rule 4) */
            return qcow2_corrupt_locked(s,
                                        "Refcount block at 0x%" PRIx64
                                        " (reftable index 0x%" PRIx64
                                        ") is also another refcount structure",
                                        off, ti);
        }
        if (off) {
            bit_set(&r->meta, off >> s->cluster_bits);
        }
    }
    return 0;
}

/* Every old refcount: used and counted clusters, and the check that it
 * fits the new width (QEMU's message). */
static int scan_locked(Reorder *r)
{
    Qcow2State *s = r->s;
    uint64_t per_block = UINT64_C(1) << s->refcount_block_bits;

    for (uint64_t ti = 0; ti < s->refcount_table_used; ti++) {
        uint64_t off;
        void *block;
        int ret = qcow2_refblock_offset_locked(s, ti, &off);

        if (ret == 0 && off) {
            ret = qcow2_cache_get_locked(s->refcount_cache, off, &block);
        }
        if (ret < 0) {
            return ret;
        }
        if (!off) {
            continue;
        }
        for (uint64_t bi = 0; bi < per_block; bi++) {
            uint64_t c = ti * per_block + bi;
            uint64_t v = qcow2_refblock_get(block, bi, s->refcount_order);
            if (v == 0) {
                continue;
            }
            if (v > r->max) {
                qcow2_cache_put_locked(s->refcount_cache, &block);
                return blk_error(EINVAL,
                                 "Cannot decrease refcount entry width to %u bits: "
                                 "Cluster at offset %#" PRIx64
                                 " has a refcount of %" PRIu64,
                                 1u << r->order, c << s->cluster_bits, v);
            }
            bit_set(&r->used, c);
            if (v > (uint64_t)bit_get(&r->meta, c)) {
                uint64_t nti = c >> r->block_bits;
                bit_set(&r->counted, c);
                /* clusters come in ascending order: so do their ranges */
                if (r->base_ranges->len == 0 ||
                    g_array_index(r->base_ranges, uint64_t, r->base_ranges->len - 1) !=
                        nti) {
                    g_array_append_val(r->base_ranges, nti);
                }
            }
        }
        qcow2_cache_put_locked(s->refcount_cache, &block);
    }
    return 0;
}

/* In use in the old structures: counted, or an old refcount structure
 * (even one whose own count a damaged image lost). */
static bool taken(const Reorder *r, uint64_t c)
{
    return bit_get(&r->used, c) || bit_get(&r->meta, c);
}

static bool is_placed(const Reorder *r, uint64_t c)
{
    if (c >= r->table_start && c < r->table_start + r->table_clusters) {
        return true;
    }
    for (guint i = 0; i < r->blocks->len; i++) {
        if (g_array_index(r->blocks, uint64_t, i) == c) {
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

/* The new reftable indexes that need a block (r->ranges, ascending):
 * base_ranges and the ranges of the new structures; returns how many
 * table clusters they take. */
static uint64_t needed_ranges(Reorder *r)
{
    Qcow2State *s = r->s;
    guint n = 0;

    g_array_set_size(r->ranges, 0);
    g_array_append_vals(r->ranges, r->base_ranges->data, r->base_ranges->len);
    for (uint64_t k = 0; k < r->blocks->len + r->table_clusters; k++) {
        uint64_t c = k < r->blocks->len ? g_array_index(r->blocks, uint64_t, k)
                                        : r->table_start + (k - r->blocks->len);
        uint64_t ti = c >> r->block_bits;
        g_array_append_val(r->ranges, ti);
    }
    g_array_sort(r->ranges, cmp_u64);
    for (guint i = 0; i < r->ranges->len; i++) { /* unique */
        uint64_t ti = g_array_index(r->ranges, uint64_t, i);
        if (n == 0 || g_array_index(r->ranges, uint64_t, n - 1) != ti) {
            g_array_index(r->ranges, uint64_t, n++) = ti;
        }
    }
    g_array_set_size(r->ranges, n);
    if (n == 0) {
        return 1;
    }
    return MAX(DIV_ROUND_UP((g_array_index(r->ranges, uint64_t, n - 1) + 1) * 8,
                            s->cluster_size),
               1);
}

/*
 * Invariant 5: place nblocks blocks at the first clusters free in the old
 * structures, then the table (ntable clusters) at the first run of free
 * clusters after that, as QEMU's allocator would; grow the counts until
 * they cover themselves (they only grow, so this ends), then drop blocks
 * no range needs.
 */
static int place(Reorder *r, unsigned *rounds)
{
    Qcow2State *s = r->s;
    uint64_t nblocks = 0, ntable = 1, limit = QCOW2_HOST_OFFSET_LIMIT >> s->cluster_bits;

    nblocks = r->base_ranges->len;
    for (*rounds = 1;; ++*rounds) {
        uint64_t c = 0, need_table, run = 0;

        g_array_set_size(r->blocks, 0);
        r->table_clusters = 0;
        while (r->blocks->len < nblocks) {
            if (!taken(r, c)) {
                g_array_append_val(r->blocks, c);
            }
            c++;
        }
        for (c = 0; run < ntable; c++) {
            if (taken(r, c) || is_placed(r, c)) {
                run = 0;
            } else if (run++ == 0) {
                r->table_start = c;
            }
        }
        r->table_clusters = ntable;
        if (r->table_start + ntable > limit ||
            ntable * s->cluster_size > QCOW2_MAX_REFTABLE_BYTES) {
            return blk_error(EFBIG, "qcow2: the new refcount structures do not fit");
        }
        need_table = needed_ranges(r);
        if (r->ranges->len <= nblocks && need_table <= ntable) {
            break;
        }
        nblocks = MAX(nblocks, r->ranges->len);
        ntable = MAX(ntable, need_table);
    }
    while (r->blocks->len > r->ranges->len) {
        g_array_set_size(r->blocks, r->blocks->len - 1);
        needed_ranges(r);
    }
    for (guint k = 0; k < r->blocks->len; k++) {
        bit_set(&r->placed, g_array_index(r->blocks, uint64_t, k));
    }
    for (uint64_t k = 0; k < r->table_clusters; k++) {
        bit_set(&r->placed, r->table_start + k);
    }
    return 0;
}

/* The new block for reftable index ti (invariant 5: the old counts, the
 * old structures free, the new ones 1). */
static int fill_block_locked(Reorder *r, uint64_t ti, uint8_t *buf)
{
    Qcow2State *s = r->s;
    uint64_t per_block = UINT64_C(1) << r->block_bits;

    memset(buf, 0, s->cluster_size);
    for (uint64_t bi = 0; bi < per_block; bi++) {
        uint64_t c = ti * per_block + bi, v = 0;
        if (bit_get(&r->counted, c)) {
            int ret = qcow2_get_refcount_locked(s, c, &v);
            if (ret < 0) {
                return ret;
            }
            v -= bit_get(&r->meta, c);
        } else if (bit_get(&r->placed, c)) {
            v = 1;
        }
        if (v) {
            qcow2_refblock_set(buf, bi, r->order, v);
        }
    }
    return 0;
}

/* Write the planned blocks and table; nothing names them yet. */
static int write_new_locked(Reorder *r, uint64_t **table)
{
    Qcow2State *s = r->s;
    uint64_t entries = r->table_clusters * s->cluster_size / 8;
    g_autofree uint8_t *buf = g_malloc(s->cluster_size);
    g_autofree uint8_t *tbuf = g_malloc0(r->table_clusters * s->cluster_size);
    uint64_t *mem = g_new0(uint64_t, entries);
    int ret = 0;

    alloc_raise_file_size(s, (r->table_start + r->table_clusters) << s->cluster_bits);
    for (guint k = 0; k < r->blocks->len; k++) {
        alloc_raise_file_size(s, (g_array_index(r->blocks, uint64_t, k) + 1)
                                     << s->cluster_bits);
    }
    for (guint k = 0; k < r->ranges->len && ret == 0; k++) {
        uint64_t ti = g_array_index(r->ranges, uint64_t, k);
        uint64_t off = g_array_index(r->blocks, uint64_t, k) << s->cluster_bits;
        ret = fill_block_locked(r, ti, buf);
        if (ret == 0) {
            ret = qcow2_write_metadata_locked(s, BLKEV_REFBLOCK_ALLOC, 0, off, buf,
                                              s->cluster_size, false);
        }
        mem[ti] = off;
        store_be64(tbuf + ti * 8, off);
    }
    if (ret == 0) {
        ret = qcow2_write_metadata_locked(s, BLKEV_REFTABLE_GROW, 0,
                                          r->table_start << s->cluster_bits, tbuf,
                                          r->table_clusters * s->cluster_size, true);
    }
    if (ret < 0) {
        g_free(mem);
        return ret;
    }
    *table = mem;
    return 0;
}

/*
 * Invariant 7: the progress QEMU reports for this operation, one step per
 * entry of the old reftable in each of its walks over it: 'walks' that
 * find what to allocate (the placement's rounds plus the one that finds
 * nothing more), then the one that writes the blocks (write).
 */
static void report_walks(Qcow2State *s, Qcow2AmendProgress *p, int op, unsigned walks,
                         bool write)
{
    uint64_t n = s->refcount_table_size;

    for (unsigned w = write ? walks : 0; w < (write ? walks + 1 : walks); w++) {
        uint64_t total = write ? walks + 1 : MAX(w + 2, 3);
        for (uint64_t i = 0; i < n; i++) {
            qcow2_amend_progress(p, op, w * n + i, total * n);
        }
        qcow2_amend_progress(p, op, (w + 1) * n, total * n);
    }
}

int qcow2_amend_refcount_order_locked(Qcow2State *s, uint32_t order,
                                      Qcow2AmendProgress *p, int op)
{
    Reorder r = {
        .s = s,
        .order = order,
        .block_bits = s->cluster_bits + 3 - order,
        .max = order == 6 ? UINT64_MAX : (UINT64_C(1) << (1u << order)) - 1,
        .base_ranges = g_array_new(FALSE, FALSE, sizeof(uint64_t)),
        .blocks = g_array_new(FALSE, FALSE, sizeof(uint64_t)),
        .ranges = g_array_new(FALSE, FALSE, sizeof(uint64_t)),
    };
    Qcow2HeaderEdit e = {.set_refcount = true, .refcount_order = order};
    uint64_t *table = NULL;
    unsigned rounds = 0;
    int ret;

    bits_init(&r.used);
    bits_init(&r.meta);
    bits_init(&r.counted);
    bits_init(&r.placed);
    /* invariant 5: everything durable and every free applied, so that the
     * old counts are the final ones */
    ret = qcow2_flush_all_locked(s);
    if (ret == 0) {
        ret = mark_meta_locked(&r);
    }
    if (ret == 0) {
        ret = scan_locked(&r);
    }
    if (ret == 0) {
        ret = place(&r, &rounds);
    }
    if (ret == 0) {
        qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
        report_walks(s, p, op, rounds + 1, false);
        ret = write_new_locked(&r, &table);
    }
    if (ret < 0) {
        reorder_free(&r);
        return ret;
    }
    report_walks(s, p, op, rounds + 1, true);
    /* invariant 5: the one synced header write that switches */
    e.reftable_offset = r.table_start << s->cluster_bits;
    e.reftable_clusters = (uint32_t)r.table_clusters;
    ret = qcow2_header_rewrite_locked(s, &e);
    if (ret < 0) {
        g_free(table);
        reorder_free(&r);
        return ret;
    }
    for (uint64_t ti = 0; ti < s->refcount_table_used; ti++) {
        uint64_t off = s->refcount_table[ti] & QCOW2_REFT_OFFSET_MASK;
        if (off) {
            qcow2_cache_discard_locked(s->refcount_cache, off); /* old format */
        }
    }
    g_free(s->refcount_table);
    s->refcount_table = table;
    s->refcount_table_offset = e.reftable_offset;
    s->refcount_table_size = r.table_clusters * s->cluster_size / 8;
    qcow2_reftable_count_used(s);
    s->refcount_order = order;
    s->refcount_bits = 1u << order;
    s->refcount_block_bits = r.block_bits;
    s->refcount_max = r.max;
    s->free_cluster_index = 0; /* the old structures are free now */
    s->free_byte_offset = 0;
    reorder_free(&r);
    return 0;
}
