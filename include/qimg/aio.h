/*
 * qimg/aio.h: asynchronous requests on an image, for event loops.
 *
 * A request is submitted with a callback and completes later.  Callbacks
 * run in the caller's thread, from qimg_image_aio_poll(),
 * qimg_image_aio_wait() or qimg_image_close(); an event loop watches
 * qimg_image_aio_fd(), which is readable while completions wait:
 *
 *     qimg_image_aio_pwritev(img, off, iov, 1, 0, done, ctx, &err);
 *     ...
 *     poll({qimg_image_aio_fd(img, &err), POLLIN}) -> qimg_image_aio_poll(img, 0);
 *
 * Rules:
 *  1. Every submitted request completes exactly once: its callback gets 0,
 *     or -errno and a GError naming the problem (valid during the callback
 *     only).  A submit call that returns FALSE queued nothing and calls no
 *     callback (an unknown flag, a NULL callback, no memory).
 *  2. Callbacks never run inside a submit call; they may submit more.
 *  3. The data buffers stay the caller's and must stay valid until the
 *     callback ran; the iovec array itself is copied at submission.
 *  4. Requests in flight are limited only by memory: submission never
 *     blocks.  QimgAioOptions.threads requests run at once; the rest queue.
 *  5. Requests in flight are not ordered against each other.  A flush makes
 *     durable every write whose callback ran before the flush was submitted.
 *  6. No cancellation.  qimg_image_close() drains: it waits for every
 *     request and runs its callback before the image is flushed and closed.
 *  7. The same errors as the synchronous calls, and they are as sticky
 *     (a failed metadata write or flush makes later writes fail).
 *  8. Requests submitted from callbacks may reach the kernel only when the
 *     qimg_image_aio_poll() or _wait() that runs the callbacks returns
 *     (the io_uring engine hands a batch's submissions over together),
 *     or earlier: never later, and never held back while any thread waits
 *     inside qimg.  A callback that blocks on a thread that waits outside
 *     qimg (on the fd, say) for a request submitted in the same batch
 *     waits forever.
 *
 * Defaults (NULL options, or the first submission without
 * qimg_image_aio_setup()): 64 threads, engine QIMG_AIO_ENGINE_AUTO.
 */
#ifndef QIMG_AIO_H
#define QIMG_AIO_H

#include <qimg/qimg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ret: 0 or -errno; error: non-NULL exactly when ret < 0. */
typedef void (*QimgAioFunc)(void *opaque, int ret, const GError *error);

/* Per-request flags; each call refuses the ones it cannot honour. */
typedef enum QimgAioFlags {
    QIMG_AIO_MAY_UNMAP = 1 << 0,   /* zeroes: the range may be deallocated */
    QIMG_AIO_NO_FALLBACK = 1 << 1, /* zeroes: ENOTSUP rather than writing zeros */
    QIMG_AIO_FUA = 1 << 4,         /* writes, zeroes: durable before completion */
} QimgAioFlags;

typedef enum QimgAioEngine {
    /* io_uring where it serves (an O_DIRECT, cache=none image, and a kernel
     * that has io_uring), otherwise threads: measured faster than the pool
     * for both reads and rewrites at depths 1 and 32 (bench/io-bench.sh) */
    QIMG_AIO_ENGINE_AUTO = 0,
    QIMG_AIO_ENGINE_THREADS = 1, /* a pool of worker threads */
    /* on an O_DIRECT (cache=none) image, reads of allocated clusters and
     * in-place rewrites of allocated clusters (no flags) go to an io_uring
     * from the submitting thread; everything else, and every request the
     * ring cannot take, runs on the pool.  Refused where the kernel has no
     * io_uring. */
    QIMG_AIO_ENGINE_IO_URING = 2,
} QimgAioEngine;

typedef struct QimgAioOptions {
    uint32_t struct_size; /* sizeof(QimgAioOptions): QIMG_AIO_OPTIONS_INIT */
    unsigned threads;     /* requests running at once; 0: 64 */
    QimgAioEngine engine; /* QIMG_AIO_ENGINE_AUTO */
} QimgAioOptions;

#define QIMG_AIO_OPTIONS_INIT                                                            \
    {                                                                                    \
        .struct_size = sizeof(QimgAioOptions)                                            \
    }

/* Set up asynchronous requests (once, before the first one). */
gboolean qimg_image_aio_setup(QimgImage *img, const QimgAioOptions *opts, GError **error);
/* The completion fd (an eventfd, owned by the image): readable while
 * callbacks wait for qimg_image_aio_poll().  -1 with error set on failure. */
int qimg_image_aio_fd(QimgImage *img, GError **error);

gboolean qimg_image_aio_preadv(QimgImage *img, uint64_t offset, const struct iovec *iov,
                               int iovcnt, unsigned flags, QimgAioFunc cb, void *opaque,
                               GError **error);
gboolean qimg_image_aio_pwritev(QimgImage *img, uint64_t offset, const struct iovec *iov,
                                int iovcnt, unsigned flags, QimgAioFunc cb, void *opaque,
                                GError **error);
gboolean qimg_image_aio_pwrite_zeroes(QimgImage *img, uint64_t offset, uint64_t len,
                                      unsigned flags, QimgAioFunc cb, void *opaque,
                                      GError **error);
gboolean qimg_image_aio_pdiscard(QimgImage *img, uint64_t offset, uint64_t len,
                                 unsigned flags, QimgAioFunc cb, void *opaque,
                                 GError **error);
gboolean qimg_image_aio_flush(QimgImage *img, unsigned flags, QimgAioFunc cb,
                              void *opaque, GError **error);

/* Run the callbacks of completed requests (at most max; 0: all), without
 * blocking.  Returns how many ran. */
unsigned qimg_image_aio_poll(QimgImage *img, unsigned max);
/* Block until a request completes (at once if none is in flight), then
 * run the waiting callbacks like qimg_image_aio_poll(img, 0). */
unsigned qimg_image_aio_wait(QimgImage *img);
/* Requests submitted whose callback has not run yet. */
unsigned qimg_image_aio_in_flight(QimgImage *img);

/* Where requests went, since qimg_image_aio_setup(): for choosing an engine
 * by measurement.  Counters only grow. */
typedef struct QimgAioStats {
    uint32_t struct_size;  /* sizeof(QimgAioStats): QIMG_AIO_STATS_INIT */
    QimgAioEngine engine;  /* the engine in use (never AUTO once set up) */
    uint64_t submitted;    /* requests accepted */
    uint64_t completed;    /* callbacks run */
    uint64_t ring_reads;   /* reads submitted to the io_uring */
    uint64_t ring_writes;  /* writes submitted to the io_uring */
    uint64_t ring_retries; /* ring requests that came back short or failed and
                            * ran again on the pool */
    uint64_t ring_allocs;  /* of ring_writes, writes that allocated or linked
                            * clusters, planned on the submitting thread */
    uint64_t ring_joins;   /* of ring_writes, writes into clusters that another
                            * of ring_allocs was allocating, linked with it */
    uint64_t ring_submits; /* system calls that handed ring requests to the
                            * kernel (rule 8: one per batch of callbacks) */
} QimgAioStats;

#define QIMG_AIO_STATS_INIT                                                              \
    {                                                                                    \
        .struct_size = sizeof(QimgAioStats)                                              \
    }

/* Fill *stats (within its struct_size); all zero before any setup. */
gboolean qimg_image_aio_get_stats(QimgImage *img, QimgAioStats *stats, GError **error);

#ifdef __cplusplus
}
#endif

#endif
