/*
 * tests/test-qcow2-fault.c: I/O errors at every metadata step of the write
 * path (QEMU's iotest 026 idea, on our fault-injecting node).
 *
 * For each step (refblock_update, refblock_alloc, reftable_grow, l2_alloc,
 * l2_update, l1_update, l1_grow, data_write, cow_write, flush) and errno
 * (EIO, ENOSPC) the same workload runs on
 * "blkdebug:event=STEP,errno=N,nth=K[,once]:FILE": unaligned writes over a
 * snapshot and a backing file (copy-on-write), a large write that adds
 * refcount blocks and grows the refcount table, zero writes, a discard, a
 * compressed write, a vmstate write that grows the L1 table, and flushes.
 *
 * Checks:
 *  - the injected error reaches the caller (the first failing request
 *    returns -N);
 *  - after the close, `qemu-img check` finds no corruption (leaks are
 *    allowed: exit 0 or 3) -- a persistent fault ("no once") leaves the
 *    file exactly as a crash at that step would (faulty.c invariant 2);
 *  - with a one-off fault, once a later flush succeeded, every byte whose
 *    write was acknowledged reads back as written (requests that failed
 *    leave their range undefined).
 *
 * Every case starts from a copy of one image made once per run.  make
 * test runs nth=1 and 2 of each step; QIMG_LONG=1 adds nth=3.
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

#define MB_(x) ((uint64_t)(x) << 20)
#define IMG_SIZE ((uint64_t)8 << 20)
#define BACKING_SIZE ((uint64_t)2 << 20)

typedef struct Range {
    uint64_t off, len;
} Range;

typedef struct Model {
    uint8_t *bytes;
    GArray *unknown; /* Range: a failed request may have changed these bytes */
} Model;

typedef struct Run {
    int failures;
    int first_error;
    Model m;
    BlkNode *img;
} Run;

/* An image-sized buffer of this program, made once and kept (i: 0 the
 * model, 1 the read back, 2 a request's data): a fresh 8 MiB buffer per
 * case and request was most of this program's CPU under ASan (a page fault
 * per 4 KiB, and the allocator mapping and unmapping it). */
static uint8_t *kept_buffer(int i)
{
    static uint8_t *bufs[3];
    if (!bufs[i]) {
        bufs[i] = g_malloc(IMG_SIZE);
    }
    return bufs[i];
}

static void record(Run *r, int ret, uint64_t off, uint64_t len)
{
    if (ret < 0) {
        if (r->failures++ == 0) {
            r->first_error = ret;
        }
        if (len) {
            Range u = {off, len};
            g_array_append_val(r->m.unknown, u);
        }
        blk_error_clear();
    }
}

/* seed + i * 7 + (i >> 9) for each byte i: that repeats every 128 KiB
 * (2^17 * 7 and 2^17 >> 9 are multiples of 256), so the first 128 KiB are
 * computed and copied on (a loop over 3 MiB of bytes is slow under ASan). */
static void pattern(uint8_t *buf, uint64_t len, uint8_t seed)
{
    const uint64_t period = 131072;
    for (uint64_t i = 0; i < MIN(len, period); i++) {
        buf[i] = (uint8_t)(seed + i * 7 + (i >> 9));
    }
    for (uint64_t done = period; done < len; done *= 2) {
        memcpy(buf + done, buf, MIN(done, len - done));
    }
}

static void op_write(Run *r, uint64_t off, uint64_t len, uint8_t seed)
{
    uint8_t *buf = kept_buffer(2);
    pattern(buf, len, seed);
    memcpy(r->m.bytes + off, buf, len);
    record(r, blk_pwrite(r->img, off, buf, len, 0), off, len);
}

static void op_zero(Run *r, uint64_t off, uint64_t len, unsigned flags)
{
    memset(r->m.bytes + off, 0, len);
    record(r, blk_pwrite_zeroes(r->img, off, len, flags), off, len);
}

static void op_compressed(Run *r, uint64_t off, uint64_t cs)
{
    uint8_t *buf = kept_buffer(2);
    BlkIOV q;
    for (uint64_t i = 0; i < cs; i++) {
        buf[i] = (uint8_t)(i / 100);
    }
    memcpy(r->m.bytes + off, buf, cs);
    iov_init_buf(&q, buf, cs);
    record(r, r->img->drv->pwrite_compressed(r->img, off, &q), off, cs);
}

