/*
 * block/rbd-name.c: where an RBD image is -- QEMU's "rbd:" names, and the
 * names qimg shows for an RBD node.
 *
 * Owns: parsing "rbd:pool/[namespace/]image[@snap][:key=value...]" as
 * QEMU 7.2 does (qemu_rbd_parse_filename's rules, learnt from its
 * behaviour), building such a name back, and QEMU's json:{...} name of an
 * RBD node -- with QEMU's JSON text rules every json: name qimg builds
 * shares (string escapes, QDict member order: invariants 4 and 5).
 *
 * Invariants (cited as "rbd-name.c invariant N"):
 *  1. A backslash escapes the next character anywhere in the name: a
 *     separator ('/', '@', ':', '=') after it is part of the field, and
 *     the backslash itself is dropped (a lone trailing one is kept).
 *  2. Splitting: the pool ends at the first '/' ("Pool name is required"
 *     without one); if an '@' follows anywhere, the image ends there and
 *     the snapshot at the next ':'; else the image ends at the first ':'.
 *     A '/' in the image part splits off the namespace (empty when there
 *     is none: an "rbd:" name always has one).  What follows are
 *     key=value pairs separated by ':' ("conf option K has no value"
 *     without '='): conf= is the configuration file, id= the user (the
 *     last one counts), any other key a librados setting, in order.
 *  3. blk_rbd_name() escapes '\\', '/', '@', ':' and '=' in every field,
 *     so parsing its result gives the same location (rbd.h invariant 2);
 *     a location without a namespace gets none in the name.
 *  4. The json: name holds pool, image, conf, snapshot, driver, namespace
 *     and user, those given, in QEMU's QDict order (invariant 5); librados
 *     settings are not in it, as QEMU leaves them out.  Strings are
 *     escaped as QEMU's JSON writer escapes them (\uXXXX for control
 *     characters and everything past ASCII, U+FFFD for invalid UTF-8).
 *  5. QEMU prints a QDict's members bucket by bucket (512 buckets, by the
 *     tdb hash of the key QEMU's qdict.c uses), and within one bucket the
 *     member put last first (blk_qdict_json_object: members in the order
 *     QEMU puts them).
 */
#include "block/rbd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool blk_is_rbd_name(const char *filename)
{
    return g_str_has_prefix(filename, "rbd:");
}

void blk_rbd_location_clear(BlkRbdLocation *loc)
{
    g_clear_pointer(&loc->pool, g_free);
    g_clear_pointer(&loc->namespace, g_free);
    g_clear_pointer(&loc->image, g_free);
    g_clear_pointer(&loc->snapshot, g_free);
    g_clear_pointer(&loc->conf, g_free);
    g_clear_pointer(&loc->user, g_free);
    g_clear_pointer(&loc->settings, g_ptr_array_unref);
}

void blk_rbd_location_copy(BlkRbdLocation *dst, const BlkRbdLocation *src)
{
    *dst = (BlkRbdLocation){
        .pool = g_strdup(src->pool),
        .namespace = g_strdup(src->namespace),
        .image = g_strdup(src->image),
        .snapshot = g_strdup(src->snapshot),
        .conf = g_strdup(src->conf),
        .user = g_strdup(src->user),
    };
    if (src->settings) {
        dst->settings = g_ptr_array_new_with_free_func(g_free);
        for (guint i = 0; i < src->settings->len; i++) {
            g_ptr_array_add(dst->settings, g_strdup(src->settings->pdata[i]));
        }
    }
}

/* Invariant 1: the first unescaped delim in s, or NULL. */
static char *find_unescaped(char *s, char delim)
{
    for (char *p = s; *p; p++) {
        if (*p == delim) {
            return p;
        }
        if (*p == '\\' && p[1] != '\0') {
            p++;
        }
    }
    return NULL;
}

/* Cut s at its first unescaped delim: *rest is what follows (NULL if no
 * delim); returns s. */
