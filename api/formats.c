/*
 * api/formats.c: the format table -- the built-in format drivers, and the
 * formats qimg recognises by their magic but does not read.
 *
 * Owns: which drivers the driver table (block.c invariant 4) holds at
 * first use, the probes of the formats qemu-img 7.2 reads and qimg does
 * not, and the refusal of those formats.  Each format driver lives in a
 * folder of its own (raw/, qcow2/, ...); adding one is one line in
 * builtin[] (and the line of its unread entry goes).
 *
 * Invariants (cited as "formats.c invariant N"):
 *  1. Probing is QEMU 7.2's: the first BLK_PROBE_BUF_SIZE bytes (and the
 *     file name, for dmg) are shown to every format's probe, the highest
 *     score wins, raw's 1 is the fallback.  A probe looks at magic only;
 *     its scores are QEMU's (100 for a magic, 2 for cloop's script and a
 *     ".dmg" name).
 *  2. A file whose magic names a format qimg does not read is refused
 *     naming the format, never read as raw: open, create and measure of
 *     an unread format fail with "... the 'bochs' format (Bochs)
 *     is not supported by qimg", whether it was probed or named (-f).
 *  3. The probes of unread formats are the same gate for a probed raw
 *     image's block 0 (raw.c invariant 4): a guest cannot write a header
 *     of any format QEMU would probe.
 *  4. The drivers qimg lists (qimg_format_list, the "Supported formats:"
 *     line of qemu-img's help) are the ones it opens: the registered
 *     drivers that read their format (-f NAME) and the nodes only a json:
 *     name or --image-opts builds (nodes_by_options[]); never a QEMU
 *     driver qimg refuses or knows by its magic only.
 */
#include "api/api.h"
#include "luks/luks.h"
#include "block/blkverify.h"
#include "block/rbd.h"
#include "block/ssh.h"
#include "qcow2/qcow2.h"
#include "qed/qed.h"
#include "raw/raw.h"
#include "vdi/vdi.h"
#include "vhdx/vhdx.h"
#include "vmdk/vmdk.h"
#include "vpc/vpc.h"

#include <errno.h>
#include <string.h>

