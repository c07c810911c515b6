/*
 * tests/test-qcow2-snapshot-codec.c: the snapshot table codec
 * (qcow2/snapshot-codec.c) on tables in memory:
 *
 *  - encode -> decode -> equal (and the same bytes again) for entries with
 *    known and unknown extra data (up to the 1 KiB limit, odd sizes), IDs
 *    and names of odd lengths (empty, 255 bytes), a VM state past 4 GiB,
 *    under each of the three policies;
 *  - hand-built entries with 0, 8, 16 and 24 bytes of extra data: the
 *    defaults, and what a rewrite makes of them (24 bytes, defaults filled);
 *  - an entry with more than 1 KiB of extra data, a table past 64 MiB and
 *    past INT_MAX bytes, and a truncated table: the exact messages of the
 *    open and of qemu-img check, and what check -r all keeps and notes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block/block.h"
#include "qcow2/qcow2.h"
#include "test-util.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define DISK_SIZE (UINT64_C(64) << 20) /* the caller's default disk size */
#define BASE UINT64_C(0x30000)         /* where the tables live in the "file" */

static const Qcow2SnapshotPolicy policies[] = {QCOW2_SNAPSHOT_OPEN, QCOW2_SNAPSHOT_CHECK,
                                               QCOW2_SNAPSHOT_REPAIR};

/* ---- a table in memory at BASE ---- */

typedef struct MemFile {
    const uint8_t *buf;
    uint64_t len;
    bool fail_past_end; /* a short file that fails (else zeros, as a file reads) */
    GPtrArray *notes;
} MemFile;

static int mem_read(void *opaque, uint64_t offset, void *buf, uint64_t len)
{
    MemFile *f = opaque;
    uint64_t n = 0;

    assert_true(offset >= BASE);
    offset -= BASE;
    if (offset < f->len) {
        n = MIN(len, f->len - offset);
    }
    if (n < len && f->fail_past_end) {
        return -EIO; /* no message: the codec words it (or not) */
    }
    memcpy(buf, f->buf + offset, n);
    memset((uint8_t *)buf + n, 0, len - n);
    return 0;
}

static void mem_note(void *opaque, const char *line)
{
    MemFile *f = opaque;
    g_ptr_array_add(f->notes, g_strdup(line));
}

static int decode(MemFile *f, Qcow2SnapshotPolicy policy, uint32_t nb,
                  Qcow2SnapshotTable *t)
{
    const Qcow2SnapshotSource src = {.read = mem_read, .note = mem_note, .opaque = f};

    if (f->notes) {
        g_ptr_array_set_size(f->notes, 0);
    } else {
        f->notes = g_ptr_array_new_with_free_func(g_free);
    }
    blk_error_clear();
    return qcow2_snapshot_table_decode(&src, policy, BASE, nb, DISK_SIZE, t);
}

static void table_free(Qcow2SnapshotTable *t)
{
    qcow2_snapshots_free(t->sns, t->nb);
    memset(t, 0, sizeof(*t));
}

static void expect_error(int ret, int errnum, const char *want)
{
    const char *msg = blk_error_message();

    assert_int_equal(ret, -errnum);
    if (!want) {
        assert_null(msg);
        return;
    }
    if (!msg || strcmp(msg, want) != 0) {
        fail_msg("message '%s', want '%s'", msg ? msg : "(none)", want);
    }
    blk_error_clear();
}

static void expect_notes(const MemFile *f, const char *const *want, guint n)
{
    assert_int_equal(f->notes->len, n);
    for (guint i = 0; i < n; i++) {
        assert_string_equal(g_ptr_array_index(f->notes, i), want[i]);
    }
}

/* ---- entries ---- */

static Qcow2Snapshot make_sn(const char *id, const char *name, uint32_t unknown,
                             uint64_t vm_state_size, int64_t icount)
{
    Qcow2Snapshot sn = {
        .l1_table_offset = UINT64_C(0x50000) + strlen(id) * 0x10000,
        .l1_size = 3 + unknown,
        .id_str = g_strdup(id),
        .name = g_strdup(name),
        .date_sec = 1700000000u + unknown,
        .date_nsec = 999999999u,
        .vm_clock_nsec = UINT64_C(0x123456789abcdef0),
        .vm_state_size = vm_state_size,
        .extra_data_size = QCOW2_SNAPSHOT_EXTRA_KNOWN + unknown,
        .disk_size = (UINT64_C(1) << 40) + unknown,
        .icount = icount,
        .unknown_extra_size = unknown,
    };
    if (unknown) {
        sn.unknown_extra = g_malloc(unknown);
        for (uint32_t i = 0; i < unknown; i++) {
            sn.unknown_extra[i] = (uint8_t)(i * 7 + 1);
        }
    }
    return sn;
}

