/*
 * vdi/vdi.c: the VirtualBox VDI format driver: dynamic and static images
 * of 1 MiB blocks; reads, guest writes, block status from the block map,
 * check as qemu-img has it, info.
 *
 * Owns: the open image's header (blocks_allocated is the next block's
 * index) and a bounded cache of the block map's pages.
 *
 * Invariants (cited as "vdi.c invariant N"):
 *  1. Open validates as QEMU 7.2 does, in its order and with its messages
 *     (signature, version 1.1, sector-aligned map and data offsets, 512-byte
 *     sectors, 1 MiB blocks, a map with room for the disk, no link or
 *     parent UUID, at most VDI_BLOCKS_MAX blocks); a disk size that is not
 *     a multiple of 512 is rounded up, as QEMU accepts it.
 *  2. The block map is never loaded whole: 4 KiB pages of it are cached
 *     (block/tcache.c).  An entry below VDI_DISCARDED is a block index;
 *     its data lies at offset_data + index * 1 MiB and reads there even
 *     past the end of the file (zeros), as QEMU reads it; other entries
 *     read as zeros.
 *  3. Allocation takes index blocks_allocated (which must stay below
 *     blocks_in_image), zeros whatever a crash left in the block, extends
 *     the file to the block's end and changes the header and map in memory,
 *     under the lock; the guest data is written after (the block reads as
 *     zeros meanwhile, as it did unallocated).  On disk
 *     (at a flush): data durable, then the header's blocks_allocated,
 *     durable, then the map pages, durable.  A power loss can thus leave
 *     the header counting blocks the map does not reference yet -- leaked
 *     blocks, which qemu-img check reports as "allocated blocks mismatch,
 *     is X, should be Y" with X < Y -- but never a map entry to a block the
 *     header would hand out again, nor to unwritten data.
 *  4. A write never lands on metadata: a block whose data overlaps the
 *     header or the block map is refused (EIO).
 *  5. A failed metadata write or flush is sticky (DESIGN.md rule 6).
 *  6. check reports what qemu-img check reports, with its messages: map
 *     entries past blocks_in_image, blocks used twice, and a header count
 *     that differs from the map's; it repairs nothing (-r is refused as
 *     qemu-img refuses it).
 */
#include "vdi/vdi.h"

#include "block/endian.h"
#include "block/mapped.h"
#include "aio/mutex.h"
#include "block/tcache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#define MAP_PAGE 4096u
#define MAP_CACHE_PAGES 64u /* 256 KiB: 64 GiB of guest blocks per fill */

typedef struct VdiState {
    GMutex lock;
    VdiHeader h;
    uint64_t map_bytes; /* blocks_in_image * 4 */
    BlkTCache *map;     /* invariant 2: key = byte offset in the map */
    bool header_dirty;
    int sticky; /* invariant 5 */
} VdiState;

static int map_read(void *opaque, uint64_t key, void *buf, size_t len)
{
    BlkNode *img = opaque;
    VdiState *s = img->opaque;
    size_t n = (size_t)MIN((uint64_t)len, s->map_bytes - key);

    memset(buf, 0xff, len);
    return blk_pread(img->file, (uint64_t)s->h.offset_bmap + key, buf, n);
}

static int vdi_flush_meta_locked(BlkNode *img);

static int map_writeback(void *opaque)
{
    return vdi_flush_meta_locked(opaque);
}

static int map_get(BlkNode *img, uint32_t block, uint32_t *entry)
{
    VdiState *s = img->opaque;
    uint64_t v = VDI_UNALLOCATED;
    int ret = block < s->h.blocks_in_image
                  ? blk_tcache_load(s->map, (uint64_t)block * 4, 4, false, &v)
                  : 0;

    *entry = (uint32_t)v;
    return ret < 0 ? blk_error_prefix(ret, "Could not read the VDI block map") : 0;
}

static int map_set(BlkNode *img, uint32_t block, uint32_t entry)
{
    VdiState *s = img->opaque;
    return blk_tcache_store(s->map, (uint64_t)block * 4, 4, false, entry);
}

static bool uuid_is_null(const uint8_t *u)
{
    static const uint8_t zero[16];
    return memcmp(u, zero, 16) == 0;
}

