/*
 * block/ssh-lib.c: libssh loaded at the first use (ssh-lib.h invariants 1
 * and 2; the loading itself keeps dl.h invariant 3: ssh.c loads before any
 * other step of an open or a create).
 *
 * Owns: blk_ssh_lib.
 */
#include "block/ssh-lib.h"
#include "block/block.h"
#include "block/dl.h"

#include <errno.h>

BlkSshLib blk_ssh_lib;

#define SSH_SYM(f) BLK_DL_SYM(BlkSshLib, f)
static const BlkDlSym syms[] = {BLK_SSH_FUNCS(SSH_SYM)};

static BlkDlLib lib = {
    .sonames = {BLK_SSH_SONAME},
    .needed_by = "SSH needs",
    .packages = "libssh-4",
    .syms = syms,
    .nsyms = G_N_ELEMENTS(syms),
    .table = &blk_ssh_lib,
    .table_size = sizeof(blk_ssh_lib),
};

int blk_ssh_lib_load(void)
{
    const char *err = blk_dl_load(&lib);
    return err ? blk_error(ENOTSUP, "%s", err) : 0;
}
