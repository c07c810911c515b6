/*
 * block/crc32c.h: CRC-32C (Castagnoli), the checksum of VHDX headers,
 * region tables and log entries.  See crc32c.c.
 */
#ifndef QIMG_BLOCK_CRC32C_H
#define QIMG_BLOCK_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC-32C: crc is the value returned for the bytes before
 * (0 to start); the result is the CRC of everything so far. */
uint32_t blk_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
