/*
 * api/json-opts.c: the option layer of json-name.c -- each key of a node's
 * options (a caller's json: name, --image-opts, qemu-io's open -o, as
 * json-flat.c and open-opts.c read them) mapped onto BlkOpenOptions and
 * checked, one key at a time, in key order.
 *
 * Owns: which keys a node of a format takes (api_json_keys), the
 * backing/data-file keys handed back to json-name.c (its invariant 5), the
 * options waiting for a probed format, and what a JSON null means.
 *
 * Invariants (cited as "json-opts.c invariant N"):
 *  1. Every key is honoured or refused: an unknown key is QEMU's "Block
 *     format 'FMT' does not support the option 'KEY'"; an option QEMU has
 *     and qimg cannot honour (another protocol, a node reference, a
 *     backing or data file given by options where json-name.c invariant 5
 *     does not take them) is refused with a message naming it.  Nothing is
 *     accepted and ignored (but a null, invariant 4, as QEMU).
 *  2. Values are QEMU's: strings, numbers, JSON booleans or "on"/"off";
 *     a bad one is "Parameter 'KEY' expects ...".
 *  3. Without a driver (the format is probed), an option that is not the
 *     generic ones is kept (BlkOpenOptions.format_opts) and checked
 *     against the format found (open.c invariant 5), as QEMU applies a
 *     probed format's options.
 *  4. A JSON null for an option of the node (locking, read-only, aio,
 *     l2-cache-size, node-name, ...: whatever apply_key takes, refused
 *     options too) is no option at all, as QEMU skips a null where it
 *     reads its options; a null for a key that is no option of the node is
 *     still "does not support the option" (invariant 1).  One rule for
 *     every key: the key is tried on a scratch copy and only that answer
 *     kept.  "backing": null keeps its meaning (no backing file); driver,
 *     file and filename are json-flat.c's invariant 3.  Without a driver,
 *     a null option is kept for the probed format (invariant 3) without a
 *     value: checked against the format found ("Block format 'raw' does
 *     not support the option 'lazy-refcounts'", as qemu-img), not applied.
 *     Two nulls keep a trace: the key-secret's (named, refused by an
 *     encrypted image) and a qcow2 encrypt.* key other than format and
 *     key-secret (refused by an encrypted image: qcow2 header.c inv. 7).
 *  5. read-only given by the options against the caller's open, as QEMU
 *     (its BlockBackend asks for what the caller asked): read-only=on when
 *     the caller writes is "Block node is read-only"; read-only=off with
 *     force-share (the caller's or the options') is "force-share=on can
 *     only be used with read-only images"; read-only=off when the caller
 *     only reads opens the image read-write (its locks too), as QEMU's
 *     node is (qemu-io -r then writes).
 */
#include "api/api.h"

#include <errno.h>
#include <string.h>

/* api_json_keys' state while it takes the keys one by one (apply_key). */
typedef struct KeyCtx {
    BlkOpenOptions *o;
    const ApiApplyHow *how;
    GHashTable *bsub, *dsub;
    const char *driver, *file;
    bool caller_no_backing, direct, no_flush, cache_set;
    int read_only; /* the option's value (invariant 5), -1: not given */
} KeyCtx;

/* One key of apply()'s options onto c: 0, -1 (error set), or 1: the key
 * is no option of the node (QEMU's "does not support the option", error
 * set; invariant 1). */
