/*
 * qcow2/zero.c: write zeroes and discard.
 *
 * Owns: turning zero and discard requests into L2 entry changes (zero
 * flags, zero subcluster bits, unallocation), freeing what they replace,
 * and the partial (sub)clusters at the ends of a zero request.
 *
 * Invariants (cited as "zero.c invariant N"):
 *  1. Write zeroes (QEMU 7.2): whole clusters (subclusters with extended L2)
 *     become zero.  v3: zero flag (extended L2: all zero bits); the host
 *     cluster is kept as a preallocated zero cluster when it is ours
 *     (COPIED) and MAY_UNMAP is not given, else freed; compressed clusters
 *     are always freed.  v2 without a backing file: the cluster becomes
 *     unallocated.  v2 with a backing file: zeros are written (-ENOTSUP with
 *     NO_FALLBACK).  A guest zero write (QCOW2_ZERO_WIDEN) zeroes a partial
 *     (sub)cluster at an end whole when it holds no data in this image
 *     (unallocated or zero) and the rest of it reads as zeros through the
 *     backing chain -- QEMU's is_zero(), which takes a raw file's contents
 *     as data; the request is registered over the widened range, so no
 *     write into that rest runs meanwhile.  Other partial (sub)clusters are
 *     written as zeros through the normal write path (-ENOTSUP with
 *     NO_FALLBACK, before anything changed).  A guest zero write writes
 *     them, and v2's zeros over a backing file, even where they read as
 *     zeros already, as QEMU's fallback does (a cluster part of which lies
 *     past the end of a shorter backing file is allocated: QEMU iotest
 *     154); v2 without a backing file and other callers (resize) skip what
 *     reads as zeros (QEMU discards such a v2 cluster: the same result).
 *  2. Discard (QEMU's non-full discard, iotest 290): afterwards a v3 cluster
 *     reads as zeros (zero flag; extended L2: no host cluster, all zero
 *     bits), except an unallocated one without a backing file, which is left
 *     alone; v2 without a backing file: unallocated; v2 with a backing file:
 *     nothing.  Full discard (shrinking): unallocated.  Host clusters are
 *     always freed.  Only whole clusters are discarded; partial ones are
 *     ignored, except the last cluster of an image whose size is not
 *     cluster aligned.  A partial cluster after the whole ones is QEMU's
 *     request of its own (its block layer splits discards at the cluster
 *     size): when the whole ones marked the image corrupt, it fails as
 *     such a later request does, with ENOMEDIUM (meta.c invariant 2).
 *  3. Entries change in the cache first; the clusters they referenced are
 *     freed afterwards (alloc.c invariant 2, QEMU's "first remove L2
 *     entries, then decrease the refcount").
 *  4. Requests are registered in the in-flight list for their whole range
 *     (write.c invariant 6); the lock is held only per L2 table, or per
 *     batch of new tables (invariant 9).
 *  5. No L2 table is allocated where the result reads the same without one:
 *     discards (and v2 zeroing) of ranges without a table, and zeroing with
 *     QCOW2_ZERO_IF_NEEDED of ranges without a table that read as zeros;
 *     with that flag, clusters that read as zeros keep their entries.
 *  6. With a raw external data file (data_file_raw), the data file is zeroed
 *     too, first, so it keeps matching what the guest reads (QEMU).
 *  7. A discard (not a zero write) of a cluster whose host offset is not
 *     cluster aligned changes the entry as for any cluster and leaks the
 *     host cluster, a non-fatal corruption event ("Cannot free unaligned
 *     cluster", meta.c invariant 3), as QEMU's qcow2_free_any_cluster: the
 *     bad offset leaves the image and nothing is freed that may be in use
 *     elsewhere (with an external data file, where nothing is freed, it
 *     is dropped silently, as there).  Every other bad entry is fatal
 *     (cluster.c).
 *  8. With extended L2, when the subcluster-aligned part of a zero request
 *     starts or ends inside a compressed cluster, the whole part is
 *     written as zeros through the write path (new clusters, every
 *     subcluster allocated), its whole clusters too: QEMU 7.2 fails such
 *     a request with ENOTSUP at the compressed cluster and its block layer
 *     then writes the part as a zero buffer (QEMU iotest 271).
 *  9. Where a run of L1 entries has no L2 table and the request needs one
 *     in each (invariant 5), the tables are made with their entries set
 *     (the same entries as one by one: they reference no cluster) and
 *     linked as one batch of at most ZERO_BATCH_BYTES of tables: the
 *     refcount blocks their allocation makes hooked at once (alloc.c
 *     invariant 3), then l2.c invariant 6 (refcounts flushed, tables
 *     written and flushed, L1 sectors written and flushed).  One table at a
 *     time cost two flushes a table and two a refcount block: growing an
 *     image over a longer backing file zeroes every new cluster (resize.c
 *     invariant 3), 19200 tables for 600 MiB of 512-byte clusters.  A
 *     batch that is not linked frees its tables.
 */
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

