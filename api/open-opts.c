/*
 * api/open-opts.c: the option syntax of a caller's image name and the
 * runtime options json-name.c hands over one key at a time -- QEMU's
 * key=value lists (--image-opts, qemu-io's open -o), node names, sizes,
 * and the qcow2 runtime options (QEMU's JSON is json-parse.c's).
 *
 * Owns: parsing key=value lists and mapping the generic and qcow2 runtime options onto
 * BlkOpenOptions, and the file protocol's own options (api_file_option).
 *
 * Facts learnt from running qemu-io/qemu-img 7.2 (not from its source):
 *  1. A key=value list splits at single commas; ",," is a literal comma;
 *     a repeated key takes the last value; a trailing comma adds nothing;
 *     an empty key is a key (QEMU's "does not support the option ''").
 *     (An element without '=' is the tools' to read: tools/image-opts.c.)
 *  2. (QEMU's JSON dialect, single-quoted strings: json-parse.c fact 1.)
 *  3. node-name (any node's: node-name, file.node-name, ...) starts with a
 *     letter, then letters, digits, '-', '.', '_': "Invalid node-name:
 *     'X'"; 32 characters or more: "Node name too long".
 *  4. Sizes (cache-size, l2-cache-size, refcount-cache-size,
 *     l2-cache-entry-size) are qemu_strtosz's: "Parameter 'K' expects a
 *     non-negative number below 2^64" and the suffix hint; 2^64 or more:
 *     "Value 'V' is out of range for parameter 'K'".
 *  5. Booleans are on/off (JSON true/false): "Parameter 'K' expects 'on'
 *     or 'off'".  discard is ignore/off/unmap/on ("Invalid discard
 *     option"); detect-zeroes off/on/unmap.
 *  6. qcow2's overlap-check is a template (none, constant, cached, all:
 *     "Unsupported value 'X' for qcow2 option 'overlap-check'. Allowed are
 *     any of the following: none, constant, cached, all"), also as
 *     overlap-check.template, and overlap-check.KIND=on|off switches one
 *     kind of metadata (main-header, active-l1, ..., bitmap-directory).
 *  7. Numbers (cache-clean-interval) are qemu_strtou64's, any base: a
 *     leading '-' wraps ("-1" is 2^64-1); no digits or anything after
 *     them: "Parameter 'K' expects a number"; 2^64 or more: "Value 'V' is
 *     too large for parameter 'K'".
 *  8. vpc's force_size_calc is "chs" or "current_size" (anything else,
 *     "" too: "Invalid size calculation mode: 'X'"); it picks how the
 *     virtual size is read from the footer (vpc/codec.c invariant 2).
 *
 * Invariants (cited as "open-opts.c invariant N"):
 *  1. Every option QEMU 7.2 has for the nodes qimg opens is honoured or
 *     refused with a message naming it (json-opts.c invariant 1): node
 *     names are checked and kept nowhere (qimg has no command that refers
 *     to a node by name, so a name changes nothing); lazy-refcounts and
 *     the cache sizes reach the qcow2 driver (qcow2.c invariant 5);
 *     overlap-check the qcow2 driver's overlap checks (meta.c invariant
 *     1); pass-discard-request, -snapshot and -other what the qcow2 driver
 *     gives back to the file (qcow2 alloc.c invariant 9); force-share is
 *     the open's force_share; discard=unmap and detect-zeroes=off are what
 *     qimg does; cache-clean-interval the qcow2 driver's timer (qcow2/clean.c); the
 *     rest QEMU has (auto-read-only=on, discard=ignore, detect-zeroes=on)
 *     is refused.
 *  2. driver=copy-on-read is QEMU's filter over one child ("file"): the
 *     child's options become the image's and the image is opened with
 *     copy-on-read (api/image.c invariant 4, block/cor.c); the filter's
 *     generic options go to the image unless its own set them, and its
 *     "bottom" (a copy that stops at a node of the chain) is refused; a
 *     child without a driver is the file protocol (invariant 3), as in
 *     QEMU, where a filter's child is never probed.
 *  3. driver=file, host_device or host_cdrom names the file protocol as
 *     the image (qimg's format "file"); as QEMU's open, which checks the
 *     kind of file after open(2): "'file' driver requires 'F' to be a
 *     regular file", "'host_device' driver requires 'F' to be either a
 *     character or block device" -- except for a directory opened
 *     read-write, whose open fails first ("Is a directory").
 */
#include "api/api.h"
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

