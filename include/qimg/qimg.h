/*
 * libqimg public API: image handles, I/O, block status, info.
 *
 * Everything an embedder needs to open, create, read, write and inspect
 * disk images (qcow2, raw).  Every call that can fail takes a GError **
 * in the QIMG_ERROR domain; the error code is an errno value and the
 * message names the file and the problem.
 *
 * Images are locked as QEMU locks them (OFD byte-range locks on the image,
 * backing and data files), so qimg, QEMU and qemu-img see each other: an
 * open that another process's permissions exclude fails with code EAGAIN
 * and QEMU's message ("Failed to get \"write\" lock" and "Is another
 * process using the image [F]?").  The locks are held until the close.
 *
 * Thread safety: one QimgImage may be used from several threads at once
 * for I/O (pread/pwrite/zeroes/discard/flush/block_status).  Open, close,
 * truncate and snapshot operations must not race with other calls on the
 * same handle.
 *
 * ABI (libqimg.so.0, symbol versions QIMG_0.2, QIMG_0.3 (qimg/aio.h), QIMG_0.4
 * (qimg/copy.h), QIMG_0.5 (qimg_image_has_zero_init), QIMG_0.6, QIMG_0.7
 * (qimg_image_amend), QIMG_0.8 (qimg_image_debug_*), QIMG_0.9 (encrypted
 * images: qimg_secret_new, the secret_values fields), QIMG_0.12
 * (qimg_image_verify_verdict); libqimg.map):
 *  1. Every struct the caller fills in and passes (QimgOpenOptions,
 *     QimgCreateOptions, QimgSnapshotParams, QimgVmstateOptions,
 *     QimgCheckResult, QimgAioOptions, QimgCopyOptions, QimgAmendOptions)
 *     begins with
 *     `uint32_t struct_size`, which the QIMG_*_INIT initialisers set to the
 *     sizeof the caller was built with.  The library reads only the bytes
 *     struct_size covers and gives every field past them its default, so a
 *     program built against an older header keeps working; bytes past what
 *     the library knows must be zero (a newer program asking for something
 *     this library cannot do is refused with EINVAL, never ignored).
 *     struct_size 0 is refused.  Results written into such a struct stay
 *     within struct_size.
 *  2. A zero field means the default, in every version (for example
 *     QimgSnapshotParams: icount off unless has_icount).
 *  3. Structs the library allocates (QimgInfo, QimgSnapshotInfo) only grow
 *     at their end, and lists of them are pointer arrays (GPtrArray), so
 *     new fields never move old ones.  QimgExtent's layout is frozen.
 *  4. New functions get a new version node; a symbol's meaning never
 *     changes within its node.
 */
#ifndef QIMG_QIMG_H
#define QIMG_QIMG_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

G_BEGIN_DECLS

#define QIMG_ERROR (qimg_error_quark())

/* The version of the library in use ("0.3.0"), as opposed to the header's
 * QIMG_VERSION_STRING. */
const char *qimg_version(void);
#define QIMG_VERSION_STRING "0.8.0"
GQuark qimg_error_quark(void);

typedef struct QimgImage QimgImage;

/* qemu-img's cache modes (-t / -T). */
typedef enum QimgCacheMode {
    QIMG_CACHE_WRITEBACK = 0, /* page cache; flush = fdatasync; flushed at close */
    QIMG_CACHE_WRITETHROUGH,  /* page cache; each write durable before it returns */
    QIMG_CACHE_NONE,          /* O_DIRECT; flush = fdatasync */
    QIMG_CACHE_DIRECTSYNC,    /* O_DIRECT and each write durable */
    QIMG_CACHE_UNSAFE,        /* page cache; flush does nothing */
} QimgCacheMode;

/* Parse "writeback", "writethrough", "none", "off", "directsync", "unsafe". */
gboolean qimg_cache_mode_parse(const char *s, QimgCacheMode *mode, GError **error);
const char *qimg_cache_mode_name(QimgCacheMode mode);

