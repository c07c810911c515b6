/*
 * qcow2/header.c: the one codec of the qcow2 header (v2, v3) and its
 * extensions: decoding, validation, encoding.
 *
 * Owns: the field-by-field decode and encode of bytes 0..header_length, the header
 * extension area (backing format, feature name table, external data file
 * name, bitmaps and crypto pointers, unknown extensions kept verbatim; the
 * bitmaps extension's fields are decoded by bitmap-codec.c), the backing
 * file name, and every limit QEMU 7.2 enforces when it opens an image.  All functions
 * here are pure: they take buffers already read from the file, so tests can feed them any
 * bytes.
 *
 * Invariants (cited as "header.c invariant N"):
 *  1. Validation follows the order of QEMU's qcow2_do_open, so an image with
 *     several faults reports the same first fault QEMU would.
 *  2. Every message names the field and, where it helps, the value
 *     ("L1 table offset 0x1234 is not aligned to the cluster size").
 *  3. Limits (QEMU's): cluster_bits 9..21; header_length 104..cluster size
 *     (v3); refcount_order <= 6; L1 <= 32 MiB; refcount table <= 8 MiB;
 *     <= 65536 snapshots; backing name <= 1023 bytes inside cluster 0;
 *     backing format name <= 15 bytes; extensions inside cluster 0 (before
 *     the backing name).
 *  4. Tables must lie inside the file (our addition: QEMU would read zeros
 *     past the end; no image qemu-img writes has that).
 *  5. Extensions are parsed from the in-memory first cluster only; nothing
 *     here allocates more than the cluster size.
 *  6. The encoder is the decoder's inverse: qcow2_header_decode() of what
 *     qcow2_header_encode() wrote gives the same fields back, and the
 *     extensions and feature name table it writes are what the extension
 *     parser reads (tests/test-qcow2-header.c round-trips them).
 *  7. An encrypted image (crypt_method 1 or 2) needs a key unless the open
 *     is metadata-only (qemu-img info's: read-only, no guest data): then
 *     its encrypt.key-secret must name a secret the caller has, with
 *     qemu-img's words for a missing option ("Parameter
 *     'encrypt.key-secret' is required for cipher") and an unknown secret
 *     ("No secret with id 'X'"), checked after the extensions (QEMU checks
 *     the encryption header offset's alignment first).  An unencrypted
 *     image does not look its key-secret up, as QEMU; nor does a re-read
 *     of the header of an image open already (backing.c).  A key-secret
 *     given as a JSON null is refused by any open of an encrypted image,
 *     qemu-img info's too ("Internal error: parameter key-secret
 *     invalid", QEMU's).  The LUKS header and the key are crypt.c's.
 *     The other encrypt.* options are QEMU's too: encrypt.format must name
 *     the header's method ("No encryption in image header, but options
 *     specified format 'F'", "Header reported 'M' encryption format but
 *     options specify 'F'"), checked first; any other encrypt.* key (a
 *     JSON null too) is ignored by an unencrypted image and refused by an
 *     encrypted one ("Parameter 'K' is unexpected", after the null
 *     key-secret, before the missing one).
 */
#include "qcow2/qcow2.h"

#include <errno.h>
#include <inttypes.h>

