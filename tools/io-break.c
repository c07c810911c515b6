/*
 * qimg io: breakpoints -- break, remove_break, resume, wait_break -- on the
 * fault node ("blkdebug:RULES:FILE", RULES may be empty) through the public
 * API (qimg_image_debug_*, block/faulty.c invariant 5), and the waits for
 * requests that breakpoints make different.
 *
 * Owns: what those commands print, and how qimg io waits for its requests
 * once a breakpoint was set (io_break_settle, io_break_drain).
 *
 * Facts learnt from running qemu-io 7.2 (not from its source):
 *  1. "break EVENT TAG": the next request reaching EVENT stops; "blkdebug:
 *     Suspended request 'TAG'" is printed as it stops (during the command
 *     that submitted it, for an aio command), and the breakpoint is gone.
 *     An event QEMU does not know: "Could not set breakpoint: No such file
 *     or directory"; no blkdebug node: "...: Operation not supported".
 *  2. "resume TAG" resumes one stopped request, printing "blkdebug:
 *     Resuming request 'TAG'"; none stopped as TAG: "Could not resume
 *     request: No such file or directory".
 *  3. "remove_break TAG" drops TAG's breakpoints and resumes the requests
 *     stopped as TAG (each "Resuming" line); when no breakpoint was left to
 *     drop it also prints "Could not remove breakpoint TAG: No such file or
 *     directory" (after the Resuming lines) and fails.
 *  4. "wait_break TAG" returns once a request is stopped as TAG (printing
 *     its Suspended line if not yet printed); the completions of other
 *     requests meanwhile are printed as they come.  qemu-io waits for ever
 *     when nothing will stop there, and aio_flush, close and exit wait for
 *     ever while a request is stopped.
 *
 * qimg's differences, each instead of a wait for ever: wait_break with no
 * request in flight that is not stopped fails ("wait_break: no request in
 * flight can reach breakpoint 'TAG'"); aio_flush with a stopped request
 * fails naming it; close and exit resume stopped requests (api/debug.c
 * invariant 2).  A synchronous command (read, write...) that reaches a
 * breakpoint fails with EDEADLK: it would stop the only thread that can
 * resume it.  An event qimg's fault node cannot stop at is QEMU's
 * ENOTSUP line with qimg's reason on a second line.  A request is
 * submitted on a worker thread, so qimg waits after an aio command (while
 * breakpoints may be set) until it completed or stopped -- at most
 * IO_SETTLE_MS -- to print the Suspended line where qemu-io prints it.
 */
#include "io.h"

#include <errno.h>
#include <string.h>

#define IO_SETTLE_MS 2000

/* Print the Suspended lines of requests stopped since the last call. */
static void report_new(IoCtx *io)
{
    g_auto(GStrv) tags = qimg_image_debug_suspended(io->img, TRUE);
    for (char **t = tags; *t; t++) {
        printf("blkdebug: Suspended request '%s'\n", *t);
    }
    fflush(stdout);
}

static unsigned count_tag(char **tags, const char *tag)
{
    unsigned n = 0;
    for (char **t = tags; *t; t++) {
        n += !tag || strcmp(*t, tag) == 0;
    }
    return n;
}

/* QEMU's line ("PREFIX: strerror"), then qimg's detail when it says more
 * (the header); returns -errno. */
static int print_failure(const char *prefix, GError *err)
{
    int code = err->code > 0 ? err->code : EIO;
    printf("%s: %s\n", prefix, strerror(code));
    if (strcmp(err->message, strerror(code)) != 0) {
        printf("(%s)\n", err->message);
    }
    g_error_free(err);
    return -code;
}

static void print_resumed(const char *tag, unsigned n)
{
    while (n--) {
        printf("blkdebug: Resuming request '%s'\n", tag);
    }
}

int io_cmd_breakpoint(IoCtx *io, int argc, char **argv)
{
    GError *err = NULL;
    const char *tag = argv[argc - 1];

    if (strcmp(argv[0], "break") == 0) { /* fact 1 */
        if (!qimg_image_debug_break(io->img, argv[1], tag, &err)) {
            return print_failure("Could not set breakpoint", err);
        }
        io->breakpoints = true;
    } else if (strcmp(argv[0], "resume") == 0) { /* fact 2 */
        if (!qimg_image_debug_resume(io->img, tag, &err)) {
            return print_failure("Could not resume request", err);
        }
        print_resumed(tag, 1);
    } else if (strcmp(argv[0], "remove_break") == 0) { /* fact 3 */
        g_auto(GStrv) before = qimg_image_debug_suspended(io->img, FALSE);
        gboolean ok = qimg_image_debug_remove_break(io->img, tag, &err);
        if (!err || err->code != ENOTSUP) {
            print_resumed(tag, count_tag(before, tag));
        }
        if (!ok) {
            g_autofree char *prefix =
                g_strdup_printf("Could not remove breakpoint %s", tag);
            return print_failure(prefix, err);
        }
    } else { /* wait_break: fact 4 */
        for (;;) {
            qimg_image_aio_poll(io->img, 0);
            report_new(io);
            g_auto(GStrv) now = qimg_image_debug_suspended(io->img, FALSE);
            if (count_tag(now, tag)) {
                return 0;
            }
            if (qimg_image_aio_in_flight(io->img) <= count_tag(now, NULL)) {
                printf("wait_break: no request in flight can reach breakpoint '%s'\n",
                       tag);
                return -ENOENT;
            }
            g_usleep(1000);
        }
    }
    return 0;
}

void io_break_settle(IoCtx *io, unsigned before)
{
    if (!io->breakpoints) {
        return;
    }
    for (int ms = 0; ms < IO_SETTLE_MS; ms++) {
        qimg_image_aio_poll(io->img, 0);
        g_auto(GStrv) fresh = qimg_image_debug_suspended(io->img, TRUE);
        for (char **t = fresh; *t; t++) {
            printf("blkdebug: Suspended request '%s'\n", *t);
        }
        if (*fresh || qimg_image_aio_in_flight(io->img) <= before) {
            break;
        }
        g_usleep(1000);
    }
    fflush(stdout);
}

int io_break_drain(IoCtx *io, bool closing)
{
    while (io->img && qimg_image_aio_in_flight(io->img) > 0) {
        qimg_image_aio_poll(io->img, 0);
        report_new(io);
        g_auto(GStrv) now = qimg_image_debug_suspended(io->img, FALSE);
        if (*now && qimg_image_aio_in_flight(io->img) <= count_tag(now, NULL)) {
            if (closing) {
                return 0; /* the close resumes them (api/debug.c invariant 2) */
            }
            printf("aio_flush: request '%s' is stopped at a breakpoint (resume it "
                   "first)\n",
                   now[0]);
            return -EBUSY;
        }
        g_usleep(1000);
    }
    return 0;
}
