/*
 * qcow2/check.c: consistency check of a qcow2 image, as qemu-img check
 * (QEMU 7.2) reports it; the repairs it triggers are in repair.c.
 *
 * Owns: the order of one check and its entry point, the findings list,
 * reads of the image, and the pass that counts every structure referencing
 * clusters (header, active and snapshot L1/L2 tables, data and compressed
 * clusters, refcount table and blocks, snapshot table, bitmap directory and
 * tables).  Its parts: check-refs.c (the in-memory refcount table, the
 * refcount blocks, the comparison with the on-disk refcounts and the
 * classification of each finding), check-l2.c (the L1/L2 walk and the
 * OFLAG_COPIED check), check-bitmap.c (the bitmap directory and tables,
 * read through their codec, bitmap-codec.c).
 * Reading the snapshot table (its codec: snapshot-codec.c) and every
 * write are in repair.c.  The invariants below are the whole check's;
 * those files cite them as "check.c invariant N".
 *
 * The order of one check (qcow2_check_image), QEMU's:
 *   1. read the snapshot table (dropping what -r all drops),
 *   2. count references (calculate), compare with the on-disk refcounts
 *      (fixing leaks / corruptions, or rebuilding the refcount structure),
 *      check OFLAG_COPIED,
 *   3. rewrite the snapshot table if it had fixable corruptions,
 *   4. clear the dirty and corrupt bits after a successful repair.
 *
 * Invariants (cited as "check.c invariant N"):
 *  1. Classification and messages are QEMU's: on-disk refcount below the
 *     references is a corruption ("ERROR cluster N refcount=R reference=F"),
 *     above is a leak ("Leaked cluster ..."); a referenced cluster with
 *     refcount 0 needs the refcount structure rebuilt.  Every line is
 *     printed as qemu-img prints it, into res->messages.
 *  2. The in-memory refcount table has one entry per host cluster up to the
 *     end of the file (at most INT_MAX clusters, QEMU's limit), of the
 *     image's refcount width, saturating at the width's maximum (a further
 *     reference is an overflow corruption).  A reference that reaches a
 *     cluster or more past the end of the file is a corruption and is not
 *     counted, so a pointer to 32 PB costs nothing (iotest 138).  The table
 *     grows only by the one cluster a reference may legally overhang, by
 *     what a rebuild allocates, and, when -r all grows the file to hold a
 *     refcount block outside it as QEMU does (060: a block at 64 GiB of
 *     a 256 KiB file), to the block's end -- unless the block lies past
 *     CHECK_GROW_CLUSTERS clusters (2^21, or twice the file's clusters
 *     + 1024 if more), when the file is left alone and the rebuild
 *     replaces the block.  QEMU grows the file whatever the distance:
 *     a 2 KiB image with 512-byte clusters and a block near INT_MAX
 *     clusters cost qemu-img 26 s and a 512 GiB sparse file (invariant 4:
 *     work bounded by the file, not its pointers; fuzz-qcow2-rw).  It is
 *     allocated zeroed and untouched, so a sparse file costs address
 *     space, not memory.
 *  3. Everything read from the image is bounds-checked before use; reads
 *     past the end of the file return zeros, as QEMU reads them.  Sizes that
 *     decide an allocation are validated first (L1 <= 32 MiB, snapshot table
 *     <= 64 MiB, bitmap directory <= 64 MiB, bitmap table <= 512 MiB / cluster).
 *  4. Work is bounded by the size of the file, not by the pointers in it: an
 *     L2 table past the end of the file is all zeros and skipped; a clean L2
 *     table (no finding) referenced again is replayed, and once the replay
 *     budget is spent its further references are counted and applied at once
 *     at the end of the walk (same counts; only the order of overflow
 *     messages can differ from QEMU's).  Re-walking broken tables, unaligned
 *     L2 tables and L1 entries beyond what the file can hold draw on a fixed
 *     budget; when it runs out the check stops with an error instead of
 *     running for hours on a hostile image.
 *  5. Nothing is written unless fix says so; every write goes through
 *     repair.c (overlap-checked, caches kept coherent).
 *  6. qcow2_check_image returns -errno only when the check could not run to
 *     its end; the recorded message (block/error.c) is then the line
 *     qemu-img prints with its prefix before "Check failed" ("ERROR failed
 *     to read the snapshot table: ..."), or none (strerror(errno)) when
 *     qemu-img prints none.
 *  7. A repair that ran to its end with no check error and no corruption
 *     left unfixed clears the dirty and corrupt bits (step 4; repair.c
 *     writes them); any other outcome leaves them set, so the image is
 *     repaired again at the next read-write open.
 *  8. A corruption the check meets on a writable image (a repair, or the
 *     check of a repair) is fatal, as QEMU's: the image is marked corrupt
 *     (meta.c invariant 2) and the line goes to the messages.  The
 *     refcount rebuild still writes its new structure (repair.c invariant
 *     6), but nothing else is written after the mark: the fixes the check
 *     makes in the refcount cache afterwards stay there and are dropped at
 *     close (QEMU's driver is gone, its close writes nothing), so what they
 *     fix stays a leak for the next repair.  A check that starts after the
 *     mark -- the double check of the repair -- fails with ENOMEDIUM, "No
 *     medium found", QEMU's (060: "Check failed: No medium found", then a
 *     second check -r repairs the leak).
 */
