/*
 * block/protocol.c: the protocol table -- which node a name opens.
 *
 * Owns: the table of protocols (the file protocol, NBD, Ceph RBD, SSH, a disk
 * inside an OVA archive (block/ova.c), QEMU's null-co:// device
 * (block/null.c), and the
 * test nodes blkdebug: and record:), choosing one by a name's prefix,
 * opening it or creating what it names, and taking a name apart into its
 * test-node prefixes and the plain name under them.  A new protocol is one
 * entry in protocols[] and its open (and create) function.
 *
 * Invariants (cited as "protocol.c invariant N"):
 *  1. A name is matched against the entries in table order; the first
 *     entry with a prefix the name starts with wins; a name no prefix
 *     matches is a file (the last entry, which has no prefixes).
 *  2. Only names the caller gave (BLK_OPEN_USER_NAME) may select anything
 *     but the file protocol: a name read from an image (backing file, data
 *     file, extent) always opens the plain file of that name (block.h
 *     invariant 5).
 *  3. A test node's name is PREFIX ARG:NAME; NAME is opened with the same
 *     rules (it may be another test node or a protocol name), and the test
 *     node takes the role's locks for the node it stands in for (block.h
 *     invariant 6).  A test-node prefix without ARG: is refused, never
 *     opened as a file of that name.
 *  4. A protocol whose names are not local paths (is_path false) is never
 *     given to realpath() or resolved against a folder by the layer above.
 *  5. Creating follows the same choice for the caller's name under its
 *     test-node prefixes: an RBD image for "rbd:", a file for a name no
 *     prefix matches (a "file:" name as invariant 7 reads it, as when it
 *     is opened; QEMU iotest 126), a file over SFTP for "ssh:";
 *     a protocol without create refuses it.  Options a
 *     protocol does not have are refused as qemu-img refuses them
 *     ("Invalid parameter 'preallocation'" for RBD, 'cluster_size' for a
 *     file).
 *  6. An NBD export is "created" as QEMU's bdrv_co_create_opts_simple
 *     does it: the export must exist and be at least the size asked for
 *     (NBD cannot grow one); its first 512 bytes are zeroed (no old header
 *     left to probe).  Without preallocation only.
 *  7. A caller's "file:NAME" (QEMU's file protocol) is the path NAME; a
 *     NAME with a ':' before its first '/' (which would read as a protocol
 *     name) is "./NAME", the path QEMU opens and names in its messages
 *     and the image's name (QEMU iotest 126).
 *  8. A caller's name that no entry selects but that has a ':' before its
 *     first '/' (QEMU's path_has_protocol) names a protocol, as in QEMU:
 *     "Unknown protocol 'P'" (P: what precedes the colon, at most 127
 *     bytes, as QEMU cuts it), or for a protocol QEMU 7.2 has and qimg not
 *     (http, iscsi, ...) "the 'P' protocol is not supported by qimg";
 *     never the file "P:..." (QEMU iotest 126's a:b).  "file:",
 *     "blkverify:" (api/blkverify.c) and "json:" (api/json-name.c) have
 *     their readers; -f file opens any name as a file.
 */
#include "block/block.h"
#include "block/ova.h"
#include "block/rbd.h"
#include "block/ssh.h"

#include <errno.h>
#include <string.h>

/* Split "PREFIX ARG:REST" (invariant 3; blk_open_protocol() checked the
 * colon is there). */
static void split_arg(const char *filename, const char *prefix, char **arg,
                      const char **rest)
{
    const char *p = filename + strlen(prefix);
    const char *colon = strchr(p, ':');

    *arg = g_strndup(p, (gsize)(colon - p));
    *rest = colon + 1;
}

static BlkNode *open_file(const BlkProtocol *p, const char *filename,
                          const BlkOpenOptions *opts, BlkNodeRole role, unsigned flags)
{
    return blk_open_file_opts(filename, opts, role);
}

/* A protocol whose library qimg was built without (what: "RBD (librbd)"). */
G_GNUC_UNUSED static BlkNode *not_built(const char *filename, const char *what)
{
    blk_error(ENOTSUP, "Could not open '%s': qimg was built without %s", filename, what);
    return NULL;
}

static BlkNode *open_nbd(const BlkProtocol *p, const char *filename,
                         const BlkOpenOptions *opts, BlkNodeRole role, unsigned flags)
{
#ifdef QIMG_HAVE_LIBNBD
    return blk_open_nbd(filename, opts->read_only, opts->nbd_context,
                        opts->nbd_reconnect_delay);
#else
    return not_built(filename, "NBD (libnbd)");
#endif
}

static BlkNode *open_null(const BlkProtocol *p, const char *filename,
                          const BlkOpenOptions *opts, BlkNodeRole role, unsigned flags)
{
    return blk_open_null(filename, opts);
}

static BlkNode *open_ova(const BlkProtocol *p, const char *filename,
                         const BlkOpenOptions *opts, BlkNodeRole role, unsigned flags)
{
    return blk_open_ova(filename, opts, flags);
}

