/*
 * qcow2/snapshot-write.c: the write machinery of internal snapshots, and
 * the rules the operations follow.  The operations themselves -- create,
 * goto, delete, list (driver .snapshot_create / _goto / _delete / _list)
 * -- are in snapshot-ops.c, which cites the R rules and invariants below.
 *
 * Owns: rewriting the snapshot table (for repair.c's rewrite too),
 * copying an L1 table for a snapshot, raising and lowering the refcounts
 * of a whole L1 tree, and recomputing the COPIED flags of the active tree.
 * (Encoding and decoding table entries is snapshot-codec.c; reading the
 * table at open and the read-only snapshot view are snapshot.c; allocation
 * and refcount updates are alloc.c.)
 *
 * On-disk safety rules kept here (DESIGN.md rules 1-3):
 *  R1. Refcounts are raised, and on disk (refcount blocks written, file
 *      flushed), before the table that makes them referenced reaches the
 *      disk: create raises the active tree, writes the snapshot's L1 copy
 *      and commits before the snapshot table names the copy; goto raises
 *      the snapshot's tree and commits before its L1 is written over the
 *      active L1 (in place, as QEMU does).
 *  R2. Refcounts are lowered only after the last reference is gone on disk:
 *      goto lowers the old active tree after the synced in-place L1 write;
 *      delete lowers the snapshot's tree and frees its L1 only after the
 *      table without the entry was switched to by the synced header write.
 *      When that write reached the file but its flush failed, nothing is
 *      lowered (a leak, never a dangling reference).
 *  R3. The snapshot table is always written whole to newly allocated
 *      clusters (their refcounts on disk first), flushed, then switched to
 *      with one synced 12-byte header write (nb_snapshots +
 *      snapshots_offset); the old table is freed after that.  One function
 *      does it (qcow2_snapshot_table_write_locked), for check -r all's
 *      rewrite in repair.c too.
 *  R4. Every metadata write is overlap-checked (qcow2_write_metadata_locked
 *      and the cache write-back hooks, meta.c invariant 1).
 *  R5. COPIED flags follow the refcounts: set exactly where the refcount is
 *      1, recomputed for the whole active tree after the refcount blocks
 *      are on disk; L2 tables are written next, the active L1 last
 *      (snapw_commit_locked).  Memory never keeps COPIED on a shared cluster
 *      (that would let a write modify a snapshot in place).
 *  R6. Create and goto that fail before their switching write roll back:
 *      the raised refcounts are lowered again (undo log), COPIED flags are
 *      recomputed and written, new clusters are freed.  What cannot be
 *      undone stays a leak.
 *  R7. Refcount blocks that cannot be written are dropped from the cache
 *      (memory falls back to the disk), then the COPIED flags are
 *      recomputed from what the disk holds.
 *  R8. L2 tables (or the L1) that cannot be written: where the disk lacks
 *      a COPIED flag that the refcount 1 asks for, the refcount is raised
 *      to 2 (a leak) and memory takes the disk's flags.
 *     R7 and R8 keep refcounts and flags agreeing on disk whichever kind of
 *     metadata write fails (iotest-style blkdebug faults on any one event).
 *  R9. Create moves the L1 entries of the active VM state to the snapshot
 *      (the references move; no refcount or COPIED flag changes) instead of
 *      sharing them and dropping the active copy afterwards as QEMU does:
 *      the result reads the same (the active area reads as zeros, the
 *      snapshot owns the state), and the state adds no crash window of its
 *      own to a savevm commit (see the known limit).  The active L1
 *      forgets them (written,
 *      synced) before the table switch: a crash in between leaks them and
 *      the snapshot is absent.  What cannot move whole (an L2 table that
 *      also maps past the state's end) is shared and discarded QEMU's way.
 * R10. On v3 images every operation runs with the dirty bit set (one synced
 *      header write before the first refcount or COPIED change, cleared by
 *      qcow2_mark_clean_locked() after everything is durable), unless the
 *      image is dirty already (lazy refcounts).  A refcount block and the L2
 *      or L1 entry holding the matching COPIED flag are separate clusters,
 *      so a power loss between them leaves a flag that disagrees with its
 *      refcount whatever the order; the dirty bit says so on disk ("refcounts
 *      may be inconsistent"), and QEMU and qimg repair such an image when
 *      they open it read-write (qcow2.c invariant 8; QEMU does it without
 *      lazy_refcounts too, checked with 7.2).  A failed write leaves the bit
 *      set (meta.c invariant 9): the next read-write open repairs.  v2 has
 *      no feature bits: the window of the known limit below stays there.
 *
 * Other invariants (cited as "snapshot-write.c invariant N"):
 *  1. The operations run exclusively: the whole guest range (and the
 *     vmstate area) is registered as a write in the in-flight list while
 *     metadata changes, so no request is half-planned across them.  Resize
 *     (goto) and the vmstate discard (create) run outside that registration
 *     because they register their own ranges.
 *  2. A snapshot is looked up by ID first, then by name (first match in
 *     table order); IDs of new snapshots are the highest numeric ID + 1, as
 *     QEMU computes them (strtoul of each ID).
 *  3. Entries are rewritten with 24 bytes of known extra data
 *     (vm_state_size_large, disk_size, icount) followed by any unknown
 *     extra data they had; the 32-bit vm_state_size field is 0 when the
 *     size does not fit (the encoder, snapshot-codec.c invariant 4).  New
 *     names are cut to 255 bytes (QEMU's QEMUSnapshotInfo.name).
 *  4. An L1 tree's references are counted the way qemu-img check counts
 *     them: every L2 table once per L1 entry naming it, every host cluster
 *     of a non-compressed L2 entry with a host offset (not with an
 *     external data file), every cluster a compressed entry's sectors
 *     touch.  Everything read is validated first (L1 entries: reserved
 *     bits, alignment, inside the file; L2 entries: cluster.c's checks).
 *  5. Each operation starts by writing both caches and flushing, so every
 *     dirty cache entry afterwards is its own change (R7, R8 rely on it).
 *
 * Known limit (v2 only, R10 covers v3): a crash (not a failed write)
 * between a refcount block write and the L2/L1 write that changes the
 * matching COPIED flag -- create on clusters no snapshot shares yet, delete
 * of the last snapshot sharing a cluster -- leaves a flag that qemu-img
 * check reports as an OFLAG_COPIED error (fixed by check -r all).  The two
 * are separate clusters, so no write order avoids it; QEMU has the same
 * window.  Goto has none (every cluster of the new active tree is
 * shared with the snapshot); a savevm commit has it only for disk clusters
 * written since the last snapshot (R9 keeps the state out of it).
 */
