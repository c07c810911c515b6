/*
 * qcow2/amend.c: qemu-img amend for qcow2 (driver .amend): changing the
 * compatibility level, the refcount width, lazy refcounts, the virtual
 * size and the external data file's name and raw flag of an existing
 * image.
 *
 * Owns: reading amend's options and refusing what QEMU 7.2 refuses, with
 * its messages; the order of the operations; the v2 <-> v3 switches.  The
 * zero-cluster expansion of a downgrade is amend-zero.c, the refcount
 * width change amend-refcount.c; header writes are backing.c's one
 * cluster-0 rewrite (backing.c invariant 6), size changes resize.c's.
 *
 * Invariants (cited as "amend.c invariant N"):
 *  1. Options are read in QEMU's order (encrypt.*, size, compat,
 *     backing_file, backing_fmt, data_file, data_file_raw, lazy_refcounts,
 *     refcount_bits), each refused with QEMU's message before anything is
 *     written; then the operations run in QEMU's order: upgrade, refcount
 *     width, data file fields, the backing file check, lazy refcounts,
 *     size, downgrade.  A failing step stops there; the steps before it
 *     stay done (as in QEMU), each complete and durable.
 *  2. Upgrade: the snapshot table is rewritten first when an entry lacks
 *     the 16 bytes of extra data v3 requires (its encoder writes them),
 *     then one header write makes the image v3 (header length 112, feature
 *     name table, as QEMU writes it).
 *  3. Downgrade (QEMU's checks in its order): refcount_bits must be 16, no
 *     external data file, no internal snapshot whose disk size is not the
 *     image's (after the size step) or whose VM state needs more than 32
 *     bits ("Internal snapshots prevent downgrade of image": a v2 entry
 *     has no field for either, QEMU iotest 061); a dirty image is made
 *     clean; no incompatible
 *     feature but the compression type may be left.  Zero clusters are
 *     expanded (invariant 4), zstd images may have no compressed cluster
 *     (then they become zlib), and one header write makes the image v2
 *     with no feature fields.  Persistent bitmaps are not refused and their
 *     extension is kept, as QEMU 7.2 does: QEMU then warns that they are
 *     inconsistent, and qemu-img check counts their clusters as leaks.
 *  4. Zero expansion (amend-zero.c) walks the active L1 and then every
 *     snapshot's L1 (an L2 table several name is done once: a second visit
 *     finds no zero entry).  A plain zero entry becomes unallocated when
 *     the image has no backing file, else a new zeroed cluster; a
 *     preallocated zero entry is zeroed in place when every reference to
 *     its cluster comes from this table, else it gets a new zeroed cluster
 *     (QEMU 7.2 zeroes a cluster a snapshot still reads, destroying the
 *     snapshot's data; we do not).  New clusters have the table's refcount.
 *     On an encrypted image the zeros are encrypted zeros (crypt.c
 *     invariant 1; QEMU 7.2 writes plain zeros there, which then read back
 *     as garbage).
 *     In batches of tables of one L1 table: the new refcounts and the
 *     zeros durable, then the tables (written, synced), then the dropped
 *     references are freed; a table named again is read only after its
 *     batch is on disk.  The header says v2 only after every table is
 *     durable.
 *  5. Refcount width (amend-refcount.c): new refcount blocks and a new
 *     table go into clusters the old refcounts call free (first fit, the
 *     blocks before the table, as QEMU's allocator places them); they hold
 *     every old count except the old refcount structures' own (now free),
 *     plus 1 for each new structure (a fixed point: placing them can need
 *     more blocks and table).  A count that does not fit the new width is
 *     refused before anything is written.  Blocks and table written and
 *     flushed, then one synced header write switches refcount order,
 *     table offset and size together.  A power loss before it leaves the
 *     old image (the new clusters are unreferenced with refcount 0: not
 *     even leaks), after it the new one, with nothing left to free.
 *  6. When amend returns 0 everything it wrote is durable.
 *  7. Progress is QEMU's Qcow2AmendHelperCBInfo projection: the operations
 *     that report (version change, refcount width change) are counted
 *     first, each one's work is added to the total when it starts.
 *  8. encrypt.state, encrypt.keyslot, encrypt.old-secret, encrypt.new-secret
 *     and encrypt.iter-time change LUKS key slots (crypto/luks.c invariant
 *     7), after an upgrade and before anything else, as QEMU orders them;
 *     an image without encryption is QEMU's "Can't amend encryption
 *     options - encryption not present", the old AES method its "Only
 *     LUKS encryption options can be amended".  They are parsed with the
 *     other options, so a bad one changes nothing.
 */
