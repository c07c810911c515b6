/*
 * qed/format.h: the QED on-disk format (QEMU Enhanced Disk), for the qed/
 * files: the 64-byte header's field offsets, feature bits as named enums
 * with their known-bits masks, limits, the decoded header and its codec.
 * Every number is little-endian.
 *
 * Owns: the on-disk constants and field offsets (under _Static_assert).
 *
 * Invariants (cited as "qed/format.h invariant N"):
 *  1. Bytes become numbers only through qed_header_decode, with
 *     block/endian.h's little-endian helpers (endian.h invariant 1).
 *  2. The codec checks nothing; what a field may hold is the open's
 *     business (qed.c invariant 1).
 */
#ifndef QIMG_QED_FORMAT_H
#define QIMG_QED_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#define QED_MAGIC 0x00444551u /* "QED\0" */
#define QED_HEADER_SIZE 64
#define QED_MIN_CLUSTER_SIZE (4u * 1024)
#define QED_MAX_CLUSTER_SIZE (64u * 1024 * 1024)
#define QED_MIN_TABLE_SIZE 1u
#define QED_MAX_TABLE_SIZE 16u
#define QED_MAX_BACKING_NAME 1023u /* QEMU's backing_file buffer, less the NUL */

/* Table entries: 0 is unallocated, 1 a zero cluster, else an offset. */
#define QED_UNALLOCATED 0u
#define QED_ZERO_CLUSTER 1u

typedef enum QedFeature {
    QED_F_BACKING_FILE = 1u << 0,
    QED_F_NEED_CHECK = 1u << 1,
    QED_F_BACKING_FORMAT_NO_PROBE = 1u << 2,
    QED_F_KNOWN = QED_F_BACKING_FILE | QED_F_NEED_CHECK | QED_F_BACKING_FORMAT_NO_PROBE,
} QedFeature;

enum {
    QED_H_MAGIC = 0,
    QED_H_CLUSTER_SIZE = 4,
    QED_H_TABLE_SIZE = 8,
    QED_H_HEADER_SIZE = 12,
    QED_H_FEATURES = 16,
    QED_H_COMPAT_FEATURES = 24,
    QED_H_AUTOCLEAR_FEATURES = 32,
    QED_H_L1_OFFSET = 40,
    QED_H_IMAGE_SIZE = 48,
    QED_H_BACKING_OFFSET = 56,
    QED_H_BACKING_SIZE = 60,
};
_Static_assert(QED_H_BACKING_SIZE + 4 == QED_HEADER_SIZE, "QED header layout");

typedef struct QedHeader {
    uint32_t magic;
    uint32_t cluster_size; /* bytes */
    uint32_t table_size;   /* clusters per L1 or L2 table */
    uint32_t header_size;  /* clusters */
    uint64_t features, compat_features, autoclear_features;
    uint64_t l1_offset;
    uint64_t image_size;
    uint32_t backing_offset, backing_size;
} QedHeader;

void qed_header_decode(const uint8_t buf[QED_HEADER_SIZE], QedHeader *h);
void qed_header_encode(const QedHeader *h, uint8_t buf[QED_HEADER_SIZE]);

#endif
