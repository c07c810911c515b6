/*
 * tests/test-hyperv-threads.c: threads writing one VHD, VHDX or VDI image
 * at once (run under TSan by make test: its name has "thread").  Each
 * thread writes its own pattern over a random set of 4 KiB pieces, some
 * sharing blocks with other threads' pieces and allocating them, reads
 * back what it wrote, and flushes now and then; at the end every piece
 * reads its writer's pattern through qimg and, after the close, through
 * qemu-img.  Covers vpc.c invariant 4, vdi.c invariant 3 and vhdx.c
 * invariant 5 with the data written outside the driver's lock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qimg/qimg.h"
#include "test-util.h"

#include <pthread.h>
#include <string.h>

#define THREADS 4
#define PIECE 4096u
#define DISK (16u << 20)
#define PIECES (DISK / PIECE)
#define WRITES 300

typedef struct Job {
    QimgImage *img;
    unsigned id;
    const uint8_t *owner; /* piece -> writing thread + 1 */
    uint8_t *written;     /* piece -> 1 once written (only its owner stores) */
    int failures;
} Job;

static void *writer(void *opaque)
{
    Job *j = opaque;
    uint8_t buf[PIECE], back[PIECE];
    GRand *r = g_rand_new_with_seed(j->id * 7919u + 1);

    memset(buf, 0x40 + j->id, sizeof(buf));
    for (unsigned k = 0; k < WRITES; k++) {
        uint32_t p = g_rand_int_range(r, 0, PIECES);
        g_autoptr(GError) err = NULL;
        if (j->owner[p] != j->id + 1) {
            continue; /* each piece has one writer: the outcome is known */
        }
        if (!qimg_image_pwrite(j->img, (uint64_t)p * PIECE, buf, sizeof(buf), &err) ||
            !qimg_image_pread(j->img, (uint64_t)p * PIECE, back, sizeof(back), &err) ||
            memcmp(buf, back, sizeof(buf)) != 0) {
            j->failures++;
        }
        j->written[p] = 1;
        if (k % 50 == 49 && !qimg_image_flush(j->img, &err)) {
            j->failures++;
        }
    }
    g_rand_free(r);
    return NULL;
}

static void run_format(const char *fmt, const char *key, const char *value)
{
    g_autofree char *path = tu_fresh(fmt);
    g_autoptr(GHashTable) o = g_hash_table_new(g_str_hash, g_str_equal);
    g_autofree uint8_t *owner = g_malloc0(PIECES);
    g_autofree uint8_t *written = g_malloc0(PIECES);
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    g_autoptr(GError) err = NULL;
    pthread_t t[THREADS];
    Job jobs[THREADS];
    GRand *r = g_rand_new_with_seed(42);

    if (key) {
        g_hash_table_insert(o, (char *)key, (char *)value);
    }
    co.format = fmt;
    co.size = DISK;
    co.size_set = true;
    co.options = o;
    assert_true(qimg_image_create(path, &co, &err));
    oo.format = fmt;
    QimgImage *img = qimg_image_open(path, &oo, &err);
    assert_non_null(img);
    for (uint32_t p = 0; p < PIECES; p++) { /* neighbours often differ: shared blocks */
        owner[p] = (uint8_t)(g_rand_int_range(r, 0, THREADS) + 1);
    }
    g_rand_free(r);
    for (unsigned i = 0; i < THREADS; i++) {
        jobs[i] = (Job){img, i, owner, written, 0};
        assert_int_equal(pthread_create(&t[i], NULL, writer, &jobs[i]), 0);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(jobs[i].failures, 0);
    }
    /* every piece: its owner's pattern if written (after joins and a
     * close: nothing lost), zeros otherwise */
    g_autofree uint8_t *disk = g_malloc(DISK);
    assert_true(qimg_image_pread(img, 0, disk, DISK, &err));
    assert_true(qimg_image_close(img, &err));
    if (tu_have_qemu_img()) {
        size_t len;
        g_autofree uint8_t *raw = tu_qemu_raw(path, NULL, &len);
        assert_true(len >= DISK);
        assert_memory_equal(raw, disk, DISK);
    }
    for (uint32_t p = 0; p < PIECES; p++) {
        uint8_t v = written[p] ? (uint8_t)(0x40 + owner[p] - 1) : 0;
        for (uint32_t k = 0; k < PIECE; k++) {
            assert_int_equal(disk[(size_t)p * PIECE + k], v);
        }
    }
}

static void test_vpc(void **state)
{
    run_format("vpc", NULL, NULL);
}

static void test_vhdx(void **state)
{
    run_format("vhdx", "block_size", "1048576");
}

static void test_vdi(void **state)
{
    run_format("vdi", NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vpc),
        cmocka_unit_test(test_vhdx),
        cmocka_unit_test(test_vdi),
    };
    return tu_run_group_tests("hyperv-threads", tests);
}
