/*
 * qcow2/create-params.c: the qcow2 create options (part of create.c's
 * design).
 *
 * Owns: the options qemu-img create -f qcow2 accepts (compat, cluster_size,
 * refcount_bits, lazy_refcounts, compression_type, extended_l2,
 * preallocation, data_file, data_file_raw, backing_file, backing_fmt,
 * size, encrypt.*), their parsing and their checks with qemu-img's
 * messages.
 *
 * Invariants: create.c's list, cited as "create.c invariant N"; this file
 * keeps 1 (every option checked before anything is laid out, in
 * qemu-img's order).
 */
#include "qcow2/create.h"

#include <errno.h>
#include <string.h>

/* ---- parameters ---- */
static const char *const known_options[] = {
    "compat",
    "cluster_size",
    "refcount_bits",
    "lazy_refcounts",
    "compression_type",
    "extended_l2",
    "preallocation",
    "data_file",
    "data_file_raw",
    "backing_file",
    "backing_fmt",
    "size",
    /* encryption (encryption(); crypto/luks-options.c) */
    "encryption",
    "encrypt.format",
    "encrypt.key-secret",
    "encrypt.cipher-alg",
    "encrypt.cipher-mode",
    "encrypt.ivgen-alg",
    "encrypt.ivgen-hash-alg",
    "encrypt.hash-alg",
    "encrypt.iter-time",
};

static const char *opt_get(const BlkCreateOptions *opts, const char *key)
{
    return opts->options ? g_hash_table_lookup(opts->options, key) : NULL;
}

static bool opt_bool(const BlkCreateOptions *opts, const char *key)
{
    const char *v = opt_get(opts, key);
    return v && (strcmp(v, "on") == 0 || strcmp(v, "true") == 0 ||
                 strcmp(v, "yes") == 0 || strcmp(v, "y") == 0);
}

static int bad_value(const char *param, const char *value)
{
    blk_error(EINVAL, "Parameter '%s' does not accept value '%s'", param, value);
    return -EINVAL;
}

static int parse_number(const char *s, uint64_t *out)
{
    char *end;

    if (!s || !*s || strchr(s, '-')) {
        return -EINVAL;
    }
    errno = 0;
    *out = g_ascii_strtoull(s, &end, 0);
    return (errno || *end) ? -EINVAL : 0;
}

static int param_error(const char *msg)
{
    blk_error(EINVAL, "%s", msg);
    return -EINVAL;
}

/* qemu-img's checks of the encrypt options (create.c invariant 6), at its
 * visiting time: early, the format and iter-time as a number (QemuOpts);
 * late (after every other check, where qemu-img makes the volume), the
 * LUKS options, then the secret: named, and one the caller has.  Returns
 * 1 if encryption is asked for, 0, or -errno. */
static int encryption(const BlkCreateOptions *opts, bool late, CreateParams *p)
{
    const char *fmt = opt_get(opts, "encrypt.format"), *on = opt_get(opts, "encryption");
    const char *secret = opt_get(opts, "encrypt.key-secret");
    bool any = false;
    int ret;

    for (size_t i = 0; opts->options && i < G_N_ELEMENTS(known_options); i++) {
        any = any || (g_str_has_prefix(known_options[i], "encrypt.") &&
                      opt_get(opts, known_options[i]));
    }
    if (crypto_luks_iter_time_check(opts->options, "encrypt.") < 0) {
        return -EINVAL;
    }
    if (on && strcmp(on, "off") != 0 && strcmp(on, "no") != 0 &&
        strcmp(on, "false") != 0 && strcmp(on, "n") != 0) {
        if (fmt) {
            return param_error(
                "'encrypt.format' and its alias 'encryption' can't be used at the same "
                "time");
        }
        fmt = "aes";
    }
    if (fmt && strcmp(fmt, "aes") != 0 && strcmp(fmt, "luks") != 0) {
        return bad_value("format", fmt);
    }
    if (!fmt) {
        return any ? param_error("Parameter 'encrypt.format' is missing") : 0;
    }
    if (!late) {
        return 1;
    }
    if (strcmp(fmt, "luks") == 0) {
        ret = crypto_luks_params_parse(opts->options, "encrypt.", &p->luks);
        if (ret < 0) {
            return ret;
        }
    } else {
        /* the old AES method takes no option but the secret (qemu-img) */
        for (size_t i = 0; i < G_N_ELEMENTS(known_options); i++) {
            const char *k = known_options[i];
            if (g_str_has_prefix(k, "encrypt.") && strcmp(k, "encrypt.format") != 0 &&
                strcmp(k, "encrypt.key-secret") != 0 && opt_get(opts, k)) {
                blk_error(EINVAL, "Parameter '%s' is unexpected", k);
                return -EINVAL;
            }
        }
    }
    if (!secret) {
        return param_error("Parameter 'encrypt.key-secret' is required for cipher");
    }
    if (!opts->secrets || !g_hash_table_contains(opts->secrets, secret)) {
        blk_error(EINVAL, "No secret with id '%s'", secret);
        return -EINVAL;
    }
    p->encrypt = true;
    p->encrypt_aes = strcmp(fmt, "aes") == 0; /* create.c invariant 6 */
    p->key_secret = secret;
    return 1;
}

