/*
 * tests/test-vmstate-save.c: unit tests for the vmstate writer (api/vmstate.c,
 * api/vmstate-api.c): coalescing and the buffer grid, alignment, the
 * configuration, write ordering, threads, errors and bounded memory.
 *
 * "Invariant N" means vmstate.c's.  The tests run over the recording fake
 * driver of test-vmstate-fixture.c.
 *
 * Nothing asserts on timing.  Where a helper thread gives a broken writer a
 * moment to go wrong before it opens the gate, every asserted fact holds
 * for a correct writer under any schedule; deadlines only turn hangs into
 * failures.
 */
#include "test-vmstate-fixture.h"

/* How long the gate keeper gives a broken writer to overtake (not asserted). */
#define GRACE_US (150 * G_TIME_SPAN_MILLISECOND)

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

/* ------------------------------------------------------------------------ */
/* Coalescing and the buffer grid (invariant 1)                             */
/* ------------------------------------------------------------------------ */

/*
 * 10000 random appends of 1..32 KiB (QIMG_LONG=1; make test 2500, ~40
 * buffers of 1 MiB: each byte is made and checked one at a time, which
 * cost ~160 MiB of instrumented loops under TSan for the 10000): the
 * driver sees only full, B-aligned B-byte writes except the last, each
 * byte once and equal to the model.
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
    const int appends = tu_long_run() ? 10000 : 2500;
    for (int i = 0; i < appends; i++) {
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
        tu_fill_random(r, model, total);
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

    tu_fill_random(r, model, total);
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
        tu_fill_random(r, t->model + t->base + off, n);
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
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coalesce_random),  cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_configure_errors), cmocka_unit_test(test_ordering),
        cmocka_unit_test(test_read_after_write), cmocka_unit_test(test_threads),
        cmocka_unit_test(test_error_stream),     cmocka_unit_test(test_error_last_buffer),
        cmocka_unit_test(test_error_positional), cmocka_unit_test(test_error_read),
        cmocka_unit_test(test_bounded_memory),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, group_setup, NULL));
}
