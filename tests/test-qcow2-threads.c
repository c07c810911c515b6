/*
 * tests/test-qcow2-threads.c: one qcow2 handle used from 8 threads at once
 * (DESIGN.md "Concurrency"; write.c invariants 4 and 6).
 *
 * The image has two regions:
 *  - shared: every cluster is cut into 8 slices and thread t owns slice t
 *    of each, so all threads write, zero and read the same clusters at
 *    different bytes (same-cluster allocation races: the second writer must
 *    see the first's mapping, never allocate a cluster of its own);
 *  - private: each thread owns a run of whole clusters where it also zeroes
 *    with MAY_UNMAP and discards (clusters freed and reused while the others
 *    allocate).
 * Every thread checks what it reads of its own bytes, the whole image is
 * compared with the model afterwards, and `qemu-img check` must be clean.
 * The same-cluster race these random runs meet only now and then (a second
 * writer into a cluster being allocated must wait for the first) is also
 * forced every time, with a breakpoint (test_same_cluster_second_writer_waits).
 * Configurations: 4 KiB clusters; extended L2 with a raw backing file and a
 * tiny metadata cache (evictions under load); 512-byte clusters with 64-bit
 * refcounts and lazy refcounts (refcount blocks and table growth under
 * load).  Built under ThreadSanitizer by `make test` (the name says thread).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "api/api.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 8
#define MB(x) ((uint64_t)(x) << 20)

typedef struct Shared {
    BlkNode *img;
    uint8_t *model; /* each byte is written by its owner thread only */
    uint64_t cs;
    uint64_t shared_end;   /* [0, shared_end): sliced clusters */
    uint64_t private_size; /* per thread, after shared_end */
    int ops;
} Shared;

typedef struct Worker {
    Shared *sh;
    int id;
    int failures;
    char *why;
    uint8_t *rbuf; /* MB(1): what read_check() reads */
} Worker;

static void fail_worker(Worker *w, const char *what, uint64_t off, uint64_t len, int ret)
{
    if (w->failures++ == 0) {
        w->why = g_strdup_printf("thread %d: %s at %" PRIu64 "+%" PRIu64 ": %d (%s)",
                                 w->id, what, off, len, ret, blk_error_message());
    }
}

/* The first byte of [0, len) where a and b differ (they do). */
static uint64_t first_difference(const uint8_t *a, const uint8_t *b, uint64_t len)
{
    uint64_t i = 0;
    while (i < len - 1 && a[i] == b[i]) {
        i++;
    }
    return i;
}

/* Read [off, off + len) into the thread's read buffer (len <= MB(1)) and
 * check the bytes this thread owns: in a sliced read, its slice of each
 * cluster; else all of them (compared a run at a time: a byte-by-byte
 * loop, and a buffer allocated per read, were most of this test's time
 * under the sanitizers). */
static void read_check(Worker *w, uint64_t off, uint64_t len, bool sliced)
{
    Shared *sh = w->sh;
    uint64_t slice = sh->cs / NTHREADS;
    uint8_t *buf = w->rbuf;
    int ret;

    uint64_t own = sh->shared_end + (uint64_t)w->id * sh->private_size;

    /* A sliced read stays in the shared region, any other in the thread's
     * private clusters: past them the bytes are another thread's, which it
     * may be writing at this moment (so the model says nothing of them). */
    if (len > MB(1) || (sliced ? off + len > sh->shared_end
                               : off < own || off + len > own + sh->private_size)) {
        fail_worker(w, "read outside the bytes the thread checks", off, len, -1);
        return;
    }
    ret = blk_pread(sh->img, off, buf, len);
    if (ret < 0) {
        fail_worker(w, "read", off, len, ret);
        return;
    }
    for (uint64_t at = off, end; at < off + len; at = end) {
        end = off + len;
        if (sliced) {
            end = MIN(end, (at / slice + 1) * slice);
            if ((at / slice) % NTHREADS != (uint64_t)w->id) {
                continue;
            }
        }
        if (memcmp(buf + (at - off), sh->model + at, end - at) != 0) {
            uint64_t i = first_difference(buf + (at - off), sh->model + at, end - at);
            fail_worker(w, "data mismatch", at + i, 1, -1);
            return;
        }
    }
}

