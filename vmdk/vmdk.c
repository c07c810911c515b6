/*
 * vmdk/vmdk.c: the VMDK format driver -- probing, opening an image
 * (a sparse file with its embedded descriptor, or a descriptor file and
 * its extents), guest reads, block status, info and check.
 *
 * Owns: VmdkState's lifecycle, the extent list (vmdk.h invariant 1) and
 * the parent link (delta disks: parentFileNameHint / parentCID).
 *
 * Invariants (cited as "vmdk.c invariant N"):
 *  1. QEMU 7.2 decides what opens: the probe, the create types a
 *     descriptor file may have (monolithicFlat, vmfs, vmfsSparse, seSparse,
 *     twoGbMaxExtentSparse, twoGbMaxExtentFlat), the CIDs and the parent
 *     hint sought in the first 10 KiB of the descriptor (at 0x200 in a
 *     sparse file), with its messages; where QEMU would crash, loop or
 *     wrap, the open fails with a message naming the field.
 *  2. Extent names come from the image: they are resolved and checked by
 *     blk_image_name_path() (names.c invariant 1) and opened as plain
 *     files (never a protocol), through the image's own test nodes; the
 *     extents of a disk inside an OVA are members of the same archive
 *     (ova.c invariant 4), never host files.  With
 *     no_data_files (qemu-img info) no extent file is opened at all.
 *  3. A delta disk names its parent (parentFileNameHint) as a backing file
 *     of format vmdk.  Reading through to the parent first checks that its
 *     CID equals our parentCID (once per open, as QEMU): a mismatch fails
 *     the read, as in QEMU, with a message naming both CIDs.
 *  4. Reads take the driver lock only to map (vmdk.h invariant 4); data
 *     and compressed grains are read and inflated in the caller's thread
 *     (grain.c), so parallel readers inflate on every core.  A request maps
 *     a run of up to VMDK_READ_GRAINS compressed grains at once, and block
 *     status answers a run of compressed grains whole (as QEMU's answers
 *     merged: DATA | COMPRESSED, no offset), so a convert reads and writes
 *     them in chunks, not grain by grain.
 *  5. A compressed grain is a zlib stream: with markers, its length is the
 *     marker's and marker + data fit in two grains (QEMU's read); without,
 *     at most one grain is read as the stream.  It must inflate to cover
 *     what is read of it (grain.c invariant 1).
 */
#include "vmdk/vmdk.h"
#include "aio/mutex.h"
#include "block/ova.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>

/* QEMU's vmdk_probe: a magic, or a text whose first line that is not a
 * comment or blank is version=1|2|3. */
static int vmdk_probe(const uint8_t *buf, size_t len, const char *filename)
{
    const char *p = (const char *)buf, *end = p + len;

    if (len < 4) {
        return 0;
    }
    if (load_be32(buf) == VMDK3_MAGIC || load_be32(buf) == VMDK4_MAGIC) {
        return 100;
    }
    while (p < end) {
        if (*p == '#') {
            while (p < end && *p != '\n') {
                p++;
            }
            p++;
            continue;
        }
        if (*p == ' ') {
            while (p < end && *p == ' ') {
                p++;
            }
            if (p < end && *p == '\r') {
                p++;
            }
            if (p == end || *p != '\n') {
                return 0;
            }
            p++;
            continue;
        }
        for (char v = '1'; v <= '3'; v++) {
            char lf[] = {'v', 'e', 'r', 's', 'i', 'o', 'n', '=', v, '\n'};
            char crlf[] = {'v', 'e', 'r', 's', 'i', 'o', 'n', '=', v, '\r', '\n'};
            if ((end - p >= (ptrdiff_t)sizeof(lf) && memcmp(p, lf, sizeof(lf)) == 0) ||
                (end - p >= (ptrdiff_t)sizeof(crlf) &&
                 memcmp(p, crlf, sizeof(crlf)) == 0)) {
                return 100;
            }
        }
        return 0;
    }
    return 0;
}

static void state_free(VmdkState *s)
{
    if (!s) {
        return;
    }
    for (unsigned i = 0; i < s->num_extents; i++) {
        vmdk_extent_clear(&s->extents[i]);
    }
    g_free(s->extents);
    g_free(s->create_type);
    vmdk_gtc_free(s->gtc);
    vmdk_stream_pool_free(s);
    g_mutex_clear(&s->lock);
    g_mutex_clear(&s->pool_lock);
    g_free(s);
}