typedef enum ZeroOp { OP_ZERO, OP_DISCARD, OP_FULL_DISCARD } ZeroOp;

/* invariant 9 (and at least one table) */
#define ZERO_BATCH_BYTES (UINT64_C(4) << 20)

static bool entry_has_host(const Qcow2State *s, uint64_t e)
{
    return !(e & QCOW2_OFLAG_COMPRESSED) &&
           ((e & QCOW2_L2E_OFFSET_MASK) ||
            (qcow2_has_data_file(s) && (e & QCOW2_OFLAG_COPIED)));
}

/* The new entry and bitmap for op on one whole cluster (invariants 1, 2);
 * *drop: the old entry's reference goes away. */
static void new_entry_for(const Qcow2State *s, ZeroOp op, bool unmap, uint64_t e,
                          uint64_t bm, Qcow2SubclusterType type, uint64_t *ne,
                          uint64_t *nbm, bool *drop)
{
    bool compressed = e & QCOW2_OFLAG_COMPRESSED, host = entry_has_host(s, e);
    bool backing = s->img->backing != NULL;

    *ne = e;
    *nbm = bm;
    *drop = false;
    if (op == OP_FULL_DISCARD || s->qcow_version < 3) {
        *ne = 0;
        *nbm = 0;
        *drop = compressed || host;
        return;
    }
    if (op == OP_DISCARD) {
        bool allocated = compressed || host;
        if (!backing && !allocated) {
            return; /* unallocated (or zero) without backing: reads zeros */
        }
        *ne = s->extended_l2 ? 0 : QCOW2_OFLAG_ZERO;
        *nbm = s->extended_l2 ? QCOW2_L2_BITMAP_ALL_ZERO : 0;
        *drop = allocated;
        return;
    }
    /* OP_ZERO on v3 */
    *drop = compressed || (host && (unmap || !(e & QCOW2_OFLAG_COPIED)));
    if (qcow2_has_data_file(s) && host && !compressed) {
        *drop = false; /* the data file cluster stays mapped */
    }
    if (s->extended_l2) {
        *ne = *drop || !host ? 0 : e;
        *nbm = QCOW2_L2_BITMAP_ALL_ZERO;
    } else {
        *ne = (*drop || !host ? 0 : (e & (QCOW2_L2E_OFFSET_MASK | QCOW2_OFLAG_COPIED))) |
              QCOW2_OFLAG_ZERO;
    }
    (void)type;
}

/* Invariant 5: whether op changes a cluster that has no L2 table. */
static bool needs_table(const Qcow2State *s, ZeroOp op)
{
    return s->qcow_version >= 3 &&
           (op == OP_ZERO || (op == OP_DISCARD && s->img->backing));
}

/* Invariant 5: with QCOW2_ZERO_IF_NEEDED, a zeroed cluster without a host
 * cluster that reads as zeros already keeps its entry. */