static gpointer worker_main(gpointer opaque)
{
    Worker *w = opaque;
    Shared *sh = w->sh;
    uint64_t slice = sh->cs / NTHREADS;
    uint64_t nslices = sh->shared_end / sh->cs; /* own slices: one per cluster */
    uint64_t pbase = sh->shared_end + (uint64_t)w->id * sh->private_size;
    g_autoptr(GRand) r = g_rand_new_with_seed(4242 + w->id);
    g_autofree uint8_t *buf = g_malloc(MB(1));
    g_autofree uint8_t *rbuf = g_malloc(MB(1));

    w->rbuf = rbuf;

    for (int i = 0; i < sh->ops && w->failures == 0; i++) {
        unsigned kind = g_rand_int_range(r, 0, 100);
        int ret = 0;

        if (kind < 40) { /* part of one own slice in a shared cluster */
            uint64_t c = g_rand_int_range(r, 0, (gint32)nslices);
            uint64_t a = g_rand_int_range(r, 0, (gint32)slice);
            uint64_t len = g_rand_int_range(r, 1, (gint32)(slice - a) + 1);
            uint64_t off = c * sh->cs + (uint64_t)w->id * slice + a;
            if (g_rand_int_range(r, 0, 5) == 0) {
                ret = blk_pwrite_zeroes(sh->img, off, len, BLK_REQ_MAY_UNMAP);
                memset(sh->model + off, 0, len);
            } else {
                tu_fill_random(r, buf, len);
                ret = blk_pwrite(sh->img, off, buf, len, 0);
                memcpy(sh->model + off, buf, len);
            }
            if (ret < 0) {
                fail_worker(w, "slice write", off, len, ret);
            }
        } else if (kind < 55) { /* read across the others' slices */
            uint64_t c = g_rand_int_range(r, 0, (gint32)nslices);
            uint64_t want = (uint64_t)g_rand_int_range(r, 1, 4) * sh->cs;
            /* one draw: MIN() evaluates its arguments twice */
            read_check(w, c * sh->cs, MIN(sh->shared_end - c * sh->cs, want), true);
        } else if (kind < 97) { /* private clusters */
            uint64_t len = g_rand_int_range(r, 1, (gint32)MIN(MB(1), sh->private_size));
            uint64_t off =
                pbase + g_rand_int_range(r, 0, (gint32)(sh->private_size - len));
            unsigned k = g_rand_int_range(r, 0, 10);
            if (k < 5) {
                tu_fill_random(r, buf, len);
                ret = blk_pwrite(sh->img, off, buf, len, 0);
                memcpy(sh->model + off, buf, len);
            } else if (k < 7) {
                ret = blk_pwrite_zeroes(sh->img, off, len,
                                        g_rand_boolean(r) ? BLK_REQ_MAY_UNMAP : 0);
                memset(sh->model + off, 0, len);
            } else if (k < 8) {
                uint64_t a = ROUND_UP(off, sh->cs), b = ROUND_DOWN(off + len, sh->cs);
                ret = blk_pdiscard(sh->img, off, len);
                if (a < b) {
                    memset(sh->model + a, 0, b - a);
                }
            } else {
                read_check(w, off, len, false);
            }
            if (ret < 0) {
                fail_worker(w, "private op", off, len, ret);
            }
        } else {
            ret = blk_flush(sh->img);
            if (ret < 0) {
                fail_worker(w, "flush", 0, 0, ret);
            }
        }
    }
    return NULL;
}

static void threads_case(const char *opts, bool backing, uint64_t cache_size)
{
    g_autofree char *p = tu_fresh("threads.qcow2");
    g_autofree char *model_path = g_strdup_printf("%s.model", p);
    g_autofree char *base = tu_fresh("threads-base.raw");
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.metadata_cache_size = cache_size, .cache = BLK_CACHE_UNSAFE};
    Shared sh = {.ops = tu_long_run() ? 3000 : 400};
    Worker w[NTHREADS];
    GThread *th[NTHREADS];
    uint64_t size;

    tu_run("qemu-img create -q -f qcow2 -o %s '%s' 16M", opts, p);
    size = MB(16);
    sh.model = g_malloc0(size);
    if (backing) {
        g_autoptr(GRand) r = g_rand_new_with_seed(5);
        tu_fill_random(r, sh.model, MB(12)); /* shorter than the image */
        assert_true(g_file_set_contents(base, (const char *)sh.model, MB(12), NULL));
        tu_run("qemu-img rebase -u -f qcow2 -b '%s' -F raw '%s'", base, p);
    }
    sh.img = api_open_node(p, &o, NULL, &err);
    if (!sh.img) {
        fail_msg("open: %s", err->message);
    }
    sh.cs = ((Qcow2State *)sh.img->opaque)->cluster_size;
    sh.shared_end = MB(8);
    sh.private_size = MB(1);

    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (Worker){.sh = &sh, .id = i};
        th[i] = g_thread_new("qcow2-writer", worker_main, &w[i]);
    }
    for (int i = 0; i < NTHREADS; i++) {
        g_thread_join(th[i]);
    }
    for (int i = 0; i < NTHREADS; i++) {
        if (w[i].failures) {
            fail_msg("%s", w[i].why);
        }
    }
    g_autofree uint8_t *all = g_malloc(size);
    assert_int_equal(blk_pread(sh.img, 0, all, size), 0);
    if (memcmp(all, sh.model, size) != 0) {
        fail_msg("byte %" PRIu64 " differs after the run",
                 first_difference(all, sh.model, size));
    }
    assert_int_equal(blk_flush(sh.img), 0);
    blk_close(sh.img);

    g_autofree char *out = NULL;
    if (tu_run_status(&out, "qemu-img check '%s'", p) != 0) {
        fail_msg("qemu-img check: %s", out);
    }
    assert_true(
        g_file_set_contents(model_path, (const char *)sh.model, (gssize)size, NULL));
    tu_run("qemu-img compare -f qcow2 -F raw '%s' '%s'", p, model_path);
    g_free(sh.model);
}

