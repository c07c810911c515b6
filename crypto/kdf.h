/*
 * crypto/kdf.h: hashes, PBKDF2 and random bytes from GnuTLS (kdf.c says
 * what it owns and its invariants).
 */
#ifndef QIMG_CRYPTO_KDF_H
#define QIMG_CRYPTO_KDF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The hashes LUKS names (QEMU's QCryptoHashAlgorithm names). */
typedef enum CryptoHash {
    CRYPTO_HASH_MD5,
    CRYPTO_HASH_SHA1,
    CRYPTO_HASH_SHA224,
    CRYPTO_HASH_SHA256,
    CRYPTO_HASH_SHA384,
    CRYPTO_HASH_SHA512,
    CRYPTO_HASH_RIPEMD160,
    CRYPTO_HASH__MAX
} CryptoHash;

#define CRYPTO_HASH_MAX_LEN 64

/* "sha256" -> CRYPTO_HASH_SHA256; -1 for a name QEMU does not have. */
int crypto_hash_lookup(const char *name);
const char *crypto_hash_name(CryptoHash h);
size_t crypto_hash_len(CryptoHash h);
/* 0 if GnuTLS has hash h, else -ENOTSUP naming it (kdf.c invariant 1). */
int crypto_hash_supported(CryptoHash h);
/* out (crypto_hash_len bytes) = H(a || b); b may be NULL.  0 or -errno
 * with the message recorded. */
int crypto_hash2(CryptoHash h, const void *a, size_t alen, const void *b, size_t blen,
                 uint8_t *out);

/* PBKDF2-HMAC-h (RFC 8018) of pw with salt, iterations (>= 1), into
 * out[0..outlen).  0 or -errno with the message recorded. */
int crypto_pbkdf2(CryptoHash h, const void *pw, size_t pwlen, const uint8_t *salt,
                  size_t saltlen, uint32_t iterations, uint8_t *out, size_t outlen);

/* How many PBKDF2 iterations of hash h producing outlen bytes take
 * iter_time_ms milliseconds of this thread's CPU (kdf.c invariant 2), as
 * QEMU sizes key slots; 0 or -errno (-ERANGE past 2^32 - 1, QEMU's
 * messages). */
int crypto_pbkdf2_iterations(CryptoHash h, size_t outlen, uint64_t iter_time_ms,
                             uint64_t divisor, uint32_t *iterations);

/* len bytes from the system's random source (kdf.c invariant 3); key:
 * the bytes become key material.  0 or -errno with the message recorded. */
int crypto_random(void *buf, size_t len, bool key);

#endif
