/*
 * qcow2/snapshot-ops.c: the internal snapshot operations of the qcow2
 * driver -- create (savevm's disk side), goto (apply, loadvm), delete --
 * and their lookups, over the write machinery of snapshot-write.c.
 *
 * Owns: what each operation changes and in which order.  The ordering
 * rules R1-R10 and invariants 1-5 are snapshot-write.c's (cited here as
 * "R N" and "invariant N", as there).
 */
#include "qcow2/snapshot-write.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- helpers ---- */

/* A copy of the active L1 (at least one entry, so never NULL). */
static uint64_t *dup_active_l1(const Qcow2State *s)
{
    uint64_t *l1 = g_new0(uint64_t, MAX(s->l1_size, 1));
    if (s->l1_size) {
        memcpy(l1, s->l1_table, (size_t)s->l1_size * 8);
    }
    return l1;
}

/* Invariant 2. */
static int find_id_or_name(const Qcow2State *s, const char *id_or_name)
{
    int idx = qcow2_find_snapshot(s, id_or_name, NULL);
    return idx >= 0 ? idx : qcow2_find_snapshot(s, NULL, id_or_name);
}

static char *new_snapshot_id(const Qcow2State *s)
{
    unsigned long max = 0;

    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        unsigned long id = strtoul(s->snapshots[i].id_str, NULL, 10);
        max = MAX(max, id);
    }
    return g_strdup_printf("%lu", max + 1);
}

/* R10: mark a v3 image dirty (synced) before refcounts and COPIED flags
 * change; *marked tells flux_end_locked() to clear it again. */
static int flux_begin_locked(Qcow2State *s, bool *marked)
{
    int ret;

    *marked = false;
    if (s->qcow_version < 3 || (s->incompatible_features & QCOW2_INCOMPAT_DIRTY)) {
        return 0;
    }
    ret = snapw_write_all_locked(s); /* invariant 5, before the bit */
    if (ret == 0) {
        ret = qcow2_update_incompat_locked(s, QCOW2_INCOMPAT_DIRTY, 0);
    }
    *marked = ret == 0;
    return ret;
}

/* R10: everything durable, then the bit cleared; after a sticky failure
 * the bit stays (the next read-write open repairs). */
static int flux_end_locked(Qcow2State *s, bool marked, int ret)
{
    int r;

    if (!marked || s->sticky_error) {
        return ret;
    }
    r = qcow2_mark_clean_locked(s);
    return ret < 0 ? ret : r;
}

/* Invariant 1: wait for the requests in flight and keep new ones out. */
static void exclusive_begin_locked(Qcow2State *s, Qcow2Inflight *r)
{
    qcow2_inflight_begin_locked(s, r, 0, UINT64_C(1) << 63, true);
}

/* Discard [offset, offset + bytes) of the active tree, registered
 * (QEMU's discard of the active VM state after a snapshot). */
static int discard_registered_range(Qcow2State *s, uint64_t offset, uint64_t bytes)
{
    Qcow2Inflight r;
    int ret;

    qcow2_lock(s);
    qcow2_inflight_begin_locked(s, &r, offset, bytes, true);
    qcow2_unlock(s);
    ret = qcow2_discard_registered(s, offset, bytes, false, QCOW2_DISCARD_NEVER);
    qcow2_lock(s);
    qcow2_inflight_end_locked(s, &r);
    qcow2_unlock(s);
    return ret;
}

/* ---- create ---- */

/*
 * R9: the L1 entries of the active VM state that move to the snapshot
 * instead of being shared and then dropped: from l1_vm_state_index on, as
 * long as the entry's whole range lies inside the state QEMU would
 * discard ([vm offset, + ROUND_UP(vm_state_size, cluster))) or its L2
 * table maps nothing past that end.  Their L2 tables and data keep their
 * refcounts (one reference moves from the active L1 to the snapshot's),
 * so no COPIED flag has to change with them.  Returns the end index.
 */
