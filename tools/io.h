/*
 * tools/io.h: what the two halves of "qimg io" share: the command loop
 * (io.c: options, the command table, line splitting, help, quit) and the
 * commands that do I/O (io-cmds.c).  Internal to tools/.
 */
#ifndef QIMG_TOOL_IO_H
#define QIMG_TOOL_IO_H

#include "qimg-tool.h"

#include <time.h>

typedef struct IoCtx {
    QimgImage *img;
    bool read_only;
    bool quit;
} IoCtx;

/* Print the usage line "name args -- description" of a command (io.c). */
void io_command_usage(const char *name);

/* Shared by the commands (io-cmds.c; facts 1, 2 there). */
int64_t io_cvtnum(const char *s);                      /* size suffixes; < 0: -errno */
void io_print_cvtnum_err(int64_t rc, const char *arg); /* "Parsing error: ..." */
int io_parse_pattern(const char *arg);                 /* 0..255, or < 0 (printed) */
void io_print_report(const char *op, struct timespec t, int64_t offset, int64_t count,
                     int64_t total, int cnt, bool cflag);
void io_dump_buffer(const uint8_t *buf, int64_t offset, int64_t len);
int io_take_errno(GError *err); /* -errno of a failed call; frees err */
/* Fill buf with the first count bytes of the file source (write -s). */
int io_read_source(const char *source, uint8_t *buf, int64_t count);

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
/* io-aio.c: the asynchronous commands */
int io_cmd_aio_read(IoCtx *io, int argc, char **argv);
int io_cmd_aio_write(IoCtx *io, int argc, char **argv);
int io_cmd_aio_flush(IoCtx *io, int argc, char **argv);
/* Run the callbacks of completed asynchronous requests (after each line). */
void io_aio_poll(IoCtx *io);

#endif
