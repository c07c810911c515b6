/*
 * block/ova.c: OVA archives as image sources -- the listing of an OVA's
 * disks (its OVF matched against the tar), and the protocol node that is
 * one member of the tar: a read-only byte range of the archive that a
 * format driver (VMDK, or any probed format) reads as its file.
 *
 * Owns: the "ova:SELECTOR:NAME" names, the member node's state (the
 * archive's node, the member's offset and size, its name), and the names
 * of sibling members a disk inside the archive refers to.
 *
 * Invariants (cited as "ova.c invariant N"):
 *  1. SELECTOR is a disk index N (0 for the first Disk of the OVF's
 *     DiskSection, as `qimg info` lists them), "id=DISKID" (ovf:diskId) or
 *     "file=MEMBER" (a tar member's name); in id= and file= a ':' is
 *     written %3A and a '%' %25 (percent-escapes are decoded; a '%' not
 *     followed by two hex digits is refused).  NAME is opened as the
 *     caller's name (any protocol, test nodes) read-only.
 *  2. The listing reads the tar twice at most: once to the first member
 *     whose name ends in ".ovf" (at most BLK_OVF_MAX_BYTES of it, or a
 *     clear error), once to find the members the OVF's Disks name.  A Disk
 *     whose fileRef names no File, or whose File is not a regular member
 *     of the tar, or whose member's size differs from ovf:size, fails the
 *     listing naming it.  Member names match with a leading "./" dropped.
 *  3. The member node reads only [offset, offset + size) of the archive:
 *     reads past the member's end return zeros, as a file's past EOF; it
 *     never writes (the open is refused unless read-only), and a member
 *     the OVF marks compressed or chunked, a link or a sparse tar member
 *     is refused at open, naming it.
 *  4. A name a disk in the archive records (a VMDK extent) is a member of
 *     the same archive: relative to the folder of the member that names
 *     it, refused when empty, absolute, with a ".." component, or naming
 *     a protocol (blk_image_name_refusal) -- whether or not the caller
 *     trusts image names: nothing in an OVA reaches a host path.
 */
#include "block/ova.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define OVA_PREFIX "ova:"

typedef struct OvaState {
    BlkNode *child;  /* the archive */
    uint64_t offset; /* of the member's bytes */
    char *member;    /* its name in the tar */
    char *archive;   /* the archive's name, as the caller gave it */
} OvaState;

static const char *strip_dot(const char *name)
{
    while (name[0] == '.' && name[1] == '/') {
        name += 2;
    }
    return name;
}

int blk_ova_probe(const uint8_t *buf, size_t len)
{
    BlkTarHeader h;
    size_t n;
    bool had = blk_error_mark();
    int ret;

    if (len < BLK_TAR_BLOCK) {
        return 0;
    }
    ret = blk_tar_header_decode(buf, &h);
    blk_error_unwind(had);
    if (ret <= 0) {
        return 0;
    }
    n = strlen(h.name);
    /* a pax header's name ends in the member's own (./PaxHeaders/x.ovf) */
    return n > 4 && g_ascii_strcasecmp(h.name + n - 4, ".ovf") == 0 ? 100 : 0;
}

int blk_ova_probe_long_name(BlkNode *file, const uint8_t *head, size_t head_len)
{
    uint8_t b[BLK_TAR_BLOCK];
    g_autofree char *name = NULL;
    int64_t len = blk_getlength(file);
    bool had = blk_error_mark();
    BlkTarHeader h;
    uint64_t data;
    size_t n;
    int score = 0;

    if (head_len < BLK_TAR_BLOCK || len < 3 * (int64_t)BLK_TAR_BLOCK ||
        blk_tar_header_decode(head, &h) <= 0 || h.type != BLK_TAR_GNU_LONGNAME ||
        h.size < 5 || h.size > BLK_TAR_MAX_NAME) {
        goto out;
    }
    data = ROUND_UP(h.size, BLK_TAR_BLOCK); /* <= 4096 */
    if (data + 2 * BLK_TAR_BLOCK > (uint64_t)len) {
        goto out;
    }
    name = g_malloc0(h.size + 1);
    if (blk_pread(file, BLK_TAR_BLOCK, name, h.size) < 0) {
        goto out;
    }
    n = strlen(name);
    if (n > 4 && g_ascii_strcasecmp(name + n - 4, ".ovf") == 0 &&
        blk_pread(file, BLK_TAR_BLOCK + data, b, sizeof(b)) == 0 &&
        blk_tar_header_decode(b, &h) > 0 &&
        (h.type == BLK_TAR_REGULAR || h.type == BLK_TAR_CONTIG)) {
        score = 100;
    }
out:
    blk_error_unwind(had);
    return score;
}

