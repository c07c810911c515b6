/*
 * qcow2/amend-zero.c: turning zero clusters into what a v2 image can say
 * (part of amend.c's design: the compat=0.10 downgrade).
 *
 * Owns: the walk over the L2 tables of the active L1 and of every
 * snapshot's L1, and the rewrite of each table that has zero entries.
 *
 * Invariants: amend.c's list, cited as "amend.c invariant N"; this file
 * keeps 4.  All functions run with the metadata lock held.
 */
#include "qcow2/amend.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

/* A reference an entry dropped: the old cluster loses 'count' of them once
 * the table no longer naming it is durable (DESIGN.md rule 1); 'fresh':
 * the new cluster that replaced it (or 0). */
typedef struct Dropped {
    uint64_t offset, count, fresh;
} Dropped;

/* A new zeroed cluster for the entry of guest offset guest in a table
 * l2_refcount L1 entries name: refcount l2_refcount (QEMU's), zeros written
 * (not yet flushed; encrypted zeros on an encrypted image, crypt.c
 * invariant 1). */
static int64_t new_zero_cluster_locked(Qcow2State *s, uint64_t l2_refcount,
                                       uint64_t guest)
{
    int64_t off = qcow2_alloc_clusters_locked(s, 1);
    int ret;

    if (off < 0) {
        return off;
    }
    if (off == 0) {
        return qcow2_corrupt_locked(s, "Preventing invalid allocation of a data cluster "
                                       "at offset 0");
    }
    ret = l2_refcount > 1 ? qcow2_update_refcount_locked(
                                s, (uint64_t)off, s->cluster_size, l2_refcount - 1, false)
                          : 0;
    if (ret == 0) {
        ret = qcow2_pre_write_overlap_check_locked(s, 0, (uint64_t)off, s->cluster_size);
    }
    if (ret == 0) {
        blk_event(s->img->file, BLKEV_DATA_WRITE);
        ret = qcow2_data_pwrite_zeroes(s, (uint64_t)off, guest, s->cluster_size, 0);
    }
    if (ret < 0) {
        qcow2_free_clusters_locked(s, (uint64_t)off, s->cluster_size);
        return ret;
    }
    return off;
}

/*
 * Invariant 4 for one entry: its new value in *entry; a reference to drop
 * in *drop (count 0: none).
 */
static int expand_entry_locked(Qcow2State *s, uint64_t *entry, uint64_t l2_refcount,
                               uint64_t l2_offset, uint64_t l2_index, uint64_t guest,
                               Dropped *drop)
{
    uint64_t host = *entry & QCOW2_L2E_OFFSET_MASK, refcount = 0;
    uint64_t copied = l2_refcount == 1 ? QCOW2_OFLAG_COPIED : 0;
    int64_t off;
    int ret;

    drop->count = 0;
    drop->fresh = 0;
    if (host == 0 && !s->img->backing_filename) {
        *entry = 0; /* unallocated reads as zeros without a backing file */
        return 0;
    }
    if (host) {
        if (qcow2_offset_into_cluster(s, host) ||
            !qcow2_range_within(host, s->cluster_size, s->file_size)) {
            return qcow2_corrupt_locked(s,
                                        "Cluster allocation offset 0x%" PRIx64
                                        " unaligned or past the end of the file (L2 "
                                        "offset: 0x%" PRIx64 ", L2 index: %#" PRIx64 ")",
                                        host, l2_offset, l2_index);
        }
        ret = qcow2_get_refcount_locked(s, host >> s->cluster_bits, &refcount);
        if (ret < 0) {
            return ret;
        }
    }
    if (host && refcount == l2_refcount) {
        /* only the entries of this table reference it: zero it in place */
        ret = qcow2_pre_write_overlap_check_locked(s, 0, host, s->cluster_size);
        if (ret == 0) {
            blk_event(s->img->file, BLKEV_DATA_WRITE);
            ret = qcow2_data_pwrite_zeroes(s, host, guest, s->cluster_size, 0);
        }
        if (ret < 0) {
            return ret;
        }
        *entry = host | copied;
        return 0;
    }
    /* plain zero over a backing file, or a preallocated cluster that other
     * tables (a snapshot) still read: a new one (QEMU 7.2 zeroes the
     * shared cluster in place and so a snapshot's data) */
    off = new_zero_cluster_locked(s, l2_refcount, guest);
    if (off < 0) {
        return (int)off;
    }
    drop->offset = host;
    drop->count = host ? l2_refcount : 0;
    drop->fresh = (uint64_t)off;
    *entry = (uint64_t)off | copied;
    return 0;
}

