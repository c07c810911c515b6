/*
 * qcow2/meta.c: writing metadata safely -- overlap checks, the corrupt bit,
 * header field updates, the dirty bit of lazy refcounts, and the write-back
 * hooks of the metadata caches.
 *
 * Owns: the decision whether a write may touch a host range (DESIGN.md
 * rule 3), the fatal corruption state of an open image, every header write
 * of the write path, and the order in which caches reach the disk at flush.
 *
 * Invariants (cited as "meta.c invariant N"):
 *  1. Every write of metadata and of guest data first passes
 *     qcow2_pre_write_overlap_check_locked() against the metadata it could
 *     overlap: header, active L1, active L2 tables (from the L1), refcount
 *     table, refcount blocks (from the reftable), snapshot table, inactive
 *     L1 tables, bitmap directory -- QEMU's "cached" template, the default
 *     -- or what the overlap-check option asks (s->overlap_checks: QEMU's
 *     templates none, constant, cached, all, which adds the snapshots' L2
 *     tables, read from the disk, and its per-kind switches).  A write is
 *     not checked against its own kind (ign), and ranges are compared in
 *     whole clusters, as QEMU does.
 *  2. A violation is fatal: the write is not done, the image is marked
 *     corrupt (incompatible bit 1, one synced header write on v3) and every
 *     later metadata write-back fails with -EIO; a guest read, write,
 *     zero, discard or compressed write that comes after it fails at its
 *     start with -ENOMEDIUM, "No medium found", as QEMU's, whose driver is
 *     gone from the node by then (060: the tail of a discard split in two,
 *     after its head marked the image corrupt).  The mark is an atomic
 *     store, so reads that take no lock (fastmap.c) see it too; a read
 *     already past that check completes.  Nothing the caches still
 *     hold is written any more (close writes nothing back): the file keeps
 *     what a crash at the mark would have left, a leak at worst.
 *  3. Only the first corruption event of a writable image reports "qcow2:
 *     Marking image as corrupt: ...; further corruption events will be
 *     suppressed"; a read-only image (or a snapshot view) only reports
 *     "Image is corrupt: ..." and sets nothing, and so does a non-fatal
 *     event (QEMU's: a cluster that cannot be freed is leaked instead),
 *     which never marks the image -- only the first event of all prints,
 *     but a fatal one after it still does.  As QEMU prints it, the
 *     first event's line goes to standard error at once (g_printerr: an
 *     embedder redirects it with g_set_printerr_handler), "... Image is
 *     corrupt: ...; further non-fatal corruption events will be
 *     suppressed" when read-only; the request's error says it too.  During
 *     a check the line goes to the check's messages instead, in order
 *     (repair.c invariant 1).
 *  4. Header updates are one write of the changed fields, then a flush
 *     (synced), so a crash leaves either the old or the new value: l1_size
 *     and l1_table_offset (12 bytes at 36), refcount_table_offset and
 *     refcount_table_clusters (12 bytes at 48), size (8 at 24), feature bits
 *     (8 at 72 or 88).  In-memory copies change only after the write worked.
 *     A write that worked followed by a flush that failed leaves the new
 *     value in the file (just not durable): callers then keep memory equal
 *     to the file, report the error, and free nothing the old value still
 *     references (a leak at worst).
 *  5. The dirty bit (lazy refcounts) is set, synced, before the first
 *     allocation of a write (write.c, zero.c, compress.c call
 *     qcow2_mark_dirty_locked first), and cleared only after both caches and
 *     the file were flushed.  While it is set refcounts need not be accurate:
 *     no L2 -> refcount dependency, and flush skips the refcount cache.
 *  6. Cache write-back (eviction or flush) goes through the hooks here, which
 *     announce l2_update / refblock_update and overlap-check without their own
 *     kind; the cache's dependency edges (cache.c invariant 4) decide the
 *     order.
 *  7. An I/O error is never swallowed: when freeing fails (the refcount is
 *     left high: a leak, never a corruption), the error is kept and the next
 *     flush returns it -- not an unrelated guest write, which succeeded.
 *  8. Persistent dirty bitmaps are maintained (bitmap-store.c): at a
 *     read-write open (qcow2.c), and before the first guest write, zero,
 *     discard or compressed write after a store, the enabled bitmaps are
 *     loaded and the bitmaps marked in use, and every such
 *     request sets their bits before it is issued; close stores them.  An
 *     enabled bitmap qimg cannot maintain stays in use, so QEMU never
 *     trusts bits that miss qimg's writes (an incremental backup would
 *     lose data).  The vmstate area sets no bits.
 *  9. A failed metadata write or flush is sticky (SQLite's ERROR state): a
 *     power loss may now keep any subset of what was written since the
 *     last good flush, and memory may describe tables the file does not
 *     hold, so from then on every write, zero, discard, compressed write,
 *     metadata update and flush of the image fails with EIO naming the
 *     first failure, until the image is closed (close then writes nothing
 *     back but invariant 13's retry).  Reads go on.  A failed guest *data*
 *     write is the request's own error and is not sticky.  Clusters freed
 *     after the failure (the undo of the failed step) stay counted, a leak:
 *     the failed write may have reached the file, and the retry of
 *     invariant 13 must not write a decrease a durable table contradicts.
 * 10. Ordering is asserted where the dependent write is issued (debug
 *     builds): an L2 table only after the data it links is durable (cache
 *     write hook, cache.c invariant 4); an L1 entry, a header switch or a
 *     reference to a new table only after that table and the refcount
 *     blocks are durable (qcow2_assert_durable, l2.c, alloc.c,
 *     snapshot-write.c); decreases only after the L2 tables that dropped
 *     the references are durable (alloc.c invariant 2).  The generations
 *     of block.h invariant 4 make "durable" checkable.
 * 11. Flush order (DESIGN.md rules 1-2, QEMU's qcow2_write_caches plus the
 *     barriers QEMU's cache dependencies imply): refcount blocks, flush;
 *     L2 tables (data they link already durable), flush; then the pending
 *     decreases are applied, their refcount blocks written, flush.  A flush
 *     with nothing pending costs no fdatasync at all (block.h inv. 4).
 * 12. A guest flush (qcow2_flush) holds the metadata lock only while it
 *     writes cache entries, not across the fdatasyncs between the steps of
 *     invariant 11: other threads' cache hits, in-place writes and reads go
 *     on meanwhile; whatever they dirty in between is ordered by the cache
 *     dependencies and goes with the next flush.  Metadata updates inside a
 *     request (new L2 table, L1 growth, refcount table growth) and snapshot
 *     operations keep the lock across their barriers, as QEMU does.
 * 13. Close retries once (QEMU's qcow2_inactivate, iotest 026): when the
 *     last flush of qimg_image_close fails on an image with a sticky error
 *     (invariant 9), the caches are written back once more, in
 *     invariant 11's order -- waiting refcount block entries (alloc.c
 *     invariant 3), refcount blocks, flush of the image file; only then,
 *     when some are dirty, the data they link flushed, L2 tables, flush --
 *     and nothing else: no guest request can come any more (the handle is
 *     quiesced), pending frees stay leaks, the dirty bit stays.  Memory
 *     describes the file plus raised counts and L2 tables whose data is
 *     durable (invariants 4, 10 and l2.c invariant 4), so what it writes
 *     is a state a crash could have left.  Its failure is reported as
 *     QEMU's two lines, "Failed to flush the L2 table cache: ERR" and
 *     "Failed to flush the refcount block cache: ERR" (QEMU flushes the L2
 *     cache first, which flushes the refcount cache it depends on), or the
 *     first alone when only the L2 tables failed; nothing when it worked.
 */
