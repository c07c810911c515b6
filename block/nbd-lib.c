/*
 * block/nbd-lib.c: libnbd loaded at the first use (nbd-lib.h invariants 1
 * and 2; the loading itself keeps dl.h invariant 3).
 *
 * Owns: blk_nbd_lib.
 */
#include "block/nbd-lib.h"
#include "block/block.h"
#include "block/dl.h"

#include <errno.h>

BlkNbdLib blk_nbd_lib;

#define NBD_SYM(f) BLK_DL_SYM(BlkNbdLib, f)
static const BlkDlSym syms[] = {BLK_NBD_FUNCS(NBD_SYM)};

static BlkDlLib lib = {
    .sonames = {BLK_NBD_SONAME},
    .needed_by = "NBD needs",
    .packages = "libnbd0",
    .syms = syms,
    .nsyms = G_N_ELEMENTS(syms),
    .table = &blk_nbd_lib,
    .table_size = sizeof(blk_nbd_lib),
};

int blk_nbd_lib_load(void)
{
    const char *err = blk_dl_load(&lib);
    return err ? blk_error(ENOTSUP, "%s", err) : 0;
}
