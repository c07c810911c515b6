/*
 * block/: the generic image layer, internal interface.
 *
 * Owns: the driver table, the BlkNode node (one per opened file or
 * format layer), format probing, opening backing chains, request checks,
 * and the error convention shared by every layer below the public API.
 *
 * Invariants:
 *  1. A format driver never touches a file descriptor: it reads and writes
 *     its protocol child (img->file), its backing node (img->backing) and
 *     any data file through blk_*() calls, so tests can slide a
 *     fault-injecting child underneath.
 *  2. Internal functions return 0 (or a non-negative count) or -errno.  A
 *     function that fails for a reason a person must read records the
 *     message with blk_error() before returning; the public API turns the
 *     last recorded message (thread-local) into the GError (api/error.c).
 *     Nothing below api/ sees a GError.
 *  3. Requests reaching a driver are bounds-checked: offset + bytes does not
 *     overflow and, except for vmstate requests and writes to protocol
 *     nodes, stays within img->size.
 *  4. Durability is observable: a protocol node counts its completed
 *     writes (write, zero, discard, truncate: write_gen) and remembers the
 *     count at the start of its last successful flush (flushed_gen).  A
 *     write that completed when write_gen was g is durable once
 *     blk_flushed_gen() >= g.  A flush with nothing new to cover is free.
 *     Filter nodes (fault injection, recording) answer for their child.
 *  5. Names are opened as protocols only when the caller asks: a
 *     "blkdebug:" or "record:" prefix selects a test node, "nbd..." an NBD
 *     export and "rbd:" a Ceph RBD image in a name the user gave
 *     (BLK_OPEN_USER_NAME), never in a backing file or data file name read
 *     from an image, which always opens the plain file.
 *  6. Every file an image is made of (its own, its backing files', its data
 *     file) is locked as QEMU locks it (block/lock.c): the protocol node
 *     takes its open mode's permissions, and the node above raises them to
 *     its role's (BlkDriver.file_role) before it reads or writes anything.
 *  7. Flush events as QEMU's block layer raises them (blkdebug's
 *     flush_to_os and flush_to_disk): a format node whose file takes
 *     events (BlkDriver.event: a fault node) counts its own write-like
 *     requests, failed ones too (fmt_write_gen), and each flush of it
 *     announces BLKEV_FLUSH_TO_OS on its file, then makes BLKEV_FLUSH_TO_DISK
 *     due on the file's next flush on this thread (after the format's
 *     write-back, as QEMU raises it) if the node has requests its last good
 *     flush did not cover and is not cache=unsafe.  The flush that makes a
 *     writethrough write durable (blk_flush_fua) runs before that write
 *     counts, as QEMU's emulated FUA does: a write's own flush raises
 *     flush_to_disk only for the writes before it.
 */
#ifndef QIMG_BLOCK_H
#define QIMG_BLOCK_H

#include "block/iov.h"
#include "block/types.h"
#include "block/lock.h"

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

/* Rounding for power-of-two or any non-zero alignment 'a' (no overflow checks:
 * use on validated values only). */
#define ROUND_DOWN(x, a) ((x) / (a) * (a))
#define ROUND_UP(x, a) ROUND_DOWN((x) + (a)-1, (a))
#define DIV_ROUND_UP(x, a) (((x) + (a)-1) / (a))

typedef struct BlkDriver BlkDriver;
typedef struct BlkNode BlkNode;
/* The end of a protocol node's asynchronous request (BlkDriver.aio_rw). */
typedef void BlkAioDone(void *opaque, int ret);
struct BlkCheckResult;

/*
 * Named steps of metadata updates, announced on the node about to be written
 * (blk_event()), so a fault-injecting node can fail the N-th write of a given
 * step (QEMU's blkdebug events).
 */
typedef enum BlkEvent {
    BLKEV_NONE = 0,
    BLKEV_DATA_WRITE, /* guest data */
    BLKEV_COW_WRITE,  /* copy-on-write head/tail */
    BLKEV_COMPRESSED_WRITE,
    BLKEV_REFBLOCK_UPDATE, /* writing back a refcount block */
    BLKEV_REFBLOCK_ALLOC,  /* writing a new refcount block */
    BLKEV_REFTABLE_GROW,   /* writing a new (larger) refcount table */
    BLKEV_L2_ALLOC,        /* writing a new (or copied) L2 table */
    BLKEV_L2_UPDATE,       /* writing back an L2 table */
    BLKEV_L1_UPDATE,       /* writing an L1 entry */
    BLKEV_L1_GROW,         /* writing a new (larger) L1 table */
    BLKEV_HEADER_UPDATE,   /* header fields */
    BLKEV_SNAPSHOT_TABLE,  /* snapshot table / snapshot L1 copy */
    BLKEV_CLUSTER_FREE,    /* refcount decrease written back */
    BLKEV_FLUSH,           /* flush of the file */
    /* guest data with its copy-on-write head/tail in one write (a
     * "cow_write" rule counts it; QEMU raises write_aio for it) */
    BLKEV_COW_DATA_WRITE,
    /* copy-on-read writing back what it read (block/cor.c; QEMU's
     * cor_write, raised on the node that copies) */
    BLKEV_COR_WRITE,
    /* reading an L2 table from the file into its cache (QEMU's l2_load: a
     * read, not a write); a refcount update taking the existing refcount
     * block of an index, cached or not (QEMU's refblock_load) */
    BLKEV_L2_LOAD,
    BLKEV_REFBLOCK_LOAD,
    /* clusters about to be allocated (QEMU's cluster_alloc), for a new L1
     * table (QEMU's l1_grow_alloc_table) */
    BLKEV_CLUSTER_ALLOC,
    BLKEV_L1_GROW_ALLOC,
    /* emptying an image completely (qcow2/empty.c): clearing the clusters
     * the new refcount structures and L1 table take (QEMU's
     * empty_image_prepare), pointing the header at the new refcount table
     * (QEMU's reftable_update) */
    BLKEV_EMPTY_IMAGE_PREPARE,
    BLKEV_REFTABLE_UPDATE,
    /* a refcount update finding the refcount block of an index, made or
     * not (QEMU's refblock_alloc, raised at every alloc_refcount_block);
     * the reftable entry of a new refcount block (QEMU's
     * refblock_alloc_hookup: a "refblock_alloc" rule counts it too); the
     * header write that switches to a new L1 table (QEMU's
     * l1_grow_activate_table: an "l1_grow" rule counts it too) */
    BLKEV_REFBLOCK_GET,
    BLKEV_REFBLOCK_HOOKUP,
    BLKEV_L1_GROW_ACTIVATE,
    /* about to read the old contents of an allocating write's
     * copy-on-write parts, wherever they are read from (QEMU's cow_read:
     * announced on the image's file even when the backing file is read) */
    BLKEV_COW_READ,
    /* a format driver about to read guest data from its file (QEMU's
     * read_aio: qcow2's allocated clusters, raw's reads; raised on the
     * image's file even when a data file is read).  Never raised by a
     * format probe, so blkdebug rules on it cannot fail the probe's read,
     * as in QEMU. */
    BLKEV_DATA_READ,
    /* a format node's flush (invariant 7; QEMU's flush_to_os, raised on
     * every flush, and flush_to_disk, raised when the node has writes
     * to cover): announced on the format's file, they arm rules and
     * switch states but are no thread's step */
    BLKEV_FLUSH_TO_OS,
    BLKEV_FLUSH_TO_DISK,
    BLKEV__MAX
} BlkEvent;

