/*
 * fuzz/fuzz-qcow2-rw.c: libFuzzer target for a qcow2 image opened
 * read-write as it is, not in check mode: what such an open replays and
 * rewrites (dirty bit and lazy refcounts, autoclear bits, the bitmap
 * directory and other header extensions) and the allocating write after
 * it (qcow2/write*.c, grow.c).
 *
 * Each input (at most 1 MiB) is written to a scratch file and run through
 * fuzz/fuzz-format.h's exercise (read-only, then read-write, repaired by
 * the driver's check, written, flushed, closed; a write that was flushed
 * must read back).  No backing chain; an external data file only under a
 * plain name (fuzz-qcow2.h), which is the scratch folder's data.raw,
 * written afresh for each input.
 */
#include "fuzz/fuzz-format.h"
#include "fuzz/fuzz-qcow2.h"

#define RW_FUZZ_MAX_INPUT (1u << 20)
#define DATA_FILE_SIZE 65536

static char *image_path, *data_path;
static uint8_t *data_bytes;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!image_path) {
        const char *dir = fuzz_scratch_dir("rw");
        image_path = g_build_filename(dir, "image.qcow2", NULL);
        data_path = g_build_filename(dir, "data.raw", NULL);
        data_bytes = g_malloc(DATA_FILE_SIZE);
        for (size_t i = 0; i < DATA_FILE_SIZE; i++) {
            data_bytes[i] = (uint8_t)(i * 7);
        }
    }
    if (size > RW_FUZZ_MAX_INPUT || !fuzz_qcow2_data_file_is_safe(data, size)) {
        return 0;
    }
    /* the previous input may have written (or grown) the data file */
    if (!g_file_set_contents(image_path, (const char *)data, (gssize)size, NULL) ||
        !g_file_set_contents(data_path, (const char *)data_bytes, DATA_FILE_SIZE, NULL)) {
        abort();
    }
    fuzz_format_run(image_path, "qcow2");
    return 0;
}
