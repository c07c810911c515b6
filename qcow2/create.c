/*
 * qcow2/create.c: creating qcow2 images (qemu-img create -f qcow2).
 *
 * Owns: the steps of a creation (a-e below) and their order, the header
 * qemu-img writes, and removing the files again on failure.  Its parts:
 * create-params.c (the qcow2 create options -- compat, cluster_size,
 * refcount_bits, lazy_refcounts, compression_type, extended_l2,
 * preallocation, data_file, data_file_raw, backing_file, backing_fmt --
 * and their checks with qemu-img's messages), create-layout.c (the layout
 * model and qemu-img's allocator replayed on it), create-prealloc.c
 * (preallocation).  The invariants below are the whole creation's; those
 * files cite them as "create.c invariant N".
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
 * create-layout.c replays those rules on an in-memory model (struct Layout)
 * and create.c writes what they produce.
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
#include "qcow2/create.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the header ---- */

/*
 * Cluster 0 as qemu-img writes it; with_backing adds the backing format
 * extension and the backing file name.  -ENOSPC if it does not fit.
 */
static int build_header(const Layout *L, bool with_backing, uint8_t *buf)
{
    const CreateParams *p = L->p;
    size_t buflen = L->cluster_size, pos, n;
    uint64_t incompat = 0, compat = 0, autoclear = 0;

    Qcow2Header h = {
        .magic = QCOW2_MAGIC,
        .version = (uint32_t)p->version,
        .cluster_bits = L->cluster_bits,
        .size = p->size,
        .l1_size = (uint32_t)L->l1_size,
        .l1_table_offset = L->l1_offset,
        .refcount_table_offset = L->reftable_offset,
        .refcount_table_clusters = (uint32_t)(L->reftable_size * 8 >> L->cluster_bits),
        .refcount_order = p->refcount_order,
        .header_length = QCOW2_HDR_V3_FULL_LENGTH,
        .compression_type = (uint8_t)p->compression_type,
    };

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
        h.incompatible_features = incompat;
        h.compatible_features = compat;
        h.autoclear_features = autoclear;
    }
    memset(buf, 0, buflen);
    pos = qcow2_header_encode(&h, buf, buflen);

    if (with_backing && p->backing_format) {
        n = qcow2_header_ext_encode(buf, pos, buflen, QCOW2_EXT_BACKING_FORMAT,
                                    p->backing_format, strlen(p->backing_format));
        if (!n) {
            return -ENOSPC;
        }
        pos += n;
    }
    if (p->data_file) {
        n = qcow2_header_ext_encode(buf, pos, buflen, QCOW2_EXT_DATA_FILE, p->data_file,
                                    strlen(p->data_file));
        if (!n) {
            return -ENOSPC;
        }
        pos += n;
    }
    /* qemu-img leaves the table out for clusters of 4 KiB and less, to keep
     * room for a backing file name */
    if (p->version >= 3 && L->cluster_size > 4096) {
        n = qcow2_feature_table_encode(buf, pos, buflen);
        if (!n) {
            return -ENOSPC;
        }
        pos += n;
    }
    n = qcow2_header_ext_encode(buf, pos, buflen, QCOW2_EXT_END, NULL, 0);
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
        h.backing_file_offset = pos;
        h.backing_file_size = (uint32_t)len;
        qcow2_header_encode(&h, buf, buflen);
    }
    return 0;
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
    ret = create_file_write(L, L->file, 0, buf, 3 * cs);
    if (ret < 0) {
        blk_error_prefix(ret, "Could not write qcow2 header");
        return ret;
    }
    create_note_extent(L, 0, 3 * cs);
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
    off = create_alloc_clusters(L, 3 * cs);
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
    ret = create_grow_l1(L, l1_entries);
    if (ret < 0) {
        size_error(ret, "Could not resize image: Failed to grow the L1 table");
        return ret;
    }
    switch (p->prealloc) {
    case BLK_PREALLOC_OFF:
        if (L->data) {
            ret = create_grow_data_node(L, p->size, BLK_PREALLOC_OFF);
        }
        break;
    case BLK_PREALLOC_METADATA:
        ret = create_prealloc_metadata(L, p->size);
        break;
    default:
        ret = L->data ? create_prealloc_metadata(L, p->size)
                      : create_prealloc_file(L, p->size);
        break;
    }
    if (ret < 0) {
        size_error(ret, NULL); /* the preallocation worded its failure */
        return ret;
    }

    ret = create_checkpoint(L);
    if (ret == 0) {
        ret = create_write_l1_and_reftable(L);
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
        ret = create_file_write(L, L->file, 0, buf, cs);
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
    ret = create_parse_params(opts, &p);
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

    create_layout_init(&L, &p, file, data);
    ret = lay_out(&L);
    create_layout_free(&L);
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
