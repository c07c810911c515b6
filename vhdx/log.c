/*
 * vhdx/log.c: the VHDX metadata log -- finding and replaying the active
 * sequence when an image is opened, and writing metadata through the log.
 *
 * Owns: the log region's contents, the in-memory replay of a read-only
 * open (the overlay), and the order of a metadata update.
 *
 * Invariants (cited as "vhdx/log.c invariant N"):
 *  1. An entry is valid when its header is plausible (signature, a length
 *     of whole 4 KiB sectors within the log, a non-zero sequence number,
 *     the current header's log GUID, descriptors that fit), every
 *     descriptor and data sector carries its sequence number, the
 *     descriptors account for every sector, and the CRC-32C over the whole
 *     entry matches.  A sector carrying another sequence number is a torn
 *     write: the entry was never completed and is ignored.  An entry whose
 *     every sector is stamped but whose checksum is wrong is corruption, not
 *     a tear: the open is refused with an error naming it.
 *  2. The active sequence, as QEMU finds it: the valid entry with the
 *     highest sequence number (the newest of at most four candidates is
 *     tried, torn ones skipped) and the valid entries before it, each ending
 *     where the next begins with the previous sequence number.  The search
 *     reads every log sector once, then at most a bounded number more (no
 *     input makes it quadratic or unbounded).
 *  3. Replay applies the sequence's descriptors in order (a data sector is
 *     its 8 leading bytes from the descriptor, 4084 from the data sector,
 *     4 trailing from the descriptor; a zero descriptor zeros its length),
 *     refuses descriptors aimed at the headers or the log itself, and
 *     refuses a log whose entries expect a longer file than there is
 *     (FlushedFileOffset: the file was truncated).  On a read-write open
 *     it writes them, extends the file to LastFileOffset, makes that
 *     durable, then marks the log empty (a zero log GUID) durably -- the
 *     spec's order.  On a read-only open nothing is written: the overlay
 *     holds the replay (data sectors by their place in the log, zeroed
 *     ranges), bounded in size, and every read of the file goes through it
 *     (vhdx_file_read), so the image reads as it would after a replay.
 *  4. A read-write open of an image with a log GUID but no valid entry
 *     marks the log empty, so the next metadata update starts a fresh log.
 *  5. A metadata update (vhdx_log_commit) is made safe by the log: with the
 *     data it refers to already durable, (a) the entry -- every sector to
 *     change, a new log GUID, FlushedFileOffset and LastFileOffset the file
 *     size -- is written at the log's start and made durable, (b) the
 *     header naming that GUID is written and made durable, (c) the sectors
 *     are written in place and made durable, (d) the log is marked empty
 *     durably.  A power loss before (b) leaves the old metadata (the entry's
 *     GUID is not the header's); from (b) to (d) a replay redoes (c).
 *     Updates larger than the log are split into several such rounds.
 */
#include "vhdx/vhdx.h"

#include "block/crc32c.h"
#include "block/endian.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define SCAN_CHUNK (64 * VHDX_KIB)
#define HEAD_TRIES 4
#define OVERLAY_MAX_SECTORS (256u * 1024) /* 1 GiB of log data */
#define OVERLAY_MAX_ZEROS 65536u

typedef struct Cand {
    uint32_t pos;
    uint32_t len;
    uint64_t seq;
} Cand;

typedef enum { ENTRY_VALID, ENTRY_TORN, ENTRY_BADCRC } Verdict;

typedef struct Log {
    BlkNode *img;
    uint64_t offset; /* of the log in the file */
    uint32_t length;
    uint64_t budget; /* sectors the search may still read (invariant 2) */
    VhdxGuid guid;
} Log;

typedef struct OvlData {
    uint64_t order;
    uint64_t log_off; /* file offset of the data sector */
    uint64_t leading;
    uint32_t trailing;
} OvlData;

typedef struct OvlZero {
    uint64_t offset, length, order;
} OvlZero;

struct VhdxOverlay {
    GHashTable *data; /* uint64 file offset -> OvlData */
    GArray *zeros;    /* OvlZero */
    uint64_t order;
};

