/*
 * api/open.c: opening an image -- the built-in drivers in the driver table,
 * format probing, the format node over its protocol node, the backing
 * chain -- and the handles that wrap the node chain (api.h invariant 1).
 *
 * Invariants (cited as "open.c invariant N"):
 *  1. A backing chain never contains the same file twice: each file is
 *     identified by its canonical path, and a repeat refuses the open
 *     ("Backing file 'x' creates an infinite loop").
 *  2. Backing nodes are always opened read-only.
 *  3. Format probing never guesses anything but raw for an unknown file;
 *     a driver claims a file only by its magic (block.c invariant 4).
 *  4. Locks (block.h invariant 6): once the format is known, and before
 *     its driver reads the file, the protocol node holds the permissions of
 *     the driver's file_role; force_share, no_io and deny_write reach every
 *     file of the chain, resize only the image's own file, share_write
 *     (backing_shared_write) only the backing files.  A read-write
 *     open with force_share is refused, as QEMU refuses it, before any file
 *     is opened.  A backing file's failure reads as QEMU words it: "Could
 *     not open backing file: " and the backing file's own message.
 *  5. A caller's options for a probed format (BlkOpenOptions.format_opts,
 *     json-opts.c invariant 3) are checked against the format found before
 *     its driver opens the file.
 *  6. The backing file name a format with confine_names records (VMDK's
 *     parent) is resolved by blk_image_name_path(): refused unless the
 *     caller trusts the image's names (names.c invariant 1), the refusal
 *     kept in backing_refused (what info reports) and raised only when
 *     the chain is opened.  qcow2's backing names keep qemu-img's rules
 *     (absolute names and json: names open the plain file they name).
 *     The parent of a disk inside an OVA is a member of the same archive
 *     (ova.c invariant 4), opened through the ova protocol (ova_sibling).
 *  7. An OVA archive opened as itself is its listing only for a
 *     metadata-only open (no_data_files); any other open is the open of
 *     its only disk, or refused (api/ova.c invariant 2).
 *  8. A relative backing name of an image stored on a node with no folder
 *     of its own (a quorum's children: BlkDriver.no_dirname) has no path
 *     (qemu-img info: "cannot determine actual path"); opening the chain
 *     fails with QEMU's message, which says why.
 *  9. A probe whose read of the file fails refuses the open, in QEMU's
 *     words ("Could not read image for determining its format: " and the
 *     errno's text), never guesses raw from the bytes it did not get.
 *     The probe's read raises no blkdebug event (block.h BLKEV_DATA_READ),
 *     so a rule on read_aio does not fail it, as in QEMU.  A blkverify
 *     node whose children disagree on that read is the exception: QEMU's
 *     process ends there with the verdict's line, so the open goes on as
 *     raw and the caller, which ends on the verdict (qimg io), prints it.
 */
#include "api/api.h"
#include "block/blkverify.h"
#include "block/ova.h"
#include "block/rbd.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* formats.c invariant 1; a read that fails fails the open (invariant 9):
 * the driver, or NULL with the error set, naming the file @given. */
static const BlkDriver *probe_format(BlkNode *file, const char *filename,
                                     const char *given, GError **error)
{
    uint8_t buf[BLK_PROBE_BUF_SIZE] = {0};
    int64_t len = blk_getlength(file);
    size_t n = len < 0 ? 0 : (size_t)MIN((int64_t)sizeof(buf), len);
    const BlkDriver *drv = NULL;
    int ret;

    /* an empty file is raw; a short one is probed padded with zeros, as
     * QEMU reads it (formats.c invariant 1) */
    if (n > 0) {
        ret = blk_pread(file, 0, buf, n);
        g_autofree char *verdict = ret < 0 ? blk_blkverify_verdict(file) : NULL;
        if (verdict) { /* invariant 9: the verdict is the caller's to print */
            g_free(blk_error_take());
            return blk_find_format("raw");
        }
        if (ret < 0) {
            g_free(blk_error_take()); /* QEMU's words, not the node's */
            g_set_error(error, QIMG_ERROR, -ret,
                        "Could not open '%s': Could not read image for determining its "
                        "format: %s",
                        given, g_strerror(-ret));
            return NULL;
        }
        drv = blk_probe_buf(buf, sizeof(buf), filename);
    }
    /* api/ova.c invariant 1: what nothing but raw claimed may be an OVA
     * whose first member has a long name */
    if ((!drv || drv == blk_find_format("raw")) && n > 0 &&
        blk_ova_probe_long_name(file, buf, n) > 0) {
        drv = &api_ova_driver;
    }
    return drv ? drv : blk_find_format("raw"); /* invariant 3 */
}

