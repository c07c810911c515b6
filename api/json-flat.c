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
 *     is "", booleans "on"/"off", integers their decimal text.  Any other
 *     number is kept as QEMU's text of it, so the option that takes it
 *     judges it (or names it as one it does not support): an integer past
 *     int64 that fits uint64 its decimal text, anything else (a fraction,
 *     an exponent, past uint64) the double's "%.17g" (0.1 is
 *     "0.10000000000000001", 99999999999999999999 "1e+20").
 *  2. Where the caller asks (typed), every member that is not a JSON
 *     string is also kept as its JSON text (null, true/false, the
 *     integer), so a name QEMU prints back from the options (a blkdebug
 *     node's, json-blkdebug.c invariant 6) shows the types it was given.
 *  3. A null "driver" or "filename" (at any level) or "file" is no option
 *     at all, as QEMU reads them only as strings (a driver that is not a
 *     string is none either: QEMU probes): "json:{}" and
 *     "json:{"file": null}" are QEMU's "Must specify either driver or
 *     file" (json-name.c).  Any other null stays "" for its option to
 *     judge.
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

/* Invariant 1: QEMU's text of a number that is not an int64. */
static char *number_text(const char *json)
{
    char *end = NULL;

    if (!strpbrk(json, ".eE-")) {
        errno = 0;
        guint64 u = g_ascii_strtoull(json, &end, 10);
        if (errno == 0 && end && *end == '\0') {
            return g_strdup_printf("%" G_GUINT64_FORMAT, u);
        }
    }
    char buf[G_ASCII_DTOSTR_BUF_SIZE];
    return g_strdup(
        g_ascii_formatd(buf, sizeof(buf), "%.17g", g_ascii_strtod(json, NULL)));
}

/* Invariant 3: a key whose value, null or not a string, is no option. */
static bool dropped(const char *key, const ApiJson *v)
{
    const char *dot = strrchr(key, '.'), *last = dot ? dot + 1 : key;

    if (strcmp(last, "driver") == 0) {
        return v->type != API_JSON_STRING && v->type != API_JSON_OBJECT &&
               v->type != API_JSON_ARRAY;
    }
    return v->type == API_JSON_NULL &&
           (strcmp(last, "filename") == 0 || strcmp(last, "file") == 0);
}

/* One value under key (owned, consumed). */
static gboolean flatten_value(const ApiJson *v, char *key_in, const FlatOut *out,
                              GError **error)
{
    g_autofree char *key = key_in;
    GHashTable *flat = out->flat;

    if (dropped(key, v)) {
        return TRUE;
    }
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
    case API_JSON_NUMBER: {
        g_autofree char *n = number_text(v->str);
        keep_typed(out, key, n);
        g_hash_table_insert(flat, g_steal_pointer(&key), g_steal_pointer(&n));
        return TRUE;
    }
    }
    g_assert_not_reached();
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