#include "qcow2/header-edit.h"
#include "qcow2/amend.h"
#include "qcow2/create.h"
#include "qcow2/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

enum { OP_VERSION, OP_REFCOUNT };

/* Invariant 7. */
void qcow2_amend_progress(Qcow2AmendProgress *p, int op, uint64_t done, uint64_t total)
{
    uint64_t current, projected;

    if (!p->opts->progress) {
        return;
    }
    if (p->last != op) {
        if (p->last >= 0) {
            p->offset_done += p->last_work;
            p->ops_completed++;
        }
        p->last = op;
    }
    p->last_work = total;
    current = p->offset_done + total;
    projected =
        p->total_ops > p->ops_completed
            ? current * (p->total_ops - p->ops_completed - 1) / (p->ops_completed + 1)
            : 0;
    p->opts->progress(p->opts->progress_opaque, p->offset_done + done,
                      current + projected);
}

typedef struct AmendPlan {
    uint32_t version;
    uint64_t size; /* 0: unchanged */
    const char *backing_file, *backing_fmt;
    const char *data_file;
    bool data_file_raw, lazy;
    uint32_t refcount_bits;
    bool encrypt; /* encrypt.*: key slots (invariant 8) */
    CryptoLuksAmend crypt;
} AmendPlan;

static const char *opt_get(const BlkAmendOptions *o, const char *key)
{
    return o->options ? g_hash_table_lookup(o->options, key) : NULL;
}

static int param_error(const char *msg)
{
    return blk_error(EINVAL, "%s", msg);
}

/* The amend options (qemu-img's), encrypt.* (invariant 8) included. */
static const char *const amend_options[] = {
    "size",
    "compat",
    "backing_file",
    "backing_fmt",
    "data_file",
    "data_file_raw",
    "lazy_refcounts",
    "refcount_bits",
    "encrypt.state",
    "encrypt.keyslot",
    "encrypt.old-secret",
    "encrypt.new-secret",
    "encrypt.iter-time",
};

/* A decimal number (the API's normalised form, invariant 1). */
static int opt_number(const BlkAmendOptions *o, const char *key, uint64_t *n)
{
    const char *v = opt_get(o, key);
    char *end;

    if (!v) {
        return 0;
    }
    errno = 0;
    *n = g_ascii_strtoull(v, &end, 10);
    if (!*v || *end || errno || !g_ascii_isdigit(*v)) {
        return blk_error(EINVAL, "Parameter '%s' expects a number", key);
    }
    return 1;
}

/* "on" or "off" (the API's normalised form). */
static int opt_bool(const BlkAmendOptions *o, const char *key, bool *b)
{
    const char *v = opt_get(o, key);

    if (!v) {
        return 0;
    }
    if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
        return blk_error(EINVAL, "Parameter '%s' expects 'on' or 'off'", key);
    }
    *b = strcmp(v, "on") == 0;
    return 1;
}

/* Invariant 1: the options in QEMU's order, with its checks. */
static int read_plan(Qcow2State *s, const BlkAmendOptions *o, AmendPlan *p)
{
    GHashTableIter it;
    gpointer k;
    const char *v;
    uint64_t n;
    int ret;

    *p = (AmendPlan){.version = s->qcow_version,
                     .data_file_raw = s->data_file_raw,
                     .lazy = (s->compatible_features & QCOW2_COMPAT_LAZY_REFCOUNTS) != 0,
                     .refcount_bits = s->refcount_bits};
    if (o->options) {
        g_autoptr(GHashTable) rest = g_hash_table_new(g_str_hash, g_str_equal);
        g_hash_table_iter_init(&it, o->options);
        while (g_hash_table_iter_next(&it, &k, NULL)) {
            g_hash_table_add(rest, k);
        }
        ret = create_check_known(rest, amend_options, G_N_ELEMENTS(amend_options));
        if (ret < 0) {
            return ret;
        }
        g_hash_table_iter_init(&it, o->options);
        while (g_hash_table_iter_next(&it, &k, NULL)) {
            if (g_str_has_prefix(k, "encrypt.")) {
                p->encrypt = true;
            }
        }
    }
    if (p->encrypt) { /* invariant 8 */
        if (!s->crypto) {
            return param_error("Can't amend encryption options - encryption not present");
        }
        if (!s->luks) {
            return blk_error(ENOTSUP, "Only LUKS encryption options can be amended");
        }
        ret = crypto_luks_amend_parse(o->options, "encrypt.", &p->crypt);
        if (ret < 0) {
            return ret;
        }
    }
    ret = opt_number(o, "size", &p->size);
    if (ret < 0) {
        return ret;
    }
    if ((v = opt_get(o, "compat"))) {
        p->version = (uint32_t)create_parse_compat(v);
        if (p->version == 0) {
            return blk_error(EINVAL, "Unknown compatibility level %s", v);
        }
    }
    p->backing_file = opt_get(o, "backing_file");
    p->backing_fmt = opt_get(o, "backing_fmt");
    p->data_file = opt_get(o, "data_file");
    if (p->data_file && !qcow2_has_data_file(s)) {
        return param_error("data-file can only be set for images that use an external "
                           "data file");
    }
    ret = opt_bool(o, "data_file_raw", &p->data_file_raw);
    if (ret < 0) {
        return ret;
    }
    if (ret && p->data_file_raw && !s->data_file_raw) {
        return param_error("data-file-raw cannot be set on existing images");
    }
    ret = opt_bool(o, "lazy_refcounts", &p->lazy);
    if (ret < 0) {
        return ret;
    }
    ret = opt_number(o, "refcount_bits", &n);
    if (ret < 0) {
        return ret;
    }
    if (ret) {
        if (!create_refcount_bits_valid(n)) {
            return param_error("Refcount width must be a power of two and may not exceed "
                               "64 bits");
        }
        p->refcount_bits = (uint32_t)n;
    }
    return 0;
}

