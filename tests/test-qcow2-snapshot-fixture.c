/*
 * tests/test-qcow2-snapshot-fixture.c: the qcow2 snapshot tests' byte model
 * and qemu-img oracle (test-qcow2-snapshot-fixture.h).
 */
#include "test-qcow2-snapshot-fixture.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

QimgImage *open_img(const char *name, bool read_only, const char *snapshot)
{
    BlkOpenOptions o = {.format = "qcow2",
                        .read_only = read_only,
                        .snapshot = snapshot,
                        .cache = BLK_CACHE_UNSAFE};
    g_autoptr(GError) err = NULL;
    QimgImage *img = tu_open_handle(name, &o, &err);

    if (!img) {
        fail_msg("open %s: %s", name, err->message);
    }
    return img;
}

void close_img(QimgImage *img)
{
    g_autoptr(GError) err = NULL;
    if (!qimg_image_close(img, &err)) {
        fail_msg("close: %s", err->message);
    }
}

uint8_t *read_file(const char *path, uint64_t *size)
{
    gchar *data = NULL;
    gsize n = 0;
    if (!g_file_get_contents(path, &data, &n, NULL)) {
        fail_msg("cannot read %s", path);
    }
    *size = n;
    return (uint8_t *)data;
}

void fill(uint8_t *buf, uint64_t len, uint8_t seed)
{
    for (uint64_t i = 0; i < len; i++) {
        buf[i] = (uint8_t)(seed + i * 7 + (i >> 9));
    }
}

/* ---- the model's buffers ---- */

/* Disk-sized buffers given back by the model (an apply's old disk, a
 * deleted snapshot, a finished test's) and taken again by the next copy of
 * the same size: a fresh 8 MiB buffer per snapshot and apply (and its
 * release) was most of this program's own CPU under ASan, a page fault per
 * 4 KiB plus the allocator mapping, poisoning and unmapping it.  At most
 * SPARE_MAX are kept; the program ends with them reachable (no leak). */
#define SPARE_MAX 8
static struct {
    uint8_t *data;
    uint64_t size;
} spare[SPARE_MAX];
static unsigned nb_spare;

static uint8_t *buf_take(uint64_t size)
{
    for (unsigned i = nb_spare; i-- > 0;) {
        if (spare[i].size == size) {
            uint8_t *d = spare[i].data;
            spare[i] = spare[--nb_spare];
            return d;
        }
    }
    return g_malloc(size ? size : 1);
}

static void buf_give(uint8_t *data, uint64_t size)
{
    if (nb_spare == SPARE_MAX) { /* the oldest goes */
        g_free(spare[0].data);
        memmove(spare, spare + 1, sizeof(spare[0]) * (SPARE_MAX - 1));
        nb_spare--;
    }
    spare[nb_spare].data = data;
    spare[nb_spare++].size = size;
}

static uint8_t *buf_dup(const uint8_t *data, uint64_t size)
{
    uint8_t *d = buf_take(size);
    memcpy(d, data, size);
    return d;
}

/* ---- the model ---- */
static void snap_free(gpointer p)
{
    Snap *sn = p;
    g_free(sn->id);
    g_free(sn->name);
    buf_give(sn->data, sn->size);
    g_free(sn);
}

void model_init_from(Model *m, const char *path)
{
    g_autofree char *raw = g_strdup_printf("%s.init.raw", path);
    struct stat st;
    int fd;

    tu_run("qemu-img convert -O raw '%s' '%s'", path, raw);
    fd = open(raw, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        fail_msg("cannot read %s: %s", raw, g_strerror(errno));
    }
    m->size = (uint64_t)st.st_size;
    m->data = buf_take(m->size);
    for (uint64_t pos = 0; pos < m->size;) {
        ssize_t n = pread(fd, m->data + pos, m->size - pos, (off_t)pos);
        if (n <= 0) {
            fail_msg("cannot read %s: %s", raw, n < 0 ? g_strerror(errno) : "short");
        }
        pos += (uint64_t)n;
    }
    close(fd);
    unlink(raw);
    m->snaps = g_ptr_array_new_with_free_func(snap_free);
}

