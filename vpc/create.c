/*
 * vpc/create.c: creating VHD images (qemu-img create -f vpc, convert -O
 * vpc) and measuring them (qimg measure -O vpc; qemu-img 7.2 has no
 * measure for vpc).
 *
 * Owns: the create options (subformat=dynamic|fixed, force_size) and the
 * layout of a new image.
 *
 * Invariants (cited as "vpc/create.c invariant N"):
 *  1. The size is rounded up to 512 bytes, then (without force_size) up
 *     to the first size the spec's CHS geometry represents exactly, as
 *     qemu-img searches it; a size past the geometry's maximum is kept
 *     (the geometry becomes 65535/16/255) up to 2040 GiB.  force_size keeps
 *     the size, records the maximum geometry and creator "qem2" (what makes
 *     readers take current_size); otherwise the creator is "qemu".
 *  2. A dynamic image is laid out as qemu-img lays it out: footer copy at
 *     0, dynamic header at 512, BAT (all unused) at 1536 padded to whole
 *     sectors, footer behind it; 2 MiB blocks.  A fixed image is the data
 *     area (sparse) and the footer at its end.  Everything is flushed
 *     before create returns.
 *  3. As qemu-img, the file is created (emptied) before the options are
 *     checked, and left in place when they are refused.
 */
#include "vpc/vpc.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

typedef struct VpcParams {
    uint64_t size; /* bytes, after invariant 1 */
    bool fixed;
    bool force_size;
    uint16_t cyls;
    uint8_t heads, secs;
} VpcParams;

static int parse_bool(const char *key, const char *v, bool *out)
{
    if (strcmp(v, "on") == 0) {
        *out = true;
    } else if (strcmp(v, "off") == 0) {
        *out = false;
    } else {
        return blk_error(EINVAL, "Parameter '%s' expects 'on' or 'off'", key);
    }
    return 0;
}

/* Invariant 1: the geometry and the size it stands for. */
static int round_size(VpcParams *p)
{
    uint64_t total, want = p->size / VPC_SECTOR;

    if (p->force_size) {
        p->cyls = VPC_CHS_MAX_C;
        p->heads = VPC_CHS_MAX_H;
        p->secs = VPC_CHS_MAX_S;
    } else {
        uint64_t start = MIN(VPC_MAX_GEOMETRY, want);
        p->cyls = p->heads = p->secs = 0;
        for (uint64_t i = 0; start > (uint64_t)p->cyls * p->heads * p->secs; i++) {
            vpc_chs(start + i, &p->cyls, &p->heads, &p->secs);
        }
    }
    if ((uint64_t)p->cyls * p->heads * p->secs == VPC_MAX_GEOMETRY) {
        total = want;
        if (total > VPC_MAX_SECTORS) {
            return blk_error(EFBIG, "Disk size is too large, max size is 2040 GiB");
        }
    } else {
        total = (uint64_t)p->cyls * p->heads * p->secs;
    }
    p->size = total * VPC_SECTOR;
    return 0;
}

static int parse_params(const BlkCreateOptions *opts, uint64_t size, VpcParams *p)
{
    memset(p, 0, sizeof(*p));
    p->size = size;
    if (opts->backing_file) {
        return blk_error(ENOTSUP, "Backing file not supported for file format 'vpc'");
    }
    if (opts->options) {
        GHashTableIter it;
        gpointer k, v;
        g_hash_table_iter_init(&it, opts->options);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            int ret = 0;
            if (strcmp(k, "subformat") == 0) {
                if (strcmp(v, "dynamic") == 0 || strcmp(v, "fixed") == 0) {
                    p->fixed = strcmp(v, "fixed") == 0;
                } else {
                    ret = blk_error(EINVAL,
                                    "Parameter 'subformat' does not accept value '%s'",
                                    (const char *)v);
                }
            } else if (strcmp(k, "force_size") == 0) {
                ret = parse_bool(k, v, &p->force_size);
            } else if (strcmp(k, "size") == 0) {
                if (!opts->size_set) {
                    p->size = g_ascii_strtoull(v, NULL, 10);
                }
            } else {
                ret = blk_error(EINVAL, "Invalid parameter '%s'", (const char *)k);
            }
            if (ret < 0) {
                return ret;
            }
        }
    }
    if (p->size > (uint64_t)INT64_MAX - VPC_SECTOR) {
        return blk_error(EFBIG, "Disk size is too large, max size is 2040 GiB");
    }
    p->size = ROUND_UP(p->size, VPC_SECTOR);
    return round_size(p);
}

static uint32_t bat_entries(const VpcParams *p)
{
    return (uint32_t)DIV_ROUND_UP(p->size / VPC_SECTOR,
                                  VPC_DEFAULT_BLOCK_SIZE / VPC_SECTOR);
}

static uint64_t bat_bytes(const VpcParams *p)
{
    return ROUND_UP((uint64_t)bat_entries(p) * 4, VPC_SECTOR);
}

