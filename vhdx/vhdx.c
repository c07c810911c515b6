/*
 * vhdx/vhdx.c: the VHDX format driver: dynamic, fixed and differencing
 * disks with 512- and 4096-byte logical sectors and 1-256 MiB blocks;
 * reads, guest writes into dynamic and fixed disks, block status from the
 * BAT, check as qemu-img has it, info.
 *
 * Owns: the open image's headers, regions, BAT cache and sector bitmap
 * cache; the metadata is meta.c's, the log log.c's.
 *
 * Invariants (cited as "vhdx.c invariant N"):
 *  1. Open follows QEMU 7.2's order -- signature, headers, log, region
 *     table, metadata, BAT -- and its rules: the current header is the
 *     valid one with the higher sequence number (two valid headers with
 *     the same number must be identical); regions must not overlap the
 *     log or each other; the BAT and metadata regions are required and
 *     unique, and an unknown required region refuses the open.
 *  2. Everything read at open or later goes through the log's in-memory
 *     replay when a read-only open has one (vhdx_file_read, log.c
 *     invariant 3): a dirty log is read as if replayed.
 *  3. The BAT is never loaded whole: 4 KiB pages are cached; at open it is
 *     scanned in 64 KiB chunks, as QEMU checks it (unless the open is for
 *     check): a fully present block must start and end inside the file and
 *     must not overlap the header section, the log, the BAT or the
 *     metadata region.
 *  4. Reads: a fully present block reads from the file; a partially
 *     present one (differencing disks) per sector, from the file where its
 *     sector bitmap bit is set (bit n of byte k is sector 8k + n of the
 *     chunk), else from the parent; not present reads the parent (zeros
 *     without one); zero, unmapped and undefined blocks read as zeros.  A
 *     partially present block in a disk without a parent, or an unknown
 *     state, is an I/O error naming the block.
 *  5. Allocation (dynamic disks): a new block goes at the end of the file
 *     rounded up to 1 MiB and the file is extended over it (so it reads as
 *     zeros), under the lock; the guest data is written after; the BAT entry
 *     (fully present) changes in the cache at once and reaches the disk at
 *     a flush, through the log (log.c invariant 5), after the data is
 *     durable.  A power loss thus loses at most unflushed writes.
 *  6. A failed metadata update or flush is sticky (DESIGN.md rule 6).
 *  7. Header updates write the non-current header (sequence number one
 *     higher, the session's file write GUID, a new data write GUID at the
 *     session's first update) and make it durable before it counts.
 *  8. A differencing disk's parent is the VHDX its locator names, opened
 *     read-only; when the locator records parent_linkage, it must be the
 *     parent's data write GUID.  Writes into differencing disks are
 *     refused (ENOTSUP).
 */
#include "vhdx/vhdx.h"

#include "block/endian.h"
#include "block/mapped.h"
#include "aio/mutex.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define BAT_PAGE 4096u
#define BAT_CACHE_PAGES 256u
#define BITMAP_CACHE_PAGES 256u
#define SCAN_CHUNK (64 * VHDX_KIB)

int vhdx_file_read(BlkNode *img, uint64_t offset, void *buf, size_t len)
{
    VhdxState *s = img->opaque;
    int ret = blk_pread(img->file, offset, buf, len);

    if (ret == 0 && s->overlay) { /* invariant 2 */
        ret = vhdx_overlay_patch(img, offset, buf, len);
    }
    return ret;
}

/* A guest read of file bytes into q (through the overlay, invariant 2). */
static int file_readv(BlkNode *img, uint64_t offset, const BlkIOV *q)
{
    VhdxState *s = img->opaque;

    if (!s->overlay) {
        return blk_preadv(img->file, offset, q, 0);
    }
    g_autofree uint8_t *buf = g_malloc(q->size);
    int ret = vhdx_file_read(img, offset, buf, q->size);
    if (ret == 0) {
        iov_from_buf(q, 0, buf, q->size);
    }
    return ret;
}

/* ---- headers (invariants 1, 7) ---- */

