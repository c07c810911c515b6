/*
 * api/json-blkdebug.c: QEMU's blkdebug node named by options, under a
 * format ("file": {"driver": "blkdebug", ...} in a json: name, or
 * file.driver=blkdebug in -o / --image-opts) as the fault node's
 * "blkdebug:RULES:FILE" name (block/faulty.c, block/protocol.c), or as
 * the image itself ("driver": "blkdebug"): over a format named by
 * image.driver, the fault node over that format (blk_open_faulty_over),
 * else over the file, read as raw.
 *
 * Owns: reading blkdebug's options -- config, image, inject-error and
 * set-state (lists, or one object), filename, the request limits -- into
 * the fault node's rules.
 *
 * Invariants (cited as "json-blkdebug.c invariant N"):
 *  1. Under a format the image under the node is a plain file: "image":
 *     {"driver": "file", "filename": F} (or image.filename), or a
 *     "filename" (QEMU's blkdebug_parse_filename: "blkdebug:CONFIG:F", or
 *     F itself).  An image by another driver is refused naming it; a
 *     string is a node reference, QEMU's "Cannot find device=... nor
 *     node-name=..."; without one, QEMU's 'A block device must be
 *     specified for "image"'.
 *  2. Rules come from the config file first, then the inject-error groups
 *     in list order, then the set-state groups (QEMU's read_config order);
 *     every key of a group is checked as the config file's are
 *     (faulty-config.c fact 2: "[inject-error] section doesn't support the
 *     option 'K'").
 *  3. The request limits (align, max-transfer, opt-/max-write-zero,
 *     opt-/max-discard: sizes, QEMU's suffixes) are the rule "limits,..."
 *     (faulty.c invariant 6 checks them).  The permission options are
 *     refused by name, an unknown key as QEMU's "Block protocol
 *     'blkdebug' doesn't support the option 'K'".  The node's cache.* and
 *     node-name stay for the caller (json-name.c), as a file's do.
 *  4. Only a caller's own name takes the node (json-name.c invariant 1:
 *     never a backing name read from an image).
 *  5. As the image itself, the node's image options (image.*) are the
 *     options of the layer below, its file named by "filename" when they
 *     name none (the name given beside options is the node's filename);
 *     with a format there (image.driver other than file) the node is the
 *     filter over that format's node, with the rules of invariant 2 and 3.
 *  6. Under a format, the node's name is QEMU's (blkdebug_refresh_filename):
 *     "blkdebug:CONFIG:FILE" (CONFIG the config option, or the first part
 *     of a "blkdebug:" filename, else empty) when its only options are
 *     config and the image; otherwise a json: name of the node's options,
 *     as QEMU prints its QDict (rbd-name.c invariant 5): driver, the
 *     options QEMU calls strong (config, inject-error.*, set-state.*, the
 *     request limits), flat, with the JSON types they were given in
 *     (json-flat.c invariant 2; given as options, strings), and "image":
 *     {"driver": "file", "filename": FILE}.  QEMU copies the node's
 *     options twice after it read them with their prefix ("file."), so
 *     two options in one bucket come out in the order of their prefixed
 *     keys' buckets (inject-error.0.errno before inject-error.0.event).  The format over
 * it is then named json:{"driver": FORMAT, "file": {...}} (api/image.c).
 *     As the image itself over a format or a protocol (invariant 5), the
 *     same rule names the node by its image (api/image.c, once the image
 *     is open): "blkdebug:CONFIG:IMAGE" when IMAGE, the image's QEMU name,
 *     is not a json: one, else the json: name with "image": the image's
 *     options (a json: name's object, a format's driver and file, a
 *     protocol's driver and filename, none for a bare "DRIVER://").  The
 *     config option keeps the JSON type it was given in both.
 */
#include "api/api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Invariant 3: QEMU's blkdebug options qimg's fault node does not have. */
static const char *const refused[] = {
    "take-child-perms",
    "unshare-child-perms",
};

