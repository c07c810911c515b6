/*
 * block/ova-tar.c: the tar codec -- one 512-byte header decoded field by
 * field -- and the walk over an archive's members (POSIX ustar, GNU long
 * names, pax extended headers), as OVA archives are written.
 *
 * Owns: nothing kept: the walk holds one header, one pending long name and
 * one pending pax header at a time, whatever the archive's size.
 *
 * Invariants (cited as "ova-tar.c invariant N"):
 *  1. A header is taken only with the ustar magic (POSIX "ustar\0" or GNU
 *     "ustar  ") and a checksum field that equals the sum of its bytes
 *     (with the field read as spaces; the unsigned sum, or the signed one
 *     old tars wrote); numeric fields are octal (NUL- or space-ended) or
 *     GNU base-256, checked not to pass 2^63 - 1.  An all-zero block ends
 *     the archive.
 *  2. Every member's bytes lie inside the file: header offset + 512 +
 *     size (rounded up to 512) is computed with checked arithmetic and a
 *     member that runs past the end of the file is an error naming the
 *     member ("truncated"), never a short read later.  A file that ends at
 *     a header boundary without the end blocks ends the archive.
 *  3. GNU long names ('L') and pax headers ('x') apply to the next member
 *     only; they are read whole, at most BLK_TAR_MAX_NAME and
 *     BLK_TAR_MAX_EXT bytes.  A pax "path" and "size" override the
 *     header's; a pax record that is not "LEN key=value\n" with LEN its
 *     own length is an error.  GNU sparse members (type 'S', or pax
 *     GNU.sparse.* keys) are reported as type 'S'.
 *  4. The walk advances by at least one block per step, so it ends; it
 *     holds O(1) memory (bounded by the limits of invariant 3).
 */
#include "block/ova.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

/* The fields of a ustar header (offset, length). */
enum {
    TAR_NAME = 0,
    TAR_NAME_LEN = 100,
    TAR_SIZE = 124,
    TAR_SIZE_LEN = 12,
    TAR_CHKSUM = 148,
    TAR_CHKSUM_LEN = 8,
    TAR_TYPE = 156,
    TAR_MAGIC = 257,
    TAR_PREFIX = 345,
    TAR_PREFIX_LEN = 155,
};
_Static_assert(TAR_PREFIX + TAR_PREFIX_LEN <= BLK_TAR_BLOCK, "ustar header fits");
_Static_assert(sizeof(((BlkTarHeader *)0)->name) == TAR_NAME_LEN + 1, "name field");
_Static_assert(sizeof(((BlkTarHeader *)0)->prefix) == TAR_PREFIX_LEN + 1, "prefix field");

/* Invariant 1: an octal field (leading spaces, digits, then NUL/space or
 * the field's end), or GNU base-256 (high bit of the first byte). */
static int parse_number(const uint8_t *f, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;

    if (f[0] & 0x80) {
        if (f[0] != 0x80) {
            return -ERANGE; /* negative, or more than 2^63 */
        }
        for (i = 1; i < len; i++) {
            if (v > (UINT64_MAX >> 8)) {
                return -ERANGE;
            }
            v = (v << 8) | f[i];
        }
        if (v > INT64_MAX) {
            return -ERANGE;
        }
        *out = v;
        return 0;
    }
    while (i < len && f[i] == ' ') {
        i++;
    }
    for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v > (INT64_MAX >> 3)) {
            return -ERANGE;
        }
        v = (v << 3) | (uint64_t)(f[i] - '0');
    }
    for (; i < len; i++) {
        if (f[i] != ' ' && f[i] != '\0') {
            return -EINVAL;
        }
    }
    *out = v;
    return 0;
}

static void copy_field(char *dst, const uint8_t *f, size_t len)
{
    size_t n = strnlen((const char *)f, len);
    memcpy(dst, f, n);
    dst[n] = '\0';
}

