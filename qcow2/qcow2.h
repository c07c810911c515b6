/*
 * qcow2/qcow2.h: the qcow2 driver's internal state and the functions the
 * qcow2/ files share.  The on-disk format (constants, field offsets,
 * big-endian helpers, checked arithmetic, the header and snapshot table
 * codecs) is qcow2/format.h, included here; meta.c's declarations (metadata
 * writes, the overlap check, the corrupt and dirty bits, flushes, sticky
 * and deferred errors) are qcow2/meta.h, which the files that use them
 * include.
 *
 * Owns: the Qcow2State struct (one per open image), its metadata lock and
 * the in-flight list, the mapping types, and the declarations of the read
 * and write paths.
 *
 * Invariants (cited as "qcow2.h invariant N"):
 *  1. Qcow2State.lock guards everything marked "[lock]" below.  Functions
 *     that must be called with it held end in _locked.  It is never held
 *     while guest data moves to or from a file.
 *  2. Fields marked "[open]" are set during open and never change after
 *     it, so they may be read without the lock.
 *  3. Tables are kept in memory in host byte order (L1, refcount table);
 *     cached L2 tables and refcount blocks are kept raw (big-endian), exactly
 *     as on disk, so the write path can write them back unchanged.
 *  4. No cache table reference (qcow2_cache_get_locked) is held while the
 *     lock is dropped: another thread may evict or reuse the entry.
 *  5. file_size only grows while the image is open -- except that a shrink
 *     cuts off free clusters after the last one in use, under the lock
 *     (resize.c invariant 6): every cluster handed out by the allocator
 *     lies below it (alloc.c), so a table allocated past the end of the
 *     file passes the "inside the file" checks before it is written.
 */
#ifndef QIMG_QCOW2_H
#define QIMG_QCOW2_H

#include "aio/mutex.h"
#include "aio/waiters.h"
#include "block/block.h"
#include "crypto/block.h"
#include "crypto/luks.h"
#include "qcow2/bitmap-codec.h"
#include "qcow2/cache.h"
#include "qcow2/fastmap.h"
#include "qcow2/format.h"

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---- metadata cache sizes ---- */

#define QCOW2_DEFAULT_L2_CACHE_MAX (32u * 1024 * 1024)
#define QCOW2_MIN_L2_CACHE_ENTRIES 2u
#define QCOW2_MIN_REFCOUNT_CACHE_ENTRIES 4u
#define QCOW2_DEFAULT_CACHE_CLEAN_INTERVAL 600u /* seconds, QEMU's on Linux */

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
    void *ring; /* the io_uring plan holding it (write-ring.c), or NULL */
    struct Qcow2Inflight *prev, *next;
} Qcow2Inflight;

/* Why clusters are freed, as QEMU tells them apart (its qcow2 discard
 * types), and so whether the file gets their space back once their
 * refcount reaches 0 (alloc.c invariant 9). */
typedef enum Qcow2DiscardKind {
    QCOW2_DISCARD_NEVER,    /* data replaced by a write: the file keeps it */
    QCOW2_DISCARD_ALWAYS,   /* cut off by a shrink */
    QCOW2_DISCARD_REQUEST,  /* a discard or an unmapping zero write:
                             * pass-discard-request, default on */
    QCOW2_DISCARD_SNAPSHOT, /* a snapshot deleted, reverted to, or the image
                             * emptied: pass-discard-snapshot, default on */
    QCOW2_DISCARD_OTHER,    /* metadata replaced or freed, allocations undone:
                             * pass-discard-other, default off */
    QCOW2_DISCARD_KINDS
} Qcow2DiscardKind;

