/*
 * vhdx/create.c: creating VHDX images (qemu-img create -f vhdx, convert -O
 * vhdx) with subformat=dynamic|fixed, block_size, log_size and
 * block_state_zero, and measuring them (qimg measure -O vhdx; qemu-img 7.2
 * has no measure for vhdx).
 *
 * Owns: the create options, with qemu-img's checks and messages, and the
 * layout of a new image.
 *
 * Invariants (cited as "vhdx/create.c invariant N"):
 *  1. Options as qemu-img takes them: the size rounded up to 512 bytes (at
 *     most 64 TiB), log_size and block_size rounded up to whole MiB
 *     (block_size 0 means 8, 16, 32 or 64 MiB by the disk's size, anything
 *     above 256 MiB becomes 256 MiB, a non-power of two is refused), a log
 *     of at least 1 MiB and below 4 GiB.
 *  2. The layout is qemu-img's: file identifier, two headers (sequence
 *     numbers n and n + 1, no log), two identical region tables, the log at
 *     1 MiB, the BAT behind it (whole MiB), the 1 MiB metadata region behind
 *     that (table, then the five items packed at 64 KiB), data 4 MiB
 *     further.  With block_state_zero (the default) every block is ZERO --
 *     a fixed image's too, as qemu-img makes it (its first writes then
 *     allocate at the end of the file); without it a dynamic image's blocks
 *     are not present and a fixed image's fully present in order.  A fixed
 *     image's file spans its data area (sparse).  512-byte
 *     logical and physical sectors.  Everything is flushed before create
 *     returns.
 *  3. As qemu-img, the file is created (emptied) before the options are
 *     checked, and left in place when they are refused.
 */
#include "vhdx/vhdx.h"

#include "block/endian.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

typedef struct VhdxParams {
    uint64_t size;
    uint64_t log_size;
    uint64_t block_size;
    bool fixed;
    bool zero_blocks;
    /* the layout (invariant 2) */
    uint64_t blocks, bat_entries, bat_offset, bat_length, meta_offset, data_offset;
} VhdxParams;

static int parse_size(const char *key, const char *v, uint64_t *out)
{
    char *end;
    *out = g_ascii_strtoull(v, &end, 10);
    return *end ? blk_error(EINVAL, "Parameter '%s' expects a size", key) : 0;
}

static int parse_params(const BlkCreateOptions *opts, uint64_t size, VhdxParams *p)
{
    GHashTableIter it;
    gpointer k, v;
    int ret = 0;

    memset(p, 0, sizeof(*p));
    p->size = size;
    p->log_size = VHDX_DEFAULT_LOG_SIZE;
    p->zero_blocks = true;
    if (opts->backing_file) {
        return blk_error(ENOTSUP, "Backing file not supported for file format 'vhdx'");
    }
    if (opts->options) {
        g_hash_table_iter_init(&it, opts->options);
    }
    while (ret == 0 && opts->options && g_hash_table_iter_next(&it, &k, &v)) {
        if (strcmp(k, "subformat") == 0) {
            if (strcmp(v, "dynamic") != 0 && strcmp(v, "fixed") != 0) {
                ret =
                    blk_error(EINVAL, "Parameter 'subformat' does not accept value '%s'",
                              (const char *)v);
            }
            p->fixed = strcmp(v, "fixed") == 0;
        } else if (strcmp(k, "block_state_zero") == 0) {
            p->zero_blocks = strcmp(v, "on") == 0;
        } else if (strcmp(k, "log_size") == 0) {
            ret = parse_size(k, v, &p->log_size);
        } else if (strcmp(k, "block_size") == 0) {
            ret = parse_size(k, v, &p->block_size);
        } else if (strcmp(k, "size") == 0) {
            if (!opts->size_set) {
                ret = parse_size(k, v, &p->size);
            }
        } else {
            ret = blk_error(EINVAL, "Invalid parameter '%s'", (const char *)k);
        }
    }
    if (ret < 0) {
        return ret;
    }
    /* invariant 1 */
    if (p->size > VHDX_MAX_DISK_SIZE) {
        return blk_error(EINVAL, "Image size too large; max of 64TB");
    }
    p->size = ROUND_UP(p->size, 512);
    if (p->log_size > UINT32_MAX) {
        return blk_error(EINVAL, "Log size must be smaller than 4 GB");
    }
    p->log_size = ROUND_UP(p->log_size, VHDX_MIB);
    if (p->log_size < VHDX_MIB || p->log_size > UINT32_MAX) {
        return blk_error(EINVAL, p->log_size > UINT32_MAX
                                     ? "Log size must be smaller than 4 GB"
                                     : "Log size must be a multiple of 1 MB");
    }
    p->block_size = MIN(ROUND_UP(p->block_size, VHDX_MIB), (uint64_t)VHDX_BLOCK_SIZE_MAX);
    if (p->block_size == 0) {
        p->block_size = p->size > (UINT64_C(32) << 40)    ? 64 * VHDX_MIB
                        : p->size > (UINT64_C(100) << 30) ? 32 * VHDX_MIB
                        : p->size > (UINT64_C(1) << 30)   ? 16 * VHDX_MIB
                                                          : 8 * VHDX_MIB;
    }
    if (p->block_size & (p->block_size - 1)) {
        return blk_error(EINVAL, "Block size must be a power of two");
    }
    /* invariant 2 */
    uint64_t cr = VHDX_MAX_SECTORS_PER_BLOCK * 512 / p->block_size;
    p->blocks = DIV_ROUND_UP(p->size, p->block_size);
    p->bat_entries = p->blocks ? p->blocks + (p->blocks - 1) / cr : 0;
    p->bat_offset = VHDX_HEADER_SECTION_END + p->log_size;
    p->bat_length = ROUND_UP(p->bat_entries * 8, VHDX_MIB);
    p->meta_offset = p->bat_offset + p->bat_length;
    p->data_offset = p->meta_offset + 5 * VHDX_MIB;
    return 0;
}

