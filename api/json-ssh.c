/*
 * api/json-ssh.c: QEMU's ssh options in a caller's json: name or options
 * (json-name.c invariant 18) as the "ssh://" URI block/ssh.c opens.
 *
 * Owns: which ssh options qimg takes (server.host, server.port, the older
 * host, port and host_key_check, path, user, host-key-check.*), and
 * QEMU's messages for a missing, malformed or unexpected one.
 *
 * Facts learnt from running qemu-img 7.2:
 *  1. host-key-check: a missing member is "Parameter
 *     'host-key-check.mode' is missing" (full name), a bad value
 *     "Parameter 'mode' does not accept value 'X'" (short name), a member
 *     the mode does not have "Parameter 'host-key-check.type' is
 *     unexpected".
 *  2. The older port is a number ("Parameter 'port' expects a number",
 *     also for a JSON 0.42) and needs host ("port may not be used without
 *     host"); server.port is a string that must be digits ("Use only
 *     numeric port value").  An option the node does not have is
 *     "Parameter 'K' is unexpected".  qimg refuses QEMU's other server.*
 *     members (numeric, to, ipv4, ipv6, keep-alive, mptcp) by name.
 */
#include "api/api.h"
#include "block/ssh.h"

#include <errno.h>
#include <string.h>

static gboolean missing(GError **error, const char *name)
{
    g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' is missing", name);
    return FALSE;
}

static gboolean bad_value(GError **error, const char *name, const char *v)
{
    g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' does not accept value '%s'",
                name, v);
    return FALSE;
}

/* Fact 1: host-key-check.* as QEMU's legacy setting (ssh.h invariant 2),
 * interned; NULL when none was given. */
static gboolean check_options(GHashTable *flat, const char *prefix, const char **out,
                              GError **error)
{
    g_autofree char *mode = api_flat_take(flat, prefix, "host-key-check.mode");
    g_autofree char *type = api_flat_take(flat, prefix, "host-key-check.type");
    g_autofree char *hash = api_flat_take(flat, prefix, "host-key-check.hash");
    bool is_hash = mode && strcmp(mode, "hash") == 0;

    *out = NULL;
    if (!mode) {
        return type || hash ? missing(error, "host-key-check.mode") : TRUE;
    }
    if (!is_hash && strcmp(mode, "none") != 0 && strcmp(mode, "known_hosts") != 0) {
        return bad_value(error, "mode", mode);
    }
    if (!is_hash && (type || hash)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Parameter 'host-key-check.%s' is unexpected",
                    type ? "type" : "hash");
        return FALSE;
    }
    if (!is_hash) {
        *out = mode[0] == 'n' ? "no" : "yes";
        return TRUE;
    }
    if (!type || !hash) {
        return missing(error, type ? "host-key-check.hash" : "host-key-check.type");
    }
    if (strcmp(type, "md5") != 0 && strcmp(type, "sha1") != 0 &&
        strcmp(type, "sha256") != 0) {
        return bad_value(error, "type", type);
    }
    g_autofree char *c = g_strdup_printf("%s:%s", type, hash);
    *out = g_intern_string(c);
    return TRUE;
}

/* Fact 2: the first key left under prefix that no node takes, or NULL. */
static const char *unexpected(GHashTable *flat, const char *prefix)
{
    g_autoptr(GList) keys =
        g_list_sort(g_hash_table_get_keys(flat), (GCompareFunc)strcmp);
    size_t plen = strlen(prefix);

    for (GList *l = keys; l; l = l->next) {
        if (api_protocol_key(l->data, prefix)) {
            return g_intern_string((const char *)l->data + plen);
        }
    }
    return NULL;
}

gboolean api_ssh_options(GHashTable *flat, const char *prefix, char **uri,
                         BlkOpenOptions *o, GError **error)
{
    g_autofree char *shost = api_flat_take(flat, prefix, "server.host");
    g_autofree char *sport = api_flat_take(flat, prefix, "server.port");
    g_autofree char *lhost = api_flat_take(flat, prefix, "host");
    g_autofree char *lport = api_flat_take(flat, prefix, "port");
    g_autofree char *check = api_flat_take(flat, prefix, "host_key_check");
    BlkSshLocation loc = {0};
    /* QEMU's other InetSocketAddress members: refused by name */
    static const char *const inet_opts[] = {"numeric",    "to",    "ipv4", "ipv6",
                                            "keep-alive", "mptcp", NULL};
    const char *opt_check, *other;
    uint64_t port;

    *uri = NULL;
    if (lport && !api_parse_number("port", lport, &port, error)) { /* fact 2 */
        return FALSE;
    }
    if (lport && !lhost) {
        g_set_error(error, QIMG_ERROR, EINVAL, "port may not be used without host");
        return FALSE;
    }
    if (!check_options(flat, prefix, &opt_check, error)) {
        return FALSE;
    }
    if (check && blk_ssh_check_setting(check) < 0) {
        blk_error_propagate(error, 0, NULL);
        return FALSE;
    }
    loc.host = g_strdup(lhost ? lhost : shost);
    loc.port = g_strdup(lhost ? (lport ? lport : "22") : sport);
    loc.path = api_flat_take(flat, prefix, "path");
    loc.user = api_flat_take(flat, prefix, "user");
    loc.host_key_check = g_strdup(check ? check : opt_check);
    loc.check_in_name = check != NULL; /* ssh.h invariant 2 */
    if ((other = unexpected(flat, prefix)) && g_str_has_prefix(other, "server.") &&
        g_strv_contains(inet_opts, other + strlen("server."))) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "The ssh option '%s' is not supported by qimg", other);
    } else if (other) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Parameter '%s' is unexpected", other);
    } else if (!loc.host || !loc.port || !loc.path) {
        missing(error, !loc.host ? "server.host" : !loc.port ? "server.port" : "path");
    } else if (!*loc.port || strspn(loc.port, "0123456789") != strlen(loc.port) ||
               strlen(loc.port) > 5) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Use only numeric port value");
    } else if (loc.path[0] != '/') {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "qimg takes only an absolute ssh path ('%s')", loc.path);
    } else {
        *uri = blk_ssh_uri(&loc);
        o->ssh_host_key_check = check ? NULL : opt_check;
        o->ssh_port = g_intern_string(loc.port);
    }
    blk_ssh_location_clear(&loc);
    return *uri != NULL;
}
