/*
 * tests/test-aio-threads.c: one handle driven at once by an asynchronous
 * submitter (an event loop thread, up to 48 requests in flight) and three
 * threads using the synchronous calls, in the same clusters (aio.h rules
 * 1-5; fastmap.c invariants 1-3; write.c invariant 6).
 *
 * Every 4 KiB block belongs to one party (block % 4): the submitter owns
 * blocks 0 mod 4 and never has two requests on one block in flight; thread
 * t owns blocks t mod 4.  So every cluster is written, zeroed, rewritten in
 * place (the lock-free path) and read by all four at once, allocation
 * races included, and each party checks every read of its own blocks.
 * Flushes come from everyone.  At the end the whole image equals the model
 * and `qemu-img check` is clean.
 * Configurations (configs[]): those of the random-write test, iotests 012
 * (cluster sizes 512 to 2M, refcount widths 1 to 64, compat 0.10,
 * extended L2, raw and qcow2 backing files, lazy refcounts), some with a
 * metadata cache of a few tables, some with the io_uring engine and
 * cache=none, so ring reads and in-place ring writes race with rewrites,
 * zeroing and the file node's read-modify-write of unaligned writes.
 * Built under ThreadSanitizer by `make test` (the name says thread).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qimg/aio.h"
#include "qimg/qimg.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define MiB (UINT64_C(1) << 20)
#define BLOCK 4096u
#define MAX_SIZE (16 * MiB)
#define PARTIES 4

/* QIMG_LONG=1: 16 MiB, 700 operations per synchronous thread and 2000
 * requests from the submitter; make test halves all three (main()), so
 * each block sees as many operations and the parties meet in a cluster as
 * often, for half the CPU (the 17 configurations were 16 s of make test's
 * CPU under ASan, and run under TSan too). */
static uint64_t image_size = MAX_SIZE;
static int sync_ops = 700;
static int async_ops = 2000;
#define NBLOCKS (image_size / BLOCK)

typedef struct Shared {
    QimgImage *img;
    uint8_t *model; /* each block written by its owner only */
} Shared;

typedef struct Party {
    Shared *sh;
    int id;
    int failures;
    char *why;
    /* the submitter's */
    bool busy[MAX_SIZE / BLOCK / PARTIES];
    int in_flight;
} Party;

static void fail_party(Party *p, const char *what, uint64_t block, const char *msg)
{
    if (p->failures++ == 0) {
        p->why = g_strdup_printf("party %d: %s at block %" PRIu64 ": %s", p->id, what,
                                 block, msg ? msg : "");
    }
}

static uint64_t own_block(Party *p, GRand *r, uint64_t *slot)
{
    *slot = (uint64_t)g_rand_int_range(r, 0, NBLOCKS / PARTIES);
    return *slot * PARTIES + (uint64_t)p->id;
}

/* ---- the synchronous threads ---- */

static gpointer sync_main(gpointer opaque)
{
    Party *p = opaque;
    Shared *sh = p->sh;
    g_autoptr(GRand) r = g_rand_new_with_seed(100 + p->id);
    uint8_t buf[BLOCK];

    for (int i = 0; i < sync_ops && !p->failures; i++) {
        GError *err = NULL;
        uint64_t slot, b = own_block(p, r, &slot), off = b * BLOCK;
        int op = g_rand_int_range(r, 0, 100);
        gboolean ok = TRUE;

        if (op < 35) {
            tu_fill_random(r, buf, BLOCK);
            memcpy(sh->model + off, buf, BLOCK);
            ok = qimg_image_pwrite(sh->img, off, buf, BLOCK, &err);
        } else if (op < 45) {
            /* unaligned inside the block: with cache=none the file node's
             * read-modify-write, under its lock held exclusively (file.c
             * invariant 6) while ring writes hold it shared */
            uint64_t in = (uint64_t)g_rand_int_range(r, 1, BLOCK - 1);
            size_t len = (size_t)g_rand_int_range(r, 1, (gint32)(BLOCK - in));
            tu_fill_random(r, buf, len);
            memcpy(sh->model + off + in, buf, len);
            ok = qimg_image_pwrite(sh->img, off + in, buf, len, &err);
        } else if (op < 85) {
            ok = qimg_image_pread(sh->img, off, buf, BLOCK, &err);
            if (ok && memcmp(buf, sh->model + off, BLOCK) != 0) {
                fail_party(p, "read differs", b, NULL);
            }
        } else if (op < 97) {
            memset(sh->model + off, 0, BLOCK);
            ok = qimg_image_pwrite_zeroes(sh->img, off, BLOCK, QIMG_ZERO_MAY_UNMAP, &err);
        } else {
            ok = qimg_image_flush(sh->img, &err);
        }
        if (!ok) {
            fail_party(p, "request failed", b, err->message);
            g_clear_error(&err);
        }
    }
    return NULL;
}

/* ---- the asynchronous submitter ---- */