/* Invariant 3: the request limits, as the rule "limits,...". */
static const char *const limit_keys[] = {
    "align",          "max-transfer", "opt-write-zero",
    "max-write-zero", "opt-discard",  "max-discard",
};

static gboolean is_limit(const char *key)
{
    for (size_t i = 0; i < G_N_ELEMENTS(limit_keys); i++) {
        if (strcmp(key, limit_keys[i]) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

/* Invariant 3: the limits of opts appended to out as one rule. */
static gboolean limits_rule(GHashTable *opts, GString *out, GError **error)
{
    g_autoptr(GString) rule = g_string_new("limits");

    for (size_t i = 0; i < G_N_ELEMENTS(limit_keys); i++) {
        const char *v = g_hash_table_lookup(opts, limit_keys[i]);
        uint64_t n;
        if (!v) {
            continue;
        }
        if (!api_parse_size(limit_keys[i], v, &n, error)) {
            return FALSE;
        }
        g_string_append_printf(rule, ",%s=%" G_GUINT64_FORMAT, limit_keys[i], n);
    }
    if (strchr(rule->str, ',')) {
        g_string_append_printf(out, "%s%s", out->len ? ";" : "", rule->str);
    }
    return TRUE;
}

/* "inject-error.N.K" (or "inject-error.K": one object) -> group "KIND N"
 * (index -1 for the object) and K; FALSE for any other key. */
static gboolean group_key(const char *key, const char *kind, gint64 *index,
                          const char **sub)
{
    size_t n = strlen(kind);
    char *end = NULL;

    if (strncmp(key, kind, n) != 0 || key[n] != '.') {
        return FALSE;
    }
    key += n + 1;
    if (g_ascii_isdigit(*key)) {
        *index = g_ascii_strtoll(key, &end, 10);
        if (*end == '.' && end[1]) {
            *sub = end + 1;
            return TRUE;
        }
    }
    *index = -1;
    *sub = key;
    return TRUE;
}

static gint cmp_index(gconstpointer a, gconstpointer b)
{
    gint64 x = *(const gint64 *)a, y = *(const gint64 *)b;
    return x < y ? -1 : x > y;
}

/* Invariant 2: the groups of kind in index order into kf. */
static void add_groups(GHashTable *opts, const char *kind, GKeyFile *kf)
{
    g_autoptr(GArray) idx = g_array_new(FALSE, FALSE, sizeof(gint64));
    g_autoptr(GHashTable) seen = g_hash_table_new(g_int64_hash, g_int64_equal);
    GHashTableIter it;
    gpointer k, v;
    gint64 i;
    const char *sub;

    g_hash_table_iter_init(&it, opts);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        if (group_key(k, kind, &i, &sub)) {
            g_array_append_val(idx, i);
        }
    }
    g_array_sort(idx, cmp_index);
    for (guint j = 0; j < idx->len; j++) {
        gint64 *p = &g_array_index(idx, gint64, j);
        if (g_hash_table_contains(seen, p)) {
            continue;
        }
        g_hash_table_add(seen, p);
        g_autofree char *group = g_strdup_printf("%s %u", kind, j);
        g_hash_table_iter_init(&it, opts);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            if (group_key(k, kind, &i, &sub) && i == *p) {
                g_key_file_set_value(kf, group, sub, v);
            }
        }
    }
}

/* QEMU's blkdebug_parse_filename: "blkdebug:RULES:FILE" as *rules (g_free)
 * and *file (in name), any other name as *file. */
static gboolean split_name(const char *name, char **rules, const char **file,
                           GError **error)
{
    const char *p = name + strlen("blkdebug:"), *colon;

    *file = name;
    if (!g_str_has_prefix(name, "blkdebug:")) {
        return TRUE;
    }
    if (!(colon = strchr(p, ':'))) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not open '%s': expected blkdebug:CONFIG:FILE", name);
        return FALSE;
    }
    *rules = g_strndup(p, (gsize)(colon - p));
    *file = colon + 1;
    return TRUE;
}

