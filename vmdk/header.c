/*
 * vmdk/header.c: the codecs of the binary VMDK structures -- the VMDK4
 * header and footer, the VMDK3 header, the seSparse headers, the stream
 * markers.
 *
 * Owns: turning those sectors into decoded structs (format.h) and back,
 * field by field (format.h invariant 1).  What the values mean and whether
 * they fit an image is extent.c's.
 *
 * Invariants (cited as "header.c invariant N"):
 *  1. A decoder reads exactly the sector(s) it is given and never fails on
 *     values: range checks belong to the caller, which knows the file.
 *     The seSparse and footer decoders are the exception: their checks are
 *     QEMU's structural ones (magic, version, constant sizes, zero padding).
 *  2. An encoder writes into a zeroed sector and sets every field the
 *     format defines, so what it writes is fully determined by its input.
 */
#include "block/block.h"
#include "vmdk/format.h"

#include <errno.h>
#include <inttypes.h>

void vmdk4_header_decode(const uint8_t *buf, Vmdk4Header *h)
{
    h->version = load_le32(buf + VMDK4_HDR_VERSION);
    h->flags = load_le32(buf + VMDK4_HDR_FLAGS);
    h->capacity = load_le64(buf + VMDK4_HDR_CAPACITY);
    h->granularity = load_le64(buf + VMDK4_HDR_GRANULARITY);
    h->desc_offset = load_le64(buf + VMDK4_HDR_DESC_OFFSET);
    h->desc_size = load_le64(buf + VMDK4_HDR_DESC_SIZE);
    h->num_gtes = load_le32(buf + VMDK4_HDR_NUM_GTES);
    h->rgd_offset = load_le64(buf + VMDK4_HDR_RGD_OFFSET);
    h->gd_offset = load_le64(buf + VMDK4_HDR_GD_OFFSET);
    h->grain_offset = load_le64(buf + VMDK4_HDR_GRAIN_OFFSET);
    h->unclean = buf[VMDK4_HDR_UNCLEAN];
    h->compress_algorithm = load_le16(buf + VMDK4_HDR_COMPRESS_ALGORITHM);
}

void vmdk4_header_encode(const Vmdk4Header *h, uint8_t *buf)
{
    store_be32(buf + VMDK4_HDR_MAGIC, VMDK4_MAGIC);
    store_le32(buf + VMDK4_HDR_VERSION, h->version);
    store_le32(buf + VMDK4_HDR_FLAGS, h->flags);
    store_le64(buf + VMDK4_HDR_CAPACITY, h->capacity);
    store_le64(buf + VMDK4_HDR_GRANULARITY, h->granularity);
    store_le64(buf + VMDK4_HDR_DESC_OFFSET, h->desc_offset);
    store_le64(buf + VMDK4_HDR_DESC_SIZE, h->desc_size);
    store_le32(buf + VMDK4_HDR_NUM_GTES, h->num_gtes);
    store_le64(buf + VMDK4_HDR_RGD_OFFSET, h->rgd_offset);
    store_le64(buf + VMDK4_HDR_GD_OFFSET, h->gd_offset);
    store_le64(buf + VMDK4_HDR_GRAIN_OFFSET, h->grain_offset);
    buf[VMDK4_HDR_UNCLEAN] = h->unclean;
    memcpy(buf + VMDK4_HDR_CHECK_BYTES, "\n \r\n", 4);
    store_le16(buf + VMDK4_HDR_COMPRESS_ALGORITHM, h->compress_algorithm);
}

void vmdk3_header_decode(const uint8_t *buf, Vmdk3Header *h)
{
    h->version = load_le32(buf + VMDK3_HDR_VERSION);
    h->flags = load_le32(buf + VMDK3_HDR_FLAGS);
    h->disk_sectors = load_le32(buf + VMDK3_HDR_DISK_SECTORS);
    h->granularity = load_le32(buf + VMDK3_HDR_GRANULARITY);
    h->gd_offset = load_le32(buf + VMDK3_HDR_GD_OFFSET);
    h->gd_size = load_le32(buf + VMDK3_HDR_GD_SIZE);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i]) {
            return false;
        }
    }
    return true;
}

