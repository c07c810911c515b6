/*
 * api/json-name.c: QEMU's "json:{...}" pseudo-filenames (and the same
 * options as key=value pairs, qemu-img's --image-opts) for the caller's own
 * image name: the image file, its format and the runtime options qimg
 * honours, as QEMU reads them.
 *
 * Owns: parsing and flattening the options (nested objects become dotted
 * keys, as QEMU's qdict_flatten) and mapping them onto BlkOpenOptions.
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
 *  2. Every key is honoured or refused: an unknown key is QEMU's "Block
 *     format 'FMT' does not support the option 'KEY'"; an option QEMU has
 *     and qimg cannot honour (another protocol, a node reference, a
 *     backing or data file given by options where invariant 5 does not
 *     take them) is refused with a message naming it.  Nothing is accepted and ignored.
 *  3. Values are QEMU's: strings, numbers, JSON booleans or "on"/"off";
 *     a bad one is "Parameter 'KEY' expects ...".
 *  4. qcow2's encrypt.key-secret is kept for the qcow2 driver, which
 *     refuses it on an encrypted image opened for its data (qimg has no
 *     encryption; qcow2.c invariant 10) and, as QEMU, does not look it up
 *     otherwise; the image is then named as QEMU names it (qimg info).
 *  5. A caller's "backing" and "data-file" options (objects, or dotted
 *     keys) name the layer opened instead of the one the image names:
 *     the backing file with its own format and runtime options (read as
 *     a caller's name, one level: no backing or data file of its own by
 *     options), the data file as a plain file (driver file, or raw over
 *     file).  A string is a node reference, which qimg has none of: QEMU's
 *     "Cannot find device=..." message.  When the caller opens without the
 *     backing chain (qemu-img info), backing options are QEMU's "does not
 *     support the option" (naming backing.driver, else
 *     backing.file.filename, else the first key, as qemu-img does for the
 *     usual forms).  A backing name from an image takes neither (the
 *     refusal of invariant 2).
 *  6. A Ceph RBD image is named by its fields -- "driver": "rbd" for the
 *     RBD node itself, "file": {"driver": "rbd", ...} under raw or qcow2
 *     -- pool and image (QEMU's "Parameter 'pool' is missing"), namespace,
 *     snapshot, conf and user; QEMU's other RBD options (key-secret,
 *     auth-client-required, server, encrypt, password-secret) are refused
 *     by name, an unknown one is QEMU's "Parameter 'K' is unexpected".
 *     The location goes to the open in layers->rbd (o->rbd) with its
 *     "rbd:" name as the path; only the caller's own name and its layers
 *     object take it (invariant 1: never a backing name from an image).
 */
#include "api/api.h"

#include <errno.h>
#include <json-glib/json-glib.h>
#include <stdlib.h>
#include <string.h>

/* Flatten obj into flat (key -> string; JSON null -> ""), prefix "a.b.". */
static gboolean flatten(JsonObject *obj, const char *prefix, GHashTable *flat,
                        GError **error)
{
    g_autoptr(GList) members = json_object_get_members(obj);

    for (GList *l = members; l; l = l->next) {
        const char *k = l->data;
        JsonNode *v = json_object_get_member(obj, k);
        g_autofree char *key = g_strconcat(prefix, k, NULL);

        switch (json_node_get_node_type(v)) {
        case JSON_NODE_OBJECT: {
            g_autofree char *p = g_strconcat(key, ".", NULL);
            if (!flatten(json_node_get_object(v), p, flat, error)) {
                return FALSE;
            }
            break;
        }
        case JSON_NODE_NULL:
            g_hash_table_insert(flat, g_steal_pointer(&key), g_strdup(""));
            break;
        case JSON_NODE_ARRAY:
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Option '%s': lists are not supported by qimg", key);
            return FALSE;
        case JSON_NODE_VALUE:
            if (json_node_get_value_type(v) == G_TYPE_BOOLEAN) {
                g_hash_table_insert(flat, g_steal_pointer(&key),
                                    g_strdup(json_node_get_boolean(v) ? "on" : "off"));
            } else if (json_node_get_value_type(v) == G_TYPE_STRING) {
                g_hash_table_insert(flat, g_steal_pointer(&key),
                                    g_strdup(json_node_get_string(v)));
            } else if (json_node_get_value_type(v) == G_TYPE_INT64) {
                g_hash_table_insert(
                    flat, g_steal_pointer(&key),
                    g_strdup_printf("%" G_GINT64_FORMAT, json_node_get_int(v)));
            } else {
                g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' expects a number",
                            key);
                return FALSE;
            }
            break;
        }
    }
    return TRUE;
}