static void assert_sn_equal(const Qcow2Snapshot *a, const Qcow2Snapshot *b)
{
    assert_int_equal(a->l1_table_offset, b->l1_table_offset);
    assert_int_equal(a->l1_size, b->l1_size);
    assert_string_equal(a->id_str, b->id_str);
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->date_sec, b->date_sec);
    assert_int_equal(a->date_nsec, b->date_nsec);
    assert_int_equal(a->vm_clock_nsec, b->vm_clock_nsec);
    assert_int_equal(a->vm_state_size, b->vm_state_size);
    assert_int_equal(a->extra_data_size, b->extra_data_size);
    assert_int_equal(a->disk_size, b->disk_size);
    assert_int_equal(a->icount, b->icount);
    assert_int_equal(a->unknown_extra_size, b->unknown_extra_size);
    if (a->unknown_extra_size) {
        assert_memory_equal(a->unknown_extra, b->unknown_extra, a->unknown_extra_size);
    }
}

static GByteArray *encode(const Qcow2Snapshot *sns, uint32_t nb)
{
    GByteArray *a = g_byte_array_new();
    uint64_t size = 0;

    assert_true(qcow2_snapshot_table_size(sns, nb, &size));
    g_byte_array_set_size(a, (guint)size);
    memset(a->data, 0xa5, a->len); /* the encoder writes every byte */
    qcow2_snapshot_table_encode(sns, nb, a->data);
    return a;
}

/* A raw entry header (for entries the encoder would not write). */
static size_t put_raw(uint8_t *p, uint32_t extra_size, const char *id, const char *name)
{
    size_t id_len = strlen(id), name_len = strlen(name);

    memset(p, 0, QCOW2_SNE_EXTRA);
    store_be64(p + QCOW2_SNE_L1_TABLE_OFFSET, 0x70000);
    store_be32(p + QCOW2_SNE_L1_SIZE, 2);
    store_be16(p + QCOW2_SNE_ID_SIZE, (uint16_t)id_len);
    store_be16(p + QCOW2_SNE_NAME_SIZE, (uint16_t)name_len);
    store_be32(p + QCOW2_SNE_VM_STATE_SIZE, 0x1000);
    store_be32(p + QCOW2_SNE_EXTRA_DATA_SIZE, extra_size);
    for (uint32_t i = 0; i < extra_size; i++) {
        p[QCOW2_SNE_EXTRA + i] = (uint8_t)(0xc0 + i);
    }
    if (extra_size >= 8) {
        store_be64(p + QCOW2_SNE_VM_STATE_SIZE_LARGE, UINT64_C(0x200000000));
    }
    if (extra_size >= 16) {
        store_be64(p + QCOW2_SNE_DISK_SIZE, UINT64_C(1) << 30);
    }
    if (extra_size >= 24) {
        store_be64(p + QCOW2_SNE_ICOUNT, 4242);
    }
    p += QCOW2_SNE_EXTRA + extra_size;
    memcpy(p, id, id_len);
    memcpy(p + id_len, name, name_len);
    return QCOW2_SNE_EXTRA + extra_size + id_len + name_len;
}

/* ---- round trips ---- */

