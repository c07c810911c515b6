/*
 * tests/test-qcow2-write-scribble.c: the qcow2 write path against qemu-img
 * 7.2, a differential "scribble" test (OpenBSD vmd's vioscribble):
 * thousands of random writes, zero writes, discards, compressed writes and
 * flushes at unaligned offsets go through the driver and into a plain byte
 * model; after each batch every byte is read back and compared, the image
 * is closed, `qemu-img check` must find no corruption and no leak, and
 * `qemu-img compare` must find it identical to the model written as raw.
 * The matrix covers cluster sizes 512..2M, refcount widths 1/16/64, v2 and
 * v3, extended L2, lazy refcounts, zstd, and qcow2 / raw backing files.
 * QIMG_LONG=1 runs many more operations and seeds, and make test runs half
 * its operations on images of 2 MiB clusters: a compressed write there
 * deflates 2 MiB twice (compresses() and the driver), and their 1200
 * operations were three quarters of this program's 27 s of CPU under ASan;
 * 300 a batch still go through every kind of operation (and catch a byte
 * flipped in a compressed 2 MiB cluster; 200 did not).  For debugging,
 * QIMG_SCRIBBLE_ONLY=<create options> runs one configuration and
 * QIMG_SCRIBBLE_DEBUG=1 compares the whole image after every operation.
 * Everything is skipped without qemu-img / qemu-io.
 *
 * The single features are test-qcow2-write-features.c's; the helpers both
 * use are test-qcow2-write-fixture.h's.
 */
#include "test-qcow2-write-fixture.h"

/* Whether the L2 entry of guest cluster 'co' holds a host offset (or is
 * compressed): a compressed write over it must fail (compress.c inv. 8). */
static bool cluster_has_host_offset(BlkNode *img, uint64_t co)
{
    Qcow2State *s = img->opaque;
    uint64_t l2_index, e = 0;
    uint8_t *l2;

    qcow2_lock(s);
    assert_int_equal(qcow2_get_l2_locked(s, co, &l2, &l2_index), 0);
    if (l2) {
        e = qcow2_l2_get(s, l2, l2_index);
        qcow2_cache_put_locked(s->l2_cache, (void **)&l2);
    }
    qcow2_unlock(s);
    return (e & QCOW2_OFLAG_COMPRESSED) || (e & QCOW2_L2E_OFFSET_MASK);
}

/* Whether a whole cluster of 'buf' compresses below one cluster (else the
 * driver writes it as a normal cluster).  The two cluster buffers are kept
 * (a fresh 2 MiB pair per call faulted in every page under ASan). */
static bool compresses(BlkNode *img, const uint8_t *buf, uint64_t len)
{
    static uint8_t *in, *out;
    static uint64_t size;
    Qcow2State *s = img->opaque;

    if (size < s->cluster_size) {
        g_free(in);
        g_free(out);
        size = s->cluster_size;
        in = g_malloc(size);
        out = g_malloc(size);
    }
    memcpy(in, buf, len);
    memset(in + len, 0, s->cluster_size - len);
    return qcow2_compress(s->compression_type, out, s->cluster_size - 1, in,
                          s->cluster_size) >= 0;
}

/* ---- the scribble test ---- */

typedef enum { BK_NONE, BK_QCOW2, BK_RAW } Backing;

typedef struct Config {
    const char *opts; /* qemu-img create -o */
    Backing backing;
    uint64_t size;
} Config;

typedef struct Model {
    uint8_t *bytes;
    uint64_t size;
    uint64_t cluster_size;
    bool v2_backing; /* discard does nothing (iotest 290) */
} Model;

static void model_discard(Model *m, uint64_t off, uint64_t len)
{
    uint64_t a = ROUND_UP(off, m->cluster_size),
             b = ROUND_DOWN(off + len, m->cluster_size);
    if (off + len == m->size) {
        b = m->size;
    }
    if (a < b && !m->v2_backing) {
        memset(m->bytes + a, 0, b - a);
    }
}