/* The workload: reaches every step of the write path (see the top). */
static void workload(Run *r)
{
    uint64_t cs = ((Qcow2State *)r->img->opaque)->cluster_size;
    uint8_t vm[4096];
    BlkIOV q;

    op_write(r, 1000, 70000, 1);        /* COW from the snapshot's clusters */
    op_write(r, MB_(3) + 77, 300, 2);   /* COW from zeros past the backing */
    op_write(r, MB_(1) + 333, 5000, 3); /* COW from the backing file */
    op_write(r, MB_(4), MB_(3), 4);     /* new refblocks, reftable growth */
    op_zero(r, 200000, 100000, BLK_REQ_MAY_UNMAP);
    op_zero(r, 40 * cs, 8 * cs, 0);
    /* discard: clusters read as zeros afterwards (v3) */
    memset(r->m.bytes + 64 * cs, 0, 128 * cs);
    record(r, blk_pdiscard(r->img, 64 * cs, 128 * cs), 64 * cs, 128 * cs);
    op_compressed(r, 2000 * cs, cs);
    record(r, blk_flush(r->img), 0, 0);
    memset(vm, 0x3c, sizeof(vm));
    iov_init_buf(&q, vm, sizeof(vm));
    record(r, r->img->drv->save_vmstate(r->img, MB_(1), &q), 0, 0); /* L1 growth */
    op_write(r, MB_(7), 1000, 5);
    op_write(r, 2000 * cs + 10, 20, 6); /* replaces the compressed cluster */
    record(r, blk_flush(r->img), 0, 0);
}

/* The image every case starts from, made once per run (a fresh copy per
 * case): 512-byte clusters, 64-bit refcounts (a refcount block covers
 * 32 KiB, the first refcount table 2 MiB, so the workload grows both), a
 * raw backing file of random bytes (shared: opened read-only), 256 KiB
 * written and snapshot s over them.  Its raw contents in *init. */
static const char *fault_template(const uint8_t **init)
{
    static char *tpl;
    static uint8_t *tpl_init;

    if (!tpl) {
        g_autofree char *base = tu_fresh("base.raw");
        g_autofree char *raw = NULL;
        gchar *data = NULL;
        gsize n = 0;

        tpl = tu_fresh("template.qcow2");
        raw = g_strdup_printf("%s.init.raw", tpl);
        tu_run("head -c %" PRIu64 " /dev/urandom > '%s'", BACKING_SIZE, base);
        tu_run("qemu-img create -q -f qcow2 -o cluster_size=512,refcount_bits=64 -b '%s' "
               "-F raw '%s' %" PRIu64,
               base, tpl, IMG_SIZE);
        tu_run(
            "qemu-io -c 'write -P 0x5a 0 256k' '%s' >/dev/null && qemu-img snapshot -c "
            "s '%s' && qemu-img convert -O raw '%s' '%s'",
            tpl, tpl, tpl, raw);
        assert_true(g_file_get_contents(raw, &data, &n, NULL));
        assert_int_equal(n, IMG_SIZE);
        tpl_init = (uint8_t *)data;
    }
    *init = tpl_init;
    return tpl;
}

