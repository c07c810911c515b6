/*
 * qimg io [-f fmt] [-t cache] [-n] [-r] [-U] [-c CMD]... FILE
 *
 * A qemu-io compatible command runner over the public API, so that one
 * command list can be run through qemu-io and through qimg and the outputs
 * compared (after the timing lines are filtered, as QEMU's iotests do).
 * Commands: read, write, discard, flush, length, truncate, sleep, abort,
 * quit, help.  Without -c, commands are read from standard input with a
 * "qimg-io> " prompt (qemu-io's is "qemu-io> ").
 *
 * Owns: the options, the open, the command table, how a line becomes a
 * command (help and quit included) and the exit status; the commands that
 * do I/O, with their options, numbers and reports, are in io-cmds.c.
 *
 * Facts learnt from running qemu-io 7.2 (not from its source):
 *  1. A command line is split at single spaces (empty words are dropped);
 *     the name or its one-letter alias picks the command; options are
 *     parsed with getopt (so they may follow the arguments).  The argument
 *     count is checked first ("bad argument count N to read, expected at
 *     least 2 arguments", on stderr), then, for commands that write, the
 *     image must be writable ("qemu-io: Block node is read-only").
 *  2. The exit status is 1 if any command failed (a pattern mismatch
 *     counts), else 0; "quit" stops the list.
 *  3. An open failure reads "can't open device F: <reason>", the reason
 *     one layer down from qemu-img's: "Could not open 'F': " appears only
 *     in front of a bare strerror ("Failed to get \"write\" lock", and
 *     "force-share=on can only be used with read-only images" stand alone).
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

typedef struct IoCommand {
    const char *name;
    const char *alias;
    int (*run)(IoCtx *io, int argc, char **argv);
    int argmin, argmax; /* argmax -1: no limit */
    bool writes;        /* needs a writable image (fact 1) */
    const char *args;
    const char *oneline;
} IoCommand;

static void usage_of(const IoCommand *c)
{
    printf("%s %s -- %s\n", c->name, c->args, c->oneline);
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
    {"abort", NULL, io_cmd_abort, 0, 0, false, "",
     "simulate a program crash using abort(3)"},
    {"aio_flush", NULL, io_cmd_aio_flush, 0, 0, false, "",
     "completes all outstanding aio requests"},
    {"aio_read", NULL, io_cmd_aio_read, 2, -1, false,
     "[-Cqv] [-P pattern] off len [len..]", "asynchronously reads a number of bytes"},
    {"aio_write", NULL, io_cmd_aio_write, 2, -1, true,
     "[-Cfquz] [-P pattern | -s source_file] off len [len..]",
     "asynchronously writes a number of bytes"},
    {"discard", "d", io_cmd_discard, 2, -1, true, "[-Cq] off len",
     "discards a number of bytes at a specified offset"},
    {"flush", "f", io_cmd_flush, 0, 0, false, "", "flush all in-core file state to disk"},
    {"help", "?", help_f, 0, 1, false, "[command]", "help for one or all commands"},
    {"length", "l", io_cmd_length, 0, 0, false, "",
     "gets the length of the current file"},
    {"quit", "q", quit_f, 0, 0, false, "", "exit the program"},
    {"read", "r", io_cmd_read, 2, -1, false,
     "[-abCqv] [-P pattern [-s off] [-l len]] off len",
     "reads a number of bytes at a specified offset"},
    {"sleep", NULL, io_cmd_sleep, 1, 1, false, "",
     "waits for the given value in milliseconds"},
    {"truncate", "t", io_cmd_truncate, 1, 3, true, "[-m prealloc_mode] off",
     "truncates the current file at the given offset"},
    {"write", "w", io_cmd_write, 2, -1, true,
     "[-bcCfnquz] [-P pattern | -s source_file] off len",
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
            return 0;
        }
        usage_of(c);
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
    if (c->writes && io->read_only) {
        tool_error("Block node is read-only");
        return -EPERM;
    }
    optind = 0; /* full getopt reset (glibc) for every command */
    opterr = 1;
    return c->run(io, argc, (char **)words->pdata);
}

