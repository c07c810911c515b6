/*
 * qimg rebase [-U] [-q] [-f fmt] [-t cache] [-T src_cache] [-p] [-u]
 *             -b backing_file [-F backing_fmt] filename
 *
 * Facts learnt from running qemu-img 7.2 (its checks in its order):
 *  1. One file name ("Expecting one image file name"); -b is needed unless
 *     -u ("Must specify backing file (-b) or use unsafe mode (-u)"); -F must
 *     name a QEMU block driver ("Invalid format name: 'F'").  A new backing
 *     file needs -F ("Could not change the backing file to 'B': backing
 *     format must be specified") -- qemu-img finds that out after copying;
 *     qimg before, so a refused rebase changes nothing.
 *  2. The image is opened read-write (cache -t, default writeback).  Safe
 *     mode opens the new backing file (relative to the image's folder, -T
 *     cache, format -F, shared with -U; "Could not open new backing file
 *     'B': ...") and reads the old one through the image's chain.
 *  3. Safe mode: for every range the image itself does not allocate, the
 *     old and the new backing's contents are compared in 512-byte sectors
 *     (past a backing file's end it reads zeros) and the sectors that
 *     differ are written into the image: the old backing's bytes, or a zero
 *     write where the range is past the old backing's end.  The image reads
 *     the same before, during and after.  -b "" compares against zeros
 *     (flattening).
 *  4. Then the header names the new backing file (qimg_image_set_backing:
 *     the copied data is durable first); -u does only that, and opens no
 *     backing file, so the old one may be missing or unreadable, or name a
 *     format QEMU does not know (QEMU iotest 114; KubeVirt CDI's "rebase
 *     -p -u -F raw -b BASE DELTA" after the old base is gone).  Exit 0 or
 *     1.
 *  5. qimg's: REBASE_WORKERS threads take 2 MiB windows each (their own
 *     page-aligned buffers: the kernel copies into those twice as fast),
 *     so reads of both backing files are in flight together; qemu-img
 *     reads one range at a time.  The windows are disjoint and the header
 *     changes only after all of them; the first error stops every worker
 *     and is the one reported.
 *  6. -p (not with -q) prints the progress line at 0% once the command
 *     line is checked, before the image is opened, in both modes: 100% and
 *     a new line after a rebase, the new line alone after a failure.
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>

#define REBASE_BUF (2u << 20) /* qemu-img's IO_BUF_SIZE */
#define SECTOR 512

#define REBASE_WORKERS 4 /* fact 5 */

typedef struct Rebase {
    QimgImage *img, *old_b, *new_b; /* old_b, new_b may be NULL */
    uint64_t size, old_size, new_size;
    ToolProgress prog;
    GMutex lock;
    uint64_t next, done; /* [lock] the next window; bytes finished */
    bool failed;         /* [lock] a worker reported an error: all stop */
} Rebase;

/* What the command line asks for (the image's own options aside). */
typedef struct RebaseArgs {
    const char *backing, *backing_fmt; /* -b, -F */
    bool unsafe, force_share;          /* -u, -U */
    QimgCacheMode src_cache;           /* -T */
} RebaseArgs;

typedef struct RebaseWorker {
    Rebase *r;
    uint8_t *buf_old, *buf_new; /* REBASE_BUF each, page-aligned */
    bool ok;
} RebaseWorker;

/* Report an error once; every worker stops at its next window. */
static bool fail(Rebase *r, const char *fmt, const char *what, GError *err)
{
    g_mutex_lock(&r->lock);
    if (!r->failed) {
        r->failed = true;
        tool_error(fmt, what, err->message);
    }
    g_mutex_unlock(&r->lock);
    g_error_free(err);
    return false;
}

/* n bytes at offset of a backing image, zeros past its end (fact 3). */
static bool read_backing(Rebase *r, QimgImage *b, uint64_t bsize, uint64_t offset,
                         uint8_t *buf, uint64_t n, const char *which)
{
    GError *err = NULL;
    uint64_t have = b && offset < bsize ? MIN(n, bsize - offset) : 0;

    memset(buf + have, 0, n - have);
    if (have && !qimg_image_pread(b, offset, buf, have, &err)) {
        return fail(r, "error while reading from %s backing file: %s", which, err);
    }
    return true;
}

