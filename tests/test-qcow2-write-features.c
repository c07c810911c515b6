/*
 * tests/test-qcow2-write-features.c: the qcow2 write path against qemu-img
 * 7.2, one test per feature: refcount table growth, L1 growth through the
 * vmstate area, compressed clusters read back by qemu-img convert, resize
 * against qemu-img resize, copy-on-write from a backing file, writes over
 * clusters shared with a snapshot, the overlap check and the corrupt bit,
 * allocation at offset 0, the dirty bit of lazy refcounts, autoclear bits,
 * zero/discard semantics (iotest 290), refcount overflow.
 * The random differential test is test-qcow2-write-scribble.c's; the
 * helpers both use are test-qcow2-write-fixture.h's.
 * Everything is skipped without qemu-img / qemu-io.
 */
#include "test-qcow2-write-fixture.h"

static uint64_t header64(const char *path, size_t off)
{
    uint8_t b[8];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    assert_int_equal(fread(b, 1, 8, f), 8);
    fclose(f);
    return load_be64(b);
}

static uint32_t header32(const char *path, size_t off)
{
    return (uint32_t)(header64(path, off) >> 32);
}

static void poke64(const char *path, uint64_t off, uint64_t v)
{
    uint8_t b[8];
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    store_be64(b, v);
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    assert_int_equal(fwrite(b, 1, 8, f), 8);
    fclose(f);
}

/* ---- single features ---- */

/* 512-byte clusters and 64-bit refcounts: a refcount block covers 64
 * clusters and the reftable starts with one cluster (64 blocks), so 4 MiB
 * of data grow it several times (iotest 044's concern). */
static void test_reftable_growth(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("reftable.qcow2");
    g_autofree char *model = g_strdup_printf("%s.raw", p);
    const uint64_t size = MB(16);
    g_autofree uint8_t *m = g_malloc0(size);
    g_autoptr(GRand) r = g_rand_new_with_seed(44);
    uint32_t before, after;

    tu_run("qemu-img create -q -f qcow2 -o cluster_size=512,refcount_bits=64 '%s' 16M",
           p);
    before = header32(p, QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS);
    BlkNode *img = open_rw(p);
    for (uint64_t off = 0; off < size; off += 65536 + 512) {
        uint64_t len = MIN((uint64_t)65536, size - off);
        tu_fill_random(r, m + off, len);
        assert_int_equal(blk_pwrite(img, off, m + off, len, 0), 0);
    }
    close_ok(img);
    after = header32(p, QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS);
    assert_true(after >= before + 3); /* grew several times: 1 -> 2 -> 3 -> 5 ... */
    check_clean(p);
    write_file(model, m, size);
    tu_run("qemu-img compare -f qcow2 -F raw '%s' '%s'", p, model);
}

/* The vmstate area lies past the disk: writing it grows the L1 (x1.5 steps),
 * moves the table and switches the header. */
static void test_l1_growth_vmstate(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("l1grow.qcow2");
    g_autofree uint8_t *buf = g_malloc(MB(1)), *rd = g_malloc(MB(1));
    g_autoptr(GRand) r = g_rand_new_with_seed(29);
    BlkIOV q;

    tu_run("qemu-img create -q -f qcow2 -o cluster_size=4096 '%s' 4M", p);
    uint32_t l1_before = header32(p, QCOW2_HDR_L1_SIZE);
    uint64_t l1_off_before = header64(p, QCOW2_HDR_L1_TABLE_OFFSET);
    BlkNode *img = open_rw(p);
    /* 4 KiB clusters: one L1 entry maps 2 MiB; vmstate starts at 4 MiB */
    assert_int_equal(qcow2_vm_state_offset(st(img)), MB(4));
    tu_fill_random(r, buf, MB(1));
    iov_init_buf(&q, buf, MB(1));
    assert_int_equal(img->drv->save_vmstate(img, MB(40) + 123, &q), 0);
    iov_init_buf(&q, rd, MB(1));
    assert_int_equal(img->drv->load_vmstate(img, MB(40) + 123, &q), 0);
    assert_memory_equal(rd, buf, MB(1));
    close_ok(img);
    assert_true(header32(p, QCOW2_HDR_L1_SIZE) > l1_before);
    assert_true(header64(p, QCOW2_HDR_L1_TABLE_OFFSET) != l1_off_before);
    check_clean(p);
    /* the disk itself is untouched */
    size_t n;
    g_autofree uint8_t *raw = tu_qemu_raw(p, NULL, &n);
    assert_int_equal(n, MB(4));
    assert_true(buf_is_zero(raw, n));
    /* reopen: the vmstate is still there */
    img = open_rw(p);
    iov_init_buf(&q, rd, MB(1));
    memset(rd, 0, MB(1));
    assert_int_equal(img->drv->load_vmstate(img, MB(40) + 123, &q), 0);
    assert_memory_equal(rd, buf, MB(1));
    blk_close(img);
}

