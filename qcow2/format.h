/*
 * qcow2/format.h: the qcow2 on-disk format, for the qcow2/ files: layout
 * constants and limits, header, snapshot table and bitmap directory field
 * offsets, feature and bitmap flag bits, table entry masks, the decoded
 * header, extensions, snapshot and bitmap entries, and the codecs that turn
 * bytes into them and back (header.c, snapshot-codec.c; bitmap-codec.h).
 * Nothing here knows an open image (Qcow2State is in qcow2.h, which
 * includes this file).
 *
 * Owns: the on-disk constants and field offsets (each layout checked
 * field by field under _Static_assert) and checked arithmetic; the
 * big-endian load/store helpers are block/endian.h's.
 *
 * Invariants (cited as "format.h invariant N"):
 *  1. Every number read from the image is decoded with the load_be*()
 *     helpers into a host variable; no on-disk struct is ever overlaid.
 *  2. Every sum or product that involves a value from disk goes through
 *     qcow2_add()/qcow2_mul() (or is bounded by an earlier validation that
 *     the comment next to it names); an overflow is an error, never a wrap.
 */
#ifndef QIMG_QCOW2_FORMAT_H
#define QIMG_QCOW2_FORMAT_H

#include "block/endian.h"

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- on-disk constants ---- */

#define QCOW2_MAGIC 0x514649fbu /* "QFI\xfb" */

#define QCOW2_MIN_CLUSTER_BITS 9
#define QCOW2_MAX_CLUSTER_BITS 21
#define QCOW2_MAX_L1_BYTES (32u * 1024 * 1024)      /* QEMU QCOW_MAX_L1_SIZE */
#define QCOW2_MAX_REFTABLE_BYTES (8u * 1024 * 1024) /* QCOW_MAX_REFTABLE_SIZE */
#define QCOW2_MAX_SNAPSHOTS 65536u
#define QCOW2_MAX_SNAPSHOTS_BYTES (64u * 1024 * 1024) /* whole snapshot table */
#define QCOW2_MAX_SNAPSHOT_EXTRA_DATA 1024u
#define QCOW2_MAX_BACKING_NAME 1023u
#define QCOW2_MAX_BITMAPS 65535u
#define QCOW2_MAX_BITMAP_DIRECTORY_SIZE (1024u * QCOW2_MAX_BITMAPS)
#define QCOW2_EXTL2_SUBCLUSTERS 32u
#define QCOW2_COMPRESSED_SECTOR_SIZE 512u

/* Header field offsets (version 2 ends at 72, version 3 at >= 104). */
enum {
    QCOW2_HDR_MAGIC = 0,
    QCOW2_HDR_VERSION = 4,
    QCOW2_HDR_BACKING_FILE_OFFSET = 8,
    QCOW2_HDR_BACKING_FILE_SIZE = 16,
    QCOW2_HDR_CLUSTER_BITS = 20,
    QCOW2_HDR_SIZE = 24,
    QCOW2_HDR_CRYPT_METHOD = 32,
    QCOW2_HDR_L1_SIZE = 36,
    QCOW2_HDR_L1_TABLE_OFFSET = 40,
    QCOW2_HDR_REFCOUNT_TABLE_OFFSET = 48,
    QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS = 56,
    QCOW2_HDR_NB_SNAPSHOTS = 60,
    QCOW2_HDR_SNAPSHOTS_OFFSET = 64,
    QCOW2_HDR_V2_LENGTH = 72,
    QCOW2_HDR_INCOMPATIBLE_FEATURES = 72,
    QCOW2_HDR_COMPATIBLE_FEATURES = 80,
    QCOW2_HDR_AUTOCLEAR_FEATURES = 88,
    QCOW2_HDR_REFCOUNT_ORDER = 96,
    QCOW2_HDR_HEADER_LENGTH = 100,
    QCOW2_HDR_V3_MIN_LENGTH = 104,
    QCOW2_HDR_COMPRESSION_TYPE = 104,
    QCOW2_HDR_V3_FULL_LENGTH = 112, /* compression type + padding */
};