static void vmdk_close(BlkNode *img)
{
    VmdkState *s = img->opaque;

    if (s && !img->read_only) { /* write.c invariant 1: tables written last */
        bool had = blk_error_mark();
        mutex_lock(&s->lock);
        (void)vmdk_flush_sequence_locked(s);
        mutex_unlock(&s->lock);
        blk_error_unwind(had);
    }
    state_free(img->opaque);
    img->opaque = NULL;
}

/* Up to max bytes of img->file from off, NUL-terminated, zeros past EOF. */
static char *read_text(BlkNode *file, uint64_t off, size_t max, int *ret)
{
    char *buf = g_malloc0(max + 1);
    uint64_t size = file->size;

    *ret = 0;
    if (off < size) {
        *ret = blk_pread(file, off, buf, (size_t)MIN((uint64_t)max, size - off));
    }
    if (*ret < 0) {
        g_free(buf);
        return NULL;
    }
    return buf;
}

static VmdkExtent *add_extent(VmdkState *s)
{
    s->extents = g_renew(VmdkExtent, s->extents, s->num_extents + 1);
    VmdkExtent *e = &s->extents[s->num_extents];
    memset(e, 0, sizeof(*e));
    e->index = s->num_extents++;
    return e;
}

/* vmdk.h invariant 1: place ext after the previous one. */
static int place_extent(VmdkState *s, VmdkExtent *ext, uint64_t bytes)
{
    uint64_t start = ext->index ? s->extents[ext->index - 1].end : 0, end;

    if (vmdk_add(start, bytes, &end) || end > INT64_MAX) {
        return blk_error(EFBIG, "The extents of '%s' add up to more than 2^63 bytes",
                         s->img->filename);
    }
    ext->start = start;
    ext->end = end;
    return 0;
}

static BlkNode *open_extent_file(VmdkState *s, const char *path, bool data_only)
{
    BlkOpenOptions o = s->img->opts;

    o.read_only = s->img->read_only;
    o.cache = s->img->cache;
    if (blk_ova_member_node(s->img->file)) { /* invariant 2: a member */
        return blk_ova_open_sibling(s->img->file, path, &o);
    }
    return blk_open_file_like(s->img->file, path, &o,
                              data_only ? BLK_ROLE_DATA : BLK_ROLE_METADATA);
}

/* One extent line of a descriptor file (invariant 2). */
static int open_line(VmdkState *s, const VmdkExtentLine *l)
{
    BlkNode *img = s->img;
    bool flat = strcmp(l->type, "FLAT") == 0 || strcmp(l->type, "VMFS") == 0;
    uint64_t bytes, flat_off = 0;
    VmdkExtent *ext;
    int ret;

    /* desc.c: sectors > 0; a flat extent's offset >= 0 */
    if (vmdk_mul((uint64_t)l->sectors, VMDK_SECTOR, &bytes) ||
        (flat && (vmdk_mul((uint64_t)l->offset, VMDK_SECTOR, &flat_off) ||
                  flat_off > INT64_MAX || bytes > INT64_MAX - flat_off))) {
        return blk_error(EFBIG, "Invalid extent line for '%s': size or offset too large",
                         l->name);
    }
    ext = add_extent(s);
    ext->type = g_strdup(l->type);
    ext->flat = flat;
    ext->flat_offset = flat_off;
    /* invariant 2: a metadata-only open shows the name, checks nothing; in
     * an OVA, a member of the same archive (ova.c invariant 4) */
    BlkNode *member = blk_ova_member_node(img->file);
    if (member && img->opts.no_data_files) {
        bool had = blk_error_mark();
        if (blk_ova_sibling_name(member, "extent", l->name, &ext->filename) < 0) {
            ext->filename = g_strdup(l->name); /* shown as recorded */
        }
        blk_error_unwind(had);
        return place_extent(s, ext, bytes);
    }
    ret = member ? blk_ova_sibling_name(member, "extent", l->name, &ext->filename)
                 : blk_image_name_path(
                       blk_plain_name(img->filename),
                       blk_protocol_is_path(img->filename, BLK_OPEN_USER_NAME), "extent",
                       l->name, img->opts.trust_names || img->opts.no_data_files,
                       &ext->filename);
    if (ret < 0) {
        return ret;
    }
    if (img->opts.no_data_files) { /* vmdk.h invariant 2 */
        return place_extent(s, ext, bytes);
    }
    ext->file = open_extent_file(s, ext->filename, flat);
    if (!ext->file) {
        return -blk_error_code();
    }
    ext->own_file = true;
    if (flat) {
        ext->grain = bytes;
        return place_extent(s, ext, bytes);
    }
    if (strcmp(l->type, "SESPARSE") == 0) {
        ret = vmdk_extent_open_sesparse(s, ext, img->read_only);
    } else {
        uint8_t head[VMDK_SECTOR] = {0};
        if (ext->file->size < 4) {
            return blk_error(EINVAL, "File is too small, not a valid image");
        }
        ret = blk_pread(ext->file, 0, head, (size_t)MIN(ext->file->size, sizeof(head)));
        if (ret == 0) {
            ret = vmdk_extent_open_sparse(s, ext, head, img->read_only);
        }
    }
    if (ret < 0) {
        return ret;
    }
    return place_extent(s, ext, ext->end); /* the header's capacity */
}

