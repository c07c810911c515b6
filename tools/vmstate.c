/*
 * qimg vmstate save [-q] [-f fmt] [-t cache] [--buffer-size N] [--in-flight N]
 *                   [--unbuffered] FILE SNAPSHOT [STREAM]
 * qimg vmstate load [-q] [-f fmt] [-t cache] [--apply] [--buffer-size N]
 *                   [--in-flight N] FILE SNAPSHOT [STREAM]
 *
 * The savevm/loadvm path of QEMU, offline.  "save" reads a VM state stream
 * from STREAM (a file; stdin when absent or "-") and stores it as a new
 * internal snapshot SNAPSHOT of FILE, the way QEMU's savevm does: the state
 * goes to the vmstate area of the active L1, then the snapshot is taken with
 * that size and the active copy is dropped.  "load" writes the state of a
 * snapshot (ID first, then name) to STREAM (stdout when absent or "-");
 * with --apply the disk is first reverted to the snapshot, as loadvm does.
 * qimg has no such command in qemu-img; there is nothing to be compatible
 * with but QEMU's on-disk layout, which the library keeps.
 *
 * Rules:
 *  1. save appends the stream in pieces as they come, like QEMU's
 *     QEMUFile flushes: read() of up to 32 KiB (--chunk-size), each
 *     result appended at once, so a pipe is stored as it delivers.  The
 *     hidden --qemu-shaped SEED replays a fixed, seeded sequence of piece
 *     sizes (see qemu_shaped_next) reading exactly that many bytes each
 *     time, so a benchmark does not depend on pipe behaviour.
 *  2. --unbuffered: the public API has no pass-through mode (every
 *     vmstate write goes through the coalescing writer), so it configures
 *     the writer with one buffer in flight and the smallest buffer (one
 *     cluster): no parallelism, no large requests.  It cannot be combined
 *     with --buffer-size or --in-flight.
 *  3. An empty stream is refused before any snapshot is created: a
 *     snapshot with no VM state is a disk-only one, which loadvm refuses.
 *     A failed save leaves no snapshot (leaked clusters at most).
 *  4. load reads in pieces of 1 MiB through the page cache, read ahead by
 *     the kernel; with -t none or directsync in pieces of 64 MiB in memory
 *     aligned for O_DIRECT, which the library reads in parallel straight
 *     into it (api/vmstate-read.c invariant 8: no copy; eight requests of
 *     4 MiB at once, as large as dd's; every chunk waits for its slowest
 *     request, so 64 MiB drains the queue half as often as 32 MiB did:
 *     1 GiB in a median 1.88 s against 2.83 s, 8 interleaved rounds on a
 *     busy machine) (--chunk-size; 32k reads the way
 *     QEMU's loadvm buffer does, read ahead by the library with -t none,
 *     at a cost of ~6 us per call, which the benchmark reports).  The
 *     output is opened only once the snapshot was found; a regular output
 *     file is removed again when the load fails, so a partial state is
 *     never left behind.
 *  5. A terminal is refused as the stream (binary data).  Success prints
 *     nothing; every failure prints one "qimg: " message and exits 1.
 *  6. A regular stream file is read a MiB at a time (see Src), never
 *     mapped; the pieces appended are the same as rule 1's.
 */
#include "qimg-tool.h"

#include "qimg/snapshot.h"
#include "qimg/vmstate.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cmd_vmstate(int argc, char **argv);

#define DEFAULT_CHUNK (32 * 1024) /* QEMU's IO_BUF_SIZE */
#define DEFAULT_LOAD_CHUNK (1024 * 1024)
#define DEFAULT_LOAD_DIRECT_CHUNK (64 * 1024 * 1024) /* rule 4 */
#define LOAD_ALIGN 4096                              /* any O_DIRECT alignment */
#define MAX_CHUNK ((uint64_t)256 << 20)

enum {
    OPT_BUFFER_SIZE = 256,
    OPT_IN_FLIGHT,
    OPT_UNBUFFERED,
    OPT_APPLY,
    OPT_CHUNK_SIZE,
    OPT_QEMU_SHAPED,
};

typedef struct VmArgs {
    const char *fmt;
    QimgCacheMode cache;
    bool quiet;
    bool unbuffered;
    bool apply;
    bool have_buffer_size, have_in_flight, have_chunk;
    uint64_t buffer_size;
    unsigned in_flight;
    uint64_t chunk;
    bool qemu_shaped;
    bool image_opts;
    guint32 seed;
    const char *filename, *snapshot, *stream;
} VmArgs;

