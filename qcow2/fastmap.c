/*
 * qcow2/fastmap.c: the request path that takes no image-wide lock.
 *
 * Owns: a set-associative map from guest cluster to host cluster, filled by
 * the slow path (read.c, write.c) under the metadata lock and read by
 * requests without it: a read of allocated clusters and a rewrite of
 * allocated, COPIED clusters find their host offsets here and go straight
 * to the file; a read also finds here the clusters that read as zeros (invariant 9).
 * Everything else (allocation, COW, writing zeros, discard, compressed, backing, FUA, a
 * request touching any cluster the map does not hold) takes the slow path, which keeps
 * the ordering rules of write.c and meta.c.
 *
 * Each entry lives in a set of FM_WAYS slots; sets are guarded by striped
 * mutexes (a stripe covers many sets), and each slot counts the fast
 * requests that hold it.
 *
 * Invariants (cited as "fastmap.c invariant N"):
 *  1. An entry for guest cluster X is learnt only under the metadata lock by
 *     a guest read or write (qcow2_preadv, qcow2_pwritev) registered over X
 *     in the in-flight list (write.c invariant 6), from X's L2 entry as it
 *     is then: a NORMAL cluster (read entry), or a COPIED cluster written in
 *     place or just linked (writable entry; with extended L2 only when every
 *     subcluster is allocated), or a cluster that reads as zeros (zero
 *     entry, invariant 9).  Such a request changes X's mapping at most
 *     once, before it learns; requests that change a mapping after writing
 *     (zeroing's partial subclusters, compressed writes, the vmstate) learn
 *     nothing.  The other learners are the prime of a direct request or
 *     of a slow write with nothing in its way (write.c invariant 6), a
 *     slow read's read-ahead and block status (read.c qcow2_prime_locked,
 *     learn_ahead_locked, learn_status_locked): under the metadata lock,
 *     from a cached L2 table (or one the lookup under the same hold of the
 *     lock just read), only while no write registration covers X, so X's
 *     mapping stays as read until a registration forgets it (invariant 2).  A
 *     learn never replaces a slot that is held or being forgotten.
 *  2. Before X's mapping changes, the request that changes it forgets X:
 *     every registration of a write range (qcow2_inflight_begin_locked)
 *     drops the entries of its clusters and waits until no fast request
 *     holds them.  Since a write registration excludes every other request
 *     over X, nothing learns X again until it ends, with the new mapping.
 *     So a fast request never moves data to or from a host cluster after
 *     the mapping changed, and no cluster is freed or reused under it (what
 *     read.c invariant 6 and write.c invariant 6 give slow requests).
 *  3. Fast writes run only while the slow path allows writes: they are
 *     switched on under the metadata lock after qcow2_check_data_writable
 *     succeeded (so the first write's header work, meta.c invariant 8, is
 *     done) and off, under the same lock, by a sticky error or the corrupt
 *     bit (meta.c invariants 2, 9) and by a store of the persistent bitmaps
 *     (bitmap-store.c invariant 2: the next write marks them in use).
 *  4. A writable entry is used only in the metadata generation in which its
 *     host cluster passed the overlap check (meta.c invariant 2): every
 *     allocation of metadata clusters bumps the generation
 *     (qcow2_fastmap_meta_changed), so a guest write never reaches a cluster
 *     that became metadata without the check being run again.
 *  5. Stripe locks are leaves.  Forgetting waits for a slot's holders with
 *     the metadata lock held; fast requests never take the metadata lock,
 *     so that cannot deadlock.  A holder's ring request held back for a
 *     batch (uring.c invariant 7) goes to the kernel before the wait
 *     (aio/plug.h invariant 2).
 *  6. A fast request spans at most QCOW2_FAST_SPAN_MAX clusters (a hold
 *     each, on the caller's stack; one cluster for qcow2_fastmap_begin and
 *     the ring's direct requests); the map never allocates after
 *     qcow2_fastmap_new and its size is bounded (FM_MAX_SETS sets).
 *  7. What a hold means (invariants 1 and 2 together): from
 *     qcow2_fastmap_begin() to qcow2_fastmap_end(), guest cluster X's L2
 *     entry maps the request's bytes to ref->host, allocated (NORMAL) --
 *     or, for a zero entry, keeps X reading as zeros (invariant 9); no
 *     request changes that before the hold ends, and the host cluster is
 *     neither freed nor reused.  Debug builds check it against the L2
 *     entry where a ring request is issued (read.c check_direct_hold), the
 *     one place a held request leaves the process for long.  (Issue 31's
 *     "read differs from the model" came from its test, which let a write
 *     be submitted over a read in flight, not from a broken hold: reads
 *     stopped by a breakpoint while their cluster is discarded, zeroed and
 *     its host cluster would be reused, on the slow path and on a hold,
 *     are tests/test-aio-interleave.c's test_read_beside_*.)
 *  8. A request across clusters (qcow2_fastmap_begin_span) holds every
 *     cluster it touches, each by invariant 7, or none: the first cluster
 *     whose entry is missing, dying (being forgotten), or not writable in
 *     the current generation for a write, makes it give back the holds it
 *     took and take the slow path -- so a cluster read through the backing
 *     node, a compressed or COW-needing cluster (or for a write, one that
 *     is unallocated or zero) anywhere in the request sends the whole
 *     request there.  It assumes nothing across clusters: each cluster's
 *     bytes move at that cluster's own host offset (runs of host-contiguous
 *     clusters merged into one data request; runs of zero entries filled
 *     with zeros), and the
 *     clusters may have been learnt at different times.  Taking the holds
 *     never waits (a forgetter waits for holders, a holder never for a
 *     forgetter), so invariant 5 still rules out deadlock.
 *  9. A zero entry says that guest cluster X reads as zeros without any
 *     file being read: X's L2 entry is a zero cluster (plain or allocated),
 *     or unallocated in an image without a backing node (a node's backing
 *     never changes while it is open), and the learning request saw that
 *     for the whole cluster (with extended L2, every subcluster).  It is
 *     learnt and forgotten as a read entry is (invariants 1, 2), so while it
 *     is held X keeps reading as zeros.  It serves only reads
 *     (qcow2_fastmap_begin_span, write false), which fill its part with
 *     zeros as the slow path would (read.c invariants 3, 7); it is never
 *     writable, and qcow2_fastmap_begin (the ring's direct requests, which
 *     move data to or from a host cluster) never holds one.
 */
