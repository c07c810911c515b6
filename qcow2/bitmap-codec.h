/*
 * qcow2/bitmap-codec.h: the persistent bitmaps' one codec (bitmap-codec.c
 * says what it owns and its invariants; the on-disk layout is in format.h).
 */
#ifndef QIMG_QCOW2_BITMAP_CODEC_H
#define QIMG_QCOW2_BITMAP_CODEC_H

#include "qcow2/format.h"

/* Whose rules the directory decoder applies (bitmap-codec.c invariants 3-5). */
typedef enum Qcow2BitmapPolicy {
    QCOW2_BITMAP_OPEN,  /* strict: the spec's rules and QEMU's limits */
    QCOW2_BITMAP_CHECK, /* qemu-img check: QEMU's bitmap_list_load, its words */
    QCOW2_BITMAP_RAW,   /* the entries' framing only, fields kept as on disk */
} Qcow2BitmapPolicy;

/* What the rules need to know about the image. */
typedef struct Qcow2BitmapImage {
    uint32_t cluster_bits;
    uint64_t disk_size; /* virtual size */
    uint64_t file_size; /* QCOW2_BITMAP_OPEN: tables and data lie below it */
} Qcow2BitmapImage;

typedef struct Qcow2BitmapSource {
    /* len bytes of the file at offset (zeros past its end, or an error);
     * 0 or -errno */
    int (*read)(void *opaque, uint64_t offset, void *buf, uint64_t len);
    void *opaque;
} Qcow2BitmapSource;

typedef struct Qcow2BitmapDir {
    Qcow2Bitmap *bms; /* nb entries */
    uint32_t nb;
    uint64_t size; /* bytes the entries take, padding included */
} Qcow2BitmapDir;

/* Decode the extension's len bytes at data (invariant 2).  consistent:
 * the autoclear bit is set; if not, only the length is checked and *x is
 * zeroed (QEMU ignores the data). */
int qcow2_bitmaps_ext_decode(const uint8_t *data, uint32_t len, uint32_t cluster_bits,
                             bool consistent, Qcow2BitmapsExt *x);
/* Encode x as the extension's QCOW2_BITMAPS_EXT_SIZE bytes. */
void qcow2_bitmaps_ext_encode(const Qcow2BitmapsExt *x, uint8_t *buf);
/* Decode the directory of nb_bitmaps entries in buf[0..size).  On failure
 * nothing is left in *dir and the message is recorded (blk_error). */
int qcow2_bitmap_dir_decode(const uint8_t *buf, uint64_t size, uint32_t nb_bitmaps,
                            const Qcow2BitmapImage *img, Qcow2BitmapPolicy policy,
                            Qcow2BitmapDir *dir);
/* Check the directory size, read the directory x describes through src
 * and decode it. */
int qcow2_bitmap_dir_read(const Qcow2BitmapSource *src, const Qcow2BitmapsExt *x,
                          const Qcow2BitmapImage *img, Qcow2BitmapPolicy policy,
                          Qcow2BitmapDir *dir);
/* Bytes of bm's entry as encoded, padding included (a multiple of 8). */
uint64_t qcow2_bitmap_entry_size(const Qcow2Bitmap *bm);
/* Size of bms[0..nb) encoded as a directory; false past the 64 MiB limit. */
bool qcow2_bitmap_dir_size(const Qcow2Bitmap *bms, uint32_t nb, uint64_t *size);
/* Encode bms[0..nb) into buf (qcow2_bitmap_dir_size() bytes). */
void qcow2_bitmap_dir_encode(const Qcow2Bitmap *bms, uint32_t nb, uint8_t *buf);
/* Free what one entry owns (name, extra data; the pointers become NULL). */
void qcow2_bitmap_clear(Qcow2Bitmap *bm);
/* Free the entries and zero *dir. */
void qcow2_bitmap_dir_free(Qcow2BitmapDir *dir);
/* Table entries a bitmap of granularity 2^granularity_bits needs for a
 * disk of disk_size bytes (granularity_bits <= 63). */
uint64_t qcow2_bitmap_table_size_for(uint64_t disk_size, uint32_t granularity_bits,
                                     uint32_t cluster_bits);
/* Validate bm's table (bm->table_size big-endian entries at buf, invariant
 * 8) and store it in host order in entries (which may be buf itself);
 * index is bm's place in the directory, for the messages. */
int qcow2_bitmap_table_decode(const uint8_t *buf, const Qcow2Bitmap *bm, uint32_t index,
                              const Qcow2BitmapImage *img, Qcow2BitmapPolicy policy,
                              uint64_t *entries);
/* Read bm's table through src and decode it into *entries (g_free). */
int qcow2_bitmap_table_read(const Qcow2BitmapSource *src, const Qcow2Bitmap *bm,
                            uint32_t index, const Qcow2BitmapImage *img,
                            Qcow2BitmapPolicy policy, uint64_t **entries);
/* Encode n host-order entries as a bitmap table (8 * n bytes). */
void qcow2_bitmap_table_encode(const uint64_t *entries, uint32_t n, uint8_t *buf);

#endif
