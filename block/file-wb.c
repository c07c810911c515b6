/*
 * block/file-wb.c: the writeback thread of a block device (file.c
 * invariant 16) -- the early writeback of file.c invariant 8 started off
 * the writers' threads.
 *
 * Owns: FileWbQueue (the ranges whose writeback is still to start, merged
 * as they come) and the thread that starts it, one per block device node
 * written through the page cache, made at its first early writeback and
 * stopped at close.
 *
 * Why: starting the writeback (sync_file_range WRITE) builds and submits
 * the bios in the caller's thread, and a block device's queue throttles
 * buffered writeback (the kernel's writeback throttling, wbt_lat_usec: 2 ms
 * on a loop device or an SSD) by putting the submitter to sleep.  Measured
 * (perf sched_switch, `qimg convert -n -O qcow2` of 1 GiB of data onto a
 * loop device): the copy's workers slept 0.62 s in wbt_wait, each time one
 * reader fewer for the source.  Handed to one thread, that sleep is its
 * own; the writers only fill the page cache.
 *
 * Invariants (cited as "file-wb.c invariant N"):
 *  1. Every range handed to file_wb_start() is covered by a range whose
 *     writeback the thread starts later (or was about to start when it was
 *     added), until the node closes: merging only widens ranges (a range
 *     over pages that are clean, or in flight for another writer, costs
 *     a lookup or a page written twice; never a page left out).  At most
 *     FILE_WB_RANGES are pending; a range past that is merged into the
 *     pending range nearest to it.
 *  2. Nothing waits for the thread: file_wb_start() takes the queue's lock
 *     only to add the range, and the thread drops it before each
 *     sync_file_range.  Flush semantics are unchanged (the writeback
 *     started here makes nothing durable; flush still runs fdatasync).
 *  3. Close stops the thread (pending ranges dropped: the kernel writes a
 *     block device's dirty pages back at its last close anyway) and joins
 *     it before the descriptor is closed, so no sync_file_range runs on a
 *     closed (or reused) descriptor.
 *  4. When the thread cannot be made, the caller starts the writeback
 *     itself, as before this thread.
 */
#include "block/file.h"
#include "aio/mutex.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>

bool file_wb_queue_add(FileWbQueue *q, uint64_t from, uint64_t to)
{
    unsigned best = 0;
    uint64_t best_gap = UINT64_MAX;

    if (to <= from) {
        return false;
    }
    for (unsigned i = 0; i < q->n;) { /* touching or overlapping: one range */
        if (from <= q->r[i].to && to >= q->r[i].from) {
            from = MIN(q->r[i].from, from); /* absorbed, and taken out */
            to = MAX(q->r[i].to, to);
            q->r[i] = q->r[--q->n];
        } else {
            i++;
        }
    }
    if (q->n < FILE_WB_RANGES) {
        q->r[q->n].from = from;
        q->r[q->n].to = to;
        q->n++;
        return true;
    }
    for (unsigned i = 0; i < q->n; i++) { /* invariant 1: the nearest grows */
        uint64_t gap = to <= q->r[i].from ? q->r[i].from - to : from - q->r[i].to;
        if (gap < best_gap) {
            best_gap = gap;
            best = i;
        }
    }
    q->r[best].from = MIN(q->r[best].from, from);
    q->r[best].to = MAX(q->r[best].to, to);
    return true;
}

unsigned file_wb_queue_take(FileWbQueue *q, FileWbRange *out)
{
    unsigned n = q->n;

    for (unsigned i = 0; i < n; i++) {
        out[i] = q->r[i];
    }
    q->n = 0;
    return n;
}

struct FileWb {
    int fd;
    GMutex lock;
    GCond cond;
    FileWbQueue q; /* [lock] */
    bool stop;     /* [lock] invariant 3 */
    pthread_t thread;
};

static void *wb_main(void *opaque)
{
    FileWb *wb = opaque;
    FileWbRange r[FILE_WB_RANGES];

    mutex_lock(&wb->lock);
    for (;;) {
        while (wb->q.n == 0 && !wb->stop) {
            mutex_cond_wait(&wb->cond, &wb->lock);
        }
        if (wb->stop) {
            break;
        }
        unsigned n = file_wb_queue_take(&wb->q, r);
        mutex_unlock(&wb->lock); /* invariant 2 */
        for (unsigned i = 0; i < n; i++) {
            /* only starts the writeback; errors surface at flush */
            (void)sync_file_range(wb->fd, (off_t)r[i].from, (off_t)(r[i].to - r[i].from),
                                  SYNC_FILE_RANGE_WRITE);
        }
        mutex_lock(&wb->lock);
    }
    mutex_unlock(&wb->lock);
    return NULL;
}

bool file_wb_start(FileState *s, uint64_t from, uint64_t to)
{
    FileWb *wb = __atomic_load_n(&s->wb, __ATOMIC_ACQUIRE);

    if (!wb) {
        mutex_lock(&s->wb_lock); /* the first one makes the thread */
        wb = __atomic_load_n(&s->wb, __ATOMIC_ACQUIRE);
        if (!wb && !s->wb_failed) {
            wb = g_new0(FileWb, 1);
            wb->fd = s->fd;
            g_mutex_init(&wb->lock);
            g_cond_init(&wb->cond);
            if (pthread_create(&wb->thread, NULL, wb_main, wb) != 0) {
                g_mutex_clear(&wb->lock);
                g_cond_clear(&wb->cond);
                g_free(wb);
                wb = NULL;
                s->wb_failed = true; /* invariant 4 */
            } else {
                __atomic_store_n(&s->wb, wb, __ATOMIC_RELEASE);
            }
        }
        mutex_unlock(&s->wb_lock);
        if (!wb) {
            return false;
        }
    }
    mutex_lock(&wb->lock);
    if (file_wb_queue_add(&wb->q, from, to)) {
        g_cond_signal(&wb->cond);
    }
    mutex_unlock(&wb->lock);
    return true;
}

void file_wb_stop(FileState *s)
{
    FileWb *wb = s->wb;

    if (!wb) {
        return;
    }
    mutex_lock(&wb->lock);
    wb->stop = true; /* invariant 3 */
    g_cond_signal(&wb->cond);
    mutex_unlock(&wb->lock);
    pthread_join(wb->thread, NULL);
    g_mutex_clear(&wb->lock);
    g_cond_clear(&wb->cond);
    g_free(wb);
    s->wb = NULL;
}
