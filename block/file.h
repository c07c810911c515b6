/*
 * block/file.h: shared by the files of the file protocol driver (file.c,
 * file-io.c, file-create.c) and nothing else.  See file.c for what the
 * driver owns and its invariants, which the other files cite as
 * "file.c invariant N".
 */
#ifndef QIMG_BLOCK_FILE_H
#define QIMG_BLOCK_FILE_H

#include "block/block.h"
#include "block/lock.h"

#include <sys/uio.h>

/* Bounce buffers and zero-writing buffers are at most this big. */
#define FILE_CHUNK_MAX (1u << 20)
/* Buffers are aligned to at least this (a page). */
#define FILE_MIN_BUF_ALIGN 4096u
/* O_DIRECT bounce buffers kept for reuse per node (file.c invariant 13). */
#define FILE_POOL_SLOTS 16u
/* s->lock (file.c invariant 6): released by any thread (file-io.c). */
typedef struct FileRwLock {
    unsigned state;           /* shared holders | FILE_RW_WRITER; atomic */
    unsigned writers_waiting; /* atomic */
    GMutex m;
    GCond c;
} FileRwLock;

/* file.c invariant 8: the run of small buffered writes appended near its
 * end whose writeback has not been started yet ([start, end)). */
typedef struct FileStream {
    uint64_t start, end;
} FileStream;

/* file-wb.c: the writeback thread of a block device (file.c invariant 16). */
#define FILE_WB_RANGES 16u
typedef struct FileWbRange {
    uint64_t from, to;
} FileWbRange;
typedef struct FileWbQueue {
    FileWbRange r[FILE_WB_RANGES];
    unsigned n;
} FileWbQueue;
typedef struct FileWb FileWb;

typedef struct FileState {
    int fd;
    char *name;    /* for messages */
    bool direct;   /* O_DIRECT: file.c invariant 1 applies */
    bool dsync;    /* O_DSYNC: every write durable (file.c invariant 2) */
    bool no_flush; /* cache=unsafe (file.c invariant 2) */
    bool read_only;
    size_t buf_align; /* max(request_alignment, 4096) */
    uint32_t lbs;     /* block devices: the logical block size (invariant 12) */
    FileRwLock lock;  /* file.c invariant 6 */
    GMutex wlock;     /* file.c invariant 7 */
    bool serialize_writes;
    bool early_writeback; /* file.c invariant 8 */
    GMutex wb_lock;       /* file.c invariant 8: the stream of small writes */
    FileStream wb_stream; /* [wb_lock] */
    bool wb_thread;       /* file.c invariant 16: a block device's writeback thread */
    FileWb *wb;           /* atomic; made under wb_lock at the first kick */
    bool wb_failed;       /* [wb_lock] it could not be made (file-wb.c invariant 4) */
    int flush_error;      /* file.c invariant 10: errno of the failed fdatasync, atomic */
    BlkLockState locks;   /* file.c invariant 11 */
    void *pool[FILE_POOL_SLOTS]; /* file.c invariant 13: idle bounce buffers; atomic */
} FileState;

typedef enum { LOCK_NONE, LOCK_SHARED, LOCK_EXCL } FileLockMode;

/* file-io.c */
void file_rwlock_init(FileRwLock *l);
void file_rwlock_clear(FileRwLock *l);
void file_lock(FileState *s, FileLockMode m);
/* A shared hold without waiting; false while a writer holds it. */
bool file_lock_try_shared(FileState *s);
void file_unlock(FileState *s, FileLockMode m);
uint64_t file_size_get(BlkNode *img);
/* file.c invariant 5: img->size only grows while requests run. */
void file_size_grow(BlkNode *img, uint64_t end);
void file_size_set(BlkNode *img, uint64_t size);
void *file_buf_alloc(size_t align, size_t size);
/* file.c invariant 8: note a small buffered write of [offset, offset + len)
 * in the stream; true with the range whose writeback to start now. */
bool file_stream_note(FileStream *st, uint64_t offset, uint64_t len, uint64_t *from,
                      uint64_t *to);
/* An aligned bounce buffer of FILE_CHUNK_MAX bytes (at least 'size', which
 * is at most that), from the node's pool or new; give it back with
 * file_bounce_put() (file.c invariant 13). */
void *file_bounce_get(FileState *s, size_t size);
void file_bounce_put(FileState *s, void *buf);
/* Free the pool's buffers (at close). */
void file_bounce_pool_clear(FileState *s);
/* Errors that mean "this way of zeroing/discarding is not available here". */
bool file_errno_unsupported(int err);
bool file_qiov_aligned(const BlkIOV *qiov, uint64_t offset, uint64_t align);
bool file_range_aligned(uint64_t offset, uint64_t size, uint64_t align);
/* file.c invariant 10: -EIO with the reason once a flush of the node failed. */
int file_check_sticky(const FileState *s, const char *what);
/* fdatasync; a failure is remembered (file.c invariant 10). */
int file_fdatasync_sticky(FileState *s);
/* fdatasync for a flush or a FUA write (file.c invariants 9, 10). */
int file_sync_node(BlkNode *img, FileState *s);
int file_do_fallocate(int fd, int mode, uint64_t offset, uint64_t bytes);
int file_do_ftruncate(int fd, uint64_t size);
/* Move all 'bytes' described by iov at 'offset' (file.c invariants 3, 4). */
int file_fd_rw_full(FileState *s, uint64_t align, bool is_write, const struct iovec *iov,
                    int niov, uint64_t offset, size_t bytes);
/* Unaligned O_DIRECT read through a bounce buffer (file.c invariant 1). */
int file_bounce_read(BlkNode *img, FileState *s, uint64_t offset, const BlkIOV *qiov);
/* Write qiov at offset; caller holds s->lock as file.c invariant 6 requires. */
int file_do_pwritev(BlkNode *img, FileState *s, uint64_t offset, const BlkIOV *qiov);
/* Write zeros in chunks of at most 1 MiB; locking as for file_do_pwritev. */
/* file.c invariant 14: [offset, +bytes) of s from src at src_offset. */
int file_do_copy_in(BlkNode *img, FileState *s, uint64_t offset, FileState *src,
                    uint64_t src_offset, uint64_t bytes);
int file_write_zeroes_slow(BlkNode *img, FileState *s, uint64_t offset, uint64_t bytes);

/* file-wb.c (file.c invariant 16) */
/* Add [from, to) to the pending ranges (file-wb.c invariant 1); false when
 * it is empty. */
bool file_wb_queue_add(FileWbQueue *q, uint64_t from, uint64_t to);
/* Move the pending ranges to out (room for FILE_WB_RANGES); how many. */
unsigned file_wb_queue_take(FileWbQueue *q, FileWbRange *out);
/* Hand [from, to) to the node's writeback thread (made at the first call);
 * false when there is none (file-wb.c invariant 4): start it yourself. */
bool file_wb_start(FileState *s, uint64_t from, uint64_t to);
/* Stop and join the thread, if there is one (file-wb.c invariant 3). */
void file_wb_stop(FileState *s);

/* file-create.c */
int file_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                  bool shrink);

#endif