static bool create_type_ok(const char *ct)
{
    static const char *const ok[] = {"monolithicFlat",       "vmfs",
                                     "vmfsSparse",           "seSparse",
                                     "twoGbMaxExtentSparse", "twoGbMaxExtentFlat"};
    for (size_t i = 0; i < G_N_ELEMENTS(ok); i++) {
        if (strcmp(ct, ok[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* A descriptor file (or a descriptor embedded in an empty sparse file). */
static int open_desc_file(VmdkState *s, const char *desc)
{
    char ct[VMDK_MAX_CREATE_TYPE + 1];
    g_autoptr(GArray) lines = g_array_new(false, false, sizeof(VmdkExtentLine));
    int ret;

    if (vmdk_desc_value(desc, "createType", ct, sizeof(ct)) < 0) {
        return blk_error(EINVAL, "invalid VMDK image descriptor");
    }
    if (!create_type_ok(ct)) {
        return blk_error(ENOTSUP, "Unsupported image type '%s'", ct);
    }
    s->create_type = g_strdup(ct);
    ret = vmdk_desc_extents(desc, lines);
    for (guint i = 0; ret == 0 && i < lines->len; i++) {
        ret = open_line(s, &g_array_index(lines, VmdkExtentLine, i));
    }
    return ret;
}

/* A sparse file holding its own descriptor (monolithicSparse,
 * streamOptimized, a lone vmfsSparse extent). */
static int open_sparse_file(VmdkState *s, const uint8_t *head)
{
    BlkNode *img = s->img;
    VmdkExtent *ext;
    int ret;

    if (load_be32(head) == VMDK4_MAGIC && load_le64(head + VMDK4_HDR_CAPACITY) == 0 &&
        load_le64(head + VMDK4_HDR_DESC_OFFSET) != 0) {
        /* QEMU: a descriptor with extents inside a sparse file of no data */
        uint64_t off;
        g_autofree char *desc = NULL;
        if (vmdk_mul(load_le64(head + VMDK4_HDR_DESC_OFFSET), VMDK_SECTOR, &off)) {
            return blk_error(EINVAL, "Invalid descriptor offset");
        }
        desc =
            read_text(img->file, off, (size_t)MIN(img->file->size, VMDK_DESC_MAX), &ret);
        return desc ? open_desc_file(s, desc) : ret;
    }
    ext = add_extent(s);
    ext->file = img->file;
    ext->filename = g_strdup(img->file->filename);
    ret = vmdk_extent_open_sparse(s, ext, head, img->read_only);
    return ret < 0 ? ret : place_extent(s, ext, ext->end);
}

/* Invariants 1 and 3: CIDs and the parent from the descriptor area. */
static int read_ids(VmdkState *s)
{
    BlkNode *img = s->img;
    g_autofree char *name = NULL;
    int ret;
    g_autofree char *area =
        read_text(img->file, s->desc_offset, VMDK_DESC_AREA - 1, &ret);

    if (!area) {
        return ret;
    }
    if (vmdk_desc_parent_hint(area, &name) < 0) {
        return blk_error(EINVAL, "Invalid parentFileNameHint in the descriptor");
    }
    if (vmdk_desc_cid(area, false, &s->cid) < 0) {
        return blk_error(EINVAL, "No valid CID in the descriptor");
    }
    if (vmdk_desc_cid(area, true, &s->parent_cid) < 0) {
        return blk_error(EINVAL, "No valid parentCID in the descriptor");
    }
    if (name) {
        img->backing_filename = g_steal_pointer(&name);
        img->backing_format = g_strdup("vmdk");
    }
    return 0;
}

/* QEMU's vmdk_co_get_info: one cluster size when the extents agree. */
static uint32_t common_grain(const VmdkState *s)
{
    const VmdkExtent *a;

    if (s->num_extents == 0) {
        return 0;
    }
    a = &s->extents[0];
    if (a->flat || !a->sparse_known || a->grain > UINT32_MAX) {
        return 0;
    }
    for (unsigned i = 1; i < s->num_extents; i++) {
        const VmdkExtent *b = &s->extents[i];
        if (b->flat != a->flat || b->compressed != a->compressed || !b->sparse_known ||
            b->grain != a->grain) {
            return 0;
        }
    }
    return (uint32_t)a->grain;
}

static int vmdk_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    VmdkState *s = g_new0(VmdkState, 1);
    uint8_t head[VMDK_SECTOR] = {0};
    uint64_t size = img->file->size;
    int ret;

    g_mutex_init(&s->lock);
    g_mutex_init(&s->pool_lock);
    s->img = img;
    s->gtc = vmdk_gtc_new();
    img->opaque = s;
    if (opts->snapshot) {
        ret = blk_error(ENOTSUP, "Failed to load snapshot: Block format 'vmdk' used by "
                                 "device '' does not support temporarily loading "
                                 "internal snapshots");
        goto fail;
    }
    if (size < 4) {
        ret = blk_error(EINVAL, "File is too small, not a valid image");
        goto fail;
    }
    ret = blk_pread(img->file, 0, head, (size_t)MIN(size, sizeof(head)));
    if (ret < 0) {
        goto fail;
    }
    if (load_be32(head) == VMDK3_MAGIC || load_be32(head) == VMDK4_MAGIC) {
        ret = open_sparse_file(s, head);
        s->desc_offset = 0x200;
    } else {
        g_autofree char *desc =
            read_text(img->file, 0, (size_t)MIN(size, VMDK_DESC_MAX), &ret);
        ret = desc ? open_desc_file(s, desc) : ret;
        s->desc_offset = 0;
    }
    if (ret == 0) {
        ret = read_ids(s);
    }
    if (ret < 0) {
        goto fail;
    }
    img->size = s->num_extents ? s->extents[s->num_extents - 1].end : 0;
    img->cluster_size = common_grain(s);
    return 0;

fail:
    state_free(s);
    img->opaque = NULL;
    g_free(img->backing_filename);
    img->backing_filename = NULL;
    g_free(img->backing_format);
    img->backing_format = NULL;
    return ret;
}

/* The extent holding guest byte off (< img->size). */
static VmdkExtent *find_extent(VmdkState *s, uint64_t off)
{
    unsigned lo = 0, hi = s->num_extents;

    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (off >= s->extents[mid].end) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < s->num_extents ? &s->extents[lo] : NULL;
}

VmdkExtent *vmdk_extent_for_write(VmdkState *s, uint64_t off)
{
    VmdkExtent *ext = find_extent(s, off);

    if (!ext) {
        blk_error(EIO, "Offset %" PRIu64 " is beyond the extents of '%s'", off,
                  s->img->filename);
    } else if (!ext->file) {
        blk_error(EIO, "Extent '%s' of '%s' was not opened (metadata only)",
                  ext->filename, s->img->filename);
        ext = NULL;
    }
    return ext;
}

/* vmdk_map_grains() under the lock (hosts: room for max, or NULL). */
static int map_locked_out(VmdkState *s, uint64_t off, uint64_t bytes, VmdkExtent **ext,
                          VmdkMap *m, uint64_t *hosts, unsigned max)
{
    int ret;

    *ext = find_extent(s, off);
    if (!*ext) {
        return blk_error(EIO, "Offset %" PRIu64 " is beyond the extents of '%s'", off,
                         s->img->filename);
    }
    if (!(*ext)->file) { /* vmdk.h invariant 2 */
        return blk_error(EIO, "Extent '%s' of '%s' was not opened (metadata only)",
                         (*ext)->filename, s->img->filename);
    }
    mutex_lock(&s->lock);
    ret = vmdk_map_grains(s, *ext, off, bytes, m, hosts, max);
    mutex_unlock(&s->lock);
    return ret;
}

/* Invariant 3. */
int vmdk_check_parent_cid(VmdkState *s)
{
    BlkNode *parent = s->img->backing;
    VmdkState *ps;

    if (__atomic_load_n(&s->cid_checked, __ATOMIC_ACQUIRE)) {
        return 0;
    }
    if (parent->drv->probe != vmdk_probe) {
        return blk_error(EINVAL,
                         "The parent of '%s' ('%s') is not a VMDK image, so it has no "
                         "CID to match parentCID %08" PRIx32,
                         s->img->filename, parent->filename, s->parent_cid);
    }
    ps = parent->opaque;
    if (ps->cid != s->parent_cid) {
        return blk_error(EINVAL,
                         "The parentCID of '%s' (%08" PRIx32 ") does not match the CID "
                         "of its parent '%s' (%08" PRIx32 ")",
                         s->img->filename, s->parent_cid, parent->filename, ps->cid);
    }
    __atomic_store_n(&s->cid_checked, true, __ATOMIC_RELEASE);
    return 0;
}

static int vmdk_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    VmdkState *s = img->opaque;
    size_t done = 0;
    int ret = 0;

    while (done < qiov->size && ret == 0) {
        uint64_t pos = offset + done;
        VmdkExtent *ext;
        VmdkMap m;
        BlkIOV part;
        uint64_t hosts[VMDK_READ_GRAINS], in_grain;

        ret =
            map_locked_out(s, pos, qiov->size - done, &ext, &m, hosts, VMDK_READ_GRAINS);
        if (ret < 0) {
            break;
        }
        size_t n = (size_t)MIN(m.bytes, (uint64_t)(qiov->size - done));
        iov_slice(&part, qiov, done, n);
        switch (m.kind) {
        case VMDK_MAP_UNALLOC:
            if (img->backing) {
                ret = vmdk_check_parent_cid(s);
                if (ret == 0) {
                    ret = blk_preadv_padded(img->backing, pos, &part);
                }
            } else {
                iov_memset(&part, 0, 0, n);
            }
            break;
        case VMDK_MAP_ZERO:
            iov_memset(&part, 0, 0, n);
            break;
        case VMDK_MAP_DATA:
            ret = blk_preadv(ext->file, m.host, &part, 0);
            break;
        case VMDK_MAP_COMPRESSED:
            in_grain = (pos - ext->start) % ext->grain;
            ret = vmdk_read_grains(ext, hosts,
                                   (unsigned)DIV_ROUND_UP(in_grain + n, ext->grain),
                                   in_grain, &part);
            break;
        }
        iov_destroy(&part);
        done += n;
    }
    return ret;
}

static int vmdk_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    VmdkState *s = img->opaque;
    VmdkExtent *ext;
    VmdkMap m;
    int ret = map_locked_out(s, offset, bytes, &ext, &m, NULL, UINT_MAX);

    if (ret < 0) {
        return ret;
    }
    st->pnum = m.bytes;
    switch (m.kind) {
    case VMDK_MAP_UNALLOC:
        st->flags = 0;
        break;
    case VMDK_MAP_ZERO:
        st->flags = BLK_STATUS_ZERO;
        break;
    case VMDK_MAP_COMPRESSED:
        st->flags = BLK_STATUS_DATA | BLK_STATUS_COMPRESSED;
        st->file = ext->file;
        break;
    case VMDK_MAP_DATA:
        st->flags = BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID;
        st->map = m.host;
        st->file = ext->file;
        if (ext->flat) {
            /* QEMU recurses into a flat extent's file for its zeros */
            BlkStatus fst;
            if (blk_block_status(ext->file, m.host, m.bytes, &fst) == 0) {
                st->pnum = fst.pnum;
                st->flags |= fst.flags & BLK_STATUS_ZERO;
            }
            blk_error_clear();
        }
        break;
    }
    return 0;
}

static int64_t vmdk_get_allocated_size(BlkNode *img)
{
    VmdkState *s = img->opaque;
    int64_t total = blk_get_allocated_size(img->file);

    for (unsigned i = 0; total >= 0 && i < s->num_extents; i++) {
        const VmdkExtent *e = &s->extents[i];
        if (e->file && e->own_file) {
            int64_t r = blk_get_allocated_size(e->file);
            total = r < 0 ? r : total + r;
        }
    }
    return total;
}

static bool vmdk_has_zero_init(BlkNode *img)
{
    VmdkState *s = img->opaque;

    for (unsigned i = 0; i < s->num_extents; i++) {
        const VmdkExtent *e = &s->extents[i];
        if (e->flat && (!e->file || !e->file->drv->has_zero_init ||
                        !e->file->drv->has_zero_init(e->file))) {
            return false;
        }
    }
    return true;
}

static int vmdk_get_info(BlkNode *img, BlkInfo *info)
{
    VmdkState *s = img->opaque;

    info->cluster_size = common_grain(s);
    /* QEMU's needs_compressed_writes: the first extent is compressed */
    info->needs_compressed_writes = s->num_extents && s->extents[0].compressed;
    info->format_specific = true;
    info->vmdk.present = true;
    info->vmdk.cid = s->cid;
    info->vmdk.parent_cid = s->parent_cid;
    info->vmdk.create_type = g_strdup(s->create_type);
    info->vmdk.extents = g_array_new(false, true, sizeof(BlkVmdkExtentInfo));
    g_array_set_clear_func(info->vmdk.extents, blk_vmdk_extent_info_clear);
    for (unsigned i = 0; i < s->num_extents; i++) {
        const VmdkExtent *e = &s->extents[i];
        BlkVmdkExtentInfo x = {
            .filename = g_strdup(e->filename),
            .format = g_strdup(e->type ? e->type : ""),
            .virtual_size = e->end - e->start,
            .compressed = e->compressed,
            .cluster_size = !e->flat && e->sparse_known ? e->grain : 0,
            .opened = e->file != NULL,
        };
        g_array_append_val(info->vmdk.extents, x);
    }
    return 0;
}

/* The first grain of the answer m (at off) that starts at or past the end
 * of its file, or UINT64_MAX. */
static uint64_t first_past_eof(const VmdkExtent *ext, uint64_t off, const VmdkMap *m)
{
    uint64_t size = ext->file->size, in_grain, grain_host, k;

    if (m->kind == VMDK_MAP_COMPRESSED) {
        return m->host >= size ? off : UINT64_MAX;
    }
    if (m->kind != VMDK_MAP_DATA) {
        return UINT64_MAX;
    }
    if (ext->flat) {
        return m->host >= size && off == ext->start ? off : UINT64_MAX;
    }
    in_grain = (off - ext->start) % ext->grain;
    grain_host = m->host - in_grain;
    if (grain_host >= size) {
        return off;
    }
    k = DIV_ROUND_UP(size - grain_host, ext->grain); /* grains inside */
    return k * ext->grain - in_grain < m->bytes ? off + k * ext->grain - in_grain
                                                : UINT64_MAX;
}

/* QEMU's vmdk_co_check: every grain maps, inside its file; the first that
 * does not ends the check as a failure with one corruption counted. */
static int vmdk_check(BlkNode *img, BlkCheckResult *res, unsigned fix)
{
    VmdkState *s = img->opaque;
    uint64_t off = 0;

    if (fix) {
        res->unsupported = true;
        return -ENOTSUP;
    }
    while (off < img->size) {
        VmdkExtent *ext;
        VmdkMap m;
        uint64_t bad;
        int ret = map_locked_out(s, off, img->size - off, &ext, &m, NULL, 1);
        if (ret < 0) {
            g_ptr_array_add(res->messages,
                            g_strdup_printf("ERROR: could not get cluster_offset for "
                                            "sector %" PRIu64,
                                            off / VMDK_SECTOR));
            res->corruptions++;
            return ret; /* the reason, not QEMU's bare EPERM */
        }
        bad = first_past_eof(ext, off, &m);
        if (bad != UINT64_MAX) {
            g_ptr_array_add(res->messages,
                            g_strdup_printf("ERROR: cluster offset for sector %" PRIu64
                                            " points after EOF",
                                            bad / VMDK_SECTOR));
            res->corruptions++;
            return -EINVAL; /* QEMU: "Check failed: Invalid argument" */
        }
        if (res->progress) {
            res->progress(res->progress_opaque, off, img->size);
        }
        off += m.bytes;
    }
    return 0;
}

const BlkDriver blk_vmdk_driver = {
    .format_name = "vmdk",
    .probe = vmdk_probe,
    .open = vmdk_open,
    .close = vmdk_close,
    .preadv = vmdk_preadv,
    .pwritev = vmdk_pwritev,
    .pwrite_zeroes = vmdk_pwrite_zeroes,
    .pwrite_compressed = vmdk_pwrite_compressed,
    .flush = vmdk_flush,
    .create = vmdk_create,
    .block_status = vmdk_block_status,
    .get_allocated_size = vmdk_get_allocated_size,
    .has_zero_init = vmdk_has_zero_init,
    .get_info = vmdk_get_info,
    .check = vmdk_check,
    .file_role = BLK_ROLE_METADATA,
    .confine_names = true,
    .allocates = true,
};
