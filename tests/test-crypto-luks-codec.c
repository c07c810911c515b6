/*
 * tests/test-crypto-luks-codec.c: the LUKS1 header codec
 * (crypto/luks-codec.c) on headers built in memory:
 *
 *  - a valid header decodes field by field, with QEMU's names for the
 *    cipher (XTS halves the key), mode, IV generator and hashes
 *    (luks-codec.c invariants 1, 3);
 *  - one broken field at a time gives QEMU's message, in QEMU's order
 *    (luks-codec.c invariant 1); slot offsets near 2^32 sectors are refused
 *    (luks-codec.c invariant 2); names that fill their field are read
 *    from it only (invariant 3);
 *  - ESSIV's cipher follows QEMU's rule and words (cipher.c);
 *  - the encoder is the decoder's inverse (invariant 4).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "block/endian.h"
#include "crypto/luks-codec.h"
#include "test-util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void expect_error(int ret, const char *want)
{
    const char *msg = blk_error_message();

    assert_true(ret == -EINVAL || ret == -ENOTSUP);
    if (!msg || strcmp(msg, want) != 0) {
        fail_msg("message '%s', want '%s'", msg ? msg : "(none)", want);
    }
    blk_error_clear();
}

static void put_name(uint8_t *buf, size_t off, const char *s)
{
    memset(buf + off, 0, CRYPTO_LUKS_NAME_LEN);
    memcpy(buf + off, s, strlen(s));
}

/* What qemu-img create -o encrypt.format=luks writes (cbc-essiv:sha256,
 * aes-128, sha1): slot 0 active, 8 sectors in, slots 128 sectors apart. */
static void make_header(uint8_t *buf)
{
    static const uint8_t magic[] = {'L', 'U', 'K', 'S', 0xba, 0xbe};

    memset(buf, 0, CRYPTO_LUKS_HEADER_SIZE);
    memcpy(buf, magic, sizeof(magic));
    store_be16(buf + CRYPTO_LUKS_OFF_VERSION, 1);
    put_name(buf, CRYPTO_LUKS_OFF_CIPHER_NAME, "aes");
    put_name(buf, CRYPTO_LUKS_OFF_CIPHER_MODE, "cbc-essiv:sha256");
    put_name(buf, CRYPTO_LUKS_OFF_HASH_SPEC, "sha1");
    store_be32(buf + CRYPTO_LUKS_OFF_PAYLOAD_OFFSET, 1032);
    store_be32(buf + CRYPTO_LUKS_OFF_KEY_BYTES, 16);
    store_be32(buf + CRYPTO_LUKS_OFF_MK_ITERATIONS, 11493);
    memcpy(buf + CRYPTO_LUKS_OFF_UUID, "797f580e-35c2-4623-b833-6c23cac679e2", 36);
    for (uint32_t i = 0; i < CRYPTO_LUKS_NUM_SLOTS; i++) {
        uint8_t *s = buf + CRYPTO_LUKS_OFF_SLOTS + i * CRYPTO_LUKS_SLOT_SIZE;
        store_be32(s + CRYPTO_LUKS_SLOT_OFF_ACTIVE,
                   i == 0 ? CRYPTO_LUKS_SLOT_ENABLED : CRYPTO_LUKS_SLOT_DISABLED);
        store_be32(s + CRYPTO_LUKS_SLOT_OFF_ITERATIONS, i == 0 ? 93455 : 0);
        store_be32(s + CRYPTO_LUKS_SLOT_OFF_KEY_OFFSET, 8 + 128 * i);
        store_be32(s + CRYPTO_LUKS_SLOT_OFF_STRIPES, CRYPTO_LUKS_STRIPES);
    }
}

static uint8_t *slot(uint8_t *buf, size_t i, size_t field)
{
    return buf + CRYPTO_LUKS_OFF_SLOTS + i * CRYPTO_LUKS_SLOT_SIZE + field;
}