/* Write the sectors of [offset, +n) whose old and new contents differ. */
static bool write_differences(RebaseWorker *w, uint64_t offset, uint64_t n)
{
    Rebase *r = w->r;
    bool old_zero = offset >= r->old_size;
    GError *err = NULL;

    for (uint64_t pos = 0; pos < n;) {
        uint64_t len = MIN((uint64_t)SECTOR, n - pos);
        bool differ = memcmp(w->buf_old + pos, w->buf_new + pos, len) != 0;
        uint64_t run = len;
        while (pos + run < n) {
            uint64_t l = MIN((uint64_t)SECTOR, n - pos - run);
            if ((memcmp(w->buf_old + pos + run, w->buf_new + pos + run, l) != 0) !=
                differ) {
                break;
            }
            run += l;
        }
        if (differ) {
            gboolean ok =
                old_zero ? qimg_image_pwrite_zeroes(r->img, offset + pos, run, 0, &err)
                         : qimg_image_pwrite(r->img, offset + pos, w->buf_old + pos, run,
                                             &err);
            if (!ok) {
                return fail(r, "Error while writing to COW image%s: %s", "", err);
            }
        }
        pos += run;
    }
    return true;
}

/* Fact 3 for the window [start, end). */
static bool rebase_window(RebaseWorker *w, uint64_t start, uint64_t end)
{
    Rebase *r = w->r;
    GError *err = NULL;

    for (uint64_t offset = start; offset < end;) {
        QimgExtent e;
        uint64_t n = end - offset;

        if (!qimg_image_block_status_layer(r->img, offset, n, &e, &err)) {
            return fail(r, "error while reading image metadata%s: %s", "", err);
        }
        n = MIN(n, e.length);
        if (!(e.flags & QIMG_STATUS_ALLOCATED)) {
            if (offset < r->old_size) {
                n = MIN(n, r->old_size - offset);
            }
            if (r->new_b && offset < r->new_size) {
                n = MIN(n, r->new_size - offset);
            }
            if (!read_backing(r, r->old_b, r->old_size, offset, w->buf_old, n, "old") ||
                !read_backing(r, r->new_b, r->new_size, offset, w->buf_new, n, "new") ||
                !write_differences(w, offset, n)) {
                return false;
            }
        }
        offset += n;
    }
    return true;
}

/* Fact 5: take windows until none is left or a worker failed. */
static gpointer rebase_worker(gpointer opaque)
{
    RebaseWorker *w = opaque;
    Rebase *r = w->r;

    w->ok = true;
    for (;;) {
        uint64_t start, end;
        g_mutex_lock(&r->lock);
        if (r->failed || r->next >= r->size) {
            g_mutex_unlock(&r->lock);
            break;
        }
        start = r->next;
        end = MIN(start + REBASE_BUF, r->size);
        r->next = end;
        g_mutex_unlock(&r->lock);
        if (!rebase_window(w, start, end)) {
            w->ok = false;
            break;
        }
        g_mutex_lock(&r->lock);
        r->done += end - start;
        tool_progress_update(&r->prog, r->done, r->size);
        g_mutex_unlock(&r->lock);
    }
    return NULL;
}

static bool copy_differences(Rebase *r)
{
    RebaseWorker w[REBASE_WORKERS];
    GThread *t[REBASE_WORKERS];
    bool ok = true;

    for (int i = 0; i < REBASE_WORKERS; i++) {
        w[i] = (RebaseWorker){.r = r,
                              .buf_old = tool_alloc_aligned(REBASE_BUF),
                              .buf_new = tool_alloc_aligned(REBASE_BUF)};
        t[i] = g_thread_new("rebase", rebase_worker, &w[i]);
    }
    for (int i = 0; i < REBASE_WORKERS; i++) {
        g_thread_join(t[i]);
        ok = ok && w[i].ok;
        g_free(w[i].buf_old);
        g_free(w[i].buf_new);
    }
    return ok && !r->failed;
}

