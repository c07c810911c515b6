/*
 * qimg bench [-c count] [-d depth] [-f fmt] [--flush-interval=N] [-i aio] [-n]
 *            [--no-drain] [-o offset] [--pattern=P] [-q] [-s buffer_size]
 *            [-S step_size] [-t cache] [-w] [-U] FILE
 *
 * qemu-img bench over the public API: 'count' requests of 'buffer_size'
 * bytes at offsets offset, offset + step, ... (modulo the image size),
 * 'depth' of them in flight at once, sent from this one thread through the
 * asynchronous API (qimg/aio.h; -i threads: a pool of min(depth, 64)
 * workers runs them, as qemu's thread pool does; -i io_uring: reads and
 * in-place rewrites of allocated clusters with -t none go to an io_uring,
 * the rest to the pool; without -i, the API's default engine: io_uring
 * with -t none where the kernel has it, threads otherwise -- qemu-img's
 * default is threads).  -n and -i native are refused: qimg has no native AIO engine.
 *
 * Facts learnt from running qemu-img 7.2:
 *  1. Defaults: 75000 requests, depth 64, 4 KiB buffers, step = buffer
 *     size, offset 0, reads (-w writes), cache writeback, pattern 0.
 *  2. Output: "Sending N read|write requests, B bytes each, D in parallel
 *     (starting at offset O, step size S)", with --flush-interval also
 *     "Sending flush every N requests", then "Run completed in X.XXX
 *     seconds." (wall time of the requests; the flush at close is not
 *     timed).  -q does not silence it.
 *  3. With --flush-interval=N, whenever the number of requests not yet
 *     sent is a multiple of N, the queue is drained and a flush is sent
 *     before the next request (--no-drain: the flush is sent at once, and
 *     requests keep flowing).  N must be >= depth and needs -w.
 *  4. A failed request ends the run: "Failed request: <strerror>", exit 1.
 *  5. Messages: "Invalid request count specified", "Invalid queue depth
 *     specified", "Invalid pattern byte specified", "Invalid flush interval
 *     specified", "Invalid cache mode", "Invalid aio option: X",
 *     "--flush-interval is only available in write tests", "Flush interval
 *     can't be smaller than depth", "Expecting one image file name".
 *     (qemu-img accepts -d 0 and then waits forever; qimg refuses it.)
 */
#include "qimg-tool.h"
#include "qimg/aio.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OPT_FLUSH_INTERVAL = 256, OPT_PATTERN, OPT_NO_DRAIN };

typedef struct Bench Bench;

/* One queue slot: a request in flight and its buffer. */
typedef struct Slot {
    Bench *b;
    uint8_t *buf;
    struct iovec iov;
    struct Slot *next_free;
} Slot;

struct Bench {
    QimgImage *img;
    bool write;
    uint64_t image_size;
    size_t bufsize;
    uint64_t step;
    int pattern;
    int count;
    int flush_interval;
    bool drain_on_flush;

    /* only the submitting thread (callbacks run in it) touches these */
    Slot *slots;
    Slot *free_slots;
    uint64_t next_offset;
    int issued;    /* requests sent */
    int in_flight; /* requests, not flushes */
    int flushes;   /* flushes in flight */
    bool draining; /* no new request until the flush is done */
};

/* strtoul as qemu-img's option parser uses it: whole string, base 0. */
static bool parse_ulong(const char *s, unsigned long *out)
{
    char *end;

    errno = 0;
    if (!*s) {
        return false;
    }
    *out = strtoul(s, &end, 0);
    return errno == 0 && *end == '\0';
}

static void fail_request(Bench *b, GError *err)
{
    int e = (err && err->domain == QIMG_ERROR && err->code > 0) ? err->code : EIO;

    g_clear_error(&err);
    tool_error("Failed request: %s", strerror(e));
    fflush(stdout);
    exit(EXIT_FAILURE);
}

static void flush_done(void *opaque, int ret, const GError *err);
static void request_done(void *opaque, int ret, const GError *err);

static void send_flush(Bench *b)
{
    GError *err = NULL;

    b->flushes++;
    if (!qimg_image_aio_flush(b->img, 0, flush_done, b, &err)) {
        fail_request(b, err);
    }
}

