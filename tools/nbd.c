/*
 * qimg nbd [options] FILE: serve an image over NBD, as qemu-nbd does, by
 * running nbdkit with nbdkit-qimg-plugin.so (nbd/qimg-plugin.c) and the
 * nbdkit filters that implement qemu-nbd's options.
 *
 * Facts (qemu-nbd 7.2, cited as "nbd.c fact N"):
 *  1. Defaults: a Unix socket only with -k, else TCP port 10809 on all
 *     addresses; one client at a time (-e 1); the server exits when the
 *     last client has left unless -t (--persistent); it stays in the
 *     foreground unless --fork, which returns once the server is ready;
 *     cache writeback, discard ignore, detect-zeroes off; any export name
 *     is served unless -x NAME, the only name then.
 *  2. The options mapped: -k SOCKET (-U), -p PORT, -b ADDR (-i), -x NAME
 *     (the exportname filter, strict), -r (read-only), -f FMT, -l SNAPSHOT
 *     (read-only), -s (writes go to a throw-away overlay: the cow filter),
 *     -e N (the plugin's clients=N: a client past the limit waits, as
 *     qemu-nbd's waits to be accepted; 0 is unlimited), -t (no exitlast filter),
 *     -n/--nocache (cache=none), --cache, --discard, --detect-zeroes,
 *     --fork, --pid-file (-P), -v (-v), --tls-creds ID with
 *     --object tls-creds-x509,id=ID,dir=DIR[,endpoint=server]
 *     (--tls=require --tls-certificates=DIR), --image-opts (the plugin's
 *     image-opts=true) and --object secret,... (tools/objects.c), each
 *     secret handed to the plugin as secret=ID:FD, a memfd holding its
 *     bytes -- never on nbdkit's command line (qimg-plugin.c invariant 6).
 *  3. Options qemu-nbd has that this cannot honour are refused with the
 *     reason: -c/-d (kernel /dev/nbd devices), -o (offset), -D, -A, -B
 *     (only base:allocation), --aio, -T.
 *  4. Errors before nbdkit runs print "qimg: ..." and exit 1; after that
 *     nbdkit's own exit status is qimg's (the plugin's open error, an image
 *     in use, a port in use all end nbdkit with 1 and its message).
 *  5. --fork returns only once the server listens, as qemu-nbd's: nbdkit
 *     binds its sockets before its own parent exits 0, and its daemon then
 *     writes the pid file, which qimg waits for (nbdkit's parent returns
 *     before it).  nbdkit is not run with -f under a parent that exits:
 *     in the foreground it dies with its parent (PR_SET_PDEATHSIG).
 *
 *  6. -L lists a server's exports (-k SOCKET, or -b HOST -p PORT, default
 *     localhost:10809) in qemu-nbd's format: "exports available: N", then
 *     per export its name, description, size, transmission flags (the hex
 *     value and the names of the bits set), block sizes and meta contexts.
 *
 *  7. multi-conn is advertised exactly when more than one client may be
 *     connected at once (-e 0 or -e N > 1), as qemu-nbd 7.1+ does; with
 *     -e 1 (the default) the multi-conn filter's disable mode hides it, so
 *     a client such as nbdcopy opens one connection instead of a second
 *     that -e 1 would refuse.  (The plugin itself always allows it:
 *     qimg-plugin.c invariant 1.)
 *
 *  8. nbdkit runs with NBD_BUFFERED_THREADS (4) threads per connection
 *     (its -t; nbdkit's default is 16) when the image is a local file read
 *     through the page cache (cache writeback, writethrough or unsafe):
 *     each nbdkit thread owns a request buffer, and a read is two kernel
 *     copies through it (page cache to buffer, buffer to socket), which
 *     are nearly all of the server's CPU time.  16 threads on each of
 *     nbdcopy's 4 connections cycle through 16 MiB of 256 KiB buffers, so
 *     a buffer has left the CPU caches before it is used again; with 4
 *     threads (4 MiB) more copies hit the caches, and the server spends
 *     less CPU on the same reads (bench/nbd-bench.sh read-full), while 4
 *     requests per connection still keep the disk busy behind the
 *     kernel's read-ahead.  O_DIRECT (cache none, directsync: no
 *     page-cache copy; the requests in flight are the device's queue
 *     depth), protocol names and --image-opts (a remote node:
 *     latency-bound) keep nbdkit's default.
 *
 * Unlike qemu-nbd, a client refused at the handshake (a wrong -x name)
 * counts as the last client for a server without -t (nbdkit's exitlast).
 */