static bool reads_zero_already(const Qcow2State *s, ZeroOp op, unsigned flags, uint64_t e,
                               uint64_t bm, uint64_t gc)
{
    const BlkNode *backing = s->img->backing;

    return (flags & QCOW2_ZERO_IF_NEEDED) && op == OP_ZERO &&
           (e & ~QCOW2_OFLAG_ZERO) == 0 &&
           (!backing || gc >= backing->size ||
            (s->extended_l2 ? (bm >> 32) == 0xffffffffu : (e & QCOW2_OFLAG_ZERO)));
}

/* Apply op to the whole clusters from offset up to end or the end of this L2
 * slice (cluster.c invariant 6; of the table where there is none to
 * change); *next is where the next call starts.  Lock held. */
static int clusters_in_l2_locked(Qcow2State *s, uint64_t offset, uint64_t end, ZeroOp op,
                                 unsigned flags, Qcow2DiscardKind kind, uint64_t *next)
{
    uint64_t l1_index = offset >> (s->cluster_bits + s->l2_bits);
    uint64_t table_end = (l1_index + 1) << (s->cluster_bits + s->l2_bits);
    uint64_t slice_end = ((offset >> (s->cluster_bits + s->l2_slice_bits)) + 1)
                         << (s->cluster_bits + s->l2_slice_bits);
    uint64_t l2_index, l2_offset = 0, n;
    bool backing = s->img->backing != NULL;
    bool need_table = needs_table(s, op);
    g_autofree uint64_t *drops = NULL;
    uint64_t ndrops = 0;
    bool changed = false;
    uint8_t *l2;
    int ret;

    *next = MIN(end, table_end);
    if (l1_index < s->l1_size) {
        ret = qcow2_l1_entry_locked(s, l1_index, &l2_offset);
        if (ret < 0) {
            return ret;
        }
    }
    if (l2_offset == 0) {
        bool reads_zero = !backing || offset >= s->img->backing->size;
        if (!need_table || ((flags & QCOW2_ZERO_IF_NEEDED) && reads_zero)) {
            return 0; /* invariant 5 */
        }
    }
    *next = MIN(end, slice_end);
    n = (*next - offset) >> s->cluster_bits;
    ret = qcow2_get_l2_for_write_locked(s, offset, &l2, &l2_index);
    if (ret < 0) {
        return ret;
    }
    l2_offset = s->l1_table[l1_index] & QCOW2_L1E_OFFSET_MASK;
    drops = g_new(uint64_t, n);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t gc = offset + (i << s->cluster_bits);
        uint64_t e = qcow2_l2_get(s, l2, l2_index + i);
        uint64_t bm = qcow2_l2_get_bitmap(s, l2, l2_index + i), ne, nbm;
        Qcow2SubclusterType type;
        unsigned cnt;
        bool drop, unaligned = false;

        if (op == OP_ZERO
                ? !qcow2_l2_entry_valid(s, e, bm, gc, &type)
                : !qcow2_l2_entry_valid_to_drop(s, e, bm, gc, &type, &unaligned)) {
            ret = qcow2_l2_entry_type_locked(s, e, bm, 0, l2_offset, l2_index + i, gc,
                                             &type, &cnt);
            *next = gc;
            break;
        }
        if (reads_zero_already(s, op, flags, e, bm, gc)) {
            continue; /* invariant 5 */
        }
        new_entry_for(s, op, flags & BLK_REQ_MAY_UNMAP, e, bm, type, &ne, &nbm, &drop);
        if (ne == e && nbm == bm) {
            continue;
        }
        qcow2_l2_set(s, l2, l2_index + i, ne, nbm);
        changed = true;
        if (drop && unaligned) {
            /* invariant 7: reported, not the request's error (nothing is
             * freed in an external data file: alloc.c invariant 8) */
            bool had_error = blk_error_mark();
            if (!qcow2_has_data_file(s)) {
                qcow2_corrupt_nonfatal_locked(s,
                                              "Cannot free unaligned cluster %#" PRIx64,
                                              e & QCOW2_L2E_OFFSET_MASK);
            }
            blk_error_unwind(had_error);
        } else if (drop) {
            drops[ndrops++] = e;
        }
    }
    if (changed) {
        qcow2_cache_mark_dirty_locked(s->l2_cache, l2);
    }
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
    for (uint64_t i = 0; i < ndrops; i++) {
        qcow2_free_l2_entry_locked(s, drops[i], true, kind); /* invariant 3 */
    }
    return ret;
}

