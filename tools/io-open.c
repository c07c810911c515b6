/*
 * qimg io: the image a command list works on -- open, close, reopen, the
 * snapshot overlay of -s -- and the commands open, close, reopen,
 * sigraise.
 *
 * Owns: the open options (shared by the command line and the open
 * command), opening and closing IoCtx.img, and what those commands print.
 *
 * Facts learnt from running qemu-io 7.2 (not from its source):
 *  1. "open [-rsCnkU] [-t cache] [-d discard] [-o options] [path]": a
 *     second open reads "file open already, try 'help close'" (stderr); a
 *     bad option is getopt's message plus the usage line; no path or more
 *     than one is the usage line; -f is not one of open's options (-o
 *     driver=FMT is); "Invalid cache option: X", "Invalid discard option:
 *     X", "Invalid aio option: X"; -U on a read-write open fails as
 *     "can't open device F: force-share=on can only be used with read-only
 *     images".  A command other than open, help, quit, sleep, sigraise and
 *     abort with no image open reads "no file open, try 'help open'".
 *  2. "reopen [(-r|-w)] [-c cache] [-o options]": both -r and -w read "Only
 *     one -r/-w option may be given"; extra words are the usage line.
 *     Switching to read-write takes the write permission's lock: while
 *     another process holds the image it fails ("Failed to get \"write\"
 *     lock" and "Is another process using the image [F]?") and the image
 *     stays open as it was (read-only).  -w drops -U (force-share).
 *  3. "sigraise N": N is a cvtnum number ("Parsing error: ..."), above
 *     NSIG "signal argument 'N' is too large to be a valid signal".
 *  4. -s (snapshot) puts a temporary qcow2 overlay over the image: writes
 *     go to it and are gone at exit; "info" describes the overlay.
 *  5. -o (open, reopen) takes the block layer's options; cache.direct=on|off
 *     and cache.no-flush=on|off change the cache mode ("Parameter 'X'
 *     expects 'on' or 'off'"), reopen cannot change driver ("Cannot change
 *     the option 'driver'") nor take them with -c ("Cannot set both -c and
 *     the cache options").
 *
 * What qimg cannot honour is refused with a message saying so, never
 * accepted and ignored: copy-on-read (-C), native AIO (-k, -i native),
 * discard=ignore (qimg always passes discards to the file), -o keys other than driver,
 * cache.direct and cache.no-flush, O_DIRECT without flushes, reopening a -s overlay, -s
 * over a test node.
 *
 * The API has no reopen: reopen closes the handle, then opens the image
 * with the new options (the old handle's locks would refuse the new one),
 * and on failure with the old ones again.  Between the two another process
 * could take the image; qemu-io's reopen is atomic.
 */
#include "io.h"
#include "qimg/aio.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Fact 3 of io.c: the library's message without its "Could not open 'F': ". */
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

/* Fact 5: a qcow2 overlay in the temporary folder backed by name; its
 * name (g_free), or NULL after the error. */
static char *create_overlay(const char *name, const QimgOpenOptions *oo)
{
    QimgOpenOptions ro = *oo;
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    g_autoptr(QimgImage) base = NULL;
    g_autofree char *abs = NULL, *fmt = NULL;
    g_autofree char *path = NULL;
    GError *err = NULL;
    int fd;

    if (g_str_has_prefix(name, "blkdebug:") || g_str_has_prefix(name, "record:")) {
        /* a backing file name never opens a test node (block.h invariant 5) */
        tool_error("-s (snapshot) is not supported by qimg over a blkdebug: or "
                   "record: node");
        return NULL;
    }
    ro.read_only = true;
    ro.force_share = true;
    base = qimg_image_open(name, &ro, &err);
    if (!base) {
        tool_error("can't open device %s: %s", name, open_reason(name, err));
        g_clear_error(&err);
        return NULL;
    }
    fd = g_file_open_tmp("qimg-io-snapshot.XXXXXX", &path, &err);
    if (fd < 0) {
        tool_error("Could not create the snapshot overlay: %s", err->message);
        g_clear_error(&err);
        return NULL;
    }
    close(fd);
    abs = g_path_is_absolute(name) || g_str_has_prefix(name, "nbd") /* a URI */
              ? g_strdup(name)
              : g_canonicalize_filename(name, NULL);
    fmt = g_strdup(qimg_image_format(base));
    co.format = "qcow2";
    co.size = qimg_image_size(base);
    co.size_set = true;
    co.backing_file = abs;
    co.backing_format = fmt;
    g_clear_pointer(&base, qimg_image_free);
    if (!qimg_image_create(path, &co, &err)) {
        tool_error("Could not create the snapshot overlay: %s", err->message);
        g_clear_error(&err);
        unlink(path);
        return NULL;
    }
    return g_steal_pointer(&path);
}

