/*
 * Unit tests for vmdk/: the descriptor parser (desc.c invariants 1-3), the
 * header codecs (header.c invariants 1, 2), grain-table lookups (map.c
 * invariants 1, 3, 4) and the image-name rule (names.c invariants 1-3).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qimg/qimg.h"
#include "vmdk/vmdk.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char *tmpdir;

static int setup(void **state)
{
    const char *base = g_getenv("QIMG_TEST_TMPDIR");
    g_autofree char *tmpl =
        g_build_filename(base ? base : g_get_tmp_dir(), "vmdk-XXXXXX", NULL);
    tmpdir = g_mkdtemp(g_steal_pointer(&tmpl));
    return tmpdir ? 0 : -1;
}

static int teardown(void **state)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", tmpdir);
    assert_int_equal(system(cmd), 0);
    g_free(tmpdir);
    return 0;
}

/* desc.c invariant 2: values found as QEMU finds them. */
static void test_desc_values(void **state)
{
    const char *d = "# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=1a2b\n"
                    "createType=\"twoGbMaxExtentSparse\"\n"
                    "parentFileNameHint=\"base.vmdk\"\n";
    char ct[128], small[4];
    uint32_t cid = 0;
    g_autofree char *parent = NULL;

    assert_int_equal(vmdk_desc_value(d, "createType", ct, sizeof(ct)), 0);
    assert_string_equal(ct, "twoGbMaxExtentSparse");
    assert_int_equal(vmdk_desc_value(d, "createType", small, sizeof(small)), -EINVAL);
    assert_int_equal(vmdk_desc_value(d, "nothing", ct, sizeof(ct)), -ENOENT);
    assert_int_equal(vmdk_desc_cid(d, false, &cid), 0);
    assert_int_equal(cid, 0xfffffffe);
    assert_int_equal(vmdk_desc_cid(d, true, &cid), 0);
    assert_int_equal(cid, 0x1a2b);
    assert_int_equal(vmdk_desc_parent_hint(d, &parent), 0);
    assert_string_equal(parent, "base.vmdk");
    /* "CID" is found inside "parentCID" when that comes first (QEMU) */
    assert_int_equal(vmdk_desc_cid("parentCID=5\nCID=7\n", false, &cid), 0);
    assert_int_equal(cid, 5);
    assert_int_equal(vmdk_desc_cid("CID=xyz\n", false, &cid), -EINVAL);
    assert_int_equal(vmdk_desc_cid("CID", false, &cid), -EINVAL);
    /* a 33-bit value keeps its low 32 bits, as scanf's %x */
    assert_int_equal(vmdk_desc_cid("CID=1ffffffff\n", false, &cid), 0);
    assert_int_equal(cid, 0xffffffff);
    /* a hint at the very end, and one without its closing quote */
    g_clear_pointer(&parent, g_free);
    assert_int_equal(vmdk_desc_parent_hint("parentFileNameHint", &parent), -EINVAL);
    assert_int_equal(vmdk_desc_parent_hint("parentFileNameHint=\"abc", &parent), -EINVAL);
    assert_int_equal(vmdk_desc_parent_hint("no parent", &parent), 0);
    assert_null(parent);
}

static GArray *extents(const char *d, int *ret)
{
    GArray *a = g_array_new(false, false, sizeof(VmdkExtentLine));
    blk_error_clear();
    *ret = vmdk_desc_extents(d, a);
    return a;
}

