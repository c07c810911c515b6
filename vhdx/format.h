/*
 * vhdx/format.h: the VHDX on-disk format ([MS-VHDX] version 1), for the
 * vhdx/ files: layout constants, field offsets of the headers, region
 * table, metadata table and items, parent locator, BAT entries and log
 * structures, the decoded structures and their codecs (vhdx/codec.c).
 * Every number is little-endian; GUIDs are kept as their 16 on-disk bytes.
 *
 * Owns: the on-disk constants and field offsets (checked under
 * _Static_assert), block states and flag bits as named enums with their
 * known-bits masks, and the well-known GUIDs.
 *
 * Invariants (cited as "vhdx/format.h invariant N"):
 *  1. Bytes become numbers only through the codecs here, with
 *     block/endian.h's little-endian helpers (endian.h invariant 1).
 *  2. The codecs check signatures and CRC-32C checksums only; what a field
 *     may hold is the open's business (vhdx.c invariant 1).
 */
#ifndef QIMG_VHDX_FORMAT_H
#define QIMG_VHDX_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VHDX_KIB 1024u
#define VHDX_MIB (1024u * 1024u)

/* The header section: file identifier, two headers, two region tables. */
#define VHDX_FILE_ID_OFFSET 0
#define VHDX_HEADER1_OFFSET (64 * VHDX_KIB)
#define VHDX_HEADER2_OFFSET (128 * VHDX_KIB)
#define VHDX_REGION1_OFFSET (192 * VHDX_KIB)
#define VHDX_REGION2_OFFSET (256 * VHDX_KIB)
#define VHDX_HEADER_SECTION_END VHDX_MIB
#define VHDX_HEADER_SIZE (4 * VHDX_KIB) /* checksummed */
#define VHDX_REGION_TABLE_SIZE (64 * VHDX_KIB)
#define VHDX_METADATA_TABLE_SIZE (64 * VHDX_KIB)

#define VHDX_BLOCK_SIZE_MIN VHDX_MIB
#define VHDX_BLOCK_SIZE_MAX (256 * VHDX_MIB)
#define VHDX_MAX_DISK_SIZE (UINT64_C(64) << 40)        /* 64 TiB */
#define VHDX_MAX_SECTORS_PER_BLOCK (UINT64_C(1) << 23) /* bits of a bitmap block */
#define VHDX_LOG_SECTOR 4096u
#define VHDX_MAX_REGIONS 2047u
#define VHDX_MAX_METADATA 2047u
#define VHDX_DEFAULT_LOG_SIZE VHDX_MIB

/* Signatures (as little-endian numbers of their ASCII bytes). */
#define VHDX_SIG_HEAD 0x64616568u /* "head" */
#define VHDX_SIG_REGI 0x69676572u /* "regi" */
#define VHDX_SIG_LOGE 0x65676f6cu /* "loge" */
#define VHDX_SIG_ZERO 0x6f72657au /* "zero" */
#define VHDX_SIG_DESC 0x63736564u /* "desc" */
#define VHDX_SIG_DATA 0x61746164u /* "data" */

/* BAT entry: state in bits 0-2, file offset in MiB in bits 20-63. */
#define VHDX_BAT_STATE_MASK UINT64_C(0x7)
#define VHDX_BAT_OFFSET_SHIFT 20
#define VHDX_BAT_RESERVED_MASK UINT64_C(0xffff8) /* bits 3-19 */

typedef enum VhdxBlockState {
    VHDX_PAYLOAD_NOT_PRESENT = 0,
    VHDX_PAYLOAD_UNDEFINED = 1,
    VHDX_PAYLOAD_ZERO = 2,
    VHDX_PAYLOAD_UNMAPPED = 3,
    VHDX_PAYLOAD_UNMAPPED_V095 = 5, /* the draft spec's value, as QEMU reads it */
    VHDX_PAYLOAD_FULLY_PRESENT = 6,
    VHDX_PAYLOAD_PARTIALLY_PRESENT = 7,
    VHDX_SB_NOT_PRESENT = 0,
    VHDX_SB_PRESENT = 6,
} VhdxBlockState;

/* Region table entry flags. */
enum { VHDX_REGION_REQUIRED = 1u << 0 };
/* Metadata table entry flags (and their known-bits mask). */
enum {
    VHDX_META_IS_USER = 1u << 0,
    VHDX_META_IS_VIRTUAL_DISK = 1u << 1,
    VHDX_META_IS_REQUIRED = 1u << 2,
};
/* File parameters flags. */
enum {
    VHDX_PARAM_LEAVE_BLOCKS_ALLOCATED = 1u << 0,
    VHDX_PARAM_HAS_PARENT = 1u << 1,
    VHDX_PARAM_KNOWN = VHDX_PARAM_LEAVE_BLOCKS_ALLOCATED | VHDX_PARAM_HAS_PARENT,
};

