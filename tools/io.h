/*
 * tools/io.h: what the parts of "qimg io" share: the command loop (io.c:
 * options, the command table, line splitting, help, quit), the image and
 * its open/close/reopen (io-open.c), the I/O commands (io-cmds.c, io-vec.c,
 * io-aio.c), map/alloc/info (io-map.c) and the extended help (io-help.c).
 * Internal to tools/.
 */
#ifndef QIMG_TOOL_IO_H
#define QIMG_TOOL_IO_H

#include "qimg-tool.h"
#include "qimg/aio.h"

#include <limits.h>
#include <sys/uio.h>
#include <time.h>

/* QEMU's request limit: INT_MAX rounded down to 512 (io-vec.c fact 1) */
#define IO_MAX_REQUEST ((int64_t)INT_MAX & ~INT64_C(511))

typedef struct IoCtx {
    QimgImage *img; /* NULL: no file open (io-open.c fact 1) */
    bool read_only;
    bool quit;
    /* how img was opened, for reopen (io-open.c) */
    char *name;         /* as the user named it */
    char *format;       /* -f / -o driver=, or NULL: probed */
    QimgOpenOptions oo; /* oo.format is format, oo.options is options */
    char *options;      /* open -o's options for the library (io-open.c fact 5) */
    bool snapshot;      /* -s: img is a temporary overlay */
    bool unsafe_wt;     /* oo.cache unsafe: writethrough with no-flush (io-open.c) */
    bool aio_given;     /* ao was given (-i) */
    bool breakpoints;   /* a break was set: waits change (io-break.c) */
    bool image_opts;    /* --image-opts: open's path is options too */
    QimgAioOptions ao;
} IoCtx;

/* io-open.c: open name into io (no image open), with a -s overlay when
 * snapshot and the aio engine of ao when not NULL; prints the error (as
 * reopen prints it when reopen). */
int io_open(IoCtx *io, const char *name, const QimgOpenOptions *oo, bool snapshot,
            const QimgAioOptions *ao, bool reopen);
/* Close io->img if open (final flush); prints the format's close-time
 * lines (io-open.c fact 7); -EIO if the flush failed. */
int io_close(IoCtx *io);
/* The open options qemu-io's command line and open share: -n, -t MODE,
 * -d MODE, -C, -k (the refused ones refused); prints the error. */
int io_parse_open_flag(int c, const char *arg, QimgOpenOptions *oo);
/* -i MODE; prints the error. */
int io_parse_aio(const char *arg, QimgAioOptions *ao);
/* Wait for the asynchronous requests in flight (io-aio.c). */
void io_drain(IoCtx *io);
/* The image size as qemu-io sees it: rounded up to 512 (io-map.c fact 1). */
int64_t io_length(IoCtx *io);
/* qemu-io's human sizes: "4 KiB", "1.500 KiB", "17 bytes" (io-cmds.c fact 2). */
void io_cvtstr(double value, char *str, size_t size);

/* The text "help name" prints after the usage line, or NULL (io-help.c). */
const char *io_command_help(const char *name);
/* Print the usage line "name args -- description" of a command (io.c). */
void io_command_usage(const char *name);

/* Shared by the commands (io-cmds.c; facts 1, 2 there). */
int64_t io_cvtnum(const char *s);                      /* size suffixes; < 0: -errno */
void io_print_cvtnum_err(int64_t rc, const char *arg); /* "Parsing error: ..." */
int io_parse_pattern(const char *arg);                 /* 0..255, or < 0 (printed) */
void io_print_report(const char *op, struct timespec t, int64_t offset, int64_t count,
                     int64_t total, int cnt, bool cflag);
void io_dump_buffer(const uint8_t *buf, int64_t offset, int64_t len);
struct timespec io_tsub(struct timespec a, struct timespec b); /* a - b */
/* -errno of a failed call (frees err); the verdict of the image's blkverify
 * node instead ends qimg io (io_end_on_verdict). */