/* Each field starts where the previous one ends (field-by-field decode). */
_Static_assert(QCOW2_HDR_VERSION == QCOW2_HDR_MAGIC + 4, "header layout");
_Static_assert(QCOW2_HDR_BACKING_FILE_OFFSET == QCOW2_HDR_VERSION + 4, "header layout");
_Static_assert(QCOW2_HDR_BACKING_FILE_SIZE == QCOW2_HDR_BACKING_FILE_OFFSET + 8,
               "header layout");
_Static_assert(QCOW2_HDR_CLUSTER_BITS == QCOW2_HDR_BACKING_FILE_SIZE + 4,
               "header layout");
_Static_assert(QCOW2_HDR_SIZE == QCOW2_HDR_CLUSTER_BITS + 4, "header layout");
_Static_assert(QCOW2_HDR_CRYPT_METHOD == QCOW2_HDR_SIZE + 8, "header layout");
_Static_assert(QCOW2_HDR_L1_SIZE == QCOW2_HDR_CRYPT_METHOD + 4, "header layout");
_Static_assert(QCOW2_HDR_L1_TABLE_OFFSET == QCOW2_HDR_L1_SIZE + 4, "header layout");
_Static_assert(QCOW2_HDR_REFCOUNT_TABLE_OFFSET == QCOW2_HDR_L1_TABLE_OFFSET + 8,
               "header layout");
_Static_assert(QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS == QCOW2_HDR_REFCOUNT_TABLE_OFFSET + 8,
               "header layout");
_Static_assert(QCOW2_HDR_NB_SNAPSHOTS == QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS + 4,
               "header layout");
_Static_assert(QCOW2_HDR_SNAPSHOTS_OFFSET == QCOW2_HDR_NB_SNAPSHOTS + 4, "header layout");
_Static_assert(QCOW2_HDR_V2_LENGTH == QCOW2_HDR_SNAPSHOTS_OFFSET + 8, "header layout");
_Static_assert(QCOW2_HDR_COMPATIBLE_FEATURES == QCOW2_HDR_INCOMPATIBLE_FEATURES + 8,
               "header layout");
_Static_assert(QCOW2_HDR_AUTOCLEAR_FEATURES == QCOW2_HDR_COMPATIBLE_FEATURES + 8,
               "header layout");
_Static_assert(QCOW2_HDR_REFCOUNT_ORDER == QCOW2_HDR_AUTOCLEAR_FEATURES + 8,
               "header layout");
_Static_assert(QCOW2_HDR_HEADER_LENGTH == QCOW2_HDR_REFCOUNT_ORDER + 4, "header layout");
_Static_assert(QCOW2_HDR_V3_MIN_LENGTH == QCOW2_HDR_HEADER_LENGTH + 4, "header layout");
_Static_assert(QCOW2_HDR_V3_FULL_LENGTH % 8 == 0, "header padding");

/* Header extension types. */
enum {
    QCOW2_EXT_END = 0x00000000u,
    QCOW2_EXT_BACKING_FORMAT = 0xe2792acau,
    QCOW2_EXT_FEATURE_TABLE = 0x6803f857u,
    QCOW2_EXT_CRYPTO_HEADER = 0x0537be77u,
    QCOW2_EXT_BITMAPS = 0x23852875u,
    QCOW2_EXT_DATA_FILE = 0x44415441u,
};
#define QCOW2_EXT_HEADER_SIZE 8          /* type + length */
#define QCOW2_FEATURE_NAME_ENTRY_SIZE 48 /* type, bit, 46-byte name */
#define QCOW2_FEATURE_NAME_LEN 46
#define QCOW2_BITMAPS_EXT_SIZE 24
#define QCOW2_CRYPTO_EXT_SIZE 16
#define QCOW2_MAX_BACKING_FORMAT_LEN 15 /* QEMU's backing_format[16] */

