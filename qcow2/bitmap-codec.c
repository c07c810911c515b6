/*
 * qcow2/bitmap-codec.c: the one codec of the persistent dirty bitmaps'
 * metadata: the bitmaps header extension, the bitmap directory and the
 * bitmap tables, decoded field by field under the rules of the caller
 * (strict, qemu-img check, framing only) and encoded back.
 *
 * Owns: the layouts (qcow2.h, QCOW2_BMX_*, QCOW2_BME_*, QCOW2_BTE_*), the
 * limits and every message about them.  header.c decodes the extension
 * through qcow2_bitmaps_ext_decode(); check-bitmap.c (the check) reads the
 * directory and the tables through qcow2_bitmap_dir_read() and
 * qcow2_bitmap_table_read(); meta.c rewrites the directory's flags
 * through the decoder and encoder here.  How the bytes are read is the
 * caller's (Qcow2BitmapSource); what is written, and when, too.
 *
 * Invariants (cited as "bitmap-codec.c invariant N"):
 *  1. Layout: the extension is 24 bytes (nb_bitmaps, 4 reserved bytes,
 *     directory size, directory offset).  A directory entry is a 24-byte
 *     header, extra data, the name, and zero padding to a multiple of 8;
 *     every entry is padded, the last one too, and the directory size
 *     counts that padding (as qemu-img writes it).  Names are kept as
 *     their name_size bytes (a NUL is added in memory only), extra data
 *     verbatim.
 *  2. The extension follows QEMU's qcow2_read_extensions, in its order and
 *     words: the length (24) first; with the autoclear bit clear nothing
 *     else is read (inconsistent bitmaps are ignored); then reserved zero,
 *     1 <= nb_bitmaps <= 65535, a cluster-aligned directory offset, a
 *     directory of at most 1024 x 65535 bytes.
 *  3. QCOW2_BITMAP_CHECK is QEMU's bitmap_list_load and check_dir_entry,
 *     in qemu-img's words (what qemu-img check prints): a directory of
 *     1..1024 x 65535 bytes filled by exactly nb_bitmaps entries, each
 *     inside it; no extra data; flags only in_use and auto; type 1;
 *     granularity_bits 9..31; name_size <= 1023; a non-zero,
 *     cluster-aligned table offset; 1..2^27 table entries covering at most
 *     512 MiB of clusters; unless in_use, a table large enough for the
 *     disk size at that granularity (qcow2_bitmap_table_size_for()).
 *  4. QCOW2_BITMAP_OPEN (strict) applies invariant 3's rules, except that
 *     extra data is kept (the spec's extra_data_compatible flag is known
 *     and says whether the bitmap may be used), plus what the spec
 *     requires and QEMU does not check: a non-empty name, names unique in
 *     the directory, zero padding, and the directory, the tables and their
 *     data clusters inside the file.  Its messages name the entry (index
 *     or name) and the field with its value.
 *  5. QCOW2_BITMAP_RAW checks only the framing: nb_bitmaps entries from
 *     the start of the directory, each inside it (bytes after them are
 *     ignored).  Every field is kept as on disk, reserved flag bits too,
 *     so the flags can be rewritten (bitmap-store.c invariant 1).  For bitmap
 *     tables RAW is OPEN.
 *  6. Every value from disk enters arithmetic through qcow2_add() /
 *     qcow2_mul() (__builtin_*_overflow) or under a bound named next to
 *     it.  What is allocated is bounded: the directory (<= 64 MiB) before
 *     it is read, then per entry at most its bytes in the directory (name,
 *     extra data) and a fixed overhead (<= 65535 entries); a bitmap table
 *     at most 8 MiB (<= 512 MiB of clusters of >= 512 bytes).  Names are
 *     compared through a hash table, so no directory costs quadratic time.
 *  7. The encoder is the decoder's inverse: for every directory OPEN or
 *     CHECK accepts, encode(decode(bytes)) == bytes, and decode(encode(x))
 *     == x for entries OPEN accepts; likewise for the extension and the
 *     bitmap table.  After RAW, encoding gives the bytes back except that
 *     non-zero padding becomes zeros.
 *  8. A bitmap table is bitmap_table_size big-endian 64-bit entries: bits
 *     1-8 and 56-63 zero; bits 9-55 the data cluster's offset, cluster
 *     aligned; bit 0 (read as all ones) only with offset 0.  Decoded into
 *     host order, entries unchanged.
 */