/* ---- the listing (invariant 2) ---- */

typedef struct FindOvf {
    char *name;
    uint64_t offset, size;
} FindOvf;

static int find_ovf(void *opaque, const BlkTarMember *m)
{
    FindOvf *f = opaque;
    size_t n = strlen(m->name);

    if ((m->type == BLK_TAR_REGULAR || m->type == BLK_TAR_CONTIG) && n > 4 &&
        g_ascii_strcasecmp(m->name + n - 4, ".ovf") == 0) {
        f->name = g_strdup(m->name);
        f->offset = m->offset;
        f->size = m->size;
        return 1;
    }
    return 0;
}

typedef struct FindDisks {
    BlkOvaListing *l;
    const char *what;
    guint left;
} FindDisks;

static const char *type_name(char type)
{
    switch (type) {
    case BLK_TAR_HARDLINK:
        return "a hard link";
    case BLK_TAR_SYMLINK:
        return "a symbolic link";
    case BLK_TAR_DIR:
        return "a folder";
    case BLK_TAR_GNU_SPARSE:
        return "a GNU sparse file";
    default:
        return "not a regular file";
    }
}

static bool is_regular(char type)
{
    return type == BLK_TAR_REGULAR || type == BLK_TAR_CONTIG;
}

static int find_disks(void *opaque, const BlkTarMember *m)
{
    FindDisks *f = opaque;

    for (guint i = 0; i < f->l->disks->len; i++) {
        BlkOvaDisk *d = &g_array_index(f->l->disks, BlkOvaDisk, i);
        if (!d->file || d->found ||
            strcmp(strip_dot(d->file->href), strip_dot(m->name)) != 0) {
            continue;
        }
        if (!is_regular(m->type)) {
            return blk_error(EINVAL, "'%s': the file '%s' of disk '%s' is %s in the tar",
                             f->what, m->name, d->disk->id, type_name(m->type));
        }
        d->found = true;
        d->offset = m->offset;
        d->size = m->size;
        f->left--;
    }
    return f->left == 0 ? 1 : 0;
}

void blk_ova_listing_clear(BlkOvaListing *l)
{
    g_free(l->ovf_name);
    blk_ovf_clear(&l->ovf);
    if (l->disks) {
        g_array_unref(l->disks);
    }
    memset(l, 0, sizeof(*l));
}

static int read_ovf(BlkNode *file, const char *what, BlkOvaListing *l)
{
    FindOvf f = {0};
    g_autofree char *text = NULL;
    int ret = blk_tar_walk(file, what, find_ovf, &f);

    if (ret < 0) {
        return ret;
    }
    if (!f.name) {
        return blk_error(EINVAL,
                         "'%s' is a tar archive without an OVF descriptor (*.ovf)", what);
    }
    l->ovf_name = f.name;
    if (f.size > BLK_OVF_MAX_BYTES) {
        return blk_error(EFBIG,
                         "'%s': the OVF descriptor '%s' is %" PRIu64
                         " bytes, more than qimg reads (%u)",
                         what, f.name, f.size, BLK_OVF_MAX_BYTES);
    }
    text = g_malloc((size_t)f.size + 1);
    ret = f.size ? blk_pread(file, f.offset, text, (size_t)f.size) : 0;
    if (ret < 0) {
        return blk_error_prefix(ret, "'%s': cannot read the OVF descriptor", what);
    }
    ret = blk_ovf_parse(text, (size_t)f.size, f.name, &l->ovf);
    return ret < 0 ? blk_error_prefix(ret, "'%s'", what) : 0;
}