/* A snapshot view reads the snapshot's vmstate through the snapshot's L1,
 * where the snapshot's disk size puts it, whatever the active L1 holds. */
static void test_vmstate_snapshot_view(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("vmview.qcow2");
    g_autofree uint8_t *buf = g_malloc(300000), *rd = g_malloc(300000);
    g_autoptr(GRand) r = g_rand_new_with_seed(8);
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.snapshot = "s1"};
    BlkIOV q;

    tu_run("qemu-img create -q -f qcow2 -o cluster_size=4096 '%s' 4M", p);
    BlkNode *img = open_rw(p);
    tu_fill_random(r, buf, 300000);
    iov_init_buf(&q, buf, 300000);
    assert_int_equal(img->drv->save_vmstate(img, 5000, &q), 0);
    close_ok(img);
    /* the snapshot's L1 copy holds the vmstate clusters; then the active
     * image moves on: resized (vmstate area moves) and overwritten */
    tu_run("qemu-img snapshot -c s1 '%s' && qemu-img resize -q '%s' 8M", p, p);
    img = open_rw(p);
    memset(rd, 0xee, 300000);
    iov_init_buf(&q, rd, 300000);
    assert_int_equal(img->drv->save_vmstate(img, 5000, &q), 0);
    close_ok(img);
    check_clean(p);

    img = api_open_node(p, &o, NULL, &err);
    assert_non_null(img);
    memset(rd, 0, 300000);
    iov_init_buf(&q, rd, 300000);
    assert_int_equal(img->drv->load_vmstate(img, 5000, &q), 0);
    assert_memory_equal(rd, buf, 300000);
    blk_close(img);
}

/* Whole-cluster vmstate writes need no COW: no cow_write step at all.  A
 * partial one COWs into a cluster that may hold old bytes -- here the 1 MiB
 * the file had past its clusters at open -- but not into one the file was
 * grown with, which reads as zeros (grow.c invariant 2). */
static void test_vmstate_aligned_no_cow(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("vmcow.qcow2");
    g_autofree char *name = NULL;
    g_autofree uint8_t *buf = g_malloc(MB(2));
    g_autofree uint8_t *rd = g_malloc(1000);
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {.cache = BLK_CACHE_UNSAFE};
    BlkIOV q;

    tu_run("qemu-img create -q -f qcow2 '%s' 64M && truncate -s +1M '%s'", p, p);
    name = g_strdup_printf("blkdebug:event=cow_write,errno=5:%s", p);
    BlkNode *img = api_open_node(name, &o, NULL, &err);
    assert_non_null(img);
    memset(buf, 0x5a, MB(2));
    iov_init_buf(&q, buf, 1000);
    assert_true(img->drv->save_vmstate(img, MB(8) + 5, &q) < 0); /* this one COWs */
    blk_error_clear();
    iov_init_buf(&q, buf, MB(2));
    assert_int_equal(img->drv->save_vmstate(img, 0, &q), 0);
    assert_int_equal(img->drv->save_vmstate(img, MB(2), &q), 0);
    iov_init_buf(&q, buf, 1000);
    assert_int_equal(img->drv->save_vmstate(img, MB(16) + 5, &q), 0); /* grown: no COW */
    iov_init_buf(&q, rd, 1000);
    assert_int_equal(img->drv->load_vmstate(img, MB(16) + 5, &q), 0);
    assert_memory_equal(rd, buf, 1000);
    close_ok(img);
    check_clean(p);
}

