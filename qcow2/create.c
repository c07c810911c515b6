/*
 * qcow2/create.c: creating qcow2 images (qemu-img create -f qcow2).
 *
 * Owns: the qcow2 create options (compat, cluster_size, refcount_bits,
 * lazy_refcounts, compression_type, extended_l2, preallocation, data_file,
 * data_file_raw, backing_file, backing_fmt), their checks with qemu-img's
 * messages, and the layout of a fresh image.
 *
 * A fresh image must be byte-for-byte the image qemu-img 7.2 writes, so
 * that `cmp` is the test.  What qemu-img does, learnt by running it and
 * reading its documentation (no QEMU code is used here):
 *
 *   a. It writes cluster 0 (a header for size 0), then clusters 1 and 2: a
 *      one-cluster refcount table whose entry 0 points at cluster 2, and an
 *      empty refcount block.
 *   b. It allocates clusters 0..2 through its normal cluster allocator.
 *   c. It writes the full header (extensions: backing format, data file
 *      name, and for v3 with clusters > 4 KiB the feature name table).
 *   d. It resizes the image from 0 to the requested size: the L1 table is
 *      allocated with exactly size_to_l1(size) entries and written with
 *      exactly that many bytes (so the file usually ends inside a cluster).
 *      preallocation=metadata then allocates L2 tables and data clusters
 *      guest-cluster by guest-cluster; falloc/full first build refcount
 *      structures past the end of the file for everything to come, then
 *      take the data clusters there and let the L2 tables fall wherever the
 *      allocator puts them (the old refcount table, freed, is reused).
 *   e. It sets the backing file (another full header write).
 *
 * The allocator's choices shape the layout: first fit from a "free index"
 * that only moves backwards when a cluster is freed or an allocation must be
 * retried; refcount blocks that describe themselves when they are placed in
 * the range they cover; a refcount table that, when too small, is replaced
 * by a bigger one placed after everything else, with the old one freed.  So
 * this file replays those rules on an in-memory model (struct Layout) and
 * writes what they produce.
 *
 * Invariants (cited as "create.c invariant N"):
 *  1. Every option is checked before anything is laid out, in qemu-img's
 *     order, so a command with several faults reports qemu-img's first one.
 *  2. On any failure after the image file (and the data file) were created
 *     they are removed again, as qemu-img does; a regular file that existed
 *     before is gone too (qemu-img truncates and then deletes it).
 *  3. The file extents written equal qemu-img's: every table is written
 *     with the same offset and length (header, refcount tables and blocks
 *     and L2 tables as whole clusters, the L1 table with its exact length),
 *     a replaced refcount table is written before anything can reuse its
 *     clusters, and the file is extended or preallocated at the same moment
 *     (the model tracks where qemu-img's file would end: Layout.eof).
 *  4. Metadata is kept in memory only until it is written at a checkpoint;
 *     memory stays bounded by the tables of one L2 slice plus the refcount
 *     blocks and the L1 table (<= 32 MiB).
 *  5. Power loss (DESIGN.md rules 1-2): until the final header is written
 *     the file has no qcow2 magic (cluster 0 holds zeros), and everything
 *     the header names -- refcount table and blocks, L1 and L2 tables,
 *     preallocated data and the file size -- is flushed before it is
 *     written.  A crash leaves either no image or a complete one.
 */
#include "qcow2/qcow2.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INV_OFFSET UINT64_MAX
#define CREATE_MAX_REFTABLE_ENTRIES (UINT64_C(8) * 1024 * 1024) /* QEMU's limit */
/* Largest request QEMU's block layer makes: INT_MAX rounded down to 512. */
#define CREATE_MAX_REQUEST ((uint64_t)INT_MAX & ~UINT64_C(511))
/* Refcount blocks kept in memory before they are written and dropped. */
#define CREATE_REFBLOCK_CACHE_BYTES (UINT64_C(64) * 1024 * 1024)

/* ---- parameters ---- */

typedef struct CreateParams {
    int version;
    uint64_t cluster_size;
    uint32_t cluster_bits;
    uint32_t refcount_order;
    bool lazy_refcounts;
    bool extended_l2;
    uint8_t compression_type;
    BlkPrealloc prealloc;
    const char *data_file;
    bool data_file_raw;
    const char *backing_file;
    const char *backing_format;
    uint64_t size;
} CreateParams;

/* QEMU's block driver names (BlockdevDriver), accepted as backing_fmt. */
static const char *const backing_drivers[] = {
    "blkdebug",
    "blklogwrites",
    "blkreplay",
    "blkverify",
    "bochs",
    "cloop",
    "compress",
    "copy-before-write",
    "copy-on-read",
    "dmg",
    "file",
    "snapshot-access",
    "ftp",
    "ftps",
    "gluster",
    "host_cdrom",
    "host_device",
    "http",
    "https",
    "io_uring",
    "iscsi",
    "luks",
    "nbd",
    "nfs",
    "null-aio",
    "null-co",
    "nvme",
    "nvme-io_uring",
    "parallels",
    "preallocate",
    "qcow",
    "qcow2",
    "qed",
    "quorum",
    "raw",
    "rbd",
    "replication",
    "ssh",
    "throttle",
    "vdi",
    "vhdx",
    "virtio-blk-vfio-pci",
    "virtio-blk-vhost-user",
    "virtio-blk-vhost-vdpa",
    "vmdk",
    "vpc",
    "vvfat",
};

static const char *const known_options[] = {
    "compat",           "cluster_size", "refcount_bits", "lazy_refcounts",
    "compression_type", "extended_l2",  "preallocation", "data_file",
    "data_file_raw",    "backing_file", "backing_fmt",   "size",
};

static const char *opt_get(const BlkCreateOptions *opts, const char *key)
{
    return opts->options ? g_hash_table_lookup(opts->options, key) : NULL;
}

static bool opt_bool(const BlkCreateOptions *opts, const char *key)
{
    const char *v = opt_get(opts, key);
    return v && (strcmp(v, "on") == 0 || strcmp(v, "true") == 0 ||
                 strcmp(v, "yes") == 0 || strcmp(v, "y") == 0);
}

static int bad_value(const char *param, const char *value)
{
    blk_error(EINVAL, "Parameter '%s' does not accept value '%s'", param, value);
    return -EINVAL;
}

static int parse_number(const char *s, uint64_t *out)
{
    char *end;

    if (!s || !*s || strchr(s, '-')) {
        return -EINVAL;
    }
    errno = 0;
    *out = g_ascii_strtoull(s, &end, 0);
    return (errno || *end) ? -EINVAL : 0;
}

static int param_error(const char *msg)
{
    blk_error(EINVAL, "%s", msg);
    return -EINVAL;
}

/*
 * Fill *p from opts (create.c invariant 1): first the checks of the option
 * types in qemu-img's visiting order, then its consistency checks.
 */
