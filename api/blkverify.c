/*
 * api/blkverify.c: QEMU's blkverify node named by a caller -- the name
 * "blkverify:RAW:IMAGE", "driver": "blkverify" (the node is the image) or
 * a format over "file": {"driver": "blkverify", ...} -- and its open: the
 * raw copy, the image under test, the node (block/blkverify.c), the format
 * over it.
 *
 * Owns: reading the blkverify options (json:, --image-opts, qemu-io's
 * open -o, all flattened by json-flat.c / open-opts.c) and the name.
 *
 * Facts learnt from QEMU 7.2 (qemu-io over blkverify names and options):
 *  1. "blkverify:RAW:IMAGE" names the raw copy RAW (up to the first ':')
 *     and the image IMAGE (the rest, which may be any name: another
 *     protocol's, a "blkdebug:" one); a name without the second ':' is
 *     "blkverify requires raw copy and original image path".  A name
 *     without the prefix given with the driver names the image alone.
 *  2. The node's options: x-raw and x-image (the two names), raw and test
 *     (each child's options: objects, a string is a node reference), and
 *     the options every node takes; any other is "Block protocol
 *     'blkverify' doesn't support the option 'K'".  A child named twice
 *     (x-image and test.file.filename) is "Can't specify 'file' and
 *     'filename' options at the same time"; a child not named at all is
 *     "A block device must be specified for \"raw\"" (the raw child is
 *     looked for first), "... for \"test\"".
 *  3. The raw child is opened as a protocol (no format probed: a qcow2
 *     file is its bytes) unless its options name a format; the test child
 *     as an image (format probed, backing chain opened).
 *
 * Invariants (cited as "api/blkverify.c invariant N"):
 *  1. Only the caller's own name names a blkverify node (json-name.c
 *     invariant 1: never a backing name from an image); its children are
 *     named as a caller names an image without layers (api_json_child,
 *     the quorum children's rule: api_child_options).
 *  2. Every option is honoured or refused by name (fact 2); the node's own
 *     options (read-only, cache.*, ...) reach each child that does not set
 *     its own, as QEMU's children inherit them.
 */
#include "api/api.h"
#include "block/blkverify.h"

#include <errno.h>
#include <string.h>

#define PREFIX "blkverify:"

static GHashTable *flat_new(void)
{
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}

void api_blkverify_clear(ApiBlkverify *bv)
{
    g_clear_pointer(&bv->raw.path, g_free);
    g_clear_pointer(&bv->test.path, g_free);
    bv->set = false;
}

/* Fact 1: name as *raw (NULL without the prefix) and *image (g_free). */
static gboolean parse_name(const char *name, char **raw, char **image, GError **error)
{
    const char *colon;

    *raw = *image = NULL;
    if (!g_str_has_prefix(name, PREFIX)) {
        *image = g_strdup(name);
        return TRUE;
    }
    name += strlen(PREFIX);
    colon = strchr(name, ':');
    if (!colon) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "blkverify requires raw copy and original image path");
        return FALSE;
    }
    *raw = g_strndup(name, (gsize)(colon - name));
    *image = g_strdup(colon + 1);
    return TRUE;
}

/* Fact 2: the child's table, named by name (may be NULL) or by its own
 * options, as the child what ("raw", "test"). */
static gboolean child_table(GHashTable *t, const char *name, const char *what,
                            GError **error)
{
    if (name &&
        (g_hash_table_contains(t, "filename") ||
         g_hash_table_contains(t, "file.filename") || g_hash_table_contains(t, "file"))) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Can't specify 'file' and 'filename' options at the same time");
        return FALSE;
    }
    if (name) {
        g_hash_table_insert(t, g_strdup("filename"), g_strdup(name));
    }
    if (g_hash_table_size(t) == 0) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "A block device must be specified for \"%s\"", what);
        return FALSE;
    }
    return TRUE;
}

/* Fact 2, invariant 2: the node's keys (vflat) onto bv's children, with
 * the open's settings of top. */
