/*
 * block/nbd-lib.h: libnbd, loaded when the first NBD export is opened
 * (block/nbd-lib.c).
 *
 * Owns: the table of the libnbd functions block/nbd.c calls, and the
 * declarations of block/nbd-connect.c (one connection's handshake).
 *
 * Invariants (cited as "nbd-lib.h invariant N"):
 *  1. libqimg is not linked against libnbd: every call goes through
 *     blk_nbd_lib, which blk_nbd_lib_load() fills, all of it or nothing,
 *     once per process (dl.h invariant 1: libnbd brings libxml2, ICU and
 *     the C++ runtime, 16 ms of CPU at every process start).
 *  2. Each entry has the type of the function in libnbd.h (dl.h
 *     invariant 2).
 */
#ifndef QIMG_BLOCK_NBD_LIB_H
#define QIMG_BLOCK_NBD_LIB_H

#include <libnbd.h>

/* The soname of the library libnbd.h belongs to (libnbd's stable ABI). */
#define BLK_NBD_SONAME "libnbd.so.0"

#define BLK_NBD_FUNCS(X)                                                                 \
    X(nbd_add_meta_context)                                                              \
    X(nbd_aio_block_status)                                                              \
    X(nbd_aio_connect_socket)                                                            \
    X(nbd_aio_connect_unix)                                                              \
    X(nbd_aio_connect_uri)                                                               \
    X(nbd_aio_flush)                                                                     \
    X(nbd_aio_get_direction)                                                             \
    X(nbd_aio_get_fd)                                                                    \
    X(nbd_aio_is_closed)                                                                 \
    X(nbd_aio_is_dead)                                                                   \
    X(nbd_aio_is_ready)                                                                  \
    X(nbd_aio_notify_read)                                                               \
    X(nbd_aio_notify_write)                                                              \
    X(nbd_aio_pread_structured)                                                          \
    X(nbd_aio_pwrite)                                                                    \
    X(nbd_aio_trim)                                                                      \
    X(nbd_aio_zero)                                                                      \
    X(nbd_can_fast_zero)                                                                 \
    X(nbd_can_flush)                                                                     \
    X(nbd_can_fua)                                                                       \
    X(nbd_can_meta_context)                                                              \
    X(nbd_can_multi_conn)                                                                \
    X(nbd_can_trim)                                                                      \
    X(nbd_can_zero)                                                                      \
    X(nbd_clear_debug_callback)                                                          \
    X(nbd_close)                                                                         \
    X(nbd_connect_socket)                                                                \
    X(nbd_connect_unix)                                                                  \
    X(nbd_connect_uri)                                                                   \
    X(nbd_create)                                                                        \
    X(nbd_get_block_size)                                                                \
    X(nbd_get_debug)                                                                     \
    X(nbd_get_errno)                                                                     \
    X(nbd_get_error)                                                                     \
    X(nbd_get_export_name)                                                               \
    X(nbd_get_size)                                                                      \
    X(nbd_get_uri)                                                                       \
    X(nbd_is_read_only)                                                                  \
    X(nbd_poll)                                                                          \
    X(nbd_set_debug)                                                                     \
    X(nbd_set_debug_callback)                                                            \
    X(nbd_set_export_name)                                                               \
    X(nbd_shutdown)

typedef struct BlkNbdLib {
#define BLK_NBD_LIB_FIELD(f) __typeof__(f) *f;
    BLK_NBD_FUNCS(BLK_NBD_LIB_FIELD)
#undef BLK_NBD_LIB_FIELD
} BlkNbdLib;

/* Filled by blk_nbd_lib_load (invariant 1); read-only after. */
extern BlkNbdLib blk_nbd_lib;

/* Loads libnbd once (thread-safe); 0, or -ENOTSUP with a message naming
 * the library or the function that could not be loaded. */
int blk_nbd_lib_load(void);

/* block/nbd-connect.c.  One connection to @name (a libnbd URI or qemu-img's
 * nbd:unix:PATH / nbd:HOST:PORT name) asking for meta @context, with its
 * handshake done, or NULL: with *@err = -errno and the message recorded
 * (blk_error) when a legacy name did not parse or qimg's own TCP connect
 * failed (nbd.c invariant 8), else with *@err = 0 and libnbd's error set.
 * @deadline 0 waits as long as the connection takes and keeps the server's
 * error text in *@server_msg (nbd.c invariant 6); otherwise the TCP
 * connect and the handshake must end by @deadline, monotonic microseconds
 * (nbd.c invariant 1). */
struct nbd_handle *blk_nbd_connect_one(const char *name, const char *context, int *err,
                                       int64_t deadline, char **server_msg);
/* QEMU's name for the export @h is connected to (what qemu-img info and map
 * print); @given when libnbd has no URI for it. */
char *blk_nbd_canonical_name(struct nbd_handle *h, const char *given);

#endif