int blk_tar_header_decode(const uint8_t b[BLK_TAR_BLOCK], BlkTarHeader *h)
{
    uint64_t want, usum = 0;
    int64_t ssum = 0;
    bool zero = true;

    memset(h, 0, sizeof(*h));
    for (size_t i = 0; i < BLK_TAR_BLOCK; i++) {
        bool in_sum = i >= TAR_CHKSUM && i < TAR_CHKSUM + TAR_CHKSUM_LEN;
        zero = zero && b[i] == 0;
        usum += in_sum ? ' ' : b[i];
        ssum += in_sum ? ' ' : (int8_t)b[i];
    }
    if (zero) {
        return 0; /* invariant 1: the end of the archive */
    }
    h->ustar = memcmp(b + TAR_MAGIC, "ustar\0", 6) == 0 ||
               memcmp(b + TAR_MAGIC, "ustar  \0", 8) == 0;
    if (!h->ustar) {
        return blk_error(EINVAL, "not a ustar header (no 'ustar' magic)");
    }
    if (parse_number(b + TAR_CHKSUM, TAR_CHKSUM_LEN, &want) < 0) {
        return blk_error(EINVAL, "the header checksum field is not an octal number");
    }
    if (want != usum && (int64_t)want != ssum) {
        return blk_error(EINVAL,
                         "wrong header checksum (the header says %" PRIu64
                         ", its bytes sum to %" PRIu64 ")",
                         want, usum);
    }
    if (parse_number(b + TAR_SIZE, TAR_SIZE_LEN, &h->size) < 0) {
        return blk_error(EINVAL, "the size field is not a number below 2^63");
    }
    copy_field(h->name, b + TAR_NAME, TAR_NAME_LEN);
    if (b[TAR_MAGIC + 5] == '\0') { /* POSIX: the prefix field */
        copy_field(h->prefix, b + TAR_PREFIX, TAR_PREFIX_LEN);
    }
    h->type = b[TAR_TYPE] ? (char)b[TAR_TYPE] : BLK_TAR_REGULAR;
    return 1;
}

typedef struct TarWalk {
    BlkNode *file;
    const char *what;
    char *long_name; /* GNU 'L', for the next member */
    char *pax_path;  /* pax path=, for the next member */
    uint64_t pax_size;
    bool has_pax_size;
    bool pax_sparse;
} TarWalk;

static void walk_reset(TarWalk *w)
{
    g_clear_pointer(&w->long_name, g_free);
    g_clear_pointer(&w->pax_path, g_free);
    w->has_pax_size = false;
    w->pax_sparse = false;
}

/* Invariant 3: the data of an 'L' or 'x' member, whole and NUL-ended. */
static int read_small(TarWalk *w, uint64_t off, uint64_t size, uint64_t max,
                      const char *kind, char **out)
{
    g_autofree char *buf = NULL;
    int ret;

    if (size > max) {
        return blk_error(EINVAL,
                         "'%s': a %s of %" PRIu64 " bytes at offset %" PRIu64
                         " (more than %" PRIu64 ")",
                         w->what, kind, size, off, max);
    }
    buf = g_malloc0((size_t)size + 1);
    ret = size ? blk_pread(w->file, off, buf, (size_t)size) : 0;
    if (ret < 0) {
        return blk_error_prefix(ret, "'%s': cannot read a %s", w->what, kind);
    }
    *out = g_steal_pointer(&buf);
    return 0;
}

/* Invariant 3: "LEN key=value\n" records. */
static int parse_pax(TarWalk *w, const char *buf, size_t size, uint64_t off)
{
    size_t pos = 0;

    while (pos < size) {
        const char *rec = buf + pos, *sp, *eq;
        uint64_t len = 0;
        size_t i = 0;

        while (pos + i < size && rec[i] >= '0' && rec[i] <= '9' && i < 8) {
            len = len * 10 + (uint64_t)(rec[i] - '0');
            i++;
        }
        sp = rec + i;
        if (i == 0 || pos + i >= size || *sp != ' ' || len <= i + 1 || len > size - pos ||
            rec[len - 1] != '\n' ||
            !(eq = memchr(sp, '=', (size_t)(rec + len - 1 - sp)))) {
            return blk_error(EINVAL,
                             "'%s': malformed pax extended header at offset %" PRIu64,
                             w->what, off);
        }
        const char *key = sp + 1, *val = eq + 1;
        size_t klen = (size_t)(eq - key), vlen = (size_t)(rec + len - 1 - val);
        if (klen == 4 && memcmp(key, "path", 4) == 0) {
            g_free(w->pax_path);
            w->pax_path = g_strndup(val, vlen);
        } else if (klen == 4 && memcmp(key, "size", 4) == 0) {
            uint64_t v = 0;
            if (vlen == 0 || vlen > 19) {
                return blk_error(EINVAL, "'%s': pax size '%.*s' is not a number", w->what,
                                 (int)MIN(vlen, 32u), val);
            }
            for (size_t k = 0; k < vlen; k++) {
                if (val[k] < '0' || val[k] > '9') {
                    return blk_error(EINVAL, "'%s': pax size is not a number", w->what);
                }
                v = v * 10 + (uint64_t)(val[k] - '0'); /* 19 digits: no wrap */
            }
            if (v > INT64_MAX) {
                return blk_error(EINVAL, "'%s': pax size %" PRIu64 " is too large",
                                 w->what, v);
            }
            w->pax_size = v;
            w->has_pax_size = true;
        } else if (klen > 11 && memcmp(key, "GNU.sparse.", 11) == 0) {
            w->pax_sparse = true;
        }
        pos += (size_t)len;
    }
    return 0;
}

