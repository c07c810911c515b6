/*
 * api/ova.c: the "ova" format -- an OVA archive opened as itself, without
 * a disk selector: `qimg info vm.ova` lists its disks, and a command that
 * reads guest data reads its only disk.
 *
 * Owns: the container driver (probe, listing, info) and the step of
 * api_open_node() that turns an open of a one-disk OVA into the open of
 * "ova:0:NAME" (block/ova.c).
 *
 * Invariants (cited as "api/ova.c invariant N"):
 *  1. Probing claims an archive whose first tar header is valid and names
 *     a *.ovf member (block/ova.c blk_ova_probe), or is a GNU long name
 *     ending in ".ovf" (blk_ova_probe_long_name: the name lies past the
 *     512 bytes every probe sees, so api/open.c asks it when no format
 *     claimed those bytes); "-f raw" still reads the
 *     archive's bytes.  Nothing but the tar headers and the OVF is read:
 *     no disk is opened for info.
 *  2. A metadata-only open (QimgOpenOptions.no_data_files: qemu-img info)
 *     is the listing: virtual size the only disk's OVF capacity (0 with
 *     several disks or an unknown capacity), format-specific data every
 *     disk.  Any other open reads guest data: with exactly one disk it
 *     becomes the open of that disk ("ova:0:NAME", as the caller named
 *     the archive), with none or several it is refused with a message
 *     naming the disks and the selector syntax.  The container itself
 *     reads and writes nothing.
 */
#include "api/api.h"
#include "block/ova.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

typedef struct OvaContainer {
    BlkOvaListing l;
} OvaContainer;

static int ova_probe(const uint8_t *buf, size_t len, const char *filename)
{
    return blk_ova_probe(buf, len);
}

static void ova_close(BlkNode *img)
{
    OvaContainer *s = img->opaque;

    if (s) {
        blk_ova_listing_clear(&s->l);
        g_free(s);
        img->opaque = NULL;
    }
}

/* Invariant 2: "0: vmdisk1 (disk1.vmdk), 1: ..." */
static char *disk_list(const BlkOvaListing *l)
{
    GString *s = g_string_new(NULL);

    for (guint i = 0; i < l->disks->len && i < 8; i++) {
        const BlkOvaDisk *d = &g_array_index(l->disks, BlkOvaDisk, i);
        g_string_append_printf(s, "%s%u: %s (%s)", i ? ", " : "", i, d->disk->id,
                               d->file ? d->file->href : "empty");
    }
    if (l->disks->len > 8) {
        g_string_append(s, ", ...");
    }
    return g_string_free(s, false);
}

static int ova_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    OvaContainer *s = g_new0(OvaContainer, 1);
    const char *name = blk_plain_name(filename);
    int ret = blk_ova_list(img->file, name, &s->l);

    img->opaque = s;
    if (ret < 0) {
        goto fail; /* a failed open is not closed (api/open.c) */
    }
    if (!opts->no_data_files && s->l.disks->len != 1) { /* invariant 2 */
        g_autofree char *list = disk_list(&s->l);
        if (s->l.disks->len == 0) {
            ret =
                blk_error(EINVAL, "'%s' is an OVA archive whose OVF lists no disk", name);
        } else {
            ret = blk_error(EINVAL,
                            "'%s' is an OVA archive holding %u disks (%s): name one as "
                            "ova:N:%s, ova:id=DISKID:%s or ova:file=MEMBER:%s",
                            name, s->l.disks->len, list, name, name, name);
        }
        goto fail;
    }
    if (s->l.disks->len == 1) {
        const BlkOvaDisk *d = &g_array_index(s->l.disks, BlkOvaDisk, 0);
        img->size = d->disk->capacity_known ? d->disk->capacity_bytes : 0;
    }
    return 0;

fail:
    ova_close(img);
    return ret;
}

static int ova_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    return blk_error(EINVAL, "'%s' is an OVA archive: read one of its disks (ova:N:%s)",
                     img->filename, img->filename);
}

static int64_t ova_get_allocated_size(BlkNode *img)
{
    return blk_get_allocated_size(img->file);
}

static void disk_info_clear(void *p)
{
    BlkOvaDiskInfo *d = p;
    g_free(d->id);
    g_free(d->file);
    g_free(d->capacity);
    g_free(d->capacity_units);
    g_free(d->format);
    g_free(d->compression);
}

static int ova_get_info(BlkNode *img, BlkInfo *info)
{
    OvaContainer *s = img->opaque;

    info->format_specific = true;
    info->ova.present = true;
    info->ova.descriptor = g_strdup(s->l.ovf_name);
    info->ova.disks = g_array_new(false, true, sizeof(BlkOvaDiskInfo));
    g_array_set_clear_func(info->ova.disks, disk_info_clear);
    for (guint i = 0; i < s->l.disks->len; i++) {
        const BlkOvaDisk *d = &g_array_index(s->l.disks, BlkOvaDisk, i);
        BlkOvaDiskInfo x = {
            .id = g_strdup(d->disk->id),
            .file = d->file ? g_strdup(d->file->href) : NULL,
            .offset = d->offset,
            .size = d->size,
            .capacity = g_strdup(d->disk->capacity),
            .capacity_units = g_strdup(d->disk->units),
            .capacity_bytes = d->disk->capacity_bytes,
            .capacity_known = d->disk->capacity_known,
            .format = g_strdup(d->disk->format),
            .compression = d->file ? g_strdup(d->file->compression) : NULL,
        };
        g_array_append_val(info->ova.disks, x);
    }
    return 0;
}

const BlkDriver api_ova_driver = {
    .format_name = "ova",
    .probe = ova_probe,
    .open = ova_open,
    .close = ova_close,
    .preadv = ova_preadv,
    .get_allocated_size = ova_get_allocated_size,
    .get_info = ova_get_info,
    .file_role = BLK_ROLE_METADATA,
};

BlkNode *api_ova_open_disk(BlkNode *img, const char *filename, const BlkOpenOptions *opts,
                           bool user_name, GError **error)
{
    BlkOpenOptions o = *opts;
    g_autofree char *name = NULL;

    blk_close(img);
    if (!user_name) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not open '%s': an OVA archive cannot be a backing file",
                    filename);
        return NULL;
    }
    o.format = NULL; /* the disk's own format, probed */
    name = g_strdup_printf("ova:0:%s", filename);
    return api_open_node(name, &o, NULL, error);
}
