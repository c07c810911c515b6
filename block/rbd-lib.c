/*
 * block/rbd-lib.c: loading librados and librbd at the first use
 * (rbd-lib.h invariants 1 and 2).
 *
 * Owns: the dlopen() handles (never closed: librados' threads may outlive
 * any image) and blk_rbd_lib.
 *
 * Invariants (cited as "rbd-lib.c invariant N"):
 *  1. One attempt per process (pthread_once): its result, success or the
 *     failure's message, is what every later call reports.
 *  2. The table is filled only when every function was found; on a
 *     failure blk_rbd_lib stays all NULL and nothing calls it (rbd.c
 *     loads before any other step of an open or a create).
 */
#include "block/rbd-lib.h"
#include "block/block.h"
#include "block/dl.h"

#include <dlfcn.h>
#include <errno.h>
#include <glib.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

BlkRbdLib blk_rbd_lib;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char *load_error; /* invariant 1: NULL after a success */

static void load(void)
{
    BlkRbdLib lib = {0};
    void *rados = dlopen(BLK_RADOS_SONAME, RTLD_NOW | RTLD_LOCAL);
    void *rbd = rados ? dlopen(BLK_RBD_SONAME, RTLD_NOW | RTLD_LOCAL) : NULL;

    if (!rados || !rbd) {
        load_error =
            g_strdup_printf("Ceph RBD needs %s (Debian: librbd1, librados2): %s",
                            rados ? BLK_RBD_SONAME : BLK_RADOS_SONAME, dlerror());
        return;
    }
#define BLK_RBD_LIB_LOAD(f)                                                              \
    if (!blk_dl_sym(g_str_has_prefix(#f, "rados_") ? rados : rbd,                        \
                    g_str_has_prefix(#f, "rados_") ? BLK_RADOS_SONAME : BLK_RBD_SONAME,  \
                    #f, &lib.f, sizeof(lib.f), &load_error)) {                           \
        return;                                                                          \
    }
    BLK_RBD_FUNCS(BLK_RBD_LIB_LOAD)
#undef BLK_RBD_LIB_LOAD
    blk_rbd_lib = lib; /* invariant 2 */
}

int blk_rbd_lib_load(void)
{
    pthread_once(&load_once, load);
    if (load_error) {
        return blk_error(ENOTSUP, "%s", load_error);
    }
    return 0;
}
