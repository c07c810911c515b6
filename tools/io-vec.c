/*
 * qimg io: the vectored commands readv and writev, and the "off len
 * [len..]" buffers they share with aio_read and aio_write (io-aio.c).
 *
 * Owns: how a list of lengths becomes one buffer cut into iovecs, its
 * limits and messages, the pattern check of a whole read, and readv's and
 * writev's options and reports.
 *
 * Facts learnt from running qemu-io 7.2 (not from its source):
 *  1. "off len [len..]": each length is one buffer of the request; a
 *     length over 2147483136 (QEMU's request limit, INT_MAX rounded down to
 *     512) reads "Argument 'L' exceeds maximum size 2147483136", a total
 *     over it "The total number of bytes exceed the maximum size
 *     2147483136"; a bad number is cvtnum's "Parsing error: ..." (all on
 *     stdout).  Zero lengths are allowed.
 *  2. "readv [-Cqv] [-P pattern] off len [len..]": the report is read's
 *     ("read T/T bytes at offset O"), -v dumps the whole request before it;
 *     a mismatch prints "Pattern verification failed at offset O, T bytes"
 *     (O the request's offset, T its total), the report still follows
 *     unless -q, and the command fails.  A failed read prints "readv
 *     failed: <strerror>".
 *  3. "writev [-Cfq] [-P pattern] off len [len..]": the buffers hold the
 *     pattern (default 0xcd); -f is FUA (here: the write, then a flush);
 *     the report is "wrote T/T bytes at offset O"; a failure "writev
 *     failed: <strerror>".  -q wins over -C.
 */
#include "io.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

int io_parse_vec(IoVec *v, int argc, char **argv, int fill)
{
    int64_t done = 0;

    *v = (IoVec){0};
    v->offset = io_cvtnum(argv[optind]);
    if (v->offset < 0) {
        io_print_cvtnum_err(v->offset, argv[optind]);
        return -EINVAL;
    }
    v->niov = argc - optind - 1;
    v->iov = g_new0(struct iovec, v->niov);
    for (int i = 0; i < v->niov; i++) {
        const char *arg = argv[optind + 1 + i];
        int64_t len = io_cvtnum(arg);
        if (len < 0) {
            io_print_cvtnum_err(len, arg);
            return -EINVAL;
        }
        if (len > IO_MAX_REQUEST) { /* fact 1 */
            printf("Argument '%s' exceeds maximum size %" PRId64 "\n", arg,
                   IO_MAX_REQUEST);
            return -EINVAL;
        }
        if (len > IO_MAX_REQUEST - v->count) {
            printf("The total number of bytes exceed the maximum size %" PRId64 "\n",
                   IO_MAX_REQUEST);
            return -EINVAL;
        }
        v->iov[i].iov_len = (size_t)len;
        v->count += len;
    }
    v->buf = io_buf_alloc((size_t)v->count);
    memset(v->buf, fill, (size_t)v->count);
    for (int i = 0; i < v->niov; done += (int64_t)v->iov[i].iov_len, i++) {
        v->iov[i].iov_base = v->buf + done;
    }
    return 0;
}

void io_vec_clear(IoVec *v)
{
    g_clear_pointer(&v->buf, io_buf_free);
    g_clear_pointer(&v->iov, g_free);
}

bool io_verify_pattern(const uint8_t *buf, int64_t offset, int64_t count, int pattern)
{
    for (int64_t i = 0; i < count; i++) {
        if (buf[i] != pattern) {
            printf("Pattern verification failed at offset %" PRId64 ", %" PRId64
                   " bytes\n",
                   offset, count);
            return false;
        }
    }
    return true;
}

int io_cmd_readv(IoCtx *io, int argc, char **argv)
{
    bool cflag = false, qflag = false, vflag = false, pflag = false;
    int pattern = 0, c, ret = 0;
    struct timespec t1, t2;
    GError *err = NULL;
    IoVec v;
    gboolean ok;

    while ((c = getopt(argc, argv, "CP:qv")) != -1) {
        switch (c) {
        case 'C':
            cflag = true;
            break;
        case 'P':
            pflag = true;
            pattern = io_parse_pattern(optarg);
            if (pattern < 0) {
                return -EINVAL;
            }
            break;
        case 'q':
            qflag = true;
            break;
        case 'v':
            vflag = true;
            break;
        default:
            io_command_usage("readv");
            return -EINVAL;
        }
    }
    if (optind > argc - 2) {
        io_command_usage("readv");
        return -EINVAL;
    }
    if (io_parse_vec(&v, argc, argv, 0xab) < 0) { /* io-cmds.c fact 3 */
        io_vec_clear(&v);
        return -EINVAL;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ok = qimg_image_preadv(io->img, (uint64_t)v.offset, v.iov, v.niov, &err);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    if (!ok) {
        ret = io_take_errno(io, err);
        printf("readv failed: %s\n", strerror(-ret));
        goto out;
    }
    if (pflag && !io_verify_pattern(v.buf, v.offset, v.count, pattern)) { /* fact 2 */
        ret = -EINVAL;
    }
    if (!qflag) {
        if (vflag) {
            io_dump_buffer(v.buf, v.offset, v.count);
        }
        io_print_report("read", io_tsub(t2, t1), v.offset, v.count, v.count, 1, cflag);
    }
out:
    io_vec_clear(&v);
    return ret;
}

int io_cmd_writev(IoCtx *io, int argc, char **argv)
{
    bool cflag = false, qflag = false, fua = false;
    int pattern = 0xcd, c, ret = 0;
    struct timespec t1, t2;
    GError *err = NULL;
    IoVec v;
    gboolean ok;

    while ((c = getopt(argc, argv, "CfqP:")) != -1) {
        switch (c) {
        case 'C':
            cflag = true;
            break;
        case 'f':
            fua = true;
            break;
        case 'q':
            qflag = true;
            break;
        case 'P':
            pattern = io_parse_pattern(optarg);
            if (pattern < 0) {
                return -EINVAL;
            }
            break;
        default:
            io_command_usage("writev");
            return -EINVAL;
        }
    }
    if (optind > argc - 2) {
        io_command_usage("writev");
        return -EINVAL;
    }
    if (io_parse_vec(&v, argc, argv, pattern) < 0) {
        io_vec_clear(&v);
        return -EINVAL;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ok = qimg_image_pwritev(io->img, (uint64_t)v.offset, v.iov, v.niov, &err);
    if (ok && fua) { /* fact 3 */
        ok = qimg_image_flush(io->img, &err);
    }
    clock_gettime(CLOCK_MONOTONIC, &t2);
    if (!ok) {
        ret = io_take_errno(io, err);
        printf("writev failed: %s\n", strerror(-ret));
    } else if (!qflag) {
        io_print_report("wrote", io_tsub(t2, t1), v.offset, v.count, v.count, 1, cflag);
    }
    io_vec_clear(&v);
    return ret;
}
