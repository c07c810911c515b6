/*
 * qimg info [-f fmt] [--output=human|json] [--backing-chain] [-U] FILE
 *
 * Facts learnt from qemu-img 7.2:
 *  1. The image is opened read-only without its backing chain, so an
 *     image whose backing file is missing can still be inspected.  With
 *     --backing-chain each layer is opened the same way, following the
 *     previous layer's full backing file name and backing format; all
 *     layers are opened before anything is printed.  A layer's name was
 *     read from an image: the layer is opened from the one above it by
 *     qimg_image_open_backing(), the same resolution as opening the chain
 *     (a plain file, block.h invariant 5; a parent inside an OVA is a
 *     member of the same archive, open.c invariant 6).
 *  2. JSON members come in qemu-img's (hash) order, not in a logical one:
 *     snapshots, backing-filename-format, virtual-size, filename,
 *     cluster-size, format, actual-size, format-specific,
 *     full-backing-filename, encrypted, backing-filename, dirty-flag.
 *     Absent values are left out; "encrypted" appears only when true.
 *     Snapshot members: icount (left out when -1), vm-clock-nsec, name,
 *     date-sec, date-nsec, vm-clock-sec, id, vm-state-size.
 *  3. qcow2 format-specific data: compat, compression-type, then for
 *     compat 1.1 only lazy-refcounts; refcount-bits; data-file and
 *     data-file-raw when there is a data file; corrupt and extended-l2 for
 *     compat 1.1 only.
 *  4. --backing-chain prints a JSON array, or the human blocks separated
 *     by an empty line.
 *  5. Each layer is opened for its metadata only (no_io): a qcow2 file
 *     does not share writing or resizing but takes no permission (bytes
 *     201 and 203), a raw file takes no lock, -U takes none.  That open
 *     needs no secret, so encrypted images are shown too.
 *  6. An encrypted image shows "encrypted: yes" and, in the format-specific
 *     data between data-file and data-file-raw, "encrypt": for LUKS
 *     ivgen-alg, hash-alg, cipher-alg, uuid, ivgen-hash-alg (ESSIV only),
 *     format, cipher-mode, slots (active, iters, key-offset, stripes; iters
 *     and stripes of active slots only), payload-offset, master-key-iters;
 *     for the old method format "aes" alone.
 *  7. The luks format's format-specific data (type "luks") is fact 6's
 *     fields without "format", at the top of "data" (human: at the first
 *     indentation level).
 *  8. VMDK format-specific data: cid, parent-cid (decimal), create-type,
 *     extents, each: compressed (only when true), virtual-size, filename,
 *     cluster-size (sparse extents), format ("" in a monolithic file).
 *  9. Files the image names for its data (VMDK extents, a qcow2 data
 *     file) are not opened unless --backing-chain asks for the chain
 *     (QimgOpenOptions.no_data_files): an image naming a host file can be
 *     inspected without that file being read; their names are shown.
 * 10. (qimg's own) An OVA archive, which qemu-img reads as raw, is shown
 *     as format "ova": format-specific data "descriptor" (the OVF's
 *     member) and "disks", each: index, id, open-as (the name that opens
 *     it), file, offset and size (of its tar member; not for an empty
 *     disk), capacity (bytes, when understood), ovf-capacity,
 *     ovf-capacity-units, ovf-format (as the OVF writes them, when
 *     present), compression ("none" when the OVF names none).
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_OUTPUT = 256, OPT_BACKING_CHAIN };

static bool is_v3(const QimgInfo *info)
{
    return info->compat && strcmp(info->compat, "0.10") != 0;
}

static void json_snapshot(ToolJson *j, const QimgSnapshotInfo *sn)
{
    tool_json_begin_object(j, NULL);
    if (sn->icount != -1) {
        tool_json_int(j, "icount", sn->icount);
    }
    tool_json_uint(j, "vm-clock-nsec", sn->vm_clock_nsec % 1000000000ULL);
    tool_json_str(j, "name", sn->name);
    tool_json_uint(j, "date-sec", sn->date_sec);
    tool_json_uint(j, "date-nsec", sn->date_nsec);
    tool_json_uint(j, "vm-clock-sec", sn->vm_clock_nsec / 1000000000ULL);
    tool_json_str(j, "id", sn->id);
    tool_json_uint(j, "vm-state-size", sn->vm_state_size);
    tool_json_end_object(j);
}

/* Fact 6: qemu-img's (hash) order for "encrypt"; iters and stripes of
 * active slots only.  The LUKS fields go into the open object (the luks
 * format's "data"); with_format adds "format" (qcow2's "encrypt"). */
