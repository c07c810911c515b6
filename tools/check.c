/*
 * qimg check [-q] [-f fmt] [--output=human|json] [-r leaks|all] [-T src_cache]
 *            [-U] [-p] FILE
 *
 * Facts learnt from qemu-img 7.2:
 *  1. Findings ("Leaked cluster ...", "ERROR ...", "Repairing ...") go to
 *     stderr without a prefix; the summary goes to stdout.  -q silences
 *     stdout only (JSON included).
 *  2. Human summary: "No errors were found on the image." when there are no
 *     corruptions, leaks or internal errors; otherwise one paragraph each,
 *     every one starting with an empty line.  Then
 *     "A/T = P% allocated, F% fragmented, C% compressed clusters" (when both
 *     counts are non-zero; F and C relative to the allocated clusters) and
 *     "Image end offset: N" (when known).
 *  3. JSON members come in qemu-img's hash order: image-end-offset,
 *     compressed-clusters, total-clusters, corruptions, corruptions-fixed,
 *     check-errors, leaks, leaks-fixed, allocated-clusters, filename, format,
 *     fragmented-clusters; every count but check-errors is left out when 0.
 *  4. After a repair that fixed something: "The following inconsistencies
 *     were found and repaired:" with the leak and corruption counts, then
 *     "Double checking the fixed image now..." (human output only), and the
 *     summary of the second check with the *_fixed counts of the repair.
 *  5. Exit: 0 consistent, 1 check could not complete ("Check failed" or
 *     "Check failed: <strerror>", no summary when it stopped), 2 corruptions,
 *     3 leaks only, 63 format without checks ("This image format does not
 *     support checks").  Usage errors and open errors exit 1.
 *  6. The image is opened with its backing chain, read-write only for -r;
 *     -U with -r is refused at open ("force-share=on can only be used with
 *     read-only images").  Option checks: -r value, file name count,
 *     --output, -T, in that order.
 *  7. qemu-img check has no -p; qimg's -p shows the progress line on stdout.
 *  8. Some formats' findings are error reports ("qemu-img: VHDX BAT entry
 *     ..."): a driver message starting with "error: " is printed with the
 *     program's prefix instead.
 *  9. (qimg) The findings are written in batches of FINDINGS_BATCH bytes,
 *     not one write per line (stderr is unbuffered): a broken refcount
 *     table gives a line per cluster, 262144 writes for a 16 GiB image.
 *     Every batch is out before the next error report and before anything
 *     else is printed, so the bytes and their order are as line by line.
 */
#include "qimg-tool.h"

#include "qimg/check.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

enum { OPT_OUTPUT = 256 };

/* Findings are written to stderr in batches of about this many bytes
 * (fact 9). */
#define FINDINGS_BATCH 65536

static void flush_findings(GString *buf)
{
    if (buf->len) {
        fwrite(buf->str, 1, buf->len, stderr);
        fflush(stderr);
        g_string_truncate(buf, 0);
    }
}

/* The findings, one line each, to stderr (facts 1, 8 and 9). */
static void put_findings(const GPtrArray *messages)
{
    g_autoptr(GString) buf = g_string_sized_new(FINDINGS_BATCH + 256);

    for (guint i = 0; messages && i < messages->len; i++) {
        const char *m = messages->pdata[i];
        if (g_str_has_prefix(m, "error: ")) { /* fact 8 */
            flush_findings(buf);
            tool_error("%s", m + strlen("error: "));
            continue;
        }
        g_string_append(buf, m);
        g_string_append_c(buf, '\n');
        if (buf->len >= FINDINGS_BATCH) {
            flush_findings(buf);
        }
    }
    flush_findings(buf);
}

static void dump_human(const QimgCheckResult *r)
{
    if (!(r->corruptions || r->leaks || r->check_errors)) {
        printf("No errors were found on the image.\n");
    } else {
        if (r->corruptions) {
            printf("\n%" PRId64 " errors were found on the image.\n"
                   "Data may be corrupted, or further writes to the image may "
                   "corrupt it.\n",
                   r->corruptions);
        }
        if (r->leaks) {
            printf("\n%" PRId64 " leaked clusters were found on the image.\n"
                   "This means waste of disk space, but no harm to data.\n",
                   r->leaks);
        }
        if (r->check_errors) {
            printf("\n%" PRId64 " internal errors have occurred during the check.\n",
                   r->check_errors);
        }
    }
    if (r->total_clusters != 0 && r->allocated_clusters != 0) {
        printf("%" PRId64 "/%" PRId64 " = %0.2f%% allocated, %0.2f%% fragmented, "
               "%0.2f%% compressed clusters\n",
               r->allocated_clusters, r->total_clusters,
               r->allocated_clusters * 100.0 / r->total_clusters,
               r->fragmented_clusters * 100.0 / r->allocated_clusters,
               r->compressed_clusters * 100.0 / r->allocated_clusters);
    }
    if (r->image_end_offset) {
        printf("Image end offset: %" PRId64 "\n", r->image_end_offset);
    }
}

