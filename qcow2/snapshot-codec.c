/*
 * qcow2/snapshot-codec.c: the one codec of the internal snapshot table:
 * entries decoded field by field from the file under the rules of the
 * caller (opening the image, qemu-img check, check -r all), and entries
 * encoded back into a table.
 *
 * Owns: the entry layout (format.h, QCOW2_SNE_*), the table's limits and
 * every message about them.  snapshot.c (the open) and repair.c (the
 * check) read the table through qcow2_snapshot_table_decode();
 * snapshot-write.c and repair.c write it through
 * qcow2_snapshot_table_write_locked() (snapshot-write.c R3), which encodes
 * it here.  How the bytes are read is the caller's (Qcow2SnapshotSource).
 *
 * Invariants (cited as "snapshot-codec.c invariant N"):
 *  1. Entries start 8-byte aligned; each is a 40-byte header, extra data,
 *     ID, name.  Known extra data: vm_state_size_large (from 8 bytes of
 *     extra data on; overrides the 32-bit field), disk_size (from 16;
 *     default: the caller's virtual size), icount (from 24; default -1);
 *     the rest is kept verbatim.  ID and name are kept as C strings, so an
 *     embedded NUL ends them, as in QEMU.
 *  2. QEMU's limits: at most 1024 bytes of extra data per entry; the table,
 *     counted with the padding between entries, at most 64 MiB, and no
 *     entry ends INT_MAX bytes or more past the table's start (reachable
 *     only when extra data is skipped).  QCOW2_SNAPSHOT_OPEN and _CHECK
 *     refuse what passes them, each in qemu-img's words (open: QEMU's
 *     qcow2_read_snapshots; check: its check-mode reading, with the
 *     "-r all" hint); _REPAIR (check -r all) cuts the extra data to 1024
 *     bytes (the rest is skipped, not read) and drops the entry that passes
 *     the table limit with all after it, noting each through src->note.
 *     Read errors pass through at the open and are prefixed "Failed to
 *     read snapshot table: " by the check.
 *  3. What is allocated is bounded: per entry at most 1000 bytes of unknown
 *     extra data and two 64 KiB strings, and the decoding stops at the
 *     64 MiB limit.  Reads past the end of the file are the source's
 *     business (zeros, as QEMU reads them: snapshot.c invariant 2).
 *  4. The encoder writes every entry with the 24 bytes of known extra data
 *     followed by the unknown extra data it keeps (QEMU's
 *     qcow2_write_snapshots); the 32-bit vm_state_size is 0 when the size
 *     does not fit, so old readers see a disk-only snapshot rather than a
 *     truncated state.  Entries are padded to 8 bytes, the last one is not.
 *     Its size limit is the decoder's (64 MiB).
 */
#include "qcow2/qcow2.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>

/* ---- freeing ---- */

void qcow2_snapshot_clear(Qcow2Snapshot *sn)
{
    g_clear_pointer(&sn->id_str, g_free);
    g_clear_pointer(&sn->name, g_free);
    g_clear_pointer(&sn->unknown_extra, g_free);
    sn->unknown_extra_size = 0;
}

void qcow2_snapshots_free(Qcow2Snapshot *sns, uint32_t nb)
{
    for (uint32_t i = 0; sns && i < nb; i++) {
        qcow2_snapshot_clear(&sns[i]);
    }
    g_free(sns);
}

/* ---- decoding ---- */

/* Does extra data of size kept hold the 64-bit field at entry offset
 * field; its value from the known extra data read into buf. */
static bool has_extra64(uint32_t kept, unsigned field)
{
    return kept >= field - QCOW2_SNE_EXTRA + 8;
}

static uint64_t extra64(const uint8_t *buf, unsigned field)
{
    return load_be64(buf + (field - QCOW2_SNE_EXTRA));
}

typedef struct Decoder {
    const Qcow2SnapshotSource *src;
    Qcow2SnapshotPolicy policy;
    uint64_t disk_size;
} Decoder;