static void json_luks_fields(ToolJson *j, const QimgEncryptInfo *e, bool with_format)
{
    if (e->cipher_alg) {
        tool_json_str(j, "ivgen-alg", e->ivgen_alg);
        tool_json_str(j, "hash-alg", e->hash_alg);
        tool_json_str(j, "cipher-alg", e->cipher_alg);
        tool_json_str(j, "uuid", e->uuid);
        if (e->ivgen_hash_alg) {
            tool_json_str(j, "ivgen-hash-alg", e->ivgen_hash_alg);
        }
    }
    if (with_format) {
        tool_json_str(j, "format", e->format);
    }
    if (e->cipher_alg) {
        tool_json_str(j, "cipher-mode", e->cipher_mode);
        tool_json_begin_array(j, "slots");
        for (size_t i = 0; i < G_N_ELEMENTS(e->slots); i++) {
            const QimgLuksSlot *k = &e->slots[i];
            tool_json_begin_object(j, NULL);
            tool_json_bool(j, "active", k->active);
            if (k->active) {
                tool_json_uint(j, "iters", k->iters);
            }
            tool_json_uint(j, "key-offset", k->key_offset);
            if (k->active) {
                tool_json_uint(j, "stripes", k->stripes);
            }
            tool_json_end_object(j);
        }
        tool_json_end_array(j);
        tool_json_uint(j, "payload-offset", e->payload_offset);
        tool_json_uint(j, "master-key-iters", e->master_key_iters);
    }
}

static void json_encrypt(ToolJson *j, const QimgEncryptInfo *e)
{
    tool_json_begin_object(j, "encrypt");
    json_luks_fields(j, e, true);
    tool_json_end_object(j);
}

/* Fact 7: the luks format's format-specific data is its LUKS header. */
static bool is_luks_format(const QimgInfo *info)
{
    return !info->format_specific && info->encrypt && strcmp(info->format, "luks") == 0;
}

/* Fact 8: VMDK's data in qemu-img's order. */
static void json_vmdk(ToolJson *j, const QimgVmdkInfo *v)
{
    tool_json_begin_object(j, "data");
    tool_json_uint(j, "cid", v->cid);
    tool_json_uint(j, "parent-cid", v->parent_cid);
    tool_json_str(j, "create-type", v->create_type);
    tool_json_begin_array(j, "extents");
    for (guint i = 0; i < v->extents->len; i++) {
        const QimgVmdkExtentInfo *e = g_ptr_array_index(v->extents, i);
        tool_json_begin_object(j, NULL);
        if (e->compressed) {
            tool_json_bool(j, "compressed", true);
        }
        tool_json_uint(j, "virtual-size", e->virtual_size);
        tool_json_str(j, "filename", e->filename);
        if (e->cluster_size) {
            tool_json_uint(j, "cluster-size", e->cluster_size);
        }
        tool_json_str(j, "format", e->format);
        tool_json_end_object(j);
    }
    tool_json_end_array(j);
    tool_json_end_object(j);
}

/* Fact 10: an OVA archive's disks (qimg's own: qemu-img reads it as raw). */
static void json_ova(ToolJson *j, const QimgInfo *info)
{
    const QimgOvaInfo *o = info->ova;

    tool_json_begin_object(j, "format-specific");
    tool_json_str(j, "type", "ova");
    tool_json_begin_object(j, "data");
    tool_json_str(j, "descriptor", o->descriptor);
    tool_json_begin_array(j, "disks");
    for (guint i = 0; i < o->disks->len; i++) {
        const QimgOvaDiskInfo *d = g_ptr_array_index(o->disks, i);
        g_autofree char *name = g_strdup_printf("ova:%u:%s", i, info->filename);
        tool_json_begin_object(j, NULL);
        tool_json_uint(j, "index", i);
        tool_json_str(j, "id", d->id);
        tool_json_str(j, "open-as", name);
        if (d->file) {
            tool_json_str(j, "file", d->file);
            tool_json_uint(j, "offset", d->offset);
            tool_json_uint(j, "size", d->size);
        }
        if (d->capacity_known) {
            tool_json_uint(j, "capacity", d->capacity_bytes);
        }
        if (d->capacity) {
            tool_json_str(j, "ovf-capacity", d->capacity);
        }
        if (d->capacity_units) {
            tool_json_str(j, "ovf-capacity-units", d->capacity_units);
        }
        if (d->format) {
            tool_json_str(j, "ovf-format", d->format);
        }
        tool_json_str(j, "compression", d->compression ? d->compression : "none");
        tool_json_end_object(j);
    }
    tool_json_end_array(j);
    tool_json_end_object(j);
    tool_json_end_object(j);
}

