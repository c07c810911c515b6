/*
 * tests/test-file-fixture.c: the file driver tests' scratch folders and
 * helpers (test-file-fixture.h).
 */
#include "test-file-fixture.h"

char *tmpdir;               /* page-cache tests */
char *direct_dir;           /* a folder where O_DIRECT works, or NULL */
static bool direct_dir_own; /* direct_dir was created by us (not tmpdir) */

/* ---- helpers ---- */

char *tpath(const char *dir, const char *name)
{
    return g_build_filename(dir, name, NULL);
}

static void rm_tree(const char *dir)
{
    GDir *d = g_dir_open(dir, 0, NULL);
    const char *n;

    if (!d) {
        return;
    }
    while ((n = g_dir_read_name(d))) {
        g_autofree char *p = tpath(dir, n);
        unlink(p);
    }
    g_dir_close(d);
    rmdir(dir);
}

static bool odirect_works(const char *dir)
{
    g_autofree char *p = tpath(dir, "odirect-probe");
    int fd = open(p, O_RDWR | O_CREAT | O_DIRECT, 0600);

    if (fd < 0) {
        return false;
    }
    close(fd);
    unlink(p);
    return true;
}

BlkNode *open_img_err(const char *path, bool ro, BlkCacheMode cache)
{
    BlkNode *img = g_new0(BlkNode, 1);
    BlkOpenOptions o = {0};

    o.read_only = ro;
    o.cache = cache;
    img->drv = &blk_file_driver;
    img->filename = g_strdup(path);
    img->read_only = ro;
    img->cache = cache;
    if (img->drv->open(img, path, &o) < 0) {
        g_free(img->filename);
        g_free(img);
        return NULL;
    }
    return img;
}

BlkNode *open_img(const char *path, bool ro, BlkCacheMode cache)
{
    blk_error_clear();
    BlkNode *img = open_img_err(path, ro, cache);

    if (!img) {
        fail_msg("open %s: %s", path, blk_error_message());
    }
    return img;
}

void close_img(BlkNode *img)
{
    img->drv->close(img);
    g_free(img->filename);
    g_free(img);
}

int rd(BlkNode *img, uint64_t off, void *buf, size_t len)
{
    BlkIOV q;
    int r;

    iov_init_buf(&q, buf, len);
    r = img->drv->preadv(img, off, &q, 0);
    iov_destroy(&q);
    return r;
}

int wr(BlkNode *img, uint64_t off, const void *buf, size_t len, unsigned flags)
{
    BlkIOV q;
    int r;

    iov_init_buf(&q, (void *)buf, len);
    r = img->drv->pwritev(img, off, &q, flags);
    iov_destroy(&q);
    return r;
}

void fill_pattern(uint8_t *buf, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++) {
        buf[i] = (uint8_t)((i * 131 + seed * 7 + (i >> 9)) % 251 + 1); /* never 0 */
    }
}

bool all_bytes(const uint8_t *buf, size_t len, uint8_t v)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != v) {
            return false;
        }
    }
    return true;
}

void write_file(const char *path, const void *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, buf, len, 0), (ssize_t)len);
    assert_int_equal(fsync(fd), 0);
    close(fd);
}

uint64_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

uint8_t *read_all(const char *path, size_t *len)
{
    gchar *c = NULL;
    gsize n = 0;
    assert_true(g_file_get_contents(path, &c, &n, NULL));
    *len = n;
    return (uint8_t *)c;
}

/* ---- block devices (loop device; needs root, else skipped) ---- */

int loop_attach(const char *backing, char **devpath)
{
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    int bfd = open(backing, O_RDWR | O_CLOEXEC);
    int lfd = -1;

    for (int tries = 0; ctl >= 0 && bfd >= 0 && tries < 10 && lfd < 0; tries++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0) {
            break;
        }
        g_autofree char *dp = g_strdup_printf("/dev/loop%d", n);
        int fd = open(dp, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            break;
        }
        struct loop_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.fd = (uint32_t)bfd;
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR; /* detached at our last close */
        if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
            lfd = fd;
            *devpath = g_steal_pointer(&dp);
        } else {
            close(fd);
            if (errno != EBUSY) {
                break;
            }
        }
    }
    if (ctl >= 0) {
        close(ctl);
    }
    if (bfd >= 0) {
        close(bfd);
    }
    return lfd;
}

/* ---- setup ---- */

int group_setup(void **state)
{
    const char *base = getenv("QIMG_TEST_TMPDIR");

    (void)state;
    if (base && *base) {
        g_autofree char *tmpl = g_build_filename(base, "test-file-XXXXXX", NULL);
        tmpdir = g_mkdtemp(tmpl) ? g_strdup(tmpl) : NULL;
    } else {
        tmpdir = g_dir_make_tmp("qimg-test-file-XXXXXX", NULL);
    }
    if (!tmpdir) {
        return -1;
    }
    if (odirect_works(tmpdir)) {
        direct_dir = g_strdup(tmpdir);
    } else {
        g_autofree char *tmpl = g_strdup("/var/tmp/qimg-test-file-XXXXXX");
        if (g_mkdtemp(tmpl)) {
            if (odirect_works(tmpl)) {
                direct_dir = g_strdup(tmpl);
                direct_dir_own = true;
            } else {
                rmdir(tmpl);
            }
        }
    }
    return 0;
}

int group_teardown(void **state)
{
    (void)state;
    if (direct_dir_own) {
        rm_tree(direct_dir);
    }
    rm_tree(tmpdir);
    g_free(direct_dir);
    g_free(tmpdir);
    return 0;
}
