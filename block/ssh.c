/*
 * block/ssh.c: the ssh protocol node -- a file on another host read and
 * written over SFTP with libssh, as QEMU 7.2's ssh block driver does.
 *
 * Owns: one SSH session and its SFTP file per node, the connection (TCP,
 * host key check, authentication), the node's requests and qemu-img
 * create over ssh.
 *
 * Facts learnt from running qemu-img/qemu-io 7.2 (with libssh 0.10):
 *  1. The node is named "ssh://USER@HOST:PORT/PATH", USER the local user's
 *     name when none was given, with "?host_key_check=X" when the name (or
 *     json's legacy host_key_check) gave one (ssh.h invariant 2); "disk
 *     size: unavailable"; driver=ssh is the node itself, format "ssh".
 *  2. QEMU opens the TCP connection itself: "Failed to connect to
 *     'HOST:PORT': STRERROR", "address resolution failed for HOST:PORT:
 *     GAI_STRERROR"; then libssh reads ~/.ssh/config.
 *  3. Host keys: "no host key was found in known_hosts", "known_hosts
 *     file not found", "host key (TYPE key with fingerprint SHA256:...)
 *     does not match the one in known_hosts; this may be a possible
 *     attack", "remote host TYPE key fingerprint 'T:HEX' does not match
 *     host_key_check 'T:GIVEN'".
 *  4. Authentication: "none", then public keys (libssh's: the agent, then
 *     ~/.ssh/id_*), never a password; else "failed to authenticate using
 *     publickey authentication and the identities held by your ssh-agent".
 *  5. A missing file: "failed to open remote file 'PATH': SFTP server: No
 *     such file (libssh error code: 1, sftp error code: 2)".
 *  6. Reads past the end of the file read zeros; writes grow it; flush is
 *     fsync@openssh.com when the server has it (else a warning, once);
 *     truncate only grows (by writing one byte), "ssh driver does not
 *     support shrinking files"; no preallocation; no discard or
 *     write-zeroes of its own.
 *
 * Invariants:
 *  1. One request at a time uses the session (libssh sessions are not
 *     thread-safe): every request holds s->lock.
 *  2. A read has up to SSH_READ_DEPTH SFTP reads of SSH_READ_CHUNK bytes in
 *     flight (libssh 0.10's sftp_async_read_begin); a short answer that is
 *     not the end of the file restarts the pipeline from where it ended
 *     (the answers still in flight are drained first).  libssh 0.10 has no
 *     asynchronous SFTP write: writes go one SSH_WRITE_CHUNK at a time.
 *  3. No step waits for the server longer than BLK_SSH_TIMEOUT seconds
 *     (the TCP connect by its deadline, block/inet.c, the rest by libssh's
 *     SSH_OPTIONS_TIMEOUT).
 *  4. s->size is the file's size: fstat at open, then the end of every
 *     write beyond it (offsets checked for overflow first).
 *  5. A flush asks the server to fsync only when the node wrote since the
 *     last good one (s->dirty): closing a node that only read never fails
 *     on a server that has gone away.
 */
#include "block/inet.h"
#include "block/ssh-lib.h"
#include "block/ssh.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ssh-lib.h invariant 1: libssh through the table ssh-lib.c loads */
#define SL blk_ssh_lib

enum { SSH_READ_CHUNK = 32768, SSH_READ_DEPTH = 16, SSH_WRITE_CHUNK = 131072 };

typedef struct SshState {
    ssh_session session;
    sftp_session sftp;
    sftp_file file;
    uint64_t size; /* invariant 4 */
    bool regular;
    bool warned_fsync;
    bool dirty; /* invariant 5 */
    char *host;
    GMutex lock; /* invariant 1 */
} SshState;

static int session_error(SshState *s, int err, const char *what)
{
    return blk_error(err, "%s: %s (libssh error code: %d)", what,
                     SL.ssh_get_error(s->session), SL.ssh_get_error_code(s->session));
}

static int sftp_error(SshState *s, int err, const char *what)
{
    return blk_error(err, "%s: %s (libssh error code: %d, sftp error code: %d)", what,
                     SL.ssh_get_error(s->session), SL.ssh_get_error_code(s->session),
                     SL.sftp_get_error(s->sftp));
}

