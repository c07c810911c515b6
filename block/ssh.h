/*
 * block/ssh.h: images on another host over SSH's SFTP (block/ssh.c, the
 * node over libssh; block/ssh-name.c, where an image is).
 *
 * Owns: the location of an SFTP file (user, host, port, path and how the
 * host key is checked) as QEMU 7.2 reads it from an "ssh://" URI, and the
 * interface block/protocol.c and api/ use to open, create and name one.
 *
 * Invariants (cited as "ssh.h invariant N"):
 *  1. A location is only ever the caller's: "ssh://" names select this
 *     protocol only in a name the caller gave (protocol.c invariant 2).
 *  2. The host key check is QEMU's legacy form everywhere here: "no"
 *     (none), "yes" (known_hosts), or "md5:", "sha1:", "sha256:" and the
 *     hash in hex (colons allowed); any other is refused with QEMU's
 *     "unknown host_key_check setting (X)".  One given in the name (the
 *     URI's ?host_key_check=, or json's legacy "host_key_check") is part of
 *     the node's name, as QEMU prints it; one given as json's
 *     host-key-check.* options (BlkOpenOptions.ssh_host_key_check) is not.
 */
#ifndef QIMG_BLOCK_SSH_H
#define QIMG_BLOCK_SSH_H

#include "block/block.h"

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct BlkSshLocation {
    char *user; /* NULL: the local user's name (as QEMU: g_get_user_name) */
    char *host;
    char *port; /* digits, "22" when not given */
    char *path;
    char *host_key_check; /* invariant 2; NULL: known_hosts */
    bool check_in_name;   /* invariant 2 */
} BlkSshLocation;

/* Seconds any step with the server may take (connect, each SFTP reply)
 * before the request fails: a server that is gone never hangs qimg. */
#define BLK_SSH_TIMEOUT 30

/* Names the ssh protocol takes ("ssh://..."). */
bool blk_is_ssh_name(const char *filename);
/* QEMU's parse of "ssh://[user@]host[:port]/path[?host_key_check=X]" into
 * *loc (blk_ssh_location_clear after, also on failure); 0 or -EINVAL with
 * QEMU's message. */
int blk_ssh_parse_name(const char *filename, BlkSshLocation *loc);
/* The canonical "ssh://" URI of loc (g_free), from which
 * blk_ssh_parse_name reads loc back: user, host and path escaped. */
char *blk_ssh_uri(const BlkSshLocation *loc);
/* Checks a host key check setting (invariant 2): 0 or -EINVAL with
 * QEMU's message. */
int blk_ssh_check_setting(const char *host_key_check);
void blk_ssh_location_clear(BlkSshLocation *loc);

extern const BlkDriver blk_ssh_driver;

/* The node for filename ("ssh://..."), its host key checked as
 * opts->ssh_host_key_check says when the name does not; messages with
 * blk_error(). */
BlkNode *blk_open_ssh(const char *filename, const BlkOpenOptions *opts);
/* qemu-img create over ssh: the file made (O_CREAT | O_TRUNC, mode 0644)
 * and grown to size rounded up to 512 bytes; preallocation and an object
 * size are QEMU's "Invalid parameter" (its ssh create takes only the
 * size). */
int blk_ssh_create(const char *filename, uint64_t size, BlkPrealloc prealloc,
                   uint64_t object_size);

#endif