static int dec_read(const Decoder *d, uint64_t offset, void *buf, uint64_t len)
{
    int ret = len ? d->src->read(d->src->opaque, offset, buf, len) : 0;

    if (ret < 0 && d->policy != QCOW2_SNAPSHOT_OPEN) {
        /* invariant 2 */
        return blk_error(-ret, "Failed to read snapshot table: %s", g_strerror(-ret));
    }
    return ret < 0 ? ret : 0;
}

static void G_GNUC_PRINTF(2, 3) dec_note(const Decoder *d, const char *fmt, ...)
{
    g_autofree char *line = NULL;
    va_list ap;

    if (!d->src->note) {
        return;
    }
    va_start(ap, fmt);
    line = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    d->src->note(d->src->opaque, line);
}

/* len bytes at offset as a C string (invariant 1). */
static char *dec_string(const Decoder *d, uint64_t offset, uint32_t len, int *ret)
{
    g_autofree char *buf = g_malloc(len + 1);

    *ret = dec_read(d, offset, buf, len);
    if (*ret < 0) {
        return NULL;
    }
    buf[len] = '\0';
    return g_strdup(buf);
}

/*
 * Decode entry index at *offset (8-byte aligned) into sn; *offset moves
 * past it (past all of its extra data, also what is cut), *len is its
 * size as kept (header, extra data kept, ID, name), *cut whether its extra
 * data was cut (REPAIR).
 */
static int decode_entry(const Decoder *d, uint32_t index, uint64_t *offset,
                        Qcow2Snapshot *sn, uint64_t *len, bool *cut)
{
    uint8_t h[QCOW2_SNAPSHOT_HEADER_SIZE];
    uint8_t extra[QCOW2_SNAPSHOT_EXTRA_KNOWN] = {0};
    uint64_t off = *offset;
    uint32_t id_len, name_len, stored, kept, known;
    int ret;

    *cut = false;
    ret = dec_read(d, off, h, sizeof(h));
    if (ret < 0) {
        return ret;
    }
    off += sizeof(h);
    sn->l1_table_offset = load_be64(h + QCOW2_SNE_L1_TABLE_OFFSET);
    sn->l1_size = load_be32(h + QCOW2_SNE_L1_SIZE);
    id_len = load_be16(h + QCOW2_SNE_ID_SIZE);
    name_len = load_be16(h + QCOW2_SNE_NAME_SIZE);
    sn->date_sec = load_be32(h + QCOW2_SNE_DATE_SEC);
    sn->date_nsec = load_be32(h + QCOW2_SNE_DATE_NSEC);
    sn->vm_clock_nsec = load_be64(h + QCOW2_SNE_VM_CLOCK_NSEC);
    sn->vm_state_size = load_be32(h + QCOW2_SNE_VM_STATE_SIZE);
    stored = load_be32(h + QCOW2_SNE_EXTRA_DATA_SIZE);

    /* invariant 2 */
    kept = stored;
    if (stored > QCOW2_MAX_SNAPSHOT_EXTRA_DATA) {
        switch (d->policy) {
        case QCOW2_SNAPSHOT_OPEN:
            return blk_error(EFBIG,
                             "Too much extra metadata in snapshot table entry %" PRIu32
                             " (%" PRIu32 " bytes, at most 1024)",
                             index, stored);
        case QCOW2_SNAPSHOT_CHECK:
            return blk_error(EFBIG,
                             "Too much extra metadata in snapshot table entry %" PRIu32
                             "\nYou can force-remove this extra metadata with qimg "
                             "check -r all",
                             index);
        case QCOW2_SNAPSHOT_REPAIR:
            dec_note(d,
                     "Discarding too much extra metadata in snapshot table entry %" PRIu32
                     " (%" PRIu32 " > %u)",
                     index, stored, QCOW2_MAX_SNAPSHOT_EXTRA_DATA);
            kept = QCOW2_MAX_SNAPSHOT_EXTRA_DATA;
            *cut = true;
            break;
        }
    }
    sn->extra_data_size = kept;

    /* invariant 1 */
    known = MIN(kept, QCOW2_SNAPSHOT_EXTRA_KNOWN);
    ret = dec_read(d, off, extra, known);
    if (ret < 0) {
        return ret;
    }
    if (has_extra64(kept, QCOW2_SNE_VM_STATE_SIZE_LARGE)) {
        sn->vm_state_size = extra64(extra, QCOW2_SNE_VM_STATE_SIZE_LARGE);
    }
    sn->disk_size = has_extra64(kept, QCOW2_SNE_DISK_SIZE)
                        ? extra64(extra, QCOW2_SNE_DISK_SIZE)
                        : d->disk_size;
    sn->icount = has_extra64(kept, QCOW2_SNE_ICOUNT)
                     ? (int64_t)extra64(extra, QCOW2_SNE_ICOUNT)
                     : -1;
    if (kept > QCOW2_SNAPSHOT_EXTRA_KNOWN) {
        sn->unknown_extra_size = kept - QCOW2_SNAPSHOT_EXTRA_KNOWN;
        sn->unknown_extra = g_malloc(sn->unknown_extra_size);
        ret = dec_read(d, off + known, sn->unknown_extra, sn->unknown_extra_size);
        if (ret < 0) {
            return ret;
        }
    }
    off += stored; /* < 2^64: the table starts below INT64_MAX (callers) */

    sn->id_str = dec_string(d, off, id_len, &ret);
    if (ret < 0) {
        return ret;
    }
    off += id_len;
    sn->name = dec_string(d, off, name_len, &ret);
    if (ret < 0) {
        return ret;
    }
    off += name_len;

    *offset = off;
    *len = QCOW2_SNAPSHOT_HEADER_SIZE + (uint64_t)kept + id_len + name_len;
    return 0;
}

