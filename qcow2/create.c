/*
 * qcow2/create.c: creating qcow2 images (qemu-img create -f qcow2).
 *
 * Owns: the steps of a creation (a-e below) and their order, the header
 * qemu-img writes, and removing the files again on failure.  Its part
 * create-params.c holds the qcow2 create options (compat, cluster_size,
 * refcount_bits, lazy_refcounts, compression_type, extended_l2,
 * preallocation, data_file, data_file_raw, backing_file, backing_fmt) and
 * their checks with qemu-img's messages.  Everything in between is the
 * driver's own code: there is one allocator (alloc.c) and one
 * preallocation (prealloc.c), shared with every other writer and with
 * resize.  The invariants below are the whole creation's; create-params.c
 * cites them as "create.c invariant N".
 *
 * A fresh image must be byte-for-byte the image qemu-img 7.2 writes, so
 * that `cmp` is the test.  qemu-img makes it with its normal driver, and so
 * does qimg, in the same steps (learnt by running qemu-img and reading its
 * documentation; no QEMU code is used here):
 *
 *   a. Cluster 0, then clusters 1 and 2: a one-cluster refcount table whose
 *      entry 0 points at cluster 2, and an empty refcount block.  qemu-img
 *      writes a header for size 0 into cluster 0; qimg writes zeros there
 *      and keeps that header in memory (invariant 5).
 *   b. The image is opened with the qcow2 driver -- on that in-memory
 *      header (qcow2_open_new(), qcow2.c) -- and clusters 0..2 are
 *      allocated through the normal allocator.
 *   c. qemu-img writes the full header (extensions: backing format, data
 *      file name, and for v3 with clusters > 4 KiB the feature name table);
 *      it is the in-memory header of step b already.
 *   d. The image is resized from 0 to the requested size by the driver's
 *      truncate (resize.c) with the requested preallocation (prealloc.c; for
 *      falloc/full even at size 0, as QEMU's driver does): the L1 table is
 *      allocated with exactly the entries the size needs and written with
 *      exactly that length, the allocator places refcount blocks and tables
 *      as QEMU's does (alloc.c invariant 3), preallocation as QEMU's
 *      (prealloc.c invariant 1).
 *  d2. With encrypt.format=luks, as qemu-img's driver does after the resize:
 *      clusters for the LUKS header area (header and 8 key slots' material,
 *      2 MiB for the defaults) are allocated and zeroed, slot 0's material
 *      written and flushed, then the LUKS header (crypt.c, crypto/luks.c);
 *      the qcow2 header names it with crypt_method 2 and the encryption
 *      header extension in step e.
 *   e. The caches are written and everything flushed; then the final header
 *      (with the backing file: qemu-img's second full header write) goes to
 *      cluster 0 from the driver's state.
 *
 * Invariants (cited as "create.c invariant N"):
 *  1. Every option is checked before anything is laid out, in qemu-img's
 *     order, so a command with several faults reports qemu-img's first one.
 *  2. On any failure after the image file (and the data file) were created
 *     they are removed again, as qemu-img does; a regular file that existed
 *     before is gone too (qemu-img truncates and then deletes it).
 *  3. The image is made only by the driver's allocator and metadata writers,
 *     asked for what qemu-img's driver asks for in the same order (steps
 *     b, d), so its layout is qemu-img's wherever the driver's rules are
 *     QEMU's.  Where they are not, by design, the image may differ (it is
 *     still clean, equal in contents and in allocation): preallocated data
 *     clusters that would fall on a refcount table the allocator replaced
 *     during the creation are zeroed (qemu-img leaves the table's old bytes
 *     in them; prealloc.c invariant 2); only tiny clusters with large
 *     preallocated images replace the table.
 *  4. Memory is what the driver needs for any resize: its caches (sized for
 *     the size-0 image: the minimum), the L1 table and at most one batch of
 *     new L2 tables (prealloc.c invariant 4).
 *  5. Power loss (DESIGN.md rules 1-2): until the final header is written
 *     the file has no qcow2 magic -- cluster 0 is written as zeros, and the
 *     driver writes only header fields past it (size, L1 and refcount table
 *     switches, feature bits: meta.c invariant 4) -- so no earlier state is
 *     an image; the driver keeps its own write order throughout anyway.
 *     Everything the header names (refcount table and blocks, L1 and L2
 *     tables, preallocated data and the file size) is flushed before it is
 *     written.  A crash leaves either no image or a complete one.
 *  6. encrypt.format=luks images are made with QEMU's LUKS defaults and
 *     options (crypto/luks-options.c) and keyed by the encrypt.key-secret
 *     the caller has.  The old AES method (encrypt.format=aes,
 *     encryption=on) is made as qemu-img 7.2 makes it: crypt_method 1 in
 *     the header and nothing else (its key is the passphrase itself, so
 *     nothing is stored); it takes no encrypt.* option but the secret.
 *     QEMU's system emulator no longer opens such images, qemu-img and
 *     qemu-io do, and so does qimg.
 */
