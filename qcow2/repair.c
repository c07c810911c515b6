/*
 * qcow2/repair.c: the writes of qemu-img check -r (QEMU 7.2 semantics):
 * refcount fixes, OFLAG_COPIED and L2 entry fixes, the refcount structure
 * rebuild, the snapshot table (read as qemu-img check reads it, with what
 * -r all drops, and rewritten), and the dirty / corrupt bits.
 *
 * Owns: every write check.c makes to the image, reading the snapshot
 * table as the check does (decoded by snapshot-codec.c), and keeping the
 * driver's in-memory state (L1 and refcount tables, metadata caches,
 * snapshot list, header fields) equal to what was written.  The write
 * path's primitives do the rest: overlap checks and metadata writes
 * (meta.c), refcount updates and cluster allocation (alloc.c), L1 entry
 * writes (l2.c), the snapshot table rewrite (snapshot-write.c).
 *
 * Invariants (cited as "repair.c invariant N"):
 *  1. Every write is overlap-checked against the metadata it could hit
 *     (meta.c invariant 1), not counting the kind being rewritten; the
 *     rebuild also ignores the old refcount structures it replaces.  A
 *     violation marks the image corrupt and fails the repair, as QEMU does;
 *     the "Marking image as corrupt" line goes to the check's messages.
 *  2. On-disk safety rules (DESIGN.md): refcounts are raised and flushed
 *     before a new table that uses the clusters is published; a new
 *     structure (refcount table, snapshot table) is written to free
 *     clusters and switched by one synced header write; what it replaced is
 *     freed only afterwards (or left leaked for the second count), so a
 *     crash at any point leaves at most leaks.
 *  3. Refcount fixes go through the refcount block cache (alloc.c), so the
 *     check's reads (through the same cache) see them at once; they reach
 *     the disk at repair_flush_refcounts() (never after the image was
 *     marked corrupt, outside the rebuild: check.c invariant 8).  The
 *     rebuild writes whole new blocks after emptying that cache.
 *  4. Qcow2State follows every write: L1 entries, the refcount table, the
 *     snapshot list and pointer, header feature bits, file_size; an L2 table
 *     written here leaves the L2 cache.
 *  5. The snapshot table is read like QEMU's in check mode (zeros past the
 *     end of the file), with the codec's check or repair rules
 *     (snapshot-codec.c invariants 2 and 3): what it allocates is bounded
 *     by the 64 MiB table limit (entries past it are an error, or dropped
 *     by -r all).
 *  6. The refcount rebuild writes even when the check marked the image
 *     corrupt (check.c invariant 8; s->rebuilding lifts meta.c invariant
 *     2's refusal for its writes alone): it is what repairs such an image,
 *     as QEMU's rebuild writes to the image file itself.  Its writes are
 *     overlap-checked and ordered as any other (invariants 1 and 2).
 */
#include "qcow2/check.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

/* The first corruption event of the image goes to the check's messages
 * (meta.c records it with blk_error); the caller prints its own line for
 * the failure, so nothing else of the recorded message is kept. */
static void take_corruption_message(Qcow2Check *c, unsigned events_before)
{
    const char *msg = blk_error_message();

    if (events_before == 0 && c->s->corruption_events > 0 && msg) {
        check_msg(c, "%s", msg);
    }
    blk_error_clear();
}

int repair_overlap_check(Qcow2Check *c, unsigned ign, uint64_t offset, uint64_t size)
{
    unsigned events = c->s->corruption_events;
    int ret = qcow2_pre_write_overlap_check_locked(c->s, ign, offset, size);

    if (ret < 0) {
        take_corruption_message(c, events);
    }
    return ret;
}

int repair_write(Qcow2Check *c, BlkEvent ev, unsigned ign, uint64_t offset,
                 const void *buf, size_t len, bool sync)
{
    unsigned events = c->s->corruption_events;
    int ret = qcow2_write_metadata_locked(c->s, ev, ign, offset, buf, len, sync);

    if (ret < 0) {
        take_corruption_message(c, events);
        return ret;
    }
    if (offset + len > c->file_size) {
        return check_refresh_file_size(c);
    }
    return 0;
}

/* ---- refcounts (invariant 3) ---- */