/* Header field offsets (4 KiB, checksummed). */
enum {
    VHDX_H_SIGNATURE = 0,
    VHDX_H_CHECKSUM = 4,
    VHDX_H_SEQUENCE = 8,
    VHDX_H_FILE_WRITE_GUID = 16,
    VHDX_H_DATA_WRITE_GUID = 32,
    VHDX_H_LOG_GUID = 48,
    VHDX_H_LOG_VERSION = 64,
    VHDX_H_VERSION = 66,
    VHDX_H_LOG_LENGTH = 68,
    VHDX_H_LOG_OFFSET = 72,
    VHDX_H_END = 80, /* reserved to 4096 */
};
_Static_assert(VHDX_H_LOG_GUID + 16 == VHDX_H_LOG_VERSION, "VHDX header layout");
_Static_assert(VHDX_H_LOG_OFFSET + 8 == VHDX_H_END, "VHDX header layout");

/* Region table: 16-byte header, then 32-byte entries. */
enum {
    VHDX_RT_SIGNATURE = 0,
    VHDX_RT_CHECKSUM = 4,
    VHDX_RT_COUNT = 8,
    VHDX_RT_ENTRIES = 16,
    VHDX_RTE_GUID = 0,
    VHDX_RTE_OFFSET = 16,
    VHDX_RTE_LENGTH = 24,
    VHDX_RTE_FLAGS = 28,
    VHDX_RTE_SIZE = 32,
};
_Static_assert(VHDX_RT_ENTRIES + VHDX_MAX_REGIONS * VHDX_RTE_SIZE <=
                   VHDX_REGION_TABLE_SIZE,
               "region table size");

/* Metadata table: 32-byte header ("metadata", count at 10), 32-byte entries. */
enum {
    VHDX_MT_SIGNATURE = 0,
    VHDX_MT_COUNT = 10,
    VHDX_MT_ENTRIES = 32,
    VHDX_MTE_ID = 0,
    VHDX_MTE_OFFSET = 16,
    VHDX_MTE_LENGTH = 20,
    VHDX_MTE_FLAGS = 24,
    VHDX_MTE_SIZE = 32,
};
_Static_assert(VHDX_MT_ENTRIES + VHDX_MAX_METADATA * VHDX_MTE_SIZE <=
                   VHDX_METADATA_TABLE_SIZE,
               "metadata table size");

/* Parent locator: 20-byte header, 12-byte key/value entries. */
enum {
    VHDX_PL_TYPE = 0,
    VHDX_PL_COUNT = 18,
    VHDX_PL_ENTRIES = 20,
    VHDX_PLE_KEY_OFFSET = 0,
    VHDX_PLE_VALUE_OFFSET = 4,
    VHDX_PLE_KEY_LENGTH = 8,
    VHDX_PLE_VALUE_LENGTH = 10,
    VHDX_PLE_SIZE = 12,
};

/* Log entry header (64 bytes), descriptors (32), data sector (4096). */
enum {
    VHDX_LE_SIGNATURE = 0,
    VHDX_LE_CHECKSUM = 4,
    VHDX_LE_LENGTH = 8,
    VHDX_LE_TAIL = 12,
    VHDX_LE_SEQUENCE = 16,
    VHDX_LE_DESC_COUNT = 24,
    VHDX_LE_LOG_GUID = 32,
    VHDX_LE_FLUSHED_OFFSET = 48,
    VHDX_LE_LAST_OFFSET = 56,
    VHDX_LE_SIZE = 64,
    VHDX_LD_SIGNATURE = 0,
    VHDX_LD_TRAILING = 4, /* data: bytes 4092-4095 of the sector */
    VHDX_LD_LEADING = 8,  /* data: bytes 0-7; zero: the length */
    VHDX_LD_FILE_OFFSET = 16,
    VHDX_LD_SEQUENCE = 24,
    VHDX_LD_SIZE = 32,
    VHDX_DS_SIGNATURE = 0,
    VHDX_DS_SEQ_HIGH = 4,
    VHDX_DS_DATA = 8, /* 4084 bytes */
    VHDX_DS_SEQ_LOW = 4092,
};
_Static_assert(VHDX_LE_LAST_OFFSET + 8 == VHDX_LE_SIZE, "log entry header layout");
_Static_assert(VHDX_LD_SEQUENCE + 8 == VHDX_LD_SIZE, "log descriptor layout");
_Static_assert(VHDX_DS_SEQ_LOW + 4 == VHDX_LOG_SECTOR, "log data sector layout");
/* descriptors in the first log sector (after the header), in the others */
#define VHDX_DESC_PER_SECTOR (VHDX_LOG_SECTOR / VHDX_LD_SIZE)