static const char save_usage[] =
    "vmstate save [--object OBJDEF] [--image-opts] [-q] [-f fmt] [-t cache] "
    "[--buffer-size N] [--in-flight N] [--unbuffered] filename snapshot [stream]";
static const char load_usage[] =
    "vmstate load [--object OBJDEF] [--image-opts] [-q] [-f fmt] [-t cache] [--apply] "
    "[--buffer-size N] [--in-flight N] filename snapshot [stream]";

static int vmstate_help(void)
{
    printf("usage: qimg %s\n"
           "       qimg %s\n"
           "\n"
           "save reads a VM state stream from 'stream' (stdin when absent or '-')\n"
           "and stores it as the new internal snapshot 'snapshot' of the image, as\n"
           "QEMU's savevm does.  load writes the VM state of a snapshot (ID or name)\n"
           "to 'stream' (stdout when absent or '-'); --apply first reverts the disk\n"
           "to the snapshot, as loadvm does.\n"
           "\n"
           "  --buffer-size N  size of the write/read-ahead buffers (default\n"
           "                   max(cluster size, 1M), rounded to clusters)\n"
           "  --in-flight N    buffers written or read ahead at once (1..64, default 8;\n"
           "                   loads read ahead with -t none or directsync only)\n"
           "  --unbuffered     one cluster-sized buffer, one write at a time\n"
           "  -t cache         cache mode of the image (default writeback)\n",
           save_usage, load_usage);
    return 0;
}

/* ---- option parsing ---- */

static bool parse_uint(const char *what, const char *s, uint64_t min, uint64_t max,
                       bool size, uint64_t *out)
{
    uint64_t v = 0;
    char *end = NULL;

    if (size) {
        if (tool_strtosz(s, &v) < 0) {
            tool_error("Invalid %s '%s'", what, s);
            return false;
        }
    } else {
        errno = 0;
        v = g_ascii_strtoull(s, &end, 10);
        if (errno || end == s || *end || s[0] == '-') {
            tool_error("Invalid %s '%s'", what, s);
            return false;
        }
    }
    if (v < min || v > max) {
        tool_error("Invalid %s '%s': must be between %" PRIu64 " and %" PRIu64, what, s,
                   min, max);
        return false;
    }
    *out = v;
    return true;
}

/* Returns -1 when parsed, else the exit code. */
static int parse_args(int argc, char **argv, bool save, VmArgs *a)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"buffer-size", required_argument, NULL, OPT_BUFFER_SIZE},
        {"in-flight", required_argument, NULL, OPT_IN_FLIGHT},
        {"unbuffered", no_argument, NULL, OPT_UNBUFFERED},
        {"apply", no_argument, NULL, OPT_APPLY},
        {"chunk-size", required_argument, NULL, OPT_CHUNK_SIZE},
        {"qemu-shaped", required_argument, NULL, OPT_QEMU_SHAPED},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    int c;

    memset(a, 0, sizeof(*a));
    a->cache = QIMG_CACHE_WRITEBACK;
    a->chunk = save ? DEFAULT_CHUNK : DEFAULT_LOAD_CHUNK;
    while ((c = getopt_long(argc, argv, ":f:t:hq", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            a->fmt = optarg;
            break;
        case 't':
            if (!tool_parse_cache(optarg, false, &a->cache)) {
                return 1;
            }
            break;
        case 'q':
            a->quiet = true;
            break;
        case 'h':
            return vmstate_help();
        case OPT_BUFFER_SIZE:
            if (!parse_uint("buffer size", optarg, 1, (uint64_t)256 << 20, true, &v)) {
                return 1;
            }
            a->buffer_size = v;
            a->have_buffer_size = true;
            break;
        case OPT_IN_FLIGHT:
            if (!parse_uint("number of buffers in flight", optarg, 1, 64, false, &v)) {
                return 1;
            }
            a->in_flight = (unsigned)v;
            a->have_in_flight = true;
            break;
        case OPT_UNBUFFERED:
            if (!save) {
                return tool_usage_error("unrecognized option '%s'", argv[optind - 1]);
            }
            a->unbuffered = true;
            break;
        case OPT_APPLY:
            if (save) {
                return tool_usage_error("unrecognized option '%s'", argv[optind - 1]);
            }
            a->apply = true;
            break;
        case OPT_CHUNK_SIZE:
            if (!parse_uint("chunk size", optarg, 1, MAX_CHUNK, true, &a->chunk)) {
                return 1;
            }
            a->have_chunk = true;
            break;
        case OPT_QEMU_SHAPED:
            if (!save) {
                return tool_usage_error("unrecognized option '%s'", argv[optind - 1]);
            }
            if (!parse_uint("seed", optarg, 0, UINT32_MAX, false, &v)) {
                return 1;
            }
            a->qemu_shaped = true;
            a->seed = (guint32)v;
            break;
        default: { /* --object: secrets, an encrypted image's key */
            int orc = tool_common_option(c, argv, &a->image_opts);
            if (orc >= 0) {
                return orc;
            }
            break;
        }
        }
    }
    if (a->unbuffered && (a->have_buffer_size || a->have_in_flight)) {
        return tool_usage_error("--unbuffered cannot be combined with --buffer-size or "
                                "--in-flight");
    }
    if (argc - optind < 2) {
        return tool_usage_error("Expecting an image file name and a snapshot name");
    }
    if (argc - optind > 3) {
        return tool_usage_error("Unexpected argument '%s'", argv[optind + 3]);
    }
    a->filename = argv[optind];
    a->snapshot = argv[optind + 1];
    a->stream = argc - optind == 3 ? argv[optind + 2] : "-";
    return -1;
}