static bool chain_contains(GSList *chain, const char *canon)
{
    for (GSList *l = chain; l; l = l->next) {
        if (strcmp(l->data, canon) == 0) {
            return true;
        }
    }
    return false;
}

static bool drv_confines(const BlkNode *img)
{
    return img->drv->confine_names;
}

/* Invariant 6: the options and the name img's backing file opens with
 * (opts: img's own, or those the caller gives the layer); the one
 * implementation for the chain (open_backing) and for a layer opened on
 * its own (api_open_backing: qimg info --backing-chain).  *name points
 * into *path, the caller's options or img's full backing file name. */
static int backing_setup(BlkNode *img, const BlkOpenOptions *opts, BlkOpenOptions *out,
                         char **path, const char **name, bool *json_error, GError **error)
{
    BlkOpenOptions bo = *opts;
    g_autoptr(GError) local = NULL;

    bo.blkdebug_align = 0; /* the image file's node only (json-name.c inv. 13) */

    if (opts->backing_opts) { /* json-name.c invariant 5: the caller's layer */
        bo = *opts->backing_opts;
        bo.check_mode = false;
    }
    if (opts->backing_opts && !opts->backing_path && !img->full_backing_filename) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Could not open backing file: %s",
                    opts->backing_opts->format
                        ? "A block device must be specified for \"file\""
                        : "Must specify either driver or file");
        return -EINVAL;
    }
    bo.backing_path = NULL;
    bo.backing_opts = NULL;
    bo.data_file_path = NULL;
    bo.data_file_opts = NULL;
    bo.rbd = NULL; /* the caller's top image only (json-name.c invariant 11) */
    bo.format = opts->backing_opts && opts->backing_opts->format
                    ? opts->backing_opts->format
                    : img->backing_format;
    bo.read_only = true;     /* invariant 2 */
    bo.copy_on_read = false; /* the top image's reads only */
    bo.resize = false;
    bo.snapshot = NULL;
    bo.check_mode = false;
    /* the top's key is the top's; json-name.c invariant 10: the chain's;
     * a caller's backing layer has its own (invariant 5) */
    if (opts->n_backing_keys) {
        bo.key_secret =
            *opts->backing_keys[0] ? g_intern_string(opts->backing_keys[0]) : NULL;
    } else if (!opts->backing_opts) {
        bo.key_secret = NULL;
    }
    bo.backing_keys = opts->n_backing_keys > 1 ? opts->backing_keys + 1 : NULL;
    bo.n_backing_keys = opts->n_backing_keys > 1 ? opts->n_backing_keys - 1 : 0;
    bo.share_write = opts->backing_share_write;
    /* file.locking is one file's (block/lock.c invariant 6) */
    bo.no_locking = opts->backing_opts && opts->backing_opts->no_locking;
    bo.backing_name = true;
    /* invariant 6: a parent inside the same OVA, a name block/ova.c built */
    bo.ova_sibling = !opts->backing_path && !opts->backing_opts && drv_confines(img) &&
                     blk_ova_member_node(img->file) != NULL;
    /* json-name.c invariant 1: a json: name from the image, as a backing name */
    if (!opts->backing_path && g_str_has_prefix(img->full_backing_filename, "json:") &&
        !api_json_backing_name(img->full_backing_filename, &bo, path, &local)) {
        *json_error = true; /* the caller names it */
        int code = local->code;
        g_propagate_error(error, g_steal_pointer(&local));
        return -code;
    }
    bo.read_only = true; /* invariant 2, whatever the name says */
    *name = opts->backing_path ? opts->backing_path
            : *path            ? *path
                               : img->full_backing_filename;
    *out = bo;
    return 0;
}

