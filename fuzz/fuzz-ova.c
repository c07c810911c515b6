/*
 * fuzz/fuzz-ova.c: libFuzzer target for OVA archives: the tar walk
 * (block/ova-tar.c), the OVF descriptor (block/ova-ovf.c), the listing and
 * the member node (block/ova.c), and the VMDK driver reading a disk and
 * its extents through it.
 *
 * Each input is written to a scratch file as it is, then: opened for its
 * listing (the "ova" format, metadata only: qimg info), and each of its
 * first disks opened as "ova:N:FILE" and read as fuzz/fuzz-format.h's
 * exercise reads an image (read-only: a member is never written).
 */
#include "fuzz/fuzz-format.h"

static char *image_path;

static void run_listing(void)
{
    BlkOpenOptions o = {.read_only = true,
                        .no_backing = true,
                        .no_data_files = true,
                        .cache = BLK_CACHE_UNSAFE};
    GError *err = NULL;
    BlkNode *img = api_open_node(image_path, &o, NULL, &err);

    if (img) {
        BlkInfo info = {0};
        if (img->drv->get_info) {
            (void)img->drv->get_info(img, &info);
        }
        blk_info_clear(&info);
        blk_close(img);
    }
    g_clear_error(&err);
    blk_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!image_path) {
        image_path = g_build_filename(fuzz_scratch_dir("ova"), "image.ova", NULL);
    }
    if (!g_file_set_contents(image_path, (const char *)data, (gssize)size, NULL)) {
        abort();
    }
    run_listing();
    for (unsigned i = 0; i < 3; i++) {
        g_autofree char *name = g_strdup_printf("ova:%u:%s", i, image_path);
        BlkNode *img = fuzz_open(name, NULL, false);
        if (!img) {
            break;
        }
        fuzz_exercise(img);
        blk_close(img);
    }
    blk_error_clear();
    return 0;
}
