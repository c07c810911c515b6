/*
 * qcow2/compress.c: compressed clusters: the descriptor layout, the
 * decompressors (read path), the compressors and compressed writes.
 *
 * Owns: the compressed L2 entry layout (host offset + extra sector count),
 * the decompressors and compressors (raw deflate or zstd), and
 * pwrite_compressed.
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
 *  5. Compression: zlib is raw deflate with windowBits -12 (QEMU's format);
 *     zstd is one standard frame.  The output must be smaller than a
 *     cluster, else the cluster is written uncompressed (QEMU).
 *  6. A compressed write allocates byte ranges (alloc.c packs them after the
 *     previous one while the refcount allows): every cluster the sectors of
 *     the entry touch holds one reference per entry, exactly what qemu-img
 *     check counts.  It writes the data, then links the entry (L2 cache
 *     depending on the refcount cache), then frees what the entry replaced;
 *     on failure the new range is freed (write.c invariants 1-3, 9).
 *  7. A write covers one whole cluster, or the last, partial cluster of the
 *     image (padded with zeros); an empty write is accepted and ignored.
 *  8. A compressed write never replaces a cluster that has a host offset
 *     (allocated, preallocated zero, or compressed): it fails with -EIO and
 *     changes nothing, as QEMU 7.2 does.  Data that does not compress is
 *     written as a normal cluster first, which may overwrite (QEMU too).
 *  9. Each thread keeps its own compression contexts (a deflate stream, a
 *     zstd context), reset for every cluster and freed when the thread
 *     ends: compressing workers share nothing and allocate nothing per
 *     cluster.
 */
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

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

/* ---- write side ---- */

/* Invariant 9: this thread's compression contexts, made once, freed when
 * the thread ends. */
typedef struct CompressCtx {
    z_stream zs;
    bool zs_ready;
    ZSTD_CCtx *zstd;
} CompressCtx;

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void ctx_free(void *p)
{
    CompressCtx *c = p;

    if (c->zs_ready) {
        deflateEnd(&c->zs);
    }
    ZSTD_freeCCtx(c->zstd);
    g_free(c);
}

static void ctx_key_init(void)
{
    (void)pthread_key_create(&ctx_key, ctx_free);
}

static CompressCtx *thread_ctx(void)
{
    CompressCtx *c;

    pthread_once(&ctx_once, ctx_key_init);
    c = pthread_getspecific(ctx_key);
    if (!c) {
        c = g_new0(CompressCtx, 1);
        if (pthread_setspecific(ctx_key, c) != 0) {
            g_free(c);
            return NULL;
        }
    }
    return c;
}

static int64_t deflate_raw(void *dest, size_t dest_size, const void *src, size_t src_size)
{
    CompressCtx *c = thread_ctx();
    int64_t ret;

    if (!c) {
        return -ENOMEM;
    }
    if (!c->zs_ready) {
        memset(&c->zs, 0, sizeof(c->zs));
        /* invariant 5: raw deflate, 4 KiB window, as QEMU */
        if (deflateInit2(&c->zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -12, 9,
                         Z_DEFAULT_STRATEGY) != Z_OK) {
            return -EIO;
        }
        c->zs_ready = true;
    } else if (deflateReset(&c->zs) != Z_OK) {
        return -EIO;
    }
    c->zs.next_in = (Bytef *)src;
    c->zs.avail_in = (uInt)src_size;
    c->zs.next_out = dest;
    c->zs.avail_out = (uInt)dest_size;
    ret = deflate(&c->zs, Z_FINISH);
    ret = ret == Z_STREAM_END                 ? (int64_t)(dest_size - c->zs.avail_out)
          : ret == Z_OK || ret == Z_BUF_ERROR ? -ENOSPC
                                              : -EIO;
    return ret;
}

static int64_t compress_zstd(void *dest, size_t dest_size, const void *src,
                             size_t src_size)
{
    CompressCtx *c = thread_ctx();
    size_t zret;

    if (!c) {
        return -ENOMEM;
    }
    if (!c->zstd && !(c->zstd = ZSTD_createCCtx())) {
        return -ENOMEM;
    }
    zret =
        ZSTD_compressCCtx(c->zstd, dest, dest_size, src, src_size, ZSTD_CLEVEL_DEFAULT);
    if (ZSTD_isError(zret)) {
        return ZSTD_getErrorCode(zret) == ZSTD_error_dstSize_tooSmall ? -ENOSPC : -EIO;
    }
    return (int64_t)zret;
}

