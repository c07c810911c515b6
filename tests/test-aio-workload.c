/*
 * tests/test-aio-workload.c: random workloads of reads, writes, zero
 * writes, discards and flushes, through libqimg.so and the public headers,
 * as an event loop drives the asynchronous API: one thread submits and
 * runs the callbacks; reads that run beside other requests return the
 * image's bytes (issue 31).
 *
 *  - against a byte model (the harness of test-aio-workload-fixture.c,
 *    whose "workload rule N" the tests cite), 64 requests in flight, read
 *    back after a reopen, `qemu-img check` clean: 64k clusters, 4k
 *    clusters with lazy refcounts, extended L2, and the io_uring engine
 *    with cache=none (fastmap.c, uring.c), on a 32 MiB image as before
 *    and on a 2 MiB one where requests meet in the same clusters all the
 *    time; and with reads beside writes, zero writes and discards of their
 *    own blocks (rule 3);
 *  - the same workload over NBD (with libnbd): `nbdkit qimg` serving the
 *    image, so the requests reach it through the synchronous API from
 *    nbdkit's threads, the path of `qimg nbd`;
 *  - the same workload on a Ceph RBD image (block/rbd.c), when
 *    QIMG_TEST_RBD_POOL names a pool (iotests/tests/110-rbd.sh).
 *
 * The deterministic interleavings are test-aio-interleave.c's.
 *
 * make test runs each workload with half its requests (3000 of 6000, 2000
 * of 4000): every configuration, size, engine and rule as before, on
 * fewer random requests each (the workloads were 25 s of make test's CPU
 * under ASan); QIMG_LONG=1 runs them all.
 *
 * Environment, for stress runs (scripts/aio-stress.sh): QIMG_TEST_SEED
 * (default 42), QIMG_TEST_AIO_MIB and QIMG_TEST_AIO_REQUESTS override the
 * size and request count of every workload; QIMG_TEST_FILTER runs only the
 * tests whose names match one of its comma-separated glob patterns and
 * none of its "!pattern"s.
 */
#include "test-aio-workload-fixture.h"

static guint64 env_u64(const char *name, guint64 dflt)
{
    const char *v = g_getenv(name);
    return v && *v ? g_ascii_strtoull(v, NULL, 10) : dflt;
}

/* A workload's request count: nreq with QIMG_LONG=1, half in make test;
 * QIMG_TEST_AIO_REQUESTS overrides both. */
static int requests(int nreq)
{
    return (int)env_u64("QIMG_TEST_AIO_REQUESTS",
                        (guint64)(tu_long_run() ? nreq : nreq / 2));
}

typedef struct Config {
    const char *opts; /* qemu-img create -o */
    uint64_t cs;
    QimgCacheMode cache;
    QimgAioEngine engine;
} Config;

static const Config configs[] = {
    {NULL, 65536, QIMG_CACHE_WRITEBACK, QIMG_AIO_ENGINE_THREADS},
    {"cluster_size=4096,lazy_refcounts=on", 4096, QIMG_CACHE_WRITEBACK,
     QIMG_AIO_ENGINE_THREADS},
    {"extended_l2=on,cluster_size=131072", 131072, QIMG_CACHE_WRITEBACK,
     QIMG_AIO_ENGINE_THREADS},
    {NULL, 65536, QIMG_CACHE_NONE, QIMG_AIO_ENGINE_IO_URING},
    {"extended_l2=on", 65536, QIMG_CACHE_NONE, QIMG_AIO_ENGINE_IO_URING},
};

/* The random requests, 64 in flight; how many were submitted. */
static int run_random(Work *w, int total)
{
    g_autoptr(GRand) rnd = g_rand_new_with_seed(w->seed);
    int submitted = 0;

    while (submitted < total) {
        while (w->in_flight < 64 && submitted < total) {
            submitted += submit_random(w, rnd);
        }
        work_wait(w);
    }
    while (w->in_flight > 0) {
        work_wait(w);
    }
    assert_int_equal(w->done, submitted);
    if (w->failures) {
        fail_msg("seed %u: %d failures, first: %s", w->seed, w->failures, w->why);
    }
    return submitted;
}

/* What the image holds after the workload, read synchronously after a
 * reopen, and qemu-img check. */
static void check_image(Work *w, const char *p, uint64_t size)
{
    g_autoptr(GError) err = NULL;
    QimgImage *img = open_image(p, QIMG_CACHE_WRITEBACK);
    g_autofree uint8_t *all = g_malloc(size);

    assert_true(qimg_image_pread(img, 0, all, size, &err));
    assert_memory_equal(all, w->model, size);
    assert_true(qimg_image_close(img, &err));
    tu_run("qemu-img check -q '%s'", p);
}

