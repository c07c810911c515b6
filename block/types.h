/*
 * block/types.h: the value types every layer below the public API shares --
 * cache modes, preallocation modes, open and create options, image and
 * snapshot information, check results.
 *
 * Owns: nothing but definitions.  The public API (include/qimg/) has its own
 * types of the same meaning; api/ converts between the two, field by field,
 * so the public structs can grow (or be reordered) without touching the
 * drivers, and no layer below api/ includes a public header (README,
 * "layers").
 *
 * Invariants:
 *  1. The enums' values equal the public ones (api/convert.c checks it
 *     with _Static_assert), so a conversion is a checked cast.
 *  2. Strings in these structs are borrowed unless the field says "owned".
 */
#ifndef QIMG_BLOCK_TYPES_H
#define QIMG_BLOCK_TYPES_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum BlkCacheMode {
    BLK_CACHE_WRITEBACK = 0, /* page cache; flush = fdatasync */
    BLK_CACHE_WRITETHROUGH,  /* page cache; each write durable (O_DSYNC) */
    BLK_CACHE_NONE,          /* O_DIRECT; flush = fdatasync */
    BLK_CACHE_DIRECTSYNC,    /* O_DIRECT and O_DSYNC */
    BLK_CACHE_UNSAFE,        /* page cache; flush does nothing */
} BlkCacheMode;

typedef enum BlkPrealloc {
    BLK_PREALLOC_OFF = 0,
    BLK_PREALLOC_METADATA,
    BLK_PREALLOC_FALLOC,
    BLK_PREALLOC_FULL,
} BlkPrealloc;

/* How a node is opened (the api/ open sequence fills it). */
/* vpc's force_size_calc: QEMU's choice (by the creator application), or
 * the CHS geometry, or the footer's current_size. */
typedef enum BlkVpcSizeCalc {
    BLK_VPC_SIZE_AUTO = 0,
    BLK_VPC_SIZE_CHS,
    BLK_VPC_SIZE_CURRENT,
} BlkVpcSizeCalc;

