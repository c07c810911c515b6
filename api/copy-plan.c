/*
 * api/copy-plan.c: what the copy writes where -- the same layout in the
 * target as qemu-img 7.2's convert (shared/reference/qemu-behaviour.md
 * section c).  The pipeline (copy.c) takes chunks from here in order and
 * moves them in parallel.
 *
 * Owns: the walk over the source by block status, cutting it into chunks,
 * and sparse detection inside a data chunk.
 *
 * Facts (cited as "copy-plan.c fact N"):
 *  1. The source is walked by block status through its chain.  A status
 *     region is trimmed so that it ends on a source cluster boundary (when
 *     that leaves something).  ZERO regions are one chunk; DATA regions
 *     (and ZERO regions with -S 0, which become explicit zero data) are
 *     cut into 2 MiB chunks counted from the region start.  With compress,
 *     every chunk is one target cluster, data if the status region does
 *     not cover it whole.
 *  2. In a data chunk, sparse detection works on 512-byte sectors: a run
 *     of zero sectors of at least -S bytes (default 4 KiB) is not written;
 *     shorter zero runs between data are written as data.  Run ends are
 *     moved to multiples of the alignment (pow2floor(-S), or the target's
 *     request alignment if larger: O_DIRECT onto 4K sectors) so that writes
 *     stay aligned: a data run is extended to the next boundary, a zero run
 *     is shortened to end at the previous one (or becomes data if that
 *     would leave nothing).  -S 0 writes everything.
 *  3. Zeros are skipped when the target reads as zeros already
 *     (target_is_zero); otherwise they are written as zeroes requests (may
 *     unmap unless the target has a backing file).  A region that is
 *     neither data nor zero is data, unless the target has a backing file,
 *     where it is left unallocated.
 *  4. With top_only (-B) the target's backing file is taken to hold what
 *     the source's backing chain holds: only the source's top layer is
 *     asked for status, and what it does not define (and zeros past the
 *     end of the target's backing file) is left unallocated.  With
 *     top_layers N > 1 (commit -b) the chain is asked and what a layer at
 *     depth N or below defines counts as undefined.
 *  5. Salvage (qemu-img --salvage): a block status that fails is asked
 *     again for a quarter of its sectors (rounded up) until it succeeds or
 *     asks for one sector; that failing is reported ("error while reading
 *     block status at offset N: REASON") and the sector counts as data, so
 *     the read decides (copy.c reads a failing chunk again sector by
 *     sector, zeros where a sector still fails).
 *  6. A status region is asked for once: the chunks cut from it (with
 *     compress, each cluster it covers whole) use the answer kept in the
 *     plan, so the walk (under the pipeline's lock) asks the source once
 *     per region, not once per cluster.  A cluster the kept answer does not
 *     cover whole is asked for again from its start, as without the cache.
 *  7. Several sources are copied one after the other, as qemu-img convert
 *     concatenates them: source i fills the target from the sum of the
 *     sizes before it (each a multiple of 512: the block layer rounds an
 *     image's size up to whole sectors).  Block status is asked of one
 *     source at a time, in its own offsets, and a status region (trimmed
 *     to that source's cluster size) never runs into the next source;
 *     only a compressed cluster may straddle two, its read split between
 *     them (copy_plan_source_at).  top_only and mirror_writes take one
 *     source (qimg_copy_sources refuses more).
 */
#include "api/copy-plan.h"

#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#define REQUEST_MAX ((uint64_t)(INT32_MAX / COPY_SECTOR) * COPY_SECTOR)

static unsigned pow2floor(unsigned v)
{
    unsigned p = 1;

    while (p <= v / 2) {
        p *= 2;
    }
    return p;
}

/* Fact 7: make source i the walk's current one. */
static void select_source(CopyPlan *p, unsigned i, uint64_t base)
{
    QimgImage *src = p->srcs[i];
    BlkInfo si = {0};

    p->cur = i;
    p->src = src;
    p->base = base;
    p->src_align = 0;
    if (src->node->drv->get_info && src->node->drv->get_info(src->node, &si) == 0) {
        p->src_align = si.cluster_size;
    }
    blk_info_clear(&si);
    p->src_align = MAX(p->src_align, COPY_SECTOR);
}