static void compressed_roundtrip(const char *ctype)
{
    g_autofree char *p = tu_fresh("compressed.qcow2");
    const uint64_t cs = 65536, size = 40 * cs + 4096; /* unaligned last cluster */
    g_autofree uint8_t *m = g_malloc0(size);
    g_autoptr(GRand) r = g_rand_new_with_seed(7);
    g_autofree char *out = NULL;

    tu_run("qemu-img create -q -f qcow2 -o compression_type=%s '%s' %" PRIu64, ctype, p,
           size);
    BlkNode *img = open_rw(p);
    for (uint64_t c = 0; c < size; c += cs) {
        uint64_t len = MIN(cs, size - c);
        BlkIOV q;
        if (c % (5 * cs) == 0) {
            tu_fill_random(r, m + c, len); /* stored uncompressed */
        } else {
            fill_compressible(r, m + c, len);
        }
        iov_init_buf(&q, m + c, len);
        assert_int_equal(img->drv->pwrite_compressed(img, c, &q), 0);
    }
    /* overwrite some compressed clusters, partly: normal writes replace them */
    tu_fill_random(r, m + 3 * cs + 100, 5000);
    assert_int_equal(blk_pwrite(img, 3 * cs + 100, m + 3 * cs + 100, 5000, 0), 0);
    close_ok(img);
    assert_int_equal(tu_run_status(&out, "qemu-img check '%s'", p), 0);
    assert_non_null(strstr(out, "No errors were found"));
    assert_null(strstr(out, " 0.00% compressed"));
    size_t n;
    g_autofree uint8_t *raw = tu_qemu_raw(p, NULL, &n);
    assert_int_equal(n, size);
    assert_memory_equal(raw, m, size);
}

static void test_compressed_zlib(void **state)
{
    TU_REQUIRE_QEMU();
    compressed_roundtrip("zlib");
}

static void test_compressed_zstd(void **state)
{
    TU_REQUIRE_QEMU();
    compressed_roundtrip("zstd");
}

/* Resize in steps: the contents must be the old ones cut or extended with
 * zeros (the new area reads as zeros even over a longer backing file, and
 * after a shrink), and, until the first shrink and without a backing file,
 * the same as qemu-img resize on a copy.  make test leaves out 512-byte
 * clusters over the backing file (QIMG_LONG=1 runs them): the grow to
 * 600 MB zeroes the ~28,000 clusters the backing file still covers, across
 * ~440 L2 tables, ~14 s of this program's ~27 s under ASan; the three other
 * option sets zero that area over the backing file too. */
static void test_resize(void **state)
{
    TU_REQUIRE_QEMU();
    static const char *opts[] = {"cluster_size=65536", "cluster_size=512",
                                 "extended_l2=on", "compat=0.10"};
    static const uint64_t steps[] = {50000384, 600000000, 10000384, 40000000, 40000512};
    static const BlkPrealloc modes[] = {BLK_PREALLOC_OFF, BLK_PREALLOC_METADATA,
                                        BLK_PREALLOC_FALLOC, BLK_PREALLOC_FULL};

    /* the backing file (longer than the image), made once: every overlay
     * opens it read-only */
    g_autofree char *b = tu_fresh("resize-base.qcow2");

    tu_run("qemu-img create -q -f qcow2 '%s' 64M && qemu-io -c 'write -P 0x77 0 64M' "
           "'%s' >/dev/null",
           b, b);
    for (size_t o = 0; o < G_N_ELEMENTS(opts); o++) {
        for (int with_backing = 0; with_backing < 2; with_backing++) {
            if (with_backing && strcmp(opts[o], "cluster_size=512") == 0 &&
                !tu_long_run()) {
                continue; /* (above) */
            }
            g_autofree char *p = tu_fresh("resize.qcow2");
            g_autofree char *q = tu_fresh("resize-qemu.qcow2");
            g_autofree char *expect = tu_fresh("resize-expect.raw");
            g_autoptr(GRand) r = g_rand_new_with_seed(3 + (unsigned)o);
            g_autofree uint8_t *buf = g_malloc(MB(1));

            if (with_backing) {
                tu_run("qemu-img create -q -f qcow2 -o %s -b '%s' -F qcow2 '%s' 30000256",
                       opts[o], b, p);
            } else {
                tu_run("qemu-img create -q -f qcow2 -o %s '%s' 30000256", opts[o], p);
            }
            BlkNode *img = open_rw(p);
            for (int i = 0; i < 40; i++) {
                uint64_t off = g_rand_int_range(r, 0, 30000256 - MB(1));
                uint64_t len = g_rand_int_range(r, 1, MB(1));
                tu_fill_random(r, buf, len);
                assert_int_equal(blk_pwrite(img, off, buf, len, 0), 0);
            }
            close_ok(img);
            tu_copy_file(p, q);
            tu_run("qemu-img convert -O raw '%s' '%s'", p, expect);
            bool shrunk = false;
            for (size_t s = 0; s < G_N_ELEMENTS(steps); s++) {
                blk_error_clear();
                /* every mode on a small grow; the big one sparse only */
                BlkPrealloc mode = s == 1   ? modes[o == 0]
                                   : s != 2 ? modes[(s + o) % 4]
                                            : BLK_PREALLOC_OFF;
                img = open_rw(p);
                if (blk_truncate(img, steps[s], true, mode, true) < 0) {
                    fail_msg("resize to %" PRIu64 ": %s", steps[s], blk_error_message());
                }
                close_ok(img);
                check_clean(p);
                tu_run("truncate -s %" PRIu64 " '%s'", steps[s], expect);
                tu_run("qemu-img compare -q -F raw '%s' '%s'", p, expect);
                /* QEMU 7.2 lets bytes cut off by a shrink reappear when the
                 * image grows again (and shows a longer backing file in the
                 * new area): compare with it before that only. */
                shrunk |= s > 0 && steps[s] < steps[s - 1];
                if (!with_backing && !shrunk) {
                    tu_run("qemu-img resize -q --shrink '%s' %" PRIu64, q, steps[s]);
                    tu_run("qemu-img compare -q '%s' '%s'", q, p);
                }
            }
        }
    }
}