/* Every byte of the image equals the model: read in 4 MiB chunks (a
 * buffer of the image's size, up to 64 MiB, cost a page fault per 4 KiB
 * under ASan, every batch). */
static void compare_all(BlkNode *img, const Model *m)
{
    const uint64_t chunk = 4 << 20; /* more than any op, many clusters */
    g_autofree uint8_t *buf = g_malloc(chunk);

    for (uint64_t pos = 0; pos < m->size; pos += chunk) {
        uint64_t n = MIN(chunk, m->size - pos);
        assert_int_equal(blk_pread(img, pos, buf, n), 0);
        if (memcmp(buf, m->bytes + pos, n) != 0) {
            for (uint64_t i = 0; i < n; i++) {
                if (buf[i] != m->bytes[pos + i]) {
                    fail_msg("image differs from the model at byte %" PRIu64, pos + i);
                }
            }
        }
    }
}

static char *make_backing(Backing b, uint64_t size, GRand *r, uint8_t *model)
{
    char *path;
    uint64_t bsize = size / 4 * 3; /* shorter than the image: reads past it are 0 */
    g_autofree uint8_t *buf = g_malloc(bsize);

    tu_fill_random(r, buf, bsize);
    memcpy(model, buf, bsize);
    if (b == BK_RAW) {
        path = tu_fresh("base.raw");
        write_file(path, buf, bsize);
        return path;
    }
    g_autofree char *raw = tu_fresh("base-src.raw");
    path = tu_fresh("base.qcow2");
    write_file(raw, buf, bsize);
    tu_run("qemu-img convert -f raw -O qcow2 -o cluster_size=4096 '%s' '%s'", raw, path);
    /* leave some holes (unallocated, zero) in the backing file */
    tu_run("qemu-io -f qcow2 -c 'write -z 65536 65536' '%s' >/dev/null", path);
    memset(model + 65536, 0, 65536);
    return path;
}

