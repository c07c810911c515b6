/*
 * block/rbd-lib.c: librados and librbd loaded at the first use (rbd-lib.h
 * invariants 1 and 2; the loading itself keeps dl.h invariant 3: rbd.c
 * loads before any other step of an open or a create).
 *
 * Owns: blk_rbd_lib.
 */
#include "block/rbd-lib.h"
#include "block/block.h"
#include "block/dl.h"

#include <errno.h>

BlkRbdLib blk_rbd_lib;

#define RBD_SYM(f) BLK_DL_SYM(BlkRbdLib, f)
static const BlkDlSym syms[] = {BLK_RBD_FUNCS(RBD_SYM)};

static BlkDlLib lib = {
    .sonames = {BLK_RADOS_SONAME, BLK_RBD_SONAME},
    .needed_by = "Ceph RBD needs",
    .packages = "librados2, librbd1",
    .syms = syms,
    .nsyms = G_N_ELEMENTS(syms),
    .table = &blk_rbd_lib,
    .table_size = sizeof(blk_rbd_lib),
};

int blk_rbd_lib_load(void)
{
    const char *err = blk_dl_load(&lib);
    return err ? blk_error(ENOTSUP, "%s", err) : 0;
}
