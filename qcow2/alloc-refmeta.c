/*
 * qcow2/alloc-refmeta.c: the refcount metadata the allocator makes (part of
 * alloc.c's design): refcount blocks for clusters about to be counted and
 * the refcount tables that replace a table too small, placed as QEMU
 * places them, the refcount area preallocation asks for, and dropping the
 * blocks a shrink leaves counting nothing (QEMU's qcow2_shrink_reftable).
 *
 * Owns: the rounds of refcount block creation, their plans and their
 * commit (the write order), waiting reftable entries (batched rounds), the
 * sizing of refcount areas, and the reftable shrink (alloc.c invariant 2's
 * order: the entries are cleared, synced, before the blocks' counts drop).
 *
 * Invariants: alloc.c's list, cited as "alloc.c invariant N"; this file
 * keeps 3 (placement, one structure per round, and the order of the
 * writes, also batched) and 7 (below 2^56).  All functions run with the
 * metadata lock held.
 */
#include "qcow2/alloc.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

typedef struct PlannedBlock {
    uint64_t ti;     /* reftable index it serves */
    uint64_t offset; /* host offset */
    uint8_t *buf;
} PlannedBlock;

typedef struct RefPlan {
    GArray *blocks; /* PlannedBlock */
    bool grow;      /* a new refcount table replaces the old one */
    uint64_t table_offset;
    uint64_t table_clusters;
    uint64_t table_entries;
} RefPlan;

static PlannedBlock *plan_block(RefPlan *p, uint64_t ti)
{
    for (guint i = 0; i < p->blocks->len; i++) {
        PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
        if (b->ti == ti) {
            return b;
        }
    }
    return NULL;
}

static void plan_add_block(RefPlan *p, uint64_t ti, uint64_t offset)
{
    PlannedBlock b = {.ti = ti, .offset = offset};
    g_array_append_val(p->blocks, b);
}

/*
 * Plan a refcount area at cluster 'start' (free, and nothing in use after
 * it): a refcount block for every reftable index from start's up to what
 * counting start + 'additional' clusters and the area itself takes (where
 * none exists or is planned), then a new refcount table after them that
 * keeps the old entries (QEMU's qcow2_refcount_area; 1.5x room unless
 * exact, never smaller than the old table).  *end: the cluster after it.
 */
static int plan_area_locked(Qcow2State *s, RefPlan *p, uint64_t start,
                            uint64_t additional, bool exact, uint64_t *end)
{
    const uint64_t max_entries = QCOW2_MAX_REFTABLE_BYTES / 8;
    uint64_t per_cluster = s->cluster_size / 8, total, entries, at = start;

    if (start + additional > (QCOW2_HOST_OFFSET_LIMIT >> s->cluster_bits)) {
        return blk_error(EFBIG, "qcow2: no free host clusters below 2^56 bytes");
    }
    total = qcow2_refblocks_for(start + additional, s->cluster_bits, s->refcount_order,
                                !exact, NULL);
    entries = exact ? total : total + DIV_ROUND_UP(total, 2);
    if (total > max_entries || entries > max_entries) {
        return blk_error(EFBIG, "qcow2: the refcount table would exceed 8 MiB");
    }
    entries = MAX(ROUND_UP(entries, per_cluster), s->refcount_table_size);
    for (uint64_t ti = start >> s->refcount_block_bits; ti < total; ti++) {
        uint64_t off;
        int ret = qcow2_refblock_offset_locked(s, ti, &off);
        if (ret < 0) {
            return ret;
        }
        if (off == 0 && !plan_block(p, ti)) {
            plan_add_block(p, ti, at << s->cluster_bits);
            at++;
        }
    }
    p->grow = true;
    p->table_offset = at << s->cluster_bits;
    p->table_clusters = entries / per_cluster;
    p->table_entries = entries;
    *end = at + p->table_clusters;
    if (*end > (QCOW2_HOST_OFFSET_LIMIT >> s->cluster_bits)) {
        return blk_error(EFBIG, "qcow2: no free host clusters below 2^56 bytes");
    }
    return 0;
}