#include "qcow2/check.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>

/* check.c invariant 4: entries that may be walked again on purpose. */
#define CHECK_REPLAY_BUDGET (UINT64_C(1) << 28)
#define CHECK_BAD_BUDGET (UINT64_C(1) << 26)

void check_msg(Qcow2Check *c, const char *fmt, ...)
{
    va_list ap;

    if (c->messages->len >= CHECK_MAX_MESSAGES) {
        c->messages_dropped++;
        return;
    }
    va_start(ap, fmt);
    g_ptr_array_add(c->messages, g_strdup_vprintf(fmt, ap));
    va_end(ap);
}

/* ---- reading the image ---- */

int check_pread(Qcow2Check *c, uint64_t offset, void *buf, size_t len)
{
    size_t n = 0;

    /* invariant 3: only the part inside the file is read */
    if (offset < c->file_size) {
        n = (size_t)MIN((uint64_t)len, c->file_size - offset);
    }
    if (n < len) {
        memset((uint8_t *)buf + n, 0, len - n);
    }
    if (n == 0) {
        return 0;
    }
    int ret = blk_pread(c->file, offset, buf, n);
    return ret < 0 ? ret : 0;
}

int check_refresh_file_size(Qcow2Check *c)
{
    int64_t len = blk_getlength(c->file);

    if (len < 0) {
        return (int)len;
    }
    c->file_size = (uint64_t)len;
    /* qcow2.h invariant 5: the driver's idea of the file only grows */
    c->s->file_size = MAX(c->s->file_size, c->file_size);
    return 0;
}

/* ---- progress ---- */

void check_progress_add(Qcow2Check *c, uint64_t units)
{
    c->progress_done += units;
    if (c->progress && c->progress_total) {
        c->progress(c->progress_opaque, MIN(c->progress_done, c->progress_total),
                    c->progress_total);
    }
}

/* ---- calculate: every reference (QEMU's calculate_refcounts) ---- */

static int calculate_refcounts(Qcow2Check *c, Qcow2CheckCounts *res, bool *rebuild)
{
    Qcow2State *s = c->s;
    Qcow2CheckWalk w = {
        .l2memo = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free),
        .replay_budget = c->replay_budget,
        .bad_budget = c->bad_budget,
        /* L1 tables of a sane image do not overlap: at most the file */
        .l1_budget = c->file_size / 8 + c->bad_budget,
    };
    int ret;

    ret = check_refresh_file_size(c);
    if (ret < 0) {
        res->check_errors++;
        goto out;
    }
    if (!c->refs) {
        ret = check_refs_resize(c, c->nb_clusters);
        if (ret < 0) {
            res->check_errors++;
            goto out;
        }
    }

    /* header */
    ret = check_inc_refcounts(c, res, 0, s->cluster_size);
    if (ret < 0) {
        goto out;
    }
    /* active L1 (validated at open: <= 32 MiB) */
    ret = check_l1(c, &w, res, s->l1_table_offset, s->l1_size, CHECK_FRAG_INFO, true);
    if (ret < 0) {
        goto out;
    }
    if (qcow2_has_data_file(s) && s->nb_snapshots) {
        check_msg(c, "ERROR %" PRIu32 " snapshots in image with data file",
                  s->nb_snapshots);
        res->corruptions++;
    }
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        const Qcow2Snapshot *sn = &s->snapshots[i];

        if (qcow2_offset_into_cluster(s, sn->l1_table_offset)) {
            check_msg(c,
                      "ERROR snapshot %s (%s) l1_offset=%#" PRIx64 ": L1 table is not "
                      "cluster aligned; snapshot table entry corrupted",
                      sn->id_str, sn->name, sn->l1_table_offset);
            res->corruptions++;
            continue;
        }
        if (sn->l1_size > QCOW2_MAX_L1_BYTES / 8) {
            check_msg(c,
                      "ERROR snapshot %s (%s) l1_size=%#" PRIx32 ": L1 table is too "
                      "large; snapshot table entry corrupted",
                      sn->id_str, sn->name, sn->l1_size);
            res->corruptions++;
            continue;
        }
        ret = check_l1(c, &w, res, sn->l1_table_offset, sn->l1_size, 0, false);
        if (ret < 0) {
            goto out;
        }
    }
    ret = check_apply_deferred(c, &w, res);
    if (ret < 0) {
        goto out;
    }
    ret = check_inc_refcounts(c, res, s->snapshots_offset, s->snapshots_size);
    if (ret < 0) {
        goto out;
    }
    ret =
        check_inc_refcounts(c, res, s->refcount_table_offset, s->refcount_table_size * 8);
    if (ret < 0) {
        goto out;
    }
    if (s->ext.has_crypto) {
        ret = check_inc_refcounts(c, res, s->ext.crypto_offset, s->ext.crypto_length);
        if (ret < 0) {
            goto out;
        }
    }
    ret = check_bitmaps(c, res);
    if (ret < 0) {
        goto out;
    }
    ret = check_refblocks(c, res, rebuild);