int qcow2_header_decode(const uint8_t *buf, size_t len, Qcow2Header *h)
{
    uint64_t cluster_size;

    g_assert(len >= QCOW2_HDR_V3_MIN_LENGTH);
    memset(h, 0, sizeof(*h));
    h->magic = load_be32(buf + QCOW2_HDR_MAGIC);
    h->version = load_be32(buf + QCOW2_HDR_VERSION);
    h->backing_file_offset = load_be64(buf + QCOW2_HDR_BACKING_FILE_OFFSET);
    h->backing_file_size = load_be32(buf + QCOW2_HDR_BACKING_FILE_SIZE);
    h->cluster_bits = load_be32(buf + QCOW2_HDR_CLUSTER_BITS);
    h->size = load_be64(buf + QCOW2_HDR_SIZE);
    h->crypt_method = load_be32(buf + QCOW2_HDR_CRYPT_METHOD);
    h->l1_size = load_be32(buf + QCOW2_HDR_L1_SIZE);
    h->l1_table_offset = load_be64(buf + QCOW2_HDR_L1_TABLE_OFFSET);
    h->refcount_table_offset = load_be64(buf + QCOW2_HDR_REFCOUNT_TABLE_OFFSET);
    h->refcount_table_clusters = load_be32(buf + QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS);
    h->nb_snapshots = load_be32(buf + QCOW2_HDR_NB_SNAPSHOTS);
    h->snapshots_offset = load_be64(buf + QCOW2_HDR_SNAPSHOTS_OFFSET);

    if (h->magic != QCOW2_MAGIC) {
        return blk_error(EINVAL, "Image is not in qcow2 format (magic 0x%08" PRIx32 ")",
                         h->magic);
    }
    if (h->version < 2 || h->version > 3) {
        return blk_error(ENOTSUP, "Unsupported qcow2 version %" PRIu32, h->version);
    }
    if (h->cluster_bits < QCOW2_MIN_CLUSTER_BITS ||
        h->cluster_bits > QCOW2_MAX_CLUSTER_BITS) {
        return blk_error(EINVAL,
                         "Unsupported cluster size: 2^%" PRIu32
                         " (cluster_bits must be 9..21)",
                         h->cluster_bits);
    }
    cluster_size = UINT64_C(1) << h->cluster_bits;

    if (h->version == 2) {
        h->refcount_order = 4; /* v2: always 16-bit refcounts */
        h->header_length = QCOW2_HDR_V2_LENGTH;
    } else {
        h->incompatible_features = load_be64(buf + QCOW2_HDR_INCOMPATIBLE_FEATURES);
        h->compatible_features = load_be64(buf + QCOW2_HDR_COMPATIBLE_FEATURES);
        h->autoclear_features = load_be64(buf + QCOW2_HDR_AUTOCLEAR_FEATURES);
        h->refcount_order = load_be32(buf + QCOW2_HDR_REFCOUNT_ORDER);
        h->header_length = load_be32(buf + QCOW2_HDR_HEADER_LENGTH);
        if (h->header_length < QCOW2_HDR_V3_MIN_LENGTH) {
            return blk_error(EINVAL,
                             "qcow2 header too short (header_length %" PRIu32
                             ", at least 104 required)",
                             h->header_length);
        }
    }
    if (h->header_length > cluster_size) {
        return blk_error(EINVAL,
                         "qcow2 header exceeds cluster size (header_length %" PRIu32
                         ", cluster size %" PRIu64 ")",
                         h->header_length, cluster_size);
    }
    if (h->backing_file_offset > cluster_size) {
        return blk_error(EINVAL,
                         "Invalid backing file offset 0x%" PRIx64
                         " (beyond the first cluster)",
                         h->backing_file_offset);
    }
    /* The compression type byte is only read once cluster 0 is available
     * (qcow2_header_parse); until then it is the default. */
    return 0;
}

/* Fields past byte 104 that need the whole first cluster. */
static void header_decode_tail(const uint8_t *cluster0, Qcow2Header *h)
{
    if (h->header_length > QCOW2_HDR_COMPRESSION_TYPE) {
        h->compression_type = cluster0[QCOW2_HDR_COMPRESSION_TYPE];
    }
}

/* A last entry shorter than 48 bytes counts, its missing bytes zeros (as
 * QEMU reads the table: "\x00\x3fName" names incompatible bit 63). */
static int read_feature_table(const uint8_t *data, uint32_t len, Qcow2Extensions *ext)
{
    size_t n = (len + QCOW2_FEATURE_NAME_ENTRY_SIZE - 1) / QCOW2_FEATURE_NAME_ENTRY_SIZE;

    g_free(ext->features);
    ext->features = g_new0(Qcow2FeatureName, n ? n : 1);
    ext->nb_features = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t e[QCOW2_FEATURE_NAME_ENTRY_SIZE] = {0};
        size_t at = i * QCOW2_FEATURE_NAME_ENTRY_SIZE;
        Qcow2FeatureName *f = &ext->features[ext->nb_features];

        memcpy(e, data + at, MIN(sizeof(e), len - at));
        /* QEMU stops at the first entry without a name. */
        if (e[2] == 0) {
            break;
        }
        f->type = e[0];
        f->bit = e[1];
        memcpy(f->name, e + 2, QCOW2_FEATURE_NAME_LEN);
        f->name[QCOW2_FEATURE_NAME_LEN] = '\0';
        ext->nb_features++;
    }
    return 0;
}