int repair_set_refcount(Qcow2Check *c, uint64_t cluster, uint64_t old, uint64_t refcount)
{
    Qcow2State *s = c->s;
    bool decrease = refcount < old;
    uint64_t addend = decrease ? old - refcount : refcount - old;
    int ret;

    if (addend == 0) {
        return 0;
    }
    ret =
        qcow2_update_refcount_locked(s, cluster << s->cluster_bits, 1, addend, decrease);
    blk_error_clear(); /* QEMU reports nothing more than "not fixed" */
    return ret;
}

int repair_flush_refcounts(Qcow2Check *c)
{
    unsigned events = c->s->corruption_events;
    int ret;

    if (c->s->corrupt_fatal && !c->s->rebuilding) {
        return 0; /* check.c invariant 8: the fixes stay cached, dropped at close */
    }
    ret = qcow2_write_caches_locked(c->s, true);

    if (ret == 0) {
        ret = qcow2_flush_file(c->s);
    }
    if (ret < 0) {
        take_corruption_message(c, events);
    }
    return ret;
}

/* ---- L1 / file ---- */

int repair_write_l1_entry(Qcow2Check *c, uint32_t index)
{
    unsigned events = c->s->corruption_events;
    int ret = qcow2_write_l1_entry_locked(c->s, index);

    if (ret < 0) {
        take_corruption_message(c, events);
    }
    return ret;
}

int repair_truncate(Qcow2Check *c, uint64_t size)
{
    int ret;

    ret = blk_truncate(c->file, size, false, BLK_PREALLOC_OFF, false);
    if (ret < 0) {
        return ret;
    }
    return check_refresh_file_size(c);
}

/* ---- the refcount structure rebuild (QEMU's rebuild_refcount_structure) ---- */

/* First fit of count clusters free in the in-memory table, from *first_free
 * on; grows the table past the end of the image when needed. */
static int64_t alloc_imrt(Qcow2Check *c, uint64_t count, uint64_t *first_free)
{
    uint64_t cluster = *first_free, contiguous = 0;
    bool first_gap = true;
    int ret;

    for (; cluster < c->nb_clusters && contiguous < count; cluster++) {
        if (check_refs_get(c, cluster) == 0) {
            contiguous++;
            if (first_gap) {
                *first_free = cluster;
                first_gap = false;
            }
        } else {
            contiguous = 0;
        }
    }
    if (contiguous < count) {
        ret = check_refs_resize(c, cluster + count - contiguous);
        if (ret < 0) {
            return ret;
        }
    }
    cluster -= contiguous;
    for (uint64_t i = 0; i < count; i++) {
        check_refs_set(c, cluster + i, 1);
    }
    return (int64_t)(cluster << c->s->cluster_bits);
}

/* The old refcount structures are being replaced: never in the way. */
#define REBUILD_IGN (QCOW2_OL_REFCOUNT_TABLE | QCOW2_OL_REFCOUNT_BLOCK)

/*
 * Write a refcount block for every block-sized range of [first, end) that
 * has a referenced cluster, allocating it (and growing the new reftable)
 * where there is none yet.  Returns 1 if the reftable grew, 0, or -errno.
 */
static int write_refblocks(Qcow2Check *c, uint64_t first, uint64_t end, uint64_t **rt,
                           uint64_t *rt_entries)
{
    Qcow2State *s = c->s;
    uint64_t per_block = UINT64_C(1) << s->refcount_block_bits;
    uint64_t first_free = 0;
    bool grown = false;
    int ret;

    /* nothing is counted past refs_high (it grows with every allocation) */
    for (uint64_t cluster = first; cluster < end && cluster < c->refs_high; cluster++) {
        uint64_t index, start, offset;

        if (check_refs_get(c, cluster) == 0) {
            continue;
        }
        index = cluster >> s->refcount_block_bits;
        start = index << s->refcount_block_bits;
        if (*rt_entries > index && (*rt)[index]) {
            offset = (*rt)[index];
        } else {
            /* never inside a range whose block is already written */
            first_free = MAX(first_free, start);
            int64_t off = alloc_imrt(c, 1, &first_free);
            if (off < 0) {
                return blk_error((int)-off, "ERROR allocating refblock: %s",
                                 g_strerror((int)-off));
            }
            offset = (uint64_t)off;
            if ((offset >> s->cluster_bits) >= end) {
                end = (offset >> s->cluster_bits) + 1; /* its own count too */
            }
            if (*rt_entries <= index) {
                uint64_t n = ROUND_UP((index + 1) * 8, s->cluster_size) / 8;
                uint64_t *p = g_try_realloc(*rt, n * 8);
                if (!p) {
                    return blk_error(ENOMEM, "ERROR allocating reftable memory");
                }
                memset(p + *rt_entries, 0, (n - *rt_entries) * 8);
                *rt = p;
                *rt_entries = n;
                grown = true;
            }
            (*rt)[index] = offset;
        }
        /* the block is the matching slice of the in-memory table */
        ret = repair_write(c, BLKEV_REFBLOCK_ALLOC, REBUILD_IGN, offset,
                           c->refs + index * s->cluster_size, s->cluster_size, false);
        if (ret < 0) {
            return blk_error(-ret, "ERROR writing refblock: %s", g_strerror(-ret));
        }
        cluster = start + per_block - 1;
    }
    return grown;
}

