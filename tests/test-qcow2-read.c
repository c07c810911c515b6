/*
 * tests/test-qcow2-read.c: differential tests of the qcow2 read path
 * against qemu-img 7.2 (the oracle).
 *
 * Every image is made by qemu-img / qemu-io; every byte read through the
 * driver is compared with `qemu-img convert -O raw` of the same image (and
 * snapshot), and for single-layer images the layer's block status is
 * compared with `qemu-img map --output=json`.  Skipped without qemu-img.
 *
 * Covers read.c invariants 1-5, cluster.c invariants 2 and 3, compress.c
 * invariants 1 and 2, snapshot.c invariants 1, 4 and 5, qcow2.c invariants
 * 3, 4 and 8, qcow2.h invariant 4, header.c invariant 3 and block.c
 * invariant 3.  Every image is opened read-only, so read.c invariant 6 (the
 * in-flight list of writable images) is not exercised here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "api/api.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *run_out(const char *fmt, ...) G_GNUC_PRINTF(1, 2);

/* Run a shell command in tu_tmpdir() (tu_run_status: posix_spawn, no fork of
 * this process); assert success; return its output. */
static char *run_out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *cmd = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    char *out = NULL;

    if (tu_run_status(&out, "%s", cmd) != 0) {
        fprintf(stderr, "command failed: %s\n%s", cmd, out ? out : "");
        fail();
    }
    return out;
}

#define run(...) g_free(run_out(__VA_ARGS__))

static BlkNode *open_img(const char *path, const char *snapshot, GError **err)
{
    BlkOpenOptions o = {.read_only = true, .snapshot = snapshot};
    return api_open_node(path, &o, NULL, err);
}

/* ---- qemu-img map --output=json, single layer ---- */

typedef struct MapEntry {
    uint64_t start, length, offset;
    bool present, zero, data, has_offset;
} MapEntry;

static uint64_t json_u64(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    assert_non_null(p);
    return g_ascii_strtoull(p + strlen(key), NULL, 10);
}

static bool json_bool(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    assert_non_null(p);
    return strncmp(p + strlen(key), "true", 4) == 0;
}

static GArray *qemu_map(const char *path)
{
    g_autofree char *out = run_out("qemu-img map --output=json '%s'", path);
    g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
    GArray *a = g_array_new(FALSE, TRUE, sizeof(MapEntry));

    for (int i = 0; lines[i]; i++) {
        if (!strstr(lines[i], "\"start\"")) {
            continue;
        }
        MapEntry e = {
            .start = json_u64(lines[i], "\"start\": "),
            .length = json_u64(lines[i], "\"length\": "),
            .present = json_bool(lines[i], "\"present\": "),
            .zero = json_bool(lines[i], "\"zero\": "),
            .data = json_bool(lines[i], "\"data\": "),
            .has_offset = strstr(lines[i], "\"offset\": ") != NULL,
        };
        if (e.has_offset) {
            e.offset = json_u64(lines[i], "\"offset\": ");
        }
        g_array_append_val(a, e);
    }
    return a;
}

/* Our layer's answers, turned into qemu-img map entries the way QEMU's
 * generic layer and img_map do it (no backing file). */
static GArray *our_map(BlkNode *img)
{
    GArray *a = g_array_new(FALSE, TRUE, sizeof(MapEntry));
    uint64_t off = 0;

    while (off < img->size) {
        BlkStatus st;
        assert_int_equal(img->drv->block_status(img, off, img->size - off, &st), 0);
        assert_true(st.pnum > 0 && st.pnum <= img->size - off);
        unsigned f = st.flags;
        if (f & (BLK_STATUS_DATA | BLK_STATUS_ZERO)) {
            f |= BLK_STATUS_ALLOCATED;
        } else if (!img->backing) {
            f |= BLK_STATUS_ZERO;
        }
        MapEntry e = {
            .start = off,
            .length = st.pnum,
            .present = f & BLK_STATUS_ALLOCATED,
            .zero = f & BLK_STATUS_ZERO,
            .data = f & BLK_STATUS_DATA,
            .has_offset = f & BLK_STATUS_OFFSET_VALID,
            .offset = st.map,
        };
        MapEntry *last = a->len ? &g_array_index(a, MapEntry, a->len - 1) : NULL;
        if (last && last->present == e.present && last->zero == e.zero &&
            last->data == e.data && last->has_offset == e.has_offset &&
            (!e.has_offset || last->offset + last->length == e.offset)) {
            last->length += e.length;
        } else {
            g_array_append_val(a, e);
        }
        off += st.pnum;
    }
    return a;
}

