/*
 * qcow2/luks-codec.c: the read-only codec of the LUKS1 header inside an
 * encrypted qcow2 image (crypt_method 2; the encryption header extension
 * gives its offset and length).  qimg has no encryption: nothing here
 * decrypts, unlocks or writes; the decoded header is what qemu-img info
 * shows of the image's encryption ("encrypt:").
 *
 * Owns: the field-by-field decode of the 592-byte LUKS1 header (magic,
 * version, cipher name and mode, hash spec, payload offset, key bytes,
 * master-key iterations, uuid, the 8 key slots), its validation, and the
 * names QEMU gives the cipher, mode, IV generator and hashes.
 *
 * Invariants (cited as "luks-codec.c invariant N"):
 *  1. Checks run in QEMU 7.2's order, with its words (learnt by running
 *     qemu-img info on patched headers): magic, version, master-key
 *     iterations, then per slot stripes, state, iterations, overlap with
 *     the header, overlap with the payload, overlap with later slots; then
 *     the mode string (ivgen hash first), mode, cipher and key size, hash
 *     spec, IV generator, ESSIV's hash and cipher.
 *  2. Key slot extents are computed in 64 bits (checked arithmetic), so an
 *     offset near 2^32 sectors is refused where QEMU's 32-bit sum wraps and
 *     accepts it (our one deliberate difference).
 *  3. The strings are read from their fixed-size fields only (never past
 *     them), NUL-terminated in the decoded struct.
 */
#include "qcow2/luks-codec.h"

#include "block/block.h"

#include <errno.h>
#include <inttypes.h>

typedef struct LuksCipher {
    const char *name;
    uint32_t key_sizes[3]; /* bytes; 0 ends */
} LuksCipher;

static const LuksCipher luks_ciphers[] = {
    {"aes", {16, 24, 32}},
    {"serpent", {16, 24, 32}},
    {"twofish", {16, 24, 32}},
    {"cast5", {16, 0, 0}},
};

typedef struct LuksHash {
    const char *name;
    uint32_t digest_size;
} LuksHash;

static const LuksHash luks_hashes[] = {
    {"md5", 16},    {"sha1", 20},   {"sha224", 28},    {"sha256", 32},
    {"sha384", 48}, {"sha512", 64}, {"ripemd160", 20},
};

static const char *const luks_modes[] = {"ecb", "cbc", "xts", "ctr"};
static const char *const luks_ivgens[] = {"plain", "plain64", "essiv"};

static void load_name(const uint8_t *field, size_t len, char *out)
{
    memcpy(out, field, len);
    out[len] = '\0'; /* invariant 3 */
}

static const LuksHash *find_hash(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(luks_hashes); i++) {
        if (strcmp(luks_hashes[i].name, name) == 0) {
            return &luks_hashes[i];
        }
    }
    blk_error(EINVAL, "Hash algorithm '%s' not supported", name);
    return NULL;
}

static const char *find_name(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            return names[i];
        }
    }
    return NULL;
}

static const LuksCipher *find_cipher(const char *name, uint32_t key_bytes)
{
    for (size_t i = 0; i < G_N_ELEMENTS(luks_ciphers); i++) {
        const LuksCipher *c = &luks_ciphers[i];
        if (strcmp(c->name, name) != 0) {
            continue;
        }
        for (size_t k = 0; k < G_N_ELEMENTS(c->key_sizes) && c->key_sizes[k]; k++) {
            if (c->key_sizes[k] == key_bytes) {
                return c;
            }
        }
    }
    return NULL;
}

/* Sectors the split key material of one slot takes (invariant 2). */
static bool slot_end(const Qcow2Luks *l, const Qcow2LuksSlot *s, uint64_t *end)
{
    uint64_t bytes;

    if (qcow2_mul(l->key_bytes, s->stripes, &bytes)) {
        return false;
    }
    return !qcow2_add(s->key_offset_sector, DIV_ROUND_UP(bytes, QCOW2_LUKS_SECTOR_SIZE),
                      end);
}

static int check_slots(const Qcow2Luks *l)
{
    for (size_t i = 0; i < QCOW2_LUKS_NUM_SLOTS; i++) {
        const Qcow2LuksSlot *s = &l->slots[i];
        uint64_t end1, end2;

        if (s->stripes != QCOW2_LUKS_STRIPES) {
            return blk_error(EINVAL,
                             "Keyslot %zu is corrupted (stripes %" PRIu32 " != %u)", i,
                             s->stripes, QCOW2_LUKS_STRIPES);
        }
        if (s->active != QCOW2_LUKS_SLOT_ENABLED &&
            s->active != QCOW2_LUKS_SLOT_DISABLED) {
            return blk_error(EINVAL, "Keyslot %zu state (active/disable) is corrupted",
                             i);
        }
        if (s->active == QCOW2_LUKS_SLOT_ENABLED && s->iterations == 0) {
            return blk_error(EINVAL, "Keyslot %zu iteration count is zero", i);
        }
        if (s->key_offset_sector < QCOW2_LUKS_HEADER_SECTORS) {
            return blk_error(EINVAL, "Keyslot %zu is overlapping with the LUKS header",
                             i);
        }
        if (!slot_end(l, s, &end1) || end1 > l->payload_offset_sector) {
            return blk_error(EINVAL,
                             "Keyslot %zu is overlapping with the encrypted payload", i);
        }
        for (size_t j = i + 1; j < QCOW2_LUKS_NUM_SLOTS; j++) {
            const Qcow2LuksSlot *t = &l->slots[j];
            /* an unusable later slot is reported at its own turn; the
             * product is bounded as slot i's was */
            if (!slot_end(l, t, &end2)) {
                continue;
            }
            if (end1 > t->key_offset_sector && end2 > s->key_offset_sector) {
                return blk_error(
                    EINVAL, "Keyslots %zu and %zu are overlapping in the header", i, j);
            }
        }
    }
    return 0;
}

