/*
 * qcow2/resize.c: resizing the virtual disk (driver .truncate) and
 * positional access to the vmstate area (.save_vmstate, .load_vmstate).
 *
 * Owns: the size-dependent state (header size, img->size,
 * l1_vm_state_index), what happens to the clusters a resize uncovers or
 * cuts off (preallocating a grown area is prealloc.c), and where the
 * vmstate lives.
 *
 * Invariants (cited as "resize.c invariant N"):
 *  1. The new size is a multiple of 512.  A v2 image with snapshots is not
 *     resized ("Can't resize a v2 image which has snapshots"), nor an image
 *     with persistent bitmaps; shrinking needs shrink=true and no
 *     preallocation (QEMU's qcow2_co_truncate).
 *  2. Shrink: every cluster the active L1 maps from the first whole cluster
 *     past the new size on (the cut-off disk and the active vmstate area) is
 *     fully discarded (freed, entry cleared; zero.c invariant 3), then the
 *     L1 entries past the new L1 size are cleared (synced) and their L2
 *     tables freed (the L1 keeps its size, as in QEMU).
 *  3. Grow: the L1 grows to exactly the entries the new size needs.  The new
 *     area [old size, new size) reads as zeros afterwards.  With a backing
 *     file longer than the old size, as QEMU 7.2 (iotest 274): after the
 *     preallocation, the whole area up to the new size is zeroed (zero
 *     flags, the last partial (sub)cluster whole; preallocated clusters
 *     kept as zero clusters; zeros on v2, where QEMU fails the resize with
 *     "Failed to zero out new clusters"), except the clusters falloc/full
 *     allocated, which read as zeros already (their partial head is) --
 *     but with extended L2, where their subclusters are unallocated
 *     (prealloc.c invariant 2) and would show the backing file: zeroed
 *     too (zero bits; QEMU allocates the subclusters instead).
 *     Otherwise, before the preallocation, whatever the old L1 mapped there
 *     (the tail of the last cluster, an old vmstate area) is zeroed and
 *     nothing else gets an L2 table.  Preallocation
 *     metadata/falloc/full (also at the same size, as QEMU's driver does;
 *     metadata always with a raw data file) is prealloc.c, from the first
 *     whole cluster of the area on -- the same code that preallocates a new
 *     image (create.c) -- and the caches are written after it.  Without
 *     preallocation an external data file grows with the disk (QEMU).
 *  4. The header size is written last, with one synced write, then
 *     img->size and l1_vm_state_index follow, so the vmstate area moves with
 *     the size (QEMU).  A crash before leaves the old size (plus leaked or
 *     zeroed clusters past it).
 *  5. vmstate positions are offsets from the start of the vmstate area
 *     (qcow2_vm_state_offset: the first L1-entry boundary after the disk);
 *     a request whose end would pass INT64_MAX is refused.  Writes go
 *     through the normal write path and the in-flight list, like guest
 *     writes (so whole-cluster writes need no COW); in a snapshot view,
 *     loading reads the snapshot's vmstate through its L1, where its disk
 *     size puts it.
 *  6. After a shrink, once everything is durable (no L2 entry or refcount
 *     the cut could remove can come back after a power loss), refcount
 *     blocks that count nothing but themselves leave the reftable
 *     (qcow2_shrink_reftable_locked, QEMU's order); a corruption found
 *     there fails the resize before the size changes ("Failed to discard
 *     unused refblocks", as QEMU refuses it).  Then the image
 *     file is truncated after its last cluster in use, as QEMU does (a
 *     preallocated image gives the space back); a failure there is only a
 *     warning.  Not with an external data file.
 */
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

uint64_t qcow2_vm_state_offset(const Qcow2State *s)
{
    return s->l1_vm_state_index << (s->cluster_bits + s->l2_bits);
}

/* Register [offset, end) as a write and run fn on it (lock not held). */
static int registered(Qcow2State *s, uint64_t offset, uint64_t end,
                      int (*fn)(Qcow2State *, uint64_t, uint64_t, unsigned), unsigned arg)
{
    Qcow2Inflight r;
    int ret;

    if (offset >= end) {
        return 0;
    }
    qcow2_lock(s);
    qcow2_inflight_begin_locked(s, &r, offset, end - offset, true);
    qcow2_unlock(s);
    ret = fn(s, offset, end - offset, arg);
    qcow2_lock(s);
    qcow2_inflight_end_locked(s, &r);
    qcow2_unlock(s);
    return ret;
}

