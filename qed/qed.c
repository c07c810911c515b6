/*
 * qed/qed.c: the QED format driver (QEMU Enhanced Disk): reads with a
 * backing file, block status from the L1/L2 tables, check (and the repair
 * of qemu-img check -r), info.  qimg does not write QED images: guest
 * writes are refused, and so is creating one (qed/create.c; README).
 *
 * Owns: the open image's header and a bounded cache of its L1 and L2
 * tables' pages.
 *
 * Invariants (cited as "qed.c invariant N"):
 *  1. Open validates as QEMU 7.2 does, in its order and with its messages:
 *     magic, no unknown feature bit, a power-of-two cluster size of 4 KiB
 *     to 64 MiB, a power-of-two table size of 1 to 16 clusters, an image
 *     size that is a multiple of 512 within what the tables can map, an L1
 *     table inside the file (the file size rounded down to whole clusters),
 *     a header size that fits 32 bits, and a backing file name inside the
 *     header.
 *  2. The tables are never loaded whole: their 4 KiB pages are cached
 *     (block/tcache.c), the L1 table's as the L2 tables'.
 *  3. Reads as QEMU's: an L1 entry of 0, or an L2 entry of 0, reads the
 *     backing file (zeros without one); an L2 entry of 1 reads zeros; any
 *     other entry is a cluster offset that must be cluster-aligned, past
 *     the header and inside the file, and an L2 table must lie wholly
 *     inside the file -- else the read fails with an error naming it.
 *  4. check is qemu-img's: the L1 table's and every L2 table's clusters
 *     and every data cluster are referenced once (a second reference is a
 *     corruption, an invalid offset too), the clusters past the header
 *     that nothing references are leaks (counted over QEMU's rounding of
 *     the file size), allocated and fragmented clusters are counted.  A
 *     repair (-r) sets invalid entries to 0, makes that durable, then
 *     clears the need-check flag when nothing is left to fix.
 */
#include "qed/qed.h"

#include "block/endian.h"
#include "block/mapped.h"
#include "aio/mutex.h"
#include "block/tcache.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define PAGE 4096u
#define CACHE_PAGES 256u

typedef struct QedState {
    GMutex lock;
    QedHeader h;
    uint64_t file_size; /* rounded down to whole clusters, as QEMU */
    uint64_t nelems;    /* entries per table */
    BlkTCache *tables;  /* invariant 2: key = file offset of a page */
} QedState;

void qed_header_decode(const uint8_t buf[QED_HEADER_SIZE], QedHeader *h)
{
    h->magic = load_le32(buf + QED_H_MAGIC);
    h->cluster_size = load_le32(buf + QED_H_CLUSTER_SIZE);
    h->table_size = load_le32(buf + QED_H_TABLE_SIZE);
    h->header_size = load_le32(buf + QED_H_HEADER_SIZE);
    h->features = load_le64(buf + QED_H_FEATURES);
    h->compat_features = load_le64(buf + QED_H_COMPAT_FEATURES);
    h->autoclear_features = load_le64(buf + QED_H_AUTOCLEAR_FEATURES);
    h->l1_offset = load_le64(buf + QED_H_L1_OFFSET);
    h->image_size = load_le64(buf + QED_H_IMAGE_SIZE);
    h->backing_offset = load_le32(buf + QED_H_BACKING_OFFSET);
    h->backing_size = load_le32(buf + QED_H_BACKING_SIZE);
}

void qed_header_encode(const QedHeader *h, uint8_t buf[QED_HEADER_SIZE])
{
    store_le32(buf + QED_H_MAGIC, h->magic);
    store_le32(buf + QED_H_CLUSTER_SIZE, h->cluster_size);
    store_le32(buf + QED_H_TABLE_SIZE, h->table_size);
    store_le32(buf + QED_H_HEADER_SIZE, h->header_size);
    store_le64(buf + QED_H_FEATURES, h->features);
    store_le64(buf + QED_H_COMPAT_FEATURES, h->compat_features);
    store_le64(buf + QED_H_AUTOCLEAR_FEATURES, h->autoclear_features);
    store_le64(buf + QED_H_L1_OFFSET, h->l1_offset);
    store_le64(buf + QED_H_IMAGE_SIZE, h->image_size);
    store_le32(buf + QED_H_BACKING_OFFSET, h->backing_offset);
    store_le32(buf + QED_H_BACKING_SIZE, h->backing_size);
}

/* ---- offsets (invariant 3, QEMU's qed_check_*_offset) ---- */

static bool cluster_offset_ok(const QedState *s, uint64_t off)
{
    uint64_t header = (uint64_t)s->h.header_size * s->h.cluster_size;
    return off % s->h.cluster_size == 0 && off >= header && off < s->file_size;
}

