/*
 * crypto/secret.c: the caller's secrets, looked up by id.
 *
 * Owns: finding a secret object's bytes by the id an option names
 * (encrypt.key-secret, key-secret, encrypt.new-secret, ...) and turning
 * them into a passphrase as QEMU does.
 *
 * Invariants (cited as "secret.c invariant N"):
 *  1. A passphrase is the secret's bytes, all of them, which must be valid
 *     UTF-8 without NUL bytes (QEMU's qcrypto_secret_lookup_as_utf8); it is
 *     copied into secure memory (secmem.c) for as long as it is used and
 *     the caller's copy is never modified.
 *  2. A table of ids without values (QimgOpenOptions.secrets from an older
 *     caller) answers whether a secret exists, and refuses to give a
 *     passphrase with a message saying so: never an empty or made-up one.
 */
#include "crypto/secret.h"

#include "block/block.h"
#include "crypto/secmem.h"

#include <errno.h>
#include <string.h>

bool crypto_secret_exists(const CryptoSecrets *s, const char *id)
{
    return s && s->table && id && g_hash_table_contains(s->table, id);
}

int crypto_secret_passphrase(const CryptoSecrets *s, const char *id, uint8_t **pw,
                             size_t *len)
{
    GBytes *b;
    const void *data;
    gsize n;

    if (!crypto_secret_exists(s, id)) {
        return blk_error(EINVAL, "No secret with id '%s'", id);
    }
    if (!s->values) { /* invariant 2 */
        return blk_error(EINVAL,
                         "The value of secret '%s' is not available (the caller gave "
                         "secret ids only)",
                         id);
    }
    b = g_hash_table_lookup(s->table, id);
    data = g_bytes_get_data(b, &n);
    if (n > 0 && !g_utf8_validate(data, (gssize)n, NULL)) { /* invariant 1 */
        return blk_error(EINVAL, "Data from secret %s is not valid UTF-8", id);
    }
    *pw = crypto_secure_alloc(n ? n : 1);
    if (n > 0) {
        memcpy(*pw, data, n);
    }
    *len = n;
    return 0;
}