/* read.c invariant 5: this layer's block status, merged as img_map merges
 * it, is qemu-img map's: flags, lengths and host offsets (contiguous within
 * an extent, cluster.c invariant 3). */
static void compare_map(const char *path, BlkNode *img)
{
    g_autoptr(GArray) q = qemu_map(path);
    g_autoptr(GArray) o = our_map(img);

    for (guint i = 0; i < MAX(q->len, o->len); i++) {
        if (i >= q->len || i >= o->len) {
            fprintf(stderr, "%s: map has %u entries, qemu-img %u\n", path, o->len,
                    q->len);
            fail();
        }
        MapEntry *a = &g_array_index(q, MapEntry, i), *b = &g_array_index(o, MapEntry, i);
        if (a->start != b->start || a->length != b->length || a->present != b->present ||
            a->zero != b->zero || a->data != b->data || a->has_offset != b->has_offset ||
            (a->has_offset && a->offset != b->offset)) {
            fprintf(stderr,
                    "%s: map entry %u differs: qemu start %" PRIu64 " len %" PRIu64
                    " p%d z%d d%d off %d/%" PRIu64 "; ours start %" PRIu64 " len %" PRIu64
                    " p%d z%d d%d off %d/%" PRIu64 "\n",
                    path, i, a->start, a->length, a->present, a->zero, a->data,
                    a->has_offset, a->offset, b->start, b->length, b->present, b->zero,
                    b->data, b->has_offset, b->offset);
            fail();
        }
    }
}

/* ---- byte comparison ---- */

static void read_compare(BlkNode *img, const uint8_t *raw, uint64_t off, size_t len,
                         uint8_t *buf)
{
    memset(buf, 0xa5, len);
    int ret = blk_pread(img, off, buf, len);
    if (ret < 0) {
        fprintf(stderr, "read at %" PRIu64 "+%zu failed: %s\n", off, len,
                blk_error_message());
    }
    assert_int_equal(ret, 0);
    if (memcmp(buf, raw + off, len) != 0) {
        for (size_t i = 0; i < len; i++) {
            if (buf[i] != raw[off + i]) {
                fprintf(stderr, "mismatch at %" PRIu64 ": ours 0x%02x qemu 0x%02x\n",
                        off + i, buf[i], raw[off + i]);
                break;
            }
        }
        fail();
    }
}

/* Read the whole image in several chunkings plus random requests and
 * compare with qemu-img; for single-layer images compare the map too.
 * sample (0 or a cluster size): in make test (not QIMG_LONG), the
 * 4093-byte chunking reads only the first and last eighth of each cluster
 * of that size, at most 32 KiB each (its boundaries, where a read crosses
 * two), and 75 random requests instead of 300 (at offsets anywhere in a
 * cluster): a small read of a compressed cluster inflates all of it, and
 * the whole pass cost 22 s of make test's CPU under ASan on 2 MiB clusters
 * (256 KiB each side still took 6 of the program's 16 s, 64 KiB clusters
 * 2 s), repeating what the sampled reads check. */
static void compare_image_(const char *path, const char *snapshot, uint64_t sample)
{
    size_t raw_len;
    g_autofree uint8_t *raw = tu_qemu_raw(path, snapshot, &raw_len);
    g_autoptr(GError) err = NULL;
    BlkNode *img = open_img(path, snapshot, &err);

    if (!img) {
        fprintf(stderr, "open %s: %s\n", path, err->message);
        fail();
    }
    /* qcow2.c invariant 3: the virtual size (all sizes here are 512-aligned) */
    assert_int_equal(img->size, raw_len);
    const size_t chunks[] = {1 << 20, 65536 + 511, 4093};
    g_autofree uint8_t *buf = g_malloc(1 << 20);
    if (tu_long_run()) {
        sample = 0;
    }
    const uint64_t edge = MIN(sample / 8, 32 << 10);
    for (size_t c = 0; c < G_N_ELEMENTS(chunks); c++) {
        for (uint64_t off = 0; off < raw_len; off += chunks[c]) {
            uint64_t in = sample ? off % sample : 0;
            if (chunks[c] < 65536 && sample && in >= edge &&
                in + chunks[c] <= sample - edge) {
                continue;
            }
            read_compare(img, raw, off, MIN(chunks[c], raw_len - off), buf);
        }
    }
    GRand *r = g_rand_new_with_seed(raw_len);
    for (int i = 0; i < (sample ? 75 : 300) && raw_len > 0; i++) {
        uint64_t off = (uint64_t)g_rand_double_range(r, 0, (double)raw_len);
        uint64_t want = (uint64_t)g_rand_int_range(r, 1, 300000);
        size_t len = (size_t)MIN(want, raw_len - off);
        if (len) {
            read_compare(img, raw, off, len, buf);
        }
    }
    g_rand_free(r);
    if (!img->backing_filename && !snapshot) {
        compare_map(path, img);
    }
    blk_close(img);
}