/* Extended L2: zero the subclusters of [offset, offset + bytes) inside one
 * cluster.  -ENOTSUP for a compressed cluster (the caller writes zeros). */
static int subclusters_locked(Qcow2State *s, uint64_t offset, uint64_t bytes)
{
    uint64_t gc = offset & ~(s->cluster_size - 1), l2_index, l2_offset;
    unsigned f = (unsigned)((offset - gc) >> s->subcluster_bits);
    unsigned l = (unsigned)((offset - gc + bytes - 1) >> s->subcluster_bits);
    uint32_t mask =
        (uint32_t)(((UINT64_C(1) << (l + 1)) - 1) & ~((UINT64_C(1) << f) - 1));
    Qcow2SubclusterType type;
    uint64_t e, bm;
    unsigned cnt;
    uint8_t *l2;
    int ret;

    ret = qcow2_get_l2_for_write_locked(s, gc, &l2, &l2_index);
    if (ret < 0) {
        return ret;
    }
    l2_offset = s->l1_table[gc >> (s->cluster_bits + s->l2_bits)] & QCOW2_L1E_OFFSET_MASK;
    e = qcow2_l2_get(s, l2, l2_index);
    bm = qcow2_l2_get_bitmap(s, l2, l2_index);
    if (!qcow2_l2_entry_valid(s, e, bm, gc, &type)) {
        ret =
            qcow2_l2_entry_type_locked(s, e, bm, 0, l2_offset, l2_index, gc, &type, &cnt);
    } else if (e & QCOW2_OFLAG_COMPRESSED) {
        ret = -ENOTSUP;
    } else {
        uint64_t nbm = (bm & ~(uint64_t)mask) | ((uint64_t)mask << 32);
        if (nbm != bm) {
            qcow2_l2_set(s, l2, l2_index, e, nbm);
            qcow2_cache_mark_dirty_locked(s->l2_cache, l2);
        }
    }
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
    return ret;
}

typedef GArray Qcow2NewL2Array; /* of Qcow2NewL2, each owning its table */
static void free_new_tables(Qcow2NewL2Array *t)
{
    for (guint i = 0; i < t->len; i++) {
        g_free(g_array_index(t, Qcow2NewL2, i).table);
    }
    g_array_free(t, TRUE);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Qcow2NewL2Array, free_new_tables)

/* Invariant 9: from offset, the L1 entries up to end that have no table
 * and need one, given their tables at once; *next is where the request
 * goes on (offset: there is no such entry there).  Lock held. */