/* Invariant 1: QEMU's checks, in its order. */
static int check_header(VdiHeader *h)
{
    if (h->disk_size > VDI_DISK_SIZE_MAX) {
        return blk_error(ENOTSUP,
                         "Unsupported VDI image size (size is 0x%" PRIx64
                         ", max supported is 0x%" PRIx64 ")",
                         h->disk_size, VDI_DISK_SIZE_MAX);
    }
    h->disk_size = ROUND_UP(h->disk_size, VDI_SECTOR); /* VBoxManage makes odd sizes */
    if (h->signature != VDI_SIGNATURE) {
        return blk_error(EINVAL, "Image not in VDI format (bad signature %08" PRIx32 ")",
                         h->signature);
    }
    if (h->version != VDI_VERSION_1_1) {
        return blk_error(ENOTSUP,
                         "unsupported VDI image (version %" PRIu32 ".%" PRIu32 ")",
                         h->version >> 16, h->version & 0xffff);
    }
    if (h->offset_bmap % VDI_SECTOR != 0) {
        return blk_error(
            ENOTSUP, "unsupported VDI image (unaligned block map offset 0x%" PRIx32 ")",
            h->offset_bmap);
    }
    if (h->offset_data % VDI_SECTOR != 0) {
        return blk_error(ENOTSUP,
                         "unsupported VDI image (unaligned data offset 0x%" PRIx32 ")",
                         h->offset_data);
    }
    if (h->sector_size != VDI_SECTOR) {
        return blk_error(ENOTSUP,
                         "unsupported VDI image (sector size %" PRIu32 " is not %u)",
                         h->sector_size, VDI_SECTOR);
    }
    if (h->block_size != VDI_BLOCK_SIZE) {
        return blk_error(ENOTSUP,
                         "unsupported VDI image (block size %" PRIu32 " is not %u)",
                         h->block_size, VDI_BLOCK_SIZE);
    }
    if (h->disk_size > (uint64_t)h->blocks_in_image * h->block_size) {
        return blk_error(ENOTSUP,
                         "unsupported VDI image (disk size %" PRIu64
                         ", image bitmap has room for %" PRIu64 ")",
                         h->disk_size, (uint64_t)h->blocks_in_image * h->block_size);
    }
    if (!uuid_is_null(h->uuid_link)) {
        return blk_error(ENOTSUP, "unsupported VDI image (non-NULL link UUID)");
    }
    if (!uuid_is_null(h->uuid_parent)) {
        return blk_error(ENOTSUP, "unsupported VDI image (non-NULL parent UUID)");
    }
    if (h->blocks_in_image > VDI_BLOCKS_MAX) {
        return blk_error(ENOTSUP,
                         "unsupported VDI image (too many blocks %" PRIu32
                         ", max is %" PRIu32 ")",
                         h->blocks_in_image, VDI_BLOCKS_MAX);
    }
    return 0;
}

static void vdi_close(BlkNode *img);

static int vdi_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    uint8_t buf[VDI_HEADER_SIZE];
    VdiState *s = g_new0(VdiState, 1);
    BlkTCacheOps ops = {.read = map_read, .writeback = map_writeback, .opaque = img};
    int ret;

    g_mutex_init(&s->lock);
    img->opaque = s;
    if (opts->snapshot) {
        ret = blk_error(ENOTSUP, "Failed to load snapshot: Block format 'vdi' used by "
                                 "device '' does not support temporarily loading "
                                 "internal snapshots");
        goto fail;
    }
    ret = blk_pread(img->file, 0, buf, sizeof(buf));
    if (ret < 0) {
        goto fail;
    }
    vdi_header_decode(buf, &s->h);
    ret = check_header(&s->h);
    if (ret < 0) {
        goto fail;
    }
    img->size = s->h.disk_size;
    img->cluster_size = s->h.block_size;
    s->map_bytes = (uint64_t)s->h.blocks_in_image * 4;
    s->map = blk_tcache_new(MAP_PAGE, MAP_CACHE_PAGES, &ops);
    return 0;

fail:
    vdi_close(img);
    return ret;
}

static void vdi_close(BlkNode *img)
{
    VdiState *s = img->opaque;

    if (!s) {
        return;
    }
    if (!img->read_only && s->map) {
        bool had = blk_error_mark();
        mutex_lock(&s->lock);
        (void)vdi_flush_meta_locked(img);
        mutex_unlock(&s->lock);
        blk_error_unwind(had);
    }
    blk_tcache_free(s->map);
    g_mutex_clear(&s->lock);
    g_free(s);
    img->opaque = NULL;
}

