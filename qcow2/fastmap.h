/*
 * qcow2/fastmap.h: the guest-to-host map that lets reads and in-place
 * rewrites skip the metadata lock (fastmap.c says what it owns and its
 * invariants).
 */
#ifndef QIMG_QCOW2_FASTMAP_H
#define QIMG_QCOW2_FASTMAP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct Qcow2FastMap Qcow2FastMap;

/* A fast request's hold on one entry (fastmap.c invariant 2). */
typedef struct Qcow2FastRef {
    void *slot;
    unsigned stripe;
    uint64_t host; /* host offset of the request's first byte (0 if zero) */
    bool zero;     /* a zero entry: the bytes read as zeros (invariant 9) */
} Qcow2FastRef;

/* The most clusters one fast request may span (fastmap.c invariant 6). */
#define QCOW2_FAST_SPAN_MAX 32u

/* A fast request's holds on consecutive guest clusters, one each, from the
 * request's first (fastmap.c invariant 8). */
typedef struct Qcow2FastSpan {
    unsigned n;
    Qcow2FastRef ref[QCOW2_FAST_SPAN_MAX];
} Qcow2FastSpan;

/* Counters (relaxed; for tests and `qimg bench` statistics). */
typedef struct Qcow2FastStats {
    uint64_t hits, misses, learnt, forgotten, waits;
} Qcow2FastStats;

/* A map for an image of 'clusters' clusters of 2^cluster_bits bytes. */
Qcow2FastMap *qcow2_fastmap_new(uint32_t cluster_bits, uint64_t clusters);
void qcow2_fastmap_free(Qcow2FastMap *fm);

/*
 * Take a hold on the mapping of guest [offset, offset + bytes) (inside one
 * cluster) for a read, or for a write (writable entry, current metadata
 * generation, writes enabled); never on a zero entry (invariant 9: its
 * callers move data to or from a host cluster).  true: ref->host is where the bytes are
 * and qcow2_fastmap_end() must follow once the data moved; false: take the slow path.
 * Never blocks on anything but a stripe lock.
 */
bool qcow2_fastmap_begin(Qcow2FastMap *fm, uint64_t offset, uint64_t bytes, bool write,
                         Qcow2FastRef *ref);
void qcow2_fastmap_end(Qcow2FastMap *fm, Qcow2FastRef *ref);

/*
 * The same for guest [offset, offset + bytes) across up to
 * QCOW2_FAST_SPAN_MAX clusters: every cluster's entry held, or none
 * (invariant 8).  true: sp->ref[i].host is where the request's bytes in
 * its i-th cluster are (from the request's first byte in the first
 * cluster, from the cluster's start in the others) -- or, for a read,
 * sp->ref[i].zero: they read as zeros (invariant 9) -- and
 * qcow2_fastmap_end_span() must follow.  Never blocks on anything but a
 * stripe lock, and never while waiting for a forget.
 */
bool qcow2_fastmap_begin_span(Qcow2FastMap *fm, uint64_t offset, uint64_t bytes,
                              bool write, Qcow2FastSpan *sp);
void qcow2_fastmap_end_span(Qcow2FastMap *fm, Qcow2FastSpan *sp);

/*
 * Remember that guest cluster 'guest' (cluster aligned) maps to host
 * cluster 'host'; 'writable' when the entry is COPIED and every subcluster
 * is allocated, then 'gen' is the metadata generation read before the
 * overlap check of that host cluster.  Metadata lock held, by a request
 * registered over the cluster (invariant 1).
 */
void qcow2_fastmap_learn_locked(Qcow2FastMap *fm, uint64_t guest, uint64_t host,
                                bool writable, uint32_t gen);

/*
 * Remember that guest cluster 'guest' (cluster aligned) reads as zeros
 * without touching any file: a zero entry, for qcow2_fastmap_begin_span's
 * reads only (invariant 9).  The same rules as qcow2_fastmap_learn_locked.
 */
void qcow2_fastmap_learn_zero_locked(Qcow2FastMap *fm, uint64_t guest);

/* Drop every entry of guest [start, end) and wait until no fast request
 * holds one (invariant 2).  Metadata lock held. */
void qcow2_fastmap_forget_locked(Qcow2FastMap *fm, uint64_t start, uint64_t end);

/* Metadata clusters were allocated: writable entries must be checked again
 * (invariant 4). */
void qcow2_fastmap_meta_changed(Qcow2FastMap *fm);
uint32_t qcow2_fastmap_gen(const Qcow2FastMap *fm);

/* Allow or refuse fast writes (invariant 3).  Metadata lock held. */
void qcow2_fastmap_set_writes_locked(Qcow2FastMap *fm, bool on);

void qcow2_fastmap_stats(const Qcow2FastMap *fm, Qcow2FastStats *st);

#endif
