/*
 * vpc/vpc.c: the VHD format driver (qemu-img's "vpc"): fixed, dynamic and
 * differencing disks; reads, guest writes into fixed and dynamic disks,
 * block status from the BAT, info.
 *
 * Owns: the open disk's footer, BAT cache (block/tcache.c, 4 KiB pages),
 * sector-bitmap cache (differencing disks), and the end of the file where
 * the next block goes (free_offset) with the footer copy behind it.
 *
 * Invariants (cited as "vpc.c invariant N"):
 *  1. Open validates as QEMU 7.2 does, with its messages: the footer (at 0
 *     for dynamic and differencing disks, at the end of a fixed one) and
 *     its checksum, the virtual size (vpc/codec.c invariant 2) below
 *     2040 GiB, the dynamic header's cookie, a power-of-two block size of
 *     at least 512, a BAT that covers the disk, and blocks that end inside
 *     the file.  Every sum of on-disk values is checked for overflow.
 *  2. The BAT is never loaded whole: its pages are read on demand into a
 *     bounded cache; open scans it once in 64 KiB chunks for the end of
 *     the last block (free_offset), as QEMU computes it.
 *  3. A dynamic disk reads as QEMU reads it: a block is all data (its
 *     sector bitmap is not consulted) or all zeros.  A differencing disk
 *     reads each sector from itself when its bitmap bit is set, else from
 *     the parent (zeros without one).
 *  4. Allocation (dynamic disks): a new block goes at free_offset, where
 *     the footer copy was: its bitmap (all ones, as QEMU writes it) is
 *     written first and any stale bytes a crash left in its data area are
 *     zeroed, under the lock; then the BAT entry changes in the cache
 *     (reads see it at once, and read zeros until the guest data, written
 *     after the lock is dropped, lands); on disk it is written by a flush, after
 *     the footer copy has been written behind the new end and the data,
 *     bitmap and footer were made durable.  A power loss therefore loses
 *     at most unflushed blocks, never points the BAT at unwritten space or
 *     past the end of the file (what QEMU refuses to open).
 *  5. A write never lands on metadata: a block whose data area overlaps
 *     the footer copy, the dynamic header or the BAT is refused (EIO).
 *  6. A failed metadata write or flush is sticky (DESIGN.md rule 6).
 *  7. The parent of a differencing disk is named by its locators
 *     (vpc/locator.c) and opened read-only as a vpc image; its footer's
 *     unique id must be the parent id the child records.
 */
#include "vpc/vpc.h"

#include "block/endian.h"
#include "block/mapped.h"
#include "aio/mutex.h"
#include "block/tcache.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#define BAT_PAGE 4096u
#define BAT_CACHE_PAGES 256u /* 1 MiB: 2 TiB of 2 MiB blocks */
#define SCAN_CHUNK (64u << 10)
#define BITMAP_CACHE_BYTES (4u << 20)

typedef struct VpcState {
    GMutex lock;
    VpcFooter footer;
    uint8_t footer_buf[VPC_FOOTER_SIZE]; /* as on disk */
    VpcDynHeader dyn;
    bool fixed, diff;
    uint32_t block_size, bitmap_size;
    uint32_t entries; /* max_table_entries */
    uint64_t bat_offset;
    uint64_t free_offset; /* invariant 4 */
    bool footer_dirty;    /* the copy at free_offset must be written */
    BlkTCache *bat;       /* invariant 2: key = byte offset in the BAT */
    BlkTCache *bitmaps;   /* differencing: key = file offset of a bitmap */
    int sticky;           /* invariant 6 */
} VpcState;

/* ---- the BAT (invariant 2) ---- */

static int bat_page_read(void *opaque, uint64_t key, void *buf, size_t len)
{
    BlkNode *img = opaque;
    VpcState *s = img->opaque;
    uint64_t table = (uint64_t)s->entries * 4;
    size_t n = (size_t)MIN((uint64_t)len, table - key);

    memset(buf, 0xff, len);
    return blk_pread(img->file, s->bat_offset + key, buf, n);
}

