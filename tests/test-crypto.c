/*
 * tests/test-crypto.c: crypto/ -- hashes, PBKDF2, the sector cipher, the
 * LUKS key slots and the per-request layer -- against values computed by
 * independent implementations:
 *
 *  - PBKDF2 from RFC 6070 (SHA-1) and its SHA-256 counterparts (kdf.c
 *    invariant 1);
 *  - AES-XTS from IEEE 1619 (vector 2), and 512-byte sectors of AES-XTS
 *    and AES-CBC-ESSIV computed with OpenSSL (python3-cryptography and the
 *    openssl command): plain64, plain (32-bit: sector 2^32 + 5 is sector
 *    5) and ESSIV IVs (cipher.c invariants 1, 4); what GnuTLS lacks is
 *    refused with a message;
 *  - a LUKS volume made in memory: the passphrase opens slot 0, a wrong one
 *    gives QEMU's message, a second slot opens the same master key, an
 *    erased slot is disabled on disk before its material is overwritten
 *    (luks.c invariants 3, 4, 6), and iteration counts past the limit are
 *    refused before any PBKDF2 runs (luks.c invariant 5);
 *  - the per-request layer over a file: whole sectors in place, partial
 *    ones through the bounce buffer, sectors split across iovecs, the
 *    caller's buffers untouched by a write, no plaintext in the file, an
 *    unaligned write refused (crypto/block.c invariants 2-4);
 *  - secrets: QEMU's UTF-8 rule and messages, ids without values refused
 *    (secret.c invariants 1, 2); secure memory left out of core dumps,
 *    digests compared in constant time (secmem.c invariants 1, 3).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "block/endian.h"
#include "crypto/block.h"
#include "crypto/luks.h"
#include "crypto/secmem.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void hex_to_bin(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

static void assert_hex(const uint8_t *got, size_t n, const char *hex)
{
    g_autofree char *s = g_malloc(2 * n + 1);

    for (size_t i = 0; i < n; i++) {
        g_snprintf(s + 2 * i, 3, "%02x", got[i]);
    }
    assert_string_equal(s, hex);
}

static void assert_sha256(const uint8_t *buf, size_t n, const char *hex)
{
    uint8_t d[32];

    assert_int_equal(crypto_hash2(CRYPTO_HASH_SHA256, buf, n, NULL, 0, d), 0);
    assert_hex(d, sizeof(d), hex);
}

static void expect_msg(int ret, int err, const char *want)
{
    const char *msg = blk_error_message();

    assert_int_equal(ret, -err);
    if (!msg || !strstr(msg, want)) {
        fail_msg("message '%s', want '%s'", msg ? msg : "(none)", want);
    }
    blk_error_clear();
}

static void test_pbkdf2(void **state)
{
    uint8_t out[32];

    (void)state;
    /* RFC 6070 */
    assert_int_equal(crypto_pbkdf2(CRYPTO_HASH_SHA1, "password", 8,
                                   (const uint8_t *)"salt", 4, 1, out, 20),
                     0);
    assert_hex(out, 20, "0c60c80f961f0e71f3a9b524af6012062fe037a6");
    assert_int_equal(crypto_pbkdf2(CRYPTO_HASH_SHA1, "password", 8,
                                   (const uint8_t *)"salt", 4, 2, out, 20),
                     0);
    assert_hex(out, 20, "ea6c014dc72d6f8ccd1ed92ace1d41f0d8de8957");
    assert_int_equal(crypto_pbkdf2(CRYPTO_HASH_SHA1, "password", 8,
                                   (const uint8_t *)"salt", 4, 4096, out, 20),
                     0);
    assert_hex(out, 20, "4b007901b765489abead49d926f721d065a429c1");
    assert_int_equal(crypto_pbkdf2(CRYPTO_HASH_SHA256, "password", 8,
                                   (const uint8_t *)"salt", 4, 1, out, 32),
                     0);
    assert_hex(out, 32,
               "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b");
    assert_int_equal(crypto_pbkdf2(CRYPTO_HASH_SHA256, "password", 8,
                                   (const uint8_t *)"salt", 4, 4096, out, 32),
                     0);
    assert_hex(out, 32,
               "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a");
    /* QEMU's names and sizes */
    assert_int_equal(crypto_hash_lookup("ripemd160"), CRYPTO_HASH_RIPEMD160);
    assert_int_equal(crypto_hash_len(CRYPTO_HASH_SHA384), 48);
    assert_int_equal(crypto_hash_lookup("SHA256"), -1);
}

