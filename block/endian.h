/*
 * block/endian.h: big-endian field access for on-disk codecs (qcow2's
 * header and tables, the LUKS header in crypto/).
 *
 * Owns: load_be16/32/64 and store_be16/32/64, which read and write a field
 * at any (unaligned) address through memcpy, so a codec never overlays a
 * struct on disk bytes; store_le32/64 for the little-endian sector numbers
 * of encryption IVs.
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