int64_t qcow2_compress(int compression_type, void *dest, size_t dest_size,
                       const void *src, size_t src_size)
{
    switch (compression_type) {
    case QCOW2_COMPRESSION_ZLIB:
        return deflate_raw(dest, dest_size, src, src_size);
    case QCOW2_COMPRESSION_ZSTD:
        return compress_zstd(dest, dest_size, src, src_size);
    default:
        return -ENOTSUP;
    }
}

/* Link the compressed entry over guest cluster 'offset' and drop what it
 * replaces (compress.c invariant 6); data_gen: the write generation once the
 * compressed bytes were written (write.c invariant 1).  Lock held. */
static int link_compressed_locked(Qcow2State *s, uint64_t offset, uint64_t entry,
                                  uint64_t data_gen)
{
    uint64_t l2_index, old;
    uint8_t *l2;
    int ret;

    if (qcow2_need_accurate_refcounts(s)) {
        ret = qcow2_cache_set_dependency_locked(s->l2_cache, s->refcount_cache);
        if (ret < 0) {
            return ret;
        }
    }
    ret = qcow2_get_l2_for_write_locked(s, offset, &l2, &l2_index);
    if (ret < 0) {
        return ret;
    }
    old = qcow2_l2_get(s, l2, l2_index);
    qcow2_l2_set(s, l2, l2_index, entry, 0);
    qcow2_cache_mark_dirty_locked(s->l2_cache, l2);
    qcow2_cache_depends_on_flush_locked(s->l2_cache); /* write.c invariant 1 */
    qcow2_cache_require_durable_locked(s->l2_cache, l2, data_gen);
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
    qcow2_free_l2_entry_locked(s, old, true, QCOW2_DISCARD_NEVER); /* alloc.c inv. 2 */
    return 0;
}

/* Validate the entry being replaced and allocate room for csize bytes;
 * returns the new L2 entry.  Lock held. */
static int alloc_compressed_locked(Qcow2State *s, uint64_t offset, uint64_t csize,
                                   uint64_t *entry)
{
    uint64_t l2_index, l2_offset, e, bm, coff, nb_sectors;
    Qcow2SubclusterType type;
    unsigned cnt;
    uint8_t *l2;
    int64_t r;
    int ret;

    ret = qcow2_get_l2_for_write_locked(s, offset, &l2, &l2_index);
    if (ret < 0) {
        return ret;
    }
    l2_offset =
        s->l1_table[offset >> (s->cluster_bits + s->l2_bits)] & QCOW2_L1E_OFFSET_MASK;
    e = qcow2_l2_get(s, l2, l2_index);
    bm = qcow2_l2_get_bitmap(s, l2, l2_index);
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
    ret =
        qcow2_l2_entry_type_locked(s, e, bm, 0, l2_offset, l2_index, offset, &type, &cnt);
    if (ret == 0 && ((e & QCOW2_OFLAG_COMPRESSED) || (e & QCOW2_L2E_OFFSET_MASK))) {
        /* compress.c invariant 8 */
        ret = blk_error(EIO,
                        "qcow2: a compressed write cannot overwrite the allocated "
                        "cluster at guest offset 0x%" PRIx64,
                        offset);
    }
    if (ret == 0) {
        ret = qcow2_mark_dirty_locked(s);
    }
    if (ret < 0) {
        return ret;
    }
    r = qcow2_alloc_bytes_locked(s, csize);
    if (r < 0) {
        return (int)r;
    }
    coff = (uint64_t)r;
    nb_sectors = ((coff + csize - 1) >> 9) - (coff >> 9); /* compress.c invariant 1 */
    *entry = QCOW2_OFLAG_COMPRESSED | (nb_sectors << s->csize_shift) | coff;
    if ((coff >> s->cluster_bits) == 0) {
        ret = qcow2_corrupt_locked(s, "Preventing invalid allocation of compressed "
                                      "cluster at offset 0");
    } else {
        ret = qcow2_pre_write_overlap_check_locked(s, 0, coff, csize);
    }
    if (ret < 0) {
        bool had_error = blk_error_mark();
        qcow2_free_l2_entry_locked(s, *entry, false, QCOW2_DISCARD_OTHER);
        blk_error_unwind(had_error);
    }
    return ret;
}