int vhdx_update_header(BlkNode *img, const VhdxGuid *log_guid)
{
    VhdxState *s = img->opaque;
    int other = 1 - s->cur;
    VhdxHeader h = s->hdr[s->cur];
    uint8_t buf[VHDX_HEADER_SIZE];
    int ret;

    h.sequence++;
    h.file_write_guid = s->session;
    if (!s->wrote_header) {
        vhdx_guid_random(&h.data_write_guid);
    }
    h.log_guid = *log_guid;
    vhdx_header_encode(&h, buf);
    ret = blk_pwrite(img->file, other ? VHDX_HEADER2_OFFSET : VHDX_HEADER1_OFFSET, buf,
                     sizeof(buf), 0);
    if (ret == 0) {
        ret = blk_flush(img->file);
    }
    if (ret < 0) {
        s->sticky = ret;
        return ret;
    }
    s->hdr[other] = h;
    s->cur = other;
    s->wrote_header = true;
    return 0;
}

static int read_headers(BlkNode *img, VhdxState *s)
{
    uint8_t buf[VHDX_HEADER_SIZE];
    bool valid[2];

    for (int i = 0; i < 2; i++) {
        int ret = blk_pread(img->file, i ? VHDX_HEADER2_OFFSET : VHDX_HEADER1_OFFSET, buf,
                            sizeof(buf));
        if (ret < 0) {
            return ret;
        }
        valid[i] = vhdx_header_decode(buf, &s->hdr[i]) && s->hdr[i].version == 1;
    }
    if (valid[0] && valid[1]) {
        if (s->hdr[0].sequence == s->hdr[1].sequence &&
            memcmp(&s->hdr[0], &s->hdr[1], sizeof(VhdxHeader)) != 0) {
            return blk_error(EINVAL, "No valid VHDX header found");
        }
        s->cur = s->hdr[1].sequence > s->hdr[0].sequence;
    } else if (valid[0] || valid[1]) {
        s->cur = valid[1];
    } else {
        return blk_error(EINVAL, "No valid VHDX header found");
    }
    return 0;
}

/* ---- regions (invariant 1) ---- */

static int add_span(VhdxState *s, uint64_t start, uint64_t len, const char *what)
{
    uint64_t end;

    if (__builtin_add_overflow(start, len, &end) || end > INT64_MAX) {
        return blk_error(EINVAL, "VHDX %s at offset %" PRIu64 " overflows", what, start);
    }
    for (unsigned i = 0; i < s->nspans; i++) {
        if (start < s->spans[i].end && end > s->spans[i].start) {
            return blk_error(EINVAL,
                             "VHDX region %" PRIu64 "-%" PRIu64
                             " overlaps with region %" PRIu64 "-%" PRIu64,
                             start, end, s->spans[i].start, s->spans[i].end);
        }
    }
    s->spans[s->nspans++] = (VhdxSpan){start, end, what};
    return 0;
}

