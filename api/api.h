/*
 * api/api.h: what the files of api/ share -- the image handle behind the
 * public QimgImage, the open sequence (format, probing, backing chain), the
 * conversions between public and internal types, and the handle's quiesce
 * steps.  Nothing here is public; tools/ never sees it.
 *
 * Owns: struct QimgImage.
 *
 * Invariants (cited as "api.h invariant N"):
 *  1. A handle wraps one node (BlkNode) and, for each backing node below
 *     it, a handle of its own (qimg_image_backing()); only the top handle
 *     owns the node chain and closes it.
 *  2. What belongs to the handle, not to the node, lives here: the buffered
 *     vmstate writer/reader (api/vmstate.c) and the asynchronous requests
 *     (api/aio.c, drained first).  Before the node is flushed or
 *     closed the handle quiesces it -- api_quiesce() drains the buffered
 *     writes, api_release() also invalidates an open stream -- so no layer
 *     below calls back up.
 *  3. Internal functions return 0 / -errno with a message (block.h
 *     invariant 2); GError appears only where a public function returns.
 */
#ifndef QIMG_API_H
#define QIMG_API_H

#include "block/block.h"
#include "block/quorum.h"
#include "block/rbd.h"
#include "qimg/qimg.h"
#include "qimg/snapshot.h"

struct ApiVmstate;
struct ApiAio;

struct QimgImage {
    BlkNode *node;
    QimgImage *backing;         /* handle of node->backing, or NULL (owned) */
    bool owns_node;             /* the top handle: closes the chain */
    struct ApiVmstate *vmstate; /* api/vmstate.c, or NULL (invariant 2) */
    struct ApiAio *aio;         /* api/aio.c, or NULL (invariant 2) */
};

/* ---- image.c: one request as the public calls run it ---- */

typedef enum ApiIoOp {
    API_IO_READ,
    API_IO_WRITE,
    API_IO_ZERO,
    API_IO_DISCARD,
    API_IO_FLUSH,
} ApiIoOp;

/* Run one request (image.c invariant 2 included; a flush quiesces the
 * handle first): 0 or -errno with a message.  flags are BLK_REQ_*. */
int api_io(QimgImage *img, ApiIoOp op, uint64_t offset, uint64_t len, const BlkIOV *q,
           unsigned flags);
/* A write of [offset, +len) with the bytes of protocol node src at
 * src_offset, moved by the kernel (BlkDriver.copy_in; invariant 2
 * included): 0 or -errno (-ENOTSUP where it cannot). */
int api_copy_in(QimgImage *img, uint64_t offset, uint64_t len, BlkNode *src,
                uint64_t src_offset);
/* The public error for a failed api_io(): "Could not read 'file': ...". */
void api_io_error(QimgImage *img, ApiIoOp op, int ret, GError **error);
/* qimg_image_block_status (chain) or qimg_image_block_status_layer. */
gboolean api_block_status(QimgImage *img, bool layer, uint64_t offset, uint64_t len,
                          QimgExtent *out, GError **error);
/* qimg_image_pwrite_compressed on an iovec. */
gboolean api_pwrite_compressed(QimgImage *img, uint64_t offset, const BlkIOV *q,
                               GError **error);

/* ---- aio.c ---- */

/* Wait for every asynchronous request and run its callback (aio.h rule 6),
 * then free the context.  Before the handle is flushed and closed. */
void api_aio_close(QimgImage *img);

/* ---- abi.c: the growable public structs (qimg.h ABI rules 1, 2) ---- */

/* Copy the caller's struct src (NULL: defaults) of public type 'type' into
 * the full-size dst (abi.c invariants 1, 2).  FALSE with error set if src
 * cannot be honoured. */
gboolean api_struct_in(void *dst, size_t dst_size, const void *src, const char *type,
                       GError **error);
/* Write the full-size result src into the caller's struct dst, within its
 * struct_size (abi.c invariant 3). */
void api_struct_out(void *dst, const void *src, size_t src_size);
/* The caller's snapshot parameters (api_struct_in), checked: a name, an
 * icount below 2^63. */
