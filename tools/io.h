/*
 * tools/io.h: what the two halves of "qimg io" share: the command loop
 * (io.c: options, the command table, line splitting, help, quit) and the
 * commands that do I/O (io-cmds.c).  Internal to tools/.
 */
#ifndef QIMG_TOOL_IO_H
#define QIMG_TOOL_IO_H

#include "qimg-tool.h"

typedef struct IoCtx {
    QimgImage *img;
    bool read_only;
    bool quit;
} IoCtx;

/* Print the usage line "name args -- description" of a command (io.c). */
void io_command_usage(const char *name);

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

#endif