/* One header rewrite of the three feature words (lock held). */
static int write_features_locked(Qcow2State *s, uint64_t incompat, uint64_t compat,
                                 uint64_t autoclear)
{
    Qcow2HeaderEdit e = {.set_features = true,
                         .incompatible = incompat,
                         .compatible = compat,
                         .autoclear = autoclear};
    return qcow2_header_rewrite_locked(s, &e);
}

/* Invariant 2. */
static int upgrade_locked(Qcow2State *s, Qcow2AmendProgress *p)
{
    Qcow2HeaderEdit e = {.set_version = true, .version = 3};
    bool update = false;
    int ret;

    qcow2_amend_progress(p, OP_VERSION, 0, 2);
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        update = update || s->snapshots[i].extra_data_size < 16;
    }
    if (update) {
        bool written = false;
        ret =
            qcow2_snapshot_table_write_locked(s, s->snapshots, s->nb_snapshots, &written);
        if (ret < 0) {
            return blk_error_prefix(ret, "Failed to update the snapshot table");
        }
    }
    qcow2_amend_progress(p, OP_VERSION, 1, 2);
    ret = qcow2_header_rewrite_locked(s, &e);
    if (ret < 0) {
        return blk_error_prefix(ret, "Failed to update the image header");
    }
    qcow2_amend_progress(p, OP_VERSION, 2, 2);
    return 0;
}

/* Invariant 3. */
static int downgrade_locked(Qcow2State *s, Qcow2AmendProgress *p)
{
    Qcow2HeaderEdit e = {.set_version = true, .version = 2};
    uint64_t left;
    bool compressed = false;
    int ret;

    if (s->refcount_order != 4) {
        return param_error("compat=0.10 requires refcount_bits=16");
    }
    if (qcow2_has_data_file(s)) {
        return blk_error(ENOTSUP, "Cannot downgrade an image with a data file");
    }
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        const Qcow2Snapshot *sn = &s->snapshots[i];
        if (sn->vm_state_size > UINT32_MAX || sn->disk_size != s->img->size) {
            return blk_error(ENOTSUP, "Internal snapshots prevent downgrade of image");
        }
    }
    ret = qcow2_mark_clean_locked(s);
    if (ret < 0) {
        return blk_error_prefix(ret, "Failed to make the image clean");
    }
    left = s->incompatible_features & ~QCOW2_INCOMPAT_COMPRESSION;
    if (left) {
        return blk_error(ENOTSUP,
                         "Cannot downgrade an image with incompatible features 0x%" PRIx64
                         " set",
                         left);
    }
    ret = qcow2_amend_expand_zeros_locked(s, p, OP_VERSION, &compressed);
    if (ret < 0) {
        /* QEMU's words: the errno's text; a corruption was reported on its
         * own line already (meta.c invariant 3) */
        return blk_error_replace(-ret, "Failed to turn zero into data clusters: %s",
                                 g_strerror(-ret));
    }
    if ((s->incompatible_features & QCOW2_INCOMPAT_COMPRESSION) && compressed) {
        return blk_error(ENOTSUP, "Cannot downgrade an image with zstd compression type "
                                  "and existing compressed clusters");
    }
    ret = qcow2_header_rewrite_locked(s, &e);
    if (ret < 0) {
        return blk_error_prefix(ret, "Failed to update the image header");
    }
    return 0;
}

