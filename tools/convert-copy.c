/*
 * qimg convert [-f fmt] [-O fmt] [-B backing -F fmt] [-l snapshot] [-S size]
 *              [-n] [--target-is-zero] [-o options] [-t cache] [-T cache]
 *              [-m N] [-W] [-c] [-p] [-q] [-U] SRC DST
 *
 * A sequential copy that leaves the same layout in the target as
 * qemu-img 7.2 (see shared/reference/qemu-behaviour.md section c):
 *
 *  1. The source is walked by block status through its chain.  A status
 *     region is trimmed so that it ends on a source cluster boundary (when
 *     that leaves something).  ZERO regions are one chunk; DATA regions
 *     (and ZERO regions with -S 0, which become explicit zero data) are
 *     cut into 2 MiB chunks counted from the region start.
 *  2. In a data chunk, sparse detection works on 512-byte sectors: a run
 *     of zero sectors of at least -S bytes (default 4 KiB) is not written;
 *     shorter zero runs between data are written as data.  Run ends are
 *     moved to multiples of the alignment (pow2floor(-S)) so that writes
 *     stay aligned: a data run is extended to the next boundary, a zero run
 *     is shortened to end at the previous one (or becomes data if that
 *     would leave nothing).  -S 0 writes everything.
 *  3. Zeros are skipped when the target was created by this run, has no
 *     backing file, -S is not 0 and it reads as zeros; otherwise they are
 *     written with pwrite_zeroes (may unmap unless the target has a backing
 *     file).  A region that is neither data nor zero is data, unless the
 *     target has a backing file, where it is left unallocated.
 *  4. The target cache defaults to unsafe and the source cache to
 *     writeback.  The target is flushed at the end unless unsafe.
 *  5. With -B the target's backing file is taken to hold what the source's
 *     backing chain holds: only the source's top layer is asked for status,
 *     and what it does not define (and zeros past the end of the target's
 *     backing file) is left unallocated.  -B wins over -o backing_file and
 *     needs a backing format (-F or -o backing_fmt).
 *  6. --target-is-zero (only with -n, never with a backing file) promises
 *     that the existing target reads as zeros: zeros are not written.
 *  7. Locks: nobody may write or resize any file of the source's chain
 *     while it is copied (deny_write; -U lifts it); the target is created
 *     with the creation locks and opened read-write, so a target in use is
 *     refused as "T: error while converting FMT: Failed to get \"write\"
 *     lock" (created) or "Could not open 'T': ..." (-n).
 */
#include "qimg-tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SECTOR 512u
#define BUF_SIZE (2u * 1024 * 1024)
#define REQUEST_MAX ((uint64_t)(INT32_MAX / SECTOR) * SECTOR)

typedef enum { ST_DATA, ST_ZERO, ST_BACKING } ChunkStatus;

typedef struct Convert {
    QimgImage *src;
    QimgImage *dst;
    uint64_t size;
    uint64_t src_align;  /* bytes, >= 512 */
    unsigned min_sparse; /* sectors; 0 = no sparse detection */
    unsigned alignment;  /* sectors */
    bool zero_init;      /* target already reads as zeros */
    bool target_has_backing;
    bool top_only;          /* -B: status of the source's top layer (fact 5) */
    int64_t target_backing; /* size of the target's backing file, -1 unknown */
    bool compress;          /* -c: whole clusters through pwrite_compressed */
    uint32_t cluster;       /* target cluster size (with -c) */
    uint8_t *buf;
} Convert;

static bool sector_is_zero_buf(const uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i]) {
            return false;
        }
    }
    return true;
}

static bool sector_is_zero(const uint8_t *buf, size_t len)
{
    static const uint8_t zeros[SECTOR];

    return memcmp(buf, zeros, len) == 0;
}

/* Length of sector i of a buffer of 'len' bytes (the last may be short). */
static size_t sector_len(size_t len, size_t i)
{
    return MIN(SECTOR, len - i * SECTOR);
}