static int read_regions(BlkNode *img, VhdxState *s)
{
    g_autofree uint8_t *buf = g_malloc(VHDX_REGION_TABLE_SIZE);
    g_autofree VhdxRegion *r = g_new(VhdxRegion, VHDX_MAX_REGIONS);
    bool bat = false, meta = false;
    uint32_t n = 0;
    int ret;

    for (int t = 0; t < 2; t++) { /* the second copy when the first is damaged */
        ret = vhdx_file_read(img, t ? VHDX_REGION2_OFFSET : VHDX_REGION1_OFFSET, buf,
                             VHDX_REGION_TABLE_SIZE);
        if (ret < 0) {
            return ret;
        }
        if (vhdx_region_table_decode(buf, r, &n)) {
            break;
        }
        if (t == 1) {
            return blk_error(EINVAL, "No valid VHDX region table found");
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        bool is_bat = vhdx_guid_equal(&r[i].guid, &vhdx_guid_bat);
        bool is_meta = vhdx_guid_equal(&r[i].guid, &vhdx_guid_metadata);
        if (!is_bat && !is_meta) {
            if (r[i].flags & VHDX_REGION_REQUIRED) {
                return blk_error(ENOTSUP,
                                 "The VHDX image requires a region qimg does not know");
            }
            continue;
        }
        if ((is_bat && bat) || (is_meta && meta)) {
            return blk_error(EINVAL, "The VHDX region table names the %s region twice",
                             is_bat ? "BAT" : "metadata");
        }
        ret = add_span(s, r[i].offset, r[i].length, is_bat ? "BAT" : "metadata region");
        if (ret < 0) {
            return ret;
        }
        if (is_bat) {
            s->bat_rt = r[i];
            bat = true;
        } else {
            s->meta_rt = r[i];
            meta = true;
        }
    }
    if (!bat || !meta) {
        return blk_error(EINVAL, "The VHDX region table lacks the %s region",
                         bat ? "metadata" : "BAT");
    }
    return 0;
}

/* ---- the BAT (invariant 3) ---- */

static int bat_page_read(void *opaque, uint64_t key, void *buf, size_t len)
{
    BlkNode *img = opaque;
    VhdxState *s = img->opaque;
    return vhdx_file_read(img, s->bat_rt.offset + key, buf, len);
}

static int vhdx_flush_meta_locked(BlkNode *img);

static int bat_writeback(void *opaque)
{
    return vhdx_flush_meta_locked(opaque);
}

static int bat_get(BlkNode *img, uint64_t idx, uint64_t *entry)
{
    VhdxState *s = img->opaque;
    int ret;

    *entry = 0;
    ret = idx < s->bat_entries ? blk_tcache_load(s->bat, idx * 8, 8, false, entry) : 0;
    return ret < 0 ? blk_error_prefix(ret, "Could not read the VHDX BAT") : 0;
}

static int bat_set(BlkNode *img, uint64_t idx, uint64_t entry)
{
    VhdxState *s = img->opaque;
    return blk_tcache_store(s->bat, idx * 8, 8, false, entry);
}

/* The problem with BAT entry i, if any (invariant 3; QEMU's messages). */
static char *bat_entry_problem(BlkNode *img, uint64_t i, uint64_t e, bool payload)
{
    VhdxState *s = img->opaque;
    uint64_t flen = (uint64_t)blk_getlength(img->file), off = vhdx_bat_offset(e),
             total = img->size;
    uint64_t len = i * s->block_size < total
                       ? MIN(s->block_size, total - i * s->block_size)
                       : s->block_size;

    if (vhdx_bat_state(e) != VHDX_PAYLOAD_FULLY_PRESENT) {
        return NULL;
    }
    if (off >= flen) {
        return g_strdup_printf("VHDX BAT entry %" PRIu64 " start offset %" PRIu64
                               " points after end of file (%" PRIu64
                               "). Image has probably been truncated.",
                               i, off, flen);
    }
    if (off + len > flen) {
        return g_strdup_printf("VHDX BAT entry %" PRIu64 " end offset %" PRIu64
                               " points after end of file (%" PRIu64
                               "). Image has probably been truncated.",
                               i, off + len - 1, flen);
    }
    for (unsigned k = 0; payload && k < s->nspans; k++) {
        if (off < s->spans[k].end && off + s->block_size > s->spans[k].start) {
            return g_strdup_printf("VHDX BAT entry %" PRIu64 " at offset %" PRIu64
                                   " overlaps the %s",
                                   i, off, s->spans[k].what);
        }
    }
    return NULL;
}

/* Every entry checked, in bounded chunks; each problem reported to fn
 * (which returns false to stop). */
static int scan_bat(BlkNode *img, bool (*fn)(void *opaque, char *problem), void *opaque)
{
    VhdxState *s = img->opaque;
    g_autofree uint8_t *buf = g_malloc(SCAN_CHUNK);
    uint64_t bytes = s->bat_entries * 8;

    for (uint64_t pos = 0; pos < bytes; pos += SCAN_CHUNK) {
        size_t n = (size_t)MIN((uint64_t)SCAN_CHUNK, bytes - pos);
        int ret = vhdx_file_read(img, s->bat_rt.offset + pos, buf, n);
        if (ret < 0) {
            return ret;
        }
        for (size_t k = 0; k < n; k += 8) {
            uint64_t i = (pos + k) / 8;
            bool payload = i % (s->chunk_ratio + 1) != s->chunk_ratio;
            char *p = bat_entry_problem(img, i, load_le64(buf + k), payload);
            if (p && !fn(opaque, p)) {
                return -EINVAL;
            }
        }
    }
    return 0;
}

static bool fail_open(void *opaque, char *problem)
{
    blk_error(EINVAL, "%s", problem);
    g_free(problem);
    return false;
}

static void vhdx_close(BlkNode *img);

static int open_image(BlkNode *img, const BlkOpenOptions *opts)
{
    VhdxState *s = img->opaque;
    uint8_t sig[8];
    int ret = blk_pread(img->file, 0, sig, sizeof(sig));

    if (ret < 0) {
        return ret;
    }
    if (memcmp(sig, "vhdxfile", 8) != 0) {
        return blk_error(EINVAL, "Image is not in VHDX format (no 'vhdxfile' signature)");
    }
    vhdx_guid_random(&s->session);
    if ((ret = read_headers(img, s)) < 0 || (ret = vhdx_log_open(img)) < 0) {
        return ret;
    }
    s->spans[s->nspans++] = (VhdxSpan){0, VHDX_HEADER_SECTION_END, "header section"};
    if (s->hdr[s->cur].log_length) {
        ret = add_span(s, s->hdr[s->cur].log_offset, s->hdr[s->cur].log_length, "log");
    }
    if (ret < 0 || (ret = read_regions(img, s)) < 0 ||
        (ret = vhdx_parse_metadata(img)) < 0) {
        return ret;
    }
    if (s->bat_entries > s->bat_rt.length / 8) {
        return blk_error(EINVAL,
                         "The VHDX BAT region (%" PRIu32
                         " bytes) is too small for %" PRIu64 " entries",
                         s->bat_rt.length, s->bat_entries);
    }
    img->size = s->disk_size;
    img->cluster_size = s->block_size;
    BlkTCacheOps ops = {.read = bat_page_read, .writeback = bat_writeback, .opaque = img};
    s->bat = blk_tcache_new(BAT_PAGE, BAT_CACHE_PAGES, &ops);
    return opts->check_mode ? 0 : scan_bat(img, fail_open, NULL);
}

static int bitmap_read(void *opaque, uint64_t key, void *buf, size_t len)
{
    return vhdx_file_read(opaque, key, buf, len);
}

static int vhdx_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    VhdxState *s = g_new0(VhdxState, 1);
    int ret;

    g_mutex_init(&s->lock);
    img->opaque = s;
    if (opts->snapshot) {
        ret = blk_error(ENOTSUP, "Failed to load snapshot: Block format 'vhdx' used by "
                                 "device '' does not support temporarily loading "
                                 "internal snapshots");
    } else {
        ret = open_image(img, opts);
    }
    if (ret == 0 && s->has_parent) {
        BlkTCacheOps bops = {.read = bitmap_read, .opaque = img};
        s->bitmaps = blk_tcache_new(BAT_PAGE, BITMAP_CACHE_PAGES, &bops);
    }
    if (ret < 0) {
        vhdx_close(img);
    }
    return ret;
}