static void fault_case(const char *event, int errnum, uint64_t nth, bool once)
{
    g_autofree char *p = tu_fresh("fault.qcow2");
    g_autofree char *name = NULL;
    g_autofree char *out = NULL;
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.cache = BLK_CACHE_UNSAFE}; /* no fdatasync: fast */
    Run r = {0};
    const uint8_t *init;
    bool flushed = false;

    tu_copy_file(fault_template(&init), p);
    r.m.bytes = kept_buffer(0);
    memcpy(r.m.bytes, init, IMG_SIZE);
    r.m.unknown = g_array_new(FALSE, FALSE, sizeof(Range));

    name = event ? g_strdup_printf("blkdebug:event=%s,errno=%d,nth=%" PRIu64 "%s%s:%s",
                                   event, errnum, nth, once ? ",once" : "",
                                   strcmp(event, "flush") == 0 ? ",op=flush" : "", p)
                 : g_strdup(p);
    r.img = api_open_node(name, &o, NULL, &err);
    if (!r.img) {
        fail_msg("open %s: %s", name, err->message);
    }
    workload(&r);
    if (!event) {
        assert_int_equal(r.failures, 0);
    } else if (r.failures == 0 || r.first_error != -errnum) {
        fail_msg("%s errno=%d nth=%" PRIu64 "%s: %d failures, first error %d", event,
                 errnum, nth, once ? " once" : "", r.failures, r.first_error);
    }
    for (int i = 0; i < 3 && !flushed; i++) {
        flushed = blk_flush(r.img) == 0;
        blk_error_clear();
    }
    blk_close(r.img);

    /* no corruption, whatever the fault left behind */
    int rc = tu_run_status(&out, "qemu-img check '%s'", p);
    if ((rc != 0 && rc != 3) || (!event && rc != 0)) {
        fail_msg("%s errno=%d nth=%" PRIu64 "%s: qemu-img check exit %d\n%s", event,
                 errnum, nth, once ? " once" : "", rc, out);
    }
    if (once && flushed) {
        o.read_only = true;
        BlkNode *img = api_open_node(p, &o, NULL, &err);
        assert_non_null(img);
        uint8_t *buf = kept_buffer(1);
        assert_int_equal(blk_pread(img, 0, buf, IMG_SIZE), 0);
        /* the bytes of failed requests may hold anything: the model takes
         * what was read there, and must equal the rest */
        for (guint i = 0; i < r.m.unknown->len; i++) {
            Range *u = &g_array_index(r.m.unknown, Range, i);
            memcpy(r.m.bytes + u->off, buf + u->off, u->len);
        }
        if (memcmp(buf, r.m.bytes, IMG_SIZE) != 0) {
            for (uint64_t i = 0; i < IMG_SIZE; i++) {
                if (buf[i] != r.m.bytes[i]) {
                    fail_msg("%s errno=%d nth=%" PRIu64 ": acknowledged byte %" PRIu64
                             " lost",
                             event, errnum, nth, i);
                }
            }
        }
        blk_close(img);
    }
    g_array_unref(r.m.unknown);
    unlink(p);
}

static void run_event(const char *event)
{
    static const int errnos[] = {EIO, ENOSPC};
    const uint64_t nths[] = {1, 2, 3};
    size_t nnth = tu_long_run() ? G_N_ELEMENTS(nths) : 2;

    /* the workload grows each table once: two steps (table, header) */
    if (strstr(event, "grow")) {
        nnth = 2;
    }

    TU_REQUIRE_QEMU();
    for (size_t e = 0; e < G_N_ELEMENTS(errnos); e++) {
        for (size_t k = 0; k < nnth; k++) {
            fault_case(event, errnos[e], nths[k], false);
            fault_case(event, errnos[e], nths[k], true);
        }
    }
}

