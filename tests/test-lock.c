/*
 * tests/test-lock.c: image locks (block/lock.c invariants 1-5, block.h
 * invariant 6, file.c invariant 11).
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
#include "qimg/qimg.h"
#include "block/lock.h"
#include "qimg/snapshot.h"
#include "qimg/vmstate.h"
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

static void create_image(const char *path, const char *fmt, const char *key,
                         const char *value, const char *backing)
{
    g_autoptr(GHashTable) o = g_hash_table_new(g_str_hash, g_str_equal);
    QimgCreateOptions co = {.struct_size = sizeof(QimgCreateOptions),
                            .format = fmt,
                            .size = MiB,
                            .size_set = true};
    g_autoptr(GError) err = NULL;

    if (key) {
        g_hash_table_insert(o, (char *)key, (char *)value);
    }
    co.options = o;
    co.backing_file = backing;
    co.backing_format = backing ? "qcow2" : NULL;
    if (!qimg_image_create(path, &co, &err)) {
        fail_msg("create %s: %s", path, err->message);
    }
}

static QimgImage *open_image(const char *path, bool ro, bool force_share, GError **err)
{
    QimgOpenOptions o = {.struct_size = sizeof(QimgOpenOptions),
                         .read_only = ro,
                         .force_share = force_share};
    return qimg_image_open(path, &o, err);
}

/* ---- the byte protocol (lock.c invariants 1-4) ---- */

static void test_bytes_and_conflicts(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
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
    blk_error_clear(); /* error.c invariant 2: the next failure is new */
    /* invariant 3: B took nothing, A still holds its bytes */
    assert_int_equal(sb.perm | sb.unshared, 0);
    assert_held(p, "100 101 203");

    /* a second open that wants to resize: A does not share it */
    assert_int_equal(blk_lock_apply(&sb, b, BLK_PERM_RESIZE, BLK_PERM_ALL, p), -EAGAIN);
    g_autofree char *want2 = g_strdup_printf(
        "Failed to get \"resize\" lock\nIs another process using the image [%s]?", p);
    assert_string_equal(blk_error_message(), want2);
    blk_error_clear(); /* error.c invariant 2: the next failure is new */

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
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
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
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
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
        blk_error_clear(); /* error.c invariant 2: the next failure is new */
        blk_lock_release(&sa, a);
        assert_int_equal(blk_lock_apply(&sa, a, 0, BLK_PERM_ALL & ~bit, p), 0);
        assert_int_equal(blk_lock_apply(&sb, b, bit, BLK_PERM_ALL, p), -EAGAIN);
        g_autofree char *w2 = g_strdup_printf("Failed to get \"%s\" lock", names[i]);
        assert_true(g_str_has_prefix(blk_error_message(), w2));
        blk_error_clear(); /* error.c invariant 2: the next failure is new */
        blk_lock_release(&sa, a);
    }
    close(a);
    close(b);
}

/* A byte someone holds a write lock on cannot be taken (invariant 4). */
static void test_byte_not_lockable(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
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
    blk_error_clear(); /* error.c invariant 2: the next failure is new */
    assert_int_equal(sa.perm, 0);
    close(w);
    assert_held(p, ""); /* byte 100 was given back */
    close(a);
}

/* ---- the permissions of each open (lock.c invariant 5) ---- */

static char *perm_bytes(BlkNodeRole role, BlkOpenOptions o)
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
        g_autofree char *b_ = perm_bytes((role), (BlkOpenOptions){__VA_ARGS__});         \
        assert_string_equal(b_, (want));                                                 \
    } while (0)

