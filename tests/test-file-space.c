/*
 * tests/test-file-space.c: what the file protocol driver (block/file.c) does
 * to a file's space and size: write zeroes (fallocate, holes, no fallback),
 * block status, truncate, create, discard, and all of it on a block device
 * (a loop device; needs root, else skipped).
 *
 * Covers file.c invariants 1, 5, 6 (growth under the shared lock) and 12
 * on these paths; reads, writes and flushes are tests/test-file-io.c's.
 * The driver is called through blk_file_driver's function pointers so
 * that driver behaviour the block layer would hide (writes that extend
 * the file) is tested directly.
 */
#include "test-file-fixture.h"

#include "block/file.h"

#include <signal.h>
#include <sys/resource.h>

/* Does this folder's filesystem punch holes that SEEK_DATA then skips? */
static bool punch_and_seek_work(const char *dir)
{
    g_autofree char *p = tpath(dir, "punch-probe");
    g_autofree uint8_t *buf = g_malloc(256 * KiB);
    bool ok = false;
    int fd;

    memset(buf, 0x11, 256 * KiB);
    fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    if (pwrite(fd, buf, 256 * KiB, 0) == (ssize_t)(256 * KiB) && fsync(fd) == 0 &&
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 64 * KiB, 128 * KiB) ==
            0) {
        ok = lseek(fd, 64 * KiB, SEEK_DATA) == (off_t)(192 * KiB);
    }
    close(fd);
    unlink(p);
    return ok;
}

static void check_zeroes(const char *dir, BlkCacheMode mode)
{
    g_autofree char *p = tpath(dir, "zero.img");
    const size_t size = 4 * MiB;
    g_autofree uint8_t *buf = g_malloc(size + 4 * KiB);
    bool punch = punch_and_seek_work(dir);
    int fd;

    memset(buf, 0x55, size);
    write_file(p, buf, size);
    BlkNode *img = open_img(p, false, mode);

    /* Without MAY_UNMAP. */
    assert_int_equal(img->drv->pwrite_zeroes(img, 1 * MiB, 1 * MiB, 0), 0);
    /* With MAY_UNMAP: the range must become a hole where supported. */
    assert_int_equal(img->drv->pwrite_zeroes(img, 2 * MiB, 1 * MiB, BLK_REQ_MAY_UNMAP),
                     0);
    /* Unaligned ranges, both kinds. */
    assert_int_equal(img->drv->pwrite_zeroes(img, 100, 4900, 0), 0);
    assert_int_equal(img->drv->pwrite_zeroes(img, 10001, 9999, BLK_REQ_MAY_UNMAP), 0);
    assert_int_equal(img->size, size);

    memset(buf, 0xee, size);
    assert_int_equal(rd(img, 0, buf, size), 0);
    assert_true(all_bytes(buf, 100, 0x55));
    assert_true(all_bytes(buf + 100, 4900, 0));
    assert_true(all_bytes(buf + 5000, 10001 - 5000, 0x55));
    assert_true(all_bytes(buf + 10001, 9999, 0));
    assert_true(all_bytes(buf + 20000, 1 * MiB - 20000, 0x55));
    assert_true(all_bytes(buf + 1 * MiB, 2 * MiB, 0));
    assert_true(all_bytes(buf + 3 * MiB, 1 * MiB, 0x55));

    if (punch) {
        fd = open(p, O_RDONLY);
        assert_true(fd >= 0);
        assert_true(lseek(fd, 2 * MiB, SEEK_DATA) >= (off_t)(3 * MiB));
        close(fd);
        BlkStatus st = {0};
        assert_int_equal(img->drv->block_status(img, 2 * MiB, 2 * MiB, &st), 0);
        assert_int_equal(st.flags, BLK_STATUS_ZERO | BLK_STATUS_OFFSET_VALID |
                                       BLK_STATUS_ALLOCATED);
        assert_int_equal(st.pnum, 1 * MiB);
    }

    /* Past EOF: the file grows, the new part reads as zeros (invariant 5). */
    assert_int_equal(img->drv->pwrite_zeroes(img, size - 100, 200, 0), 0);
    assert_int_equal(img->size, size + 100);
    assert_int_equal(file_size(p), size + 100);
    assert_int_equal(img->drv->pwrite_zeroes(img, size + 1000, 500, BLK_REQ_MAY_UNMAP),
                     0);
    assert_int_equal(img->size, size + 1500);
    assert_int_equal(file_size(p), size + 1500);
    memset(buf, 0xee, 4 * KiB);
    assert_int_equal(rd(img, size - 2000, buf, 4 * KiB), 0);
    assert_true(all_bytes(buf, 1900, 0x55));
    assert_true(all_bytes(buf + 1900, 4 * KiB - 1900, 0));

    /* NO_FALLBACK on a filesystem with fallocate: either done or refused
     * untouched (QEMU's BDRV_REQ_NO_FALLBACK). */
    uint8_t d[512];
    memset(d, 0x33, sizeof d);
    assert_int_equal(wr(img, 8192, d, sizeof d, 0), 0);
    int r = img->drv->pwrite_zeroes(img, 8192, sizeof d, BLK_REQ_NO_FALLBACK);
    assert_true(r == 0 || r == -ENOTSUP);
    assert_int_equal(rd(img, 8192, d, sizeof d), 0);
    assert_true(all_bytes(d, sizeof d, r == 0 ? 0 : 0x33));

    close_img(img);
    unlink(p);
}

