/*
 * qcow2/qcow2.h: the qcow2 driver's internal state, on-disk constants and
 * helpers shared by the qcow2/ files.
 *
 * Owns: the Qcow2State struct (one per open image), the decoded header and
 * extensions, on-disk layout constants, feature bits, big-endian load/store
 * helpers and checked arithmetic.
 *
 * Invariants (cited as "qcow2.h invariant N"):
 *  1. Every number read from the image is decoded with the load_be*()
 *     helpers into a host variable; no on-disk struct is ever overlaid.
 *  2. Every sum or product that involves a value from disk goes through
 *     qcow2_add()/qcow2_mul() (or is bounded by an earlier validation that
 *     the comment next to it names); an overflow is an error, never a wrap.
 *  3. Qcow2State.lock guards everything marked "[lock]" below.  Functions
 *     that must be called with it held end in _locked.  It is never held
 *     while guest data moves to or from a file.
 *  4. Fields marked "[open]" are set during open and never change after
 *     it, so they may be read without the lock.
 *  5. Tables are kept in memory in host byte order (L1, refcount table);
 *     cached L2 tables and refcount blocks are kept raw (big-endian), exactly
 *     as on disk, so the write path can write them back unchanged.
 *  6. No cache table reference (qcow2_cache_get_locked) is held while the
 *     lock is dropped: another thread may evict or reuse the entry.
 *  7. file_size only grows while the image is open: every cluster handed
 *     out by the allocator lies below it (alloc.c), so a table allocated
 *     past the end of the file passes the "inside the file" checks before
 *     it is written.
 */
#ifndef QIMG_QCOW2_H
#define QIMG_QCOW2_H

#include "block/block.h"
#include "qcow2/cache.h"

#include <glib.h>
#include <stdbool.h>
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
#define QCOW2_DEFAULT_L2_CACHE_MAX (32u * 1024 * 1024)
#define QCOW2_MIN_L2_CACHE_ENTRIES 2u
#define QCOW2_MIN_REFCOUNT_CACHE_ENTRIES 4u

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

/* ---- big-endian helpers (qcow2.h invariant 1) ---- */

static inline uint16_t load_be16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return GUINT16_FROM_BE(v);
}

static inline uint32_t load_be32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return GUINT32_FROM_BE(v);
}

static inline uint64_t load_be64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return GUINT64_FROM_BE(v);
}

static inline void store_be16(void *p, uint16_t v)
{
    v = GUINT16_TO_BE(v);
    memcpy(p, &v, sizeof(v));
}

static inline void store_be32(void *p, uint32_t v)
{
    v = GUINT32_TO_BE(v);
    memcpy(p, &v, sizeof(v));
}

static inline void store_be64(void *p, uint64_t v)
{
    v = GUINT64_TO_BE(v);
    memcpy(p, &v, sizeof(v));
}

/* ---- checked arithmetic (qcow2.h invariant 2): true on overflow ---- */

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
    bool has_bitmaps; /* bitmaps extension, kept, not interpreted */
    uint32_t nb_bitmaps;
    uint64_t bitmap_directory_size;
    uint64_t bitmap_directory_offset;
    uint8_t bitmaps_raw[QCOW2_BITMAPS_EXT_SIZE];
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

/* ---- mapping ---- */

typedef enum Qcow2SubclusterType {
    QCOW2_SC_NORMAL,            /* data in the (data) file at host offset */
    QCOW2_SC_COMPRESSED,        /* whole cluster compressed */
    QCOW2_SC_ZERO_PLAIN,        /* reads as zeros, no host cluster */
    QCOW2_SC_ZERO_ALLOC,        /* reads as zeros, host cluster preallocated */
    QCOW2_SC_UNALLOCATED_PLAIN, /* backing file (or zeros), no host cluster */
    QCOW2_SC_UNALLOCATED_ALLOC, /* backing file, host cluster allocated (ext L2) */
} Qcow2SubclusterType;

typedef struct Qcow2Mapping {
    Qcow2SubclusterType type;
    /* NORMAL, ZERO_ALLOC, UNALLOCATED_ALLOC: host offset of the guest offset;
     * COMPRESSED: the raw L2 entry; otherwise 0. */
    uint64_t host_offset;
    uint64_t bytes; /* > 0: how far from the guest offset this holds */
} Qcow2Mapping;

