/*
 * Shared option handling for the qimg command: messages, sizes, cache
 * modes, --output.  The -o lists are in tools/optlist.c.
 *
 * Facts learnt from running qemu-img 7.2 (not from its source):
 *  1. Sizes: decimal integer (leading blanks and '+' allowed, no '-'),
 *     optional fraction, optional suffix b/k/M/G/T/P/E in either case,
 *     powers of 1024.  The fraction is rounded to the nearest byte
 *     (0.5 up) and needs a scaling suffix.  "0x" introduces a hex integer
 *     without fraction; a suffix after hex is accepted with a warning.
 *  2. Messages go to stderr without flushing stdout first: stdout written
 *     to a pipe or file stays in its buffer until exit (or a flush the
 *     command does itself), so with 2>&1 an error can come before lines
 *     printed earlier -- the order QEMU's own test outputs record (QEMU
 *     iotest 074: compare's error before its "Image size mismatch").
 *  3. -l (convert, measure): a value starting "snapshot." is an option
 *     list (",," a comma in a value) of snapshot.id and snapshot.name,
 *     read as the option is met, before any other check of the command
 *     line; another key is "Invalid parameter 'KEY'" then "Failed in
 *     parsing snapshot param 'VALUE'" (QEMU iotest 178); "KEY" alone is
 *     KEY=on, "noKEY" KEY=off, with QEMU's short-form warning.  Any other
 *     value is a snapshot ID or name.
 */
#include "qimg-tool.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ---- */

static const char *program = "qimg";

void tool_set_program(const char *name)
{
    program = name;
}

const char *tool_program(void)
{
    return program;
}

static void vreport(const char *prefix, const char *fmt, va_list ap)
{
    /* fact 2: stdout is not flushed */
    fprintf(stderr, "%s: %s", program, prefix);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void tool_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport("", fmt, ap);
    va_end(ap);
}

void tool_error_lines(const char *msg)
{
    g_auto(GStrv) lines = g_strsplit(msg, "\n", -1);

    for (char **l = lines; *l; l++) {
        tool_error("%s", *l);
    }
}

void tool_warning(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport("warning: ", fmt, ap);
    va_end(ap);
}

int tool_usage_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport("", fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try '%s --help' for more information\n", program);
    return 1;
}

int tool_bad_option(int c, char **argv)
{
    if (c == ':') {
        return tool_usage_error("missing argument for option '%s'", argv[optind - 1]);
    }
    return tool_usage_error("unrecognized option '%s'", argv[optind - 1]);
}

int tool_common_option(int c, char **argv, bool *image_opts)
{
    if (c == TOOL_OPT_OBJECT) {
        return tool_object_add(optarg);
    }
    if (c == TOOL_OPT_IMAGE_OPTS && image_opts) {
        *image_opts = true; /* tool_open_image reads it */
        return -1;
    }
    return tool_bad_option(c, argv);
}

void tool_report_gerror(GError *err, const char *prefix)
{
    if (prefix) {
        tool_error("%s: %s", prefix, err ? err->message : "unknown error");
    } else {
        tool_error("%s", err ? err->message : "unknown error");
    }
    g_clear_error(&err);
}

/* ---- sizes (fact 1: qimg_strtosz) ---- */

int tool_strtosz(const char *s, uint64_t *out)
{
    gboolean hex_suffix = FALSE;
    int ret = qimg_strtosz(s, out, &hex_suffix);

    if (hex_suffix) {
        tool_warning("Using a multiplier suffix on hex numbers is deprecated: %s", s);
    }
    return ret;
}

bool tool_cvtnum(const char *name, const char *value, int64_t max, int64_t *out)
{
    uint64_t v;
    int ret = tool_strtosz(value, &v);

    if (ret == -ERANGE || (ret == 0 && v > (uint64_t)max)) {
        tool_error("Invalid %s specified. Must be between 0 and %" PRId64 ".", name, max);
        return false;
    }
    if (ret < 0) {
        tool_error("Invalid %s specified. You may use k, M, G, T, P or E suffixes for",
                   name);
        tool_error("kilobytes, megabytes, gigabytes, terabytes, petabytes and exabytes.");
        return false;
    }
    *out = (int64_t)v;
    return true;
}

bool tool_parse_output(const char *s, ToolOutput *out)
{
    if (strcmp(s, "json") == 0) {
        *out = TOOL_OUTPUT_JSON;
    } else if (strcmp(s, "human") == 0) {
        *out = TOOL_OUTPUT_HUMAN;
    } else {
        tool_error("--output must be used with human or json as argument.");
        return false;
    }
    return true;
}

bool tool_parse_cache(const char *s, bool source, QimgCacheMode *mode)
{
    GError *err = NULL;

    if (!qimg_cache_mode_parse(s, mode, &err)) {
        g_clear_error(&err);
        tool_error("Invalid %scache option: %s", source ? "source " : "", s);
        return false;
    }
    return true;
}

/* "-l ID_OR_NAME" or "-l snapshot.id=ID,snapshot.name=NAME" (fact 3);
 * 'report': print the warnings (the command checks -l once, when it meets
 * it, and reads it again when it opens the image). */
