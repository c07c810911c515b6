/*
 * crypto/luks-codec.c: the codec of the LUKS1 header, at the start of a raw
 * LUKS image or where a qcow2 image's encryption header extension points.
 *
 * Owns: the field-by-field decode and encode of the 592-byte LUKS1 header
 * (magic, version, cipher name and mode, hash spec, payload offset, key
 * bytes, master-key digest, salt and iterations, uuid, the 8 key slots),
 * its validation, and the reading of its algorithm names as QEMU reads
 * them.  Nothing here decrypts: luks.c unlocks and writes key slots.
 *
 * Invariants (cited as "luks-codec.c invariant N"):
 *  1. Checks run in QEMU 7.2's order, with its words (learnt by running
 *     qemu-img info on patched headers): magic, version, the cipher name,
 *     mode and hash spec each NUL-terminated in its field, the payload
 *     past the header, master-key iterations, then per slot stripes,
 *     state, iterations, overlap with the header, overlap with the
 *     payload, overlap with later slots; then the mode string (ivgen hash
 *     first), mode, cipher and key size, hash spec, IV generator, ESSIV's
 *     hash and cipher (cipher.c's rule).
 *  2. Key slot extents are computed in 64 bits (checked arithmetic), so an
 *     offset near 2^32 sectors is refused where QEMU's 32-bit sum wraps and
 *     accepts it (our one deliberate difference).  Every slot has exactly
 *     4000 stripes, so no key material is larger than 64 * 4000 bytes.
 *  3. The strings are read from their fixed-size fields only (never past
 *     them), NUL-terminated in the decoded struct; an algorithm name that
 *     fills its field is refused (invariant 1), the uuid is kept whole.
 *  4. The encoder is the decoder's inverse for the on-disk fields: names
 *     and uuid are written NUL-padded to their field, so decoding what was
 *     encoded gives the same header back (tests/test-crypto-luks-codec.c).
 */
#include "crypto/luks-codec.h"

#include "block/block.h"
#include "block/endian.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

static void load_name(const uint8_t *field, size_t len, char *out)
{
    memcpy(out, field, len);
    out[len] = '\0'; /* invariant 3 */
}

static void store_name(uint8_t *field, size_t len, const char *s)
{
    size_t n = strnlen(s, len);

    memset(field, 0, len);
    memcpy(field, s, n);
}

static int find_hash(const char *name, CryptoHash *out)
{
    int h = crypto_hash_lookup(name);

    if (h < 0) {
        return blk_error(ENOTSUP, "Hash algorithm '%s' not supported", name);
    }
    *out = (CryptoHash)h;
    return 0;
}

uint64_t crypto_luks_material_sectors(uint32_t key_bytes, uint32_t stripes)
{
    return DIV_ROUND_UP((uint64_t)key_bytes * stripes, CRYPTO_SECTOR_SIZE);
}

/* The sector after a slot's key material, in 64 bits (invariant 2: 32-bit
 * values, so neither the product nor the sum can overflow). */
static uint64_t slot_end(const CryptoLuksHeader *l, const CryptoLuksSlot *s)
{
    return s->key_offset_sector + crypto_luks_material_sectors(l->key_bytes, s->stripes);
}

