/*
 * crypto/luks.c: LUKS1 volumes: unlocking the master key, making a new
 * header, putting a key into a slot and erasing one.
 *
 * Owns: the anti-forensic splitter (LUKS1's AF-split and AF-merge, built on
 * the library's hashes), the key slot operations, and the order in which
 * they write the header area.  The header's bytes are luks-codec.c's; the
 * cipher, hashes and PBKDF2 are cipher.c's and kdf.c's (GnuTLS).
 *
 * A key slot holds the master key split into 4000 stripes (AF-split: all
 * stripes are needed to merge it back), encrypted with the slot key, which
 * is PBKDF2 of the passphrase with the slot's salt and iterations.  A
 * candidate master key is right when PBKDF2 of it with the header's salt
 * and iterations gives the header's digest.
 *
 * Invariants (cited as "luks.c invariant N"):
 *  1. Key material is processed in whole sectors, zero-padded after the
 *     split key (cryptsetup's layout; for key sizes whose material is not a
 *     whole number of sectors QEMU 7.2 aborts instead), each sector with
 *     the IV of its number from 0, in the volume's cipher, mode and IV
 *     generator keyed by the slot key.
 *  2. Master keys, slot keys, passphrases and split key material live in
 *     secure memory (secmem.c) and are wiped when done; a digest is
 *     compared in constant time.
 *  3. Storing a key: the slot's key material is written and flushed before
 *     the header that enables the slot, so a power loss never leaves an
 *     enabled slot over material that is not there.  A slot being
 *     overwritten (amend --force) is disabled first, the same way as
 *     erasing.
 *  4. Erasing a key: the header with the slot disabled (salt and iterations
 *     zeroed) is written and flushed first, then the material is
 *     overwritten with random bytes 16 times (QEMU's count), each pass
 *     flushed; a failed pass is reported, the slot stays disabled.
 *  5. Nothing spends PBKDF2 time past the caller's iteration limit: a slot
 *     or master-key digest asking for more is refused with a message naming
 *     the count and the limit before any iteration runs (a hostile header
 *     could ask for hours).  A new volume is never given more than the
 *     limit either, so qimg can always open what it made.
 *  6. Slots are tried in order 0..7, and the first that the passphrase
 *     opens gives the master key (QEMU's order).
 *  7. Amend (qemu-img amend's key slots) checks its options in QEMU 7.2's
 *     order and words before it writes anything, refuses to erase the last
 *     active slot or every slot a passphrase opens without --force, and to
 *     overwrite an active slot; adding a key uses the master key of the
 *     open volume (QEMU unlocks it again with the open's secret: the same
 *     key).
 */
#include "crypto/luks.h"

#include "block/block.h"
#include "block/endian.h"
#include "crypto/secmem.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define MIN_SLOT_ITERATIONS 1000u
#define MIN_DIGEST_ITERATIONS 1000u
#define ERASE_PASSES 16

void crypto_luks_params_init(CryptoLuksParams *p)
{
    *p = (CryptoLuksParams){
        .spec = {.alg = CRYPTO_CIPHER_AES_256,
                 .mode = CRYPTO_MODE_XTS,
                 .ivgen = CRYPTO_IVGEN_PLAIN64,
                 .ivgen_hash = CRYPTO_HASH_SHA256},
        .hash = CRYPTO_HASH_SHA256,
        .iter_time_ms = 2000,
    };
}

static int supported(const CryptoSpec *spec, CryptoHash hash)
{
    int ret = crypto_spec_supported(spec);

    if (ret == 0 && spec->ivgen == CRYPTO_IVGEN_ESSIV) {
        ret = crypto_hash_supported(spec->ivgen_hash);
    }
    return ret < 0 ? ret : crypto_hash_supported(hash);
}

int crypto_luks_supported(const CryptoLuksHeader *h)
{
    return supported(&h->spec, h->hash);
}

/* ---- anti-forensic splitter (LUKS1 spec, section "AF-Splitter") ---- */

static void xor_into(uint8_t *dst, const uint8_t *src, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        dst[i] ^= src[i];
    }
}

