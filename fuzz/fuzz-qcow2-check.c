/*
 * fuzz/fuzz-qcow2-check.c: libFuzzer target for qcow2 check and repair
 * (qcow2/check*.c, qcow2/repair.c).
 *
 * Each input (at most 1 MiB) is written to a scratch file, opened in check
 * mode without its backing chain and checked; then a copy is opened
 * read-write and repaired (-r all), and checked again.  Besides crashes,
 * sanitizer reports, leaks and hangs, one property is a finding: when the
 * repair ran to its end and the check after it found nothing (no
 * corruption, leak or internal error), the repaired file must open
 * normally (read-only, not in check mode).
 *
 * The work budgets of check.c invariant 4 are lowered so that every input
 * finishes quickly; the paths they guard are the same.
 */
#include "block/block.h"
#include "api/api.h"
#include "fuzz/fuzz-qcow2.h"
#include "fuzz/fuzz-util.h"
#include "qcow2/check.h"
#include "qcow2/qcow2.h"
#include "qimg/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_FUZZ_MAX_INPUT (1u << 20)

static const Qcow2CheckOptions opts = {
    .replay_budget = 1u << 20,
    .bad_budget = 1u << 20,
};

static const char *scratch_dir;
static char *image_path;
static char *repair_path;

static void init_scratch(void)
{
    scratch_dir = fuzz_scratch_dir("check");
    image_path = g_build_filename(scratch_dir, "image.qcow2", NULL);
    repair_path = g_build_filename(scratch_dir, "repair.qcow2", NULL);
}

static BlkNode *open_image(const char *path, bool rw, bool check_mode)
{
    BlkOpenOptions o = {.format = "qcow2",
                        .read_only = !rw,
                        .no_backing = true,
                        .check_mode = check_mode,
                        .metadata_cache_size = 1 << 20};
    GError *err = NULL;
    BlkNode *img = api_open_node(path, &o, NULL, &err);

    g_clear_error(&err);
    blk_error_clear();
    return img;
}

/* Check (fix: repair) the image at path; true if the check ran to its end
 * and found nothing. */
static bool check(const char *path, bool rw, unsigned fix, bool *ran)
{
    BlkNode *img = open_image(path, rw, true);
    BlkCheckResult res = {0};
    bool clean;

    *ran = false;
    if (!img) {
        return false;
    }
    *ran = qcow2_check_image_opts(img, &res, fix, &opts) == 0;
    blk_error_clear();
    clean = *ran && res.corruptions == 0 && res.leaks == 0 && res.check_errors == 0;
    blk_check_result_clear(&res);
    blk_close(img);
    blk_error_clear();
    return clean;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool ran;

    if (!scratch_dir) {
        init_scratch();
    }
    if (size > CHECK_FUZZ_MAX_INPUT || !fuzz_qcow2_data_file_is_safe(data, size)) {
        return 0;
    }
    if (!g_file_set_contents(image_path, (const char *)data, (gssize)size, NULL) ||
        !g_file_set_contents(repair_path, (const char *)data, (gssize)size, NULL)) {
        abort();
    }

    (void)check(image_path, false, 0, &ran);

    /* repair, then the double check of qemu-img check -r all */
    (void)check(repair_path, true, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &ran);
    if (ran && check(repair_path, false, 0, &ran)) {
        /* an image the repair left clean must open normally */
        BlkNode *img = open_image(repair_path, false, false);
        if (!img) {
            fprintf(stderr, "a repaired image that checked clean does not open\n");
            abort();
        }
        blk_close(img);
    }
    blk_error_clear();
    return 0;
}
