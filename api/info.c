/*
 * api/info.c: qimg_image_get_info() -- the record qemu-img info prints,
 * built from the node's BlkInfo (include/qimg/qimg.h).
 *
 * Owns: copying the driver's information into the public QimgInfo and its
 * nested records (bitmaps, encryption, VMDK extents, OVA disks), and
 * freeing them.
 *
 * Invariants:
 *  1. The image's name is QEMU's: a json: name where QEMU keeps an option
 *     in it (json-name.c invariant 4), the node's file name otherwise.
 *  2. Every string in a QimgInfo is the record's own (freed by
 *     qimg_info_free()), never borrowed from the node.
 *  3. A filter node without information of its own (blkdebug) answers
 *     the cluster size, dirty flag and snapshot list of the node it
 *     filters, as QEMU's bdrv_get_info and bdrv_snapshot_list do; the
 *     format-specific part stays the filter's (none), as QEMU's
 *     bdrv_get_specific_info has no such pass-through.
 */
#include "api/api.h"

#include <string.h>

static void bitmap_info_free(gpointer p)
{
    QimgBitmapInfo *b = p;
    g_free(b->name);
    g_free(b);
}

static QimgEncryptInfo *encrypt_info(const BlkEncryptInfo *b)
{
    QimgEncryptInfo *e = g_new0(QimgEncryptInfo, 1);

    e->format = g_strdup(b->luks ? "luks" : "aes");
    if (!b->luks) {
        return e;
    }
    e->cipher_alg = g_strdup(b->cipher_alg);
    e->cipher_mode = g_strdup(b->cipher_mode);
    e->ivgen_alg = g_strdup(b->ivgen_alg);
    e->ivgen_hash_alg = g_strdup(b->ivgen_hash_alg);
    e->hash_alg = g_strdup(b->hash_alg);
    e->uuid = g_strdup(b->uuid);
    e->payload_offset = b->payload_offset;
    e->master_key_iters = b->master_key_iters;
    _Static_assert(G_N_ELEMENTS(e->slots) == BLK_LUKS_SLOTS, "LUKS1 key slots");
    for (size_t i = 0; i < BLK_LUKS_SLOTS; i++) {
        e->slots[i] = (QimgLuksSlot){.active = b->slots[i].active,
                                     .iters = b->slots[i].iters,
                                     .key_offset = b->slots[i].key_offset,
                                     .stripes = b->slots[i].stripes};
    }
    return e;
}

static void vmdk_extent_info_free(gpointer p)
{
    QimgVmdkExtentInfo *e = p;
    g_free(e->filename);
    g_free(e->format);
    g_free(e);
}

static QimgVmdkInfo *vmdk_info(BlkVmdkInfo *b)
{
    QimgVmdkInfo *v = g_new0(QimgVmdkInfo, 1);

    v->cid = b->cid;
    v->parent_cid = b->parent_cid;
    v->create_type = g_steal_pointer(&b->create_type);
    v->extents = g_ptr_array_new_with_free_func(vmdk_extent_info_free);
    for (guint i = 0; b->extents && i < b->extents->len; i++) {
        BlkVmdkExtentInfo *x = &g_array_index(b->extents, BlkVmdkExtentInfo, i);
        QimgVmdkExtentInfo *e = g_new0(QimgVmdkExtentInfo, 1);
        *e = (QimgVmdkExtentInfo){.filename = g_steal_pointer(&x->filename),
                                  .format = g_steal_pointer(&x->format),
                                  .virtual_size = x->virtual_size,
                                  .cluster_size = x->cluster_size,
                                  .compressed = x->compressed,
                                  .opened = x->opened};
        g_ptr_array_add(v->extents, e);
    }
    return v;
}

static void ova_disk_info_free(gpointer p)
{
    QimgOvaDiskInfo *d = p;
    g_free(d->id);
    g_free(d->file);
    g_free(d->capacity);
    g_free(d->capacity_units);
    g_free(d->format);
    g_free(d->compression);
    g_free(d);
}