static void human_ova(const QimgInfo *info)
{
    const QimgOvaInfo *o = info->ova;

    printf("    descriptor: %s\n    disks:\n", o->descriptor);
    for (guint i = 0; i < o->disks->len; i++) {
        const QimgOvaDiskInfo *d = g_ptr_array_index(o->disks, i);
        printf("        [%u]:\n            id: %s\n", i, d->id);
        printf("            open as: ova:%u:%s\n", i, info->filename);
        if (d->file) {
            printf("            file: %s\n", d->file);
            printf("            offset: %" PRIu64 "\n            size: %" PRIu64 "\n",
                   d->offset, d->size);
        } else {
            printf("            file: none (an empty disk)\n");
        }
        if (d->capacity_known) {
            printf("            capacity: %" PRIu64 "\n", d->capacity_bytes);
        } else {
            printf("            capacity: %s%s%s (not understood)\n",
                   d->capacity ? d->capacity : "none", d->capacity_units ? " " : "",
                   d->capacity_units ? d->capacity_units : "");
        }
        if (d->format) {
            printf("            format: %s\n", d->format);
        }
        printf("            compression: %s\n", d->compression ? d->compression : "none");
    }
}

static void json_format_specific(ToolJson *j, const QimgInfo *info)
{
    bool v3 = is_v3(info);

    if (info->ova) {
        json_ova(j, info);
        return;
    }

    if (info->vmdk) {
        tool_json_begin_object(j, "format-specific");
        tool_json_str(j, "type", info->format);
        json_vmdk(j, info->vmdk);
        tool_json_end_object(j);
        return;
    }
    tool_json_begin_object(j, "format-specific");
    tool_json_str(j, "type", info->format);
    tool_json_begin_object(j, "data");
    if (strcmp(info->format, "rbd") == 0) { /* an RBD image opened as itself */
        tool_json_end_object(j);
        tool_json_end_object(j);
        return;
    }
    tool_json_str(j, "compat", info->compat);
    if (info->compression_type) {
        tool_json_str(j, "compression-type", info->compression_type);
    }
    if (v3) {
        tool_json_bool(j, "lazy-refcounts", info->lazy_refcounts);
    }
    if (info->bitmaps) {
        tool_json_begin_array(j, "bitmaps");
        for (guint i = 0; i < info->bitmaps->len; i++) {
            const QimgBitmapInfo *b = g_ptr_array_index(info->bitmaps, i);
            tool_json_begin_object(j, NULL);
            tool_json_begin_array(j, "flags");
            if (b->in_use) {
                tool_json_str(j, NULL, "in-use");
            }
            if (b->enabled) {
                tool_json_str(j, NULL, "auto");
            }
            tool_json_end_array(j);
            tool_json_str(j, "name", b->name);
            tool_json_uint(j, "granularity", b->granularity);
            tool_json_end_object(j);
        }
        tool_json_end_array(j);
    }
    tool_json_uint(j, "refcount-bits", info->refcount_bits);
    if (info->data_file) {
        tool_json_str(j, "data-file", info->data_file);
    }
    if (info->encrypt) {
        json_encrypt(j, info->encrypt);
    }
    if (info->has_data_file) {
        tool_json_bool(j, "data-file-raw", info->data_file_raw);
    }
    if (v3) {
        tool_json_bool(j, "corrupt", info->corrupt);
        tool_json_bool(j, "extended-l2", info->extended_l2);
    }
    tool_json_end_object(j);
    tool_json_end_object(j);
}

