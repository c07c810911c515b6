/*
 * qcow2/check.h: consistency check and repair of qcow2 images (what
 * qemu-img check reports and fixes).  See check.c for the design notes and
 * invariants (check-refs.c, check-l2.c and check-bitmap.c cite them as
 * "check.c invariant N"), repair.c for the on-disk writes.
 */
#ifndef QIMG_QCOW2_CHECK_H
#define QIMG_QCOW2_CHECK_H

#include "qcow2/qcow2.h"

struct BlkCheckResult;

/*
 * Check the image and, with fix (BLK_CHECK_FIX_LEAKS and/or
 * BLK_CHECK_FIX_ERRORS), repair it, as QEMU's qcow2_co_check_locked does:
 * one pass, no double check (api/check.c does that for qimg_image_check).
 * The image must be open with check_mode, and read-write to repair.
 * Findings are appended to res->messages (created when NULL), the counters
 * are added to res.  Returns 0 when the check ran to its end (res->check_errors
 * may still be > 0), or -errno when it stopped; then *error says why, with
 * error->code = errno (check.c invariant 6).  Takes the metadata lock.
 * The write path calls it with FIX_LEAKS | FIX_ERRORS when a dirty image
 * (lazy refcounts) is opened read-write; on success the dirty and corrupt
 * bits are cleared.
 */
int qcow2_check_image(BlkNode *img, struct BlkCheckResult *res, unsigned fix);

/* Progress of a long check: done out of total work units (table entries
 * and clusters). */
typedef void Qcow2CheckProgressFn(void *opaque, uint64_t done, uint64_t total);

typedef struct Qcow2CheckOptions {
    Qcow2CheckProgressFn *progress; /* may be NULL */
    void *progress_opaque;
    /* check.c invariant 4, in table entries; 0: the defaults.  Tests make
     * them small to reach the deferred and refusing paths. */
    uint64_t replay_budget;
    uint64_t bad_budget;
} Qcow2CheckOptions;

/* qcow2_check_image() with options (opts may be NULL). */
int qcow2_check_image_opts(BlkNode *img, struct BlkCheckResult *res, unsigned fix,
                           const Qcow2CheckOptions *opts);

/* ---- shared by check*.c and repair.c only ---- */

/* Walk flag: compute the allocation and fragmentation counters. */
#define CHECK_FRAG_INFO 1

/* Lines kept in res->messages; further ones are counted, not kept.  The
 * overflow pair (two lines per reference a cluster cannot count) has its
 * own, smaller cap, so a hostile image cannot crowd out the rest. */
#define CHECK_MAX_MESSAGES 1000000u
#define CHECK_MAX_OVERFLOW_MESSAGES 10000u

/* Clusters the in-memory refcount table may count (check.c invariant 2):
 * QEMU's INT_MAX, and the few a rebuild may add past it. */
#define CHECK_MAX_CLUSTERS ((uint64_t)INT_MAX + 2)
/* The farthest cluster -r all grows the file to hold a refcount block
 * outside it, unless twice the file's clusters + 1024 is farther (check.c
 * invariant 2): QEMU's 060 puts one at cluster 2^20. */
#define CHECK_GROW_CLUSTERS (UINT64_C(1) << 21)

/* The counters of one part of the check (QEMU's BdrvCheckResult). */
typedef struct Qcow2CheckCounts {
    int64_t corruptions;
    int64_t leaks;
    int64_t check_errors;
    int64_t corruptions_fixed;
    int64_t leaks_fixed;
    int64_t image_end_offset;
    int64_t total_clusters;
    int64_t allocated_clusters;
    int64_t fragmented_clusters;
    int64_t compressed_clusters;
} Qcow2CheckCounts;

typedef struct Qcow2Check {
    Qcow2State *s;
    BlkNode *file;
    GPtrArray *messages; /* char *, the caller's result */
    unsigned fix;
    uint64_t file_size; /* current length of the image file */

    /* The in-memory refcount table (check.c invariant 2): one entry per
     * host cluster in [0, nb_clusters), encoded like a refcount block of
     * the image's width, allocated in whole clusters so that every
     * cluster-sized slice is a ready refcount block (rebuild writes them). */
    uint8_t *refs;
    uint64_t nb_clusters;
    uint64_t refs_bytes;
    uint64_t refs_high; /* 1 + the highest cluster with a count (0: none) */

    unsigned messages_dropped; /* past CHECK_MAX_MESSAGES */
    uint8_t *l2_buf;           /* one cluster, for the L2 table being walked */
    uint64_t overflow_messages, overflow_dropped; /* check.c invariant 4 */

    Qcow2CheckProgressFn *progress;
    void *progress_opaque;
    uint64_t progress_done, progress_total;
    uint64_t replay_budget, bad_budget; /* per walk (check.c invariant 4) */
} Qcow2Check;

