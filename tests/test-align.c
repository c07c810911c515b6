/*
 * Unit tests for block/align.c (align.c invariants 1-3): over a child that
 * keeps its bytes in memory and counts the requests that reach it
 * unaligned, every request is padded, the bytes are those of a plain
 * reference buffer, and concurrent unaligned writes into one block lose
 * nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#define MEM_SIZE (256 * 1024)
#define ALIGN 4096

typedef struct MemChild {
    uint8_t *bytes;     /* MEM_SIZE */
    unsigned unaligned; /* requests that reached it unaligned (atomic) */
    unsigned writes, zero_writes, discards;
    bool slow; /* reads take a while: a lost write shows */
} MemChild;

static void note(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    MemChild *m = img->opaque;
    if ((offset | bytes) % ALIGN) {
        __atomic_add_fetch(&m->unaligned, 1, __ATOMIC_RELAXED);
    }
    /* the in-memory child is as large as it gets */
    assert_true(offset + bytes <= MEM_SIZE);
}

static int mem_preadv(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    MemChild *m = img->opaque;
    note(img, offset, q->size);
    iov_from_buf(q, 0, m->bytes + offset, q->size);
    if (m->slow) {
        g_usleep(20);
    }
    return 0;
}

static int mem_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    MemChild *m = img->opaque;
    note(img, offset, q->size);
    iov_to_buf(q, 0, m->bytes + offset, q->size);
    __atomic_add_fetch(&m->writes, 1, __ATOMIC_RELAXED);
    return 0;
}

static int mem_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                             unsigned flags)
{
    MemChild *m = img->opaque;
    note(img, offset, bytes);
    memset(m->bytes + offset, 0, bytes);
    m->zero_writes++;
    return 0;
}

static int mem_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    MemChild *m = img->opaque;
    note(img, offset, bytes);
    memset(m->bytes + offset, 0, bytes);
    m->discards++;
    return 0;
}

static void mem_close(BlkNode *img)
{
    MemChild *m = img->opaque;
    g_free(m->bytes);
    g_free(m);
}

static const BlkDriver mem_driver = {
    .format_name = "mem",
    .is_protocol = true,
    .close = mem_close,
    .preadv = mem_preadv,
    .pwritev = mem_pwritev,
    .pwrite_zeroes = mem_pwrite_zeroes,
    .pdiscard = mem_pdiscard,
};

static BlkNode *mem_open(MemChild **out)
{
    MemChild *m = g_new0(MemChild, 1);
    BlkNode *img = g_new0(BlkNode, 1);

    m->bytes = g_malloc(MEM_SIZE);
    for (size_t i = 0; i < MEM_SIZE; i++) {
        m->bytes[i] = (uint8_t)(i * 7 + 1);
    }
    img->drv = &mem_driver;
    img->opaque = m;
    img->filename = g_strdup("mem");
    img->size = MEM_SIZE;
    img->request_alignment = 1;
    *out = m;
    return img;
}

/* Invariants 1 and 3: writes, zero writes, reads and discards of every
 * shape reach the child aligned, and the child holds what a plain buffer
 * given the same requests holds. */
