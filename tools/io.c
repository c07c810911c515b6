/*
 * qimg io [-f fmt] [-t cache] [-n] [-r] [-s] [-U] [-i aio] [-c CMD]... [FILE]
 *
 * A qemu-io compatible command runner over the public API, so that one
 * command list can be run through qemu-io and through qimg and the outputs
 * compared (after the timing lines are filtered, as QEMU's iotests do).
 * Without -c, commands are read from standard input with a "qimg-io> "
 * prompt ("qemu-io> " under the qemu-io personality).  Without FILE, the
 * list starts with no image (the open command opens one).
 *
 * Owns: the options, the command table, how a line becomes a command (help
 * and quit included) and the exit status.  The image's open and close and
 * the commands about it are in io-open.c; the I/O commands in io-cmds.c,
 * io-vec.c (readv, writev) and io-aio.c; map, alloc and info in io-map.c.
 *
 * Facts learnt from running qemu-io 7.2 (not from its source):
 *  1. A command line is split at single spaces (empty words are dropped);
 *     the name or its one-letter alias picks the command; options are
 *     parsed with getopt (so they may follow the arguments).  With no image
 *     open, a command other than open, help, quit, sleep, sigraise and
 *     abort reads "no file open, try 'help open'" (stderr); then the
 *     argument count is checked ("bad argument count N to read, expected
 *     at least 2 arguments", on stderr), then, for commands that write, the
 *     image must be writable ("qemu-io: Block node is read-only").
 *  2. The exit status is 1 if any command failed (a pattern mismatch
 *     counts), else 0; "quit" stops the list.
 *  3. An open failure reads "can't open device F: <reason>", the reason
 *     one layer down from qemu-img's: "Could not open 'F': " appears only
 *     in front of a bare strerror ("Failed to get \"write\" lock", and
 *     "force-share=on can only be used with read-only images" stand alone).
 *     It fails the start: nothing runs, the exit status is 1.
 *  4. -C (copy-on-read), -k (native AIO), -m (misaligned buffers), -d
 *     MODE, -T (tracing), --object and --image-opts are options of qemu-io;
 *     qimg refuses those it cannot honour (io-open.c), and -T always;
 *     --object takes secrets (tools/objects.c); -m misaligns the buffers
 *     (io-cmds.c fact 4); --image-opts names the image by options
 *     (api/json-name.c).
 */
#include "io.h"
#include "qimg/aio.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "qimg-io> ", "qemu-io> " under the qemu-io personality */
#define IO_PROMPT_FMT "%s> "

enum {
    IO_WRITES = 1 << 0,    /* needs a writable image */
    IO_NOFILE_OK = 1 << 1, /* runs with no image open */
};

typedef struct IoCommand {
    const char *name;
    const char *alias;
    int (*run)(IoCtx *io, int argc, char **argv);
    int argmin, argmax; /* argmax -1: no limit */
    unsigned flags;     /* IO_* (fact 1) */
    const char *args;   /* NULL: none (usage_of) */
    const char *oneline;
} IoCommand;

/* "name args -- oneline"; "name -- oneline" without args (map's are "");
 * help names the command as it was asked for (an alias: "r [-abCqv] ...") */
static void usage_named(const IoCommand *c, const char *name)
{
    printf("%s %s%s-- %s\n", name, c->args ? c->args : "", c->args ? " " : "",
           c->oneline);
}

static void usage_of(const IoCommand *c)
{
    usage_named(c, c->name);
}

static int quit_f(IoCtx *io, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    io->quit = true;
    return 0;
}

static int help_f(IoCtx *io, int argc, char **argv);

