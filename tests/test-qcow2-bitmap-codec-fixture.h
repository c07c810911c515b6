/*
 * tests/test-qcow2-bitmap-codec-fixture.h: what the tests of the persistent
 * bitmaps' codec (test-qcow2-bitmap-codec-dir.c,
 * test-qcow2-bitmap-codec-table.c) share: the image geometry they encode
 * for, bitmaps built in memory, encode / decode helpers and the comparison
 * of decoded bitmaps (test-qcow2-bitmap-codec-fixture.c).
 */
#ifndef TEST_QCOW2_BITMAP_CODEC_FIXTURE_H
#define TEST_QCOW2_BITMAP_CODEC_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/block.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define CB 16
#define CS (UINT64_C(1) << CB)
#define DISK (UINT64_C(64) << 20)

extern const Qcow2BitmapImage img;
extern const Qcow2BitmapPolicy policies[3];
void expect_error(int ret, int errnum, const char *want);
Qcow2Bitmap make_bm(const char *name, uint32_t flags, uint8_t gran, uint64_t table_offset,
                    uint32_t table_size, uint32_t extra);
void clear_bms(Qcow2Bitmap *bms, uint32_t nb);
GByteArray *encode(const Qcow2Bitmap *bms, uint32_t nb);
int decode(const GByteArray *a, uint64_t size, uint32_t nb, Qcow2BitmapPolicy policy,
           Qcow2BitmapDir *dir);
void assert_bm_equal(const Qcow2Bitmap *a, const Qcow2Bitmap *b);
void round_trip(const GByteArray *a, const Qcow2Bitmap *want, uint32_t nb,
                Qcow2BitmapPolicy policy);
void base_bms(Qcow2Bitmap *bms);

#endif