static void test_round_trip(void **state)
{
    g_autofree char *name255 = g_strnfill(255, 'x');
    Qcow2Snapshot sns[] = {
        make_sn("1", "", 0, 0, -1),                        /* empty name */
        make_sn("12", "abc", 8, UINT64_C(0x100000001), 0), /* state > 4 GiB */
        make_sn("123", name255, 1000, 0x12345, 12345),     /* 1 KiB extra */
        make_sn("1234567", "z", 3, UINT32_MAX, INT64_MAX), /* odd extra */
        make_sn("", "no id", 1, UINT64_MAX, INT64_MIN),    /* empty ID */
        make_sn("12345678901234567890123", "n", 0, 1, -1), /* odd lengths */
    };
    const uint32_t nb = G_N_ELEMENTS(sns);
    g_autoptr(GByteArray) a = encode(sns, nb);
    uint64_t off = 0;

    /* the layout: 8-byte aligned entries, zero padding, the last unpadded */
    for (uint32_t i = 0; i < nb; i++) {
        uint64_t start = ROUND_UP(off, 8), size = qcow2_snapshot_entry_size(&sns[i]);
        const uint8_t *p = a->data + start;

        for (uint64_t k = off; k < start; k++) {
            assert_int_equal(a->data[k], 0);
        }
        assert_int_equal(size, QCOW2_SNE_KNOWN_END + sns[i].unknown_extra_size +
                                   strlen(sns[i].id_str) + strlen(sns[i].name));
        assert_int_equal(load_be32(p + QCOW2_SNE_EXTRA_DATA_SIZE),
                         QCOW2_SNAPSHOT_EXTRA_KNOWN + sns[i].unknown_extra_size);
        assert_int_equal(load_be32(p + QCOW2_SNE_VM_STATE_SIZE),
                         sns[i].vm_state_size > UINT32_MAX ? 0 : sns[i].vm_state_size);
        assert_int_equal(load_be64(p + QCOW2_SNE_VM_STATE_SIZE_LARGE),
                         sns[i].vm_state_size);
        assert_memory_equal(p + QCOW2_SNE_KNOWN_END + sns[i].unknown_extra_size,
                            sns[i].id_str, strlen(sns[i].id_str));
        off = start + size;
    }
    assert_int_equal(off, a->len);

    for (size_t k = 0; k < G_N_ELEMENTS(policies); k++) {
        MemFile f = {.buf = a->data, .len = a->len, .fail_past_end = true};
        Qcow2SnapshotTable t;

        assert_int_equal(decode(&f, policies[k], nb, &t), 0);
        assert_int_equal(t.nb, nb);
        assert_int_equal(t.size, a->len);
        assert_int_equal(t.extra_cut, 0);
        assert_int_equal(t.dropped, 0);
        assert_int_equal(f.notes->len, 0);
        for (uint32_t i = 0; i < nb; i++) {
            assert_sn_equal(&t.sns[i], &sns[i]);
        }
        g_autoptr(GByteArray) b = encode(t.sns, t.nb);
        assert_int_equal(b->len, a->len);
        assert_memory_equal(b->data, a->data, a->len);
        table_free(&t);
        g_ptr_array_free(f.notes, TRUE);
    }

    /* no entries: nothing read, nothing written */
    {
        MemFile f = {.buf = NULL, .len = 0, .fail_past_end = true};
        Qcow2SnapshotTable t;
        uint64_t size = 1;

        assert_int_equal(decode(&f, QCOW2_SNAPSHOT_OPEN, 0, &t), 0);
        assert_int_equal(t.nb, 0);
        assert_int_equal(t.size, 0);
        assert_true(qcow2_snapshot_table_size(NULL, 0, &size));
        assert_int_equal(size, 0);
        g_ptr_array_free(f.notes, TRUE);
    }
    for (uint32_t i = 0; i < nb; i++) {
        qcow2_snapshot_clear(&sns[i]);
    }
}

/* Extra data of 0, 8, 16, 24 bytes: what is present is used, the rest
 * defaults; a rewrite writes all 24 bytes with the defaults. */
static void test_extra_sizes(void **state)
{
    static const uint32_t sizes[] = {0, 8, 16, 24};
    static const char *const names[] = {"a", "bc", "def", "ghij"};
    uint8_t buf[1024] = {0};
    size_t off = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
        off = ROUND_UP(off, 8);
        off += put_raw(buf + off, sizes[i], i % 2 ? "77" : "7", names[i]);
    }
    for (size_t k = 0; k < G_N_ELEMENTS(policies); k++) {
        MemFile f = {.buf = buf, .len = off, .fail_past_end = true};
        Qcow2SnapshotTable t, t2;

        assert_int_equal(decode(&f, policies[k], G_N_ELEMENTS(sizes), &t), 0);
        assert_int_equal(t.nb, G_N_ELEMENTS(sizes));
        assert_int_equal(t.size, off);
        for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
            const Qcow2Snapshot *sn = &t.sns[i];
            assert_int_equal(sn->extra_data_size, sizes[i]);
            assert_int_equal(sn->l1_table_offset, 0x70000);
            assert_int_equal(sn->l1_size, 2);
            assert_string_equal(sn->id_str, i % 2 ? "77" : "7");
            assert_string_equal(sn->name, names[i]);
            assert_int_equal(sn->vm_state_size,
                             sizes[i] >= 8 ? UINT64_C(0x200000000) : 0x1000);
            assert_int_equal(sn->disk_size,
                             sizes[i] >= 16 ? UINT64_C(1) << 30 : DISK_SIZE);
            assert_int_equal(sn->icount, sizes[i] >= 24 ? 4242 : -1);
            assert_int_equal(sn->unknown_extra_size, 0);
        }

        /* rewritten: 24 bytes each, the defaults spelled out */
        g_autoptr(GByteArray) a = encode(t.sns, t.nb);
        MemFile f2 = {.buf = a->data, .len = a->len, .fail_past_end = true};
        assert_int_equal(decode(&f2, policies[k], t.nb, &t2), 0);
        for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
            t.sns[i].extra_data_size = QCOW2_SNAPSHOT_EXTRA_KNOWN;
            assert_sn_equal(&t2.sns[i], &t.sns[i]);
        }
        table_free(&t);
        table_free(&t2);
        g_ptr_array_free(f.notes, TRUE);
        g_ptr_array_free(f2.notes, TRUE);
    }
}