static int full_discard(Qcow2State *s, uint64_t offset, uint64_t bytes, unsigned unused)
{
    return qcow2_discard_registered(s, offset, bytes, true, QCOW2_DISCARD_ALWAYS);
}

static int check_resize(Qcow2State *s, uint64_t size, BlkPrealloc prealloc, bool shrink)
{
    if (size % 512) {
        return blk_error(EINVAL, "The new size must be a multiple of 512");
    }
    if (s->nb_snapshots && s->qcow_version < 3) {
        return blk_error(ENOTSUP, "Can't resize a v2 image which has snapshots");
    }
    if (s->ext.has_bitmaps && (s->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        return blk_error(ENOTSUP, "Can't resize an image which has bitmaps");
    }
    if (size < s->img->size && !shrink) {
        return blk_error(EINVAL,
                         "Use the --shrink option to perform a shrink operation.");
    }
    if (size < s->img->size && prealloc != BLK_PREALLOC_OFF) {
        return blk_error(ENOTSUP, "Preallocation can't be used for shrinking an image");
    }
    return 0;
}

/* Invariant 6: the file ends after its last cluster in use. */
static int shrink_file_locked(Qcow2State *s)
{
    uint64_t cs = s->cluster_size, end;
    int64_t last;
    int ret = qcow2_flush_all_locked(s);

    if (ret < 0 || qcow2_has_data_file(s)) {
        return ret;
    }
    last = qcow2_last_used_cluster_locked(s, (s->file_size + cs - 1) >> s->cluster_bits);
    if (last < 0) {
        return (int)last;
    }
    end = ((uint64_t)last + 1) * cs;
    if (end >= s->file_size) {
        return 0;
    }
    ret = blk_truncate(s->img->file, end, false, BLK_PREALLOC_OFF, true);
    if (ret < 0) { /* QEMU warns and goes on: the space is only kept */
        g_printerr("warning: Failed to truncate the tail of the image: %s\n",
                   blk_error_message() ? blk_error_message() : g_strerror(-ret));
        blk_error_clear();
        return 0;
    }
    s->file_size = end;
    return 0;
}

static int do_truncate(Qcow2State *s, uint64_t size, BlkPrealloc prealloc, bool shrink)
{
    BlkNode *img = s->img;
    uint64_t old = img->size, l1_shift = s->cluster_bits + s->l2_bits, new_l1;
    uint64_t old_map_end = (uint64_t)s->l1_size << l1_shift;
    bool written = false;
    uint8_t hdr[8];
    int ret;

    ret = check_resize(s, size, prealloc, shrink);
    if (ret < 0) {
        return ret;
    }
    if (!qcow2_size_to_l1(size, s->cluster_bits, s->l2_bits, &new_l1) ||
        new_l1 > QCOW2_MAX_L1_BYTES / 8) {
        /* QEMU's words (qcow2_grow_l1_table's -EFBIG) */
        return blk_error(EFBIG, "Failed to grow the L1 table: %s", g_strerror(EFBIG));
    }
    qcow2_lock(s);
    ret = qcow2_check_writable_locked(s);
    if (ret == 0) {
        qcow2_grow_stop_locked(s); /* grow.c invariant 4 */
    }
    qcow2_unlock(s);
    if (ret < 0) {
        return ret;
    }
    if (size < old) {
        /* invariant 2 */
        ret = registered(s, ROUND_UP(size, s->cluster_size), MAX(old_map_end, old),
                         full_discard, 0);
        if (ret == 0) {
            qcow2_lock(s);
            ret = qcow2_shrink_l1_table_locked(s, new_l1);
            if (ret == 0) {
                ret = qcow2_shrink_reftable_locked(s); /* invariant 6 */
                if (ret < 0) {                         /* QEMU's words */
                    ret = blk_error_replace(
                        -ret, "Failed to discard unused refblocks: %s", g_strerror(-ret));
                }
            }
            if (ret == 0) {
                ret = shrink_file_locked(s);
            }
            qcow2_unlock(s);
        }
    } else {
        /* invariant 3 */
        bool backing_over = img->backing && img->backing->size > old;
        if (size > old) {
            qcow2_lock(s);
            ret = qcow2_grow_l1_table_locked(s, new_l1, true);
            qcow2_unlock(s);
        }
        if (ret == 0 && size > old && !backing_over) {
            ret = registered(s, old, MIN(size, old_map_end), qcow2_zero_registered,
                             BLK_REQ_MAY_UNMAP | QCOW2_ZERO_IF_NEEDED);
        }
        if (qcow2_has_data_file(s) && s->data_file_raw && prealloc == BLK_PREALLOC_OFF) {
            prealloc = BLK_PREALLOC_METADATA; /* the raw data file maps 1:1 (QEMU) */
        }
        bool zero_data =
            (prealloc == BLK_PREALLOC_FALLOC || prealloc == BLK_PREALLOC_FULL) &&
            !qcow2_has_data_file(s) && !s->extended_l2;
        if (ret == 0 && prealloc != BLK_PREALLOC_OFF) {
            ret = qcow2_preallocate(s, old, size, prealloc);
            if (ret == 0) {
                qcow2_lock(s);
                ret = qcow2_write_caches_locked(s, true);
                qcow2_unlock(s);
            }
        } else if (ret == 0 && qcow2_has_data_file(s) && size > old) {
            ret = qcow2_grow_data_file(s, size); /* QEMU resizes it too */
        }
        if (ret == 0 && size > old && backing_over) {
            /* the whole area, after the preallocation, keeping its clusters;
             * falloc/full's clusters read as zeros already: only the head */
            ret = registered(s, old,
                             zero_data ? MIN(size, ROUND_UP(old, s->cluster_size)) : size,
                             qcow2_zero_registered, QCOW2_ZERO_AT_END);
        }
    }
    if (ret < 0) {
        return ret;
    }
    /* invariant 4 */
    store_be64(hdr, size);
    qcow2_lock(s);
    ret = qcow2_write_header_ex_locked(s, BLKEV_HEADER_UPDATE, QCOW2_HDR_SIZE, hdr,
                                       sizeof(hdr), &written);
    if (written) { /* memory follows the file (meta.c invariant 4) */
        s->header.size = size;
        img->size = size;
        s->l1_vm_state_index = new_l1;
    }
    ret = qcow2_take_deferred_error_locked(s, qcow2_finish_request_locked(s, ret));
    qcow2_unlock(s);
    return ret;
}

int qcow2_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                   bool shrink)
{
    return do_truncate(img->opaque, size, prealloc, shrink);
}