static void test_zeroes(void **state)
{
    (void)state;
    check_zeroes(tmpdir, BLK_CACHE_WRITEBACK);
    check_zeroes(tmpdir, BLK_CACHE_WRITETHROUGH);
    if (!direct_dir) {
        tu_skip("O_DIRECT works in no folder here");
    }
    check_zeroes(direct_dir, BLK_CACHE_NONE);
}

/*
 * A character device has no fallocate: NO_FALLBACK must refuse with
 * -ENOTSUP, and without it the driver must fall back to writing zeros
 * (QEMU's BDRV_REQ_NO_FALLBACK).
 */
static void test_no_fallback(void **state)
{
    (void)state;
    BlkNode *img = open_img("/dev/null", false, BLK_CACHE_WRITEBACK);

    assert_false(img->is_block_device);
    assert_int_equal(img->drv->pwrite_zeroes(img, 0, 64 * KiB, BLK_REQ_NO_FALLBACK),
                     -ENOTSUP);
    assert_int_equal(img->drv->pwrite_zeroes(img, 0, 64 * KiB,
                                             BLK_REQ_NO_FALLBACK | BLK_REQ_MAY_UNMAP),
                     -ENOTSUP);
    assert_int_equal(img->drv->pwrite_zeroes(img, 0, 3 * MiB + 5, 0), 0);
    assert_int_equal(img->drv->pwrite_zeroes(img, 0, 4096, BLK_REQ_MAY_UNMAP), 0);
    /* Discard is advisory: unsupported is not an error (QEMU's
     * bdrv_co_pdiscard ignores ENOTSUP). */
    assert_int_equal(img->drv->pdiscard(img, 0, 4096), 0);
    close_img(img);
}

/*
 * SEEK_DATA/SEEK_HOLE block status as QEMU's file-posix reports it (qemu-img
 * map of a raw file): data DATA|OFFSET_VALID, a hole ZERO|OFFSET_VALID, past
 * EOF ZERO; an answer is clamped to the request and stops at EOF.
 */