BlkNode *api_open_backing(BlkNode *img, const BlkOpenOptions *opts, char **path,
                          GError **error)
{
    BlkOpenOptions bo;
    const char *name;
    bool json_error = false;

    if (img->backing_refused) { /* invariant 6 */
        g_set_error(error, QIMG_ERROR, EACCES, "Could not open backing file: %s",
                    img->backing_refused);
        return NULL;
    }
    if (!img->full_backing_filename) {
        g_set_error(error, QIMG_ERROR, ENOENT, "Image '%s' has no backing file",
                    img->filename);
        return NULL;
    }
    if (backing_setup(img, opts, &bo, path, &name, &json_error, error) < 0) {
        g_prefix_error(error, "Could not open '%s': ", img->full_backing_filename);
        return NULL;
    }
    return api_open_node(name, &bo, NULL, error);
}

static int open_backing(BlkNode *img, const BlkOpenOptions *opts, GSList *chain,
                        GError **error)
{
    BlkOpenOptions bo;
    g_autoptr(GError) local = NULL;
    g_autofree char *path = NULL;
    const char *name;
    bool json_error = false;
    int ret = backing_setup(img, opts, &bo, &path, &name, &json_error, error);

    if (ret < 0) {
        if (json_error) {
            g_prefix_error(error, "Could not open backing file: ");
        }
        return ret;
    }
    img->backing = api_open_node(name, &bo, chain, &local);
    if (!img->backing) {
        g_set_error(error, QIMG_ERROR, local->code, "Could not open backing file: %s",
                    blk_open_error_detail(local->message, local->code, name));
        return -local->code;
    }
    return 0;
}

char *api_qemu_format_name(const char *format, const char *file_name)
{
    if (!g_str_has_prefix(file_name, "json:")) {
        return g_strdup(file_name);
    }
    const char *keys[] = {"driver", "file"};
    g_autofree char *fmt = g_strdup_printf("\"%s\"", format);
    const char *vals[] = {fmt, file_name + strlen("json:")};
    g_autofree char *obj = blk_qdict_json_object(2, keys, vals);
    return g_strconcat("json:", obj, NULL);
}

/* @given: the name as the caller gave it (a protocol's @filename is its
 * own, nbd.c's), for the messages QEMU words with it. */
