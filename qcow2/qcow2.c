/*
 * qcow2/qcow2.c: the qcow2 driver table: probe, open, close, info.
 *
 * Owns: the open sequence (header -> tables -> caches -> data file ->
 * backing name -> snapshots -> snapshot view), also on a header held in
 * memory for create, the state lifetime and the driver-specific image
 * information.
 *
 * Invariants (cited as "qcow2.c invariant N"):
 *  1. open() either succeeds with every [open] field of Qcow2State set
 *     (qcow2.h), or fails with a message and leaves nothing allocated
 *     (img->opaque is NULL again).
 *  2. Nothing is read before it is validated: cluster 0 is read padded with
 *     zeros (as QEMU reads short files), then header.c validates the fields
 *     and table locations before any table is read.  Allocations are bounded
 *     by validated sizes (L1 <= 32 MiB, refcount table <= 8 MiB).
 *  3. img->size is the header size rounded down to 512 bytes (QEMU keeps
 *     sectors); a snapshot view keeps it (snapshot.c invariant 4).
 *  4. With the external data file bit, guest data is read from the data
 *     file node only; the node is owned here and closed at close().  It is
 *     locked as a data file (block/lock.c), with the image's force_share
 *     and no_io; a lock conflict there reads as QEMU's, with no prefix.
 *     A data file the caller names (BlkOpenOptions.data_file_path, the
 *     "data-file" option) replaces the header's, opened as given (a
 *     blkdebug: name the caller built, json-name.c invariant 13, as that
 *     test node over the file; a null-co:// node with its own options,
 *     json-name.c invariant 16; also when the image names none: without
 *     either, a full open is refused, a metadata-only one as info's goes
 *     on, as QEMU's); as QEMU,
 *     it is opened first and then refused ("'data-file' can only be set
 *     ...") on an image without the bit, and its failure is its own
 *     message, unprefixed.
 *  5. Metadata cache sizes follow QEMU's defaults: L2 cache big enough for
 *     the whole image up to 32 MiB, refcount cache 4 clusters; the options
 *     cache-size (metadata_cache_size), l2-cache-size and
 *     refcount-cache-size are checked and split as QEMU's read_cache_sizes
 *     does, with its messages, and so are QEMU's limits ("L2 cache size
 *     too big": more than INT_MAX entries of l2-cache-entry-size, QEMU's
 *     4 KiB slices by default when the cache does not cover the image;
 *     "Refcount cache size too big"; "Cache clean interval too big": more
 *     than UINT_MAX seconds, default 600, clean.c).  l2-cache-entry-size
 *     is checked as QEMU checks it and sets the L2 cache's slices
 *     (cluster.c invariant 6); without it the slices are whole tables
 *     (QEMU's implicit 4 KiB slices only save memory).
 *  6. A read-write open (not a snapshot view) makes the state writable and
 *     clears unknown autoclear bits on disk (meta.c); an image with the
 *     corrupt bit was already refused unless check_mode (header.c).
 *  7. close() of a writable image that is not marked corrupt and met no
 *     sticky error (meta.c invariant 9) flushes as a guest flush does
 *     (pending frees applied), writes both caches, flushes the file and
 *     clears the dirty bit (clean shutdown); errors there are only logged:
 *     qimg_image_close() flushed and reported before.
 *  8. A read-write open (not check_mode) of an image with the dirty bit runs
 *     the repair (check.c, FIX_LEAKS | FIX_ERRORS) before anything else may
 *     write, and fails with "Could not repair dirty image" if it cannot.
 *     As QEMU, the check's lines (the ones qimg check -r prints: "ERROR
 *     cluster N ...", "Repairing cluster N ...", "Rebuilding refcount
 *     structure") go to standard error as it finds them, none when it finds
 *     nothing (g_printerr: an embedder redirects it, meta.c invariant 3),
 *     and none when the open is QEMU's reopen of a layer already open
 *     (BlkOpenOptions.reopen: qemu-img commit's base), which repairs
 *     nothing and prints nothing in QEMU; qimg still repairs (DESIGN.md
 *     rule 5), quietly.
 *  9. qcow2_open_new() is the same open for an image being created, whose
 *     cluster 0 is still zeros (create.c invariant 5): cluster 0 comes from
 *     memory and goes through every check of invariant 2 as if read, and
 *     the data file is the node create opened.
 * 10. An encrypted image (crypt_method 1 or 2) is opened by crypt.c:
 *     with the key its encrypt.key-secret unlocks, or, for qemu-img info's
 *     metadata-only open (read-only, no_io; never a writable, check or
 *     snapshot open), without a key -- then no guest data can be read or
 *     written (crypt.c invariant 2).  Its LUKS header is decoded either
 *     way (info shows it).
 * 11. The same metadata-only open never opens an external data file, the
 *     header's or the caller's (CVE-2024-4467: qemu-img info must be safe
 *     on an untrusted image; QEMU's fix does the same): the image still
 *     has a data file (qcow2_has_data_file(), info's data-file and
 *     data-file-raw), but no guest data can be read from it (crypt.c
 *     invariant 2's refusal) and block status points into no file
 *     (read.c invariant 5).
 */
