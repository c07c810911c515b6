/*
 * qimg convert [-f fmt] [-O fmt] [-B backing -F fmt] [-l snapshot] [-S size]
 *              [-n] [--target-is-zero] [-o options] [-t cache] [-T cache]
 *              [-m N] [-W] [-C] [-c] [-p] [-q] [-U]
 *              [--bitmaps [--skip-broken-bitmaps]] SRC [SRC2...] DST
 *
 * The same layout in the target as qemu-img 7.2 (see
 * shared/reference/qemu-behaviour.md section c), copied with -m requests
 * at once (default 8) through the library's pipeline (qimg/copy.h).
 *
 * Owns: the options, opening the source (snapshot included), the checks
 * of the target's creation options, creating and opening the target, what
 * the copy may assume of it (the Convert state), and the end: flush, close,
 * progress.  The copy itself, block status to writes, is convert-copy.c.
 *
 *  1. The target cache defaults to unsafe and the source cache to
 *     writeback.  The target is flushed at the end unless unsafe.
 *  2. Zeros are skipped (api/copy-plan.c fact 3) when the target was created
 *     by this run, has no backing file, -S is not 0 and it reads as zeros.
 *  3. --target-is-zero (only with -n, never with a backing file) promises
 *     that the existing target reads as zeros: zeros are not written.
 *  4. With -B the target's backing file is taken to hold what the source's
 *     backing chain holds (api/copy-plan.c fact 4).  -B wins over -o
 *     backing_file and needs a backing format (-F or -o backing_fmt).
 *  5. Locks: nobody may write or resize any file of the source's chain
 *     while it is copied (deny_write; -U lifts it); the target is created
 *     with the creation locks and opened read-write, so a target in use is
 *     refused as "T: error while converting FMT: Failed to get \"write\"
 *     lock" (created) or "Could not open 'T': ..." (-n).
 *  6. --bitmaps copies the persistent bitmaps after the data
 *     (convert-bitmaps.c).
 *  7. --salvage: source read errors become zeros, each failing sector
 *     warned about as qemu-img does ("warning: error while reading offset
 *     N: REASON", not with -q); the convert succeeds (qimg/copy.h).
 *  8. -C: copy offloading (qimg/copy.h rule 7: copy_file_range from the
 *     sources' files into a raw or qcow2 target on files, falling back to
 *     reading and writing where it cannot, as qemu-img).  As qemu-img, with
 *     -c, -S or --salvage it is refused: "Cannot enable copy offloading
 *     when -c is used" (-S), "Cannot use copy offloading in salvaging
 *     mode", checked after --skip-broken-bitmaps and before the -n checks,
 *     in qemu-img's order.
 *  9. Several sources are concatenated as qemu-img does (qimg/copy.h rule
 *     6): the target's size is the sum of theirs (each rounded up to 512
 *     bytes, as the library sizes images), -n needs a target at least that
 *     large.  All are opened first, in order; then, as qemu-img, -l NAME
 *     is refused ("No support for concatenating multiple snapshot") while
 *     -l snapshot.id=/snapshot.name= applies to the first source only; a
 *     backing file for the target (-B, -o backing_file) is refused after
 *     the --target-is-zero check ("Having a backing file for the target
 *     makes no sense when concatenating multiple input images"), and
 *     --bitmaps ("Copying bitmaps only possible with single source").
 * 10. --target-image-opts (only with -n) names the target's format in its
 *     options: an explicit -O beside it is refused as qemu-img refuses it,
 *     "--image-opts and --format are mutually exclusive", when the target
 *     is opened (after the sources and the -n checks above); without -O
 *     the target's format is the options' driver (or probed).  With -n,
 *     -c is refused ("Compression not supported for this file format")
 *     after the target is opened, by the format it was opened with, and
 *     before its size is compared with the source's.
 */
#include "convert.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static bool parse_sparse(const char *arg, unsigned *sectors)
{
    int64_t v;

    if (!tool_cvtnum("buffer size for sparse output", arg, INT64_MAX, &v)) {
        return false;
    }
    if (v % SECTOR || v > 16 * 1024 * 1024) {
        tool_error(
            "Invalid buffer size for sparse output specified. Valid sizes are "
            "multiples of 512 up to 16777216. Select 0 to disable sparse detection "
            "(fully allocates output).");
        return false;
    }
    *sectors = (unsigned)(v / SECTOR);
    return true;
}

