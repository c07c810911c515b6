/*
 * block/lock.c: image locks compatible with QEMU's (DESIGN.md rule 7).
 *
 * Owns: the byte-range protocol QEMU's file-posix speaks on an image file
 * (and on a data file), so that qimg, QEMU, qemu-img, qemu-io and qemu-nbd
 * see each other; and the permissions each kind of open takes.  The file
 * protocol (block/file.c) keeps the descriptor and calls this at open,
 * when the node above asks for its role's permissions (set_perm, block.h
 * invariant 4), before a resize, and at close.
 *
 * Permission i: 0 consistent read, 1 write, 2 write unchanged, 3 resize.
 *
 * Invariants:
 *  1. An open file description holds only shared (F_RDLCK) OFD locks of
 *     one byte each: byte 100 + i while it holds permission i, byte
 *     200 + i while it does not share permission i.  BlkLockState records
 *     exactly the bytes held.  OFD locks belong to the open file
 *     description, not the process: two opens in one process conflict as
 *     two processes do, and closing one open does not drop the other's.
 *  2. Our own bytes are taken first, then the others' are tested
 *     (F_OFD_GETLK with a write lock, which sees every other open file
 *     description's read lock): for each permission we hold, nobody may
 *     hold its "does not share" byte; for each permission we do not share,
 *     nobody may hold its "holds" byte.  Of two opens racing, the later
 *     test always sees the earlier take, so they cannot both succeed
 *     (they may both fail).
 *  3. A failed apply leaves the state it started from: the bytes it took
 *     are released again, the bytes held before stay held.
 *  4. Messages are QEMU's: 'Failed to lock byte N' when a byte cannot be
 *     taken; 'Failed to get "P" lock' or 'Failed to get shared "P" lock'
 *     and the line 'Is another process using the image [FILE]?' on a
 *     conflict, FILE being the name the file was opened by.  A conflict
 *     fails with -EAGAIN.
 *  5. The permissions of each open (blk_lock_perms) are the ones QEMU 7.2
 *     takes, as measured in /proc/locks (iotests/tests/025-locking.sh):
 *       role      open              holds            does not share
 *       protocol  read-only         CR               -
 *                 read-write        CR W (+RESIZE if opened to resize)
 *       metadata  read-only         CR               W RESIZE
 *                 read-write        CR W RESIZE      W RESIZE
 *       data      read-only         CR               RESIZE
 *                 read-write        CR W RESIZE      RESIZE
 *       create    -                 W RESIZE         RESIZE
 *     deny_write (qemu-img convert's source) adds W RESIZE to what every
 *     file does not share; force_share (read-only opens only) shares
 *     everything; no_io (read-only metadata opens: qemu-img info) drops CR,
 *     and a data file then takes nothing; share_write (read-only backing
 *     files of an image being committed) shares W RESIZE.
 *  6. An open with no_locking (QEMU's file.locking=off) takes no byte and
 *     tests none, then or later (st->off): it neither keeps others out nor
 *     sees them, as QEMU's.
 */
#include "block/lock.h"
#include "block/block.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define NPERM 4

static const char *const perm_names[NPERM] = {
    "consistent read",
    "write",
    "write unchanged",
    "resize",
};

const char *blk_perm_name(unsigned perm_bit)
{
    for (unsigned i = 0; i < NPERM; i++) {
        if (perm_bit == 1u << i) {
            return perm_names[i];
        }
    }
    return "?";
}

/* Invariant 5. */
void blk_lock_perms(BlkNodeRole role, const BlkOpenOptions *o, unsigned *perm,
                    unsigned *shared)
{
    bool rw = !o->read_only;
    bool io = rw || !o->no_io;
    unsigned p = 0, unshared = 0;

    switch (role) {
    case BLK_ROLE_PROTOCOL:
        p = (io ? BLK_PERM_CONSISTENT_READ : 0) | (rw ? BLK_PERM_WRITE : 0) |
            (o->resize ? BLK_PERM_RESIZE : 0);
        break;
    case BLK_ROLE_METADATA:
        p = (io ? BLK_PERM_CONSISTENT_READ : 0) |
            (rw ? BLK_PERM_WRITE | BLK_PERM_RESIZE : 0);
        unshared = BLK_PERM_WRITE | BLK_PERM_RESIZE;
        break;
    case BLK_ROLE_DATA:
        if (io) {
            p = BLK_PERM_CONSISTENT_READ | (rw ? BLK_PERM_WRITE | BLK_PERM_RESIZE : 0);
            unshared = BLK_PERM_RESIZE;
        }
        break;
    case BLK_ROLE_CREATE:
        p = BLK_PERM_WRITE | BLK_PERM_RESIZE;
        unshared = BLK_PERM_RESIZE;
        break;
    }
    if (o->deny_write && role != BLK_ROLE_CREATE && (p || unshared)) {
        unshared |= BLK_PERM_WRITE | BLK_PERM_RESIZE;
    }
    if (o->force_share && !rw) {
        unshared = 0;
    }
    if (o->share_write && !rw) {
        unshared &= ~(BLK_PERM_WRITE | BLK_PERM_RESIZE);
    }
    *perm = p;
    *shared = BLK_PERM_ALL & ~unshared;
}

