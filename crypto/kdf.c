/*
 * crypto/kdf.c: hashes, PBKDF2 and random bytes, all from GnuTLS.
 *
 * Owns: the names and sizes of the hashes LUKS headers name, PBKDF2 with
 * HMAC of any of them, the sizing of PBKDF2 iteration counts by time (as
 * QEMU and cryptsetup size key slots), and random bytes for keys, salts and
 * anti-forensic stripes.  No hash, MAC or KDF is implemented here.
 *
 * Invariants (cited as "kdf.c invariant N"):
 *  1. Every digest and every PBKDF2 output comes from GnuTLS
 *     (gnutls_hash*, gnutls_pbkdf2), loaded by the first call that needs
 *     it (gnutls-lib.h invariant 3); a failure of the library, or to load
 *     it, is an error with its message, never a silent fallback.
 *  2. Iteration counts for a time budget come from a measurement of this
 *     thread's CPU time (CLOCK_THREAD_CPUTIME_ID, nanoseconds, so never
 *     QEMU's "Unable to get accurate CPU usage"): PBKDF2 of one output block
 *     of hash h is timed until it has run for at least 200 ms, giving
 *     iterations per second of one block; the result is kept for the
 *     process (one measurement per hash).  An output of n blocks costs n
 *     times as much, so the iterations for outlen bytes and t ms are
 *     rate * t / 1000 / n / divisor, as QEMU's count (which times the
 *     whole output) gives them; QEMU's checks and words for counts past
 *     2^32 - 1 follow.
 *  3. Random bytes come from GnuTLS's generator (gnutls_rnd, seeded from
 *     the kernel's getrandom), GNUTLS_RND_KEY for key material.
 */
#include "crypto/kdf.h"

#include "block/block.h"
#include "crypto/gnutls-lib.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <time.h>

typedef struct HashInfo {
    const char *name;
    size_t len;
    gnutls_mac_algorithm_t mac; /* also the digest id (GNUTLS_DIG_*) */
    bool gnutls;                /* GnuTLS 3.7 has it (not RIPEMD-160) */
} HashInfo;

static const HashInfo hashes[CRYPTO_HASH__MAX] = {
    [CRYPTO_HASH_MD5] = {"md5", 16, GNUTLS_MAC_MD5, true},
    [CRYPTO_HASH_SHA1] = {"sha1", 20, GNUTLS_MAC_SHA1, true},
    [CRYPTO_HASH_SHA224] = {"sha224", 28, GNUTLS_MAC_SHA224, true},
    [CRYPTO_HASH_SHA256] = {"sha256", 32, GNUTLS_MAC_SHA256, true},
    [CRYPTO_HASH_SHA384] = {"sha384", 48, GNUTLS_MAC_SHA384, true},
    [CRYPTO_HASH_SHA512] = {"sha512", 64, GNUTLS_MAC_SHA512, true},
    [CRYPTO_HASH_RIPEMD160] = {"ripemd160", 20, GNUTLS_MAC_RMD160, false},
};

int crypto_hash_lookup(const char *name)
{
    for (int i = 0; i < CRYPTO_HASH__MAX; i++) {
        if (strcmp(hashes[i].name, name) == 0) {
            return i;
        }
    }
    return -1;
}

const char *crypto_hash_name(CryptoHash h)
{
    return hashes[h].name;
}

size_t crypto_hash_len(CryptoHash h)
{
    return hashes[h].len;
}

int crypto_hash_supported(CryptoHash h)
{
    if (!hashes[h].gnutls) {
        return blk_error(ENOTSUP,
                         "Hash algorithm '%s' is not supported by qimg (GnuTLS "
                         "does not have it)",
                         hashes[h].name);
    }
    return 0;
}

#define GT crypto_gnutls

static int gnutls_fail(int rc, const char *what)
{
    return blk_error(EIO, "%s failed: %s", what, GT.gnutls_strerror(rc));
}

int crypto_hash2(CryptoHash h, const void *a, size_t alen, const void *b, size_t blen,
                 uint8_t *out)
{
    gnutls_hash_hd_t hd;
    int rc = crypto_gnutls_load();

    if (rc < 0) {
        return rc;
    }
    rc = GT.gnutls_hash_init(&hd, (gnutls_digest_algorithm_t)hashes[h].mac);
    if (rc < 0) {
        return gnutls_fail(rc, "Hash initialisation");
    }
    rc = GT.gnutls_hash(hd, a, alen);
    if (rc == 0 && b) {
        rc = GT.gnutls_hash(hd, b, blen);
    }
    GT.gnutls_hash_deinit(hd, out); /* invariant 1 */
    return rc < 0 ? gnutls_fail(rc, "Hashing") : 0;
}