typedef struct Req {
    _Alignas(4096) uint8_t buf[BLOCK]; /* O_DIRECT-aligned: ring reads */
    Party *p;
    int op;
    uint64_t slot, block;
    struct iovec iov;
} Req;

static Req *req_new(void)
{
    void *q = NULL;
    assert_int_equal(posix_memalign(&q, 4096, sizeof(Req)), 0);
    memset(q, 0, sizeof(Req));
    return q;
}

static void req_done(void *opaque, int ret, const GError *err)
{
    Req *q = opaque;
    Party *p = q->p;

    if (ret < 0) {
        fail_party(p, "async request failed", q->block, err->message);
    } else if (q->op == 1 &&
               memcmp(q->buf, p->sh->model + q->block * BLOCK, BLOCK) != 0) {
        fail_party(p, "async read differs", q->block, NULL);
    }
    if (q->op != 3) {
        p->busy[q->slot] = false;
    }
    p->in_flight--;
    free(q);
}

static void submit_one(Party *p, GRand *r)
{
    Shared *sh = p->sh;
    Req *q = req_new();
    GError *err = NULL;
    gboolean ok;

    q->p = p;
    q->op = g_rand_int_range(r, 0, 100);
    q->op = q->op < 45 ? 0 : q->op < 85 ? 1 : q->op < 97 ? 2 : 3;
    q->block = own_block(p, r, &q->slot);
    if (q->op != 3) {
        if (p->busy[q->slot]) {
            free(q);
            return;
        }
        p->busy[q->slot] = true;
    }
    uint64_t off = q->block * BLOCK;
    q->iov = (struct iovec){.iov_base = q->buf, .iov_len = BLOCK};
    switch (q->op) {
    case 0:
        tu_fill_random(r, q->buf, BLOCK);
        memcpy(sh->model + off, q->buf, BLOCK);
        ok = qimg_image_aio_pwritev(sh->img, off, &q->iov, 1, 0, req_done, q, &err);
        break;
    case 1:
        ok = qimg_image_aio_preadv(sh->img, off, &q->iov, 1, 0, req_done, q, &err);
        break;
    case 2:
        memset(sh->model + off, 0, BLOCK);
        ok = qimg_image_aio_pwrite_zeroes(sh->img, off, BLOCK, QIMG_AIO_MAY_UNMAP,
                                          req_done, q, &err);
        break;
    default:
        ok = qimg_image_aio_flush(sh->img, 0, req_done, q, &err);
        break;
    }
    if (!ok) {
        fail_party(p, "submit failed", q->block, err->message);
        g_clear_error(&err);
        free(q);
        return;
    }
    p->in_flight++;
}

static gpointer async_main(gpointer opaque)
{
    Party *p = opaque;
    g_autoptr(GRand) r = g_rand_new_with_seed(7);

    for (int sent = 0; sent < async_ops && !p->failures;) {
        while (p->in_flight < 48 && sent < async_ops) {
            submit_one(p, r);
            sent++;
        }
        qimg_image_aio_wait(p->sh->img);
    }
    while (qimg_image_aio_in_flight(p->sh->img) > 0) {
        qimg_image_aio_wait(p->sh->img);
    }
    return NULL;
}

typedef enum Backing { NO_BACKING, RAW_BACKING, QCOW2_BACKING } Backing;

static void torture(const char *opts, Backing backing, uint64_t cache_size,
                    QimgAioEngine engine, bool expect_ring)
{
    g_autofree char *path = tu_fresh("aiothreads.qcow2");
    g_autofree char *base = tu_fresh("aiothreads-base.raw");
    g_autofree char *qbase = tu_fresh("aiothreads-base.qcow2");
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    Shared sh = {.model = g_malloc0(image_size)};
    Party parties[PARTIES];
    GThread *threads[PARTIES];

    if (backing != NO_BACKING) {
        g_autoptr(GRand) r = g_rand_new_with_seed(3);
        tu_fill_random(r, sh.model,
                       image_size / 2); /* shorter than the image: zeros after */
        assert_true(
            g_file_set_contents(base, (const char *)sh.model, image_size / 2, NULL));
        if (backing == QCOW2_BACKING) {
            tu_run("qemu-img convert -q -O qcow2 '%s' '%s'", base, qbase);
        }
        tu_run("qemu-img create -q -f qcow2 -o %s -b '%s' -F %s '%s' %" PRIu64, opts,
               backing == QCOW2_BACKING ? qbase : base,
               backing == QCOW2_BACKING ? "qcow2" : "raw", path, image_size);
    } else {
        tu_run("qemu-img create -q -f qcow2 -o %s '%s' %" PRIu64, opts, path, image_size);
    }
    oo.metadata_cache_size = cache_size;
    if (engine == QIMG_AIO_ENGINE_IO_URING) {
        oo.cache = QIMG_CACHE_NONE; /* the ring serves O_DIRECT reads */
    }
    sh.img = qimg_image_open(path, &oo, &err);
    assert_non_null(sh.img);
    ao.threads = 16;
    ao.engine = engine;
    assert_true(qimg_image_aio_setup(sh.img, &ao, &err));

    memset(parties, 0, sizeof(parties));
    for (int i = 0; i < PARTIES; i++) {
        parties[i].sh = &sh;
        parties[i].id = i;
        threads[i] = g_thread_new("party", i == 0 ? async_main : sync_main, &parties[i]);
    }
    for (int i = 0; i < PARTIES; i++) {
        g_thread_join(threads[i]);
    }
    for (int i = 0; i < PARTIES; i++) {
        if (parties[i].failures) {
            fail_msg("%d failures, first: %s", parties[i].failures, parties[i].why);
        }
    }
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    assert_true(qimg_image_aio_get_stats(sh.img, &st, &err));
    assert_int_equal(st.submitted, st.completed);
    if (expect_ring) {
        /* the race this configuration is for: ring reads and writes */
        assert_true(st.ring_reads > 0 && st.ring_writes > 0);
        /* and allocating writes planned for the ring (aio.c invariant 13)
         * race with the synchronous writers' allocations */
        assert_true(st.ring_allocs > 0);
    }
    assert_true(qimg_image_close(sh.img, &err));

    sh.img = qimg_image_open(path, NULL, &err);
    assert_non_null(sh.img);
    g_autofree uint8_t *all = g_malloc(image_size);
    assert_true(qimg_image_pread(sh.img, 0, all, image_size, &err));
    assert_memory_equal(all, sh.model, image_size);
    assert_true(qimg_image_close(sh.img, &err));
    tu_run("qemu-img check -q '%s'", path);
    g_free(sh.model);
}

