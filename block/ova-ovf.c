/*
 * block/ova-ovf.c: the OVF descriptor of an OVA -- its References (File
 * elements) and DiskSection (Disk elements), nothing else of the envelope.
 *
 * Owns: decoding the XML (GLib's GMarkup: no DTD, no entities beyond XML's
 * five, no network) into BlkOvf, and the capacity units.
 *
 * Invariants (cited as "ova-ovf.c invariant N"):
 *  1. The caller reads at most BLK_OVF_MAX_BYTES of descriptor; at most
 *     BLK_OVF_MAX_ITEMS Files and Disks each are kept, more is an error:
 *     what is held is bounded whatever the input.
 *  2. Elements and attributes are matched by their local name (the part
 *     after a namespace prefix), as the OVF namespace is spelled with any
 *     prefix; File counts only inside References, Disk only inside
 *     DiskSection (at any depth: OVF 2 nests sections).
 *  3. A File needs ovf:href and ovf:id, a Disk ovf:diskId; ovf:size is a
 *     decimal number below 2^63.  A Disk's fileRef is matched to a File's
 *     id here (file = -1 when it names none; the listing refuses that).
 *  4. The capacity in bytes is capacity times the unit (checked
 *     multiplication); a capacity that is not a number (an OVF property
 *     reference "${...}") or a unit not understood leaves it unknown,
 *     shown as written.
 */
#include "block/ova.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

static void file_clear(void *p)
{
    BlkOvfFile *f = p;
    g_free(f->id);
    g_free(f->href);
    g_free(f->compression);
}

static void disk_clear(void *p)
{
    BlkOvfDisk *d = p;
    g_free(d->id);
    g_free(d->file_ref);
    g_free(d->format);
    g_free(d->capacity);
    g_free(d->units);
}

void blk_ovf_clear(BlkOvf *ovf)
{
    if (ovf->files) {
        g_array_unref(ovf->files);
    }
    if (ovf->disks) {
        g_array_unref(ovf->disks);
    }
    memset(ovf, 0, sizeof(*ovf));
}

static const char *local_name(const char *name)
{
    const char *colon = strrchr(name, ':');
    return colon ? colon + 1 : name;
}

static const char *attr(const char **names, const char **values, const char *want)
{
    for (size_t i = 0; names[i]; i++) {
        if (strcmp(local_name(names[i]), want) == 0) {
            return values[i];
        }
    }
    return NULL;
}

