/*
 * block/quorum.c: QEMU's quorum node -- one guest disk kept on several
 * children (files, or images of a format), written to all of them and read
 * by vote, so a child whose data went bad is outvoted.
 *
 * Owns: the children of the node, the vote, and the node's json: name.
 *
 * Facts learnt from QEMU 7.2 (qemu-io and qemu-img over driver=quorum):
 *  1. A read (read-pattern quorum) reads every child.  When the children
 *     that read successfully all agree, that is the data; otherwise the
 *     versions are counted and the one with the most votes wins (of equal
 *     counts, the version first seen last); fewer votes than vote-threshold
 *     fail the read with EIO.  Fewer successful reads than the threshold
 *     fail it with the errno most children failed with.
 *  2. rewrite-corrupted=on writes the winner over the children that were
 *     outvoted; a failure of that write is ignored.
 *  3. read-pattern fifo reads the first child, and the next only when a
 *     read fails.
 *  4. Writes, write-zeroes and flushes go to every child; they succeed
 *     when at least vote-threshold children succeeded, else fail with the
 *     errno most children failed with.  Discard does nothing.
 *  5. Block status (qemu-img map): zeros where every child reads zeros
 *     through its own backing chain (the shortest such run), else data
 *     (the longest run), never an offset in a file.
 *  6. The node's size is its children's, which must all be equal ("Could
 *     not refresh total sector count: Input/output error"); it cannot be
 *     resized; its disk size is the sum of the children's.
 *  7. Its name is json:{"children": [...], "driver": "quorum",
 *     "vote-threshold": N}, each child by its own options; a backing file
 *     named relative to it has no folder to be relative to (QEMU's "Cannot
 *     generate a base directory for quorum nodes", BlkDriver.no_dirname).
 *
 * Invariants:
 *  1. A read never returns a version that fewer than vote-threshold
 *     children returned (facts 1, 3: fifo, which QEMU does not vote on,
 *     excepted).
 *  2. Memory for a read is bounded: requests are voted on in pieces of at
 *     most QUORUM_PIECE bytes, one buffer per child each.
 *  3. The failures of children that were outvoted by successes leave no
 *     message behind (error.c invariant 2: the first message would win).
 */
#include "block/quorum.h"
#include "block/rbd.h"

#include <errno.h>
#include <string.h>

#define QUORUM_PIECE (4u << 20)

typedef struct QuorumState {
    BlkNode **children;
    unsigned n;
    BlkQuorumOptions o;
} QuorumState;

/* Fact 1, 4: the errno most of the failed children returned (of equal
 * counts, the one seen first). */
static int vote_error(const int *rets, unsigned n)
{
    int best = -EIO;
    unsigned best_count = 0;

    for (unsigned i = 0; i < n; i++) {
        unsigned count = 0;
        if (rets[i] >= 0) {
            continue;
        }
        for (unsigned j = 0; j < n; j++) {
            count += rets[j] == rets[i];
        }
        if (count > best_count) {
            best_count = count;
            best = rets[i];
        }
    }
    return best;
}

/* Invariant 3: the result of a request that ran on every child. */
static int tally(const QuorumState *s, const int *rets, bool had_error)
{
    unsigned ok = 0;

    for (unsigned i = 0; i < s->n; i++) {
        ok += rets[i] >= 0;
    }
    if (ok >= s->o.threshold) {
        blk_error_unwind(had_error);
        return 0;
    }
    return vote_error(rets, s->n);
}

/* Fact 1: the winning child of bufs (len bytes each; rets < 0 failed),
 * with *votes its count. */
static unsigned vote(const QuorumState *s, uint8_t *const *bufs, const int *rets,
                     size_t len, unsigned *votes)
{
    unsigned winner = s->n, max = 0;

    /* versions in the order first seen; QEMU's list holds them newest
     * first, and the first with the most votes wins */
    for (unsigned i = s->n; i-- > 0;) {
        unsigned count = 0;
        bool first_seen = rets[i] >= 0;
        for (unsigned j = 0; j < i && first_seen; j++) {
            first_seen = rets[j] < 0 || memcmp(bufs[i], bufs[j], len) != 0;
        }
        if (!first_seen) {
            continue;
        }
        for (unsigned j = i; j < s->n; j++) {
            count += rets[j] >= 0 && memcmp(bufs[i], bufs[j], len) == 0;
        }
        if (count > max) {
            max = count;
            winner = i;
        }
    }
    *votes = max;
    return winner;
}

/* Fact 2: the winner over every outvoted child; failures ignored. */
static void rewrite(const QuorumState *s, uint8_t *const *bufs, const int *rets,
                    unsigned winner, uint64_t offset, size_t len)
{
    bool had = blk_error_mark();

    for (unsigned i = 0; i < s->n; i++) {
        if (rets[i] >= 0 && memcmp(bufs[i], bufs[winner], len) != 0) {
            (void)blk_pwrite(s->children[i], offset, bufs[winner], len, 0);
        }
    }
    blk_error_unwind(had);
}