/* Fact 3: the server's key against known_hosts. */
static int check_known_hosts(SshState *s)
{
    ssh_key key = NULL;
    unsigned char *hash = NULL;
    size_t hlen = 0;
    char *fp = NULL;
    int ret;

    switch (SL.ssh_session_is_known_server(s->session)) {
    case SSH_KNOWN_HOSTS_OK:
        return 0;
    case SSH_KNOWN_HOSTS_CHANGED:
        if (SL.ssh_get_server_publickey(s->session, &key) == 0 &&
            SL.ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) ==
                0) {
            fp = SL.ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen);
        }
        if (fp) {
            ret =
                blk_error(EINVAL,
                          "host key (%s key with fingerprint %s) does not match the one "
                          "in known_hosts; this may be a possible attack",
                          SL.ssh_key_type_to_char(SL.ssh_key_type(key)), fp);
            SL.ssh_string_free_char(fp);
        } else {
            ret =
                blk_error(EINVAL, "host key does not match the one in known_hosts; this "
                                  "may be a possible attack");
        }
        if (hash) {
            SL.ssh_clean_pubkey_hash(&hash);
        }
        SL.ssh_key_free(key);
        return ret;
    case SSH_KNOWN_HOSTS_OTHER:
        return blk_error(EINVAL,
                         "host key for this server not found, another type exists");
    case SSH_KNOWN_HOSTS_UNKNOWN:
        return blk_error(EINVAL, "no host key was found in known_hosts");
    case SSH_KNOWN_HOSTS_NOT_FOUND:
        return blk_error(ENOENT, "known_hosts file not found");
    default:
        return blk_error(EINVAL, "error while checking the host");
    }
}

/* Fact 3: the server's key hash against "TYPE:HEX" (colons allowed). */
static int check_hash(SshState *s, enum ssh_publickey_hash_type type, const char *tname,
                      const char *want)
{
    ssh_key key = NULL;
    unsigned char *hash = NULL;
    size_t hlen = 0;
    const char *w = want;
    bool same = true;
    int ret = 0;

    if (SL.ssh_get_server_publickey(s->session, &key) != SSH_OK) {
        return session_error(s, EINVAL, "failed to read remote host key");
    }
    if (SL.ssh_get_publickey_hash(key, type, &hash, &hlen) != 0) {
        SL.ssh_key_free(key);
        return session_error(s, EINVAL, "failed reading the hash of the server SSH key");
    }
    for (size_t i = 0; i < hlen && same; i++) {
        while (*w == ':') {
            w++;
        }
        int hi = g_ascii_xdigit_value(w[0]),
            lo = hi < 0 ? -1 : g_ascii_xdigit_value(w[1]);
        same = lo >= 0 && (unsigned)(hi * 16 + lo) == hash[i];
        w += same ? 2 : 0;
    }
    if (!same || *w) {
        g_autoptr(GString) hex = g_string_new(NULL);
        for (size_t i = 0; i < hlen; i++) {
            g_string_append_printf(hex, "%02x", hash[i]);
        }
        ret = blk_error(EPERM,
                        "remote host %s key fingerprint '%s:%s' does not match "
                        "host_key_check '%s:%s'",
                        SL.ssh_key_type_to_char(SL.ssh_key_type(key)), tname, hex->str,
                        tname, want);
    }
    SL.ssh_clean_pubkey_hash(&hash);
    SL.ssh_key_free(key);
    return ret;
}

static int check_host_key(SshState *s, const char *c)
{
    if (!c || strcmp(c, "yes") == 0) {
        return check_known_hosts(s);
    }
    if (strcmp(c, "no") == 0) {
        return 0;
    }
    if (g_str_has_prefix(c, "md5:")) {
        return check_hash(s, SSH_PUBLICKEY_HASH_MD5, "md5", c + 4);
    }
    if (g_str_has_prefix(c, "sha1:")) {
        return check_hash(s, SSH_PUBLICKEY_HASH_SHA1, "sha1", c + 5);
    }
    return check_hash(s, SSH_PUBLICKEY_HASH_SHA256, "sha256", c + 7); /* ssh.h inv. 2 */
}

/* Fact 4. */
static int authenticate(SshState *s)
{
    int r = SL.ssh_userauth_none(s->session, NULL);

    if (r == SSH_AUTH_ERROR) {
        return session_error(s, EPERM,
                             "failed to authenticate using none authentication");
    }
    if (r == SSH_AUTH_SUCCESS) {
        return 0;
    }
    if (SL.ssh_userauth_list(s->session, NULL) & SSH_AUTH_METHOD_PUBLICKEY) {
        r = SL.ssh_userauth_publickey_auto(s->session, NULL, NULL);
        if (r == SSH_AUTH_ERROR) {
            return session_error(s, EINVAL,
                                 "failed to authenticate using publickey authentication");
        }
        if (r == SSH_AUTH_SUCCESS) {
            return 0;
        }
    }
    return blk_error(EPERM, "failed to authenticate using publickey authentication and "
                            "the identities held by your ssh-agent");
}

