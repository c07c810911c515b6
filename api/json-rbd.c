/*
 * api/json-rbd.c: the fields of a Ceph RBD image in a caller's json: name
 * or options (json-name.c invariant 11) into its location.
 *
 * Owns: which RBD options qimg takes (pool, image, namespace, snapshot,
 * conf, user), which it refuses by name and why, and QEMU's messages for
 * a missing or unexpected one.
 */
#include "api/api.h"

#include <errno.h>
#include <string.h>

/* json-name.c invariant 11: the RBD fields under prefix ("" or "file.") leave flat for
 * loc; the options any node takes (read-only, cache.*) stay for apply(). */
gboolean api_protocol_key(const char *key, const char *prefix)
{
    const char *f = key + strlen(prefix);

    if (!g_str_has_prefix(key, prefix) || strcmp(f, "driver") == 0 ||
        strcmp(f, "read-only") == 0 || g_str_has_prefix(f, "cache.")) {
        return FALSE; /* another node's, or apply()'s */
    }
    /* apply() refuses these under a protocol driver */
    return *prefix ||
           !(strcmp(key, "file") == 0 || g_str_has_prefix(key, "file.") ||
             g_str_has_prefix(key, "backing") || g_str_has_prefix(key, "data-file"));
}

gboolean api_rbd_fields(GHashTable *flat, const char *prefix, BlkRbdLocation *loc,
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
        {"encrypt", "librbd's own image encryption is not supported"},
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
        if (!api_protocol_key(key, prefix)) {
            continue; /* another node's, or apply()'s */
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
