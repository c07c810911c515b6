/*
 * vpc/codec.c: the VHD footer and dynamic disk header, decoded and encoded
 * field by field (vpc/format.h), the checksum, and the two size rules:
 * the spec's CHS geometry and the virtual size QEMU 7.2 derives from a
 * footer.
 *
 * Owns: nothing but pure functions.
 *
 * Invariants (cited as "vpc/codec.c invariant N"):
 *  1. decode(encode(x)) == x for every field the format defines; reserved
 *     bytes are written as zeros.
 *  2. The virtual size is the CHS geometry's (cylinders x heads x sectors
 *     x 512) unless the creator application is one that sizes disks by
 *     current_size, or the geometry is the maximum one, as QEMU decides;
 *     the result is a multiple of 512 bytes.  QEMU's force_size_calc
 *     overrides the creator: "chs" takes the geometry whatever the
 *     creator, "current_size" the footer's size; the maximum geometry
 *     still means current_size.
 */
#include "vpc/format.h"

#include "block/endian.h"

#include <string.h>

uint32_t vpc_checksum(const uint8_t *buf, size_t len, size_t skip)
{
    uint32_t sum = 0;

    for (size_t i = 0; i < len; i++) {
        if (i < skip || i >= skip + 4) {
            sum += buf[i];
        }
    }
    return ~sum;
}

bool vpc_has_cookie(const uint8_t *buf)
{
    return memcmp(buf, "conectix", 8) == 0;
}

void vpc_footer_decode(const uint8_t buf[VPC_FOOTER_SIZE], VpcFooter *f)
{
    memset(f, 0, sizeof(*f));
    memcpy(f->cookie, buf + VPC_F_COOKIE, 8);
    f->features = load_be32(buf + VPC_F_FEATURES);
    f->version = load_be32(buf + VPC_F_VERSION);
    f->data_offset = load_be64(buf + VPC_F_DATA_OFFSET);
    f->timestamp = load_be32(buf + VPC_F_TIMESTAMP);
    memcpy(f->creator_app, buf + VPC_F_CREATOR_APP, 4);
    f->creator_major = load_be16(buf + VPC_F_CREATOR_MAJOR);
    f->creator_minor = load_be16(buf + VPC_F_CREATOR_MINOR);
    memcpy(f->creator_os, buf + VPC_F_CREATOR_OS, 4);
    f->orig_size = load_be64(buf + VPC_F_ORIG_SIZE);
    f->current_size = load_be64(buf + VPC_F_CURRENT_SIZE);
    f->cyls = load_be16(buf + VPC_F_CYLS);
    f->heads = buf[VPC_F_HEADS];
    f->secs_per_cyl = buf[VPC_F_SECS];
    f->type = load_be32(buf + VPC_F_TYPE);
    f->checksum = load_be32(buf + VPC_F_CHECKSUM);
    memcpy(f->uuid, buf + VPC_F_UUID, 16);
    f->saved_state = buf[VPC_F_SAVED_STATE];
}

void vpc_footer_encode(VpcFooter *f, uint8_t buf[VPC_FOOTER_SIZE])
{
    memset(buf, 0, VPC_FOOTER_SIZE);
    memcpy(buf + VPC_F_COOKIE, f->cookie, 8);
    store_be32(buf + VPC_F_FEATURES, f->features);
    store_be32(buf + VPC_F_VERSION, f->version);
    store_be64(buf + VPC_F_DATA_OFFSET, f->data_offset);
    store_be32(buf + VPC_F_TIMESTAMP, f->timestamp);
    memcpy(buf + VPC_F_CREATOR_APP, f->creator_app, 4);
    store_be16(buf + VPC_F_CREATOR_MAJOR, f->creator_major);
    store_be16(buf + VPC_F_CREATOR_MINOR, f->creator_minor);
    memcpy(buf + VPC_F_CREATOR_OS, f->creator_os, 4);
    store_be64(buf + VPC_F_ORIG_SIZE, f->orig_size);
    store_be64(buf + VPC_F_CURRENT_SIZE, f->current_size);
    store_be16(buf + VPC_F_CYLS, f->cyls);
    buf[VPC_F_HEADS] = f->heads;
    buf[VPC_F_SECS] = f->secs_per_cyl;
    store_be32(buf + VPC_F_TYPE, f->type);
    memcpy(buf + VPC_F_UUID, f->uuid, 16);
    buf[VPC_F_SAVED_STATE] = f->saved_state;
    f->checksum = vpc_checksum(buf, VPC_FOOTER_SIZE, VPC_F_CHECKSUM);
    store_be32(buf + VPC_F_CHECKSUM, f->checksum);
}