static BlkNode *open_blkdebug(const BlkProtocol *p, const char *filename,
                              const BlkOpenOptions *opts, BlkNodeRole role,
                              unsigned flags)
{
    g_autofree char *arg = NULL;
    const char *rest;
    BlkNode *node;

    split_arg(filename, p->prefixes[0], &arg, &rest); /* checked by the caller */
    node = blk_open_faulty(arg, rest, opts->read_only, opts->cache);
    if (!node && *arg && !strchr(arg, '=') && strcmp(arg, "once") != 0) {
        /* QEMU's config file: its words name the whole name */
        blk_error_prefix(-blk_error_code(), "Could not open '%s'", filename);
    }
    if (node && opts->blkdebug_align > 1 &&
        blk_faulty_set_align(node, opts->blkdebug_align) < 0) {
        blk_close(node);
        return NULL;
    }
    return node;
}

static BlkNode *open_record(const BlkProtocol *p, const char *filename,
                            const BlkOpenOptions *opts, BlkNodeRole role, unsigned flags)
{
    g_autofree char *arg = NULL;
    const char *rest;

    split_arg(filename, p->prefixes[0], &arg, &rest); /* checked by the caller */
    BlkNode *child = blk_open_protocol(rest, opts, BLK_ROLE_PROTOCOL, flags);
    return child ? blk_open_record(arg, child) : NULL;
}

static BlkNode *open_rbd(const BlkProtocol *p, const char *filename,
                         const BlkOpenOptions *opts, BlkNodeRole role, unsigned flags)
{
#ifdef QIMG_HAVE_RBD
    return blk_open_rbd(filename, opts);
#else
    return not_built(filename, "RBD (librbd)");
#endif
}

static BlkNode *open_ssh(const BlkProtocol *p, const char *filename,
                         const BlkOpenOptions *opts, BlkNodeRole role, unsigned flags)
{
#ifdef QIMG_HAVE_SSH
    return blk_open_ssh(filename, opts);
#else
    return not_built(filename, "SSH (libssh)");
#endif
}

/* Invariant 5: QEMU's ssh create takes only the size (blk_ssh_create). */
static int create_ssh(const char *filename, uint64_t size, BlkPrealloc prealloc,
                      uint64_t object_size)
{
#ifdef QIMG_HAVE_SSH
    return blk_ssh_create(filename, size, prealloc, object_size);
#else
    return blk_error(ENOTSUP, "qimg was built without SSH (libssh)");
#endif
}

/* Invariant 5. */
static int create_rbd(const char *filename, uint64_t size, BlkPrealloc prealloc,
                      uint64_t object_size)
{
    if (prealloc != BLK_PREALLOC_OFF) {
        return blk_error(EINVAL, "Invalid parameter 'preallocation'");
    }
#ifdef QIMG_HAVE_RBD
    return blk_rbd_create(filename, size, object_size);
#else
    return blk_error(ENOTSUP, "qimg was built without RBD (librbd)");
#endif
}

static int create_file(const char *filename, uint64_t size, BlkPrealloc prealloc,
                       uint64_t object_size)
{
    if (object_size) {
        return blk_error(EINVAL, "Invalid parameter 'cluster_size'");
    }
    if (g_str_has_prefix(filename, "file:")) { /* invariant 5 */
        g_autofree char *path = blk_file_protocol_path(filename);
        return blk_file_create(path, size, prealloc);
    }
    return blk_file_create(filename, size, prealloc);
}

/* Invariant 6. */
static int create_nbd(const char *filename, uint64_t size, BlkPrealloc prealloc,
                      uint64_t object_size)
{
    BlkOpenOptions o = {0}; /* read-write */
    BlkNode *n;
    int ret;

    if (prealloc != BLK_PREALLOC_OFF || object_size) {
        return blk_error(ENOTSUP, "Invalid parameter '%s'",
                         object_size ? "cluster_size" : "preallocation");
    }
    n = blk_open_protocol(filename, &o, BLK_ROLE_PROTOCOL, BLK_OPEN_USER_NAME);
    if (!n) {
        return blk_error_prefix(-EINVAL, "Protocol driver 'nbd' does not support image "
                                         "creation, and opening the image failed");
    }
    if (n->size < size) {
        ret = blk_error(ENOTSUP, "Cannot grow NBD nodes");
    } else {
        ret = blk_pwrite_zeroes(n, 0, MIN(n->size, 512), BLK_REQ_MAY_UNMAP);
        if (ret < 0) {
            blk_error_prefix(ret, "Failed to clear the new image's first sector");
        }
    }
    blk_close(n);
    return ret;
}

static const char *const nbd_prefixes[] = {"nbd:", "nbd+", "nbds:", "nbds+", NULL};
static const char *const rbd_prefixes[] = {"rbd:", NULL};
static const char *const ssh_prefixes[] = {"ssh:", NULL};
static const char *const blkdebug_prefixes[] = {"blkdebug:", NULL};
static const char *const record_prefixes[] = {"record:", NULL};
static const char *const ova_prefixes[] = {"ova:", NULL};
static const char *const null_prefixes[] = {"null-co:", "null-aio:", NULL};

