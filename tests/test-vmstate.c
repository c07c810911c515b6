/*
 * tests/test-vmstate.c: unit tests for api/vmstate.c, api/vmstate-api.c (the vmstate
 * writer and reader) and api/snapshot.c (the public snapshot API).
 *
 * "Invariant N" means vmstate.c's.  The tests run over a recording fake
 * driver defined here: an in-memory vmstate area, every save/load call
 * recorded, injected failures, a gate that holds the first N save calls so
 * several are in flight, and checks made inside the driver: no two save
 * calls in flight overlap, no load runs while a save does, no load reaches
 * past a given limit, and (in the ordering tests, whose data is 32-bit
 * program-order sequence numbers) no byte is ever overwritten by an older
 * write.
 *
 * Nothing asserts on timing.  Where a helper thread gives a broken writer a
 * moment to go wrong before it opens the gate, every asserted fact holds
 * for a correct writer under any schedule; deadlines only turn hangs into
 * failures.
 */
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
/* How long the gate keeper gives a broken writer to overtake (not asserted). */
#define GRACE_US (150 * G_TIME_SPAN_MILLISECOND)

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

static Fake *fake_new(uint64_t area_size)
{
    Fake *f = g_new0(Fake, 1);

    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->cluster_size = 65536;
    f->area_size = area_size;
    f->area = area_size ? g_malloc0(area_size) : NULL;
    f->saves = g_array_new(FALSE, FALSE, sizeof(FakeCall));
    f->loads = g_array_new(FALSE, FALSE, sizeof(FakeCall));
    f->advice = g_string_new(NULL);
    f->inflight_saves = g_array_new(FALSE, FALSE, sizeof(FakeCall));
    f->snaps = g_array_new(FALSE, TRUE, sizeof(FakeSnap));
    f->fail_errno = EIO;
    f->read_limit = UINT64_MAX;
    return f;
}

static void fake_free(Fake *f)
{
    for (guint i = 0; i < f->snaps->len; i++) {
        FakeSnap *s = &g_array_index(f->snaps, FakeSnap, i);
        g_free(s->id);
        g_free(s->name);
        g_free(s->data);
    }
    g_array_unref(f->snaps);
    g_array_unref(f->saves);
    g_array_unref(f->loads);
    g_array_unref(f->inflight_saves);
    g_string_free(f->advice, TRUE);
    g_free(f->area);
    g_free(f->last_seq);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    g_free(f);
}

static Fake *F(BlkNode *img)
{
    return img->opaque;
}

static bool ranges_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

static int fake_save_vmstate(BlkNode *img, uint64_t pos, const BlkIOV *qiov)
{
    Fake *f = F(img);
    uint64_t len = qiov->size;
    FakeCall call = {pos, len};
    int ret = 0;

    pthread_mutex_lock(&f->lock);
    unsigned n = ++f->save_calls;
    g_array_append_val(f->saves, call);
    for (guint i = 0; i < f->inflight_saves->len; i++) { /* invariant 2 */
        FakeCall *o = &g_array_index(f->inflight_saves, FakeCall, i);
        if (ranges_overlap(o->pos, o->len, pos, len)) {
            f->overlap = true;
        }
    }
    g_array_append_val(f->inflight_saves, call);
    f->saves_in_flight++;
    f->max_saves_in_flight = MAX(f->max_saves_in_flight, f->saves_in_flight);
    if (f->loads_in_flight > 0) {
        f->rw_mixed = true;
    }
    bool gated = n <= f->gate_count;
    if (gated) {
        f->gate_arrived++;
        pthread_cond_broadcast(&f->cond);
        while (!f->gate_open) {
            pthread_cond_wait(&f->cond, &f->lock);
        }
    }
    pthread_mutex_unlock(&f->lock);

    if (f->save_delay_us) {
        g_usleep(f->save_delay_us);
    }

    pthread_mutex_lock(&f->lock);
    if (n == f->fail_save_at) {
        ret = blk_error(f->fail_errno, "fake: injected failure of save call %u", n);
    } else if (f->pattern) {
        g_autofree uint8_t *tmp = g_malloc(len);
        iov_to_buf(qiov, 0, tmp, len);
        for (uint64_t i = 0; i < len; i++) {
            if (tmp[i] != f->pattern(pos + i)) {
                f->pattern_mismatch = true;
                break;
            }
        }
    } else if (pos + len > f->area_size) {
        ret = blk_error(EINVAL, "fake: save past the area");
    } else {
        if (f->check_seq) {
            g_assert(pos % 4 == 0 && len % 4 == 0);
            for (uint64_t w = pos / 4; w < (pos + len) / 4; w++) {
                uint32_t seq;
                iov_to_buf(qiov, w * 4 - pos, &seq, 4);
                if (seq < f->last_seq[w]) {
                    f->order_violation = true; /* an older write landed later */
                }
                f->last_seq[w] = seq;
            }
        }
        iov_to_buf(qiov, 0, f->area + pos, len);
    }
    for (guint i = 0; i < f->inflight_saves->len; i++) {
        FakeCall *o = &g_array_index(f->inflight_saves, FakeCall, i);
        if (o->pos == pos && o->len == len) {
            g_array_remove_index_fast(f->inflight_saves, i);
            break;
        }
    }
    f->saves_in_flight--;
    if (!gated) {
        f->ungated_done++;
    }
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return ret;
}

static int fake_load_vmstate(BlkNode *img, uint64_t pos, const BlkIOV *qiov)
{
    Fake *f = F(img);
    uint64_t len = qiov->size;
    FakeCall call = {pos, len};
    int ret = 0;

    pthread_mutex_lock(&f->lock);
    unsigned n = ++f->load_calls;
    g_array_append_val(f->loads, call);
    f->loads_in_flight++;
    if (f->saves_in_flight > 0) {
        f->rw_mixed = true; /* invariant 3 */
    }
    if (pos + len > f->read_limit) {
        f->read_past_limit = true; /* invariant 6 */
    }
    if (f->load_gate_arrived < f->load_gate) {
        gint64 deadline = g_get_monotonic_time() + HANG_US;
        f->load_gate_arrived++;
        pthread_cond_broadcast(&f->cond);
        while (f->load_gate_arrived < f->load_gate) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&f->cond, &f->lock, &ts);
            if (g_get_monotonic_time() > deadline) {
                f->load_gate_timeout = true;
                f->load_gate = 0; /* let everyone go */
                pthread_cond_broadcast(&f->cond);
            }
        }
    }
    pthread_mutex_unlock(&f->lock);

    if (n == f->fail_load_at) {
        ret = blk_error(f->fail_errno, "fake: injected failure of load call %u", n);
    } else if (f->view_of) {
        /* A snapshot view: the snapshot's state, zeros past it. */
        Fake *p = f->view_of;
        FakeSnap *s = &g_array_index(p->snaps, FakeSnap, f->view_snap);
        iov_memset(qiov, 0, 0, len);
        if (pos < s->vm_state_size) {
            iov_from_buf(qiov, 0, s->data + pos, MIN(len, s->vm_state_size - pos));
        }
    } else if (pos + len > f->area_size) {
        ret = blk_error(EINVAL, "fake: load past the area");
    } else {
        pthread_mutex_lock(&f->lock);
        iov_from_buf(qiov, 0, f->area + pos, len);
        pthread_mutex_unlock(&f->lock);
    }

    pthread_mutex_lock(&f->lock);
    f->loads_in_flight--;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return ret;
}

