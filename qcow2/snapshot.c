/*
 * qcow2/snapshot.c: the internal snapshot table and the read-only
 * snapshot view (qemu-img convert -l).
 *
 * Owns: reading the snapshot table at open (decoded by snapshot-codec.c),
 * looking snapshots up by ID or name, and switching the L1 table the
 * driver reads through to a snapshot's L1 (read-only).
 *
 * Invariants (cited as "snapshot.c invariant N"):
 *  1. The table is decoded with QEMU's rules for an open
 *     (QCOW2_SNAPSHOT_OPEN, snapshot-codec.c invariants 1 and 2): more
 *     than 1024 bytes of extra data in an entry refuses the open; the
 *     default disk size is the current virtual size.
 *  2. The whole table is <= 64 MiB and holds <= 65536 entries (header.c
 *     checks count and offset; the codec checks the size as it reads).
 *     What lies past the end of the file reads as zeros, as QEMU's reads
 *     do: QEMU opens such an image and qemu-img check (as check.c) may
 *     find it clean, so refusing it would strand a repaired image.
 *  3. A snapshot's L1 table is validated (aligned, <= 32 MiB, inside the
 *     file) only when it is used, as QEMU does: a bad L1 in one snapshot
 *     does not stop the image from opening.
 *  4. A snapshot view keeps the image's current virtual size (QEMU's
 *     bdrv_snapshot_load_tmp does not resize); guest clusters beyond the
 *     snapshot's L1 read as unallocated.  The view is read-only.
 *  5. Lookup by "ID or name" tries the ID first, then the name, and takes
 *     the first matching entry in table order.
 */
#include "qcow2/qcow2.h"

#include <errno.h>
#include <inttypes.h>

void qcow2_free_snapshots(Qcow2State *s)
{
    qcow2_snapshots_free(s->snapshots, s->nb_snapshots);
    s->snapshots = NULL;
    s->nb_snapshots = 0;
}

/* Read len bytes of the table at offset; zeros past the file end
 * (snapshot.c invariant 2). */
static int table_read(void *opaque, uint64_t offset, void *buf, uint64_t len)
{
    Qcow2State *s = opaque;
    uint64_t n = 0;
    int ret;

    if (offset < s->file_size) {
        n = MIN(len, s->file_size - offset);
    }
    memset((uint8_t *)buf + n, 0, len - n);
    if (n == 0) {
        return 0;
    }
    ret = blk_pread(s->img->file, offset, buf, n);
    return ret < 0 ? ret : 0;
}

int qcow2_read_snapshots(Qcow2State *s, bool check_mode)
{
    const Qcow2SnapshotSource src = {.read = table_read, .opaque = s};
    Qcow2SnapshotTable t;
    int ret;

    s->snapshots_offset = s->header.snapshots_offset;
    s->nb_snapshots = 0;
    s->snapshots_size = 0;
    if (check_mode || s->header.nb_snapshots == 0) {
        return 0; /* QEMU does not read the table in check mode */
    }
    /* nb_snapshots <= 65536 (qcow2_header_check_tables); snapshot.c
     * invariant 1 */
    ret = qcow2_snapshot_table_decode(&src, QCOW2_SNAPSHOT_OPEN, s->snapshots_offset,
                                      s->header.nb_snapshots, s->img->size, &t);
    if (ret < 0) {
        return ret;
    }
    s->snapshots = t.sns;
    s->nb_snapshots = t.nb;
    s->snapshots_size = t.size;
    return 0;
}

int qcow2_find_snapshot(const Qcow2State *s, const char *id, const char *name)
{
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        const Qcow2Snapshot *sn = &s->snapshots[i];
        if ((!id || g_str_equal(sn->id_str, id)) &&
            (!name || g_str_equal(sn->name, name)) && (id || name)) {
            return (int)i;
        }
    }
    return -1;
}

/* QEMU's qcow2_snapshot_load_tmp for one lookup key. */
static int load_view_one(Qcow2State *s, const char *id, const char *name)
{
    int idx = qcow2_find_snapshot(s, id, name);
    uint64_t *l1;
    int ret;

    if (idx < 0) {
        return blk_error(ENOENT, "Failed to load snapshot: Can't find snapshot");
    }
    const Qcow2Snapshot *sn = &s->snapshots[idx];
    /* snapshot.c invariant 3 */
    ret = qcow2_validate_table("Snapshot L1 table", sn->l1_table_offset, sn->l1_size, 8,
                               QCOW2_MAX_L1_BYTES, s->cluster_bits, s->file_size);
    if (ret < 0) {
        return ret;
    }
    ret = qcow2_read_table(s->img->file, sn->l1_table_offset, sn->l1_size, &l1);
    if (ret < 0) {
        return ret;
    }
    g_free(s->l1_table);
    s->l1_table = l1;
    s->l1_size = sn->l1_size;
    s->l1_table_offset = sn->l1_table_offset;
    s->snapshot_view = idx;
    return 0;
}

int qcow2_snapshot_load_view(Qcow2State *s, const char *id_or_name)
{
    bool had_error = blk_error_mark();
    int ret = load_view_one(s, id_or_name, NULL);

    /* snapshot.c invariant 5: like bdrv_snapshot_load_tmp_by_id_or_name;
     * the lookup by name replaces the failure by ID */
    if (ret == -ENOENT || ret == -EINVAL) {
        blk_error_unwind(had_error);
        ret = load_view_one(s, NULL, id_or_name);
    }
    return ret;
}