static const IoCommand io_commands[] = {
    {"abort", NULL, io_cmd_abort, 0, 0, IO_NOFILE_OK, NULL,
     "simulate a program crash using abort(3)"},
    {"aio_flush", NULL, io_cmd_aio_flush, 0, 0, 0, NULL,
     "completes all outstanding aio requests"},
    {"aio_read", NULL, io_cmd_aio_read, 2, -1, 0, "[-Ciqv] [-P pattern] off len [len..]",
     "asynchronously reads a number of bytes"},
    {"aio_write", NULL, io_cmd_aio_write, 2, -1, IO_WRITES,
     "[-Cfiquz] [-P pattern] off len [len..]", "asynchronously writes a number of bytes"},
    {"alloc", "a", io_cmd_alloc, 1, 2, 0, "offset [count]",
     "checks if offset is allocated in the file"},
    {"break", NULL, io_cmd_breakpoint, 2, 2, 0, "event tag",
     "sets a breakpoint on event and tags the stopped request as tag"},
    {"close", "c", io_cmd_close, 0, 0, 0, NULL, "close the current open file"},
    {"discard", "d", io_cmd_discard, 2, -1, IO_WRITES, "[-Cq] off len",
     "discards a number of bytes at a specified offset"},
    {"flush", "f", io_cmd_flush, 0, 0, 0, NULL, "flush all in-core file state to disk"},
    {"help", "?", help_f, 0, 1, IO_NOFILE_OK, "[command]",
     "help for one or all commands"},
    {"info", "i", io_cmd_info, 0, 0, 0, NULL,
     "prints information about the current file"},
    {"length", "l", io_cmd_length, 0, 0, 0, NULL, "gets the length of the current file"},
    {"map", NULL, io_cmd_map, 0, 0, 0, "", "prints the allocated areas of a file"},
    {"open", "o", io_cmd_open, 1, -1, IO_NOFILE_OK,
     "[-rsCnkU] [-t cache] [-d discard] [-o options] [path]",
     "open the file specified by path"},
    {"quit", "q", quit_f, 0, 0, IO_NOFILE_OK, NULL, "exit the program"},
    {"read", "r", io_cmd_read, 2, -1, 0,
     "[-abCqv] [-P pattern [-s off] [-l len]] off len",
     "reads a number of bytes at a specified offset"},
    {"readv", NULL, io_cmd_readv, 2, -1, 0, "[-Cqv] [-P pattern] off len [len..]",
     "reads a number of bytes at a specified offset"},
    {"remove_break", NULL, io_cmd_breakpoint, 1, 1, 0, "tag",
     "remove a breakpoint by tag"},
    {"reopen", NULL, io_cmd_reopen, 0, -1, 0, "[(-r|-w)] [-c cache] [-o options]",
     "reopens an image with new options"},
    {"resume", NULL, io_cmd_breakpoint, 1, 1, 0, "tag",
     "resumes the request tagged as tag"},
    {"sigraise", NULL, io_cmd_sigraise, 1, 1, IO_NOFILE_OK, "signal", "raises a signal"},
    {"sleep", NULL, io_cmd_sleep, 1, 1, IO_NOFILE_OK, NULL,
     "waits for the given value in milliseconds"},
    {"truncate", "t", io_cmd_truncate, 1, 3, IO_WRITES, "[-m prealloc_mode] off",
     "truncates the current file at the given offset"},
    {"wait_break", NULL, io_cmd_breakpoint, 1, 1, 0, "tag",
     "waits for the suspension of a request"},
    {"write", "w", io_cmd_write, 2, -1, IO_WRITES,
     "[-bcCfnquz] [-P pattern | -s source_file] off len",
     "writes a number of bytes at a specified offset"},
    {"writev", NULL, io_cmd_writev, 2, -1, IO_WRITES,
     "[-Cfq] [-P pattern] off len [len..]",
     "writes a number of bytes at a specified offset"},
};

static const IoCommand *find_command(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(io_commands); i++) {
        const IoCommand *c = &io_commands[i];
        if (strcmp(c->name, name) == 0 || (c->alias && strcmp(c->alias, name) == 0)) {
            return c;
        }
    }
    return NULL;
}

void io_command_usage(const char *name)
{
    usage_of(find_command(name));
}