/* Feature bits (header fields 72..95). */
enum {
    QCOW2_INCOMPAT_DIRTY_BITNR = 0,
    QCOW2_INCOMPAT_CORRUPT_BITNR = 1,
    QCOW2_INCOMPAT_DATA_FILE_BITNR = 2,
    QCOW2_INCOMPAT_COMPRESSION_BITNR = 3,
    QCOW2_INCOMPAT_EXTL2_BITNR = 4,
    QCOW2_COMPAT_LAZY_REFCOUNTS_BITNR = 0,
    QCOW2_AUTOCLEAR_BITMAPS_BITNR = 0,
    QCOW2_AUTOCLEAR_DATA_FILE_RAW_BITNR = 1,
};
#define QCOW2_INCOMPAT_DIRTY (UINT64_C(1) << QCOW2_INCOMPAT_DIRTY_BITNR)
#define QCOW2_INCOMPAT_CORRUPT (UINT64_C(1) << QCOW2_INCOMPAT_CORRUPT_BITNR)
#define QCOW2_INCOMPAT_DATA_FILE (UINT64_C(1) << QCOW2_INCOMPAT_DATA_FILE_BITNR)
#define QCOW2_INCOMPAT_COMPRESSION (UINT64_C(1) << QCOW2_INCOMPAT_COMPRESSION_BITNR)
#define QCOW2_INCOMPAT_EXTL2 (UINT64_C(1) << QCOW2_INCOMPAT_EXTL2_BITNR)
#define QCOW2_INCOMPAT_KNOWN                                                             \
    (QCOW2_INCOMPAT_DIRTY | QCOW2_INCOMPAT_CORRUPT | QCOW2_INCOMPAT_DATA_FILE |          \
     QCOW2_INCOMPAT_COMPRESSION | QCOW2_INCOMPAT_EXTL2)
#define QCOW2_COMPAT_LAZY_REFCOUNTS (UINT64_C(1) << QCOW2_COMPAT_LAZY_REFCOUNTS_BITNR)
#define QCOW2_COMPAT_KNOWN QCOW2_COMPAT_LAZY_REFCOUNTS
#define QCOW2_AUTOCLEAR_BITMAPS (UINT64_C(1) << QCOW2_AUTOCLEAR_BITMAPS_BITNR)
#define QCOW2_AUTOCLEAR_DATA_FILE_RAW (UINT64_C(1) << QCOW2_AUTOCLEAR_DATA_FILE_RAW_BITNR)
#define QCOW2_AUTOCLEAR_KNOWN (QCOW2_AUTOCLEAR_BITMAPS | QCOW2_AUTOCLEAR_DATA_FILE_RAW)

enum {
    QCOW2_FEAT_TYPE_INCOMPATIBLE = 0,
    QCOW2_FEAT_TYPE_COMPATIBLE = 1,
    QCOW2_FEAT_TYPE_AUTOCLEAR = 2
};

enum { QCOW2_CRYPT_NONE = 0, QCOW2_CRYPT_AES = 1, QCOW2_CRYPT_LUKS = 2 };
enum { QCOW2_COMPRESSION_ZLIB = 0, QCOW2_COMPRESSION_ZSTD = 1 };

/* L1 / L2 / refcount table entries. */
#define QCOW2_L1E_OFFSET_MASK UINT64_C(0x00fffffffffffe00)
#define QCOW2_L1E_RESERVED_MASK UINT64_C(0x7f000000000001ff)
#define QCOW2_L2E_OFFSET_MASK UINT64_C(0x00fffffffffffe00)
#define QCOW2_L2E_STD_RESERVED_MASK UINT64_C(0x3f000000000001fe)
#define QCOW2_OFLAG_COPIED (UINT64_C(1) << 63)
#define QCOW2_OFLAG_COMPRESSED (UINT64_C(1) << 62)
#define QCOW2_OFLAG_ZERO UINT64_C(1)
#define QCOW2_REFT_OFFSET_MASK UINT64_C(0xfffffffffffffe00)
#define QCOW2_REFT_RESERVED_MASK UINT64_C(0x1ff)
#define QCOW2_SNAPSHOT_HEADER_SIZE 40
#define QCOW2_SNAPSHOT_EXTRA_KNOWN 24 /* vm_state_size_large, disk_size, icount */