gboolean api_opts_list_parse(const char *list, GHashTable *flat, GError **error)
{
    g_autoptr(GString) cur = g_string_new(NULL);

    /* fact 1 */
    for (const char *p = list;; p++) {
        if (*p == ',' && p[1] == ',') {
            g_string_append_c(cur, ',');
            p++;
            continue;
        }
        if (*p && *p != ',') {
            g_string_append_c(cur, *p);
            continue;
        }
        char *eq = strchr(cur->str, '=');
        if (!*p && !cur->len) { /* a trailing comma, or no option */
            return TRUE;
        }
        if (!eq) { /* "KEY=" is a value; an empty KEY one no node has */
            g_set_error(error, QIMG_ERROR, EINVAL, "Invalid parameter '%s'", cur->str);
            return FALSE;
        }
        g_hash_table_insert(flat, g_strndup(cur->str, (gsize)(eq - cur->str)),
                            g_strdup(eq + 1));
        g_string_truncate(cur, 0);
        if (!*p) {
            return TRUE;
        }
    }
}

gboolean api_parse_bool(const char *key, const char *v, bool *out, GError **error)
{
    if (strcmp(v, "on") == 0 || strcmp(v, "true") == 0) {
        *out = true;
    } else if (strcmp(v, "off") == 0 || strcmp(v, "false") == 0) {
        *out = false;
    } else { /* fact 5 */
        g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' expects 'on' or 'off'",
                    key);
        return FALSE;
    }
    return TRUE;
}

/* Fact 4. */
gboolean api_parse_size(const char *key, const char *v, uint64_t *out, GError **error)
{
    bool hex;
    int ret = blk_strtosz(v, out, &hex);

    if (ret == -ERANGE) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Value '%s' is out of range for parameter '%s'", v, key);
        return FALSE;
    }
    if (ret < 0) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Parameter '%s' expects a non-negative number below 2^64\n"
                    "Optional suffix k, M, G, T, P or E means kilo-, mega-, giga-, "
                    "tera-, peta-\nand exabytes, respectively.",
                    key);
        return FALSE;
    }
    return TRUE;
}

/* Fact 7 (QEMU's number options). */
gboolean api_parse_number(const char *key, const char *v, uint64_t *out, GError **error)
{
    char *end = NULL;

    errno = 0;
    *out = g_ascii_strtoull(v, &end, 0);
    if (end == v || *end) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' expects a number", key);
        return FALSE;
    }
    if (errno == ERANGE) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Value '%s' is too large for parameter '%s'", v, key);
        return FALSE;
    }
    return TRUE;
}

gboolean api_blkdebug_align(const char *value, BlkOpenOptions *o, GError **error)
{
    uint64_t a;

    if (!api_parse_size("align", value, &a, error)) {
        return FALSE;
    }
    if (a && (a >= INT32_MAX || (a & (a - 1)))) { /* QEMU's blkdebug_open */
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Cannot meet constraints with align %" PRIu64, a);
        return FALSE;
    }
    o->blkdebug_align = a;
    return TRUE;
}

/* QEMU's null-co/null-aio options (block/null.c): 1 taken, 0 not one of
 * them, -1 a bad value. */
static int null_option(const char *key, const char *value, BlkOpenOptions *o,
                       GError **error)
{
    if (strcmp(key, "size") == 0) {
        if (!api_parse_size(key, value, &o->null_size, error)) {
            return -1;
        }
        o->null_size_set = true;
        return 1;
    }
    if (strcmp(key, "read-zeroes") == 0) {
        return api_parse_bool(key, value, &o->null_read_zeroes, error) ? 1 : -1;
    }
    if (strcmp(key, "latency-ns") == 0) {
        char *end = NULL;
        errno = 0;
        o->null_latency_ns = g_ascii_strtoull(value, &end, 0);
        if (!*value || *end || errno || *value == '-') {
            g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' expects a number",
                        key);
            return -1;
        }
        return 1;
    }
    return 0;
}

gboolean api_node_name_ok(const char *name, GError **error)
{
    bool ok = g_ascii_isalpha(name[0]);

    for (const char *p = name; ok && *p; p++) {
        ok = g_ascii_isalnum(*p) || *p == '-' || *p == '.' || *p == '_';
    }
    if (!ok) { /* fact 3 */
        g_set_error(error, QIMG_ERROR, EINVAL, "Invalid node-name: '%s'", name);
        return FALSE;
    }
    if (strlen(name) >= 32) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Node name too long");
        return FALSE;
    }
    return TRUE;
}