/* Facts 1, 2 for one piece (invariant 2). */
static int read_piece(const QuorumState *s, uint64_t offset, const BlkIOV *q, size_t off,
                      size_t len)
{
    g_autofree uint8_t **bufs = g_new0(uint8_t *, s->n);
    g_autofree int *rets = g_new0(int, s->n);
    bool had = blk_error_mark();
    unsigned winner, votes;
    int ret;

    for (unsigned i = 0; i < s->n; i++) {
        bufs[i] = g_malloc(len);
        rets[i] = blk_pread(s->children[i], offset, bufs[i], len);
    }
    ret = tally(s, rets, had);
    if (ret == 0) {
        winner = vote(s, bufs, rets, len, &votes);
        if (votes < s->o.threshold) {
            ret = -EIO; /* invariant 1; QEMU says no more than EIO */
        } else {
            iov_from_buf(q, off, bufs[winner], len);
            if (s->o.rewrite && votes < s->n) {
                rewrite(s, bufs, rets, winner, offset, len);
            }
        }
    }
    for (unsigned i = 0; i < s->n; i++) {
        g_free(bufs[i]);
    }
    return ret;
}

static int quorum_preadv(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    QuorumState *s = img->opaque;
    int ret = -EIO;

    (void)flags;
    if (s->o.fifo) { /* fact 3 */
        bool had = blk_error_mark();
        for (unsigned i = 0; i < s->n; i++) {
            ret = blk_preadv(s->children[i], offset, q, 0);
            if (ret >= 0) {
                blk_error_unwind(had);
                return 0;
            }
        }
        return ret;
    }
    for (size_t off = 0; off < q->size; off += QUORUM_PIECE) {
        size_t len = MIN(q->size - off, (size_t)QUORUM_PIECE);
        ret = read_piece(s, offset + off, q, off, len);
        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}

/* The node's size follows its children's while they agree (fact 6). */
static void size_update(BlkNode *img)
{
    QuorumState *s = img->opaque;
    uint64_t size = (uint64_t)blk_getlength(s->children[0]);

    for (unsigned i = 1; i < s->n; i++) {
        if (__atomic_load_n(&s->children[i]->size, __ATOMIC_ACQUIRE) != size) {
            return;
        }
    }
    __atomic_store_n(&img->size, size, __ATOMIC_RELEASE);
}

typedef enum { Q_WRITE, Q_ZERO, Q_FLUSH } QuorumOp;

/* Fact 4. */
static int on_all(BlkNode *img, QuorumOp op, uint64_t offset, const BlkIOV *q,
                  uint64_t bytes, unsigned flags)
{
    QuorumState *s = img->opaque;
    g_autofree int *rets = g_new0(int, s->n);
    bool had = blk_error_mark();
    int ret;

    for (unsigned i = 0; i < s->n; i++) {
        BlkNode *c = s->children[i];
        rets[i] = op == Q_WRITE  ? blk_pwritev(c, offset, q, flags)
                  : op == Q_ZERO ? blk_pwrite_zeroes(c, offset, bytes, flags)
                                 : blk_flush(c);
    }
    ret = tally(s, rets, had);
    if (op != Q_FLUSH) {
        blk_gen_bump(img);
        size_update(img);
    }
    return ret;
}

static int quorum_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *q, unsigned flags)
{
    return on_all(img, Q_WRITE, offset, q, q->size, flags);
}

static int quorum_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                                unsigned flags)
{
    return on_all(img, Q_ZERO, offset, NULL, bytes, flags);
}

static int quorum_flush(BlkNode *img)
{
    uint64_t gen = __atomic_load_n(&img->write_gen, __ATOMIC_ACQUIRE);
    int ret = on_all(img, Q_FLUSH, 0, NULL, 0, 0);

    if (ret == 0) {
        blk_gen_flushed(img, gen);
    }
    return ret;
}

/* Fact 5. */
static int quorum_block_status(BlkNode *img, uint64_t offset, uint64_t bytes,
                               BlkStatus *st)
{
    QuorumState *s = img->opaque;
    uint64_t pnum_zero = bytes, pnum_data = 0;

    for (unsigned i = 0; i < s->n; i++) {
        BlkStatus cs;
        int depth;
        int ret =
            blk_block_status_chain(s->children[i], offset, bytes, &cs, &depth, NULL);
        if (ret < 0) {
            return ret;
        }
        if (cs.flags & BLK_STATUS_ZERO) {
            pnum_zero = MIN(pnum_zero, cs.pnum);
        } else {
            pnum_data = MAX(pnum_data, cs.pnum);
        }
    }
    memset(st, 0, sizeof(*st));
    st->flags = pnum_data ? BLK_STATUS_DATA : BLK_STATUS_ZERO;
    st->pnum = pnum_data ? pnum_data : pnum_zero;
    return 0;
}