/* Fact 3: the library's message without its "Could not open 'F': ". */
static const char *open_reason(const char *name, const GError *err)
{
    g_autofree char *prefix = g_strdup_printf("Could not open '%s': ", name);
    const char *rest;

    if (!g_str_has_prefix(err->message, prefix)) {
        return err->message;
    }
    rest = err->message + strlen(prefix);
    return strcmp(rest, g_strerror(err->code)) == 0 ? err->message : rest;
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
           "  -n, --nocache        disable host cache, short for -t none\n"
           "  -t, --cache=MODE     use the given cache mode for the image\n"
           "                       (default: writethrough, as qemu-io)\n"
           "  -U, --force-share    force shared permissions\n"
           "  -h, --help           display this help and exit\n"
           "\n"
           "  -V, --version        output version information and exit\n"
           "\n"
           "See '%s -c help' for information on available commands.\n",
           self);
}

int cmd_io(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"cmd", required_argument, NULL, 'c'},
        {"format", required_argument, NULL, 'f'},
        {"read-only", no_argument, NULL, 'r'},
        {"nocache", no_argument, NULL, 'n'},
        {"cache", required_argument, NULL, 't'},
        {"force-share", no_argument, NULL, 'U'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"aio", required_argument, NULL, 'i'},
        {"discard", required_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    g_autoptr(GPtrArray) cmds = g_ptr_array_new();
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    bool aio_given = false; /* else the aio_* commands set up the defaults */
    IoCtx io = {0};
    GError *err = NULL;
    int c, last_error = 0;

    oo.cache = QIMG_CACHE_WRITETHROUGH;
    while ((c = getopt_long(argc, argv, "c:f:rnt:UhVi:d:kCm", longopts, NULL)) != -1) {
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
        case 'n':
            oo.cache = QIMG_CACHE_NONE;
            break;
        case 't':
            if (!qimg_cache_mode_parse(optarg, &oo.cache, NULL)) {
                tool_error("Invalid cache option: %s", optarg);
                return 1;
            }
            break;
        case 'U':
            oo.force_share = true;
            break;
        case 'h':
            io_usage();
            return 0;
        case 'i': /* the engine of the aio_* commands (io-aio.c) */
            aio_given = true;
            if (strcmp(optarg, "threads") == 0) {
                ao.engine = QIMG_AIO_ENGINE_THREADS;
            } else if (strcmp(optarg, "io_uring") == 0) {
                ao.engine = QIMG_AIO_ENGINE_IO_URING;
            } else if (strcmp(optarg, "native") == 0) {
                tool_error(
                    "aio=native is not supported by qimg: use threads or io_uring");
                return 1;
            } else {
                tool_error("Invalid aio option: %s", optarg);
                return 1;
            }
            break;
        case 'd': /* discard mode: accepted */
        case 'k':
        case 'C':
        case 'm':
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
    if (optind < argc) {
        const char *name = argv[optind];
        io.img = qimg_image_open(name, &oo, &err);
        if (!io.img) {
            tool_error("can't open device %s: %s", name, open_reason(name, err));
            g_clear_error(&err);
            return 1;
        }
        io.read_only = qimg_image_is_read_only(io.img);
        tool_warn_probed_raw(io.img, &oo, name);
        if (aio_given && !qimg_image_aio_setup(io.img, &ao, &err)) {
            tool_error("%s", err->message);
            g_clear_error(&err);
            qimg_image_free(io.img);
            return 1;
        }
    }

    if (cmds->len) {
        for (guint i = 0; i < cmds->len && !io.quit; i++) {
            int ret;
            if (!io.img) {
                fprintf(stderr, "no file open, try 'help open'\n");
                ret = -EINVAL;
            } else {
                ret = run_line(&io, cmds->pdata[i]);
                io_aio_poll(&io); /* io-aio.c: completions after each line */
            }
            fflush(stdout);
            if (ret < 0) {
                last_error = ret;
            }
        }
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;

        for (;;) {
            int ret;
            printf(IO_PROMPT_FMT,
                   strcmp(tool_program(), "qemu-io") == 0 ? "qemu-io" : "qimg-io");
            fflush(stdout);
            n = getline(&line, &cap, stdin);
            if (n < 0 || io.quit) {
                break;
            }
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) {
                line[--n] = '\0';
            }
            if (!io.img && *line) {
                fprintf(stderr, "no file open, try 'help open'\n");
                ret = -EINVAL;
            } else {
                ret = run_line(&io, line);
                io_aio_poll(&io);
            }
            fflush(stdout);
            if (ret < 0) {
                last_error = ret;
            }
            if (io.quit) {
                break;
            }
        }
        free(line);
    }

    if (io.img && !qimg_image_close(io.img, &err)) {
        tool_error("%s", err->message);
        g_clear_error(&err);
        return 1;
    }
    return last_error < 0 ? 1 : 0;
}
