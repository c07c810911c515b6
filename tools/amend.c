/*
 * qimg amend [-p] [-q] [-f fmt] [-t cache] [--force] -o options FILE
 *
 * Facts learnt from running qemu-img 7.2 (its checks in its order):
 *  1. Each -o argument must be a valid list when it is given ("Invalid
 *     option list: L": empty, a leading comma, or an odd number of
 *     trailing commas); several are joined with ",".  No -o at all: "Must
 *     specify options (-o)" with the --help hint.
 *  2. With -f and "help" (or "?") in the list, the options of that format
 *     are printed without opening anything ("Amend options for 'qcow2':",
 *     sorted, exit 0; a format without amendment: "Format driver 'raw'
 *     does not support option amendment"; an unknown one: "Unknown file
 *     format 'x'").  Then: exactly one file name ("Expecting one image
 *     file name"), the -t cache mode ("Invalid cache option: x"), the
 *     image opened read-write (open errors as every command words them;
 *     a probed raw image warns), help for the probed format, and the
 *     format must support amendment.
 *  3. The list is then checked against the amend options, left to right:
 *     "Invalid parameter 'k'" (plus "This option is only supported for
 *     image creation" when the whole list parses as create options: for
 *     cluster_size, extended_l2, compression_type, preallocation,
 *     encryption, encrypt.format, ...), "Parameter 'k' expects ..." for a
 *     bad value.  What the values mean is the driver's (qcow2/amend.c).
 *  4. -p prints the progress line (not with -q): 0 before the driver
 *     runs, 100 after it, the driver's reports in between -- a line each
 *     time the value moved by more than 1 point or is 0 or 100 -- and a
 *     newline at the end, also after an error once the file name was
 *     checked.  Errors are "qimg: <message>"; "Cannot amend the backing
 *     file" adds "You can use 'qemu-img rebase' instead."  Exit 0 or 1.
 *  5. --object and --image-opts are refused (qimg has no QOM objects).
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <string.h>

enum { OPT_FORCE = 256 };

typedef struct AmendProgress {
    bool enabled;
    double last;
} AmendProgress;

/* Fact 4: qemu's rule for when a progress line is printed. */
static void progress_at(AmendProgress *p, double pct)
{
    if (!p->enabled) {
        return;
    }
    pct = MIN(pct, 100.0);
    if (pct > p->last + 1.0 || pct < p->last - 1.0 || pct == 0.0 || pct == 100.0) {
        p->last = pct;
        tool_progress_show(pct);
    }
}

static void progress_cb(void *opaque, uint64_t done, uint64_t total)
{
    progress_at(opaque, total ? 100.0 * (double)done / (double)total : 100.0);
}

/* Fact 2: help for fmt; the exit code. */
static int amend_help(const char *fmt)
{
    if (tool_amend_opts(fmt, false)) {
        tool_opts_print_amend_help(fmt);
        return 0;
    }
    if (!qimg_format_name_valid(fmt)) {
        tool_error("Unknown file format '%s'", fmt);
        return 1;
    }
    tool_error("Format driver '%s' does not support option amendment", fmt);
    return 1;
}

/* Facts 3, 4: check the list, run the driver; the exit code. */
static int amend_image(QimgImage *img, const char *optlist, bool force,
                       AmendProgress *prog)
{
    const char *fmt = qimg_image_format(img);
    const ToolOptDesc *descs = tool_amend_opts(fmt, false);
    QimgAmendOptions ao = QIMG_AMEND_OPTIONS_INIT;
    g_autoptr(GPtrArray) opts = NULL;
    g_autoptr(GHashTable) hash = NULL;
    GError *err = NULL;
    gboolean ok;

    if (!descs) {
        tool_error("Format driver '%s' does not support option amendment", fmt);
        return 1;
    }
    opts = tool_opts_parse(optlist, descs, NULL);
    if (!opts) {
        if (tool_opts_valid(optlist, tool_amend_opts(fmt, true))) {
            fprintf(stderr, "This option is only supported for image creation\n");
        }
        return 1;
    }
    hash = tool_opts_to_hash(opts);
    ao.options = hash;
    ao.force = force;
    ao.secret_values = tool_secret_table(); /* encrypt.new-secret, ... */
    ao.progress = prog->enabled ? progress_cb : NULL;
    ao.progress_opaque = prog;
    progress_at(prog, 0.0);
    ok = qimg_image_amend(img, &ao, &err);
    progress_at(prog, 100.0);
    if (!ok) {
        bool backing = strcmp(err->message, "Cannot amend the backing file") == 0;
        tool_report_gerror(err, NULL);
        if (backing) {
            fprintf(stderr, "You can use '%s rebase' instead.\n", tool_program());
        }
        return 1;
    }
    return 0;
}

int cmd_amend(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {"force", no_argument, NULL, OPT_FORCE},
        {NULL, 0, NULL, 0},
    };
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    const char *fmt = NULL, *cache = "writeback";
    g_autofree char *optlist = NULL;
    g_autoptr(QimgImage) img = NULL;
    AmendProgress prog = {0};
    bool progress = false, quiet = false, force = false;
    int c, ret;

    while ((c = getopt_long(argc, argv, ":ho:f:t:pq", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            return tool_command_help("amend");
        case 'o':
            if (!tool_opts_accumulate(&optlist, optarg)) { /* fact 1 */
                return 1;
            }
            break;
        case 'f':
            fmt = optarg;
            break;
        case 't':
            cache = optarg;
            break;
        case 'p':
            progress = true;
            break;
        case 'q':
            quiet = true;
            break;
        case OPT_FORCE:
            force = true;
            break;
        default: {
            int orc = tool_common_option(c, argv, &oo.image_opts);
            if (orc >= 0) {
                return orc;
            }
            break;
        }
        }
    }
    if (!optlist) {
        return tool_usage_error("Must specify options (-o)");
    }
    prog.enabled = progress && !quiet;

    /* fact 2 */
    if (fmt && tool_opts_want_help(optlist)) {
        ret = amend_help(fmt);
    } else if (optind != argc - 1) {
        tool_error("Expecting one image file name");
        ret = 1;
    } else if (!tool_parse_cache(cache, false, &oo.cache)) {
        ret = 1;
    } else {
        oo.format = fmt;
        if (g_str_has_prefix(optlist, "size=") || strstr(optlist, ",size=")) {
            oo.resize = true; /* qemu-img takes the resize permission for size= */
        }
        img = tool_open_image(argv[optind], &oo);
        if (!img) {
            ret = 1;
        } else if (tool_opts_want_help(optlist)) {
            ret = amend_help(qimg_image_format(img));
        } else {
            ret = amend_image(img, optlist, force, &prog);
        }
        if (img && !tool_close_image(g_steal_pointer(&img))) {
            ret = 1;
        }
    }
    if (prog.enabled) {
        printf("\n"); /* fact 4 */
    }
    return ret;
}