typedef struct QimgOpenOptions {
    uint32_t struct_size; /* sizeof(QimgOpenOptions): QIMG_OPEN_OPTIONS_INIT */
    const char *format;   /* "qcow2", "raw" or NULL to probe */
    bool read_only;
    QimgCacheMode cache;
    bool no_backing;              /* do not open the backing chain */
    uint64_t metadata_cache_size; /* bytes; 0 = driver default */
    bool force_share;             /* qemu-img -U: take no lock that keeps others
                                   * from writing (read-only opens only) */
    bool check_mode;              /* open for check/repair: corrupt images open r/w */
    const char *snapshot;         /* read-only view of this internal snapshot
                                   * (ID or name), as qemu-img convert -l */
    bool no_io;      /* read-only: metadata only, no guest data read (qemu-img info);
                      * takes fewer locks and opens no external data file (safe
                      * on an untrusted image) */
    bool resize;     /* the image will be resized (qemu-img resize): take the resize
                      * permission at open */
    bool deny_write; /* nobody else may write or resize any file of the image
                      * while it is open (qemu-img convert's source) */
    /* The backing files let one other writer in (qimg commit writes the base
     * through a second handle); the caller reads nothing of a backing file
     * that is being written through this chain (0.6). */
    bool backing_shared_write;
    /* filename is not a name but qemu-img --image-opts' options
     * ("driver=qcow2,file.filename=PATH,..."), read as a "json:{...}" name
     * is (0.7) */
    bool image_opts;
    /* 0.8: the ids (keys) of the caller's secret objects, may be NULL: what
     * a name's encrypt.key-secret may refer to.  The values are not read:
     * a 0.8 caller's table can only say that a secret exists, so an
     * encrypted image opened for its data with one is refused (give
     * secret_values instead). */
    GHashTable *secrets;
    /* filename was read from an image (a backing file name, as qemu-img
     * info --backing-chain follows them): it opens a plain file only, never
     * a test node or another protocol, and a "json:{...}" name is read as
     * QEMU reads a backing file's (0.8) */
    bool backing_name;
    /* 0.9: QEMU's block options given beside filename (qemu-io's open -o):
     * "key=value,..." (",," a comma), as an --image-opts name's; they win
     * over a "json:{...}" filename's own, and filename may be NULL (the
     * options name the file).  NULL: none. */
    const char *options;
    /* 0.9: the caller's secret objects with their values, may be NULL:
     * id (char *) -> GBytes (the secret's bytes, as qemu-img's --object
     * secret gives them; qimg_secret_new() keeps them in locked memory).
     * The encrypt.key-secret (qcow2) or key-secret (luks) of a
     * json:/--image-opts name names one: its bytes, which must be UTF-8,
     * are the passphrase that unlocks a LUKS image (the key of an old AES
     * one).  When set, secrets is not read.  The library copies what it
     * needs and keeps nothing after the open. */
    GHashTable *secret_values;
    /* 0.9: the most PBKDF2 iterations a LUKS key slot or master key digest
     * may ask for before qimg spends time on them (a hostile header can ask
     * for hours); 0: 100 million (crypto/luks.h) */
    uint32_t luks_max_iterations;
    /* 0.9: the id in secret_values of the encrypted image's key, as the
     * encrypt.key-secret (qcow2) or key-secret (luks) option of a
     * json:/--image-opts name gives it (which wins when both are given);
     * NULL: none (an encrypted image then opens only for its metadata,
     * with no_io) */
    const char *key_secret;
    /* 0.9: open no file the image names for its data -- a VMDK's extents,
     * a qcow2 external data file -- as qemu-img info needs none: their
     * names are in the info, reading them fails */
    bool no_data_files;
    /* 0.9: trust the file names the image records (VMDK extents and
     * parents): without it, a name that is absolute, has a ".." component,
     * names a protocol ("json:", "nbd:"...), leads outside the image's
     * folder or names something other than a regular file is refused before
     * anything is opened (CVE-2022-47951) */
    bool trust_names;
    /* 0.10: copy-on-read (qemu-io -C): what a read finds in the backing
     * chain, or zeros the image does not hold itself, is written into the
     * image, whole clusters at a time, as QEMU does; refused with a
     * read-only open ("Can't use copy-on-read on read-only device") */
    bool copy_on_read;
} QimgOpenOptions;

