/*
 * tests/test-util.h: helpers shared by the unit tests, one copy each
 * (test-util.c).
 *
 * Owns:
 *  - the test's scratch directory: made under $QIMG_TEST_TMPDIR (else the
 *    system's temporary directory) before a group of tests runs, removed
 *    with everything in it after (tu_run_group_tests(), tu_tmpdir());
 *  - fresh file names in it (tu_fresh()), files copied and compared
 *    there without a process (tu_copy_file(), tu_same_file());
 *  - shell commands run in it with printf-style arguments (tu_run_status(),
 *    tu_run());
 *  - whether qemu-img / qemu-io are installed (the oracle), an image's
 *    contents as qemu-img reads them, and QIMG_LONG;
 *  - pseudo-random buffer contents from a seeded GRand (tu_fill_random()),
 *    the one fill every test uses;
 *  - the skip accounting: every skipped test is counted and its reason
 *    printed ("SKIP test: reason" on stderr), and a program in which any
 *    test skipped exits 77 (meson's SKIP) instead of 0 (tu_exit_status());
 *  - the CI rule: with CI=true in the environment a missing oracle fails
 *    the test instead of skipping it (tu_require_tool()).
 *
 * Include after <cmocka.h>: the macros fail or skip the running test.
 * cmocka's skip() is redefined here to be counted, so that no test can
 * skip silently.
 *
 * Invariants:
 *  1. every skip goes through tu_skip_() (the skip() and tu_skip() macros),
 *     which counts it before it ends the test;
 *  2. tu_exit_status() is 0 only if no test failed and none was skipped.
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

/* CI is "true" (or "1") in the environment: a missing oracle is a failure. */
bool tu_in_ci(void);

/*
 * Count the running test as skipped, print "SKIP <func>: <reason>" on
 * stderr (reason: printf-style, may be NULL) and end it (cmocka's skip).
 */
void tu_skip_(const char *file, int line, const char *func, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5) G_GNUC_NORETURN;

/* Skip the running test, saying why (printf-style). */
#define tu_skip(...) tu_skip_(__FILE__, __LINE__, __func__, __VA_ARGS__)

/* cmocka's skip(), counted (invariant 1); prefer tu_skip() with a reason. */
#undef skip
#define skip() tu_skip_(__FILE__, __LINE__, __func__, NULL)

/*
 * The test needs the program 'tool' in PATH (the oracle): when it is
 * missing, fail the test under CI (tu_in_ci()), skip it otherwise.
 */
void tu_require_tool_(const char *file, int line, const char *func, const char *tool);
#define tu_require_tool(tool) tu_require_tool_(__FILE__, __LINE__, __func__, (tool))

/*
 * The exit status of a test program whose cmocka run returned rc: rc when
 * a test failed, else 77 when a test was skipped (printed), else 0.
 */
int tu_exit_status(int rc);

/* QIMG_LONG is set and not "0": run the long variants. */
bool tu_long_run(void);

/*
 * Fill buf[0..len) with pseudo-random bytes: a xorshift64* stream seeded
 * by two draws of r, so the same seed gives the same bytes and the next
 * draws of r do not depend on len.  (One g_rand_int() per byte was a
 * quarter of test-qcow2-threads' CPU, under ASan and TSan alike.)
 */
void tu_fill_random(GRand *r, uint8_t *buf, size_t len);

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

/* Write buf[0..len) to the file at path (made or replaced; blocks of zeros
 * left as holes; no fsync: scratch files); fails the test on an error. */
void tu_write_sparse(const char *path, const void *buf, size_t len);

/* Copy the file 'from' to 'to' (made or replaced; blocks of zeros left as
 * holes; no fsync: scratch files), without a process; fails the test on an
 * error. */
void tu_copy_file(const char *from, const char *to);

/* Files a and b hold the same bytes (cmp -s, without a process; read in
 * chunks into buffers kept for the next call). */
bool tu_same_file(const char *a, const char *b);

/*
 * Compare the file at path with want[0..want_len) followed by zeros, in
 * chunks (no buffer of the file's size): -1 if every byte of the file
 * matches, else the offset of the first byte that differs.  The file's size
 * in *size (the caller checks it).  Fails the test if the file cannot be
 * read.
 */
int64_t tu_file_cmp(const char *path, const uint8_t *want, uint64_t want_len,
                    uint64_t *size);

/*
 * The image at path as qemu-img reads it (snapshot: NULL or the snapshot
 * to read), converted to raw; its length in *len.  Fails the test if
 * qemu-img fails.
 */
uint8_t *tu_qemu_raw(const char *path, const char *snapshot, size_t *len);

/* The test needs qemu-img: fail under CI without it, skip otherwise. */
#define TU_REQUIRE_QEMU_IMG() tu_require_tool("qemu-img")

/* The test needs qemu-img and qemu-io: fail under CI without them, skip
 * otherwise. */
#define TU_REQUIRE_QEMU()                                                                \
    do {                                                                                 \
        tu_require_tool("qemu-img");                                                     \
        tu_require_tool("qemu-io");                                                      \
    } while (0)

#endif
