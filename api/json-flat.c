/*
 * api/json-flat.c: the JSON of a "json:{...}" name, parsed by json-glib
 * and flattened into dotted keys for json-name.c.
 *
 * Owns: the table of the json-glib and GObject functions called here, and the flattening
 * (nested objects become dotted keys, as QEMU's qdict_flatten).
 *
 * Invariants (cited as "json-flat.c invariant N"):
 *  1. libqimg is not linked against json-glib: it is loaded at the first
 *     json: name, once per process, the table filled all of it or nothing
 *     (dl.h invariants 1 to 3: json-glib brings GObject and
 *     GIO, with libmount, libselinux, libblkid and libffi, about 4 ms of
 *     CPU at every start of a process that never reads one).  A failure to
 *     load is an error naming the library, the same for every later call.
 *  2. A list is flattened as QEMU's qdict_flatten does: its members are
 *     KEY.0, KEY.1, ... (with their own keys below: KEY.0.event); JSON null
 *     is "", booleans "on"/"off", integers their decimal text; any other
 *     value is "Parameter 'KEY' expects a number".
 *  3. Where the caller asks (typed), every member that is not a JSON
 *     string is also kept as its JSON text (null, true/false, the
 *     integer), so a name QEMU prints back from the options (a blkdebug
 *     node's, json-blkdebug.c invariant 6) shows the types it was given.
 *  4. Every \u escape of a string is read as QEMU's parser reads it before
 *     json-glib reads the text: four hex digits, a high surrogate only
 *     followed at once by a low one, and a code point that is neither a
 *     surrogate nor a noncharacter; anything else is QEMU's "JSON parse
 *     error, \ud83d is not a valid Unicode character" (the escape as
 *     written, up to the string's end).  json-glib 1.6 takes a lone
 *     surrogate, or four characters that are not hex digits, into the
 *     string as bytes that are not UTF-8, and leaks its string buffer when
 *     what it read as a high surrogate is followed by another \u escape
 *     (an image names its backing file: a leak per open of a hostile
 *     image).
 *  5. The text is one JSON value: anything but white space after it
 *     (QEMU's "Expecting at most one JSON value") is refused before
 *     json-glib reads the text.  json-glib 1.6 takes a value followed by an object or a
 * list
 *     ("{}{}", "7[]") and leaks what it parsed of them.
 */
#include "api/api.h"
#include "block/dl.h"

#include <errno.h>
#include <json-glib/json-glib.h>
#include <string.h>

/* The soname of the library the headers belong to (json-glib 1.x). */
#define JSON_GLIB_SONAME "libjson-glib-1.0.so.0"

#define JSON_GLIB_FUNCS(X)                                                               \
    X(g_object_unref)                                                                    \
    X(json_array_get_element)                                                            \
    X(json_array_get_length)                                                             \
    X(json_node_get_array)                                                               \
    X(json_node_get_boolean)                                                             \
    X(json_node_get_int)                                                                 \
    X(json_node_get_node_type)                                                           \
    X(json_node_get_object)                                                              \
    X(json_node_get_string)                                                              \
    X(json_node_get_value_type)                                                          \
    X(json_object_get_member)                                                            \
    X(json_object_get_members)                                                           \
    X(json_parser_get_root)                                                              \
    X(json_parser_load_from_data)                                                        \
    X(json_parser_new)

typedef struct JsonGlib {
#define JSON_GLIB_FIELD(f) __typeof__(f) *f;
    JSON_GLIB_FUNCS(JSON_GLIB_FIELD)
#undef JSON_GLIB_FIELD
} JsonGlib;

static JsonGlib jg; /* filled once (invariant 1), read-only after */

#define JSON_GLIB_SYM(f) BLK_DL_SYM(JsonGlib, f)
static const BlkDlSym syms[] = {JSON_GLIB_FUNCS(JSON_GLIB_SYM)};

/* g_object_unref is GObject's, found through json-glib's dependencies */
static BlkDlLib lib = {
    .sonames = {JSON_GLIB_SONAME},
    .needed_by = "json: names need",
    .packages = "libjson-glib-1.0-0",
    .syms = syms,
    .nsyms = G_N_ELEMENTS(syms),
    .table = &jg,
    .table_size = sizeof(jg),
};