/* ---- the driver state ---- */

/* A request in flight over guest range [start, end) (cluster aligned); see
 * write.c invariant 6. */
typedef struct Qcow2Inflight {
    uint64_t start, end;
    bool write;
    struct Qcow2Inflight *prev, *next;
} Qcow2Inflight;

typedef struct Qcow2State {
    GMutex lock;             /* qcow2.h invariant 3; take it with qcow2_lock() */
    GCond inflight_cond;     /* signalled when a request leaves the list */
    Qcow2Inflight *inflight; /* [lock] requests in flight */
    BlkNode *img;

    Qcow2Header header;             /* [open] as decoded */
    Qcow2Extensions ext;            /* [open] */
    uint8_t *unknown_header_fields; /* [open] bytes 112..header_length, kept */
    size_t unknown_header_fields_size;

    /* [open] geometry */
    uint32_t cluster_bits;
    uint64_t cluster_size;
    uint32_t l2_bits;       /* log2(entries per L2 table) */
    uint64_t l2_size;       /* entries per L2 table */
    uint32_t l2_entry_size; /* 8, or 16 with extended L2 entries */
    bool extended_l2;
    uint32_t subclusters_per_cluster;
    uint32_t subcluster_bits;
    uint32_t csize_shift;
    uint64_t csize_mask;
    uint64_t cluster_offset_mask; /* compressed host offset bits */
    uint32_t refcount_order;
    uint32_t refcount_bits;
    uint32_t refcount_block_bits; /* log2(entries per refcount block) */
    uint64_t refcount_max;
    uint32_t qcow_version;
    uint8_t compression_type;
    uint64_t incompatible_features; /* [lock] (write path updates them) */
    uint64_t compatible_features;
    uint64_t autoclear_features;
    uint64_t l1_vm_state_index;
    uint64_t file_size; /* [lock] size of img->file, raised by allocations
                         * (qcow2.h invariant 7) */

    /* [lock] L1 in host order: the active one, or the snapshot's in a view */
    uint64_t *l1_table;
    uint32_t l1_size;
    uint64_t l1_table_offset;

    /* [lock] refcount table in host order */
    uint64_t *refcount_table;
    uint64_t refcount_table_size; /* entries */
    uint64_t refcount_table_offset;

    /* [open] snapshot table */
    Qcow2Snapshot *snapshots;
    uint32_t nb_snapshots;
    uint64_t snapshots_offset;
    uint64_t snapshots_size;
    int snapshot_view; /* index of the snapshot served read-only, or -1 */

    Qcow2Cache *l2_cache;       /* [lock] */
    Qcow2Cache *refcount_cache; /* [lock] */

    BlkNode *data_file; /* [open] external data file node (owned), or NULL */
    bool data_file_raw;

    /* [lock] metadata preallocation detection for block status */
    bool prealloc_checked;
    bool metadata_preallocated;

    unsigned corruption_events; /* [lock] */

    /* [lock] write path (alloc.c, meta.c) */
    uint64_t free_cluster_index; /* allocation search hint (cluster index) */
    uint64_t free_byte_offset;   /* compressed packing: next free byte, or 0 */
    bool corrupt_fatal;          /* corrupt bit set while open: writes refused */
    bool bitmaps_in_use;         /* meta.c invariant 8 done */
    int deferred_error;          /* an I/O error met while freeing (meta.c inv. 7) */
    char *deferred_msg;
    GArray *pending_frees; /* RefRange: decreases waiting for a durable unlink
                            * (alloc.c invariant 2) */
    bool defer_hooks;      /* refcount block entries wait (alloc.c invariant 3) */
    GArray *pending_hooks; /* their (index, offset), until settled */
    int sticky_error;      /* a metadata write or flush failed (meta.c inv. 9) */
    char *sticky_msg;
    /* write generations of the image file after the last write of each
     * kind of metadata (for the ordering assertions, meta.c invariant 10) */
    uint64_t refblock_gen; /* refcount blocks (update or new) */
    uint64_t l2_gen;       /* L2 tables written back */
    uint64_t table_gen;    /* new L2, L1, refcount or snapshot tables */
    bool writable;         /* [open] read-write, not a snapshot view */
} Qcow2State;