static int vm_transfer_end_locked(Qcow2State *s, uint64_t vm_state_size, uint64_t *x_end)
{
    uint64_t l1_shift = s->cluster_bits + s->l2_bits, first = s->l1_vm_state_index;
    uint64_t vm_bytes = ROUND_UP(vm_state_size, s->cluster_size), d_end;
    int ret = 0;

    *x_end = first;
    if (vm_state_size == 0 || vm_bytes < vm_state_size ||
        qcow2_add(qcow2_vm_state_offset(s), vm_bytes, &d_end)) {
        return 0;
    }
    for (uint64_t k = first; k < s->l1_size; k++) {
        uint64_t start = k << l1_shift, l2_offset;
        uint8_t *l2;

        if (start >= d_end) {
            break;
        }
        ret = snapw_l1_entry_locked(s, s->l1_table[k], k, &l2_offset);
        if (ret < 0) {
            return ret;
        }
        if (l2_offset && ((k + 1) << l1_shift) > d_end) {
            bool empty = true;
            /* slice by slice (cluster.c invariant 6) */
            for (uint64_t g = d_end; g < (k + 1) << l1_shift && empty;) {
                uint64_t j = qcow2_l2_slice_index(s, g);
                ret = qcow2_cache_get_locked(
                    s->l2_cache, qcow2_l2_slice_offset(s, l2_offset, g), (void **)&l2);
                if (ret < 0) {
                    return ret;
                }
                for (; j < s->l2_slice_size && empty; j++) {
                    empty =
                        qcow2_l2_get(s, l2, j) == 0 && qcow2_l2_get_bitmap(s, l2, j) == 0;
                }
                qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
                g = ((g >> (s->cluster_bits + s->l2_slice_bits)) + 1)
                    << (s->cluster_bits + s->l2_slice_bits);
            }
            if (!empty) {
                break;
            }
        }
        *x_end = k + 1;
    }
    return 0;
}