#define QIMG_OPEN_OPTIONS_INIT                                                           \
    {                                                                                    \
        .struct_size = sizeof(QimgOpenOptions)                                           \
    }

/* filename: a path (a "file:" prefix is the file protocol), QEMU's
 * "json:{...}" name (driver, file.filename, file.driver "file", backing
 * null, read-only, cache.direct/no-flush, qcow2's cache-size and
 * l2-cache-size, and a backing or data-file object naming the file opened
 * instead of the image's own (0.7); anything else refused), or an NBD export (nbd://,
 * nbd+unix://, nbds://, or qemu-img's nbd:unix:PATH /
 * nbd:HOST:PORT[:exportname=NAME]) where qimg was built with libnbd, or a Ceph
 * RBD image (rbd:pool/[namespace/]image[@snap][:key=value...], or json:
 * fields pool, namespace, image, snapshot, conf, user) where qimg was built
 * with librbd. */
QimgImage *qimg_image_open(const char *filename, const QimgOpenOptions *opts,
                           GError **error);
/* Open a layer of top's backing chain (qimg_image_backing()) a second
 * time, with opts (read-write for qimg commit's base; the chain must have
 * been opened with backing_shared_write), through the same protocol
 * layers as top's own file (0.6).  An encrypted layer is opened with the
 * key it was opened with, unless opts names another (0.9; its value comes
 * from opts' secret_values). */
QimgImage *qimg_image_open_layer(QimgImage *top, QimgImage *layer,
                                 const QimgOpenOptions *opts, GError **error);
/* Open the backing file of img (opened with or without its chain) by
 * itself, with opts, resolving its name as opening img's chain does: a
 * parent a disk inside an OVA names is a member of the same archive, a
 * name refused by img's rules (QimgInfo.backing_refused) is refused, and a
 * name read from an image never selects a protocol on its own.  opts'
 * format is ignored (img's backing format, or probing); qimg info
 * --backing-chain opens each layer this way (0.10). */
QimgImage *qimg_image_open_backing(QimgImage *img, const QimgOpenOptions *opts,
                                   GError **error);
/* Flushes (unless read-only) and closes; returns FALSE if the final flush
 * failed (the handle is freed either way). */
gboolean qimg_image_close(QimgImage *img, GError **error);
void qimg_image_free(QimgImage *img); /* close, ignoring errors */
G_DEFINE_AUTOPTR_CLEANUP_FUNC(QimgImage, qimg_image_free)

typedef enum QimgPrealloc {
    QIMG_PREALLOC_OFF = 0,
    QIMG_PREALLOC_METADATA,
    QIMG_PREALLOC_FALLOC,
    QIMG_PREALLOC_FULL,
} QimgPrealloc;

gboolean qimg_prealloc_parse(const char *s, QimgPrealloc *out, GError **error);

/*
 * Creation options.  "options" holds qemu-img's -o key=value pairs
 * (compat, cluster_size, refcount_bits, lazy_refcounts, compression_type,
 * extended_l2, preallocation, data_file, data_file_raw, backing_file,
 * backing_fmt, size); the explicit fields override them when set.
 */
typedef struct QimgCreateOptions {
    uint32_t struct_size; /* sizeof(QimgCreateOptions): QIMG_CREATE_OPTIONS_INIT */
    const char *format;   /* "qcow2" or "raw" (required) */
    uint64_t size;        /* virtual size in bytes */
    bool size_set;
    const char *backing_file;
    const char *backing_format;
    GHashTable *options; /* char* -> char*, may be NULL */
    /* 0.8: the ids (keys) of the caller's secret objects, may be NULL (as
     * QimgOpenOptions.secrets: ids alone cannot key a new image). */
    GHashTable *secrets;
    /* 0.9: the caller's secrets with their values (as
     * QimgOpenOptions.secret_values): encrypt.key-secret (qcow2,
     * encrypt.format=luks) or key-secret (luks) names the passphrase of
     * the new image's key slot 0.  When set, secrets is not read. */
    GHashTable *secret_values;
    /* 0.9: as QimgOpenOptions.luks_max_iterations (a new image never gets
     * more iterations than it allows) */
    uint32_t luks_max_iterations;
} QimgCreateOptions;