/*
 * One run of sectors in the same state (fact 2) from the start of buf
 * (nsec sectors, 'len' bytes, first sector number 'sector').  Returns
 * whether the run is data; *run is its length in sectors.
 */
static bool same_run(const uint8_t *buf, size_t len, size_t nsec, uint64_t sector,
                     unsigned align, size_t *run)
{
    bool zero = sector_is_zero(buf, sector_len(len, 0));
    size_t i = 1;
    uint64_t tail;

    while (i < nsec && sector_is_zero(buf + i * SECTOR, sector_len(len, i)) == zero) {
        i++;
    }
    if (i == nsec) {
        *run = i;
        return !zero;
    }
    tail = (sector + i) % align;
    if (tail) {
        if (zero && i <= tail) {
            zero = false;
        }
        if (!zero) {
            i = MIN(i + (align - tail), nsec);
        } else {
            i -= tail;
        }
    }
    *run = i;
    return !zero;
}

/* Like same_run, but zero runs shorter than 'min' sectors that follow data
 * are taken into the data run. */
static bool data_run(const uint8_t *buf, size_t len, uint64_t sector, unsigned min,
                     unsigned align, size_t *run)
{
    size_t nsec = (len + SECTOR - 1) / SECTOR;
    size_t used, checked, r;

    if (nsec < min) {
        min = (unsigned)nsec;
    }
    if (!same_run(buf, len, nsec, sector, align, &r)) {
        *run = r;
        return false;
    }
    used = checked = r;
    while (checked < nsec) {
        bool data = same_run(buf + checked * SECTOR, len - checked * SECTOR,
                             nsec - checked, sector + checked, align, &r);
        checked += r;
        if (data) {
            used = checked;
        } else if (r >= min) {
            break;
        }
    }
    *run = used;
    return true;
}

static bool write_zeroes(Convert *s, uint64_t offset, uint64_t len)
{
    GError *err = NULL;

    if (s->zero_init) {
        return true;
    }
    if (!qimg_image_pwrite_zeroes(
            s->dst, offset, len, s->target_has_backing ? 0 : QIMG_ZERO_MAY_UNMAP, &err)) {
        tool_error("error while writing at byte %" PRIu64 ": %s", offset, err->message);
        g_clear_error(&err);
        return false;
    }
    return true;
}

static bool write_data(Convert *s, uint64_t offset, const uint8_t *buf, size_t len)
{
    GError *err = NULL;

    if (!qimg_image_pwrite(s->dst, offset, buf, len, &err)) {
        tool_error("error while writing at byte %" PRIu64 ": %s", offset, err->message);
        g_clear_error(&err);
        return false;
    }
    return true;
}

/* Write one data chunk with sparse detection (fact 2). */
static bool write_chunk(Convert *s, uint64_t offset, size_t len)
{
    size_t pos = 0;

    if (s->min_sparse == 0) {
        return write_data(s, offset, s->buf, len);
    }
    while (pos < len) {
        size_t run, bytes;
        bool data = data_run(s->buf + pos, len - pos, (offset + pos) / SECTOR,
                             s->min_sparse, s->alignment, &run);

        bytes = MIN((uint64_t)run * SECTOR, len - pos);
        if (data ? !write_data(s, offset + pos, s->buf + pos, bytes)
                 : !write_zeroes(s, offset + pos, bytes)) {
            return false;
        }
        pos += bytes;
    }
    return true;
}

/*
 * Block status of the source: of the whole chain, or with -B of its top
 * layer alone (fact 5), where what the layer leaves undefined reads as zeros
 * when nothing is below it or the offset is past the end of what is below.
 */
