/*
 * fuzz/fuzz-qcow2-open.c: libFuzzer target for everything the qcow2 driver
 * parses: header, extensions, L1/L2 entries, refcounts, snapshot table,
 * compressed clusters.
 *
 * Each input is written to a scratch file and opened read-only as qcow2
 * (no backing chain; an external data file only under a plain name, which
 * resolves inside the scratch directory).  Then: read the whole disk in
 * chunks (up to 16 MiB of it), walk the block status, query the info, and
 * do the same through the first snapshot's read-only view.  Any crash,
 * sanitizer report, leak or hang is a bug (DESIGN.md on-disk rule 4).
 */
#include "block/block.h"
#include "api/api.h"
#include "fuzz/fuzz-qcow2.h"
#include "fuzz/fuzz-util.h"
#include "qcow2/qcow2.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CAP (16u << 20)
#define CHUNK (256u << 10)

static const char *scratch_dir;
static char *image_path;

static void init_scratch(void)
{
    scratch_dir = fuzz_scratch_dir("open");
    image_path = g_build_filename(scratch_dir, "image.qcow2", NULL);
    /* a data file the input may name */
    g_autofree char *data = g_build_filename(scratch_dir, "data.raw", NULL);
    g_autofree uint8_t *bytes = g_malloc(65536);
    for (size_t i = 0; i < 65536; i++) {
        bytes[i] = (uint8_t)(i * 7);
    }
    g_file_set_contents(data, (const char *)bytes, 65536, NULL);
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
    /* an unaligned read across the first clusters */
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
    if (!fuzz_qcow2_data_file_is_safe(data, size)) {
        return 0;
    }
    if (!g_file_set_contents(image_path, (const char *)data, (gssize)size, NULL)) {
        abort();
    }

    BlkOpenOptions o = {.format = "qcow2",
                        .read_only = true,
                        .no_backing = true,
                        .metadata_cache_size = 1 << 20};
    GError *err = NULL;
    BlkNode *img = api_open_node(image_path, &o, NULL, &err);
    if (!img) {
        g_clear_error(&err);
        blk_error_clear();
        return 0;
    }
    exercise(img);

    BlkInfo info = {0};
    char *snap = NULL;
    if (img->drv->get_info(img, &info) == 0 && info.snapshots &&
        info.snapshots->len > 0) {
        snap = g_strdup(g_array_index(info.snapshots, BlkSnapshotInfo, 0).name);
    }
    blk_info_clear(&info);
    blk_close(img);

    if (snap) {
        o.snapshot = snap;
        img = api_open_node(image_path, &o, NULL, &err);
        if (img) {
            exercise(img);
            blk_close(img);
        }
        g_clear_error(&err);
        g_free(snap);
    }
    blk_error_clear();
    return 0;
}
