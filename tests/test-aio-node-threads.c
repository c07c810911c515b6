/*
 * tests/test-aio-node-threads.c: the asynchronous API's protocol engine
 * (api/aio.c invariants 10 and 11; BlkDriver.aio_rw, which block/rbd.c
 * implements over librbd) without a Ceph cluster: a fake protocol node
 * whose aio_rw completes requests on a thread of its own, as librbd's
 * callback thread does, under the raw format (raw.c's direct_begin) or
 * opened as itself.
 *
 *  - reads and writes go to aio_rw, not to the pool, and read back what
 *    was written; the callbacks run on the caller's thread;
 *  - what aio_rw must not take goes to the pool: FUA, a writethrough
 *    image, block 0 of a probed raw image (raw.c invariant 4), a request
 *    the node refuses;
 *  - a failure carries the node's message, recorded on its thread;
 *  - close drains requests still on the node's thread (a completing thread
 *    touches nothing after handing the request over: invariant 11; the
 *    TSan and ASan builds see a use after free otherwise).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "qimg/aio.h"
#include "raw/raw.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#define FAKE_SIZE (1024u * 1024)
#define BAD_OFFSET (512u * 1024) /* aio reads here fail */

typedef struct FakeReq FakeReq;
struct FakeReq {
    FakeReq *next;
    bool write;
    uint64_t offset;
    const BlkIOV *q;
    BlkAioDone *done;
    void *opaque;
};

typedef struct Fake {
    uint8_t data[FAKE_SIZE];
    /* requests for the completer thread, oldest first (pthread primitives,
     * which TSan sees, where glib's queue is not instrumented) */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    FakeReq *head, **tail; /* [lock] */
    pthread_t completer;
    unsigned aio_calls, sync_calls; /* atomic */
    bool refuse;                    /* aio_rw answers -ENOTSUP */
    unsigned delay_us;              /* before each completion */
} Fake;

static FakeReq stop_req;

