/*
 * tests/test-util.h: helpers shared by the unit tests, one copy each
 * (test-util.c).
 *
 * Owns:
 *  - the test's scratch directory: made under $QIMG_TEST_TMPDIR (else the
 *    system's temporary directory) before a group of tests runs, removed
 *    with everything in it after (tu_run_group_tests(), tu_tmpdir());
 *  - fresh file names in it (tu_fresh());
 *  - shell commands run in it with printf-style arguments (tu_run_status(),
 *    tu_run());
 *  - whether qemu-img / qemu-io are installed (the oracle), an image's
 *    contents as qemu-img reads them, and QIMG_LONG.
 *
 * Include after <cmocka.h>: the macros fail or skip the running test.
 */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Run the cmocka group 'tests' (as cmocka_run_group_tests() does) with the
 * scratch directory "<stem>-XXXXXX" made by the group setup and removed,
 * with all in it, by the group teardown.
 */
#define tu_run_group_tests(stem, tests)                                                  \
    tu_run_group_tests_((stem), #tests, (tests), G_N_ELEMENTS(tests))
int tu_run_group_tests_(const char *stem, const char *group_name,
                        const struct CMUnitTest *tests, size_t n);

/* The scratch directory (NULL outside tu_run_group_tests()). */
const char *tu_tmpdir(void);

/* A new path "<tmpdir>/<stem>-<n>", n counting up from 1. */
char *tu_fresh(const char *stem);

/* qemu-img is in PATH. */
bool tu_have_qemu_img(void);

/* qemu-img and qemu-io are both in PATH. */
bool tu_have_qemu(void);

/* QIMG_LONG is set and not "0": run the long variants. */
bool tu_long_run(void);

/*
 * Run a shell command in the scratch directory; return its exit status
 * (-1 if it did not exit), stdout and stderr together in *out (if out is
 * not NULL; g_free it).  Fails the test if the shell cannot be started.
 */
int tu_run_status(char **out, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* Run a shell command in the scratch directory; fail the test unless it exits 0. */
#define tu_run(...)                                                                      \
    do {                                                                                 \
        g_autofree char *o_ = NULL;                                                      \
        if (tu_run_status(&o_, __VA_ARGS__) != 0) {                                      \
            fail_msg("command failed: %s", o_);                                          \
        }                                                                                \
    } while (0)

/*
 * The image at path as qemu-img reads it (snapshot: NULL or the snapshot
 * to read), converted to raw; its length in *len.  Fails the test if
 * qemu-img fails.
 */
uint8_t *tu_qemu_raw(const char *path, const char *snapshot, size_t *len);

/* Skip the test without qemu-img and qemu-io. */
#define TU_SKIP_WITHOUT_QEMU()                                                           \
    do {                                                                                 \
        if (!tu_have_qemu()) {                                                           \
            skip();                                                                      \
        }                                                                                \
    } while (0)

#endif