static void test_block_status(void **state)
{
    (void)state;
    g_autofree char *p = tpath(tmpdir, "status.img");
    uint8_t data[64 * KiB];
    BlkStatus st;
    int fd;
    const unsigned data_fl =
        BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED;
    const unsigned hole_fl =
        BLK_STATUS_ZERO | BLK_STATUS_OFFSET_VALID | BLK_STATUS_ALLOCATED;

    fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4 * MiB), 0);
    fill_pattern(data, sizeof data, 11);
    assert_int_equal(pwrite(fd, data, sizeof data, 1 * MiB), (ssize_t)sizeof data);
    assert_int_equal(fsync(fd), 0);
    bool seek_ok = lseek(fd, 0, SEEK_DATA) == (off_t)(1 * MiB);
    close(fd);

    for (int pass = 0; pass < 2; pass++) {
        BlkCacheMode mode = pass ? BLK_CACHE_NONE : BLK_CACHE_WRITEBACK;
        if (pass && !direct_dir) {
            g_clear_pointer(&p, g_free); /* a skip leaves nothing allocated */
            tu_skip("O_DIRECT works in no folder here: cache=none pass not run");
        }
        g_autofree char *q = pass ? tpath(direct_dir, "status2.img") : g_strdup(p);
        if (pass) {
            fd = open(q, O_RDWR | O_CREAT | O_TRUNC, 0644);
            assert_true(fd >= 0);
            assert_int_equal(ftruncate(fd, 4 * MiB), 0);
            assert_int_equal(pwrite(fd, data, sizeof data, 1 * MiB),
                             (ssize_t)sizeof data);
            close(fd);
        }
        BlkNode *img = open_img(q, true, mode);

        memset(&st, 0, sizeof st);
        assert_int_equal(img->drv->block_status(img, 0, 4 * MiB, &st), 0);
        if (!seek_ok) {
            assert_int_equal(st.flags, data_fl);
            assert_int_equal(st.pnum, 4 * MiB);
            close_img(img);
            continue;
        }
        assert_int_equal(st.flags, hole_fl);
        assert_int_equal(st.pnum, 1 * MiB);
        assert_int_equal(st.map, 0);
        assert_ptr_equal(st.file, img);

        /* Clamped to the request. */
        assert_int_equal(img->drv->block_status(img, 4096, 8192, &st), 0);
        assert_int_equal(st.flags, hole_fl);
        assert_int_equal(st.pnum, 8192);
        assert_int_equal(st.map, 4096);

        assert_int_equal(img->drv->block_status(img, 1 * MiB, 4 * MiB, &st), 0);
        assert_int_equal(st.flags, data_fl);
        assert_int_equal(st.pnum, 64 * KiB);
        assert_int_equal(st.map, 1 * MiB);
        assert_ptr_equal(st.file, img);

        assert_int_equal(img->drv->block_status(img, 1 * MiB + 4096, 100, &st), 0);
        assert_int_equal(st.flags, data_fl);
        assert_int_equal(st.pnum, 100);
        assert_int_equal(st.map, 1 * MiB + 4096);

        assert_int_equal(img->drv->block_status(img, 1 * MiB + 64 * KiB, 8 * MiB, &st),
                         0);
        assert_int_equal(st.flags, hole_fl);
        assert_int_equal(st.pnum, 4 * MiB - (1 * MiB + 64 * KiB)); /* stops at EOF */

        /* Past EOF. */
        assert_int_equal(img->drv->block_status(img, 4 * MiB, 100, &st), 0);
        assert_int_equal(st.flags, BLK_STATUS_ZERO);
        assert_int_equal(st.pnum, 100);
        assert_int_equal(img->drv->block_status(img, 10 * MiB, 1, &st), 0);
        assert_int_equal(st.flags, BLK_STATUS_ZERO);
        assert_int_equal(st.pnum, 1);
        close_img(img);
    }

    /* Data up to an unaligned EOF. */
    g_autofree char *p2 = tpath(tmpdir, "status-tail.img");
    write_file(p2, data, 5000);
    BlkNode *img = open_img(p2, true, BLK_CACHE_WRITEBACK);
    assert_int_equal(img->drv->block_status(img, 0, 1 * MiB, &st), 0);
    assert_int_equal(st.flags, data_fl);
    assert_int_equal(st.pnum, 5000);
    assert_int_equal(img->drv->block_status(img, 5000, 1 * MiB, &st), 0);
    assert_int_equal(st.flags, BLK_STATUS_ZERO);
    assert_int_equal(st.pnum, 1 * MiB);
    close_img(img);
}