typedef struct ConvertArgs {
    const char *src_fmt, *out_fmt, *snapshot, *dst_name;
    char **src_names; /* fact 9 */
    unsigned n_srcs;
    const char *backing, *backing_fmt; /* -B, -F */
    char *optlist;
    QimgCacheMode src_cache, dst_cache;
    bool skip_create, progress, quiet, force_share, compress, target_is_zero;
    bool bitmaps, skip_broken_bitmaps, salvage, image_opts, target_image_opts;
    bool out_fmt_given; /* -O (fact 10) */
    bool out_of_order;  /* -W */
    bool copy_offload;  /* -C (fact 8) */
    unsigned min_sparse;
    unsigned in_flight; /* -m */
} ConvertArgs;

static bool can_compress(const char *fmt)
{
    if (strcmp(fmt, "qcow2") != 0 && strcmp(fmt, "vmdk") != 0) {
        tool_error("Compression not supported for this file format");
        return false;
    }
    return true;
}

static bool desc_has(const ToolOptDesc *descs, const char *name)
{
    for (; descs->name; descs++) {
        if (strcmp(descs->name, name) == 0) {
            return true;
        }
    }
    return false;
}

static void several_backing_error(void)
{
    tool_error("Having a backing file for the target makes no sense when concatenating "
               "multiple input images");
}

/*
 * The target's creation options as qemu-img checks them, in its order:
 * -B/-F over -o (fact 4), --target-is-zero, the backing format, -c.
 * Returns NULL after printing the error.
 */
static GPtrArray *target_opts(ConvertArgs *a, const ToolOptDesc *descs)
{
    g_autoptr(GPtrArray) opts =
        tool_opts_parse(a->optlist ? a->optlist : "", descs, NULL);
    const char *prealloc;

    if (!opts) {
        return NULL;
    }
    tool_opts_remove(opts, "size");
    tool_opts_remove(opts, "nocow"); /* hints the library does not take */
    tool_opts_remove(opts, "extent_size_hint");
    if (a->backing && !desc_has(descs, "backing_file")) {
        tool_error("Backing file not supported for file format '%s'", a->out_fmt);
        return NULL;
    }
    if (a->backing_fmt && !desc_has(descs, "backing_fmt")) {
        tool_error("Backing file format not supported for file format '%s'", a->out_fmt);
        return NULL;
    }
    if (a->backing) {
        tool_opts_set(opts, "backing_file", a->backing, NULL);
    }
    if (a->backing_fmt) {
        tool_opts_set(opts, "backing_fmt", a->backing_fmt, NULL);
    }
    if (a->target_is_zero && tool_opts_get(opts, "backing_file")) {
        tool_error("Cannot use --target-is-zero when the destination image has a backing "
                   "file");
        return NULL;
    }
    if (a->n_srcs > 1 && tool_opts_get(opts, "backing_file")) { /* fact 9 */
        several_backing_error();
        return NULL;
    }
    if (tool_opts_get(opts, "backing_file") && !tool_opts_get(opts, "backing_fmt")) {
        tool_error("Use of backing file requires explicit backing format");
        return NULL;
    }
    if (a->compress && !can_compress(a->out_fmt)) {
        return NULL;
    }
    if (a->compress && (tool_opts_get(opts, "encrypt.format") ||
                        g_strcmp0(tool_opts_get(opts, "encryption"), "on") == 0)) {
        tool_error("Compression and encryption not supported at the same time");
        return NULL;
    }
    prealloc = tool_opts_get(opts, "preallocation");
    if (a->compress && prealloc && strcmp(prealloc, "off") != 0) {
        tool_error("Compression and preallocation not supported at the same time");
        return NULL;
    }
    return g_steal_pointer(&opts);
}

/* Size of the target's backing file, -1 if unknown (api/copy-plan.c fact 4). */
static int64_t backing_size(QimgImage *dst)
{
    QimgImage *b = qimg_image_backing(dst);

    return b ? (int64_t)qimg_image_size(b) : -1;
}

