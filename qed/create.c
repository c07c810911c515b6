/*
 * qed/create.c: qemu-img create -f qed and convert -O qed -- refused.
 *
 * Owns: the refusal.  QEMU deprecated writing QED images and qimg does not
 * write them at all (README, "Formats"): it reads, checks and converts
 * from them.  The refusal names the reason and what to use instead.
 *
 * Invariants (cited as "qed/create.c invariant N"):
 *  1. Nothing is created: the target file is neither made nor truncated.
 */
#include "qed/qed.h"

#include <errno.h>

int qed_create(const char *filename, const BlkCreateOptions *opts)
{
    (void)filename;
    (void)opts;
    return blk_error(ENOTSUP, "qimg does not create QED images (QEMU deprecates writing "
                              "the format); use qcow2 instead");
}