/* ---- the limits ---- */

/* Entry 1 of 3 has 1025 bytes of extra data. */
static void test_extra_too_large(void **state)
{
    g_autofree uint8_t *buf = g_malloc0(8192);
    Qcow2SnapshotTable t;
    MemFile f = {.buf = buf, .fail_past_end = true};
    size_t off = 0, second;
    int ret;

    off = put_raw(buf, 24, "1", "first");
    off = ROUND_UP(off, 8);
    second = off;
    off += put_raw(buf + off, 1025, "2", "second");
    off = ROUND_UP(off, 8);
    off += put_raw(buf + off, 16, "3", "third");
    f.len = off;

    ret = decode(&f, QCOW2_SNAPSHOT_OPEN, 3, &t);
    expect_error(ret, EFBIG,
                 "Too much extra metadata in snapshot table entry 1 (1025 bytes, at "
                 "most 1024)");
    assert_int_equal(t.nb, 0);
    assert_null(t.sns);

    ret = decode(&f, QCOW2_SNAPSHOT_CHECK, 3, &t);
    expect_error(ret, EFBIG,
                 "Too much extra metadata in snapshot table entry 1\nYou can "
                 "force-remove this extra metadata with qimg check -r all");
    assert_int_equal(t.nb, 0);
    assert_int_equal(f.notes->len, 0);

    /* -r all: cut to 1024 bytes, the ID and name still found after 1025 */
    assert_int_equal(decode(&f, QCOW2_SNAPSHOT_REPAIR, 3, &t), 0);
    static const char *const note[] = {
        "Discarding too much extra metadata in snapshot table entry 1 (1025 > 1024)"};
    expect_notes(&f, note, 1);
    assert_int_equal(t.nb, 3);
    assert_int_equal(t.extra_cut, 1);
    assert_int_equal(t.dropped, 0);
    assert_int_equal(t.size, off);
    assert_int_equal(t.sns[1].extra_data_size, 1024);
    assert_int_equal(t.sns[1].unknown_extra_size, 1000);
    assert_memory_equal(t.sns[1].unknown_extra, buf + second + QCOW2_SNE_KNOWN_END, 1000);
    assert_string_equal(t.sns[1].name, "second");
    assert_string_equal(t.sns[2].id_str, "3");
    assert_string_equal(t.sns[2].name, "third");
    assert_int_equal(t.sns[2].disk_size, UINT64_C(1) << 30);

    /* rewritten with the 1000 bytes kept */
    g_autoptr(GByteArray) a = encode(t.sns, t.nb);
    assert_int_equal(load_be32(a->data + second + QCOW2_SNE_EXTRA_DATA_SIZE), 1024);
    table_free(&t);
    g_ptr_array_free(f.notes, TRUE);
}

/*
 * Entry 1 claims 4 GiB of extra data: check -r all cuts it and skips the
 * rest, which takes the entry's end INT_MAX bytes past the table's start,
 * so it overhangs and is dropped; the open and the check refuse it for its
 * extra data first.
 */
