/*
 * fuzz/fuzz-vhdx.c: libFuzzer target for the VHDX driver (vhdx/): headers,
 * region tables, metadata items and parent locator, BAT, sector bitmaps,
 * the log search and replay (in memory read-only, into the file
 * read-write), allocation and metadata updates through the log.
 *
 * Layout: VHDX structures sit at MiB boundaries, so an input is spread
 * over the scratch file: its first HEAD bytes (file identifier, headers,
 * region tables) at 0, then each following PIECE bytes at the next MiB
 * (1 MiB: the log, 2 MiB: the BAT, 3 MiB: the metadata, then blocks),
 * the rest of each MiB a hole, and the file spans the last such MiB whole
 * (so 1 MiB blocks whose start the input holds lie inside the file).  Seeds stay small
 * (fuzz/seeds-vhdx/, fuzz/make-hyperv-seeds.py packs them the same way).  Then
 * fuzz/fuzz-format.h's exercise runs.
 */
#include "fuzz/fuzz-format.h"

#include <fcntl.h>
#include <unistd.h>

#define HEAD (320u << 10)
#define PIECE (64u << 10)
#define MIB (1u << 20)

static char *image_path;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!image_path) {
        image_path = g_build_filename(fuzz_scratch_dir("vhdx"), "image.vhdx", NULL);
    }
    int fd = open(image_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    size_t n = MIN(size, (size_t)HEAD);
    if (fd < 0 || pwrite(fd, data, n, 0) != (ssize_t)n) {
        abort();
    }
    size_t k = 1;
    for (size_t pos = HEAD; pos < size; pos += PIECE, k++) {
        n = MIN(size - pos, (size_t)PIECE);
        if (pwrite(fd, data + pos, n, (off_t)(k * MIB)) != (ssize_t)n) {
            abort();
        }
    }
    if (k > 1 && ftruncate(fd, (off_t)(k * MIB)) < 0) {
        abort();
    }
    close(fd);
    fuzz_format_run(image_path, "vhdx");
    return 0;
}