static int vpc_flush_meta_locked(BlkNode *img);

static int bat_writeback(void *opaque)
{
    return vpc_flush_meta_locked(opaque);
}

static int bat_get(BlkNode *img, uint32_t idx, uint32_t *entry)
{
    VpcState *s = img->opaque;
    uint64_t v = VPC_BAT_UNUSED;
    int ret =
        idx < s->entries ? blk_tcache_load(s->bat, (uint64_t)idx * 4, 4, true, &v) : 0;

    *entry = (uint32_t)v;
    return ret < 0
               ? blk_error_prefix(ret, "Could not read the VHD block allocation table")
               : 0;
}

static int bat_set(BlkNode *img, uint32_t idx, uint32_t entry)
{
    VpcState *s = img->opaque;
    return blk_tcache_store(s->bat, (uint64_t)idx * 4, 4, true, entry);
}

/* Sector bitmaps of a differencing disk (invariant 3). */
static int bitmap_read(void *opaque, uint64_t key, void *buf, size_t len)
{
    BlkNode *img = opaque;
    return blk_pread(img->file, key, buf, len);
}

/* ---- open (invariant 1) ---- */

static int read_footer(BlkNode *img, VpcState *s)
{
    uint8_t *b = s->footer_buf;
    int64_t len = blk_getlength(img->file);
    int ret = blk_pread(img->file, 0, b, VPC_FOOTER_SIZE);

    if (ret < 0) {
        return blk_error_prefix(ret, "Unable to read VHD header");
    }
    if (!vpc_has_cookie(b)) {
        if (len < VPC_FOOTER_SIZE) {
            return blk_error(EINVAL, "File too small for a VHD header");
        }
        ret = blk_pread(img->file, (uint64_t)len - VPC_FOOTER_SIZE, b, VPC_FOOTER_SIZE);
        if (ret < 0) {
            return ret;
        }
        vpc_footer_decode(b, &s->footer);
        if (!vpc_has_cookie(b) || s->footer.type != VPC_TYPE_FIXED) {
            return blk_error(EINVAL, "invalid VPC image");
        }
        s->fixed = true;
    } else {
        vpc_footer_decode(b, &s->footer);
    }
    if (vpc_checksum(b, VPC_FOOTER_SIZE, VPC_F_CHECKSUM) != s->footer.checksum) {
        return blk_error(EINVAL, "Incorrect header checksum");
    }
    return 0;
}

/* The end of the last block (QEMU's free_data_block_offset), scanning the
 * BAT in bounded chunks; entries past the end of the file read as zeros,
 * as QEMU reads them. */
static int scan_bat(BlkNode *img, VpcState *s)
{
    uint64_t table = (uint64_t)s->entries * 4, end,
             flen = (uint64_t)blk_getlength(img->file);
    g_autofree uint8_t *buf = g_malloc(SCAN_CHUNK);
    uint64_t per_block = (uint64_t)s->bitmap_size + s->block_size;

    if (__builtin_add_overflow(s->bat_offset, table, &end) || end > INT64_MAX - 511) {
        return blk_error(EINVAL, "Invalid VHD block allocation table offset");
    }
    s->free_offset = ROUND_UP(end, VPC_SECTOR);
    for (uint64_t pos = 0; pos < table; pos += SCAN_CHUNK) {
        size_t n = (size_t)MIN((uint64_t)SCAN_CHUNK, table - pos);
        if (s->bat_offset + pos >= flen) {
            /* the rest is zeros: entry 0, the block at offset 0 */
            s->free_offset = MAX(s->free_offset, per_block);
            break;
        }
        int ret = blk_pread(img->file, s->bat_offset + pos, buf, n);
        if (ret < 0) {
            return blk_error_prefix(ret, "Error reading pagetable");
        }
        for (size_t i = 0; i < n; i += 4) {
            uint32_t e = load_be32(buf + i);
            if (e != VPC_BAT_UNUSED) {
                s->free_offset =
                    MAX(s->free_offset, (uint64_t)e * VPC_SECTOR + per_block);
            }
        }
    }
    if (s->free_offset > flen) {
        return blk_error(EINVAL, "block-vpc: free_data_block_offset points after the end "
                                 "of file. The image has been truncated.");
    }
    return 0;
}