gboolean api_snapshot_params_in(QimgSnapshotParams *dst, const QimgSnapshotParams *src,
                                GError **error);
/* The driver's icount of params: -1 unless has_icount (ABI rule 2). */
int64_t api_snapshot_icount(const QimgSnapshotParams *params);

/* ---- debug.c ---- */

/* Resume every request stopped at a breakpoint (api/debug.c invariant 2). */
void api_debug_release(QimgImage *img);

/* ---- error.c ---- */

/* Turn ret (< 0; 0: the recorded errno) and the recorded message (or
 * strerror) into a GError, with "PREFIX: " in front when fmt is not NULL.
 * Clears the recorded message (error.c invariant 1). */
void blk_error_propagate(GError **error, int ret, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

/* The error of requests that run in parallel (api/error.c invariant 1):
 * the one at the lowest offset.  The caller serialises the calls. */
typedef struct ApiLowestError {
    GError *error; /* NULL: none yet */
    uint64_t offset;
} ApiLowestError;
/* Takes err; true when it is the first error offered. */
bool api_lowest_error_offer(ApiLowestError *le, uint64_t offset, GError *err);
void api_lowest_error_clear(ApiLowestError *le);

/* ---- formats.c: the format table ---- */

/* Register the built-in drivers and the unread formats' probes once
 * (idempotent, thread-safe). */
void api_register_drivers(void);
/* api/ova.c: an OVA archive opened as itself (info), and the open of its
 * only disk that replaces the archive's node img (closed) for any other
 * open (api/ova.c invariant 2). */
extern const BlkDriver api_ova_driver;
BlkNode *api_ova_open_disk(BlkNode *img, const char *filename, const BlkOpenOptions *opts,
                           bool user_name, GError **error);
/* 0, or -ENOTSUP with the message when drv is a format qimg does not
 * read (formats.c invariant 2). */
int api_format_usable(const BlkDriver *drv);

/* ---- open.c: the open sequence ---- */

/* Open 'filename' with format opts->format (NULL: probe), including its
 * backing chain unless opts->no_backing.  'chain' holds the canonical paths
 * already in the chain (loop detection); NULL at the top, where 'filename'
 * is the caller's own name (block.h invariant 5), non-NULL for backing
 * files. */
BlkNode *api_open_node(const char *filename, const BlkOpenOptions *opts, GSList *chain,
                       GError **error);
/* Open img's backing file by itself (opts: the layer's), with the name
 * and options the chain's open would use (open.c invariant 6); *path:
 * the file a json: backing name names (g_free), NULL for another name. */
BlkNode *api_open_backing(BlkNode *img, const BlkOpenOptions *opts, char **path,
                          GError **error);
/* Open a format driver on an already open protocol node (tests put a test
 * node there); takes ownership of file, even on failure. */
BlkNode *api_open_node_on(BlkNode *file, const char *filename, const BlkOpenOptions *opts,
                          GError **error);
/* A handle for node (and its backing chain, invariant 1); owns node. */
QimgImage *api_image_new(BlkNode *node);
/* Release the handles (api_release on each) and close the node chain. */
void api_image_destroy(QimgImage *img);

/* ---- convert.c: public <-> internal types ---- */

void api_open_options(const QimgOpenOptions *in, BlkOpenOptions *out);
BlkCacheMode api_cache_mode(QimgCacheMode mode);
BlkPrealloc api_prealloc(QimgPrealloc mode);
void api_create_options(const QimgCreateOptions *in, BlkCreateOptions *out);
/* Move a driver's snapshot entries into public ones (strings move). */
void api_snapshot_info_move(BlkSnapshotInfo *in, QimgSnapshotInfo *out);
GPtrArray *api_snapshot_list_move(GArray *blk_list);
/* An empty public snapshot list (QimgSnapshotInfo *, freed with it). */
GPtrArray *api_snapshot_list_new(void);

/* api/quorum.c: a quorum node the caller's options name (its invariant
 * 1): its options, and each child's options and name. */
typedef struct ApiQuorumChild {
    BlkOpenOptions o;
    char *path;
} ApiQuorumChild;
typedef struct ApiQuorum {
    BlkQuorumOptions o;
    bool node;        /* "driver": "quorum": the node is the image */
    GArray *children; /* ApiQuorumChild; NULL: no quorum */
} ApiQuorum;

/* api/blkverify.c: a blkverify node the caller's options name (its
 * invariant 1): each child's options and name (the quorum children's
 * kind). */
typedef struct ApiBlkverify {
    bool set;                 /* a blkverify node is named */
    bool node;                /* "driver": "blkverify": the node is the image */
    ApiQuorumChild raw, test; /* the raw copy, the image under test */
} ApiBlkverify;

/* json-blkdebug.c invariant 6: QEMU's name of a blkdebug node, but for
 * its image: the plain form's config, the json: form's members. */
typedef struct ApiBlkdebugName {
    char *config;    /* QEMU's config option, "" for none */
    GPtrArray *keys; /* the json: form's members but "image" (g_free) */
    GPtrArray *vals; /* their JSON text (g_free) */
    bool strong;     /* options beside config: only the json: form */
} ApiBlkdebugName;

/* json-name.c: the layers a caller's options name (invariant 4), kept for
 * the open: o->backing_opts and the paths point in here. */
typedef struct ApiOpenLayers {
    BlkOpenOptions backing;
    char *backing_path;
    char *data_file_path;
    /* a null data file's options (json-name.c invariant 16) */
    BlkOpenOptions data_file;
    GHashTable *format_opts;         /* BlkOpenOptions.format_opts */
    GHashTable *backing_format_opts; /* the backing layer's */
    /* the keys of the image's own backing chain (json-name.c invariant 10):
     * index d for the layer d + 1 below, "" for none */
    GPtrArray *backing_keys;
    BlkRbdLocation rbd; /* the image is an RBD image (invariant 11): o->rbd */
    /* the rules of a blkdebug node over the image's format (json-name.c
     * invariant 14), or NULL */
    char *blkdebug_rules;
    /* the format over the image's format (json-name.c invariant 15), or
     * NULL */
    char *outer_format;
    /* a quorum node (api/quorum.c), or no children */
    ApiQuorum quorum;
    /* a blkverify node (api/blkverify.c), or none (!set) */
    ApiBlkverify blkverify;
    /* the JSON text of the json: name's members that are not strings
     * (json-flat.c invariant 2), or NULL */
    GHashTable *json_typed;
    /* QEMU's name for the image's file node where it is not the name
     * opened (json-blkdebug.c invariant 6), or NULL */
    char *file_qemu_name;
    /* QEMU's name for the blkdebug node of blkdebug_rules, but for its
     * image (json-blkdebug.c invariant 6), or NULL */
    ApiBlkdebugName *blkdebug_name;
} ApiOpenLayers;
void api_open_layers_clear(ApiOpenLayers *l);

/* json-name.c: a "json:{...}" name, or --image-opts' key=value list, onto
 * *o and the image file's *path (g_free); the backing and data-file
 * options into *layers. */
gboolean api_json_name(const char *name, BlkOpenOptions *o, char **path,
                       ApiOpenLayers *layers, GError **error);
gboolean api_image_opts_name(const char *opts, BlkOpenOptions *o, char **path,
                             ApiOpenLayers *layers, GError **error);
/* A "json:{...}" backing file name read from an image (json-name.c
 * invariant 1): o->format is the image's backing format (or NULL). */
gboolean api_json_backing_name(const char *name, BlkOpenOptions *o, char **path,
                               GError **error);
/* A name (may be NULL: the options alone) with key=value options given
 * beside it (json-name.c invariant 7). */
gboolean api_options_name(const char *name, const char *options, BlkOpenOptions *o,
                          char **path, ApiOpenLayers *layers, GError **error);

/* json-data-file.c: the "data-file" options (prefix dropped) onto the data
 * file's name *path (g_free) and, for a null node, its options *d
 * (json-name.c invariants 5, 13, 16). */
gboolean api_data_file_options(GHashTable *sub, char **path, BlkOpenOptions *d,
                               GError **error);
/* open.c: QEMU's name of a format node over a file node named file_name:
 * that name, or json:{"driver": FORMAT, "file": {the file's options}}
 * (rbd-name.c invariant 5's order). */
char *api_qemu_format_name(const char *format, const char *file_name);
/* json-blkdebug.c: the blkdebug node's options under prefix ("file.")
 * taken out of flat as its "blkdebug:RULES:FILE" *name (g_free), and
 * QEMU's name for the node in *qemu_name (g_free; may be NULL: not
 * wanted), with the JSON types of typed (json-flat.c invariant 2; may be
 * NULL). */
gboolean api_blkdebug_options(GHashTable *flat, const char *prefix, GHashTable *typed,
                              char **name, char **qemu_name, GError **error);
/* json-blkdebug.c: "driver": "blkdebug" as the image (its invariant 5):
 * the options of the layer below (a new table), the rules of a node over
 * a format in layers->blkdebug_rules (none when the node is over the
 * file, then named "blkdebug:RULES:FILE" under raw); NULL with error
 * set. */
GHashTable *api_blkdebug_top(GHashTable *flat, ApiOpenLayers *layers, GError **error);
/* json-blkdebug.c: QEMU's name (g_free) of the blkdebug node n describes
 * (ApiOpenLayers.blkdebug_name) over child. */
char *api_blkdebug_top_name(const ApiBlkdebugName *n, const BlkNode *child);
void api_blkdebug_name_free(ApiBlkdebugName *n);
/* json-name.c: take flat's key prefix + name out of it: its value (g_free)
 * or NULL. */
char *api_flat_take(GHashTable *flat, const char *prefix, const char *name);
/* json-nbd.c: QEMU's nbd options under prefix ("" for driver=nbd,
 * "file." for a format over nbd) out of flat as the NBD URI block/nbd.c
 * opens (*uri, g_free); x-dirty-bitmap is o's meta context (json-name.c
 * invariant 9). */
gboolean api_json_nbd(GHashTable *flat, const char *prefix, char **uri, BlkOpenOptions *o,
                      GError **error);
/* json-ssh.c: QEMU's ssh options under prefix ("" or "file.") out of flat
 * into the "ssh://" URI *uri (g_free) and o->ssh_host_key_check
 * (json-name.c invariant 18). */
gboolean api_ssh_options(GHashTable *flat, const char *prefix, char **uri,
                         BlkOpenOptions *o, GError **error);
/* json-rbd.c: is key one of the protocol node's own under prefix ("" for
 * the node itself, "file." under a format), not another node's nor one
 * any node takes (driver, read-only, cache.*)? */
gboolean api_protocol_key(const char *key, const char *prefix);
/* json-rbd.c: the RBD fields under prefix ("" or "file.") out of flat into
 * *loc (json-name.c invariant 11); the options any node takes stay. */
gboolean api_rbd_fields(GHashTable *flat, const char *prefix, BlkRbdLocation *loc,
                        GError **error);

/* json-name.c: a child node's options (flat) onto *o and its *path, as
 * a caller's name without layers of its own (no backing or data-file
 * options, no nested quorum). */
gboolean api_json_child(GHashTable *flat, BlkOpenOptions *o, char **path, GError **error);
/* api/quorum.c: "driver": "quorum" (the node as the image) or a format
 * over "file": {"driver": "quorum", ...} from flat into *q, the rest of
 * flat (the format's and the node's options) onto *o. */
gboolean api_quorum_options(GHashTable *flat, BlkOpenOptions *o, ApiQuorum *q,
                            GError **error);
/* api/quorum.c: open q's children, the quorum node over them, and the
 * format o names (or probes) over it unless q->node. */
BlkNode *api_open_quorum(const ApiQuorum *q, const BlkOpenOptions *o, GError **error);
void api_quorum_clear(ApiQuorum *q);
/* api/quorum.c: the options flat names a node of driver name by: "driver":
 * NAME (the node is the image: returns true) or a format over "file":
 * {"driver": NAME, ...}: the node's own keys into own ("file." dropped),
 * the others (the format's, the generic options of any node) into rest. */
bool api_filter_split(GHashTable *flat, const char *name, GHashTable *own,
                      GHashTable *rest);
/* api/quorum.c: the image over a filter node just opened (quorum,
 * blkverify): the node itself when is_image, else the format o names (or
 * probes; the node's own driver name: probes) over it.  Takes node. */
BlkNode *api_filter_format(BlkNode *node, bool is_image, const BlkOpenOptions *o,
                           GError **error);
/* api/quorum.c: a child's options table (the node's options in inherit
 * where the child sets none: quorum.c invariant 3) onto c, with the open's
 * own settings of top (read-only, cache, locks), as api_json_child reads a
 * child (the children of quorum and blkverify nodes). */
gboolean api_child_options(GHashTable *table, GHashTable *inherit,
                           const BlkOpenOptions *top, ApiQuorumChild *c, GError **error);
/* api/blkverify.c: "driver": "blkverify" (the node as the image) or a
 * format over "file": {"driver": "blkverify", ...} from flat into *bv, the
 * rest of flat (the format's and the node's options) onto *o. */
gboolean api_blkverify_options(GHashTable *flat, BlkOpenOptions *o, ApiBlkverify *bv,
                               GError **error);
/* api/blkverify.c: open bv's children, the blkverify node over them, and
 * the format o names (or probes) over it unless bv->node. */
BlkNode *api_open_blkverify(const ApiBlkverify *bv, const BlkOpenOptions *o,
                            GError **error);
void api_blkverify_clear(ApiBlkverify *bv);
/* api/blkverify.c: is filename a "blkverify:RAW:IMAGE" name?  Its open
 * (the caller's own name only), with the format of opts over the node
 * ("blkverify": the node itself). */
bool api_blkverify_name(const char *filename);
BlkNode *api_open_blkverify_name(const char *filename, const BlkOpenOptions *opts,
                                 GError **error);

/* json-parse.c: JSON as QEMU reads it, a tree. */
typedef enum ApiJsonType {
    API_JSON_OBJECT,
    API_JSON_ARRAY,
    API_JSON_STRING,
    API_JSON_INT,
    API_JSON_NUMBER, /* any other number: beyond int64, or with a fraction */
    API_JSON_BOOL,
    API_JSON_NULL,
} ApiJsonType;

typedef struct ApiJson {
    ApiJsonType type;
    char *key;          /* a member's name in its object */
    char *str;          /* STRING (modified UTF-8), NUMBER (as written) */
    int64_t i;          /* INT */
    bool b;             /* BOOL */
    GPtrArray *members; /* OBJECT, ARRAY: ApiJson*, in order */
} ApiJson;

/* The one JSON value of text, or NULL and QEMU's message. */
ApiJson *api_json_parse(const char *text, GError **error);
void api_json_free(ApiJson *v);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(ApiJson, api_json_free)

/* json-flat.c: the JSON of a "json:{...}" name flattened into flat
 * (char* -> char*, owned). */
gboolean api_json_flat(const char *name, GHashTable *flat, GHashTable *typed,
                       GError **error);

/* ---- json-opts.c: the option layer of json-name.c ---- */

/* How json-name.c reads a set of options: a backing name read from an image
 * (from_image: o->format is the image's backing format, or NULL); where the
 * backing and data-file options go (layers; NULL: refused); a layer that
 * may name no file (file_optional: the image's own backing file); where a
 * probed format's options wait (defer; NULL: refused, json-opts.c
 * invariant 3). */
typedef struct ApiApplyHow {
    bool from_image;
    bool file_optional;
    ApiOpenLayers *layers;
    GHashTable **defer;
} ApiApplyHow;
/* The options of flat of a node of format driver (NULL: probed) over file
 * onto *o, in key order (json-opts.c invariants 1-4), but driver, file,
 * file.driver, file.filename and, with by_filename, filename: the backing
 * and data-file options (prefix dropped) into bsub and dsub when
 * how->layers takes them, the cache options settled into o->cache. */
gboolean api_json_keys(GHashTable *flat, const ApiApplyHow *how, const char *driver,
                       const char *file, bool by_filename, GHashTable *bsub,
                       GHashTable *dsub, BlkOpenOptions *o, GError **error);

/* ---- open-opts.c: option syntax and runtime options ---- */

/* The file protocol's own options (key without "file."), open-opts.c:
 * 0, -1 (error set), or 1 (error set): no option of the file protocol. */
int api_file_option(const char *key, const char *value, BlkOpenOptions *o,
                    GError **error);

/* key=value,... (",," a comma) into flat (char* -> char*, owned). */
gboolean api_opts_list_parse(const char *list, GHashTable *flat, GError **error);
/* A size with QEMU's suffixes, else QEMU's "Parameter 'KEY' expects ...". */
gboolean api_parse_size(const char *key, const char *v, uint64_t *out, GError **error);
/* A number (QEMU's number options), else "Parameter 'KEY' expects a
 * number". */
gboolean api_parse_number(const char *key, const char *v, uint64_t *out, GError **error);
/* on/off/true/false, else "Parameter 'KEY' expects 'on' or 'off'". */
gboolean api_parse_bool(const char *key, const char *v, bool *out, GError **error);
/* A node name QEMU takes ("Invalid node-name: 'X'"). */
gboolean api_node_name_ok(const char *name, GError **error);
/* QEMU's blkdebug "align" (a size: 0, or a power of two below 2^31) into
 * o->blkdebug_align (json-name.c invariant 13). */
gboolean api_blkdebug_align(const char *value, BlkOpenOptions *o, GError **error);
/* A runtime option of a node of format driver (open-opts.c invariant 1):
 * 1 handled (onto *o), 0 not a runtime option, -1 refused (error set). */
int api_runtime_option(const char *driver, const char *key, const char *value,
                       BlkOpenOptions *o, GError **error);
/* QEMU's copy-on-read filter (driver=copy-on-read): the options of its
 * child node, "file.K" as "K", with the filter's generic options where the
 * child has none of its own (open-opts.c invariant 2); NULL with the
 * error set for an option of the filter qimg does not have. */
GHashTable *api_cor_filter_child(GHashTable *flat, GError **error);
/* driver=file, host_device or host_cdrom as the image itself (open-opts.c
 * invariant 3): TRUE for those names. */
gboolean api_file_driver_top(const char *driver);
/* An option of any node, not of its driver (read-only, cache.direct...). */
gboolean api_node_option(const char *key);
/* Their options as a format over the file protocol takes them: filename
 * and the protocol's options as file.*, the node's generic ones as they are. */
GHashTable *api_file_driver_child(GHashTable *flat);
/* The kind of file each of them needs, with QEMU's messages, for the open
 * of path (read-only or not) that follows. */
gboolean api_file_driver_check(const char *driver, const char *path, bool read_only,
                               GError **error);
/* A probed format's options (BlkOpenOptions.format_opts) onto *o, or
 * QEMU's "Block format 'F' does not support the option 'K'". */
gboolean api_format_options(const char *format, BlkOpenOptions *o, GError **error);

/* image.c: an operation that changes node may run (writable, has_op),
 * else FALSE with "Image ... is read-only" / "Format ... does not support
 * WHAT". */
gboolean api_can_change(BlkNode *node, bool has_op, const char *what, GError **error);

/* ---- vmstate.c: the handle's quiesce steps (invariant 2) ---- */

/* Drain buffered vmstate writes; the first error of any of them. */
int api_quiesce(QimgImage *img);
/* The same at close: an error some caller was given already is not
 * returned again (vmstate.c invariant 10). */
int api_quiesce_close(QimgImage *img);
/* Drain, invalidate an open stream, free the vmstate state. */
void api_release(QimgImage *img);

/* ---- snapshot.c: driver-level operations the vmstate writer uses ---- */

/* Create a snapshot without draining the vmstate writer first (the writer
 * itself calls it after its own drain); returns the new ID or NULL with
 * error set. */
char *api_snapshot_create(QimgImage *img, const BlkSnapshotInfo *params, GError **error);
int api_snapshot_goto(QimgImage *img, const char *id_or_name, GError **error);

#endif