#include "qcow2/create.h"
#include "qcow2/meta.h"
#include "block/rbd.h"

#include "crypto/secmem.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The tables the header names. */
typedef struct HeaderTables {
    uint64_t size;
    uint64_t l1_size;
    uint64_t l1_offset;
    uint64_t reftable_offset;
    uint64_t reftable_clusters;
    /* step d2: the LUKS header area, or crypt_method 0 */
    uint32_t crypt_method;
    uint64_t crypto_offset, crypto_length;
} HeaderTables;

/*
 * Cluster 0 as qemu-img writes it (buf: one cluster); with_backing adds the
 * backing format extension and the backing file name.  -ENOSPC if it does
 * not fit.
 */
static int build_header(const CreateParams *p, const HeaderTables *t, bool with_backing,
                        uint8_t *buf)
{
    size_t buflen = p->cluster_size;
    uint64_t incompat = 0, compat = 0, autoclear = 0;

    Qcow2Header h = {
        .magic = QCOW2_MAGIC,
        .version = (uint32_t)p->version,
        .cluster_bits = p->cluster_bits,
        .size = t->size,
        .l1_size = (uint32_t)t->l1_size,
        .l1_table_offset = t->l1_offset,
        .refcount_table_offset = t->reftable_offset,
        .refcount_table_clusters = (uint32_t)t->reftable_clusters,
        .refcount_order = p->refcount_order,
        .header_length = QCOW2_HDR_V3_FULL_LENGTH,
        .compression_type = (uint8_t)p->compression_type,
        .crypt_method = t->crypt_method,
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
    Qcow2Extensions ext = {
        .backing_format = with_backing ? (char *)p->backing_format : NULL,
        .data_file = (char *)p->data_file,
        .has_crypto = t->crypt_method == QCOW2_CRYPT_LUKS,
        .crypto_offset = t->crypto_offset,
        .crypto_length = t->crypto_length,
    };
    return qcow2_header_cluster_encode(&h, &ext, with_backing ? p->backing_file : NULL,
                                       buf, buflen)
               ? 0
               : -ENOSPC;
}

static int write_file(BlkNode *node, uint64_t offset, const void *buf, uint64_t len)
{
    int ret = blk_pwrite(node, offset, buf, len, 0);
    if (ret < 0) {
        return blk_error(-ret, "Could not write to '%s': %s", node->filename,
                         g_strerror(-ret));
    }
    return 0;
}

/* Step a: cluster 0 (zeros, invariant 5), the refcount table, its block. */
static int write_minimal(const CreateParams *p, BlkNode *file)
{
    uint64_t cs = p->cluster_size;
    g_autofree uint8_t *buf = g_malloc0(3 * cs);
    int ret;

    store_be64(buf + cs, 2 * cs);
    ret = write_file(file, 0, buf, 3 * cs);
    return ret < 0 ? blk_error_prefix(ret, "Could not write qcow2 header") : 0;
}

/* Map a resize failure to qemu-img's wording (qemu-img always adds the
 * hint for qcow2: its cluster_size option has a default). */
static int resize_error(int ret)
{
    if (ret == -EFBIG) {
        return blk_error_replace(EFBIG, "The image size is too large for file format "
                                        "'qcow2' (try using a larger cluster size)");
    }
    return blk_error_prefix(ret, "Could not resize image");
}

/* Step d2 (invariant 6): the LUKS header area, slot 0 opened by the
 * secret's passphrase; for the old AES method the crypt_method alone. */
static int set_up_encryption(const CreateParams *p, const BlkCreateOptions *opts,
                             Qcow2State *s)
{
    const CryptoSecrets secrets = {.table = opts->secrets, .values = opts->secret_values};
    uint8_t *pw = NULL;
    size_t len = 0;
    int ret = crypto_secret_passphrase(&secrets, p->key_secret, &pw, &len);

    if (ret == 0 && p->encrypt_aes) {
        qcow2_lock(s);
        s->header.crypt_method = QCOW2_CRYPT_AES;
        qcow2_unlock(s);
    } else if (ret == 0) {
        ret = qcow2_crypt_create(s, &p->luks, pw, len,
                                 opts->luks_max_iterations
                                     ? opts->luks_max_iterations
                                     : CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS);
    }
    crypto_secure_free(pw);
    return ret;
}

/* Steps b-e on the image opened in step b (invariants 3, 5). */
static int build(const CreateParams *p, const BlkCreateOptions *opts, BlkNode *img)
{
    Qcow2State *s = img->opaque;
    g_autofree uint8_t *buf = g_malloc0(p->cluster_size);
    HeaderTables t;
    int64_t off;
    int ret;

    /* b */
    qcow2_lock(s);
    off = qcow2_alloc_clusters_locked(s, 3);
    qcow2_unlock(s);
    if (off != 0) {
        ret = off < 0 ? (int)off : blk_error(EIO, "First cluster already in use");
        return blk_error_prefix(ret, "Could not allocate clusters for qcow2 header "
                                     "and refcount table");
    }

    /* d */
    ret = qcow2_truncate(img, p->size, false, p->prealloc, false);
    if (ret < 0) {
        return resize_error(ret);
    }

    /* d2 */
    if (p->encrypt) {
        ret = set_up_encryption(p, opts, s);
        if (ret < 0) {
            return ret;
        }
    }

    /* e: the caches written and everything durable before the header */
    qcow2_lock(s);
    ret = qcow2_flush_all_locked(s);
    if (ret == 0) {
        ret = qcow2_write_caches_locked(s, true);
    }
    if (ret == 0) {
        ret = qcow2_flush_file(s);
    }
    t = (HeaderTables){
        .size = p->size,
        .l1_size = s->l1_size,
        .l1_offset = s->l1_table_offset,
        .reftable_offset = s->refcount_table_offset,
        .reftable_clusters = s->refcount_table_size * 8 >> s->cluster_bits,
        .crypt_method = s->header.crypt_method,
        .crypto_offset = s->ext.crypto_offset,
        .crypto_length = s->ext.crypto_length,
    };
    qcow2_unlock(s);
    if (ret < 0) {
        return blk_error_prefix(ret, "Could not resize image");
    }
    if (p->backing_file && strlen(p->backing_file) > QCOW2_MAX_BACKING_NAME) {
        ret = -EINVAL;
    } else {
        ret = build_header(p, &t, true, buf);
    }
    if (ret < 0) {
        return blk_error(-ret, "Could not assign backing file '%s' with format '%s': %s",
                         p->backing_file,
                         p->backing_format ? p->backing_format : "(null)",
                         g_strerror(-ret));
    }
    /* invariant 5 */
    qcow2_assert_durable(img->file, blk_write_gen(img->file), "create.c invariant 5");
    if (s->data_file) {
        qcow2_assert_durable(s->data_file, blk_write_gen(s->data_file),
                             "create.c invariant 5");
    }
    ret = write_file(img->file, 0, buf, p->cluster_size);
    if (ret == 0) {
        ret = blk_flush(img->file);
    }
    return ret < 0 ? blk_error_prefix(ret, "Could not write qcow2 header") : 0;
}

/* Step b's open: the qcow2 driver on 'file' with the header of step c held
 * in memory; takes file and data (closed with the image). */
static BlkNode *open_new(const CreateParams *p, const char *filename, BlkNode *file,
                         BlkNode *data)
{
    const HeaderTables t = {.reftable_offset = p->cluster_size, .reftable_clusters = 1};
    g_autofree uint8_t *hdr = g_malloc0(p->cluster_size);
    BlkNode *img = g_new0(BlkNode, 1);
    int ret = build_header(p, &t, false, hdr);

    img->drv = &blk_qcow2_driver;
    img->file = file;
    img->filename = g_strdup(filename);
    img->cache = BLK_CACHE_WRITEBACK;
    img->opts.cache = BLK_CACHE_WRITEBACK;
    img->request_alignment = file->request_alignment;
    if (ret < 0) {
        blk_close(data);
        blk_error(-ret, "Could not update qcow2 header: %s", g_strerror(-ret));
    } else {
        ret = qcow2_open_new(img, hdr, data);
    }
    if (ret < 0) {
        blk_close(img);
        return NULL;
    }
    return img;
}

/* Invariant 2: remove what qemu-img would have created and removed. */
static void remove_regular(const char *path)
{
    struct stat st;

    if (path && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        (void)unlink(path);
    }
}

int qcow2_create(const char *filename, const BlkCreateOptions *opts)
{
    CreateParams p;
    BlkNode *file = NULL, *data = NULL, *img = NULL;
    BlkOpenOptions fo = {.cache = BLK_CACHE_WRITEBACK};
    const char *data_name =
        opts->options ? g_hash_table_lookup(opts->options, "data_file") : NULL;
    bool data_created = false;
    int ret;

    if (opts->options && g_hash_table_contains(opts->options, "password-secret")) {
        /* the rbd protocol's option (raw.c invariant 5) */
        return blk_error(ENOTSUP, "qimg takes no Ceph key from a secret: "
                                  "'password-secret' is not supported");
    }
    /* qemu-img creates the files first and checks the options after */
    ret = blk_create_protocol(filename, 0, BLK_PREALLOC_OFF, 0);
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

    ret = write_minimal(&p, file);
    if (ret == 0) {
        img = open_new(&p, filename, g_steal_pointer(&file), g_steal_pointer(&data));
        ret = img ? build(&p, opts, img) : (blk_error_code() ? -blk_error_code() : -EIO);
    }
    if (ret < 0) {
        goto fail;
    }
    blk_close(img);
    return 0;

fail:
    blk_close(img);
    blk_close(file);
    blk_close(data);
    if (!blk_is_rbd_name(blk_plain_name(filename))) { /* an RBD image stays, as QEMU's */
        remove_regular(blk_plain_name(filename));
    }
    if (data_created) {
        remove_regular(data_name);
    }
    return ret < 0 ? ret : -EIO;
}
