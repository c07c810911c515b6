/*
 * qcow2/crypt.c: encrypted qcow2 images -- the driver's side of crypto/.
 *
 * Owns: the one place where guest data meets the data node (every read
 * and write of guest data, in every path, goes through qcow2_data_*()), the
 * key an open unlocks, the LUKS header area inside the image (read and
 * written through the encryption header extension's range), the LUKS
 * header a new image gets, and amend's key slot changes.
 *
 * Invariants (cited as "crypt.c invariant N"):
 *  1. qcow2_data_preadv/pwritev/pwrite_zeroes are the only functions that
 *     move guest data to or from the data node: the slow path (read.c
 *     read_guest, write.c write_chunk_data), the lock-free fast path
 *     (qcow2_preadv, qcow2_pwritev on fastmap.c's hits), COW, zeroing and
 *     the vmstate area all call them.  On an encrypted image they go
 *     through crypto/block.c with the sector numbers QEMU uses for IVs:
 *     the host offset for LUKS (the spec's "physical disk sector"), the
 *     guest offset for the old AES method.
 *  2. An encrypted image opened for its metadata only (qemu-img info's
 *     open: read-only, no_io) has no key; its data functions refuse every
 *     transfer, so ciphertext never reaches a caller and nothing is written
 *     unencrypted.  The same refusal holds for an image whose external
 *     data file that open left closed (qcow2.c invariant 11): the image
 *     file's own bytes at the data file's offsets are never guest data.
 *  3. Direct requests (qcow2_direct_begin: a fast map hit handed to the
 *     aio engine's ring or a protocol's own queue) of an encrypted image
 *     carry this image's CryptoBlock and IV offset in their BlkDirect
 *     (qcow2_data_direct_fill, the one place that hands the data node out):
 *     api/aio.c encrypts a write into a bounce buffer before it is
 *     submitted and decrypts a read in the caller's buffers before its
 *     callback, with the same crypto/block.c code and the same sector
 *     numbers as invariant 1 (crypto/block.c invariant 6).  An image
 *     without its key (invariant 2) takes no direct request, and a direct
 *     write must be sector aligned (invariant 4).
 *  4. Writes reaching the encryption layer are whole 512-byte sectors:
 *     a fast-path rewrite of an encrypted image is taken only when sector
 *     aligned (qcow2_data_write_aligned), and the slow path widens every
 *     chunk to whole sectors, filling the widening from the current
 *     contents as it fills COW (write.c invariant 15) under its write
 *     registration, which no fast request can share.
 *  5. The LUKS header area is read and written only inside
 *     [crypto_offset, crypto_offset + crypto_length) (QEMU's "Request for
 *     data outside of extension header" otherwise); key material is
 *     flushed before the header that refers to it (luks.c invariant 3).
 *  6. Compressed clusters of an encrypted image are read as QEMU writes
 *     them -- not encrypted (qemu-io write -c stores them in the clear) --
 *     and qimg writes none (compress.c refuses).
 *  7. A second node on an open image (a snapshot view, api/vmstate-api.c)
 *     takes the first's key (BlkOpenOptions.key_from) instead of a
 *     passphrase, which the library does not keep past an open; the LUKS
 *     uuid must match, so a key is never used on another image.
 */
#include "qcow2/qcow2.h"
#include "qcow2/meta.h"

#include "crypto/luks.h"
#include "crypto/secmem.h"

#include <errno.h>
#include <inttypes.h>

/* ---- guest data (invariants 1-4) ---- */

static int no_data_file(const Qcow2State *s)
{
    return blk_error(EACCES,
                     "'%s' was opened for its metadata only: its data file '%s' is not "
                     "open",
                     s->img->filename, s->ext.data_file ? s->ext.data_file : "");
}

static int no_key(const Qcow2State *s)
{
    return blk_error(EACCES,
                     "'%s' is encrypted and was opened without its key (metadata only)",
                     s->img->filename);
}

