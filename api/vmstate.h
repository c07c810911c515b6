/*
 * api/vmstate.h: the vmstate writer/reader's state, shared by its engine
 * (api/vmstate.c, whose invariants "vmstate.c invariant N" cite, and its
 * read path api/vmstate-read.c, invariants 6 and 8 of the same numbering)
 * and its public calls (api/vmstate-api.c), and hooks for unit tests.  Nothing
 * here is part of libqimg's public API; api.h declares what the rest of
 * api/ calls (api_quiesce, api_release).
 */
#ifndef QIMG_API_VMSTATE_H
#define QIMG_API_VMSTATE_H

#include "api/api.h"

#include "aio/pool.h"

#include <pthread.h>

#define VMSTATE_DEFAULT_IN_FLIGHT 8
#define VMSTATE_MAX_IN_FLIGHT 64
#define VMSTATE_MIN_BUFFER ((size_t)1 << 20)
#define VMSTATE_MAX_BUFFER ((size_t)256 << 20)
#define VMSTATE_MEM_ALIGN 4096
#define VMSTATE_SPLIT_PIECE ((size_t)4 << 20) /* vmstate-read.c invariant 8 */

typedef struct ApiVmstate ApiVmstate;

typedef struct VmBuf {
    ApiVmstate *vs;
    uint64_t pos; /* position of data[0] */
    size_t len;   /* bytes held (write) or to read (read-ahead) */
    size_t cap;   /* bytes up to the grid line (invariant 1) */
    size_t size;  /* bytes allocated at data, >= cap (invariant 5) */
    uint8_t *data;
    uint64_t ticket; /* write only: its allocation turn (invariant 9) */
    /* read-ahead only; under vs->lock */
    bool done;
    int ret;
    char *msg;
} VmBuf;

struct ApiVmstate {
    QimgImage *img; /* immutable */

    pthread_mutex_t op_lock;
    /* --- under op_lock --- */
    Pool *pool; /* created at the first I/O */
    unsigned max_in_flight;
    size_t buf_size;         /* B */
    size_t buf_size_request; /* as configured (0: default) */
    VmBuf *cur;              /* collects the current run's bytes, or NULL */
    bool run_valid;
    uint64_t run_end; /* where the current run ends (invariant 2) */
    bool ra_active;
    GQueue ra;                    /* read-ahead buffers in position order (invariant 6) */
    uint64_t ra_pos;              /* next position the reader wants; inside ra's head */
    uint64_t ra_next;             /* next position to prefetch */
    uint64_t last_end;            /* end of the previous read */
    uint64_t limit;               /* state size, or UINT64_MAX when unknown */
    bool advised;                 /* the file was told reads are sequential (inv. 6) */
    bool session;                 /* a save or load stream owns the state */
    struct QimgVmstateSave *save; /* the open streams begun here (invariant 7) */
    struct QimgVmstateLoad *load;
    BlkOrder *order;      /* the writes' allocation turns, or NULL (invariant 9) */
    uint64_t next_ticket; /* the next write buffer's */

    pthread_mutex_t lock;
    pthread_cond_t cond; /* a read-ahead buffer completed */
    /* --- under lock --- */
    ApiLowestError error;    /* sticky write error, code = errno (invariant 4) */
    bool error_told;         /* a caller was given it (invariant 10) */
    unsigned live, max_live; /* buffers allocated now / at most (invariant 5) */
    GSList *spares;          /* B-byte blocks of freed buffers (invariant 5) */
    size_t spare_size;       /* their size */
};

/* ---- the engine (vmstate.c) for the public calls (vmstate-api.c) ---- */

/* img's state, created when 'create' (NULL if none and !create). */
ApiVmstate *vs_get(QimgImage *img, bool create);
/* B for a requested size (0: default), vmstate.c invariant 1. */
size_t vs_compute_buf_size(QimgImage *img, size_t requested);
/* Invariant 2: positional write / read with op_lock held. */
int vs_write_locked(ApiVmstate *vs, uint64_t pos, const uint8_t *buf, size_t len);
int vs_read_locked(ApiVmstate *vs, uint64_t pos, uint8_t *buf, size_t len);
/* Invariant 4: submit the current buffer, wait, the first write error. */
int vs_drain_writes_locked(ApiVmstate *vs);
/* Invariant 6 (vmstate-read.c): drop the read-ahead after waiting for its tasks. */
void vs_ra_drop_locked(ApiVmstate *vs);
/* Invariant 6 (vmstate-read.c): withdraw the sequential hint, if given. */
void vs_advise_end_locked(ApiVmstate *vs);

/* ---- the engine's helpers for its read path (vmstate-read.c) ---- */

/* Invariant 5: a buffer of cap <= B bytes at pos, or NULL; caller holds op_lock. */
VmBuf *vs_buf_new(ApiVmstate *vs, uint64_t pos, size_t cap);
/* Its memory becomes a spare (invariant 5); takes only vs->lock (tasks too). */
void vs_buf_free(VmBuf *b);
/* Invariant 4: the sticky error for the calling thread, or 0; op_lock held. */
int vs_sticky_error(ApiVmstate *vs);
/* "Could not <what> VM state at position N: ..."; clears the thread's message. */
char *vs_io_error_message(const char *what, uint64_t pos, int ret);
/* The task pool, started at the first I/O that needs it; op_lock held. */
int vs_ensure_pool_locked(ApiVmstate *vs);
/* A stream session owns the state (EBUSY if one does), and its end. */
int vs_session_claim(ApiVmstate *vs);
void vs_session_end(ApiVmstate *vs);
/* Invariant 7 (vmstate-api.c): the image is going away; its streams forget it. */
void vs_streams_invalidate(ApiVmstate *vs);

typedef struct ApiVmstateStats {
    size_t buffer_size; /* B of vmstate.c invariant 1 */
    unsigned max_in_flight;
    unsigned live_buffers;     /* buffers allocated now */
    unsigned max_live_buffers; /* most buffers ever allocated at once
                                * (vmstate.c invariant 5) */
} ApiVmstateStats;

/* Current numbers of img's vmstate state (zeros if it has none). */
void api_vmstate_get_stats(QimgImage *img, ApiVmstateStats *st);

#endif
