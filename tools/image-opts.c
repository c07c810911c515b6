/*
 * tools/image-opts.c: the key=value lists QEMU's tools read as QemuOpts --
 * the image of --image-opts, qemu-io's open -o, -l snapshot.* -- read as
 * QEMU reads them, before the library sees them (the library takes only
 * "key=value" elements: api/open-opts.c fact 1).
 *
 * Facts learnt from running qemu-img, qemu-io and qemu-nbd 7.2 (not from
 * their source):
 *  1. An element without '=' is a short-form boolean: "KEY" is KEY=on and
 *     "noKEY" KEY=off, each with the warning "short-form boolean option
 *     'E' deprecated" and the line "Please use KEY=VALUE instead"; "help"
 *     and "?" are KEY=on without the warning.  A trailing comma adds
 *     nothing.
 *  2. qemu-img's and qemu-nbd's --image-opts read the first element
 *     without '=' (up to the first single comma, ",," a comma in it) as
 *     the value of "file" -- a node reference, which the library refuses
 *     with QEMU's "Cannot find device=..." (api/json-name.c invariant 5);
 *     qemu-io's --image-opts and open -o have no such implied key, their
 *     first element is a short-form boolean too.
 *  3. Whether an element has a value is decided at its first '=' or ','
 *     (",," included): in "a,,b=c" the first element is "a" (a flag, or
 *     the implied file "a,b=c").
 *  4. The first "id" is read before anything else (before the warnings of
 *     fact 1) and must be an identifier (a letter, then letters, digits,
 *     '-', '.', '_'): "Parameter 'id' expects an identifier" and a line
 *     saying what identifiers are, and nothing opened; a good id goes on
 *     to the open, whose format then refuses it as an option; a later id
 *     is dropped.
 */
#include "qimg-tool.h"

#include <errno.h>
#include <string.h>

/* Fact 1. */
void tool_opts_element(const char *e, bool report, char **key, char **value)
{
    const char *eq = strchr(e, '=');

    if (eq) {
        *key = g_strndup(e, (gsize)(eq - e));
        *value = g_strdup(eq + 1);
        return;
    }
    bool no = g_str_has_prefix(e, "no");
    *key = g_strdup(no ? e + 2 : e);
    *value = g_strdup(no ? "off" : "on");
    if (report && (no || (strcmp(e, "help") != 0 && strcmp(e, "?") != 0))) {
        tool_warning(
            "short-form boolean option '%s' deprecated\nPlease use %s=%s instead", e,
            *key, *value);
    }
}

/* A value up to the next single comma, ",," a comma (fact 3). */
static const char *read_value(const char *p, GString *v)
{
    for (; *p; p++) {
        if (*p == ',') {
            if (p[1] != ',') {
                break;
            }
            p++;
        }
        g_string_append_c(v, *p);
    }
    return p;
}

static bool id_wellformed(const char *id)
{
    if (!g_ascii_isalpha(*id)) {
        return false;
    }
    for (const char *p = id + 1; *p; p++) {
        if (!g_ascii_isalnum(*p) && !strchr("-._", *p)) {
            return false;
        }
    }
    return true;
}

const char *tool_opts_next(const char *list, const char *p, bool implied_file,
                           bool report, char **key, GString *val)
{
    size_t len = strcspn(p, "=,");

    g_string_truncate(val, 0);
    if (p[len] == '=') {
        *key = g_strndup(p, len);
        p = read_value(p + len + 1, val);
    } else if (p == list && implied_file) { /* fact 2 */
        *key = g_strdup("file");
        p = read_value(p, val);
    } else { /* fact 1; the name ends at the first comma (fact 3) */
        g_autofree char *e = g_strndup(p, len);
        g_autofree char *v = NULL;
        tool_opts_element(e, report, key, &v);
        g_string_assign(val, v);
        p += len;
    }
    return p + (*p == ',');
}

/* Fact 4: QEMU reads the first "id" before anything else (its warnings
 * too); a later one is dropped. */
static bool id_ok(const char *list, GError **err)
{
    g_autoptr(GString) val = g_string_new(NULL);

    for (const char *p = list; *p;) {
        g_autofree char *key = NULL;
        p = tool_opts_next(list, p, false, false, &key, val);
        if (strcmp(key, "id") == 0) {
            if (!id_wellformed(val->str)) {
                g_set_error_literal(err, QIMG_ERROR, EINVAL,
                                    "Parameter 'id' expects an identifier\nIdentifiers "
                                    "consist of letters, digits, '-', '.', '_', starting "
                                    "with a letter.");
                return false;
            }
            return true;
        }
    }
    return true;
}

char *tool_image_opts_list(const char *list, bool implied_file, bool report, GError **err)
{
    g_autoptr(GString) out = g_string_new(NULL);
    g_autoptr(GString) val = g_string_new(NULL);
    bool id_seen = false;

    if (!id_ok(list, err)) {
        return NULL;
    }
    for (const char *p = list; *p;) {
        g_autofree char *key = NULL;

        p = tool_opts_next(list, p, implied_file, report, &key, val);
        if (strcmp(key, "id") == 0 && id_seen) {
            continue;
        }
        id_seen = id_seen || strcmp(key, "id") == 0;
        if (out->len) {
            g_string_append_c(out, ',');
        }
        g_string_append_printf(out, "%s=", key);
        for (const char *c = val->str; *c; c++) { /* as the library reads it */
            g_string_append(out, *c == ',' ? ",," : (char[]){*c, 0});
        }
    }
    return g_string_free(g_steal_pointer(&out), false);
}

/* The library names the list it was given; the user gave name. */
static void rename_in_error(GError *err, const char *list, const char *name)
{
    g_autofree char *from = g_strdup_printf("'%s'", list);
    g_autofree char *to = g_strdup_printf("'%s'", name);
    const char *at = err ? strstr(err->message, from) : NULL;

    if (at) {
        char *m = g_strdup_printf("%.*s%s%s", (int)(at - err->message), err->message, to,
                                  at + strlen(from));
        g_free(err->message);
        err->message = m;
    }
}

QimgImage *tool_image_opts_open(const char *name, const QimgOpenOptions *oo,
                                bool implied_file, GError **err)
{
    g_autofree char *list = NULL;
    QimgImage *img;

    if (!oo->image_opts || !name) {
        return qimg_image_open(name, oo, err);
    }
    list = tool_image_opts_list(name, implied_file, true, err);
    if (!list) {
        return NULL;
    }
    img = qimg_image_open(list, oo, err);
    if (!img && err && strcmp(list, name) != 0) {
        rename_in_error(*err, list, name);
    }
    return img;
}

QimgImage *tool_qimg_image_open(const char *name, QimgOpenOptions *oo, GError **err)
{
    return tool_image_opts_open(name, oo, true, err);
}