static void unknown_ext_free(gpointer p)
{
    Qcow2UnknownExt *u = p;
    g_free(u->data);
    g_free(u);
}

void qcow2_extensions_free(Qcow2Extensions *ext)
{
    g_free(ext->backing_format);
    g_free(ext->data_file);
    g_free(ext->features);
    if (ext->unknown) {
        g_ptr_array_free(ext->unknown, TRUE);
    }
    memset(ext, 0, sizeof(*ext));
}

int qcow2_read_extensions(const uint8_t *cluster0, const Qcow2Header *h,
                          Qcow2Extensions *ext)
{
    /* header.c invariant 5: [start, end) lies inside cluster 0. */
    uint64_t offset = h->header_length;
    uint64_t end = h->backing_file_offset ? h->backing_file_offset
                                          : (UINT64_C(1) << h->cluster_bits);
    int ret;

    if (!ext->unknown) {
        ext->unknown = g_ptr_array_new_with_free_func(unknown_ext_free);
    }
    while (offset < end) {
        if (end - offset < QCOW2_EXT_HEADER_SIZE) {
            return blk_error(EINVAL,
                             "Header extension too large (extension header at "
                             "0x%" PRIx64 " crosses 0x%" PRIx64 ")",
                             offset, end);
        }
        uint32_t type = load_be32(cluster0 + offset);
        uint32_t len = load_be32(cluster0 + offset + 4);
        offset += QCOW2_EXT_HEADER_SIZE;
        if (len > end - offset) {
            return blk_error(EINVAL,
                             "Header extension too large (type 0x%08" PRIx32
                             ", length %" PRIu32 ", %" PRIu64 " bytes available)",
                             type, len, end - offset);
        }
        const uint8_t *data = cluster0 + offset;

        switch (type) {
        case QCOW2_EXT_END:
            ext->end = offset - QCOW2_EXT_HEADER_SIZE;
            return 0;
        case QCOW2_EXT_BACKING_FORMAT:
            if (len > QCOW2_MAX_BACKING_FORMAT_LEN) {
                return blk_error(
                    EINVAL, "ERROR: ext_backing_format: len=%" PRIu32 " too large (>=16)",
                    len);
            }
            g_free(ext->backing_format);
            ext->backing_format = g_strndup((const char *)data, len);
            break;
        case QCOW2_EXT_FEATURE_TABLE:
            ret = read_feature_table(data, len, ext);
            if (ret < 0) {
                return ret;
            }
            break;
        case QCOW2_EXT_CRYPTO_HEADER:
            if (h->crypt_method != QCOW2_CRYPT_LUKS) {
                return blk_error(EINVAL, "CRYPTO header extension only expected with "
                                         "LUKS encryption method");
            }
            if (len != QCOW2_CRYPTO_EXT_SIZE) {
                return blk_error(EINVAL,
                                 "CRYPTO header extension size %" PRIu32
                                 ", but expected size 16",
                                 len);
            }
            ext->has_crypto = true;
            ext->crypto_offset = load_be64(data);
            ext->crypto_length = load_be64(data + 8);
            if (ext->crypto_offset & ((UINT64_C(1) << h->cluster_bits) - 1)) {
                return blk_error(EINVAL,
                                 "Encryption header offset '%" PRIu64
                                 "' is not a multiple of cluster size '%" PRIu64 "'",
                                 ext->crypto_offset, UINT64_C(1) << h->cluster_bits);
            }
            break;
        case QCOW2_EXT_BITMAPS:
            /* bitmap-codec.c invariant 2 */
            ret = qcow2_bitmaps_ext_decode(
                data, len, h->cluster_bits,
                (h->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS) != 0, &ext->bitmaps);
            if (ret < 0) {
                return ret;
            }
            ext->has_bitmaps = (h->autoclear_features & QCOW2_AUTOCLEAR_BITMAPS) != 0;
            break;
        case QCOW2_EXT_DATA_FILE:
            g_free(ext->data_file);
            ext->data_file = g_strndup((const char *)data, len);
            break;
        default: {
            Qcow2UnknownExt *u = g_new0(Qcow2UnknownExt, 1);
            u->magic = type;
            u->len = len;
            u->data = g_memdup2(data, len);
            g_ptr_array_add(ext->unknown, u);
            break;
        }
        }
        /* Padding to 8 may run past 'end'; the loop then stops. */
        offset += ((uint64_t)len + 7) & ~UINT64_C(7);
    }
    ext->end = MIN(offset, end);
    return 0;
}