/*
 * Resizing as QEMU's file-posix does it: sparse growth, shrinking, falloc and
 * full preallocation, "metadata" refused, no shrinking with preallocation;
 * img->size is the file's size after each resize (file.c invariant 5).
 */
static void check_truncate(const char *dir, BlkCacheMode mode)
{
    g_autofree char *p = tpath(dir, "trunc.img");
    blk_error_clear();
    uint8_t pat[4096], buf[4096];
    g_autofree uint8_t *big = g_malloc(5 * MiB + 123);

    assert_int_equal(blk_file_create(p, 1 * MiB, BLK_PREALLOC_OFF), 0);
    BlkNode *img = open_img(p, false, mode);
    fill_pattern(pat, sizeof pat, 12);
    assert_int_equal(wr(img, 1 * MiB - 4096, pat, sizeof pat, 0), 0);

    /* Grow, sparse. */
    assert_int_equal(img->drv->truncate(img, 2 * MiB, true, BLK_PREALLOC_OFF, false), 0);
    assert_null(blk_error_message());
    assert_int_equal(img->size, 2 * MiB); /* file.c invariant 5 */
    assert_int_equal(file_size(p), 2 * MiB);
    assert_true(img->drv->get_allocated_size(img) < (int64_t)(512 * KiB));
    assert_int_equal(rd(img, 1 * MiB - 4096, buf, sizeof buf), 0);
    assert_memory_equal(buf, pat, sizeof pat);
    assert_int_equal(rd(img, 2 * MiB - 4096, buf, sizeof buf), 0);
    assert_true(all_bytes(buf, sizeof buf, 0));

    /* Shrink into the data. */
    assert_int_equal(
        img->drv->truncate(img, 1 * MiB - 2048, true, BLK_PREALLOC_OFF, true), 0);
    assert_int_equal(img->size, 1 * MiB - 2048);
    assert_int_equal(file_size(p), 1 * MiB - 2048);
    memset(buf, 0xee, sizeof buf);
    assert_int_equal(rd(img, 1 * MiB - 4096, buf, sizeof buf), 0);
    assert_memory_equal(buf, pat, 2048);
    assert_true(all_bytes(buf + 2048, 2048, 0));

    /* metadata means nothing to a protocol: refused, as file-posix does */
    assert_int_equal(
        img->drv->truncate(img, 1 * MiB, false, BLK_PREALLOC_METADATA, false), -ENOTSUP);
    assert_string_equal(blk_error_message(), "Unsupported preallocation mode: metadata");
    blk_error_clear();
    assert_int_equal(img->size, 1 * MiB - 2048);

    /* Grow again: the cut data must not come back. */
    assert_int_equal(img->drv->truncate(img, 1 * MiB, false, BLK_PREALLOC_OFF, false), 0);
    assert_int_equal(rd(img, 1 * MiB - 4096, buf, sizeof buf), 0);
    assert_memory_equal(buf, pat, 2048);
    assert_true(all_bytes(buf + 2048, 2048, 0));

    /* falloc: the new part is allocated. */
    int64_t before = img->drv->get_allocated_size(img);
    assert_int_equal(img->drv->truncate(img, 3 * MiB, true, BLK_PREALLOC_FALLOC, false),
                     0);
    assert_int_equal(img->size, 3 * MiB);
    assert_int_equal(file_size(p), 3 * MiB);
    assert_true(img->drv->get_allocated_size(img) >= before + (int64_t)(2 * MiB));

    /* full, to an unaligned size. */
    before = img->drv->get_allocated_size(img);
    assert_int_equal(
        img->drv->truncate(img, 5 * MiB + 123, true, BLK_PREALLOC_FULL, false), 0);
    assert_int_equal(img->size, 5 * MiB + 123);
    assert_int_equal(file_size(p), 5 * MiB + 123);
    assert_true(img->drv->get_allocated_size(img) >= before + (int64_t)(2 * MiB));
    memset(big, 0xee, 5 * MiB + 123);
    assert_int_equal(rd(img, 0, big, 5 * MiB + 123), 0);
    assert_true(all_bytes(big, 1 * MiB - 4096, 0));
    assert_memory_equal(big + 1 * MiB - 4096, pat, 2048);
    assert_true(all_bytes(big + 1 * MiB - 2048, 4 * MiB + 2048 + 123, 0));

    /* Shrinking with preallocation is refused, size unchanged. */
    assert_true(img->drv->truncate(img, 1 * MiB, true, BLK_PREALLOC_FALLOC, true) < 0);
    assert_non_null(blk_error_message());
    assert_non_null(strstr(blk_error_message(), "preallocation"));
    blk_error_clear();
    assert_int_equal(img->size, 5 * MiB + 123);
    assert_int_equal(file_size(p), 5 * MiB + 123);
    assert_true(img->drv->has_zero_init(img));
    close_img(img);

    /* Read-only images cannot be resized. */
    img = open_img(p, true, mode);
    assert_true(img->drv->truncate(img, 1 * MiB, true, BLK_PREALLOC_OFF, true) < 0);
    assert_non_null(blk_error_message());
    blk_error_clear();
    assert_int_equal(file_size(p), 5 * MiB + 123);
    close_img(img);
    unlink(p);
}