/* Invariant 8. */
static int vhdx_open_finish(BlkNode *img)
{
    VhdxState *s = img->opaque;

    if (s->has_linkage && img->backing && img->backing->drv == &blk_vhdx_driver) {
        VhdxState *p = img->backing->opaque;
        if (!vhdx_guid_equal(&p->hdr[p->cur].data_write_guid, &s->parent_linkage)) {
            return blk_error(EINVAL,
                             "The parent '%s' is not the disk this differencing disk was "
                             "made from (parent_linkage mismatch)",
                             img->backing->filename);
        }
    }
    return 0;
}

static void vhdx_close(BlkNode *img)
{
    VhdxState *s = img->opaque;

    if (!s) {
        return;
    }
    if (!img->read_only && s->bat) {
        bool had = blk_error_mark();
        mutex_lock(&s->lock);
        (void)vhdx_flush_meta_locked(img);
        mutex_unlock(&s->lock);
        blk_error_unwind(had);
    }
    blk_tcache_free(s->bat);
    blk_tcache_free(s->bitmaps);
    vhdx_overlay_free(s->overlay);
    g_mutex_clear(&s->lock);
    g_free(s);
    img->opaque = NULL;
}

/* ---- reads (invariant 4) ---- */

/* Where bytes [offset, +*n) of the guest come from (caller holds the
 * lock); *n is cut to what one answer covers. */
