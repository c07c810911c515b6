/*
 * block/types.c: helpers of the shared value types (block/types.h).
 */
#include "block/block.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void blk_snapshot_info_clear(BlkSnapshotInfo *sn)
{
    g_free(sn->id);
    g_free(sn->name);
    memset(sn, 0, sizeof(*sn));
}

void blk_snapshot_list_free(GArray *list)
{
    if (!list) {
        return;
    }
    for (guint i = 0; i < list->len; i++) {
        blk_snapshot_info_clear(&g_array_index(list, BlkSnapshotInfo, i));
    }
    g_array_unref(list);
}

void blk_bitmap_info_clear(void *bitmap_info)
{
    BlkBitmapInfo *b = bitmap_info;
    g_free(b->name);
    b->name = NULL;
}

void blk_info_clear(BlkInfo *info)
{
    if (info->bitmaps) {
        g_array_unref(info->bitmaps);
    }
    blk_snapshot_list_free(info->snapshots);
    g_free(info->compat);
    g_free(info->compression_type);
    g_free(info->data_file);
    g_free(info->vmdk.create_type);
    if (info->vmdk.extents) {
        g_array_unref(info->vmdk.extents);
    }
    g_free(info->ova.descriptor);
    if (info->ova.disks) {
        g_array_unref(info->ova.disks);
    }
    memset(info, 0, sizeof(*info));
}

void blk_vmdk_extent_info_clear(void *extent_info)
{
    BlkVmdkExtentInfo *e = extent_info;
    g_free(e->filename);
    g_free(e->format);
}

void blk_check_result_clear(BlkCheckResult *res)
{
    if (!res) {
        return;
    }
    if (res->messages) {
        g_ptr_array_unref(res->messages);
    }
    memset(res, 0, sizeof(*res));
}

static const char *const prealloc_names[] = {"off", "metadata", "falloc", "full"};

const char *blk_prealloc_name(BlkPrealloc p)
{
    return (size_t)p < G_N_ELEMENTS(prealloc_names) ? prealloc_names[p] : "?";
}

int blk_prealloc_parse(const char *s, BlkPrealloc *out)
{
    for (size_t i = 0; i < G_N_ELEMENTS(prealloc_names); i++) {
        if (strcmp(s, prealloc_names[i]) == 0) {
            *out = (BlkPrealloc)i;
            return 0;
        }
    }
    /* qapi_enum_parse's words, which file-posix and vmdk create print */
    return blk_error(EINVAL, "invalid parameter value: %s", s);
}

int blk_snapshot_lookup(unsigned n, const char *(*id_of)(const void *opaque, unsigned i),
                        const char *(*name_of)(const void *opaque, unsigned i),
                        const void *opaque, const char *id_or_name)
{
    for (unsigned i = 0; i < n; i++) {
        const char *id = id_of(opaque, i);
        if (id && strcmp(id, id_or_name) == 0) {
            return (int)i;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        const char *name = name_of(opaque, i);
        if (name && strcmp(name, id_or_name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

static const char *info_id(const void *opaque, unsigned i)
{
    return g_array_index((const GArray *)opaque, BlkSnapshotInfo, i).id;
}

static const char *info_name(const void *opaque, unsigned i)
{
    return g_array_index((const GArray *)opaque, BlkSnapshotInfo, i).name;
}

int blk_snapshot_find(const GArray *list, const char *id_or_name)
{
    return blk_snapshot_lookup(list->len, info_id, info_name, list, id_or_name);
}

/* QEMU's block driver names (BlockdevDriver), accepted as backing_fmt. */
static const char *const qemu_drivers[] = {
    "blkdebug",
    "blklogwrites",
    "blkreplay",
    "blkverify",
    "bochs",
    "cloop",
    "compress",
    "copy-before-write",
    "copy-on-read",
    "dmg",
    "file",
    "snapshot-access",
    "ftp",
    "ftps",
    "gluster",
    "host_cdrom",
    "host_device",
    "http",
    "https",
    "io_uring",
    "iscsi",
    "luks",
    "nbd",
    "nfs",
    "null-aio",
    "null-co",
    "nvme",
    "nvme-io_uring",
    "parallels",
    "preallocate",
    "qcow",
    "qcow2",
    "qed",
    "quorum",
    "raw",
    "rbd",
    "replication",
    "ssh",
    "throttle",
    "vdi",
    "vhdx",
    "virtio-blk-vfio-pci",
    "virtio-blk-vhost-user",
    "virtio-blk-vhost-vdpa",
    "vmdk",
    "vpc",
    "vvfat",
};

bool blk_qemu_driver_name(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(qemu_drivers); i++) {
        if (strcmp(name, qemu_drivers[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* QEMU's qemu_strtosz (the facts are tools/options.c fact 1). */

static int suffix_shift(char c)
{
    switch (c) {
    case 'b':
    case 'B':
        return 0;
    case 'k':
    case 'K':
        return 10;
    case 'm':
    case 'M':
        return 20;
    case 'g':
    case 'G':
        return 30;
    case 't':
    case 'T':
        return 40;
    case 'p':
    case 'P':
        return 50;
    case 'e':
    case 'E':
        return 60;
    default:
        return -1;
    }
}

int blk_strtosz(const char *s, uint64_t *out, bool *hex_suffix)
{
    __extension__ typedef unsigned __int128 u128;
    const char *end;
    char *endp;
    unsigned long long whole;
    uint64_t frac = 0; /* fraction as 0.64 fixed point */
    bool hex = false;
    int shift;

    *hex_suffix = false;
    errno = 0;
    whole = strtoull(s, &endp, 10);
    end = endp;
    if (end == s) {
        return -EINVAL;
    }
    if (memchr(s, '-', end - s)) {
        return -EINVAL;
    }
    if (errno == ERANGE) {
        return -ERANGE;
    }
    if (whole == 0 && (*end == 'x' || *end == 'X')) {
        errno = 0;
        whole = strtoull(s, &endp, 16);
        end = endp;
        if (errno == ERANGE) {
            return -ERANGE;
        }
        if (*end == '.') {
            return -EINVAL;
        }
        hex = true;
    } else if (*end == '.') {
        double f;

        errno = 0;
        f = strtod(end, &endp);
        if (endp == end || errno) {
            end++; /* "1.k": no fraction digits */
        } else if (memchr(end, 'e', endp - end) || memchr(end, 'E', endp - end)) {
            return -EINVAL;
        } else {
            double fixed = f * 18446744073709551616.0;
            frac = fixed < 18446744073709551616.0 ? (uint64_t)fixed : 0;
            end = endp;
        }
    }

    shift = suffix_shift(*end);
    if (shift >= 0) {
        *hex_suffix = hex && shift > 0;
        end++;
    } else {
        shift = 0;
    }
    if (*end != '\0') {
        return -EINVAL;
    }
    if (shift == 0) {
        if (frac != 0) {
            return -EINVAL;
        }
        *out = whole;
        return 0;
    }

    u128 scaled = (u128)whole << shift;
    u128 fpart = (u128)frac << shift; /* 64.64 fixed point */
    scaled += fpart >> 64;
    scaled += (fpart >> 63) & 1; /* round half up */
    if (scaled > UINT64_MAX) {
        return -ERANGE;
    }
    *out = (uint64_t)scaled;
    return 0;
}
