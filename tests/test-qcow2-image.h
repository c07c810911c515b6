/*
 * tests/test-qcow2-image.h: tiny qcow2 images built in memory, for the
 * qcow2 validation tests (test-qcow2-header.c, test-qcow2-cluster.c).
 *
 * Layout (cluster c = 1 << cluster_bits):
 *   0: header (+ extensions)   1: refcount table   2: refcount block (16 bit)
 *   3: L1 table                4: L2 table         5: data (0xab bytes)
 *   6, 7: spare (tests put snapshot tables / extra tables there)
 * L1[0] -> L2 at 4c, L2[0] -> data at 5c, so guest cluster 0 reads 0xab.
 */
#ifndef TEST_QCOW2_IMAGE_H
#define TEST_QCOW2_IMAGE_H

#include "block/block.h"
#include "api/api.h"
#include "qcow2/qcow2.h"

#include <glib.h>
#include <stdio.h>
#include <string.h>

#define TIMG_CLUSTERS 8

typedef struct TImg {
    uint8_t *buf;
    size_t len;
    uint32_t cb;
    uint64_t cs;
    uint32_t l2_entry_size;
    size_t ext_off; /* where the next extension goes */
} TImg;

static inline void timg_set8(TImg *t, size_t off, uint8_t v)
{
    t->buf[off] = v;
}

static inline void timg_set16(TImg *t, size_t off, uint16_t v)
{
    store_be16(t->buf + off, v);
}

static inline void timg_set32(TImg *t, size_t off, uint32_t v)
{
    store_be32(t->buf + off, v);
}

static inline void timg_set64(TImg *t, size_t off, uint64_t v)
{
    store_be64(t->buf + off, v);
}

static inline uint64_t timg_c(const TImg *t, unsigned n)
{
    return (uint64_t)n << t->cb;
}

/* L2 entry i (and its bitmap with extended L2). */
static inline void timg_set_l2(TImg *t, unsigned i, uint64_t entry, uint64_t bitmap)
{
    size_t off = timg_c(t, 4) + (size_t)i * t->l2_entry_size;
    timg_set64(t, off, entry);
    if (t->l2_entry_size == 16) {
        timg_set64(t, off + 8, bitmap);
    }
}

static inline TImg timg_new(int version, uint32_t cluster_bits, uint64_t size, bool extl2)
{
    TImg t = {.cb = cluster_bits, .cs = UINT64_C(1) << cluster_bits};
    uint32_t l2_bits = cluster_bits - (extl2 ? 4 : 3);
    uint64_t l1_size = (size + (UINT64_C(1) << (cluster_bits + l2_bits)) - 1) >>
                       (cluster_bits + l2_bits);

    t.l2_entry_size = extl2 ? 16 : 8;
    t.len = TIMG_CLUSTERS * t.cs;
    t.buf = g_malloc0(t.len);
    timg_set32(&t, QCOW2_HDR_MAGIC, QCOW2_MAGIC);
    timg_set32(&t, QCOW2_HDR_VERSION, (uint32_t)version);
    timg_set32(&t, QCOW2_HDR_CLUSTER_BITS, cluster_bits);
    timg_set64(&t, QCOW2_HDR_SIZE, size);
    timg_set32(&t, QCOW2_HDR_L1_SIZE, (uint32_t)l1_size);
    timg_set64(&t, QCOW2_HDR_L1_TABLE_OFFSET, timg_c(&t, 3));
    timg_set64(&t, QCOW2_HDR_REFCOUNT_TABLE_OFFSET, timg_c(&t, 1));
    timg_set32(&t, QCOW2_HDR_REFCOUNT_TABLE_CLUSTERS, 1);
    if (version >= 3) {
        timg_set64(&t, QCOW2_HDR_INCOMPATIBLE_FEATURES, extl2 ? QCOW2_INCOMPAT_EXTL2 : 0);
        timg_set32(&t, QCOW2_HDR_REFCOUNT_ORDER, 4);
        timg_set32(&t, QCOW2_HDR_HEADER_LENGTH, QCOW2_HDR_V3_FULL_LENGTH);
        t.ext_off = QCOW2_HDR_V3_FULL_LENGTH;
    } else {
        t.ext_off = QCOW2_HDR_V2_LENGTH;
    }
    timg_set64(&t, timg_c(&t, 1), timg_c(&t, 2)); /* reftable[0] -> refblock */
    for (unsigned i = 0; i < TIMG_CLUSTERS; i++) {
        timg_set16(&t, timg_c(&t, 2) + 2 * i, 1);
    }
    timg_set64(&t, timg_c(&t, 3), timg_c(&t, 4) | QCOW2_OFLAG_COPIED);
    timg_set_l2(&t, 0, timg_c(&t, 5) | QCOW2_OFLAG_COPIED, extl2 ? 0xffffffffu : 0);
    memset(t.buf + timg_c(&t, 5), 0xab, t.cs);
    return t;
}

/* Append a header extension (and the end marker after it). */
static inline void timg_add_ext(TImg *t, uint32_t type, const void *data, uint32_t len)
{
    timg_set32(t, t->ext_off, type);
    timg_set32(t, t->ext_off + 4, len);
    memcpy(t->buf + t->ext_off + 8, data, len);
    t->ext_off += 8 + ((len + 7) & ~7u);
    timg_set32(t, t->ext_off, 0);
    timg_set32(t, t->ext_off + 4, 0);
}

static inline void timg_free(TImg *t)
{
    g_free(t->buf);
    t->buf = NULL;
}

/* A fresh directory for the test's files. */
static inline char *timg_tmpdir(void)
{
    const char *base = g_getenv("QIMG_TEST_TMPDIR");
    char *tmpl = g_strdup_printf("%s/qcow2-test-XXXXXX", base ? base : g_get_tmp_dir());
    char *dir = g_mkdtemp(tmpl);
    g_assert(dir);
    return dir;
}

static inline char *timg_write(const TImg *t, const char *dir, const char *name)
{
    char *path = g_build_filename(dir, name, NULL);
    g_assert(g_file_set_contents(path, (const char *)t->buf, (gssize)t->len, NULL));
    return path;
}

/* Open read-only (or read-write) through the generic layer. */
static inline BlkNode *timg_open(const char *path, bool read_only, const char *snapshot,
                                 GError **err)
{
    BlkOpenOptions o = {.format = "qcow2", .read_only = read_only, .snapshot = snapshot};
    return api_open_node(path, &o, NULL, err);
}

#endif
