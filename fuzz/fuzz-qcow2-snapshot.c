/*
 * fuzz/fuzz-qcow2-snapshot.c: libFuzzer target for the internal snapshot
 * table: its codec (qcow2/snapshot-codec.c) under the rules of a normal
 * open (qcow2/snapshot.c) and of the check with its repairs (repair.c:
 * dropping extra data and overhanging entries, completing v3 entries,
 * rewriting the table through snapshot-write.c), and the snapshot view
 * (convert -l).
 *
 * Input: byte 0 (bit 0: compat 0.10 instead of 1.1), bytes 1-2 the number
 * of snapshots (big-endian), the rest the snapshot table; or a whole qcow2
 * image (the seeds in fuzz/seeds), whose version, snapshot count and table
 * are taken.  The table is placed in
 * a small valid image (4 KiB clusters: header, refcount table and block,
 * L1, L2, one data cluster, the table from cluster 6 on, all refcounted),
 * so the fuzzer spends its time in the table and the snapshot L1 tables
 * it points to.
 *
 * Properties (besides crashes, sanitizer reports, leaks, hangs): when the
 * repair (-r all) ran to its end and a check afterwards finds nothing, the
 * image opens normally and lists as many snapshots as the header says.
 */
#include "block/block.h"
#include "api/api.h"
#include "fuzz/fuzz-util.h"
#include "qcow2/check.h"
#include "qcow2/qcow2.h"
#include "qimg/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CB 12
#define CS (1u << CB)
#define TABLE_CLUSTER 6
#define MAX_TABLE (64u << 10)

static const Qcow2CheckOptions opts = {
    .replay_budget = 1u << 20,
    .bad_budget = 1u << 20,
};

static const char *scratch_dir;
static char *image_path;
static char *repair_path;

static void init_scratch(void)
{
    scratch_dir = fuzz_scratch_dir("snap");
    image_path = g_build_filename(scratch_dir, "image.qcow2", NULL);
    repair_path = g_build_filename(scratch_dir, "repair.qcow2", NULL);
}

/* The image around the table (see the top comment). */
static GByteArray *build_image(bool v2, uint32_t nb, const uint8_t *table, size_t len)
{
    size_t table_clusters = (len + CS - 1) / CS;
    size_t clusters = TABLE_CLUSTER + MAX(table_clusters, 1);
    GByteArray *a = g_byte_array_sized_new((guint)(clusters * CS));
    uint8_t *b;

    g_byte_array_set_size(a, (guint)(clusters * CS));
    b = a->data;
    memset(b, 0, clusters * CS);
    store_be32(b + QCOW2_HDR_MAGIC, QCOW2_MAGIC);
    store_be32(b + QCOW2_HDR_VERSION, v2 ? 2 : 3);
    store_be32(b + QCOW2_HDR_CLUSTER_BITS, CB);
    store_be64(b + QCOW2_HDR_SIZE, 1 << 20);
    store_be32(b + QCOW2_HDR_L1_SIZE, 1);
    store_be64(b + QCOW2_HDR_L1_TABLE_OFFSET, 3 * CS);
    store_be64(b + QCOW2_HDR_REFCOUNT_TABLE_OFFSET, 1 * CS);
    store_be32(b + QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS, 1);
    store_be32(b + QCOW2_HDR_NB_SNAPSHOTS, nb);
    store_be64(b + QCOW2_HDR_SNAPSHOTS_OFFSET, nb ? TABLE_CLUSTER * CS : 0);
    if (!v2) {
        store_be32(b + QCOW2_HDR_REFCOUNT_ORDER, 4);
        store_be32(b + QCOW2_HDR_HEADER_LENGTH, QCOW2_HDR_V3_FULL_LENGTH);
    }
    store_be64(b + 1 * CS, 2 * CS); /* reftable[0] -> refblock */
    for (size_t i = 0; i < clusters; i++) {
        store_be16(b + 2 * CS + 2 * i, 1);
    }
    store_be64(b + 3 * CS, 4 * CS); /* L1[0] -> L2 (shared with snapshots) */
    store_be64(b + 4 * CS, 5 * CS); /* L2[0] -> data */
    memset(b + 5 * CS, 0xab, CS);
    memcpy(b + TABLE_CLUSTER * CS, table, len);
    return a;
}