/* One 512-byte sector (bytes 0..255 twice) through spec, key, sector. */
static CryptoCipher *cipher(CryptoCipherAlg alg, CryptoMode mode, CryptoIvgen ivgen,
                            const uint8_t *key)
{
    CryptoSpec spec = {
        .alg = alg, .mode = mode, .ivgen = ivgen, .ivgen_hash = CRYPTO_HASH_SHA256};
    CryptoCipher *c = crypto_cipher_new(&spec, key, crypto_spec_key_len(&spec));

    assert_non_null(c);
    return c;
}

static void test_cipher(void **state)
{
    uint8_t key[64], buf[512], pt[512];
    CryptoCipher *c;

    (void)state;
    for (size_t i = 0; i < sizeof(key); i++) {
        key[i] = (uint8_t)i;
    }
    for (size_t i = 0; i < sizeof(pt); i++) {
        pt[i] = (uint8_t)i;
    }

    /* IEEE 1619 vector 2: 32 bytes of 0x44, data unit 0x3333333333 */
    uint8_t k2[32];
    memset(k2, 0x11, 16);
    memset(k2 + 16, 0x22, 16);
    c = cipher(CRYPTO_CIPHER_AES_128, CRYPTO_MODE_XTS, CRYPTO_IVGEN_PLAIN64, k2);
    memset(buf, 0x44, sizeof(buf));
    assert_int_equal(crypto_cipher_encrypt(c, UINT64_C(0x3333333333), buf, sizeof(buf)),
                     0);
    assert_hex(buf, 32,
               "c454185e6a16936e39334038acef838bfb186fff7480adc4289382ecd6d394f0");
    crypto_cipher_free(c);

    /* OpenSSL: AES-128-XTS and AES-256-XTS, sector 5, plain64 */
    c = cipher(CRYPTO_CIPHER_AES_128, CRYPTO_MODE_XTS, CRYPTO_IVGEN_PLAIN64, key);
    memcpy(buf, pt, sizeof(buf));
    assert_int_equal(crypto_cipher_encrypt(c, 5, buf, sizeof(buf)), 0);
    assert_sha256(buf, sizeof(buf),
                  "b1c483beb69bd3eda9116107abbb7fdedfc45a36ae27814f6f9a09d3b0b8ab9c");
    assert_int_equal(crypto_cipher_decrypt(c, 5, buf, sizeof(buf)), 0);
    assert_memory_equal(buf, pt, sizeof(buf));
    crypto_cipher_free(c);
    c = cipher(CRYPTO_CIPHER_AES_256, CRYPTO_MODE_XTS, CRYPTO_IVGEN_PLAIN64, key);
    memcpy(buf, pt, sizeof(buf));
    assert_int_equal(crypto_cipher_encrypt(c, 5, buf, sizeof(buf)), 0);
    assert_sha256(buf, sizeof(buf),
                  "e42dfc0cdfba4b2167b76646959738ed3a9ed53847269fd15a7c578c7ca222cb");
    crypto_cipher_free(c);
    /* plain: 32 bits of the sector number */
    c = cipher(CRYPTO_CIPHER_AES_128, CRYPTO_MODE_XTS, CRYPTO_IVGEN_PLAIN, key);
    memcpy(buf, pt, sizeof(buf));
    assert_int_equal(crypto_cipher_encrypt(c, (UINT64_C(1) << 32) + 5, buf, sizeof(buf)),
                     0);
    assert_sha256(buf, sizeof(buf),
                  "b1c483beb69bd3eda9116107abbb7fdedfc45a36ae27814f6f9a09d3b0b8ab9c");
    crypto_cipher_free(c);
    /* openssl: AES-128-CBC, ESSIV (AES-256 keyed with sha256 of the key),
     * sector 7: IV afe4f025d123a1cc9b2a5e5a881b5fc1 */
    c = cipher(CRYPTO_CIPHER_AES_128, CRYPTO_MODE_CBC, CRYPTO_IVGEN_ESSIV, key);
    memcpy(buf, pt, sizeof(buf));
    assert_int_equal(crypto_cipher_encrypt(c, 7, buf, sizeof(buf)), 0);
    assert_hex(buf, 16, "586c1bc42ced9c66841eacdfe5765fe7");
    assert_sha256(buf, sizeof(buf),
                  "65643a6a2507ae8a1698e68533e284d4aac1c20861cb026f1b1250f3a7b39977");
    assert_int_equal(crypto_cipher_decrypt(c, 7, buf, sizeof(buf)), 0);
    assert_memory_equal(buf, pt, sizeof(buf));
    crypto_cipher_free(c);

    /* invariant 1: what GnuTLS does not have, named */
    CryptoSpec tw = {.alg = CRYPTO_CIPHER_TWOFISH_256, .mode = CRYPTO_MODE_XTS};
    expect_msg(crypto_spec_supported(&tw), ENOTSUP,
               "Cipher 'twofish-256' is not supported");
    CryptoSpec x192 = {.alg = CRYPTO_CIPHER_AES_192, .mode = CRYPTO_MODE_XTS};
    expect_msg(crypto_spec_supported(&x192), ENOTSUP, "Cipher mode 'xts' with 'aes-192'");
    CryptoSpec ctr = {.alg = CRYPTO_CIPHER_AES_256, .mode = CRYPTO_MODE_CTR};
    assert_null(crypto_cipher_new(&ctr, key, 32));
    expect_msg(-ENOTSUP, ENOTSUP, "Cipher mode 'ctr' with 'aes-256'");
}