/* qcow2's own keys: 1 handled, 0 not one of them, -1 error set. */
static int qcow2_option(const char *key, const char *value, BlkOpenOptions *o,
                        GError **error)
{
    bool b;

    if (strcmp(key, "lazy-refcounts") == 0) {
        if (!api_parse_bool(key, value, &b, error)) {
            return -1;
        }
        o->lazy_refcounts = b ? 1 : -1;
        return 1;
    }
    if (g_str_has_prefix(key, "pass-discard-")) { /* qcow2 alloc.c invariant 9 */
        int *pass = strcmp(key, "pass-discard-request") == 0 ? &o->pass_discard_request
                    : strcmp(key, "pass-discard-snapshot") == 0
                        ? &o->pass_discard_snapshot
                    : strcmp(key, "pass-discard-other") == 0 ? &o->pass_discard_other
                                                             : NULL;
        if (pass) {
            if (!api_parse_bool(key, value, &b, error)) {
                return -1;
            }
            *pass = b ? 1 : -1;
            return 1;
        }
    }
    if (strcmp(key, "cache-size") == 0) {
        o->metadata_cache_size_set = true;
        return api_parse_size(key, value, &o->metadata_cache_size, error) ? 1 : -1;
    }
    if (strcmp(key, "l2-cache-size") == 0) {
        o->l2_cache_size_set = true;
        return api_parse_size(key, value, &o->l2_cache_size, error) ? 1 : -1;
    }
    if (strcmp(key, "refcount-cache-size") == 0) {
        o->refcount_cache_size_set = true;
        return api_parse_size(key, value, &o->refcount_cache_size, error) ? 1 : -1;
    }
    if (strcmp(key, "l2-cache-entry-size") == 0) {
        o->l2_cache_entry_size_set = true;
        return api_parse_size(key, value, &o->l2_cache_entry_size, error) ? 1 : -1;
    }
    if (strcmp(key, "cache-clean-interval") == 0) {
        o->cache_clean_interval_set = true;
        return api_parse_number(key, value, &o->cache_clean_interval, error) ? 1 : -1;
    }
    if (strcmp(key, "overlap-check") == 0 || strcmp(key, "overlap-check.template") == 0) {
        unsigned kinds;
        if (!qcow2_overlap_template(value, &kinds)) { /* fact 6 */
            g_set_error(
                error, QIMG_ERROR, EINVAL,
                "Unsupported value '%s' for qcow2 option 'overlap-check'. Allowed "
                "are any of the following: none, constant, cached, all",
                value);
            return -1;
        }
        if (o->overlap_template && strcmp(o->overlap_template, value) != 0) {
            bool first = strcmp(key, "overlap-check") == 0; /* keys come sorted */
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Conflicting values for qcow2 options 'overlap-check' ('%s') and "
                        "'overlap-check.template' ('%s')",
                        first ? value : o->overlap_template,
                        first ? o->overlap_template : value);
            return -1;
        }
        o->overlap_set = true;
        o->overlap_kinds = kinds;
        o->overlap_template = g_intern_string(value);
        return 1;
    }
    unsigned kind;
    if (g_str_has_prefix(key, "overlap-check.") &&
        qcow2_overlap_kind(key + strlen("overlap-check."), &kind)) {
        if (!api_parse_bool(key, value, &b, error)) {
            return -1;
        }
        o->overlap_on = b ? o->overlap_on | kind : o->overlap_on & ~kind;
        o->overlap_off = b ? o->overlap_off & ~kind : o->overlap_off | kind;
        return 1;
    }
    if (strcmp(key, "encrypt.key-secret") == 0) {
        o->key_secret = g_intern_string(value); /* qcow2.c invariant 10 */
        return 1;
    }
    if (strcmp(key, "encrypt.format") == 0) { /* qcow2 header.c invariant 7 */
        o->encrypt_format = g_intern_string(value);
        return 1;
    }
    if (g_str_has_prefix(key, "encrypt.")) { /* the same: the first one */
        if (!o->encrypt_unexpected) {
            o->encrypt_unexpected = g_intern_string(key + strlen("encrypt."));
        }
        return 1;
    }
    return 0;
}