#define QIMG_CREATE_OPTIONS_INIT                                                         \
    {                                                                                    \
        .struct_size = sizeof(QimgCreateOptions)                                         \
    }

gboolean qimg_image_create(const char *filename, const QimgCreateOptions *opts,
                           GError **error);

/*
 * qemu-img measure: the file size a new image of opts->format made with
 * opts->options needs -- for opts->size (src NULL) or to hold src's
 * contents through its backing chain.  "required" is what the copy needs,
 * "fully_allocated" what a fully allocated image takes; bitmaps is set
 * (has_bitmaps) when both src and the target can hold persistent bitmaps.
 * out->struct_size must be set (QIMG_MEASURE_INIT) (0.6).
 */
typedef struct QimgMeasure {
    uint32_t struct_size;
    uint64_t required;
    uint64_t fully_allocated;
    bool has_bitmaps;
    uint64_t bitmaps;
} QimgMeasure;

#define QIMG_MEASURE_INIT                                                                \
    {                                                                                    \
        .struct_size = sizeof(QimgMeasure)                                               \
    }

gboolean qimg_measure(const QimgCreateOptions *opts, QimgImage *src, QimgMeasure *out,
                      GError **error);

/* I/O.  Offsets and lengths are in bytes; no alignment is required. */
gboolean qimg_image_pread(QimgImage *img, uint64_t offset, void *buf, size_t len,
                          GError **error);
gboolean qimg_image_pwrite(QimgImage *img, uint64_t offset, const void *buf, size_t len,
                           GError **error);
gboolean qimg_image_preadv(QimgImage *img, uint64_t offset, const struct iovec *iov,
                           int iovcnt, GError **error);
gboolean qimg_image_pwritev(QimgImage *img, uint64_t offset, const struct iovec *iov,
                            int iovcnt, GError **error);

typedef enum QimgZeroFlags {
    QIMG_ZERO_MAY_UNMAP = 1 << 0,   /* the range may be deallocated */
    QIMG_ZERO_NO_FALLBACK = 1 << 1, /* fail with ENOTSUP rather than write zeros */
} QimgZeroFlags;

gboolean qimg_image_pwrite_zeroes(QimgImage *img, uint64_t offset, uint64_t len,
                                  unsigned flags, GError **error);
gboolean qimg_image_pdiscard(QimgImage *img, uint64_t offset, uint64_t len,
                             GError **error);
gboolean qimg_image_flush(QimgImage *img, GError **error);
gboolean qimg_image_truncate(QimgImage *img, uint64_t size, bool shrink,
                             QimgPrealloc prealloc, GError **error);
/* Write a compressed cluster (qcow2 only); offset/len must be one whole
 * cluster (len may be shorter at the end of the image). */
gboolean qimg_image_pwrite_compressed(QimgImage *img, uint64_t offset, const void *buf,
                                      size_t len, GError **error);

uint64_t qimg_image_size(QimgImage *img);
/* Does the image read as zeros wherever nothing was written to it since it
 * was created (QEMU's bdrv_has_zero_init)?  FALSE for a block device, an
 * image with a backing file, a preallocated qcow2 on a block device or a
 * raw external data file: a copy into it must write its zeros (0.5). */
gboolean qimg_image_has_zero_init(QimgImage *img);
const char *qimg_image_filename(QimgImage *img);
const char *qimg_image_format(QimgImage *img);
/* The format was probed: neither the caller nor the image's name (a json:
 * name's driver, --image-opts, options) named it (0.9). */
gboolean qimg_image_format_probed(QimgImage *img);
QimgImage *qimg_image_backing(QimgImage *img); /* borrowed; NULL if none */
bool qimg_image_is_read_only(QimgImage *img);

