/*
 * tests/test-file-fixture.h: what the file driver's tests (test-file-io.c,
 * test-file-space.c) share: their scratch folders (a page-cache one and one
 * where O_DIRECT works, made by group_setup(), removed by group_teardown()),
 * opening a file node through blk_file_driver's function pointers, reads
 * and writes through them, file helpers and a loop device over a file
 * (test-file-fixture.c).
 */
#ifndef TEST_FILE_FIXTURE_H
#define TEST_FILE_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qimg/qimg.h"
#include "test-util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define KiB 1024ull
#define MiB (1024ull * 1024)

extern char *tmpdir;
extern char *direct_dir;
char *tpath(const char *dir, const char *name);
BlkNode *open_img_err(const char *path, bool ro, BlkCacheMode cache);
BlkNode *open_img(const char *path, bool ro, BlkCacheMode cache);
void close_img(BlkNode *img);
int rd(BlkNode *img, uint64_t off, void *buf, size_t len);
int wr(BlkNode *img, uint64_t off, const void *buf, size_t len, unsigned flags);
void fill_pattern(uint8_t *buf, size_t len, uint32_t seed);
bool all_bytes(const uint8_t *buf, size_t len, uint8_t v);
void write_file(const char *path, const void *buf, size_t len);
uint64_t file_size(const char *path);
uint8_t *read_all(const char *path, size_t *len);
int loop_attach(const char *backing, char **devpath);
int group_setup(void **state);
int group_teardown(void **state);

#endif
