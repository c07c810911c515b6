/*
 * qcow2/write-plan.c: planning a guest write's chunk (write.c).
 *
 * Owns: deciding per cluster whether a write goes in place, reuses the
 * cluster with new metadata or moves to fresh clusters, the bytes each
 * chunk writes (its COW parts), and allocating what the chunk needs, all
 * under the metadata lock.  write.c writes the data and links the plan.
 *
 * The invariants are write.c's (cited as "invariant N" here): 4 (the plan
 * is made under the lock), 5, 7, 10, 11, 13, 15 and 16.
 */
#include "qcow2/write.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>

void qcow2_chunk_clear(Chunk *c)
{
    g_free(c->old_entry);
    g_free(c->new_bitmap);
    memset(c, 0, sizeof(*c));
}

static inline uint32_t sc_mask(unsigned first, unsigned last)
{
    /* subclusters first..last inclusive (0 <= first <= last <= 31) */
    return (uint32_t)((((UINT64_C(1) << (last + 1)) - 1)) &
                      ~((UINT64_C(1) << first) - 1));
}

/* Has the entry a host cluster of its own (invariant 10 for data files)? */
static bool entry_has_host(const Qcow2State *s, uint64_t e)
{
    return !(e & QCOW2_OFLAG_COMPRESSED) &&
           ((e & QCOW2_L2E_OFFSET_MASK) ||
            (qcow2_has_data_file(s) && (e & QCOW2_OFLAG_COPIED)));
}

/*
 * What a write of bytes [a, b) of a cluster with entry e / bitmap bm needs
 * (invariant 5).  type is the (validated) type of the entry's subcluster 0.
 */
static ChunkKind decide(const Qcow2State *s, uint64_t e, uint64_t bm,
                        Qcow2SubclusterType type, uint64_t a, uint64_t b)
{
    bool copied = e & QCOW2_OFLAG_COPIED;

    if (e & QCOW2_OFLAG_COMPRESSED) {
        return CHUNK_FRESH;
    }
    if (!s->extended_l2) {
        if (type == QCOW2_SC_NORMAL && copied) {
            return CHUNK_IN_PLACE;
        }
        return type == QCOW2_SC_ZERO_ALLOC && copied ? CHUNK_REUSE : CHUNK_FRESH;
    }
    if (entry_has_host(s, e) && copied) {
        unsigned f = (unsigned)(a >> s->subcluster_bits);
        unsigned l = (unsigned)((b - 1) >> s->subcluster_bits);
        return (sc_mask(f, l) & ~(uint32_t)bm) ? CHUNK_REUSE : CHUNK_IN_PLACE;
    }
    return CHUNK_FRESH;
}

/*
 * New bitmap (extended L2) and the bytes [*fa, *fb) of the cluster to write
 * for a write of [a, b) (invariant 7).
 */
static void plan_cluster(const Qcow2State *s, uint64_t e, uint64_t bm, bool fresh,
                         uint64_t a, uint64_t b, uint64_t *new_bm, uint64_t *fa,
                         uint64_t *fb)
{
    uint64_t scs = UINT64_C(1) << s->subcluster_bits;
    unsigned f = (unsigned)(a >> s->subcluster_bits);
    unsigned l = (unsigned)((b - 1) >> s->subcluster_bits);
    uint32_t touched = sc_mask(f, l), alloc = (uint32_t)bm, zero = (uint32_t)(bm >> 32);
    uint32_t new_alloc;

    if (!s->extended_l2 || (e & QCOW2_OFLAG_COMPRESSED)) {
        *new_bm = s->extended_l2 ? QCOW2_L2_BITMAP_ALL_ALLOC : 0;
        *fa = 0;
        *fb = s->cluster_size;
        return;
    }
    if (!fresh) {
        uint32_t need = touched & ~alloc;
        new_alloc = alloc | touched;
        *fa = (need & (1u << f)) ? f * scs : a;
        *fb = (need & (1u << l)) ? (l + 1) * scs : b;
    } else {
        uint32_t moved = touched | (entry_has_host(s, e) ? alloc : 0);
        unsigned first = (unsigned)__builtin_ctz(moved);
        unsigned last = 31 - (unsigned)__builtin_clz(moved);
        new_alloc = sc_mask(first, last); /* the range between, as QEMU */
        *fa = first * scs;
        *fb = (last + 1) * scs;
    }
    *new_bm = new_alloc | ((uint64_t)(zero & ~new_alloc) << 32);
}

/* Invariant 13: the old contents of a cluster with entry e read as zeros
 * without a read -- no host cluster of its own (or the zero flag), so
 * without a backing file they are zeros. */