#include "qcow2/snapshot-write.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- reference walks (invariant 4) ---- */

/* Contiguous increments or decrements are merged into one refcount update;
 * increments that worked are logged for the undo (R6). */
typedef struct RefBatch {
    uint64_t off, len;
    bool decrease;
    GArray *log; /* RefRange, increments only */
} RefBatch;

static int batch_flush_locked(Qcow2State *s, RefBatch *b)
{
    int ret = 0;

    if (b->len == 0) {
        return 0;
    }
    if (b->decrease) {
        /* errors: leaks, deferred; space given back (alloc.c invariant 9) */
        qcow2_free_clusters_as_locked(s, b->off, b->len, QCOW2_DISCARD_SNAPSHOT);
    } else {
        ret = qcow2_update_refcount_locked(s, b->off, b->len, 1, false);
        if (ret == 0) {
            RefRange r = {b->off, b->len};
            g_array_append_val(b->log, r);
        }
    }
    b->len = 0;
    return ret;
}

static int batch_add_locked(Qcow2State *s, RefBatch *b, uint64_t off, uint64_t len)
{
    /* Merge only when no cluster is shared between the two ranges. */
    if (b->len && b->off + b->len == off && qcow2_offset_into_cluster(s, off) == 0) {
        b->len += len;
        return 0;
    }
    int ret = batch_flush_locked(s, b);
    b->off = off;
    b->len = len;
    return ret;
}