#include "qcow2/bitmap.h"
#include "qcow2/qcow2.h"
#include "qcow2/check.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

static int qcow2_probe(const uint8_t *buf, size_t len, const char *filename)
{
    /* QEMU: the magic and version >= 2 (qcow v1 shares the magic); a short
     * header is then refused by open with a message, not read as raw. */
    if (len >= QCOW2_HDR_VERSION + 4 && load_be32(buf + QCOW2_HDR_MAGIC) == QCOW2_MAGIC &&
        load_be32(buf + QCOW2_HDR_VERSION) >= 2) {
        return 100;
    }
    return 0;
}

static void state_free(Qcow2State *s)
{
    if (!s) {
        return;
    }
    qcow2_clean_stop(s->clean); /* clean.c invariant 3: before the caches go */
    qcow2_free_snapshots(s);
    qcow2_refcount_close(s);
    qcow2_cache_free(s->l2_cache);
    qcow2_fastmap_free(s->fastmap);
    qcow2_bitmaps_free(s);
    g_free(s->l1_table);
    qcow2_crypt_close(s);
    if (s->data_file) {
        blk_close(s->data_file);
    }
    qcow2_extensions_free(&s->ext);
    g_free(s->unknown_header_fields);
    g_free(s->deferred_msg);
    g_free(s->sticky_msg);
    if (s->pending_frees) {
        g_array_free(s->pending_frees, TRUE);
    }
    if (s->pending_hooks) {
        g_array_free(s->pending_hooks, TRUE);
    }
    g_mutex_clear(&s->lock);
    g_free(s);
}

/* Read [0, len) of the file, zeros past its end (qcow2.c invariant 2). */
static int read_padded(BlkNode *file, uint64_t file_size, uint8_t *buf, size_t len)
{
    size_t n = (size_t)MIN((uint64_t)len, file_size);

    memset(buf, 0, len);
    if (n == 0) {
        return 0;
    }
    int ret = blk_pread(file, 0, buf, n);
    return ret < 0 ? ret : 0;
}

static void set_geometry(Qcow2State *s)
{
    const Qcow2Header *h = &s->header;

    s->qcow_version = h->version;
    s->cluster_bits = h->cluster_bits;
    s->cluster_size = UINT64_C(1) << h->cluster_bits;
    s->extended_l2 = h->incompatible_features & QCOW2_INCOMPAT_EXTL2;
    s->l2_entry_size = s->extended_l2 ? 16 : 8;
    s->l2_bits = s->cluster_bits - (s->extended_l2 ? 4 : 3);
    s->l2_size = UINT64_C(1) << s->l2_bits;
    s->l2_slice_bits = s->l2_bits; /* whole tables until the options say (open) */
    s->l2_slice_size = s->l2_size;
    s->subclusters_per_cluster = s->extended_l2 ? QCOW2_EXTL2_SUBCLUSTERS : 1;
    s->subcluster_bits = s->cluster_bits - (s->extended_l2 ? 5 : 0);
    s->csize_shift = 62 - (s->cluster_bits - 8);
    s->csize_mask = (UINT64_C(1) << (s->cluster_bits - 8)) - 1;
    s->cluster_offset_mask = (UINT64_C(1) << s->csize_shift) - 1;
    s->refcount_order = h->refcount_order;
    s->refcount_bits = 1u << h->refcount_order;
    /* entries per block = cluster_size * 8 / refcount_bits */
    s->refcount_block_bits = s->cluster_bits + 3 - h->refcount_order;
    s->refcount_max =
        s->refcount_bits == 64 ? UINT64_MAX : (UINT64_C(1) << s->refcount_bits) - 1;
    s->compression_type = h->compression_type;
    s->incompatible_features = h->incompatible_features;
    s->compatible_features = h->compatible_features;
    s->autoclear_features = h->autoclear_features;
}

/* qcow2.c invariant 5 (QEMU's read_cache_sizes and the checks after it):
 * the L2 and refcount cache sizes in bytes and the cache-clean-interval
 * from opts (may be NULL); -EINVAL with QEMU's message for a combination
 * it refuses. */
