/*
 * fuzz/fuzz-format.h: the exercise every foreign-format fuzz target runs
 * (fuzz-vpc.c, fuzz-vdi.c, fuzz-vhdx.c, fuzz-qed.c; fuzz-ova.c its read part).
 *
 * Owns: fuzz_format_run(): the input, laid out as a file by the target, is
 * opened read-only without its backing chain and read (its first MiB, and
 * unaligned), walked with block status (at most 4096 answers, reading the
 * start of each stored extent, up to 4 MiB), asked for
 * its info and checked; then opened read-write -- replaying what a
 * read-write open replays -- checked with repair, written (4 KiB at the
 * start of the disk), flushed and closed.  Besides crashes, sanitizer
 * reports, leaks and hangs, one property is a finding: a write that was
 * flushed and closed without error reads back after the image is opened
 * again (read-only).
 */
#ifndef QIMG_FUZZ_FORMAT_H
#define QIMG_FUZZ_FORMAT_H

#include "api/api.h"
#include "block/block.h"
#include "fuzz/fuzz-util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_HEAD_READ (1u << 20) /* read whole: the first MiB of the disk */
#define FUZZ_READ_CAP (4u << 20)  /* then stored extents, their first 256 KiB */
#define FUZZ_CHUNK (256u << 10)
#define FUZZ_STATUS_STEPS 4096

static BlkNode *fuzz_open(const char *path, const char *format, bool rw)
{
    BlkOpenOptions o = {.format = format,
                        .read_only = !rw,
                        .no_backing = true,
                        .cache = BLK_CACHE_UNSAFE};
    GError *err = NULL;
    BlkNode *img = api_open_node(path, &o, NULL, &err);

    g_clear_error(&err);
    blk_error_clear();
    return img;
}

static void fuzz_exercise(BlkNode *img)
{
    uint64_t end = MIN(img->size, (uint64_t)FUZZ_HEAD_READ), budget = FUZZ_READ_CAP;
    g_autofree uint8_t *buf = g_malloc(FUZZ_CHUNK);
    int errors = 0;

    for (uint64_t off = 0; off < end && errors < 8; off += FUZZ_CHUNK) {
        errors +=
            blk_pread(img, off, buf, (size_t)MIN((uint64_t)FUZZ_CHUNK, end - off)) < 0;
    }
    if (img->size > 1000) {
        (void)blk_pread(img, 333, buf,
                        (size_t)MIN(img->size - 333, (uint64_t)FUZZ_CHUNK));
    }
    /* the walk reads the start of each stored extent past the head, wherever
     * the tables put it (up to FUZZ_READ_CAP in all) */
    uint64_t off = 0;
    for (int steps = 0; off < img->size && steps < FUZZ_STATUS_STEPS; steps++) {
        BlkStatus st;
        if (blk_block_status(img, off, img->size - off, &st) < 0 || st.pnum == 0) {
            off += 512;
            continue;
        }
        if ((st.flags & BLK_STATUS_DATA) && off >= end && budget > 0) {
            size_t n = (size_t)MIN(MIN(st.pnum, (uint64_t)FUZZ_CHUNK), budget);
            (void)blk_pread(img, off, buf, n);
            budget -= n;
        }
        off += st.pnum;
    }
    BlkInfo info = {0};
    if (img->drv->get_info) {
        (void)img->drv->get_info(img, &info);
    }
    blk_info_clear(&info);
    if (img->drv->check) {
        BlkCheckResult res = {.messages = g_ptr_array_new_with_free_func(g_free)};
        (void)img->drv->check(img, &res, 0);
        blk_check_result_clear(&res);
    }
    blk_error_clear();
}

/* The input as the file at path: fuzz_format_run's work on it. */
static inline void fuzz_format_run(const char *path, const char *format)
{
    BlkNode *img = fuzz_open(path, format, false);
    uint8_t pattern[4096], back[4096];
    bool written = false;

    if (img) {
        fuzz_exercise(img);
        blk_close(img);
    }
    img = fuzz_open(path, format, true);
    if (!img) {
        return;
    }
    if (img->drv->check) {
        BlkCheckResult res = {.messages = g_ptr_array_new_with_free_func(g_free)};
        (void)img->drv->check(img, &res, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS);
        blk_check_result_clear(&res);
    }
    memset(pattern, 0xa5, sizeof(pattern));
    if (img->size >= sizeof(pattern) && img->drv->pwritev &&
        blk_pwrite(img, 0, pattern, sizeof(pattern), 0) == 0 && blk_flush(img) == 0) {
        written = true;
    }
    fuzz_exercise(img);
    blk_close(img); /* nothing left to write: the flush above wrote it */
    blk_error_clear();
    if (!written) {
        return;
    }
    img = fuzz_open(path, format, false);
    if (!img || blk_pread(img, 0, back, sizeof(back)) < 0 ||
        memcmp(back, pattern, sizeof(back)) != 0) {
        fprintf(stderr, "a flushed write to a %s image did not read back: %s\n", format,
                img ? "different bytes" : "the image no longer opens");
        abort();
    }
    blk_close(img);
}

#endif