static void test_decode(void **state)
{
    uint8_t buf[CRYPTO_LUKS_HEADER_SIZE];
    CryptoLuksHeader l;

    (void)state;
    make_header(buf);
    assert_int_equal(crypto_luks_decode(buf, sizeof(buf), &l), 0);
    assert_int_equal(l.version, 1);
    assert_int_equal(l.spec.alg, CRYPTO_CIPHER_AES_128);
    assert_int_equal(l.spec.mode, CRYPTO_MODE_CBC);
    assert_int_equal(l.spec.ivgen, CRYPTO_IVGEN_ESSIV);
    assert_int_equal(l.spec.ivgen_hash, CRYPTO_HASH_SHA256);
    assert_true(l.has_ivgen_hash);
    assert_int_equal(l.hash, CRYPTO_HASH_SHA1);
    assert_string_equal(l.uuid, "797f580e-35c2-4623-b833-6c23cac679e2");
    assert_int_equal(l.payload_offset_sector, 1032);
    assert_int_equal(l.mk_iterations, 11493);
    assert_int_equal(l.slots[0].active, CRYPTO_LUKS_SLOT_ENABLED);
    assert_int_equal(l.slots[0].iterations, 93455);
    assert_int_equal(l.slots[7].key_offset_sector, 8 + 128 * 7);
    assert_int_equal(l.slots[7].stripes, CRYPTO_LUKS_STRIPES);

    /* XTS: two keys in key_bytes; no ivgen hash for plain64 */
    put_name(buf, CRYPTO_LUKS_OFF_CIPHER_MODE, "xts-plain64");
    store_be32(buf + CRYPTO_LUKS_OFF_KEY_BYTES, 32);
    put_name(buf, CRYPTO_LUKS_OFF_CIPHER_NAME, "twofish");
    for (uint32_t i = 0; i < CRYPTO_LUKS_NUM_SLOTS; i++) {
        store_be32(slot(buf, i, CRYPTO_LUKS_SLOT_OFF_KEY_OFFSET), 8 + 256 * i);
    }
    store_be32(buf + CRYPTO_LUKS_OFF_PAYLOAD_OFFSET, 4040);
    assert_int_equal(crypto_luks_decode(buf, sizeof(buf), &l), 0);
    assert_int_equal(l.spec.alg, CRYPTO_CIPHER_TWOFISH_128);
    assert_int_equal(l.spec.mode, CRYPTO_MODE_XTS);
    assert_int_equal(l.spec.ivgen, CRYPTO_IVGEN_PLAIN64);
    assert_false(l.has_ivgen_hash);

    /* invariant 3: names that fill their field end there; an algorithm
     * name without its NUL is refused, as QEMU 7.2 does */
    memset(buf + CRYPTO_LUKS_OFF_UUID, 'u', CRYPTO_LUKS_UUID_LEN);
    memset(buf + CRYPTO_LUKS_OFF_HASH_SPEC, 'h', CRYPTO_LUKS_NAME_LEN);
    expect_error(crypto_luks_decode(buf, sizeof(buf), &l),
                 "LUKS header hash spec is not NUL terminated");
    assert_int_equal(strlen(l.uuid), CRYPTO_LUKS_UUID_LEN);
}

typedef struct Fault {
    size_t off; /* into the header; slot fields with slot() below */
    int width;  /* 2, 4, or 0: a name */
    uint32_t value;
    const char *name;
    const char *want;
} Fault;

#define SLOT(i, f) (CRYPTO_LUKS_OFF_SLOTS + (i)*CRYPTO_LUKS_SLOT_SIZE + (f))