/* "Unsupported qcow2 feature(s): Name, Unknown incompatible feature: 20" */
static int report_unsupported_features(const Qcow2Extensions *ext, uint64_t mask)
{
    g_autoptr(GString) s = g_string_new(NULL);

    for (size_t i = 0; ext && i < ext->nb_features; i++) {
        const Qcow2FeatureName *f = &ext->features[i];
        if (f->type != QCOW2_FEAT_TYPE_INCOMPATIBLE || f->bit > 63 ||
            !(mask & (UINT64_C(1) << f->bit))) {
            continue;
        }
        if (s->len) {
            g_string_append(s, ", ");
        }
        g_string_append_printf(s, "%.46s", f->name);
        mask &= ~(UINT64_C(1) << f->bit);
    }
    if (mask) {
        if (s->len) {
            g_string_append(s, ", ");
        }
        g_string_append_printf(s, "Unknown incompatible feature: %" PRIx64, mask);
    }
    return blk_error(ENOTSUP, "Unsupported qcow2 feature(s): %s", s->str);
}

int qcow2_header_check_features(const Qcow2Header *h, const Qcow2Extensions *ext,
                                bool read_write, bool check_mode)
{
    bool compression_bit = h->incompatible_features & QCOW2_INCOMPAT_COMPRESSION;

    if (h->compression_type != QCOW2_COMPRESSION_ZLIB &&
        h->compression_type != QCOW2_COMPRESSION_ZSTD) {
        return blk_error(ENOTSUP, "qcow2: unknown compression type: %u",
                         h->compression_type);
    }
    if (h->compression_type == QCOW2_COMPRESSION_ZLIB && compression_bit) {
        return blk_error(EINVAL, "qcow2: Compression type incompatible feature bit "
                                 "must not be set (compression_type 0 = zlib)");
    }
    if (h->compression_type != QCOW2_COMPRESSION_ZLIB && !compression_bit) {
        return blk_error(EINVAL,
                         "qcow2: Compression type incompatible feature bit "
                         "must be set (compression_type %u)",
                         h->compression_type);
    }
    if (h->incompatible_features & ~QCOW2_INCOMPAT_KNOWN) {
        return report_unsupported_features(ext, h->incompatible_features &
                                                    ~QCOW2_INCOMPAT_KNOWN);
    }
    if ((h->incompatible_features & QCOW2_INCOMPAT_CORRUPT) && read_write &&
        !check_mode) {
        return blk_error(EACCES, "qcow2: Image is corrupt; cannot be opened read/write");
    }
    if ((h->incompatible_features & QCOW2_INCOMPAT_EXTL2) && h->cluster_bits < 14) {
        return blk_error(
            EINVAL,
            "Unsupported subcluster size: %u (extended L2 entries "
            "require a cluster size of at least 16384 bytes, cluster_bits %" PRIu32 ")",
            (1u << h->cluster_bits) / QCOW2_EXTL2_SUBCLUSTERS, h->cluster_bits);
    }
    if (h->refcount_order > 6) {
        return blk_error(EINVAL,
                         "Reference count entry width too large; may not exceed "
                         "64 bits (refcount_order %" PRIu32 ")",
                         h->refcount_order);
    }
    if (h->crypt_method > QCOW2_CRYPT_LUKS) {
        return blk_error(EINVAL, "Unsupported encryption method %" PRIu32,
                         h->crypt_method);
    }
    return 0;
}