static bool configure(QimgImage *img, const VmArgs *a)
{
    QimgVmstateOptions o = QIMG_VMSTATE_OPTIONS_INIT;
    GError *err = NULL;

    if (a->unbuffered) {
        /* Rule 2: one cluster, named explicitly (the library rounds a
         * smaller size up to its idea of the cluster size). */
        g_autoptr(QimgInfo) info = qimg_image_get_info(img, NULL);
        o.max_in_flight = 1;
        o.buffer_size = info && info->cluster_size ? info->cluster_size : 65536;
    } else if (a->have_buffer_size || a->have_in_flight) {
        o.max_in_flight = a->in_flight;
        o.buffer_size = (size_t)a->buffer_size;
    } else {
        return true;
    }
    if (!qimg_vmstate_configure(img, &o, &err)) {
        tool_report_gerror(err, NULL);
        return false;
    }
    return true;
}

static bool is_stdio(const char *name)
{
    return strcmp(name, "-") == 0;
}

/* ---- save ---- */

/*
 * Rule 1: piece sizes shaped like the flushes of QEMU's migration buffer
 * during savevm: mostly runs of RAM pages with their 8-byte headers
 * (k x 4104 bytes, k = 1..7, or a full 32 KiB buffer), now and then a small
 * device-state write of 1..512 bytes.  Deterministic for a seed (GRand).
 */
static size_t qemu_shaped_next(GRand *r)
{
    gint32 kind = g_rand_int_range(r, 0, 16);

    if (kind == 0) {
        return (size_t)g_rand_int_range(r, 1, 513);
    }
    if (kind <= 3) {
        return DEFAULT_CHUNK;
    }
    return (size_t)g_rand_int_range(r, 1, 8) * (4096 + 8);
}

/* read() until len bytes or EOF; returns the count or -errno. */
static gssize read_full(int fd, uint8_t *buf, size_t len)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = read(fd, buf + done, len - done);
        if (n == 0) {
            break;
        }
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        done += (size_t)n;
    }
    return (gssize)done;
}

/*
 * Rule 6: the stream source.  A regular file is read in blocks of
 * SRC_BLOCK bytes and the pieces are appended from the block: one read()
 * a MiB instead of one a piece.  It is not mapped: a mapping costs a page
 * fault per 4 KiB on first touch and the teardown of every PTE at the end,
 * and on virtual machines with shadowed page tables the copy out of a fresh
 * mapping ran at a third of the speed of read() (bench/vmstate-bench.sh:
 * 1.1 s against 0.3 s for 512 MiB).  Anything else (a pipe) is read as it
 * delivers (rule 1).
 */
#define SRC_BLOCK ((size_t)1 << 20)

typedef struct Src {
    int fd;
    bool regular;
    uint8_t *buf;      /* SRC_BLOCK bytes (regular) or one chunk (pipe) */
    size_t head, tail; /* regular: the unconsumed bytes are buf[head, tail) */
    bool eof;
} Src;