static int rebuild_locked(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    g_autofree uint64_t *rt = NULL;
    g_autofree uint8_t *be = NULL;
    uint64_t rt_entries = 0, rt_clusters = 0;
    int64_t rt_offset = -1;
    uint8_t hdr[12];
    int ret;

    /* invariant 3: nothing of the old structure stays cached */
    ret = repair_flush_refcounts(c);
    if (ret < 0) {
        res->check_errors++;
        return ret;
    }
    for (uint64_t i = 0; i < s->refcount_table_size; i++) {
        uint64_t rb = s->refcount_table[i] & QCOW2_REFT_OFFSET_MASK;
        if (rb) {
            qcow2_cache_discard_locked(s->refcount_cache, rb);
        }
    }

    /*
     * Blocks first, then a place for the table; placing the table dirties
     * the in-memory counts of its range, so that range's blocks are written
     * again, which may grow the table, and so on.  Each round the table
     * grows it covers many more clusters, so this ends.  Nothing is freed
     * here: the second count finds the old structures leaked.
     */
    ret = write_refblocks(c, 0, c->nb_clusters, &rt, &rt_entries);
    while (ret > 0) {
        uint64_t first_free = 0;

        rt_clusters = DIV_ROUND_UP(rt_entries * 8, s->cluster_size);
        if (rt_clusters * s->cluster_size > QCOW2_MAX_REFTABLE_BYTES) {
            ret = blk_error(EFBIG, "ERROR allocating reftable: %s", g_strerror(EFBIG));
            break;
        }
        rt_offset = alloc_imrt(c, rt_clusters, &first_free);
        if (rt_offset < 0) {
            ret = blk_error((int)-rt_offset, "ERROR allocating reftable: %s",
                            g_strerror((int)-rt_offset));
            break;
        }
        ret = write_refblocks(c, (uint64_t)rt_offset >> s->cluster_bits,
                              ((uint64_t)rt_offset >> s->cluster_bits) + rt_clusters, &rt,
                              &rt_entries);
    }
    if (ret < 0) {
        res->check_errors++;
        return ret;
    }
    g_assert(rt_offset >= 0);

    /* blocks durable before the table that points at them */
    ret = qcow2_flush_file(s);
    be = g_malloc0(rt_entries * 8);
    for (uint64_t i = 0; i < rt_entries; i++) {
        store_be64(be + 8 * i, rt[i]);
    }
    if (ret == 0) {
        ret = repair_write(c, BLKEV_REFTABLE_GROW, REBUILD_IGN, (uint64_t)rt_offset, be,
                           rt_entries * 8, true);
    }
    if (ret < 0) {
        return blk_error(-ret, "ERROR writing reftable: %s", g_strerror(-ret));
    }

    /* switch with one header write (invariant 2) */
    store_be64(hdr, (uint64_t)rt_offset);
    store_be32(hdr + 8, (uint32_t)rt_clusters);
    ret = qcow2_write_header_locked(s, BLKEV_HEADER_UPDATE,
                                    QCOW2_HDR_REFCOUNT_TABLE_OFFSET, hdr, sizeof(hdr));
    if (ret < 0) {
        return blk_error(-ret, "ERROR setting reftable: %s", g_strerror(-ret));
    }

    /* invariant 4 */
    g_free(s->refcount_table);
    s->refcount_table = g_steal_pointer(&rt);
    s->refcount_table_offset = (uint64_t)rt_offset;
    s->refcount_table_size = rt_entries;
    qcow2_reftable_count_used(s);
    s->header.refcount_table_offset = (uint64_t)rt_offset;
    s->header.refcount_table_clusters = (uint32_t)rt_clusters;
    s->free_cluster_index = 0; /* the allocator's hint: search from the start */
    return 0;
}

