/*
 * tests/test-vhdx.c: the VHDX driver -- codec round trips (vhdx/codec.c
 * invariants 1, 2), metadata bounds (meta.c invariant 3), the BAT reaching
 * the disk through the log at a flush (vhdx.c invariant 5, log.c invariant
 * 5), and the log on open: replay in memory on a read-only open and into
 * the file on a read-write one, a torn entry ignored, a bad checksum and a
 * truncated file refused (log.c invariants 1-3).
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
#include "vhdx/vhdx.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB (1u << 20)

static void test_codec_round_trip(void **state)
{
    uint8_t buf[VHDX_REGION_TABLE_SIZE];
    VhdxHeader h = {.signature = VHDX_SIG_HEAD,
                    .sequence = 77,
                    .version = 1,
                    .log_length = MIB,
                    .log_offset = MIB},
               k;
    VhdxRegion r[2] = {{vhdx_guid_bat, 3 * MIB, MIB, 1},
                       {vhdx_guid_metadata, 4 * MIB, MIB, 1}},
               r2[2];
    VhdxMetaEntry m[2] = {{vhdx_guid_file_params, 65536, 8, 4},
                          {vhdx_guid_page83, 65544, 16, 6}},
                  m2[2];
    uint32_t n;

    vhdx_guid_random(&h.file_write_guid);
    vhdx_guid_random(&h.log_guid);
    vhdx_header_encode(&h, buf);
    assert_true(vhdx_header_decode(buf, &k));
    h.checksum = k.checksum;
    assert_memory_equal(&h, &k, sizeof(h));
    buf[4000] ^= 1; /* the checksum covers the reserved bytes too */
    assert_false(vhdx_header_decode(buf, &k));

    vhdx_region_table_encode(r, 2, buf);
    assert_true(vhdx_region_table_decode(buf, r2, &n));
    assert_int_equal(n, 2);
    assert_memory_equal(r, r2, sizeof(r));
    store_le32(buf + VHDX_RT_COUNT, VHDX_MAX_REGIONS + 1);
    assert_false(vhdx_region_table_decode(buf, r2, &n));

    vhdx_meta_table_encode(m, 2, buf);
    assert_true(vhdx_meta_table_decode(buf, m2, &n));
    assert_int_equal(n, 2);
    assert_memory_equal(m, m2, sizeof(m));

    VhdxLogHeader lh = {VHDX_SIG_LOGE, 1, 8192, 4096, 99, 3, h.log_guid, 5, 6}, lh2;
    VhdxLogDesc d = {VHDX_SIG_DESC, 0xaabbccdd, 0x1122334455667788ull, 4096, 99}, d2;
    vhdx_log_header_encode(&lh, buf);
    vhdx_log_header_decode(buf, &lh2);
    assert_memory_equal(&lh, &lh2, sizeof(lh));
    vhdx_log_desc_encode(&d, buf);
    vhdx_log_desc_decode(buf, &d2);
    assert_memory_equal(&d, &d2, sizeof(d));
    /* the spec's GUID byte order: data1-3 little-endian */
    assert_int_equal(vhdx_guid_bat.b[0], 0x66);
    assert_int_equal(vhdx_guid_bat.b[3], 0x2d);
    assert_int_equal(vhdx_guid_bat.b[8], 0x9d);
}

static QimgImage *create_open(const char *path, uint64_t size, const char *opts_kv[])
{
    g_autoptr(GHashTable) o = g_hash_table_new(g_str_hash, g_str_equal);
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;

    for (int i = 0; opts_kv && opts_kv[i]; i += 2) {
        g_hash_table_insert(o, (char *)opts_kv[i], (char *)opts_kv[i + 1]);
    }
    co.format = "vhdx";
    co.size = size;
    co.size_set = true;
    co.options = o;
    if (!qimg_image_create(path, &co, &err)) {
        fail_msg("create: %s", err->message);
    }
    oo.format = "vhdx";
    QimgImage *img = qimg_image_open(path, &oo, &err);
    if (!img) {
        fail_msg("open: %s", err->message);
    }
    return img;
}