/* header.c invariant 7 */
static int check_encryption(const Qcow2Header *h, const Qcow2Extensions *ext,
                            const Qcow2CryptOpen *crypt)
{
    const char *method = h->crypt_method == QCOW2_CRYPT_AES ? "aes" : "luks";

    if (crypt && crypt->format && h->crypt_method == QCOW2_CRYPT_NONE) {
        return blk_error(EINVAL,
                         "No encryption in image header, but options specified format "
                         "'%s'",
                         crypt->format);
    }
    if (crypt && crypt->format && strcmp(crypt->format, method) != 0 &&
        h->crypt_method != QCOW2_CRYPT_NONE) {
        return blk_error(EINVAL,
                         "Header reported '%s' encryption format but options specify "
                         "'%s'",
                         method, crypt->format);
    }
    if (h->crypt_method == QCOW2_CRYPT_NONE) {
        return 0; /* as QEMU: a key-secret is not looked up, nor the rest */
    }
    if (crypt && crypt->key_secret_null) { /* QEMU's words, any open */
        return blk_error(EINVAL, "Internal error: parameter key-secret invalid");
    }
    if (crypt && crypt->unexpected) { /* the crypto layer's words */
        return blk_error(EINVAL, "Parameter '%s' is unexpected", crypt->unexpected);
    }
    if (crypt && !crypt->metadata_only && !crypt->key_from) { /* NULL: a re-read */
        if (!crypt->key_secret) {
            return blk_error(EINVAL,
                             "Parameter 'encrypt.key-secret' is required for cipher");
        }
        if (!crypt->secret_exists) {
            return blk_error(EINVAL, "No secret with id '%s'", crypt->key_secret);
        }
    }
    if (h->crypt_method == QCOW2_CRYPT_LUKS && !ext->has_crypto) {
        /* QEMU 7.2 crashes here (qemu-img info: SIGSEGV) */
        return blk_error(EINVAL,
                         "LUKS encryption method without a CRYPTO header extension");
    }
    return 0;
}

int qcow2_validate_table(const char *name, uint64_t offset, uint64_t entries,
                         uint64_t entry_size, uint64_t max_bytes, uint32_t cluster_bits,
                         uint64_t file_size)
{
    uint64_t bytes, end;

    if (entries > max_bytes / entry_size) {
        return blk_error(EFBIG,
                         "%s too large (%" PRIu64 " entries, at most %" PRIu64 " bytes)",
                         name, entries, max_bytes);
    }
    bytes = entries * entry_size; /* bounded by max_bytes just above */
    if (qcow2_add(offset, bytes, &end) || end > (uint64_t)INT64_MAX) {
        return blk_error(EINVAL, "%s offset 0x%" PRIx64 " invalid (table end overflows)",
                         name, offset);
    }
    if (offset & ((UINT64_C(1) << cluster_bits) - 1)) {
        return blk_error(EINVAL,
                         "%s offset 0x%" PRIx64 " is not aligned to the cluster size",
                         name, offset);
    }
    if (bytes && end > file_size) {
        return blk_error(EINVAL,
                         "%s (offset 0x%" PRIx64 ", %" PRIu64
                         " bytes) extends past the end of the file (%" PRIu64 " bytes)",
                         name, offset, bytes, file_size);
    }
    return 0;
}

bool qcow2_size_to_l1(uint64_t size, uint32_t cluster_bits, uint32_t l2_bits,
                      uint64_t *entries)
{
    uint32_t shift = cluster_bits + l2_bits;
    uint64_t sum;

    if (qcow2_add(size, (UINT64_C(1) << shift) - 1, &sum)) {
        return false;
    }
    *entries = sum >> shift;
    return true;
}