static int cache_sizes(const Qcow2State *s, uint64_t virtual_size,
                       const BlkOpenOptions *opts, uint64_t *l2_bytes,
                       uint64_t *entry_bytes, uint64_t *refcount_bytes,
                       uint64_t *clean_interval)
{
    uint64_t max_l2_entries =
        virtual_size / s->cluster_size + (virtual_size % s->cluster_size != 0);
    /* virtual_size <= 2^61 (L1 <= 32 MiB), so this cannot overflow */
    uint64_t max_l2 = max_l2_entries * s->l2_entry_size;
    uint64_t min_refcount = QCOW2_MIN_REFCOUNT_CACHE_ENTRIES * s->cluster_size;
    bool combined_set =
        opts && (opts->metadata_cache_size_set || opts->metadata_cache_size);
    bool l2_set = opts && opts->l2_cache_size_set;
    bool rc_set = opts && opts->refcount_cache_size_set;
    bool entry_set = opts && opts->l2_cache_entry_size_set;
    uint64_t combined = combined_set ? opts->metadata_cache_size : 0;
    uint64_t l2_setting = l2_set ? opts->l2_cache_size : QCOW2_DEFAULT_L2_CACHE_MAX;
    uint64_t entry = entry_set ? opts->l2_cache_entry_size : s->cluster_size;

    max_l2 = (max_l2 + s->cluster_size - 1) & ~(s->cluster_size - 1);
    *entry_bytes = s->cluster_size;
    *refcount_bytes = rc_set ? opts->refcount_cache_size : 0;
    *l2_bytes = MIN(max_l2, l2_setting);
    *clean_interval = opts && opts->cache_clean_interval_set
                          ? opts->cache_clean_interval
                          : QCOW2_DEFAULT_CACHE_CLEAN_INTERVAL;
    if (combined_set) {
        if (l2_set && rc_set) {
            return blk_error(EINVAL, "cache-size, l2-cache-size and refcount-cache-size "
                                     "may not be set at the same time");
        }
        if (l2_set && l2_setting > combined) {
            return blk_error(EINVAL, "l2-cache-size may not exceed cache-size");
        }
        if (*refcount_bytes > combined) {
            return blk_error(EINVAL, "refcount-cache-size may not exceed cache-size");
        }
        if (l2_set) {
            *refcount_bytes = combined - *l2_bytes;
        } else if (rc_set) {
            *l2_bytes = combined - *refcount_bytes;
        } else if (combined >= max_l2 + min_refcount) {
            *l2_bytes = max_l2;
            *refcount_bytes = combined - max_l2;
        } else {
            *refcount_bytes = MIN(combined, min_refcount);
            *l2_bytes = combined - *refcount_bytes;
        }
    }
    if (*l2_bytes < max_l2 && !entry_set) {
        entry = MIN(s->cluster_size, 4096); /* QEMU's slice when not all fits */
    }
    if (entry < 512 || entry > s->cluster_size || (entry & (entry - 1)) != 0) {
        return blk_error(EINVAL,
                         "L2 cache entry size must be a power of two between 512 and "
                         "the cluster size (%" PRIu64 ")",
                         s->cluster_size);
    }
    /* QEMU counts cache entries in an int; the minimums (2 L2 entries, 4
     * refcount blocks) are the caches' own */
    if (*l2_bytes / entry > INT_MAX) {
        return blk_error(EINVAL, "L2 cache size too big");
    }
    if (*refcount_bytes / s->cluster_size > INT_MAX) {
        return blk_error(EINVAL, "Refcount cache size too big");
    }
    if (*clean_interval > UINT_MAX) {
        return blk_error(EINVAL, "Cache clean interval too big");
    }
    /* The slices are the given size; without the option whole tables
     * (QEMU's implicit 4 KiB slices only save memory). */
    *entry_bytes = entry_set ? entry : s->cluster_size;
    return 0;
}