static void compare_image(const char *path, const char *snapshot)
{
    compare_image_(path, snapshot, 0);
}

/* A standard write pattern: unaligned data, zero writes, discards, tail. */
static void scribble(const char *path, uint64_t size, bool v3)
{
    run("qemu-io -f qcow2 -c 'write -P 0x11 0 3k' -c 'write -P 0x22 7000 70001' "
        "-c 'write -P 0x33 1M 1M' -c 'write -P 0x44 %" PRIu64 " 4k' "
        "-c 'write -P 0x55 300k 300k' %s -c 'discard 1152k 128k' '%s' >/dev/null",
        size - 4096, v3 ? "-c 'write -z 320k 128k' -c 'write -z 2M 64k'" : "", path);
}

/*
 * The smallest and largest cluster sizes QEMU allows open (header.c
 * invariant 3: cluster_bits 9..21), v2 and v3: reads cross many L2 tables
 * (cluster.c invariant 2: an extent stops at each), unallocated clusters read
 * as zeros (read.c invariant 3), v3 zero clusters too.
 */
static void test_cluster_sizes(void **state)
{
    TU_REQUIRE_QEMU();
    const unsigned sizes[] = {512, 1024, 4096, 16384, 65536, 1u << 21};
    for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
        for (int v = 2; v <= 3; v++) {
            g_autofree char *p = tu_fresh("cs");
            run("qemu-img create -q -f qcow2 -o cluster_size=%u,compat=%s '%s' 9M",
                sizes[i], v == 2 ? "0.10" : "1.1", p);
            scribble(p, 9 << 20, v == 3);
            compare_image(p, NULL);
        }
    }
}

/* Every refcount width (header.c invariant 3: refcount_order <= 6), with a
 * snapshot sharing the clusters from 2 bits on, reads as qemu-img reads it. */
static void test_refcount_widths(void **state)
{
    TU_REQUIRE_QEMU();
    for (int bits = 1; bits <= 64; bits *= 2) {
        g_autofree char *p = tu_fresh("rc");
        run("qemu-img create -q -f qcow2 -o refcount_bits=%d,cluster_size=4096 '%s' 4M",
            bits, p);
        scribble(p, 4 << 20, true);
        if (bits > 1) {
            run("qemu-img snapshot -c snap '%s'", p);
            run("qemu-io -f qcow2 -c 'write -P 0x66 0 64k' '%s' >/dev/null", p);
        }
        compare_image(p, NULL);
    }
}

static void make_source_raw(const char *path, size_t len)
{
    g_autofree uint8_t *b = g_malloc0(len);
    GRand *r = g_rand_new_with_seed(42);
    for (size_t at = 0; at < len; at += 40000) {
        size_t region = (at / 40000) % 4, end = MIN(at + 40000, len);
        if (region == 1) {
            tu_fill_random(r, b + at, end - at); /* incompressible */
            continue;
        }
        for (size_t i = at; region != 2 && i < end; i++) { /* region 2: zeros */
            b[i] = region == 0 ? (uint8_t) "qcow2 compressible text "[i % 24]
                               : (uint8_t)(i / 512);
        }
    }
    g_rand_free(r);
    assert_true(g_file_set_contents(path, (char *)b, (gssize)len, NULL));
}

/*
 * Compressed clusters (zlib and zstd, 512 B to 2 MiB clusters) among plain
 * ones: the descriptor layout (compress.c invariant 1), decompression of
 * exactly one cluster (compress.c invariant 2, read.c invariant 4), an extent
 * never spans two compressed clusters (cluster.c invariant 2), block status
 * DATA|COMPRESSED without an offset (read.c invariant 5).  The compression
 * type is qemu-img info's.
 */
