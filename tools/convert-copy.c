/*
 * qimg convert: the copy, through the library's pipeline (qimg/copy.h:
 * api/copy-plan.c says what is written where, as qemu-img 7.2 does; api/
 * copy.c runs -m requests at once).
 *
 * Owns: mapping the command's state (tools/convert.h) onto the pipeline's
 * options, progress, and signals.
 *
 *  1. -p prints qemu-img's sequence of "(NN.NN/100%)" lines: the share of
 *     the bytes copied as data started so far, in guest order, under its
 *     print rule (tool_progress_update), and a last 100; without -p,
 *     SIGUSR1 prints the same line once, as qemu-img does.
 *  2. SIGINT and SIGTERM stop the copy: every request in flight finishes,
 *     nothing more starts, and convert fails with "The copy was
 *     interrupted".  A second signal of the same kind kills as usual.  The
 *     handlers are set when the command starts (convert_signals_init), so
 *     a signal during the set-up stops the copy before its first chunk.
 *  3. QIMG_COPY_STATS set to anything but "" or "0" prints, on stderr after
 *     the copy (failed or not), where the pipeline's workers spent their
 *     time (qimg/copy.h rule 8) and then the final flush's time
 *     (convert.c): "copy stats: ..." lines, seconds with three decimals.
 */
#include "convert.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t got_usr1, got_stop;

static void on_usr1(int sig)
{
    (void)sig;
    got_usr1 = 1;
}

static void on_stop(int sig)
{
    got_stop = 1;
    signal(sig, SIG_DFL); /* fact 2: the second one kills */
}

typedef struct CopyProgress {
    ToolProgress *prog;
} CopyProgress;

static gboolean copy_progress(void *opaque, uint64_t done, uint64_t total)
{
    CopyProgress *cp = opaque;

    tool_progress_update(cp->prog, done, total);
    if (got_usr1) { /* fact 1 */
        got_usr1 = 0;
        if (!cp->prog->enabled) {
            printf("    (%.2f/100%%)\n",
                   total ? (double)done * 100.0 / (double)total : 100.0);
            fflush(stdout);
        }
    }
    return !got_stop;
}

/* convert.c fact 7 */
static void salvage_warning(void *opaque, const char *message)
{
    (void)opaque;
    tool_warning("%s", message);
}

void convert_signals_init(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* fact 3 */
bool convert_stats_wanted(void)
{
    const char *v = getenv("QIMG_COPY_STATS");

    return v && *v && strcmp(v, "0") != 0;
}

static double secs(uint64_t ns)
{
    return (double)ns / 1e9;
}

static void print_stats(const QimgCopyStats *st)
{
    fprintf(stderr, "copy stats: %u workers, wall %.3f s, cpu %.3f s\n", st->workers,
            secs(st->wall_ns), secs(st->cpu_ns));
    fprintf(stderr,
            "copy stats: summed over the workers: read %.3f s, write %.3f s, "
            "turn %.3f s, lock %.3f s, plan %.3f s, compress %.3f s\n",
            secs(st->read_ns), secs(st->write_ns), secs(st->turn_ns), secs(st->lock_ns),
            secs(st->plan_ns), secs(st->compress_ns));
    fprintf(stderr,
            "copy stats: %" PRIu64 " reads (%" PRIu64 " bytes), %" PRIu64
            " writes (%" PRIu64 " bytes), %" PRIu64 " zeroes (%" PRIu64 " bytes)\n",
            st->reads, st->read_bytes, st->writes, st->write_bytes, st->zeroes,
            st->zero_bytes);
}

void convert_stats_flush(uint64_t ns)
{
    fprintf(stderr, "copy stats: flush %.3f s\n", secs(ns));
}

bool convert_copy(Convert *s, ToolProgress *prog)
{
    QimgCopyStats st = QIMG_COPY_STATS_INIT;
    bool stats = convert_stats_wanted();
    QimgCopyOptions o = QIMG_COPY_OPTIONS_INIT;
    CopyProgress cp = {.prog = prog};
    GError *err = NULL;
    bool ok;

    o.in_flight = s->in_flight;
    o.out_of_order = s->out_of_order;
    o.copy_offload = s->copy_offload;
    o.compress = s->compress;
    o.sparse_size = s->min_sparse ? s->min_sparse * SECTOR : QIMG_COPY_SPARSE_OFF;
    o.target_is_zero = s->zero_init;
    o.target_has_backing = s->target_has_backing;
    o.top_only = s->top_only;
    o.target_backing_size = s->target_backing > 0 ? (uint64_t)s->target_backing : 0;
    o.progress = copy_progress;
    o.progress_opaque = &cp;
    o.salvage = s->salvage;
    o.progress_allocated = true; /* fact 1: qemu-img's sequence */
    o.warn = s->quiet ? NULL : salvage_warning;
    o.stats = stats ? &st : NULL; /* fact 3 */

    ok = qimg_copy_sources(s->srcs, s->n_srcs, s->dst, &o, &err);
    if (stats) {
        print_stats(&st);
    }
    if (!ok) {
        tool_error("%s", err->message);
        g_clear_error(&err);
    }
    return ok;
}
