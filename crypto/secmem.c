/*
 * crypto/secmem.c: memory for keys and passphrases.
 *
 * Owns: the buffers that hold secrets -- master keys, key-slot keys,
 * passphrases, split key material being merged or written -- and how they
 * are wiped and compared.
 *
 * Invariants (cited as "secmem.c invariant N"):
 *  1. A secure buffer is its own anonymous mapping (whole pages, so
 *     nothing else shares them), locked in RAM with mlock() where the
 *     process may (RLIMIT_MEMLOCK is often small: a failure leaves it
 *     swappable, never an error) and marked MADV_DONTDUMP, so a core dump
 *     does not carry it.
 *  2. Every secure buffer is wiped with explicit_bzero (which the compiler
 *     may not drop) before its pages are unlocked and unmapped; stack copies
 *     of secrets are wiped with crypto_wipe() before their function returns.
 *     What the crypto library keeps in its own contexts (expanded keys in
 *     GnuTLS cipher handles) is wiped by the library when the handle is
 *     freed.
 *  3. Digests are compared in a time that does not depend on where the
 *     bytes differ: every byte pair is visited and their differences are
 *     OR-ed into a volatile accumulator the compiler cannot test early (as
 *     gnutls_memcmp and CRYPTO_memcmp do; here so that comparing needs no
 *     library loaded: gnutls-lib.h invariant 1).
 */
#include "crypto/secmem.h"

#include <glib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Before the caller's bytes: the mapping's length (keeps 16-byte
 * alignment for the caller). */
#define SECMEM_HEAD 16

void *crypto_secure_alloc(size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), total;
    uint8_t *base;

    g_assert(len > 0 && len <= SIZE_MAX - SECMEM_HEAD - page);
    total = (len + SECMEM_HEAD + page - 1) / page * page;
    base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        g_error("crypto: cannot map %zu bytes for a secret", total);
    }
    (void)mlock(base, total); /* invariant 1: best effort */
#ifdef MADV_DONTDUMP
    (void)madvise(base, total, MADV_DONTDUMP);
#endif
    memcpy(base, &total, sizeof(total));
    return base + SECMEM_HEAD;
}

void crypto_secure_free(void *p)
{
    uint8_t *base;
    size_t total;

    if (!p) {
        return;
    }
    base = (uint8_t *)p - SECMEM_HEAD;
    memcpy(&total, base, sizeof(total));
    explicit_bzero(base, total); /* invariant 2 */
    (void)munlock(base, total);
    munmap(base, total);
}

void *crypto_secure_dup(const void *src, size_t len)
{
    void *p = crypto_secure_alloc(len);

    memcpy(p, src, len);
    return p;
}

void crypto_wipe(void *p, size_t len)
{
    explicit_bzero(p, len);
}

bool crypto_equal(const void *a, const void *b, size_t len)
{
    const volatile uint8_t *x = a, *y = b;
    volatile uint8_t diff = 0;

    for (size_t i = 0; i < len; i++) { /* invariant 3 */
        diff |= x[i] ^ y[i];
    }
    return diff == 0;
}