/* ---- big-endian helpers (format.h invariant 1): block/endian.h ---- */

/* ---- checked arithmetic (format.h invariant 2): true on overflow ---- */

static inline bool qcow2_add(uint64_t a, uint64_t b, uint64_t *r)
{
    return __builtin_add_overflow(a, b, r);
}

static inline bool qcow2_mul(uint64_t a, uint64_t b, uint64_t *r)
{
    return __builtin_mul_overflow(a, b, r);
}

/* True if [offset, offset + len) fits below limit (no overflow). */
static inline bool qcow2_range_within(uint64_t offset, uint64_t len, uint64_t limit)
{
    uint64_t end;
    return !qcow2_add(offset, len, &end) && end <= limit;
}

/* ---- persistent dirty bitmaps (spec "Bitmaps extension", "Bitmap
 * directory", "Bitmap table"; coded only by bitmap-codec.c) ---- */

/* Bitmaps extension field offsets. */
enum {
    QCOW2_BMX_NB_BITMAPS = 0,
    QCOW2_BMX_RESERVED = 4,
    QCOW2_BMX_DIRECTORY_SIZE = 8,
    QCOW2_BMX_DIRECTORY_OFFSET = 16,
    QCOW2_BMX_END = 24,
};
_Static_assert(QCOW2_BMX_RESERVED == QCOW2_BMX_NB_BITMAPS + 4, "bitmaps extension");
_Static_assert(QCOW2_BMX_DIRECTORY_SIZE == QCOW2_BMX_RESERVED + 4, "bitmaps extension");
_Static_assert(QCOW2_BMX_DIRECTORY_OFFSET == QCOW2_BMX_DIRECTORY_SIZE + 8,
               "bitmaps extension");
_Static_assert(QCOW2_BMX_END == QCOW2_BMX_DIRECTORY_OFFSET + 8, "bitmaps extension");
_Static_assert(QCOW2_BMX_END == QCOW2_BITMAPS_EXT_SIZE, "bitmaps extension");

/* Bitmap directory entry field offsets: the header, then extra data, the
 * name and zero padding to a multiple of 8. */
enum {
    QCOW2_BME_TABLE_OFFSET = 0,
    QCOW2_BME_TABLE_SIZE = 8,
    QCOW2_BME_FLAGS = 12,
    QCOW2_BME_TYPE = 16,
    QCOW2_BME_GRANULARITY_BITS = 17,
    QCOW2_BME_NAME_SIZE = 18,
    QCOW2_BME_EXTRA_DATA_SIZE = 20,
    QCOW2_BME_EXTRA = 24, /* the extra data starts here */
};
#define QCOW2_BITMAP_ENTRY_HEADER_SIZE 24
_Static_assert(QCOW2_BME_TABLE_SIZE == QCOW2_BME_TABLE_OFFSET + 8, "bitmap entry");
_Static_assert(QCOW2_BME_FLAGS == QCOW2_BME_TABLE_SIZE + 4, "bitmap entry");
_Static_assert(QCOW2_BME_TYPE == QCOW2_BME_FLAGS + 4, "bitmap entry");
_Static_assert(QCOW2_BME_GRANULARITY_BITS == QCOW2_BME_TYPE + 1, "bitmap entry");
_Static_assert(QCOW2_BME_NAME_SIZE == QCOW2_BME_GRANULARITY_BITS + 1, "bitmap entry");
_Static_assert(QCOW2_BME_EXTRA_DATA_SIZE == QCOW2_BME_NAME_SIZE + 2, "bitmap entry");
_Static_assert(QCOW2_BME_EXTRA == QCOW2_BME_EXTRA_DATA_SIZE + 4, "bitmap entry");
_Static_assert(QCOW2_BME_EXTRA == QCOW2_BITMAP_ENTRY_HEADER_SIZE, "bitmap entry");
_Static_assert(QCOW2_BITMAP_ENTRY_HEADER_SIZE % 8 == 0, "bitmap entry alignment");

