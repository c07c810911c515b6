/*
 * qimg commit [-q] [-f fmt] [-t cache] [-b base] [-r rate_limit] [-d] [-p]
 *             filename
 *
 * Facts learnt from running qemu-img 7.2:
 *  1. One file name ("Expecting one image file name"); -r takes qemu-img's
 *     sizes (bytes per second, "Invalid rate limit specified..."); -b
 *     names an image of the backing chain, as QEMU finds it: relative to
 *     the folder of the layer above it, or absolute, compared as a
 *     canonical path; with a protocol, as written ("Did not find 'B' in
 *     the backing chain of 'F'"); it implies -d; without -b the base is the backing file
 * ("Image does not have a backing file").
 *  2. The image is opened read-write (-t, default writeback); what the
 *     layers above the base define -- data, and zeros as zero clusters --
 *     is written into the base (grown first when it is smaller), nothing
 *     else; then, unless -d, the image is emptied (qcow2/empty.c: it
 *     reads through the base again); a failure there is "Failed to empty
 *     NAME: REASON", and a format that cannot be emptied is left as it is.
 *     "Image committed." unless -q.
 *  3. Crash safety (qimg's rule): the base's new contents are durable (it
 *     is flushed and closed) before the top is emptied, so at any power
 *     loss the chain reads as before: the base changes only under ranges
 *     the top defines, and the top loses a cluster only once the base
 *     holds it.
 */
#include "qimg-tool.h"

#include <qimg/copy.h>

#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct CommitProgress {
    ToolProgress prog;
    uint64_t rate; /* bytes per second, 0: unlimited */
    gint64 start;
} CommitProgress;

/* Progress, and -r: the copy waits until it is not ahead of the rate. */
static gboolean commit_progress(void *opaque, uint64_t done, uint64_t total)
{
    CommitProgress *cp = opaque;

    tool_progress_update(&cp->prog, done, total);
    if (cp->rate) {
        gint64 due = cp->start + (gint64)((double)done / (double)cp->rate * 1e6);
        gint64 now = g_get_monotonic_time();
        if (due > now) {
            g_usleep((gulong)(due - now));
        }
    }
    return TRUE;
}

/* Fact 1: the base in img's chain and its depth (1: the backing file). */
/* QEMU's path_has_protocol: a ':' before any '/' (json:, nbd:, rbd:, ...). */
static bool has_protocol(const char *name)
{
    const char *colon = strchr(name, ':'), *slash = strchr(name, '/');
    return colon && (!slash || colon < slash);
}

/* Fact 1: is @b, the backing layer of @above, the image -b @name names?  A
 * name with a protocol (or a layer's) is compared as written; any other is
 * taken relative to the folder of @above and compared as a canonical path,
 * so "subdir/base" given from the folder above fails where "base" or an
 * absolute path works (QEMU iotest 020). */
static bool names_layer(QimgImage *above, QimgImage *b, const char *name)
{
    const char *layer = qimg_image_filename(b);
    g_autofree char *rel = NULL;
    char want[PATH_MAX], have[PATH_MAX];

    if (has_protocol(name) || has_protocol(layer)) {
        return strcmp(name, layer) == 0;
    }
    rel = qimg_image_resolve_backing(above, name);
    return realpath(rel, want) && realpath(layer, have) && strcmp(want, have) == 0;
}

static QimgImage *find_base(QimgImage *img, const char *name, unsigned *depth)
{
    unsigned d = 1;

    for (QimgImage *above = img, *b; (b = qimg_image_backing(above)); above = b, d++) {
        if (!name || names_layer(above, b, name)) {
            *depth = d;
            return b;
        }
    }
    return NULL;
}

int cmd_commit(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT, bo = TOOL_OPEN_OPTIONS_INIT;
    QimgCopyOptions co = QIMG_COPY_OPTIONS_INIT;
    const char *base_name = NULL, *filename;
    bool quiet = false, progress = false, drop = true;
    int64_t rate = 0;
    unsigned depth = 0;
    g_autoptr(QimgImage) img = NULL;
    g_autoptr(QimgImage) base = NULL;
    QimgImage *chain_base;
    CommitProgress cp = {0};
    uint64_t size, base_size;
    GError *err = NULL;
    int c;

    tool_open_secrets(&oo);
    oo.cache = QIMG_CACHE_WRITEBACK;
    oo.backing_shared_write = true; /* the base is written beside the chain */
    while ((c = getopt_long(argc, argv, ":f:ht:b:dpqr:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            return tool_command_help("commit");
        case 'f':
            oo.format = optarg;
            break;
        case 't':
            if (!tool_parse_cache(optarg, false, &oo.cache)) {
                return 1;
            }
            break;
        case 'b':
            base_name = optarg;
            drop = false; /* -b implies -d */
            break;
        case 'd':
            drop = false;
            break;
        case 'p':
            progress = true;
            break;
        case 'q':
            quiet = true;
            break;
        case 'r':
            if (!tool_cvtnum("rate limit", optarg, INT64_MAX, &rate)) {
                return 1;
            }
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
        return tool_usage_error("Expecting one image file name");
    }
    filename = argv[optind];

    img = tool_open_image(filename, &oo);
    if (!img) {
        return 1;
    }
    chain_base = find_base(img, base_name, &depth);
    if (!chain_base) {
        if (base_name) {
            tool_error("Did not find '%s' in the backing chain of '%s'", base_name,
                       filename);
        } else {
            tool_error("Image does not have a backing file");
        }
        return 1;
    }

    /* fact 2: the base, read-write beside the chain's read-only view */
    bo.cache = oo.cache;
    tool_open_secrets(&bo); /* the base's key, if encrypted */
    base = qimg_image_open_layer(img, chain_base, &bo, &err);
    if (!base) {
        tool_report_open_error(qimg_image_filename(chain_base), err);
        return 1;
    }
    size = qimg_image_size(img);
    base_size = qimg_image_size(base);
    if (base_size < size &&
        !qimg_image_truncate(base, size, false, QIMG_PREALLOC_OFF, &err)) {
        tool_error("Block job failed: %s", err->message);
        g_error_free(err);
        return 1;
    }
    tool_progress_init(&cp.prog, progress && !quiet);
    cp.rate = (uint64_t)rate;
    cp.start = g_get_monotonic_time();
    co.top_only = true;
    co.top_layers = depth;
    co.target_has_backing = true;
    co.mirror_writes = true;
    co.progress = commit_progress;
    co.progress_opaque = &cp;
    if (!qimg_copy(img, base, &co, &err) ||
        !qimg_image_close(g_steal_pointer(&base), &err)) { /* fact 3: durable */
        tool_progress_end(&cp.prog);
        tool_error("Block job failed: %s", err->message);
        g_error_free(err);
        return 1;
    }
    if (drop && !qimg_image_make_empty(img, &err)) {
        /* QEMU's: a format that cannot be emptied is left as it is */
        if (!g_error_matches(err, QIMG_ERROR, ENOTSUP)) {
            tool_progress_end(&cp.prog);
            tool_error("%s", err->message);
            g_error_free(err);
            return 1;
        }
        g_clear_error(&err);
    }
    tool_progress_update(&cp.prog, size, size);
    tool_progress_end(&cp.prog);
    if (!tool_close_image(g_steal_pointer(&img))) {
        return 1;
    }
    if (!quiet) {
        printf("Image committed.\n");
    }
    return 0;
}