typedef struct Qcow2State {
    GMutex lock;              /* qcow2.h invariant 1; take it with qcow2_lock() */
    Waiters inflight_waiters; /* [lock] waiting for a range (write.c invariant 6) */
    Qcow2Inflight *inflight;  /* [lock] requests in flight */
    BlkNode *img;

    Qcow2Header header;  /* [open] as decoded */
    Qcow2Extensions ext; /* [open] */
    /* [open] crypt_method 1 or 2 (crypt.c): the per-request encryption
     * layer (NULL when opened for the metadata only, crypt.c invariant 2),
     * whether IVs count host sectors (LUKS) or guest sectors (old AES), the
     * decoded LUKS header, the PBKDF2 iteration limit */
    bool encrypted;
    CryptoBlock *crypto;
    bool crypt_physical;
    CryptoLuksHeader *luks; /* [lock] while amend changes key slots */
    uint32_t luks_max_iterations;
    uint8_t *unknown_header_fields; /* [open] bytes 112..header_length, kept */
    size_t unknown_header_fields_size;

    /* [open] geometry */
    uint32_t cluster_bits;
    uint64_t cluster_size;
    uint32_t l2_bits;       /* log2(entries per L2 table) */
    uint64_t l2_size;       /* entries per L2 table */
    uint32_t l2_entry_size; /* 8, or 16 with extended L2 entries */
    uint32_t l2_slice_bits; /* log2(entries per L2 cache slice), <= l2_bits */
    uint64_t l2_slice_size; /* entries per slice (l2-cache-entry-size / entry) */
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
    /* [lock] QEMU's lazy-refcounts option: 0 the header's bit decides,
     * 1 on, -1 off (qcow2_use_lazy_refcounts) */
    int lazy_override;
    unsigned overlap_checks; /* QCOW2_OL_* the writes check (meta.c inv. 1) */
    uint64_t l1_vm_state_index;
    uint64_t file_size;   /* [lock] size of img->file, raised by allocations
                           * (qcow2.h invariant 5) */
    uint64_t phys_end;    /* [lock] img->file's length as grown (grow.c) */
    uint64_t open_end;    /* [open] img->file's length at open (grow.c) */
    uint64_t fresh_end;   /* [lock] end of the last fresh guest clusters (grow.c) */
    bool grow_on;         /* [lock] growing ahead (grow.c invariants 1, 3, 4) */
    bool grow_busy;       /* [lock] a growth runs outside the lock (grow.c inv. 5) */
    Waiters grow_waiters; /* [lock] waiting for grow_busy to clear (grow.c inv. 5) */

    /* [lock] L1 in host order: the active one, or the snapshot's in a view */
    uint64_t *l1_table;
    uint32_t l1_size;
    uint64_t l1_table_offset;

    /* [lock] refcount table in host order */
    uint64_t *refcount_table;
    uint64_t refcount_table_size; /* entries */
    uint64_t refcount_table_used; /* 1 + the last non-zero entry's index */
    uint64_t refcount_table_offset;

    /* [open] snapshot table */
    Qcow2Snapshot *snapshots;
    uint32_t nb_snapshots;
    uint64_t snapshots_offset;
    uint64_t snapshots_size;
    int snapshot_view; /* index of the snapshot served read-only, or -1 */

    Qcow2Cache *l2_cache;       /* [lock] */
    Qcow2FastMap *fastmap;      /* [open] the lock-free request path (fastmap.c) */
    Qcow2Cache *refcount_cache; /* [lock] */
    struct Qcow2Clean *clean;   /* [open] cache-clean-interval timer, or NULL */

    BlkNode *data_file;     /* [open] external data file node (owned), or NULL */
    bool data_file_skipped; /* [open] the header names one; not opened (qcow2.c inv 11) */
    bool data_file_raw;

    /* [lock] metadata preallocation detection for block status */
    bool prealloc_checked;
    bool metadata_preallocated;

    unsigned corruption_events; /* [lock] */
    bool in_check;   /* [lock] a check runs: it reports corruption (meta.c inv. 3) */
    bool rebuilding; /* [lock] repair.c invariant 6: writes after the mark */

    /* [lock] write path (alloc.c, meta.c) */
    uint64_t free_cluster_index; /* allocation search hint (cluster index) */
    uint64_t free_byte_offset;   /* compressed packing: next free byte, or 0 */
    bool corrupt_fatal;          /* corrupt bit set while open: requests refused
                                  * (set atomically: meta.c invariant 2) */
    bool bitmaps_in_use;         /* bitmap-store.c invariant 1 done */
    struct Qcow2DirtySet *dirty; /* [atomic; lock to replace] maintained bitmaps */
    GPtrArray *dirty_retired;    /* sets replaced (dirty.c invariant 1) */
    int deferred_error;          /* an I/O error met while freeing (meta.c inv. 7) */
    char *deferred_msg;
    GArray *pending_frees; /* Qcow2Free: decreases waiting for a durable unlink
                            * (alloc.c invariant 2) */
    bool pass_discard[QCOW2_DISCARD_KINDS]; /* [open] alloc.c invariant 9 */
    Qcow2DiscardKind free_kind;             /* [lock] of the free under way */
    GArray *punch;         /* [lock] Qcow2Range: freed, to give back (inv. 9) */
    bool defer_hooks;      /* refcount block entries wait (alloc.c invariant 3) */
    GArray *pending_hooks; /* their (index, offset), until settled */
    int sticky_error;      /* a metadata write or flush failed (meta.c inv. 9) */
    char *sticky_msg;
    bool close_retry; /* the close-time write-back runs (meta.c inv. 13) */
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

/* A decrease waiting for a durable unlink (alloc.c invariant 2). */
typedef struct Qcow2Free {
    uint64_t off, len;
    Qcow2DiscardKind kind;
} Qcow2Free;

/*
 * The metadata lock, through aio/mutex.h (mutex.h invariant 1: where
 * ThreadSanitizer sees it).  The write path always uses these.
 */
static inline void qcow2_lock(Qcow2State *s)
{
    mutex_lock(&s->lock);
}

/* The metadata lock if it is free; false at once otherwise. */
static inline bool qcow2_trylock(Qcow2State *s)
{
    return mutex_trylock(&s->lock);
}

static inline void qcow2_unlock(Qcow2State *s)
{
    mutex_unlock(&s->lock);
}

static inline uint64_t qcow2_offset_into_cluster(const Qcow2State *s, uint64_t offset)
{
    return offset & (s->cluster_size - 1);
}

static inline bool qcow2_has_data_file(const Qcow2State *s)
{
    return s->data_file != NULL || s->data_file_skipped;
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
 * be suppressed" (meta.c invariant 3).  The _nonfatal form is QEMU's
 * non-fatal event (meta.c invariant 3): reported like a read-only image's,
 * nothing is marked; the caller refuses only the step it was about to take.
 */
int qcow2_signal_corruption_locked(Qcow2State *s, bool fatal, const char *file, int line,
                                   const char *fmt, ...) G_GNUC_PRINTF(5, 6);
#define qcow2_corrupt_locked(s, ...)                                                     \
    qcow2_signal_corruption_locked((s), true, __FILE__, __LINE__, __VA_ARGS__)
#define qcow2_corrupt_nonfatal_locked(s, ...)                                            \
    qcow2_signal_corruption_locked((s), false, __FILE__, __LINE__, __VA_ARGS__)

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
/* The same, except that a host offset that is not cluster aligned passes
 * (*unaligned tells): a discard changes such an entry as QEMU's does and
 * leaves its cluster leaked ("Cannot free unaligned cluster", non-fatal). */
bool qcow2_l2_entry_valid_to_drop(const Qcow2State *s, uint64_t entry, uint64_t bitmap,
                                  uint64_t guest_cluster, Qcow2SubclusterType *type,
                                  bool *unaligned);
int qcow2_l2_entry_type_locked(Qcow2State *s, uint64_t entry, uint64_t bitmap,
                               unsigned sc, uint64_t l2_offset, uint64_t l2_index,
                               uint64_t guest_cluster, Qcow2SubclusterType *type,
                               unsigned *count);
/* Load a table of 'count' 64-bit big-endian entries into host order. */
int qcow2_read_table(BlkNode *file, uint64_t offset, uint64_t count, uint64_t **out);
/* The L2 cache: entries of l2_slice_size L2 entries (cluster.c
 * invariant 6), at least QCOW2_MIN_L2_CACHE_ENTRIES of them. */
int qcow2_l2_cache_init(Qcow2State *s, uint64_t l2_bytes);
/* Drop every cached slice of the L2 table at l2_offset (cluster.c inv 6). */
void qcow2_l2_cache_discard_table_locked(Qcow2State *s, uint64_t l2_offset);

/* Bytes of one L2 slice, the L2 cache's unit (cluster.c invariant 6). */
static inline uint64_t qcow2_l2_slice_bytes(const Qcow2State *s)
{
    return s->l2_slice_size * s->l2_entry_size;
}

/* Index of guest offset's entry in its L2 slice. */
static inline uint64_t qcow2_l2_slice_index(const Qcow2State *s, uint64_t guest)
{
    return (guest >> s->cluster_bits) & (s->l2_slice_size - 1);
}

/* Host offset of the slice of the L2 table at l2_offset that maps guest. */
static inline uint64_t qcow2_l2_slice_offset(const Qcow2State *s, uint64_t l2_offset,
                                             uint64_t guest)
{
    uint64_t in_table = (guest >> s->cluster_bits) & (s->l2_size - 1);
    return l2_offset + (in_table >> s->l2_slice_bits) * qcow2_l2_slice_bytes(s);
}

/* ---- clean.c: the cache-clean-interval timer (clean.c invariants) ---- */
typedef struct Qcow2Clean Qcow2Clean;
/* NULL for interval 0 (never); the thread starts at the first miss. */
Qcow2Clean *qcow2_clean_new(Qcow2State *s, uint64_t interval);
void qcow2_clean_arm_locked(Qcow2State *s);
/* Stops and frees it (lock not held); NULL is fine. */
void qcow2_clean_stop(Qcow2Clean *c);
/* The caches' read hook: the table from the image file; arms the timer. */
int qcow2_cache_read_file(void *opaque, uint64_t offset, void *buf, size_t len);

/* ---- crypt.c: guest data to and from the data node (crypt.c inv. 1) ---- */

/* Guest bytes at host offset host (guest offset guest) of the data node:
 * read, written, zeroed -- decrypted and encrypted on an encrypted image. */
int qcow2_data_preadv(Qcow2State *s, uint64_t host, uint64_t guest, const BlkIOV *qiov);
int qcow2_data_pwritev(Qcow2State *s, uint64_t host, uint64_t guest, const BlkIOV *qiov,
                       unsigned flags);
int qcow2_data_pwrite_zeroes(Qcow2State *s, uint64_t host, uint64_t guest, uint64_t bytes,
                             unsigned flags);
/* May a request go straight to the data node on the ring (crypt.c inv. 3)? */
bool qcow2_data_direct_ok(const Qcow2State *s);
/* Fill d for a direct request of guest offset 'guest' held at host offset
 * 'host': the data node, and the encryption its caller applies (crypt.c
 * invariant 3). */
void qcow2_data_direct_fill(Qcow2State *s, uint64_t host, uint64_t guest, BlkDirect *d);
/* May a write of [offset, + bytes) skip the slow path's sector widening
 * (crypt.c invariant 4)? */
bool qcow2_data_write_aligned(const Qcow2State *s, uint64_t offset, uint64_t bytes);
/* Open the encryption of an image whose header was parsed (the key-secret
 * of opts unlocks it unless metadata_only). */
int qcow2_crypt_open(Qcow2State *s, const BlkOpenOptions *opts, bool metadata_only);
void qcow2_crypt_close(Qcow2State *s);
/* amend's key slot changes (amend.c invariant 8). */
int qcow2_crypt_amend_locked(Qcow2State *s, const CryptoLuksAmend *a,
                             const BlkAmendOptions *o);
/* A LUKS header area for a new image, its slot 0 opened by pw. */
int qcow2_crypt_create(Qcow2State *s, const CryptoLuksParams *p, const uint8_t *pw,
                       size_t pwlen, uint32_t max_iterations);

/* ---- compress.c ---- */

void qcow2_parse_compressed_entry(const Qcow2State *s, uint64_t l2_entry,
                                  uint64_t *coffset, uint64_t *csize);
int qcow2_decompress(int compression_type, void *dest, size_t dest_size, const void *src,
                     size_t src_size);

/* ---- refcount.c ---- */

/* Refcount blocks needed to count 'clusters' clusters and the refcount
 * structures themselves, a fixed point (QEMU's qcow2_refcount_metadata_size);
 * 'generous' leaves room for the table to grow by half.  *table (may be
 * NULL): the refcount table's clusters. */
uint64_t qcow2_refblocks_for(uint64_t clusters, uint32_t cluster_bits,
                             uint32_t refcount_order, bool generous, uint64_t *table);

int qcow2_refcount_init(Qcow2State *s, uint64_t refcount_cache_bytes);
void qcow2_refcount_close(Qcow2State *s);
/* Set refcount_table_used from the table (after it was read or replaced). */
void qcow2_reftable_count_used(Qcow2State *s);
int qcow2_get_refcount_locked(Qcow2State *s, uint64_t cluster_index, uint64_t *refcount);
uint64_t qcow2_refblock_get(const void *block, uint64_t index, uint32_t refcount_order);
/* Store value (<= refcount_max) as entry index of a raw refcount block. */
void qcow2_refblock_set(void *block, uint64_t index, uint32_t refcount_order,
                        uint64_t value);
/* The validated offset of the refcount block for reftable index
 * table_index, or 0 when there is none (refcount.c invariants 2, 3). */
int qcow2_refblock_offset_locked(Qcow2State *s, uint64_t table_index,
                                 uint64_t *block_offset);
/* refcount.c invariant 5: QEMU's refcount block cache refuses an offset. */
int qcow2_refblock_unaligned_locked(Qcow2State *s, uint64_t block_offset);
int qcow2_detect_metadata_preallocation_locked(Qcow2State *s);
/* The index of the last cluster below 'clusters' with a refcount, or -EIO
 * (a corruption) when there is none (QEMU's qcow2_get_last_cluster). */
int64_t qcow2_last_used_cluster_locked(Qcow2State *s, uint64_t clusters);

/* ---- snapshot.c ---- */

int qcow2_read_snapshots(Qcow2State *s, bool check_mode);
void qcow2_free_snapshots(Qcow2State *s);
int qcow2_find_snapshot(const Qcow2State *s, const char *id, const char *name);
int qcow2_snapshot_load_view(Qcow2State *s, const char *id_or_name);

/* ---- read.c ---- */

int qcow2_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags);
/* Move a fast request's bytes at the mappings its span holds (fastmap.c
 * invariant 8); read.c. */
int qcow2_fast_io(Qcow2State *s, const Qcow2FastSpan *sp, uint64_t offset,
                  const BlkIOV *qiov, bool write);
/* Learn guest cluster X, holding [offset, offset + bytes), for the fast
 * path from its cached L2 entry while no write registration covers it
 * (fastmap.c invariant 1); false: nothing learnt.  read.c. */
bool qcow2_prime_locked(Qcow2State *s, uint64_t offset, uint64_t bytes, bool write);
bool qcow2_direct_begin(BlkNode *img, uint64_t offset, uint64_t bytes, bool write,
                        BlkDirect *d);
void qcow2_direct_end(BlkNode *img, BlkDirect *d);
/* Guest offset's L2 slice is in the cache: looking it up needs no I/O. */
bool qcow2_l2_cached_locked(Qcow2State *s, uint64_t offset);
/* BlkDriver.alloc_begin/alloc_end (write.c invariant 18). */
bool qcow2_alloc_begin(BlkNode *img, uint64_t offset, uint64_t bytes, BlkDirect *d);
int qcow2_alloc_end(BlkNode *img, BlkDirect *d, int ret, bool wait);
int qcow2_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st);