static uint32_t le32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint32_t be32_at(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

static bool magic_at(const uint8_t *buf, size_t len, size_t off, const char *magic,
                     size_t n)
{
    return len >= off + n && memcmp(buf + off, magic, n) == 0;
}

/* ---- probes of the formats qimg does not read (invariant 1: QEMU's) ---- */

/* qcow version 1: QFI\xfb and version 1 in a 48-byte header. */
static int qcow1_probe(const uint8_t *buf, size_t len, const char *filename)
{
    return len >= 48 && be32_at(buf) == 0x514649fbu && be32_at(buf + 4) == 1 ? 100 : 0;
}

static int parallels_probe(const uint8_t *buf, size_t len, const char *filename)
{
    return len >= 64 &&
                   (magic_at(buf, len, 0, "WithoutFreeSpace", 16) ||
                    magic_at(buf, len, 0, "WithouFreSpacExt", 16)) &&
                   le32_at(buf + 16) == 2
               ? 100
               : 0;
}

/* Bochs: NUL-terminated magic, type and subtype in a 512-byte header. */
static int bochs_probe(const uint8_t *buf, size_t len, const char *filename)
{
    uint32_t v;

    if (len < 512 || !magic_at(buf, len, 0, "Bochs Virtual HD Image", 23) ||
        !magic_at(buf, len, 32, "Redolog", 8) || !magic_at(buf, len, 48, "Growing", 8)) {
        return 0;
    }
    v = le32_at(buf + 64);
    return v == 0x00020000u || v == 0x00010000u ? 100 : 0;
}

static int cloop_probe(const uint8_t *buf, size_t len, const char *filename)
{
    static const char magic[] = "#!/bin/sh\n#V2.0 Format\n"
                                "modprobe cloop file=$0 && mount -r -t iso9660 "
                                "/dev/cloop $1\n";
    return magic_at(buf, len, 0, magic, sizeof(magic) - 1) ? 2 : 0;
}

/* dmg: QEMU knows it by the name only. */
static int dmg_probe(const uint8_t *buf, size_t len, const char *filename)
{
    size_t n = filename ? strlen(filename) : 0;
    return n > 4 && strcmp(filename + n - 4, ".dmg") == 0 ? 2 : 0;
}

#define UNREAD(fmt, long_name, probe_fn)                                                 \
    {                                                                                    \
        .format_name = fmt, .unsupported = long_name, .probe = probe_fn,                 \
    }

static const BlkDriver unread[] = {
    UNREAD("qcow", "QEMU qcow version 1", qcow1_probe),
    UNREAD("parallels", "Parallels", parallels_probe),
    UNREAD("bochs", "Bochs", bochs_probe),
    UNREAD("cloop", "compressed loop", cloop_probe),
    UNREAD("dmg", "Apple disk image", dmg_probe),
};

/* The drivers qimg has, each from its own folder. */
static const BlkDriver *const builtin[] = {
    &blk_qcow2_driver,    &blk_raw_driver,       &blk_luks_driver, &blk_vmdk_driver,
    &blk_vpc_driver,      &blk_vhdx_driver,      &blk_vdi_driver,  &blk_qed_driver,
    &api_ova_driver,     /* an OVA archive: its listing (api/ova.c) */
    &blk_null_co_driver, /* the null node as a format: "-f null-co" */
    &blk_null_aio_driver, &blk_blkverify_driver, /* "-f blkverify blkverify:RAW:IMAGE":
                                                    the node */
#ifdef QIMG_HAVE_RBD
    &blk_rbd_driver, /* the RBD node as a format: "-f rbd", json: "driver": "rbd" */
#endif
#ifdef QIMG_HAVE_SSH
    &blk_ssh_driver, /* driver=ssh: the ssh node is the image (json-name.c 18) */
#endif
#ifdef QIMG_HAVE_LIBNBD
    &blk_nbd_driver, /* driver=nbd: the NBD node is the image (json-name.c 9) */
#endif
};

static gpointer register_once(gpointer unused)
{
    (void)unused;
    for (size_t i = 0; i < G_N_ELEMENTS(unread); i++) {
        blk_driver_register(&unread[i]);
    }
    /* a driver replaces the unread entry of its name (block.c invariant 4) */
    for (size_t i = 0; i < G_N_ELEMENTS(builtin); i++) {
        blk_driver_register(builtin[i]);
    }
    return NULL;
}

void api_register_drivers(void)
{
    static GOnce once = G_ONCE_INIT;
    g_once(&once, register_once, NULL);
}

/* Invariant 4: the nodes json-name.c, json-blkdebug.c, api/quorum.c and
 * open-opts.c (api_file_driver_top) build from options alone. */
static const char *const nodes_by_options[] = {
    "blkdebug", "copy-on-read", "file", "host_cdrom", "host_device", "quorum",
};

static gint name_cmp(gconstpointer a, gconstpointer b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

char **qimg_format_list(void)
{
    g_autoptr(GPtrArray) names = g_ptr_array_new();
    char **list;
    guint n = 0;

    api_register_drivers();
    blk_driver_names(names);
    for (size_t i = 0; i < G_N_ELEMENTS(nodes_by_options); i++) {
        g_ptr_array_add(names, (gpointer)nodes_by_options[i]);
    }
    g_ptr_array_sort(names, name_cmp);
    list = g_new0(char *, names->len + 1);
    for (guint i = 0; i < names->len; i++) { /* sorted: a repeat follows its twin */
        const char *name = g_ptr_array_index(names, i);
        if (n == 0 || strcmp(list[n - 1], name) != 0) {
            list[n++] = g_strdup(name);
        }
    }
    return list;
}

int api_format_usable(const BlkDriver *drv)
{
    if (drv->unsupported) { /* invariant 2 */
        return blk_error(ENOTSUP, "the '%s' format (%s) is not supported by qimg",
                         drv->format_name, drv->unsupported);
    }
    return 0;
}