static uint64_t block_offset(const VdiState *s, uint32_t entry)
{
    return (uint64_t)s->h.offset_data + (uint64_t)entry * s->h.block_size;
}

/* What guest bytes [offset, +max) are (block/mapped.c); invariant 2. */
static int vdi_map(BlkNode *img, uint64_t offset, uint64_t max, BlkMapping *m)
{
    VdiState *s = img->opaque;
    uint64_t in = offset % s->h.block_size;
    uint32_t entry;
    int ret;

    mutex_lock(&s->lock);
    ret = map_get(img, (uint32_t)(offset / s->h.block_size), &entry);
    mutex_unlock(&s->lock);
    m->len = MIN(max, s->h.block_size - in);
    m->kind = VDI_IS_ALLOCATED(entry) ? BLK_MAP_DATA : BLK_MAP_ZERO;
    m->file_offset = block_offset(s, entry) + in;
    return ret;
}

static int vdi_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    return blk_mapped_preadv(img, offset, qiov, vdi_map, NULL);
}

/* Invariant 4. */
static int check_block_area(VdiState *s, uint32_t block, uint64_t start)
{
    uint64_t end = start + s->h.block_size;
    uint64_t map_start = s->h.offset_bmap, map_end = map_start + s->map_bytes;

    if (start < VDI_HEADER_SIZE || (start < map_end && end > map_start)) {
        return blk_error(EIO,
                         "VDI block %" PRIu32 " at offset %" PRIu64
                         " overlaps the image's metadata; the image is corrupt",
                         block, start);
    }
    return 0;
}

/* Invariant 3: a new block for 'block' (caller holds the lock): stale
 * bytes below the old end of the file zeroed, the file extended over it,
 * then published in the map -- it reads zeros until the guest data lands. */
static int alloc_block_locked(BlkNode *img, uint32_t block, uint32_t *entry)
{
    VdiState *s = img->opaque;
    uint32_t index = s->h.blocks_allocated;
    uint64_t start = block_offset(s, index), end = start + s->h.block_size;
    uint64_t flen = (uint64_t)blk_getlength(img->file);
    int ret;

    if (index >= s->h.blocks_in_image) {
        return blk_error(EIO,
                         "The VDI header counts %" PRIu32 " allocated blocks of %" PRIu32
                         "; the image is corrupt",
                         index, s->h.blocks_in_image);
    }
    ret = check_block_area(s, block, start);
    if (ret == 0 && flen > start) {
        ret = blk_pwrite_zeroes(img->file, start, MIN(end, flen) - start, 0);
    }
    if (ret == 0 && (uint64_t)blk_getlength(img->file) < end) {
        ret = blk_truncate(img->file, end, false, BLK_PREALLOC_OFF, false);
    }
    if (ret == 0) {
        ret = map_set(img, block, index);
    }
    if (ret < 0) {
        return ret;
    }
    s->h.blocks_allocated++;
    s->header_dirty = true;
    *entry = index;
    return 0;
}

static int vdi_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    VdiState *s = img->opaque;
    unsigned wflags = flags & ~(unsigned)BLK_REQ_FUA;
    size_t done = 0;
    int ret = 0;

    while (done < qiov->size) {
        uint64_t pos = offset + done;
        uint32_t block = (uint32_t)(pos / s->h.block_size), entry = VDI_UNALLOCATED;
        uint32_t in = (uint32_t)(pos % s->h.block_size);
        size_t n = (size_t)MIN(qiov->size - done, s->h.block_size - in);
        BlkIOV part;

        iov_slice(&part, qiov, done, n);
        mutex_lock(&s->lock);
        ret = s->sticky ? s->sticky : map_get(img, block, &entry);
        if (ret == 0 && !VDI_IS_ALLOCATED(entry)) {
            ret = alloc_block_locked(img, block, &entry);
        }
        mutex_unlock(&s->lock);
        if (ret == 0) {
            ret = check_block_area(s, block, block_offset(s, entry));
        }
        if (ret == 0) { /* outside the lock: writes to other blocks run meanwhile */
            ret = blk_pwritev(img->file, block_offset(s, entry) + in, &part, wflags);
        }
        iov_destroy(&part);
        if (ret < 0) {
            return ret;
        }
        done += n;
    }
    if (flags & BLK_REQ_FUA) {
        mutex_lock(&s->lock);
        ret = vdi_flush_meta_locked(img);
        mutex_unlock(&s->lock);
    }
    return ret;
}