/* ================= write path ================= */

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
/* How many of the n clusters at 'offset' are free before the first one in
 * use (QEMU's qcow2_alloc_clusters_at takes that many): *count, 0 or -errno. */
int qcow2_count_free_at_locked(Qcow2State *s, uint64_t offset, uint64_t n,
                               uint64_t *count);
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
 * corruption).  The clusters whose refcount reaches 0 are given back to
 * the file as @kind says (alloc.c invariant 9). */
void qcow2_free_clusters_as_locked(Qcow2State *s, uint64_t offset, uint64_t length,
                                   Qcow2DiscardKind kind);
/* The same for metadata and undone allocations (QCOW2_DISCARD_OTHER). */
void qcow2_free_clusters_locked(Qcow2State *s, uint64_t offset, uint64_t length);
/* The same for a reference dropped in a cached table that is not yet on
 * disk: the decrease waits until the table is durable (alloc.c inv. 2). */
void qcow2_free_clusters_deferred_locked(Qcow2State *s, uint64_t offset, uint64_t length,
                                         Qcow2DiscardKind kind);
/* Applies a list of Qcow2Free whose unlinks are durable (alloc.c inv. 2). */
void qcow2_free_ranges_locked(Qcow2State *s, const GArray *frees);
/* Drop the reference an L2 entry holds: a host cluster (normal, or
 * zero/unallocated with a preallocated cluster) or a compressed byte range.
 * Nothing for external data files.  deferred: the entry was replaced in a
 * cached L2 table (alloc.c invariant 2); else the entry was never linked. */
