/*
 * qimg/copy.h: the copy pipeline behind "qimg convert": one image's
 * contents into another, several requests in flight.
 *
 *     QimgCopyOptions o = QIMG_COPY_OPTIONS_INIT;
 *     o.target_is_zero = true;              (a target just created)
 *     qimg_copy(src, dst, &o, &err);
 *     qimg_image_flush(dst, &err);          (the copy does not flush)
 *
 * Rules:
 *  1. What is written is what qemu-img convert writes: block status of the
 *     source's chain decides data, zeros and (with a backing file in the
 *     target) what is left unallocated; runs of zero sectors in the data at
 *     least sparse_size long are not written as data; zeros are written
 *     (as zeroes requests) only where the target may not read as zeros
 *     already.  Never a pre-zeroing pass.
 *  2. in_flight requests run at once, each on its own thread with its own
 *     buffer of up to 2 MiB: memory is bounded by in_flight, never by the
 *     image's size.
 *  3. A qcow2 target's host clusters are assigned in guest order even
 *     though the data writes run in parallel and complete in any order: the
 *     output is no more fragmented than a sequential copy's, with or
 *     without out_of_order.  Into other targets (raw files, block devices)
 *     writes are issued in guest order unless out_of_order, where they are
 *     issued in any order (qemu-img -W's use: preallocated devices).
 *  4. compress writes compressed clusters (the target's cluster size, the
 *     compression type of the target), compressed in parallel; a cluster
 *     that does not shrink is stored uncompressed, an all-zero one as
 *     zeros -- except with sparse_size QIMG_COPY_SPARSE_OFF (qemu-img -c
 *     -S 0, QEMU's 122), where every cluster is written compressed, zeros
 *     and what the source leaves unallocated too.
 *  5. The first error stops every request; it is returned with the offset
 *     it happened at ("error while writing at byte N: ...") -- except the
 *     source's read and block status errors under salvage.  A progress
 *     callback that returns FALSE stops the copy the same way (ECANCELED).
 *  6. Several sources (qimg_copy_sources) fill the target one after the
 *     other, each from the sum of the sizes before it; rules 1-5 hold for
 *     each, block status asked of each in its own offsets; offsets in
 *     errors and progress are the target's, salvage's warnings the
 *     source's own (as qemu-img's).
 *  7. copy_offload (qemu-img convert -C): data is moved by the kernel
 *     (copy_file_range) from the source's files into the target -- raw or
 *     qcow2 (clusters allocated, then the data copied into them, then
 *     linked, as a write does) on files -- without passing through memory
 *     and without sparse detection (what the source has as data is written
 *     whole, zeros in it too, as qemu-img -C).  Where that cannot be done
 *     (another format or protocol, encryption, compressed or zero source
 *     clusters, a kernel or filesystem that refuses: EXDEV, EOPNOTSUPP,
 *     ENOSYS, ...), offloading stops for the rest of the copy and the data
 *     is read and written as without it, as qemu-img falls back.  Not
 *     with compress, salvage or mirror_writes (EINVAL).
 */
#ifndef QIMG_COPY_H
#define QIMG_COPY_H

#include <qimg/qimg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* done: bytes of the source completed (read and written), of total.
 * Called from the copy's threads, one call at a time.  FALSE stops. */
typedef gboolean (*QimgCopyProgressFunc)(void *opaque, uint64_t done, uint64_t total);

#define QIMG_COPY_SPARSE_OFF UINT32_MAX /* sparse_size: write zeros as data */

/* Rule 8: nanoseconds, summed over the workers (a time may exceed wall_ns
 * by up to the number of workers); requests and their bytes as the
 * pipeline issued them. */
typedef struct QimgCopyStats {
    uint32_t struct_size; /* sizeof(QimgCopyStats): QIMG_COPY_STATS_INIT */
    unsigned workers;     /* threads that ran */
    uint64_t wall_ns;     /* the workers started .. the last one ended */
    uint64_t cpu_ns;      /* the workers' CPU time, user + system */
    uint64_t read_ns;     /* in reads of the sources */
    uint64_t write_ns;    /* in writes and zeroes requests, their turn excluded */
    uint64_t turn_ns;     /* waiting for the turn: allocations in guest order */
    uint64_t lock_ns;     /* waiting for the pipeline's lock */
    uint64_t plan_ns;     /* under it: the next chunk (the sources' block status) */
    uint64_t compress_ns; /* compressing clusters (in the target's driver) */
    uint64_t reads, writes, zeroes; /* requests */
    uint64_t read_bytes, write_bytes, zero_bytes;
} QimgCopyStats;

