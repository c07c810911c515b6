/*
 * qimg create [-q] [-f fmt] [-b backing [-F backing_fmt]] [-u] [-o options]
 *             FILE [SIZE]
 *
 * Facts learnt from qemu-img 7.2:
 *  1. The "Formatting 'FILE', fmt=FMT ..." line lists every create option
 *     that is set or has a printable default, in a fixed order per format
 *     (see tools/options.c), a comma in a value doubled (",,", as
 *     option lists escape it); it is printed after the options and the
 *     backing file were checked and before the driver runs, so driver
 *     errors follow it.
 *  2. -b / -F override -o backing_file / backing_fmt.  A backing file
 *     needs a backing format.  Unless -u, the backing image is opened
 *     (its name taken relative to FILE's folder) to check it and, when no
 *     size was given, to take its virtual size.
 *  3. Errors after the file name is known are prefixed with "FILE: ".
 *  4. The backing file is opened with force share and for metadata only:
 *     no lock at all.  FILE itself is locked before it is truncated, so an
 *     image in use is refused ("FILE: Failed to get \"write\" lock") and
 *     left as it was.
 *  5. A format driver's "file too large" (EFBIG) reads "The image size is
 *     too large for file format 'FMT'", with " (try using a larger cluster
 *     size)" when -o named a cluster_size (qcow2's driver words it so
 *     itself); convert keeps the driver's own message.
 *  6. An empty backing file name (-b '' or -o backing_file=) is refused
 *     before anything else about the backing file, -u or not: "FILE:
 *     Expected backing file name, got empty string".
 */
#include "qimg-tool.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

/*
 * Check the backing image (fact 2); sets *size from it when 'need_size'.
 * Returns false after printing the error.
 */
static bool check_backing(const char *filename, const char *backing,
                          const char *backing_fmt, bool unsafe, bool need_size,
                          uint64_t *size)
{
    g_autofree char *path = tool_resolve_backing(filename, backing);
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    GError *err = NULL;
    QimgImage *bimg;

    if (strcmp(path, filename) == 0 || strcmp(backing, filename) == 0) {
        tool_error("%s: Error: Trying to create an image with the same filename as the "
                   "backing file",
                   filename);
        return false;
    }
    if (unsafe && !need_size) {
        return true;
    }
    oo.format = backing_fmt;
    oo.read_only = true;
    oo.no_backing = true;
    oo.force_share = true;
    oo.no_io = true; /* as qemu-img create: no locks on the backing file */
    /*
     * An unknown protocol's error is qemu-img's without "Could not open";
     * a caller's backing name with a protocol is not joined to the image's
     * folder (QEMU's path_combine), so it is checked before the join.
     */
    bimg = qimg_name_check(backing, &err) && qimg_name_check(path, &err)
               ? qimg_image_open(path, &oo, &err)
               : NULL;
    if (!bimg) {
        if (unsafe) {
            /* -u with no size: nothing to take the size from */
            g_clear_error(&err);
            tool_error("%s: Image creation needs a size parameter", filename);
            return false;
        }
        tool_error("%s: %s", filename, err->message);
        fprintf(stderr, "Could not open backing image.\n");
        g_clear_error(&err);
        return false;
    }
    if (!backing_fmt) {
        tool_error("%s: Backing file specified without backing format", filename);
        fprintf(stderr, "Detected format of %s.\n", qimg_image_format(bimg));
        qimg_image_free(bimg);
        return false;
    }
    if (need_size) {
        *size = qimg_image_size(bimg);
    }
    qimg_image_free(bimg);
    return true;
}

/* Does the format take creation option name? */
static bool takes(const ToolOptDesc *descs, const char *name)
{
    for (; descs->name; descs++) {
        if (strcmp(descs->name, name) == 0) {
            return true;
        }
    }
    return false;
}

static void print_formatting(const char *filename, const char *fmt,
                             const ToolOptDesc *descs, GPtrArray *opts)
{
    GString *line = g_string_new(NULL);

    g_string_append_printf(line, "Formatting '%s', fmt=%s", filename, fmt);
    for (const ToolOptDesc *d = descs; d->name; d++) {
        const ToolOpt *o = NULL;

        for (guint i = 0; i < opts->len; i++) {
            const ToolOpt *x = opts->pdata[i];
            if (strcmp(x->key, d->name) == 0) {
                o = x;
            }
        }
        if (o) {
            /* fact 1: a comma in a value is doubled, as in an option list */
            g_string_append_printf(line, " %s=", d->name);
            for (const char *p = o->shown; *p; p++) {
                if (*p == ',') {
                    g_string_append_c(line, ',');
                }
                g_string_append_c(line, *p);
            }
        } else if (d->def_print) {
            g_string_append_printf(line, " %s=%s", d->name, d->def_print);
        }
    }
    printf("%s\n", line->str);
    fflush(stdout);
    g_string_free(line, TRUE);
}