/* Directory entry flags. */
typedef enum Qcow2BitmapFlag {
    QCOW2_BITMAP_IN_USE = 1u << 0,
    QCOW2_BITMAP_AUTO = 1u << 1,
    QCOW2_BITMAP_EXTRA_DATA_COMPATIBLE = 1u << 2,
} Qcow2BitmapFlag;
#define QCOW2_BITMAP_FLAGS_KNOWN                                                         \
    (QCOW2_BITMAP_IN_USE | QCOW2_BITMAP_AUTO | QCOW2_BITMAP_EXTRA_DATA_COMPATIBLE)
/* What QEMU 7.2 accepts (its BME_RESERVED_FLAGS is the complement). */
#define QCOW2_BITMAP_FLAGS_QEMU (QCOW2_BITMAP_IN_USE | QCOW2_BITMAP_AUTO)

typedef enum Qcow2BitmapType {
    QCOW2_BITMAP_TYPE_DIRTY_TRACKING = 1,
} Qcow2BitmapType;

/* QEMU's limits (its BME_*). */
#define QCOW2_BITMAP_MIN_GRANULARITY_BITS 9u
#define QCOW2_BITMAP_MAX_GRANULARITY_BITS 31u
#define QCOW2_BITMAP_MAX_NAME_SIZE 1023u
#define QCOW2_BITMAP_MAX_TABLE_SIZE 0x8000000u /* entries */
#define QCOW2_BITMAP_MAX_PHYS_SIZE 0x20000000u /* table entries x cluster size */

/* Bitmap table entries. */
typedef enum Qcow2BitmapTableBits {
    QCOW2_BTE_ALL_ONES = 1u << 0, /* with offset 0: the cluster reads as ones */
} Qcow2BitmapTableBits;
#define QCOW2_BTE_OFFSET_MASK UINT64_C(0x00fffffffffffe00)
#define QCOW2_BTE_RESERVED_MASK UINT64_C(0xff000000000001fe)
#define QCOW2_BTE_KNOWN (QCOW2_BTE_OFFSET_MASK | QCOW2_BTE_ALL_ONES)
_Static_assert((QCOW2_BTE_KNOWN & QCOW2_BTE_RESERVED_MASK) == 0, "bitmap table entry");
_Static_assert((QCOW2_BTE_KNOWN | QCOW2_BTE_RESERVED_MASK) == UINT64_MAX,
               "bitmap table entry");

/* The bitmaps extension, decoded. */
typedef struct Qcow2BitmapsExt {
    uint32_t nb_bitmaps;
    uint64_t directory_size;
    uint64_t directory_offset;
} Qcow2BitmapsExt;

/* One bitmap directory entry, decoded. */
typedef struct Qcow2Bitmap {
    uint64_t table_offset;
    uint32_t table_size; /* entries */
    uint32_t flags;      /* Qcow2BitmapFlag bits (QCOW2_BITMAP_RAW: as on disk) */
    uint8_t type;        /* Qcow2BitmapType */
    uint8_t granularity_bits;
    uint16_t name_size;
    char *name; /* name_size bytes as on disk, then a NUL (not on disk) */
    uint32_t extra_data_size;
    uint8_t *extra_data; /* kept verbatim; NULL when there is none */
} Qcow2Bitmap;

/* ---- decoded header and extensions ---- */

typedef struct Qcow2Header {
    uint32_t magic;
    uint32_t version;
    uint64_t backing_file_offset;
    uint32_t backing_file_size;
    uint32_t cluster_bits;
    uint64_t size;
    uint32_t crypt_method;
    uint32_t l1_size;
    uint64_t l1_table_offset;
    uint64_t refcount_table_offset;
    uint32_t refcount_table_clusters;
    uint32_t nb_snapshots;
    uint64_t snapshots_offset;
    /* v3 (v2 images get the implied values: 0, 0, 0, 4, 72) */
    uint64_t incompatible_features;
    uint64_t compatible_features;
    uint64_t autoclear_features;
    uint32_t refcount_order;
    uint32_t header_length;
    uint8_t compression_type; /* 0 when header_length <= 104 */
} Qcow2Header;

