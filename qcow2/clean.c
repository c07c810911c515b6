/*
 * qcow2/clean.c: QEMU's cache-clean-interval -- a timer that frees the
 * metadata tables (L2 tables, refcount blocks) nobody used since its
 * previous tick, so an idle long-running user (qimg nbd's export) gives
 * their memory back.
 *
 * Owns: the timer thread of one open image (Qcow2State.clean).
 *
 * Invariants (cited as "clean.c invariant N"):
 *  1. Every interval seconds (QEMU's default 600, 0 = never) the thread
 *     takes the metadata lock and cleans both caches (cache.c invariant
 *     6): a table used in the last interval survives, one unused for a
 *     whole interval is freed; referenced and dirty tables never are.
 *  2. The thread starts at the first cache miss of the image in this
 *     process (qcow2_clean_arm_locked): an image opened and then handed to
 *     a forked child (nbdkit opens the export, then goes to the
 *     background) gets its timer in the child, which is the process that
 *     serves; a timer of another process is never joined (it is not
 *     there).
 *  3. The thread never outlives the state: qcow2_clean_stop() (state_free,
 *     without the metadata lock) wakes it and joins it before the caches
 *     are freed.  Lock order: the timer's own lock is never held while the
 *     metadata lock is taken, so stop cannot deadlock with a tick.
 */
#include "qcow2/qcow2.h"

#include <unistd.h>

struct Qcow2Clean {
    GMutex lock; /* guards stop */
    GCond cond;
    bool stop;
    uint64_t interval; /* seconds, 1 .. UINT_MAX */
    GThread *thread;   /* NULL until armed (invariant 2) */
    pid_t pid;         /* the process the thread runs in */
    Qcow2State *s;
};

static gpointer clean_main(gpointer opaque)
{
    Qcow2Clean *c = opaque;
    Qcow2State *s = c->s;

    mutex_lock(&c->lock);
    while (!c->stop) {
        gint64 end = g_get_monotonic_time() + (gint64)c->interval * G_USEC_PER_SEC;
        while (!c->stop && mutex_cond_wait_until(&c->cond, &c->lock, end)) {
            /* woken early (stop, or spuriously): wait on */
        }
        if (c->stop) {
            break;
        }
        mutex_unlock(&c->lock); /* invariant 3: not held with the metadata lock */
        qcow2_lock(s);
        unsigned n = qcow2_cache_clean_unused_locked(s->l2_cache); /* invariant 1 */
        n += qcow2_cache_clean_unused_locked(s->refcount_cache);
        qcow2_unlock(s);
        g_debug("qcow2: cache-clean-interval freed %u tables", n);
        mutex_lock(&c->lock);
    }
    mutex_unlock(&c->lock);
    return NULL;
}

Qcow2Clean *qcow2_clean_new(Qcow2State *s, uint64_t interval)
{
    Qcow2Clean *c;

    if (interval == 0) {
        return NULL;
    }
    c = g_new0(Qcow2Clean, 1);
    c->s = s;
    c->interval = interval;
    return c;
}

void qcow2_clean_arm_locked(Qcow2State *s)
{
    Qcow2Clean *c = s->clean;
    pid_t pid;

    if (!c) {
        return;
    }
    pid = getpid();
    if (c->thread && c->pid == pid) {
        return;
    }
    /* invariant 2: none yet, or the parent's (absent here): a fresh one */
    g_mutex_init(&c->lock);
    g_cond_init(&c->cond);
    c->stop = false;
    c->pid = pid;
    c->thread = g_thread_try_new("qcow2-clean", clean_main, c, NULL);
    if (!c->thread) {
        g_debug("qcow2: no cache-clean-interval thread; the caches stay as they are");
        c->pid = 0;
    }
}

int qcow2_cache_read_file(void *opaque, uint64_t offset, void *buf, size_t len)
{
    Qcow2State *s = opaque;

    qcow2_clean_arm_locked(s); /* invariant 2: a table enters a cache */
    return blk_pread(s->img->file, offset, buf, len);
}

void qcow2_clean_stop(Qcow2Clean *c)
{
    if (!c) {
        return;
    }
    if (c->thread && c->pid == getpid()) { /* invariant 3 */
        mutex_lock(&c->lock);
        c->stop = true;
        g_cond_signal(&c->cond);
        mutex_unlock(&c->lock);
        g_thread_join(c->thread);
        g_mutex_clear(&c->lock);
        g_cond_clear(&c->cond);
    }
    g_free(c);
}
