/*
 * qimg io: the asynchronous commands aio_read, aio_write and aio_flush, on
 * the asynchronous API (qimg/aio.h), so the iotests drive that path.
 *
 * Owns: their options, the requests in flight and what each prints when
 * it completes.  Completions are reported after every command line
 * (io_aio_poll), in aio_flush, and at exit (the close drains).
 *
 * Facts learnt from running qemu-io 7.2 (not from its source):
 *  1. "aio_read [-Ciqv] [-P pattern] off len [len..]" and "aio_write
 *     [-Cfiquz] [-P pattern] off len [len..]": several lengths make one
 *     vectored request; the report is read's / write's ("read T/C bytes at
 *     offset O", "wrote ..."), printed when the request completes.
 *  2. A submitted request makes the command succeed: a failed request
 *     prints "readv failed: <strerror>" or "aio_write failed: <strerror>",
 *     a mismatch "Pattern verification failed at offset O, N bytes", and
 *     neither changes the exit status.
 *  3. -z writes zeroes (-u: may unmap) and takes one length only ("-z
 *     supports only a single length parameter"); -f is FUA; -i (an invalid
 *     request for the statistics) is refused here: qimg keeps no block
 *     statistics.  qimg's aio_write also takes write's -s source_file (the
 *     crash-state explorer writes tagged sectors with it; qemu-io's has no
 *     -s).
 *  4. aio_flush waits for every request in flight (it flushes nothing).
 */
#include "io.h"
#include "qimg/aio.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

typedef struct AioReq {
    IoCtx *io;
    bool write, zero, pflag, qflag, vflag, cflag;
    int pattern;
    IoVec v; /* io-vec.c fact 1 */
    struct timespec t1;
} AioReq;

static void req_free(AioReq *r)
{
    io_vec_clear(&r->v);
    g_free(r);
}

static void aio_done(void *opaque, int ret, const GError *err)
{
    AioReq *r = opaque;
    struct timespec t2;

    (void)err;
    clock_gettime(CLOCK_MONOTONIC, &t2);
    g_autofree char *verdict =
        ret < 0 && r->io->img ? qimg_image_verify_verdict(r->io->img) : NULL;
    if (verdict) { /* io-cmds.c fact 6: io.c ends qimg io after the line */
        goto out;
    }
    if (ret < 0) { /* fact 2 */
        printf("%s failed: %s\n", r->write ? "aio_write" : "readv", strerror(-ret));
        goto out;
    }
    if (r->pflag && !r->write) {
        io_verify_pattern(r->v.buf, r->v.offset, r->v.count, r->pattern);
    }
    if (r->qflag) {
        goto out;
    }
    if (r->vflag && !r->write) {
        io_dump_buffer(r->v.buf, r->v.offset, r->v.count);
    }
    io_print_report(r->write ? "wrote" : "read", io_tsub(t2, r->t1), r->v.offset,
                    r->v.count, r->v.count, 1, r->cflag);
out:
    fflush(stdout);
    req_free(r);
}

static int aio_cmd(IoCtx *io, int argc, char **argv, bool write)
{
    const char *name = write ? "aio_write" : "aio_read";
    AioReq *r = g_new0(AioReq, 1);
    const char *source = NULL;
    unsigned flags = 0, before;
    GError *err = NULL;
    gboolean ok;
    int c;

    r->io = io; /* io-cmds.c fact 6: aio_done asks it for a verdict */
    r->write = write;
    r->pattern = write ? 0xcd : 0;
    while ((c = getopt(argc, argv, write ? "CfiqP:s:uz" : "CiqP:v")) != -1) {
        switch (c) {
        case 'C':
            r->cflag = true;
            break;
        case 'f':
            flags |= QIMG_AIO_FUA;
            break;
        case 'i':
            printf("%s: -i (an invalid request for the statistics) is not supported: "
                   "qimg keeps no block statistics\n",
                   name);
            goto fail;
        case 'q':
            r->qflag = true;
            break;
        case 'P':
            r->pflag = true;
            r->pattern = io_parse_pattern(optarg);
            if (r->pattern < 0) {
                goto fail;
            }
            break;
        case 's':
            source = optarg;
            break;
        case 'u':
            flags |= QIMG_AIO_MAY_UNMAP;
            break;
        case 'v':
            r->vflag = true;
            break;
        case 'z':
            r->zero = true;
            break;
        default:
            io_command_usage(name);
            goto fail;
        }
    }
    if (argc - optind < 2) {
        io_command_usage(name);
        goto fail;
    }
    if ((flags & QIMG_AIO_MAY_UNMAP) && !r->zero) {
        printf("-u requires -z to be specified\n");
        goto fail;
    }
    if (r->zero && r->pflag) {
        printf("-z and -P cannot be specified at the same time\n");
        goto fail;
    }
    if (r->zero && argc - optind != 2) {
        printf("-z supports only a single length parameter\n"); /* fact 3 */
        goto fail;
    }
    if (source && (r->zero || r->pflag)) {
        printf("-s cannot be combined with -z or -P\n");
        goto fail;
    }
    if (io_parse_vec(&r->v, argc, argv, write ? r->pattern : 0xab) < 0 ||
        (source && io_read_source(source, r->v.buf, r->v.count) < 0)) {
        goto fail;
    }
    clock_gettime(CLOCK_MONOTONIC, &r->t1);
    before = qimg_image_aio_in_flight(io->img);
    if (r->zero) {
        ok = qimg_image_aio_pwrite_zeroes(io->img, (uint64_t)r->v.offset,
                                          (uint64_t)r->v.count, flags, aio_done, r, &err);
    } else if (write) {
        ok = qimg_image_aio_pwritev(io->img, (uint64_t)r->v.offset, r->v.iov, r->v.niov,
                                    flags, aio_done, r, &err);
    } else {
        ok = qimg_image_aio_preadv(io->img, (uint64_t)r->v.offset, r->v.iov, r->v.niov,
                                   flags, aio_done, r, &err);
    }
    if (!ok) {
        printf("%s failed: %s\n", name, err->message);
        g_clear_error(&err);
        goto fail;
    }
    io_break_settle(io, before); /* io-break.c */
    return 0;
fail:
    req_free(r);
    return -EINVAL;
}

int io_cmd_aio_read(IoCtx *io, int argc, char **argv)
{
    return aio_cmd(io, argc, argv, false);
}

int io_cmd_aio_write(IoCtx *io, int argc, char **argv)
{
    return aio_cmd(io, argc, argv, true);
}

void io_drain(IoCtx *io)
{
    if (io->breakpoints) {
        io_break_drain(io, true); /* io-break.c */
        return;
    }
    while (io->img && qimg_image_aio_in_flight(io->img) > 0) {
        qimg_image_aio_wait(io->img);
    }
}

int io_cmd_aio_flush(IoCtx *io, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    if (io->breakpoints) {
        return io_break_drain(io, false); /* io-break.c */
    }
    io_drain(io); /* fact 4 */
    return 0;
}

void io_aio_poll(IoCtx *io)
{
    if (io->img) {
        qimg_image_aio_poll(io->img, 0);
    }
}