static int fake_flush(BlkNode *img)
{
    Fake *f = F(img);

    pthread_mutex_lock(&f->lock);
    f->flush_calls++;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static int fake_find(Fake *f, const char *id_or_name)
{
    for (guint i = 0; i < f->snaps->len; i++) {
        if (strcmp(g_array_index(f->snaps, FakeSnap, i).id, id_or_name) == 0) {
            return (int)i;
        }
    }
    for (guint i = 0; i < f->snaps->len; i++) {
        if (strcmp(g_array_index(f->snaps, FakeSnap, i).name, id_or_name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

static int fake_snapshot_create(BlkNode *img, BlkSnapshotInfo *sn)
{
    Fake *f = F(img);
    FakeSnap s = {
        .id = g_strdup_printf("%u", ++f->next_id),
        .name = g_strdup(sn->name),
        .vm_state_size = sn->vm_state_size,
        .date_sec = sn->date_sec,
        .date_nsec = sn->date_nsec,
        .vm_clock_nsec = sn->vm_clock_nsec,
        .icount = sn->icount,
    };

    pthread_mutex_lock(&f->lock);
    f->create_calls++;
    s.flushes_before = f->flush_calls;
    if (f->area && sn->vm_state_size <= f->area_size) {
        s.data = g_malloc(sn->vm_state_size + 1);
        memcpy(s.data, f->area, sn->vm_state_size);
        /* The active copy is dropped, as QEMU's qcow2 does. */
        memset(f->area, 0, MIN(f->area_size, sn->vm_state_size + f->cluster_size));
    }
    pthread_mutex_unlock(&f->lock);
    g_array_append_val(f->snaps, s);
    sn->id = g_strdup(s.id);
    return 0;
}

static int fake_snapshot_goto(BlkNode *img, const char *id_or_name)
{
    Fake *f = F(img);
    int i = fake_find(f, id_or_name);

    if (i < 0) {
        return blk_error(ENOENT, "fake: no snapshot '%s'", id_or_name);
    }
    FakeSnap *s = &g_array_index(f->snaps, FakeSnap, i);
    pthread_mutex_lock(&f->lock);
    f->goto_calls++;
    if (s->data) {
        memcpy(f->area, s->data, s->vm_state_size);
    }
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static int fake_snapshot_delete(BlkNode *img, const char *id_or_name)
{
    Fake *f = F(img);
    int i = fake_find(f, id_or_name);

    if (i < 0) {
        return blk_error(ENOENT, "fake: snapshot not found");
    }
    FakeSnap *s = &g_array_index(f->snaps, FakeSnap, i);
    g_free(s->id);
    g_free(s->name);
    g_free(s->data);
    g_array_remove_index(f->snaps, i);
    return 0;
}

static GArray *fake_snapshot_list(BlkNode *img)
{
    Fake *f = F(img);
    GArray *list = g_array_new(FALSE, TRUE, sizeof(BlkSnapshotInfo));

    for (guint i = 0; i < f->snaps->len; i++) {
        FakeSnap *s = &g_array_index(f->snaps, FakeSnap, i);
        BlkSnapshotInfo sn = {
            .id = g_strdup(s->id),
            .name = g_strdup(s->name),
            .vm_state_size = s->vm_state_size,
            .date_sec = s->date_sec,
            .date_nsec = s->date_nsec,
            .vm_clock_nsec = s->vm_clock_nsec,
            .icount = s->icount,
        };
        g_array_append_val(list, sn);
    }
    return list;
}

static void fake_advise(BlkNode *img, BlkAdvice advice)
{
    Fake *f = F(img);

    pthread_mutex_lock(&f->lock);
    g_string_append_c(f->advice, advice == BLK_ADVICE_SEQUENTIAL ? 'S' : 'N');
    pthread_mutex_unlock(&f->lock);
}

static void fake_close(BlkNode *img)
{
    Fake *f = F(img);

    if (f && f->free_on_close) {
        fake_free(f);
    }
}

static int fake_open(BlkNode *node, const char *filename, const BlkOpenOptions *opts);

static const BlkDriver fake_driver = {
    .format_name = "fake",
    .open = fake_open,
    .close = fake_close,
    .flush = fake_flush,
    .save_vmstate = fake_save_vmstate,
    .load_vmstate = fake_load_vmstate,
    .snapshot_create = fake_snapshot_create,
    .snapshot_goto = fake_snapshot_goto,
    .snapshot_delete = fake_snapshot_delete,
    .snapshot_list = fake_snapshot_list,
    .advise = fake_advise,
};

/* A driver without snapshots or vmstate, as raw. */
static const BlkDriver nosnap_driver = {.format_name = "raw"};

/* The image the next view is opened of (fake_open): tests run one at a
 * time. */
static Fake *fake_current;

static BlkNode *node_new(const BlkDriver *drv, Fake *f, uint32_t cluster_size)
{
    BlkNode *node = g_new0(BlkNode, 1);

    node->drv = drv;
    node->opaque = f;
    node->filename = g_strdup("fake.qcow2");
    node->cluster_size = cluster_size;
    node->size = 1024 * MiB;
    node->request_alignment = 1;
    if (f) {
        f->cluster_size = cluster_size;
    }
    return node;
}

static QimgImage *image_new(const BlkDriver *drv, Fake *f, uint32_t cluster_size)
{
    fake_current = f;
    return api_image_new(node_new(drv, f, cluster_size));
}

static QimgImage *fake_image(Fake *f, uint32_t cluster_size)
{
    return image_new(&fake_driver, f, cluster_size);
}

/*
 * The driver's open: only read-only views of a snapshot of the current fake
 * are opened by name (load_begin(apply = false) opens one through the
 * normal open path, the driver table: api/vmstate.c).
 */
static int fake_open(BlkNode *node, const char *filename, const BlkOpenOptions *opts)
{
    Fake *p = fake_current;
    int i = opts->snapshot && p ? fake_find(p, opts->snapshot) : -1;

    if (i < 0) {
        return blk_error(ENOENT, "fake: no snapshot '%s'",
                         opts->snapshot ? opts->snapshot : "");
    }
    Fake *v = fake_new(0);
    v->view_of = p;
    v->view_snap = (guint)i;
    v->free_on_close = true;
    v->read_limit = p->read_limit;
    v->cluster_size = p->cluster_size;
    node->opaque = v;
    node->cluster_size = p->cluster_size;
    node->size = 1024 * MiB;
    node->read_only = true;
    return 0;
}

/* Facts every test checks on every fake. */
static void fake_check(Fake *f)
{
    pthread_mutex_lock(&f->lock);
    bool overlap = f->overlap, order = f->order_violation, mix = f->rw_mixed,
         past = f->read_past_limit, mismatch = f->pattern_mismatch;
    pthread_mutex_unlock(&f->lock);
    assert_false(overlap);  /* invariant 2: no overlapping saves in flight */
    assert_false(order);    /* invariant 2: no older bytes over newer */
    assert_false(mix);      /* invariant 3: reads never race writes */
    assert_false(past);     /* invariant 6 */
    assert_false(mismatch); /* the bytes are the model's */
}

/* Reads a counter of f under its lock. */
static unsigned fake_get(Fake *f, const unsigned *field)
{
    pthread_mutex_lock(&f->lock);
    unsigned v = *field;
    pthread_mutex_unlock(&f->lock);
    return v;
}
#define FAKE_GET(f, field) fake_get((f), &(f)->field)

static int cmp_call(const void *a, const void *b)
{
    const FakeCall *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The save calls, sorted by position (they may start out of order). */
static GArray *sorted_saves(Fake *f)
{
    pthread_mutex_lock(&f->lock);
    GArray *a = g_array_copy(f->saves);
    pthread_mutex_unlock(&f->lock);
    g_array_sort(a, cmp_call);
    return a;
}

/* ---- gate keeper ---- */

typedef struct GateKeeper {
    Fake *f;
    pthread_t thread;
    bool arrived_ok;
} GateKeeper;

/*
 * Waits until every held call has reached the gate, then until either a
 * call that was not held completed (a broken writer overtaking the held
 * ones) or a grace period passed (a correct writer waits for the held
 * ones), then opens the gate.
 */
static void *gate_keeper_main(void *opaque)
{
    GateKeeper *k = opaque;
    Fake *f = k->f;
    struct timespec ts;

    pthread_mutex_lock(&f->lock);
    gint64 deadline = g_get_monotonic_time() + HANG_US;
    while (f->gate_arrived < f->gate_count && g_get_monotonic_time() < deadline) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&f->cond, &f->lock, &ts);
    }
    k->arrived_ok = f->gate_arrived >= f->gate_count;
    deadline = g_get_monotonic_time() + GRACE_US;
    while (f->ungated_done == 0 && g_get_monotonic_time() < deadline) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&f->cond, &f->lock, &ts);
    }
    f->gate_open = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

static void gate_start(GateKeeper *k, Fake *f, unsigned held)
{
    k->f = f;
    f->gate_count = held;
    f->gate_open = false;
    assert_int_equal(pthread_create(&k->thread, NULL, gate_keeper_main, k), 0);
}

static void gate_join(GateKeeper *k)
{
    assert_int_equal(pthread_join(k->thread, NULL), 0);
    assert_true(k->arrived_ok);
}

/* ---- data ---- */

static uint8_t pattern_byte(uint64_t pos)
{
    uint64_t x = pos * 0x9E3779B97F4A7C15ull;
    return (uint8_t)((x >> 56) ^ (pos >> 20) ^ pos);
}

/* A random number in [lo, hi), capped at cap (glib's MIN would draw twice). */
static uint64_t rnd(GRand *r, uint64_t lo, uint64_t hi, uint64_t cap)
{
    uint64_t v = lo + (uint64_t)(g_rand_double(r) * (double)(hi - lo)) % (hi - lo);
    return MIN(v, cap);
}

static void fill_random(GRand *r, uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        buf[i] = (uint8_t)g_rand_int(r);
    }
}

static void set_config(QimgImage *img, unsigned max, size_t bufsize)
{
    g_autoptr(GError) err = NULL;
    QimgVmstateOptions o = {.struct_size = sizeof(QimgVmstateOptions),
                            .max_in_flight = max,
                            .buffer_size = bufsize};
    assert_true(qimg_vmstate_configure(img, &o, &err));
}

/* ------------------------------------------------------------------------ */
/* Coalescing and the buffer grid (invariant 1)                             */
/* ------------------------------------------------------------------------ */

/*
 * 10000 random appends of 1..32 KiB: the driver sees only full, B-aligned
 * B-byte writes except the last, each byte once and equal to the model.
 */
static void test_coalesce_random(void **state)
{
    Fake *f = fake_new(0);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    GRand *r = g_rand_new_with_seed(42);
    uint8_t *chunk = g_malloc(32 * KiB);
    QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams),
                            .name = "coalesce"};
    ApiVmstateStats st;

    f->pattern = pattern_byte;
    QimgVmstateSave *s = qimg_vmstate_save_begin(img, &p, &err);
    assert_non_null(s);
    uint64_t total = 0;
    for (int i = 0; i < 10000; i++) {
        size_t len = (size_t)g_rand_int_range(r, 1, 32 * KiB + 1);
        for (size_t j = 0; j < len; j++) {
            chunk[j] = pattern_byte(total + j);
        }
        assert_true(qimg_vmstate_save_append(s, chunk, len, &err));
        total += len;
    }
    assert_int_equal(qimg_vmstate_save_size(s), total);
    api_vmstate_get_stats(img, &st);
    assert_int_equal(st.buffer_size, MiB);
    g_autofree char *id = qimg_vmstate_save_commit(s, &err);
    assert_non_null(id);
    assert_null(err);

    GArray *calls = sorted_saves(f);
    uint64_t nbuf = (total + MiB - 1) / MiB;
    assert_int_equal(calls->len, nbuf);
    for (guint i = 0; i < calls->len; i++) {
        FakeCall *c = &g_array_index(calls, FakeCall, i);
        assert_int_equal(c->pos, (uint64_t)i * MiB); /* aligned, contiguous */
        assert_int_equal(c->len, i + 1 < calls->len ? MiB : total - (uint64_t)i * MiB);
    }
    g_array_unref(calls);
    assert_int_equal(g_array_index(f->snaps, FakeSnap, 0).vm_state_size, total);
    fake_check(f);

    g_rand_free(r);
    g_free(chunk);
    api_image_destroy(img);
    fake_free(f);
}

/*
 * Positional writes from an unaligned start, for several cluster and
 * buffer sizes: no call crosses a grid line; every call but the first and
 * last is a whole aligned buffer; the content is the model's.
 */
static void test_alignment(void **state)
{
    static const struct {
        uint32_t cluster;
        size_t request;
        size_t expect;
    } cases[] = {
        {65536, 0, 1 * MiB},     {2 * MiB, 0, 2 * MiB},       {65536, 3 * MiB, 3 * MiB},
        {65536, 100000, 131072}, {2 * MiB, 3 * MiB, 4 * MiB}, {4096, 0, 1 * MiB},
    };
    for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
        size_t B = cases[c].expect;
        uint64_t start = B / 2 + 12344, total = 5 * B + B / 3;
        Fake *f = fake_new(start + total + MiB);
        QimgImage *img = fake_image(f, cases[c].cluster);
        g_autoptr(GError) err = NULL;
        GRand *r = g_rand_new_with_seed(7 + c);
        uint8_t *model = g_malloc(total);
        ApiVmstateStats st;

        if (cases[c].request) {
            set_config(img, 0, cases[c].request);
        }
        fill_random(r, model, total);
        for (uint64_t off = 0; off < total;) {
            size_t n = MIN(7777, total - off);
            assert_true(qimg_vmstate_pwrite(img, start + off, model + off, n, &err));
            off += n;
        }
        api_vmstate_get_stats(img, &st);
        assert_int_equal(st.buffer_size, B);
        assert_true(qimg_vmstate_flush(img, &err));

        GArray *calls = sorted_saves(f);
        uint64_t expect_pos = start;
        for (guint i = 0; i < calls->len; i++) {
            FakeCall *k = &g_array_index(calls, FakeCall, i);
            assert_int_equal(k->pos, expect_pos);
            assert_true(k->pos / B == (k->pos + k->len - 1) / B); /* within one cell */
            if (i > 0) {
                assert_int_equal(k->pos % B, 0);
                assert_int_equal(k->pos % cases[c].cluster, 0);
            }
            if (i + 1 < calls->len) {
                assert_int_equal((k->pos + k->len) % B, 0); /* ends on the grid */
            }
            expect_pos += k->len;
        }
        assert_int_equal(expect_pos, start + total);
        assert_int_equal(calls->len, (start + total + B - 1) / B - start / B);
        g_array_unref(calls);
        assert_memory_equal(f->area + start, model, total);
        fake_check(f);

        g_rand_free(r);
        g_free(model);
        api_image_destroy(img);
        fake_free(f);
    }
}

