/*
 * Output helpers for the qimg command: qemu-img's JSON formatting, human
 * sizes, the snapshot table and the progress indicator.
 *
 * Facts learnt from running qemu-img 7.2:
 *  1. JSON: "{" / "[", then each member on its own line indented by four
 *     spaces per level as "key": value, separated by ","; the closing
 *     bracket goes on its own line at the parent's indentation, even for
 *     an empty container.
 *  2. Strings: \" \\ \b \f \n \r \t are escaped by name, every other code
 *     point below 0x20 or from 0x7F up as \uXXXX (upper-case hex, UTF-16
 *     surrogate pairs above 0xFFFF).  Each malformed UTF-8 sequence
 *     (stray byte, truncated or overlong sequence, surrogate, value above
 *     0x10FFFF, noncharacter) becomes one \uFFFD; C0 80 is U+0000.
 *  3. Human sizes use the largest binary unit in which the value is below
 *     1000 units, printed with "%0.3g": "1000 bytes" is "0.977 KiB".
 */
#include "qimg-tool.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

/* ---- JSON ---- */

void tool_json_init(ToolJson *j)
{
    j->out = g_string_new(NULL);
    j->depth = 0;
    j->need_comma = false;
}

char *tool_json_finish(ToolJson *j)
{
    char *s = g_string_free(j->out, FALSE);

    j->out = NULL;
    return s;
}

/*
 * Decode one UTF-8 sequence at s (fact 2).  Sets *len to the bytes used and
 * returns the code point, or -1 for a malformed sequence.
 */
static int32_t utf8_next(const unsigned char *s, size_t *len)
{
    unsigned char c = s[0];
    int n;
    int32_t cp, min;

    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if (c < 0xC0 || c >= 0xFE) {
        *len = 1;
        return -1;
    }
    if (c < 0xE0) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if (c < 0xF0) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if (c < 0xF8) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else if (c < 0xFC) {
        n = 5, cp = c & 0x03, min = 0x200000;
    } else {
        n = 6, cp = c & 0x01, min = 0x4000000;
    }
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *len = i;
            return -1;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *len = n;
    if (cp < min) {
        return (n == 2 && cp == 0) ? 0 : -1;
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ||
        (cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE) {
        return -1;
    }
    return cp;
}

void tool_json_quote(GString *out, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;

    g_string_append_c(out, '"');
    while (*s) {
        size_t len;
        int32_t cp = utf8_next(s, &len);

        s += len;
        switch (cp) {
        case '"':
            g_string_append(out, "\\\"");
            break;
        case '\\':
            g_string_append(out, "\\\\");
            break;
        case '\b':
            g_string_append(out, "\\b");
            break;
        case '\f':
            g_string_append(out, "\\f");
            break;
        case '\n':
            g_string_append(out, "\\n");
            break;
        case '\r':
            g_string_append(out, "\\r");
            break;
        case '\t':
            g_string_append(out, "\\t");
            break;
        default:
            if (cp < 0) {
                cp = 0xFFFD;
            }
            if (cp > 0xFFFF) {
                cp -= 0x10000;
                g_string_append_printf(out, "\\u%04X\\u%04X", 0xD800 + (cp >> 10),
                                       0xDC00 + (cp & 0x3FF));
            } else if (cp < 0x20 || cp >= 0x7F) {
                g_string_append_printf(out, "\\u%04X", (unsigned)cp);
            } else {
                g_string_append_c(out, (char)cp);
            }
        }
    }
    g_string_append_c(out, '"');
}

static void json_newline(ToolJson *j)
{
    g_string_append_c(j->out, '\n');
    for (int i = 0; i < j->depth; i++) {
        g_string_append(j->out, "    ");
    }
}

static void json_begin_value(ToolJson *j, const char *key)
{
    if (j->need_comma) {
        g_string_append_c(j->out, ',');
    }
    if (j->depth > 0) {
        json_newline(j);
    }
    if (key) {
        tool_json_quote(j->out, key);
        g_string_append(j->out, ": ");
    }
}

static void json_begin(ToolJson *j, const char *key, char open)
{
    json_begin_value(j, key);
    g_string_append_c(j->out, open);
    j->depth++;
    j->need_comma = false;
}

static void json_end(ToolJson *j, char close)
{
    j->depth--;
    json_newline(j);
    g_string_append_c(j->out, close);
    j->need_comma = true;
}

void tool_json_begin_object(ToolJson *j, const char *key)
{
    json_begin(j, key, '{');
}

void tool_json_end_object(ToolJson *j)
{
    json_end(j, '}');
}

void tool_json_begin_array(ToolJson *j, const char *key)
{
    json_begin(j, key, '[');
}

void tool_json_end_array(ToolJson *j)
{
    json_end(j, ']');
}

void tool_json_int(ToolJson *j, const char *key, int64_t v)
{
    json_begin_value(j, key);
    g_string_append_printf(j->out, "%" PRId64, v);
    j->need_comma = true;
}

void tool_json_uint(ToolJson *j, const char *key, uint64_t v)
{
    json_begin_value(j, key);
    g_string_append_printf(j->out, "%" PRIu64, v);
    j->need_comma = true;
}

void tool_json_bool(ToolJson *j, const char *key, bool v)
{
    json_begin_value(j, key);
    g_string_append(j->out, v ? "true" : "false");
    j->need_comma = true;
}

void tool_json_str(ToolJson *j, const char *key, const char *v)
{
    json_begin_value(j, key);
    tool_json_quote(j->out, v ? v : "");
    j->need_comma = true;
}

/* ---- human sizes (fact 3) ---- */

char *tool_size_to_str(uint64_t val)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int i = 0;

    while (i < 6 && val >= (1000ULL << (10 * i))) {
        i++;
    }
    return g_strdup_printf("%0.3g %s", (double)val / (double)(1ULL << (10 * i)),
                           units[i]);
}