/* A host byte range (refcount updates). */
typedef struct Qcow2Range {
    uint64_t off, len;
} Qcow2Range;

/*
 * The metadata lock.  glib builds GMutex/GCond on raw futexes, which
 * ThreadSanitizer cannot see, so under TSan these wrappers tell it where the
 * lock is taken and dropped (as aio/pool.c does); otherwise they are plain
 * calls.  The write path always uses them.
 */
#if defined(__SANITIZE_THREAD__)
#define QCOW2_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QCOW2_TSAN 1
#endif
#endif
#ifdef QCOW2_TSAN
#include <sanitizer/tsan_interface.h>
#endif

static inline void qcow2_lock(Qcow2State *s)
{
#ifdef QCOW2_TSAN
    __tsan_mutex_pre_lock(&s->lock, 0);
#endif
    g_mutex_lock(&s->lock);
#ifdef QCOW2_TSAN
    __tsan_mutex_post_lock(&s->lock, 0, 0);
#endif
}

static inline void qcow2_unlock(Qcow2State *s)
{
#ifdef QCOW2_TSAN
    __tsan_mutex_pre_unlock(&s->lock, 0);
#endif
    g_mutex_unlock(&s->lock);
#ifdef QCOW2_TSAN
    __tsan_mutex_post_unlock(&s->lock, 0);
#endif
}

/* Wait for inflight_cond; drops and retakes the lock. */
static inline void qcow2_wait_locked(Qcow2State *s)
{
#ifdef QCOW2_TSAN
    __tsan_mutex_pre_unlock(&s->lock, 0);
    __tsan_mutex_post_unlock(&s->lock, 0);
#endif
    g_cond_wait(&s->inflight_cond, &s->lock);
#ifdef QCOW2_TSAN
    __tsan_mutex_pre_lock(&s->lock, 0);
    __tsan_mutex_post_lock(&s->lock, 0, 0);
#endif
}

static inline uint64_t qcow2_offset_into_cluster(const Qcow2State *s, uint64_t offset)
{
    return offset & (s->cluster_size - 1);
}

static inline bool qcow2_has_data_file(const Qcow2State *s)
{
    return s->data_file != NULL;
}

/* The node guest data lives in: the external data file or the image file. */
static inline BlkNode *qcow2_data_node(const Qcow2State *s)
{
    return s->data_file ? s->data_file : s->img->file;
}

/*
 * Record a corruption found in metadata (style rule 3): remembers where it
 * was found, counts it and returns -EIO.  On a read-only image (or a
 * snapshot view) the message is "Image is corrupt: ..."; on a writable one
 * the event is fatal, as in QEMU: the corrupt bit (incompatible bit 1) is
 * written to the header, every later write fails with -EIO, and the message
 * is "qcow2: Marking image as corrupt: ...; further corruption events will
 * be suppressed" (meta.c invariant 3).
 */
int qcow2_signal_corruption_locked(Qcow2State *s, const char *file, int line,
                                   const char *fmt, ...) G_GNUC_PRINTF(4, 5);
#define qcow2_corrupt_locked(s, ...)                                                     \
    qcow2_signal_corruption_locked((s), __FILE__, __LINE__, __VA_ARGS__)

/* ---- header.c ---- */

/* Decode and check the fixed header fields (bytes 0..103) from buf (len >=
 * 104, zero padded past the end of the file): magic, version, cluster
 * size, header length, backing file offset. */
int qcow2_header_decode(const uint8_t *buf, size_t len, Qcow2Header *h);
/* Everything QEMU checks from cluster 0 before reading tables: decode,
 * feature bits, table locations and limits, extensions, data file bits.
 * cluster0 holds the whole first cluster (len >= cluster size), zero padded.
 * check_mode relaxes what QEMU relaxes for qemu-img check. */
int qcow2_header_parse(const uint8_t *cluster0, size_t len, uint64_t file_size,
                       bool read_write, bool check_mode, Qcow2Header *h,
                       Qcow2Extensions *ext);
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
/* Backing file name from cluster 0, or NULL (none / empty). */
int qcow2_read_backing_name(const uint8_t *cluster0, const Qcow2Header *h, char **name);
/* Number of L1 entries needed to map 'size' bytes; false on overflow. */
bool qcow2_size_to_l1(uint64_t size, uint32_t cluster_bits, uint32_t l2_bits,
                      uint64_t *entries);