static void json_info(ToolJson *j, const QimgInfo *info)
{
    tool_json_begin_object(j, NULL);
    if (info->backing_format) {
        tool_json_str(j, "backing-filename-format", info->backing_format);
    }
    if (info->snapshots && info->snapshots->len > 0) {
        tool_json_begin_array(j, "snapshots");
        for (guint i = 0; i < info->snapshots->len; i++) {
            json_snapshot(j, g_ptr_array_index(info->snapshots, i));
        }
        tool_json_end_array(j);
    }
    tool_json_uint(j, "virtual-size", info->virtual_size);
    tool_json_str(j, "filename", info->filename);
    if (info->cluster_size) {
        tool_json_uint(j, "cluster-size", info->cluster_size);
    }
    tool_json_str(j, "format", info->format);
    if (info->actual_size >= 0) {
        tool_json_int(j, "actual-size", info->actual_size);
    }
    if (info->format_specific) {
        json_format_specific(j, info);
    } else if (is_luks_format(info)) { /* fact 7 */
        tool_json_begin_object(j, "format-specific");
        tool_json_str(j, "type", "luks");
        tool_json_begin_object(j, "data");
        json_luks_fields(j, info->encrypt, false);
        tool_json_end_object(j);
        tool_json_end_object(j);
    }
    if (info->full_backing_filename) {
        tool_json_str(j, "full-backing-filename", info->full_backing_filename);
    }
    if (info->encrypted) {
        tool_json_bool(j, "encrypted", true);
    }
    if (info->backing_filename) {
        tool_json_str(j, "backing-filename", info->backing_filename);
    }
    if (!info->dirty_unknown) {
        tool_json_bool(j, "dirty-flag", info->dirty);
    }
    tool_json_end_object(j);
}

static const char *bool_str(bool b)
{
    return b ? "true" : "false";
}

/* Fact 6, in human form: the LUKS fields indented by ind (with "format"
 * for qcow2's "encrypt:"). */
static void human_luks_fields(const QimgEncryptInfo *e, const char *ind, bool with_format)
{
    if (e->cipher_alg) {
        printf("%sivgen alg: %s\n", ind, e->ivgen_alg);
        printf("%shash alg: %s\n", ind, e->hash_alg);
        printf("%scipher alg: %s\n", ind, e->cipher_alg);
        printf("%suuid: %s\n", ind, e->uuid);
        if (e->ivgen_hash_alg) {
            printf("%sivgen hash alg: %s\n", ind, e->ivgen_hash_alg);
        }
    }
    if (with_format) {
        printf("%sformat: %s\n", ind, e->format);
    }
    if (!e->cipher_alg) {
        return;
    }
    printf("%scipher mode: %s\n", ind, e->cipher_mode);
    printf("%sslots:\n", ind);
    for (size_t i = 0; i < G_N_ELEMENTS(e->slots); i++) {
        const QimgLuksSlot *k = &e->slots[i];
        printf("%s    [%zu]:\n", ind, i);
        printf("%s        active: %s\n", ind, bool_str(k->active));
        if (k->active) {
            printf("%s        iters: %" PRIu32 "\n", ind, k->iters);
        }
        printf("%s        key offset: %" PRIu64 "\n", ind, k->key_offset);
        if (k->active) {
            printf("%s        stripes: %" PRIu32 "\n", ind, k->stripes);
        }
    }
    printf("%spayload offset: %" PRIu64 "\n", ind, e->payload_offset);
    printf("%smaster key iters: %" PRIu32 "\n", ind, e->master_key_iters);
}

static void human_encrypt(const QimgEncryptInfo *e)
{
    printf("    encrypt:\n");
    human_luks_fields(e, "        ", true);
}

/* "Format specific information:" and what follows, as qemu-img info and
 * qemu-io's info print it (nothing for a format without it). */