/* Invariant 1: the image file, from the image options (prefix dropped)
 * and filename. */
static gboolean image_file(GHashTable *image, const char *filename, char **file,
                           char **name_rules, GError **error)
{
    const char *drv = g_hash_table_lookup(image, "driver");
    const char *ref = g_hash_table_lookup(image, "");
    GHashTableIter it;
    gpointer k;

    if (ref) {
        g_set_error(error, QIMG_ERROR, ENODEV,
                    "Cannot find device='%s' nor node-name='%s'", ref, ref);
        return FALSE;
    }
    if (drv && strcmp(drv, "file") != 0) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "qimg's blkdebug node opens its image only as a plain file: "
                    "image.driver '%s' refused",
                    drv);
        return FALSE;
    }
    g_hash_table_iter_init(&it, image);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        if (strcmp(k, "driver") != 0 && strcmp(k, "filename") != 0) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "The blkdebug option 'image.%s' is not supported by qimg",
                        (char *)k);
            return FALSE;
        }
    }
    if (g_hash_table_size(image) && filename) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "blkdebug: 'image' and 'filename' name the image twice");
        return FALSE;
    }
    if (filename && !split_name(filename, name_rules, &filename, error)) {
        return FALSE;
    }
    const char *f = filename ? filename : g_hash_table_lookup(image, "filename");
    if (!f) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "A block device must be specified for \"image\"");
        return FALSE;
    }
    *file = g_strdup(f);
    return TRUE;
}

/* The rules of a config file (or of a "blkdebug:RULES:" name's RULES, which
 * may be qimg's own), appended to out. */
static gboolean config_rules(const char *config, GString *out, GError **error)
{
    g_autofree char *rules = NULL;
    int ret;

    if (!*config) {
        return TRUE;
    }
    if (strchr(config, '=') || strcmp(config, "once") == 0) {
        rules = g_strdup(config); /* qimg's rules (faulty.c) */
    } else if ((ret = blk_faulty_config_rules(config, &rules)) < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    if (*rules) {
        g_string_append_printf(out, "%s%s", out->len ? ";" : "", rules);
    }
    return TRUE;
}

/* The node's own options under prefix taken out of flat into opts, its
 * image.* options (prefix and "image." dropped) into image; the generic
 * options of a node (read-only, ...) stay for the top node's layer. */
static void take_options(GHashTable *flat, const char *prefix, GHashTable *opts,
                         GHashTable *image)
{
    g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func(g_free);
    size_t plen = strlen(prefix);
    GHashTableIter it;
    gpointer k, v;

    /* the node's own keys leave flat (invariant 3: not cache.*, node-name) */
    g_hash_table_iter_init(&it, flat);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        g_ptr_array_add(keys, g_strdup(k));
    }
    for (guint n = 0; n < keys->len; n++) {
        const char *key = keys->pdata[n], *f = key + plen;
        if (!g_str_has_prefix(key, prefix) || strcmp(f, "driver") == 0 ||
            strcmp(f, "node-name") == 0 || g_str_has_prefix(f, "cache.") ||
            (!*prefix && api_node_option(f))) {
            continue;
        }
        g_hash_table_steal_extended(flat, key, &k, &v);
        if (strcmp(f, "image") == 0 || g_str_has_prefix(f, "image.")) {
            g_hash_table_insert(image, g_strdup(f[5] ? f + 6 : ""), v);
        } else {
            g_hash_table_insert(opts, g_strdup(f), v);
        }
        g_free(k);
    }
}

/* Invariants 2 and 3: the rules of the node's options (name_rules: those
 * of a "blkdebug:RULES:" filename), every key checked. */