static bool source_status(Convert *s, uint64_t offset, uint64_t len, QimgExtent *ext,
                          GError **err)
{
    QimgImage *below;

    if (!s->top_only) {
        return qimg_image_block_status(s->src, offset, len, ext, err);
    }
    if (!qimg_image_block_status_layer(s->src, offset, len, ext, err)) {
        return false;
    }
    if (ext->flags & (QIMG_STATUS_ALLOCATED | QIMG_STATUS_ZERO | QIMG_STATUS_DATA)) {
        return true;
    }
    below = qimg_image_backing(s->src);
    if (!below) {
        ext->flags |= QIMG_STATUS_ZERO;
    } else if (offset >= qimg_image_size(below)) {
        ext->flags |= QIMG_STATUS_ZERO;
    } else {
        ext->length = MIN(ext->length, qimg_image_size(below) - offset);
    }
    return true;
}

/* Status of the source at 'offset' and where it ends (fact 1). */
static bool next_status(Convert *s, uint64_t offset, ChunkStatus *st, uint64_t *end)
{
    QimgExtent ext;
    GError *err = NULL;
    uint64_t n, tail;

    if (!source_status(s, offset, s->size - offset, &ext, &err)) {
        tool_error("error while reading block status at offset %" PRIu64 ": %s", offset,
                   err->message);
        g_clear_error(&err);
        return false;
    }
    n = MIN(ext.length, s->size - offset);
    if (n == 0) {
        tool_error("error while reading block status at offset %" PRIu64, offset);
        return false;
    }
    n = (n + SECTOR - 1) / SECTOR * SECTOR;
    tail = (offset + n) % s->src_align;
    if (n > tail) {
        n -= tail;
    }
    *end = MIN(offset + n, s->size);
    if (ext.flags & QIMG_STATUS_ZERO) {
        bool past_backing = s->top_only && s->target_backing >= 0 &&
                            offset >= (uint64_t)s->target_backing;
        *st = past_backing ? ST_BACKING : ST_ZERO;
    } else if (ext.flags & QIMG_STATUS_DATA) {
        *st = ST_DATA;
    } else {
        *st = s->target_has_backing ? ST_BACKING : ST_DATA;
    }
    return true;
}

/*
 * -c, as qemu-img: the target is written cluster by cluster; an all-zero
 * cluster goes down the zero path, anything else is compressed.
 */
static bool do_copy_compressed(Convert *s, ToolProgress *prog)
{
    for (uint64_t offset = 0; offset < s->size; offset += s->cluster) {
        size_t n = (size_t)MIN((uint64_t)s->cluster, s->size - offset);
        GError *err = NULL;
        ChunkStatus st;
        uint64_t end;

        if (!next_status(s, offset, &st, &end)) {
            return false;
        }
        if (end - offset < n) {
            st = ST_DATA; /* a partly defined cluster is written whole */
        }
        if (st == ST_BACKING) {
            tool_progress_update(prog, offset + n, s->size);
            continue; /* fact 5: the target's backing file shows through */
        }
        if (st == ST_ZERO) {
            memset(s->buf, 0, n);
        } else if (!qimg_image_pread(s->src, offset, s->buf, n, &err)) {
            tool_error("error while reading at byte %" PRIu64 ": %s", offset,
                       err->message);
            g_clear_error(&err);
            return false;
        }
        if (sector_is_zero_buf(s->buf, n)) {
            if (!s->zero_init && !write_zeroes(s, offset, n)) {
                return false;
            }
        } else if (!qimg_image_pwrite_compressed(s->dst, offset, s->buf, n, &err)) {
            tool_error("error while compressing sector %" PRIu64 ": %s", offset / SECTOR,
                       err->message);
            g_clear_error(&err);
            return false;
        }
        tool_progress_update(prog, offset + n, s->size);
    }
    return true;
}

