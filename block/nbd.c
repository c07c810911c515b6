/*
 * block/nbd.c: the NBD protocol node, a client built on libnbd.
 *
 * Names (the caller's own, block.h invariant 5): libnbd's URIs
 * (nbd://host[:port]/export, nbd+unix:///export?socket=PATH, nbds://...)
 * and qemu-img's nbd:unix:PATH[:exportname=NAME] and
 * nbd:HOST:PORT[:exportname=NAME].
 *
 * Owns: the connections to one export and how a request reaches one.
 *
 * Invariants (cited as "nbd.c invariant N"):
 *  1. Connections: one, or up to NBD_CONNS when the server advertises
 *     multi-conn (a flush on any connection then covers the writes that
 *     completed on all of them); a request takes a free connection for its
 *     whole length (libnbd's synchronous calls), so NBD_CONNS requests are
 *     in flight at once.  Extra connections the server refuses (a client
 *     limit) are dropped at open: the node works with those it got.
 *  2. Every reply is checked: a failed command fails the request with the
 *     server's errno (EIO when it sent none) and libnbd's message.
 *  3. Requests are cut at the server's maximum block size (32 MiB when it
 *     says none); a server whose minimum block size is above 1 is refused
 *     at open (no read-modify-write here yet).
 *  4. Zeroes: NBD_CMD_WRITE_ZEROES (NO_HOLE unless MAY_UNMAP), with
 *     FAST_ZERO for NO_FALLBACK where the server has it, else -ENOTSUP;
 *     a server without zeroes gets written zeros (unless NO_FALLBACK).
 *     FUA is the server's where it has it, else a flush after the write.
 *  5. Block status from base:allocation: HOLE means no DATA, ZERO means
 *     reads return zeros (QEMU's nbd client); without the context every
 *     range is data.  Writes bump write_gen, a good flush records it
 *     (block.h invariant 4).
 */
#include "block/block.h"

#include <errno.h>
#include <inttypes.h>
#include <libnbd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NBD_CONNS 4
#define NBD_MAX_REQUEST (32u << 20)

typedef struct NbdState {
    char *name;
    struct nbd_handle *h[NBD_CONNS];
    bool busy[NBD_CONNS]; /* [lock] */
    int nconns;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint32_t max_request; /* invariant 3 */
    bool can_zero, can_fast_zero, can_fua, can_trim, can_flush, has_status;
} NbdState;

/* Invariant 2: the failed call's errno and message. */
static int nbd_fail(const NbdState *s, const char *what, uint64_t offset)
{
    int err = nbd_get_errno();
    const char *msg = nbd_get_error();

    if (err <= 0) {
        err = EIO;
    }
    return blk_error(err, "Could not %s '%s' at offset %" PRIu64 ": %s", what, s->name,
                     offset, msg ? msg : g_strerror(err));
}

/* Invariant 1. */
static int conn_get(NbdState *s)
{
    pthread_mutex_lock(&s->lock);
    for (;;) {
        for (int i = 0; i < s->nconns; i++) {
            if (!s->busy[i]) {
                s->busy[i] = true;
                pthread_mutex_unlock(&s->lock);
                return i;
            }
        }
        pthread_cond_wait(&s->cond, &s->lock);
    }
}

static void conn_put(NbdState *s, int i)
{
    pthread_mutex_lock(&s->lock);
    s->busy[i] = false;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* qemu-img's nbd:unix:PATH[:exportname=NAME] / nbd:HOST:PORT[:exportname=NAME] */
static int connect_legacy(struct nbd_handle *h, const char *name)
{
    g_auto(GStrv) parts = g_strsplit(name + strlen("nbd:"), ":", -1);
    const char *export = "";
    int n = (int)g_strv_length(parts);

    if (n > 0 && g_str_has_prefix(parts[n - 1], "exportname=")) {
        export = parts[n - 1] + strlen("exportname=");
        n--;
    }
    if (nbd_set_export_name(h, export) < 0) {
        return -1;
    }
    if (n == 2 && strcmp(parts[0], "unix") == 0) {
        return nbd_connect_unix(h, parts[1]);
    }
    if (n == 2 || n == 1) {
        return nbd_connect_tcp(h, parts[0], n == 2 ? parts[1] : "10809");
    }
    errno = EINVAL;
    return -2;
}

static struct nbd_handle *connect_one(const char *name, int *legacy_err)
{
    struct nbd_handle *h = nbd_create();
    int r;

    if (!h) {
        return NULL;
    }
    if (nbd_add_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION) < 0) {
        nbd_close(h);
        return NULL;
    }
    r = g_str_has_prefix(name, "nbd:") && !g_str_has_prefix(name, "nbd://")
            ? connect_legacy(h, name)
            : nbd_connect_uri(h, name);
    *legacy_err = r == -2;
    if (r < 0) {
        nbd_close(h);
        return NULL;
    }
    return h;
}

