/*
 * api/vmstate-api.c: the public calls of include/qimg/vmstate.h over the
 * vmstate engine (api/vmstate.c): positional reads and writes, configure,
 * the save stream (savevm) and the load stream (loadvm).
 *
 * Owns: the stream objects, their checks, and their lifetime; the ordering,
 * buffering, error and memory rules are the engine's ("vmstate.c invariant
 * N", cited here as "invariant N").
 */
#include "api/vmstate.h"
#include "api/api.h"

#include "qimg/vmstate.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- public API: positional ---- */

static bool check_range(QimgImage *img, uint64_t pos, size_t len, GError **error)
{
    uint64_t end;

    if (__builtin_add_overflow(pos, (uint64_t)len, &end) || end > INT64_MAX) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "VM state request at position %" PRIu64 " of %zu bytes is out of "
                    "range",
                    pos, len);
        return false;
    }
    return true;
}

static bool check_vmstate_ops(QimgImage *img, bool write, GError **error)
{
    BlkNode *node = img->node;

    if (!node->drv->save_vmstate || !node->drv->load_vmstate) {
        g_set_error(error, QIMG_ERROR, ENOTSUP, "Format '%s' does not support VM state",
                    node->drv->format_name);
        return false;
    }
    if (write && node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only", node->filename);
        return false;
    }
    return true;
}