#include "qcow2/bitmap.h"
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

void qcow2_defer_error_locked(Qcow2State *s, int ret, const char *msg)
{
    if (ret < 0 && !s->deferred_error) {
        s->deferred_error = ret;
        s->deferred_msg = g_strdup(msg ? msg : g_strerror(-ret));
    }
}

/* Invariant 7: the deferred error of a free, reported by a flush. */
int qcow2_take_deferred_error_locked(Qcow2State *s, int ret)
{
    int deferred = s->deferred_error;
    g_autofree char *msg = g_steal_pointer(&s->deferred_msg);

    s->deferred_error = 0;
    if (deferred == 0) {
        return ret;
    }
    /* The deferred error came first: whatever failed after it (ret) was
     * most likely refused because of it (invariant 9). */
    return blk_error_replace(-deferred, "%s", msg);
}

int qcow2_finish_request_locked(Qcow2State *s, int ret)
{
    /* alloc.c invariant 2: bound the decreases waiting for a flush.  A
     * failure here is sticky (invariant 9) and reported by the next
     * request; this one did its work. */
    if (s->writable && s->pending_frees &&
        s->pending_frees->len >= QCOW2_MAX_PENDING_FREES) {
        bool had_error = blk_error_mark();
        (void)qcow2_flush_all_locked(s);
        blk_error_unwind(had_error);
    }
    return ret;
}