static int create_locked(Qcow2State *s, const BlkSnapshotInfo *info, char **id_out,
                         uint64_t *vm_moved)
{
    uint64_t n = s->l1_size, l1_bytes = ROUND_UP(n * 8, s->cluster_size);
    uint64_t x_first = s->l1_vm_state_index, x_end = x_first;
    g_autofree uint64_t *walk_l1 = NULL, *orig_l1 = NULL;
    bool x_cleared = false;
    g_autoptr(GArray) log = g_array_new(FALSE, FALSE, sizeof(RefRange));
    g_autofree uint8_t *buf = NULL;
    g_autofree Qcow2Snapshot *sns = NULL;
    g_autofree uint64_t *disk_l1 = NULL;
    Qcow2Snapshot *sn;
    int64_t l1_offset = 0;
    bool reverted = false, written = false;
    uint64_t size;
    int ret;

    sns = g_new0(Qcow2Snapshot, s->nb_snapshots + 1);
    if (s->nb_snapshots) {
        memcpy(sns, s->snapshots, s->nb_snapshots * sizeof(*sns));
    }
    sn = &sns[s->nb_snapshots];
    sn->id_str = new_snapshot_id(s);
    sn->name = g_strndup(info->name ? info->name : "", MAX_NAME_BYTES);
    sn->l1_size = (uint32_t)n;
    sn->date_sec = (uint32_t)info->date_sec;
    sn->date_nsec = info->date_nsec;
    sn->vm_clock_nsec = info->vm_clock_nsec;
    sn->vm_state_size = info->vm_state_size;
    sn->disk_size = s->img->size;
    sn->icount = info->icount;
    sn->extra_data_size = QCOW2_SNAPSHOT_EXTRA_KNOWN;
    if (!qcow2_snapshot_table_size(sns, s->nb_snapshots + 1, &size)) {
        ret = blk_error(EFBIG, "Snapshot table too big (more than 64 MiB)");
        goto out;
    }

    /* invariant 5 */
    ret = snapw_write_all_locked(s);
    if (ret < 0) {
        goto out;
    }
    disk_l1 = dup_active_l1(s);

    /* The copy of the active L1, COPIED flags cleared: it is shared. */
    if (n > 0) {
        l1_offset = qcow2_alloc_clusters_locked(s, l1_bytes >> s->cluster_bits);
        if (l1_offset < 0) {
            ret = (int)l1_offset;
            l1_offset = 0;
            goto out;
        }
        qcow2_fastmap_meta_changed(s->fastmap); /* fastmap.c invariant 4 */
        if (l1_offset == 0) {
            ret = qcow2_corrupt_locked(s, "Preventing invalid allocation of a snapshot "
                                          "L1 table at offset 0");
            goto out;
        }
        buf = g_malloc0(l1_bytes);
        for (uint64_t i = 0; i < n; i++) {
            store_be64(buf + i * 8, s->l1_table[i] & ~QCOW2_OFLAG_COPIED);
        }
        ret = qcow2_write_metadata_locked(s, BLKEV_SNAPSHOT_TABLE, 0, (uint64_t)l1_offset,
                                          buf, l1_bytes, false);
        if (ret < 0) {
            goto rollback;
        }
    }
    sn->l1_table_offset = (uint64_t)l1_offset;

    /* +1 on the active tree but the VM state that moves (R1, R9); its
     * COPIED flags all go (commit, R5). */
    ret = vm_transfer_end_locked(s, info->vm_state_size, &x_end);
    if (ret < 0) {
        goto rollback;
    }
    walk_l1 = dup_active_l1(s);
    for (uint64_t k = x_first; k < x_end; k++) {
        walk_l1[k] = 0;
    }
    ret = snapw_tree_walk_locked(s, walk_l1, n, log, false);
    if (ret == -EINVAL) {
        /* A refcount would overflow (narrow refcounts): qemu-img reports
         * the bare errno ("-22 (Invalid argument)"); keep the detail for
         * debugging only. */
        g_debug("qcow2: snapshot creation: %s",
                blk_error_message() ? blk_error_message() : "refcount overflow");
        ret = blk_error_replace(EINVAL, "%s", g_strerror(EINVAL));
    }
    if (ret < 0) {
        goto rollback;
    }
    /* R9: the moving entries leave the active L1 (written by the commit,
     * so they are unreferenced, a leak, until the table names the copy) */
    orig_l1 = dup_active_l1(s);
    for (uint64_t k = x_first; k < x_end; k++) {
        s->l1_table[k] = 0;
    }
    x_cleared = true;
    /* R1: stable on disk before the table names the copy */
    ret = snapw_commit_locked(s, disk_l1, &reverted);
    if (ret < 0) {
        goto rollback;
    }

    ret = qcow2_snapshot_table_write_locked(s, sns, s->nb_snapshots + 1, &written);
    if (!written) {
        goto rollback;
    }
    /* The file names the new table: memory follows (meta.c invariant 4). */
    g_free(s->snapshots);
    s->snapshots = g_steal_pointer(&sns);
    s->nb_snapshots++;
    *id_out = g_strdup(s->snapshots[s->nb_snapshots - 1].id_str);
    *vm_moved = (x_end - x_first) << (s->cluster_bits + s->l2_bits);
    return ret;

rollback : {
    /* R6: nothing names the copy or the raised counts yet. */
    bool had_error = blk_error_mark();
    for (uint64_t k = x_first; x_cleared && k < x_end; k++) {
        s->l1_table[k] = orig_l1[k]; /* back where it was (R9) */
    }
    if (!reverted) {
        snapw_undo_log_locked(s, log);
    }
    (void)snapw_commit_locked(s, disk_l1, &reverted);
    if (l1_offset > 0) {
        qcow2_free_clusters_locked(s, (uint64_t)l1_offset, l1_bytes);
    }
    blk_error_unwind(had_error);
}
out:
    qcow2_snapshot_clear(sn);
    return ret;
}

/* QEMU refuses these before anything else, with bare errno codes; a
 * vmstate save asks first (qcow2_snapshot_check), so that no state is
 * written for a snapshot that cannot be taken. */
static int create_refused(Qcow2State *s)
{
    if (s->nb_snapshots >= QCOW2_MAX_SNAPSHOTS) {
        return blk_error(EFBIG, "%s", g_strerror(EFBIG));
    }
    if (qcow2_has_data_file(s)) {
        return blk_error(ENOTSUP, "%s", g_strerror(ENOTSUP));
    }
    return 0;
}