static void make_footer(const VpcParams *p, VpcFooter *f)
{
    memset(f, 0, sizeof(*f));
    memcpy(f->cookie, "conectix", 8);
    memcpy(f->creator_app, p->force_size ? "qem2" : "qemu", 4);
    memcpy(f->creator_os, "Wi2k", 4);
    f->features = 2;
    f->version = 0x00010000;
    f->data_offset = p->fixed ? VPC_NO_OFFSET : VPC_FOOTER_SIZE;
    f->timestamp = (uint32_t)(time(NULL) - VPC_TIMESTAMP_BASE);
    f->creator_major = 5; /* Virtual PC 2007, as qemu-img writes */
    f->creator_minor = 3;
    f->orig_size = f->current_size = p->size;
    f->cyls = p->cyls;
    f->heads = p->heads;
    f->secs_per_cyl = p->secs;
    f->type = p->fixed ? VPC_TYPE_FIXED : VPC_TYPE_DYNAMIC;
    for (int i = 0; i < 16; i += 4) {
        uint32_t r = g_random_int();
        memcpy(f->uuid + i, &r, 4);
    }
    f->uuid[6] = (f->uuid[6] & 0x0f) | 0x40; /* a version 4 UUID */
    f->uuid[8] = (f->uuid[8] & 0x3f) | 0x80;
}

/* Invariant 2. */
static int write_dynamic(BlkNode *file, const VpcParams *p, const uint8_t *footer)
{
    uint8_t hbuf[VPC_DYN_HEADER_SIZE];
    uint64_t bat = bat_bytes(p);
    g_autofree uint8_t *ff = g_malloc(64 * 1024);
    VpcDynHeader h = {0};
    int ret;

    memset(ff, 0xff, 64 * 1024);
    ret = blk_pwrite(file, 0, footer, VPC_FOOTER_SIZE, 0);
    if (ret == 0) {
        ret = blk_pwrite(file, 3 * VPC_SECTOR + bat, footer, VPC_FOOTER_SIZE, 0);
    }
    for (uint64_t off = 0; ret == 0 && off < bat; off += 64 * 1024) {
        ret = blk_pwrite(file, 3 * VPC_SECTOR + off, ff,
                         (size_t)MIN((uint64_t)64 * 1024, bat - off), 0);
    }
    memcpy(h.cookie, "cxsparse", 8);
    h.data_offset = VPC_NO_OFFSET;
    h.table_offset = 3 * VPC_SECTOR;
    h.version = 0x00010000;
    h.block_size = VPC_DEFAULT_BLOCK_SIZE;
    h.max_table_entries = bat_entries(p);
    vpc_dyn_header_encode(&h, hbuf);
    if (ret == 0) {
        ret = blk_pwrite(file, VPC_FOOTER_SIZE, hbuf, sizeof(hbuf), 0);
    }
    return ret < 0 ? blk_error_prefix(ret, "Unable to create or write VHD header") : 0;
}

int vpc_create(const char *filename, const BlkCreateOptions *opts)
{
    uint8_t footer[VPC_FOOTER_SIZE];
    VpcFooter f;
    VpcParams p;
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
    if (p.fixed) {
        /* the data area sparse, its first block allocated (block/file-create.c) */
        ret = blk_file_create(blk_plain_name(filename), p.size + VPC_FOOTER_SIZE,
                              BLK_PREALLOC_OFF);
        if (ret < 0) {
            return ret;
        }
    }
    file = blk_open_new_image(filename, &ret);
    if (!file) {
        return ret;
    }
    make_footer(&p, &f);
    vpc_footer_encode(&f, footer);
    if (p.fixed) {
        ret = blk_pwrite(file, p.size, footer, VPC_FOOTER_SIZE, 0);
        if (ret < 0) {
            blk_error_prefix(ret, "Unable to write VHD header");
        }
    } else {
        ret = write_dynamic(file, &p, footer);
    }
    if (ret == 0) {
        ret = blk_flush(file);
    }
    blk_close(file);
    return ret;
}

/* qimg measure -O vpc: what convert -O vpc would make of src (or of an
 * empty disk of opts' size). */
int vpc_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                BlkMeasure *out)
{
    VpcParams p;
    uint64_t meta, blocks, data = 0;
    int ret = parse_params(opts, src ? src->size : opts->size, &p);

    if (ret < 0) {
        return ret;
    }
    memset(out, 0, sizeof(*out));
    if (p.fixed) {
        out->required = out->fully_allocated = p.size + VPC_FOOTER_SIZE;
        return 0;
    }
    meta = 3 * VPC_SECTOR + bat_bytes(&p) + VPC_FOOTER_SIZE;
    blocks = DIV_ROUND_UP(p.size, VPC_DEFAULT_BLOCK_SIZE);
    if (src) {
        ret = src->data_bytes(src->opaque, VPC_DEFAULT_BLOCK_SIZE, &data);
        if (ret < 0) {
            return ret;
        }
    }
    uint64_t per = VPC_DEFAULT_BLOCK_SIZE + vpc_bitmap_size(VPC_DEFAULT_BLOCK_SIZE);
    out->fully_allocated = meta + blocks * per;
    out->required = meta + DIV_ROUND_UP(data, VPC_DEFAULT_BLOCK_SIZE) * per;
    return 0;
}