static bool table_offset_ok(const QedState *s, uint64_t off)
{
    uint64_t end = off + (uint64_t)(s->h.table_size - 1) * s->h.cluster_size;
    if (end <= off) {
        return false; /* overflow -- and, as in QEMU, any table of one cluster */
    }
    return cluster_offset_ok(s, off) && cluster_offset_ok(s, end);
}

static int table_page_read(void *opaque, uint64_t key, void *buf, size_t len)
{
    BlkNode *img = opaque;
    return blk_pread(img->file, key, buf, len);
}

/* Entry i of the table at file offset table. */
static int entry(BlkNode *img, uint64_t table, uint64_t i, uint64_t *e)
{
    QedState *s = img->opaque;
    int ret = blk_tcache_load(s->tables, table + i * 8, 8, false, e);

    return ret < 0 ? blk_error_prefix(ret, "Could not read a QED table") : 0;
}

/* ---- open (invariant 1) ---- */

static uint64_t max_image_size(uint32_t cluster, uint32_t table)
{
    uint64_t entries = (uint64_t)table * cluster / 8;
    return entries * cluster * entries; /* at most 2^(26+4-3)*2^26*2^27: no wrap */
}

static int check_header(BlkNode *img, QedState *s)
{
    QedHeader *h = &s->h;
    uint64_t cs = h->cluster_size, ts = h->table_size;

    if (h->magic != QED_MAGIC) {
        return blk_error(EINVAL, "Image not in QED format");
    }
    if (h->features & ~(uint64_t)QED_F_KNOWN) {
        return blk_error(ENOTSUP, "Unsupported QED features: %" PRIx64,
                         h->features & ~(uint64_t)QED_F_KNOWN);
    }
    if (cs < QED_MIN_CLUSTER_SIZE || cs > QED_MAX_CLUSTER_SIZE || (cs & (cs - 1))) {
        return blk_error(EINVAL, "QED cluster size is invalid");
    }
    s->file_size = ROUND_DOWN(img->file->size, cs);
    if (ts < QED_MIN_TABLE_SIZE || ts > QED_MAX_TABLE_SIZE || (ts & (ts - 1))) {
        return blk_error(EINVAL, "QED table size is invalid");
    }
    if (h->image_size % 512 ||
        h->image_size > max_image_size(h->cluster_size, h->table_size)) {
        return blk_error(EINVAL, "QED image size is invalid");
    }
    if (!table_offset_ok(s, h->l1_offset)) {
        return blk_error(EINVAL, "QED table offset is invalid");
    }
    if (h->header_size > UINT32_MAX / h->cluster_size) {
        return blk_error(EINVAL, "QED header size is too large");
    }
    s->nelems = cs * ts / 8;
    return 0;
}

static int read_backing_name(BlkNode *img, QedState *s)
{
    QedHeader *h = &s->h;
    char name[QED_MAX_BACKING_NAME + 1];
    int ret;

    if ((uint64_t)h->backing_offset + h->backing_size >
        (uint64_t)h->cluster_size * h->header_size) {
        return blk_error(EINVAL, "QED backing filename offset is invalid");
    }
    if (h->backing_size > QED_MAX_BACKING_NAME) {
        return blk_error(EINVAL, "Failed to read backing filename");
    }
    ret = blk_pread(img->file, h->backing_offset, name, h->backing_size);
    if (ret < 0) {
        return blk_error_prefix(ret, "Failed to read backing filename");
    }
    name[h->backing_size] = '\0';
    if (name[0]) {
        img->backing_filename = g_strdup(name);
    }
    if (h->features & QED_F_BACKING_FORMAT_NO_PROBE) {
        img->backing_format = g_strdup("raw");
    }
    return 0;
}

static void qed_close(BlkNode *img)
{
    QedState *s = img->opaque;

    if (s) {
        blk_tcache_free(s->tables);
        g_mutex_clear(&s->lock);
        g_free(s);
        img->opaque = NULL;
    }
}

static int qed_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    QedState *s = g_new0(QedState, 1);
    BlkTCacheOps ops = {.read = table_page_read, .opaque = img};
    uint8_t buf[QED_HEADER_SIZE];
    int ret;

    g_mutex_init(&s->lock);
    img->opaque = s;
    if (opts->snapshot) {
        ret = blk_error(ENOTSUP, "Failed to load snapshot: Block format 'qed' used by "
                                 "device '' does not support temporarily loading "
                                 "internal snapshots");
        goto fail;
    }
    ret = blk_pread(img->file, 0, buf, sizeof(buf));
    if (ret < 0) {
        ret = blk_error_prefix(ret, "Failed to read QED header");
        goto fail;
    }
    qed_header_decode(buf, &s->h);
    ret = check_header(img, s);
    if (ret == 0 && (s->h.features & QED_F_BACKING_FILE)) {
        ret = read_backing_name(img, s);
    }
    if (ret < 0) {
        goto fail;
    }
    img->size = s->h.image_size;
    img->cluster_size = s->h.cluster_size;
    s->tables = blk_tcache_new(PAGE, CACHE_PAGES, &ops);
    return 0;