/* +1 on one cluster whose refcount block exists, in the cache. */
static int add_existing_locked(Qcow2State *s, uint64_t idx, bool decrease)
{
    return alloc_update_core_locked(s, idx << s->cluster_bits, 1, 1, decrease);
}

/* Mark cluster idx used by something the plan creates. */
static int plan_count_locked(Qcow2State *s, RefPlan *p, uint64_t idx)
{
    PlannedBlock *b = plan_block(p, idx >> s->refcount_block_bits);

    if (b) {
        qcow2_refblock_set(b->buf, idx & (alloc_rb_entries(s) - 1), s->refcount_order, 1);
        return 0;
    }
    return add_existing_locked(s, idx, false);
}

typedef struct PendingHook {
    uint64_t ti, offset;
} PendingHook;

/* Invariant 3, deferred: the block into the cache (dirty) and its entry
 * into memory only; qcow2_settle_refblocks_locked() writes the entry. */
static int defer_block_locked(Qcow2State *s, PlannedBlock *b)
{
    PendingHook h = {b->ti, b->offset};
    void *block;
    int ret = qcow2_cache_get_empty_locked(s->refcount_cache, b->offset, &block);

    if (ret < 0) {
        return ret;
    }
    memcpy(block, b->buf, s->cluster_size);
    qcow2_cache_mark_dirty_locked(s->refcount_cache, block);
    qcow2_cache_put_locked(s->refcount_cache, &block);
    s->refcount_table[b->ti] = b->offset;
    s->refcount_table_used = MAX(s->refcount_table_used, b->ti + 1);
    if (!s->pending_hooks) {
        s->pending_hooks = g_array_new(FALSE, FALSE, sizeof(PendingHook));
    }
    g_array_append_val(s->pending_hooks, h);
    return 0;
}

void qcow2_defer_refblocks_locked(Qcow2State *s)
{
    s->defer_hooks = true;
}

static bool hook_pending(const GArray *h, const bool *done, uint64_t ti)
{
    for (guint i = 0; i < h->len; i++) {
        if (!done[i] && g_array_index(h, PendingHook, i).ti == ti) {
            return true;
        }
    }
    return false;
}

int qcow2_settle_refblocks_locked(Qcow2State *s)
{
    GArray *h = s->pending_hooks;
    g_autofree bool *done = NULL, *now = NULL;
    guint left;
    int ret;

    s->defer_hooks = false;
    if (!h || h->len == 0) {
        return 0;
    }
    /* the blocks (and every count) durable before any entry names them */
    ret = qcow2_cache_flush_locked(s->refcount_cache);
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    done = g_new0(bool, h->len);
    now = g_new0(bool, h->len);
    left = h->len;
    /* in rounds: a block once the one holding its own count is hooked and
     * flushed (itself, an older block, or one of an earlier round) */
    while (ret == 0 && left > 0) {
        guint round = 0;
        for (guint i = 0; i < h->len; i++) {
            const PendingHook *k = &g_array_index(h, PendingHook, i);
            uint64_t dti = (k->offset >> s->cluster_bits) >> s->refcount_block_bits;
            now[i] = !done[i] && (dti == k->ti || !hook_pending(h, done, dti));
        }
        for (guint i = 0; i < h->len && ret == 0; i++) {
            const PendingHook *k = &g_array_index(h, PendingHook, i);
            uint8_t e[8];
            if (!now[i]) {
                continue;
            }
            store_be64(e, k->offset);
            ret = qcow2_write_metadata_locked(
                s, BLKEV_REFBLOCK_HOOKUP, QCOW2_OL_REFCOUNT_TABLE,
                s->refcount_table_offset + k->ti * 8, e, 8, false);
            round++;
        }
        if (ret == 0) {
            ret = qcow2_flush_file(s);
        }
        for (guint i = 0; i < h->len && ret == 0; i++) {
            done[i] = done[i] || now[i]; /* after the round's flush: durable */
        }
        if (ret == 0 && round == 0) {
            ret = blk_error(EIO, "qcow2: refcount blocks that only describe each "
                                 "other cannot be hooked");
        }
        left -= round;
    }
    for (guint i = h->len; i-- > 0;) {
        if (done[i]) { /* a failure keeps the rest for meta.c invariant 13 */
            g_array_remove_index(h, i);
        }
    }
    return ret;
}