gboolean qimg_vmstate_pwrite(QimgImage *img, uint64_t pos, const void *buf, size_t len,
                             GError **error)
{
    g_return_val_if_fail(img && (buf || len == 0), FALSE);
    if (!check_vmstate_ops(img, true, error) || !check_range(img, pos, len, error)) {
        return FALSE;
    }
    ApiVmstate *vs = vs_get(img, true);
    blk_error_clear();
    pthread_mutex_lock(&vs->op_lock);
    int ret = vs_write_locked(vs, pos, buf, len);
    pthread_mutex_unlock(&vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_vmstate_pread(QimgImage *img, uint64_t pos, void *buf, size_t len,
                            GError **error)
{
    g_return_val_if_fail(img && (buf || len == 0), FALSE);
    if (!check_vmstate_ops(img, false, error) || !check_range(img, pos, len, error)) {
        return FALSE;
    }
    ApiVmstate *vs = vs_get(img, true);
    blk_error_clear();
    pthread_mutex_lock(&vs->op_lock);
    int ret = vs_read_locked(vs, pos, buf, len);
    pthread_mutex_unlock(&vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_vmstate_flush(QimgImage *img, GError **error)
{
    g_return_val_if_fail(img, FALSE);
    blk_error_clear();
    int ret = api_quiesce(img); /* invariant 4 */
    if (ret == 0) {
        ret = blk_flush(img->node);
    }
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

gboolean qimg_vmstate_configure(QimgImage *img, const QimgVmstateOptions *opts,
                                GError **error)
{
    QimgVmstateOptions in;

    g_return_val_if_fail(img && opts, FALSE);
    if (!api_struct_in(&in, sizeof(in), opts, "QimgVmstateOptions", error)) {
        return FALSE;
    }
    opts = &in;
    unsigned max = opts->max_in_flight ? opts->max_in_flight : VMSTATE_DEFAULT_IN_FLIGHT;
    int ret = 0;

    if (max > VMSTATE_MAX_IN_FLIGHT) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "VM state max_in_flight must be between 1 and %d (got %u)",
                    VMSTATE_MAX_IN_FLIGHT, max);
        return FALSE;
    }
    if (opts->buffer_size > VMSTATE_MAX_BUFFER) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "VM state buffer size must be at most %zu bytes (got %zu)",
                    VMSTATE_MAX_BUFFER, opts->buffer_size);
        return FALSE;
    }
    ApiVmstate *vs = vs_get(img, true);
    blk_error_clear();
    pthread_mutex_lock(&vs->op_lock);
    if (vs->session) {
        ret = blk_error(EBUSY,
                        "Cannot reconfigure VM state I/O of '%s' while a save or "
                        "load is in progress",
                        img->node->filename);
        goto out;
    }
    vs_ra_drop_locked(vs);
    ret = vs_drain_writes_locked(vs);
    if (ret < 0) {
        goto out;
    }
    if (vs->pool && pool_max_in_flight(vs->pool) != max) {
        pool_free(vs->pool);
        vs->pool = NULL; /* recreated at the next I/O */
    }
    vs->max_in_flight = max;
    vs->buf_size_request = opts->buffer_size;
    vs->buf_size = vs_compute_buf_size(img, opts->buffer_size);
out:
    pthread_mutex_unlock(&vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    return TRUE;
}

/* ---- public API: the save stream ---- */

struct QimgVmstateSave {
    QimgImage *img; /* NULL once the image was closed (invariant 7) */
    ApiVmstate *vs;
    QimgSnapshotParams params;
    char *name;
    uint64_t size; /* bytes appended */
};

/* Invariant 7: EBADF for a stream whose image was closed. */
static bool stream_alive(const void *img, GError **error)
{
    if (!img) {
        g_set_error(error, QIMG_ERROR, EBADF,
                    "The vmstate stream is no longer usable: the image was closed");
        return false;
    }
    return true;
}

/* The driver's snapshot list (BlkSnapshotInfo), or NULL with error set. */
static GArray *snapshot_list(QimgImage *img, GError **error)
{
    BlkNode *node = img->node;
    GArray *list;

    if (!node->drv->snapshot_list) {
        return g_array_new(FALSE, TRUE, sizeof(BlkSnapshotInfo));
    }
    blk_error_clear();
    list = node->drv->snapshot_list(node);
    if (!list) {
        blk_error_propagate(error, -EIO, "Could not list the snapshots");
    }
    return list;
}

/* 1 if a snapshot is called name, 0 if not, -1 with error set. */
static int snapshot_name_exists(QimgImage *img, const char *name, GError **error)
{
    GArray *list = snapshot_list(img, error);
    int found = 0;

    if (!list) {
        return -1;
    }
    for (guint i = 0; i < list->len; i++) {
        const char *n = g_array_index(list, BlkSnapshotInfo, i).name;
        found |= n && strcmp(n, name) == 0;
    }
    blk_snapshot_list_free(list);
    return found;
}

QimgVmstateSave *qimg_vmstate_save_begin(QimgImage *img, const QimgSnapshotParams *params,
                                         GError **error)
{
    QimgSnapshotParams in;
    int ret;

    g_return_val_if_fail(img, NULL);
    if (!api_snapshot_params_in(&in, params, error)) {
        return NULL;
    }
    params = &in;
    if (!img->node->drv->save_vmstate || !img->node->drv->snapshot_create) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Format '%s' does not support internal snapshots",
                    img->node->drv->format_name);
        return NULL;
    }
    if (img->node->read_only) {
        g_set_error(error, QIMG_ERROR, EACCES, "Image '%s' is read-only",
                    img->node->filename);
        return NULL;
    }
    if (img->node->drv->snapshot_check) { /* nothing written for a refused snapshot */
        blk_error_clear();
        ret = img->node->drv->snapshot_check(img->node);
        if (ret < 0) {
            blk_error_propagate(error, ret, NULL);
            return NULL;
        }
    }
    ret = snapshot_name_exists(img, params->name, error);
    if (ret != 0) {
        if (ret > 0) {
            g_set_error(error, QIMG_ERROR, EEXIST, "Snapshot '%s' already exists",
                        params->name);
        }
        return NULL;
    }
    ApiVmstate *vs = vs_get(img, true);
    blk_error_clear();
    ret = vs_session_claim(vs);
    if (ret == 0) {
        /* Earlier positional writes land first, or their error is reported. */
        pthread_mutex_lock(&vs->op_lock);
        vs_ra_drop_locked(vs);
        ret = vs_drain_writes_locked(vs);
        vs->run_valid = false;
        pthread_mutex_unlock(&vs->op_lock);
        if (ret < 0) {
            pthread_mutex_lock(&vs->op_lock);
            vs->session = false; /* the error stays sticky: it was not ours */
            pthread_mutex_unlock(&vs->op_lock);
        }
    }
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return NULL;
    }
    QimgVmstateSave *s = g_new0(QimgVmstateSave, 1);
    s->img = img;
    s->vs = vs;
    s->params = *params;
    s->name = g_strdup(params->name);
    s->params.name = s->name;
    pthread_mutex_lock(&vs->op_lock);
    vs->save = s; /* invariant 7 */
    pthread_mutex_unlock(&vs->op_lock);
    return s;
}

gboolean qimg_vmstate_save_append(QimgVmstateSave *s, const void *buf, size_t len,
                                  GError **error)
{
    g_return_val_if_fail(s && (buf || len == 0), FALSE);
    if (!stream_alive(s->img, error) || !check_range(s->img, s->size, len, error)) {
        return FALSE;
    }
    blk_error_clear();
    pthread_mutex_lock(&s->vs->op_lock);
    int ret = vs_write_locked(s->vs, s->size, buf, len);
    pthread_mutex_unlock(&s->vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return FALSE;
    }
    s->size += len;
    return TRUE;
}