void qcow2_free_l2_entry_locked(Qcow2State *s, uint64_t l2_entry, bool deferred,
                                Qcow2DiscardKind kind);
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
/* After a shrink (QEMU's qcow2_shrink_reftable): clear the reftable
 * entries of refcount blocks that count nothing but themselves (one synced
 * table write; a block past the end of the file reads as zeros, as QEMU
 * reads it), then drop each block's own refcount, which the block covering
 * it must hold (else a corruption: "Refblock at ... is not covered by the
 * refcount structures", or "Invalid refcount" when it is not 1). */
int qcow2_shrink_reftable_locked(Qcow2State *s);
/* Pending decreases before a request forces a barrier (alloc.c inv. 2). */
#define QCOW2_MAX_PENDING_FREES 4096u
/* alloc.c invariant 10: before @n clusters for a guest write would grow the
 * file, make the frees waiting for a flush reusable (a flush) when they
 * hold at least QCOW2_REUSE_PENDING_BYTES and the @n clusters. */
int qcow2_reuse_pending_frees_locked(Qcow2State *s, uint64_t n);
#define QCOW2_REUSE_PENDING_BYTES (UINT64_C(1) << 20)

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

/* The L2 slice mapping guest 'offset' (cluster.c invariant 6), its table
 * ready to be modified: allocated (zeroed) if missing, copied if shared (L1
 * entry without COPIED), the L1 grown if too small.  *l2 is a cache
 * reference to the slice (put it); *l2_index the entry of offset in it
 * (the slice ends l2_slice_size - *l2_index entries later). */
