/*
 * block/ssh-lib.h: libssh, loaded when the first ssh:// image is opened or
 * created (block/ssh-lib.c).
 *
 * Owns: the table of the libssh functions block/ssh.c calls.
 *
 * Invariants (cited as "ssh-lib.h invariant N"):
 *  1. libqimg is not linked against libssh: every call goes through
 *     blk_ssh_lib, which blk_ssh_lib_load() fills, all of it or nothing,
 *     once per process (dl.h invariant 1: libssh brings OpenSSL's libcrypto
 *     and zlib's users to every process start otherwise), as QEMU loads
 *     its ssh block module only when an ssh node is opened.
 *  2. Each entry has the type of the function in libssh.h and sftp.h (dl.h
 *     invariant 2).
 */
#ifndef QIMG_BLOCK_SSH_LIB_H
#define QIMG_BLOCK_SSH_LIB_H

#include <libssh/libssh.h>
#include <libssh/sftp.h>

/* The soname of the library the headers belong to (libssh's stable ABI). */
#define BLK_SSH_SONAME "libssh.so.4"

#define BLK_SSH_FUNCS(X)                                                                 \
    X(ssh_new)                                                                           \
    X(ssh_free)                                                                          \
    X(ssh_options_set)                                                                   \
    X(ssh_options_parse_config)                                                          \
    X(ssh_connect)                                                                       \
    X(ssh_disconnect)                                                                    \
    X(ssh_get_error)                                                                     \
    X(ssh_get_error_code)                                                                \
    X(ssh_session_is_known_server)                                                       \
    X(ssh_get_server_publickey)                                                          \
    X(ssh_get_publickey_hash)                                                            \
    X(ssh_get_fingerprint_hash)                                                          \
    X(ssh_clean_pubkey_hash)                                                             \
    X(ssh_key_type)                                                                      \
    X(ssh_key_type_to_char)                                                              \
    X(ssh_key_free)                                                                      \
    X(ssh_string_free_char)                                                              \
    X(ssh_userauth_none)                                                                 \
    X(ssh_userauth_list)                                                                 \
    X(ssh_userauth_publickey_auto)                                                       \
    X(sftp_new)                                                                          \
    X(sftp_free)                                                                         \
    X(sftp_init)                                                                         \
    X(sftp_get_error)                                                                    \
    X(sftp_open)                                                                         \
    X(sftp_close)                                                                        \
    X(sftp_fstat)                                                                        \
    X(sftp_attributes_free)                                                              \
    X(sftp_seek64)                                                                       \
    X(sftp_read)                                                                         \
    X(sftp_write)                                                                        \
    X(sftp_async_read_begin)                                                             \
    X(sftp_async_read)                                                                   \
    X(sftp_extension_supported)                                                          \
    X(sftp_fsync)

typedef struct BlkSshLib {
#define BLK_SSH_LIB_FIELD(f) __typeof__(f) *f;
    BLK_SSH_FUNCS(BLK_SSH_LIB_FIELD)
#undef BLK_SSH_LIB_FIELD
} BlkSshLib;

/* Filled by blk_ssh_lib_load (invariant 1); read-only after. */
extern BlkSshLib blk_ssh_lib;

/* Loads libssh once (thread-safe); 0, or -ENOTSUP with a message naming
 * the library or the function that could not be loaded. */
int blk_ssh_lib_load(void);

#endif
