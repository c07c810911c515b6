/*
 * qimg convert: the copy, a sequential one that leaves the same layout in
 * the target as qemu-img 7.2 (see shared/reference/qemu-behaviour.md
 * section c).
 *
 * Owns: the walk over the source by block status, sparse detection, and
 * which writes (data, zeroes, compressed clusters, none) reach the target.
 * convert.c parses the options and opens source and target; the Convert
 * state it fills in (tools/convert.h) says what the target may assume.
 *
 *  1. The source is walked by block status through its chain.  A status
 *     region is trimmed so that it ends on a source cluster boundary (when
 *     that leaves something).  ZERO regions are one chunk; DATA regions
 *     (and ZERO regions with -S 0, which become explicit zero data) are
 *     cut into 2 MiB chunks counted from the region start.
 *  2. In a data chunk, sparse detection works on 512-byte sectors: a run
 *     of zero sectors of at least -S bytes (default 4 KiB) is not written;
 *     shorter zero runs between data are written as data.  Run ends are
 *     moved to multiples of the alignment (pow2floor(-S)) so that writes
 *     stay aligned: a data run is extended to the next boundary, a zero run
 *     is shortened to end at the previous one (or becomes data if that
 *     would leave nothing).  -S 0 writes everything.
 *  3. Zeros are skipped when the target reads as zeros already (zero_init,
 *     convert.c facts 2 and 3); otherwise they are written with
 *     pwrite_zeroes (may unmap unless the target has a backing file).  A
 *     region that is neither data nor zero is data, unless the target has
 *     a backing file, where it is left unallocated.
 *  4. With -B (top_only) the target's backing file is taken to hold what
 *     the source's backing chain holds: only the source's top layer is
 *     asked for status, and what it does not define (and zeros past the
 *     end of the target's backing file) is left unallocated.
 */
#include "convert.h"

#include <inttypes.h>
#include <string.h>

#define REQUEST_MAX ((uint64_t)(INT32_MAX / SECTOR) * SECTOR)

typedef enum { ST_DATA, ST_ZERO, ST_BACKING } ChunkStatus;

static bool sector_is_zero_buf(const uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i]) {
            return false;
        }
    }
    return true;
}

static bool sector_is_zero(const uint8_t *buf, size_t len)
{
    static const uint8_t zeros[SECTOR];

    return memcmp(buf, zeros, len) == 0;
}

/* Length of sector i of a buffer of 'len' bytes (the last may be short). */
static size_t sector_len(size_t len, size_t i)
{
    return MIN(SECTOR, len - i * SECTOR);
}

/*
 * One run of sectors in the same state (fact 2) from the start of buf
 * (nsec sectors, 'len' bytes, first sector number 'sector').  Returns
 * whether the run is data; *run is its length in sectors.
 */
static bool same_run(const uint8_t *buf, size_t len, size_t nsec, uint64_t sector,
                     unsigned align, size_t *run)
{
    bool zero = sector_is_zero(buf, sector_len(len, 0));
    size_t i = 1;
    uint64_t tail;

    while (i < nsec && sector_is_zero(buf + i * SECTOR, sector_len(len, i)) == zero) {
        i++;
    }
    if (i == nsec) {
        *run = i;
        return !zero;
    }
    tail = (sector + i) % align;
    if (tail) {
        if (zero && i <= tail) {
            zero = false;
        }
        if (!zero) {
            i = MIN(i + (align - tail), nsec);
        } else {
            i -= tail;
        }
    }
    *run = i;
    return !zero;
}

/* Like same_run, but zero runs shorter than 'min' sectors that follow data
 * are taken into the data run. */
static bool data_run(const uint8_t *buf, size_t len, uint64_t sector, unsigned min,
                     unsigned align, size_t *run)
{
    size_t nsec = (len + SECTOR - 1) / SECTOR;
    size_t used, checked, r;

    if (nsec < min) {
        min = (unsigned)nsec;
    }
    if (!same_run(buf, len, nsec, sector, align, &r)) {
        *run = r;
        return false;
    }
    used = checked = r;
    while (checked < nsec) {
        bool data = same_run(buf + checked * SECTOR, len - checked * SECTOR,
                             nsec - checked, sector + checked, align, &r);
        checked += r;
        if (data) {
            used = checked;
        } else if (r >= min) {
            break;
        }
    }
    *run = used;
    return true;
}

static bool write_zeroes(Convert *s, uint64_t offset, uint64_t len)
{
    GError *err = NULL;

    if (s->zero_init) {
        return true;
    }
    if (!qimg_image_pwrite_zeroes(
            s->dst, offset, len, s->target_has_backing ? 0 : QIMG_ZERO_MAY_UNMAP, &err)) {
        tool_error("error while writing at byte %" PRIu64 ": %s", offset, err->message);
        g_clear_error(&err);
        return false;
    }
    return true;
}

static bool write_data(Convert *s, uint64_t offset, const uint8_t *buf, size_t len)
{
    GError *err = NULL;

    if (!qimg_image_pwrite(s->dst, offset, buf, len, &err)) {
        tool_error("error while writing at byte %" PRIu64 ": %s", offset, err->message);
        g_clear_error(&err);
        return false;
    }
    return true;
}

/* Write one data chunk with sparse detection (fact 2). */
static bool write_chunk(Convert *s, uint64_t offset, size_t len)
{
    size_t pos = 0;

    if (s->min_sparse == 0) {
        return write_data(s, offset, s->buf, len);
    }
    while (pos < len) {
        size_t run, bytes;
        bool data = data_run(s->buf + pos, len - pos, (offset + pos) / SECTOR,
                             s->min_sparse, s->alignment, &run);

        bytes = MIN((uint64_t)run * SECTOR, len - pos);
        if (data ? !write_data(s, offset + pos, s->buf + pos, bytes)
                 : !write_zeroes(s, offset + pos, bytes)) {
            return false;
        }
        pos += bytes;
    }
    return true;
}