uint64_t qimg_vmstate_save_size(QimgVmstateSave *s)
{
    g_return_val_if_fail(s, 0);
    return s->size;
}

static void save_free(QimgVmstateSave *s)
{
    if (s->vs) {
        pthread_mutex_lock(&s->vs->op_lock);
        s->vs->save = NULL;
        pthread_mutex_unlock(&s->vs->op_lock);
        vs_session_end(s->vs);
    }
    g_free(s->name);
    g_free(s);
}

char *qimg_vmstate_save_commit(QimgVmstateSave *s, GError **error)
{
    char *id = NULL;
    int ret;

    g_return_val_if_fail(s, NULL);
    if (!stream_alive(s->img, error)) {
        save_free(s);
        return NULL;
    }
    blk_error_clear();
    /* Invariant 4, then the driver's metadata (QEMU: qemu_fclose -> bdrv_flush). */
    ret = api_quiesce(s->img);
    if (ret == 0) {
        ret = blk_flush(s->img->node);
    }
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
    } else {
        /* the driver-level operation: the writer drained itself */
        BlkSnapshotInfo sn = {
            .name = (char *)s->params.name,
            .vm_state_size = s->size,
            .date_sec = s->params.date_sec,
            .date_nsec = s->params.date_nsec,
            .vm_clock_nsec = s->params.vm_clock_nsec,
            .icount = api_snapshot_icount(&s->params),
        };
        id = api_snapshot_create(s->img, &sn, error);
    }
    save_free(s);
    return id;
}

void qimg_vmstate_save_abort(QimgVmstateSave *s)
{
    if (s) {
        save_free(s);
    }
}

/* ---- public API: the load stream ---- */

struct QimgVmstateLoad {
    QimgImage *img;     /* NULL once the image was closed (invariant 7) */
    QimgImage *node;    /* img (apply) or view */
    QimgImage *view;    /* owned, or NULL */
    ApiVmstate *vs;     /* node's */
    ApiVmstate *img_vs; /* img's, where the stream is registered */
    uint64_t size;
    uint64_t pos;
};

/* A read-only view of snapshot_id through the normal open path (whatever
 * driver img has: tests register their own, api.h). */
static QimgImage *open_view(QimgImage *img, const char *snapshot_id, GError **error)
{
    /* A second node on the file img holds: img's locks already say what this
     * process does with it, so the view shares everything (block/lock.c). */
    BlkOpenOptions o = {
        .format = img->node->drv->format_name,
        .read_only = true,
        .snapshot = snapshot_id,
        .cache = img->node->cache,
        .no_backing = img->node->opts.no_backing,
        .force_share = true,
        .key_from = img->node, /* qcow2/crypt.c invariant 7 */
    };
    BlkNode *node = api_open_node(img->node->filename, &o, NULL, error);
    return node ? api_image_new(node) : NULL;
}

/* QEMU's order: ID first, then name (blk_snapshot_find).  Fills *out
 * (strings owned by the caller). */
static bool find_snapshot(QimgImage *img, const char *id_or_name, BlkSnapshotInfo *out)
{
    GArray *list = snapshot_list(img, NULL);
    int found = list ? blk_snapshot_find(list, id_or_name) : -1;

    blk_error_clear();
    if (found >= 0) {
        BlkSnapshotInfo *sn = &g_array_index(list, BlkSnapshotInfo, found);
        *out = *sn;
        sn->id = NULL; /* stolen */
        sn->name = NULL;
    }
    blk_snapshot_list_free(list);
    return found >= 0;
}