static BlkNode *open_image(const char *path, bool rw, bool check_mode,
                           const char *snapshot)
{
    BlkOpenOptions o = {.format = "qcow2",
                        .read_only = !rw,
                        .no_backing = true,
                        .check_mode = check_mode,
                        .snapshot = snapshot};
    GError *err = NULL;
    BlkNode *img = api_open_node(path, &o, NULL, &err);

    g_clear_error(&err);
    blk_error_clear();
    return img;
}

static bool check(const char *path, bool rw, unsigned fix, bool *ran)
{
    BlkNode *img = open_image(path, rw, true, NULL);
    BlkCheckResult res = {0};
    bool clean;

    *ran = false;
    if (!img) {
        return false;
    }
    *ran = qcow2_check_image_opts(img, &res, fix, &opts) == 0;
    clean = *ran && res.corruptions == 0 && res.leaks == 0 && res.check_errors == 0;
    blk_check_result_clear(&res);
    blk_close(img);
    blk_error_clear();
    return clean;
}

/* Open normally, list the snapshots and read through the first few. */
static int list_and_view(const char *path)
{
    BlkNode *img = open_image(path, false, false, NULL);
    BlkInfo info = {0};
    char *ids[4] = {0};
    int n = -1;

    if (!img) {
        return -1;
    }
    if (img->drv->get_info(img, &info) == 0 && info.snapshots) {
        n = (int)info.snapshots->len;
        for (guint i = 0; i < info.snapshots->len; i++) {
            BlkSnapshotInfo *si = &g_array_index(info.snapshots, BlkSnapshotInfo, i);
            if (i < G_N_ELEMENTS(ids)) {
                ids[i] = g_strdup(si->id);
            }
            g_free(si->id);
            g_free(si->name);
        }
        g_array_unref(info.snapshots);
    }
    g_free(info.compat);
    g_free(info.compression_type);
    g_free(info.data_file);
    blk_close(img);

    for (size_t i = 0; i < G_N_ELEMENTS(ids); i++) {
        if (!ids[i]) {
            continue;
        }
        BlkNode *view = open_image(path, false, false, ids[i]);
        if (view) {
            uint8_t buf[CS];
            (void)blk_pread(view, 0, buf, sizeof(buf));
            blk_close(view);
        }
        g_free(ids[i]);
    }
    blk_error_clear();
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autoptr(GByteArray) image = NULL;
    bool ran;

    if (!scratch_dir) {
        init_scratch();
    }
    if (size >= QCOW2_HDR_V2_LENGTH && load_be32(data) == QCOW2_MAGIC) {
        /* a seed image: its table */
        uint32_t nb = load_be32(data + QCOW2_HDR_NB_SNAPSHOTS);
        uint64_t off = load_be64(data + QCOW2_HDR_SNAPSHOTS_OFFSET);
        size_t len = off < size ? (size_t)MIN(size - off, (uint64_t)MAX_TABLE) : 0;
        image = build_image(load_be32(data + QCOW2_HDR_VERSION) == 2, MIN(nb, 0xffffu),
                            data + (len ? off : 0), len);
    } else if (size >= 3 && size - 3 <= MAX_TABLE) {
        image = build_image(data[0] & 1, load_be16(data + 1), data + 3, size - 3);
    } else {
        return 0;
    }
    if (!g_file_set_contents(image_path, (const char *)image->data, image->len, NULL) ||
        !g_file_set_contents(repair_path, (const char *)image->data, image->len, NULL)) {
        abort();
    }

    (void)list_and_view(image_path);
    (void)check(image_path, false, 0, &ran);

    (void)check(repair_path, true, BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS, &ran);
    if (ran && check(repair_path, false, 0, &ran)) {
        g_autofree char *bytes = NULL;
        gsize len;
        int n = list_and_view(repair_path);

        if (!g_file_get_contents(repair_path, &bytes, &len, NULL) ||
            len < QCOW2_HDR_V2_LENGTH) {
            abort();
        }
        if (n != (int)load_be32(bytes + QCOW2_HDR_NB_SNAPSHOTS)) {
            fprintf(stderr,
                    "a repaired snapshot table that checked clean lists %d of "
                    "%u snapshots\n",
                    n, load_be32(bytes + QCOW2_HDR_NB_SNAPSHOTS));
            abort();
        }
    }
    blk_error_clear();
    return 0;
}