static void test_resize_refusals(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("resize-v2.qcow2");
    blk_error_clear();

    tu_run(
        "qemu-img create -q -f qcow2 -o compat=0.10 '%s' 16M && qemu-img snapshot -c s "
        "'%s'",
        p, p);
    BlkNode *img = open_rw(p);
    assert_int_equal(blk_truncate(img, MB(32), true, 0, false), -ENOTSUP);
    assert_string_equal(blk_error_message(),
                        "Can't resize a v2 image which has snapshots");
    blk_error_clear();
    blk_close(img);

    g_autofree char *p3 = tu_fresh("resize-v3.qcow2");
    tu_run("qemu-img create -q -f qcow2 '%s' 16M", p3);
    img = open_rw(p3);
    assert_int_equal(blk_truncate(img, MB(8), true, 0, false), -EINVAL);
    blk_error_clear();
    assert_int_equal(blk_truncate(img, MB(8) + 1, true, 0, true), -EINVAL);
    assert_string_equal(blk_error_message(), "The new size must be a multiple of 512");
    blk_close(img);
    check_clean(p3);
}

/* Partial writes over a backing file copy the rest of the cluster. */
static void test_cow_from_backing(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *b = tu_fresh("cow-base.qcow2");
    g_autofree char *p = tu_fresh("cow.qcow2");
    uint8_t data[3000];

    tu_run("qemu-img create -q -f qcow2 '%s' 8M && qemu-io -c 'write -P 0x33 0 8M' '%s' "
           ">/dev/null",
           b, b);
    tu_run("qemu-img create -q -f qcow2 -b '%s' -F qcow2 '%s' 8M", b, p);
    BlkNode *img = open_rw(p);
    memset(data, 0x44, sizeof(data));
    assert_int_equal(blk_pwrite(img, 100000, data, sizeof(data), 0), 0);
    assert_int_equal(blk_pwrite(img, 65536 * 3 - 1000, data, sizeof(data), 0), 0);
    close_ok(img);
    check_clean(p);
    tu_run("qemu-io -c 'read -P 0x33 0 100000' -c 'read -P 0x44 100000 3000' "
           "-c 'read -P 0x33 103000 90608' -c 'read -P 0x44 195608 3000' "
           "-c 'read -P 0x33 198608 8190000' '%s' >/dev/null",
           p);
    /* only the three clusters written were allocated */
    g_autofree char *out = NULL;
    tu_run_status(&out, "qemu-img map --output=json '%s'", p);
    g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
    uint64_t own = 0;
    for (int i = 0; lines[i]; i++) {
        const char *l = strstr(lines[i], "\"length\": ");
        if (l && strstr(lines[i], "\"depth\": 0")) {
            own += g_ascii_strtoull(l + 10, NULL, 10);
        }
    }
    assert_int_equal(own, 3 * 65536);
}