static int set_byte(int fd, short type, int byte)
{
    struct flock fl = {
        .l_type = type,
        .l_whence = SEEK_SET,
        .l_start = byte,
        .l_len = 1,
    };

    while (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

/* 0 if no other open file description holds 'byte', -EAGAIN if one does. */
static int test_byte(int fd, int byte)
{
    struct flock fl = {
        .l_type = F_WRLCK,
        .l_whence = SEEK_SET,
        .l_start = byte,
        .l_len = 1,
    };

    while (fcntl(fd, F_OFD_GETLK, &fl) < 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return fl.l_type == F_UNLCK ? 0 : -EAGAIN;
}

static void release_bytes(int fd, unsigned perm, unsigned unshared)
{
    for (unsigned i = 0; i < NPERM; i++) {
        if (perm & (1u << i)) {
            (void)set_byte(fd, F_UNLCK, BLK_LOCK_PERM_BYTE + (int)i);
        }
        if (unshared & (1u << i)) {
            (void)set_byte(fd, F_UNLCK, BLK_LOCK_UNSHARE_BYTE + (int)i);
        }
    }
}

static int conflict(int ret, bool shared, unsigned i, const char *filename)
{
    return blk_error(-ret,
                     "Failed to get %s\"%s\" lock\nIs another process using the "
                     "image [%s]?",
                     shared ? "shared " : "", perm_names[i], filename);
}

int blk_lock_apply(BlkLockState *st, int fd, unsigned perm, unsigned shared,
                   const char *filename)
{
    unsigned unshared = BLK_PERM_ALL & ~shared;
    unsigned took_perm = 0, took_unshared = 0;
    int ret = 0;

    if (st->off) { /* invariant 6 */
        return 0;
    }
    perm &= BLK_PERM_ALL;
    /* Invariant 2: our own bytes first, the "holds" ones before the others. */
    for (unsigned i = 0; i < NPERM && ret == 0; i++) {
        unsigned bit = 1u << i;
        if ((perm & bit) && !(st->perm & bit)) {
            ret = set_byte(fd, F_RDLCK, BLK_LOCK_PERM_BYTE + (int)i);
            if (ret < 0) {
                blk_error(-ret, "Failed to lock byte %u", BLK_LOCK_PERM_BYTE + i);
            } else {
                took_perm |= bit;
            }
        }
    }
    for (unsigned i = 0; i < NPERM && ret == 0; i++) {
        unsigned bit = 1u << i;
        if ((unshared & bit) && !(st->unshared & bit)) {
            ret = set_byte(fd, F_RDLCK, BLK_LOCK_UNSHARE_BYTE + (int)i);
            if (ret < 0) {
                blk_error(-ret, "Failed to lock byte %u", BLK_LOCK_UNSHARE_BYTE + i);
            } else {
                took_unshared |= bit;
            }
        }
    }
    /* Then the others': what we hold against what they do not share... */
    for (unsigned i = 0; i < NPERM && ret == 0; i++) {
        if (perm & (1u << i)) {
            ret = test_byte(fd, BLK_LOCK_UNSHARE_BYTE + (int)i);
            if (ret < 0) {
                conflict(ret, false, i, filename);
            }
        }
    }
    /* ... and what we do not share against what they hold. */
    for (unsigned i = 0; i < NPERM && ret == 0; i++) {
        if (unshared & (1u << i)) {
            ret = test_byte(fd, BLK_LOCK_PERM_BYTE + (int)i);
            if (ret < 0) {
                conflict(ret, true, i, filename);
            }
        }
    }
    if (ret < 0) {
        release_bytes(fd, took_perm, took_unshared); /* invariant 3 */
        return ret;
    }
    release_bytes(fd, st->perm & ~perm, st->unshared & ~unshared);
    st->perm = perm;
    st->unshared = unshared;
    return 0;
}

int blk_lock_role(BlkLockState *st, int fd, BlkNodeRole role, const BlkOpenOptions *o,
                  bool read_only, const char *filename)
{
    BlkOpenOptions lo = {0};
    unsigned perm, shared;

    if (o) {
        lo = *o;
    }
    if (lo.no_locking) { /* invariant 6 */
        st->off = true;
        return 0;
    }
    lo.read_only = read_only;
    blk_lock_perms(role, &lo, &perm, &shared);
    return blk_lock_apply(st, fd, perm, shared, filename);
}

int blk_lock_add(BlkLockState *st, int fd, unsigned perm, const char *filename)
{
    return blk_lock_apply(st, fd, st->perm | perm, BLK_PERM_ALL & ~st->unshared,
                          filename);
}

void blk_lock_release(BlkLockState *st, int fd)
{
    release_bytes(fd, st->perm, st->unshared);
    st->perm = 0;
    st->unshared = 0;
}