int qcow2_set_sticky_locked(Qcow2State *s, int ret)
{
    if (ret < 0 && s->sticky_error == 0) {
        const char *msg = blk_error_message();
        s->sticky_error = ret;
        qcow2_fastmap_set_writes_locked(s->fastmap, false); /* fastmap.c inv 3 */
        s->sticky_msg = g_strdup(msg ? msg : g_strerror(-ret));
    }
    return ret;
}

bool qcow2_l2_cache_is_durable(void *opaque, uint64_t gen)
{
    Qcow2State *s = opaque;
    return blk_is_durable(qcow2_data_node(s), gen);
}

void qcow2_assert_refcounts_durable_locked(Qcow2State *s, const char *rule)
{
#ifndef NDEBUG
    if (qcow2_cache_has_dirty_locked(s->refcount_cache)) {
        g_error("write ordering broken (%s): a refcount block is still dirty", rule);
    }
    if (s->pending_hooks && s->pending_hooks->len > 0) {
        g_error("write ordering broken (%s): a refcount block is not hooked yet", rule);
    }
    qcow2_assert_durable(s->img->file, s->refblock_gen, rule);
#else
    (void)s, (void)rule;
#endif
}

static const char *overlap_name(unsigned kind)
{
    switch (kind) {
    case QCOW2_OL_MAIN_HEADER:
        return "qcow2_header";
    case QCOW2_OL_ACTIVE_L1:
        return "active L1 table";
    case QCOW2_OL_ACTIVE_L2:
        return "active L2 table";
    case QCOW2_OL_REFCOUNT_TABLE:
        return "refcount table";
    case QCOW2_OL_REFCOUNT_BLOCK:
        return "refcount block";
    case QCOW2_OL_SNAPSHOT_TABLE:
        return "snapshot table";
    case QCOW2_OL_INACTIVE_L1:
        return "inactive L1 table";
    case QCOW2_OL_BITMAP_DIRECTORY:
        return "bitmap directory";
    case QCOW2_OL_INACTIVE_L2:
        return "inactive L2 table";
    default:
        return "metadata";
    }
}

/* [start, end) in whole clusters overlaps [o, o + len) widened the same way.
 * o and len come from validated tables (or are rejected when they would
 * overflow: such a table cannot be overlapped by a real write anyway). */
static bool overlaps(const Qcow2State *s, uint64_t start, uint64_t end, uint64_t o,
                     uint64_t len)
{
    uint64_t o_end;

    if (len == 0 || qcow2_add(o, len, &o_end) ||
        qcow2_add(o_end, s->cluster_size - 1, &o_end)) {
        return false;
    }
    o &= ~(s->cluster_size - 1);
    o_end &= ~(s->cluster_size - 1);
    return o < end && start < o_end;
}

/* The snapshots' L2 tables (QCOW2_OL_INACTIVE_L2): each snapshot's L1
 * read from the disk, as QEMU reads them.  1 on an overlap, 0, or -errno. */
static int inactive_l2_overlap(Qcow2State *s, uint64_t start, uint64_t end)
{
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        const Qcow2Snapshot *sn = &s->snapshots[i];
        g_autofree uint64_t *l1 = NULL;
        int ret = qcow2_read_table(s->img->file, sn->l1_table_offset, sn->l1_size, &l1);

        if (ret < 0) {
            return ret;
        }
        for (uint32_t j = 0; j < sn->l1_size; j++) {
            uint64_t l2 = l1[j] & QCOW2_L1E_OFFSET_MASK;
            if (l2 && overlaps(s, start, end, l2, s->cluster_size)) {
                return 1;
            }
        }
    }
    return 0;
}

