/*
 * qcow2/luks-codec.h: the read-only codec of the LUKS1 header that a qcow2
 * image's encryption header extension points at (luks-codec.c says what it
 * owns and its invariants).  Nothing here decrypts: qimg has no encryption.
 */
#ifndef QIMG_QCOW2_LUKS_CODEC_H
#define QIMG_QCOW2_LUKS_CODEC_H

#include "qcow2/format.h"

/* LUKS1 on-disk layout (cryptsetup's LUKS1 spec; all numbers big-endian). */
#define QCOW2_LUKS_MAGIC_LEN 6
#define QCOW2_LUKS_OFF_MAGIC 0
#define QCOW2_LUKS_OFF_VERSION 6
#define QCOW2_LUKS_OFF_CIPHER_NAME 8
#define QCOW2_LUKS_OFF_CIPHER_MODE 40
#define QCOW2_LUKS_OFF_HASH_SPEC 72
#define QCOW2_LUKS_OFF_PAYLOAD_OFFSET 104
#define QCOW2_LUKS_OFF_KEY_BYTES 108
#define QCOW2_LUKS_OFF_MK_DIGEST 112
#define QCOW2_LUKS_OFF_MK_DIGEST_SALT 132
#define QCOW2_LUKS_OFF_MK_ITERATIONS 164
#define QCOW2_LUKS_OFF_UUID 168
#define QCOW2_LUKS_OFF_SLOTS 208
#define QCOW2_LUKS_NAME_LEN 32
#define QCOW2_LUKS_UUID_LEN 40
#define QCOW2_LUKS_NUM_SLOTS 8
/* one key slot: active, iterations, salt[32], key material offset, stripes */
#define QCOW2_LUKS_SLOT_OFF_ACTIVE 0
#define QCOW2_LUKS_SLOT_OFF_ITERATIONS 4
#define QCOW2_LUKS_SLOT_OFF_SALT 8
#define QCOW2_LUKS_SLOT_OFF_KEY_OFFSET 40
#define QCOW2_LUKS_SLOT_OFF_STRIPES 44
#define QCOW2_LUKS_SLOT_SIZE 48
#define QCOW2_LUKS_HEADER_SIZE 592
#define QCOW2_LUKS_SECTOR_SIZE 512
#define QCOW2_LUKS_SLOT_ENABLED 0x00ac71f3u
#define QCOW2_LUKS_SLOT_DISABLED 0x0000deadu
#define QCOW2_LUKS_STRIPES 4000u
/* key material starts at or after 4 KiB (QEMU's header area, in sectors) */
#define QCOW2_LUKS_HEADER_SECTORS (4096 / QCOW2_LUKS_SECTOR_SIZE)

_Static_assert(QCOW2_LUKS_OFF_CIPHER_NAME == QCOW2_LUKS_OFF_VERSION + 2, "luks version");
_Static_assert(QCOW2_LUKS_OFF_CIPHER_MODE ==
                   QCOW2_LUKS_OFF_CIPHER_NAME + QCOW2_LUKS_NAME_LEN,
               "luks cipher name");
_Static_assert(QCOW2_LUKS_OFF_HASH_SPEC ==
                   QCOW2_LUKS_OFF_CIPHER_MODE + QCOW2_LUKS_NAME_LEN,
               "luks cipher mode");
_Static_assert(QCOW2_LUKS_OFF_PAYLOAD_OFFSET ==
                   QCOW2_LUKS_OFF_HASH_SPEC + QCOW2_LUKS_NAME_LEN,
               "luks hash spec");
_Static_assert(QCOW2_LUKS_OFF_KEY_BYTES == QCOW2_LUKS_OFF_PAYLOAD_OFFSET + 4,
               "luks payload");
_Static_assert(QCOW2_LUKS_OFF_MK_DIGEST == QCOW2_LUKS_OFF_KEY_BYTES + 4,
               "luks key bytes");
_Static_assert(QCOW2_LUKS_OFF_MK_DIGEST_SALT == QCOW2_LUKS_OFF_MK_DIGEST + 20,
               "luks digest");
_Static_assert(QCOW2_LUKS_OFF_MK_ITERATIONS == QCOW2_LUKS_OFF_MK_DIGEST_SALT + 32,
               "luks digest salt");
_Static_assert(QCOW2_LUKS_OFF_UUID == QCOW2_LUKS_OFF_MK_ITERATIONS + 4,
               "luks iterations");
_Static_assert(QCOW2_LUKS_OFF_SLOTS == QCOW2_LUKS_OFF_UUID + QCOW2_LUKS_UUID_LEN,
               "luks uuid");
_Static_assert(QCOW2_LUKS_SLOT_OFF_KEY_OFFSET == QCOW2_LUKS_SLOT_OFF_SALT + 32,
               "slot salt");
_Static_assert(QCOW2_LUKS_SLOT_SIZE == QCOW2_LUKS_SLOT_OFF_STRIPES + 4, "slot size");
_Static_assert(QCOW2_LUKS_HEADER_SIZE ==
                   QCOW2_LUKS_OFF_SLOTS + QCOW2_LUKS_NUM_SLOTS * QCOW2_LUKS_SLOT_SIZE,
               "luks header size");

typedef struct Qcow2LuksSlot {
    uint32_t active; /* QCOW2_LUKS_SLOT_ENABLED or _DISABLED */
    uint32_t iterations;
    uint32_t key_offset_sector;
    uint32_t stripes;
} Qcow2LuksSlot;

typedef struct Qcow2Luks {
    /* as on disk (names NUL-terminated here; on disk they may fill the field) */
    uint16_t version;
    char cipher_name[QCOW2_LUKS_NAME_LEN + 1];
    char cipher_mode[QCOW2_LUKS_NAME_LEN + 1];
    char hash_spec[QCOW2_LUKS_NAME_LEN + 1];
    uint32_t payload_offset_sector;
    uint32_t key_bytes;
    uint32_t mk_iterations;
    char uuid[QCOW2_LUKS_UUID_LEN + 1];
    Qcow2LuksSlot slots[QCOW2_LUKS_NUM_SLOTS];
    /* interpreted as QEMU names them (static strings; NULL: none) */
    const char *mode;       /* "xts", "cbc", "ecb", "ctr" */
    const char *ivgen;      /* "plain", "plain64", "essiv" */
    const char *ivgen_hash; /* essiv's hash, else NULL */
    const char *hash;       /* "sha256", ... */
    char cipher_alg[24];    /* "aes-256", ... */
} Qcow2Luks;

/* Decode and validate the QCOW2_LUKS_HEADER_SIZE bytes at buf (invariants
 * 1-3); 0 or -EINVAL with the message recorded. */
int qcow2_luks_decode(const uint8_t *buf, size_t len, Qcow2Luks *l);

#endif