/* A table rewritten in memory, waiting for its batch's barriers. */
typedef struct Table {
    uint64_t offset, guest, refcount; /* where, what it maps, who names it */
    uint8_t *buf;
    GArray *drops; /* Dropped */
} Table;

/* Invariant 4 in batches: the tables of one L1 table, up to
 * BATCH_TABLES at a time, share one barrier for their new clusters and
 * one for themselves (QEMU's cache flushes once at the end). */
#define BATCH_TABLES 64u

static void table_free(gpointer p)
{
    Table *t = p;
    g_free(t->buf);
    g_array_free(t->drops, TRUE);
    g_free(t);
}

/* Nothing on disk names the batch's new clusters: freed at once. */
static void batch_abort_locked(Qcow2State *s, GPtrArray *batch)
{
    for (guint i = 0; i < batch->len; i++) {
        const Table *t = batch->pdata[i];
        for (guint j = 0; j < t->drops->len; j++) {
            const Dropped *d = &g_array_index(t->drops, Dropped, j);
            for (uint64_t k = 0; d->fresh && k < t->refcount; k++) {
                qcow2_free_clusters_locked(s, d->fresh, s->cluster_size);
            }
        }
    }
    g_ptr_array_set_size(batch, 0);
}

/* Invariant 4's order for the batch: the new clusters' refcounts and
 * zeros durable, then the tables (synced), then the dropped references. */
static int batch_commit_locked(Qcow2State *s, GPtrArray *batch, bool active)
{
    int ret;

    if (batch->len == 0) {
        return 0;
    }
    ret = qcow2_cache_flush_locked(s->refcount_cache);
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    if (ret < 0) {
        batch_abort_locked(s, batch);
        return ret;
    }
    qcow2_assert_refcounts_durable_locked(s, "amend.c invariant 4");
    for (guint i = 0; i < batch->len && ret == 0; i++) {
        const Table *t = batch->pdata[i];
        qcow2_l2_cache_discard_table_locked(s, t->offset);
        ret = qcow2_write_metadata_locked(s, BLKEV_L2_UPDATE, QCOW2_OL_ACTIVE_L2,
                                          t->offset, t->buf, s->cluster_size, false);
    }
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    if (ret < 0) {
        g_ptr_array_set_size(batch, 0); /* the new clusters leak: tables may be on disk */
        return ret;
    }
    for (guint i = 0; i < batch->len; i++) {
        const Table *t = batch->pdata[i];
        for (guint j = 0; j < t->drops->len; j++) {
            const Dropped *d = &g_array_index(t->drops, Dropped, j);
            for (uint64_t k = 0; k < d->count; k++) {
                qcow2_free_clusters_locked(s, d->offset, s->cluster_size);
            }
        }
        if (active) {
            qcow2_fastmap_forget_locked(s->fastmap, t->guest,
                                        t->guest + (s->cluster_size << s->l2_bits));
        }
    }
    g_ptr_array_set_size(batch, 0);
    return 0;
}

/* Invariant 4 for the L2 table at l2_offset (guest offset 'guest' of the
 * L1 it was reached from): its new contents into the batch if it changes
 * (new clusters allocated and zeroed, nothing written to it yet). */
static int expand_table_locked(Qcow2State *s, uint64_t l2_offset, uint64_t guest,
                               bool *compressed, GPtrArray *batch)
{
    Table *t = g_new0(Table, 1);
    bool changed = false;
    int ret;

    t->offset = l2_offset;
    t->guest = guest;
    t->buf = g_malloc(s->cluster_size);
    t->drops = g_array_new(FALSE, FALSE, sizeof(Dropped));
    g_ptr_array_add(batch, t); /* batch_abort_locked frees what it made */
    ret = qcow2_get_refcount_locked(s, l2_offset >> s->cluster_bits, &t->refcount);
    if (ret == 0 && t->refcount == 0) {
        ret = qcow2_corrupt_locked(s, "L2 table at 0x%" PRIx64 " has refcount 0",
                                   l2_offset);
    }
    if (ret == 0) {
        ret = blk_pread(s->img->file, l2_offset, t->buf, s->cluster_size);
    }
    for (uint64_t j = 0; ret == 0 && j < s->l2_size; j++) {
        uint64_t entry = qcow2_l2_get(s, t->buf, j);
        Qcow2SubclusterType type;
        Dropped d;

        if (!qcow2_l2_entry_valid(s, entry, 0, (guest >> s->cluster_bits) + j, &type)) {
            unsigned n;
            ret = qcow2_l2_entry_type_locked(s, entry, 0, 0, l2_offset, j,
                                             (guest >> s->cluster_bits) + j, &type, &n);
            break;
        }
        if (type == QCOW2_SC_COMPRESSED) {
            *compressed = true;
        }
        if (type != QCOW2_SC_ZERO_PLAIN && type != QCOW2_SC_ZERO_ALLOC) {
            continue;
        }
        ret = expand_entry_locked(s, &entry, t->refcount, l2_offset, j,
                                  guest + (j << s->cluster_bits), &d);
        if (ret == 0) {
            qcow2_l2_set(s, t->buf, j, entry, 0);
            changed = true;
            g_array_append_val(t->drops, d);
        }
    }
    if (ret == 0 && !changed) {
        g_ptr_array_remove_index(batch, batch->len - 1);
    }
    return ret;
}