int repair_rebuild_refcounts(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    int ret;

    s->rebuilding = true; /* invariant 6 */
    ret = rebuild_locked(c, res);
    s->rebuilding = false;
    return ret;
}

/* ---- reading the snapshot table (QEMU's qcow2_check_read_snapshot_table) ---- */

/* The check reads the table through a window (it is read sequentially);
 * zeros past the end of the file (invariant 5). */
typedef struct SnapReader {
    Qcow2Check *c;
    uint8_t buf[65536];
    uint64_t start, len;
} SnapReader;

static int snap_read(void *opaque, uint64_t offset, void *buf, uint64_t len)
{
    SnapReader *r = opaque;

    if (len > sizeof(r->buf)) {
        return check_pread(r->c, offset, buf, len);
    }
    if (offset < r->start || offset - r->start > r->len - MIN(len, r->len) ||
        r->len < len) {
        int ret = check_pread(r->c, offset, r->buf, sizeof(r->buf));
        if (ret < 0) {
            r->len = 0;
            return ret;
        }
        r->start = offset;
        r->len = sizeof(r->buf);
    }
    memcpy(buf, r->buf + (offset - r->start), len);
    return 0;
}

static void snap_note(void *opaque, const char *line)
{
    SnapReader *r = opaque;
    check_msg(r->c, "%s", line);
}

/*
 * Read the snapshot table the way QEMU's qcow2_do_read_snapshots does in
 * check mode; with repair, entries with more than 1 KiB of extra data lose
 * the excess and a table over 64 MiB loses its overhanging entries
 * (snapshot-codec.c invariant 2).  Installs the result in s->snapshots.
 */
static int read_snapshot_table(Qcow2Check *c, uint32_t nb, bool repair,
                               int64_t *nb_dropped, int64_t *extra_dropped)
{
    Qcow2State *s = c->s;
    g_autofree SnapReader *r = g_new0(SnapReader, 1);
    const Qcow2SnapshotSource src = {.read = snap_read, .note = snap_note, .opaque = r};
    Qcow2SnapshotTable t;
    int ret;

    r->c = c;
    qcow2_free_snapshots(s);
    s->snapshots_size = 0;
    ret = qcow2_snapshot_table_decode(
        &src, repair ? QCOW2_SNAPSHOT_REPAIR : QCOW2_SNAPSHOT_CHECK, s->snapshots_offset,
        nb, s->img->size, &t);
    if (ret < 0) {
        return ret;
    }
    s->snapshots = t.sns;
    s->nb_snapshots = t.nb;
    s->snapshots_size = t.size;
    *nb_dropped += t.dropped;
    *extra_dropped += t.extra_cut;
    return 0;
}

