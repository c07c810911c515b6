/*
 * block/nbd-connect.c: one connection to an NBD export, and the name QEMU
 * gives it -- the handshake half of the NBD node (block/nbd.c).
 *
 * Owns: parsing qemu-img's legacy nbd: names, the handshake with or
 * without a deadline, the server's error text, the canonical name.
 * Keeps nbd.c invariants 1 (extra connections end their handshake by a
 * deadline) and 6 (the server's refusal text); nbd-lib.h invariant 1
 * (libnbd only through blk_nbd_lib).
 */
#include "block/block.h"
#include "block/nbd-lib.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#define NL blk_nbd_lib

/* qemu-img's nbd:unix:PATH[:exportname=NAME] / nbd:HOST:PORT[:exportname=NAME] */
static int connect_legacy(struct nbd_handle *h, const char *name, bool async)
{
    g_auto(GStrv) parts = g_strsplit(name + strlen("nbd:"), ":", -1);
    const char *export = "";
    int n = (int)g_strv_length(parts);

    if (n > 0 && g_str_has_prefix(parts[n - 1], "exportname=")) {
        export = parts[n - 1] + strlen("exportname=");
        n--;
    }
    if (NL.nbd_set_export_name(h, export) < 0) {
        return -1;
    }
    if (n == 2 && strcmp(parts[0], "unix") == 0) {
        return async ? NL.nbd_aio_connect_unix(h, parts[1])
                     : NL.nbd_connect_unix(h, parts[1]);
    }
    if (n == 2 || n == 1) {
        const char *port = n == 2 ? parts[1] : "10809";
        return async ? NL.nbd_aio_connect_tcp(h, parts[0], port)
                     : NL.nbd_connect_tcp(h, parts[0], port);
    }
    errno = EINVAL;
    return -2;
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
struct nbd_handle *blk_nbd_connect_one(const char *name, const char *context,
                                       int *legacy_err, int64_t deadline,
                                       char **server_msg)
{
    struct nbd_handle *h = NL.nbd_create();
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
    if (g_str_has_prefix(name, "nbd:") && !g_str_has_prefix(name, "nbd://")) {
        r = connect_legacy(h, name, async);
    } else {
        r = async ? NL.nbd_aio_connect_uri(h, name) : NL.nbd_connect_uri(h, name);
    }
    if (server_msg) {
        NL.nbd_set_debug(h, debug);
        NL.nbd_clear_debug_callback(h);
    }
    *legacy_err = r == -2;
    if (r >= 0 && async) {
        r = await_ready(h, deadline);
    }
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
    g_autofree char *uri = NL.nbd_get_uri(h);
    g_autofree char *export = NL.nbd_get_export_name(h);
    const char *q;

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
        g_autofree char *hostport = port ? g_strdup(hp) : g_strdup_printf("%s:10809", hp);
        return export && *export ? g_strdup_printf("nbd://%s/%s", hostport, export)
                                 : g_strdup_printf("nbd://%s", hostport);
    }
    return g_strdup(uri);
}
