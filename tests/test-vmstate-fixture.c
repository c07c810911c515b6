/*
 * tests/test-vmstate-fixture.c: the recording fake driver of the vmstate
 * tests and their shared helpers (test-vmstate-fixture.h says what it
 * records and checks).
 */
#include "test-vmstate-fixture.h"

Fake *fake_new(uint64_t area_size)
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

void fake_free(Fake *f)
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
const BlkDriver nosnap_driver = {.format_name = "raw"};

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

QimgImage *image_new(const BlkDriver *drv, Fake *f, uint32_t cluster_size)
{
    fake_current = f;
    return api_image_new(node_new(drv, f, cluster_size));
}

QimgImage *fake_image(Fake *f, uint32_t cluster_size)
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
void fake_check(Fake *f)
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
unsigned fake_get(Fake *f, const unsigned *field)
{
    pthread_mutex_lock(&f->lock);
    unsigned v = *field;
    pthread_mutex_unlock(&f->lock);
    return v;
}

int cmp_call(const void *a, const void *b)
{
    const FakeCall *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The save calls, sorted by position (they may start out of order). */
GArray *sorted_saves(Fake *f)
{
    pthread_mutex_lock(&f->lock);
    GArray *a = g_array_copy(f->saves);
    pthread_mutex_unlock(&f->lock);
    g_array_sort(a, cmp_call);
    return a;
}

/* A random number in [lo, hi), capped at cap (glib's MIN would draw twice). */
uint64_t rnd(GRand *r, uint64_t lo, uint64_t hi, uint64_t cap)
{
    uint64_t v = lo + (uint64_t)(g_rand_double(r) * (double)(hi - lo)) % (hi - lo);
    return MIN(v, cap);
}

void set_config(QimgImage *img, unsigned max, size_t bufsize)
{
    g_autoptr(GError) err = NULL;
    QimgVmstateOptions o = {.struct_size = sizeof(QimgVmstateOptions),
                            .max_in_flight = max,
                            .buffer_size = bufsize};
    assert_true(qimg_vmstate_configure(img, &o, &err));
}

/* Appends bytes zero bytes in chunks of chunk; stops at the first error. */
void append_bytes(QimgVmstateSave *s, uint64_t bytes, size_t chunk, GError **err)
{
    g_autofree uint8_t *buf = g_malloc0(chunk);
    for (uint64_t off = 0; off < bytes; off += chunk) {
        if (!qimg_vmstate_save_append(s, buf, MIN(chunk, bytes - off), err)) {
            return;
        }
    }
}

void append_mib(QimgVmstateSave *s, unsigned mib, GError **err)
{
    append_bytes(s, mib * MiB, 64 * KiB, err);
}

/* The fake driver is in the driver table (views are opened by name, through
 * it), and a file "fake.qcow2" exists for the view's protocol node. */
int group_setup(void **state)
{
    (void)state;
    const char *dir = g_getenv("QIMG_TEST_TMPDIR");
    g_autofree char *tmp = dir ? NULL : g_dir_make_tmp("test-vmstate-XXXXXX", NULL);

    if (chdir(dir ? dir : tmp) < 0 || !g_file_set_contents("fake.qcow2", "", 0, NULL)) {
        return -1;
    }
    return blk_driver_register(&fake_driver) < 0 ? -1 : 0;
}
