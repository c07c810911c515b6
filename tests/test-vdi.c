/*
 * tests/test-vdi.c: the VDI driver -- codec round trip (vdi/codec.c
 * invariant 1), the layout of new images (vdi/create.c invariants 1, 2),
 * open validation with QEMU's messages (vdi.c invariant 1), reads of map
 * entries past the end of the file (invariant 2), the on-disk order of a
 * flush (invariant 3), writes over metadata (invariant 4), check
 * (invariant 6), and qemu-img reading what qimg wrote.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api/api.h"
#include "block/endian.h"
#include "qimg/check.h"
#include "test-util.h"
#include "vdi/vdi.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_codec_round_trip(void **state)
{
    VdiHeader h = {0}, k;
    uint8_t buf[VDI_HEADER_SIZE];

    memcpy(h.text, "text", 4);
    h.signature = VDI_SIGNATURE;
    h.version = VDI_VERSION_1_1;
    h.header_size = 0x180;
    h.image_type = 2;
    h.image_flags = 7;
    memcpy(h.description, "desc", 4);
    h.offset_bmap = 512;
    h.offset_data = 4096;
    h.cylinders = 1;
    h.heads = 2;
    h.sectors = 3;
    h.sector_size = 512;
    h.disk_size = 1ull << 40;
    h.block_size = 1 << 20;
    h.block_extra = 9;
    h.blocks_in_image = 1 << 20;
    h.blocks_allocated = 17;
    for (int i = 0; i < 16; i++) {
        h.uuid_image[i] = (uint8_t)i;
        h.uuid_last_snap[i] = (uint8_t)(i + 1);
        h.uuid_link[i] = (uint8_t)(i + 2);
        h.uuid_parent[i] = (uint8_t)(i + 3);
    }
    vdi_header_encode(&h, buf);
    vdi_header_decode(buf, &k);
    assert_memory_equal(&h, &k, sizeof(h));
    assert_int_equal(load_le32(buf + 0x40), VDI_SIGNATURE);
    for (int i = VDI_H_END; i < VDI_HEADER_SIZE; i++) {
        assert_int_equal(buf[i], 0);
    }
}

static QimgImage *create_open(const char *path, uint64_t size, bool is_static)
{
    g_autoptr(GHashTable) o = g_hash_table_new(g_str_hash, g_str_equal);
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;

    g_hash_table_insert(o, "static", is_static ? "on" : "off");
    co.format = "vdi";
    co.size = size;
    co.size_set = true;
    co.options = o;
    if (!qimg_image_create(path, &co, &err)) {
        fail_msg("create: %s", err->message);
    }
    oo.format = "vdi";
    QimgImage *img = qimg_image_open(path, &oo, &err);
    if (!img) {
        fail_msg("open: %s", err->message);
    }
    return img;
}

static void read_header(const char *p, VdiHeader *h)
{
    uint8_t buf[VDI_HEADER_SIZE];
    int fd = open(p, O_RDONLY);

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
    close(fd);
    vdi_header_decode(buf, h);
}

static uint32_t disk_entry(const char *p, uint32_t block)
{
    uint8_t e[4];
    int fd = open(p, O_RDONLY);

    assert_int_equal(pread(fd, e, 4, 512 + 4 * (off_t)block), 4);
    close(fd);
    return load_le32(e);
}

/* create.c invariants 1 and 2. */
static void test_create_layout(void **state)
{
    g_autofree char *d = tu_fresh("d.vdi"), *s = tu_fresh("s.vdi");
    g_autoptr(GError) err = NULL;
    VdiHeader h;
    QimgImage *img = create_open(d, (300 << 20) + 1, false);

    assert_int_equal(qimg_image_size(img), (300 << 20) + 512);
    assert_true(qimg_image_close(img, &err));
    read_header(d, &h);
    assert_int_equal(h.blocks_in_image, 301);
    assert_int_equal(h.offset_bmap, 512);
    assert_int_equal(h.offset_data, 512 + 1536); /* 301 * 4 bytes, padded */
    assert_int_equal(h.blocks_allocated, 0);
    assert_int_equal(h.image_type, VDI_TYPE_DYNAMIC);
    assert_int_equal(disk_entry(d, 300), VDI_UNALLOCATED);

    img = create_open(s, 3 << 20, true);
    assert_true(qimg_image_close(img, &err));
    read_header(s, &h);
    assert_int_equal(h.image_type, VDI_TYPE_STATIC);
    assert_int_equal(h.blocks_allocated, 3);
    assert_int_equal(disk_entry(s, 2), 2);
    struct stat st;
    assert_int_equal(stat(s, &st), 0);
    assert_int_equal(st.st_size, 1024 + (3 << 20));
}

