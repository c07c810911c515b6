/*
 * nbd/qimg-plugin.c: nbdkit-qimg-plugin.so, images served over NBD by
 * nbdkit through the public API (include/qimg/ only, like tools/).
 *
 *   nbdkit qimg file=disk.qcow2 [format=FORMAT] [cache=writeback]
 *          [snapshot=ID_OR_NAME] [discard=ignore|unmap]
 *          [detect-zeroes=off|on|unmap] [readonly=true]
 *          [image-opts=true] [secret=ID:FD ...] [trust-names=true]
 *          [clients=N]
 *
 * Owns: the one image of the export (opened in get_ready, so that a bad
 * image or an image in use fails the server at start, as qemu-nbd does),
 * the count of open connections, and the mapping of NBD requests onto the
 * image's calls.
 *
 * Invariants (cited as "qimg-plugin.c invariant N"):
 *  1. One image per export, shared by every connection (thread model
 *     PARALLEL: the image handle is thread-safe).  Flush is image-wide, so
 *     multi-conn is advertised.
 *  2. Durability: a client flush is qimg_image_flush (which reaches the
 *     disk unless cache=unsafe); FUA is emulated by nbdkit with a flush
 *     after the write.  When the last connection closes, and at unload,
 *     the image is flushed (qemu-nbd's rule: a client that leaves without
 *     flushing loses nothing to the server's cache).
 *  3. Every failure reaches the client with the image's errno
 *     (nbdkit_set_error) and is logged with its message; nothing is
 *     swallowed but discard=ignore's trims, which NBD lets a server ignore.
 *  4. Extents follow qemu-nbd's base:allocation: HOLE where the chain
 *     stores no data (unallocated or zero clusters), ZERO where reads
 *     return zeros, data otherwise, backing chain included.
 *  5. Fast zero: a zero request with NBDKIT_FLAG_FAST_ZERO uses
 *     QIMG_ZERO_NO_FALLBACK and fails with ENOTSUP, changing nothing,
 *     where zeroing would mean writing zeros.
 *  6. Secrets never appear on a command line: secret=ID:FD names an open
 *     file descriptor (qimg nbd passes a memfd) holding the secret's
 *     bytes, read once at configuration into qimg_secret_new() memory and
 *     closed; image-opts=true reads file= as qemu-nbd's --image-opts
 *     options, whose encrypt.key-secret (key-secret for luks) names one.
 *  7. clients=N (qemu-nbd's -e N; 0 or absent: no limit): at most N
 *     connections are open at once; another one waits in open until one
 *     closes, as a client of qemu-nbd waits to be accepted (qemu-nbd stops
 *     accepting at its limit and never refuses).  nbdkit's limit filter
 *     refused it instead, so a client that connected just after another
 *     left was refused whenever nbdkit had not yet closed the first.  No
 *     wait outlives the server: at shutdown the open connections end,
 *     which frees their places.
 */
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qimg/qimg.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

enum { DZ_OFF, DZ_ON, DZ_UNMAP };

static struct {
    char *file;
    char *format;
    char *snapshot;
    QimgCacheMode cache;
    bool unmap;        /* discard=unmap */
    int detect_zeroes; /* DZ_* */
    bool readonly;
    bool image_opts; /* file is --image-opts options (file_given) */
    char *file_given;
    GHashTable *secrets; /* id -> GBytes (invariant 6) */
    bool trust_names;    /* trust-names=true: QimgOpenOptions.trust_names */
    QimgImage *img;      /* invariant 1 */
    uint32_t cluster;    /* preferred block size */
    pthread_mutex_t lock;
    unsigned conns;       /* [lock] open connections (invariants 2, 7) */
    unsigned max_clients; /* invariant 7: 0 is no limit */
    pthread_cond_t slot;  /* [lock] signalled when a connection closes */
} g = {.cache = QIMG_CACHE_WRITEBACK,
       .lock = PTHREAD_MUTEX_INITIALIZER,
       .slot = PTHREAD_COND_INITIALIZER};

/* Invariant 3: the errno and the message of a failed call. */
static int fail(GError *err, const char *what)
{
    int code = err && err->code > 0 ? err->code : EIO;

    nbdkit_error("%s: %s", what, err ? err->message : g_strerror(code));
    nbdkit_set_error(code);
    g_clear_error(&err);
    return -1;
}

static void qimg_unload(void)
{
    GError *err = NULL;

    if (g.img && !qimg_image_close(g.img, &err)) { /* invariant 2 */
        nbdkit_error("closing '%s': %s", g.file, err->message);
        g_clear_error(&err);
    }
    g.img = NULL;
    free(g.file);
    free(g.file_given);
    free(g.format);
    free(g.snapshot);
    if (g.secrets) {
        g_hash_table_unref(g.secrets);
    }
}

