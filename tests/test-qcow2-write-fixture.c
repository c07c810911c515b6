/*
 * tests/test-qcow2-write-fixture.c: the qcow2 write tests' shared helpers
 * (test-qcow2-write-fixture.h).
 */
#include "test-qcow2-write-fixture.h"

/* qemu-img check must find neither corruption nor leak (exit 0). */
void check_clean(const char *path)
{
    g_autofree char *out = NULL;
    int rc = tu_run_status(&out, "qemu-img check '%s'", path);
    if (rc != 0 || !strstr(out, "No errors were found")) {
        fail_msg("qemu-img check %s: exit %d\n%s", path, rc, out);
    }
}

BlkNode *open_rw(const char *path)
{
    BlkOpenOptions o = {.cache = BLK_CACHE_UNSAFE}; /* no fdatasync: fast */
    g_autoptr(GError) err = NULL;
    BlkNode *img = api_open_node(path, &o, NULL, &err);
    if (!img) {
        fail_msg("open %s: %s", path, err->message);
    }
    return img;
}

void close_ok(BlkNode *img)
{
    assert_int_equal(blk_flush(img), 0);
    blk_close(img);
}

Qcow2State *st(BlkNode *img)
{
    return img->opaque;
}

/* No fsync (g_file_set_contents syncs when it replaces a file: the model
 * of every batch after the first, up to 64 MiB each time). */
void write_file(const char *path, const void *buf, size_t len)
{
    assert_true(g_file_set_contents_full(path, buf, (gssize)len, G_FILE_SET_CONTENTS_NONE,
                                         0644, NULL));
}

/* Compressible cluster contents (so compression really happens). */
void fill_compressible(GRand *r, uint8_t *buf, size_t len)
{
    uint8_t a = (uint8_t)g_rand_int(r), b = (uint8_t)g_rand_int(r);
    for (size_t i = 0; i < len; i++) {
        buf[i] = (i / 64) % 3 ? a : (uint8_t)(b + i);
    }
}