static void test_perm_table(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
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

/* ---- opens through the public API (block.h invariant 6) ---- */

typedef enum { M_RO, M_RW, M_RO_U } Mode;

static QimgImage *open_mode(const char *p, Mode m, GError **err)
{
    return open_image(p, m != M_RW, m == M_RO_U, err);
}

/* Two opens of one image in every pairing of modes: QEMU's outcome. */
static void test_open_matrix(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
    static const char *const m_name[] = {"ro", "rw", "ro -U"};
    /* qcow2: a reader unshares write; a writer unshares write and resize */
    static const char *const qcow2_want[3][3] = {
        /* second:  ro          rw                ro -U */
        [M_RO] = {"", "\"write\"", ""},
        [M_RW] = {"shared \"write\"", "\"write\"", ""},
        [M_RO_U] = {"", "", ""},
    };
    static const char *const qcow2_bytes[3] = {"100 201 203", "100 101 103 201 203",
                                               "100"};
    static const char *const raw_bytes[3] = {"100", "100 101", "100"};
    g_autofree char *q = tu_fresh("matrix.qcow2");
    g_autofree char *r = tu_fresh("matrix.raw");

    create_image(q, "qcow2", NULL, NULL, NULL);
    create_image(r, "raw", NULL, NULL, NULL);
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            g_autoptr(GError) err = NULL;
            QimgImage *first = open_mode(q, (Mode)i, &err);
            assert_non_null(first);
            assert_held(q, qcow2_bytes[i]);
            QimgImage *second = open_mode(q, (Mode)j, &err);
            if (!*qcow2_want[i][j]) {
                if (!second) {
                    fail_msg("%s after %s: %s", m_name[j], m_name[i], err->message);
                }
                qimg_image_free(second);
            } else {
                if (second) {
                    fail_msg("%s after %s opened", m_name[j], m_name[i]);
                }
                g_autofree char *want = g_strdup_printf(
                    "Could not open '%s': Failed to get %s lock\nIs another process "
                    "using the image [%s]?",
                    q, qcow2_want[i][j], q);
                assert_string_equal(err->message, want);
                assert_int_equal(err->code, EAGAIN);
            }
            /* the failed open left the first one's bytes alone */
            assert_held(q, qcow2_bytes[i]);
            qimg_image_free(first);
            assert_held(q, ""); /* released at close */

            /* raw shares everything: any pair opens */
            QimgOpenOptions o = {.struct_size = sizeof(QimgOpenOptions),
                                 .format = "raw",
                                 .read_only = i != M_RW,
                                 .force_share = i == M_RO_U};
            first = qimg_image_open(r, &o, &err);
            assert_non_null(first);
            assert_held(r, raw_bytes[i]);
            o.read_only = j != M_RW;
            o.force_share = j == M_RO_U;
            second = qimg_image_open(r, &o, &err);
            assert_non_null(second);
            qimg_image_free(second);
            qimg_image_free(first);
            assert_held(r, "");
        }
    }
}

static void test_force_share_needs_read_only(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
    g_autofree char *q = tu_fresh("fs.qcow2");
    g_autoptr(GError) err = NULL;

    create_image(q, "qcow2", NULL, NULL, NULL);
    assert_null(open_image(q, false, true, &err));
    g_autofree char *want = g_strdup_printf(
        "Could not open '%s': force-share=on can only be used with read-only images", q);
    assert_string_equal(err->message, want);
    /* refused before any file is opened, as QEMU does */
    g_clear_error(&err);
    g_autofree char *none = tu_fresh("nosuch.qcow2");
    assert_null(open_image(none, false, true, &err));
    assert_true(strstr(err->message, "force-share=on") != NULL);
}

static void test_no_io_and_deny_write(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
    g_autofree char *q = tu_fresh("noio.qcow2");
    g_autofree char *r = tu_fresh("noio.raw");
    g_autoptr(GError) err = NULL;

    create_image(q, "qcow2", NULL, NULL, NULL);
    create_image(r, "raw", NULL, NULL, NULL);
    /* qemu-img info: metadata only */
    QimgOpenOptions o = {
        .struct_size = sizeof(QimgOpenOptions), .read_only = true, .no_io = true};
    QimgImage *img = qimg_image_open(q, &o, &err);
    assert_non_null(img);
    assert_held(q, "201 203");
    qimg_image_free(img);
    o.force_share = true;
    img = qimg_image_open(q, &o, &err);
    assert_non_null(img);
    assert_held(q, "");
    qimg_image_free(img);
    o = (QimgOpenOptions){.struct_size = sizeof(QimgOpenOptions),
                          .format = "raw",
                          .read_only = true,
                          .no_io = true};
    img = qimg_image_open(r, &o, &err);
    assert_non_null(img);
    assert_held(r, "");
    qimg_image_free(img);
    /* qemu-img convert's source: nobody may write it meanwhile */
    o = (QimgOpenOptions){.struct_size = sizeof(QimgOpenOptions),
                          .format = "raw",
                          .read_only = true,
                          .deny_write = true};
    img = qimg_image_open(r, &o, &err);
    assert_non_null(img);
    assert_held(r, "100 201 203");
    assert_null(open_image(r, false, false, &err));
    assert_int_equal(err->code, EAGAIN);
    qimg_image_free(img);
}

