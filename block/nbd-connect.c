/*
 * block/nbd-connect.c: one connection to an NBD export, and the name QEMU
 * gives it -- the handshake half of the NBD node (block/nbd.c).
 *
 * Owns: reading the names (qemu-img's legacy nbd: names, plain TCP and
 * Unix socket URIs), the handshake with or without a deadline, the
 * server's error text, the canonical name, an oldstyle handshake without
 * flags read as QEMU reads it.  Keeps nbd.c invariants 1 (extra
 * connections end their handshake by a deadline), 6 (the server's refusal
 * text), 8 (qimg's own TCP and Unix connect) and 9 (the oldstyle flags);
 * nbd-lib.h invariant 1 (libnbd only through blk_nbd_lib).
 *
 * Facts (cited as "fact N"):
 *  1. nbd.c invariant 9: an oldstyle handshake whose 32 bits of flags are
 *     all zero (QEMU's nbd-fault-injector sends one, QEMU iotest 277) is
 *     an export with no optional feature for QEMU's client (writable, no
 *     flush, FUA, trim or zeroes).  libnbd refuses it ("invalid eflags ==
 *     0 from server", whatever its strict mode).  For a socket qimg
 *     connected (nbd.c invariant 8), qimg reads that handshake itself (it
 *     comes whole before the client says anything), gives libnbd the same
 *     with NBD_FLAG_HAS_FLAGS alone from a socket pair, and once libnbd is
 *     ready puts the server's socket under the descriptor libnbd reads
 *     (dup3; that libnbd sent nothing yet, as an oldstyle client does not,
 *     is checked).  Every other handshake reaches libnbd untouched on the
 *     server's socket.
 *  2. Peeking at a handshake never waits for bytes that cannot come: a
 *     peek of MSG_PEEK keeps returning the bytes already there after the
 *     server closed, never 0, so a server that closes in the middle of
 *     its greeting is seen by POLLRDHUP (checked before each peek, so
 *     that the peek has all the server sent); what it sent goes to
 *     libnbd, which fails the handshake at its end.
 */
#include "block/block.h"
#include "block/inet.h"
#include "block/nbd-lib.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NL blk_nbd_lib

#define NBD_DEFAULT_PORT "10809"

/* The oldstyle handshake (the NBD protocol's "oldstyle negotiation"): the
 * server sends it whole and waits for the first request. */
#define NBD_OLD_LEN 152                 /* magic, cliserv magic, size, flags, 124 zeros */
#define NBD_OLD_FLAGS_AT 24             /* 16 bits of gflags, 16 of eflags */
#define NBD_MAGIC 0x4e42444d41474943ull /* "NBDMAGIC" */
#define NBD_OLD_MAGIC 0x00420281861253ull
#define NBD_FLAG_HAS_FLAGS 1u

/* Where a name leads: a TCP host and port qimg connects to itself
 * (invariant 8), a Unix socket libnbd connects to, or (neither: the
 * target is not filled) a URI libnbd takes whole. */
typedef struct NbdTarget {
    char *host, *port; /* plain TCP */
    char *unix_path;   /* nbd:unix:PATH */
    char *export;
} NbdTarget;

