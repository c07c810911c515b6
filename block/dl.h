/*
 * block/dl.h: shared libraries qimg loads at their first use instead of
 * linking them (block/dl.c): librados and librbd (rbd-lib.h), libnbd
 * (nbd-lib.h), libssh (ssh-lib.h), GnuTLS (crypto/gnutls-lib.h).
 *
 * Invariants (cited as "dl.h invariant N"):
 *  1. A library loaded here costs a process nothing until a command uses
 *     it: each of these brings dozens of dependent libraries (C++ runtimes,
 *     libxml2 and ICU for libnbd) whose relocation and static constructors
 *     cost more start-up time than all of qimg's own (measured: libnbd
 *     alone 16 ms of CPU per process start, the rest of qimg 4 ms; then
 *     GnuTLS 5 ms).
 *  2. Each table's entries have the types of the functions in the headers
 *     qimg was built with (__typeof__): a changed prototype is a build
 *     error, a missing symbol a load error naming it.
 *  3. One attempt per process: its result, success or the failure's
 *     message, is what every later call reports.  The table is filled only
 *     when every function was found; after a failure it stays all NULL,
 *     and its users load before any other step, so nothing calls it.  The
 *     handles are never closed (librados' threads may outlive any image).
 */
#ifndef QIMG_BLOCK_DL_H
#define QIMG_BLOCK_DL_H

#include <glib.h>
#include <stddef.h>

/* One function of a table: its name and its place in the table. */
typedef struct BlkDlSym {
    const char *name;
    size_t offset;
} BlkDlSym;
/* The entry of function @f in table type @Table, for an X-macro list. */
#define BLK_DL_SYM(Table, f) {#f, offsetof(Table, f)},

/* A library and the table it fills (invariant 3).  Each function is looked
 * up in the sonames in order (librbd's table has librados' functions). */
typedef struct BlkDlLib {
    const char *sonames[3]; /* NULL-terminated */
    const char *needed_by;  /* the error's start: "NBD needs" */
    const char *packages;   /* Debian's packages of the sonames */
    const BlkDlSym *syms;
    size_t nsyms;
    void *table; /* of table_size bytes, all function pointers */
    size_t table_size;
    GOnce once;
} BlkDlLib;

/* Loads @lib, once per process (invariant 3): NULL once its table is
 * filled, else why not ("NBD needs libnbd.so.0 (Debian: libnbd0): ...",
 * or "libnbd.so.0 has no nbd_foo"), the same text at every call. */
const char *blk_dl_load(BlkDlLib *lib);

#endif