/* How a node's bytes are about to be read (blk_advise). */
typedef enum BlkAdvice {
    BLK_ADVICE_NORMAL,     /* no particular pattern (the default) */
    BLK_ADVICE_SEQUENTIAL, /* one stream from low to high offsets */
} BlkAdvice;

/* Request flags for preadv / pwritev / pwrite_zeroes (the first two equal
 * the public QIMG_ZERO_* flags, api/convert.c). */
enum {
    BLK_REQ_MAY_UNMAP = 1 << 0,   /* the range may be deallocated */
    BLK_REQ_NO_FALLBACK = 1 << 1, /* fail with ENOTSUP rather than write zeros */
    BLK_REQ_FUA = 1 << 4,         /* durable before completion */
};

struct CryptoBlock;

/* A mapping held for a request that goes straight to a protocol node. */
typedef struct BlkDirect {
    BlkNode *node;   /* the protocol node holding the bytes */
    uint64_t offset; /* their offset there */
    void *hold;      /* the driver's hold (qcow2: its fast map slot) */
    unsigned hold_aux;
    /* Encrypted bytes (qcow2/crypt.c invariant 3): the layer that en- and
     * decrypts them (crypto/block.h, block.c invariant 6) and the offset
     * their IVs count from; NULL: the node holds the guest's bytes. */
    struct CryptoBlock *crypto;
    uint64_t iv_offset;
    /* An allocating write (BlkDriver.alloc_begin): zero bytes written
     * before and after the caller's data, offset being where they begin. */
    uint64_t head, tail;
    /* alloc_begin: the write joined another request's plan (its clusters
     * are being allocated by it; head and tail are 0); the plan ends with
     * the last of its requests' data writes (alloc_end). */
    bool joined;
    bool ended; /* [the request's thread] alloc_end counted its data write */
    /* Set for every request of a plan by the alloc_end that ended it: the
     * plan linked nothing (its own data write failed), so the request runs
     * again the normal way; and the plan's other requests, linked by
     * 'group' (NULL-terminated), for that caller to complete. */
    bool unlinked;
    struct BlkDirect *group;
} BlkDirect;

/* Request limits a node imposes on the requests it is given (QEMU's
 * BlockLimits as its blkdebug node sets them), honoured by the request
 * functions below (block/limits.c); 0: no limit.  align is a power of two;
 * the others are multiples of it, max_* of their opt_*. */
typedef struct BlkLimits {
    uint32_t align;        /* request alignment */
    uint32_t max_transfer; /* largest read or write */
    uint32_t opt_write_zero, max_write_zero;
    uint32_t opt_discard, max_discard;
    GMutex rmw; /* limits.c invariant 3: writes that read first */
} BlkLimits;

struct BlkNode {
    const BlkDriver *drv;
    void *opaque;   /* driver state */
    char *filename; /* as given by the user */
    /* QEMU's name for the node where qimg opened it by another one (a
     * format over a blkdebug node named by options: json-blkdebug.c
     * invariant 6), or NULL; shown by blk_node_name() */
    char *qemu_name;
    BlkNode *file;    /* protocol child of a format node; NULL for protocol */
    BlkNode *backing; /* backing node, or NULL */
    bool read_only;
    BlkCacheMode cache;
    uint64_t size;               /* virtual size; drivers keep it current */
    uint32_t request_alignment;  /* 1, or the O_DIRECT alignment */
    uint32_t cluster_size;       /* format's allocation unit; 0 if it has none */
    bool is_block_device;        /* protocol nodes */
    char *backing_filename;      /* as recorded in the image */
    char *full_backing_filename; /* resolved path used to open it */
    char *backing_format;        /* as recorded, or NULL */
    char *backing_refused;       /* why backing_filename may not be opened
                                  * (names.c invariant 1), or NULL */
    BlkOpenOptions opts;         /* copy (string fields not kept) */
    bool probed;                 /* the format was guessed (raw.c invariant 4) */
    /* protocol nodes (invariant 4), atomic */
    uint64_t write_gen;   /* completed write-like requests */
    uint64_t flushed_gen; /* write_gen at the start of the last good flush */
    BlkNode *filtered;    /* filter nodes: the child that holds the data */
    BlkLimits *limits;    /* the driver's (limits.c), or NULL: none */
    /* atomic: the end of the furthest write, zero write or copy requested
     * of this node (QEMU's wr_highest_offset): blk_wr_highest() */
    uint64_t wr_highest;
    /* format nodes over a node that takes events (invariant 7), atomic */
    uint64_t fmt_write_gen;   /* write-like requests done */
    uint64_t fmt_flushed_gen; /* fmt_write_gen its last good flush covered */
};