static void src_init(Src *s, int fd, size_t cap)
{
    struct stat st;

    memset(s, 0, sizeof(*s));
    s->fd = fd;
    s->regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    s->buf = g_malloc(s->regular ? MAX(SRC_BLOCK, cap) : cap);
}

/*
 * The next piece: up to want bytes (exactly want unless the stream ends,
 * when exact), or what one read() of a pipe delivers (not exact).  *piece
 * points into the source's buffer until the next call.  Returns the count,
 * 0 at the end, or -errno.
 */
static gssize src_next(Src *s, size_t want, bool exact, const uint8_t **piece)
{
    gssize n;

    *piece = s->buf;
    if (!s->regular) {
        if (exact) {
            return read_full(s->fd, s->buf, want);
        }
        do {
            n = read(s->fd, s->buf, want);
        } while (n < 0 && errno == EINTR);
        return n < 0 ? -errno : n;
    }
    if (s->tail - s->head < want && !s->eof) {
        /* Keep the unconsumed tail (less than one piece) and refill. */
        memmove(s->buf, s->buf + s->head, s->tail - s->head);
        s->tail -= s->head;
        s->head = 0;
        n = read_full(s->fd, s->buf + s->tail, MAX(SRC_BLOCK, want) - s->tail);
        if (n < 0) {
            return n;
        }
        s->eof = s->tail + (size_t)n < MAX(SRC_BLOCK, want);
        s->tail += (size_t)n;
    }
    n = (gssize)MIN(want, s->tail - s->head);
    *piece = s->buf + s->head;
    s->head += (size_t)n;
    return n;
}

static int do_save(const VmArgs *a)
{
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    g_autoptr(QimgImage) img = NULL;
    g_autoptr(GRand) rand = NULL;
    QimgVmstateSave *s = NULL;
    GError *err = NULL;
    const char *in_name = is_stdio(a->stream) ? "stdin" : a->stream;
    size_t cap = a->qemu_shaped ? DEFAULT_CHUNK : (size_t)a->chunk;
    g_autofree char *id = NULL;
    Src src = {0};
    int fd;

    if (is_stdio(a->stream)) {
        fd = STDIN_FILENO;
        if (isatty(fd)) {
            tool_error("Refusing to read a VM state from a terminal; give a stream file "
                       "or a pipe");
            return 1;
        }
    } else {
        fd = open(a->stream, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            tool_error("Could not open '%s': %s", a->stream, g_strerror(errno));
            return 1;
        }
    }

    oo.format = a->fmt;
    oo.image_opts = a->image_opts;
    oo.cache = a->cache;
    oo.no_backing = false;
    img = tool_qimg_image_open(a->filename, &oo, &err);
    if (!img || !configure(img, a)) {
        if (!img) {
            tool_report_gerror(err, NULL);
        }
        goto fail;
    }

    QimgSnapshotParams p = {
        .struct_size = sizeof(p), .name = a->snapshot, /* icount off, as QEMU's savevm */
    };
    s = qimg_vmstate_save_begin(img, &p, &err);
    if (!s) {
        tool_error("Could not save VM state to snapshot '%s': %s", a->snapshot,
                   err->message);
        g_clear_error(&err);
        goto fail;
    }

    if (a->qemu_shaped) {
        rand = g_rand_new_with_seed(a->seed);
    }
    src_init(&src, fd, cap);
    for (;;) {
        const uint8_t *piece;
        gssize n =
            src_next(&src, rand ? qemu_shaped_next(rand) : cap, rand != NULL, &piece);
        if (n < 0) {
            tool_error("Could not read the VM state from '%s': %s", in_name,
                       g_strerror((int)-n));
            goto fail;
        }
        if (n == 0) {
            break;
        }
        if (!qimg_vmstate_save_append(s, piece, (size_t)n, &err)) {
            tool_error("Could not save VM state to snapshot '%s': %s", a->snapshot,
                       err->message);
            g_clear_error(&err);
            goto fail;
        }
    }
    if (qimg_vmstate_save_size(s) == 0) {
        /* Rule 3. */
        tool_error("Could not save VM state to snapshot '%s': the stream '%s' is empty",
                   a->snapshot, in_name);
        goto fail;
    }
    id = qimg_vmstate_save_commit(g_steal_pointer(&s), &err);
    if (!id) {
        tool_error("Could not save VM state to snapshot '%s': %s", a->snapshot,
                   err->message);
        g_clear_error(&err);
        goto fail;
    }
    g_clear_pointer(&src.buf, g_free);
    if (!qimg_image_close(g_steal_pointer(&img), &err)) {
        tool_report_gerror(err, NULL);
        goto fail;
    }
    if (fd != STDIN_FILENO) {
        close(fd);
    }
    return 0;

fail:
    qimg_vmstate_save_abort(s);
    g_clear_pointer(&src.buf, g_free);
    if (fd != STDIN_FILENO) {
        close(fd);
    }
    return 1;
}