#include "qcow2/fastmap.h"

#include "aio/plug.h"

#include <glib.h>
#include <pthread.h>

#define FM_WAYS 4u
#define FM_STRIPES 64u
#define FM_MAX_SETS (UINT64_C(1) << 15) /* 128 Ki slots, 3 MiB */
#define FM_MIN_SETS 16u

/* Flags in the low bits of a slot's host offset (clusters are >= 512 bytes):
 * FM_ZERO marks a zero entry (invariant 9), whose offset is 0. */
enum { FM_WRITABLE = 1u, FM_DEAD = 2u, FM_ZERO = 4u, FM_FLAGS = 7u };

typedef struct FmSlot {
    uint64_t key;   /* guest cluster index + 1; 0: empty */
    uint64_t host;  /* host cluster offset | FM_* flags */
    uint32_t users; /* fast requests holding the slot */
    uint32_t gen;   /* metadata generation of a writable entry */
} FmSlot;

typedef struct FmStripe {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a slot's users dropped to 0 */
    unsigned waiters;
} FmStripe;

struct Qcow2FastMap {
    FmSlot *slots; /* nsets * FM_WAYS */
    uint64_t nsets;
    unsigned set_bits;
    uint32_t cluster_bits;
    uint32_t meta_gen; /* atomic */
    int writes_on;     /* atomic; written under the metadata lock */
    FmStripe stripes[FM_STRIPES];
    uint64_t hits, misses, learnt, forgotten, waits; /* relaxed counters */
};