#include "qcow2/qcow2.h"

#include <errno.h>
#include <inttypes.h>

/* ---- the extension (invariant 2) ---- */

int qcow2_bitmaps_ext_decode(const uint8_t *data, uint32_t len, uint32_t cluster_bits,
                             bool consistent, Qcow2BitmapsExt *x)
{
    uint64_t cluster_size = UINT64_C(1) << cluster_bits;
    uint32_t reserved;

    memset(x, 0, sizeof(*x));
    if (len != QCOW2_BITMAPS_EXT_SIZE) {
        return blk_error(
            EINVAL, "bitmaps_ext: Invalid extension length %" PRIu32 " (expected 24)",
            len);
    }
    if (!consistent) {
        /* Inconsistent bitmaps: QEMU ignores (and later drops) them. */
        return 0;
    }
    reserved = load_be32(data + QCOW2_BMX_RESERVED);
    x->nb_bitmaps = load_be32(data + QCOW2_BMX_NB_BITMAPS);
    x->directory_size = load_be64(data + QCOW2_BMX_DIRECTORY_SIZE);
    x->directory_offset = load_be64(data + QCOW2_BMX_DIRECTORY_OFFSET);
    if (reserved != 0) {
        return blk_error(EINVAL, "bitmaps_ext: Reserved field is not zero");
    }
    if (x->nb_bitmaps > QCOW2_MAX_BITMAPS) {
        return blk_error(EINVAL,
                         "bitmaps_ext: Image has %" PRIu32
                         " bitmaps, exceeding the QEMU supported maximum of %u",
                         x->nb_bitmaps, QCOW2_MAX_BITMAPS);
    }
    if (x->nb_bitmaps == 0) {
        return blk_error(EINVAL, "found bitmaps extension with zero bitmaps");
    }
    if (x->directory_offset & (cluster_size - 1)) {
        return blk_error(EINVAL,
                         "bitmaps_ext: invalid bitmap directory offset 0x%" PRIx64,
                         x->directory_offset);
    }
    if (x->directory_size > QCOW2_MAX_BITMAP_DIRECTORY_SIZE) {
        return blk_error(EINVAL,
                         "bitmaps_ext: bitmap directory size (%" PRIu64
                         ") exceeds the maximum supported size (%u)",
                         x->directory_size, QCOW2_MAX_BITMAP_DIRECTORY_SIZE);
    }
    return 0;
}

void qcow2_bitmaps_ext_encode(const Qcow2BitmapsExt *x, uint8_t *buf)
{
    store_be32(buf + QCOW2_BMX_NB_BITMAPS, x->nb_bitmaps);
    store_be32(buf + QCOW2_BMX_RESERVED, 0);
    store_be64(buf + QCOW2_BMX_DIRECTORY_SIZE, x->directory_size);
    store_be64(buf + QCOW2_BMX_DIRECTORY_OFFSET, x->directory_offset);
}

/* ---- freeing ---- */

void qcow2_bitmap_clear(Qcow2Bitmap *bm)
{
    g_clear_pointer(&bm->name, g_free);
    g_clear_pointer(&bm->extra_data, g_free);
}

void qcow2_bitmap_dir_free(Qcow2BitmapDir *dir)
{
    for (uint32_t i = 0; dir->bms && i < dir->nb; i++) {
        qcow2_bitmap_clear(&dir->bms[i]);
    }
    g_free(dir->bms);
    memset(dir, 0, sizeof(*dir));
}

/* ---- sizes ---- */

