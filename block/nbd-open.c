/*
 * block/nbd-open.c: opening the NBD node -- the first connection, what the
 * export offers, and the extra connections of a multi-conn server.
 *
 * Keeps nbd.c invariants 1 (extra connections, with their deadline, and one
 * poller each), 3 (a minimum block size above 1 refused), 5 (a meta context
 * the caller named must exist), 6 (the server's refusal of the export in
 * QEMU's words), 8 (qimg's own connect errors, as block/nbd-connect.c
 * reports them) and 10 (the export's size); the requests themselves are
 * block/nbd.c's.
 */
#include "block/block.h"
#include "block/nbd-int.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

BlkNode *blk_open_nbd(const char *filename, bool read_only, const char *context,
                      uint64_t reconnect_delay)
{
    NbdState *s;
    BlkNode *img;
    int err = 0;
    int64_t size, maxb, minb;
    g_autofree char *server_msg = NULL;

    if (blk_nbd_lib_load() < 0) { /* dl.h invariant 3: before anything else */
        blk_error_prefix(-ENOTSUP, "Could not open '%s'", filename);
        return NULL;
    }
    s = g_new0(NbdState, 1);
    s->name = g_strdup(filename);
    s->target = g_strdup(filename);
    s->context = g_strdup(context ? context : LIBNBD_CONTEXT_BASE_ALLOCATION);
    pthread_mutex_init(&s->lock, NULL);
    pthread_rwlock_init(&s->rw, NULL);
    s->reconnect_us = (int64_t)MIN(reconnect_delay, (uint64_t)INT32_MAX) * G_USEC_PER_SEC;
    for (int i = 0; i < NBD_CONNS; i++) {
        s->c[i].efd = -1;
        s->c[i].stop_flag = &s->stop;
    }
    s->c[0].h = blk_nbd_connect_one(filename, s->context, &err, 0, &server_msg);
    img = g_new0(BlkNode, 1);
    img->drv = &blk_nbd_driver;
    img->opaque = s;
    img->filename = g_strdup(filename);
    if (!s->c[0].h) {
        if (err < 0) { /* invariant 8: qimg's own words */
            blk_error_prefix(err, "Could not open '%s'", filename);
        } else {
            err = NL.nbd_get_errno() > 0 ? NL.nbd_get_errno() : EIO;
            const char *why = NL.nbd_get_error() ? NL.nbd_get_error() : g_strerror(err);
            if (err == ENOENT && (server_msg || strstr(why, "no export named"))) {
                /* NBD_REP_ERR_UNKNOWN, in QEMU's words (invariant 6) */
                blk_error(err, "Could not open '%s': Requested export not available%s%s",
                          filename, server_msg ? "\nserver reported: " : "",
                          server_msg ? server_msg : "");
            } else {
                blk_error(err, "Could not open '%s': %s", filename, why);
            }
        }
        blk_close(img);
        return NULL;
    }
    s->nconns = 1;
    size = NL.nbd_get_size(s->c[0].h);
    minb = NL.nbd_get_block_size(s->c[0].h, LIBNBD_SIZE_MINIMUM);
    maxb = NL.nbd_get_block_size(s->c[0].h, LIBNBD_SIZE_MAXIMUM);
    if (size < 0 || size > NBD_MAX_SIZE) { /* invariant 10 */
        blk_error(EFBIG, "Could not open '%s': Could not refresh total sector count: %s",
                  filename, g_strerror(EFBIG));
        blk_close(img);
        return NULL;
    }
    if (minb > 1) { /* invariant 3 */
        blk_error(ENOTSUP,
                  "Could not open '%s': the server needs requests aligned to %" PRId64
                  " bytes, which is not supported",
                  filename, minb);
        blk_close(img);
        return NULL;
    }
    if (!read_only && NL.nbd_is_read_only(s->c[0].h) == 1) {
        blk_error(EACCES, "Could not open '%s': the NBD export is read-only", filename);
        blk_close(img);
        return NULL;
    }
    s->max_request =
        maxb > 0 ? (uint32_t)MIN(maxb, (int64_t)NBD_MAX_REQUEST) : NBD_MAX_REQUEST;
    s->can_zero = NL.nbd_can_zero(s->c[0].h) == 1;
    s->can_fast_zero = NL.nbd_can_fast_zero(s->c[0].h) == 1;
    s->can_fua = NL.nbd_can_fua(s->c[0].h) == 1;
    s->can_trim = NL.nbd_can_trim(s->c[0].h) == 1;
    s->can_flush = NL.nbd_can_flush(s->c[0].h) == 1;
    s->has_status = NL.nbd_can_meta_context(s->c[0].h, s->context) == 1;
    if (context && !s->has_status) { /* invariant 5 */
        blk_error(EINVAL, "Could not open '%s': Could not open image: Invalid argument",
                  filename);
        blk_close(img);
        return NULL;
    }
    s->size = (uint64_t)size;
    /* invariant 1; one connection to reconnect (invariant 7), as QEMU's */
    if (NL.nbd_can_multi_conn(s->c[0].h) == 1 && !s->reconnect_us) {
        int64_t deadline = g_get_monotonic_time() + NBD_EXTRA_CONNECT_US;
        bool had = blk_error_mark();

        while (s->nconns < NBD_CONNS) {
            struct nbd_handle *h =
                blk_nbd_connect_one(filename, s->context, &err, deadline, NULL);
            if (!h) {
                blk_error_unwind(had); /* the node works with those it got */
                break;
            }
            s->c[s->nconns++].h = h;
        }
    }
    for (int i = 0; i < s->nconns; i++) {
        if (blk_nbd_start_poller(s, i) < 0) {
            blk_close(img);
            return NULL;
        }
    }
    g_free(img->filename);
    img->filename = blk_nbd_canonical_name(s->c[0].h, filename);
    g_free(s->name);
    s->name = g_strdup(img->filename); /* messages name it as qemu-img does */
    img->read_only = read_only;
    img->size = (uint64_t)size;
    img->request_alignment = 1;
    return img;
}