int crypto_pbkdf2(CryptoHash h, const void *pw, size_t pwlen, const uint8_t *salt,
                  size_t saltlen, uint32_t iterations, uint8_t *out, size_t outlen)
{
    /* GnuTLS takes its inputs as datums; it does not keep them */
    gnutls_datum_t key = {.data = (unsigned char *)pw, .size = (unsigned)pwlen};
    gnutls_datum_t s = {.data = (unsigned char *)salt, .size = (unsigned)saltlen};
    int rc = crypto_gnutls_load();

    g_assert(iterations > 0 && pwlen <= UINT_MAX && saltlen <= UINT_MAX);
    if (rc < 0) {
        return rc;
    }
    rc = GT.gnutls_pbkdf2(hashes[h].mac, &key, &s, iterations, out, outlen);
    return rc < 0 ? gnutls_fail(rc, "PBKDF2") : 0;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Iterations per second of a one-block PBKDF2 of h (invariant 2). */
static int block_rate(CryptoHash h, uint64_t *rate)
{
    static uint64_t cache[CRYPTO_HASH__MAX]; /* atomic; 0: not measured */
    const uint64_t min_ns = 200000000u;
    uint8_t out[CRYPTO_HASH_MAX_LEN], salt[32] = {0};
    const char pw[] = "qimg pbkdf2 benchmark";
    uint32_t iters = 1u << 12;
    uint64_t ns = 0, r = __atomic_load_n(&cache[h], __ATOMIC_ACQUIRE);
    int ret;

    if (r) {
        *rate = r;
        return 0;
    }
    for (;;) {
        uint64_t t0 = thread_cpu_ns();
        ret = crypto_pbkdf2(h, pw, sizeof(pw) - 1, salt, sizeof(salt), iters, out,
                            hashes[h].len);
        if (ret < 0) {
            return ret;
        }
        ns = thread_cpu_ns() - t0;
        if (ns >= min_ns || iters >= (1u << 30)) {
            break;
        }
        /* aim past the minimum at once when the last run told enough */
        uint64_t next = ns > min_ns / 64 ? (uint64_t)iters * (min_ns + min_ns / 4) / ns
                                         : (uint64_t)iters * 8;
        iters = (uint32_t)MIN(next, (uint64_t)1 << 30);
    }
    r = MAX((uint64_t)iters * 1000000000u / MAX(ns, 1u), 1u);
    __atomic_store_n(&cache[h], r, __ATOMIC_RELEASE);
    *rate = r;
    return 0;
}

int crypto_pbkdf2_iterations(CryptoHash h, size_t outlen, uint64_t iter_time_ms,
                             uint64_t divisor, uint32_t *iterations)
{
    uint64_t blocks = (outlen + hashes[h].len - 1) / hashes[h].len, rate, per_sec;
    int ret = block_rate(h, &rate);

    if (ret < 0) {
        return ret;
    }
    per_sec = MAX(rate / MAX(blocks, 1u), 1u); /* QEMU's count for outlen */
    if (iter_time_ms && per_sec > UINT64_MAX / iter_time_ms) {
        return blk_error(ERANGE, "PBKDF iterations %" PRIu64 " too large to scale: %s",
                         per_sec, g_strerror(ERANGE));
    }
    uint64_t iters = per_sec * iter_time_ms / 1000 / MAX(divisor, 1u);
    if (iters > UINT32_MAX) {
        return blk_error(ERANGE, "PBKDF iterations %" PRIu64 " larger than %u: %s", iters,
                         UINT32_MAX, g_strerror(ERANGE));
    }
    *iterations = (uint32_t)iters;
    return 0;
}

int crypto_random(void *buf, size_t len, bool key)
{
    int rc = crypto_gnutls_load();

    if (rc < 0) {
        return rc;
    }
    rc = GT.gnutls_rnd(key ? GNUTLS_RND_KEY : GNUTLS_RND_RANDOM, buf, len);
    return rc < 0 ? gnutls_fail(rc, "Generating random bytes") : 0; /* invariant 3 */
}
