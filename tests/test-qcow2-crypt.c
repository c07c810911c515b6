/*
 * tests/test-qcow2-crypt.c: encrypted qcow2 images through the public API
 * (qcow2/crypt.c, qcow2.c invariant 10, header.c invariant 7):
 *
 *  - an image made with encrypt.format=luks and a secret from
 *    qimg_secret_new() (QimgCreateOptions.secret_values) opens with its
 *    key (QimgOpenOptions.key_secret or a name's encrypt.key-secret);
 *    writes of every alignment read back, through the slow path and the
 *    lock-free one, and none of the written bytes is in the file
 *    (crypt.c invariants 1, 4; write.c invariant 15);
 *  - the metadata-only open (read-only, no_io) has no key and refuses
 *    every data transfer; block status reports no host offsets (read.c
 *    invariant 5);
 *  - without a key-secret, with an unknown one, with ids but no values
 *    (a 0.8 caller), with a wrong passphrase: QEMU's messages;
 *  - the old AES method (crypt_method 1, patched in): read and written with
 *    AES-128-CBC keyed by the passphrase's first 16 bytes, IVs from the
 *    guest sector (checked against openssl);
 *  - a compressed write to an encrypted image is refused (crypt.c
 *    invariant 6);
 *  - the asynchronous API's io_uring engine takes reads and rewrites of
 *    both methods (crypt.c invariant 3, api/aio.c invariant 12): what
 *    qemu-io (LUKS) or qimg's own sync path (AES, whose IVs are the guest
 *    sector's while the host offset differs) wrote reads back through the
 *    ring, ring writes read back through qemu-io and the sync path, the
 *    caller's buffer is left as it was, and the file holds no plaintext.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/endian.h"
#include "qcow2/format.h"
#include "test-util.h"

#include "test-aio-util.h"

#include <qimg/qimg.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

static GHashTable *secrets(void)
{
    GHashTable *t = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                          (GDestroyNotify)g_bytes_unref);

    g_hash_table_insert(t, (gpointer) "s0", qimg_secret_new("hunter2", 7));
    g_hash_table_insert(t, (gpointer) "bad", qimg_secret_new("hunter3", 7));
    return t;
}

static void expect_open_error(const char *path, QimgOpenOptions *oo, const char *want)
{
    g_autoptr(GError) err = NULL;

    assert_null(qimg_image_open(path, oo, &err));
    assert_non_null(err);
    if (!strstr(err->message, want)) {
        fail_msg("message '%s', want '%s'", err->message, want);
    }
}

static void make_luks(const char *path, GHashTable *sec)
{
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    g_autoptr(GHashTable) o = g_hash_table_new(g_str_hash, g_str_equal);
    g_autoptr(GError) err = NULL;

    g_hash_table_insert(o, "encrypt.format", "luks");
    g_hash_table_insert(o, "encrypt.key-secret", "s0");
    g_hash_table_insert(o, "encrypt.iter-time", "10");
    co.format = "qcow2";
    co.size = 4 << 20;
    co.size_set = true;
    co.options = o;
    co.secret_values = sec;
    assert_true(qimg_image_create(path, &co, &err));
}

static bool file_contains(const char *path, uint8_t byte, size_t run)
{
    g_autofree char *data = NULL;
    gsize len;
    size_t n = 0;

    assert_true(g_file_get_contents(path, &data, &len, NULL));
    for (gsize i = 0; i < len; i++) {
        n = (uint8_t)data[i] == byte ? n + 1 : 0;
        if (n >= run) {
            return true;
        }
    }
    return false;
}

static void test_luks(void **state)
{
    g_autofree char *path = tu_fresh("luks.qcow2");
    g_autoptr(GHashTable) sec = secrets();
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    uint8_t buf[65536], back[131072];
    QimgImage *img;
    QimgExtent ext;

    (void)state;
    make_luks(path, sec);
    oo.secret_values = sec;
    oo.key_secret = "s0";
    img = qimg_image_open(path, &oo, &err);
    assert_non_null(img);
    /* every alignment: whole clusters, bytes, across sectors and clusters */
    memset(buf, 0x5a, sizeof(buf));
    assert_true(qimg_image_pwrite(img, 0, buf, 65536, &err));
    assert_true(qimg_image_pwrite(img, 65536, buf, 65536, &err)); /* allocating */
    memset(buf, 0x11, 3);
    assert_true(qimg_image_pwrite(img, 1000, buf, 3, &err));    /* fast path: partial */
    assert_true(qimg_image_pwrite(img, 510, buf, 3, &err));     /* across a sector */
    assert_true(qimg_image_pwrite(img, 65535, buf, 2, &err));   /* across clusters */
    assert_true(qimg_image_pwrite(img, 1 << 20, buf, 1, &err)); /* new cluster, 1 byte */
    assert_true(qimg_image_pread(img, 0, back, 131072, &err));
    for (size_t i = 0; i < 131072; i++) {
        bool w =
            (i >= 1000 && i < 1003) || (i >= 510 && i < 513) || (i >= 65535 && i < 65537);
        if (back[i] != (w ? 0x11 : 0x5a)) {
            fail_msg("byte %zu is 0x%02x", i, back[i]);
        }
    }
    assert_true(qimg_image_pread(img, (1 << 20) - 1, back, 3, &err));
    assert_int_equal(back[0], 0);
    assert_int_equal(back[1], 0x11);
    assert_int_equal(back[2], 0);
    /* read.c invariant 5: no host offsets */
    assert_true(qimg_image_block_status(img, 0, 65536, &ext, &err));
    assert_true(ext.flags & QIMG_STATUS_DATA);
    assert_false(ext.flags & QIMG_STATUS_OFFSET_VALID);
    /* crypt.c invariant 6 */
    assert_false(qimg_image_pwrite_compressed(img, 2 << 20, buf, 65536, &err));
    assert_non_null(strstr(err->message, "Compression and encryption"));
    g_clear_error(&err);
    assert_true(qimg_image_close(img, &err));
    assert_false(file_contains(path, 0x5a, 64));

    /* reopened, with the key in the name instead */
    g_autofree char *name =
        g_strdup_printf("driver=qcow2,file.filename=%s,encrypt.key-secret=s0", path);
    QimgOpenOptions no = QIMG_OPEN_OPTIONS_INIT;
    no.image_opts = true;
    no.secret_values = sec;
    no.read_only = true;
    img = qimg_image_open(name, &no, &err);
    assert_non_null(img);
    assert_true(qimg_image_pread(img, 60000, back, 10000, &err));
    assert_int_equal(back[0], 0x5a);
    assert_int_equal(back[5535], 0x11);
    qimg_image_free(img);

    /* metadata only: no key, no data (crypt.c invariant 2) */
    QimgOpenOptions mo = QIMG_OPEN_OPTIONS_INIT;
    mo.read_only = true;
    mo.no_io = true;
    img = qimg_image_open(path, &mo, &err);
    assert_non_null(img);
    QimgInfo *info = qimg_image_get_info(img, &err);
    assert_true(info->encrypted);
    assert_string_equal(info->encrypt->format, "luks");
    qimg_info_free(info);
    assert_false(qimg_image_pread(img, 0, back, 512, &err));
    assert_non_null(strstr(err->message, "opened without its key"));
    g_clear_error(&err);
    qimg_image_free(img);

    /* header.c invariant 7 and the passphrase */
    QimgOpenOptions eo = QIMG_OPEN_OPTIONS_INIT;
    eo.read_only = true;
    expect_open_error(path, &eo, "Parameter 'encrypt.key-secret' is required for cipher");
    eo.key_secret = "nope";
    eo.secret_values = sec;
    expect_open_error(path, &eo, "No secret with id 'nope'");
    eo.key_secret = "bad";
    expect_open_error(path, &eo, "Invalid password, cannot unlock any keyslot");
    /* a 0.8 caller: ids, no values */
    g_autoptr(GHashTable) ids = g_hash_table_new(g_str_hash, g_str_equal);
    g_hash_table_add(ids, (gpointer) "s0");
    eo.secret_values = NULL;
    eo.secrets = ids;
    eo.key_secret = "s0";
    expect_open_error(path, &eo, "The value of secret 's0' is not available");
}