static void scribble(const Config *c, unsigned seed, int batches, int ops)
{
    g_autoptr(GRand) r = g_rand_new_with_seed(seed);
    g_autofree char *path = tu_fresh("scribble.qcow2");
    g_autofree char *model_path = g_strdup_printf("%s.model", path);
    g_autofree char *base = NULL;
    Model m = {.size = c->size, .bytes = g_malloc0(c->size)};
    bool v2 = strstr(c->opts, "compat=0.10") != NULL;
    size_t maxlen = 3 << 20;
    g_autofree uint8_t *buf = g_malloc(maxlen);
    g_autofree uint8_t *rd = g_malloc(maxlen); /* a read op's, kept (ASan) */

    /* "@" in the options stands for a fresh external data file name */
    g_autofree char *data_file = tu_fresh("scribble-data.raw");
    g_auto(GStrv) parts = g_strsplit(c->opts, "@", -1);
    g_autofree char *opts = g_strjoinv(data_file, parts);
    bool has_data_file = strchr(c->opts, '@') != NULL;

    if (c->backing != BK_NONE) {
        base = make_backing(c->backing, c->size, r, m.bytes);
        tu_run("qemu-img create -q -f qcow2 -o %s -b '%s' -F %s '%s' %" PRIu64, opts,
               base, c->backing == BK_RAW ? "raw" : "qcow2", path, c->size);
        m.v2_backing = v2;
    } else {
        tu_run("qemu-img create -q -f qcow2 -o %s '%s' %" PRIu64, opts, path, c->size);
    }

    for (int batch = 0; batch < batches; batch++) {
        BlkNode *img = open_rw(path);
        m.cluster_size = st(img)->cluster_size;
        /* 2 MiB clusters: half the operations in make test (the header
         * says why) */
        int n_ops = !tu_long_run() && m.cluster_size >= MB(1) ? ops / 2 : ops;
        for (int i = 0; i < n_ops; i++) {
            unsigned kind = g_rand_int_range(r, 0, 100);
            uint64_t len, off;
            int ret = 0;

            /* lengths: mostly small and unaligned, sometimes many clusters */
            if (g_rand_int_range(r, 0, 8) == 0) {
                len = g_rand_int_range(r, 1, (gint32)MIN(maxlen, 8 * m.cluster_size) + 1);
            } else {
                len = g_rand_int_range(r, 1, 1 << g_rand_int_range(r, 1, 17));
            }
            len = MIN(len, m.size);
            off = (uint64_t)g_rand_double_range(r, 0, (double)(m.size - len + 1));
            off = MIN(off, m.size - len);
            if (g_rand_int_range(r, 0, 4) == 0) { /* cluster aligned */
                off = ROUND_DOWN(off, m.cluster_size);
                len = MIN(ROUND_UP(len, m.cluster_size), m.size - off);
                len = MIN(len, ROUND_DOWN(maxlen, m.cluster_size));
            }
            if (kind < 60) {
                tu_fill_random(r, buf, len);
                ret = blk_pwrite(img, off, buf, len, 0);
                memcpy(m.bytes + off, buf, len);
            } else if (kind < 75) {
                unsigned flags = g_rand_boolean(r) ? BLK_REQ_MAY_UNMAP : 0;
                if (g_rand_int_range(r, 0, 4) == 0) {
                    flags |= BLK_REQ_NO_FALLBACK;
                }
                ret = blk_pwrite_zeroes(img, off, len, flags);
                if (ret == -ENOTSUP && (flags & BLK_REQ_NO_FALLBACK)) {
                    ret = 0; /* nothing happened */
                    blk_error_clear();
                } else {
                    memset(m.bytes + off, 0, len);
                }
            } else if (kind < 85) {
                ret = blk_pdiscard(img, off, len);
                model_discard(&m, off, len);
            } else if (kind < 92) {
                uint64_t co = ROUND_DOWN(off, m.cluster_size);
                uint64_t cl = MIN(m.cluster_size, m.size - co);
                if (cl <= maxlen && !has_data_file) {
                    BlkIOV q;
                    fill_compressible(r, buf, cl);
                    if (g_rand_int_range(r, 0, 5) == 0) {
                        tu_fill_random(r, buf, cl); /* incompressible */
                    }
                    iov_init_buf(&q, buf, cl);
                    /* whether it fits matters only over a host cluster:
                     * deflating every cluster twice (here and in the
                     * driver) was a fifth of this program's CPU */
                    bool had_host = cluster_has_host_offset(img, co);
                    bool fits = had_host && compresses(img, buf, cl);
                    ret = img->drv->pwrite_compressed(img, co, &q);
                    if (had_host && fits) {
                        /* compress.c invariant 8: refused, nothing changed */
                        assert_int_equal(ret, -EIO);
                        ret = 0;
                        blk_error_clear();
                    } else {
                        memcpy(m.bytes + co, buf, cl);
                    }
                }
            } else if (kind < 96) {
                ret = blk_flush(img);
            } else {
                assert_int_equal(blk_pread(img, off, rd, len), 0);
                assert_memory_equal(rd, m.bytes + off, len);
            }
            if (ret < 0) {
                fail_msg("op %u at %" PRIu64 "+%" PRIu64 " failed: %s (%s)", kind, off,
                         len, g_strerror(-ret), blk_error_message());
            }
            if (g_getenv("QIMG_SCRIBBLE_DEBUG")) { /* debugging: check after each op */
                fprintf(stderr, "batch %d op %d: kind %u %" PRIu64 "+%" PRIu64 "\n",
                        batch, i, kind, off, len);
                compare_all(img, &m);
            }
        }
        compare_all(img, &m);
        close_ok(img);
        check_clean(path);
        tu_write_sparse(model_path, m.bytes, m.size); /* up to 64 MiB, mostly zeros */
        tu_run("qemu-img compare -f qcow2 -F raw '%s' '%s'", path, model_path);
        if (strstr(c->opts, "data_file_raw=on")) { /* the raw file is the disk */
            tu_run("qemu-img compare -f raw -F raw '%s' '%s'", data_file, model_path);
        }
    }
    g_free(m.bytes);
}

