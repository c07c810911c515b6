/*
 * block/faulty-config.c: QEMU's blkdebug config file ("blkdebug:CONFIG:FILE"
 * where CONFIG names a file) read into the fault node's rules
 * (block/faulty.c): [inject-error] groups with QEMU's event names.
 *
 * Facts learnt from running qemu-img 7.2 with such files:
 *  1. A file that cannot be read: "Could not read blkdebug config file:
 *     REASON"; a group other than inject-error/set-state: "There is no
 *     option group 'NAME'"; an event QEMU does not know: "invalid parameter
 *     value: NAME".
 *  2. Keys are "key = "value"" lines (quotes optional), '#' comments;
 *     inject-error takes event, errno (default 5), sector (the request
 *     covers that 512-byte sector), once (default off: every later
 *     request fails too), immediately, state, iotype.
 *
 * Owns: the mapping of QEMU's events onto the steps qimg announces
 * (blk_event()).  What qimg cannot match is refused naming it, never
 * dropped: QEMU events qimg has no step for, [set-state] and state=
 * (the node has no states), immediately=on, iotype.
 */
#include "block/block.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* QEMU's events (its BlkdebugEvent names) and the qimg rule each is;
 * NULL: QEMU has it, qimg cannot match it. */
static const struct {
    const char *qemu;
    const char *rule;
} events[] = {
    {"l1_update", "event=l1_update"},
    {"l1_grow_alloc_table", NULL},
    {"l1_grow_write_table", "event=l1_grow"},
    {"l1_grow_activate_table", "event=l1_grow"},
    {"l2_load", NULL},
    {"l2_update", "event=l2_update"},
    {"l2_update_compressed", NULL},
    {"l2_alloc_cow_read", NULL},
    {"l2_alloc_write", "event=l2_alloc"},
    {"read_aio", "event=any,op=read"},
    {"read_backing_aio", NULL},
    {"read_compressed", NULL},
    {"write_aio", "event=data_write"},
    {"write_compressed", "event=compressed_write"},
    {"vmstate_load", NULL},
    {"vmstate_save", NULL},
    {"cow_read", NULL},
    {"cow_write", "event=cow_write"},
    {"reftable_load", NULL},
    {"reftable_grow", "event=reftable_grow"},
    {"reftable_update", NULL},
    {"refblock_load", NULL},
    {"refblock_update", "event=refblock_update"},
    {"refblock_update_part", "event=refblock_update"},
    {"refblock_alloc", "event=refblock_alloc"},
    {"refblock_alloc_hookup", NULL},
    {"refblock_alloc_write", "event=refblock_alloc"},
    {"refblock_alloc_write_blocks", "event=refblock_alloc"},
    {"refblock_alloc_write_table", "event=reftable_grow"},
    {"refblock_alloc_switch_table", "event=reftable_grow"},
    {"cluster_alloc", NULL},
    {"cluster_alloc_bytes", NULL},
    {"cluster_free", "event=cluster_free"},
    {"flush_to_os", "event=flush"},
    {"flush_to_disk", "event=flush"},
    {"pwritev_rmw_head", NULL},
    {"pwritev_rmw_after_head", NULL},
    {"pwritev_rmw_tail", NULL},
    {"pwritev_rmw_after_tail", NULL},
    {"pwritev", NULL},
    {"pwritev_zero", NULL},
    {"pwritev_done", NULL},
    {"empty_image_prepare", NULL},
    {"l1_shrink_write_table", NULL},
    {"l1_shrink_free_l2_clusters", NULL},
    {"cor_write", NULL},
    {"cluster_alloc_space", NULL},
    {"none", NULL},
};

