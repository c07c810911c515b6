/*
 * tests/test-qcow2-create.c: qcow2 image creation (qcow2/create.c: the
 * driver's allocator, resize and preallocation on a minimal image).
 *
 * The expected layouts are facts read from images qemu-img 7.2 made with
 * the same options (offsets, table contents, file length); when qemu-img
 * is installed, some option sets are also compared byte for byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qimg/qimg.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static char *tmpdir;
static int counter;

static char *tmp_path(const char *name)
{
    return g_strdup_printf("%s/%s-%d", tmpdir, name, counter++);
}

/* Create 'path' as qcow2 with -o style options "k=v,k=v" (may be NULL). */
static gboolean create(const char *path, uint64_t size, const char *optlist,
                       const char *backing, const char *backing_fmt, GError **error)
{
    g_autoptr(GHashTable) h =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    QimgCreateOptions co = {.struct_size = sizeof(QimgCreateOptions)};

    if (optlist) {
        g_auto(GStrv) parts = g_strsplit(optlist, ",", -1);
        for (char **p = parts; *p; p++) {
            char *eq = strchr(*p, '=');
            g_assert_nonnull(eq);
            g_hash_table_replace(h, g_strndup(*p, eq - *p), g_strdup(eq + 1));
        }
    }
    co.format = "qcow2";
    co.size = size;
    co.size_set = true;
    co.backing_file = backing;
    co.backing_format = backing_fmt;
    co.options = h;
    return qimg_image_create(path, &co, error);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    gchar *buf = NULL;
    gsize n = 0;
    assert_true(g_file_get_contents(path, &buf, &n, NULL));
    *len = n;
    return (uint8_t *)buf;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The default image: 64 MiB, 64 KiB clusters, v3. */
static void test_default_layout(void **state)
{
    g_autofree char *path = tmp_path("default.qcow2");
    g_autofree uint8_t *d = NULL;
    size_t len;
    GError *err = NULL;

    (void)state;
    assert_true(create(path, 64 << 20, NULL, NULL, NULL, &err));
    d = slurp(path, &len);
    assert_int_equal(len, 0x30008); /* the L1 table is written with its exact size */
    assert_int_equal(load_be32(d + QCOW2_HDR_MAGIC), QCOW2_MAGIC);
    assert_int_equal(load_be32(d + QCOW2_HDR_VERSION), 3);
    assert_int_equal(load_be32(d + QCOW2_HDR_CLUSTER_BITS), 16);
    assert_int_equal(load_be64(d + QCOW2_HDR_SIZE), 64 << 20);
    assert_int_equal(load_be32(d + QCOW2_HDR_L1_SIZE), 1);
    assert_int_equal(load_be64(d + QCOW2_HDR_L1_TABLE_OFFSET), 0x30000);
    assert_int_equal(load_be64(d + QCOW2_HDR_REFCOUNT_TABLE_OFFSET), 0x10000);
    assert_int_equal(load_be32(d + QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS), 1);
    assert_int_equal(load_be32(d + QCOW2_HDR_REFCOUNT_ORDER), 4);
    assert_int_equal(load_be32(d + QCOW2_HDR_HEADER_LENGTH), 112);
    assert_int_equal(load_be64(d + QCOW2_HDR_INCOMPATIBLE_FEATURES), 0);
    /* feature name table: 8 names */
    assert_int_equal(load_be32(d + 112), QCOW2_EXT_FEATURE_TABLE);
    assert_int_equal(load_be32(d + 116), 384);
    assert_string_equal((const char *)d + 120 + 2, "dirty bit");
    assert_string_equal((const char *)d + 120 + 7 * 48 + 2, "raw external data");
    assert_int_equal(load_be32(d + 120 + 384), 0); /* end of extensions */
    /* refcount table -> block at cluster 2; clusters 0..3 in use */
    assert_int_equal(load_be64(d + 0x10000), 0x20000);
    assert_int_equal(load_be64(d + 0x10008), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(load_be16(d + 0x20000 + i * 2), 1);
    }
    assert_int_equal(load_be16(d + 0x20008), 0);
    assert_int_equal(load_be64(d + 0x30000), 0);
    unlink(path);
}

/* Small clusters: the L1 table outgrows the first refcount block, so two
 * self-describing refcount blocks follow it (qemu-img: 0x40600, 0x40800). */
static void test_small_clusters(void **state)
{
    g_autofree char *path = tmp_path("small.qcow2");
    g_autofree uint8_t *d = NULL;
    size_t len;
    GError *err = NULL;

    (void)state;
    assert_true(create(path, UINT64_C(1) << 30, "cluster_size=512", NULL, NULL, &err));
    d = slurp(path, &len);
    assert_int_equal(len, 264704);
    assert_int_equal(load_be32(d + QCOW2_HDR_L1_SIZE), 32768);
    assert_int_equal(load_be64(d + QCOW2_HDR_L1_TABLE_OFFSET), 0x600);
    assert_int_equal(load_be64(d + QCOW2_HDR_REFCOUNT_TABLE_OFFSET), 0x200);
    assert_int_equal(load_be64(d + 0x200), 0x400);
    assert_int_equal(load_be64(d + 0x208), 0x40600);
    assert_int_equal(load_be64(d + 0x210), 0x40800);
    assert_int_equal(load_be64(d + 0x218), 0);
    /* no feature table with clusters of 4 KiB and less */
    assert_int_equal(load_be32(d + 112), 0);
    unlink(path);
}

static void test_prealloc_metadata(void **state)
{
    g_autofree char *path = tmp_path("meta.qcow2");
    g_autofree uint8_t *d = NULL;
    size_t len;
    GError *err = NULL;

    (void)state;
    /* unaligned end: the last cluster gets its zero tail written */
    assert_true(create(path, 100000, "preallocation=metadata", NULL, NULL, &err));
    d = slurp(path, &len);
    assert_int_equal(len, 0x70000);
    assert_int_equal(load_be64(d + 0x30000), 0x40000 | QCOW2_OFLAG_COPIED);
    assert_int_equal(load_be64(d + 0x40000), 0x50000 | QCOW2_OFLAG_COPIED);
    assert_int_equal(load_be64(d + 0x40008), 0x60000 | QCOW2_OFLAG_COPIED);
    assert_int_equal(load_be64(d + 0x40010), 0);
    assert_int_equal(load_be64(d + QCOW2_HDR_SIZE), 100352); /* rounded to 512 */
    unlink(path);
}

/* falloc: new refcount structures after the L1 table, the data right after
 * them, the L2 table in the freed first refcount table. */
static void test_prealloc_falloc(void **state)
{
    g_autofree char *path = tmp_path("falloc.qcow2");
    g_autofree uint8_t *d = NULL;
    size_t len;
    GError *err = NULL;

    (void)state;
    assert_true(create(path, 200 << 20, "preallocation=falloc", NULL, NULL, &err));
    d = slurp(path, &len);
    assert_int_equal(len, 210042880);
    assert_int_equal(load_be64(d + QCOW2_HDR_REFCOUNT_TABLE_OFFSET), 0x40000);
    assert_int_equal(load_be64(d + 0x40000), 0x20000);
    assert_int_equal(load_be64(d + 0x30000), 0x10000 | QCOW2_OFLAG_COPIED);
    assert_int_equal(load_be64(d + 0x10000), 0x50000 | QCOW2_OFLAG_COPIED);
    assert_int_equal(load_be64(d + 0x10000 + 3199 * 8),
                     (0x50000 + UINT64_C(3199) * 65536) | QCOW2_OFLAG_COPIED);
    unlink(path);
}

static void test_backing_and_features(void **state)
{
    g_autofree char *path = tmp_path("top.qcow2");
    g_autofree uint8_t *d = NULL;
    size_t len;
    GError *err = NULL;

    (void)state;
    assert_true(
        create(path, 1 << 20,
               "compression_type=zstd,extended_l2=on,lazy_refcounts=on,refcount_bits=64",
               "base.img", "raw", &err));
    d = slurp(path, &len);
    assert_int_equal(load_be64(d + QCOW2_HDR_INCOMPATIBLE_FEATURES),
                     QCOW2_INCOMPAT_COMPRESSION | QCOW2_INCOMPAT_EXTL2);
    assert_int_equal(load_be64(d + QCOW2_HDR_COMPATIBLE_FEATURES),
                     QCOW2_COMPAT_LAZY_REFCOUNTS);
    assert_int_equal(load_be32(d + QCOW2_HDR_REFCOUNT_ORDER), 6);
    assert_int_equal(d[QCOW2_HDR_COMPRESSION_TYPE], QCOW2_COMPRESSION_ZSTD);
    /* backing format extension first, then the feature table */
    assert_int_equal(load_be32(d + 112), QCOW2_EXT_BACKING_FORMAT);
    assert_int_equal(load_be32(d + 116), 3);
    assert_memory_equal(d + 120, "raw\0\0\0\0\0", 8);
    assert_int_equal(load_be32(d + 128), QCOW2_EXT_FEATURE_TABLE);
    assert_int_equal(load_be64(d + QCOW2_HDR_BACKING_FILE_OFFSET), 128 + 8 + 384 + 8);
    assert_int_equal(load_be32(d + QCOW2_HDR_BACKING_FILE_SIZE), 8);
    assert_memory_equal(d + 528, "base.img", 8);
    unlink(path);
}

static void test_data_file(void **state)
{
    g_autofree char *path = tmp_path("df.qcow2");
    g_autofree char *data = tmp_path("df.raw");
    g_autofree char *opt = g_strdup_printf("data_file=%s,data_file_raw=on", data);
    g_autofree uint8_t *d = NULL;
    struct stat st;
    size_t len;
    GError *err = NULL;

    (void)state;
    assert_true(create(path, 1 << 20, opt, NULL, NULL, &err));
    d = slurp(path, &len);
    assert_int_equal(len, 0x50000); /* data_file_raw implies metadata preallocation */
    assert_int_equal(load_be64(d + QCOW2_HDR_INCOMPATIBLE_FEATURES),
                     QCOW2_INCOMPAT_DATA_FILE);
    assert_int_equal(load_be64(d + QCOW2_HDR_AUTOCLEAR_FEATURES),
                     QCOW2_AUTOCLEAR_DATA_FILE_RAW);
    assert_int_equal(load_be32(d + 112), QCOW2_EXT_DATA_FILE);
    assert_int_equal(load_be32(d + 116), strlen(data));
    assert_memory_equal(d + 120, data, strlen(data));
    /* identity mapping: guest cluster n at data file offset n */
    assert_int_equal(load_be64(d + 0x40000), QCOW2_OFLAG_COPIED);
    assert_int_equal(load_be64(d + 0x40008), 0x10000 | QCOW2_OFLAG_COPIED);
    assert_int_equal(stat(data, &st), 0);
    assert_int_equal(st.st_size, 1 << 20);
    unlink(path);
    unlink(data);
}

static void expect_error(const char *opts, const char *backing, const char *fmt,
                         const char *message)
{
    g_autofree char *path = tmp_path("bad.qcow2");
    GError *err = NULL;

    g_assert_true(g_file_set_contents(path, "old", 3, NULL));
    assert_false(create(path, 64 << 20, opts, backing, fmt, &err));
    assert_non_null(err);
    if (strcmp(err->message, message) != 0) {
        fprintf(stderr, "got '%s'\nwant '%s'\n", err->message, message);
        fail();
    }
    g_error_free(err);
    /* create.c invariant 2: qemu-img removes the file */
    assert_false(file_exists(path));
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("compat=0.11", NULL, NULL,
                 "Parameter 'version' does not accept value '0.11'");
    expect_error("compat=0.10,lazy_refcounts=on", NULL, NULL,
                 "Lazy refcounts only supported with compatibility level 1.1 and above "
                 "(use version=v3 or greater)");
    expect_error("refcount_bits=3", NULL, NULL,
                 "Refcount width must be a power of two and may not exceed 64 bits");
    expect_error("compat=0.10,refcount_bits=8", NULL, NULL,
                 "Different refcount widths than 16 bits require compatibility level 1.1 "
                 "or above (use version=v3 or greater)");
    expect_error("cluster_size=1000", NULL, NULL,
                 "Cluster size must be a power of two between 512 and 2048k");
    expect_error("extended_l2=on,cluster_size=8192", NULL, NULL,
                 "Extended L2 entries are only supported with cluster sizes of at least "
                 "16384 bytes");
    expect_error("compression_type=lz4", NULL, NULL,
                 "Parameter 'compression-type' does not accept value 'lz4'");
    expect_error("data_file_raw=on", NULL, NULL, "data-file-raw requires data-file");
    expect_error("preallocation=metadata", "base.img", "raw",
                 "Backing file and preallocation can only be used at the same time if "
                 "extended_l2 is on");
    expect_error("backing_fmt=raw", NULL, NULL,
                 "Backing format cannot be used without backing file");
    expect_error("compat=0.10,compression_type=zstd", NULL, NULL,
                 "Non-zlib compression type is only supported with compatibility level "
                 "1.1 and above (use version=v3 or greater)");
}

static void test_too_large(void **state)
{
    g_autofree char *path = tmp_path("huge.qcow2");
    GError *err = NULL;

    (void)state;
    assert_false(create(path, UINT64_C(129) << 30, "cluster_size=512", NULL, NULL, &err));
    assert_string_equal(err->message, "The image size is too large for file format "
                                      "'qcow2' (try using a larger cluster size)");
    g_error_free(err);
    assert_false(file_exists(path));
}

/* ---- byte-for-byte against qemu-img, when installed ---- */

/* From 'off', the next byte that is not in a hole of fd (SEEK_DATA; the
 * file's length past the last data, or 'off' if holes cannot be found). */
static off_t next_data(int fd, off_t off, off_t len)
{
    off_t d = lseek(fd, off, SEEK_DATA);
    if (d >= 0) {
        return d;
    }
    return errno == ENXIO ? len : off;
}

/* Files a and b are byte for byte the same.  Ranges that are holes in both
 * are skipped (a preallocated image is mostly holes: reading gigabytes of
 * zeros would tell nothing more); all else is read and compared. */
static bool same_contents(const char *a, const char *b)
{
    int fa = open(a, O_RDONLY), fb = open(b, O_RDONLY);
    const size_t chunk = 1 << 20;
    g_autofree uint8_t *ba = g_malloc(chunk), *bb = g_malloc(chunk);
    struct stat sa, sb;
    bool same = false;
    off_t off = 0;

    assert_true(fa >= 0 && fb >= 0);
    assert_int_equal(fstat(fa, &sa), 0);
    assert_int_equal(fstat(fb, &sb), 0);
    if (sa.st_size != sb.st_size) {
        fprintf(stderr, "%s: %lld bytes, %s: %lld bytes\n", a, (long long)sa.st_size, b,
                (long long)sb.st_size);
        goto out;
    }
    while (off < sa.st_size) {
        off = MIN(next_data(fa, off, sa.st_size), next_data(fb, off, sa.st_size));
        if (off >= sa.st_size) {
            break;
        }
        size_t n = (size_t)MIN((off_t)chunk, sa.st_size - off);
        if (pread(fa, ba, n, off) != (ssize_t)n || pread(fb, bb, n, off) != (ssize_t)n) {
            fprintf(stderr, "short read at %lld\n", (long long)off);
            goto out;
        }
        if (memcmp(ba, bb, n) != 0) {
            fprintf(stderr, "%s and %s differ in [%lld, +%zu)\n", a, b, (long long)off,
                    n);
            goto out;
        }
        off += (off_t)n;
    }
    same = true;
out:
    close(fa);
    close(fb);
    return same;
}

static void compare_with_qemu(uint64_t size, const char *opts)
{
    g_autofree char *mine = tmp_path("mine.qcow2");
    g_autofree char *theirs = tmp_path("theirs.qcow2");
    g_autofree char *cmd =
        g_strdup_printf("qemu-img create -q -f qcow2 %s%s '%s' %" PRIu64,
                        opts ? "-o " : "", opts ? opts : "", theirs, size);
    int status = 0;
    GError *err = NULL;

    assert_true(g_spawn_command_line_sync(cmd, NULL, NULL, &status, NULL));
    assert_int_equal(status, 0);
    assert_true(create(mine, size, opts, NULL, NULL, &err));
    if (!same_contents(theirs, mine)) {
        fprintf(stderr, "-o %s, size %" PRIu64 ": images differ\n", opts ? opts : "",
                size);
        fail();
    }
    unlink(mine);
    unlink(theirs);
}

static void test_same_as_qemu_img(void **state)
{
    (void)state;
    TU_REQUIRE_QEMU_IMG();
    compare_with_qemu(64 << 20, NULL);
    compare_with_qemu(0, NULL);
    compare_with_qemu(UINT64_C(3) << 30, "compat=0.10");
    compare_with_qemu(UINT64_C(10) << 30, "cluster_size=512,refcount_bits=64");
    compare_with_qemu(UINT64_C(1) << 30, "cluster_size=2097152,preallocation=metadata");
    compare_with_qemu(100 << 20,
                      "cluster_size=1024,refcount_bits=1,preallocation=metadata");
    compare_with_qemu(300 << 20,
                      "cluster_size=4096,preallocation=falloc,extended_l2=off");
    compare_with_qemu(33 << 20, "extended_l2=on,preallocation=full,refcount_bits=2");
    compare_with_qemu(12345 << 10, "lazy_refcounts=on,compression_type=zstd");
    /* the refcount table is replaced while metadata is preallocated */
    compare_with_qemu(16 << 20, "cluster_size=512,preallocation=metadata");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_layout),
        cmocka_unit_test(test_small_clusters),
        cmocka_unit_test(test_prealloc_metadata),
        cmocka_unit_test(test_prealloc_falloc),
        cmocka_unit_test(test_backing_and_features),
        cmocka_unit_test(test_data_file),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_same_as_qemu_img),
    };
    const char *base = getenv("QIMG_TEST_TMPDIR");
    int ret;

    tmpdir = g_strdup_printf("%s/qcow2-create-XXXXXX", base ? base : g_get_tmp_dir());
    if (!g_mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    ret = tu_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
    (void)rmdir(tmpdir);
    return ret;
}
