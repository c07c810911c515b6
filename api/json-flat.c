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
 *  4. Every string is read as QEMU's lexer and parser read it before
 *     json-glib reads the text.  First the lexer's rule, over the whole
 *     name as written: a control character or a byte 0xFE/0xFF in a
 *     string (escaped or not, in double or single quotes) is "JSON parse
 *     error, stray '"a^A'" (the token from its opening quote to that
 *     byte).  Then the parser's, string by string:
 *     an escape is one of \" \\ \/ \' \b \f \n \r \t or \u ("invalid escape
 *     sequence in string"); a \u escape is four hex digits, a high
 *     surrogate only followed at once by a low one, and a code point that
 *     is neither a surrogate nor a noncharacter ("\ud83d is not a valid
 *     Unicode character", the escape as written, up to the string's end);
 *     other bytes are modified UTF-8 of such a code point ("invalid UTF-8
 *     sequence in string").  U+0000, written \u0000 or as the bytes C0 80,
 *     is the bytes C0 80 in the string, as QEMU stores it: json-glib
 *     would end the string there (a file name cut short) or refuse the
 *     text, so it gets the noncharacter U+FDD0 in its place (NUL_MARK,
 *     which the rules above keep out of the text) and the flattening puts
 *     C0 80 back.  json-glib 1.6 takes a lone surrogate, or four
 *     characters that are not hex digits, into the string as bytes that
 *     are not UTF-8, and leaks its string buffer when what it read as a
 *     high surrogate is followed by another \u escape (an image names its
 *     backing file: a leak per open of a hostile image).
 *  5. The text is one JSON value: anything but white space after it
 *     (QEMU's "Expecting at most one JSON value") is refused before
 *     json-glib reads the text.  json-glib 1.6 takes a value followed by an object or a
 * list
 *     ("{}{}", "7[]") and leaks what it parsed of them.
 */
#include "api/api.h"
#include "block/dl.h"

#include <errno.h>
#include <stdarg.h>
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

/* Invariant 4: U+0000 in a string, as json-glib is given it and as QEMU
 * stores it (modified UTF-8). */
#define NUL_MARK_ESCAPE "\\uFDD0"
#define NUL_MARK_UTF8 "\xEF\xB7\x90"
#define NUL_MOD_UTF8 "\xC0\x80"

/* Invariant 4: a string json-glib read, its NUL_MARKs made C0 80 again. */
static char *unmark(const char *str)
{
    GString *out = g_string_new(NULL);

    for (const char *m; (m = strstr(str, NUL_MARK_UTF8)); str = m + 3) {
        g_string_append_len(out, str, m - str);
        g_string_append(out, NUL_MOD_UTF8);
    }
    g_string_append(out, str);
    return g_string_free(out, FALSE);
}

/* Flatten obj into out, prefix "a.b." (invariant 2). */
static gboolean flatten(JsonObject *obj, const char *prefix, const FlatOut *out,
                        GError **error)
{
    g_autoptr(GList) members = jg.json_object_get_members(obj);

    for (GList *l = members; l; l = l->next) {
        const char *k = l->data;
        g_autofree char *name = unmark(k);
        if (!flatten_node(jg.json_object_get_member(obj, k),
                          g_strconcat(prefix, name, NULL), out, error)) {
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
                                unmark(jg.json_node_get_string(v)));
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

/* The code point of the modified UTF-8 sequence at p (QEMU's reading: the
 * shortest form, C0 80 for U+0000), its length in *len; -1 if it is none. */
static int mod_utf8(const unsigned char *p, int *len)
{
    int n = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC0 ? 2 : 0;
    static const int least[] = {0, 0, 0x80, 0x800, 0x10000};
    int cp;

    if (n == 0 || p[0] >= 0xF8) {
        return -1; /* a continuation byte first, or a 5- or 6-byte form */
    }
    cp = p[0] & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            return -1;
        }
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    *len = n;
    if (cp == 0 && n == 2) {
        return 0; /* C0 80 */
    }
    return cp < least[n] ? -1 : cp;
}

static gboolean parse_error(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static gboolean parse_error(GError **error, const char *fmt, ...)
{
    va_list ap;
    g_autofree char *detail = NULL;

    va_start(ap, fmt);
    detail = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(error, QIMG_ERROR, EINVAL,
                "Could not parse the JSON options: JSON parse error, %s", detail);
    return FALSE;
}

/* Invariant 4, the lexer's rule, on the name as written (QEMU's strings
 * in single quotes too: the token shows its own quote). */
static gboolean string_bytes_ok(const char *text, GError **error)
{
    const char *open = NULL;

    for (const char *p = text; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!open) {
            open = c == '"' || c == '\'' ? p : NULL;
            continue;
        }
        if (c < 0x20 || c >= 0xFE) {
            return parse_error(error, "stray '%.*s'", (int)(p - open + 1), open);
        }
        if (c == (unsigned char)*open) {
            open = NULL;
        } else if (c == '\\' && p[1] != '\0' && strchr("\\\"'", p[1])) {
            p++; /* an escaped quote or backslash; any other escaped byte is
                  * checked as the others */
        }
    }
    return TRUE;
}

/* Invariant 4, the parser's rules, on the standard JSON api_qemu_json made:
 * the text json-glib is given (U+0000 as NUL_MARK), or NULL. */
static char *strings_read(const char *text, GError **error)
{
    g_autoptr(GString) out = g_string_sized_new(strlen(text) + 16);
    bool in_string = false;

    for (const char *p = text; *p; p++) {
        const unsigned char c = (unsigned char)*p;
        int cp, n = 1;

        if (!in_string || c == '"') {
            in_string = in_string != (c == '"');
            g_string_append_c(out, *p);
            continue;
        }
        if (c == '\\' && p[1] != 'u') {
            if (p[1] != '\0' && !strchr("\"\\/'bfnrt", p[1])) {
                parse_error(error, "invalid escape sequence in string");
                return NULL;
            }
            n = p[1] != '\0' ? 2 : 1;
            g_string_append_len(out, p, n);
            p += n - 1;
            continue;
        }
        if (c == '\\') {
            n = 6;
            cp = hex4(p + 2);
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
                parse_error(error, "%.*s is not a valid Unicode character",
                            escape_span(p, n), p);
                return NULL;
            }
        } else if (c >= 0x80) {
            cp = mod_utf8((const unsigned char *)p, &n);
            if (!code_point_ok(cp)) {
                parse_error(error, "invalid UTF-8 sequence in string");
                return NULL;
            }
        } else {
            cp = c;
        }
        if (cp == 0) {
            g_string_append(out, NUL_MARK_ESCAPE);
        } else {
            g_string_append_len(out, p, n);
        }
        p += n - 1;
    }
    return g_string_free(g_steal_pointer(&out), FALSE);
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
    g_autofree char *qemu_text = NULL;
    g_autofree char *text = NULL;
    JsonParser *parser;
    JsonNode *root;
    gboolean ok;
    const char *load_error = blk_dl_load(&lib);

    if (load_error) { /* invariant 1 */
        g_set_error(error, QIMG_ERROR, ENOTSUP, "%s", load_error);
        return FALSE;
    }
    if (!string_bytes_ok(name + strlen("json:"), error)) { /* invariant 4 */
        return FALSE;
    }
    qemu_text = api_qemu_json(name + strlen("json:"));
    if (!(text = strings_read(qemu_text, error)) || !one_value_ok(text, error)) { /* 5 */
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