static void test_truncate(void **state)
{
    (void)state;
    check_truncate(tmpdir, BLK_CACHE_WRITEBACK);
    if (!direct_dir) {
        tu_skip("O_DIRECT works in no folder here");
    }
    check_truncate(direct_dir, BLK_CACHE_NONE);
}

/*
 * Growth with fallocate (qcow2/grow.c's steps) while a write holds s->lock
 * shared, as a ring write does until its completion is reaped (uring.c
 * invariant 1): the growth takes the lock shared too (file.c invariant 6:
 * it cuts nothing), so it never waits as a writer for the write to end --
 * at depth 32 every growth step drained the queue and waited for the
 * reaper (issue 30).  The growth runs on a thread of its own while this
 * one holds the lock; this one watches for either the growth's end or a
 * writer waiting, so without the shared path the test fails instead of
 * hanging.  The new bytes read as zeros, the data before them stays, and
 * img->size is the file's (invariant 5).  A growth that fails (past the
 * file size limit) leaves the file as it was.
 */
typedef struct GrowJob {
    BlkNode *img;
    uint64_t size;
    int ret;
    int done; /* atomic */
} GrowJob;

static gpointer grow_thread(gpointer opaque)
{
    GrowJob *j = opaque;

    j->ret = j->img->drv->truncate(j->img, j->size, false, BLK_PREALLOC_FALLOC, false);
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void check_grow_shared(const char *dir, BlkCacheMode mode)
{
    g_autofree char *p = tpath(dir, "grow.img");
    uint8_t pat[4096], buf[4096];
    bool waited = false;

    blk_error_clear();
    assert_int_equal(blk_file_create(p, 1 * MiB, BLK_PREALLOC_OFF), 0);
    BlkNode *img = open_img(p, false, mode);
    FileState *s = img->opaque;
    fill_pattern(pat, sizeof pat, 21);
    assert_int_equal(wr(img, 1 * MiB - 4096, pat, sizeof pat, 0), 0);

    for (int step = 1; step <= 3; step++) {
        GrowJob j = {.img = img, .size = (1 + (uint64_t)step) * MiB};
        assert_true(file_lock_try_shared(s)); /* a write in flight */
        GThread *th = g_thread_new("grow", grow_thread, &j);
        while (!__atomic_load_n(&j.done, __ATOMIC_ACQUIRE)) {
            if (__atomic_load_n(&s->lock.writers_waiting, __ATOMIC_SEQ_CST) > 0) {
                waited = true; /* the growth waits for the lock exclusively */
                break;
            }
            g_thread_yield();
        }
        file_unlock(s, LOCK_SHARED);
        g_thread_join(th);
        assert_false(waited);
        assert_int_equal(j.ret, 0);
        assert_int_equal(img->size, j.size);
        assert_int_equal(file_size(p), j.size);
    }
    assert_int_equal(rd(img, 1 * MiB - 4096, buf, sizeof buf), 0);
    assert_memory_equal(buf, pat, sizeof pat);
    assert_int_equal(rd(img, 4 * MiB - 4096, buf, sizeof buf), 0);
    assert_true(all_bytes(buf, sizeof buf, 0));

    /* Past the file size limit: refused, the file as it was. */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 6 * MiB;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    assert_true(img->drv->truncate(img, 8 * MiB, false, BLK_PREALLOC_FALLOC, false) < 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
    assert_non_null(blk_error_message());
    blk_error_clear();
    assert_int_equal(img->size, 4 * MiB);
    assert_int_equal(file_size(p), 4 * MiB);
    close_img(img);
    unlink(p);
}

static void test_grow_shared(void **state)
{
    (void)state;
    check_grow_shared(tmpdir, BLK_CACHE_WRITEBACK);
    if (!direct_dir) {
        tu_skip("O_DIRECT works in no folder here");
    }
    check_grow_shared(direct_dir, BLK_CACHE_NONE);
}

/*
 * blk_file_create as qemu-img create -f raw: an existing file is cut to the
 * new size and reads as zeros, off and metadata stay sparse, falloc and full
 * allocate; a failure says "Could not create 'FILE': strerror".
 */
static void test_create(void **state)
{
    (void)state;
    const BlkPrealloc modes[] = {BLK_PREALLOC_OFF, BLK_PREALLOC_METADATA,
                                 BLK_PREALLOC_FALLOC, BLK_PREALLOC_FULL};
    const uint64_t size = 1 * MiB + 123;

    for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
        g_autofree char *p = tpath(tmpdir, "create.img");
        blk_error_clear();
        uint8_t junk[8192];
        struct stat st;

        /* An existing file is cut to the new size. */
        memset(junk, 0x99, sizeof junk);
        write_file(p, junk, sizeof junk);
        assert_int_equal(blk_file_create(p, size, modes[i]), 0);
        assert_null(blk_error_message());
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_size, size);
        if (modes[i] == BLK_PREALLOC_FALLOC || modes[i] == BLK_PREALLOC_FULL) {
            assert_true((uint64_t)st.st_blocks * 512 >= size);
        } else {
            assert_true((uint64_t)st.st_blocks * 512 < 256 * KiB);
        }
        size_t n;
        g_autofree uint8_t *all = read_all(p, &n);
        assert_int_equal(n, size);
        assert_true(all_bytes(all, n, 0));

        BlkNode *img = open_img(p, true, BLK_CACHE_WRITEBACK);
        assert_int_equal(img->size, size);
        assert_int_equal(img->drv->get_allocated_size(img), (int64_t)st.st_blocks * 512);
        close_img(img);
        unlink(p);
    }

    blk_error_clear();
    g_autofree char *bad = tpath(tmpdir, "no-such-dir/x.img");
    g_autofree char *msg =
        g_strdup_printf("Could not create '%s': No such file or directory", bad);
    assert_int_equal(blk_file_create(bad, 1 * MiB, BLK_PREALLOC_OFF), -ENOENT);
    assert_non_null(blk_error_message());
    assert_int_equal(blk_error_code(), ENOENT);
    assert_string_equal(blk_error_message(), msg);

    /* Empty file. */
    g_autofree char *p0 = tpath(tmpdir, "empty.img");
    assert_int_equal(blk_file_create(p0, 0, BLK_PREALLOC_FULL), 0);
    assert_int_equal(file_size(p0), 0);
    unlink(p0);
}

