/*
 * fuzz/fuzz-vmdk-open.c: libFuzzer target for everything the VMDK driver
 * parses: the text descriptor (values, extent lines, parent hint), the
 * VMDK4/VMDK3/seSparse headers, the stream footer, grain directories and
 * tables, grain markers and compressed grains.
 *
 * Each input is written to a scratch file and opened read-only as vmdk
 * (no backing chain; untrusted names, so an extent can only be a file in
 * the scratch folder: "flat.bin" and "sparse.vmdk", a valid hosted sparse
 * extent, are there).  Then: read the disk in chunks (up to 16 MiB), walk
 * the block status, query the info, run check.  Any crash, sanitizer
 * report, leak or hang is a bug (DESIGN.md on-disk rule 4).
 */
#include "block/block.h"
#include "api/api.h"
#include "fuzz/fuzz-util.h"
#include "vmdk/vmdk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_CAP (16u << 20)
#define CHUNK (256u << 10)

static const char *scratch_dir;
static char *image_path;

/* A small hosted sparse extent: 1 MiB, grains of 4 KiB, 16 GTEs. */
static void write_sparse_extent(const char *path)
{
    uint8_t *f = g_malloc0(16 * 512);
    Vmdk4Header h = {.version = 1,
                     .flags = VMDK4_FLAG_NL_DETECT | VMDK4_FLAG_ZERO_GRAIN,
                     .capacity = 2048,
                     .granularity = 8,
                     .num_gtes = 16,
                     .gd_offset = 1,
                     .grain_offset = 8};
    vmdk4_header_encode(&h, f);
    /* 16 tables of 16 entries: GD at sector 1, tables from sector 2 */
    for (uint32_t t = 0; t < 16; t++) {
        store_le32(f + 512 + 4 * t, t < 2 ? 2 + t : 0);
    }
    store_le32(f + 2 * 512, 8); /* grain 0 at sector 8 */
    store_le32(f + 2 * 512 + 4, VMDK_GTE_ZEROED);
    store_le32(f + 3 * 512 + 8, 8);
    memset(f + 8 * 512, 0x5a, 8 * 512);
    g_file_set_contents(path, (const char *)f, 16 * 512, NULL);
    g_free(f);
}

static void init_scratch(void)
{
    scratch_dir = fuzz_scratch_dir("vmdk");
    image_path = g_build_filename(scratch_dir, "image.vmdk", NULL);
    g_autofree char *flat = g_build_filename(scratch_dir, "flat.bin", NULL);
    g_autofree char *sparse = g_build_filename(scratch_dir, "sparse.vmdk", NULL);
    g_autofree uint8_t *bytes = g_malloc(65536);
    for (size_t i = 0; i < 65536; i++) {
        bytes[i] = (uint8_t)(i * 13);
    }
    g_file_set_contents(flat, (const char *)bytes, 65536, NULL);
    write_sparse_extent(sparse);
}

static void exercise(BlkNode *img)
{
    uint64_t end = MIN(img->size, (uint64_t)READ_CAP);
    g_autofree uint8_t *buf = g_malloc(CHUNK);
    int errors = 0;

    for (uint64_t off = 0; off < end && errors < 8; off += CHUNK) {
        size_t n = (size_t)MIN((uint64_t)CHUNK, end - off);
        if (blk_pread(img, off, buf, n) < 0) {
            errors++;
        }
    }
    if (img->size > 1000) {
        (void)blk_pread(img, 333, buf, (size_t)MIN(img->size - 333, (uint64_t)CHUNK));
    }
    errors = 0;
    for (uint64_t off = 0; off < end && errors < 8;) {
        BlkStatus st;
        if (blk_block_status(img, off, end - off, &st) < 0 || st.pnum == 0) {
            errors++;
            off += 512;
            continue;
        }
        off += st.pnum;
    }
    blk_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!scratch_dir) {
        init_scratch();
    }
    if (!g_file_set_contents(image_path, (const char *)data, (gssize)size, NULL)) {
        abort();
    }

    BlkOpenOptions o = {.format = "vmdk", .read_only = true, .no_backing = true};
    GError *err = NULL;
    BlkNode *img = api_open_node(image_path, &o, NULL, &err);
    if (!img) {
        g_clear_error(&err);
        blk_error_clear();
        return 0;
    }
    exercise(img);

    BlkInfo info = {0};
    (void)img->drv->get_info(img, &info);
    blk_info_clear(&info);
    BlkCheckResult res = {.messages = g_ptr_array_new_with_free_func(g_free)};
    (void)img->drv->check(img, &res, 0);
    blk_check_result_clear(&res);
    blk_close(img);
    blk_error_clear();
    return 0;
}
