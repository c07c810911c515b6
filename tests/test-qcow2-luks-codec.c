/*
 * tests/test-qcow2-luks-codec.c: the LUKS1 header codec
 * (qcow2/luks-codec.c) on headers built in memory, and the metadata-only
 * open of an encrypted image (qcow2.c invariant 10, header.c invariant 7):
 *
 *  - a valid header decodes field by field, with QEMU's names for the
 *    cipher (XTS halves the key), mode, IV generator and hashes
 *    (luks-codec.c invariants 1, 3);
 *  - one broken field at a time gives QEMU's message, in QEMU's order
 *    (luks-codec.c invariant 1); slot offsets near 2^32 sectors are refused
 *    (luks-codec.c invariant 2); names that fill their field are read
 *    from it only (invariant 3);
 *  - an image with crypt_method 1 opens only read-only with no_io, shows
 *    format "aes", and refuses every read and block status; an
 *    encrypt.key-secret naming no secret, or one the caller has, is
 *    refused for a data open and not looked up for a metadata-only one
 *    (header.c invariant 7).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <qimg/qimg.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void expect_error(int ret, const char *want)
{
    const char *msg = blk_error_message();

    assert_int_equal(ret, -EINVAL);
    if (!msg || strcmp(msg, want) != 0) {
        fail_msg("message '%s', want '%s'", msg ? msg : "(none)", want);
    }
    blk_error_clear();
}

static void put_name(uint8_t *buf, size_t off, const char *s)
{
    memset(buf + off, 0, QCOW2_LUKS_NAME_LEN);
    memcpy(buf + off, s, strlen(s));
}

/* What qemu-img create -o encrypt.format=luks writes (cbc-essiv:sha256,
 * aes-128, sha1): slot 0 active, 8 sectors in, slots 128 sectors apart. */
static void make_header(uint8_t *buf)
{
    static const uint8_t magic[] = {'L', 'U', 'K', 'S', 0xba, 0xbe};

    memset(buf, 0, QCOW2_LUKS_HEADER_SIZE);
    memcpy(buf, magic, sizeof(magic));
    store_be16(buf + QCOW2_LUKS_OFF_VERSION, 1);
    put_name(buf, QCOW2_LUKS_OFF_CIPHER_NAME, "aes");
    put_name(buf, QCOW2_LUKS_OFF_CIPHER_MODE, "cbc-essiv:sha256");
    put_name(buf, QCOW2_LUKS_OFF_HASH_SPEC, "sha1");
    store_be32(buf + QCOW2_LUKS_OFF_PAYLOAD_OFFSET, 1032);
    store_be32(buf + QCOW2_LUKS_OFF_KEY_BYTES, 16);
    store_be32(buf + QCOW2_LUKS_OFF_MK_ITERATIONS, 11493);
    memcpy(buf + QCOW2_LUKS_OFF_UUID, "797f580e-35c2-4623-b833-6c23cac679e2", 36);
    for (uint32_t i = 0; i < QCOW2_LUKS_NUM_SLOTS; i++) {
        uint8_t *s = buf + QCOW2_LUKS_OFF_SLOTS + i * QCOW2_LUKS_SLOT_SIZE;
        store_be32(s + QCOW2_LUKS_SLOT_OFF_ACTIVE,
                   i == 0 ? QCOW2_LUKS_SLOT_ENABLED : QCOW2_LUKS_SLOT_DISABLED);
        store_be32(s + QCOW2_LUKS_SLOT_OFF_ITERATIONS, i == 0 ? 93455 : 0);
        store_be32(s + QCOW2_LUKS_SLOT_OFF_KEY_OFFSET, 8 + 128 * i);
        store_be32(s + QCOW2_LUKS_SLOT_OFF_STRIPES, QCOW2_LUKS_STRIPES);
    }
}

static uint8_t *slot(uint8_t *buf, size_t i, size_t field)
{
    return buf + QCOW2_LUKS_OFF_SLOTS + i * QCOW2_LUKS_SLOT_SIZE + field;
}