/* Where flattening puts what it reads: flat (key -> string, invariant 2)
 * and typed (key -> JSON text, invariant 3; may be NULL). */
typedef struct FlatOut {
    GHashTable *flat, *typed;
} FlatOut;

static gboolean flatten_node(JsonNode *v, char *key, const FlatOut *out, GError **error);

/* Flatten obj into out, prefix "a.b." (invariant 2). */
static gboolean flatten(JsonObject *obj, const char *prefix, const FlatOut *out,
                        GError **error)
{
    g_autoptr(GList) members = jg.json_object_get_members(obj);

    for (GList *l = members; l; l = l->next) {
        const char *k = l->data;
        if (!flatten_node(jg.json_object_get_member(obj, k), g_strconcat(prefix, k, NULL),
                          out, error)) {
            return FALSE;
        }
    }
    return TRUE;
}

/* Invariant 3: key's value as JSON text too. */
static void keep_typed(const FlatOut *out, const char *key, const char *json)
{
    if (out->typed) {
        g_hash_table_insert(out->typed, g_strdup(key), g_strdup(json));
    }
}

/* One member (key: owned, consumed). */
static gboolean flatten_node(JsonNode *v, char *key_in, const FlatOut *out,
                             GError **error)
{
    g_autofree char *key = key_in;
    GHashTable *flat = out->flat;

    switch (jg.json_node_get_node_type(v)) {
    case JSON_NODE_OBJECT: {
        g_autofree char *p = g_strconcat(key, ".", NULL);
        return flatten(jg.json_node_get_object(v), p, out, error);
    }
    case JSON_NODE_NULL:
        keep_typed(out, key, "null");
        g_hash_table_insert(flat, g_steal_pointer(&key), g_strdup(""));
        return TRUE;
    case JSON_NODE_ARRAY: {
        JsonArray *a = jg.json_node_get_array(v);
        for (guint i = 0; i < jg.json_array_get_length(a); i++) {
            if (!flatten_node(jg.json_array_get_element(a, i),
                              g_strdup_printf("%s.%u", key, i), out, error)) {
                return FALSE;
            }
        }
        return TRUE;
    }
    case JSON_NODE_VALUE: {
        GType t = jg.json_node_get_value_type(v);
        if (t == G_TYPE_BOOLEAN) {
            keep_typed(out, key, jg.json_node_get_boolean(v) ? "true" : "false");
            g_hash_table_insert(flat, g_steal_pointer(&key),
                                g_strdup(jg.json_node_get_boolean(v) ? "on" : "off"));
        } else if (t == G_TYPE_STRING) {
            g_hash_table_insert(flat, g_steal_pointer(&key),
                                g_strdup(jg.json_node_get_string(v)));
        } else if (t == G_TYPE_INT64) {
            g_autofree char *n =
                g_strdup_printf("%" G_GINT64_FORMAT, jg.json_node_get_int(v));
            keep_typed(out, key, n);
            g_hash_table_insert(flat, g_steal_pointer(&key), g_steal_pointer(&n));
        } else {
            g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' expects a number",
                        key);
            return FALSE;
        }
        return TRUE;
    }
    }
    return TRUE;
}

/* The value of the 4 hex digits at p, or -1 (stops at the NUL). */
static int hex4(const char *p)
{
    int v = 0;

    for (int i = 0; i < 4; i++) {
        if (!g_ascii_isxdigit(p[i])) {
            return -1;
        }
        v = v * 16 + g_ascii_xdigit_value(p[i]);
    }
    return v;
}

/* QEMU's valid code point: not a surrogate, not a noncharacter. */
static bool code_point_ok(int cp)
{
    return cp >= 0 && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF) &&
           !(cp >= 0xFDD0 && cp <= 0xFDEF) && (cp & 0xFFFE) != 0xFFFE;
}

/* How many bytes of the \u escape at p QEMU's message shows: n, or up to
 * the string's closing quote (its token ends there). */