/* QEMU's name for the export (its nbd_refresh_filename: what qemu-img info
 * and map print): nbd+unix://?socket=S or nbd+unix:///EXPORT?socket=S,
 * nbd://HOST:PORT or nbd://HOST:PORT/EXPORT. */
static char *canonical_name(struct nbd_handle *h, const char *given)
{
    g_autofree char *uri = nbd_get_uri(h);
    g_autofree char *export = nbd_get_export_name(h);
    const char *q;

    if (!uri) {
        return g_strdup(given);
    }
    if (g_str_has_prefix(uri, "nbd+unix:///") && (q = strstr(uri, "?socket="))) {
        return export && *export ? g_strdup(uri) : g_strdup_printf("nbd+unix://%s", q);
    }
    if (g_str_has_prefix(uri, "nbd://")) {
        const char *host = uri + strlen("nbd://");
        const char *slash = strchr(host, '/');
        g_autofree char *hp =
            slash ? g_strndup(host, (size_t)(slash - host)) : g_strdup(host);
        const char *port = hp[0] == '[' ? strstr(hp, "]:") : strrchr(hp, ':');
        g_autofree char *hostport = port ? g_strdup(hp) : g_strdup_printf("%s:10809", hp);
        return export && *export ? g_strdup_printf("nbd://%s/%s", hostport, export)
                                 : g_strdup_printf("nbd://%s", hostport);
    }
    return g_strdup(uri);
}

static void nbd_node_close(BlkNode *img)
{
    NbdState *s = img->opaque;

    for (int i = 0; i < s->nconns; i++) {
        nbd_shutdown(s->h[i], 0);
        nbd_close(s->h[i]);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    g_free(s->name);
    g_free(s);
}

typedef int (*NbdIo)(struct nbd_handle *h, void *buf, size_t len, uint64_t off,
                     uint32_t flags);

static int do_pread(struct nbd_handle *h, void *buf, size_t len, uint64_t off,
                    uint32_t flags)
{
    return nbd_pread(h, buf, len, off, flags);
}

static int do_pwrite(struct nbd_handle *h, void *buf, size_t len, uint64_t off,
                     uint32_t flags)
{
    return nbd_pwrite(h, buf, len, off, flags);
}

/* One command per max_request piece (invariant 3), contiguous buffers. */
static int nbd_rw(BlkNode *img, uint64_t offset, const BlkIOV *qiov, bool write,
                  uint32_t flags)
{
    NbdState *s = img->opaque;
    size_t piece = MIN(qiov->size, (size_t)s->max_request);
    g_autofree uint8_t *bounce = qiov->niov == 1 ? NULL : g_malloc(piece);
    NbdIo io = write ? do_pwrite : do_pread;
    int ret = 0;

    for (size_t done = 0; done < qiov->size && ret == 0;) {
        size_t n = MIN(piece, qiov->size - done);
        uint8_t *buf = bounce ? bounce : (uint8_t *)qiov->iov[0].iov_base + done;
        if (bounce && write) {
            iov_to_buf(qiov, done, bounce, n);
        }
        int c = conn_get(s);
        if (io(s->h[c], buf, n, offset + done, flags) < 0) {
            ret = nbd_fail(s, write ? "write to" : "read from", offset + done);
        }
        conn_put(s, c);
        if (ret == 0 && bounce && !write) {
            iov_from_buf(qiov, done, bounce, n);
        }
        done += n;
    }
    return ret;
}

static int nbd_node_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                           unsigned flags)
{
    (void)flags;
    return nbd_rw(img, offset, qiov, false, 0);
}

static int nbd_node_flush(BlkNode *img)
{
    NbdState *s = img->opaque;
    uint64_t gen = __atomic_load_n(&img->write_gen, __ATOMIC_ACQUIRE);
    int ret = 0, c;

    if (img->read_only || !s->can_flush ||
        gen == __atomic_load_n(&img->flushed_gen, __ATOMIC_ACQUIRE)) {
        return 0;
    }
    c = conn_get(s);
    if (nbd_flush(s->h[c], 0) < 0) {
        ret = nbd_fail(s, "flush", 0);
    }
    conn_put(s, c);
    if (ret == 0) {
        blk_gen_flushed(img, gen); /* invariant 5 */
    }
    return ret;
}