static QimgOvaInfo *ova_info(BlkOvaInfo *b)
{
    QimgOvaInfo *o = g_new0(QimgOvaInfo, 1);

    o->descriptor = g_steal_pointer(&b->descriptor);
    o->disks = g_ptr_array_new_with_free_func(ova_disk_info_free);
    for (guint i = 0; b->disks && i < b->disks->len; i++) {
        BlkOvaDiskInfo *x = &g_array_index(b->disks, BlkOvaDiskInfo, i);
        QimgOvaDiskInfo *d = g_new0(QimgOvaDiskInfo, 1);
        *d = (QimgOvaDiskInfo){.id = g_steal_pointer(&x->id),
                               .file = g_steal_pointer(&x->file),
                               .offset = x->offset,
                               .size = x->size,
                               .capacity = g_steal_pointer(&x->capacity),
                               .capacity_units = g_steal_pointer(&x->capacity_units),
                               .capacity_bytes = x->capacity_bytes,
                               .capacity_known = x->capacity_known,
                               .format = g_steal_pointer(&x->format),
                               .compression = g_steal_pointer(&x->compression)};
        g_ptr_array_add(o->disks, d);
    }
    return o;
}

QimgInfo *qimg_image_get_info(QimgImage *img, GError **error)
{
    g_autoptr(QimgInfo) info = g_new0(QimgInfo, 1);
    BlkNode *node = img->node;
    BlkInfo bi = {0};

    /* json-name.c invariant 4: QEMU keeps the option in the name, a JSON
     * null as null (json-opts.c invariant 4) */
    g_autofree char *k = NULL;
    if (node->opts.key_secret) {
        g_autofree char *e = g_strescape(node->opts.key_secret, NULL);
        k = g_strdup_printf("\"%s\"", e);
    } else if (node->opts.key_secret_null) {
        k = g_strdup("null");
    }
    if (!k && (node->opts.raw_offset_text || node->opts.raw_size_text) &&
        strcmp(node->drv->format_name, "raw") == 0) { /* raw/raw.c invariant 6 */
        g_autofree char *f = g_strescape(node->filename, NULL);
        GString *s = g_string_new("json:{");
        if (node->opts.raw_offset_text) {
            g_string_append_printf(s, "\"offset\": %s, ", node->opts.raw_offset_text);
        }
        g_string_append(s, "\"driver\": \"raw\", ");
        if (node->opts.raw_size_text) {
            g_string_append_printf(s, "\"size\": %s, ", node->opts.raw_size_text);
        }
        g_string_append_printf(
            s, "\"file\": {\"driver\": \"file\", \"filename\": \"%s\"}}", f);
        info->filename = g_string_free(s, FALSE);
    } else if (!k && node->opts.vpc_size_calc &&
               strcmp(node->drv->format_name, "vpc") == 0) {
        /* open-opts.c fact 8: QEMU names the node with the option */
        g_autofree char *f = g_strescape(node->filename, NULL);
        bool chs = node->opts.vpc_size_calc == BLK_VPC_SIZE_CHS;
        info->filename = g_strdup_printf("json:{\"force_size_calc\": \"%s\", \"driver\": "
                                         "\"vpc\", \"file\": {\"driver\": \"file\", "
                                         "\"filename\": \"%s\"}}",
                                         chs ? "chs" : "current_size", f);
    } else if (k && strcmp(node->drv->format_name, "luks") == 0) {
        g_autofree char *f = g_strescape(node->filename, NULL);
        info->filename = g_strdup_printf("json:{\"driver\": \"luks\", \"file\": "
                                         "{\"driver\": \"file\", \"filename\": \"%s\"}, "
                                         "\"key-secret\": %s}",
                                         f, k);
    } else if (k) {
        g_autofree char *f = g_strescape(node->filename, NULL);
        info->filename = g_strdup_printf("json:{\"encrypt.key-secret\": %s, \"driver\": "
                                         "\"qcow2\", \"file\": {\"driver\": \"file\", "
                                         "\"filename\": \"%s\"}}",
                                         k, f);
    } else {
        info->filename = g_strdup(blk_node_name(node));
    }
    info->format = g_strdup(node->drv->format_name);
    info->virtual_size = node->size;
    int64_t a = blk_get_allocated_size(node);
    info->actual_size = a < 0 ? -1 : a;
    info->backing_filename = g_strdup(node->backing_filename);
    info->full_backing_filename = g_strdup(node->full_backing_filename);
    info->backing_format = g_strdup(node->backing_format);
    info->backing_refused = g_strdup(node->backing_refused);
    BlkNode *proto = node->file ? node->file : node;
    /* QEMU: no dirty flag where raw or the node itself asks nbd, ssh or the
     * null node (block/null.c) for it: they have no image info */
    info->dirty_unknown =
        (node == proto || strcmp(node->drv->format_name, "raw") == 0) &&
        (strcmp(proto->drv->format_name, "nbd") == 0 ||
         strcmp(proto->drv->format_name, "ssh") == 0 ||
         proto->drv == &blk_null_co_driver || proto->drv == &blk_null_aio_driver);
    BlkNode *answers = node; /* invariant 3: the node, or the one it filters */
    while (!answers->drv->get_info && answers->filtered) {
        answers = answers->filtered;
    }
    if (answers->drv->get_info) {
        int ret = answers->drv->get_info(answers, &bi);
        if (ret < 0) {
            blk_error_propagate(error, ret, NULL);
            blk_info_clear(&bi);
            return NULL;
        }
    }
    if (answers != node && answers->drv->get_info) { /* invariant 3 */
        info->cluster_size = bi.cluster_size;
        info->dirty = bi.dirty;
        if (bi.snapshots) { /* api/snapshot.c invariant 5 */
            info->snapshots = api_snapshot_list_move(g_steal_pointer(&bi.snapshots));
        }
        blk_info_clear(&bi);
    } else if (node->drv->get_info) {
        info->cluster_size = bi.cluster_size;
        info->dirty = bi.dirty;
        info->encrypted = bi.encrypted;
        info->format_specific = bi.format_specific;
        info->compat = g_steal_pointer(&bi.compat);
        info->compression_type = g_steal_pointer(&bi.compression_type);
        info->lazy_refcounts = bi.lazy_refcounts;
        info->refcount_bits = bi.refcount_bits;
        info->corrupt = bi.corrupt;
        info->extended_l2 = bi.extended_l2;
        info->data_file = g_steal_pointer(&bi.data_file);
        info->data_file_raw = bi.data_file_raw;
        info->has_data_file = bi.has_data_file;
        for (guint i = 0; bi.bitmaps && i < bi.bitmaps->len; i++) {
            BlkBitmapInfo *b = &g_array_index(bi.bitmaps, BlkBitmapInfo, i);
            QimgBitmapInfo *q = g_new0(QimgBitmapInfo, 1);
            if (!info->bitmaps) {
                info->bitmaps = g_ptr_array_new_with_free_func(bitmap_info_free);
            }
            *q = (QimgBitmapInfo){.name = g_steal_pointer(&b->name),
                                  .granularity = b->granularity,
                                  .in_use = b->in_use,
                                  .enabled = b->enabled};
            g_ptr_array_add(info->bitmaps, q);
        }
        if (bi.encrypted) {
            info->encrypt = encrypt_info(&bi.encrypt);
        }
        if (bi.vmdk.present) {
            info->vmdk = vmdk_info(&bi.vmdk);
        }
        if (bi.ova.present) {
            info->ova = ova_info(&bi.ova);
        }
        if (bi.snapshots) {
            info->snapshots = api_snapshot_list_move(g_steal_pointer(&bi.snapshots));
        }
        blk_info_clear(&bi);
    }
    return g_steal_pointer(&info);
}

