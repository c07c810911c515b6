/*
 * vpc/format.h: the VHD on-disk format (Virtual PC / Hyper-V "Virtual Hard
 * Disk Image Format Specification"; qemu-img calls the format "vpc"), for
 * the vpc/ files: layout constants, field offsets of the footer and the
 * dynamic disk header, the decoded structures and their codecs
 * (vpc/codec.c).  Every number is big-endian.
 *
 * Owns: the on-disk constants and field offsets (checked field by field
 * under _Static_assert), the disk types and platform codes as named enums.
 *
 * Invariants (cited as "vpc/format.h invariant N"):
 *  1. Bytes become numbers only through the codecs here, with
 *     block/endian.h's big-endian helpers (endian.h invariant 1).
 *  2. The codecs check signatures and the footer checksum, nothing else:
 *     what a field may hold is the open's business (vpc.c invariant 1).
 */
#ifndef QIMG_VPC_FORMAT_H
#define QIMG_VPC_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VPC_FOOTER_SIZE 512
#define VPC_DYN_HEADER_SIZE 1024
#define VPC_SECTOR 512
#define VPC_BAT_UNUSED 0xffffffffu
#define VPC_NO_OFFSET UINT64_C(0xffffffffffffffff)
#define VPC_TIMESTAMP_BASE 946684800 /* 2000-01-01T00:00:00Z */
#define VPC_DEFAULT_BLOCK_SIZE (2u << 20)
#define VPC_PARENT_LOCATORS 8

/* Geometry limits (CHS of the spec's algorithm) and QEMU's size limit. */
#define VPC_CHS_MAX_C 65535u
#define VPC_CHS_MAX_H 16u
#define VPC_CHS_MAX_S 255u
#define VPC_MAX_GEOMETRY ((uint64_t)VPC_CHS_MAX_C * VPC_CHS_MAX_H * VPC_CHS_MAX_S)
#define VPC_MAX_SECTORS UINT64_C(0xff000000) /* 2040 GiB */

typedef enum VpcDiskType {
    VPC_TYPE_FIXED = 2,
    VPC_TYPE_DYNAMIC = 3,
    VPC_TYPE_DIFFERENCING = 4,
} VpcDiskType;

/* Parent locator platform codes. */
typedef enum VpcPlatform {
    VPC_PLAT_NONE = 0,
    VPC_PLAT_WI2R = 0x57693272, /* "Wi2r": relative path, deprecated */
    VPC_PLAT_WI2K = 0x5769326b, /* "Wi2k": absolute path, deprecated */
    VPC_PLAT_W2RU = 0x57327275, /* "W2ru": relative path, UTF-16LE */
    VPC_PLAT_W2KU = 0x57326b75, /* "W2ku": absolute path, UTF-16LE */
    VPC_PLAT_MAC = 0x4d616320,  /* "Mac ": alias blob */
    VPC_PLAT_MACX = 0x4d616358, /* "MacX": file URL, UTF-8 */
} VpcPlatform;

/* Footer field offsets. */
enum {
    VPC_F_COOKIE = 0,
    VPC_F_FEATURES = 8,
    VPC_F_VERSION = 12,
    VPC_F_DATA_OFFSET = 16,
    VPC_F_TIMESTAMP = 24,
    VPC_F_CREATOR_APP = 28,
    VPC_F_CREATOR_MAJOR = 32,
    VPC_F_CREATOR_MINOR = 34,
    VPC_F_CREATOR_OS = 36,
    VPC_F_ORIG_SIZE = 40,
    VPC_F_CURRENT_SIZE = 48,
    VPC_F_CYLS = 56,
    VPC_F_HEADS = 58,
    VPC_F_SECS = 59,
    VPC_F_TYPE = 60,
    VPC_F_CHECKSUM = 64,
    VPC_F_UUID = 68,
    VPC_F_SAVED_STATE = 84,
    VPC_F_END = 85, /* reserved to 512 */
};
_Static_assert(VPC_F_DATA_OFFSET == VPC_F_VERSION + 4, "footer layout");
_Static_assert(VPC_F_CURRENT_SIZE == VPC_F_ORIG_SIZE + 8, "footer layout");
_Static_assert(VPC_F_TYPE == VPC_F_SECS + 1, "footer layout");
_Static_assert(VPC_F_SAVED_STATE == VPC_F_UUID + 16, "footer layout");
_Static_assert(VPC_F_END <= VPC_FOOTER_SIZE, "footer size");

