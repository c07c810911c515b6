/*
 * block/dl.h: shared libraries qimg loads at their first use instead of
 * linking them (block/dl.c): librados and librbd (rbd-lib.h), libnbd
 * (nbd-lib.h), GnuTLS (crypto/gnutls-lib.h), json-glib (api/json-flat.c).
 *
 * Invariants (cited as "dl.h invariant N"):
 *  1. A library loaded here costs a process nothing until a command uses
 *     it: each of these brings dozens of dependent libraries (C++ runtimes,
 *     libxml2 and ICU for libnbd) whose relocation and static constructors
 *     cost more start-up time than all of qimg's own (measured: libnbd
 *     alone 16 ms of CPU per process start, the rest of qimg 4 ms; then
 *     GnuTLS 5 ms and json-glib with GObject and GIO 4 ms).
 *  2. Each table's entries have the types of the functions in the headers
 *     qimg was built with (__typeof__): a changed prototype is a build
 *     error, a missing symbol a load error naming it.
 */
#ifndef QIMG_BLOCK_DL_H
#define QIMG_BLOCK_DL_H

#include <stdbool.h>
#include <stddef.h>

/* dlsym(lib, name) into *fn, a function pointer of size n; false (and
 * *error set to "SONAME has no NAME" unless already set) when lib has
 * none.  ISO C has no conversion from void * to a function pointer: the
 * address is copied. */
bool blk_dl_sym(void *lib, const char *soname, const char *name, void *fn, size_t n,
                char **error);

#endif