/* Before the table is replaced: the waiting entries go into the old one
 * first, as they would have without waiting (invariant 3). */
static int settle_first_locked(Qcow2State *s)
{
    int ret;

    if (!s->defer_hooks) {
        return 0;
    }
    ret = qcow2_settle_refblocks_locked(s);
    s->defer_hooks = true;
    return ret;
}

static int plan_commit_locked(Qcow2State *s, RefPlan *p)
{
    g_autofree uint64_t *counted = NULL; /* clusters raised in existing blocks */
    g_autofree uint8_t *table = NULL;
    uint64_t ncounted = 0, nplaced = p->blocks->len + (p->grow ? p->table_clusters : 0);
    bool written = false;
    int ret = 0;

    if (nplaced == 0) {
        return 0;
    }
    qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
    counted = g_new(uint64_t, nplaced);
    for (guint i = 0; i < p->blocks->len; i++) {
        PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
        b->buf = g_malloc0(s->cluster_size);
        alloc_raise_file_size(s, b->offset + s->cluster_size);
    }
    if (p->grow) {
        alloc_raise_file_size(s, p->table_offset + p->table_clusters * s->cluster_size);
    }
    /* Raise the counts of everything placed (blocks, then the table). */
    for (uint64_t k = 0; k < nplaced && ret == 0; k++) {
        uint64_t idx =
            k < p->blocks->len
                ? g_array_index(p->blocks, PlannedBlock, k).offset >> s->cluster_bits
                : (p->table_offset >> s->cluster_bits) + (k - p->blocks->len);
        bool in_plan = plan_block(p, idx >> s->refcount_block_bits) != NULL;
        ret = plan_count_locked(s, p, idx);
        if (ret == 0 && !in_plan) {
            counted[ncounted++] = idx;
        }
    }
    if (ret == 0 && !p->grow && s->defer_hooks) {
        ret = defer_block_locked(s, &g_array_index(p->blocks, PlannedBlock, 0));
        if (ret < 0) {
            goto rollback;
        }
        return 0;
    }
    for (guint i = 0; i < p->blocks->len && ret == 0; i++) {
        PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
        ret = qcow2_write_metadata_locked(s, BLKEV_REFBLOCK_ALLOC, 0, b->offset, b->buf,
                                          s->cluster_size, false);
    }
    if (ret == 0) {
        ret = qcow2_cache_flush_locked(s->refcount_cache);
    }
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    if (ret < 0) {
        goto rollback;
    }

    if (p->grow) {
        uint64_t bytes = p->table_clusters * s->cluster_size;
        uint64_t old_offset = s->refcount_table_offset, old_size = s->refcount_table_size;
        uint64_t *mem = g_new0(uint64_t, p->table_entries);
        uint8_t hdr[12];

        table = g_malloc0(bytes);
        memcpy(mem, s->refcount_table, MIN(old_size, p->table_entries) * 8);
        for (guint i = 0; i < p->blocks->len; i++) {
            PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, i);
            mem[b->ti] = b->offset;
        }
        for (uint64_t i = 0; i < p->table_entries; i++) {
            store_be64(table + i * 8, mem[i]);
        }
        ret = qcow2_write_metadata_locked(s, BLKEV_REFTABLE_GROW, 0, p->table_offset,
                                          table, bytes, true);
        if (ret == 0) {
            qcow2_assert_refcounts_durable_locked(s, "alloc.c invariant 3");
            qcow2_assert_durable(s->img->file, s->table_gen, "alloc.c invariant 3");
            store_be64(hdr, p->table_offset);
            store_be32(hdr + 8, (uint32_t)p->table_clusters);
            ret = qcow2_write_header_ex_locked(s, BLKEV_REFTABLE_GROW,
                                               QCOW2_HDR_REFCOUNT_TABLE_OFFSET, hdr,
                                               sizeof(hdr), &written);
        }
        if (!written) {
            g_free(mem);
            goto rollback;
        }
        /* The file names the new table now, even if the flush failed
         * (meta.c invariant 4): memory follows, the old table is kept. */
        g_free(s->refcount_table);
        s->refcount_table = mem;
        s->refcount_table_offset = p->table_offset;
        s->refcount_table_size = p->table_entries;
        qcow2_reftable_count_used(s);
        if (ret < 0) {
            return ret;
        }
        qcow2_free_clusters_locked(s, old_offset, old_size * 8); /* invariant 2 */
    } else {
        /* Invariant 3: one block, whose own refcount is in itself or in an
         * existing (hooked, durable) block, so the entry never names a
         * block whose count reads 0. */
        PlannedBlock *b = &g_array_index(p->blocks, PlannedBlock, 0);
        uint8_t e[8];

        g_assert(p->blocks->len == 1);
        qcow2_assert_refcounts_durable_locked(s, "alloc.c invariant 3");
        store_be64(e, b->offset);
        ret =
            qcow2_write_metadata_locked(s, BLKEV_REFBLOCK_HOOKUP, QCOW2_OL_REFCOUNT_TABLE,
                                        s->refcount_table_offset + b->ti * 8, e, 8, true);
        if (ret < 0) {
            goto rollback;
        }
        s->refcount_table[b->ti] = b->offset;
        s->refcount_table_used = MAX(s->refcount_table_used, b->ti + 1);
    }
    return 0;

