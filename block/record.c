/*
 * block/record.c: the recording protocol node for crash-state tests.
 *
 * Owns: logging every change a format driver makes to a file -- writes
 * (with their data), zero writes, discards, resizes -- and every completed
 * flush, in order, to a log file that tests/crash/ rebuilds power-loss
 * states from.  Opened only when the caller names it ("record:LOG:FILE",
 * block.h invariant 5); several nodes may share one log (an image and its
 * external data file), each with its own file id.
 *
 * Log format (little-endian; crash-check.py reads it):
 *   header  8 bytes "QIMGRLG1", u32 version (1), u32 0
 *   entry   u32 type, u32 file id, u64 offset, u64 length, u64 aux,
 *           then `length` bytes of data for WRITE and OPEN
 *   types   1 WRITE    data written at offset; aux: REC_AUX_RING when
 *                      the io_uring wrote it (invariant 5), REC_AUX_FUA
 *                      when it was durable on completion (invariant 6)
 *           2 ZERO     [offset, +length) reads as zeros (aux: request flags)
 *           3 DISCARD  [offset, +length) was punched (reads as zeros)
 *           4 TRUNCATE the file was resized to offset bytes
 *           5 FLUSH    a flush of the file completed; it covered the
 *                      entries logged before it started: aux = the log's
 *                      size in bytes when it started (entries that begin
 *                      below it are covered; several processes or opens
 *                      may append to one log in turn)
 *           6 OPEN     a node opened: data = the file's path, offset = its
 *                      size at that moment
 *
 * Invariants:
 *  1. An entry is appended after the child's request completed (so the log
 *     order is a completion order) and before the request returns; failed
 *     requests are logged too (they may have changed the file).  A flush is
 *     logged only if it worked, with the count of entries that completed
 *     before it began: exactly what it made durable.
 *  2. Appends are serialised by the log's mutex, one write(2) per entry, so
 *     entries never interleave.  The log is written with plain write(2)
 *     and never synced: it is test output, not state.
 *  3. Reads, block status and the generations (block.h invariant 4) pass
 *     through to the child unchanged.
 *  4. A failure to write the log fails the request with its error: a test
 *     must never judge a log that misses a change.
 *  5. Over a file node the io_uring drives the child's descriptor for this
 *     node (uring.c invariant 6): the node's requests then bypass the
 *     functions below.  A completed ring write -- a failed or short one
 *     too -- is logged by blk_record_ring_done on the thread that reaps
 *     it, after the child's write generation was bumped (file.c invariant
 *     9) and before the request's callback, with its data and aux
 *     REC_AUX_RING.  So invariant 1 holds for it: the log order is a
 *     completion order, and a flush whose start (the log's size, read in
 *     record_flush before the child's flush) is past the entry saw the
 *     bump, so the child's flush synced it; an entry logged after a
 *     concurrent flush began is not covered by it (the log may understate
 *     what became durable, never overstate it).  The reaping thread only
 *     takes the log's mutex, which no holder keeps across anything but
 *     its own write(2): it cannot deadlock on a flush.  Ring reads pass
 *     through unlogged (invariant 3).
 *  6. A write with BLK_REQ_FUA goes to the child with it (the child makes
 *     it durable before it returns, file.c invariant 2) and, if it worked,
 *     is logged with REC_AUX_FUA: durable by itself, the entries before it
 *     not (crash.py keeps it in every state that holds it), which is what
 *     the flag promises -- a file node's fdatasync happens to cover more,
 *     a device's FUA write does not.  A failed one is logged without the
 *     mark.  A zero write with it is logged as zero write + flush (the
 *     file node's zeroing does not take the flag).
 */
#include "block/block.h"
#include "aio/mutex.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    REC_WRITE = 1,
    REC_ZERO = 2,
    REC_DISCARD = 3,
    REC_TRUNCATE = 4,
    REC_FLUSH = 5,
    REC_OPEN = 6,
};

#define REC_AUX_RING 1u /* invariant 5 */
#define REC_AUX_FUA 2u  /* invariant 6 */
#define REC_MAGIC "QIMGRLG1"
#define REC_HEADER_SIZE 16
#define REC_ENTRY_SIZE 32

typedef struct RecordLog {
    char *path;
    int fd;
    unsigned refs;
    uint32_t next_file_id;
    uint64_t bytes; /* size of the log file */
    GMutex lock;    /* invariant 2 */
} RecordLog;

typedef struct RecordState {
    BlkNode *child;
    RecordLog *log;
    uint32_t file_id;
} RecordState;

/* Logs by path, so nodes of one process naming the same log share it. */
static GMutex registry_lock;
static GHashTable *registry; /* path -> RecordLog */

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static int write_all(int fd, const struct iovec *iov, int niov)
{
    struct iovec local[64];
    int idx = 0;

    g_assert(niov <= (int)G_N_ELEMENTS(local));
    memcpy(local, iov, sizeof(*iov) * (size_t)niov);
    while (idx < niov) {
        ssize_t n = writev(fd, &local[idx], MIN(niov - idx, 64));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        while (n > 0 && idx < niov) {
            size_t take = MIN((size_t)n, local[idx].iov_len);
            local[idx].iov_base = (char *)local[idx].iov_base + take;
            local[idx].iov_len -= take;
            n -= (ssize_t)take;
            if (local[idx].iov_len == 0) {
                idx++;
            }
        }
        while (idx < niov && local[idx].iov_len == 0) {
            idx++;
        }
    }
    return 0;
}

