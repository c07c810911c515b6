/*
 * luks/luks.c: the luks format driver -- QEMU's "luks" image format and
 * cryptsetup's LUKS1 volume: the LUKS header and key material, then the
 * encrypted payload, in one file.
 *
 * Owns: presenting the payload of a LUKS file as a virtual disk (guest
 * offset X is file offset payload + X, encrypted with the IVs of guest
 * sector X / 512, as cryptsetup numbers them), making partial-sector
 * writes whole, creating, resizing and describing such files.  The header,
 * key slots and ciphers are crypto/'s.
 *
 * Invariants (cited as "luks/luks.c invariant N"):
 *  1. Guest data reaches the file only through crypto/block.c: reads
 *     decrypt, writes encrypt; no byte of the payload is read or written
 *     in the clear, and an image opened for its metadata only (info: read
 *     only, no_io) has no key and refuses every transfer.
 *  2. Writes that do not cover whole 512-byte sectors read, decrypt and
 *     merge the partial sectors at their ends (read-modify-write) under
 *     the writer side of the state's rwlock; whole-sector writes hold its
 *     reader side, so they run in parallel with each other and never
 *     interleave with a read-modify-write.
 *  3. The virtual size is the file size less the payload offset, rounded
 *     up to 512 bytes (QEMU's sectors); a file shorter than its payload
 *     offset is QEMU's "Could not refresh total sector count".
 *  4. As QEMU's luks driver: block status says data everywhere and no
 *     host offsets (the file holds ciphertext), zeroing writes encrypted
 *     zeros (a zeroed file reads as garbage: -ENOTSUP with NO_FALLBACK),
 *     discard is ignored, a new image does not read as zeros.
 *  5. A new image is QEMU's: header and slot 0 (crypto/luks.c), the file
 *     the header area plus the size, holes elsewhere; the options and their
 *     checks are crypto/luks-options.c's with no prefix; a failed create
 *     leaves no file.
 *  6. amend changes key slots (crypto/luks.c invariant 7) under the
 *     writer side of the rwlock.
 */
#include "luks/luks.h"

#include "block/endian.h"
#include "crypto/block.h"
#include "crypto/luks.h"
#include "crypto/secmem.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

typedef struct LuksState {
    CryptoLuksHeader hdr;
    CryptoBlock *crypto; /* NULL: opened for the metadata only (invariant 1) */
    uint64_t payload;    /* bytes */
    uint32_t max_iterations;
    GRWLock lock; /* invariant 2 */
} LuksState;

static int luks_probe(const uint8_t *buf, size_t len, const char *filename)
{
    static const uint8_t magic[CRYPTO_LUKS_MAGIC_LEN] = {'L', 'U', 'K', 'S', 0xba, 0xbe};

    /* QEMU's: the magic and version 1 */
    return len >= CRYPTO_LUKS_OFF_CIPHER_NAME && memcmp(buf, magic, sizeof(magic)) == 0 &&
                   load_be16(buf + CRYPTO_LUKS_OFF_VERSION) == 1
               ? 100
               : 0;
}

/* ---- the header area: offsets from the start of the file ---- */

static int area_read(void *opaque, uint64_t off, void *buf, size_t len)
{
    BlkNode *img = opaque;

    return blk_pread(img->file, off, buf, len); /* zeros past the end */
}

static int area_write(void *opaque, uint64_t off, const void *buf, size_t len)
{
    BlkNode *img = opaque;

    return blk_pwrite(img->file, off, buf, len, 0);
}

static int area_flush(void *opaque)
{
    BlkNode *img = opaque;

    return blk_flush(img->file);
}

static CryptoLuksIO area_io(BlkNode *img)
{
    return (CryptoLuksIO){
        .read = area_read, .write = area_write, .flush = area_flush, .opaque = img};
}

/* ---- open, close ---- */

static void state_free(LuksState *l)
{
    if (l) {
        crypto_block_free(l->crypto);
        g_rw_lock_clear(&l->lock);
        crypto_wipe(&l->hdr, sizeof(l->hdr));
        g_free(l);
    }
}

static int refresh_size(BlkNode *img, const LuksState *l)
{
    if (img->file->size < l->payload) { /* invariant 3 */
        return blk_error(EIO, "Could not refresh total sector count: %s",
                         g_strerror(EIO));
    }
    img->size = ROUND_UP(img->file->size - l->payload, 512);
    return 0;
}

