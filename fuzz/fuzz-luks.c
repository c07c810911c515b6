/*
 * fuzz/fuzz-luks.c: libFuzzer target for the LUKS header and key slots
 * (crypto/luks-codec.c, crypto/luks.c) and the luks format driver
 * (luks/luks.c).
 *
 * Each input is the start of a LUKS volume: the 592-byte header, then key
 * material (bytes past the input read as zeros, as past the end of a
 * file).  Then: decode it; if it decodes, try the passphrase "fuzz" on
 * every slot (the AF merge, the slot decryption, the digest) with an
 * iteration limit of 2000 (luks.c invariant 5 keeps hostile counts from
 * spinning); the info record; and the same bytes opened as a luks image
 * through the public API, read where it unlocks.  Any crash, sanitizer
 * report, leak or hang is a bug (DESIGN.md on-disk rule 4).
 *
 * fuzz/seeds-luks holds its seeds (scripts/run-tests.sh): headers
 * qimg made with iter-time=0 (1000 iterations) and the passphrase "fuzz",
 * one with all of slot 0's material, so that unlocking succeeds.
 */
#include "api/api.h"
#include "block/block.h"
#include "crypto/block.h"
#include "crypto/luks.h"
#include "crypto/secmem.h"
#include "fuzz/fuzz-util.h"

#include <qimg/qimg.h>

#include <string.h>

#define MAX_ITERATIONS 2000u

typedef struct Input {
    const uint8_t *data;
    size_t size;
} Input;

static int in_read(void *opaque, uint64_t off, void *buf, size_t len)
{
    const Input *in = opaque;
    size_t n = off < in->size ? (size_t)MIN((uint64_t)len, in->size - off) : 0;

    memset(buf, 0, len);
    if (n) {
        memcpy(buf, in->data + off, n);
    }
    return 0;
}

static int in_write(void *opaque, uint64_t off, const void *buf, size_t len)
{
    return -EROFS; /* never called: nothing here writes */
}

static int in_flush(void *opaque)
{
    return 0;
}

static void crypto_level(const uint8_t *data, size_t size)
{
    Input in = {data, size};
    CryptoLuksIO io = {in_read, in_write, in_flush, &in};
    uint8_t hdr[CRYPTO_LUKS_HEADER_SIZE] = {0};
    CryptoLuksHeader h;
    BlkEncryptInfo info;
    uint8_t *mk = NULL;

    memcpy(hdr, data, MIN(size, sizeof(hdr)));
    if (crypto_luks_decode(hdr, sizeof(hdr), &h) < 0) {
        blk_error_clear();
        return;
    }
    crypto_luks_info(&h, &info);
    if (crypto_luks_supported(&h) < 0) {
        blk_error_clear();
        return;
    }
    if (crypto_luks_unlock(&h, &io, (const uint8_t *)"fuzz", 4, MAX_ITERATIONS, &mk) ==
        0) {
        CryptoBlock *b = crypto_block_new(&h.spec, mk, h.key_bytes);
        crypto_block_free(b);
    }
    blk_error_clear();
    crypto_secure_free(mk);
}

static void driver_level(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_scratch_dir("luks");
    g_autofree char *path = g_build_filename(dir, "image.luks", NULL);
    g_autoptr(GHashTable) secrets = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                                          (GDestroyNotify)g_bytes_unref);
    QimgOpenOptions o = QIMG_OPEN_OPTIONS_INIT;
    GError *err = NULL;
    QimgImage *img;

    if (!g_file_set_contents(path, (const char *)data, (gssize)size, NULL)) {
        abort();
    }
    g_hash_table_insert(secrets, (gpointer) "k", qimg_secret_new("fuzz", 4));
    o.format = "luks";
    o.read_only = true;
    o.secret_values = secrets;
    o.key_secret = "k";
    o.luks_max_iterations = MAX_ITERATIONS;
    img = qimg_image_open(path, &o, &err);
    if (!img) {
        g_clear_error(&err);
        return;
    }
    uint8_t buf[4096];
    uint64_t n = MIN(qimg_image_size(img), (uint64_t)sizeof(buf));
    if (n && !qimg_image_pread(img, 0, buf, (size_t)n, &err)) {
        g_clear_error(&err);
    }
    QimgInfo *info = qimg_image_get_info(img, &err);
    qimg_info_free(info);
    g_clear_error(&err);
    qimg_image_free(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    crypto_level(data, size);
    driver_level(data, size);
    return 0;
}