static BlkNode *open_format(BlkNode *file, const BlkDriver *drv, const char *filename,
                            const char *given, const char *canon,
                            const BlkOpenOptions *opts, GSList *chain, bool user_name,
                            GError **error)
{
    bool ro = opts->read_only || opts->snapshot != NULL;
    bool probed = !drv;
    BlkNode *img;
    GSList link;

    if (!drv && !(drv = probe_format(file, filename, given, error))) {
        blk_close(file);
        return NULL;
    }
    if (drv->is_protocol && file->drv != drv) { /* -f nbd on a file */
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not open '%s': File name string for NBD must start with "
                    "'nbd:'",
                    filename);
        blk_close(file);
        return NULL;
    }
    if (drv->is_protocol) {
        if (file->drv != drv) { /* "-f rbd" on a file, "-f file" on rbd: */
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Could not open '%s': the '%s' driver cannot open it as '%s'",
                        filename, file->drv->format_name, drv->format_name);
            blk_close(file);
            return NULL;
        }
        return file;
    }
    BlkOpenOptions fo = *opts; /* invariant 5: a probed format's options */
    if (opts->format_opts && !api_format_options(drv->format_name, &fo, error)) {
        g_prefix_error(error, "Could not open '%s': ", filename);
        blk_close(file);
        return NULL;
    }
    opts = &fo;

    img = g_new0(BlkNode, 1);
    img->drv = drv;
    img->file = file;
    /* QEMU names a format over a node named by options by its options too:
     * json:{"driver": FORMAT, "file": {...}} (an RBD image) */
    img->filename = g_str_has_prefix(file->filename, "json:{")
                        ? api_qemu_format_name(drv->format_name, file->filename)
                        : g_strdup(filename);
    img->read_only = ro;
    img->probed = probed;
    img->cache = opts->cache;
    img->request_alignment = file->request_alignment;
    img->opts = *opts;
    img->opts.format = NULL;
    img->opts.snapshot = NULL;
    img->opts.backing_path = NULL; /* the caller's strings (types.h) */
    img->opts.backing_opts = NULL;
    img->opts.data_file_path = NULL;
    img->opts.data_file_opts = NULL;
    img->opts.rbd = NULL;

    g_autoptr(GError) local = NULL;
    /* Invariant 4: the locks of the driver's role before it reads the file. */
    BlkOpenOptions lo = *opts;
    lo.read_only = ro;
    int ret = api_format_usable(drv); /* formats.c invariant 2 */
    if (ret == 0) {
        ret = blk_set_role_perm(file, drv->file_role, &lo);
    }
    if (ret == 0) {
        ret = drv->open(img, filename, opts);
    }
    if (ret < 0) {
        blk_error_propagate(error, ret, "Could not open '%s'", filename);
        goto fail_noclose;
    }
    if (opts->backing_opts && !opts->no_backing && !drv->set_backing) {
        g_set_error(error, QIMG_ERROR, ENOTSUP, "Driver doesn't support backing files");
        goto fail;
    }
    if (img->backing_filename) {
        const char *base = user_name ? blk_plain_name(filename) : filename;
        BlkNode *member = blk_ova_member_node(file);
        if (drv->confine_names && member) { /* invariant 6, in an OVA */
            if (blk_ova_sibling_name(member, "backing file", img->backing_filename,
                                     &img->full_backing_filename) < 0) {
                img->backing_refused = blk_error_take();
            }
        } else if (drv->confine_names) { /* invariant 6 */
            unsigned how = user_name ? BLK_OPEN_USER_NAME : 0;
            bool is_path = blk_protocol_is_path(filename, how);
            if (blk_image_name_path(base, is_path, "backing file", img->backing_filename,
                                    opts->trust_names, &img->full_backing_filename) < 0) {
                img->backing_refused = blk_error_take();
            }
        } else if (file->drv->no_dirname &&
                   !blk_backing_name_is_absolute(img->backing_filename)) {
            img->backing_refused = g_strdup(file->drv->no_dirname); /* invariant 8 */
        } else {
            img->full_backing_filename =
                blk_resolve_backing_name(base, img->backing_filename);
        }
    }
    if (img->backing_refused && !opts->backing_path && !opts->no_backing) {
        if (file->drv->no_dirname) { /* invariant 8: QEMU's words alone */
            g_set_error_literal(error, QIMG_ERROR, EINVAL, img->backing_refused);
        } else {
            g_set_error(error, QIMG_ERROR, EACCES,
                        "Could not open '%s': Could not open backing file: %s", filename,
                        img->backing_refused);
        }
        goto fail;
    }
    if (img->full_backing_filename || opts->backing_opts) {
        if (!opts->no_backing) {
            link.data = (void *)canon;
            link.next = chain;
            if (open_backing(img, opts, &link, &local) < 0) {
                g_propagate_prefixed_error(error, g_steal_pointer(&local),
                                           "Could not open '%s': ", filename);
                goto fail;
            }
        }
    }
    if (drv->open_finish && (ret = drv->open_finish(img)) < 0) {
        blk_error_propagate(error, ret, "Could not open '%s'", filename);
        goto fail;
    }
    return img;

fail:
    blk_close(img);
    return NULL;
fail_noclose:
    blk_close(img->file);
    g_free(img->filename);
    g_free(img->backing_filename);
    g_free(img->backing_format);
    g_free(img);
    return NULL;
}

static const BlkDriver *lookup_format(const char *filename, const BlkOpenOptions *opts,
                                      GError **error)
{
    const BlkDriver *drv = blk_find_format(opts->format);
    if (!drv) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Could not open '%s': Unknown driver '%s'",
                    filename, opts->format);
    }
    return drv;
}

BlkNode *api_open_node_on(BlkNode *file, const char *filename, const BlkOpenOptions *opts,
                          GError **error)
{
    const BlkDriver *drv = NULL;

    if (opts->format && !(drv = lookup_format(filename, opts, error))) {
        blk_close(file);
        return NULL;
    }
    return open_format(file, drv, filename, filename, filename, opts, NULL, true, error);
}

