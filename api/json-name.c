/*
 * api/json-name.c: QEMU's "json:{...}" pseudo-filenames (and the same
 * options as key=value pairs, qemu-img's --image-opts) for the caller's own
 * image name: the image file, its format and the runtime options qimg
 * honours, as QEMU reads them.
 *
 * Owns: which node a caller's options name (the image file, its format,
 * its layers) and the order they are read in; each key's mapping onto
 * BlkOpenOptions is json-opts.c's.
 *
 * Invariants (cited as "json-name.c invariant N"):
 *  1. A name the caller gives is parsed as the caller's (api_json_name);
 *     a backing file name read from an image only as a backing name
 *     (api_json_backing_name), which opens nothing but a plain file: the
 *     format driver qcow2 or raw over the file protocol (block.h invariant
 *     5: an image cannot make qimg open a test node, or any other
 *     protocol); any other driver is refused, naming it.  As QEMU, the
 *     image's backing format, when it has one, is the format, the name's
 *     own "driver" notwithstanding, a backing name needs "file" (a
 *     top-level "filename" is QEMU's 'A block device must be specified'),
 *     and a relative file.filename is relative to the working directory,
 *     not the image's (open.c takes the path as it is).
 *  2. (Every key honoured or refused: json-opts.c invariant 1.)
 *  3. (Values as QEMU's: json-opts.c invariant 2.)
 *  4. qcow2's encrypt.key-secret (luks' key-secret) is kept for the driver,
 *     which
 *     unlocks an encrypted image opened for its data with it (qcow2.c
 *     invariant 10) and, as QEMU, does not look it up otherwise; the image
 *     is then named as QEMU names it (qimg info).
 *  5. A caller's "backing" and "data-file" options (objects, or dotted
 *     keys) name the layer opened instead of the one the image names:
 *     the backing file with its own format and runtime options (read as
 *     a caller's name, one level: no backing or data file of its own by
 *     options), the data file as a plain file (driver file, or raw over
 *     file).  A string is a node reference, which qimg has none of: QEMU's
 *     "Cannot find device=..." message (for "file" too; with file.KEY
 *     options beside it, QEMU's "Cannot reference an existing block
 *     device with additional options or a new filename").  When the
 *     caller opens without the backing chain (qemu-img info), backing
 *     options are QEMU's "does not support the option" (naming
 *     backing.driver, else
 *     backing.file.filename, else the first key, as qemu-img does for the
 *     usual forms).  A backing name from an image takes neither (the
 *     refusal of json-opts.c invariant 1).
 *  6. A json: name's JSON is parsed and flattened by json-flat.c (its
 *     invariant 2: nested objects are dotted keys, list members KEY.0,
 *     KEY.1, ..., as QEMU's qdict_flatten).
 *  7. Options given with a name (QimgOpenOptions.options, qemu-io's open
 *     -o) win over the options of a json: name; with a plain name, the
 *     name is the "filename" of the options, and the options may not name
 *     the file as well ("Can't specify 'file' and 'filename' options at
 *     the same time"); the caller's format is the driver unless the
 *     options name one.
 *  8. (A probed format's options: json-opts.c invariant 3.)
 *  9. An NBD export by QEMU's nbd options (driver=nbd: the image is the
 *     NBD node itself, format "nbd"; or file.driver=nbd under a format):
 *     server.type unix/inet with server.path or server.host and
 *     server.port, QEMU's older path/host/port, export, and x-dirty-bitmap
 *     (the meta context block status reads, nbd.c invariant 5), opened as
 *     the URI block/nbd.c takes, and reconnect-delay (nbd.c invariant 7);
 *     TLS and open-timeout are refused.
 * 10. Backing options that are only keys -- backing.encrypt.key-secret
 *     (backing.key-secret for a luks layer), backing.backing.encrypt.key-secret
 *     and so on, as qemu-img takes them -- key the layers of the image's
 *     own backing chain, which the image still names.
 * 11. A Ceph RBD image is named by its fields -- "driver": "rbd" for the
 *     RBD node itself, "file": {"driver": "rbd", ...} under raw or qcow2
 *     -- pool and image (QEMU's "Parameter 'pool' is missing"), namespace,
 *     snapshot, conf and user; QEMU's other RBD options (key-secret,
 *     auth-client-required, server, encrypt, password-secret) are refused
 *     by name, an unknown one is QEMU's "Parameter 'K' is unexpected".
 *     The location goes to the open in layers->rbd (o->rbd) with its
 *     "rbd:" name as the path; only the caller's own name and its layers
 *     object take it (invariant 1: never a backing name from an image).
 * 12. "driver": "null-co" (or "null-aio") is QEMU's null node itself
 *     (block/null.c), named "null-co://" when no filename is given, with
 *     its options size, read-zeroes and latency-ns (open-opts.c); only the
 *     caller's own name takes it.
 * 13. "file": {"driver": "blkdebug", ...} under a format is QEMU's blkdebug
 *     node over the image file, read by json-blkdebug.c into the fault
 *     node's name; only the caller's own name takes it, for the image
 *     file and for a data file (raw over blkdebug, or "data-file":
 *     {"driver": "blkdebug", "image": ...}; qcow2.c invariant 4).
 *     Its "align" (file.align over a "blkdebug:" name, as QEMU takes it
 *     with -o driver=qcow2,file.align=4k blkdebug::IMG) is the fault node's
 *     alignment limit (BlkOpenOptions.blkdebug_align, block/limits.c); a
 *     data file's is refused.
 * 14. "driver": "blkdebug" is QEMU's blkdebug node as the image, read by
 *     json-blkdebug.c (its invariant 5); only the caller's own name takes it.
 * 15. A format over a format ("driver": F, "file": {"driver": G, ...}, G a
 *     format: an image stored as the guest data of another, QEMU's 072
 *     and 120) is G's layer opened from the "file" options, then F over
 *     that node (ApiOpenLayers.outer_format, qimg_image_open).  F takes
 *     only the node options (read-only, cache.*: both layers'); any other
 *     option of F's is refused by name.  One level, the caller's own name.
 * 16. A "data-file" with "driver": "null-co" (or "null-aio") is QEMU's null
 *     node as the data file (QEMU's 270: guest data written nowhere), with
 *     the node's options size, read-zeroes and latency-ns
 *     (BlkOpenOptions.data_file_opts, qcow2.c invariant 4); any other
 *     option is QEMU's "Block protocol 'null-co' doesn't support the
 *     option 'K'".
 * 17. "driver": "quorum", or a format over "file": {"driver": "quorum"},
 *     is QEMU's quorum node (api/quorum.c); only the caller's own name
 *     takes it.
 * 18. A file over SFTP by QEMU's ssh options ("driver": "ssh": the image is
 *     the ssh node itself, format "ssh"; or "file": {"driver": "ssh"} under
 *     a format): server.host and server.port (QEMU's older host and port:
 *     "port may not be used without host"), path, user, and the host key
 *     check as host-key-check.mode none/hash/known_hosts with .type and
 *     .hash, or QEMU's older host_key_check, all opened as the "ssh://"
 *     URI block/ssh.c takes (ssh.h invariant 2 says which check is part of
 *     the name).  The legacy port is QEMU's number ("Parameter 'port'
 *     expects a number"), server.port digits ("Use only numeric port
 *     value"); the path must be absolute (a URI's); only the caller's own
 *     name takes it.
 * 19. "driver": "blkverify" (or "file": {"driver": "blkverify"}) and the
 *     name "blkverify:RAW:IMAGE" (api/open.c): QEMU's blkverify node
 *     (api/blkverify.c); only the caller's own name takes it.
 * 20. (A JSON null for an option: json-opts.c invariant 4.)
 */
