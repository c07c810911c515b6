/*
 * crypto/gnutls-lib.c: loading GnuTLS at the first use (gnutls-lib.h
 * invariants 1 and 2).
 *
 * Owns: the dlopen() handle (never closed) and crypto_gnutls.
 *
 * Invariants (cited as "gnutls-lib.c invariant N"):
 *  1. One attempt per process (pthread_once): its result, success or the
 *     failure's message, is what every later call reports.
 *  2. The table is filled only when every function was found; on a
 *     failure crypto_gnutls stays all NULL and nothing calls it
 *     (gnutls-lib.h invariant 3).
 */
#include "crypto/gnutls-lib.h"
#include "block/block.h"
#include "block/dl.h"

#include <dlfcn.h>
#include <errno.h>
#include <glib.h>
#include <pthread.h>

CryptoGnutls crypto_gnutls;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char *load_error; /* invariant 1: NULL after a success */

static void load(void)
{
    CryptoGnutls lib = {0};
    void *h = dlopen(CRYPTO_GNUTLS_SONAME, RTLD_NOW | RTLD_LOCAL);

    if (!h) {
        load_error = g_strdup_printf("Encryption needs %s (Debian: libgnutls30): %s",
                                     CRYPTO_GNUTLS_SONAME, dlerror());
        return;
    }
#define CRYPTO_GNUTLS_LOAD(f)                                                            \
    if (!blk_dl_sym(h, CRYPTO_GNUTLS_SONAME, #f, &lib.f, sizeof(lib.f), &load_error)) {  \
        return;                                                                          \
    }
    CRYPTO_GNUTLS_FUNCS(CRYPTO_GNUTLS_LOAD)
#undef CRYPTO_GNUTLS_LOAD
    crypto_gnutls = lib; /* invariant 2 */
}

int crypto_gnutls_load(void)
{
    pthread_once(&load_once, load);
    if (load_error) {
        return blk_error(ENOTSUP, "%s", load_error);
    }
    return 0;
}