/* Create (unless -n) and open the target; prints errors. */
static QimgImage *open_target(ConvertArgs *a, uint64_t size, Convert *s)
{
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    GError *err = NULL;
    QimgImage *dst;

    if (a->skip_create && a->target_is_zero && a->backing) {
        tool_error("Cannot use --target-is-zero when the destination image has a backing "
                   "file");
        return NULL;
    }
    if (a->skip_create && a->n_srcs > 1 && a->backing) { /* fact 9 */
        several_backing_error();
        return NULL;
    }
    if (!a->skip_create) {
        const ToolOptDesc *descs = tool_create_opts_for(a->out_fmt, a->dst_name);
        g_autoptr(GPtrArray) opts = NULL;
        g_autoptr(GHashTable) hash = NULL;
        QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
        tool_create_secrets(&co);

        if (!descs) {
            tool_create_format_error(NULL, a->out_fmt);
            return NULL;
        }
        if (!qimg_name_check(a->dst_name, &err)) { /* as qemu-img, before the options */
            tool_error("%s", err->message);
            g_clear_error(&err);
            return NULL;
        }
        opts = target_opts(a, descs);
        if (!opts) {
            return NULL;
        }
        s->target_has_backing = tool_opts_get(opts, "backing_file") != NULL;
        s->top_only = s->target_has_backing;
        hash = tool_opts_to_hash(opts);
        co.format = a->out_fmt;
        co.size = size;
        co.size_set = true;
        co.backing_file = tool_opts_get(opts, "backing_file");
        co.backing_format = tool_opts_get(opts, "backing_fmt");
        co.options = hash;
        if (!qimg_image_create(a->dst_name, &co, &err)) {
            tool_error("%s: error while converting %s: %s", a->dst_name, a->out_fmt,
                       err->message);
            g_clear_error(&err);
            return NULL;
        }
        /* qemu-img opens the new target with its key (the create option) */
        oo.key_secret = tool_opts_key_secret(opts);
    }

    /* the options name the format; an -O beside them is refused (fact 10) */
    oo.format = a->target_image_opts && !a->out_fmt_given ? NULL : a->out_fmt;
    oo.cache = a->dst_cache;
    oo.image_opts = a->target_image_opts;
    if (!tool_image_opts_ok(&oo, a->dst_name)) {
        return NULL;
    }
    dst = tool_qimg_image_open(a->dst_name, &oo, &err);
    if (!dst) {
        tool_report_open_error(a->dst_name, err);
        return NULL;
    }
    tool_warn_probed_raw(dst, &oo, a->dst_name); /* fact 10 */
    if (a->skip_create && a->compress && !can_compress(qimg_image_format(dst))) {
        qimg_image_free(dst); /* fact 10: the opened target's format decides */
        return NULL;
    }
    s->target_backing = -1;
    if (a->skip_create) {
        s->target_has_backing = a->backing || qimg_image_backing(dst) != NULL;
        s->top_only = a->backing != NULL;
        if (qimg_image_size(dst) < size) {
            tool_error("output file is smaller than input file");
            qimg_image_free(dst);
            return NULL;
        }
    } else if (s->target_has_backing) {
        s->target_backing = backing_size(dst);
    }
    if (a->target_is_zero) {
        s->zero_init = true; /* fact 3 */
    } else {
        s->zero_init = !a->skip_create && !s->target_has_backing && a->min_sparse != 0 &&
                       qimg_image_has_zero_init(dst);
    }
    return dst;
}

static void free_sources(QimgImage **srcs, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        qimg_image_free(srcs[i]);
    }
    g_free(srcs);
}

/* Open the sources in order (fact 9); NULL after printing the error. */
static QimgImage **open_sources(ConvertArgs *a, uint64_t *size)
{
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    QimgImage **srcs = g_new0(QimgImage *, a->n_srcs);
    /* qemu-img: -l snapshot.id=/snapshot.name= is loaded into the first
     * source; a bare name is refused with several sources, after opening */
    bool first_only = a->snapshot && g_str_has_prefix(a->snapshot, "snapshot.");

    oo.format = a->src_fmt;
    oo.read_only = true;
    oo.cache = a->src_cache;
    oo.force_share = a->force_share;
    oo.deny_write = true; /* qemu-img: nobody writes the source while we copy it */
    oo.image_opts = a->image_opts;
    *size = 0;
    for (unsigned i = 0; i < a->n_srcs; i++) {
        const char *snap = a->n_srcs == 1 || (first_only && i == 0) ? a->snapshot : NULL;
        srcs[i] = tool_open_snapshot(a->src_names[i], &oo, snap);
        if (!srcs[i] || __builtin_add_overflow(*size, qimg_image_size(srcs[i]), size)) {
            if (srcs[i]) {
                tool_error("Could not get size of %s: %s", a->src_names[i],
                           g_strerror(EFBIG));
            }
            goto fail;
        }
    }
    if (a->n_srcs > 1 && a->snapshot && !first_only) {
        tool_error("No support for concatenating multiple snapshot");
        goto fail;
    }
    return srcs;

fail:
    free_sources(srcs, a->n_srcs);
    return NULL;
}