uint64_t qcow2_bitmap_table_size_for(uint64_t disk_size, uint32_t granularity_bits,
                                     uint32_t cluster_bits)
{
    uint64_t bits, bytes;

    g_assert(granularity_bits < 64 && cluster_bits < 64);
    /* each step is a division rounded up: no overflow */
    bits = (disk_size >> granularity_bits) +
           !!(disk_size & ((UINT64_C(1) << granularity_bits) - 1));
    bytes = (bits >> 3) + !!(bits & 7);
    return (bytes >> cluster_bits) + !!(bytes & ((UINT64_C(1) << cluster_bits) - 1));
}

/* An entry's length without padding (24 + extra data + name) and with it
 * (rounded up to 8, invariant 1); false on overflow (invariant 6: cannot
 * happen from a 16-bit and a 32-bit size, checked all the same). */
static bool entry_len(uint16_t name_size, uint32_t extra_data_size, uint64_t *body,
                      uint64_t *padded)
{
    if (qcow2_add(QCOW2_BITMAP_ENTRY_HEADER_SIZE + (uint64_t)name_size, extra_data_size,
                  body) ||
        qcow2_add(*body, 7, padded)) {
        return false;
    }
    *padded &= ~UINT64_C(7);
    return true;
}

uint64_t qcow2_bitmap_entry_size(const Qcow2Bitmap *bm)
{
    uint64_t body, padded;
    bool ok = entry_len(bm->name_size, bm->extra_data_size, &body, &padded);

    g_assert(ok);
    return padded;
}

/* ---- decoding the directory ---- */

typedef struct Decoder {
    const Qcow2BitmapImage *img;
    Qcow2BitmapPolicy policy;
    const uint8_t *buf;
    uint64_t size;
    GHashTable *names; /* OPEN: GBytes name -> entry index + 1 */
} Decoder;

/* The size checks made before the directory is allocated or walked. */
static int check_dir_size(uint64_t size, uint32_t nb, Qcow2BitmapPolicy policy)
{
    /* the extension's limit (invariant 2), again for direct callers */
    if (nb > QCOW2_MAX_BITMAPS) {
        return blk_error(EINVAL,
                         "Bitmap directory of %" PRIu32
                         " bitmaps exceeds the QEMU supported maximum of %u",
                         nb, QCOW2_MAX_BITMAPS);
    }
    if (policy == QCOW2_BITMAP_CHECK) {
        /* invariant 3: QEMU's words */
        if (size == 0 || size > QCOW2_MAX_BITMAP_DIRECTORY_SIZE) {
            return blk_error(EINVAL, "Requested bitmap directory size is %s",
                             size ? "too big" : "zero");
        }
        return 0;
    }
    if (size == 0 && policy == QCOW2_BITMAP_OPEN) {
        return blk_error(EINVAL,
                         "Bitmap directory size is 0 (the header extension announces "
                         "%" PRIu32 " bitmaps)",
                         nb);
    }
    if (size > QCOW2_MAX_BITMAP_DIRECTORY_SIZE) {
        return blk_error(EINVAL,
                         "Bitmap directory size %" PRIu64
                         " exceeds the maximum supported size (%u)",
                         size, QCOW2_MAX_BITMAP_DIRECTORY_SIZE);
    }
    return 0;
}

/* QEMU's check_dir_entry (invariant 3). */
static bool entry_ok_qemu(const Decoder *d, const Qcow2Bitmap *bm)
{
    uint64_t cluster_size = UINT64_C(1) << d->img->cluster_bits, phys;

    if (bm->table_size == 0 || bm->table_offset == 0 ||
        (bm->table_offset & (cluster_size - 1)) ||
        bm->table_size > QCOW2_BITMAP_MAX_TABLE_SIZE ||
        bm->granularity_bits > QCOW2_BITMAP_MAX_GRANULARITY_BITS ||
        bm->granularity_bits < QCOW2_BITMAP_MIN_GRANULARITY_BITS ||
        (bm->flags & ~(uint32_t)QCOW2_BITMAP_FLAGS_QEMU) ||
        bm->name_size > QCOW2_BITMAP_MAX_NAME_SIZE ||
        bm->type != QCOW2_BITMAP_TYPE_DIRTY_TRACKING) {
        return false;
    }
    if (qcow2_mul(bm->table_size, cluster_size, &phys) ||
        phys > QCOW2_BITMAP_MAX_PHYS_SIZE) {
        return false;
    }
    /* granularity_bits <= 31 (checked above) */
    return (bm->flags & QCOW2_BITMAP_IN_USE) ||
           qcow2_bitmap_table_size_for(d->img->disk_size, bm->granularity_bits,
                                       d->img->cluster_bits) <= bm->table_size;
}