int blk_ova_list(BlkNode *file, const char *what, BlkOvaListing *l)
{
    FindDisks f = {.l = l, .what = what};
    int ret;

    memset(l, 0, sizeof(*l));
    l->disks = g_array_new(false, true, sizeof(BlkOvaDisk));
    ret = read_ovf(file, what, l);
    if (ret < 0) {
        return ret;
    }
    for (guint i = 0; i < l->ovf.disks->len; i++) {
        BlkOvfDisk *od = &g_array_index(l->ovf.disks, BlkOvfDisk, i);
        BlkOvaDisk d = {.disk = od};
        if (od->file_ref && od->file < 0) {
            return blk_error(EINVAL,
                             "'%s': disk '%s' names file '%s' (ovf:fileRef), which no "
                             "File of the OVF's References has",
                             what, od->id, od->file_ref);
        }
        if (od->file >= 0) {
            d.file = &g_array_index(l->ovf.files, BlkOvfFile, od->file);
            f.left++;
        }
        g_array_append_val(l->disks, d);
    }
    if (f.left) {
        ret = blk_tar_walk(file, what, find_disks, &f);
        if (ret < 0) {
            return ret;
        }
    }
    for (guint i = 0; i < l->disks->len; i++) {
        BlkOvaDisk *d = &g_array_index(l->disks, BlkOvaDisk, i);
        if (d->file && !d->found) {
            return blk_error(ENOENT,
                             "'%s': the file '%s' of disk '%s' is not in the archive",
                             what, d->file->href, d->disk->id);
        }
        if (d->file && d->file->has_size && d->file->size != d->size) {
            return blk_error(EINVAL,
                             "'%s': the file '%s' of disk '%s' is %" PRIu64
                             " bytes in the tar, the OVF says %" PRIu64 " (ovf:size)",
                             what, d->file->href, d->disk->id, d->size, d->file->size);
        }
    }
    return 0;
}

/* ---- names (invariant 1) ---- */

static char *unescape(const char *s, size_t len)
{
    GString *out = g_string_sized_new(len);

    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%') {
            g_string_append_c(out, s[i]);
            continue;
        }
        if (i + 2 >= len || !g_ascii_isxdigit(s[i + 1]) || !g_ascii_isxdigit(s[i + 2])) {
            g_string_free(out, true);
            return NULL;
        }
        g_string_append_c(out, (char)(g_ascii_xdigit_value(s[i + 1]) * 16 +
                                      g_ascii_xdigit_value(s[i + 2])));
        i += 2;
    }
    return g_string_free(out, false);
}

char *blk_ova_member_selector(const char *member)
{
    GString *out = g_string_new("file=");

    for (const char *p = member; *p; p++) {
        if (*p == ':' || *p == '%') {
            g_string_append_printf(out, "%%%02X", (unsigned char)*p);
        } else {
            g_string_append_c(out, *p);
        }
    }
    return g_string_free(out, false);
}

typedef struct FindMember {
    const char *name;
    bool found;
    BlkTarMember m;
} FindMember;

static int find_member(void *opaque, const BlkTarMember *m)
{
    FindMember *f = opaque;

    if (strcmp(strip_dot(m->name), strip_dot(f->name)) != 0) {
        return 0;
    }
    f->found = true;
    f->m = *m;
    f->m.name = NULL; /* not kept past the visit */
    return 1;
}

