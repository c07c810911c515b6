/*
 * block/nbd-int.h: what the files of the NBD node share (block/nbd.c, the
 * requests; block/nbd-open.c, the open; block/nbd-reconnect.c, QEMU's
 * reconnect-delay).
 *
 * Owns: struct NbdState, the node's state, and NbdConn, one connection.
 */
#ifndef QIMG_BLOCK_NBD_INT_H
#define QIMG_BLOCK_NBD_INT_H

#include "block/block.h"
#include "block/nbd-lib.h"

#include <pthread.h>

/* nbd-lib.h invariant 1: libnbd through the table nbd-lib.c loads */
#define NL blk_nbd_lib

#define NBD_CONNS 4
/* How long the extra connections may take, all together (invariant 1). */
#define NBD_EXTRA_CONNECT_US (2 * G_USEC_PER_SEC)
#define NBD_MAX_REQUEST (32u << 20)
#define NBD_WINDOW 8 /* pieces of one request in flight at once */
/* The largest export opened (nbd.c invariant 10): QEMU's largest image,
 * 2^63 - 2^30 bytes. */
#define NBD_MAX_SIZE (INT64_MAX - (INT64_C(1) << 30) + 1)

typedef struct NbdConn {
    struct nbd_handle *h;
    int efd; /* wakes the poller (invariant 1) */
    pthread_t poller;
    bool started;
    const bool *stop_flag; /* &NbdState.stop */
    unsigned inflight;     /* [NbdState.lock] */
    /* atomic: libnbd retired a command with ENOTCONN, the connection died
     * (nbd.c invariant 2); set before its waiter wakes, where
     * nbd_aio_is_dead may not say so yet (nbd-reconnect.c invariant 4) */
    bool lost;
} NbdConn;

typedef struct NbdState {
    char *name;    /* QEMU's name for the export, in messages */
    char *target;  /* the name as given: every connection's (invariant 8) */
    char *context; /* the meta context block status reads (invariant 5) */
    NbdConn c[NBD_CONNS];
    int nconns;
    bool stop; /* atomic */
    pthread_mutex_t lock;
    uint32_t max_request; /* invariant 3 */
    bool can_zero, can_fast_zero, can_fua, can_trim, can_flush, has_status;
    /* nbd.c invariant 7 (block/nbd-reconnect.c): QEMU's reconnect-delay
     * in microseconds (0: none); requests hold rw for reading while they
     * use the connection, a reconnect holds it for writing and bumps gen */
    int64_t reconnect_us;
    pthread_rwlock_t rw;
    uint64_t gen;
    uint64_t size; /* the export's, which a reconnect must find again */
} NbdState;

/* nbd.c: start connection i's poller (invariant 1); 0 or -errno with a
 * message. */
int blk_nbd_start_poller(NbdState *s, int i);
/* nbd.c: stop connection c's poller and wait for it. */
void blk_nbd_stop_poller(NbdConn *c);

/* nbd-reconnect.c (nbd.c invariant 7).  A request runs as
 *     int64_t deadline = 0; uint64_t gen; int ret; bool had = blk_error_mark();
 *     do { gen = blk_nbd_attempt(s); ret = ...; }
 *     while (blk_nbd_retry(s, ret, gen, &deadline, had));
 * attempt holds the connection for the request; retry lets it go and
 * answers whether the request runs again on a new connection. */
uint64_t blk_nbd_attempt(NbdState *s);
bool blk_nbd_retry(NbdState *s, int ret, uint64_t gen, int64_t *deadline, bool had);

#endif