static int parse_u63(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    if (!s || !*s) {
        return -EINVAL;
    }
    for (; *s; s++) {
        if (*s < '0' || *s > '9') {
            return -EINVAL;
        }
        if (v > (INT64_MAX - 9) / 10) {
            return -ERANGE;
        }
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

/* Invariant 4: the unit's bytes. */
static int unit_bytes(const char *units, uint64_t *unit)
{
    g_autofree char *u = NULL;
    const char *p;
    uint64_t n;

    if (!units) {
        *unit = 1;
        return 0;
    }
    u = g_strdelimit(g_strdup(units), " \t\r\n", ' ');
    g_strstrip(u);
    if (g_ascii_strcasecmp(u, "byte") == 0 || g_ascii_strcasecmp(u, "bytes") == 0) {
        *unit = 1;
        return 0;
    }
    static const struct {
        const char *word;
        unsigned shift;
    } words[] = {{"KiloBytes", 10}, {"MegaBytes", 20}, {"GigaBytes", 30},
                 {"TeraBytes", 40}, {"KB", 10},        {"MB", 20},
                 {"GB", 30},        {"TB", 40}};
    for (size_t i = 0; i < G_N_ELEMENTS(words); i++) {
        if (g_ascii_strcasecmp(u, words[i].word) == 0) {
            *unit = 1ull << words[i].shift;
            return 0;
        }
    }
    if (g_ascii_strncasecmp(u, "byte", 4) != 0) {
        return -EINVAL;
    }
    p = u + 4;
    while (*p == ' ') {
        p++;
    }
    if (*p++ != '*') {
        return -EINVAL;
    }
    while (*p == ' ') {
        p++;
    }
    if (p[0] == '2' && p[1] == '^') { /* "byte * 2^30" (DMTF DSP0004) */
        if (parse_u63(p + 2, &n) < 0 || n > 62) {
            return -EINVAL;
        }
        *unit = 1ull << n;
        return 0;
    }
    if (parse_u63(p, &n) < 0 || n == 0) { /* "byte * 512" */
        return -EINVAL;
    }
    *unit = n;
    return 0;
}

int blk_ovf_capacity_bytes(const char *capacity, const char *units, uint64_t *bytes)
{
    uint64_t cap, unit;
    int ret = parse_u63(capacity, &cap);

    if (ret == 0) {
        ret = unit_bytes(units, &unit);
    }
    if (ret == 0 && (__builtin_mul_overflow(cap, unit, bytes) || *bytes > INT64_MAX)) {
        ret = -ERANGE;
    }
    return ret;
}

typedef struct OvfParse {
    BlkOvf *ovf;
    const char *what;
    unsigned in_refs; /* depth inside References elements */
    unsigned in_disks;
} OvfParse;

static void set_err(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void set_err(GError **error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(error, G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT, msg);
}

static void start_file(OvfParse *p, const char **n, const char **v, GError **error)
{
    const char *href = attr(n, v, "href"), *id = attr(n, v, "id");
    const char *size = attr(n, v, "size");
    BlkOvfFile f = {0};

    if (!href || !*href || !id || !*id) { /* invariant 3 */
        set_err(error, "a File element needs ovf:href and ovf:id");
        return;
    }
    if (size && parse_u63(size, &f.size) < 0) {
        set_err(error, "File '%s' has ovf:size '%s', not a number below 2^63", href,
                size);
        return;
    }
    f.has_size = size != NULL;
    f.chunked = attr(n, v, "chunkSize") != NULL;
    f.id = g_strdup(id);
    f.href = g_strdup(href);
    f.compression = g_strdup(attr(n, v, "compression"));
    g_array_append_val(p->ovf->files, f);
}

static void start_disk(OvfParse *p, const char **n, const char **v, GError **error)
{
    const char *id = attr(n, v, "diskId");
    BlkOvfDisk d = {.file = -1};

    if (!id || !*id) { /* invariant 3 */
        set_err(error, "a Disk element needs ovf:diskId");
        return;
    }
    d.id = g_strdup(id);
    d.file_ref = g_strdup(attr(n, v, "fileRef"));
    d.format = g_strdup(attr(n, v, "format"));
    d.capacity = g_strdup(attr(n, v, "capacity"));
    d.units = g_strdup(attr(n, v, "capacityAllocationUnits"));
    /* invariant 4 */
    d.capacity_known =
        blk_ovf_capacity_bytes(d.capacity, d.units, &d.capacity_bytes) == 0;
    g_array_append_val(p->ovf->disks, d);
}

static void on_start(GMarkupParseContext *ctx, const char *element, const char **names,
                     const char **values, gpointer data, GError **error)
{
    OvfParse *p = data;
    const char *local = local_name(element);

    if (strcmp(local, "References") == 0) {
        p->in_refs++;
    } else if (strcmp(local, "DiskSection") == 0) {
        p->in_disks++;
    } else if (strcmp(local, "File") == 0 && p->in_refs) {
        if (p->ovf->files->len >= BLK_OVF_MAX_ITEMS) { /* invariant 1 */
            set_err(error, "more than %u File elements", BLK_OVF_MAX_ITEMS);
            return;
        }
        start_file(p, names, values, error);
    } else if (strcmp(local, "Disk") == 0 && p->in_disks) {
        if (p->ovf->disks->len >= BLK_OVF_MAX_ITEMS) {
            set_err(error, "more than %u Disk elements", BLK_OVF_MAX_ITEMS);
            return;
        }
        start_disk(p, names, values, error);
    }
}

static void on_end(GMarkupParseContext *ctx, const char *element, gpointer data,
                   GError **error)
{
    OvfParse *p = data;
    const char *local = local_name(element);

    if (strcmp(local, "References") == 0 && p->in_refs) {
        p->in_refs--;
    } else if (strcmp(local, "DiskSection") == 0 && p->in_disks) {
        p->in_disks--;
    }
}

int blk_ovf_parse(const char *text, size_t len, const char *what, BlkOvf *ovf)
{
    static const GMarkupParser parser = {.start_element = on_start,
                                         .end_element = on_end};
    OvfParse p = {.ovf = ovf, .what = what};
    g_autoptr(GError) err = NULL;
    GMarkupParseContext *ctx;
    bool ok;

    memset(ovf, 0, sizeof(*ovf));
    ovf->files = g_array_new(false, true, sizeof(BlkOvfFile));
    g_array_set_clear_func(ovf->files, file_clear);
    ovf->disks = g_array_new(false, true, sizeof(BlkOvfDisk));
    g_array_set_clear_func(ovf->disks, disk_clear);
    if (len > BLK_OVF_MAX_BYTES || len > G_MAXSSIZE) { /* invariant 1 */
        return blk_error(EFBIG, "the OVF descriptor '%s' is larger than %u bytes", what,
                         BLK_OVF_MAX_BYTES);
    }
    ctx = g_markup_parse_context_new(&parser, G_MARKUP_PREFIX_ERROR_POSITION, &p, NULL);
    ok = g_markup_parse_context_parse(ctx, text, (gssize)len, &err) &&
         g_markup_parse_context_end_parse(ctx, &err);
    g_markup_parse_context_free(ctx);
    if (!ok) {
        return blk_error(EINVAL, "the OVF descriptor '%s' is not valid: %s", what,
                         err->message);
    }
    for (guint i = 0; i < ovf->disks->len; i++) { /* invariant 3 */
        BlkOvfDisk *d = &g_array_index(ovf->disks, BlkOvfDisk, i);
        for (guint k = 0; d->file_ref && k < ovf->files->len; k++) {
            if (strcmp(g_array_index(ovf->files, BlkOvfFile, k).id, d->file_ref) == 0) {
                d->file = (int)k;
                break;
            }
        }
    }
    return 0;
}