static bool cow_reads_zero(const Qcow2State *s, uint64_t e)
{
    if (s->img->backing || (e & QCOW2_OFLAG_COMPRESSED)) {
        return false;
    }
    if (s->extended_l2) {
        return !entry_has_host(s, e);
    }
    return !entry_has_host(s, e) || (e & QCOW2_OFLAG_ZERO);
}

/*
 * Invariant 5's cluster kept for the write (COPIED) whose host offset is
 * not cluster aligned: QEMU checks that when it decides to keep the
 * cluster (handle_copied), with its own words, "Data" or "Preallocated
 * zero" cluster and the write's guest offset.  0 if the entry has another
 * fault (or none); the caller reports that one.  Lock held.
 */
static int kept_entry_unaligned_locked(Qcow2State *s, uint64_t e, uint64_t bm,
                                       uint64_t pos)
{
    Qcow2SubclusterType type;
    bool unaligned;

    if (!(e & QCOW2_OFLAG_COPIED) ||
        !qcow2_l2_entry_valid_to_drop(s, e, bm, pos & ~(s->cluster_size - 1), &type,
                                      &unaligned) ||
        !unaligned) {
        return 0;
    }
    return qcow2_corrupt_locked(
        s, "%s cluster offset %#" PRIx64 " unaligned (guest offset: %#" PRIx64 ")",
        (e & QCOW2_OFLAG_ZERO) ? "Preallocated zero" : "Data", e & QCOW2_L2E_OFFSET_MASK,
        pos);
}

/* Plan the chunk starting at guest pos (< end).  Lock held.  ring
 * (invariant 18): -EAGAIN, before anything is allocated or changed, unless
 * the chunk covers [pos, end) and its COW parts need no read. */
