/*
 * vmdk/format.h: the VMDK on-disk format, for the vmdk/ files: the sparse
 * extent headers (VMDK4 "KDMV" hosted sparse, VMDK3 "COWD" vmfsSparse,
 * ESXi seSparse), the stream markers and the footer, grain table entry
 * values, and their decoded forms.  Nothing here knows an open image
 * (VmdkState is in vmdk.h).
 *
 * Owns: field offsets of every on-disk structure (checked under
 * _Static_assert), checked arithmetic, and the codecs in header.c.
 *
 * Invariants (cited as "format.h invariant N"):
 *  1. Every number read from an image is decoded with load_le*() into a
 *     host variable, field by field; no on-disk struct is overlaid.
 *  2. Every sum or product involving a value from disk uses vmdk_add() /
 *     vmdk_mul() (or is bounded by a validation the comment names); an
 *     overflow is an error naming the field, never a wrap.
 */
#ifndef QIMG_VMDK_FORMAT_H
#define QIMG_VMDK_FORMAT_H

#include "block/endian.h"

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define VMDK_SECTOR 512u

/* "KDMV" and "COWD" as the first four bytes (QEMU compares them big-endian). */
#define VMDK4_MAGIC 0x4b444d56u
#define VMDK3_MAGIC 0x434f5744u

/* ---- VMDK4 (hosted sparse extent) header: 512 bytes at offset 0 ---- */
enum {
    VMDK4_HDR_MAGIC = 0,               /* be32 "KDMV" */
    VMDK4_HDR_VERSION = 4,             /* le32 1, 2 or 3 */
    VMDK4_HDR_FLAGS = 8,               /* le32 VMDK4_FLAG_* */
    VMDK4_HDR_CAPACITY = 12,           /* le64 sectors */
    VMDK4_HDR_GRANULARITY = 20,        /* le64 sectors per grain */
    VMDK4_HDR_DESC_OFFSET = 28,        /* le64 sector of the embedded descriptor */
    VMDK4_HDR_DESC_SIZE = 36,          /* le64 sectors */
    VMDK4_HDR_NUM_GTES = 44,           /* le32 entries per grain table */
    VMDK4_HDR_RGD_OFFSET = 48,         /* le64 sector of the redundant GD */
    VMDK4_HDR_GD_OFFSET = 56,          /* le64 sector of the GD, or GD_AT_END */
    VMDK4_HDR_GRAIN_OFFSET = 64,       /* le64 sectors of metadata ("overhead") */
    VMDK4_HDR_UNCLEAN = 72,            /* u8 uncleanShutdown */
    VMDK4_HDR_CHECK_BYTES = 73,        /* "\n \r\n" */
    VMDK4_HDR_COMPRESS_ALGORITHM = 77, /* le16 */
    VMDK4_HDR_END = 79,
};
_Static_assert(VMDK4_HDR_VERSION == VMDK4_HDR_MAGIC + 4, "magic is 4 bytes");
_Static_assert(VMDK4_HDR_CAPACITY == VMDK4_HDR_FLAGS + 4, "flags is le32");
_Static_assert(VMDK4_HDR_GRANULARITY == VMDK4_HDR_CAPACITY + 8, "capacity is le64");
_Static_assert(VMDK4_HDR_DESC_OFFSET == VMDK4_HDR_GRANULARITY + 8, "granularity le64");
_Static_assert(VMDK4_HDR_DESC_SIZE == VMDK4_HDR_DESC_OFFSET + 8, "desc offset le64");
_Static_assert(VMDK4_HDR_NUM_GTES == VMDK4_HDR_DESC_SIZE + 8, "desc size le64");
_Static_assert(VMDK4_HDR_RGD_OFFSET == VMDK4_HDR_NUM_GTES + 4, "gtes is le32, packed");
_Static_assert(VMDK4_HDR_GD_OFFSET == VMDK4_HDR_RGD_OFFSET + 8, "rgd offset le64");
_Static_assert(VMDK4_HDR_GRAIN_OFFSET == VMDK4_HDR_GD_OFFSET + 8, "gd offset le64");
_Static_assert(VMDK4_HDR_UNCLEAN == VMDK4_HDR_GRAIN_OFFSET + 8, "grain offset le64");
_Static_assert(VMDK4_HDR_CHECK_BYTES == VMDK4_HDR_UNCLEAN + 1, "unclean is a byte");
_Static_assert(VMDK4_HDR_COMPRESS_ALGORITHM == VMDK4_HDR_CHECK_BYTES + 4, "4 bytes");
_Static_assert(VMDK4_HDR_END == VMDK4_HDR_COMPRESS_ALGORITHM + 2, "algorithm le16");