static int check_slots(const CryptoLuksHeader *l)
{
    for (size_t i = 0; i < CRYPTO_LUKS_NUM_SLOTS; i++) {
        const CryptoLuksSlot *s = &l->slots[i];
        uint64_t end1 = slot_end(l, s);

        if (s->stripes != CRYPTO_LUKS_STRIPES) {
            return blk_error(EINVAL,
                             "Keyslot %zu is corrupted (stripes %" PRIu32 " != %u)", i,
                             s->stripes, CRYPTO_LUKS_STRIPES);
        }
        if (s->active != CRYPTO_LUKS_SLOT_ENABLED &&
            s->active != CRYPTO_LUKS_SLOT_DISABLED) {
            return blk_error(EINVAL, "Keyslot %zu state (active/disable) is corrupted",
                             i);
        }
        if (s->active == CRYPTO_LUKS_SLOT_ENABLED && s->iterations == 0) {
            return blk_error(EINVAL, "Keyslot %zu iteration count is zero", i);
        }
        if (s->key_offset_sector < CRYPTO_LUKS_ALIGN_SECTORS) {
            return blk_error(EINVAL, "Keyslot %zu is overlapping with the LUKS header",
                             i);
        }
        if (end1 > l->payload_offset_sector) {
            return blk_error(EINVAL,
                             "Keyslot %zu is overlapping with the encrypted payload", i);
        }
        for (size_t j = i + 1; j < CRYPTO_LUKS_NUM_SLOTS; j++) {
            const CryptoLuksSlot *t = &l->slots[j];
            if (end1 > t->key_offset_sector && slot_end(l, t) > s->key_offset_sector) {
                return blk_error(
                    EINVAL, "Keyslots %zu and %zu are overlapping in the header", i, j);
            }
        }
    }
    return 0;
}

/* "<mode>-<ivgen>[:<ivgen hash>]", then the cipher and hashes (invariant 1). */
static int parse_algorithms(CryptoLuksHeader *l)
{
    char mode[CRYPTO_LUKS_NAME_LEN + 1];
    char *ivgen, *ivhash;
    CryptoHash ivh = CRYPTO_HASH_SHA256;
    uint32_t key_bytes = l->key_bytes;
    int m, alg, iv, ret;

    memcpy(mode, l->cipher_mode, sizeof(mode));
    ivgen = strchr(mode, '-');
    if (!ivgen) {
        return blk_error(EINVAL, "Unexpected cipher mode string format '%s'", mode);
    }
    *ivgen++ = '\0';
    ivhash = strchr(ivgen, ':');
    if (ivhash) {
        *ivhash++ = '\0';
        ret = find_hash(ivhash, &ivh);
        if (ret < 0) {
            return ret;
        }
    }
    m = crypto_mode_lookup(mode);
    if (m < 0) {
        return blk_error(ENOTSUP, "Cipher mode '%s' not supported", mode);
    }
    if (m == CRYPTO_MODE_XTS) {
        key_bytes /= 2; /* XTS keys are two keys */
    }
    alg = crypto_cipher_alg_find(l->cipher_name, key_bytes);
    if (alg < 0) {
        return blk_error(ENOTSUP,
                         "Algorithm '%s' with key size %" PRIu32 " bytes not supported",
                         l->cipher_name, key_bytes);
    }
    ret = find_hash(l->hash_spec, &l->hash);
    if (ret < 0) {
        return ret;
    }
    iv = crypto_ivgen_lookup(ivgen);
    if (iv < 0) {
        return blk_error(ENOTSUP, "IV generator '%s' not supported", ivgen);
    }
    l->spec = (CryptoSpec){
        .alg = (CryptoCipherAlg)alg,
        .mode = (CryptoMode)m,
        .ivgen = (CryptoIvgen)iv,
        .ivgen_hash = ivh,
    };
    l->has_ivgen_hash = ivhash != NULL;
    if (iv == CRYPTO_IVGEN_ESSIV) {
        CryptoCipherAlg ea;
        if (!ivhash) {
            return blk_error(EINVAL, "Missing IV generator hash specification");
        }
        return crypto_essiv_cipher(l->spec.alg, ivh, &ea);
    }
    return 0;
}

