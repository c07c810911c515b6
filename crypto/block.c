/*
 * crypto/block.c: the per-request encryption layer.
 *
 * Owns: moving guest data between a driver and the node that holds it
 * encrypted -- decrypting what is read, encrypting what is written -- for
 * qcow2's LUKS and AES methods and the raw luks format alike.  The driver
 * says where the bytes are (node, offset) and which sector numbers their
 * IVs use (iv_offset: the host offset for qcow2's LUKS, the guest offset
 * for its old AES method and for raw luks).
 *
 * Invariants (cited as "crypto/block.c invariant N"):
 *  1. Every byte of guest data a driver reads from or writes to an
 *     encrypted image passes through here (the drivers' one call site each:
 *     qcow2/data.c, luks/luks.c); nothing here looks at metadata.
 *  2. Reads of whole sectors are decrypted in the caller's buffers, sector
 *     by sector (a sector split between two buffers goes through a
 *     512-byte bounce); a read that starts or ends inside a sector reads
 *     the whole sectors into a bounce buffer (at most 1 MiB at a time) and
 *     copies out the part asked for.  Reads change nothing on disk, so they
 *     need no serialisation.
 *  3. Writes are of whole sectors only: a partial sector would need
 *     read-modify-write, which is only safe where concurrent writers of the
 *     same sector are kept apart -- the driver's job (qcow2/write.c
 *     invariant 13, luks/luks.c invariant 2).  An unaligned write reaching
 *     here is refused (-EINVAL), never written half-encrypted.
 *  4. Writes encrypt into a bounce buffer (at most 1 MiB, aligned for
 *     O_DIRECT) and never modify the caller's buffers; no plaintext is ever
 *     handed to the node.
 *  5. Each request uses its own bounce memory and a cipher handle of its
 *     own (cipher.c invariant 2), so requests of many threads encrypt in
 *     parallel, on every core.
 *  6. A caller that moves the bytes itself (api/aio.c's direct requests,
 *     which go to the ring or a protocol's own queue) transforms them here
 *     too: crypto_block_encrypt_to() fills its bounce buffer with the
 *     ciphertext of whole sectors (invariants 3, 4 as for writes), and
 *     crypto_block_decrypt() decrypts whole sectors it read, in place --
 *     the same code the node paths above use.
 */
#include "crypto/block.h"

#include "crypto/secmem.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define BOUNCE_MAX (1u << 20)
#define BOUNCE_ALIGN 4096u

struct CryptoBlock {
    CryptoCipher *cipher;
    uint8_t *key; /* secure */
    size_t key_len;
};

CryptoBlock *crypto_block_new(const CryptoSpec *spec, const uint8_t *key, size_t len)
{
    CryptoCipher *c = crypto_cipher_new(spec, key, len);
    CryptoBlock *b;

    if (!c) {
        return NULL;
    }
    b = g_new0(CryptoBlock, 1);
    b->cipher = c;
    b->key = crypto_secure_dup(key, len);
    b->key_len = len;
    return b;
}

void crypto_block_free(CryptoBlock *b)
{
    if (!b) {
        return;
    }
    crypto_cipher_free(b->cipher);
    crypto_secure_free(b->key);
    g_free(b);
}

const uint8_t *crypto_block_key(const CryptoBlock *b, size_t *len)
{
    *len = b->key_len;
    return b->key;
}

static uint8_t *bounce_alloc(size_t len)
{
    void *p = NULL;

    if (posix_memalign(&p, BOUNCE_ALIGN, MAX(len, 1u)) != 0) {
        return NULL;
    }
    return p;
}

/* Decrypt qiov in place; it holds whole sectors from 'sector' on. */
static int decrypt_iov(CryptoBlock *b, uint64_t sector, const BlkIOV *qiov)
{
    uint8_t tmp[CRYPTO_SECTOR_SIZE];
    size_t done = 0;
    int ret = 0;

    for (int i = 0; i < qiov->niov && ret == 0; i++) {
        uint8_t *base = qiov->iov[i].iov_base;
        size_t len = qiov->iov[i].iov_len, pos = 0;
        /* a sector begun in an earlier buffer was handled there */
        size_t skip = done % CRYPTO_SECTOR_SIZE
                          ? CRYPTO_SECTOR_SIZE - done % CRYPTO_SECTOR_SIZE
                          : 0;
        pos = MIN(skip, len);
        size_t whole = ROUND_DOWN(len - pos, CRYPTO_SECTOR_SIZE);
        if (whole) {
            ret = crypto_cipher_decrypt(
                b->cipher, sector + (done + pos) / CRYPTO_SECTOR_SIZE, base + pos, whole);
            pos += whole;
        }
        if (ret == 0 && pos < len) {
            /* a sector split across buffers: through tmp (invariant 2) */
            size_t start = done + pos;
            iov_to_buf(qiov, start, tmp, sizeof(tmp));
            ret = crypto_cipher_decrypt(b->cipher, sector + start / CRYPTO_SECTOR_SIZE,
                                        tmp, sizeof(tmp));
            iov_from_buf(qiov, start, tmp, sizeof(tmp));
        }
        done += len;
    }
    crypto_wipe(tmp, sizeof(tmp));
    return ret;
}