/* The sector numbering of the IVs (invariant 1). */
static uint64_t iv_offset(const Qcow2State *s, uint64_t host, uint64_t guest)
{
    return s->crypt_physical ? host : guest;
}

int qcow2_data_preadv(Qcow2State *s, uint64_t host, uint64_t guest, const BlkIOV *qiov)
{
    if (s->data_file_skipped) {
        return no_data_file(s); /* invariant 2 */
    }
    if (!s->encrypted) {
        return blk_preadv(qcow2_data_node(s), host, qiov, 0);
    }
    if (!s->crypto) {
        return no_key(s); /* invariant 2 */
    }
    return crypto_block_preadv(s->crypto, qcow2_data_node(s), host,
                               iv_offset(s, host, guest), qiov);
}

int qcow2_data_pwritev(Qcow2State *s, uint64_t host, uint64_t guest, const BlkIOV *qiov,
                       unsigned flags)
{
    if (s->data_file_skipped) {
        return no_data_file(s); /* invariant 2 */
    }
    if (!s->encrypted) {
        return blk_pwritev(qcow2_data_node(s), host, qiov, flags);
    }
    if (!s->crypto) {
        return no_key(s);
    }
    return crypto_block_pwritev(s->crypto, qcow2_data_node(s), host,
                                iv_offset(s, host, guest), qiov, flags);
}

int qcow2_data_pwrite_zeroes(Qcow2State *s, uint64_t host, uint64_t guest, uint64_t bytes,
                             unsigned flags)
{
    if (s->data_file_skipped) {
        return no_data_file(s); /* invariant 2 */
    }
    if (!s->encrypted) {
        return blk_pwrite_zeroes(qcow2_data_node(s), host, bytes, flags);
    }
    if (!s->crypto) {
        return no_key(s);
    }
    return crypto_block_pwrite_zeroes(s->crypto, qcow2_data_node(s), host,
                                      iv_offset(s, host, guest), bytes, flags);
}

bool qcow2_data_direct_ok(const Qcow2State *s)
{
    /* invariants 2, 3; and a fault node under us takes no ring requests
     * (only file nodes and recording nodes over one do, uring.c invariant
     * 6) */
    BlkNode *data = qcow2_data_node(s);
    return (!s->encrypted || s->crypto) && !s->data_file_skipped &&
           (!data->filtered || blk_uring_node_ok(data));
}

void qcow2_data_direct_fill(Qcow2State *s, uint64_t host, uint64_t guest, BlkDirect *d)
{
    d->node = qcow2_data_node(s);
    d->offset = host;
    d->crypto = s->encrypted ? s->crypto : NULL; /* invariant 3 */
    d->iv_offset = iv_offset(s, host, guest);
}

bool qcow2_data_write_aligned(const Qcow2State *s, uint64_t offset, uint64_t bytes)
{
    return !s->encrypted ||
           (offset % CRYPTO_SECTOR_SIZE == 0 && bytes % CRYPTO_SECTOR_SIZE == 0);
}

/* ---- the LUKS header area (invariant 5) ---- */

static int area_check(const Qcow2State *s, uint64_t off, size_t len)
{
    if (!qcow2_range_within(off, len, s->ext.crypto_length)) {
        return blk_error(EINVAL, "Request for data outside of extension header");
    }
    return 0;
}

static int area_read(void *opaque, uint64_t off, void *buf, size_t len)
{
    Qcow2State *s = opaque;
    int ret = area_check(s, off, len);

    /* past the end of the file: zeros (file.c invariant 3), as QEMU reads */
    return ret < 0 ? ret : blk_pread(s->img->file, s->ext.crypto_offset + off, buf, len);
}

static int area_write(void *opaque, uint64_t off, const void *buf, size_t len)
{
    Qcow2State *s = opaque;
    int ret = area_check(s, off, len);

    return ret < 0 ? ret
                   : blk_pwrite(s->img->file, s->ext.crypto_offset + off, buf, len, 0);
}

static int area_flush(void *opaque)
{
    Qcow2State *s = opaque;

    return blk_flush(s->img->file);
}

