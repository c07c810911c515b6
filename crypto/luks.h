/*
 * crypto/luks.h: LUKS1 volumes -- unlocking, creating, key slots (luks.c
 * says what it owns and its invariants).
 */
#ifndef QIMG_CRYPTO_LUKS_H
#define QIMG_CRYPTO_LUKS_H

#include "crypto/luks-codec.h"
#include "crypto/secret.h"

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * The most PBKDF2 iterations a key slot or the master-key digest may ask
 * for before qimg spends time on them (luks.c invariant 5).  QEMU's and
 * cryptsetup's default of 2 s gives a few million here; a hostile header
 * can ask for 2^32 - 1, hours of CPU per slot.  100 million iterations take
 * about half a minute per slot with SHA-256.  Callers may raise it
 * (QimgOpenOptions.luks_max_iterations).
 */
#define CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS 100000000u

/* Where the header area is: offsets from the start of the LUKS header.
 * read/write move all the bytes or fail with -errno and a message; flush
 * makes what was written durable. */
typedef struct CryptoLuksIO {
    int (*read)(void *opaque, uint64_t offset, void *buf, size_t len);
    int (*write)(void *opaque, uint64_t offset, const void *buf, size_t len);
    int (*flush)(void *opaque);
    void *opaque;
} CryptoLuksIO;

/* What a new volume is made with (QEMU's defaults: crypto_luks_params_init). */
typedef struct CryptoLuksParams {
    CryptoSpec spec;
    bool has_ivgen_hash; /* write ":<hash>" into the mode string */
    CryptoHash hash;
    uint64_t iter_time_ms;
} CryptoLuksParams;

/* 0 if qimg's library has everything h's volume needs (cipher, mode, IV
 * generator, hashes), else -ENOTSUP naming what it lacks. */
int crypto_luks_supported(const CryptoLuksHeader *h);

/* aes-256, xts, plain64, sha256, 2000 ms. */
void crypto_luks_params_init(CryptoLuksParams *p);
/* The bytes a new volume's header and key material take (qemu-img
 * measure); -errno with QEMU's message for parameters it refuses. */
int64_t crypto_luks_params_area_len(const CryptoLuksParams *p);

/* A new header (uuid, salts, master-key digest and its iterations, every
 * slot's place, no slot active) and its master key (*mk: secure memory,
 * h->key_bytes long).  0 or -errno with QEMU's message. */
int crypto_luks_format(const CryptoLuksParams *p, uint32_t max_iterations,
                       CryptoLuksHeader *h, uint8_t **mk);

/* Put mk into slot i, opened by pw (iterations for iter_time_ms): the key
 * material is written and flushed, then the header with the slot enabled
 * (luks.c invariant 3). */
int crypto_luks_store_key(CryptoLuksHeader *h, const CryptoLuksIO *io, unsigned slot,
                          const uint8_t *pw, size_t pwlen, const uint8_t *mk,
                          uint64_t iter_time_ms, uint32_t max_iterations);
/* Does pw open slot i?  1 (mk[0..key_bytes) filled), 0 (no, or the slot is
 * inactive), or -errno. */
int crypto_luks_try_slot(const CryptoLuksHeader *h, const CryptoLuksIO *io, unsigned slot,
                         const uint8_t *pw, size_t pwlen, uint32_t max_iterations,
                         uint8_t *mk);
/* The master key from the first slot pw opens (*mk: secure memory), or
 * -EACCES with "Invalid password, cannot unlock any keyslot". */
int crypto_luks_unlock(const CryptoLuksHeader *h, const CryptoLuksIO *io,
                       const uint8_t *pw, size_t pwlen, uint32_t max_iterations,
                       uint8_t **mk);
/* Disable slot i: the header first (flushed), then its key material
 * overwritten with random bytes (luks.c invariant 4). */
int crypto_luks_erase_key(CryptoLuksHeader *h, const CryptoLuksIO *io, unsigned slot);

/* qemu-img amend's key slot options (encrypt.state, encrypt.keyslot,
 * encrypt.old-secret, encrypt.new-secret, encrypt.iter-time). */
typedef struct CryptoLuksAmend {
    bool active; /* state=active: add a key, else erase */
    bool has_keyslot;
    int64_t keyslot;
    const char *old_secret, *new_secret; /* ids, or NULL */
    bool has_iter_time;
    uint64_t iter_time_ms;
} CryptoLuksAmend;

/* Read them from opts (key -> value, numbers decimal) under prefix
 * ("encrypt." or "") with QEMU's messages; unknown keys under the prefix
 * are the caller's to refuse. */
int crypto_luks_amend_parse(GHashTable *opts, const char *prefix, CryptoLuksAmend *a);
/* Apply a to the volume whose master key is mk, with QEMU 7.2's rules and
 * messages (force: qemu-img amend --force). */
int crypto_luks_amend(CryptoLuksHeader *h, const CryptoLuksIO *io, const uint8_t *mk,
                      const CryptoSecrets *secrets, const CryptoLuksAmend *a, bool force,
                      uint32_t max_iterations);

/* The create options of a LUKS volume from opts (key -> value) under
 * prefix ("encrypt." for qcow2, "" for luks): cipher-alg, cipher-mode,
 * ivgen-alg, ivgen-hash-alg, hash-alg, iter-time, with QEMU's defaults and
 * messages (luks-options.c). */
int crypto_luks_params_parse(GHashTable *opts, const char *prefix, CryptoLuksParams *p);
/* iter-time's first check, as QemuOpts makes it when the options are
 * parsed: a number (values above 2^64 - 1 too large). */
int crypto_luks_iter_time_check(GHashTable *opts, const char *prefix);

#endif