/* ---- cluster.c ---- */

int qcow2_get_host_offset_locked(Qcow2State *s, uint64_t offset, uint64_t bytes,
                                 Qcow2Mapping *m);
/* Validate the L1 entry at l1_index (< l1_size) and return its L2 table
 * offset, 0 when unallocated (cluster.c invariant 1). */
int qcow2_l1_entry_locked(Qcow2State *s, uint64_t l1_index, uint64_t *l2_offset);
/* Validate one L2 entry (cluster.c invariant 1) and return the type of its
 * subcluster sc and how many subclusters from sc on share that type; a bad
 * entry is reported as a corruption naming l2_offset / l2_index. */
/* The same check without reporting: true if the entry is valid (and then
 * *type is the type of subcluster 0). */
bool qcow2_l2_entry_valid(const Qcow2State *s, uint64_t entry, uint64_t bitmap,
                          uint64_t guest_cluster, Qcow2SubclusterType *type);
int qcow2_l2_entry_type_locked(Qcow2State *s, uint64_t entry, uint64_t bitmap,
                               unsigned sc, uint64_t l2_offset, uint64_t l2_index,
                               uint64_t guest_cluster, Qcow2SubclusterType *type,
                               unsigned *count);
/* Load a table of 'count' 64-bit big-endian entries into host order. */
int qcow2_read_table(BlkNode *file, uint64_t offset, uint64_t count, uint64_t **out);
int qcow2_l2_cache_init(Qcow2State *s, uint64_t l2_bytes);

/* ---- compress.c ---- */

void qcow2_parse_compressed_entry(const Qcow2State *s, uint64_t l2_entry,
                                  uint64_t *coffset, uint64_t *csize);
int qcow2_decompress(int compression_type, void *dest, size_t dest_size, const void *src,
                     size_t src_size);

/* ---- refcount.c ---- */

int qcow2_refcount_init(Qcow2State *s, uint64_t refcount_cache_bytes);
void qcow2_refcount_close(Qcow2State *s);
int qcow2_get_refcount_locked(Qcow2State *s, uint64_t cluster_index, uint64_t *refcount);
uint64_t qcow2_refblock_get(const void *block, uint64_t index, uint32_t refcount_order);
/* Store value (<= refcount_max) as entry index of a raw refcount block. */
void qcow2_refblock_set(void *block, uint64_t index, uint32_t refcount_order,
                        uint64_t value);
/* The validated offset of the refcount block for reftable index
 * table_index, or 0 when there is none (refcount.c invariants 2, 3). */
int qcow2_refblock_offset_locked(Qcow2State *s, uint64_t table_index,
                                 uint64_t *block_offset);
int qcow2_detect_metadata_preallocation_locked(Qcow2State *s);
/* The index of the last cluster below 'clusters' with a refcount, or -EIO
 * (a corruption) when there is none (QEMU's qcow2_get_last_cluster). */
int64_t qcow2_last_used_cluster_locked(Qcow2State *s, uint64_t clusters);

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

/* ---- snapshot.c ---- */

int qcow2_read_snapshots(Qcow2State *s, bool check_mode);
void qcow2_free_snapshots(Qcow2State *s);
int qcow2_find_snapshot(const Qcow2State *s, const char *id, const char *name);
int qcow2_snapshot_load_view(Qcow2State *s, const char *id_or_name);

/* ---- read.c ---- */

int qcow2_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags);
int qcow2_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st);

/* ================= write path ================= */

/* ---- meta.c: metadata writes, overlap checks, corrupt and dirty bits ---- */

/* Metadata kinds for the overlap check (QEMU's "cached" template). */
enum {
    QCOW2_OL_MAIN_HEADER = 1u << 0,
    QCOW2_OL_ACTIVE_L1 = 1u << 1,
    QCOW2_OL_ACTIVE_L2 = 1u << 2,
    QCOW2_OL_REFCOUNT_TABLE = 1u << 3,
    QCOW2_OL_REFCOUNT_BLOCK = 1u << 4,
    QCOW2_OL_SNAPSHOT_TABLE = 1u << 5,
    QCOW2_OL_INACTIVE_L1 = 1u << 6,
    QCOW2_OL_BITMAP_DIRECTORY = 1u << 7,
    QCOW2_OL_ALL = (1u << 8) - 1,
};

