/*
 * block/names.c: file names read from images -- where they point, and
 * whether an image may point there.
 *
 * Owns: the rule for names an image holds (VMDK extents and parents; the
 * same rule serves every format's backing and data file names), and
 * turning such a name into the path that is opened.
 *
 * Invariants (cited as "names.c invariant N"):
 *  1. Unless the caller trusts the image's names (BlkOpenOptions.
 *     trust_names), a name is refused, before anything is opened, when it
 *     is empty, names a protocol ("json:{...}", "nbd:...", any "word:"
 *     before the first '/', as QEMU reads protocol names), is absolute,
 *     has a ".." component, resolves (symbolic links followed) outside the
 *     canonical folder of the image, or is not a regular file (a device,
 *     FIFO, socket or folder).  The message names the image's name for it
 *     and the reason.  A name that does not exist is not refused here: the
 *     open that follows fails with "No such file or directory".
 *  2. The path opened is QEMU's: the image's folder as it was named (up to
 *     and including its last '/') followed by the name; an absolute name
 *     (trusted) as it is; a trusted "file:" name (QEMU's file protocol) is
 *     the plain name after it.  Nothing else rewrites it: other protocol
 *     names, trusted, are plain file names (block.h invariant 5).
 *  3. An image reached by a protocol whose names are not paths (NBD) has
 *     no folder: a relative name cannot be resolved and is refused.
 */
#include "block/block.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* QEMU's path_has_protocol(): a ':' before any '/'. */
static bool has_protocol(const char *name)
{
    const char *colon = strchr(name, ':');
    const char *slash = strchr(name, '/');
    return colon && (!slash || colon < slash);
}

static bool has_dotdot(const char *name)
{
    g_auto(GStrv) parts = g_strsplit(name, "/", -1);
    for (char **p = parts; *p; p++) {
        if (strcmp(*p, "..") == 0) {
            return true;
        }
    }
    return false;
}

const char *blk_image_name_refusal(const char *name)
{
    if (has_protocol(name)) {
        return "names a protocol";
    }
    if (g_path_is_absolute(name)) {
        return "is an absolute path";
    }
    if (has_dotdot(name)) {
        return "leads out of the image's folder with '..'";
    }
    return NULL;
}

/* Invariant 2. */
static char *join(const char *image_name, const char *name)
{
    const char *slash = strrchr(image_name, '/');

    if (g_path_is_absolute(name) || !slash) {
        return g_strdup(name);
    }
    return g_strdup_printf("%.*s%s", (int)(slash - image_name + 1), image_name, name);
}

/* Invariant 1: where path really is, against the image's folder. */
static int check_target(const char *image_name, const char *what, const char *name,
                        const char *path)
{
    g_autofree char *dir = g_path_get_dirname(image_name);
    char canon_dir[PATH_MAX], canon[PATH_MAX];
    struct stat st;
    size_t n;

    if (!realpath(path, canon) || stat(canon, &st) < 0) {
        return 0; /* the open reports it */
    }
    if (!realpath(dir, canon_dir)) {
        return blk_error(errno, "Cannot resolve the folder of '%s': %s", image_name,
                         g_strerror(errno));
    }
    n = strlen(canon_dir);
    if (strncmp(canon, canon_dir, n) != 0 || (canon[n] != '/' && n != 1)) {
        return blk_error(EACCES,
                         "%s '%s' resolves to '%s', outside the image's folder '%s'; "
                         "refused (trust the image's names to allow it)",
                         what, name, canon, canon_dir);
    }
    if (!S_ISREG(st.st_mode)) {
        return blk_error(EACCES,
                         "%s '%s' is not a regular file (a device, FIFO, socket or "
                         "folder); refused (trust the image's names to allow it)",
                         what, name);
    }
    return 0;
}

int blk_image_name_path(const char *image_name, bool image_is_path, const char *what,
                        const char *name, bool trusted, char **path)
{
    const char *why = NULL;
    g_autofree char *p = NULL;
    int ret;

    *path = NULL;
    if (!*name) {
        return blk_error(EINVAL, "%s name is empty", what);
    }
    if (!trusted) { /* invariant 1 */
        why = blk_image_name_refusal(name);
        if (why) {
            return blk_error(EACCES,
                             "%s '%s' %s; refused (trust the image's names to allow it)",
                             what, name, why);
        }
    }
    if (trusted && g_str_has_prefix(name, "file:")) { /* invariant 2 */
        name += strlen("file:");
    }
    if (!image_is_path && !g_path_is_absolute(name)) { /* invariant 3 */
        return blk_error(EINVAL,
                         "Cannot use relative paths with image '%s': it is not a file "
                         "(%s '%s')",
                         image_name, what, name);
    }
    p = join(image_name, name);
    if (!trusted && image_is_path) {
        ret = check_target(image_name, what, name, p);
        if (ret < 0) {
            return ret;
        }
    }
    *path = g_steal_pointer(&p);
    return 0;
}