static int apply_key(KeyCtx *c, const char *key, const char *value, GError **error)
{
    BlkOpenOptions *o = c->o;
    const ApiApplyHow *how = c->how;
    ApiOpenLayers *layers = how->layers;
    const char *driver = c->driver, *file = c->file;
    int r;

    if (strcmp(key, "read-only") == 0) {
        bool ro;
        if (!api_parse_bool(key, value, &ro, error)) {
            return -1;
        }
        c->read_only = ro;
    } else if (strcmp(key, "cache.direct") == 0 ||
               strcmp(key, "file.cache.direct") == 0) {
        if (!api_parse_bool(key, value, &c->direct, error)) {
            return -1;
        }
        c->cache_set = true;
    } else if (strcmp(key, "cache.no-flush") == 0 ||
               strcmp(key, "file.cache.no-flush") == 0) {
        if (!api_parse_bool(key, value, &c->no_flush, error)) {
            return -1;
        }
        c->cache_set = true;
    } else if (strcmp(key, "backing") == 0 && !*value) {
        o->no_backing = true;                           /* "backing": null */
    } else if (layers && strcmp(key, "backing") == 0) { /* json-name.c invariant 5 */
        if (c->caller_no_backing) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Block format '%s' does not support the option 'backing'",
                        driver ? driver : "raw");
        } else {
            g_set_error(error, QIMG_ERROR, ENODEV,
                        "Could not open backing file: Cannot find device='%s' nor "
                        "node-name='%s'",
                        value, value);
        }
        return -1;
    } else if (layers && strcmp(key, "data-file") == 0) {
        g_set_error(error, QIMG_ERROR, ENODEV,
                    "Cannot find device='%s' nor node-name='%s'", value, value);
        return -1;
    } else if (layers && (g_str_has_prefix(key, "backing.") ||
                          g_str_has_prefix(key, "data-file."))) {
        bool b = key[0] == 'b';
        g_hash_table_insert(b ? c->bsub : c->dsub,
                            g_strdup(key + strlen(b ? "backing." : "data-file.")),
                            g_strdup(value));
    } else if (strcmp(key, "backing") == 0 || g_str_has_prefix(key, "backing.") ||
               strcmp(key, "data-file") == 0 || g_str_has_prefix(key, "data-file.")) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "qimg takes the backing and data files from the image, not from "
                    "options ('%s')",
                    key);
        return -1;
    } else if (driver && strcmp(driver, "qcow2") == 0 &&
               strcmp(key, "encrypt.key-secret") == 0) {
        o->key_secret = g_intern_string(value); /* qcow2.c invariant 10 */
    } else if (driver && strcmp(driver, "luks") == 0 && strcmp(key, "key-secret") == 0) {
        o->key_secret = g_intern_string(value); /* luks/luks.c invariant 1 */
    } else if (strcmp(key, "file.align") == 0 && file &&
               g_str_has_prefix(file, "blkdebug:")) { /* json-name.c inv. 13 */
        if (!api_blkdebug_align(value, o, error)) {
            return -1;
        }
    } else if (g_str_has_prefix(key, "file.")) {
        if ((r = api_file_option(key + strlen("file."), value, o, error)) != 0) {
            return r;
        }
    } else if ((r = api_runtime_option(driver, key, value, o, error)) != 0) {
        if (r < 0) {
            return -1;
        }
    } else if (!driver && how->defer) { /* invariant 3 */
        if (!*how->defer) {
            *how->defer = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        }
        g_hash_table_insert(*how->defer, g_strdup(key), g_strdup(value));
        o->format_opts = *how->defer;
    } else {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Block format '%s' does not support the option '%s'",
                    driver ? driver : "raw", key);
        return 1;
    }
    return 0;
}

/* Invariant 4: key's value was JSON null in the caller's json: name. */
static bool json_null(const ApiApplyHow *how, const char *key)
{
    const char *t = how->layers && how->layers->json_typed
                        ? g_hash_table_lookup(how->layers->json_typed, key)
                        : NULL;
    return t && strcmp(t, "null") == 0;
}

/* Invariant 4: a null option of the node is none (as QEMU, which skips
 * it); a null key that is no option of the node is still refused.  The key
 * is tried with "" on a scratch copy of everything apply_key changes, and
 * only its "no such option" answer is kept, or, without a driver, its
 * place among the probed format's options (invariant 3), with no value. */
static bool null_option_refused(const KeyCtx *c, const char *key, GError **error)
{
    BlkOpenOptions o = *c->o;
    GHashTable *defer = NULL;
    ApiApplyHow how = *c->how;
    KeyCtx scratch = *c;
    g_autoptr(GHashTable) bsub =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GHashTable) dsub =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_autoptr(GError) local = NULL;

    how.defer = c->how->defer ? &defer : NULL;
    o.key_secret = NULL; /* set below: the key is the key-secret */
    scratch.o = &o;
    scratch.how = &how;
    scratch.bsub = bsub;
    scratch.dsub = dsub;
    int r = apply_key(&scratch, key, "", &local);
    if (r == 0 && o.key_secret) { /* QEMU keeps it, null, in the name */
        c->o->key_secret = NULL;
        c->o->key_secret_null = true;
    }
    if (r == 0 && !c->o->encrypt_unexpected) {
        /* a null qcow2 encrypt.* key: an encrypted image refuses it */
        c->o->encrypt_unexpected = o.encrypt_unexpected;
    }
    if (r == 0 && defer && g_hash_table_contains(defer, key)) {
        /* kept for the probed format, a NULL value: checked, not applied
         * (invariant 3; api_format_options) */
        if (!*c->how->defer) {
            *c->how->defer =
                g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        }
        g_hash_table_insert(*c->how->defer, g_strdup(key), NULL);
        c->o->format_opts = *c->how->defer;
    }
    g_clear_pointer(&defer, g_hash_table_unref);
    if (r == 1) {
        g_propagate_error(error, g_steal_pointer(&local));
        return true;
    }
    return false;
}