/* The node's name as QEMU shows it (qimg info, "Failed to empty"). */
static inline const char *blk_node_name(const BlkNode *img)
{
    return img->qemu_name ? img->qemu_name : img->filename;
}

/* Block status answers (driver level; equal to the public QIMG_STATUS_*). */
enum {
    BLK_STATUS_DATA = 1 << 0,         /* reads return data stored here */
    BLK_STATUS_ZERO = 1 << 1,         /* reads return zeros */
    BLK_STATUS_OFFSET_VALID = 1 << 2, /* map is valid in file */
    BLK_STATUS_ALLOCATED = 1 << 3,    /* this layer defines the contents */
    BLK_STATUS_COMPRESSED = 1 << 4,
    /* a filter's answer: what st->file says at st->map (QEMU's
     * BDRV_BLOCK_RAW); blk_block_status() asks it, never returns it */
    BLK_STATUS_RAW = 1 << 5,
};

typedef struct BlkStatus {
    uint64_t pnum;  /* bytes from the request offset the answer covers (> 0) */
    unsigned flags; /* BLK_STATUS_* */
    uint64_t map;   /* host offset when OFFSET_VALID */
    BlkNode *file;  /* node 'map' refers to */
} BlkStatus;

typedef enum {
    BLK_DEBUG_BREAK,        /* suspend the next request reaching event, as tag */
    BLK_DEBUG_REMOVE_BREAK, /* drop tag's breakpoints, resume tag's requests */
    BLK_DEBUG_RESUME,       /* resume the oldest request suspended as tag */
    BLK_DEBUG_RESUME_ALL,   /* drop every breakpoint, resume every request */
} BlkDebugOp;

