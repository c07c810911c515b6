/*
 * vmdk/create.c: creating VMDK images in every subformat qemu-img 7.2
 * creates (monolithicSparse, monolithicFlat, twoGbMaxExtentSparse,
 * twoGbMaxExtentFlat, streamOptimized) with its options (adapter_type,
 * hwversion, toolsversion, compat6, zeroed_grain, backing_file for a delta
 * disk), laid out as qemu-img lays them out.
 *
 * Owns: the options' parsing and checks (qemu-img's order and messages),
 * the extent files' names, the sparse extent layout, the descriptor text.
 *
 * Invariants (cited as "create.c invariant N"):
 *  1. Every option is checked before a file is made; a failure after that
 *     removes the files this create made (none is left half made).
 *  2. A sparse extent is QEMU's: header (version 1; 2 with zeroed grains;
 *     3 compressed), its 20-sector descriptor area at sector 1, the
 *     redundant grain directory at sector 21 with its grain tables, the
 *     grain directory with its tables, the grains from a multiple of 128
 *     sectors; every table is allocated (zeros, a hole) and both
 *     directories point at them.
 *  3. Extent files are named as qemu-img names them: PATH/PREFIX-s001.EXT
 *     (sparse) or -f001 (flat) for the split subformats, -flat.EXT for
 *     monolithicFlat; the descriptor names them by their base name.
 *  4. A delta disk's parent must open as a VMDK (its name relative to the
 *     new image's folder, as qemu-img resolves it): parentCID is its CID
 *     and parentFileNameHint the name as given.
 */
#include "vmdk/vmdk.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define VMDK_SPLIT_BYTES 0x80000000ull /* twoGbMaxExtent* */
#define VMDK_CREATE_GRAIN_SECTORS 128u

typedef enum {
    SUB_MONOLITHIC_SPARSE,
    SUB_MONOLITHIC_FLAT,
    SUB_TWOGB_SPARSE,
    SUB_TWOGB_FLAT,
    SUB_STREAM,
} Subformat;

static const char *const subformat_names[] = {
    [SUB_MONOLITHIC_SPARSE] = "monolithicSparse",
    [SUB_MONOLITHIC_FLAT] = "monolithicFlat",
    [SUB_TWOGB_SPARSE] = "twoGbMaxExtentSparse",
    [SUB_TWOGB_FLAT] = "twoGbMaxExtentFlat",
    [SUB_STREAM] = "streamOptimized",
};

static const char *const adapter_names[] = {"ide", "buslogic", "lsilogic", "legacyESX"};

typedef struct Params {
    uint64_t size;
    Subformat sub;
    const char *adapter;
    const char *hwversion;
    const char *toolsversion;
    bool compat6;
    bool zeroed_grain;
    const char *backing;
    BlkPrealloc prealloc;
    bool split, flat, compress;
} Params;

static const char *opt(const BlkCreateOptions *o, const char *key)
{
    return o->options ? g_hash_table_lookup(o->options, key) : NULL;
}

static int opt_bool(const BlkCreateOptions *o, const char *key, bool *out)
{
    const char *v = opt(o, key);

    *out = false;
    if (!v || strcmp(v, "off") == 0 || strcmp(v, "false") == 0 || strcmp(v, "no") == 0 ||
        strcmp(v, "n") == 0) {
        return 0;
    }
    if (strcmp(v, "on") == 0 || strcmp(v, "true") == 0 || strcmp(v, "yes") == 0 ||
        strcmp(v, "y") == 0) {
        *out = true;
        return 0;
    }
    return blk_error(EINVAL, "Parameter '%s' expects 'on' or 'off'", key);
}

static const char *const known[] = {
    "size",      "adapter_type", "backing_file", "backing_fmt",  "compat6",
    "hwversion", "toolsversion", "subformat",    "zeroed_grain", "preallocation"};