/* given: the caller's data-file option (invariant 4), else NULL. */
static int open_data_file(Qcow2State *s, const char *filename, const BlkOpenOptions *opts)
{
    const char *given = opts ? opts->data_file_path : NULL;
    /* A test node under the image means filename is the user's own
     * "record:LOG:FILE"-style name (block.h invariant 5). */
    const char *base = s->img->file->filtered ? blk_plain_name(filename) : filename;
    g_autofree char *path =
        given ? g_strdup(given) : blk_resolve_backing_name(base, s->ext.data_file);
    g_autofree char *msg = NULL;
    BlkOpenOptions o = s->img->opts;
    int code;

    o.read_only = s->img->read_only;
    o.cache = s->img->cache;
    o.no_locking = false; /* file.locking is the image file's (lock.c inv. 6) */
    o.blkdebug_align = 0; /* so is file.align (json-name.c invariant 13) */
    if (given && opts->data_file_opts) {
        /* invariant 4: the caller's null node, with its own options */
        const BlkOpenOptions *d = opts->data_file_opts;
        o.null_size_set = d->null_size_set;
        o.null_size = d->null_size;
        o.null_read_zeroes = d->null_read_zeroes;
        o.null_latency_ns = d->null_latency_ns;
        s->data_file = blk_open_protocol(path, &o, BLK_ROLE_DATA, BLK_OPEN_USER_NAME);
    } else if (given && blk_protocol_for(given, BLK_OPEN_USER_NAME)->test_node) {
        /* invariant 4: the caller's fault node over its data file */
        s->data_file = blk_open_protocol(path, &o, BLK_ROLE_DATA, BLK_OPEN_USER_NAME);
    } else {
        s->data_file = blk_open_file_like(s->img->file, path, &o, BLK_ROLE_DATA);
    }
    if (s->data_file) {
        return 0;
    }
    /* QEMU names the data file as its own child, unprefixed (Debian's
     * qemu-img 7.2: "Could not open 'd.raw': No such file or directory");
     * a lock conflict gets QEMU's wording one layer up, a deliberate
     * rewording (error.c inv 2) */
    code = blk_error_code() ? blk_error_code() : EIO;
    if (given || code != EAGAIN) {
        return blk_error_code() ? -code : blk_error(code, "Could not open '%s'", path);
    }
    msg = blk_error_take();
    if (msg) {
        return blk_error_replace(EAGAIN, "%s", blk_open_error_detail(msg, code, path));
    }
    return blk_error(code, "Could not open '%s'", path);
}

/* DESIGN.md rule 5: a dirty image (lazy refcounts, not closed cleanly) has
 * its refcounts rebuilt before it is written (QEMU's qcow2_do_open). */
static int repair_dirty(BlkNode *img, bool quiet)
{
    BlkCheckResult res = {0};
    g_autofree char *msg = NULL;
    int ret;

    ret = qcow2_check_image(img, &res, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS);
    for (guint i = 0; !quiet && res.messages && i < res.messages->len; i++) {
        g_printerr("%s\n", (const char *)res.messages->pdata[i]); /* invariant 8 */
    }
    if (ret == 0 && res.check_errors) {
        ret = -EIO;
    }
    blk_check_result_clear(&res);
    if (ret < 0) {
        msg = blk_error_take();
        /* QEMU's error_setg_errno: the cause, else the errno's text */
        return blk_error_replace(-ret, "Could not repair dirty image: %s",
                                 msg ? msg : g_strerror(-ret));
    }
    return 0;
}