/* ---- snapshot table ---- */

/*
 * Columns as qemu-img prints them: ID left in 9 and TAG left in 16, each
 * followed by a space; VM SIZE right in 8; a space and the local date; VM
 * CLOCK right in 13 (hours are not wrapped); ICOUNT right in 11, blank when
 * the snapshot has none.  Over-long values push the rest of the row right.
 */
void tool_print_snapshot_table(FILE *f, GPtrArray *snapshots)
{
    fprintf(f, "%-10s%-17s%8s%20s%13s%11s\n", "ID", "TAG", "VM SIZE", "DATE", "VM CLOCK",
            "ICOUNT");
    for (guint i = 0; snapshots && i < snapshots->len; i++) {
        const QimgSnapshotInfo *sn = g_ptr_array_index(snapshots, i);
        g_autofree char *vmsize = tool_size_to_str(sn->vm_state_size);
        char date[64] = "";
        char clock[64];
        char icount[32] = "";
        time_t t = (time_t)sn->date_sec;
        struct tm tm;
        uint64_t secs = sn->vm_clock_nsec / 1000000000ULL;
        unsigned ms = (unsigned)(sn->vm_clock_nsec % 1000000000ULL / 1000000ULL);

        if (localtime_r(&t, &tm)) {
            strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
        }
        snprintf(clock, sizeof(clock), "%02" PRIu64 ":%02u:%02u.%03u", secs / 3600,
                 (unsigned)(secs / 60 % 60), (unsigned)(secs % 60), ms);
        if (sn->icount != -1) {
            snprintf(icount, sizeof(icount), "%" PRId64, sn->icount);
        }
        fprintf(f, "%-9s %-16s %8s %19s%13s%11s\n", sn->id ? sn->id : "",
                sn->name ? sn->name : "", vmsize, date, clock, icount);
    }
}

/* ---- progress ---- */

void tool_progress_show(double pct)
{
    printf("    (%3.2f/100%%)\r", pct);
    fflush(stdout);
}

/* qemu-img's progress line and rule (its qemu_progress_print, in single
 * precision as it computes): a value is printed when it moved more than
 * one point from the last printed, or is 0 or 100.  A value equal to the
 * one before is a repeated report (the copy reports again at completions)
 * and prints nothing. */
static void progress_show(ToolProgress *p, float current, bool force)
{
    if (current > 100.0f) {
        current = 100.0f;
    }
    if (!force && current == p->seen) {
        return;
    }
    p->seen = current;
    if (force || current > p->last + 1.0f || current < p->last - 1.0f ||
        current == 100.0f || current == 0.0f) {
        p->last = current;
        tool_progress_show((double)current);
    }
}

void tool_progress_init(ToolProgress *p, bool enabled)
{
    p->enabled = enabled;
    p->last = 0.0f;
    p->seen = 0.0f;
    if (enabled) {
        progress_show(p, 0.0f, true);
    }
}

void tool_progress_update(ToolProgress *p, uint64_t done, uint64_t total)
{
    if (p->enabled) {
        progress_show(p, total ? (float)((double)done * 100.0 / (double)total) : 100.0f,
                      false);
    }
}

void tool_progress_finish(ToolProgress *p)
{
    if (p->enabled) {
        progress_show(p, 100.0f, true); /* qemu-img's last print */
    }
}

void tool_progress_end(ToolProgress *p)
{
    if (!p->enabled) {
        return;
    }
    printf("\n");
    fflush(stdout);
    p->enabled = false;
}

void tool_warn_probed_raw(QimgImage *img, const QimgOpenOptions *oo, const char *filename)
{
    if (oo->format || oo->read_only || !img || qimg_image_is_read_only(img) ||
        !qimg_image_format_probed(img) || strcmp(qimg_image_format(img), "raw") != 0) {
        return;
    }
    /* QEMU names the protocol node: for one named by options (an RBD
     * image), the "file" object of the raw node's json: name; for a json:
     * name of a plain file, the file's name (the image's, qemu-img info's
     * "image:") */
    const char *name = qimg_image_filename(img);
    if (oo->image_opts || g_str_has_prefix(filename, "json:")) {
        filename = name;
    }
    static const char raw_json[] = "json:{\"driver\": \"raw\", \"file\": ";
    g_autofree char *node_name = NULL;
    if (g_str_has_prefix(name, raw_json) && g_str_has_suffix(name, "}")) {
        const char *obj = name + strlen(raw_json);
        node_name = g_strdup_printf("json:%.*s", (int)(strlen(obj) - 1), obj);
        filename = node_name;
    }
    fprintf(stderr,
            "WARNING: Image format was not specified for '%s' and probing guessed raw.\n"
            "         Automatically detecting the format is dangerous for raw images, "
            "write operations on block 0 will be restricted.\n"
            "         Specify the 'raw' format explicitly to remove the restrictions.\n",
            filename);
}

void tool_report_open_error(const char *filename, GError *err)
{
    g_autofree char *file_level =
        g_strdup_printf("Could not open '%s': %s", filename, g_strerror(err->code));
    if (strcmp(err->message, file_level) == 0) {
        tool_error("Could not open '%s': %s", filename, err->message);
    } else {
        tool_error("%s", err->message);
    }
    g_error_free(err);
}