/* Clusters shared with a snapshot are copied on write; the snapshot keeps
 * its contents and the refcounts stay exact. */
static void test_snapshot_shared(void **state)
{
    TU_REQUIRE_QEMU();
    static const char *opts[] = {"cluster_size=65536",
                                 "cluster_size=4096,refcount_bits=2", "extended_l2=on",
                                 "compat=0.10"};
    for (size_t o = 0; o < G_N_ELEMENTS(opts); o++) {
        g_autofree char *p = tu_fresh("snap.qcow2");
        g_autoptr(GRand) r = g_rand_new_with_seed(61);
        const uint64_t size = MB(8);
        g_autofree uint8_t *m = NULL, *buf = g_malloc(MB(1));
        size_t n;

        tu_run("qemu-img create -q -f qcow2 -o %s '%s' 8M && qemu-io -c 'write -P 0x11 0 "
               "5M' "
               "-c 'write -z 6M 1M' '%s' >/dev/null && qemu-img snapshot -c s1 '%s'",
               opts[o], p, p, p);
        g_autofree uint8_t *before = tu_qemu_raw(p, NULL, &n);
        m = g_memdup2(before, size);
        BlkNode *img = open_rw(p);
        for (int i = 0; i < 60; i++) {
            uint64_t len = g_rand_int_range(r, 1, 200000);
            uint64_t off = g_rand_int_range(r, 0, (gint32)(size - len));
            if (i % 5 == 4) {
                assert_int_equal(blk_pwrite_zeroes(img, off, len, BLK_REQ_MAY_UNMAP), 0);
                memset(m + off, 0, len);
            } else {
                tu_fill_random(r, buf, len);
                assert_int_equal(blk_pwrite(img, off, buf, len, 0), 0);
                memcpy(m + off, buf, len);
            }
        }
        close_ok(img);
        check_clean(p);
        g_autofree uint8_t *snap = tu_qemu_raw(p, "s1", &n);
        assert_memory_equal(snap, before, size);
        g_autofree uint8_t *now = tu_qemu_raw(p, NULL, &n);
        assert_memory_equal(now, m, size);
    }
}

/* An L2 entry pointing at the L1 table: the write is refused, the image is
 * marked corrupt (qemu-img info: corrupt: true), further writes fail with
 * ENOMEDIUM as QEMU's (meta.c invariant 2), and a read-write open is
 * refused. */
static void test_overlap_check(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("overlap.qcow2");
    g_autofree char *out = NULL;
    g_autoptr(GError) err = NULL;
    BlkOpenOptions o = {0};
    uint8_t data[512] = {1};

    tu_run(
        "qemu-img create -q -f qcow2 '%s' 16M && qemu-io -c 'write -P 0x22 0 64k' '%s' "
        ">/dev/null",
        p, p);
    uint64_t l1 = header64(p, QCOW2_HDR_L1_TABLE_OFFSET);
    uint64_t l2 = header64(p, l1) & QCOW2_L1E_OFFSET_MASK;
    poke64(p, l2, l1 | QCOW2_OFLAG_COPIED);

    BlkNode *img = open_rw(p);
    assert_int_equal(blk_pwrite(img, 0, data, sizeof(data), 0), -EIO);
    assert_string_equal(blk_error_message(),
                        "qcow2: Marking image as corrupt: Preventing invalid write on "
                        "metadata (overlaps with active L1 table); further corruption "
                        "events will be suppressed");
    blk_error_clear();
    assert_int_equal(blk_pwrite(img, MB(2), data, sizeof(data), 0), -ENOMEDIUM);
    assert_int_equal(blk_pwrite_zeroes(img, MB(4), 65536, 0), -ENOMEDIUM);
    assert_int_equal(blk_pdiscard(img, MB(4), 65536), -ENOMEDIUM);
    blk_error_clear();
    blk_close(img);

    tu_run_status(&out, "qemu-img info --output=json '%s'", p);
    assert_non_null(strstr(out, "\"corrupt\": true"));
    assert_null(api_open_node(p, &o, NULL, &err));
    assert_non_null(strstr(err->message, "qcow2: Image is corrupt; cannot be opened "
                                         "read/write"));
    o.read_only = true;
    img = api_open_node(p, &o, NULL, NULL);
    assert_non_null(img);
    blk_close(img);
}