#define NAME_ARG(bm) (int)(bm)->name_size, (bm)->name

/* The strict rules of one entry at pos (invariant 4), after its framing. */
static int entry_check_open(const Decoder *d, uint32_t index, const Qcow2Bitmap *bm,
                            const uint8_t *padding, uint64_t padding_len)
{
    const Qcow2BitmapImage *img = d->img;
    uint64_t cluster_size = UINT64_C(1) << img->cluster_bits, phys, needed;
    uint32_t reserved = bm->flags & ~(uint32_t)QCOW2_BITMAP_FLAGS_KNOWN;

    if (bm->name_size == 0) {
        return blk_error(EINVAL, "Bitmap directory entry %" PRIu32 " has an empty name",
                         index);
    }
    if (bm->name_size > QCOW2_BITMAP_MAX_NAME_SIZE) {
        return blk_error(EINVAL,
                         "Bitmap directory entry %" PRIu32 ": name_size %u exceeds the "
                         "maximum of %u",
                         index, bm->name_size, QCOW2_BITMAP_MAX_NAME_SIZE);
    }
    if (reserved) {
        return blk_error(EINVAL, "Bitmap '%.*s': reserved flags 0x%" PRIx32 " are set",
                         NAME_ARG(bm), reserved);
    }
    if (bm->type != QCOW2_BITMAP_TYPE_DIRTY_TRACKING) {
        return blk_error(EINVAL, "Bitmap '%.*s': unknown type %u", NAME_ARG(bm),
                         bm->type);
    }
    if (bm->granularity_bits < QCOW2_BITMAP_MIN_GRANULARITY_BITS ||
        bm->granularity_bits > QCOW2_BITMAP_MAX_GRANULARITY_BITS) {
        return blk_error(
            EINVAL, "Bitmap '%.*s': granularity_bits %u is outside the supported %u..%u",
            NAME_ARG(bm), bm->granularity_bits, QCOW2_BITMAP_MIN_GRANULARITY_BITS,
            QCOW2_BITMAP_MAX_GRANULARITY_BITS);
    }
    if (bm->table_offset == 0 || (bm->table_offset & (cluster_size - 1))) {
        return blk_error(EINVAL, "Bitmap '%.*s': bitmap table offset 0x%" PRIx64 " is %s",
                         NAME_ARG(bm), bm->table_offset,
                         bm->table_offset ? "not aligned to the cluster size" : "zero");
    }
    if (bm->table_size == 0) {
        return blk_error(EINVAL, "Bitmap '%.*s': bitmap table size is zero",
                         NAME_ARG(bm));
    }
    if (bm->table_size > QCOW2_BITMAP_MAX_TABLE_SIZE ||
        qcow2_mul(bm->table_size, cluster_size, &phys) ||
        phys > QCOW2_BITMAP_MAX_PHYS_SIZE) {
        return blk_error(EFBIG,
                         "Bitmap '%.*s': bitmap table size %" PRIu32
                         " exceeds the supported maximum (%u entries, %u bytes of "
                         "clusters)",
                         NAME_ARG(bm), bm->table_size, QCOW2_BITMAP_MAX_TABLE_SIZE,
                         QCOW2_BITMAP_MAX_PHYS_SIZE);
    }
    /* table_size <= 2^27: 8 * table_size does not overflow */
    if (!qcow2_range_within(bm->table_offset, UINT64_C(8) * bm->table_size,
                            img->file_size)) {
        return blk_error(EINVAL,
                         "Bitmap '%.*s': bitmap table at 0x%" PRIx64 " (%" PRIu32
                         " entries) lies outside the file",
                         NAME_ARG(bm), bm->table_offset, bm->table_size);
    }
    needed = qcow2_bitmap_table_size_for(img->disk_size, bm->granularity_bits,
                                         img->cluster_bits);
    if (!(bm->flags & QCOW2_BITMAP_IN_USE) && needed > bm->table_size) {
        return blk_error(EINVAL,
                         "Bitmap '%.*s': bitmap table size %" PRIu32
                         " is too small for a "
                         "%" PRIu64 "-byte disk at granularity %" PRIu64 " (%" PRIu64
                         " entries needed)",
                         NAME_ARG(bm), bm->table_size, img->disk_size,
                         UINT64_C(1) << bm->granularity_bits, needed);
    }
    for (uint64_t p = 0; p < padding_len; p++) {
        if (padding[p]) {
            return blk_error(EINVAL,
                             "Bitmap '%.*s': the padding of directory entry %" PRIu32
                             " is not zero",
                             NAME_ARG(bm), index);
        }
    }
    return 0;
}