/*
 * Discard punches a hole (as QEMU's file-posix, PUNCH_HOLE|KEEP_SIZE) and
 * never changes the size, past EOF either (file.c invariant 5).
 */
static void test_pdiscard(void **state)
{
    (void)state;
    g_autofree char *p = tpath(tmpdir, "discard.img");
    g_autofree uint8_t *buf = g_malloc(2 * MiB);
    bool punch = punch_and_seek_work(tmpdir);

    memset(buf, 0x42, 2 * MiB);
    write_file(p, buf, 2 * MiB);
    BlkNode *img = open_img(p, false, BLK_CACHE_WRITEBACK);
    int64_t before = img->drv->get_allocated_size(img);
    assert_int_equal(img->drv->pdiscard(img, 512 * KiB, 512 * KiB), 0);
    assert_int_equal(img->drv->pdiscard(img, 2 * MiB - 10, 100), 0); /* past EOF */
    assert_int_equal(img->size, 2 * MiB);
    assert_int_equal(file_size(p), 2 * MiB);
    if (punch) {
        int fd = open(p, O_RDONLY);
        assert_true(lseek(fd, 512 * KiB, SEEK_DATA) >= (off_t)(1 * MiB));
        close(fd);
        assert_true(img->drv->get_allocated_size(img) <= before - (int64_t)(512 * KiB));
    }
    close_img(img);
    unlink(p);
}