#include "api/api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Invariant 1: a backing name's driver (format, or the file's protocol). */
static gboolean backing_driver_ok(const char *driver, const char *a, const char *b,
                                  GError **error)
{
    if (!driver || strcmp(driver, a) == 0 || (b && strcmp(driver, b) == 0)) {
        return TRUE;
    }
    g_set_error(error, QIMG_ERROR, ENOTSUP,
                "qimg opens a backing file named by an image only as a plain file: "
                "driver '%s' refused",
                driver);
    return FALSE;
}

void api_open_layers_clear(ApiOpenLayers *l)
{
    g_clear_pointer(&l->backing_path, g_free);
    g_clear_pointer(&l->data_file_path, g_free);
    g_clear_pointer(&l->format_opts, g_hash_table_unref);
    g_clear_pointer(&l->backing_format_opts, g_hash_table_unref);
    g_clear_pointer(&l->backing_keys, g_ptr_array_unref);
    blk_rbd_location_clear(&l->rbd);
    g_clear_pointer(&l->blkdebug_rules, g_free);
    g_clear_pointer(&l->outer_format, g_free);
    api_quorum_clear(&l->quorum);
    api_blkverify_clear(&l->blkverify);
    g_clear_pointer(&l->json_typed, g_hash_table_unref);
    g_clear_pointer(&l->file_qemu_name, g_free);
    g_clear_pointer(&l->blkdebug_name, api_blkdebug_name_free);
}

