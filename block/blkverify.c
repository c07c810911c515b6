/*
 * block/blkverify.c: QEMU's blkverify node -- an image under test (the
 * "test" child: a format node with its chain) checked against a raw copy
 * of its guest data (the "raw" child), request by request, so a bug in a
 * format driver shows as the first request that reads differently.
 *
 * Owns: the two children of the node, the comparison, and the verdict.
 *
 * Facts learnt from QEMU 7.2 (qemu-io and qemu-img over blkverify names,
 * and block/blkverify.c read for behaviour):
 *  1. A read reads both children and compares; a write writes both (the
 *     same bytes and flags, even when one of them fails).  The results
 *     must be equal: a different return value is "blkverify: read
 *     offset=O bytes=N return value mismatch T != R" (T the test child's
 *     result, R the raw child's, 0 or -errno), different bytes "blkverify:
 *     read offset=O bytes=N contents mismatch at offset M" (M the first
 *     differing byte, from the start of the disk); "write" for a write.
 *     QEMU prints that line on stderr and ends the process (exit status 1).
 *  2. Flush flushes the test child only ("the raw file is not important").
 *     Discard does nothing and succeeds.  A zero write is a write of zeros
 *     to both (QEMU 7.2's own aborts on an assertion there).
 *  3. The node's size is the test child's; its block status, info and
 *     map are the raw child's at the same offset (QEMU's filter of its
 *     "file", the raw child): qemu-img map names the raw file.  It has no
 *     disk size ("unavailable"), and a backing file named relative to it
 *     has no folder ("Cannot generate a base directory for blkverify
 *     nodes").
 *  4. Its name is "blkverify:RAW:TEST", the children's names.
 *
 * Invariants (cited as "blkverify.c invariant N"):
 *  1. A request's result is the test child's, and only when the raw child
 *     agrees (fact 1); when both fail alike, their common failure (the test
 *     child's message).  QEMU would compare the buffers of two failed reads
 *     (bytes neither wrote); qimg does not.
 *  2. The first disagreement is the node's verdict (QEMU's line, fact 1):
 *     that request fails with EIO and the verdict as its message, and so
 *     does every later read or write of the node (QEMU's process is gone
 *     by then; the library never ends the process, its caller decides:
 *     qimg io ends as qemu-io does, tools/io-cmds.c).  Flushes still reach
 *     the test child, so a close keeps what was written.
 *  3. Memory for a read is bounded: the children are read and compared in
 *     pieces of at most VERIFY_PIECE bytes, one buffer each.
 *  4. Write generations are the node's own (block.h invariant 4): a flush
 *     of the test child covers the node's writes (fact 2).
 */
#include "block/blkverify.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define VERIFY_PIECE (4u << 20)

typedef struct VerifyState {
    BlkNode *raw, *test;
    GMutex lock;
    char *verdict; /* invariant 2, under lock */
} VerifyState;

/* Invariant 2: the verdict that stands (the first), as the request's
 * failure. */
static int verdict_fail(VerifyState *s)
{
    g_mutex_lock(&s->lock);
    int ret = blk_error_replace(EIO, "%s", s->verdict);
    g_mutex_unlock(&s->lock);
    return ret;
}

/* Fact 1, invariant 2: record the verdict (the first one stands). */
static int G_GNUC_PRINTF(5, 6) verdict(VerifyState *s, bool write, uint64_t offset,
                                       uint64_t bytes, const char *fmt, ...)
{
    g_autofree char *what = NULL;
    va_list ap;

    va_start(ap, fmt);
    what = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_mutex_lock(&s->lock);
    if (!s->verdict) {
        s->verdict =
            g_strdup_printf("blkverify: %s offset=%" PRIu64 " bytes=%" PRIu64 " %s",
                            write ? "write" : "read", offset, bytes, what);
    }
    g_mutex_unlock(&s->lock);
    return verdict_fail(s);
}

static bool has_verdict(VerifyState *s)
{
    g_mutex_lock(&s->lock);
    bool v = s->verdict != NULL;
    g_mutex_unlock(&s->lock);
    return v;
}

/* Invariant 1: the request's result from the children's. */
static int judge(VerifyState *s, bool write, uint64_t offset, uint64_t bytes, int t,
                 int r)
{
    if (t != r) {
        return verdict(s, write, offset, bytes, "return value mismatch %d != %d", t, r);
    }
    return t;
}

/* Invariant 3: one piece [at, +len) of the read of q at offset. */
static int read_piece(VerifyState *s, uint64_t offset, const BlkIOV *q, size_t at,
                      size_t len, uint8_t *tbuf, uint8_t *rbuf)
{
    bool had = blk_error_mark();
    int t = blk_pread(s->test, offset + at, tbuf, len);
    int r = blk_pread(s->raw, offset + at, rbuf, len);
    int ret = judge(s, false, offset, q->size, t, r);

    if (ret < 0) {
        return ret;
    }
    blk_error_unwind(had);
    if (memcmp(tbuf, rbuf, len) != 0) {
        size_t i = 0;
        while (tbuf[i] == rbuf[i]) {
            i++;
        }
        return verdict(s, false, offset, q->size, "contents mismatch at offset %" PRIu64,
                       offset + at + i);
    }
    iov_from_buf(q, at, tbuf, len);
    return 0;
}

