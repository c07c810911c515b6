/*
 * vdi/create.c: creating VDI images (qemu-img create -f vdi, convert -O
 * vdi, with static=on|off) and measuring them (qimg measure -O vdi;
 * qemu-img 7.2 has no measure for vdi).
 *
 * Owns: the create options and the layout of a new image.
 *
 * Invariants (cited as "vdi/create.c invariant N"):
 *  1. The layout is qemu-img's: the header (QEMU's text, version 1.1,
 *     header size 0x180, random image and last-snapshot UUIDs) at 0, the
 *     block map at 512 padded to whole sectors, data behind it; 1 MiB
 *     blocks; the size rounded up to 512 bytes, at most VDI_DISK_SIZE_MAX.
 *  2. A static image maps block i to index i, counts every block
 *     allocated and is as long as all of them (sparse); a dynamic one maps
 *     nothing.  Everything is flushed before create returns.
 *  3. As qemu-img, the file is created (emptied) before the options are
 *     checked, and left in place when they are refused.
 */
#include "vdi/vdi.h"

#include "block/endian.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

typedef struct VdiParams {
    uint64_t size;
    bool is_static;
} VdiParams;

static int parse_params(const BlkCreateOptions *opts, uint64_t size, VdiParams *p)
{
    memset(p, 0, sizeof(*p));
    p->size = size;
    if (opts->backing_file) {
        return blk_error(ENOTSUP, "Backing file not supported for file format 'vdi'");
    }
    if (opts->options) {
        GHashTableIter it;
        gpointer k, v;
        g_hash_table_iter_init(&it, opts->options);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            if (strcmp(k, "static") == 0) {
                if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
                    return blk_error(EINVAL, "Parameter 'static' expects 'on' or 'off'");
                }
                p->is_static = strcmp(v, "on") == 0;
            } else if (strcmp(k, "size") == 0) {
                if (!opts->size_set) {
                    p->size = g_ascii_strtoull(v, NULL, 10);
                }
            } else {
                return blk_error(EINVAL, "Invalid parameter '%s'", (const char *)k);
            }
        }
    }
    if (p->size > VDI_DISK_SIZE_MAX) {
        return blk_error(ENOTSUP,
                         "Unsupported VDI image size (size is 0x%" PRIx64
                         ", max supported is 0x%" PRIx64 ")",
                         p->size, VDI_DISK_SIZE_MAX);
    }
    p->size = ROUND_UP(p->size, VDI_SECTOR);
    return 0;
}

static uint32_t blocks_of(const VdiParams *p)
{
    return (uint32_t)DIV_ROUND_UP(p->size, VDI_BLOCK_SIZE);
}

static uint64_t map_bytes(const VdiParams *p)
{
    return ROUND_UP((uint64_t)blocks_of(p) * 4, VDI_SECTOR);
}

static void random_uuid(uint8_t *u)
{
    for (int i = 0; i < 16; i += 4) {
        uint32_t r = g_random_int();
        memcpy(u + i, &r, 4);
    }
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
}

static int write_image(BlkNode *file, const VdiParams *p)
{
    uint8_t hbuf[VDI_HEADER_SIZE];
    VdiHeader h = {0};
    uint32_t blocks = blocks_of(p);
    uint64_t mb = map_bytes(p);
    g_autofree uint8_t *chunk = g_malloc(64 * 1024);
    int ret;

    memcpy(h.text, VDI_TEXT, sizeof(VDI_TEXT) - 1);
    h.signature = VDI_SIGNATURE;
    h.version = VDI_VERSION_1_1;
    h.header_size = VDI_HEADER_SIZE_FIELD;
    h.image_type = p->is_static ? VDI_TYPE_STATIC : VDI_TYPE_DYNAMIC;
    h.offset_bmap = VDI_HEADER_SIZE;
    h.offset_data = (uint32_t)(VDI_HEADER_SIZE + mb);
    h.sector_size = VDI_SECTOR;
    h.disk_size = p->size;
    h.block_size = VDI_BLOCK_SIZE;
    h.blocks_in_image = blocks;
    h.blocks_allocated = p->is_static ? blocks : 0;
    random_uuid(h.uuid_image);
    random_uuid(h.uuid_last_snap);
    vdi_header_encode(&h, hbuf);
    ret = blk_pwrite(file, 0, hbuf, sizeof(hbuf), 0);
    if (ret < 0) {
        return blk_error_prefix(ret, "Error writing header");
    }
    /* the map in 64 KiB chunks (invariant 2), its padding as qemu-img's zeros */
    for (uint64_t off = 0; off < mb; off += 64 * 1024) {
        size_t n = (size_t)MIN((uint64_t)64 * 1024, mb - off);
        memset(chunk, 0, n);
        for (size_t i = 0; i < n; i += 4) {
            uint64_t b = (off + i) / 4;
            if (b < blocks) {
                store_le32(chunk + i, p->is_static ? (uint32_t)b : VDI_UNALLOCATED);
            }
        }
        ret = blk_pwrite(file, VDI_HEADER_SIZE + off, chunk, n, 0);
        if (ret < 0) {
            return blk_error_prefix(ret, "Error writing bmap");
        }
    }
    if (p->is_static) {
        ret = blk_truncate(file, VDI_HEADER_SIZE + mb + (uint64_t)blocks * VDI_BLOCK_SIZE,
                           false, BLK_PREALLOC_OFF, false);
        if (ret < 0) {
            return blk_error_prefix(ret, "Failed to statically allocate file");
        }
    }
    return blk_flush(file);
}

int vdi_create(const char *filename, const BlkCreateOptions *opts)
{
    VdiParams p;
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
    ret = write_image(file, &p);
    blk_close(file);
    return ret;
}

int vdi_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                BlkMeasure *out)
{
    VdiParams p;
    uint64_t data = 0, meta;
    int ret = parse_params(opts, src ? src->size : opts->size, &p);

    if (ret < 0) {
        return ret;
    }
    memset(out, 0, sizeof(*out));
    meta = VDI_HEADER_SIZE + map_bytes(&p);
    out->fully_allocated = meta + (uint64_t)blocks_of(&p) * VDI_BLOCK_SIZE;
    if (p.is_static) {
        out->required = out->fully_allocated;
        return 0;
    }
    if (src) {
        ret = src->data_bytes(src->opaque, VDI_BLOCK_SIZE, &data);
        if (ret < 0) {
            return ret;
        }
    }
    out->required = meta + DIV_ROUND_UP(data, VDI_BLOCK_SIZE) * VDI_BLOCK_SIZE;
    return 0;
}