static uint64_t desc_sectors(uint64_t count)
{
    return (count + 2 + VHDX_DESC_PER_SECTOR - 1) / VHDX_DESC_PER_SECTOR;
}

static int read_sector(Log *lg, uint64_t pos, uint8_t *buf)
{
    if (lg->budget == 0) {
        return blk_error(EINVAL, "The VHDX log is too damaged to search");
    }
    lg->budget--;
    return blk_pread(lg->img->file, lg->offset + pos % lg->length, buf, VHDX_LOG_SECTOR);
}

/* Invariant 1, the cheap part (the candidate pass). */
static bool plausible(const Log *lg, const VhdxLogHeader *h)
{
    return h->signature == VHDX_SIG_LOGE && h->entry_length >= VHDX_LOG_SECTOR &&
           h->entry_length % VHDX_LOG_SECTOR == 0 && h->entry_length <= lg->length &&
           h->sequence != 0 && vhdx_guid_equal(&h->log_guid, &lg->guid) &&
           desc_sectors(h->desc_count) <= h->entry_length / VHDX_LOG_SECTOR;
}

static bool desc_ok(const VhdxLogDesc *d, uint64_t seq)
{
    if (d->sequence != seq || d->file_offset % VHDX_LOG_SECTOR) {
        return false;
    }
    return d->signature == VHDX_SIG_DESC ||
           (d->signature == VHDX_SIG_ZERO && d->leading % VHDX_LOG_SECTOR == 0);
}

static bool data_ok(const uint8_t *sec, uint64_t seq)
{
    uint64_t s = (uint64_t)load_le32(sec + VHDX_DS_SEQ_HIGH) << 32 |
                 load_le32(sec + VHDX_DS_SEQ_LOW);
    return load_le32(sec + VHDX_DS_SIGNATURE) == VHDX_SIG_DATA && s == seq;
}

/* Invariant 1, the whole entry at pos. */
static int validate(Log *lg, uint32_t pos, const VhdxLogHeader *h, Verdict *v)
{
    uint64_t total = h->entry_length / VHDX_LOG_SECTOR, ds = desc_sectors(h->desc_count);
    uint64_t ndata = 0, seen = 0;
    uint8_t sec[VHDX_LOG_SECTOR];
    bool stamped = true;
    uint32_t crc = 0;

    for (uint64_t k = 0; k < ds; k++) {
        int ret = read_sector(lg, pos + k * VHDX_LOG_SECTOR, sec);
        if (ret < 0) {
            return ret;
        }
        uint64_t first = k == 0 ? 2 : 0; /* the header takes two descriptor slots */
        if (k == 0) {
            store_le32(sec + VHDX_LE_CHECKSUM, 0);
        }
        crc = blk_crc32c(crc, sec, sizeof(sec));
        for (uint64_t j = first; j < VHDX_DESC_PER_SECTOR && seen < h->desc_count; j++) {
            VhdxLogDesc d;
            vhdx_log_desc_decode(sec + j * VHDX_LD_SIZE, &d);
            stamped &= desc_ok(&d, h->sequence);
            ndata += d.signature == VHDX_SIG_DESC;
            seen++;
        }
    }
    if (ds + ndata != total) {
        *v = ENTRY_TORN; /* the header does not describe this entry */
        return 0;
    }
    for (uint64_t k = ds; k < total; k++) {
        int ret = read_sector(lg, pos + k * VHDX_LOG_SECTOR, sec);
        if (ret < 0) {
            return ret;
        }
        stamped &= data_ok(sec, h->sequence);
        crc = blk_crc32c(crc, sec, sizeof(sec));
    }
    *v = !stamped ? ENTRY_TORN : crc != h->checksum ? ENTRY_BADCRC : ENTRY_VALID;
    return 0;
}

static gint cand_by_seq_desc(gconstpointer a, gconstpointer b)
{
    const Cand *x = a, *y = b;
    return x->seq > y->seq ? -1 : x->seq < y->seq;
}