/* Facts 1 (the checks after the file name), 2, 3 and 4. */
static bool rebase(Rebase *r, const char *filename, QimgOpenOptions *oo,
                   const RebaseArgs *a)
{
    QimgOpenOptions no = TOOL_OPEN_OPTIONS_INIT;
    g_autoptr(QimgImage) img = NULL;
    g_autoptr(QimgImage) new_b = NULL;
    GError *err = NULL;
    bool ok;

    if (a->backing_fmt && !qimg_format_name_valid(a->backing_fmt)) {
        tool_error("Invalid format name: '%s'", a->backing_fmt);
        return false;
    }
    if (a->backing && *a->backing && !a->backing_fmt) {
        tool_error("Could not change the backing file to '%s': backing format must be "
                   "specified",
                   a->backing);
        return false;
    }

    /* fact 2; -u never opens the old backing file (fact 4) */
    oo->no_backing = a->unsafe;
    img = tool_open_image(filename, oo);
    if (!img) {
        return false;
    }
    if (!a->unsafe) {
        r->img = img;
        r->size = qimg_image_size(img);
        r->old_b = qimg_image_backing(img);
        r->old_size = r->old_b ? qimg_image_size(r->old_b) : 0;
        if (*a->backing) {
            g_autofree char *path = qimg_image_resolve_backing(img, a->backing);
            no.format = a->backing_fmt;
            no.read_only = true;
            no.cache = a->src_cache;
            no.force_share = a->force_share;
            new_b = qimg_image_open(path, &no, &err);
            if (!new_b) {
                tool_error("Could not open new backing file '%s': %s", a->backing,
                           err->message);
                g_error_free(err);
                return false;
            }
            r->new_b = new_b;
            r->new_size = qimg_image_size(new_b);
        }
        g_mutex_init(&r->lock);
        ok = copy_differences(r);
        g_mutex_clear(&r->lock);
        if (!ok) {
            return false;
        }
    }
    /* fact 4 */
    if (!qimg_image_set_backing(img, a->backing, a->backing_fmt, &err)) {
        tool_error("Could not change the backing file to '%s': %s",
                   a->backing ? a->backing : "", err->message);
        g_error_free(err);
        return false;
    }
    return tool_close_image(g_steal_pointer(&img));
}

int cmd_rebase(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"force-share", no_argument, NULL, 'U'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    RebaseArgs a = {.src_cache = QIMG_CACHE_WRITEBACK};
    const char *filename;
    bool quiet = false, progress = false;
    Rebase r = {0};
    bool ok;
    int c;

    tool_open_secrets(&oo);
    oo.cache = QIMG_CACHE_WRITEBACK;
    while ((c = getopt_long(argc, argv, ":hf:F:b:upt:T:qU", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            return tool_command_help("rebase");
        case 'f':
            oo.format = optarg;
            break;
        case 'F':
            a.backing_fmt = optarg;
            break;
        case 'b':
            a.backing = optarg;
            break;
        case 'u':
            a.unsafe = true;
            break;
        case 'p':
            progress = true;
            break;
        case 't':
            if (!tool_parse_cache(optarg, false, &oo.cache)) {
                return 1;
            }
            break;
        case 'T':
            if (!tool_parse_cache(optarg, true, &a.src_cache)) {
                return 1;
            }
            break;
        case 'q':
            quiet = true;
            break;
        case 'U':
            a.force_share = true;
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
    if (optind != argc - 1) {
        return tool_usage_error("Expecting one image file name");
    }
    if (!a.unsafe && !a.backing) {
        return tool_usage_error("Must specify backing file (-b) or use unsafe mode (-u)");
    }
    filename = argv[optind];
    tool_progress_init(&r.prog, progress && !quiet); /* fact 6 */
    ok = rebase(&r, filename, &oo, &a);
    if (ok) {
        tool_progress_update(&r.prog, 1, 1); /* 100%, unless the copy printed it */
    }
    tool_progress_end(&r.prog);
    return ok ? 0 : 1;
}
