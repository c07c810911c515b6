/*
 * tests/test-lock.c: image locks (block/lock.c invariants 1-5).
 *
 * OFD locks belong to an open file description, so two opens in this
 * process conflict exactly as two processes do: every test here is the
 * two-process case.  Which bytes a file holds is read from a third open
 * (F_OFD_GETLK with a write lock sees every other holder), so the tests
 * need no /proc.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "block/lock.h"
#include "test-util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB (1024 * 1024)

/* The lock bytes someone holds on 'path', as "100 101 201" ("" for none). */
static char *held(const char *path)
{
    static const int bytes[] = {100, 101, 102, 103, 200, 201, 202, 203};
    GString *out = g_string_new(NULL);
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    assert_true(fd >= 0);
    for (size_t i = 0; i < G_N_ELEMENTS(bytes); i++) {
        struct flock fl = {
            .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = bytes[i], .l_len = 1};
        assert_int_equal(fcntl(fd, F_OFD_GETLK, &fl), 0);
        if (fl.l_type != F_UNLCK) {
            g_string_append_printf(out, "%s%d", out->len ? " " : "", bytes[i]);
        }
    }
    close(fd);
    return g_string_free(out, FALSE);
}

#define assert_held(path, want)                                                          \
    do {                                                                                 \
        g_autofree char *h_ = held(path);                                                \
        assert_string_equal(h_, (want));                                                 \
    } while (0)

static char *new_file(const char *stem)
{
    char *p = tu_fresh(stem);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, MiB), 0);
    close(fd);
    return p;
}