int api_runtime_option(const char *driver, const char *key, const char *value,
                       BlkOpenOptions *o, GError **error)
{
    bool b;

    if (strcmp(key, "node-name") == 0) { /* invariant 1: checked, changes nothing */
        return api_node_name_ok(value, error) ? 1 : -1;
    }
    if (strcmp(key, "force-share") == 0) {
        if (!api_parse_bool(key, value, &b, error)) {
            return -1;
        }
        o->force_share = o->force_share || b;
        return 1;
    }
    if (strcmp(key, "auto-read-only") == 0) {
        if (!api_parse_bool(key, value, &b, error)) {
            return -1;
        }
        if (b) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "auto-read-only=on is not supported by qimg");
            return -1;
        }
        return 1;
    }
    if (strcmp(key, "discard") == 0) { /* fact 5 */
        if (strcmp(value, "unmap") == 0 || strcmp(value, "on") == 0) {
            return 1; /* what qimg does */
        }
        if (strcmp(value, "ignore") == 0 || strcmp(value, "off") == 0) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "discard=%s is not supported by qimg: discards always reach the "
                        "file",
                        value);
        } else {
            g_set_error(error, QIMG_ERROR, EINVAL, "Invalid discard option");
        }
        return -1;
    }
    if (strcmp(key, "detect-zeroes") == 0) {
        if (strcmp(value, "off") == 0) {
            return 1; /* what qimg does */
        }
        if (strcmp(value, "on") == 0 || strcmp(value, "unmap") == 0) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "detect-zeroes=%s is not supported by qimg", value);
        } else {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Parameter 'detect-zeroes' does not accept value '%s'", value);
        }
        return -1;
    }
    if (driver && strcmp(driver, "qcow2") == 0) {
        return qcow2_option(key, value, o, error);
    }
    if (driver && (strcmp(driver, "null-co") == 0 || strcmp(driver, "null-aio") == 0)) {
        return null_option(key, value, o, error);
    }
    if (driver && strcmp(driver, "raw") == 0 &&
        (strcmp(key, "offset") == 0 || strcmp(key, "size") == 0)) { /* raw.c inv. 6 */
        bool off = key[0] == 'o';
        if (!api_parse_size(key, value, off ? &o->raw_offset : &o->raw_size, error)) {
            return -1;
        }
        o->raw_size_set = o->raw_size_set || !off;
        return 1;
    }
    if (driver && strcmp(driver, "luks") == 0 && strcmp(key, "key-secret") == 0) {
        o->key_secret = g_intern_string(value); /* luks/luks.c invariant 1 */
        return 1;
    }
    if (driver && strcmp(driver, "vpc") == 0 && strcmp(key, "force_size_calc") == 0) {
        if (strcmp(value, "chs") == 0) { /* fact 8 */
            o->vpc_size_calc = BLK_VPC_SIZE_CHS;
        } else if (strcmp(value, "current_size") == 0) {
            o->vpc_size_calc = BLK_VPC_SIZE_CURRENT;
        } else {
            g_set_error(error, QIMG_ERROR, EINVAL, "Invalid size calculation mode: '%s'",
                        value);
            return -1;
        }
        return 1;
    }
    return 0;
}

gboolean api_format_options(const char *format, BlkOpenOptions *o, GError **error)
{
    g_autoptr(GList) keys = NULL;
    GHashTable *opts = o->format_opts;

    o->format_opts = NULL;
    if (!opts) {
        return TRUE;
    }
    keys = g_list_sort(g_hash_table_get_keys(opts), (GCompareFunc)strcmp);
    for (GList *l = keys; l; l = l->next) {
        const char *v = g_hash_table_lookup(opts, l->data);
        BlkOpenOptions scratch = *o;
        g_autoptr(GError) local = NULL;
        scratch.key_secret = NULL; /* set: the null is the key-secret */
        /* a JSON null (json-opts.c invariant 4): is it an option, nothing more */
        int r = v ? api_runtime_option(format, l->data, v, o, error)
                  : api_runtime_option(format, l->data, "", &scratch, &local);
        if (!v && r < 0) {
            continue; /* an option of the format's, its value none */
        }
        if (!v && r > 0 && scratch.key_secret) { /* json-opts.c invariant 4 */
            o->key_secret = NULL;
            o->key_secret_null = true;
        }
        if (!v && r > 0 && !o->encrypt_unexpected) { /* the same */
            o->encrypt_unexpected = scratch.encrypt_unexpected;
        }
        if (r < 0) {
            return FALSE;
        }
        if (r == 0) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Block format '%s' does not support the option '%s'", format,
                        (const char *)l->data);
            return FALSE;
        }
    }
    return TRUE;
}

