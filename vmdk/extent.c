/*
 * vmdk/extent.c: setting up a sparse extent from its header -- VMDK4
 * (hosted sparse and streamOptimized, with the footer VMware writes at the
 * end of a stream), VMDK3 (COWD, vmfsSparse) and ESXi seSparse -- and
 * loading its grain directory.
 *
 * Owns: the validation of every header field against the extent file
 * (format.h invariant 2) and the decoded grain directory (vmdk.h
 * invariant 3).
 *
 * Invariants (cited as "extent.c invariant N"):
 *  1. QEMU 7.2's checks come first, in its order and with its messages
 *     ("Unsupported VMDK version 4", "L2 table size too big", "L1 entry
 *     size is invalid", "Invalid granularity, image may be corrupt", "L1
 *     size too big", "File truncated, expecting at least N bytes", "Invalid
 *     footer"); values QEMU would let wrap are refused naming the field.
 *  2. A sparse extent's size is its header's capacity (QEMU ignores the
 *     descriptor's count for sparse extents), at most INT64_MAX bytes.
 *  3. The grain directory (and the redundant one) lies inside the extent
 *     file and has at most VMDK_MAX_GD_ENTRIES entries, so what is held in
 *     memory is bounded by the file and QEMU's limit.
 *  4. New grains go at the end of the file rounded up to a grain (QEMU's
 *     next_cluster_sector).
 */
#include "vmdk/vmdk.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

void vmdk_extent_clear(VmdkExtent *ext)
{
    if (ext->own_file) {
        blk_close(ext->file);
    }
    g_free(ext->filename);
    g_free(ext->type);
    g_free(ext->gd);
    g_free(ext->rgd);
    memset(ext, 0, sizeof(*ext));
}

/* Invariant 3: a directory of n entries of ext->entry_size at byte off. */
static int load_gd(VmdkExtent *ext, uint64_t off, uint64_t **out, const char *what)
{
    uint64_t bytes, end, n = ext->gd_entries;
    g_autofree uint8_t *raw = NULL;
    uint64_t *gd;
    int ret;

    if (vmdk_mul(n, ext->entry_size, &bytes) || vmdk_add(off, bytes, &end) ||
        end > ext->file->size) {
        return blk_error(EINVAL,
                         "The %s of extent '%s' (%" PRIu64 " entries at offset %" PRIu64
                         ") lies beyond the end of the file",
                         what, ext->filename, n, off);
    }
    raw = g_try_malloc(bytes ? bytes : 1);
    gd = g_try_new(uint64_t, n ? n : 1);
    if (!raw || !gd) {
        g_free(gd);
        return blk_error(ENOMEM, "Cannot hold the %s of extent '%s'", what,
                         ext->filename);
    }
    ret = bytes ? blk_pread(ext->file, off, raw, (size_t)bytes) : 0;
    if (ret < 0) {
        g_free(gd);
        return blk_error_prefix(ret, "Could not read the %s from extent '%s'", what,
                                ext->filename);
    }
    for (uint64_t i = 0; i < n; i++) {
        gd[i] = ext->entry_size == 8 ? load_le64(raw + 8 * i) : load_le32(raw + 4 * i);
    }
    *out = gd;
    return 0;
}

/* The common part of QEMU's vmdk_add_extent (invariant 1). */
static int set_geometry(VmdkExtent *ext, uint64_t capacity, uint64_t grain_sectors,
                        uint32_t gtes, uint64_t gd_entries)
{
    uint64_t bytes;

    if (grain_sectors > VMDK_MAX_GRAIN_SECTORS) {
        return blk_error(EFBIG, "Invalid granularity, image may be corrupt");
    }
    if (gd_entries > VMDK_MAX_GD_ENTRIES) {
        return blk_error(EFBIG, "L1 size too big");
    }
    if (vmdk_mul(capacity, VMDK_SECTOR, &bytes) || bytes > INT64_MAX) {
        return blk_error(EFBIG, "Invalid capacity of extent '%s': %" PRIu64 " sectors",
                         ext->filename, capacity);
    }
    ext->end = bytes; /* vmdk.c adds the start (vmdk.h invariant 1) */
    ext->grain = grain_sectors * VMDK_SECTOR;
    ext->gtes = gtes;
    ext->gt_cover = ext->grain * gtes; /* <= 2^30 * 4096: no overflow */
    ext->gd_entries = (uint32_t)gd_entries;
    return 0;
}