static void target_clear(NbdTarget *t)
{
    g_free(t->host);
    g_free(t->port);
    g_free(t->unix_path);
    g_free(t->export);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(NbdTarget, target_clear)

/* qemu-img's nbd:unix:PATH[:exportname=NAME] / nbd:HOST[:PORT][:exportname=NAME];
 * -EINVAL with the message when it does not parse. */
static int parse_legacy(const char *name, NbdTarget *t)
{
    g_auto(GStrv) parts = g_strsplit(name + strlen("nbd:"), ":", -1);
    int n = (int)g_strv_length(parts);

    if (n > 0 && g_str_has_prefix(parts[n - 1], "exportname=")) {
        t->export = g_strdup(parts[n - 1] + strlen("exportname="));
        n--;
    } else {
        t->export = g_strdup("");
    }
    if (n == 2 && strcmp(parts[0], "unix") == 0) {
        t->unix_path = g_strdup(parts[1]);
    } else if (n == 2 || n == 1) {
        t->host = g_strdup(parts[0]);
        t->port = g_strdup(n == 2 ? parts[1] : NBD_DEFAULT_PORT);
    } else {
        return blk_error(EINVAL, "expected nbd:unix:PATH[:exportname=NAME] or "
                                 "nbd:HOST:PORT[:exportname=NAME]");
    }
    return 0;
}

/* nbd://HOST[:PORT][/EXPORT] with nothing else in it (no user, query or
 * fragment), read as QEMU and libnbd read it: no host is localhost, no
 * port (or 0) is 10809, the export is the path without its first '/'.
 * False: a URI for libnbd. */
static bool parse_tcp_uri(const char *name, NbdTarget *t)
{
    g_autofree char *scheme = NULL, *user = NULL, *host = NULL, *path = NULL;
    g_autofree char *query = NULL, *fragment = NULL;
    int port = -1;

    if (!g_uri_split(name, G_URI_FLAGS_NONE, &scheme, &user, &host, &port, &path, &query,
                     &fragment, NULL) ||
        strcmp(scheme, "nbd") != 0 || user || query || fragment) {
        return false;
    }
    t->host = g_strdup(host && *host ? host : "localhost");
    t->port = port > 0 ? g_strdup_printf("%d", port) : g_strdup(NBD_DEFAULT_PORT);
    t->export = g_strdup(path[0] == '/' ? path + 1 : path);
    return true;
}

/* nbd+unix:///[EXPORT]?socket=PATH with nothing else in it (no host,
 * user, fragment or other parameter), read as libnbd reads it.  False: a
 * URI for libnbd. */
static bool parse_unix_uri(const char *name, NbdTarget *t)
{
    g_autofree char *scheme = NULL, *user = NULL, *host = NULL, *path = NULL;
    g_autofree char *query = NULL, *fragment = NULL;
    g_autoptr(GHashTable) params = NULL;
    const char *sock;
    int port = -1;

    if (!g_uri_split(name, G_URI_FLAGS_ENCODED_QUERY, &scheme, &user, &host, &port, &path,
                     &query, &fragment, NULL) ||
        strcmp(scheme, "nbd+unix") != 0 || user || (host && *host) || port != -1 ||
        fragment || !query ||
        !(params = g_uri_parse_params(query, -1, "&", G_URI_PARAMS_NONE, NULL)) ||
        g_hash_table_size(params) != 1 ||
        !(sock = g_hash_table_lookup(params, "socket")) || !*sock) {
        return false;
    }
    t->unix_path = g_strdup(sock);
    t->export = g_strdup(path[0] == '/' ? path + 1 : path);
    return true;
}

/* 1 with *t filled, 0 for a name libnbd takes whole, -EINVAL with the
 * message for a legacy name that does not parse. */
static int parse_target(const char *name, NbdTarget *t)
{
    if (g_str_has_prefix(name, "nbd://")) {
        return parse_tcp_uri(name, t) ? 1 : 0;
    }
    if (g_str_has_prefix(name, "nbd+unix://")) {
        return parse_unix_uri(name, t) ? 1 : 0;
    }
    if (g_str_has_prefix(name, "nbd:")) {
        int ret = parse_legacy(name, t);
        return ret < 0 ? ret : 1;
    }
    return 0;
}

/* Fact 1: the server's socket, which libnbd gets in place of the
 * socket pair it read the handshake from once that is done. */
typedef struct NbdSwap {
    int server; /* -1: libnbd has the server's socket itself */
    int pair;   /* qimg's end of the pair */
} NbdSwap;

static void swap_clear(NbdSwap *sw)
{
    if (sw->server >= 0) {
        close(sw->server);
        close(sw->pair);
    }
    sw->server = sw->pair = -1;
}

/* Fact 2: true once the server closed its side (or the socket failed):
 * what can be peeked now is all it will ever send. */
static bool peer_closed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};

    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Waits until @len bytes the server sends unasked are there to peek at:
 * the count peeked (less once the server closed: fact 2), -ETIMEDOUT at
 * @deadline (0: none), or -errno. */
static ssize_t peek_at(int fd, uint8_t *buf, size_t len, int64_t deadline)
{
    for (;;) {
        bool closed = peer_closed(fd); /* before the peek: nothing comes after */
        ssize_t n = recv(fd, buf, len, MSG_PEEK | MSG_DONTWAIT);
        int64_t left_ms =
            deadline ? (deadline - g_get_monotonic_time() + 999) / 1000 : -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};

        if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
            return -errno;
        }
        if (n == 0 || (n > 0 && ((size_t)n >= len || closed))) {
            return n;
        }
        if (deadline && left_ms <= 0) {
            return -ETIMEDOUT;
        }
        if (n > 0) {
            g_usleep(1000); /* the rest is on its way; poll would not wait */
        } else if (poll(&p, 1, (int)MIN(left_ms, INT_MAX)) < 0 && errno != EINTR) {
            return -errno;
        }
    }
}

static uint64_t be64_at(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return GUINT64_FROM_BE(v);
}

/* Fact 1: true when @hs starts an oldstyle handshake. */
static bool is_oldstyle(const uint8_t *hs)
{
    return be64_at(hs) == NBD_MAGIC && be64_at(hs + 8) == NBD_OLD_MAGIC;
}

/* Fact 1: the whole of an oldstyle handshake whose 32 bits of flags
 * are all zero (QEMU's client takes it, libnbd refuses it). */