/* desc.c invariant 3. */
static void test_desc_extents(void **state)
{
    int ret;
    g_autoptr(GArray) a = extents("# Extent description\n"
                                  "RW 4194304 SPARSE \"x-s001.vmdk\"\n"
                                  "RDONLY 100 FLAT \"ro.vmdk\" 0\n"
                                  "RW 0 FLAT \"empty.vmdk\" 0\n"
                                  "RW 100 ZERO \"zero\"\n"
                                  "\n"
                                  "RW 2048 FLAT \"f.vmdk\" 8\r\n"
                                  "RW 16 VMFS \"v.vmdk\"\n"
                                  "NOACCESS 16 SPARSE \"n.vmdk\"\n",
                                  &ret);

    assert_int_equal(ret, 0);
    assert_int_equal(a->len, 3); /* RW lines of known types, size > 0 */
    VmdkExtentLine *l = &g_array_index(a, VmdkExtentLine, 0);
    assert_string_equal(l->type, "SPARSE");
    assert_int_equal(l->sectors, 4194304);
    assert_string_equal(l->name, "x-s001.vmdk");
    l = &g_array_index(a, VmdkExtentLine, 1);
    assert_string_equal(l->type, "FLAT");
    assert_int_equal(l->offset, 8);
    l = &g_array_index(a, VmdkExtentLine, 2);
    assert_string_equal(l->type, "VMFS");
    assert_int_equal(l->offset, 0);

    /* a blank line does not borrow the next line's fields (invariant 3) */
    g_autoptr(GArray) b = extents("\nRW 16 FLAT \"f\" 0\n", &ret);
    assert_int_equal(ret, 0);
    assert_int_equal(b->len, 1);

    static const char *const invalid[] = {
        "RW 16 FLAT \"f\"\n",      /* no offset */
        "RW 16 FLAT \"f\" -1\n",   /* negative offset */
        "RW 16 VMFS \"f\" 0\n",    /* VMFS takes none */
        "RW 16 SPARSE \"f\" 4\n",  /* nor does SPARSE */
        "RW 16 UNKNOWN \"f\" 4\n", /* fields the type does not take */
    };
    for (size_t i = 0; i < G_N_ELEMENTS(invalid); i++) {
        g_autoptr(GArray) c = extents(invalid[i], &ret);
        assert_int_equal(ret, -EINVAL);
        assert_non_null(strstr(blk_error_message(), "Invalid extent line: RW 16"));
        assert_null(strchr(blk_error_message(), '\n'));
    }
    blk_error_clear();

    /* a name of 511 characters is taken whole; longer ones are cut as
     * QEMU's %511[...] cuts them (then the closing quote is missing) */
    g_autofree char *long_name = g_strnfill(600, 'n');
    g_autofree char *line = g_strdup_printf("RW 16 SPARSE \"%s\"\n", long_name);
    g_autoptr(GArray) d = extents(line, &ret);
    assert_int_equal(ret, 0);
    assert_int_equal(d->len, 1);
    assert_int_equal(strlen(g_array_index(d, VmdkExtentLine, 0).name), 511);

    /* huge and overflowing numbers do not wrap */
    g_autoptr(GArray) e = extents("RW 99999999999999999999999 FLAT \"f\" 0\n", &ret);
    assert_int_equal(ret, 0);
    assert_int_equal(g_array_index(e, VmdkExtentLine, 0).sectors, INT64_MAX);

    /* bounded count */
    GString *many = g_string_new(NULL);
    for (unsigned i = 0; i <= VMDK_MAX_EXTENTS; i++) {
        g_string_append(many, "RW 1 FLAT \"f\" 0\n");
    }
    g_autoptr(GArray) f = extents(many->str, &ret);
    assert_int_equal(ret, -EFBIG);
    g_string_free(many, true);
    blk_error_clear();
}