/* OPEN: the name is not used by an earlier entry (invariants 4, 6). */
static int entry_check_unique(Decoder *d, uint32_t index, const Qcow2Bitmap *bm)
{
    GBytes *key = g_bytes_new_static(bm->name, bm->name_size);
    gpointer prev = g_hash_table_lookup(d->names, key);

    if (prev) {
        g_bytes_unref(key);
        return blk_error(
            EINVAL, "Bitmap name '%.*s' is used by directory entries %u and %" PRIu32,
            NAME_ARG(bm), GPOINTER_TO_UINT(prev) - 1, index);
    }
    g_hash_table_insert(d->names, key, GUINT_TO_POINTER(index + 1));
    return 0;
}

/* The framing errors (invariants 3-5). */
static int framing_error(const Decoder *d, uint32_t index, uint64_t pos, uint64_t len)
{
    switch (d->policy) {
    case QCOW2_BITMAP_CHECK:
        return blk_error(EINVAL, "Broken bitmap directory");
    case QCOW2_BITMAP_RAW:
        return blk_error(EINVAL, "Bitmap directory entry %" PRIu32 " is truncated",
                         index);
    case QCOW2_BITMAP_OPEN:
        break;
    }
    return blk_error(EINVAL,
                     "Bitmap directory entry %" PRIu32 " at offset %" PRIu64 " (%" PRIu64
                     " bytes) runs past the end of the directory (%" PRIu64 " bytes)",
                     index, pos, len, d->size);
}

/* Decode entry index at *pos (its header inside the directory) into bm;
 * *pos moves past it. */