out:
    g_hash_table_destroy(w.l2memo);
    return ret;
}

/* ---- the refcount part (QEMU's qcow2_check_refcounts) ---- */

static int check_refcounts(Qcow2Check *c, Qcow2CheckCounts *res)
{
    Qcow2State *s = c->s;
    Qcow2CheckCounts pre;
    uint64_t highest = 0;
    bool rebuild = false;
    int ret;

    ret = check_refresh_file_size(c);
    if (ret < 0) {
        res->check_errors++;
        return ret;
    }
    c->nb_clusters = DIV_ROUND_UP(c->file_size, s->cluster_size);
    if (c->nb_clusters > (uint64_t)INT_MAX) {
        res->check_errors++;
        return blk_error(EFBIG, "%s", g_strerror(EFBIG));
    }
    res->total_clusters = (int64_t)DIV_ROUND_UP(s->img->size, s->cluster_size);
    c->progress_total = c->nb_clusters + s->l1_size;
    for (uint32_t i = 0; i < s->nb_snapshots; i++) {
        c->progress_total += MIN(s->snapshots[i].l1_size, QCOW2_MAX_L1_BYTES / 8);
    }

    ret = calculate_refcounts(c, res, &rebuild);
    if (ret < 0) {
        return ret;
    }

    /* Overwritten below when something gets fixed without a rebuild. */
    pre = *res;
    check_compare_refcounts(c, res, 0, &rebuild, &highest);

    if (rebuild && (c->fix & BLK_CHECK_FIX_ERRORS)) {
        Qcow2CheckCounts old = *res;
        int64_t fresh_leaks = 0;

        check_msg(c, "Rebuilding refcount structure");
        ret = repair_rebuild_refcounts(c, res);
        if (ret < 0) {
            return ret;
        }
        res->corruptions = 0;
        res->leaks = 0;

        /* The old structures are now leaked: count again. */
        rebuild = false;
        memset(c->refs, 0, (size_t)c->refs_bytes);
        c->refs_high = 0;
        res->allocated_clusters = 0;
        res->fragmented_clusters = 0;
        res->compressed_clusters = 0;
        ret = calculate_refcounts(c, res, &rebuild);
        if (ret < 0) {
            return ret;
        }
        if (c->fix & BLK_CHECK_FIX_LEAKS) {
            Qcow2CheckCounts saved = *res;

            memset(res, 0, sizeof(*res));
            check_compare_refcounts(c, res, BLK_CHECK_FIX_LEAKS, &rebuild, &highest);
            if (rebuild) {
                check_msg(c, "ERROR rebuilt refcount structure is still broken");
            }
            /* leaks the rebuild itself made and could not fix */
            fresh_leaks = res->leaks;
            *res = saved;
        }
        if (res->corruptions < old.corruptions) {
            res->corruptions_fixed += old.corruptions - res->corruptions;
        }
        if (res->leaks < old.leaks) {
            res->leaks_fixed += old.leaks - res->leaks;
        }
        res->leaks += fresh_leaks;
    } else if (c->fix) {
        if (rebuild) {
            check_msg(c, "ERROR need to rebuild refcount structures");
            res->check_errors++;
            return blk_error(EIO, "%s", g_strerror(EIO));
        }
        if (res->leaks || res->corruptions) {
            *res = pre;
            check_compare_refcounts(c, res, c->fix, &rebuild, &highest);
        }
    }

    ret = check_oflag_copied(c, res);
    if (ret < 0) {
        return ret;
    }
    res->image_end_offset = (int64_t)((highest + 1) << s->cluster_bits);
    return 0;
}