#define EVENT_TEST(ev)                                                                   \
    static void test_##ev(void **state)                                                  \
    {                                                                                    \
        run_event(#ev);                                                                  \
    }

EVENT_TEST(refblock_update)
EVENT_TEST(refblock_alloc)
EVENT_TEST(reftable_grow)
EVENT_TEST(l2_alloc)
EVENT_TEST(l2_update)
EVENT_TEST(l1_update)
EVENT_TEST(l1_grow)
EVENT_TEST(data_write)
EVENT_TEST(cow_write)
EVENT_TEST(flush)

/*
 * meta.c invariant 9: a failed flush or metadata write is sticky -- every
 * later write, zero, discard and flush fails with EIO naming the first
 * failure, reads go on, close writes nothing back -- while a failed guest
 * data write is that request's error only.  Reopened, the image is
 * consistent (leaks at most) and holds what the last good flush covered.
 */
static void sticky_case(const char *rule, bool sticky)
{
    g_autofree char *p = tu_fresh("sticky.qcow2");
    g_autofree char *name = g_strdup_printf("blkdebug:%s:%s", rule, p);
    g_autofree char *out = NULL;
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.cache = BLK_CACHE_WRITEBACK};
    uint8_t a[65536], b[65536], back[65536];
    BlkNode *img;
    int ret, rc;

    /* durable before the fault: 0xa1 at 0, the L2 table allocated */
    tu_run("qemu-img create -q -f qcow2 '%s' 16M && qemu-io -c 'write -q -P 0xa1 0 64k' "
           "'%s'",
           p, p);
    memset(a, 0xa1, sizeof(a));
    memset(b, 0xb2, sizeof(b));
    img = api_open_node(name, &o, NULL, &err);
    assert_non_null(img);
    /* the fault: a write (data_write) or the flush after it (flush,
     * l2_update, refblock_update) */
    ret = blk_pwrite(img, 1 << 20, b, sizeof(b), 0);
    if (ret == 0) {
        ret = blk_flush(img);
    }
    assert_int_equal(ret, -EIO);
    blk_error_clear();
    ret = blk_pwrite(img, 2 << 20, b, sizeof(b), 0);
    if (!sticky) {
        /* a guest data write failed: nothing else is refused */
        assert_int_equal(ret, 0);
        assert_int_equal(blk_flush(img), 0);
    } else {
        assert_int_equal(ret, -EIO);
        assert_non_null(strstr(blk_error_message(), "earlier metadata write or flush"));
        assert_int_equal(blk_pwrite_zeroes(img, 0, 4096, 0), -EIO);
        assert_int_equal(blk_pdiscard(img, 0, 65536), -EIO);
        assert_int_equal(blk_flush(img), -EIO);
        assert_int_equal(blk_flush(img), -EIO); /* still */
    }
    blk_error_clear();
    assert_int_equal(blk_pread(img, 0, back, sizeof(back)), 0); /* reads go on */
    assert_memory_equal(back, a, sizeof(a));
    blk_close(img);

    rc = tu_run_status(&out, "qemu-img check '%s'", p);
    if (rc != 0 && rc != 3) {
        fail_msg("%s: qemu-img check exit %d\n%s", rule, rc, out);
    }
    o.read_only = true;
    img = api_open_node(p, &o, NULL, &err);
    assert_non_null(img);
    assert_int_equal(blk_pread(img, 0, back, sizeof(back)), 0);
    assert_memory_equal(back, a, sizeof(a)); /* flushed before the fault */
    blk_close(img);
}

static void test_sticky_errors(void **state)
{
    TU_REQUIRE_QEMU_IMG();
    sticky_case("event=flush,op=flush,nth=1,once", true);
    sticky_case("event=l2_update,nth=1,once", true);
    sticky_case("event=refblock_update,nth=1,once", true);
    sticky_case("event=data_write,nth=1,once", false);
}

/* The workload alone: nothing fails, the image is clean and complete. */
static void test_no_fault(void **state)
{
    TU_REQUIRE_QEMU();
    fault_case(NULL, 0, 0, true);
}

/*
 * qcow2/l2.c invariant 1: a new L2 table costs two flushes -- one for its
 * refcount and the zeroed table together, one for the L1 entry -- not one
 * each (issue 30).  With the third flush of the node failing, the first
 * write into a fresh image (one new L2 table, no new refcount block)
 * succeeds, and the guest flush after it gets the error.
 */
static void test_l2_alloc_flushes(void **state)
{
    g_autofree char *p = tu_fresh("l2-flushes.qcow2");
    g_autofree char *name = NULL;
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.cache = BLK_CACHE_WRITEBACK};
    uint8_t buf[4096];
    BlkNode *img;

    (void)state;
    TU_REQUIRE_QEMU();
    tu_run("qemu-img create -q -f qcow2 '%s' 8M", p);
    name =
        g_strdup_printf("blkdebug:event=flush,errno=%d,nth=3,once,op=flush:%s", EIO, p);
    img = api_open_node(name, &o, NULL, &err);
    if (!img) {
        fail_msg("open %s: %s", name, err->message);
    }
    memset(buf, 0x5a, sizeof(buf));
    assert_int_equal(blk_pwrite(img, 0, buf, sizeof(buf), 0), 0);
    assert_int_equal(blk_flush(img), -EIO);
    blk_error_clear();
    blk_close(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refblock_update),  cmocka_unit_test(test_refblock_alloc),
        cmocka_unit_test(test_reftable_grow),    cmocka_unit_test(test_l2_alloc),
        cmocka_unit_test(test_l2_update),        cmocka_unit_test(test_l1_update),
        cmocka_unit_test(test_l1_grow),          cmocka_unit_test(test_data_write),
        cmocka_unit_test(test_cow_write),        cmocka_unit_test(test_flush),
        cmocka_unit_test(test_no_fault),         cmocka_unit_test(test_sticky_errors),
        cmocka_unit_test(test_l2_alloc_flushes),
    };
    return tu_run_group_tests("qcow2-fault", tests);
}
