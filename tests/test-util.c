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
 *  4. tu_chunk[] (the buffers file comparisons read into, made once) is
 *     touched only with the tu_chunk lock held.
 *  5. A command runs through posix_spawn (no fork of the test process),
 *     stdin /dev/null, with no descriptor of the test open but 0-2.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test-util.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

void tu_fill_random(GRand *r, uint8_t *buf, size_t len)
{
    /* xorshift64* (Vigna): never 0 once its state is not 0 */
    uint64_t x = ((uint64_t)g_rand_int(r) << 32 | g_rand_int(r)) | 1;

    for (size_t i = 0; i < len; i += 8) {
        uint64_t v;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v = x * UINT64_C(0x2545F4914F6CDD1D);
        memcpy(buf + i, &v, MIN(len - i, sizeof(v)));
    }
}

/* sh -c CMD in the scratch directory, its output (stdout; CMD's stderr
 * goes there too) in *out: posix_spawn, not fork (g_spawn_sync): a fork of
 * a test process under ASan copied its page tables, and every page it wrote
 * afterwards faulted (copy on write), for each of the hundreds of commands
 * some tests run. */
int tu_run_status(char **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *cmd = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_autofree char *full = g_strdup_printf("(%s) 2>&1", cmd);
    char *argv[] = {"/bin/sh", "-c", full, NULL};
    GString *o = g_string_new(NULL);
    posix_spawn_file_actions_t fa;
    int fds[2], status = 0, err;
    pid_t pid;
    char buf[4096];
    ssize_t n;

    if (pipe2(fds, O_CLOEXEC) < 0) {
        fail_msg("could not run %s: pipe: %s", cmd, g_strerror(errno));
    }
    posix_spawn_file_actions_init(&fa);
    /* stdin from /dev/null, as g_spawn_sync gave it: no prompt can wait */
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
    if (tu_dir) {
        posix_spawn_file_actions_addchdir_np(&fa, tu_dir);
    }
    err = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (err != 0) {
        close(fds[0]);
        fail_msg("could not run %s: %s", cmd, g_strerror(err));
    }
    while ((n = read(fds[0], buf, sizeof(buf))) != 0) {
        if (n < 0 && errno != EINTR) {
            break;
        }
        if (n > 0) {
            g_string_append_len(o, buf, n);
        }
    }
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (out) {
        *out = g_string_free(o, FALSE);
    } else {
        g_string_free(o, TRUE);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void tu_write_sparse(const char *path, const void *buf, size_t len)
{
    const size_t blk = 4096;
    const uint8_t *data = buf;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

    if (fd < 0) {
        fail_msg("write %s: %s", path, g_strerror(errno));
    }
    /* blocks of zeros stay holes, as in a sparse image; runs of the
     * others are written at once */
    for (size_t off = 0; off < len;) {
        size_t end = off;
        while (end < len && !(data[end] == 0 && memcmp(data + end, data + end + 1,
                                                       MIN(blk, len - end) - 1) == 0)) {
            end += MIN(blk, len - end);
        }
        if (end > off &&
            pwrite(fd, data + off, end - off, (off_t)off) != (ssize_t)(end - off)) {
            close(fd);
            fail_msg("write %s: %s", path, g_strerror(errno));
        }
        off = end + (end < len ? MIN(blk, len - end) : 0);
    }
    if (ftruncate(fd, (off_t)len) != 0 || close(fd) != 0) {
        fail_msg("write %s: %s", path, g_strerror(errno));
    }
}

void tu_copy_file(const char *from, const char *to)
{
    g_autofree gchar *data = NULL;
    g_autoptr(GError) err = NULL;
    gsize n = 0;

    if (!g_file_get_contents(from, &data, &n, &err)) {
        fail_msg("copy %s: %s", from, err->message);
    }
    tu_write_sparse(to, data, n);
}

/* Two chunk buffers made once and kept (tu_same_file(), tu_file_cmp()):
 * a fresh multi-MiB buffer per comparison cost most of the system time of
 * some tests under ASan (a page fault per 4 KiB). */
#define TU_CHUNK ((size_t)1 << 20)
static uint8_t *tu_chunk[2];
G_LOCK_DEFINE_STATIC(tu_chunk);

/* n bytes of fd at off into buf: 0, or -1 on an error or a short file. */
static int read_full(int fd, uint8_t *buf, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t r = pread(fd, buf, n, (off_t)off);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) {
                continue;
            }
            return -1;
        }
        buf += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Compare the file fd of size bytes with want[0..want_len) followed by
 * zeros: the first differing offset, or size if they are equal (or -1 on
 * a read error).  Called with tu_chunk locked. */
static int64_t cmp_fd(int fd, uint64_t size, const uint8_t *want, uint64_t want_len)
{
    if (!tu_chunk[0]) {
        tu_chunk[0] = g_malloc(TU_CHUNK);
    }
    for (uint64_t pos = 0; pos < size;) {
        size_t n = (size_t)MIN(TU_CHUNK, size - pos);
        size_t w = pos < want_len ? (size_t)MIN(n, want_len - pos) : 0;

        if (read_full(fd, tu_chunk[0], n, pos) < 0) {
            return -1;
        }
        const uint8_t *tail = tu_chunk[0] + w; /* zeros: each byte equals the next */
        if (memcmp(tu_chunk[0], want + pos, w) != 0 ||
            (n > w && (tail[0] != 0 || memcmp(tail, tail + 1, n - w - 1) != 0))) {
            for (size_t i = 0; i < n; i++) {
                if (tu_chunk[0][i] != (i < w ? want[pos + i] : 0)) {
                    return (int64_t)(pos + i);
                }
            }
        }
        pos += n;
    }
    return (int64_t)size;
}

int64_t tu_file_cmp(const char *path, const uint8_t *want, uint64_t want_len,
                    uint64_t *size)
{
    struct stat st;
    int64_t ret;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0 || fstat(fd, &st) < 0) {
        fail_msg("cannot read %s: %s", path, g_strerror(errno));
    }
    *size = (uint64_t)st.st_size;
    G_LOCK(tu_chunk);
    ret = cmp_fd(fd, *size, want, want_len);
    G_UNLOCK(tu_chunk);
    close(fd);
    if (ret < 0) {
        fail_msg("cannot read %s", path);
    }
    return ret == (int64_t)*size ? -1 : ret;
}

bool tu_same_file(const char *a, const char *b)
{
    int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
    struct stat sa, sb;
    bool same = fa >= 0 && fb >= 0 && fstat(fa, &sa) == 0 && fstat(fb, &sb) == 0 &&
                sa.st_size == sb.st_size;

    G_LOCK(tu_chunk);
    for (uint64_t pos = 0; same && pos < (uint64_t)sa.st_size;) {
        size_t n = (size_t)MIN(TU_CHUNK, (uint64_t)sa.st_size - pos);
        for (int i = 0; i < 2; i++) {
            if (!tu_chunk[i]) {
                tu_chunk[i] = g_malloc(TU_CHUNK);
            }
        }
        same = read_full(fa, tu_chunk[0], n, pos) == 0 &&
               read_full(fb, tu_chunk[1], n, pos) == 0 &&
               memcmp(tu_chunk[0], tu_chunk[1], n) == 0;
        pos += n;
    }
    G_UNLOCK(tu_chunk);
    if (fa >= 0) {
        close(fa);
    }
    if (fb >= 0) {
        close(fb);
    }
    return same;
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