typedef struct Qcow2FeatureName {
    uint8_t type; /* QCOW2_FEAT_TYPE_* */
    uint8_t bit;
    char name[QCOW2_FEATURE_NAME_LEN + 1];
} Qcow2FeatureName;

typedef struct Qcow2UnknownExt {
    uint32_t magic;
    uint32_t len;
    uint8_t *data;
} Qcow2UnknownExt;

typedef struct Qcow2Extensions {
    char *backing_format;       /* NULL if absent */
    char *data_file;            /* NULL if absent */
    Qcow2FeatureName *features; /* feature name table */
    size_t nb_features;
    bool has_bitmaps;        /* bitmaps extension present and consistent */
    Qcow2BitmapsExt bitmaps; /* bitmap-codec.c decoded it (all 0 if !has_bitmaps) */
    bool has_crypto;
    uint64_t crypto_offset;
    uint64_t crypto_length;
    GPtrArray *unknown; /* Qcow2UnknownExt *, in file order */
    uint64_t end;       /* offset just after the last extension read */
} Qcow2Extensions;

/* ---- snapshots ---- */

typedef struct Qcow2Snapshot {
    uint64_t l1_table_offset;
    uint32_t l1_size;
    char *id_str;
    char *name;
    uint32_t date_sec;
    uint32_t date_nsec;
    uint64_t vm_clock_nsec;
    uint64_t vm_state_size; /* from the large field when present */
    uint32_t extra_data_size;
    uint64_t disk_size;
    int64_t icount;
    uint8_t *unknown_extra; /* extra data beyond the known 24 bytes, kept */
    uint32_t unknown_extra_size;
} Qcow2Snapshot;

/* Snapshot table entry field offsets (spec "Snapshot table entry"; coded
 * only by snapshot-codec.c): the header, then the known extra data, then
 * any unknown extra data, the ID, the name and padding to 8 bytes. */
enum {
    QCOW2_SNE_L1_TABLE_OFFSET = 0,
    QCOW2_SNE_L1_SIZE = 8,
    QCOW2_SNE_ID_SIZE = 12,
    QCOW2_SNE_NAME_SIZE = 14,
    QCOW2_SNE_DATE_SEC = 16,
    QCOW2_SNE_DATE_NSEC = 20,
    QCOW2_SNE_VM_CLOCK_NSEC = 24,
    QCOW2_SNE_VM_STATE_SIZE = 32,
    QCOW2_SNE_EXTRA_DATA_SIZE = 36,
    QCOW2_SNE_EXTRA = 40, /* the extra data starts here */
    QCOW2_SNE_VM_STATE_SIZE_LARGE = 40,
    QCOW2_SNE_DISK_SIZE = 48,
    QCOW2_SNE_ICOUNT = 56,
    QCOW2_SNE_KNOWN_END = 64,
};

_Static_assert(QCOW2_SNE_L1_SIZE == QCOW2_SNE_L1_TABLE_OFFSET + 8, "snapshot entry");
_Static_assert(QCOW2_SNE_ID_SIZE == QCOW2_SNE_L1_SIZE + 4, "snapshot entry");
_Static_assert(QCOW2_SNE_NAME_SIZE == QCOW2_SNE_ID_SIZE + 2, "snapshot entry");
_Static_assert(QCOW2_SNE_DATE_SEC == QCOW2_SNE_NAME_SIZE + 2, "snapshot entry");
_Static_assert(QCOW2_SNE_DATE_NSEC == QCOW2_SNE_DATE_SEC + 4, "snapshot entry");
_Static_assert(QCOW2_SNE_VM_CLOCK_NSEC == QCOW2_SNE_DATE_NSEC + 4, "snapshot entry");
_Static_assert(QCOW2_SNE_VM_STATE_SIZE == QCOW2_SNE_VM_CLOCK_NSEC + 8, "snapshot entry");
_Static_assert(QCOW2_SNE_EXTRA_DATA_SIZE == QCOW2_SNE_VM_STATE_SIZE + 4,
               "snapshot entry");