/* Undo logged increments (R6); failures leave leaks. */
void snapw_undo_log_locked(Qcow2State *s, GArray *log)
{
    bool had_error = blk_error_mark();

    for (guint i = log->len; i > 0; i--) {
        RefRange *r = &g_array_index(log, RefRange, i - 1);
        (void)qcow2_update_refcount_locked(s, r->off, r->len, 1, true);
    }
    g_array_set_size(log, 0);
    blk_error_unwind(had_error);
}

/* Validate an L1 entry of any L1 table (invariant 4). */
int snapw_l1_entry_locked(Qcow2State *s, uint64_t e, uint64_t index, uint64_t *l2)
{
    *l2 = e & QCOW2_L1E_OFFSET_MASK;
    if (e & QCOW2_L1E_RESERVED_MASK) {
        return qcow2_corrupt_locked(s,
                                    "L1 entry 0x%016" PRIx64 " has reserved bits set "
                                    "(L1 index: %#" PRIx64 ")",
                                    e, index);
    }
    if (*l2 == 0) {
        return 0;
    }
    if (qcow2_offset_into_cluster(s, *l2)) {
        return qcow2_corrupt_locked(s,
                                    "L2 table offset 0x%" PRIx64 " unaligned "
                                    "(L1 index: %#" PRIx64 ")",
                                    *l2, index);
    }
    if (!qcow2_range_within(*l2, s->cluster_size, s->file_size)) {
        return qcow2_corrupt_locked(s,
                                    "L2 table offset 0x%" PRIx64 " (L1 index: %#" PRIx64
                                    ") is beyond the end of the file (%" PRIu64 " bytes)",
                                    *l2, index, s->file_size);
    }
    return 0;
}

/* The host bytes an L2 entry references (*len = 0: none); *plain: a whole
 * host cluster whose entry carries a COPIED flag. */
static int entry_ref_locked(Qcow2State *s, const uint8_t *l2, uint64_t l2_offset,
                            uint64_t j, uint64_t guest, uint64_t *off, uint64_t *len,
                            bool *plain)
{
    uint64_t e = qcow2_l2_get(s, l2, j), bm = qcow2_l2_get_bitmap(s, l2, j);
    Qcow2SubclusterType type;
    unsigned count;

    *len = 0;
    *plain = false;
    if (!qcow2_l2_entry_valid(s, e, bm, guest, &type)) {
        return qcow2_l2_entry_type_locked(s, e, bm, 0, l2_offset, j, guest, &type,
                                          &count);
    }
    if (e & QCOW2_OFLAG_COMPRESSED) {
        qcow2_parse_compressed_entry(s, e, off, len);
        return 0;
    }
    if ((e & QCOW2_L2E_OFFSET_MASK) && !qcow2_has_data_file(s)) {
        *off = e & QCOW2_L2E_OFFSET_MASK;
        *len = s->cluster_size;
        *plain = true;
    }
    return 0;
}

/* Give entry j of a referenced L2 slice the COPIED flag want; the first
 * change of the slice (*dirty still false) orders the L2 cache after the
 * refcount cache (the flags follow the refcounts, R5). */
static int set_copied_locked(Qcow2State *s, uint8_t *l2, uint64_t j, uint64_t want,
                             bool *dirty)
{
    uint64_t e = qcow2_l2_get(s, l2, j);
    int ret;

    if ((e & QCOW2_OFLAG_COPIED) == want) {
        return 0;
    }
    if (!*dirty) {
        ret = qcow2_cache_set_dependency_locked(s->l2_cache, s->refcount_cache);
        if (ret < 0) {
            return ret;
        }
    }
    qcow2_l2_set(s, l2, j, (e & ~QCOW2_OFLAG_COPIED) | want,
                 qcow2_l2_get_bitmap(s, l2, j));
    *dirty = true;
    return 0;
}

/* End the reference to a slice (if taken), marked dirty if it changed. */
static void put_slice_locked(Qcow2State *s, uint8_t *l2, bool dirty)
{
    if (dirty) {
        qcow2_cache_mark_dirty_locked(s->l2_cache, l2);
    }
    if (l2) {
        qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
    }
}

