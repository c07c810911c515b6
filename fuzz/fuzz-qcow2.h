/*
 * fuzz/fuzz-qcow2.h: what the qcow2 fuzz targets (fuzz-qcow2-open.c,
 * fuzz-qcow2-check.c, fuzz-qcow2-rw.c) share about an input's external
 * data file.
 *
 * Owns: fuzz_qcow2_data_file_is_safe(), the one rule for which inputs a
 * target opens: an external data file may only be a plain name in the
 * scratch folder (a path could name a device or a FIFO and block the run).
 */
#ifndef QIMG_FUZZ_QCOW2_H
#define QIMG_FUZZ_QCOW2_H

#include "block/block.h"
#include "qcow2/qcow2.h"

#include <string.h>

static inline bool fuzz_qcow2_data_file_is_safe(const uint8_t *data, size_t size)
{
    uint8_t head[QCOW2_HDR_V3_FULL_LENGTH] = {0};
    Qcow2Header h;
    Qcow2Extensions ext = {0};
    bool safe = true;

    memcpy(head, data, MIN(size, sizeof(head)));
    if (qcow2_header_decode(head, sizeof(head), &h) < 0) {
        blk_error_clear();
        return true;
    }
    size_t cs = (size_t)1 << h.cluster_bits;
    g_autofree uint8_t *c0 = g_malloc0(cs);
    memcpy(c0, data, MIN(size, cs));
    /* when this fails, the open fails on the same extensions before it
     * opens any file */
    (void)qcow2_read_extensions(c0, &h, &ext);
    blk_error_clear();
    if (ext.data_file && (strchr(ext.data_file, '/') || ext.data_file[0] == '.' ||
                          ext.data_file[0] == '\0')) {
        safe = false;
    }
    qcow2_extensions_free(&ext);
    return safe;
}

#endif
