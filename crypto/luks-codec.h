/*
 * crypto/luks-codec.h: the codec of the LUKS1 header (luks-codec.c says
 * what it owns and its invariants).
 */
#ifndef QIMG_CRYPTO_LUKS_CODEC_H
#define QIMG_CRYPTO_LUKS_CODEC_H

#include "block/types.h"
#include "crypto/cipher.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* LUKS1 on-disk layout (cryptsetup's LUKS1 spec; all numbers big-endian). */
#define CRYPTO_LUKS_MAGIC_LEN 6
#define CRYPTO_LUKS_OFF_MAGIC 0
#define CRYPTO_LUKS_OFF_VERSION 6
#define CRYPTO_LUKS_OFF_CIPHER_NAME 8
#define CRYPTO_LUKS_OFF_CIPHER_MODE 40
#define CRYPTO_LUKS_OFF_HASH_SPEC 72
#define CRYPTO_LUKS_OFF_PAYLOAD_OFFSET 104
#define CRYPTO_LUKS_OFF_KEY_BYTES 108
#define CRYPTO_LUKS_OFF_MK_DIGEST 112
#define CRYPTO_LUKS_OFF_MK_DIGEST_SALT 132
#define CRYPTO_LUKS_OFF_MK_ITERATIONS 164
#define CRYPTO_LUKS_OFF_UUID 168
#define CRYPTO_LUKS_OFF_SLOTS 208
#define CRYPTO_LUKS_NAME_LEN 32
#define CRYPTO_LUKS_DIGEST_LEN 20
#define CRYPTO_LUKS_SALT_LEN 32
#define CRYPTO_LUKS_UUID_LEN 40
#define CRYPTO_LUKS_NUM_SLOTS 8
/* one key slot: active, iterations, salt[32], key material offset, stripes */
#define CRYPTO_LUKS_SLOT_OFF_ACTIVE 0
#define CRYPTO_LUKS_SLOT_OFF_ITERATIONS 4
#define CRYPTO_LUKS_SLOT_OFF_SALT 8
#define CRYPTO_LUKS_SLOT_OFF_KEY_OFFSET 40
#define CRYPTO_LUKS_SLOT_OFF_STRIPES 44
#define CRYPTO_LUKS_SLOT_SIZE 48
#define CRYPTO_LUKS_HEADER_SIZE 592
#define CRYPTO_LUKS_SLOT_ENABLED 0x00ac71f3u
#define CRYPTO_LUKS_SLOT_DISABLED 0x0000deadu
#define CRYPTO_LUKS_STRIPES 4000u
/* key material starts at or after 4 KiB (the header area, in sectors), and
 * each slot's material is rounded up to it (cryptsetup's layout) */
#define CRYPTO_LUKS_ALIGN_SECTORS (4096 / CRYPTO_SECTOR_SIZE)

_Static_assert(CRYPTO_LUKS_OFF_CIPHER_NAME == CRYPTO_LUKS_OFF_VERSION + 2, "version");
_Static_assert(CRYPTO_LUKS_OFF_CIPHER_MODE ==
                   CRYPTO_LUKS_OFF_CIPHER_NAME + CRYPTO_LUKS_NAME_LEN,
               "cipher name");
_Static_assert(CRYPTO_LUKS_OFF_HASH_SPEC ==
                   CRYPTO_LUKS_OFF_CIPHER_MODE + CRYPTO_LUKS_NAME_LEN,
               "cipher mode");
_Static_assert(CRYPTO_LUKS_OFF_PAYLOAD_OFFSET ==
                   CRYPTO_LUKS_OFF_HASH_SPEC + CRYPTO_LUKS_NAME_LEN,
               "hash spec");
_Static_assert(CRYPTO_LUKS_OFF_KEY_BYTES == CRYPTO_LUKS_OFF_PAYLOAD_OFFSET + 4,
               "payload");
_Static_assert(CRYPTO_LUKS_OFF_MK_DIGEST == CRYPTO_LUKS_OFF_KEY_BYTES + 4, "key bytes");
_Static_assert(CRYPTO_LUKS_OFF_MK_DIGEST_SALT ==
                   CRYPTO_LUKS_OFF_MK_DIGEST + CRYPTO_LUKS_DIGEST_LEN,
               "digest");