static void test_extra_past_int_max(void **state)
{
    uint8_t buf[4096] = {0};
    Qcow2SnapshotTable t;
    MemFile f = {.buf = buf, .fail_past_end = false};
    size_t off;

    off = ROUND_UP(put_raw(buf, 24, "1", "kept"), 8);
    put_raw(buf + off, 1000, "2", "huge");
    store_be32(buf + off + QCOW2_SNE_EXTRA_DATA_SIZE, UINT32_MAX);
    f.len = sizeof(buf);

    expect_error(decode(&f, QCOW2_SNAPSHOT_OPEN, 2, &t), EFBIG,
                 "Too much extra metadata in snapshot table entry 1 (4294967295 bytes, "
                 "at most 1024)");
    expect_error(decode(&f, QCOW2_SNAPSHOT_CHECK, 2, &t), EFBIG,
                 "Too much extra metadata in snapshot table entry 1\nYou can "
                 "force-remove this extra metadata with qimg check -r all");

    assert_int_equal(decode(&f, QCOW2_SNAPSHOT_REPAIR, 2, &t), 0);
    static const char *const notes[] = {
        "Discarding too much extra metadata in snapshot table entry 1 (4294967295 > "
        "1024)",
        "Discarding 1 overhanging snapshots (snapshot table is too big)"};
    expect_notes(&f, notes, 2);
    assert_int_equal(t.nb, 1);
    assert_int_equal(t.extra_cut, 1);
    assert_int_equal(t.dropped, 1);
    assert_int_equal(t.size, QCOW2_SNE_EXTRA + 24 + 1 + 4);
    assert_string_equal(t.sns[0].name, "kept");
    table_free(&t);
    g_ptr_array_free(f.notes, TRUE);
}

/* A synthetic table of identical entries, each the largest the open
 * accepts (1024 bytes of extra data, 65535-byte ID and name). */
#define BIG_ENTRY (QCOW2_SNE_EXTRA + 1024 + 65535 + 65535)
#define BIG_STRIDE ROUND_UP(BIG_ENTRY, 8)

typedef struct BigFile {
    uint8_t entry[BIG_STRIDE];
    GPtrArray *notes;
} BigFile;

static int big_read(void *opaque, uint64_t offset, void *buf, uint64_t len)
{
    BigFile *f = opaque;
    uint8_t *p = buf;

    offset -= BASE;
    while (len) {
        uint64_t in = offset % BIG_STRIDE, n = MIN(len, BIG_STRIDE - in);
        memcpy(p, f->entry + in, n);
        p += n;
        offset += n;
        len -= n;
    }
    return 0;
}

static void big_note(void *opaque, const char *line)
{
    BigFile *f = opaque;
    g_ptr_array_add(f->notes, g_strdup(line));
}

static void test_table_too_big(void **state)
{
    g_autofree BigFile *f = g_new0(BigFile, 1);
    const Qcow2SnapshotSource src = {.read = big_read, .note = big_note, .opaque = f};
    const uint32_t nb = 600;
    /* entry i ends at i * stride + entry: the first one past 64 MiB */
    const uint32_t first_over =
        (uint32_t)((QCOW2_MAX_SNAPSHOTS_BYTES - BIG_ENTRY) / BIG_STRIDE + 1);
    Qcow2SnapshotTable t;
    g_autofree char *want = NULL;
    int ret;

    assert_int_equal(first_over, 507);
    store_be16(f->entry + QCOW2_SNE_ID_SIZE, 65535);
    store_be16(f->entry + QCOW2_SNE_NAME_SIZE, 65535);
    store_be32(f->entry + QCOW2_SNE_EXTRA_DATA_SIZE, 1024);
    memset(f->entry + QCOW2_SNE_EXTRA + 1024, 'i', 65535);
    memset(f->entry + QCOW2_SNE_EXTRA + 1024 + 65535, 'n', 65535);
    f->notes = g_ptr_array_new_with_free_func(g_free);

    blk_error_clear();
    ret = qcow2_snapshot_table_decode(&src, QCOW2_SNAPSHOT_OPEN, BASE, nb, DISK_SIZE, &t);
    want = g_strdup_printf("Snapshot table is too big (more than 64 MiB at entry %" PRIu32
                           " of %" PRIu32 ")",
                           first_over, nb);
    expect_error(ret, EFBIG, want);
    assert_int_equal(t.nb, 0);

    ret =
        qcow2_snapshot_table_decode(&src, QCOW2_SNAPSHOT_CHECK, BASE, nb, DISK_SIZE, &t);
    g_free(want);
    want = g_strdup_printf("Snapshot table is too big\nYou can force-remove all %" PRIu32
                           " overhanging snapshots with qimg check -r all",
                           nb - first_over);
    expect_error(ret, EFBIG, want);

    /* exactly at the limit: accepted */
    assert_int_equal(qcow2_snapshot_table_decode(&src, QCOW2_SNAPSHOT_OPEN, BASE,
                                                 first_over, DISK_SIZE, &t),
                     0);
    assert_int_equal(t.nb, first_over);
    assert_int_equal(t.size, (uint64_t)(first_over - 1) * BIG_STRIDE + BIG_ENTRY);
    assert_true(t.size <= QCOW2_MAX_SNAPSHOTS_BYTES);
    assert_int_equal(strlen(t.sns[first_over - 1].name), 65535);
    table_free(&t);

    ret =
        qcow2_snapshot_table_decode(&src, QCOW2_SNAPSHOT_REPAIR, BASE, nb, DISK_SIZE, &t);
    assert_int_equal(ret, 0);
    assert_int_equal(t.nb, first_over);
    assert_int_equal(t.dropped, nb - first_over);
    assert_int_equal(t.size, (uint64_t)(first_over - 1) * BIG_STRIDE + BIG_ENTRY);
    assert_int_equal(f->notes->len, 1);
    assert_string_equal(
        g_ptr_array_index(f->notes, 0),
        "Discarding 93 overhanging snapshots (snapshot table is too big)");
    /* what is kept is rewritten within the limit (24 bytes of known extra
     * data were there already) */
    uint64_t size;
    assert_true(qcow2_snapshot_table_size(t.sns, t.nb, &size));
    assert_int_equal(size, t.size);
    table_free(&t);
    g_ptr_array_free(f->notes, TRUE);
}