rollback : {
    /* Nothing refers to the new blocks or table; undo the counts raised in
     * existing blocks (a failure here only leaks) -- unless a write failed,
     * which may have reached the file: then a leak (meta.c invariant 9). */
    bool had_error = blk_error_mark();
    for (uint64_t k = 0; k < ncounted && !s->sticky_error; k++) {
        (void)add_existing_locked(s, counted[k], true);
    }
    blk_error_unwind(had_error);
    return ret;
}
}

static void plan_free(RefPlan *p)
{
    for (guint i = 0; i < p->blocks->len; i++) {
        g_free(g_array_index(p->blocks, PlannedBlock, i).buf);
    }
    g_array_free(p->blocks, TRUE);
}

/*
 * One round of invariant 3 (QEMU's alloc_refcount_block) for cluster c:
 * the refcount block of c's index goes at the first free cluster from
 * *cursor on, counted by itself or by the existing block of its own index;
 * when that one is missing too it is made instead (c's block waits for the
 * next round).  An index past the table brings a new table.  Committed.
 */
static int make_block_locked(Qcow2State *s, uint64_t c, uint64_t *cursor)
{
    uint64_t ti = c >> s->refcount_block_bits, nb, off, end;
    RefPlan p = {.blocks = g_array_new(FALSE, TRUE, sizeof(PlannedBlock))};
    int ret = alloc_find_free_run_locked(s, *cursor, 1, &nb);

    if (ret < 0) {
        goto out;
    }
    *cursor = nb + 1;
    if ((nb >> s->refcount_block_bits) != ti) {
        ret = qcow2_refblock_offset_locked(s, nb >> s->refcount_block_bits, &off);
        if (ret == 0 && off == 0) {
            plan_free(&p);
            return make_block_locked(s, nb, cursor); /* at most twice */
        }
        if (ret < 0) {
            goto out;
        }
    }
    plan_add_block(&p, ti, nb << s->cluster_bits);
    if (ti >= s->refcount_table_size) {
        ret = settle_first_locked(s);
    }
    if (ret == 0 && ti >= s->refcount_table_size) {
        /* the area starts at the first block boundary past c and nb */
        uint64_t used = DIV_ROUND_UP(MAX(c, nb) + 1, alloc_rb_entries(s));
        ret = plan_area_locked(s, &p, used << s->refcount_block_bits, 0, false, &end);
    }
    if (ret == 0) {
        ret = plan_commit_locked(s, &p);
    }
out:
    plan_free(&p);
    return ret;
}