typedef struct BlkOpenOptions {
    const char *format; /* driver name, or NULL to probe */
    bool read_only;
    BlkCacheMode cache;
    bool no_backing;              /* do not open the backing chain */
    uint64_t metadata_cache_size; /* bytes; 0 = driver default */
    bool force_share;             /* take no locks that keep others out */
    bool no_locking;              /* file.locking=off: no image locks at all */
    bool no_io;                   /* metadata only (qemu-img info's locks) */
    bool resize;                  /* take the resize permission at open */
    bool deny_write;              /* keep other writers out (convert source) */
    bool share_write;             /* let another writer in (a commit's base) */
    bool backing_share_write;     /* share_write for the backing chain */
    bool check_mode;              /* corrupt images open read-write (check -r) */
    bool copy_on_read;            /* reads copy into the top image (block/cor.c) */
    const char *snapshot;         /* read-only view of this snapshot */
    /* The encrypt.key-secret (qcow2) or key-secret (luks) from a
     * json:/--image-opts name (interned), and the caller's secrets (open
     * time only, may be NULL): id -> GBytes when secret_values, else ids
     * alone (an older caller's table: crypto/secret.c invariant 2) */
    const char *key_secret;
    /* key_secret was a JSON null (json-opts.c invariant 4): no key, but
     * named as QEMU names it, and refused by an encrypted qcow2 image
     * (qcow2 header.c invariant 7) */
    bool key_secret_null;
    /* qcow2's other encrypt.* options (qcow2 header.c invariant 7): the
     * encrypt.format given (interned; NULL: none or a JSON null), and the
     * first other encrypt.* key, without its "encrypt." (interned; a JSON
     * null counts: QEMU hands it to the crypto layer, which refuses it) */
    const char *encrypt_format, *encrypt_unexpected;
    /* QEMU's raw options offset and size (raw/raw.c invariant 6): the
     * window of the file the raw format shows (raw_size_set: a size was
     * given), and their JSON text as QEMU names the node (interned; NULL:
     * not given; "null" for a JSON null) */
    uint64_t raw_offset, raw_size;
    bool raw_size_set;
    /* QEMU's vpc option force_size_calc (vpc/codec.c invariant 2): how
     * the virtual size is read from the footer */
    BlkVpcSizeCalc vpc_size_calc;
    const char *raw_offset_text, *raw_size_text;
    GHashTable *secrets;
    bool secret_values;
    /* An open node of the same image whose key this open takes instead of
     * unlocking one (a snapshot view of an encrypted image, api/) */
    const struct BlkNode *key_from;
    /* PBKDF2 iterations a LUKS header may ask for; 0: the default
     * (crypto/luks.h CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS) */
    uint32_t luks_max_iterations;
    bool backing_name; /* the name was read from an image (block.h
                        * invariant 5: a plain file only) */
    bool ova_sibling;  /* the name is one block/ova.c built for a member of
                        * the archive the image is in (ova.c invariant 4):
                        * opened through the ova protocol */
    bool reopen;       /* a second open of an open layer (QEMU's
                        * reopen): a dirty repair prints nothing */
    /* Layers the caller's options name instead of the image's (json-name.c
     * invariant 5; the caller keeps the strings until the open returns):
     * the backing file's path and options, the external data file's path
     * (relative to the working directory). */
    const char *backing_path;
    const struct BlkOpenOptions *backing_opts;
    const char *data_file_path;
    /* The null-co/null-aio node's options (null_*) when data_file_path
     * names one (json-name.c invariant 16), else NULL. */
    const struct BlkOpenOptions *data_file_opts;
    /* qcow2's runtime options from a caller's json:/--image-opts name or
     * options (json-name.c): cache-size is metadata_cache_size (given even
     * when 0: metadata_cache_size_set), l2-cache-size, refcount-cache-size
     * and l2-cache-entry-size (each with its _set), and lazy-refcounts (0:
     * as the image's header says, 1 on, -1 off). */
    bool metadata_cache_size_set;
    bool l2_cache_size_set, refcount_cache_size_set, l2_cache_entry_size_set;
    uint64_t l2_cache_size, refcount_cache_size, l2_cache_entry_size;
    int lazy_refcounts;
    /* qcow2's pass-discard-request, -snapshot, -other (0: the default, 1
     * on, -1 off; qcow2 alloc.c invariant 9) */
    int pass_discard_request, pass_discard_snapshot, pass_discard_other;
    const char *nbd_context;      /* NBD meta context (x-dirty-bitmap), or NULL */
    uint64_t nbd_reconnect_delay; /* NBD reconnect-delay, seconds (0: none) */
    /* An ssh node's host key check from json's host-key-check.* options
     * (interned; QEMU's legacy form, block/ssh.h invariant 2), or NULL */
    const char *ssh_host_key_check;
    /* An ssh node's port from json's options (interned digits), which the
     * node's URI cannot carry when it is 0 (a URI's ":0" is port 22 to
     * QEMU, json's 0 is port 0), or NULL */
    const char *ssh_port;
    /* A null-co/null-aio node's options (block/null.c): size (when
     * null_size_set; else 1 GiB), read-zeroes, latency-ns */
    bool null_size_set, null_read_zeroes;
    uint64_t null_size, null_latency_ns;
    /* qcow2's overlap-check: the template's kinds (overlap_set: given;
     * else QEMU's "cached"), then the overlap-check.KIND switches on and
     * off (bits of qcow2.h's QCOW2_OL_*) */
    bool overlap_set;
    const char *overlap_template; /* its name (interned) */
    uint32_t overlap_kinds, overlap_on, overlap_off;
    /* The caller's options for a format still to be probed (key -> value,
     * borrowed; a NULL value is a JSON null, checked but not applied):
     * checked and applied once the format is known (json-opts.c
     * invariants 3, 4); NULL: none. */
    GHashTable *format_opts;
    /* The key-secrets of the image's own backing chain, from
     * backing.encrypt.key-secret, backing.backing.encrypt.key-secret, ...
     * (json-name.c invariant 10): n_backing_keys entries, the first for
     * the backing file, "" for a layer without one. */
    const char *const *backing_keys;
    size_t n_backing_keys;
    /* Open no file the image names for its data (VMDK extents, a qcow2
     * data file): their names are reported, reads of them fail
     * (qemu-img info's metadata-only open, names.c). */
    bool no_data_files;
    /* The image's own file names (extents, parents, backing and data
     * files) may point anywhere (names.c invariant 1 does not apply). */
    bool trust_names;
    /* An RBD image the caller's json:/--image-opts name gives by its
     * fields (json-name.c invariant 11): block/rbd.c opens this location
     * for the "rbd:" name the caller passes with it; the caller keeps it
     * until the open returns. */
    const struct BlkRbdLocation *rbd;
    /* QEMU's blkdebug "align" of the caller's blkdebug node (json-name.c
     * invariant 13): a power of two its requests are padded to
     * (its alignment limit, block/limits.c); 0: none.  Only the node the caller names
     * takes it. */
    uint64_t blkdebug_align;
    /* qcow2's cache-clean-interval in seconds, when _set (else QEMU's
     * default, qcow2/clean.c); checked by the driver ("too big") */
    bool cache_clean_interval_set;
    uint64_t cache_clean_interval;
} BlkOpenOptions;