/* A refcount of 0 for the header cluster would hand out cluster 0. */
static void test_alloc_offset_zero(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("zero-offset.qcow2");
    g_autofree char *out = NULL;
    uint8_t data[512] = {1};

    tu_run("qemu-img create -q -f qcow2 '%s' 16M", p);
    uint64_t rt = header64(p, QCOW2_HDR_REFCOUNT_TABLE_OFFSET);
    uint64_t rb = header64(p, rt);
    poke64(p, rb, header64(p, rb) & UINT64_C(0x0000ffffffffffff)); /* cluster 0: 0 */
    BlkNode *img = open_rw(p);
    assert_int_equal(blk_pwrite(img, 0, data, sizeof(data), 0), -EIO);
    assert_non_null(strstr(blk_error_message(), "Marking image as corrupt: Preventing "
                                                "invalid allocation of L2 table at "
                                                "offset 0"));
    blk_error_clear();
    blk_close(img);
    tu_run_status(&out, "qemu-img info --output=json '%s'", p);
    assert_non_null(strstr(out, "\"corrupt\": true"));
}

/* Lazy refcounts: the dirty bit is on disk from the first allocating write
 * until a clean close. */
static void test_lazy_refcounts_dirty_bit(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("lazy.qcow2");
    g_autofree char *copy = tu_fresh("lazy-crash.qcow2");
    uint8_t data[4096];

    tu_run("qemu-img create -q -f qcow2 -o lazy_refcounts=on '%s' 16M", p);
    BlkNode *img = open_rw(p);
    assert_int_equal(header64(p, QCOW2_HDR_INCOMPATIBLE_FEATURES) & QCOW2_INCOMPAT_DIRTY,
                     0);
    memset(data, 0x99, sizeof(data));
    assert_int_equal(blk_pwrite(img, 12345, data, sizeof(data), 0), 0);
    assert_int_equal(header64(p, QCOW2_HDR_INCOMPATIBLE_FEATURES) & QCOW2_INCOMPAT_DIRTY,
                     QCOW2_INCOMPAT_DIRTY);
    assert_int_equal(blk_flush(img), 0);
    /* a "crash" now: the copy is dirty, and qemu-img repairs it */
    tu_run("cp '%s' '%s'", p, copy);
    close_ok(img);
    assert_int_equal(header64(p, QCOW2_HDR_INCOMPATIBLE_FEATURES) & QCOW2_INCOMPAT_DIRTY,
                     0);
    check_clean(p);
    tu_run("qemu-io -c 'read -P 0x99 12345 4096' '%s' >/dev/null", p);
    g_autofree char *out = NULL;
    tu_run_status(&out, "qemu-img info '%s'", copy);
    assert_non_null(strstr(out, "cleanly shut down: no"));
    /* refcounts were not written (lazy): qemu-img sees the damage ... */
    assert_int_equal(tu_run_status(NULL, "qemu-img check '%s'", copy), 2);
    /* ... and a read-write open repairs it first (DESIGN.md rule 5) */
    img = open_rw(copy);
    assert_int_equal(
        header64(copy, QCOW2_HDR_INCOMPATIBLE_FEATURES) & QCOW2_INCOMPAT_DIRTY, 0);
    assert_int_equal(blk_pwrite(img, MB(3), data, sizeof(data), 0), 0);
    close_ok(img);
    check_clean(copy);
    tu_run(
        "qemu-io -c 'read -P 0x99 12345 4096' -c 'read -P 0x99 3M 4096' '%s' >/dev/null",
        copy);
}

/* empty.c invariants 2 and 3: a reset right after writes on an image with
 * lazy refcounts (its refcount blocks still dirty in the cache) writes them
 * back first, and leaves qemu-img's bare image, reading the base. */