/* One slice of the tree walk below: the entries [sl, sl + l2_slice_size)
 * of the table at l2_offset, which maps from guest 'base' on. */
static int walk_slice_locked(Qcow2State *s, RefBatch *b, uint64_t l2_offset, uint64_t sl,
                             uint64_t base, bool clear_copied)
{
    uint8_t *l2 = NULL;
    bool dirty = false;
    int ret = qcow2_cache_get_locked(s->l2_cache, l2_offset + sl * s->l2_entry_size,
                                     (void **)&l2);

    for (uint64_t j = 0; j < s->l2_slice_size && ret == 0; j++) {
        uint64_t guest = base | ((sl + j) << s->cluster_bits), off = 0, len;
        bool plain;

        ret = entry_ref_locked(s, l2, l2_offset, j, guest, &off, &len, &plain);
        if (ret == 0 && len) {
            ret = batch_add_locked(s, b, off, len);
        }
        if (ret == 0 && clear_copied && plain) {
            ret = set_copied_locked(s, l2, j, 0, &dirty);
        }
    }
    put_slice_locked(s, l2, dirty);
    return ret;
}

/*
 * +1 (log != NULL) or -1 (log == NULL) on every reference of the tree
 * l1[0..n).  With clear_copied (increments only) the COPIED flags of the
 * L2 entries are cleared as well: every cluster of the tree is shared
 * afterwards.  A decrement drops the L2 table after its entries.
 */
int snapw_tree_walk_locked(Qcow2State *s, const uint64_t *l1, uint64_t n, GArray *log,
                           bool clear_copied)
{
    RefBatch b = {.decrease = log == NULL, .log = log};
    uint64_t l1_shift = s->cluster_bits + s->l2_bits;
    int ret = 0;

    for (uint64_t i = 0; i < n && ret == 0; i++) {
        uint64_t l2_offset;

        ret = snapw_l1_entry_locked(s, l1[i], i, &l2_offset);
        if (ret < 0 || l2_offset == 0) {
            continue;
        }
        /* slice by slice (cluster.c invariant 6) */
        for (uint64_t sl = 0; sl < s->l2_size && ret == 0; sl += s->l2_slice_size) {
            ret = walk_slice_locked(s, &b, l2_offset, sl, i << l1_shift, clear_copied);
        }
        if (ret == 0) {
            /* after the entries: a decrement may free the table */
            ret = batch_add_locked(s, &b, l2_offset, s->cluster_size);
        }
    }
    if (ret == 0) {
        ret = batch_flush_locked(s, &b);
    } else {
        b.len = 0; /* the failed range was not applied */
    }
    return ret;
}

/* ---- COPIED flags of the active tree (R5) and making changes durable ---- */

/* Write both caches and flush the file: everything in the caches is on
 * disk afterwards (also with lazy refcounts). */
int snapw_write_all_locked(Qcow2State *s)
{
    int ret = qcow2_write_caches_locked(s, true);
    return ret < 0 ? ret : qcow2_flush_file(s);
}

/*
 * R7: refcount blocks that cannot be written are dropped from the cache,
 * so memory holds what the disk holds (re-read on the next use).  Only
 * safe while every dirty refcount change is this operation's own and may
 * be forgotten: each operation starts by writing both caches (invariant 5)
 * and makes only changes that are either not referenced yet (increments
 * before the switching write) or leaks when forgotten (decrements).
 */
static void revert_refcounts_locked(Qcow2State *s)
{
    for (uint64_t i = 0; i < s->refcount_table_size; i++) {
        uint64_t rb = s->refcount_table[i] & QCOW2_REFT_OFFSET_MASK;
        if (rb) {
            qcow2_cache_discard_locked(s->refcount_cache, rb);
        }
    }
    s->free_cluster_index = 0;
}

/* Write the whole active L1 from memory (overlap-checked without the
 * active L1 itself); *written once the pwrite worked. */