static void set_next_grain(VmdkExtent *ext)
{
    /* invariant 4; grain <= 1 GiB, file size <= INT64_MAX: no overflow */
    uint64_t size = ROUND_UP(ext->file->size, VMDK_SECTOR);
    ext->next_grain = ext->grain ? ROUND_UP(size, ext->grain) : size;
}

static int open_vmdk3(VmdkExtent *ext, const uint8_t *head)
{
    Vmdk3Header h;
    int ret;

    vmdk3_header_decode(head, &h);
    ext->entry_size = 4;
    ret = set_geometry(ext, h.disk_sectors, h.granularity, VMDK3_GTES, h.gd_size);
    if (ret < 0) {
        return ret;
    }
    if (h.granularity == 0) {
        return blk_error(EINVAL, "Invalid granularity 0 in extent '%s'", ext->filename);
    }
    ext->version = h.version;
    set_next_grain(ext);
    return load_gd(ext, (uint64_t)h.gd_offset * VMDK_SECTOR, &ext->gd, "grain directory");
}

/* The header, or the footer's copy of it (VMware's streams, invariant 1). */
static int read_vmdk4_header(VmdkExtent *ext, const uint8_t *head, Vmdk4Header *h)
{
    uint8_t footer[VMDK_FOOTER_BYTES];
    uint64_t size = ROUND_UP(ext->file->size, VMDK_SECTOR);
    int ret;

    vmdk4_header_decode(head, h);
    if (h->gd_offset != VMDK4_GD_AT_END) {
        return 0;
    }
    if (size < VMDK_FOOTER_BYTES) {
        return blk_error(EINVAL, "Failed to read footer: the file is too short");
    }
    ret = blk_pread(ext->file, size - VMDK_FOOTER_BYTES, footer, sizeof(footer));
    if (ret < 0) {
        return blk_error_prefix(ret, "Failed to read footer");
    }
    return vmdk_footer_decode(footer, h);
}

int vmdk_extent_open_sparse(VmdkState *s, VmdkExtent *ext, const uint8_t *head,
                            bool read_only)
{
    Vmdk4Header h;
    uint64_t l1_entry_sectors, gd_entries, file_sectors, gd_off, rgd_off = 0;
    int ret;

    ext->sparse_known = true;
    if (load_be32(head) == VMDK3_MAGIC) {
        return open_vmdk3(ext, head);
    }
    if (load_be32(head) != VMDK4_MAGIC) {
        return blk_error(EINVAL, "Image not in VMDK format");
    }
    ret = read_vmdk4_header(ext, head, &h);
    if (ret < 0) {
        return ret;
    }
    ext->compressed = h.compress_algorithm == VMDK4_COMPRESSION_DEFLATE;
    if (h.version > VMDK4_MAX_VERSION) {
        return blk_error(ENOTSUP, "Unsupported VMDK version %" PRIu32, h.version);
    }
    if (h.version == 3 && !read_only && !ext->compressed) {
        return blk_error(EINVAL, "VMDK version 3 must be read only");
    }
    if (h.num_gtes > VMDK4_MAX_GTES) {
        return blk_error(EINVAL, "L2 table size too big");
    }
    if (h.num_gtes == 0 || h.granularity == 0 ||
        vmdk_mul(h.num_gtes, h.granularity, &l1_entry_sectors) ||
        l1_entry_sectors > UINT32_MAX) {
        return blk_error(EINVAL, "L1 entry size is invalid");
    }
    gd_entries = h.capacity / l1_entry_sectors + (h.capacity % l1_entry_sectors != 0);
    if ((h.flags & VMDK4_FLAG_RGD) && vmdk_mul(h.rgd_offset, VMDK_SECTOR, &rgd_off)) {
        return blk_error(EINVAL, "Invalid redundant grain directory offset in '%s'",
                         ext->filename);
    }
    file_sectors = DIV_ROUND_UP(ext->file->size, VMDK_SECTOR);
    if (file_sectors < h.grain_offset) {
        uint64_t want;
        if (vmdk_mul(h.grain_offset, VMDK_SECTOR, &want) || want > INT64_MAX) {
            return blk_error(EINVAL, "Invalid grain offset in '%s'", ext->filename);
        }
        return blk_error(EINVAL, "File truncated, expecting at least %" PRIu64 " bytes",
                         want);
    }
    if (vmdk_mul(h.gd_offset, VMDK_SECTOR, &gd_off)) {
        return blk_error(EINVAL, "Invalid grain directory offset in '%s'", ext->filename);
    }
    ext->entry_size = 4;
    ret = set_geometry(ext, h.capacity, h.granularity, h.num_gtes, gd_entries);
    if (ret < 0) {
        return ret;
    }
    ext->has_marker = h.flags & VMDK4_FLAG_MARKER;
    ext->zero_grain = h.flags & VMDK4_FLAG_ZERO_GRAIN;
    ext->version = h.version;
    if (ext->compressed) {
        g_free(s->create_type);
        s->create_type = g_strdup("streamOptimized");
    } else if (!s->create_type) {
        s->create_type = g_strdup("monolithicSparse");
    }
    set_next_grain(ext);
    ret = load_gd(ext, gd_off, &ext->gd, "grain directory");
    if (ret == 0 && rgd_off) {
        ret = load_gd(ext, rgd_off, &ext->rgd, "redundant grain directory");
    }
    return ret;
}