/* Invariant 4: FUA natively or by a flush after the write. */
static int finish_write(BlkNode *img, int ret, unsigned flags, bool native_fua)
{
    blk_gen_bump(img);
    if (ret == 0 && (flags & BLK_REQ_FUA) && !native_fua) {
        ret = nbd_node_flush(img);
    }
    return ret;
}

static int nbd_node_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                            unsigned flags)
{
    NbdState *s = img->opaque;
    bool fua = (flags & BLK_REQ_FUA) && s->can_fua;

    return finish_write(
        img, nbd_rw(img, offset, qiov, true, fua ? LIBNBD_CMD_FLAG_FUA : 0), flags, fua);
}

static int write_zeros_as_data(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    size_t n = (size_t)MIN(bytes, (uint64_t)(1u << 20));
    g_autofree uint8_t *buf = g_malloc0(n);
    int ret = 0;

    while (bytes > 0 && ret == 0) {
        BlkIOV q;
        size_t len = (size_t)MIN(bytes, (uint64_t)n);
        iov_init_buf(&q, buf, len);
        ret = nbd_rw(img, offset, &q, true, 0);
        offset += len;
        bytes -= len;
    }
    return ret;
}

static int nbd_node_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                                  unsigned flags)
{
    NbdState *s = img->opaque;
    bool fua = (flags & BLK_REQ_FUA) && s->can_fua;
    uint32_t f = (flags & BLK_REQ_MAY_UNMAP ? 0 : LIBNBD_CMD_FLAG_NO_HOLE) |
                 (fua ? LIBNBD_CMD_FLAG_FUA : 0);
    int ret = 0;

    if (!s->can_zero || ((flags & BLK_REQ_NO_FALLBACK) && !s->can_fast_zero)) {
        if (flags & BLK_REQ_NO_FALLBACK) {
            return -ENOTSUP; /* invariant 4 */
        }
        return finish_write(img, write_zeros_as_data(img, offset, bytes), flags, false);
    }
    if (flags & BLK_REQ_NO_FALLBACK) {
        f |= LIBNBD_CMD_FLAG_FAST_ZERO;
    }
    while (bytes > 0 && ret == 0) {
        uint64_t n = MIN(bytes, (uint64_t)s->max_request);
        int c = conn_get(s);
        if (nbd_zero(s->h[c], n, offset, f) < 0) {
            ret = (flags & BLK_REQ_NO_FALLBACK) && nbd_get_errno() == ENOTSUP
                      ? -ENOTSUP
                      : nbd_fail(s, "write zeros to", offset);
        }
        conn_put(s, c);
        offset += n;
        bytes -= n;
    }
    return finish_write(img, ret, flags, fua);
}

static int nbd_node_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    NbdState *s = img->opaque;
    int ret = 0;

    if (!s->can_trim) {
        return 0; /* discard is advisory */
    }
    while (bytes > 0 && ret == 0) {
        uint64_t n = MIN(bytes, (uint64_t)s->max_request);
        int c = conn_get(s);
        if (nbd_trim(s->h[c], n, offset, 0) < 0) {
            ret = nbd_fail(s, "discard", offset);
        }
        conn_put(s, c);
        offset += n;
        bytes -= n;
    }
    blk_gen_bump(img);
    return ret;
}

typedef struct StatusReply {
    uint64_t len;
    uint32_t flags;
    bool got;
} StatusReply;

static int status_cb(void *opaque, const char *context, uint64_t offset,
                     uint32_t *entries, size_t nr_entries, int *error)
{
    StatusReply *r = opaque;

    (void)offset;
    (void)error;
    if (strcmp(context, LIBNBD_CONTEXT_BASE_ALLOCATION) == 0 && nr_entries >= 2 &&
        !r->got) {
        r->len = entries[0];
        r->flags = entries[1];
        r->got = true;
    }
    return 0;
}

/* Invariant 5. */
static int nbd_node_block_status(BlkNode *img, uint64_t offset, uint64_t bytes,
                                 BlkStatus *st)
{
    NbdState *s = img->opaque;
    StatusReply r = {0};
    int ret = 0;

    st->flags = BLK_STATUS_DATA | BLK_STATUS_ALLOCATED | BLK_STATUS_OFFSET_VALID;
    st->pnum = bytes;
    st->map = offset;
    st->file = img;
    if (!s->has_status) {
        return 0;
    }
    bytes = MIN(bytes, (uint64_t)UINT32_MAX & ~(uint64_t)511);
    int c = conn_get(s);
    if (nbd_block_status(s->h[c], bytes, offset,
                         (nbd_extent_callback){.callback = status_cb, .user_data = &r},
                         LIBNBD_CMD_FLAG_REQ_ONE) < 0) {
        ret = nbd_fail(s, "get the block status of", offset);
    }
    conn_put(s, c);
    if (ret < 0) {
        return ret;
    }
    if (!r.got || r.len == 0) {
        return blk_error(EIO,
                         "NBD server '%s' sent no base:allocation extent at %" PRIu64,
                         s->name, offset);
    }
    st->pnum = MIN(r.len, bytes);
    st->flags = BLK_STATUS_ALLOCATED | BLK_STATUS_OFFSET_VALID |
                (r.flags & LIBNBD_STATE_HOLE ? 0 : BLK_STATUS_DATA) |
                (r.flags & LIBNBD_STATE_ZERO ? BLK_STATUS_ZERO : 0);
    return 0;
}