int qcow2_get_l2_for_write_locked(Qcow2State *s, uint64_t offset, uint8_t **l2,
                                  uint64_t *l2_index);
/* The L2 slice mapping 'offset' if there is one (*l2 = NULL if not). */
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
/* BlkDriver.copy_in (write.c invariant 17). */
int qcow2_copy_in(BlkNode *img, uint64_t offset, uint64_t bytes, BlkNode *src,
                  uint64_t src_offset);
/* The same with the lock held, and returning with it (write.c invariant
 * 14: the caller awaited its order turn before taking the lock). */
int qcow2_write_registered_locked(Qcow2State *s, uint64_t offset, const BlkIOV *qiov);
/* Wait until no conflicting request covers [offset, offset + bytes),
 * without registering (write.c invariant 6).  Lock held (may wait on it). */
void qcow2_inflight_wait_locked(Qcow2State *s, uint64_t offset, uint64_t bytes,
                                bool write);
/* Wait as qcow2_inflight_wait_locked, then register r over the range
 * (write.c invariant 6).  Lock held (may wait on it). */
void qcow2_inflight_begin_locked(Qcow2State *s, Qcow2Inflight *r, uint64_t offset,
                                 uint64_t bytes, bool write);
void qcow2_inflight_end_locked(Qcow2State *s, Qcow2Inflight *r);
/* Would a request over [offset, offset + bytes) (a write if 'write') have
 * to wait for one in the list (write.c invariant 6)?  Lock held. */
