/*
 * vhdx/codec.c: the VHDX structures decoded and encoded field by field
 * (vhdx/format.h): headers, region tables, metadata tables, log entry
 * headers and descriptors; the well-known GUIDs; the checksum.
 *
 * Owns: nothing but constants and pure functions.
 *
 * Invariants (cited as "vhdx/codec.c invariant N"):
 *  1. decode(encode(x)) == x for every field; reserved bytes are written as
 *     zeros.
 *  2. A checksum covers the whole structure (a header's 4 KiB, a region
 *     table's 64 KiB, a log entry's every sector) with its own field read
 *     as zeros: CRC-32C as [MS-VHDX] defines it (block/crc32c.c).
 */
#include "vhdx/format.h"

#include "block/crc32c.h"
#include "block/endian.h"

#include <glib.h>
#include <string.h>

/* GUIDs in their on-disk byte order: data1..data3 little-endian. */
#define GUID(a, b, c, d0, d1, d2, d3, d4, d5, d6, d7)                                    \
    {                                                                                    \
        {                                                                                \
            (a) & 0xff, ((a) >> 8) & 0xff, ((a) >> 16) & 0xff, ((a) >> 24) & 0xff,       \
                (b)&0xff, ((b) >> 8) & 0xff, (c)&0xff, ((c) >> 8) & 0xff, d0, d1, d2,    \
                d3, d4, d5, d6, d7                                                       \
        }                                                                                \
    }

const VhdxGuid vhdx_guid_bat =
    GUID(0x2dc27766u, 0xf623, 0x4200, 0x9d, 0x64, 0x11, 0x5e, 0x9b, 0xfd, 0x4a, 0x08);
const VhdxGuid vhdx_guid_metadata =
    GUID(0x8b7ca206u, 0x4790, 0x4b9a, 0xb8, 0xfe, 0x57, 0x5f, 0x05, 0x0f, 0x88, 0x6e);
const VhdxGuid vhdx_guid_file_params =
    GUID(0xcaa16737u, 0xfa36, 0x4d43, 0xb3, 0xb6, 0x33, 0xf0, 0xaa, 0x44, 0xe7, 0x6b);
const VhdxGuid vhdx_guid_disk_size =
    GUID(0x2fa54224u, 0xcd1b, 0x4876, 0xb2, 0x11, 0x5d, 0xbe, 0xd8, 0x3b, 0xf4, 0xb8);
const VhdxGuid vhdx_guid_page83 =
    GUID(0xbeca12abu, 0xb2e6, 0x4523, 0x93, 0xef, 0xc3, 0x09, 0xe0, 0x00, 0xc7, 0x46);
const VhdxGuid vhdx_guid_logical_sector =
    GUID(0x8141bf1du, 0xa96f, 0x4709, 0xba, 0x47, 0xf2, 0x33, 0xa8, 0xfa, 0xab, 0x5f);
const VhdxGuid vhdx_guid_physical_sector =
    GUID(0xcda348c7u, 0x445d, 0x4471, 0x9c, 0xc9, 0xe9, 0x88, 0x52, 0x51, 0xc5, 0x56);
const VhdxGuid vhdx_guid_parent_locator =
    GUID(0xa8d35f2du, 0xb30b, 0x454d, 0xab, 0xf7, 0xd3, 0xd8, 0x48, 0x34, 0xab, 0x0c);
const VhdxGuid vhdx_guid_parent_vhdx =
    GUID(0xb04aefb7u, 0xd19e, 0x4a81, 0xb7, 0x89, 0x25, 0xb8, 0xe9, 0x44, 0x59, 0x13);

bool vhdx_guid_is_zero(const VhdxGuid *g)
{
    static const VhdxGuid zero;
    return memcmp(g->b, zero.b, 16) == 0;
}

bool vhdx_guid_equal(const VhdxGuid *a, const VhdxGuid *b)
{
    return memcmp(a->b, b->b, 16) == 0;
}

void vhdx_guid_random(VhdxGuid *g)
{
    for (int i = 0; i < 16; i += 4) {
        uint32_t r = g_random_int();
        memcpy(g->b + i, &r, 4);
    }
    g->b[7] = (g->b[7] & 0x0f) | 0x40; /* version 4 (data3's high nibble) */
    g->b[8] = (g->b[8] & 0x3f) | 0x80;
}

uint32_t vhdx_checksum(const uint8_t *buf, size_t len, size_t crc_off)
{
    static const uint8_t zero[4];
    uint32_t c = blk_crc32c(0, buf, crc_off);

    c = blk_crc32c(c, zero, 4);
    return blk_crc32c(c, buf + crc_off + 4, len - crc_off - 4);
}