typedef struct VhdxGuid {
    uint8_t b[16]; /* as stored */
} VhdxGuid;

extern const VhdxGuid vhdx_guid_bat, vhdx_guid_metadata;
extern const VhdxGuid vhdx_guid_file_params, vhdx_guid_disk_size, vhdx_guid_page83,
    vhdx_guid_logical_sector, vhdx_guid_physical_sector, vhdx_guid_parent_locator;
extern const VhdxGuid vhdx_guid_parent_vhdx; /* the parent locator type */

typedef struct VhdxHeader {
    uint32_t signature;
    uint32_t checksum;
    uint64_t sequence;
    VhdxGuid file_write_guid, data_write_guid, log_guid;
    uint16_t log_version;
    uint16_t version;
    uint32_t log_length;
    uint64_t log_offset;
} VhdxHeader;

typedef struct VhdxRegion {
    VhdxGuid guid;
    uint64_t offset;
    uint32_t length;
    uint32_t flags;
} VhdxRegion;

typedef struct VhdxMetaEntry {
    VhdxGuid id;
    uint32_t offset; /* from the start of the metadata region */
    uint32_t length;
    uint32_t flags;
} VhdxMetaEntry;

typedef struct VhdxLogHeader {
    uint32_t signature;
    uint32_t checksum;
    uint32_t entry_length;
    uint32_t tail;
    uint64_t sequence;
    uint32_t desc_count;
    VhdxGuid log_guid;
    uint64_t flushed_offset;
    uint64_t last_offset;
} VhdxLogHeader;

typedef struct VhdxLogDesc {
    uint32_t signature; /* VHDX_SIG_DESC or VHDX_SIG_ZERO */
    uint32_t trailing;  /* data: the sector's last 4 bytes, as stored */
    uint64_t leading;   /* data: its first 8 bytes (as stored); zero: the length */
    uint64_t file_offset;
    uint64_t sequence;
} VhdxLogDesc;

bool vhdx_guid_is_zero(const VhdxGuid *g);
bool vhdx_guid_equal(const VhdxGuid *a, const VhdxGuid *b);
void vhdx_guid_random(VhdxGuid *g);

/* The CRC-32C of buf with its 4-byte checksum field at crc_off read as 0. */
uint32_t vhdx_checksum(const uint8_t *buf, size_t len, size_t crc_off);

/* Header: decode (false if the signature or checksum is wrong) and encode
 * (a whole 4 KiB, checksum set). */
bool vhdx_header_decode(const uint8_t buf[VHDX_HEADER_SIZE], VhdxHeader *h);
void vhdx_header_encode(const VhdxHeader *h, uint8_t buf[VHDX_HEADER_SIZE]);

/* Region table of 64 KiB: false if its signature or checksum is wrong or
 * it claims more than VHDX_MAX_REGIONS entries; *n entries into r[]. */
bool vhdx_region_table_decode(const uint8_t *buf, VhdxRegion *r, uint32_t *n);
void vhdx_region_table_encode(const VhdxRegion *r, uint32_t n, uint8_t *buf);

/* Metadata table of 64 KiB: false without the signature or with more than
 * VHDX_MAX_METADATA entries. */
bool vhdx_meta_table_decode(const uint8_t *buf, VhdxMetaEntry *e, uint32_t *n);
void vhdx_meta_table_encode(const VhdxMetaEntry *e, uint32_t n, uint8_t *buf);

void vhdx_log_header_decode(const uint8_t *buf, VhdxLogHeader *h);
void vhdx_log_header_encode(const VhdxLogHeader *h, uint8_t *buf);
void vhdx_log_desc_decode(const uint8_t *buf, VhdxLogDesc *d);
void vhdx_log_desc_encode(const VhdxLogDesc *d, uint8_t *buf);

/* BAT entries. */
static inline unsigned vhdx_bat_state(uint64_t e)
{
    return (unsigned)(e & VHDX_BAT_STATE_MASK);
}

static inline uint64_t vhdx_bat_offset(uint64_t e)
{
    return (e >> VHDX_BAT_OFFSET_SHIFT) << VHDX_BAT_OFFSET_SHIFT; /* bytes, MiB-aligned */
}

static inline uint64_t vhdx_bat_make(uint64_t offset, unsigned state)
{
    return offset | state;
}

#endif
