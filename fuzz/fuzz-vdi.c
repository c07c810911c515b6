/*
 * fuzz/fuzz-vdi.c: libFuzzer target for the VDI driver (vdi/): header, block map,
 * allocation and check.
 *
 * Each input is written to a scratch file as it is and run through
 * fuzz/fuzz-format.h's exercise (read-only, then read-write with a write
 * that must read back).
 */
#include "fuzz/fuzz-format.h"

static char *image_path;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!image_path) {
        image_path = g_build_filename(fuzz_scratch_dir("vdi"), "image.vdi", NULL);
    }
    if (!g_file_set_contents(image_path, (const char *)data, (gssize)size, NULL)) {
        abort();
    }
    fuzz_format_run(image_path, "vdi");
    return 0;
}