static void test_configure_errors(void **state)
{
    Fake *f = fake_new(16 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams), .name = "busy"};

    QimgVmstateOptions bad = {.struct_size = sizeof(QimgVmstateOptions),
                              .max_in_flight = 1000};
    assert_false(qimg_vmstate_configure(img, &bad, &err));
    assert_int_equal(err->code, EINVAL);
    assert_non_null(strstr(err->message, "max_in_flight"));
    g_clear_error(&err);

    bad = (QimgVmstateOptions){.struct_size = sizeof(QimgVmstateOptions),
                               .buffer_size = (size_t)1 << 40};
    assert_false(qimg_vmstate_configure(img, &bad, &err));
    assert_int_equal(err->code, EINVAL);
    g_clear_error(&err);

    QimgVmstateSave *s = qimg_vmstate_save_begin(img, &p, &err);
    assert_non_null(s);
    QimgVmstateOptions ok = {.struct_size = sizeof(QimgVmstateOptions),
                             .max_in_flight = 2};
    assert_false(qimg_vmstate_configure(img, &ok, &err));
    assert_int_equal(err->code, EBUSY);
    g_clear_error(&err);
    /* One stream at a time. */
    assert_null(qimg_vmstate_save_begin(
        img,
        &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams), .name = "b"},
        &err));
    assert_int_equal(err->code, EBUSY);
    g_clear_error(&err);
    qimg_vmstate_save_abort(s);
    assert_true(qimg_vmstate_configure(img, &ok, &err));
    assert_int_equal(FAKE_GET(f, create_calls), 0);

    api_image_destroy(img);
    fake_free(f);
}

/* ------------------------------------------------------------------------ */
/* Ordering (invariant 2)                                                   */
/* ------------------------------------------------------------------------ */

/* Writes [pos, pos+len) of sequence seq (u32 words) to img and the model. */
static void seq_write(QimgImage *img, uint32_t *model, uint64_t pos, uint64_t len,
                      uint32_t seq)
{
    g_autoptr(GError) err = NULL;
    g_autofree uint32_t *buf = g_new(uint32_t, len / 4);

    g_assert(pos % 4 == 0 && len % 4 == 0);
    for (uint64_t i = 0; i < len / 4; i++) {
        buf[i] = seq;
        model[pos / 4 + i] = seq;
    }
    assert_true(qimg_vmstate_pwrite(img, pos, buf, len, &err));
}

/*
 * Old buffers are held at the gate while a newer write covers the same
 * bytes: the newer one must not land first.  Then random overlapping,
 * non-contiguous rewrites with slow saves; the result is the model that
 * applies writes in program order.
 */