static bool do_copy(Convert *s, ToolProgress *prog)
{
    if (s->compress) {
        return do_copy_compressed(s, prog);
    }
    uint64_t offset = 0, status_end = 0;
    ChunkStatus st = ST_DATA;

    while (offset < s->size) {
        uint64_t n;
        GError *err = NULL;

        if (offset >= status_end && !next_status(s, offset, &st, &status_end)) {
            return false;
        }
        n = MIN(status_end - offset, REQUEST_MAX);
        if (st == ST_DATA || (st == ST_ZERO && s->min_sparse == 0)) {
            n = MIN(n, BUF_SIZE);
        }

        if (st == ST_DATA) {
            if (!qimg_image_pread(s->src, offset, s->buf, n, &err)) {
                tool_error("error while reading at byte %" PRIu64 ": %s", offset,
                           err->message);
                g_clear_error(&err);
                return false;
            }
            if (!write_chunk(s, offset, n)) {
                return false;
            }
        } else if (st == ST_ZERO && s->min_sparse == 0) {
            memset(s->buf, 0, n);
            if (!write_data(s, offset, s->buf, n)) {
                return false;
            }
        } else if (st == ST_ZERO) {
            if (!write_zeroes(s, offset, n)) {
                return false;
            }
        }
        offset += n;
        tool_progress_update(prog, offset, s->size);
    }
    return true;
}

/* Does the whole target read as zeros (regular file just created, or block
 * status says so)? */
static bool target_reads_zero(QimgImage *dst, const char *filename)
{
    struct stat st;
    uint64_t size = qimg_image_size(dst);

    if (stat(filename, &st) == 0 && S_ISREG(st.st_mode)) {
        return true;
    }
    for (uint64_t off = 0; off < size;) {
        QimgExtent ext;
        GError *err = NULL;

        if (!qimg_image_block_status(dst, off, size - off, &ext, &err)) {
            g_clear_error(&err);
            return false;
        }
        if (!(ext.flags & QIMG_STATUS_ZERO) || ext.length == 0) {
            return false;
        }
        off += ext.length;
    }
    return true;
}

/* "-l ID_OR_NAME" or "-l snapshot.id=ID,snapshot.name=NAME". */
static char *parse_snapshot_param(const char *param)
{
    g_auto(GStrv) parts = NULL;
    const char *id = NULL, *name = NULL;

    if (!g_str_has_prefix(param, "snapshot.id=") &&
        !g_str_has_prefix(param, "snapshot.name=")) {
        return g_strdup(param);
    }
    parts = g_strsplit(param, ",", -1);
    for (int i = 0; parts[i]; i++) {
        if (g_str_has_prefix(parts[i], "snapshot.id=")) {
            id = parts[i] + strlen("snapshot.id=");
        } else if (g_str_has_prefix(parts[i], "snapshot.name=")) {
            name = parts[i] + strlen("snapshot.name=");
        } else {
            tool_error("Invalid parameter '%s'", parts[i]);
            return NULL;
        }
    }
    return g_strdup(id && *id ? id : name);
}

/* Guard for drivers that ignore QimgOpenOptions.snapshot (raw). */
static bool has_snapshot(const QimgInfo *info, const char *id_or_name)
{
    for (guint i = 0; info->snapshots && i < info->snapshots->len; i++) {
        const QimgSnapshotInfo *sn = g_ptr_array_index(info->snapshots, i);
        if (g_strcmp0(sn->id, id_or_name) == 0 || g_strcmp0(sn->name, id_or_name) == 0) {
            return true;
        }
    }
    return false;
}

static bool parse_sparse(const char *arg, unsigned *sectors)
{
    int64_t v;

    if (!tool_cvtnum("buffer size for sparse output", arg, INT64_MAX, &v)) {
        return false;
    }
    if (v % SECTOR || v > 16 * 1024 * 1024) {
        tool_error(
            "Invalid buffer size for sparse output specified. Valid sizes are "
            "multiples of 512 up to 16777216. Select 0 to disable sparse detection "
            "(fully allocates output).");
        return false;
    }
    *sectors = (unsigned)(v / SECTOR);
    return true;
}

static unsigned pow2floor(unsigned v)
{
    unsigned p = 1;

    while (p <= v / 2) {
        p *= 2;
    }
    return v ? p : 0;
}