/* hdr: cluster 0 from memory instead of the file (qcow2_open_new). */
static int do_open(Qcow2State *s, const char *filename, const BlkOpenOptions *opts,
                   const uint8_t *hdr)
{
    BlkNode *img = s->img;
    bool check_mode = opts && opts->check_mode;
    const char *snapshot = opts ? opts->snapshot : NULL;
    /* invariant 10: qemu-img info's open; never a writable or data one */
    Qcow2CryptOpen crypt = {
        .metadata_only =
            opts && opts->no_io && img->read_only && !check_mode && !snapshot && !hdr,
        .key_secret = opts ? opts->key_secret : NULL,
        .secret_exists = opts && opts->key_secret && opts->secrets &&
                         g_hash_table_contains(opts->secrets, opts->key_secret),
        .key_from = opts && opts->key_from && opts->key_from->drv == &blk_qcow2_driver,
        .key_secret_null = opts && opts->key_secret_null,
        .format = opts ? opts->encrypt_format : NULL,
        .unexpected = opts ? opts->encrypt_unexpected : NULL,
    };
    uint8_t head[QCOW2_HDR_V3_FULL_LENGTH];
    g_autofree uint8_t *cluster0 = NULL;
    Qcow2Header h;
    uint64_t l2_bytes, entry_bytes, refcount_bytes, clean_interval;
    int64_t len;
    int ret;

    if (snapshot) {
        img->read_only = true; /* snapshot.c invariant 4 */
    }
    len = blk_getlength(img->file);
    if (len < 0) {
        return (int)len;
    }
    s->file_size = (uint64_t)len;

    if (hdr) {
        memcpy(head, hdr, sizeof(head));
    } else {
        ret = read_padded(img->file, s->file_size, head, sizeof(head));
        if (ret < 0 && !blk_error_code()) { /* an errno alone: QEMU's words */
            return blk_error(-ret, "Could not read qcow2 header: %s", g_strerror(-ret));
        }
        if (ret < 0) {
            return ret;
        }
    }
    ret = qcow2_header_decode(head, sizeof(head), &h);
    if (ret < 0) {
        return ret;
    }
    /* cluster_bits <= 21: at most 2 MiB */
    if (hdr) {
        cluster0 = g_memdup2(hdr, UINT64_C(1) << h.cluster_bits);
    } else {
        cluster0 = g_malloc(UINT64_C(1) << h.cluster_bits);
        ret =
            read_padded(img->file, s->file_size, cluster0, UINT64_C(1) << h.cluster_bits);
        if (ret < 0) {
            return ret;
        }
    }
    ret = qcow2_header_parse(cluster0, UINT64_C(1) << h.cluster_bits, s->file_size,
                             !img->read_only, check_mode, &crypt, &s->header, &s->ext);
    if (ret < 0) {
        return ret;
    }
    set_geometry(s);
    if (opts && opts->lazy_refcounts) { /* QEMU's lazy-refcounts option */
        if (opts->lazy_refcounts > 0 && s->qcow_version < 3) {
            return blk_error(EINVAL, "Lazy refcounts require a qcow2 image with at least "
                                     "qemu 1.1 compatibility level");
        }
        s->lazy_override = opts->lazy_refcounts;
    }
    /* alloc.c invariant 9: QEMU's defaults, then the caller's options */
    s->pass_discard[QCOW2_DISCARD_ALWAYS] = true;
    s->pass_discard[QCOW2_DISCARD_REQUEST] = !opts || opts->pass_discard_request >= 0;
    s->pass_discard[QCOW2_DISCARD_SNAPSHOT] = !opts || opts->pass_discard_snapshot >= 0;
    s->pass_discard[QCOW2_DISCARD_OTHER] = opts && opts->pass_discard_other > 0;
    s->overlap_checks = opts && opts->overlap_set ? opts->overlap_kinds : QCOW2_OL_CACHED;
    if (opts) { /* meta.c invariant 1: QEMU's overlap-check option */
        s->overlap_checks = (s->overlap_checks | opts->overlap_on) & ~opts->overlap_off;
    }
    ret = qcow2_crypt_open(s, opts, crypt.metadata_only); /* invariant 10 */
    if (ret < 0) {
        return ret;
    }
    if (s->header.header_length > QCOW2_HDR_V3_FULL_LENGTH) {
        s->unknown_header_fields_size =
            s->header.header_length - QCOW2_HDR_V3_FULL_LENGTH;
        s->unknown_header_fields =
            g_memdup2(cluster0 + QCOW2_HDR_V3_FULL_LENGTH, s->unknown_header_fields_size);
    }
    img->size = s->header.size & ~UINT64_C(511);   /* qcow2.c invariant 3 */
    img->cluster_size = (uint32_t)s->cluster_size; /* the vmstate buffer grid */
    qcow2_size_to_l1(s->header.size, s->cluster_bits, s->l2_bits, &s->l1_vm_state_index);

    s->l1_size = s->header.l1_size;
    s->l1_table_offset = s->header.l1_table_offset;
    ret = qcow2_read_table(img->file, s->l1_table_offset, s->l1_size, &s->l1_table);
    if (ret < 0) {
        return ret;
    }
    ret = cache_sizes(s, img->size, opts, &l2_bytes, &entry_bytes, &refcount_bytes,
                      &clean_interval);
    if (ret < 0) {
        return ret;
    }
    /* cluster.c invariant 6: a power of two in [512, cluster size] */
    s->l2_slice_bits = (uint32_t)g_bit_nth_lsf(entry_bytes / s->l2_entry_size, -1);
    s->l2_slice_size = UINT64_C(1) << s->l2_slice_bits;
    qcow2_l2_cache_init(s, l2_bytes);
    s->clean = qcow2_clean_new(s, clean_interval); /* clean.c invariant 1 */
    s->fastmap =
        qcow2_fastmap_new(s->cluster_bits, DIV_ROUND_UP(img->size, s->cluster_size));
    ret = qcow2_refcount_init(s, refcount_bytes);
    if (ret < 0) {
        return ret;
    }

    if (hdr && !!(s->header.incompatible_features & QCOW2_INCOMPAT_DATA_FILE) !=
                   !!s->data_file) {
        return blk_error(EINVAL, "qcow2: the data file does not match the header");
    }
    if (crypt.metadata_only &&
        (s->header.incompatible_features & QCOW2_INCOMPAT_DATA_FILE)) {
        s->data_file_skipped = true; /* invariant 11 */
        s->data_file_raw = s->autoclear_features & QCOW2_AUTOCLEAR_DATA_FILE_RAW;
    } else if (crypt.metadata_only) {
        /* invariant 11: a data-file option is not opened either */
    } else if (opts && opts->data_file_path && !s->data_file &&
               !(s->header.incompatible_features & QCOW2_INCOMPAT_DATA_FILE)) {
        /* invariant 4: QEMU opens the option's file first, then refuses */
        ret = open_data_file(s, filename, opts);
        if (ret < 0) {
            return ret;
        }
        return blk_error(EINVAL,
                         "'data-file' can only be set for images with an external data "
                         "file");
    } else if ((s->header.incompatible_features & QCOW2_INCOMPAT_DATA_FILE) &&
               !s->data_file) {
        if (!s->ext.data_file && !(opts && opts->data_file_path)) {
            /* invariant 4: no name in the image, none from the caller */
            return blk_error(EINVAL, "'data-file' is required for this image");
        }
        ret = open_data_file(s, filename, opts); /* inv 4 */
        if (ret < 0) {
            return ret;
        }
        s->data_file_raw = s->autoclear_features & QCOW2_AUTOCLEAR_DATA_FILE_RAW;
    }

    ret = qcow2_read_backing_name(cluster0, &s->header, &img->backing_filename);
    if (ret < 0) {
        return ret;
    }
    if (img->backing_filename && s->ext.backing_format) {
        img->backing_format = g_strdup(s->ext.backing_format);
    }

    ret = qcow2_read_snapshots(s, check_mode);
    if (ret < 0) {
        return ret;
    }
    ret = qcow2_bitmap_dir_check_open(s); /* bitmap.c invariant 3 */
    if (ret < 0) {
        return ret;
    }
    if (snapshot) {
        ret = qcow2_snapshot_load_view(s, snapshot);
        if (ret < 0) {
            return ret;
        }
    }
    if (!img->read_only) {
        /* qcow2.c invariant 6 */
        qcow2_lock(s);
        ret = qcow2_open_rw_locked(s);
        qcow2_unlock(s);
        if (ret < 0) {
            return ret;
        }
        if (!check_mode && (s->incompatible_features & QCOW2_INCOMPAT_DIRTY)) {
            ret = repair_dirty(img, opts && opts->reopen); /* invariant 8 */
            if (ret < 0) {
                return ret;
            }
        }
        if (!check_mode) { /* bitmap-store.c invariant 1: in use from the open */
            qcow2_lock(s);
            ret = qcow2_bitmaps_begin_write_locked(s);
            qcow2_unlock(s);
            if (ret < 0) {
                return ret;
            }
        }
    }
    img->request_alignment = 1;
    return 0;
}

