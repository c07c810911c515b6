/*
 * qcow2/backing.c: changing the backing file an image names (qemu-img
 * rebase, QEMU's bdrv_change_backing_file).
 *
 * Owns: rewriting cluster 0 with a new backing file name and format, or a
 * new bitmaps extension (qcow2_header_rewrite_locked).
 *
 * Invariants (cited as "backing.c invariant N"):
 *  1. Before the header names the new backing file, everything written to
 *     the image is durable (qcow2_flush_all_locked, asserted in debug
 *     builds): a safe rebase's copied clusters must never be lost while the
 *     header already says the new backing file shows through.
 *  2. Cluster 0 is re-read from the file, parsed and re-encoded with the
 *     one cluster-0 encoder (qcow2_header_cluster_encode, QEMU's layout):
 *     every header field, unknown header bytes past the known fields,
 *     every extension (unknown ones included) is kept; only the backing
 *     name, its format extension and the header length fields change.
 *  3. One synced write of the bytes in use (the old or new layout's end,
 *     whichever is larger, in whole 512-byte sectors): when they fit in the
 *     first 4 KiB page, as they do unless names and unknown extensions are
 *     large, a power loss leaves the old or the new header.
 *  4. Memory (img->backing_filename/format, s->header, s->ext) follows only
 *     after the write worked.  The open chain is not reopened: the node
 *     keeps reading through the backing node it was opened with.
 *  5. The same rewrite switches the bitmaps extension (bitmap-ops.c): the
 *     autoclear bit is set with a non-empty directory and cleared, the
 *     extension dropped, with an empty one (as QEMU does).
 *  6. And what qemu-img amend changes (amend.c), each in this one write:
 *     the version (v3: header_length 112 as QEMU writes it, v2: 72 with no
 *     feature fields, compression type or feature name table), the three
 *     feature words, the refcount order together with the refcount table
 *     it describes (amend-refcount.c: the switch to the new structures is
 *     this single synced write), and the external data file's name.
 */
#include "qcow2/header-edit.h"
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <string.h>

/* Invariant 6: amend's fields into the decoded header h and its
 * extensions (ext->data_file is borrowed from e; the caller drops it). */
static void header_edit_amend(const Qcow2HeaderEdit *e, Qcow2Header *h,
                              Qcow2Extensions *ext)
{
    if (e->set_version) {
        h->version = e->version;
        h->header_length =
            e->version >= 3 ? QCOW2_HDR_V3_FULL_LENGTH : QCOW2_HDR_V2_LENGTH;
        if (e->version < 3) {
            h->incompatible_features = 0;
            h->compatible_features = 0;
            h->autoclear_features = 0;
            h->compression_type = QCOW2_COMPRESSION_ZLIB;
        }
    }
    if (e->set_features) {
        h->incompatible_features = e->incompatible;
        h->compatible_features = e->compatible;
        h->autoclear_features = e->autoclear;
    }
    if (e->set_refcount) {
        h->refcount_order = e->refcount_order;
        h->refcount_table_offset = e->reftable_offset;
        h->refcount_table_clusters = e->reftable_clusters;
    }
    if (e->set_data_file) {
        g_free(ext->data_file);
        ext->data_file = (char *)e->data_file;
    }
}

/* Invariant 4 for invariant 6's fields: memory follows the file. */
static void header_edit_follow(Qcow2State *s, const Qcow2HeaderEdit *e,
                               const Qcow2Header *h)
{
    if (e->set_version || e->set_features) {
        s->header.version = h->version;
        s->header.header_length = h->header_length;
        s->header.incompatible_features = h->incompatible_features;
        s->header.compatible_features = h->compatible_features;
        s->header.autoclear_features = h->autoclear_features;
        s->header.compression_type = h->compression_type;
        s->qcow_version = h->version;
        s->incompatible_features = h->incompatible_features;
        s->compatible_features = h->compatible_features;
        s->autoclear_features = h->autoclear_features;
        s->compression_type = h->compression_type;
    }
    if (e->set_refcount) {
        s->header.refcount_order = h->refcount_order;
        s->header.refcount_table_offset = h->refcount_table_offset;
        s->header.refcount_table_clusters = h->refcount_table_clusters;
    }
    if (e->set_data_file) {
        g_free(s->ext.data_file);
        s->ext.data_file = g_strdup(e->data_file);
    }
}

