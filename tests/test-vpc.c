/*
 * tests/test-vpc.c: the VHD driver -- codec round trips (vpc/codec.c
 * invariant 1), the size rules (codec.c invariant 2, create.c invariant 1),
 * open validation with QEMU's messages (vpc.c invariant 1), the BAT reaching
 * the disk only at a flush (vpc.c invariant 4), and qemu-img reading what
 * qimg wrote.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/endian.h"
#include "test-util.h"
#include "vpc/vpc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static void test_codec_round_trip(void **state)
{
    VpcFooter f = {0}, g;
    VpcDynHeader h = {0}, k;
    uint8_t buf[VPC_DYN_HEADER_SIZE];

    memcpy(f.cookie, "conectix", 8);
    f.features = 2;
    f.version = 0x10000;
    f.data_offset = 512;
    f.timestamp = 0x12345678;
    memcpy(f.creator_app, "win ", 4);
    f.creator_major = 6;
    f.creator_minor = 1;
    memcpy(f.creator_os, "Wi2k", 4);
    f.orig_size = 1ull << 33;
    f.current_size = (1ull << 33) + 512;
    f.cyls = 1000;
    f.heads = 16;
    f.secs_per_cyl = 63;
    f.type = VPC_TYPE_DIFFERENCING;
    for (int i = 0; i < 16; i++) {
        f.uuid[i] = (uint8_t)(i * 7);
    }
    f.saved_state = 1;
    vpc_footer_encode(&f, buf);
    assert_true(vpc_has_cookie(buf));
    vpc_footer_decode(buf, &g);
    assert_memory_equal(&f, &g, sizeof(f));
    assert_int_equal(vpc_checksum(buf, VPC_FOOTER_SIZE, VPC_F_CHECKSUM), g.checksum);
    for (int i = VPC_F_END; i < VPC_FOOTER_SIZE; i++) {
        assert_int_equal(buf[i], 0); /* reserved bytes */
    }
    assert_int_equal(load_be64(buf + VPC_F_CURRENT_SIZE), f.current_size);

    memcpy(h.cookie, "cxsparse", 8);
    h.data_offset = VPC_NO_OFFSET;
    h.table_offset = 1536;
    h.version = 0x10000;
    h.max_table_entries = 4096;
    h.block_size = 1 << 21;
    h.parent_timestamp = 77;
    h.parent_name[1] = 'p';
    for (int i = 0; i < VPC_PARENT_LOCATORS; i++) {
        h.loc[i].platform = VPC_PLAT_W2RU + (uint32_t)i;
        h.loc[i].data_space = (uint32_t)i;
        h.loc[i].data_length = 100 + (uint32_t)i;
        h.loc[i].data_offset = 4096u * (uint64_t)i;
    }
    vpc_dyn_header_encode(&h, buf);
    vpc_dyn_header_decode(buf, &k);
    assert_memory_equal(&h, &k, sizeof(h));
    assert_int_equal(vpc_checksum(buf, VPC_DYN_HEADER_SIZE, VPC_D_CHECKSUM), k.checksum);
}

/* codec.c invariant 2: CHS unless the creator sizes by current_size. */
static void test_virtual_size(void **state)
{
    VpcFooter f = {0};

    vpc_chs(64 * 2048, &f.cyls, &f.heads, &f.secs_per_cyl);
    assert_int_equal((uint64_t)f.cyls * f.heads * f.secs_per_cyl,
                     130968); /* rounds down */
    f.current_size = 64 << 20;
    memcpy(f.creator_app, "vpc ", 4);
    assert_int_equal(vpc_virtual_size(&f, false, false), 130968 * 512ull);
    /* force_size_calc=current_size (codec.c invariant 2) */
    assert_int_equal(vpc_virtual_size(&f, false, true), 64 << 20);
    memcpy(f.creator_app, "win ", 4); /* Hyper-V */
    assert_int_equal(vpc_virtual_size(&f, false, false), 64 << 20);
    /* force_size_calc=chs */
    assert_int_equal(vpc_virtual_size(&f, true, false), 130968 * 512ull);
    memcpy(f.creator_app, "qemu", 4);
    f.cyls = VPC_CHS_MAX_C;
    f.heads = VPC_CHS_MAX_H;
    f.secs_per_cyl = VPC_CHS_MAX_S; /* the maximum geometry: current_size */
    assert_int_equal(vpc_virtual_size(&f, false, false), 64 << 20);
    assert_int_equal(vpc_virtual_size(&f, true, false), 64 << 20); /* even so */
    assert_int_equal(vpc_bitmap_size(1 << 21), 512);
    /* QEMU's rounding: blocks under 4 KiB get no bitmap sector (so do we) */
    assert_int_equal(vpc_bitmap_size(512), 0);
    assert_int_equal(vpc_bitmap_size(4096), 512);
    assert_int_equal(vpc_bitmap_size(1u << 31), 1u << 19);
}