/* ---- a LUKS volume in memory ---- */

typedef struct Mem {
    uint8_t *buf;
    size_t len;
    unsigned writes, flushes;
    int64_t header_write_at_flush; /* flushes when the last header write came */
} Mem;

static int mem_read(void *opaque, uint64_t off, void *buf, size_t len)
{
    Mem *m = opaque;

    assert_true(off + len <= m->len);
    memcpy(buf, m->buf + off, len);
    return 0;
}

static int mem_write(void *opaque, uint64_t off, const void *buf, size_t len)
{
    Mem *m = opaque;

    assert_true(off + len <= m->len);
    memcpy(m->buf + off, buf, len);
    m->writes++;
    if (off == 0) {
        m->header_write_at_flush = m->flushes;
    }
    return 0;
}

static int mem_flush(void *opaque)
{
    ((Mem *)opaque)->flushes++;
    return 0;
}

static void test_luks(void **state)
{
    CryptoLuksParams p;
    CryptoLuksHeader h, d;
    uint8_t *mk = NULL, *mk2 = NULL, *got = NULL;
    Mem m = {0};
    CryptoLuksIO io = {mem_read, mem_write, mem_flush, &m};
    const uint8_t pw[] = "correct horse", pw2[] = "second key", bad[] = "wrong";
    uint8_t raw[CRYPTO_LUKS_HEADER_SIZE];

    (void)state;
    crypto_luks_params_init(&p);
    p.iter_time_ms = 10;
    assert_int_equal(crypto_luks_format(&p, CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS, &h, &mk),
                     0);
    /* QEMU's (and cryptsetup's) layout for a 64-byte key */
    assert_int_equal(h.key_bytes, 64);
    assert_int_equal(h.payload_offset_sector, 4040);
    assert_int_equal(h.slots[1].key_offset_sector, 8 + 504);
    assert_true(h.mk_iterations >= 1000);
    assert_string_equal(h.cipher_name, "aes");
    assert_string_equal(h.cipher_mode, "xts-plain64");
    assert_int_equal(strlen(h.uuid), 36);
    m.len = crypto_luks_area_len(&h);
    m.buf = g_malloc0(m.len);
    assert_int_equal(crypto_luks_store_key(&h, &io, 0, pw, sizeof(pw) - 1, mk, 10,
                                           CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS),
                     0);
    /* invariant 3: the header came after a flush of the material */
    assert_true(m.header_write_at_flush >= 1);
    assert_int_equal(crypto_luks_decode(m.buf, m.len, &d), 0);
    assert_true(crypto_luks_slot_active(&d, 0));
    assert_false(crypto_luks_slot_active(&d, 1));

    assert_int_equal(crypto_luks_unlock(&d, &io, pw, sizeof(pw) - 1,
                                        CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS, &got),
                     0);
    assert_memory_equal(got, mk, 64);
    crypto_secure_free(got);
    expect_msg(crypto_luks_unlock(&d, &io, bad, sizeof(bad) - 1,
                                  CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS, &got),
               EACCES, "Invalid password, cannot unlock any keyslot");

    /* a second slot opens the same master key */
    assert_int_equal(crypto_luks_store_key(&d, &io, 3, pw2, sizeof(pw2) - 1, mk, 10,
                                           CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS),
                     0);
    assert_int_equal(crypto_luks_unlock(&d, &io, pw2, sizeof(pw2) - 1,
                                        CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS, &mk2),
                     0);
    assert_memory_equal(mk2, mk, 64);
    crypto_secure_free(mk2);
    uint8_t key[64];
    assert_int_equal(crypto_luks_try_slot(&d, &io, 0, pw2, sizeof(pw2) - 1,
                                          CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS, key),
                     0);
    assert_int_equal(crypto_luks_try_slot(&d, &io, 3, pw2, sizeof(pw2) - 1,
                                          CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS, key),
                     1);

    /* invariant 4: erased, the header says so first; the material is gone */
    g_autofree uint8_t *before = g_memdup2(m.buf + 8 * 512, 64 * 4000);
    assert_int_equal(crypto_luks_erase_key(&d, &io, 0), 0);
    assert_int_equal(crypto_luks_decode(m.buf, m.len, &h), 0);
    assert_false(crypto_luks_slot_active(&h, 0));
    assert_int_equal(h.slots[0].iterations, 0);
    assert_memory_not_equal(before, m.buf + 8 * 512, 64 * 4000);
    expect_msg(crypto_luks_unlock(&h, &io, pw, sizeof(pw) - 1,
                                  CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS, &got),
               EACCES, "Invalid password");

    /* invariant 5: a slot or digest past the limit is refused, no PBKDF2 */
    memcpy(raw, m.buf, sizeof(raw));
    store_be32(raw + CRYPTO_LUKS_OFF_SLOTS + 3 * CRYPTO_LUKS_SLOT_SIZE +
                   CRYPTO_LUKS_SLOT_OFF_ITERATIONS,
               UINT32_MAX);
    assert_int_equal(crypto_luks_decode(raw, sizeof(raw), &h), 0);
    expect_msg(crypto_luks_unlock(&h, &io, pw2, sizeof(pw2) - 1,
                                  CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS, &got),
               EINVAL,
               "Keyslot 3 asks for 4294967295 PBKDF2 iterations, more than qimg's limit "
               "of 100000000");
    assert_int_equal(crypto_luks_decode(m.buf, m.len, &h), 0);
    expect_msg(crypto_luks_unlock(&h, &io, pw2, sizeof(pw2) - 1, 999, &got), EINVAL,
               "asks for");
    /* and a new slot is never given more than the limit */
    expect_msg(crypto_luks_store_key(&h, &io, 5, pw, sizeof(pw) - 1, mk, 2000, 1000),
               EINVAL, "The new keyslot asks for");

    crypto_secure_free(mk);
    g_free(m.buf);
}