static void test_decode(void **state)
{
    uint8_t buf[QCOW2_LUKS_HEADER_SIZE];
    Qcow2Luks l;

    (void)state;
    make_header(buf);
    assert_int_equal(qcow2_luks_decode(buf, sizeof(buf), &l), 0);
    assert_int_equal(l.version, 1);
    assert_string_equal(l.cipher_alg, "aes-128");
    assert_string_equal(l.mode, "cbc");
    assert_string_equal(l.ivgen, "essiv");
    assert_string_equal(l.ivgen_hash, "sha256");
    assert_string_equal(l.hash, "sha1");
    assert_string_equal(l.uuid, "797f580e-35c2-4623-b833-6c23cac679e2");
    assert_int_equal(l.payload_offset_sector, 1032);
    assert_int_equal(l.mk_iterations, 11493);
    assert_int_equal(l.slots[0].active, QCOW2_LUKS_SLOT_ENABLED);
    assert_int_equal(l.slots[0].iterations, 93455);
    assert_int_equal(l.slots[7].key_offset_sector, 8 + 128 * 7);
    assert_int_equal(l.slots[7].stripes, QCOW2_LUKS_STRIPES);

    /* XTS: two keys in key_bytes; no ivgen hash for plain64 */
    put_name(buf, QCOW2_LUKS_OFF_CIPHER_MODE, "xts-plain64");
    store_be32(buf + QCOW2_LUKS_OFF_KEY_BYTES, 32);
    put_name(buf, QCOW2_LUKS_OFF_CIPHER_NAME, "twofish");
    for (uint32_t i = 0; i < QCOW2_LUKS_NUM_SLOTS; i++) {
        store_be32(slot(buf, i, QCOW2_LUKS_SLOT_OFF_KEY_OFFSET), 8 + 256 * i);
    }
    store_be32(buf + QCOW2_LUKS_OFF_PAYLOAD_OFFSET, 4040);
    assert_int_equal(qcow2_luks_decode(buf, sizeof(buf), &l), 0);
    assert_string_equal(l.cipher_alg, "twofish-128");
    assert_string_equal(l.mode, "xts");
    assert_string_equal(l.ivgen, "plain64");
    assert_null(l.ivgen_hash);

    /* invariant 3: names that fill their field end there */
    memset(buf + QCOW2_LUKS_OFF_UUID, 'u', QCOW2_LUKS_UUID_LEN);
    memset(buf + QCOW2_LUKS_OFF_HASH_SPEC, 'h', QCOW2_LUKS_NAME_LEN);
    expect_error(qcow2_luks_decode(buf, sizeof(buf), &l),
                 "Hash algorithm 'hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh' not supported");
    assert_int_equal(strlen(l.uuid), QCOW2_LUKS_UUID_LEN);
}

typedef struct Fault {
    size_t off; /* into the header; slot fields with slot() below */
    int width;  /* 2, 4, or 0: a name */
    uint32_t value;
    const char *name;
    const char *want;
} Fault;

#define SLOT(i, f) (QCOW2_LUKS_OFF_SLOTS + (i)*QCOW2_LUKS_SLOT_SIZE + (f))