/*
 * qemu-img rebase -u: record backing_file (NULL or "": none) of format
 * backing_fmt (required with a file) in the image's header, after making
 * everything written to the image durable.  Only the header changes: the
 * open handle keeps reading through the chain it was opened with (reopen
 * to read through the new one).  qcow2 only (0.6).
 */
gboolean qimg_image_set_backing(QimgImage *img, const char *backing_file,
                                const char *backing_fmt, GError **error);
/* qemu-img commit's last step: drop everything img itself stores, so that
 * it reads through its backing file again (internal snapshots keep theirs),
 * then flush.  qcow2 only (0.6). */
gboolean qimg_image_make_empty(QimgImage *img, GError **error);
/* A backing file name resolved as img's own backing file name is: against
 * the folder of img's file (g_free) (0.6). */
char *qimg_image_resolve_backing(QimgImage *img, const char *backing_file);
/* The same for an image not opened (qemu-img create's new image): the
 * name an image called image_filename would open as its backing file
 * backing_file -- as it is when absolute or with a protocol prefix
 * ("file:", "json:", a URI), else in image_filename's folder (g_free)
 * (0.9). */
char *qimg_backing_name_resolve(const char *image_filename, const char *backing_file);
/* Is fmt a block driver name QEMU knows (what qemu-img takes for -F and
 * backing_fmt, qimg opening only raw and qcow2)?  (0.6) */
gboolean qimg_format_name_valid(const char *fmt);
/* The drivers qimg opens, by QEMU's names, sorted: the formats -f takes and
 * the nodes json: names and --image-opts build ("quorum", "blkdebug", ...);
 * the "Supported formats:" line of qemu-img --help.  Free with
 * g_strfreev.  (0.13) */
char **qimg_format_list(void);
/* Whether a caller's image name can name something qimg opens or creates
 * by its prefix: FALSE with "Unknown protocol 'P'" (or "the 'P' protocol
 * is not supported by qimg") for a name with a ':' before its first '/'
 * that is no protocol qimg has, as qemu-img checks a name before it
 * creates or converts.  (0.14) */
gboolean qimg_name_check(const char *filename, GError **error);
/* A size as QEMU parses one (qemu-img's sizes, QEMU's size options): a
 * decimal integer with an optional fraction and one suffix b/k/M/G/T/P/E
 * (powers of 1024, either case; a fraction needs one other than b), or a
 * hex integer "0x..."; *hex_suffix (may be NULL) says a hex number had a
 * suffix, which QEMU accepts with a warning.  0, -EINVAL (malformed) or
 * -ERANGE (2^64 or more).  (0.9) */
int qimg_strtosz(const char *s, uint64_t *value, gboolean *hex_suffix);

/* qemu-img amend's request (0.7). */
typedef struct QimgAmendOptions {
    uint32_t struct_size; /* sizeof(QimgAmendOptions): QIMG_AMEND_OPTIONS_INIT */
    /* key -> value, the -o options qemu-img amend takes for qcow2 (compat,
     * refcount_bits, lazy_refcounts, size, backing_file, backing_fmt,
     * data_file, data_file_raw, encrypt.*), values as in
     * QimgCreateOptions.options: booleans "on"/"off", numbers and sizes
     * in decimal. */
    GHashTable *options;
    bool force; /* qemu-img amend --force */
    /* Optional: called now and then with work done out of the total, on
     * the calling thread, while the image's metadata is locked (it must
     * not call into the image). */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
    /* 0.9: the secrets encrypt.new-secret and encrypt.old-secret name (as
     * QimgOpenOptions.secret_values) */
    GHashTable *secret_values;
} QimgAmendOptions;

#define QIMG_AMEND_OPTIONS_INIT                                                          \
    {                                                                                    \
        .struct_size = sizeof(QimgAmendOptions)                                          \
    }

/* qemu-img amend: change the creation options opts names on an image opened
 * read-write (qcow2 only: compatibility level up or down, refcount width,
 * lazy refcounts, virtual size, the data file's name and raw flag), with
 * QEMU 7.2's checks and messages.  Each step is crash-safe; on failure the
 * steps before the failing one stay done, as with qemu-img (0.7). */
