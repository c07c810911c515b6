/*
 * tests/test-util.c: helpers shared by the unit tests (see test-util.h):
 * the scratch directory, fresh names in it, files copied and compared,
 * shell commands run in it,
 * whether qemu-img / qemu-io are installed, images read by qemu-img,
 * the skip accounting and the CI rule for a missing oracle.
 *
 * Invariants:
 *  1. tu_dir is NULL or an existing directory made by the group setup
 *     (group_setup()); the group teardown removes it and sets it back
 *     to NULL.
 *  2. tu_fresh() never returns the same name twice for one directory.
 *  3. tu_skipped counts the tests ended by tu_skip_(); tu_exit_status()
 *     turns a clean run with tu_skipped > 0 into 77.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *tu_stem;
static char *tu_dir;
static int tu_counter;
static int tu_skipped;

/* Group setup: make the scratch directory; 0 or -errno. */
static int group_setup(void **state)
{
    const char *base = g_getenv("QIMG_TEST_TMPDIR");
    g_autofree char *tmpl =
        g_strdup_printf("%s/%s-XXXXXX", base ? base : g_get_tmp_dir(), tu_stem);

    if (!g_mkdtemp(tmpl)) {
        return -errno;
    }
    tu_dir = g_steal_pointer(&tmpl);
    tu_counter = 0;
    return 0;
}

/* Group teardown: remove the scratch directory and all in it; 0 or -errno. */
static int group_teardown(void **state)
{
    g_autofree char *cmd = NULL;
    int ret = 0;

    if (!tu_dir) {
        goto out;
    }
    cmd = g_strdup_printf("rm -rf '%s'", tu_dir);
    if (system(cmd) != 0) {
        ret = -EIO;
    }
    g_clear_pointer(&tu_dir, g_free);
out:
    return ret;
}

int tu_run_group_tests_(const char *stem, const char *group_name,
                        const struct CMUnitTest *tests, size_t n)
{
    tu_stem = stem;
    /* what the cmocka_run_group_tests() macro expands to */
    return tu_exit_status(
        _cmocka_run_group_tests(group_name, tests, n, group_setup, group_teardown));
}

const char *tu_tmpdir(void)
{
    return tu_dir;
}

char *tu_fresh(const char *stem)
{
    return g_strdup_printf("%s/%s-%d", tu_dir, stem, ++tu_counter);
}

bool tu_have_qemu_img(void)
{
    g_autofree char *img = g_find_program_in_path("qemu-img");
    return img != NULL;
}

bool tu_have_qemu(void)
{
    g_autofree char *io = g_find_program_in_path("qemu-io");
    return tu_have_qemu_img() && io != NULL;
}

bool tu_in_ci(void)
{
    const char *v = g_getenv("CI");
    return v && (g_ascii_strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

void tu_skip_(const char *file, int line, const char *func, const char *fmt, ...)
{
    /* nothing allocated: _skip() jumps out of the test (no leak for LSan) */
    tu_skipped++;
    fprintf(stderr, "SKIP %s: ", func);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    } else {
        fputs("(no reason given)", stderr);
    }
    fputc('\n', stderr);
    fflush(stderr);
    _skip(file, line);
    abort(); /* _skip() does not return inside a test */
}

void tu_require_tool_(const char *file, int line, const char *func, const char *tool)
{
    char *path = g_find_program_in_path(tool);

    if (path) {
        g_free(path);
        return;
    }
    if (tu_in_ci()) {
        fprintf(stderr,
                "FAIL %s: %s not found in PATH (CI=true: a missing oracle fails)\n", func,
                tool);
        _fail(file, line);
        abort();
    }
    tu_skip_(file, line, func, "%s not found in PATH", tool);
}

int tu_exit_status(int rc)
{
    if (rc != 0) {
        return rc;
    }
    if (tu_skipped > 0) {
        fprintf(stderr, "%d test(s) skipped: exit status 77 (skipped)\n", tu_skipped);
        return 77;
    }
    return 0;
}

bool tu_long_run(void)
{
    const char *v = g_getenv("QIMG_LONG");
    return v && strcmp(v, "0") != 0;
}

int tu_run_status(char **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *cmd = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_autofree char *full = g_strdup_printf("(%s) 2>&1", cmd);
    const char *argv[] = {"/bin/sh", "-c", full, NULL};
    char *o = NULL;
    int status = 0;

    if (!g_spawn_sync(tu_dir, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &o, NULL,
                      &status, NULL)) {
        fail_msg("could not run %s", cmd);
    }
    if (out) {
        *out = o;
    } else {
        g_free(o);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void tu_copy_file(const char *from, const char *to)
{
    const gsize blk = 4096;
    g_autofree gchar *data = NULL;
    g_autoptr(GError) err = NULL;
    gsize n = 0;
    int fd;

    if (!g_file_get_contents(from, &data, &n, &err)) {
        fail_msg("copy %s: %s", from, err->message);
    }
    fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fail_msg("copy to %s: %s", to, g_strerror(errno));
    }
    /* blocks of zeros stay holes, as in a sparse image; runs of the
     * others are written at once */
    for (gsize off = 0; off < n;) {
        gsize end = off;
        while (end < n && !(data[end] == 0 && memcmp(data + end, data + end + 1,
                                                     MIN(blk, n - end) - 1) == 0)) {
            end += MIN(blk, n - end);
        }
        if (end > off &&
            pwrite(fd, data + off, end - off, (off_t)off) != (ssize_t)(end - off)) {
            close(fd);
            fail_msg("copy to %s: %s", to, g_strerror(errno));
        }
        off = end + (end < n ? MIN(blk, n - end) : 0);
    }
    if (ftruncate(fd, (off_t)n) != 0 || close(fd) != 0) {
        fail_msg("copy to %s: %s", to, g_strerror(errno));
    }
}

bool tu_same_file(const char *a, const char *b)
{
    g_autofree gchar *da = NULL, *db = NULL;
    gsize na = 0, nb = 0;

    return g_file_get_contents(a, &da, &na, NULL) &&
           g_file_get_contents(b, &db, &nb, NULL) && na == nb && memcmp(da, db, na) == 0;
}

uint8_t *tu_qemu_raw(const char *path, const char *snapshot, size_t *len)
{
    g_autofree char *raw = g_strdup_printf("%s.out.raw", path);
    gchar *data = NULL;
    gsize n = 0;

    if (snapshot) {
        tu_run("qemu-img convert -l '%s' -O raw '%s' '%s'", snapshot, path, raw);
    } else {
        tu_run("qemu-img convert -O raw '%s' '%s'", path, raw);
    }
    assert_true(g_file_get_contents(raw, &data, &n, NULL));
    unlink(raw);
    *len = n;
    return (uint8_t *)data;
}