static void workload(const Config *c, uint64_t mib, int nreq, bool overlap)
{
    const uint64_t size = env_u64("QIMG_TEST_AIO_MIB", mib) * MiB;
    const int total = requests(nreq);
    g_autofree char *p = new_qcow2("aio.qcow2", size, c->opts);
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    int submitted;
    Work w;

    work_init(&w, size, c->cs, (guint32)env_u64("QIMG_TEST_SEED", 42));
    w.overlap = overlap;
    w.img = open_image(p, c->cache);
    ao.threads = 8;
    ao.engine = c->engine;
    assert_true(qimg_image_aio_setup(w.img, &ao, &err));
    submitted = run_random(&w, total);
    /* where the requests went (aio.c invariant 7) */
    assert_true(qimg_image_aio_get_stats(w.img, &st, &err));
    assert_int_equal(st.submitted, (uint64_t)submitted);
    assert_int_equal(st.completed, (uint64_t)submitted);
    if (c->engine == QIMG_AIO_ENGINE_IO_URING && !c->opts && size >= 32 * MiB) {
        /* rewrites and reads of clusters written before take the ring
         * (seen: 1246 reads and 1304 writes of 6000 requests).  With
         * extended L2 the fast map knows only clusters whose every
         * subcluster is allocated, which these small writes rarely make. */
        assert_true(st.ring_reads > (uint64_t)total / 20 &&
                    st.ring_writes > (uint64_t)total / 20);
        assert_true(st.ring_reads + st.ring_writes < (uint64_t)submitted);
    } else if (c->engine != QIMG_AIO_ENGINE_IO_URING) {
        assert_int_equal(st.ring_reads + st.ring_writes + st.ring_retries, 0);
    }
    assert_true(qimg_image_close(w.img, &err));
    check_image(&w, p, size);
    work_clear(&w);
}

/* The workload over NBD: nbdkit with the qimg plugin (nbd/qimg-plugin.c,
 * what `qimg nbd` runs) serves the image on a socket pair; its threads
 * call the synchronous API.  discard=unmap, so trims discard. */
static void workload_nbd(const Config *c, uint64_t mib, int nreq, bool overlap)
{
#ifdef QIMG_HAVE_LIBNBD
    const char *plugin = g_getenv("QIMG_NBD_PLUGIN");
    const uint64_t size = env_u64("QIMG_TEST_AIO_MIB", mib) * MiB;
    const int total = requests(nreq);
    g_autofree char *p = new_qcow2("nbd.qcow2", size, c->opts);
    g_autofree char *file = g_strdup_printf("file=%s", p);
    const char *cache = c->cache == QIMG_CACHE_NONE ? "cache=none" : "cache=writeback";
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    Work w;

#ifdef QIMG_NBD_PLUGIN_PATH
    if (!plugin) {
        plugin = QIMG_NBD_PLUGIN_PATH;
    }
#endif
#ifdef QIMG_NBD_PRELOAD
    /* A sanitizer build's plugin: nbdkit gets the runtime preloaded.  Its
     * reports stop nbdkit, which fails the test; nbdkit's own leaks at
     * exit are not ours to report. */
    g_ptr_array_add(argv, g_strdup("env"));
    g_ptr_array_add(argv, g_strdup("LD_PRELOAD=" QIMG_NBD_PRELOAD));
    g_ptr_array_add(argv, g_strdup("ASAN_OPTIONS=detect_leaks=0"));
    g_ptr_array_add(argv, g_strdup("TSAN_OPTIONS=halt_on_error=1"));
#endif
    g_ptr_array_add(argv, g_strdup("nbdkit"));
    g_ptr_array_add(argv, g_strdup("-s"));
    g_ptr_array_add(argv, g_strdup("--exit-with-parent"));
    g_ptr_array_add(argv, g_strdup(plugin));
    g_ptr_array_add(argv, g_strdup(file));
    g_ptr_array_add(argv, g_strdup(cache));
    g_ptr_array_add(argv, g_strdup("discard=unmap"));
    g_ptr_array_add(argv, NULL);

    if (!plugin || !g_file_test(plugin, G_FILE_TEST_EXISTS)) {
        if (tu_in_ci()) {
            fail_msg("the nbdkit plugin is not built (QIMG_NBD_PLUGIN=%s)", plugin);
        }
        tu_skip("the nbdkit plugin is not built (QIMG_NBD_PLUGIN)");
    }
    tu_require_tool("nbdkit");
    work_init(&w, size, c->cs, (guint32)env_u64("QIMG_TEST_SEED", 42));
    w.overlap = overlap;
    w.nbd = nbd_create();
    assert_non_null(w.nbd);
    if (nbd_connect_command(w.nbd, (char **)argv->pdata) < 0) {
        fail_msg("nbdkit %s: %s", plugin, nbd_get_error());
    }
    run_random(&w, total);
    assert_int_equal(nbd_shutdown(w.nbd, 0), 0);
    nbd_close(w.nbd); /* waits for nbdkit, which flushed and closed */
    check_image(&w, p, size);
    work_clear(&w);
#else
    (void)c, (void)mib, (void)nreq, (void)overlap;
    if (tu_in_ci()) {
        fail_msg("built without libnbd");
    }
    tu_skip("built without libnbd");
#endif
}

static void test_workload_64k(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[0], 32, 6000, false);
}

static void test_workload_4k_lazy(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[1], 32, 6000, false);
}

static void test_workload_extl2(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[2], 32, 6000, false);
}