static void scribble_matrix(const Config *cs, size_t n)
{
    int batches = tu_long_run() ? 4 : 2, ops = tu_long_run() ? 3000 : 600;
    unsigned seeds = tu_long_run() ? 4 : 1;

    const char *only = g_getenv("QIMG_SCRIBBLE_ONLY"); /* debugging: one config */

    for (size_t i = 0; i < n; i++) {
        if (only && strcmp(only, cs[i].opts) != 0) {
            continue;
        }
        for (unsigned s = 0; s < seeds; s++) {
            scribble(&cs[i], 1000 + (unsigned)i * 17 + s, batches, ops);
        }
    }
}

static void test_scribble_cluster_sizes(void **state)
{
    TU_REQUIRE_QEMU();
    static const Config cs[] = {
        {"cluster_size=512", BK_NONE, MB(8)},
        {"cluster_size=4096", BK_NONE, MB(24)},
        {"cluster_size=65536", BK_NONE, MB(48)},
        {"cluster_size=2M", BK_NONE, MB(64)},
    };
    scribble_matrix(cs, G_N_ELEMENTS(cs));
}

static void test_scribble_refcount_widths(void **state)
{
    TU_REQUIRE_QEMU();
    static const Config cs[] = {
        {"cluster_size=512,refcount_bits=1", BK_NONE, MB(8)},
        {"cluster_size=4096,refcount_bits=2", BK_NONE, MB(16)},
        {"cluster_size=1024,refcount_bits=64", BK_NONE, MB(8)},
        {"refcount_bits=8,lazy_refcounts=on", BK_NONE, MB(32)},
    };
    scribble_matrix(cs, G_N_ELEMENTS(cs));
}

static void test_scribble_v2(void **state)
{
    TU_REQUIRE_QEMU();
    static const Config cs[] = {
        {"compat=0.10", BK_NONE, MB(32)},
        {"compat=0.10,cluster_size=4096", BK_QCOW2, MB(16)},
        {"compat=0.10", BK_RAW, MB(32)},
    };
    scribble_matrix(cs, G_N_ELEMENTS(cs));
}

static void test_scribble_extended_l2(void **state)
{
    TU_REQUIRE_QEMU();
    static const Config cs[] = {
        {"extended_l2=on", BK_NONE, MB(32)},
        {"extended_l2=on,cluster_size=16384", BK_QCOW2, MB(16)},
        {"extended_l2=on,cluster_size=2M", BK_RAW, MB(64)},
    };
    scribble_matrix(cs, G_N_ELEMENTS(cs));
}

static void test_scribble_backing(void **state)
{
    TU_REQUIRE_QEMU();
    static const Config cs[] = {
        {"cluster_size=65536", BK_QCOW2, MB(32)},
        {"cluster_size=4096,lazy_refcounts=on", BK_RAW, MB(16)},
        {"cluster_size=512,refcount_bits=64", BK_QCOW2, MB(4)},
        {"compression_type=zstd", BK_RAW, MB(32)},
        {"data_file=@", BK_QCOW2, MB(16)},
        {"data_file=@,data_file_raw=on,cluster_size=4096", BK_NONE, MB(16)},
    };
    scribble_matrix(cs, G_N_ELEMENTS(cs));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scribble_cluster_sizes),
        cmocka_unit_test(test_scribble_refcount_widths),
        cmocka_unit_test(test_scribble_v2),
        cmocka_unit_test(test_scribble_extended_l2),
        cmocka_unit_test(test_scribble_backing),
    };
    return tu_run_group_tests("qcow2-write-scribble", tests);
}
