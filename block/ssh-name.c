/*
 * block/ssh-name.c: where an SFTP file is -- the "ssh://" URI as QEMU 7.2
 * reads it (ssh.h invariants 1 and 2).  Built with or without libssh.
 *
 * Owns: parsing and building "ssh://" URIs, checking a host key check
 * setting.
 *
 * Facts learnt from running qemu-img 7.2:
 *  1. "ssh://[user@]host[:port]/path": the path is the URI's, with its
 *     leading '/' (an absolute path on the server); port 22 when not
 *     given; query parameters other than host_key_check are ignored.
 *  2. Its messages: "URI scheme must be 'ssh'", "missing hostname in URI",
 *     "missing remote path in URI".
 */
#include "block/ssh.h"

#include <errno.h>
#include <string.h>

bool blk_is_ssh_name(const char *filename)
{
    return g_str_has_prefix(filename, "ssh:");
}

int blk_ssh_check_setting(const char *c)
{
    if (strcmp(c, "no") == 0 || strcmp(c, "yes") == 0 || g_str_has_prefix(c, "md5:") ||
        g_str_has_prefix(c, "sha1:") || g_str_has_prefix(c, "sha256:")) {
        return 0;
    }
    return blk_error(EINVAL, "unknown host_key_check setting (%s)", c);
}

void blk_ssh_location_clear(BlkSshLocation *loc)
{
    g_clear_pointer(&loc->user, g_free);
    g_clear_pointer(&loc->host, g_free);
    g_clear_pointer(&loc->port, g_free);
    g_clear_pointer(&loc->path, g_free);
    g_clear_pointer(&loc->host_key_check, g_free);
    loc->check_in_name = false;
}

/* Fact 1: host_key_check from the query; the others are ignored. */
static int parse_query(const char *query, BlkSshLocation *loc)
{
    g_autoptr(GHashTable) params = NULL;
    const char *c;

    if (!query) {
        return 0;
    }
    params = g_uri_parse_params(query, -1, "&", G_URI_PARAMS_NONE, NULL);
    if (!params) {
        return blk_error(EINVAL, "could not parse query parameters");
    }
    c = g_hash_table_lookup(params, "host_key_check");
    if (c) {
        loc->host_key_check = g_strdup(c);
        loc->check_in_name = true;
    }
    return 0;
}

int blk_ssh_parse_name(const char *filename, BlkSshLocation *loc)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(GUri) uri = NULL;
    const char *host;
    int ret;

    blk_ssh_location_clear(loc);
    uri = g_uri_parse(filename, G_URI_FLAGS_ENCODED_QUERY, &err);
    if (!uri) {
        return blk_error(EINVAL, "Invalid URI: %s", err->message);
    }
    if (g_strcmp0(g_uri_get_scheme(uri), "ssh") != 0) { /* fact 2 */
        return blk_error(EINVAL, "URI scheme must be 'ssh'");
    }
    host = g_uri_get_host(uri);
    if (!host || !*host) {
        return blk_error(EINVAL, "missing hostname in URI");
    }
    if (!*g_uri_get_path(uri)) {
        return blk_error(EINVAL, "missing remote path in URI");
    }
    if (g_uri_get_user(uri) && *g_uri_get_user(uri)) {
        loc->user = g_strdup(g_uri_get_user(uri));
    }
    loc->host = g_strdup(host);
    loc->port = g_strdup_printf("%d", g_uri_get_port(uri) > 0 ? g_uri_get_port(uri) : 22);
    loc->path = g_strdup(g_uri_get_path(uri));
    ret = parse_query(g_uri_get_query(uri), loc);
    if (ret == 0 && loc->host_key_check) {
        ret = blk_ssh_check_setting(loc->host_key_check);
    }
    return ret;
}

char *blk_ssh_uri(const BlkSshLocation *loc)
{
    g_autoptr(GString) s = g_string_new("ssh://");

    if (loc->user) {
        g_string_append_uri_escaped(s, loc->user, NULL, FALSE);
        g_string_append_c(s, '@');
    }
    if (strchr(loc->host, ':')) {
        g_string_append_printf(s, "[%s]", loc->host);
    } else {
        g_string_append_uri_escaped(s, loc->host, NULL, FALSE);
    }
    g_string_append_printf(s, ":%s", loc->port);
    g_string_append_uri_escaped(s, loc->path, "/", FALSE);
    if (loc->check_in_name && loc->host_key_check) {
        g_string_append(s, "?host_key_check=");
        g_string_append_uri_escaped(s, loc->host_key_check, ":", FALSE);
    }
    return g_string_free(g_steal_pointer(&s), FALSE);
}