/* Invariant 3: data, header, map -- each durable before the next. */
static int vdi_flush_meta_locked(BlkNode *img)
{
    VdiState *s = img->opaque;
    uint8_t hbuf[VDI_HEADER_SIZE];
    g_autoptr(GArray) keys = NULL;
    int ret;

    if (s->sticky) {
        return s->sticky;
    }
    ret = blk_flush(img->file);
    if (ret < 0 || (!s->header_dirty && !blk_tcache_has_dirty(s->map))) {
        goto out;
    }
    if (s->header_dirty) {
        vdi_header_encode(&s->h, hbuf);
        ret = blk_pwrite(img->file, 0, hbuf, sizeof(hbuf), 0);
        if (ret == 0) {
            ret = blk_flush(img->file);
        }
        if (ret < 0) {
            goto out;
        }
        s->header_dirty = false;
    }
    keys = blk_tcache_dirty_keys(s->map);
    for (guint i = 0; i < keys->len && ret == 0; i++) {
        uint64_t key = g_array_index(keys, uint64_t, i);
        uint8_t *page = blk_tcache_peek(s->map, key);
        ret = page ? blk_pwrite(img->file, (uint64_t)s->h.offset_bmap + key, page,
                                (size_t)MIN((uint64_t)MAP_PAGE, s->map_bytes - key), 0)
                   : -EIO;
    }
    if (ret == 0) {
        ret = blk_flush(img->file);
    }
    if (ret == 0) {
        blk_tcache_clean(s->map);
    }
out:
    if (ret < 0) {
        s->sticky = ret;
    }
    return ret;
}

static int vdi_flush(BlkNode *img)
{
    VdiState *s = img->opaque;
    int ret;

    mutex_lock(&s->lock);
    ret = vdi_flush_meta_locked(img);
    mutex_unlock(&s->lock);
    return ret;
}

static int vdi_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    VdiState *s = img->opaque;
    int ret = blk_mapped_block_status(img, offset, bytes, vdi_map, st);

    if (ret == 0 && (st->flags & BLK_STATUS_DATA) && s->h.image_type == VDI_TYPE_STATIC) {
        /* QEMU asks the file whether a static image's block reads as zeros */
        BlkStatus fst;
        ret = blk_block_status(img->file, st->map, st->pnum, &fst);
        if (ret == 0) {
            st->pnum = fst.pnum;
            st->flags |= fst.flags & BLK_STATUS_ZERO;
        }
    }
    return ret;
}

#define CHECK_MAX_MESSAGES 1000u
#define CHECK_CHUNK (64u << 10)

typedef struct Check {
    BlkCheckResult *res;
    uint32_t n, count;
    uint8_t *used;
    unsigned messages, dropped;
} Check;