static gboolean node_rules(GHashTable *opts, const char *name_rules, char **out,
                           GError **error)
{
    g_autoptr(GKeyFile) kf = g_key_file_new();
    g_autoptr(GString) rules = g_string_new(NULL);
    g_autofree char *groups = NULL;
    gint64 i;
    const char *sub;

    g_autoptr(GList) own = g_list_sort(g_hash_table_get_keys(opts), (GCompareFunc)strcmp);
    for (GList *l = own; l; l = l->next) {
        const char *f = l->data;
        if (strcmp(f, "config") == 0 || strcmp(f, "filename") == 0 || is_limit(f) ||
            group_key(f, "inject-error", &i, &sub) ||
            group_key(f, "set-state", &i, &sub)) {
            continue;
        }
        for (size_t j = 0; j < G_N_ELEMENTS(refused); j++) {
            size_t n = strlen(refused[j]);
            if (strncmp(f, refused[j], n) == 0 && (!f[n] || f[n] == '.')) { /* a list */
                g_set_error(error, QIMG_ERROR, ENOTSUP,
                            "The blkdebug option '%s' is not supported by qimg",
                            refused[j]);
                return FALSE;
            }
        }
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Block protocol 'blkdebug' doesn't support the option '%s'", f);
        return FALSE;
    }
    if (!limits_rule(opts, rules, error) ||
        (name_rules && !config_rules(name_rules, rules, error)) ||
        (g_hash_table_contains(opts, "config") &&
         !config_rules(g_hash_table_lookup(opts, "config"), rules, error))) {
        return FALSE;
    }
    add_groups(opts, "inject-error", kf);
    add_groups(opts, "set-state", kf);
    int ret = blk_faulty_groups_rules(kf, true, &groups);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    if (*groups) {
        g_string_append_printf(rules, "%s%s", rules->len ? ";" : "", groups);
    }
    *out = g_string_free(g_steal_pointer(&rules), FALSE);
    return TRUE;
}

/* A JSON string of s. */
static char *json_str(const char *s)
{
    GString *out = g_string_new(NULL);

    blk_json_append_string(out, s);
    return g_string_free(out, FALSE);
}

/* Invariant 6: the order QEMU puts the strong options in its name's QDict:
 * by the bucket of their prefixed key, the last first. */
static gint put_order_cmp(gconstpointer a, gconstpointer b, gpointer prefix)
{
    g_autofree char *x = g_strconcat(prefix, *(const char *const *)a, NULL);
    g_autofree char *y = g_strconcat(prefix, *(const char *const *)b, NULL);
    unsigned bx = blk_qdict_bucket(x), by = blk_qdict_bucket(y);

    return bx != by ? (bx > by ? -1 : 1) : strcmp(x, y);
}

void api_blkdebug_name_free(ApiBlkdebugName *n)
{
    if (n) {
        g_free(n->config);
        g_ptr_array_unref(n->keys);
        g_ptr_array_unref(n->vals);
        g_free(n);
    }
}

/* Invariant 6: QEMU's name of the node but its image, its own options in
 * opts (prefix dropped; typed by the full key), config the config file
 * (or ""), given_config whether the config option gave it (its JSON type
 * is then the one given). */
static ApiBlkdebugName *name_members(GHashTable *opts, const char *prefix,
                                     GHashTable *typed, const char *config,
                                     bool given_config)
{
    ApiBlkdebugName *n = g_new0(ApiBlkdebugName, 1);
    g_autoptr(GPtrArray) own = g_ptr_array_new();
    GHashTableIter it;
    gpointer key;
    gint64 i;
    const char *sub;

    n->config = g_strdup(config);
    n->keys = g_ptr_array_new_with_free_func(g_free);
    n->vals = g_ptr_array_new_with_free_func(g_free);
    g_ptr_array_add(n->keys, g_strdup("driver"));
    g_ptr_array_add(n->vals, json_str("blkdebug"));
    if (*config) {
        g_autofree char *full = g_strconcat(prefix, "config", NULL);
        const char *t = given_config && typed ? g_hash_table_lookup(typed, full) : NULL;
        g_ptr_array_add(n->keys, g_strdup("config"));
        g_ptr_array_add(n->vals, t ? g_strdup(t) : json_str(config));
    }
    g_hash_table_iter_init(&it, opts);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        if (is_limit(key) || group_key(key, "inject-error", &i, &sub) ||
            group_key(key, "set-state", &i, &sub)) {
            g_ptr_array_add(own, key);
        }
    }
    g_ptr_array_sort_with_data(own, put_order_cmp, (gpointer)prefix);
    for (guint k = 0; k < own->len; k++) {
        const char *o = own->pdata[k];
        g_autofree char *full = g_strconcat(prefix, o, NULL);
        const char *t = typed ? g_hash_table_lookup(typed, full) : NULL;
        g_ptr_array_add(n->keys, g_strdup(o));
        g_ptr_array_add(n->vals,
                        t ? g_strdup(t) : json_str(g_hash_table_lookup(opts, o)));
    }
    n->strong = own->len > 0;
    return n;
}