static void pread_file(const char *p, uint64_t off, void *buf, size_t n)
{
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, buf, n, (off_t)off), (ssize_t)n);
    close(fd);
}

static void pwrite_file(const char *p, uint64_t off, const void *buf, size_t n)
{
    int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, buf, n, (off_t)off), (ssize_t)n);
    close(fd);
}

/* The current header of the image at p. */
static void current_header(const char *p, VhdxHeader *h, int *which)
{
    uint8_t buf[VHDX_HEADER_SIZE];
    VhdxHeader h2;
    bool v1, v2;

    pread_file(p, VHDX_HEADER1_OFFSET, buf, sizeof(buf));
    v1 = vhdx_header_decode(buf, h);
    pread_file(p, VHDX_HEADER2_OFFSET, buf, sizeof(buf));
    v2 = vhdx_header_decode(buf, &h2);
    assert_true(v1 || v2);
    if (!v1 || (v2 && h2.sequence > h->sequence)) {
        *h = h2;
        *which = 1;
    } else {
        *which = 0;
    }
}

/* The images qimg creates: BAT at 2 MiB (1 MiB log), data from 8 MiB. */
#define BAT_OFF (2 * MIB)

static uint64_t disk_bat(const char *p, unsigned idx)
{
    uint8_t e[8];
    pread_file(p, BAT_OFF + 8 * (uint64_t)idx, e, 8);
    return load_le64(e);
}

/* vhdx.c invariant 5 and log.c invariant 5: the BAT entry reaches the file
 * at the flush, and the log is empty again afterwards. */
static void test_write_flush(void **state)
{
    g_autofree char *p = tu_fresh("w.vhdx");
    g_autoptr(GError) err = NULL;
    const char *kv[] = {"block_size", "1048576", NULL};
    QimgImage *img = create_open(p, 8 * MIB, kv);
    uint8_t buf[6000], back[6000];
    VhdxHeader h;
    int which;

    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (uint8_t)(i % 249 + 1);
    }
    assert_int_equal(vhdx_bat_state(disk_bat(p, 3)), VHDX_PAYLOAD_ZERO);
    assert_true(qimg_image_pwrite(img, 3 * MIB + 100, buf, sizeof(buf), &err));
    assert_int_equal(vhdx_bat_state(disk_bat(p, 3)), VHDX_PAYLOAD_ZERO);
    assert_true(qimg_image_pread(img, 3 * MIB + 100, back, sizeof(back), &err));
    assert_memory_equal(buf, back, sizeof(buf));
    assert_true(qimg_image_flush(img, &err));
    uint64_t e = disk_bat(p, 3);
    assert_int_equal(vhdx_bat_state(e), VHDX_PAYLOAD_FULLY_PRESENT);
    assert_int_equal(vhdx_bat_offset(e), 8 * MIB); /* the first block after the layout */
    current_header(p, &h, &which);
    assert_true(vhdx_guid_is_zero(&h.log_guid));
    /* the entry that carried the update is in the log, with a GUID the
     * header no longer names */
    uint8_t sec[VHDX_LOG_SECTOR];
    VhdxLogHeader lh;
    pread_file(p, MIB, sec, sizeof(sec));
    vhdx_log_header_decode(sec, &lh);
    assert_int_equal(lh.signature, VHDX_SIG_LOGE);
    assert_false(vhdx_guid_equal(&lh.log_guid, &h.log_guid));
    assert_true(qimg_image_close(img, &err));

    if (!tu_have_qemu_img()) {
        TU_REQUIRE_QEMU_IMG();
        return;
    }
    size_t len;
    g_autofree uint8_t *raw = tu_qemu_raw(p, NULL, &len);
    assert_memory_equal(raw + 3 * MIB + 100, buf, sizeof(buf));
    tu_run("qemu-img check -f vhdx '%s'", p);
}