/* The member the selector names: offset, size, name (invariants 1, 3). */
static int select_member(BlkNode *file, const char *what, const char *sel, size_t sel_len,
                         uint64_t *offset, uint64_t *size, char **member)
{
    BlkOvaListing l;
    g_autofree char *value = NULL;
    const BlkOvfFile *of = NULL;
    bool by_file = sel_len >= 5 && memcmp(sel, "file=", 5) == 0;
    bool by_id = sel_len >= 3 && memcmp(sel, "id=", 3) == 0;
    int ret = blk_ova_list(file, what, &l);

    if (ret < 0) {
        goto out;
    }
    if (by_file || by_id) {
        size_t skip = by_file ? 5 : 3;
        value = unescape(sel + skip, sel_len - skip);
        if (!value || !*value) {
            ret = blk_error(EINVAL,
                            "bad OVA selector '%.*s' (escape ':' as %%3A, '%%' as %%25)",
                            (int)sel_len, sel);
            goto out;
        }
    }
    if (by_file) {
        FindMember f = {.name = value};
        for (guint i = 0; i < l.ovf.files->len; i++) {
            const BlkOvfFile *x = &g_array_index(l.ovf.files, BlkOvfFile, i);
            if (strcmp(strip_dot(x->href), strip_dot(value)) == 0) {
                of = x;
            }
        }
        ret = blk_tar_walk(file, what, find_member, &f);
        if (ret < 0) {
            goto out;
        }
        if (!f.found) {
            ret = blk_error(ENOENT, "'%s' has no member '%s'", what, value);
            goto out;
        }
        if (!is_regular(f.m.type)) {
            ret = blk_error(EINVAL, "'%s': member '%s' is %s", what, value,
                            type_name(f.m.type));
            goto out;
        }
        *offset = f.m.offset;
        *size = f.m.size;
        *member = g_strdup(value);
    } else {
        const BlkOvaDisk *d = NULL;
        uint64_t idx = 0;
        if (by_id) {
            for (guint i = 0; i < l.disks->len && !d; i++) {
                const BlkOvaDisk *x = &g_array_index(l.disks, BlkOvaDisk, i);
                d = strcmp(x->disk->id, value) == 0 ? x : NULL;
            }
        } else {
            size_t i = 0;
            for (; i < sel_len && g_ascii_isdigit(sel[i]) && idx < 1000000; i++) {
                idx = idx * 10 + (uint64_t)(sel[i] - '0');
            }
            if (i == 0 || i != sel_len) {
                ret = blk_error(EINVAL,
                                "bad OVA selector '%.*s': expected a disk index, "
                                "id=DISKID or file=MEMBER",
                                (int)sel_len, sel);
                goto out;
            }
            d = idx < l.disks->len ? &g_array_index(l.disks, BlkOvaDisk, (guint)idx)
                                   : NULL;
        }
        if (!d) {
            ret = blk_error(ENOENT, "'%s' has no disk '%.*s' (it has %u: see qimg info)",
                            what, (int)sel_len, sel, l.disks->len);
            goto out;
        }
        if (!d->file) {
            ret = blk_error(ENOENT,
                            "disk '%s' of '%s' has no file (an empty disk: no "
                            "ovf:fileRef)",
                            d->disk->id, what);
            goto out;
        }
        of = d->file;
        *offset = d->offset;
        *size = d->size;
        *member = g_strdup(d->file->href);
    }
    /* invariant 3 */
    if (of && of->compression && *of->compression &&
        strcmp(of->compression, "identity") != 0) {
        ret =
            blk_error(ENOTSUP,
                      "'%s': member '%s' is %s-compressed (ovf:compression); qimg reads "
                      "only uncompressed members: extract and decompress it first",
                      what, of->href, of->compression);
    } else if (of && of->chunked) {
        ret = blk_error(ENOTSUP,
                        "'%s': file '%s' is split in chunks (ovf:chunkSize), which qimg "
                        "does not read",
                        what, of->href);
    }
    if (ret < 0) {
        g_clear_pointer(member, g_free);
    }
out:
    blk_ova_listing_clear(&l);
    return ret < 0 ? ret : 0;
}

/* ---- the member node (invariant 3) ---- */

static int ova_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    OvaState *s = img->opaque;
    size_t in = offset >= img->size ? 0 : (size_t)MIN(img->size - offset, qiov->size);
    int ret = 0;

    if (in) {
        BlkIOV part;
        iov_slice(&part, qiov, 0, in);
        ret = blk_preadv(s->child, s->offset + offset, &part, 0); /* no wrap: open */
        iov_destroy(&part);
    }
    if (ret == 0 && in < qiov->size) {
        iov_memset(qiov, in, 0, qiov->size - in);
    }
    return ret;
}

static int ova_refuse_write(BlkNode *img)
{
    return blk_error(EROFS, "'%s' is a disk inside an OVA archive, which qimg only reads",
                     img->filename);
}

static int ova_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    return ova_refuse_write(img);
}

static int ova_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                             unsigned flags)
{
    return ova_refuse_write(img);
}

static int ova_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                        bool shrink)
{
    return ova_refuse_write(img);
}

static int ova_flush(BlkNode *img)
{
    return 0; /* nothing is ever written */
}

static int ova_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    st->file = img;
    st->map = offset;
    st->pnum = bytes;
    st->flags = offset >= img->size
                    ? BLK_STATUS_ZERO
                    : BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED;
    if (offset < img->size) {
        st->pnum = MIN(bytes, img->size - offset);
    }
    return 0;
}

static int64_t ova_get_allocated_size(BlkNode *img)
{
    return (int64_t)img->size;
}