int crypto_block_preadv(CryptoBlock *b, BlkNode *node, uint64_t offset,
                        uint64_t iv_offset, const BlkIOV *qiov)
{
    const uint64_t ss = CRYPTO_SECTOR_SIZE;
    uint64_t head = offset % ss, end = offset + qiov->size;
    size_t done = 0;
    uint8_t *buf;
    int ret = 0;

    g_assert(head == iv_offset % ss);
    if (head == 0 && qiov->size % ss == 0) {
        ret = blk_preadv(node, offset, qiov, 0);
        return ret < 0 ? ret : decrypt_iov(b, iv_offset / ss, qiov);
    }
    /* invariant 2: partial sectors through a bounce buffer */
    buf = bounce_alloc((size_t)MIN(ROUND_UP(end, ss) - (offset - head), BOUNCE_MAX));
    if (!buf) {
        return blk_error(ENOMEM, "Cannot allocate a decryption buffer");
    }
    while (done < qiov->size && ret == 0) {
        uint64_t pos = offset + done, astart = ROUND_DOWN(pos, ss);
        uint64_t aend = MIN(ROUND_UP(end, ss), astart + BOUNCE_MAX);
        size_t skip = (size_t)(pos - astart);
        size_t n = (size_t)MIN(aend - pos, (uint64_t)(qiov->size - done));

        ret = blk_pread(node, astart, buf, (size_t)(aend - astart));
        if (ret == 0) {
            ret = crypto_cipher_decrypt(b->cipher, (iv_offset + done - skip) / ss, buf,
                                        (size_t)(aend - astart));
        }
        if (ret == 0) {
            iov_from_buf(qiov, done, buf + skip, n);
        }
        done += n;
    }
    free(buf);
    return ret;
}

static int not_aligned(const char *what, uint64_t offset, size_t len)
{
    return blk_error(EINVAL,
                     "Encrypted %s at offset %" PRIu64 " of %zu bytes is not sector "
                     "aligned",
                     what, offset, len);
}

int crypto_block_decrypt(CryptoBlock *b, uint64_t iv_offset, const BlkIOV *qiov)
{
    if (iv_offset % CRYPTO_SECTOR_SIZE || qiov->size % CRYPTO_SECTOR_SIZE) {
        return not_aligned("read", iv_offset, qiov->size); /* invariant 6 */
    }
    return decrypt_iov(b, iv_offset / CRYPTO_SECTOR_SIZE, qiov);
}

/* Encrypt n bytes of qiov from byte done into out (invariant 4). */
static int encrypt_part(CryptoBlock *b, uint64_t iv_offset, const BlkIOV *qiov,
                        size_t done, uint8_t *out, size_t n)
{
    iov_to_buf(qiov, done, out, n);
    return crypto_cipher_encrypt(b->cipher, (iv_offset + done) / CRYPTO_SECTOR_SIZE, out,
                                 n);
}

int crypto_block_encrypt_to(CryptoBlock *b, uint64_t iv_offset, const BlkIOV *qiov,
                            uint8_t *out)
{
    if (iv_offset % CRYPTO_SECTOR_SIZE || qiov->size % CRYPTO_SECTOR_SIZE) {
        return not_aligned("write", iv_offset, qiov->size); /* invariants 3, 6 */
    }
    return encrypt_part(b, iv_offset, qiov, 0, out, qiov->size);
}

int crypto_block_pwritev(CryptoBlock *b, BlkNode *node, uint64_t offset,
                         uint64_t iv_offset, const BlkIOV *qiov, unsigned flags)
{
    const uint64_t ss = CRYPTO_SECTOR_SIZE;
    size_t done = 0, chunk = (size_t)MIN((uint64_t)qiov->size, BOUNCE_MAX);
    uint8_t *buf;
    int ret = 0;

    if (offset % ss || iv_offset % ss || qiov->size % ss) { /* invariant 3 */
        return not_aligned("write", offset, qiov->size);
    }
    buf = bounce_alloc(chunk);
    if (!buf) {
        return blk_error(ENOMEM, "Cannot allocate an encryption buffer");
    }
    while (done < qiov->size && ret == 0) { /* invariant 4 */
        size_t n = MIN(chunk, qiov->size - done);
        ret = encrypt_part(b, iv_offset, qiov, done, buf, n);
        if (ret == 0) {
            ret = blk_pwrite(node, offset + done, buf, n, flags);
        }
        done += n;
    }
    free(buf);
    return ret;
}

int crypto_block_pwrite_zeroes(CryptoBlock *b, BlkNode *node, uint64_t offset,
                               uint64_t iv_offset, uint64_t bytes, unsigned flags)
{
    size_t chunk = (size_t)MIN(bytes, (uint64_t)BOUNCE_MAX);
    g_autofree uint8_t *zero = NULL;
    uint64_t done = 0;
    int ret = 0;

    if (flags & BLK_REQ_NO_FALLBACK) {
        return -ENOTSUP; /* zeroed ciphertext is not zeroed plaintext */
    }
    zero = g_malloc0(MAX(chunk, 1u));
    while (done < bytes && ret == 0) {
        size_t n = (size_t)MIN((uint64_t)chunk, bytes - done);
        BlkIOV q;
        iov_init_buf(&q, zero, n);
        ret = crypto_block_pwritev(b, node, offset + done, iv_offset + done, &q,
                                   flags & BLK_REQ_FUA);
        done += n;
    }
    return ret;
}