static int new_tables_locked(Qcow2State *s, uint64_t offset, uint64_t end, ZeroOp op,
                             unsigned flags, uint64_t *next)
{
    unsigned shift = s->cluster_bits + s->l2_bits;
    g_autoptr(Qcow2NewL2Array) t = g_array_new(FALSE, FALSE, sizeof(Qcow2NewL2));
    bool linked = false;
    int ret = 0;

    *next = offset;
    if (!needs_table(s, op)) {
        return 0;
    }
    qcow2_defer_refblocks_locked(s); /* alloc.c invariant 3: hooked at once */
    while (*next < end && t->len * s->cluster_size < ZERO_BATCH_BYTES) {
        uint64_t l1_index = *next >> shift, l2_offset = 0, ne, nbm;
        uint64_t table_end = MIN(end, (l1_index + 1) << shift);
        Qcow2NewL2 nt = {.l1_index = l1_index};
        bool drop, any = false;
        int64_t off;

        if (l1_index >= s->l1_size) {
            break; /* qcow2_get_l2_for_write_locked grows the L1 */
        }
        ret = qcow2_l1_entry_locked(s, l1_index, &l2_offset);
        if (ret < 0 || l2_offset != 0) {
            break;
        }
        nt.table = g_malloc0(s->cluster_size);
        for (uint64_t gc = *next; gc < table_end; gc += s->cluster_size) {
            if (!reads_zero_already(s, op, flags, 0, 0, gc)) {
                new_entry_for(s, op, flags & BLK_REQ_MAY_UNMAP, 0, 0,
                              QCOW2_SC_UNALLOCATED_PLAIN, &ne, &nbm, &drop);
                qcow2_l2_set(s, nt.table, (gc >> s->cluster_bits) & (s->l2_size - 1), ne,
                             nbm);
                any = any || ne != 0 || nbm != 0;
            }
        }
        if (!any) { /* invariant 5: the range reads the same without one */
            g_free(nt.table);
            *next = table_end;
            continue;
        }
        off = qcow2_alloc_clusters_locked(s, 1);
        if (off <= 0) {
            g_free(nt.table);
            ret = off < 0 ? (int)off
                          : qcow2_corrupt_locked(s, "Preventing invalid allocation of L2 "
                                                    "table at offset 0");
            break;
        }
        qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
        nt.offset = (uint64_t)off;
        g_array_append_val(t, nt);
        *next = table_end;
    }
    int settled = qcow2_settle_refblocks_locked(s);
    ret = ret < 0 ? ret : settled;
    if (ret == 0) {
        ret = qcow2_link_new_l2_tables_locked(s, (Qcow2NewL2 *)(void *)t->data, t->len, 0,
                                              &linked);
    }
    if (ret < 0 && !linked) {
        bool had_error = blk_error_mark();
        for (guint i = 0; i < t->len; i++) {
            qcow2_free_clusters_locked(s, g_array_index(t, Qcow2NewL2, i).offset,
                                       s->cluster_size);
        }
        blk_error_unwind(had_error);
    }
    return ret;
}

/* Whole clusters [offset, end), one L2 table or one batch of new ones per
 * lock hold (invariant 4). */
static int clusters_registered(Qcow2State *s, uint64_t offset, uint64_t end, ZeroOp op,
                               unsigned flags, Qcow2DiscardKind kind)
{
    int ret = 0;

    while (offset < end && ret == 0) {
        uint64_t next = end;
        qcow2_lock(s);
        ret = qcow2_check_writable_locked(s);
        if (ret == 0) {
            ret = new_tables_locked(s, offset, end, op, flags, &next);
        }
        if (ret == 0 && next == offset) {
            ret = clusters_in_l2_locked(s, offset, end, op, flags, kind, &next);
        }
        qcow2_unlock(s);
        offset = next;
    }
    return ret;
}

/* How many bytes from offset (at most bytes) share one answer to "reads as
 * zeros already?". */
static int zero_extent(Qcow2State *s, uint64_t offset, uint64_t bytes, bool *zero,
                       uint64_t *len)
{
    BlkNode *backing = s->img->backing;
    Qcow2Mapping m;
    int ret;

    qcow2_lock(s);
    ret = qcow2_get_host_offset_locked(s, offset, bytes, &m);
    qcow2_unlock(s);
    if (ret < 0) {
        return ret;
    }
    *len = MIN(m.bytes, bytes);
    switch (m.type) {
    case QCOW2_SC_ZERO_PLAIN:
    case QCOW2_SC_ZERO_ALLOC:
        *zero = true;
        break;
    case QCOW2_SC_UNALLOCATED_PLAIN:
    case QCOW2_SC_UNALLOCATED_ALLOC:
        *zero = !backing || offset >= backing->size;
        if (!*zero && offset + *len > backing->size) {
            *len = backing->size - offset;
        }
        break;
    default:
        *zero = false;
    }
    return 0;
}

/* Whether [off, off + len) of node n (a backing file) reads as zeros as
 * QEMU's is_zero() sees it (invariant 1): zero status or past the end;
 * unallocated ranges ask n's backing file; a raw file is data. */
