/*
 * qcow2/compress.c: decoding of compressed cluster descriptors and
 * decompression of compressed clusters (raw deflate or zstd).
 *
 * Owns: the compressed L2 entry layout (host offset + extra sector count)
 * and the decompressors.
 *
 * Invariants (cited as "compress.c invariant N"):
 *  1. A compressed descriptor x = 62 - (cluster_bits - 8): bits 0..x-1 are
 *     the host byte offset, bits x..61 the number of additional 512-byte
 *     sectors; the compressed data is (sectors + 1) * 512 - (offset % 512)
 *     bytes, so at most 2 * cluster_size bytes.
 *  2. Decompression succeeds only when it produces exactly dest_size bytes
 *     (a whole cluster); input past the end of the stream is ignored (the
 *     size is only known to the sector), as QEMU does.  Anything else,
 *     including a zstd frame that would produce more than a cluster, is
 *     -EIO.
 *  3. Buffers are the caller's and bounded (invariant 1); the decoders never
 *     allocate in proportion to the input beyond their fixed contexts.
 *  4. Every loop makes progress or stops: a zstd step that consumes no input
 *     and produces no output is an error.
 */
#include "qcow2/qcow2.h"

#include <errno.h>
#include <zlib.h>
#include <zstd.h>

void qcow2_parse_compressed_entry(const Qcow2State *s, uint64_t l2_entry,
                                  uint64_t *coffset, uint64_t *csize)
{
    uint64_t sectors;

    *coffset = l2_entry & s->cluster_offset_mask;
    sectors = ((l2_entry >> s->csize_shift) & s->csize_mask) + 1;
    /* compress.c invariant 1: sectors <= 2^(cluster_bits - 8) */
    *csize = sectors * QCOW2_COMPRESSED_SECTOR_SIZE -
             (*coffset & (QCOW2_COMPRESSED_SECTOR_SIZE - 1));
}

static int inflate_raw(void *dest, size_t dest_size, const void *src, size_t src_size)
{
    z_stream strm;
    int ret;

    memset(&strm, 0, sizeof(strm));
    strm.next_in = (Bytef *)src;
    strm.avail_in = (uInt)src_size;
    strm.next_out = dest;
    strm.avail_out = (uInt)dest_size;
    if (inflateInit2(&strm, -12) != Z_OK) {
        return -EIO;
    }
    ret = inflate(&strm, Z_FINISH);
    /* Z_BUF_ERROR: the output is full before the input is used up; fine as
     * long as we got the whole cluster (compress.c invariant 2). */
    ret = ((ret == Z_STREAM_END || ret == Z_BUF_ERROR) && strm.avail_out == 0) ? 0 : -EIO;
    inflateEnd(&strm);
    return ret;
}

static int decompress_zstd(void *dest, size_t dest_size, const void *src, size_t src_size)
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    ZSTD_outBuffer out = {.dst = dest, .size = dest_size, .pos = 0};
    ZSTD_inBuffer in = {.src = src, .size = src_size, .pos = 0};
    size_t zret = 0;
    int ret = 0;

    if (!dctx) {
        return -EIO;
    }
    /* The data may hold several frames: go on until a cluster is produced. */
    while (out.pos < out.size) {
        size_t in_pos = in.pos, out_pos = out.pos;
        zret = ZSTD_decompressStream(dctx, &out, &in);
        if (ZSTD_isError(zret)) {
            ret = -EIO;
            break;
        }
        if (in.pos <= in_pos && out.pos <= out_pos) {
            ret = -EIO; /* compress.c invariant 4 */
            break;
        }
    }
    /* A frame not fully flushed means it holds more than one cluster. */
    if (zret > 0) {
        ret = -EIO;
    }
    ZSTD_freeDCtx(dctx);
    return ret;
}

int qcow2_decompress(int compression_type, void *dest, size_t dest_size, const void *src,
                     size_t src_size)
{
    switch (compression_type) {
    case QCOW2_COMPRESSION_ZLIB:
        return inflate_raw(dest, dest_size, src, src_size);
    case QCOW2_COMPRESSION_ZSTD:
        return decompress_zstd(dest, dest_size, src, src_size);
    default:
        return -ENOTSUP;
    }
}