static void ssh_state_free(SshState *s)
{
    if (s->file) {
        SL.sftp_close(s->file);
    }
    if (s->sftp) {
        SL.sftp_free(s->sftp);
    }
    if (s->session) {
        SL.ssh_disconnect(s->session);
        SL.ssh_free(s->session); /* closes the socket it was given */
    }
    g_free(s->host);
    g_mutex_clear(&s->lock);
    g_free(s);
}

static int set_opt(SshState *s, enum ssh_options_e o, const void *v, const char *what)
{
    if (SL.ssh_options_set(s->session, o, v) < 0) {
        g_autofree char *msg =
            g_strdup_printf("failed to set the %s in the libssh session", what);
        return session_error(s, EINVAL, msg);
    }
    return 0;
}

/* Facts 2 to 5: session, file and its size; messages without the name. */
static int ssh_connect_file(SshState *s, const BlkSshLocation *loc, const char *check,
                            int flags, mode_t mode)
{
    const char *user = loc->user ? loc->user : g_get_user_name();
    long timeout = BLK_SSH_TIMEOUT;
    unsigned port = (unsigned)g_ascii_strtoull(loc->port, NULL, 10);
    sftp_attributes st;
    int fd, ret;

    s->host = g_strdup(loc->host);
    /* fact 2 (inet.h invariant 1); invariant 3 */
    fd = blk_inet_connect(loc->host, loc->port,
                          g_get_monotonic_time() + BLK_SSH_TIMEOUT * G_USEC_PER_SEC);
    if (fd < 0) {
        return fd;
    }
    s->session = SL.ssh_new();
    if (!s->session) {
        close(fd);
        return blk_error(ENOMEM, "failed to initialize libssh session");
    }
    if ((ret = set_opt(s, SSH_OPTIONS_USER, user, "user")) < 0 ||
        (ret = set_opt(s, SSH_OPTIONS_HOST, loc->host, "host")) < 0 ||
        (port && (ret = set_opt(s, SSH_OPTIONS_PORT, &port, "port")) < 0) ||
        (ret = set_opt(s, SSH_OPTIONS_COMPRESSION, "none", "compression")) < 0 ||
        (ret = set_opt(s, SSH_OPTIONS_TIMEOUT, &timeout, "timeout")) < 0) {
        close(fd);
        return ret;
    }
    if (SL.ssh_options_parse_config(s->session, NULL) < 0) {
        close(fd);
        return session_error(s, EINVAL, "failed to parse ~/.ssh/config");
    }
    if ((ret = set_opt(s, SSH_OPTIONS_FD, &fd, "socket")) < 0) {
        close(fd);
        return ret;
    }
    if (SL.ssh_connect(s->session) != SSH_OK) {
        return session_error(s, EINVAL, "failed to establish SSH session");
    }
    if ((ret = check_host_key(s, check)) < 0 || (ret = authenticate(s)) < 0) {
        return ret;
    }
    s->sftp = SL.sftp_new(s->session);
    if (!s->sftp) {
        return session_error(s, EINVAL, "failed to create sftp handle");
    }
    if (SL.sftp_init(s->sftp) < 0) {
        return sftp_error(s, EINVAL, "failed to initialize sftp handle");
    }
    s->file = SL.sftp_open(s->sftp, loc->path, flags, mode);
    if (!s->file) {
        g_autofree char *msg =
            g_strdup_printf("failed to open remote file '%s'", loc->path);
        return sftp_error(
            s, SL.sftp_get_error(s->sftp) == SSH_FX_NO_SUCH_FILE ? ENOENT : EINVAL, msg);
    }
    st = SL.sftp_fstat(s->file);
    if (!st) {
        return sftp_error(s, EINVAL, "failed to read file attributes");
    }
    s->size = st->size; /* invariant 4 */
    s->regular = st->type == SSH_FILEXFER_TYPE_REGULAR;
    SL.sftp_attributes_free(st);
    return 0;
}

/* The location of filename, its port and check given by the caller's options
 * when not NULL (BlkOpenOptions.ssh_port, .ssh_host_key_check), connected
 * and its file opened; NULL with the message recorded. */
static SshState *ssh_state_open(const char *filename, const char *check, const char *port,
                                int flags, mode_t mode, BlkSshLocation *loc)
{
    SshState *s;
    int ret = blk_ssh_lib_load(); /* dl.h invariant 3: first */

    if (ret == 0) {
        ret = blk_ssh_parse_name(filename, loc);
    }
    if (ret < 0) {
        return NULL;
    }
    if (port) {
        g_free(loc->port);
        loc->port = g_strdup(port);
    }
    s = g_new0(SshState, 1);
    g_mutex_init(&s->lock);
    ret = ssh_connect_file(s, loc, loc->check_in_name ? loc->host_key_check : check,
                           flags, mode);
    if (ret < 0) {
        ssh_state_free(s);
        return NULL;
    }
    return s;
}

