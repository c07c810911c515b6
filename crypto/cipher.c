/*
 * crypto/cipher.c: the algorithms LUKS names, and the sector cipher.
 *
 * Owns: QEMU's names for the ciphers, modes and IV generators a LUKS
 * header may carry (shared by the header codec), the ESSIV cipher rule, and
 * en/decryption of 512-byte sectors with an IV per sector -- plain (the
 * sector number, 32 bits, little-endian), plain64 (64 bits) or ESSIV (the
 * sector number encrypted with a key that is the hash of the data key) --
 * on GnuTLS's AES in CBC and XTS modes.
 *
 * Invariants (cited as "cipher.c invariant N"):
 *  1. Every block cipher operation is GnuTLS's (gnutls_cipher_*, GnuTLS
 *     loaded by the first handle: gnutls-lib.h invariant 3): AES-128,
 *     -192 and -256 in CBC mode, AES-128 and -256 in XTS mode (what GnuTLS
 *     offers).  ESSIV's one-block encryption is GnuTLS's CBC with a zero IV
 *     (one block of CBC is the block cipher).  Anything else a LUKS header
 *     can name (Twofish, Serpent, CAST5, ECB and CTR modes, AES-192 in XTS
 *     mode) is refused by crypto_spec_supported() with a message naming
 *     it; qimg has no cipher or mode of its own.
 *  2. A CryptoCipher is shared by every thread of an image: GnuTLS handles
 *     carry IV state, so each request takes a handle pair (data, ESSIV)
 *     from the cipher's free list, or makes one, and puts it back after its
 *     last sector; handles are freed (and wiped by GnuTLS) with the cipher.
 *  3. The keys (data key, ESSIV key) live in secure memory (secmem.c) for
 *     the cipher's lifetime, to key new handles; the ESSIV key is the
 *     digest of the data key and is wiped likewise.
 *  4. Each sector is processed with the IV of its own number, so any run of
 *     whole sectors can be processed alone, in any order, in parallel.
 */
#include "crypto/cipher.h"
#include "aio/mutex.h"

#include "block/block.h"
#include "block/endian.h"
#include "crypto/gnutls-lib.h"
#include "crypto/secmem.h"

#include <errno.h>
#include <string.h>

#define AES_BLOCK 16u
#define GT crypto_gnutls

typedef struct AlgInfo {
    const char *name, *family;
    size_t key_len;
} AlgInfo;

static const AlgInfo algs[CRYPTO_CIPHER__MAX] = {
    [CRYPTO_CIPHER_AES_128] = {"aes-128", "aes", 16},
    [CRYPTO_CIPHER_AES_192] = {"aes-192", "aes", 24},
    [CRYPTO_CIPHER_AES_256] = {"aes-256", "aes", 32},
    [CRYPTO_CIPHER_CAST5_128] = {"cast5-128", "cast5", 16},
    [CRYPTO_CIPHER_SERPENT_128] = {"serpent-128", "serpent", 16},
    [CRYPTO_CIPHER_SERPENT_192] = {"serpent-192", "serpent", 24},
    [CRYPTO_CIPHER_SERPENT_256] = {"serpent-256", "serpent", 32},
    [CRYPTO_CIPHER_TWOFISH_128] = {"twofish-128", "twofish", 16},
    [CRYPTO_CIPHER_TWOFISH_192] = {"twofish-192", "twofish", 24},
    [CRYPTO_CIPHER_TWOFISH_256] = {"twofish-256", "twofish", 32},
};

static const char *const mode_names[CRYPTO_MODE__MAX] = {"ecb", "cbc", "xts", "ctr"};
static const char *const ivgen_names[CRYPTO_IVGEN__MAX] = {"plain", "plain64", "essiv"};

const char *crypto_cipher_alg_name(CryptoCipherAlg a)
{
    return algs[a].name;
}

const char *crypto_cipher_family(CryptoCipherAlg a)
{
    return algs[a].family;
}

size_t crypto_cipher_alg_key_len(CryptoCipherAlg a)
{
    return algs[a].key_len;
}

int crypto_cipher_alg_lookup(const char *name)
{
    for (int i = 0; i < CRYPTO_CIPHER__MAX; i++) {
        if (strcmp(algs[i].name, name) == 0) {
            return i;
        }
    }
    return -1;
}

int crypto_cipher_alg_find(const char *family, size_t key_len)
{
    for (int i = 0; i < CRYPTO_CIPHER__MAX; i++) {
        if (strcmp(algs[i].family, family) == 0 && algs[i].key_len == key_len) {
            return i;
        }
    }
    return -1;
}

static int name_lookup(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            return i;
        }
    }
    return -1;
}

const char *crypto_mode_name(CryptoMode m)
{
    return mode_names[m];
}

int crypto_mode_lookup(const char *name)
{
    return name_lookup(mode_names, CRYPTO_MODE__MAX, name);
}

const char *crypto_ivgen_name(CryptoIvgen i)
{
    return ivgen_names[i];
}