int crypto_luks_decode(const uint8_t *buf, size_t len, CryptoLuksHeader *l)
{
    static const uint8_t magic[CRYPTO_LUKS_MAGIC_LEN] = {'L', 'U', 'K', 'S', 0xba, 0xbe};
    int ret;

    g_assert(len >= CRYPTO_LUKS_HEADER_SIZE);
    memset(l, 0, sizeof(*l));
    if (memcmp(buf + CRYPTO_LUKS_OFF_MAGIC, magic, sizeof(magic)) != 0) {
        return blk_error(EINVAL, "Volume is not in LUKS format");
    }
    l->version = load_be16(buf + CRYPTO_LUKS_OFF_VERSION);
    load_name(buf + CRYPTO_LUKS_OFF_CIPHER_NAME, CRYPTO_LUKS_NAME_LEN, l->cipher_name);
    load_name(buf + CRYPTO_LUKS_OFF_CIPHER_MODE, CRYPTO_LUKS_NAME_LEN, l->cipher_mode);
    load_name(buf + CRYPTO_LUKS_OFF_HASH_SPEC, CRYPTO_LUKS_NAME_LEN, l->hash_spec);
    l->payload_offset_sector = load_be32(buf + CRYPTO_LUKS_OFF_PAYLOAD_OFFSET);
    l->key_bytes = load_be32(buf + CRYPTO_LUKS_OFF_KEY_BYTES);
    memcpy(l->mk_digest, buf + CRYPTO_LUKS_OFF_MK_DIGEST, CRYPTO_LUKS_DIGEST_LEN);
    memcpy(l->mk_salt, buf + CRYPTO_LUKS_OFF_MK_DIGEST_SALT, CRYPTO_LUKS_SALT_LEN);
    l->mk_iterations = load_be32(buf + CRYPTO_LUKS_OFF_MK_ITERATIONS);
    load_name(buf + CRYPTO_LUKS_OFF_UUID, CRYPTO_LUKS_UUID_LEN, l->uuid);
    for (size_t i = 0; i < CRYPTO_LUKS_NUM_SLOTS; i++) {
        const uint8_t *s = buf + CRYPTO_LUKS_OFF_SLOTS + i * CRYPTO_LUKS_SLOT_SIZE;
        CryptoLuksSlot *k = &l->slots[i];
        k->active = load_be32(s + CRYPTO_LUKS_SLOT_OFF_ACTIVE);
        k->iterations = load_be32(s + CRYPTO_LUKS_SLOT_OFF_ITERATIONS);
        memcpy(k->salt, s + CRYPTO_LUKS_SLOT_OFF_SALT, CRYPTO_LUKS_SALT_LEN);
        k->key_offset_sector = load_be32(s + CRYPTO_LUKS_SLOT_OFF_KEY_OFFSET);
        k->stripes = load_be32(s + CRYPTO_LUKS_SLOT_OFF_STRIPES);
    }

    if (l->version != 1) {
        return blk_error(ENOTSUP, "LUKS version %" PRIu16 " is not supported",
                         l->version);
    }
    /* QEMU 7.2's order of checks (qcrypto_block_luks_check_header) */
    if (!memchr(buf + CRYPTO_LUKS_OFF_CIPHER_NAME, 0, CRYPTO_LUKS_NAME_LEN)) {
        return blk_error(EINVAL, "LUKS header cipher name is not NUL terminated");
    }
    if (!memchr(buf + CRYPTO_LUKS_OFF_CIPHER_MODE, 0, CRYPTO_LUKS_NAME_LEN)) {
        return blk_error(EINVAL, "LUKS header cipher mode is not NUL terminated");
    }
    if (!memchr(buf + CRYPTO_LUKS_OFF_HASH_SPEC, 0, CRYPTO_LUKS_NAME_LEN)) {
        return blk_error(EINVAL, "LUKS header hash spec is not NUL terminated");
    }
    if (l->payload_offset_sector < CRYPTO_LUKS_ALIGN_SECTORS) {
        return blk_error(EINVAL, "LUKS payload is overlapping with the header");
    }
    if (l->mk_iterations == 0) {
        return blk_error(EINVAL, "LUKS key iteration count is zero");
    }
    ret = check_slots(l);
    if (ret < 0) {
        return ret;
    }
    return parse_algorithms(l);
}