int io_open(IoCtx *io, const char *name, const QimgOpenOptions *oo, bool snapshot,
            const QimgAioOptions *ao, bool reopen)
{
    g_autofree char *overlay = NULL;
    QimgOpenOptions o = *oo;
    GError *err = NULL;

    if (!tool_image_opts_format_ok(oo)) {
        return -EINVAL;
    }
    if (snapshot) {
        overlay = create_overlay(name, oo);
        if (!overlay) {
            return -EINVAL;
        }
        o.format = "qcow2";
        o.force_share = false; /* the overlay is ours; -r keeps it read-only */
        o.image_opts = false;  /* the overlay is a file name */
    }
    io->img = qimg_image_open(overlay ? overlay : name, &o, &err);
    if (overlay) {
        unlink(overlay); /* fact 4: gone at exit, whatever the exit */
    }
    if (!io->img && reopen) { /* fact 2: the reason alone */
        tool_error("%s", open_reason(name, err));
        g_clear_error(&err);
        return -EINVAL;
    }
    if (!io->img) {
        tool_error("can't open device %s: %s", name, open_reason(name, err));
        g_clear_error(&err);
        return -EINVAL;
    }
    tool_warn_probed_raw(io->img, &o, name);
    if (ao && !qimg_image_aio_setup(io->img, ao, &err)) {
        tool_error("%s", err->message);
        g_clear_error(&err);
        g_clear_pointer(&io->img, qimg_image_free);
        return -EINVAL;
    }
    g_free(io->name);
    g_free(io->format);
    io->name = g_strdup(name);
    io->format = g_strdup(oo->format);
    io->oo = *oo;
    io->oo.format = io->format;
    io->snapshot = snapshot;
    io->aio_given = ao != NULL;
    if (ao) {
        io->ao = *ao;
    }
    io->read_only = qimg_image_is_read_only(io->img);
    return 0;
}

int io_close(IoCtx *io)
{
    GError *err = NULL;
    int ret = 0;

    if (!io->img) {
        return 0;
    }
    if (!qimg_image_close(io->img, &err)) {
        tool_error("%s", err->message);
        g_clear_error(&err);
        ret = -EIO;
    }
    io->img = NULL;
    return ret;
}

int io_parse_open_flag(int c, const char *arg, QimgOpenOptions *oo)
{
    switch (c) {
    case 'n':
        oo->cache = QIMG_CACHE_NONE;
        return 0;
    case 't':
        if (!qimg_cache_mode_parse(arg, &oo->cache, NULL)) {
            tool_error("Invalid cache option: %s", arg);
            return -EINVAL;
        }
        return 0;
    case 'd':
        if (strcmp(arg, "unmap") == 0 || strcmp(arg, "on") == 0) {
            return 0; /* what qimg does */
        }
        if (strcmp(arg, "ignore") == 0 || strcmp(arg, "off") == 0) {
            tool_error("discard=%s is not supported by qimg: discards always reach "
                       "the file",
                       arg);
        } else {
            tool_error("Invalid discard option: %s", arg);
        }
        return -EINVAL;
    case 'C':
        tool_error("copy-on-read (-C) is not supported by qimg");
        return -EINVAL;
    case 'k':
        tool_error("aio=native (-k) is not supported by qimg: use -i threads or "
                   "-i io_uring");
        return -EINVAL;
    default:
        return -EINVAL;
    }
}

int io_parse_aio(const char *arg, QimgAioOptions *ao)
{
    if (strcmp(arg, "threads") == 0) {
        ao->engine = QIMG_AIO_ENGINE_THREADS;
    } else if (strcmp(arg, "io_uring") == 0) {
        ao->engine = QIMG_AIO_ENGINE_IO_URING;
    } else if (strcmp(arg, "native") == 0) {
        tool_error("aio=native is not supported by qimg: use threads or io_uring");
        return -EINVAL;
    } else {
        tool_error("Invalid aio option: %s", arg);
        return -EINVAL;
    }
    return 0;
}

