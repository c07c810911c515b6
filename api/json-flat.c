/*
 * api/json-flat.c: the JSON of a "json:{...}" name (read by json-parse.c,
 * as QEMU reads it) flattened into dotted keys for json-name.c.
 *
 * Owns: the flattening (nested objects become dotted keys, as QEMU's
 * qdict_flatten).
 *
 * Invariants (cited as "json-flat.c invariant N"):
 *  1. A list is flattened as QEMU's qdict_flatten does: its members are
 *     KEY.0, KEY.1, ... (with their own keys below: KEY.0.event); JSON null
 *     is "", booleans "on"/"off", integers their decimal text; any other
 *     value is "Parameter 'KEY' expects a number".
 *  2. Where the caller asks (typed), every member that is not a JSON
 *     string is also kept as its JSON text (null, true/false, the
 *     integer), so a name QEMU prints back from the options (a blkdebug
 *     node's, json-blkdebug.c invariant 6) shows the types it was given.
 */
#include "api/api.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

/* Where flattening puts what it reads: flat (key -> string, invariant 1)
 * and typed (key -> JSON text, invariant 2; may be NULL). */
typedef struct FlatOut {
    GHashTable *flat, *typed;
} FlatOut;

/* Invariant 2: key's value as JSON text too. */
static void keep_typed(const FlatOut *out, const char *key, const char *json)
{
    if (out->typed) {
        g_hash_table_insert(out->typed, g_strdup(key), g_strdup(json));
    }
}

/* One value under key (owned, consumed). */
static gboolean flatten_value(const ApiJson *v, char *key_in, const FlatOut *out,
                              GError **error)
{
    g_autofree char *key = key_in;
    GHashTable *flat = out->flat;

    switch (v->type) {
    case API_JSON_OBJECT:
        for (guint i = 0; i < v->members->len; i++) {
            const ApiJson *m = v->members->pdata[i];
            if (!flatten_value(m, g_strconcat(key, *key ? "." : "", m->key, NULL), out,
                               error)) {
                return FALSE;
            }
        }
        return TRUE;
    case API_JSON_ARRAY:
        for (guint i = 0; i < v->members->len; i++) {
            if (!flatten_value(v->members->pdata[i], g_strdup_printf("%s.%u", key, i),
                               out, error)) {
                return FALSE;
            }
        }
        return TRUE;
    case API_JSON_NULL:
        keep_typed(out, key, "null");
        g_hash_table_insert(flat, g_steal_pointer(&key), g_strdup(""));
        return TRUE;
    case API_JSON_BOOL:
        keep_typed(out, key, v->b ? "true" : "false");
        g_hash_table_insert(flat, g_steal_pointer(&key), g_strdup(v->b ? "on" : "off"));
        return TRUE;
    case API_JSON_STRING:
        g_hash_table_insert(flat, g_steal_pointer(&key), g_strdup(v->str));
        return TRUE;
    case API_JSON_INT: {
        g_autofree char *n = g_strdup_printf("%" PRId64, v->i);
        keep_typed(out, key, n);
        g_hash_table_insert(flat, g_steal_pointer(&key), g_steal_pointer(&n));
        return TRUE;
    }
    case API_JSON_NUMBER:
        break;
    }
    g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' expects a number", key);
    return FALSE;
}

gboolean api_json_flat(const char *name, GHashTable *flat, GHashTable *typed,
                       GError **error)
{
    const FlatOut out = {flat, typed};
    g_autoptr(GError) err = NULL;
    g_autoptr(ApiJson) root = api_json_parse(name + strlen("json:"), &err);

    if (!root) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Could not parse the JSON options: %s",
                    err->message);
        return FALSE;
    }
    if (root->type != API_JSON_OBJECT) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Invalid JSON object given");
        return FALSE;
    }
    return flatten_value(root, g_strdup(""), &out, error);
}