static int bad_checksum(Log *lg, const Cand *c)
{
    return blk_error(EINVAL,
                     "VHDX log entry at log offset %" PRIu32 " (sequence %" PRIu64
                     ") is corrupt: checksum mismatch; the log cannot be replayed",
                     c->pos, c->seq);
}

/* Every plausible entry header in the log (invariant 2's single pass). */
static int scan(Log *lg, GArray *cands)
{
    g_autofree uint8_t *buf = g_malloc(SCAN_CHUNK);

    for (uint64_t base = 0; base < lg->length; base += SCAN_CHUNK) {
        size_t n = (size_t)MIN((uint64_t)SCAN_CHUNK, lg->length - base);
        int ret = blk_pread(lg->img->file, lg->offset + base, buf, n);
        if (ret < 0) {
            return blk_error_prefix(ret, "Could not read the VHDX log");
        }
        for (size_t off = 0; off < n; off += VHDX_LOG_SECTOR) {
            VhdxLogHeader h;
            vhdx_log_header_decode(buf + off, &h);
            if (plausible(lg, &h)) {
                Cand c = {(uint32_t)(base + off), h.entry_length, h.sequence};
                g_array_append_val(cands, c);
            }
        }
    }
    g_array_sort(cands, cand_by_seq_desc);
    return 0;
}

static int header_at(Log *lg, uint32_t pos, VhdxLogHeader *h)
{
    uint8_t sec[VHDX_LOG_SECTOR];
    int ret = read_sector(lg, pos, sec);

    if (ret == 0) {
        vhdx_log_header_decode(sec, h);
    }
    return ret;
}

/* Invariant 2: the active sequence into run (Cand, oldest first). */
static int find_run(Log *lg, GArray *cands, GArray *run)
{
    Cand head = {0};
    bool found = false;
    int ret;

    for (guint i = 0; i < cands->len && i < HEAD_TRIES && !found; i++) {
        Cand *c = &g_array_index(cands, Cand, i);
        VhdxLogHeader h;
        Verdict v;
        if ((ret = header_at(lg, c->pos, &h)) < 0 ||
            (ret = validate(lg, c->pos, &h, &v)) < 0) {
            return ret;
        }
        if (v == ENTRY_BADCRC) {
            return bad_checksum(lg, c);
        }
        if (v == ENTRY_VALID) {
            head = *c;
            found = true;
        }
    }
    if (!found) {
        return 0;
    }
    g_array_append_val(run, head);
    for (Cand cur = head;;) {
        bool prev = false;
        for (guint i = 0; i < cands->len; i++) {
            Cand *c = &g_array_index(cands, Cand, i);
            VhdxLogHeader h;
            Verdict v;
            if (c->seq != cur.seq - 1 ||
                ((uint64_t)c->pos + c->len) % lg->length != cur.pos) {
                continue;
            }
            if ((ret = header_at(lg, c->pos, &h)) < 0 ||
                (ret = validate(lg, c->pos, &h, &v)) < 0) {
                return ret;
            }
            if (v == ENTRY_BADCRC) {
                return bad_checksum(lg, c);
            }
            if (v == ENTRY_VALID) {
                g_array_prepend_val(run, *c);
                cur = *c;
                prev = true;
            }
            break;
        }
        if (!prev || run->len * (uint64_t)VHDX_LOG_SECTOR > lg->length) {
            break;
        }
    }
    return 0;
}

/* Invariant 3: may a replayed write land at [off, off + len)? */
static int check_target(Log *lg, uint64_t off, uint64_t len)
{
    uint64_t end;

    if (__builtin_add_overflow(off, len, &end) || end > INT64_MAX ||
        off < VHDX_REGION1_OFFSET ||
        (off < lg->offset + lg->length && end > lg->offset)) {
        return blk_error(EINVAL,
                         "VHDX log entry writes %" PRIu64 " bytes at offset %" PRIu64
                         ", over the headers or the log; the log is corrupt",
                         len, off);
    }
    return 0;
}

