/*
 * qimg measure [--output=ofmt] [-O output_fmt] [-o options] [--size N |
 *              [-f fmt] [-l snapshot_param] [-U] filename]
 *
 * Facts learnt from running qemu-img 7.2:
 *  1. Exactly one of --size N and a file name; "At most one filename
 *     argument is allowed.", "--image-opts, -f, and -l require a filename
 *     argument.", "--size N cannot be used together with a filename.",
 *     "Either --size N or one filename must be specified." in that order
 *     (after -l's own check, options.c fact 3).
 *     --size takes qemu-img's sizes up to 2^63-1 (tool_cvtnum's messages).
 *  2. The source is opened read-only (a shared lock; -U forces sharing);
 *     -l loads an internal snapshot ("Failed to load snapshot: ..."). Then
 *     the output format (default raw): "Unknown file format 'F'".
 *  3. -o is the target's create options (repeated -o joined); a bad list
 *     prints its error and "Invalid options for file format 'F'"; there is
 *     no "-o help" ("help" is an invalid parameter).  --size overrides -o
 *     size.  Formats qemu-img knows but cannot measure fail as unknown
 *     ones do here: qimg knows raw and qcow2.
 *  4. Human output: "required size: N", "fully allocated size: N" and,
 *     when both sides can hold persistent bitmaps, "bitmaps size: N".  JSON:
 *     "bitmaps" (when there), "required", "fully-allocated".  Exit status 0
 *     or 1.
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>

enum { OPT_SIZE = 256, OPT_OUTPUT };

static void print_result(const QimgMeasure *m, ToolOutput output)
{
    if (output == TOOL_OUTPUT_HUMAN) {
        printf("required size: %" PRIu64 "\n", m->required);
        printf("fully allocated size: %" PRIu64 "\n", m->fully_allocated);
        if (m->has_bitmaps) {
            printf("bitmaps size: %" PRIu64 "\n", m->bitmaps);
        }
        return;
    }
    ToolJson j;
    tool_json_init(&j);
    tool_json_begin_object(&j, NULL);
    if (m->has_bitmaps) {
        tool_json_uint(&j, "bitmaps", m->bitmaps);
    }
    tool_json_uint(&j, "required", m->required);
    tool_json_uint(&j, "fully-allocated", m->fully_allocated);
    tool_json_end_object(&j);
    g_autofree char *s = tool_json_finish(&j);
    printf("%s\n", s);
}

int cmd_measure(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"size", required_argument, NULL, OPT_SIZE},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"force-share", no_argument, NULL, 'U'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    const char *fmt = NULL, *out_fmt = "raw", *snap = NULL, *filename = NULL;
    g_autofree char *optlist = NULL;
    bool force_share = false, size_set = false, image_opts = false;
    int64_t size = 0;
    ToolOutput output = TOOL_OUTPUT_HUMAN;
    g_autoptr(QimgImage) src = NULL;
    g_autoptr(GPtrArray) opts = NULL;
    g_autoptr(GHashTable) hash = NULL;
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    tool_create_secrets(&co);
    QimgMeasure m = QIMG_MEASURE_INIT;
    const ToolOptDesc *descs;
    GError *err = NULL;
    int c;

    while ((c = getopt_long(argc, argv, ":f:hl:O:o:U", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            fmt = optarg;
            break;
        case 'h':
            return tool_command_help("measure");
        case 'l': { /* options.c fact 3 */
            g_autofree char *checked = tool_parse_snapshot_param(optarg);
            if (!checked) {
                return 1;
            }
            snap = optarg;
            break;
        }
        case 'O':
            out_fmt = optarg;
            break;
        case 'o':
            if (!tool_opts_accumulate(&optlist, optarg)) {
                return 1;
            }
            break;
        case 'U':
            force_share = true;
            break;
        case OPT_SIZE:
            if (!tool_cvtnum("image size", optarg, INT64_MAX, &size)) {
                return 1;
            }
            size_set = true;
            break;
        case OPT_OUTPUT:
            if (!tool_parse_output(optarg, &output)) {
                return 1;
            }
            break;
        default: {
            int orc = tool_common_option(c, argv, &image_opts);
            if (orc >= 0) {
                return orc;
            }
            break;
        }
        }
    }
    /* fact 1 */
    if (argc - optind > 1) {
        tool_error("At most one filename argument is allowed.");
        return 1;
    }
    filename = optind < argc ? argv[optind] : NULL;
    if (!filename && (image_opts || fmt || snap)) {
        tool_error("--image-opts, -f, and -l require a filename argument.");
        return 1;
    }
    if (filename && size_set) {
        tool_error("--size N cannot be used together with a filename.");
        return 1;
    }
    if (!filename && !size_set) {
        tool_error("Either --size N or one filename must be specified.");
        return 1;
    }
    if (filename) { /* fact 2 */
        QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
        tool_open_secrets(&oo);
        oo.image_opts = image_opts;
        oo.format = fmt;
        oo.read_only = true;
        oo.force_share = force_share;
        if (!(src = tool_open_snapshot(filename, &oo, snap))) {
            return 1;
        }
    }

    /* fact 3 */
    descs = tool_create_opts(out_fmt);
    if (!descs) {
        tool_error("Unknown file format '%s'", out_fmt);
        return 1;
    }
    if (optlist && tool_opts_want_help(optlist)) { /* fact 3: no -o help */
        g_auto(GStrv) parts = g_strsplit(optlist, ",", -1);
        for (int i = 0; parts[i]; i++) {
            if (strcmp(parts[i], "help") == 0 || strcmp(parts[i], "?") == 0) {
                tool_error("Invalid parameter '%s'", parts[i]);
                break;
            }
        }
        tool_error("Invalid options for file format '%s'", out_fmt);
        return 1;
    }
    opts = tool_opts_parse(optlist ? optlist : "", descs, NULL);
    if (!opts) {
        tool_error("Invalid options for file format '%s'", out_fmt);
        return 1;
    }
    tool_opts_remove(opts, "nocow"); /* the file's, no size of their own */
    tool_opts_remove(opts, "extent_size_hint");
    hash = tool_opts_to_hash(opts);
    co.format = out_fmt;
    co.size = (uint64_t)size;
    co.size_set = size_set;
    co.options = hash;
    if (!qimg_measure(&co, src, &m, &err)) {
        tool_report_gerror(err, NULL);
        return 1;
    }
    print_result(&m, output);
    return 0;
}