static gboolean parse_bool(const char *key, const char *v, bool *out, GError **error)
{
    if (strcmp(v, "on") == 0 || strcmp(v, "true") == 0) {
        *out = true;
    } else if (strcmp(v, "off") == 0 || strcmp(v, "false") == 0) {
        *out = false;
    } else {
        g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' expects 'on' or 'off'",
                    key);
        return FALSE;
    }
    return TRUE;
}

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
    blk_rbd_location_clear(&l->rbd);
}

/* Invariant 6: the RBD fields under prefix ("" or "file.") leave flat for
 * loc; the options any node takes (read-only, cache.*) stay for apply(). */
static gboolean rbd_fields(GHashTable *flat, const char *prefix, BlkRbdLocation *loc,
                           GError **error)
{
    static const struct {
        const char *name, *why;
    } refused[] = {
        {"key-secret", "keys and authentication come from the Ceph configuration"},
        {"auth-client-required",
         "keys and authentication come from the Ceph configuration"},
        {"password-secret", "keys and authentication come from the Ceph configuration"},
        {"server", "the monitors come from the Ceph configuration (or mon_host in an "
                   "rbd: name)"},
        {"encrypt", "qimg has no encryption"},
    };
    /* copies: fields leave flat while the list is walked */
    GList *table_keys = g_hash_table_get_keys(flat);
    GList *keys = NULL;
    gboolean ok = FALSE;

    for (GList *l = table_keys; l; l = l->next) {
        keys = g_list_prepend(keys, g_strdup(l->data));
    }
    keys = g_list_sort(keys, (GCompareFunc)strcmp);
    g_list_free(table_keys);
    const char *unexpected = NULL, *unsupported = NULL, *why = NULL;
    size_t plen = strlen(prefix);

    memset(loc, 0, sizeof(*loc));
    for (GList *l = keys; l; l = l->next) {
        const char *key = l->data, *f = key + plen;
        char **slot = NULL;
        if (!g_str_has_prefix(key, prefix) || strcmp(f, "driver") == 0 ||
            strcmp(f, "read-only") == 0 || g_str_has_prefix(f, "cache.")) {
            continue; /* another node's, or apply()'s */
        }
        if (!*prefix &&
            (strcmp(key, "file") == 0 || g_str_has_prefix(key, "file.") ||
             g_str_has_prefix(key, "backing") || g_str_has_prefix(key, "data-file"))) {
            continue; /* apply() refuses them under the rbd driver */
        }
        slot = strcmp(f, "pool") == 0        ? &loc->pool
               : strcmp(f, "image") == 0     ? &loc->image
               : strcmp(f, "namespace") == 0 ? &loc->namespace
               : strcmp(f, "snapshot") == 0  ? &loc->snapshot
               : strcmp(f, "conf") == 0      ? &loc->conf
               : strcmp(f, "user") == 0      ? &loc->user
                                             : NULL;
        if (slot) {
            *slot = g_strdup(g_hash_table_lookup(flat, key));
            g_hash_table_remove(flat, key);
            continue;
        }
        for (size_t i = 0; i < G_N_ELEMENTS(refused) && !unsupported; i++) {
            size_t n = strlen(refused[i].name);
            if (strncmp(f, refused[i].name, n) == 0 && (f[n] == '\0' || f[n] == '.')) {
                unsupported = refused[i].name;
                why = refused[i].why;
            }
        }
        if (!unsupported && !unexpected) {
            unexpected = f;
        }
    }
    if (!loc->pool || !loc->image) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' is missing",
                    loc->pool ? "image" : "pool");
    } else if (unsupported) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "The RBD option '%s' is not supported by qimg: %s", unsupported, why);
    } else if (unexpected) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' is unexpected",
                    unexpected);
    } else {
        g_autofree char *drv = g_strconcat(prefix, "driver", NULL);
        g_hash_table_remove(flat, drv);
        ok = TRUE;
    }
    g_list_free_full(keys, g_free);
    if (!ok) {
        blk_rbd_location_clear(loc);
    }
    return ok;
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