static void check_msg(Check *c, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void check_msg(Check *c, const char *fmt, ...)
{
    va_list ap;

    if (!c->res->messages || c->messages >= CHECK_MAX_MESSAGES) {
        c->dropped++;
        return;
    }
    va_start(ap, fmt);
    g_ptr_array_add(c->res->messages, g_strdup_vprintf(fmt, ap));
    va_end(ap);
    c->messages++;
}

/* One map entry (QEMU's check: the index printed twice, as QEMU does). */
static void check_entry(Check *c, uint32_t b, uint32_t e)
{
    if (!VDI_IS_ALLOCATED(e)) {
        return;
    }
    if (e >= c->n) {
        check_msg(c, "ERROR: block index %" PRIu32 " too large, is %" PRIu32, b, e);
        c->res->corruptions++;
        return;
    }
    c->count++;
    if (!(c->used[e / 8] & (1u << (e % 8)))) {
        c->used[e / 8] |= (uint8_t)(1u << (e % 8));
    } else {
        check_msg(c, "ERROR: block index %" PRIu32 " also used by %" PRIu32, e, e);
        c->res->corruptions++;
    }
}

/* n map entries of 0 from entry first: the first is index 0, perhaps a
 * second use; the others are second uses, counted without a call each. */
static void check_zero_entries(Check *c, uint64_t first, uint64_t n)
{
    uint64_t again, kept = 0;

    if (n == 0) {
        return;
    }
    check_entry(c, (uint32_t)first, 0);
    again = n - 1;
    c->res->corruptions += (int64_t)again;
    c->count += (uint32_t)again;
    while (kept < again && c->messages < CHECK_MAX_MESSAGES) {
        check_msg(c, "ERROR: block index 0 also used by 0");
        kept++;
    }
    c->dropped += (unsigned)MIN(again - kept, (uint64_t)UINT32_MAX);
}

/* Invariant 6.  The map is read in chunks; its part past the end of the
 * file, and its holes in the file, read as zeros (as QEMU reads them),
 * entries all naming index 0, counted without reading them. */
static int vdi_check(BlkNode *img, BlkCheckResult *res, unsigned fix)
{
    VdiState *s = img->opaque;
    Check c = {.res = res, .n = s->h.blocks_in_image};
    uint64_t flen = (uint64_t)blk_getlength(img->file), in_file = 0;
    g_autofree uint8_t *buf = NULL;
    int ret = 0;

    if (fix) {
        res->unsupported = true;
        return blk_error(ENOTSUP, "This image format does not support checks");
    }
    c.used = g_try_malloc0(c.n / 8 + 1);
    if (!c.used) {
        res->check_errors++;
        return -ENOMEM;
    }
    buf = g_malloc(CHECK_CHUNK);
    mutex_lock(&s->lock);
    ret = vdi_flush_meta_locked(img); /* the map as the file holds it */
    mutex_unlock(&s->lock);
    if (flen > s->h.offset_bmap) {
        in_file = MIN(s->map_bytes, ROUND_DOWN(flen - s->h.offset_bmap, 4));
    }
    for (uint64_t pos = 0, len; pos < in_file && ret == 0; pos += len) {
        uint64_t at = (uint64_t)s->h.offset_bmap + pos;
        BlkStatus st;
        len = MIN((uint64_t)CHECK_CHUNK, in_file - pos);
        /* a hole of the map (a sparse file) is entries of 0: counted
         * without reading them, as the part past the end of the file */
        if (blk_block_status(img->file, at, len, &st) == 0 &&
            (st.flags & BLK_STATUS_ZERO) && ROUND_DOWN(st.pnum, 4) > 0) {
            len = ROUND_DOWN(MIN(st.pnum, in_file - pos), 4);
            check_zero_entries(&c, pos / 4, len / 4);
        } else {
            ret = blk_pread(img->file, at, buf, (size_t)len);
            for (size_t k = 0; ret == 0 && k + 4 <= len; k += 4) {
                check_entry(&c, (uint32_t)((pos + k) / 4), load_le32(buf + k));
            }
        }
        if (res->progress) {
            res->progress(res->progress_opaque, pos, s->map_bytes);
        }
    }
    if (ret < 0) {
        g_free(c.used);
        res->check_errors++;
        return ret;
    }
    /* entries of 0 past the file's end */
    check_zero_entries(&c, in_file / 4, (s->map_bytes - in_file) / 4);
    g_free(c.used);
    if (c.count != s->h.blocks_allocated) {
        check_msg(&c,
                  "ERROR: allocated blocks mismatch, is %" PRIu32 ", should be %" PRIu32,
                  c.count, s->h.blocks_allocated);
        res->corruptions++;
    }
    if (c.dropped && res->messages) {
        g_ptr_array_add(
            res->messages,
            g_strdup_printf("(%u further messages were not kept)", c.dropped));
    }
    return 0;
}

static int vdi_get_info(BlkNode *img, BlkInfo *info)
{
    VdiState *s = img->opaque;
    info->cluster_size = s->h.block_size;
    return 0;
}

static bool vdi_has_zero_init(BlkNode *img)
{
    VdiState *s = img->opaque;

    if (s->h.image_type == VDI_TYPE_STATIC) {
        return img->file->drv->has_zero_init && img->file->drv->has_zero_init(img->file);
    }
    return true;
}

static int vdi_probe(const uint8_t *buf, size_t len, const char *filename)
{
    return len >= VDI_HEADER_SIZE && load_le32(buf + VDI_H_SIGNATURE) == VDI_SIGNATURE
               ? 100
               : 0;
}

const BlkDriver blk_vdi_driver = {
    .format_name = "vdi",
    .probe = vdi_probe,
    .open = vdi_open,
    .close = vdi_close,
    .preadv = vdi_preadv,
    .pwritev = vdi_pwritev,
    .flush = vdi_flush,
    .block_status = vdi_block_status,
    .get_info = vdi_get_info,
    .check = vdi_check,
    .create = vdi_create,
    .measure = vdi_measure,
    .has_zero_init = vdi_has_zero_init,
    .file_role = BLK_ROLE_METADATA,
};