/*
 * QEMU searches for a refcount block from its free index, which its
 * allocation moved past the clusters being counted, and nothing else did
 * (an allocation at a given offset, write.c invariant 20): from 0 it meets
 * the header's cluster when the refcount structure calls it free, and
 * refuses ("Preventing invalid allocation of refcount block at offset 0",
 * 060).  Where a block goes otherwise is invariant 3's, past the range.
 */
static int header_free_locked(Qcow2State *s, uint64_t first)
{
    uint64_t refcount;
    int ret;

    if (s->free_cluster_index != 0 || first == 0) {
        return 0; /* first == 0: the search's own run starts there */
    }
    ret = qcow2_get_refcount_locked(s, 0, &refcount);
    if (ret == 0 && refcount == 0) {
        ret = qcow2_corrupt_locked(s, "Preventing invalid allocation of refcount block "
                                      "at offset 0");
    }
    return ret;
}

/*
 * Invariant 3: a round for the first cluster of [first, first + n) without
 * a refcount block, its block searched for from past the range and the free
 * index.  1: something was made (the caller searches again: QEMU's
 * -EAGAIN), 0: every cluster has its block.
 */
int alloc_cover_round_locked(Qcow2State *s, uint64_t first, uint64_t n)
{
    uint64_t ti_end = ((first + n - 1) >> s->refcount_block_bits) + 1;

    for (uint64_t ti = first >> s->refcount_block_bits; ti < ti_end; ti++) {
        uint64_t off, cursor;
        int ret = qcow2_refblock_offset_locked(s, ti, &off);

        if (ret < 0) {
            return ret;
        }
        if (off == 0) {
            blk_event(s->img->file, BLKEV_REFBLOCK_GET); /* QEMU's refblock_alloc */
            ret = header_free_locked(s, first);
            if (ret < 0) {
                return ret;
            }
            cursor = MAX(s->free_cluster_index, first + n);
            ret = make_block_locked(s, MAX(first, ti << s->refcount_block_bits), &cursor);
            return ret < 0 ? ret : 1;
        }
    }
    return 0;
}

int64_t qcow2_refcount_area_locked(Qcow2State *s, uint64_t offset, uint64_t additional)
{
    RefPlan p = {.blocks = g_array_new(FALSE, TRUE, sizeof(PlannedBlock))};
    uint64_t end = 0;
    int ret = settle_first_locked(s);

    if (ret == 0) {
        ret = plan_area_locked(s, &p, offset >> s->cluster_bits, additional, true, &end);
    }

    if (ret == 0) {
        ret = plan_commit_locked(s, &p);
    }
    plan_free(&p);
    return ret < 0 ? ret : (int64_t)(end << s->cluster_bits);
}

/* A refcount block that counts nothing but (perhaps) itself.  A block past
 * the end of the file reads as zeros, as the file does (QEMU reads it
 * through its cache); an unaligned one is refused as QEMU's refcount block
 * cache refuses it (refcount.c invariant 5); any other bad entry is
 * refcount.c invariant 3's corruption. */