/* ---- entry point ---- */

static void result_add(BlkCheckResult *res, const Qcow2CheckCounts *in, bool alloc_info)
{
    res->corruptions += in->corruptions;
    res->leaks += in->leaks;
    res->check_errors += in->check_errors;
    res->corruptions_fixed += in->corruptions_fixed;
    res->leaks_fixed += in->leaks_fixed;
    if (alloc_info) {
        res->image_end_offset = in->image_end_offset;
        res->total_clusters = in->total_clusters;
        res->allocated_clusters = in->allocated_clusters;
        res->fragmented_clusters = in->fragmented_clusters;
        res->compressed_clusters = in->compressed_clusters;
    }
}

static int check_locked(Qcow2Check *c, BlkCheckResult *result)
{
    Qcow2CheckCounts snap = {0}, refs = {0};
    int ret;

    ret = repair_read_snapshot_table(c, &snap);
    if (ret < 0) {
        result_add(result, &snap, false);
        return ret;
    }
    ret = check_refcounts(c, &refs);
    result_add(result, &refs, true);
    if (ret < 0) {
        result_add(result, &snap, false);
        return ret;
    }
    ret = repair_fix_snapshot_table(c, &snap);
    result_add(result, &snap, false);
    if (ret < 0) {
        return ret;
    }
    if (c->fix && result->check_errors == 0 && result->corruptions == 0) {
        /* invariant 7: clean and consistent now (QEMU's mark_clean,
         * mark_consistent) */
        ret = repair_mark_consistent(c);
    }
    return ret;
}

int qcow2_check_image_opts(BlkNode *img, BlkCheckResult *res, unsigned fix,
                           const Qcow2CheckOptions *opts)
{
    Qcow2State *s = img->opaque;
    Qcow2Check c = {
        .s = s,
        .file = img->file,
        .fix = fix & (BLK_CHECK_FIX_LEAKS | BLK_CHECK_FIX_ERRORS),
        .progress = opts ? opts->progress : NULL,
        .progress_opaque = opts ? opts->progress_opaque : NULL,
        .replay_budget =
            opts && opts->replay_budget ? opts->replay_budget : CHECK_REPLAY_BUDGET,
        .bad_budget = opts && opts->bad_budget ? opts->bad_budget : CHECK_BAD_BUDGET,
    };
    int ret;

    if (!res->messages) {
        res->messages = g_ptr_array_new_with_free_func(g_free);
    }
    c.messages = res->messages;
    if (c.fix && img->read_only) {
        return blk_error(EACCES, "Image '%s' is read-only; cannot repair", img->filename);
    }
    qcow2_lock(s);
    if (s->corrupt_fatal) {
        qcow2_unlock(s);
        blk_error_clear();
        return -ENOMEDIUM; /* invariant 8: marked corrupt while open */
    }
    c.l2_buf = g_malloc(s->cluster_size);
    if (s->writable) {
        qcow2_grow_stop_locked(s); /* grow.c invariant 4 (may wait: before in_check) */
    }
    s->in_check = true; /* repair.c invariant 1: corruption lines are ours */
    blk_error_clear();
    ret = check_refresh_file_size(&c);
    if (ret == 0 && c.fix) {
        /* nothing may be pending in the caches before tables are written
         * behind their back (check.c invariant 5) */
        ret = repair_flush_refcounts(&c);
    }
    if (ret == 0) {
        ret = check_locked(&c, res);
    }
    if (ret == 0 && c.fix) {
        ret = repair_flush_refcounts(&c);
    }
    if (c.overflow_dropped) {
        g_ptr_array_add(c.messages,
                        g_strdup_printf("(%" PRIu64 " further overflow errors were not "
                                        "printed)",
                                        c.overflow_dropped));
    }
    if (c.messages_dropped) {
        g_ptr_array_add(c.messages, g_strdup_printf("(%u further messages were not kept)",
                                                    c.messages_dropped));
    }
    g_free(c.refs);
    g_free(c.l2_buf);
    s->in_check = false;
    qcow2_unlock(s);
    return ret;
}

int qcow2_check_image(BlkNode *img, BlkCheckResult *res, unsigned fix)
{
    Qcow2CheckOptions o = {.progress = res->progress,
                           .progress_opaque = res->progress_opaque};
    return qcow2_check_image_opts(img, res, fix, &o);
}