static int unlock(BlkNode *img, LuksState *l, const BlkOpenOptions *opts)
{
    const CryptoSecrets secrets = {.table = opts->secrets, .values = opts->secret_values};
    CryptoLuksIO io = area_io(img);
    uint8_t *pw = NULL, *mk = NULL;
    size_t len = 0;
    int ret;

    if (!opts->key_secret) {
        return blk_error(EINVAL, "Parameter 'key-secret' is required for cipher");
    }
    ret = crypto_secret_passphrase(&secrets, opts->key_secret, &pw, &len);
    if (ret == 0) {
        ret = crypto_luks_supported(&l->hdr);
    }
    if (ret == 0) {
        ret = crypto_luks_unlock(&l->hdr, &io, pw, len, l->max_iterations, &mk);
    }
    if (ret == 0) {
        l->crypto = crypto_block_new(&l->hdr.spec, mk, l->hdr.key_bytes);
        ret = l->crypto ? 0 : -EINVAL;
    }
    crypto_secure_free(mk);
    crypto_secure_free(pw);
    return ret;
}

static int luks_open(BlkNode *img, const char *filename, const BlkOpenOptions *opts)
{
    uint8_t buf[CRYPTO_LUKS_HEADER_SIZE];
    LuksState *l;
    int ret;

    if (opts->snapshot) {
        return blk_error(ENOTSUP,
                         "Failed to load snapshot: Block format 'luks' used by device '' "
                         "does not support temporarily loading internal snapshots");
    }
    if (!opts->key_secret && !(opts->no_io && img->read_only)) {
        /* before the header is read, as QEMU's */
        return blk_error(EINVAL, "Parameter 'key-secret' is required for cipher");
    }
    l = g_new0(LuksState, 1);
    g_rw_lock_init(&l->lock);
    l->max_iterations = opts->luks_max_iterations ? opts->luks_max_iterations
                                                  : CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS;
    ret = blk_pread(img->file, 0, buf, sizeof(buf));
    if (ret == 0) {
        ret = crypto_luks_decode(buf, sizeof(buf), &l->hdr);
    }
    l->payload = crypto_luks_area_len(&l->hdr);
    /* invariant 1: qemu-img info's open needs no key */
    if (ret == 0 && !(opts->no_io && img->read_only)) {
        ret = unlock(img, l, opts);
    }
    if (ret == 0) {
        ret = refresh_size(img, l);
    }
    if (ret < 0) {
        state_free(l);
        return ret;
    }
    img->opaque = l;
    img->request_alignment = 1;
    return 0;
}

static void luks_close(BlkNode *img)
{
    state_free(img->opaque);
    img->opaque = NULL;
}

/* ---- guest data (invariants 1, 2) ---- */

static int no_key(BlkNode *img)
{
    return blk_error(EACCES,
                     "'%s' is encrypted and was opened without its key (metadata only)",
                     img->filename);
}

static int luks_preadv(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    LuksState *l = img->opaque;

    if (!l->crypto) {
        return no_key(img);
    }
    return crypto_block_preadv(l->crypto, img->file, l->payload + offset, offset, qiov);
}

/* The partial sector at guest sector start ss, with qiov's bytes
 * [done, done + n) laid over its bytes [skip, skip + n).  Writer lock. */
static int rmw_sector(BlkNode *img, LuksState *l, uint64_t ss, size_t skip,
                      const BlkIOV *qiov, size_t done, size_t n, unsigned flags)
{
    uint8_t sector[CRYPTO_SECTOR_SIZE];
    BlkIOV q;
    int ret;

    iov_init_buf(&q, sector, sizeof(sector));
    ret = crypto_block_preadv(l->crypto, img->file, l->payload + ss, ss, &q);
    if (ret == 0) {
        iov_to_buf(qiov, done, sector + skip, n);
        ret = crypto_block_pwritev(l->crypto, img->file, l->payload + ss, ss, &q, flags);
    }
    crypto_wipe(sector, sizeof(sector));
    return ret;
}

static int luks_pwritev(BlkNode *img, uint64_t offset, const BlkIOV *qiov, unsigned flags)
{
    const uint64_t ss = CRYPTO_SECTOR_SIZE;
    LuksState *l = img->opaque;
    uint64_t end = offset + qiov->size;
    size_t done = 0;
    int ret = 0;

    if (!l->crypto) {
        return no_key(img);
    }
    if (offset % ss == 0 && qiov->size % ss == 0) {
        g_rw_lock_reader_lock(&l->lock);
        ret = crypto_block_pwritev(l->crypto, img->file, l->payload + offset, offset,
                                   qiov, flags);
        g_rw_lock_reader_unlock(&l->lock);
        return ret;
    }
    g_rw_lock_writer_lock(&l->lock); /* invariant 2 */
    if (offset % ss) {               /* the head sector */
        size_t n = (size_t)MIN(end, ROUND_UP(offset, ss)) - offset;
        ret = rmw_sector(img, l, ROUND_DOWN(offset, ss), offset % ss, qiov, 0, n, flags);
        done = n;
    }
    uint64_t mid_end = ROUND_DOWN(end, ss);
    if (ret == 0 && offset + done < mid_end) { /* whole sectors */
        BlkIOV mid;
        iov_slice(&mid, qiov, done, (size_t)(mid_end - offset - done));
        ret = crypto_block_pwritev(l->crypto, img->file, l->payload + offset + done,
                                   offset + done, &mid, flags);
        done += mid.size;
        iov_destroy(&mid);
    }
    if (ret == 0 && done < qiov->size) { /* the tail sector */
        ret = rmw_sector(img, l, offset + done, 0, qiov, done, qiov->size - done, flags);
    }
    g_rw_lock_writer_unlock(&l->lock);
    return ret;
}