static int parse_params(const BlkCreateOptions *opts, CreateParams *p)
{
    const char *v;
    uint64_t n;

    memset(p, 0, sizeof(*p));
    if (opts->options) {
        GHashTableIter it;
        gpointer k;
        g_autoptr(GPtrArray) bad = g_ptr_array_new();

        g_hash_table_iter_init(&it, opts->options);
        while (g_hash_table_iter_next(&it, &k, NULL)) {
            bool known = false;
            for (size_t i = 0; i < G_N_ELEMENTS(known_options); i++) {
                known = known || strcmp(k, known_options[i]) == 0;
            }
            if (!known) {
                g_ptr_array_add(bad, k);
            }
        }
        if (bad->len) {
            g_ptr_array_sort(bad, (GCompareFunc)g_strcmp0);
            blk_error(EINVAL, "Invalid parameter '%s'", (const char *)bad->pdata[0]);
            return -EINVAL;
        }
    }

    p->data_file = opt_get(opts, "data_file");
    p->data_file_raw = opt_bool(opts, "data_file_raw");
    p->extended_l2 = opt_bool(opts, "extended_l2");
    p->size = opts->size;
    if (!opts->size_set && (v = opt_get(opts, "size"))) {
        if (parse_number(v, &p->size) < 0) {
            return param_error("Parameter 'size' expects a size");
        }
    }
    if (p->size > (uint64_t)INT64_MAX) {
        return param_error("Image size must be less than 8 EiB!");
    }
    /* qemu-img silently rounds the size up to 512 bytes */
    p->size = ROUND_UP(p->size, 512);

    p->version = 3;
    if ((v = opt_get(opts, "compat"))) {
        if (strcmp(v, "0.10") == 0 || strcmp(v, "v2") == 0) {
            p->version = 2;
        } else if (strcmp(v, "1.1") == 0 || strcmp(v, "v3") == 0) {
            p->version = 3;
        } else {
            return bad_value("version", v);
        }
    }

    p->backing_file =
        opts->backing_file ? opts->backing_file : opt_get(opts, "backing_file");
    p->backing_format =
        opts->backing_format ? opts->backing_format : opt_get(opts, "backing_fmt");
    if (p->backing_format) {
        bool ok = false;
        for (size_t i = 0; i < G_N_ELEMENTS(backing_drivers); i++) {
            ok = ok || strcmp(p->backing_format, backing_drivers[i]) == 0;
        }
        if (!ok) {
            return bad_value("backing-fmt", p->backing_format);
        }
    }

    p->cluster_size = 65536;
    if ((v = opt_get(opts, "cluster_size"))) {
        if (parse_number(v, &p->cluster_size) < 0) {
            return param_error("Parameter 'cluster-size' expects a size");
        }
    }

    p->prealloc = BLK_PREALLOC_OFF;
    if ((v = opt_get(opts, "preallocation"))) {
        if (blk_prealloc_parse(v, &p->prealloc) < 0) {
            blk_error_clear();
            return bad_value("preallocation", v);
        }
    }

    p->lazy_refcounts = opt_bool(opts, "lazy_refcounts");

    n = 16;
    if ((v = opt_get(opts, "refcount_bits")) && parse_number(v, &n) < 0) {
        return param_error("Parameter 'refcount-bits' expects a number");
    }

    p->compression_type = QCOW2_COMPRESSION_ZLIB;
    if ((v = opt_get(opts, "compression_type"))) {
        if (strcmp(v, "zstd") == 0) {
            p->compression_type = QCOW2_COMPRESSION_ZSTD;
        } else if (strcmp(v, "zlib") != 0) {
            return bad_value("compression-type", v);
        }
    }

    /* qemu-img's consistency checks, in its order */
    if (p->extended_l2 && p->version < 3) {
        return param_error("Extended L2 entries are only supported with "
                           "compatibility level 1.1 and above (use version=v3 "
                           "or greater)");
    }
    if (p->cluster_size < 512 || p->cluster_size > 2 * 1024 * 1024 ||
        (p->cluster_size & (p->cluster_size - 1))) {
        return param_error("Cluster size must be a power of two between 512 and "
                           "2048k");
    }
    p->cluster_bits = (uint32_t)__builtin_ctzll(p->cluster_size);
    if (p->extended_l2 && p->cluster_size < 512 * QCOW2_EXTL2_SUBCLUSTERS) {
        blk_error(EINVAL,
                  "Extended L2 entries are only supported with cluster sizes of at "
                  "least %u bytes",
                  512 * QCOW2_EXTL2_SUBCLUSTERS);
        return -EINVAL;
    }
    if (p->backing_file && p->prealloc != BLK_PREALLOC_OFF && !p->extended_l2) {
        return param_error("Backing file and preallocation can only be used at "
                           "the same time if extended_l2 is on");
    }
    if (p->backing_format && !p->backing_file) {
        return param_error("Backing format cannot be used without backing file");
    }
    if (p->lazy_refcounts && p->version < 3) {
        return param_error("Lazy refcounts only supported with compatibility "
                           "level 1.1 and above (use version=v3 or greater)");
    }
    if (n > 64 || n == 0 || (n & (n - 1))) {
        return param_error("Refcount width must be a power of two and may not "
                           "exceed 64 bits");
    }
    if (p->version < 3 && n != 16) {
        return param_error("Different refcount widths than 16 bits require "
                           "compatibility level 1.1 or above (use version=v3 or "
                           "greater)");
    }
    p->refcount_order = (uint32_t)__builtin_ctzll(n);
    if (p->data_file_raw && !p->data_file) {
        return param_error("data-file-raw requires data-file");
    }
    if (p->data_file_raw && p->backing_file) {
        return param_error("Backing file and data-file-raw cannot be used at the "
                           "same time");
    }
    if (p->data_file_raw && p->prealloc == BLK_PREALLOC_OFF) {
        /* the raw data file must map 1:1, so qemu-img maps all of it */
        p->prealloc = BLK_PREALLOC_METADATA;
    }
    if (p->data_file && p->version < 3) {
        return param_error("External data files are only supported with "
                           "compatibility level 1.1 and above (use version=v3 or "
                           "greater)");
    }
    if (p->compression_type != QCOW2_COMPRESSION_ZLIB && p->version < 3) {
        return param_error("Non-zlib compression type is only supported with "
                           "compatibility level 1.1 and above (use version=v3 or "
                           "greater)");
    }
    return 0;
}

/* ---- the layout model ---- */

typedef struct Table {
    uint64_t offset; /* hash key */
    uint8_t *data;   /* one cluster, on-disk (big-endian) format */
    bool dirty;
} Table;

typedef struct Layout {
    const CreateParams *p;
    BlkNode *file;
    BlkNode *data; /* external data file node, or NULL */

    uint32_t cluster_bits;
    uint64_t cluster_size;
    uint32_t refcount_order;
    uint32_t rb_bits;    /* log2(refcounts per refcount block) */
    uint64_t rb_entries; /* refcounts per refcount block */
    uint64_t refcount_max;
    uint32_t l2_bits; /* log2(entries per L2 table) */
    uint64_t l2_entries;
    uint32_t l2_entry_size;
    uint64_t subcluster_size;

    uint64_t *reftable; /* host order */
    uint64_t reftable_size;
    uint64_t reftable_offset;
    GHashTable *refblocks; /* &offset -> Table */
    uint64_t free_index;   /* first cluster the allocator looks at */

    uint64_t *l1; /* host order */
    uint64_t l1_size;
    uint64_t l1_offset;
    GHashTable *l2s; /* &offset -> Table */

    uint64_t eof;      /* where qemu-img's image file would end (invariant 3) */
    uint64_t data_eof; /* the same for the data file */
} Layout;