/* fact 3 */
static void dump_json(const QimgCheckResult *r, const char *filename, const char *format)
{
    ToolJson j;
    g_autofree char *text = NULL;

    tool_json_init(&j);
    tool_json_begin_object(&j, NULL);
    if (r->image_end_offset) {
        tool_json_int(&j, "image-end-offset", r->image_end_offset);
    }
    if (r->compressed_clusters) {
        tool_json_int(&j, "compressed-clusters", r->compressed_clusters);
    }
    if (r->total_clusters) {
        tool_json_int(&j, "total-clusters", r->total_clusters);
    }
    if (r->corruptions) {
        tool_json_int(&j, "corruptions", r->corruptions);
    }
    if (r->corruptions_fixed) {
        tool_json_int(&j, "corruptions-fixed", r->corruptions_fixed);
    }
    tool_json_int(&j, "check-errors", r->check_errors);
    if (r->leaks) {
        tool_json_int(&j, "leaks", r->leaks);
    }
    if (r->leaks_fixed) {
        tool_json_int(&j, "leaks-fixed", r->leaks_fixed);
    }
    if (r->allocated_clusters) {
        tool_json_int(&j, "allocated-clusters", r->allocated_clusters);
    }
    tool_json_str(&j, "filename", filename);
    tool_json_str(&j, "format", format);
    if (r->fragmented_clusters) {
        tool_json_int(&j, "fragmented-clusters", r->fragmented_clusters);
    }
    tool_json_end_object(&j);
    text = tool_json_finish(&j);
    printf("%s\n", text);
}

static void check_progress(void *opaque, uint64_t done, uint64_t total)
{
    tool_progress_update(opaque, done, total);
}

int cmd_check(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"format", required_argument, NULL, 'f'},
        {"repair", required_argument, NULL, 'r'},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"force-share", no_argument, NULL, 'U'},
        {"progress", no_argument, NULL, 'p'},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    const char *fmt = NULL, *output = "human", *cache = "writeback", *filename;
    bool quiet = false, force_share = false, progress = false;
    unsigned fix = 0;
    ToolOutput out;
    QimgCacheMode mode;
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    g_autoptr(QimgImage) img = NULL;
    QimgCheckResult res = QIMG_CHECK_RESULT_INIT;
    ToolProgress prog;
    GError *err = NULL;
    gboolean ok;
    int c, rc;

    while ((c = getopt_long(argc, argv, ":hf:r:T:qUp", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            return tool_command_help("check");
        case 'f':
            fmt = optarg;
            break;
        case 'r':
            if (strcmp(optarg, "leaks") == 0) {
                fix = QIMG_CHECK_FIX_LEAKS;
            } else if (strcmp(optarg, "all") == 0) {
                fix = QIMG_CHECK_FIX_LEAKS | QIMG_CHECK_FIX_ERRORS;
            } else {
                return tool_usage_error(
                    "Unknown option value for -r (expecting 'leaks' or 'all'): %s",
                    optarg);
            }
            break;
        case 'T':
            cache = optarg;
            break;
        case 'q':
            quiet = true;
            break;
        case 'U':
            force_share = true;
            break;
        case 'p':
            progress = true;
            break;
        case OPT_OUTPUT:
            output = optarg;
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
    if (!tool_parse_output(output, &out) || !tool_parse_cache(cache, true, &mode)) {
        return 1;
    }
    if (force_share && fix) {
        /* fact 6 */
        tool_error("Could not open '%s': force-share=on can only be used with read-only "
                   "images",
                   filename);
        return 1;
    }

    oo.format = fmt;
    oo.read_only = !fix;
    oo.cache = mode;
    oo.force_share = force_share;
    oo.check_mode = true;
    if (!tool_image_opts_ok(&oo, filename)) {
        return 1;
    }
    img = tool_qimg_image_open(filename, &oo, &err);
    if (!img) {
        tool_report_open_error(filename, err);
        return 1;
    }

    tool_progress_init(&prog, progress && !quiet);
    res.progress = check_progress;
    res.progress_opaque = &prog;
    ok = qimg_image_check(img, &res, fix, &err);
    tool_progress_update(&prog, 1, 1);
    tool_progress_end(&prog);

    if (!ok && err && res.unsupported) {
        tool_error("%s", err->message); /* fact 5 */
        g_clear_error(&err);
        qimg_check_result_clear(&res);
        return 63;
    }
    put_findings(res.messages);
    if ((res.corruptions_fixed || res.leaks_fixed) && out == TOOL_OUTPUT_HUMAN &&
        !quiet) {
        printf("The following inconsistencies were found and repaired:\n\n"
               "    %" PRId64 " leaked clusters\n"
               "    %" PRId64 " corruptions\n\n"
               "Double checking the fixed image now...\n",
               res.leaks_fixed, res.corruptions_fixed);
    }
    if (!ok && err) {
        /* the check stopped: no summary (fact 5) */
        if (strcmp(err->message, g_strerror(err->code)) != 0) {
            tool_error("%s", err->message);
        }
        tool_error("Check failed: %s", g_strerror(err->code));
        g_clear_error(&err);
        qimg_check_result_clear(&res);
        return 1;
    }
    if (!quiet) {
        if (out == TOOL_OUTPUT_JSON) {
            dump_json(&res, filename, qimg_image_format(img));
        } else {
            dump_human(&res);
        }
    }
    if (res.check_errors) {
        tool_error("Check failed");
        rc = 1;
    } else if (res.corruptions) {
        rc = 2;
    } else if (res.leaks) {
        rc = 3;
    } else {
        rc = 0;
    }
    fflush(stdout);
    qimg_check_result_clear(&res);
    if (fix) {
        GError *cerr = NULL;
        QimgImage *i = g_steal_pointer(&img);
        if (!qimg_image_close(i, &cerr)) {
            tool_report_gerror(cerr, NULL);
            return rc ? rc : 1;
        }
    }
    return rc;
}
