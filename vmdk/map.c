/*
 * vmdk/map.c: grain tables -- a bounded cache of them, and what a guest
 * offset maps to.
 *
 * Owns: VmdkGtCache (grain tables as read from the extent files, least
 * recently used first out) and the meaning of grain directory and grain
 * table entries (VMDK3/4: sector offsets, 0 unallocated, 1 zeroed with the
 * zero-grain flag; seSparse: typed 64-bit entries).
 *
 * Invariants (cited as "map.c invariant N"):
 *  1. The cache holds at most VMDK_GTC_BYTES of tables (vmdk.h
 *     invariant 3): a 64 TiB image is mapped with a few MiB.  It is used
 *     with the driver's lock held (vmdk.h invariant 4); a table is read
 *     under it.
 *  2. A cached table is the bytes on disk: a writer that changes an entry
 *     on disk changes the cached copy under the same lock
 *     (vmdk_gtc_update()).
 *  3. Every entry is validated before use: a grain directory entry beyond
 *     what the format allows, a seSparse entry of an unknown type, a grain
 *     whose offset overflows, are errors naming the extent and the guest
 *     offset (QEMU's VMDK_ERROR, which it reports as EIO).
 *  4. An answer covers whole grains of one kind inside one grain table and
 *     one extent; DATA runs are contiguous in the file; COMPRESSED answers
 *     are one grain, or with vmdk_map_grains() a run of up to max grains
 *     (anywhere in the file: each grain's offset is returned).
 *  5. A table changed by a write (vmdk_gt_set_locked) is dirty: it stays
 *     cached (never evicted) until vmdk_gt_writeback_locked() writes it,
 *     and its redundant copy, whole; write.c calls that only after the
 *     grains the new entries point at are durable (write.c invariant 1).
 *     At most VMDK_GTC_DIRTY_BYTES are dirty: past that the writer runs
 *     write.c's flush sequence.
 */
#include "vmdk/vmdk.h"

#include <errno.h>
#include <inttypes.h>

#define VMDK_GTC_BYTES (4u << 20)
#define VMDK_GTC_DIRTY_BYTES (2u << 20) /* then write.c's flush sequence runs */

typedef struct GtEntry {
    uint64_t key;
    GList link; /* in lru, data = this */
    size_t len;
    bool dirty;         /* invariant 5: pinned until written back */
    VmdkExtent *ext;    /* for the write-back */
    uint64_t gt_sector; /* where the table is */
    uint64_t backup;    /* where its redundant copy is, 0: none */
    uint8_t bytes[];
} GtEntry;

struct VmdkGtCache {
    GHashTable *map; /* key -> GtEntry */
    GQueue lru;      /* most recent at the head */
    size_t bytes;
    GPtrArray *dirty; /* GtEntry, in the order they became dirty */
    size_t dirty_bytes;
};

VmdkGtCache *vmdk_gtc_new(void)
{
    VmdkGtCache *c = g_new0(VmdkGtCache, 1);
    c->map = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, g_free);
    g_queue_init(&c->lru);
    c->dirty = g_ptr_array_new();
    return c;
}

void vmdk_gtc_free(VmdkGtCache *c)
{
    if (c) {
        g_ptr_array_unref(c->dirty);
        g_hash_table_destroy(c->map);
        g_free(c);
    }
}

static uint64_t gt_key(const VmdkExtent *ext, uint64_t gt_sector)
{
    /* gt_sector <= UINT32_MAX (map_gd), index < VMDK_MAX_EXTENTS */
    return (uint64_t)ext->index << 32 | gt_sector;
}

/* The table at gt_sector of ext (invariant 1). */
static int gtc_get(VmdkState *s, VmdkExtent *ext, uint64_t gt_sector, const uint8_t **out)
{
    VmdkGtCache *c = s->gtc;
    uint64_t key = gt_key(ext, gt_sector);
    size_t len = (size_t)ext->gtes * ext->entry_size;
    GtEntry *e = g_hash_table_lookup(c->map, &key);
    int ret;

    if (e) {
        g_queue_unlink(&c->lru, &e->link);
        g_queue_push_head_link(&c->lru, &e->link);
        *out = e->bytes;
        return 0;
    }
    /* invariant 1; invariant 5: dirty tables stay */
    for (GList *l = c->lru.tail; l && c->bytes + len > VMDK_GTC_BYTES;) {
        GtEntry *old = l->data;
        l = l->prev;
        if (old->dirty) {
            continue;
        }
        g_queue_unlink(&c->lru, &old->link);
        c->bytes -= old->len;
        g_hash_table_remove(c->map, &old->key);
    }
    e = g_malloc0(sizeof(*e) + len);
    e->key = key;
    e->len = len;
    e->ext = ext;
    e->gt_sector = gt_sector;
    e->link = (GList){.data = e};
    ret = blk_pread(ext->file, gt_sector * VMDK_SECTOR, e->bytes, len);
    if (ret < 0) {
        g_free(e);
        return blk_error_prefix(ret, "Could not read a grain table of '%s'",
                                ext->filename);
    }
    g_hash_table_insert(c->map, &e->key, e);
    g_queue_push_head_link(&c->lru, &e->link);
    c->bytes += len;
    *out = e->bytes;
    return 0;
}

