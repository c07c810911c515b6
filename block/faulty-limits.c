/*
 * block/faulty-limits.c: the request limits of the fault node
 * (block/faulty.c invariant 6), QEMU's blkdebug keys align, max-transfer,
 * opt-write-zero, max-write-zero, opt-discard and max-discard.
 *
 * Owns: parsing one limit of a "limits,KEY=N,..." rule and QEMU's checks
 * of the limits against each other and the child's alignment.
 *
 * Facts learnt from running qemu-io 7.2 with such limits:
 *  1. A value of 2^31 - 1 or more, an align that is not a power of two, or
 *     a limit that is not a multiple of max(align, the child's alignment)
 *     (max-write-zero and max-discard also of their opt- values) is
 *     refused: "Cannot meet constraints with KEY N".
 */
#include "block/block.h"

#include <errno.h>
#include <string.h>

int blk_faulty_parse_limit(const char *item, BlkLimits *l)
{
    static const char *const keys[] = {"align",          "max-transfer", "opt-write-zero",
                                       "max-write-zero", "opt-discard",  "max-discard"};
    uint32_t *fields[] = {&l->align,          &l->max_transfer, &l->opt_write_zero,
                          &l->max_write_zero, &l->opt_discard,  &l->max_discard};
    const char *eq = strchr(item, '=');
    char *end = NULL;

    for (size_t i = 0; eq && i < G_N_ELEMENTS(keys); i++) {
        if (strlen(keys[i]) != (size_t)(eq - item) ||
            strncmp(item, keys[i], strlen(keys[i])) != 0) {
            continue;
        }
        guint64 v = g_ascii_strtoull(eq + 1, &end, 10);
        if (!eq[1] || *end) {
            break;
        }
        if (v >= INT32_MAX) {
            return blk_error(EINVAL, "Cannot meet constraints with %s %" G_GUINT64_FORMAT,
                             keys[i], v);
        }
        *fields[i] = (uint32_t)v;
        return 0;
    }
    return blk_error(EINVAL, "Invalid blkdebug limit '%s'", item);
}

int blk_faulty_check_limits(const BlkLimits *l, uint32_t child_align)
{
    uint64_t a = MAX(l->align, child_align ? child_align : 1);
    const struct {
        const char *key;
        uint32_t v, multiple_of;
    } checks[] = {
        {"max-transfer", l->max_transfer, (uint32_t)a},
        {"opt-write-zero", l->opt_write_zero, (uint32_t)a},
        {"max-write-zero", l->max_write_zero, (uint32_t)MAX(l->opt_write_zero, a)},
        {"opt-discard", l->opt_discard, (uint32_t)a},
        {"max-discard", l->max_discard, (uint32_t)MAX(l->opt_discard, a)},
    };

    if (l->align & (l->align - 1)) {
        return blk_error(EINVAL, "Cannot meet constraints with align %u", l->align);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(checks); i++) {
        if (checks[i].v && checks[i].v % checks[i].multiple_of) {
            return blk_error(EINVAL, "Cannot meet constraints with %s %u", checks[i].key,
                             checks[i].v);
        }
    }
    return 0;
}