#include "qimg-tool.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef QIMG_NBD_PLUGIN_DIR
#define QIMG_NBD_PLUGIN_DIR ""
#endif
#define PLUGIN_NAME "nbdkit-qimg-plugin.so"
#define NBD_BUFFERED_THREADS 4 /* fact 8 */

enum {
    OPT_CACHE = 256,
    OPT_DISCARD,
    OPT_DETECT_ZEROES,
    OPT_FORK,
    OPT_PID_FILE,
    OPT_TLS_CREDS,
    OPT_OBJECT,
    OPT_AIO,
    OPT_IMAGE_OPTS,
};

/* The plugin next to this binary (a build tree: tools/../nbd/), else the
 * installed one, else by name from nbdkit's plugin directory. */
static char *find_plugin(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n > 0) {
        exe[n] = '\0';
        g_autofree char *dir = g_path_get_dirname(exe);
        char *p = g_build_filename(dir, "..", "nbd", PLUGIN_NAME, NULL);
        if (access(p, R_OK) == 0) {
            return p;
        }
        g_free(p);
    }
    if (QIMG_NBD_PLUGIN_DIR[0]) {
        char *p = g_build_filename(QIMG_NBD_PLUGIN_DIR, PLUGIN_NAME, NULL);
        if (access(p, R_OK) == 0) {
            return p;
        }
        g_free(p);
    }
    return g_strdup("qimg");
}

/* --object tls-creds-x509,id=ID,dir=DIR[,endpoint=server] (fact 2) */
static bool parse_tls_object(const char *arg, char **id, char **dir)
{
    g_auto(GStrv) parts = g_strsplit(arg, ",", -1);

    if (!parts[0] || strcmp(parts[0], "tls-creds-x509") != 0) {
        tool_error("--object %s: only tls-creds-x509 objects are supported", arg);
        return false;
    }
    for (int i = 1; parts[i]; i++) {
        if (g_str_has_prefix(parts[i], "id=")) {
            g_free(*id);
            *id = g_strdup(parts[i] + 3);
        } else if (g_str_has_prefix(parts[i], "dir=")) {
            g_free(*dir);
            *dir = g_strdup(parts[i] + 4);
        } else if (strcmp(parts[i], "endpoint=server") != 0) {
            tool_error("--object %s: unsupported property '%s'", arg, parts[i]);
            return false;
        }
    }
    if (!*id || !*dir) {
        tool_error("--object %s: needs id= and dir=", arg);
        return false;
    }
    return true;
}

static bool one_of(const char *v, const char *const *set)
{
    for (; *set; set++) {
        if (strcmp(v, *set) == 0) {
            return true;
        }
    }
    return false;
}

