/*
 * block/faulty-config.c: QEMU's blkdebug config file ("blkdebug:CONFIG:FILE"
 * where CONFIG names a file) read into the fault node's rules
 * (block/faulty.c): [inject-error] groups with QEMU's event names.
 *
 * Facts learnt from running qemu-img 7.2 with such files:
 *  1. A file that cannot be read: "Could not read blkdebug config file:
 *     REASON" (qimg's own: a file over CONFIG_MAX bytes is "File too
 *     large", never read whole: /dev/zero does not end); a group other
 *     than inject-error/set-state: "There is no option group 'NAME'"; an
 *     event QEMU does not know: "invalid parameter value: NAME".
 *  2. Keys are "key = "value"" lines (quotes optional), '#' comments;
 *     inject-error takes event, errno (default 5), sector (the request
 *     covers that 512-byte sector), once (default off: every later
 *     request fails too), immediately, state, iotype; set-state takes
 *     event, state, new_state (default 0).  Any other key: "Invalid parameter 'KEY'"
 *     in a file, "[GROUP] section doesn't support the option 'KEY'" in
 *     blkdebug's options (its inject-error and set-state lists).  Booleans
 *     are on/yes/true/y or off/no/false/n, else "Parameter 'KEY' expects
 *     'on' or 'off'".
 *  3. immediately=on only spares QEMU's failing request a trip through
 *     the event loop before it returns the error (QEMU's rule_check); the
 *     fault node always fails a request on its own thread, at once, so
 *     both values are honoured as QEMU runs them.
 *  4. Event "none" is raised when the node opens: its inject-error rules
 *     (of state 1 or any) are active from then on, for every request
 *     (iotype: reads, writes, zero writes, discards, flushes by default),
 *     failing it with the errno alone as fact 6's, until the rules of
 *     another event replace them -- which the fault node, whose rules
 *     count the requests of a step, cannot follow: "none" rules with
 *     other events' inject-error rules are refused.
 *  5. iotype (read, write, write-zeroes, discard, flush, block-status)
 *     names the one kind of request a rule fails (faulty.c's op=).
 *  6. An event arms its inject-error rules: from then on every request
 *     (reads, writes, zero writes, discards, flushes unless iotype says
 *     otherwise: QEMU 7.2's add_rule gives a rule without iotype that
 *     mask, block-status alone spared; qemu-io -t writeback "write; flush"
 *     under a once rule on flush_to_disk fails the flush and spends the
 *     rule, as iotype=flush does, where iotype=write leaves the flush
 *     alone) fails, whatever QEMU does next, until an event with rules
 *     of its own replaces them or once spends the rule (QEMU's active
 *     rules: faulty.c's arm, its invariant 7).  A flush failing so at close
 *     is what makes qcow2's close-time retry print QEMU's cache lines
 *     (qcow2/meta.c invariant 13).
 *  7. read_aio is raised by the format driver before it reads guest data
 *     (qcow2's allocated clusters, raw's reads), never by the probe that
 *     finds the format nor by metadata reads: its rules are armed and its
 *     state switched by the format's data reads (BLKEV_DATA_READ), as
 *     fact 6 has it for every event.
 *  8. flush_to_os and flush_to_disk are raised by the format above the
 *     node, not by the node's own flushes (block.h invariant 7, faulty.c
 *     invariant 12): flush_to_os by each flush of the format, flush_to_disk
 *     when the format has write-like requests its last good flush did not
 *     cover.  Under writethrough a write's own flush does not cover it yet
 *     (QEMU emulates FUA before it counts the write), so raw over blkdebug
 *     with a once rule on flush_to_disk runs "write; write; write" as
 *     ok/fail/ok: the first write's flush raises nothing, the second's
 *     arms the rule and fails on it.  qcow2's own flushes of its file
 *     (ordering, the close-time retry) raise neither.
 *
 * Owns: the mapping of QEMU's events onto the steps qimg announces
 * (blk_event()), and QEMU's rule groups (from a config file or from
 * blkdebug's options, blk_faulty_groups_rules()) as the node's rules.
 * What qimg cannot match is refused naming it, never dropped: QEMU events
 * qimg has no step for.
 */