static int decode_entry(Decoder *d, uint32_t index, uint64_t *pos, Qcow2Bitmap *bm)
{
    const uint8_t *e = d->buf + *pos;
    uint64_t left = d->size - *pos, body = 0, len = 0;
    int ret;

    bm->table_offset = load_be64(e + QCOW2_BME_TABLE_OFFSET);
    bm->table_size = load_be32(e + QCOW2_BME_TABLE_SIZE);
    bm->flags = load_be32(e + QCOW2_BME_FLAGS);
    bm->type = e[QCOW2_BME_TYPE];
    bm->granularity_bits = e[QCOW2_BME_GRANULARITY_BITS];
    bm->name_size = load_be16(e + QCOW2_BME_NAME_SIZE);
    bm->extra_data_size = load_be32(e + QCOW2_BME_EXTRA_DATA_SIZE);

    if (!entry_len(bm->name_size, bm->extra_data_size, &body, &len) || len > left) {
        return framing_error(d, index, *pos, len);
    }
    /* the entry lies inside the buffer (body <= len <= left): its name,
     * extra data and padding can be read */
    bm->name = g_malloc(bm->name_size + 1u);
    memcpy(bm->name, e + QCOW2_BME_EXTRA + bm->extra_data_size, bm->name_size);
    bm->name[bm->name_size] = '\0';
    if (d->policy == QCOW2_BITMAP_CHECK) {
        if (bm->extra_data_size != 0) {
            return blk_error(EINVAL, "Bitmap extra data is not supported");
        }
        if (!entry_ok_qemu(d, bm)) {
            return blk_error(EINVAL, "Bitmap '%.*s' doesn't satisfy the constraints",
                             NAME_ARG(bm));
        }
    }
    if (bm->extra_data_size) {
        bm->extra_data = g_memdup2(e + QCOW2_BME_EXTRA, bm->extra_data_size);
    }
    if (d->policy == QCOW2_BITMAP_OPEN) {
        ret = entry_check_open(d, index, bm, e + body, len - body);
        if (ret == 0) {
            ret = entry_check_unique(d, index, bm);
        }
        if (ret < 0) {
            return ret;
        }
    }
    *pos += len; /* <= d->size */
    return 0;
}

int qcow2_bitmap_dir_decode(const uint8_t *buf, uint64_t size, uint32_t nb_bitmaps,
                            const Qcow2BitmapImage *img, Qcow2BitmapPolicy policy,
                            Qcow2BitmapDir *dir)
{
    Decoder d = {.img = img, .policy = policy, .buf = buf, .size = size};
    uint64_t pos = 0;
    uint32_t i = 0;
    int ret;

    memset(dir, 0, sizeof(*dir));
    ret = check_dir_size(size, nb_bitmaps, policy);
    if (ret < 0) {
        return ret;
    }
    if (policy == QCOW2_BITMAP_OPEN) {
        d.names = g_hash_table_new_full(g_bytes_hash, g_bytes_equal,
                                        (GDestroyNotify)g_bytes_unref, NULL);
    }
    /* nb_bitmaps <= 65535 (check_dir_size): invariant 6 */
    dir->bms = g_new0(Qcow2Bitmap, nb_bitmaps);
    /* invariant 5: RAW takes nb entries, the others walk the whole directory */
    while (policy == QCOW2_BITMAP_RAW ? i < nb_bitmaps : pos < size) {
        if (size - pos < QCOW2_BITMAP_ENTRY_HEADER_SIZE) {
            ret = framing_error(&d, i, pos, QCOW2_BITMAP_ENTRY_HEADER_SIZE);
            goto fail;
        }
        if (i >= nb_bitmaps) {
            if (policy == QCOW2_BITMAP_CHECK) {
                ret = blk_error(EINVAL,
                                "More bitmaps found than specified in header extension");
            } else {
                ret = blk_error(EINVAL,
                                "Bitmap directory holds more than the %" PRIu32
                                " bitmaps the header extension announces",
                                nb_bitmaps);
            }
            goto fail;
        }
        dir->nb = i + 1; /* so that this entry is freed on failure */
        ret = decode_entry(&d, i, &pos, &dir->bms[i]);
        if (ret < 0) {
            goto fail;
        }
        i++;
    }
    if (policy != QCOW2_BITMAP_RAW && i != nb_bitmaps) {
        if (policy == QCOW2_BITMAP_CHECK) {
            ret = blk_error(EINVAL,
                            "Less bitmaps found than specified in header extension");
        } else {
            ret = blk_error(EINVAL,
                            "Bitmap directory holds %" PRIu32
                            " bitmaps, the header extension announces %" PRIu32,
                            i, nb_bitmaps);
        }
        goto fail;
    }
    dir->nb = i;
    dir->size = pos;
    if (d.names) {
        g_hash_table_destroy(d.names);
    }
    return 0;

fail:
    if (d.names) {
        g_hash_table_destroy(d.names);
    }
    qcow2_bitmap_dir_free(dir);
    return ret;
}

