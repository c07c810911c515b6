/*
 * qimg bitmap (--merge SOURCE | --add | --remove | --clear | --enable |
 *              --disable)... [-b source_file [-F source_fmt]]
 *             [-g granularity] [-f fmt] filename bitmap
 *
 * Facts learnt from running qemu-img 7.2 (its checks in its order):
 *  1. The operations run in the order given, each on the bitmap named by
 *     the last operand; none: "Need at least one of --add, --remove,
 *     --clear, --enable, --disable, or --merge"; -g without --add:
 *     "granularity only supported with --add"; -F without -b: "-F only
 *     supported with -b"; -b without --merge: "Merge bitmap source file
 *     only supported with --merge"; then "Expecting filename and bitmap
 *     name" unless exactly two operands.
 *  2. The image is opened read-write; an operation that fails prints
 *     "Operation OP on bitmap NAME failed: REASON" and stops the rest;
 *     exit 1, else 0 and nothing printed.
 *  3. --merge SOURCE sets the bits of the target bitmap that are set in
 *     SOURCE (of the image itself, or of -b FILE opened read-only as -F
 *     says or probed, when the operation runs; an open failure there is
 *     qemu-img's plain "Could not open ..." and stops).  A source format
 *     without bitmaps has none ("Dirty bitmap 'SOURCE' not found"); any
 *     granularities mix (a source bit sets every target bit it overlaps).
 *  4. Neither the image nor the source file opens its backing chain
 *     (bitmaps are per layer): a bitmap of an overlay merges into its own
 *     backing file, which the image is then, without a lock conflict.
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>

enum {
    OPT_ADD = 256,
    OPT_REMOVE,
    OPT_CLEAR,
    OPT_ENABLE,
    OPT_DISABLE,
    OPT_MERGE,
};

#define OP_MERGE (QIMG_BITMAP_DISABLE + 1)

static const char *const op_names[] = {
    [QIMG_BITMAP_ADD] = "add",         [QIMG_BITMAP_REMOVE] = "remove",
    [QIMG_BITMAP_CLEAR] = "clear",     [QIMG_BITMAP_ENABLE] = "enable",
    [QIMG_BITMAP_DISABLE] = "disable", [OP_MERGE] = "merge",
};

typedef struct BitmapAction {
    int op;          /* QimgBitmapOp or OP_MERGE */
    const char *src; /* OP_MERGE: the source bitmap */
} BitmapAction;

/* Fact 3: merge bitmap src (of src_file, or of img) into name; false with
 * the error printed. */
static bool merge(QimgImage *img, const char *name, const char *src, const char *src_file,
                  const char *src_fmt)
{
    g_autoptr(QimgImage) from = NULL;
    g_autoptr(GArray) extents = NULL;
    GError *err = NULL;

    if (src_file) {
        QimgOpenOptions so = TOOL_OPEN_OPTIONS_INIT;
        tool_open_secrets(&so);
        so.format = src_fmt;
        so.read_only = true;
        so.no_backing = true; /* fact 4 */
        from = tool_open_image(src_file, &so);
        if (!from) {
            return false;
        }
    }
    if (!qimg_image_bitmap_extents(from ? from : img, src, &extents, &err) ||
        !qimg_image_bitmap_merge(img, name, (const QimgRange *)(void *)extents->data,
                                 extents->len, &err)) {
        tool_error("Operation merge on bitmap %s failed: %s", name, err->message);
        g_error_free(err);
        return false;
    }
    return true;
}

int cmd_bitmap(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"add", no_argument, NULL, OPT_ADD},
        {"remove", no_argument, NULL, OPT_REMOVE},
        {"clear", no_argument, NULL, OPT_CLEAR},
        {"enable", no_argument, NULL, OPT_ENABLE},
        {"disable", no_argument, NULL, OPT_DISABLE},
        {"merge", required_argument, NULL, OPT_MERGE},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {"granularity", required_argument, NULL, 'g'},
        {"source-file", required_argument, NULL, 'b'},
        {"source-format", required_argument, NULL, 'F'},
        {NULL, 0, NULL, 0},
    };
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    g_autoptr(GArray) ops = g_array_new(FALSE, FALSE, sizeof(BitmapAction));
    const char *src_file = NULL, *src_fmt = NULL, *filename, *name;
    bool add = false, has_merge = false;
    int64_t granularity = 0;
    g_autoptr(QimgImage) img = NULL;
    GError *err = NULL;
    int c;

    while ((c = getopt_long(argc, argv, ":b:f:F:g:h", longopts, NULL)) != -1) {
        BitmapAction act = {0};
        switch (c) {
        case 'h':
            return tool_command_help("bitmap");
        case 'b':
            src_file = optarg;
            break;
        case 'f':
            oo.format = optarg;
            break;
        case 'F':
            src_fmt = optarg;
            break;
        case 'g':
            if (!tool_cvtnum("granularity", optarg, INT64_MAX, &granularity)) {
                return 1;
            }
            break;
        case OPT_ADD:
        case OPT_REMOVE:
        case OPT_CLEAR:
        case OPT_ENABLE:
        case OPT_DISABLE:
            act.op = QIMG_BITMAP_ADD + (c - OPT_ADD);
            add = add || act.op == QIMG_BITMAP_ADD;
            g_array_append_val(ops, act);
            break;
        case OPT_MERGE:
            act = (BitmapAction){.op = OP_MERGE, .src = optarg};
            has_merge = true;
            g_array_append_val(ops, act);
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
    /* fact 1 */
    if (ops->len == 0) {
        tool_error("Need at least one of --add, --remove, --clear, --enable, --disable, "
                   "or --merge");
        return 1;
    }
    if (granularity && !add) {
        tool_error("granularity only supported with --add");
        return 1;
    }
    if (src_fmt && !src_file) {
        tool_error("-F only supported with -b");
        return 1;
    }
    if (src_file && !has_merge) {
        tool_error("Merge bitmap source file only supported with --merge");
        return 1;
    }
    if (optind != argc - 2) {
        tool_error("Expecting filename and bitmap name");
        return 1;
    }
    if (granularity > UINT32_MAX) {
        granularity = 1; /* refused by the add as qemu-img refuses it */
    }
    filename = argv[optind];
    name = argv[optind + 1];

    /* fact 2 */
    oo.cache = QIMG_CACHE_WRITEBACK;
    oo.no_backing = true; /* fact 4 */
    img = tool_open_image(filename, &oo);
    if (!img) {
        return 1;
    }
    for (guint i = 0; i < ops->len; i++) {
        BitmapAction *act = &g_array_index(ops, BitmapAction, i);
        if (act->op == OP_MERGE) {
            if (!merge(img, name, act->src, src_file, src_fmt)) {
                return 1;
            }
        } else if (!qimg_image_bitmap_op(img, (QimgBitmapOp)act->op, name,
                                         (uint32_t)granularity, &err)) {
            tool_error("Operation %s on bitmap %s failed: %s", op_names[act->op], name,
                       err->message);
            g_error_free(err);
            return 1;
        }
    }
    if (!tool_close_image(g_steal_pointer(&img))) {
        return 1;
    }
    return 0;
}