static void test_backing_and_data_file(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
    g_autofree char *base = tu_fresh("base.qcow2");
    g_autofree char *top = tu_fresh("top.qcow2");
    g_autofree char *dimg = tu_fresh("dfile.qcow2");
    g_autofree char *data = tu_fresh("dfile.data");
    g_autoptr(GError) err = NULL;

    create_image(base, "qcow2", NULL, NULL, NULL);
    create_image(top, "qcow2", NULL, NULL, base);
    create_image(dimg, "qcow2", "data_file", data, NULL);

    /* the backing file is read-only and locked as such, force_share reaches it */
    QimgImage *img = open_image(top, false, false, &err);
    assert_non_null(img);
    assert_held(top, "100 101 103 201 203");
    assert_held(base, "100 201 203");
    qimg_image_free(img);
    img = open_image(top, true, true, &err);
    assert_non_null(img);
    assert_held(base, "100");
    qimg_image_free(img);
    assert_held(base, "");

    /* a writer of the backing file stops the overlay, with QEMU's message */
    QimgImage *w = open_image(base, false, false, &err);
    assert_non_null(w);
    assert_null(open_image(top, true, false, &err));
    g_autofree char *want =
        g_strdup_printf("Could not open '%s': Could not open backing file: Failed to get "
                        "shared \"write\" "
                        "lock\nIs another process using the image [%s]?",
                        top, base);
    assert_string_equal(err->message, want);
    g_clear_error(&err);
    img = open_image(top, true, true, &err); /* -U works */
    assert_non_null(img);
    qimg_image_free(img);
    qimg_image_free(w);

    /* the data file */
    img = open_image(dimg, false, false, &err);
    assert_non_null(img);
    assert_held(dimg, "100 101 103 201 203");
    assert_held(data, "100 101 103 203");
    qimg_image_free(img);
    img = open_image(dimg, true, false, &err);
    assert_non_null(img);
    assert_held(data, "100 203");
    qimg_image_free(img);
    assert_held(data, "");

    /* someone who does not share writes to the data file stops a writer */
    int fd = open_fd(data);
    BlkLockState st = {0};
    assert_int_equal(blk_lock_apply(&st, fd, BLK_PERM_CONSISTENT_READ,
                                    BLK_PERM_ALL & ~BLK_PERM_WRITE, data),
                     0);
    assert_null(open_image(dimg, false, false, &err));
    g_autofree char *want2 = g_strdup_printf(
        "Could not open '%s': Failed to get \"write\" lock\nIs another process using the "
        "image [%s]?",
        dimg, data);
    assert_string_equal(err->message, want2);
    assert_held(dimg, ""); /* the image file's locks were given back */
    g_clear_error(&err);
    img = open_image(dimg, true, false, &err); /* readers are fine */
    assert_non_null(img);
    qimg_image_free(img);
    close(fd);
}

static off_t file_size(const char *p)
{
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    return st.st_size;
}

/* qemu-img create refuses an image in use and leaves it alone. */
static void test_create_over_image_in_use(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
    g_autofree char *q = tu_fresh("busy.qcow2");
    g_autoptr(GError) err = NULL;

    create_image(q, "qcow2", NULL, NULL, NULL);
    QimgImage *img = open_image(q, false, false, &err);
    assert_non_null(img);
    off_t size = file_size(q);
    for (int f = 0; f < 2; f++) {
        QimgCreateOptions co = {.struct_size = sizeof(QimgCreateOptions),
                                .format = f ? "raw" : "qcow2",
                                .size = 2 * MiB,
                                .size_set = true};
        assert_false(qimg_image_create(q, &co, &err));
        g_autofree char *want = g_strdup_printf(
            "Failed to get \"write\" lock\nIs another process using the image [%s]?", q);
        assert_string_equal(err->message, want);
        g_clear_error(&err);
        assert_int_equal(file_size(q), size);
    }
    assert_held(q, "100 101 103 201 203");
    char buf[4];
    assert_true(qimg_image_pread(img, 0, buf, sizeof(buf), &err));
    qimg_image_free(img);
    /* the creation holds its own locks only while it runs */
    QimgCreateOptions co = {.struct_size = sizeof(QimgCreateOptions),
                            .format = "raw",
                            .size = MiB,
                            .size_set = true};
    assert_true(qimg_image_create(q, &co, &err));
    assert_held(q, "");
}