/* Invariant 2: fills [offset, offset + len) of q at qoff; 0 or -EIO. */
static int ssh_read_locked(SshState *s, uint64_t offset, const BlkIOV *q, size_t qoff,
                           size_t len)
{
    g_autofree uint8_t *buf = g_malloc(SSH_READ_CHUNK);
    uint32_t ids[SSH_READ_DEPTH];
    size_t done = 0;

    while (done < len) {
        size_t n = 0, got_here = 0;
        bool short_read = false, eof = false;
        int ret = 0;

        SL.sftp_seek64(s->file, offset + done);
        for (; n < SSH_READ_DEPTH && done + n * SSH_READ_CHUNK < len; n++) {
            uint32_t want =
                (uint32_t)MIN(len - done - n * SSH_READ_CHUNK, SSH_READ_CHUNK);
            int id = SL.sftp_async_read_begin(s->file, want);
            if (id < 0) {
                ret = sftp_error(s, EIO, "read");
                break;
            }
            ids[n] = (uint32_t)id;
        }
        for (size_t i = 0; i < n; i++) {
            uint32_t want =
                (uint32_t)MIN(len - done - i * SSH_READ_CHUNK, SSH_READ_CHUNK);
            int r = SL.sftp_async_read(s->file, buf, want, ids[i]);
            if (ret < 0 || short_read || eof) {
                continue; /* drain what is in flight */
            }
            if (r < 0) {
                ret = sftp_error(s, EIO, "read");
            } else if (r == 0) {
                eof = true; /* fact 6 */
            } else {
                iov_from_buf(q, qoff + done + got_here, buf, (size_t)r);
                got_here += (size_t)r;
                short_read = (uint32_t)r < want;
            }
        }
        if (ret < 0) {
            return ret;
        }
        done += got_here;
        if (eof) {
            iov_memset(q, qoff + done, 0, len - done);
            return 0;
        }
    }
    return 0;
}

static int ssh_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    SshState *s = img->opaque;
    int ret;

    (void)flags;
    g_mutex_lock(&s->lock);
    ret = ssh_read_locked(s, offset, qiov, 0, qiov->size);
    g_mutex_unlock(&s->lock);
    return ret;
}

/* Invariant 2 (writes one at a time), invariant 4. */
static int ssh_write_locked(SshState *s, uint64_t offset, const BlkIOV *q)
{
    g_autofree uint8_t *buf = g_malloc(MIN(q->size, SSH_WRITE_CHUNK) + 1);
    uint64_t end;

    if (__builtin_add_overflow(offset, (uint64_t)q->size, &end)) {
        return blk_error(EINVAL, "write beyond the largest offset");
    }
    SL.sftp_seek64(s->file, offset);
    s->dirty = true; /* invariant 5 */
    for (size_t done = 0; done < q->size;) {
        size_t n = iov_to_buf(q, done, buf, MIN(q->size - done, SSH_WRITE_CHUNK));
        ssize_t r = SL.sftp_write(s->file, buf, n);
        if (r <= 0) {
            return sftp_error(s, EIO, "write");
        }
        done += (size_t)r;
        if (offset + done > s->size) {
            s->size = offset + done;
        }
        if ((size_t)r < n) {
            SL.sftp_seek64(s->file, offset + done);
        }
    }
    return 0;
}

/* Fact 6. */
static int ssh_flush_locked(SshState *s)
{
    int ret = 0;

    if (!s->dirty) {
        /* invariant 5: nothing to make durable */
    } else if (!SL.sftp_extension_supported(s->sftp, "fsync@openssh.com", "1")) {
        if (!s->warned_fsync) {
            fprintf(stderr, "qimg: warning: ssh server %s does not support fsync\n",
                    s->host);
            s->warned_fsync = true;
        }
    } else if (SL.sftp_fsync(s->file) < 0) {
        ret = sftp_error(s, EIO, "fsync");
    } else {
        s->dirty = false;
    }
    return ret;
}

static int ssh_flush(BlkNode *img)
{
    SshState *s = img->opaque;
    int ret;

    g_mutex_lock(&s->lock);
    ret = ssh_flush_locked(s);
    g_mutex_unlock(&s->lock);
    return ret;
}

