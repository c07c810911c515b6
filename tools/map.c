/*
 * qimg map [-f fmt] [--output=human|json] [--start-offset=N] [--max-length=N]
 *          [-U] FILE
 *
 * Facts learnt from qemu-img 7.2:
 *  1. The range is [start, min(start + max-length, virtual size)).  Status
 *     answers through the backing chain are merged into one entry while
 *     depth, present, zero and data agree, both or neither have a host
 *     offset, and host offsets continue each other.
 *  2. JSON: "[" then entries separated by ",\n", then "]\n"; one entry is
 *     { "start": S, "length": L, "depth": D, "present": B, "zero": B,
 *     "data": B[, "offset": O]}.  When the range is empty, a single entry
 *     with length 0 and all flags false is printed at the start offset.
 *  3. Human: a header, then one line per entry that has data at a host
 *     offset ("%#-16x" columns and the file name); data without a host
 *     offset (compressed, external) is an error, other entries are not
 *     shown.
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>

enum { OPT_OUTPUT = 256, OPT_START, OPT_LENGTH };

typedef struct MapEntry {
    uint64_t start;
    uint64_t length;
    int depth;
    bool present;
    bool zero;
    bool data;
    bool has_offset;
    uint64_t offset;
    char *filename;
} MapEntry;

static bool mergeable(const MapEntry *a, const MapEntry *b)
{
    if (a->length == 0) {
        return false;
    }
    if (a->depth != b->depth || a->present != b->present || a->zero != b->zero ||
        a->data != b->data || a->has_offset != b->has_offset) {
        return false;
    }
    if (g_strcmp0(a->filename, b->filename) != 0) {
        return false;
    }
    return !a->has_offset || a->offset + a->length == b->offset;
}

/* Print one entry; 'more' says whether another follows (JSON comma). */
static bool dump_entry(ToolOutput out, const MapEntry *e, bool more)
{
    if (out == TOOL_OUTPUT_JSON) {
        printf("{ \"start\": %" PRIu64 ", \"length\": %" PRIu64 ", \"depth\": %d,"
               " \"present\": %s, \"zero\": %s, \"data\": %s",
               e->start, e->length, e->depth, e->present ? "true" : "false",
               e->zero ? "true" : "false", e->data ? "true" : "false");
        if (e->has_offset) {
            printf(", \"offset\": %" PRIu64, e->offset);
        }
        printf("}%s", more ? ",\n" : "");
        return true;
    }
    if (e->data && !e->has_offset) {
        tool_error("File contains external, encrypted or compressed clusters.");
        return false;
    }
    if (e->data && !e->zero) { /* qemu-img prints data that is not known zero */
        printf("%#-16" PRIx64 "%#-16" PRIx64 "%#-16" PRIx64 "%s\n", e->start, e->length,
               e->offset, e->filename ? e->filename : "");
    }
    return true;
}

static int do_map(QimgImage *img, ToolOutput out, uint64_t start, uint64_t end)
{
    MapEntry curr = {.start = start};
    int ret = 0;

    if (out == TOOL_OUTPUT_JSON) {
        printf("[");
    } else {
        printf("%-16s%-16s%-16s%s\n", "Offset", "Length", "Mapped to", "File");
    }

    while (curr.start + curr.length < end) {
        uint64_t pos = curr.start + curr.length;
        QimgExtent ext;
        MapEntry next;
        GError *err = NULL;

        if (!qimg_image_block_status(img, pos, end - pos, &ext, &err)) {
            tool_error("Could not read file metadata: %s", err->message);
            g_clear_error(&err);
            ret = 1;
            goto out;
        }
        next = (MapEntry){
            .start = pos,
            .length = MIN(ext.length, end - pos),
            .depth = ext.depth,
            .present = ext.flags & QIMG_STATUS_ALLOCATED,
            .zero = ext.flags & QIMG_STATUS_ZERO,
            .data = ext.flags & QIMG_STATUS_DATA,
            .has_offset = ext.flags & QIMG_STATUS_OFFSET_VALID,
            .offset = ext.offset,
            .filename = g_strdup(ext.filename),
        };
        if (next.length == 0) {
            g_free(next.filename);
            tool_error("Could not read file metadata: no progress at offset %" PRIu64,
                       pos);
            ret = 1;
            goto out;
        }
        if (mergeable(&curr, &next)) {
            curr.length += next.length;
            g_free(next.filename);
            continue;
        }
        if (curr.length > 0 && !dump_entry(out, &curr, true)) {
            g_free(next.filename);
            ret = 1;
            goto out;
        }
        g_free(curr.filename);
        curr = next;
    }
    if (!dump_entry(out, &curr, false)) {
        ret = 1;
        goto out;
    }
    if (out == TOOL_OUTPUT_JSON) {
        printf("]\n");
    }
out:
    g_free(curr.filename);
    fflush(stdout);
    return ret;
}

int cmd_map(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"format", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"start-offset", required_argument, NULL, OPT_START},
        {"max-length", required_argument, NULL, OPT_LENGTH},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {"force-share", no_argument, NULL, 'U'},
        {NULL, 0, NULL, 0},
    };
    const char *fmt = NULL, *output = "human";
    int64_t start = 0, max_length = -1;
    bool force_share = false;
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    g_autoptr(QimgImage) img = NULL;
    GError *err = NULL;
    ToolOutput out;
    uint64_t end;
    int c;

    while ((c = getopt_long(argc, argv, ":f:hU", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            fmt = optarg;
            break;
        case 'h':
            return tool_command_help("map");
        case 'U':
            force_share = true;
            break;
        case OPT_OUTPUT:
            output = optarg;
            break;
        case OPT_START:
            if (!tool_cvtnum("start offset", optarg, INT64_MAX, &start)) {
                return 1;
            }
            break;
        case OPT_LENGTH:
            if (!tool_cvtnum("max length", optarg, INT64_MAX, &max_length)) {
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
    if (!tool_parse_output(output, &out)) {
        return 1;
    }

    oo.format = fmt;
    oo.read_only = true;
    oo.force_share = force_share;
    if (!tool_image_opts_ok(&oo, argv[optind])) {
        return 1;
    }
    img = tool_qimg_image_open(argv[optind], &oo, &err);
    if (!img) {
        tool_report_open_error(argv[optind], err);
        return 1;
    }
    end = qimg_image_size(img);
    if (max_length >= 0 && (uint64_t)max_length < end &&
        (uint64_t)start + (uint64_t)max_length < end) {
        end = (uint64_t)start + (uint64_t)max_length;
    }
    return do_map(img, out, (uint64_t)start, end);
}
