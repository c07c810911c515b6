/*
 * crypto/gnutls-lib.c: GnuTLS loaded at the first use (gnutls-lib.h
 * invariants 1 and 2; the loading itself keeps dl.h invariant 3, and
 * gnutls-lib.h invariant 3 that nothing calls an unfilled table).
 *
 * Owns: crypto_gnutls.
 */
#include "crypto/gnutls-lib.h"
#include "block/block.h"
#include "block/dl.h"

#include <errno.h>

CryptoGnutls crypto_gnutls;

#define GNUTLS_SYM(f) BLK_DL_SYM(CryptoGnutls, f)
static const BlkDlSym syms[] = {CRYPTO_GNUTLS_FUNCS(GNUTLS_SYM)};

static BlkDlLib lib = {
    .sonames = {CRYPTO_GNUTLS_SONAME},
    .needed_by = "Encryption needs",
    .packages = "libgnutls30",
    .syms = syms,
    .nsyms = G_N_ELEMENTS(syms),
    .table = &crypto_gnutls,
    .table_size = sizeof(crypto_gnutls),
};

int crypto_gnutls_load(void)
{
    const char *err = blk_dl_load(&lib);
    return err ? blk_error(ENOTSUP, "%s", err) : 0;
}