static void table_free(gpointer p)
{
    Table *t = p;
    g_free(t->data);
    g_free(t);
}

static void note_extent(Layout *L, uint64_t offset, uint64_t len)
{
    L->eof = MAX(L->eof, offset + len);
}

static int file_write(Layout *L, BlkNode *node, uint64_t offset, const void *buf,
                      uint64_t len)
{
    int ret = blk_pwrite(node, offset, buf, len, 0);
    if (ret < 0) {
        return blk_error(-ret, "Could not write to '%s': %s", node->filename,
                         g_strerror(-ret));
    }
    return 0;
}

static gint cmp_u64(gconstpointer a, gconstpointer b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Write the dirty tables of one cache; drop them all when 'drop'. */
static int cache_flush(Layout *L, GHashTable *cache, bool drop)
{
    GHashTableIter it;
    gpointer v;
    g_autoptr(GArray) order = g_array_new(FALSE, FALSE, sizeof(uint64_t));

    /* in offset order, so the file grows the same way every time */
    g_hash_table_iter_init(&it, cache);
    while (g_hash_table_iter_next(&it, NULL, &v)) {
        Table *t = v;
        if (t->dirty) {
            g_array_append_val(order, t->offset);
        }
    }
    g_array_sort(order, cmp_u64);
    for (guint i = 0; i < order->len; i++) {
        uint64_t off = g_array_index(order, uint64_t, i);
        Table *t = g_hash_table_lookup(cache, &off);
        int ret = file_write(L, L->file, t->offset, t->data, L->cluster_size);
        if (ret < 0) {
            return ret;
        }
        t->dirty = false;
    }
    if (drop) {
        g_hash_table_remove_all(cache);
    }
    return 0;
}

/* A table of 'cache' at 'offset': from memory, or read back from the file. */
static int table_get(Layout *L, GHashTable *cache, uint64_t offset, Table **out)
{
    Table *t = g_hash_table_lookup(cache, &offset);

    if (!t) {
        int ret;
        t = g_new0(Table, 1);
        t->offset = offset;
        t->data = g_malloc(L->cluster_size);
        ret = blk_pread(L->file, offset, t->data, L->cluster_size);
        if (ret < 0) {
            table_free(t);
            return blk_error(-ret, "Could not read '%s': %s", L->file->filename,
                             g_strerror(-ret));
        }
        g_hash_table_insert(cache, &t->offset, t);
    }
    *out = t;
    return 0;
}

/* A new, zeroed, dirty table at 'offset' (replaces a cached one). */
static Table *table_new(Layout *L, GHashTable *cache, uint64_t offset)
{
    Table *t = g_new0(Table, 1);

    t->offset = offset;
    t->data = g_malloc0(L->cluster_size);
    t->dirty = true;
    g_hash_table_replace(cache, &t->offset, t);
    note_extent(L, offset, L->cluster_size);
    return t;
}

static uint64_t refblock_get(const Layout *L, const Table *rb, uint64_t index)
{
    return qcow2_refblock_get(rb->data, index, L->refcount_order);
}

static void refblock_set(const Layout *L, Table *rb, uint64_t index, uint64_t value)
{
    uint8_t *b = rb->data;

    switch (L->refcount_order) {
    case 0:
    case 1:
    case 2: {
        /* sub-byte entries, least significant bits first */
        unsigned width = 1u << L->refcount_order;
        unsigned per_byte = 8 / width;
        unsigned shift = (unsigned)(index % per_byte) * width;
        unsigned mask = ((1u << width) - 1) << shift;
        b[index / per_byte] = (uint8_t)((b[index / per_byte] & ~mask) | (value << shift));
        break;
    }
    case 3:
        b[index] = (uint8_t)value;
        break;
    case 4:
        store_be16(b + index * 2, (uint16_t)value);
        break;
    case 5:
        store_be32(b + index * 4, (uint32_t)value);
        break;
    default:
        store_be64(b + index * 8, value);
        break;
    }
    rb->dirty = true;
}

static int get_refcount(Layout *L, uint64_t cluster, uint64_t *rc)
{
    uint64_t idx = cluster >> L->rb_bits;
    Table *rb;
    int ret;

    *rc = 0;
    if (idx >= L->reftable_size || !L->reftable[idx]) {
        return 0;
    }
    ret = table_get(L, L->refblocks, L->reftable[idx], &rb);
    if (ret < 0) {
        return ret;
    }
    *rc = refblock_get(L, rb, cluster & (L->rb_entries - 1));
    return 0;
}

/*
 * Reserve 'nb' free clusters, first fit from the free index, without
 * raising their refcounts (the free index stays after them).
 */
static int64_t alloc_noref(Layout *L, uint64_t nb)
{
    uint64_t i;

retry:
    for (i = 0; i < nb; i++) {
        uint64_t rc;
        int ret = get_refcount(L, L->free_index++, &rc);
        if (ret < 0) {
            return ret;
        }
        if (rc) {
            goto retry;
        }
    }
    if (((L->free_index - 1) << L->cluster_bits) >> L->cluster_bits !=
            L->free_index - 1 ||
        ((L->free_index - 1) << L->cluster_bits) > QCOW2_L2E_OFFSET_MASK) {
        return blk_error(EFBIG, "Image too large");
    }
    return (int64_t)((L->free_index - nb) << L->cluster_bits);
}

static int update_refcount(Layout *L, uint64_t offset, uint64_t length, uint64_t addend,
                           bool decrease);
static int64_t refcount_area(Layout *L, uint64_t start, uint64_t additional, bool exact,
                             uint64_t new_index, uint64_t new_block);

/*
 * The refcount block for 'cluster'.  When there is none, one is created
 * (placed where it describes itself if it can) and hooked into the table,
 * growing the table when it is too small; then -EAGAIN tells the caller
 * that clusters it had picked may have been taken and it must search again.
 */
static int refblock_for(Layout *L, uint64_t cluster, Table **out)
{
    uint64_t idx = cluster >> L->rb_bits;
    int64_t nb, end;
    uint64_t blocks_used, meta;
    int ret;

    *out = NULL;
    if (idx < L->reftable_size && L->reftable[idx]) {
        return table_get(L, L->refblocks, L->reftable[idx], out);
    }

    nb = alloc_noref(L, 1);
    if (nb < 0) {
        return (int)nb;
    }
    if (nb == 0) {
        return blk_error(EIO, "Preventing invalid allocation of refcount block at "
                              "offset 0");
    }
    if (((uint64_t)nb >> (L->cluster_bits + L->rb_bits)) == idx) {
        /* the block describes itself */
        Table *rb = table_new(L, L->refblocks, (uint64_t)nb);
        refblock_set(L, rb, ((uint64_t)nb >> L->cluster_bits) & (L->rb_entries - 1), 1);
    } else {
        /* described by another block; recurses at most twice */
        ret = update_refcount(L, (uint64_t)nb, L->cluster_size, 1, false);
        if (ret < 0) {
            return ret;
        }
        table_new(L, L->refblocks, (uint64_t)nb);
    }

    if (idx < L->reftable_size) {
        L->reftable[idx] = (uint64_t)nb;
        return -EAGAIN;
    }

    /* The table is too small: a new one goes past everything in use. */
    blocks_used = DIV_ROUND_UP(MAX(cluster + 1, ((uint64_t)nb >> L->cluster_bits) + 1),
                               L->rb_entries);
    if (qcow2_mul(blocks_used, L->rb_entries << L->cluster_bits, &meta)) {
        return blk_error(EFBIG, "Image too large");
    }
    end = refcount_area(L, meta, 0, false, idx, (uint64_t)nb);
    return end < 0 ? (int)end : -EAGAIN;
}

/*
 * Add (or subtract) 'addend' to the refcount of every cluster touching
 * [offset, offset + length).  On failure the clusters already changed are
 * changed back; -EAGAIN also moves the free index back to the start.
 */
static int update_refcount(Layout *L, uint64_t offset, uint64_t length, uint64_t addend,
                           bool decrease)
{
    uint64_t start, last, cur;
    int ret = 0;

    if (length == 0) {
        return 0;
    }
    start = ROUND_DOWN(offset, L->cluster_size);
    last = ROUND_DOWN(offset + length - 1, L->cluster_size);
    for (cur = start; cur <= last; cur += L->cluster_size) {
        uint64_t ci = cur >> L->cluster_bits;
        uint64_t rc;
        Table *rb;

        ret = refblock_for(L, ci, &rb);
        if (ret == -EAGAIN && L->free_index > (start >> L->cluster_bits)) {
            L->free_index = start >> L->cluster_bits;
        }
        if (ret < 0) {
            break;
        }
        rc = refblock_get(L, rb, ci & (L->rb_entries - 1));
        if (decrease ? rc < addend : rc + addend > L->refcount_max) {
            ret = blk_error(EINVAL, "Refcount overflow at cluster %" PRIu64, ci);
            break;
        }
        rc = decrease ? rc - addend : rc + addend;
        if (rc == 0 && ci < L->free_index) {
            L->free_index = ci;
        }
        refblock_set(L, rb, ci & (L->rb_entries - 1), rc);
    }
    if (ret < 0 && cur > offset) {
        (void)update_refcount(L, offset, cur - offset, addend, !decrease);
    }
    return ret;
}

/* Allocate clusters for 'bytes' bytes (refcount 1); returns the offset. */
static int64_t alloc_clusters(Layout *L, uint64_t bytes)
{
    int64_t off;
    int ret;

    do {
        off = alloc_noref(L, DIV_ROUND_UP(bytes, L->cluster_size));
        if (off < 0) {
            return off;
        }
        ret = update_refcount(L, (uint64_t)off, bytes, 1, false);
    } while (ret == -EAGAIN);
    return ret < 0 ? ret : off;
}

/* Allocate up to 'nb' clusters at 'offset', as many as are free in a row. */
static int64_t alloc_clusters_at(Layout *L, uint64_t offset, uint64_t nb)
{
    uint64_t i;
    int ret;

    if (nb == 0) {
        return 0;
    }
    do {
        for (i = 0; i < nb; i++) {
            uint64_t rc;
            ret = get_refcount(L, (offset >> L->cluster_bits) + i, &rc);
            if (ret < 0) {
                return ret;
            }
            if (rc) {
                break;
            }
        }
        ret = update_refcount(L, offset, i << L->cluster_bits, 1, false);
    } while (ret == -EAGAIN);
    return ret < 0 ? ret : (int64_t)i;
}

/*
 * Number of refcount blocks needed to count 'clusters' clusters plus the
 * refcount structures themselves (a fixed point); 'generous' leaves room
 * for the table to grow by half.
 */
static uint64_t refblocks_needed(const Layout *L, uint64_t clusters, bool generous)
{
    uint64_t per_table_cluster = L->cluster_size / 8;
    uint64_t table = 0, blocks = 0, n = 0, last;

    do {
        last = n;
        blocks = DIV_ROUND_UP(clusters + table + blocks, L->rb_entries);
        table = DIV_ROUND_UP(blocks, per_table_cluster);
        n = clusters + blocks + table;
        if (n == last && generous) {
            clusters += DIV_ROUND_UP(table, 2);
            n = 0;
            generous = false;
        }
    } while (n != last);
    return blocks;
}

/* Write a table of host-order 64-bit entries (refcount table, L1) big-endian. */
static int write_u64_table(Layout *L, uint64_t offset, const uint64_t *table,
                           uint64_t size)
{
    g_autofree uint8_t *buf = g_try_malloc(size * 8);

    if (!buf) {
        return blk_error(ENOMEM, "Out of memory for the refcount table");
    }
    for (uint64_t i = 0; i < size; i++) {
        store_be64(buf + i * 8, table[i]);
    }
    return file_write(L, L->file, offset, buf, size * 8);
}

/*
 * Build new refcount structures at 'start' (which nothing uses yet): refcount
 * blocks for everything up to start + 'additional' clusters and a new
 * refcount table after them, then switch to that table and free the old one.
 * 'new_block' (if not 0) is a refcount block already made for table index
 * 'new_index'.  Returns the end of the new structures.
 */
static int64_t refcount_area(Layout *L, uint64_t start, uint64_t additional, bool exact,
                             uint64_t new_index, uint64_t new_block)
{
    uint64_t total, area_index, table_size, table_clusters, nb_new = 0;
    uint64_t table_offset, end_offset, block_offset, max_index = 0;
    uint64_t old_offset, old_size;
    g_autofree uint64_t *table = NULL;
    int ret;

    total = refblocks_needed(L, (start >> L->cluster_bits) + additional, !exact);
    if (total > CREATE_MAX_REFTABLE_ENTRIES) {
        return blk_error(EFBIG, "Refcount table too large");
    }
    area_index = (start >> L->cluster_bits) >> L->rb_bits;
    table_size = exact ? total : total + DIV_ROUND_UP(total, 2);
    table_size = ROUND_UP(table_size, L->cluster_size / 8);
    table_clusters = table_size * 8 / L->cluster_size;
    if (table_size > CREATE_MAX_REFTABLE_ENTRIES) {
        return blk_error(EFBIG, "Refcount table too large");
    }
    table = g_try_new0(uint64_t, table_size);
    if (!table) {
        return blk_error(ENOMEM, "Out of memory for the refcount table");
    }

    for (uint64_t i = 0; i < L->reftable_size; i++) {
        if (L->reftable[i]) {
            max_index = i;
        }
    }
    memcpy(table, L->reftable, MIN(table_size, max_index + 1) * sizeof(uint64_t));
    if (new_block) {
        table[new_index] = new_block;
    }
    for (uint64_t i = area_index; i < total; i++) {
        nb_new += !table[i];
    }
    table_offset = start + nb_new * L->cluster_size;
    end_offset = table_offset + table_clusters * L->cluster_size;

    block_offset = start;
    for (uint64_t i = area_index; i < total; i++) {
        uint64_t first = (i << L->rb_bits) << L->cluster_bits;
        Table *rb;

        if (table[i]) {
            ret = table_get(L, L->refblocks, table[i], &rb);
            if (ret < 0) {
                return ret;
            }
        } else {
            rb = table_new(L, L->refblocks, block_offset);
            table[i] = block_offset;
            block_offset += L->cluster_size;
        }
        if (first < end_offset) {
            /* the new structures are in use */
            uint64_t j = first < start ? (start - first) >> L->cluster_bits : 0;
            uint64_t end = MIN((end_offset - first) >> L->cluster_bits, L->rb_entries);
            for (; j < end; j++) {
                refblock_set(L, rb, j, 1);
            }
        }
    }

    /* the new blocks first, then the new table (invariant 3) */
    ret = cache_flush(L, L->refblocks, false);
    if (ret < 0) {
        return ret;
    }
    ret = write_u64_table(L, table_offset, table, table_size);
    if (ret < 0) {
        return ret;
    }
    note_extent(L, table_offset, table_size * 8);
    /* the old table keeps its last contents on disk */
    ret = write_u64_table(L, L->reftable_offset, L->reftable, L->reftable_size);
    if (ret < 0) {
        return ret;
    }

    old_offset = L->reftable_offset;
    old_size = L->reftable_size;
    g_free(L->reftable);
    L->reftable = g_steal_pointer(&table);
    L->reftable_size = table_size;
    L->reftable_offset = table_offset;
    (void)update_refcount(L, old_offset, old_size * 8, 1, true);
    return (int64_t)end_offset;
}

/* ---- L1 / L2 ---- */

static int grow_l1(Layout *L, uint64_t entries)
{
    int64_t off;

    if (entries <= L->l1_size) {
        return 0;
    }
    if (entries > INT_MAX / 8 || entries > QCOW2_MAX_L1_BYTES / 8) {
        return blk_error(EFBIG, "L1 table too large");
    }
    g_free(L->l1);
    L->l1 = g_try_new0(uint64_t, entries);
    if (!L->l1) {
        return blk_error(ENOMEM, "Out of memory for the L1 table");
    }
    off = alloc_clusters(L, entries * 8);
    if (off < 0) {
        return (int)off;
    }
    L->l1_size = entries;
    L->l1_offset = (uint64_t)off;
    note_extent(L, L->l1_offset, entries * 8);
    return 0;
}

/* The L2 table mapping guest offset 'guest', allocated if there is none. */
static int l2_for(Layout *L, uint64_t guest, Table **out)
{
    uint64_t idx = guest >> (L->cluster_bits + L->l2_bits);

    if (idx >= L->l1_size) {
        return blk_error(EIO, "Guest offset %" PRIu64 " beyond the L1 table", guest);
    }
    if (!(L->l1[idx] & QCOW2_OFLAG_COPIED)) {
        int64_t off = alloc_clusters(L, L->cluster_size);
        if (off < 0) {
            return (int)off;
        }
        if (off == 0) {
            return blk_error(EIO,
                             "Preventing invalid allocation of L2 table at offset 0");
        }
        table_new(L, L->l2s, (uint64_t)off);
        L->l1[idx] = (uint64_t)off | QCOW2_OFLAG_COPIED;
    }
    return table_get(L, L->l2s, L->l1[idx] & QCOW2_L1E_OFFSET_MASK, out);
}

/*
 * Map 'nb' guest clusters from 'guest' (cluster aligned, inside one L2
 * table) to host clusters from 'host', as preallocated clusters: the
 * subcluster bitmap of extended L2 entries stays 0.
 */
static int link_l2(Layout *L, uint64_t guest, uint64_t host, uint64_t nb)
{
    uint64_t first = (guest >> L->cluster_bits) & (L->l2_entries - 1);
    Table *l2;
    int ret = l2_for(L, guest, &l2);

    if (ret < 0) {
        return ret;
    }
    for (uint64_t i = 0; i < nb; i++) {
        store_be64(l2->data + (first + i) * L->l2_entry_size,
                   (host + (i << L->cluster_bits)) | QCOW2_OFLAG_COPIED);
    }
    l2->dirty = true;
    return 0;
}

/* Write zeros (a copy-on-write tail read from nothing) to the data node. */
static int write_zeros(Layout *L, uint64_t offset, uint64_t len)
{
    BlkNode *node = L->data ? L->data : L->file;
    g_autofree uint8_t *zeros = g_malloc0(len);
    int ret = file_write(L, node, offset, zeros, len);

    if (ret == 0) {
        if (L->data) {
            L->data_eof = MAX(L->data_eof, offset + len);
        } else {
            note_extent(L, offset, len);
        }
    }
    return ret;
}

/* Write every table kept in memory (invariant 4); drop the L2 tables and,
 * when there are many, the refcount blocks. */
static int checkpoint(Layout *L)
{
    int ret = cache_flush(L, L->l2s, true);
    bool drop =
        g_hash_table_size(L->refblocks) * L->cluster_size > CREATE_REFBLOCK_CACHE_BYTES;

    if (ret == 0) {
        ret = cache_flush(L, L->refblocks, drop);
    }
    return ret;
}

static int write_l1_and_reftable(Layout *L)
{
    int ret = write_u64_table(L, L->reftable_offset, L->reftable, L->reftable_size);

    if (ret == 0 && L->l1_size) {
        ret = write_u64_table(L, L->l1_offset, L->l1, L->l1_size);
    }
    return ret;
}

/* Resize the data node to 'size' if it is shorter, like QEMU's file
 * protocol: growing an empty file from 0 with 'off' allocates its first
 * block. */
static int grow_data_node(Layout *L, uint64_t size, BlkPrealloc mode)
{
    BlkNode *node = L->data ? L->data : L->file;
    uint64_t cur = L->data ? L->data_eof : L->eof;
    int ret;

    if (size <= cur) {
        return 0;
    }
    if (mode == BLK_PREALLOC_METADATA) {
        mode = BLK_PREALLOC_OFF;
    }
    ret = blk_truncate(node, size, false, mode, false);
    if (ret < 0) {
        return ret;
    }
    if (cur == 0 && mode == BLK_PREALLOC_OFF) {
        static const uint8_t zeros[4096];
        ret = file_write(L, node, 0, zeros, MIN(size, sizeof(zeros)));
        if (ret < 0) {
            return ret;
        }
    }
    if (L->data) {
        L->data_eof = size;
    } else {
        note_extent(L, 0, size);
    }
    return 0;
}

/* One run of guest clusters mapped to contiguous host clusters. */
typedef struct Run {
    uint64_t guest; /* first guest cluster (offset) */
    uint64_t host;  /* first host cluster (offset) */
    uint64_t nb;    /* clusters */
    uint64_t tail;  /* offset in the run where the copy-on-write tail starts */
} Run;

/*
 * One chunk of preallocate: map guest [offset, offset + req) the way QEMU's
 * write path allocates: the L2 table first, then as many contiguous data
 * clusters as fit in that table; when the run cannot go on contiguously
 * the chunk ends early.  Sets *host (host offset of 'offset') and *done.
 */
static int prealloc_chunk(Layout *L, uint64_t offset, uint64_t req, uint64_t *host,
                          uint64_t *done)
{
    uint64_t start = offset, remaining = req, cur = 0;
    uint64_t cluster_off = INV_OFFSET;
    g_autoptr(GArray) runs = g_array_new(FALSE, FALSE, sizeof(Run));
    int ret;

    *host = INV_OFFSET;
    for (;;) {
        uint64_t oic, nb, alloc_off, nbytes, l2_index;
        Run run;
        Table *l2;

        if (*host == INV_OFFSET && cluster_off != INV_OFFSET) {
            *host = cluster_off;
        }
        start += cur;
        remaining -= cur;
        if (cluster_off != INV_OFFSET) {
            cluster_off += cur;
        }
        if (remaining == 0) {
            break;
        }
        cur = remaining;

        ret = l2_for(L, start, &l2); /* the L2 table comes first */
        if (ret < 0) {
            return ret;
        }
        oic = start & (L->cluster_size - 1);
        nb = DIV_ROUND_UP(oic + cur, L->cluster_size);
        l2_index = (start >> L->cluster_bits) & (L->l2_entries - 1);
        nb = MIN(nb, L->l2_entries - l2_index);
        nb = MIN(nb, CREATE_MAX_REQUEST >> L->cluster_bits);

        if (L->data) {
            alloc_off = ROUND_DOWN(start, L->cluster_size); /* 1:1, no refcounts */
        } else if (cluster_off == INV_OFFSET) {
            int64_t r = alloc_clusters(L, nb << L->cluster_bits);
            if (r < 0) {
                return (int)r;
            }
            alloc_off = (uint64_t)r;
        } else {
            int64_t r;
            alloc_off = ROUND_DOWN(cluster_off, L->cluster_size);
            r = alloc_clusters_at(L, alloc_off, nb);
            if (r < 0) {
                return (int)r;
            }
            nb = (uint64_t)r;
        }
        if (nb == 0) {
            break; /* cannot continue contiguously */
        }
        nbytes = MIN(cur + oic, nb << L->cluster_bits);
        cur = MIN(cur, nbytes - oic);
        run.guest = ROUND_DOWN(start, L->cluster_size);
        run.host = alloc_off;
        run.nb = DIV_ROUND_UP(oic + cur, L->cluster_size);
        run.tail = oic + cur;
        g_array_append_val(runs, run);
        cluster_off = alloc_off + oic;
    }
    *done = req - remaining;

    /* link the runs (QEMU does the newest first); an unaligned end gets its
     * copy-on-write tail, zeros, up to the (sub)cluster end */
    for (guint i = runs->len; i-- > 0;) {
        const Run *r = &g_array_index(runs, Run, i);
        uint64_t tail_end = ROUND_UP(r->tail, L->subcluster_size);

        ret = link_l2(L, r->guest, r->host, r->nb);
        if (ret == 0 && tail_end > r->tail) {
            ret = write_zeros(L, r->host + r->tail, tail_end - r->tail);
        }
        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}

/* preallocation=metadata (and falloc/full with a data file). */
static int prealloc_metadata(Layout *L, uint64_t size)
{
    uint64_t offset = 0, host = 0, done = 0;
    uint64_t max_chunk = ROUND_DOWN((uint64_t)INT_MAX, L->cluster_size);
    int ret;

    while (offset < size) {
        ret = prealloc_chunk(L, offset, MIN(size - offset, max_chunk), &host, &done);
        if (ret == 0) {
            ret = checkpoint(L);
        }
        if (ret < 0) {
            blk_error_prefix(ret, "Could not resize image: Allocating clusters failed");
            return ret;
        }
        offset += done;
    }
    if (size == 0) {
        return 0;
    }
    /* the file must reach the last data cluster */
    return grow_data_node(L, host + done, L->p->prealloc);
}

/* The last cluster in use among the first 'clusters' clusters. */
static int64_t last_used_cluster(Layout *L, uint64_t clusters)
{
    for (uint64_t i = clusters; i-- > 0;) {
        uint64_t rc;
        int ret = get_refcount(L, i, &rc);
        if (ret < 0) {
            return ret;
        }
        if (rc) {
            return (int64_t)i;
        }
    }
    return blk_error(EIO, "There are no references in the refcount table.");
}

/*
 * preallocation=falloc/full without a data file: refcount structures for
 * everything first, the data clusters right after them, the file extended
 * (and preallocated) over them, then the L2 tables wherever they fit.
 */
static int prealloc_file(Layout *L, uint64_t size)
{
    uint64_t n_data = ROUND_UP(size, L->cluster_size) >> L->cluster_bits;
    uint64_t n_l2 = DIV_ROUND_UP(n_data, L->l2_entries) + 1;
    uint64_t old_end, guest, host;
    int64_t last, start, got;
    int ret;

    last = last_used_cluster(L, DIV_ROUND_UP(L->eof, L->cluster_size));
    if (last < 0) {
        ret = (int)last;
        goto err;
    }
    old_end = ((uint64_t)last + 1) << L->cluster_bits;
    start = refcount_area(L, old_end, n_data + n_l2, true, 0, 0);
    if (start < 0) {
        ret = (int)start;
        blk_error_prefix(ret,
                         "Could not resize image: Failed to resize refcount structures");
        return ret;
    }
    got = alloc_clusters_at(L, (uint64_t)start, n_data);
    if (got < 0 || (uint64_t)got != n_data) {
        ret = got < 0 ? (int)got : blk_error(EIO, "Data clusters are not free");
        blk_error_prefix(ret, "Could not resize image: Failed to allocate data clusters");
        return ret;
    }
    /* qemu-img's file ends here when it preallocates (invariant 3) */
    ret = checkpoint(L);
    if (ret == 0) {
        ret = write_l1_and_reftable(L);
    }
    if (ret < 0) {
        goto err;
    }
    {
        uint64_t new_end = (uint64_t)start + (n_data << L->cluster_bits);
        ret = blk_truncate(L->file, new_end, false, L->p->prealloc, false);
        if (ret < 0) {
            return blk_error_prefix(ret, "Could not resize image: Failed to resize "
                                         "underlying file");
        }
        note_extent(L, 0, new_end);
    }

    guest = 0;
    host = (uint64_t)start;
    while (n_data) {
        uint64_t nb = MIN(n_data, L->l2_entries -
                                      ((guest >> L->cluster_bits) & (L->l2_entries - 1)));
        ret = link_l2(L, guest, host, nb);
        if (ret < 0) {
            blk_error_prefix(ret, "Could not resize image: Failed to update L2 tables");
            return ret;
        }
        guest += nb << L->cluster_bits;
        host += nb << L->cluster_bits;
        n_data -= nb;
        if (g_hash_table_size(L->l2s) > 64) {
            ret = checkpoint(L);
            if (ret < 0) {
                goto err;
            }
        }
    }
    return 0;

err:
    blk_error_prefix(ret, "Could not resize image");
    return ret;
}

/* ---- the header ---- */

static size_t header_ext_add(uint8_t *buf, size_t pos, size_t buflen, uint32_t magic,
                             const void *data, size_t len)
{
    size_t ext_len = QCOW2_EXT_HEADER_SIZE + ROUND_UP(len, 8);

    if (pos > buflen || buflen - pos < ext_len) {
        return 0;
    }
    store_be32(buf + pos, magic);
    store_be32(buf + pos + 4, (uint32_t)len);
    if (len) {
        memcpy(buf + pos + QCOW2_EXT_HEADER_SIZE, data, len);
    }
    return ext_len;
}

/* The feature name table qemu-img writes. */
static const struct {
    uint8_t type, bit;
    const char *name;
} feature_names[] = {
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_DIRTY_BITNR, "dirty bit"},
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_CORRUPT_BITNR, "corrupt bit"},
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_DATA_FILE_BITNR, "external data file"},
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_COMPRESSION_BITNR, "compression type"},
    {QCOW2_FEAT_TYPE_INCOMPATIBLE, QCOW2_INCOMPAT_EXTL2_BITNR, "extended L2 entries"},
    {QCOW2_FEAT_TYPE_COMPATIBLE, QCOW2_COMPAT_LAZY_REFCOUNTS_BITNR, "lazy refcounts"},
    {QCOW2_FEAT_TYPE_AUTOCLEAR, QCOW2_AUTOCLEAR_BITMAPS_BITNR, "bitmaps"},
    {QCOW2_FEAT_TYPE_AUTOCLEAR, QCOW2_AUTOCLEAR_DATA_FILE_RAW_BITNR, "raw external data"},
};