/* Each message as qemu-img info 7.2 printed it for the same patch. */
static const Fault faults[] = {
    {QCOW2_LUKS_OFF_MAGIC, 4, 0x58554b53, NULL, "Volume is not in LUKS format"},
    {QCOW2_LUKS_OFF_VERSION, 2, 2, NULL, "LUKS version 2 is not supported"},
    {QCOW2_LUKS_OFF_MK_ITERATIONS, 4, 0, NULL, "LUKS key iteration count is zero"},
    {SLOT(0, QCOW2_LUKS_SLOT_OFF_STRIPES), 4, 3999, NULL,
     "Keyslot 0 is corrupted (stripes 3999 != 4000)"},
    {SLOT(0, QCOW2_LUKS_SLOT_OFF_ACTIVE), 4, 1, NULL,
     "Keyslot 0 state (active/disable) is corrupted"},
    {SLOT(0, QCOW2_LUKS_SLOT_OFF_ITERATIONS), 4, 0, NULL,
     "Keyslot 0 iteration count is zero"},
    {SLOT(0, QCOW2_LUKS_SLOT_OFF_KEY_OFFSET), 4, 7, NULL,
     "Keyslot 0 is overlapping with the LUKS header"},
    {SLOT(0, QCOW2_LUKS_SLOT_OFF_KEY_OFFSET), 4, 100000, NULL,
     "Keyslot 0 is overlapping with the encrypted payload"},
    /* invariant 2: QEMU's 32-bit sum wraps here and accepts it */
    {SLOT(0, QCOW2_LUKS_SLOT_OFF_KEY_OFFSET), 4, 0xffffffff, NULL,
     "Keyslot 0 is overlapping with the encrypted payload"},
    {QCOW2_LUKS_OFF_PAYLOAD_OFFSET, 4, 100, NULL,
     "Keyslot 0 is overlapping with the encrypted payload"},
    {QCOW2_LUKS_OFF_KEY_BYTES, 4, 17, NULL,
     "Keyslots 0 and 1 are overlapping in the header"},
    {QCOW2_LUKS_OFF_CIPHER_MODE, 0, 0, "cbc",
     "Unexpected cipher mode string format 'cbc'"},
    {QCOW2_LUKS_OFF_CIPHER_MODE, 0, 0, "zz-essiv:xx",
     "Hash algorithm 'xx' not supported"},
    {QCOW2_LUKS_OFF_CIPHER_MODE, 0, 0, "zzz-plain64", "Cipher mode 'zzz' not supported"},
    {QCOW2_LUKS_OFF_CIPHER_MODE, 0, 0, "xts-plain64",
     "Algorithm 'aes' with key size 8 bytes not supported"},
    {QCOW2_LUKS_OFF_CIPHER_MODE, 0, 0, "cbc-", "IV generator '' not supported"},
    {QCOW2_LUKS_OFF_CIPHER_MODE, 0, 0, "cbc-essiv",
     "Missing IV generator hash specification"},
    {QCOW2_LUKS_OFF_CIPHER_NAME, 0, 0, "foo",
     "Algorithm 'foo' with key size 16 bytes not supported"},
    {QCOW2_LUKS_OFF_CIPHER_NAME, 0, 0, "cast5",
     "Cipher cast5-128 not supported with essiv"},
    {QCOW2_LUKS_OFF_HASH_SPEC, 0, 0, "SHA1", "Hash algorithm 'SHA1' not supported"},
    {QCOW2_LUKS_OFF_KEY_BYTES, 4, 0, NULL,
     "Algorithm 'aes' with key size 0 bytes not supported"},
};

static void test_faults(void **state)
{
    (void)state;
    for (size_t i = 0; i < G_N_ELEMENTS(faults); i++) {
        const Fault *f = &faults[i];
        uint8_t buf[QCOW2_LUKS_HEADER_SIZE];
        Qcow2Luks l;

        make_header(buf);
        if (f->name) {
            put_name(buf, f->off, f->name);
        } else if (f->width == 2) {
            store_be16(buf + f->off, (uint16_t)f->value);
        } else {
            store_be32(buf + f->off, f->value);
        }
        print_message("fault %zu: %s\n", i, f->want);
        expect_error(qcow2_luks_decode(buf, sizeof(buf), &l), f->want);
    }
}

/* Order (invariant 1): stripes before the iterations of the same slot;
 * the master key before the slots; the mode's hash before the cipher. */
static void test_order(void **state)
{
    uint8_t buf[QCOW2_LUKS_HEADER_SIZE];
    Qcow2Luks l;

    (void)state;
    make_header(buf);
    store_be32(slot(buf, 0, QCOW2_LUKS_SLOT_OFF_ITERATIONS), 0);
    store_be32(slot(buf, 0, QCOW2_LUKS_SLOT_OFF_STRIPES), 1);
    expect_error(qcow2_luks_decode(buf, sizeof(buf), &l),
                 "Keyslot 0 is corrupted (stripes 1 != 4000)");
    store_be32(buf + QCOW2_LUKS_OFF_MK_ITERATIONS, 0);
    expect_error(qcow2_luks_decode(buf, sizeof(buf), &l),
                 "LUKS key iteration count is zero");
    make_header(buf);
    put_name(buf, QCOW2_LUKS_OFF_CIPHER_NAME, "foo");
    put_name(buf, QCOW2_LUKS_OFF_CIPHER_MODE, "cbc-essiv:xx");
    expect_error(qcow2_luks_decode(buf, sizeof(buf), &l),
                 "Hash algorithm 'xx' not supported");
    put_name(buf, QCOW2_LUKS_OFF_CIPHER_MODE, "cbc-essiv:sha256");
    put_name(buf, QCOW2_LUKS_OFF_HASH_SPEC, "bar");
    expect_error(qcow2_luks_decode(buf, sizeof(buf), &l),
                 "Algorithm 'foo' with key size 16 bytes not supported");
}