int snapw_write_active_l1_locked(Qcow2State *s, const uint64_t *l1, bool *written)
{
    uint64_t bytes = (uint64_t)s->l1_size * 8; /* <= 32 MiB */
    g_autofree uint8_t *buf = NULL;
    int ret;

    *written = false;
    if (bytes == 0) {
        *written = true;
        return 0;
    }
    buf = g_malloc(bytes);
    for (uint32_t i = 0; i < s->l1_size; i++) {
        store_be64(buf + (uint64_t)i * 8, l1[i]);
    }
    ret = qcow2_write_metadata_locked(s, BLKEV_L1_UPDATE, QCOW2_OL_ACTIVE_L1,
                                      s->l1_table_offset, buf, bytes, false);
    if (ret < 0) {
        return ret;
    }
    *written = true;
    return qcow2_flush_file(s);
}

/* The COPIED flags of one slice of recompute_copied_locked's walk: the
 * entries [sl, sl + l2_slice_size) of the table at l2_offset, which maps
 * from guest 'base' on. */
static int recompute_slice_locked(Qcow2State *s, uint64_t l2_offset, uint64_t sl,
                                  uint64_t base)
{
    uint8_t *l2 = NULL;
    bool dirty = false;
    int ret = qcow2_cache_get_locked(s->l2_cache, l2_offset + sl * s->l2_entry_size,
                                     (void **)&l2);

    for (uint64_t j = 0; j < s->l2_slice_size && ret == 0; j++) {
        uint64_t guest = base | ((sl + j) << s->cluster_bits);
        uint64_t off = 0, len, refcount;
        bool plain;

        ret = entry_ref_locked(s, l2, l2_offset, j, guest, &off, &len, &plain);
        if (ret < 0 || !plain) {
            continue;
        }
        ret = qcow2_get_refcount_locked(s, off >> s->cluster_bits, &refcount);
        if (ret == 0) {
            ret = set_copied_locked(s, l2, j, refcount == 1 ? QCOW2_OFLAG_COPIED : 0,
                                    &dirty);
        }
    }
    put_slice_locked(s, l2, dirty);
    return ret;
}

/*
 * Recompute the COPIED flags of the active tree from the refcounts in
 * memory: L1 entries in memory, L2 entries in the cache (after the
 * refcount cache, R5).  Nothing is written here (see snapw_commit_locked).
 */
static int recompute_copied_locked(Qcow2State *s)
{
    uint64_t l1_shift = s->cluster_bits + s->l2_bits;
    int ret = 0;

    for (uint32_t i = 0; i < s->l1_size && ret == 0; i++) {
        uint64_t l2_offset, refcount;

        ret = snapw_l1_entry_locked(s, s->l1_table[i], i, &l2_offset);
        if (ret < 0 || l2_offset == 0) {
            continue;
        }
        ret = qcow2_get_refcount_locked(s, l2_offset >> s->cluster_bits, &refcount);
        if (ret < 0) {
            continue;
        }
        uint64_t want = refcount == 1 ? QCOW2_OFLAG_COPIED : 0;
        s->l1_table[i] = (s->l1_table[i] & ~QCOW2_OFLAG_COPIED) | want;
        /* slice by slice (cluster.c invariant 6) */
        for (uint64_t sl = 0; sl < s->l2_size && ret == 0; sl += s->l2_slice_size) {
            ret = recompute_slice_locked(s, l2_offset, sl, (uint64_t)i << l1_shift);
        }
    }
    return ret;
}

/*
 * The active L1 could not be written: where memory wants COPIED (refcount
 * 1) and the disk does not have it, raise the L2 table's refcount to 2
 * (a leak) and drop the flag in memory, so that flags and refcounts agree
 * on disk too.
 */
