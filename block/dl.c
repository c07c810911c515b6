/*
 * block/dl.c: loading a library at its first use into its table of
 * functions (dl.h invariants 1 to 3).
 *
 * Owns: the dlopen() handles (never closed) and the all-or-nothing fill
 * of a table; each library's file (rbd-lib.c, nbd-lib.c, gnutls-lib.c,
 * json-flat.c) owns its table and its list of functions.
 */
#include "block/dl.h"

#include <dlfcn.h>
#include <string.h>

/* A table entry is a function pointer, filled from dlsym's void *: ISO C
 * has no conversion between the two, so the address is copied. */
_Static_assert(sizeof(void (*)(void)) == sizeof(void *),
               "function pointers are as large as data pointers");

static gpointer load(gpointer opaque)
{
    BlkDlLib *lib = opaque;
    void *handles[G_N_ELEMENTS(lib->sonames)] = {0};
    g_autofree char *table = g_malloc0(lib->table_size);
    size_t n = 0;

    while (n < G_N_ELEMENTS(lib->sonames) && lib->sonames[n]) {
        handles[n] = dlopen(lib->sonames[n], RTLD_NOW | RTLD_LOCAL);
        if (!handles[n]) {
            return g_strdup_printf("%s %s (Debian: %s): %s", lib->needed_by,
                                   lib->sonames[n], lib->packages, dlerror());
        }
        n++;
    }
    for (size_t i = 0; i < lib->nsyms; i++) {
        const BlkDlSym *s = &lib->syms[i];
        void *sym = NULL;

        for (size_t h = 0; h < n && !sym; h++) {
            sym = dlsym(handles[h], s->name);
        }
        if (!sym) {
            g_autofree char *names = g_strjoinv(" or ", (char **)lib->sonames);
            return g_strdup_printf("%s has no %s", names, s->name);
        }
        g_assert(s->offset + sizeof(sym) <= lib->table_size);
        memcpy(table + s->offset, &sym, sizeof(sym));
    }
    memcpy(lib->table, table, lib->table_size); /* invariant 3: all of it */
    return NULL;
}

const char *blk_dl_load(BlkDlLib *lib)
{
    return g_once(&lib->once, load, lib);
}