static int locate(BlkNode *img, uint64_t offset, uint64_t *n, BlkMapKind *src,
                  uint64_t *foff)
{
    VhdxState *s = img->opaque;
    uint64_t b = offset / s->block_size, in = offset % s->block_size, e;
    int ret = bat_get(img, vhdx_payload_index(s, b), &e);

    if (ret < 0) {
        return ret;
    }
    *n = MIN(*n, s->block_size - in);
    switch (vhdx_bat_state(e)) {
    case VHDX_PAYLOAD_FULLY_PRESENT:
        if (vhdx_bat_offset(e) < VHDX_HEADER_SECTION_END) {
            return blk_error(EIO,
                             "VHDX block %" PRIu64 " points into the header section; "
                             "the image is corrupt",
                             b);
        }
        *src = BLK_MAP_DATA;
        *foff = vhdx_bat_offset(e) + in;
        return 0;
    case VHDX_PAYLOAD_NOT_PRESENT:
        *src = s->has_parent ? BLK_MAP_BACKING : BLK_MAP_ZERO;
        return 0;
    case VHDX_PAYLOAD_UNDEFINED:
    case VHDX_PAYLOAD_ZERO:
    case VHDX_PAYLOAD_UNMAPPED:
    case VHDX_PAYLOAD_UNMAPPED_V095:
        *src = BLK_MAP_ZERO;
        return 0;
    case VHDX_PAYLOAD_PARTIALLY_PRESENT:
        break;
    default:
        return blk_error(EIO,
                         "VHDX BAT entry of block %" PRIu64 " has the invalid state %u",
                         b, vhdx_bat_state(e));
    }
    if (!s->has_parent) {
        return blk_error(EIO,
                         "VHDX block %" PRIu64 " is partially present in a disk "
                         "without a parent",
                         b);
    }
    uint64_t sb;
    if ((ret = bat_get(img, vhdx_bitmap_index(s, b), &sb)) < 0) {
        return ret;
    }
    if (vhdx_bat_state(sb) != VHDX_SB_PRESENT ||
        vhdx_bat_offset(sb) < VHDX_HEADER_SECTION_END) {
        return blk_error(EIO, "VHDX block %" PRIu64 " has no sector bitmap", b);
    }
    uint64_t lss = s->logical_sector, spb = s->block_size / lss;
    uint64_t bit = (b % s->chunk_ratio) * spb + in / lss;
    uint64_t max = DIV_ROUND_UP(in % lss + *n, lss), run = 0;
    bool set = false;
    for (; run < max; run++) {
        uint64_t k = bit + run, addr = vhdx_bat_offset(sb) + k / 8;
        uint8_t *page;
        if ((ret = blk_tcache_get(s->bitmaps, ROUND_DOWN(addr, BAT_PAGE), &page)) < 0) {
            return ret;
        }
        bool v = page[addr % BAT_PAGE] & (1u << (k % 8));
        if (run == 0) {
            set = v;
        } else if (v != set) {
            break;
        }
    }
    *n = MIN(*n, run * lss - in % lss);
    *src = set ? BLK_MAP_DATA : BLK_MAP_BACKING;
    *foff = vhdx_bat_offset(e) + in;
    return 0;
}