/* The first kind in chk that the write overlaps, 0, or -errno. */
static int overlap_kind(Qcow2State *s, unsigned chk, uint64_t offset, uint64_t size)
{
    uint64_t start, end, len;

    if (size == 0 || qcow2_add(offset, size, &end) ||
        qcow2_add(end, s->cluster_size - 1, &end)) {
        return size ? QCOW2_OL_MAIN_HEADER : 0; /* cannot be a real write */
    }
    start = offset & ~(s->cluster_size - 1);
    end &= ~(s->cluster_size - 1);

    if ((chk & QCOW2_OL_MAIN_HEADER) && start < s->cluster_size) {
        return QCOW2_OL_MAIN_HEADER;
    }
    if ((chk & QCOW2_OL_ACTIVE_L1) && s->snapshot_view < 0 &&
        overlaps(s, start, end, s->l1_table_offset, (uint64_t)s->l1_size * 8)) {
        return QCOW2_OL_ACTIVE_L1;
    }
    if ((chk & QCOW2_OL_ACTIVE_L2) && s->snapshot_view < 0) {
        for (uint32_t i = 0; i < s->l1_size; i++) {
            uint64_t l2 = s->l1_table[i] & QCOW2_L1E_OFFSET_MASK;
            if (l2 && overlaps(s, start, end, l2, s->cluster_size)) {
                return QCOW2_OL_ACTIVE_L2;
            }
        }
    }
    len = s->refcount_table_size * 8; /* <= 8 MiB */
    if ((chk & QCOW2_OL_REFCOUNT_TABLE) &&
        overlaps(s, start, end, s->refcount_table_offset, len)) {
        return QCOW2_OL_REFCOUNT_TABLE;
    }
    if (chk & QCOW2_OL_REFCOUNT_BLOCK) {
        for (uint64_t i = 0; i < s->refcount_table_used; i++) {
            uint64_t rb = s->refcount_table[i] & QCOW2_REFT_OFFSET_MASK;
            if (rb && overlaps(s, start, end, rb, s->cluster_size)) {
                return QCOW2_OL_REFCOUNT_BLOCK;
            }
        }
    }
    if ((chk & QCOW2_OL_SNAPSHOT_TABLE) &&
        overlaps(s, start, end, s->snapshots_offset, s->snapshots_size)) {
        return QCOW2_OL_SNAPSHOT_TABLE;
    }
    if (chk & QCOW2_OL_INACTIVE_L1) {
        for (uint32_t i = 0; i < s->nb_snapshots; i++) {
            const Qcow2Snapshot *sn = &s->snapshots[i];
            if (overlaps(s, start, end, sn->l1_table_offset, (uint64_t)sn->l1_size * 8)) {
                return QCOW2_OL_INACTIVE_L1;
            }
        }
    }
    if ((chk & QCOW2_OL_BITMAP_DIRECTORY) && s->ext.has_bitmaps &&
        (s->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS) &&
        overlaps(s, start, end, s->ext.bitmaps.directory_offset,
                 s->ext.bitmaps.directory_size)) {
        return QCOW2_OL_BITMAP_DIRECTORY;
    }
    if (chk & QCOW2_OL_INACTIVE_L2) {
        int ret = inactive_l2_overlap(s, start, end);
        return ret > 0 ? QCOW2_OL_INACTIVE_L2 : ret;
    }
    return 0;
}

unsigned qcow2_check_metadata_overlap_locked(Qcow2State *s, unsigned ign, uint64_t offset,
                                             uint64_t size)
{
    return (unsigned)overlap_kind(s, QCOW2_OL_CACHED & ~ign, offset, size);
}

static const struct {
    const char *name;
    unsigned kinds;
} overlap_templates[] =
    {
        {"none", 0},
        {"constant", QCOW2_OL_CONSTANT},
        {"cached", QCOW2_OL_CACHED},
        {"all", QCOW2_OL_ALL},
},
  overlap_kinds[] = {
      {"main-header", QCOW2_OL_MAIN_HEADER},
      {"active-l1", QCOW2_OL_ACTIVE_L1},
      {"active-l2", QCOW2_OL_ACTIVE_L2},
      {"refcount-table", QCOW2_OL_REFCOUNT_TABLE},
      {"refcount-block", QCOW2_OL_REFCOUNT_BLOCK},
      {"snapshot-table", QCOW2_OL_SNAPSHOT_TABLE},
      {"inactive-l1", QCOW2_OL_INACTIVE_L1},
      {"inactive-l2", QCOW2_OL_INACTIVE_L2},
      {"bitmap-directory", QCOW2_OL_BITMAP_DIRECTORY},
};