/* The table ends inside entry 1: a file that fails there, and one that
 * reads zeros there (as files read past their end). */
static void test_truncated(void **state)
{
    uint8_t buf[512] = {0};
    g_autofree char *eio =
        g_strdup_printf("Failed to read snapshot table: %s", g_strerror(EIO));
    size_t off, cut[3];

    off = ROUND_UP(put_raw(buf, 24, "1", "whole"), 8);
    put_raw(buf + off, 24, "2", "truncated");
    cut[0] = off + 10;                      /* in the header */
    cut[1] = off + QCOW2_SNE_EXTRA + 10;    /* in the extra data */
    cut[2] = off + QCOW2_SNE_KNOWN_END + 4; /* in the name */

    for (size_t c = 0; c < G_N_ELEMENTS(cut); c++) {
        MemFile f = {.buf = buf, .len = cut[c], .fail_past_end = true};
        Qcow2SnapshotTable t;

        /* the open passes the file's error (and message) on */
        expect_error(decode(&f, QCOW2_SNAPSHOT_OPEN, 2, &t), EIO, NULL);
        assert_int_equal(t.nb, 0);
        expect_error(decode(&f, QCOW2_SNAPSHOT_CHECK, 2, &t), EIO, eio);
        expect_error(decode(&f, QCOW2_SNAPSHOT_REPAIR, 2, &t), EIO, eio);
        assert_int_equal(t.nb, 0);
        assert_null(t.sns);

        /* zeros past the end: QEMU reads (and opens) such a table */
        f.fail_past_end = false;
        for (size_t k = 0; k < G_N_ELEMENTS(policies); k++) {
            assert_int_equal(decode(&f, policies[k], 2, &t), 0);
            assert_int_equal(t.nb, 2);
            assert_string_equal(t.sns[0].name, "whole");
            if (c == 0) {
                /* lengths and extra size read as 0 */
                assert_string_equal(t.sns[1].id_str, "");
                assert_string_equal(t.sns[1].name, "");
                assert_int_equal(t.sns[1].extra_data_size, 0);
                assert_int_equal(t.sns[1].disk_size, DISK_SIZE);
                assert_int_equal(t.size, off + QCOW2_SNE_EXTRA);
            } else {
                assert_int_equal(t.sns[1].extra_data_size, 24);
                assert_int_equal(t.sns[1].icount, c == 2 ? 4242 : 0);
                assert_string_equal(t.sns[1].id_str, c == 2 ? "2" : "");
                assert_string_equal(t.sns[1].name, c == 2 ? "tru" : "");
                assert_int_equal(t.size, off + QCOW2_SNE_KNOWN_END + 1 + 9);
            }
            table_free(&t);
        }
        g_ptr_array_free(f.notes, TRUE);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_extra_sizes),
        cmocka_unit_test(test_extra_too_large), cmocka_unit_test(test_extra_past_int_max),
        cmocka_unit_test(test_table_too_big),   cmocka_unit_test(test_truncated),
    };
    return tu_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