void model_clear(Model *m)
{
    buf_give(m->data, m->size);
    g_ptr_array_unref(m->snaps);
}

void m_write(Model *m, QimgImage *img, uint64_t off, uint64_t len, uint8_t seed)
{
    static uint8_t *buf; /* kept: see the model's buffers */
    static uint64_t buf_size;

    if (len > buf_size) {
        buf = g_realloc(buf, len);
        buf_size = len;
    }
    fill(buf, len, seed);
    assert_true(off + len <= m->size);
    memcpy(m->data + off, buf, len);
    assert_int_equal(blk_pwrite(img->node, off, buf, len, 0), 0);
}

static Snap *m_find(Model *m, const char *id_or_name)
{
    for (guint i = 0; i < m->snaps->len; i++) {
        Snap *sn = g_ptr_array_index(m->snaps, i);
        if (strcmp(sn->id, id_or_name) == 0) {
            return sn;
        }
    }
    for (guint i = 0; i < m->snaps->len; i++) {
        Snap *sn = g_ptr_array_index(m->snaps, i);
        if (strcmp(sn->name, id_or_name) == 0) {
            return sn;
        }
    }
    return NULL;
}

char *m_create(Model *m, QimgImage *img, const char *name, uint64_t vm_size)
{
    QimgSnapshotParams p = {.struct_size = sizeof(QimgSnapshotParams),
                            .name = name,
                            .vm_state_size = vm_size};
    g_autoptr(GError) err = NULL;
    char *id = qimg_snapshot_create(img, &p, &err);
    Snap *sn;

    if (!id) {
        fail_msg("create %s: %s", name, err->message);
    }
    sn = g_new0(Snap, 1);
    sn->id = g_strdup(id);
    sn->name = g_strdup(name);
    sn->vm_size = vm_size;
    sn->data = buf_dup(m->data, m->size);
    sn->size = m->size;
    g_ptr_array_add(m->snaps, sn);
    return id;
}

void m_apply(Model *m, QimgImage *img, const char *id_or_name)
{
    g_autoptr(GError) err = NULL;
    Snap *sn = m_find(m, id_or_name);

    assert_non_null(sn);
    if (!qimg_snapshot_apply(img, id_or_name, &err)) {
        fail_msg("apply %s: %s", id_or_name, err->message);
    }
    buf_give(m->data, m->size);
    m->data = buf_dup(sn->data, sn->size);
    m->size = sn->size;
    assert_int_equal(img->node->size, m->size);
}

void m_delete(Model *m, QimgImage *img, const char *id_or_name)
{
    g_autoptr(GError) err = NULL;
    Snap *sn = m_find(m, id_or_name);

    assert_non_null(sn);
    if (!qimg_snapshot_delete(img, id_or_name, &err)) {
        fail_msg("delete %s: %s", id_or_name, err->message);
    }
    g_ptr_array_remove(m->snaps, sn);
}

void m_resize(Model *m, QimgImage *img, uint64_t size)
{
    blk_error_clear();
    if (blk_truncate(img->node, size, true, BLK_PREALLOC_OFF, true) < 0) {
        fail_msg("resize: %s", blk_error_message());
    }
    uint8_t *d = buf_take(size);
    memcpy(d, m->data, MIN(size, m->size));
    buf_give(m->data, m->size);
    m->data = d;
    if (size > m->size) {
        memset(m->data + m->size, 0, size - m->size);
    }
    m->size = size;
}

/* "id:name:vm-state-size;" for each snapshot in qemu-img info's output. */
static char *snapshot_list_of(const char *info)
{
    g_autoptr(GRegex) re = NULL;
    g_autoptr(GMatchInfo) mi = NULL;
    GString *s = g_string_new("");

    re = g_regex_new("\"name\": \"([^\"]*)\",.*?\"id\": \"([^\"]*)\",\\s*"
                     "\"vm-state-size\": ([0-9]+)",
                     G_REGEX_DOTALL, 0, NULL);
    g_regex_match(re, info, 0, &mi);
    while (g_match_info_matches(mi)) {
        g_autofree char *name = g_match_info_fetch(mi, 1);
        g_autofree char *id = g_match_info_fetch(mi, 2);
        g_autofree char *vm = g_match_info_fetch(mi, 3);
        g_string_append_printf(s, "%s:%s:%s;", id, name, vm);
        g_match_info_next(mi, NULL);
    }
    return g_string_free(s, FALSE);
}