int repair_read_snapshot_table(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    bool repair = c->fix & BLK_CHECK_FIX_ERRORS;
    int64_t nb_dropped = 0, extra_dropped = 0;
    uint8_t ptr[12];
    uint32_t nb;
    uint64_t offset;
    int ret;

    /* the open (check mode) did not read it; take the header's word */
    ret = check_pread(c, QCOW2_HDR_NB_SNAPSHOTS, ptr, sizeof(ptr));
    if (ret < 0) {
        res->check_errors++;
        check_msg(c,
                  "ERROR failed to read the snapshot table pointer from the image "
                  "header: %s",
                  g_strerror(-ret));
        return ret;
    }
    nb = load_be32(ptr);
    offset = load_be64(ptr + 4);
    s->snapshots_offset = offset;

    if (nb > QCOW2_MAX_SNAPSHOTS && repair) {
        check_msg(c, "Discarding %" PRIu32 " overhanging snapshots",
                  nb - QCOW2_MAX_SNAPSHOTS);
        nb_dropped += nb - QCOW2_MAX_SNAPSHOTS;
        nb = QCOW2_MAX_SNAPSHOTS;
    }

    /* QEMU's qcow2_validate_table for the table pointer */
    if (nb > QCOW2_MAX_SNAPSHOTS ||
        (uint64_t)INT64_MAX - (uint64_t)nb * QCOW2_SNAPSHOT_HEADER_SIZE < offset ||
        qcow2_offset_into_cluster(s, offset)) {
        bool too_large = nb > QCOW2_MAX_SNAPSHOTS;
        res->check_errors++;
        if (too_large) {
            ret = blk_error(EFBIG,
                            "ERROR snapshot table too large\nYou can force-remove all "
                            "%" PRIu32 " overhanging snapshots with qimg check -r all",
                            nb - QCOW2_MAX_SNAPSHOTS);
        } else {
            ret = blk_error(EINVAL, "ERROR snapshot table offset invalid");
        }
        s->snapshots_offset = 0;
        s->nb_snapshots = 0;
        return ret;
    }

    ret = read_snapshot_table(c, nb, repair, &nb_dropped, &extra_dropped);
    if (ret < 0) {
        g_autofree char *why = g_strdup(blk_error_message());
        res->check_errors++;
        s->snapshots_offset = 0;
        s->nb_snapshots = 0;
        return blk_error_replace(-ret, "ERROR failed to read the snapshot table: %s",
                                 why ? why : g_strerror(-ret));
    }
    res->corruptions += nb_dropped + extra_dropped;

    if (nb_dropped) {
        /* the header must say what s->nb_snapshots says before the
         * refcounts are checked; the clusters leak, and that is fixed */
        ret = repair_write_nb_snapshots(c, s->nb_snapshots);
        if (ret < 0) {
            res->check_errors++;
            check_msg(c,
                      "ERROR failed to update the snapshot count in the image header: %s",
                      g_strerror(-ret));
            return ret;
        }
        res->corruptions_fixed += nb_dropped;
        res->corruptions -= nb_dropped;
    }

    /* v3 entries need extra data up to disk_size */
    if (s->qcow_version >= 3) {
        for (uint32_t i = 0; i < s->nb_snapshots; i++) {
            if (s->snapshots[i].extra_data_size < 16) {
                res->corruptions++;
                check_msg(c, "%s snapshot table entry %" PRIu32 " is incomplete",
                          repair ? "Repairing" : "ERROR", i);
            }
        }
    }
    return 0;
}

/* QEMU's qcow2_check_fix_snapshot_table. */
int repair_fix_snapshot_table(Qcow2Check *c, Qcow2CheckCounts *res)
{
    int ret;

    if (res->corruptions && (c->fix & BLK_CHECK_FIX_ERRORS)) {
        ret = repair_write_snapshot_table(c);
        if (ret < 0) {
            res->check_errors++;
            check_msg(c, "ERROR failed to update snapshot table: %s", g_strerror(-ret));
            return ret;
        }
        res->corruptions_fixed += res->corruptions;
        res->corruptions = 0;
    }
    return 0;
}

/* ---- writing the snapshot table ---- */

int repair_write_nb_snapshots(Qcow2Check *c, uint32_t nb)
{
    uint8_t be[4];
    int ret;

    store_be32(be, nb);
    ret = qcow2_write_header_locked(c->s, BLKEV_HEADER_UPDATE, QCOW2_HDR_NB_SNAPSHOTS, be,
                                    sizeof(be));
    if (ret == 0) {
        c->s->header.nb_snapshots = nb;
    }
    return ret;
}

/* QEMU's qcow2_write_snapshots, through the write path's one sequence
 * (snapshot-write.c R3, invariant 2): new clusters, their refcounts on
 * disk, the table synced, one synced header write, the old table freed. */
int repair_write_snapshot_table(Qcow2Check *c)
{
    Qcow2State *s = c->s;
    unsigned events = s->corruption_events;
    bool written;
    int ret, r;

    ret = qcow2_snapshot_table_write_locked(s, s->snapshots, s->nb_snapshots, &written);
    if (ret < 0) {
        /* the check's ERROR line says why (invariant 1) */
        take_corruption_message(c, events);
    }
    r = check_refresh_file_size(c); /* the table may have grown the file */
    if (ret == 0) {
        ret = r;
    }
    if (ret < 0) {
        return ret;
    }
    return repair_flush_refcounts(c);
}

/* ---- the header bits ---- */

int repair_mark_consistent(Qcow2Check *c)
{
    Qcow2State *s = c->s;
    int ret;

    /* QEMU's qcow2_mark_clean (caches written first), then mark_consistent */
    ret = qcow2_mark_clean_locked(s);
    if (ret == 0) {
        ret = qcow2_update_incompat_locked(s, 0, QCOW2_INCOMPAT_CORRUPT);
    }
    if (ret == 0) {
        s->header.incompatible_features = s->incompatible_features;
    }
    return ret;
}