static int do_create(Qcow2State *s, BlkSnapshotInfo *info)
{
    g_autofree char *id = NULL;
    uint64_t vm_offset, vm_bytes, moved = 0, end;
    Qcow2Inflight r;
    int ret;

    ret = create_refused(s);
    if (ret < 0) {
        return ret;
    }
    if (!s->writable) {
        return blk_error(EACCES, "Image '%s' is read-only", s->img->filename);
    }
    qcow2_lock(s);
    ret = qcow2_check_writable_locked(s);
    if (ret == 0) {
        bool marked;
        exclusive_begin_locked(s, &r); /* invariant 1 */
        ret = flux_begin_locked(s, &marked);
        if (ret == 0) {
            ret = flux_end_locked(s, marked, create_locked(s, info, &id, &moved));
        }
        qcow2_inflight_end_locked(s, &r);
    }
    ret = qcow2_take_deferred_error_locked(s, qcow2_finish_request_locked(s, ret));
    vm_offset = qcow2_vm_state_offset(s);
    qcow2_unlock(s);
    if (id) {
        info->id = g_strdup(id);
    }
    if (ret < 0) {
        return ret;
    }

    /* The active copy of the VM state is the snapshot's now: what did not
     * move with its L1 entries (R9) is dropped from the active tree as QEMU
     * does (errors ignored there too: a leak at most). */
    vm_bytes = ROUND_UP(info->vm_state_size, s->cluster_size);
    if (info->vm_state_size && vm_bytes >= info->vm_state_size && moved < vm_bytes &&
        !qcow2_add(vm_offset, vm_bytes, &end) && end <= (uint64_t)INT64_MAX) {
        if (discard_registered_range(s, vm_offset + moved, vm_bytes - moved) < 0) {
            g_debug("qcow2: dropping the active VM state after a snapshot failed: %s",
                    blk_error_message() ? blk_error_message() : "unknown error");
            blk_error_clear();
        }
    }
    return 0;
}

/* ---- goto ---- */

static int goto_locked(Qcow2State *s, uint64_t sn_l1_offset, uint32_t sn_l1_size)
{
    g_autoptr(GArray) log = g_array_new(FALSE, FALSE, sizeof(RefRange));
    g_autofree uint64_t *sn_l1 = NULL;
    g_autofree uint64_t *disk_l1 = NULL;
    g_autofree uint64_t *l1 = NULL;
    uint64_t *old;
    bool reverted = false, written;
    int ret;

    ret = snapw_write_all_locked(s); /* invariant 5 */
    if (ret == 0) {
        ret = qcow2_grow_l1_table_locked(s, sn_l1_size, false);
    }
    if (ret == 0) {
        ret = qcow2_read_table(s->img->file, sn_l1_offset, sn_l1_size, &sn_l1);
    }
    if (ret < 0) {
        return ret;
    }
    disk_l1 = dup_active_l1(s);
    /* The new active L1: the snapshot's, zero padded, COPIED cleared (every
     * table it names is shared with the snapshot once raised). */
    l1 = g_new0(uint64_t, MAX(s->l1_size, 1));
    for (uint32_t i = 0; i < sn_l1_size; i++) {
        l1[i] = sn_l1[i] & ~QCOW2_OFLAG_COPIED;
    }

    /* R1: +1 on the snapshot's tree (its COPIED flags cleared), on disk. */
    ret = snapw_tree_walk_locked(s, l1, s->l1_size, log, true);
    if (ret == 0) {
        ret = snapw_commit_locked(s, disk_l1, &reverted);
    }
    written = false;
    if (ret == 0) {
        /* in place (QEMU) */
        qcow2_assert_refcounts_durable_locked(s, "snapshot-write.c R1");
        ret = snapw_write_active_l1_locked(s, l1, &written);
    }
    if (!written) {
        bool had_error = blk_error_mark();
        if (!reverted) {
            snapw_undo_log_locked(s, log); /* R6 */
        }
        (void)snapw_commit_locked(s, disk_l1, &reverted);
        blk_error_unwind(had_error);
        return ret;
    }
    /* The file holds the new L1: memory follows. */
    old = s->l1_table;
    s->l1_table = g_steal_pointer(&l1);
    memcpy(disk_l1, s->l1_table, (size_t)s->l1_size * 8);
    if (ret == 0) {
        /* R2: the old tree is unreferenced on disk now */
        ret = snapw_tree_walk_locked(s, old, s->l1_size, NULL, false);
        ret = snapw_commit_keep_error_locked(s, disk_l1, &reverted, ret);
    }
    g_free(old);
    return ret;
}