bool vhdx_header_decode(const uint8_t buf[VHDX_HEADER_SIZE], VhdxHeader *h)
{
    memset(h, 0, sizeof(*h));
    h->signature = load_le32(buf + VHDX_H_SIGNATURE);
    h->checksum = load_le32(buf + VHDX_H_CHECKSUM);
    h->sequence = load_le64(buf + VHDX_H_SEQUENCE);
    memcpy(h->file_write_guid.b, buf + VHDX_H_FILE_WRITE_GUID, 16);
    memcpy(h->data_write_guid.b, buf + VHDX_H_DATA_WRITE_GUID, 16);
    memcpy(h->log_guid.b, buf + VHDX_H_LOG_GUID, 16);
    h->log_version = load_le16(buf + VHDX_H_LOG_VERSION);
    h->version = load_le16(buf + VHDX_H_VERSION);
    h->log_length = load_le32(buf + VHDX_H_LOG_LENGTH);
    h->log_offset = load_le64(buf + VHDX_H_LOG_OFFSET);
    return h->signature == VHDX_SIG_HEAD &&
           vhdx_checksum(buf, VHDX_HEADER_SIZE, VHDX_H_CHECKSUM) == h->checksum;
}

void vhdx_header_encode(const VhdxHeader *h, uint8_t buf[VHDX_HEADER_SIZE])
{
    memset(buf, 0, VHDX_HEADER_SIZE);
    store_le32(buf + VHDX_H_SIGNATURE, VHDX_SIG_HEAD);
    store_le64(buf + VHDX_H_SEQUENCE, h->sequence);
    memcpy(buf + VHDX_H_FILE_WRITE_GUID, h->file_write_guid.b, 16);
    memcpy(buf + VHDX_H_DATA_WRITE_GUID, h->data_write_guid.b, 16);
    memcpy(buf + VHDX_H_LOG_GUID, h->log_guid.b, 16);
    store_le16(buf + VHDX_H_LOG_VERSION, h->log_version);
    store_le16(buf + VHDX_H_VERSION, h->version);
    store_le32(buf + VHDX_H_LOG_LENGTH, h->log_length);
    store_le64(buf + VHDX_H_LOG_OFFSET, h->log_offset);
    store_le32(buf + VHDX_H_CHECKSUM,
               vhdx_checksum(buf, VHDX_HEADER_SIZE, VHDX_H_CHECKSUM));
}

bool vhdx_region_table_decode(const uint8_t *buf, VhdxRegion *r, uint32_t *n)
{
    *n = load_le32(buf + VHDX_RT_COUNT);
    if (load_le32(buf + VHDX_RT_SIGNATURE) != VHDX_SIG_REGI || *n > VHDX_MAX_REGIONS ||
        vhdx_checksum(buf, VHDX_REGION_TABLE_SIZE, VHDX_RT_CHECKSUM) !=
            load_le32(buf + VHDX_RT_CHECKSUM)) {
        return false;
    }
    for (uint32_t i = 0; i < *n; i++) {
        const uint8_t *e = buf + VHDX_RT_ENTRIES + (size_t)i * VHDX_RTE_SIZE;
        memcpy(r[i].guid.b, e + VHDX_RTE_GUID, 16);
        r[i].offset = load_le64(e + VHDX_RTE_OFFSET);
        r[i].length = load_le32(e + VHDX_RTE_LENGTH);
        r[i].flags = load_le32(e + VHDX_RTE_FLAGS);
    }
    return true;
}

void vhdx_region_table_encode(const VhdxRegion *r, uint32_t n, uint8_t *buf)
{
    memset(buf, 0, VHDX_REGION_TABLE_SIZE);
    store_le32(buf + VHDX_RT_SIGNATURE, VHDX_SIG_REGI);
    store_le32(buf + VHDX_RT_COUNT, n);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = buf + VHDX_RT_ENTRIES + (size_t)i * VHDX_RTE_SIZE;
        memcpy(e + VHDX_RTE_GUID, r[i].guid.b, 16);
        store_le64(e + VHDX_RTE_OFFSET, r[i].offset);
        store_le32(e + VHDX_RTE_LENGTH, r[i].length);
        store_le32(e + VHDX_RTE_FLAGS, r[i].flags);
    }
    store_le32(buf + VHDX_RT_CHECKSUM,
               vhdx_checksum(buf, VHDX_REGION_TABLE_SIZE, VHDX_RT_CHECKSUM));
}

