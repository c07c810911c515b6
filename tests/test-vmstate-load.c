/*
 * tests/test-vmstate-load.c: unit tests for the vmstate reader
 * (api/vmstate-read.c, api/vmstate-api.c: read-ahead, the load stream, the
 * commit of a saved state) and api/snapshot.c (the public snapshot API).
 *
 * "Invariant N" means vmstate.c's.  The tests run over the recording fake
 * driver of test-vmstate-fixture.c.  Nothing asserts on timing; deadlines
 * only turn hangs into failures.
 */
#include "test-vmstate-fixture.h"

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

    tu_fill_random(r, model, total);
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
int main(void)
{
    const struct CMUnitTest tests[] = {
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
