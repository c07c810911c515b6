/*
 * api/secret.c: qimg_secret_new, secrets as the caller hands them over.
 *
 * Owns: the GBytes a caller (the qimg command's --object secret) keeps a
 * secret's bytes in, backed by crypto/secmem.c's memory.
 *
 * Invariants (cited as "api/secret.c invariant N"):
 *  1. The bytes live in one secure buffer (locked where allowed, out of
 *     core dumps) that is wiped and unmapped when the GBytes' last
 *     reference goes (secmem.c invariants 1, 2).
 */
#include "api/api.h"

#include "crypto/secmem.h"

#include <string.h>

GBytes *qimg_secret_new(const void *data, gsize len)
{
    void *p = crypto_secure_alloc(len ? len : 1);

    if (len) {
        memcpy(p, data, len);
    }
    return g_bytes_new_with_free_func(p, len, crypto_secure_free, p); /* invariant 1 */
}