unsigned copy_plan_source_at(const CopyPlan *p, uint64_t offset, uint64_t *local,
                             uint64_t *avail)
{
    unsigned i = 0;

    while (i + 1 < p->n_srcs && offset >= p->srcs[i]->node->size) {
        offset -= p->srcs[i]->node->size;
        i++;
    }
    *local = offset;
    *avail = p->srcs[i]->node->size - MIN(offset, p->srcs[i]->node->size);
    return i;
}

void copy_plan_init(CopyPlan *p, QimgImage *const *srcs, unsigned n_srcs, QimgImage *dst,
                    const QimgCopyOptions *o)
{
    BlkInfo di = {0};

    memset(p, 0, sizeof(*p));
    p->srcs = srcs;
    p->n_srcs = n_srcs;
    for (unsigned i = 0; i < n_srcs; i++) { /* qimg_copy_sources checked the sum */
        p->size += srcs[i]->node->size;
    }
    select_source(p, 0, 0);
    p->mirror_writes = o->mirror_writes;
    p->salvage = o->salvage;
    if (o->mirror_writes) {
        copy_plan_mirror_init(p, dst);
    }
    p->zeros_as_data = o->sparse_size == QIMG_COPY_SPARSE_OFF && !o->mirror_writes;
    p->min_sparse = o->sparse_size == QIMG_COPY_SPARSE_OFF || o->mirror_writes ? 0
                    : o->sparse_size == 0 ? 4096 / COPY_SECTOR
                                          : o->sparse_size / COPY_SECTOR;
    /* fact 2: as qemu-img, MAX(pow2floor(-S), the target's request alignment) */
    p->alignment = MAX(MAX(pow2floor(p->min_sparse), 1u),
                       (unsigned)DIV_ROUND_UP(dst->node->request_alignment, COPY_SECTOR));
    p->target_has_backing = o->target_has_backing;
    p->top_only = o->top_only;
    p->top_layers = o->top_only ? MAX(o->top_layers, 1u) : 0;
    p->target_backing = o->target_backing_size ? (int64_t)o->target_backing_size : -1;
    p->compress = o->compress;
    if (o->compress) {
        if (dst->node->drv->get_info && dst->node->drv->get_info(dst->node, &di) == 0) {
            p->cluster = di.cluster_size;
        }
        blk_info_clear(&di);
        p->cluster = p->cluster ? MIN(p->cluster, COPY_BUF_SIZE) : 65536;
    }
}

static bool sector_is_zero(const uint8_t *buf, size_t len)
{
    static const uint8_t zeros[COPY_SECTOR];

    return memcmp(buf, zeros, len) == 0;
}

bool copy_buf_is_zero(const uint8_t *buf, size_t len)
{
    while (len >= COPY_SECTOR) {
        if (!sector_is_zero(buf, COPY_SECTOR)) {
            return false;
        }
        buf += COPY_SECTOR;
        len -= COPY_SECTOR;
    }
    return sector_is_zero(buf, len);
}