static int help_f(IoCtx *io, int argc, char **argv)
{
    (void)io;
    if (argc == 2) {
        const IoCommand *c = find_command(argv[1]);
        if (!c) {
            printf("command %s not found\n", argv[1]);
            return -EINVAL;
        }
        usage_named(c, argv[1]);
        if (io_command_help(c->name)) { /* io-help.c fact 1 */
            fputs(io_command_help(c->name), stdout);
        }
        return 0;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(io_commands); i++) {
        usage_of(&io_commands[i]);
    }
    printf("\nUse 'help commandname' for extended help.\n");
    return 0;
}

/* Run one command line (fact 1); returns its result (< 0 on failure). */
static int run_line(IoCtx *io, const char *line)
{
    g_autofree char *copy = g_strdup(line);
    g_autoptr(GPtrArray) words = g_ptr_array_new();
    const IoCommand *c;
    char *p = copy, *w;
    int argc;

    while ((w = strsep(&p, " ")) != NULL) {
        if (*w) {
            g_ptr_array_add(words, w);
        }
    }
    if (words->len == 0) {
        return 0;
    }
    argc = (int)words->len;
    g_ptr_array_add(words, NULL);
    c = find_command(words->pdata[0]);
    if (!c) {
        fprintf(stderr, "command \"%s\" not found\n", (char *)words->pdata[0]);
        return -EINVAL;
    }
    if (!io->img && !(c->flags & IO_NOFILE_OK)) {
        fprintf(stderr, "no file open, try 'help open'\n");
        return -EINVAL;
    }
    if (argc - 1 < c->argmin || (c->argmax >= 0 && argc - 1 > c->argmax)) {
        fflush(stdout);
        if (c->argmax == -1) {
            fprintf(stderr,
                    "bad argument count %d to %s, expected at least %d arguments\n",
                    argc - 1, (char *)words->pdata[0], c->argmin);
        } else if (c->argmin == c->argmax) {
            fprintf(stderr, "bad argument count %d to %s, expected %d arguments\n",
                    argc - 1, (char *)words->pdata[0], c->argmin);
        } else {
            fprintf(stderr,
                    "bad argument count %d to %s, expected between %d and %d "
                    "arguments\n",
                    argc - 1, (char *)words->pdata[0], c->argmin, c->argmax);
        }
        return -EINVAL;
    }
    if ((c->flags & IO_WRITES) && io->read_only) {
        tool_error("Block node is read-only");
        return -EPERM;
    }
    optind = 0; /* full getopt reset (glibc) for every command */
    opterr = 1;
    return c->run(io, argc, (char **)words->pdata);
}

static void io_usage(void)
{
    const char *self = strcmp(tool_program(), "qemu-io") == 0 ? "qemu-io" : "qimg io";

    printf("Usage: %s [OPTIONS]... [-c STRING]... [file]\n", self);
    printf("qemu-io compatible disk exerciser\n"
           "\n"
           "  -c, --cmd STRING     execute command with its arguments\n"
           "                       from the given string\n"
           "  -f, --format FMT     specifies the block driver to use\n"
           "  -r, --read-only      export read-only\n"
           "  -s, --snapshot       use snapshot file (writes are discarded)\n"
           "  -n, --nocache        disable host cache, short for -t none\n"
           "  -i, --aio=MODE       use AIO mode (threads or io_uring)\n"
           "  -t, --cache=MODE     use the given cache mode for the image\n"
           "                       (default: writethrough, as qemu-io)\n"
           "  -d, --discard=MODE   discard mode: unmap (qimg's only one)\n"
           "  -U, --force-share    force shared permissions\n"
           "  -h, --help           display this help and exit\n"
           "\n"
           "  -V, --version        output version information and exit\n"
           "\n"
           "See '%s -c help' for information on available commands.\n",
           self);
}