/* Diffuse block in place: each digest-sized piece i becomes H(be32(i) ||
 * piece), the last piece truncated. */
static int diffuse(CryptoHash h, uint8_t *block, size_t len)
{
    size_t ds = crypto_hash_len(h);
    uint8_t out[CRYPTO_HASH_MAX_LEN], iv[4];
    int ret = 0;

    for (size_t i = 0; i * ds < len && ret == 0; i++) {
        size_t part = MIN(ds, len - i * ds);
        store_be32(iv, (uint32_t)i);
        ret = crypto_hash2(h, iv, sizeof(iv), block + i * ds, part, out);
        memcpy(block + i * ds, out, part);
    }
    crypto_wipe(out, sizeof(out));
    return ret;
}

/* out[0..len * stripes) = AF-split of key[0..len). */
static int af_split(CryptoHash h, const uint8_t *key, size_t len, uint32_t stripes,
                    uint8_t *out)
{
    uint8_t *d = crypto_secure_alloc(len);
    int ret = crypto_random(out, len * (stripes - 1), false);

    for (uint32_t i = 0; i + 1 < stripes && ret == 0; i++) {
        xor_into(d, out + (size_t)i * len, len);
        ret = diffuse(h, d, len);
    }
    if (ret == 0) {
        memcpy(out + (size_t)(stripes - 1) * len, key, len);
        xor_into(out + (size_t)(stripes - 1) * len, d, len);
    }
    crypto_secure_free(d);
    return ret;
}

/* key[0..len) = AF-merge of in[0..len * stripes). */
static int af_merge(CryptoHash h, const uint8_t *in, size_t len, uint32_t stripes,
                    uint8_t *key)
{
    int ret = 0;

    memset(key, 0, len);
    for (uint32_t i = 0; i + 1 < stripes && ret == 0; i++) {
        xor_into(key, in + (size_t)i * len, len);
        ret = diffuse(h, key, len);
    }
    xor_into(key, in + (size_t)(stripes - 1) * len, len);
    return ret;
}

/* ---- key slots ---- */

static int check_iterations(const char *what, uint32_t iterations, uint32_t max)
{
    if (iterations <= max) {
        return 0;
    }
    /* invariant 5 */
    return blk_error(EINVAL,
                     "%s asks for %" PRIu32 " PBKDF2 iterations, more than qimg's limit "
                     "of %" PRIu32 " (raise it: QIMG_LUKS_MAX_ITERATIONS for the qimg "
                     "command, luks_max_iterations in the API)",
                     what, iterations, max);
}

/* The slot's key material size in bytes (invariant 1). */
static size_t material_len(const CryptoLuksHeader *h, const CryptoLuksSlot *s)
{
    return (size_t)crypto_luks_material_sectors(h->key_bytes, s->stripes) *
           CRYPTO_SECTOR_SIZE;
}

/* En/decrypt material with the key derived from pw for slot s. */
static int slot_cipher(const CryptoLuksHeader *h, const CryptoLuksSlot *s,
                       const uint8_t *pw, size_t pwlen, uint8_t *material, size_t len,
                       bool encrypt)
{
    uint8_t *slotkey = crypto_secure_alloc(h->key_bytes);
    CryptoCipher *c = NULL;
    int ret;

    ret = crypto_pbkdf2(h->hash, pw, pwlen, s->salt, sizeof(s->salt), s->iterations,
                        slotkey, h->key_bytes);
    if (ret == 0) {
        c = crypto_cipher_new(&h->spec, slotkey, h->key_bytes);
        ret = c ? 0 : -EINVAL;
    }
    if (ret == 0) {
        ret = encrypt ? crypto_cipher_encrypt(c, 0, material, len)
                      : crypto_cipher_decrypt(c, 0, material, len);
    }
    crypto_cipher_free(c);
    crypto_secure_free(slotkey);
    return ret;
}