static void fake_push(Fake *f, FakeReq *r)
{
    pthread_mutex_lock(&f->lock);
    r->next = NULL;
    *f->tail = r;
    f->tail = &r->next;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

static FakeReq *fake_pop(Fake *f)
{
    pthread_mutex_lock(&f->lock);
    while (!f->head) {
        pthread_cond_wait(&f->cond, &f->lock);
    }
    FakeReq *r = f->head;
    f->head = r->next;
    if (!f->head) {
        f->tail = &f->head;
    }
    pthread_mutex_unlock(&f->lock);
    return r;
}

/* The node's own thread: moves the bytes, then calls done (as librbd's
 * callback thread does for block/rbd.c). */
static void *completer_main(void *opaque)
{
    Fake *f = opaque;

    for (;;) {
        FakeReq *r = fake_pop(f);
        int ret = 0;

        if (r == &stop_req) {
            return NULL;
        }
        if (f->delay_us) {
            g_usleep(f->delay_us);
        }
        blk_error_clear();
        if (!r->write && r->offset == BAD_OFFSET) {
            ret = blk_error(EIO, "fake node failed the read at %u", BAD_OFFSET);
        } else if (r->write) {
            iov_to_buf(r->q, 0, f->data + r->offset, r->q->size);
        } else {
            iov_from_buf(r->q, 0, f->data + r->offset, r->q->size);
        }
        BlkAioDone *done = r->done;
        void *done_opaque = r->opaque;
        g_free(r);
        done(done_opaque, ret);
    }
}

static int fake_aio_rw(BlkNode *node, bool write, uint64_t offset, const BlkIOV *q,
                       BlkAioDone *done, void *opaque)
{
    Fake *f = node->opaque;
    FakeReq *r;

    if (f->refuse || offset + q->size > node->size) {
        return -ENOTSUP;
    }
    __atomic_add_fetch(&f->aio_calls, 1, __ATOMIC_RELAXED);
    r = g_new(FakeReq, 1);
    *r = (FakeReq){
        .write = write, .offset = offset, .q = q, .done = done, .opaque = opaque};
    fake_push(f, r);
    return 0;
}

static int fake_preadv(BlkNode *node, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    Fake *f = node->opaque;

    (void)flags;
    __atomic_add_fetch(&f->sync_calls, 1, __ATOMIC_RELAXED);
    size_t n = offset >= FAKE_SIZE ? 0 : MIN(q->size, (size_t)(FAKE_SIZE - offset));
    iov_from_buf(q, 0, f->data + offset, n);
    iov_memset(q, n, 0, q->size - n);
    return 0;
}

static int fake_pwritev(BlkNode *node, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    Fake *f = node->opaque;

    (void)flags;
    __atomic_add_fetch(&f->sync_calls, 1, __ATOMIC_RELAXED);
    if (offset + q->size > FAKE_SIZE) {
        return blk_error(ENOSPC, "fake node is full");
    }
    iov_to_buf(q, 0, f->data + offset, q->size);
    return 0;
}

static int fake_flush(BlkNode *node)
{
    (void)node;
    return 0;
}

static void fake_close(BlkNode *node)
{
    Fake *f = node->opaque;

    fake_push(f, &stop_req);
    pthread_join(f->completer, NULL);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    g_free(f);
}

static const BlkDriver fake_driver = {
    .format_name = "fakeaio",
    .is_protocol = true,
    .close = fake_close,
    .preadv = fake_preadv,
    .pwritev = fake_pwritev,
    .flush = fake_flush,
    .aio_rw = fake_aio_rw,
};

/* A fake node, alone or under the raw format (probed or not). */
static QimgImage *image_new(Fake **out, bool under_raw, bool probed, BlkCacheMode cache)
{
    Fake *f = g_new0(Fake, 1);
    BlkNode *node = g_new0(BlkNode, 1);

    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->tail = &f->head;
    assert_int_equal(pthread_create(&f->completer, NULL, completer_main, f), 0);
    node->drv = &fake_driver;
    node->opaque = f;
    node->filename = g_strdup("fake");
    node->size = FAKE_SIZE;
    node->request_alignment = 1;
    node->cache = cache;
    if (under_raw) {
        BlkNode *raw = g_new0(BlkNode, 1);
        raw->drv = &blk_raw_driver;
        raw->file = node;
        raw->filename = g_strdup("fake");
        raw->size = FAKE_SIZE;
        raw->request_alignment = 1;
        raw->cache = cache;
        raw->probed = probed;
        node = raw;
    }
    *out = f;
    return api_image_new(node); /* it owns the nodes */
}

typedef struct Done {
    int calls, errors;
    GThread *thread; /* where the last callback ran */
    char *msg;
} Done;

static void done_cb(void *opaque, int ret, const GError *err)
{
    Done *d = opaque;

    d->calls++;
    d->thread = g_thread_self();
    assert_true((ret < 0) == (err != NULL));
    if (ret < 0) {
        d->errors++;
        g_free(d->msg);
        d->msg = g_strdup(err->message);
    }
}

static void wait_all(QimgImage *img)
{
    while (qimg_image_aio_in_flight(img) > 0) {
        qimg_image_aio_wait(img);
    }
}

static void check_rw(bool under_raw)
{
    Fake *f;
    QimgImage *img = image_new(&f, under_raw, false, BLK_CACHE_WRITEBACK);
    g_autoptr(GError) err = NULL;
    static uint8_t out[64][4096], in[64][4096];
    struct iovec v[64];
    Done d = {0};

    for (int i = 0; i < 64; i++) {
        memset(out[i], i + 1, sizeof(out[i]));
        v[i] = (struct iovec){.iov_base = out[i], .iov_len = sizeof(out[i])};
        assert_true(qimg_image_aio_pwritev(img, (uint64_t)i * 8192, &v[i], 1, 0, done_cb,
                                           &d, &err));
    }
    wait_all(img);
    assert_int_equal(d.calls, 64);
    assert_int_equal(d.errors, 0);
    assert_ptr_equal(d.thread, g_thread_self()); /* aio.h rule 2 */
    for (int i = 0; i < 64; i++) {
        v[i] = (struct iovec){.iov_base = in[i], .iov_len = sizeof(in[i])};
        assert_true(qimg_image_aio_preadv(img, (uint64_t)i * 8192, &v[i], 1, 0, done_cb,
                                          &d, &err));
    }
    wait_all(img);
    assert_int_equal(d.calls, 128);
    assert_int_equal(d.errors, 0);
    assert_memory_equal(in, out, sizeof(in));
    /* every request went to the node's own engine: none to the pool */
    assert_int_equal(f->aio_calls, 128);
    assert_int_equal(f->sync_calls, 0);
    api_image_destroy(img);
}

static void test_rw_raw(void **state)
{
    (void)state;
    check_rw(true);
}

static void test_rw_protocol(void **state)
{
    (void)state;
    check_rw(false);
}

/* One request; whether it reached aio_rw. */
static bool one(QimgImage *img, Fake *f, bool write, uint64_t offset, unsigned flags)
{
    static uint8_t buf[4096];
    struct iovec v = {.iov_base = buf, .iov_len = sizeof(buf)};
    g_autoptr(GError) err = NULL;
    unsigned before = f->aio_calls;
    Done d = {0};

    assert_true(
        write ? qimg_image_aio_pwritev(img, offset, &v, 1, flags, done_cb, &d, &err)
              : qimg_image_aio_preadv(img, offset, &v, 1, flags, done_cb, &d, &err));
    wait_all(img);
    assert_int_equal(d.calls, 1);
    if (d.errors) {
        fail_msg("%s", d.msg);
    }
    return f->aio_calls != before;
}

static void test_fallbacks(void **state)
{
    Fake *f;
    QimgImage *img = image_new(&f, true, true, BLK_CACHE_WRITEBACK);

    (void)state;
    assert_true(one(img, f, false, 0, 0));
    assert_true(one(img, f, true, 4096, 0));
    assert_false(one(img, f, true, 4096, QIMG_AIO_FUA)); /* a flush after it */
    assert_false(one(img, f, true, 0, 0));               /* raw.c invariant 4: block 0 */
    f->refuse = true;
    assert_false(one(img, f, false, 8192, 0));
    /* the FUA write; block 0's read, its checked write and the rest (raw.c
     * invariant 4); the refused read */
    assert_int_equal(f->sync_calls, 5);
    api_image_destroy(img);

    img = image_new(&f, true, false, BLK_CACHE_WRITETHROUGH);
    assert_true(one(img, f, false, 0, 0));
    assert_false(one(img, f, true, 4096, 0)); /* api.h invariant 2: flushed */
    api_image_destroy(img);
}

static void test_error(void **state)
{
    Fake *f;
    QimgImage *img = image_new(&f, true, false, BLK_CACHE_WRITEBACK);
    g_autoptr(GError) err = NULL;
    uint8_t buf[512];
    struct iovec v = {.iov_base = buf, .iov_len = sizeof(buf)};
    Done d = {0};

    (void)state;
    assert_true(qimg_image_aio_preadv(img, BAD_OFFSET, &v, 1, 0, done_cb, &d, &err));
    wait_all(img);
    assert_int_equal(d.errors, 1);
    assert_string_equal(d.msg,
                        "Could not read 'fake': fake node failed the read at 524288");
    assert_int_equal(f->sync_calls, 0); /* the node's own failure, not a retry */
    g_free(d.msg);
    api_image_destroy(img);
}

/* Close with requests still on the node's thread: every callback runs once. */
static void test_close_drains(void **state)
{
    Fake *f;
    QimgImage *img = image_new(&f, true, false, BLK_CACHE_WRITEBACK);
    g_autoptr(GError) err = NULL;
    static uint8_t buf[32][512];
    struct iovec v[32];
    Done d = {0};

    (void)state;
    f->delay_us = 200;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 32; i++) {
            v[i] = (struct iovec){.iov_base = buf[i], .iov_len = sizeof(buf[i])};
            assert_true(qimg_image_aio_preadv(img, (uint64_t)i * 512, &v[i], 1, 0,
                                              done_cb, &d, &err));
        }
        if (round % 2) {
            wait_all(img);
        } else {
            qimg_image_aio_wait(img); /* some, and the eventfd path */
        }
    }
    api_image_destroy(img); /* drains the rest */
    assert_int_equal(d.calls, 20 * 32);
    assert_int_equal(d.errors, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rw_raw),       cmocka_unit_test(test_rw_protocol),
        cmocka_unit_test(test_fallbacks),    cmocka_unit_test(test_error),
        cmocka_unit_test(test_close_drains),
    };
    api_register_drivers(); /* raw.c invariant 4 probes block 0 */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