static int open_dynamic(BlkNode *img, VpcState *s)
{
    uint8_t buf[VPC_DYN_HEADER_SIZE];
    uint64_t total = img->size / VPC_SECTOR;
    int ret;

    if (s->footer.data_offset > INT64_MAX - VPC_DYN_HEADER_SIZE) {
        return blk_error(EINVAL, "Invalid header magic");
    }
    ret = blk_pread(img->file, s->footer.data_offset, buf, sizeof(buf));
    if (ret < 0) {
        return blk_error_prefix(ret, "Error reading dynamic VHD header");
    }
    vpc_dyn_header_decode(buf, &s->dyn);
    if (memcmp(s->dyn.cookie, "cxsparse", 8) != 0) {
        return blk_error(EINVAL, "Invalid header magic");
    }
    s->block_size = s->dyn.block_size;
    if (s->block_size < VPC_SECTOR || (s->block_size & (s->block_size - 1))) {
        return blk_error(EINVAL, "Invalid block size %" PRIu32, s->block_size);
    }
    s->bitmap_size = vpc_bitmap_size(s->block_size);
    s->entries = s->dyn.max_table_entries;
    if (total * VPC_SECTOR / s->block_size > 0xffffffffu) {
        return blk_error(EINVAL, "Too many blocks");
    }
    if ((uint64_t)s->entries * s->block_size < total * VPC_SECTOR) {
        return blk_error(EINVAL, "Page table too small");
    }
    if (s->entries > INT_MAX / 4) {
        return blk_error(EINVAL, "Max Table Entries too large (%d)", (int)s->entries);
    }
    s->bat_offset = s->dyn.table_offset;
    ret = scan_bat(img, s);
    if (ret < 0) {
        return ret;
    }
    s->diff = s->footer.type == VPC_TYPE_DIFFERENCING;
    if (s->diff) {
        unsigned pages = (unsigned)MAX(1u, BITMAP_CACHE_BYTES / s->bitmap_size);
        BlkTCacheOps bops = {.read = bitmap_read, .opaque = img};
        s->bitmaps = blk_tcache_new(s->bitmap_size, pages, &bops);
        ret = vpc_parent_name(img->file, &s->dyn, &img->backing_filename);
        if (ret < 0) {
            return ret;
        }
        img->backing_format = g_strdup("vpc");
    }
    BlkTCacheOps ops = {.read = bat_page_read, .writeback = bat_writeback, .opaque = img};
    s->bat = blk_tcache_new(BAT_PAGE, BAT_CACHE_PAGES, &ops);
    return 0;
}

/* Invariant 4: a read-write open repairs a footer copy a crash left out. */
static int check_end_footer(BlkNode *img, VpcState *s)
{
    uint8_t end[VPC_FOOTER_SIZE];
    int ret = blk_pread(img->file, s->free_offset, end, sizeof(end));

    if (ret < 0) {
        return ret;
    }
    s->footer_dirty = memcmp(end, s->footer_buf, VPC_FOOTER_SIZE) != 0;
    return 0;
}

static void vpc_close(BlkNode *img);

static int vpc_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    VpcState *s = g_new0(VpcState, 1);
    uint64_t size;
    int ret;

    g_mutex_init(&s->lock);
    img->opaque = s;
    if (opts->snapshot) {
        ret = blk_error(ENOTSUP, "Failed to load snapshot: Block format 'vpc' used by "
                                 "device '' does not support temporarily loading "
                                 "internal snapshots");
        goto fail;
    }
    ret = read_footer(img, s);
    if (ret < 0) {
        goto fail;
    }
    size = vpc_virtual_size(&s->footer, opts->vpc_size_calc == BLK_VPC_SIZE_CHS,
                            opts->vpc_size_calc == BLK_VPC_SIZE_CURRENT);
    if (size / VPC_SECTOR > VPC_MAX_SECTORS) {
        ret = blk_error(EFBIG, "%s", g_strerror(EFBIG));
        goto fail;
    }
    img->size = size;
    if (!s->fixed) {
        ret = open_dynamic(img, s);
        if (ret < 0) {
            goto fail;
        }
        img->cluster_size = s->block_size;
        if (!img->read_only && !s->diff) {
            ret = check_end_footer(img, s);
            if (ret < 0) {
                goto fail;
            }
        }
    }
    return 0;