_Static_assert(CRYPTO_LUKS_OFF_MK_ITERATIONS ==
                   CRYPTO_LUKS_OFF_MK_DIGEST_SALT + CRYPTO_LUKS_SALT_LEN,
               "digest salt");
_Static_assert(CRYPTO_LUKS_OFF_UUID == CRYPTO_LUKS_OFF_MK_ITERATIONS + 4, "iterations");
_Static_assert(CRYPTO_LUKS_OFF_SLOTS == CRYPTO_LUKS_OFF_UUID + CRYPTO_LUKS_UUID_LEN,
               "uuid");
_Static_assert(CRYPTO_LUKS_SLOT_OFF_KEY_OFFSET ==
                   CRYPTO_LUKS_SLOT_OFF_SALT + CRYPTO_LUKS_SALT_LEN,
               "slot salt");
_Static_assert(CRYPTO_LUKS_SLOT_SIZE == CRYPTO_LUKS_SLOT_OFF_STRIPES + 4, "slot size");
_Static_assert(CRYPTO_LUKS_HEADER_SIZE ==
                   CRYPTO_LUKS_OFF_SLOTS + CRYPTO_LUKS_NUM_SLOTS * CRYPTO_LUKS_SLOT_SIZE,
               "header size");

typedef struct CryptoLuksSlot {
    uint32_t active; /* CRYPTO_LUKS_SLOT_ENABLED or _DISABLED */
    uint32_t iterations;
    uint8_t salt[CRYPTO_LUKS_SALT_LEN];
    uint32_t key_offset_sector;
    uint32_t stripes;
} CryptoLuksSlot;

typedef struct CryptoLuksHeader {
    /* as on disk (names NUL-terminated here; on disk they may fill the field) */
    uint16_t version;
    char cipher_name[CRYPTO_LUKS_NAME_LEN + 1];
    char cipher_mode[CRYPTO_LUKS_NAME_LEN + 1];
    char hash_spec[CRYPTO_LUKS_NAME_LEN + 1];
    uint32_t payload_offset_sector;
    uint32_t key_bytes;
    uint8_t mk_digest[CRYPTO_LUKS_DIGEST_LEN];
    uint8_t mk_salt[CRYPTO_LUKS_SALT_LEN];
    uint32_t mk_iterations;
    char uuid[CRYPTO_LUKS_UUID_LEN + 1];
    CryptoLuksSlot slots[CRYPTO_LUKS_NUM_SLOTS];
    /* interpreted as QEMU names them (valid after a successful decode) */
    CryptoSpec spec;
    CryptoHash hash;
    bool has_ivgen_hash; /* the mode string names one (shown for ESSIV only) */
} CryptoLuksHeader;

/* Decode and validate the CRYPTO_LUKS_HEADER_SIZE bytes at buf (invariants
 * 1-3); 0 or -EINVAL/-ENOTSUP with the message recorded. */
int crypto_luks_decode(const uint8_t *buf, size_t len, CryptoLuksHeader *h);
/* Write h's on-disk fields (not the interpreted ones) into
 * buf[0..CRYPTO_LUKS_HEADER_SIZE) (invariant 4). */
void crypto_luks_encode(const CryptoLuksHeader *h, uint8_t *buf);
/* Sectors of one slot's key material for key_bytes and stripes (whole
 * sectors, as cryptsetup writes it). */
uint64_t crypto_luks_material_sectors(uint32_t key_bytes, uint32_t stripes);
/* What qemu-img info shows of a LUKS header: offsets in bytes, iterations
 * and stripes of active slots only. */
void crypto_luks_info(const CryptoLuksHeader *h, BlkEncryptInfo *e);
/* Is the slot enabled? */
static inline bool crypto_luks_slot_active(const CryptoLuksHeader *h, unsigned i)
{
    return h->slots[i].active == CRYPTO_LUKS_SLOT_ENABLED;
}

/* The bytes the header and key material take (the payload's offset). */
static inline uint64_t crypto_luks_area_len(const CryptoLuksHeader *h)
{
    return (uint64_t)h->payload_offset_sector * CRYPTO_SECTOR_SIZE;
}

#endif