/* Invariant 6: QEMU's name of the node n describes over its image, named
 * child (NULL: a name QEMU does not have, a json: one), its options the
 * JSON object image. */
static char *name_with_image(const ApiBlkdebugName *n, const char *child,
                             const char *image)
{
    g_autoptr(GPtrArray) keys = g_ptr_array_copy(n->keys, NULL, NULL);
    g_autoptr(GPtrArray) vals = g_ptr_array_copy(n->vals, NULL, NULL);

    g_ptr_array_set_free_func(keys, NULL); /* n's strings, borrowed */
    g_ptr_array_set_free_func(vals, NULL);
    if (!n->strong && child) {
        return g_strdup_printf("blkdebug:%s:%s", n->config, child);
    }
    g_ptr_array_add(keys, "image");
    g_ptr_array_add(vals, (gpointer)image);
    g_autofree char *obj = blk_qdict_json_object(
        keys->len, (const char *const *)keys->pdata, (const char *const *)vals->pdata);
    return g_strconcat("json:", obj, NULL);
}

/* Invariant 6: the options of node as QEMU prints them in a json: name
 * (a JSON object): a json: name's own, a format's driver and file, a
 * protocol's driver and filename (none when the name is the protocol's
 * bare "DRIVER://", as null-co's). */
static char *node_json(const BlkNode *node)
{
    const char *name = blk_node_name(node);
    const char *drv = node->drv->format_name;

    if (g_str_has_prefix(name, "json:")) {
        return g_strdup(name + strlen("json:"));
    }
    if (node->file) {
        g_autofree char *file = node_json(node->file);
        g_autofree char *file_name = g_strconcat("json:", file, NULL);
        g_autofree char *fmt = api_qemu_format_name(drv, file_name);
        return g_strdup(fmt + strlen("json:"));
    }
    g_autofree char *bare = g_strconcat(drv, "://", NULL);
    g_autofree char *jdrv = json_str(drv);
    g_autofree char *jname = json_str(name);
    const char *keys[] = {"driver", "filename"};
    const char *vals[] = {jdrv, strcmp(name, bare) == 0 ? NULL : jname};
    return blk_qdict_json_object(2, keys, vals);
}

char *api_blkdebug_top_name(const ApiBlkdebugName *n, const BlkNode *child)
{
    const char *name = blk_node_name(child);
    g_autofree char *image = node_json(child);

    return name_with_image(n, g_str_has_prefix(name, "json:") ? NULL : name, image);
}