gboolean qimg_image_amend(QimgImage *img, const QimgAmendOptions *opts, GError **error);

/* Block status of one layer or of the whole chain. */
typedef enum QimgStatusFlags {
    QIMG_STATUS_DATA = 1 << 0,         /* reads return data stored here */
    QIMG_STATUS_ZERO = 1 << 1,         /* reads return zeros */
    QIMG_STATUS_OFFSET_VALID = 1 << 2, /* offset is valid in 'file' */
    QIMG_STATUS_ALLOCATED = 1 << 3,    /* this layer defines the contents */
    QIMG_STATUS_COMPRESSED = 1 << 4,
} QimgStatusFlags;

typedef struct QimgExtent {
    uint64_t start;
    uint64_t length;
    unsigned flags;       /* QimgStatusFlags */
    int depth;            /* chain depth of the layer that defines it */
    uint64_t offset;      /* host offset when QIMG_STATUS_OFFSET_VALID */
    const char *filename; /* file the offset refers to (borrowed) */
} QimgExtent;

/*
 * Status of [offset, offset+len) through the backing chain as qemu-img map
 * sees it: out->length is how far the same answer holds (> 0).
 */
gboolean qimg_image_block_status(QimgImage *img, uint64_t offset, uint64_t len,
                                 QimgExtent *out, GError **error);
/* Status of this layer only (ALLOCATED says whether it defines the range). */
gboolean qimg_image_block_status_layer(QimgImage *img, uint64_t offset, uint64_t len,
                                       QimgExtent *out, GError **error);

typedef struct QimgSnapshotInfo {
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
} QimgSnapshotInfo;

/* One LUKS key slot as qemu-img info shows it (0.8). */
typedef struct QimgLuksSlot {
    bool active;
    uint32_t iters;      /* active slots only, else 0 */
    uint64_t key_offset; /* bytes into the LUKS header */
    uint32_t stripes;    /* active slots only, else 0 */
} QimgLuksSlot;

/* An encrypted image's encryption, qemu-img info's "encrypt" (0.8).  qimg
 * opens encrypted images for their information only: it has no encryption,
 * so it reads and writes no data of them. */
typedef struct QimgEncryptInfo {
    char *format;         /* "luks", or "aes" (QEMU's old method: nothing else is set) */
    char *cipher_alg;     /* "aes-256", ... */
    char *cipher_mode;    /* "xts", ... */
    char *ivgen_alg;      /* "plain64", ... */
    char *ivgen_hash_alg; /* essiv's hash, NULL: none */
    char *hash_alg;
    char *uuid;
    uint64_t payload_offset; /* bytes */
    uint32_t master_key_iters;
    QimgLuksSlot slots[8];
} QimgEncryptInfo;

/* One extent of a VMDK image (0.9), as qemu-img info lists it. */
typedef struct QimgVmdkExtentInfo {
    char *filename; /* the path it is opened by: the descriptor's folder as
                     * the image was named, then the name the image records */
    char *format;   /* "FLAT", "SPARSE", "VMFS", ... ; "" inside a monolithic file */
    uint64_t virtual_size;
    uint32_t cluster_size; /* grain bytes; 0 for a flat or an unopened extent */
    bool compressed;
    bool opened; /* FALSE: not opened (QimgOpenOptions.no_data_files) */
} QimgVmdkExtentInfo;

/* A VMDK image's qemu-img info data (0.9). */
typedef struct QimgVmdkInfo {
    uint32_t cid;
    uint32_t parent_cid; /* 0xffffffff: no parent */
    char *create_type;
    GPtrArray *extents; /* QimgVmdkExtentInfo * */
} QimgVmdkInfo;

/* One disk of an OVA archive (0.9), from its OVF descriptor's DiskSection
 * and References; opened as "ova:INDEX:ARCHIVE" (INDEX: its place in
 * QimgOvaInfo.disks). */