/* Fill the free slots with requests (fact 3: not while draining). */
static void send_requests(Bench *b)
{
    while (!b->draining && b->free_slots && b->issued < b->count) {
        Slot *sl = b->free_slots;
        GError *err = NULL;
        gboolean ok;

        b->free_slots = sl->next_free;
        sl->iov = (struct iovec){.iov_base = sl->buf, .iov_len = b->bufsize};
        if (b->write) {
            ok = qimg_image_aio_pwritev(b->img, b->next_offset, &sl->iov, 1, 0,
                                        request_done, sl, &err);
        } else {
            ok = qimg_image_aio_preadv(b->img, b->next_offset, &sl->iov, 1, 0,
                                       request_done, sl, &err);
        }
        if (!ok) {
            fail_request(b, err);
        }
        b->next_offset = (b->next_offset + b->step) % b->image_size;
        b->issued++;
        b->in_flight++;
    }
}

static void fail_async(Bench *b, const GError *err)
{
    fail_request(b, g_error_copy(err));
}

static void flush_done(void *opaque, int ret, const GError *err)
{
    Bench *b = opaque;

    if (ret < 0) {
        fail_async(b, err);
    }
    b->flushes--;
    if (b->draining && b->flushes == 0) {
        b->draining = false;
        send_requests(b);
    }
}

static void request_done(void *opaque, int ret, const GError *err)
{
    Slot *sl = opaque;
    Bench *b = sl->b;
    int remaining;

    if (ret < 0) {
        fail_async(b, err);
    }
    b->in_flight--;
    sl->next_free = b->free_slots;
    b->free_slots = sl;
    remaining = b->count - b->issued;
    if (b->flush_interval && remaining % b->flush_interval == 0) {
        if (!b->drain_on_flush) {
            send_flush(b);
        } else {
            b->draining = true; /* the last request in flight sends the flush */
            if (b->in_flight == 0) {
                send_flush(b);
            }
        }
    }
    send_requests(b);
}

/* The whole run from this one thread, on the asynchronous API (as qemu-img
 * bench submits from its one thread): depth slots, callbacks refill them. */
static void run(Bench *b, int depth)
{
    b->slots = g_new0(Slot, depth);
    for (int i = 0; i < depth; i++) {
        Slot *sl = &b->slots[i];
        /* aligned for O_DIRECT, as qemu-img bench's buffers (qemu_blockalign) */
        if (posix_memalign((void **)&sl->buf, 4096, b->bufsize ? b->bufsize : 1) != 0) {
            g_error("out of memory");
        }
        memset(sl->buf, b->pattern, b->bufsize);
        sl->b = b;
        sl->next_free = b->free_slots;
        b->free_slots = sl;
    }
    send_requests(b);
    while (b->in_flight > 0 || b->flushes > 0) {
        qimg_image_aio_wait(b->img);
    }
    for (int i = 0; i < depth; i++) {
        free(b->slots[i].buf);
    }
    g_free(b->slots);
}

