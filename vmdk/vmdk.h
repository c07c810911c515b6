/*
 * vmdk/vmdk.h: the VMDK driver's state, shared by the vmdk/ files.
 *
 * Files: vmdk.c (the driver table, open, reads, block status, info,
 * check), grain.c (reading compressed grains), extent.c (opening extents:
 * sparse headers, footers, grain directories), map.c (grain tables: the
 * cache and lookups), desc.c (the text descriptor), header.c (binary
 * codecs).
 *
 * Owns: VmdkState and VmdkExtent.
 *
 * Invariants (cited as "vmdk.h invariant N"):
 *  1. Extents tile the disk: extents[i].start == extents[i - 1].end, the
 *     first starts at 0, the last ends at img->size; each is at least one
 *     sector; the sums are checked (format.h invariant 2).
 *  2. An extent whose file is NULL was not opened (a metadata-only open,
 *     BlkOpenOptions.no_data_files): its name and size are known, and any
 *     request reaching it fails with a message naming it.
 *  3. The grain directory of a sparse extent is held whole, decoded into
 *     GT sector offsets (0: no table), after it was checked to lie inside
 *     the extent file and to have at most VMDK_MAX_GD_ENTRIES entries;
 *     grain tables are never held whole, only in map.c's bounded cache.
 *  4. s->lock covers the grain-table cache and allocation; guest data and
 *     compressed grains are read with it dropped.
 */
#ifndef QIMG_VMDK_H
#define QIMG_VMDK_H

#include "block/block.h"
#include "vmdk/format.h"

#define VMDK_DESC_MAX ((1u << 20) - 1)     /* QEMU's bound on a descriptor read */
#define VMDK_DESC_AREA (20u * VMDK_SECTOR) /* where CIDs and parents are sought */
#define VMDK_MAX_EXTENT_NAME 511u
#define VMDK_MAX_PARENT_NAME 4095u
#define VMDK_MAX_EXTENTS 16384u
#define VMDK_MAX_CREATE_TYPE 127u
#define VMDK_MAX_COMPRESSED_GRAIN (16u << 20) /* inflate buffers per read */

/* One extent line of a descriptor (desc.c invariant 3). */
typedef struct VmdkExtentLine {
    char access[11];
    int64_t sectors;
    char type[11];
    char name[VMDK_MAX_EXTENT_NAME + 1];
    int64_t offset; /* FLAT: sectors into the file; -1 when absent */
} VmdkExtentLine;

typedef struct VmdkExtent {
    BlkNode *file;  /* NULL: not opened (invariant 2) */
    bool own_file;  /* opened for this extent (else img->file) */
    char *filename; /* the path it is opened by (QEMU's extent filename) */
    char *type;     /* descriptor type ("SPARSE", ...), NULL: monolithic */
    uint64_t start; /* guest bytes [start, end) */
    uint64_t end;
    bool flat;
    uint64_t flat_offset; /* bytes into the file */
    /* sparse extents */
    bool sparse_known; /* the header was read (the file is open) */
    uint32_t version;
    bool compressed;
    bool has_marker;
    bool zero_grain;
    bool sesparse;
    uint64_t grain;      /* bytes per grain */
    uint32_t gtes;       /* entries per grain table */
    uint32_t entry_size; /* bytes per GD and GT entry: 4, or 8 (seSparse) */
    uint64_t gt_cover;   /* guest bytes one grain table maps */
    uint32_t gd_entries;
    uint64_t *gd;        /* GT sector offsets, 0: none (invariant 3) */
    uint64_t *rgd;       /* the redundant GD's, or NULL */
    uint64_t se_gts;     /* seSparse: first sector of the grain tables */
    uint64_t se_grains;  /* seSparse: first sector of the grains */
    uint64_t next_grain; /* bytes: where the next grain is allocated */
    uint64_t grain_gen;  /* file's write generation after the last grain a
                          * table entry was set for (write.c invariant 1) */
    unsigned index;      /* in s->extents */
} VmdkExtent;

typedef struct VmdkGtCache VmdkGtCache;

typedef struct VmdkState {
    BlkNode *img;
    GMutex lock; /* invariant 4 */
    VmdkExtent *extents;
    unsigned num_extents;
    char *create_type;
    uint32_t cid;
    uint32_t parent_cid;
    uint64_t desc_offset; /* bytes of the descriptor in img->file */
    bool cid_checked;     /* the parent's CID matched once (QEMU's cid_checked) */
    bool cid_updated;     /* write.c invariant 3 done for this open */
    VmdkGtCache *gtc;
    GMutex pool_lock;           /* guards pool */
    struct VmdkStreamJob *pool; /* write.c invariant 6: free records */
} VmdkState;