struct BlkDriver {
    const char *format_name;
    bool is_protocol;
    /* A format qimg recognises but does not read: its name for people
     * ("VirtualBox VDI"); the entry has a probe and nothing else, and
     * api/ refuses to open or create it (formats.c invariant 2). */
    const char *unsupported;
    /* 0..100: how sure the driver is that buf (the first bytes of the file
     * called filename, which may be NULL) is its format. */
    int (*probe)(const uint8_t *buf, size_t len, const char *filename);
    /* Protocol drivers: open 'filename' themselves.  Format drivers: img->file
     * is open; parse it and set img->size, img->backing_filename,
     * img->backing_format.  Messages with blk_error(). */
    int (*open)(BlkNode *img, const char *filename, const BlkOpenOptions *opts);
    /* Called after the backing chain is open (optional). */
    int (*open_finish)(BlkNode *img);
    void (*close)(BlkNode *img);
    int (*preadv)(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags);
    int (*pwritev)(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags);
    int (*pwrite_zeroes)(BlkNode *img, uint64_t offset, uint64_t bytes, unsigned flags);
    int (*pdiscard)(BlkNode *img, uint64_t offset, uint64_t bytes);
    int (*pwrite_compressed)(BlkNode *img, uint64_t offset, const BlkIOV *qiov);
    /* Copy offloading (qemu-img convert -C): write [offset, offset +
     * bytes) with the bytes of protocol node src at src_offset, moved by
     * the kernel (copy_file_range) instead of through memory; allocating
     * as a write does.  -ENOTSUP (or any -errno) when this node or the
     * kernel cannot: the caller then reads and writes.  Optional. */
    int (*copy_in)(BlkNode *img, uint64_t offset, uint64_t bytes, BlkNode *src,
                   uint64_t src_offset);
    int (*flush)(BlkNode *img);
    /* The last chance at close (qimg_image_close, after its flush failed):
     * a format whose metadata write failed writes back what it holds once
     * more (qcow2: meta.c invariant 13).  *retried false: nothing to retry,
     * the flush's error stands; else 0, or -errno with the message to be
     * reported as it is (blk_error).  Optional. */
    int (*close_retry)(BlkNode *img, bool *retried);
    /* Where guest [offset, offset + bytes) lies, for a request that goes
     * straight to a protocol node (api/aio.c's io_uring engine); false: use
     * preadv/pwritev.  A true return holds the mapping until direct_end;
     * with d->crypto set, the caller encrypts what it writes and decrypts
     * what it read there.  Optional. */
    bool (*direct_begin)(BlkNode *img, uint64_t offset, uint64_t bytes, bool write,
                         struct BlkDirect *d);
    void (*direct_end)(BlkNode *img, struct BlkDirect *d);
    /* A write without flags that direct_begin did not take, planned for
     * the io_uring engine (api/aio.c invariant 13): registered, its
     * clusters allocated and the file covering them, without waiting for
     * anything but the metadata lock; d says where head zero bytes, the
     * caller's data and tail zero bytes go, as one write.  false: nothing
     * planned (the write needs a read, an order, a data file ...).  Or
     * the write joins a plan in flight whose clusters hold its range
     * (d->joined).  d must stay where it is until the plan ends (the plan
     * keeps it); the plan is held until alloc_end.  Optional. */
    bool (*alloc_begin)(BlkNode *img, uint64_t offset, uint64_t bytes,
                        struct BlkDirect *d);
    /* The data write of a request of alloc_begin's plan ended with ret
     * (called once per request; again, with wait, after -EWOULDBLOCK).
     * -EINPROGRESS: other requests of the plan are still writing, and the
     * last of them ends it: this one stays parked until it is handed back
     * in that caller's d->group.  Else the plan ends here: on the owner's
     * ret 0, link it; on a failure, undo it (nothing linked, d->unlinked
     * set: the caller runs the requests again the normal way).  wait
     * false: -EWOULDBLOCK, with nothing more done, rather than wait for
     * the metadata lock.  0, or -errno with a message recorded (the link
     * failed: the requests fail). */
    int (*alloc_end)(BlkNode *img, struct BlkDirect *d, int ret, bool wait);
    /* Protocol nodes that take asynchronous requests themselves (RBD):
     * start a read (write: true, a write without flags) of q at offset
     * and return 0 at once; done(opaque, 0 or -errno) runs once, later, on
     * a thread of the protocol's, with a failure's message recorded for
     * that thread (blk_error), and q untouched after it.  A negative
     * return: nothing started, done never runs; use preadv/pwritev.
     * Optional (api/aio.c). */
    int (*aio_rw)(BlkNode *img, bool write, uint64_t offset, const BlkIOV *q,
                  BlkAioDone *done, void *opaque);
    /* Status of this layer only, for [offset, offset+bytes).  Returns 0 or -errno. */
    int (*block_status)(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st);
    int (*truncate)(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                    bool shrink);
    int64_t (*get_allocated_size)(BlkNode *img);
    /* Fill the driver-specific parts of info (cluster size, qcow2 data). */
    int (*get_info)(BlkNode *img, BlkInfo *info);
    int (*create)(const char *filename, const BlkCreateOptions *opts);
    /* qemu-img measure for a new image of this format made with opts and
     * holding src (NULL: opts' size of nothing). */
    int (*measure)(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                   BlkMeasure *out);
    /* Name backing (NULL: none) of format fmt in the image header, after
     * making everything written durable (optional). */
    int (*set_backing)(BlkNode *img, const char *backing, const char *fmt);
    /* Drop every cluster so that the image reads through its backing file,
     * then flush (optional). */
    int (*make_empty)(BlkNode *img);
    /* qemu-img bitmap's operations on persistent bitmaps (optional). */
    int (*bitmap_op)(BlkNode *img, BlkBitmapOp op, const char *name,
                     uint32_t granularity);
    /* The dirty extents (GArray of BlkRange) of a persistent bitmap. */
    int (*bitmap_extents)(BlkNode *img, const char *name, GArray **out);
    /* Set the bits of bitmap name covering r[0..n). */
    int (*bitmap_merge)(BlkNode *img, const char *name, const BlkRange *r, size_t n);
    /* Write the maintained bitmaps back now (as close does). */
    int (*bitmaps_store)(BlkNode *img);
    /* qemu-img amend: change the creation options opts names (optional). */
    int (*amend)(BlkNode *img, const BlkAmendOptions *opts);
    /* What this image's persistent bitmaps take in an image of
     * cluster_size (optional: -ENOTSUP, it cannot have any). */
    int (*bitmaps_size)(BlkNode *img, uint64_t cluster_size, uint64_t *bytes);
    /* vmstate area (qcow2): positional access beyond the disk end. */
    int (*save_vmstate)(BlkNode *img, uint64_t pos, const BlkIOV *qiov);
    int (*load_vmstate)(BlkNode *img, uint64_t pos, const BlkIOV *qiov);
    /* True if a freshly created image of this driver reads as zeros. */
    bool (*has_zero_init)(BlkNode *img);
    /* Internal snapshots.  create: sn->name, vm_state_size, date_*, vm_clock_nsec
     * and icount are inputs; the driver assigns sn->id (g_strdup).  Messages via
     * blk_error().  id_or_name: ID first, then name, as QEMU looks them up. */
    int (*snapshot_create)(BlkNode *img, BlkSnapshotInfo *sn);
    /* Optional: whether snapshot_create would be refused before it does
     * anything (0, or its error via blk_error()), asked before a vmstate
     * save writes the state. */
    int (*snapshot_check)(BlkNode *img);
    int (*snapshot_goto)(BlkNode *img, const char *id_or_name);
    int (*snapshot_delete)(BlkNode *img, const char *id_or_name);
    /* A new array of BlkSnapshotInfo (strings owned by the array's entries). */
    GArray *(*snapshot_list)(BlkNode *img);
    /* Fault injection: the next requests belong to step ev (optional). */
    void (*event)(BlkNode *img, BlkEvent ev);
    /* Access-pattern hint for the node's bytes (blk_advise): best effort,
     * changes nothing but speed (optional). */
    void (*advise)(BlkNode *img, BlkAdvice advice);
    /* Breakpoints (QEMU's blkdebug break/remove_break/resume; faulty.c):
     * event is QEMU's name (BLK_DEBUG_BREAK only).  Optional. */
    int (*debug_op)(BlkNode *img, BlkDebugOp op, const char *event, const char *tag);
    /* Tags of the requests suspended now, oldest first (g_strfreev);
     * only_new: those not returned before. */
    char **(*debug_suspended)(BlkNode *img, bool only_new);
    /* Offline check and repair (qemu-img check). */
    int (*check)(BlkNode *img, struct BlkCheckResult *res, unsigned fix);
    /* Format drivers: what img->file is to them (invariant 4). */
    BlkNodeRole file_role;
    /* Assigns host space as it writes, in the order of blk_order tickets
     * (blk_order_wait/blk_order_allocated): api/copy.c hands it tickets. */
    bool allocates;
    /* The backing file names this format records are held to names.c
     * invariant 1 (api/open.c), as its own data file names are by the
     * driver. */
    bool confine_names;
    /* Protocol and filter nodes: hold exactly the permissions perm and share
     * shared (BLK_PERM_*), or fail with the message recorded (optional). */
    int (*set_perm)(BlkNode *img, unsigned perm, unsigned shared);
    /* Protocol nodes with no one folder to resolve a relative name in (a
     * quorum's children may lie in several): QEMU's message; NULL for a
     * node whose name is its folder's. */
    const char *no_dirname;
    /* Protocol nodes whose block status maps nothing to an offset (a
     * quorum's bytes lie in several files): a format over it gives none. */
    bool no_offsets;
};