static int verify_preadv(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    VerifyState *s = img->opaque;
    size_t piece = MIN(q->size, (size_t)VERIFY_PIECE);
    g_autofree uint8_t *tbuf = g_malloc(MAX(piece, 1));
    g_autofree uint8_t *rbuf = g_malloc(MAX(piece, 1));

    (void)flags;
    if (has_verdict(s)) {
        return verdict_fail(s);
    }
    for (size_t at = 0; at < q->size; at += piece) {
        int ret = read_piece(s, offset, q, at, MIN(piece, q->size - at), tbuf, rbuf);
        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}

static int verify_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    VerifyState *s = img->opaque;

    if (has_verdict(s)) {
        return verdict_fail(s);
    }
    bool had = blk_error_mark();
    int t = blk_pwritev(s->test, offset, q, flags);
    int r = blk_pwritev(s->raw, offset, q, flags);
    int ret = judge(s, true, offset, q->size, t, r);
    blk_gen_bump(img); /* invariant 4 */
    if (ret == 0) {
        blk_error_unwind(had);
    }
    return ret;
}

/* Fact 2: zeros written to both, as a write of zeros. */
static int verify_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                                unsigned flags)
{
    VerifyState *s = img->opaque;

    if (flags & BLK_REQ_NO_FALLBACK) {
        return -ENOTSUP; /* no cheaper way than writing them */
    }
    if (has_verdict(s)) {
        return verdict_fail(s);
    }
    bool had = blk_error_mark();
    int t = blk_pwrite_zeroes(s->test, offset, bytes, flags);
    int r = blk_pwrite_zeroes(s->raw, offset, bytes, flags);
    int ret = judge(s, true, offset, bytes, t, r);
    blk_gen_bump(img); /* invariant 4 */
    if (ret == 0) {
        blk_error_unwind(had);
    }
    return ret;
}

static int verify_pdiscard(BlkNode *img, uint64_t offset, uint64_t bytes)
{
    (void)img, (void)offset, (void)bytes;
    return 0; /* fact 2 */
}

static int verify_flush(BlkNode *img)
{
    VerifyState *s = img->opaque;
    uint64_t gen = __atomic_load_n(&img->write_gen, __ATOMIC_ACQUIRE);
    int ret = blk_flush(s->test); /* fact 2, invariant 4 */

    if (ret == 0) {
        blk_gen_flushed(img, gen);
    }
    return ret;
}

/* Fact 3: the raw child's answer at the same offset. */
static int verify_block_status(BlkNode *img, uint64_t offset, uint64_t bytes,
                               BlkStatus *st)
{
    VerifyState *s = img->opaque;

    *st = (BlkStatus){
        .pnum = bytes, .flags = BLK_STATUS_RAW, .map = offset, .file = s->raw};
    return 0;
}

/* The raw child is a file the node reads as it is; the test child holds
 * its own file for its format (block.h invariant 6). */
static int verify_set_perm(BlkNode *img, unsigned perm, unsigned shared)
{
    VerifyState *s = img->opaque;
    BlkNode *c = s->raw;

    return c->drv->is_protocol && c->drv->set_perm ? c->drv->set_perm(c, perm, shared)
                                                   : 0;
}

static void verify_close(BlkNode *img)
{
    VerifyState *s = img->opaque;

    if (s) {
        blk_close(s->test);
        blk_close(s->raw);
        g_mutex_clear(&s->lock);
        g_free(s->verdict);
        g_free(s);
    }
    img->opaque = NULL;
}

const BlkDriver blk_blkverify_driver = {
    .format_name = "blkverify",
    .is_protocol = true,
    .close = verify_close,
    .preadv = verify_preadv,
    .pwritev = verify_pwritev,
    .pwrite_zeroes = verify_pwrite_zeroes,
    .pdiscard = verify_pdiscard,
    .flush = verify_flush,
    .block_status = verify_block_status,
    .set_perm = verify_set_perm,
    .no_dirname = "Cannot generate a base directory for blkverify nodes", /* fact 3 */
};

BlkNode *blk_open_blkverify(BlkNode *raw, BlkNode *test)
{
    VerifyState *s = g_new0(VerifyState, 1);
    BlkNode *img = g_new0(BlkNode, 1);

    s->raw = raw;
    s->test = test;
    g_mutex_init(&s->lock);
    img->drv = &blk_blkverify_driver;
    img->opaque = s;
    img->filename = g_strdup_printf("blkverify:%s:%s", blk_node_name(raw),
                                    blk_node_name(test)); /* fact 4 */
    img->read_only = raw->read_only || test->read_only;
    img->cache = test->cache;
    img->size = test->size; /* fact 3 */
    img->request_alignment = MAX(raw->request_alignment, test->request_alignment);
    return img;
}

char *blk_blkverify_verdict(BlkNode *top)
{
    for (BlkNode *n = top; n; n = n->file ? n->file : n->filtered) {
        if (n->drv == &blk_blkverify_driver) {
            VerifyState *s = n->opaque;
            g_mutex_lock(&s->lock);
            char *v = g_strdup(s->verdict);
            g_mutex_unlock(&s->lock);
            return v;
        }
    }
    return NULL;
}