#include "block/block.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* QEMU's events (its BlkdebugEvent names) and the step each is in qimg:
 * a BlkEvent, EV_READ (read requests for a breakpoint, BLKEV_DATA_READ for
 * a rule: fact 7), EV_ANY (fact 4: every request) or
 * EV_NONE (qimg cannot match it). */
enum { EV_READ = -1, EV_NONE = -2, EV_ANY = -4 };

static const struct {
    const char *qemu;
    int ev;
} events[] = {
    {"l1_update", BLKEV_L1_UPDATE},
    {"l1_grow_alloc_table", BLKEV_L1_GROW_ALLOC},
    {"l1_grow_write_table", BLKEV_L1_GROW},
    {"l1_grow_activate_table", BLKEV_L1_GROW_ACTIVATE},
    {"l2_load", BLKEV_L2_LOAD},
    {"l2_update", BLKEV_L2_UPDATE},
    {"l2_update_compressed", EV_NONE},
    {"l2_alloc_cow_read", EV_NONE},
    {"l2_alloc_write", BLKEV_L2_ALLOC},
    {"read_aio", EV_READ},
    {"read_backing_aio", EV_NONE},
    {"read_compressed", EV_NONE},
    {"write_aio", BLK_FAULTY_WRITE_AIO},
    {"write_compressed", BLKEV_COMPRESSED_WRITE},
    {"vmstate_load", EV_NONE},
    {"vmstate_save", EV_NONE},
    {"cow_read", BLKEV_COW_READ},
    {"cow_write", BLKEV_COW_WRITE},
    {"reftable_load", EV_NONE},
    {"reftable_grow", BLKEV_REFTABLE_GROW},
    {"reftable_update", BLKEV_REFTABLE_UPDATE},
    {"refblock_load", BLKEV_REFBLOCK_LOAD},
    {"refblock_update", BLKEV_REFBLOCK_UPDATE},
    {"refblock_update_part", BLKEV_REFBLOCK_UPDATE},
    {"refblock_alloc", BLKEV_REFBLOCK_GET},
    {"refblock_alloc_hookup", BLKEV_REFBLOCK_HOOKUP},
    {"refblock_alloc_write", BLKEV_REFBLOCK_ALLOC},
    {"refblock_alloc_write_blocks", BLKEV_REFBLOCK_ALLOC},
    {"refblock_alloc_write_table", BLKEV_REFTABLE_GROW},
    {"refblock_alloc_switch_table", BLKEV_REFTABLE_GROW},
    {"cluster_alloc", BLKEV_CLUSTER_ALLOC},
    {"cluster_alloc_bytes", EV_NONE},
    {"cluster_free", BLKEV_CLUSTER_FREE},
    {"flush_to_os", BLKEV_FLUSH_TO_OS},     /* fact 8 */
    {"flush_to_disk", BLKEV_FLUSH_TO_DISK}, /* fact 8 */
    {"pwritev_rmw_head", EV_NONE},
    {"pwritev_rmw_after_head", EV_NONE},
    {"pwritev_rmw_tail", EV_NONE},
    {"pwritev_rmw_after_tail", EV_NONE},
    {"pwritev", EV_NONE},
    {"pwritev_zero", EV_NONE},
    {"pwritev_done", EV_NONE},
    {"empty_image_prepare", BLKEV_EMPTY_IMAGE_PREPARE},
    {"l1_shrink_write_table", EV_NONE},
    {"l1_shrink_free_l2_clusters", EV_NONE},
    {"cor_write", BLKEV_COR_WRITE},
    {"cluster_alloc_space", EV_NONE},
    {"none", EV_ANY},
};

/* QEMU's I/O types (iotype=) as the fault node's op= (faulty.c). */
static const char *const iotypes[][2] = {
    {"read", "read"},       {"write", "pwrite"}, {"write-zeroes", "write-zeroes"},
    {"discard", "discard"}, {"flush", "flush"},  {"block-status", "block-status"},
};