int crypto_ivgen_lookup(const char *name)
{
    return name_lookup(ivgen_names, CRYPTO_IVGEN__MAX, name);
}

int crypto_essiv_cipher(CryptoCipherAlg alg, CryptoHash hash, CryptoCipherAlg *out)
{
    size_t dlen = crypto_hash_len(hash);
    const char *family = algs[alg].family;
    int found;

    if (dlen == algs[alg].key_len) {
        *out = alg;
        return 0;
    }
    if (strcmp(family, "cast5") == 0) {
        return blk_error(ENOTSUP, "Cipher %s not supported with essiv", algs[alg].name);
    }
    found = crypto_cipher_alg_find(family, dlen);
    if (found < 0) {
        return blk_error(ENOTSUP, "No %s cipher with key size %zu available",
                         strcmp(family, "aes") == 0       ? "AES"
                         : strcmp(family, "serpent") == 0 ? "Serpent"
                                                          : "Twofish",
                         dlen);
    }
    *out = (CryptoCipherAlg)found;
    return 0;
}

size_t crypto_spec_key_len(const CryptoSpec *spec)
{
    return algs[spec->alg].key_len * (spec->mode == CRYPTO_MODE_XTS ? 2 : 1);
}

/* GnuTLS's algorithm for an AES key of key_len bytes in mode; 0 if none. */
static gnutls_cipher_algorithm_t gnutls_alg(size_t key_len, CryptoMode mode)
{
    if (mode == CRYPTO_MODE_XTS) {
        return key_len == 16   ? GNUTLS_CIPHER_AES_128_XTS
               : key_len == 32 ? GNUTLS_CIPHER_AES_256_XTS
                               : GNUTLS_CIPHER_UNKNOWN;
    }
    if (mode == CRYPTO_MODE_CBC) {
        return key_len == 16   ? GNUTLS_CIPHER_AES_128_CBC
               : key_len == 24 ? GNUTLS_CIPHER_AES_192_CBC
               : key_len == 32 ? GNUTLS_CIPHER_AES_256_CBC
                               : GNUTLS_CIPHER_UNKNOWN;
    }
    return GNUTLS_CIPHER_UNKNOWN;
}

int crypto_spec_supported(const CryptoSpec *spec)
{
    const AlgInfo *a = &algs[spec->alg];

    /* invariant 1 */
    if (strcmp(a->family, "aes") != 0) {
        return blk_error(ENOTSUP,
                         "Cipher '%s' is not supported by qimg (GnuTLS offers AES only)",
                         a->name);
    }
    if (gnutls_alg(a->key_len, spec->mode) == GNUTLS_CIPHER_UNKNOWN) {
        return blk_error(ENOTSUP,
                         "Cipher mode '%s' with '%s' is not supported by qimg (GnuTLS "
                         "offers AES in CBC mode and AES-128/256 in XTS mode)",
                         mode_names[spec->mode], a->name);
    }
    return 0;
}

typedef struct Handles {
    gnutls_cipher_hd_t data;
    gnutls_cipher_hd_t essiv; /* NULL unless ESSIV */
    struct Handles *next;
} Handles;

struct CryptoCipher {
    CryptoSpec spec;
    gnutls_cipher_algorithm_t data_alg, essiv_alg;
    uint8_t *key; /* secure (invariant 3) */
    size_t key_len;
    uint8_t *essiv_key; /* secure, or NULL */
    size_t essiv_key_len;
    GMutex lock;
    Handles *free; /* [lock] invariant 2 */
};

static int handle_new(gnutls_cipher_hd_t *h, gnutls_cipher_algorithm_t alg,
                      const uint8_t *key, size_t len)
{
    gnutls_datum_t k = {.data = (unsigned char *)key, .size = (unsigned)len};
    int rc = crypto_gnutls_load();

    if (rc < 0) {
        return rc;
    }
    rc = GT.gnutls_cipher_init(h, alg, &k, NULL);
    if (rc < 0) {
        *h = NULL;
        return blk_error(EINVAL, "Cannot set up cipher %s: %s",
                         GT.gnutls_cipher_get_name(alg), GT.gnutls_strerror(rc));
    }
    return 0;
}

static void handles_free(Handles *h)
{
    if (h->data) {
        GT.gnutls_cipher_deinit(h->data);
    }
    if (h->essiv) {
        GT.gnutls_cipher_deinit(h->essiv);
    }
    g_free(h);
}

/* invariant 2 */
static Handles *handles_get(CryptoCipher *c)
{
    Handles *h;

    mutex_lock(&c->lock);
    h = c->free;
    if (h) {
        c->free = h->next;
    }
    mutex_unlock(&c->lock);
    if (h) {
        return h;
    }
    h = g_new0(Handles, 1);
    if (handle_new(&h->data, c->data_alg, c->key, c->key_len) < 0 ||
        (c->essiv_key &&
         handle_new(&h->essiv, c->essiv_alg, c->essiv_key, c->essiv_key_len) < 0)) {
        handles_free(h);
        return NULL;
    }
    return h;
}