int qcow2_header_check_tables(const Qcow2Header *h, uint64_t file_size, bool check_mode)
{
    uint32_t l2_bits =
        h->cluster_bits - ((h->incompatible_features & QCOW2_INCOMPAT_EXTL2) ? 4 : 3);
    uint64_t l1_needed;
    int ret;

    if (h->refcount_table_clusters == 0 && !check_mode) {
        return blk_error(EINVAL, "Image does not contain a reference count table");
    }
    if ((uint64_t)h->refcount_table_clusters >
        (QCOW2_MAX_REFTABLE_BYTES >> h->cluster_bits)) {
        return blk_error(EINVAL,
                         "Reference count table too large (refcount_table_clusters "
                         "%" PRIu32 ", at most 8 MiB)",
                         h->refcount_table_clusters);
    }
    ret = qcow2_validate_table("Reference count table", h->refcount_table_offset,
                               (uint64_t)h->refcount_table_clusters
                                   << (h->cluster_bits - 3),
                               8, QCOW2_MAX_REFTABLE_BYTES, h->cluster_bits, file_size);
    if (ret < 0) {
        return ret;
    }
    if (!check_mode) {
        /* Only count and offset here; the variable-size entries are
         * checked while the table is read (snapshot.c). */
        ret = qcow2_validate_table("Snapshot table", h->snapshots_offset, h->nb_snapshots,
                                   QCOW2_SNAPSHOT_HEADER_SIZE,
                                   (uint64_t)QCOW2_SNAPSHOT_HEADER_SIZE *
                                       QCOW2_MAX_SNAPSHOTS,
                                   h->cluster_bits, UINT64_MAX); /* snapshot.c inv. 2 */
        if (ret < 0) {
            return ret;
        }
    }
    ret = qcow2_validate_table("L1 table", h->l1_table_offset, h->l1_size, 8,
                               QCOW2_MAX_L1_BYTES, h->cluster_bits, file_size);
    if (ret < 0) {
        return ret;
    }
    if (!qcow2_size_to_l1(h->size, h->cluster_bits, l2_bits, &l1_needed) ||
        l1_needed > INT32_MAX) {
        return blk_error(EFBIG, "Image is too big");
    }
    if (h->l1_size < l1_needed) {
        return blk_error(EINVAL,
                         "L1 table is too small (l1_size %" PRIu32 ", %" PRIu64
                         " entries needed for virtual size %" PRIu64 ")",
                         h->l1_size, l1_needed, h->size);
    }
    return 0;
}

int qcow2_read_backing_name(const uint8_t *cluster0, const Qcow2Header *h, char **name)
{
    uint64_t cluster_size = UINT64_C(1) << h->cluster_bits;

    *name = NULL;
    if (h->backing_file_offset == 0) {
        return 0;
    }
    /* backing_file_offset <= cluster_size (qcow2_header_decode) */
    if (h->backing_file_size >
        MIN(QCOW2_MAX_BACKING_NAME, cluster_size - h->backing_file_offset)) {
        return blk_error(EINVAL,
                         "Backing file name too long (backing_file_size %" PRIu32
                         " at offset 0x%" PRIx64 "; at most 1023 bytes inside the first "
                         "cluster)",
                         h->backing_file_size, h->backing_file_offset);
    }
    if (h->backing_file_size > 0) {
        char *s = g_strndup((const char *)cluster0 + h->backing_file_offset,
                            h->backing_file_size);
        if (s[0] == '\0') {
            g_free(s); /* QEMU: an empty name means no backing file */
        } else {
            *name = s;
        }
    }
    return 0;
}

int qcow2_header_parse(const uint8_t *cluster0, size_t len, uint64_t file_size,
                       bool read_write, bool check_mode, const Qcow2CryptOpen *crypt,
                       Qcow2Header *h, Qcow2Extensions *ext)
{
    int ret;

    memset(ext, 0, sizeof(*ext));
    ret = qcow2_header_decode(cluster0, len, h);
    if (ret < 0) {
        return ret;
    }
    g_assert(len >= (UINT64_C(1) << h->cluster_bits));
    header_decode_tail(cluster0, h);

    /* header.c invariant 1: features (named from a first, lenient pass
     * over the extensions, as QEMU does), then tables, then extensions. */
    if (h->incompatible_features & ~QCOW2_INCOMPAT_KNOWN) {
        Qcow2Extensions tmp = {0};
        bool had_error = blk_error_mark();
        (void)qcow2_read_extensions(cluster0, h, &tmp); /* lenient: errors ignored */
        blk_error_unwind(had_error);
        ret = qcow2_header_check_features(h, &tmp, read_write, check_mode);
        qcow2_extensions_free(&tmp);
    } else {
        ret = qcow2_header_check_features(h, NULL, read_write, check_mode);
    }
    if (ret < 0) {
        return ret;
    }
    ret = qcow2_header_check_tables(h, file_size, check_mode);
    if (ret < 0) {
        return ret;
    }
    ret = qcow2_read_extensions(cluster0, h, ext);
    if (ret == 0) {
        ret = check_encryption(h, ext, crypt);
    }
    if (ret < 0) {
        qcow2_extensions_free(ext);
        return ret;
    }
    /* The data file bit without a name extension is the open's to judge
     * (qcow2.c invariant 4: a caller may name the data file). */
    if (!(h->incompatible_features & QCOW2_INCOMPAT_DATA_FILE) &&
        (h->autoclear_features & QCOW2_AUTOCLEAR_DATA_FILE_RAW)) {
        qcow2_extensions_free(ext);
        return blk_error(EINVAL, "data-file-raw requires a data file");
    }
    return 0;
}