BlkNode *api_open_node(const char *filename, const BlkOpenOptions *opts, GSList *chain,
                       GError **error)
{
    char canon[PATH_MAX];
    const BlkDriver *drv = NULL;
    bool ro = opts->read_only || opts->snapshot != NULL;

    api_register_drivers();
    if (opts->force_share && !ro) { /* invariant 4 */
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not open '%s': force-share=on can only be used with "
                    "read-only images",
                    filename);
        return NULL;
    }
    if (opts->format && !(drv = lookup_format(filename, opts, error))) {
        return NULL;
    }
    /* block.h invariant 5: only the caller's own name (not a backing file
     * name from an image: chain != NULL, or backing_name) may select a test
     * node. */
    /* "-f file" opens the name as a plain file, whatever it looks like */
    bool user_name = (chain == NULL && !opts->backing_name &&
                      !(drv && strcmp(drv->format_name, "file") == 0)) ||
                     (opts->ova_sibling && g_str_has_prefix(filename, "ova:"));
    if (user_name && api_blkverify_name(filename)) { /* json-name.c invariant 19 */
        return api_open_blkverify_name(filename, opts, error);
    }
    const char *given = filename;
    const char *base = user_name ? blk_plain_name(filename) : filename, *path = base;
    g_autofree char *file_path = NULL;
    if (g_str_has_prefix(path, "file:")) {
        /* the file protocol, as QEMU ("./" before a colon: protocol.c invariant 7) */
        path = file_path = blk_file_protocol_path(path);
    }
    if (drv && strcmp(drv->format_name, "rbd") == 0 && !blk_is_rbd_name(path)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not open '%s': File name must start with 'rbd:'", filename);
        return NULL;
    }
    if (!blk_protocol_is_path(path, user_name ? BLK_OPEN_USER_NAME : 0)) {
        g_strlcpy(canon, path, sizeof(canon)); /* not a path */
    } else if (!realpath(path, canon)) {
        int e = errno;
        if (path != base) { /* "file:NAME": QEMU names both */
            g_set_error(error, QIMG_ERROR, e,
                        "Could not open '%s': Could not open '%s': %s", filename, path,
                        g_strerror(e));
        } else {
            g_set_error(error, QIMG_ERROR, e, "Could not open '%s': %s", filename,
                        g_strerror(e));
        }
        return NULL;
    }
    if (path != base && base == filename) {
        filename = path; /* the image's name has no "file:" (QEMU's bs->filename) */
    }
    if (chain_contains(chain, canon)) { /* invariant 1 */
        g_set_error(error, QIMG_ERROR, ELOOP,
                    "Backing file '%s' creates an infinite loop.", filename);
        return NULL;
    }

    BlkOpenOptions po = *opts;
    po.read_only = ro;
    blk_error_clear(); /* error.c invariant 1 */
    BlkNode *file = blk_open_protocol(filename, &po, BLK_ROLE_PROTOCOL,
                                      user_name ? BLK_OPEN_USER_NAME : 0);
    if (!file) {
        blk_error_propagate(error, 0, NULL);
        return NULL;
    }
    if (!blk_protocol_is_path(filename, user_name ? BLK_OPEN_USER_NAME : 0) &&
        file->drv->is_protocol && !file->filtered &&
        !g_str_has_prefix(file->filename, "json:")) {
        /* the protocol's own name (nbd.c: QEMU's); one named by options
         * (rbd) names its format in open_format() */
        filename = file->filename;
    }
    BlkNode *img =
        open_format(file, drv, filename, given, canon, opts, chain, user_name, error);
    if (img && img->drv == &api_ova_driver && !opts->no_data_files) {
        return api_ova_open_disk(img, filename, opts, user_name, error); /* invariant 7 */
    }
    return img;
}

QimgImage *api_image_new(BlkNode *node)
{
    QimgImage *img = g_new0(QimgImage, 1);

    img->node = node;
    img->owns_node = true;
    /* api.h invariant 1: the chain below gets handles of its own */
    QimgImage *h = img;
    for (BlkNode *b = blk_cow_backing(node); b; b = b->backing) {
        h->backing = g_new0(QimgImage, 1);
        h->backing->node = b;
        h = h->backing;
    }
    return img;
}

void api_image_destroy(QimgImage *img)
{
    QimgImage *h = img;

    while (h) {
        QimgImage *next = h->backing;
        api_aio_close(h); /* api.h invariant 2: requests first */
        api_release(h);
        h = next;
    }
    if (img && img->owns_node) {
        blk_close(img->node);
    }
    h = img;
    while (h) {
        QimgImage *next = h->backing;
        g_free(h);
        h = next;
    }
}