bool qcow2_overlap_template(const char *name, unsigned *kinds)
{
    for (size_t i = 0; i < G_N_ELEMENTS(overlap_templates); i++) {
        if (strcmp(name, overlap_templates[i].name) == 0) {
            *kinds = overlap_templates[i].kinds;
            return true;
        }
    }
    return false;
}

bool qcow2_overlap_kind(const char *name, unsigned *kind)
{
    for (size_t i = 0; i < G_N_ELEMENTS(overlap_kinds); i++) {
        if (strcmp(name, overlap_kinds[i].name) == 0) {
            *kind = overlap_kinds[i].kinds;
            return true;
        }
    }
    return false;
}

int qcow2_pre_write_overlap_check_locked(Qcow2State *s, unsigned ign, uint64_t offset,
                                         uint64_t size)
{
    int kind = overlap_kind(s, s->overlap_checks & ~ign, offset, size);

    if (kind <= 0) {
        return kind < 0 ? blk_error_prefix(kind, "qcow2: overlap check") : 0;
    }
    /* meta.c invariant 2 */
    return qcow2_corrupt_locked(
        s, "Preventing invalid write on metadata (overlaps with %s)", overlap_name(kind));
}

int qcow2_check_writable_locked(Qcow2State *s)
{
    if (s->corrupt_fatal && !s->rebuilding) { /* repair.c invariant 6 */
        return blk_error(EIO, "qcow2: Image is corrupt; writes are refused");
    }
    if (s->sticky_error && !s->close_retry) { /* invariants 9, 13 */
        return blk_error(EIO,
                         "qcow2: writes are refused until the image is reopened: an "
                         "earlier metadata write or flush failed (%s)",
                         s->sticky_msg);
    }
    return 0;
}

int qcow2_check_data_writable_locked(Qcow2State *s, uint64_t offset, uint64_t bytes)
{
    int ret;

    if (s->corrupt_fatal) { /* invariant 2: a request after the mark */
        return blk_error(ENOMEDIUM, "%s", g_strerror(ENOMEDIUM));
    }
    ret = qcow2_check_writable_locked(s);

    if (ret == 0 && !s->bitmaps_in_use) {
        ret = qcow2_bitmaps_begin_write_locked(s); /* invariant 8 */
    }
    if (ret == 0) {
        qcow2_bitmaps_note(s, offset, bytes); /* bitmap-store.c invariant 2 */
    }
    return ret;
}

int qcow2_signal_corruption_locked(Qcow2State *s, bool fatal, const char *file, int line,
                                   const char *fmt, ...)
{
    va_list ap;
    g_autofree char *msg = NULL;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    s->corruption_events++;
    g_debug("qcow2 corruption detected at %s:%d: %s", file, line, msg);
    if (!fatal || !s->writable) {
        if (s->corruption_events == 1 && !s->in_check) { /* invariant 3 */
            g_printerr("qcow2: Image is corrupt: %s; further non-fatal corruption events "
                       "will be suppressed\n",
                       msg);
        }
        return blk_error(EIO, "Image is corrupt: %s", msg);
    }
    if (s->corrupt_fatal) {
        return blk_error(EIO, "qcow2: Image is corrupt: %s", msg); /* invariant 3 */
    }
    /* invariant 2: before the header write below; lock-free reads see it */
    __atomic_store_n(&s->corrupt_fatal, true, __ATOMIC_RELEASE);
    if (!s->in_check) { /* invariant 3 (a check reports it in its messages) */
        g_printerr("qcow2: Marking image as corrupt: %s; further corruption events will "
                   "be suppressed\n",
                   msg);
    }
    qcow2_fastmap_set_writes_locked(s->fastmap, false); /* fastmap.c inv 3 */
    if (s->qcow_version >= 3) {
        uint8_t buf[8];
        store_be64(buf, s->incompatible_features | QCOW2_INCOMPAT_CORRUPT);
        /* Best effort: the in-memory state refuses writes either way. */
        if (qcow2_write_header_locked(s, BLKEV_HEADER_UPDATE,
                                      QCOW2_HDR_INCOMPATIBLE_FEATURES, buf, 8) < 0) {
            blk_error_clear();
        }
    }
    s->incompatible_features |= QCOW2_INCOMPAT_CORRUPT;
    return blk_error(EIO,
                     "qcow2: Marking image as corrupt: %s; further corruption events "
                     "will be suppressed",
                     msg);
}