/* qemu-img info --output=json of path; the virtual size in *vsize (if not
 * NULL). */
static char *qemu_info(const char *path, uint64_t *vsize)
{
    static const char key[] = "\"virtual-size\": ";
    char *out = NULL;
    const char *at;

    if (tu_run_status(&out, "qemu-img info --output=json '%s'", path) != 0) {
        fail_msg("qemu-img info: %s", out);
    }
    if (vsize) {
        at = strstr(out, key);
        if (!at) {
            fail_msg("no virtual size in qemu-img info's output: %s", out);
        }
        *vsize = g_ascii_strtoull(at + strlen(key), NULL, 10);
    }
    return out;
}

/* "id:name:vm-state-size;" for each snapshot qemu-img lists. */
char *qemu_snapshot_list(const char *path)
{
    g_autofree char *out = qemu_info(path, NULL);
    return snapshot_list_of(out);
}

/* The file at path (qemu-img's raw output) is size bytes long and holds
 * want[0..want_size) then zeros: compared in chunks, without a buffer of
 * the disk's size (those page faults were most of this test's CPU time). */
static void expect_file(const char *what, const char *step, const uint8_t *want,
                        uint64_t want_size, const char *path, uint64_t size)
{
    uint64_t got_size;
    int64_t at = tu_file_cmp(path, want, want_size, &got_size);

    assert_int_equal(got_size, size);
    if (at >= 0) {
        g_autofree uint8_t *got = read_file(path, &got_size);
        uint8_t w = (uint64_t)at < want_size ? want[at] : 0;
        fail_msg("%s: %s differs at byte %" PRId64 " (0x%02x, want 0x%02x)", step, what,
                 at, got[at], w);
    }
}

/* qemu-img check finds the image (closed) clean: no corruption, no leak. */
void verify_check(const char *path, const char *step)
{
    g_autofree char *out = NULL;
    int rc = tu_run_status(&out, "qemu-img check '%s'", path);

    if (rc != 0) {
        fail_msg("%s: qemu-img check exit %d:\n%s", step, rc, out);
    }
}

/* The checks after every step (image closed). */
void verify(const char *path, Model *m, const char *step)
{
    g_autofree char *raw = g_strdup_printf("%s.raw", path);
    g_autofree char *list = NULL;
    g_autofree char *info = NULL;
    GString *want = g_string_new("");
    uint64_t size;

    verify_check(path, step);
    info = qemu_info(path, &size);
    assert_int_equal(size, m->size);
    tu_run("qemu-img convert -O raw '%s' '%s'", path, raw);
    expect_file("active disk", step, m->data, m->size, raw, m->size);
    for (guint i = 0; i < m->snaps->len; i++) {
        Snap *sn = g_ptr_array_index(m->snaps, i);
        tu_run("qemu-img convert -l '%s' -O raw '%s' '%s'", sn->id, path, raw);
        g_autofree char *what = g_strdup_printf("snapshot %s (%s)", sn->id, sn->name);
        /* convert -l keeps the current size (zeros past the snapshot's) */
        expect_file(what, step, sn->data, sn->size, raw, m->size);
        g_string_append_printf(want, "%s:%s:%" PRIu64 ";", sn->id, sn->name, sn->vm_size);
    }
    list = snapshot_list_of(info);
    if (strcmp(list, want->str) != 0) {
        fail_msg("%s: qemu-img lists '%s', want '%s'", step, list, want->str);
    }
    g_string_free(want, TRUE);
    unlink(raw);
}

void load_vm_n_equal(QimgImage *img, const uint8_t *want, uint64_t n)
{
    g_autofree uint8_t *got = g_malloc(n);
    BlkIOV q;
    iov_init_buf(&q, got, n);
    assert_int_equal(img->node->drv->load_vmstate(img->node, 0, &q), 0);
    assert_memory_equal(got, want, n);
}
