/*
 * block/lock.h: image locks compatible with QEMU's (block/lock.c).
 *
 * Permissions are bit masks of BLK_PERM_*; a node that holds permission i
 * holds byte 100 + i of its file, a node that does not share permission i
 * holds byte 200 + i (DESIGN.md rule 7).
 */
#ifndef QIMG_BLOCK_LOCK_H
#define QIMG_BLOCK_LOCK_H

#include "block/types.h"

#include <stdbool.h>

enum {
    BLK_PERM_CONSISTENT_READ = 1u << 0,
    BLK_PERM_WRITE = 1u << 1,
    BLK_PERM_WRITE_UNCHANGED = 1u << 2,
    BLK_PERM_RESIZE = 1u << 3,
    BLK_PERM_ALL = (1u << 4) - 1,
};

#define BLK_LOCK_PERM_BYTE 100    /* + i: "I hold permission i" */
#define BLK_LOCK_UNSHARE_BYTE 200 /* + i: "I do not share permission i" */

/* What an open file is to the node above it; decides its permissions. */
typedef enum BlkNodeRole {
    BLK_ROLE_PROTOCOL = 0, /* read as it is: a raw image, or the format is not
                            * known yet (what the file protocol takes) */
    BLK_ROLE_METADATA,     /* the file of a format with metadata (qcow2) */
    BLK_ROLE_DATA,         /* an external data file (qcow2 data_file) */
    BLK_ROLE_CREATE,       /* a file being created (blk_file_create) */
} BlkNodeRole;

/* The bytes one open file description holds (block/lock.c invariant 1). */
typedef struct BlkLockState {
    unsigned perm;     /* byte 100 + i held for each bit i */
    unsigned unshared; /* byte 200 + i held for each bit i */
    bool off;          /* locking=off: nothing is taken (lock.c invariant 6) */
} BlkLockState;

/*
 * The permissions QEMU takes on a file in 'role' for an open with options
 * o (o->read_only as in effect; force_share, no_io and resize as given).
 */
void blk_lock_perms(BlkNodeRole role, const BlkOpenOptions *o, unsigned *perm,
                    unsigned *shared);

/*
 * Make fd hold exactly the bytes of (perm, shared), starting from *st, and
 * refuse if another open file description conflicts.  Returns 0, or -errno
 * (-EAGAIN when another holder conflicts) with QEMU's message recorded by
 * blk_error(); *st is unchanged on failure (invariant 3).
 */
int blk_lock_apply(BlkLockState *st, int fd, unsigned perm, unsigned shared,
                   const char *filename);
/* blk_lock_apply() with the permissions of 'role' for an open with options o
 * (NULL: none) and read_only as in effect. */
int blk_lock_role(BlkLockState *st, int fd, BlkNodeRole role, const BlkOpenOptions *o,
                  bool read_only, const char *filename);
/* blk_lock_apply() that also holds 'perm', keeping the rest as it is. */
int blk_lock_add(BlkLockState *st, int fd, unsigned perm, const char *filename);
/* Drop every byte *st holds. */
void blk_lock_release(BlkLockState *st, int fd);

/* QEMU's name of one permission bit ("consistent read", "write", ...). */
const char *blk_perm_name(unsigned perm_bit);

#endif