/* block/mapped.c's lookup. */
static int vhdx_map(BlkNode *img, uint64_t offset, uint64_t max, BlkMapping *m)
{
    VhdxState *s = img->opaque;
    int ret;

    m->len = max;
    mutex_lock(&s->lock);
    ret = locate(img, offset, &m->len, &m->kind, &m->file_offset);
    mutex_unlock(&s->lock);
    return ret;
}

static int vhdx_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    VhdxState *s = img->opaque;
    return blk_mapped_preadv(img, offset, qiov, vhdx_map, s->overlay ? file_readv : NULL);
}

/* ---- writes (invariants 5, 6) ---- */

static int alloc_block_locked(BlkNode *img, uint64_t b, uint64_t *foff)
{
    VhdxState *s = img->opaque;
    uint64_t start = ROUND_UP((uint64_t)blk_getlength(img->file), VHDX_MIB);
    int ret;

    if (start > (uint64_t)INT64_MAX - s->block_size || start >> 20 >= UINT64_C(1) << 44) {
        return blk_error(ENOSPC, "The VHDX file cannot grow any further");
    }
    ret = blk_truncate(img->file, start + s->block_size, false, BLK_PREALLOC_OFF, false);
    if (ret == 0) {
        ret = bat_set(img, vhdx_payload_index(s, b),
                      vhdx_bat_make(start, VHDX_PAYLOAD_FULLY_PRESENT));
    }
    *foff = start;
    return ret;
}

static int vhdx_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    VhdxState *s = img->opaque;
    unsigned wflags = flags & ~(unsigned)BLK_REQ_FUA;
    int ret = 0;

    if (s->has_parent) {
        return blk_error(ENOTSUP, "qimg does not write into VHDX differencing disks");
    }
    for (size_t done = 0; done < qiov->size;) {
        uint64_t pos = offset + done, b = pos / s->block_size, in = pos % s->block_size;
        uint64_t n = MIN(qiov->size - done, s->block_size - in), e = 0, foff = 0;
        BlkIOV part;

        iov_slice(&part, qiov, done, n);
        mutex_lock(&s->lock);
        ret = s->sticky ? s->sticky : bat_get(img, vhdx_payload_index(s, b), &e);
        if (ret == 0 && vhdx_bat_state(e) == VHDX_PAYLOAD_PARTIALLY_PRESENT) {
            ret = blk_error(EIO,
                            "VHDX block %" PRIu64 " is partially present in a "
                            "disk without a parent",
                            b);
        } else if (ret == 0 && vhdx_bat_state(e) != VHDX_PAYLOAD_FULLY_PRESENT) {
            ret = alloc_block_locked(img, b, &foff); /* invariant 5: reads zeros */
        } else if (ret == 0) {
            foff = vhdx_bat_offset(e);
        }
        mutex_unlock(&s->lock);
        if (ret == 0 && foff < VHDX_HEADER_SECTION_END) {
            ret = blk_error(EIO,
                            "VHDX block %" PRIu64 " points into the header section; "
                            "the image is corrupt",
                            b);
        }
        if (ret == 0) { /* outside the lock: writes to other blocks run meanwhile */
            ret = blk_pwritev(img->file, foff + in, &part, wflags);
        }
        iov_destroy(&part);
        if (ret < 0) {
            return ret;
        }
        done += n;
    }
    if (flags & BLK_REQ_FUA) {
        mutex_lock(&s->lock);
        ret = vhdx_flush_meta_locked(img);
        mutex_unlock(&s->lock);
    }
    return ret;
}