/* ---- desc.c ---- */
int vmdk_desc_value(const char *desc, const char *key, char *out, size_t outlen);
int vmdk_desc_cid(const char *desc, bool parent, uint32_t *cid);
/* *name: g_free, NULL when the descriptor names no parent. */
int vmdk_desc_parent_hint(const char *desc, char **name);
/* Append the RW extent lines (desc.c invariant 3) to out (VmdkExtentLine). */
int vmdk_desc_extents(const char *desc, GArray *out);

/* ---- extent.c ---- */
/* Read the sparse header of ext->file (magic at buf[0..4]) and set up the
 * extent; sectors: its size from the descriptor, 0 for a monolithic one
 * (taken from the header). */
int vmdk_extent_open_sparse(VmdkState *s, VmdkExtent *ext, const uint8_t *head,
                            bool read_only);
int vmdk_extent_open_sesparse(VmdkState *s, VmdkExtent *ext, bool read_only);
void vmdk_extent_clear(VmdkExtent *ext);

/* ---- map.c ---- */
typedef enum VmdkMapKind {
    VMDK_MAP_UNALLOC,    /* read from the parent, or zeros */
    VMDK_MAP_ZERO,       /* a zeroed grain */
    VMDK_MAP_DATA,       /* host bytes at host */
    VMDK_MAP_COMPRESSED, /* a compressed grain (marker) at host */
} VmdkMapKind;

typedef struct VmdkMap {
    VmdkMapKind kind;
    uint64_t host;  /* bytes into ext->file for guest offset (DATA); the
                     * grain's start (COMPRESSED) */
    uint64_t bytes; /* guest bytes from the offset this answer covers */
} VmdkMap;

extern const BlkDriver blk_vmdk_driver;

VmdkGtCache *vmdk_gtc_new(void);
void vmdk_gtc_free(VmdkGtCache *c);
/* What guest offset off (inside ext) maps to, for up to bytes (> 0);
 * a run of grains of one kind (contiguous host bytes for DATA). */
int vmdk_map(VmdkState *s, VmdkExtent *ext, uint64_t off, uint64_t bytes, VmdkMap *m);
/* The same, but a COMPRESSED answer is a run of up to max grains (map.c
 * invariant 4), their start offsets in hosts[] when it is not NULL (room
 * for max); vmdk_map() is max 1. */
int vmdk_map_grains(VmdkState *s, VmdkExtent *ext, uint64_t off, uint64_t bytes,
                    VmdkMap *m, uint64_t *hosts, unsigned max);
/* Set the grain table entry of guest offset off (VMDK3/4 extents) to value
 * in the cached table, dirty until written back (map.c invariant 5). */
int vmdk_gt_set_locked(VmdkState *s, VmdkExtent *ext, uint64_t off, uint32_t value);
bool vmdk_gt_dirty_locked(const VmdkState *s);
/* Write every dirty table (and its redundant copy) to its file. */
int vmdk_gt_writeback_locked(VmdkState *s);

/* ---- grain.c ---- */
#define VMDK_READ_GRAINS 32u /* compressed grains a read maps at once */
/* Read q: bytes from in_grain into the first of the count compressed
 * grains whose records start at hosts[] (grain.c invariants 1, 2). */
int vmdk_read_grains(VmdkExtent *ext, const uint64_t *hosts, unsigned count,
                     uint64_t in_grain, const BlkIOV *q);
/* ---- vmdk.c ---- */
/* The extent a write at off goes to (opened), or NULL with the message. */
VmdkExtent *vmdk_extent_for_write(VmdkState *s, uint64_t off);
/* vmdk.c invariant 3: 0 when the parent's CID is our parentCID. */
int vmdk_check_parent_cid(VmdkState *s);

/* ---- write.c ---- */
int vmdk_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags);
int vmdk_pwrite_compressed(BlkNode *img, uint64_t offset, const BlkIOV *qiov);
int vmdk_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes, unsigned flags);
int vmdk_flush(BlkNode *img);
/* write.c invariant 1's sequence: extent files durable, then the dirty
 * tables written, then durable. */
int vmdk_flush_sequence_locked(VmdkState *s);
/* The free compressed-grain records (write.c invariant 6). */
void vmdk_stream_pool_free(VmdkState *s);

/* ---- create.c ---- */
int vmdk_create(const char *filename, const BlkCreateOptions *opts);

#endif