/* An image with crypt_method 1 (QEMU's old AES): opened for metadata only. */
static void test_metadata_only(void **state)
{
    g_autofree char *path = tu_fresh("aes");
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    QimgImage *img;
    QimgInfo *info;
    QimgExtent ext;
    uint8_t buf[512], be[4];
    FILE *f;

    (void)state;
    co.format = "qcow2";
    co.size = 1 << 20;
    co.size_set = true;
    assert_true(qimg_image_create(path, &co, &err));
    f = fopen(path, "r+b");
    assert_non_null(f);
    store_be32(be, QCOW2_CRYPT_AES);
    assert_int_equal(fseek(f, QCOW2_HDR_CRYPT_METHOD, SEEK_SET), 0);
    assert_int_equal(fwrite(be, 1, sizeof(be), f), sizeof(be));
    assert_int_equal(fclose(f), 0);

    /* without no_io (and read-write with it): qemu-img's refusal */
    oo.read_only = true;
    assert_null(qimg_image_open(path, &oo, &err));
    assert_non_null(strstr(err->message, "Parameter 'encrypt.key-secret' is required"));
    g_clear_error(&err);
    oo.read_only = false;
    oo.no_io = true;
    assert_null(qimg_image_open(path, &oo, &err));
    assert_non_null(strstr(err->message, "Parameter 'encrypt.key-secret' is required"));
    g_clear_error(&err);

    oo.read_only = true;
    img = qimg_image_open(path, &oo, &err);
    assert_non_null(img);
    info = qimg_image_get_info(img, &err);
    assert_non_null(info);
    assert_true(info->encrypted);
    assert_non_null(info->encrypt);
    assert_string_equal(info->encrypt->format, "aes");
    assert_null(info->encrypt->cipher_alg);
    qimg_info_free(info);

    /* header.c invariant 7: a key-secret is looked up for a data open only */
    {
        g_autofree char *name =
            g_strdup_printf("driver=qcow2,file.filename=%s,encrypt.key-secret=s0", path);
        g_autoptr(GHashTable) secrets = g_hash_table_new(g_str_hash, g_str_equal);
        QimgOpenOptions ko = QIMG_OPEN_OPTIONS_INIT;
        QimgImage *k;

        ko.read_only = true;
        ko.image_opts = true;
        assert_null(qimg_image_open(name, &ko, &err));
        assert_non_null(strstr(err->message, "No secret with id 's0'"));
        g_clear_error(&err);
        g_hash_table_add(secrets, (gpointer) "s0");
        ko.secrets = secrets;
        assert_null(qimg_image_open(name, &ko, &err));
        assert_non_null(strstr(err->message, "qimg has no encryption: cannot decrypt the "
                                             "image (format aes) with secret 's0'"));
        g_clear_error(&err);
        ko.no_io = true;
        k = qimg_image_open(name, &ko, &err);
        assert_non_null(k);
        qimg_image_free(k);
    }

    /* qcow2.c invariant 10: no guest data, no mapping */
    assert_false(qimg_image_pread(img, 0, buf, sizeof(buf), &err));
    assert_non_null(strstr(err->message, "qimg has no encryption"));
    g_clear_error(&err);
    assert_false(qimg_image_block_status(img, 0, 512, &ext, &err));
    assert_non_null(strstr(err->message, "qimg has no encryption"));
    g_clear_error(&err);
    qimg_image_free(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_metadata_only),
    };
    return tu_run_group_tests("luks-codec", tests);
}