static CryptoLuksIO area_io(Qcow2State *s)
{
    return (CryptoLuksIO){
        .read = area_read, .write = area_write, .flush = area_flush, .opaque = s};
}

/* The LUKS header the encryption header extension points at, read as QEMU
 * reads it: inside the extension's length, zeros past the end of the file. */
static int read_luks(Qcow2State *s)
{
    uint8_t buf[CRYPTO_LUKS_HEADER_SIZE];
    uint64_t end;
    int ret;

    if (s->ext.crypto_length < sizeof(buf)) {
        return blk_error(EINVAL, "Request for data outside of extension header");
    }
    if (qcow2_add(s->ext.crypto_offset, s->ext.crypto_length, &end)) {
        return blk_error(EINVAL,
                         "Encryption header (offset %" PRIu64 ", length %" PRIu64
                         ") overflows",
                         s->ext.crypto_offset, s->ext.crypto_length);
    }
    ret = area_read(s, 0, buf, sizeof(buf));
    if (ret < 0) {
        return ret;
    }
    s->luks = g_new0(CryptoLuksHeader, 1);
    return crypto_luks_decode(buf, sizeof(buf), s->luks);
}

/* ---- opening ---- */

/* The old AES method's key: the passphrase's first 16 bytes, zero padded
 * (QEMU's qcow format); AES-128-CBC, plain64 IVs of the guest sector. */
static int open_aes(Qcow2State *s, const uint8_t *pw, size_t len)
{
    const CryptoSpec spec = {.alg = CRYPTO_CIPHER_AES_128,
                             .mode = CRYPTO_MODE_CBC,
                             .ivgen = CRYPTO_IVGEN_PLAIN64};
    uint8_t *key = crypto_secure_alloc(16);

    memcpy(key, pw, MIN(len, (size_t)16));
    s->crypto = crypto_block_new(&spec, key, 16);
    crypto_secure_free(key);
    s->crypt_physical = false;
    return s->crypto ? 0 : -EINVAL;
}

/* Invariant 7: the key of another open node of the same image. */
static int key_from(Qcow2State *s, const Qcow2State *o)
{
    const CryptoSpec aes = {.alg = CRYPTO_CIPHER_AES_128,
                            .mode = CRYPTO_MODE_CBC,
                            .ivgen = CRYPTO_IVGEN_PLAIN64};
    const uint8_t *key;
    size_t len;

    if (!o->crypto || o->header.crypt_method != s->header.crypt_method ||
        (s->luks && (!o->luks || strcmp(o->luks->uuid, s->luks->uuid) != 0))) {
        return blk_error(EINVAL, "'%s' cannot share the key of '%s'", s->img->filename,
                         o->img->filename);
    }
    key = crypto_block_key(o->crypto, &len);
    s->crypto = crypto_block_new(s->luks ? &s->luks->spec : &aes, key, len);
    s->crypt_physical = o->crypt_physical;
    return s->crypto ? 0 : -EINVAL;
}

