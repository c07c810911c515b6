/*
 * vhdx/meta.c: the VHDX metadata region -- the metadata table, the five
 * required items (file parameters, virtual disk size, page 83 id, logical
 * and physical sector size) and a differencing disk's parent locator.
 *
 * Owns: turning those items into the open image's parameters (VhdxState)
 * and its parent's name.
 *
 * Invariants (cited as "vhdx/meta.c invariant N"):
 *  1. Every item is read only inside the metadata region (offset + length
 *     checked against the region, without overflow) and only when its
 *     table entry is at least as long as the item.
 *  2. A known item appears at most once; an unknown item flagged required
 *     refuses the open (ENOTSUP), as the spec and QEMU require.
 *  3. The parameters that size the BAT are bounded before anything is
 *     computed from them (CVE-2014-0148): a power-of-two block size of
 *     1 MiB to 256 MiB, a logical sector of 512 or 4096 bytes, a disk of at
 *     most 64 TiB and a multiple of the logical sector; hence a chunk ratio
 *     (2^23 * logical sector / block size) from 16 to 32768.
 *  4. A parent locator must be of the VHDX type; its keys and values are
 *     read inside the item only.  The parent's name is relative_path, else
 *     absolute_win32_path (Windows separators become '/'); parent_linkage
 *     (the parent's data write GUID) is kept to check the parent
 *     (vhdx.c invariant 8).  The name is one read from an image: the open
 *     sequence applies the untrusted-name rules to it.
 */
#include "vhdx/vhdx.h"

#include "block/endian.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define LOCATOR_MAX (64 * VHDX_KIB)

enum {
    HAVE_PARAMS = 1 << 0,
    HAVE_SIZE = 1 << 1,
    HAVE_PAGE83 = 1 << 2,
    HAVE_LSS = 1 << 3,
    HAVE_PSS = 1 << 4,
    HAVE_LOCATOR = 1 << 5,
    HAVE_REQUIRED = HAVE_PARAMS | HAVE_SIZE | HAVE_PAGE83 | HAVE_LSS | HAVE_PSS,
};

/* Invariant 1. */
static int read_item(BlkNode *img, const VhdxMetaEntry *e, void *buf, size_t len,
                     const char *what)
{
    VhdxState *s = img->opaque;

    if (e->length < len || (uint64_t)e->offset + len > s->meta_rt.length) {
        return blk_error(
            EINVAL, "VHDX metadata item '%s' lies outside the metadata region", what);
    }
    return vhdx_file_read(img, s->meta_rt.offset + e->offset, buf, len);
}

static char *utf16le_to_utf8(const uint8_t *p, size_t n)
{
    g_autofree gunichar2 *u = g_new(gunichar2, n / 2 + 1);

    for (size_t i = 0; i < n / 2; i++) {
        u[i] = load_le16(p + 2 * i);
    }
    return g_utf16_to_utf8(u, (glong)(n / 2), NULL, NULL, NULL);
}

/* "{XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX}" as GUID bytes (data1-3 LE). */
static bool parse_guid(const char *s, VhdxGuid *g)
{
    unsigned v[11];
    char tail;

    if (sscanf(s, "{%8x-%4x-%4x-%2x%2x-%2x%2x%2x%2x%2x%2x}%c", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &tail) != 11) {
        return false;
    }
    store_le32(g->b, v[0]);
    store_le16(g->b + 4, (uint16_t)v[1]);
    store_le16(g->b + 6, (uint16_t)v[2]);
    for (int i = 0; i < 8; i++) {
        g->b[8 + i] = (uint8_t)v[3 + i];
    }
    return true;
}