/* The first kind of metadata (not in ign) that [offset, offset + size),
 * widened to whole clusters, overlaps; 0 if none. */
unsigned qcow2_check_metadata_overlap_locked(Qcow2State *s, unsigned ign, uint64_t offset,
                                             uint64_t size);
/* 0, or -EIO after marking the image corrupt ("Preventing invalid write on
 * metadata (overlaps with ...)") when the write would overlap metadata. */
int qcow2_pre_write_overlap_check_locked(Qcow2State *s, unsigned ign, uint64_t offset,
                                         uint64_t size);
/* -EIO once the image was marked corrupt while open (writes refused). */
int qcow2_check_writable_locked(Qcow2State *s);
/* The same before a guest data write, zero, discard or compressed write:
 * also marks persistent bitmaps in use (meta.c invariant 8). */
int qcow2_check_data_writable_locked(Qcow2State *s);
/* Overlap check (ign: the kind being written), announce ev on the image
 * file, write, and flush the file if sync. */
int qcow2_write_metadata_locked(Qcow2State *s, BlkEvent ev, unsigned ign, uint64_t offset,
                                const void *buf, size_t len, bool sync);
/* One synced write of header bytes [offset, offset + len) (meta.c inv. 4). */
int qcow2_write_header_locked(Qcow2State *s, BlkEvent ev, uint64_t offset,
                              const void *buf, size_t len);
/* The same; *written tells whether the new bytes reached the file (then
 * only the flush failed, if anything: meta.c invariant 4). */
int qcow2_write_header_ex_locked(Qcow2State *s, BlkEvent ev, uint64_t offset,
                                 const void *buf, size_t len, bool *written);
/* Set and clear incompatible feature bits; written (synced) on v3 images. */
int qcow2_update_incompat_locked(Qcow2State *s, uint64_t set, uint64_t clear);
/* Lazy refcounts: set the dirty bit before the first allocation (no-op
 * without lazy_refcounts or when already set). */
int qcow2_mark_dirty_locked(Qcow2State *s);
/* Write both caches, flush the file, then clear the dirty bit. */
int qcow2_mark_clean_locked(Qcow2State *s);
/* False while the dirty bit is set (lazy refcounts in use). */
bool qcow2_need_accurate_refcounts(const Qcow2State *s);
/* Write dirty L2 tables (refcount blocks first where they depend on them),
 * then dirty refcount blocks unless the image is dirty and !all.  Does not
 * flush the file. */
int qcow2_write_caches_locked(Qcow2State *s, bool all);
/* Flush the image file and the data file. */
int qcow2_flush_file(Qcow2State *s);
/* Cache write-back hooks (cache.c ops). */
int qcow2_l2_cache_write(void *opaque, uint64_t offset, const void *buf, size_t len);
int qcow2_refblock_cache_write(void *opaque, uint64_t offset, const void *buf,
                               size_t len);
int qcow2_cache_flush_file(void *opaque);
/* L2 entries reference guest data: durable on the data node. */
bool qcow2_l2_cache_is_durable(void *opaque, uint64_t gen);
/* Debug-build check of an ordering rule where a dependent write is issued:
 * everything written to node up to generation gen is durable (block.h
 * invariant 4).  'rule' names the invariant for the failure message. */
static inline void qcow2_assert_durable(BlkNode *node, uint64_t gen, const char *rule)
{
#ifndef NDEBUG
    if (!blk_is_durable(node, gen)) {
        g_error("write ordering broken (%s): generation %" G_GUINT64_FORMAT
                " of '%s' is not durable (flushed %" G_GUINT64_FORMAT ")",
                rule, gen, node->filename, blk_flushed_gen(node));
    }
#else
    (void)node, (void)gen, (void)rule;
#endif
}
/* The refcount blocks written so far are durable and none is dirty: what a
 * table that references newly allocated clusters needs (alloc.c inv. 1). */
void qcow2_assert_refcounts_durable_locked(Qcow2State *s, const char *rule);
/* meta.c invariant 9: remember that a metadata write or a flush failed
 * (ret < 0); returns ret. */
