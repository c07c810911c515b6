/*
 * qcow2/create.h: shared by the files that create qcow2 images (create.c,
 * create-params.c, create-layout.c, create-prealloc.c) and nothing else.
 * See create.c for how a fresh image is made and the invariants, which the
 * other files cite as "create.c invariant N".
 */
#ifndef QIMG_QCOW2_CREATE_H
#define QIMG_QCOW2_CREATE_H

#include "qcow2/qcow2.h"

typedef struct CreateParams {
    int version;
    uint64_t cluster_size;
    uint32_t cluster_bits;
    uint32_t refcount_order;
    bool lazy_refcounts;
    bool extended_l2;
    uint8_t compression_type;
    BlkPrealloc prealloc;
    const char *data_file;
    bool data_file_raw;
    const char *backing_file;
    const char *backing_format;
    uint64_t size;
} CreateParams;

typedef struct Table {
    uint64_t offset; /* hash key */
    uint8_t *data;   /* one cluster, on-disk (big-endian) format */
    bool dirty;
} Table;

typedef struct Layout {
    const CreateParams *p;
    BlkNode *file;
    BlkNode *data; /* external data file node, or NULL */

    uint32_t cluster_bits;
    uint64_t cluster_size;
    uint32_t refcount_order;
    uint32_t rb_bits;    /* log2(refcounts per refcount block) */
    uint64_t rb_entries; /* refcounts per refcount block */
    uint64_t refcount_max;
    uint32_t l2_bits; /* log2(entries per L2 table) */
    uint64_t l2_entries;
    uint32_t l2_entry_size;
    uint64_t subcluster_size;

    uint64_t *reftable; /* host order */
    uint64_t reftable_size;
    uint64_t reftable_offset;
    GHashTable *refblocks; /* &offset -> Table */
    uint64_t free_index;   /* first cluster the allocator looks at */

    uint64_t *l1; /* host order */
    uint64_t l1_size;
    uint64_t l1_offset;
    GHashTable *l2s; /* &offset -> Table */

    uint64_t eof;      /* where qemu-img's image file would end (create.c invariant 3) */
    uint64_t data_eof; /* the same for the data file */
} Layout;

/* create-params.c */
/* Fill *p from opts, checked in qemu-img's order (create.c invariant 1). */
int create_parse_params(const BlkCreateOptions *opts, CreateParams *p);

/* create-layout.c */
void create_layout_init(Layout *L, const CreateParams *p, BlkNode *file, BlkNode *data);
void create_layout_free(Layout *L);
void create_note_extent(Layout *L, uint64_t offset, uint64_t len);
int create_file_write(Layout *L, BlkNode *node, uint64_t offset, const void *buf,
                      uint64_t len);
int create_get_refcount(Layout *L, uint64_t cluster, uint64_t *rc);
int64_t create_alloc_clusters(Layout *L, uint64_t bytes);
int64_t create_alloc_clusters_at(Layout *L, uint64_t offset, uint64_t nb);
int64_t create_refcount_area(Layout *L, uint64_t start, uint64_t additional, bool exact,
                             uint64_t new_index, uint64_t new_block);
int create_grow_l1(Layout *L, uint64_t entries);
int create_l2_for(Layout *L, uint64_t guest, Table **out);
int create_link_l2(Layout *L, uint64_t guest, uint64_t host, uint64_t nb);
int create_checkpoint(Layout *L);
int create_write_l1_and_reftable(Layout *L);

/* create-prealloc.c */
int create_grow_data_node(Layout *L, uint64_t size, BlkPrealloc mode);
int create_prealloc_metadata(Layout *L, uint64_t size);
int create_prealloc_file(Layout *L, uint64_t size);

#endif