/* ---- vmstate (invariant 5) ---- */

static int vmstate_offset(const Qcow2State *s, uint64_t base, uint64_t pos,
                          uint64_t bytes, uint64_t *offset)
{
    uint64_t end;

    if (qcow2_add(base, pos, offset) || qcow2_add(*offset, bytes, &end) ||
        end > (uint64_t)INT64_MAX) {
        return blk_error(EINVAL,
                         "vmstate request at position %" PRIu64 " of %" PRIu64
                         " bytes is out of range",
                         pos, bytes);
    }
    return 0;
}

int qcow2_save_vmstate(BlkNode *img, uint64_t pos, const BlkIOV *qiov)
{
    Qcow2State *s = img->opaque;
    uint64_t offset;
    Qcow2Inflight r;
    int ret;

    if (!s->writable) {
        return blk_error(EACCES, "Image '%s' is read-only", img->filename);
    }
    if (qiov->size == 0) {
        return 0;
    }
    blk_order_wait(); /* write.c invariant 14 */
    qcow2_lock(s);
    ret = vmstate_offset(s, qcow2_vm_state_offset(s), pos, qiov->size, &offset);
    if (ret == 0) {
        ret = qcow2_check_writable_locked(s);
    }
    if (ret < 0) {
        qcow2_unlock(s);
        return ret;
    }
    qcow2_inflight_begin_locked(s, &r, offset, qiov->size, true);
    ret = qcow2_write_registered_locked(s, offset, qiov); /* write.c invariant 14 */
    qcow2_inflight_end_locked(s, &r);
    ret = qcow2_take_deferred_error_locked(s, qcow2_finish_request_locked(s, ret));
    qcow2_unlock(s);
    return ret;
}

int qcow2_load_vmstate(BlkNode *img, uint64_t pos, const BlkIOV *qiov)
{
    Qcow2State *s = img->opaque;
    uint64_t base = qcow2_vm_state_offset(s), offset;
    int ret;

    if (qiov->size == 0) {
        return 0;
    }
    if (s->snapshot_view >= 0) {
        uint64_t entries;
        if (!qcow2_size_to_l1(s->snapshots[s->snapshot_view].disk_size, s->cluster_bits,
                              s->l2_bits, &entries) ||
            entries > (UINT64_MAX >> (s->cluster_bits + s->l2_bits))) {
            return blk_error(EINVAL, "Snapshot disk size is out of range");
        }
        base = entries << (s->cluster_bits + s->l2_bits);
    }
    ret = vmstate_offset(s, base, pos, qiov->size, &offset);
    if (ret < 0) {
        return ret;
    }
    return qcow2_read_registered(s, offset, qiov);
}