static int quorum_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                           bool shrink)
{
    (void)img, (void)size, (void)exact, (void)prealloc, (void)shrink;
    return blk_error(ENOTSUP, "Image format driver does not support resize"); /* 6 */
}

static int64_t quorum_get_allocated_size(BlkNode *img)
{
    QuorumState *s = img->opaque;
    int64_t sum = 0;

    for (unsigned i = 0; i < s->n; i++) { /* fact 6 */
        int64_t v = blk_get_allocated_size(s->children[i]);
        if (v < 0) {
            return v;
        }
        if (__builtin_add_overflow(sum, v, &sum)) {
            return -EOVERFLOW;
        }
    }
    return sum;
}

static bool quorum_has_zero_init(BlkNode *img)
{
    QuorumState *s = img->opaque;

    for (unsigned i = 0; i < s->n; i++) {
        const BlkDriver *d = s->children[i]->drv;
        if (!d->has_zero_init || !d->has_zero_init(s->children[i])) {
            return false;
        }
    }
    return true;
}

/* The files among the children hold what the node above needs (block.h
 * invariant 6); an image child holds its own file for its format. */
static int quorum_set_perm(BlkNode *img, unsigned perm, unsigned shared)
{
    QuorumState *s = img->opaque;

    for (unsigned i = 0; i < s->n; i++) {
        BlkNode *c = s->children[i];
        int ret = c->drv->is_protocol && c->drv->set_perm
                      ? c->drv->set_perm(c, perm, shared)
                      : 0;
        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}

static void quorum_close(BlkNode *img)
{
    QuorumState *s = img->opaque;

    for (unsigned i = 0; s && i < s->n; i++) {
        blk_close(s->children[i]);
    }
    if (s) {
        g_free(s->children);
        g_free(s);
    }
    img->opaque = NULL;
}

const BlkDriver blk_quorum_driver = {
    .format_name = "quorum",
    .is_protocol = true,
    .close = quorum_close,
    .preadv = quorum_preadv,
    .pwritev = quorum_pwritev,
    .pwrite_zeroes = quorum_pwrite_zeroes,
    .flush = quorum_flush,
    .block_status = quorum_block_status,
    .truncate = quorum_truncate,
    .get_allocated_size = quorum_get_allocated_size,
    .has_zero_init = quorum_has_zero_init,
    .set_perm = quorum_set_perm,
    .no_dirname = "Cannot generate a base directory for quorum nodes",
    .no_offsets = true, /* fact 5 */
};

/* Fact 7: a child's options as JSON. */
static void child_json(GString *out, const BlkNode *c)
{
    if (g_str_has_prefix(c->filename, "json:")) {
        g_string_append(out, c->filename + strlen("json:"));
    } else if (c->drv->is_protocol || !c->file) {
        g_string_append_printf(
            out, "{\"driver\": \"%s\", \"filename\": ", c->drv->format_name);
        blk_json_append_string(out, c->filename);
        g_string_append_c(out, '}');
    } else {
        g_string_append_printf(out,
                               "{\"driver\": \"%s\", \"file\": ", c->drv->format_name);
        child_json(out, c->file);
        g_string_append_c(out, '}');
    }
}

BlkNode *blk_open_quorum(BlkNode **children, unsigned n, const BlkQuorumOptions *qo)
{
    QuorumState *s = g_new0(QuorumState, 1);
    BlkNode *img = g_new0(BlkNode, 1);
    g_autoptr(GString) name = g_string_new("json:{\"children\": [");

    s->children = g_memdup2(children, sizeof(*children) * n);
    s->n = n;
    s->o = *qo;
    img->drv = &blk_quorum_driver;
    img->opaque = s;
    img->request_alignment = 1;
    for (unsigned i = 0; i < n; i++) {
        img->read_only = img->read_only || children[i]->read_only;
        img->request_alignment =
            MAX(img->request_alignment, children[i]->request_alignment);
        g_string_append(name, i ? ", " : "");
        child_json(name, children[i]);
    }
    g_string_append_printf(name, "], \"driver\": \"quorum\", \"vote-threshold\": %u}",
                           qo->threshold);
    img->filename = g_string_free(g_steal_pointer(&name), FALSE);
    img->cache = children[0]->cache;
    img->size = children[0]->size;
    for (unsigned i = 1; i < n; i++) {
        if (children[i]->size != img->size) { /* fact 6 */
            blk_close(img);
            blk_error(EIO, "Could not refresh total sector count: Input/output error");
            return NULL;
        }
    }
    return img;
}