/*
 * Cluster 0 as qemu-img writes it; with_backing adds the backing format
 * extension and the backing file name.  -ENOSPC if it does not fit.
 */
static int build_header(const Layout *L, bool with_backing, uint8_t *buf)
{
    const CreateParams *p = L->p;
    size_t buflen = L->cluster_size, pos, n;
    uint64_t incompat = 0, compat = 0, autoclear = 0;

    memset(buf, 0, buflen);
    store_be32(buf + QCOW2_HDR_MAGIC, QCOW2_MAGIC);
    store_be32(buf + QCOW2_HDR_VERSION, (uint32_t)p->version);
    store_be32(buf + QCOW2_HDR_CLUSTER_BITS, L->cluster_bits);
    store_be64(buf + QCOW2_HDR_SIZE, p->size);
    store_be32(buf + QCOW2_HDR_L1_SIZE, (uint32_t)L->l1_size);
    store_be64(buf + QCOW2_HDR_L1_TABLE_OFFSET, L->l1_offset);
    store_be64(buf + QCOW2_HDR_REFCOUNT_TABLE_OFFSET, L->reftable_offset);
    store_be32(buf + QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS,
               (uint32_t)(L->reftable_size * 8 >> L->cluster_bits));
    if (p->version >= 3) {
        if (p->data_file) {
            incompat |= QCOW2_INCOMPAT_DATA_FILE;
        }
        if (p->compression_type != QCOW2_COMPRESSION_ZLIB) {
            incompat |= QCOW2_INCOMPAT_COMPRESSION;
        }
        if (p->extended_l2) {
            incompat |= QCOW2_INCOMPAT_EXTL2;
        }
        if (p->lazy_refcounts) {
            compat |= QCOW2_COMPAT_LAZY_REFCOUNTS;
        }
        if (p->data_file_raw) {
            autoclear |= QCOW2_AUTOCLEAR_DATA_FILE_RAW;
        }
        store_be64(buf + QCOW2_HDR_INCOMPATIBLE_FEATURES, incompat);
        store_be64(buf + QCOW2_HDR_COMPATIBLE_FEATURES, compat);
        store_be64(buf + QCOW2_HDR_AUTOCLEAR_FEATURES, autoclear);
        store_be32(buf + QCOW2_HDR_REFCOUNT_ORDER, p->refcount_order);
        store_be32(buf + QCOW2_HDR_HEADER_LENGTH, QCOW2_HDR_V3_FULL_LENGTH);
        buf[QCOW2_HDR_COMPRESSION_TYPE] = p->compression_type;
        pos = QCOW2_HDR_V3_FULL_LENGTH;
    } else {
        pos = QCOW2_HDR_V2_LENGTH;
    }

    if (with_backing && p->backing_format) {
        n = header_ext_add(buf, pos, buflen, QCOW2_EXT_BACKING_FORMAT, p->backing_format,
                           strlen(p->backing_format));
        if (!n) {
            return -ENOSPC;
        }
        pos += n;
    }
    if (p->data_file) {
        n = header_ext_add(buf, pos, buflen, QCOW2_EXT_DATA_FILE, p->data_file,
                           strlen(p->data_file));
        if (!n) {
            return -ENOSPC;
        }
        pos += n;
    }
    /* qemu-img leaves the table out for clusters of 4 KiB and less, to keep
     * room for a backing file name */
    if (p->version >= 3 && L->cluster_size > 4096) {
        uint8_t table[G_N_ELEMENTS(feature_names) * QCOW2_FEATURE_NAME_ENTRY_SIZE] = {0};
        for (size_t i = 0; i < G_N_ELEMENTS(feature_names); i++) {
            uint8_t *e = table + i * QCOW2_FEATURE_NAME_ENTRY_SIZE;
            e[0] = feature_names[i].type;
            e[1] = feature_names[i].bit;
            memcpy(e + 2, feature_names[i].name, strlen(feature_names[i].name));
        }
        n = header_ext_add(buf, pos, buflen, QCOW2_EXT_FEATURE_TABLE, table,
                           sizeof(table));
        if (!n) {
            return -ENOSPC;
        }
        pos += n;
    }
    n = header_ext_add(buf, pos, buflen, QCOW2_EXT_END, NULL, 0);
    if (!n) {
        return -ENOSPC;
    }
    pos += n;
    if (with_backing && p->backing_file) {
        size_t len = strlen(p->backing_file);
        if (buflen - pos < len) {
            return -ENOSPC;
        }
        memcpy(buf + pos, p->backing_file, len);
        store_be64(buf + QCOW2_HDR_BACKING_FILE_OFFSET, pos);
        store_be32(buf + QCOW2_HDR_BACKING_FILE_SIZE, (uint32_t)len);
    }
    return 0;
}