/* Run one line and what completed meanwhile; remember a failure (fact 2). */
static void run_one(IoCtx *io, const char *line, int *last_error)
{
    int ret = run_line(io, line);

    io_aio_poll(io);       /* io-aio.c: completions after each line */
    io_end_on_verdict(io); /* io-cmds.c fact 6: a request in flight found one */
    fflush(stdout);
    if (ret < 0) {
        *last_error = ret;
    }
}

int cmd_io(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"cmd", required_argument, NULL, 'c'},
        {"format", required_argument, NULL, 'f'},
        {"read-only", no_argument, NULL, 'r'},
        {"snapshot", no_argument, NULL, 's'},
        {"nocache", no_argument, NULL, 'n'},
        {"copy-on-read", no_argument, NULL, 'C'},
        {"misalign", no_argument, NULL, 'm'},
        {"native-aio", no_argument, NULL, 'k'},
        {"cache", required_argument, NULL, 't'},
        {"force-share", no_argument, NULL, 'U'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"aio", required_argument, NULL, 'i'},
        {"discard", required_argument, NULL, 'd'},
        {"trace", required_argument, NULL, 'T'},
        {"object", required_argument, NULL, 'O'},
        {"image-opts", no_argument, NULL, 'I'},
        {NULL, 0, NULL, 0},
    };
    g_autoptr(GPtrArray) cmds = g_ptr_array_new();
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    bool aio_given = false; /* else the aio_* commands set up the defaults */
    bool snapshot = false;
    IoCtx io = {0};
    int c, last_error = 0;

    oo.cache = QIMG_CACHE_WRITETHROUGH;
    while ((c = getopt_long(argc, argv, "c:f:rsnt:UhVi:d:kCmT:", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            g_ptr_array_add(cmds, optarg);
            break;
        case 'f':
            oo.format = optarg;
            break;
        case 'V':
            tool_print_version();
            return 0;
        case 'r':
            oo.read_only = true;
            break;
        case 's':
            snapshot = true;
            break;
        case 'U':
            oo.force_share = true;
            break;
        case 'h':
            io_usage();
            return 0;
        case 'i': /* the engine of the aio_* commands (io-aio.c) */
            aio_given = true;
            if (io_parse_aio(optarg, &ao) < 0) {
                return 1;
            }
            break;
        case 'm': /* fact 4; io-cmds.c fact 4 */
            io_set_misalign(true);
            break;
        case 'T':
            tool_error("tracing (-T) is not supported by qimg");
            return 1;
        case 'O': { /* --object: secrets, as qemu-io (tools/objects.c) */
            int orc = tool_object_add(optarg);
            if (orc >= 0) {
                return orc;
            }
            break;
        }
        case 'I': /* --image-opts: the name is key=value options */
            oo.image_opts = true;
            io.image_opts = true; /* and open's (io-open.c fact 1) */
            break;
        case 'n':
        case 't':
        case 'd':
        case 'k':
        case 'C':
            if (io_parse_open_flag(c, optarg, &oo) < 0) {
                return 1;
            }
            break;
        default:
            io_usage();
            return 1;
        }
    }
    if (argc - optind > 1) {
        io_usage();
        return 1;
    }
    if (optind < argc &&
        io_open(&io, argv[optind], &oo, snapshot, aio_given ? &ao : NULL, false) < 0) {
        return 1; /* fact 3 */
    }

    if (cmds->len) {
        for (guint i = 0; i < cmds->len && !io.quit; i++) {
            run_one(&io, cmds->pdata[i], &last_error);
        }
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;

        while (!io.quit) {
            printf(IO_PROMPT_FMT,
                   strcmp(tool_program(), "qemu-io") == 0 ? "qemu-io" : "qimg-io");
            fflush(stdout);
            n = getline(&line, &cap, stdin);
            if (n < 0) {
                break;
            }
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) {
                line[--n] = '\0';
            }
            run_one(&io, line, &last_error);
        }
        free(line);
    }

    io_close(&io); /* io-open.c fact 7: the exit status is the commands' */
    g_free(io.name);
    g_free(io.format);
    g_free(io.options);
    return last_error < 0 ? 1 : 0;
}