int qcow2_snapshot_table_decode(const Qcow2SnapshotSource *src,
                                Qcow2SnapshotPolicy policy, uint64_t offset, uint32_t nb,
                                uint64_t disk_size, Qcow2SnapshotTable *t)
{
    Decoder d = {.src = src, .policy = policy, .disk_size = disk_size};
    uint64_t pos = offset, table_length = 0;
    int ret;

    memset(t, 0, sizeof(*t));
    if (nb == 0) {
        return 0;
    }
    g_assert(nb <= QCOW2_MAX_SNAPSHOTS);
    t->sns = g_new0(Qcow2Snapshot, nb);

    for (uint32_t i = 0; i < nb; i++) {
        Qcow2Snapshot *sn = &t->sns[i];
        uint64_t entry_start = pos, len = 0;
        bool cut = false;

        t->nb = i + 1; /* so that this entry is freed on failure */
        /* pos - offset <= INT_MAX + one entry here: no overflow */
        pos = ROUND_UP(pos, 8);
        table_length = ROUND_UP(table_length, 8);
        ret = decode_entry(&d, i, &pos, sn, &len, &cut);
        if (ret < 0) {
            goto fail;
        }
        t->extra_cut += cut;

        /* invariant 2 */
        table_length += len;
        if (table_length <= QCOW2_MAX_SNAPSHOTS_BYTES &&
            pos - offset <= (uint64_t)INT_MAX) {
            continue;
        }
        switch (policy) {
        case QCOW2_SNAPSHOT_OPEN:
            ret =
                blk_error(EFBIG,
                          "Snapshot table is too big (more than 64 MiB at entry %" PRIu32
                          " of %" PRIu32 ")",
                          i, nb);
            goto fail;
        case QCOW2_SNAPSHOT_CHECK:
            ret = blk_error(EFBIG,
                            "Snapshot table is too big\nYou can force-remove all "
                            "%" PRIu32 " overhanging snapshots with qimg check -r all",
                            nb - i);
            goto fail;
        case QCOW2_SNAPSHOT_REPAIR:
            dec_note(&d,
                     "Discarding %" PRIu32 " overhanging snapshots (snapshot table is "
                     "too big)",
                     nb - i);
            t->dropped = nb - i;
            qcow2_snapshot_clear(sn);
            t->nb = i;
            pos = entry_start;
            break;
        }
        break;
    }
    t->size = pos - offset;
    return 0;

fail:
    qcow2_snapshots_free(t->sns, t->nb);
    memset(t, 0, sizeof(*t));
    return ret;
}

