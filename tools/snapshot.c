/*
 * qimg snapshot [-f fmt] [-U] [-q] -l FILE
 *
 * Only listing is implemented for now.  qemu-img 7.2 facts: the list is
 * printed as "Snapshot list:" and the table (even with -q); an image
 * without snapshots (or a raw image) prints nothing and succeeds.  Without
 * an action the image is only opened.
 */
#include "tools/qimg-tool.h"

#include <getopt.h>

int cmd_snapshot(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"force-share", no_argument, NULL, 'U'},
        {NULL, 0, NULL, 0},
    };
    const char *fmt = NULL;
    bool list = false, force_share = false;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(QimgImage) img = NULL;
    g_autoptr(QimgInfo) info = NULL;
    GError *err = NULL;
    int c;

    while ((c = getopt_long(argc, argv, ":lf:hqU", longopts, NULL)) != -1) {
        switch (c) {
        case 'l':
            list = true;
            break;
        case 'f':
            fmt = optarg;
            break;
        case 'h':
            return tool_command_help("snapshot");
        case 'q':
            break; /* the list is printed even with -q, as qemu-img does */
        case 'U':
            force_share = true;
            break;
        default:
            return tool_bad_option(c, argv);
        }
    }
    if (optind != argc - 1) {
        return tool_usage_error("Expecting one image file name");
    }

    oo.format = fmt;
    oo.read_only = true;
    oo.no_backing = true;
    oo.force_share = force_share;
    img = qimg_image_open(argv[optind], &oo, &err);
    if (!img) {
        tool_report_gerror(err, NULL);
        return 1;
    }
    if (!list) {
        return 0;
    }
    info = qimg_image_get_info(img, &err);
    if (!info) {
        tool_report_gerror(err, NULL);
        return 1;
    }
    if (info->snapshots && info->snapshots->len > 0) {
        printf("Snapshot list:\n");
        tool_print_snapshot_table(stdout, info->snapshots);
    }
    return 0;
}