/* qemu-img measure with encrypt.format: the secret it would key the
 * header with must exist; luks: the header's size from the options. */
static int measure_encryption(const BlkCreateOptions *opts, CreateParams *p)
{
    const char *fmt = opt_get(opts, "encrypt.format");
    const char *secret = opt_get(opts, "encrypt.key-secret");
    bool luks = fmt && strcmp(fmt, "luks") == 0;
    int64_t len;

    if (luks && crypto_luks_params_parse(opts->options, "encrypt.", &p->luks) < 0) {
        return -EINVAL;
    }
    if (!secret) {
        return param_error("Parameter 'encrypt.key-secret' is required for cipher");
    }
    if (!opts->secrets || !g_hash_table_contains(opts->secrets, secret)) {
        blk_error(EINVAL, "No secret with id '%s'", secret);
        return -EINVAL;
    }
    if (luks) {
        len = crypto_luks_params_area_len(&p->luks);
        if (len < 0) {
            return (int)len;
        }
        p->luks_area = (uint64_t)len;
    }
    return 0;
}

int create_parse_compat(const char *v)
{
    if (!v || strcmp(v, "1.1") == 0 || strcmp(v, "v3") == 0) {
        return 3;
    }
    return strcmp(v, "0.10") == 0 || strcmp(v, "v2") == 0 ? 2 : 0;
}

/* The cluster size (with extended L2: 32 subclusters of >= 512 bytes);
 * sets cluster_bits. */
static int check_cluster_size(CreateParams *p)
{
    if (p->cluster_size < 512 || p->cluster_size > 2 * 1024 * 1024 ||
        (p->cluster_size & (p->cluster_size - 1))) {
        return param_error("Cluster size must be a power of two between 512 and "
                           "2048k");
    }
    p->cluster_bits = (uint32_t)__builtin_ctzll(p->cluster_size);
    if (p->extended_l2 && p->cluster_size < 512 * QCOW2_EXTL2_SUBCLUSTERS) {
        blk_error(EINVAL,
                  "Extended L2 entries are only supported with cluster sizes of at "
                  "least %u bytes",
                  512 * QCOW2_EXTL2_SUBCLUSTERS);
        return -EINVAL;
    }
    return 0;
}

/* A refcount width of n bits for p->version; sets refcount_order.  hint:
 * how the message says v3 (create and measure word it differently). */
bool create_refcount_bits_valid(uint64_t n)
{
    return n > 0 && n <= 64 && !(n & (n - 1));
}

static int check_refcount_bits(CreateParams *p, uint64_t n, const char *hint)
{
    if (!create_refcount_bits_valid(n)) {
        return param_error("Refcount width must be a power of two and may not "
                           "exceed 64 bits");
    }
    if (p->version < 3 && n != 16) {
        blk_error(EINVAL,
                  "Different refcount widths than 16 bits require compatibility "
                  "level 1.1 or above (use %s or greater)",
                  hint);
        return -EINVAL;
    }
    p->refcount_order = (uint32_t)__builtin_ctzll(n);
    return 0;
}