int qcow2_set_sticky_locked(Qcow2State *s, int ret);
/* Write the caches, flush, then apply the pending frees and make them
 * durable too (alloc.c invariant 2): a flush that leaves nothing behind. */
int qcow2_flush_all_locked(Qcow2State *s);
/* Read-write open: clear unknown autoclear bits on disk (DESIGN rule 5). */
int qcow2_open_rw_locked(Qcow2State *s);
/* Remember an I/O error met while freeing clusters (the request that freed
 * them succeeded): the next request to finish reports it (meta.c inv. 7). */
void qcow2_defer_error_locked(Qcow2State *s, int ret, const char *msg);
/* End of a guest request: bounds the pending frees (alloc.c invariant 2);
 * returns ret (deferred errors go to the next flush, meta.c invariant 7). */
int qcow2_finish_request_locked(Qcow2State *s, int ret);
/* End of a flush or of a metadata operation (snapshot, resize): the
 * deferred error if any (with its message: it came first), else ret. */
int qcow2_take_deferred_error_locked(Qcow2State *s, int ret);

/* ---- alloc.c: cluster allocation and refcount updates ---- */

/* Allocate n (>= 1) contiguous clusters with refcount 1, creating refcount
 * blocks and growing the refcount table as needed.  Returns the host offset
 * (cluster aligned) or -errno.  Callers refuse offset 0 (corruption). */
int64_t qcow2_alloc_clusters_locked(Qcow2State *s, uint64_t n);
/* Same, searching from host offset 'from' on if that is past the free
 * index (which then moves past the run as well). */
int64_t qcow2_alloc_clusters_from_locked(Qcow2State *s, uint64_t from, uint64_t n);
/* Allocate exactly the n clusters at 'offset' if all are free: 0, -EAGAIN
 * if one is in use, or -errno. */
int qcow2_alloc_clusters_at_locked(Qcow2State *s, uint64_t offset, uint64_t n);
/* QEMU's refcount area (alloc.c invariant 3): at host offset 'offset'
 * (cluster aligned, free, nothing in use after it) refcount blocks for
 * everything up to 'additional' more clusters past them and a new refcount
 * table of exactly the size needed, switched to; the old table is freed.
 * Returns the host offset just past the new structures, or -errno. */
int64_t qcow2_refcount_area_locked(Qcow2State *s, uint64_t offset, uint64_t additional);
/* Allocate 'size' (1..cluster_size) bytes for compressed data, packed after
 * the previous compressed allocation when the refcount allows it.  Every
 * cluster the bytes touch gets one more reference. */
int64_t qcow2_alloc_bytes_locked(Qcow2State *s, uint64_t size);
/* Add (or subtract, decrease) addend to the refcount of every cluster
 * touched by [offset, offset + length).  Fails with -EINVAL and changes
 * nothing on overflow or underflow (alloc.c invariant 4). */
int qcow2_update_refcount_locked(Qcow2State *s, uint64_t offset, uint64_t length,
                                 uint64_t addend, bool decrease);
/* Drop one reference from each cluster of [offset, offset + length) now.
 * Only for references that are gone on disk already (the write that
 * unlinked them was synced) or never reached it (rollback of a fresh
 * allocation).  Failures are reported and ignored (a leak, never a
 * corruption). */
void qcow2_free_clusters_locked(Qcow2State *s, uint64_t offset, uint64_t length);
/* The same for a reference dropped in a cached table that is not yet on
 * disk: the decrease waits until the table is durable (alloc.c inv. 2). */
void qcow2_free_clusters_deferred_locked(Qcow2State *s, uint64_t offset, uint64_t length);
/* Drop the reference an L2 entry holds: a host cluster (normal, or
 * zero/unallocated with a preallocated cluster) or a compressed byte range.
 * Nothing for external data files.  deferred: the entry was replaced in a
 * cached L2 table (alloc.c invariant 2); else the entry was never linked. */
void qcow2_free_l2_entry_locked(Qcow2State *s, uint64_t l2_entry, bool deferred);
/* alloc.c invariant 3: from now on new refcount blocks wait in the cache
 * with their reftable entries in memory only, until ... */
void qcow2_defer_refblocks_locked(Qcow2State *s);
/* ... this writes the blocks, flushes, and writes the entries (in rounds,
 * flushed); nothing may reference what they count before.  Call it before
 * the lock is dropped or anything else is written. */