/* Invariant 10: the depth of a key of the backing options naming a
 * layer's key ("encrypt.key-secret" 0, "backing.key-secret" 1, ...), or
 * -1 for any other key. */
static int chain_key_depth(const char *key)
{
    int d = 0;

    while (g_str_has_prefix(key, "backing.")) {
        key += strlen("backing.");
        d++;
    }
    return strcmp(key, "encrypt.key-secret") == 0 || strcmp(key, "key-secret") == 0 ? d
                                                                                    : -1;
}

/* Invariant 10: backing options that only name keys of the image's own
 * chain; *keys (by depth) filled. */
static bool chain_keys_only(GHashTable *bsub, GPtrArray **keys)
{
    GHashTableIter it;
    gpointer k, v;

    g_hash_table_iter_init(&it, bsub);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        if (chain_key_depth(k) < 0) {
            return false;
        }
    }
    *keys = g_ptr_array_new_with_free_func(g_free);
    g_hash_table_iter_init(&it, bsub);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        guint d = (guint)chain_key_depth(k);
        while ((*keys)->len <= d) {
            g_ptr_array_add(*keys, g_strdup(""));
        }
        g_free((*keys)->pdata[d]);
        (*keys)->pdata[d] = g_strdup(v);
    }
    return true;
}

/* Invariant 4: "backing.driver", else "backing.file.filename", else the
 * first of the backing options, for qemu-img's refusal. */
static const char *backing_key_named(GHashTable *sub)
{
    g_autoptr(GList) keys = NULL;

    if (g_hash_table_contains(sub, "driver")) {
        return "driver";
    }
    if (g_hash_table_contains(sub, "file.filename")) {
        return "file.filename";
    }
    keys = g_list_sort(g_hash_table_get_keys(sub), (GCompareFunc)strcmp);
    return keys->data;
}

static gboolean apply(GHashTable *flat, BlkOpenOptions *o, char **path,
                      const ApiApplyHow *how, GError **error);

/* Take flat's KEY (prefix + name) out of it: its value (g_free) or NULL. */
char *api_flat_take(GHashTable *flat, const char *prefix, const char *name)
{
    g_autofree char *key = g_strconcat(prefix, name, NULL);
    gpointer k = NULL, v = NULL;

    if (!g_hash_table_steal_extended(flat, key, &k, &v)) {
        return NULL;
    }
    g_free(k);
    return v;
}