static int run_convert(ConvertArgs *a)
{
    Convert s = {0};
    ToolProgress prog;
    GError *err = NULL;
    bool ok;

    s.n_srcs = a->n_srcs;
    s.srcs = open_sources(a, &s.size);
    if (!s.srcs) {
        return 1;
    }
    if (a->bitmaps && a->n_srcs > 1) { /* fact 9 */
        tool_error("Copying bitmaps only possible with single source");
        free_sources(s.srcs, s.n_srcs);
        return 1;
    }
    if (a->bitmaps && !convert_bitmaps_check_source(s.srcs[0], a->skip_broken_bitmaps)) {
        free_sources(s.srcs, s.n_srcs);
        return 1;
    }
    s.min_sparse = a->min_sparse;
    s.dst = open_target(a, s.size, &s);
    if (!s.dst) {
        free_sources(s.srcs, s.n_srcs);
        return 1;
    }

    if (a->bitmaps && !convert_bitmaps_check_target(s.dst)) {
        qimg_image_free(s.dst);
        free_sources(s.srcs, s.n_srcs);
        return 1;
    }
    s.compress = a->compress;
    s.salvage = a->salvage;
    s.quiet = a->quiet;
    s.in_flight = a->in_flight;
    s.out_of_order = a->out_of_order;
    s.copy_offload = a->copy_offload;
    tool_progress_init(&prog, a->progress && !a->quiet);
    ok = convert_copy(&s, &prog);
    if (ok && a->bitmaps) {
        ok = convert_bitmaps_copy(s.srcs[0], s.dst);
    }
    gint64 t0 = g_get_monotonic_time();
    if (ok && a->dst_cache != QIMG_CACHE_UNSAFE && !qimg_image_flush(s.dst, &err)) {
        tool_report_gerror(err, "error while flushing the target");
        err = NULL;
        ok = false;
    }
    if (convert_stats_wanted()) { /* convert-copy.c fact 3 */
        convert_stats_flush((uint64_t)(g_get_monotonic_time() - t0) * 1000u);
    }
    if (!qimg_image_close(s.dst, &err)) {
        if (ok) {
            tool_report_gerror(err, NULL);
        } else {
            g_clear_error(&err);
        }
        ok = false;
    }
    if (ok) {
        tool_progress_finish(&prog);
    }
    tool_progress_end(&prog);
    free_sources(s.srcs, s.n_srcs);
    return ok ? 0 : 1;
}