int cmd_bench(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"object", required_argument, NULL, TOOL_OPT_OBJECT},
        {"flush-interval", required_argument, NULL, OPT_FLUSH_INTERVAL},
        {"image-opts", no_argument, NULL, TOOL_OPT_IMAGE_OPTS},
        {"pattern", required_argument, NULL, OPT_PATTERN},
        {"no-drain", no_argument, NULL, OPT_NO_DRAIN},
        {"force-share", no_argument, NULL, 'U'},
        {NULL, 0, NULL, 0},
    };
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    Bench b = {0};
    int depth = 64;
    int64_t offset = 0, bufsize = 4096, step = 0;
    unsigned long ul;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    struct timespec t1, t2;
    GError *err = NULL;
    int c;

    b.count = 75000;
    b.drain_on_flush = true;
    oo.cache = QIMG_CACHE_WRITEBACK;
    oo.read_only = true;
    while ((c = getopt_long(argc, argv, ":hc:d:f:ni:o:qs:S:t:wU", longopts, NULL)) !=
           -1) {
        switch (c) {
        case 'h':
            return tool_command_help("bench");
        case 'c':
            if (!parse_ulong(optarg, &ul) || ul > INT_MAX) {
                tool_error("Invalid request count specified");
                return 1;
            }
            b.count = (int)ul;
            break;
        case 'd':
            if (!parse_ulong(optarg, &ul) || ul == 0 || ul > INT_MAX) {
                tool_error("Invalid queue depth specified");
                return 1;
            }
            depth = (int)ul;
            break;
        case 'f':
            oo.format = optarg;
            break;
        case 'n':
            tool_error("-n (aio=native) is not supported by qimg: use -i threads or "
                       "-i io_uring");
            return 1;
        case 'i':
            if (strcmp(optarg, "native") == 0) {
                tool_error("aio=native is not supported by qimg: use -i threads or "
                           "-i io_uring");
                return 1;
            }
            if (strcmp(optarg, "io_uring") == 0) {
                ao.engine = QIMG_AIO_ENGINE_IO_URING;
            } else if (strcmp(optarg, "threads") == 0) {
                ao.engine = QIMG_AIO_ENGINE_THREADS;
            } else {
                tool_error("Invalid aio option: %s", optarg);
                return 1;
            }
            break;
        case 'o':
            if (!tool_cvtnum("offset", optarg, INT64_MAX, &offset)) {
                return 1;
            }
            break;
        case 'q':
            break;
        case 's':
            if (!tool_cvtnum("buffer size", optarg, INT_MAX, &bufsize)) {
                return 1;
            }
            break;
        case 'S':
            if (!tool_cvtnum("step_size", optarg, INT_MAX, &step)) {
                return 1;
            }
            break;
        case 't':
            if (!qimg_cache_mode_parse(optarg, &oo.cache, NULL)) {
                tool_error("Invalid cache mode");
                return 1;
            }
            break;
        case 'w':
            b.write = true;
            oo.read_only = false;
            break;
        case 'U':
            oo.force_share = true;
            break;
        case OPT_PATTERN:
            if (!parse_ulong(optarg, &ul) || ul > 0xff) {
                tool_error("Invalid pattern byte specified");
                return 1;
            }
            b.pattern = (int)ul;
            break;
        case OPT_FLUSH_INTERVAL:
            if (!parse_ulong(optarg, &ul) || ul > INT_MAX) {
                tool_error("Invalid flush interval specified");
                return 1;
            }
            b.flush_interval = (int)ul;
            break;
        case OPT_NO_DRAIN:
            b.drain_on_flush = false;
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
    if (!b.write && b.flush_interval) {
        tool_error("--flush-interval is only available in write tests");
        return 1;
    }
    if (b.flush_interval && b.flush_interval < depth) {
        tool_error("Flush interval can't be smaller than depth");
        return 1;
    }

    if (!tool_image_opts_ok(&oo, argv[optind])) {
        return 1;
    }
    b.img = tool_qimg_image_open(argv[optind], &oo, &err);
    if (!b.img) {
        tool_report_open_error(argv[optind], err);
        return 1;
    }
    tool_warn_probed_raw(b.img, &oo, argv[optind]);
    b.image_size = qimg_image_size(b.img);
    b.bufsize = (size_t)bufsize;
    b.step = step ? (uint64_t)step : (uint64_t)bufsize;
    b.next_offset = (uint64_t)offset;
    if (b.image_size == 0) {
        b.image_size = 1; /* every request fails at the end check, as in qemu-img */
    }

    printf("Sending %d %s requests, %d bytes each, %d in parallel (starting at offset "
           "%" PRId64 ", step size %d)\n",
           b.count, b.write ? "write" : "read", (int)b.bufsize, depth, offset,
           (int)b.step);
    if (b.flush_interval) {
        printf("Sending flush every %d requests\n", b.flush_interval);
    }
    fflush(stdout);

    depth = MIN(depth, MAX(b.count, 1));
    ao.threads = (unsigned)MIN(depth, 64); /* qemu's thread pool: 64 at most */
    if (!qimg_image_aio_setup(b.img, &ao, &err)) {
        tool_report_gerror(err, NULL);
        qimg_image_free(b.img);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    run(&b, depth);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    printf("Run completed in %3.3f seconds.\n",
           (double)(t2.tv_sec - t1.tv_sec) + (t2.tv_nsec - t1.tv_nsec) / 1e9);
    fflush(stdout);

    if (!qimg_image_close(b.img, &err)) {
        tool_report_gerror(err, NULL);
        return 1;
    }
    return 0;
}