/* Invariant 1: the steps between the refcount width and the size. */
static int header_steps_locked(Qcow2State *s, const AmendPlan *p)
{
    BlkNode *img = s->img;
    uint64_t autoclear = s->autoclear_features, compat = s->compatible_features;
    int ret = 0;

    if (p->data_file_raw) {
        autoclear |= QCOW2_AUTOCLEAR_DATA_FILE_RAW;
    } else {
        autoclear &= ~(uint64_t)QCOW2_AUTOCLEAR_DATA_FILE_RAW;
    }
    if (autoclear != s->autoclear_features) {
        ret = write_features_locked(s, s->incompatible_features, compat, autoclear);
        if (ret == 0) {
            s->data_file_raw = p->data_file_raw;
        }
    }
    if (ret == 0 && p->data_file) {
        Qcow2HeaderEdit e = {.set_data_file = true,
                             .data_file = *p->data_file ? p->data_file : NULL};
        ret = qcow2_header_rewrite_locked(s, &e);
    }
    if (ret < 0) {
        return blk_error_prefix(ret, "Failed to update the image header");
    }
    if ((p->backing_file || p->backing_fmt) &&
        (g_strcmp0(p->backing_file, img->backing_filename) ||
         g_strcmp0(p->backing_fmt, img->backing_format))) {
        return param_error("Cannot amend the backing file");
    }
    if (p->lazy == ((compat & QCOW2_COMPAT_LAZY_REFCOUNTS) != 0)) {
        return 0;
    }
    if (p->lazy) {
        if (p->version < 3) {
            return param_error("Lazy refcounts only supported with compatibility level "
                               "1.1 and above (use compat=1.1 or greater)");
        }
        compat |= QCOW2_COMPAT_LAZY_REFCOUNTS;
    } else {
        ret = qcow2_mark_clean_locked(s);
        if (ret < 0) {
            return blk_error_prefix(ret, "Failed to make the image clean");
        }
        compat &= ~(uint64_t)QCOW2_COMPAT_LAZY_REFCOUNTS;
    }
    ret =
        write_features_locked(s, s->incompatible_features, compat, s->autoclear_features);
    if (ret == 0) {
        s->lazy_override = 0; /* the header's bit rules again, as in QEMU */
    }
    return ret < 0 ? blk_error_prefix(ret, "Failed to update the image header") : 0;
}

static int amend_locked(Qcow2State *s, const AmendPlan *plan, Qcow2AmendProgress *p,
                        bool *resize)
{
    int ret = qcow2_check_writable_locked(s);

    *resize = false;
    if (ret == 0 && plan->version > s->qcow_version) {
        ret = upgrade_locked(s, p);
    }
    if (ret == 0 && plan->encrypt) { /* invariant 8: QEMU's place */
        ret = qcow2_crypt_amend_locked(s, &plan->crypt, p->opts);
    }
    if (ret == 0 && plan->refcount_bits != s->refcount_bits) {
        if (plan->version < 3 && plan->refcount_bits != 16) {
            return param_error("Refcount widths other than 16 bits require compatibility "
                               "level 1.1 or above (use compat=1.1 or greater)");
        }
        ret = qcow2_amend_refcount_order_locked(
            s, (uint32_t)__builtin_ctz(plan->refcount_bits), p, OP_REFCOUNT);
    }
    if (ret == 0) {
        ret = header_steps_locked(s, plan);
    }
    *resize = ret == 0 && plan->size;
    return ret;
}

int qcow2_amend(BlkNode *img, const BlkAmendOptions *opts)
{
    Qcow2State *s = img->opaque;
    Qcow2AmendProgress p = {.opts = opts, .last = -1};
    AmendPlan plan;
    bool resize;
    int ret;

    ret = read_plan(s, opts, &plan);
    if (ret < 0) {
        return ret;
    }
    p.total_ops =
        (plan.version != s->qcow_version) + (plan.refcount_bits != s->refcount_bits);
    qcow2_lock(s);
    ret = amend_locked(s, &plan, &p, &resize);
    qcow2_unlock(s);
    if (ret == 0 && resize) {
        /* resize.c, exact and allowed to shrink, as QEMU's amend asks */
        ret = qcow2_truncate(img, plan.size, true, BLK_PREALLOC_OFF, true);
    }
    qcow2_lock(s);
    if (ret == 0 && plan.version < s->qcow_version) {
        ret = downgrade_locked(s, &p);
    }
    if (ret == 0) {
        ret = qcow2_flush_all_locked(s); /* invariant 6 */
    }
    qcow2_unlock(s);
    return ret;
}