fail:
    qed_close(img);
    return ret;
}

/* ---- reads (invariant 3) ---- */

typedef enum { QED_DATA, QED_ZERO, QED_UNALLOC } QedKind;

/* What guest bytes [pos, +*n) are: a run of clusters of one kind (data:
 * contiguous in the file) within one L2 table; *n is cut to it. */
static int find(BlkNode *img, uint64_t pos, uint64_t *n, QedKind *kind, uint64_t *off)
{
    QedState *s = img->opaque;
    uint64_t cs = s->h.cluster_size, l2_span = cs * s->nelems;
    uint64_t l1i = pos / l2_span, l2i = pos % l2_span / cs, in = pos % cs;
    uint64_t l2 = 0, e = 0, first = 0;
    int ret = entry(img, s->h.l1_offset, l1i, &l2);

    *n = MIN(*n, l2_span - pos % l2_span);
    if (ret < 0) {
        return ret;
    }
    if (l2 == QED_UNALLOCATED) {
        *kind = QED_UNALLOC;
        return 0;
    }
    if (!table_offset_ok(s, l2)) {
        return blk_error(EINVAL,
                         "QED L1 entry %" PRIu64 " points to an invalid L2 table "
                         "offset %" PRIu64,
                         l1i, l2);
    }
    uint64_t want = DIV_ROUND_UP(in + *n, cs), count = 0;
    for (; count < want; count++) {
        if ((ret = entry(img, l2, l2i + count, &e)) < 0) {
            return ret;
        }
        QedKind k = e == QED_UNALLOCATED    ? QED_UNALLOC
                    : e == QED_ZERO_CLUSTER ? QED_ZERO
                                            : QED_DATA;
        if (k == QED_DATA && !cluster_offset_ok(s, e)) {
            if (count == 0) {
                return blk_error(EINVAL,
                                 "QED L2 entry %" PRIu64 " of the table at %" PRIu64
                                 " holds an invalid cluster offset %" PRIu64,
                                 l2i, l2, e);
            }
            break;
        }
        if (count == 0) {
            *kind = k;
            first = e;
        } else if (k != *kind || (k == QED_DATA && e != first + count * cs)) {
            break;
        }
    }
    *n = MIN(*n, count * cs - in);
    *off = *kind == QED_DATA ? first + in : 0;
    return 0;
}

/* block/mapped.c's lookup. */
static int qed_map(BlkNode *img, uint64_t offset, uint64_t max, BlkMapping *m)
{
    QedState *s = img->opaque;
    QedKind kind = QED_UNALLOC;
    int ret;

    m->len = max;
    mutex_lock(&s->lock);
    ret = find(img, offset, &m->len, &kind, &m->file_offset);
    mutex_unlock(&s->lock);
    m->kind = kind == QED_DATA   ? BLK_MAP_DATA
              : kind == QED_ZERO ? BLK_MAP_ZERO
                                 : BLK_MAP_BACKING;
    return ret;
}

static int qed_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    return blk_mapped_preadv(img, offset, qiov, qed_map, NULL);
}

static int qed_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    return blk_mapped_block_status(img, offset, bytes, qed_map, st);
}

/* ---- check (invariant 4) ---- */

typedef struct Check {
    BlkNode *img;
    BlkCheckResult *res;
    bool fix;
    uint64_t nclusters;
    uint8_t *used;
    GArray *fixes; /* uint64 file offsets of entries to set to 0 */
} Check;

static bool mark_used(Check *c, uint64_t off, uint64_t n)
{
    QedState *s = c->img->opaque;
    uint64_t cl = off / s->h.cluster_size;
    bool ok = true;

    for (; n-- > 0; cl++) {
        if (cl >= c->nclusters) {
            continue;
        }
        if (c->used[cl / 8] & (1u << (cl % 8))) {
            c->res->corruptions++;
            ok = false;
        }
        c->used[cl / 8] |= (uint8_t)(1u << (cl % 8));
    }
    return ok;
}

static void invalid(Check *c, uint64_t entry_off)
{
    if (c->fix) {
        g_array_append_val(c->fixes, entry_off);
        c->res->corruptions_fixed++;
    } else {
        c->res->corruptions++;
    }
}