/* Append one entry (invariants 2, 4); data may be NULL. */
static int log_append(RecordState *s, uint32_t type, uint64_t offset, uint64_t length,
                      uint64_t aux, const BlkIOV *data)
{
    RecordLog *log = s->log;
    uint8_t hdr[REC_ENTRY_SIZE];
    struct iovec vec[64];
    int n = 0, ret = 0;

    put_le32(hdr, type);
    put_le32(hdr + 4, s->file_id);
    put_le64(hdr + 8, offset);
    put_le64(hdr + 16, length);
    put_le64(hdr + 24, aux);
    vec[n++] = (struct iovec){.iov_base = hdr, .iov_len = sizeof(hdr)};

    mutex_lock(&log->lock);
    if (data && data->niov > 63) {
        /* Rare: flatten a long vector. */
        g_autofree uint8_t *flat = g_malloc(data->size);
        iov_to_buf(data, 0, flat, data->size);
        vec[n++] = (struct iovec){.iov_base = flat, .iov_len = data->size};
        ret = write_all(log->fd, vec, n);
    } else {
        for (int i = 0; data && i < data->niov; i++) {
            vec[n++] = data->iov[i];
        }
        ret = write_all(log->fd, vec, n);
    }
    if (ret == 0) {
        log->bytes += sizeof(hdr) + (data ? data->size : 0);
    }
    mutex_unlock(&log->lock);
    if (ret < 0) {
        return blk_error(-ret, "Could not write the record log '%s': %s", log->path,
                         g_strerror(-ret));
    }
    return 0;
}

static uint64_t log_bytes(RecordLog *log)
{
    mutex_lock(&log->lock);
    uint64_t n = log->bytes;
    mutex_unlock(&log->lock);
    return n;
}

static RecordLog *log_open(const char *path)
{
    RecordLog *log;
    struct stat st;
    int fd;

    mutex_lock(&registry_lock);
    if (!registry) {
        registry = g_hash_table_new(g_str_hash, g_str_equal);
    }
    log = g_hash_table_lookup(registry, path);
    if (log) {
        log->refs++;
        mutex_unlock(&registry_lock);
        return log;
    }
    do {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        blk_error(e, "Could not open the record log '%s': %s", path, g_strerror(e));
        if (fd >= 0) {
            close(fd);
        }
        mutex_unlock(&registry_lock);
        return NULL;
    }
    log = g_new0(RecordLog, 1);
    log->path = g_strdup(path);
    log->fd = fd;
    log->refs = 1;
    log->bytes = (uint64_t)st.st_size;
    g_mutex_init(&log->lock);
    if (st.st_size == 0) {
        uint8_t hdr[REC_HEADER_SIZE] = {0};
        struct iovec v = {.iov_base = hdr, .iov_len = sizeof(hdr)};
        memcpy(hdr, REC_MAGIC, 8);
        put_le32(hdr + 8, 1);
        log->bytes = sizeof(hdr);
        if (write_all(fd, &v, 1) < 0) {
            int e = errno;
            blk_error(e, "Could not write the record log '%s': %s", path, g_strerror(e));
            close(fd);
            g_mutex_clear(&log->lock);
            g_free(log->path);
            g_free(log);
            mutex_unlock(&registry_lock);
            return NULL;
        }
    }
    g_hash_table_insert(registry, log->path, log);
    mutex_unlock(&registry_lock);
    return log;
}

static void log_close(RecordLog *log)
{
    mutex_lock(&registry_lock);
    if (--log->refs == 0) {
        g_hash_table_remove(registry, log->path);
        close(log->fd);
        g_mutex_clear(&log->lock);
        g_free(log->path);
        g_free(log);
    }
    mutex_unlock(&registry_lock);
}

/* ---- requests ---- */

static int record_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                         unsigned flags)
{
    RecordState *s = img->opaque;
    return blk_preadv(s->child, offset, qiov, flags); /* invariant 3 */
}

/* Invariant 1: the request's result wins, then the log's. */
static int logged(int ret, int log_ret)
{
    return ret < 0 ? ret : log_ret;
}

static int record_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov,
                          unsigned flags)
{
    RecordState *s = img->opaque;
    int ret = blk_pwritev(s->child, offset, qiov, flags);
    uint64_t aux = ret == 0 && (flags & BLK_REQ_FUA) ? REC_AUX_FUA : 0; /* invariant 6 */

    blk_filter_size_update(img, true);
    return logged(ret, log_append(s, REC_WRITE, offset, qiov->size, aux, qiov));
}