int vmdk_extent_open_sesparse(VmdkState *s, VmdkExtent *ext, bool read_only)
{
    uint8_t head[VMDK_SECTOR] = {0}, vol[VMDK_SECTOR] = {0};
    VmdkSeSparseHeader h;
    uint64_t vol_off, gd_off, gd_bytes;
    int ret;

    ext->sparse_known = true;
    if (!read_only) {
        return blk_error(EACCES, "No write support for seSparse images available");
    }
    ret = blk_pread(ext->file, 0, head, MIN(sizeof(head), ext->file->size));
    if (ret < 0) {
        return blk_error_prefix(ret, "Could not read const header from file '%s'",
                                ext->filename);
    }
    ret = vmdk_sesparse_const_decode(head, &h);
    if (ret < 0) {
        return ret;
    }
    if (vmdk_mul(h.volatile_offset, VMDK_SECTOR, &vol_off) ||
        vmdk_mul(h.gd_offset, VMDK_SECTOR, &gd_off) ||
        vmdk_mul(h.gd_size, VMDK_SECTOR, &gd_bytes)) {
        return blk_error(EINVAL, "Invalid header offsets in seSparse extent '%s'",
                         ext->filename);
    }
    if (vol_off < ext->file->size) {
        ret = blk_pread(ext->file, vol_off, vol,
                        (size_t)MIN((uint64_t)sizeof(vol), ext->file->size - vol_off));
        if (ret < 0) {
            return blk_error_prefix(ret, "Could not read volatile header from file '%s'",
                                    ext->filename);
        }
    }
    ret = vmdk_sesparse_volatile_check(vol);
    if (ret < 0) {
        return ret;
    }
    ext->sesparse = true;
    ext->entry_size = 8;
    ret = set_geometry(ext, h.capacity, h.grain_size,
                       SESPARSE_GT_SECTORS * VMDK_SECTOR / 8, gd_bytes / 8);
    if (ret < 0) {
        return ret;
    }
    if (h.gt_offset > UINT32_MAX || h.grains_offset > INT64_MAX / VMDK_SECTOR) {
        return blk_error(EINVAL, "Invalid table offsets in seSparse extent '%s'",
                         ext->filename);
    }
    ext->se_gts = h.gt_offset;
    ext->se_grains = h.grains_offset;
    return load_gd(ext, gd_off, &ext->gd, "grain directory");
}