/*
 * A block device: its size from BLKGETSIZE64, no zero init, the O_DIRECT
 * alignment is the logical sector size (file.c invariant 1), it never grows
 * (invariant 5; QEMU's "Cannot grow device files"), BLKZEROOUT zeroes and
 * refuses unaligned ranges under NO_FALLBACK.
 */
static void test_block_device(void **state)
{
    (void)state;
    g_autofree char *backing = tpath(tmpdir, "loop-backing.img");
    g_autofree char *dev = NULL;
    blk_error_clear();
    const uint64_t size = 4 * MiB;
    uint8_t pat[8192], buf[8192];
    BlkStatus st;

    assert_int_equal(blk_file_create(backing, size, BLK_PREALLOC_OFF), 0);
    int lfd = loop_attach(backing, &dev);
    if (lfd < 0) {
        unlink(backing);
        g_clear_pointer(&backing, g_free); /* a skip leaves nothing allocated */
        tu_skip("no free loop device (needs root and /dev/loop-control)");
    }

    for (int pass = 0; pass < 2; pass++) {
        BlkCacheMode mode = pass ? BLK_CACHE_NONE : BLK_CACHE_WRITEBACK;
        BlkNode *img = open_img(dev, false, mode);
        int ssz = 0;
        assert_int_equal(ioctl(lfd, BLKSSZGET, &ssz), 0);

        assert_true(img->is_block_device);
        assert_int_equal(img->size, size);
        assert_false(img->drv->has_zero_init(img));
        assert_int_equal(img->drv->get_allocated_size(img), 0); /* as QEMU's */
        assert_int_equal(img->request_alignment, pass ? (uint32_t)ssz : 1); /* inv. 1 */

        assert_int_equal(img->drv->block_status(img, 4096, 1 * MiB, &st), 0);
        assert_int_equal(st.flags, BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID |
                                       BLK_STATUS_ALLOCATED);
        assert_int_equal(st.pnum, 1 * MiB);
        assert_int_equal(st.map, 4096);

        assert_true(img->drv->truncate(img, size + 512, false, BLK_PREALLOC_OFF, false) <
                    0);
        assert_string_equal(blk_error_message(), "Cannot grow device files");
        blk_error_clear();
        assert_int_equal(
            img->drv->truncate(img, size - 512, false, BLK_PREALLOC_OFF, true), 0);
        assert_int_equal(img->size, size);
        assert_true(img->drv->truncate(img, size - 512, true, BLK_PREALLOC_OFF, true) <
                    0);
        blk_error_clear();

        /* Round trip, unaligned too (bounce buffers with O_DIRECT: invariant 1). */
        fill_pattern(pat, sizeof pat, 20 + pass);
        assert_int_equal(wr(img, 8192, pat, sizeof pat, 0), 0);
        assert_int_equal(wr(img, 20001, pat, 333, 0), 0);
        assert_int_equal(img->drv->flush(img), 0);
        assert_int_equal(rd(img, 8192, buf, sizeof buf), 0);
        assert_memory_equal(buf, pat, sizeof pat);
        assert_int_equal(rd(img, 20001, buf, 333), 0);
        assert_memory_equal(buf, pat, 333);
        assert_int_equal(img->size, size); /* devices never grow (invariant 5) */

        /* Aligned zeroing works with BLKZEROOUT. */
        assert_int_equal(img->drv->pwrite_zeroes(img, 8192, 4096, BLK_REQ_NO_FALLBACK),
                         0);
        assert_int_equal(rd(img, 8192, buf, sizeof buf), 0);
        assert_true(all_bytes(buf, 4096, 0));
        assert_memory_equal(buf + 4096, pat + 4096, 4096);

        /* Unaligned: BLKZEROOUT refuses; NO_FALLBACK reports it, else written. */
        assert_int_equal(
            img->drv->pwrite_zeroes(img, 12288 + 100, 1000, BLK_REQ_NO_FALLBACK),
            -ENOTSUP);
        assert_int_equal(rd(img, 8192, buf, sizeof buf), 0);
        assert_memory_equal(buf + 4096, pat + 4096, 4096);
        assert_int_equal(
            img->drv->pwrite_zeroes(img, 12288 + 100, 1000, BLK_REQ_MAY_UNMAP), 0);
        assert_int_equal(rd(img, 8192, buf, sizeof buf), 0);
        assert_true(all_bytes(buf, 4096, 0));
        assert_memory_equal(buf + 4096, pat + 4096, 100);
        assert_true(all_bytes(buf + 4196, 1000, 0));
        assert_memory_equal(buf + 5196, pat + 5196, sizeof pat - 5196);

        /* Whole blocks and unaligned edges (invariant 12): BLKZEROOUT for
         * the blocks, the edges written; NO_FALLBACK refuses the edges. */
        assert_int_equal(wr(img, 8192, pat, sizeof pat, 0), 0);
        assert_int_equal(img->drv->pwrite_zeroes(img, 8192 + 100, (uint64_t)ssz * 2,
                                                 BLK_REQ_NO_FALLBACK),
                         -ENOTSUP);
        assert_int_equal(rd(img, 8192, buf, sizeof buf), 0);
        assert_memory_equal(buf, pat, sizeof pat);
        assert_int_equal(img->drv->pwrite_zeroes(img, 8192 + 100, (uint64_t)ssz * 2, 0),
                         0);
        assert_int_equal(rd(img, 8192, buf, sizeof buf), 0);
        assert_memory_equal(buf, pat, 100);
        assert_true(all_bytes(buf + 100, (size_t)ssz * 2, 0));
        assert_memory_equal(buf + 100 + ssz * 2, pat + 100 + ssz * 2,
                            sizeof pat - 100 - (size_t)ssz * 2);

        assert_int_equal(img->drv->pdiscard(img, 1 * MiB, 1 * MiB), 0);
        assert_int_equal(img->drv->pdiscard(img, 1, 3), 0); /* unaligned: advisory */
        close_img(img);
    }
    close(lfd);
    blk_error_clear();
    /* create on a device: fine if big enough, else a clear error. */
    g_clear_pointer(&dev, g_free);
    lfd = loop_attach(backing, &dev);
    if (lfd >= 0) {
        assert_int_equal(blk_file_create(dev, size, BLK_PREALLOC_OFF), 0);
        assert_true(blk_file_create(dev, size + 1, BLK_PREALLOC_OFF) < 0);
        assert_non_null(strstr(blk_error_message(), "too small"));
        close(lfd);
    }
    unlink(backing);
}
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zeroes),       cmocka_unit_test(test_no_fallback),
        cmocka_unit_test(test_block_status), cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_grow_shared),  cmocka_unit_test(test_create),
        cmocka_unit_test(test_pdiscard),     cmocka_unit_test(test_block_device),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
