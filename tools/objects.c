/*
 * tools/objects.c: qemu-img's --object, for the one object type qimg
 * honours in its image commands: secret,id=ID,data=STRING|file=PATH
 * [,format=raw|base64][,keyid=ID,iv=IV].  The secrets are kept in a table
 * the commands look up by id (tool_secret_exists) and hand to the library
 * with their values (QimgOpenOptions.secret_values), kept in locked,
 * wiped memory (qimg_secret_new): an encrypt.key-secret (key-secret for
 * luks) names the passphrase of an encrypted image; an unreferenced secret
 * is accepted as qemu-img accepts it.  (qimg nbd has its own
 * tls-creds-x509 objects, tools/nbd.c.)
 *
 * Facts learnt from qemu-img 7.2 (qemu-img info --object ...):
 *  1. The definition is a key=value list split at ',' (",," is a comma);
 *     a first element without '=' is the type (qom-type=TYPE works too);
 *     a later one is "Expected '=' after parameter 'X'" unless it is
 *     "help"; keys given twice keep the last value; an empty element is
 *     skipped.
 *  2. "help" alone lists the object types, "TYPE,help" the type's
 *     properties; both exit 0 (qimg lists the one type it has).
 *  3. Checks, in order, with qemu-img's words: qom-type missing or not a
 *     type QEMU has; id missing; each property's value as it is set
 *     (format raw|base64, loaded not writable); an unexpected property;
 *     id not an identifier (a letter, then letters, digits, '-', '.',
 *     '_'); a duplicate id; then the secret's completion: file and data both,
 *     neither, the file unreadable (glib's message), base64 characters,
 *     keyid (missing, or the secret itself: "has no data").
 *  4. Object types QEMU has but qimg does not honour are refused (qimg
 *     names the type); nothing is accepted and ignored.
 *
 * QIMG_LUKS_MAX_ITERATIONS (qimg's own; the library reads no environment)
 * raises or lowers the PBKDF2 iterations a LUKS key slot may ask for
 * before qimg spends time on it (QimgOpenOptions.luks_max_iterations,
 * default 100 million): 1000 to 4294967295.
 */
#include "qimg-tool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static GHashTable *secrets; /* id -> GBytes (the secret's bytes) */

/* qemu-img 7.2's "List of user creatable objects" */
static const char *const qemu_types[] = {
    "authz-list",        "authz-list-file",   "authz-simple",
    "main-loop",         "pr-manager-helper", "secret",
    "secret_keyring",    "thread-context",    "throttle-group",
    "tls-cipher-suites", "tls-creds-anon",    "tls-creds-psk",
    "tls-creds-x509",
};

static const char *const secret_props[] = {"data", "file", "format", "iv", "keyid"};

static bool is_identifier(const char *s)
{
    if (!g_ascii_isalpha(s[0])) {
        return false;
    }
    for (const char *p = s + 1; *p; p++) {
        if (!g_ascii_isalnum(*p) && *p != '-' && *p != '.' && *p != '_') {
            return false;
        }
    }
    return true;
}

/* Fact 1: the elements, ",," unescaped. */
static GPtrArray *split_elements(const char *arg)
{
    GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
    GString *cur = g_string_new(NULL);

    for (const char *p = arg;; p++) {
        if (*p == ',' && p[1] == ',') {
            g_string_append_c(cur, ',');
            p++;
        } else if (*p == ',' || *p == '\0') {
            if (cur->len) {
                g_ptr_array_add(out, g_strdup(cur->str));
            }
            g_string_truncate(cur, 0);
            if (*p == '\0') {
                break;
            }
        } else {
            g_string_append_c(cur, *p);
        }
    }
    g_string_free(cur, TRUE);
    return out;
}

static bool known_type(const char *type)
{
    for (size_t i = 0; i < G_N_ELEMENTS(qemu_types); i++) {
        if (strcmp(qemu_types[i], type) == 0) {
            return true;
        }
    }
    return false;
}

static bool base64_chars_ok(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (!g_ascii_isalnum(s[i]) && s[i] != '+' && s[i] != '/' && s[i] != '=') {
            return false;
        }
    }
    return true;
}

/* Fact 3, the secret's completion: its bytes, or NULL with the message. */
static GBytes *secret_bytes(const char *id, GHashTable *props)
{
    const char *data = g_hash_table_lookup(props, "data");
    const char *file = g_hash_table_lookup(props, "file");
    const char *format = g_hash_table_lookup(props, "format");
    const char *keyid = g_hash_table_lookup(props, "keyid");
    g_autofree char *contents = NULL;
    gsize len;

    if (data && file) {
        tool_error("'file' and 'data' are mutually exclusive");
        return NULL;
    }
    if (!data && !file) {
        tool_error("Either 'file' or 'data' must be provided");
        return NULL;
    }
    if (file) {
        g_autoptr(GError) err = NULL;
        if (!g_file_get_contents(file, &contents, &len, &err)) {
            tool_error("Unable to read %s: %s", file, err->message);
            return NULL;
        }
    } else {
        contents = g_strdup(data);
        len = strlen(data);
    }
    if (format && strcmp(format, "base64") == 0) {
        if (!base64_chars_ok(contents, len)) {
            tool_error("Base64 data contains invalid characters");
            return NULL;
        }
        g_autofree char *text = g_strndup(contents, len);
        gsize n;
        guchar *raw = g_base64_decode(text, &n);
        explicit_bzero(text, len);
        explicit_bzero(contents, len);
        g_free(contents);
        contents = (char *)raw;
        len = n;
    }
    if (keyid) {
        if (strcmp(keyid, id) == 0) {
            tool_error("Secret with id '%s' has no data", keyid);
        } else if (!tool_secret_exists(keyid)) {
            tool_error("No secret with id '%s'", keyid);
        } else {
            /* the data is encrypted with that secret (libvirt's form) */
            tool_error("Secret '%s' is encrypted with secret '%s' (keyid): qimg does "
                       "not decrypt secrets; give its data in the clear",
                       id, keyid);
        }
        return NULL;
    }
    GBytes *bytes = qimg_secret_new(contents, len);
    explicit_bzero(contents, len);
    return bytes;
}

