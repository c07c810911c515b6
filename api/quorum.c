/*
 * api/quorum.c: QEMU's quorum node named by a caller's options -- "driver":
 * "quorum" (the node is the image) or a format over "file": {"driver":
 * "quorum", ...} -- and its open: the children, the node (block/quorum.c),
 * the format over it.
 *
 * Owns: reading the quorum options (json:, --image-opts, dotted
 * file.children.N.* keys, all flattened by json-flat.c / open-opts.c).
 *
 * Invariants (cited as "quorum.c invariant N"):
 *  1. Only the caller's own name names a quorum (json-name.c invariant 1:
 *     never a backing name from an image); its children are named as a
 *     caller names an image without layers (api_json_child: no backing or
 *     data-file options, no quorum inside).
 *  2. Every option is honoured or refused by name, with QEMU's words where
 *     QEMU refuses it: vote-threshold (required, 1 .. children),
 *     read-pattern quorum or fifo, rewrite-corrupted (not with fifo, which
 *     never votes), children as a list of objects (a string is a node
 *     reference, which qimg has none of).  blkverify=on is refused by
 *     name: QEMU's blkverify mode ends the process on a mismatch, which
 *     qimg never does.
 *  3. The node's own options (read-only, cache.*, ...) reach every child
 *     that does not set its own, as QEMU's children inherit them.
 */
#include "api/api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void api_quorum_clear(ApiQuorum *q)
{
    if (q->children) {
        for (guint i = 0; i < q->children->len; i++) {
            g_free(g_array_index(q->children, ApiQuorumChild, i).path);
        }
        g_array_unref(q->children);
        q->children = NULL;
    }
}

static GHashTable *flat_new(void)
{
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}

/* The index of a "children.N[.KEY]" key (*rest: KEY or ""), or -1. */
static long child_index(const char *key, const char **rest)
{
    char *end;
    long i;

    if (!g_str_has_prefix(key, "children.")) {
        return -1;
    }
    key += strlen("children.");
    if (!g_ascii_isdigit(*key)) {
        return -2;
    }
    i = strtol(key, &end, 10);
    if (*end && *end != '.') {
        return -2;
    }
    *rest = *end ? end + 1 : end;
    return i;
}

/* Invariant 2: the quorum's own keys of qflat onto *q, the children's
 * into *tables (one table each); the node's options into *inherit. */
static gboolean read_keys(GHashTable *qflat, ApiQuorum *q, GPtrArray *tables,
                          GHashTable *inherit, GError **error)
{
    g_autoptr(GList) keys =
        g_list_sort(g_hash_table_get_keys(qflat), (GCompareFunc)strcmp);
    uint64_t threshold = 0;
    bool blkverify = false, rewrite = false;
    const char *pattern = NULL;

    for (GList *l = keys; l; l = l->next) {
        const char *key = l->data, *v = g_hash_table_lookup(qflat, key), *rest = "";
        long i = child_index(key, &rest);
        if (i >= 0 && i < 4096) {
            while (tables->len <= (guint)i) {
                g_ptr_array_add(tables, NULL);
            }
            if (!*rest) {
                g_set_error(error, QIMG_ERROR, ENODEV,
                            "Cannot find device='%s' nor node-name='%s'", v, v);
                return FALSE;
            }
            if (!tables->pdata[i]) {
                tables->pdata[i] = flat_new();
            }
            g_hash_table_insert(tables->pdata[i], g_strdup(rest), g_strdup(v));
        } else if (i != -1 || strcmp(key, "children") == 0) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Option children is not a valid array");
            return FALSE;
        } else if (strcmp(key, "vote-threshold") == 0) {
            if (!api_parse_number(key, v, &threshold, error)) {
                return FALSE;
            }
        } else if (strcmp(key, "blkverify") == 0) {
            if (!api_parse_bool(key, v, &blkverify, error)) {
                return FALSE;
            }
        } else if (strcmp(key, "rewrite-corrupted") == 0) {
            if (!api_parse_bool(key, v, &rewrite, error)) {
                return FALSE;
            }
        } else if (strcmp(key, "read-pattern") == 0) {
            pattern = v;
        } else if (api_node_option(key)) { /* invariant 3 */
            g_hash_table_insert(inherit, g_strdup(key), g_strdup(v));
        } else {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Block format 'quorum' does not support the option '%s'", key);
            return FALSE;
        }
    }
    for (guint i = 0; i < tables->len; i++) {
        if (!tables->pdata[i]) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Option children is not a valid array");
            return FALSE;
        }
    }
    if (tables->len < 1) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Number of provided children must be 1 or more");
        return FALSE;
    }
    if (threshold < 1) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Parameter 'vote-threshold' expects a value >= 1");
        return FALSE;
    }
    if (threshold > tables->len) {
        g_set_error(error, QIMG_ERROR, ERANGE, "threshold may not exceed children count");
        return FALSE;
    }
    if (pattern && strcmp(pattern, "quorum") != 0 && strcmp(pattern, "fifo") != 0) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Please set read-pattern as fifo or quorum");
        return FALSE;
    }
    q->o.threshold = (unsigned)threshold;
    q->o.fifo = pattern && strcmp(pattern, "fifo") == 0;
    if (!q->o.fifo && blkverify && (tables->len != 2 || threshold != 2)) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "blkverify=on can only be set if there are exactly two files and "
                    "vote-threshold is 2");
        return FALSE;
    }
    if (!q->o.fifo && blkverify && rewrite) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "rewrite-corrupted=on cannot be used with blkverify=on");
        return FALSE;
    }
    if (blkverify || (q->o.fifo && rewrite)) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    blkverify ? "The quorum option 'blkverify' is not supported by qimg"
                              : "The quorum option 'rewrite-corrupted' needs "
                                "read-pattern=quorum (fifo does not vote)");
        return FALSE;
    }
    q->o.rewrite = rewrite;
    return TRUE;
}