/* Invariant 5: data durable, then the dirty BAT pages through the log. */
static int vhdx_flush_meta_locked(BlkNode *img)
{
    VhdxState *s = img->opaque;
    g_autoptr(GArray) keys = NULL;
    g_autofree uint64_t *offs = NULL;
    g_autofree uint8_t **pages = NULL;
    int ret;

    if (s->sticky) {
        return s->sticky;
    }
    ret = blk_flush(img->file);
    if (ret < 0 || !blk_tcache_has_dirty(s->bat)) {
        goto out;
    }
    keys = blk_tcache_dirty_keys(s->bat);
    offs = g_new(uint64_t, keys->len);
    pages = g_new(uint8_t *, keys->len);
    for (guint i = 0; i < keys->len; i++) {
        uint64_t key = g_array_index(keys, uint64_t, i);
        offs[i] = s->bat_rt.offset + key;
        pages[i] = blk_tcache_peek(s->bat, key);
    }
    ret = vhdx_log_commit(img, offs, pages, keys->len);
    if (ret == 0) {
        blk_tcache_clean(s->bat);
    }
out:
    if (ret < 0) {
        s->sticky = ret;
    }
    return ret;
}

static int vhdx_flush(BlkNode *img)
{
    VhdxState *s = img->opaque;
    int ret;

    mutex_lock(&s->lock);
    ret = vhdx_flush_meta_locked(img);
    mutex_unlock(&s->lock);
    return ret;
}

/* ---- block status, check, info ---- */

static int vhdx_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    return blk_mapped_block_status(img, offset, bytes, vhdx_map, st);
}

#define CHECK_MAX_MESSAGES 1000u

typedef struct Check {
    BlkCheckResult *res;
    unsigned kept, dropped;
} Check;

static bool count_problem(void *opaque, char *problem)
{
    Check *c = opaque;

    c->res->corruptions++;
    if (c->res->messages && c->kept < CHECK_MAX_MESSAGES) {
        g_ptr_array_add(c->res->messages, g_strdup_printf("error: %s", problem));
        c->kept++;
    } else {
        c->dropped++;
    }
    g_free(problem);
    return true;
}

/* qemu-img check: a replayed log is a fixed corruption, BAT entries
 * outside the file or over metadata are corruptions (at most
 * CHECK_MAX_MESSAGES of them named); nothing is repaired beyond the
 * replay. */
static int vhdx_check(BlkNode *img, BlkCheckResult *res, unsigned fix)
{
    VhdxState *s = img->opaque;
    Check c = {.res = res};
    int ret;

    if (s->replayed) {
        res->corruptions_fixed++;
        s->replayed = false; /* the double check does not count it again */
    }
    mutex_lock(&s->lock);
    ret = scan_bat(img, count_problem, &c);
    mutex_unlock(&s->lock);
    if (c.dropped && res->messages) {
        g_ptr_array_add(
            res->messages,
            g_strdup_printf("(%u further messages were not kept)", c.dropped));
    }
    if (ret < 0) {
        res->check_errors++;
    }
    return ret;
}

static int vhdx_get_info(BlkNode *img, BlkInfo *info)
{
    VhdxState *s = img->opaque;
    info->cluster_size = s->block_size;
    return 0;
}

static bool vhdx_has_zero_init(BlkNode *img)
{
    VhdxState *s = img->opaque;
    uint64_t e = 0;

    mutex_lock(&s->lock);
    int ret = bat_get(img, 0, &e);
    mutex_unlock(&s->lock);
    if (ret == 0 && vhdx_bat_state(e) == VHDX_PAYLOAD_FULLY_PRESENT) { /* fixed */
        return img->file->drv->has_zero_init && img->file->drv->has_zero_init(img->file);
    }
    blk_error_clear();
    return true;
}

static int vhdx_probe(const uint8_t *buf, size_t len, const char *filename)
{
    return len >= 8 && memcmp(buf, "vhdxfile", 8) == 0 ? 100 : 0;
}

const BlkDriver blk_vhdx_driver = {
    .format_name = "vhdx",
    .probe = vhdx_probe,
    .open = vhdx_open,
    .open_finish = vhdx_open_finish,
    .close = vhdx_close,
    .preadv = vhdx_preadv,
    .pwritev = vhdx_pwritev,
    .flush = vhdx_flush,
    .block_status = vhdx_block_status,
    .get_info = vhdx_get_info,
    .check = vhdx_check,
    .create = vhdx_create,
    .measure = vhdx_measure,
    .has_zero_init = vhdx_has_zero_init,
    .file_role = BLK_ROLE_METADATA,
};
