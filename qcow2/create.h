/*
 * qcow2/create.h: shared by the files that create qcow2 images (create.c,
 * create-params.c) and nothing else.  See create.c for how a fresh image is
 * made and the invariants, which create-params.c cites as "create.c
 * invariant N".
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
    /* encrypt.format=luks or aes (crypt.c): the secret's id and the LUKS
     * options */
    bool encrypt;
    bool encrypt_aes; /* the old AES-CBC method (crypt_method 1) */
    const char *key_secret;
    CryptoLuksParams luks;
    uint64_t luks_area; /* measure: the LUKS header area\'s bytes, or 0 */
} CreateParams;

/* create-params.c */
/* Fill *p from opts, checked in qemu-img's order (create.c invariant 1). */
int create_parse_params(const BlkCreateOptions *opts, CreateParams *p);
/* compat: 2 or 3 (3 when not given), 0 for a value qemu-img refuses (also
 * amend.c's reading). */
int create_parse_compat(const char *v);
/* Every key of options is one of known_names[0..n) (the first unknown one,
 * by name, is the error: "Invalid parameter 'k'"). */
int create_check_known(GHashTable *options, const char *const *known_names, size_t n);
/* A refcount width qemu-img takes: a power of two, 1..64 bits. */
bool create_refcount_bits_valid(uint64_t n);
/* The options qemu-img measure reads (measure.c), with its checks. */
int create_parse_measure_params(const BlkCreateOptions *opts, CreateParams *p);

#endif
