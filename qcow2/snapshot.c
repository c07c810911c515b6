/*
 * qcow2/snapshot.c: the internal snapshot table and the read-only
 * snapshot view (qemu-img convert -l).
 *
 * Owns: parsing and validating the snapshot table, looking snapshots up by
 * ID or name, and switching the L1 table the driver reads through to a
 * snapshot's L1 (read-only).
 *
 * Invariants (cited as "snapshot.c invariant N"):
 *  1. Entries start 8-byte aligned; each is a 40-byte header, extra data
 *     (<= 1024 bytes), ID, name.  Known extra data: vm_state_size_large
 *     (overrides the 32-bit field), disk_size (default: current virtual
 *     size), icount (default -1); the rest is kept verbatim.
 *  2. The whole table is <= 64 MiB and holds <= 65536 entries (header.c
 *     checks count and offset; this file checks the size as it reads).
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
    for (uint32_t i = 0; s->snapshots && i < s->nb_snapshots; i++) {
        g_free(s->snapshots[i].id_str);
        g_free(s->snapshots[i].name);
        g_free(s->snapshots[i].unknown_extra);
    }
    g_free(s->snapshots);
    s->snapshots = NULL;
    s->nb_snapshots = 0;
}

/* Read len bytes of the table at offset; zeros past the file end
 * (snapshot.c invariant 2). */
static int table_read(Qcow2State *s, uint32_t i, uint64_t offset, void *buf, uint64_t len)
{
    uint64_t n = 0;
    int ret;

    (void)i;
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

static char *table_read_string(Qcow2State *s, uint32_t i, uint64_t offset, uint32_t len,
                               int *ret)
{
    g_autofree char *buf = g_malloc(len + 1);

    *ret = table_read(s, i, offset, buf, len);
    if (*ret < 0) {
        return NULL;
    }
    buf[len] = '\0';
    return g_strdup(buf); /* stops at an embedded NUL, like QEMU's C strings */
}

int qcow2_read_snapshots(Qcow2State *s, bool check_mode)
{
    uint8_t h[QCOW2_SNAPSHOT_HEADER_SIZE];
    uint8_t extra[QCOW2_SNAPSHOT_EXTRA_KNOWN];
    uint64_t offset = s->header.snapshots_offset;
    uint64_t table_length = 0;
    int ret;

    s->snapshots_offset = s->header.snapshots_offset;
    s->nb_snapshots = 0;
    s->snapshots_size = 0;
    if (check_mode || s->header.nb_snapshots == 0) {
        return 0; /* QEMU does not read the table in check mode */
    }
    /* nb_snapshots <= 65536 (qcow2_header_check_tables) */
    s->snapshots = g_new0(Qcow2Snapshot, s->header.nb_snapshots);

    for (uint32_t i = 0; i < s->header.nb_snapshots; i++) {
        Qcow2Snapshot *sn = &s->snapshots[i];
        s->nb_snapshots = i + 1; /* so qcow2_free_snapshots frees this one */

        /* offset - snapshots_offset <= 64 MiB + one entry: no overflow
         * (the end is checked against the file size by table_read) */
        offset = (offset + 7) & ~UINT64_C(7);
        table_length = (table_length + 7) & ~UINT64_C(7);
        ret = table_read(s, i, offset, h, sizeof(h));
        if (ret < 0) {
            goto fail;
        }
        offset += sizeof(h);
        sn->l1_table_offset = load_be64(h);
        sn->l1_size = load_be32(h + 8);
        uint32_t id_len = load_be16(h + 12);
        uint32_t name_len = load_be16(h + 14);
        sn->date_sec = load_be32(h + 16);
        sn->date_nsec = load_be32(h + 20);
        sn->vm_clock_nsec = load_be64(h + 24);
        sn->vm_state_size = load_be32(h + 32);
        sn->extra_data_size = load_be32(h + 36);

        if (sn->extra_data_size > QCOW2_MAX_SNAPSHOT_EXTRA_DATA) {
            ret = blk_error(EFBIG,
                            "Too much extra metadata in snapshot table entry %" PRIu32
                            " (%" PRIu32 " bytes, at most 1024)",
                            i, sn->extra_data_size);
            goto fail;
        }
        uint32_t known = MIN(sn->extra_data_size, QCOW2_SNAPSHOT_EXTRA_KNOWN);
        memset(extra, 0, sizeof(extra));
        ret = table_read(s, i, offset, extra, known);
        if (ret < 0) {
            goto fail;
        }
        offset += known;
        if (sn->extra_data_size >= 8) {
            sn->vm_state_size = load_be64(extra);
        }
        sn->disk_size = sn->extra_data_size >= 16 ? load_be64(extra + 8) : s->img->size;
        sn->icount = sn->extra_data_size >= 24 ? (int64_t)load_be64(extra + 16) : -1;
        if (sn->extra_data_size > QCOW2_SNAPSHOT_EXTRA_KNOWN) {
            sn->unknown_extra_size = sn->extra_data_size - QCOW2_SNAPSHOT_EXTRA_KNOWN;
            sn->unknown_extra = g_malloc(sn->unknown_extra_size);
            ret = table_read(s, i, offset, sn->unknown_extra, sn->unknown_extra_size);
            if (ret < 0) {
                goto fail;
            }
            offset += sn->unknown_extra_size;
        }
        sn->id_str = table_read_string(s, i, offset, id_len, &ret);
        if (ret < 0) {
            goto fail;
        }
        offset += id_len;
        sn->name = table_read_string(s, i, offset, name_len, &ret);
        if (ret < 0) {
            goto fail;
        }
        offset += name_len;

        table_length +=
            QCOW2_SNAPSHOT_HEADER_SIZE + sn->extra_data_size + id_len + name_len;
        if (table_length > QCOW2_MAX_SNAPSHOTS_BYTES) {
            ret =
                blk_error(EFBIG,
                          "Snapshot table is too big (more than 64 MiB at entry %" PRIu32
                          " of %" PRIu32 ")",
                          i, s->header.nb_snapshots);
            goto fail;
        }
    }
    s->snapshots_size = offset - s->snapshots_offset;
    return 0;

fail:
    qcow2_free_snapshots(s);
    return ret;
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