/* ---- load ---- */

static bool write_full(int fd, const uint8_t *buf, size_t len, int *err)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            *err = errno;
            return false;
        }
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

static int do_load(const VmArgs *a)
{
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    g_autoptr(QimgImage) img = NULL;
    QimgVmstateLoad *l = NULL;
    GError *err = NULL;
    bool to_stdout = is_stdio(a->stream), created = false;
    const char *out_name = to_stdout ? "stdout" : a->stream;
    uint8_t *buf = NULL;
    size_t chunk = (size_t)a->chunk;
    int fd = -1, ret = 1, e;

    if (to_stdout && isatty(STDOUT_FILENO)) {
        tool_error("Refusing to write a VM state to a terminal; give a stream file or a "
                   "pipe");
        return 1;
    }
    oo.format = a->fmt;
    oo.image_opts = a->image_opts;
    oo.cache = a->cache;
    oo.read_only = !a->apply;
    oo.no_backing = false;
    img = tool_qimg_image_open(a->filename, &oo, &err);
    if (!img) {
        tool_report_gerror(err, NULL);
        return 1;
    }
    if (!configure(img, a)) {
        return 1;
    }
    l = qimg_vmstate_load_begin(img, a->snapshot, a->apply, &err);
    if (!l) {
        tool_error("Could not load VM state of snapshot '%s': %s", a->snapshot,
                   err->message);
        g_clear_error(&err);
        return 1;
    }

    if (to_stdout) {
        fd = STDOUT_FILENO;
    } else {
        struct stat st;
        fd = open(a->stream, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0) {
            tool_error("Could not open '%s': %s", a->stream, g_strerror(errno));
            goto out;
        }
        created = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    }

    if (!a->have_chunk &&
        (a->cache == QIMG_CACHE_NONE || a->cache == QIMG_CACHE_DIRECTSYNC)) {
        chunk = DEFAULT_LOAD_DIRECT_CHUNK; /* rule 4 */
    }
    e = posix_memalign((void **)&buf, LOAD_ALIGN, chunk);
    if (e != 0) {
        buf = NULL;
        tool_error("Could not allocate %zu bytes: %s", chunk, g_strerror(e));
        goto out;
    }
    for (;;) {
        gssize n = qimg_vmstate_load_read(l, buf, chunk, &err);
        if (n < 0) {
            tool_error("Could not load VM state of snapshot '%s': %s", a->snapshot,
                       err->message);
            g_clear_error(&err);
            goto out;
        }
        if (n == 0) {
            break;
        }
        if (!write_full(fd, buf, (size_t)n, &e)) {
            tool_error("Could not write the VM state to '%s': %s", out_name,
                       g_strerror(e));
            goto out;
        }
    }
    if (!to_stdout) {
        if (close(fd) < 0) {
            e = errno;
            fd = -1;
            tool_error("Could not write the VM state to '%s': %s", out_name,
                       g_strerror(e));
            goto out;
        }
        fd = -1;
    }
    ret = 0;

out:
    free(buf);
    qimg_vmstate_load_end(l);
    if (!to_stdout && fd >= 0) {
        close(fd);
    }
    if (ret != 0 && created) {
        unlink(a->stream); /* rule 4 */
    }
    if (a->apply && img) {
        if (!qimg_image_close(g_steal_pointer(&img), &err)) {
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

int cmd_vmstate(int argc, char **argv)
{
    VmArgs a;
    bool save;
    int ret;

    if (argc < 2) {
        return tool_usage_error("Expecting 'save' or 'load'");
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        return vmstate_help();
    }
    if (strcmp(argv[1], "save") == 0) {
        save = true;
    } else if (strcmp(argv[1], "load") == 0) {
        save = false;
    } else {
        return tool_usage_error(
            "Unknown vmstate command '%s'; expecting 'save' or 'load'", argv[1]);
    }
    ret = parse_args(argc - 1, argv + 1, save, &a);
    if (ret >= 0) {
        return ret;
    }
    return save ? do_save(&a) : do_load(&a);
}