/* Invariant 3: nothing of the metadata before the flush; after it, the
 * header and the map agree, and qemu-img reads the same bytes. */
static void test_write_flush(void **state)
{
    g_autofree char *p = tu_fresh("w.vdi");
    g_autoptr(GError) err = NULL;
    QimgImage *img = create_open(p, 16 << 20, false);
    uint8_t buf[3000], back[3000];
    VdiHeader h;

    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (uint8_t)(i % 253 + 1);
    }
    assert_true(qimg_image_pwrite(img, (5 << 20) + 100, buf, sizeof(buf), &err));
    assert_true(qimg_image_pwrite(img, (2 << 20) - 1000, buf, sizeof(buf), &err));
    read_header(p, &h);
    assert_int_equal(h.blocks_allocated, 0);
    assert_int_equal(disk_entry(p, 5), VDI_UNALLOCATED);
    assert_true(qimg_image_pread(img, (5 << 20) + 100, back, sizeof(back), &err));
    assert_memory_equal(buf, back, sizeof(buf));
    assert_true(qimg_image_flush(img, &err));
    read_header(p, &h);
    assert_int_equal(h.blocks_allocated, 3); /* blocks 5, 1 and 2 */
    assert_int_equal(disk_entry(p, 5), 0);
    assert_int_equal(disk_entry(p, 1), 1);
    assert_int_equal(disk_entry(p, 2), 2);
    assert_true(qimg_image_close(img, &err));

    if (!tu_have_qemu_img()) {
        TU_REQUIRE_QEMU_IMG();
        return;
    }
    size_t len;
    g_autofree uint8_t *raw = tu_qemu_raw(p, NULL, &len);
    assert_int_equal(len, 16 << 20);
    assert_memory_equal(raw + (5 << 20) + 100, buf, sizeof(buf));
    assert_memory_equal(raw + (2 << 20) - 1000, buf, sizeof(buf));
    assert_int_equal(raw[(5 << 20) + 99], 0);
    tu_run("qemu-img check -f vdi '%s'", p);
}

static void poke(const char *p, uint64_t off, const void *bytes, size_t n)
{
    int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, (off_t)off), (ssize_t)n);
    close(fd);
}

static void poke32(const char *p, uint64_t off, uint32_t v)
{
    uint8_t b[4];
    store_le32(b, v);
    poke(p, off, b, 4);
}

static QimgImage *open_ro(const char *p, GError **err)
{
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    oo.format = "vdi";
    oo.read_only = true;
    return qimg_image_open(p, &oo, err);
}

static void expect_open_error(const char *p, const char *want)
{
    g_autoptr(GError) err = NULL;
    QimgImage *img = open_ro(p, &err);
    if (img) {
        qimg_image_close(img, NULL);
        fail_msg("open succeeded, expected %s", want);
    }
    if (!strstr(err->message, want)) {
        fail_msg("message '%s', expected '%s'", err->message, want);
    }
}

/* Invariant 1, one field at a time. */
static void test_open_errors(void **state)
{
    static const struct {
        unsigned off;
        uint32_t v;
        const char *want;
    } cases[] = {
        {VDI_H_SIGNATURE, 0x12345678, "Image not in VDI format (bad signature 12345678)"},
        {VDI_H_VERSION, 0x00020003, "unsupported VDI image (version 2.3)"},
        {VDI_H_OFFSET_BMAP, 100, "unaligned block map offset 0x64"},
        {VDI_H_OFFSET_DATA, 1000, "unaligned data offset 0x3e8"},
        {VDI_H_SECTOR_SIZE, 4096, "sector size 4096 is not 512"},
        {VDI_H_BLOCK_SIZE, 2 << 20, "block size 2097152 is not 1048576"},
        {VDI_H_BLOCKS_IN_IMAGE, 2,
         "disk size 4194304, image bitmap has room for 2097152"},
        {VDI_H_UUID_LINK, 1, "non-NULL link UUID"},
        {VDI_H_UUID_PARENT + 12, 1, "non-NULL parent UUID"},
    };
    g_autofree char *p = tu_fresh("bad.vdi");
    g_autoptr(GError) err = NULL;
    g_autofree char *orig = NULL;
    gsize len;

    assert_true(qimg_image_close(create_open(p, 4 << 20, false), &err));
    assert_true(g_file_get_contents(p, &orig, &len, NULL));
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_file_set_contents(p, orig, (gssize)len, NULL);
        poke32(p, cases[i].off, cases[i].v);
        expect_open_error(p, cases[i].want);
    }
    g_file_set_contents(p, orig, (gssize)len, NULL);
    uint8_t b8[8];
    store_le64(b8, VDI_DISK_SIZE_MAX + 1);
    poke(p, VDI_H_DISK_SIZE, b8, 8);
    expect_open_error(p, "Unsupported VDI image size");
    /* an odd size is rounded up, as VBoxManage makes them */
    g_file_set_contents(p, orig, (gssize)len, NULL);
    store_le64(b8, (3 << 20) + 1);
    poke(p, VDI_H_DISK_SIZE, b8, 8);
    QimgImage *img = open_ro(p, &err);
    assert_non_null(img);
    assert_int_equal(qimg_image_size(img), (3 << 20) + 512);
    qimg_image_close(img, NULL);
}