static void test_compressed(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *src = tu_fresh("src");
    make_source_raw(src, (3 << 20) + 512 * 7);
    const char *types[] = {"zlib", "zstd"};
    const unsigned sizes[] = {512, 4096, 65536, 1u << 21};
    for (size_t t = 0; t < 2; t++) {
        for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
            g_autofree char *p = tu_fresh("comp");
            run("qemu-img convert -c -O qcow2 -o compression_type=%s,cluster_size=%u "
                "'%s' '%s'",
                types[t], sizes[i], src, p);
            /* partly overwritten, so compressed and plain clusters mix */
            run("qemu-io -f qcow2 -c 'write -P 0x77 100k 5k' '%s' >/dev/null", p);
            /* 64 KiB and 2 MiB clusters sampled in make test (compare_image_) */
            compare_image_(p, NULL, sizes[i] >= 65536 ? sizes[i] : 0);
            g_autoptr(GError) err = NULL;
            BlkNode *img = open_img(p, NULL, &err);
            assert_non_null(img);
            BlkInfo info = {0};
            assert_int_equal(img->drv->get_info(img, &info), 0);
            assert_string_equal(info.compression_type, types[t]);
            g_free(info.compat);
            g_free(info.compression_type);
            g_array_unref(info.snapshots);
            blk_close(img);
        }
    }
}

/*
 * Extended L2 entries, with and without a backing file: extents of one
 * subcluster type (cluster.c invariant 3), unallocated subclusters read from
 * the backing file (read.c invariant 3); without one, an unallocated
 * subcluster of an allocated cluster maps as OFFSET_VALID alone (read.c
 * invariant 5).
 */
static void test_extended_l2(void **state)
{
    TU_REQUIRE_QEMU();
    const unsigned sizes[] = {16384, 65536, 1u << 21};
    for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
        g_autofree char *base = tu_fresh("xbase");
        g_autofree char *p = tu_fresh("xl2");
        run("qemu-img create -q -f qcow2 '%s' 8M", base);
        run("qemu-io -f qcow2 -c 'write -P 0x99 0 8M' '%s' >/dev/null", base);
        for (int with_backing = 0; with_backing <= 1; with_backing++) {
            if (with_backing) {
                run("qemu-img create -q -f qcow2 -o extended_l2=on,cluster_size=%u "
                    "-b '%s' -F qcow2 '%s' 8M",
                    sizes[i], base, p);
            } else {
                run("qemu-img create -q -f qcow2 -o extended_l2=on,cluster_size=%u '%s' "
                    "8M",
                    sizes[i], p);
            }
            run("qemu-io -f qcow2 -c 'write -P 1 4k 4k' -c 'write -z 16k 2k' "
                "-c 'write -P 2 33k 1k' -c 'write -P 3 1M 100k' -c 'write -z 1040k 3k' "
                "-c 'discard 1088k 64k' -c 'write -P 4 3M 1M' -c 'write -z 3200k 4k' "
                "'%s' >/dev/null",
                p);
            compare_image(p, NULL);
        }
    }
}

/*
 * A three-layer chain (a v2 overlay on top) over a raw file shorter than the
 * overlays: unallocated clusters read from the backing node (read.c
 * invariant 3), zeros past a backing node's end (read.c invariant 2,
 * block.c invariant 3), zero clusters hide the backing data.
 */
static void test_backing_chain(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *raw = tu_fresh("rawbase");
    g_autofree char *base = tu_fresh("base");
    g_autofree char *mid = tu_fresh("mid");
    g_autofree char *top = tu_fresh("top");

    make_source_raw(raw, 1 << 20); /* shorter than the overlays */
    run("qemu-img create -q -f qcow2 -b '%s' -F raw '%s' 2M", raw, base);
    run("qemu-io -f qcow2 -c 'write -P 0x10 512k 700k' '%s' >/dev/null", base);
    run("qemu-img create -q -f qcow2 -o cluster_size=4096 -b '%s' -F qcow2 '%s' 4M", base,
        mid);
    run("qemu-io -f qcow2 -c 'write -P 0x20 100k 10k' -c 'write -z 900k 300k' '%s' "
        ">/dev/null",
        mid);
    run("qemu-img create -q -f qcow2 -o compat=0.10 -b '%s' -F qcow2 '%s' 6M", mid, top);
    run("qemu-io -f qcow2 -c 'write -P 0x30 0 4k' -c 'write -P 0x31 3M 2M' '%s' "
        ">/dev/null",
        top);
    compare_image(base, NULL);
    compare_image(mid, NULL);
    compare_image(top, NULL);

    g_autoptr(GError) err = NULL;
    BlkNode *img = open_img(top, NULL, &err);
    assert_non_null(img);
    assert_string_equal(img->backing_format, "qcow2");
    assert_non_null(img->backing);
    assert_non_null(img->backing->backing);
    blk_close(img);
}