#define QIMG_COPY_STATS_INIT                                                             \
    {                                                                                    \
        .struct_size = sizeof(QimgCopyStats)                                             \
    }

typedef struct QimgCopyOptions {
    uint32_t struct_size; /* sizeof(QimgCopyOptions): QIMG_COPY_OPTIONS_INIT */
    unsigned in_flight;   /* requests at once (qemu-img -m), 1..16; 0: 8 */
    bool out_of_order;    /* qemu-img -W: writes issued in any order (rule 3) */
    bool compress;        /* qemu-img -c (rule 4) */
    /* Zero runs in data of at least this many bytes (a multiple of 512, at
     * most 16 MiB) are not written (qemu-img -S); 0: 4096;
     * QIMG_COPY_SPARSE_OFF: every byte is written, zeros as data (-S 0). */
    uint32_t sparse_size;
    bool target_is_zero;     /* the target reads as zeros: zeros are skipped */
    bool target_has_backing; /* what the source leaves undefined stays so */
    /* qemu-img -B: the target's backing file holds what the source's
     * backing chain holds; only the source's top layer is copied. */
    bool top_only;
    /* With top_only, where the target's backing file ends: zeros of the
     * source past it stay unallocated (they read as zeros).  0: unknown. */
    uint64_t target_backing_size;
    QimgCopyProgressFunc progress; /* or NULL */
    void *progress_opaque;
    /* With top_only: how many layers from the source's top count as its
     * top (qemu-img commit -b: the layers above the base); 0 or 1: the top
     * alone.  What they leave undefined stays unallocated (0.6). */
    unsigned top_layers;
    /* Writes as QEMU's commit (mirror) job makes them: data as read, no
     * zero detection in it; what the source reports as zeros as zeroes
     * requests that may unmap, also into a target with a backing file;
     * sparse_size is then ignored (0.6). */
    bool mirror_writes;
    /* qemu-img --salvage (0.7): a source read that fails is read again in
     * 512-byte sectors, and a sector that still fails is copied as zeros;
     * a block status that fails counts as data.  Each is reported to warn
     * (one call at a time) in qemu-img's words ("error while reading
     * offset N: REASON"); the copy goes on. */
    bool salvage;
    void (*warn)(void *opaque, const char *message);
    void *warn_opaque;
    /* Progress as qemu-img convert -p counts it (0.7): done and total are
     * the bytes of the chunks copied as data (zeros too when they are
     * written as data), total from a first walk of the source, done
     * counted as each chunk is started, in guest order; the callback is
     * also called again with the same values as chunks complete. */
    bool progress_allocated;
    /* 0.11: copy offloading (rule 7, qemu-img convert -C). */
    bool copy_offload;
    /* 0.14: rule 8, or NULL; its struct_size set (QIMG_COPY_STATS_INIT):
     * nothing past it is written. */
    QimgCopyStats *stats;
} QimgCopyOptions;

#define QIMG_COPY_OPTIONS_INIT                                                           \
    {                                                                                    \
        .struct_size = sizeof(QimgCopyOptions)                                           \
    }

/* Copy the source's size in bytes of src into dst (at least that large).
 * Neither flushes nor closes dst. */
gboolean qimg_copy(QimgImage *src, QimgImage *dst, const QimgCopyOptions *opts,
                   GError **error);

/* 0.11: the n_srcs images srcs one after the other into dst, as qemu-img
 * convert concatenates several sources (rule 6); qimg_copy is this with
 * one source.  Several sources refuse top_only and mirror_writes (they
 * take one) with EINVAL. */
gboolean qimg_copy_sources(QimgImage *const *srcs, unsigned n_srcs, QimgImage *dst,
                           const QimgCopyOptions *opts, GError **error);

#ifdef __cplusplus
}
#endif

#endif