static QimgImage *create_open(const char *path, uint64_t size, const char *sub,
                              bool force)
{
    g_autoptr(GHashTable) o = g_hash_table_new(g_str_hash, g_str_equal);
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;

    g_hash_table_insert(o, "subformat", (char *)sub);
    if (force) {
        g_hash_table_insert(o, "force_size", "on");
    }
    co.format = "vpc";
    co.size = size;
    co.size_set = true;
    co.options = o;
    if (!qimg_image_create(path, &co, &err)) {
        fail_msg("create: %s", err->message);
    }
    oo.format = "vpc";
    QimgImage *img = qimg_image_open(path, &oo, &err);
    if (!img) {
        fail_msg("open: %s", err->message);
    }
    return img;
}

/* create.c invariant 1: sizes as qemu-img makes them. */
static void test_create_sizes(void **state)
{
    static const struct {
        uint64_t size;
        bool force;
        uint64_t want;
    } cases[] = {
        {64 << 20, false, 67125248}, /* qemu-img create -f vpc x 64M */
        {1000001, false, 1009664},   /* CHS rounds up */
        {1000001, true, 1000448},    /* force_size: 512-byte rounding only */
        {100 << 20, false, 104865792},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        for (int fixed = 0; fixed < 2; fixed++) {
            g_autofree char *p = tu_fresh("size.vpc");
            g_autoptr(GError) err = NULL;
            QimgImage *img = create_open(p, cases[i].size, fixed ? "fixed" : "dynamic",
                                         cases[i].force);
            assert_int_equal(qimg_image_size(img), cases[i].want);
            assert_true(qimg_image_close(img, &err));
        }
    }
}

static uint32_t disk_bat0(const char *path)
{
    uint8_t e[4];
    int fd = open(path, O_RDONLY);

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, e, 4, 1536), 4);
    close(fd);
    return load_be32(e);
}

/* vpc.c invariant 4: the BAT entry reaches the file only at a flush, and
 * qemu-img reads the result as qimg wrote it. */
static void test_write_flush_order(void **state)
{
    g_autofree char *p = tu_fresh("w.vpc");
    g_autoptr(GError) err = NULL;
    QimgImage *img = create_open(p, 8 << 20, "dynamic", false);
    uint8_t buf[5000], back[5000];

    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (uint8_t)(i % 251 + 1);
    }
    assert_true(qimg_image_pwrite(img, 1000, buf, sizeof(buf), &err));
    assert_int_equal(disk_bat0(p), VPC_BAT_UNUSED); /* not yet on disk */
    assert_true(qimg_image_pread(img, 1000, back, sizeof(back), &err));
    assert_memory_equal(buf, back, sizeof(buf)); /* but read back */
    assert_true(qimg_image_flush(img, &err));
    assert_int_not_equal(disk_bat0(p), VPC_BAT_UNUSED);
    assert_true(qimg_image_pwrite(img, (6 << 20) + 7, buf, sizeof(buf), &err));
    assert_true(qimg_image_close(img, &err));

    if (!tu_have_qemu_img()) {
        TU_REQUIRE_QEMU_IMG();
        return;
    }
    size_t len;
    g_autofree uint8_t *raw = tu_qemu_raw(p, NULL, &len);
    assert_true(len >= (6 << 20) + 7 + sizeof(buf));
    assert_memory_equal(raw + 1000, buf, sizeof(buf));
    assert_memory_equal(raw + (6 << 20) + 7, buf, sizeof(buf));
    for (size_t i = 0; i < 1000; i++) {
        assert_int_equal(raw[i], 0);
    }
    tu_run("qemu-img check -f vpc '%s' 2>&1 | grep -q 'does not support checks'", p);
}

/* Overwrite n bytes at off of the file at p. */
static void poke(const char *p, uint64_t off, const void *bytes, size_t n)
{
    int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, (off_t)off), (ssize_t)n);
    close(fd);
}