typedef struct QimgOvaDiskInfo {
    char *id;             /* ovf:diskId */
    char *file;           /* the tar member (ovf:href); NULL: an empty disk */
    uint64_t offset;      /* where the member's bytes start in the archive */
    uint64_t size;        /* the member's bytes */
    char *capacity;       /* ovf:capacity as written, NULL: none */
    char *capacity_units; /* ovf:capacityAllocationUnits, NULL: bytes */
    uint64_t capacity_bytes;
    bool capacity_known; /* capacity_bytes is capacity times its unit */
    char *format;        /* ovf:format (a URI), NULL: none */
    char *compression;   /* ovf:compression ("gzip"), NULL: none */
} QimgOvaDiskInfo;

/* An OVA archive's listing (0.9): QimgInfo.format is "ova". */
typedef struct QimgOvaInfo {
    char *descriptor; /* the OVF descriptor's member name */
    GPtrArray *disks; /* QimgOvaDiskInfo *, in DiskSection order */
} QimgOvaInfo;

typedef struct QimgInfo {
    char *filename;
    char *format;
    uint64_t virtual_size;
    int64_t actual_size;   /* bytes allocated on the host, -1 unknown */
    uint32_t cluster_size; /* 0: not applicable */
    bool dirty;
    bool encrypted;
    char *backing_filename; /* as recorded in the image */
    char *full_backing_filename;
    char *backing_format;
    GPtrArray *snapshots; /* QimgSnapshotInfo *, may be NULL (ABI rule 3) */
    /* qcow2 specifics (format_specific = true) */
    bool format_specific;
    char *compat;           /* "0.10" or "1.1" */
    char *compression_type; /* "zlib" / "zstd" */
    bool lazy_refcounts;
    uint32_t refcount_bits;
    bool corrupt;
    bool extended_l2;
    char *data_file;
    bool data_file_raw;
    /* 0.5: no dirty flag to report (a raw NBD export or ssh file: QEMU's nbd and ssh
     * drivers have no image info, so qemu-img prints none) */
    bool dirty_unknown;
    /* 0.6: persistent dirty bitmaps (QimgBitmapInfo *), NULL when none */
    GPtrArray *bitmaps;
    /* 0.8: set when encrypted */
    QimgEncryptInfo *encrypt;
    /* 0.9: the format-specific data of a VMDK image (format_specific is
     * set and the qcow2 fields above are unset), else NULL */
    QimgVmdkInfo *vmdk;
    /* 0.9: why backing_filename is not opened (full_backing_filename is
     * then NULL): a name the image records that breaks the rule of
     * QimgOpenOptions.trust_names, else NULL */
    char *backing_refused;
    /* 0.9: the disks of an OVA archive opened as itself (format "ova"),
     * else NULL */
    QimgOvaInfo *ova;
    /* 0.10: the image has the external data file bit (data_file_raw is
     * meaningful), also when it names no data file (data_file NULL) */
    bool has_data_file;
} QimgInfo;

/* qemu-img bitmap's operations (0.6). */
typedef enum QimgBitmapOp {
    QIMG_BITMAP_ADD,     /* a new, empty, enabled bitmap */
    QIMG_BITMAP_REMOVE,  /* gone, its clusters freed */
    QIMG_BITMAP_CLEAR,   /* every bit 0 */
    QIMG_BITMAP_ENABLE,  /* records writes ("auto") */
    QIMG_BITMAP_DISABLE, /* kept as it is */
} QimgBitmapOp;

/* One operation on the persistent bitmap name of a qcow2 v3 image opened
 * read-write; granularity (bytes per bit, a power of two >= 512) for
 * QIMG_BITMAP_ADD, 0: the cluster size within [4 KiB, 64 KiB].  Each is a
 * crash-safe switch to a new bitmap directory (0.6). */
gboolean qimg_image_bitmap_op(QimgImage *img, QimgBitmapOp op, const char *name,
                              uint32_t granularity, GError **error);

/* A range of guest bytes (0.7). */
typedef struct QimgRange {
    uint64_t offset;
    uint64_t length;
} QimgRange;