static inline void count(uint64_t *c)
{
    __atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
}

Qcow2FastMap *qcow2_fastmap_new(uint32_t cluster_bits, uint64_t clusters)
{
    Qcow2FastMap *fm = g_new0(Qcow2FastMap, 1);
    uint64_t want = clusters / FM_WAYS + 1;

    fm->set_bits = 4;
    while ((UINT64_C(1) << fm->set_bits) < MIN(want, FM_MAX_SETS)) {
        fm->set_bits++;
    }
    fm->nsets = MAX(UINT64_C(1) << fm->set_bits, FM_MIN_SETS);
    fm->slots = g_new0(FmSlot, fm->nsets * FM_WAYS);
    fm->cluster_bits = cluster_bits;
    for (unsigned i = 0; i < FM_STRIPES; i++) {
        pthread_mutex_init(&fm->stripes[i].lock, NULL);
        pthread_cond_init(&fm->stripes[i].cond, NULL);
    }
    return fm;
}

void qcow2_fastmap_free(Qcow2FastMap *fm)
{
    if (!fm) {
        return;
    }
    for (unsigned i = 0; i < FM_STRIPES; i++) {
        pthread_mutex_destroy(&fm->stripes[i].lock);
        pthread_cond_destroy(&fm->stripes[i].cond);
    }
    g_free(fm->slots);
    g_free(fm);
}

static inline uint64_t set_of(const Qcow2FastMap *fm, uint64_t idx)
{
    return (idx * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - fm->set_bits);
}

static inline FmStripe *stripe_of(Qcow2FastMap *fm, uint64_t set)
{
    return &fm->stripes[set % FM_STRIPES];
}

static FmSlot *find(Qcow2FastMap *fm, uint64_t set, uint64_t key)
{
    FmSlot *w = &fm->slots[set * FM_WAYS];
    for (unsigned i = 0; i < FM_WAYS; i++) {
        if (w[i].key == key) {
            return &w[i];
        }
    }
    return NULL;
}

/* Hold guest cluster idx's entry (invariants 2, 7); offset 'in' into it.
 * A zero entry only if 'zero_ok' (invariant 9). */
static bool hold(Qcow2FastMap *fm, uint64_t idx, uint64_t in, bool write, bool zero_ok,
                 Qcow2FastRef *ref)
{
    uint64_t set = set_of(fm, idx);
    FmStripe *st;
    FmSlot *slot;
    bool ok;

    st = stripe_of(fm, set);
    pthread_mutex_lock(&st->lock);
    slot = find(fm, set, idx + 1);
    ok = slot && !(slot->host & FM_DEAD) && (zero_ok || !(slot->host & FM_ZERO));
    if (ok && write) { /* a zero entry is never writable */
        ok = (slot->host & FM_WRITABLE) &&
             slot->gen == __atomic_load_n(&fm->meta_gen, __ATOMIC_ACQUIRE); /* inv 4 */
    }
    if (ok) {
        slot->users++;
        ref->slot = slot;
        ref->stripe = (unsigned)(set % FM_STRIPES);
        ref->zero = (slot->host & FM_ZERO) != 0;
        ref->host = ref->zero ? 0 : (slot->host & ~(uint64_t)FM_FLAGS) + in;
    }
    pthread_mutex_unlock(&st->lock);
    return ok;
}

bool qcow2_fastmap_begin(Qcow2FastMap *fm, uint64_t offset, uint64_t bytes, bool write,
                         Qcow2FastRef *ref)
{
    uint64_t in = offset & ((UINT64_C(1) << fm->cluster_bits) - 1);
    bool ok;

    /* invariant 6 */
    if (bytes == 0 || bytes > (UINT64_C(1) << fm->cluster_bits) - in) {
        return false;
    }
    if (write && !__atomic_load_n(&fm->writes_on, __ATOMIC_ACQUIRE)) {
        return false; /* invariant 3 */
    }
    ok = hold(fm, offset >> fm->cluster_bits, in, write, false, ref); /* invariant 9 */
    count(ok ? &fm->hits : &fm->misses);
    return ok;
}