typedef enum Vmdk4Flag {
    VMDK4_FLAG_NL_DETECT = 1u << 0,  /* the check bytes are valid */
    VMDK4_FLAG_RGD = 1u << 1,        /* a redundant grain directory exists */
    VMDK4_FLAG_ZERO_GRAIN = 1u << 2, /* GTE 1 means a zeroed grain */
    VMDK4_FLAG_COMPRESS = 1u << 16,  /* grains are compressed */
    VMDK4_FLAG_MARKER = 1u << 17,    /* grains and tables carry markers */
} Vmdk4Flag;

#define VMDK4_COMPRESSION_DEFLATE 1u
#define VMDK4_GD_AT_END UINT64_MAX
#define VMDK4_MAX_VERSION 3u
#define VMDK4_MAX_GTES 512u              /* QEMU: "L2 table size too big" above it */
#define VMDK_MAX_GRAIN_SECTORS 0x200000u /* 1 GiB: "Invalid granularity" */
#define VMDK_MAX_GD_ENTRIES (32u * 1024 * 1024) /* QEMU: "L1 size too big" */
#define VMDK_GTE_ZEROED 1u

/* ---- VMDK3 ("COWD", vmfsSparse) header, little-endian le32 fields ---- */
enum {
    VMDK3_HDR_MAGIC = 0,
    VMDK3_HDR_VERSION = 4,
    VMDK3_HDR_FLAGS = 8,
    VMDK3_HDR_DISK_SECTORS = 12,
    VMDK3_HDR_GRANULARITY = 16,
    VMDK3_HDR_GD_OFFSET = 20, /* sectors */
    VMDK3_HDR_GD_SIZE = 24,   /* entries */
    VMDK3_HDR_END = 44,       /* file sectors, cylinders, heads, sectors/track */
};
_Static_assert(VMDK3_HDR_GD_SIZE + 4 + 4 * 4 == VMDK3_HDR_END, "ten le32 after magic");
#define VMDK3_GTES 4096u

/* ---- seSparse: constant header (sector 0) and volatile header ---- */
enum {
    SESPARSE_CONST_MAGIC = 0,
    SESPARSE_CONST_VERSION = 8,
    SESPARSE_CONST_CAPACITY = 16,
    SESPARSE_CONST_GRAIN_SIZE = 24,
    SESPARSE_CONST_GT_SIZE = 32,
    SESPARSE_CONST_FLAGS = 40,
    SESPARSE_CONST_RESERVED = 48, /* four le64 */
    SESPARSE_CONST_VOLATILE_OFFSET = 80,
    SESPARSE_CONST_GD_OFFSET = 128,
    SESPARSE_CONST_GD_SIZE = 136,
    SESPARSE_CONST_GT_OFFSET = 144,
    SESPARSE_CONST_GRAINS_OFFSET = 192,
    SESPARSE_CONST_PAD = 208, /* 304 bytes of zeros */
    SESPARSE_VOL_MAGIC = 0,
    SESPARSE_VOL_REPLAY_JOURNAL = 24,
    SESPARSE_VOL_PAD = 32, /* 480 bytes of zeros */
};
_Static_assert(SESPARSE_CONST_VOLATILE_OFFSET == SESPARSE_CONST_RESERVED + 4 * 8,
               "4 res.");
_Static_assert(SESPARSE_CONST_GD_OFFSET == SESPARSE_CONST_VOLATILE_OFFSET + 6 * 8,
               "volatile and journal header, journal: offset and size each");
_Static_assert(SESPARSE_CONST_GRAINS_OFFSET == SESPARSE_CONST_GT_OFFSET + 6 * 8,
               "grain tables, free bitmap, backmap: offset and size each");