void tool_print_format_specific(const QimgInfo *info)
{
    bool v3;

    if (is_luks_format(info)) { /* fact 7 */
        printf("Format specific information:\n");
        human_luks_fields(info->encrypt, "    ", false);
        return;
    }
    if (!info->format_specific) {
        return;
    }
    v3 = is_v3(info);
    printf("Format specific information:\n");
    if (strcmp(info->format, "rbd") == 0) {
        return; /* nothing more for an RBD image opened as itself */
    }
    if (info->ova) { /* fact 10 */
        human_ova(info);
        return;
    }
    if (info->vmdk) { /* fact 8 */
        const QimgVmdkInfo *v = info->vmdk;
        printf("    cid: %" PRIu32 "\n    parent cid: %" PRIu32 "\n", v->cid,
               v->parent_cid);
        printf("    create type: %s\n    extents:\n", v->create_type);
        for (guint i = 0; i < v->extents->len; i++) {
            const QimgVmdkExtentInfo *e = g_ptr_array_index(v->extents, i);
            printf("        [%u]:\n", i);
            if (e->compressed) {
                printf("            compressed: true\n");
            }
            printf("            virtual size: %" PRIu64 "\n", e->virtual_size);
            printf("            filename: %s\n", e->filename);
            if (e->cluster_size) {
                printf("            cluster size: %" PRIu32 "\n", e->cluster_size);
            }
            printf("            format: %s\n", e->format);
        }
        return;
    }
    printf("    compat: %s\n", info->compat ? info->compat : "");
    if (info->compression_type) {
        printf("    compression type: %s\n", info->compression_type);
    }
    if (v3) {
        printf("    lazy refcounts: %s\n", bool_str(info->lazy_refcounts));
    }
    if (info->bitmaps) {
        printf("    bitmaps:\n");
        for (guint i = 0; i < info->bitmaps->len; i++) {
            const QimgBitmapInfo *b = g_ptr_array_index(info->bitmaps, i);
            int f = 0;
            printf("        [%u]:\n            flags:\n", i);
            if (b->in_use) {
                printf("                [%d]: in-use\n", f++);
            }
            if (b->enabled) {
                printf("                [%d]: auto\n", f++);
            }
            printf("            name: %s\n            granularity: %" PRIu32 "\n",
                   b->name, b->granularity);
        }
    }
    printf("    refcount bits: %" PRIu32 "\n", info->refcount_bits);
    if (info->data_file) {
        printf("    data file: %s\n", info->data_file);
    }
    if (info->encrypt) {
        human_encrypt(info->encrypt);
    }
    if (info->has_data_file) {
        printf("    data file raw: %s\n", bool_str(info->data_file_raw));
    }
    if (v3) {
        printf("    corrupt: %s\n", bool_str(info->corrupt));
        printf("    extended l2: %s\n", bool_str(info->extended_l2));
    }
}

static void human_info(const QimgInfo *info)
{
    g_autofree char *vsize = tool_size_to_str(info->virtual_size);

    printf("image: %s\n", info->filename);
    printf("file format: %s\n", info->format);
    printf("virtual size: %s (%" PRIu64 " bytes)\n", vsize, info->virtual_size);
    if (info->actual_size >= 0) {
        g_autofree char *dsize = tool_size_to_str((uint64_t)info->actual_size);
        printf("disk size: %s\n", dsize);
    } else {
        printf("disk size: unavailable\n");
    }
    if (info->encrypted) {
        printf("encrypted: yes\n");
    }
    if (info->cluster_size) {
        printf("cluster_size: %" PRIu32 "\n", info->cluster_size);
    }
    if (info->dirty) {
        printf("cleanly shut down: no\n");
    }
    if (info->backing_filename) {
        printf("backing file: %s", info->backing_filename);
        if (!info->full_backing_filename) {
            printf(" (cannot determine actual path)");
        } else if (info->full_backing_filename &&
                   strcmp(info->backing_filename, info->full_backing_filename) != 0) {
            printf(" (actual path: %s)", info->full_backing_filename);
        }
        printf("\n");
    }
    if (info->backing_format) {
        printf("backing file format: %s\n", info->backing_format);
    }
    if (info->snapshots && info->snapshots->len > 0) {
        printf("Snapshot list:\n");
        tool_print_snapshot_table(stdout, info->snapshots);
    }
    tool_print_format_specific(info);
}

/* Identity of a file for loop detection: its canonical path if it exists. */
static char *canonical_name(const char *filename)
{
    char *real = realpath(filename, NULL);
    char *r = g_strdup(real ? real : filename);

    free(real);
    return r;
}

static void free_info(gpointer p)
{
    qimg_info_free(p);
}