/* Invariant 1: QEMU's strict checks, in its order and words. */
int vmdk_sesparse_const_decode(const uint8_t *buf, VmdkSeSparseHeader *h)
{
    uint64_t magic = load_le64(buf + SESPARSE_CONST_MAGIC);
    uint64_t version = load_le64(buf + SESPARSE_CONST_VERSION);
    uint64_t flags = load_le64(buf + SESPARSE_CONST_FLAGS);
    uint64_t r[4];

    h->capacity = load_le64(buf + SESPARSE_CONST_CAPACITY);
    h->grain_size = load_le64(buf + SESPARSE_CONST_GRAIN_SIZE);
    h->gt_size = load_le64(buf + SESPARSE_CONST_GT_SIZE);
    h->volatile_offset = load_le64(buf + SESPARSE_CONST_VOLATILE_OFFSET);
    h->gd_offset = load_le64(buf + SESPARSE_CONST_GD_OFFSET);
    h->gd_size = load_le64(buf + SESPARSE_CONST_GD_SIZE);
    h->gt_offset = load_le64(buf + SESPARSE_CONST_GT_OFFSET);
    h->grains_offset = load_le64(buf + SESPARSE_CONST_GRAINS_OFFSET);
    for (int i = 0; i < 4; i++) {
        r[i] = load_le64(buf + SESPARSE_CONST_RESERVED + 8 * i);
    }
    if (magic != SESPARSE_CONST_MAGIC_VALUE) {
        return blk_error(EINVAL, "Bad const header magic: 0x%016" PRIx64, magic);
    }
    if (version != SESPARSE_VERSION) {
        return blk_error(ENOTSUP, "Unsupported version: 0x%016" PRIx64, version);
    }
    if (h->grain_size != SESPARSE_GRAIN_SECTORS) {
        return blk_error(ENOTSUP, "Unsupported grain size: %" PRIu64, h->grain_size);
    }
    if (h->gt_size != SESPARSE_GT_SECTORS) {
        return blk_error(ENOTSUP, "Unsupported grain table size: %" PRIu64, h->gt_size);
    }
    if (flags != 0) {
        return blk_error(ENOTSUP, "Unsupported flags: 0x%016" PRIx64, flags);
    }
    if (r[0] || r[1] || r[2] || r[3]) {
        return blk_error(ENOTSUP,
                         "Unsupported reserved bits: 0x%016" PRIx64 " 0x%016" PRIx64
                         " 0x%016" PRIx64 " 0x%016" PRIx64,
                         r[0], r[1], r[2], r[3]);
    }
    if (!all_zero(buf + SESPARSE_CONST_PAD, VMDK_SECTOR - SESPARSE_CONST_PAD)) {
        return blk_error(ENOTSUP, "Unsupported non-zero const header padding");
    }
    return 0;
}

int vmdk_sesparse_volatile_check(const uint8_t *buf)
{
    uint64_t magic = load_le64(buf + SESPARSE_VOL_MAGIC);

    if (magic != SESPARSE_VOL_MAGIC_VALUE) {
        return blk_error(EINVAL, "Bad volatile header magic: 0x%016" PRIx64, magic);
    }
    if (load_le64(buf + SESPARSE_VOL_REPLAY_JOURNAL)) {
        return blk_error(ENOTSUP, "Image is dirty, Replaying journal not supported");
    }
    if (!all_zero(buf + SESPARSE_VOL_PAD, VMDK_SECTOR - SESPARSE_VOL_PAD)) {
        return blk_error(ENOTSUP, "Unsupported non-zero volatile header padding");
    }
    return 0;
}

int vmdk_footer_decode(const uint8_t *buf, Vmdk4Header *h)
{
    const uint8_t *marker = buf, *footer = buf + VMDK_SECTOR;
    const uint8_t *eos = buf + 2 * VMDK_SECTOR;

    if (load_be32(footer) != VMDK4_MAGIC || load_le32(marker + VMDK_MARKER_SIZE) != 0 ||
        load_le32(marker + VMDK_MARKER_TYPE) != VMDK_MARKER_FOOTER ||
        load_le64(eos + VMDK_MARKER_VAL) != 0 || load_le32(eos + VMDK_MARKER_SIZE) != 0 ||
        load_le32(eos + VMDK_MARKER_TYPE) != VMDK_MARKER_EOS) {
        return blk_error(EINVAL, "Invalid footer");
    }
    vmdk4_header_decode(footer, h);
    return 0;
}

void vmdk_marker_encode(uint8_t *buf, uint64_t val, VmdkMarkerType type)
{
    store_le64(buf + VMDK_MARKER_VAL, val);
    store_le32(buf + VMDK_MARKER_SIZE, 0);
    store_le32(buf + VMDK_MARKER_TYPE, (uint32_t)type);
}
