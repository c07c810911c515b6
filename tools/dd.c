/*
 * qimg dd [-U] [-f fmt] [-O output_fmt] [bs=block_size] [count=blocks]
 *         [skip=blocks] if=input of=output
 *
 * Facts learnt from running qemu-img 7.2:
 *  1. Operands are KEY=VALUE after the options: bs (1 .. 2^31-1, default
 *     512; "Invalid bs specified. Must be between 1 and 2147483647."),
 *     count and skip (sizes with qemu-img's suffixes, in blocks), if, of;
 *     anything else is "unrecognized operand KEY" (the text before '=').
 *     Both if and of are needed ("Must specify both input and output
 *     files").  An unknown -O is "Unknown file format" (no name).
 *  2. count limits the input to its first count*bs bytes, counted from the
 *     start of the input, not from skip: the output is that size minus
 *     skip*bs (so bs=512 skip=2 count=3 copies one block).  A skip past the
 *     end prints "IF: cannot skip to specified offset" and makes an empty
 *     output, exit 0.
 *  3. The output is created (-O, default raw; "OF: error while creating
 *     output image: ...") and opened read-write with writeback cache;
 *     every byte is written, zeros too, block by block ("error while
 *     reading from input image file: ..." / "... writing to output image
 *     file: ...").  The input is opened read-only (-U forces sharing).
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>

typedef struct DdArgs {
    const char *in, *out;
    int64_t bs, count, skip;
    bool has_count, has_skip;
} DdArgs;

/* Fact 1. */
static bool parse_operand(const char *arg, DdArgs *a)
{
    g_autofree char *key = g_strdup(arg);
    char *val = strchr(key, '=');

    if (!val) {
        tool_error("unrecognized operand %s", arg);
        return false;
    }
    *val++ = '\0';
    if (strcmp(key, "bs") == 0) {
        uint64_t v;
        if (tool_strtosz(val, &v) < 0 || v < 1 || v > INT32_MAX) {
            tool_error("Invalid bs specified. Must be between 1 and 2147483647.");
            return false;
        }
        a->bs = (int64_t)v;
    } else if (strcmp(key, "count") == 0) {
        a->has_count = tool_cvtnum("count", val, INT64_MAX, &a->count);
        return a->has_count;
    } else if (strcmp(key, "skip") == 0) {
        a->has_skip = tool_cvtnum("skip", val, INT64_MAX, &a->skip);
        return a->has_skip;
    } else if (strcmp(key, "if") == 0) {
        a->in = arg + 3;
    } else if (strcmp(key, "of") == 0) {
        a->out = arg + 3;
    } else {
        tool_error("unrecognized operand %s", key);
        return false;
    }
    return true;
}

/* Fact 3: bs-sized reads and writes, gathered into up to 1 MiB requests
 * (the same bytes reach the same offsets). */
static int copy(QimgImage *src, QimgImage *dst, uint64_t in_pos, uint64_t size,
                uint64_t bs)
{
    uint64_t chunk = MAX(bs, (1u << 20) / bs * bs);
    g_autofree uint8_t *buf = tool_alloc_aligned(chunk);
    GError *err = NULL;

    for (uint64_t out_pos = 0; in_pos < size;) {
        size_t n = (size_t)MIN(chunk, size - in_pos);
        if (!qimg_image_pread(src, in_pos, buf, n, &err)) {
            tool_error("error while reading from input image file: %s",
                       g_strerror(err->code));
            g_error_free(err);
            return 1;
        }
        if (!qimg_image_pwrite(dst, out_pos, buf, n, &err)) {
            tool_error("error while writing to output image file: %s",
                       g_strerror(err->code));
            g_error_free(err);
            return 1;
        }
        in_pos += n;
        out_pos += n;
    }
    return 0;
}

int cmd_dd(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"force-share", no_argument, NULL, 'U'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    tool_create_secrets(&co);
    const char *out_fmt = "raw";
    DdArgs a = {.bs = 512};
    g_autoptr(QimgImage) src = NULL;
    g_autoptr(QimgImage) dst = NULL;
    uint64_t size, in_pos;
    GError *err = NULL;
    int c;

    while ((c = getopt_long(argc, argv, ":f:hO:U", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            oo.format = optarg;
            break;
        case 'h':
            return tool_command_help("dd");
        case 'O':
            out_fmt = optarg;
            break;
        case 'U':
            oo.force_share = true;
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
    for (int i = optind; i < argc; i++) {
        if (!parse_operand(argv[i], &a)) {
            return 1;
        }
    }
    if (!a.in || !a.out) {
        tool_error("Must specify both input and output files");
        return 1;
    }
    oo.read_only = true;
    if (!tool_image_opts_ok(&oo, a.in)) {
        return 1;
    }
    src = tool_qimg_image_open(a.in, &oo, &err);
    if (!src) {
        tool_report_open_error(a.in, err);
        return 1;
    }
    if (!tool_create_opts(out_fmt)) {
        tool_error("Unknown file format");
        return 1;
    }

    /* fact 2 (qemu-img's arithmetic, overflow checks included) */
    size = qimg_image_size(src);
    if (a.has_count && a.count <= INT64_MAX / a.bs && (uint64_t)(a.count * a.bs) < size) {
        size = (uint64_t)(a.count * a.bs);
    }
    bool past_end =
        a.has_skip && (a.skip > INT64_MAX / a.bs || size < (uint64_t)(a.bs * a.skip));
    in_pos = past_end ? size : (a.has_skip ? (uint64_t)(a.bs * a.skip) : 0);

    co.format = out_fmt;
    co.size = size - in_pos;
    co.size_set = true;
    if (!qimg_image_create(a.out, &co, &err)) {
        tool_error("%s: error while creating output image: %s", a.out, err->message);
        g_error_free(err);
        return 1;
    }
    QimgOpenOptions doo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&doo);
    doo.format = out_fmt;
    doo.cache = QIMG_CACHE_WRITEBACK;
    dst = qimg_image_open(a.out, &doo, &err);
    if (!dst) {
        tool_report_open_error(a.out, err);
        return 1;
    }
    if (past_end) {
        tool_error("%s: cannot skip to specified offset", a.in);
    }
    if (copy(src, dst, in_pos, size, (uint64_t)a.bs)) {
        return 1;
    }
    if (!qimg_image_close(g_steal_pointer(&dst), &err)) { /* the final flush */
        tool_error("error while writing to output image file: %s", err->message);
        g_error_free(err);
        return 1;
    }
    return 0;
}