/* qemu-img create: "options" are -o key=value pairs (char* -> char*). */
typedef struct BlkCreateOptions {
    const char *format;
    uint64_t size;
    bool size_set;
    const char *backing_file;
    const char *backing_format;
    GHashTable *options;          /* may be NULL */
    GHashTable *secrets;          /* the caller's secret objects, may be NULL ... */
    bool secret_values;           /* ... id -> GBytes, else ids alone */
    uint32_t luks_max_iterations; /* as BlkOpenOptions' */
} BlkCreateOptions;

/* qemu-img measure: what the source of a copy holds (BlkDriver.measure). */
typedef struct BlkMeasureSource {
    uint64_t size; /* virtual size */
    /* Bytes of the clusters of cluster_size that hold data not reading as
     * zeros, through the whole chain; 0 or -errno (message recorded). */
    int (*data_bytes)(void *opaque, uint64_t cluster_size, uint64_t *bytes);
    /* What the source's persistent bitmaps take in an image of
     * cluster_size; -ENOTSUP when the source cannot have any. */
    int (*bitmaps_bytes)(void *opaque, uint64_t cluster_size, uint64_t *bytes);
    void *opaque;
} BlkMeasureSource;

typedef struct BlkMeasure {
    uint64_t required;
    uint64_t fully_allocated;
    bool has_bitmaps;
    uint64_t bitmaps;
} BlkMeasure;

/* One internal snapshot (strings owned). */
typedef struct BlkSnapshotInfo {
    char *id;
    char *name;
    uint64_t vm_state_size;
    uint64_t date_sec;
    uint32_t date_nsec;
    uint64_t vm_clock_nsec;
    int64_t icount; /* -1: none */
    uint64_t disk_size;
    uint32_t l1_size;
    uint64_t l1_offset;
} BlkSnapshotInfo;

/* What a driver tells about an image (strings owned). */
/* An encrypted image's encryption as qemu-img info shows it (the LUKS
 * header as crypto/luks-codec.c decodes it). */
typedef struct BlkLuksSlot {
    bool active;
    uint32_t iters;
    uint64_t key_offset; /* bytes */
    uint32_t stripes;
} BlkLuksSlot;

#define BLK_LUKS_SLOTS 8

typedef struct BlkEncryptInfo {
    bool luks;               /* false: QEMU's old "aes" method, nothing more to show */
    char cipher_alg[24];     /* "aes-256", ... */
    const char *cipher_mode; /* static strings: "xts", ... */
    const char *ivgen_alg;
    const char *ivgen_hash_alg; /* NULL: none */
    const char *hash_alg;
    char uuid[41];
    uint64_t payload_offset; /* bytes */
    uint32_t master_key_iters;
    BlkLuksSlot slots[BLK_LUKS_SLOTS];
} BlkEncryptInfo;

/* One extent of a VMDK image, as qemu-img info lists it. */
typedef struct BlkVmdkExtentInfo {
    char *filename;        /* owned: the path it is (or would be) opened by */
    char *format;          /* owned: the descriptor's type, "" for a monolithic one */
    uint64_t virtual_size; /* bytes */
    uint32_t cluster_size; /* grain bytes; 0 for a flat or unopened extent */
    bool compressed;
    bool opened; /* false: a metadata-only open (BlkOpenOptions.no_data_files) */
} BlkVmdkExtentInfo;

void blk_vmdk_extent_info_clear(void *extent_info);

typedef struct BlkVmdkInfo {
    bool present;
    uint32_t cid;
    uint32_t parent_cid;
    char *create_type; /* owned */
    GArray *extents;   /* BlkVmdkExtentInfo */
} BlkVmdkInfo;

/* One disk of an OVA archive, as info lists it (api/ova.c). */
typedef struct BlkOvaDiskInfo {
    char *id, *file, *capacity, *capacity_units, *format, *compression; /* owned */
    uint64_t offset, size, capacity_bytes;
    bool capacity_known;
} BlkOvaDiskInfo;

typedef struct BlkOvaInfo {
    bool present;
    char *descriptor; /* owned */
    GArray *disks;    /* BlkOvaDiskInfo */
} BlkOvaInfo;

