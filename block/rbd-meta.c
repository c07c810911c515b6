/*
 * block/rbd-meta.c: what an open RBD image says about itself -- block
 * status, size, information -- and its RBD snapshots.
 *
 * Owns: the driver functions of the RBD node other than requests, open
 * and close (block/rbd.c).  rbd.c's invariants apply; the ones kept here:
 * 4 (the size follows the image, truncate and rollback set it), 5 (block
 * status through rbd_diff_iterate2 only while fast-diff is valid) and 6
 * (snapshots are RBD snapshots).
 */
#include "block/rbd-int.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

/* ---- block status (invariant 5) ---- */

typedef struct DiffReq {
    uint64_t start; /* where the query starts */
    uint64_t bytes; /* the run found so far from start */
    bool data;      /* the run is allocated */
} DiffReq;

#define DIFF_STOP (-9000) /* a callback's "enough": the run ended */

static int diff_cb(uint64_t offs, size_t len, int exists, void *opaque)
{
    DiffReq *d = opaque;

    if (!exists) {
        return 0; /* a hole reads as zeros: part of an unallocated run */
    }
    if (!d->data && offs > d->start) {
        d->bytes = offs - d->start; /* the unallocated run ends here */
        return DIFF_STOP;
    }
    if (d->data && offs > d->start + d->bytes) {
        return DIFF_STOP; /* a gap after the allocated run */
    }
    d->bytes = offs + len - d->start;
    d->data = true;
    return 0;
}

/* Whether diff iteration answers for this image (invariant 5). */
static bool diff_usable(RbdState *s)
{
    uint64_t features, flags;

    if (RL.rbd_get_features(s->image, &features) < 0 ||
        !(features & RBD_FEATURE_FAST_DIFF) || RL.rbd_get_flags(s->image, &flags) < 0 ||
        (flags & RBD_FLAG_FAST_DIFF_INVALID)) {
        return false;
    }
#if LIBRBD_VERSION_CODE < LIBRBD_VERSION(1, 17, 0)
    if (features & RBD_FEATURE_STRIPINGV2) {
        return false;
    }
    rbd_linked_image_spec_t parent;
    rbd_snap_spec_t snap;
    int r = RL.rbd_get_parent(s->image, &parent, &snap);
    if (r == 0) {
        RL.rbd_linked_image_spec_cleanup(&parent);
        RL.rbd_snap_spec_cleanup(&snap);
    }
    if (r != -ENOENT) {
        return false;
    }
#endif
    return true;
}

int blk_rbd_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    RbdState *s = img->opaque;
    DiffReq d = {.start = offset};
    uint64_t head = 0, len = bytes;
    int r;

    st->flags = BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID;
    st->pnum = bytes;
    st->map = offset;
    st->file = img;
    if (!diff_usable(s)) {
        return 0;
    }
#if LIBRBD_VERSION_CODE < LIBRBD_VERSION(1, 17, 0)
    head = offset % s->object_size;
    d.start -= head;
    len += head;
#endif
    r = RL.rbd_diff_iterate2(s->image, NULL, d.start, len, 1, 1, diff_cb, &d);
    if (r < 0 && r != DIFF_STOP) {
        return 0; /* everything is data */
    }
    if (!d.data) {
        if (r == 0) {
            d.bytes = len; /* no allocated object in the range */
        }
        st->flags = BLK_STATUS_ZERO | BLK_STATUS_OFFSET_VALID;
    }
    if (d.bytes <= head) {
        st->flags = BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID;
        return 0; /* not what librbd promises: data, to be safe */
    }
    st->pnum = MIN(d.bytes - head, bytes);
    return 0;
}

/* ---- size, information, snapshots ---- */

