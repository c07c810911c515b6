/*
 * qemu-img style "-o key=value,..." create option lists: the options each
 * format takes, their help, checking and normalising values, and the print
 * order of the "Formatting ..." line.
 *
 * Facts learnt from running qemu-img 7.2 (not from its source):
 *  1. ",," is a literal comma, "key" alone means key=on and "nokey"
 *     key=off; an empty element makes the whole list invalid.  A repeated
 *     key takes the last value; repeated -o arguments are joined with ",".
 *  2. Booleans accept on/yes/true/y and off/no/false/n and are printed
 *     back as typed; numbers (base 0, so "010" is 8; fact 8) and sizes are
 *     printed back in decimal; strings as given (",," unescaped: the "Formatting"
 *     line doubles commas when it prints them).
 *  3. "-o help" lists the format's options sorted by name, then a note
 *     about protocol options; with a file name it lists format and
 *     protocol options together under "Supported options:".
 *  4. An "rbd:" name has the rbd protocol's options: size, cluster_size
 *     (the RBD object size, for raw), password-secret and encrypt.*, in
 *     that order in the "Formatting" line after the format's own.
 *  5. -U (force-share) with open options that name force-share too is
 *     refused unless the option's last value is literally "on" (a bare
 *     "force-share" is on; "true" and "yes" are refused as well): qemu-img
 *     "--force-share/-U conflicts with image options", qemu-io "-U
 *     conflicts with image options" (QEMU iotest 153).
 *  6. An "ssh:" name has the ssh protocol's one option, size: raw over ssh
 *     takes no other, qcow2 over ssh only its own (no nocow,
 *     extent_size_hint; its preallocation is refused by the ssh node when
 *     it grows the file).
 *  7. qemu-img create -f file (the file protocol as the format, QEMU
 *     iotest 142) takes raw's options (size, nocow, preallocation,
 *     extent_size_hint) and names "file" in its messages; the library
 *     creates the file as raw does (api/image.c invariant 6).
 *  8. Numbers are strtoull's: leading blanks, any base, a leading '-'
 *     wraps ("-1" is 2^64-1, "-0x10" 2^64-16), printed back signed
 *     ("refcount_bits=-1"); 2^64 or more is "Value 'V' is too large for
 *     parameter 'K'" (QEMU iotest 112: refcount_bits=-1 is then "Refcount
 *     width must be a power of two ...").  (qemu-img create then reads
 *     the value as a signed 64-bit number again, from the text: outside
 *     that range, "Parameter 'refcount-bits' expects integer"; qimg reads
 *     the wrapped number, so such a value is checked as that number.)
 */
#include "qimg-tool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const ToolOptDesc raw_opts[] = {
    {"size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false},
    {"nocow", TOOL_OPT_BOOL, "Turn off copy-on-write (valid only on btrfs)", NULL, true},
    {"preallocation", TOOL_OPT_STRING,
     "Preallocation mode (allowed values: off, falloc, full)", NULL, true},
    {"extent_size_hint", TOOL_OPT_SIZE,
     "Extent size hint for the image file, 0 to disable", NULL, true},
    {NULL, 0, NULL, NULL, false},
};

/* The luks format's, in the order of qemu-img 7.2's "Formatting" line
 * (checks: luks/luks.c; preallocation is the file protocol's). */