int qcow2_bitmap_dir_read(const Qcow2BitmapSource *src, const Qcow2BitmapsExt *x,
                          const Qcow2BitmapImage *img, Qcow2BitmapPolicy policy,
                          Qcow2BitmapDir *dir)
{
    uint64_t size = x->directory_size;
    g_autofree uint8_t *buf = NULL;
    int ret;

    memset(dir, 0, sizeof(*dir));
    /* invariant 6: the size is bounded before anything is allocated */
    ret = check_dir_size(size, x->nb_bitmaps, policy);
    if (ret < 0) {
        return ret;
    }
    if (policy == QCOW2_BITMAP_OPEN &&
        !qcow2_range_within(x->directory_offset, size, img->file_size)) {
        return blk_error(EINVAL,
                         "Bitmap directory at 0x%" PRIx64 " (%" PRIu64
                         " bytes) lies outside the file",
                         x->directory_offset, size);
    }
    buf = g_try_malloc(MAX(size, 1));
    if (!buf) {
        return blk_error(ENOMEM, "Failed to allocate space for bitmap directory");
    }
    ret = size ? src->read(src->opaque, x->directory_offset, buf, size) : 0;
    if (ret < 0) {
        if (policy == QCOW2_BITMAP_CHECK) {
            return blk_error(EIO, "Failed to read bitmap directory");
        }
        return blk_error_prefix(ret, "Failed to read bitmap directory");
    }
    return qcow2_bitmap_dir_decode(buf, size, x->nb_bitmaps, img, policy, dir);
}

/* ---- encoding the directory (invariants 1, 7) ---- */

bool qcow2_bitmap_dir_size(const Qcow2Bitmap *bms, uint32_t nb, uint64_t *size)
{
    uint64_t off = 0;

    if (nb > QCOW2_MAX_BITMAPS) {
        return false;
    }
    for (uint32_t i = 0; i < nb; i++) {
        /* each entry < 2^33, at most 65535 of them: no overflow */
        off += qcow2_bitmap_entry_size(&bms[i]);
        if (off > QCOW2_MAX_BITMAP_DIRECTORY_SIZE) {
            return false;
        }
    }
    *size = off;
    return true;
}

void qcow2_bitmap_dir_encode(const Qcow2Bitmap *bms, uint32_t nb, uint8_t *buf)
{
    uint8_t *e = buf;

    for (uint32_t i = 0; i < nb; i++) {
        const Qcow2Bitmap *bm = &bms[i];
        uint64_t len = qcow2_bitmap_entry_size(bm);
        uint8_t *p = e + QCOW2_BME_EXTRA;

        store_be64(e + QCOW2_BME_TABLE_OFFSET, bm->table_offset);
        store_be32(e + QCOW2_BME_TABLE_SIZE, bm->table_size);
        store_be32(e + QCOW2_BME_FLAGS, bm->flags);
        e[QCOW2_BME_TYPE] = bm->type;
        e[QCOW2_BME_GRANULARITY_BITS] = bm->granularity_bits;
        store_be16(e + QCOW2_BME_NAME_SIZE, bm->name_size);
        store_be32(e + QCOW2_BME_EXTRA_DATA_SIZE, bm->extra_data_size);
        if (bm->extra_data_size) {
            memcpy(p, bm->extra_data, bm->extra_data_size);
            p += bm->extra_data_size;
        }
        memcpy(p, bm->name, bm->name_size);
        p += bm->name_size;
        memset(p, 0, (size_t)(e + len - p)); /* padding */
        e += len;
    }
}

/* ---- bitmap tables (invariant 8) ---- */