fail:
    vpc_close(img);
    return ret;
}

/* Invariant 7: the parent is the disk the child was made from. */
static int vpc_open_finish(BlkNode *img)
{
    VpcState *s = img->opaque;

    if (s->diff && img->backing && img->backing->drv == &blk_vpc_driver) {
        VpcState *p = img->backing->opaque;
        if (memcmp(p->footer.uuid, s->dyn.parent_uuid, 16) != 0) {
            return blk_error(EINVAL,
                             "The parent '%s' is not the disk this differencing disk "
                             "was made from (unique id mismatch)",
                             img->backing->filename);
        }
    }
    return 0;
}

static void vpc_close(BlkNode *img)
{
    VpcState *s = img->opaque;

    if (!s) {
        return;
    }
    if (!img->read_only && s->bat) {
        bool had = blk_error_mark();
        mutex_lock(&s->lock);
        (void)vpc_flush_meta_locked(img);
        mutex_unlock(&s->lock);
        blk_error_unwind(had);
    }
    blk_tcache_free(s->bat);
    blk_tcache_free(s->bitmaps);
    g_mutex_clear(&s->lock);
    g_free(s);
    img->opaque = NULL;
}

/* ---- reads (invariant 3) ---- */

/* The bitmap bit of sector 'sector' in block 'idx' at bitmap offset bmo:
 * the run of sectors from it with the same bit, up to max sectors. */
static int bitmap_run(BlkNode *img, uint64_t bmo, uint32_t sector, uint32_t max,
                      bool *set, uint32_t *run)
{
    VpcState *s = img->opaque;
    uint8_t *bm;
    int ret = blk_tcache_get(s->bitmaps, bmo, &bm);

    if (ret < 0) {
        return ret;
    }
    *set = bm[sector / 8] & (0x80 >> (sector % 8));
    for (*run = 1; *run < max; (*run)++) {
        uint32_t k = sector + *run;
        if (!!(bm[k / 8] & (0x80 >> (k % 8))) != *set) {
            break;
        }
    }
    return 0;
}

/* What guest bytes [offset, +max) are (block/mapped.c); invariant 3. */
static int vpc_map(BlkNode *img, uint64_t offset, uint64_t max, BlkMapping *m)
{
    VpcState *s = img->opaque;
    uint32_t idx = (uint32_t)(offset / s->block_size), entry;
    uint64_t in = offset % s->block_size;
    int ret;

    m->len = MIN(max, s->block_size - in);
    mutex_lock(&s->lock);
    ret = bat_get(img, idx, &entry);
    if (ret == 0 && entry == VPC_BAT_UNUSED) {
        m->kind = s->diff ? BLK_MAP_BACKING : BLK_MAP_ZERO;
    } else if (ret == 0) {
        uint64_t bmo = (uint64_t)entry * VPC_SECTOR;
        m->kind = BLK_MAP_DATA;
        m->file_offset = bmo + s->bitmap_size + in;
        if (s->diff) {
            uint32_t max_sec =
                (uint32_t)DIV_ROUND_UP(in % VPC_SECTOR + m->len, VPC_SECTOR);
            bool set = false;
            uint32_t run = 1;
            ret = bitmap_run(img, bmo, (uint32_t)(in / VPC_SECTOR), max_sec, &set, &run);
            m->len = MIN(m->len, (uint64_t)run * VPC_SECTOR - in % VPC_SECTOR);
            m->kind = set ? BLK_MAP_DATA : BLK_MAP_BACKING;
        }
    }
    mutex_unlock(&s->lock);
    return ret;
}