static int luks_pwrite_zeroes(BlkNode *img, uint64_t offset, uint64_t bytes,
                              unsigned flags)
{
    size_t chunk = (size_t)MIN(bytes, (uint64_t)1 << 20);
    g_autofree uint8_t *zero = NULL;
    uint64_t done = 0;
    int ret = 0;

    if (flags & BLK_REQ_NO_FALLBACK) {
        return -ENOTSUP; /* invariant 4 */
    }
    zero = g_malloc0(MAX(chunk, 1u));
    while (done < bytes && ret == 0) {
        size_t n = (size_t)MIN((uint64_t)chunk, bytes - done);
        BlkIOV q;
        iov_init_buf(&q, zero, n);
        ret = luks_pwritev(img, offset + done, &q, flags & BLK_REQ_FUA);
        done += n;
    }
    return ret;
}

static int luks_flush(BlkNode *img)
{
    return blk_flush(img->file);
}

static int luks_block_status(BlkNode *img, uint64_t offset, uint64_t bytes, BlkStatus *st)
{
    memset(st, 0, sizeof(*st)); /* invariant 4 */
    st->pnum = bytes;
    st->flags = BLK_STATUS_DATA | BLK_STATUS_ALLOCATED;
    return 0;
}

static int luks_truncate(BlkNode *img, uint64_t size, bool exact, BlkPrealloc prealloc,
                         bool shrink)
{
    LuksState *l = img->opaque;
    uint64_t want;
    int ret;

    if (__builtin_add_overflow(size, l->payload, &want) || want > INT64_MAX) {
        return blk_error(EFBIG, "Image size too large");
    }
    ret = blk_truncate(img->file, want, exact, prealloc, shrink);
    if (refresh_size(img, l) < 0 && ret == 0) {
        ret = -EIO;
    }
    return ret;
}

static int64_t luks_get_allocated_size(BlkNode *img)
{
    return blk_get_allocated_size(img->file);
}

static bool luks_has_zero_init(BlkNode *img)
{
    return false; /* invariant 4 */
}

static int luks_get_info(BlkNode *img, BlkInfo *info)
{
    LuksState *l = img->opaque;

    info->encrypted = true;
    crypto_luks_info(&l->hdr, &info->encrypt);
    return 0;
}

/* ---- create (invariant 5) ---- */

static const char *const create_options[] = {
    "size",           "key-secret", "cipher-alg", "cipher-mode",   "ivgen-alg",
    "ivgen-hash-alg", "hash-alg",   "iter-time",  "preallocation",
};

static int create_params(const BlkCreateOptions *opts, CryptoLuksParams *p,
                         BlkPrealloc *prealloc, const char **secret)
{
    GHashTableIter it;
    gpointer k, v;
    int ret;

    *prealloc = BLK_PREALLOC_OFF;
    *secret = NULL;
    if (opts->backing_file) {
        return blk_error(ENOTSUP, "Backing file not supported for file format 'luks'");
    }
    if (opts->options) {
        g_hash_table_iter_init(&it, opts->options);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            bool known = false;
            for (size_t i = 0; i < G_N_ELEMENTS(create_options); i++) {
                known = known || strcmp(k, create_options[i]) == 0;
            }
            if (!known) {
                return blk_error(EINVAL, "Invalid parameter '%s'", (const char *)k);
            }
        }
        const char *pa = g_hash_table_lookup(opts->options, "preallocation");
        if (pa && (blk_prealloc_parse(pa, prealloc) < 0 ||
                   *prealloc == BLK_PREALLOC_METADATA)) {
            blk_error_clear();
            return blk_error(EINVAL,
                             "Parameter 'preallocation' does not accept value '%s'", pa);
        }
        *secret = g_hash_table_lookup(opts->options, "key-secret");
    }
    ret = crypto_luks_params_parse(opts->options, "", p);
    if (ret < 0) {
        return ret;
    }
    if (!*secret) {
        return blk_error(EINVAL, "Parameter 'key-secret' is required for cipher");
    }
    return 0;
}