int qcow2_pwrite_compressed(BlkNode *img, uint64_t offset, const BlkIOV *qiov)
{
    Qcow2State *s = img->opaque;
    g_autofree uint8_t *buf = NULL, *out = NULL;
    uint64_t entry = 0;
    Qcow2Inflight r;
    int64_t csize;
    int ret;

    if (qiov->size == 0) {
        return 0; /* qemu-img convert's "end of stream" call */
    }
    if (qcow2_has_data_file(s)) {
        return blk_error(ENOTSUP, "qcow2: compressed writes are not supported with an "
                                  "external data file");
    }
    if (s->encrypted) {
        /* crypt.c invariant 6: QEMU would store the data in the clear */
        return blk_error(ENOTSUP, "Compression and encryption not supported at the same "
                                  "time");
    }
    if (qcow2_offset_into_cluster(s, offset) || qiov->size > s->cluster_size ||
        (qiov->size < s->cluster_size && offset + qiov->size != img->size) ||
        offset + qiov->size > img->size) {
        return blk_error(EINVAL,
                         "qcow2: a compressed write must cover one whole cluster "
                         "(offset %" PRIu64 ", %zu bytes, cluster size %" PRIu64 ")",
                         offset, qiov->size, s->cluster_size);
    }
    /* compress.c invariant 7: pad the last cluster with zeros (a whole
     * cluster in one buffer, convert's case, is compressed where it is) */
    const uint8_t *src = qiov->niov == 1 && qiov->iov[0].iov_len >= qiov->size
                             ? qiov->iov[0].iov_base
                             : NULL;
    if (!src || qiov->size < s->cluster_size) {
        buf = g_malloc0(s->cluster_size);
        iov_to_buf(qiov, 0, buf, qiov->size);
        src = buf;
    }
    out = g_malloc(s->cluster_size);
    uint64_t t0 = blk_now_ns();
    csize = qcow2_compress(s->compression_type, out, s->cluster_size - 1, src,
                           s->cluster_size);
    blk_thread_times()->compress_ns += blk_now_ns() - t0; /* order.c invariant 8 */

    blk_order_wait(); /* write.c invariant 12: compressed clusters in order */
    qcow2_lock(s);
    ret = qcow2_check_data_writable_locked(s, offset, qiov->size); /* meta.c inv 8 */
    if (ret < 0) {
        qcow2_unlock(s);
        return ret;
    }
    qcow2_inflight_begin_locked(s, &r, offset, s->cluster_size, true);
    if (csize == -ENOSPC) {
        /* Not smaller than a cluster: store it uncompressed. */
        ret = qcow2_write_registered_locked(s, offset, qiov);
        goto out;
    }
    if (csize < 0) {
        ret =
            blk_error(EIO, "qcow2: could not compress the cluster at 0x%" PRIx64, offset);
        goto out;
    }
    ret = alloc_compressed_locked(s, offset, (uint64_t)csize, &entry);
    qcow2_unlock(s);
    blk_order_allocated();
    if (ret == 0) {
        uint64_t coff = entry & s->cluster_offset_mask;
        blk_event(s->img->file, BLKEV_COMPRESSED_WRITE);
        ret = blk_pwrite(s->img->file, coff, out, (size_t)csize, 0);
    }
    uint64_t data_gen = blk_write_gen(s->img->file);
    qcow2_lock(s);
    if (ret == 0) {
        ret = link_compressed_locked(s, offset, entry, data_gen);
        if (ret < 0) {
            bool had_error = blk_error_mark();
            qcow2_free_l2_entry_locked(s, entry, false, QCOW2_DISCARD_OTHER);
            blk_error_unwind(had_error);
        }
    } else if (entry) {
        bool had_error = blk_error_mark();
        qcow2_free_l2_entry_locked(s, entry, false, QCOW2_DISCARD_OTHER);
        blk_error_unwind(had_error);
    }
out:
    qcow2_inflight_end_locked(s, &r);
    ret = qcow2_finish_request_locked(s, ret);
    qcow2_unlock(s);
    return ret;
}
