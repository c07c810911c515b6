/*
 * block/iov.c: scatter-gather request vectors (see iov.h for the invariants).
 */
#include "block/iov.h"

#include <glib.h>
#include <string.h>

void iov_init_buf(BlkIOV *q, void *buf, size_t len)
{
    q->iov = q->local;
    q->local[0].iov_base = buf;
    q->local[0].iov_len = len;
    q->niov = 1;
    q->size = len;
    q->owned = false;
}

void iov_init_external(BlkIOV *q, struct iovec *iov, int niov)
{
    q->iov = iov;
    q->niov = niov;
    q->owned = false;
    q->size = 0;
    for (int i = 0; i < niov; i++) {
        q->size += iov[i].iov_len;
    }
}

void iov_slice(BlkIOV *dst, const BlkIOV *src, size_t off, size_t len)
{
    int first = 0;
    size_t skip = off;

    g_assert(off <= src->size && len <= src->size - off);
    while (first < src->niov && skip >= src->iov[first].iov_len &&
           src->iov[first].iov_len != 0) {
        skip -= src->iov[first].iov_len;
        first++;
    }
    /* Count the entries needed. */
    int n = 0;
    size_t left = len, s = skip;
    for (int i = first; i < src->niov && left > 0; i++) {
        size_t avail = src->iov[i].iov_len - s;
        left -= MIN(avail, left);
        s = 0;
        n++;
    }
    if (n <= IOV_INLINE) {
        dst->iov = dst->local;
        dst->owned = false;
    } else {
        dst->iov = g_new(struct iovec, n);
        dst->owned = true;
    }
    left = len;
    s = skip;
    int k = 0;
    for (int i = first; i < src->niov && left > 0; i++) {
        size_t avail = src->iov[i].iov_len - s;
        size_t take = MIN(avail, left);
        dst->iov[k].iov_base = (char *)src->iov[i].iov_base + s;
        dst->iov[k].iov_len = take;
        k++;
        left -= take;
        s = 0;
    }
    dst->niov = k;
    dst->size = len;
}

void iov_destroy(BlkIOV *q)
{
    if (q->owned) {
        g_free(q->iov);
    }
    q->iov = NULL;
    q->niov = 0;
    q->size = 0;
    q->owned = false;
}

typedef void (*iov_fn)(void *iov_part, void *arg_part, size_t n, void *ctx);

static size_t iov_walk(const BlkIOV *q, size_t off, size_t len, char *arg, iov_fn fn,
                       void *ctx)
{
    size_t done = 0;
    for (int i = 0; i < q->niov && done < len; i++) {
        size_t l = q->iov[i].iov_len;
        if (off >= l) {
            off -= l;
            continue;
        }
        size_t take = MIN(l - off, len - done);
        fn((char *)q->iov[i].iov_base + off, arg ? arg + done : NULL, take, ctx);
        done += take;
        off = 0;
    }
    return done;
}

static void do_to_buf(void *p, void *a, size_t n, void *ctx)
{
    (void)ctx;
    memcpy(a, p, n);
}

static void do_from_buf(void *p, void *a, size_t n, void *ctx)
{
    (void)ctx;
    memcpy(p, a, n);
}

static void do_memset(void *p, void *a, size_t n, void *ctx)
{
    (void)a;
    memset(p, *(int *)ctx, n);
}

static void do_is_zero(void *p, void *a, size_t n, void *ctx)
{
    (void)a;
    bool *z = ctx;
    if (*z && !buf_is_zero(p, n)) {
        *z = false;
    }
}

size_t iov_to_buf(const BlkIOV *q, size_t off, void *buf, size_t len)
{
    return iov_walk(q, off, len, buf, do_to_buf, NULL);
}

size_t iov_from_buf(const BlkIOV *q, size_t off, const void *buf, size_t len)
{
    return iov_walk(q, off, len, (char *)buf, do_from_buf, NULL);
}

size_t iov_memset(const BlkIOV *q, size_t off, int c, size_t len)
{
    return iov_walk(q, off, len, NULL, do_memset, &c);
}

bool iov_is_zero(const BlkIOV *q, size_t off, size_t len)
{
    bool z = true;
    iov_walk(q, off, len, NULL, do_is_zero, &z);
    return z;
}

bool buf_is_zero(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    /* Check the head byte-wise until 8-byte aligned, then words. */
    while (len > 0 && ((uintptr_t)p & 7)) {
        if (*p) {
            return false;
        }
        p++;
        len--;
    }
    const uint64_t *w = (const uint64_t *)(const void *)p;
    while (len >= 64) {
        if (w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) {
            return false;
        }
        w += 8;
        len -= 64;
    }
    p = (const unsigned char *)w;
    while (len > 0) {
        if (*p) {
            return false;
        }
        p++;
        len--;
    }
    return true;
}