static void test_ordering(void **state)
{
    const uint64_t area = 8 * MiB;
    Fake *f = fake_new(area);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    uint32_t *model = g_new0(uint32_t, area / 4);
    GRand *r = g_rand_new_with_seed(1234);
    GateKeeper k;
    uint32_t seq = 1;

    f->check_seq = true;
    f->last_seq = g_new0(uint32_t, area / 4);

    /* Three full buffers, all held at the gate. */
    gate_start(&k, f, 3);
    seq_write(img, model, 0, 3 * MiB, seq++);
    /* A whole aligned rewrite of the middle one: would be submitted at once
     * and overtake the held buffer unless the writer waits (invariant 2). */
    seq_write(img, model, 1 * MiB, 1 * MiB, seq++);
    gate_join(&k);
    /* And a partial rewrite that is only in the current buffer. */
    seq_write(img, model, 2 * MiB + 4096, 8192, seq++);
    assert_true(qimg_vmstate_flush(img, &err));
    fake_check(f);
    assert_memory_equal(f->area, model, 3 * MiB);

    /* Random overlapping rewrites, some contiguous, with slow saves. */
    f->save_delay_us = 200;
    uint64_t next = 0;
    for (int i = 0; i < 300; i++) {
        uint64_t len = (uint64_t)g_rand_int_range(r, 1, 600 * 1024 / 4) * 4;
        uint64_t pos =
            g_rand_boolean(r) ? next : (uint64_t)g_rand_int_range(r, 0, 1536 * 1024) * 4;
        if (pos + len > area) {
            pos = 0;
        }
        seq_write(img, model, pos, len, seq++);
        next = pos + len;
    }
    assert_true(qimg_vmstate_flush(img, &err));
    fake_check(f);
    assert_memory_equal(f->area, model, area);

    g_rand_free(r);
    g_free(model);
    api_image_destroy(img);
    fake_free(f);
}

/* ------------------------------------------------------------------------ */
/* Reads see pending writes (invariant 3)                                   */
/* ------------------------------------------------------------------------ */

static void test_read_after_write(void **state)
{
    const uint64_t total = 3 * MiB + 4321;
    Fake *f = fake_new(8 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    GRand *r = g_rand_new_with_seed(99);
    uint8_t *model = g_malloc0(8 * MiB);
    uint8_t *buf = g_malloc(2 * MiB);

    fill_random(r, model, total);
    set_config(img, 4, 0);
    for (uint64_t off = 0; off < total;) {
        size_t n = rnd(r, 1, 40000, total - off);
        assert_true(qimg_vmstate_pwrite(img, off, model + off, n, &err));
        off += n;
        /* Anywhere in what was written, before any flush. */
        uint64_t rp = (uint64_t)g_rand_int_range(r, 0, (gint32)off);
        size_t rl = (size_t)rnd(r, 1, 200000, off - rp);
        assert_true(qimg_vmstate_pread(img, rp, buf, rl, &err));
        assert_memory_equal(buf, model + rp, rl);
    }

    /* Read-ahead must not serve bytes written after it was filled. */
    assert_true(qimg_vmstate_pread(img, 0, buf, 1000, &err)); /* starts read-ahead */
    assert_memory_equal(buf, model, 1000);
    memset(model + 5000, 0xAB, 3000);
    assert_true(qimg_vmstate_pwrite(img, 5000, model + 5000, 3000, &err));
    assert_true(qimg_vmstate_pread(img, 1000, buf, 2 * MiB, &err)); /* sequential */
    assert_memory_equal(buf, model + 1000, 2 * MiB);

    assert_true(qimg_vmstate_flush(img, &err));
    assert_memory_equal(f->area, model, 8 * MiB);
    fake_check(f);

    g_rand_free(r);
    g_free(model);
    g_free(buf);
    api_image_destroy(img);
    fake_free(f);
}

/* Several threads write their own regions at once through one handle. */
typedef struct ThreadWriter {
    QimgImage *img;
    uint8_t *model;
    uint64_t base;
    unsigned seed;
    bool ok;
} ThreadWriter;

static void *thread_writer_main(void *opaque)
{
    ThreadWriter *t = opaque;
    GRand *r = g_rand_new_with_seed(t->seed);
    uint64_t off = 0;

    t->ok = true;
    for (int i = 0; i < 200 && t->ok; i++) {
        size_t n = (size_t)g_rand_int_range(r, 1, 8000);
        fill_random(r, t->model + t->base + off, n);
        t->ok =
            qimg_vmstate_pwrite(t->img, t->base + off, t->model + t->base + off, n, NULL);
        off += n;
    }
    g_rand_free(r);
    return NULL;
}

static void test_threads(void **state)
{
    enum { N = 4 };
    const uint64_t region = 2 * MiB;
    Fake *f = fake_new(N * region);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    uint8_t *model = g_malloc0(N * region);
    ThreadWriter tw[N];
    pthread_t th[N];

    for (int i = 0; i < N; i++) {
        tw[i] = (ThreadWriter){.img = img, .model = model, .base = i * region, .seed = i};
        assert_int_equal(pthread_create(&th[i], NULL, thread_writer_main, &tw[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_true(tw[i].ok);
    }
    assert_true(qimg_vmstate_flush(img, &err));
    assert_memory_equal(f->area, model, N * region);
    fake_check(f);

    g_free(model);
    api_image_destroy(img);
    fake_free(f);
}

/* ------------------------------------------------------------------------ */
/* Errors (invariant 4)                                                     */
/* ------------------------------------------------------------------------ */

/* Appends bytes zero bytes in chunks of chunk; stops at the first error. */
static void append_bytes(QimgVmstateSave *s, uint64_t bytes, size_t chunk, GError **err)
{
    g_autofree uint8_t *buf = g_malloc0(chunk);
    for (uint64_t off = 0; off < bytes; off += chunk) {
        if (!qimg_vmstate_save_append(s, buf, MIN(chunk, bytes - off), err)) {
            return;
        }
    }
}

static void append_mib(QimgVmstateSave *s, unsigned mib, GError **err)
{
    append_bytes(s, mib * MiB, 64 * KiB, err);
}

static void test_error_stream(void **state)
{
    static const int errs[] = {EIO, ENOSPC};
    for (size_t e = 0; e < G_N_ELEMENTS(errs); e++) {
        Fake *f = fake_new(64 * MiB);
        QimgImage *img = fake_image(f, 65536);
        g_autoptr(GError) err = NULL;
        QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams), .name = "err"};

        f->fail_save_at = 3;
        f->fail_errno = errs[e];
        QimgVmstateSave *s = qimg_vmstate_save_begin(img, &p, &err);
        assert_non_null(s);
        append_mib(s, 12, &err); /* may or may not see the error yet */
        g_clear_error(&err);
        /* Once drained, the error shows, and then sticks. */
        assert_int_equal(api_quiesce(img), -errs[e]);
        blk_error_clear();
        unsigned calls = FAKE_GET(f, save_calls);
        for (int i = 0; i < 2; i++) {
            append_mib(s, 3, &err);
            assert_non_null(err);
            assert_int_equal(err->code, errs[e]);
            assert_non_null(strstr(err->message, "injected failure of save call 3"));
            assert_non_null(strstr(err->message, "Could not write VM state at position"));
            g_clear_error(&err);
        }
        assert_int_equal(FAKE_GET(f, save_calls), calls); /* nothing more was submitted */
        assert_null(qimg_vmstate_save_commit(s, &err));
        assert_non_null(err);
        assert_int_equal(err->code, errs[e]);
        assert_non_null(strstr(err->message, "injected failure"));
        g_clear_error(&err);
        assert_int_equal(FAKE_GET(f, create_calls), 0);

        /* The session ended: a new one starts clean. */
        f->fail_save_at = 0;
        s = qimg_vmstate_save_begin(img, &p, &err);
        assert_non_null(s);
        append_mib(s, 2, &err);
        assert_null(err);
        g_autofree char *id = qimg_vmstate_save_commit(s, &err);
        assert_non_null(id);
        assert_int_equal(FAKE_GET(f, create_calls), 1);
        fake_check(f);

        api_image_destroy(img);
        fake_free(f);
    }
}

/* The failing buffer is the final partial one, written only at commit. */
static void test_error_last_buffer(void **state)
{
    Fake *f = fake_new(16 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams), .name = "last"};
    uint8_t buf[1000] = {0};

    f->fail_save_at = 3;
    f->fail_errno = ENOSPC;
    QimgVmstateSave *s = qimg_vmstate_save_begin(img, &p, &err);
    assert_non_null(s);
    append_mib(s, 2, &err);
    assert_true(qimg_vmstate_save_append(s, buf, sizeof(buf), &err));
    assert_null(qimg_vmstate_save_commit(s, &err));
    assert_int_equal(err->code, ENOSPC);
    assert_int_equal(FAKE_GET(f, save_calls), 3);
    assert_int_equal(FAKE_GET(f, create_calls), 0);
    fake_check(f);
    api_image_destroy(img);
    fake_free(f);
}

static void test_error_positional(void **state)
{
    Fake *f = fake_new(64 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *buf = g_malloc0(MiB);

    f->fail_save_at = 2;
    for (int i = 0; i < 10; i++) {
        if (!qimg_vmstate_pwrite(img, i * MiB, buf, MiB, &err)) {
            g_clear_error(&err);
            break;
        }
    }
    for (int i = 0; i < 2; i++) { /* sticky */
        assert_false(qimg_vmstate_flush(img, &err));
        assert_int_equal(err->code, EIO);
        assert_non_null(strstr(err->message, "injected failure of save call 2"));
        g_clear_error(&err);
        assert_false(qimg_vmstate_pwrite(img, 0, buf, 10, &err));
        assert_int_equal(err->code, EIO);
        g_clear_error(&err);
        assert_false(qimg_vmstate_pread(img, 0, buf, 10, &err));
        assert_int_equal(err->code, EIO);
        g_clear_error(&err);
    }
    /* A snapshot must not be taken over lost state, nor a stream started. */
    assert_null(qimg_snapshot_create(
        img,
        &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams), .name = "x"},
        &err));
    assert_int_equal(err->code, EIO);
    g_clear_error(&err);
    assert_null(qimg_vmstate_save_begin(
        img,
        &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams), .name = "x"},
        &err));
    assert_int_equal(err->code, EIO);
    g_clear_error(&err);
    assert_int_equal(FAKE_GET(f, create_calls), 0);
    fake_check(f);
    api_image_destroy(img);
    fake_free(f);
}