/* ---- encoding (invariant 6) ---- */

size_t qcow2_header_encode(const Qcow2Header *h, uint8_t *buf, size_t len)
{
    size_t hl = h->version >= 3 ? h->header_length : QCOW2_HDR_V2_LENGTH;

    g_assert(h->version >= 3 ? hl >= QCOW2_HDR_V3_MIN_LENGTH : h->version == 2);
    g_assert(hl <= len);
    memset(buf, 0, hl);
    store_be32(buf + QCOW2_HDR_MAGIC, h->magic);
    store_be32(buf + QCOW2_HDR_VERSION, h->version);
    store_be64(buf + QCOW2_HDR_BACKING_FILE_OFFSET, h->backing_file_offset);
    store_be32(buf + QCOW2_HDR_BACKING_FILE_SIZE, h->backing_file_size);
    store_be32(buf + QCOW2_HDR_CLUSTER_BITS, h->cluster_bits);
    store_be64(buf + QCOW2_HDR_SIZE, h->size);
    store_be32(buf + QCOW2_HDR_CRYPT_METHOD, h->crypt_method);
    store_be32(buf + QCOW2_HDR_L1_SIZE, h->l1_size);
    store_be64(buf + QCOW2_HDR_L1_TABLE_OFFSET, h->l1_table_offset);
    store_be64(buf + QCOW2_HDR_REFCOUNT_TABLE_OFFSET, h->refcount_table_offset);
    store_be32(buf + QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS, h->refcount_table_clusters);
    store_be32(buf + QCOW2_HDR_NB_SNAPSHOTS, h->nb_snapshots);
    store_be64(buf + QCOW2_HDR_SNAPSHOTS_OFFSET, h->snapshots_offset);
    if (h->version >= 3) {
        store_be64(buf + QCOW2_HDR_INCOMPATIBLE_FEATURES, h->incompatible_features);
        store_be64(buf + QCOW2_HDR_COMPATIBLE_FEATURES, h->compatible_features);
        store_be64(buf + QCOW2_HDR_AUTOCLEAR_FEATURES, h->autoclear_features);
        store_be32(buf + QCOW2_HDR_REFCOUNT_ORDER, h->refcount_order);
        store_be32(buf + QCOW2_HDR_HEADER_LENGTH, (uint32_t)hl);
        if (hl > QCOW2_HDR_COMPRESSION_TYPE) {
            buf[QCOW2_HDR_COMPRESSION_TYPE] = h->compression_type;
        }
    }
    return hl;
}

size_t qcow2_header_ext_encode(uint8_t *buf, size_t pos, size_t buflen, uint32_t magic,
                               const void *data, size_t len)
{
    size_t ext_len = QCOW2_EXT_HEADER_SIZE + ROUND_UP(len, 8);

    if (len > UINT32_MAX || pos > buflen || buflen - pos < ext_len) {
        return 0;
    }
    store_be32(buf + pos, magic);
    store_be32(buf + pos + 4, (uint32_t)len);
    memset(buf + pos + QCOW2_EXT_HEADER_SIZE, 0, ext_len - QCOW2_EXT_HEADER_SIZE);
    if (len) {
        memcpy(buf + pos + QCOW2_EXT_HEADER_SIZE, data, len);
    }
    return ext_len;
}

