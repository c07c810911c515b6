/*
 * qimg io: the commands that describe the image: map, alloc, info (and the
 * length that map, alloc and length share).
 *
 * Owns: what "allocated" means to them, how runs are merged and printed,
 * and info's three lines.
 *
 * Facts learnt from running qemu-io 7.2 (not from its source):
 *  1. The length is the image size rounded up to 512 bytes (a 1000000-byte
 *     raw file is "977 KiB" long, its map 0xf4400 bytes).
 *  2. "Allocated" is the top layer's answer only: data or zero clusters of
 *     the image itself, not its backing file's; a raw image is allocated
 *     everywhere, holes included.
 *  3. map prints one line a run of equal answers, "S (0xN) bytes     allocated
 *     at offset O (0xM)" or "... bytes not allocated ...", S and O as
 *     cvtstr sizes ("64 KiB", "1.062 MiB", "0 bytes").
 *  4. "alloc offset [count]" (count default 512, any byte offset): the
 *     count is cut at the end of the image (an offset past it: 0), then
 *     "A/C bytes allocated at offset O" with A the allocated bytes in it, O
 *     a cvtstr size; a bad number is cvtnum's "Parsing error: ...".
 *  5. info: "format name: F" (twice for a protocol node opened as the
 *     image: nbd, ssh, null-co, null-aio, blkverify -- QEMU prints the
 *     driver's format and protocol names); where the image has no driver information
 *     (QimgInfo.dirty_unknown: NBD, ssh or QEMU's null node, or raw over one)
 *     that is all, and the command fails (exit status 1, no message);
 *     else "cluster size: S", "vm state offset: V" (S
 *     and V cvtstr sizes; raw: "0 bytes" both), then qemu-img info's
 *     "Format specific information:" part.  The qcow2 vm state offset is
 *     the virtual size rounded up to what one L2 table maps (cluster size
 *     times cluster size / 8, / 16 with extended L2 entries: 512 MiB for
 *     64 KiB clusters).
 */
#include "io.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

int64_t io_length(IoCtx *io)
{
    return (int64_t)((qimg_image_size(io->img) + 511) / 512 * 512); /* fact 1 */
}

/* Is [offset, offset+len) allocated in the top layer (fact 2), and for how
 * many bytes (*pnum > 0)?  The bytes past the real size that fact 1 adds
 * take the answer of the last byte.  < 0: -errno, printed by the caller. */
static int is_allocated(IoCtx *io, int64_t offset, int64_t len, int64_t *pnum)
{
    int64_t size = (int64_t)qimg_image_size(io->img);
    int64_t at = offset < size ? offset : size - 1;
    QimgExtent e;
    GError *err = NULL;

    if (size == 0) {
        *pnum = len;
        return 0;
    }
    if (!qimg_image_block_status_layer(
            io->img, (uint64_t)at, (uint64_t)(offset < size ? MIN(len, size - at) : 1),
            &e, &err)) {
        return io_take_errno(io, err);
    }
    *pnum = offset < size ? MIN((int64_t)e.length, len) : len;
    if (offset < size && offset + *pnum == size) {
        *pnum = len; /* the rounded tail goes with the last run */
    }
    return (e.flags & QIMG_STATUS_ALLOCATED) ? 1 : 0;
}

int io_cmd_map(IoCtx *io, int argc, char **argv)
{
    int64_t offset = 0, bytes = io_length(io);

    (void)argc;
    (void)argv;
    while (bytes > 0) {
        char s1[64], s2[64];
        int64_t num, more;
        int ret = is_allocated(io, offset, bytes, &num), next;

        if (ret < 0) {
            tool_error("Failed to get allocation status: %s", strerror(-ret));
            return ret;
        }
        while (num < bytes) { /* fact 3: one line a run */
            next = is_allocated(io, offset + num, bytes - num, &more);
            if (next < 0) {
                tool_error("Failed to get allocation status: %s", strerror(-next));
                return next;
            }
            if (next != ret) {
                break;
            }
            num += more;
        }
        io_cvtstr((double)num, s1, sizeof(s1));
        io_cvtstr((double)offset, s2, sizeof(s2));
        printf("%s (0x%" PRIx64 ") bytes %s allocated at offset %s (0x%" PRIx64 ")\n", s1,
               (uint64_t)num, ret ? "   " : "not", s2, (uint64_t)offset);
        offset += num;
        bytes -= num;
    }
    return 0;
}

int io_cmd_alloc(IoCtx *io, int argc, char **argv)
{
    int64_t offset, count = 512, length = io_length(io), sum = 0, start;
    char s[64];

    offset = io_cvtnum(argv[1]);
    if (offset < 0) {
        io_print_cvtnum_err(offset, argv[1]);
        return (int)offset;
    }
    if (argc == 3) {
        count = io_cvtnum(argv[2]);
        if (count < 0) {
            io_print_cvtnum_err(count, argv[2]);
            return (int)count;
        }
    }
    start = offset;
    count = offset >= length ? 0 : MIN(count, length - offset); /* fact 4 */
    for (int64_t left = count; left > 0;) {
        int64_t num;
        int ret = is_allocated(io, offset, left, &num);
        if (ret < 0) {
            printf("is_allocated failed: %s\n", strerror(-ret));
            return ret;
        }
        sum += ret ? num : 0;
        offset += num;
        left -= num;
    }
    io_cvtstr((double)start, s, sizeof(s));
    printf("%" PRId64 "/%" PRId64 " bytes allocated at offset %s\n", sum, count, s);
    return 0;
}

int io_cmd_info(IoCtx *io, int argc, char **argv)
{
    GError *err = NULL;
    g_autoptr(QimgInfo) info = qimg_image_get_info(io->img, &err);
    uint64_t vm_offset = 0;
    char s1[64], s2[64];

    (void)argc;
    (void)argv;
    if (!info) {
        tool_error("%s", err->message);
        g_clear_error(&err);
        return -EIO;
    }
    if (info->cluster_size && info->format_specific) { /* fact 5 */
        uint64_t cs = info->cluster_size;
        uint64_t span = cs * (cs / (info->extended_l2 ? 16 : 8));
        vm_offset = (info->virtual_size + span - 1) / span * span;
    }
    bool proto = strcmp(info->format, "nbd") == 0 || strcmp(info->format, "ssh") == 0 ||
                 strcmp(info->format, "null-co") == 0 ||
                 strcmp(info->format, "null-aio") == 0 ||
                 strcmp(info->format, "blkverify") == 0;
    printf("format name: %s\n", info->format); /* fact 5 */
    if (proto) {
        printf("format name: %s\n", info->format);
    }
    if (info->dirty_unknown) { /* fact 5: no driver information */
        return -ENOTSUP;
    }
    io_cvtstr((double)info->cluster_size, s1, sizeof(s1));
    io_cvtstr((double)vm_offset, s2, sizeof(s2));
    printf("cluster size: %s\nvm state offset: %s\n", s1, s2);
    tool_print_format_specific(info);
    return 0;
}