/* Invariant 1: qemu-img's order of checks. */
static int parse(const BlkCreateOptions *o, Params *p)
{
    const char *fmt = o->backing_format ? o->backing_format : opt(o, "backing_fmt");
    const char *v;
    uint64_t size = o->size;
    int ret;

    memset(p, 0, sizeof(*p));
    if (o->options) {
        GHashTableIter it;
        gpointer k;
        g_hash_table_iter_init(&it, o->options);
        while (g_hash_table_iter_next(&it, &k, NULL)) {
            bool ok = false;
            for (size_t i = 0; i < G_N_ELEMENTS(known) && !ok; i++) {
                ok = strcmp(k, known[i]) == 0;
            }
            if (!ok) {
                return blk_error(EINVAL, "Invalid parameter '%s'", (const char *)k);
            }
        }
    }
    if (fmt && strcmp(fmt, "vmdk") != 0) {
        return blk_error(EINVAL, "backing_file must be a vmdk image");
    }
    if (!o->size_set && (v = opt(o, "size"))) {
        size = g_ascii_strtoull(v, NULL, 10);
    }
    if (size > (uint64_t)INT64_MAX - VMDK_SECTOR) {
        return blk_error(EFBIG, "Image size must be less than 8 EiB!");
    }
    p->size = ROUND_UP(size, VMDK_SECTOR);
    p->adapter = "ide";
    if ((v = opt(o, "adapter_type"))) {
        bool ok = false;
        for (size_t i = 0; i < G_N_ELEMENTS(adapter_names) && !ok; i++) {
            ok = strcmp(v, adapter_names[i]) == 0;
        }
        if (!ok) {
            return blk_error(EINVAL, "invalid parameter value: %s", v);
        }
        p->adapter = v;
    }
    p->backing = o->backing_file ? o->backing_file : opt(o, "backing_file");
    if (p->backing && !*p->backing) {
        p->backing = NULL;
    }
    p->hwversion = opt(o, "hwversion");
    if (p->hwversion && strcmp(p->hwversion, "undefined") == 0) {
        p->hwversion = NULL;
    }
    p->toolsversion = opt(o, "toolsversion");
    ret = opt_bool(o, "compat6", &p->compat6);
    if (ret == 0) {
        ret = opt_bool(o, "zeroed_grain", &p->zeroed_grain);
    }
    if (ret < 0) {
        return ret;
    }
    p->sub = SUB_MONOLITHIC_SPARSE;
    if ((v = opt(o, "subformat"))) {
        bool ok = false;
        for (size_t i = 0; i < G_N_ELEMENTS(subformat_names) && !ok; i++) {
            if (strcmp(v, subformat_names[i]) == 0) {
                p->sub = (Subformat)i;
                ok = true;
            }
        }
        if (!ok) {
            return blk_error(EINVAL, "invalid parameter value: %s", v);
        }
    }
    p->split = p->sub == SUB_TWOGB_FLAT || p->sub == SUB_TWOGB_SPARSE;
    p->flat = p->sub == SUB_MONOLITHIC_FLAT || p->sub == SUB_TWOGB_FLAT;
    p->compress = p->sub == SUB_STREAM;
    if ((v = opt(o, "preallocation"))) {
        ret = blk_prealloc_parse(v, &p->prealloc);
        if (ret < 0) {
            return ret;
        }
        if (p->prealloc == BLK_PREALLOC_METADATA) {
            return blk_error(EINVAL, "Unsupported preallocation mode: metadata");
        }
    }
    if (p->compat6) {
        if (p->hwversion) {
            return blk_error(EINVAL, "compat6 cannot be enabled with hwversion set");
        }
        p->hwversion = "6";
    }
    if (!p->hwversion) {
        p->hwversion = "4";
    }
    if (!p->toolsversion) {
        p->toolsversion = "2147483647";
    }
    if (p->flat && p->backing) {
        return blk_error(ENOTSUP, "Flat image can't have backing file");
    }
    if (p->flat && p->zeroed_grain) {
        return blk_error(ENOTSUP, "Flat image can't enable zeroed grain");
    }
    return 0;
}

/* Invariant 3: QEMU's filename_decompose(). */
static void decompose(const char *filename, char **path, char **prefix, char **postfix)
{
    const char *p = strrchr(filename, '/'), *q;

    if (!p) {
        p = strrchr(filename, '\\');
    }
    if (!p) {
        p = strrchr(filename, ':');
    }
    p = p ? p + 1 : filename;
    *path = g_strndup(filename, (gsize)(p - filename));
    q = strrchr(p, '.');
    *prefix = q ? g_strndup(p, (gsize)(q - p)) : g_strdup(p);
    *postfix = g_strdup(q ? q : "");
}

