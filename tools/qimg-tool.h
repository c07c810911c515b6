/*
 * tools/: the qimg command, shared declarations.
 *
 * The command works like qemu-img 7.2 so that operators' scripts keep
 * working: same options, same messages (with "qimg:" instead of
 * "qemu-img:"), same exit codes and byte-identical JSON.  Everything here
 * uses only the public API in include/qimg/qimg.h.
 *
 * Conventions:
 *  1. Each subcommand is one file with one entry point cmd_<name>(argc,
 *     argv) returning the process exit code.  A subcommand too long for
 *     one file is split by concern into <name>.c, which has the entry
 *     point, and <name>-*.c, sharing a small <name>.h (io, convert).
 *  2. Errors are printed once, where they are detected, as
 *     "qimg: <message>" on stderr (tool_error); usage errors add the
 *     "Try 'qimg --help'" line (tool_usage_error) and return 1.
 *  3. Normal output goes to stdout only.
 */
#ifndef QIMG_TOOL_H
#define QIMG_TOOL_H

#include "qimg/qimg.h"

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---- subcommands ---- */

int cmd_create(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_map(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_vmstate(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_io(int argc, char **argv);
int cmd_resize(int argc, char **argv);
int cmd_nbd(int argc, char **argv);
/* qimg nbd -L (tools/nbd-list.c): exit status */
int tool_nbd_list(const char *sock, const char *host, const char *port);
int cmd_measure(int argc, char **argv);
int cmd_dd(int argc, char **argv);
int cmd_rebase(int argc, char **argv);
int cmd_commit(int argc, char **argv);
int cmd_bitmap(int argc, char **argv);
int cmd_amend(int argc, char **argv);

/* Print the usage of one subcommand (qimg <cmd> --help); returns 0. */
int tool_command_help(const char *name);
/* The name messages start with ("qimg", or "qemu-img" / "qemu-io" when
 * run under those names: main.c's personalities). */
void tool_set_program(const char *name);
const char *tool_program(void);
/* "--version" as the program the personality is. */
void tool_print_version(void);

/* ---- messages (options.c) ---- */

void tool_error(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
/* A message of several lines (a close's, api/image.c invariant 3): each
 * line as tool_error prints one. */
void tool_error_lines(const char *msg);
void tool_warning(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
/* Message plus "Try 'qimg --help' for more information"; returns 1. */
int tool_usage_error(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
/* Report getopt's '?' or ':' result for argv[optind - 1]; returns 1. */
int tool_bad_option(int c, char **argv);

/* ---- numbers and sizes (options.c) ---- */

/*
 * Parse a size like qemu-img: decimal integer with optional fraction and
 * one suffix of b/B, k/K, M/m, G/g, T/t, P/p, E/e (powers of 1024), or a
 * hex integer "0x...".  Leading white space is skipped.  A fraction needs a
 * suffix other than 'b'.  Returns 0, -EINVAL (malformed) or -ERANGE.
 */
int tool_strtosz(const char *s, uint64_t *out);
/*
 * qemu-img's cvtnum: parse 'value' as a size in [0, max] for the named
 * quantity ("image size", "start offset", ...), printing qemu-img's
 * messages on failure.  Returns false on error.
 */
bool tool_cvtnum(const char *name, const char *value, int64_t max, int64_t *out);

/* --output=human|json */
typedef enum ToolOutput { TOOL_OUTPUT_HUMAN, TOOL_OUTPUT_JSON } ToolOutput;
bool tool_parse_output(const char *s, ToolOutput *out);

/* Cache mode with qemu-img's message ("Invalid cache option: x" or
 * "Invalid source cache option: x" when 'source'). */
bool tool_parse_cache(const char *s, bool source, QimgCacheMode *mode);
/* -l: "ID_OR_NAME" or "snapshot.id=ID,snapshot.name=NAME" -> the ID or
 * name to open (g_free), or NULL after printing qemu-img's two-line error
 * (options.c fact 3; commands check -l as they meet it). */
char *tool_parse_snapshot_param(const char *param);
/* size bytes aligned to 4 KiB, freed with g_free (GLib's allocator is the
 * system's): the kernel copies file data into page-aligned buffers about
 * twice as fast (measured with bench/chain-bench.sh). */
void *tool_alloc_aligned(size_t size);
/* --object DEF (tools/objects.c): -1 when a secret was added, else the
 * command ends now with this exit code (0 after help, 1 after an error,
 * printed). */
int tool_object_add(const char *def);
/* getopt values of --object and --image-opts, the same in every command */
enum { TOOL_OPT_OBJECT = 1000, TOOL_OPT_IMAGE_OPTS };
/* The options every image command takes alike (options.c), for a getopt
 * switch's default: --object (tool_object_add), --image-opts (sets
 * *image_opts; a bad option where @image_opts is NULL), anything else a
 * bad option.  -1 when parsing goes on, else the command's exit code. */
int tool_common_option(int c, char **argv, bool *image_opts);

/* --trust-names, taken by every command (main.c): the file names images
 * record (VMDK extents and parents) may point anywhere
 * (QimgOpenOptions.trust_names). */
extern bool tool_trust_names;
/* QIMG_OPEN_OPTIONS_INIT with the command line's --trust-names. */
#define TOOL_OPEN_OPTIONS_INIT                                                           \
    {                                                                                    \
        .struct_size = sizeof(QimgOpenOptions), .trust_names = tool_trust_names          \
    }
/* A secret object with this id was given. */
bool tool_secret_exists(const char *id);
/* id -> GBytes of the secrets given (owned here; the same table for the
 * whole run, so it may be taken before the options are parsed). */
GHashTable *tool_secret_table(void);
/* Hand the secrets to an open (or a create), and the PBKDF2 iteration
 * limit QIMG_LUKS_MAX_ITERATIONS names, if set (a bad value ends the
 * command with a message). */
void tool_open_secrets(QimgOpenOptions *oo);
void tool_create_secrets(QimgCreateOptions *co);
/* Open, report a failure (NULL), warn about a probed raw image. */
QimgImage *tool_open_image(const char *filename, QimgOpenOptions *oo);
/* --image-opts (oo->image_opts: the name, filename, is key=value options)
 * with -f, or with -U and a force-share option other than on: qemu-img's
 * refusal, printed; false. */
bool tool_image_opts_ok(const QimgOpenOptions *oo, const char *filename);
/* image-opts.c: one key=value element as QemuOpts reads it ("KEY" is
 * KEY=on, "noKEY" KEY=off, with QEMU's warning when report; fact 1). */
void tool_opts_element(const char *e, bool report, char **key, char **value);
/* The element of the QemuOpts list `list` at p (image-opts.c facts 1-3):
 * *key (g_free) and val; the first element without '=' is "file" when
 * implied_file; report: print the short-form warnings.  Returns where the
 * next element starts. */
const char *tool_opts_next(const char *list, const char *p, bool implied_file,
                           bool report, char **key, GString *val);
/* An --image-opts list as QEMU's tools read it (image-opts.c facts 1-4),
 * rewritten as "key=value" elements for the library (",," a comma);
 * implied_file: qemu-img's and qemu-nbd's implied "file" key; report:
 * print the short-form warnings.  NULL and *err for a bad id. */
char *tool_image_opts_list(const char *list, bool implied_file, bool report,
                           GError **err);
/* qimg_image_open, with an --image-opts name (oo->image_opts) read as
 * qemu-img reads it; the errors name the name as given. */
QimgImage *tool_qimg_image_open(const char *name, QimgOpenOptions *oo, GError **err);
/* The same with or without the implied "file" key (qemu-io has none). */
QimgImage *tool_image_opts_open(const char *name, const QimgOpenOptions *oo,
                                bool implied_file, GError **err);
/* Close (final flush) and report a failure (false). */
bool tool_close_image(QimgImage *img);
/* img (read-write) is marked corrupt: its close fails without a message,
 * as qemu-img and qemu-io report no failure of the final flush of an image
 * whose corruption they reported when it was marked (QEMU 060, 305). */
bool tool_image_marked_corrupt(QimgImage *img);
/* A backing file name as the image names it, resolved against the image's
 * folder (g_free). */
char *tool_resolve_backing(const char *image, const char *backing);
/* Open a source read as qemu-img reads it with -l snapshot_param (NULL:
 * none): the snapshot's view, "Failed to load snapshot: ..." when it is not
 * there (also for drivers without snapshots).  NULL after printing the
 * error. */
QimgImage *tool_open_snapshot(const char *filename, QimgOpenOptions *oo,
                              const char *snapshot_param);

/* ---- -o option lists (optlist.c) ---- */

typedef enum ToolOptType {
    TOOL_OPT_STRING,
    TOOL_OPT_BOOL,
    TOOL_OPT_NUMBER,
    TOOL_OPT_SIZE,
} ToolOptType;

typedef struct ToolOptDesc {
    const char *name;
    ToolOptType type;
    const char *help;
    const char *def_print; /* printed in "Formatting ..." when not given */
    bool protocol;         /* belongs to the file protocol, not the format */
} ToolOptDesc;

typedef struct ToolOpt {
    char *key;
    char *value; /* normalised: sizes/numbers in decimal bytes */
    char *shown; /* as qemu-img prints it in "Formatting ..." */
} ToolOpt;

/* Create options of a format in qemu-img's print order (NULL-terminated
 * list), or NULL for an unknown format. */
const ToolOptDesc *tool_create_opts(const char *format);
/* The same for an image called filename (NULL: the format's alone): an
 * "rbd:" name takes the rbd protocol's options instead of the file's. */
const ToolOptDesc *tool_create_opts_for(const char *format, const char *filename);
/* The same for vpc, vhdx, vdi and qed (optlist-hyperv.c). */
const ToolOptDesc *tool_hyperv_create_opts(const char *format);
/* qemu-img amend's options of a format (NULL: it has none); with_create
 * adds the create options amend knows only to say "This option is only
 * supported for image creation". */
const ToolOptDesc *tool_amend_opts(const char *format, bool with_create);
/* "-o help" of qemu-img amend ("Amend options for 'qcow2':"). */
void tool_opts_print_amend_help(const char *format);
/* Does 'list' parse against 'descs' (tool_opts_parse without messages)? */
bool tool_opts_valid(const char *list, const ToolOptDesc *descs);
/* Why tool_create_opts(format) is NULL, in qemu-img's words: "Format
 * driver 'F' does not support image creation" for a driver QEMU has
 * without image creation, else "Unknown file format 'F'"; prefixed with
 * "FILENAME: " when filename is not NULL. */
void tool_create_format_error(const char *filename, const char *format);
/* Split a -o list at single commas (",," is a literal comma); empty
 * elements (leading, trailing or doubled separators) are kept as "".  The
 * elements are g_free'd with the array. */
GPtrArray *tool_opts_split(const char *list);
/* Concatenate repeated -o arguments the way qemu-img does. */
char *tool_opts_append(char *list, const char *more);
/* qemu-img create/convert/amend/measure's -o: append more to *list, or
 * "Invalid option list: MORE" and false where qemu-img refuses it (empty,
 * a leading comma, an odd number of trailing ones). */
bool tool_opts_accumulate(char **list, const char *more);
/* True if -U cannot go with this open-option list (optlist.c fact 5):
 * it sets force-share to anything but "on". */
bool tool_opts_force_share_conflict(const char *list);
/* True if the list asks for help ("help" or "?" as an element). */
bool tool_opts_want_help(const char *list);
/* Print "-o help" for 'format', with the options of filename's protocol
 * when a file name was given (else NULL). */
void tool_opts_print_help(const char *format, const char *filename);
/*
 * Split, check and normalise 'list' against 'descs'.  Later keys replace
 * earlier ones.  Returns a GPtrArray of ToolOpt, or NULL after printing
 * the error (prefixed with "prefix: " when prefix is not NULL).
 */
GPtrArray *tool_opts_parse(const char *list, const ToolOptDesc *descs,
                           const char *prefix);
const char *tool_opts_get(GPtrArray *opts, const char *key);
void tool_opts_set(GPtrArray *opts, const char *key, const char *value,
                   const char *shown);
void tool_opts_remove(GPtrArray *opts, const char *key);
/* key -> normalised value, for QimgCreateOptions.options. */
GHashTable *tool_opts_to_hash(GPtrArray *opts);
/* The key of a new encrypted image as its -o list names it
 * (encrypt.key-secret for qcow2, key-secret for luks), or NULL: what
 * qemu-img opens the image it created with (convert, dd). */
const char *tool_opts_key_secret(GPtrArray *opts);

/* ---- output (output.c) ---- */

/* qemu-img's human sizes: "0 B", "64 MiB", "1.5 GiB", "0.977 KiB". */
char *tool_size_to_str(uint64_t val);

/*
 * JSON writer producing qemu-img's pretty format: 4-space indentation,
 * "key": value, closing bracket on its own line, and qemu's string
 * escaping (\uXXXX for control and non-ASCII characters).
 */
typedef struct ToolJson {
    GString *out;
    int depth;
    bool need_comma;
} ToolJson;

void tool_json_init(ToolJson *j);
/* Returns the text (caller frees) and resets the writer. */
char *tool_json_finish(ToolJson *j);
void tool_json_begin_object(ToolJson *j, const char *key);
void tool_json_end_object(ToolJson *j);
void tool_json_begin_array(ToolJson *j, const char *key);
void tool_json_end_array(ToolJson *j);
void tool_json_int(ToolJson *j, const char *key, int64_t v);
void tool_json_uint(ToolJson *j, const char *key, uint64_t v);
void tool_json_bool(ToolJson *j, const char *key, bool v);
void tool_json_str(ToolJson *j, const char *key, const char *v);
/* Append s as a quoted JSON string. */
void tool_json_quote(GString *out, const char *s);

/* "Format specific information:" and its lines, as qemu-img info and
 * qemu-io's info print them (info.c); nothing without format_specific. */
void tool_print_format_specific(const QimgInfo *info);

/* The snapshot table of "qimg snapshot -l" and "qimg info". */
void tool_print_snapshot_table(FILE *f, GPtrArray *snapshots);

/* qemu-img's progress indicator: "    (12.34/100%)\r" on stdout. */
typedef struct ToolProgress {
    bool enabled;
    float last; /* printed last */
    float seen; /* reported last */
} ToolProgress;

void tool_progress_init(ToolProgress *p, bool enabled);
void tool_progress_update(ToolProgress *p, uint64_t done, uint64_t total);
/* The final "(100.00/100%)" qemu-img prints when the job is done. */
void tool_progress_finish(ToolProgress *p);
void tool_progress_end(ToolProgress *p);
/* One progress line at pct (qemu-img amend prints by its own rule). */
void tool_progress_show(double pct);

/* ---- images ---- */

/* Print an open/create failure as "qimg: <message>" and free it. */
void tool_report_gerror(GError *err, const char *prefix);
/* An open failure as qemu-img's img_open words it: file-level errors read
 * "Could not open 'F': Could not open 'F': <strerror>", format-level errors
 * carry the prefix once.  Frees err. */
void tool_report_open_error(const char *filename, GError *err);
/* qemu's warning when a read-write open without a format probed raw (writes
 * to block 0 are then restricted: raw/raw.c invariant 4).  It names the
 * file: for a json: name or --image-opts (oo->image_opts), the image's
 * file name, not the options. */
void tool_warn_probed_raw(QimgImage *img, const QimgOpenOptions *oo,
                          const char *filename);

#endif
