/*
 * qimg compare [-f fmt] [-F fmt] [-T src_cache] [-p] [-q] [-s] [-U] A B
 *
 * Facts learnt from qemu-img 7.2:
 *  1. Exit status: 0 identical, 1 different (or usage error), 2 an image
 *     could not be opened, 3 block status failed, 4 read error.
 *  2. The common part is walked by block status of both chains; a chunk
 *     reaches to the nearer status change.  Zero on both sides: nothing to
 *     read.  Allocated on both: read up to 2 MiB of each and compare.
 *     Allocated on one side only: that side must read as zeros.  Neither
 *     allocated (and not both zero): equal.
 *  3. A mismatch is reported at the start of the first differing
 *     512-byte block, counted from the start of the chunk.
 *  4. Different sizes: "Warning: Image size mismatch!" and the longer
 *     image's allocated tail must read as zeros.  In strict mode (-s)
 *     different sizes or different block status are a difference.
 *  5. A read that fails is "Error while reading offset O of NAME: " and the
 *     errno's text alone (strerror), not how the layers below worded it
 *     (QEMU iotest 074: an error blkdebug injects reads "Input/output
 *     error").
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#define COMPARE_BUF (2u * 1024 * 1024)
#define SECTOR 512u

#define STATUS_MASK                                                                      \
    (QIMG_STATUS_DATA | QIMG_STATUS_ZERO | QIMG_STATUS_ALLOCATED |                       \
     QIMG_STATUS_OFFSET_VALID)

typedef struct Side {
    QimgImage *img;
    const char *name;
    uint64_t size;
} Side;

typedef struct Compare {
    Side a, b;
    bool quiet;
    bool strict;
    uint8_t *buf1, *buf2;
} Compare;

static void qprintf(const Compare *s, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static void qprintf(const Compare *s, const char *fmt, ...)
{
    va_list ap;

    if (s->quiet) {
        return;
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

static bool status(Side *side, uint64_t offset, QimgExtent *ext)
{
    GError *err = NULL;

    if (!qimg_image_block_status(side->img, offset, side->size - offset, ext, &err)) {
        tool_error("Sector allocation test failed for %s", side->name);
        g_clear_error(&err);
        return false;
    }
    return true;
}

static bool read_side(Side *side, uint64_t offset, uint8_t *buf, size_t len)
{
    GError *err = NULL;

    if (!qimg_image_pread(side->img, offset, buf, len, &err)) {
        tool_error("Error while reading offset %" PRIu64 " of %s: %s", offset, side->name,
                   g_strerror(err->code)); /* fact 5 */
        g_clear_error(&err);
        return false;
    }
    return true;
}

/* Offset of the first 512-byte block that is not all zeros, or -1. */
static int64_t first_nonzero_block(const uint8_t *buf, size_t len)
{
    static const uint8_t zeros[SECTOR];

    for (size_t i = 0; i < len; i += SECTOR) {
        if (memcmp(buf + i, zeros, MIN(SECTOR, len - i)) != 0) {
            return (int64_t)i;
        }
    }
    return -1;
}

/* Check that [offset, offset+len) of 'side' reads as zeros; returns the
 * exit code (0 = zeros). */
static int check_empty(Compare *s, Side *side, uint64_t offset, size_t len)
{
    int64_t idx;

    if (!read_side(side, offset, s->buf1, len)) {
        return 4;
    }
    idx = first_nonzero_block(s->buf1, len);
    if (idx >= 0) {
        qprintf(s, "Content mismatch at offset %" PRIu64 "!\n", offset + (uint64_t)idx);
        return 1;
    }
    return 0;
}

static int compare_data(Compare *s, uint64_t offset, size_t len)
{
    if (!read_side(&s->a, offset, s->buf1, len) ||
        !read_side(&s->b, offset, s->buf2, len)) {
        return 4;
    }
    if (memcmp(s->buf1, s->buf2, len) == 0) {
        return 0;
    }
    for (size_t i = 0; i < len; i += SECTOR) {
        size_t n = MIN(SECTOR, len - i);
        if (memcmp(s->buf1 + i, s->buf2 + i, n) != 0) {
            qprintf(s, "Content mismatch at offset %" PRIu64 "!\n", offset + i);
            return 1;
        }
    }
    return 0;
}