int cmd_convert(int argc, char **argv)
{
    enum {
        OPT_TARGET_IS_ZERO = 256,
        OPT_BITMAPS,
        OPT_SKIP_BROKEN,
        OPT_SALVAGE,
        OPT_IMAGE_OPTS,
        OPT_TARGET_IMAGE_OPTS,
    };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"force-share", no_argument, NULL, 'U'},
        {"target-is-zero", no_argument, NULL, OPT_TARGET_IS_ZERO},
        {"bitmaps", no_argument, NULL, OPT_BITMAPS},
        {"salvage", no_argument, NULL, OPT_SALVAGE},
        {"image-opts", no_argument, NULL, OPT_IMAGE_OPTS},
        {"target-image-opts", no_argument, NULL, OPT_TARGET_IMAGE_OPTS},
        {"skip-broken-bitmaps", no_argument, NULL, OPT_SKIP_BROKEN},
        {NULL, 0, NULL, 0},
    };
    ConvertArgs a = {
        .out_fmt = "raw",
        .src_cache = QIMG_CACHE_WRITEBACK,
        .dst_cache = QIMG_CACHE_UNSAFE,
        .min_sparse = 8,
    };
    bool explicit_sparse = false;
    int c, ret;

    convert_signals_init(); /* convert-copy.c fact 2 */
    while ((c = getopt_long(argc, argv, ":hcf:O:B:F:o:l:S:pt:T:qnm:WUC", longopts,
                            NULL)) != -1) {
        switch (c) {
        case 'h':
            g_free(a.optlist);
            return tool_command_help("convert");
        case 'f':
            a.src_fmt = optarg;
            break;
        case 'O':
            a.out_fmt = optarg;
            a.out_fmt_given = true;
            break;
        case 'B':
            a.backing = optarg;
            break;
        case 'F':
            a.backing_fmt = optarg;
            break;
        case OPT_TARGET_IS_ZERO:
            a.target_is_zero = true;
            break;
        case OPT_BITMAPS:
            a.bitmaps = true;
            break;
        case OPT_SKIP_BROKEN:
            a.skip_broken_bitmaps = true;
            break;
        case OPT_SALVAGE:
            a.salvage = true;
            break;
        case OPT_IMAGE_OPTS:
            a.image_opts = true;
            break;
        case OPT_TARGET_IMAGE_OPTS:
            a.target_image_opts = true;
            break;
        case 'o':
            if (!tool_opts_accumulate(&a.optlist, optarg)) {
                goto fail;
            }
            break;
        case 'l': { /* options.c fact 3 */
            g_autofree char *checked = tool_parse_snapshot_param(optarg);
            if (!checked) {
                goto fail;
            }
            a.snapshot = optarg;
            break;
        }
        case 'S':
            if (!parse_sparse(optarg, &a.min_sparse)) {
                goto fail;
            }
            explicit_sparse = true;
            break;
        case 'C':
            a.copy_offload = true;
            break;
        case 'p':
            a.progress = true;
            break;
        case 't':
            if (!tool_parse_cache(optarg, false, &a.dst_cache)) {
                goto fail;
            }
            break;
        case 'T':
            if (!tool_parse_cache(optarg, true, &a.src_cache)) {
                goto fail;
            }
            break;
        case 'q':
            a.quiet = true;
            break;
        case 'n':
            a.skip_create = true;
            break;
        case 'm': {
            char *end;
            long m = strtol(optarg, &end, 10);
            if (*end || end == optarg || m < 1 || m > 16) {
                tool_error(
                    "Invalid number of coroutines. Allowed number of coroutines is "
                    "between 1 and 16");
                goto fail;
            }
            a.in_flight = (unsigned)m;
            break;
        }
        case 'c':
            a.compress = true;
            break;
        case 'W':
            a.out_of_order = true;
            break;
        case 'U':
            a.force_share = true;
            break;
        case TOOL_OPT_OBJECT: {
            int orc = tool_object_add(optarg);
            if (orc >= 0) {
                g_free(a.optlist);
                return orc;
            }
            break;
        }
        default:
            g_free(a.optlist);
            return tool_bad_option(c, argv);
        }
    }

    if (a.optlist && tool_opts_want_help(a.optlist)) {
        if (!tool_create_opts(a.out_fmt)) {
            tool_create_format_error(NULL, a.out_fmt);
            goto fail;
        }
        tool_opts_print_help(a.out_fmt, optind < argc ? argv[argc - 1] : NULL);
        g_free(a.optlist);
        return 0;
    }
    if (a.skip_broken_bitmaps && !a.bitmaps) { /* convert-bitmaps.c fact 1 */
        tool_error("Use of --skip-broken-bitmaps requires --bitmaps");
        goto fail;
    }
    if (a.copy_offload && (a.compress || explicit_sparse || a.salvage)) { /* fact 8 */
        tool_error(a.compress        ? "Cannot enable copy offloading when -c is used"
                   : explicit_sparse ? "Cannot enable copy offloading when -S is used"
                                     : "Cannot use copy offloading in salvaging mode");
        goto fail;
    }
    if (a.target_image_opts && !a.skip_create) { /* qemu-img's check */
        tool_error("--target-image-opts requires use of -n flag");
        goto fail;
    }
    if (a.target_is_zero && !a.skip_create) {
        tool_error("--target-is-zero requires use of -n flag");
        goto fail;
    }
    if (argc - optind < 2) {
        tool_error("Must specify image file name");
        goto fail;
    }
    if (a.skip_create && a.optlist) {
        tool_error("-o has no effect when skipping image creation");
        goto fail;
    }
    a.src_names = argv + optind; /* fact 9 */
    a.n_srcs = (unsigned)(argc - optind - 1);
    a.dst_name = argv[argc - 1];
    ret = run_convert(&a);
    g_free(a.optlist);
    return ret;

fail:
    g_free(a.optlist);
    return 1;
}