/* Invariant 4: the layers collected in bsub and dsub onto *o. */
static gboolean apply_layers(GHashTable *bsub, GHashTable *dsub, bool caller_no_backing,
                             const char *driver, BlkOpenOptions *o, ApiOpenLayers *layers,
                             GError **error)
{
    g_autoptr(GError) local = NULL;

    if (g_hash_table_size(bsub) && caller_no_backing) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Block format '%s' does not support the option 'backing.%s'",
                    driver ? driver : "raw", backing_key_named(bsub));
        return FALSE;
    }
    if (g_hash_table_size(bsub) && chain_keys_only(bsub, &layers->backing_keys)) {
        /* invariant 10 */
        o->backing_keys = (const char *const *)layers->backing_keys->pdata;
        o->n_backing_keys = layers->backing_keys->len;
    } else if (g_hash_table_size(bsub)) {
        layers->backing = *o;
        layers->backing.format = NULL;
        layers->backing.no_backing = false;
        /* its key is its own encrypt.key-secret (key-secret), not the top's */
        layers->backing.key_secret = NULL;
        /* without a file of its own: the image's backing file, with these
         * options (invariant 5) */
        const ApiApplyHow bhow = {.file_optional = true,
                                  .defer = &layers->backing_format_opts};
        if (!apply(bsub, &layers->backing, &layers->backing_path, &bhow, &local)) {
            g_set_error(error, QIMG_ERROR, local->code, "Could not open backing file: %s",
                        local->message);
            return FALSE;
        }
        o->backing_path = layers->backing_path;
        o->backing_opts = &layers->backing;
    }
    if (g_hash_table_size(dsub)) {
        if (!api_data_file_options(dsub, &layers->data_file_path, &layers->data_file,
                                   error)) {
            return FALSE;
        }
        o->data_file_path = layers->data_file_path;
        if (g_str_has_prefix(layers->data_file_path, "null-")) { /* invariant 16 */
            o->data_file_opts = &layers->data_file;
        }
    }
    return TRUE;
}

/* Invariant 11: an RBD image, the node itself ("driver": "rbd") or under a
 * format; the rest of flat as apply() takes it, over a placeholder file. */
static gboolean apply_rbd(GHashTable *flat, BlkOpenOptions *o, char **path,
                          ApiOpenLayers *layers, GError **error)
{
    const char *driver = g_hash_table_lookup(flat, "driver");
    bool node = driver && strcmp(driver, "rbd") == 0;
    g_autofree char *unused = NULL;

    if (node && (g_hash_table_contains(flat, "file") ||
                 g_hash_table_contains(flat, "file.driver"))) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Parameter 'file' is unexpected");
        return FALSE;
    }
    if (!api_rbd_fields(flat, node ? "" : "file.", &layers->rbd, error)) {
        return FALSE;
    }
    if (node) {
        g_hash_table_remove(flat, "driver");
    }
    /* the options left are the format's and the node's (read-only, cache) */
    g_hash_table_insert(flat, g_strdup("file.filename"), g_strdup("rbd"));
    const ApiApplyHow plain = {0};
    if (!apply(flat, o, &unused, &plain, error)) {
        blk_rbd_location_clear(&layers->rbd);
        return FALSE;
    }
    if (node) {
        o->format = "rbd";
    }
    o->rbd = &layers->rbd;
    *path = blk_rbd_name(&layers->rbd);
    return TRUE;
}

static gboolean apply(GHashTable *flat, BlkOpenOptions *o, char **path,
                      const ApiApplyHow *how, GError **error);

static bool is_format(const char *name)
{
    api_register_drivers(); /* the table this asks (formats.c) */
    const BlkDriver *drv = blk_find_format(name);
    return drv && !drv->is_protocol;
}

/* Invariant 15: the lower format's options onto *o and *path, the upper
 * format's name into the layers. */