static int check_l2(Check *c, uint64_t l2)
{
    QedState *s = c->img->opaque;
    uint64_t last = 0;

    for (uint64_t i = 0; i < s->nelems; i++) {
        uint64_t e = 0;
        int ret = entry(c->img, l2, i, &e);
        if (ret < 0) {
            return ret;
        }
        if (e == QED_UNALLOCATED || e == QED_ZERO_CLUSTER) {
            continue;
        }
        c->res->allocated_clusters++;
        if (last && last + s->h.cluster_size != e) {
            c->res->fragmented_clusters++;
        }
        last = e;
        if (!cluster_offset_ok(s, e)) {
            invalid(c, l2 + i * 8);
            continue;
        }
        mark_used(c, e, 1);
    }
    return 0;
}

static int write_fixes(Check *c)
{
    QedState *s = c->img->opaque;
    static const uint8_t zero[8];
    uint8_t hbuf[QED_HEADER_SIZE];
    int ret = 0;

    for (guint i = 0; i < c->fixes->len && ret == 0; i++) {
        ret = blk_pwrite(c->img->file, g_array_index(c->fixes, uint64_t, i), zero, 8, 0);
    }
    blk_tcache_drop(s->tables);
    if (ret == 0) {
        ret = blk_flush(c->img->file);
    }
    if (ret == 0 && c->res->corruptions == 0 && (s->h.features & QED_F_NEED_CHECK)) {
        s->h.features &= ~(uint64_t)QED_F_NEED_CHECK;
        qed_header_encode(&s->h, hbuf);
        ret = blk_pwrite(c->img->file, 0, hbuf, sizeof(hbuf), 0);
        if (ret == 0) {
            ret = blk_flush(c->img->file);
        }
    }
    return ret;
}

static int qed_check(BlkNode *img, BlkCheckResult *res, unsigned fix)
{
    QedState *s = img->opaque;
    uint64_t cs = s->h.cluster_size;
    /* QEMU's rounding of the file size to clusters (divides by cs - 1) */
    Check c = {img,  res, fix != 0, ROUND_DOWN(s->file_size + cs - 1, cs) / (cs - 1),
               NULL, NULL};
    int ret = 0;

    c.used = g_try_malloc0(c.nclusters / 8 + 1);
    if (!c.used) {
        return -ENOMEM;
    }
    c.fixes = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    res->total_clusters = (int64_t)DIV_ROUND_UP(s->h.image_size, cs);
    mutex_lock(&s->lock);
    mark_used(&c, s->h.l1_offset, s->h.table_size);
    for (uint64_t i = 0; i < s->nelems && ret == 0; i++) {
        uint64_t l2 = 0;
        if ((ret = entry(img, s->h.l1_offset, i, &l2)) < 0 || l2 == QED_UNALLOCATED) {
            continue;
        }
        if (!table_offset_ok(s, l2)) {
            invalid(&c, s->h.l1_offset + i * 8);
            continue;
        }
        if (!mark_used(&c, l2, s->h.table_size)) {
            continue; /* a table referenced twice is not walked again */
        }
        ret = check_l2(&c, l2);
        if (res->progress && i % 64 == 0) {
            res->progress(res->progress_opaque, i, s->nelems);
        }
    }
    if (ret == 0) { /* leaks only when everything was read */
        for (uint64_t cl = s->h.header_size; cl < c.nclusters; cl++) {
            res->leaks += !(c.used[cl / 8] & (1u << (cl % 8)));
        }
        if (c.fix) {
            ret = write_fixes(&c);
        }
    } else {
        res->check_errors++;
    }
    mutex_unlock(&s->lock);
    g_array_unref(c.fixes);
    g_free(c.used);
    return ret;
}

/* ---- info, probe ---- */

static int qed_get_info(BlkNode *img, BlkInfo *info)
{
    QedState *s = img->opaque;
    info->cluster_size = s->h.cluster_size;
    info->dirty = s->h.features & QED_F_NEED_CHECK;
    return 0;
}

static int qed_probe(const uint8_t *buf, size_t len, const char *filename)
{
    return len >= QED_HEADER_SIZE && load_le32(buf) == QED_MAGIC ? 100 : 0;
}

const BlkDriver blk_qed_driver = {
    .format_name = "qed",
    .probe = qed_probe,
    .open = qed_open,
    .close = qed_close,
    .preadv = qed_preadv,
    .block_status = qed_block_status,
    .get_info = qed_get_info,
    .check = qed_check,
    .create = qed_create,
    .file_role = BLK_ROLE_METADATA,
};