bool vhdx_meta_table_decode(const uint8_t *buf, VhdxMetaEntry *e, uint32_t *n)
{
    *n = load_le16(buf + VHDX_MT_COUNT);
    if (memcmp(buf + VHDX_MT_SIGNATURE, "metadata", 8) != 0 || *n > VHDX_MAX_METADATA) {
        return false;
    }
    for (uint32_t i = 0; i < *n; i++) {
        const uint8_t *p = buf + VHDX_MT_ENTRIES + (size_t)i * VHDX_MTE_SIZE;
        memcpy(e[i].id.b, p + VHDX_MTE_ID, 16);
        e[i].offset = load_le32(p + VHDX_MTE_OFFSET);
        e[i].length = load_le32(p + VHDX_MTE_LENGTH);
        e[i].flags = load_le32(p + VHDX_MTE_FLAGS);
    }
    return true;
}

void vhdx_meta_table_encode(const VhdxMetaEntry *e, uint32_t n, uint8_t *buf)
{
    memset(buf, 0, VHDX_METADATA_TABLE_SIZE);
    memcpy(buf + VHDX_MT_SIGNATURE, "metadata", 8);
    store_le16(buf + VHDX_MT_COUNT, (uint16_t)n);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *p = buf + VHDX_MT_ENTRIES + (size_t)i * VHDX_MTE_SIZE;
        memcpy(p + VHDX_MTE_ID, e[i].id.b, 16);
        store_le32(p + VHDX_MTE_OFFSET, e[i].offset);
        store_le32(p + VHDX_MTE_LENGTH, e[i].length);
        store_le32(p + VHDX_MTE_FLAGS, e[i].flags);
    }
}

void vhdx_log_header_decode(const uint8_t *buf, VhdxLogHeader *h)
{
    memset(h, 0, sizeof(*h));
    h->signature = load_le32(buf + VHDX_LE_SIGNATURE);
    h->checksum = load_le32(buf + VHDX_LE_CHECKSUM);
    h->entry_length = load_le32(buf + VHDX_LE_LENGTH);
    h->tail = load_le32(buf + VHDX_LE_TAIL);
    h->sequence = load_le64(buf + VHDX_LE_SEQUENCE);
    h->desc_count = load_le32(buf + VHDX_LE_DESC_COUNT);
    memcpy(h->log_guid.b, buf + VHDX_LE_LOG_GUID, 16);
    h->flushed_offset = load_le64(buf + VHDX_LE_FLUSHED_OFFSET);
    h->last_offset = load_le64(buf + VHDX_LE_LAST_OFFSET);
}

void vhdx_log_header_encode(const VhdxLogHeader *h, uint8_t *buf)
{
    memset(buf, 0, VHDX_LE_SIZE);
    store_le32(buf + VHDX_LE_SIGNATURE, h->signature);
    store_le32(buf + VHDX_LE_CHECKSUM, h->checksum);
    store_le32(buf + VHDX_LE_LENGTH, h->entry_length);
    store_le32(buf + VHDX_LE_TAIL, h->tail);
    store_le64(buf + VHDX_LE_SEQUENCE, h->sequence);
    store_le32(buf + VHDX_LE_DESC_COUNT, h->desc_count);
    memcpy(buf + VHDX_LE_LOG_GUID, h->log_guid.b, 16);
    store_le64(buf + VHDX_LE_FLUSHED_OFFSET, h->flushed_offset);
    store_le64(buf + VHDX_LE_LAST_OFFSET, h->last_offset);
}

void vhdx_log_desc_decode(const uint8_t *buf, VhdxLogDesc *d)
{
    d->signature = load_le32(buf + VHDX_LD_SIGNATURE);
    d->trailing = load_le32(buf + VHDX_LD_TRAILING);
    d->leading = load_le64(buf + VHDX_LD_LEADING);
    d->file_offset = load_le64(buf + VHDX_LD_FILE_OFFSET);
    d->sequence = load_le64(buf + VHDX_LD_SEQUENCE);
}

void vhdx_log_desc_encode(const VhdxLogDesc *d, uint8_t *buf)
{
    store_le32(buf + VHDX_LD_SIGNATURE, d->signature);
    store_le32(buf + VHDX_LD_TRAILING, d->trailing);
    store_le64(buf + VHDX_LD_LEADING, d->leading);
    store_le64(buf + VHDX_LD_FILE_OFFSET, d->file_offset);
    store_le64(buf + VHDX_LD_SEQUENCE, d->sequence);
}
