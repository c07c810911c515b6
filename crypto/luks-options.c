/*
 * crypto/luks-options.c: the options qemu-img takes for a LUKS volume,
 * read as QEMU reads them.
 *
 * Owns: parsing cipher-alg, cipher-mode, ivgen-alg, ivgen-hash-alg,
 * hash-alg and iter-time (qcow2's encrypt.* options, the luks format's
 * plain ones) into CryptoLuksParams, with QEMU 7.2's defaults and words;
 * and amend's state, keyslot, old-secret, new-secret and iter-time.
 *
 * Invariants (cited as "luks-options.c invariant N"):
 *  1. Defaults are QEMU's: aes-256, xts, plain64, sha256, 2000 ms; ESSIV
 *     without ivgen-hash-alg hashes with sha256.  An ivgen-hash-alg given
 *     with another generator is kept in the mode string and ignored, as
 *     QEMU (and dm-crypt) do.
 *  2. A value that is not one of QEMU's names is "Parameter 'NAME' does not
 *     accept value 'V'" with the name without its prefix (QEMU's QAPI
 *     visitor words it so); iter-time is read twice, as QEMU does: as a
 *     64-bit number when the options are parsed ("expects a number", "is
 *     too large"; a minus sign wraps, as strtoull's), then as a signed one
 *     when the volume is made ("expects integer").
 */
#include "crypto/luks.h"

#include "block/block.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *opt(GHashTable *opts, const char *prefix, const char *name)
{
    g_autofree char *key = g_strconcat(prefix, name, NULL);
    return opts ? g_hash_table_lookup(opts, key) : NULL;
}

static int bad_value(const char *name, const char *value)
{
    return blk_error(EINVAL, "Parameter '%s' does not accept value '%s'", name, value);
}

int crypto_luks_iter_time_check(GHashTable *opts, const char *prefix)
{
    const char *v = opt(opts, prefix, "iter-time");
    char *end;

    if (!v) {
        return 0;
    }
    errno = 0;
    (void)strtoull(v, &end, 0);
    if (end == v || *end) {
        return blk_error(EINVAL, "Parameter '%siter-time' expects a number", prefix);
    }
    if (errno == ERANGE) {
        return blk_error(EINVAL, "Value '%s' is too large for parameter '%siter-time'", v,
                         prefix);
    }
    return 0;
}

int crypto_luks_params_parse(GHashTable *opts, const char *prefix, CryptoLuksParams *p)
{
    const char *v;
    int x;

    crypto_luks_params_init(p); /* invariant 1 */
    if ((v = opt(opts, prefix, "cipher-alg"))) {
        if ((x = crypto_cipher_alg_lookup(v)) < 0) {
            return bad_value("cipher-alg", v);
        }
        p->spec.alg = (CryptoCipherAlg)x;
    }
    if ((v = opt(opts, prefix, "cipher-mode"))) {
        if ((x = crypto_mode_lookup(v)) < 0) {
            return bad_value("cipher-mode", v);
        }
        p->spec.mode = (CryptoMode)x;
    }
    if ((v = opt(opts, prefix, "ivgen-alg"))) {
        if ((x = crypto_ivgen_lookup(v)) < 0) {
            return bad_value("ivgen-alg", v);
        }
        p->spec.ivgen = (CryptoIvgen)x;
    }
    if ((v = opt(opts, prefix, "ivgen-hash-alg"))) {
        if ((x = crypto_hash_lookup(v)) < 0) {
            return bad_value("ivgen-hash-alg", v);
        }
        p->spec.ivgen_hash = (CryptoHash)x;
        p->has_ivgen_hash = true;
    }
    if ((v = opt(opts, prefix, "hash-alg"))) {
        if ((x = crypto_hash_lookup(v)) < 0) {
            return bad_value("hash-alg", v);
        }
        p->hash = (CryptoHash)x;
    }
    if (p->spec.ivgen == CRYPTO_IVGEN_ESSIV) {
        p->has_ivgen_hash = true; /* sha256 unless given */
    }
    if ((v = opt(opts, prefix, "iter-time"))) {
        char *end;
        long long t;
        int ret = crypto_luks_iter_time_check(opts, prefix);
        if (ret < 0) {
            return ret;
        }
        errno = 0;
        t = strtoll(v, &end, 0);
        if (errno == ERANGE) {
            return blk_error(EINVAL, "Parameter '%siter-time' expects integer", prefix);
        }
        p->iter_time_ms = (uint64_t)t; /* negative: huge, as QEMU's */
    }
    return 0;
}

/* A number as the API normalises it (decimal), or QEMU's message. */
static int amend_number(GHashTable *opts, const char *prefix, const char *name, bool *has,
                        uint64_t *out)
{
    const char *v = opt(opts, prefix, name);
    char *end;

    *has = v != NULL;
    if (!v) {
        return 0;
    }
    errno = 0;
    *out = g_ascii_strtoull(v, &end, 10);
    if (!*v || *end || errno) {
        return blk_error(EINVAL, "Parameter '%s%s' expects a number", prefix, name);
    }
    return 0;
}

int crypto_luks_amend_parse(GHashTable *opts, const char *prefix, CryptoLuksAmend *a)
{
    const char *state = opt(opts, prefix, "state");
    uint64_t slot = 0;
    int ret;

    memset(a, 0, sizeof(*a));
    ret = amend_number(opts, prefix, "keyslot", &a->has_keyslot, &slot);
    if (ret == 0) {
        ret =
            amend_number(opts, prefix, "iter-time", &a->has_iter_time, &a->iter_time_ms);
    }
    if (ret < 0) {
        return ret;
    }
    /* QEMU's visitor: a keyslot past int64 is negative once read as an int */
    a->keyslot = (int64_t)slot;
    if (!state) {
        return blk_error(EINVAL, "Parameter 'state' is missing");
    }
    if (strcmp(state, "active") != 0 && strcmp(state, "inactive") != 0) {
        return bad_value("state", state);
    }
    a->active = strcmp(state, "active") == 0;
    a->old_secret = opt(opts, prefix, "old-secret");
    a->new_secret = opt(opts, prefix, "new-secret");
    return 0;
}
