/*
 * crypto/gnutls-lib.h: GnuTLS, loaded at the first hash, key derivation,
 * random bytes or cipher crypto/ needs (crypto/gnutls-lib.c).
 *
 * Owns: the table of the GnuTLS functions crypto/ calls.
 *
 * Invariants (cited as "gnutls-lib.h invariant N"):
 *  1. libqimg is not linked against GnuTLS: every call goes through
 *     crypto_gnutls, which crypto_gnutls_load() fills, all of it or
 *     nothing, once per process (dl.h invariant 1: GnuTLS brings eight
 *     libraries -- nettle, hogweed, gmp, p11-kit, idn2, unistring, tasn1 --
 *     and its constructor seeds a generator, about 5 ms of CPU at every
 *     start of a process that never encrypts).
 *  2. Each entry has the type of the function in the GnuTLS headers (dl.h
 *     invariant 2).
 *  3. Every function of kdf.c and cipher.c that calls GnuTLS loads it
 *     first and returns its error when it cannot be loaded; the only other
 *     calls are on handles (hash, cipher) made after a load.
 */
#ifndef QIMG_CRYPTO_GNUTLS_LIB_H
#define QIMG_CRYPTO_GNUTLS_LIB_H

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

/* The soname of the library the headers belong to (GnuTLS's ABI since
 * 3.4). */
#define CRYPTO_GNUTLS_SONAME "libgnutls.so.30"

#define CRYPTO_GNUTLS_FUNCS(X)                                                           \
    X(gnutls_cipher_decrypt)                                                             \
    X(gnutls_cipher_deinit)                                                              \
    X(gnutls_cipher_encrypt)                                                             \
    X(gnutls_cipher_get_name)                                                            \
    X(gnutls_cipher_init)                                                                \
    X(gnutls_cipher_set_iv)                                                              \
    X(gnutls_hash)                                                                       \
    X(gnutls_hash_deinit)                                                                \
    X(gnutls_hash_init)                                                                  \
    X(gnutls_pbkdf2)                                                                     \
    X(gnutls_rnd)                                                                        \
    X(gnutls_strerror)

typedef struct CryptoGnutls {
#define CRYPTO_GNUTLS_FIELD(f) __typeof__(f) *f;
    CRYPTO_GNUTLS_FUNCS(CRYPTO_GNUTLS_FIELD)
#undef CRYPTO_GNUTLS_FIELD
} CryptoGnutls;

/* Filled by crypto_gnutls_load (invariant 1); read-only after. */
extern CryptoGnutls crypto_gnutls;

/* Loads GnuTLS once (thread-safe); 0, or -ENOTSUP with a message naming
 * the library or the function that could not be loaded. */
int crypto_gnutls_load(void);

#endif