static void reconcile_l1_locked(Qcow2State *s, const uint64_t *disk_l1)
{
    bool had_error = blk_error_mark();
    bool raised = false;

    for (uint32_t i = 0; i < s->l1_size; i++) {
        uint64_t m = s->l1_table[i], d = disk_l1[i];
        if ((m & QCOW2_OFLAG_COPIED) && !(d & QCOW2_OFLAG_COPIED) &&
            (m & QCOW2_L1E_OFFSET_MASK) == (d & QCOW2_L1E_OFFSET_MASK) &&
            qcow2_update_refcount_locked(s, m & QCOW2_L1E_OFFSET_MASK, s->cluster_size, 1,
                                         false) == 0) {
            s->l1_table[i] &= ~QCOW2_OFLAG_COPIED;
            raised = true;
        }
    }
    if (raised &&
        (qcow2_cache_flush_locked(s->refcount_cache) < 0 || qcow2_flush_file(s) < 0)) {
        revert_refcounts_locked(s);
    }
    blk_error_unwind(had_error);
}

/*
 * R8: the L2 tables could not all be written.  The disk is the reference
 * then: every active data cluster whose entry lacks COPIED on disk while
 * its refcount is 1 gets a second reference (a leak), and the cached
 * tables are dropped so that memory holds the flags the disk holds (the
 * only unwritten changes in them are this operation's COPIED flags,
 * invariant 5).  A COPIED flag on disk with a refcount above 1 is left to
 * the caller's roll-back (create lowers the refcounts again).
 */
static void reconcile_l2_locked(Qcow2State *s, bool *reverted)
{
    g_autofree uint8_t *disk = g_malloc(s->cluster_size);
    uint64_t l1_shift = s->cluster_bits + s->l2_bits;
    bool had_error = blk_error_mark();
    bool raised = false;

    for (uint32_t i = 0; i < s->l1_size; i++) {
        uint64_t l2_offset;

        if (snapw_l1_entry_locked(s, s->l1_table[i], i, &l2_offset) < 0 ||
            l2_offset == 0 ||
            blk_pread(s->img->file, l2_offset, disk, s->cluster_size) < 0) {
            continue;
        }
        for (uint64_t j = 0; j < s->l2_size; j++) {
            uint64_t guest = ((uint64_t)i << l1_shift) | (j << s->cluster_bits);
            uint64_t off = 0, len, refcount;
            bool plain;

            if (entry_ref_locked(s, disk, l2_offset, j, guest, &off, &len, &plain) < 0 ||
                !plain || (qcow2_l2_get(s, disk, j) & QCOW2_OFLAG_COPIED) ||
                qcow2_get_refcount_locked(s, off >> s->cluster_bits, &refcount) < 0 ||
                refcount != 1) {
                continue;
            }
            if (qcow2_update_refcount_locked(s, off, s->cluster_size, 1, false) == 0) {
                raised = true;
            }
        }
        qcow2_l2_cache_discard_table_locked(s, l2_offset);
    }
    if (raised &&
        (qcow2_cache_flush_locked(s->refcount_cache) < 0 || qcow2_flush_file(s) < 0)) {
        revert_refcounts_locked(s);
        *reverted = true;
    }
    blk_error_unwind(had_error);
}

/*
 * Make the metadata in memory durable, in the order R1/R5 want: refcount
 * blocks first (R7 when they cannot be written: memory falls back to what
 * the disk holds), then the COPIED flags of the active tree are recomputed
 * from those refcounts, then the L2 tables are written (R8 when they
 * cannot be), then the active L1 when it differs from disk_l1 (what the
 * file holds; kept up to date; reconcile_l1_locked when it cannot be).
 * *reverted tells that R7 happened (logged increments are void then).
 */
int snapw_commit_locked(Qcow2State *s, uint64_t *disk_l1, bool *reverted)
{
    bool written;
    int ret, r;

    ret = qcow2_cache_flush_locked(s->refcount_cache);
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    if (ret < 0) {
        revert_refcounts_locked(s);
        *reverted = true;
    }
    r = recompute_copied_locked(s);
    if (r == 0) {
        r = qcow2_cache_flush_locked(s->l2_cache);
    }
    if (r == 0) {
        r = qcow2_flush_file(s);
    }
    if (r < 0) {
        ret = ret < 0 ? ret : r;
        reconcile_l2_locked(s, reverted);
    }
    if (s->l1_size && memcmp(s->l1_table, disk_l1, (size_t)s->l1_size * 8) != 0) {
        r = snapw_write_active_l1_locked(s, s->l1_table, &written);
        if (written) {
            memcpy(disk_l1, s->l1_table, (size_t)s->l1_size * 8);
        } else {
            reconcile_l1_locked(s, disk_l1);
        }
        ret = ret < 0 ? ret : r; /* the first failure's message (error.c inv 2) */
    }
    return ret;
}