static int qemu_event(const char *name, bool any, int *ev, bool *read)
{
    for (size_t i = 0; i < G_N_ELEMENTS(events); i++) {
        if (strcmp(name, events[i].qemu) != 0) {
            continue;
        }
        if (events[i].ev == EV_NONE) {
            return blk_error(ENOTSUP,
                             "blkdebug: qimg's fault node cannot match QEMU's event "
                             "'%s'",
                             name);
        }
        if (events[i].ev == EV_ANY && !any) {
            return blk_error(ENOTSUP,
                             "blkdebug: qimg's fault node cannot stop at QEMU's event "
                             "'%s'",
                             name);
        }
        *read = events[i].ev == EV_READ;
        *ev = *read ? -1 : events[i].ev;
        return 0;
    }
    return -ENOENT;
}

int blk_faulty_qemu_event(const char *name, int *ev, bool *read)
{
    return qemu_event(name, false, ev, read);
}

/* A number of a group (fact 2): QEMU's "Parameter 'KEY' expects a number". */
static int group_number(GKeyFile *kf, const char *group, const char *key, GString *out)
{
    g_autofree char *v = g_key_file_get_value(kf, group, key, NULL);
    char *end = NULL;

    if (!v) {
        return 0;
    }
    g_strstrip(v);
    guint64 n = g_ascii_strtoull(v, &end, 10);
    if (!*v || *end || n > G_MAXINT) {
        return blk_error(EINVAL, "Parameter '%s' expects a number", key);
    }
    g_string_append_printf(out, ",%s=%" G_GUINT64_FORMAT, key, n);
    return 0;
}

/* Fact 2: a boolean of a group (*b untouched when absent). */
static int group_bool(GKeyFile *kf, const char *group, const char *key, bool *b)
{
    g_autofree char *v = g_key_file_get_value(kf, group, key, NULL);

    if (!v) {
        return 0;
    }
    g_strstrip(v);
    if (!strcmp(v, "on") || !strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "y")) {
        *b = true;
    } else if (!strcmp(v, "off") || !strcmp(v, "no") || !strcmp(v, "false") ||
               !strcmp(v, "n")) {
        *b = false;
    } else {
        return blk_error(EINVAL, "Parameter '%s' expects 'on' or 'off'", key);
    }
    return 0;
}

/* Fact 2: every key of the group is one its kind takes. */
static int group_keys_known(GKeyFile *kf, const char *group, bool set_state,
                            bool from_options)
{
    static const char *const inject[] = {"event",  "state", "iotype",      "errno",
                                         "sector", "once",  "immediately", NULL};
    static const char *const set[] = {"event", "state", "new_state", NULL};
    g_auto(GStrv) keys = g_key_file_get_keys(kf, group, NULL, NULL);

    for (char **k = keys; k && *k; k++) {
        if (g_strv_contains(set_state ? set : inject, *k)) {
            continue;
        }
        if (from_options) {
            return blk_error(EINVAL, "[%s] section doesn't support the option '%s'",
                             set_state ? "set-state" : "inject-error", *k);
        }
        return blk_error(EINVAL, "Invalid parameter '%s'", *k);
    }
    return 0;
}

/* One [inject-error] or [set-state] group (facts 1-3) as a rule appended
 * to out. */