/* raw's offset and size as QEMU names the node (raw/raw.c invariant 6):
 * their JSON text, null included (invariant 4), a string quoted. */
static void raw_window_texts(GHashTable *flat, const ApiApplyHow *how, const char *driver,
                             BlkOpenOptions *o)
{
    static const char *const keys[] = {"offset", "size"};

    if (driver && strcmp(driver, "raw") != 0) {
        return;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(keys); i++) {
        const char *v = g_hash_table_lookup(flat, keys[i]);
        const char *t = how->layers && how->layers->json_typed
                            ? g_hash_table_lookup(how->layers->json_typed, keys[i])
                            : NULL;
        if (!v) {
            continue;
        }
        g_autofree char *e = g_strescape(v, NULL);
        g_autofree char *q = g_strdup_printf("\"%s\"", e);
        const char *text = g_intern_string(t ? t : q);
        *(i == 0 ? &o->raw_offset_text : &o->raw_size_text) = text;
    }
}

/* Invariants 1-4: flat's keys onto *o (api.h). */
gboolean api_json_keys(GHashTable *flat, const ApiApplyHow *how, const char *driver,
                       const char *file, bool by_filename, GHashTable *bsub,
                       GHashTable *dsub, BlkOpenOptions *o, GError **error)
{
    /* in key order: the first refused key is the same on every run */
    KeyCtx c = {.o = o,
                .how = how,
                .bsub = bsub,
                .dsub = dsub,
                .driver = driver,
                .file = file,
                .caller_no_backing = o->no_backing,
                .direct = o->cache == BLK_CACHE_NONE || o->cache == BLK_CACHE_DIRECTSYNC,
                .no_flush = o->cache == BLK_CACHE_UNSAFE,
                .read_only = -1};
    g_autoptr(GList) keys =
        g_list_sort(g_hash_table_get_keys(flat), (GCompareFunc)strcmp);
    for (GList *l = keys; l; l = l->next) {
        const char *key = l->data, *value = g_hash_table_lookup(flat, key);
        if (strcmp(key, "driver") == 0 || strcmp(key, "file.filename") == 0 ||
            strcmp(key, "file.driver") == 0 || strcmp(key, "file") == 0 ||
            (strcmp(key, "filename") == 0 && by_filename)) {
            continue;
        }
        if (json_null(how, key) && strcmp(key, "backing") != 0) {
            if (null_option_refused(&c, key, error)) { /* invariant 4 */
                return FALSE;
            }
            continue;
        }
        if (apply_key(&c, key, value, error) != 0) {
            return FALSE;
        }
    }
    if (c.read_only == 1 && !o->read_only && !how->from_image) { /* invariant 5 */
        g_set_error(error, QIMG_ERROR, EACCES, "Block node is read-only");
        return FALSE;
    }
    if (c.read_only == 0 && o->force_share && !how->from_image) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "force-share=on can only be used with read-only images");
        return FALSE;
    }
    if (c.read_only >= 0 && !how->from_image) {
        o->read_only = c.read_only == 1;
    }
    if (c.cache_set && c.direct && c.no_flush) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "cache.direct=on with cache.no-flush=on is not supported by qimg");
        return FALSE;
    }
    if (c.cache_set) {
        o->cache = c.direct     ? BLK_CACHE_NONE
                   : c.no_flush ? BLK_CACHE_UNSAFE
                                : BLK_CACHE_WRITEBACK;
    }
    raw_window_texts(flat, how, driver, o);
    return TRUE;
}