_Static_assert(SESPARSE_CONST_PAD + 304 == VMDK_SECTOR, "the const header is a sector");
_Static_assert(SESPARSE_VOL_PAD + 480 == VMDK_SECTOR, "the volatile header too");
#define SESPARSE_CONST_MAGIC_VALUE 0xcafebabeull
#define SESPARSE_VOL_MAGIC_VALUE 0xcafecafeull
#define SESPARSE_VERSION 0x0000000200000001ull
#define SESPARSE_GRAIN_SECTORS 8u
#define SESPARSE_GT_SECTORS 64u /* 4096 entries of 8 bytes */

/* ---- stream markers (streamOptimized) ---- */
enum {
    VMDK_MARKER_VAL = 0,        /* le64: the grain's LBA, or sectors of metadata */
    VMDK_MARKER_SIZE = 8,       /* le32: compressed bytes (grain), 0 (metadata) */
    VMDK_MARKER_TYPE = 12,      /* le32 VmdkMarkerType (metadata markers only) */
    VMDK_GRAIN_MARKER_LEN = 12, /* a grain marker: val, size, then data */
};
typedef enum VmdkMarkerType {
    VMDK_MARKER_EOS = 0,
    VMDK_MARKER_GT = 1,
    VMDK_MARKER_GD = 2,
    VMDK_MARKER_FOOTER = 3,
} VmdkMarkerType;
/* The footer: marker sector, header sector, end-of-stream sector. */
#define VMDK_FOOTER_BYTES (3u * VMDK_SECTOR)

/* ---- checked arithmetic (invariant 2): true on overflow ---- */

static inline bool vmdk_add(uint64_t a, uint64_t b, uint64_t *r)
{
    return __builtin_add_overflow(a, b, r);
}

static inline bool vmdk_mul(uint64_t a, uint64_t b, uint64_t *r)
{
    return __builtin_mul_overflow(a, b, r);
}

/* ---- decoded headers (header.c) ---- */

/* A VMDK4 header (or a footer's copy of it), every field as on disk. */
typedef struct Vmdk4Header {
    uint32_t version;
    uint32_t flags;
    uint64_t capacity; /* sectors */
    uint64_t granularity;
    uint64_t desc_offset;
    uint64_t desc_size;
    uint32_t num_gtes;
    uint64_t rgd_offset;
    uint64_t gd_offset;
    uint64_t grain_offset;
    uint8_t unclean;
    uint16_t compress_algorithm;
} Vmdk4Header;

typedef struct Vmdk3Header {
    uint32_t version;
    uint32_t flags;
    uint32_t disk_sectors;
    uint32_t granularity;
    uint32_t gd_offset; /* sectors */
    uint32_t gd_size;   /* entries */
} Vmdk3Header;

typedef struct VmdkSeSparseHeader {
    uint64_t capacity;
    uint64_t grain_size;
    uint64_t gt_size;
    uint64_t volatile_offset;
    uint64_t gd_offset;
    uint64_t gd_size;
    uint64_t gt_offset;
    uint64_t grains_offset;
} VmdkSeSparseHeader;

/* Decode the 512-byte sector buf (magic included). */
void vmdk4_header_decode(const uint8_t *buf, Vmdk4Header *h);
/* Encode h with the magic and check bytes into the zeroed 512-byte buf. */
void vmdk4_header_encode(const Vmdk4Header *h, uint8_t *buf);
void vmdk3_header_decode(const uint8_t *buf, Vmdk3Header *h);
/* QEMU's checks of both seSparse headers: 0 or -errno with the message. */
int vmdk_sesparse_const_decode(const uint8_t *buf, VmdkSeSparseHeader *h);
int vmdk_sesparse_volatile_check(const uint8_t *buf);
/* The 1536-byte footer area (footer marker, footer, end-of-stream
 * marker): QEMU's checks, then the footer's header in *h.  0 or -EINVAL
 * ("Invalid footer"). */
int vmdk_footer_decode(const uint8_t *buf, Vmdk4Header *h);
/* A metadata marker (grain table, grain directory, footer, end of stream)
 * of val sectors into the zeroed 512-byte buf. */
void vmdk_marker_encode(uint8_t *buf, uint64_t val, VmdkMarkerType type);

#endif