static int refblock_unused_locked(Qcow2State *s, uint64_t ti, bool *unused)
{
    uint64_t entry = s->refcount_table[ti], offset, own = UINT64_MAX;
    uint64_t block_offset = entry & QCOW2_REFT_OFFSET_MASK;
    void *block;
    bool zero = true;
    int ret;

    *unused = false;
    if (!(entry & QCOW2_REFT_RESERVED_MASK) &&
        qcow2_offset_into_cluster(s, block_offset)) {
        return qcow2_refblock_unaligned_locked(s, block_offset);
    }
    if (!(entry & QCOW2_REFT_RESERVED_MASK) &&
        !qcow2_range_within(block_offset, s->cluster_size, s->file_size)) {
        *unused = true;
        return 0;
    }
    ret = qcow2_refblock_offset_locked(s, ti, &offset);
    if (ret < 0 || offset == 0) {
        return ret;
    }
    if ((offset >> s->cluster_bits) >> s->refcount_block_bits == ti) {
        own = (offset >> s->cluster_bits) & (alloc_rb_entries(s) - 1);
    }
    ret = qcow2_cache_get_locked(s->refcount_cache, offset, &block);
    if (ret < 0) {
        return ret;
    }
    for (uint64_t i = 0; i < alloc_rb_entries(s) && zero; i++) {
        zero = i == own || qcow2_refblock_get(block, i, s->refcount_order) == 0;
    }
    qcow2_cache_put_locked(s->refcount_cache, &block);
    *unused = zero;
    return 0;
}

/* Drop the refcount of a block the reftable no longer names (it must be 1;
 * the block that counts it must exist) and the block from the cache. */
static int discard_refblock_locked(Qcow2State *s, uint64_t offset)
{
    uint64_t ti = (offset >> s->cluster_bits) >> s->refcount_block_bits, refcount;
    int ret;

    if (ti >= s->refcount_table_size ||
        !(s->refcount_table[ti] & QCOW2_REFT_OFFSET_MASK)) {
        return qcow2_corrupt_locked(
            s, "Refblock at %#" PRIx64 " is not covered by the refcount structures",
            offset);
    }
    ret = qcow2_get_refcount_locked(s, offset >> s->cluster_bits, &refcount);
    if (ret < 0) {
        return ret;
    }
    if (refcount != 1) {
        return qcow2_corrupt_locked(
            s,
            "Invalid refcount: refblock offset %#" PRIx64 ", reftable index %#" PRIx64
            ", block offset %#" PRIx64 ", refcount %#" PRIx64,
            s->refcount_table[ti] & QCOW2_REFT_OFFSET_MASK, ti, offset, refcount);
    }
    /* A self-describing block is held while it drops its own count, so the
     * free cannot take it out of the cache (cache.c): done here. */
    qcow2_free_clusters_as_locked(s, offset, s->cluster_size, QCOW2_DISCARD_ALWAYS);
    qcow2_cache_discard_locked(s->refcount_cache, offset);
    return 0;
}

int qcow2_shrink_reftable_locked(Qcow2State *s)
{
    uint64_t n = s->refcount_table_size;
    g_autofree uint8_t *table = g_malloc(n * 8);
    g_autofree bool *drop = g_new0(bool, n);
    bool any = false;
    int ret = qcow2_flush_all_locked(s); /* the blocks on disk are what we look at */

    for (uint64_t i = 0; ret == 0 && i < n; i++) {
        if (s->refcount_table[i] & QCOW2_REFT_OFFSET_MASK) {
            ret = refblock_unused_locked(s, i, &drop[i]);
        }
        any |= drop[i];
        store_be64(table + i * 8, drop[i] ? 0 : s->refcount_table[i]);
    }
    if (ret < 0 || !any) {
        return ret;
    }
    /* alloc.c invariant 2: the entries are gone on disk before the blocks'
     * own counts drop */
    ret = qcow2_write_metadata_locked(s, BLKEV_NONE, QCOW2_OL_REFCOUNT_TABLE,
                                      s->refcount_table_offset, table, n * 8, true);
    for (uint64_t i = 0; i < n; i++) {
        if (drop[i]) {
            if (ret == 0) {
                ret = discard_refblock_locked(s, s->refcount_table[i] &
                                                     QCOW2_REFT_OFFSET_MASK);
            }
            s->refcount_table[i] = 0;
        }
    }
    qcow2_reftable_count_used(s);
    return ret;
}