static bool is_protocol_name(const char *name)
{
    size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyz+");

    return n > 0 && name[n] == ':' && access(name, F_OK) != 0;
}

/* Invariant 6: secret=ID:FD */
static int add_secret(const char *value)
{
    const char *colon = strrchr(value, ':');
    g_autoptr(GByteArray) bytes = g_byte_array_new();
    uint8_t buf[4096];
    char *end;
    long fd;

    if (!colon || colon == value) {
        nbdkit_error("secret=%s: expected ID:FD", value);
        return -1;
    }
    errno = 0;
    fd = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || fd < 0 || fd > INT_MAX) {
        nbdkit_error("secret=%s: expected ID:FD", value);
        return -1;
    }
    for (off_t off = 0;;) {
        ssize_t n = pread((int)fd, buf, sizeof(buf), off);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            nbdkit_error("secret=%s: reading descriptor %ld: %m", value, fd);
            explicit_bzero(bytes->data, bytes->len);
            return -1;
        }
        if (n == 0) {
            break;
        }
        g_byte_array_append(bytes, buf, (guint)n);
        off += n;
    }
    close((int)fd);
    explicit_bzero(buf, sizeof(buf));
    if (!g.secrets) {
        g.secrets = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                          (GDestroyNotify)g_bytes_unref);
    }
    g_hash_table_insert(g.secrets, g_strndup(value, (gsize)(colon - value)),
                        qimg_secret_new(bytes->data, bytes->len));
    explicit_bzero(bytes->data, bytes->len);
    return 0;
}

static int qimg_config(const char *key, const char *value)
{
    GError *err = NULL;
    int r;

    if (strcmp(key, "secret") == 0) {
        return add_secret(value);
    }
    if (strcmp(key, "image-opts") == 0) {
        r = nbdkit_parse_bool(value);
        if (r < 0) {
            return -1;
        }
        g.image_opts = r;
        return 0;
    }
    if (strcmp(key, "file") == 0) {
        free(g.file_given); /* options (image-opts=true, in any order) */
        g.file_given = strdup(value);
        free(g.file);
        /* nbdkit leaves the working directory when it forks: a path is made
         * absolute, a protocol name ("record:LOG:FILE", "blkdebug:...")
         * that names no file is passed as given (its paths must be
         * absolute). */
        g.file = is_protocol_name(value) ? strdup(value) : nbdkit_absolute_path(value);
        return g.file ? 0 : -1;
    }
    if (strcmp(key, "format") == 0) {
        if (!qimg_format_name_valid(value)) { /* one qimg cannot read: get_ready */
            nbdkit_error("format=%s: unknown format", value);
            return -1;
        }
        free(g.format);
        g.format = strdup(value);
        return g.format ? 0 : -1;
    }
    if (strcmp(key, "cache") == 0) {
        if (!qimg_cache_mode_parse(value, &g.cache, &err)) {
            nbdkit_error("cache=%s: %s", value, err->message);
            g_clear_error(&err);
            return -1;
        }
        return 0;
    }
    if (strcmp(key, "snapshot") == 0) {
        free(g.snapshot);
        g.snapshot = strdup(value);
        return g.snapshot ? 0 : -1;
    }
    if (strcmp(key, "discard") == 0) {
        if (strcmp(value, "ignore") == 0 || strcmp(value, "off") == 0) {
            g.unmap = false;
        } else if (strcmp(value, "unmap") == 0 || strcmp(value, "on") == 0) {
            g.unmap = true;
        } else {
            nbdkit_error("discard=%s: expected ignore or unmap", value);
            return -1;
        }
        return 0;
    }
    if (strcmp(key, "detect-zeroes") == 0) {
        if (strcmp(value, "off") == 0) {
            g.detect_zeroes = DZ_OFF;
        } else if (strcmp(value, "on") == 0) {
            g.detect_zeroes = DZ_ON;
        } else if (strcmp(value, "unmap") == 0) {
            g.detect_zeroes = DZ_UNMAP;
        } else {
            nbdkit_error("detect-zeroes=%s: expected off, on or unmap", value);
            return -1;
        }
        return 0;
    }
    if (strcmp(key, "readonly") == 0) {
        r = nbdkit_parse_bool(value);
        if (r < 0) {
            return -1;
        }
        g.readonly = r;
        return 0;
    }
    if (strcmp(key, "trust-names") == 0) {
        r = nbdkit_parse_bool(value);
        if (r < 0) {
            return -1;
        }
        g.trust_names = r;
        return 0;
    }
    if (strcmp(key, "clients") == 0) { /* invariant 7 */
        return nbdkit_parse_unsigned("clients", value, &g.max_clients);
    }
    nbdkit_error("unknown parameter '%s'", key);
    return -1;
}