int crypto_luks_try_slot(const CryptoLuksHeader *h, const CryptoLuksIO *io, unsigned slot,
                         const uint8_t *pw, size_t pwlen, uint32_t max_iterations,
                         uint8_t *mk)
{
    const CryptoLuksSlot *s = &h->slots[slot];
    uint8_t digest[CRYPTO_LUKS_DIGEST_LEN];
    g_autofree char *what = NULL;
    uint8_t *material;
    size_t len;
    int ret;

    if (!crypto_luks_slot_active(h, slot)) {
        return 0;
    }
    what = g_strdup_printf("Keyslot %u", slot);
    ret = check_iterations(what, s->iterations, max_iterations);
    if (ret == 0) {
        ret = check_iterations("The LUKS master key digest", h->mk_iterations,
                               max_iterations);
    }
    if (ret < 0) {
        return ret;
    }
    len = material_len(h, s); /* at most 64 * 4000 bytes (luks-codec.c inv. 2) */
    material = crypto_secure_alloc(len);
    ret = io->read(io->opaque, (uint64_t)s->key_offset_sector * CRYPTO_SECTOR_SIZE,
                   material, len);
    if (ret == 0) {
        ret = slot_cipher(h, s, pw, pwlen, material, len, false);
    }
    if (ret == 0) {
        ret = af_merge(h->hash, material, h->key_bytes, s->stripes, mk);
    }
    if (ret == 0) {
        ret = crypto_pbkdf2(h->hash, mk, h->key_bytes, h->mk_salt, sizeof(h->mk_salt),
                            h->mk_iterations, digest, sizeof(digest));
    }
    if (ret == 0) {
        ret = crypto_equal(digest, h->mk_digest, sizeof(digest)) ? 1 : 0; /* inv. 2 */
    }
    crypto_wipe(digest, sizeof(digest));
    crypto_secure_free(material);
    return ret;
}

int crypto_luks_unlock(const CryptoLuksHeader *h, const CryptoLuksIO *io,
                       const uint8_t *pw, size_t pwlen, uint32_t max_iterations,
                       uint8_t **mk)
{
    uint8_t *key = crypto_secure_alloc(h->key_bytes);

    for (unsigned i = 0; i < CRYPTO_LUKS_NUM_SLOTS; i++) { /* invariant 6 */
        int ret = crypto_luks_try_slot(h, io, i, pw, pwlen, max_iterations, key);
        if (ret == 1) {
            *mk = key;
            return 0;
        }
        if (ret < 0) {
            crypto_secure_free(key);
            return ret;
        }
    }
    crypto_secure_free(key);
    return blk_error(EACCES, "Invalid password, cannot unlock any keyslot");
}

static int write_header(const CryptoLuksHeader *h, const CryptoLuksIO *io)
{
    uint8_t buf[CRYPTO_LUKS_HEADER_SIZE];
    int ret;

    crypto_luks_encode(h, buf);
    ret = io->write(io->opaque, 0, buf, sizeof(buf));
    return ret < 0 ? ret : io->flush(io->opaque);
}

int crypto_luks_erase_key(CryptoLuksHeader *h, const CryptoLuksIO *io, unsigned slot)
{
    CryptoLuksSlot *s = &h->slots[slot];
    size_t len = material_len(h, s);
    uint8_t *garbage;
    int ret, ret2 = 0;

    /* invariant 4: disabled on disk first */
    memset(s->salt, 0, sizeof(s->salt));
    s->iterations = 0;
    s->active = CRYPTO_LUKS_SLOT_DISABLED;
    ret = write_header(h, io);
    garbage = g_malloc(len);
    for (int pass = 0; pass < ERASE_PASSES && ret2 == 0; pass++) {
        ret2 = crypto_random(garbage, len, false);
        if (ret2 == 0) {
            ret2 =
                io->write(io->opaque, (uint64_t)s->key_offset_sector * CRYPTO_SECTOR_SIZE,
                          garbage, len);
        }
        if (ret2 == 0) {
            ret2 = io->flush(io->opaque);
        }
    }
    g_free(garbage);
    return ret < 0 ? ret : ret2;
}