int blk_rbd_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                     bool shrink)
{
    RbdState *s = img->opaque;
    int r;

    (void)exact;  /* like a regular file's, the image is resized exactly */
    (void)shrink; /* a policy of the layers above */
    if (prealloc != BLK_PREALLOC_OFF) {
        return blk_error(ENOTSUP, "Unsupported preallocation mode '%s'",
                         blk_prealloc_name(prealloc));
    }
    pthread_mutex_lock(&s->resize_lock);
    r = RL.rbd_resize(s->image, size);
    if (r == 0) {
        __atomic_store_n(&img->size, size, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->resize_lock);
    blk_gen_bump(img);
    if (r < 0) {
        return blk_error(-r, "Failed to resize file: %s", g_strerror(-r));
    }
    return 0;
}

GArray *blk_rbd_snapshot_list(BlkNode *img)
{
    RbdState *s = img->opaque;
    GArray *list = g_array_new(FALSE, TRUE, sizeof(BlkSnapshotInfo));
    int max = 64, n = -ERANGE;

    /* librbd says how many there are when the array is too short */
    for (int tries = 0; tries < 8 && n == -ERANGE; tries++) {
        rbd_snap_info_t *snaps = g_new0(rbd_snap_info_t, (size_t)max);
        n = RL.rbd_snap_list(s->image, snaps, &max);
        for (int i = 0; i < n; i++) {
            BlkSnapshotInfo sn = {
                .id = g_strdup(snaps[i].name),
                .name = g_strdup(snaps[i].name),
                .vm_state_size = snaps[i].size,
                .icount = 0,
            };
            g_array_append_val(list, sn);
        }
        if (n >= 0) {
            RL.rbd_snap_list_end(snaps);
        }
        g_free(snaps);
        max = MAX(max, 1);
    }
    if (n < 0) {
        blk_error(-n, "Could not list the snapshots of RBD image '%s': %s", s->name,
                  g_strerror(-n));
        g_array_unref(list);
        return NULL;
    }
    return list;
}

int blk_rbd_get_info(BlkNode *img, BlkInfo *info)
{
    RbdState *s = img->opaque;

    info->cluster_size = (uint32_t)MIN(s->object_size, (uint64_t)UINT32_MAX);
    info->format_specific = true; /* QEMU's "rbd" block, empty here */
    info->snapshots = blk_rbd_snapshot_list(img);
    return info->snapshots ? 0 : -blk_error_code();
}

int blk_rbd_snapshot_create(BlkNode *img, BlkSnapshotInfo *sn)
{
    RbdState *s = img->opaque;
    int r;

    if (!sn->name || !*sn->name) {
        return -EINVAL; /* RBD snapshots need a name (QEMU says no more) */
    }
    if (strlen(sn->name) >= 128) {
        return -ERANGE; /* QEMU's limit on snapshot IDs, which are the names */
    }
    r = RL.rbd_snap_create(s->image, sn->name);
    if (r < 0) {
        return blk_error(-r, "failed to create snap: %s", g_strerror(-r));
    }
    sn->id = g_strdup(sn->name);
    return 0;
}

static int refresh_size(BlkNode *img)
{
    RbdState *s = img->opaque;
    uint64_t size;
    int r = RL.rbd_get_size(s->image, &size);

    if (r < 0) {
        return blk_error(-r, "Could not get the size of RBD image '%s': %s", s->name,
                         g_strerror(-r));
    }
    __atomic_store_n(&img->size, size, __ATOMIC_RELEASE);
    return 0;
}

int blk_rbd_snapshot_goto(BlkNode *img, const char *id_or_name)
{
    RbdState *s = img->opaque;
    int r = RL.rbd_snap_rollback(s->image, id_or_name);

    if (r < 0) {
        return blk_error(-r, "Failed to load snapshot: %s", g_strerror(-r));
    }
    blk_gen_bump(img);
    return refresh_size(img);
}

int blk_rbd_snapshot_delete(BlkNode *img, const char *id_or_name)
{
    RbdState *s = img->opaque;
    int r = RL.rbd_snap_remove(s->image, id_or_name);

    if (r < 0) {
        return blk_error(-r, "Failed to remove the snapshot: %s", g_strerror(-r));
    }
    return 0;
}

int64_t blk_rbd_get_allocated_size(BlkNode *img)
{
    (void)img;
    return -ENOTSUP; /* qemu-img info: "disk size: unavailable" */
}

bool blk_rbd_has_zero_init(BlkNode *img)
{
    (void)img;
    return true; /* a new RBD image reads as zeros */
}