/* A child's options (invariants 1, 3) as the open takes them. */
gboolean api_child_options(GHashTable *table, GHashTable *inherit,
                           const BlkOpenOptions *top, ApiQuorumChild *c, GError **error)
{
    GHashTableIter it;
    gpointer k, v;

    g_hash_table_iter_init(&it, inherit);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        if (!g_hash_table_contains(table, k)) {
            g_hash_table_insert(table, g_strdup(k), g_strdup(v));
        }
    }
    /* the open's own settings (read-only, cache, locks), not the layers
     * of the image above */
    c->o = (BlkOpenOptions){.read_only = top->read_only,
                            .cache = top->cache,
                            .no_backing = top->no_backing,
                            .force_share = top->force_share,
                            .no_locking = top->no_locking,
                            .no_io = top->no_io,
                            .deny_write = top->deny_write,
                            .secrets = top->secrets,
                            .secret_values = top->secret_values,
                            .luks_max_iterations = top->luks_max_iterations};
    return api_json_child(table, &c->o, &c->path, error);
}

bool api_filter_split(GHashTable *flat, const char *name, GHashTable *own,
                      GHashTable *rest)
{
    const char *driver = g_hash_table_lookup(flat, "driver");
    bool node = driver && strcmp(driver, name) == 0;
    GHashTableIter it;
    gpointer k, v;

    g_hash_table_iter_init(&it, flat);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        const char *key = k;
        if (node && strcmp(key, "driver") != 0 && !api_node_option(key)) {
            g_hash_table_insert(own, g_strdup(key), g_strdup(v));
        } else if (!node && g_str_has_prefix(key, "file.")) {
            if (strcmp(key, "file.driver") != 0) {
                g_hash_table_insert(own, g_strdup(key + strlen("file.")), g_strdup(v));
            }
        } else if (!node || strcmp(key, "driver") != 0) {
            g_hash_table_insert(rest, g_strdup(key), g_strdup(v));
        }
    }
    return node;
}

gboolean api_quorum_options(GHashTable *flat, BlkOpenOptions *o, ApiQuorum *q,
                            GError **error)
{
    g_autoptr(GHashTable) qflat = flat_new();
    g_autoptr(GHashTable) rest = flat_new();
    g_autoptr(GHashTable) inherit = flat_new();
    g_autoptr(GPtrArray) tables =
        g_ptr_array_new_with_free_func((GDestroyNotify)g_hash_table_unref);
    g_autofree char *unused = NULL;

    q->node = api_filter_split(flat, "quorum", qflat, rest);
    if (!read_keys(qflat, q, tables, inherit, error)) {
        return FALSE;
    }
    /* the format's and the node's options, over a name of its own */
    g_hash_table_insert(rest, g_strdup("file.filename"), g_strdup("quorum"));
    if (!api_json_child(rest, o, &unused, error)) {
        return FALSE;
    }
    q->children = g_array_sized_new(FALSE, TRUE, sizeof(ApiQuorumChild), tables->len);
    for (guint i = 0; i < tables->len; i++) {
        ApiQuorumChild c = {0};
        if (!api_child_options(tables->pdata[i], inherit, o, &c, error)) {
            api_quorum_clear(q);
            return FALSE;
        }
        g_array_append_val(q->children, c);
    }
    if (q->node) {
        o->format = "quorum";
    }
    return TRUE;
}

BlkNode *api_open_quorum(const ApiQuorum *q, const BlkOpenOptions *o, GError **error)
{
    guint n = q->children->len;
    g_autofree BlkNode **nodes = g_new0(BlkNode *, n);
    BlkNode *node;

    for (guint i = 0; i < n; i++) {
        const ApiQuorumChild *c = &g_array_index(q->children, ApiQuorumChild, i);
        nodes[i] = api_open_node(c->path, &c->o, NULL, error);
        if (!nodes[i]) {
            for (guint j = 0; j < i; j++) {
                blk_close(nodes[j]);
            }
            return NULL;
        }
    }
    blk_error_clear();
    node = blk_open_quorum(nodes, n, &q->o);
    if (!node) {
        blk_error_propagate(error, 0, NULL);
        return NULL;
    }
    return api_filter_format(node, q->node, o, error);
}

BlkNode *api_filter_format(BlkNode *node, bool is_image, const BlkOpenOptions *o,
                           GError **error)
{
    if (is_image) {
        return node;
    }
    BlkOpenOptions fo = *o;
    if (fo.format && strcmp(fo.format, node->drv->format_name) == 0) {
        fo.format = NULL;
    }
    return api_open_node_on(node, node->filename, &fo, error);
}