/* crypt_method 1 patched into a plain image: QEMU's old AES method. */
static void test_aes(void **state)
{
    g_autofree char *path = tu_fresh("aes.qcow2");
    g_autoptr(GHashTable) sec = secrets();
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    uint8_t buf[512], be[4];
    QimgImage *img;
    QimgExtent ext;
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

    oo.secret_values = sec;
    oo.key_secret = "s0";
    img = qimg_image_open(path, &oo, &err);
    assert_non_null(img);
    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (uint8_t)i;
    }
    /* guest sector 7: its IV is the guest sector's, wherever the cluster
     * lies in the file (qemu-img's qcow format) */
    assert_true(qimg_image_pwrite(img, 7 * 512, buf, sizeof(buf), &err));
    assert_true(qimg_image_block_status(img, 0, 4096, &ext, &err));
    assert_true(qimg_image_close(img, &err));
    /* openssl enc -aes-128-cbc -K <"hunter2" zero padded> -iv <le64(7)> of
     * bytes 0..255 twice: its SHA-256 */
    tu_run(
        "python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256))*2)' >aes.pt");
    tu_run("openssl enc -aes-128-cbc -nopad -K 68756e74657232000000000000000000 "
           "-iv 07000000000000000000000000000000 -in aes.pt -out aes.ct");
    tu_run("python3 -c 'import sys; d = open(sys.argv[1], \"rb\").read(); "
           "c = open(\"aes.ct\", \"rb\").read(); i = d.find(c); "
           "sys.exit(i < 0 or i %% 512 != 0)' '%s'",
           path);
    oo.read_only = true;
    img = qimg_image_open(path, &oo, &err);
    assert_non_null(img);
    memset(buf, 0, sizeof(buf));
    assert_true(qimg_image_pread(img, 7 * 512, buf, sizeof(buf), &err));
    for (size_t i = 0; i < sizeof(buf); i++) {
        assert_int_equal(buf[i], (uint8_t)i);
    }
    qimg_image_free(img);
}