static const ToolOptDesc luks_opts[] = {
    {"size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false},
    {"key-secret", TOOL_OPT_STRING,
     "ID of the secret that provides the keyslot passphrase", NULL, false},
    {"cipher-alg", TOOL_OPT_STRING, "Name of encryption cipher algorithm", NULL, false},
    {"cipher-mode", TOOL_OPT_STRING, "Name of encryption cipher mode", NULL, false},
    {"ivgen-alg", TOOL_OPT_STRING, "Name of IV generator algorithm", NULL, false},
    {"ivgen-hash-alg", TOOL_OPT_STRING, "Name of IV generator hash algorithm", NULL,
     false},
    {"hash-alg", TOOL_OPT_STRING, "Name of encryption hash algorithm", NULL, false},
    {"iter-time", TOOL_OPT_NUMBER, "Time to spend in PBKDF in milliseconds", NULL, false},
    {"preallocation", TOOL_OPT_STRING,
     "Preallocation mode (allowed values: off, falloc, full)", NULL, true},
    {NULL, 0, NULL, NULL, false},
};

/* Print order of qemu-img 7.2's "Formatting" line (the encryption options
 * are qcow2/create-params.c's). */
static const ToolOptDesc qcow2_opts[] = {
    {"encryption", TOOL_OPT_BOOL,
     "Encrypt the image with format 'aes'. (Deprecated in favor of encrypt.format=aes)",
     NULL, false},
    {"encrypt.format", TOOL_OPT_STRING,
     "Encrypt the image, format choices: 'aes', 'luks'", NULL, false},
    {"encrypt.key-secret", TOOL_OPT_STRING,
     "ID of secret providing qcow AES key or LUKS passphrase", NULL, false},
    {"encrypt.cipher-alg", TOOL_OPT_STRING, "Name of encryption cipher algorithm", NULL,
     false},
    {"encrypt.cipher-mode", TOOL_OPT_STRING, "Name of encryption cipher mode", NULL,
     false},
    {"encrypt.ivgen-alg", TOOL_OPT_STRING, "Name of IV generator algorithm", NULL, false},
    {"encrypt.ivgen-hash-alg", TOOL_OPT_STRING, "Name of IV generator hash algorithm",
     NULL, false},
    {"encrypt.hash-alg", TOOL_OPT_STRING, "Name of encryption hash algorithm", NULL,
     false},
    {"encrypt.iter-time", TOOL_OPT_NUMBER, "Time to spend in PBKDF in milliseconds", NULL,
     false},
    {"cluster_size", TOOL_OPT_SIZE, "qcow2 cluster size", "65536", false},
    {"extended_l2", TOOL_OPT_BOOL, "Extended L2 tables", "off", false},
    {"preallocation", TOOL_OPT_STRING,
     "Preallocation mode (allowed values: off, metadata, falloc, full)", NULL, false},
    {"compression_type", TOOL_OPT_STRING,
     "Compression method used for image cluster compression", "zlib", false},
    {"size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false},
    {"compat", TOOL_OPT_STRING, "Compatibility level (v2 [0.10] or v3 [1.1])", NULL,
     false},
    {"backing_file", TOOL_OPT_STRING, "File name of a base image", NULL, false},
    {"backing_fmt", TOOL_OPT_STRING, "Image format of the base image", NULL, false},
    {"data_file", TOOL_OPT_STRING, "File name of an external data file", NULL, false},
    {"data_file_raw", TOOL_OPT_BOOL,
     "The external data file must stay valid as a raw image", NULL, false},
    {"lazy_refcounts", TOOL_OPT_BOOL, "Postpone refcount updates", "off", false},
    {"refcount_bits", TOOL_OPT_NUMBER, "Width of a reference count entry in bits", "16",
     false},
    {"nocow", TOOL_OPT_BOOL, "Turn off copy-on-write (valid only on btrfs)", NULL, true},
    {"extent_size_hint", TOOL_OPT_SIZE,
     "Extent size hint for the image file, 0 to disable", NULL, true},
    {NULL, 0, NULL, NULL, false},
};

/* vmdk, in qemu-img 7.2's print order; preallocation applies to flat extents and
 * to a sparse extent's metadata area, as in QEMU (vmdk/create.c). */
static const ToolOptDesc vmdk_opts[] = {
    {"size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false},
    {"adapter_type", TOOL_OPT_STRING,
     "Virtual adapter type, can be one of ide (default), lsilogic, buslogic or legacyESX",
     NULL, false},
    {"backing_file", TOOL_OPT_STRING, "File name of a base image", NULL, false},
    {"backing_fmt", TOOL_OPT_STRING, "Must be 'vmdk' if present", NULL, false},
    {"compat6", TOOL_OPT_BOOL, "VMDK version 6 image", "off", false},
    {"hwversion", TOOL_OPT_STRING, "VMDK hardware version", "undefined", false},
    {"toolsversion", TOOL_OPT_STRING, "VMware guest tools version", NULL, false},
    {"subformat", TOOL_OPT_STRING,
     "VMDK flat extent format, can be one of {monolithicSparse (default) | "
     "monolithicFlat | twoGbMaxExtentSparse | twoGbMaxExtentFlat | streamOptimized} ",
     NULL, false},
    {"zeroed_grain", TOOL_OPT_BOOL,
     "Enable efficient zero writes using the zeroed-grain GTE feature", NULL, false},
    {"nocow", TOOL_OPT_BOOL, "Turn off copy-on-write (valid only on btrfs)", NULL, true},
    {"preallocation", TOOL_OPT_STRING,
     "Preallocation mode (allowed values: off, falloc, full)", NULL, true},
    {"extent_size_hint", TOOL_OPT_SIZE,
     "Extent size hint for the image file, 0 to disable", NULL, true},
    {NULL, 0, NULL, NULL, false},
};

/* qemu-img 7.2's amend options for qcow2 (fact 4); the hint list adds
 * the create options it tries when a list does not parse. */
#define AMEND_OPTS                                                                       \
    {"backing_file", TOOL_OPT_STRING, "File name of a base image", NULL, false},         \
        {"backing_fmt", TOOL_OPT_STRING, "Image format of the base image", NULL, false}, \
        {"compat", TOOL_OPT_STRING, "Compatibility level (v2 [0.10] or v3 [1.1])", NULL, \
         false},                                                                         \
        {"data_file", TOOL_OPT_STRING, "File name of an external data file", NULL,       \
         false},                                                                         \
        {"data_file_raw", TOOL_OPT_BOOL,                                                 \
         "The external data file must stay valid as a raw image", NULL, false},          \
        {"encrypt.iter-time", TOOL_OPT_NUMBER, "Time to spend in PBKDF in milliseconds", \
         NULL, false},                                                                   \
        {"encrypt.keyslot", TOOL_OPT_NUMBER,                                             \
         "Select a single keyslot to modify "                                            \
         "explicitly",                                                                   \
         NULL, false},                                                                   \
        {"encrypt.new-secret", TOOL_OPT_STRING,                                          \
         "New secret to set in the matching keyslots. Empty string to erase", NULL,      \
         false},                                                                         \
        {"encrypt.old-secret", TOOL_OPT_STRING,                                          \
         "Select all keyslots that match this password", NULL, false},                   \
        {"encrypt.state", TOOL_OPT_STRING,                                               \
         "Select new state of affected keyslots (active/inactive)", NULL, false},        \
        {"lazy_refcounts", TOOL_OPT_BOOL, "Postpone refcount updates", NULL, false},     \
        {"refcount_bits", TOOL_OPT_NUMBER, "Width of a reference count entry in bits",   \
         NULL, false},                                                                   \
    {                                                                                    \
        "size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false                          \
    }

static const ToolOptDesc qcow2_amend_opts[] = {
    AMEND_OPTS,
    {NULL, 0, NULL, NULL, false},
};

static const ToolOptDesc qcow2_amend_create_opts[] = {
    AMEND_OPTS,
    {"cluster_size", TOOL_OPT_SIZE, NULL, NULL, false},
    {"compression_type", TOOL_OPT_STRING, NULL, NULL, false},
    {"encrypt.cipher-alg", TOOL_OPT_STRING, NULL, NULL, false},
    {"encrypt.cipher-mode", TOOL_OPT_STRING, NULL, NULL, false},
    {"encrypt.format", TOOL_OPT_STRING, NULL, NULL, false},
    {"encrypt.hash-alg", TOOL_OPT_STRING, NULL, NULL, false},
    {"encrypt.ivgen-alg", TOOL_OPT_STRING, NULL, NULL, false},
    {"encrypt.ivgen-hash-alg", TOOL_OPT_STRING, NULL, NULL, false},
    {"encrypt.key-secret", TOOL_OPT_STRING, NULL, NULL, false},
    {"encryption", TOOL_OPT_BOOL, NULL, NULL, false},
    {"extended_l2", TOOL_OPT_BOOL, NULL, NULL, false},
    {"preallocation", TOOL_OPT_STRING, NULL, NULL, false},
    {NULL, 0, NULL, NULL, false},
};

/* qemu-img 7.2's amend options for luks, and the create ones for the hint. */
#define LUKS_AMEND_OPTS                                                                  \
    {"iter-time", TOOL_OPT_NUMBER, "Time to spend in PBKDF in milliseconds", NULL,       \
     false},                                                                             \
        {"keyslot", TOOL_OPT_NUMBER, "Select a single keyslot to modify explicitly",     \
         NULL, false},                                                                   \
        {"new-secret", TOOL_OPT_STRING,                                                  \
         "New secret to set in the matching keyslots. Empty string to erase", NULL,      \
         false},                                                                         \
        {"old-secret", TOOL_OPT_STRING, "Select all keyslots that match this password",  \
         NULL, false},                                                                   \
    {                                                                                    \
        "state", TOOL_OPT_STRING,                                                        \
            "Select new state of affected keyslots (active/inactive)", NULL, false       \
    }

static const ToolOptDesc luks_amend_opts[] = {
    LUKS_AMEND_OPTS,
    {NULL, 0, NULL, NULL, false},
};

static const ToolOptDesc luks_amend_create_opts[] = {
    LUKS_AMEND_OPTS,
    {"size", TOOL_OPT_SIZE, NULL, NULL, false},
    {"key-secret", TOOL_OPT_STRING, NULL, NULL, false},
    {"cipher-alg", TOOL_OPT_STRING, NULL, NULL, false},
    {"cipher-mode", TOOL_OPT_STRING, NULL, NULL, false},
    {"ivgen-alg", TOOL_OPT_STRING, NULL, NULL, false},
    {"ivgen-hash-alg", TOOL_OPT_STRING, NULL, NULL, false},
    {"hash-alg", TOOL_OPT_STRING, NULL, NULL, false},
    {NULL, 0, NULL, NULL, false},
};

const ToolOptDesc *tool_amend_opts(const char *format, bool with_create)
{
    if (strcmp(format, "luks") == 0) {
        return with_create ? luks_amend_create_opts : luks_amend_opts;
    }
    if (strcmp(format, "qcow2") != 0) {
        return NULL;
    }
    return with_create ? qcow2_amend_create_opts : qcow2_amend_opts;
}

static const ToolOptDesc *find_desc(const ToolOptDesc *descs, const char *name)
{
    for (; descs->name; descs++) {
        if (strcmp(descs->name, name) == 0) {
            return descs;
        }
    }
    return NULL;
}

const ToolOptDesc *tool_create_opts(const char *format)
{
    if (strcmp(format, "raw") == 0) {
        return raw_opts;
    }
    if (strcmp(format, "qcow2") == 0) {
        return qcow2_opts;
    }
    if (strcmp(format, "luks") == 0) {
        return luks_opts;
    }
    if (strcmp(format, "vmdk") == 0) {
        return vmdk_opts;
    }
    return tool_hyperv_create_opts(format);
}

/* QEMU 7.2's drivers that create no image (qemu-img create -f X -o help). */
static const char *const no_create_drivers[] = {
    "blkdebug", "blklogwrites",    "blkverify",         "bochs",
    "cloop",    "compress",        "copy-before-write", "copy-on-read",
    "dmg",      "null-aio",        "null-co",           "preallocate",
    "quorum",   "snapshot-access", "throttle",          "vvfat",
};

void tool_create_format_error(const char *filename, const char *format)
{
    g_autofree char *prefix = filename ? g_strdup_printf("%s: ", filename) : g_strdup("");

    for (size_t i = 0; i < G_N_ELEMENTS(no_create_drivers); i++) {
        if (strcmp(format, no_create_drivers[i]) == 0) {
            tool_error("%sFormat driver '%s' does not support image creation", prefix,
                       format);
            return;
        }
    }
    tool_error("%sUnknown file format '%s'", prefix, format);
}

/* Fact 4: the rbd protocol's options (qemu-img's order).  The library
 * refuses password-secret and encrypt.* on an RBD image: librbd's own
 * encryption is not supported, and Ceph keys come from the keyring only. */
#define RBD_PROTOCOL_OPTS                                                                \
    {"password-secret", TOOL_OPT_STRING, "ID of secret providing the password", NULL,    \
     true},                                                                              \
        {"encrypt.format", TOOL_OPT_STRING,                                              \
         "Encrypt the image, format choices: 'luks', 'luks2'", NULL, true},              \
        {"encrypt.cipher-alg", TOOL_OPT_STRING,                                          \
         "Name of encryption cipher algorithm (allowed values: aes-128, aes-256)", NULL, \
         true},                                                                          \
    {                                                                                    \
        "encrypt.key-secret", TOOL_OPT_STRING, "ID of secret providing LUKS passphrase", \
            NULL, true                                                                   \
    }

static const ToolOptDesc rbd_raw_opts[] = {
    {"size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false},
    {"cluster_size", TOOL_OPT_SIZE, "RBD object size", NULL, true},
    RBD_PROTOCOL_OPTS,
    {NULL, 0, NULL, NULL, false},
};

/* Facts 4 and 6: qcow2's own options, then those of the protocol (proto,
 * n of them) it does not have, into list. */
static void qcow2_over(ToolOptDesc *list, const ToolOptDesc *proto, size_t n)
{
    size_t k = 0;

    for (const ToolOptDesc *d = qcow2_opts; d->name; d++) {
        if (!d->protocol) {
            list[k++] = *d;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!find_desc(list, proto[i].name)) {
            list[k++] = proto[i];
        }
    }
}

/* qcow2's own, then the protocol's it does not have (password-secret) */
static ToolOptDesc rbd_qcow2_list[G_N_ELEMENTS(qcow2_opts) + 4];

static gpointer rbd_qcow2_build(gpointer unused)
{
    static const ToolOptDesc rbd[] = {RBD_PROTOCOL_OPTS};

    (void)unused;
    qcow2_over(rbd_qcow2_list, rbd, G_N_ELEMENTS(rbd));
    return rbd_qcow2_list;
}

static const ToolOptDesc *rbd_qcow2_opts(void)
{
    static GOnce once = G_ONCE_INIT;

    return g_once(&once, rbd_qcow2_build, NULL);
}

/* Fact 6: the ssh protocol's one option is the size. */
static const ToolOptDesc ssh_raw_opts[] = {
    {"size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false},
    {NULL, 0, NULL, NULL, false},
};
static ToolOptDesc ssh_qcow2_list[G_N_ELEMENTS(qcow2_opts)];

static gpointer ssh_qcow2_build(gpointer unused)
{
    (void)unused;
    qcow2_over(ssh_qcow2_list, NULL, 0);
    return ssh_qcow2_list;
}

const ToolOptDesc *tool_create_opts_for(const char *format, const char *filename)
{
    if (strcmp(format, "file") == 0) { /* fact 7 */
        format = "raw";
    }
    if (filename && g_str_has_prefix(filename, "ssh:")) { /* fact 6 */
        static GOnce once = G_ONCE_INIT;
        if (strcmp(format, "raw") == 0) {
            return ssh_raw_opts;
        }
        return strcmp(format, "qcow2") == 0 ? g_once(&once, ssh_qcow2_build, NULL) : NULL;
    }
    if (!filename || !g_str_has_prefix(filename, "rbd:")) {
        return tool_create_opts(format);
    }
    if (strcmp(format, "raw") == 0) {
        return rbd_raw_opts;
    }
    if (strcmp(format, "qcow2") == 0) {
        return rbd_qcow2_opts();
    }
    return NULL;
}

/* qemu-img's check of each -o argument: not empty, not starting with a
 * comma, not ending with an odd number of them (which would escape the
 * comma that joins the next argument). */
static bool option_list_ok(const char *list)
{
    size_t len = strlen(list), i = len;

    if (!*list || *list == ',') {
        return false;
    }
    while (i > 0 && list[i - 1] == ',') {
        i--;
    }
    return (len - i) % 2 == 0;
}

bool tool_opts_accumulate(char **list, const char *more)
{
    if (!option_list_ok(more)) {
        tool_error("Invalid option list: %s", more);
        return false;
    }
    *list = tool_opts_append(*list, more);
    return true;
}

char *tool_opts_append(char *list, const char *more)
{
    char *r;

    if (!list) {
        return g_strdup(more);
    }
    r = g_strdup_printf("%s,%s", list, more);
    g_free(list);
    return r;
}

GPtrArray *tool_opts_split(const char *list)
{
    GPtrArray *parts = g_ptr_array_new_with_free_func(g_free);
    GString *cur = g_string_new(NULL);

    for (const char *p = list; *p; p++) {
        if (*p == ',') {
            if (p[1] == ',') {
                g_string_append_c(cur, ',');
                p++;
                continue;
            }
            g_ptr_array_add(parts, g_string_free(cur, FALSE));
            cur = g_string_new(NULL);
            continue;
        }
        g_string_append_c(cur, *p);
    }
    g_ptr_array_add(parts, g_string_free(cur, FALSE));
    return parts;
}

bool tool_opts_force_share_conflict(const char *list)
{
    g_autoptr(GPtrArray) parts = tool_opts_split(list);
    const char *value = NULL; /* fact 5: the last element wins */

    for (guint i = 0; i < parts->len; i++) {
        const char *e = parts->pdata[i];
        if (g_str_has_prefix(e, "force-share=")) {
            value = e + strlen("force-share=");
        } else if (strcmp(e, "force-share") == 0) {
            value = "on";
        } else if (strcmp(e, "noforce-share") == 0) {
            value = "off";
        }
    }
    return value && strcmp(value, "on") != 0;
}

bool tool_opts_want_help(const char *list)
{
    g_autoptr(GPtrArray) parts = tool_opts_split(list);

    for (guint i = 0; i < parts->len; i++) {
        const char *e = parts->pdata[i];
        if (strcmp(e, "help") == 0 || strcmp(e, "?") == 0) {
            return true;
        }
    }
    return false;
}

static const char *type_name(ToolOptType t)
{
    switch (t) {
    case TOOL_OPT_BOOL:
        return "bool (on/off)";
    case TOOL_OPT_NUMBER:
        return "num";
    case TOOL_OPT_SIZE:
        return "size";
    default:
        return "str";
    }
}

static gint cmp_desc(gconstpointer a, gconstpointer b)
{
    const ToolOptDesc *x = *(const ToolOptDesc *const *)a;
    const ToolOptDesc *y = *(const ToolOptDesc *const *)b;
    return strcmp(x->name, y->name);
}

/* The options of descs (protocol ones only if with_protocol) sorted by
 * name, one "  name=<type> - help" line each; raw_fmt: the raw format's
 * preallocation wording with a file name. */
static void print_opt_lines(const ToolOptDesc *descs, bool with_protocol, bool raw_fmt)
{
    g_autoptr(GPtrArray) list = g_ptr_array_new();

    for (const ToolOptDesc *d = descs; d && d->name; d++) {
        if (d->protocol && !with_protocol) {
            continue;
        }
        g_ptr_array_add(list, (gpointer)d);
    }
    g_ptr_array_sort(list, cmp_desc);
    for (guint i = 0; i < list->len; i++) {
        const ToolOptDesc *d = list->pdata[i];
        g_autofree char *left = g_strdup_printf("%s=<%s>", d->name, type_name(d->type));
        const char *help = d->help;

        if (with_protocol && raw_fmt && strcmp(d->name, "preallocation") == 0) {
            help = "Preallocation mode (allowed values: off, falloc, full)";
        }
        printf("  %-22s - %s\n", left, help);
    }
}

void tool_opts_print_amend_help(const char *format)
{
    printf("Amend options for '%s':\n", format);
    print_opt_lines(tool_amend_opts(format, false), false, false);
}

void tool_opts_print_help(const char *format, const char *filename)
{
    bool with_protocol = filename != NULL;

    if (with_protocol) {
        printf("Supported options:\n");
    } else {
        printf("Supported %s options:\n", format);
    }
    /* "file"'s options are its own (fact 7) */
    print_opt_lines(tool_create_opts_for(format, filename),
                    with_protocol || strcmp(format, "file") == 0,
                    strcmp(format, "raw") == 0 &&
                        !g_str_has_prefix(filename ? filename : "", "rbd:"));
    if (!with_protocol) {
        printf("\nThe protocol level may support further options.\n"
               "Specify the target filename to include those options.\n");
    }
}

static void opt_free(gpointer p)
{
    ToolOpt *o = p;

    g_free(o->key);
    g_free(o->value);
    g_free(o->shown);
    g_free(o);
}

static ToolOpt *opts_find(GPtrArray *opts, const char *key)
{
    for (guint i = 0; i < opts->len; i++) {
        ToolOpt *o = opts->pdata[i];
        if (strcmp(o->key, key) == 0) {
            return o;
        }
    }
    return NULL;
}

const char *tool_opts_get(GPtrArray *opts, const char *key)
{
    ToolOpt *o = opts_find(opts, key);
    return o ? o->value : NULL;
}

void tool_opts_set(GPtrArray *opts, const char *key, const char *value, const char *shown)
{
    ToolOpt *o = opts_find(opts, key);

    if (!o) {
        o = g_new0(ToolOpt, 1);
        o->key = g_strdup(key);
        g_ptr_array_add(opts, o);
    }
    g_free(o->value);
    g_free(o->shown);
    o->value = g_strdup(value);
    o->shown = g_strdup(shown ? shown : value);
}

void tool_opts_remove(GPtrArray *opts, const char *key)
{
    ToolOpt *o = opts_find(opts, key);

    if (o) {
        g_ptr_array_remove(opts, o);
    }
}

GHashTable *tool_opts_to_hash(GPtrArray *opts)
{
    GHashTable *h = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);

    for (guint i = 0; i < opts->len; i++) {
        ToolOpt *o = opts->pdata[i];
        g_hash_table_replace(h, g_strdup(o->key), g_strdup(o->value));
    }
    return h;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"on", "yes", "true", "y"};
    static const char *const no[] = {"off", "no", "false", "n"};

    for (size_t i = 0; i < G_N_ELEMENTS(yes); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static void opt_error(const char *prefix, const char *msg)
{
    if (prefix) {
        tool_error("%s: %s", prefix, msg);
    } else {
        tool_error("%s", msg);
    }
}

/* Check one value against its type; fills *value and *shown. */
static bool normalise(const ToolOptDesc *d, const char *raw, char **value, char **shown,
                      const char *prefix, bool quiet)
{
    g_autofree char *msg = NULL;

    switch (d->type) {
    case TOOL_OPT_BOOL: {
        bool b;
        if (!parse_bool(raw, &b)) {
            msg = g_strdup_printf("Parameter '%s' expects 'on' or 'off'", d->name);
            break;
        }
        *value = g_strdup(b ? "on" : "off");
        *shown = g_strdup(raw);
        return true;
    }
    case TOOL_OPT_NUMBER: {
        char *end;
        unsigned long long n;
        errno = 0;
        n = strtoull(raw, &end, 0);
        if (end != raw && !*end && errno == ERANGE) { /* QemuOpts' words */
            msg = g_strdup_printf("Value '%s' is too large for parameter '%s'", raw,
                                  d->name);
            break;
        }
        if (end == raw || *end || errno) {
            msg = g_strdup_printf("Parameter '%s' expects a number", d->name);
            break;
        }
        *value = g_strdup_printf("%llu", n);
        *shown = g_strdup_printf("%lld", (long long)n); /* fact 8 */
        return true;
    }
    case TOOL_OPT_SIZE: {
        uint64_t v;
        if (tool_strtosz(raw, &v) < 0) {
            msg =
                g_strdup_printf("Parameter '%s' expects a non-negative number below "
                                "2^64\nOptional suffix k, M, G, T, P or E means kilo-, "
                                "mega-, giga-, tera-, peta-\nand exabytes, respectively.",
                                d->name);
            break;
        }
        *value = g_strdup_printf("%" PRIu64, v);
        *shown = g_strdup(*value);
        return true;
    }
    default:
        /* the "Formatting" line doubles its commas (tools/create.c fact 1) */
        *value = g_strdup(raw);
        *shown = g_strdup(raw);
        return true;
    }
    if (!quiet) {
        opt_error(prefix, msg);
    }
    return false;
}

/* tool_opts_parse() without messages (quiet): true if list parses. */
static GPtrArray *opts_parse(const char *list, const ToolOptDesc *descs,
                             const char *prefix, bool quiet);

bool tool_opts_valid(const char *list, const ToolOptDesc *descs)
{
    GPtrArray *opts = opts_parse(list, descs, NULL, true);

    if (!opts) {
        return false;
    }
    g_ptr_array_unref(opts);
    return true;
}

GPtrArray *tool_opts_parse(const char *list, const ToolOptDesc *descs, const char *prefix)
{
    return opts_parse(list, descs, prefix, false);
}

static GPtrArray *opts_parse(const char *list, const ToolOptDesc *descs,
                             const char *prefix, bool quiet)
{
    g_autoptr(GPtrArray) parts = tool_opts_split(list);
    GPtrArray *opts = g_ptr_array_new_with_free_func(opt_free);

    if (*list == '\0') {
        return opts;
    }
    for (guint i = 0; i < parts->len; i++) {
        const char *e = parts->pdata[i];
        const char *eq = strchr(e, '=');
        g_autofree char *key = NULL;
        const char *raw;
        const ToolOptDesc *d;
        char *value = NULL, *shown = NULL;

        if (*e == '\0') {
            if (!quiet) {
                tool_error("Invalid option list: %s", list);
            }
            goto fail;
        }
        if (strcmp(e, "help") == 0 || strcmp(e, "?") == 0) {
            continue;
        }
        if (eq) {
            key = g_strndup(e, eq - e);
            raw = eq + 1;
        } else if (!find_desc(descs, e) && g_str_has_prefix(e, "no")) {
            key = g_strdup(e + 2);
            raw = "off";
        } else {
            key = g_strdup(e);
            raw = "on";
        }
        d = find_desc(descs, key);
        if (!d) {
            g_autofree char *msg = g_strdup_printf("Invalid parameter '%s'", key);
            if (!quiet) {
                opt_error(prefix, msg);
            }
            goto fail;
        }
        if (!normalise(d, raw, &value, &shown, prefix, quiet)) {
            goto fail;
        }
        tool_opts_set(opts, key, value, shown);
        g_free(value);
        g_free(shown);
    }
    return opts;

fail:
    g_ptr_array_unref(opts);
    return NULL;
}

const char *tool_opts_key_secret(GPtrArray *opts)
{
    const char *k = tool_opts_get(opts, "encrypt.key-secret");

    /* interned: the caller outlives opts */
    return g_intern_string(k ? k : tool_opts_get(opts, "key-secret"));
}