/* A read error reaches the read that needs the buffer, and is not sticky. */
static void test_error_read(void **state)
{
    Fake *f = fake_new(16 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *buf = g_malloc(4 * MiB);

    set_config(img, 1, 0); /* one load at a time: call 1 is the buffer at 0 */
    f->fail_load_at = 1;
    assert_false(qimg_vmstate_pread(img, 0, buf, 4 * MiB, &err));
    assert_int_equal(err->code, EIO);
    assert_non_null(strstr(err->message, "Could not read VM state at position 0"));
    assert_non_null(strstr(err->message, "injected failure of load call 1"));
    g_clear_error(&err);
    assert_true(qimg_vmstate_pread(img, 0, buf, 4 * MiB, &err));
    assert_true(qimg_vmstate_pwrite(img, 0, buf, 10, &err));
    assert_true(qimg_vmstate_flush(img, &err));
    fake_check(f);
    api_image_destroy(img);
    fake_free(f);
}

/* ------------------------------------------------------------------------ */
/* Bounded memory (invariant 5)                                             */
/* ------------------------------------------------------------------------ */

static void test_bounded_memory(void **state)
{
    enum { MAX = 4 };
    Fake *f = fake_new(64 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams), .name = "mem"};
    ApiVmstateStats st;
    GateKeeper k;

    set_config(img, MAX, 0);
    /* Hold MAX buffers, so the writer fills one more and waits for space. */
    gate_start(&k, f, MAX);
    QimgVmstateSave *s = qimg_vmstate_save_begin(img, &p, &err);
    assert_non_null(s);
    append_bytes(s, 40 * MiB, 100000, &err); /* buffers fill mid-append */
    assert_null(err);
    gate_join(&k);
    api_vmstate_get_stats(img, &st);
    assert_int_equal(st.max_in_flight, MAX);
    assert_true(st.max_live_buffers <= MAX + 1);
    assert_true(FAKE_GET(f, max_saves_in_flight) <= MAX);
    g_autofree char *id = qimg_vmstate_save_commit(s, &err);
    assert_non_null(id);

    /* Read it back: read-ahead holds at most MAX buffers. */
    QimgVmstateLoad *l = qimg_vmstate_load_begin(img, id, true, &err);
    assert_non_null(l);
    g_autofree uint8_t *buf = g_malloc(100 * KiB);
    gssize n;
    uint64_t got = 0;
    while ((n = qimg_vmstate_load_read(l, buf, 100 * KiB, &err)) > 0) {
        got += (uint64_t)n;
    }
    assert_int_equal(n, 0);
    assert_int_equal(got, 40 * MiB);
    api_vmstate_get_stats(img, &st);
    assert_true(st.max_live_buffers <= MAX + 1);
    qimg_vmstate_load_end(l);
    api_vmstate_get_stats(img, &st);
    assert_int_equal(st.live_buffers, 0);
    fake_check(f);
    api_image_destroy(img);
    fake_free(f);
}

/* ------------------------------------------------------------------------ */
/* Read-ahead (invariant 6) and the load stream                             */
/* ------------------------------------------------------------------------ */

/* Saves total random bytes as snapshot 'name' through the stream. */
static char *save_stream(QimgImage *img, const char *name, uint8_t *model, uint64_t total,
                         GRand *r)
{
    g_autoptr(GError) err = NULL;
    QimgSnapshotParams p = {
        .struct_size = sizeof(QimgSnapshotParams), .name = name, .vm_clock_nsec = 77};

    fill_random(r, model, total);
    QimgVmstateSave *s = qimg_vmstate_save_begin(img, &p, &err);
    assert_non_null(s);
    for (uint64_t off = 0; off < total;) {
        size_t n = rnd(r, 1, 70000, total - off);
        assert_true(qimg_vmstate_save_append(s, model + off, n, &err));
        off += n;
    }
    char *id = qimg_vmstate_save_commit(s, &err);
    assert_non_null(id);
    assert_null(err);
    return id;
}

static bool wait_load_calls(Fake *f, unsigned n)
{
    gint64 deadline = g_get_monotonic_time() + HANG_US;
    bool ok;

    pthread_mutex_lock(&f->lock);
    while (f->load_calls < n && g_get_monotonic_time() < deadline) {
        pthread_mutex_unlock(&f->lock);
        g_usleep(1000);
        pthread_mutex_lock(&f->lock);
    }
    ok = f->load_calls >= n;
    pthread_mutex_unlock(&f->lock);
    return ok;
}