/* The dirty extents of persistent bitmap name (0.7): *extents is a GArray
 * of QimgRange in ascending order, adjacent ones merged, each a multiple
 * of the bitmap's granularity (the last one clipped to the image size).
 * For a bitmap the open image maintains, its bits as they are now (writes
 * so far included); else as stored.  A bitmap marked in use that this
 * handle does not maintain is refused as inconsistent. */
gboolean qimg_image_bitmap_extents(QimgImage *img, const char *name, GArray **extents,
                                   GError **error);
/* Set the bits of bitmap name covering ranges[0..n) -- a merge of another
 * bitmap's extents (qemu-img bitmap --merge, convert --bitmaps) -- as one
 * crash-safe switch to a new table (0.7). */
gboolean qimg_image_bitmap_merge(QimgImage *img, const char *name,
                                 const QimgRange *ranges, size_t n, GError **error);
/* Write the bitmaps this handle maintains back to the image now, in-use
 * cleared, as closing does (0.7); later writes mark them in use again.
 * An image opened read-only maintains nothing: TRUE. */
gboolean qimg_image_bitmaps_store(QimgImage *img, GError **error);

/* One persistent dirty bitmap, as qemu-img info lists it (0.6). */
typedef struct QimgBitmapInfo {
    char *name;
    uint32_t granularity; /* bytes per bit */
    bool in_use;          /* "in-use": its bits are not to be trusted */
    bool enabled;         /* "auto": it records the image's writes */
} QimgBitmapInfo;

/* Breakpoints for tests (0.8), as QEMU's blkdebug break/resume: on an image
 * opened through a fault node ("blkdebug:RULES:FILE", RULES may be empty).
 * The next request that reaches event (QEMU's blkdebug event name, e.g.
 * "write_aio", "l2_update", "read_aio") stops there, tagged tag, until
 * qimg_image_debug_resume(); each breakpoint stops one request.  A request
 * that reaches it on the thread that set it fails with EDEADLK instead (that
 * thread must resume it); closing the image resumes every stopped request.
 * Errors carry the errno as code: ENOTSUP (no fault node, or an event qimg
 * cannot stop at), ENOENT (no such event, breakpoint or stopped request). */
gboolean qimg_image_debug_break(QimgImage *img, const char *event, const char *tag,
                                GError **error);
/* Drop tag's breakpoints and resume the requests stopped as tag; ENOENT if
 * no breakpoint was dropped (the requests are resumed even so). */
gboolean qimg_image_debug_remove_break(QimgImage *img, const char *tag, GError **error);
/* Resume the oldest request stopped as tag. */
gboolean qimg_image_debug_resume(QimgImage *img, const char *tag, GError **error);
/* The tags of the requests stopped now, oldest first (g_strfreev; an empty
 * list without a fault node); only_new: those no earlier call with
 * only_new returned. */
char **qimg_image_debug_suspended(QimgImage *img, gboolean only_new);

/* 0.12: the verdict of QEMU's blkverify node under img (a name
 * "blkverify:RAW:IMAGE", or "driver": "blkverify" options), which reads
 * both its image under test and its raw copy and compares: QEMU's line
 * ("blkverify: read offset=O bytes=N contents mismatch at offset M", or
 * "... return value mismatch T != R"), g_free; NULL while they agree, or
 * without such a node.  The request that found the disagreement failed
 * with code EIO and that line, and every later read or write of the image
 * fails the same way.  QEMU's tools end the process at that point (exit
 * status 1); the library never does: the caller decides (qimg io ends as
 * qemu-io does).  A verdict found while the format was probed leaves the
 * open succeeding (raw), with the verdict standing. */
char *qimg_image_verify_verdict(QimgImage *img);

QimgInfo *qimg_image_get_info(QimgImage *img, GError **error);
void qimg_info_free(QimgInfo *info);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(QimgInfo, qimg_info_free)

/* 0.9: a secret's bytes for QimgOpenOptions.secret_values (and the create
 * and amend options' ones): a GBytes whose copy of data[0..len) lives in
 * memory locked against swapping where the system allows, left out of core
 * dumps, and wiped when the last reference goes (g_bytes_unref). */
GBytes *qimg_secret_new(const void *data, gsize len);

G_END_DECLS

#endif