/* Invariant 4. */
static int parse_locator(BlkNode *img, const VhdxMetaEntry *e)
{
    VhdxState *s = img->opaque;
    uint32_t len = MIN(e->length, LOCATOR_MAX);
    g_autofree uint8_t *buf = NULL;
    g_autofree char *rel = NULL, *abs = NULL;
    VhdxGuid type;
    uint16_t count;
    int ret;

    if (len < VHDX_PL_ENTRIES) {
        return blk_error(EINVAL, "The VHDX parent locator is too short");
    }
    buf = g_malloc(len);
    ret = read_item(img, e, buf, len, "parent locator");
    if (ret < 0) {
        return ret;
    }
    memcpy(type.b, buf + VHDX_PL_TYPE, 16);
    if (!vhdx_guid_equal(&type, &vhdx_guid_parent_vhdx)) {
        return blk_error(ENOTSUP, "The VHDX parent locator is not of the VHDX type");
    }
    count = load_le16(buf + VHDX_PL_COUNT);
    if ((uint64_t)VHDX_PL_ENTRIES + (uint64_t)count * VHDX_PLE_SIZE > len) {
        return blk_error(EINVAL, "The VHDX parent locator's entries exceed it");
    }
    for (uint16_t i = 0; i < count; i++) {
        const uint8_t *p = buf + VHDX_PL_ENTRIES + (size_t)i * VHDX_PLE_SIZE;
        uint32_t ko = load_le32(p + VHDX_PLE_KEY_OFFSET);
        uint32_t vo = load_le32(p + VHDX_PLE_VALUE_OFFSET);
        uint16_t kl = load_le16(p + VHDX_PLE_KEY_LENGTH);
        uint16_t vl = load_le16(p + VHDX_PLE_VALUE_LENGTH);
        if ((uint64_t)ko + kl > len || (uint64_t)vo + vl > len) {
            return blk_error(EINVAL,
                             "A VHDX parent locator entry lies outside the locator");
        }
        g_autofree char *key = utf16le_to_utf8(buf + ko, kl);
        g_autofree char *value = utf16le_to_utf8(buf + vo, vl);
        if (!key || !value) {
            continue; /* not UTF-16: not a key we know */
        }
        if (strcmp(key, "parent_linkage") == 0) {
            s->has_linkage = parse_guid(value, &s->parent_linkage);
        } else if (strcmp(key, "relative_path") == 0) {
            g_free(rel);
            rel = g_steal_pointer(&value);
        } else if (strcmp(key, "absolute_win32_path") == 0) {
            g_free(abs);
            abs = g_steal_pointer(&value);
        }
    }
    if (rel && *rel) {
        img->backing_filename = g_strdelimit(g_steal_pointer(&rel), "\\", '/');
    } else if (abs && *abs) {
        img->backing_filename = g_strdelimit(g_steal_pointer(&abs), "\\", '/');
    } else {
        return blk_error(EINVAL, "The VHDX parent locator names no parent");
    }
    img->backing_format = g_strdup("vhdx");
    return 0;
}

/* Invariant 3. */
static int check_params(VhdxState *s)
{
    uint64_t bs = s->block_size;

    if (bs < VHDX_BLOCK_SIZE_MIN || bs > VHDX_BLOCK_SIZE_MAX || (bs & (bs - 1))) {
        return blk_error(EINVAL,
                         "VHDX block size %" PRIu64
                         " is not a power of two from 1 MiB to 256 MiB",
                         bs);
    }
    if (s->logical_sector != 512 && s->logical_sector != 4096) {
        return blk_error(EINVAL,
                         "VHDX logical sector size %" PRIu32 " is not 512 or 4096",
                         s->logical_sector);
    }
    if (s->disk_size > VHDX_MAX_DISK_SIZE || s->disk_size % s->logical_sector) {
        return blk_error(EINVAL,
                         "VHDX virtual disk size %" PRIu64
                         " is not a multiple of the logical sector size up to 64 TiB",
                         s->disk_size);
    }
    s->chunk_ratio = VHDX_MAX_SECTORS_PER_BLOCK * s->logical_sector / bs;
    s->payload_blocks = DIV_ROUND_UP(s->disk_size, bs);
    if (s->has_parent) {
        s->bat_entries =
            DIV_ROUND_UP(s->payload_blocks, s->chunk_ratio) * (s->chunk_ratio + 1);
    } else {
        s->bat_entries =
            s->payload_blocks == 0
                ? 0
                : s->payload_blocks + (s->payload_blocks - 1) / s->chunk_ratio;
    }
    return 0;
}