int qcow2_settle_refblocks_locked(Qcow2State *s);
/* Apply the pending decreases; the caller made every table that dropped
 * them durable (L2 cache written, file flushed). */
void qcow2_apply_pending_frees_locked(Qcow2State *s);
/* Pending decreases before a request forces a barrier (alloc.c inv. 2). */
#define QCOW2_MAX_PENDING_FREES 4096u

/* ---- l2.c: L1 and L2 table updates ---- */

static inline uint64_t qcow2_l2_get(const Qcow2State *s, const uint8_t *l2, uint64_t i)
{
    return load_be64(l2 + i * s->l2_entry_size);
}

static inline uint64_t qcow2_l2_get_bitmap(const Qcow2State *s, const uint8_t *l2,
                                           uint64_t i)
{
    return s->extended_l2 ? load_be64(l2 + i * s->l2_entry_size + 8) : 0;
}

static inline void qcow2_l2_set(const Qcow2State *s, uint8_t *l2, uint64_t i,
                                uint64_t entry, uint64_t bitmap)
{
    store_be64(l2 + i * s->l2_entry_size, entry);
    if (s->extended_l2) {
        store_be64(l2 + i * s->l2_entry_size + 8, bitmap);
    }
}

#define QCOW2_L2_BITMAP_ALL_ALLOC UINT64_C(0x00000000ffffffff)
#define QCOW2_L2_BITMAP_ALL_ZERO UINT64_C(0xffffffff00000000)

/* The L2 table mapping guest 'offset', ready to be modified: allocated
 * (zeroed) if missing, copied if shared (L1 entry without COPIED), the L1
 * grown if too small.  *l2 is a cache reference (put it); *l2_index the
 * entry of offset. */
int qcow2_get_l2_for_write_locked(Qcow2State *s, uint64_t offset, uint8_t **l2,
                                  uint64_t *l2_index);
/* The L2 table mapping 'offset' if there is one (*l2 = NULL if not). */
int qcow2_get_l2_locked(Qcow2State *s, uint64_t offset, uint8_t **l2, uint64_t *l2_index);
/* Grow the active L1 to at least min_size entries (x1.5 steps unless
 * exact): new table written, header switched, old table freed. */
int qcow2_grow_l1_table_locked(Qcow2State *s, uint64_t min_size, bool exact);
/* A new L2 table for an unallocated L1 entry: its cluster (allocated) and
 * its contents (one cluster, entries set). */
typedef struct Qcow2NewL2 {
    uint64_t l1_index;
    uint64_t offset;
    uint8_t *table;
} Qcow2NewL2;
/* Link t[0..n) (l2.c invariant 6); the clusters their entries name need
 * their data durable up to write generation data_gen of the data node.
 * *linked: the L1 names them now (then only a flush may have failed);
 * otherwise nothing does and the caller frees them. */
int qcow2_link_new_l2_tables_locked(Qcow2State *s, const Qcow2NewL2 *t, size_t n,
                                    uint64_t data_gen, bool *linked);
/* Write the 512-byte part of the active L1 that holds entry l1_index, synced. */
int qcow2_write_l1_entry_locked(Qcow2State *s, uint64_t l1_index);
/* Clear L1 entries from new_size on (synced) and free their L2 tables (the
 * L1 keeps its size, as QEMU's shrink does). */
int qcow2_shrink_l1_table_locked(Qcow2State *s, uint64_t new_size);

/* ---- write.c: guest writes ---- */

int qcow2_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags);
/* Write qiov at guest offset (any offset, also the vmstate area: no size
 * check).  The caller registered the range (qcow2_inflight_begin_locked)
 * and does not hold the lock. */
int qcow2_write_registered(Qcow2State *s, uint64_t offset, const BlkIOV *qiov);
/* Wait until no conflicting request covers [offset, offset + bytes), then
 * register r over it (write.c invariant 6).  Lock held (may wait on it). */
void qcow2_inflight_begin_locked(Qcow2State *s, Qcow2Inflight *r, uint64_t offset,
                                 uint64_t bytes, bool write);
void qcow2_inflight_end_locked(Qcow2State *s, Qcow2Inflight *r);

/* ---- read.c ---- */