static void test_make_empty_lazy(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *b = tu_fresh("empty-base.qcow2");
    g_autofree char *p = tu_fresh("empty-lazy.qcow2");
    uint8_t data[4096];

    tu_run("qemu-img create -q -f qcow2 '%s' 16M && "
           "qemu-io -c 'write -P 0x11 0 1M' '%s' >/dev/null",
           b, b);
    tu_run("qemu-img create -q -f qcow2 -o lazy_refcounts=on -b '%s' -F qcow2 '%s'", b,
           p);
    BlkNode *img = open_rw(p);
    memset(data, 0x99, sizeof(data));
    assert_int_equal(blk_pwrite(img, 4096, data, sizeof(data), 0), 0);
    assert_int_equal(blk_pwrite(img, MB(5), data, sizeof(data), 0), 0);
    assert_true(qcow2_cache_has_dirty_locked(st(img)->refcount_cache));
    assert_int_equal(img->drv->make_empty(img), 0);
    close_ok(img);
    check_clean(p);
    tu_run("test $(stat -c %%s '%s') = %d", p, 4 * 65536);
    tu_run("qemu-io -c 'read -P 0x11 0 1M' -c 'read -P 0 5M 4096' '%s' >/dev/null", p);
}

/* Unknown autoclear bits are cleared by a read-write open only. */
static void test_autoclear_cleared(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("autoclear.qcow2");
    BlkOpenOptions o = {.read_only = true};

    tu_run("qemu-img create -q -f qcow2 '%s' 16M", p);
    poke64(p, QCOW2_HDR_AUTOCLEAR_FEATURES, UINT64_C(1) << 40);
    BlkNode *img = api_open_node(p, &o, NULL, NULL);
    assert_non_null(img);
    blk_close(img);
    assert_int_equal(header64(p, QCOW2_HDR_AUTOCLEAR_FEATURES), UINT64_C(1) << 40);
    img = open_rw(p);
    assert_int_equal(header64(p, QCOW2_HDR_AUTOCLEAR_FEATURES), 0);
    blk_close(img);
    check_clean(p);
}

/* iotest 290: discard on v2 / v3, with and without a backing file. */
static void test_discard_v2_v3(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *b = tu_fresh("290-base.qcow2");
    uint8_t data[131072];

    tu_run(
        "qemu-img create -q -f qcow2 '%s' 128k && qemu-io -c 'write -P 0xff 0 128k' '%s' "
        ">/dev/null",
        b, b);
    for (int v3 = 0; v3 < 2; v3++) {
        for (int backing = 0; backing < 2; backing++) {
            g_autofree char *p = tu_fresh("290.qcow2");
            g_autofree char *out = NULL;
            tu_run("qemu-img create -q -f qcow2 -o compat=%s %s%s%s '%s' 128k",
                   v3 ? "1.1" : "0.10", backing ? "-F qcow2 -b '" : "", backing ? b : "",
                   backing ? "'" : "", p);
            BlkNode *img = open_rw(p);
            memset(data, 1, sizeof(data));
            assert_int_equal(blk_pwrite(img, 0, data, sizeof(data), 0), 0);
            assert_int_equal(blk_pdiscard(img, 0, sizeof(data)), 0);
            assert_int_equal(blk_pread(img, 0, data, sizeof(data)), 0);
            close_ok(img);
            check_clean(p);
            int expect = !v3 && backing ? 1 : 0;
            for (size_t i = 0; i < sizeof(data); i++) {
                assert_int_equal(data[i], expect);
            }
            if (tu_run_status(&out, "qemu-io -c 'read -P %d 0 128k' '%s'", expect, p) !=
                0) {
                fail_msg("qemu-io read -P %d: %s", expect, out);
            }
        }
    }
}

