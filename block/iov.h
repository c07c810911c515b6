/*
 * block/iov.h: scatter-gather request vectors.
 *
 * A BlkIOV is a list of struct iovec plus its total size.  Drivers take
 * sub-ranges with iov_slice() (no copy of the data) and move bytes in and
 * out with iov_to_buf()/iov_from_buf()/iov_memset().
 *
 * Invariants:
 *  1. size == sum of iov[i].iov_len.
 *  2. A BlkIOV never owns the data; it owns its iovec array only when
 *     'owned' is set (freed by iov_destroy()).
 */
#ifndef QIMG_IOV_H
#define QIMG_IOV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define IOV_INLINE 4

typedef struct BlkIOV {
    struct iovec *iov;
    int niov;
    size_t size;
    bool owned;
    struct iovec local[IOV_INLINE];
} BlkIOV;

/* One buffer. */
void iov_init_buf(BlkIOV *q, void *buf, size_t len);
/* Borrow an existing array (not copied). */
void iov_init_external(BlkIOV *q, struct iovec *iov, int niov);
/* dst = bytes [off, off+len) of src; dst must be destroyed. */
void iov_slice(BlkIOV *dst, const BlkIOV *src, size_t off, size_t len);
void iov_destroy(BlkIOV *q);

size_t iov_to_buf(const BlkIOV *q, size_t off, void *buf, size_t len);
size_t iov_from_buf(const BlkIOV *q, size_t off, const void *buf, size_t len);
size_t iov_memset(const BlkIOV *q, size_t off, int c, size_t len);
/* True if bytes [off, off+len) are all zero. */
bool iov_is_zero(const BlkIOV *q, size_t off, size_t len);

/* True if len bytes at buf are all zero (fast). */
bool buf_is_zero(const void *buf, size_t len);

#endif