int qcow2_plan_chunk_locked(Qcow2State *s, uint64_t pos, uint64_t end, bool ring,
                            uint64_t next_host, Chunk *c)
{
    const uint64_t max_bytes = UINT64_C(64) << 20;
    uint64_t cs = s->cluster_size, l2_index, l2_offset, max_nb;
    uint8_t *l2 = NULL;
    bool in_place_first = false, in_place_last = false; /* invariant 16 */
    int ret;

    memset(c, 0, sizeof(*c));
    ret = qcow2_get_l2_for_write_locked(s, pos, &l2, &l2_index);
    if (ret < 0) {
        return ret;
    }
    l2_offset =
        s->l1_table[pos >> (s->cluster_bits + s->l2_bits)] & QCOW2_L1E_OFFSET_MASK;
    c->guest = pos & ~(cs - 1);
    max_nb = MIN(s->l2_slice_size - l2_index, /* cluster.c invariant 6 */
                 (ROUND_UP(end, cs) - c->guest) >> s->cluster_bits);
    max_nb = MIN(max_nb, MAX(max_bytes >> s->cluster_bits, 1));
    c->old_entry = g_new(uint64_t, max_nb);
    c->new_bitmap = g_new(uint64_t, max_nb);

    for (uint64_t i = 0; i < max_nb; i++) {
        uint64_t gc = c->guest + (i << s->cluster_bits);
        uint64_t a = i == 0 ? pos - gc : 0, b = MIN(end - gc, cs);
        uint64_t e = qcow2_l2_get(s, l2, l2_index + i);
        uint64_t bm = qcow2_l2_get_bitmap(s, l2, l2_index + i);
        Qcow2SubclusterType type;
        unsigned n;
        ChunkKind k;

        if (!qcow2_l2_entry_valid(s, e, bm, gc, &type)) {
            if (i > 0) {
                break; /* reported when the next chunk starts there */
            }
            ret = kept_entry_unaligned_locked(s, e, bm, pos);
            if (ret == 0) {
                ret = qcow2_l2_entry_type_locked(s, e, bm, 0, l2_offset, l2_index + i, gc,
                                                 &type, &n);
            }
            goto out;
        }
        k = decide(s, e, bm, type, a, b);
        if (i == 0) {
            c->kind = k;
            c->host = e & QCOW2_L2E_OFFSET_MASK;
        } else if ((k == CHUNK_FRESH) != (c->kind == CHUNK_FRESH) ||
                   (k != CHUNK_FRESH &&
                    (e & QCOW2_L2E_OFFSET_MASK) != c->host + (i << s->cluster_bits))) {
            break; /* invariant 16: in place and reused clusters join when contiguous */
        }
        if (k == CHUNK_REUSE) {
            c->kind = CHUNK_REUSE;
        }
        in_place_last = k == CHUNK_IN_PLACE;
        if (i == 0) {
            in_place_first = in_place_last;
        }
        c->old_entry[i] = e;
        c->new_bitmap[i] = bm;
        c->nb = i + 1;
    }

    /* Invariant 20: new clusters go right after the previous chunk's on
     * the host, as many as are free there, when one is. */
    uint64_t at = 0;
    if (c->kind == CHUNK_FRESH && next_host && !qcow2_has_data_file(s)) {
        uint64_t n;
        ret = qcow2_count_free_at_locked(s, next_host, c->nb, &n);
        if (ret < 0) {
            goto out;
        }
        if (n > 0) {
            c->nb = n;
            at = next_host;
        }
    }

    /* Bytes to write: the request's part, widened by COW (invariant 7). */
    uint64_t last = c->guest + ((c->nb - 1) << s->cluster_bits), fa, fb, bm;
    c->wstart = pos;
    c->wend = MIN(end, last + cs);
    c->fstart = pos;
    c->fend = c->wend;
    for (uint64_t i = 0; i < c->nb && c->kind != CHUNK_IN_PLACE; i++) {
        uint64_t gc = c->guest + (i << s->cluster_bits);
        uint64_t a = i == 0 ? pos - gc : 0, b = MIN(c->wend - gc, cs);
        plan_cluster(s, c->old_entry[i], c->new_bitmap[i], c->kind == CHUNK_FRESH, a, b,
                     &bm, &fa, &fb);
        if ((i == 0 && in_place_first) || (i == c->nb - 1 && in_place_last)) {
            fa = a; /* invariant 16: a cluster written in place needs no COW */
            fb = b;
        }
        c->new_bitmap[i] = bm;
        if (i == 0) {
            c->fstart = gc + fa;
        }
        if (i == c->nb - 1) {
            c->fend = gc + fb;
        }
    }

    if (s->encrypted) {
        /* invariant 15: whole sectors, the widening read like COW */
        c->fstart = ROUND_DOWN(c->fstart, CRYPTO_SECTOR_SIZE);
        c->fend = ROUND_UP(c->fend, CRYPTO_SECTOR_SIZE);
    }

    c->cow_zero = c->kind == CHUNK_FRESH && cow_reads_zero(s, c->old_entry[0]) &&
                  cow_reads_zero(s, c->old_entry[c->nb - 1]); /* invariant 13 */
    if (ring && (c->wend < end ||
                 (!c->cow_zero && (c->fstart != c->wstart || c->fend != c->wend)))) {
        ret = -EAGAIN; /* invariant 18 */
        goto out;
    }
    if (c->kind != CHUNK_IN_PLACE) {
        ret = qcow2_mark_dirty_locked(s); /* invariant 2 */
        if (ret < 0) {
            goto out;
        }
    }
    if (c->kind == CHUNK_FRESH) {
        if (qcow2_has_data_file(s)) {
            c->host = c->guest; /* invariant 10 */
        } else {
            uint64_t before, len = c->nb << s->cluster_bits;
            int64_t off;
            if (at) { /* invariant 20: counted free above, lock held since */
                before = s->file_size;
                ret = qcow2_alloc_clusters_at_locked(s, at, c->nb);
                off = ret < 0 ? ret : (int64_t)at;
            } else {
                ret = qcow2_reuse_pending_frees_locked(s, c->nb); /* alloc.c inv. 10 */
                if (ret < 0) {
                    goto out;
                }
                before = s->file_size;
                off = qcow2_alloc_clusters_locked(s, c->nb);
            }
            if (off < 0) {
                ret = (int)off;
                goto out;
            }
            c->host = (uint64_t)off;
            c->refcounted = true;
            qcow2_grow_plan_locked(s, c->host, len, before, c->wend >= end,
                                   &c->grow); /* grow.c */
        }
    }
    c->meta_gen = qcow2_fastmap_gen(s->fastmap);
    if (!qcow2_has_data_file(s)) {
        ret = qcow2_pre_write_overlap_check_locked(s, 0, c->host + (c->fstart - c->guest),
                                                   c->fend - c->fstart);
        if (ret < 0 && c->refcounted) {
            bool had_error = blk_error_mark();
            qcow2_free_clusters_locked(s, c->host, c->nb << s->cluster_bits);
            blk_error_unwind(had_error);
            c->refcounted = false;
        }
    }
out:
    qcow2_cache_put_locked(s->l2_cache, (void **)&l2); /* qcow2.h invariant 4 */
    return ret;
}