static void print_help(const char *type)
{
    if (!type) {
        printf("List of user creatable objects:\n  secret\n");
        return;
    }
    printf("secret options:\n");
    printf("  data=<string>\n  file=<string>\n  format=<QCryptoSecretFormat>\n");
    printf("  iv=<string>\n  keyid=<string>\n");
}

int tool_object_add(const char *arg)
{
    const int code = 1;
    g_autoptr(GPtrArray) el = split_elements(arg);
    g_autoptr(GHashTable) props =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autofree char *unexpected = NULL;
    const char *type = NULL, *id;
    bool help = false;
    GBytes *bytes;

    for (guint i = 0; i < el->len; i++) { /* fact 1 */
        const char *e = el->pdata[i];
        const char *eq = strchr(e, '=');
        if (!eq) {
            if (strcmp(e, "help") == 0 || strcmp(e, "?") == 0) {
                help = true;
            } else if (i == 0) {
                type = e;
            } else {
                tool_error("Expected '=' after parameter '%s'", e);
                return code;
            }
            continue;
        }
        g_hash_table_insert(props, g_strndup(e, (gsize)(eq - e)), g_strdup(eq + 1));
    }
    if (!type) {
        type = g_hash_table_lookup(props, "qom-type");
    }
    if (help && (!type || known_type(type))) { /* fact 2 */
        if (type && strcmp(type, "secret") != 0) {
            tool_error("Object type '%s' is not supported by qimg (only 'secret' is)",
                       type);
            return code;
        }
        print_help(type);
        return 0;
    }
    if (!type) { /* fact 3 */
        tool_error("Parameter 'qom-type' is missing");
        return code;
    }
    if (!known_type(type)) {
        tool_error("Parameter 'qom-type' does not accept value '%s'", type);
        return code;
    }
    id = g_hash_table_lookup(props, "id");
    if (!id) {
        tool_error("Parameter 'id' is missing");
        return code;
    }
    if (strcmp(type, "secret") != 0) { /* fact 4 */
        tool_error("Object type '%s' is not supported by qimg (only 'secret' is)", type);
        return code;
    }
    for (guint i = 0; i < el->len; i++) { /* in the order given */
        const char *e = el->pdata[i], *eq = strchr(e, '=');
        g_autofree char *k = eq ? g_strndup(e, (gsize)(eq - e)) : NULL;
        bool known = k && (strcmp(k, "qom-type") == 0 || strcmp(k, "id") == 0);
        if (!k) {
            continue;
        }
        for (size_t j = 0; j < G_N_ELEMENTS(secret_props); j++) {
            known = known || strcmp(k, secret_props[j]) == 0;
        }
        if (strcmp(k, "format") == 0 && strcmp(eq + 1, "raw") != 0 &&
            strcmp(eq + 1, "base64") != 0) {
            tool_error("Parameter 'format' does not accept value '%s'", eq + 1);
            return code;
        }
        if (strcmp(k, "loaded") == 0) {
            tool_error("Property 'secret.loaded' is not writable");
            return code;
        }
        if (!known && !unexpected) {
            unexpected = g_steal_pointer(&k);
        }
    }
    if (unexpected) {
        tool_error("Parameter '%s' is unexpected", unexpected);
        return code;
    }
    if (!is_identifier(id)) {
        tool_error("Parameter 'id' expects an identifier");
        fprintf(stderr, "Identifiers consist of letters, digits, '-', '.', '_', starting "
                        "with a letter.\n");
        return code;
    }
    if (tool_secret_exists(id)) {
        tool_error("attempt to add duplicate property '%s' to object (type 'container')",
                   id);
        return code;
    }
    bytes = secret_bytes(id, props);
    if (!bytes) {
        return code;
    }
    g_hash_table_insert(tool_secret_table(), g_strdup(id), bytes);
    return -1;
}

bool tool_secret_exists(const char *id)
{
    return secrets && g_hash_table_contains(secrets, id);
}

GHashTable *tool_secret_table(void)
{
    if (!secrets) {
        secrets = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                        (GDestroyNotify)g_bytes_unref);
    }
    return secrets;
}

/* QIMG_LUKS_MAX_ITERATIONS, or 0 (the library's default). */
static uint32_t luks_max_iterations(void)
{
    const char *v = getenv("QIMG_LUKS_MAX_ITERATIONS");
    char *end;
    guint64 n;

    if (!v) {
        return 0;
    }
    errno = 0;
    n = g_ascii_strtoull(v, &end, 10);
    if (!*v || *end || errno || n < 1000 || n > UINT32_MAX) {
        tool_error("QIMG_LUKS_MAX_ITERATIONS=%s: expected a number from 1000 to %u", v,
                   UINT32_MAX);
        exit(1);
    }
    return (uint32_t)n;
}

void tool_open_secrets(QimgOpenOptions *oo)
{
    oo->secret_values = tool_secret_table();
    oo->luks_max_iterations = luks_max_iterations();
}

void tool_create_secrets(QimgCreateOptions *co)
{
    co->secret_values = tool_secret_table();
    co->luks_max_iterations = luks_max_iterations();
}