typedef struct ConvertArgs {
    const char *src_fmt, *out_fmt, *snapshot, *src_name, *dst_name;
    const char *backing, *backing_fmt; /* -B, -F */
    char *optlist;
    QimgCacheMode src_cache, dst_cache;
    bool skip_create, progress, quiet, force_share, compress, target_is_zero;
    unsigned min_sparse;
} ConvertArgs;

static bool can_compress(const char *fmt)
{
    if (strcmp(fmt, "qcow2") != 0) {
        tool_error("Compression not supported for this file format");
        return false;
    }
    return true;
}

static bool desc_has(const ToolOptDesc *descs, const char *name)
{
    for (; descs->name; descs++) {
        if (strcmp(descs->name, name) == 0) {
            return true;
        }
    }
    return false;
}

/*
 * The target's creation options as qemu-img checks them, in its order:
 * -B/-F over -o (fact 5), --target-is-zero, the backing format, -c.
 * Returns NULL after printing the error.
 */
static GPtrArray *target_opts(ConvertArgs *a, const ToolOptDesc *descs)
{
    g_autoptr(GPtrArray) opts =
        tool_opts_parse(a->optlist ? a->optlist : "", descs, NULL);
    const char *prealloc;

    if (!opts) {
        return NULL;
    }
    tool_opts_remove(opts, "size");
    tool_opts_remove(opts, "nocow"); /* hints the library does not take */
    tool_opts_remove(opts, "extent_size_hint");
    if (a->backing && !desc_has(descs, "backing_file")) {
        tool_error("Backing file not supported for file format '%s'", a->out_fmt);
        return NULL;
    }
    if (a->backing_fmt && !desc_has(descs, "backing_fmt")) {
        tool_error("Backing file format not supported for file format '%s'", a->out_fmt);
        return NULL;
    }
    if (a->backing) {
        tool_opts_set(opts, "backing_file", a->backing, NULL);
    }
    if (a->backing_fmt) {
        tool_opts_set(opts, "backing_fmt", a->backing_fmt, NULL);
    }
    if (a->target_is_zero && tool_opts_get(opts, "backing_file")) {
        tool_error("Cannot use --target-is-zero when the destination image has a backing "
                   "file");
        return NULL;
    }
    if (tool_opts_get(opts, "backing_file") && !tool_opts_get(opts, "backing_fmt")) {
        tool_error("Use of backing file requires explicit backing format");
        return NULL;
    }
    if (a->compress && !can_compress(a->out_fmt)) {
        return NULL;
    }
    prealloc = tool_opts_get(opts, "preallocation");
    if (a->compress && prealloc && strcmp(prealloc, "off") != 0) {
        tool_error("Compression and preallocation not supported at the same time");
        return NULL;
    }
    return g_steal_pointer(&opts);
}

/* Size of the target's backing file, -1 if unknown (fact 5). */
static int64_t backing_size(QimgImage *dst)
{
    QimgImage *b = qimg_image_backing(dst);

    return b ? (int64_t)qimg_image_size(b) : -1;
}

