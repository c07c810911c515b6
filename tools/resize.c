/*
 * qimg resize [-f fmt] [--shrink] [--preallocation=mode] [-q] FILE [+|-]SIZE
 *
 * Facts learnt from running qemu-img 7.2:
 *  1. The size is the last argument and is taken before the options are
 *     parsed, so "-1G" is a size, not an option.  Fewer than two arguments:
 *     "Not enough arguments"; anything but one file name and the size:
 *     "Expecting image file name and size" (both with the --help hint).
 *  2. A leading '+' or '-' makes the size relative; the rest is a size
 *     with qemu-img's suffixes, else "Parameter 'size' expects a
 *     non-negative number below 2^64" and the suffix lines.
 *  3. After opening the image: a result <= 0 (or one that overflows) is
 *     "New image size must be positive"; preallocation when not growing is
 *     "Preallocation can only be used for growing images"; shrinking without
 *     --shrink is refused ("Use the --shrink option to perform a shrink
 *     operation." and a warning that it would delete the data beyond the new
 *     end).  An open failure reads "Could not open 'F': <reason>" where the
 *     reason itself starts with "Could not open 'F': " (qemu-img's img_open).
 *  4. "Image resized." on success (also when the size does not change),
 *     unless -q.  Exit status 0 or 1.
 *  5. The resize permission is taken at open (a raw image in use by
 *     someone who does not share resizing is refused there); there is no
 *     -U.
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>

enum { OPT_PREALLOCATION = 256, OPT_SHRINK };

int cmd_resize(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"preallocation", required_argument, NULL, OPT_PREALLOCATION},
        {"shrink", no_argument, NULL, OPT_SHRINK},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    QimgPrealloc prealloc = QIMG_PREALLOC_OFF;
    const char *size_arg, *filename, *p;
    bool quiet = false, shrink = false;
    int relative = 0, c;
    uint64_t n, current;
    int64_t total;
    g_autoptr(QimgImage) img = NULL;
    GError *err = NULL;

    /* fact 1: take the size first so that "-1G" is not an option */
    if (argc < 3) {
        return tool_usage_error("Not enough arguments");
    }
    size_arg = argv[--argc];

    while ((c = getopt_long(argc, argv, ":f:hq", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            oo.format = optarg;
            break;
        case 'h':
            return tool_command_help("resize");
        case 'q':
            quiet = true;
            break;
        case OPT_PREALLOCATION:
            if (!qimg_prealloc_parse(optarg, &prealloc, NULL)) {
                tool_error("Invalid preallocation mode '%s'", optarg);
                return 1;
            }
            break;
        case OPT_SHRINK:
            shrink = true;
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
    if (optind != argc - 1) {
        return tool_usage_error("Expecting image file name and size");
    }
    filename = argv[optind];

    /* fact 2 */
    p = size_arg;
    if (*p == '+') {
        relative = 1;
        p++;
    } else if (*p == '-') {
        relative = -1;
        p++;
    }
    if (tool_strtosz(p, &n) < 0) {
        tool_error("Parameter 'size' expects a non-negative number below 2^64\n"
                   "Optional suffix k, M, G, T, P or E means kilo-, mega-, giga-, tera-, "
                   "peta-\nand exabytes, respectively.");
        return 1;
    }

    oo.cache = QIMG_CACHE_WRITEBACK;
    oo.resize = true; /* the resize lock at open, as qemu-img takes it */
    img = tool_open_image(filename, &oo);
    if (!img) {
        return 1;
    }
    current = qimg_image_size(img);

    /* fact 3: qemu-img computes in signed 64-bit arithmetic */
    if (relative) {
        total = (int64_t)(current + (uint64_t)relative * n);
    } else {
        total = (int64_t)n;
    }
    if (total <= 0) {
        tool_error("New image size must be positive");
        return 1;
    }
    if ((uint64_t)total <= current && prealloc != QIMG_PREALLOC_OFF) {
        tool_error("Preallocation can only be used for growing images");
        return 1;
    }
    if (current > (uint64_t)total && !shrink) {
        tool_error("Use the --shrink option to perform a shrink operation.");
        tool_warning("Shrinking an image will delete all data beyond the shrunken "
                     "image's end. Before performing such an operation, make sure there "
                     "is no important data there.");
        return 1;
    }

    if (!qimg_image_truncate(img, (uint64_t)total, shrink, prealloc, &err)) {
        tool_report_gerror(err, NULL);
        return 1;
    }
    if (!quiet) {
        printf("Image resized.\n");
    }
    if (!tool_close_image(g_steal_pointer(&img))) {
        return 1;
    }
    return 0;
}