static int backing_reads_zero(BlkNode *n, uint64_t off, uint64_t len, bool *zero)
{
    *zero = true;
    while (len > 0 && n && off < n->size) {
        BlkStatus st;
        int ret;

        if (n->drv->is_protocol || !n->drv->block_status || !n->file ||
            strcmp(n->drv->format_name, "raw") == 0) {
            *zero = false; /* want_zero=false: a raw file's blocks are data */
            return 0;
        }
        ret = blk_block_status(n, off, len, &st);
        if (ret < 0) {
            return ret;
        }
        if (!(st.flags & BLK_STATUS_ZERO)) {
            if (st.flags & (BLK_STATUS_DATA | BLK_STATUS_ALLOCATED)) {
                *zero = false;
                return 0;
            }
            ret = backing_reads_zero(n->backing, off, st.pnum, zero);
            if (ret < 0 || !*zero) {
                return ret;
            }
        }
        off += st.pnum;
        len -= st.pnum;
    }
    return 0;
}

/* Invariant 1: whether the (sub)cluster holding guest bytes [p, p + len)
 * (inside it) is zeroed whole by a guest zero write. */
static int whole_if_zero(Qcow2State *s, uint64_t p, uint64_t len, bool *whole)
{
    uint64_t g = UINT64_C(1) << s->subcluster_bits, s0 = ROUND_DOWN(p, g);
    uint64_t s1 = MIN(s0 + g, s->img->size);
    Qcow2Mapping m;
    bool z = true;
    int ret;

    *whole = false;
    qcow2_lock(s);
    ret = qcow2_get_host_offset_locked(s, s0, g, &m);
    qcow2_unlock(s);
    if (ret < 0) {
        return ret;
    }
    if (m.type == QCOW2_SC_ZERO_PLAIN || m.type == QCOW2_SC_ZERO_ALLOC) {
        *whole = true;
        return 0;
    }
    if (m.type != QCOW2_SC_UNALLOCATED_PLAIN && m.type != QCOW2_SC_UNALLOCATED_ALLOC) {
        return 0;
    }
    ret = backing_reads_zero(s->img->backing, s0, p - s0, &z);
    if (ret == 0 && z && p + len < s1) {
        ret = backing_reads_zero(s->img->backing, p + len, s1 - (p + len), &z);
    }
    *whole = ret == 0 && z;
    return ret;
}

/* Write zeros through the normal write path (registered range); with
 * skip, not over the extents that already read as zeros (invariant 1). */
static int write_zeros(Qcow2State *s, uint64_t offset, uint64_t bytes, bool skip)
{
    g_autofree uint8_t *zeros = NULL;
    size_t chunk = (size_t)MIN(bytes, (uint64_t)1 << 20);

    while (bytes > 0) {
        uint64_t len;
        bool zero;
        int ret = 0;

        if (skip) {
            ret = zero_extent(s, offset, bytes, &zero, &len);
        } else {
            zero = false;
            len = bytes;
        }
        if (ret < 0) {
            return ret;
        }
        if (!zero) {
            BlkIOV q;
            len = MIN(len, (uint64_t)chunk);
            if (!zeros) {
                zeros = g_malloc0(chunk);
            }
            iov_init_buf(&q, zeros, (size_t)len);
            ret = qcow2_write_registered(s, offset, &q);
            if (ret < 0) {
                return ret;
            }
        }
        offset += len;
        bytes -= len;
    }
    return 0;
}

/* Invariant 8: whether a partial cluster at either end of [a, b) is
 * compressed. */
static int partial_compressed(Qcow2State *s, uint64_t a, uint64_t b, bool *comp)
{
    uint64_t cs = s->cluster_size,
             ends[2] = {a % cs ? a : UINT64_MAX, b % cs ? ROUND_DOWN(b, cs) : UINT64_MAX};
    int ret = 0;

    *comp = false;
    qcow2_lock(s);
    for (int i = 0; i < 2 && ret == 0 && !*comp; i++) {
        Qcow2Mapping m;
        if (ends[i] != UINT64_MAX) {
            ret = qcow2_get_host_offset_locked(s, ROUND_DOWN(ends[i], cs), cs, &m);
            *comp = ret == 0 && m.type == QCOW2_SC_COMPRESSED;
        }
    }
    qcow2_unlock(s);
    return ret;
}