int blk_tar_walk(BlkNode *file, const char *what, BlkTarVisit visit, void *opaque)
{
    TarWalk w = {.file = file, .what = what};
    uint64_t off = 0, end = file->size;
    int ret = 0;

    for (;;) {
        uint8_t b[BLK_TAR_BLOCK];
        BlkTarHeader h;
        uint64_t data, size, padded, next;

        if (off == end) {
            ret = 0; /* invariant 2: no end blocks */
            break;
        }
        if (end - off < BLK_TAR_BLOCK) {
            ret = blk_error(EINVAL,
                            "'%s' is truncated: the tar header at offset %" PRIu64
                            " is cut short",
                            what, off);
            break;
        }
        ret = blk_pread(file, off, b, sizeof(b));
        if (ret < 0) {
            ret = blk_error_prefix(ret, "'%s': cannot read the tar header at %" PRIu64,
                                   what, off);
            break;
        }
        ret = blk_tar_header_decode(b, &h);
        if (ret < 0) {
            ret = blk_error_prefix(ret, "'%s': bad tar header at offset %" PRIu64, what,
                                   off);
            break;
        }
        if (ret == 0) {
            break; /* invariant 1 */
        }
        data = off + BLK_TAR_BLOCK; /* off <= end - 512: no wrap */
        bool member = h.type != BLK_TAR_PAX && h.type != BLK_TAR_PAX_GLOBAL &&
                      h.type != BLK_TAR_GNU_LONGNAME && h.type != BLK_TAR_GNU_LONGLINK;
        size = member && w.has_pax_size ? w.pax_size : h.size;
        /* invariant 2 */
        if (size > end - data) {
            ret = blk_error(EINVAL,
                            "'%s' is truncated: tar member '%s' needs %" PRIu64
                            " bytes at offset %" PRIu64 ", the file has %" PRIu64,
                            what, w.pax_path ? w.pax_path : h.name, size, data, end);
            break;
        }
        padded = ROUND_UP(size, (uint64_t)BLK_TAR_BLOCK); /* size < 2^63 */
        next = data + MIN(padded, end - data);
        if (h.type == BLK_TAR_GNU_LONGNAME) {
            g_free(w.long_name);
            w.long_name = NULL;
            ret = read_small(&w, data, size, BLK_TAR_MAX_NAME, "GNU long name",
                             &w.long_name);
        } else if (h.type == BLK_TAR_PAX) {
            g_autofree char *ext = NULL;
            ret =
                read_small(&w, data, size, BLK_TAR_MAX_EXT, "pax extended header", &ext);
            if (ret == 0) {
                ret = parse_pax(&w, ext, (size_t)size, data);
            }
        } else if (member) {
            g_autofree char *full = NULL;
            const char *name = w.pax_path ? w.pax_path : w.long_name;
            if (!name) {
                full = *h.prefix ? g_strdup_printf("%s/%s", h.prefix, h.name)
                                 : g_strdup(h.name);
                name = full;
            }
            if (strlen(name) > BLK_TAR_MAX_NAME) {
                ret = blk_error(EINVAL, "'%s': a tar member name is too long", what);
                break;
            }
            BlkTarMember m = {.name = name,
                              .offset = data,
                              .size = size,
                              .type = w.pax_sparse ? BLK_TAR_GNU_SPARSE : h.type};
            ret = visit(opaque, &m);
            walk_reset(&w);
        }
        if (ret != 0) {
            break;
        }
        off = next; /* invariant 4: next > off */
    }
    walk_reset(&w);
    return ret;
}
