/*
 * block/file-io.c: how a request of the file protocol reaches its
 * descriptor (part of file.c's design).
 *
 * Owns: the read/write loop that moves every byte (short transfers, EINTR,
 * EOF), the O_DIRECT bounce buffers and read-modify-write that hide the
 * alignment from callers, the serialised and early-writeback buffered
 * writes, writing zeros, the atomic img->size accessors, s->lock, and
 * fdatasync with its sticky failure.
 *
 * Invariants: file.c's list, cited as "file.c invariant N"; this file
 * keeps 1 (O_DIRECT alignment), 3 (zeros past EOF), 4 (all bytes or
 * -errno), 5 (img->size only grows while requests run), 6 (s->lock), 7
 * (serialised large writes), 8 (early writeback; on a block device through
 * file-wb.c's thread, 16), 9 and 10 (flush generations, sticky flush
 * failure).
 */
#include "block/file.h"
#include "aio/mutex.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

/* Buffered writes at least this big start their writeback (file.c invariant 8). */
#define FILE_EARLY_WRITEBACK_MIN (1u << 20)
/* Smaller ones (file.c invariant 8): a write starting no further than this
 * past the stream's end continues it ... */
#define FILE_STREAM_GAP (1u << 20)
/* ... whose writeback starts each time it holds this much more than ... */
#define FILE_STREAM_KICK (8u << 20)
/* ... the tail of this many bytes, left to the writes still landing there. */
#define FILE_STREAM_LAG (1u << 20)
/* Buffered writes at least this big are serialised (file.c invariant 7). */
#define FILE_SERIAL_WRITE_MIN (128u * 1024)

/*
 * s->lock (file.c invariant 6) is a reader-writer lock that a thread other
 * than the one that took it may release: an io_uring write holds it shared
 * from submission to its completion on the reaper thread (uring.c
 * invariant 1).  state counts shared holders; FILE_RW_WRITER is set while
 * the one writer holds it.  Readers are preferred, as with the GRWLock
 * (pthread's default) this replaced: a writer waits until no reader holds
 * it, and readers keep coming meanwhile.  Writer preference made every
 * allocating O_DIRECT write wait for all writes in flight, since zeroing
 * the rest of a new cluster past the end of the file (file_pwrite_zeroes)
 * takes the lock exclusively: allocating writes at depth 32 ran at half
 * speed.  Shared lock and unlock are one atomic operation when no writer
 * holds or waits; waits use the mutex and condition, and every wake-up is
 * sent with the mutex held after the state changed, so none is lost
 * (writers_waiting and state are sequentially consistent: a reader that
 * drops the count to 0 sees a writer that counted itself before trying).
 */
#define FILE_RW_WRITER 0x80000000u

void file_rwlock_init(FileRwLock *l)
{
    l->state = 0;
    l->writers_waiting = 0;
    g_mutex_init(&l->m);
    g_cond_init(&l->c);
}

void file_rwlock_clear(FileRwLock *l)
{
    g_assert(l->state == 0);
    g_mutex_clear(&l->m);
    g_cond_clear(&l->c);
}