static char *next_token(char *s, char delim, char **rest)
{
    char *end = find_unescaped(s, delim);

    *rest = NULL;
    if (end) {
        *end = '\0';
        *rest = end + 1;
    }
    return s;
}

/* Invariant 1: drop escaping backslashes (a trailing lone one stays). */
static char *unescape(const char *s)
{
    GString *out = g_string_sized_new(strlen(s));

    for (const char *p = s; *p; p++) {
        if (*p == '\\' && p[1] != '\0') {
            p++;
        }
        g_string_append_c(out, *p);
    }
    return g_string_free(out, FALSE);
}

/* Invariant 2. */
int blk_rbd_parse_name(const char *filename, BlkRbdLocation *loc)
{
    g_autofree char *buf = NULL;
    char *p, *tok, *image;

    memset(loc, 0, sizeof(*loc));
    if (!blk_is_rbd_name(filename)) {
        return blk_error(EINVAL, "File name must start with 'rbd:'");
    }
    buf = g_strdup(filename + strlen("rbd:"));
    tok = next_token(buf, '/', &p);
    if (!p) {
        return blk_error(EINVAL, "Pool name is required");
    }
    loc->pool = unescape(tok);
    if (find_unescaped(p, '@')) {
        image = next_token(p, '@', &p);
        tok = next_token(p, ':', &p);
        loc->snapshot = unescape(tok);
    } else {
        image = next_token(p, ':', &p);
    }
    if (find_unescaped(image, '/')) {
        tok = next_token(image, '/', &image);
        loc->namespace = unescape(tok);
    } else {
        loc->namespace = g_strdup("");
    }
    loc->image = unescape(image);
    while (p) {
        char *key = next_token(p, '=', &p), *value;
        if (!p) {
            return blk_error(EINVAL, "conf option %s has no value", key);
        }
        g_autofree char *k = unescape(key);
        value = unescape(next_token(p, ':', &p));
        if (strcmp(k, "conf") == 0) {
            g_free(loc->conf);
            loc->conf = value;
        } else if (strcmp(k, "id") == 0) {
            g_free(loc->user);
            loc->user = value;
        } else {
            if (!loc->settings) {
                loc->settings = g_ptr_array_new_with_free_func(g_free);
            }
            g_ptr_array_add(loc->settings, g_steal_pointer(&k));
            g_ptr_array_add(loc->settings, value);
        }
    }
    return 0;
}

/* Invariant 3. */
static void append_escaped(GString *out, const char *s)
{
    for (const char *p = s; *p; p++) {
        if (strchr("\\/@:=", *p)) {
            g_string_append_c(out, '\\');
        }
        g_string_append_c(out, *p);
    }
}

char *blk_rbd_name(const BlkRbdLocation *loc)
{
    GString *out = g_string_new("rbd:");

    append_escaped(out, loc->pool);
    g_string_append_c(out, '/');
    if (loc->namespace && *loc->namespace) {
        append_escaped(out, loc->namespace);
        g_string_append_c(out, '/');
    }
    append_escaped(out, loc->image);
    if (loc->snapshot) {
        g_string_append_c(out, '@');
        append_escaped(out, loc->snapshot);
    }
    if (loc->conf) {
        g_string_append(out, ":conf=");
        append_escaped(out, loc->conf);
    }
    if (loc->user) {
        g_string_append(out, ":id=");
        append_escaped(out, loc->user);
    }
    for (guint i = 0; loc->settings && i + 1 < loc->settings->len; i += 2) {
        g_string_append_c(out, ':');
        append_escaped(out, loc->settings->pdata[i]);
        g_string_append_c(out, '=');
        append_escaped(out, loc->settings->pdata[i + 1]);
    }
    return g_string_free(out, FALSE);
}

