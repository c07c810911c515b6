/*
 * crypto/secmem.h: memory for keys and passphrases (secmem.c says what it
 * owns and its invariants).
 */
#ifndef QIMG_CRYPTO_SECMEM_H
#define QIMG_CRYPTO_SECMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A zeroed buffer of len (> 0) bytes for secrets: locked in RAM where the
 * system allows, left out of core dumps, wiped when freed (invariants
 * 1, 2).  Never NULL (g_error on exhaustion, as g_malloc). */
void *crypto_secure_alloc(size_t len);
/* Wipe and release p (NULL is fine). */
void crypto_secure_free(void *p);
/* A copy of len bytes of src in secure memory. */
void *crypto_secure_dup(const void *src, size_t len);
/* Zero len bytes at p in a way the compiler keeps (stack copies). */
void crypto_wipe(void *p, size_t len);
/* len bytes equal, in time independent of the contents (invariant 3). */
bool crypto_equal(const void *a, const void *b, size_t len);

#endif
