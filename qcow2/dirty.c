/*
 * qcow2/dirty.c: the bits of the persistent dirty bitmaps an open image
 * maintains, in memory (the spec's "Bitmap data"; QEMU's HBitmap).
 *
 * Owns: the bits between the load at the first write and the store at
 * close (bitmap-store.c), and the lock-free setting of bits by requests.
 * Which bitmaps are maintained, and when they reach the disk, is
 * bitmap-store.c's.
 *
 * Invariants (cited as "dirty.c invariant N"):
 *  1. A Qcow2DirtySet never changes shape once published in s->dirty: a
 *     request that read the pointer may set bits in it at any later time,
 *     so a set is replaced (the old one retired, freed at close), never
 *     edited or freed while the image is open.
 *  2. Bits are set with atomic read-modify-writes of single bytes (bit n
 *     is bit n % 8 of byte n / 8: the on-disk order, on any host) and
 *     chunks are allocated with a compare-and-swap, so requests on any
 *     thread set bits without a lock; a set bit is never cleared while the
 *     bits are published.
 *  3. The range set is every granule [offset, offset + bytes) touches,
 *     clipped to the disk: bits past the disk's end stay zero (the spec's
 *     unused tail bits), also after a load (a data cluster's tail is
 *     masked off).
 *  4. Memory is bounded by the bitmap table (<= 2^27 chunks, <= 512 MiB
 *     of clusters, bitmap-codec.c invariant 3) and grows only with the
 *     chunks that hold a set bit; a chunk the disk says is all ones
 *     (table entry 1) is loaded as such.
 */
#include "qcow2/dirty.h"

#include <errno.h>
#include <string.h>

#include "qcow2/format.h"

Qcow2DirtyBits *qcow2_dirty_bits_new(uint64_t disk_size, uint8_t granularity_bits,
                                     uint32_t cluster_bits, uint32_t nchunks)
{
    Qcow2DirtyBits *b = g_new0(Qcow2DirtyBits, 1);
    uint64_t g = UINT64_C(1) << granularity_bits;

    b->disk_size = disk_size;
    b->granularity_bits = granularity_bits;
    b->cluster_bits = cluster_bits;
    b->nbits = disk_size / g + (disk_size % g != 0);
    b->nchunks = nchunks;
    b->chunks = g_new0(uint8_t *, nchunks ? nchunks : 1);
    return b;
}

void qcow2_dirty_bits_free(Qcow2DirtyBits *b)
{
    if (!b) {
        return;
    }
    for (uint32_t i = 0; i < b->nchunks; i++) {
        g_free(b->chunks[i]);
    }
    g_free(b->chunks);
    g_free(b);
}

static uint64_t chunk_bytes(const Qcow2DirtyBits *b)
{
    return UINT64_C(1) << b->cluster_bits;
}

/* Invariant 3: the bytes and bits of chunk i that lie past nbits cleared. */
static void mask_tail(const Qcow2DirtyBits *b, uint32_t i, uint8_t *c)
{
    uint64_t first = (uint64_t)i * chunk_bytes(b) * 8, used;

    if (first + chunk_bytes(b) * 8 <= b->nbits) {
        return;
    }
    used = b->nbits > first ? b->nbits - first : 0;
    if (used % 8) {
        c[used / 8] &= (uint8_t)((1u << (used % 8)) - 1);
        used += 8 - used % 8;
    }
    memset(c + used / 8, 0, chunk_bytes(b) - used / 8);
}

int qcow2_dirty_bits_load(Qcow2DirtyBits *b, BlkNode *file, const uint64_t *table)
{
    for (uint32_t i = 0; i < b->nchunks; i++) {
        uint64_t off = table[i] & QCOW2_BTE_OFFSET_MASK;
        uint8_t *c;
        int ret;

        if (!off && !(table[i] & 1)) {
            continue; /* all zeros */
        }
        c = g_malloc(chunk_bytes(b));
        if (!off) {
            memset(c, 0xff, chunk_bytes(b)); /* invariant 4 */
        } else {
            ret = blk_pread(file, off, c, chunk_bytes(b));
            if (ret < 0) {
                g_free(c);
                return ret;
            }
        }
        mask_tail(b, i, c);
        b->chunks[i] = c;
    }
    return 0;
}

