/*
 * block/dl.c: looking up a function of a library loaded at its first use
 * (dl.h invariants 1 and 2).
 *
 * Owns: nothing but the lookup; each library's loader (rbd-lib.c,
 * nbd-lib.c) owns its handles and its table.
 */
#include "block/dl.h"

#include <dlfcn.h>
#include <glib.h>
#include <string.h>

bool blk_dl_sym(void *lib, const char *soname, const char *name, void *fn, size_t n,
                char **error)
{
    void *sym = dlsym(lib, name);

    if (!sym || n != sizeof(sym)) {
        if (!*error) {
            *error = g_strdup_printf("%s has no %s", soname, name);
        }
        return false;
    }
    memcpy(fn, &sym, n);
    return true;
}
