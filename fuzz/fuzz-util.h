/*
 * fuzz/fuzz-util.h: the scratch folder every fuzz target writes its inputs
 * to.
 *
 * Owns: creating $TMPDIR/qimg-fuzz-STEM-XXXXXX once per process and removing
 * it (with the files in it) when the process exits, so that `make test` and
 * `make fuzz` leave nothing behind in /tmp.
 */
#ifndef QIMG_FUZZ_UTIL_H
#define QIMG_FUZZ_UTIL_H

#include <glib.h>
#include <glib/gstdio.h>
#include <stdlib.h>

static char *fuzz_scratch;

static void fuzz_scratch_remove(void)
{
    GDir *d = fuzz_scratch ? g_dir_open(fuzz_scratch, 0, NULL) : NULL;
    const char *name;

    if (!d) {
        return;
    }
    while ((name = g_dir_read_name(d)) != NULL) {
        g_autofree char *p = g_build_filename(fuzz_scratch, name, NULL);
        (void)g_unlink(p);
    }
    g_dir_close(d);
    (void)g_rmdir(fuzz_scratch);
}

/* The scratch folder (made at the first call; aborts if it cannot be). */
static inline const char *fuzz_scratch_dir(const char *stem)
{
    if (!fuzz_scratch) {
        const char *base = getenv("TMPDIR");
        char *tmpl =
            g_strdup_printf("%s/qimg-fuzz-%s-XXXXXX", base ? base : "/tmp", stem);
        fuzz_scratch = g_mkdtemp(tmpl);
        if (!fuzz_scratch || atexit(fuzz_scratch_remove) != 0) {
            abort();
        }
    }
    return fuzz_scratch;
}

#endif