/* ---- the io_uring engine (crypt.c invariant 3, api/aio.c invariant 12) ---- */

/* Cluster c of the first 64 holds 0x11 (written by the caller); read the
 * third 4 KiB of each through the ring, rewrite the second with 0x22. */
static void ring_rewrite(const char *path, QimgOpenOptions *oo)
{
    g_autoptr(GError) err = NULL;
    QimgAioOptions ao = QIMG_AIO_OPTIONS_INIT;
    QimgAioStats st = QIMG_AIO_STATS_INIT;
    uint8_t *buf = aligned_buf(4096);
    QimgImage *img;

    oo->cache = QIMG_CACHE_NONE;
    img = qimg_image_open(path, oo, &err);
    assert_non_null(img);
    ao.engine = QIMG_AIO_ENGINE_IO_URING;
    assert_true(qimg_image_aio_setup(img, &ao, &err));
    for (uint64_t c = 0; c < 64; c++) {
        memset(buf, 0, 4096);
        aio_one_4k(img, false, c * 65536 + 8192, buf);
        for (int i = 0; i < 4096; i++) {
            if (buf[i] != 0x11) {
                fail_msg("cluster %" PRIu64 " byte %d reads 0x%02x", c, i, buf[i]);
            }
        }
    }
    for (uint64_t c = 63; c < 64; c--) {
        memset(buf, 0x22, 4096);
        aio_one_4k(img, true, c * 65536 + 4096, buf);
        for (int i = 0; i < 4096; i++) {
            assert_int_equal(buf[i], 0x22); /* the caller's buffer: as it was */
        }
    }
    assert_true(qimg_image_aio_get_stats(img, &st, &err));
    /* the first read loads the L2 table on the pool, the first write
     * switches fast writes on (fastmap.c invariant 3); the rest: the ring */
    assert_int_equal(st.ring_reads, 63);
    assert_int_equal(st.ring_writes, 63);
    assert_int_equal(st.ring_retries, 0);
    assert_true(qimg_image_close(img, &err));
    free(buf);
    assert_false(file_contains(path, 0x22, 64));
    assert_false(file_contains(path, 0x11, 64));
}

