/*
 * vmdk/grain.c: reading compressed grains (streamOptimized extents and
 * compressed sparse ones) -- a run of grains that lie close together in
 * the file is read with one request, and each grain is inflated in the
 * caller's thread with that thread's stream and buffers.
 *
 * Owns: the per-thread inflate stream and buffers, and what a compressed
 * grain record is when read.
 *
 * Invariants (cited as "grain.c invariant N"):
 *  1. A grain record (vmdk.c invariant 5): with markers, a 12-byte marker
 *     whose size field is the length of the zlib stream after it, marker +
 *     stream at most two grains; without, one grain is the stream.  Bytes
 *     past the end of the extent file read as zeros.  The stream must end
 *     (its check value verified, as zlib's uncompress(), QEMU's call) inside
 *     one grain of output and cover what is read of the grain; otherwise the
 *     read fails naming the grain's offset.
 *  2. Grains whose records start at ascending offsets, each within
 *     VMDK_RUN_SPAN bytes of the first, are read with one request from the
 *     first start to one grain past the last start, extended only when a
 *     record goes further; other grains are read one run each.  What is
 *     read of a grain never depends on its neighbours (each record is parsed
 *     at its own offset), so a run answers as grain-by-grain reads would.
 *  3. Memory: a thread keeps one read buffer (a run: VMDK_RUN_SPAN + two
 *     grains), one grain of output and one inflate stream, freed when the
 *     thread ends; buffers larger than VMDK_KEEP_BYTES (grains of more than
 *     1 MiB, up to VMDK_MAX_COMPRESSED_GRAIN) are allocated for the call
 *     and freed after it.  A grain read whole into one buffer is inflated
 *     straight into it.
 */
#include "vmdk/vmdk.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <zlib.h>

#define VMDK_RUN_SPAN (2u << 20)
#define VMDK_KEEP_BYTES (4u << 20)

typedef struct GrainBufs {
    uint8_t *rec, *out;
    size_t rec_size, out_size;
    z_stream zs;
    bool zs_ready;
} GrainBufs;

static void grain_bufs_free(gpointer p)
{
    GrainBufs *b = p;

    if (b->zs_ready) {
        inflateEnd(&b->zs);
    }
    g_free(b->rec);
    g_free(b->out);
    g_free(b);
}

static GPrivate grain_bufs = G_PRIVATE_INIT(grain_bufs_free);

static GrainBufs *bufs_get(void)
{
    GrainBufs *b = g_private_get(&grain_bufs);

    if (!b) {
        b = g_new0(GrainBufs, 1);
        g_private_set(&grain_bufs, b);
    }
    return b;
}

/* Invariant 3: size bytes, the thread's (*slot) or this call's (*tmp). */
static uint8_t *buf_for(uint8_t **slot, size_t *slot_size, size_t size, uint8_t **tmp)
{
    if (size > VMDK_KEEP_BYTES) {
        *tmp = g_malloc(size);
        return *tmp;
    }
    if (*slot_size < size) {
        g_free(*slot);
        *slot = g_malloc(size);
        *slot_size = size;
    }
    return *slot;
}

/* The bytes of a run read so far: buf[0, have) is the file from base. */
typedef struct Run {
    VmdkExtent *ext;
    uint64_t base;
    uint8_t *buf;
    size_t cap, have;
} Run;

/* Make buf[0, want) hold the file from base (want <= cap), zeros past
 * its end (invariant 1). */
static int run_fill(Run *r, size_t want)
{
    uint64_t size = r->ext->file->size, from = r->base + r->have;
    size_t n;
    int ret;

    if (want <= r->have) {
        return 0;
    }
    n = from < size ? (size_t)MIN((uint64_t)(want - r->have), size - from) : 0;
    if (n) {
        ret = blk_pread(r->ext->file, from, r->buf + r->have, n);
        if (ret < 0) {
            return ret;
        }
    }
    memset(r->buf + r->have + n, 0, want - r->have - n);
    r->have = want;
    return 0;
}

