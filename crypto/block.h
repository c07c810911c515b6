/*
 * crypto/block.h: the per-request encryption layer drivers call (block.c
 * says what it owns and its invariants).
 */
#ifndef QIMG_CRYPTO_BLOCK_H
#define QIMG_CRYPTO_BLOCK_H

#include "block/block.h"
#include "crypto/cipher.h"

typedef struct CryptoBlock CryptoBlock;

/* The layer for data encrypted with spec and key (copied into secure
 * memory); NULL with the message recorded. */
CryptoBlock *crypto_block_new(const CryptoSpec *spec, const uint8_t *key, size_t len);
void crypto_block_free(CryptoBlock *b);
/* The key it was made with (secure memory; key slot management). */
const uint8_t *crypto_block_key(const CryptoBlock *b, size_t *len);

/*
 * Read node's bytes [offset, offset + qiov->size) into qiov, decrypted.
 * The byte at offset is byte (iv_offset % 512) of sector iv_offset / 512
 * of the encrypted stream (offset and iv_offset agree modulo 512).  Any
 * offset and length: partial sectors are read whole and decrypted in a
 * bounce buffer (block.c invariant 2).
 */
int crypto_block_preadv(CryptoBlock *b, BlkNode *node, uint64_t offset,
                        uint64_t iv_offset, const BlkIOV *qiov);
/* Encrypt qiov and write it at node's offset (flags: blk_pwritev's).
 * offset, iv_offset and the length must be multiples of 512 (the caller
 * makes a partial sector whole: block.c invariant 3); -EINVAL otherwise.
 * The caller's buffers are not modified. */
int crypto_block_pwritev(CryptoBlock *b, BlkNode *node, uint64_t offset,
                         uint64_t iv_offset, const BlkIOV *qiov, unsigned flags);
/* For a caller that moves the bytes itself (block.c invariant 6): encrypt
 * qiov into out (qiov->size bytes), its first sector numbered iv_offset /
 * 512; decrypt qiov in place likewise.  iv_offset and the length must be
 * multiples of 512; -EINVAL otherwise.  0 or -errno, the message recorded. */
int crypto_block_encrypt_to(CryptoBlock *b, uint64_t iv_offset, const BlkIOV *qiov,
                            uint8_t *out);
int crypto_block_decrypt(CryptoBlock *b, uint64_t iv_offset, const BlkIOV *qiov);
/* Make [offset, + bytes) read as zeros: encrypted zeros written
 * (alignment as for writes).  With BLK_REQ_NO_FALLBACK -ENOTSUP: zeroing
 * the file would read back as garbage. */
int crypto_block_pwrite_zeroes(CryptoBlock *b, BlkNode *node, uint64_t offset,
                               uint64_t iv_offset, uint64_t bytes, unsigned flags);

#endif