static gboolean format_over_format(GHashTable *flat, const char *driver,
                                   BlkOpenOptions *o, char **path, const ApiApplyHow *how,
                                   GError **error)
{
    g_autoptr(GHashTable) child =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GList) keys =
        g_list_sort(g_hash_table_get_keys(flat), (GCompareFunc)strcmp);

    if (how->layers->outer_format) {
        g_set_error(error, QIMG_ERROR, ENOTSUP, "qimg opens one format over a format");
        return FALSE;
    }
    for (GList *l = keys; l; l = l->next) {
        const char *key = l->data, *value = g_hash_table_lookup(flat, key);
        if (g_str_has_prefix(key, "file.")) {
            g_hash_table_insert(child, g_strdup(key + strlen("file.")), g_strdup(value));
        } else if (api_node_option(key)) { /* both layers', unless file.KEY */
            g_autofree char *lower = g_strconcat("file.", key, NULL);
            if (!g_hash_table_contains(flat, lower)) {
                g_hash_table_insert(child, g_strdup(key), g_strdup(value));
            }
        } else if (strcmp(key, "driver") != 0) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "qimg takes no option '%s' of a format over a format", key);
            return FALSE;
        }
    }
    how->layers->outer_format = g_strdup(driver);
    if (o->format && strcmp(o->format, driver) == 0) {
        o->format = NULL; /* the lower layer's driver */
    }
    return apply(child, o, path, how, error);
}

/* A key of flat starts with prefix. */
static bool has_key_under(GHashTable *flat, const char *prefix)
{
    GHashTableIter it;
    gpointer k;

    g_hash_table_iter_init(&it, flat);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        if (g_str_has_prefix(k, prefix)) {
            return true;
        }
    }
    return false;
}