/* What is wrong with table entry v, or NULL. */
static const char *table_entry_fault(uint64_t v, const Qcow2BitmapImage *img,
                                     Qcow2BitmapPolicy policy)
{
    uint64_t cluster_size = UINT64_C(1) << img->cluster_bits;
    uint64_t off = v & QCOW2_BTE_OFFSET_MASK;

    if (v & QCOW2_BTE_RESERVED_MASK) {
        return "has reserved bits set";
    }
    if (off && (v & QCOW2_BTE_ALL_ONES)) {
        return "has the all-ones flag set with a cluster offset";
    }
    if (off & (cluster_size - 1)) {
        return "points to an offset not aligned to the cluster size";
    }
    if (off && policy != QCOW2_BITMAP_CHECK &&
        !qcow2_range_within(off, cluster_size, img->file_size)) {
        return "points past the end of the file";
    }
    return NULL;
}

int qcow2_bitmap_table_decode(const uint8_t *buf, const Qcow2Bitmap *bm, uint32_t index,
                              const Qcow2BitmapImage *img, Qcow2BitmapPolicy policy,
                              uint64_t *entries)
{
    for (uint32_t i = 0; i < bm->table_size; i++) {
        uint64_t v = load_be64(buf + UINT64_C(8) * i); /* < 2^35 */
        const char *fault = table_entry_fault(v, img, policy);

        if (fault && policy == QCOW2_BITMAP_CHECK) {
            /* invariant 3: qemu-img check's words */
            return blk_error(EINVAL,
                             "Could not read bitmap_table table from image for bitmap "
                             "%" PRIu32 ": %s",
                             index, g_strerror(EINVAL));
        }
        if (fault) {
            return blk_error(EINVAL,
                             "Bitmap '%.*s': bitmap table entry %" PRIu32
                             " (0x%016" PRIx64 ") %s",
                             NAME_ARG(bm), i, v, fault);
        }
        entries[i] = v;
    }
    return 0;
}

int qcow2_bitmap_table_read(const Qcow2BitmapSource *src, const Qcow2Bitmap *bm,
                            uint32_t index, const Qcow2BitmapImage *img,
                            Qcow2BitmapPolicy policy, uint64_t **entries)
{
    uint64_t cluster_size = UINT64_C(1) << img->cluster_bits, phys;
    g_autofree uint64_t *table = NULL;
    int ret;

    *entries = NULL;
    /* invariant 6: what the directory's rules allow, again for direct
     * callers: <= 512 MiB of clusters of >= 512 bytes, <= 8 MiB of table */
    if (qcow2_mul(bm->table_size, cluster_size, &phys) ||
        phys > QCOW2_BITMAP_MAX_PHYS_SIZE) {
        return blk_error(EFBIG,
                         "Bitmap '%.*s': bitmap table size %" PRIu32
                         " exceeds the supported maximum",
                         NAME_ARG(bm), bm->table_size);
    }
    table = g_try_new(uint64_t, MAX(bm->table_size, 1));
    if (!table) {
        if (policy == QCOW2_BITMAP_CHECK) {
            return blk_error(ENOMEM, "%s", g_strerror(ENOMEM));
        }
        return blk_error(ENOMEM, "Bitmap '%.*s': no memory for its bitmap table",
                         NAME_ARG(bm));
    }
    ret = bm->table_size ? src->read(src->opaque, bm->table_offset, table,
                                     UINT64_C(8) * bm->table_size)
                         : 0;
    if (ret < 0) {
        if (policy == QCOW2_BITMAP_CHECK) {
            return blk_error(-ret,
                             "Could not read bitmap_table table from image for bitmap "
                             "%" PRIu32 ": %s",
                             index, g_strerror(-ret));
        }
        return blk_error_prefix(ret, "Bitmap '%.*s': failed to read its bitmap table",
                                NAME_ARG(bm));
    }
    /* decoded in place: each entry is read before it is stored */
    ret =
        qcow2_bitmap_table_decode((const uint8_t *)table, bm, index, img, policy, table);
    if (ret < 0) {
        return ret;
    }
    *entries = g_steal_pointer(&table);
    return 0;
}

void qcow2_bitmap_table_encode(const uint64_t *entries, uint32_t n, uint8_t *buf)
{
    for (uint32_t i = 0; i < n; i++) {
        store_be64(buf + UINT64_C(8) * i, entries[i]);
    }
}
