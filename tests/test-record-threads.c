/*
 * Unit tests for the recording node under the io_uring (block/record.c
 * invariant 5, block/uring.c invariant 6): the ring drives the record
 * node's file child, each completed ring write is in the log -- with its
 * data and the ring's mark -- and the child's generation bumped before
 * the request's callback runs, a flush after the callback covers it, and
 * ring reads leave the log alone; and a FUA write is logged durable by
 * itself (record.c invariant 6).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "test-util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ENTRY 32
#define AUX_RING 1 /* record.c's REC_AUX_RING */
#define AUX_FUA 2  /* record.c's REC_AUX_FUA */
#define LEN 4096

typedef struct Done {
    pthread_mutex_t lock; /* pthread's: ThreadSanitizer sees it, GMutex not */
    pthread_cond_t cond;
    bool done;
    int ret;
    BlkNode *rec;
    const char *log;
    uint64_t gen;   /* the record node's write generation in the callback */
    char *log_text; /* the log as the callback saw it */
    gsize log_len;
} Done;

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void on_done(void *opaque, int ret)
{
    Done *d = opaque;

    pthread_mutex_lock(&d->lock);
    d->ret = ret;
    d->gen = blk_write_gen(d->rec);
    g_assert(g_file_get_contents(d->log, &d->log_text, &d->log_len, NULL));
    d->done = true;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

static void wait_done(Done *d)
{
    pthread_mutex_lock(&d->lock);
    while (!d->done) {
        pthread_cond_wait(&d->cond, &d->lock);
    }
    pthread_mutex_unlock(&d->lock);
}

static gsize log_size(const char *log)
{
    g_autofree char *text = NULL;
    gsize len = 0;

    assert_true(g_file_get_contents(log, &text, &len, NULL));
    return len;
}

/* A recording node over a fresh 1 MiB file, its log's path in *log; NULL
 * with the message recorded when it cannot be opened so. */
static BlkNode *open_record(BlkCacheMode cache, char **log)
{
    g_autofree char *file = tu_fresh("disk");
    g_autofree char *name = NULL;
    BlkOpenOptions o = {.cache = cache};

    *log = tu_fresh("log");
    name = g_strdup_printf("record:%s:%s", *log, file);
    assert_int_equal(blk_file_create(file, 1 << 20, BLK_PREALLOC_OFF), 0);
    return blk_open_protocol(name, &o, BLK_ROLE_PROTOCOL, BLK_OPEN_USER_NAME);
}

static void test_ring_write_logged(void **state)
{
    (void)state;
    g_autofree char *log = NULL;
    BlkNode *rec = open_record(BLK_CACHE_NONE, &log);
    BlkUring *u;
    BlkIOV q;
    uint8_t *buf;
    int err = 0;

    if (!rec) {
        tu_skip("no O_DIRECT here: %s", blk_error_message());
    }
    u = blk_uring_new(8, NULL, NULL, &err);
    if (!u) {
        blk_close(rec);
        tu_skip("no io_uring: %s", g_strerror(err));
    }
    assert_int_equal(posix_memalign((void **)&buf, 4096, LEN), 0);
    memset(buf, 0x5a, LEN);
    iov_init_buf(&q, buf, LEN);
    assert_true(blk_uring_node_ok(rec));
    assert_true(blk_uring_can_write(rec, 8192, &q));

    /* the write: logged, after the bump, before the callback */
    Done d = {.lock = PTHREAD_MUTEX_INITIALIZER,
              .cond = PTHREAD_COND_INITIALIZER,
              .rec = rec,
              .log = log};
    uint64_t gen0 = blk_write_gen(rec);
    gsize before = log_size(log);
    assert_int_equal(blk_uring_writev(u, rec, 8192, &q, on_done, &d), 0);
    wait_done(&d);
    assert_int_equal(d.ret, 0);
    assert_int_equal(d.gen, gen0 + 1);
    assert_int_equal(d.log_len, before + ENTRY + LEN);
    const uint8_t *e = (const uint8_t *)d.log_text + before;
    assert_int_equal(le32(e), 1); /* WRITE */
    assert_int_equal(le64(e + 8), 8192);
    assert_int_equal(le64(e + 16), LEN);
    assert_int_equal(le64(e + 24), AUX_RING);
    assert_memory_equal(e + ENTRY, buf, LEN);

    /* a flush after the callback covers it: its aux is past the entry */
    assert_int_equal(blk_flush(rec), 0);
    g_autofree char *text = NULL;
    gsize len = 0;
    assert_true(g_file_get_contents(log, &text, &len, NULL));
    assert_int_equal(len, d.log_len + ENTRY);
    e = (const uint8_t *)text + d.log_len;
    assert_int_equal(le32(e), 5); /* FLUSH */
    assert_true(le64(e + 24) > before);
    assert_true(blk_is_durable(rec, d.gen));

    /* a ring read passes through, unlogged */
    Done r = {.lock = PTHREAD_MUTEX_INITIALIZER,
              .cond = PTHREAD_COND_INITIALIZER,
              .rec = rec,
              .log = log};
    memset(buf, 0, LEN);
    assert_true(blk_uring_can_read(rec, 8192, &q));
    assert_int_equal(blk_uring_readv(u, rec, 8192, &q, on_done, &r), 0);
    wait_done(&r);
    assert_int_equal(r.ret, 0);
    assert_int_equal(r.log_len, len);
    assert_int_equal(buf[0], 0x5a);
    assert_int_equal(buf[LEN - 1], 0x5a);

    blk_uring_free(u);
    blk_close(rec);
    iov_destroy(&q);
    free(buf);
    g_free(d.log_text);
    g_free(r.log_text);
    pthread_mutex_destroy(&d.lock);
    pthread_cond_destroy(&d.cond);
    pthread_mutex_destroy(&r.lock);
    pthread_cond_destroy(&r.cond);
}

/* record.c invariant 6: a FUA write is logged durable by itself (no flush
 * entry), and the child made it durable; a FUA zero write is zero + flush. */
static void test_fua_logged(void **state)
{
    (void)state;
    g_autofree char *log = NULL;
    BlkNode *rec = open_record(BLK_CACHE_WRITEBACK, &log);
    g_autofree char *text = NULL;
    uint8_t buf[LEN];
    gsize before, len = 0;

    assert_non_null(rec);
    memset(buf, 0x33, LEN);
    assert_int_equal(blk_pwrite(rec, 0, buf, LEN, 0), 0);
    before = log_size(log);
    assert_int_equal(blk_pwrite(rec, 65536, buf, LEN, BLK_REQ_FUA), 0);
    assert_true(blk_is_durable(rec, blk_write_gen(rec)));
    assert_true(g_file_get_contents(log, &text, &len, NULL));
    assert_int_equal(len, before + ENTRY + LEN); /* the write alone */
    const uint8_t *e = (const uint8_t *)text + before;
    assert_int_equal(le32(e), 1); /* WRITE */
    assert_int_equal(le64(e + 8), 65536);
    assert_int_equal(le64(e + 24), AUX_FUA);

    before = len;
    assert_int_equal(blk_pwrite_zeroes(rec, 0, LEN, BLK_REQ_FUA), 0);
    g_free(text);
    text = NULL;
    assert_true(g_file_get_contents(log, &text, &len, NULL));
    assert_int_equal(len, before + 2 * ENTRY);
    e = (const uint8_t *)text + before;
    assert_int_equal(le32(e), 2);         /* ZERO */
    assert_int_equal(le32(e + ENTRY), 5); /* FLUSH, covering it */
    assert_true(le64(e + ENTRY + 24) > before);
    blk_close(rec);
}

/* A fault node still takes no ring requests (its steps would run twice). */
static void test_fault_node_refused(void **state)
{
    (void)state;
    g_autofree char *file = tu_fresh("disk");
    g_autofree char *name = g_strdup_printf("blkdebug::%s", file);
    BlkOpenOptions o = {.cache = BLK_CACHE_NONE};
    BlkNode *n;

    assert_int_equal(blk_file_create(file, 1 << 20, BLK_PREALLOC_OFF), 0);
    n = blk_open_protocol(name, &o, BLK_ROLE_PROTOCOL, BLK_OPEN_USER_NAME);
    if (!n) {
        tu_skip("no O_DIRECT here: %s", blk_error_message());
    }
    assert_false(blk_uring_node_ok(n));
    blk_close(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_write_logged),
        cmocka_unit_test(test_fua_logged),
        cmocka_unit_test(test_fault_node_refused),
    };
    return tu_run_group_tests("record-threads", tests);
}