void crypto_luks_encode(const CryptoLuksHeader *l, uint8_t *buf)
{
    static const uint8_t magic[CRYPTO_LUKS_MAGIC_LEN] = {'L', 'U', 'K', 'S', 0xba, 0xbe};

    memset(buf, 0, CRYPTO_LUKS_HEADER_SIZE);
    memcpy(buf + CRYPTO_LUKS_OFF_MAGIC, magic, sizeof(magic));
    store_be16(buf + CRYPTO_LUKS_OFF_VERSION, l->version);
    store_name(buf + CRYPTO_LUKS_OFF_CIPHER_NAME, CRYPTO_LUKS_NAME_LEN, l->cipher_name);
    store_name(buf + CRYPTO_LUKS_OFF_CIPHER_MODE, CRYPTO_LUKS_NAME_LEN, l->cipher_mode);
    store_name(buf + CRYPTO_LUKS_OFF_HASH_SPEC, CRYPTO_LUKS_NAME_LEN, l->hash_spec);
    store_be32(buf + CRYPTO_LUKS_OFF_PAYLOAD_OFFSET, l->payload_offset_sector);
    store_be32(buf + CRYPTO_LUKS_OFF_KEY_BYTES, l->key_bytes);
    memcpy(buf + CRYPTO_LUKS_OFF_MK_DIGEST, l->mk_digest, CRYPTO_LUKS_DIGEST_LEN);
    memcpy(buf + CRYPTO_LUKS_OFF_MK_DIGEST_SALT, l->mk_salt, CRYPTO_LUKS_SALT_LEN);
    store_be32(buf + CRYPTO_LUKS_OFF_MK_ITERATIONS, l->mk_iterations);
    store_name(buf + CRYPTO_LUKS_OFF_UUID, CRYPTO_LUKS_UUID_LEN, l->uuid);
    for (size_t i = 0; i < CRYPTO_LUKS_NUM_SLOTS; i++) {
        uint8_t *s = buf + CRYPTO_LUKS_OFF_SLOTS + i * CRYPTO_LUKS_SLOT_SIZE;
        const CryptoLuksSlot *k = &l->slots[i];
        store_be32(s + CRYPTO_LUKS_SLOT_OFF_ACTIVE, k->active);
        store_be32(s + CRYPTO_LUKS_SLOT_OFF_ITERATIONS, k->iterations);
        memcpy(s + CRYPTO_LUKS_SLOT_OFF_SALT, k->salt, CRYPTO_LUKS_SALT_LEN);
        store_be32(s + CRYPTO_LUKS_SLOT_OFF_KEY_OFFSET, k->key_offset_sector);
        store_be32(s + CRYPTO_LUKS_SLOT_OFF_STRIPES, k->stripes);
    }
}

/* What qemu-img info shows of a LUKS header: offsets in bytes, iterations
 * and stripes of active slots only. */
void crypto_luks_info(const CryptoLuksHeader *l, BlkEncryptInfo *e)
{
    e->luks = true;
    g_strlcpy(e->cipher_alg, crypto_cipher_alg_name(l->spec.alg), sizeof(e->cipher_alg));
    e->cipher_mode = crypto_mode_name(l->spec.mode);
    e->ivgen_alg = crypto_ivgen_name(l->spec.ivgen);
    e->ivgen_hash_alg =
        l->spec.ivgen == CRYPTO_IVGEN_ESSIV ? crypto_hash_name(l->spec.ivgen_hash) : NULL;
    e->hash_alg = crypto_hash_name(l->hash);
    g_strlcpy(e->uuid, l->uuid, sizeof(e->uuid));
    e->payload_offset = crypto_luks_area_len(l);
    e->master_key_iters = l->mk_iterations;
    _Static_assert(BLK_LUKS_SLOTS == CRYPTO_LUKS_NUM_SLOTS, "LUKS1 has 8 key slots");
    for (size_t i = 0; i < CRYPTO_LUKS_NUM_SLOTS; i++) {
        const CryptoLuksSlot *k = &l->slots[i];
        e->slots[i].active = k->active == CRYPTO_LUKS_SLOT_ENABLED;
        e->slots[i].key_offset = (uint64_t)k->key_offset_sector * CRYPTO_SECTOR_SIZE;
        e->slots[i].iters = e->slots[i].active ? k->iterations : 0;
        e->slots[i].stripes = e->slots[i].active ? k->stripes : 0;
    }
}