/* ---- putting it together ---- */

static void layout_init(Layout *L, const CreateParams *p, BlkNode *file, BlkNode *data)
{
    memset(L, 0, sizeof(*L));
    L->p = p;
    L->file = file;
    L->data = data;
    L->cluster_bits = p->cluster_bits;
    L->cluster_size = p->cluster_size;
    L->refcount_order = p->refcount_order;
    L->rb_bits = p->cluster_bits + 3 - p->refcount_order;
    L->rb_entries = UINT64_C(1) << L->rb_bits;
    L->refcount_max = p->refcount_order == 6
                          ? UINT64_MAX
                          : (UINT64_C(1) << (1u << p->refcount_order)) - 1;
    L->l2_entry_size = p->extended_l2 ? 16 : 8;
    L->l2_bits = p->cluster_bits - (p->extended_l2 ? 4 : 3);
    L->l2_entries = UINT64_C(1) << L->l2_bits;
    L->subcluster_size =
        p->extended_l2 ? p->cluster_size / QCOW2_EXTL2_SUBCLUSTERS : p->cluster_size;
    L->refblocks = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, table_free);
    L->l2s = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, table_free);
}

static void layout_free(Layout *L)
{
    g_free(L->reftable);
    g_free(L->l1);
    if (L->refblocks) {
        g_hash_table_destroy(L->refblocks);
    }
    if (L->l2s) {
        g_hash_table_destroy(L->l2s);
    }
}

