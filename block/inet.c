/*
 * block/inet.c: the TCP or Unix socket connection a protocol node opens
 * itself (inet.h invariants 1 to 4).
 *
 * Owns: blk_inet_connect, blk_unix_connect.
 */
#include "block/inet.h"
#include "block/block.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* Invariant 2: waits for fd's non-blocking connect; 0 or the errno. */
static int await_connect(int fd, int64_t deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int64_t left_ms =
            deadline ? (deadline - g_get_monotonic_time() + 999) / 1000 : -1;
        int err = 0;
        socklen_t len = sizeof(err);
        int n;

        if (deadline && left_ms <= 0) {
            return ETIMEDOUT;
        }
        n = poll(&p, 1, (int)MIN(left_ms, INT_MAX));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return errno;
        }
        if (n == 0) {
            continue; /* the deadline is checked above */
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) {
            return errno;
        }
        return err;
    }
}

/* One address: a connected socket (invariant 3) or -errno. */
static int connect_one(const struct addrinfo *a, int64_t deadline)
{
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    a->ai_protocol);
    int err, fl, one = 1;

    if (fd < 0) {
        return -errno;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        err = 0;
    } else {
        err = errno == EINPROGRESS ? await_connect(fd, deadline) : errno;
    }
    if (err == 0) {
        fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
            err = errno;
        }
    }
    if (err != 0) {
        close(fd);
        return -err;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

int blk_inet_connect(const char *host, const char *port, int64_t deadline)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int fd = -ECONNREFUSED;
    int gai = getaddrinfo(host, port, &hints, &res);

    if (gai != 0) { /* invariant 1 */
        return blk_error(EHOSTUNREACH, "address resolution failed for %s:%s: %s", host,
                         port, gai_strerror(gai));
    }
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = connect_one(a, deadline);
        if (fd >= 0 || (deadline && g_get_monotonic_time() >= deadline)) {
            break; /* invariant 2: the deadline is for all of them */
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        return blk_error(-fd, "Failed to connect to '%s:%s': %s", host, port,
                         g_strerror(-fd));
    }
    return fd;
}

int blk_unix_connect(const char *path, int64_t deadline)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    int fd, err = 0;

    if (len >= sizeof(un.sun_path)) { /* invariant 4 */
        return blk_error(EINVAL, "UNIX socket path '%s' is too long", path);
    }
    memcpy(un.sun_path, path, len + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return blk_error(errno, "Failed to create socket: %s", g_strerror(errno));
    }
    if (deadline) {
        /* a blocking connect to a full backlog waits SO_SNDTIMEO at most */
        int64_t left = deadline - g_get_monotonic_time();
        struct timeval tv = {.tv_sec = (time_t)(left / G_USEC_PER_SEC),
                             .tv_usec = (suseconds_t)(left % G_USEC_PER_SEC)};

        if (left <= 0) {
            err = ETIMEDOUT;
        } else if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
            err = errno;
        }
    }
    if (err == 0 && connect(fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
        err = errno == EAGAIN || errno == EINPROGRESS ? ETIMEDOUT : errno;
    }
    if (err == 0 && deadline) {
        struct timeval none = {0};

        if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none)) < 0) {
            err = errno;
        }
    }
    if (err != 0) {
        close(fd);
        return blk_error(err, "Failed to connect to '%s': %s", path, g_strerror(err));
    }
    return fd;
}
