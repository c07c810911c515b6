/*
 * api/json-blkdebug.c: QEMU's blkdebug node named by options under a
 * format ("file": {"driver": "blkdebug", ...} in a json: name, or
 * file.driver=blkdebug in -o / --image-opts) as the fault node's
 * "blkdebug:RULES:FILE" name (block/faulty.c, block/protocol.c).
 *
 * Owns: reading blkdebug's options -- config, image, inject-error and
 * set-state (lists, or one object), filename -- into that name.
 *
 * Invariants (cited as "json-blkdebug.c invariant N"):
 *  1. The image under the node is a plain file: "image": {"driver":
 *     "file", "filename": F} (or image.filename), or a "filename" (QEMU's
 *     blkdebug_parse_filename: "blkdebug:CONFIG:F", or F itself).  An
 *     image by another driver is refused naming it; a string is a node
 *     reference, QEMU's "Cannot find device=... nor node-name=...";
 *     without one, QEMU's 'A block device must be specified for "image"'.
 *  2. Rules come from the config file first, then the inject-error groups
 *     in list order, then the set-state groups (QEMU's read_config order);
 *     every key of a group is checked as the config file's are
 *     (faulty-config.c fact 2: "[inject-error] section doesn't support the
 *     option 'K'").
 *  3. Every other key of the node is refused: blkdebug's request limits
 *     (max-transfer, opt-/max-write-zero, opt-/max-discard) and
 *     permission options by name, an unknown key as QEMU's "Block protocol
 *     'blkdebug' doesn't support the option 'K'".  The node's cache.*,
 *     node-name and align stay for the caller (json-name.c: align is its
 *     invariant 13), as a file's do.
 *  4. Only a caller's own name takes the node (json-name.c invariant 1:
 *     never a backing name read from an image).
 */
#include "api/api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Invariant 3: QEMU's blkdebug options qimg's fault node does not have. */
static const char *const refused[] = {
    "max-transfer", "opt-write-zero",   "max-write-zero",      "opt-discard",
    "max-discard",  "take-child-perms", "unshare-child-perms",
};

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
    if (filename && g_str_has_prefix(filename, "blkdebug:")) {
        const char *p = filename + strlen("blkdebug:"), *colon = strchr(p, ':');
        if (!colon) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Could not open '%s': expected blkdebug:CONFIG:FILE", filename);
            return FALSE;
        }
        *name_rules = g_strndup(p, (gsize)(colon - p));
        filename = colon + 1;
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

gboolean api_blkdebug_options(GHashTable *flat, const char *prefix, char **name,
                              GError **error)
{
    g_autoptr(GHashTable) opts =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GHashTable) image =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GKeyFile) kf = g_key_file_new();
    g_autoptr(GString) rules = g_string_new(NULL);
    g_autofree char *file = NULL, *name_rules = NULL, *groups = NULL;
    g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func(g_free);
    size_t plen = strlen(prefix);
    gint64 i;
    const char *sub;

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
            strcmp(f, "node-name") == 0 || strcmp(f, "align") == 0 ||
            g_str_has_prefix(f, "cache.")) {
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
    /* QEMU looks for the image before it checks the other keys */
    if (!image_file(image, g_hash_table_lookup(opts, "filename"), &file, &name_rules,
                    error)) {
        return FALSE;
    }
    g_autoptr(GList) own = g_list_sort(g_hash_table_get_keys(opts), (GCompareFunc)strcmp);
    for (GList *l = own; l; l = l->next) {
        const char *f = l->data;
        if (strcmp(f, "config") == 0 || strcmp(f, "filename") == 0 ||
            group_key(f, "inject-error", &i, &sub) ||
            group_key(f, "set-state", &i, &sub)) {
            continue;
        }
        for (size_t j = 0; j < G_N_ELEMENTS(refused); j++) {
            if (strcmp(f, refused[j]) == 0) {
                g_set_error(error, QIMG_ERROR, ENOTSUP,
                            "The blkdebug option '%s' is not supported by qimg", f);
                return FALSE;
            }
        }
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Block protocol 'blkdebug' doesn't support the option '%s'", f);
        return FALSE;
    }
    /* invariant 2 */
    if ((name_rules && !config_rules(name_rules, rules, error)) ||
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
    *name = g_strdup_printf("blkdebug:%s:%s", rules->str, file);
    return TRUE;
}