static int open_state(BlkNode *img, const char *filename, const BlkOpenOptions *opts,
                      const uint8_t *hdr, BlkNode *data_file)
{
    Qcow2State *s = g_new0(Qcow2State, 1);
    int ret;

    g_mutex_init(&s->lock);
    s->img = img;
    s->snapshot_view = -1;
    s->data_file = data_file; /* owned from here on */
    img->opaque = s;
    blk_error_clear();
    ret = do_open(s, filename, opts, hdr);
    if (ret < 0) {
        /* qcow2.c invariant 1 */
        g_free(img->backing_filename);
        img->backing_filename = NULL;
        g_free(img->backing_format);
        img->backing_format = NULL;
        state_free(s);
        img->opaque = NULL;
        return ret;
    }
    return 0;
}

static int qcow2_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    return open_state(img, filename, opts, NULL, NULL);
}

int qcow2_open_new(BlkNode *img, const uint8_t *cluster0, BlkNode *data_file)
{
    return open_state(img, img->filename, NULL, cluster0, data_file);
}

/* fdatasync of the image file and the data file, lock not held. */
static int flush_files_unlocked(Qcow2State *s)
{
    int ret = blk_flush(s->img->file);

    if (ret == 0 && s->data_file) {
        ret = blk_flush(s->data_file);
    }
    return ret;
}

/*
 * A guest flush (meta.c invariant 11) that drops the metadata lock across
 * each fdatasync (meta.c invariant 12), so cache hits and data I/O of other
 * threads go on meanwhile.  What they change in between is ordered by the
 * caches' own dependencies (cache.c invariant 4) and reaches the disk with
 * the next flush; the pending frees applied here are only those queued
 * before the L2 tables this flush made durable.
 */
