/*
 * api/json-nbd.c: QEMU's nbd options in a caller's json: name or options
 * (json-name.c invariant 9) as the NBD URI block/nbd.c opens.
 *
 * Owns: which nbd options qimg takes (server.type/path/host/port and the
 * older path, host and port, export, x-dirty-bitmap as the meta context,
 * reconnect-delay), the ones it refuses by name (tls-creds, tls-hostname,
 * open-timeout), and the messages for a bad or missing address.
 */
#include "api/api.h"

#include <errno.h>
#include <string.h>

gboolean api_json_nbd(GHashTable *flat, const char *prefix, char **uri, BlkOpenOptions *o,
                      GError **error)
{
    static const char *const refused[] = {"tls-creds", "tls-hostname", "open-timeout"};
    g_autofree char *type = api_flat_take(flat, prefix, "server.type");
    g_autofree char *spath = api_flat_take(flat, prefix, "server.path");
    g_autofree char *shost = api_flat_take(flat, prefix, "server.host");
    g_autofree char *sport = api_flat_take(flat, prefix, "server.port");
    g_autofree char *lpath = api_flat_take(flat, prefix, "path");
    g_autofree char *lhost = api_flat_take(flat, prefix, "host");
    g_autofree char *lport = api_flat_take(flat, prefix, "port");
    g_autofree char *export = api_flat_take(flat, prefix, "export");
    g_autofree char *bitmap = api_flat_take(flat, prefix, "x-dirty-bitmap");
    g_autofree char *delay = api_flat_take(flat, prefix, "reconnect-delay");
    g_autofree char *exp = NULL;
    const char *path = spath ? spath : lpath, *host = shost ? shost : lhost;
    const char *port = sport ? sport : lport;

    for (size_t i = 0; i < G_N_ELEMENTS(refused); i++) {
        g_autofree char *v = api_flat_take(flat, prefix, refused[i]);
        if (v) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "The nbd option '%s' is not supported by qimg", refused[i]);
            return FALSE;
        }
    }
    if (type && strcmp(type, "unix") != 0 && strcmp(type, "inet") != 0) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "NBD server type '%s' is not supported by qimg", type);
        return FALSE;
    }
    exp = g_uri_escape_string(export ? export : "", NULL, FALSE);
    if (path && !host && (!type || strcmp(type, "unix") == 0)) {
        g_autofree char *sock = g_uri_escape_string(path, "/", FALSE);
        *uri = g_strdup_printf("nbd+unix:///%s?socket=%s", exp, sock);
    } else if (host && !path && (!type || strcmp(type, "inet") == 0)) {
        *uri = g_strdup_printf(strchr(host, ':') ? "nbd://[%s]:%s/%s" : "nbd://%s:%s/%s",
                               host, port ? port : "10809", exp);
    } else {
        g_set_error(error, QIMG_ERROR, EINVAL, "NBD server address missing");
        return FALSE;
    }
    o->nbd_context = bitmap ? g_intern_string(bitmap) : NULL;
    o->nbd_reconnect_delay = 0;
    if (delay &&
        !api_parse_number("reconnect-delay", delay, &o->nbd_reconnect_delay, error)) {
        g_clear_pointer(uri, g_free);
        return FALSE;
    }
    if (o->nbd_reconnect_delay > UINT32_MAX) { /* QEMU's uint32 */
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Parameter 'reconnect-delay' expects uint32_t");
        g_clear_pointer(uri, g_free);
        return FALSE;
    }
    return TRUE;
}