static void test_padding(void **state)
{
    MemChild *m;
    BlkNode *node = blk_open_align(mem_open(&m), ALIGN);
    g_autofree uint8_t *ref = g_memdup2(m->bytes, MEM_SIZE);
    g_autofree uint8_t *buf = g_malloc(MEM_SIZE);
    GRand *rand = g_rand_new_with_seed(147);

    assert_non_null(node);
    assert_int_equal(node->request_alignment, ALIGN);
    for (int i = 0; i < 400; i++) {
        uint64_t off = (uint64_t)g_rand_int_range(rand, 0, MEM_SIZE - 3 * ALIGN);
        uint64_t len = (uint64_t)g_rand_int_range(rand, 1, 3 * ALIGN);
        int op = g_rand_int_range(rand, 0, 4);

        if (op == 0) {
            memset(buf, i, len);
            assert_int_equal(blk_pwrite(node, off, buf, len, 0), 0);
            memset(ref + off, i, len);
        } else if (op == 1) {
            assert_int_equal(blk_pwrite_zeroes(node, off, len, 0), 0);
            memset(ref + off, 0, len);
        } else if (op == 2) {
            /* invariant 3: unaligned NO_FALLBACK changes nothing */
            int r = blk_pwrite_zeroes(node, off, len, BLK_REQ_NO_FALLBACK);
            if ((off | len) % ALIGN) {
                assert_int_equal(r, -ENOTSUP);
            } else {
                assert_int_equal(r, 0);
                memset(ref + off, 0, len);
            }
        } else {
            assert_int_equal(blk_pread(node, off, buf, len), 0);
            assert_memory_equal(buf, ref + off, len);
        }
    }
    assert_memory_equal(m->bytes, ref, MEM_SIZE);

    /* discard: only the whole blocks inside */
    assert_int_equal(blk_pdiscard(node, 100, ALIGN), 0);
    assert_int_equal(m->discards, 0);
    assert_int_equal(blk_pdiscard(node, 100, 3 * ALIGN), 0);
    assert_int_equal(m->discards, 1);
    memset(ref + ALIGN, 0, 2 * ALIGN);
    assert_memory_equal(m->bytes, ref, MEM_SIZE);
    assert_int_equal(m->unaligned, 0);
    g_rand_free(rand);
    blk_close(node);
}

/* An unaligned zero write with whole blocks inside zeroes them with one
 * zero write, the partial blocks as data (QEMU's bdrv_co_do_zero_pwritev). */
static void test_zero_middle(void **state)
{
    MemChild *m;
    BlkNode *node = blk_open_align(mem_open(&m), ALIGN);

    assert_int_equal(blk_pwrite_zeroes(node, 512, 4 * ALIGN, 0), 0);
    assert_int_equal(m->zero_writes, 1);
    assert_int_equal(m->writes, 2);
    for (size_t i = 0; i < 5 * ALIGN; i++) {
        uint8_t want = i >= 512 && i < 512 + 4 * ALIGN ? 0 : (uint8_t)(i * 7 + 1);
        assert_int_equal(m->bytes[i], want);
    }
    blk_close(node);
}

typedef struct Writer {
    BlkNode *node;
    int index;
} Writer;

#define WRITERS 8
#define ROUNDS 200

static void *writer(void *opaque)
{
    Writer *w = opaque;
    uint8_t buf[512];

    for (int r = 0; r < ROUNDS; r++) {
        /* each writer its own 512 bytes of the same two blocks */
        uint64_t off = (uint64_t)(r % 2) * ALIGN + (uint64_t)w->index * 512;
        memset(buf, w->index + 1 + r, sizeof(buf));
        assert_int_equal(blk_pwrite(w->node, off, buf, sizeof(buf), 0), 0);
    }
    return NULL;
}

/* Invariant 2: concurrent read-modify-writes of one block lose no write. */
static void test_concurrent_rmw(void **state)
{
    MemChild *m;
    BlkNode *node = blk_open_align(mem_open(&m), ALIGN);
    pthread_t t[WRITERS];
    Writer w[WRITERS];

    m->slow = true;
    for (int i = 0; i < WRITERS; i++) {
        w[i] = (Writer){node, i};
        assert_int_equal(pthread_create(&t[i], NULL, writer, &w[i]), 0);
    }
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(t[i], NULL);
    }
    for (int i = 0; i < WRITERS; i++) {
        for (int blk = 0; blk < 2; blk++) {
            int last = ROUNDS - 2 + blk; /* the last round that wrote this block */
            uint8_t want = (uint8_t)(i + 1 + last);
            for (int j = 0; j < 512; j++) {
                assert_int_equal(m->bytes[blk * ALIGN + i * 512 + j], want);
            }
        }
    }
    assert_int_equal(m->unaligned, 0);
    blk_close(node);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_padding),
        cmocka_unit_test(test_zero_middle),
        cmocka_unit_test(test_concurrent_rmw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