static void test_readahead(void **state)
{
    enum { MAX = 4 };
    const uint64_t S = 10 * MiB + MiB / 2 + 3;
    Fake *f = fake_new(16 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    GRand *r = g_rand_new_with_seed(5);
    uint8_t *model = g_malloc(S);
    uint8_t *buf = g_malloc(2 * MiB);

    set_config(img, MAX, 0);
    g_autofree char *id = save_stream(img, "ra", model, S, r);
    assert_string_equal(id, "1");

    f->read_limit = S; /* invariant 6: the stream knows the size */
    QimgVmstateLoad *l = qimg_vmstate_load_begin(img, "ra", true, &err);
    assert_non_null(l);
    assert_int_equal(qimg_vmstate_load_size(l), S);
    assert_int_equal(FAKE_GET(f, goto_calls), 1);

    /* A small first read prefetches MAX buffers. */
    assert_int_equal(qimg_vmstate_load_read(l, buf, 100, &err), 100);
    assert_memory_equal(buf, model, 100);
    assert_true(wait_load_calls(f, MAX));

    uint64_t pos = 100;
    for (;;) {
        size_t want = (size_t)g_rand_int_range(r, 1, 300 * 1024);
        gssize n = qimg_vmstate_load_read(l, buf, want, &err);
        assert_true(n >= 0);
        if (n == 0) {
            break;
        }
        assert_true((size_t)n == want || pos + (uint64_t)n == S);
        assert_memory_equal(buf, model + pos, (size_t)n);
        pos += (uint64_t)n;
    }
    assert_int_equal(pos, S);
    assert_int_equal(qimg_vmstate_load_read(l, buf, 10, &err), 0);
    qimg_vmstate_load_end(l);

    /* Each buffer read once, on the grid, none past S. */
    pthread_mutex_lock(&f->lock);
    GArray *loads = g_array_copy(f->loads);
    pthread_mutex_unlock(&f->lock);
    g_array_sort(loads, cmp_call);
    assert_int_equal(loads->len, (S + MiB - 1) / MiB);
    for (guint i = 0; i < loads->len; i++) {
        FakeCall *c = &g_array_index(loads, FakeCall, i);
        assert_int_equal(c->pos, (uint64_t)i * MiB);
        assert_int_equal(c->len, MIN(MiB, S - c->pos));
    }
    g_array_unref(loads);
    fake_check(f);

    /* Positional, non-sequential reads of the reverted area. */
    f->read_limit = UINT64_MAX;
    for (int i = 0; i < 50; i++) {
        uint64_t rp = (uint64_t)g_rand_int_range(r, 0, (gint32)(S - 1));
        size_t rl = (size_t)rnd(r, 1, 2 * MiB, S - rp);
        assert_true(qimg_vmstate_pread(img, rp, buf, rl, &err));
        assert_memory_equal(buf, model + rp, rl);
        if (g_rand_boolean(r) && rp + rl < S) { /* continue where it ended */
            size_t rl2 = (size_t)MIN((uint64_t)MiB + 17, S - (rp + rl));
            assert_true(qimg_vmstate_pread(img, rp + rl, buf, rl2, &err));
            assert_memory_equal(buf, model + rp + rl, rl2);
        }
    }
    fake_check(f);

    g_rand_free(r);
    g_free(model);
    g_free(buf);
    api_image_destroy(img);
    fake_free(f);
}

/* The hints fake_advise recorded so far. */
static char *advice_of(Fake *f)
{
    char *s;

    pthread_mutex_lock(&f->lock);
    s = g_strdup(f->advice->str);
    pthread_mutex_unlock(&f->lock);
    return s;
}

#define ASSERT_ADVICE(f, want)                                                           \
    do {                                                                                 \
        g_autofree char *a_ = advice_of(f);                                              \
        assert_string_equal(a_, want);                                                   \
    } while (0)

/* Invariant 6: a state in a local file read through the page cache goes
 * straight into the caller's buffer, one load per read, nothing ahead of
 * it; with cache=none (O_DIRECT) the same reads are read ahead.  Its
 * sequential reads tell the file (blk_advise SEQUENTIAL), once; another
 * read, the end of the stream and release withdraw it (NORMAL); O_DIRECT
 * reads give no hint. */
static void test_readahead_page_cache(void **state)
{
    enum { MAX = 4 };
    const uint64_t S = 6 * MiB + 7;
    const BlkCacheMode modes[] = {BLK_CACHE_WRITEBACK, BLK_CACHE_NONE};

    for (size_t m = 0; m < G_N_ELEMENTS(modes); m++) {
        bool cached = modes[m] == BLK_CACHE_WRITEBACK;
        Fake *f = fake_new(16 * MiB);
        QimgImage *img = fake_image(f, 65536);
        BlkNode file = {.drv = &blk_file_driver, .cache = modes[m]};
        g_autoptr(GError) err = NULL;
        GRand *r = g_rand_new_with_seed(7);
        g_autofree uint8_t *model = g_malloc(S);
        g_autofree uint8_t *buf = g_malloc(S);
        uint64_t pos = 0;
        unsigned reads = 0;

        set_config(img, MAX, 0);
        g_autofree char *id = save_stream(img, "pc", model, S, r);
        ASSERT_ADVICE(f, "");        /* writes give none */
        set_config(img, MAX + 1, 0); /* the save's pool is gone */
        f->read_limit = S;
        img->node->file = &file; /* the fake's bytes "in a file" */
        QimgVmstateLoad *l = qimg_vmstate_load_begin(img, id, true, &err);
        assert_non_null(l);
        while (pos < S) {
            size_t want = (size_t)g_rand_int_range(r, 1, 700 * 1024);
            gssize n = qimg_vmstate_load_read(l, buf, want, &err);
            assert_true(n > 0);
            assert_memory_equal(buf, model + pos, (size_t)n);
            if (cached) {
                /* one load, the caller's own range, done when read returns */
                FakeCall c;
                pthread_mutex_lock(&f->lock);
                assert_int_equal(f->load_calls, ++reads);
                c = g_array_index(f->loads, FakeCall, f->loads->len - 1);
                pthread_mutex_unlock(&f->lock);
                assert_int_equal(c.pos, pos);
                assert_int_equal(c.len, (uint64_t)n);
            } else if (pos == 0) {
                assert_true(wait_load_calls(f, MAX)); /* read ahead */
            }
            ASSERT_ADVICE(f, cached ? "S" : ""); /* from the first read on, once */
            pos += (uint64_t)n;
        }
        /* no threads for reads the kernel reads ahead */
        assert_true((img->vmstate->pool == NULL) == cached);
        qimg_vmstate_load_end(l);
        ASSERT_ADVICE(f, cached ? "SN" : "");

        /* positional reads: sequential ones take the hint, a jump drops it */
        assert_true(qimg_vmstate_pread(img, 0, buf, 1000, &err));
        assert_true(qimg_vmstate_pread(img, 1000, buf + 1000, 5000, &err));
        assert_memory_equal(buf, model, 6000);
        ASSERT_ADVICE(f, cached ? "SNS" : "");
        assert_true(qimg_vmstate_pread(img, MiB, buf, 100, &err));
        assert_memory_equal(buf, model + MiB, 100);
        ASSERT_ADVICE(f, cached ? "SNSN" : "");
        assert_true(qimg_vmstate_pread(img, MiB + 100, buf, 100, &err));
        ASSERT_ADVICE(f, cached ? "SNSNS" : "");
        api_release(img); /* what closing the handle does first */
        ASSERT_ADVICE(f, cached ? "SNSNSN" : "");
        img->node->file = NULL;
        fake_check(f);
        g_rand_free(r);
        api_image_destroy(img);
        fake_free(f);
    }
}

/* Invariant 8: a read of 2 B or more of a state that is not page-cached is
 * read in pieces on the grid, max_in_flight of them at once, straight into
 * the caller's buffer; it takes the read-ahead's buffers first, so no byte
 * is read twice; a piece's error is the read's and is not sticky. */
static void test_split_read(void **state)
{
    enum { MAX = 4 };
    const uint64_t S = 9 * MiB + 3, first = 5 * MiB + 1;
    Fake *f = fake_new(16 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    GRand *r = g_rand_new_with_seed(8);
    g_autofree uint8_t *model = g_malloc(S);
    g_autofree uint8_t *buf = g_malloc(S);

    set_config(img, MAX, 0);
    g_autofree char *id = save_stream(img, "split", model, S, r);
    f->read_limit = S;
    QimgVmstateLoad *l = qimg_vmstate_load_begin(img, id, true, &err);
    assert_non_null(l);

    /* MAX pieces in the driver at once (the gate), six in all, nothing ahead */
    f->load_gate = MAX;
    assert_int_equal(qimg_vmstate_load_read(l, buf, first, &err), (gssize)first);
    pthread_mutex_lock(&f->lock);
    assert_false(f->load_gate_timeout);
    pthread_mutex_unlock(&f->lock);
    assert_memory_equal(buf, model, first);
    assert_int_equal(FAKE_GET(f, load_calls), 6);

    /* a small read starts the read-ahead (MAX buffers); a large one then
     * takes them and reads only the rest */
    assert_int_equal(qimg_vmstate_load_read(l, buf + first, 100, &err), 100);
    assert_true(wait_load_calls(f, 6 + MAX));
    assert_int_equal(qimg_vmstate_load_read(l, buf + first + 100, S, &err),
                     (gssize)(S - first - 100));
    assert_memory_equal(buf, model, S);
    assert_int_equal(qimg_vmstate_load_read(l, buf, 10, &err), 0);
    qimg_vmstate_load_end(l);
    pthread_mutex_lock(&f->lock);
    GArray *loads = g_array_copy(f->loads);
    pthread_mutex_unlock(&f->lock);
    g_array_sort(loads, cmp_call);
    assert_int_equal(loads->len, 6 + MAX + 1);
    uint64_t end = 0;
    for (guint i = 0; i < loads->len; i++) {
        FakeCall *c = &g_array_index(loads, FakeCall, i);
        assert_int_equal(c->pos, end); /* each byte once */
        assert_true(c->len > 0 && c->pos / MiB == (c->pos + c->len - 1) / MiB); /* grid */
        end = c->pos + c->len;
    }
    assert_int_equal(end, S);
    g_array_unref(loads);
    fake_check(f);

    /* one load at a time: pieces of 2 MiB (the largest B x 2^k the read
     * gives its one thread), call n + 2 is the piece at 2 MiB */
    set_config(img, 1, 0);
    f->fail_load_at = FAKE_GET(f, load_calls) + 2;
    assert_false(qimg_vmstate_pread(img, 0, buf, 3 * MiB, &err));
    assert_int_equal(err->code, EIO);
    assert_non_null(strstr(err->message, "Could not read VM state at position 2097152"));
    g_clear_error(&err);

    /* two threads, 9 MiB: pieces of 4 MiB (VMSTATE_SPLIT_PIECE) on their
     * grid, the last one short */
    set_config(img, 2, 0);
    unsigned before = FAKE_GET(f, load_calls);
    pthread_mutex_lock(&f->lock);
    guint first_load = f->loads->len;
    pthread_mutex_unlock(&f->lock);
    assert_true(qimg_vmstate_pread(img, 0, buf, S, &err));
    assert_memory_equal(buf, model, S);
    assert_int_equal(FAKE_GET(f, load_calls), before + 3);
    pthread_mutex_lock(&f->lock);
    for (guint i = first_load; i < f->loads->len; i++) {
        FakeCall *c = &g_array_index(f->loads, FakeCall, i);
        assert_int_equal(c->pos % (4 * MiB), 0);
        assert_int_equal(c->len, MIN(4 * MiB, S - c->pos));
    }
    pthread_mutex_unlock(&f->lock);
    assert_true(qimg_vmstate_pread(img, 0, buf, 3 * MiB, &err));
    assert_memory_equal(buf, model, 3 * MiB);
    fake_check(f);

    g_rand_free(r);
    api_image_destroy(img);
    fake_free(f);
}

/* A state smaller than the read-ahead window: never a read past it. */
static void test_readahead_small_state(void **state)
{
    const uint64_t S = 2 * MiB + 5;
    Fake *f = fake_new(16 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    GRand *r = g_rand_new_with_seed(6);
    uint8_t *model = g_malloc(S);
    g_autofree uint8_t *buf = g_malloc(S + 100);

    g_autofree char *id = save_stream(img, "small", model, S, r);
    f->read_limit = S;
    QimgVmstateLoad *l = qimg_vmstate_load_begin(img, id, true, &err);
    assert_non_null(l);
    assert_int_equal(qimg_vmstate_load_read(l, buf, 1, &err), 1);
    assert_int_equal(qimg_vmstate_load_read(l, buf + 1, S + 99, &err), (gssize)(S - 1));
    assert_memory_equal(buf, model, S);
    qimg_vmstate_load_end(l);
    assert_int_equal(FAKE_GET(f, load_calls), 3);
    fake_check(f);

    g_rand_free(r);
    g_free(model);
    api_image_destroy(img);
    fake_free(f);
}

/* ------------------------------------------------------------------------ */
/* Commit and load                                                          */
/* ------------------------------------------------------------------------ */

static void test_commit_and_load(void **state)
{
    const uint64_t S = 3 * MiB + 999;
    Fake *f = fake_new(16 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    GRand *r = g_rand_new_with_seed(11);
    uint8_t *model = g_malloc(S);
    g_autofree uint8_t *buf = g_malloc(S);

    g_autofree char *id = save_stream(img, "snap", model, S, r);
    assert_string_equal(id, "1");
    assert_int_equal(FAKE_GET(f, create_calls), 1);
    FakeSnap *sn = &g_array_index(f->snaps, FakeSnap, 0);
    assert_string_equal(sn->name, "snap");
    assert_int_equal(sn->vm_state_size, S);
    assert_int_equal(sn->icount, -1);
    assert_int_equal(sn->vm_clock_nsec, 77);
    assert_true(sn->date_sec > 0);        /* "now" */
    assert_true(sn->flushes_before >= 1); /* blk_flush before the snapshot */
    assert_memory_equal(sn->data, model, S);

    /* Same name again: refused (QEMU's snapshot-save). */
    assert_null(qimg_vmstate_save_begin(
        img,
        &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams), .name = "snap"},
        &err));
    assert_int_equal(err->code, EEXIST);
    assert_string_equal(err->message, "Snapshot 'snap' already exists");
    g_clear_error(&err);

    /* Extraction: through a view, the disk untouched. */
    for (int by_name = 0; by_name < 2; by_name++) {
        QimgVmstateLoad *l =
            qimg_vmstate_load_begin(img, by_name ? "snap" : "1", false, &err);
        assert_non_null(l);
        assert_int_equal(qimg_vmstate_load_size(l), S);
        uint64_t pos = 0;
        gssize n;
        while ((n = qimg_vmstate_load_read(l, buf + pos, 50000, &err)) > 0) {
            pos += (uint64_t)n;
        }
        assert_int_equal(n, 0);
        assert_int_equal(pos, S);
        assert_memory_equal(buf, model, S);
        qimg_vmstate_load_end(l);
    }
    assert_int_equal(FAKE_GET(f, goto_calls), 0);
    assert_int_equal(FAKE_GET(f, load_calls), 0); /* all through the view */

    /* loadvm: revert, then read the active area. */
    QimgVmstateLoad *l = qimg_vmstate_load_begin(img, "snap", true, &err);
    assert_non_null(l);
    assert_int_equal(FAKE_GET(f, goto_calls), 1);
    assert_int_equal(qimg_vmstate_load_read(l, buf, S, &err), (gssize)S);
    assert_memory_equal(buf, model, S);
    qimg_vmstate_load_end(l);

    /* Refusals: unknown, disk-only. */
    assert_null(qimg_vmstate_load_begin(img, "nope", true, &err));
    assert_int_equal(err->code, ENOENT);
    assert_string_equal(err->message, "Snapshot 'nope' does not exist");
    g_clear_error(&err);
    g_autofree char *disk_only = qimg_snapshot_create(
        img,
        &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams), .name = "disk"},
        &err);
    assert_non_null(disk_only);
    assert_null(qimg_vmstate_load_begin(img, "disk", false, &err));
    assert_int_equal(err->code, EINVAL);
    assert_string_equal(
        err->message,
        "This is a disk-only snapshot. Revert to it offline using qemu-img");
    g_clear_error(&err);
    assert_int_equal(FAKE_GET(f, goto_calls), 1);

    /* Abort: no snapshot. */
    QimgVmstateSave *s = qimg_vmstate_save_begin(
        img,
        &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams), .name = "ab"},
        &err);
    assert_non_null(s);
    append_mib(s, 2, &err);
    qimg_vmstate_save_abort(s);
    assert_int_equal(FAKE_GET(f, create_calls), 2);
    fake_check(f);

    g_rand_free(r);
    g_free(model);
    api_image_destroy(img);
    fake_free(f);
}

