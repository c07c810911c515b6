/*
 * tests/test-qcow2-check-fixture.h: what the tests of the qcow2 consistency
 * check and repair (test-qcow2-check-refs.c, test-qcow2-check-tables.c)
 * share (test-qcow2-check-fixture.c): images built in memory, runs of the
 * check counted exactly, the same counts from qemu-img check
 * --output=json, check-then-repair-then-check-again, and oracle_test():
 * every test runs through it, and if a comparison with qemu-img could not
 * be made the test then fails under CI=true and is skipped otherwise
 * (counted: the program exits 77), never passes.
 *
 * Between them the programs cover check.c invariants 1-4 and 6 (and step 4
 * of its check order), repair.c invariants 2, 3 and 5, api/check.c
 * invariants 2 and 3, refcount.c invariant 1, alloc.c invariant 4 and
 * qcow2.c invariants 6 and 8.
 *
 * Images come from test-qcow2-image.h (cluster 0 header, 1 reftable,
 * 2 refblock, 3 L1, 4 L2, 5 data, 6-7 spare), with the spare clusters'
 * refcounts cleared so that the base image is clean.
 */
#ifndef TEST_QCOW2_CHECK_FIXTURE_H
#define TEST_QCOW2_CHECK_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-qcow2-image.h"
#include "test-api.h"
#include "test-util.h"

#include "qcow2/check.h"
#include "qimg/check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/wait.h>

typedef struct Run {
    BlkCheckResult res;
    gboolean ok;
    int err_code;
    char *err_msg;
} Run;

/* Every test runs through with_oracle(): its own checks all run, and if a
 * comparison with qemu-img could not be made the test then fails under CI
 * and is skipped otherwise (counted: the program exits 77), never passes. */
typedef struct OracleTest {
    CMUnitTestFunction fn;
    const char *name;
} OracleTest;

extern char *dir;
TImg base(int version, uint32_t cb);
void grow(TImg *t, unsigned clusters);
void set_ref(TImg *t, unsigned cluster, uint16_t v);
void add_snapshot(TImg *t, size_t *pos, uint32_t nb, uint64_t l1_offset, uint32_t l1_size,
                  uint32_t extra);
BlkNode *open_check(const char *path, bool rw);
void run_free(Run *r);
void run(const char *path, unsigned fix, Run *r);
int run_opts(const char *path, unsigned fix, const Qcow2CheckOptions *o,
             BlkCheckResult *res, char **msg);
bool has_msg(const BlkCheckResult *res, const char *line);
void dump_msgs(const BlkCheckResult *res);
void expect_like_qemu(const char *path, const char *fix, const Run *r);
void check_and_repair(const TImg *t, const char *name, int64_t c, int64_t l, unsigned fix,
                      int64_t cf, int64_t lf);
int setup(void **state);
int teardown(void **state);
struct CMUnitTest oracle_test_(const char *name, OracleTest *t);

#define EXPECT(r, c, l, e)                                                               \
    do {                                                                                 \
        if ((r)->res.corruptions != (c) || (r)->res.leaks != (l) ||                      \
            (r)->res.check_errors != (e)) {                                              \
            dump_msgs(&(r)->res);                                                        \
        }                                                                                \
        assert_int_equal((r)->res.corruptions, (c));                                     \
        assert_int_equal((r)->res.leaks, (l));                                           \
        assert_int_equal((r)->res.check_errors, (e));                                    \
    } while (0)

#define oracle_test(f) oracle_test_(#f, &(OracleTest){f, #f})

#endif