static int ssh_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    SshState *s = img->opaque;
    int ret;

    g_mutex_lock(&s->lock);
    ret = ssh_write_locked(s, offset, qiov);
    if (ret == 0 && (flags & BLK_REQ_FUA)) {
        ret = ssh_flush_locked(s); /* fact 6: as a flush, the extension checked */
    }
    if (ret == 0) {
        img->size = MAX(img->size, s->size);
    }
    g_mutex_unlock(&s->lock);
    return ret;
}

/* Fact 6: grow to size by writing its last byte. */
static int ssh_grow_locked(SshState *s, uint64_t size)
{
    uint8_t zero = 0;
    BlkIOV q;

    iov_init_buf(&q, &zero, 1);
    return ssh_write_locked(s, size - 1, &q) < 0
               ? blk_error_prefix(-EIO, "Failed to grow file")
               : 0;
}

static int ssh_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                        bool shrink)
{
    SshState *s = img->opaque;
    int ret = 0;

    (void)exact;
    (void)shrink;
    if (prealloc != BLK_PREALLOC_OFF) {
        return blk_error(ENOTSUP, "Unsupported preallocation mode '%s'",
                         blk_prealloc_name(prealloc));
    }
    g_mutex_lock(&s->lock);
    if (size < s->size) {
        ret = blk_error(ENOTSUP, "ssh driver does not support shrinking files");
    } else if (size > s->size) {
        ret = ssh_grow_locked(s, size);
    }
    if (ret == 0) {
        img->size = s->size;
    }
    g_mutex_unlock(&s->lock);
    return ret;
}

static int64_t ssh_get_allocated_size(BlkNode *img)
{
    (void)img;
    return -ENOTSUP; /* fact 1: "disk size: unavailable" */
}

static bool ssh_has_zero_init(BlkNode *img)
{
    return ((SshState *)img->opaque)->regular;
}

static void ssh_close(BlkNode *img)
{
    ssh_state_free(img->opaque);
    img->opaque = NULL;
}

const BlkDriver blk_ssh_driver = {
    .format_name = "ssh",
    .is_protocol = true,
    .close = ssh_close,
    .preadv = ssh_preadv,
    .pwritev = ssh_pwritev,
    .flush = ssh_flush,
    .truncate = ssh_truncate,
    .get_allocated_size = ssh_get_allocated_size,
    .has_zero_init = ssh_has_zero_init,
};

BlkNode *blk_open_ssh(const char *filename, const BlkOpenOptions *opts)
{
    BlkSshLocation loc = {0};
    SshState *s = ssh_state_open(filename, opts->ssh_host_key_check, opts->ssh_port,
                                 opts->read_only ? O_RDONLY : O_RDWR, 0, &loc);
    BlkNode *img;

    if (!s) {
        blk_error_prefix(-blk_error_code(), "Could not open '%s'", filename);
        blk_ssh_location_clear(&loc);
        return NULL;
    }
    if (!loc.user) {
        loc.user = g_strdup(g_get_user_name()); /* fact 1 */
    }
    img = g_new0(BlkNode, 1);
    img->drv = &blk_ssh_driver;
    img->opaque = s;
    img->read_only = opts->read_only;
    img->cache = opts->cache;
    img->size = s->size;
    img->request_alignment = 1;
    img->filename = g_strdup_printf("ssh://%s@%s:%s%s%s%s", loc.user, loc.host, loc.port,
                                    loc.path, loc.check_in_name ? "?host_key_check=" : "",
                                    loc.check_in_name ? loc.host_key_check : "");
    blk_ssh_location_clear(&loc);
    return img;
}

int blk_ssh_create(const char *filename, uint64_t size, BlkPrealloc prealloc,
                   uint64_t object_size)
{
    BlkSshLocation loc = {0};
    SshState *s;
    uint64_t rounded;
    int ret = 0;

    if (prealloc != BLK_PREALLOC_OFF || object_size) {
        return blk_error(EINVAL, "Invalid parameter '%s'",
                         object_size ? "cluster_size" : "preallocation");
    }
    if (__builtin_add_overflow(size, 511, &rounded)) {
        return blk_error(EFBIG, "Image size too large");
    }
    rounded &= ~(uint64_t)511;
    s = ssh_state_open(filename, NULL, NULL, O_RDWR | O_CREAT | O_TRUNC, 0644, &loc);
    blk_ssh_location_clear(&loc);
    if (!s) {
        return blk_error_code() ? -blk_error_code() : -EIO;
    }
    if (rounded > 0) {
        ret = ssh_grow_locked(s, rounded);
    }
    ssh_state_free(s);
    return ret;
}
