/*
 * qimg snapshot [-q] [-l | -c NAME | -a NAME | -d NAME] [-U] FILE
 * (no -f: qemu-img 7.2's snapshot has none and rejects it)
 *
 * Facts learnt from running qemu-img 7.2 (not from its source):
 *  1. At most one of -l/-c/-a/-d, given once ("-l -l" is refused too):
 *     "Cannot mix '-l', '-a', '-c', '-d'" (usage error, rc 1).  Without an
 *     action the image is only opened (rc 0).  Option errors come before
 *     "Expecting one image file name".  qemu-img 7.2 has no -f here; qimg
 *     keeps it as an extension.
 *  2. -l opens read-only and prints "Snapshot list:" and the table even with
 *     -q; an image without snapshots (or a raw image) prints nothing.
 *  3. -c/-a/-d open read-write without the backing chain; with -U that is
 *     refused at open: "Could not open 'F': force-share=on can only be used
 *     with read-only images".
 *  4. -c: names need not be unique and may be empty; the new entry has
 *     VM SIZE 0, VM CLOCK 0 and ICOUNT 0 (not -1, unlike savevm).  Errors:
 *     "Could not create snapshot 'x': -95 (Operation not supported)" (raw),
 *     always as "<-errno> (<strerror>)".
 *  5. -a looks up the ID first, then the name.  Errors: "Could not apply
 *     snapshot 'x': Failed to load snapshot: No such file or directory"
 *     (unknown), "...: Block driver does not support snapshots" (raw),
 *     "...: Failed to load snapshot: Operation not supported" (qcow2 with
 *     an external data file).
 *  6. -d looks up the name only (ID "2" does not find a snapshot named
 *     "s1"), the first match in table order: "Could not delete snapshot
 *     'x': snapshot not found" (also for raw).  Other failures: "Could not
 *     delete snapshot 'x': <message>".
 *  7. Success prints nothing; every failure exits 1.
 *  8. An open failure reads "Could not open 'F': <reason>", where the
 *     reason itself starts with "Could not open 'F': " for file errors
 *     ("... No such file or directory"), for -l as for the others.
 *
 * Where qemu-img's fixed wording would hide the library's reason (an I/O
 * error, a corrupt image), that reason is printed on a line of its own
 * first, the way QEMU prints its corruption event before the failure.
 */
#include "qimg-tool.h"

#include "qimg/snapshot.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>

typedef enum SnapAction {
    SNAP_NONE,
    SNAP_LIST,
    SNAP_CREATE,
    SNAP_APPLY,
    SNAP_DELETE
} SnapAction;

/* The library's reason, when qemu-img's wording would not show it. */
static void report_detail(const GError *err)
{
    if (err && err->code != ENOTSUP && err->code != ENOENT && err->code != EFBIG &&
        strcmp(err->message, g_strerror(err->code)) != 0) {
        tool_error("%s", err->message);
    }
}

