/*
 * vhdx/vhdx.h: the VHDX driver, for the driver table (api/ registers it),
 * and the state its files share (vhdx.c, meta.c, log.c, create.c).  See
 * vhdx.c for the driver's invariants, log.c for the log's.
 */
#ifndef QIMG_VHDX_H
#define QIMG_VHDX_H

#include "block/block.h"
#include "block/tcache.h"
#include "vhdx/format.h"

extern const BlkDriver blk_vhdx_driver;

typedef struct VhdxOverlay VhdxOverlay;

/* A region of the file metadata lives in (regions must not overlap). */
typedef struct VhdxSpan {
    uint64_t start, end;
    const char *what;
} VhdxSpan;

typedef struct VhdxState {
    GMutex lock;
    VhdxHeader hdr[2];
    int cur;           /* the current header */
    VhdxGuid session;  /* file_write_guid of this session's header updates */
    bool wrote_header; /* a header was updated in this session */
    VhdxRegion bat_rt, meta_rt;
    VhdxSpan spans[4]; /* log, BAT, metadata, header section */
    unsigned nspans;
    /* metadata */
    uint32_t block_size;
    uint32_t params; /* VHDX_PARAM_* */
    uint64_t disk_size;
    uint32_t logical_sector, physical_sector;
    VhdxGuid page83;
    bool has_parent;
    VhdxGuid parent_linkage; /* the parent's data write GUID, if recorded */
    bool has_linkage;
    /* BAT */
    uint64_t chunk_ratio;    /* payload blocks per sector bitmap block */
    uint64_t payload_blocks; /* blocks of the virtual disk */
    uint64_t bat_entries;
    BlkTCache *bat;     /* 4 KiB pages; key = byte offset in the BAT */
    BlkTCache *bitmaps; /* differencing: 4 KiB pages of bitmaps; key = file offset */
    /* log */
    uint64_t log_seq;     /* next sequence number to write */
    VhdxOverlay *overlay; /* a log replayed in memory (read-only open) */
    bool replayed;        /* the log was replayed into the file at open */
    int sticky;           /* a failed metadata write (DESIGN.md rule 6) */
} VhdxState;

/* vhdx.c: read the file as the open image sees it (through a log replayed
 * in memory, log.c invariant 4). */
int vhdx_file_read(BlkNode *img, uint64_t offset, void *buf, size_t len);
/* vhdx.c: write the non-current header as the current one, with log
 * GUID log_guid (file write GUID the session's; a new data write GUID on
 * the session's first update), and make it durable. */
int vhdx_update_header(BlkNode *img, const VhdxGuid *log_guid);

/* meta.c: the metadata region (file parameters, sizes, page 83 id, parent
 * locator): fills s, and img->backing_filename for a differencing disk. */
int vhdx_parse_metadata(BlkNode *img);

/* log.c */
/* Open: find the log's active sequence (log.c invariants 1-3) and replay
 * it -- into the file on a read-write open, in memory (s->overlay) on a
 * read-only one. */
int vhdx_log_open(BlkNode *img);
/* Write the n 4 KiB metadata sectors (file offsets offs[i], bytes
 * pages[i]) through the log (log.c invariant 5); the data they describe
 * must be durable already. */
int vhdx_log_commit(BlkNode *img, const uint64_t *offs, uint8_t *const *pages, size_t n);
/* Patch buf (file bytes [offset, +len)) with what the overlay replays. */
int vhdx_overlay_patch(BlkNode *img, uint64_t offset, uint8_t *buf, size_t len);
void vhdx_overlay_free(VhdxOverlay *o);

/* create.c */
int vhdx_create(const char *filename, const BlkCreateOptions *opts);
int vhdx_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                 BlkMeasure *out);

/* The BAT index of payload block b, and of the sector bitmap block of b. */
static inline uint64_t vhdx_payload_index(const VhdxState *s, uint64_t b)
{
    return b + b / s->chunk_ratio;
}

static inline uint64_t vhdx_bitmap_index(const VhdxState *s, uint64_t b)
{
    return (b / s->chunk_ratio) * (s->chunk_ratio + 1) + s->chunk_ratio;
}

#endif
