/*
 * block/rbd-lib.h: librados and librbd, loaded when the first RBD image is
 * opened or created (block/rbd-lib.c).
 *
 * Owns: the table of the library functions block/rbd.c calls.
 *
 * Invariants (cited as "rbd-lib.h invariant N"):
 *  1. qimg is not linked against the Ceph libraries: every call goes
 *     through blk_rbd_lib, which blk_rbd_lib_load() fills, all of it or
 *     nothing, once per process.  Loading them (C++ static constructors,
 *     some 20 libraries) doubles the start-up time of every qimg command,
 *     so only a command that opens an "rbd:" name pays it -- as QEMU loads
 *     its rbd block module only then.
 *  2. Each entry has the type of the function in the headers qimg was
 *     built with (__typeof__): a changed prototype is a build error.
 */
#ifndef QIMG_BLOCK_RBD_LIB_H
#define QIMG_BLOCK_RBD_LIB_H

#include <rados/librados.h>
#include <rbd/librbd.h>

/* Sonames of the libraries the headers belong to (Ceph's stable ABIs). */
#define BLK_RADOS_SONAME "librados.so.2"
#define BLK_RBD_SONAME "librbd.so.1"

#define BLK_RBD_FUNCS(X)                                                                 \
    X(rados_create)                                                                      \
    X(rados_conf_read_file)                                                              \
    X(rados_conf_get)                                                                    \
    X(rados_conf_set)                                                                    \
    X(rados_connect)                                                                     \
    X(rados_shutdown)                                                                    \
    X(rados_ioctx_create)                                                                \
    X(rados_ioctx_destroy)                                                               \
    X(rados_ioctx_set_namespace)                                                         \
    X(rbd_aio_close)                                                                     \
    X(rbd_aio_create_completion)                                                         \
    X(rbd_aio_discard)                                                                   \
    X(rbd_aio_flush)                                                                     \
    X(rbd_aio_get_return_value)                                                          \
    X(rbd_aio_readv)                                                                     \
    X(rbd_aio_release)                                                                   \
    X(rbd_aio_write_zeroes)                                                              \
    X(rbd_aio_writev)                                                                    \
    X(rbd_close)                                                                         \
    X(rbd_create)                                                                        \
    X(rbd_diff_iterate2)                                                                 \
    X(rbd_get_features)                                                                  \
    X(rbd_get_flags)                                                                     \
    X(rbd_get_parent)                                                                    \
    X(rbd_get_size)                                                                      \
    X(rbd_linked_image_spec_cleanup)                                                     \
    X(rbd_namespace_exists)                                                              \
    X(rbd_open)                                                                          \
    X(rbd_open_read_only)                                                                \
    X(rbd_resize)                                                                        \
    X(rbd_snap_create)                                                                   \
    X(rbd_snap_list)                                                                     \
    X(rbd_snap_list_end)                                                                 \
    X(rbd_snap_remove)                                                                   \
    X(rbd_snap_rollback)                                                                 \
    X(rbd_snap_spec_cleanup)                                                             \
    X(rbd_stat)

typedef struct BlkRbdLib {
#define BLK_RBD_LIB_FIELD(f) __typeof__(f) *f;
    BLK_RBD_FUNCS(BLK_RBD_LIB_FIELD)
#undef BLK_RBD_LIB_FIELD
} BlkRbdLib;

/* Filled by blk_rbd_lib_load (invariant 1); read-only after. */
extern BlkRbdLib blk_rbd_lib;

/* Loads the libraries once (thread-safe); 0, or -ENOTSUP with a message
 * naming the library or function that could not be loaded. */
int blk_rbd_lib_load(void);

#endif