void vpc_dyn_header_decode(const uint8_t buf[VPC_DYN_HEADER_SIZE], VpcDynHeader *h)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->cookie, buf + VPC_D_COOKIE, 8);
    h->data_offset = load_be64(buf + VPC_D_DATA_OFFSET);
    h->table_offset = load_be64(buf + VPC_D_TABLE_OFFSET);
    h->version = load_be32(buf + VPC_D_VERSION);
    h->max_table_entries = load_be32(buf + VPC_D_MAX_ENTRIES);
    h->block_size = load_be32(buf + VPC_D_BLOCK_SIZE);
    h->checksum = load_be32(buf + VPC_D_CHECKSUM);
    memcpy(h->parent_uuid, buf + VPC_D_PARENT_UUID, 16);
    h->parent_timestamp = load_be32(buf + VPC_D_PARENT_TIMESTAMP);
    memcpy(h->parent_name, buf + VPC_D_PARENT_NAME, VPC_PARENT_NAME_SIZE);
    for (int i = 0; i < VPC_PARENT_LOCATORS; i++) {
        const uint8_t *l = buf + VPC_D_LOCATORS + i * VPC_LOCATOR_SIZE;
        h->loc[i].platform = load_be32(l + VPC_L_PLATFORM);
        h->loc[i].data_space = load_be32(l + VPC_L_DATA_SPACE);
        h->loc[i].data_length = load_be32(l + VPC_L_DATA_LENGTH);
        h->loc[i].data_offset = load_be64(l + VPC_L_DATA_OFFSET);
    }
}

void vpc_dyn_header_encode(VpcDynHeader *h, uint8_t buf[VPC_DYN_HEADER_SIZE])
{
    memset(buf, 0, VPC_DYN_HEADER_SIZE);
    memcpy(buf + VPC_D_COOKIE, h->cookie, 8);
    store_be64(buf + VPC_D_DATA_OFFSET, h->data_offset);
    store_be64(buf + VPC_D_TABLE_OFFSET, h->table_offset);
    store_be32(buf + VPC_D_VERSION, h->version);
    store_be32(buf + VPC_D_MAX_ENTRIES, h->max_table_entries);
    store_be32(buf + VPC_D_BLOCK_SIZE, h->block_size);
    memcpy(buf + VPC_D_PARENT_UUID, h->parent_uuid, 16);
    store_be32(buf + VPC_D_PARENT_TIMESTAMP, h->parent_timestamp);
    memcpy(buf + VPC_D_PARENT_NAME, h->parent_name, VPC_PARENT_NAME_SIZE);
    for (int i = 0; i < VPC_PARENT_LOCATORS; i++) {
        uint8_t *l = buf + VPC_D_LOCATORS + i * VPC_LOCATOR_SIZE;
        store_be32(l + VPC_L_PLATFORM, h->loc[i].platform);
        store_be32(l + VPC_L_DATA_SPACE, h->loc[i].data_space);
        store_be32(l + VPC_L_DATA_LENGTH, h->loc[i].data_length);
        store_be64(l + VPC_L_DATA_OFFSET, h->loc[i].data_offset);
    }
    h->checksum = vpc_checksum(buf, VPC_DYN_HEADER_SIZE, VPC_D_CHECKSUM);
    store_be32(buf + VPC_D_CHECKSUM, h->checksum);
}

/* The spec's algorithm: 17, 31 or 63 sectors per track and 4 to 16 heads
 * while the disk fits in 1024 cylinders of them, 255 x 16 beyond. */
void vpc_chs(uint64_t total_sectors, uint16_t *cyls, uint8_t *heads, uint8_t *secs)
{
    uint64_t cth; /* cylinders x heads */
    uint32_t h, s;

    total_sectors = MIN(total_sectors, VPC_MAX_GEOMETRY);
    if (total_sectors >= (uint64_t)65535 * 16 * 63) {
        s = 255;
        h = 16;
        cth = total_sectors / s;
    } else {
        s = 17;
        cth = total_sectors / s;
        h = (uint32_t)((cth + 1023) / 1024);
        if (h < 4) {
            h = 4;
        }
        if (cth >= (uint64_t)h * 1024 || h > 16) {
            s = 31;
            h = 16;
            cth = total_sectors / s;
        }
        if (cth >= (uint64_t)h * 1024) {
            s = 63;
            h = 16;
            cth = total_sectors / s;
        }
    }
    *cyls = (uint16_t)(cth / h);
    *heads = (uint8_t)h;
    *secs = (uint8_t)s;
}

bool vpc_creator_uses_current_size(const char app[4])
{
    static const char *const apps[] = {"win ", "qem2", "d2v ", "CTXS"};

    for (size_t i = 0; i < G_N_ELEMENTS(apps); i++) {
        if (memcmp(app, apps[i], 4) == 0) {
            return true;
        }
    }
    return memcmp(app, "tap\0", 4) == 0; /* XenServer */
}

uint64_t vpc_virtual_size(const VpcFooter *f, bool force_chs, bool force_current)
{
    uint64_t sectors = (uint64_t)f->cyls * f->heads * f->secs_per_cyl; /* invariant 2 */
    bool by_creator = vpc_creator_uses_current_size(f->creator_app) && !force_chs;

    if (by_creator || force_current || sectors == VPC_MAX_GEOMETRY) {
        sectors = f->current_size / VPC_SECTOR;
    }
    return sectors * VPC_SECTOR;
}

uint32_t vpc_bitmap_size(uint32_t block_size)
{
    /* one bit per 512-byte sector, padded to whole sectors -- QEMU's formula,
     * which gives blocks under 4 KiB no bitmap at all; readers must agree */
    return ((block_size / (8 * VPC_SECTOR)) + VPC_SECTOR - 1) &
           ~(uint32_t)(VPC_SECTOR - 1);
}
