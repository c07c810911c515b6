/*
 * Unit tests for OVA archives: the tar codec and walk (block/ova-tar.c
 * invariants 1-4), the OVF descriptor (block/ova-ovf.c invariants 1-4),
 * the listing, selectors and member node (block/ova.c invariants 1-4),
 * on archives built here byte by byte, malformed on purpose.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/ova.h"
#include "test-util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- a tar writer ---- */

static void put_octal(uint8_t *f, size_t len, uint64_t v)
{
    char buf[32];
    g_snprintf(buf, sizeof(buf), "%0*" G_GINT64_MODIFIER "o", (int)len - 1, v);
    memcpy(f, buf, len - 1);
    f[len - 1] = 0;
}

static void seal(uint8_t *h)
{
    unsigned sum = 0;
    memset(h + 148, ' ', 8);
    for (int i = 0; i < 512; i++) {
        sum += h[i];
    }
    g_snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

static void header(uint8_t h[512], const char *name, char type, uint64_t size)
{
    memset(h, 0, 512);
    strncpy((char *)h, name, 100);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    put_octal(h + 124, 12, size);
    put_octal(h + 136, 12, 0);
    h[156] = (uint8_t)type;
    memcpy(h + 257,
           "ustar\0"
           "00",
           8);
    seal(h);
}

static void add_raw(GByteArray *a, const uint8_t h[512], const void *data, size_t len)
{
    static const uint8_t zero[512];
    g_byte_array_append(a, h, 512);
    if (len) {
        g_byte_array_append(a, data, (guint)len);
        g_byte_array_append(a, zero, (guint)((512 - len % 512) % 512));
    }
}

static void add(GByteArray *a, const char *name, char type, const void *data, size_t len)
{
    uint8_t h[512];
    header(h, name, type, len);
    add_raw(a, h, data, len);
}

static void add_str(GByteArray *a, const char *name, const char *text)
{
    add(a, name, '0', text, strlen(text));
}

static void end(GByteArray *a)
{
    static const uint8_t zero[1024];
    g_byte_array_append(a, zero, sizeof(zero));
}

static char *write_tmp(GByteArray *a)
{
    char *path = tu_fresh("ova");
    assert_true(g_file_set_contents(path, (const char *)a->data, a->len, NULL));
    return path;
}

static BlkNode *open_file(const char *path)
{
    BlkNode *f = blk_open_file(path, true, BLK_CACHE_WRITEBACK);
    assert_non_null(f);
    return f;
}

static const char *OVF_HEAD =
    "<?xml version=\"1.0\"?>\n"
    "<Envelope xmlns=\"http://schemas.dmtf.org/ovf/envelope/1\" "
    "xmlns:o=\"http://schemas.dmtf.org/ovf/envelope/1\">\n";

/* The OVF of two disks (d1 in a.vmdk, d2 in "b:1.vmdk") and an empty one. */
static char *two_disk_ovf(const char *extra_file_attrs)
{
    return g_strdup_printf(
        "%s<References><o:File o:href=\"a.vmdk\" o:id=\"f1\" o:size=\"1000\" %s/>"
        "<o:File o:href=\"b:1.vmdk\" o:id=\"f2\"/></References>"
        "<o:DiskSection><Info>x</Info>"
        "<o:Disk o:diskId=\"d1\" o:fileRef=\"f1\" o:capacity=\"4\" "
        "o:capacityAllocationUnits=\"byte * 2^20\"/>"
        "<o:Disk o:diskId=\"d2\" o:fileRef=\"f2\" o:capacity=\"${size}\"/>"
        "<o:Disk o:diskId=\"blank\" o:capacity=\"1\" "
        "o:capacityAllocationUnits=\"GigaBytes\"/>"
        "</o:DiskSection></Envelope>\n",
        OVF_HEAD, extra_file_attrs);
}

static GByteArray *two_disk_archive(const char *extra_file_attrs)
{
    GByteArray *a = g_byte_array_new();
    g_autofree char *ovf = two_disk_ovf(extra_file_attrs);
    g_autofree uint8_t *d1 = g_malloc(1000), *d2 = g_malloc(700);

    memset(d1, 0xa1, 1000);
    memset(d2, 0xb2, 700);
    add_str(a, "vm.ovf", ovf);
    add_str(a, "vm.mf", "SHA256(a.vmdk)= 00\n");
    add(a, "a.vmdk", '0', d1, 1000);
    add(a, "b:1.vmdk", '0', d2, 700);
    end(a);
    return a;
}

/* ---- ova-tar.c ---- */

/* Invariant 1: magic, checksum (unsigned and signed sums), numbers. */
static void test_header_decode(void **state)
{
    uint8_t h[512];
    BlkTarHeader d;

    header(h, "disk.vmdk", '0', 1234);
    assert_int_equal(blk_tar_header_decode(h, &d), 1);
    assert_string_equal(d.name, "disk.vmdk");
    assert_int_equal(d.size, 1234);
    assert_int_equal(d.type, '0');

    memset(h, 0, sizeof(h));
    assert_int_equal(blk_tar_header_decode(h, &d), 0); /* the end */

    header(h, "disk.vmdk", '0', 1234);
    h[0] ^= 1; /* the name changed, not the checksum */
    assert_int_equal(blk_tar_header_decode(h, &d), -EINVAL);
    assert_non_null(strstr(blk_error_message(), "wrong header checksum"));
    blk_error_clear();

    header(h, "disk.vmdk", '0', 1234);
    memcpy(h + 257, "ustaR", 5);
    seal(h);
    assert_int_equal(blk_tar_header_decode(h, &d), -EINVAL);
    assert_non_null(strstr(blk_error_message(), "magic"));
    blk_error_clear();

    /* a checksum that is no number */
    header(h, "disk.vmdk", '0', 1);
    memcpy(h + 148, "12x4567", 7);
    assert_int_equal(blk_tar_header_decode(h, &d), -EINVAL);
    blk_error_clear();

    /* GNU base-256 size beyond 8 GiB */
    header(h, "big.vmdk", '0', 0);
    memset(h + 124, 0, 12);
    h[124] = 0x80;
    h[131] = 0x03; /* 3 << 32 */
    seal(h);
    assert_int_equal(blk_tar_header_decode(h, &d), 1);
    assert_int_equal(d.size, 3ull << 32);
    /* base-256 past 2^63, and a negative one */
    memset(h + 124, 0xff, 12);
    seal(h);
    assert_int_equal(blk_tar_header_decode(h, &d), -EINVAL);
    blk_error_clear();
    memset(h + 124, 0, 12);
    h[124] = 0x80;
    h[128] = 0x80; /* bit 63 */
    seal(h);
    assert_int_equal(blk_tar_header_decode(h, &d), -EINVAL);
    assert_non_null(strstr(blk_error_message(), "size field"));
    blk_error_clear();
    /* twelve octal digits and no NUL: the whole field is the number */
    header(h, "big.vmdk", '0', 0);
    memcpy(h + 124, "777777777777", 12);
    seal(h);
    assert_int_equal(blk_tar_header_decode(h, &d), 1); /* 12 digits: 2^36 - 1 */
    assert_int_equal(d.size, (1ull << 36) - 1);

    /* the signed sum old tars wrote, with a byte >= 0x80 in the name */
    header(h, "d\xe9.vmdk", '0', 5);
    {
        int sum = 0;
        memset(h + 148, ' ', 8);
        for (int i = 0; i < 512; i++) {
            sum += (int8_t)h[i];
        }
        g_snprintf((char *)h + 148, 8, "%06o", sum);
    }
    assert_int_equal(blk_tar_header_decode(h, &d), 1);
}

typedef struct Seen {
    GPtrArray *names;
    GArray *offsets;
} Seen;

static int collect(void *opaque, const BlkTarMember *m)
{
    Seen *s = opaque;
    g_ptr_array_add(s->names, g_strdup(m->name));
    g_array_append_val(s->offsets, m->offset);
    return 0;
}

/* Invariants 2-4: long names, pax path and size, ends, truncation. */
static void test_walk(void **state)
{
    g_autoptr(GByteArray) a = g_byte_array_new();
    g_autofree char *longname = g_strnfill(300, 'n');
    g_autofree char *pax = NULL;
    Seen s = {g_ptr_array_new_with_free_func(g_free), g_array_new(false, false, 8)};
    uint8_t h[512];

    add_str(a, "vm.ovf", "<x/>");
    add(a, "././@LongLink", 'L', longname, strlen(longname) + 1);
    add_str(a, "short", "0123456789");
    /* pax: a path, and a size that overrides the header's 0 */
    g_autofree char *rec1 = g_strdup_printf("path=dir/%s.vmdk\n", longname);
    g_autofree char *rec2 = g_strdup("size=5\n");
    size_t l1 = strlen(rec1) + 4, l2 = strlen(rec2) + 2;
    pax = g_strdup_printf("%zu %s%zu %s", l1, rec1, l2, rec2);
    add(a, "./PaxHeaders/x", 'x', pax, strlen(pax));
    header(h, "truncated-name", '0', 0);
    add_raw(a, h, "abcde", 5);
    add_str(a, "last", "z");
    {
        BlkNode *f;
        g_autofree char *p = write_tmp(a); /* no end blocks */
        f = open_file(p);
        assert_int_equal(blk_tar_walk(f, "t.ova", collect, &s), 0);
        blk_close(f);
    }
    assert_int_equal(s.names->len, 4);
    assert_string_equal(g_ptr_array_index(s.names, 0), "vm.ovf");
    assert_string_equal(g_ptr_array_index(s.names, 1), longname);
    g_autofree char *want = g_strdup_printf("dir/%s.vmdk", longname);
    assert_string_equal(g_ptr_array_index(s.names, 2), want);
    assert_string_equal(g_ptr_array_index(s.names, 3),
                        "last"); /* the pax size skipped 5 */
    assert_int_equal(g_array_index(s.offsets, uint64_t, 0), 512);

    /* truncated: a member's data runs past the end */
    g_byte_array_set_size(a, 0);
    add_str(a, "vm.ovf", "<x/>");
    header(h, "disk.vmdk", '0', 100000);
    add_raw(a, h, "abc", 3);
    {
        g_autofree char *p = write_tmp(a);
        BlkNode *f = open_file(p);
        assert_int_equal(blk_tar_walk(f, "t.ova", collect, &s), -EINVAL);
        assert_non_null(strstr(blk_error_message(), "truncated: tar member 'disk.vmdk'"));
        blk_error_clear();
        blk_close(f);
    }
    /* truncated: half a header */
    g_byte_array_set_size(a, 0);
    add_str(a, "vm.ovf", "<x/>");
    g_byte_array_append(a, (const uint8_t *)"ustar", 5);
    {
        g_autofree char *p = write_tmp(a);
        BlkNode *f = open_file(p);
        assert_int_equal(blk_tar_walk(f, "t.ova", collect, &s), -EINVAL);
        assert_non_null(strstr(blk_error_message(), "cut short"));
        blk_error_clear();
        blk_close(f);
    }
    /* a bad header in the middle names its offset */
    g_byte_array_set_size(a, 0);
    add_str(a, "vm.ovf", "<x/>");
    header(h, "disk.vmdk", '0', 0);
    h[10] ^= 0x40;
    add_raw(a, h, NULL, 0);
    {
        g_autofree char *p = write_tmp(a);
        BlkNode *f = open_file(p);
        assert_int_equal(blk_tar_walk(f, "t.ova", collect, &s), -EINVAL);
        assert_non_null(strstr(blk_error_message(), "bad tar header at offset 1024"));
        blk_error_clear();
        blk_close(f);
    }
    /* malformed pax records, an oversized long name */
    static const char *const bad_pax[] = {"8 path=x\n", "5 path=abc\n", "x path=a\n",
                                          "7 nokey\n", "11 size=1x\n"};
    for (size_t i = 0; i < G_N_ELEMENTS(bad_pax); i++) {
        g_byte_array_set_size(a, 0);
        add(a, "PaxHeaders/x", 'x', bad_pax[i], strlen(bad_pax[i]));
        add_str(a, "x", "1");
        g_autofree char *p = write_tmp(a);
        BlkNode *f = open_file(p);
        assert_int_equal(blk_tar_walk(f, "t.ova", collect, &s), -EINVAL);
        assert_non_null(strstr(blk_error_message(), "pax"));
        blk_error_clear();
        blk_close(f);
    }
    g_byte_array_set_size(a, 0);
    g_autofree char *huge = g_strnfill(BLK_TAR_MAX_NAME + 10, 'h');
    add(a, "././@LongLink", 'L', huge, strlen(huge));
    add_str(a, "x", "1");
    {
        g_autofree char *p = write_tmp(a);
        BlkNode *f = open_file(p);
        assert_int_equal(blk_tar_walk(f, "t.ova", collect, &s), -EINVAL);
        assert_non_null(strstr(blk_error_message(), "GNU long name"));
        blk_error_clear();
        blk_close(f);
    }
    g_ptr_array_unref(s.names);
    g_array_unref(s.offsets);
}

/* ---- ova-ovf.c ---- */

static void test_ovf(void **state)
{
    g_autofree char *ovf = two_disk_ovf("o:compression=\"gzip\"");
    BlkOvf o;
    uint64_t b;

    assert_int_equal(blk_ovf_parse(ovf, strlen(ovf), "vm.ovf", &o), 0);
    assert_int_equal(o.files->len, 2);
    assert_int_equal(o.disks->len, 3);
    BlkOvfFile *f1 = &g_array_index(o.files, BlkOvfFile, 0);
    assert_string_equal(f1->href, "a.vmdk");
    assert_true(f1->has_size);
    assert_int_equal(f1->size, 1000);
    assert_string_equal(f1->compression, "gzip");
    BlkOvfDisk *d1 = &g_array_index(o.disks, BlkOvfDisk, 0);
    assert_int_equal(d1->file, 0);
    assert_true(d1->capacity_known);
    assert_int_equal(d1->capacity_bytes, 4u << 20);
    BlkOvfDisk *d2 = &g_array_index(o.disks, BlkOvfDisk, 1);
    assert_int_equal(d2->file, 1);
    assert_false(d2->capacity_known); /* invariant 4: "${size}" */
    BlkOvfDisk *d3 = &g_array_index(o.disks, BlkOvfDisk, 2);
    assert_int_equal(d3->file, -1);
    assert_null(d3->file_ref);
    assert_int_equal(d3->capacity_bytes, 1ull << 30);
    blk_ovf_clear(&o);

    /* invariant 2: a File outside References is not a File */
    static const char *outside = "<Envelope><File href=\"x\" id=\"y\"/></Envelope>";
    assert_int_equal(blk_ovf_parse(outside, strlen(outside), "o", &o), 0);
    assert_int_equal(o.files->len, 0);
    blk_ovf_clear(&o);

    /* invariant 3, and XML that is not */
    static const char *const bad[] = {
        "<Envelope><References><File ovf:id=\"y\"/></References></Envelope>",
        "<Envelope><References><File ovf:href=\"x\" ovf:id=\"y\" ovf:size=\"-1\"/>"
        "</References></Envelope>",
        "<Envelope><References><File ovf:href=\"x\" ovf:id=\"y\" "
        "ovf:size=\"99999999999999999999\"/></References></Envelope>",
        "<Envelope><DiskSection><Disk ovf:capacity=\"1\"/></DiskSection></Envelope>",
        "<Envelope><References>",
        "<Envelope>&xxe;</Envelope>",
        "<!DOCTYPE x [<!ENTITY a \"b\">]><Envelope>&a;</Envelope>",
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        assert_int_equal(blk_ovf_parse(bad[i], strlen(bad[i]), "o.ovf", &o), -EINVAL);
        assert_non_null(strstr(blk_error_message(), "'o.ovf'"));
        blk_error_clear();
        blk_ovf_clear(&o);
    }
    /* invariant 1 */
    assert_int_equal(blk_ovf_parse("", BLK_OVF_MAX_BYTES + 1, "o", &o), -EFBIG);
    blk_error_clear();
    blk_ovf_clear(&o);
    GString *many = g_string_new("<E><References>");
    for (unsigned i = 0; i <= BLK_OVF_MAX_ITEMS; i++) {
        g_string_append_printf(many, "<File href=\"f%u\" id=\"i%u\"/>", i, i);
    }
    g_string_append(many, "</References></E>");
    assert_int_equal(blk_ovf_parse(many->str, many->len, "o", &o), -EINVAL);
    assert_non_null(strstr(blk_error_message(), "more than"));
    blk_error_clear();
    blk_ovf_clear(&o);
    g_string_free(many, true);

    /* invariant 4: units */
    assert_int_equal(blk_ovf_capacity_bytes("3", NULL, &b), 0);
    assert_int_equal(b, 3);
    assert_int_equal(blk_ovf_capacity_bytes("3", "byte*2^10", &b), 0);
    assert_int_equal(b, 3072);
    assert_int_equal(blk_ovf_capacity_bytes("2", "byte * 512", &b), 0);
    assert_int_equal(b, 1024);
    assert_int_equal(blk_ovf_capacity_bytes("1", "MegaBytes", &b), 0);
    assert_int_equal(b, 1u << 20);
    assert_int_equal(blk_ovf_capacity_bytes("1", "byte * 2^63", &b), -EINVAL);
    assert_int_equal(blk_ovf_capacity_bytes("9000000000", "byte * 2^40", &b), -ERANGE);
    assert_int_equal(blk_ovf_capacity_bytes("1", "furlongs", &b), -EINVAL);
    assert_int_equal(blk_ovf_capacity_bytes("", NULL, &b), -EINVAL);
}

/* ---- ova.c ---- */

/* Invariant 2: the listing and what fails it. */
static void test_list(void **state)
{
    g_autoptr(GByteArray) a = two_disk_archive("");
    g_autofree char *p = write_tmp(a);
    BlkNode *f = open_file(p);
    BlkOvaListing l;

    assert_int_equal(blk_ova_list(f, "vm.ova", &l), 0);
    assert_string_equal(l.ovf_name, "vm.ovf");
    assert_int_equal(l.disks->len, 3);
    BlkOvaDisk *d = &g_array_index(l.disks, BlkOvaDisk, 0);
    assert_true(d->found);
    assert_int_equal(d->offset, 512 * 6); /* ovf (2 blocks), mf (2), header */
    assert_int_equal(d->size, 1000);
    assert_null(g_array_index(l.disks, BlkOvaDisk, 2).file);
    blk_ova_listing_clear(&l);
    blk_close(f);

    /* a member missing, a dangling fileRef, a size the OVF disputes */
    struct {
        const char *ovf, *msg;
    } cases[] = {
        {"<E><References><File href=\"gone.vmdk\" id=\"f\"/></References><DiskSection>"
         "<Disk diskId=\"d\" fileRef=\"f\"/></DiskSection></E>",
         "the file 'gone.vmdk' of disk 'd' is not in the archive"},
        {"<E><References><File href=\"a.vmdk\" id=\"f\"/></References><DiskSection>"
         "<Disk diskId=\"d\" fileRef=\"nope\"/></DiskSection></E>",
         "disk 'd' names file 'nope' (ovf:fileRef), which no File"},
        {"<E><References><File href=\"a.vmdk\" id=\"f\" size=\"3\"/></References>"
         "<DiskSection><Disk diskId=\"d\" fileRef=\"f\"/></DiskSection></E>",
         "is 10 bytes in the tar, the OVF says 3"},
        {"<E><References><File href=\"lnk\" id=\"f\"/></References>"
         "<DiskSection><Disk diskId=\"d\" fileRef=\"f\"/></DiskSection></E>",
         "is a symbolic link"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GByteArray) b = g_byte_array_new();
        add_str(b, "x.ovf", cases[i].ovf);
        add_str(b, "./a.vmdk", "0123456789");
        add(b, "lnk", '2', NULL, 0);
        end(b);
        g_autofree char *q = write_tmp(b);
        f = open_file(q);
        assert_true(blk_ova_list(f, "x.ova", &l) < 0);
        assert_non_null(strstr(blk_error_message(), cases[i].msg));
        blk_error_clear();
        blk_ova_listing_clear(&l);
        blk_close(f);
    }
    /* no descriptor; a descriptor past the limit */
    {
        g_autoptr(GByteArray) b = g_byte_array_new();
        add_str(b, "a.vmdk", "0123456789");
        end(b);
        g_autofree char *q = write_tmp(b);
        f = open_file(q);
        assert_int_equal(blk_ova_list(f, "x.ova", &l), -EINVAL);
        assert_non_null(strstr(blk_error_message(), "without an OVF descriptor"));
        blk_error_clear();
        blk_ova_listing_clear(&l);
        blk_close(f);
    }
    {
        g_autoptr(GByteArray) b = g_byte_array_new();
        g_autofree char *big = g_malloc0(BLK_OVF_MAX_BYTES + 1);
        add(b, "x.ovf", '0', big, BLK_OVF_MAX_BYTES + 1);
        end(b);
        g_autofree char *q = write_tmp(b);
        f = open_file(q);
        assert_int_equal(blk_ova_list(f, "x.ova", &l), -EFBIG);
        assert_non_null(strstr(blk_error_message(), "more than qimg reads"));
        blk_error_clear();
        blk_ova_listing_clear(&l);
        blk_close(f);
    }
}

static BlkNode *open_ova(const char *sel, const char *path, bool ro)
{
    BlkOpenOptions o = {.read_only = ro, .cache = BLK_CACHE_WRITEBACK};
    g_autofree char *name = g_strdup_printf("ova:%s:%s", sel, path);
    return blk_open_ova(name, &o, BLK_OPEN_USER_NAME);
}

/* Invariants 1 and 3: selectors, reads inside the member, refusals. */
static void test_member_node(void **state)
{
    g_autoptr(GByteArray) a = two_disk_archive("");
    g_autofree char *p = write_tmp(a);
    uint8_t buf[1200];
    BlkNode *m;

    static const char *const d1[] = {"0", "id=d1", "file=a.vmdk", "file=./a.vmdk",
                                     "file=%61.vmdk"};
    for (size_t i = 0; i < G_N_ELEMENTS(d1); i++) {
        m = open_ova(d1[i], p, true);
        assert_non_null(m);
        assert_int_equal(m->size, 1000);
        memset(buf, 0x55, sizeof(buf));
        assert_int_equal(blk_pread(m, 0, buf, sizeof(buf)), 0);
        for (size_t k = 0; k < sizeof(buf); k++) {
            assert_int_equal(buf[k], k < 1000 ? 0xa1 : 0); /* past the end: zeros */
        }
        assert_true(blk_pwrite(m, 0, buf, 512, 0) < 0); /* never written */
        blk_error_clear();
        blk_close(m);
    }
    m = open_ova("file=b%3A1.vmdk", p, true); /* a ':' escaped */
    assert_non_null(m);
    assert_int_equal(m->size, 700);
    assert_int_equal(blk_pread(m, 690, buf, 10), 0);
    assert_int_equal(buf[0], 0xb2);
    blk_close(m);
    m = open_ova("1", p, true);
    assert_non_null(m);
    assert_int_equal(m->size, 700);
    blk_close(m);

    struct {
        const char *sel, *msg;
        bool rw;
    } bad[] = {
        {"0", "can only be opened read-only", true},
        {"3", "has no disk '3' (it has 3", false},
        {"id=zz", "has no disk 'id=zz'", false},
        {"2", "disk 'blank' of", false},
        {"file=c.vmdk", "has no member 'c.vmdk'", false},
        {"file=b%3", "bad OVA selector", false},
        {"file=", "bad OVA selector", false},
        {"x1", "expected a disk index", false},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        assert_null(open_ova(bad[i].sel, p, !bad[i].rw));
        assert_non_null(strstr(blk_error_message(), bad[i].msg));
        blk_error_clear();
    }
    {
        BlkOpenOptions o = {.read_only = true};
        assert_null(blk_open_ova("ova:0", &o, BLK_OPEN_USER_NAME));
        assert_non_null(strstr(blk_error_message(), "expected ova:DISK:FILE"));
        blk_error_clear();
    }
    /* a compressed member (by index and by file name), a chunked one */
    g_autoptr(GByteArray) c = two_disk_archive("o:compression=\"gzip\"");
    g_autofree char *pc = write_tmp(c);
    assert_null(open_ova("0", pc, true));
    assert_non_null(strstr(blk_error_message(), "is gzip-compressed (ovf:compression)"));
    blk_error_clear();
    assert_null(open_ova("file=a.vmdk", pc, true));
    assert_non_null(strstr(blk_error_message(), "gzip-compressed"));
    blk_error_clear();
    g_autoptr(GByteArray) k = two_disk_archive("o:chunkSize=\"512\"");
    g_autofree char *pk = write_tmp(k);
    assert_null(open_ova("id=d1", pk, true));
    assert_non_null(strstr(blk_error_message(), "ovf:chunkSize"));
    blk_error_clear();
}

/* Invariant 4: names a disk in the archive records. */
static void test_sibling_name(void **state)
{
    g_autoptr(GByteArray) a = g_byte_array_new();
    g_autofree char *p = NULL, *path = NULL;
    BlkNode *m;

    add_str(a, "vm.ovf",
            "<E><References><File href=\"sub/d.vmdk\" id=\"f\"/></References>"
            "<DiskSection><Disk diskId=\"d\" fileRef=\"f\"/></DiskSection></E>");
    add_str(a, "sub/d.vmdk", "# Disk DescriptorFile\n");
    end(a);
    p = write_tmp(a);
    m = open_ova("0", p, true);
    assert_non_null(m);
    assert_int_equal(blk_ova_sibling_name(m, "extent", "x:y%.vmdk", &path), -EACCES);
    assert_non_null(strstr(blk_error_message(), "names a protocol"));
    blk_error_clear();
    assert_int_equal(blk_ova_sibling_name(m, "extent", "f%.vmdk", &path), 0);
    g_autofree char *want = g_strdup_printf("ova:file=sub/f%%25.vmdk:%s", p);
    assert_string_equal(path, want);
    static const char *const refused[] = {"/etc/passwd", "../x.vmdk", "a/../../x",
                                          "json:{}",     "nbd://h/x", ""};
    for (size_t i = 0; i < G_N_ELEMENTS(refused); i++) {
        g_free(path);
        path = NULL;
        assert_int_equal(blk_ova_sibling_name(m, "extent", refused[i], &path), -EACCES);
        assert_null(path);
        assert_non_null(strstr(blk_error_message(), "may only name members"));
        blk_error_clear();
    }
    assert_ptr_equal(blk_ova_member_node(m), m);
    blk_close(m);
    g_autofree char *sel = blk_ova_member_selector("a:b%c");
    assert_string_equal(sel, "file=a%3Ab%25c");
}

/* The probe: a ustar header of a *.ovf member (or its pax header). */
static void test_probe(void **state)
{
    uint8_t h[512];

    header(h, "vm.ovf", '0', 10);
    assert_int_equal(blk_ova_probe(h, sizeof(h)), 100);
    header(h, "./PaxHeaders/vm.OVF", 'x', 10);
    assert_int_equal(blk_ova_probe(h, sizeof(h)), 100);
    header(h, "vm.ovf.txt", '0', 10);
    assert_int_equal(blk_ova_probe(h, sizeof(h)), 0);
    header(h, "vm.ovf", '0', 10);
    h[0] = 'V'; /* checksum no longer matches */
    assert_int_equal(blk_ova_probe(h, sizeof(h)), 0);
    assert_null(blk_error_message()); /* a probe records nothing */
    assert_int_equal(blk_ova_probe(h, 100), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_decode), cmocka_unit_test(test_walk),
        cmocka_unit_test(test_ovf),           cmocka_unit_test(test_list),
        cmocka_unit_test(test_member_node),   cmocka_unit_test(test_sibling_name),
        cmocka_unit_test(test_probe),
    };
    return tu_run_group_tests("ova", tests);
}