_Static_assert(QCOW2_SNE_EXTRA == QCOW2_SNE_EXTRA_DATA_SIZE + 4, "snapshot entry");
_Static_assert(QCOW2_SNE_EXTRA == QCOW2_SNAPSHOT_HEADER_SIZE, "snapshot entry");
_Static_assert(QCOW2_SNE_DISK_SIZE == QCOW2_SNE_VM_STATE_SIZE_LARGE + 8,
               "snapshot entry");
_Static_assert(QCOW2_SNE_ICOUNT == QCOW2_SNE_DISK_SIZE + 8, "snapshot entry");
_Static_assert(QCOW2_SNE_KNOWN_END == QCOW2_SNE_ICOUNT + 8, "snapshot entry");
_Static_assert(QCOW2_SNE_KNOWN_END - QCOW2_SNE_EXTRA == QCOW2_SNAPSHOT_EXTRA_KNOWN,
               "snapshot entry");

/* ---- header.c ---- */

/* Decode and check the fixed header fields (bytes 0..103) from buf (len >=
 * 104, zero padded past the end of the file): magic, version, cluster
 * size, header length, backing file offset. */
int qcow2_header_decode(const uint8_t *buf, size_t len, Qcow2Header *h);
/* Everything QEMU checks from cluster 0 before reading tables: decode,
 * feature bits, table locations and limits, extensions, data file bits.
 * cluster0 holds the whole first cluster (len >= cluster size), zero padded.
 * check_mode relaxes what QEMU relaxes for qemu-img check.  crypt (NULL: no
 * secret, not metadata only) says whether an encrypted image may open
 * (header.c invariant 7). */
/* How an open treats an encrypted image (header.c invariant 7). */
typedef struct Qcow2CryptOpen {
    bool metadata_only;     /* read-only, no guest data (qemu-img info's open) */
    const char *key_secret; /* encrypt.key-secret given, NULL: none */
    bool secret_exists;     /* the caller has a secret of that id */
    bool key_from;          /* the key comes from an open node instead */
    bool key_secret_null;   /* encrypt.key-secret: null (BlkOpenOptions) */
    const char *format;     /* encrypt.format, NULL: none (BlkOpenOptions) */
    const char *unexpected; /* another encrypt.* key (BlkOpenOptions) */
} Qcow2CryptOpen;

int qcow2_header_parse(const uint8_t *cluster0, size_t len, uint64_t file_size,
                       bool read_write, bool check_mode, const Qcow2CryptOpen *crypt,
                       Qcow2Header *h, Qcow2Extensions *ext);
/* Parse the header extensions in cluster 0 (buf: the first cluster, zero
 * padded when the file is shorter). */
int qcow2_read_extensions(const uint8_t *cluster0, const Qcow2Header *h,
                          Qcow2Extensions *ext);
void qcow2_extensions_free(Qcow2Extensions *ext);
/* Validate the feature bits, using ext's feature name table for names. */
int qcow2_header_check_features(const Qcow2Header *h, const Qcow2Extensions *ext,
                                bool read_write, bool check_mode);
/* Validate the table locations (refcount table, snapshot table, L1) and the
 * virtual size against QEMU's limits and the file size. */
int qcow2_header_check_tables(const Qcow2Header *h, uint64_t file_size, bool check_mode);
/* Validate one L1-like table (name used in messages). */
int qcow2_validate_table(const char *name, uint64_t offset, uint64_t entries,
                         uint64_t entry_size, uint64_t max_bytes, uint32_t cluster_bits,
                         uint64_t file_size);
/* Encoding (header.c invariant 6).  Write h's fixed fields into buf (len >=
 * its header length: 72 for v2, h->header_length for v3); returns the
 * header length. */
size_t qcow2_header_encode(const Qcow2Header *h, uint8_t *buf, size_t len);
/* Append one extension (magic, len bytes of data padded to 8) at pos;
 * returns the bytes it took, 0 when it does not fit before buflen. */
size_t qcow2_header_ext_encode(uint8_t *buf, size_t pos, size_t buflen, uint32_t magic,
                               const void *data, size_t len);