/* Invariant 4: the data-file options (prefix dropped) onto *path. */
static gboolean data_file_option(GHashTable *sub, char **path, GError **error)
{
    const char *drv = g_hash_table_lookup(sub, "driver");
    const char *fdrv = g_hash_table_lookup(sub, "file.driver");
    const char *file = g_hash_table_lookup(sub, "file.filename");
    const char *name = g_hash_table_lookup(sub, "filename");
    GHashTableIter it;
    gpointer k;

    g_hash_table_iter_init(&it, sub);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        if (strcmp(k, "driver") != 0 && strcmp(k, "file.driver") != 0 &&
            strcmp(k, "file.filename") != 0 && strcmp(k, "filename") != 0) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "Option 'data-file.%s' is not supported by qimg", (char *)k);
            return FALSE;
        }
    }
    if ((drv && strcmp(drv, "file") != 0 && strcmp(drv, "raw") != 0) ||
        (fdrv && strcmp(fdrv, "file") != 0)) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "qimg opens a data file only as a plain file: driver '%s' refused",
                    fdrv && strcmp(fdrv, "file") != 0 ? fdrv : drv);
        return FALSE;
    }
    if (drv && strcmp(drv, "raw") == 0) {
        if (!file) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "A block device must be specified for \"file\"");
            return FALSE;
        }
        name = file;
    } else if (file || fdrv) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Block protocol 'file' does not support the option '%s'",
                    file ? "file.filename" : "file.driver");
        return FALSE;
    }
    if (!name || !*name) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "The 'file' block driver requires a file name");
        return FALSE;
    }
    *path = g_strdup(name);
    return TRUE;
}

static gboolean apply(GHashTable *flat, BlkOpenOptions *o, char **path, bool from_image,
                      ApiOpenLayers *layers, GError **error);

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
    if (g_hash_table_size(bsub)) {
        layers->backing = *o;
        layers->backing.format = NULL;
        layers->backing.no_backing = false;
        if (!apply(bsub, &layers->backing, &layers->backing_path, false, NULL, &local)) {
            g_set_error(error, QIMG_ERROR, local->code, "Could not open backing file: %s",
                        local->message);
            return FALSE;
        }
        o->backing_path = layers->backing_path;
        o->backing_opts = &layers->backing;
    }
    if (g_hash_table_size(dsub)) {
        if (!data_file_option(dsub, &layers->data_file_path, error)) {
            return FALSE;
        }
        o->data_file_path = layers->data_file_path;
    }
    return TRUE;
}

