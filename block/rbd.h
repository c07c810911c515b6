/*
 * block/rbd.h: Ceph RBD images (block/rbd.c, the node over librbd;
 * block/rbd-name.c, where an image is).
 *
 * Owns: the location of an RBD image (pool, namespace, image, snapshot,
 * the cluster's configuration file, user and librados settings) as QEMU
 * 7.2 reads it from an "rbd:" name or from json:/--image-opts fields, and
 * the interface block.c and api/ use to open, create and name RBD images.
 *
 * Invariants (cited as "rbd.h invariant N"):
 *  1. A location is only ever the caller's: "rbd:" names select this
 *     protocol only in a name the caller gave (block.h invariant 5), and
 *     a json: name read from an image never names rbd (json-name.c
 *     invariant 1).
 *  2. Parsing an "rbd:" name and building one (blk_rbd_name) round-trip:
 *     every field is escaped where QEMU's parser would split it.
 *  3. The strings of a location are owned by it (blk_rbd_location_clear).
 */
#ifndef QIMG_BLOCK_RBD_H
#define QIMG_BLOCK_RBD_H

#include "block/block.h"

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct BlkRbdLocation {
    char *pool;
    char *namespace; /* NULL: not given (a json: name without it) */
    char *image;
    char *snapshot; /* NULL: the image itself (read-write) */
    char *conf;     /* NULL: librados' default search (CEPH_CONF, /etc/ceph) */
    char *user;     /* NULL: librados' default ("admin") */
    /* librados settings, rados_conf_set() in order: key, value, key, ... */
    GPtrArray *settings;
} BlkRbdLocation;

/* The librados timeouts qimg sets unless the configuration file or the name
 * sets them (rbd.c invariant 2): seconds. */
#define BLK_RBD_MOUNT_TIMEOUT 30
#define BLK_RBD_MON_OP_TIMEOUT 30
#define BLK_RBD_OSD_OP_TIMEOUT 120

/* Names the rbd protocol takes ("rbd:..."). */
bool blk_is_rbd_name(const char *filename);
/* QEMU's parse of "rbd:pool/[namespace/]image[@snap][:key=value...]"
 * into *loc (cleared first; blk_rbd_location_clear after, also on
 * failure); 0 or -EINVAL with QEMU's message. */
int blk_rbd_parse_name(const char *filename, BlkRbdLocation *loc);
/* The "rbd:" name of loc (g_free), escaped (invariant 2). */
char *blk_rbd_name(const BlkRbdLocation *loc);
/* QEMU's name for the RBD node: json:{"pool": ..., "driver": "rbd", ...}
 * with the fields QEMU keeps (not the librados settings), in its order. */
char *blk_rbd_json_name(const BlkRbdLocation *loc);
/* The JSON object inside blk_rbd_json_name (no "json:" prefix). */
char *blk_rbd_json_object(const BlkRbdLocation *loc);
void blk_rbd_location_copy(BlkRbdLocation *dst, const BlkRbdLocation *src);
void blk_rbd_location_clear(BlkRbdLocation *loc);
/* Append s as QEMU writes a JSON string (its escapes). */
void blk_json_append_string(GString *out, const char *s);
/* The JSON object QEMU prints for a QDict whose members were put in the
 * order keys[0..n) (rbd-name.c invariant 5), json[i] being member i's
 * value as JSON text (NULL: no such member). */
char *blk_qdict_json_object(size_t n, const char *const *keys, const char *const *json);
/* The QDict bucket QEMU puts key in (rbd-name.c invariant 5). */
unsigned blk_qdict_bucket(const char *key);

extern const BlkDriver blk_rbd_driver;

/* The node for filename ("rbd:..." or, with opts->rbd set, the caller's
 * location under that name); messages with blk_error(). */
BlkNode *blk_open_rbd(const char *filename, const BlkOpenOptions *opts);
/* qemu-img create's RBD image: size (rounded up to 512 bytes) and
 * object_size (0: librbd's default, else a power of two >= 4096). */
int blk_rbd_create(const char *filename, uint64_t size, uint64_t object_size);

#endif
