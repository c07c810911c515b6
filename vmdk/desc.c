/*
 * vmdk/desc.c: the text descriptor -- reading its values as QEMU 7.2 finds
 * them, its extent lines, and writing a new one.
 *
 * Owns: the descriptor parser and writer; nothing here opens a file.
 *
 * Invariants (cited as "desc.c invariant N"):
 *  1. Input is a NUL-terminated buffer of at most VMDK_DESC_MAX bytes (the
 *     caller's read bound, QEMU's); every scan is bounded by it and linear
 *     in its length (no rescans from each line to the end).
 *  2. Values are found as QEMU finds them: the first occurrence of the key
 *     anywhere in the text ("CID" is also found inside "parentCID" if that
 *     comes first), the quoted value after "KEY=\"".  A value that does not
 *     fit QEMU's buffer is an error, never truncated.
 *  3. An extent line is "ACCESS SECTORS TYPE \"NAME\" [OFFSET]", read
 *     field by field as QEMU's sscanf reads it (ACCESS and TYPE up to 10
 *     characters, NAME up to 511), but within one line: a line does not
 *     borrow fields from the next one (QEMU's sscanf does, so a blank line
 *     before an extent line counts it twice there).  Lines whose access is
 *     not RW, whose size is not positive or whose type is unknown are
 *     skipped; a FLAT line without an offset, or a line with fields its
 *     type does not take, is "Invalid extent line: LINE".
 */
#include "vmdk/vmdk.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Invariant 2: the quoted value of key (QEMU's vmdk_parse_description). */
int vmdk_desc_value(const char *desc, const char *key, char *out, size_t outlen)
{
    const char *p = strstr(desc, key), *end;
    size_t n;

    if (!p) {
        return -ENOENT;
    }
    /* skip KEY and the two characters after it ("=\""), as QEMU does */
    p += strlen(key);
    for (int i = 0; i < 2; i++) {
        if (!*p) {
            return -EINVAL;
        }
        p++;
    }
    end = strchr(p, '"');
    if (!end) {
        return -EINVAL;
    }
    n = (size_t)(end - p);
    if (n + 1 > outlen) {
        return -EINVAL;
    }
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

int vmdk_desc_cid(const char *desc, bool parent, uint32_t *cid)
{
    const char *key = parent ? "parentCID" : "CID";
    const char *p = strstr(desc, key);
    char *end;
    unsigned long long v;

    if (!p) {
        return -EINVAL;
    }
    /* QEMU skips KEY and one character ('='), then reads %x */
    p += strlen(key);
    if (!*p) {
        return -EINVAL;
    }
    p++;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
        p++;
    }
    if (!g_ascii_isxdigit(*p)) {
        return -EINVAL;
    }
    v = g_ascii_strtoull(p, &end, 16);
    *cid = (uint32_t)v; /* scanf's %x into 32 bits keeps the low bits */
    return 0;
}

int vmdk_desc_parent_hint(const char *desc, char **name)
{
    static const char key[] = "parentFileNameHint";
    const char *p = strstr(desc, key), *end;

    *name = NULL;
    if (!p) {
        return 0;
    }
    /* QEMU skips "parentFileNameHint=\"" blindly: 20 characters */
    p += sizeof(key) - 1;
    for (int i = 0; i < 2; i++) {
        if (!*p) {
            return -EINVAL;
        }
        p++;
    }
    end = strchr(p, '"');
    if (!end || (size_t)(end - p) > VMDK_MAX_PARENT_NAME) {
        return -EINVAL;
    }
    *name = g_strndup(p, (gsize)(end - p));
    return 0;
}

/* ---- extent lines (invariant 3) ---- */

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

static void skip_space(const char **p, const char *end)
{
    while (*p < end && is_space(**p)) {
        (*p)++;
    }
}

/* %Ns: up to max non-space characters after spaces. */
static bool scan_word(const char **p, const char *end, char *out, size_t max)
{
    size_t n = 0;

    skip_space(p, end);
    while (*p < end && !is_space(**p) && n < max) {
        out[n++] = *(*p)++;
    }
    out[n] = '\0';
    return n > 0;
}

/* %SCNd64 after spaces; false if no digits or out of range. */
static bool scan_int(const char **p, const char *end, int64_t *v)
{
    const char *q;
    bool neg = false;
    uint64_t acc = 0;
    bool any = false, big = false;

    skip_space(p, end);
    q = *p;
    if (q < end && (*q == '+' || *q == '-')) {
        neg = *q == '-';
        q++;
    }
    while (q < end && *q >= '0' && *q <= '9') {
        if (vmdk_mul(acc, 10, &acc) || vmdk_add(acc, (uint64_t)(*q - '0'), &acc) ||
            acc > (uint64_t)INT64_MAX) {
            big = true;
        }
        any = true;
        q++;
    }
    if (!any) {
        return false;
    }
    *p = q;
    if (big) {
        *v = neg ? INT64_MIN : INT64_MAX; /* scanf's ERANGE value */
        return true;
    }
    *v = neg ? -(int64_t)acc : (int64_t)acc;
    return true;
}

/* The fields of one line; how many sscanf would have assigned. */
static int scan_line(const char *p, const char *end, VmdkExtentLine *l)
{
    int matches = 0;
    size_t n = 0;

    if (!scan_word(&p, end, l->access, 10)) {
        return matches;
    }
    matches++;
    if (!scan_int(&p, end, &l->sectors)) {
        return matches;
    }
    matches++;
    if (!scan_word(&p, end, l->type, 10)) {
        return matches;
    }
    matches++;
    skip_space(&p, end);
    if (p == end || *p != '"') {
        return matches;
    }
    p++;
    while (p < end && *p != '"' && *p != '\r' && n < VMDK_MAX_EXTENT_NAME) {
        l->name[n++] = *p++;
    }
    l->name[n] = '\0';
    if (n == 0) {
        return matches;
    }
    matches++;
    if (p == end || *p != '"') {
        return matches;
    }
    p++;
    if (scan_int(&p, end, &l->offset)) {
        matches++;
    }
    return matches;
}

static bool known_type(const char *t)
{
    static const char *const types[] = {"FLAT", "SPARSE", "VMFS", "VMFSSPARSE",
                                        "SESPARSE"};
    for (size_t i = 0; i < G_N_ELEMENTS(types); i++) {
        if (strcmp(t, types[i]) == 0) {
            return true;
        }
    }
    return false;
}

int vmdk_desc_extents(const char *desc, GArray *out)
{
    const char *p = desc;

    while (*p) {
        const char *nl = strchr(p, '\n');
        const char *end = nl ? nl : p + strlen(p);
        VmdkExtentLine l = {.offset = -1};
        int matches = scan_line(p, end, &l);
        bool invalid = false;

        if (matches >= 4 && strcmp(l.access, "RW") == 0) {
            if (strcmp(l.type, "FLAT") == 0) {
                invalid = matches != 5 || l.offset < 0;
            } else if (strcmp(l.type, "VMFS") == 0) {
                invalid = matches != 4;
                l.offset = 0;
            } else {
                invalid = matches != 4;
            }
            if (invalid) {
                return blk_error(EINVAL, "Invalid extent line: %.*s", (int)(end - p), p);
            }
            if (l.sectors > 0 && known_type(l.type)) {
                if (out->len >= VMDK_MAX_EXTENTS) {
                    return blk_error(EFBIG, "More than %u extents", VMDK_MAX_EXTENTS);
                }
                g_array_append_val(out, l);
            }
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}
