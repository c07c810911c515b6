/*
 * qcow2/create-prealloc.c: preallocation of a fresh image
 * (preallocation=metadata, falloc, full; part of create.c's design, step d).
 *
 * Owns: mapping every guest cluster the way QEMU's write path allocates
 * (metadata, and falloc/full with a data file), the refcount structures
 * built ahead for falloc/full and the data clusters after them, the
 * copy-on-write tails written as zeros, and growing the file or data file
 * to hold the data.
 *
 * Invariants: create.c's list, cited as "create.c invariant N"; this file
 * keeps 3 (the file extended or preallocated at the same moment as
 * qemu-img's) and 4 (a checkpoint after every chunk).
 */
#include "qcow2/create.h"

#include <errno.h>
#include <limits.h>

#define INV_OFFSET UINT64_MAX
/* Largest request QEMU's block layer makes: INT_MAX rounded down to 512. */
#define CREATE_MAX_REQUEST ((uint64_t)INT_MAX & ~UINT64_C(511))

/* Write zeros (a copy-on-write tail read from nothing) to the data node. */
static int write_zeros(Layout *L, uint64_t offset, uint64_t len)
{
    BlkNode *node = L->data ? L->data : L->file;
    g_autofree uint8_t *zeros = g_malloc0(len);
    int ret = create_file_write(L, node, offset, zeros, len);

    if (ret == 0) {
        if (L->data) {
            L->data_eof = MAX(L->data_eof, offset + len);
        } else {
            create_note_extent(L, offset, len);
        }
    }
    return ret;
}
/* Resize the data node to 'size' if it is shorter, like QEMU's file
 * protocol: growing an empty file from 0 with 'off' allocates its first
 * block. */
int create_grow_data_node(Layout *L, uint64_t size, BlkPrealloc mode)
{
    BlkNode *node = L->data ? L->data : L->file;
    uint64_t cur = L->data ? L->data_eof : L->eof;
    int ret;

    if (size <= cur) {
        return 0;
    }
    if (mode == BLK_PREALLOC_METADATA) {
        mode = BLK_PREALLOC_OFF;
    }
    ret = blk_truncate(node, size, false, mode, false);
    if (ret < 0) {
        return ret;
    }
    if (cur == 0 && mode == BLK_PREALLOC_OFF) {
        static const uint8_t zeros[4096];
        ret = create_file_write(L, node, 0, zeros, MIN(size, sizeof(zeros)));
        if (ret < 0) {
            return ret;
        }
    }
    if (L->data) {
        L->data_eof = size;
    } else {
        create_note_extent(L, 0, size);
    }
    return 0;
}

/* One run of guest clusters mapped to contiguous host clusters. */
typedef struct Run {
    uint64_t guest; /* first guest cluster (offset) */
    uint64_t host;  /* first host cluster (offset) */
    uint64_t nb;    /* clusters */
    uint64_t tail;  /* offset in the run where the copy-on-write tail starts */
} Run;

/*
 * One chunk of preallocate: map guest [offset, offset + req) the way QEMU's
 * write path allocates: the L2 table first, then as many contiguous data
 * clusters as fit in that table; when the run cannot go on contiguously
 * the chunk ends early.  Sets *host (host offset of 'offset') and *done.
 */
