/*
 * tests/test-aio-workload-fixture.h: the harness of the asynchronous
 * workload tests (test-aio-workload.c, test-aio-interleave.c), through
 * libqimg.so and the public headers: requests submitted against a byte
 * model, their blocks claimed and released, every read checked against
 * the blocks' versions (its failure explained with their history), over
 * the asynchronous API or over NBD (libnbd); random requests; the
 * QIMG_TEST_FILTER runner (test-aio-workload-fixture.c).
 *
 * The workload's rules (cited as "workload rule N"):
 *  1. No two requests in flight touch the same 4 KiB block: a request
 *     claims its blocks when it is submitted and releases exactly those
 *     when its callback runs; a flush claims none.  release() checks that
 *     every block it frees is the request's own.  (Issue 31: a flush kept
 *     the range drawn for it and freed those blocks when it completed, so
 *     a write could be submitted over a read still in flight; the read
 *     then correctly returned the bytes from before the write, which the
 *     model no longer held: "read at block N differs from the model".)
 *  2. Every block keeps its versions: the writes, zero writes and discards
 *     submitted on it, in order.  A read passes when each byte it returned
 *     is that byte of the block as of the read's submission (its last
 *     version completed by then, or zeros) or of a later version (in
 *     flight then, or submitted while the read was).  Under rule 1 that is exactly the
 * block as of the read's submission; under rule 3 it is what a disk may return for a read
 * beside writes to the same bytes (torn at any byte), and never bytes the block did not
 * hold: another cluster's data after a discard freed and reuse took its host cluster,
 * stale or uninitialised memory. On a failure the history of the read's clusters is
 * printed.
 *  3. In overlap mode reads claim nothing: writes, zero writes and
 *     discards (still one at a time per block, rule 1) run beside reads of
 *     the same blocks -- discards and unmapping zero writes of whole
 *     clusters that reads are in, their host clusters reused at once.
 */
#ifndef TEST_AIO_WORKLOAD_FIXTURE_H
#define TEST_AIO_WORKLOAD_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-util.h"

#include "test-aio-util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#ifdef QIMG_HAVE_LIBNBD
#include <libnbd.h>
#endif

#define BLOCK 4096u

enum { OP_WRITE, OP_READ, OP_ZERO, OP_DISCARD, OP_FLUSH };
extern const char *const op_names[];

typedef struct Work Work;

typedef struct Req {
    Work *w;
    int op;
    uint64_t block, nblocks; /* the blocks claimed (none for a flush) */
    uint8_t *buf;
    struct iovec iov;
    unsigned id; /* index in Work.hist */
} Req;

/* The history a failure is explained with (rule 2). */
typedef struct Hist {
    int op;
    uint64_t block, nblocks;
    unsigned sub, done; /* order of submission, of completion (0: not yet) */
    uint8_t *data;      /* a write's bytes (owned here from its submission) */
} Hist;

struct Work {
    QimgImage *img;
#ifdef QIMG_HAVE_LIBNBD
    struct nbd_handle *nbd; /* set: requests go over NBD instead (submit_nbd) */
#endif
    uint8_t *model;
    unsigned *owner; /* per block: 1 + the id of the request holding it (rule 1) */
    GArray **ver;    /* per block: ids of the requests that changed it (rule 2) */
    bool overlap;    /* rule 3 */
    uint64_t nblocks;
    uint64_t cs;
    int in_flight, done, failures;
    char *why;
    GArray *hist; /* Hist, by request id */
    unsigned seq;
    guint32 seed;
};

void work_init(Work *w, uint64_t size, uint64_t cs, guint32 seed);
void work_clear(Work *w);
Req *req_new(Work *w, int op, uint64_t block, uint64_t nblocks);
void req_free(Req *r);
bool claim(Work *w, const Req *r);
void submit(Work *w, Req *r, unsigned flags);
void work_wait(Work *w);
bool submit_random(Work *w, GRand *rnd);
int workload_run_filtered(const char *stem, const struct CMUnitTest *tests,
                          size_t ntests);

#endif