static void push(GPtrArray *a, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void push(GPtrArray *a, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_ptr_array_add(a, g_strdup_vprintf(fmt, ap));
    va_end(ap);
}

/* Each secret as secret=ID:FD, FD a memfd with its bytes that nbdkit
 * inherits (fact 2). */
static bool push_secrets(GPtrArray *a)
{
    GHashTableIter it;
    gpointer id, bytes;

    g_hash_table_iter_init(&it, tool_secret_table());
    while (g_hash_table_iter_next(&it, &id, &bytes)) {
        gsize len;
        const uint8_t *data = g_bytes_get_data(bytes, &len);
        int fd = memfd_create("qimg-secret", 0);
        if (fd < 0 || (len && write(fd, data, len) != (ssize_t)len)) {
            tool_error("cannot hand secret '%s' to nbdkit: %s", (const char *)id,
                       g_strerror(errno));
            return false;
        }
        push(a, "secret=%s:%d", (const char *)id, fd);
    }
    return true;
}

static void exec_nbdkit(char **args)
{
    execvp("nbdkit", args);
    if (errno == ENOENT) {
        tool_error("nbdkit not found: qimg nbd runs nbdkit (Debian: apt install nbdkit)");
    } else {
        tool_error("cannot run nbdkit: %s", g_strerror(errno));
    }
}

/* Fact 5: nbdkit's own backgrounding binds the sockets before its parent
 * exits 0, and the daemon writes the pid file just after: wait for both. */
static int run_forked(char **args, const char *pid_file)
{
    pid_t child;
    int status;

    if (pid_file) {
        unlink(pid_file);
    }
    child = fork();
    if (child < 0) {
        tool_error("cannot fork: %s", g_strerror(errno));
        return 1;
    }
    if (child == 0) {
        exec_nbdkit(args);
        _exit(1);
    }
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) {
            tool_error("waiting for nbdkit: %s", g_strerror(errno));
            return 1;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        return WIFEXITED(status) && WEXITSTATUS(status) ? WEXITSTATUS(status) : 1;
    }
    for (int i = 0; pid_file && i < 1000; i++) {
        g_autofree char *text = NULL;
        if (g_file_get_contents(pid_file, &text, NULL, NULL) &&
            strtol(text, NULL, 10) > 0) {
            return 0;
        }
        g_usleep(10000);
    }
    if (pid_file) {
        tool_error("nbdkit wrote no pid file '%s'", pid_file);
        return 1;
    }
    return 0;
}

/* Fact 8: a local file read through the page cache. */
static bool served_buffered(const char *cache, bool image_opts, const char *file)
{
    QimgCacheMode mode = QIMG_CACHE_WRITEBACK;
    struct stat st;

    if (cache && !tool_parse_cache(cache, false, &mode)) {
        return false; /* refused earlier: not reached */
    }
    if (mode == QIMG_CACHE_NONE || mode == QIMG_CACHE_DIRECTSYNC || image_opts) {
        return false;
    }
    return stat(file, &st) == 0; /* "rbd:pool/img", "nbd://...": no such file */
}