/* snapw_commit_locked() after a step that may have failed (ret): the first
 * error is the one reported. */
int snapw_commit_keep_error_locked(Qcow2State *s, uint64_t *disk_l1, bool *reverted,
                                   int ret)
{
    bool had_error = blk_error_mark();
    int r = snapw_commit_locked(s, disk_l1, reverted);

    if (ret < 0) {
        blk_error_unwind(had_error);
        return ret;
    }
    return r;
}

/* ---- the snapshot table (R3, invariant 3) ---- */

/*
 * Write sns[0..nb) as the new snapshot table (R3), encoded by
 * snapshot-codec.c (invariant 3).  *written: the header names the new
 * table (then memory must follow even if ret < 0: only the flush failed,
 * and the old table is kept as a leak, R2).  On !*written the new clusters
 * are freed again.  repair.c rewrites the table through this too.
 */
int qcow2_snapshot_table_write_locked(Qcow2State *s, Qcow2Snapshot *sns, uint32_t nb,
                                      bool *written)
{
    g_autofree uint8_t *buf = NULL;
    uint64_t size, bytes = 0, old_offset = s->snapshots_offset,
                   old_size = s->snapshots_size;
    int64_t offset = 0;
    uint8_t hdr[12];
    int ret = 0;

    *written = false;
    if (!qcow2_snapshot_table_size(sns, nb, &size)) {
        return blk_error(EFBIG, "Snapshot table too big (more than 64 MiB)");
    }
    if (size > 0) {
        bytes = ROUND_UP(size, s->cluster_size);
        buf = g_malloc0(bytes); /* whole clusters: the tail is zeros */
        qcow2_snapshot_table_encode(sns, nb, buf);
        offset = qcow2_alloc_clusters_locked(s, bytes >> s->cluster_bits);
        if (offset < 0) {
            return (int)offset;
        }
        qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
        if (offset == 0) {
            return qcow2_corrupt_locked(s, "Preventing invalid allocation of the "
                                           "snapshot table at offset 0");
        }
        /* the table's own refcount on disk first (R1) */
        ret = snapw_write_all_locked(s);
        if (ret == 0) {
            ret = qcow2_write_metadata_locked(s, BLKEV_SNAPSHOT_TABLE, 0,
                                              (uint64_t)offset, buf, bytes, true);
        }
        if (ret < 0) {
            goto fail;
        }
    }
    store_be32(hdr, nb);
    store_be64(hdr + 4, (uint64_t)offset);
    qcow2_assert_refcounts_durable_locked(s, "snapshot-write.c R1/R3");
    qcow2_assert_durable(s->img->file, s->table_gen, "snapshot-write.c R3");
    ret = qcow2_write_header_ex_locked(s, BLKEV_SNAPSHOT_TABLE, QCOW2_HDR_NB_SNAPSHOTS,
                                       hdr, sizeof(hdr), written);
    if (!*written) {
        goto fail;
    }
    s->header.nb_snapshots = nb;
    s->header.snapshots_offset = (uint64_t)offset;
    s->snapshots_offset = (uint64_t)offset;
    s->snapshots_size = size;
    for (uint32_t i = 0; i < nb; i++) {
        sns[i].extra_data_size = QCOW2_SNAPSHOT_EXTRA_KNOWN + sns[i].unknown_extra_size;
    }
    if (ret == 0 && old_size > 0) {
        qcow2_free_clusters_as_locked(s, old_offset, old_size, /* R2 */
                                      QCOW2_DISCARD_SNAPSHOT);
    }
    return ret;

fail:
    if (offset > 0) {
        bool had_error = blk_error_mark();
        qcow2_free_clusters_locked(s, (uint64_t)offset, bytes);
        blk_error_unwind(had_error);
    }
    return ret;
}
