/*
 * block/faulty-rules.c: the fault node's rules read from text -- the
 * ';'-separated list of ','-separated keys block/faulty.c's header
 * describes, QEMU's blkdebug config file (through faulty-config.c) and the
 * "limits,..." rule (through faulty-limits.c).
 *
 * Owns: the op= names, each key's check and its error ("Unknown blkdebug
 * event", "Unknown blkdebug request type", "Invalid blkdebug rule",
 * "Unknown blkdebug rule"), and the defaults of a rule (any event, EIO,
 * the first match, writes and zero writes; event=flush counts flushes).
 */
#include "block/faulty-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* op= values (the header's list) */
static const struct {
    const char *name;
    unsigned ops;
} op_names[] = {
    {"write", OP_WRITE | OP_ZERO},
    {"flush", OP_FLUSH},
    {"all", OP_WRITE | OP_ZERO | OP_FLUSH},
    {"read", OP_READ},
    {"pwrite", OP_WRITE},
    {"write-zeroes", OP_ZERO},
    {"discard", OP_DISCARD},
    {"block-status", OP_STATUS},
    {"io", OP_READ | OP_WRITE | OP_ZERO | OP_DISCARD | OP_FLUSH},
    {"io-no-flush", OP_READ | OP_WRITE | OP_ZERO | OP_DISCARD},
};

static int parse_rule(const char *text, FaultRule *r)
{
    g_auto(GStrv) parts = g_strsplit(text, ",", -1);
    *r = (FaultRule){
        .event = -1, .errnum = EIO, .nth = 1, .ops = OP_WRITE | OP_ZERO, .new_state = -1};
    for (char **p = parts; *p; p++) {
        char *eq = strchr(*p, '=');
        const char *val = eq ? eq + 1 : "";
        size_t klen = eq ? (size_t)(eq - *p) : strlen(*p);
        if (strncmp(*p, "event", klen) == 0 && klen == 5) {
            r->event = -2;
            if (strcmp(val, "any") == 0) {
                r->event = -1;
            } else if (strcmp(val, "write_aio") == 0) {
                r->event = BLK_FAULTY_WRITE_AIO;
            }
            for (int e = 0; e < BLKEV__MAX && r->event == -2; e++) {
                if (strcmp(val, blk_event_name((BlkEvent)e)) == 0) {
                    r->event = e;
                }
            }
            if (r->event == -2) {
                blk_error(EINVAL, "Unknown blkdebug event '%s'", val);
                return -EINVAL;
            }
        } else if (strncmp(*p, "errno", klen) == 0 && klen == 5) {
            r->errnum = atoi(val);
        } else if (strncmp(*p, "nth", klen) == 0 && klen == 3) {
            r->nth = g_ascii_strtoull(val, NULL, 10);
        } else if (strcmp(*p, "once") == 0) {
            r->once = true;
        } else if (strcmp(*p, "arm") == 0) {
            r->arm = true;
        } else if (strncmp(*p, "offset", klen) == 0 && klen == 6) {
            char *end = NULL;
            r->has_offset = true;
            r->offset = g_ascii_strtoull(val, &end, 0);
            if (!*val || *end) {
                blk_error(EINVAL, "Invalid blkdebug rule '%s'", text);
                return -EINVAL;
            }
        } else if ((strncmp(*p, "state", klen) == 0 && klen == 5) ||
                   (strncmp(*p, "new_state", klen) == 0 && klen == 9)) {
            char *end = NULL;
            guint64 n = g_ascii_strtoull(val, &end, 10);
            if (!*val || *end || n > G_MAXINT) {
                blk_error(EINVAL, "Invalid blkdebug rule '%s'", text);
                return -EINVAL;
            }
            *(klen == 5 ? &r->state : &r->new_state) = (int)n;
        } else if (strncmp(*p, "op", klen) == 0 && klen == 2) {
            r->ops = 0;
            for (size_t i = 0; i < G_N_ELEMENTS(op_names); i++) {
                if (strcmp(val, op_names[i].name) == 0) {
                    r->ops = op_names[i].ops;
                }
            }
            if (!r->ops) {
                blk_error(EINVAL, "Unknown blkdebug request type '%s'", val);
                return -EINVAL;
            }
        } else if (**p) {
            blk_error(EINVAL, "Unknown blkdebug rule '%s'", *p);
            return -EINVAL;
        }
    }
    if ((r->event == BLKEV_FLUSH || r->event == BLKEV_FLUSH_TO_OS ||
         r->event == BLKEV_FLUSH_TO_DISK) &&
        r->ops == (OP_WRITE | OP_ZERO)) {
        r->ops = OP_FLUSH; /* event=flush means the flushes */
    }
    if (r->errnum <= 0 || r->nth == 0) {
        blk_error(EINVAL, "Invalid blkdebug rule '%s'", text);
        return -EINVAL;
    }
    return 0;
}

/* RULES (or QEMU's config file) into rules and limits. */
int blk_faulty_parse_rules(const char *rules, GArray *arr, BlkLimits *limits,
                           bool *has_limits)
{
    g_autofree char *from_config = NULL;
    g_auto(GStrv) list = NULL;

    /* no '=' and not "once": QEMU's config file (faulty-config.c) */
    if (*rules && !strchr(rules, '=') && strcmp(rules, "once") != 0) {
        if (blk_faulty_config_rules(rules, &from_config) < 0) {
            return -EINVAL;
        }
        rules = from_config;
    }
    list = g_strsplit(rules, ";", -1);
    for (char **p = list; *p; p++) {
        FaultRule r;
        if (g_str_has_prefix(*p, "limits,")) {
            g_auto(GStrv) items = g_strsplit(*p + strlen("limits,"), ",", -1);
            for (char **it = items; *it; it++) {
                if (blk_faulty_parse_limit(*it, limits) < 0) {
                    return -EINVAL;
                }
            }
            *has_limits = true;
            continue;
        }
        if (**p && parse_rule(*p, &r) < 0) {
            return -EINVAL;
        }
        if (**p) {
            g_array_append_val(arr, r);
        }
    }
    return 0;
}