/* Dynamic disk header field offsets. */
enum {
    VPC_D_COOKIE = 0,
    VPC_D_DATA_OFFSET = 8,
    VPC_D_TABLE_OFFSET = 16,
    VPC_D_VERSION = 24,
    VPC_D_MAX_ENTRIES = 28,
    VPC_D_BLOCK_SIZE = 32,
    VPC_D_CHECKSUM = 36,
    VPC_D_PARENT_UUID = 40,
    VPC_D_PARENT_TIMESTAMP = 56,
    VPC_D_PARENT_NAME = 64, /* 512 bytes, UTF-16BE */
    VPC_D_LOCATORS = 576,   /* 8 entries of 24 bytes */
    VPC_D_END = 768,        /* reserved to 1024 */
};
#define VPC_PARENT_NAME_SIZE 512
#define VPC_LOCATOR_SIZE 24
_Static_assert(VPC_D_PARENT_NAME + VPC_PARENT_NAME_SIZE == VPC_D_LOCATORS, "layout");
_Static_assert(VPC_D_LOCATORS + VPC_PARENT_LOCATORS * VPC_LOCATOR_SIZE == VPC_D_END,
               "dynamic header layout");
_Static_assert(VPC_D_END <= VPC_DYN_HEADER_SIZE, "dynamic header size");

/* Parent locator entry field offsets (within the 24 bytes). */
enum {
    VPC_L_PLATFORM = 0,
    VPC_L_DATA_SPACE = 4,
    VPC_L_DATA_LENGTH = 8,
    VPC_L_DATA_OFFSET = 16,
};

typedef struct VpcFooter {
    char cookie[8];
    uint32_t features;
    uint32_t version;
    uint64_t data_offset;
    uint32_t timestamp;
    char creator_app[4];
    uint16_t creator_major, creator_minor;
    char creator_os[4];
    uint64_t orig_size;
    uint64_t current_size;
    uint16_t cyls;
    uint8_t heads;
    uint8_t secs_per_cyl;
    uint32_t type;
    uint32_t checksum;
    uint8_t uuid[16];
    uint8_t saved_state;
} VpcFooter;

typedef struct VpcLocator {
    uint32_t platform;
    uint32_t data_space;
    uint32_t data_length;
    uint64_t data_offset;
} VpcLocator;

typedef struct VpcDynHeader {
    char cookie[8];
    uint64_t data_offset;
    uint64_t table_offset;
    uint32_t version;
    uint32_t max_table_entries;
    uint32_t block_size;
    uint32_t checksum;
    uint8_t parent_uuid[16];
    uint32_t parent_timestamp;
    uint8_t parent_name[VPC_PARENT_NAME_SIZE]; /* UTF-16BE, as stored */
    VpcLocator loc[VPC_PARENT_LOCATORS];
} VpcDynHeader;

/* The one's complement of the byte sum of buf, skipping the 4 bytes at
 * skip (the checksum field). */
uint32_t vpc_checksum(const uint8_t *buf, size_t len, size_t skip);
/* Is there a footer cookie ("conectix") at buf? */
bool vpc_has_cookie(const uint8_t *buf);

void vpc_footer_decode(const uint8_t buf[VPC_FOOTER_SIZE], VpcFooter *f);
/* Encode f, computing its checksum (f->checksum is updated). */
void vpc_footer_encode(VpcFooter *f, uint8_t buf[VPC_FOOTER_SIZE]);
void vpc_dyn_header_decode(const uint8_t buf[VPC_DYN_HEADER_SIZE], VpcDynHeader *h);
void vpc_dyn_header_encode(VpcDynHeader *h, uint8_t buf[VPC_DYN_HEADER_SIZE]);

/* The spec's CHS geometry for total_sectors (may round it down). */
void vpc_chs(uint64_t total_sectors, uint16_t *cyls, uint8_t *heads, uint8_t *secs);
/* Does the creator's size field win over the CHS geometry (Hyper-V,
 * qemu-img force_size, disk2vhd, XenServer, XenConverter)? */
bool vpc_creator_uses_current_size(const char creator_app[4]);
/* The virtual size of a disk with footer f, as QEMU 7.2 computes it. */
uint64_t vpc_virtual_size(const VpcFooter *f, bool force_chs, bool force_current);
/* The sector bitmap in front of each block of block_size bytes. */
uint32_t vpc_bitmap_size(uint32_t block_size);

#endif