bool qcow2_fastmap_begin_span(Qcow2FastMap *fm, uint64_t offset, uint64_t bytes,
                              bool write, Qcow2FastSpan *sp)
{
    uint64_t first = offset >> fm->cluster_bits, last;
    uint64_t in = offset & ((UINT64_C(1) << fm->cluster_bits) - 1);
    bool ok = true;

    sp->n = 0;
    /* invariant 6: a bounded number of clusters, never past 2^64 */
    if (bytes == 0 || offset + bytes < offset ||
        (last = (offset + bytes - 1) >> fm->cluster_bits) - first >=
            QCOW2_FAST_SPAN_MAX) {
        return false;
    }
    if (write && !__atomic_load_n(&fm->writes_on, __ATOMIC_ACQUIRE)) {
        return false; /* invariant 3 */
    }
    for (uint64_t idx = first; idx <= last && ok; idx++) {
        ok = hold(fm, idx, idx == first ? in : 0, write, true, &sp->ref[sp->n]);
        sp->n += ok;
    }
    if (!ok) { /* invariant 8: give back what was held, take the slow path */
        qcow2_fastmap_end_span(fm, sp);
    }
    count(ok ? &fm->hits : &fm->misses);
    return ok;
}

void qcow2_fastmap_end_span(Qcow2FastMap *fm, Qcow2FastSpan *sp)
{
    for (unsigned i = 0; i < sp->n; i++) {
        qcow2_fastmap_end(fm, &sp->ref[i]);
    }
    sp->n = 0;
}

void qcow2_fastmap_end(Qcow2FastMap *fm, Qcow2FastRef *ref)
{
    FmStripe *st = &fm->stripes[ref->stripe];
    FmSlot *slot = ref->slot;

    pthread_mutex_lock(&st->lock);
    g_assert(slot->users > 0);
    if (--slot->users == 0 && st->waiters) {
        pthread_cond_broadcast(&st->cond);
    }
    pthread_mutex_unlock(&st->lock);
    ref->slot = NULL;
}

/* Store 'value' (a host cluster offset | FM_WRITABLE, or FM_ZERO) as guest
 * cluster 'guest''s entry (invariant 1). */
static void learn(Qcow2FastMap *fm, uint64_t guest, uint64_t value, uint32_t gen)
{
    uint64_t idx = guest >> fm->cluster_bits, set = set_of(fm, idx);
    uint64_t mapping = value & ~(uint64_t)FM_WRITABLE; /* offset | FM_ZERO */
    FmStripe *st = stripe_of(fm, set);
    FmSlot *w = &fm->slots[set * FM_WAYS], *slot;

    pthread_mutex_lock(&st->lock);
    slot = find(fm, set, idx + 1);
    if (slot) {
        uint64_t had = slot->host & ~(uint64_t)(FM_WRITABLE | FM_DEAD);
        if ((slot->host & FM_DEAD) || (slot->users && had != mapping)) {
            goto out; /* invariant 1: never under a holder */
        }
        if (had == mapping && !(value & FM_WRITABLE)) {
            goto out; /* a read keeps what a write learnt */
        }
    } else {
        /* an empty way, else one nobody holds, starting at a rotating way */
        for (unsigned i = 0; i < FM_WAYS && !slot; i++) {
            FmSlot *c = &w[(idx + i) % FM_WAYS];
            slot = c->key == 0 ? c : NULL;
        }
        for (unsigned i = 0; i < FM_WAYS && !slot; i++) {
            FmSlot *c = &w[(idx + i) % FM_WAYS];
            slot = (c->users == 0 && !(c->host & FM_DEAD)) ? c : NULL;
        }
        if (!slot) {
            goto out;
        }
    }
    slot->key = idx + 1;
    slot->host = value;
    slot->gen = gen;
    count(&fm->learnt);
out:
    pthread_mutex_unlock(&st->lock);
}