/* Invariant 2: the sparse extent's header and directories on file. */
static int init_sparse(BlkNode *f, uint64_t bytes, bool compress, bool zeroed_grain,
                       BlkPrealloc prealloc)
{
    uint64_t capacity = bytes / VMDK_SECTOR, grains, gt_count, gd_sectors, gt_size;
    uint8_t head[VMDK_SECTOR] = {0};
    g_autofree uint8_t *gd = NULL;
    Vmdk4Header h = {0};
    int ret;

    h.version = compress ? 3 : zeroed_grain ? 2 : 1;
    h.flags = VMDK4_FLAG_RGD | VMDK4_FLAG_NL_DETECT |
              (compress ? VMDK4_FLAG_COMPRESS | VMDK4_FLAG_MARKER : 0) |
              (zeroed_grain ? VMDK4_FLAG_ZERO_GRAIN : 0);
    h.compress_algorithm = compress ? VMDK4_COMPRESSION_DEFLATE : 0;
    h.capacity = capacity;
    h.granularity = VMDK_CREATE_GRAIN_SECTORS;
    h.num_gtes = VMDK4_MAX_GTES;
    grains = DIV_ROUND_UP(capacity, h.granularity);
    gt_size = DIV_ROUND_UP(h.num_gtes * 4u, VMDK_SECTOR);
    gt_count = DIV_ROUND_UP(grains, h.num_gtes);
    gd_sectors = DIV_ROUND_UP(gt_count * 4, VMDK_SECTOR);
    h.desc_offset = 1;
    h.desc_size = 20;
    h.rgd_offset = h.desc_offset + h.desc_size;
    h.gd_offset = h.rgd_offset + gd_sectors + gt_size * gt_count;
    h.grain_offset =
        ROUND_UP(h.gd_offset + gd_sectors + gt_size * gt_count, h.granularity);
    if (h.grain_offset + gd_sectors > UINT32_MAX) {
        return blk_error(EFBIG, "Image size too large for a VMDK sparse extent");
    }
    vmdk4_header_encode(&h, head);
    ret = blk_pwrite(f, 0, head, sizeof(head), 0);
    if (ret == 0) {
        ret =
            blk_truncate(f, h.grain_offset * VMDK_SECTOR, false, BLK_PREALLOC_OFF, true);
    }
    gd = g_malloc0(gd_sectors * VMDK_SECTOR);
    for (uint64_t base = h.rgd_offset; ret == 0; base = h.gd_offset) {
        for (uint64_t i = 0; i < gt_count; i++) {
            store_le32(gd + 4 * i, (uint32_t)(base + gd_sectors + i * gt_size));
        }
        ret = blk_pwrite(f, base * VMDK_SECTOR, gd, gd_sectors * VMDK_SECTOR, 0);
        if (base == h.gd_offset) {
            break;
        }
    }
    return ret;
}

typedef struct Made {
    GPtrArray *files; /* the names this create made (invariant 1) */
} Made;

/* Create one file and open it for writing. */
static BlkNode *new_file(Made *m, const char *name, const char *user_name)
{
    BlkOpenOptions fo = {.cache = BLK_CACHE_WRITEBACK, .resize = true};
    BlkNode *f;

    if (blk_file_create(name, 0, BLK_PREALLOC_OFF) < 0) {
        return NULL;
    }
    g_ptr_array_add(m->files, g_strdup(name));
    f = user_name
            ? blk_open_protocol(user_name, &fo, BLK_ROLE_METADATA, BLK_OPEN_USER_NAME)
            : blk_open_file_opts(name, &fo, BLK_ROLE_METADATA);
    return f;
}

/* Invariant 4: the parent's CID. */
static int parent_cid(const char *filename, const char *backing, uint32_t *cid)
{
    g_autofree char *path = blk_resolve_backing_name(filename, backing);
    BlkOpenOptions o = {.read_only = true, .no_backing = true, .no_data_files = true};
    BlkNode *f = blk_open_file_opts(path, &o, BLK_ROLE_PROTOCOL);
    uint8_t head[VMDK_SECTOR] = {0};
    g_autofree char *area = NULL;
    uint64_t off = 0;
    int ret;

    if (!f) {
        return blk_error_prefix(-blk_error_code(), "Could not open '%s'", path);
    }
    ret = f->size ? blk_pread(f, 0, head, (size_t)MIN(f->size, sizeof(head))) : 0;
    if (ret == 0) {
        const BlkDriver *d = f->size ? blk_probe_buf(head, sizeof(head), path) : NULL;
        const char *name = d ? d->format_name : "raw";
        if (strcmp(name, "vmdk") != 0) {
            ret =
                blk_error(EINVAL, "Invalid backing file format: %s. Must be vmdk", name);
        }
    }
    if (ret == 0 && (load_be32(head) == VMDK4_MAGIC || load_be32(head) == VMDK3_MAGIC)) {
        off = 0x200;
    }
    if (ret == 0) {
        area = g_malloc0(VMDK_DESC_AREA);
        if (off < f->size) {
            ret = blk_pread(f, off, area,
                            (size_t)MIN((uint64_t)VMDK_DESC_AREA - 1, f->size - off));
        }
    }
    if (ret == 0 && vmdk_desc_cid(area, false, cid) < 0) {
        ret = blk_error(EINVAL, "Failed to read parent CID");
    }
    blk_close(f);
    return ret;
}