/*
 * Snapshot views, as qemu-img convert -l reads them: lookup by ID first, then
 * by name (snapshot.c invariant 5); a view keeps the current virtual size
 * after a resize and reads the clusters past the snapshot's L1 as
 * unallocated (snapshot.c invariant 4); disk_size from the extra data
 * (snapshot.c invariant 1).
 */
static void test_snapshots(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("snap");
    run("qemu-img create -q -f qcow2 '%s' 16M", p);
    run("qemu-io -f qcow2 -c 'write -P 0xa1 0 2M' '%s' >/dev/null", p);
    run("qemu-img snapshot -c first '%s'", p);
    run("qemu-io -f qcow2 -c 'write -P 0xa2 1M 2M' -c 'write -z 0 64k' '%s' >/dev/null",
        p);
    run("qemu-img snapshot -c 2 '%s'", p); /* a name that is another's ID */
    run("qemu-img resize -q '%s' 20M", p);
    run("qemu-io -f qcow2 -c 'write -P 0xa3 17M 1M' '%s' >/dev/null", p);

    compare_image(p, NULL);
    compare_image(p, "first");
    compare_image(p, "1");
    compare_image(p, "2"); /* ID 2 first: the snapshot named "2" is also ID 2 */

    g_autoptr(GError) err = NULL;
    BlkNode *img = open_img(p, "nosuch", &err);
    assert_null(img);
    /* qemu-img convert -l's message for a missing snapshot */
    assert_non_null(strstr(err->message, "Failed to load snapshot: Can't find snapshot"));

    g_clear_error(&err);
    img = open_img(p, NULL, &err);
    assert_non_null(img);
    BlkInfo info = {0};
    assert_int_equal(img->drv->get_info(img, &info), 0);
    assert_int_equal(info.snapshots->len, 2);
    BlkSnapshotInfo *s0 = &g_array_index(info.snapshots, BlkSnapshotInfo, 0);
    assert_string_equal(s0->id, "1");
    assert_string_equal(s0->name, "first");
    /* snapshot.c invariant 1: disk_size from the extra data, not the current 20M */
    assert_int_equal(s0->disk_size, 16 << 20);
    for (guint i = 0; i < info.snapshots->len; i++) {
        BlkSnapshotInfo *si = &g_array_index(info.snapshots, BlkSnapshotInfo, i);
        g_free(si->id);
        g_free(si->name);
    }
    g_array_unref(info.snapshots);
    g_free(info.compat);
    g_free(info.compression_type);
    blk_close(img);
}

/* An external data file, raw or not: guest data is read from the data file
 * node only (qcow2.c invariant 4), at the guest offset the map reports; the
 * data file name and data_file_raw are qemu-img info's. */
static void test_data_file(void **state)
{
    TU_REQUIRE_QEMU();
    for (int raw = 0; raw <= 1; raw++) {
        g_autofree char *p = tu_fresh("df");
        g_autofree char *d = g_strdup_printf("%s.data", p);
        g_autofree char *dbase = g_path_get_basename(d);
        run("qemu-img create -q -f qcow2 -o data_file='%s',data_file_raw=%s '%s' 4M",
            dbase, raw ? "on" : "off", p);
        scribble(p, 4 << 20, true);
        compare_image(p, NULL);

        g_autoptr(GError) err = NULL;
        BlkNode *img = open_img(p, NULL, &err);
        assert_non_null(img);
        BlkInfo info = {0};
        assert_int_equal(img->drv->get_info(img, &info), 0);
        assert_string_equal(info.data_file, dbase);
        assert_int_equal(info.data_file_raw, raw);
        g_free(info.data_file);
        g_free(info.compat);
        g_free(info.compression_type);
        g_array_unref(info.snapshots);
        blk_close(img);
    }
}

/* preallocation=metadata, falloc, full: the map follows QEMU's
 * metadata-preallocation heuristic, so data clusters that are holes in the
 * file map as zeros (read.c invariant 5, QEMU's BDRV_BLOCK_RECURSE). */
static void test_preallocation(void **state)
{
    TU_REQUIRE_QEMU();
    const char *modes[] = {"metadata", "falloc", "full"};
    for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
        g_autofree char *p = tu_fresh("prealloc");
        run("qemu-img create -q -f qcow2 -o preallocation=%s '%s' 3M", modes[i], p);
        run("qemu-io -f qcow2 -c 'write -P 0x12 64k 64k' '%s' >/dev/null", p);
        compare_image(p, NULL);
    }
}