/* Map an allocation failure to qemu-img's wording (qemu-img always adds the
 * hint for qcow2: its cluster_size option has a default). */
static void size_error(int ret, const char *what)
{
    if (ret == -EFBIG) {
        blk_error_replace(EFBIG, "The image size is too large for file format 'qcow2' "
                                 "(try using a larger cluster size)");
    } else if (what) {
        blk_error_prefix(ret, "%s", what);
    }
}

static int lay_out(Layout *L)
{
    const CreateParams *p = L->p;
    uint64_t cs = L->cluster_size;
    g_autofree uint8_t *buf = g_malloc0(3 * cs);
    uint64_t l1_entries;
    int64_t off;
    int ret;

    /* a: header, refcount table, empty refcount block */
    ret = file_write(L, L->file, 0, buf, 3 * cs);
    if (ret < 0) {
        blk_error_prefix(ret, "Could not write qcow2 header");
        return ret;
    }
    note_extent(L, 0, 3 * cs);
    L->reftable_size = cs / 8;
    L->reftable = g_new0(uint64_t, L->reftable_size);
    L->reftable_offset = cs;
    L->reftable[0] = 2 * cs;
    {
        Table *rb = g_new0(Table, 1);
        rb->offset = 2 * cs;
        rb->data = g_malloc0(cs);
        g_hash_table_insert(L->refblocks, &rb->offset, rb);
    }

    /* b */
    off = alloc_clusters(L, 3 * cs);
    if (off != 0) {
        ret = off < 0 ? (int)off : blk_error(EIO, "First cluster already in use");
        blk_error_prefix(ret, "Could not allocate clusters for qcow2 header "
                              "and refcount table");
        return ret;
    }

    /* c */
    ret = build_header(L, false, buf);
    if (ret < 0) {
        blk_error(-ret, "Could not update qcow2 header: %s", g_strerror(-ret));
        return ret;
    }

    /* d */
    if (!qcow2_size_to_l1(p->size, L->cluster_bits, L->l2_bits, &l1_entries)) {
        l1_entries = UINT64_MAX;
    }
    ret = grow_l1(L, l1_entries);
    if (ret < 0) {
        size_error(ret, "Could not resize image: Failed to grow the L1 table");
        return ret;
    }
    switch (p->prealloc) {
    case BLK_PREALLOC_OFF:
        if (L->data) {
            ret = grow_data_node(L, p->size, BLK_PREALLOC_OFF);
        }
        break;
    case BLK_PREALLOC_METADATA:
        ret = prealloc_metadata(L, p->size);
        break;
    default:
        ret = L->data ? prealloc_metadata(L, p->size) : prealloc_file(L, p->size);
        break;
    }
    if (ret < 0) {
        size_error(ret, NULL); /* the preallocation worded its failure */
        return ret;
    }

    ret = checkpoint(L);
    if (ret == 0) {
        ret = write_l1_and_reftable(L);
    }
    if (ret < 0) {
        blk_error_prefix(ret, "Could not resize image");
        return ret;
    }

    /* e */
    if (p->backing_file && strlen(p->backing_file) > QCOW2_MAX_BACKING_NAME) {
        ret = -EINVAL;
    } else {
        ret = build_header(L, true, buf);
    }
    if (ret < 0) {
        blk_error(-ret, "Could not assign backing file '%s' with format '%s': %s",
                  p->backing_file, p->backing_format ? p->backing_format : "(null)",
                  g_strerror(-ret));
        return ret;
    }
    /* invariant 5: what the header names is durable before it */
    ret = blk_flush(L->file);
    if (ret == 0 && L->data) {
        ret = blk_flush(L->data);
    }
    if (ret == 0) {
        qcow2_assert_durable(L->file, blk_write_gen(L->file), "create.c invariant 5");
        ret = file_write(L, L->file, 0, buf, cs);
    }
    if (ret < 0) {
        blk_error_prefix(ret, "Could not write qcow2 header");
        return ret;
    }
    return 0;
}

