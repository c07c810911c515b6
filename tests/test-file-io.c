/*
 * tests/test-file-io.c: reads, writes and flushes of the file protocol driver
 * (block/file.c): the cache modes' open flags, open errors, O_DIRECT
 * alignment against a byte model, concurrent read-modify-write and
 * extending writes, reads past EOF, many iovecs, write generations and
 * the sticky flush error.
 *
 * Covers file.c invariants 1-6, 9 and 10, block.h invariants 2 and 4, and
 * error.c invariants 2 and 3.  Invariants 7 and 8 (write serialisation and
 * early writeback) change timing only and have no test here (what invariant
 * 8 hands to writeback early is tests/test-file-stream.c's); invariant 11
 * (the image locks) is tests/test-lock.c's; zeroing, discard, block
 * status, resize and create are tests/test-file-space.c's.
 *
 * The driver is called through blk_file_driver's function pointers so that
 * driver behaviour the block layer would hide (reads past EOF, writes that
 * extend the file) is tested directly.
 */
#include "test-file-fixture.h"

/* Open flags (as /proc/self/fdinfo reports them) of our fd on path, or -1. */
static long fd_flags_for(const char *path)
{
    char real[PATH_MAX];
    DIR *d;
    struct dirent *e;
    long flags = -1;

    assert_non_null(realpath(path, real));
    d = opendir("/proc/self/fd");
    if (!d) {
        return -1;
    }
    while ((e = readdir(d))) {
        char link[PATH_MAX];
        g_autofree char *lp = g_strdup_printf("/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(lp, link, sizeof(link) - 1);
        if (n <= 0) {
            continue;
        }
        link[n] = 0;
        if (strcmp(link, real) == 0) {
            g_autofree char *ip = g_strdup_printf("/proc/self/fdinfo/%s", e->d_name);
            g_autofree char *info = NULL;
            if (g_file_get_contents(ip, &info, NULL, NULL)) {
                char *f = strstr(info, "flags:");
                if (f) {
                    flags = strtol(f + 6, NULL, 8);
                }
            }
            break;
        }
    }
    closedir(d);
    return flags;
}

/* Does this folder's filesystem punch holes that SEEK_DATA then skips? */

static const char *mode_name(BlkCacheMode m)
{
    static const char *names[] = {"writeback", "writethrough", "none", "directsync",
                                  "unsafe"};
    return names[m];
}

static bool mode_direct(BlkCacheMode m)
{
    return m == BLK_CACHE_NONE || m == BLK_CACHE_DIRECTSYNC;
}

/* ---- tests ---- */

/*
 * Each cache mode: the right open flags (file.c invariant 2), the O_DIRECT
 * alignment (invariant 1), data round-trips, survives reopen.
 */
static void test_cache_modes(void **state)
{
    (void)state;
    int tested_direct = 0;

    for (BlkCacheMode m = BLK_CACHE_WRITEBACK; m <= BLK_CACHE_UNSAFE; m++) {
        const char *dir = mode_direct(m) ? direct_dir : tmpdir;
        if (!dir) {
            continue;
        }
        g_autofree char *name = g_strdup_printf("cache-%s.img", mode_name(m));
        g_autofree char *p = tpath(dir, name);
        blk_error_clear();
        uint8_t *abuf = NULL;
        uint8_t small[1000], back[1000];

        assert_int_equal(blk_file_create(p, 1 * MiB, BLK_PREALLOC_OFF), 0);
        BlkNode *img = open_img(p, false, m);
        assert_int_equal(img->size, 1 * MiB);
        assert_false(img->is_block_device);
        assert_true(img->drv->has_zero_init(img));

        long fl = fd_flags_for(p);
        assert_true(fl >= 0);
        assert_true(fl & O_CLOEXEC); /* as QEMU's qemu_open: not inherited by children */
        assert_int_equal(fl & O_ACCMODE, O_RDWR);
        /* QEMU's cache modes: O_DIRECT for none and directsync; O_DSYNC for
         * writethrough and directsync, durable on return (file.c invariant 2) */
        assert_int_equal(!!(fl & O_DIRECT), mode_direct(m));
        assert_int_equal(!!(fl & O_DSYNC),
                         m == BLK_CACHE_WRITETHROUGH || m == BLK_CACHE_DIRECTSYNC);
        if (mode_direct(m)) {
            /* file.c invariant 1: the alignment every O_DIRECT request keeps */
            uint32_t a = img->request_alignment;
            assert_true(a >= 512 && a <= 64 * KiB && (a & (a - 1)) == 0);
            tested_direct++;
        } else {
            assert_int_equal(img->request_alignment, 1);
        }

        assert_int_equal(posix_memalign((void **)&abuf, 4096, 8192), 0);
        fill_pattern(abuf, 8192, m);
        fill_pattern(small, sizeof(small), m + 100);
        assert_int_equal(wr(img, 0, abuf, 8192, 0), 0);
        assert_int_equal(wr(img, 12345, small, sizeof(small), BLK_REQ_FUA), 0);
        assert_int_equal(img->drv->flush(img), 0);

        uint8_t *rb = NULL;
        assert_int_equal(posix_memalign((void **)&rb, 4096, 8192), 0);
        memset(rb, 0xee, 8192);
        assert_int_equal(rd(img, 0, rb, 8192), 0);
        assert_memory_equal(rb, abuf, 8192);
        assert_int_equal(rd(img, 12345, back, sizeof(back)), 0);
        assert_memory_equal(back, small, sizeof(small));
        close_img(img);

        /* Reopen read-only (same mode) and through plain read(). */
        img = open_img(p, true, m);
        long rfl = fd_flags_for(p);
        assert_int_equal(rfl & O_ACCMODE, O_RDONLY);
        memset(rb, 0, 8192);
        assert_int_equal(rd(img, 0, rb, 8192), 0);
        assert_memory_equal(rb, abuf, 8192);
        memset(back, 0, sizeof(back));
        assert_int_equal(rd(img, 12345, back, sizeof(back)), 0);
        assert_memory_equal(back, small, sizeof(small));
        assert_int_equal(img->drv->flush(img), 0); /* read-only: no-op */
        assert_true(wr(img, 0, small, 10, 0) < 0); /* the fd is O_RDONLY */
        close_img(img);

        size_t n;
        g_autofree uint8_t *all = read_all(p, &n);
        assert_int_equal(n, 1 * MiB);
        assert_memory_equal(all, abuf, 8192);
        assert_memory_equal(all + 12345, small, sizeof(small));
        free(abuf);
        free(rb);
    }
    if (!tested_direct) {
        tu_skip("O_DIRECT works in no folder here: cache=none/directsync not tested");
    }
}

/*
 * A failed open returns -errno and records the errno with a message
 * (block.h invariant 2, error.c invariant 3), worded as QEMU's file-posix:
 * "Could not open 'FILE': strerror".
 */
static void test_open_errors(void **state)
{
    (void)state;
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
    g_autofree char *missing = tpath(tmpdir, "does-not-exist.img");
    g_autofree char *msg = NULL;

    assert_null(open_img_err(missing, false, BLK_CACHE_WRITEBACK));
    assert_non_null(blk_error_message());
    assert_int_equal(blk_error_code(), ENOENT);
    msg = g_strdup_printf("Could not open '%s': No such file or directory", missing);
    assert_string_equal(blk_error_message(), msg);
    blk_error_clear(); /* error.c invariant 2: the next failure is new */

    assert_null(open_img_err(tmpdir, true, BLK_CACHE_WRITEBACK));
    assert_non_null(blk_error_message());
    assert_int_equal(blk_error_code(), EISDIR);
    blk_error_clear();

    assert_null(open_img_err(missing, false, 99));
    assert_non_null(blk_error_message());
    assert_int_equal(blk_error_code(), EINVAL);
    blk_error_clear();

    /* procfs refuses O_DIRECT at open time: the message must say so (qimg's
     * wording, which names the cache mode). */
    BlkNode *img = open_img_err("/proc/self/status", true, BLK_CACHE_NONE);
    if (img) {
        close_img(img);
        g_clear_pointer(&missing, g_free); /* a skip leaves nothing allocated */
        g_clear_pointer(&msg, g_free);
        tu_skip("this procfs accepts O_DIRECT: the refusal message cannot be tested");
    }
    assert_int_equal(blk_error_code(), EINVAL);
    assert_string_equal(blk_error_message(),
                        "Could not open '/proc/self/status': O_DIRECT "
                        "(cache=none) not supported by the filesystem: "
                        "Invalid argument");
    blk_error_clear();
    assert_null(open_img_err("/proc/self/status", true, BLK_CACHE_DIRECTSYNC));
    assert_non_null(
        strstr(blk_error_message(), "O_DIRECT (cache=directsync) not supported"));
}

/* A byte model of the file, compared after every O_DIRECT operation. */
typedef struct Model {
    uint8_t *data;
    size_t cap;
    size_t size;
} Model;

static void model_write(Model *m, uint64_t off, const uint8_t *buf, size_t len)
{
    assert_true(off + len <= m->cap);
    if (off > m->size) {
        memset(m->data + m->size, 0, off - m->size);
    }
    memcpy(m->data + off, buf, len);
    if (off + len > m->size) {
        m->size = off + len;
    }
}

static void model_check_read(Model *m, BlkNode *img, uint64_t off, size_t len,
                             size_t misalign)
{
    uint8_t *raw = g_malloc(len + 16);
    uint8_t *buf = raw + misalign;
    uint8_t *exp = g_malloc0(len);

    memset(buf, 0xa5, len);
    if (off < m->size) {
        memcpy(exp, m->data + off, MIN(len, m->size - off));
    }
    assert_int_equal(rd(img, off, buf, len), 0);
    assert_memory_equal(buf, exp, len);
    g_free(raw);
    g_free(exp);
}

static void model_do_write(Model *m, BlkNode *img, const char *path, uint64_t off,
                           size_t len, size_t misalign, uint32_t seed)
{
    uint8_t *raw = g_malloc(len + 16);
    uint8_t *buf = raw + misalign;

    fill_pattern(buf, len, seed);
    assert_int_equal(wr(img, off, buf, len, 0), 0);
    model_write(m, off, buf, len);
    /* file.c invariant 5: img->size is the file's size after each request */
    assert_int_equal(img->size, m->size);
    assert_int_equal(file_size(path), m->size);
    g_free(raw);
}

/*
 * file.c invariant 1: O_DIRECT requests of any offset, length and buffer
 * alignment, compared byte for byte with a model; invariant 5: img->size is
 * the file's size after every write (model_do_write); invariant 3: reads
 * past EOF return zeros.
 */
static void test_direct_unaligned(void **state)
{
    (void)state;
    if (!direct_dir) {
        tu_skip("O_DIRECT works in no folder here");
    }
    g_autofree char *p = tpath(direct_dir, "direct.img");
    Model m = {.cap = 512 * KiB};
    m.data = g_malloc0(m.cap);
    m.size = 64 * KiB;
    fill_pattern(m.data, m.size, 1);
    write_file(p, m.data, m.size);

    BlkNode *img = open_img(p, false, BLK_CACHE_NONE);
    assert_true(img->request_alignment >= 512);

    /* The cases from the brief. */
    model_do_write(&m, img, p, 511, 3, 0, 2);
    model_check_read(&m, img, 1, 700, 0);
    model_check_read(&m, img, 1, 700, 3);
    /* Aligned offset and length, unaligned buffer: through an aligned bounce
     * buffer (invariant 1). */
    model_do_write(&m, img, p, 4096, 4096, 1, 3);
    model_check_read(&m, img, 4096, 4096, 5);
    /* Spanning many blocks, both ends unaligned. */
    model_do_write(&m, img, p, 1000, 9000, 0, 4);
    model_check_read(&m, img, 0, 16 * KiB, 0);
    /* Extending the file to an unaligned size: EOF must be exact, the
     * read-modify-write padding cut off again (invariant 5). */
    model_do_write(&m, img, p, 70000, 3, 0, 5);
    model_check_read(&m, img, 64 * KiB - 10, 8 * KiB, 1);
    /* Extending within the last partial block. */
    model_do_write(&m, img, p, 70010, 7, 0, 6);
    model_check_read(&m, img, 69000, 4000, 0);
    /* A write larger than one bounce buffer (1 MiB), unaligned. */
    model_do_write(&m, img, p, 100 * KiB + 7, 300 * KiB + 5, 3, 7);
    model_check_read(&m, img, 100 * KiB, 301 * KiB, 2);

    /* Scatter-gather with odd pieces: every buffer length unaligned (invariant 1). */
    {
        uint8_t a[5], b[600], c[1];
        struct iovec v[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
        BlkIOV q;
        uint8_t flat[606];
        fill_pattern(flat, sizeof flat, 8);
        memcpy(a, flat, 5);
        memcpy(b, flat + 5, 600);
        memcpy(c, flat + 605, 1);
        iov_init_external(&q, v, 3);
        assert_int_equal(img->drv->pwritev(img, 2047, &q, 0), 0);
        model_write(&m, 2047, flat, sizeof flat);
        memset(a, 0, 5);
        memset(b, 0, 600);
        memset(c, 0, 1);
        assert_int_equal(img->drv->preadv(img, 2047, &q, 0), 0);
        assert_memory_equal(a, flat, 5);
        assert_memory_equal(b, flat + 5, 600);
        assert_memory_equal(c, flat + 605, 1);
    }

    /* Random mix of aligned and unaligned operations. */
    GRand *r = g_rand_new_with_seed(1234);
    for (int i = 0; i < 400; i++) {
        bool aligned = g_rand_int_range(r, 0, 4) == 0;
        uint64_t off = g_rand_int_range(r, 0, 420 * KiB);
        size_t len = g_rand_int_range(r, 1, 20000);
        size_t mis = g_rand_int_range(r, 0, 8);
        if (aligned) {
            off -= off % 4096;
            len = (len + 4095) / 4096 * 4096;
            mis = 0;
        }
        if (g_rand_boolean(r)) {
            model_do_write(&m, img, p, off, len, mis, 100 + i);
        } else {
            model_check_read(&m, img, off, len, mis);
        }
    }
    g_rand_free(r);
    model_check_read(&m, img, 0, m.size + 5000, 0); /* past EOF: zeros (invariant 3) */
    close_img(img);

    size_t n;
    g_autofree uint8_t *all = read_all(p, &n);
    assert_int_equal(n, m.size);
    assert_memory_equal(all, m.data, n);
    g_free(m.data);
}

/*
 * Many small unaligned O_DIRECT writes to the same blocks from many threads:
 * each read-modify-write holds s->lock exclusively, so none loses another's
 * bytes (file.c invariant 6).
 */
#define RMW_THREADS 8
#define RMW_BYTES 2048

typedef struct RmwWorker {
    BlkNode *img;
    int t;
    int errors;
} RmwWorker;

static gpointer rmw_thread(gpointer opaque)
{
    RmwWorker *w = opaque;

    for (int i = w->t; i < RMW_BYTES; i += RMW_THREADS) {
        uint8_t v = (uint8_t)(w->t + 1);
        if (wr(w->img, 100 + i, &v, 1, 0) != 0) {
            w->errors++;
        }
    }
    return NULL;
}

static void test_direct_concurrent_rmw(void **state)
{
    (void)state;
    if (!direct_dir) {
        tu_skip("O_DIRECT works in no folder here");
    }
    g_autofree char *p = tpath(direct_dir, "rmw.img");
    blk_error_clear();
    assert_int_equal(blk_file_create(p, 64 * KiB, BLK_PREALLOC_OFF), 0);
    BlkNode *img = open_img(p, false, BLK_CACHE_NONE);
    RmwWorker w[RMW_THREADS];
    GThread *th[RMW_THREADS];

    for (int t = 0; t < RMW_THREADS; t++) {
        w[t] = (RmwWorker){.img = img, .t = t};
        th[t] = g_thread_new("rmw", rmw_thread, &w[t]);
    }
    for (int t = 0; t < RMW_THREADS; t++) {
        g_thread_join(th[t]);
        assert_int_equal(w[t].errors, 0);
    }
    uint8_t buf[RMW_BYTES + 200];
    assert_int_equal(rd(img, 0, buf, sizeof buf), 0);
    assert_true(all_bytes(buf, 100, 0));
    for (int i = 0; i < RMW_BYTES; i++) {
        if (buf[100 + i] != (uint8_t)(i % RMW_THREADS + 1)) {
            fail_msg("byte %d lost: %u", 100 + i, buf[100 + i]);
        }
    }
    assert_true(all_bytes(buf + 100 + RMW_BYTES, 100, 0));
    close_img(img);
}

/*
 * Writes extending the file race with zeroing past EOF (which grows the
 * file with ftruncate): no write may be cut off (file.c invariant 6:
 * ftruncate holds s->lock exclusively, extending writes hold it shared),
 * and img->size ends at the file's size (invariant 5).
 */
typedef struct ExtendWorker {
    BlkNode *img;
    bool zeroer;
    int errors;
} ExtendWorker;

#define EXTEND_STEPS 1500

static gpointer extend_thread(gpointer opaque)
{
    ExtendWorker *w = opaque;
    uint8_t buf[512];

    memset(buf, 0x77, sizeof buf);
    for (int k = 0; k < EXTEND_STEPS; k++) {
        uint64_t base = (uint64_t)k * 1024;
        int r = w->zeroer ? w->img->drv->pwrite_zeroes(w->img, base + 512, 512,
                                                       BLK_REQ_MAY_UNMAP)
                          : wr(w->img, base, buf, sizeof buf, 0);
        if (r != 0) {
            w->errors++;
        }
    }
    return NULL;
}

static void test_concurrent_extend(void **state)
{
    (void)state;
    g_autofree char *p = tpath(tmpdir, "extend.img");
    blk_error_clear();
    assert_int_equal(blk_file_create(p, 0, BLK_PREALLOC_OFF), 0);
    BlkNode *img = open_img(p, false, BLK_CACHE_WRITEBACK);
    ExtendWorker w[2] = {{.img = img, .zeroer = false}, {.img = img, .zeroer = true}};
    GThread *th[2];

    for (int t = 0; t < 2; t++) {
        th[t] = g_thread_new("extend", extend_thread, &w[t]);
    }
    for (int t = 0; t < 2; t++) {
        g_thread_join(th[t]);
        assert_int_equal(w[t].errors, 0);
    }
    assert_int_equal(file_size(p), EXTEND_STEPS * 1024ull);
    assert_int_equal(img->size, EXTEND_STEPS * 1024ull);
    close_img(img);
    size_t n;
    g_autofree uint8_t *all = read_all(p, &n);
    for (int k = 0; k < EXTEND_STEPS; k++) {
        if (!all_bytes(all + k * 1024, 512, 0x77) ||
            !all_bytes(all + k * 1024 + 512, 512, 0)) {
            fail_msg("chunk %d damaged", k);
        }
    }
}

/* file.c invariant 3: bytes past EOF read as zeros, never as what the
 * caller's buffer held; with O_DIRECT also after a short aligned read. */
static void check_read_past_eof(const char *dir, BlkCacheMode mode)
{
    g_autofree char *p = tpath(dir, "eof.img");
    uint8_t data[1000], buf[3000];

    fill_pattern(data, sizeof data, 9);
    write_file(p, data, sizeof data);
    BlkNode *img = open_img(p, true, mode);
    assert_int_equal(img->size, 1000);

    memset(buf, 0xaa, sizeof buf);
    assert_int_equal(rd(img, 500, buf, sizeof buf), 0);
    assert_memory_equal(buf, data + 500, 500);
    assert_true(all_bytes(buf + 500, sizeof buf - 500, 0));

    memset(buf, 0xaa, sizeof buf);
    assert_int_equal(rd(img, 5000, buf, 100), 0);
    assert_true(all_bytes(buf, 100, 0));

    /* Aligned read of a whole block across EOF (short O_DIRECT read). */
    uint8_t *ab = NULL;
    assert_int_equal(posix_memalign((void **)&ab, 4096, 4096), 0);
    memset(ab, 0xaa, 4096);
    assert_int_equal(rd(img, 0, ab, 4096), 0);
    assert_memory_equal(ab, data, 1000);
    assert_true(all_bytes(ab + 1000, 4096 - 1000, 0));
    free(ab);

    /* Scatter-gather across EOF. */
    uint8_t a[900], b[300];
    struct iovec v[2] = {{a, sizeof a}, {b, sizeof b}};
    BlkIOV q;
    memset(a, 0xaa, sizeof a);
    memset(b, 0xaa, sizeof b);
    iov_init_external(&q, v, 2);
    assert_int_equal(img->drv->preadv(img, 0, &q, 0), 0);
    assert_memory_equal(a, data, 900);
    assert_memory_equal(b, data + 900, 100);
    assert_true(all_bytes(b + 100, 200, 0));
    close_img(img);
    unlink(p);
}

static void test_read_past_eof(void **state)
{
    (void)state;
    check_read_past_eof(tmpdir, BLK_CACHE_WRITEBACK);
    if (!direct_dir) {
        tu_skip("O_DIRECT works in no folder here");
    }
    check_read_past_eof(direct_dir, BLK_CACHE_NONE);
}

/*
 * More iovecs than one preadv/pwritev call takes (IOV_MAX): a request moves
 * all its bytes over several calls (file.c invariant 4, the buffered pass;
 * with O_DIRECT the 3-byte pieces go through a bounce buffer, invariant 1).
 */
static void check_many_iovecs(const char *dir, BlkCacheMode mode)
{
    g_autofree char *p = tpath(dir, "iov.img");
    enum { N = 1500, PIECE = 3 };
    uint8_t *flat = g_malloc(N * PIECE);
    uint8_t *back = g_malloc0(N * PIECE);
    struct iovec *v = g_new(struct iovec, N);
    BlkIOV q;
    blk_error_clear();

    assert_int_equal(blk_file_create(p, 0, BLK_PREALLOC_OFF), 0);
    BlkNode *img = open_img(p, false, mode);
    fill_pattern(flat, N * PIECE, 10);
    for (int i = 0; i < N; i++) {
        v[i].iov_base = flat + i * PIECE;
        v[i].iov_len = PIECE;
    }
    iov_init_external(&q, v, N);
    assert_int_equal(img->drv->pwritev(img, 7, &q, 0), 0);
    assert_int_equal(img->size, 7 + N * PIECE); /* file.c invariant 5 */
    /* Read back with a different split, including empty pieces. */
    for (int i = 0; i < N; i++) {
        v[i].iov_base = back + i * PIECE;
        v[i].iov_len = PIECE;
    }
    v[10].iov_len = 0;
    v[11].iov_base = back + 10 * PIECE;
    v[11].iov_len = 2 * PIECE;
    iov_init_external(&q, v, N);
    assert_int_equal(img->drv->preadv(img, 7, &q, 0), 0);
    assert_memory_equal(back, flat, N * PIECE);
    close_img(img);
    g_free(flat);
    g_free(back);
    g_free(v);
    unlink(p);
}

static void test_many_iovecs(void **state)
{
    (void)state;
    check_many_iovecs(tmpdir, BLK_CACHE_WRITEBACK);
    if (!direct_dir) {
        tu_skip("O_DIRECT works in no folder here");
    }
    check_many_iovecs(direct_dir, BLK_CACHE_NONE);
}

/*
 * Write zeroes through fallocate: exactly the range reads as zeros, with
 * MAY_UNMAP it becomes a hole where the filesystem punches one (block status
 * then says ZERO, as QEMU's file-posix), past EOF the file grows and
 * img->size follows (file.c invariant 5).
 */

/*
 * file.c invariant 9 (block.h invariant 4): writes, zeroing and discards
 * bump write_gen, a flush covers what completed before it began, and a
 * flush with nothing new leaves the generations alone.
 */
static void test_write_generations(void **state)
{
    (void)state;
    g_autofree char *p = tpath(tmpdir, "gen.img");
    blk_error_clear();
    uint8_t pat[4096];

    assert_int_equal(blk_file_create(p, MiB, BLK_PREALLOC_OFF), 0);
    BlkNode *img = open_img(p, false, BLK_CACHE_WRITEBACK);
    assert_int_equal(blk_write_gen(img), 0);
    assert_true(blk_is_durable(img, 0));
    fill_pattern(pat, sizeof pat, 3);
    assert_int_equal(wr(img, 0, pat, sizeof pat, 0), 0);
    assert_int_equal(img->drv->pwrite_zeroes(img, 8192, 4096, 0), 0);
    assert_int_equal(img->drv->pdiscard(img, 65536, 4096), 0);
    assert_int_equal(blk_write_gen(img), 3);
    assert_false(blk_is_durable(img, 3));
    assert_int_equal(img->drv->flush(img), 0);
    assert_int_equal(blk_flushed_gen(img), 3);
    assert_true(blk_is_durable(img, 3));
    assert_int_equal(img->drv->flush(img), 0); /* nothing new */
    assert_int_equal(blk_flushed_gen(img), 3);
    /* file.c invariant 2: a FUA write is durable when it returns */
    assert_int_equal(wr(img, 0, pat, sizeof pat, BLK_REQ_FUA), 0);
    assert_int_equal(blk_flushed_gen(img), 4);
    close_img(img);
    unlink(p);
}

/*
 * file.c invariant 10: a failed fdatasync is sticky.  A loop device over a file on
 * a full tmpfs takes writes into its page cache and fails their writeback:
 * the kernel reports EIO to one fdatasync, drops the pages, and the next
 * fdatasync succeeds -- data lost without a word.  Needs root (mount, loop
 * device), else skipped.
 */
static void test_sticky_flush_error(void **state)
{
    (void)state;
    g_autofree char *mnt = tpath(tmpdir, "full-tmpfs");
    g_autofree char *backing = NULL, *dev = NULL;
    blk_error_clear();
    g_autofree uint8_t *buf = g_malloc(4 * MiB);
    int lfd;

    assert_int_equal(mkdir(mnt, 0700), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") < 0) {
        rmdir(mnt);
        g_clear_pointer(&mnt, g_free);
        g_clear_pointer(&buf, g_free);
        tu_skip("cannot mount a tmpfs (needs root): sticky flush errors not tested");
    }
    backing = g_build_filename(mnt, "backing", NULL);
    assert_int_equal(blk_file_create(backing, 8 * MiB, BLK_PREALLOC_OFF), 0);
    lfd = loop_attach(backing, &dev);
    if (lfd < 0) {
        umount2(mnt, MNT_DETACH);
        rmdir(mnt);
        g_clear_pointer(&mnt, g_free);
        g_clear_pointer(&backing, g_free);
        g_clear_pointer(&buf, g_free);
        tu_skip("no free loop device: sticky flush errors not tested");
    }
    BlkNode *img = open_img(dev, false, BLK_CACHE_WRITEBACK);
    memset(buf, 0x5a, 4 * MiB);
    assert_int_equal(wr(img, 0, buf, 4 * MiB, 0), 0); /* fits the page cache */
    blk_error_clear();
    assert_true(img->drv->flush(img) < 0); /* the backing file cannot hold it */
    blk_error_clear();
    /* The kernel forgets; qimg does not: every later flush and write fails. */
    assert_int_equal(img->drv->flush(img), -EIO);
    assert_non_null(strstr(blk_error_message(), "an earlier flush of it failed"));
    assert_int_equal(wr(img, 0, buf, 4096, 0), -EIO);
    assert_int_equal(img->drv->pwrite_zeroes(img, 0, 4096, 0), -EIO);
    assert_int_equal(img->drv->pdiscard(img, 0, 4096), -EIO);
    /* block.h invariant 4: the writes it failed to sync are not durable */
    assert_false(blk_is_durable(img, blk_write_gen(img)));
    assert_int_equal(rd(img, 0, buf, 4096), 0); /* reads still work */
    blk_error_clear();
    close_img(img);
    close(lfd);
    /* A fresh open is a fresh start (what the kernel still has, it has). */
    unlink(backing);
    assert_int_equal(umount2(mnt, MNT_DETACH), 0);
    rmdir(mnt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_modes),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_direct_unaligned),
        cmocka_unit_test(test_direct_concurrent_rmw),
        cmocka_unit_test(test_concurrent_extend),
        cmocka_unit_test(test_read_past_eof),
        cmocka_unit_test(test_many_iovecs),
        cmocka_unit_test(test_write_generations),
        cmocka_unit_test(test_sticky_flush_error),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