/* A dirty image (lazy refcounts, qemu-io abort) opened read-only reads as it
 * is and stays dirty: only a read-write open repairs (qcow2.c invariant 8). */
static void test_dirty_lazy_refcounts(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("dirty");
    run("qemu-img create -q -f qcow2 -o lazy_refcounts=on '%s' 2M", p);
    /* abort leaves the dirty bit set */
    g_free(run_out("qemu-io -f qcow2 -c 'write -P 0x42 0 64k' -c abort '%s' >/dev/null "
                   "2>&1 || true",
                   p));
    compare_image(p, NULL);
    g_autoptr(GError) err = NULL;
    BlkNode *img = open_img(p, NULL, &err);
    assert_non_null(img);
    BlkInfo info = {0};
    assert_int_equal(img->drv->get_info(img, &info), 0);
    assert_true(info.dirty);
    assert_true(info.lazy_refcounts);
    assert_string_equal(info.compat, "1.1");
    g_free(info.compat);
    g_free(info.compression_type);
    g_array_unref(info.snapshots);
    blk_close(img);
}

/* Random unaligned reads from several threads, multi-segment vectors. */
typedef struct ThreadArg {
    BlkNode *img;
    const uint8_t *raw;
    size_t len;
    unsigned seed;
    int failures;
} ThreadArg;

static gpointer reader_thread(gpointer p)
{
    ThreadArg *a = p;
    GRand *r = g_rand_new_with_seed(a->seed);
    g_autofree uint8_t *buf = g_malloc(400000);

    for (int i = 0; i < 400; i++) {
        uint64_t off = (uint64_t)g_rand_double_range(r, 0, (double)a->len);
        uint64_t want = (uint64_t)g_rand_int_range(r, 1, 400000);
        size_t len = (size_t)MIN(want, a->len - off);
        size_t cut1 = len / 3, cut2 = len / 3 + len / 5;
        struct iovec iov[3] = {
            {buf, cut1}, {buf + cut1, cut2 - cut1}, {buf + cut2, len - cut2}};
        BlkIOV q;
        iov_init_external(&q, iov, 3);
        if (len == 0) {
            continue;
        }
        if (blk_preadv(a->img, off, &q, 0) < 0 || memcmp(buf, a->raw + off, len) != 0) {
            a->failures++;
        }
    }
    g_rand_free(r);
    return NULL;
}

/*
 * Four readers at once over compressed, plain and zero clusters: the lock is
 * held only for lookups (read.c invariant 1), each request decompresses into
 * its own buffers (read.c invariant 4), and with a tiny metadata cache the
 * lookups evict each other's L2 tables while no reference to one is kept
 * after the lock is dropped (qcow2.h invariant 4).
 */
static void test_random_parallel(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *src = tu_fresh("rsrc");
    g_autofree char *p = tu_fresh("rand");
    make_source_raw(src, 6 << 20);
    /* a mix: compressed clusters, then plain writes, zero writes */
    run("qemu-img convert -c -O qcow2 -o cluster_size=4096 '%s' '%s'", src, p);
    run("qemu-io -f qcow2 -c 'write -P 0x61 1234567 345678' -c 'write -z 2M 1M' "
        "-c 'write -P 0x62 5M 999' '%s' >/dev/null",
        p);
    size_t raw_len;
    g_autofree uint8_t *raw = tu_qemu_raw(p, NULL, &raw_len);
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.read_only = true, .metadata_cache_size = 16384};
    BlkNode *img = api_open_node(p, &o, NULL, &err); /* tiny cache: evictions */
    assert_non_null(img);

    ThreadArg args[4];
    GThread *th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (ThreadArg){.img = img, .raw = raw, .len = raw_len, .seed = 7 + i};
        th[i] = g_thread_new("reader", reader_thread, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        g_thread_join(th[i]);
        assert_int_equal(args[i].failures, 0);
    }
    blk_close(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_sizes),
        cmocka_unit_test(test_refcount_widths),
        cmocka_unit_test(test_compressed),
        cmocka_unit_test(test_extended_l2),
        cmocka_unit_test(test_backing_chain),
        cmocka_unit_test(test_snapshots),
        cmocka_unit_test(test_data_file),
        cmocka_unit_test(test_preallocation),
        cmocka_unit_test(test_dirty_lazy_refcounts),
        cmocka_unit_test(test_random_parallel),
    };
    return tu_run_group_tests("qcow2-read", tests);
}
