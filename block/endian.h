/*
 * block/endian.h: loading and storing on-disk integers in a given byte
 * order, for every codec of an on-disk structure (qcow2, LUKS and
 * VHD are big-endian; VMDK, VHDX, VDI and QED little-endian).
 *
 * Owns: the load_be, store_be, load_le and store_le helpers (16, 32 and
 * 64 bits).
 *
 * Invariants (cited as "endian.h invariant N"):
 *  1. A codec decodes every number it reads from an image through these
 *     helpers into a host variable, at an offset its format header names
 *     under _Static_assert; no on-disk struct is ever overlaid on bytes.
 *  2. The helpers take any alignment (memcpy), so a field may sit at any
 *     byte offset of a buffer.
 *  3. This header holds the only byte-order helpers of the tree: a module
 *     never defines its own (VMDK, the LUKS IV sector numbers and the
 *     qcow2 tables all use these).
 */
#ifndef QIMG_BLOCK_ENDIAN_H
#define QIMG_BLOCK_ENDIAN_H

#include <glib.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t load_be16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return GUINT16_FROM_BE(v);
}

static inline uint32_t load_be32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return GUINT32_FROM_BE(v);
}

static inline uint64_t load_be64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return GUINT64_FROM_BE(v);
}

static inline void store_be16(void *p, uint16_t v)
{
    v = GUINT16_TO_BE(v);
    memcpy(p, &v, sizeof(v));
}

static inline void store_be32(void *p, uint32_t v)
{
    v = GUINT32_TO_BE(v);
    memcpy(p, &v, sizeof(v));
}

static inline void store_be64(void *p, uint64_t v)
{
    v = GUINT64_TO_BE(v);
    memcpy(p, &v, sizeof(v));
}

static inline uint16_t load_le16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return GUINT16_FROM_LE(v);
}

static inline uint32_t load_le32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return GUINT32_FROM_LE(v);
}

static inline uint64_t load_le64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return GUINT64_FROM_LE(v);
}

static inline void store_le16(void *p, uint16_t v)
{
    v = GUINT16_TO_LE(v);
    memcpy(p, &v, sizeof(v));
}

static inline void store_le32(void *p, uint32_t v)
{
    v = GUINT32_TO_LE(v);
    memcpy(p, &v, sizeof(v));
}

static inline void store_le64(void *p, uint64_t v)
{
    v = GUINT64_TO_LE(v);
    memcpy(p, &v, sizeof(v));
}

#endif