int io_take_errno(IoCtx *io, GError *err);
/* End qimg io as qemu-io ends when the image's blkverify node has a
 * verdict (io-cmds.c fact 6): the line on stderr, the image closed, exit
 * status 1.  Returns when there is none. */
void io_end_on_verdict(IoCtx *io);
/* Fill buf with the first count bytes of the file source (write -s). */
int io_read_source(const char *source, uint8_t *buf, int64_t count);

/* Request buffers as qemu-io's (io-cmds.c fact 4): aligned for O_DIRECT,
 * or IO_MISALIGN bytes past that after io_set_misalign(true) (-m, before
 * any buffer is made). */
#define IO_MISALIGN 16
typedef uint8_t IoBuf;
void io_set_misalign(bool on);
IoBuf *io_buf_alloc(size_t size);
void io_buf_free(IoBuf *buf);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(IoBuf, io_buf_free)

/* The buffers of "off len [len..]" (io-vec.c fact 1). */
typedef struct IoVec {
    int64_t offset, count; /* count: the sum of the lengths */
    IoBuf *buf;            /* count bytes, filled with the fill byte */
    struct iovec *iov;     /* niov pieces of buf */
    int niov;
} IoVec;

/* Parse argv[optind..argc) into v; prints the error (then io_vec_clear). */
int io_parse_vec(IoVec *v, int argc, char **argv, int fill);
void io_vec_clear(IoVec *v);
/* Are all count bytes of buf pattern?  Else prints qemu-io's mismatch line. */
bool io_verify_pattern(const uint8_t *buf, int64_t offset, int64_t count, int pattern);

/*
 * The commands of io-cmds.c.  io.c checked the argument count and, for
 * those that write, that the image is writable (io.c fact 1), and reset
 * getopt; argv[0] is the command's name.  Each prints its own results and
 * errors and returns 0 or a negative errno.
 */
int io_cmd_read(IoCtx *io, int argc, char **argv);
int io_cmd_write(IoCtx *io, int argc, char **argv);
int io_cmd_discard(IoCtx *io, int argc, char **argv);
int io_cmd_flush(IoCtx *io, int argc, char **argv);
int io_cmd_length(IoCtx *io, int argc, char **argv);
int io_cmd_truncate(IoCtx *io, int argc, char **argv);
int io_cmd_sleep(IoCtx *io, int argc, char **argv);
int io_cmd_abort(IoCtx *io, int argc, char **argv);
/* io-open.c */
int io_cmd_open(IoCtx *io, int argc, char **argv);
int io_cmd_close(IoCtx *io, int argc, char **argv);
int io_cmd_reopen(IoCtx *io, int argc, char **argv);
int io_cmd_sigraise(IoCtx *io, int argc, char **argv);
/* io-break.c: break, remove_break, resume and wait_break, by argv[0] */
int io_cmd_breakpoint(IoCtx *io, int argc, char **argv);
/* After an aio command that made before + 1 requests in flight: wait until
 * it completed or stopped at a breakpoint, when breakpoints were set. */
void io_break_settle(IoCtx *io, unsigned before);
/* Wait for the requests in flight while breakpoints may stop them: a
 * stopped one ends the wait (closing: quietly, the close resumes it; else
 * failing, as aio_flush). */
int io_break_drain(IoCtx *io, bool closing);
/* io-map.c */
int io_cmd_map(IoCtx *io, int argc, char **argv);
int io_cmd_alloc(IoCtx *io, int argc, char **argv);
int io_cmd_info(IoCtx *io, int argc, char **argv);
/* io-vec.c */
int io_cmd_readv(IoCtx *io, int argc, char **argv);
int io_cmd_writev(IoCtx *io, int argc, char **argv);
/* io-aio.c: the asynchronous commands */
int io_cmd_aio_read(IoCtx *io, int argc, char **argv);
int io_cmd_aio_write(IoCtx *io, int argc, char **argv);
int io_cmd_aio_flush(IoCtx *io, int argc, char **argv);
/* Run the callbacks of completed asynchronous requests (after each line). */
void io_aio_poll(IoCtx *io);

#endif