static int group_rule(GKeyFile *kf, const char *group, bool from_options, GString *out)
{
    g_autofree char *event = g_key_file_get_value(kf, group, "event", NULL);
    bool err = g_key_file_has_key(kf, group, "errno", NULL);
    g_autofree char *sector = g_key_file_get_value(kf, group, "sector", NULL);
    bool set_state = g_str_has_prefix(group, "set-state ");
    bool read = false, once = false, immediately = false;
    int ev = 0, ret;

    ret = group_keys_known(kf, group, set_state, from_options);
    if (ret < 0) {
        return ret;
    }
    if (!event) {
        return blk_error(EINVAL, "Missing event name for rule");
    }
    g_strstrip(event);
    ret = qemu_event(event, true, &ev, &read);
    if (ret == -ENOENT) {
        return blk_error(EINVAL, "invalid parameter value: %s", event); /* fact 1 */
    } else if (ret < 0) {
        return ret;
    }
    if (read) { /* fact 7: the format's data reads arm the rule, or switch */
        read = false;
        ev = BLKEV_DATA_READ;
    }
    bool any = ev == EV_ANY; /* fact 4 */
    /* fact 6: QEMU's default I/O types (all but block-status); fact 4:
     * "none" rules are armed from the open on (faulty.c invariant 7) */
    bool arm = !set_state && !read;
    bool flush = ev == BLKEV_FLUSH_TO_OS || ev == BLKEV_FLUSH_TO_DISK;
    const char *op = read ? "read" : any || flush || arm ? "io" : NULL;
    g_autofree char *iotype = g_key_file_get_value(kf, group, "iotype", NULL);
    if (iotype) { /* fact 5 */
        op = NULL;
        for (size_t i = 0; i < G_N_ELEMENTS(iotypes); i++) {
            if (strcmp(g_strstrip(iotype), iotypes[i][0]) == 0) {
                op = iotypes[i][1];
            }
        }
        if (!op) {
            return blk_error(EINVAL, "invalid parameter value: %s", iotype);
        }
    }
    g_string_append_printf(out, "%sevent=%s%s%s", out->len ? ";" : "",
                           read || any                  ? "any"
                           : ev == BLK_FAULTY_WRITE_AIO ? "write_aio"
                                                        : blk_event_name((BlkEvent)ev),
                           op ? ",op=" : "", op ? op : "");
    if (group_number(kf, group, "state", out) < 0) {
        return -EINVAL;
    }
    if (set_state) {
        if (!g_key_file_has_key(kf, group, "new_state", NULL)) {
            g_string_append(out, ",new_state=0"); /* fact 2 */
            return 0;
        }
        return group_number(kf, group, "new_state", out);
    }
    /* fact 3: either value is how the node fails a request */
    if (group_bool(kf, group, "immediately", &immediately) < 0 ||
        group_bool(kf, group, "once", &once) < 0) {
        return -EINVAL;
    }
    if (err && group_number(kf, group, "errno", out) < 0) {
        return -EINVAL;
    }
    if (sector) {
        char *end = NULL;
        guint64 s = g_ascii_strtoull(g_strstrip(sector), &end, 10);
        if (!*sector || *end || s > G_MAXUINT64 / 512) {
            return blk_error(EINVAL, "Parameter 'sector' expects a number");
        }
        g_string_append_printf(out, ",offset=%" G_GUINT64_FORMAT, s * 512);
    }
    if (once) {
        g_string_append(out, ",once");
    }
    if (arm) {
        g_string_append(out, ",arm"); /* facts 4, 6 */
    }
    return 0;
}

int blk_faulty_groups_rules(GKeyFile *kf, bool from_options, char **rules)
{
    g_autoptr(GString) out = g_string_new(NULL);
    g_auto(GStrv) groups = g_key_file_get_groups(kf, NULL);

    unsigned none = 0, other = 0;

    for (char **g = groups; *g; g++) {
        int ret = group_rule(kf, *g, from_options, out);
        if (ret < 0) {
            return ret;
        }
        g_autofree char *ev = g_key_file_get_value(kf, *g, "event", NULL);
        if (g_str_has_prefix(*g, "inject-error ")) {
            *(strcmp(g_strstrip(ev), "none") == 0 ? &none : &other) += 1;
        }
    }
    if (none && other) { /* fact 4 */
        return blk_error(ENOTSUP, "blkdebug: qimg's fault node cannot combine "
                                  "event 'none' rules with other events' rules");
    }
    *rules = g_string_free(g_steal_pointer(&out), FALSE);
    return 0;
}

/* A config file larger than this is refused (EFBIG), not read whole. */
#define CONFIG_MAX (1u << 20)

int blk_faulty_config_rules(const char *path, char **rules)
{
    g_autoptr(GKeyFile) kf = g_key_file_new();
    g_autoptr(GError) gerr = NULL;
    g_autofree char *text = NULL;
    g_autoptr(GString) ini = g_string_new(NULL);
    gsize len;
    unsigned n = 0;

    FILE *f = fopen(path, "r");
    if (f) { /* bounded: the name may be a device that never ends (/dev/zero) */
        text = g_malloc(CONFIG_MAX + 1);
        len = fread(text, 1, CONFIG_MAX + 1, f);
        text[MIN(len, (gsize)CONFIG_MAX)] = '\0';
    }
    if (!f || ferror(f) || len > CONFIG_MAX) {
        int e = !f ? errno : ferror(f) ? EIO : EFBIG;
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
    return blk_faulty_groups_rules(kf, false, rules);
}