int qcow2_flush(BlkNode *img)
{
    Qcow2State *s = img->opaque;
    g_autoptr(GArray) frees = NULL;
    uint64_t gen = 0;
    int ret;

    if (!s->writable) {
        return 0;
    }
    qcow2_lock(s);
    ret = qcow2_check_writable_locked(s);
    if (ret == 0 && qcow2_need_accurate_refcounts(s)) {
        ret = qcow2_cache_flush_locked(s->refcount_cache); /* refcount blocks */
    }
    qcow2_unlock(s);
    if (ret == 0) {
        ret = flush_files_unlocked(s); /* ... durable */
    }
    qcow2_lock(s);
    if (ret == 0) {
        frees = g_steal_pointer(&s->pending_frees);
        ret = qcow2_cache_flush_locked(s->l2_cache); /* L2 tables */
        gen = blk_write_gen(s->img->file);
    }
    qcow2_unlock(s);
    if (ret == 0) {
        ret = flush_files_unlocked(s); /* ... durable */
    }
    qcow2_lock(s);
    if (ret == 0 && frees && frees->len > 0) {
        /* alloc.c invariant 2: the tables that dropped them are durable */
        qcow2_assert_durable(s->img->file, gen, "alloc.c invariant 2");
        qcow2_free_ranges_locked(s, frees);
        g_clear_pointer(&frees, g_array_unref);
        if (qcow2_need_accurate_refcounts(s)) {
            ret = qcow2_cache_flush_locked(s->refcount_cache);
        }
        qcow2_unlock(s);
        if (ret == 0) {
            ret = flush_files_unlocked(s);
        }
        qcow2_lock(s);
    }
    if (frees && frees->len > 0) {
        /* not applied (a write or flush failed): they wait, as leaks */
        if (!s->pending_frees) {
            s->pending_frees = g_steal_pointer(&frees);
        } else {
            g_array_prepend_vals(s->pending_frees, frees->data, frees->len);
        }
    }
    qcow2_set_sticky_locked(s, ret); /* meta.c invariant 9 */
    ret = qcow2_take_deferred_error_locked(s, ret);
    qcow2_unlock(s);
    return ret;
}

static int qcow2_close_retry(BlkNode *img, bool *retried)
{
    Qcow2State *s = img->opaque;

    qcow2_lock(s);
    int ret = qcow2_close_retry_locked(s, retried); /* meta.c invariant 13 */
    qcow2_unlock(s);
    return ret;
}

static void qcow2_close(BlkNode *img)
{
    Qcow2State *s = img->opaque;

    if (s && s->writable && !s->corrupt_fatal && !s->sticky_error) {
        /* qcow2.c invariant 7 */
        bool had_error = blk_error_mark();
        qcow2_lock(s);
        int ret = qcow2_bitmaps_store_locked(s, true); /* bitmap-store.c inv. 3, 6 */
        if (ret < 0) {
            g_debug("qcow2: storing the bitmaps of '%s' failed: %s", img->filename,
                    blk_error_message() ? blk_error_message() : g_strerror(-ret));
        }
        ret = qcow2_flush_all_locked(s);
        if (ret == 0) {
            ret = qcow2_write_caches_locked(s, true);
        }
        if (ret == 0) {
            qcow2_grow_stop_locked(s); /* grow.c invariant 4 */
        }
        if (ret == 0) {
            ret = qcow2_flush_file(s);
        }
        if (ret == 0) {
            ret = qcow2_mark_clean_locked(s);
        }
        if (ret < 0) {
            g_debug("qcow2: flush at close of '%s' failed: %s", img->filename,
                    blk_error_message() ? blk_error_message() : g_strerror(-ret));
        }
        qcow2_unlock(s);
        blk_error_unwind(had_error);
    }
    state_free(s);
    img->opaque = NULL;
}

/* A new image reads as zeros unless a backing file shows through (QEMU's
 * bdrv_has_zero_init) or a raw data file holds old contents.  A
 * preallocated image (its last L1 entry set, as QEMU tests it) maps its
 * clusters to whatever the data file held: zeros only if that reads as
 * zeros (not a block device), and never when encrypted: zeros on disk
 * decrypt to noise (QEMU iotest 188: a convert must write the zeros). */