int qcow2_zero_registered(Qcow2State *s, uint64_t offset, uint64_t bytes, unsigned flags)
{
    uint64_t g = UINT64_C(1) << s->subcluster_bits, cs = s->cluster_size;
    uint64_t end = offset + bytes, req_end = offset + bytes, a, b, head_end, tail;
    bool backing = s->img->backing != NULL;
    /* invariant 1: v2 without a backing file skips too, as QEMU discards a
     * cluster that reads as zeros (what it would write is already there) */
    bool skip = !(flags & QCOW2_ZERO_WIDEN) || (s->qcow_version < 3 && !backing);
    int ret = 0;

    if (bytes == 0) {
        return 0;
    }
    if (s->qcow_version < 3 && backing) {
        if (flags & BLK_REQ_NO_FALLBACK) {
            return -ENOTSUP; /* invariant 1 */
        }
        return write_zeros(s, offset, bytes, skip);
    }
    /* The last (sub)cluster of an unaligned image counts as whole. */
    if ((end == s->img->size || (flags & QCOW2_ZERO_AT_END)) && end % g) {
        end = ROUND_UP(end, g);
    }
    /* [a, b): whole (sub)clusters; [offset, head_end) and [tail, req_end):
     * the partial ones (one piece when the request lies in one) */
    a = MIN(ROUND_UP(offset, g), end);
    b = MAX(ROUND_DOWN(end, g), a);
    head_end = MIN(a, req_end);
    tail = b != end ? b : req_end;
    if ((flags & QCOW2_ZERO_WIDEN) && s->qcow_version >= 3) { /* invariant 1 */
        uint64_t last = ROUND_UP(s->img->size, g);
        bool whole = false;
        if (head_end > offset) {
            ret = whole_if_zero(s, offset, head_end - offset, &whole);
            if (ret == 0 && whole) {
                a = ROUND_DOWN(offset, g);
                b = MAX(b, MIN(a + g, last));
                head_end = offset;
            }
        }
        if (ret == 0 && req_end > tail && tail >= head_end) {
            ret = whole_if_zero(s, tail, req_end - tail, &whole);
            if (ret == 0 && whole) {
                b = MIN(tail + g, last);
                tail = req_end;
            }
        }
        if (ret < 0) {
            return ret;
        }
    }
    if ((flags & BLK_REQ_NO_FALLBACK) && (head_end > offset || req_end > tail)) {
        return -ENOTSUP;
    }
    if (s->data_file && s->data_file_raw) {
        /* invariant 6: the raw data file follows the guest view */
        blk_event(s->data_file, BLKEV_DATA_WRITE);
        uint64_t zs = MIN(a, offset), ze = MIN(MAX(b, req_end), s->img->size);
        ret = blk_pwrite_zeroes(s->data_file, zs, ze - zs, 0);
        if (ret < 0) {
            return ret;
        }
    }
    if (head_end > offset) {
        ret = write_zeros(s, offset, head_end - offset, skip);
    }
    if (ret == 0 && req_end > tail) {
        ret = write_zeros(s, tail, req_end - tail, skip);
    }
    /* [a, b) is aligned to g (subclusters or clusters). */
    if (ret == 0 && a < b && s->extended_l2 && (a % cs || b % cs)) {
        bool comp = false; /* invariant 8 */
        ret = partial_compressed(s, a, b, &comp);
        if (ret == 0 && comp) {
            ret = write_zeros(s, a, b - a, skip);
            a = b;
        }
    }
    if (ret == 0 && a < b && s->extended_l2 && a % cs) {
        uint64_t e = MIN(ROUND_UP(a, cs), b);
        qcow2_lock(s);
        ret = qcow2_check_writable_locked(s);
        if (ret == 0) {
            ret = e - a == cs ? 0 : subclusters_locked(s, a, e - a);
        }
        qcow2_unlock(s);
        if (ret == -ENOTSUP) {
            ret = write_zeros(s, a, e - a, skip);
        }
        a = e;
    }
    if (ret == 0 && a < b && s->extended_l2 && b % cs) {
        uint64_t sb = MAX(ROUND_DOWN(b, cs), a);
        qcow2_lock(s);
        ret = qcow2_check_writable_locked(s);
        if (ret == 0) {
            ret = subclusters_locked(s, sb, b - sb);
        }
        qcow2_unlock(s);
        if (ret == -ENOTSUP) {
            ret = write_zeros(s, sb, b - sb, skip);
        }
        b = sb;
    }
    if (ret == 0 && a < b) {
        ret = clusters_registered(s, a, b, OP_ZERO, flags, QCOW2_DISCARD_REQUEST);
    }
    return ret;
}

