/*
 * tests/test-limits.c: a node's request limits (block/limits.c facts 1-4)
 * as QEMU 7.2's block layer honours blkdebug's: the requests that reach
 * the driver of a node with limits, recorded by a test driver (a format
 * node of 128 MiB that refuses zero writes and discards shorter than the
 * alignment, as QEMU's blkdebug does), for the requests of QEMU's iotest
 * 177.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "test-util.h"

#include <errno.h>
#include <string.h>

#define SIZE (128u << 20)

typedef struct Req {
    char kind; /* r w z d s */
    uint64_t offset, bytes;
    bool refused;
} Req;

static GArray *reqs; /* Req */
static uint8_t *disk;

static void record(BlkNode *img, char kind, uint64_t offset, uint64_t bytes, bool refused)
{
    Req r = {kind, offset, bytes, refused};
    (void)img;
    g_array_append_val(reqs, r);
}

static int t_preadv(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    (void)flags;
    record(img, 'r', offset, q->size, false);
    iov_from_buf(q, 0, disk + offset, q->size);
    return 0;
}

static int t_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    (void)flags;
    record(img, 'w', offset, q->size, false);
    iov_to_buf(q, 0, disk + offset, q->size);
    return 0;
}

static int t_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes, unsigned flags)
{
    uint64_t a = MAX(img->limits->align, img->limits->opt_write_zero);
    (void)flags;
    record(img, 'z', offset, bytes, bytes < a);
    if (bytes < a) {
        return -ENOTSUP;
    }
    memset(disk + offset, 0, bytes);
    return 0;
}

static int t_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    record(img, 'd', offset, bytes, bytes < img->limits->align);
    return bytes < img->limits->align ? -ENOTSUP : 0;
}

static int t_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    record(img, 's', offset, bytes, false);
    st->pnum = bytes;
    st->flags = BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID;
    st->map = offset;
    st->file = img;
    return 0;
}

static const BlkDriver t_driver = {
    .format_name = "limits-test",
    .preadv = t_preadv,
    .pwritev = t_pwritev,
    .pwrite_zeroes = t_pwrite_zeroes,
    .pdiscard = t_pdiscard,
    .block_status = t_block_status,
};

static BlkLimits limits;
static BlkNode node;

static int setup(void **state)
{
    (void)state;
    reqs = g_array_new(FALSE, FALSE, sizeof(Req));
    disk = g_malloc0(SIZE);
    memset(&limits, 0, sizeof(limits));
    g_mutex_init(&limits.rmw);
    node = (BlkNode){
        .drv = &t_driver, .filename = (char *)"t", .size = SIZE, .limits = &limits};
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    g_array_unref(reqs);
    g_free(disk);
    g_mutex_clear(&limits.rmw);
    return 0;
}

/* The recorded requests as "kOFFSET+BYTES" (a '!' after a refused one). */
static char *requests(void)
{
    GString *s = g_string_new(NULL);
    for (guint i = 0; i < reqs->len; i++) {
        Req *r = &g_array_index(reqs, Req, i);
        g_string_append_printf(s, "%s%c%" G_GUINT64_FORMAT "+%" G_GUINT64_FORMAT "%s",
                               i ? " " : "", r->kind, r->offset, r->bytes,
                               r->refused ? "!" : "");
    }
    g_array_set_size(reqs, 0);
    return g_string_free(s, FALSE);
}

#define ASSERT_REQS(want)                                                                \
    do {                                                                                 \
        g_autofree char *got_ = requests();                                              \
        assert_string_equal(got_, want);                                                 \
    } while (0)

/* Fact 1: 177's write -P 33 1000 128k and read with align=4k,
 * max-transfer=64k: the head and tail blocks read, the padded range
 * written in 64 KiB pieces. */
static void test_padded_rw(void **state)
{
    g_autofree uint8_t *buf = g_malloc(131072);
    (void)state;
    limits.align = 4096;
    limits.max_transfer = 65536;
    memset(disk, 22, SIZE);
    memset(buf, 33, 131072);
    assert_int_equal(blk_pwrite(&node, 1000, buf, 131072, 0), 0);
    ASSERT_REQS("r0+4096 r131072+4096 w0+65536 w65536+65536 w131072+4096");
    assert_int_equal(disk[999], 22);
    assert_int_equal(disk[1000], 33);
    assert_int_equal(disk[132071], 33);
    assert_int_equal(disk[132072], 22);
    memset(buf, 0, 131072);
    assert_int_equal(blk_pread(&node, 1000, buf, 131072), 0);
    ASSERT_REQS("r0+65536 r65536+65536 r131072+4096");
    assert_true(buf[0] == 33 && buf[131071] == 33);
}

/* Fact 2: 177's write -z 8003584 2093056 with align=512, max-transfer=64k,
 * opt-write-zero=1M: the pieces up to the first MiB refused and written
 * as zeros 64 KiB at a time, the whole MiB zeroed, the tail as zeros. */
static void test_zero_fallback(void **state)
{
    (void)state;
    limits.align = 512;
    limits.max_transfer = 65536;
    limits.opt_write_zero = 1 << 20;
    assert_int_equal(blk_pwrite_zeroes(&node, 8003584, 2093056, 0), 0);
    g_autofree char *got = requests();
    /* head: 8003584 .. 8M in 64 KiB refused pieces, each written */
    assert_true(g_str_has_prefix(got, "z8003584+65536! w8003584+65536 z8069120+65536! "
                                      "w8069120+65536"));
    assert_non_null(strstr(got, "z8388608+1048576 ")); /* the aligned MiB */
    assert_true(g_str_has_suffix(got, "z10027008+69632! w10027008+65536 "
                                      "z10092544+4096! w10092544+4096"));
}

/* Fact 2: non-power-of-two limits (177: 15M), write -z 32M 32M. */
static void test_zero_npot(void **state)
{
    (void)state;
    limits.align = 512;
    limits.opt_write_zero = limits.max_write_zero = 15u << 20;
    assert_int_equal(blk_pwrite_zeroes(&node, 32u << 20, 32u << 20, 0), 0);
    g_autofree char *got = requests();
    /* 32M..45M refused and written (16 MiB pieces at most), 45M..60M
     * zeroed, 60M..64M refused and written */
    assert_string_equal(got, "z33554432+13631488! w33554432+13631488 "
                             "z47185920+15728640 z62914560+4194304! w62914560+4194304");
}

/* Fact 3: 177's discard 80000001 30M with align=512, opt-discard=15M. */
static void test_discard_npot(void **state)
{
    (void)state;
    limits.align = 512;
    limits.opt_discard = limits.max_discard = 15u << 20;
    assert_int_equal(blk_pdiscard(&node, 80000001, 30u << 20), 0);
    ASSERT_REQS("d80000001+511! d80000512+14371328 d94371840+15728640 "
                "d110100480+1356800 d111457280+1!");
}

/* Fact 4: 204's alloc 0x6dffff0 1000 with align=4k: the driver asked
 * from the block's start, the answer for the caller's offset. */
static void test_status_aligned(void **state)
{
    BlkStatus st;
    (void)state;
    limits.align = 4096;
    assert_int_equal(blk_block_status(&node, 0x6dffff0, 1000, &st), 0);
    ASSERT_REQS("s115339264+8192");
    assert_int_equal(st.pnum, 1000);
    assert_int_equal(st.map, 0x6dffff0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_padded_rw, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_npot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_discard_npot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_aligned, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