int cmd_nbd(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"socket", required_argument, NULL, 'k'},
        {"port", required_argument, NULL, 'p'},
        {"bind", required_argument, NULL, 'b'},
        {"export-name", required_argument, NULL, 'x'},
        {"read-only", no_argument, NULL, 'r'},
        {"format", required_argument, NULL, 'f'},
        {"load-snapshot", required_argument, NULL, 'l'},
        {"snapshot", no_argument, NULL, 's'},
        {"shared", required_argument, NULL, 'e'},
        {"persistent", no_argument, NULL, 't'},
        {"nocache", no_argument, NULL, 'n'},
        {"verbose", no_argument, NULL, 'v'},
        {"cache", required_argument, NULL, OPT_CACHE},
        {"discard", required_argument, NULL, OPT_DISCARD},
        {"detect-zeroes", required_argument, NULL, OPT_DETECT_ZEROES},
        {"fork", no_argument, NULL, OPT_FORK},
        {"pid-file", required_argument, NULL, OPT_PID_FILE},
        {"tls-creds", required_argument, NULL, OPT_TLS_CREDS},
        {"object", required_argument, NULL, OPT_OBJECT},
        {"aio", required_argument, NULL, OPT_AIO},
        {"image-opts", no_argument, NULL, OPT_IMAGE_OPTS},
        {"connect", required_argument, NULL, 'c'},
        {"disconnect", no_argument, NULL, 'd'},
        {"offset", required_argument, NULL, 'o'},
        {"description", required_argument, NULL, 'D'},
        {"allocation-depth", no_argument, NULL, 'A'},
        {"bitmap", required_argument, NULL, 'B'},
        {"list", no_argument, NULL, 'L'},
        {"trace", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0},
    };
    static const char *const discards[] = {"ignore", "off", "unmap", "on", NULL};
    static const char *const dzs[] = {"off", "on", "unmap", NULL};
    const char *sock = NULL, *port = NULL, *bind = NULL, *name = NULL, *fmt = NULL;
    const char *snapshot = NULL, *cache = NULL, *discard = NULL, *dz = NULL;
    const char *pid_file = NULL, *tls_creds = NULL;
    g_autofree char *tls_id = NULL, *tls_dir = NULL;
    bool readonly = false, cow = false, persistent = false, fork_ = false,
         image_opts = false;
    bool verbose = false, list = false;
    long shared = 1;
    QimgCacheMode mode;
    int c;

    while ((c = getopt_long(argc, argv, ":hk:p:b:x:rf:l:se:tnvc:do:D:AB:LT:", longopts,
                            NULL)) != -1) {
        switch (c) {
        case 'h':
            return tool_command_help("nbd");
        case 'k':
            sock = optarg;
            break;
        case 'p': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end || v < 1 || v > 65535) {
                tool_error("Invalid port number '%s'", optarg);
                return 1;
            }
            port = optarg;
            break;
        }
        case 'b':
            bind = optarg;
            break;
        case 'x':
            name = optarg;
            break;
        case 'r':
            readonly = true;
            break;
        case 'f':
            fmt = optarg;
            break;
        case 'l':
            snapshot = optarg;
            break;
        case 's':
            cow = true;
            break;
        case 'e': {
            char *end;
            shared = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end || shared < 0 || shared > INT_MAX) {
                tool_error("Invalid shared device number '%s'", optarg);
                return 1;
            }
            break;
        }
        case 't':
            persistent = true;
            break;
        case 'n':
            cache = "none";
            break;
        case 'v':
            verbose = true;
            break;
        case OPT_CACHE:
            if (!tool_parse_cache(optarg, false, &mode)) {
                return 1;
            }
            cache = optarg;
            break;
        case OPT_DISCARD:
            if (!one_of(optarg, discards)) {
                tool_error("Invalid discard mode '%s'", optarg);
                return 1;
            }
            discard = optarg;
            break;
        case OPT_DETECT_ZEROES:
            if (!one_of(optarg, dzs)) {
                tool_error("Invalid detect-zeroes mode '%s'", optarg);
                return 1;
            }
            dz = optarg;
            break;
        case OPT_FORK:
            fork_ = true;
            break;
        case OPT_PID_FILE:
            pid_file = optarg;
            break;
        case OPT_TLS_CREDS:
            tls_creds = optarg;
            break;
        case OPT_OBJECT:
            if (g_str_has_prefix(optarg, "secret,") ||
                strstr(optarg, "qom-type=secret")) {
                int orc = tool_object_add(optarg);
                if (orc >= 0) {
                    return orc;
                }
            } else if (!parse_tls_object(optarg, &tls_id, &tls_dir)) {
                return 1;
            }
            break;
        case 'c':
        case 'd':
            tool_error("/dev/nbd devices are not supported: connect a client "
                       "(qemu-nbd -c) to the server instead");
            return 1;
        case 'L':
            list = true;
            break;
        case OPT_IMAGE_OPTS:
            image_opts = true;
            break;
        case 'o':
        case 'D':
        case 'A':
        case 'B':
        case 'T':
        case OPT_AIO: /* fact 3 */
            tool_error("option '%s' is not supported by qimg nbd", argv[optind - 1]);
            return 1;
        default:
            return tool_bad_option(c, argv);
        }
    }
    if (list) {
        if (optind != argc || tls_creds) {
            return tool_usage_error(optind != argc ? "-L takes no image file name"
                                                   : "-L over TLS is not supported");
        }
        return tool_nbd_list(sock, bind, port);
    }
    if (optind != argc - 1) {
        return tool_usage_error("Expecting one image file name");
    }
    if (sock && (port || bind)) {
        tool_error("-k and -p/-b cannot be used together");
        return 1;
    }
    if (tls_creds && (!tls_id || strcmp(tls_creds, tls_id) != 0)) {
        tool_error("No TLS credentials object with id '%s' (--object tls-creds-x509,...)",
                   tls_creds);
        return 1;
    }
    if (tls_creds && sock) {
        tool_error("TLS is only supported with a TCP socket");
        return 1;
    }
    if (image_opts && fmt) { /* qemu-nbd's check */
        tool_error("--image-opts and -f are mutually exclusive");
        return 1;
    }
    if (fmt && !qimg_format_name_valid(fmt)) { /* a known one qimg cannot read:
                                                 the plugin's open names it */
        tool_error("Unknown file format '%s'", fmt);
        return 1;
    }

    g_autoptr(GPtrArray) a = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *plugin = find_plugin();
    push(a, "nbdkit");
    if (!fork_) {
        push(a, "-f"); /* fact 1: the foreground, as qemu-nbd */
    }
    if (verbose) {
        push(a, "-v");
    }
    if (sock) {
        push(a, "-U");
        push(a, "%s", sock);
    } else {
        push(a, "-p");
        push(a, "%s", port ? port : "10809");
        if (bind) {
            push(a, "-i");
            push(a, "%s", bind);
        }
    }
    if (readonly) {
        push(a, "-r");
    }
    if (served_buffered(cache, image_opts, argv[optind])) {
        push(a, "--threads=%d", NBD_BUFFERED_THREADS); /* fact 8 */
    }
    if (pid_file) {
        push(a, "-P");
        push(a, "%s", pid_file);
    }
    if (tls_creds) {
        push(a, "--tls=require");
        push(a, "--tls-certificates=%s", tls_dir);
    }
    if (!persistent) {
        push(a, "--filter=exitlast"); /* fact 1 */
    }
    if (shared == 1) {
        push(a, "--filter=multi-conn"); /* fact 7 */
    }
    if (name) {
        push(a, "--filter=exportname");
    }
    if (cow) {
        push(a, "--filter=cow");
    }
    push(a, "%s", plugin);
    /* nbdkit makes the path absolute itself; qimg passes it as given, an
     * --image-opts list as qemu-nbd reads it (image-opts.c facts 1-4) */
    if (image_opts) {
        GError *err = NULL;
        g_autofree char *opts = tool_image_opts_list(argv[optind], true, true, &err);
        if (!opts) {
            tool_error("%s", err->message);
            g_error_free(err);
            return 1;
        }
        push(a, "file=%s", opts);
    } else {
        push(a, "file=%s", argv[optind]);
    }
    if (fmt) {
        push(a, "format=%s", fmt);
    }
    if (image_opts) {
        push(a, "image-opts=true");
    }
    if (!push_secrets(a)) {
        return 1;
    }
    if (cache) {
        push(a, "cache=%s", cache);
    }
    if (snapshot) {
        push(a, "snapshot=%s", snapshot);
    }
    if (discard) {
        push(a, "discard=%s", discard);
    }
    if (dz) {
        push(a, "detect-zeroes=%s", dz);
    }
    if (readonly && !cow) {
        push(a, "readonly=true");
    }
    if (tool_trust_names) {
        push(a, "trust-names=true");
    }
    if (shared != 0) {
        push(a, "clients=%ld", shared); /* fact 2 */
    }
    if (shared == 1) {
        push(a, "multi-conn-mode=disable"); /* fact 7 */
    }
    if (name) {
        /* fact 1: that name only, and the only one listed */
        push(a, "exportname=%s", name);
        push(a, "exportname-list=explicit");
        push(a, "exportname-strict=true");
    }
    g_ptr_array_add(a, NULL);
    fflush(stdout);
    if (fork_) {
        return run_forked((char **)a->pdata, pid_file);
    }
    exec_nbdkit((char **)a->pdata);
    return 1;
}