static int vpc_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    VpcState *s = img->opaque;

    if (s->fixed) {
        return blk_preadv(img->file, offset, qiov, flags);
    }
    return blk_mapped_preadv(img, offset, qiov, vpc_map, NULL);
}

/* ---- writes (invariants 4-6) ---- */

/* Invariant 5: the data area of a block at bitmap offset bmo. */
static int check_block_area(BlkNode *img, uint32_t idx, uint64_t bmo)
{
    VpcState *s = img->opaque;
    uint64_t start = bmo + s->bitmap_size, end = start + s->block_size;
    uint64_t bat_end = s->bat_offset + (uint64_t)s->entries * 4;
    uint64_t hdr = s->footer.data_offset;

    if (start < VPC_FOOTER_SIZE || (start < bat_end && end > s->bat_offset) ||
        (start < hdr + VPC_DYN_HEADER_SIZE && end > hdr)) {
        return blk_error(EIO,
                         "VHD block %" PRIu32 " at offset %" PRIu64
                         " overlaps the image's metadata; the image is corrupt",
                         idx, bmo);
    }
    return 0;
}

/* Invariant 4: a new block for idx at free_offset; its bitmap offset. */
static int alloc_block_locked(BlkNode *img, uint32_t idx, uint64_t *bmo)
{
    VpcState *s = img->opaque;
    uint64_t b = s->free_offset, end = b + s->bitmap_size + s->block_size;
    uint64_t flen = (uint64_t)blk_getlength(img->file);
    g_autofree uint8_t *bitmap = NULL;
    int ret;

    if (b / VPC_SECTOR > 0xfffffffeu || end + VPC_FOOTER_SIZE > INT64_MAX) {
        return blk_error(ENOSPC, "The VHD file cannot grow past 2 TiB");
    }
    bitmap = g_malloc(MAX(s->bitmap_size, 1u)); /* QEMU's blocks under 4 KiB have none */
    memset(bitmap, 0xff, s->bitmap_size);
    ret = s->bitmap_size ? blk_pwrite(img->file, b, bitmap, s->bitmap_size, 0) : 0;
    if (ret == 0 && flen > b + VPC_FOOTER_SIZE) {
        /* stale bytes a crash left behind the old end (invariant 4) */
        uint64_t zs = b + s->bitmap_size, ze = MIN(flen, end);
        if (ze > zs) {
            ret = blk_pwrite_zeroes(img->file, zs, ze - zs, 0);
        }
    }
    if (ret == 0) {
        ret = bat_set(img, idx, (uint32_t)(b / VPC_SECTOR));
    }
    if (ret < 0) {
        s->sticky = ret;
        return ret;
    }
    s->free_offset = end;
    s->footer_dirty = true;
    *bmo = b;
    return 0;
}

static int vpc_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    VpcState *s = img->opaque;
    size_t done = 0;

    if (s->fixed) {
        return blk_pwritev(img->file, offset, qiov, flags);
    }
    if (s->diff) {
        return blk_error(ENOTSUP, "qimg does not write into VHD differencing disks");
    }
    while (done < qiov->size) {
        uint64_t pos = offset + done;
        uint32_t idx = (uint32_t)(pos / s->block_size), entry = VPC_BAT_UNUSED;
        size_t n = (size_t)MIN(qiov->size - done, s->block_size - pos % s->block_size);
        uint64_t bmo = 0;
        BlkIOV part;
        int ret;

        mutex_lock(&s->lock);
        ret = s->sticky ? s->sticky : bat_get(img, idx, &entry);
        if (ret == 0 && entry == VPC_BAT_UNUSED) {
            ret = alloc_block_locked(img, idx, &bmo); /* invariant 4 */
        } else if (ret == 0) {
            bmo = (uint64_t)entry * VPC_SECTOR;
        }
        mutex_unlock(&s->lock);
        if (ret == 0) {
            ret = check_block_area(img, idx, bmo);
        }
        if (ret == 0) {
            iov_slice(&part, qiov, done, n);
            ret = blk_pwritev(img->file, bmo + s->bitmap_size + pos % s->block_size,
                              &part, flags & ~(unsigned)BLK_REQ_FUA);
            iov_destroy(&part);
        }
        if (ret < 0) {
            return ret;
        }
        done += n;
    }
    if (flags & BLK_REQ_FUA) {
        mutex_lock(&s->lock);
        int ret = vpc_flush_meta_locked(img);
        mutex_unlock(&s->lock);
        return ret;
    }
    return 0;
}

