/*
 * block/mapped.c: the read loop and block status the mapping formats
 * share (vpc/, vhdx/, vdi/, qed/): the driver says what a guest range is,
 * this file moves the bytes.
 *
 * Owns: nothing but the loop.
 *
 * Invariants (cited as "mapped.c invariant N"):
 *  1. A read is cut into the driver's answers, in order; each answer's
 *     bytes come from the file (the driver's read function, or the file
 *     node), from the backing node (padded with zeros past its end, as QEMU
 *     reads a shorter backing file; zeros without one), or are zeros.  An
 *     answer of length 0 or longer than asked is an I/O error, never a
 *     loop.
 *  2. Block status reports data (with its file offset), zeros, or nothing
 *     (the backing file's) for exactly one answer.
 */
#include "block/mapped.h"

#include <errno.h>
#include <string.h>

static int answer(BlkNode *img, uint64_t offset, uint64_t max, BlkMapFn map,
                  BlkMapping *m)
{
    int ret;

    memset(m, 0, sizeof(*m));
    ret = map(img, offset, max, m);
    if (ret == 0 && (m->len == 0 || m->len > max)) { /* invariant 1 */
        return blk_error(EIO, "Driver '%s' mapped an invalid length",
                         img->drv->format_name);
    }
    return ret;
}

int blk_mapped_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, BlkMapFn map,
                      BlkMapReadFn read)
{
    for (size_t done = 0; done < qiov->size;) {
        BlkMapping m;
        BlkIOV part;
        int ret = answer(img, offset + done, qiov->size - done, map, &m);

        if (ret < 0) {
            return ret;
        }
        iov_slice(&part, qiov, done, (size_t)m.len);
        if (m.kind == BLK_MAP_DATA) {
            ret = read ? read(img, m.file_offset, &part)
                       : blk_preadv(img->file, m.file_offset, &part, 0);
        } else if (m.kind == BLK_MAP_BACKING && img->backing) {
            ret = blk_preadv_padded(img->backing, offset + done, &part);
        } else {
            iov_memset(&part, 0, 0, part.size);
        }
        iov_destroy(&part);
        if (ret < 0) {
            return ret;
        }
        done += (size_t)m.len;
    }
    return 0;
}

int blk_mapped_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkMapFn map,
                            BlkStatus *st)
{
    BlkMapping m;
    int ret = answer(img, offset, bytes, map, &m);

    memset(st, 0, sizeof(*st));
    if (ret < 0) {
        return ret;
    }
    st->pnum = m.len; /* invariant 2 */
    if (m.kind == BLK_MAP_DATA) {
        st->flags = BLK_STATUS_DATA | BLK_STATUS_OFFSET_VALID;
        st->map = m.file_offset;
        st->file = img->file;
    } else if (m.kind == BLK_MAP_ZERO) {
        st->flags = BLK_STATUS_ZERO;
    }
    return 0;
}