static int do_goto(BlkNode *img, const char *id_or_name)
{
    Qcow2State *s = img->opaque;
    uint64_t l1_offset = 0, disk_size = 0;
    uint32_t l1_size = 0;
    Qcow2Inflight r;
    int idx, ret;

    if (qcow2_has_data_file(s)) {
        return blk_error(ENOTSUP, "%s", g_strerror(ENOTSUP)); /* QEMU: before lookup */
    }
    if (!s->writable) {
        return blk_error(EACCES, "Image '%s' is read-only", img->filename);
    }
    qcow2_lock(s);
    idx = find_id_or_name(s, id_or_name);
    ret = idx < 0 ? blk_error(ENOENT, "Can't find snapshot") : 0;
    if (ret == 0) {
        l1_offset = s->snapshots[idx].l1_table_offset;
        l1_size = s->snapshots[idx].l1_size;
        disk_size = s->snapshots[idx].disk_size;
        ret = qcow2_validate_table("Snapshot L1 table", l1_offset, l1_size, 8,
                                   QCOW2_MAX_L1_BYTES, s->cluster_bits, s->file_size);
    }
    qcow2_unlock(s);
    if (ret < 0) {
        return ret;
    }
    if (disk_size != img->size) {
        /* QEMU truncates to the snapshot's size first (v3 only: v2 images
         * with snapshots are never resized). */
        ret = qcow2_truncate(img, disk_size, true, BLK_PREALLOC_OFF, true);
        if (ret < 0) {
            return blk_error_prefix(ret, "qcow2: Failed to truncate the image to the "
                                         "snapshot's size");
        }
    }
    qcow2_lock(s);
    ret = qcow2_check_data_writable_locked(s, 0, img->size); /* all bits: reverted */
    if (ret == 0) {
        bool marked;
        exclusive_begin_locked(s, &r); /* invariant 1 */
        ret = flux_begin_locked(s, &marked);
        if (ret == 0) {
            ret = flux_end_locked(s, marked, goto_locked(s, l1_offset, l1_size));
        }
        qcow2_inflight_end_locked(s, &r);
    }
    ret = qcow2_take_deferred_error_locked(s, qcow2_finish_request_locked(s, ret));
    qcow2_unlock(s);
    return ret;
}

/* ---- delete ---- */

static int delete_locked(Qcow2State *s, int idx, const uint64_t *sn_l1)
{
    Qcow2Snapshot removed = s->snapshots[idx];
    g_autofree Qcow2Snapshot *sns = g_new0(Qcow2Snapshot, MAX(s->nb_snapshots, 1));
    g_autofree uint64_t *disk_l1 = NULL;
    uint32_t nb = s->nb_snapshots - 1;
    bool written, reverted = false;
    int ret;

    ret = snapw_write_all_locked(s); /* invariant 5 */
    if (ret < 0) {
        return ret;
    }
    disk_l1 = dup_active_l1(s);
    memcpy(sns, s->snapshots, (size_t)idx * sizeof(*sns));
    memcpy(sns + idx, s->snapshots + idx + 1,
           (size_t)(nb - (uint32_t)idx) * sizeof(*sns));
    ret = qcow2_snapshot_table_write_locked(s, sns, nb, &written);
    if (!written) {
        return ret;
    }
    g_free(s->snapshots);
    s->snapshots = g_steal_pointer(&sns);
    s->nb_snapshots = nb;
    qcow2_snapshot_clear(&removed);
    if (ret < 0) {
        return ret; /* R2: maybe not durable; keep everything (leaks) */
    }
    /* R2: the table without the entry is on disk. */
    ret = snapw_tree_walk_locked(s, sn_l1, removed.l1_size, NULL, false);
    if (ret == 0 && removed.l1_size > 0) {
        qcow2_free_clusters_as_locked(s, removed.l1_table_offset,
                                      (uint64_t)removed.l1_size * 8,
                                      QCOW2_DISCARD_SNAPSHOT);
    }
    ret = snapw_commit_keep_error_locked(s, disk_l1, &reverted, ret);
    ret = qcow2_take_deferred_error_locked(s, ret); /* a free that failed */
    if (ret < 0) { /* QEMU's wording: the snapshot is gone, its clusters leak */
        blk_error_replace(-ret, "Failed to free the cluster and L1 table: %s",
                          g_strerror(-ret));
    }
    return ret;
}