/* "<mode>-<ivgen>[:<ivgen hash>]", then the cipher and hashes (invariant 1). */
static int parse_algorithms(Qcow2Luks *l)
{
    char mode[QCOW2_LUKS_NAME_LEN + 1];
    char *ivgen, *ivhash;
    const LuksHash *ivh = NULL;
    const LuksCipher *c;
    uint32_t key_bytes = l->key_bytes;

    memcpy(mode, l->cipher_mode, sizeof(mode));
    ivgen = strchr(mode, '-');
    if (!ivgen) {
        return blk_error(EINVAL, "Unexpected cipher mode string format '%s'", mode);
    }
    *ivgen++ = '\0';
    ivhash = strchr(ivgen, ':');
    if (ivhash) {
        *ivhash++ = '\0';
        ivh = find_hash(ivhash);
        if (!ivh) {
            return -EINVAL;
        }
    }
    l->mode = find_name(luks_modes, G_N_ELEMENTS(luks_modes), mode);
    if (!l->mode) {
        return blk_error(EINVAL, "Cipher mode '%s' not supported", mode);
    }
    if (strcmp(l->mode, "xts") == 0) {
        key_bytes /= 2; /* XTS keys are two keys */
    }
    c = find_cipher(l->cipher_name, key_bytes);
    if (!c) {
        return blk_error(EINVAL,
                         "Algorithm '%s' with key size %" PRIu32 " bytes not supported",
                         l->cipher_name, key_bytes);
    }
    g_snprintf(l->cipher_alg, sizeof(l->cipher_alg), "%s-%" PRIu32, c->name,
               key_bytes * 8);
    const LuksHash *h = find_hash(l->hash_spec);
    if (!h) {
        return -EINVAL;
    }
    l->hash = h->name;
    l->ivgen = find_name(luks_ivgens, G_N_ELEMENTS(luks_ivgens), ivgen);
    if (!l->ivgen) {
        return blk_error(EINVAL, "IV generator '%s' not supported", ivgen);
    }
    if (strcmp(l->ivgen, "essiv") == 0) {
        if (!ivh) {
            return blk_error(EINVAL, "Missing IV generator hash specification");
        }
        /* ESSIV keys the same cipher with the hash of the key */
        if (!find_cipher(c->name, ivh->digest_size)) {
            return blk_error(EINVAL, "Cipher %s not supported with essiv", l->cipher_alg);
        }
        l->ivgen_hash = ivh->name;
    }
    return 0;
}

int qcow2_luks_decode(const uint8_t *buf, size_t len, Qcow2Luks *l)
{
    static const uint8_t magic[QCOW2_LUKS_MAGIC_LEN] = {'L', 'U', 'K', 'S', 0xba, 0xbe};
    int ret;

    g_assert(len >= QCOW2_LUKS_HEADER_SIZE);
    memset(l, 0, sizeof(*l));
    if (memcmp(buf + QCOW2_LUKS_OFF_MAGIC, magic, sizeof(magic)) != 0) {
        return blk_error(EINVAL, "Volume is not in LUKS format");
    }
    l->version = load_be16(buf + QCOW2_LUKS_OFF_VERSION);
    load_name(buf + QCOW2_LUKS_OFF_CIPHER_NAME, QCOW2_LUKS_NAME_LEN, l->cipher_name);
    load_name(buf + QCOW2_LUKS_OFF_CIPHER_MODE, QCOW2_LUKS_NAME_LEN, l->cipher_mode);
    load_name(buf + QCOW2_LUKS_OFF_HASH_SPEC, QCOW2_LUKS_NAME_LEN, l->hash_spec);
    l->payload_offset_sector = load_be32(buf + QCOW2_LUKS_OFF_PAYLOAD_OFFSET);
    l->key_bytes = load_be32(buf + QCOW2_LUKS_OFF_KEY_BYTES);
    l->mk_iterations = load_be32(buf + QCOW2_LUKS_OFF_MK_ITERATIONS);
    load_name(buf + QCOW2_LUKS_OFF_UUID, QCOW2_LUKS_UUID_LEN, l->uuid);
    for (size_t i = 0; i < QCOW2_LUKS_NUM_SLOTS; i++) {
        const uint8_t *s = buf + QCOW2_LUKS_OFF_SLOTS + i * QCOW2_LUKS_SLOT_SIZE;
        l->slots[i].active = load_be32(s + QCOW2_LUKS_SLOT_OFF_ACTIVE);
        l->slots[i].iterations = load_be32(s + QCOW2_LUKS_SLOT_OFF_ITERATIONS);
        l->slots[i].key_offset_sector = load_be32(s + QCOW2_LUKS_SLOT_OFF_KEY_OFFSET);
        l->slots[i].stripes = load_be32(s + QCOW2_LUKS_SLOT_OFF_STRIPES);
    }

    if (l->version != 1) {
        return blk_error(EINVAL, "LUKS version %" PRIu16 " is not supported", l->version);
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