static bool qcow2_has_zero_init(BlkNode *img)
{
    Qcow2State *s = img->opaque;
    BlkNode *data = qcow2_data_node(s);
    bool preallocated;

    if (img->backing || img->backing_filename || (s->data_file && s->data_file_raw)) {
        return false;
    }
    qcow2_lock(s);
    preallocated = s->l1_size > 0 && s->l1_table[s->l1_size - 1] != 0;
    qcow2_unlock(s);
    if (preallocated && s->encrypted) {
        return false;
    }
    return !preallocated || (data->drv->has_zero_init && data->drv->has_zero_init(data));
}

static int64_t qcow2_get_allocated_size(BlkNode *img)
{
    /* QEMU 7.2 counts the image file only, not an external data file
     * (checked: qemu-img info actual-size). */
    return blk_get_allocated_size(img->file);
}

static int qcow2_get_info(BlkNode *img, BlkInfo *info)
{
    Qcow2State *s = img->opaque;
    int ret;

    qcow2_lock(s);
    info->cluster_size = (uint32_t)s->cluster_size;
    info->dirty = s->incompatible_features & QCOW2_INCOMPAT_DIRTY;
    info->encrypted = s->encrypted;
    if (s->luks) {
        crypto_luks_info(s->luks, &info->encrypt);
    }
    info->format_specific = true;
    g_free(info->compat);
    info->compat = g_strdup(s->qcow_version == 2 ? "0.10" : "1.1");
    g_free(info->compression_type);
    info->compression_type =
        g_strdup(s->compression_type == QCOW2_COMPRESSION_ZSTD ? "zstd" : "zlib");
    info->lazy_refcounts = s->compatible_features & QCOW2_COMPAT_LAZY_REFCOUNTS;
    info->refcount_bits = s->refcount_bits;
    info->corrupt = s->incompatible_features & QCOW2_INCOMPAT_CORRUPT;
    info->extended_l2 = s->extended_l2;
    g_free(info->data_file);
    info->data_file = g_strdup(s->ext.data_file);
    info->has_data_file = s->header.incompatible_features & QCOW2_INCOMPAT_DATA_FILE;
    info->data_file_raw = qcow2_has_data_file(s) && s->data_file_raw;
    if (!info->snapshots) {
        info->snapshots = g_array_new(FALSE, TRUE, sizeof(BlkSnapshotInfo));
    }
    qcow2_snapshot_list_append_locked(s, info->snapshots);
    if (info->bitmaps) {
        g_array_unref(info->bitmaps);
        info->bitmaps = NULL;
    }
    ret = s->qcow_version >= 3 ? qcow2_bitmaps_list_locked(s, &info->bitmaps) : 0;
    qcow2_unlock(s);
    return ret;
}

const BlkDriver blk_qcow2_driver = {
    .create = qcow2_create,
    .measure = qcow2_measure,
    .set_backing = qcow2_set_backing,
    .make_empty = qcow2_make_empty,
    .bitmap_op = qcow2_bitmap_op,
    .bitmap_extents = qcow2_bitmap_extents,
    .bitmap_merge = qcow2_bitmap_merge,
    .bitmaps_store = qcow2_bitmaps_store,
    .amend = qcow2_amend,
    .bitmaps_size = qcow2_bitmaps_size,
    .format_name = "qcow2",
    .is_protocol = false,
    .probe = qcow2_probe,
    .open = qcow2_open,
    .close = qcow2_close,
    .preadv = qcow2_preadv,
    .copy_in = qcow2_copy_in,
    .direct_begin = qcow2_direct_begin,
    .direct_end = qcow2_direct_end,
    .alloc_begin = qcow2_alloc_begin,
    .alloc_end = qcow2_alloc_end,
    .pwritev = qcow2_pwritev,
    .pwrite_zeroes = qcow2_pwrite_zeroes,
    .pdiscard = qcow2_pdiscard,
    .pwrite_compressed = qcow2_pwrite_compressed,
    .flush = qcow2_flush,
    .close_retry = qcow2_close_retry,
    .truncate = qcow2_truncate,
    .save_vmstate = qcow2_save_vmstate,
    .load_vmstate = qcow2_load_vmstate,
    .has_zero_init = qcow2_has_zero_init,
    .snapshot_create = qcow2_snapshot_create,
    .snapshot_check = qcow2_snapshot_check,
    .snapshot_goto = qcow2_snapshot_goto,
    .snapshot_delete = qcow2_snapshot_delete,
    .snapshot_list = qcow2_snapshot_list,
    .block_status = qcow2_block_status,
    .get_allocated_size = qcow2_get_allocated_size,
    .get_info = qcow2_get_info,
    .check = qcow2_check_image,
    .file_role = BLK_ROLE_METADATA,
    .allocates = true,
};