static int do_delete(BlkNode *img, const char *id_or_name)
{
    Qcow2State *s = img->opaque;
    g_autofree uint64_t *sn_l1 = NULL;
    Qcow2Inflight r;
    uint64_t l1_offset = 0;
    uint32_t l1_size = 0;
    int idx, ret;

    if (!s->writable) {
        return blk_error(EACCES, "Image '%s' is read-only", img->filename);
    }
    qcow2_lock(s);
    idx = find_id_or_name(s, id_or_name);
    ret = idx < 0 ? blk_error(ENOENT, "Can't find the snapshot") : 0;
    if (ret == 0) {
        l1_offset = s->snapshots[idx].l1_table_offset;
        l1_size = s->snapshots[idx].l1_size;
        ret = qcow2_validate_table("Snapshot L1 table", l1_offset, l1_size, 8,
                                   QCOW2_MAX_L1_BYTES, s->cluster_bits, s->file_size);
    }
    qcow2_unlock(s);
    if (ret == 0) {
        ret = qcow2_read_table(img->file, l1_offset, l1_size, &sn_l1);
    }
    if (ret < 0) {
        return ret;
    }
    qcow2_lock(s);
    ret = qcow2_check_writable_locked(s);
    if (ret == 0) {
        exclusive_begin_locked(s, &r); /* invariant 1 */
        /* the list did not change: the same index (no concurrent
         * snapshot operations, qimg.h) */
        bool marked;
        ret = flux_begin_locked(s, &marked);
        if (ret == 0) {
            ret = flux_end_locked(s, marked, delete_locked(s, idx, sn_l1));
        }
        qcow2_inflight_end_locked(s, &r);
    }
    ret = qcow2_take_deferred_error_locked(s, qcow2_finish_request_locked(s, ret));
    qcow2_unlock(s);
    return ret;
}

/* ---- driver operations ---- */

int qcow2_snapshot_create(BlkNode *img, BlkSnapshotInfo *sn)
{
    int ret;

    ret = do_create(img->opaque, sn);
    return ret;
}

int qcow2_snapshot_check(BlkNode *img)
{
    return create_refused(img->opaque);
}

int qcow2_snapshot_goto(BlkNode *img, const char *id_or_name)
{
    int ret;

    ret = do_goto(img, id_or_name);
    return ret;
}

int qcow2_snapshot_delete(BlkNode *img, const char *id_or_name)
{
    int ret;

    ret = do_delete(img, id_or_name);
    return ret;
}

void qcow2_snapshot_list_append_locked(Qcow2State *s, GArray *list)
{
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        const Qcow2Snapshot *sn = &s->snapshots[i];
        BlkSnapshotInfo si = {
            .id = g_strdup(sn->id_str),
            .name = g_strdup(sn->name),
            .vm_state_size = sn->vm_state_size,
            .date_sec = sn->date_sec,
            .date_nsec = sn->date_nsec,
            .vm_clock_nsec = sn->vm_clock_nsec,
            .icount = sn->icount,
            .disk_size = sn->disk_size,
            .l1_size = sn->l1_size,
            .l1_offset = sn->l1_table_offset,
        };
        g_array_append_val(list, si);
    }
}

GArray *qcow2_snapshot_list(BlkNode *img)
{
    Qcow2State *s = img->opaque;
    GArray *list = g_array_new(FALSE, TRUE, sizeof(BlkSnapshotInfo));

    qcow2_lock(s);
    qcow2_snapshot_list_append_locked(s, list);
    qcow2_unlock(s);
    return list;
}