/* ---- errors (invariant 2; block/error.c) ---- */

/* Record a message for the current thread unless one is recorded already
 * (the first failure wins, error.c invariant 2); returns -errnum. */
int blk_error(int errnum, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* Record the message in place of the current one (a deliberate rewording). */
int blk_error_replace(int errnum, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* "PREFIX: " in front of the current message (or of strerror(-ret));
 * returns ret (or -EIO when ret >= 0). */
int blk_error_prefix(int ret, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* Forget the current thread's message. */
void blk_error_clear(void);
/* The current thread's message, or NULL. */
const char *blk_error_message(void);
/* Clean-up whose failures are ignored: mark before, unwind after; the
 * unwind forgets a message only when none was recorded at the mark (one
 * recorded before stays, error.c invariant 2). */
bool blk_error_mark(void);
void blk_error_unwind(bool had_error);
/* The errno recorded with the current message, 0 if none. */
int blk_error_code(void);
/* The message (g_free; NULL if none), and forget it. */
char *blk_error_take(void);

/* ---- drivers ---- */

extern const BlkDriver blk_file_driver;
/* Add drv to the driver table (block.c invariant 4), or replace the one of
 * the same name.  The format drivers are registered by api/. */
#define BLK_MAX_DRIVERS 32
int blk_driver_register(const BlkDriver *drv);
/* The format driver the first bytes of a file (buf, len <= 512) called
 * filename (NULL: no name) probe as, or NULL when no registered driver
 * claims them. */
const BlkDriver *blk_probe_buf(const uint8_t *buf, size_t len, const char *filename);
/* Bytes the probe looks at. */
#define BLK_PROBE_BUF_SIZE 512
/* The registered driver of that name ("file": the file protocol), or NULL. */
const BlkDriver *blk_find_format(const char *name);
/* Append the names of the registered drivers that read their format
 * (unsupported unset) to names, as const strings. */
void blk_driver_names(GPtrArray *names);

/* ---- nodes ---- */

/* ---- protocols (block/protocol.c: the protocol table) ---- */

/* Flags of blk_open_protocol(). */
enum {
    BLK_OPEN_USER_NAME = 1 << 0, /* the caller's own name: any protocol */
};
/* One entry of the protocol table (protocol.c invariant 1). */
typedef struct BlkProtocol BlkProtocol;
struct BlkProtocol {
    const char *name;            /* QEMU's driver name ("file", "nbd", ...) */
    const char *const *prefixes; /* names it takes (NULL-terminated); none: file */
    bool test_node;              /* PREFIX ARG:NAME over NAME (protocol.c inv. 3) */
    bool is_path;                /* its names are local paths (protocol.c inv. 4) */
    BlkNode *(*open)(const BlkProtocol *p, const char *filename,
                     const BlkOpenOptions *opts, BlkNodeRole role, unsigned flags);
    /* qemu-img create's image at the protocol level: size bytes, prealloc
     * and object_size (an RBD image's; 0: the default) as the protocol
     * takes them, or refused naming the option.  NULL: cannot create. */
    int (*create)(const char *filename, uint64_t size, BlkPrealloc prealloc,
                  uint64_t object_size);
};
/* The protocol 'filename' selects: any entry with BLK_OPEN_USER_NAME, the
 * file protocol without it (invariant 5). */
const BlkProtocol *blk_protocol_for(const char *filename, unsigned flags);
/* True when the plain name under filename's test nodes is a local path
 * (a file), false for a protocol's name (nbd://...). */
bool blk_protocol_is_path(const char *filename, unsigned flags);
/* A protocol node for 'filename' locked for 'role' (invariant 6): the file
 * protocol, or with BLK_OPEN_USER_NAME whatever the name selects, e.g. an
 * NBD export or a "blkdebug:RULES:FILE" / "record:LOG:FILE" test node
 * (invariant 5). */
BlkNode *blk_open_protocol(const char *filename, const BlkOpenOptions *opts,
                           BlkNodeRole role, unsigned flags);
/* Create what the caller's name under its test-node prefixes names, with
 * its protocol's create (an RBD image for an "rbd:" name, a file
 * otherwise). */
int blk_create_protocol(const char *filename, uint64_t size, BlkPrealloc prealloc,
                        uint64_t object_size);
/* 0, or the error for a caller's name whose plain name starts with a
 * protocol qimg has not: "Unknown protocol 'P'" (protocol.c invariant 8). */
int blk_protocol_check_name(const char *filename);
/* The name inside a user name with test-node prefixes. */
const char *blk_plain_name(const char *filename);
/* A caller's "file:NAME" as the path QEMU's file protocol opens (g_free):
 * NAME, or "./NAME" when NAME has a ':' before any '/' (protocol.c
 * invariant 7). */
char *blk_file_protocol_path(const char *filename);

/* ---- names.c: file names read from images ---- */

/* The path to open for file 'name' that the image opened as image_name
 * (its plain name; image_is_path: a local file) records as its 'what'
 * ("extent", "backing file", ...): QEMU's path (names.c invariant 2),
 * after names.c invariant 1's checks unless trusted.  0 (*path: g_free)
 * or -errno with the message. */
int blk_image_name_path(const char *image_name, bool image_is_path, const char *what,
                        const char *name, bool trusted, char **path);
/* Why an untrusted name an image records is refused before anything is
 * looked up (names.c invariant 1: a protocol, an absolute path, ".."), or
 * NULL. */
const char *blk_image_name_refusal(const char *name);
/* Open a file that belongs with 'like' (an external data file) as
 * blk_open_file_opts() does, recorded in the same log when 'like' is a
 * recording node. */
BlkNode *blk_open_file_like(BlkNode *like, const char *filename,
                            const BlkOpenOptions *opts, BlkNodeRole role);
/* The recording node (block/record.c) over child, logging to log_path
 * (shared by every node of the process naming it); takes child, even on
 * failure. */
BlkNode *blk_open_record(const char *log_path, BlkNode *child);
bool blk_is_record_node(const BlkNode *img);
const char *blk_record_log_path(const BlkNode *img);
/* A ring write on recording node img (uring.c invariant 6) completed with
 * ret: log it (record.c invariant 5).  ret, or the log's error. */
int blk_record_ring_done(BlkNode *img, uint64_t offset, const BlkIOV *q, int ret);

/* Open the file protocol on 'filename' (a plain file or block device). */
BlkNode *blk_open_file(const char *filename, bool read_only, BlkCacheMode cache);
/* The same for a node in 'role' (invariant 4), with opts' read_only, cache,
 * force_share, no_io, resize and deny_write. */
BlkNode *blk_open_file_opts(const char *filename, const BlkOpenOptions *opts,
                            BlkNodeRole role);
/* Invariant 4: make the protocol node img hold the permissions of 'role' for
 * an open with opts (o->read_only as in effect).  Returns 0 or -errno with the
 * message recorded; nodes without locks accept anything. */
int blk_set_role_perm(BlkNode *img, BlkNodeRole role, const BlkOpenOptions *opts);
/* The message msg (errno code) of the failed open of 'filename', without the "Could not
 * open 'filename': " in front, as QEMU words it one layer down: kept only
 * when what follows is the bare strerror (a file-level failure). */
const char *blk_open_error_detail(const char *msg, int code, const char *filename);
/* Close a node and everything below it (its file, data file, backing). */
void blk_close(BlkNode *img);
/* Resolve a backing file name relative to the folder of 'image_filename':
 * that name up to its last '/', as written, then the backing name. */
char *blk_resolve_backing_name(const char *image_filename, const char *backing);
/* A backing name that names its file without a folder to resolve it in
 * (an absolute path, a protocol's name, a json: name). */
bool blk_backing_name_is_absolute(const char *backing);

/* ---- requests (invariant 3): use these, never img->drv directly ---- */

int blk_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags);
int blk_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags);
int blk_pread(BlkNode *img, uint64_t offset, void *buf, size_t bytes);
int blk_pwrite(BlkNode *img, uint64_t offset, const void *buf, size_t bytes,
               unsigned flags);
int blk_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes, unsigned flags);
int blk_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes);
int blk_flush(BlkNode *img);
/* Invariant 7: the flush that makes the write just done on img durable
 * (writethrough); as blk_flush, but that write is not yet counted. */