static int prealloc_chunk(Layout *L, uint64_t offset, uint64_t req, uint64_t *host,
                          uint64_t *done)
{
    uint64_t start = offset, remaining = req, cur = 0;
    uint64_t cluster_off = INV_OFFSET;
    g_autoptr(GArray) runs = g_array_new(FALSE, FALSE, sizeof(Run));
    int ret;

    *host = INV_OFFSET;
    for (;;) {
        uint64_t oic, nb, alloc_off, nbytes, l2_index;
        Run run;
        Table *l2;

        if (*host == INV_OFFSET && cluster_off != INV_OFFSET) {
            *host = cluster_off;
        }
        start += cur;
        remaining -= cur;
        if (cluster_off != INV_OFFSET) {
            cluster_off += cur;
        }
        if (remaining == 0) {
            break;
        }
        cur = remaining;

        ret = create_l2_for(L, start, &l2); /* the L2 table comes first */
        if (ret < 0) {
            return ret;
        }
        oic = start & (L->cluster_size - 1);
        nb = DIV_ROUND_UP(oic + cur, L->cluster_size);
        l2_index = (start >> L->cluster_bits) & (L->l2_entries - 1);
        nb = MIN(nb, L->l2_entries - l2_index);
        nb = MIN(nb, CREATE_MAX_REQUEST >> L->cluster_bits);

        if (L->data) {
            alloc_off = ROUND_DOWN(start, L->cluster_size); /* 1:1, no refcounts */
        } else if (cluster_off == INV_OFFSET) {
            int64_t r = create_alloc_clusters(L, nb << L->cluster_bits);
            if (r < 0) {
                return (int)r;
            }
            alloc_off = (uint64_t)r;
        } else {
            int64_t r;
            alloc_off = ROUND_DOWN(cluster_off, L->cluster_size);
            r = create_alloc_clusters_at(L, alloc_off, nb);
            if (r < 0) {
                return (int)r;
            }
            nb = (uint64_t)r;
        }
        if (nb == 0) {
            break; /* cannot continue contiguously */
        }
        nbytes = MIN(cur + oic, nb << L->cluster_bits);
        cur = MIN(cur, nbytes - oic);
        run.guest = ROUND_DOWN(start, L->cluster_size);
        run.host = alloc_off;
        run.nb = DIV_ROUND_UP(oic + cur, L->cluster_size);
        run.tail = oic + cur;
        g_array_append_val(runs, run);
        cluster_off = alloc_off + oic;
    }
    *done = req - remaining;

    /* link the runs (QEMU does the newest first); an unaligned end gets its
     * copy-on-write tail, zeros, up to the (sub)cluster end */
    for (guint i = runs->len; i-- > 0;) {
        const Run *r = &g_array_index(runs, Run, i);
        uint64_t tail_end = ROUND_UP(r->tail, L->subcluster_size);

        ret = create_link_l2(L, r->guest, r->host, r->nb);
        if (ret == 0 && tail_end > r->tail) {
            ret = write_zeros(L, r->host + r->tail, tail_end - r->tail);
        }
        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}

/* preallocation=metadata (and falloc/full with a data file). */
int create_prealloc_metadata(Layout *L, uint64_t size)
{
    uint64_t offset = 0, host = 0, done = 0;
    uint64_t max_chunk = ROUND_DOWN((uint64_t)INT_MAX, L->cluster_size);
    int ret;

    while (offset < size) {
        ret = prealloc_chunk(L, offset, MIN(size - offset, max_chunk), &host, &done);
        if (ret == 0) {
            ret = create_checkpoint(L);
        }
        if (ret < 0) {
            blk_error_prefix(ret, "Could not resize image: Allocating clusters failed");
            return ret;
        }
        offset += done;
    }
    if (size == 0) {
        return 0;
    }
    /* the file must reach the last data cluster */
    return create_grow_data_node(L, host + done, L->p->prealloc);
}

/* The last cluster in use among the first 'clusters' clusters. */
static int64_t last_used_cluster(Layout *L, uint64_t clusters)
{
    for (uint64_t i = clusters; i-- > 0;) {
        uint64_t rc;
        int ret = create_get_refcount(L, i, &rc);
        if (ret < 0) {
            return ret;
        }
        if (rc) {
            return (int64_t)i;
        }
    }
    return blk_error(EIO, "There are no references in the refcount table.");
}

/*
 * preallocation=falloc/full without a data file: refcount structures for
 * everything first, the data clusters right after them, the file extended
 * (and preallocated) over them, then the L2 tables wherever they fit.
 */
int create_prealloc_file(Layout *L, uint64_t size)
{
    uint64_t n_data = ROUND_UP(size, L->cluster_size) >> L->cluster_bits;
    uint64_t n_l2 = DIV_ROUND_UP(n_data, L->l2_entries) + 1;
    uint64_t old_end, guest, host;
    int64_t last, start, got;
    int ret;

    last = last_used_cluster(L, DIV_ROUND_UP(L->eof, L->cluster_size));
    if (last < 0) {
        ret = (int)last;
        goto err;
    }
    old_end = ((uint64_t)last + 1) << L->cluster_bits;
    start = create_refcount_area(L, old_end, n_data + n_l2, true, 0, 0);
    if (start < 0) {
        ret = (int)start;
        blk_error_prefix(ret,
                         "Could not resize image: Failed to resize refcount structures");
        return ret;
    }
    got = create_alloc_clusters_at(L, (uint64_t)start, n_data);
    if (got < 0 || (uint64_t)got != n_data) {
        ret = got < 0 ? (int)got : blk_error(EIO, "Data clusters are not free");
        blk_error_prefix(ret, "Could not resize image: Failed to allocate data clusters");
        return ret;
    }
    /* qemu-img's file ends here when it preallocates (create.c invariant 3) */
    ret = create_checkpoint(L);
    if (ret == 0) {
        ret = create_write_l1_and_reftable(L);
    }
    if (ret < 0) {
        goto err;
    }
    {
        uint64_t new_end = (uint64_t)start + (n_data << L->cluster_bits);
        ret = blk_truncate(L->file, new_end, false, L->p->prealloc, false);
        if (ret < 0) {
            return blk_error_prefix(ret, "Could not resize image: Failed to resize "
                                         "underlying file");
        }
        create_note_extent(L, 0, new_end);
    }

    guest = 0;
    host = (uint64_t)start;
    while (n_data) {
        uint64_t nb = MIN(n_data, L->l2_entries -
                                      ((guest >> L->cluster_bits) & (L->l2_entries - 1)));
        ret = create_link_l2(L, guest, host, nb);
        if (ret < 0) {
            blk_error_prefix(ret, "Could not resize image: Failed to update L2 tables");
            return ret;
        }
        guest += nb << L->cluster_bits;
        host += nb << L->cluster_bits;
        n_data -= nb;
        if (g_hash_table_size(L->l2s) > 64) {
            ret = create_checkpoint(L);
            if (ret < 0) {
                goto err;
            }
        }
    }
    return 0;

err:
    blk_error_prefix(ret, "Could not resize image");
    return ret;
}