/* Invariant 2: a map entry past the end of the file reads as zeros (QEMU's
 * reading); entries past blocks_in_image and a wrong count are what check
 * reports (invariant 6). */
static void test_past_end_and_check(void **state)
{
    g_autofree char *p = tu_fresh("end.vdi");
    g_autoptr(GError) err = NULL;
    QimgImage *img = create_open(p, 8 << 20, false);
    uint8_t buf[512];
    QimgCheckResult r = QIMG_CHECK_RESULT_INIT;

    memset(buf, 0x5a, sizeof(buf));
    assert_true(qimg_image_pwrite(img, 0, buf, sizeof(buf), &err));
    assert_true(qimg_image_close(img, &err));
    poke32(p, 512 + 4 * 3, 6); /* block 3 -> index 6: past the end, unreferenced */
    img = open_ro(p, &err);
    assert_non_null(img);
    memset(buf, 1, sizeof(buf));
    assert_true(qimg_image_pread(img, 3 << 20, buf, sizeof(buf), &err));
    for (size_t i = 0; i < sizeof(buf); i++) {
        assert_int_equal(buf[i], 0);
    }
    assert_true(qimg_image_check(img, &r, 0, &err));
    assert_int_equal(r.corruptions, 1); /* the count: 2 mapped, header says 1 */
    assert_string_equal(g_ptr_array_index(r.messages, 0),
                        "ERROR: allocated blocks mismatch, is 2, should be 1");
    qimg_check_result_clear(&r);
    qimg_image_close(img, NULL);

    poke32(p, 512 + 4 * 4, 0);    /* block 4 -> index 0: used twice */
    poke32(p, 512 + 4 * 5, 1000); /* past blocks_in_image */
    img = open_ro(p, &err);
    assert_true(qimg_image_check(img, &r, 0, &err));
    assert_int_equal(r.corruptions, 3);
    assert_string_equal(g_ptr_array_index(r.messages, 0),
                        "ERROR: block index 0 also used by 0");
    assert_string_equal(g_ptr_array_index(r.messages, 1),
                        "ERROR: block index 5 too large, is 1000");
    qimg_check_result_clear(&r);
    qimg_image_close(img, NULL);
    if (tu_have_qemu_img()) { /* the same findings from qemu-img */
        g_autofree char *out = NULL;
        assert_int_equal(tu_run_status(&out, "qemu-img check -f vdi '%s'", p), 2);
        assert_non_null(strstr(out, "ERROR: block index 0 also used by 0"));
        assert_non_null(strstr(out, "ERROR: block index 5 too large, is 1000"));
        assert_non_null(
            strstr(out, "ERROR: allocated blocks mismatch, is 3, should be 1"));
    }
}

/* Invariant 4: a block mapped over the block map is refused, not written. */
static void test_write_over_metadata(void **state)
{
    g_autofree char *p = tu_fresh("meta.vdi");
    g_autoptr(GError) err = NULL;
    QimgImage *img = create_open(p, 8 << 20, false);
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    uint8_t buf[512] = {1};

    assert_true(qimg_image_close(img, &err));
    poke32(p, VDI_H_OFFSET_DATA, 0); /* block 0's data over the header */
    poke32(p, 512, 0);
    poke32(p, VDI_H_BLOCKS_ALLOCATED, 1);
    oo.format = "vdi";
    img = qimg_image_open(p, &oo, &err);
    assert_non_null(img);
    assert_false(qimg_image_pwrite(img, 0, buf, sizeof(buf), &err));
    assert_non_null(strstr(err->message, "overlaps the image's metadata"));
    qimg_image_close(img, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_create_layout),
        cmocka_unit_test(test_write_flush),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_past_end_and_check),
        cmocka_unit_test(test_write_over_metadata),
    };
    return tu_run_group_tests("vdi", tests);
}