int blk_flush_fua(BlkNode *img);
/* Invariant 7, for the node that takes events: whether this thread's flush
 * of img is the one that raises BLKEV_FLUSH_TO_DISK (true once). */
bool blk_flush_to_disk_take(BlkNode *img);
/* BlkDriver.copy_in: -ENOTSUP, with nothing recorded by blk_error, where
 * img's driver has none or img has request limits (a test node). */
int blk_copy_in(BlkNode *img, uint64_t offset, uint64_t bytes, BlkNode *src,
                uint64_t src_offset);
/* Can protocol node dst take copy_in from protocol node src at all (the
 * same driver, one with copy_in, neither with request limits)?  A format
 * driver asks before it allocates anything for a copy. */
bool blk_can_copy_range(BlkNode *dst, BlkNode *src);
int blk_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st);
int64_t blk_getlength(BlkNode *img);
/* The status of [offset, +bytes) of img read through its backing chain
 * (QEMU's block status "above"): the first layer that defines the range,
 * at *depth below img; on failure *failed (may be NULL) is the node that
 * failed. */
int blk_block_status_chain(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st,
                           int *depth, BlkNode **failed);
int blk_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                 bool shrink);
int64_t blk_get_allocated_size(BlkNode *img);

/* Invariant 4: write generation of the protocol node under img (after
 * filters), and the generation its last successful flush covered. */
uint64_t blk_write_gen(BlkNode *img);
/* The end of the furthest write, zero write or copy requested of img (not
 * of its children), failed ones included: what the requests may have
 * made of the file's length, as opposed to a resize. */
uint64_t blk_wr_highest(BlkNode *img);
/* Raise blk_wr_highest to end: for a write sent to img's file without
 * blk_pwritev (the io_uring engine, uring.c invariant 1). */
void blk_note_write(BlkNode *img, uint64_t end);
uint64_t blk_flushed_gen(BlkNode *img);
/* True when every write that completed before write generation gen is
 * durable on img's protocol node. */
bool blk_is_durable(BlkNode *img, uint64_t gen);
/* Debug-build check of a format driver's ordering rule where a dependent
 * write is issued: everything written to node up to generation gen is
 * durable.  'rule' names the driver's invariant for the failure message. */
static inline void blk_assert_durable(BlkNode *node, uint64_t gen, const char *rule)
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
/* For protocol drivers: count a completed write-like request; a successful
 * flush that started at generation gen. */
void blk_gen_bump(BlkNode *img);
void blk_gen_flushed(BlkNode *img, uint64_t gen);

/* A filter node takes img->filtered's size after a request: it only grows
 * while requests run (grow, concurrent writers never shrink it), a
 * truncate sets it; atomic, as the file node's (file.c invariant 5). */
void blk_filter_size_update(BlkNode *img, bool grow);

/* The backing node of img, or of the node a filter over a format filters
 * (QEMU's bdrv_cow_bs(bdrv_skip_filters())); NULL: none. */
BlkNode *blk_cow_backing(BlkNode *img);

/* Announce the metadata step the next requests on img belong to (no-op
 * unless img is a fault-injecting node). */