static void refix_footer(const char *p, uint64_t off)
{
    uint8_t b[VPC_FOOTER_SIZE];
    int fd = open(p, O_RDWR);
    assert_int_equal(pread(fd, b, sizeof(b), (off_t)off), (ssize_t)sizeof(b));
    store_be32(b + VPC_F_CHECKSUM, vpc_checksum(b, sizeof(b), VPC_F_CHECKSUM));
    assert_int_equal(pwrite(fd, b, sizeof(b), (off_t)off), (ssize_t)sizeof(b));
    close(fd);
}

static void expect_open_error(const char *p, const char *want)
{
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    oo.format = "vpc";
    oo.read_only = true;
    QimgImage *img = qimg_image_open(p, &oo, &err);
    if (img) {
        qimg_image_close(img, NULL);
        fail_msg("open succeeded, expected %s", want);
    }
    if (!strstr(err->message, want)) {
        fail_msg("message '%s', expected '%s'", err->message, want);
    }
}

/* vpc.c invariant 1, one bad field at a time. */
static void test_open_errors(void **state)
{
    uint8_t b4[4];
    g_autofree char *p = tu_fresh("bad.vpc");
    g_autoptr(GError) err = NULL;
    QimgImage *img = create_open(p, 8 << 20, "dynamic", false);
    assert_true(qimg_image_close(img, &err));
    g_autofree char *orig = NULL;
    gsize len;
    assert_true(g_file_get_contents(p, &orig, &len, NULL));

    poke(p, 100, "x", 1); /* a reserved byte: the checksum no longer matches */
    expect_open_error(p, "Incorrect header checksum");

    g_file_set_contents(p, orig, (gssize)len, NULL);
    poke(p, 512, "cxsparsX", 8);
    expect_open_error(p, "Invalid header magic");

    g_file_set_contents(p, orig, (gssize)len, NULL);
    store_be32(b4, 3 << 20); /* not a power of two */
    poke(p, 512 + VPC_D_BLOCK_SIZE, b4, 4);
    expect_open_error(p, "Invalid block size 3145728");

    g_file_set_contents(p, orig, (gssize)len, NULL);
    store_be32(b4, 1); /* 1 entry of 2 MiB for 8 MiB */
    poke(p, 512 + VPC_D_MAX_ENTRIES, b4, 4);
    expect_open_error(p, "Page table too small");

    g_file_set_contents(p, orig, (gssize)len, NULL);
    store_be32(b4, 0x40000000);
    poke(p, 512 + VPC_D_MAX_ENTRIES, b4, 4);
    expect_open_error(p, "Max Table Entries too large (1073741824)");

    g_file_set_contents(p, orig, (gssize)len, NULL);
    store_be32(b4, 100000); /* a block far past the end of the file */
    poke(p, 1536, b4, 4);
    expect_open_error(p, "free_data_block_offset points after the end of file");

    g_file_set_contents(p, orig, (gssize)len, NULL);
    uint8_t b8[8];
    store_be64(b8, 1ull << 42); /* 4 TiB, a size Hyper-V's footer may claim */
    poke(p, VPC_F_CURRENT_SIZE, b8, 8);
    poke(p, VPC_F_CREATOR_APP, "win ", 4);
    refix_footer(p, 0);
    expect_open_error(p, "File too large");

    g_file_set_contents(p, "conect", 6, NULL);
    expect_open_error(p, "File too small for a VHD header");
    g_autofree char *junk = g_malloc0(4096);
    g_file_set_contents(p, junk, 4096, NULL);
    expect_open_error(p, "invalid VPC image");
}

/* vpc.c invariant 5: a block over the BAT is refused, not written. */
static void test_write_over_metadata(void **state)
{
    g_autofree char *p = tu_fresh("meta.vpc");
    g_autoptr(GError) err = NULL;
    QimgImage *img = create_open(p, 8 << 20, "dynamic", false);
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    uint8_t b4[4], buf[512] = {1};

    assert_true(qimg_image_close(img, &err));
    assert_int_equal(truncate(p, 4 << 20), 0); /* the block ends inside the file */
    store_be32(b4, 2); /* block 0's bitmap at 1024: data over the BAT at 1536 */
    poke(p, 1536, b4, 4);
    oo.format = "vpc";
    img = qimg_image_open(p, &oo, &err);
    assert_non_null(img);
    assert_false(qimg_image_pwrite(img, 0, buf, sizeof(buf), &err));
    assert_non_null(strstr(err->message, "overlaps the image's metadata"));
    g_clear_error(&err);
    qimg_image_close(img, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_virtual_size),
        cmocka_unit_test(test_create_sizes),
        cmocka_unit_test(test_write_flush_order),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_write_over_metadata),
    };
    return tu_run_group_tests("vpc", tests);
}