static int qimg_config_complete(void)
{
    if (!g.file) {
        nbdkit_error("the file parameter is required (file=IMAGE)");
        return -1;
    }
    if (g.image_opts) { /* the options' paths are the caller's own */
        free(g.file);
        g.file = strdup(g.file_given);
        if (!g.file) {
            return -1;
        }
    }
    if (g.detect_zeroes == DZ_UNMAP && !g.unmap) {
        /* as QEMU: "setting detect-zeroes to unmap is not allowed without
         * setting discard operation to unmap" */
        nbdkit_error("detect-zeroes=unmap needs discard=unmap");
        return -1;
    }
    if (g.snapshot) {
        g.readonly = true; /* a snapshot is a read-only view */
    }
    return 0;
}

/* Invariant 1: the export's image, opened once before serving. */
static int qimg_get_ready(void)
{
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    GError *err = NULL;
    QimgInfo *info;

    o.format = g.format;
    o.image_opts = g.image_opts;
    o.secret_values = g.secrets;
    o.read_only = g.readonly;
    o.cache = g.cache;
    o.snapshot = g.snapshot;
    o.trust_names = g.trust_names;
    g.img = qimg_image_open(g.file, &o, &err);
    if (!g.img) {
        nbdkit_error("%s", err->message);
        g_clear_error(&err);
        return -1;
    }
    info = qimg_image_get_info(g.img, &err);
    if (!info) {
        g_clear_error(&err);
    }
    g.cluster = info && info->cluster_size ? info->cluster_size : 4096;
    qimg_info_free(info);
    return 0;
}

static void *qimg_open(int readonly)
{
    (void)readonly; /* nbdkit refuses writes on a read-only connection */
    pthread_mutex_lock(&g.lock);
    while (g.max_clients && g.conns >= g.max_clients) { /* invariant 7 */
        pthread_cond_wait(&g.slot, &g.lock);
    }
    g.conns++;
    pthread_mutex_unlock(&g.lock);
    return &g;
}

static void qimg_close(void *handle)
{
    GError *err = NULL;
    bool last;

    (void)handle;
    pthread_mutex_lock(&g.lock);
    last = --g.conns == 0;
    /* invariant 2: under the lock, so a new client's requests come after */
    if (last && !g.readonly && !qimg_image_flush(g.img, &err)) {
        nbdkit_error("flushing '%s' after the last client: %s", g.file, err->message);
        g_clear_error(&err);
    }
    pthread_cond_signal(&g.slot); /* invariant 7 */
    pthread_mutex_unlock(&g.lock);
}

static int64_t qimg_get_size(void *handle)
{
    (void)handle;
    return (int64_t)qimg_image_size(g.img);
}

static int qimg_block_size(void *handle, uint32_t *minimum, uint32_t *preferred,
                           uint32_t *maximum)
{
    (void)handle;
    *minimum = 1;
    *preferred = g.cluster < 4096 ? 4096 : g.cluster;
    *maximum = 32 * 1024 * 1024;
    return 0;
}

static int qimg_can_write(void *handle)
{
    (void)handle;
    return !g.readonly && !qimg_image_is_read_only(g.img);
}

static int qimg_can_flush(void *handle)
{
    (void)handle;
    return 1;
}

static int qimg_can_fua(void *handle)
{
    (void)handle;
    return NBDKIT_FUA_EMULATE; /* invariant 2 */
}

static int qimg_can_multi_conn(void *handle)
{
    (void)handle;
    return 1; /* invariant 1 */
}

static int qimg_can_one(void *handle)
{
    (void)handle;
    return 1;
}

static int qimg_can_cache(void *handle)
{
    (void)handle;
    return NBDKIT_CACHE_EMULATE; /* read into the image's caches */
}

static int qimg_pread(void *handle, void *buf, uint32_t count, uint64_t offset,
                      uint32_t flags)
{
    GError *err = NULL;

    (void)handle;
    (void)flags;
    if (!qimg_image_pread(g.img, offset, buf, count, &err)) {
        return fail(err, "read");
    }
    return 0;
}

static bool all_zero(const void *buf, uint32_t count)
{
    const unsigned char *p = buf;

    return count == 0 || (p[0] == 0 && memcmp(p, p + 1, count - 1) == 0);
}

