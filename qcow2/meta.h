/*
 * qcow2/meta.h: the declarations of qcow2/meta.c, writing metadata safely:
 * the overlap check and its kinds, the corrupt bit and the writability
 * checks, header writes, the dirty bit of lazy refcounts, the write-back
 * hooks of the metadata caches and the flushes, and the sticky and deferred
 * errors.  Internal to qcow2/ (and api/'s overlap-check option); the rules
 * are meta.c's invariants.  Reporting a corruption
 * (qcow2_signal_corruption_locked), which the read path does too, stays in
 * qcow2.h.
 */
#ifndef QIMG_QCOW2_META_H
#define QIMG_QCOW2_META_H

#include "block/block.h"
#include "qcow2/qcow2.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Metadata kinds for the overlap check (meta.c invariant 1). */
enum {
    QCOW2_OL_MAIN_HEADER = 1u << 0,
    QCOW2_OL_ACTIVE_L1 = 1u << 1,
    QCOW2_OL_ACTIVE_L2 = 1u << 2,
    QCOW2_OL_REFCOUNT_TABLE = 1u << 3,
    QCOW2_OL_REFCOUNT_BLOCK = 1u << 4,
    QCOW2_OL_SNAPSHOT_TABLE = 1u << 5,
    QCOW2_OL_INACTIVE_L1 = 1u << 6,
    QCOW2_OL_BITMAP_DIRECTORY = 1u << 7,
    QCOW2_OL_INACTIVE_L2 = 1u << 8, /* read from the disk: "all" only */
    /* QEMU's templates */
    QCOW2_OL_ALL = (1u << 9) - 1,
    QCOW2_OL_CACHED = QCOW2_OL_ALL & ~QCOW2_OL_INACTIVE_L2,
    QCOW2_OL_CONSTANT = QCOW2_OL_MAIN_HEADER | QCOW2_OL_ACTIVE_L1 |
                        QCOW2_OL_REFCOUNT_TABLE | QCOW2_OL_SNAPSHOT_TABLE,
};

/* The first kind of metadata of QEMU's "cached" template (not in ign)
 * that [offset, offset + size), widened to whole clusters, overlaps; 0 if
 * none. */
unsigned qcow2_check_metadata_overlap_locked(Qcow2State *s, unsigned ign, uint64_t offset,
                                             uint64_t size);
/* QEMU's overlap-check option: the kinds of a template ("none",
 * "constant", "cached", "all"), or of one overlap-check.KIND name
 * ("active-l2", ...); false for a name QEMU does not have. */
bool qcow2_overlap_template(const char *name, unsigned *kinds);
bool qcow2_overlap_kind(const char *name, unsigned *kind);
/* 0, or -EIO after marking the image corrupt ("Preventing invalid write on
 * metadata (overlaps with ...)") when the write would overlap metadata. */
int qcow2_pre_write_overlap_check_locked(Qcow2State *s, unsigned ign, uint64_t offset,
                                         uint64_t size);
/* -EIO once the image was marked corrupt while open (writes refused). */
int qcow2_check_writable_locked(Qcow2State *s);
/* The same before a guest data write, zero, discard or compressed write of
 * guest bytes [offset, offset + bytes), but -ENOMEDIUM once the image was
 * marked corrupt (meta.c invariant 2); also loads and marks persistent
 * bitmaps in use and sets their bits (meta.c invariant 8). */
int qcow2_check_data_writable_locked(Qcow2State *s, uint64_t offset, uint64_t bytes);
/* Overlap check (ign: the kind being written), announce ev on the image
 * file, write, and flush the file if sync. */
int qcow2_write_metadata_locked(Qcow2State *s, BlkEvent ev, unsigned ign, uint64_t offset,
                                const void *buf, size_t len, bool sync);
/* One synced write of header bytes [offset, offset + len) (meta.c inv. 4). */
int qcow2_write_header_locked(Qcow2State *s, BlkEvent ev, uint64_t offset,
                              const void *buf, size_t len);