int create_check_known(GHashTable *options, const char *const *known_names, size_t n)
{
    GHashTableIter it;
    gpointer k;
    g_autoptr(GPtrArray) bad = g_ptr_array_new();

    if (!options) {
        return 0;
    }
    g_hash_table_iter_init(&it, options);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        bool known = false;
        for (size_t i = 0; i < n; i++) {
            known = known || strcmp(k, known_names[i]) == 0;
        }
        if (!known) {
            g_ptr_array_add(bad, k);
        }
    }
    if (bad->len) {
        g_ptr_array_sort(bad, (GCompareFunc)g_strcmp0);
        blk_error(EINVAL, "Invalid parameter '%s'", (const char *)bad->pdata[0]);
        return -EINVAL;
    }
    return 0;
}

static int check_known(const BlkCreateOptions *opts)
{
    return create_check_known(opts->options, known_options, G_N_ELEMENTS(known_options));
}

/*
 * Fill *p from opts (create.c invariant 1): first the checks of the option
 * types in qemu-img's visiting order, then its consistency checks.
 */
int create_parse_params(const BlkCreateOptions *opts, CreateParams *p)
{
    const char *v;
    uint64_t n;

    memset(p, 0, sizeof(*p));
    if (check_known(opts) < 0) {
        return -EINVAL;
    }

    p->data_file = opt_get(opts, "data_file");
    p->data_file_raw = opt_bool(opts, "data_file_raw");
    p->extended_l2 = opt_bool(opts, "extended_l2");
    p->size = opts->size;
    if (!opts->size_set && (v = opt_get(opts, "size"))) {
        if (parse_number(v, &p->size) < 0) {
            return param_error("Parameter 'size' expects a size");
        }
    }
    if (p->size > (uint64_t)INT64_MAX) {
        return param_error("Image size must be less than 8 EiB!");
    }
    /* qemu-img silently rounds the size up to 512 bytes */
    p->size = ROUND_UP(p->size, 512);

    if ((p->version = create_parse_compat(opt_get(opts, "compat"))) == 0) {
        return bad_value("version", opt_get(opts, "compat"));
    }

    p->backing_file =
        opts->backing_file ? opts->backing_file : opt_get(opts, "backing_file");
    p->backing_format =
        opts->backing_format ? opts->backing_format : opt_get(opts, "backing_fmt");
    if (p->backing_format) {
        if (!blk_qemu_driver_name(p->backing_format)) {
            return bad_value("backing-fmt", p->backing_format);
        }
    }
    if (encryption(opts, false, p) < 0) {
        return -EINVAL;
    }

    p->cluster_size = 65536;
    if ((v = opt_get(opts, "cluster_size"))) {
        if (parse_number(v, &p->cluster_size) < 0) {
            return param_error("Parameter 'cluster-size' expects a size");
        }
    }

    p->prealloc = BLK_PREALLOC_OFF;
    if ((v = opt_get(opts, "preallocation"))) {
        if (blk_prealloc_parse(v, &p->prealloc) < 0) {
            blk_error_clear();
            return bad_value("preallocation", v);
        }
    }

    p->lazy_refcounts = opt_bool(opts, "lazy_refcounts");

    n = 16;
    if ((v = opt_get(opts, "refcount_bits")) && parse_number(v, &n) < 0) {
        return param_error("Parameter 'refcount-bits' expects a number");
    }

    p->compression_type = QCOW2_COMPRESSION_ZLIB;
    if ((v = opt_get(opts, "compression_type"))) {
        if (strcmp(v, "zstd") == 0) {
            p->compression_type = QCOW2_COMPRESSION_ZSTD;
        } else if (strcmp(v, "zlib") != 0) {
            return bad_value("compression-type", v);
        }
    }

    /* qemu-img's consistency checks, in its order */
    if (p->extended_l2 && p->version < 3) {
        return param_error("Extended L2 entries are only supported with "
                           "compatibility level 1.1 and above (use version=v3 "
                           "or greater)");
    }
    if (check_cluster_size(p) < 0) {
        return -EINVAL;
    }
    if (p->backing_file && p->prealloc != BLK_PREALLOC_OFF && !p->extended_l2) {
        return param_error("Backing file and preallocation can only be used at "
                           "the same time if extended_l2 is on");
    }
    if (p->backing_format && !p->backing_file) {
        return param_error("Backing format cannot be used without backing file");
    }
    if (p->lazy_refcounts && p->version < 3) {
        return param_error("Lazy refcounts only supported with compatibility "
                           "level 1.1 and above (use version=v3 or greater)");
    }
    if (check_refcount_bits(p, n, "version=v3") < 0) {
        return -EINVAL;
    }
    if (p->data_file_raw && !p->data_file) {
        return param_error("data-file-raw requires data-file");
    }
    if (p->data_file_raw && p->backing_file) {
        return param_error("Backing file and data-file-raw cannot be used at the "
                           "same time");
    }
    if (p->data_file_raw && p->prealloc == BLK_PREALLOC_OFF) {
        /* the raw data file must map 1:1, so qemu-img maps all of it */
        p->prealloc = BLK_PREALLOC_METADATA;
    }
    if (p->data_file && p->version < 3) {
        return param_error("External data files are only supported with "
                           "compatibility level 1.1 and above (use version=v3 or "
                           "greater)");
    }
    if (p->compression_type != QCOW2_COMPRESSION_ZLIB && p->version < 3) {
        return param_error("Non-zlib compression type is only supported with "
                           "compatibility level 1.1 and above (use version=v3 or "
                           "greater)");
    }
    int ret = encryption(opts, true, p);
    return ret < 0 ? ret : 0;
}

