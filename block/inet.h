/*
 * block/inet.h: the TCP or Unix socket connection a protocol node opens
 * itself, as QEMU opens it (block/inet.c): the ssh node's (block/ssh.c)
 * and the NBD node's for plain TCP and Unix socket names
 * (block/nbd-connect.c).
 *
 * Owns: resolving HOST:PORT and connecting to the first of its addresses
 * that answers, connecting to a Unix socket's path, with QEMU's messages.
 *
 * Invariants (cited as "inet.h invariant N"):
 *  1. Failures are reported in QEMU's words (its util/qemu-sockets.c):
 *     "address resolution failed for HOST:PORT: GAI_STRERROR" (EHOSTUNREACH)
 *     when the name does not resolve; "Failed to connect to 'HOST:PORT':
 *     STRERROR" with the errno of the last address tried when none answers.
 *  2. The addresses are tried in getaddrinfo's order, all of them together
 *     until the caller's deadline: a host that never answers fails with
 *     ETIMEDOUT then, never later (no deadline: as long as the kernel
 *     tries).  The name's resolution itself is the resolver's.
 *  3. The socket returned is connected, blocking, close-on-exec, with
 *     TCP_NODELAY (requests are small and wait for their answer).
 *  4. A Unix socket: "Failed to connect to 'PATH': STRERROR" (QEMU's
 *     unix_connect_saddr), "UNIX socket path 'PATH' is too long"; a
 *     listener whose backlog is full is waited for until the deadline
 *     (ETIMEDOUT), as long as it takes without one.  The socket returned
 *     is connected, blocking, close-on-exec.
 */
#ifndef QIMG_BLOCK_INET_H
#define QIMG_BLOCK_INET_H

#include <stdint.h>

/* A connected TCP socket to @host:@port (invariant 3), or -errno with the
 * message recorded (invariant 1).  @deadline: monotonic microseconds
 * (g_get_monotonic_time) by which the connect must be done, 0 for none
 * (invariant 2). */
int blk_inet_connect(const char *host, const char *port, int64_t deadline);

/* A connected Unix stream socket to @path (invariant 4), or -errno with
 * the message recorded; @deadline as above. */
int blk_unix_connect(const char *path, int64_t deadline);

#endif