/* Invariant 6: an RBD image, the node itself ("driver": "rbd") or under a
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
    if (!rbd_fields(flat, node ? "" : "file.", &layers->rbd, error)) {
        return FALSE;
    }
    if (node) {
        g_hash_table_remove(flat, "driver");
    }
    /* the options left are the format's and the node's (read-only, cache) */
    g_hash_table_insert(flat, g_strdup("file.filename"), g_strdup("rbd"));
    if (!apply(flat, o, &unused, false, NULL, error)) {
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

/* Invariants 1-4: flat onto *o and *path; from_image: a backing name
 * (o->format: the image's backing format, or NULL); layers: where the
 * backing and data-file options go (NULL: refused). */
static gboolean apply(GHashTable *flat, BlkOpenOptions *o, char **path, bool from_image,
                      ApiOpenLayers *layers, GError **error)
{
    g_autoptr(GHashTable) bsub =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GHashTable) dsub =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    bool caller_no_backing = o->no_backing;
    const char *driver = g_hash_table_lookup(flat, "driver");
    const char *file = g_hash_table_lookup(flat, "file.filename");
    const char *fdrv = g_hash_table_lookup(flat, "file.driver");
    const char *v;
    bool direct = o->cache == BLK_CACHE_NONE || o->cache == BLK_CACHE_DIRECTSYNC;
    bool no_flush = o->cache == BLK_CACHE_UNSAFE, cache_set = false;
    GHashTableIter it;
    gpointer k, val;

    if (from_image && o->format) {
        driver = o->format; /* invariant 1: the image's backing format */
    } else if (from_image && !backing_driver_ok(driver, "qcow2", "raw", error)) {
        return FALSE;
    }
    if (!from_image && layers &&
        ((driver && strcmp(driver, "rbd") == 0) || (fdrv && strcmp(fdrv, "rbd") == 0))) {
        return apply_rbd(flat, o, path, layers, error); /* invariant 6 */
    }
    if (driver && strcmp(driver, "qcow2") != 0 && strcmp(driver, "raw") != 0) {
        g_set_error(error, QIMG_ERROR, ENOENT, "Unknown driver '%s'", driver);
        return FALSE;
    }
    if ((v = g_hash_table_lookup(flat, "file")) && !file) {
        g_set_error(error, QIMG_ERROR, ENODEV,
                    "Cannot find device='%s' nor node-name='%s'", v, v);
        return FALSE;
    }
    if (from_image && !backing_driver_ok(fdrv, "file", NULL, error)) {
        return FALSE;
    }
    if (fdrv && strcmp(fdrv, "file") != 0) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "qimg opens images only through the file protocol (file.driver '%s')",
                    fdrv);
        return FALSE;
    }
    if (!file && !from_image) {
        file = g_hash_table_lookup(flat, "filename");
    }
    if (!file) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "A block device must be specified for \"file\"");
        return FALSE;
    }
    g_hash_table_iter_init(&it, flat);
    while (g_hash_table_iter_next(&it, &k, &val)) {
        const char *key = k, *value = val;
        if (strcmp(key, "driver") == 0 || strcmp(key, "file.filename") == 0 ||
            strcmp(key, "file.driver") == 0 || strcmp(key, "file") == 0 ||
            (strcmp(key, "filename") == 0 && !from_image)) {
            continue;
        }
        if (strcmp(key, "read-only") == 0) {
            bool ro;
            if (!parse_bool(key, value, &ro, error)) {
                return FALSE;
            }
            o->read_only = o->read_only || ro;
        } else if (strcmp(key, "cache.direct") == 0 ||
                   strcmp(key, "file.cache.direct") == 0) {
            if (!parse_bool(key, value, &direct, error)) {
                return FALSE;
            }
            cache_set = true;
        } else if (strcmp(key, "cache.no-flush") == 0 ||
                   strcmp(key, "file.cache.no-flush") == 0) {
            if (!parse_bool(key, value, &no_flush, error)) {
                return FALSE;
            }
            cache_set = true;
        } else if (strcmp(key, "backing") == 0 && !*value) {
            o->no_backing = true;                           /* "backing": null */
        } else if (layers && strcmp(key, "backing") == 0) { /* invariant 5 */
            if (caller_no_backing) {
                g_set_error(error, QIMG_ERROR, EINVAL,
                            "Block format '%s' does not support the option 'backing'",
                            driver ? driver : "raw");
            } else {
                g_set_error(error, QIMG_ERROR, ENODEV,
                            "Could not open backing file: Cannot find device='%s' nor "
                            "node-name='%s'",
                            value, value);
            }
            return FALSE;
        } else if (layers && strcmp(key, "data-file") == 0) {
            g_set_error(error, QIMG_ERROR, ENODEV,
                        "Cannot find device='%s' nor node-name='%s'", value, value);
            return FALSE;
        } else if (layers && (g_str_has_prefix(key, "backing.") ||
                              g_str_has_prefix(key, "data-file."))) {
            bool b = key[0] == 'b';
            g_hash_table_insert(b ? bsub : dsub,
                                g_strdup(key + strlen(b ? "backing." : "data-file.")),
                                g_strdup(value));
        } else if (strcmp(key, "backing") == 0 || g_str_has_prefix(key, "backing.") ||
                   strcmp(key, "data-file") == 0 || g_str_has_prefix(key, "data-file.")) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "qimg takes the backing and data files from the image, not from "
                        "options ('%s')",
                        key);
            return FALSE;
        } else if (driver && strcmp(driver, "qcow2") == 0 &&
                   strcmp(key, "encrypt.key-secret") == 0) {
            o->key_secret = g_intern_string(value); /* qcow2.c invariant 10 */
        } else if (driver && strcmp(driver, "qcow2") == 0 &&
                   (strcmp(key, "cache-size") == 0 ||
                    strcmp(key, "l2-cache-size") == 0)) {
            char *end = NULL;
            guint64 n = g_ascii_strtoull(value, &end, 10);
            if (!*value || *end) {
                g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' expects a size",
                            key);
                return FALSE;
            }
            o->metadata_cache_size = n;
        } else {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Block format '%s' does not support the option '%s'",
                        driver ? driver : "raw", key);
            return FALSE;
        }
    }
    if (cache_set && direct && no_flush) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "cache.direct=on with cache.no-flush=on is not supported by qimg");
        return FALSE;
    }
    if (cache_set) {
        o->cache = direct     ? BLK_CACHE_NONE
                   : no_flush ? BLK_CACHE_UNSAFE
                              : BLK_CACHE_WRITEBACK;
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

static gboolean json_name(const char *name, BlkOpenOptions *o, char **path,
                          bool from_image, ApiOpenLayers *layers, GError **error)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GHashTable) flat =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GError) err = NULL;
    JsonNode *root;

    if (!json_parser_load_from_data(parser, name + strlen("json:"), -1, &err)) {
        /* QEMU's words, json-glib's detail (QEMU's lexer words it its way) */
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not parse the JSON options: JSON parse error, %s",
                    err->message);
        return FALSE;
    }
    root = json_parser_get_root(parser);
    if (!root || json_node_get_node_type(root) != JSON_NODE_OBJECT) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Invalid JSON object given");
        return FALSE;
    }
    return flatten(json_node_get_object(root), "", flat, error) &&
           apply(flat, o, path, from_image, layers, error);
}

