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
 *     bad option is getopt's message plus the usage line; more than one
 *     path, or none without -o, is the usage line (-o options alone name
 *     the image by themselves; their errors read "can't open: REASON");
 *     with --image-opts the path is options too (its errors read "can't
 *     open: REASON" as well: QEMU iotest 188), and -o is refused on
 *     stdout ("--image-opts and 'open -o' are mutually exclusive"); -f is
 *     not one of open's options (-o driver=FMT is); "Invalid cache option:
 *     X", "Invalid discard option: X", "Invalid aio option: X"; -U on a
 *     read-write open fails as "can't open device F: force-share=on can
 *     only be used with read-only images"; -U with a force-share option
 *     other than on, "-U conflicts with image options" (optlist.c fact 5).
 *     A command other than open, help, quit, sleep, sigraise and abort
 *     with no image open reads "no file open, try 'help open'".
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
 *  5. -o (open, reopen) takes the block layer's options, "key=value" (a
 *     bare "key" is key=on and "nokey" key=off, with a deprecation
 *     warning); cache.direct=on|off and cache.no-flush=on|off change the
 *     cache mode ("Parameter 'X' expects 'on' or 'off'"); the others are
 *     the library's (QimgOpenOptions.options: api/json-name.c invariant 7,
 *     api/open-opts.c), read-only=on on a read-write open is "Block node is
 *     read-only".  reopen keeps the options it is not given, and refuses
 *     to change a node name other than one given at open ("Cannot change
 *     the option 'node-name'"), a driver ("... 'driver'"), or an option the
 *     driver cannot change at a reopen ("... 'KEY'", KEY as the child node
 *     names it: backing.file.x is 'x' when there is a backing file); it
 *     does not take the cache options with -c ("Cannot set both -c and
 *     the cache options") nor read-only with -r/-w ("Cannot set both
 *     -r/-w and 'read-only'").  As QEMU's qcow2 joins old and new options
 *     (QEMU iotest 137): a new overlap-check or overlap-check.template
 *     drops every old overlap-check option, a new cache-size the old
 *     l2-cache-size and refcount-cache-size, and when all three sizes end
 *     up set without a new cache-size, the old cache-size goes.
 *  6. Closing an image that was marked corrupt prints nothing more (its
 *     last writes were refused, and that was said when it was marked):
 *     qemu-io reports no failure of its final flush.  The exit status
 *     still says it failed.
 *  7. qemu-io's close (the close command, the end of the command list)
 *     never fails: a failed final flush changes neither the exit status
 *     nor the close command's, and prints nothing but what the format's
 *     close-time write-back says (qcow2's cache lines, qcow2/meta.c
 *     invariant 13) -- a raw image's failed flush is silent.
 *
 * What qimg cannot honour is refused with a message saying so, never
 * accepted and ignored: native AIO (-k, -i native),
 * discard=ignore (qimg always passes discards to the file), the -o options
 * api/open-opts.c refuses, O_DIRECT without flushes, reopening a -s
 * overlay, -s over a test node or with -o options.
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
    g_autofree char *prefix = g_strdup_printf("Could not open '%s': ", name ? name : "");
    const char *rest;

    if (!name || !g_str_has_prefix(err->message, prefix)) {
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
    base = tool_image_opts_open(name, &ro, false, &err); /* image-opts.c fact 2 */
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

    if (oo->image_opts && oo->format) {
        tool_error("--image-opts and --format are mutually exclusive");
        return -EINVAL;
    }
    g_autofree char *checked = NULL; /* image-opts.c fact 4: before the open */
    if (oo->image_opts && name &&
        !(checked = tool_image_opts_list(name, false, false, &err))) {
        tool_error("%s", err->message);
        g_clear_error(&err);
        return -EINVAL;
    }
    if (!reopen && oo->force_share &&
        ((oo->image_opts && name && tool_opts_force_share_conflict(name)) ||
         (oo->options && tool_opts_force_share_conflict(oo->options)))) {
        tool_error("-U conflicts with image options"); /* optlist.c fact 5 */
        return -EINVAL;
    }
    if (snapshot && oo->options) {
        tool_error("-s (snapshot) with -o options is not supported by qimg");
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
    io->img = tool_image_opts_open(overlay ? overlay : name, &o, false, &err);
    if (overlay) {
        unlink(overlay); /* fact 4: gone at exit, whatever the exit */
    }
    if (!io->img && reopen) { /* fact 2: the reason alone */
        tool_error("%s", open_reason(name, err));
        g_clear_error(&err);
        return -EINVAL;
    }
    if (!io->img && (!name || oo->image_opts)) { /* fact 1: options alone */
        tool_error("can't open: %s", name ? open_reason(name, err) : err->message);
        g_clear_error(&err);
        return -EINVAL;
    }
    if (!io->img) {
        tool_error("can't open device %s: %s", name, open_reason(name, err));
        g_clear_error(&err);
        return -EINVAL;
    }
    io_end_on_verdict(io); /* io-cmds.c fact 6: the format's probe found one */
    /* (options alone: the file they name, as QEMU names it) */
    tool_warn_probed_raw(io->img, &o, name ? name : qimg_image_filename(io->img));
    if (ao && !qimg_image_aio_setup(io->img, ao, &err)) {
        tool_error("%s", err->message);
        g_clear_error(&err);
        g_clear_pointer(&io->img, qimg_image_free);
        return -EINVAL;
    }
    g_free(io->name);
    g_free(io->format);
    g_free(io->options);
    io->name = g_strdup(name);
    io->format = g_strdup(oo->format);
    io->options = g_strdup(oo->options);
    io->oo = *oo;
    io->oo.format = io->format;
    io->oo.options = io->options;
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
    bool corrupt = false;

    if (!io->img) {
        return 0;
    }
    corrupt = tool_image_marked_corrupt(io->img); /* fact 6 */
    if (!qimg_image_close(io->img, &err)) {
        /* fact 7: the format's own lines, not the library's generic one */
        if (!corrupt && !g_str_has_prefix(err->message, "Failed to flush '")) {
            tool_error_lines(err->message); /* QEMU's close-time lines */
        }
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
        oo->copy_on_read = true; /* api/image.c invariant 4 */
        return 0;
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

/* -o of open and reopen (fact 5): cache.direct and cache.no-flush change
 * the cache mode here (qemu-io's writethrough is the command's, not the
 * library's); every other option goes into opts (key -> value, the last
 * one given wins), for the library (QimgOpenOptions.options).  prefix: of
 * the messages (open's "can't open device F: "). */
static int parse_o(const char *list, QimgOpenOptions *oo, GHashTable *opts,
                   const char *prefix, bool *wt)
{
    g_autoptr(GPtrArray) parts = tool_opts_split(list);
    int direct = -1, no_flush = -1;

    for (guint i = 0; i < parts->len; i++) {
        g_autofree char *key = NULL, *value = NULL;
        int *flag;

        tool_opts_element(parts->pdata[i], true, &key, &value); /* fact 5 */
        flag = strcmp(key, "cache.direct") == 0     ? &direct
               : strcmp(key, "cache.no-flush") == 0 ? &no_flush
                                                    : NULL;
        if (!flag) {
            g_hash_table_insert(opts, g_steal_pointer(&key), g_steal_pointer(&value));
            continue;
        }
        if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0) {
            tool_error("%sParameter '%s' expects 'on' or 'off'", prefix, key);
            return -EINVAL;
        }
        *flag = strcmp(value, "on") == 0;
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

/* opts as the library's key=value list (",," for a comma), NULL if empty. */
static char *join_opts(GHashTable *opts)
{
    g_autoptr(GList) keys =
        g_list_sort(g_hash_table_get_keys(opts), (GCompareFunc)strcmp);
    GString *s = g_string_new(NULL);

    for (GList *l = keys; l; l = l->next) {
        g_auto(GStrv) v = g_strsplit(g_hash_table_lookup(opts, l->data), ",", -1);
        g_autofree char *escaped = g_strjoinv(",,", v);
        g_string_append_printf(s, "%s%s=%s", s->len ? "," : "", (char *)l->data, escaped);
    }
    return s->len ? g_string_free(s, FALSE) : (g_string_free(s, TRUE), NULL);
}

static GHashTable *opts_new(void)
{
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}

/* join_opts() undone: the list of an open, for reopen. */
static void opts_from_list(const char *list, GHashTable *opts)
{
    g_autoptr(GPtrArray) parts = tool_opts_split(list);

    for (guint i = 0; i < parts->len; i++) {
        const char *e = parts->pdata[i], *eq = strchr(e, '=');
        if (eq) {
            g_hash_table_insert(opts, g_strndup(e, (gsize)(eq - e)), g_strdup(eq + 1));
        }
    }
}

int io_cmd_open(IoCtx *io, int argc, char **argv)
{
    QimgOpenOptions oo = TOOL_OPEN_OPTIONS_INIT;
    tool_open_secrets(&oo);
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    g_autofree char *prefix = NULL, *options = NULL;
    g_autoptr(GHashTable) opts = opts_new();
    bool wt = false;                /* parse_o */
    g_autofree char *o_list = NULL; /* every -o, joined by commas */
    bool snapshot = false, aio_given = false;
    const char *name;
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
            if (io->image_opts) { /* qemu-io prints it on stdout */
                printf("--image-opts and 'open -o' are mutually exclusive\n");
                return -EINVAL;
            }
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
    /* fact 1: a path, or -o options alone */
    if (optind < argc - 1 || (optind == argc && !o_list)) {
        io_command_usage("open");
        return -EINVAL;
    }
    name = optind < argc ? argv[optind] : NULL;
    oo.image_opts = io->image_opts && name;
    prefix =
        name ? g_strdup_printf("can't open device %s: ", name) : g_strdup("can't open: ");
    if (o_list && parse_o(o_list, &oo, opts, prefix, &wt) < 0) {
        return -EINVAL;
    }
    options = join_opts(opts);
    oo.options = options;
    oo.format = g_hash_table_lookup(opts, "driver"); /* the library takes it */
    if (io_open(io, name, &oo, snapshot, aio_given ? &ao : NULL, false) < 0) {
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
    io_close(io); /* fact 7 */
    return 0;
}

/* The driver of the node under the image, as reopen -o file.driver
 * compares it (fact 5). */
static const char *file_driver(const IoCtx *io)
{
    const char *n = io->name ? io->name : "";

    return g_str_has_prefix(n, "blkdebug:") ? "blkdebug"
           : g_str_has_prefix(n, "nbd")     ? "nbd"
                                            : "file";
}

/* The options a reopen may change (fact 5): the generic ones, and the
 * qcow2 driver's runtime options. */
static const char *const reopen_changeable[] = {
    "read-only", "auto-read-only", "detect-zeroes", "discard", "force-share",
};
static const char *const qcow2_reopen_changeable[] = {
    "lazy-refcounts",       "cache-size",
    "l2-cache-size",        "refcount-cache-size",
    "l2-cache-entry-size",  "cache-clean-interval",
    "pass-discard-request", "pass-discard-snapshot",
    "pass-discard-other",   "overlap-check",
};

static bool in_list(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(key, list[i]) == 0 ||
            (g_str_has_prefix(key, list[i]) && key[strlen(list[i])] == '.')) {
            return true;
        }
    }
    return false;
}

/* key as the child node it belongs to names it (fact 5): without its
 * "file." / "backing." path, a backing that is not there being no child. */
static const char *child_key(const IoCtx *io, const char *key)
{
    QimgImage *node = io->img;

    for (;;) {
        if (g_str_has_prefix(key, "file.")) {
            key += strlen("file.");
        } else if (g_str_has_prefix(key, "backing.") && node &&
                   qimg_image_backing(node)) {
            node = qimg_image_backing(node);
            key += strlen("backing.");
        } else {
            return key;
        }
    }
}

/* Fact 5: what reopen cannot change -- a node name other than the one
 * given at open (an unnamed node has a generated name), a driver other
 * than the node's, an option the node's driver cannot change (unless it
 * keeps its value), named without its "file." / "backing." path.  0, or
 * the message printed and -EINVAL. */
static int reopen_changes_ok(const IoCtx *io, GHashTable *old, GHashTable *new)
{
    static const char *const names[] = {"node-name", "file.node-name",
                                        "backing.node-name"};
    QimgImage *backing = qimg_image_backing(io->img);
    const char *drivers[][2] = {
        {"driver", qimg_image_format(io->img)},
        {"file.driver", file_driver(io)},
        {"backing.driver", backing ? qimg_image_format(backing) : NULL},
    };

    for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
        const char *v = g_hash_table_lookup(new, names[i]);
        if (v && g_strcmp0(v, g_hash_table_lookup(old, names[i])) != 0) {
            tool_error("Cannot change the option '%s'", child_key(io, names[i]));
            return -EINVAL;
        }
    }
    for (size_t i = 0; i < G_N_ELEMENTS(drivers); i++) {
        const char *v = g_hash_table_lookup(new, drivers[i][0]);
        if (v && g_strcmp0(v, drivers[i][1]) != 0) {
            tool_error("Cannot change the option '%s'", child_key(io, drivers[i][0]));
            return -EINVAL;
        }
    }
    g_autoptr(GList) keys = g_list_sort(g_hash_table_get_keys(new), (GCompareFunc)strcmp);
    for (GList *l = keys; l; l = l->next) {
        const char *key = l->data;
        bool top = !g_str_has_prefix(key, "file.") && !g_str_has_prefix(key, "backing.");
        if (g_str_has_suffix(key, "node-name") || g_str_has_suffix(key, "driver") ||
            (top && in_list(key, reopen_changeable, G_N_ELEMENTS(reopen_changeable))) ||
            (top && strcmp(qimg_image_format(io->img), "qcow2") == 0 &&
             in_list(key, qcow2_reopen_changeable,
                     G_N_ELEMENTS(qcow2_reopen_changeable))) ||
            g_strcmp0(g_hash_table_lookup(new, key), g_hash_table_lookup(old, key)) ==
                0) {
            continue;
        }
        tool_error("Cannot change the option '%s'", child_key(io, key));
        return -EINVAL;
    }
    return 0;
}

/* Fact 5: the old options a reopen's new ones replace as a group. */
static void join_qcow2_opts(GHashTable *old, GHashTable *new)
{
    static const char *const sizes[] = {"cache-size", "l2-cache-size",
                                        "refcount-cache-size"};
    bool new_total = g_hash_table_contains(new, "cache-size");
    bool all = true;

    if (g_hash_table_contains(new, "overlap-check") ||
        g_hash_table_contains(new, "overlap-check.template")) {
        GHashTableIter it;
        gpointer k;
        g_hash_table_iter_init(&it, old);
        while (g_hash_table_iter_next(&it, &k, NULL)) {
            if (strcmp(k, "overlap-check") == 0 ||
                g_str_has_prefix(k, "overlap-check.")) {
                g_hash_table_iter_remove(&it);
            }
        }
    }
    if (new_total) {
        g_hash_table_remove(old, "l2-cache-size");
        g_hash_table_remove(old, "refcount-cache-size");
    }
    for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
        all = all && (g_hash_table_contains(new, sizes[i]) ||
                      g_hash_table_contains(old, sizes[i]));
    }
    if (all && !new_total) {
        g_hash_table_remove(old, "cache-size");
    }
}

int io_cmd_reopen(IoCtx *io, int argc, char **argv)
{
    QimgOpenOptions oo = io->oo, old = io->oo;
    g_autofree char *name = g_strdup(io->name);
    g_autofree char *format = g_strdup(io->format);
    g_autofree char *old_options = g_strdup(io->options), *options = NULL;
    g_autoptr(GHashTable) old_opts = opts_new();
    g_autoptr(GHashTable) new_opts = opts_new();
    QimgAioOptions ao = io->ao;
    g_autofree char *o_list = NULL; /* every -o, joined by commas */
    bool r = false, w = false, aio_given = io->aio_given, cache_given = false;
    bool wt = io->unsafe_wt;
    GHashTableIter it;
    gpointer k, v;
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
        (strstr(o_list, "cache.direct") || strstr(o_list, "cache.no-flush"))) {
        tool_error("Cannot set both -c and the cache options"); /* fact 5 */
        return -EINVAL;
    }
    if (o_list && parse_o(o_list, &oo, new_opts, "", &wt) < 0) {
        return -EINVAL;
    }
    if ((r || w) && g_hash_table_contains(new_opts, "read-only")) { /* fact 5 */
        tool_error("Cannot set both -r/-w and 'read-only'");
        return -EINVAL;
    }
    if (old_options) {
        opts_from_list(old_options, old_opts);
    }
    if (reopen_changes_ok(io, old_opts, new_opts) < 0) {
        return -EINVAL;
    }
    const char *ro = g_hash_table_lookup(new_opts, "read-only");
    if (!io->read_only && ro && (strcmp(ro, "on") == 0 || strcmp(ro, "true") == 0)) {
        /* fact 5: the image is open for writing (the node named as the
         * user named it: qimg has no generated node names) */
        const char *node = g_hash_table_lookup(old_opts, "node-name");
        tool_error("Read-only block node '%s' cannot support read-write users",
                   node ? node : name);
        return -EINVAL;
    }
    if (io->snapshot) {
        tool_error("reopen of a -s (snapshot) image is not supported by qimg");
        return -EINVAL;
    }
    /* fact 5: the options not given stay as they were */
    join_qcow2_opts(old_opts, new_opts);
    g_hash_table_iter_init(&it, new_opts);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        g_hash_table_insert(old_opts, g_strdup(k), g_strdup(v));
    }
    options = join_opts(old_opts);
    if (r) {
        oo.read_only = true;
    } else if (w) {
        oo.read_only = false;
        oo.force_share = false;
    }
    oo.format = format;
    oo.options = options;
    old.format = format;
    old.options = old_options;
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