static void handles_put(CryptoCipher *c, Handles *h)
{
    mutex_lock(&c->lock);
    h->next = c->free;
    c->free = h;
    mutex_unlock(&c->lock);
}

CryptoCipher *crypto_cipher_new(const CryptoSpec *spec, const uint8_t *key, size_t len)
{
    CryptoCipher *c;
    Handles *h;

    if (crypto_spec_supported(spec) < 0) {
        return NULL;
    }
    g_assert(len == crypto_spec_key_len(spec));
    c = g_new0(CryptoCipher, 1);
    g_mutex_init(&c->lock);
    c->spec = *spec;
    c->data_alg = gnutls_alg(algs[spec->alg].key_len, spec->mode);
    c->key = crypto_secure_dup(key, len);
    c->key_len = len;
    if (spec->ivgen == CRYPTO_IVGEN_ESSIV) {
        CryptoCipherAlg ea;
        uint8_t digest[CRYPTO_HASH_MAX_LEN];
        if (crypto_essiv_cipher(spec->alg, spec->ivgen_hash, &ea) < 0 ||
            crypto_hash2(spec->ivgen_hash, key, len, NULL, 0, digest) < 0) {
            crypto_cipher_free(c);
            return NULL;
        }
        c->essiv_alg = gnutls_alg(algs[ea].key_len, CRYPTO_MODE_CBC);
        c->essiv_key_len = crypto_hash_len(spec->ivgen_hash);
        c->essiv_key = crypto_secure_dup(digest, c->essiv_key_len);
        crypto_wipe(digest, sizeof(digest)); /* secmem.c invariant 2 */
        /* an AES data cipher (invariant 1) gives an AES ESSIV cipher */
        g_assert(c->essiv_alg != GNUTLS_CIPHER_UNKNOWN);
    }
    /* one handle now, so a bad key fails here and not on the first request */
    h = handles_get(c);
    if (!h) {
        crypto_cipher_free(c);
        return NULL;
    }
    handles_put(c, h);
    return c;
}

void crypto_cipher_free(CryptoCipher *c)
{
    if (!c) {
        return;
    }
    while (c->free) {
        Handles *h = c->free;
        c->free = h->next;
        handles_free(h);
    }
    crypto_secure_free(c->key);
    crypto_secure_free(c->essiv_key);
    g_mutex_clear(&c->lock);
    g_free(c);
}

/* The IV of sector n (AES: 16 bytes). */
static int make_iv(const CryptoCipher *c, const Handles *h, uint64_t n,
                   uint8_t iv[AES_BLOCK])
{
    static const uint8_t zero[AES_BLOCK];
    int rc;

    memset(iv, 0, AES_BLOCK);
    switch (c->spec.ivgen) {
    case CRYPTO_IVGEN_PLAIN:
        store_le32(iv, (uint32_t)n);
        return 0;
    case CRYPTO_IVGEN_PLAIN64:
        store_le64(iv, n);
        return 0;
    case CRYPTO_IVGEN_ESSIV:
        store_le64(iv, n);
        GT.gnutls_cipher_set_iv(h->essiv, (void *)zero, AES_BLOCK);
        rc = GT.gnutls_cipher_encrypt(h->essiv, iv, AES_BLOCK);
        return rc < 0 ? blk_error(EIO, "ESSIV failed: %s", GT.gnutls_strerror(rc)) : 0;
    case CRYPTO_IVGEN__MAX:
        break;
    }
    g_assert_not_reached();
}

static int process(CryptoCipher *c, uint64_t sector, uint8_t *buf, size_t len,
                   bool encrypt)
{
    Handles *h;
    int ret = 0;

    g_assert(len % CRYPTO_SECTOR_SIZE == 0);
    h = handles_get(c);
    if (!h) {
        return -EINVAL;
    }
    for (size_t off = 0; off < len; off += CRYPTO_SECTOR_SIZE) {
        uint8_t iv[AES_BLOCK];
        int rc;

        ret = make_iv(c, h, sector + off / CRYPTO_SECTOR_SIZE, iv); /* invariant 4 */
        if (ret < 0) {
            break;
        }
        GT.gnutls_cipher_set_iv(h->data, iv, AES_BLOCK);
        rc = encrypt ? GT.gnutls_cipher_encrypt(h->data, buf + off, CRYPTO_SECTOR_SIZE)
                     : GT.gnutls_cipher_decrypt(h->data, buf + off, CRYPTO_SECTOR_SIZE);
        if (rc < 0) {
            ret = blk_error(EIO, "%s failed: %s", encrypt ? "Encryption" : "Decryption",
                            GT.gnutls_strerror(rc));
            break;
        }
    }
    handles_put(c, h);
    return ret;
}

int crypto_cipher_encrypt(CryptoCipher *c, uint64_t sector, uint8_t *buf, size_t len)
{
    return process(c, sector, buf, len, true);
}

int crypto_cipher_decrypt(CryptoCipher *c, uint64_t sector, uint8_t *buf, size_t len)
{
    return process(c, sector, buf, len, false);
}