static gboolean read_keys(GHashTable *vflat, const BlkOpenOptions *top, ApiBlkverify *bv,
                          GError **error)
{
    g_autoptr(GList) keys =
        g_list_sort(g_hash_table_get_keys(vflat), (GCompareFunc)strcmp);
    g_autoptr(GHashTable) raw = flat_new();
    g_autoptr(GHashTable) test = flat_new();
    g_autoptr(GHashTable) inherit = flat_new();
    g_autofree char *x_raw = NULL, *x_image = NULL;

    for (GList *l = keys; l; l = l->next) {
        const char *key = l->data, *v = g_hash_table_lookup(vflat, key);
        if (strcmp(key, "filename") == 0) {
            g_autofree char *r = NULL, *i = NULL;
            if (!parse_name(v, &r, &i, error)) {
                return FALSE;
            }
            g_free(x_image);
            x_image = g_steal_pointer(&i);
            if (r) {
                g_free(x_raw);
                x_raw = g_steal_pointer(&r);
            }
        } else if (strcmp(key, "x-raw") == 0 || strcmp(key, "x-image") == 0) {
            char **slot = key[2] == 'r' ? &x_raw : &x_image;
            if (!*slot) { /* a name given as filename wins, as QEMU's */
                *slot = g_strdup(v);
            }
        } else if (g_str_has_prefix(key, "raw.") || g_str_has_prefix(key, "test.")) {
            bool r = key[0] == 'r';
            g_hash_table_insert(r ? raw : test,
                                g_strdup(key + strlen(r ? "raw." : "test.")),
                                g_strdup(v));
        } else if (strcmp(key, "raw") == 0 || strcmp(key, "test") == 0) {
            g_set_error(error, QIMG_ERROR, ENODEV,
                        "Cannot find device='%s' nor node-name='%s'", v, v);
            return FALSE;
        } else if (api_node_option(key)) {
            g_hash_table_insert(inherit, g_strdup(key), g_strdup(v));
        } else {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Block protocol 'blkverify' doesn't support the option '%s'",
                        key);
            return FALSE;
        }
    }
    return child_table(raw, x_raw, "raw", error) &&
           child_table(test, x_image, "test", error) &&
           api_child_options(raw, inherit, top, &bv->raw, error) &&
           api_child_options(test, inherit, top, &bv->test, error);
}

gboolean api_blkverify_options(GHashTable *flat, BlkOpenOptions *o, ApiBlkverify *bv,
                               GError **error)
{
    g_autoptr(GHashTable) vflat = flat_new();
    g_autoptr(GHashTable) rest = flat_new();
    g_autofree char *unused = NULL;
    char *name;

    bv->node = api_filter_split(flat, "blkverify", vflat, rest);
    if (bv->node && (name = g_strdup(g_hash_table_lookup(vflat, "file.filename")))) {
        /* the name given beside the options (json-name.c invariant 7) */
        g_hash_table_remove(vflat, "file.filename");
        g_hash_table_insert(vflat, g_strdup("filename"), name);
    }
    /* the format's and the node's options, over a name of its own */
    g_hash_table_insert(rest, g_strdup("file.filename"), g_strdup("blkverify"));
    if (!api_json_child(rest, o, &unused, error) || !read_keys(vflat, o, bv, error)) {
        api_blkverify_clear(bv);
        return FALSE;
    }
    bv->set = true;
    if (bv->node) {
        o->format = "blkverify";
    }
    return TRUE;
}

/* Fact 3: the raw copy, as a protocol unless a format is named. */
static BlkNode *open_raw(const ApiQuorumChild *c, GError **error)
{
    BlkNode *node;

    if (c->o.format && strcmp(c->o.format, "file") != 0) {
        return api_open_node(c->path, &c->o, NULL, error);
    }
    blk_error_clear();
    node = blk_open_protocol(c->path, &c->o, BLK_ROLE_PROTOCOL, BLK_OPEN_USER_NAME);
    if (!node) {
        blk_error_propagate(error, 0, NULL);
    }
    return node;
}

BlkNode *api_open_blkverify(const ApiBlkverify *bv, const BlkOpenOptions *o,
                            GError **error)
{
    BlkNode *raw = open_raw(&bv->raw, error), *test, *node;

    if (!raw) {
        return NULL;
    }
    test = api_open_node(bv->test.path, &bv->test.o, NULL, error); /* fact 3 */
    if (!test) {
        blk_close(raw);
        return NULL;
    }
    node = blk_open_blkverify(raw, test);
    return api_filter_format(node, bv->node, o, error);
}

bool api_blkverify_name(const char *filename)
{
    return g_str_has_prefix(filename, PREFIX);
}

BlkNode *api_open_blkverify_name(const char *filename, const BlkOpenOptions *opts,
                                 GError **error)
{
    g_autoptr(GHashTable) flat = flat_new();
    ApiBlkverify bv = {0};
    BlkNode *node = NULL;

    /* invariant 1: the caller's own name, read as its options are */
    g_hash_table_insert(flat, g_strdup("filename"), g_strdup(filename));
    if (read_keys(flat, opts, &bv, error)) {
        bv.node = opts->format && strcmp(opts->format, "blkverify") == 0;
        node = api_open_blkverify(&bv, opts, error);
    }
    if (!node) {
        g_prefix_error(error, "Could not open '%s': ", filename);
    }
    api_blkverify_clear(&bv);
    return node;
}
