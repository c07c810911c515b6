/*
 * tests/test-vmstate-fixture.h: the recording fake driver the vmstate tests
 * (test-vmstate-save.c, test-vmstate-load.c) run over, and their shared
 * helpers (test-vmstate-fixture.c).
 *
 * The fake: an in-memory vmstate area, every save/load call recorded,
 * injected failures, a gate that holds the first N save calls so several
 * are in flight, and checks made inside the driver: no two save calls in
 * flight overlap, no load runs while a save does, no load reaches past a
 * given limit, and (in the ordering tests, whose data is 32-bit
 * program-order sequence numbers) no byte is ever overwritten by an older
 * write.  fake_check() asserts those facts; group_setup() puts the fake
 * driver in the driver table.
 */
#ifndef TEST_VMSTATE_FIXTURE_H
#define TEST_VMSTATE_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qimg/qimg.h"
#include "api/vmstate.h"
#include "test-util.h"
#include "qimg/vmstate.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB ((uint64_t)1 << 20)
#define KiB ((uint64_t)1 << 10)
#define HANG_US (30 * G_TIME_SPAN_SECOND)

/* ------------------------------------------------------------------------ */
/* The fake driver                                                          */
/* ------------------------------------------------------------------------ */

typedef struct FakeCall {
    uint64_t pos;
    uint64_t len;
} FakeCall;

typedef struct FakeSnap {
    char *id;
    char *name;
    uint64_t vm_state_size;
    uint64_t date_sec;
    uint32_t date_nsec;
    uint64_t vm_clock_nsec;
    int64_t icount;
    uint8_t *data;           /* copy of the area's first vm_state_size bytes */
    unsigned flushes_before; /* flush calls seen when it was created */
} FakeSnap;

typedef struct Fake Fake;
struct Fake {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint32_t cluster_size;

    /* Storage: the active vmstate area, or (pattern mode) a check of each
     * saved byte against pattern(pos) without storing anything. */
    uint8_t *area;
    uint64_t area_size;
    uint8_t (*pattern)(uint64_t pos);
    bool pattern_mismatch;

    /* Ordering: data is u32 words of sequence numbers; a word may only
     * grow (last_seq per word). */
    bool check_seq;
    uint32_t *last_seq;
    bool order_violation;

    /* Recording. */
    GArray *saves; /* FakeCall, in call order */
    GArray *loads;
    unsigned save_calls, load_calls;
    unsigned fail_save_at; /* 1-based call number to fail, 0: never */
    unsigned fail_load_at;
    int fail_errno;
    unsigned save_delay_us;

    /* In flight. */
    GArray *inflight_saves; /* FakeCall */
    bool overlap;
    unsigned saves_in_flight, max_saves_in_flight;
    unsigned loads_in_flight;
    bool rw_mixed;
    uint64_t read_limit; /* loads past it set read_past_limit */
    bool read_past_limit;
    /* Load gate: the first load_gate load calls wait until all of them
     * are in the driver at once (HANG_US at most: load_gate_timeout). */
    unsigned load_gate, load_gate_arrived;
    bool load_gate_timeout;

    /* Gate: the first gate_count save calls wait until gate_open. */
    unsigned gate_count;
    bool gate_open;
    unsigned gate_arrived;
    unsigned ungated_done; /* save calls completed that were not held */

    /* Snapshots (a view node's fake has view_of/view_snap instead). */
    GArray *snaps; /* FakeSnap */
    unsigned next_id;
    unsigned flush_calls, goto_calls, create_calls;
    Fake *view_of;
    guint view_snap;
    bool free_on_close;

    /* Access hints (blk_advise): 'S' sequential, 'N' normal, in order. */
    GString *advice;
};

Fake *fake_new(uint64_t area_size);
void fake_free(Fake *f);
extern const BlkDriver nosnap_driver;
QimgImage *image_new(const BlkDriver *drv, Fake *f, uint32_t cluster_size);
QimgImage *fake_image(Fake *f, uint32_t cluster_size);
void fake_check(Fake *f);
unsigned fake_get(Fake *f, const unsigned *field);
int cmp_call(const void *a, const void *b);
GArray *sorted_saves(Fake *f);
uint64_t rnd(GRand *r, uint64_t lo, uint64_t hi, uint64_t cap);
void set_config(QimgImage *img, unsigned max, size_t bufsize);
void append_bytes(QimgVmstateSave *s, uint64_t bytes, size_t chunk, GError **err);
void append_mib(QimgVmstateSave *s, unsigned mib, GError **err);
int group_setup(void **state);

#define FAKE_GET(f, field) fake_get((f), &(f)->field)

#endif