static char *parse_snapshot_param(const char *param, bool report)
{
    g_autofree char *id = NULL, *name = NULL;
    const char *p = param;

    if (!g_str_has_prefix(param, "snapshot.")) {
        return g_strdup(param);
    }
    g_autoptr(GString) val = g_string_new(NULL);
    while (*p) {
        g_autofree char *key = NULL;

        /* "KEY" is KEY=on, "noKEY" KEY=off (image-opts.c fact 1) */
        p = tool_opts_next(param, p, false, report, &key, val);
        if (strcmp(key, "snapshot.id") == 0) {
            g_free(id);
            id = g_strdup(val->str);
        } else if (strcmp(key, "snapshot.name") == 0) {
            g_free(name);
            name = g_strdup(val->str);
        } else {
            tool_error("Invalid parameter '%s'", key);
            tool_error("Failed in parsing snapshot param '%s'", param);
            return NULL;
        }
    }
    if (id && *id) {
        return g_steal_pointer(&id);
    }
    return name ? g_steal_pointer(&name) : g_strdup("");
}

char *tool_parse_snapshot_param(const char *param)
{
    return parse_snapshot_param(param, true);
}

/* Guard for drivers that ignore QimgOpenOptions.snapshot (raw). */
static bool has_snapshot(const QimgInfo *info, const char *id_or_name)
{
    for (guint i = 0; info->snapshots && i < info->snapshots->len; i++) {
        const QimgSnapshotInfo *sn = g_ptr_array_index(info->snapshots, i);
        if (g_strcmp0(sn->id, id_or_name) == 0 || g_strcmp0(sn->name, id_or_name) == 0) {
            return true;
        }
    }
    return false;
}

QimgImage *tool_open_snapshot(const char *filename, QimgOpenOptions *oo,
                              const char *snapshot_param)
{
    g_autofree char *snapshot = NULL;
    g_autoptr(QimgImage) img = NULL;
    g_autoptr(QimgInfo) info = NULL;
    GError *err = NULL;

    if (!tool_image_opts_ok(oo, filename) ||
        (snapshot_param && !(snapshot = parse_snapshot_param(snapshot_param, false)))) {
        return NULL;
    }
    oo->snapshot = snapshot;
    img = tool_qimg_image_open(filename, oo, &err);
    oo->snapshot = NULL;
    if (!img) {
        /* qemu-img loads the snapshot after the open: its own message */
        const char *load = strstr(err->message, "Failed to load snapshot: ");
        if (snapshot && load) {
            tool_error("%s", load);
            g_error_free(err);
        } else {
            tool_report_open_error(filename, err);
        }
        return NULL;
    }
    if (snapshot) {
        info = qimg_image_get_info(img, &err);
        if (!info) {
            tool_report_gerror(err, NULL);
            return NULL;
        }
        if (!has_snapshot(info, snapshot)) {
            tool_error("Failed to load snapshot: Can't find snapshot");
            return NULL;
        }
    }
    return g_steal_pointer(&img);
}

/* A relative backing name is relative to the folder of the new image. */
char *tool_resolve_backing(const char *image, const char *backing)
{
    return qimg_backing_name_resolve(image, backing);
}

void *tool_alloc_aligned(size_t size)
{
    void *p = NULL;

    if (posix_memalign(&p, 4096, size ? size : 1) != 0) {
        g_error("out of memory (%zu bytes)", size);
    }
    return p;
}

bool tool_image_opts_ok(const QimgOpenOptions *oo, const char *filename)
{
    if (oo->image_opts && oo->format) { /* qemu-img's img_open */
        tool_error("--image-opts and --format are mutually exclusive");
        return false;
    }
    if (oo->image_opts && oo->force_share && filename &&
        tool_opts_force_share_conflict(filename)) { /* optlist.c fact 5 */
        GError *err = NULL;
        g_autofree char *list = tool_image_opts_list(filename, true, true, &err);
        if (!list) { /* qemu-img reads the list (its warnings) first */
            tool_error("%s", err->message);
            g_error_free(err);
            return false;
        }
        tool_error("--force-share/-U conflicts with image options");
        return false;
    }
    return true;
}

QimgImage *tool_open_image(const char *filename, QimgOpenOptions *oo)
{
    GError *err = NULL;
    QimgImage *img;

    if (!tool_image_opts_ok(oo, filename)) {
        return NULL;
    }
    img = tool_qimg_image_open(filename, oo, &err);

    if (!img) {
        tool_report_open_error(filename, err);
        return NULL;
    }
    tool_warn_probed_raw(img, oo, filename);
    return img;
}

bool tool_image_marked_corrupt(QimgImage *img)
{
    g_autoptr(QimgInfo) info = NULL;

    if (qimg_image_is_read_only(img)) {
        return false;
    }
    info = qimg_image_get_info(img, NULL);
    return info && info->corrupt;
}

bool tool_close_image(QimgImage *img)
{
    GError *err = NULL;
    bool corrupt = tool_image_marked_corrupt(img);

    if (!qimg_image_close(img, &err)) {
        if (corrupt) { /* said when it was marked (tool_image_marked_corrupt) */
            g_clear_error(&err);
        } else {
            tool_report_gerror(err, NULL);
        }
        return false;
    }
    return true;
}
