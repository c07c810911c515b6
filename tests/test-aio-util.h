/*
 * tests/test-aio-util.h: what the tests of the asynchronous API through the
 * public headers share (test-aio.c, test-aio-workload.c): a fresh qcow2
 * image made by qemu-img, an open that fails the test with the message,
 * O_DIRECT-aligned buffers (so reads can take the io_uring path, uring.c
 * invariant 1), one request waited for, and waiting for completions with a
 * bound.
 *
 * Include after <cmocka.h> and test-util.h.
 */
#ifndef QIMG_TEST_AIO_UTIL_H
#define QIMG_TEST_AIO_UTIL_H

#include "qimg/aio.h"
#include "qimg/qimg.h"

#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>

#define MiB (UINT64_C(1) << 20)

static inline char *new_qcow2(const char *stem, uint64_t size, const char *opts)
{
    char *p = tu_fresh(stem);
    tu_run("qemu-img create -q -f qcow2 %s%s '%s' %" PRIu64, opts ? "-o " : "",
           opts ? opts : "", p, size);
    return p;
}

static inline QimgImage *open_image(const char *p, QimgCacheMode cache)
{
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    QimgImage *img;

    o.cache = cache;
    img = qimg_image_open(p, &o, &err);
    if (!img) {
        fail_msg("open %s: %s", p, err->message);
    }
    return img;
}

static inline uint8_t *aligned_buf(size_t len)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 4096, len), 0);
    return p;
}

static inline void aio_one_done(void *opaque, int ret, const GError *err)
{
    *(int *)opaque = ret;
    if (err) {
        fail_msg("asynchronous request: %s", err->message);
    }
}

/* One 4 KiB request at off, waited for; it must succeed. */
static inline void aio_one_4k(QimgImage *img, bool write, uint64_t off, uint8_t *buf)
{
    g_autoptr(GError) err = NULL;
    struct iovec iov = {.iov_base = buf, .iov_len = 4096};
    int ret = 1;

    assert_true(
        write ? qimg_image_aio_pwritev(img, off, &iov, 1, 0, aio_one_done, &ret, &err)
              : qimg_image_aio_preadv(img, off, &iov, 1, 0, aio_one_done, &ret, &err));
    while (ret == 1) {
        qimg_image_aio_wait(img);
    }
    assert_int_equal(ret, 0);
}

static inline bool fd_readable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

/* Run the callbacks of what completes within ms milliseconds (at least
 * one poll); the number run.  Never blocks past the bound, so a test can
 * wait for a request that a breakpoint may hold. */
static inline unsigned aio_poll_for(QimgImage *img, int ms)
{
    g_autoptr(GError) err = NULL;
    int fd = qimg_image_aio_fd(img, &err);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    assert_true(fd >= 0);
    (void)poll(&pfd, 1, ms);
    return qimg_image_aio_poll(img, 0);
}

#endif
