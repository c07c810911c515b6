/*
 * crypto/secret.h: the caller's secrets by id, as passphrases (secret.c).
 */
#ifndef QIMG_CRYPTO_SECRET_H
#define QIMG_CRYPTO_SECRET_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The caller's secret objects: id -> GBytes (their bytes), or ids alone
 * (values unknown: an older caller's table). */
typedef struct CryptoSecrets {
    GHashTable *table; /* may be NULL: no secrets */
    bool values;       /* the values are GBytes */
} CryptoSecrets;

bool crypto_secret_exists(const CryptoSecrets *s, const char *id);
/* The passphrase of secret id, as QEMU takes it (its bytes, which must be
 * UTF-8), copied into secure memory (*pw: crypto_secure_free).  0, or
 * -errno with QEMU's message ("No secret with id 'X'", "Data from secret X
 * is not valid UTF-8"). */
int crypto_secret_passphrase(const CryptoSecrets *s, const char *id, uint8_t **pw,
                             size_t *len);

#endif