static int write_headers(BlkNode *file, const VhdxParams *p)
{
    uint8_t id[VHDX_KIB] = "vhdxfile", buf[VHDX_HEADER_SIZE];
    static const char creator[] = "qimg";
    VhdxHeader h = {.signature = VHDX_SIG_HEAD,
                    .sequence = g_random_int(),
                    .version = 1,
                    .log_length = (uint32_t)p->log_size,
                    .log_offset = VHDX_HEADER_SECTION_END};
    int ret;

    for (size_t i = 0; i < sizeof(creator) - 1; i++) {
        store_le16(id + 8 + 2 * i, (uint16_t)creator[i]);
    }
    vhdx_guid_random(&h.file_write_guid);
    vhdx_guid_random(&h.data_write_guid);
    ret = blk_pwrite(file, VHDX_FILE_ID_OFFSET, id, sizeof(id), 0);
    for (int i = 0; i < 2 && ret == 0; i++, h.sequence++) {
        vhdx_header_encode(&h, buf);
        ret = blk_pwrite(file, i ? VHDX_HEADER2_OFFSET : VHDX_HEADER1_OFFSET, buf,
                         sizeof(buf), 0);
    }
    return ret < 0 ? blk_error_prefix(ret, "Failed to write image headers") : 0;
}

static int write_regions_and_bat(BlkNode *file, const VhdxParams *p)
{
    g_autofree uint8_t *buf = g_malloc(VHDX_REGION_TABLE_SIZE);
    VhdxRegion r[2] = {
        {vhdx_guid_bat, p->bat_offset, (uint32_t)p->bat_length, VHDX_REGION_REQUIRED},
        {vhdx_guid_metadata, p->meta_offset, VHDX_MIB, VHDX_REGION_REQUIRED},
    };
    uint64_t end = p->data_offset + (p->fixed ? p->size : 0);
    int ret = blk_truncate(file, end, false, BLK_PREALLOC_OFF, false);
    bool zero_init = file->drv->has_zero_init && file->drv->has_zero_init(file);

    if (ret == 0 && (p->fixed || p->zero_blocks || !zero_init)) {
        uint64_t cr = VHDX_MAX_SECTORS_PER_BLOCK * 512 / p->block_size;
        for (uint64_t pos = 0; pos < p->bat_length && ret == 0;
             pos += VHDX_REGION_TABLE_SIZE) {
            memset(buf, 0, VHDX_REGION_TABLE_SIZE);
            for (uint64_t k = 0; k < VHDX_REGION_TABLE_SIZE; k += 8) {
                uint64_t i = (pos + k) / 8, b = i - i / (cr + 1);
                if (i >= p->bat_entries || i % (cr + 1) == cr) {
                    continue; /* past the disk, or a sector bitmap entry */
                }
                store_le64(buf + k,
                           p->zero_blocks ? vhdx_bat_make(0, VHDX_PAYLOAD_ZERO)
                           : p->fixed ? vhdx_bat_make(p->data_offset + b * p->block_size,
                                                      VHDX_PAYLOAD_FULLY_PRESENT)
                                      : 0);
            }
            ret = blk_pwrite(file, p->bat_offset + pos, buf, VHDX_REGION_TABLE_SIZE, 0);
        }
        if (ret < 0) {
            return blk_error_prefix(ret, "Failed to write the BAT");
        }
    }
    vhdx_region_table_encode(r, 2, buf);
    if (ret == 0) {
        ret = blk_pwrite(file, VHDX_REGION1_OFFSET, buf, VHDX_REGION_TABLE_SIZE, 0);
    }
    if (ret == 0) {
        ret = blk_pwrite(file, VHDX_REGION2_OFFSET, buf, VHDX_REGION_TABLE_SIZE, 0);
    }
    return ret < 0 ? blk_error_prefix(ret, "Failed to write the region tables") : 0;
}

