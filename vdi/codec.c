/*
 * vdi/codec.c: the VDI header, decoded and encoded field by field
 * (vdi/format.h).
 *
 * Owns: nothing but pure functions.
 *
 * Invariants (cited as "vdi/codec.c invariant N"):
 *  1. decode(encode(h)) == h for every field; the unused bytes are written
 *     as zeros.
 */
#include "vdi/format.h"

#include "block/endian.h"

#include <string.h>

void vdi_header_decode(const uint8_t buf[VDI_HEADER_SIZE], VdiHeader *h)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->text, buf + VDI_H_TEXT, sizeof(h->text));
    h->signature = load_le32(buf + VDI_H_SIGNATURE);
    h->version = load_le32(buf + VDI_H_VERSION);
    h->header_size = load_le32(buf + VDI_H_HEADER_SIZE);
    h->image_type = load_le32(buf + VDI_H_IMAGE_TYPE);
    h->image_flags = load_le32(buf + VDI_H_IMAGE_FLAGS);
    memcpy(h->description, buf + VDI_H_DESCRIPTION, sizeof(h->description));
    h->offset_bmap = load_le32(buf + VDI_H_OFFSET_BMAP);
    h->offset_data = load_le32(buf + VDI_H_OFFSET_DATA);
    h->cylinders = load_le32(buf + VDI_H_CYLINDERS);
    h->heads = load_le32(buf + VDI_H_HEADS);
    h->sectors = load_le32(buf + VDI_H_SECTORS);
    h->sector_size = load_le32(buf + VDI_H_SECTOR_SIZE);
    h->disk_size = load_le64(buf + VDI_H_DISK_SIZE);
    h->block_size = load_le32(buf + VDI_H_BLOCK_SIZE);
    h->block_extra = load_le32(buf + VDI_H_BLOCK_EXTRA);
    h->blocks_in_image = load_le32(buf + VDI_H_BLOCKS_IN_IMAGE);
    h->blocks_allocated = load_le32(buf + VDI_H_BLOCKS_ALLOCATED);
    memcpy(h->uuid_image, buf + VDI_H_UUID_IMAGE, 16);
    memcpy(h->uuid_last_snap, buf + VDI_H_UUID_LAST_SNAP, 16);
    memcpy(h->uuid_link, buf + VDI_H_UUID_LINK, 16);
    memcpy(h->uuid_parent, buf + VDI_H_UUID_PARENT, 16);
}

void vdi_header_encode(const VdiHeader *h, uint8_t buf[VDI_HEADER_SIZE])
{
    memset(buf, 0, VDI_HEADER_SIZE);
    memcpy(buf + VDI_H_TEXT, h->text, sizeof(h->text));
    store_le32(buf + VDI_H_SIGNATURE, h->signature);
    store_le32(buf + VDI_H_VERSION, h->version);
    store_le32(buf + VDI_H_HEADER_SIZE, h->header_size);
    store_le32(buf + VDI_H_IMAGE_TYPE, h->image_type);
    store_le32(buf + VDI_H_IMAGE_FLAGS, h->image_flags);
    memcpy(buf + VDI_H_DESCRIPTION, h->description, sizeof(h->description));
    store_le32(buf + VDI_H_OFFSET_BMAP, h->offset_bmap);
    store_le32(buf + VDI_H_OFFSET_DATA, h->offset_data);
    store_le32(buf + VDI_H_CYLINDERS, h->cylinders);
    store_le32(buf + VDI_H_HEADS, h->heads);
    store_le32(buf + VDI_H_SECTORS, h->sectors);
    store_le32(buf + VDI_H_SECTOR_SIZE, h->sector_size);
    store_le64(buf + VDI_H_DISK_SIZE, h->disk_size);
    store_le32(buf + VDI_H_BLOCK_SIZE, h->block_size);
    store_le32(buf + VDI_H_BLOCK_EXTRA, h->block_extra);
    store_le32(buf + VDI_H_BLOCKS_IN_IMAGE, h->blocks_in_image);
    store_le32(buf + VDI_H_BLOCKS_ALLOCATED, h->blocks_allocated);
    memcpy(buf + VDI_H_UUID_IMAGE, h->uuid_image, 16);
    memcpy(buf + VDI_H_UUID_LAST_SNAP, h->uuid_last_snap, 16);
    memcpy(buf + VDI_H_UUID_LINK, h->uuid_link, 16);
    memcpy(buf + VDI_H_UUID_PARENT, h->uuid_parent, 16);
}