int qcow2_crypt_open(Qcow2State *s, const BlkOpenOptions *opts, bool metadata_only)
{
    CryptoSecrets secrets = {.table = opts ? opts->secrets : NULL,
                             .values = opts && opts->secret_values};
    uint8_t *pw = NULL, *mk = NULL;
    CryptoLuksIO io = area_io(s);
    size_t pwlen = 0;
    int ret;

    s->encrypted = s->header.crypt_method != QCOW2_CRYPT_NONE;
    s->luks_max_iterations = opts && opts->luks_max_iterations
                                 ? opts->luks_max_iterations
                                 : CRYPTO_LUKS_DEFAULT_MAX_ITERATIONS;
    if (!s->encrypted) {
        return 0;
    }
    if (s->header.crypt_method == QCOW2_CRYPT_LUKS) {
        ret = read_luks(s);
        if (ret < 0) {
            return ret;
        }
    }
    if (metadata_only) {
        return 0; /* invariant 2 */
    }
    if (opts->key_from && opts->key_from->drv == &blk_qcow2_driver) {
        return key_from(s, opts->key_from->opaque); /* invariant 7 */
    }
    /* header.c invariant 7 made sure a secret was named and exists */
    ret = crypto_secret_passphrase(&secrets, opts->key_secret, &pw, &pwlen);
    if (ret < 0) {
        return ret;
    }
    if (s->header.crypt_method == QCOW2_CRYPT_AES) {
        ret = open_aes(s, pw, pwlen);
        crypto_secure_free(pw);
        return ret;
    }
    ret = crypto_luks_supported(s->luks);
    if (ret == 0) {
        ret = crypto_luks_unlock(s->luks, &io, pw, pwlen, s->luks_max_iterations, &mk);
    }
    if (ret == 0) {
        s->crypto = crypto_block_new(&s->luks->spec, mk, s->luks->key_bytes);
        ret = s->crypto ? 0 : -EINVAL;
    }
    s->crypt_physical = true;
    crypto_secure_free(mk);
    crypto_secure_free(pw);
    return ret;
}

void qcow2_crypt_close(Qcow2State *s)
{
    crypto_block_free(s->crypto);
    s->crypto = NULL;
    g_free(s->luks);
    s->luks = NULL;
}

/* ---- a new image (create.c step d2) ---- */

int qcow2_crypt_create(Qcow2State *s, const CryptoLuksParams *p, const uint8_t *pw,
                       size_t pwlen, uint32_t max_iterations)
{
    CryptoLuksHeader *h = g_new0(CryptoLuksHeader, 1);
    uint8_t *mk = NULL;
    uint64_t len, clusters;
    int64_t off;
    int ret;

    ret = crypto_luks_format(p, max_iterations, h, &mk);
    if (ret < 0) {
        g_free(h);
        return ret;
    }
    len = crypto_luks_area_len(h);
    clusters = DIV_ROUND_UP(len, s->cluster_size);
    qcow2_lock(s);
    off = qcow2_alloc_clusters_locked(s, clusters);
    if (off > 0) {
        ret = qcow2_pre_write_overlap_check_locked(s, 0, (uint64_t)off,
                                                   clusters << s->cluster_bits);
    } else {
        ret = off < 0 ? (int)off : blk_error(EIO, "Header area allocated at offset 0");
    }
    qcow2_unlock(s);
    if (ret == 0) {
        /* QEMU zeroes the whole area, then writes the header and slot 0 */
        ret = blk_pwrite_zeroes(s->img->file, (uint64_t)off, clusters << s->cluster_bits,
                                0);
    }
    if (ret == 0) {
        s->ext.has_crypto = true;
        s->ext.crypto_offset = (uint64_t)off;
        s->ext.crypto_length = len;
        CryptoLuksIO io = area_io(s);
        ret = crypto_luks_store_key(h, &io, 0, pw, pwlen, mk, p->iter_time_ms,
                                    max_iterations);
    }
    if (ret == 0) {
        s->crypto = crypto_block_new(&h->spec, mk, h->key_bytes);
        ret = s->crypto ? 0 : -EINVAL;
    }
    crypto_secure_free(mk);
    if (ret < 0) {
        g_free(h);
        return ret;
    }
    s->luks = h;
    s->header.crypt_method = QCOW2_CRYPT_LUKS;
    s->encrypted = true;
    s->crypt_physical = true;
    s->luks_max_iterations = max_iterations;
    return 0;
}

/* ---- amend (amend.c invariant 8) ---- */

int qcow2_crypt_amend_locked(Qcow2State *s, const CryptoLuksAmend *a,
                             const BlkAmendOptions *o)
{
    const CryptoSecrets secrets = {.table = o->secrets, .values = o->secret_values};
    CryptoLuksIO io = area_io(s);
    const uint8_t *mk;
    size_t len;

    mk = crypto_block_key(s->crypto, &len);
    return crypto_luks_amend(s->luks, &io, mk, &secrets, a, o->force,
                             s->luks_max_iterations);
}