/*
 * A log entry that writes 4 KiB sectors secs[i] at offs[i], stamped with
 * seq, at log offset pos of the image at p whose log is at 1 MiB; the
 * header gets guid.  tear: the stamp of data sector 'tear' is wrong (a
 * torn write); badcrc: the checksum is off by one.
 */
static void inject(const char *p, uint32_t pos, uint64_t seq, const VhdxGuid *guid,
                   const uint64_t *offs, uint8_t (*secs)[VHDX_LOG_SECTOR], size_t n,
                   int tear, bool badcrc, uint64_t flushed)
{
    size_t total = 1 + n;
    g_autofree uint8_t *e = g_malloc0(total * VHDX_LOG_SECTOR);
    VhdxLogHeader lh = {.signature = VHDX_SIG_LOGE,
                        .entry_length = (uint32_t)(total * VHDX_LOG_SECTOR),
                        .tail = pos,
                        .sequence = seq,
                        .desc_count = (uint32_t)n,
                        .log_guid = *guid,
                        .flushed_offset = flushed,
                        .last_offset = flushed};

    assert_true(n <= 126);
    for (size_t i = 0; i < n; i++) {
        VhdxLogDesc d = {VHDX_SIG_DESC, load_le32(secs[i] + 4092), load_le64(secs[i]),
                         offs[i], seq};
        uint8_t *ds = e + (1 + i) * VHDX_LOG_SECTOR;
        vhdx_log_desc_encode(&d, e + (2 + i) * VHDX_LD_SIZE);
        store_le32(ds, VHDX_SIG_DATA);
        store_le32(ds + 4, (uint32_t)(seq >> 32));
        memcpy(ds + 8, secs[i] + 8, 4084);
        store_le32(ds + 4092, (uint32_t)seq + ((int)i == tear));
    }
    vhdx_log_header_encode(&lh, e);
    store_le32(e + 4, vhdx_checksum(e, total * VHDX_LOG_SECTOR, 4) + badcrc);
    pwrite_file(p, MIB + pos, e, total * VHDX_LOG_SECTOR);

    VhdxHeader h;
    int which;
    uint8_t hb[VHDX_HEADER_SIZE];
    current_header(p, &h, &which);
    h.sequence++;
    h.log_guid = *guid;
    vhdx_header_encode(&h, hb);
    pwrite_file(p, which ? VHDX_HEADER1_OFFSET : VHDX_HEADER2_OFFSET, hb, sizeof(hb));
}

static QimgImage *open_mode(const char *p, bool ro, GError **err)
{
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    oo.format = "vhdx";
    oo.read_only = ro;
    return qimg_image_open(p, &oo, err);
}

/* An image with block 0 written (0x11) and the log entry that maps block
 * 1 onto the same data; returns the BAT page the entry carries. */
static void prepare(const char *p, uint8_t page[VHDX_LOG_SECTOR])
{
    g_autoptr(GError) err = NULL;
    const char *kv[] = {"block_size", "1048576", NULL};
    QimgImage *img = create_open(p, 8 * MIB, kv);
    uint8_t buf[4096];

    memset(buf, 0x11, sizeof(buf));
    assert_true(qimg_image_pwrite(img, 0, buf, sizeof(buf), &err));
    assert_true(qimg_image_close(img, &err));
    pread_file(p, BAT_OFF, page, VHDX_LOG_SECTOR);
    store_le64(page + 8, load_le64(page)); /* block 1 = block 0's data */
}

static void assert_block1(QimgImage *img, uint8_t want)
{
    g_autoptr(GError) err = NULL;
    uint8_t buf[4096];

    assert_true(qimg_image_pread(img, MIB, buf, sizeof(buf), &err));
    for (size_t i = 0; i < sizeof(buf); i++) {
        assert_int_equal(buf[i], want);
    }
}