static bool old_without_flags(const uint8_t *hs)
{
    static const uint8_t zero[4];

    return is_oldstyle(hs) && memcmp(hs + NBD_OLD_FLAGS_AT, zero, sizeof(zero)) == 0;
}

/* Starts @h's handshake on @fd, the server's connected socket, owned from
 * here on (fact 1: through a socket pair, *@sw filled, when the
 * server's oldstyle handshake has no flags); as start_connect. */
static int hand_over(struct nbd_handle *h, int fd, bool async, int64_t deadline,
                     NbdSwap *sw, int *err)
{
    uint8_t hs[NBD_OLD_LEN];
    ssize_t n = peek_at(fd, hs, 16, deadline);
    int sp[2];

    if (n == 16 && is_oldstyle(hs)) {
        n = peek_at(fd, hs, NBD_OLD_LEN, deadline);
    }
    if (n == -ETIMEDOUT) {
        close(fd);
        *err = blk_error(ETIMEDOUT, "the NBD server sent no handshake in time");
        return -1;
    }
    if (n == NBD_OLD_LEN && old_without_flags(hs)) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
            *err = blk_error(errno, "socketpair: %s", g_strerror(errno));
            close(fd);
            return -1;
        }
        sw->server = fd;
        sw->pair = sp[1];
        fd = sp[0];
        /* the pair gets the handshake with NBD_FLAG_HAS_FLAGS alone: no
         * optional feature, as QEMU reads no flags */
        bool ok = recv(sw->server, hs, NBD_OLD_LEN, MSG_WAITALL) == NBD_OLD_LEN &&
                  old_without_flags(hs);
        if (ok) {
            hs[NBD_OLD_FLAGS_AT + 3] = NBD_FLAG_HAS_FLAGS;
            ok = write(sw->pair, hs, NBD_OLD_LEN) == NBD_OLD_LEN;
        }
        if (!ok) {
            *err = blk_error(EIO, "Could not read the NBD server's handshake");
            close(fd);
            return -1;
        }
    }
    /* libnbd owns fd from here on, and closes it when it fails (on a fresh
     * handle nothing refuses it before it takes it) */
    return async ? NL.nbd_aio_connect_socket(h, fd) : NL.nbd_connect_socket(h, fd);
}

/* Fact 1: once libnbd is READY, the server's socket under the
 * descriptor libnbd reads; 0, or -1 with *@err and the message. */
static int swap_finish(struct nbd_handle *h, NbdSwap *sw, int *err)
{
    int lib, fl;
    char c;

    if (sw->server < 0) {
        return 0;
    }
    lib = NL.nbd_aio_get_fd(h);
    fl = lib < 0 ? -1 : fcntl(lib, F_GETFL);
    /* an oldstyle client sends nothing before its first request */
    if (fl < 0 || recv(sw->pair, &c, 1, MSG_DONTWAIT) != -1 ||
        (errno != EAGAIN && errno != EWOULDBLOCK) || fcntl(sw->server, F_SETFL, fl) < 0 ||
        dup3(sw->server, lib, O_CLOEXEC) < 0) {
        *err = blk_error(EPROTO, "Could not hand the NBD connection over to libnbd");
        return -1;
    }
    swap_clear(sw);
    return 0;
}

/* Starts @h's connection to @name (with the handshake unless @async):
 * 0, or -1 with libnbd's error, or with *@err = -errno and the message
 * recorded when the name did not parse or qimg's own connect failed
 * (invariant 8). */
static int start_connect(struct nbd_handle *h, const char *name, bool async,
                         int64_t deadline, NbdSwap *sw, int *err)
{
    g_auto(NbdTarget) t = {0};
    int r = parse_target(name, &t);
    int fd;

    if (r < 0) {
        *err = r;
        return -1;
    }
    if (r == 0) {
        return async ? NL.nbd_aio_connect_uri(h, name) : NL.nbd_connect_uri(h, name);
    }
    if (NL.nbd_set_export_name(h, t.export) < 0) {
        return -1;
    }
    fd = t.unix_path ? blk_unix_connect(t.unix_path, deadline)
                     : blk_inet_connect(t.host, t.port, deadline);
    if (fd < 0) {
        *err = fd;
        return -1;
    }
    return hand_over(h, fd, async, deadline, sw, err);
}

/* Waits until @h's handshake is done; -ETIMEDOUT at @deadline (monotonic
 * microseconds), -EIO when the connection failed. */
static int await_ready(struct nbd_handle *h, int64_t deadline)
{
    while (NL.nbd_aio_is_ready(h) != 1) {
        int64_t left_ms = (deadline - g_get_monotonic_time()) / 1000;

        if (NL.nbd_aio_is_dead(h) == 1 || NL.nbd_aio_is_closed(h) == 1) {
            return -EIO;
        }
        if (left_ms <= 0) {
            return -ETIMEDOUT;
        }
        if (NL.nbd_poll(h, (int)MIN(left_ms, INT_MAX)) < 0) {
            return -EIO;
        }
    }
    return 0;
}