/* Invariant 1: in match order; the file protocol last. */
static const BlkProtocol protocols[] = {
    {.name = "nbd", .prefixes = nbd_prefixes, .open = open_nbd, .create = create_nbd},
    {.name = "rbd", .prefixes = rbd_prefixes, .open = open_rbd, .create = create_rbd},
    {.name = "ssh", .prefixes = ssh_prefixes, .open = open_ssh, .create = create_ssh},
    {.name = "ova", .prefixes = ova_prefixes, .open = open_ova},
    {.name = "null-co", .prefixes = null_prefixes, .open = open_null},
    {.name = "blkdebug",
     .prefixes = blkdebug_prefixes,
     .test_node = true,
     .open = open_blkdebug},
    {.name = "record",
     .prefixes = record_prefixes,
     .test_node = true,
     .open = open_record},
    {.name = "file", .is_path = true, .open = open_file, .create = create_file},
};

const BlkProtocol *blk_protocol_for(const char *filename, unsigned flags)
{
    const BlkProtocol *file = &protocols[G_N_ELEMENTS(protocols) - 1];

    if (!(flags & BLK_OPEN_USER_NAME)) { /* invariant 2 */
        return file;
    }
    for (size_t i = 0; i + 1 < G_N_ELEMENTS(protocols); i++) {
        for (const char *const *pre = protocols[i].prefixes; *pre; pre++) {
            if (g_str_has_prefix(filename, *pre)) {
                return &protocols[i];
            }
        }
    }
    return file;
}

bool blk_protocol_is_path(const char *filename, unsigned flags)
{
    return blk_protocol_for(blk_plain_name(filename), flags)->is_path;
}

BlkNode *blk_open_protocol(const char *filename, const BlkOpenOptions *opts,
                           BlkNodeRole role, unsigned flags)
{
    const BlkProtocol *p = blk_protocol_for(filename, flags);
    BlkNode *node;

    if (!p->test_node) {
        return p->open(p, filename, opts, role, flags);
    }
    if (!strchr(filename + strlen(p->prefixes[0]), ':')) { /* invariant 3 */
        blk_error(EINVAL,
                  "Could not open '%s': expected blkdebug:RULES:FILE or "
                  "record:LOG:FILE",
                  filename);
        return NULL;
    }
    node = p->open(p, filename, opts, role, flags);
    /* invariant 3: the test node passes the role's locks down */
    if (node && role != BLK_ROLE_PROTOCOL) {
        int ret = blk_set_role_perm(node, role, opts);
        if (ret < 0) {
            blk_error_prefix(ret, "Could not open '%s'", filename);
            blk_close(node);
            return NULL;
        }
    }
    return node;
}

int blk_create_protocol(const char *filename, uint64_t size, BlkPrealloc prealloc,
                        uint64_t object_size)
{
    const char *name = blk_plain_name(filename);
    const BlkProtocol *p = blk_protocol_for(name, BLK_OPEN_USER_NAME);

    if (!p->create) { /* invariant 5 */
        return blk_error(ENOTSUP,
                         "Could not create '%s': the %s protocol cannot create "
                         "images",
                         name, p->name);
    }
    return p->create(name, size, prealloc, object_size);
}

/* Invariant 8: QEMU 7.2's protocol names qimg does not open. */
static const char *const qemu_only_protocols[] = {
    "fat",          "ftp",        "ftps",        "gluster", "gluster+rdma", "gluster+tcp",
    "gluster+unix", "host_cdrom", "host_device", "http",    "https",        "iscsi",
    "iser",         "nfs",        "nvme",        NULL,
};

int blk_protocol_check_name(const char *filename)
{
    const char *name = blk_plain_name(filename);
    size_t len = strcspn(name, ":/");
    g_autofree char *proto = NULL;

    if (name[len] != ':' || g_str_has_prefix(name, "file:") ||
        g_str_has_prefix(name, "blkverify:") || g_str_has_prefix(name, "json:") ||
        !blk_protocol_for(name, BLK_OPEN_USER_NAME)->is_path) {
        return 0;
    }
    proto = g_strndup(name, MIN(len, 127));
    for (const char *const *q = qemu_only_protocols; *q; q++) {
        if (strcmp(proto, *q) == 0) {
            return blk_error(ENOTSUP, "the '%s' protocol is not supported by qimg",
                             proto);
        }
    }
    return blk_error(ENOENT, "Unknown protocol '%s'", proto);
}

/* Invariant 7. */
char *blk_file_protocol_path(const char *filename)
{
    const char *name = filename + strlen("file:");
    const char *colon = strchr(name, ':'), *slash = strchr(name, '/');

    if (colon && (!slash || colon < slash)) {
        return g_strconcat("./", name, NULL);
    }
    return g_strdup(name);
}

const char *blk_plain_name(const char *filename)
{
    const char *p = filename;

    for (;;) {
        const BlkProtocol *proto = blk_protocol_for(p, BLK_OPEN_USER_NAME);
        const char *colon;

        if (!proto->test_node) {
            return p;
        }
        colon = strchr(p + strlen(proto->prefixes[0]), ':');
        if (!colon) {
            return p;
        }
        p = colon + 1;
    }
}