/* Create (unless -n) and open the target; prints errors. */
static QimgImage *open_target(ConvertArgs *a, uint64_t size, Convert *s)
{
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    GError *err = NULL;
    QimgImage *dst;

    if (a->skip_create && a->target_is_zero && a->backing) {
        tool_error("Cannot use --target-is-zero when the destination image has a backing "
                   "file");
        return NULL;
    }
    if (a->skip_create && a->compress && !can_compress(a->out_fmt)) {
        return NULL;
    }
    if (!a->skip_create) {
        const ToolOptDesc *descs = tool_create_opts(a->out_fmt);
        g_autoptr(GPtrArray) opts = NULL;
        g_autoptr(GHashTable) hash = NULL;
        QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;

        if (!descs) {
            tool_error("Unknown file format '%s'", a->out_fmt);
            return NULL;
        }
        opts = target_opts(a, descs);
        if (!opts) {
            return NULL;
        }
        s->target_has_backing = tool_opts_get(opts, "backing_file") != NULL;
        s->top_only = s->target_has_backing;
        hash = tool_opts_to_hash(opts);
        co.format = a->out_fmt;
        co.size = size;
        co.size_set = true;
        co.backing_file = tool_opts_get(opts, "backing_file");
        co.backing_format = tool_opts_get(opts, "backing_fmt");
        co.options = hash;
        if (!qimg_image_create(a->dst_name, &co, &err)) {
            tool_error("%s: error while converting %s: %s", a->dst_name, a->out_fmt,
                       err->message);
            g_clear_error(&err);
            return NULL;
        }
    }

    oo.format = a->out_fmt;
    oo.cache = a->dst_cache;
    dst = qimg_image_open(a->dst_name, &oo, &err);
    if (!dst) {
        tool_report_open_error(a->dst_name, err);
        return NULL;
    }
    s->target_backing = -1;
    if (a->skip_create) {
        s->target_has_backing = a->backing || qimg_image_backing(dst) != NULL;
        s->top_only = a->backing != NULL;
        if (qimg_image_size(dst) < size) {
            tool_error("output file is smaller than input file");
            qimg_image_free(dst);
            return NULL;
        }
    } else if (s->target_has_backing) {
        s->target_backing = backing_size(dst);
    }
    if (a->target_is_zero) {
        s->zero_init = true; /* fact 6 */
    } else {
        s->zero_init = !a->skip_create && !s->target_has_backing && a->min_sparse != 0 &&
                       target_reads_zero(dst, a->dst_name);
    }
    return dst;
}

static int run_convert(ConvertArgs *a)
{
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(QimgImage) src = NULL;
    g_autoptr(QimgInfo) info = NULL;
    g_autofree char *snapshot = NULL;
    Convert s = {0};
    ToolProgress prog;
    GError *err = NULL;
    bool ok;

    if (a->snapshot) {
        snapshot = parse_snapshot_param(a->snapshot);
        if (!snapshot) {
            return 1;
        }
    }
    oo.format = a->src_fmt;
    oo.read_only = true;
    oo.cache = a->src_cache;
    oo.force_share = a->force_share;
    oo.deny_write = true; /* qemu-img: nobody writes the source while we copy it */
    oo.snapshot = snapshot;
    src = qimg_image_open(a->src_name, &oo, &err);
    if (!src) {
        tool_report_open_error(a->src_name, err);
        return 1;
    }
    info = qimg_image_get_info(src, &err);
    if (!info) {
        tool_report_gerror(err, NULL);
        return 1;
    }
    if (snapshot && !has_snapshot(info, snapshot)) {
        tool_error("Failed to load snapshot: Can't find snapshot");
        return 1;
    }

    s.src = src;
    s.size = qimg_image_size(src);
    s.src_align = MAX(info->cluster_size, SECTOR);
    s.min_sparse = a->min_sparse;
    s.alignment = MAX(pow2floor(a->min_sparse), 1u);
    s.dst = open_target(a, s.size, &s);
    if (!s.dst) {
        return 1;
    }

    s.buf = g_malloc(BUF_SIZE);
    if (a->compress) {
        g_autoptr(QimgInfo) ti = qimg_image_get_info(s.dst, NULL);
        s.compress = true;
        s.cluster = ti && ti->cluster_size ? ti->cluster_size : 65536;
        if (s.cluster > BUF_SIZE) {
            s.cluster = BUF_SIZE;
        }
    }
    tool_progress_init(&prog, a->progress && !a->quiet);
    ok = do_copy(&s, &prog);
    g_free(s.buf);
    if (ok && a->dst_cache != QIMG_CACHE_UNSAFE && !qimg_image_flush(s.dst, &err)) {
        tool_report_gerror(err, "error while flushing the target");
        err = NULL;
        ok = false;
    }
    if (!qimg_image_close(s.dst, &err)) {
        if (ok) {
            tool_report_gerror(err, NULL);
        } else {
            g_clear_error(&err);
        }
        ok = false;
    }
    if (ok) {
        tool_progress_update(&prog, s.size, s.size);
    }
    tool_progress_end(&prog);
    return ok ? 0 : 1;
}