/* State of one calculate pass (besides Qcow2Check). */
typedef struct Qcow2CheckWalk {
    GHashTable *l2memo; /* uint64_t offset -> L2Memo (check-l2.c) */
    uint64_t replay_budget;
    uint64_t bad_budget;
    uint64_t l1_budget;
    bool deferred; /* some L2Memo has pending references */
} Qcow2CheckWalk;

/* check.c */
void check_msg(Qcow2Check *c, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* Read from the image file, zeros past its end. */
int check_pread(Qcow2Check *c, uint64_t offset, void *buf, size_t len);
/* Refresh c->file_size (and raise the driver's file_size) from the file. */
int check_refresh_file_size(Qcow2Check *c);
void check_progress_add(Qcow2Check *c, uint64_t units);

/* check-refs.c */
uint64_t check_refs_get(const Qcow2Check *c, uint64_t cluster);
void check_refs_set(Qcow2Check *c, uint64_t cluster, uint64_t value);
int check_refs_resize(Qcow2Check *c, uint64_t nb_clusters);
/* The on-disk refcount as qemu-img check reads it. */
int check_get_refcount(Qcow2Check *c, uint64_t cluster, uint64_t *refcount);
/* Count mult references (or one) to every cluster [offset, offset + size)
 * touches. */
int check_inc_refcounts_n(Qcow2Check *c, Qcow2CheckCounts *res, uint64_t offset,
                          uint64_t size, uint64_t mult);
int check_inc_refcounts(Qcow2Check *c, Qcow2CheckCounts *res, uint64_t offset,
                        uint64_t size);
int check_refblocks(Qcow2Check *c, Qcow2CheckCounts *res, bool *rebuild);
void check_compare_refcounts(Qcow2Check *c, Qcow2CheckCounts *res, unsigned fix,
                             bool *rebuild, uint64_t *highest);

/* check-l2.c */
int check_l1(Qcow2Check *c, Qcow2CheckWalk *w, Qcow2CheckCounts *res, uint64_t l1_offset,
             uint32_t l1_size, int flags, bool active);
int check_apply_deferred(Qcow2Check *c, Qcow2CheckWalk *w, Qcow2CheckCounts *res);
int check_oflag_copied(Qcow2Check *c, Qcow2CheckCounts *res);

/* check-bitmap.c */
int check_bitmaps(Qcow2Check *c, Qcow2CheckCounts *res);

/* repair.c */
int repair_write(Qcow2Check *c, BlkEvent ev, unsigned ign, uint64_t offset,
                 const void *buf, size_t len, bool sync);
int repair_overlap_check(Qcow2Check *c, unsigned ign, uint64_t offset, uint64_t size);
int repair_set_refcount(Qcow2Check *c, uint64_t cluster, uint64_t old, uint64_t refcount);
int repair_flush_refcounts(Qcow2Check *c);
int repair_write_l1_entry(Qcow2Check *c, uint32_t index);
int repair_truncate(Qcow2Check *c, uint64_t size);
int repair_rebuild_refcounts(Qcow2Check *c, Qcow2CheckCounts *res);
/* The snapshot table as qemu-img check reads it (dropping, with
 * FIX_ERRORS, what -r all drops) into s->snapshots; its corruptions. */
int repair_read_snapshot_table(Qcow2Check *c, Qcow2CheckCounts *res);
/* Rewrite the table when reading it found fixable corruptions. */
int repair_fix_snapshot_table(Qcow2Check *c, Qcow2CheckCounts *res);
int repair_write_snapshot_table(Qcow2Check *c);
int repair_write_nb_snapshots(Qcow2Check *c, uint32_t nb);
int repair_mark_consistent(Qcow2Check *c);

#endif
