/*
 * tests/test-qcow2-snapshot-fixture.h: what the qcow2 snapshot tests
 * (test-qcow2-snapshot-ops.c, test-qcow2-snapshot-fault.c) share: opening
 * an image through the API, a byte model of the active disk and of every
 * snapshot kept in step with create / apply / delete / resize, the
 * qemu-img oracle (info, snapshot list, convert [-l ID]) and verify(),
 * which checks an image against the model (test-qcow2-snapshot-fixture.c).
 */
#ifndef TEST_QCOW2_SNAPSHOT_FIXTURE_H
#define TEST_QCOW2_SNAPSHOT_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qimg/qimg.h"
#include "test-api.h"
#include "qcow2/qcow2.h"
#include "qimg/snapshot.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB_(x) ((uint64_t)(x) << 10)
#define MiB_(x) ((uint64_t)(x) << 20)

typedef struct Snap {
    char *id, *name;
    uint64_t vm_size;
    uint8_t *data;
    uint64_t size;
} Snap;

typedef struct Model {
    uint8_t *data;
    uint64_t size;
    GPtrArray *snaps; /* Snap *, in table order */
} Model;

QimgImage *open_img(const char *name, bool read_only, const char *snapshot);
void close_img(QimgImage *img);
uint8_t *read_file(const char *path, uint64_t *size);
void fill(uint8_t *buf, uint64_t len, uint8_t seed);
void model_init_from(Model *m, const char *path);
void model_clear(Model *m);
void m_write(Model *m, QimgImage *img, uint64_t off, uint64_t len, uint8_t seed);
char *m_create(Model *m, QimgImage *img, const char *name, uint64_t vm_size);
void m_apply(Model *m, QimgImage *img, const char *id_or_name);
void m_delete(Model *m, QimgImage *img, const char *id_or_name);
void m_resize(Model *m, QimgImage *img, uint64_t size);
char *qemu_snapshot_list(const char *path);
void verify_check(const char *path, const char *step);
void verify(const char *path, Model *m, const char *step);
void load_vm_n_equal(QimgImage *img, const uint8_t *want, uint64_t n);

#endif