QimgVmstateLoad *qimg_vmstate_load_begin(QimgImage *img, const char *id_or_name,
                                         bool apply, GError **error)
{
    BlkSnapshotInfo sn = {0};
    QimgImage *view = NULL, *node = img;
    ApiVmstate *img_vs, *vs;
    int ret;

    g_return_val_if_fail(img && id_or_name, NULL);
    const BlkDriver *drv = img->node->drv;
    if (!drv->load_vmstate || !drv->snapshot_list || (apply && !drv->snapshot_goto)) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "Format '%s' does not support internal snapshots", drv->format_name);
        return NULL;
    }
    if (!find_snapshot(img, id_or_name, &sn)) {
        g_set_error(error, QIMG_ERROR, ENOENT, "Snapshot '%s' does not exist",
                    id_or_name);
        return NULL;
    }
    g_autofree char *id = sn.id;
    g_free(sn.name);
    if (sn.vm_state_size == 0) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "This is a disk-only snapshot. Revert to it offline using qemu-img");
        return NULL;
    }

    img_vs = vs_get(img, true);
    blk_error_clear();
    if (apply) {
        /* Claimed before the disk changes, so a busy image is left alone. */
        ret = vs_session_claim(img_vs);
        if (ret < 0) {
            blk_error_propagate(error, ret, NULL);
            return NULL;
        }
        ret = api_quiesce(img); /* api.h invariant 2 */
        if (ret < 0) {
            blk_error_propagate(error, ret, NULL);
        } else {
            ret = api_snapshot_goto(img, id, error);
        }
        if (ret < 0) {
            pthread_mutex_lock(&img_vs->op_lock);
            img_vs->session = false;
            pthread_mutex_unlock(&img_vs->op_lock);
            return NULL;
        }
        vs = img_vs;
    } else {
        /* The view reads the file: what is buffered or cached must be there. */
        ret = api_quiesce(img);
        if (ret == 0) {
            ret = blk_flush(img->node);
        }
        if (ret < 0) {
            blk_error_propagate(error, ret, NULL);
            return NULL;
        }
        view = open_view(img, id, error);
        if (!view) {
            return NULL;
        }
        node = view;
        vs = vs_get(view, true);
        pthread_mutex_lock(&img_vs->op_lock);
        size_t req = img_vs->buf_size_request;
        unsigned max = img_vs->max_in_flight;
        pthread_mutex_unlock(&img_vs->op_lock);
        vs->max_in_flight = max; /* nobody else knows the view yet */
        vs->buf_size_request = req;
        vs->buf_size = vs_compute_buf_size(view, req);
        vs->session = true;
    }
    pthread_mutex_lock(&vs->op_lock);
    vs_ra_drop_locked(vs);
    vs->limit = sn.vm_state_size; /* invariant 6 */
    vs->last_end = 0;
    pthread_mutex_unlock(&vs->op_lock);

    QimgVmstateLoad *l = g_new0(QimgVmstateLoad, 1);
    l->img = img;
    l->node = node;
    l->view = view;
    l->vs = vs;
    l->img_vs = img_vs;
    l->size = sn.vm_state_size;
    pthread_mutex_lock(&img_vs->op_lock);
    img_vs->load = l; /* invariant 7 */
    pthread_mutex_unlock(&img_vs->op_lock);
    return l;
}

uint64_t qimg_vmstate_load_size(QimgVmstateLoad *l)
{
    g_return_val_if_fail(l, 0);
    return l->size;
}

gssize qimg_vmstate_load_read(QimgVmstateLoad *l, void *buf, size_t len, GError **error)
{
    g_return_val_if_fail(l && (buf || len == 0), -1);
    if (!stream_alive(l->img, error)) {
        return -1;
    }
    uint64_t n = MIN((uint64_t)len, l->size - l->pos);
    n = MIN(n, (uint64_t)G_MAXSSIZE);
    if (n == 0) {
        return 0;
    }
    blk_error_clear();
    pthread_mutex_lock(&l->vs->op_lock);
    int ret = vs_read_locked(l->vs, l->pos, buf, (size_t)n);
    pthread_mutex_unlock(&l->vs->op_lock);
    if (ret < 0) {
        blk_error_propagate(error, ret, NULL);
        return -1;
    }
    l->pos += n;
    return (gssize)n;
}

void qimg_vmstate_load_end(QimgVmstateLoad *l)
{
    if (!l) {
        return;
    }
    if (l->img) {
        pthread_mutex_lock(&l->img_vs->op_lock);
        l->img_vs->load = NULL;
        pthread_mutex_unlock(&l->img_vs->op_lock);
        vs_session_end(l->vs);
        api_image_destroy(l->view); /* releases the view's state */
    }
    g_free(l);
}

/* Invariant 7: the image is going away; its streams forget it. */
void vs_streams_invalidate(ApiVmstate *vs)
{
    pthread_mutex_lock(&vs->op_lock);
    struct QimgVmstateSave *save = vs->save;
    struct QimgVmstateLoad *load = vs->load;
    vs->save = NULL;
    vs->load = NULL;
    pthread_mutex_unlock(&vs->op_lock);
    if (save) {
        save->img = NULL;
        save->vs = NULL;
    }
    if (load) {
        QimgImage *view = load->view;
        load->img = NULL;
        load->node = NULL;
        load->view = NULL;
        load->vs = NULL;
        load->img_vs = NULL;
        api_image_destroy(view); /* the view's own state goes with it */
    }
}