int qcow2_write_metadata_locked(Qcow2State *s, BlkEvent ev, unsigned ign, uint64_t offset,
                                const void *buf, size_t len, bool sync)
{
    int ret = qcow2_check_writable_locked(s);

    if (ret < 0) {
        return ret;
    }
    ret = qcow2_pre_write_overlap_check_locked(s, ign, offset, len); /* invariant 1 */
    if (ret < 0) {
        return ret;
    }
    blk_event(s->img->file, ev);
    ret = blk_pwrite(s->img->file, offset, buf, len, 0);
    if (ret < 0) {
        return qcow2_set_sticky_locked(s, ret); /* invariant 9 */
    }
    /* invariant 10: what kind of metadata this generation holds */
    uint64_t gen = blk_write_gen(s->img->file);
    switch (ev) {
    case BLKEV_REFBLOCK_UPDATE:
    case BLKEV_REFBLOCK_ALLOC:
    case BLKEV_REFBLOCK_HOOKUP:
        s->refblock_gen = gen;
        break;
    case BLKEV_L2_UPDATE:
        s->l2_gen = gen;
        break;
    case BLKEV_L2_ALLOC:
    case BLKEV_L1_GROW:
    case BLKEV_REFTABLE_GROW:
    case BLKEV_SNAPSHOT_TABLE:
        s->table_gen = gen;
        break;
    default:
        break;
    }
    return sync ? qcow2_flush_file(s) : 0;
}

int qcow2_write_header_ex_locked(Qcow2State *s, BlkEvent ev, uint64_t offset,
                                 const void *buf, size_t len, bool *written)
{
    int ret;

    g_assert(offset + len <= QCOW2_HDR_V3_FULL_LENGTH);
    *written = false;
    blk_event(s->img->file, ev);
    ret = blk_pwrite(s->img->file, offset, buf, len, 0);
    if (ret < 0) {
        return qcow2_set_sticky_locked(s, ret); /* invariant 9 */
    }
    *written = true;
    return qcow2_set_sticky_locked(s, blk_flush(s->img->file)); /* invariant 4 */
}

int qcow2_write_header_locked(Qcow2State *s, BlkEvent ev, uint64_t offset,
                              const void *buf, size_t len)
{
    bool written;
    return qcow2_write_header_ex_locked(s, ev, offset, buf, len, &written);
}

int qcow2_update_incompat_locked(Qcow2State *s, uint64_t set, uint64_t clear)
{
    uint64_t v = (s->incompatible_features | set) & ~clear;
    uint8_t buf[8];
    int ret;

    if (v == s->incompatible_features) {
        return 0;
    }
    if (s->qcow_version < 3) {
        s->incompatible_features = v; /* v2 has no feature fields */
        return 0;
    }
    store_be64(buf, v);
    ret = qcow2_write_header_locked(s, BLKEV_HEADER_UPDATE,
                                    QCOW2_HDR_INCOMPATIBLE_FEATURES, buf, sizeof(buf));
    if (ret == 0) {
        s->incompatible_features = v;
    }
    return ret;
}

bool qcow2_need_accurate_refcounts(const Qcow2State *s)
{
    return !(s->incompatible_features & QCOW2_INCOMPAT_DIRTY);
}

bool qcow2_use_lazy_refcounts(const Qcow2State *s)
{
    return s->lazy_override ? s->lazy_override > 0
                            : (s->compatible_features & QCOW2_COMPAT_LAZY_REFCOUNTS) != 0;
}

int qcow2_mark_dirty_locked(Qcow2State *s)
{
    if (!qcow2_use_lazy_refcounts(s) ||
        (s->incompatible_features & QCOW2_INCOMPAT_DIRTY)) {
        return 0;
    }
    return qcow2_update_incompat_locked(s, QCOW2_INCOMPAT_DIRTY, 0); /* invariant 5 */
}

int qcow2_write_caches_locked(Qcow2State *s, bool all)
{
    int ret = qcow2_check_writable_locked(s);

    if (ret < 0) {
        return ret;
    }
    /* The L2 cache writes the refcount blocks it depends on first. */
    ret = qcow2_cache_flush_locked(s->l2_cache);
    if (ret < 0) {
        return ret;
    }
    if (all || qcow2_need_accurate_refcounts(s)) {
        ret = qcow2_cache_flush_locked(s->refcount_cache);
    }
    return ret;
}