/* m with cache.direct and cache.no-flush set (1 on, 0 off, -1 as m has
 * them) (fact 5); false when qimg has no such cache mode (no-flush with
 * O_DIRECT).  Writethrough without flushes is unsafe (its flushes do
 * nothing); *wt says whether an unsafe mode came from writethrough, so that
 * cache.no-flush=off gives it back. */
static bool cache_with(QimgCacheMode m, int direct, int no_flush, QimgCacheMode *out,
                       bool *wt)
{
    bool d = m == QIMG_CACHE_NONE || m == QIMG_CACHE_DIRECTSYNC;
    bool nf = m == QIMG_CACHE_UNSAFE;
    bool w = m == QIMG_CACHE_UNSAFE
                 ? *wt
                 : m == QIMG_CACHE_WRITETHROUGH || m == QIMG_CACHE_DIRECTSYNC;

    d = direct >= 0 ? direct : d;
    nf = no_flush >= 0 ? no_flush : nf;
    if (nf && d) {
        return false;
    }
    *out = nf  ? QIMG_CACHE_UNSAFE
           : d ? (w ? QIMG_CACHE_DIRECTSYNC : QIMG_CACHE_NONE)
               : (w ? QIMG_CACHE_WRITETHROUGH : QIMG_CACHE_WRITEBACK);
    *wt = nf && w;
    return true;
}

/* -o of open and reopen (fact 5): driver=FMT (open only), cache.direct and
 * cache.no-flush; the rest is refused.  format: where open keeps the
 * driver name (NULL for reopen); prefix: of the messages (open's "can't
 * open device F: "). */
static int parse_o(const char *list, QimgOpenOptions *oo, char **format,
                   const char *prefix, bool *wt)
{
    g_auto(GStrv) parts = g_strsplit(list, ",", -1);
    int direct = -1, no_flush = -1;

    for (char **p = parts; *p; p++) {
        const char *eq = strchr(*p, '=');
        int *flag = g_str_has_prefix(*p, "cache.direct=")     ? &direct
                    : g_str_has_prefix(*p, "cache.no-flush=") ? &no_flush
                                                              : NULL;
        if (flag) {
            if (strcmp(eq + 1, "on") != 0 && strcmp(eq + 1, "off") != 0) {
                tool_error("%sParameter '%.*s' expects 'on' or 'off'", prefix,
                           (int)(eq - *p), *p);
                return -EINVAL;
            }
            *flag = strcmp(eq + 1, "on") == 0;
        } else if (g_str_has_prefix(*p, "driver=") && format) {
            g_free(*format);
            *format = g_strdup(*p + strlen("driver="));
            oo->format = *format;
        } else if (g_str_has_prefix(*p, "driver=")) {
            tool_error("%sCannot change the option 'driver'", prefix);
            return -EINVAL;
        } else if (**p) {
            tool_error("%s-o %s: qimg takes only %scache.direct and cache.no-flush",
                       prefix, *p, format ? "driver, " : "");
            return -EINVAL;
        }
    }
    if ((direct >= 0 || no_flush >= 0) &&
        !cache_with(oo->cache, direct, no_flush, &oo->cache, wt)) {
        tool_error("%s-o: qimg has no cache mode with cache.no-flush=on and "
                   "cache.direct=on",
                   prefix);
        return -EINVAL;
    }
    return 0;
}