/*
 * Invariant 7: closing the image with a stream open drains and invalidates
 * the stream; later calls fail with EBADF and free cleanly (run under ASan:
 * no use of the freed state).
 */
static void test_close_with_open_stream(void **state)
{
    const uint64_t S = 2 * MiB + 77;
    g_autoptr(GError) err = NULL;
    uint8_t buf[4096];

    for (int kind = 0; kind < 5; kind++) {
        Fake *f = fake_new(16 * MiB);
        QimgImage *img = fake_image(f, 65536);
        GRand *r = g_rand_new_with_seed(5);
        g_autofree uint8_t *model = g_malloc(S);

        if (kind < 2) { /* a save stream: append after close, or commit */
            QimgVmstateSave *s = qimg_vmstate_save_begin(
                img,
                &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams),
                                      .name = "s"},
                &err);
            assert_non_null(s);
            for (uint64_t i = 0; i < S; i++) {
                model[i] = (uint8_t)g_rand_int(r);
            }
            assert_true(qimg_vmstate_save_append(s, model, S, &err));
            api_image_destroy(img);
            /* what was buffered was drained into the area before close */
            assert_memory_equal(f->area, model, S);
            if (kind == 0) {
                assert_false(qimg_vmstate_save_append(s, buf, sizeof(buf), &err));
                assert_int_equal(err->code, EBADF);
                g_clear_error(&err);
                qimg_vmstate_save_abort(s);
            } else {
                assert_null(qimg_vmstate_save_commit(s, &err));
                assert_int_equal(err->code, EBADF);
                assert_non_null(strstr(err->message, "the image was closed"));
                g_clear_error(&err);
            }
            assert_int_equal(FAKE_GET(f, create_calls), 0);
        } else {
            /* a load stream: loadvm (apply) or extraction through a view */
            g_autofree char *id = save_stream(img, "snap", model, S, r);
            assert_non_null(id);
            QimgVmstateLoad *l = qimg_vmstate_load_begin(img, "snap", kind == 2, &err);
            assert_non_null(l);
            assert_int_equal(qimg_vmstate_load_read(l, buf, sizeof(buf), &err),
                             (gssize)sizeof(buf));
            api_image_destroy(img);
            if (kind < 4) {
                assert_int_equal(qimg_vmstate_load_read(l, buf, sizeof(buf), &err), -1);
                assert_int_equal(err->code, EBADF);
                g_clear_error(&err);
            }
            qimg_vmstate_load_end(l);
        }
        g_rand_free(r);
        fake_free(f);
    }
}