/* log.c invariant 3: read-only opens replay in memory, read-write opens
 * into the file, durably, and empty the log. */
static void test_log_replay(void **state)
{
    g_autofree char *p = tu_fresh("log.vhdx");
    g_autoptr(GError) err = NULL;
    uint8_t page[1][VHDX_LOG_SECTOR];
    uint64_t off = BAT_OFF;
    VhdxGuid g;
    VhdxHeader h;
    int which;
    struct stat st;

    prepare(p, page[0]);
    assert_int_equal(stat(p, &st), 0);
    vhdx_guid_random(&g);
    inject(p, 0, 5, &g, &off, page, 1, -1, false, (uint64_t)st.st_size);

    QimgImage *img = open_mode(p, true, &err);
    assert_non_null(img);
    assert_block1(img, 0x11); /* replayed in memory */
    assert_int_equal(vhdx_bat_state(disk_bat(p, 1)),
                     VHDX_PAYLOAD_ZERO); /* not in the file */
    qimg_image_close(img, NULL);
    current_header(p, &h, &which);
    assert_true(vhdx_guid_equal(&h.log_guid, &g));

    if (tu_have_qemu_img()) { /* QEMU refuses it read-only: what qimg improves on */
        g_autofree char *out = NULL;
        assert_int_not_equal(tu_run_status(&out, "qemu-img info -f vhdx '%s'", p), 0);
        assert_non_null(strstr(out, "needs to be replayed"));
    }

    img = open_mode(p, false, &err);
    assert_non_null(img);
    assert_block1(img, 0x11);
    assert_int_equal(disk_bat(p, 1), disk_bat(p, 0)); /* replayed into the file */
    current_header(p, &h, &which);
    assert_true(vhdx_guid_is_zero(&h.log_guid)); /* and the log emptied */
    QimgCheckResult r = QIMG_CHECK_RESULT_INIT;
    assert_true(qimg_image_check(img, &r, 0, &err));
    assert_int_equal(r.corruptions_fixed, 1); /* as qemu-img check -r counts a replay */
    qimg_check_result_clear(&r);
    qimg_image_close(img, NULL);
    if (tu_have_qemu_img()) {
        tu_run("qemu-img check -f vhdx '%s'", p);
    }
}

/* log.c invariants 1 and 2: a torn newest entry is ignored (the one before
 * it is the active sequence); a complete entry with a bad checksum, and a
 * log that expects a longer file, refuse the open. */
static void test_log_torn_and_corrupt(void **state)
{
    g_autofree char *p = tu_fresh("torn.vhdx");
    g_autoptr(GError) err = NULL;
    uint8_t page[1][VHDX_LOG_SECTOR], other[1][VHDX_LOG_SECTOR];
    uint64_t off = BAT_OFF;
    VhdxGuid g;
    struct stat st;

    prepare(p, page[0]);
    assert_int_equal(stat(p, &st), 0);
    vhdx_guid_random(&g);
    inject(p, 0, 7, &g, &off, page, 1, -1, false, (uint64_t)st.st_size);
    /* the next entry (sequence 8, right behind) would undo it, but is torn */
    memcpy(other[0], page[0], VHDX_LOG_SECTOR);
    store_le64(other[0] + 8, vhdx_bat_make(0, VHDX_PAYLOAD_ZERO));
    inject(p, 2 * VHDX_LOG_SECTOR, 8, &g, &off, other, 1, 0, false, (uint64_t)st.st_size);
    QimgImage *img = open_mode(p, true, &err);
    assert_non_null(img);
    assert_block1(img, 0x11); /* entry 7 replayed, entry 8 ignored */
    qimg_image_close(img, NULL);

    /* the same entry 8 complete: it is replayed after 7 */
    inject(p, 2 * VHDX_LOG_SECTOR, 8, &g, &off, other, 1, -1, false,
           (uint64_t)st.st_size);
    img = open_mode(p, true, &err);
    assert_non_null(img);
    assert_block1(img, 0);
    qimg_image_close(img, NULL);

    /* complete but with a wrong checksum: refused, named */
    inject(p, 2 * VHDX_LOG_SECTOR, 8, &g, &off, other, 1, -1, true, (uint64_t)st.st_size);
    img = open_mode(p, true, &err);
    assert_null(img);
    assert_non_null(strstr(err->message, "(sequence 8) is corrupt: checksum mismatch"));
    g_clear_error(&err);

    /* a valid log that expects more file than there is */
    inject(p, 2 * VHDX_LOG_SECTOR, 8, &g, &off, other, 1, -1, false,
           (uint64_t)st.st_size + MIB);
    img = open_mode(p, false, &err);
    assert_null(img);
    assert_non_null(strstr(err->message, "the image was truncated"));
}