int io_cmd_open(IoCtx *io, int argc, char **argv)
{
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    oo.secrets = tool_secret_table();
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    g_autofree char *format = NULL, *prefix = NULL;
    bool wt = false;                /* parse_o */
    g_autofree char *o_list = NULL; /* every -o, joined by commas */
    bool snapshot = false, aio_given = false;
    int c;

    if (io->img) { /* fact 1 */
        tool_error("file open already, try 'help close'");
        return -EBUSY;
    }
    oo.cache = QIMG_CACHE_WRITETHROUGH; /* as qemu-io (io.c) */
    while ((c = getopt(argc, argv, "snCro:ki:t:d:U")) != -1) {
        switch (c) {
        case 's':
            snapshot = true;
            break;
        case 'r':
            oo.read_only = true;
            break;
        case 'U':
            oo.force_share = true;
            break;
        case 'o':
            o_list = tool_opts_append(o_list, optarg); /* parsed with the path */
            break;
        case 'i':
            aio_given = true;
            if (io_parse_aio(optarg, &ao) < 0) {
                return -EINVAL;
            }
            break;
        case 'n':
        case 't':
        case 'd':
        case 'C':
        case 'k':
            if (io_parse_open_flag(c, optarg, &oo) < 0) {
                return -EINVAL;
            }
            break;
        default:
            io_command_usage("open");
            return -EINVAL;
        }
    }
    if (optind != argc - 1) {
        io_command_usage("open");
        return -EINVAL;
    }
    prefix = g_strdup_printf("can't open device %s: ", argv[optind]);
    if (o_list && parse_o(o_list, &oo, &format, prefix, &wt) < 0) {
        return -EINVAL;
    }
    if (io_open(io, argv[optind], &oo, snapshot, aio_given ? &ao : NULL, false) < 0) {
        return -EINVAL;
    }
    io->unsafe_wt = wt;
    return 0;
}

int io_cmd_close(IoCtx *io, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    io_drain(io);
    return io_close(io);
}

int io_cmd_reopen(IoCtx *io, int argc, char **argv)
{
    QimgOpenOptions oo = io->oo, old = io->oo;
    g_autofree char *name = g_strdup(io->name);
    g_autofree char *format = g_strdup(io->format);
    QimgAioOptions ao = io->ao;
    g_autofree char *o_list = NULL; /* every -o, joined by commas */
    bool r = false, w = false, aio_given = io->aio_given, cache_given = false;
    bool wt = io->unsafe_wt;
    int c, ret;

    while ((c = getopt(argc, argv, "c:o:rw")) != -1) {
        switch (c) {
        case 'c':
            cache_given = true;
            wt = false; /* -c unsafe is writeback without flushes */
            if (!qimg_cache_mode_parse(optarg, &oo.cache, NULL)) {
                tool_error("Invalid cache option: %s", optarg);
                return -EINVAL;
            }
            break;
        case 'o':
            o_list = tool_opts_append(o_list, optarg); /* after -c (fact 5) */
            break;
        case 'r':
            r = true;
            break;
        case 'w':
            w = true;
            break;
        default:
            io_command_usage("reopen");
            return -EINVAL;
        }
    }
    if (optind != argc) {
        io_command_usage("reopen");
        return -EINVAL;
    }
    if (r && w) { /* fact 2 */
        tool_error("Only one -r/-w option may be given");
        return -EINVAL;
    }
    if (o_list && cache_given &&
        (strstr(o_list, "cache.direct=") || strstr(o_list, "cache.no-flush="))) {
        tool_error("Cannot set both -c and the cache options"); /* fact 5 */
        return -EINVAL;
    }
    if (o_list && parse_o(o_list, &oo, NULL, "", &wt) < 0) {
        return -EINVAL;
    }
    if (io->snapshot) {
        tool_error("reopen of a -s (snapshot) image is not supported by qimg");
        return -EINVAL;
    }
    if (r) {
        oo.read_only = true;
    } else if (w) {
        oo.read_only = false;
        oo.force_share = false;
    }
    oo.format = format;
    old.format = format;
    /* qimg has no reopen: close, then open with the new options (the locks of
     * the old handle would refuse the new one); on failure the old ones. */
    io_drain(io);
    if ((ret = io_close(io)) < 0) {
        return ret;
    }
    if (io_open(io, name, &oo, false, aio_given ? &ao : NULL, true) == 0) {
        io->unsafe_wt = wt;
        return 0;
    }
    io_open(io, name, &old, false, aio_given ? &ao : NULL, true);
    return -EINVAL;
}

int io_cmd_sigraise(IoCtx *io, int argc, char **argv)
{
    int64_t sig = io_cvtnum(argv[1]);

    (void)io;
    (void)argc;
    if (sig < 0) {
        io_print_cvtnum_err(sig, argv[1]);
        return (int)sig;
    }
    if (sig > NSIG) { /* fact 3 */
        printf("signal argument '%s' is too large to be a valid signal\n", argv[1]);
        return -EINVAL;
    }
    fflush(stdout);
    fflush(stderr);
    raise((int)sig);
    return 0;
}