void blk_event(BlkNode *img, BlkEvent ev);
const char *blk_event_name(BlkEvent ev);
/* Tell the first node down img and its protocol children (img->file)
 * that takes hints how its bytes are about to be read (a file: the
 * kernel's read-ahead).  Best effort: a node without hints ignores it. */
void blk_advise(BlkNode *img, BlkAdvice advice);
/* Breakpoints on the first node below top (its protocol child, or what a
 * filter node filters) that has them; -ENOTSUP if none does. */
int blk_debug_op(BlkNode *top, BlkDebugOp op, const char *event, const char *tag);
/* That node's suspended requests (debug_suspended); NULL if none. */
char **blk_debug_suspended(BlkNode *top, bool only_new);
/* block/null.c: QEMU's null-co:// and null-aio:// nodes, sized and read
 * as opts->null_* say; their drivers are registered as the formats
 * "null-co" and "null-aio" (the node is the image, as QEMU's). */
BlkNode *blk_open_null(const char *filename, const BlkOpenOptions *opts);
extern const BlkDriver blk_null_co_driver;
extern const BlkDriver blk_null_aio_driver;
/* faulty-config.c: QEMU's blkdebug event name as the step qimg announces
 * (*ev: BlkEvent, BLK_FAULTY_WRITE_AIO, or -1 with *read: the read
 * requests); -ENOENT for a name QEMU does not have, -ENOTSUP (with a
 * message) for one qimg cannot match. */
/* QEMU's write_aio: every write of guest data, data_write and
 * cow_data_write (rule name "write_aio"). */
#define BLK_FAULTY_WRITE_AIO (-3)
int blk_faulty_qemu_event(const char *name, int *ev, bool *read);

/* The fault-injecting node (block/faulty.c) over 'filename'; 'rules' as in
 * "event=l2_update,errno=5,nth=1[;...]".  blk_open_protocol() uses it for
 * user names of the form "blkdebug:RULES:FILE". */
/* block/nbd.c (with libnbd) opens libnbd's URIs (nbd://, nbd+unix://,
 * nbds://...) and qemu-img's nbd:unix:PATH / nbd:HOST:PORT.  context: the
 * meta context block status reads (QEMU's x-dirty-bitmap), NULL for
 * base:allocation (nbd.c invariant 5); reconnect_delay: QEMU's, in
 * seconds, 0 for none (nbd.c invariant 7). */
BlkNode *blk_open_nbd(const char *filename, bool read_only, const char *context,
                      uint64_t reconnect_delay);
/* The NBD node's driver, registered as the format "nbd" (an image opened
 * with driver=nbd is the node itself, as QEMU's). */
extern const BlkDriver blk_nbd_driver;
/* block/null.c: QEMU's null-co:// and null-aio:// nodes, sized and read
 * as opts->null_* say; their drivers are registered as the formats
 * "null-co" and "null-aio" (the node is the image, as QEMU's). */
BlkNode *blk_open_null(const char *filename, const BlkOpenOptions *opts);
extern const BlkDriver blk_null_co_driver;
extern const BlkDriver blk_null_aio_driver;
/* faulty-config.c: QEMU's blkdebug config file at path as fault rules
 * (*rules: g_free), or -errno with QEMU's message. */
int blk_faulty_config_rules(const char *path, char **rules);
/* faulty-config.c: QEMU's blkdebug rule groups in kf ("inject-error N",
 * "set-state N", each with its keys: a config file's, or blkdebug's
 * inject-error/set-state options when from_options) as fault rules
 * (*rules: g_free), or -errno with QEMU's message. */
int blk_faulty_groups_rules(GKeyFile *kf, bool from_options, char **rules);
/* A fault node's (blk_open_faulty's) requests held to align, a power of
 * two: its alignment limit (block/limits.c); -EINVAL with QEMU's message
 * when its limits cannot meet it. */
int blk_faulty_set_align(BlkNode *img, uint64_t align);
/* faulty-limits.c: one "KEY=N" of a fault node's "limits,..." rule into l,
 * and QEMU's checks of limits over a child aligned to child_align (fact
 * 1); -EINVAL with QEMU's message. */
int blk_faulty_parse_limit(const char *item, BlkLimits *l);
int blk_faulty_check_limits(const BlkLimits *l, uint32_t child_align);
BlkNode *blk_open_faulty(const char *rules, const char *filename, bool read_only,
                         BlkCacheMode cache);
/* The fault-injecting node with 'rules' over the format node child (QEMU's
 * blkdebug with a format as its image): a filter that answers for child
 * and takes it, even on failure (faulty.c). */
BlkNode *blk_open_faulty_over(const char *rules, BlkNode *child);

/* Create a file (protocol level): O_CREAT|O_TRUNC, size bytes. */
int blk_file_create(const char *filename, uint64_t size, BlkPrealloc prealloc);
/* The protocol node of a file just created for a new image, locked as the
 * read-write image will be, writeback; the caller's own name (a
 * "record:LOG:FILE" name records the creation).  NULL with the message
 * recorded; *ret the error. */
BlkNode *blk_open_new_image(const char *filename, int *ret);

/* Reads past the end of a backing node return zeros: read [offset, +bytes)
 * of 'img' into qiov, zero-filling what lies beyond img->size. */
/* Copy-on-read (block/cor.c): read q at offset from the format node img,
 * writing what img does not hold itself into it (cor.c invariants 1-3);
 * 0 or -errno with a message. */
int blk_cor_preadv(BlkNode *img, uint64_t offset, const BlkIOV *q);
/* Serializes copy-on-read reads with the writes of copy-on-read images
 * (cor.c invariant 4). */
void blk_cor_lock(void);
void blk_cor_unlock(void);
int blk_preadv_padded(BlkNode *img, uint64_t offset, const BlkIOV *qiov);