static int write_desc(BlkNode *f, const Params *p, uint32_t pcid, const char *extents,
                      uint64_t off)
{
    uint32_t heads = strcmp(p->adapter, "ide") == 0 ? 16 : 255;
    g_autofree char *parent =
        p->backing ? g_strdup_printf("parentFileNameHint=\"%s\"", p->backing)
                   : g_strdup("");
    g_autofree char *desc = g_strdup_printf(
        "# Disk DescriptorFile\n"
        "version=1\n"
        "CID=%" PRIx32 "\n"
        "parentCID=%" PRIx32 "\n"
        "createType=\"%s\"\n"
        "%s\n"
        "# Extent description\n"
        "%s\n"
        "# The Disk Data Base\n"
        "#DDB\n"
        "\n"
        "ddb.virtualHWVersion = \"%s\"\n"
        "ddb.geometry.cylinders = \"%" PRIu64 "\"\n"
        "ddb.geometry.heads = \"%" PRIu32 "\"\n"
        "ddb.geometry.sectors = \"63\"\n"
        "ddb.adapterType = \"%s\"\n"
        "ddb.toolsVersion = \"%s\"\n",
        g_random_int(), pcid, subformat_names[p->sub], parent, extents, p->hwversion,
        p->size / (63 * heads * VMDK_SECTOR), heads, p->adapter, p->toolsversion);
    size_t len = strlen(desc);
    int ret;

    if (off && len > VMDK_DESC_AREA) {
        return blk_error(EINVAL, "The descriptor is larger than its area (%zu bytes)",
                         len);
    }
    ret = blk_pwrite(f, off, desc, len, 0);
    if (ret == 0 && off == 0) {
        ret = blk_truncate(f, len, true, BLK_PREALLOC_OFF, true);
    }
    return ret;
}

static int create_files(const char *filename, const Params *p, Made *m)
{
    g_autofree char *path = NULL, *prefix = NULL, *postfix = NULL;
    const char *plain = blk_plain_name(filename);
    g_autoptr(GString) lines = g_string_new(NULL);
    uint32_t pcid = 0xffffffff;
    uint64_t done = 0;
    BlkNode *desc;
    int ret = 0;

    decompose(plain, &path, &prefix, &postfix);
    if (p->backing) {
        ret = parent_cid(plain, p->backing, &pcid);
        if (ret < 0) {
            return ret;
        }
    }
    desc = new_file(m, plain, filename);
    if (!desc) {
        return -blk_error_code();
    }
    if (!p->split && !p->flat) { /* the descriptor's file is the extent */
        ret = init_sparse(desc, p->size, p->compress, p->zeroed_grain, p->prealloc);
        g_autofree char *base = g_path_get_basename(plain);
        g_string_append_printf(lines, "RW %" PRIu64 " SPARSE \"%s\"\n",
                               p->size / VMDK_SECTOR, base);
        done = p->size;
    }
    for (unsigned idx = 1; ret == 0 && done < p->size; idx++) {
        uint64_t n = p->split ? MIN(p->size - done, VMDK_SPLIT_BYTES) : p->size - done;
        g_autofree char *rel = p->split
                                   ? g_strdup_printf("%s-%c%03u%s", prefix,
                                                     p->flat ? 'f' : 's', idx, postfix)
                                   : g_strdup_printf("%s-flat%s", prefix, postfix);
        g_autofree char *name = g_strdup_printf("%s%s", path, rel);
        BlkNode *f = new_file(m, name, NULL);
        if (!f) {
            ret = -blk_error_code();
            break;
        }
        if (p->flat) {
            ret = blk_truncate(f, n, true, p->prealloc, false);
            g_string_append_printf(lines, "RW %" PRIu64 " FLAT \"%s\" 0\n",
                                   n / VMDK_SECTOR, rel);
        } else {
            ret = init_sparse(f, n, p->compress, p->zeroed_grain, p->prealloc);
            g_string_append_printf(lines, "RW %" PRIu64 " SPARSE \"%s\"\n",
                                   n / VMDK_SECTOR, rel);
        }
        if (ret == 0) {
            ret = blk_flush(f);
        }
        blk_close(f);
        done += n;
    }
    if (ret == 0) {
        ret = write_desc(desc, p, pcid, lines->str, !p->split && !p->flat ? 0x200 : 0);
    }
    if (ret == 0) {
        ret = blk_flush(desc);
    }
    blk_close(desc);
    return ret;
}

int vmdk_create(const char *filename, const BlkCreateOptions *opts)
{
    Params p;
    Made m = {.files = g_ptr_array_new_with_free_func(g_free)};
    int ret = parse(opts, &p);

    if (ret == 0) {
        ret = create_files(filename, &p, &m);
    }
    if (ret < 0) { /* invariant 1 */
        bool had = blk_error_mark();
        for (guint i = 0; i < m.files->len; i++) {
            (void)unlink(m.files->pdata[i]);
        }
        blk_error_unwind(had);
    }
    g_ptr_array_unref(m.files);
    return ret;
}