static int escape_span(const char *p, int n)
{
    for (int i = 2; i < n; i++) {
        if (p[i] == '\0') {
            return i;
        }
        if (p[i] == '"') {
            return i + 1;
        }
        if (p[i] == '\\' && p[i + 1] != '\0') {
            i++;
        }
    }
    return n;
}

/* Invariant 4, on the standard JSON api_qemu_json made: every \u escape
 * (or pair) of a string, as QEMU's parser reads it. */
static gboolean unicode_escapes_ok(const char *text, GError **error)
{
    bool in_string = false;

    for (const char *p = text; *p; p++) {
        if (*p == '"') {
            in_string = !in_string;
            continue;
        }
        if (!in_string || *p != '\\') {
            continue;
        }
        if (p[1] != 'u') {
            p += p[1] != '\0'; /* the escaped character, a '"' too */
            continue;
        }
        int cp = hex4(p + 2), n = 6;
        if (cp >= 0xD800 && cp <= 0xDBFF && p[6] == '\\' && p[7] == 'u') {
            int lo = hex4(p + 8);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp & 0x3FF) << 10) + (lo & 0x3FF);
                n = 12;
            } else {
                cp = -1;
            }
        }
        if (!code_point_ok(cp)) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Could not parse the JSON options: JSON parse error, %.*s is not "
                        "a valid Unicode character",
                        escape_span(p, n), p);
            return FALSE;
        }
        p += n - 1;
    }
    return TRUE;
}

#define JSON_SPACE " \t\n\r"

/* The end of the JSON value that starts at p: past its closing bracket or
 * quote, or the end of a scalar; the NUL if it does not end. */
static const char *value_end(const char *p)
{
    int depth = 0;

    do {
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                p += *p == '\\' && p[1] != '\0';
            }
            p += *p != '\0';
        } else if (*p == '{' || *p == '[') {
            depth++;
            p++;
        } else if (*p == '}' || *p == ']') {
            depth--;
            p++;
        } else if (depth == 0) { /* a scalar */
            while (*p && !strchr(JSON_SPACE "{}[],:\"", *p)) {
                p++;
            }
        } else {
            p++;
        }
    } while (depth > 0 && *p);
    return p;
}

/* Invariant 5, on the standard JSON api_qemu_json made. */
static gboolean one_value_ok(const char *text, GError **error)
{
    const char *p = text + strspn(text, JSON_SPACE);

    if (!*p || strchr("}],:", *p)) { /* no value: json-glib says so */
        return TRUE;
    }
    p = value_end(p);
    p += strspn(p, JSON_SPACE);
    if (*p) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not parse the JSON options: Expecting at most one JSON value");
        return FALSE;
    }
    return TRUE;
}

gboolean api_json_flat(const char *name, GHashTable *flat, GHashTable *typed,
                       GError **error)
{
    const FlatOut out = {flat, typed};
    g_autoptr(GError) err = NULL;
    g_autofree char *text = NULL;
    JsonParser *parser;
    JsonNode *root;
    gboolean ok;
    const char *load_error = blk_dl_load(&lib);

    if (load_error) { /* invariant 1 */
        g_set_error(error, QIMG_ERROR, ENOTSUP, "%s", load_error);
        return FALSE;
    }
    text = api_qemu_json(name + strlen("json:"));
    if (!unicode_escapes_ok(text, error) || !one_value_ok(text, error)) { /* 4, 5 */
        return FALSE;
    }
    parser = jg.json_parser_new();
    if (!jg.json_parser_load_from_data(parser, text, -1, &err)) {
        /* QEMU's words, json-glib's detail (QEMU's lexer words it its way) */
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Could not parse the JSON options: JSON parse error, %s",
                    err->message);
        ok = FALSE;
    } else if (!(root = jg.json_parser_get_root(parser)) ||
               jg.json_node_get_node_type(root) != JSON_NODE_OBJECT) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Invalid JSON object given");
        ok = FALSE;
    } else {
        ok = flatten(jg.json_node_get_object(root), "", &out, error);
    }
    jg.g_object_unref(parser);
    return ok;
}