/* Invariants 1-8: flat onto *o and *path, as how says. */
static gboolean apply(GHashTable *flat, BlkOpenOptions *o, char **path,
                      const ApiApplyHow *how, GError **error)
{
    bool from_image = how->from_image;
    ApiOpenLayers *layers = how->layers;
    g_autoptr(GHashTable) bsub =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GHashTable) dsub =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    bool caller_no_backing = o->no_backing;
    const char *driver = g_hash_table_lookup(flat, "driver");
    const char *file = g_hash_table_lookup(flat, "file.filename");
    const char *fdrv = g_hash_table_lookup(flat, "file.driver");
    const char *v;

    if (from_image && o->format) {
        driver = o->format; /* invariant 1: the image's backing format */
    } else if (from_image && !backing_driver_ok(driver, "qcow2", "raw", error)) {
        return FALSE;
    }
    if (!from_image && layers &&
        ((driver && strcmp(driver, "rbd") == 0) || (fdrv && strcmp(fdrv, "rbd") == 0))) {
        return apply_rbd(flat, o, path, layers, error); /* invariant 11 */
    }
    if (!from_image && layers &&
        ((driver && strcmp(driver, "quorum") == 0) ||
         (fdrv && strcmp(fdrv, "quorum") == 0))) {
        return api_quorum_options(flat, o, &layers->quorum, error); /* inv. 17 */
    }
    if (!from_image && layers &&
        ((driver && strcmp(driver, "blkverify") == 0) ||
         (fdrv && strcmp(fdrv, "blkverify") == 0))) { /* invariant 19 */
        return api_blkverify_options(flat, o, &layers->blkverify, error);
    }
    if (!from_image && api_file_driver_top(driver)) { /* open-opts.c inv. 3 */
        g_autoptr(GHashTable) child = api_file_driver_child(flat);
        if (!apply(child, o, path, how, error) ||
            !api_file_driver_check(driver, *path, o->read_only, error)) {
            return FALSE;
        }
        o->format = "file";
        return TRUE;
    }
    if (!from_image && layers && driver && strcmp(driver, "blkdebug") == 0) {
        g_autoptr(GHashTable) child = api_blkdebug_top(flat, layers, error); /* inv. 14 */
        if (o->format && strcmp(o->format, "blkdebug") == 0) {
            o->format = NULL; /* the child's driver */
        }
        return child && apply(child, o, path, how, error);
    }
    if (!from_image && driver && strcmp(driver, "copy-on-read") == 0) {
        g_autoptr(GHashTable) child = api_cor_filter_child(flat, error);
        if (o->format && strcmp(o->format, "copy-on-read") == 0) {
            o->format = NULL; /* the child's driver, or probed */
        }
        if (!child || !apply(child, o, path, how, error)) { /* open-opts.c inv. 2 */
            return FALSE;
        }
        if (o->read_only) { /* QEMU's filter needs a writable child */
            g_set_error(error, QIMG_ERROR, EACCES, "Block node is read-only");
            return FALSE;
        }
        o->copy_on_read = true;
        return TRUE;
    }
    bool nbd_top = !from_image && driver && strcmp(driver, "nbd") == 0;
    bool ssh_top = !from_image && driver && strcmp(driver, "ssh") == 0;
    /* invariant 12: the null node is the image */
    bool null_top = !from_image && driver &&
                    (strcmp(driver, "null-co") == 0 || strcmp(driver, "null-aio") == 0);
    if (driver && !is_format(driver) && !nbd_top && !ssh_top && !null_top) {
        g_set_error(error, QIMG_ERROR, ENOENT, "Unknown driver '%s'", driver);
        return FALSE;
    }
    if ((v = g_hash_table_lookup(flat, "file")) && has_key_under(flat, "file.")) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Cannot reference an existing block device with additional "
                    "options or a new filename"); /* invariant 5 */
        return FALSE;
    }
    if (v) {
        g_set_error(error, QIMG_ERROR, ENODEV,
                    "Cannot find device='%s' nor node-name='%s'", v, v);
        return FALSE;
    }
    if (from_image && !backing_driver_ok(fdrv, "file", NULL, error)) {
        return FALSE;
    }
    g_autofree char *nbd_uri = NULL; /* invariant 9 */
    if (nbd_top || (!from_image && fdrv && strcmp(fdrv, "nbd") == 0)) {
        if (!api_json_nbd(flat, nbd_top ? "" : "file.", &nbd_uri, o, error)) {
            return FALSE;
        }
        file = nbd_uri;
        fdrv = NULL;
    }
    g_autofree char *ssh_uri = NULL; /* invariant 18 */
    if (ssh_top || (!from_image && fdrv && strcmp(fdrv, "ssh") == 0)) {
        if (!api_ssh_options(flat, ssh_top ? "" : "file.", &ssh_uri, o, error)) {
            return FALSE;
        }
        file = ssh_uri;
        fdrv = NULL;
    }
    g_autofree char *dbg_name = NULL; /* invariant 13 */
    if (!from_image && fdrv && strcmp(fdrv, "blkdebug") == 0) {
        if (!api_blkdebug_options(flat, "file.", layers ? layers->json_typed : NULL,
                                  &dbg_name, layers ? &layers->file_qemu_name : NULL,
                                  error)) {
            return FALSE;
        }
        file = dbg_name;
        fdrv = NULL;
    }
    if (!from_image && layers && fdrv && driver && is_format(fdrv) && is_format(driver)) {
        return format_over_format(flat, driver, o, path, how, error); /* inv. 15 */
    }
    if (fdrv && strcmp(fdrv, "file") != 0) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "qimg opens images only through the file protocol (file.driver '%s')",
                    fdrv);
        return FALSE;
    }
    bool by_filename = !file && !from_image; /* the top-level "filename" names it */
    if (by_filename) {
        file = g_hash_table_lookup(flat, "filename");
    }
    if (null_top && !file) { /* invariant 12 */
        file = strcmp(driver, "null-co") == 0 ? "null-co://" : "null-aio://";
    }
    if (!file && !how->file_optional) { /* json-flat.c invariant 3 */
        g_set_error(error, QIMG_ERROR, EINVAL, "%s",
                    driver ? "A block device must be specified for \"file\""
                           : "Must specify either driver or file");
        return FALSE;
    }
    if (!api_json_keys(flat, how, driver, file, by_filename, bsub, dsub, o, error)) {
        return FALSE; /* json-opts.c */
    }
    if (driver) {
        o->format = g_intern_string(driver);
    }
    if (layers &&
        !apply_layers(bsub, dsub, caller_no_backing, driver, o, layers, error)) {
        return FALSE;
    }
    *path = g_strdup(file);
    return TRUE;
}