bool file_lock_try_shared(FileState *s)
{
    unsigned v = __atomic_load_n(&s->lock.state, __ATOMIC_RELAXED);

    while (!(v & FILE_RW_WRITER)) {
        if (__atomic_compare_exchange_n(&s->lock.state, &v, v + 1, true, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            return true;
        }
    }
    return false;
}

static void rw_shared_lock(FileRwLock *l, FileState *s)
{
    while (!file_lock_try_shared(s)) {
        mutex_lock(&l->m);
        while (__atomic_load_n(&l->state, __ATOMIC_ACQUIRE) & FILE_RW_WRITER) {
            mutex_cond_wait(&l->c, &l->m);
        }
        mutex_unlock(&l->m);
    }
}

static void rw_shared_unlock(FileRwLock *l)
{
    unsigned v = __atomic_sub_fetch(&l->state, 1, __ATOMIC_SEQ_CST);

    g_assert(v < FILE_RW_WRITER); /* a hold was there, and no writer with it */
    if (v == 0 && __atomic_load_n(&l->writers_waiting, __ATOMIC_SEQ_CST) > 0) {
        mutex_lock(&l->m);
        g_cond_broadcast(&l->c);
        mutex_unlock(&l->m);
    }
}

static void rw_writer_lock(FileRwLock *l)
{
    unsigned zero = 0;

    mutex_lock(&l->m);
    __atomic_add_fetch(&l->writers_waiting, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(&l->state, &zero, FILE_RW_WRITER, false,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        mutex_cond_wait(&l->c, &l->m);
        zero = 0;
    }
    __atomic_sub_fetch(&l->writers_waiting, 1, __ATOMIC_SEQ_CST);
    mutex_unlock(&l->m);
}

static void rw_writer_unlock(FileRwLock *l)
{
    mutex_lock(&l->m);
    __atomic_fetch_and(&l->state, ~FILE_RW_WRITER, __ATOMIC_RELEASE);
    g_cond_broadcast(&l->c);
    mutex_unlock(&l->m);
}

void file_lock(FileState *s, FileLockMode m)
{
    if (m == LOCK_EXCL) {
        rw_writer_lock(&s->lock);
    } else if (m == LOCK_SHARED) {
        rw_shared_lock(&s->lock, s);
    }
}

void file_unlock(FileState *s, FileLockMode m)
{
    if (m == LOCK_EXCL) {
        rw_writer_unlock(&s->lock);
    } else if (m == LOCK_SHARED) {
        rw_shared_unlock(&s->lock);
    }
}

uint64_t file_size_get(BlkNode *img)
{
    return __atomic_load_n(&img->size, __ATOMIC_ACQUIRE);
}

/* file.c invariant 5: img->size only grows while requests run. */
void file_size_grow(BlkNode *img, uint64_t end)
{
    uint64_t cur = __atomic_load_n(&img->size, __ATOMIC_RELAXED);

    if (img->is_block_device) {
        return;
    }
    while (end > cur &&
           !__atomic_compare_exchange_n(&img->size, &cur, end, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
    }
}

void file_size_set(BlkNode *img, uint64_t size)
{
    __atomic_store_n(&img->size, size, __ATOMIC_RELEASE);
}

static uint64_t align_down(uint64_t v, uint64_t a)
{
    return v - v % a;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return align_down(v + a - 1, a);
}

void *file_buf_alloc(size_t align, size_t size)
{
    void *p = NULL;

    if (posix_memalign(&p, align, size ? size : 1) != 0) {
        return NULL;
    }
    return p;
}

bool file_stream_note(FileStream *st, uint64_t offset, uint64_t len, uint64_t *from,
                      uint64_t *to)
{
    uint64_t end = offset + len;

    if (offset > st->end + FILE_STREAM_GAP || end + FILE_STREAM_GAP < st->start) {
        st->start = offset; /* not near the stream: a new one starts here */
        st->end = end;
    } else {
        st->end = MAX(st->end, end); /* (one landing late, behind it, adds nothing) */
    }
    if (st->end - st->start < FILE_STREAM_KICK + FILE_STREAM_LAG) {
        return false;
    }
    *from = st->start;
    *to = align_down(st->end - FILE_STREAM_LAG, FILE_MIN_BUF_ALIGN);
    st->start = *to;
    return true;
}

/* file.c invariant 8: start the writeback of a large write's range, or of
 * the stream of small ones once it grew enough; neither waits for it. */
static void early_writeback(FileState *s, uint64_t offset, uint64_t len)
{
    uint64_t from = offset, to = offset + len;

    if (len < FILE_EARLY_WRITEBACK_MIN) {
        mutex_lock(&s->wb_lock); /* mutex.h invariant 1 */
        bool kick = file_stream_note(&s->wb_stream, offset, len, &from, &to);
        mutex_unlock(&s->wb_lock);
        if (!kick) {
            return;
        }
    }
    if (s->wb_thread && file_wb_start(s, from, to)) {
        return; /* file.c invariant 16: off this thread */
    }
    /* only starts the writeback; errors surface at flush */
    (void)sync_file_range(s->fd, (off_t)from, (off_t)(to - from), SYNC_FILE_RANGE_WRITE);
}

/* file.c invariant 13: a free slot's buffer, else a new one; every pooled
 * buffer has the same size, so any fits any bounce. */
void *file_bounce_get(FileState *s, size_t size)
{
    g_assert(size <= FILE_CHUNK_MAX);
    for (unsigned i = 0; i < FILE_POOL_SLOTS; i++) {
        void *b = __atomic_exchange_n(&s->pool[i], NULL, __ATOMIC_ACQUIRE);
        if (b) {
            return b;
        }
    }
    return file_buf_alloc(s->buf_align, FILE_CHUNK_MAX);
}

void file_bounce_put(FileState *s, void *buf)
{
    for (unsigned i = 0; buf && i < FILE_POOL_SLOTS; i++) {
        void *empty = NULL;
        if (__atomic_compare_exchange_n(&s->pool[i], &empty, buf, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
            return;
        }
    }
    free(buf); /* the pool is full: it stays bounded */
}

void file_bounce_pool_clear(FileState *s)
{
    for (unsigned i = 0; i < FILE_POOL_SLOTS; i++) {
        free(__atomic_exchange_n(&s->pool[i], NULL, __ATOMIC_ACQUIRE));
    }
}

/* Errors that mean "this way of zeroing/discarding is not available here". */
bool file_errno_unsupported(int err)
{
    return err == EOPNOTSUPP || err == ENOTSUP || err == ENOTTY || err == EINVAL ||
           err == ENOSYS || err == ENODEV;
}

bool file_qiov_aligned(const BlkIOV *qiov, uint64_t offset, uint64_t align)
{
    if (offset % align || qiov->size % align) {
        return false;
    }
    for (int i = 0; i < qiov->niov; i++) {
        if ((uintptr_t)qiov->iov[i].iov_base % align || qiov->iov[i].iov_len % align) {
            return false;
        }
    }
    return true;
}

static int do_fdatasync(int fd)
{
    while (fdatasync(fd) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

/* file.c invariant 10: -EIO with the reason once a flush of the node failed. */
int file_check_sticky(const FileState *s, const char *what)
{
    int err = __atomic_load_n(&s->flush_error, __ATOMIC_ACQUIRE);

    if (err == 0) {
        return 0;
    }
    return blk_error(EIO,
                     "Could not %s '%s': an earlier flush of it failed (%s), so data "
                     "written before may be lost; refusing further writes until it is "
                     "closed",
                     what, s->name, g_strerror(err));
}

/* fdatasync; a failure is remembered (file.c invariant 10). */
int file_fdatasync_sticky(FileState *s)
{
    int ret = do_fdatasync(s->fd);

    if (ret < 0) {
        int expected = 0;
        __atomic_compare_exchange_n(&s->flush_error, &expected, -ret, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    return ret;
}

/*
 * fdatasync for a flush or a FUA write (file.c invariants 9, 10): covers every
 * write that completed before it started.
 */
int file_sync_node(BlkNode *img, FileState *s)
{
    uint64_t gen = __atomic_load_n(&img->write_gen, __ATOMIC_ACQUIRE);
    int ret = file_check_sticky(s, "flush");

    if (ret < 0) {
        return ret;
    }
    if (gen == __atomic_load_n(&img->flushed_gen, __ATOMIC_ACQUIRE)) {
        return 0; /* nothing new since the last flush */
    }
    if (!s->no_flush) { /* file.c invariant 2: unsafe never syncs */
        ret = file_fdatasync_sticky(s);
        if (ret < 0) {
            return blk_error(-ret, "Could not flush '%s': %s", s->name, g_strerror(-ret));
        }
    }
    blk_gen_flushed(img, gen);
    return 0;
}

int file_do_fallocate(int fd, int mode, uint64_t offset, uint64_t bytes)
{
    while (fallocate(fd, mode, (off_t)offset, (off_t)bytes) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

int file_do_ftruncate(int fd, uint64_t size)
{
    while (ftruncate(fd, (off_t)size) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

/* Zero iov[idx..niov) (the rest of a request after EOF, file.c invariant 3). */
static void iov_zero_rest(struct iovec *v, int idx, int niov)
{
    for (int i = idx; i < niov; i++) {
        memset(v[i].iov_base, 0, v[i].iov_len);
    }
}

/*
 * Move all 'bytes' described by iov at 'offset' (file.c invariant 4).  Reads stop
 * at EOF and zero-fill the rest (file.c invariant 3).  Does not touch img->size.
 */
int file_fd_rw_full(FileState *s, uint64_t align, bool is_write, const struct iovec *iov,
                    int niov, uint64_t offset, size_t bytes)
{
    struct iovec local[16];
    struct iovec *v = niov <= 16 ? local : g_new(struct iovec, niov);
    size_t done = 0;
    int idx = 0;
    int ret = 0;

    memcpy(v, iov, sizeof(*v) * (size_t)niov);
    while (done < bytes) {
        while (idx < niov && v[idx].iov_len == 0) {
            idx++;
        }
        g_assert(idx < niov);
        int cnt = MIN(niov - idx, IOV_MAX);
        ssize_t n = is_write ? pwritev(s->fd, &v[idx], cnt, (off_t)(offset + done))
                             : preadv(s->fd, &v[idx], cnt, (off_t)(offset + done));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            ret = -errno;
            break;
        }
        if (n == 0) {
            if (is_write) {
                ret = -EIO;
            } else {
                iov_zero_rest(v, idx, niov); /* EOF: file.c invariant 3 */
            }
            break;
        }
        done += (size_t)n;
        size_t adv = (size_t)n;
        while (adv > 0) {
            size_t take = MIN(adv, v[idx].iov_len);
            v[idx].iov_base = (char *)v[idx].iov_base + take;
            v[idx].iov_len -= take;
            adv -= take;
            if (v[idx].iov_len == 0) {
                idx++;
            }
        }
        if (!is_write && done < bytes && (offset + done) % align) {
            /*
             * An O_DIRECT read ended short at an unaligned position: that is
             * only legitimate at EOF, and retrying there would break
             * file.c invariant 1.  Check rather than assume.
             */
            struct stat st;
            if (fstat(s->fd, &st) < 0) {
                ret = -errno;
            } else if (offset + done >= (uint64_t)st.st_size) {
                iov_zero_rest(v, idx, niov);
            } else {
                ret = -EIO;
            }
            break;
        }
    }
    if (v != local) {
        g_free(v);
    }
    return ret;
}

static int fd_rw_buf(FileState *s, uint64_t align, bool is_write, void *buf, size_t len,
                     uint64_t offset)
{
    struct iovec v = {.iov_base = buf, .iov_len = len};

    return file_fd_rw_full(s, align, is_write, &v, 1, offset, len);
}

/* Unaligned O_DIRECT read through a bounce buffer (file.c invariant 1). */
int file_bounce_read(BlkNode *img, FileState *s, uint64_t offset, const BlkIOV *qiov)
{
    uint64_t align = img->request_alignment;
    uint64_t span = align_up(offset + qiov->size, align) - align_down(offset, align);
    size_t bufsize = MIN(span, align_up(FILE_CHUNK_MAX, align));
    char *buf = file_bounce_get(s, bufsize);
    size_t done = 0;
    int ret = 0;

    if (!buf) {
        return -ENOMEM;
    }
    while (done < qiov->size) {
        uint64_t pos = offset + done;
        uint64_t astart = align_down(pos, align);
        size_t head = pos - astart;
        size_t len = MIN(qiov->size - done, bufsize - head);
        size_t alen = align_up(pos + len, align) - astart;

        ret = fd_rw_buf(s, align, false, buf, alen, astart);
        if (ret < 0) {
            break;
        }
        iov_from_buf(qiov, done, buf + head, len);
        done += len;
    }
    file_bounce_put(s, buf);
    return ret;
}

/*
 * Unaligned O_DIRECT write: read-modify-write of the partial blocks through
 * a bounce buffer (file.c invariant 1).  Caller holds s->lock exclusively
 * (file.c invariant 6).
 */
static int file_rmw_write(BlkNode *img, FileState *s, uint64_t offset, const BlkIOV *qiov)
{
    uint64_t align = img->request_alignment;
    uint64_t end = offset + qiov->size;
    uint64_t aend_all = align_up(end, align);
    uint64_t span = aend_all - align_down(offset, align);
    size_t bufsize = MIN(span, align_up(FILE_CHUNK_MAX, align));
    uint64_t old_size = 0;
    size_t done = 0;
    int ret = 0;
    char *buf;

    if (!img->is_block_device) {
        struct stat st;
        if (fstat(s->fd, &st) < 0) {
            return -errno;
        }
        old_size = (uint64_t)st.st_size;
    }
    buf = file_bounce_get(s, bufsize);
    if (!buf) {
        return -ENOMEM;
    }
    while (done < qiov->size) {
        uint64_t pos = offset + done;
        uint64_t astart = align_down(pos, align);
        size_t head = pos - astart;
        size_t len = MIN(qiov->size - done, bufsize - head);
        size_t alen = align_up(pos + len, align) - astart;
        bool tail = (pos + len) % align != 0;

        if (head) {
            ret = fd_rw_buf(s, align, false, buf, align, astart);
            if (ret < 0) {
                break;
            }
        }
        if (tail && !(head && alen == align)) {
            ret = fd_rw_buf(s, align, false, buf + alen - align, align,
                            astart + alen - align);
            if (ret < 0) {
                break;
            }
        }
        iov_to_buf(qiov, done, buf + head, len);
        ret = fd_rw_buf(s, align, true, buf, alen, astart);
        if (ret < 0) {
            break;
        }
        done += len;
    }
    file_bounce_put(s, buf);
    /*
     * The padding may have pushed EOF to the aligned end; put it back where
     * the request left it.  Safe only because we hold s->lock exclusively.
     */
    if (!img->is_block_device && aend_all > old_size && end < aend_all) {
        int r = file_do_ftruncate(s->fd, MAX(old_size, MIN(end, offset + done)));
        if (r == 0 && s->dsync) {
            r = file_fdatasync_sticky(s);
        }
        if (ret == 0) {
            ret = r;
        }
    }
    if (ret == 0) {
        file_size_grow(img, end);
    }
    return ret;
}

/* Write qiov at offset; caller holds s->lock as file.c invariant 6 requires. */
bool file_range_aligned(uint64_t offset, uint64_t size, uint64_t align)
{
    return offset % align == 0 && size % align == 0;
}

/* O_DIRECT write of an aligned range from unaligned buffers: copy into an
 * aligned bounce buffer, no read needed (file.c invariant 1); s->lock shared. */
static int file_bounce_write(BlkNode *img, FileState *s, uint64_t offset,
                             const BlkIOV *qiov)
{
    size_t bufsize = MIN(qiov->size, (size_t)align_up(FILE_CHUNK_MAX, s->buf_align));
    char *buf = file_bounce_get(s, bufsize);
    size_t done = 0;
    int ret = 0;

    if (!buf) {
        return -ENOMEM;
    }
    while (done < qiov->size && ret == 0) {
        size_t len = MIN(qiov->size - done, bufsize);
        iov_to_buf(qiov, done, buf, len);
        ret = fd_rw_buf(s, img->request_alignment, true, buf, len, offset + done);
        done += len;
    }
    file_bounce_put(s, buf);
    if (ret == 0) {
        file_size_grow(img, offset + qiov->size);
    }
    return ret;
}

int file_do_pwritev(BlkNode *img, FileState *s, uint64_t offset, const BlkIOV *qiov)
{
    int ret;

    if (qiov->size == 0) {
        return 0;
    }
    if (s->direct && !file_qiov_aligned(qiov, offset, img->request_alignment)) {
        if (file_range_aligned(offset, qiov->size, img->request_alignment)) {
            return file_bounce_write(img, s, offset, qiov);
        }
        return file_rmw_write(img, s, offset, qiov);
    }
    bool serialize = s->serialize_writes && qiov->size >= FILE_SERIAL_WRITE_MIN;

    if (serialize) {
        mutex_lock(&s->wlock); /* file.c invariant 7 */
    }
    ret = file_fd_rw_full(s, img->request_alignment, true, qiov->iov, qiov->niov, offset,
                          qiov->size);
    if (serialize) {
        mutex_unlock(&s->wlock);
    }
    if (ret == 0 && s->early_writeback) {
        early_writeback(s, offset, qiov->size); /* file.c invariant 8 */
    }
    if (ret == 0) {
        file_size_grow(img, offset + qiov->size);
    }
    return ret;
}

/* file.c invariant 14: copy_file_range until every byte moved; a copy
 * that moves nothing (the source ends first) is -ENOSPC, as QEMU's; locking
 * as for file_do_pwritev. */
int file_do_copy_in(BlkNode *img, FileState *s, uint64_t offset, FileState *src,
                    uint64_t src_offset, uint64_t bytes)
{
    loff_t in = (loff_t)src_offset, out = (loff_t)offset;
    uint64_t done = 0;

    while (done < bytes) {
        ssize_t n = copy_file_range(src->fd, &in, s->fd, &out,
                                    (size_t)MIN(bytes - done, (uint64_t)1 << 30), 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return n < 0 ? -errno : -ENOSPC;
        }
        done += (uint64_t)n;
        file_size_grow(img, offset + done);
    }
    return 0;
}

/* Write zeros in chunks of at most 1 MiB; locking as for file_do_pwritev. */
int file_write_zeroes_slow(BlkNode *img, FileState *s, uint64_t offset, uint64_t bytes)
{
    size_t bufsize = MIN(bytes, FILE_CHUNK_MAX);
    void *buf = file_buf_alloc(s->buf_align, bufsize);
    int ret = 0;

    if (!buf) {
        return -ENOMEM;
    }
    memset(buf, 0, bufsize);
    while (bytes > 0) {
        size_t n = MIN(bytes, bufsize);
        BlkIOV q;
        iov_init_buf(&q, buf, n);
        ret = file_do_pwritev(img, s, offset, &q);
        if (ret < 0) {
            break;
        }
        offset += n;
        bytes -= n;
    }
    free(buf);
    return ret;
}