/* Invariant 4: QEMU's JSON string escapes. */
void blk_json_append_string(GString *out, const char *s)
{
    g_string_append_c(out, '"');
    for (const char *p = s; *p;) {
        gunichar c = g_utf8_get_char_validated(p, -1);
        if (c == (gunichar)-1 || c == (gunichar)-2) {
            c = 0xFFFD;
            p++;
        } else {
            p = g_utf8_next_char(p);
        }
        switch (c) {
        case '"':
            g_string_append(out, "\\\"");
            break;
        case '\\':
            g_string_append(out, "\\\\");
            break;
        case '\b':
            g_string_append(out, "\\b");
            break;
        case '\f':
            g_string_append(out, "\\f");
            break;
        case '\n':
            g_string_append(out, "\\n");
            break;
        case '\r':
            g_string_append(out, "\\r");
            break;
        case '\t':
            g_string_append(out, "\\t");
            break;
        default:
            if (c > 0xFFFF) {
                g_string_append_printf(out, "\\u%04X\\u%04X",
                                       0xD800 + ((c - 0x10000) >> 10),
                                       0xDC00 + ((c - 0x10000) & 0x3FF));
            } else if (c < 0x20 || c >= 0x7F) {
                g_string_append_printf(out, "\\u%04X", c);
            } else {
                g_string_append_c(out, (char)c);
            }
        }
    }
    g_string_append_c(out, '"');
}

/* Invariant 5: QEMU's QDict bucket of key (its tdb hash, 512 buckets). */
unsigned blk_qdict_bucket(const char *key)
{
    uint32_t v = 0x238F13AFu * (uint32_t)strlen(key);

    for (uint32_t i = 0; key[i]; i++) {
        v += (uint32_t)(unsigned char)key[i] << (i * 5 % 24);
    }
    return (1103515243u * v + 12345u) % 512u;
}

typedef struct QdictMember {
    unsigned bucket, put;
    const char *key, *json;
} QdictMember;

static int qdict_member_cmp(const void *a, const void *b)
{
    const QdictMember *x = a, *y = b;

    if (x->bucket != y->bucket) {
        return x->bucket < y->bucket ? -1 : 1;
    }
    return x->put > y->put ? -1 : x->put < y->put; /* the last put first */
}

char *blk_qdict_json_object(size_t n, const char *const *keys, const char *const *json)
{
    g_autofree QdictMember *m = g_new0(QdictMember, n ? n : 1);
    GString *out = g_string_new("{");
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        if (json[i]) {
            m[k++] =
                (QdictMember){blk_qdict_bucket(keys[i]), (unsigned)i, keys[i], json[i]};
        }
    }
    qsort(m, k, sizeof(*m), qdict_member_cmp);
    for (size_t i = 0; i < k; i++) {
        g_string_append(out, i ? ", " : "");
        blk_json_append_string(out, m[i].key);
        g_string_append_printf(out, ": %s", m[i].json);
    }
    g_string_append_c(out, '}');
    return g_string_free(out, FALSE);
}

/* A JSON string of s (NULL stays NULL). */
static char *json_str(const char *s)
{
    GString *out;

    if (!s) {
        return NULL;
    }
    out = g_string_new(NULL);
    blk_json_append_string(out, s);
    return g_string_free(out, FALSE);
}

/* Invariant 4. */
char *blk_rbd_json_object(const BlkRbdLocation *loc)
{
    const char *keys[] = {"driver",   "pool",      "image", "conf",
                          "snapshot", "namespace", "user"};
    const char *vals[] = {"rbd",         loc->pool,      loc->image, loc->conf,
                          loc->snapshot, loc->namespace, loc->user};
    char *json[G_N_ELEMENTS(keys)];
    char *obj;

    for (size_t i = 0; i < G_N_ELEMENTS(keys); i++) {
        json[i] = json_str(vals[i]);
    }
    obj = blk_qdict_json_object(G_N_ELEMENTS(keys), keys, (const char *const *)json);
    for (size_t i = 0; i < G_N_ELEMENTS(keys); i++) {
        g_free(json[i]);
    }
    return obj;
}

char *blk_rbd_json_name(const BlkRbdLocation *loc)
{
    g_autofree char *obj = blk_rbd_json_object(loc);

    return g_strconcat("json:", obj, NULL);
}