gboolean api_json_child(GHashTable *flat, BlkOpenOptions *o, char **path, GError **error)
{
    const ApiApplyHow plain = {0};

    return apply(flat, o, path, &plain, error);
}

static GHashTable *flat_new(void)
{
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}

gboolean api_json_name(const char *name, BlkOpenOptions *o, char **path,
                       ApiOpenLayers *layers, GError **error)
{
    g_autoptr(GHashTable) flat = flat_new();

    const ApiApplyHow how = {.layers = layers, .defer = &layers->format_opts};

    if (!layers->json_typed) {
        layers->json_typed = flat_new();
    }
    return api_json_flat(name, flat, layers->json_typed, error) &&
           apply(flat, o, path, &how, error);
}

gboolean api_json_backing_name(const char *name, BlkOpenOptions *o, char **path,
                               GError **error)
{
    g_autoptr(GHashTable) flat = flat_new();

    const ApiApplyHow how = {.from_image = true};

    return api_json_flat(name, flat, NULL, error) && apply(flat, o, path, &how, error);
}

gboolean api_image_opts_name(const char *opts, BlkOpenOptions *o, char **path,
                             ApiOpenLayers *layers, GError **error)
{
    g_autoptr(GHashTable) flat = flat_new();

    const ApiApplyHow how = {.layers = layers, .defer = &layers->format_opts};

    return api_opts_list_parse(opts, flat, error) && apply(flat, o, path, &how, error);
}

gboolean api_options_name(const char *name, const char *options, BlkOpenOptions *o,
                          char **path, ApiOpenLayers *layers, GError **error)
{
    g_autoptr(GHashTable) flat = flat_new();
    g_autoptr(GHashTable) from_name = flat_new();
    GHashTableIter it;
    gpointer k, v;

    if (!api_opts_list_parse(options, flat, error)) {
        return FALSE;
    }
    /* invariant 7: the options win over a json: name's */
    if (name && g_str_has_prefix(name, "json:")) {
        g_autoptr(GHashTable) typed = flat_new();
        if (!api_json_flat(name, from_name, typed, error)) {
            return FALSE;
        }
        if (!layers->json_typed) {
            layers->json_typed = flat_new();
        }
        g_hash_table_iter_init(&it, from_name);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            if (!g_hash_table_contains(flat, k)) {
                const char *t = g_hash_table_lookup(typed, k);
                g_hash_table_insert(flat, g_strdup(k), g_strdup(v));
                if (t) { /* an option given beside it is a string */
                    g_hash_table_insert(layers->json_typed, g_strdup(k), g_strdup(t));
                }
            }
        }
    } else if (name) {
        if (g_hash_table_contains(flat, "file.filename") ||
            g_hash_table_contains(flat, "file")) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Can't specify 'file' and 'filename' options at the same time");
            return FALSE;
        }
        /* a "filename" of the options is then an option of the format's,
         * which QEMU's formats do not have (json-opts.c invariant 3 for a probed one) */
        g_hash_table_insert(flat, g_strdup("file.filename"), g_strdup(name));
    }
    if (!g_hash_table_contains(flat, "driver") && o->format) {
        g_hash_table_insert(flat, g_strdup("driver"), g_strdup(o->format));
    }
    const ApiApplyHow how = {.layers = layers, .defer = &layers->format_opts};

    return apply(flat, o, path, &how, error);
}
