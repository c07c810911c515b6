/*
 * qcow2/check-bitmap.c: the check's references from persistent dirty
 * bitmaps (QEMU's qcow2_check_bitmaps_refcounts; part of check.c's design).
 *
 * Owns: counting the references of the bitmap directory, the bitmap
 * tables and their data clusters.  The directory and the tables are read
 * and validated by their codec (bitmap-codec.c) under its
 * QCOW2_BITMAP_CHECK rules, which are QEMU's bitmap_list_load and
 * bitmap_table_load with qemu-img's messages (bitmap-codec.c invariant 3).
 *
 * Invariants: check.c's list, cited as "check.c invariant N"; this file
 * keeps 3 (every size validated before it decides an allocation: bitmap
 * directory <= 64 MiB, bitmap table <= 512 MiB / cluster, both checked by
 * the codec, bitmap-codec.c invariant 6; reads within the file).
 */
#include "qcow2/check.h"

#include <errno.h>

/* The codec's reads: check_pread (zeros past the end of the file). */
static int check_source_read(void *opaque, uint64_t offset, void *buf, uint64_t len)
{
    return check_pread(opaque, offset, buf, (size_t)len);
}

int check_bitmaps(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    const Qcow2BitmapsExt *x = &s->ext.bitmaps;
    const Qcow2BitmapSource src = {.read = check_source_read, .opaque = c};
    const Qcow2BitmapImage img = {.cluster_bits = s->cluster_bits,
                                  .disk_size = s->img->size,
                                  .file_size = c->file_size};
    Qcow2BitmapDir dir;
    int ret;

    if (!s->ext.has_bitmaps || x->nb_bitmaps == 0) {
        return 0;
    }
    ret = check_inc_refcounts(c, res, x->directory_offset, x->directory_size);
    if (ret < 0) {
        return ret;
    }
    if (qcow2_bitmap_dir_read(&src, x, &img, QCOW2_BITMAP_CHECK, &dir) < 0) {
        res->corruptions++;
        return -EINVAL; /* as QEMU; the reason is recorded */
    }
    for (uint32_t b = 0; b < dir.nb; b++) {
        const Qcow2Bitmap *bm = &dir.bms[b];
        g_autofree uint64_t *table = NULL;

        /* table_size * cluster_size <= 512 MiB (the codec checked it) */
        ret = check_inc_refcounts(c, res, bm->table_offset, UINT64_C(8) * bm->table_size);
        if (ret < 0) {
            goto out;
        }
        ret = qcow2_bitmap_table_read(&src, bm, b, &img, QCOW2_BITMAP_CHECK, &table);
        if (ret < 0) {
            res->corruptions++;
            goto out;
        }
        for (uint32_t i = 0; i < bm->table_size; i++) {
            uint64_t off = table[i] & QCOW2_BTE_OFFSET_MASK;
            if (off) {
                ret = check_inc_refcounts(c, res, off, s->cluster_size);
                if (ret < 0) {
                    goto out;
                }
            }
        }
    }
    ret = 0;
out:
    qcow2_bitmap_dir_free(&dir);
    return ret;
}