/* The sync path (no ring: writeback) sees what ring_rewrite wrote. */
static void check_rewritten(const char *path, QimgOpenOptions *oo)
{
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *back = g_malloc(65536);
    QimgImage *img;

    oo->cache = QIMG_CACHE_WRITEBACK;
    oo->read_only = true;
    img = qimg_image_open(path, oo, &err);
    assert_non_null(img);
    for (uint64_t c = 0; c < 64; c++) {
        assert_true(qimg_image_pread(img, c * 65536, back, 65536, &err));
        for (size_t i = 0; i < 65536; i++) {
            uint8_t want = i >= 4096 && i < 8192 ? 0x22 : 0x11;
            if (back[i] != want) {
                fail_msg("cluster %" PRIu64 " byte %zu is 0x%02x", c, i, back[i]);
            }
        }
    }
    qimg_image_free(img);
}

static void test_ring_luks(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    g_autofree char *path = tu_fresh("ring-luks.qcow2");
    g_autoptr(GHashTable) sec = secrets();
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    const char *obj = "--object secret,id=s0,data=hunter2";
    g_autofree char *name =
        g_strdup_printf("driver=qcow2,file.filename=%s,encrypt.key-secret=s0", path);

    (void)state;
    /* qimg creates it: qemu-img's PBKDF2 benchmark fails now and then on a
     * busy machine ("Unable to get accurate CPU usage") */
    make_luks(path, sec);
    tu_run("qemu-io %s --image-opts -c 'write -q -P 0x11 0 4M' '%s'", obj, name);
    oo.secret_values = sec;
    oo.key_secret = "s0";
    ring_rewrite(path, &oo);
    check_rewritten(path, &oo);
    for (uint64_t c = 0; c < 64; c += 9) {
        tu_run("qemu-io %s --image-opts -c 'read -q -P 0x11 %" PRIu64 " 4k' "
               "-c 'read -q -P 0x22 %" PRIu64 " 4k' -c 'read -q -P 0x11 %" PRIu64
               " 56k' '%s'",
               obj, c * 65536, c * 65536 + 4096, c * 65536 + 8192, name);
    }
    tu_run("qemu-img check -q %s --image-opts '%s'", obj, name);
}

static void test_ring_aes(void **state)
{
    g_autofree char *path = tu_fresh("ring-aes.qcow2");
    g_autoptr(GHashTable) sec = secrets();
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *buf = g_malloc(4 << 20);
    uint8_t be[4];
    QimgImage *img;
    FILE *f;

    (void)state;
    co.format = "qcow2";
    co.size = 4 << 20;
    co.size_set = true;
    assert_true(qimg_image_create(path, &co, &err));
    f = fopen(path, "r+b");
    assert_non_null(f);
    store_be32(be, QCOW2_CRYPT_AES);
    assert_int_equal(fseek(f, QCOW2_HDR_CRYPT_METHOD, SEEK_SET), 0);
    assert_int_equal(fwrite(be, 1, sizeof(be), f), sizeof(be));
    assert_int_equal(fclose(f), 0);
    oo.secret_values = sec;
    oo.key_secret = "s0";
    img = qimg_image_open(path, &oo, &err);
    assert_non_null(img);
    memset(buf, 0x11, 4 << 20);
    /* the sync path; the IVs are the guest sector's, and no cluster lies at
     * its guest offset in the file (the header is at 0) */
    assert_true(qimg_image_pwrite(img, 0, buf, 4 << 20, &err));
    assert_true(qimg_image_close(img, &err));
    ring_rewrite(path, &oo);
    check_rewritten(path, &oo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_luks),
        cmocka_unit_test(test_aes),
        cmocka_unit_test(test_ring_luks),
        cmocka_unit_test(test_ring_aes),
    };
    return tu_run_group_tests("qcow2-crypt", tests);
}