/* ------------------------------------------------------------------------ */
/* The snapshot API (api/snapshot.c)                                        */
/* ------------------------------------------------------------------------ */

static void test_snapshot_api(void **state)
{
    Fake *f = fake_new(4 * MiB);
    QimgImage *img = fake_image(f, 65536);
    g_autoptr(GError) err = NULL;
    QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams),
                            .name = "a",
                            .date_sec = 1234,
                            .date_nsec = 5,
                            .vm_clock_nsec = 9,
                            .has_icount = true,
                            .icount = 3};

    g_autofree char *id1 = qimg_snapshot_create(img, &p, &err);
    assert_string_equal(id1, "1");
    FakeSnap *s = &g_array_index(f->snaps, FakeSnap, 0);
    assert_int_equal(s->date_sec, 1234);
    assert_int_equal(s->date_nsec, 5);
    assert_int_equal(s->vm_clock_nsec, 9);
    assert_int_equal(s->icount, 3);

    /* Duplicate and empty names are allowed, as in qemu-img snapshot -c. */
    g_autofree char *id2 = qimg_snapshot_create(img, &p, &err);
    assert_string_equal(id2, "2");
    g_autofree char *id3 = qimg_snapshot_create(
        img, &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams), .name = ""},
        &err);
    assert_non_null(id3);
    s = &g_array_index(f->snaps, FakeSnap, 2);
    assert_true(s->date_sec > 0);

    /* Pending vmstate writes are in the snapshot (snapshot.c invariant 1). */
    uint8_t data[100];
    memset(data, 0x5A, sizeof(data));
    assert_true(qimg_vmstate_pwrite(img, 0, data, sizeof(data), &err));
    g_autofree char *id4 = qimg_snapshot_create(
        img,
        &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams),
                              .name = "vm",
                              .vm_state_size = 100},
        &err);
    assert_non_null(id4);
    s = &g_array_index(f->snaps, FakeSnap, 3);
    assert_memory_equal(s->data, data, sizeof(data));

    GPtrArray *list = qimg_snapshot_list(img, &err);
    assert_non_null(list);
    assert_int_equal(list->len, 4);
    assert_string_equal(((QimgSnapshotInfo *)g_ptr_array_index(list, 0))->name, "a");
    assert_string_equal(((QimgSnapshotInfo *)g_ptr_array_index(list, 3))->id, "4");
    qimg_snapshot_list_free(list);

    assert_true(qimg_snapshot_apply(img, "vm", &err));
    assert_int_equal(FAKE_GET(f, goto_calls), 1);
    assert_false(qimg_snapshot_apply(img, "zz", &err));
    assert_int_equal(err->code, ENOENT);
    g_clear_error(&err);

    assert_true(qimg_snapshot_delete(img, "2", &err));
    assert_false(qimg_snapshot_delete(img, "2", &err));
    assert_int_equal(err->code, ENOENT);
    assert_string_equal(err->message, "fake: snapshot not found");
    g_clear_error(&err);
    list = qimg_snapshot_list(img, &err);
    assert_int_equal(list->len, 3);
    qimg_snapshot_list_free(list);

    assert_null(qimg_snapshot_create(
        img, &(QimgSnapshotParams){.struct_size = sizeof(QimgSnapshotParams), 0}, &err));
    assert_int_equal(err->code, EINVAL);
    g_clear_error(&err);

    /* Read-only images refuse modifications. */
    img->node->read_only = true;
    assert_null(qimg_snapshot_create(img, &p, &err));
    assert_int_equal(err->code, EACCES);
    assert_string_equal(err->message, "Image 'fake.qcow2' is read-only");
    g_clear_error(&err);
    assert_false(qimg_snapshot_apply(img, "1", &err));
    assert_int_equal(err->code, EACCES);
    g_clear_error(&err);
    assert_false(qimg_snapshot_delete(img, "1", &err));
    assert_int_equal(err->code, EACCES);
    g_clear_error(&err);
    assert_null(qimg_vmstate_save_begin(img, &p, &err));
    assert_int_equal(err->code, EACCES);
    g_clear_error(&err);
    assert_false(qimg_vmstate_pwrite(img, 0, data, 1, &err));
    assert_int_equal(err->code, EACCES);
    g_clear_error(&err);
    list = qimg_snapshot_list(img, &err); /* reading is fine */
    assert_int_equal(list->len, 3);
    qimg_snapshot_list_free(list);
    fake_check(f);
    api_image_destroy(img);
    fake_free(f);
}

static void test_snapshot_unsupported(void **state)
{
    QimgImage *img = image_new(&nosnap_driver, NULL, 0);
    g_autoptr(GError) err = NULL;
    QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams), .name = "x"};
    uint8_t b = 0;

    assert_null(qimg_snapshot_create(img, &p, &err));
    assert_int_equal(err->code, ENOTSUP);
    assert_string_equal(err->message, "Format 'raw' does not support internal snapshots");
    g_clear_error(&err);
    assert_false(qimg_snapshot_apply(img, "x", &err));
    assert_int_equal(err->code, ENOTSUP);
    g_clear_error(&err);
    assert_false(qimg_snapshot_delete(img, "x", &err));
    assert_int_equal(err->code, ENOTSUP);
    g_clear_error(&err);
    GPtrArray *list = qimg_snapshot_list(img, &err); /* qemu-img -l: nothing, rc 0 */
    assert_non_null(list);
    assert_int_equal(list->len, 0);
    qimg_snapshot_list_free(list);
    assert_null(qimg_vmstate_save_begin(img, &p, &err));
    assert_int_equal(err->code, ENOTSUP);
    g_clear_error(&err);
    assert_null(qimg_vmstate_load_begin(img, "x", true, &err));
    assert_int_equal(err->code, ENOTSUP);
    g_clear_error(&err);
    assert_false(qimg_vmstate_pwrite(img, 0, &b, 1, &err));
    assert_int_equal(err->code, ENOTSUP);
    assert_string_equal(err->message, "Format 'raw' does not support VM state");
    g_clear_error(&err);
    assert_false(qimg_vmstate_pread(img, 0, &b, 1, &err));
    assert_int_equal(err->code, ENOTSUP);
    g_clear_error(&err);
    api_image_destroy(img);
}

/* The fake driver is in the driver table (views are opened by name, through
 * it), and a file "fake.qcow2" exists for the view's protocol node. */
static int group_setup(void **state)
{
    (void)state;
    const char *dir = g_getenv("QIMG_TEST_TMPDIR");
    g_autofree char *tmp = dir ? NULL : g_dir_make_tmp("test-vmstate-XXXXXX", NULL);

    if (chdir(dir ? dir : tmp) < 0 || !g_file_set_contents("fake.qcow2", "", 0, NULL)) {
        return -1;
    }
    return blk_driver_register(&fake_driver) < 0 ? -1 : 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coalesce_random),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_configure_errors),
        cmocka_unit_test(test_ordering),
        cmocka_unit_test(test_read_after_write),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_error_stream),
        cmocka_unit_test(test_error_last_buffer),
        cmocka_unit_test(test_error_positional),
        cmocka_unit_test(test_error_read),
        cmocka_unit_test(test_bounded_memory),
        cmocka_unit_test(test_readahead),
        cmocka_unit_test(test_readahead_small_state),
        cmocka_unit_test(test_readahead_page_cache),
        cmocka_unit_test(test_split_read),
        cmocka_unit_test(test_commit_and_load),
        cmocka_unit_test(test_close_with_open_stream),
        cmocka_unit_test(test_snapshot_api),
        cmocka_unit_test(test_snapshot_unsupported),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, group_setup, NULL));
}