int blk_record_ring_done(BlkNode *img, uint64_t offset, const BlkIOV *q, int ret)
{
    RecordState *s = img->opaque;
    int lr = log_append(s, REC_WRITE, offset, q->size, REC_AUX_RING, q); /* invariant 5 */

    if (lr < 0) {
        blk_error_clear(); /* the node's path runs it again and says why */
    }
    return logged(ret, lr);
}

static int record_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                                unsigned flags)
{
    RecordState *s = img->opaque;
    int ret = blk_pwrite_zeroes(s->child, offset, bytes, flags & ~BLK_REQ_FUA);

    blk_filter_size_update(img, true);
    if (ret == -ENOTSUP) {
        return ret; /* nothing happened (NO_FALLBACK) */
    }
    ret = logged(ret, log_append(s, REC_ZERO, offset, bytes, flags, NULL));
    if (ret == 0 && (flags & BLK_REQ_FUA)) {
        ret = blk_flush(img); /* invariant 6 */
    }
    return ret;
}

static int record_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    RecordState *s = img->opaque;
    int ret = blk_pdiscard(s->child, offset, bytes);
    return logged(ret, log_append(s, REC_DISCARD, offset, bytes, 0, NULL));
}

static int record_flush(BlkNode *img)
{
    RecordState *s = img->opaque;
    uint64_t covered = log_bytes(s->log); /* invariant 1 */
    int ret = blk_flush(s->child);

    if (ret < 0) {
        return ret;
    }
    return log_append(s, REC_FLUSH, 0, 0, covered, NULL);
}

static int record_block_status(BlkNode *img, uint64_t offset, uint64_t bytes,
                               BlkStatus *st)
{
    RecordState *s = img->opaque;
    int ret = blk_block_status(s->child, offset, bytes, st);
    if (st->file == s->child) {
        st->file = img;
    }
    return ret;
}

static int record_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                           bool shrink)
{
    RecordState *s = img->opaque;
    int ret = blk_truncate(s->child, size, exact, prealloc, shrink);
    int lr;

    blk_filter_size_update(img, false);
    lr = log_append(s, REC_TRUNCATE, s->child->size, 0, 0, NULL);
    if (ret == 0 && lr < 0) {
        return lr;
    }
    return ret;
}

static int64_t record_get_allocated_size(BlkNode *img)
{
    RecordState *s = img->opaque;
    return blk_get_allocated_size(s->child);
}

static bool record_has_zero_init(BlkNode *img)
{
    RecordState *s = img->opaque;
    return s->child->drv->has_zero_init && s->child->drv->has_zero_init(s->child);
}

static void record_event(BlkNode *img, BlkEvent ev)
{
    RecordState *s = img->opaque;
    blk_event(s->child, ev);
}

/* Image locks are the child's (block.h invariant 6). */
static int record_set_perm(BlkNode *img, unsigned perm, unsigned shared)
{
    RecordState *s = img->opaque;
    return s->child->drv->set_perm ? s->child->drv->set_perm(s->child, perm, shared) : 0;
}

static void record_close(BlkNode *img)
{
    RecordState *s = img->opaque;
    blk_close(s->child);
    log_close(s->log);
    g_free(s);
}

static const BlkDriver record_driver = {
    .format_name = "record",
    .is_protocol = true,
    .close = record_close,
    .preadv = record_preadv,
    .pwritev = record_pwritev,
    .pwrite_zeroes = record_pwrite_zeroes,
    .pdiscard = record_pdiscard,
    .flush = record_flush,
    .block_status = record_block_status,
    .truncate = record_truncate,
    .get_allocated_size = record_get_allocated_size,
    .has_zero_init = record_has_zero_init,
    .event = record_event,
    .set_perm = record_set_perm,
};

BlkNode *blk_open_record(const char *log_path, BlkNode *child)
{
    RecordLog *log = log_open(log_path);
    RecordState *s;
    BlkNode *img;
    BlkIOV name;
    int ret;

    if (!log) {
        blk_close(child);
        return NULL;
    }
    s = g_new0(RecordState, 1);
    s->child = child;
    s->log = log;
    mutex_lock(&log->lock);
    s->file_id = log->next_file_id++;
    mutex_unlock(&log->lock);

    img = g_new0(BlkNode, 1);
    img->drv = &record_driver;
    img->opaque = s;
    img->filename = g_strdup(child->filename);
    img->read_only = child->read_only;
    img->cache = child->cache;
    img->size = child->size;
    img->request_alignment = child->request_alignment;
    img->is_block_device = child->is_block_device;
    img->filtered = child;

    /* The absolute path: the checker runs elsewhere. */
    g_autofree char *abs = realpath(child->filename, NULL);
    const char *path = abs ? abs : child->filename;
    iov_init_buf(&name, (void *)path, strlen(path));
    ret = log_append(s, REC_OPEN, child->size, name.size, 0, &name);
    if (ret < 0) {
        blk_close(img);
        return NULL;
    }
    return img;
}

bool blk_is_record_node(const BlkNode *img)
{
    return img && img->drv == &record_driver;
}

const char *blk_record_log_path(const BlkNode *img)
{
    return blk_is_record_node(img) ? ((RecordState *)img->opaque)->log->path : NULL;
}
