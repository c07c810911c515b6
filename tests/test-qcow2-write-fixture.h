/*
 * tests/test-qcow2-write-fixture.h: what the tests of the qcow2 write path
 * against qemu-img 7.2 (test-qcow2-write-scribble.c,
 * test-qcow2-write-features.c) share (test-qcow2-write-fixture.c): opening
 * an image read-write without syncs and closing it flushed, `qemu-img
 * check` must find it clean, files written without fsync, random and
 * compressible buffers.  The helpers shared with other tests are in
 * test-util.c.  Everything is skipped without qemu-img / qemu-io.
 */
#ifndef TEST_QCOW2_WRITE_FIXTURE_H
#define TEST_QCOW2_WRITE_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qimg/qimg.h"
#include "api/api.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MB(x) ((uint64_t)(x) << 20)

/* qemu-img check must find neither corruption nor leak (exit 0). */
void check_clean(const char *path);
/* Open read-write with cache=unsafe (no fdatasync: fast); fails the test. */
BlkNode *open_rw(const char *path);
/* Flush (it must work), then close. */
void close_ok(BlkNode *img);
/* The qcow2 driver's state of an open image. */
Qcow2State *st(BlkNode *img);
/* Write a file without fsync. */
void write_file(const char *path, const void *buf, size_t len);
/* Compressible cluster contents (so compression really happens). */
void fill_compressible(GRand *r, uint8_t *buf, size_t len);

#endif