/* Zero writes: flags, NO_FALLBACK, v2 with a backing file. */
static void test_zero_semantics(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *b = tu_fresh("zero-base.qcow2");
    g_autofree char *p3 = tu_fresh("zero-v3.qcow2");
    g_autofree char *p2 = tu_fresh("zero-v2.qcow2");
    g_autofree char *out = NULL;

    tu_run("qemu-img create -q -f qcow2 '%s' 4M && qemu-io -c 'write -P 0xee 0 4M' '%s' "
           ">/dev/null",
           b, b);
    tu_run("qemu-img create -q -f qcow2 -b '%s' -F qcow2 '%s' 4M", b, p3);
    tu_run("qemu-img create -q -f qcow2 -o compat=0.10 -b '%s' -F qcow2 '%s' 4M", b, p2);

    BlkNode *img = open_rw(p3);
    /* unaligned with NO_FALLBACK: refused, nothing done */
    assert_int_equal(blk_pwrite_zeroes(img, 1000, 65536, BLK_REQ_NO_FALLBACK), -ENOTSUP);
    /* aligned: zero flags, no data written */
    assert_int_equal(blk_pwrite_zeroes(img, 65536, 3 * 65536, BLK_REQ_NO_FALLBACK), 0);
    /* unaligned without the flag: partial clusters written as zeros */
    assert_int_equal(blk_pwrite_zeroes(img, MB(1) + 100, 200000, BLK_REQ_MAY_UNMAP), 0);
    close_ok(img);
    check_clean(p3);
    tu_run_status(&out, "qemu-img map --output=json '%s'", p3);
    assert_non_null(strstr(out, "\"start\": 65536, \"length\": 196608, \"depth\": 0, "
                                "\"present\": true, \"zero\": true, \"data\": false"));
    tu_run("qemu-io -c 'read -P 0xee 0 65536' -c 'read -P 0 65536 196608' "
           "-c 'read -P 0xee 262144 786432' -c 'read -P 0 1048676 200000' '%s' "
           ">/dev/null",
           p3);

    img = open_rw(p2);
    assert_int_equal(blk_pwrite_zeroes(img, 65536, 65536, BLK_REQ_NO_FALLBACK), -ENOTSUP);
    assert_int_equal(blk_pwrite_zeroes(img, 65536, 65536, BLK_REQ_MAY_UNMAP), 0);
    close_ok(img);
    check_clean(p2);
    tu_run("qemu-io -c 'read -P 0xee 0 65536' -c 'read -P 0 65536 65536' "
           "-c 'read -P 0xee 131072 65536' '%s' >/dev/null",
           p2);
}

/* Refcount overflow is refused (-EINVAL) and changes nothing (iotest 112). */
static void test_refcount_overflow(void **state)
{
    TU_REQUIRE_QEMU();
    g_autofree char *p = tu_fresh("overflow.qcow2");
    uint8_t data[512] = {7};
    uint64_t rc;

    tu_run("qemu-img create -q -f qcow2 -o refcount_bits=1 '%s' 16M", p);
    BlkNode *img = open_rw(p);
    assert_int_equal(blk_pwrite(img, 0, data, sizeof(data), 0), 0);
    Qcow2State *s = st(img);
    qcow2_lock(s);
    uint64_t l2 = s->l1_table[0] & QCOW2_L1E_OFFSET_MASK;
    assert_int_equal(qcow2_update_refcount_locked(s, l2, 1, 1, false), -EINVAL);
    assert_int_equal(qcow2_get_refcount_locked(s, l2 >> s->cluster_bits, &rc), 0);
    assert_int_equal(rc, 1);
    /* a range whose last cluster would overflow changes none of them */
    assert_int_equal(qcow2_update_refcount_locked(s, l2 - 4 * s->cluster_size,
                                                  5 * s->cluster_size, 1, false),
                     -EINVAL);
    assert_int_equal(qcow2_get_refcount_locked(s, (l2 >> s->cluster_bits) - 1, &rc), 0);
    assert_int_equal(rc, 1);
    qcow2_unlock(s);
    blk_error_clear();
    close_ok(img);
    check_clean(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reftable_growth),
        cmocka_unit_test(test_l1_growth_vmstate),
        cmocka_unit_test(test_vmstate_aligned_no_cow),
        cmocka_unit_test(test_vmstate_snapshot_view),
        cmocka_unit_test(test_compressed_zlib),
        cmocka_unit_test(test_compressed_zstd),
        cmocka_unit_test(test_resize),
        cmocka_unit_test(test_resize_refusals),
        cmocka_unit_test(test_cow_from_backing),
        cmocka_unit_test(test_snapshot_shared),
        cmocka_unit_test(test_overlap_check),
        cmocka_unit_test(test_alloc_offset_zero),
        cmocka_unit_test(test_lazy_refcounts_dirty_bit),
        cmocka_unit_test(test_make_empty_lazy),
        cmocka_unit_test(test_autoclear_cleared),
        cmocka_unit_test(test_discard_v2_v3),
        cmocka_unit_test(test_zero_semantics),
        cmocka_unit_test(test_refcount_overflow),
    };
    return tu_run_group_tests("qcow2-write-features", tests);
}