/*
 * qemu-img measure's reading of the same options: only those the size
 * depends on, in its order and with its messages (it checks no
 * combination create refuses but the refcount width of v2).
 */
int create_parse_measure_params(const BlkCreateOptions *opts, CreateParams *p)
{
    const char *v;
    uint64_t n = 16;

    memset(p, 0, sizeof(*p));
    if (check_known(opts) < 0) {
        return -EINVAL;
    }
    switch (encryption(opts, false, p)) {
    case 0:
        break;
    case 1: /* qemu-img makes the LUKS header to size it: its checks */
        if (measure_encryption(opts, p) < 0) {
            return -EINVAL;
        }
        break;
    default:
        return -EINVAL;
    }
    p->extended_l2 = opt_bool(opts, "extended_l2");
    p->cluster_size = 65536;
    if ((v = opt_get(opts, "cluster_size")) && parse_number(v, &p->cluster_size) < 0) {
        return param_error("Parameter 'cluster-size' expects a size");
    }
    if (check_cluster_size(p) < 0) {
        return -EINVAL;
    }
    if ((p->version = create_parse_compat(opt_get(opts, "compat"))) == 0) {
        blk_error(EINVAL, "Invalid compatibility level: '%s'", opt_get(opts, "compat"));
        return -EINVAL;
    }
    if ((v = opt_get(opts, "refcount_bits")) && parse_number(v, &n) < 0) {
        return param_error("Parameter 'refcount-bits' expects a number");
    }
    if (check_refcount_bits(p, n, "compat=1.1") < 0) {
        return -EINVAL;
    }
    p->prealloc = BLK_PREALLOC_OFF;
    if ((v = opt_get(opts, "preallocation")) && blk_prealloc_parse(v, &p->prealloc) < 0) {
        blk_error_clear();
        blk_error(EINVAL, "invalid parameter value: %s", v);
        return -EINVAL;
    }
    p->backing_file =
        opts->backing_file ? opts->backing_file : opt_get(opts, "backing_file");
    p->size = opts->size;
    if (!opts->size_set && (v = opt_get(opts, "size")) && parse_number(v, &p->size) < 0) {
        return param_error("Parameter 'size' expects a size");
    }
    return 0;
}