int cmd_convert(int argc, char **argv)
{
    enum { OPT_TARGET_IS_ZERO = 256 };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"force-share", no_argument, NULL, 'U'},
        {"target-is-zero", no_argument, NULL, OPT_TARGET_IS_ZERO},
        {NULL, 0, NULL, 0},
    };
    ConvertArgs a = {
        .out_fmt = "raw",
        .src_cache = QIMG_CACHE_WRITEBACK,
        .dst_cache = QIMG_CACHE_UNSAFE,
        .min_sparse = 8,
    };
    int c, ret;

    while ((c = getopt_long(argc, argv, ":hcf:O:B:F:o:l:S:pt:T:qnm:WU", longopts,
                            NULL)) != -1) {
        switch (c) {
        case 'h':
            g_free(a.optlist);
            return tool_command_help("convert");
        case 'f':
            a.src_fmt = optarg;
            break;
        case 'O':
            a.out_fmt = optarg;
            break;
        case 'B':
            a.backing = optarg;
            break;
        case 'F':
            a.backing_fmt = optarg;
            break;
        case OPT_TARGET_IS_ZERO:
            a.target_is_zero = true;
            break;
        case 'o':
            a.optlist = tool_opts_append(a.optlist, optarg);
            break;
        case 'l':
            a.snapshot = optarg;
            break;
        case 'S':
            if (!parse_sparse(optarg, &a.min_sparse)) {
                goto fail;
            }
            break;
        case 'p':
            a.progress = true;
            break;
        case 't':
            if (!tool_parse_cache(optarg, false, &a.dst_cache)) {
                goto fail;
            }
            break;
        case 'T':
            if (!tool_parse_cache(optarg, true, &a.src_cache)) {
                goto fail;
            }
            break;
        case 'q':
            a.quiet = true;
            break;
        case 'n':
            a.skip_create = true;
            break;
        case 'm': {
            char *end;
            long m = strtol(optarg, &end, 10);
            if (*end || end == optarg || m < 1 || m > 16) {
                tool_error(
                    "Invalid number of coroutines. Allowed number of coroutines is "
                    "between 1 and 16");
                goto fail;
            }
            break; /* the copy is sequential; accepted for compatibility */
        }
        case 'c':
            a.compress = true;
            break;
        case 'W':
            break; /* out-of-order writes: accepted, the copy is in order anyway */
        case 'U':
            a.force_share = true;
            break;
        default:
            g_free(a.optlist);
            return tool_bad_option(c, argv);
        }
    }

    if (a.optlist && tool_opts_want_help(a.optlist)) {
        if (!tool_create_opts(a.out_fmt)) {
            tool_error("Unknown file format '%s'", a.out_fmt);
            goto fail;
        }
        tool_opts_print_help(a.out_fmt, optind < argc);
        g_free(a.optlist);
        return 0;
    }
    if (a.target_is_zero && !a.skip_create) {
        tool_error("--target-is-zero requires use of -n flag");
        goto fail;
    }
    if (argc - optind < 2) {
        tool_error("Must specify image file name");
        goto fail;
    }
    if (argc - optind > 2) {
        tool_error("Converting several source images into one is not supported");
        goto fail;
    }
    if (a.skip_create && a.optlist) {
        tool_error("-o has no effect when skipping image creation");
        goto fail;
    }
    a.src_name = argv[optind];
    a.dst_name = argv[optind + 1];
    ret = run_convert(&a);
    g_free(a.optlist);
    return ret;

fail:
    g_free(a.optlist);
    return 1;
}
