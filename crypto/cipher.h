/*
 * crypto/cipher.h: the algorithms LUKS names and the sector cipher built on
 * GnuTLS (cipher.c says what it owns and its invariants).
 */
#ifndef QIMG_CRYPTO_CIPHER_H
#define QIMG_CRYPTO_CIPHER_H

#include "crypto/kdf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Encryption works on sectors of 512 bytes (LUKS1, and qcow's AES). */
#define CRYPTO_SECTOR_SIZE 512u

/* QEMU's QCryptoCipherAlgorithm names that LUKS can carry. */
typedef enum CryptoCipherAlg {
    CRYPTO_CIPHER_AES_128,
    CRYPTO_CIPHER_AES_192,
    CRYPTO_CIPHER_AES_256,
    CRYPTO_CIPHER_CAST5_128,
    CRYPTO_CIPHER_SERPENT_128,
    CRYPTO_CIPHER_SERPENT_192,
    CRYPTO_CIPHER_SERPENT_256,
    CRYPTO_CIPHER_TWOFISH_128,
    CRYPTO_CIPHER_TWOFISH_192,
    CRYPTO_CIPHER_TWOFISH_256,
    CRYPTO_CIPHER__MAX
} CryptoCipherAlg;

typedef enum CryptoMode {
    CRYPTO_MODE_ECB,
    CRYPTO_MODE_CBC,
    CRYPTO_MODE_XTS,
    CRYPTO_MODE_CTR,
    CRYPTO_MODE__MAX
} CryptoMode;

typedef enum CryptoIvgen {
    CRYPTO_IVGEN_PLAIN,
    CRYPTO_IVGEN_PLAIN64,
    CRYPTO_IVGEN_ESSIV,
    CRYPTO_IVGEN__MAX
} CryptoIvgen;

/* "aes-256", and the LUKS header's family name "aes". */
const char *crypto_cipher_alg_name(CryptoCipherAlg a);
const char *crypto_cipher_family(CryptoCipherAlg a);
size_t crypto_cipher_alg_key_len(CryptoCipherAlg a);
/* By QEMU name ("aes-256"); -1 if none. */
int crypto_cipher_alg_lookup(const char *name);
/* By LUKS family and key length in bytes; -1 if none. */
int crypto_cipher_alg_find(const char *family, size_t key_len);
const char *crypto_mode_name(CryptoMode m);
int crypto_mode_lookup(const char *name);
const char *crypto_ivgen_name(CryptoIvgen i);
int crypto_ivgen_lookup(const char *name);
/* The cipher ESSIV keys with the hash of the key (dm-crypt's rule, as
 * QEMU applies it): alg itself when the digest is as long as its key,
 * else the family's cipher of the digest's length; -ENOTSUP with QEMU's
 * message if there is none. */
int crypto_essiv_cipher(CryptoCipherAlg alg, CryptoHash hash, CryptoCipherAlg *out);

/* What encrypts the sectors: algorithm, mode, IV generator (and ESSIV's
 * hash). */
typedef struct CryptoSpec {
    CryptoCipherAlg alg;
    CryptoMode mode;
    CryptoIvgen ivgen;
    CryptoHash ivgen_hash; /* ESSIV only */
} CryptoSpec;

/* Key bytes of a spec (two keys for XTS). */
size_t crypto_spec_key_len(const CryptoSpec *spec);
/* 0 if qimg's library can run spec, else -ENOTSUP naming what it lacks
 * (cipher.c invariant 1). */
int crypto_spec_supported(const CryptoSpec *spec);

typedef struct CryptoCipher CryptoCipher;

/* A sector cipher for spec keyed with key (crypto_spec_key_len bytes);
 * NULL with the message recorded.  Usable from many threads at once. */
CryptoCipher *crypto_cipher_new(const CryptoSpec *spec, const uint8_t *key, size_t len);
void crypto_cipher_free(CryptoCipher *c);
/* En/decrypt len bytes (a multiple of CRYPTO_SECTOR_SIZE) in place, the
 * first sector numbered 'sector' (the IV generator's input).  0 or -errno
 * with the message recorded. */
int crypto_cipher_encrypt(CryptoCipher *c, uint64_t sector, uint8_t *buf, size_t len);
int crypto_cipher_decrypt(CryptoCipher *c, uint64_t sector, uint8_t *buf, size_t len);

#endif