/* Length of sector i of a buffer of 'len' bytes (the last may be short). */
static size_t sector_len(size_t len, size_t i)
{
    return MIN(COPY_SECTOR, len - i * COPY_SECTOR);
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

    while (i < nsec &&
           sector_is_zero(buf + i * COPY_SECTOR, sector_len(len, i)) == zero) {
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

/* Fact 2: the runs of a data chunk (buf, len bytes, first sector number
 * 'sector'), in order, as runs[i] = sectors | COPY_RUN_DATA for data; the
 * count is returned (at most one per sector).  A data run takes in the
 * zero runs shorter than min_sparse sectors that follow it when data comes
 * after them.  Each sector's state is looked at once: the zero run that
 * ends a data run is kept and becomes the next run when it starts where
 * that data run ends. */
size_t copy_chunk_runs(const CopyPlan *p, const uint8_t *buf, size_t len, uint64_t sector,
                       uint32_t *runs)
{
    size_t nsec = (len + COPY_SECTOR - 1) / COPY_SECTOR;
    size_t pos = 0, n = 0;
    size_t zero_at = SIZE_MAX, zero_len = 0; /* a zero run already found */

    while (pos < nsec) {
        size_t r;
        bool data;

        if (pos == zero_at) {
            data = false;
            r = zero_len;
        } else {
            data = same_run(buf + pos * COPY_SECTOR, len - pos * COPY_SECTOR, nsec - pos,
                            sector + pos, p->alignment, &r);
        }
        if (data) {
            size_t min = MIN((size_t)p->min_sparse, nsec - pos);
            size_t used = pos + r, checked = pos + r;

            while (checked < nsec) {
                size_t r2;
                bool d =
                    same_run(buf + checked * COPY_SECTOR, len - checked * COPY_SECTOR,
                             nsec - checked, sector + checked, p->alignment, &r2);
                if (!d && r2 >= min) {
                    zero_at = checked;
                    zero_len = r2;
                    break;
                }
                checked += r2;
                if (d) {
                    used = checked;
                }
            }
            r = used - pos;
        }
        runs[n++] = (uint32_t)r | (data ? COPY_RUN_DATA : 0);
        pos += r;
    }
    return n;
}

/*
 * Fact 4, top_layers N > 1: the first of the top N layers that defines
 * offset, asked layer by layer so that nothing at or below depth N is
 * read (a commit writes the base while this runs); undefined in all of
 * them: flags 0, left alone, as QEMU's commit copies only what is
 * allocated above the base; past the end of a layer below the top (and
 * above the base) it reads zeros: ZERO, allocated.
 */
gboolean copy_plan_layers_status(CopyPlan *p, uint64_t offset, uint64_t len,
                                 QimgExtent *ext, GError **err)
{
    QimgImage *layer = p->src;

    *ext = (QimgExtent){.start = offset, .length = len};
    for (unsigned d = 0; d < p->top_layers && layer; d++, layer = layer->backing) {
        if (offset >= layer->node->size) {
            /* past the end of a layer above the base: reads zeros, which
             * QEMU's commit writes */
            ext->flags = QIMG_STATUS_ZERO | QIMG_STATUS_ALLOCATED;
            ext->depth = (int)d;
            return TRUE;
        }
        if (!api_block_status(layer, true, offset, MIN(len, layer->node->size - offset),
                              ext, err)) {
            return FALSE;
        }
        len = ext->length;
        if (ext->flags & QIMG_STATUS_ALLOCATED) {
            ext->depth = (int)d;
            return TRUE;
        }
    }
    ext->flags = 0; /* defined at or below the base: left alone */
    ext->length = len;
    return TRUE;
}

/*
 * Block status of the source: of the whole chain, or with top_only of its
 * top layer alone (fact 4), where what the layer leaves undefined reads as
 * zeros when nothing is below it or the offset is past the end of what is
 * below.
 */
static gboolean source_status(CopyPlan *p, uint64_t offset, uint64_t len, QimgExtent *ext,
                              GError **err)
{
    QimgImage *below;

    if (p->top_layers > 1) {
        return copy_plan_layers_status(p, offset, len, ext, err);
    }
    if (!api_block_status(p->src, p->top_only, offset, len, ext, err)) {
        return FALSE;
    }
    if (!p->top_only || p->mirror_writes ||
        (ext->flags & (QIMG_STATUS_ALLOCATED | QIMG_STATUS_ZERO | QIMG_STATUS_DATA))) {
        return TRUE; /* (a commit leaves what the top does not define) */
    }
    below = p->src->backing;
    if (!below || offset >= below->node->size) {
        ext->flags |= QIMG_STATUS_ZERO;
    } else {
        ext->length = MIN(ext->length, below->node->size - offset);
    }
    return TRUE;
}

/* Status of the source at the target's 'offset' and where it ends, in the
 * target's offsets (facts 1, 7). */
static gboolean next_status(CopyPlan *p, uint64_t offset, CopyKind *st, uint64_t *end,
                            GError **error)
{
    g_autoptr(GError) err = NULL;
    QimgExtent ext;
    uint64_t n, tail, at, src_size;

    while (p->cur + 1 < p->n_srcs && offset >= p->base + p->src->node->size) {
        select_source(p, p->cur + 1, p->base + p->src->node->size); /* fact 7 */
    }
    at = offset - p->base; /* the source's own offset */
    src_size = p->src->node->size;
    /* fact 5: a failing status is asked again for a quarter of the
     * sectors, down to one */
    uint64_t len = p->salvage ? MIN(src_size - at, REQUEST_MAX) : src_size - at;
    while (!source_status(p, at, len, &ext, &err)) {
        uint64_t sectors = DIV_ROUND_UP(len, COPY_SECTOR);
        if (p->salvage && sectors > 1) {
            g_clear_error(&err);
            len = MIN(DIV_ROUND_UP(sectors, 4) * COPY_SECTOR, src_size - at);
            continue;
        }
        if (p->salvage) { /* fact 5: read it, sector by sector if need be */
            g_autofree char *msg = g_strdup_printf(
                "error while reading block status at offset %" PRIu64 ": %s", at,
                g_strerror(err->code > 0 ? err->code : EIO));
            p->warn(p->warn_opaque, msg);
            *st = COPY_DATA;
            *end = p->base + MIN(at + COPY_SECTOR, src_size);
            return TRUE;
        }
        g_set_error(error, QIMG_ERROR, err->code,
                    "error while reading block status at offset %" PRIu64 ": %s", at,
                    err->message);
        return FALSE;
    }
    n = MIN(ext.length, src_size - at);
    if (n == 0) {
        g_set_error(error, QIMG_ERROR, EIO,
                    "error while reading block status at offset %" PRIu64, at);
        return FALSE;
    }
    n = (n + COPY_SECTOR - 1) / COPY_SECTOR * COPY_SECTOR;
    tail = (at + n) % p->src_align;
    if (n > tail) {
        n -= tail;
    }
    *end = p->base + MIN(at + n, src_size);
    if ((ext.flags & QIMG_STATUS_DATA) && p->mirror_writes) {
        *st = COPY_DATA; /* a commit copies data clusters, zero or not */
    } else if (ext.flags & QIMG_STATUS_ZERO) {
        bool past_backing = p->top_only && p->target_backing >= 0 &&
                            offset >= (uint64_t)p->target_backing;
        *st = past_backing ? COPY_BACKING : COPY_ZERO;
    } else if (ext.flags & QIMG_STATUS_DATA) {
        *st = COPY_DATA;
    } else {
        *st = p->target_has_backing ? COPY_BACKING : COPY_DATA;
    }
    return TRUE;
}

gboolean copy_plan_next(CopyPlan *p, CopyChunk *c, bool *more, GError **error)
{
    uint64_t n, end;

    *more = p->pos < p->size;
    if (!*more) {
        return FALSE;
    }
    if (p->mirror_writes) {
        return copy_plan_mirror_next(p, c, error);
    }
    if (p->compress) { /* fact 1: one cluster each */
        n = MIN((uint64_t)p->cluster, p->size - p->pos);
        /* fact 6: a status that covers the cluster is used again */
        if (p->pos >= p->status_end || p->status_end - p->pos < n) {
            if (!next_status(p, p->pos, &p->status, &p->status_end, error)) {
                return FALSE;
            }
        }
        end = p->status_end;
        c->kind = p->status;
        if (end - p->pos < n) {
            c->kind = COPY_DATA; /* a partly defined cluster is written whole */
        }
    } else {
        if (p->pos >= p->status_end &&
            !next_status(p, p->pos, &p->status, &p->status_end, error)) {
            return FALSE;
        }
        c->kind = p->status;
        n = MIN(p->status_end - p->pos, REQUEST_MAX);
        if (c->kind == COPY_DATA || (c->kind == COPY_ZERO && p->zeros_as_data)) {
            n = MIN(n, COPY_BUF_SIZE);
        }
    }
    c->offset = p->pos;
    c->len = n;
    p->pos += n;
    return TRUE;
}
