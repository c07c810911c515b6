/*
 * vdi/format.h: the VirtualBox VDI on-disk format (version 1.1), for the
 * vdi/ files: the 512-byte header's field offsets, the block map's special
 * entries, the decoded header and its codec (vdi/codec.c).  Every number
 * is little-endian.
 *
 * Owns: the on-disk constants and field offsets (checked under
 * _Static_assert) and the image types as a named enum.
 *
 * Invariants (cited as "vdi/format.h invariant N"):
 *  1. Bytes become numbers only through the codec, with block/endian.h's
 *     little-endian helpers (endian.h invariant 1).
 *  2. The codec checks nothing; what a field may hold is the open's
 *     business (vdi.c invariant 1).
 */
#ifndef QIMG_VDI_FORMAT_H
#define QIMG_VDI_FORMAT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define VDI_HEADER_SIZE 512
#define VDI_SECTOR 512u
#define VDI_SIGNATURE 0xbeda107fu
#define VDI_VERSION_1_1 0x00010001u
#define VDI_BLOCK_SIZE (1u << 20) /* the only one QEMU (and qimg) reads */
#define VDI_HEADER_SIZE_FIELD 0x180u
#define VDI_TEXT "<<< QEMU VM Virtual Disk Image >>>\n"

/* Block map entries. */
#define VDI_UNALLOCATED 0xffffffffu /* never written: reads as zeros */
#define VDI_DISCARDED 0xfffffffeu   /* discarded: reads as zeros */
#define VDI_IS_ALLOCATED(e) ((e) < VDI_DISCARDED)

/* QEMU's limits: the block map of 4-byte entries rounded to sectors must
 * stay within INT_MAX bytes. */
#define VDI_BLOCKS_MAX ((uint32_t)(((uint64_t)INT_MAX + 1 - VDI_SECTOR) / 4))
#define VDI_DISK_SIZE_MAX ((uint64_t)VDI_BLOCKS_MAX * VDI_BLOCK_SIZE)

typedef enum VdiImageType {
    VDI_TYPE_DYNAMIC = 1,
    VDI_TYPE_STATIC = 2,
} VdiImageType;

enum {
    VDI_H_TEXT = 0, /* 64 bytes */
    VDI_H_SIGNATURE = 64,
    VDI_H_VERSION = 68,
    VDI_H_HEADER_SIZE = 72,
    VDI_H_IMAGE_TYPE = 76,
    VDI_H_IMAGE_FLAGS = 80,
    VDI_H_DESCRIPTION = 84, /* 256 bytes */
    VDI_H_OFFSET_BMAP = 340,
    VDI_H_OFFSET_DATA = 344,
    VDI_H_CYLINDERS = 348,
    VDI_H_HEADS = 352,
    VDI_H_SECTORS = 356,
    VDI_H_SECTOR_SIZE = 360,
    VDI_H_UNUSED1 = 364,
    VDI_H_DISK_SIZE = 368,
    VDI_H_BLOCK_SIZE = 376,
    VDI_H_BLOCK_EXTRA = 380,
    VDI_H_BLOCKS_IN_IMAGE = 384,
    VDI_H_BLOCKS_ALLOCATED = 388,
    VDI_H_UUID_IMAGE = 392,
    VDI_H_UUID_LAST_SNAP = 408,
    VDI_H_UUID_LINK = 424,
    VDI_H_UUID_PARENT = 440,
    VDI_H_END = 456, /* unused to 512 */
};
_Static_assert(VDI_H_DESCRIPTION + 256 == VDI_H_OFFSET_BMAP, "VDI header layout");
_Static_assert(VDI_H_UUID_PARENT + 16 == VDI_H_END, "VDI header layout");
_Static_assert(VDI_H_END <= VDI_HEADER_SIZE, "VDI header size");

typedef struct VdiHeader {
    char text[64];
    uint32_t signature;
    uint32_t version;
    uint32_t header_size;
    uint32_t image_type;
    uint32_t image_flags;
    char description[256];
    uint32_t offset_bmap;
    uint32_t offset_data;
    uint32_t cylinders, heads, sectors;
    uint32_t sector_size;
    uint64_t disk_size;
    uint32_t block_size;
    uint32_t block_extra;
    uint32_t blocks_in_image;
    uint32_t blocks_allocated;
    uint8_t uuid_image[16];
    uint8_t uuid_last_snap[16];
    uint8_t uuid_link[16];
    uint8_t uuid_parent[16];
} VdiHeader;

void vdi_header_decode(const uint8_t buf[VDI_HEADER_SIZE], VdiHeader *h);
void vdi_header_encode(const VdiHeader *h, uint8_t buf[VDI_HEADER_SIZE]);

#endif