/* Open one layer (fact 1) and read its info; prints the error.  The top
 * is opened by filename; a layer below by the library from the layer
 * above it (*img, replaced by this layer), as opening the chain would
 * (qimg_image_open_backing: a parent inside an OVA is a member of it). */
static QimgInfo *layer_info(QimgImage **img, const char *filename, const char *fmt,
                            bool force_share, bool image_opts, bool chain)
{
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    QimgImage *above = *img;
    GError *err = NULL;
    QimgInfo *info;

    oo.format = above ? NULL : fmt; /* below: the backing format above says */
    oo.read_only = true;
    oo.no_backing = true;
    oo.force_share = force_share;
    oo.no_io = true; /* metadata only: qemu-img info's locks */
    oo.image_opts = above ? false : image_opts;
    oo.no_data_files = !chain; /* fact 9 */
    if (!tool_image_opts_ok(&oo, filename)) {
        return NULL;
    }
    *img = above ? qimg_image_open_backing(above, &oo, &err)
                 : tool_qimg_image_open(filename, &oo, &err);
    g_clear_pointer(&above, qimg_image_free);
    if (!*img) {
        tool_report_open_error(filename, err);
        return NULL;
    }
    info = qimg_image_get_info(*img, &err);
    if (!info) {
        tool_report_gerror(err, NULL);
        return NULL;
    }
    return info;
}

int cmd_info(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"format", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"backing-chain", no_argument, NULL, OPT_BACKING_CHAIN},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {"force-share", no_argument, NULL, 'U'},
        {NULL, 0, NULL, 0},
    };
    const char *fmt = NULL, *output = "human";
    bool chain = false, force_share = false, image_opts = false;
    ToolOutput out;
    g_autoptr(GPtrArray) infos = g_ptr_array_new_with_free_func(free_info);
    g_autoptr(GHashTable) seen =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_autofree char *next_name = NULL;
    g_autofree char *next_fmt = NULL;
    g_autoptr(QimgImage) layer = NULL; /* the last layer opened */
    int c;

    while ((c = getopt_long(argc, argv, ":f:hU", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            fmt = optarg;
            break;
        case 'h':
            return tool_command_help("info");
        case 'U':
            force_share = true;
            break;
        case OPT_OUTPUT:
            output = optarg;
            break;
        case OPT_BACKING_CHAIN:
            chain = true;
            break;
        default: {
            int orc = tool_common_option(c, argv, &image_opts);
            if (orc >= 0) {
                return orc;
            }
            break;
        }
        }
    }
    if (optind != argc - 1) {
        return tool_usage_error("Expecting one image file name");
    }
    if (!tool_parse_output(output, &out)) {
        return 1;
    }

    next_name = g_strdup(argv[optind]);
    next_fmt = g_strdup(fmt);
    while (next_name) {
        QimgInfo *info;
        char *key = canonical_name(next_name);

        if (g_hash_table_contains(seen, key)) {
            g_free(key);
            tool_error("Backing file '%s' creates an infinite loop.", next_name);
            return 1;
        }
        g_hash_table_add(seen, key);
        info = layer_info(&layer, next_name, next_fmt, force_share, image_opts, chain);
        if (!info) {
            return 1;
        }
        g_ptr_array_add(infos, info);
        g_clear_pointer(&next_name, g_free);
        g_clear_pointer(&next_fmt, g_free);
        if (chain && info->backing_refused) { /* fact 9 */
            tool_error("Could not open backing file: %s", info->backing_refused);
            return 1;
        }
        if (chain && info->full_backing_filename) {
            next_name = g_strdup(info->full_backing_filename);
            next_fmt = g_strdup(info->backing_format);
        }
    }

    if (out == TOOL_OUTPUT_JSON) {
        ToolJson j;
        g_autofree char *text = NULL;

        tool_json_init(&j);
        if (chain) {
            tool_json_begin_array(&j, NULL);
        }
        for (guint i = 0; i < infos->len; i++) {
            json_info(&j, infos->pdata[i]);
        }
        if (chain) {
            tool_json_end_array(&j);
        }
        text = tool_json_finish(&j);
        printf("%s\n", text);
    } else {
        for (guint i = 0; i < infos->len; i++) {
            if (i > 0) {
                printf("\n");
            }
            human_info(infos->pdata[i]);
        }
    }
    return 0;
}
