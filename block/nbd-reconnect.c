/*
 * block/nbd-reconnect.c: QEMU's reconnect-delay for the NBD node
 * (block/nbd.c invariant 7): a request that failed because the
 * connection died waits for a new one and runs again.
 *
 * Owns: replacing the node's connection while requests wait.
 *
 * Facts learnt from QEMU 7.2 (nbd/client-connection.c, iotest 277):
 *  1. The first attempt is made at once, the next after 1 s, then after
 *     twice the previous wait, up to 16 s between attempts.
 *  2. Requests wait for the new connection until reconnect-delay seconds
 *     have passed; then they fail.
 *
 * Invariants:
 *  1. Nothing uses a connection while it is replaced: requests hold
 *     NbdState.rw for reading (blk_nbd_attempt .. blk_nbd_retry), the
 *     replacement holds it for writing; a request whose connection was
 *     replaced by another's reconnect (NbdState.gen moved on) runs again
 *     without reconnecting twice.
 *  2. A request that succeeds on its new connection leaves no message of
 *     the failure before (error.c invariant 2).
 *  3. An attempt's handshake ends by the deadline: a server that accepts
 *     and never answers does not keep the request past reconnect-delay.
 *  4. A connection is dead once libnbd says so or once it retired one of
 *     its commands with ENOTCONN (NbdConn.lost).  libnbd runs the
 *     completion callbacks of a dying connection before nbd_aio_is_dead
 *     turns true, so a waiter woken by one may look first: without the
 *     flag its request failed instead of waiting for a new connection
 *     (iotest 188 failed so, now and then).
 */
#include "block/nbd-int.h"

#include <errno.h>
#include <time.h>

#define RECONNECT_MAX_WAIT_S 16 /* fact 1 */

uint64_t blk_nbd_attempt(NbdState *s)
{
    pthread_rwlock_rdlock(&s->rw);
    return s->gen;
}

static bool conn_dead(NbdState *s)
{
    struct nbd_handle *h = s->c[0].h;
    return __atomic_load_n(&s->c[0].lost, __ATOMIC_ACQUIRE) || /* invariant 4 */
           NL.nbd_aio_is_dead(h) == 1 || NL.nbd_aio_is_closed(h) == 1;
}

/* Sleep until min(now + wait_s, deadline); false when the deadline passed. */
static bool pause_until(int64_t deadline, unsigned wait_s)
{
    int64_t now = g_get_monotonic_time();
    int64_t until = MIN(deadline, now + (int64_t)wait_s * G_USEC_PER_SEC);

    if (now >= deadline) {
        return false;
    }
    while (g_get_monotonic_time() < until) {
        int64_t left = until - g_get_monotonic_time();
        struct timespec ts = {.tv_sec = (time_t)(left / G_USEC_PER_SEC),
                              .tv_nsec = (long)(left % G_USEC_PER_SEC) * 1000};
        nanosleep(&ts, NULL);
    }
    return g_get_monotonic_time() < deadline;
}

/* One new connection to the export, its size the same (fact 2), by
 * deadline (invariant 3); NULL when this attempt failed. */
static struct nbd_handle *connect_again(NbdState *s, int64_t deadline)
{
    bool had = blk_error_mark();
    int err = 0;
    /* nbd.c invariant 8: the same way as the first */
    struct nbd_handle *h =
        blk_nbd_connect_one(s->target, s->context, &err, deadline, NULL);

    blk_error_unwind(had); /* the request fails with its own message */
    if (h && NL.nbd_get_size(h) != (int64_t)s->size) {
        NL.nbd_close(h);
        return NULL;
    }
    return h;
}

/* Invariant 1: with rw held for writing, the dead connection replaced by a
 * new one by deadline (fact 1); false when none came. */
static bool replace_locked(NbdState *s, int64_t deadline)
{
    NbdConn *c = &s->c[0];
    unsigned wait_s = 0;

    blk_nbd_stop_poller(c);
    for (;;) {
        struct nbd_handle *h =
            pause_until(deadline, wait_s) ? connect_again(s, deadline) : NULL;
        if (h) {
            NL.nbd_close(c->h);
            c->h = h;
            c->inflight = 0;
            __atomic_store_n(&c->lost, false, __ATOMIC_RELEASE);
            s->gen++;
            return blk_nbd_start_poller(s, 0) == 0;
        }
        if (g_get_monotonic_time() >= deadline) {
            return false;
        }
        wait_s = wait_s ? MIN(wait_s * 2, RECONNECT_MAX_WAIT_S) : 1;
    }
}

bool blk_nbd_retry(NbdState *s, int ret, uint64_t gen, int64_t *deadline, bool had)
{
    bool again;

    if (ret >= 0 || !s->reconnect_us || !conn_dead(s)) {
        pthread_rwlock_unlock(&s->rw);
        if (ret >= 0 && *deadline) {
            blk_error_unwind(had); /* invariant 2 */
        }
        return false;
    }
    pthread_rwlock_unlock(&s->rw);
    if (!*deadline) {
        *deadline = g_get_monotonic_time() + s->reconnect_us; /* fact 2 */
    }
    if (g_get_monotonic_time() >= *deadline) {
        return false;
    }
    pthread_rwlock_wrlock(&s->rw);
    /* invariant 1: another request's reconnect may have done it */
    again = s->gen != gen || (conn_dead(s) && replace_locked(s, *deadline));
    pthread_rwlock_unlock(&s->rw);
    return again;
}