/* Chunk i, allocated (zeroed) if it was not (invariant 2). */
static uint8_t *chunk_get(Qcow2DirtyBits *b, uint32_t i)
{
    uint8_t *c = __atomic_load_n(&b->chunks[i], __ATOMIC_ACQUIRE), *fresh;

    if (c) {
        return c;
    }
    fresh = g_malloc0(chunk_bytes(b));
    if (__atomic_compare_exchange_n(&b->chunks[i], &c, fresh, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        return fresh;
    }
    g_free(fresh);
    return c;
}

void qcow2_dirty_bits_set(Qcow2DirtyBits *b, uint64_t offset, uint64_t bytes)
{
    uint64_t per_chunk = chunk_bytes(b) * 8, first, last, end;
    bool changed = false;

    /* invariant 3 */
    if (bytes == 0 || offset >= b->disk_size) {
        return;
    }
    end = bytes > b->disk_size - offset ? b->disk_size : offset + bytes;
    first = offset >> b->granularity_bits;
    last = (end - 1) >> b->granularity_bits;
    for (uint64_t n = first; n <= last;) {
        uint32_t ci = (uint32_t)(n / per_chunk);
        uint8_t *c;

        if (ci >= b->nchunks) {
            break; /* a table too small for the disk: never loaded */
        }
        c = chunk_get(b, ci);
        for (; n <= last && n / per_chunk == ci; n++) {
            uint64_t bit = n % per_chunk;
            uint8_t mask = (uint8_t)(1u << (bit % 8)), old;

            if (bit % 8 == 0 && last - n >= 7) {
                mask = 0xff; /* a whole byte */
            }
            old = __atomic_fetch_or(&c[bit / 8], mask, __ATOMIC_SEQ_CST);
            changed |= (old | mask) != old;
            if (mask == 0xff) {
                n += 7;
            }
        }
    }
    if (changed && !__atomic_load_n(&b->changed, __ATOMIC_RELAXED)) {
        __atomic_store_n(&b->changed, 1, __ATOMIC_SEQ_CST);
    }
}

const uint8_t *qcow2_dirty_bits_chunk(const Qcow2DirtyBits *b, uint32_t i)
{
    const uint8_t *c = __atomic_load_n(&b->chunks[i], __ATOMIC_ACQUIRE);

    if (!c) {
        return NULL;
    }
    for (uint64_t j = 0; j < chunk_bytes(b); j++) {
        if (__atomic_load_n(&c[j], __ATOMIC_RELAXED)) {
            return c;
        }
    }
    return NULL;
}

bool qcow2_dirty_bits_copy_chunk(const Qcow2DirtyBits *b, uint32_t i, uint8_t *buf)
{
    const uint8_t *c = __atomic_load_n(&b->chunks[i], __ATOMIC_ACQUIRE);
    uint8_t any = 0;

    if (!c) {
        return false;
    }
    for (uint64_t j = 0; j < chunk_bytes(b); j++) {
        buf[j] = __atomic_load_n(&c[j], __ATOMIC_RELAXED);
        any |= buf[j];
    }
    return any != 0;
}

static void add_range(GArray *out, uint64_t offset, uint64_t end)
{
    BlkRange *last = out->len ? &g_array_index(out, BlkRange, out->len - 1) : NULL;

    if (last && last->offset + last->length == offset) {
        last->length = end - last->offset;
    } else {
        BlkRange r = {.offset = offset, .length = end - offset};
        g_array_append_val(out, r);
    }
}

void qcow2_dirty_bits_extents(const Qcow2DirtyBits *b, GArray *out)
{
    uint64_t per_chunk = chunk_bytes(b) * 8, g = UINT64_C(1) << b->granularity_bits;

    for (uint32_t ci = 0; ci < b->nchunks; ci++) {
        const uint8_t *c = qcow2_dirty_bits_chunk(b, ci);
        uint64_t base = (uint64_t)ci * per_chunk;

        for (uint64_t bit = 0; c && bit < per_chunk && base + bit < b->nbits; bit++) {
            uint8_t byte = __atomic_load_n(&c[bit / 8], __ATOMIC_RELAXED);
            uint64_t start;

            if (bit % 8 == 0 && byte == 0) {
                bit += 7;
                continue;
            }
            if (!(byte & (1u << (bit % 8)))) {
                continue;
            }
            start = (base + bit) * g;
            add_range(out, start, MIN(start + g, b->disk_size));
        }
    }
}

void qcow2_dirty_set_free(Qcow2DirtySet *d)
{
    if (!d) {
        return;
    }
    for (uint32_t i = 0; i < d->n; i++) {
        g_free(d->names[i]);
        qcow2_dirty_bits_free(d->bits[i]);
    }
    for (uint32_t i = 0; i < d->nheld; i++) {
        g_free(d->held[i]);
    }
    g_free(d->names);
    g_free(d->bits);
    g_free(d->held);
    g_free(d);
}

int qcow2_dirty_set_find(const Qcow2DirtySet *d, const char *name)
{
    for (uint32_t i = 0; d && i < d->n; i++) {
        if (strcmp(d->names[i], name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

void qcow2_dirty_set_note(Qcow2DirtySet *d, uint64_t offset, uint64_t bytes)
{
    for (uint32_t i = 0; i < d->n; i++) {
        qcow2_dirty_bits_set(d->bits[i], offset, bytes);
    }
}