gboolean api_blkdebug_options(GHashTable *flat, const char *prefix, GHashTable *typed,
                              char **name, char **qemu_name, GError **error)
{
    g_autoptr(GHashTable) opts =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GHashTable) image =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autofree char *file = NULL, *name_rules = NULL, *rules = NULL;

    take_options(flat, prefix, opts, image);
    /* QEMU looks for the image before it checks the other keys */
    if (!image_file(image, g_hash_table_lookup(opts, "filename"), &file, &name_rules,
                    error) ||
        !node_rules(opts, name_rules, &rules, error)) {
        return FALSE;
    }
    *name = g_strdup_printf("blkdebug:%s:%s", rules, file);
    if (qemu_name) {
        const char *config = g_hash_table_lookup(opts, "config");
        ApiBlkdebugName *n = name_members(opts, prefix, typed,
                                          config       ? config
                                          : name_rules ? name_rules
                                                       : "",
                                          config != NULL);
        g_autofree char *jfile = json_str(file);
        const char *ikeys[] = {"driver", "filename"};
        const char *ivals[] = {"\"file\"", jfile};
        g_autofree char *ijson = blk_qdict_json_object(2, ikeys, ivals);
        g_free(*qemu_name);
        *qemu_name = name_with_image(n, file, ijson);
        api_blkdebug_name_free(n);
    }
    return TRUE;
}

/* Invariant 5: the node over a format: its options out of flat, the
 * format layer's options (the node's filename as the image's file when
 * the image names none) into image, its name but the image's into *name
 * (invariant 6, typed as json-flat.c invariant 2 says). */
static gboolean over_format(GHashTable *flat, GHashTable *image, GHashTable *typed,
                            char **rules, ApiBlkdebugName **name, GError **error)
{
    g_autoptr(GHashTable) opts =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autofree char *name_rules = NULL;
    const char *v, *file = NULL;

    take_options(flat, "", opts, image);
    v = g_hash_table_lookup(opts, "filename");
    if (v && !split_name(v, &name_rules, &file, error)) {
        return FALSE;
    }
    if (file && (g_hash_table_contains(image, "file") ||
                 g_hash_table_contains(image, "file.filename") ||
                 g_hash_table_contains(image, "filename"))) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "blkdebug: 'image' and 'filename' name the image twice");
        return FALSE;
    }
    if (!node_rules(opts, name_rules, rules, error)) {
        return FALSE;
    }
    v = g_hash_table_lookup(opts, "config");
    *name = name_members(opts, "", typed,
                         v            ? v
                         : name_rules ? name_rules
                                      : "",
                         v != NULL);
    if (file && *file) {
        g_hash_table_insert(image, g_strdup("file.filename"), g_strdup(file));
    }
    return TRUE;
}

GHashTable *api_blkdebug_top(GHashTable *flat, ApiOpenLayers *layers, GError **error)
{
    g_autofree char *rules = NULL;
    g_autoptr(GHashTable) child =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    const char *fmt;
    char *v;
    GHashTableIter it;
    gpointer k, val;

    /* invariant 5: the name given beside the options is the node's */
    if (!g_hash_table_contains(flat, "filename") &&
        (v = g_hash_table_lookup(flat, "file.filename"))) {
        g_hash_table_insert(flat, g_strdup("filename"), g_strdup(v));
        g_hash_table_remove(flat, "file.filename");
    }
    fmt = g_hash_table_lookup(flat, "image.driver");
    if (!fmt || strcmp(fmt, "file") == 0) { /* over the file, read as raw */
        char *name = NULL;
        if (!api_blkdebug_options(flat, "", NULL, &name, NULL, error)) {
            return NULL;
        }
        g_hash_table_insert(child, g_strdup("driver"), g_strdup("raw"));
        g_hash_table_insert(child, g_strdup("file.filename"), name);
    } else if (layers->blkdebug_rules) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "qimg takes one blkdebug node over a format");
        return NULL;
    } else if (!over_format(flat, child, layers->json_typed, &rules,
                            &layers->blkdebug_name, error)) {
        return NULL;
    } else {
        layers->blkdebug_rules = g_steal_pointer(&rules);
    }
    /* the node's generic options (cache.*, node-name) are the layer's */
    g_hash_table_iter_init(&it, flat);
    while (g_hash_table_iter_next(&it, &k, &val)) {
        if (strcmp(k, "driver") != 0 && !g_hash_table_contains(child, k)) {
            g_hash_table_insert(child, g_strdup(k), g_strdup(val));
        }
    }
    return g_steal_pointer(&child);
}
