/*
 * api/convert.c: the public types (include/qimg/) into the internal ones
 * (block/types.h) and back, field by field (block/types.h invariant 1).
 *
 * Owns: nothing but the mapping; a public struct can grow without any
 * layer below api/ noticing.
 */
#include "api/api.h"
#include "qimg/check.h"

#include <string.h>

_Static_assert((int)QIMG_CACHE_WRITEBACK == (int)BLK_CACHE_WRITEBACK, "cache modes");
_Static_assert((int)QIMG_CACHE_WRITETHROUGH == (int)BLK_CACHE_WRITETHROUGH,
               "cache modes");
_Static_assert((int)QIMG_CACHE_NONE == (int)BLK_CACHE_NONE, "cache modes");
_Static_assert((int)QIMG_CACHE_DIRECTSYNC == (int)BLK_CACHE_DIRECTSYNC, "cache modes");
_Static_assert((int)QIMG_CACHE_UNSAFE == (int)BLK_CACHE_UNSAFE, "cache modes");
_Static_assert((int)QIMG_PREALLOC_OFF == (int)BLK_PREALLOC_OFF, "prealloc modes");
_Static_assert((int)QIMG_PREALLOC_METADATA == (int)BLK_PREALLOC_METADATA,
               "prealloc modes");
_Static_assert((int)QIMG_PREALLOC_FALLOC == (int)BLK_PREALLOC_FALLOC, "prealloc modes");
_Static_assert((int)QIMG_PREALLOC_FULL == (int)BLK_PREALLOC_FULL, "prealloc modes");
_Static_assert((int)QIMG_ZERO_MAY_UNMAP == (int)BLK_REQ_MAY_UNMAP, "zero flags");
_Static_assert((int)QIMG_ZERO_NO_FALLBACK == (int)BLK_REQ_NO_FALLBACK, "zero flags");
_Static_assert((int)QIMG_STATUS_DATA == (int)BLK_STATUS_DATA, "status flags");
_Static_assert((int)QIMG_STATUS_ZERO == (int)BLK_STATUS_ZERO, "status flags");
_Static_assert((int)QIMG_STATUS_OFFSET_VALID == (int)BLK_STATUS_OFFSET_VALID,
               "status flags");
_Static_assert((int)QIMG_STATUS_ALLOCATED == (int)BLK_STATUS_ALLOCATED, "status flags");
_Static_assert((int)QIMG_STATUS_COMPRESSED == (int)BLK_STATUS_COMPRESSED, "status flags");
_Static_assert((int)QIMG_CHECK_FIX_LEAKS == (int)BLK_CHECK_FIX_LEAKS, "check flags");
_Static_assert((int)QIMG_CHECK_FIX_ERRORS == (int)BLK_CHECK_FIX_ERRORS, "check flags");

BlkCacheMode api_cache_mode(QimgCacheMode mode)
{
    return (BlkCacheMode)mode;
}

BlkPrealloc api_prealloc(QimgPrealloc mode)
{
    return (BlkPrealloc)mode;
}

void api_open_options(const QimgOpenOptions *in, BlkOpenOptions *out)
{
    memset(out, 0, sizeof(*out));
    if (!in) {
        return;
    }
    out->format = in->format;
    out->read_only = in->read_only;
    out->cache = api_cache_mode(in->cache);
    out->no_backing = in->no_backing;
    out->metadata_cache_size = in->metadata_cache_size;
    out->force_share = in->force_share;
    out->check_mode = in->check_mode;
    out->snapshot = in->snapshot;
    out->no_io = in->no_io;
    out->no_data_files = in->no_data_files;
    out->trust_names = in->trust_names;
    out->copy_on_read = in->copy_on_read;
    out->resize = in->resize;
    out->deny_write = in->deny_write;
    out->backing_share_write = in->backing_shared_write;
    out->secrets = in->secret_values ? in->secret_values : in->secrets;
    out->secret_values = in->secret_values != NULL;
    out->luks_max_iterations = in->luks_max_iterations;
    out->key_secret = in->key_secret ? g_intern_string(in->key_secret) : NULL;
    out->backing_name = in->backing_name;
}

void api_create_options(const QimgCreateOptions *in, BlkCreateOptions *out)
{
    out->format = in->format;
    out->size = in->size;
    out->size_set = in->size_set;
    out->backing_file = in->backing_file;
    out->backing_format = in->backing_format;
    out->options = in->options;
    out->secrets = in->secret_values ? in->secret_values : in->secrets;
    out->secret_values = in->secret_values != NULL;
    out->luks_max_iterations = in->luks_max_iterations;
}

void api_snapshot_info_move(BlkSnapshotInfo *in, QimgSnapshotInfo *out)
{
    out->id = g_steal_pointer(&in->id);
    out->name = g_steal_pointer(&in->name);
    out->vm_state_size = in->vm_state_size;
    out->date_sec = in->date_sec;
    out->date_nsec = in->date_nsec;
    out->vm_clock_nsec = in->vm_clock_nsec;
    out->icount = in->icount;
    out->disk_size = in->disk_size;
    out->l1_size = in->l1_size;
    out->l1_offset = in->l1_offset;
}

static void snapshot_info_free(gpointer p)
{
    QimgSnapshotInfo *sn = p;

    g_free(sn->id);
    g_free(sn->name);
    g_free(sn);
}

GPtrArray *api_snapshot_list_new(void)
{
    return g_ptr_array_new_with_free_func(snapshot_info_free);
}

GPtrArray *api_snapshot_list_move(GArray *blk_list)
{
    GPtrArray *out = api_snapshot_list_new();

    for (guint i = 0; blk_list && i < blk_list->len; i++) {
        QimgSnapshotInfo *sn = g_new0(QimgSnapshotInfo, 1);
        api_snapshot_info_move(&g_array_index(blk_list, BlkSnapshotInfo, i), sn);
        g_ptr_array_add(out, sn);
    }
    blk_snapshot_list_free(blk_list);
    return out;
}