/* The archive's locks, read-only (block.h invariant 6). */
static int ova_set_perm(BlkNode *img, unsigned perm, unsigned shared)
{
    OvaState *s = img->opaque;
    BlkNode *c = s->child;
    return c->drv->set_perm
               ? c->drv->set_perm(c, perm & ~(unsigned)BLK_PERM_WRITE, shared)
               : 0;
}

static void ova_close(BlkNode *img)
{
    OvaState *s = img->opaque;

    if (s) {
        blk_close(s->child);
        g_free(s->member);
        g_free(s->archive);
        g_free(s);
    }
}

static const BlkDriver ova_member_driver = {
    .format_name = "ova-member",
    .is_protocol = true,
    .close = ova_close,
    .preadv = ova_preadv,
    .pwritev = ova_pwritev,
    .pwrite_zeroes = ova_pwrite_zeroes,
    .flush = ova_flush,
    .block_status = ova_block_status,
    .truncate = ova_truncate,
    .get_allocated_size = ova_get_allocated_size,
    .set_perm = ova_set_perm,
};

BlkNode *blk_open_ova(const char *filename, const BlkOpenOptions *opts, unsigned flags)
{
    const char *sel = filename + strlen(OVA_PREFIX), *colon = strchr(sel, ':');
    BlkOpenOptions o = *opts;
    uint64_t offset = 0, size = 0;
    char *member = NULL;
    BlkNode *child, *img;
    OvaState *s;
    int ret;

    if (!colon || colon == sel || !colon[1]) {
        blk_error(EINVAL,
                  "Could not open '%s': expected ova:DISK:FILE (DISK: a disk index, "
                  "id=DISKID or file=MEMBER)",
                  filename);
        return NULL;
    }
    if (!opts->read_only) { /* invariant 3 */
        blk_error(EROFS,
                  "Could not open '%s': a disk inside an OVA archive can only be "
                  "opened read-only",
                  filename);
        return NULL;
    }
    o.read_only = true;
    child = blk_open_protocol(colon + 1, &o, BLK_ROLE_PROTOCOL, flags);
    if (!child) {
        return NULL;
    }
    ret = select_member(child, colon + 1, sel, (size_t)(colon - sel), &offset, &size,
                        &member);
    if (ret < 0) {
        blk_error_prefix(ret, "Could not open '%s'", filename);
        blk_close(child);
        return NULL;
    }
    s = g_new0(OvaState, 1);
    s->child = child;
    s->offset = offset; /* offset + size <= child->size (ova-tar.c invariant 2) */
    s->member = member;
    s->archive = g_strdup(colon + 1);
    img = g_new0(BlkNode, 1);
    img->drv = &ova_member_driver;
    img->opaque = s;
    img->filename = g_strdup(filename);
    img->read_only = true;
    img->cache = child->cache;
    img->size = size;
    img->request_alignment = 1;
    return img;
}

BlkNode *blk_ova_member_node(BlkNode *file)
{
    while (file && file->drv != &ova_member_driver && file->filtered) {
        file = file->filtered;
    }
    return file && file->drv == &ova_member_driver ? file : NULL;
}

int blk_ova_sibling_name(BlkNode *member_node, const char *what, const char *name,
                         char **path)
{
    OvaState *s = member_node->opaque;
    const char *why = *name ? blk_image_name_refusal(name) : "is empty";
    const char *slash = strrchr(s->member, '/');
    g_autofree char *member = NULL, *sel = NULL;

    *path = NULL;
    if (why) { /* invariant 4 */
        return blk_error(EACCES,
                         "%s '%s' %s; refused (a disk inside an OVA may only name "
                         "members of its archive)",
                         what, name, why);
    }
    member =
        slash ? g_strdup_printf("%.*s%s", (int)(slash - s->member + 1), s->member, name)
              : g_strdup(name);
    sel = blk_ova_member_selector(member);
    *path = g_strdup_printf(OVA_PREFIX "%s:%s", sel, s->archive);
    return 0;
}

BlkNode *blk_ova_open_sibling(BlkNode *like, const char *path, const BlkOpenOptions *opts)
{
    BlkOpenOptions o = *opts;
    BlkNode *child;

    o.read_only = true;
    child = blk_open_ova(path, &o, BLK_OPEN_USER_NAME); /* a name built here */
    if (child && blk_is_record_node(like)) {
        return blk_open_record(blk_record_log_path(like), child);
    }
    return child;
}