/* ---- one same-cluster race, forced (write.c invariant 6) ---- */

typedef struct Writer {
    BlkNode *img;
    uint64_t off;
    uint8_t buf[4096];
    int ret;
    int done; /* atomic */
} Writer;

static gpointer writer_main(gpointer opaque)
{
    Writer *wr = opaque;
    wr->ret = blk_pwrite(wr->img, wr->off, wr->buf, sizeof(wr->buf), 0);
    g_atomic_int_set(&wr->done, 1);
    return NULL;
}

static unsigned stopped_as(BlkNode *img, const char *tag)
{
    g_auto(GStrv) s = blk_debug_suspended(img, false);
    unsigned n = 0;
    for (char **p = s; p && *p; p++) {
        n += strcmp(*p, tag) == 0;
    }
    return n;
}

static unsigned range_waiters(Qcow2State *s)
{
    unsigned n = 0;
    qcow2_lock(s);
    for (const Waiter *w = s->inflight_waiters.head; w; w = w->next) {
        n++;
    }
    qcow2_unlock(s);
    return n;
}

/*
 * The race the random runs above meet only now and then, made to happen
 * every time with a breakpoint (blkdebug, block/faulty.c): a write into a
 * new cluster is stopped at its data write, after it registered its range
 * and chose a host cluster, before it linked it; a second write into
 * other bytes of the same cluster must wait for it -- it may not complete,
 * nor allocate a cluster of its own (which one of the two L2 updates would
 * then lose, with the other's data and a leaked cluster).  The waits below
 * are bounds (10 s), not measurements.  After the first goes on, both
 * complete, the image reads as the byte model (qemu-img compare) and
 * qemu-img check finds it clean.
 */
static void test_same_cluster_second_writer_waits(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *p = tu_fresh("same-cluster.qcow2");
    g_autofree char *name = g_strdup_printf("blkdebug::%s", p);
    g_autofree char *raw = tu_fresh("same-cluster.raw");
    g_autofree uint8_t *model = g_malloc0(MB(1));
    g_autofree Writer *wr = g_new0(Writer, 2);
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.cache = BLK_CACHE_UNSAFE};
    GThread *th[2];
    unsigned waiting = 0;
    bool second_done = false;
    BlkNode *img;

    tu_run("qemu-img create -q -f qcow2 -o cluster_size=65536 '%s' 1M", p);
    img = api_open_node(name, &o, NULL, &err);
    if (!img) {
        fail_msg("open: %s", err->message);
    }
    for (int i = 0; i < 2; i++) {
        wr[i].img = img;
        wr[i].off = i * 8192 + 512; /* cluster 0, not a whole cluster */
        memset(wr[i].buf, 0xa1 + i, sizeof(wr[i].buf));
        memcpy(model + wr[i].off, wr[i].buf, sizeof(wr[i].buf));
    }
    assert_int_equal(blk_debug_op(img, BLK_DEBUG_BREAK, "write_aio", "alloc"), 0);
    th[0] = g_thread_new("first-writer", writer_main, &wr[0]);
    for (int i = 0; i < 10000 && stopped_as(img, "alloc") == 0; i++) {
        g_usleep(1000);
    }
    assert_int_equal(stopped_as(img, "alloc"), 1);
    th[1] = g_thread_new("second-writer", writer_main, &wr[1]);
    for (int i = 0; i < 10000; i++) {
        waiting = range_waiters(img->opaque);
        second_done = g_atomic_int_get(&wr[1].done);
        if (waiting || second_done) {
            break;
        }
        g_usleep(1000);
    }
    assert_int_equal(blk_debug_op(img, BLK_DEBUG_RESUME, NULL, "alloc"), 0);
    g_thread_join(th[0]);
    g_thread_join(th[1]);
    if (second_done || waiting != 1) {
        fail_msg("a second write into the cluster a first write is allocating %s "
                 "(write.c invariant 6)",
                 second_done ? "completed while the first was stopped"
                             : "neither waited for it nor completed");
    }
    assert_int_equal(wr[0].ret, 0);
    assert_int_equal(wr[1].ret, 0);
    assert_int_equal(blk_flush(img), 0);
    blk_close(img);

    assert_true(g_file_set_contents(raw, (const char *)model, MB(1), NULL));
    tu_run("qemu-img check -q '%s' && qemu-img compare -q -f qcow2 -F raw '%s' '%s'", p,
           p, raw);
}

static void test_threads_4k(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    threads_case("cluster_size=4096", false, 0);
}

static void test_threads_extl2_backing_small_cache(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    threads_case("extended_l2=on,cluster_size=16384", true, 6 * 16384);
}

static void test_threads_512_lazy(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    threads_case("cluster_size=512,refcount_bits=64,lazy_refcounts=on", false, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_cluster_second_writer_waits),
        cmocka_unit_test(test_threads_4k),
        cmocka_unit_test(test_threads_extl2_backing_small_cache),
        cmocka_unit_test(test_threads_512_lazy),
    };
    return tu_run_group_tests("qcow2-threads", tests);
}