static int64_t nbd_node_get_allocated_size(BlkNode *img)
{
    (void)img;
    return -ENOTSUP; /* qemu-img info: "disk size: unavailable" */
}

static bool nbd_node_has_zero_init(BlkNode *img)
{
    (void)img;
    return false; /* an export holds whatever it held */
}

static const BlkDriver nbd_driver = {
    .format_name = "nbd",
    .is_protocol = true,
    .close = nbd_node_close,
    .preadv = nbd_node_preadv,
    .pwritev = nbd_node_pwritev,
    .pwrite_zeroes = nbd_node_pwrite_zeroes,
    .pdiscard = nbd_node_pdiscard,
    .flush = nbd_node_flush,
    .block_status = nbd_node_block_status,
    .get_allocated_size = nbd_node_get_allocated_size,
    .has_zero_init = nbd_node_has_zero_init,
};

BlkNode *blk_open_nbd(const char *filename, bool read_only)
{
    NbdState *s = g_new0(NbdState, 1);
    BlkNode *img;
    int legacy_err = 0;
    int64_t size, maxb, minb;

    s->name = g_strdup(filename);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->h[0] = connect_one(filename, &legacy_err);
    img = g_new0(BlkNode, 1);
    img->drv = &nbd_driver;
    img->opaque = s;
    img->filename = g_strdup(filename);
    if (!s->h[0]) {
        if (legacy_err) {
            blk_error(EINVAL,
                      "Could not open '%s': expected nbd:unix:PATH[:exportname=NAME] or "
                      "nbd:HOST:PORT[:exportname=NAME]",
                      filename);
        } else {
            int err = nbd_get_errno() > 0 ? nbd_get_errno() : EIO;
            blk_error(err, "Could not open '%s': %s", filename,
                      nbd_get_error() ? nbd_get_error() : g_strerror(err));
        }
        blk_close(img);
        return NULL;
    }
    s->nconns = 1;
    size = nbd_get_size(s->h[0]);
    minb = nbd_get_block_size(s->h[0], LIBNBD_SIZE_MINIMUM);
    maxb = nbd_get_block_size(s->h[0], LIBNBD_SIZE_MAXIMUM);
    if (size < 0) {
        blk_error(EIO, "Could not open '%s': %s", filename, nbd_get_error());
        blk_close(img);
        return NULL;
    }
    if (minb > 1) { /* invariant 3 */
        blk_error(ENOTSUP,
                  "Could not open '%s': the server needs requests aligned to %" PRId64
                  " bytes, which is not supported",
                  filename, minb);
        blk_close(img);
        return NULL;
    }
    if (!read_only && nbd_is_read_only(s->h[0]) == 1) {
        blk_error(EACCES, "Could not open '%s': the NBD export is read-only", filename);
        blk_close(img);
        return NULL;
    }
    s->max_request =
        maxb > 0 ? (uint32_t)MIN(maxb, (int64_t)NBD_MAX_REQUEST) : NBD_MAX_REQUEST;
    s->can_zero = nbd_can_zero(s->h[0]) == 1;
    s->can_fast_zero = nbd_can_fast_zero(s->h[0]) == 1;
    s->can_fua = nbd_can_fua(s->h[0]) == 1;
    s->can_trim = nbd_can_trim(s->h[0]) == 1;
    s->can_flush = nbd_can_flush(s->h[0]) == 1;
    s->has_status = nbd_can_meta_context(s->h[0], LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
    if (nbd_can_multi_conn(s->h[0]) == 1) { /* invariant 1 */
        while (s->nconns < NBD_CONNS) {
            struct nbd_handle *h = connect_one(filename, &legacy_err);
            if (!h) {
                break;
            }
            s->h[s->nconns++] = h;
        }
    }
    g_free(img->filename);
    img->filename = canonical_name(s->h[0], filename);
    g_free(s->name);
    s->name = g_strdup(img->filename); /* messages name it as qemu-img does */
    img->read_only = read_only;
    img->size = (uint64_t)size;
    img->request_alignment = 1;
    return img;
}