static bool in_batch(const GPtrArray *batch, uint64_t l2_offset)
{
    for (guint i = 0; i < batch->len; i++) {
        if (((const Table *)batch->pdata[i])->offset == l2_offset) {
            return true;
        }
    }
    return false;
}

/* Invariant 4 for one L1 table of l1_size entries (host order). */
static int expand_l1_locked(Qcow2State *s, const uint64_t *l1, uint32_t l1_size,
                            bool active, Qcow2AmendProgress *p, int op, uint64_t *visited,
                            uint64_t total, bool *compressed)
{
    g_autoptr(GPtrArray) batch = g_ptr_array_new_with_free_func(table_free);
    int ret = 0;

    for (uint32_t i = 0; i < l1_size && ret == 0; i++) {
        uint64_t l2_offset = l1[i] & QCOW2_L1E_OFFSET_MASK;
        uint64_t guest = (uint64_t)i << (s->cluster_bits + s->l2_bits);

        if (active) {
            ret = qcow2_l1_entry_locked(s, i, &l2_offset);
        } else if (l2_offset &&
                   (qcow2_offset_into_cluster(s, l2_offset) ||
                    !qcow2_range_within(l2_offset, s->cluster_size, s->file_size))) {
            ret = qcow2_corrupt_locked(s,
                                       "L2 table offset 0x%" PRIx64
                                       " unaligned or past the end of the file "
                                       "(snapshot L1 index: %#" PRIx32 ")",
                                       l2_offset, i);
        }
        /* a table named twice is read again only once it is on disk */
        if (ret == 0 && (batch->len >= BATCH_TABLES || in_batch(batch, l2_offset))) {
            ret = batch_commit_locked(s, batch, active);
        }
        if (ret == 0 && l2_offset) {
            ret = expand_table_locked(s, l2_offset, guest, compressed, batch);
        }
        if (ret == 0) {
            qcow2_amend_progress(p, op, ++*visited, total);
        }
    }
    if (ret == 0) {
        ret = batch_commit_locked(s, batch, active); /* before the next L1 reads */
    } else {
        batch_abort_locked(s, batch);
    }
    return ret;
}

int qcow2_amend_expand_zeros_locked(Qcow2State *s, Qcow2AmendProgress *p, int op,
                                    bool *compressed)
{
    uint64_t total = s->l1_size, visited = 0;
    int ret;

    g_assert(!s->extended_l2);
    *compressed = false;
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        total += s->snapshots[i].l1_size;
    }
    /* invariant 4: the tables are read from the file, so what the caches
     * hold goes there first */
    ret = qcow2_flush_all_locked(s);
    if (ret == 0) {
        ret = expand_l1_locked(s, s->l1_table, s->l1_size, true, p, op, &visited, total,
                               compressed);
    }
    for (uint32_t i = 0; ret == 0 && i < s->nb_snapshots; i++) {
        const Qcow2Snapshot *sn = &s->snapshots[i];
        g_autofree uint64_t *l1 = NULL;

        ret = qcow2_validate_table("Snapshot L1 table", sn->l1_table_offset, sn->l1_size,
                                   8, QCOW2_MAX_L1_BYTES, s->cluster_bits, s->file_size);
        if (ret == 0) {
            ret = qcow2_read_table(s->img->file, sn->l1_table_offset, sn->l1_size, &l1);
        }
        if (ret == 0) {
            ret = expand_l1_locked(s, l1, sn->l1_size, false, p, op, &visited, total,
                                   compressed);
        }
    }
    if (ret == 0) {
        ret = qcow2_flush_all_locked(s); /* the decreases durable too */
    }
    return ret;
}