static int open_fd(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

/* ---- the byte protocol (lock.c invariants 1-4) ---- */

static void test_bytes_and_conflicts(void **state)
{
    g_autofree char *p = new_file("bytes");
    int a = open_fd(p), b = open_fd(p);
    BlkLockState sa = {0}, sb = {0};

    /* invariant 1: one byte per permission held and per permission unshared */
    assert_int_equal(blk_lock_apply(&sa, a, BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE,
                                    BLK_PERM_ALL & ~BLK_PERM_RESIZE, p),
                     0);
    assert_held(p, "100 101 203");
    assert_int_equal(sa.perm, BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE);
    assert_int_equal(sa.unshared, BLK_PERM_RESIZE);

    /* a second open that refuses to share write: A writes (invariant 2) */
    assert_int_equal(blk_lock_apply(&sb, b, BLK_PERM_CONSISTENT_READ,
                                    BLK_PERM_ALL & ~BLK_PERM_WRITE, p),
                     -EAGAIN);
    g_autofree char *want1 = g_strdup_printf(
        "Failed to get shared \"write\" lock\nIs another process using the image [%s]?",
        p);
    assert_string_equal(blk_error_message(), want1);
    /* invariant 3: B took nothing, A still holds its bytes */
    assert_int_equal(sb.perm | sb.unshared, 0);
    assert_held(p, "100 101 203");

    /* a second open that wants to resize: A does not share it */
    assert_int_equal(blk_lock_apply(&sb, b, BLK_PERM_RESIZE, BLK_PERM_ALL, p), -EAGAIN);
    g_autofree char *want2 = g_strdup_printf(
        "Failed to get \"resize\" lock\nIs another process using the image [%s]?", p);
    assert_string_equal(blk_error_message(), want2);

    /* two writers that share everything with each other are fine */
    assert_int_equal(blk_lock_apply(&sb, b, BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE,
                                    BLK_PERM_ALL & ~BLK_PERM_RESIZE, p),
                     0);
    assert_held(p, "100 101 203");

    /* release: B's bytes go, A's stay (the same bytes: nothing visible) */
    blk_lock_release(&sb, b);
    assert_int_equal(sb.perm | sb.unshared, 0);
    assert_held(p, "100 101 203");
    /* closing A's descriptor drops A's locks */
    close(a);
    assert_held(p, "");
    /* now B may refuse to share write */
    assert_int_equal(blk_lock_apply(&sb, b, BLK_PERM_CONSISTENT_READ,
                                    BLK_PERM_ALL & ~BLK_PERM_WRITE, p),
                     0);
    assert_held(p, "100 201");
    close(b);
    assert_held(p, "");
}

static void test_upgrade_keeps_state_on_failure(void **state)
{
    g_autofree char *p = new_file("upgrade");
    int a = open_fd(p), b = open_fd(p);
    BlkLockState sa = {0}, sb = {0};

    assert_int_equal(blk_lock_apply(&sa, a, BLK_PERM_CONSISTENT_READ, BLK_PERM_ALL, p),
                     0);
    assert_int_equal(blk_lock_apply(&sb, b, 0, BLK_PERM_ALL & ~BLK_PERM_WRITE, p), 0);
    assert_held(p, "100 201");
    /* A's upgrade to write fails and leaves A as it was (invariant 3) */
    assert_int_equal(blk_lock_add(&sa, a, BLK_PERM_WRITE, p), -EAGAIN);
    assert_int_equal(sa.perm, BLK_PERM_CONSISTENT_READ);
    assert_int_equal(sa.unshared, 0);
    blk_lock_release(&sb, b);
    assert_held(p, "100");
    /* now it works; and a downgrade drops the bytes no longer needed */
    assert_int_equal(blk_lock_apply(&sa, a, BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE,
                                    BLK_PERM_ALL & ~(BLK_PERM_WRITE | BLK_PERM_RESIZE),
                                    p),
                     0);
    assert_held(p, "100 101 201 203");
    assert_int_equal(blk_lock_apply(&sa, a, BLK_PERM_CONSISTENT_READ, BLK_PERM_ALL, p),
                     0);
    assert_held(p, "100");
    close(a);
    close(b);
}

static void test_each_permission_named(void **state)
{
    static const char *const names[] = {"consistent read", "write", "write unchanged",
                                        "resize"};
    g_autofree char *p = new_file("names");
    int a = open_fd(p), b = open_fd(p);

    for (unsigned i = 0; i < 4; i++) {
        BlkLockState sa = {0}, sb = {0};
        unsigned bit = 1u << i;

        assert_string_equal(blk_perm_name(bit), names[i]);
        assert_int_equal(blk_lock_apply(&sa, a, bit, BLK_PERM_ALL, p), 0);
        assert_int_equal(blk_lock_apply(&sb, b, 0, BLK_PERM_ALL & ~bit, p), -EAGAIN);
        g_autofree char *w1 =
            g_strdup_printf("Failed to get shared \"%s\" lock", names[i]);
        assert_true(g_str_has_prefix(blk_error_message(), w1));
        blk_lock_release(&sa, a);
        assert_int_equal(blk_lock_apply(&sa, a, 0, BLK_PERM_ALL & ~bit, p), 0);
        assert_int_equal(blk_lock_apply(&sb, b, bit, BLK_PERM_ALL, p), -EAGAIN);
        g_autofree char *w2 = g_strdup_printf("Failed to get \"%s\" lock", names[i]);
        assert_true(g_str_has_prefix(blk_error_message(), w2));
        blk_lock_release(&sa, a);
    }
    close(a);
    close(b);
}

/* A byte someone holds a write lock on cannot be taken (invariant 4). */
static void test_byte_not_lockable(void **state)
{
    g_autofree char *p = new_file("wrlck");
    int a = open_fd(p), w = open_fd(p);
    struct flock fl = {
        .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 101, .l_len = 1};
    BlkLockState sa = {0};

    assert_int_equal(fcntl(w, F_OFD_SETLK, &fl), 0);
    assert_int_equal(blk_lock_apply(&sa, a, BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE,
                                    BLK_PERM_ALL, p),
                     -EAGAIN);
    assert_string_equal(blk_error_message(), "Failed to lock byte 101");
    assert_int_equal(sa.perm, 0);
    close(w);
    assert_held(p, ""); /* byte 100 was given back */
    close(a);
}

/* ---- the permissions of each open (lock.c invariant 5) ---- */

static char *perm_bytes(BlkNodeRole role, QimgOpenOptions o)
{
    GString *out = g_string_new(NULL);
    unsigned perm, shared;

    blk_lock_perms(role, &o, &perm, &shared);
    for (unsigned i = 0; i < 4; i++) {
        if (perm & (1u << i)) {
            g_string_append_printf(out, "%s%u", out->len ? " " : "", 100 + i);
        }
    }
    for (unsigned i = 0; i < 4; i++) {
        if (!(shared & (1u << i))) {
            g_string_append_printf(out, "%s%u", out->len ? " " : "", 200 + i);
        }
    }
    return g_string_free(out, FALSE);
}

#define assert_perms(role, want, ...)                                                    \
    do {                                                                                 \
        g_autofree char *b_ = perm_bytes((role), (QimgOpenOptions){__VA_ARGS__});        \
        assert_string_equal(b_, (want));                                                 \
    } while (0)

static void test_perm_table(void **state)
{
    /* measured with qemu-io, qemu-img and qemu-system-x86_64 7.2 */
    assert_perms(BLK_ROLE_PROTOCOL, "100", .read_only = true);
    assert_perms(BLK_ROLE_PROTOCOL, "100", .read_only = true, .force_share = true);
    assert_perms(BLK_ROLE_PROTOCOL, "", .read_only = true, .no_io = true);
    assert_perms(BLK_ROLE_PROTOCOL, "100 101", .read_only = false);
    assert_perms(BLK_ROLE_PROTOCOL, "100 101 103", .resize = true);
    assert_perms(BLK_ROLE_PROTOCOL, "100 201 203", .read_only = true, .deny_write = true);
    assert_perms(BLK_ROLE_METADATA, "100 201 203", .read_only = true);
    assert_perms(BLK_ROLE_METADATA, "100", .read_only = true, .force_share = true);
    assert_perms(BLK_ROLE_METADATA, "201 203", .read_only = true, .no_io = true);
    assert_perms(BLK_ROLE_METADATA, "", .read_only = true, .no_io = true,
                 .force_share = true);
    assert_perms(BLK_ROLE_METADATA, "100 101 103 201 203", .read_only = false);
    assert_perms(BLK_ROLE_DATA, "100 203", .read_only = true);
    assert_perms(BLK_ROLE_DATA, "100", .read_only = true, .force_share = true);
    assert_perms(BLK_ROLE_DATA, "", .read_only = true, .no_io = true);
    assert_perms(BLK_ROLE_DATA, "100 201 203", .read_only = true, .deny_write = true);
    assert_perms(BLK_ROLE_DATA, "100 101 103 203", .read_only = false);
    assert_perms(BLK_ROLE_CREATE, "101 103 203", .read_only = false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_and_conflicts),
        cmocka_unit_test(test_upgrade_keeps_state_on_failure),
        cmocka_unit_test(test_each_permission_named),
        cmocka_unit_test(test_byte_not_lockable),
        cmocka_unit_test(test_perm_table),
    };
    return tu_run_group_tests("lock", tests);
}