static int qimg_pwrite(void *handle, const void *buf, uint32_t count, uint64_t offset,
                       uint32_t flags)
{
    GError *err = NULL;

    (void)handle;
    (void)flags; /* FUA: emulated by nbdkit (invariant 2) */
    if (g.detect_zeroes != DZ_OFF && all_zero(buf, count)) {
        unsigned zf = g.detect_zeroes == DZ_UNMAP ? QIMG_ZERO_MAY_UNMAP : 0;
        if (!qimg_image_pwrite_zeroes(g.img, offset, count, zf, &err)) {
            return fail(err, "write (detected zeroes)");
        }
        return 0;
    }
    if (!qimg_image_pwrite(g.img, offset, buf, count, &err)) {
        return fail(err, "write");
    }
    return 0;
}

static int qimg_zero(void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
    GError *err = NULL;
    unsigned zf = 0;

    (void)handle;
    if ((flags & NBDKIT_FLAG_MAY_TRIM) && g.unmap) {
        zf |= QIMG_ZERO_MAY_UNMAP;
    }
    if (flags & NBDKIT_FLAG_FAST_ZERO) {
        zf |= QIMG_ZERO_NO_FALLBACK; /* invariant 5 */
    }
    if (!qimg_image_pwrite_zeroes(g.img, offset, count, zf, &err)) {
        if ((flags & NBDKIT_FLAG_FAST_ZERO) && err->code == ENOTSUP) {
            g_clear_error(&err);
            nbdkit_set_error(ENOTSUP);
            return -1;
        }
        return fail(err, "write zeroes");
    }
    return 0;
}

static int qimg_trim(void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
    GError *err = NULL;

    (void)handle;
    (void)flags;
    if (!g.unmap) {
        return 0; /* discard=ignore (invariant 3) */
    }
    if (!qimg_image_pdiscard(g.img, offset, count, &err)) {
        return fail(err, "discard");
    }
    return 0;
}

static int qimg_flush(void *handle, uint32_t flags)
{
    GError *err = NULL;

    (void)handle;
    (void)flags;
    if (!qimg_image_flush(g.img, &err)) {
        return fail(err, "flush");
    }
    return 0;
}

/* Invariant 4. */
static int qimg_extents(void *handle, uint32_t count, uint64_t offset, uint32_t flags,
                        struct nbdkit_extents *extents)
{
    uint64_t end = offset + count;

    (void)handle;
    while (offset < end) {
        GError *err = NULL;
        QimgExtent e;
        uint32_t type = 0;

        if (!qimg_image_block_status(g.img, offset, end - offset, &e, &err)) {
            return fail(err, "block status");
        }
        if (!(e.flags & QIMG_STATUS_DATA)) {
            type |= NBDKIT_EXTENT_HOLE;
        }
        if (e.flags & QIMG_STATUS_ZERO) {
            type |= NBDKIT_EXTENT_ZERO;
        }
        if (e.length == 0 || e.length > end - offset) {
            e.length = end - offset;
        }
        if (nbdkit_add_extent(extents, offset, e.length, type) < 0) {
            return -1;
        }
        offset += e.length;
        if (flags & NBDKIT_FLAG_REQ_ONE) {
            break;
        }
    }
    return 0;
}

static struct nbdkit_plugin plugin = {
    .name = "qimg",
    .version = QIMG_VERSION,
    .longname = "qimg: qcow2, raw, VHD, VHDX, VDI and QED images",
    .description = "Serves the images libqimg opens (qcow2, raw, luks, vmdk, vpc, "
                   "vhdx, vdi read-write; qed read-only).",
    .unload = qimg_unload,
    .config = qimg_config,
    .config_complete = qimg_config_complete,
    .config_help = "file=IMAGE (required) format=FORMAT cache=MODE snapshot=ID_OR_NAME\n"
                   "discard=ignore|unmap detect-zeroes=off|on|unmap readonly=BOOL\n"
                   "image-opts=BOOL secret=ID:FD trust-names=BOOL clients=N",
    .magic_config_key = "file",
    .get_ready = qimg_get_ready,
    .open = qimg_open,
    .close = qimg_close,
    .get_size = qimg_get_size,
    .block_size = qimg_block_size,
    .can_write = qimg_can_write,
    .can_flush = qimg_can_flush,
    .can_trim = qimg_can_write,
    .can_zero = qimg_can_write,
    .can_fast_zero = qimg_can_write,
    .can_fua = qimg_can_fua,
    .can_multi_conn = qimg_can_multi_conn,
    .can_extents = qimg_can_one,
    .can_cache = qimg_can_cache,
    .pread = qimg_pread,
    .pwrite = qimg_pwrite,
    .zero = qimg_zero,
    .trim = qimg_trim,
    .flush = qimg_flush,
    .extents = qimg_extents,
    .errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN(plugin)