int vmdk_gt_set_locked(VmdkState *s, VmdkExtent *ext, uint64_t off, uint32_t value)
{
    VmdkGtCache *c = s->gtc;
    uint64_t rel = off - ext->start, l1 = rel / ext->gt_cover, key;
    uint32_t idx = (uint32_t)(rel / ext->grain % ext->gtes);
    const uint8_t *gt;
    GtEntry *e;
    int ret;

    if (ext->sesparse || l1 >= ext->gd_entries) {
        return blk_error(EIO, "Cannot map offset %" PRIu64 " of extent '%s'", off,
                         ext->filename);
    }
    if (ext->gd[l1] == 0) {
        return blk_error(ENOTSUP,
                         "Cannot write offset %" PRIu64
                         " of '%s': its grain table is not "
                         "allocated",
                         off, ext->filename);
    }
    ret = gtc_get(s, ext, ext->gd[l1], &gt);
    if (ret < 0) {
        return ret;
    }
    key = gt_key(ext, ext->gd[l1]);
    e = g_hash_table_lookup(c->map, &key);
    store_le32(e->bytes + (size_t)idx * 4, value); /* invariant 2 */
    if (!e->dirty) {
        e->dirty = true;
        e->backup = ext->rgd && l1 < ext->gd_entries ? ext->rgd[l1] : 0;
        g_ptr_array_add(c->dirty, e);
        c->dirty_bytes += e->len;
    }
    if (c->dirty_bytes > VMDK_GTC_DIRTY_BYTES) {
        return vmdk_flush_sequence_locked(s);
    }
    return 0;
}

bool vmdk_gt_dirty_locked(const VmdkState *s)
{
    return s->gtc->dirty->len > 0;
}

int vmdk_gt_writeback_locked(VmdkState *s)
{
    VmdkGtCache *c = s->gtc;
    int ret = 0;

    for (guint i = 0; i < c->dirty->len && ret == 0; i++) {
        GtEntry *e = c->dirty->pdata[i];
        /* write.c invariant 1: the grains its entries point at are durable */
        blk_assert_durable(e->ext->file, e->ext->grain_gen, "vmdk/write.c invariant 1");
        blk_event(e->ext->file, BLKEV_L2_UPDATE);
        ret = blk_pwrite(e->ext->file, e->gt_sector * VMDK_SECTOR, e->bytes, e->len, 0);
        if (ret == 0 && e->backup) {
            ret = blk_pwrite(e->ext->file, e->backup * VMDK_SECTOR, e->bytes, e->len, 0);
        }
    }
    if (ret < 0) {
        return ret; /* the tables stay dirty: a later flush tries again */
    }
    for (guint i = 0; i < c->dirty->len; i++) {
        ((GtEntry *)c->dirty->pdata[i])->dirty = false;
    }
    g_ptr_array_set_size(c->dirty, 0);
    c->dirty_bytes = 0;
    return 0;
}

static int bad_entry(VmdkExtent *ext, uint64_t off, const char *what, uint64_t v)
{
    return blk_error(
        EIO, "Invalid %s entry 0x%" PRIx64 " for offset %" PRIu64 " of extent '%s'", what,
        v, off, ext->filename);
}

/* The sector of the grain table covering l1 (0: none). */
static int map_gd(VmdkExtent *ext, uint64_t l1, uint64_t off, uint64_t *gt_sector)
{
    uint64_t v = ext->gd[l1], idx, sector;

    if (!ext->sesparse) {
        *gt_sector = v; /* 32 bits on disk */
        return 0;
    }
    if (v == 0) {
        *gt_sector = 0;
        return 0;
    }
    /* invariant 3: an allocated seSparse table is 0x1000000_xxxxxxxx */
    if ((v & 0xffffffff00000000ull) != 0x1000000000000000ull) {
        return bad_entry(ext, off, "grain directory", v);
    }
    idx = v & 0xffffffffull;
    sector = ext->se_gts + idx * (ext->gtes * 8 / VMDK_SECTOR); /* < 2^32 * 65 */
    if (sector > UINT32_MAX) {
        return bad_entry(ext, off, "grain directory", v);
    }
    *gt_sector = sector;
    return 0;
}