void qimg_info_free(QimgInfo *info)
{
    if (!info) {
        return;
    }
    g_free(info->filename);
    g_free(info->format);
    g_free(info->backing_filename);
    g_free(info->full_backing_filename);
    g_free(info->backing_format);
    g_free(info->backing_refused);
    if (info->snapshots) {
        g_ptr_array_unref(info->snapshots);
    }
    if (info->bitmaps) {
        g_ptr_array_unref(info->bitmaps);
    }
    g_free(info->compat);
    g_free(info->compression_type);
    g_free(info->data_file);
    if (info->encrypt) {
        g_free(info->encrypt->format);
        g_free(info->encrypt->cipher_alg);
        g_free(info->encrypt->cipher_mode);
        g_free(info->encrypt->ivgen_alg);
        g_free(info->encrypt->ivgen_hash_alg);
        g_free(info->encrypt->hash_alg);
        g_free(info->encrypt->uuid);
        g_free(info->encrypt);
    }
    if (info->vmdk) {
        g_free(info->vmdk->create_type);
        g_ptr_array_unref(info->vmdk->extents);
        g_free(info->vmdk);
    }
    if (info->ova) {
        g_free(info->ova->descriptor);
        g_ptr_array_unref(info->ova->disks);
        g_free(info->ova);
    }
    g_free(info);
}