/* The same; *written tells whether the new bytes reached the file (then
 * only the flush failed, if anything: meta.c invariant 4). */
int qcow2_write_header_ex_locked(Qcow2State *s, BlkEvent ev, uint64_t offset,
                                 const void *buf, size_t len, bool *written);
/* Set and clear incompatible feature bits; written (synced) on v3 images. */
int qcow2_update_incompat_locked(Qcow2State *s, uint64_t set, uint64_t clear);
/* Lazy refcounts in use: the lazy-refcounts option, else the header's
 * compatible bit. */
bool qcow2_use_lazy_refcounts(const Qcow2State *s);
/* Lazy refcounts: set the dirty bit before the first allocation (no-op
 * without lazy refcounts in use or when already set). */
int qcow2_mark_dirty_locked(Qcow2State *s);
/* Write both caches, flush the file, then clear the dirty bit. */
int qcow2_mark_clean_locked(Qcow2State *s);
/* False while the dirty bit is set (lazy refcounts in use). */
bool qcow2_need_accurate_refcounts(const Qcow2State *s);
/* Write dirty L2 tables (refcount blocks first where they depend on them),
 * then dirty refcount blocks unless the image is dirty and !all.  Does not
 * flush the file. */
int qcow2_write_caches_locked(Qcow2State *s, bool all);
/* Flush the image file and the data file. */
int qcow2_flush_file(Qcow2State *s);
/* Cache write-back hooks (cache.c ops). */
int qcow2_l2_cache_write(void *opaque, uint64_t offset, const void *buf, size_t len);
int qcow2_refblock_cache_write(void *opaque, uint64_t offset, const void *buf,
                               size_t len);
int qcow2_cache_flush_file(void *opaque);
/* L2 entries reference guest data: durable on the data node. */
bool qcow2_l2_cache_is_durable(void *opaque, uint64_t gen);
/* Debug-build check of an ordering rule where a dependent write is issued
 * (block.h invariant 4, blk_assert_durable). */
static inline void qcow2_assert_durable(BlkNode *node, uint64_t gen, const char *rule)
{
    blk_assert_durable(node, gen, rule);
}
/* The refcount blocks written so far are durable and none is dirty: what a
 * table that references newly allocated clusters needs (alloc.c inv. 1). */
void qcow2_assert_refcounts_durable_locked(Qcow2State *s, const char *rule);
/* meta.c invariant 9: remember that a metadata write or a flush failed
 * (ret < 0); returns ret. */
int qcow2_set_sticky_locked(Qcow2State *s, int ret);
/* Write the caches, flush, then apply the pending frees and make them
 * durable too (alloc.c invariant 2): a flush that leaves nothing behind. */
int qcow2_flush_all_locked(Qcow2State *s);
/* meta.c invariant 13: at close, after a failed metadata write or flush,
 * write back what the caches hold once more.  *retried: whether it applied
 * (a writable image, not corrupt, with a sticky error); then 0 or -errno
 * with QEMU's close-time lines as the message. */
int qcow2_close_retry_locked(Qcow2State *s, bool *retried);
/* Read-write open: clear unknown autoclear bits on disk (DESIGN rule 5). */
int qcow2_open_rw_locked(Qcow2State *s);
/* Remember an I/O error met while freeing clusters (the request that freed
 * them succeeded): the next request to finish reports it (meta.c inv. 7). */
void qcow2_defer_error_locked(Qcow2State *s, int ret, const char *msg);
/* End of a guest request: bounds the pending frees (alloc.c invariant 2);
 * returns ret (deferred errors go to the next flush, meta.c invariant 7). */
int qcow2_finish_request_locked(Qcow2State *s, int ret);
/* End of a flush or of a metadata operation (snapshot, resize): the
 * deferred error if any (with its message: it came first), else ret. */
int qcow2_take_deferred_error_locked(Qcow2State *s, int ret);

#endif