#define NBD_SERVER_MSG "server error message: "

/* libnbd passes the text of a server's option error only to its debug
 * messages (invariant 6): keeps the first, forwards all of them to stderr
 * when LIBNBD_DEBUG asked for them. */
static int note_server_msg(void *user, const char *context, const char *msg)
{
    char **out = user;
    const char *p = strstr(msg, NBD_SERVER_MSG);

    if (p && !*out) {
        *out = g_strdup(p + strlen(NBD_SERVER_MSG));
    }
    if (g_getenv("LIBNBD_DEBUG")) {
        fprintf(stderr, "libnbd: debug: %s: %s\n", context, msg);
    }
    return 0;
}

/* One connection with its handshake done.  @deadline 0 waits as long as
 * the connection takes (the first one, whose server error text goes to
 * *@server_msg: invariant 6); otherwise the handshake must end by then (an
 * extra one: invariant 1). */
struct nbd_handle *blk_nbd_connect_one(const char *name, const char *context, int *err,
                                       int64_t deadline, char **server_msg)
{
    struct nbd_handle *h = NL.nbd_create();
    NbdSwap sw = {.server = -1, .pair = -1};
    bool async = deadline != 0;
    bool debug = false;
    int r;

    if (!h) {
        return NULL;
    }
    if (NL.nbd_add_meta_context(h, context) < 0) {
        NL.nbd_close(h);
        return NULL;
    }
    if (server_msg) {
        nbd_debug_callback cb = {.callback = note_server_msg, .user_data = server_msg};
        debug = NL.nbd_get_debug(h) == 1;
        NL.nbd_set_debug_callback(h, cb);
        NL.nbd_set_debug(h, true);
    }
    *err = 0;
    r = start_connect(h, name, async, deadline, &sw, err);
    if (server_msg) {
        NL.nbd_set_debug(h, debug);
        NL.nbd_clear_debug_callback(h);
    }
    if (r >= 0 && async) {
        r = await_ready(h, deadline);
    }
    if (r >= 0) {
        r = swap_finish(h, &sw, err);
    }
    swap_clear(&sw);
    if (r < 0) {
        NL.nbd_close(h);
        return NULL;
    }
    return h;
}

/* QEMU's name for the export (its nbd_refresh_filename: what qemu-img info
 * and map print): nbd+unix://?socket=S or nbd+unix:///EXPORT?socket=S,
 * nbd://HOST:PORT or nbd://HOST:PORT/EXPORT. */
char *blk_nbd_canonical_name(struct nbd_handle *h, const char *given)
{
    g_auto(NbdTarget) t = {0};
    g_autofree char *uri = NULL;
    g_autofree char *export = NULL;
    const char *q;

    if (parse_target(given, &t) == 1 && t.host) { /* invariant 8: qimg's own TCP */
        g_autofree char *hp = g_strdup_printf(
            strchr(t.host, ':') ? "nbd://[%s]:%s" : "nbd://%s:%s", t.host, t.port);
        return *t.export ? g_strdup_printf("%s/%s", hp, t.export) : g_steal_pointer(&hp);
    }
    if (t.unix_path) { /* invariant 8: qimg's own Unix connect */
        return *t.export
                   ? g_strdup_printf("nbd+unix:///%s?socket=%s", t.export, t.unix_path)
                   : g_strdup_printf("nbd+unix://?socket=%s", t.unix_path);
    }
    uri = NL.nbd_get_uri(h);
    export = NL.nbd_get_export_name(h);
    if (!uri) {
        return g_strdup(given);
    }
    if (g_str_has_prefix(uri, "nbd+unix:///") && (q = strstr(uri, "?socket="))) {
        return export && *export ? g_strdup(uri) : g_strdup_printf("nbd+unix://%s", q);
    }
    if (g_str_has_prefix(uri, "nbd://")) {
        const char *host = uri + strlen("nbd://");
        const char *slash = strchr(host, '/');
        g_autofree char *hp =
            slash ? g_strndup(host, (size_t)(slash - host)) : g_strdup(host);
        const char *port = hp[0] == '[' ? strstr(hp, "]:") : strrchr(hp, ':');
        g_autofree char *hostport =
            port ? g_strdup(hp) : g_strdup_printf("%s:" NBD_DEFAULT_PORT, hp);
        return export && *export ? g_strdup_printf("nbd://%s/%s", hostport, export)
                                 : g_strdup_printf("nbd://%s", hostport);
    }
    return g_strdup(uri);
}