int qcow2_mark_clean_locked(Qcow2State *s)
{
    int ret;

    if (!(s->incompatible_features & QCOW2_INCOMPAT_DIRTY)) {
        return 0;
    }
    ret = qcow2_write_caches_locked(s, true);
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    if (ret == 0) {
        ret = qcow2_update_incompat_locked(s, 0, QCOW2_INCOMPAT_DIRTY); /* invariant 5 */
    }
    return ret;
}

int qcow2_flush_file(Qcow2State *s)
{
    int ret = blk_flush(s->img->file);

    if (ret == 0 && s->data_file) {
        ret = blk_flush(s->data_file);
    }
    return qcow2_set_sticky_locked(s, ret); /* invariant 9 */
}

int qcow2_flush_all_locked(Qcow2State *s)
{
    int ret = qcow2_check_writable_locked(s);

    /* invariant 11 */
    if (ret == 0) {
        ret = qcow2_write_caches_locked(s, false);
    }
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    if (ret == 0 && s->pending_frees && s->pending_frees->len > 0) {
        qcow2_apply_pending_frees_locked(s);
        ret = qcow2_write_caches_locked(s, false);
        if (ret == 0) {
            ret = qcow2_flush_file(s);
        }
    }
    return qcow2_take_deferred_error_locked(s, ret); /* invariant 7 */
}

int qcow2_close_retry_locked(Qcow2State *s, bool *retried)
{
    int ret;

    *retried = s->writable && !s->corrupt_fatal && s->sticky_error;
    if (!*retried) {
        return 0;
    }
    blk_error_clear();
    s->close_retry = true; /* invariant 13 */
    ret = qcow2_settle_refblocks_locked(s);
    if (ret == 0) {
        ret = qcow2_cache_flush_locked(s->refcount_cache);
    }
    if (ret == 0) { /* the image file's, as QEMU's cache flush */
        ret = qcow2_set_sticky_locked(s, blk_flush(s->img->file));
    }
    if (ret < 0) {
        s->close_retry = false;
        return blk_error_replace(-ret,
                                 "Failed to flush the L2 table cache: %s\n"
                                 "Failed to flush the refcount block cache: %s",
                                 g_strerror(-ret), g_strerror(-ret));
    }
    qcow2_assert_refcounts_durable_locked(s, "meta.c invariant 13");
    if (qcow2_cache_has_dirty_locked(s->l2_cache)) {
        ret = qcow2_flush_file(s); /* their data too (cache.c invariant 4) */
        if (ret == 0) {
            ret = qcow2_cache_flush_locked(s->l2_cache);
        }
        if (ret == 0) {
            ret = qcow2_flush_file(s);
        }
    }
    s->close_retry = false;
    if (ret < 0) {
        return blk_error_replace(-ret, "Failed to flush the L2 table cache: %s",
                                 g_strerror(-ret));
    }
    return 0;
}

int qcow2_l2_cache_write(void *opaque, uint64_t offset, const void *buf, size_t len)
{
    /* invariant 6 */
    return qcow2_write_metadata_locked(opaque, BLKEV_L2_UPDATE, QCOW2_OL_ACTIVE_L2,
                                       offset, buf, len, false);
}

int qcow2_refblock_cache_write(void *opaque, uint64_t offset, const void *buf, size_t len)
{
    return qcow2_write_metadata_locked(opaque, BLKEV_REFBLOCK_UPDATE,
                                       QCOW2_OL_REFCOUNT_BLOCK, offset, buf, len, false);
}

int qcow2_cache_flush_file(void *opaque)
{
    return qcow2_flush_file(opaque);
}

int qcow2_open_rw_locked(Qcow2State *s)
{
    uint64_t unknown = s->autoclear_features & ~QCOW2_AUTOCLEAR_KNOWN;
    uint8_t buf[8];
    int ret;

    s->writable = true;
    qcow2_grow_init(s, s->file_size);
    if (unknown == 0 || s->qcow_version < 3) {
        return 0;
    }
    /* DESIGN.md rule 5: software that does not know an autoclear feature
     * clears its bit when it opens the image read-write. */
    store_be64(buf, s->autoclear_features & ~unknown);
    ret = qcow2_write_header_locked(s, BLKEV_HEADER_UPDATE, QCOW2_HDR_AUTOCLEAR_FEATURES,
                                    buf, sizeof(buf));
    if (ret < 0) {
        return ret;
    }
    s->autoclear_features &= ~unknown;
    return 0;
}