/* A raw image takes the resize permission when it is resized (qemu-io). */
static void test_truncate_takes_resize(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
    g_autofree char *r = tu_fresh("grow.raw");
    g_autoptr(GError) err = NULL;
    QimgOpenOptions o = {.struct_size = sizeof(QimgOpenOptions), .format = "raw"};

    create_image(r, "raw", NULL, NULL, NULL);
    QimgImage *img = qimg_image_open(r, &o, &err);
    assert_non_null(img);
    assert_held(r, "100 101");
    assert_true(qimg_image_truncate(img, 2 * MiB, false, QIMG_PREALLOC_OFF, &err));
    assert_held(r, "100 101 103");
    qimg_image_free(img);

    /* someone who does not share resize: the open works, the resize does not */
    int fd = open_fd(r);
    BlkLockState st = {0};
    assert_int_equal(blk_lock_apply(&st, fd, 0, BLK_PERM_ALL & ~BLK_PERM_RESIZE, r), 0);
    img = qimg_image_open(r, &o, &err);
    assert_non_null(img);
    assert_false(qimg_image_truncate(img, 3 * MiB, false, QIMG_PREALLOC_OFF, &err));
    assert_true(g_str_has_prefix(err->message, "Failed to get \"resize\" lock\n"));
    assert_int_equal(file_size(r), 2 * MiB);
    g_clear_error(&err);
    qimg_image_free(img);
    /* opened to be resized, it is refused at once */
    o.resize = true;
    assert_null(qimg_image_open(r, &o, &err));
    assert_int_equal(err->code, EAGAIN);
    close(fd);
}

/* Reading a snapshot's VM state opens a second node on the file: it must
 * not stand in the way of the handle that is already open read-write. */
static void test_vmstate_view_of_open_image(void **state)
{
    blk_error_clear(); /* no message of an earlier test (error.c invariant 2) */
    g_autofree char *q = tu_fresh("vm.qcow2");
    g_autoptr(GError) err = NULL;
    char buf[4096], out[4096];

    create_image(q, "qcow2", NULL, NULL, NULL);
    QimgImage *img = open_image(q, false, false, &err);
    assert_non_null(img);
    memset(buf, 0x3c, sizeof(buf));
    QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams), .name = "s1"};
    QimgVmstateSave *s = qimg_vmstate_save_begin(img, &p, &err);
    assert_non_null(s);
    assert_true(qimg_vmstate_save_append(s, buf, sizeof(buf), &err));
    g_autofree char *id = qimg_vmstate_save_commit(s, &err);
    assert_non_null(id);
    QimgVmstateLoad *l = qimg_vmstate_load_begin(img, "s1", false, &err);
    if (!l) {
        fail_msg("load: %s", err->message);
    }
    assert_int_equal(qimg_vmstate_load_read(l, out, sizeof(out), &err), sizeof(out));
    assert_memory_equal(buf, out, sizeof(out));
    qimg_vmstate_load_end(l);
    assert_held(q, "100 101 103 201 203");
    qimg_image_free(img);
    assert_held(q, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_and_conflicts),
        cmocka_unit_test(test_upgrade_keeps_state_on_failure),
        cmocka_unit_test(test_each_permission_named),
        cmocka_unit_test(test_byte_not_lockable),
        cmocka_unit_test(test_perm_table),
        cmocka_unit_test(test_open_matrix),
        cmocka_unit_test(test_force_share_needs_read_only),
        cmocka_unit_test(test_no_io_and_deny_write),
        cmocka_unit_test(test_backing_and_data_file),
        cmocka_unit_test(test_create_over_image_in_use),
        cmocka_unit_test(test_truncate_takes_resize),
        cmocka_unit_test(test_vmstate_view_of_open_image),
    };
    return tu_run_group_tests("lock", tests);
}