/* log.c invariant 3: a descriptor aimed at the headers is refused. */
static void test_log_bad_target(void **state)
{
    g_autofree char *p = tu_fresh("target.vhdx");
    g_autoptr(GError) err = NULL;
    uint8_t page[1][VHDX_LOG_SECTOR];
    uint64_t off = VHDX_HEADER1_OFFSET;
    VhdxGuid g;
    struct stat st;

    prepare(p, page[0]);
    assert_int_equal(stat(p, &st), 0);
    vhdx_guid_random(&g);
    inject(p, 0, 3, &g, &off, page, 1, -1, false, (uint64_t)st.st_size);
    QimgImage *img = open_mode(p, false, &err);
    assert_null(img);
    assert_non_null(strstr(err->message, "over the headers or the log"));
}

/* meta.c invariant 3 (CVE-2014-0148): the parameters that size the BAT. */
static void test_bad_params(void **state)
{
    static const struct {
        unsigned item_off; /* from the metadata items at 3 MiB + 64 KiB */
        uint32_t value;
        const char *want;
    } cases[] = {
        {0, 3 * MIB, "VHDX block size 3145728 is not a power of two"},
        {0, 512 * 1024, "VHDX block size 524288"},
        {0, 0, "VHDX block size 0"},
        {32, 1024, "VHDX logical sector size 1024 is not 512 or 4096"},
        {8, 1000, "VHDX virtual disk size 1000 is not a multiple"},
    };
    g_autofree char *p = tu_fresh("params.vhdx");
    g_autoptr(GError) err = NULL;
    g_autofree char *orig = NULL;
    gsize len;
    const char *kv[] = {"block_size", "1048576", NULL};

    assert_true(qimg_image_close(create_open(p, 8 * MIB, kv), &err));
    assert_true(g_file_get_contents(p, &orig, &len, NULL));
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        uint8_t b[4];
        g_file_set_contents(p, orig, (gssize)len, NULL);
        store_le32(b, cases[i].value);
        pwrite_file(p, 3 * MIB + 65536 + cases[i].item_off, b, 4);
        QimgImage *img = open_mode(p, true, &err);
        if (img) {
            fail_msg("case %zu opened", i);
        }
        if (!strstr(err->message, cases[i].want)) {
            fail_msg("case %zu: '%s'", i, err->message);
        }
        g_clear_error(&err);
    }
    /* a disk of 2^63 bytes cannot size a BAT */
    uint8_t b8[8];
    g_file_set_contents(p, orig, (gssize)len, NULL);
    store_le64(b8, UINT64_C(1) << 63);
    pwrite_file(p, 3 * MIB + 65536 + 8, b8, 8);
    assert_null(open_mode(p, true, &err));
    assert_non_null(strstr(err->message, "up to 64 TiB"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_write_flush),
        cmocka_unit_test(test_log_replay),
        cmocka_unit_test(test_log_torn_and_corrupt),
        cmocka_unit_test(test_log_bad_target),
        cmocka_unit_test(test_bad_params),
    };
    return tu_run_group_tests("vhdx", tests);
}