int vhdx_parse_metadata(BlkNode *img)
{
    VhdxState *s = img->opaque;
    g_autofree uint8_t *table = g_malloc(VHDX_METADATA_TABLE_SIZE);
    g_autofree VhdxMetaEntry *e = g_new(VhdxMetaEntry, VHDX_MAX_METADATA);
    const VhdxMetaEntry *locator = NULL;
    unsigned have = 0;
    uint8_t b[16];
    uint32_t n;
    int ret;

    if (s->meta_rt.length < VHDX_METADATA_TABLE_SIZE) {
        return blk_error(EINVAL, "The VHDX metadata region is smaller than its table");
    }
    ret = vhdx_file_read(img, s->meta_rt.offset, table, VHDX_METADATA_TABLE_SIZE);
    if (ret < 0) {
        return ret;
    }
    if (!vhdx_meta_table_decode(table, e, &n)) {
        return blk_error(EINVAL, "The VHDX metadata table is invalid");
    }
    for (uint32_t i = 0; i < n; i++) {
        static const struct {
            const VhdxGuid *id;
            unsigned bit;
            const char *what;
        } known[] = {
            {&vhdx_guid_file_params, HAVE_PARAMS, "file parameters"},
            {&vhdx_guid_disk_size, HAVE_SIZE, "virtual disk size"},
            {&vhdx_guid_page83, HAVE_PAGE83, "page 83 data"},
            {&vhdx_guid_logical_sector, HAVE_LSS, "logical sector size"},
            {&vhdx_guid_physical_sector, HAVE_PSS, "physical sector size"},
            {&vhdx_guid_parent_locator, HAVE_LOCATOR, "parent locator"},
        };
        size_t k = 0;
        for (; k < G_N_ELEMENTS(known); k++) {
            if (vhdx_guid_equal(&e[i].id, known[k].id)) {
                break;
            }
        }
        if (k == G_N_ELEMENTS(known)) {
            if (e[i].flags & VHDX_META_IS_REQUIRED) { /* invariant 2 */
                return blk_error(ENOTSUP, "The VHDX image requires a metadata item qimg "
                                          "does not know");
            }
            continue;
        }
        if (have & known[k].bit) {
            return blk_error(EINVAL, "The VHDX metadata item '%s' appears twice",
                             known[k].what);
        }
        have |= known[k].bit;
        switch (known[k].bit) {
        case HAVE_PARAMS:
            ret = read_item(img, &e[i], b, 8, known[k].what);
            s->block_size = load_le32(b);
            s->params = load_le32(b + 4);
            break;
        case HAVE_SIZE:
            ret = read_item(img, &e[i], b, 8, known[k].what);
            s->disk_size = load_le64(b);
            break;
        case HAVE_PAGE83:
            ret = read_item(img, &e[i], s->page83.b, 16, known[k].what);
            break;
        case HAVE_LSS:
            ret = read_item(img, &e[i], b, 4, known[k].what);
            s->logical_sector = load_le32(b);
            break;
        case HAVE_PSS:
            ret = read_item(img, &e[i], b, 4, known[k].what);
            s->physical_sector = load_le32(b);
            break;
        default:
            locator = &e[i];
            break;
        }
        if (ret < 0) {
            return ret;
        }
    }
    if ((have & HAVE_REQUIRED) != HAVE_REQUIRED) {
        return blk_error(ENOTSUP, "The VHDX image lacks a required metadata item");
    }
    s->has_parent = s->params & VHDX_PARAM_HAS_PARENT;
    if (s->has_parent) {
        if (!locator) {
            return blk_error(EINVAL, "The VHDX differencing disk has no parent locator");
        }
        ret = parse_locator(img, locator);
        if (ret < 0) {
            return ret;
        }
    }
    return check_params(s);
}