/* The io_uring engine (aio.c invariant 7): O_DIRECT, reads of clusters the
 * fast map knows go to the ring, the rest to the pool. */
static void test_workload_io_uring(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload(&configs[3], 32, 6000, false);
    workload(&configs[4], 32, 6000, false);
}

/* Every configuration on 2 MiB (32 clusters of 64 KiB): 64 requests in
 * flight meet in the same clusters all the time.  With rule 1 broken as
 * issue 31 found it, each of these fails within its first few thousand
 * requests. */
static void test_workload_contended(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
        workload(&configs[i], 2, 6000, false);
    }
}

/* Rule 3: reads beside writes, zero writes and discards of their own
 * blocks, every configuration on 2 MiB, and over NBD: each byte a read
 * returns was its block's at some moment of the read (rule 2).  This is
 * the run that sees a read beside a discard, or an unmapping zero write,
 * of its cluster while the host cluster is freed and reused. */
static void test_workload_overlap(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    for (size_t i = 0; i < G_N_ELEMENTS(configs); i++) {
        workload(&configs[i], 2, 6000, true);
    }
}

/* Rule 3 over NBD: nbdkit's threads overlap the same way. */
static void test_workload_overlap_nbd(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload_nbd(&configs[0], 2, 4000, true);
    workload_nbd(&configs[1], 2, 4000, true);
}

/* Through `nbdkit qimg`: the synchronous API from nbdkit's threads, with
 * the page cache and with O_DIRECT, on both sizes. */
static void test_workload_nbd(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    workload_nbd(&configs[0], 2, 4000, false);
    workload_nbd(&configs[1], 2, 4000, false);
    workload_nbd(&configs[4], 2, 4000, false);
    workload_nbd(&configs[0], 32, 6000, false);
}

/* The workload on a Ceph RBD image, raw (block/rbd.c: the pool's 64
 * threads each keep a librbd request in flight, rbd.c invariant 3): only
 * when QIMG_TEST_RBD_POOL names a pool of the cluster CEPH_CONF finds
 * (iotests/tests/110-rbd.sh, which runs it under TSan too).  Objects of
 * 64 KiB, the workload's cluster: discards are of whole objects, which
 * librbd deletes (a partial one it may skip). */
static void workload_rbd(uint64_t mib, int nreq, bool overlap)
{
    const uint64_t size = env_u64("QIMG_TEST_AIO_MIB", mib) * MiB;
    const int total = (int)env_u64("QIMG_TEST_AIO_REQUESTS", (guint64)nreq);
    static unsigned seq;
    g_autofree char *name = g_strdup_printf(
        "rbd:%s/aio-%d-%u", g_getenv("QIMG_TEST_RBD_POOL"), (int)getpid(), seq++);
    g_autoptr(GHashTable) copts = g_hash_table_new(g_str_hash, g_str_equal);
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *all = g_malloc(size);
    Work w;
    int submitted;

    g_hash_table_insert(copts, "cluster_size", "65536");
    co.format = "raw";
    co.size = size;
    co.options = copts;
    if (!qimg_image_create(name, &co, &err)) {
        fail_msg("create %s: %s", name, err->message);
    }
    work_init(&w, size, 65536, (guint32)env_u64("QIMG_TEST_SEED", 42));
    w.overlap = overlap;
    oo.format = "raw";
    w.img = qimg_image_open(name, &oo, &err);
    if (!w.img) {
        fail_msg("open %s: %s", name, err->message);
    }
    ao.engine = QIMG_AIO_ENGINE_THREADS;
    assert_true(qimg_image_aio_setup(w.img, &ao, &err));
    submitted = run_random(&w, total);
    assert_true(qimg_image_aio_get_stats(w.img, &st, &err));
    assert_int_equal(st.completed, (uint64_t)submitted);
    assert_true(qimg_image_close(w.img, &err));
    w.img = qimg_image_open(name, &oo, &err);
    assert_non_null(w.img);
    assert_true(qimg_image_pread(w.img, 0, all, size, &err));
    assert_memory_equal(all, w.model, size);
    assert_true(qimg_image_close(w.img, &err));
    work_clear(&w);
}

static void test_workload_rbd(void **state)
{
    workload_rbd(8, 3000, false);
    workload_rbd(2, 3000, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workload_contended),
        cmocka_unit_test(test_workload_overlap),
        cmocka_unit_test(test_workload_overlap_nbd),
        cmocka_unit_test(test_workload_64k),
        cmocka_unit_test(test_workload_4k_lazy),
        cmocka_unit_test(test_workload_extl2),
        cmocka_unit_test(test_workload_io_uring),
        cmocka_unit_test(test_workload_nbd),
    };

    if (g_getenv("QIMG_TEST_RBD_POOL")) { /* the cluster's run, only */
        const struct CMUnitTest rbd[] = {cmocka_unit_test(test_workload_rbd)};
        return tu_run_group_tests_("test-aio-workload", "tests", rbd, 1);
    }

    return workload_run_filtered("test-aio-workload", tests, G_N_ELEMENTS(tests));
}