void qcow2_fastmap_learn_locked(Qcow2FastMap *fm, uint64_t guest, uint64_t host,
                                bool writable, uint32_t gen)
{
    g_assert((host & FM_FLAGS) == 0); /* cluster aligned (>= 512 bytes) */
    learn(fm, guest, host | (writable ? FM_WRITABLE : 0), gen);
}

void qcow2_fastmap_learn_zero_locked(Qcow2FastMap *fm, uint64_t guest)
{
    learn(fm, guest, FM_ZERO, 0); /* invariant 9 */
}

/* Drop one slot, waiting for its holders (invariant 2).  Stripe locked. */
static void forget_slot(Qcow2FastMap *fm, FmStripe *st, FmSlot *slot)
{
    if (slot->users) {
        slot->host |= FM_DEAD;
        count(&fm->waits);
        st->waiters++;
        while (slot->users) {
            plug_kick(); /* a holder's ring request may be held back: plug.h inv. 2 */
            pthread_cond_wait(&st->cond, &st->lock);
        }
        st->waiters--;
    }
    *slot = (FmSlot){0};
    count(&fm->forgotten);
}

void qcow2_fastmap_forget_locked(Qcow2FastMap *fm, uint64_t start, uint64_t end)
{
    uint64_t first = start >> fm->cluster_bits;
    uint64_t last = (end + (UINT64_C(1) << fm->cluster_bits) - 1) >> fm->cluster_bits;

    if (end <= start) {
        return;
    }
    if (last - first <= fm->nsets) {
        for (uint64_t idx = first; idx < last; idx++) {
            uint64_t set = set_of(fm, idx);
            FmStripe *st = stripe_of(fm, set);
            pthread_mutex_lock(&st->lock);
            FmSlot *slot = find(fm, set, idx + 1);
            if (slot) {
                forget_slot(fm, st, slot);
            }
            pthread_mutex_unlock(&st->lock);
        }
        return;
    }
    /* a big range (a snapshot operation, a large discard): every slot */
    for (uint64_t set = 0; set < fm->nsets; set++) {
        FmStripe *st = stripe_of(fm, set);
        pthread_mutex_lock(&st->lock);
        for (unsigned i = 0; i < FM_WAYS; i++) {
            FmSlot *slot = &fm->slots[set * FM_WAYS + i];
            if (slot->key && slot->key - 1 >= first && slot->key - 1 < last) {
                forget_slot(fm, st, slot);
            }
        }
        pthread_mutex_unlock(&st->lock);
    }
}

void qcow2_fastmap_meta_changed(Qcow2FastMap *fm)
{
    __atomic_add_fetch(&fm->meta_gen, 1, __ATOMIC_ACQ_REL);
}

uint32_t qcow2_fastmap_gen(const Qcow2FastMap *fm)
{
    return __atomic_load_n(&fm->meta_gen, __ATOMIC_ACQUIRE);
}

void qcow2_fastmap_set_writes_locked(Qcow2FastMap *fm, bool on)
{
    __atomic_store_n(&fm->writes_on, on ? 1 : 0, __ATOMIC_RELEASE);
}

void qcow2_fastmap_stats(const Qcow2FastMap *fm, Qcow2FastStats *st)
{
    st->hits = __atomic_load_n(&fm->hits, __ATOMIC_RELAXED);
    st->misses = __atomic_load_n(&fm->misses, __ATOMIC_RELAXED);
    st->learnt = __atomic_load_n(&fm->learnt, __ATOMIC_RELAXED);
    st->forgotten = __atomic_load_n(&fm->forgotten, __ATOMIC_RELAXED);
    st->waits = __atomic_load_n(&fm->waits, __ATOMIC_RELAXED);
}