/* One [inject-error] group (fact 2) as a rule appended to out. */
static int group_rule(GKeyFile *kf, const char *group, GString *out)
{
    g_autofree char *event = g_key_file_get_value(kf, group, "event", NULL);
    g_autofree char *err = g_key_file_get_value(kf, group, "errno", NULL);
    g_autofree char *sector = g_key_file_get_value(kf, group, "sector", NULL);
    g_autofree char *once = g_key_file_get_value(kf, group, "once", NULL);
    g_autofree char *imm = g_key_file_get_value(kf, group, "immediately", NULL);
    const char *rule = NULL;
    bool known = false;

    if (g_key_file_has_key(kf, group, "state", NULL) ||
        g_key_file_has_key(kf, group, "iotype", NULL)) {
        return blk_error(ENOTSUP, "blkdebug: qimg's fault node has no states or I/O "
                                  "types (state=, iotype=)");
    }
    if (!event) {
        return blk_error(EINVAL, "Parameter 'event' is missing");
    }
    g_strstrip(event);
    for (size_t i = 0; i < G_N_ELEMENTS(events); i++) {
        if (strcmp(event, events[i].qemu) == 0) {
            known = true;
            rule = events[i].rule;
        }
    }
    if (!known) {
        return blk_error(EINVAL, "invalid parameter value: %s", event); /* fact 1 */
    }
    if (!rule) {
        return blk_error(ENOTSUP,
                         "blkdebug: qimg's fault node cannot match QEMU's event "
                         "'%s'",
                         event);
    }
    if (imm && strcmp(g_strstrip(imm), "off") != 0) {
        return blk_error(ENOTSUP, "blkdebug: immediately=%s is not supported by qimg",
                         imm);
    }
    g_string_append_printf(out, "%s%s", out->len ? ";" : "", rule);
    if (err) {
        g_string_append_printf(out, ",errno=%s", g_strstrip(err));
    }
    if (sector) {
        char *end = NULL;
        guint64 s = g_ascii_strtoull(g_strstrip(sector), &end, 10);
        if (!*sector || *end || s > G_MAXUINT64 / 512) {
            return blk_error(EINVAL, "Parameter 'sector' expects a number");
        }
        g_string_append_printf(out, ",offset=%" G_GUINT64_FORMAT, s * 512);
    }
    if (once && strcmp(g_strstrip(once), "on") == 0) {
        g_string_append(out, ",once");
    }
    return 0;
}

int blk_faulty_config_rules(const char *path, char **rules)
{
    g_autoptr(GKeyFile) kf = g_key_file_new();
    g_autoptr(GError) gerr = NULL;
    g_autofree char *text = NULL;
    g_autoptr(GString) out = g_string_new(NULL);
    g_autoptr(GString) ini = g_string_new(NULL);
    g_auto(GStrv) groups = NULL;
    gsize len;
    unsigned n = 0;

    FILE *f = fopen(path, "r");
    if (!f || !g_file_get_contents(path, &text, &len, NULL)) {
        int e = f ? EIO : errno;
        if (f) {
            fclose(f);
        }
        return blk_error(e, "Could not read blkdebug config file: %s", g_strerror(e));
    }
    fclose(f);
    /* QEMU's groups repeat ([inject-error] twice): number them for GKeyFile,
     * and drop the quotes around values */
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l; l++) {
        char *line = g_strstrip(*l);
        char *eq = strchr(line, '=');
        if (*line == '[') {
            char *close = strchr(line, ']');
            g_autofree char *name =
                g_strndup(line + 1, close ? (gsize)(close - line - 1) : strlen(line + 1));
            if (strcmp(name, "inject-error") != 0 && strcmp(name, "set-state") != 0) {
                return blk_error(EINVAL, "There is no option group '%s'",
                                 name); /* fact 1 */
            }
            g_string_append_printf(ini, "[%s %u]\n", name, n++);
        } else if (eq && *line != '#') {
            g_autofree char *key = g_strstrip(g_strndup(line, (gsize)(eq - line)));
            char *v = g_strstrip(eq + 1);
            size_t vl = strlen(v);
            if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') {
                v[vl - 1] = '\0';
                v++;
            }
            g_string_append_printf(ini, "%s=%s\n", key, v);
        }
    }
    if (!g_key_file_load_from_data(kf, ini->str, ini->len, G_KEY_FILE_NONE, &gerr)) {
        return blk_error(EINVAL, "Could not parse blkdebug config file: %s",
                         gerr->message);
    }
    groups = g_key_file_get_groups(kf, NULL);
    for (char **g = groups; *g; g++) {
        int ret;
        if (g_str_has_prefix(*g, "set-state ")) {
            return blk_error(ENOTSUP, "blkdebug: qimg's fault node has no states "
                                      "([set-state])");
        }
        ret = group_rule(kf, *g, out);
        if (ret < 0) {
            return ret;
        }
    }
    *rules = g_string_free(g_steal_pointer(&out), FALSE);
    return 0;
}