GHashTable *api_cor_filter_child(GHashTable *flat, GError **error)
{
    GHashTable *child = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    GHashTableIter it;
    gpointer k, v;

    g_hash_table_iter_init(&it, flat); /* invariant 2: the child's first */
    while (g_hash_table_iter_next(&it, &k, &v)) {
        if (g_str_has_prefix(k, "file.")) {
            g_hash_table_insert(child, g_strdup((char *)k + strlen("file.")),
                                g_strdup(v));
        }
    }
    g_hash_table_iter_init(&it, flat);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        const char *key = k;
        if (g_str_has_prefix(key, "file.") || strcmp(key, "driver") == 0) {
            continue;
        }
        if (strcmp(key, "bottom") == 0) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "The copy-on-read option 'bottom' is not supported by qimg");
            g_hash_table_destroy(child);
            return NULL;
        }
        if (!g_hash_table_contains(child, key)) {
            g_hash_table_insert(child, g_strdup(key), g_strdup(v));
        }
    }
    if (!g_hash_table_contains(child, "driver")) {
        g_hash_table_insert(child, g_strdup("driver"), g_strdup("file"));
    }
    return child;
}

gboolean api_file_driver_top(const char *driver)
{
    return driver && (strcmp(driver, "file") == 0 || strcmp(driver, "host_device") == 0 ||
                      strcmp(driver, "host_cdrom") == 0);
}

/* The options of any node, not of its driver (invariant 3). */
static const char *const node_options[] = {
    "read-only",    "auto-read-only", "force-share", "node-name",
    "cache.direct", "cache.no-flush", "discard",     "detect-zeroes",
};

gboolean api_node_option(const char *key)
{
    for (size_t i = 0; i < G_N_ELEMENTS(node_options); i++) {
        if (strcmp(key, node_options[i]) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

GHashTable *api_file_driver_child(GHashTable *flat)
{
    GHashTable *child = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    GHashTableIter it;
    gpointer k, v;

    g_hash_table_iter_init(&it, flat);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        const char *key = k;
        /* a name given beside, or a node's option */
        bool generic = strcmp(key, "file.filename") == 0 || api_node_option(key);
        if (strcmp(key, "driver") != 0) {
            g_hash_table_insert(child,
                                generic ? g_strdup(key) : g_strconcat("file.", key, NULL),
                                g_strdup(v));
        }
    }
    return child;
}

gboolean api_file_driver_check(const char *driver, const char *path, bool read_only,
                               GError **error)
{
    struct stat st;
    bool regular = strcmp(driver, "file") == 0;

    if (!path || stat(path, &st) < 0 || (S_ISDIR(st.st_mode) && !read_only)) {
        return TRUE; /* the open says why */
    }
    if (regular && !S_ISREG(st.st_mode)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "'file' driver requires '%s' to be a regular file", path);
        return FALSE;
    }
    if (!regular && !S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "'%s' driver requires '%s' to be either a character or block device",
                    driver, path);
        return FALSE;
    }
    return TRUE;
}

/* QEMU 7.2's file protocol options qimg does not have (json-opts.c invariant 1). */
static const char *const file_refused[] = {
    "aio", "aio-max-batch", "pr-manager", "x-check-cache-dropped", "drop-cache",
};

/* The file protocol's own options (key without "file."; its filename,
 * driver and cache options are apply()'s): -1 with the error set, 1 (error
 * set) for a key that is none of them.
 * locking: QEMU's on, off (no image locks: block/lock.c invariant 6) and
 * auto (on: qimg's locks are OFD locks, which Linux always has). */
int api_file_option(const char *key, const char *value, BlkOpenOptions *o, GError **error)
{
    if (strcmp(key, "node-name") == 0) { /* open-opts.c invariant 1 */
        return api_node_name_ok(value, error) ? 0 : -1;
    }
    if (strcmp(key, "locking") == 0) {
        if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0 &&
            strcmp(value, "auto") != 0) {
            g_set_error(error, QIMG_ERROR, EINVAL, "invalid parameter value: %s", value);
            return -1;
        }
        o->no_locking = strcmp(value, "off") == 0;
        return 0;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(file_refused); i++) {
        if (strcmp(key, file_refused[i]) == 0) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "The file option '%s' is not supported by qimg", key);
            return -1;
        }
    }
    g_set_error(error, QIMG_ERROR, EINVAL,
                "Block protocol 'file' doesn't support the option '%s'", key);
    return 1; /* no option of the file protocol */
}