static void ovl_add_data(VhdxOverlay *o, uint64_t off, uint64_t log_off,
                         const VhdxLogDesc *d)
{
    OvlData *x = g_new(OvlData, 1);
    uint64_t *key = g_new(uint64_t, 1);

    *key = off;
    x->order = o->order++;
    x->log_off = log_off;
    x->leading = d->leading;
    x->trailing = d->trailing;
    g_hash_table_replace(o->data, key, x);
}

/* One entry of the run, applied to the file (rw) or the overlay (ro). */
static int replay_entry(Log *lg, const Cand *c, VhdxOverlay *o)
{
    BlkNode *img = lg->img;
    VhdxLogHeader h;
    uint8_t dsec[VHDX_LOG_SECTOR], data[VHDX_LOG_SECTOR], out[VHDX_LOG_SECTOR];
    uint64_t ds, k_data, flen = (uint64_t)blk_getlength(img->file);
    int ret = header_at(lg, c->pos, &h);

    if (ret < 0) {
        return ret;
    }
    if (h.flushed_offset > flen) {
        return blk_error(EINVAL,
                         "The VHDX log expects the file to hold %" PRIu64
                         " bytes, but it has %" PRIu64 ": the image was truncated",
                         h.flushed_offset, flen);
    }
    ds = desc_sectors(h.desc_count);
    k_data = ds;
    for (uint64_t i = 0; i < h.desc_count; i++) {
        uint64_t slot = i + 2, k = slot / VHDX_DESC_PER_SECTOR;
        VhdxLogDesc d;
        if (i == 0 || slot % VHDX_DESC_PER_SECTOR == 0) {
            if ((ret = read_sector(lg, c->pos + k * VHDX_LOG_SECTOR, dsec)) < 0) {
                return ret;
            }
        }
        vhdx_log_desc_decode(dsec + (slot % VHDX_DESC_PER_SECTOR) * VHDX_LD_SIZE, &d);
        uint64_t len = d.signature == VHDX_SIG_ZERO ? d.leading : VHDX_LOG_SECTOR;
        if ((ret = check_target(lg, d.file_offset, len)) < 0) {
            return ret;
        }
        if (d.signature == VHDX_SIG_ZERO) {
            if (o) {
                if (o->zeros->len >= OVERLAY_MAX_ZEROS) {
                    goto too_big;
                }
                OvlZero z = {d.file_offset, len, o->order++};
                g_array_append_val(o->zeros, z);
            } else if (len &&
                       (ret = blk_pwrite_zeroes(img->file, d.file_offset, len, 0)) < 0) {
                return ret;
            }
            continue;
        }
        uint64_t log_pos = c->pos + k_data++ * VHDX_LOG_SECTOR;
        if (o) {
            if (g_hash_table_size(o->data) >= OVERLAY_MAX_SECTORS) {
                goto too_big;
            }
            ovl_add_data(o, d.file_offset, lg->offset + log_pos % lg->length, &d);
            continue;
        }
        if ((ret = read_sector(lg, log_pos, data)) < 0) {
            return ret;
        }
        store_le64(out, d.leading);
        memcpy(out + 8, data + VHDX_DS_DATA, VHDX_DS_SEQ_LOW - VHDX_DS_DATA);
        store_le32(out + VHDX_DS_SEQ_LOW, d.trailing);
        if ((ret = blk_pwrite(img->file, d.file_offset, out, sizeof(out), 0)) < 0) {
            return ret;
        }
    }
    if (!o && (uint64_t)blk_getlength(img->file) < h.last_offset) {
        ret = blk_truncate(img->file, ROUND_UP(h.last_offset, VHDX_MIB), false,
                           BLK_PREALLOC_OFF, false);
    }
    return ret;

too_big:
    return blk_error(EFBIG,
                     "The VHDX log is too large to replay in memory on a read-only "
                     "open; open the image read-write to replay it");
}

void vhdx_overlay_free(VhdxOverlay *o)
{
    if (o) {
        g_hash_table_destroy(o->data);
        g_array_unref(o->zeros);
        g_free(o);
    }
}

