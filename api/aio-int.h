/*
 * api/aio-int.h: the asynchronous API's context and request (api/aio.c),
 * shared with api/aio-direct.c, which sends requests to the io_uring and
 * protocol engines.  Internal to api/; the rules are aio.c's invariants.
 */
#ifndef API_AIO_INT_H
#define API_AIO_INT_H

#include "aio/pool.h"
#include "api/api.h"
#include "qimg/aio.h"

#include <pthread.h>

typedef struct ApiAio ApiAio;
typedef struct ApiAioReq ApiAioReq;

struct ApiAio {
    QimgImage *img;
    Pool *pool;
    Pool *links;     /* invariant 13: one thread ending plans the reaper could not */
    BlkUring *uring; /* the io_uring engine (invariant 7), or NULL */
    int efd;
    int wake_fd;   /* invariant 9 */
    bool efd_used; /* [lock] invariant 3 */
    pthread_mutex_t lock;
    pthread_cond_t cond;   /* a request completed */
    ApiAioReq *done;       /* [lock] completed, callback not run (newest first) */
    ApiAioReq *reaped;     /* [reaper thread] ring requests done, not yet in done */
    unsigned live;         /* [lock] invariant 1 */
    unsigned waiters;      /* [lock] threads in qimg_image_aio_wait() */
    unsigned ring_waiters; /* [lock] of those, waiting on the ring (inv. 9) */
    QimgAioStats stats;    /* counters: atomic (relaxed) */
};

struct ApiAioReq {
    ApiAio *aio;
    ApiIoOp op;
    uint64_t offset, len;
    unsigned flags;
    BlkIOV q;
    struct iovec *vec; /* the caller's iovec array, copied (aio.h rule 3) */
    QimgAioFunc cb;
    void *opaque;
    int ret;
    GError *error;
    BlkDirect direct;  /* invariant 7: the mapping a ring read holds */
    bool held;         /* invariant 10: direct holds a mapping */
    const BlkIOV *out; /* what goes to the node: &q, or &bq (invariant 12) */
    uint8_t *bounce;   /* invariant 12: a write's ciphertext, or NULL */
    BlkIOV bq;
    bool alloc;         /* invariant 13: direct holds an allocating plan */
    struct iovec *ovec; /* invariant 13: bq's iovec (zeros, data, zeros) */
    int ring_ret;       /* invariant 13: the data write's outcome */
    ApiAioReq *next;
};

/* Hand finished requests (list..last, linked by next) to the poller. */
void api_aio_complete_list(ApiAio *a, ApiAioReq *list, ApiAioReq *last);
void api_aio_complete(ApiAioReq *r);
/* The worker side (a pool task): run r through api_io(), complete it. */
int api_aio_run_req(void *opaque);

/* aio-direct.c: invariants 7, 12 (the ring) and 10, 12 (a protocol node);
 * true: the engine has the request and completes it. */
bool api_aio_try_uring(ApiAio *a, ApiAioReq *r);
bool api_aio_try_node(ApiAio *a, ApiAioReq *r);
/* The ring's batch end (uring.c invariant 4): completes what was reaped. */
void api_aio_uring_batch_end(void *opaque);

#endif