/* ---- the per-request layer over a file ---- */

static void test_block(void **state)
{
    g_autofree char *path = tu_fresh("crypt.raw");
    const CryptoSpec spec = {.alg = CRYPTO_CIPHER_AES_256,
                             .mode = CRYPTO_MODE_XTS,
                             .ivgen = CRYPTO_IVGEN_PLAIN64};
    uint8_t key[64], data[8192], copy[8192], back[8192], file[8192];
    CryptoBlock *b;
    BlkNode *node;
    BlkIOV q;

    (void)state;
    hex_to_bin("00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210"
               "0f1e2d3c4b5a69788796a5b4c3d2e1f00102030405060708090a0b0c0d0e0f10",
               key, sizeof(key));
    for (size_t i = 0; i < sizeof(data); i++) {
        data[i] = (uint8_t)(i * 13 + 1);
    }
    memcpy(copy, data, sizeof(data));
    assert_int_equal(blk_file_create(path, 0, BLK_PREALLOC_OFF), 0);
    node = blk_open_file(path, false, BLK_CACHE_WRITEBACK);
    assert_non_null(node);
    b = crypto_block_new(&spec, key, sizeof(key));
    assert_non_null(b);

    /* at file offset 4096, sectors numbered from 1000 * 512 on */
    iov_init_buf(&q, data, sizeof(data));
    assert_int_equal(crypto_block_pwritev(b, node, 4096, 1000 * 512, &q, 0), 0);
    assert_memory_equal(data, copy, sizeof(data)); /* invariant 4 */
    assert_int_equal(blk_pread(node, 4096, file, sizeof(file)), 0);
    assert_memory_not_equal(file, data, 512);
    /* whole sectors, in place */
    iov_init_buf(&q, back, sizeof(back));
    assert_int_equal(crypto_block_preadv(b, node, 4096, 1000 * 512, &q), 0);
    assert_memory_equal(back, data, sizeof(back));
    /* invariant 2: partial sectors, and sectors split across buffers */
    memset(back, 0, sizeof(back));
    iov_init_buf(&q, back, 1001);
    assert_int_equal(crypto_block_preadv(b, node, 4096 + 7, 1000 * 512 + 7, &q), 0);
    assert_memory_equal(back, data + 7, 1001);
    struct iovec v[5] = {{back, 100},
                         {back + 100, 1},
                         {back + 101, 700},
                         {back + 801, 2000},
                         {back + 2801, 3343}};
    memset(back, 0, sizeof(back));
    iov_init_external(&q, v, 5);
    assert_int_equal(crypto_block_preadv(b, node, 4096, 1000 * 512, &q), 0);
    assert_memory_equal(back, data, 6144);
    /* another sector numbering does not decrypt it */
    iov_init_buf(&q, back, 512);
    assert_int_equal(crypto_block_preadv(b, node, 4096, 0, &q), 0);
    assert_memory_not_equal(back, data, 512);
    /* invariant 3: a partial sector is not written */
    iov_init_buf(&q, data, 100);
    expect_msg(crypto_block_pwritev(b, node, 4096, 1000 * 512, &q, 0), EINVAL,
               "is not sector aligned");
    /* zeros are encrypted zeros; NO_FALLBACK is refused */
    assert_int_equal(crypto_block_pwrite_zeroes(b, node, 4096, 1000 * 512, 1024, 0), 0);
    iov_init_buf(&q, back, 1024);
    assert_int_equal(crypto_block_preadv(b, node, 4096, 1000 * 512, &q), 0);
    assert_true(buf_is_zero(back, 1024));
    assert_int_equal(blk_pread(node, 4096, file, 1024), 0);
    assert_false(buf_is_zero(file, 1024));
    assert_int_equal(
        crypto_block_pwrite_zeroes(b, node, 4096, 1000 * 512, 1024, BLK_REQ_NO_FALLBACK),
        -ENOTSUP);
    crypto_block_free(b);
    blk_close(node);
}