static VhdxOverlay *overlay_new(void)
{
    VhdxOverlay *o = g_new0(VhdxOverlay, 1);
    o->data = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
    o->zeros = g_array_new(FALSE, FALSE, sizeof(OvlZero));
    return o;
}

int vhdx_log_open(BlkNode *img)
{
    VhdxState *s = img->opaque;
    const VhdxHeader *h = &s->hdr[s->cur];
    g_autoptr(GArray) cands = g_array_new(FALSE, FALSE, sizeof(Cand));
    g_autoptr(GArray) run = g_array_new(FALSE, FALSE, sizeof(Cand));
    Log lg = {.img = img, .offset = h->log_offset, .length = h->log_length};
    VhdxOverlay *o = NULL;
    int ret;

    s->log_seq = 1;
    if (h->log_version != 0) {
        return blk_error(ENOTSUP, "VHDX log version %u is not supported", h->log_version);
    }
    if (h->log_offset < VHDX_MIB || h->log_offset % VHDX_MIB ||
        h->log_offset > (uint64_t)INT64_MAX - h->log_length) {
        return blk_error(EINVAL, "VHDX log offset %" PRIu64 " is invalid", h->log_offset);
    }
    if (vhdx_guid_is_zero(&h->log_guid) || h->log_length == 0) {
        return 0; /* no log to replay */
    }
    if (h->log_length % VHDX_MIB) {
        return blk_error(EINVAL, "VHDX log length %" PRIu32 " is not a multiple of 1 MiB",
                         h->log_length);
    }
    lg.guid = h->log_guid;
    lg.budget = (uint64_t)HEAD_TRIES * 2 * (h->log_length / VHDX_LOG_SECTOR) + 64;
    if ((ret = scan(&lg, cands)) < 0 || (ret = find_run(&lg, cands, run)) < 0) {
        return ret;
    }
    if (run->len == 0) {
        return img->read_only ? 0
                              : vhdx_update_header(img, &(VhdxGuid){{0}}); /* inv. 4 */
    }
    s->log_seq = g_array_index(run, Cand, run->len - 1).seq + 1;
    if (img->read_only) {
        o = overlay_new();
    }
    lg.budget = UINT64_MAX; /* the run was validated: its length is bounded */
    for (guint i = 0; i < run->len; i++) {
        ret = replay_entry(&lg, &g_array_index(run, Cand, i), o);
        if (ret < 0) {
            vhdx_overlay_free(o);
            return blk_error_prefix(ret, "Could not replay the VHDX log");
        }
    }
    if (o) {
        s->overlay = o;
        return 0;
    }
    ret = blk_flush(img->file); /* invariant 3: the replay, then the empty log */
    if (ret == 0) {
        ret = vhdx_update_header(img, &(VhdxGuid){{0}});
    }
    s->replayed = ret == 0;
    return ret;
}

int vhdx_overlay_patch(BlkNode *img, uint64_t offset, uint8_t *buf, size_t len)
{
    VhdxState *s = img->opaque;
    VhdxOverlay *o = s->overlay;
    uint8_t sec[VHDX_LOG_SECTOR];

    for (uint64_t sp = ROUND_DOWN(offset, VHDX_LOG_SECTOR); sp < offset + len;
         sp += VHDX_LOG_SECTOR) {
        OvlData *d = g_hash_table_lookup(o->data, &sp);
        const OvlZero *z = NULL;
        for (guint i = 0; i < o->zeros->len; i++) {
            const OvlZero *c = &g_array_index(o->zeros, OvlZero, i);
            if (sp >= c->offset && sp - c->offset < c->length &&
                (!z || c->order > z->order)) {
                z = c;
            }
        }
        if (!d && !z) {
            continue;
        }
        if (d && (!z || d->order > z->order)) {
            int ret = blk_pread(img->file, d->log_off, sec, sizeof(sec));
            if (ret < 0) {
                return ret;
            }
            store_le64(sec, d->leading);
            store_le32(sec + VHDX_DS_SEQ_LOW, d->trailing);
        } else {
            memset(sec, 0, sizeof(sec));
        }
        uint64_t from = MAX(sp, offset), to = MIN(sp + VHDX_LOG_SECTOR, offset + len);
        memcpy(buf + (from - offset), sec + (from - sp), to - from);
    }
    return 0;
}