/*
 * Block status of the source: of the whole chain, or with -B of its top
 * layer alone (fact 4), where what the layer leaves undefined reads as zeros
 * when nothing is below it or the offset is past the end of what is below.
 */
static bool source_status(Convert *s, uint64_t offset, uint64_t len, QimgExtent *ext,
                          GError **err)
{
    QimgImage *below;

    if (!s->top_only) {
        return qimg_image_block_status(s->src, offset, len, ext, err);
    }
    if (!qimg_image_block_status_layer(s->src, offset, len, ext, err)) {
        return false;
    }
    if (ext->flags & (QIMG_STATUS_ALLOCATED | QIMG_STATUS_ZERO | QIMG_STATUS_DATA)) {
        return true;
    }
    below = qimg_image_backing(s->src);
    if (!below) {
        ext->flags |= QIMG_STATUS_ZERO;
    } else if (offset >= qimg_image_size(below)) {
        ext->flags |= QIMG_STATUS_ZERO;
    } else {
        ext->length = MIN(ext->length, qimg_image_size(below) - offset);
    }
    return true;
}

/* Status of the source at 'offset' and where it ends (fact 1). */
static bool next_status(Convert *s, uint64_t offset, ChunkStatus *st, uint64_t *end)
{
    QimgExtent ext;
    GError *err = NULL;
    uint64_t n, tail;

    if (!source_status(s, offset, s->size - offset, &ext, &err)) {
        tool_error("error while reading block status at offset %" PRIu64 ": %s", offset,
                   err->message);
        g_clear_error(&err);
        return false;
    }
    n = MIN(ext.length, s->size - offset);
    if (n == 0) {
        tool_error("error while reading block status at offset %" PRIu64, offset);
        return false;
    }
    n = (n + SECTOR - 1) / SECTOR * SECTOR;
    tail = (offset + n) % s->src_align;
    if (n > tail) {
        n -= tail;
    }
    *end = MIN(offset + n, s->size);
    if (ext.flags & QIMG_STATUS_ZERO) {
        bool past_backing = s->top_only && s->target_backing >= 0 &&
                            offset >= (uint64_t)s->target_backing;
        *st = past_backing ? ST_BACKING : ST_ZERO;
    } else if (ext.flags & QIMG_STATUS_DATA) {
        *st = ST_DATA;
    } else {
        *st = s->target_has_backing ? ST_BACKING : ST_DATA;
    }
    return true;
}

/*
 * -c, as qemu-img: the target is written cluster by cluster; an all-zero
 * cluster goes down the zero path, anything else is compressed.
 */
static bool do_copy_compressed(Convert *s, ToolProgress *prog)
{
    for (uint64_t offset = 0; offset < s->size; offset += s->cluster) {
        size_t n = (size_t)MIN((uint64_t)s->cluster, s->size - offset);
        GError *err = NULL;
        ChunkStatus st;
        uint64_t end;

        if (!next_status(s, offset, &st, &end)) {
            return false;
        }
        if (end - offset < n) {
            st = ST_DATA; /* a partly defined cluster is written whole */
        }
        if (st == ST_BACKING) {
            tool_progress_update(prog, offset + n, s->size);
            continue; /* fact 4: the target's backing file shows through */
        }
        if (st == ST_ZERO) {
            memset(s->buf, 0, n);
        } else if (!qimg_image_pread(s->src, offset, s->buf, n, &err)) {
            tool_error("error while reading at byte %" PRIu64 ": %s", offset,
                       err->message);
            g_clear_error(&err);
            return false;
        }
        if (sector_is_zero_buf(s->buf, n)) {
            if (!s->zero_init && !write_zeroes(s, offset, n)) {
                return false;
            }
        } else if (!qimg_image_pwrite_compressed(s->dst, offset, s->buf, n, &err)) {
            tool_error("error while compressing sector %" PRIu64 ": %s", offset / SECTOR,
                       err->message);
            g_clear_error(&err);
            return false;
        }
        tool_progress_update(prog, offset + n, s->size);
    }
    return true;
}

bool convert_copy(Convert *s, ToolProgress *prog)
{
    if (s->compress) {
        return do_copy_compressed(s, prog);
    }
    uint64_t offset = 0, status_end = 0;
    ChunkStatus st = ST_DATA;

    while (offset < s->size) {
        uint64_t n;
        GError *err = NULL;

        if (offset >= status_end && !next_status(s, offset, &st, &status_end)) {
            return false;
        }
        n = MIN(status_end - offset, REQUEST_MAX);
        if (st == ST_DATA || (st == ST_ZERO && s->min_sparse == 0)) {
            n = MIN(n, BUF_SIZE);
        }

        if (st == ST_DATA) {
            if (!qimg_image_pread(s->src, offset, s->buf, n, &err)) {
                tool_error("error while reading at byte %" PRIu64 ": %s", offset,
                           err->message);
                g_clear_error(&err);
                return false;
            }
            if (!write_chunk(s, offset, n)) {
                return false;
            }
        } else if (st == ST_ZERO && s->min_sparse == 0) {
            memset(s->buf, 0, n);
            if (!write_data(s, offset, s->buf, n)) {
                return false;
            }
        } else if (st == ST_ZERO) {
            if (!write_zeroes(s, offset, n)) {
                return false;
            }
        }
        offset += n;
        tool_progress_update(prog, offset, s->size);
    }
    return true;
}