/* Append the feature name table qemu-img writes; as qcow2_header_ext_encode. */
size_t qcow2_feature_table_encode(uint8_t *buf, size_t pos, size_t buflen);
/* Cluster 0 as QEMU lays it out (its qcow2_update_header): the header h,
 * then the extensions -- backing format (with a backing name), data file,
 * crypto, the feature table (v3, clusters over 4 KiB), bitmaps, ext's
 * unknown ones in file order, end -- then the backing file name (NULL:
 * none); sets h's backing fields.  buf[0..buflen) is zeroed first.
 * Returns the bytes used, 0 when it does not fit. */
size_t qcow2_header_cluster_encode(Qcow2Header *h, const Qcow2Extensions *ext,
                                   const char *backing, uint8_t *buf, size_t buflen);
/* Backing file name from cluster 0, or NULL (none / empty). */
int qcow2_read_backing_name(const uint8_t *cluster0, const Qcow2Header *h, char **name);
/* Number of L1 entries needed to map 'size' bytes; false on overflow. */
bool qcow2_size_to_l1(uint64_t size, uint32_t cluster_bits, uint32_t l2_bits,
                      uint64_t *entries);

/* ---- snapshot-codec.c: the snapshot table's one codec ---- */

/* Whose rules the decoder applies (snapshot-codec.c invariant 2). */
typedef enum Qcow2SnapshotPolicy {
    QCOW2_SNAPSHOT_OPEN,   /* opening the image: any excess is an error */
    QCOW2_SNAPSHOT_CHECK,  /* qemu-img check: the same, with the -r all hint */
    QCOW2_SNAPSHOT_REPAIR, /* check -r all: the excess is dropped and noted */
} Qcow2SnapshotPolicy;

typedef struct Qcow2SnapshotSource {
    /* len bytes of the file at offset, zeros past its end; 0 or -errno */
    int (*read)(void *opaque, uint64_t offset, void *buf, uint64_t len);
    /* QCOW2_SNAPSHOT_REPAIR: one line for the check's messages */
    void (*note)(void *opaque, const char *line);
    void *opaque;
} Qcow2SnapshotSource;

typedef struct Qcow2SnapshotTable {
    Qcow2Snapshot *sns; /* nb entries */
    uint32_t nb;
    uint64_t size;      /* from the table's start to the end of its last entry */
    uint32_t extra_cut; /* REPAIR: entries whose extra data was cut to 1 KiB */
    uint32_t dropped;   /* REPAIR: overhanging entries dropped */
} Qcow2SnapshotTable;

/* Decode the nb entries of the table at offset (nb <= QCOW2_MAX_SNAPSHOTS);
 * disk_size is the default for entries without one.  On failure nothing
 * is left in *t and the message is recorded (blk_error). */
int qcow2_snapshot_table_decode(const Qcow2SnapshotSource *src,
                                Qcow2SnapshotPolicy policy, uint64_t offset, uint32_t nb,
                                uint64_t disk_size, Qcow2SnapshotTable *t);
/* Bytes of sn's entry as encoded (without padding). */
uint64_t qcow2_snapshot_entry_size(const Qcow2Snapshot *sn);
/* Encode sn at buf (qcow2_snapshot_entry_size() bytes); returns that size. */
uint64_t qcow2_snapshot_entry_encode(const Qcow2Snapshot *sn, uint8_t *buf);
/* Size of sns[0..nb) encoded as a table (entries 8-byte aligned, the last
 * one not padded); false when it would pass the 64 MiB limit. */
bool qcow2_snapshot_table_size(const Qcow2Snapshot *sns, uint32_t nb, uint64_t *size);
/* Encode sns[0..nb) into buf (qcow2_snapshot_table_size() bytes). */
void qcow2_snapshot_table_encode(const Qcow2Snapshot *sns, uint32_t nb, uint8_t *buf);
/* Free what one entry owns (its strings and unknown extra data; the
 * pointers become NULL, the other fields stay). */
void qcow2_snapshot_clear(Qcow2Snapshot *sn);
/* Free nb entries and the array. */
void qcow2_snapshots_free(Qcow2Snapshot *sns, uint32_t nb);

#endif