/* Each message as qemu-img info 7.2 printed it for the same patch. */
static const Fault faults[] = {
    {CRYPTO_LUKS_OFF_MAGIC, 4, 0x58554b53, NULL, "Volume is not in LUKS format"},
    {CRYPTO_LUKS_OFF_VERSION, 2, 2, NULL, "LUKS version 2 is not supported"},
    {CRYPTO_LUKS_OFF_MK_ITERATIONS, 4, 0, NULL, "LUKS key iteration count is zero"},
    {CRYPTO_LUKS_OFF_PAYLOAD_OFFSET, 4, 7, NULL,
     "LUKS payload is overlapping with the header"},
    {SLOT(0, CRYPTO_LUKS_SLOT_OFF_STRIPES), 4, 3999, NULL,
     "Keyslot 0 is corrupted (stripes 3999 != 4000)"},
    {SLOT(0, CRYPTO_LUKS_SLOT_OFF_ACTIVE), 4, 1, NULL,
     "Keyslot 0 state (active/disable) is corrupted"},
    {SLOT(0, CRYPTO_LUKS_SLOT_OFF_ITERATIONS), 4, 0, NULL,
     "Keyslot 0 iteration count is zero"},
    {SLOT(0, CRYPTO_LUKS_SLOT_OFF_KEY_OFFSET), 4, 7, NULL,
     "Keyslot 0 is overlapping with the LUKS header"},
    {SLOT(0, CRYPTO_LUKS_SLOT_OFF_KEY_OFFSET), 4, 100000, NULL,
     "Keyslot 0 is overlapping with the encrypted payload"},
    /* invariant 2: QEMU's 32-bit sum wraps here and accepts it */
    {SLOT(0, CRYPTO_LUKS_SLOT_OFF_KEY_OFFSET), 4, 0xffffffff, NULL,
     "Keyslot 0 is overlapping with the encrypted payload"},
    {CRYPTO_LUKS_OFF_PAYLOAD_OFFSET, 4, 100, NULL,
     "Keyslot 0 is overlapping with the encrypted payload"},
    {CRYPTO_LUKS_OFF_KEY_BYTES, 4, 17, NULL,
     "Keyslots 0 and 1 are overlapping in the header"},
    {CRYPTO_LUKS_OFF_CIPHER_MODE, 0, 0, "cbc",
     "Unexpected cipher mode string format 'cbc'"},
    {CRYPTO_LUKS_OFF_CIPHER_MODE, 0, 0, "zz-essiv:xx",
     "Hash algorithm 'xx' not supported"},
    {CRYPTO_LUKS_OFF_CIPHER_MODE, 0, 0, "zzz-plain64", "Cipher mode 'zzz' not supported"},
    {CRYPTO_LUKS_OFF_CIPHER_MODE, 0, 0, "xts-plain64",
     "Algorithm 'aes' with key size 8 bytes not supported"},
    {CRYPTO_LUKS_OFF_CIPHER_MODE, 0, 0, "cbc-", "IV generator '' not supported"},
    {CRYPTO_LUKS_OFF_CIPHER_MODE, 0, 0, "cbc-essiv",
     "Missing IV generator hash specification"},
    {CRYPTO_LUKS_OFF_CIPHER_NAME, 0, 0, "foo",
     "Algorithm 'foo' with key size 16 bytes not supported"},
    {CRYPTO_LUKS_OFF_CIPHER_NAME, 0, 0, "cast5",
     "Cipher cast5-128 not supported with essiv"},
    /* ESSIV keys with the digest: AES-256 for sha256 (any AES size), no
     * AES of 20 bytes for sha1 (qemu-img info 7.2's words) */
    {CRYPTO_LUKS_OFF_CIPHER_MODE, 0, 0, "cbc-essiv:sha1",
     "No AES cipher with key size 20 available"},
    {CRYPTO_LUKS_OFF_CIPHER_MODE, 0, 0, "cbc-essiv:sha512",
     "No AES cipher with key size 64 available"},
    {CRYPTO_LUKS_OFF_HASH_SPEC, 0, 0, "SHA1", "Hash algorithm 'SHA1' not supported"},
    {CRYPTO_LUKS_OFF_KEY_BYTES, 4, 0, NULL,
     "Algorithm 'aes' with key size 0 bytes not supported"},
};

static void test_faults(void **state)
{
    (void)state;
    for (size_t i = 0; i < G_N_ELEMENTS(faults); i++) {
        const Fault *f = &faults[i];
        uint8_t buf[CRYPTO_LUKS_HEADER_SIZE];
        CryptoLuksHeader l;

        make_header(buf);
        if (f->name) {
            put_name(buf, f->off, f->name);
        } else if (f->width == 2) {
            store_be16(buf + f->off, (uint16_t)f->value);
        } else {
            store_be32(buf + f->off, f->value);
        }
        print_message("fault %zu: %s\n", i, f->want);
        expect_error(crypto_luks_decode(buf, sizeof(buf), &l), f->want);
    }
}

