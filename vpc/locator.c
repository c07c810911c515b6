/*
 * vpc/locator.c: the parent of a VHD differencing disk, from the parent
 * locators of its dynamic header (or the parent's unicode name).
 *
 * Owns: decoding locator data (UTF-16LE paths, UTF-8 file URLs, the
 * UTF-16BE name) into a file name in this host's form.
 *
 * Invariants (cited as "vpc/locator.c invariant N"):
 *  1. A locator is read only within its declared length, at most
 *     VPC_LOCATOR_MAX bytes, and only when offset + length does not
 *     overflow; text that is not valid UTF-16/UTF-8 is skipped.
 *  2. The preference is: W2ru (relative path), MacX (file URL), W2ku
 *     (absolute path), then the parent unicode name (a bare file name).
 *     Windows separators become '/'.  The name is a name read from an
 *     image: the open sequence applies the untrusted-name rules to it.
 */
#include "vpc/vpc.h"

#include "block/endian.h"

#include <errno.h>
#include <string.h>

#define VPC_LOCATOR_MAX 65536u

/* UTF-16 text of n bytes (big- or little-endian) as UTF-8, or NULL. */
static char *utf16_to_utf8(const uint8_t *p, size_t n, bool be)
{
    size_t units = n / 2, len = 0;
    g_autofree gunichar2 *u = g_new(gunichar2, units + 1);

    for (; len < units; len++) {
        uint16_t c = be ? load_be16(p + 2 * len) : load_le16(p + 2 * len);
        if (c == 0) {
            break;
        }
        u[len] = c;
    }
    if (len == 0) {
        return NULL;
    }
    return g_utf16_to_utf8(u, (glong)len, NULL, NULL, NULL);
}

static char *host_path(char *name)
{
    if (!name) {
        return NULL;
    }
    g_strdelimit(name, "\\", '/');
    return name;
}

static int read_locator(BlkNode *file, const VpcLocator *l, char **out)
{
    uint64_t end;
    g_autofree uint8_t *buf = NULL;
    int ret;

    *out = NULL;
    if (l->data_length == 0 || l->data_length > VPC_LOCATOR_MAX ||
        __builtin_add_overflow(l->data_offset, (uint64_t)l->data_length, &end) ||
        end > INT64_MAX) {
        return 0; /* invariant 1: unusable, try the next one */
    }
    buf = g_malloc(l->data_length);
    ret = blk_pread(file, l->data_offset, buf, l->data_length);
    if (ret < 0) {
        return blk_error_prefix(ret, "Could not read a VHD parent locator");
    }
    if (l->platform == VPC_PLAT_MACX) {
        g_autofree char *url = g_strndup((const char *)buf, l->data_length);
        if (g_utf8_validate(url, -1, NULL) && g_str_has_prefix(url, "file://")) {
            *out = g_uri_unescape_string(url + strlen("file://"), NULL);
        }
        return 0;
    }
    *out = host_path(utf16_to_utf8(buf, l->data_length, false));
    return 0;
}

int vpc_parent_name(BlkNode *file, const VpcDynHeader *h, char **name)
{
    static const uint32_t order[] = {VPC_PLAT_W2RU, VPC_PLAT_MACX, VPC_PLAT_W2KU};

    *name = NULL;
    for (size_t k = 0; k < G_N_ELEMENTS(order); k++) {
        for (int i = 0; i < VPC_PARENT_LOCATORS; i++) {
            if (h->loc[i].platform != order[k]) {
                continue;
            }
            int ret = read_locator(file, &h->loc[i], name);
            if (ret < 0) {
                return ret;
            }
            if (*name && **name) {
                return 0;
            }
            g_clear_pointer(name, g_free);
        }
    }
    *name = host_path(utf16_to_utf8(h->parent_name, VPC_PARENT_NAME_SIZE, true));
    if (!*name || !**name) {
        g_clear_pointer(name, g_free);
        return blk_error(EINVAL, "The VHD differencing disk names no parent");
    }
    return 0;
}
