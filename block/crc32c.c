/*
 * block/crc32c.c: CRC-32C, reflected polynomial 0x82f63b78 (Castagnoli),
 * initial value and final xor 0xffffffff -- the checksum [MS-VHDX] puts in
 * its headers, region tables and log entries.
 *
 * Owns: the lookup table (built once, thread-safe through GOnce).
 *
 * Invariants (cited as "crc32c.c invariant N"):
 *  1. blk_crc32c(blk_crc32c(0, a), b) == blk_crc32c(0, a || b): the value
 *     returned is the finished CRC, and feeding it back continues it.
 *  2. blk_crc32c(0, "123456789", 9) == 0xe3069283 (the check value).
 */
#include "block/crc32c.h"

#include <glib.h>

static uint32_t table[8][256];

static gpointer build_table(gpointer unused)
{
    (void)unused;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
        }
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
        }
    }
    return NULL;
}

uint32_t blk_crc32c(uint32_t crc, const void *buf, size_t len)
{
    static GOnce once = G_ONCE_INIT;
    const uint8_t *p = buf;
    uint32_t c = ~crc; /* invariant 1 */

    g_once(&once, build_table, NULL);
    /* slicing by 8: eight table lookups per 8 bytes */
    while (len >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
            table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^ table[3][hi & 0xff] ^
            table[2][(hi >> 8) & 0xff] ^ table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--) {
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
    }
    return ~c;
}