/* Order (invariant 1): stripes before the iterations of the same slot;
 * the master key before the slots; the mode's hash before the cipher. */
static void test_order(void **state)
{
    uint8_t buf[CRYPTO_LUKS_HEADER_SIZE];
    CryptoLuksHeader l;

    (void)state;
    make_header(buf);
    store_be32(slot(buf, 0, CRYPTO_LUKS_SLOT_OFF_ITERATIONS), 0);
    store_be32(slot(buf, 0, CRYPTO_LUKS_SLOT_OFF_STRIPES), 1);
    expect_error(crypto_luks_decode(buf, sizeof(buf), &l),
                 "Keyslot 0 is corrupted (stripes 1 != 4000)");
    store_be32(buf + CRYPTO_LUKS_OFF_MK_ITERATIONS, 0);
    expect_error(crypto_luks_decode(buf, sizeof(buf), &l),
                 "LUKS key iteration count is zero");
    /* QEMU checks the payload offset before the iterations */
    store_be32(buf + CRYPTO_LUKS_OFF_PAYLOAD_OFFSET, 7);
    expect_error(crypto_luks_decode(buf, sizeof(buf), &l),
                 "LUKS payload is overlapping with the header");
    store_be32(buf + CRYPTO_LUKS_OFF_PAYLOAD_OFFSET, 1032);
    make_header(buf);
    put_name(buf, CRYPTO_LUKS_OFF_CIPHER_NAME, "foo");
    put_name(buf, CRYPTO_LUKS_OFF_CIPHER_MODE, "cbc-essiv:xx");
    expect_error(crypto_luks_decode(buf, sizeof(buf), &l),
                 "Hash algorithm 'xx' not supported");
    put_name(buf, CRYPTO_LUKS_OFF_CIPHER_MODE, "cbc-essiv:sha256");
    put_name(buf, CRYPTO_LUKS_OFF_HASH_SPEC, "bar");
    expect_error(crypto_luks_decode(buf, sizeof(buf), &l),
                 "Algorithm 'foo' with key size 16 bytes not supported");
}

/* invariant 4: decode(encode(h)) == h, field by field, for a header whose
 * names fill their fields and whose bytes are all distinct. */
static void test_encode(void **state)
{
    uint8_t buf[CRYPTO_LUKS_HEADER_SIZE], again[CRYPTO_LUKS_HEADER_SIZE];
    CryptoLuksHeader l, m;

    (void)state;
    make_header(buf);
    for (size_t i = 0; i < CRYPTO_LUKS_DIGEST_LEN; i++) {
        buf[CRYPTO_LUKS_OFF_MK_DIGEST + i] = (uint8_t)(0x40 + i);
    }
    for (size_t i = 0; i < CRYPTO_LUKS_SALT_LEN; i++) {
        buf[CRYPTO_LUKS_OFF_MK_DIGEST_SALT + i] = (uint8_t)(0x80 + i);
        *slot(buf, 0, CRYPTO_LUKS_SLOT_OFF_SALT + i) = (uint8_t)(0xc0 + i);
    }
    memset(buf + CRYPTO_LUKS_OFF_UUID, 'u', CRYPTO_LUKS_UUID_LEN);
    assert_int_equal(crypto_luks_decode(buf, sizeof(buf), &l), 0);
    crypto_luks_encode(&l, again);
    assert_memory_equal(buf, again, sizeof(buf));
    assert_int_equal(crypto_luks_decode(again, sizeof(again), &m), 0);
    assert_memory_equal(&l, &m, sizeof(l));
    assert_int_equal(crypto_luks_area_len(&l), 1032 * 512);
    /* key material: whole sectors of key_bytes * stripes */
    assert_int_equal(crypto_luks_material_sectors(16, 4000), 125);
    assert_int_equal(crypto_luks_material_sectors(24, 4000), 188);
    assert_int_equal(crypto_luks_material_sectors(64, 4000), 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_encode),
    };
    return tu_run_group_tests("luks-codec", tests);
}