static int luks_create(const char *filename, const BlkCreateOptions *opts)
{
    const CryptoSecrets secrets = {.table = opts->secrets, .values = opts->secret_values};
    uint32_t max = opts->luks_max_iterations ? opts->luks_max_iterations
                                             : CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS;
    const char *path = blk_plain_name(filename), *secret;
    BlkOpenOptions fo = {.cache = BLK_CACHE_WRITEBACK};
    BlkNode node = {0};
    CryptoLuksHeader h;
    CryptoLuksParams p;
    BlkPrealloc prealloc;
    uint8_t *pw = NULL, *mk = NULL;
    size_t len = 0;
    bool created = false;
    int ret;

    ret = create_params(opts, &p, &prealloc, &secret);
    if (ret == 0) {
        ret = crypto_secret_passphrase(&secrets, secret, &pw, &len);
    }
    if (ret == 0) {
        ret = crypto_luks_format(&p, max, &h, &mk);
    }
    if (ret == 0) {
        uint64_t size = crypto_luks_area_len(&h) + opts->size;
        ret = blk_file_create(path, size, prealloc);
        created = ret == 0;
    }
    if (ret == 0) {
        node.file =
            blk_open_protocol(filename, &fo, BLK_ROLE_METADATA, BLK_OPEN_USER_NAME);
        ret = node.file ? 0 : (blk_error_code() ? -blk_error_code() : -EIO);
    }
    if (ret == 0) {
        CryptoLuksIO io = area_io(&node);
        ret = crypto_luks_store_key(&h, &io, 0, pw, len, mk, p.iter_time_ms, max);
    }
    if (node.file) {
        blk_close(node.file);
    }
    crypto_secure_free(mk);
    crypto_secure_free(pw);
    if (ret < 0 && created) {
        (void)unlink(path); /* invariant 5 */
    }
    return ret;
}

/* qemu-img measure -O luks: the payload and the header area. */
static int luks_measure(const BlkCreateOptions *opts, const BlkMeasureSource *src,
                        BlkMeasure *out)
{
    const char *secret;
    CryptoLuksParams p;
    BlkPrealloc prealloc;
    uint64_t size = src ? src->size : opts->size;
    int64_t area;
    int ret = create_params(opts, &p, &prealloc, &secret);

    if (ret == 0 && (!opts->secrets || !g_hash_table_contains(opts->secrets, secret))) {
        ret = blk_error(EINVAL, "No secret with id '%s'", secret);
    }
    if (ret < 0) {
        return ret;
    }
    area = crypto_luks_params_area_len(&p);
    if (area < 0) {
        return (int)area;
    }
    memset(out, 0, sizeof(*out));
    out->required = ROUND_UP(size, 512) + (uint64_t)area;
    out->fully_allocated = out->required;
    return 0;
}

/* qemu-img amend: key slots (crypto/luks.c invariant 7). */
static int luks_amend(BlkNode *img, const BlkAmendOptions *o)
{
    const CryptoSecrets secrets = {.table = o->secrets, .values = o->secret_values};
    LuksState *l = img->opaque;
    CryptoLuksIO io = area_io(img);
    CryptoLuksAmend a;
    const uint8_t *mk;
    size_t len;
    int ret;

    if (o->options) {
        static const char *const known[] = {"state", "keyslot", "old-secret",
                                            "new-secret", "iter-time"};
        GHashTableIter it;
        gpointer k;
        g_hash_table_iter_init(&it, o->options);
        while (g_hash_table_iter_next(&it, &k, NULL)) {
            bool ok = false;
            for (size_t i = 0; i < G_N_ELEMENTS(known); i++) {
                ok = ok || strcmp(k, known[i]) == 0;
            }
            if (!ok) {
                return blk_error(EINVAL, "Invalid parameter '%s'", (const char *)k);
            }
        }
    }
    ret = crypto_luks_amend_parse(o->options, "", &a);
    if (ret < 0) {
        return ret;
    }
    mk = crypto_block_key(l->crypto, &len);
    g_rw_lock_writer_lock(&l->lock); /* no request runs meanwhile */
    ret = crypto_luks_amend(&l->hdr, &io, mk, &secrets, &a, o->force, l->max_iterations);
    g_rw_lock_writer_unlock(&l->lock);
    return ret;
}

const BlkDriver blk_luks_driver = {
    .format_name = "luks",
    .probe = luks_probe,
    .open = luks_open,
    .close = luks_close,
    .preadv = luks_preadv,
    .pwritev = luks_pwritev,
    .pwrite_zeroes = luks_pwrite_zeroes,
    .flush = luks_flush,
    .block_status = luks_block_status,
    .truncate = luks_truncate,
    .get_allocated_size = luks_get_allocated_size,
    .has_zero_init = luks_has_zero_init,
    .get_info = luks_get_info,
    .create = luks_create,
    .measure = luks_measure,
    .amend = luks_amend,
    .file_role = BLK_ROLE_METADATA,
};