int crypto_luks_store_key(CryptoLuksHeader *h, const CryptoLuksIO *io, unsigned slot,
                          const uint8_t *pw, size_t pwlen, const uint8_t *mk,
                          uint64_t iter_time_ms, uint32_t max_iterations)
{
    CryptoLuksSlot *s = &h->slots[slot];
    size_t len = material_len(h, s);
    uint8_t *material;
    uint32_t iters;
    int ret;

    if (crypto_luks_slot_active(h, slot)) {
        ret = crypto_luks_erase_key(h, io, slot); /* invariant 3 */
        if (ret < 0) {
            return ret;
        }
    }
    ret = crypto_random(s->salt, sizeof(s->salt), false);
    if (ret == 0) {
        ret = crypto_pbkdf2_iterations(h->hash, h->key_bytes, iter_time_ms, 1, &iters);
    }
    if (ret < 0) {
        return ret;
    }
    iters = MAX(iters, MIN_SLOT_ITERATIONS);
    ret = check_iterations("The new keyslot", iters, max_iterations); /* invariant 5 */
    if (ret < 0) {
        return ret;
    }
    s->iterations = iters;
    material = crypto_secure_alloc(len); /* zero padding (invariant 1) */
    ret = af_split(h->hash, mk, h->key_bytes, s->stripes, material);
    if (ret == 0) {
        ret = slot_cipher(h, s, pw, pwlen, material, len, true);
    }
    if (ret == 0) {
        ret = io->write(io->opaque, (uint64_t)s->key_offset_sector * CRYPTO_SECTOR_SIZE,
                        material, len);
    }
    crypto_secure_free(material);
    if (ret == 0) {
        ret = io->flush(io->opaque); /* invariant 3: material, then header */
    }
    if (ret == 0) {
        s->active = CRYPTO_LUKS_SLOT_ENABLED;
        ret = write_header(h, io);
    }
    return ret;
}

/* ---- a new volume ---- */

/* cryptsetup's layout (QEMU's too): after the 4 KiB header, each slot's
 * material rounded up to 4 KiB; the sector of slot i's material. */
static uint64_t slot_sector(uint32_t key_bytes, unsigned i)
{
    return CRYPTO_LUKS_ALIGN_SECTORS +
           i * ROUND_UP(crypto_luks_material_sectors(key_bytes, CRYPTO_LUKS_STRIPES),
                        CRYPTO_LUKS_ALIGN_SECTORS);
}

int64_t crypto_luks_params_area_len(const CryptoLuksParams *p)
{
    CryptoCipherAlg essiv;

    if (p->spec.ivgen == CRYPTO_IVGEN_ESSIV &&
        crypto_essiv_cipher(p->spec.alg, p->spec.ivgen_hash, &essiv) < 0) {
        return -ENOTSUP;
    }
    return (int64_t)(slot_sector((uint32_t)crypto_spec_key_len(&p->spec),
                                 CRYPTO_LUKS_NUM_SLOTS) *
                     CRYPTO_SECTOR_SIZE);
}