/* Read guest [offset, offset + qiov->size) of this layer (no size check, no
 * range registration: the caller holds a registration covering it, or the
 * image is read-only).  Lock not held. */
int qcow2_read_guest(Qcow2State *s, uint64_t offset, const BlkIOV *qiov);
/* qcow2_read_guest() registered against overlapping allocating writes
 * (read.c invariant 6) when the image is writable. */
int qcow2_read_registered(Qcow2State *s, uint64_t offset, const BlkIOV *qiov);

/* ---- zero.c: write zeroes and discard ---- */

int qcow2_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes, unsigned flags);
int qcow2_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes);
/* Internal zero flag: create no L2 table for a range that already reads as
 * zeros without one (resize). */
#define QCOW2_ZERO_IF_NEEDED (1u << 16)
/* Make [offset, offset + bytes) read as zeros (registered, lock not held):
 * zero flags (v3), unallocation (v2 without backing), else zero writes. */
int qcow2_zero_registered(Qcow2State *s, uint64_t offset, uint64_t bytes, unsigned flags);
/* QEMU's qcow2_cluster_discard on whole clusters [offset, offset + bytes)
 * (registered, lock not held).  full: entries become unallocated (the
 * backing file shows through); otherwise the range reads as zeros on v3
 * and, on v2, only without a backing file. */
int qcow2_discard_registered(Qcow2State *s, uint64_t offset, uint64_t bytes, bool full);

/* ---- compress.c (write side) ---- */

/* Compress src into dest; the compressed size, or -ENOSPC when it does not
 * fit in dest_size bytes. */
int64_t qcow2_compress(int compression_type, void *dest, size_t dest_size,
                       const void *src, size_t src_size);
int qcow2_pwrite_compressed(BlkNode *img, uint64_t offset, const BlkIOV *qiov);

/* ---- resize.c: resize and the vmstate area ---- */

int qcow2_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                   bool shrink);
/* prealloc.c: preallocate guest [offset, end) of a grown disk with mode
 * (resize.c invariant 3; OFF: nothing).  Lock not held. */
int qcow2_preallocate(Qcow2State *s, uint64_t offset, uint64_t end, BlkPrealloc mode);
/* Grow the external data file to size if it is shorter (lock not held). */
int qcow2_grow_data_file(Qcow2State *s, uint64_t size);
/* Guest offset where the vmstate area of the active L1 starts. */
uint64_t qcow2_vm_state_offset(const Qcow2State *s);
/* create.c */
int qcow2_create(const char *filename, const BlkCreateOptions *opts);
/* snapshot-write.c */
int qcow2_snapshot_create(BlkNode *img, BlkSnapshotInfo *sn);
int qcow2_snapshot_goto(BlkNode *img, const char *id_or_name);
int qcow2_snapshot_delete(BlkNode *img, const char *id_or_name);
GArray *qcow2_snapshot_list(BlkNode *img);
/*
 * Write sns[0..nb) as the new snapshot table and switch the header to it
 * (snapshot-write.c R3; also repair.c's rewrite).  *written: the header
 * names the new table (then the caller's memory must follow even if
 * ret < 0: only the flush failed, and the old table is kept as a leak).
 * On !*written the new clusters are freed again.
 */
int qcow2_snapshot_table_write_locked(Qcow2State *s, Qcow2Snapshot *sns, uint32_t nb,
                                      bool *written);
/* Append a BlkSnapshotInfo for each snapshot to list (lock held). */
void qcow2_snapshot_list_append_locked(Qcow2State *s, GArray *list);

int qcow2_save_vmstate(BlkNode *img, uint64_t pos, const BlkIOV *qiov);
int qcow2_load_vmstate(BlkNode *img, uint64_t pos, const BlkIOV *qiov);

/* ---- qcow2.c ---- */

/* The driver, for the driver table (api/ registers it). */
extern const BlkDriver blk_qcow2_driver;
/* Open img (drv, file and filename set) read-write as the new image whose
 * cluster 0 (one cluster at cluster0) is not written yet (qcow2.c
 * invariant 9); data_file: its external data file node or NULL, taken (also
 * on failure).  Close with blk_close(). */
int qcow2_open_new(BlkNode *img, const uint8_t *cluster0, BlkNode *data_file);
int qcow2_flush(BlkNode *img);

#endif