/* ---- order.c: allocations in ticket order across threads ---- */

typedef struct BlkOrder BlkOrder;
BlkOrder *blk_order_new(void);
void blk_order_free(BlkOrder *o);
/* After an error: every wait returns at once (order.c invariant 3). */
void blk_order_cancel(BlkOrder *o);
/* This thread's requests until blk_order_leave() are ticket 'ticket''s
 * (tickets 0, 1, 2, ..., each entered once, order.c invariant 1). */
void blk_order_enter(BlkOrder *o, uint64_t ticket);
/* The next allocating request is the ticket's last (invariant 2). */
void blk_order_mark_last(void);
/* Pass the turn if it was not passed yet (waiting for it first). */
void blk_order_leave(void);
/* Drivers: before planning allocations, wait for this thread's turn; after
 * a request's allocations, pass it if the request was marked last.  No-ops
 * without a ticket. */
void blk_order_wait(void);
void blk_order_allocated(void);

/* A request's in-order part handed to the turn (order.c invariant 4), in a
 * struct of the driver's that embeds it.  run gets the batch -- jobs of
 * consecutive tickets with the same run and opaque, linked by next, in
 * ticket order -- and owns every job of it from then on; it returns 0 or
 * -errno with a message recorded (the order keeps the first, invariant 7).
 * discard: the order was cancelled or failed: release the jobs, run
 * nothing. */
typedef struct BlkOrderJob BlkOrderJob;
typedef int (*BlkOrderRun)(void *opaque, BlkOrderJob *jobs, bool discard);
struct BlkOrderJob {
    BlkOrderRun run;
    void *opaque;
    uint64_t ticket;   /* (order.c's) */
    BlkOrderJob *next; /* the batch's next job, NULL at its end */
};
/* Drivers, instead of blk_order_wait() .. blk_order_allocated() in the last
 * request of a ticket: 1 = the job is queued and the turn passed (it runs
 * later, maybe in another thread: invariant 4); 0 = nothing done (no
 * ticket, not the ticket's last request, or the order was cancelled): do
 * the work in line; -errno = an earlier job failed (invariant 7, message
 * recorded), the job is not queued. */
int blk_order_defer(BlkOrderJob *job);
/* After the last ticket was left (every thread done with the order): the
 * jobs left by a cancel discarded; the first failure of a job, or 0. */
int blk_order_drain(BlkOrder *o);

/* Where this thread's requests waited or worked (api/copy.c's stats,
 * qimg/copy.h QimgCopyStats): nanoseconds, only ever growing; a reader
 * takes differences (order.c invariant 8). */
typedef struct BlkThreadTimes {
    uint64_t turn_ns;     /* waiting for the turn (blk_order_wait, a pass) */
    uint64_t compress_ns; /* compressing a cluster for a compressed write */
} BlkThreadTimes;
BlkThreadTimes *blk_thread_times(void);
uint64_t blk_now_ns(void); /* CLOCK_MONOTONIC */

/* ---- uring.c: io_uring reads and writes of O_DIRECT file nodes ---- */

typedef struct BlkUring BlkUring;
/* ret: 0, or -errno / -EAGAIN (short: run it again the normal way). */
typedef void (*BlkUringDone)(void *opaque, int ret);

/* A ring of 'entries' and its reaper thread, which calls batch_end (if
 * non-NULL) after each batch of callbacks (uring.c invariant 4); NULL with
 * *err = errno when the kernel has none for us. */
BlkUring *blk_uring_new(unsigned entries, void (*batch_end)(void *opaque),
                        void *batch_opaque, int *err);
/* Nothing may be in flight, and no consumer between enter and leave. */
void blk_uring_free(BlkUring *u);
/* A thread that waits for completions itself (uring.c invariant 5): enter,
 * poll blk_uring_fd() for POLLIN and blk_uring_reap() (the callbacks and
 * batch_end run there; returns how many completed), leave. */
void blk_uring_consumer_enter(BlkUring *u);
void blk_uring_consumer_leave(BlkUring *u);
int blk_uring_fd(BlkUring *u);
unsigned blk_uring_reap(BlkUring *u);
/* A plug scope of this thread on u (uring.c invariant 7): requests
 * submitted until the matching unplug are held back and handed to the
 * kernel together by it (or earlier).  plug returns the outer scope's ring
 * (NULL: none), which unplug restores; plug(NULL) opens a scope of no ring
 * (requests go at once), which plug(outer) ends. */
BlkUring *blk_uring_plug(BlkUring *u);
void blk_uring_unplug(BlkUring *u, BlkUring *outer);
/* Submit what u holds back now (uring.c invariant 7). */
void blk_uring_flush(BlkUring *u);
/* System calls that handed requests to the kernel. */
uint64_t blk_uring_submits(BlkUring *u);
/* May the ring take requests of node at all (a file node, or a recording
 * node over one: uring.c invariant 6)? */
bool blk_uring_node_ok(BlkNode *node);
/* May this read of node go to the ring (uring.c invariant 1)? */
bool blk_uring_can_read(BlkNode *node, uint64_t offset, const BlkIOV *q);
/* May this write of node go to the ring (uring.c invariant 1)? */
bool blk_uring_can_write(BlkNode *node, uint64_t offset, const BlkIOV *q);
/* Submit it (held back until the scope's end inside a plug scope of u:
 * uring.c invariant 7); cb runs on the reaper thread or in blk_uring_reap
 * (q's iovec array and buffers must live until then).  0, or -errno
 * (-EAGAIN: use the node's path) with nothing queued. */
int blk_uring_readv(BlkUring *u, BlkNode *node, uint64_t offset, const BlkIOV *q,
                    BlkUringDone cb, void *opaque);
int blk_uring_writev(BlkUring *u, BlkNode *node, uint64_t offset, const BlkIOV *q,
                     BlkUringDone cb, void *opaque);

#endif