gboolean api_json_name(const char *name, BlkOpenOptions *o, char **path,
                       ApiOpenLayers *layers, GError **error)
{
    return json_name(name, o, path, false, layers, error);
}

gboolean api_json_backing_name(const char *name, BlkOpenOptions *o, char **path,
                               GError **error)
{
    return json_name(name, o, path, true, NULL, error);
}

gboolean api_image_opts_name(const char *opts, BlkOpenOptions *o, char **path,
                             ApiOpenLayers *layers, GError **error)
{
    g_autoptr(GHashTable) flat =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    GString *cur = g_string_new(NULL);
    gboolean ok = TRUE;

    /* key=value,... with ",," a literal comma (QemuOpts) */
    for (const char *p = opts;; p++) {
        if (*p == ',' && p[1] == ',') {
            g_string_append_c(cur, ',');
            p++;
            continue;
        }
        if (*p && *p != ',') {
            g_string_append_c(cur, *p);
            continue;
        }
        char *eq = strchr(cur->str, '=');
        if (!eq || eq == cur->str) {
            g_set_error(error, QIMG_ERROR, EINVAL, "Invalid parameter '%s'", cur->str);
            ok = FALSE;
            break;
        }
        g_hash_table_insert(flat, g_strndup(cur->str, (gsize)(eq - cur->str)),
                            g_strdup(eq + 1));
        g_string_truncate(cur, 0);
        if (!*p) {
            break;
        }
    }
    g_string_free(cur, TRUE);
    return ok && apply(flat, o, path, false, layers, error);
}