/* ---- encoding (invariant 4) ---- */

/* The ID's or name's length field; IDs and names are at most 65535 bytes
 * (decoded from a 16-bit length, or cut to 255 bytes when created). */
static uint16_t str_len16(const char *str)
{
    size_t len = strlen(str);
    return (uint16_t)MIN(len, UINT16_MAX);
}

uint64_t qcow2_snapshot_entry_size(const Qcow2Snapshot *sn)
{
    return QCOW2_SNAPSHOT_HEADER_SIZE + QCOW2_SNAPSHOT_EXTRA_KNOWN +
           (uint64_t)sn->unknown_extra_size + str_len16(sn->id_str) + str_len16(sn->name);
}

uint64_t qcow2_snapshot_entry_encode(const Qcow2Snapshot *sn, uint8_t *buf)
{
    uint16_t id_len = str_len16(sn->id_str), name_len = str_len16(sn->name);
    uint8_t *p;

    store_be64(buf + QCOW2_SNE_L1_TABLE_OFFSET, sn->l1_table_offset);
    store_be32(buf + QCOW2_SNE_L1_SIZE, sn->l1_size);
    store_be16(buf + QCOW2_SNE_ID_SIZE, id_len);
    store_be16(buf + QCOW2_SNE_NAME_SIZE, name_len);
    store_be32(buf + QCOW2_SNE_DATE_SEC, sn->date_sec);
    store_be32(buf + QCOW2_SNE_DATE_NSEC, sn->date_nsec);
    store_be64(buf + QCOW2_SNE_VM_CLOCK_NSEC, sn->vm_clock_nsec);
    store_be32(buf + QCOW2_SNE_VM_STATE_SIZE,
               sn->vm_state_size <= UINT32_MAX ? (uint32_t)sn->vm_state_size : 0);
    store_be32(buf + QCOW2_SNE_EXTRA_DATA_SIZE,
               QCOW2_SNAPSHOT_EXTRA_KNOWN + sn->unknown_extra_size);
    store_be64(buf + QCOW2_SNE_VM_STATE_SIZE_LARGE, sn->vm_state_size);
    store_be64(buf + QCOW2_SNE_DISK_SIZE, sn->disk_size);
    store_be64(buf + QCOW2_SNE_ICOUNT, (uint64_t)sn->icount);
    p = buf + QCOW2_SNE_KNOWN_END;
    if (sn->unknown_extra_size) {
        memcpy(p, sn->unknown_extra, sn->unknown_extra_size);
        p += sn->unknown_extra_size;
    }
    memcpy(p, sn->id_str, id_len);
    memcpy(p + id_len, sn->name, name_len);
    return (uint64_t)(p + id_len + name_len - buf);
}

bool qcow2_snapshot_table_size(const Qcow2Snapshot *sns, uint32_t nb, uint64_t *size)
{
    uint64_t off = 0;

    for (uint32_t i = 0; i < nb; i++) {
        off = ROUND_UP(off, 8) + qcow2_snapshot_entry_size(&sns[i]);
        if (off > QCOW2_MAX_SNAPSHOTS_BYTES) {
            return false;
        }
    }
    *size = off;
    return true;
}

void qcow2_snapshot_table_encode(const Qcow2Snapshot *sns, uint32_t nb, uint8_t *buf)
{
    uint64_t off = 0;

    for (uint32_t i = 0; i < nb; i++) {
        uint64_t start = ROUND_UP(off, 8);
        memset(buf + off, 0, start - off); /* padding */
        off = start + qcow2_snapshot_entry_encode(&sns[i], buf + start);
    }
}