int qcow2_discard_registered(Qcow2State *s, uint64_t offset, uint64_t bytes, bool full,
                             Qcow2DiscardKind kind)
{
    if (!full && s->qcow_version < 3 && s->img->backing) {
        return 0; /* invariant 2 */
    }
    if (s->data_file && s->data_file_raw) {
        int ret;
        blk_event(s->data_file, BLKEV_DATA_WRITE);
        ret = blk_pwrite_zeroes(s->data_file, offset, bytes, 0); /* invariant 6 */
        if (ret < 0) {
            return ret;
        }
    }
    return clusters_registered(s, offset, offset + bytes,
                               full ? OP_FULL_DISCARD : OP_DISCARD, 0, kind);
}

int qcow2_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes, unsigned flags)
{
    Qcow2State *s = img->opaque;
    uint64_t g;
    Qcow2Inflight r;
    int ret;

    /* write.c invariant 12: the partial clusters may be written as data
     * (write_zeros), which takes the turn; take it before registering. */
    blk_order_wait();
    qcow2_lock(s);
    ret = qcow2_check_data_writable_locked(s, offset, bytes); /* meta.c inv. 8 */
    if (ret < 0) {
        qcow2_unlock(s);
        return ret;
    }
    /* invariant 1: registered over whole (sub)clusters, as it may zero them */
    g = UINT64_C(1) << s->subcluster_bits;
    qcow2_inflight_begin_locked(s, &r, ROUND_DOWN(offset, g),
                                MIN(ROUND_UP(offset + bytes, g), ROUND_UP(img->size, g)) -
                                    ROUND_DOWN(offset, g),
                                true);
    qcow2_unlock(s);

    ret = qcow2_zero_registered(s, offset, bytes,
                                (flags & ~QCOW2_ZERO_IF_NEEDED) | QCOW2_ZERO_WIDEN);

    qcow2_lock(s);
    qcow2_inflight_end_locked(s, &r);
    ret = qcow2_finish_request_locked(s, ret);
    qcow2_unlock(s);
    if (ret == 0 && (flags & BLK_REQ_FUA)) {
        ret = qcow2_flush(img);
    }
    return ret;
}

int qcow2_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    Qcow2State *s = img->opaque;
    uint64_t end = offset + bytes, a = ROUND_UP(offset, s->cluster_size), b;
    Qcow2Inflight r;
    int ret;

    /* invariant 2: whole clusters, and the unaligned last one */
    b = end == img->size ? ROUND_UP(end, s->cluster_size)
                         : ROUND_DOWN(end, s->cluster_size);
    qcow2_lock(s);
    /* meta.c inv. 8: the bits of the whole request, as QEMU sets them even
     * where nothing is discarded */
    ret = qcow2_check_data_writable_locked(s, offset, bytes);
    if (ret < 0 || a >= b) {
        qcow2_unlock(s);
        return ret;
    }
    qcow2_inflight_begin_locked(s, &r, a, b - a, true);
    qcow2_unlock(s);

    ret = qcow2_discard_registered(s, a, b - a, false, QCOW2_DISCARD_REQUEST);

    qcow2_lock(s);
    qcow2_inflight_end_locked(s, &r);
    ret = qcow2_finish_request_locked(s, ret);
    if (ret == 0 && b < end) { /* invariant 2: the partial tail, QEMU's next request */
        ret = qcow2_check_data_writable_locked(s, b, end - b);
    }
    qcow2_unlock(s);
    return ret;
}