/* One grain table entry: its kind and, for data, its byte offset. */
static int map_gte(VmdkExtent *ext, const uint8_t *gt, uint32_t i, uint64_t off,
                   VmdkMapKind *kind, uint64_t *host)
{
    uint64_t v, sector;

    if (!ext->sesparse) {
        v = load_le32(gt + (size_t)i * 4);
        if (v == 0) {
            *kind = VMDK_MAP_UNALLOC;
        } else if (ext->zero_grain && v == VMDK_GTE_ZEROED) {
            *kind = VMDK_MAP_ZERO;
        } else {
            *kind = ext->compressed ? VMDK_MAP_COMPRESSED : VMDK_MAP_DATA;
            *host = v * VMDK_SECTOR; /* v < 2^32 */
        }
        return 0;
    }
    v = load_le64(gt + (size_t)i * 8);
    switch (v >> 60) {
    case 0:
        if (v != 0) {
            return bad_entry(ext, off, "grain table", v);
        }
        *kind = VMDK_MAP_UNALLOC;
        return 0;
    case 1: /* unmapped */
    case 2: /* zeroed */
        *kind = VMDK_MAP_ZERO;
        return 0;
    case 3:
        sector =
            ((v & 0x0fff000000000000ull) >> 48) | ((v & 0x0000ffffffffffffull) << 12);
        if (vmdk_mul(sector, ext->grain / VMDK_SECTOR, &sector) ||
            vmdk_add(sector, ext->se_grains, &sector) ||
            sector > (uint64_t)INT64_MAX / VMDK_SECTOR) {
            return bad_entry(ext, off, "grain table", v);
        }
        *kind = VMDK_MAP_DATA;
        *host = sector * VMDK_SECTOR;
        return 0;
    default:
        return bad_entry(ext, off, "grain table", v);
    }
}

int vmdk_map(VmdkState *s, VmdkExtent *ext, uint64_t off, uint64_t bytes, VmdkMap *m)
{
    return vmdk_map_grains(s, ext, off, bytes, m, NULL, 1);
}

int vmdk_map_grains(VmdkState *s, VmdkExtent *ext, uint64_t off, uint64_t bytes,
                    VmdkMap *m, uint64_t *hosts, unsigned max)
{
    uint64_t rel = off - ext->start, limit = MIN(bytes, ext->end - off);
    uint64_t l1, in_grain, gt_sector = 0;
    uint32_t first;
    const uint8_t *gt = NULL;
    int ret;

    if (ext->flat) {
        m->kind = VMDK_MAP_DATA;
        m->host = ext->flat_offset + rel; /* vmdk.c: offset + size < 2^63 */
        m->bytes = limit;
        return 0;
    }
    /* extent.c: grain > 0, gtes > 0 */
    l1 = rel / ext->gt_cover;
    in_grain = rel % ext->grain;
    first = (uint32_t)(rel / ext->grain % ext->gtes);
    if (l1 >= ext->gd_entries) {
        return blk_error(EIO,
                         "Offset %" PRIu64 " of extent '%s' lies beyond its grain "
                         "directory",
                         off, ext->filename);
    }
    /* invariant 4: never past this table */
    limit = MIN(limit, ext->gt_cover - rel % ext->gt_cover);
    ret = map_gd(ext, l1, off, &gt_sector);
    if (ret < 0) {
        return ret;
    }
    if (gt_sector == 0) {
        *m = (VmdkMap){.kind = VMDK_MAP_UNALLOC, .bytes = limit};
        return 0;
    }
    ret = gtc_get(s, ext, gt_sector, &gt);
    if (ret < 0) {
        return ret;
    }
    ret = map_gte(ext, gt, first, off, &m->kind, &m->host);
    if (ret < 0) {
        return ret;
    }
    m->bytes = MIN(limit, ext->grain - in_grain);
    if (m->kind == VMDK_MAP_DATA) {
        m->host += in_grain;
    }
    unsigned grains = 1;
    if (hosts) {
        hosts[0] = m->host;
    }
    if (m->kind == VMDK_MAP_COMPRESSED && max <= 1) {
        return 0; /* invariant 4: one grain */
    }
    /* a bad entry further on is reported when a request reaches it */
    bool had_error = blk_error_mark();
    for (uint32_t i = first + 1; i < ext->gtes && m->bytes < limit; i++) {
        VmdkMapKind k;
        uint64_t host = 0;
        if (map_gte(ext, gt, i, off + m->bytes, &k, &host) < 0 || k != m->kind ||
            (k == VMDK_MAP_DATA && host != m->host + m->bytes)) {
            break;
        }
        if (k == VMDK_MAP_COMPRESSED) { /* invariant 4: max grains */
            if (grains == max) {
                break;
            }
            if (hosts) {
                hosts[grains] = host;
            }
            grains++;
        }
        m->bytes = MIN(limit, m->bytes + ext->grain);
    }
    blk_error_unwind(had_error);
    return 0;
}