static int do_list(QimgImage *img)
{
    g_autoptr(QimgInfo) info = NULL;
    GError *err = NULL;

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

/* Fact 4. */
static int do_create(QimgImage *img, const char *name)
{
    QimgSnapshotParams p = {
        .struct_size = sizeof(p),
        .name = name,
        .has_icount = true, /* qemu-img snapshot -c records icount 0 */
        .icount = 0,
    };
    GError *err = NULL;
    g_autofree char *id = qimg_snapshot_create(img, &p, &err);

    if (!id) {
        int code = err && err->code > 0 ? err->code : EIO;
        report_detail(err);
        tool_error("Could not create snapshot '%s': %d (%s)", name, -code,
                   g_strerror(code));
        g_clear_error(&err);
        return 1;
    }
    return 0;
}

/* True if 'name' matches an ID or a name (a failed listing says yes). */
static bool snapshot_exists(QimgImage *img, const char *name)
{
    GPtrArray *list = qimg_snapshot_list(img, NULL);
    bool found = list == NULL;

    for (guint i = 0; list && i < list->len && !found; i++) {
        const QimgSnapshotInfo *sn = g_ptr_array_index(list, i);
        found = (sn->id && strcmp(sn->id, name) == 0) ||
                (sn->name && strcmp(sn->name, name) == 0);
    }
    qimg_snapshot_list_free(list);
    return found;
}

/* Fact 5. */
static int do_apply(QimgImage *img, const char *name)
{
    GError *err = NULL;

    if (qimg_snapshot_apply(img, name, &err)) {
        return 0;
    }
    int code = err && err->code > 0 ? err->code : EIO;
    if (code != ENOTSUP && !snapshot_exists(img, name)) {
        code = ENOENT; /* whatever the driver said: QEMU's lookup failed */
    }
    if (code == ENOTSUP && strcmp(qimg_image_format(img), "qcow2") != 0) {
        tool_error(
            "Could not apply snapshot '%s': Block driver does not support snapshots",
            name);
    } else {
        report_detail(err);
        tool_error("Could not apply snapshot '%s': Failed to load snapshot: %s", name,
                   g_strerror(code));
    }
    g_clear_error(&err);
    return 1;
}

/* Fact 6: by name only; the ID then names the entry exactly. */
static int do_delete(QimgImage *img, const char *name)
{
    GError *err = NULL;
    GPtrArray *list = qimg_snapshot_list(img, &err);
    g_autofree char *id = NULL;

    if (!list) {
        tool_error("Could not delete snapshot '%s': %s", name,
                   err ? err->message : "unknown error");
        g_clear_error(&err);
        return 1;
    }
    for (guint i = 0; i < list->len && !id; i++) {
        const QimgSnapshotInfo *sn = g_ptr_array_index(list, i);
        if (sn->name && sn->id && strcmp(sn->name, name) == 0) {
            id = g_strdup(sn->id);
        }
    }
    qimg_snapshot_list_free(list);
    if (!id) {
        tool_error("Could not delete snapshot '%s': snapshot not found", name);
        return 1;
    }
    if (!qimg_snapshot_delete(img, id, &err)) {
        tool_error("Could not delete snapshot '%s': %s", name,
                   err ? err->message : "unknown error");
        g_clear_error(&err);
        return 1;
    }
    return 0;
}

int cmd_snapshot(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"force-share", no_argument, NULL, 'U'},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    const char *fmt = NULL, *name = NULL, *filename;
    SnapAction action = SNAP_NONE;
    bool force_share = false;
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    g_autoptr(QimgImage) img = NULL;
    GError *err = NULL;
    int c, ret;

    while ((c = getopt_long(argc, argv, ":la:c:d:hqU", longopts, NULL)) != -1) {
        SnapAction a = SNAP_NONE;
        switch (c) {
        case 'l':
            a = SNAP_LIST;
            break;
        case 'c':
            a = SNAP_CREATE;
            break;
        case 'a':
            a = SNAP_APPLY;
            break;
        case 'd':
            a = SNAP_DELETE;
            break;
        case 'h':
            return tool_command_help("snapshot");
        case 'q':
            break; /* nothing to suppress: -l prints anyway (fact 2) */
        case 'U':
            force_share = true;
            break;
        default: {
            int orc = tool_common_option(c, argv, &oo.image_opts);
            if (orc >= 0) {
                return orc;
            }
            break;
        }
        }
        if (a != SNAP_NONE) {
            if (action != SNAP_NONE) {
                return tool_usage_error("Cannot mix '-l', '-a', '-c', '-d'");
            }
            action = a;
            name = a == SNAP_LIST ? NULL : optarg;
        }
    }
    if (optind != argc - 1) {
        return tool_usage_error("Expecting one image file name");
    }
    filename = argv[optind];

    oo.format = fmt;
    oo.read_only = action == SNAP_NONE || action == SNAP_LIST;
    oo.no_backing = true;
    oo.force_share = force_share;
    if (force_share && !oo.read_only) {
        /* Fact 3. */
        tool_error("Could not open '%s': force-share=on can only be used with read-only "
                   "images",
                   filename);
        return 1;
    }
    if (!tool_image_opts_ok(&oo, filename)) {
        return 1;
    }
    img = tool_qimg_image_open(filename, &oo, &err);
    if (!img) {
        /* Fact 8 (as tools/resize.c does). */
        tool_report_open_error(filename, err);
        return 1;
    }
    tool_warn_probed_raw(img, &oo, filename);
    if (action == SNAP_APPLY) {
        tool_warn_probed_raw(img, &oo, filename); /* qemu-img says it twice for -a */
    }

    switch (action) {
    case SNAP_LIST:
        ret = do_list(img);
        break;
    case SNAP_CREATE:
        ret = do_create(img, name);
        break;
    case SNAP_APPLY:
        ret = do_apply(img, name);
        break;
    case SNAP_DELETE:
        ret = do_delete(img, name);
        break;
    default:
        ret = 0;
        break;
    }
    if (!oo.read_only) {
        /* The final flush decides whether the change is on disk. */
        QimgImage *i = g_steal_pointer(&img);
        if (!qimg_image_close(i, &err)) {
            if (ret == 0) {
                tool_report_gerror(err, NULL);
                ret = 1;
            } else {
                g_clear_error(&err);
            }
        }
    }
    return ret;
}