/* Invariant 2: remove what qemu-img would have created and removed. */
static void remove_regular(const char *path)
{
    struct stat st;

    if (path && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        (void)unlink(path);
    }
}

static int flush_node(BlkNode *node)
{
    int ret = node ? blk_flush(node) : 0;

    if (ret < 0) {
        blk_error_prefix(ret, "Could not flush '%s'", node->filename);
    }
    return ret;
}

int qcow2_create(const char *filename, const BlkCreateOptions *opts)
{
    CreateParams p;
    Layout L;
    BlkNode *file = NULL, *data = NULL;
    BlkOpenOptions fo = {.cache = BLK_CACHE_WRITEBACK};
    const char *data_name =
        opts->options ? g_hash_table_lookup(opts->options, "data_file") : NULL;
    bool data_created = false;
    int ret;

    /* qemu-img creates the files first and checks the options after */
    ret = blk_file_create(blk_plain_name(filename), 0, BLK_PREALLOC_OFF);
    if (ret < 0) {
        return ret;
    }
    if (data_name) {
        ret = blk_file_create(data_name, 0, BLK_PREALLOC_OFF);
        if (ret < 0) {
            goto fail;
        }
        data_created = true;
    }
    ret = parse_params(opts, &p);
    if (ret < 0) {
        goto fail;
    }

    /* Locked as the read-write image will be (block/lock.c); a user name:
     * "record:LOG:FILE" records the creation (tests). */
    file = blk_open_protocol(filename, &fo, BLK_ROLE_METADATA, BLK_OPEN_USER_NAME);
    if (!file) {
        ret = blk_error_code() ? -blk_error_code() : -EIO;
        goto fail;
    }
    if (data_name) {
        data = blk_open_file_like(file, data_name, &fo, BLK_ROLE_DATA);
        if (!data) {
            ret = blk_error_code() ? -blk_error_code() : -EIO;
            goto fail;
        }
    }

    layout_init(&L, &p, file, data);
    ret = lay_out(&L);
    layout_free(&L);
    if (ret == 0) {
        ret = flush_node(file);
    }
    if (ret == 0) {
        ret = flush_node(data);
    }
    if (ret < 0) {
        goto fail;
    }
    blk_close(file);
    if (data) {
        blk_close(data);
    }
    return 0;

fail:
    if (file) {
        blk_close(file);
    }
    if (data) {
        blk_close(data);
    }
    remove_regular(blk_plain_name(filename));
    if (data_created) {
        remove_regular(data_name);
    }
    return ret < 0 ? ret : -EIO;
}