static int write_metadata(BlkNode *file, const VhdxParams *p)
{
    g_autofree uint8_t *table = g_malloc(VHDX_METADATA_TABLE_SIZE);
    const uint32_t base = 64 * VHDX_KIB,
                   vd = VHDX_META_IS_REQUIRED | VHDX_META_IS_VIRTUAL_DISK;
    VhdxMetaEntry e[5] = {
        {vhdx_guid_file_params, base, 8, VHDX_META_IS_REQUIRED},
        {vhdx_guid_disk_size, base + 8, 8, vd},
        {vhdx_guid_page83, base + 16, 16, vd},
        {vhdx_guid_logical_sector, base + 32, 4, vd},
        {vhdx_guid_physical_sector, base + 36, 4, vd},
    };
    uint8_t items[40] = {0};
    VhdxGuid page83;
    int ret;

    store_le32(items, (uint32_t)p->block_size);
    store_le32(items + 4, p->fixed ? VHDX_PARAM_LEAVE_BLOCKS_ALLOCATED : 0);
    store_le64(items + 8, p->size);
    vhdx_guid_random(&page83);
    memcpy(items + 16, page83.b, 16);
    store_le32(items + 32, 512);
    store_le32(items + 36, 512);
    vhdx_meta_table_encode(e, 5, table);
    ret = blk_pwrite(file, p->meta_offset, table, VHDX_METADATA_TABLE_SIZE, 0);
    if (ret == 0) {
        ret = blk_pwrite(file, p->meta_offset + base, items, sizeof(items), 0);
    }
    return ret < 0 ? blk_error_prefix(ret, "Failed to initialize metadata") : 0;
}

int vhdx_create(const char *filename, const BlkCreateOptions *opts)
{
    VhdxParams p;
    BlkNode *file;
    int ret;

    ret =
        blk_file_create(blk_plain_name(filename), 0, BLK_PREALLOC_OFF); /* invariant 3 */
    if (ret < 0) {
        return ret;
    }
    ret = parse_params(opts, opts->size, &p);
    if (ret < 0) {
        return ret;
    }
    file = blk_open_new_image(filename, &ret);
    if (!file) {
        return ret;
    }
    ret = write_headers(file, &p);
    if (ret == 0) {
        ret = write_regions_and_bat(file, &p);
    }
    if (ret == 0) {
        ret = write_metadata(file, &p);
    }
    if (ret == 0) {
        ret = blk_flush(file);
    }
    blk_close(file);
    return ret;
}

int vhdx_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                 BlkMeasure *out)
{
    VhdxParams p;
    uint64_t data = 0;
    int ret = parse_params(opts, src ? src->size : opts->size, &p);

    if (ret < 0) {
        return ret;
    }
    memset(out, 0, sizeof(*out));
    if (p.fixed) {
        out->required = out->fully_allocated = p.data_offset + p.size;
        return 0;
    }
    if (src && (ret = src->data_bytes(src->opaque, p.block_size, &data)) < 0) {
        return ret;
    }
    out->fully_allocated = p.data_offset + p.blocks * p.block_size;
    out->required = p.data_offset + DIV_ROUND_UP(data, p.block_size) * p.block_size;
    return 0;
}