int crypto_luks_format(const CryptoLuksParams *p, uint32_t max_iterations,
                       CryptoLuksHeader *h, uint8_t **mk)
{
    g_autofree char *uuid = g_uuid_string_random();
    CryptoCipherAlg essiv;
    uint32_t iters;
    uint8_t *key;
    int ret;

    memset(h, 0, sizeof(*h));
    if (p->spec.ivgen == CRYPTO_IVGEN_ESSIV) {
        ret = crypto_essiv_cipher(p->spec.alg, p->spec.ivgen_hash, &essiv);
        if (ret < 0) {
            return ret;
        }
    }
    ret = supported(&p->spec, p->hash);
    if (ret < 0) {
        return ret;
    }
    h->version = 1;
    h->spec = p->spec;
    h->hash = p->hash;
    h->has_ivgen_hash = p->has_ivgen_hash;
    g_strlcpy(h->cipher_name, crypto_cipher_family(p->spec.alg), sizeof(h->cipher_name));
    if (p->has_ivgen_hash) {
        g_snprintf(h->cipher_mode, sizeof(h->cipher_mode), "%s-%s:%s",
                   crypto_mode_name(p->spec.mode), crypto_ivgen_name(p->spec.ivgen),
                   crypto_hash_name(p->spec.ivgen_hash));
    } else {
        g_snprintf(h->cipher_mode, sizeof(h->cipher_mode), "%s-%s",
                   crypto_mode_name(p->spec.mode), crypto_ivgen_name(p->spec.ivgen));
    }
    g_strlcpy(h->hash_spec, crypto_hash_name(p->hash), sizeof(h->hash_spec));
    g_strlcpy(h->uuid, uuid, sizeof(h->uuid));
    h->key_bytes = (uint32_t)crypto_spec_key_len(&p->spec);

    key = crypto_secure_alloc(h->key_bytes);
    ret = crypto_random(h->mk_salt, sizeof(h->mk_salt), false);
    if (ret == 0) {
        ret = crypto_random(key, h->key_bytes, true);
    }
    if (ret == 0) {
        /* QEMU: an eighth of the time, at least 1000 (cryptsetup's rule) */
        ret = crypto_pbkdf2_iterations(h->hash, CRYPTO_LUKS_DIGEST_LEN, p->iter_time_ms,
                                       8, &iters);
    }
    if (ret == 0) {
        h->mk_iterations = MAX(iters, MIN_DIGEST_ITERATIONS);
        ret = check_iterations("The master key digest", h->mk_iterations, max_iterations);
    }
    if (ret == 0) {
        ret = crypto_pbkdf2(h->hash, key, h->key_bytes, h->mk_salt, sizeof(h->mk_salt),
                            h->mk_iterations, h->mk_digest, sizeof(h->mk_digest));
    }
    if (ret < 0) {
        crypto_secure_free(key);
        return ret;
    }
    for (unsigned i = 0; i < CRYPTO_LUKS_NUM_SLOTS; i++) {
        h->slots[i].active = CRYPTO_LUKS_SLOT_DISABLED;
        h->slots[i].stripes = CRYPTO_LUKS_STRIPES;
        h->slots[i].key_offset_sector = (uint32_t)slot_sector(h->key_bytes, i);
    }
    h->payload_offset_sector = (uint32_t)slot_sector(h->key_bytes, CRYPTO_LUKS_NUM_SLOTS);
    *mk = key;
    return 0;
}

/* ---- amend: qemu-img amend's key slot changes ---- */

#define DEFAULT_ITER_TIME_MS 2000

static unsigned count_active(const CryptoLuksHeader *h)
{
    unsigned n = 0;

    for (unsigned i = 0; i < CRYPTO_LUKS_NUM_SLOTS; i++) {
        n += crypto_luks_slot_active(h, i);
    }
    return n;
}

static int add_key(CryptoLuksHeader *h, const CryptoLuksIO *io, const uint8_t *mk,
                   const CryptoSecrets *secrets, const CryptoLuksAmend *a, bool force,
                   uint32_t max_iterations)
{
    uint8_t *pw = NULL;
    size_t len = 0;
    int slot = -1, ret;

    if (!a->new_secret) {
        return blk_error(EINVAL, "'new-secret' is required to activate a keyslot");
    }
    if (a->old_secret) {
        return blk_error(EINVAL,
                         "'old-secret' must not be given when activating keyslots");
    }
    if (a->has_keyslot) {
        if (a->keyslot < 0 || a->keyslot >= CRYPTO_LUKS_NUM_SLOTS) {
            return blk_error(EINVAL,
                             "Invalid keyslot %u specified, must be between 0 and %u",
                             (unsigned)a->keyslot, CRYPTO_LUKS_NUM_SLOTS - 1);
        }
        slot = (int)a->keyslot;
    } else {
        for (unsigned i = 0; i < CRYPTO_LUKS_NUM_SLOTS && slot < 0; i++) {
            slot = crypto_luks_slot_active(h, i) ? -1 : (int)i;
        }
        if (slot < 0) {
            return blk_error(ENOSPC, "Can't add a keyslot - all keyslots are in use");
        }
    }
    if (!force && crypto_luks_slot_active(h, (unsigned)slot)) {
        return blk_error(
            EEXIST, "Refusing to overwrite active keyslot %i - please erase it first",
            slot);
    }
    /* the master key is the open image's (QEMU unlocks it again) */
    ret = crypto_secret_passphrase(secrets, a->new_secret, &pw, &len);
    if (ret == 0) {
        ret = crypto_luks_store_key(
            h, io, (unsigned)slot, pw, len, mk,
            a->has_iter_time ? a->iter_time_ms : DEFAULT_ITER_TIME_MS, max_iterations);
    }
    crypto_secure_free(pw);
    return ret;
}