bool qcow2_inflight_conflicts_locked(const Qcow2State *s, uint64_t offset, uint64_t bytes,
                                     bool write);

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
/* Internal zero flag: a guest zero write (QEMU's qcow2_co_pwrite_zeroes):
 * a partial (sub)cluster whose rest reads as zeros is zeroed whole; the
 * caller registered the range widened to (sub)clusters (zero.c inv. 1). */
#define QCOW2_ZERO_WIDEN (1u << 17)
/* Internal zero flag: the request ends where the disk will end (a resize
 * growing it): its last partial (sub)cluster counts as whole, as the
 * image's last one does (zero.c inv. 1). */
#define QCOW2_ZERO_AT_END (1u << 18)
/* Make [offset, offset + bytes) read as zeros (registered, lock not held):
 * zero flags (v3), unallocation (v2 without backing), else zero writes. */
int qcow2_zero_registered(Qcow2State *s, uint64_t offset, uint64_t bytes, unsigned flags);
/* QEMU's qcow2_cluster_discard on whole clusters [offset, offset + bytes)
 * (registered, lock not held).  full: entries become unallocated (the
 * backing file shows through); otherwise the range reads as zeros on v3
 * and, on v2, only without a backing file.  @kind: why (alloc.c inv. 9). */
int qcow2_discard_registered(Qcow2State *s, uint64_t offset, uint64_t bytes, bool full,
                             Qcow2DiscardKind kind);

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

/* grow.c: growing the image file ahead of allocating guest writes (the
 * write path's part: grow.h). */
void qcow2_grow_init(Qcow2State *s, uint64_t len);
/* Invariant 4: give back the grown tail and stop growing (before another
 * resize, and at close). */
void qcow2_grow_stop_locked(Qcow2State *s);
/* Guest offset where the vmstate area of the active L1 starts. */
uint64_t qcow2_vm_state_offset(const Qcow2State *s);
/* create.c */
int qcow2_create(const char *filename, const BlkCreateOptions *opts);
int qcow2_set_backing(BlkNode *img, const char *backing, const char *fmt);
/* amend.c: qemu-img amend (amend.c invariants 1-7). */
int qcow2_amend(BlkNode *img, const BlkAmendOptions *opts);
/* zero.c: drop every cluster (qemu-img commit), then flush. */
int qcow2_make_empty(BlkNode *img);
/* measure.c */
int qcow2_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                  BlkMeasure *out);
/* snapshot-write.c */
int qcow2_snapshot_create(BlkNode *img, BlkSnapshotInfo *sn);
int qcow2_snapshot_check(BlkNode *img);
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