int qcow2_header_rewrite_locked(Qcow2State *s, const Qcow2HeaderEdit *e)
{
    BlkNode *img = s->img;
    size_t cs = (size_t)s->cluster_size, used, old_end, len;
    g_autofree uint8_t *old = g_malloc(cs);
    g_autofree uint8_t *buf = g_malloc(cs);
    g_autofree char *kept_name = NULL;
    const char *backing;
    Qcow2Header h;
    Qcow2Extensions ext = {0};
    char *old_fmt;
    int ret;

    /* invariant 1: what was written before the rewrite began; guest writes
     * still in flight on the lock-free path (a bitmap store does not
     * quiesce) may land after the flush and need not be durable */
    uint64_t gen = blk_write_gen(img->file);
    uint64_t data_gen = s->data_file ? blk_write_gen(s->data_file) : 0;
    ret = qcow2_check_writable_locked(s);
    if (ret == 0) {
        ret = qcow2_flush_all_locked(s);
    }
    if (ret < 0) {
        return ret;
    }
    qcow2_assert_durable(img->file, gen, "backing.c invariant 1");
    if (s->data_file) {
        qcow2_assert_durable(s->data_file, data_gen, "backing.c invariant 1");
    }
    /* invariant 2 */
    ret = blk_pread(img->file, 0, old, cs);
    if (ret < 0) {
        return blk_error(-ret, "Could not read the header of '%s': %s", img->filename,
                         g_strerror(-ret));
    }
    ret = qcow2_header_parse(old, cs, s->file_size, true, false, NULL, &h, &ext);
    if (ret == 0 && !e->set_backing) {
        ret = qcow2_read_backing_name(old, &h, &kept_name);
    }
    if (ret < 0) {
        qcow2_extensions_free(&ext);
        return ret;
    }
    old_end =
        MAX((size_t)ext.end + 8, (size_t)(h.backing_file_offset + h.backing_file_size));
    old_fmt = ext.backing_format;
    backing = e->set_backing ? e->backing : kept_name;
    if (e->set_backing) {
        ext.backing_format = (char *)e->fmt;
    }
    if (e->set_bitmaps) {
        ext.has_bitmaps = e->bitmaps.nb_bitmaps > 0;
        ext.bitmaps = e->bitmaps;
        if (ext.has_bitmaps) {
            h.autoclear_features |= QCOW2_AUTOCLEAR_BITMAPS;
        } else {
            h.autoclear_features &= ~(uint64_t)QCOW2_AUTOCLEAR_BITMAPS;
        }
    }
    header_edit_amend(e, &h, &ext); /* invariant 6 */
    used = qcow2_header_cluster_encode(&h, &ext, backing, buf, cs);
    ext.backing_format = old_fmt;
    if (e->set_data_file) {
        ext.data_file = NULL; /* borrowed from e */
    }
    qcow2_extensions_free(&ext);
    if (!used) {
        return blk_error(ENOSPC, "Could not rewrite the header: it does not fit in "
                                 "cluster 0");
    }
    if (h.version >= 3 && h.header_length > QCOW2_HDR_V3_FULL_LENGTH) {
        /* unknown header fields: kept as they were */
        memcpy(buf + QCOW2_HDR_V3_FULL_LENGTH, old + QCOW2_HDR_V3_FULL_LENGTH,
               h.header_length - QCOW2_HDR_V3_FULL_LENGTH);
    }
    len = MIN(ROUND_UP(MAX(used, old_end), 512), cs); /* invariant 3 */
    ret = qcow2_write_metadata_locked(s, BLKEV_HEADER_UPDATE, QCOW2_OL_MAIN_HEADER, 0,
                                      buf, len, true);
    if (ret < 0) {
        return ret;
    }
    /* invariant 4 */
    s->header.backing_file_offset = h.backing_file_offset;
    s->header.backing_file_size = h.backing_file_size;
    s->header.autoclear_features = h.autoclear_features;
    s->autoclear_features = h.autoclear_features;
    if (e->set_bitmaps) {
        s->ext.has_bitmaps = e->bitmaps.nb_bitmaps > 0;
        s->ext.bitmaps = e->bitmaps;
    }
    header_edit_follow(s, e, &h);
    return 0;
}

int qcow2_set_backing(BlkNode *img, const char *backing, const char *fmt)
{
    Qcow2State *s = img->opaque;
    Qcow2HeaderEdit e = {.set_backing = true};
    int ret;

    if (backing && !*backing) {
        backing = NULL;
    }
    if (backing && strlen(backing) > QCOW2_MAX_BACKING_NAME) {
        return blk_error(EINVAL, "Backing file name too long");
    }
    if (fmt && !blk_qemu_driver_name(fmt)) {
        return blk_error(EINVAL, "Invalid format name: '%s'", fmt);
    }
    e.backing = backing;
    e.fmt = fmt;
    qcow2_lock(s);
    ret = qcow2_header_rewrite_locked(s, &e);
    if (ret == 0) {
        g_free(img->backing_filename);
        img->backing_filename = g_strdup(backing);
        g_free(img->backing_format);
        img->backing_format = backing ? g_strdup(fmt) : NULL;
        g_free(s->ext.backing_format);
        s->ext.backing_format = backing ? g_strdup(fmt) : NULL;
    }
    qcow2_unlock(s);
    return ret;
}