/* The feature name table qemu-img writes. */
static const struct {
    uint8_t type, bit;
    const char *name;
} feature_names[] = {
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_DIRTY_BITNR, "dirty bit"},
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_CORRUPT_BITNR, "corrupt bit"},
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_DATA_FILE_BITNR, "external data file"},
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_COMPRESSION_BITNR, "compression type"},
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_EXTL2_BITNR, "extended L2 entries"},
    {QCOW2_FEAT_TYPE_COMPATIBLE, QCOW2_COMPAT_LAZY_REFCOUNTS_BITNR, "lazy refcounts"},
    {QCOW2_FEAT_TYPE_AUTOCLEAR, QCOW2_AUTOCLEAR_BITMAPS_BITNR, "bitmaps"},
    {QCOW2_FEAT_TYPE_AUTOCLEAR, QCOW2_AUTOCLEAR_DATA_FILE_RAW_BITNR, "raw external data"},
};

size_t qcow2_feature_table_encode(uint8_t *buf, size_t pos, size_t buflen)
{
    uint8_t table[G_N_ELEMENTS(feature_names) * QCOW2_FEATURE_NAME_ENTRY_SIZE] = {0};

    for (size_t i = 0; i < G_N_ELEMENTS(feature_names); i++) {
        uint8_t *e = table + i * QCOW2_FEATURE_NAME_ENTRY_SIZE;
        e[0] = feature_names[i].type;
        e[1] = feature_names[i].bit;
        memcpy(e + 2, feature_names[i].name, strlen(feature_names[i].name));
    }
    return qcow2_header_ext_encode(buf, pos, buflen, QCOW2_EXT_FEATURE_TABLE, table,
                                   sizeof(table));
}

size_t qcow2_header_cluster_encode(Qcow2Header *h, const Qcow2Extensions *ext,
                                   const char *backing, uint8_t *buf, size_t buflen)
{
    size_t pos, n;

    memset(buf, 0, buflen);
    h->backing_file_offset = 0;
    h->backing_file_size = 0;
    pos = qcow2_header_encode(h, buf, buflen);
#define APPEND(expr)                                                                     \
    do {                                                                                 \
        if (!(n = (expr))) {                                                             \
            return 0;                                                                    \
        }                                                                                \
        pos += n;                                                                        \
    } while (0)
    if (backing && ext->backing_format) {
        APPEND(qcow2_header_ext_encode(buf, pos, buflen, QCOW2_EXT_BACKING_FORMAT,
                                       ext->backing_format, strlen(ext->backing_format)));
    }
    if (ext->data_file) {
        APPEND(qcow2_header_ext_encode(buf, pos, buflen, QCOW2_EXT_DATA_FILE,
                                       ext->data_file, strlen(ext->data_file)));
    }
    if (ext->has_crypto) {
        uint8_t c[QCOW2_CRYPTO_EXT_SIZE];
        store_be64(c, ext->crypto_offset);
        store_be64(c + 8, ext->crypto_length);
        APPEND(qcow2_header_ext_encode(buf, pos, buflen, QCOW2_EXT_CRYPTO_HEADER, c,
                                       sizeof(c)));
    }
    /* qemu-img leaves the table out for clusters of 4 KiB and less, to keep
     * room for a backing file name */
    if (h->version >= 3 && h->cluster_bits > 12) {
        APPEND(qcow2_feature_table_encode(buf, pos, buflen));
    }
    if (ext->has_bitmaps) {
        uint8_t b[QCOW2_BITMAPS_EXT_SIZE];
        qcow2_bitmaps_ext_encode(&ext->bitmaps, b);
        APPEND(
            qcow2_header_ext_encode(buf, pos, buflen, QCOW2_EXT_BITMAPS, b, sizeof(b)));
    }
    for (guint i = 0; ext->unknown && i < ext->unknown->len; i++) {
        const Qcow2UnknownExt *u = g_ptr_array_index(ext->unknown, i);
        APPEND(qcow2_header_ext_encode(buf, pos, buflen, u->magic, u->data, u->len));
    }
    APPEND(qcow2_header_ext_encode(buf, pos, buflen, QCOW2_EXT_END, NULL, 0));
#undef APPEND
    if (backing) {
        size_t len = strlen(backing);
        if (buflen - pos < len || len > QCOW2_MAX_BACKING_NAME) {
            return 0;
        }
        memcpy(buf + pos, backing, len);
        h->backing_file_offset = pos;
        h->backing_file_size = (uint32_t)len;
        qcow2_header_encode(h, buf, buflen);
        pos += len;
    }
    return pos;
}