typedef struct BlkInfo {
    uint32_t cluster_size;
    bool dirty;
    bool encrypted;
    GArray *snapshots; /* BlkSnapshotInfo, or NULL */
    bool format_specific;
    char *compat;
    char *compression_type;
    bool lazy_refcounts;
    uint32_t refcount_bits;
    bool corrupt;
    bool extended_l2;
    char *data_file;
    bool has_data_file; /* the external data file bit, named or not */
    bool data_file_raw;
    GArray *bitmaps;              /* BlkBitmapInfo (persistent dirty bitmaps), or NULL */
    BlkEncryptInfo encrypt;       /* when encrypted */
    BlkVmdkInfo vmdk;             /* vmdk's format-specific data */
    BlkOvaInfo ova;               /* an OVA archive's disks */
    bool needs_compressed_writes; /* only compressed clusters (streamOptimized) */
} BlkInfo;

typedef struct BlkBitmapInfo {
    char *name;
    uint32_t granularity;
    bool in_use;  /* not to be trusted: QEMU's "in-use" */
    bool enabled; /* records writes: QEMU's "auto" */
} BlkBitmapInfo;

void blk_bitmap_info_clear(void *bitmap_info);

typedef enum BlkBitmapOp {
    BLK_BITMAP_ADD,
    BLK_BITMAP_REMOVE,
    BLK_BITMAP_CLEAR,
    BLK_BITMAP_ENABLE,
    BLK_BITMAP_DISABLE,
} BlkBitmapOp;

/* A range of guest bytes (a bitmap's dirty extent). */
typedef struct BlkRange {
    uint64_t offset;
    uint64_t length;
} BlkRange;

/* qemu-img amend's request to a format driver (api/amend.c). */
typedef struct BlkAmendOptions {
    GHashTable *options; /* key -> value as -o names them (values normalised:
                          * booleans "on"/"off", numbers and sizes decimal) */
    bool force;          /* qemu-img amend --force */
    GHashTable *secrets; /* the caller's secrets (encrypt.new-secret ...) */
    bool secret_values;  /* as BlkOpenOptions' */
    /* Called now and then with work done out of the total, or NULL. */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
} BlkAmendOptions;

void blk_info_clear(BlkInfo *info);
void blk_snapshot_info_clear(BlkSnapshotInfo *sn);
/* Free a GArray of BlkSnapshotInfo with its strings (NULL is fine). */
void blk_snapshot_list_free(GArray *list);
/* QEMU's rule for "ID or name" (bdrv_snapshot_find): the first entry whose
 * ID matches, else the first whose name matches; the index or -1. */
int blk_snapshot_lookup(unsigned n, const char *(*id_of)(const void *opaque, unsigned i),
                        const char *(*name_of)(const void *opaque, unsigned i),
                        const void *opaque, const char *id_or_name);
/* The same over a GArray of BlkSnapshotInfo. */
int blk_snapshot_find(const GArray *list, const char *id_or_name);

enum {
    BLK_CHECK_FIX_LEAKS = 1 << 0,
    BLK_CHECK_FIX_ERRORS = 1 << 1,
};

/* qemu-img check's counters (ImageCheck) and findings. */
typedef struct BlkCheckResult {
    int64_t corruptions;
    int64_t leaks;
    int64_t check_errors;
    int64_t corruptions_fixed;
    int64_t leaks_fixed;
    int64_t image_end_offset; /* 0: unknown */
    int64_t total_clusters;
    int64_t allocated_clusters;
    int64_t fragmented_clusters;
    int64_t compressed_clusters;
    bool unsupported;    /* the format cannot be checked */
    GPtrArray *messages; /* char*, owned */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
} BlkCheckResult;

void blk_check_result_clear(BlkCheckResult *res);

/* "off", "metadata", "falloc", "full"; -EINVAL with a message otherwise. */
int blk_prealloc_parse(const char *s, BlkPrealloc *out);
/* The name blk_prealloc_parse takes for p. */
const char *blk_prealloc_name(BlkPrealloc p);
/* QEMU's sizes (qemu_strtosz): a decimal integer with an optional
 * fraction and one suffix b/k/M/G/T/P/E (powers of 1024, either case), or
 * a hex integer "0x..." (*hex_suffix: it had a suffix, which QEMU warns
 * about).  0, -EINVAL (malformed) or -ERANGE (2^64 or more). */
int blk_strtosz(const char *s, uint64_t *out, bool *hex_suffix);
/* Is name one of QEMU 7.2's block driver names (what qemu-img accepts as a
 * backing format)? */
bool blk_qemu_driver_name(const char *name);

#endif
