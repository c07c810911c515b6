/*
 * examples/embed.c: what an embedding hypervisor does with libqimg, built
 * only against the installed headers and library (pkg-config libqimg):
 *
 *   embed IMAGE   create a 64 MiB qcow2 IMAGE, write to it from 4 threads,
 *                 flush, savevm (a VM state stream and an internal snapshot),
 *                 write over the disk, loadvm (revert and read the state
 *                 back), verify every byte, close.
 *
 * Exits 0 when everything read back as written; prints the first mismatch
 * or error and exits 1 otherwise.  `make test` builds and runs it
 * (scripts/check-install.sh); qemu-img check and qemu-io verify the image.
 */
#include <qimg/qimg.h>
#include <qimg/snapshot.h>
#include <qimg/vmstate.h>

#include <stdio.h>
#include <string.h>

#define MiB (1024 * 1024)
#define THREADS 4
#define CHUNK (256 * 1024)
#define STATE_BYTES (3 * MiB + 123)

typedef struct Worker {
    QimgImage *img;
    int id;
    GError *err;
} Worker;

/* Byte i of thread t's region: something each offset can be checked by. */
static uint8_t pattern(int t, size_t i)
{
    return (uint8_t)(t * 37 + i / 512);
}

static gpointer write_region(gpointer opaque)
{
    Worker *w = opaque;
    g_autofree uint8_t *buf = g_malloc(CHUNK);

    for (size_t i = 0; i < CHUNK; i++) {
        buf[i] = pattern(w->id, i);
    }
    /* each thread its own 1 MiB-spaced chunks: concurrent I/O on one handle */
    for (int k = 0; k < 8 && !w->err; k++) {
        uint64_t off = ((uint64_t)k * THREADS + (uint64_t)w->id) * MiB;
        qimg_image_pwrite(w->img, off, buf, CHUNK, &w->err);
    }
    return NULL;
}

static int check_regions(QimgImage *img, GError **err)
{
    g_autofree uint8_t *buf = g_malloc(CHUNK);

    for (int t = 0; t < THREADS; t++) {
        for (int k = 0; k < 8; k++) {
            uint64_t off = ((uint64_t)k * THREADS + (uint64_t)t) * MiB;
            if (!qimg_image_pread(img, off, buf, CHUNK, err)) {
                return -1;
            }
            for (size_t i = 0; i < CHUNK; i++) {
                if (buf[i] != pattern(t, i)) {
                    fprintf(stderr, "embed: byte %llu is %u, expected %u\n",
                            (unsigned long long)(off + i), buf[i], pattern(t, i));
                    return -1;
                }
            }
        }
    }
    return 0;
}

static int run(const char *path, GError **err)
{
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    QimgSnapshotParams sp = QIMG_SNAPSHOT_PARAMS_INIT;
    Worker w[THREADS];
    GThread *th[THREADS];
    g_autofree uint8_t *state = g_malloc(STATE_BYTES);
    g_autofree uint8_t *back = g_malloc(STATE_BYTES);
    g_autofree char *id = NULL;

    co.format = "qcow2";
    co.size = 64 * MiB;
    co.size_set = true;
    if (!qimg_image_create(path, &co, err)) {
        return -1;
    }
    g_autoptr(QimgImage) img = qimg_image_open(path, &oo, err);
    if (!img) {
        return -1;
    }
    for (int t = 0; t < THREADS; t++) {
        w[t] = (Worker){.img = img, .id = t};
        th[t] = g_thread_new("writer", write_region, &w[t]);
    }
    for (int t = 0; t < THREADS; t++) {
        g_thread_join(th[t]);
    }
    for (int t = 0; t < THREADS; t++) {
        if (w[t].err) {
            g_propagate_error(err, w[t].err);
            return -1;
        }
    }
    if (!qimg_image_flush(img, err)) {
        return -1;
    }

    /* savevm: the VM state goes in as a stream, then the snapshot */
    for (size_t i = 0; i < STATE_BYTES; i++) {
        state[i] = (uint8_t)(i * 7 + i / 4096);
    }
    sp.name = "vm1";
    QimgVmstateSave *s = qimg_vmstate_save_begin(img, &sp, err);
    if (!s) {
        return -1;
    }
    for (size_t done = 0; done < STATE_BYTES; done += 65536) {
        size_t n = MIN((size_t)65536, STATE_BYTES - done);
        if (!qimg_vmstate_save_append(s, state + done, n, err)) {
            qimg_vmstate_save_abort(s);
            return -1;
        }
    }
    id = qimg_vmstate_save_commit(s, err);
    if (!id) {
        return -1;
    }

    /* the guest runs on and overwrites its disk ... */
    memset(back, 0xEE, CHUNK);
    if (!qimg_image_pwrite(img, 0, back, CHUNK, err)) {
        return -1;
    }
    /* ... loadvm: the disk goes back, the state is read back */
    QimgVmstateLoad *l = qimg_vmstate_load_begin(img, id, true, err);
    if (!l) {
        return -1;
    }
    size_t got = 0;
    gssize n;
    while ((n = qimg_vmstate_load_read(
                l, back + got, MIN((size_t)100000, STATE_BYTES - got), err)) > 0) {
        got += (size_t)n;
    }
    qimg_vmstate_load_end(l);
    if (n < 0) {
        return -1;
    }
    if (got != STATE_BYTES || memcmp(back, state, STATE_BYTES) != 0) {
        fprintf(stderr, "embed: VM state read back differs (%zu of %d bytes)\n", got,
                STATE_BYTES);
        return -1;
    }
    if (check_regions(img, err) < 0) {
        return -1;
    }
    GPtrArray *list = qimg_snapshot_list(img, err);
    if (!list) {
        return -1;
    }
    const QimgSnapshotInfo *sn = list->len == 1 ? g_ptr_array_index(list, 0) : NULL;
    int ok = sn && strcmp(sn->name, "vm1") == 0 && sn->vm_state_size == STATE_BYTES;
    qimg_snapshot_list_free(list);
    if (!ok) {
        fprintf(stderr, "embed: the snapshot list is not [vm1 with its state]\n");
        return -1;
    }
    QimgImage *done = g_steal_pointer(&img);
    if (!qimg_image_close(done, err)) {
        return -1;
    }
    printf("embed: libqimg %s: %d threads x 8 x %d KiB written and verified, "
           "savevm/loadvm of %d bytes (snapshot %s)\n",
           qimg_version(), THREADS, CHUNK / 1024, STATE_BYTES, id);
    return 0;
}

int main(int argc, char **argv)
{
    GError *err = NULL;

    if (argc != 2) {
        fprintf(stderr, "usage: embed IMAGE\n");
        return 2;
    }
    if (run(argv[1], &err) < 0) {
        fprintf(stderr, "embed: %s\n", err ? err->message : "verification failed");
        g_clear_error(&err);
        return 1;
    }
    return 0;
}
