/*
 * api/snapshot.c: the public internal-snapshot API
 * (include/qimg/snapshot.h) over the driver's snapshot_* operations.
 *
 * Owns: argument and capability checks at the API edge, the defaults a
 * caller may leave out (the date), and the ordering between buffered
 * vmstate I/O and snapshot operations.  The snapshot table itself is the
 * driver's.
 *
 * Invariants:
 *  1. Buffered vmstate writes are drained (and read-ahead dropped) before
 *     any snapshot is created, applied or deleted, so a snapshot never
 *     misses bytes already accepted and read-ahead never serves bytes of
 *     an L1 that is gone (vmstate.c invariants 3, 4): the handle's quiesce
 *     step (api.h invariant 2).  A drain error fails the operation before
 *     the driver is called.  The vmstate writer, which drains itself,
 *     uses api_snapshot_create()/api_snapshot_goto() directly.
 *  2. A driver without an operation gives a clear ENOTSUP message naming
 *     the format ("Format 'raw' does not support internal snapshots");
 *     listing such an image gives an empty list, as qemu-img snapshot -l
 *     prints nothing for a raw image and succeeds.
 *  3. A read-only image refuses create, apply and delete (EACCES) before
 *     anything is drained or changed.
 *  4. Every failure sets the GError, made from the driver's -errno and
 *     recorded message (block.h invariant 2).
 *  5. A filter node without snapshots of its own (blkdebug over a format)
 *     passes every operation to the node it filters, as QEMU's
 *     bdrv_snapshot_fallback does: snapshot_node().
 *
 * qemu-img 7.2 wording for reference (its tool adds the prefix): create on
 * raw: "Could not create snapshot 'x': -95 (Operation not supported)";
 * apply on raw: "Could not apply snapshot 'x': Block driver does not
 * support snapshots".  Names need not be unique and may be empty: qemu-img
 * snapshot -c creates a second 'a' without complaint.
 */
#include "api/api.h"

#include "qimg/snapshot.h"

#include <errno.h>

/* Invariant 2. */
static bool check_op(BlkNode *node, bool has_op, GError **error)
{
    if (!has_op) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Format '%s' does not support internal snapshots",
                    node->drv->format_name);
        return false;
    }
    return true;
}

/* Invariant 5: the node whose snapshots an operation on img concerns. */
static BlkNode *snapshot_node(QimgImage *img)
{
    BlkNode *node = img->node;

    while (!node->drv->snapshot_list && node->filtered) {
        node = node->filtered;
    }
    return node;
}

/* Invariant 3. */
static bool check_writable(BlkNode *node, GError **error)
{
    if (node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only", node->filename);
        return false;
    }
    return true;
}

/* Invariant 1. */
static bool drain_vmstate(QimgImage *img, GError **error)
{
    int ret = api_quiesce(img);

    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return false;
    }
    return true;
}

char *api_snapshot_create(QimgImage *img, const BlkSnapshotInfo *params, GError **error)
{
    BlkNode *node = snapshot_node(img);
    BlkSnapshotInfo sn = *params;
    int ret;

    if (!check_op(node, node->drv->snapshot_create != NULL, error) ||
        !check_writable(node, error)) {
        return NULL;
    }
    g_autofree char *name = g_strdup(params->name);
    sn.name = name;
    sn.id = NULL;
    if (sn.date_sec == 0 && sn.date_nsec == 0) {
        gint64 now = g_get_real_time(); /* microseconds */
        sn.date_sec = (uint64_t)(now / G_USEC_PER_SEC);
        sn.date_nsec = (uint32_t)(now % G_USEC_PER_SEC) * 1000;
    }
    blk_error_clear();
    ret = node->drv->snapshot_create(node, &sn);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        g_free(sn.id);
        return NULL;
    }
    if (!sn.id) {
        g_set_error(error, QIMG_ERROR, EIO,
                    "Could not create snapshot '%s': the driver assigned no ID", name);
        return NULL;
    }
    return sn.id;
}

int api_snapshot_goto(QimgImage *img, const char *id_or_name, GError **error)
{
    BlkNode *node = snapshot_node(img);
    int ret;

    if (!check_op(node, node->drv->snapshot_goto != NULL, error) ||
        !check_writable(node, error)) {
        return -EINVAL;
    }
    blk_error_clear();
    ret = node->drv->snapshot_goto(node, id_or_name);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
    }
    return ret;
}

char *qimg_snapshot_create(QimgImage *img, const QimgSnapshotParams *params,
                           GError **error)
{
    QimgSnapshotParams in;

    g_return_val_if_fail(img, NULL);
    if (!api_snapshot_params_in(&in, params, error)) {
        return NULL;
    }
    params = &in;
    BlkNode *node = snapshot_node(img);
    if (!check_op(node, node->drv->snapshot_create != NULL, error) ||
        !check_writable(node, error)) {
        return NULL;
    }
    blk_error_clear();
    if (!drain_vmstate(img, error)) {
        return NULL;
    }
    BlkSnapshotInfo sn = {
        .name = (char *)params->name,
        .vm_state_size = params->vm_state_size,
        .date_sec = params->date_sec,
        .date_nsec = params->date_nsec,
        .vm_clock_nsec = params->vm_clock_nsec,
        .icount = api_snapshot_icount(params),
    };
    return api_snapshot_create(img, &sn, error);
}

gboolean qimg_snapshot_apply(QimgImage *img, const char *id_or_name, GError **error)
{
    g_return_val_if_fail(img && id_or_name, FALSE);
    BlkNode *node = snapshot_node(img);
    if (!check_op(node, node->drv->snapshot_goto != NULL, error) ||
        !check_writable(node, error)) {
        return FALSE;
    }
    blk_error_clear();
    if (!drain_vmstate(img, error)) {
        return FALSE;
    }
    return api_snapshot_goto(img, id_or_name, error) == 0;
}

gboolean qimg_snapshot_delete(QimgImage *img, const char *id_or_name, GError **error)
{
    BlkNode *node;
    int ret;

    g_return_val_if_fail(img && id_or_name, FALSE);
    node = snapshot_node(img);
    if (!check_op(node, node->drv->snapshot_delete != NULL, error) ||
        !check_writable(node, error)) {
        return FALSE;
    }
    blk_error_clear();
    if (!drain_vmstate(img, error)) {
        return FALSE;
    }
    ret = node->drv->snapshot_delete(node, id_or_name);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

GPtrArray *qimg_snapshot_list(QimgImage *img, GError **error)
{
    BlkNode *node;
    GArray *list;

    g_return_val_if_fail(img, NULL);
    node = snapshot_node(img);
    if (!node->drv->snapshot_list) {
        return api_snapshot_list_new(); /* invariant 2 */
    }
    blk_error_clear();
    list = node->drv->snapshot_list(node);
    if (!list) {
        blk_error_propagate(error, -EIO, "Could not list the snapshots of '%s'",
                            node->filename);
        return NULL;
    }
    return api_snapshot_list_move(list);
}

void qimg_snapshot_list_free(GPtrArray *list)
{
    if (list) {
        g_ptr_array_unref(list);
    }
}