static int erase_keys(CryptoLuksHeader *h, const CryptoLuksIO *io,
                      const CryptoSecrets *secrets, const CryptoLuksAmend *a, bool force,
                      uint32_t max_iterations)
{
    uint8_t *pw = NULL, *tmp = NULL;
    size_t len = 0;
    unsigned match = 0, n = 0;
    int ret = 0;

    if (a->new_secret) {
        return blk_error(EINVAL, "'new-secret' must not be given when erasing keyslots");
    }
    if (a->has_iter_time) {
        return blk_error(EINVAL, "'iter-time' must not be given when erasing keyslots");
    }
    if (a->old_secret) {
        ret = crypto_secret_passphrase(secrets, a->old_secret, &pw, &len);
        if (ret < 0) {
            return ret;
        }
        tmp = crypto_secure_alloc(h->key_bytes);
    }
    if (a->has_keyslot) {
        int slot = (int)a->keyslot;
        if (a->keyslot < 0 || a->keyslot >= CRYPTO_LUKS_NUM_SLOTS) {
            ret = blk_error(EINVAL,
                            "Invalid keyslot %i specified, must be between 0 and %i",
                            (int)a->keyslot, CRYPTO_LUKS_NUM_SLOTS - 1);
        }
        if (ret == 0 && a->old_secret) {
            ret =
                crypto_luks_try_slot(h, io, (unsigned)slot, pw, len, max_iterations, tmp);
            if (ret == 0) {
                ret = blk_error(EACCES,
                                "Given keyslot %i doesn't contain the given old password "
                                "for erase operation",
                                slot);
            }
            ret = ret < 0 ? ret : 0;
        }
        if (ret == 0 && !force && !crypto_luks_slot_active(h, (unsigned)slot)) {
            ret =
                blk_error(EINVAL, "Given keyslot %i is already erased (inactive) ", slot);
        }
        if (ret == 0 && !force && count_active(h) == 1) {
            ret =
                blk_error(EPERM,
                          "Attempt to erase the only active keyslot %i which will erase "
                          "all the data in the image irreversibly - refusing operation",
                          slot);
        }
        if (ret == 0) {
            ret = crypto_luks_erase_key(h, io, (unsigned)slot);
        }
    } else if (a->old_secret) {
        for (unsigned i = 0; i < CRYPTO_LUKS_NUM_SLOTS && ret >= 0; i++) {
            ret = crypto_luks_try_slot(h, io, i, pw, len, max_iterations, tmp);
            if (ret == 1) {
                match |= 1u << i;
                n++;
            }
        }
        if (ret >= 0 && n == 0) {
            ret = blk_error(EACCES,
                            "No keyslots match given (old) password for erase operation");
        } else if (ret >= 0 && !force && n == count_active(h)) {
            ret =
                blk_error(EPERM, "All the active keyslots match the (old) password that "
                                 "was given and erasing them will erase all the data in "
                                 "the image irreversibly - refusing operation");
        } else if (ret >= 0) {
            ret = 0;
        }
        for (unsigned i = 0; i < CRYPTO_LUKS_NUM_SLOTS && ret == 0; i++) {
            if (match & (1u << i)) {
                ret = crypto_luks_erase_key(h, io, i);
            }
        }
    } else {
        ret =
            blk_error(EINVAL, "To erase keyslot(s), either explicit keyslot index or the "
                              "password currently contained in them must be given");
    }
    crypto_secure_free(tmp);
    crypto_secure_free(pw);
    return ret;
}

int crypto_luks_amend(CryptoLuksHeader *h, const CryptoLuksIO *io, const uint8_t *mk,
                      const CryptoSecrets *secrets, const CryptoLuksAmend *a, bool force,
                      uint32_t max_iterations)
{
    return a->active ? add_key(h, io, mk, secrets, a, force, max_iterations)
                     : erase_keys(h, io, secrets, a, force, max_iterations);
}