static int do_compare(Compare *s, ToolProgress *prog)
{
    uint64_t common = MIN(s->a.size, s->b.size);
    uint64_t offset;
    int ret;

    if (s->strict && s->a.size != s->b.size) {
        qprintf(s, "Strict mode: Image size mismatch!\n");
        return 1;
    }

    for (offset = 0; offset < common;) {
        QimgExtent e1, e2;
        bool alloc1, alloc2;
        uint64_t chunk;

        if (!status(&s->a, offset, &e1)) {
            return 3;
        }
        if (!status(&s->b, offset, &e2)) {
            return 3;
        }
        alloc1 = e1.flags & QIMG_STATUS_ALLOCATED;
        alloc2 = e2.flags & QIMG_STATUS_ALLOCATED;
        chunk = MIN(MIN(e1.length, e2.length), common - offset);
        if (chunk == 0) {
            tool_error("Sector allocation test failed for %s",
                       e1.length ? s->b.name : s->a.name);
            return 3;
        }

        /* qemu-img compares the whole status word, including whether the
         * extent reaches the end of the image (BDRV_BLOCK_EOF). */
        bool eof1 = e1.start + e1.length >= s->a.size;
        bool eof2 = e2.start + e2.length >= s->b.size;
        if (s->strict &&
            ((e1.flags & STATUS_MASK) != (e2.flags & STATUS_MASK) || eof1 != eof2)) {
            qprintf(s, "Strict mode: Offset %" PRIu64 " block status mismatch!\n",
                    offset);
            return 1;
        }
        if ((e1.flags & QIMG_STATUS_ZERO) && (e2.flags & QIMG_STATUS_ZERO)) {
            /* both read as zeros */
        } else if (alloc1 == alloc2) {
            if (alloc1) {
                chunk = MIN(chunk, COMPARE_BUF);
                ret = compare_data(s, offset, chunk);
                if (ret) {
                    return ret;
                }
            }
        } else {
            chunk = MIN(chunk, COMPARE_BUF);
            ret = check_empty(s, alloc1 ? &s->a : &s->b, offset, chunk);
            if (ret) {
                return ret;
            }
        }
        offset += chunk;
        tool_progress_update(prog, offset, MAX(s->a.size, s->b.size));
    }

    if (s->a.size != s->b.size) {
        Side *over = s->a.size > s->b.size ? &s->a : &s->b;

        qprintf(s, "Warning: Image size mismatch!\n");
        for (offset = common; offset < over->size;) {
            QimgExtent e;
            uint64_t chunk;

            if (!status(over, offset, &e)) {
                return 3;
            }
            chunk = MIN(e.length, over->size - offset);
            if (chunk == 0) {
                tool_error("Sector allocation test failed for %s", over->name);
                return 3;
            }
            if (e.flags & QIMG_STATUS_ALLOCATED) {
                chunk = MIN(chunk, COMPARE_BUF);
                ret = check_empty(s, over, offset, chunk);
                if (ret) {
                    return ret;
                }
            }
            offset += chunk;
            tool_progress_update(prog, offset, over->size);
        }
    }

    qprintf(s, "Images are identical.\n");
    return 0;
}

static QimgImage *open_side(const char *name, const char *fmt, QimgCacheMode cache,
                            bool force_share, bool image_opts)
{
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    GError *err = NULL;
    QimgImage *img;

    oo.format = fmt;
    oo.read_only = true;
    oo.cache = cache;
    oo.force_share = force_share;
    oo.image_opts = image_opts;
    if (!tool_image_opts_ok(&oo, name)) {
        return NULL;
    }
    img = tool_qimg_image_open(name, &oo, &err);
    if (!img) {
        tool_report_open_error(name, err);
    }
    return img;
}

int cmd_compare(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"force-share", no_argument, NULL, 'U'},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    const char *fmt1 = NULL, *fmt2 = NULL, *cache = "writeback";
    bool progress = false, force_share = false, image_opts = false;
    QimgCacheMode mode;
    g_autoptr(QimgImage) img1 = NULL;
    g_autoptr(QimgImage) img2 = NULL;
    Compare s = {0};
    ToolProgress prog;
    int c, ret;

    while ((c = getopt_long(argc, argv, ":hf:F:T:pqsU", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            return tool_command_help("compare");
        case 'f':
            fmt1 = optarg;
            break;
        case 'F':
            fmt2 = optarg;
            break;
        case 'T':
            cache = optarg;
            break;
        case 'p':
            progress = true;
            break;
        case 'q':
            s.quiet = true;
            break;
        case 's':
            s.strict = true;
            break;
        case 'U':
            force_share = true;
            break;
        default: {
            int orc = tool_common_option(c, argv, &image_opts);
            if (orc >= 0) {
                return orc;
            }
            break;
        }
        }
    }
    if (s.quiet) {
        progress = false;
    }
    if (optind != argc - 2) {
        return tool_usage_error("Expecting two image file names");
    }
    if (!tool_parse_cache(cache, true, &mode)) {
        return 2;
    }

    s.a.name = argv[optind];
    s.b.name = argv[optind + 1];
    img1 = open_side(s.a.name, fmt1, mode, force_share, image_opts);
    if (!img1) {
        return 2;
    }
    img2 = open_side(s.b.name, fmt2, mode, force_share, image_opts);
    if (!img2) {
        return 2;
    }
    s.a.img = img1;
    s.b.img = img2;
    s.a.size = qimg_image_size(img1);
    s.b.size = qimg_image_size(img2);
    s.buf1 = g_malloc(COMPARE_BUF);
    s.buf2 = g_malloc(COMPARE_BUF);

    tool_progress_init(&prog, progress);
    ret = do_compare(&s, &prog);
    tool_progress_end(&prog);

    g_free(s.buf1);
    g_free(s.buf2);
    return ret;
}