int cmd_create(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {NULL, 0, NULL, 0},
    };
    const char *fmt = "raw", *backing = NULL, *backing_fmt = NULL;
    const char *filename, *size_arg = NULL;
    g_autofree char *optlist = NULL;
    g_autoptr(GPtrArray) opts = NULL;
    bool unsafe = false, quiet = false, size_set = false;
    uint64_t size = 0;
    const ToolOptDesc *descs;
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    tool_create_secrets(&co);
    g_autoptr(GHashTable) hash = NULL;
    GError *err = NULL;
    int c;

    while ((c = getopt_long(argc, argv, ":F:b:f:ho:qu", longopts, NULL)) != -1) {
        switch (c) {
        case 'F':
            backing_fmt = optarg;
            break;
        case 'b':
            backing = optarg;
            break;
        case 'f':
            fmt = optarg;
            break;
        case 'h':
            return tool_command_help("create");
        case 'o':
            if (!tool_opts_accumulate(&optlist, optarg)) {
                return 1;
            }
            break;
        case 'q':
            quiet = true;
            break;
        case 'u':
            unsafe = true;
            break;
        default: {
            int orc = tool_common_option(c, argv, NULL);
            if (orc >= 0) {
                return orc;
            }
            break;
        }
        }
    }

    descs = tool_create_opts_for(fmt, NULL); /* "-f file" too (optlist.c fact 7) */
    if (optlist && tool_opts_want_help(optlist)) {
        if (!descs) {
            tool_create_format_error(NULL, fmt);
            return 1;
        }
        tool_opts_print_help(fmt, optind < argc ? argv[optind] : NULL);
        return 0;
    }
    if (optind >= argc) {
        return tool_usage_error("Expecting image file name");
    }
    filename = argv[optind++];
    if (optind < argc) {
        int64_t v;
        size_arg = argv[optind++];
        if (!tool_cvtnum("image size", size_arg, INT64_MAX, &v)) {
            return 1;
        }
        size = (uint64_t)v;
        size_set = true;
    }
    if (optind != argc) {
        return tool_usage_error("Unexpected argument: %s", argv[optind]);
    }
    if (!descs) {
        tool_create_format_error(filename, fmt);
        return 1;
    }
    if (!qimg_name_check(filename, &err)) { /* as qemu-img, before the options */
        tool_error("%s: %s", filename, err->message);
        g_clear_error(&err);
        return 1;
    }
    descs = tool_create_opts_for(fmt, filename); /* the protocol's options too */

    opts = tool_opts_parse(optlist ? optlist : "", descs, filename);
    if (!opts) {
        return 1;
    }
    if (backing && !tool_opts_get(opts, "backing_file") &&
        !takes(descs, "backing_file")) {
        tool_error("%s: Backing file not supported for file format '%s'", filename, fmt);
        return 1;
    }
    if (backing) {
        tool_opts_set(opts, "backing_file", backing, NULL);
    }
    if (backing_fmt && takes(descs, "backing_fmt")) {
        tool_opts_set(opts, "backing_fmt", backing_fmt, NULL);
    }
    backing = tool_opts_get(opts, "backing_file");
    backing_fmt = tool_opts_get(opts, "backing_fmt");

    if (tool_opts_get(opts, "size")) {
        if (size_set) {
            tool_error("%s: The image size must be specified only once", filename);
            return 1;
        }
        size = g_ascii_strtoull(tool_opts_get(opts, "size"), NULL, 10);
        size_set = true;
    }
    if (backing) {
        if (!*backing) { /* fact 6 */
            tool_error("%s: Expected backing file name, got empty string", filename);
            return 1;
        }
        if (!backing_fmt && unsafe) {
            tool_error("%s: Backing file specified without backing format", filename);
            return 1;
        }
        if (!check_backing(filename, backing, backing_fmt, unsafe, !size_set, &size)) {
            return 1;
        }
        size_set = true;
    }
    if (!size_set) {
        tool_error("%s: Image creation needs a size parameter", filename);
        return 1;
    }

    {
        g_autofree char *s = g_strdup_printf("%" PRIu64, size);
        tool_opts_set(opts, "size", s, NULL);
    }
    if (!quiet) {
        print_formatting(filename, fmt, descs, opts);
    }
    if (backing_fmt && !backing) {
        tool_error("%s: Backing format cannot be used without backing file", filename);
        return 1;
    }

    tool_opts_remove(opts, "size");
    /* File-system hints (btrfs nocow, XFS extent size) that qemu-img applies
     * at best effort; the library does not take them. */
    tool_opts_remove(opts, "nocow");
    tool_opts_remove(opts, "extent_size_hint");
    hash = tool_opts_to_hash(opts);
    co.format = fmt;
    co.size = size;
    co.size_set = true;
    co.backing_file = backing;
    co.backing_format = backing_fmt;
    co.options = hash;
    if (!qimg_image_create(filename, &co, &err)) {
        if (err->code == EFBIG && strcmp(fmt, "qcow2") != 0) { /* fact 5 */
            g_free(err->message);
            err->message = g_strdup_printf(
                "The image size is too large for file format '%s'%s", fmt,
                tool_opts_get(opts, "cluster_size") ? " (try using a larger cluster size)"
                                                    : "");
        }
        tool_report_gerror(err, filename);
        return 1;
    }
    return 0;
}