/* One zlib stream into out (cap bytes): 0 when it ends there. */
static int inflate_stream(GrainBufs *b, const uint8_t *in, size_t len, uint8_t *out,
                          size_t cap, size_t *out_len)
{
    int zr;

    if (!b->zs_ready) {
        memset(&b->zs, 0, sizeof(b->zs));
        if (inflateInit(&b->zs) != Z_OK) {
            return -ENOMEM;
        }
        b->zs_ready = true;
    } else if (inflateReset(&b->zs) != Z_OK) {
        return -EIO;
    }
    b->zs.next_in = (Bytef *)in;
    b->zs.avail_in = (uInt)len;
    b->zs.next_out = out;
    b->zs.avail_out = (uInt)cap;
    zr = inflate(&b->zs, Z_FINISH);
    *out_len = cap - b->zs.avail_out;
    return zr == Z_STREAM_END ? 0 : -EINVAL;
}

/* The grain whose record is at r->buf + at (file offset host): its bytes
 * [in, in + n) into q at qoff (invariant 1). */
static int read_grain(GrainBufs *b, Run *r, size_t at, uint64_t host, size_t in, size_t n,
                      const BlkIOV *q, size_t qoff)
{
    size_t grain = (size_t)r->ext->grain, data_len, want, out_len = 0;
    g_autofree uint8_t *tmp = NULL;
    bool direct = q->niov == 1 && in == 0 && n == grain; /* invariant 3 */
    uint8_t *out;
    int ret;

    if (r->ext->has_marker) {
        data_len = load_le32(r->buf + at + VMDK_MARKER_SIZE);
        want = VMDK_GRAIN_MARKER_LEN + data_len;
    } else {
        data_len = grain;
        want = grain;
    }
    if (data_len == 0 || want > 2 * grain) {
        return blk_error(EINVAL,
                         "Invalid compressed grain at offset %" PRIu64 " of '%s': %zu "
                         "bytes",
                         host, r->ext->filename, data_len);
    }
    ret = run_fill(r, at + want);
    if (ret < 0) {
        return ret;
    }
    if (direct) {
        out = (uint8_t *)q->iov[0].iov_base + qoff;
    } else {
        out = buf_for(&b->out, &b->out_size, grain, &tmp);
    }
    ret = inflate_stream(b, r->buf + at + (want - data_len), data_len, out, grain,
                         &out_len);
    if (ret == -ENOMEM) {
        return blk_error(ENOMEM, "Could not set up decompression for '%s'",
                         r->ext->filename);
    }
    if (ret < 0 || in + n > out_len) {
        return blk_error(EINVAL,
                         "Could not decompress the grain at offset %" PRIu64 " of '%s'",
                         host, r->ext->filename);
    }
    if (!direct) {
        iov_from_buf(q, qoff, out + in, n);
    }
    return 0;
}

int vmdk_read_grains(VmdkExtent *ext, const uint64_t *hosts, unsigned count,
                     uint64_t in_grain, const BlkIOV *q)
{
    size_t grain = (size_t)ext->grain, done = 0;
    GrainBufs *b;
    unsigned i = 0;

    if (ext->grain > VMDK_MAX_COMPRESSED_GRAIN) {
        return blk_error(ENOTSUP,
                         "Compressed grains of %" PRIu64 " bytes in '%s' are not "
                         "supported",
                         ext->grain, ext->filename);
    }
    b = bufs_get();
    while (i < count && done < q->size) {
        g_autofree uint8_t *tmp = NULL;
        unsigned j = i + 1;
        int ret;

        /* invariant 2: the run i..j-1 */
        while (j < count && hosts[j] > hosts[j - 1] &&
               hosts[j] - hosts[i] <= VMDK_RUN_SPAN) {
            j++;
        }
        Run r = {.ext = ext, .base = hosts[i]};
        r.cap = (size_t)(hosts[j - 1] - hosts[i]) + 2 * grain;
        r.buf = buf_for(&b->rec, &b->rec_size, r.cap, &tmp);
        ret = run_fill(&r, r.cap - grain);
        for (unsigned k = i; k < j && ret == 0 && done < q->size; k++) {
            size_t in = k == 0 ? (size_t)in_grain : 0;
            size_t n = MIN(grain - in, q->size - done);
            ret = read_grain(b, &r, (size_t)(hosts[k] - hosts[i]), hosts[k], in, n, q,
                             done);
            done += n;
        }
        if (ret < 0) {
            return ret;
        }
        i = j;
    }
    return 0;
}