static void test_secrets(void **state)
{
    g_autoptr(GHashTable) t = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                                    (GDestroyNotify)g_bytes_unref);
    CryptoSecrets s = {.table = t, .values = true};
    uint8_t *pw = NULL;
    size_t len = 0;

    (void)state;
    g_hash_table_insert(t, (gpointer) "ok", g_bytes_new("päss", 5));
    g_hash_table_insert(t, (gpointer) "bad", g_bytes_new("\xff\xfe", 2));
    g_hash_table_insert(t, (gpointer) "nul", g_bytes_new("a\0b", 3));
    g_hash_table_insert(t, (gpointer) "empty", g_bytes_new("", 0));
    assert_int_equal(crypto_secret_passphrase(&s, "ok", &pw, &len), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(pw, "päss", 5);
    crypto_secure_free(pw);
    assert_int_equal(crypto_secret_passphrase(&s, "empty", &pw, &len), 0);
    assert_int_equal(len, 0);
    crypto_secure_free(pw);
    expect_msg(crypto_secret_passphrase(&s, "bad", &pw, &len), EINVAL,
               "Data from secret bad is not valid UTF-8");
    expect_msg(crypto_secret_passphrase(&s, "nul", &pw, &len), EINVAL,
               "Data from secret nul is not valid UTF-8");
    expect_msg(crypto_secret_passphrase(&s, "none", &pw, &len), EINVAL,
               "No secret with id 'none'");
    s.values = false; /* invariant 2 */
    assert_true(crypto_secret_exists(&s, "ok"));
    expect_msg(crypto_secret_passphrase(&s, "ok", &pw, &len), EINVAL,
               "The value of secret 'ok' is not available");
}

/* secmem.c invariant 1: the mapping of a secure buffer is marked "dd"
 * (not dumped) in /proc/self/smaps, and locked ("lo") when RLIMIT_MEMLOCK
 * allows it. */
static void test_secmem(void **state)
{
    uint8_t *p = crypto_secure_alloc(100);
    g_autofree char *smaps = NULL;
    g_autofree char *start =
        g_strdup_printf("%" PRIxPTR "-", (uintptr_t)p & ~(uintptr_t)4095);
    const char *m, *flags;

    (void)state;
    assert_true(buf_is_zero(p, 100));
    memset(p, 0xaa, 100);
    assert_true(g_file_get_contents("/proc/self/smaps", &smaps, NULL, NULL));
    m = strstr(smaps, start);
    assert_non_null(m);
    flags = strstr(m, "VmFlags:");
    assert_non_null(flags);
    const char *eol = strchr(flags, '\n');
    g_autofree char *line = g_strndup(flags, eol ? (gsize)(eol - flags) : strlen(flags));
    if (!strstr(line, " dd")) {
        fail_msg("secure memory is not MADV_DONTDUMP: %s", line);
    }
    crypto_secure_free(p);
    assert_true(crypto_equal("abcd", "abcd", 4));
    assert_false(crypto_equal("abcd", "abce", 4));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pbkdf2),  cmocka_unit_test(test_cipher),
        cmocka_unit_test(test_luks),    cmocka_unit_test(test_block),
        cmocka_unit_test(test_secrets), cmocka_unit_test(test_secmem),
    };
    return tu_run_group_tests("crypto", tests);
}