/* The configurations of the random-write test (iotests 012), each with the
 * pool, some with the io_uring engine (cache=none: ring reads and writes
 * race with everything else), some with a metadata cache of a few tables
 * (eviction all the time). */
typedef struct Config {
    const char *opts;
    Backing backing;
    uint64_t cache_size; /* 0: the default */
    QimgAioEngine engine;
    /* io_uring: the fast map serves requests inside one cluster, and with
     * extended L2 only clusters whose every subcluster is allocated, so
     * with 512-byte clusters or extended L2 every 4 KiB request here takes
     * the pool (which is what those configurations check) */
    bool ring;
} Config;

#define T QIMG_AIO_ENGINE_THREADS
#define U QIMG_AIO_ENGINE_IO_URING
static const Config configs[] = {
    {"cluster_size=65536", NO_BACKING, 0, T, false},
    /* aio.c invariant 7: ring reads and writes of clusters others rewrite */
    {"cluster_size=65536", NO_BACKING, 0, U, true},
    {"cluster_size=512", NO_BACKING, 4096, T, false},
    {"cluster_size=4096", NO_BACKING, 0, U, true},
    {"cluster_size=2M", NO_BACKING, 0, T, false},
    {"cluster_size=4096,refcount_bits=1", NO_BACKING, 16384, T, false},
    {"compat=0.10,cluster_size=512", NO_BACKING, 0, T, false},
    {"extended_l2=on", RAW_BACKING, 0, T, false},
    {"extended_l2=on", NO_BACKING, 0, U, false},
    {"extended_l2=on,cluster_size=2M", NO_BACKING, 0, T, false},
    {"extended_l2=on,cluster_size=32k", QCOW2_BACKING, 0, T, false},
    {"cluster_size=512,refcount_bits=64", QCOW2_BACKING, 4096, U, false},
    {"cluster_size=1k,refcount_bits=2", NO_BACKING, 0, T, false},
    {"cluster_size=4096,lazy_refcounts=on", NO_BACKING, 16384, T, false},
    {"lazy_refcounts=on", NO_BACKING, 0, U, true},
    {"extended_l2=on,cluster_size=16k,refcount_bits=1", NO_BACKING, 65536, T, false},
    {"cluster_size=2M", QCOW2_BACKING, 0, U, true},
};
#undef T
#undef U

static void test_config(void **state)
{
    const Config *c = *state;

    TU_REQUIRE_QEMU_IMG();
    print_message("config: %s, %s backing, cache %" PRIu64 ", %s\n", c->opts,
                  c->backing == NO_BACKING    ? "no"
                  : c->backing == RAW_BACKING ? "raw"
                                              : "qcow2",
                  c->cache_size,
                  c->engine == QIMG_AIO_ENGINE_IO_URING ? "io_uring" : "threads");
    torture(c->opts, c->backing, c->cache_size, c->engine, c->ring);
}

int main(void)
{
    struct CMUnitTest tests[G_N_ELEMENTS(configs)];

    if (!tu_long_run()) {
        image_size = MAX_SIZE / 2;
        sync_ops = 350;
        async_ops = 1000;
    }

    for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
        tests[i] = (struct CMUnitTest){.name = g_strdup_printf("config_%zu", i),
                                       .test_func = test_config,
                                       .initial_state = (void *)&configs[i]};
    }
    int rc = tu_run_group_tests("test-aio-threads", tests);
    for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
        g_free((char *)tests[i].name);
    }
    return rc;
}
