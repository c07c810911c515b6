/*
 * examples/embed.c: what an embedding hypervisor does with libqimg, built
 * only against the installed headers and library (pkg-config libqimg).
 *
 *   embed IMAGE   create a 64 MiB qcow2 IMAGE; 4 threads write MiB 0-3 of
 *                 it through one handle (every byte of MiB t is t + 1);
 *                 savevm: stream a VM state into snapshot "vm1"; the guest
 *                 zeroes MiB 0; loadvm: revert to "vm1" and read the state
 *                 back; check the state and the disk byte for byte.
 *
 * Exits 0 when everything read back as written, 1 with the error (or the
 * mismatch) otherwise, 2 on bad usage.  `make test` builds and runs it
 * (scripts/check-install.sh); qemu-img and qemu-io then check the image.
 */
#include <qimg/vmstate.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024 * 1024)
#define THREADS 4
#define STATE (3 * MiB + 123) /* VM state bytes */

static QimgImage *img;
static GError *error; /* why main's last call failed */
static uint8_t disk[THREADS][MiB], state[STATE], buf[4 * MiB];

static void check(bool ok) /* on failure: the message, exit 1 */
{
    if (!ok) {
        fprintf(stderr, "embed: %s\n", error ? error->message : "read back other bytes");
        exit(1);
    }
}

static gpointer writer(gpointer arg) /* thread t: MiB t; returns its GError */
{
    int t = GPOINTER_TO_INT(arg);
    GError *err = NULL;

    memset(disk[t], t + 1, MiB);
    qimg_image_pwrite(img, (uint64_t)t * MiB, disk[t], MiB, &err);
    return err;
}

int main(int argc, char **argv)
{
    QimgCreateOptions co = QIMG_CREATE_OPTIONS_INIT;
    QimgOpenOptions oo = QIMG_OPEN_OPTIONS_INIT;
    QimgSnapshotParams sp = QIMG_SNAPSHOT_PARAMS_INIT;
    GThread *th[THREADS];
    size_t got = 0;
    gssize n;

    if (argc != 2) {
        fprintf(stderr, "usage: embed IMAGE\n");
        return 2;
    }
    co.format = "qcow2";
    co.size = 64 * MiB;
    co.size_set = true;
    check(qimg_image_create(argv[1], &co, &error));
    check((img = qimg_image_open(argv[1], &oo, &error)) != NULL);
    for (int t = 0; t < THREADS; t++) {
        th[t] = g_thread_new("writer", writer, GINT_TO_POINTER(t));
    }
    for (int t = 0; t < THREADS; t++) {
        error = g_thread_join(th[t]);
        check(error == NULL);
    }

    /* savevm: the state goes in as many small appends, then the snapshot */
    for (size_t i = 0; i < STATE; i++) {
        state[i] = (uint8_t)(i * 7 + i / 4096);
    }
    sp.name = "vm1";
    QimgVmstateSave *save = qimg_vmstate_save_begin(img, &sp, &error);
    check(save != NULL);
    for (size_t i = 0; i < STATE; i += 4000) {
        check(qimg_vmstate_save_append(save, state + i, MIN(4000, STATE - i), &error));
    }
    g_autofree char *id = qimg_vmstate_save_commit(save, &error);
    check(id != NULL);

    /* the guest runs on and zeroes MiB 0; loadvm reverts the disk */
    check(qimg_image_pwrite_zeroes(img, 0, MiB, 0, &error));
    QimgVmstateLoad *load = qimg_vmstate_load_begin(img, id, true, &error);
    check(load != NULL);
    while ((n = qimg_vmstate_load_read(load, buf + got, sizeof(buf) - got, &error)) > 0) {
        got += (size_t)n;
    }
    qimg_vmstate_load_end(load);
    check(n == 0 && got == STATE && memcmp(buf, state, STATE) == 0);
    for (int t = 0; t < THREADS; t++) {
        check(qimg_image_pread(img, (uint64_t)t * MiB, buf, MiB, &error));
        check(memcmp(buf, disk[t], MiB) == 0);
    }
    check(qimg_image_close(img, &error));
    printf("embed: libqimg %s: ok\n", qimg_version());
    return 0;
}