/* header.c invariants 1, 2: round trip, and QEMU's seSparse/footer checks. */
static void test_headers(void **state)
{
    uint8_t buf[VMDK_SECTOR] = {0}, foot[VMDK_FOOTER_BYTES] = {0};
    Vmdk4Header h = {.version = 3,
                     .flags = VMDK4_FLAG_RGD | VMDK4_FLAG_COMPRESS | VMDK4_FLAG_MARKER,
                     .capacity = 0x123456789ull,
                     .granularity = 128,
                     .desc_offset = 1,
                     .desc_size = 20,
                     .num_gtes = 512,
                     .rgd_offset = 21,
                     .gd_offset = VMDK4_GD_AT_END,
                     .grain_offset = 128,
                     .compress_algorithm = 1},
                h2;
    VmdkSeSparseHeader se;

    vmdk4_header_encode(&h, buf);
    assert_memory_equal(buf, "KDMV", 4);
    assert_memory_equal(buf + VMDK4_HDR_CHECK_BYTES, "\n \r\n", 4);
    vmdk4_header_decode(buf, &h2);
    assert_int_equal(h2.version, h.version);
    assert_int_equal(h2.flags, h.flags);
    assert_int_equal(h2.capacity, h.capacity);
    assert_int_equal(h2.granularity, h.granularity);
    assert_int_equal(h2.desc_offset, h.desc_offset);
    assert_int_equal(h2.desc_size, h.desc_size);
    assert_int_equal(h2.num_gtes, h.num_gtes);
    assert_int_equal(h2.rgd_offset, h.rgd_offset);
    assert_int_equal(h2.gd_offset, h.gd_offset);
    assert_int_equal(h2.grain_offset, h.grain_offset);
    assert_int_equal(h2.compress_algorithm, h.compress_algorithm);

    /* footer: marker, header, end of stream */
    vmdk_marker_encode(foot, 1, VMDK_MARKER_FOOTER);
    h.gd_offset = 777;
    vmdk4_header_encode(&h, foot + VMDK_SECTOR);
    vmdk_marker_encode(foot + 2 * VMDK_SECTOR, 0, VMDK_MARKER_EOS);
    assert_int_equal(vmdk_footer_decode(foot, &h2), 0);
    assert_int_equal(h2.gd_offset, 777);
    foot[2 * VMDK_SECTOR + VMDK_MARKER_TYPE] = 2;
    assert_int_equal(vmdk_footer_decode(foot, &h2), -EINVAL);
    assert_string_equal(blk_error_message(), "Invalid footer");
    blk_error_clear();

    /* seSparse const header */
    memset(buf, 0, sizeof(buf));
    store_le64(buf + SESPARSE_CONST_MAGIC, SESPARSE_CONST_MAGIC_VALUE);
    store_le64(buf + SESPARSE_CONST_VERSION, SESPARSE_VERSION);
    store_le64(buf + SESPARSE_CONST_GRAIN_SIZE, 8);
    store_le64(buf + SESPARSE_CONST_GT_SIZE, 64);
    store_le64(buf + SESPARSE_CONST_GD_OFFSET, 2);
    assert_int_equal(vmdk_sesparse_const_decode(buf, &se), 0);
    assert_int_equal(se.gd_offset, 2);
    buf[SESPARSE_CONST_PAD + 10] = 1;
    assert_int_equal(vmdk_sesparse_const_decode(buf, &se), -ENOTSUP);
    assert_string_equal(blk_error_message(), "Unsupported non-zero const header padding");
    blk_error_clear();
    store_le64(buf + SESPARSE_CONST_GRAIN_SIZE, 16);
    assert_int_equal(vmdk_sesparse_const_decode(buf, &se), -ENOTSUP);
    assert_string_equal(blk_error_message(), "Unsupported grain size: 16");
    blk_error_clear();
}

static void make_file(const char *name, const char *data)
{
    g_autofree char *p = g_build_filename(tmpdir, name, NULL);
    assert_true(g_file_set_contents(p, data, -1, NULL));
}

/* names.c invariants 1-3. */
static void test_names(void **state)
{
    g_autofree char *img = g_build_filename(tmpdir, "img.vmdk", NULL);
    g_autofree char *sub = g_build_filename(tmpdir, "sub", NULL);
    g_autofree char *link = g_build_filename(tmpdir, "evil.vmdk", NULL);
    g_autofree char *path = NULL;
    static const char *const refused[] = {
        "/etc/passwd", "../x.vmdk", "sub/../../x", "json:{}", "nbd://h/x",
        "file:x.vmdk", "evil.vmdk", "sub",         "",
    };

    make_file("ext.vmdk", "x");
    assert_int_equal(g_mkdir_with_parents(sub, 0755), 0);
    make_file("sub/e.vmdk", "x");
    assert_int_equal(symlink("/etc/hostname", link), 0);

    assert_int_equal(blk_image_name_path(img, true, "extent", "ext.vmdk", false, &path),
                     0);
    g_autofree char *want = g_build_filename(tmpdir, "ext.vmdk", NULL);
    assert_string_equal(path, want);
    g_clear_pointer(&path, g_free);
    assert_int_equal(blk_image_name_path(img, true, "extent", "sub/e.vmdk", false, &path),
                     0);
    g_clear_pointer(&path, g_free);
    /* a name that does not exist is left to the open */
    assert_int_equal(blk_image_name_path(img, true, "extent", "none.vmdk", false, &path),
                     0);
    g_clear_pointer(&path, g_free);
    /* QEMU's path for a name without a folder */
    assert_int_equal(blk_image_name_path("i.vmdk", true, "extent", "e.vmdk", true, &path),
                     0);
    assert_string_equal(path, "e.vmdk");
    g_clear_pointer(&path, g_free);

    for (size_t i = 0; i < G_N_ELEMENTS(refused); i++) {
        blk_error_clear();
        int ret = blk_image_name_path(img, true, "extent", refused[i], false, &path);
        assert_true(ret < 0);
        assert_null(path);
        assert_non_null(strstr(blk_error_message(), "extent"));
    }
    /* trusted: QEMU's paths, nothing refused but the empty name */
    assert_int_equal(blk_image_name_path(img, true, "extent", "/etc/passwd", true, &path),
                     0);
    assert_string_equal(path, "/etc/passwd");
    g_clear_pointer(&path, g_free);
    assert_int_equal(blk_image_name_path(img, true, "extent", "evil.vmdk", true, &path),
                     0);
    g_clear_pointer(&path, g_free);
    /* an image that is not a file has no folder */
    blk_error_clear();
    assert_int_equal(blk_image_name_path("nbd://h/x", false, "extent", "e", true, &path),
                     -EINVAL);
    blk_error_clear();
}