/* Invariant 4: footer copy and data durable, then the BAT, then durable. */
static int vpc_flush_meta_locked(BlkNode *img)
{
    VpcState *s = img->opaque;
    g_autoptr(GArray) keys = NULL;
    int ret;

    if (s->sticky) {
        return s->sticky;
    }
    if (s->footer_dirty) {
        ret = blk_pwrite(img->file, s->free_offset, s->footer_buf, VPC_FOOTER_SIZE, 0);
        if (ret < 0) {
            goto fail;
        }
    }
    ret = blk_flush(img->file);
    if (ret < 0 || !s->bat || !blk_tcache_has_dirty(s->bat)) {
        if (ret == 0) {
            s->footer_dirty = false;
        }
        goto fail;
    }
    keys = blk_tcache_dirty_keys(s->bat);
    for (guint i = 0; i < keys->len; i++) {
        uint64_t key = g_array_index(keys, uint64_t, i);
        uint64_t table = (uint64_t)s->entries * 4;
        uint8_t *page;
        page = blk_tcache_peek(s->bat, key);
        ret = -EIO;
        if (page) {
            ret = blk_pwrite(img->file, s->bat_offset + key, page,
                             (size_t)MIN((uint64_t)BAT_PAGE, table - key), 0);
        }
        if (ret < 0) {
            goto fail;
        }
    }
    ret = blk_flush(img->file);
    if (ret == 0) {
        blk_tcache_clean(s->bat);
        s->footer_dirty = false;
    }
fail:
    if (ret < 0) {
        s->sticky = ret;
    }
    return ret;
}

static int vpc_flush(BlkNode *img)
{
    VpcState *s = img->opaque;
    int ret;

    mutex_lock(&s->lock);
    ret = s->fixed ? blk_flush(img->file) : vpc_flush_meta_locked(img);
    mutex_unlock(&s->lock);
    return ret;
}

/* ---- block status, info ---- */

/* A fixed disk: data where the file has it, zeros where it has holes. */
static int status_fixed(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    int ret = blk_block_status(img->file, offset, bytes, st);

    if (ret < 0) {
        return ret;
    }
    st->flags = BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID |
                (st->flags & BLK_STATUS_ZERO ? BLK_STATUS_ZERO : 0);
    st->map = offset;
    st->file = img->file;
    return 0;
}

static int vpc_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    VpcState *s = img->opaque;

    if (s->fixed) {
        return status_fixed(img, offset, bytes, st);
    }
    return blk_mapped_block_status(img, offset, bytes, vpc_map, st);
}

static int vpc_get_info(BlkNode *img, BlkInfo *info)
{
    VpcState *s = img->opaque;

    if (!s->fixed) {
        info->cluster_size = s->block_size;
    }
    return 0;
}

static bool vpc_has_zero_init(BlkNode *img)
{
    VpcState *s = img->opaque;

    if (s->fixed) {
        return img->file->drv->has_zero_init && img->file->drv->has_zero_init(img->file);
    }
    return true;
}

static int vpc_probe(const uint8_t *buf, size_t len, const char *filename)
{
    return len >= 8 && vpc_has_cookie(buf) ? 100 : 0;
}

const BlkDriver blk_vpc_driver = {
    .format_name = "vpc",
    .probe = vpc_probe,
    .open = vpc_open,
    .open_finish = vpc_open_finish,
    .close = vpc_close,
    .preadv = vpc_preadv,
    .pwritev = vpc_pwritev,
    .flush = vpc_flush,
    .block_status = vpc_block_status,
    .get_info = vpc_get_info,
    .create = vpc_create,
    .measure = vpc_measure,
    .has_zero_init = vpc_has_zero_init,
    .file_role = BLK_ROLE_METADATA,
};