/* Invariant 5: one round for n sectors that fit in the log. */
static int commit_round(BlkNode *img, const uint64_t *offs, uint8_t *const *pages,
                        size_t n)
{
    VhdxState *s = img->opaque;
    const VhdxHeader *cur = &s->hdr[s->cur];
    uint64_t ds = desc_sectors(n), total = ds + n;
    g_autofree uint8_t *e = g_malloc0(total * VHDX_LOG_SECTOR);
    VhdxLogHeader h = {0};
    VhdxGuid guid;
    int ret;

    vhdx_guid_random(&guid);
    h.signature = VHDX_SIG_LOGE;
    h.entry_length = (uint32_t)(total * VHDX_LOG_SECTOR);
    h.tail = 0;
    h.sequence = s->log_seq++;
    h.desc_count = (uint32_t)n;
    h.log_guid = guid;
    h.flushed_offset = h.last_offset = (uint64_t)blk_getlength(img->file);
    for (size_t i = 0; i < n; i++) {
        VhdxLogDesc d = {.signature = VHDX_SIG_DESC,
                         .trailing = load_le32(pages[i] + VHDX_DS_SEQ_LOW),
                         .leading = load_le64(pages[i]),
                         .file_offset = offs[i],
                         .sequence = h.sequence};
        uint8_t *sec = e + (ds + i) * VHDX_LOG_SECTOR;
        vhdx_log_desc_encode(&d, e + (i + 2) * VHDX_LD_SIZE);
        store_le32(sec + VHDX_DS_SIGNATURE, VHDX_SIG_DATA);
        store_le32(sec + VHDX_DS_SEQ_HIGH, (uint32_t)(h.sequence >> 32));
        memcpy(sec + VHDX_DS_DATA, pages[i] + VHDX_DS_DATA,
               VHDX_DS_SEQ_LOW - VHDX_DS_DATA);
        store_le32(sec + VHDX_DS_SEQ_LOW, (uint32_t)h.sequence);
    }
    vhdx_log_header_encode(&h, e);
    store_le32(e + VHDX_LE_CHECKSUM,
               vhdx_checksum(e, total * VHDX_LOG_SECTOR, VHDX_LE_CHECKSUM));
    /* (a) */
    ret = blk_pwrite(img->file, cur->log_offset, e, total * VHDX_LOG_SECTOR, 0);
    if (ret == 0) {
        ret = blk_flush(img->file);
    }
    /* (b) */
    if (ret == 0) {
        ret = vhdx_update_header(img, &guid);
    }
    /* (c) */
    for (size_t i = 0; i < n && ret == 0; i++) {
        ret = blk_pwrite(img->file, offs[i], pages[i], VHDX_LOG_SECTOR, 0);
    }
    if (ret == 0) {
        ret = blk_flush(img->file);
    }
    /* (d) */
    if (ret == 0) {
        ret = vhdx_update_header(img, &(VhdxGuid){{0}});
    }
    return ret;
}

int vhdx_log_commit(BlkNode *img, const uint64_t *offs, uint8_t *const *pages, size_t n)
{
    VhdxState *s = img->opaque;
    uint64_t sectors = s->hdr[s->cur].log_length / VHDX_LOG_SECTOR, cap = 0;

    while (cap + 1 + desc_sectors(cap + 1) <= sectors) {
        cap++;
    }
    if (cap == 0) {
        return blk_error(ENOTSUP, "The VHDX image has no log large enough to update its "
                                  "metadata safely");
    }
    for (size_t done = 0; done < n;) {
        size_t m = (size_t)MIN((uint64_t)(n - done), cap);
        int ret = commit_round(img, offs + done, pages + done, m);
        if (ret < 0) {
            return ret;
        }
        done += m;
    }
    return 0;
}
