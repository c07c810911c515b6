/*
 * block/nbd-lib.c: loading libnbd at the first use (nbd-lib.h invariants
 * 1 and 2).
 *
 * Owns: the dlopen() handle (never closed) and blk_nbd_lib.
 *
 * Invariants (cited as "nbd-lib.c invariant N"):
 *  1. One attempt per process (pthread_once): its result, success or the
 *     failure's message, is what every later call reports.
 *  2. The table is filled only when every function was found; on a
 *     failure blk_nbd_lib stays all NULL and nothing calls it (nbd.c loads
 *     before any other step of an open).
 */
#include "block/nbd-lib.h"
#include "block/block.h"
#include "block/dl.h"

#include <dlfcn.h>
#include <errno.h>
#include <glib.h>
#include <pthread.h>

BlkNbdLib blk_nbd_lib;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char *load_error; /* invariant 1: NULL after a success */

static void load(void)
{
    BlkNbdLib lib = {0};
    void *h = dlopen(BLK_NBD_SONAME, RTLD_NOW | RTLD_LOCAL);

    if (!h) {
        load_error = g_strdup_printf("NBD needs %s (Debian: libnbd0): %s", BLK_NBD_SONAME,
                                     dlerror());
        return;
    }
#define BLK_NBD_LIB_LOAD(f)                                                              \
    if (!blk_dl_sym(h, BLK_NBD_SONAME, #f, &lib.f, sizeof(lib.f), &load_error)) {        \
        return;                                                                          \
    }
    BLK_NBD_FUNCS(BLK_NBD_LIB_LOAD)
#undef BLK_NBD_LIB_LOAD
    blk_nbd_lib = lib; /* invariant 2 */
}

int blk_nbd_lib_load(void)
{
    pthread_once(&load_once, load);
    if (load_error) {
        return blk_error(ENOTSUP, "%s", load_error);
    }
    return 0;
}