/* The entry of grain g in the grain table at sector gt of file name. */
static uint32_t gte_on_disk(const char *name, uint64_t gt, unsigned g)
{
    uint8_t b[4];
    FILE *f = fopen(name, "rb");

    assert_non_null(f);
    assert_int_equal(fseek(f, (long)(gt * 512 + g * 4), SEEK_SET), 0);
    assert_int_equal(fread(b, 1, 4, f), 4);
    fclose(f);
    return load_le32(b);
}

/* write.c invariants 1 and 3, map.c invariant 5, create.c invariant 2:
 * a 4 MiB monolithicSparse image has its redundant table at sector 22,
 * its table at 27 and its first grain at 128; entries reach both tables
 * only at a flush; a zeroed grain is entry 1; the CID is renewed. */
static void test_write_order(void **state)
{
    g_autofree char *img = g_build_filename(tmpdir, "w.vmdk", NULL);
    g_autoptr(GHashTable) o = g_hash_table_new(g_str_hash, g_str_equal);
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    uint8_t buf[4096], want[4096];
    g_autofree char *d0 = NULL, *d1 = NULL;
    GError *err = NULL;
    QimgImage *im;

    g_hash_table_insert(o, "zeroed_grain", "on");
    co.format = "vmdk";
    co.size = 4 << 20;
    co.size_set = true;
    co.options = o;
    assert_true(qimg_image_create(img, &co, &err));
    assert_true(g_file_get_contents(img, &d0, NULL, NULL));
    im = qimg_image_open(img, &oo, &err);
    assert_non_null(im);
    memset(want, 0x5a, sizeof(want));
    assert_true(qimg_image_pwrite(im, 70000, want, 1000, &err));
    assert_int_equal(gte_on_disk(img, 27, 1), 0); /* not before the flush */
    assert_int_equal(gte_on_disk(img, 22, 1), 0);
    assert_true(qimg_image_flush(im, &err));
    assert_int_equal(gte_on_disk(img, 27, 1), 128);
    assert_int_equal(gte_on_disk(img, 22, 1), 128);
    assert_true(qimg_image_pwrite_zeroes(im, 131072, 65536, QIMG_ZERO_NO_FALLBACK, &err));
    assert_true(qimg_image_close(im, &err));
    assert_int_equal(gte_on_disk(img, 27, 2), VMDK_GTE_ZEROED);
    assert_int_equal(gte_on_disk(img, 22, 2), VMDK_GTE_ZEROED);
    assert_true(g_file_get_contents(img, &d1, NULL, NULL));
    assert_true(strstr(d0 + 512, "\nCID="));
    assert_memory_not_equal(strstr(d0 + 512, "\nCID="), strstr(d1 + 512, "\nCID="), 14);

    oo.read_only = true;
    im = qimg_image_open(img, &oo, &err);
    assert_non_null(im);
    assert_true(qimg_image_pread(im, 69632, buf, sizeof(buf), &err));
    memset(want, 0, sizeof(want));
    memset(want + 368, 0x5a, 1000);
    assert_memory_equal(buf, want, sizeof(buf));
    assert_true(qimg_image_close(im, &err));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_desc_values), cmocka_unit_test(test_desc_extents),
        cmocka_unit_test(test_headers),     cmocka_unit_test(test_names),
        cmocka_unit_test(test_write_order),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
