/*
 * block/mutex.h: a driver's GMutex, taken and dropped where ThreadSanitizer
 * can see it.
 *
 * glib builds GMutex on raw futexes, which TSan cannot see: without these
 * annotations every table a driver guards with its lock reads as a data
 * race under TSan (qcow2.h's qcow2_lock() and aio/pool.c do the same for
 * their own locks).  Outside TSan they are plain g_mutex_lock/unlock.
 *
 * Invariant (cited as "mutex.h invariant 1"): the VHD, VHDX, VDI and QED
 * drivers take their lock only through blk_mutex_lock()/blk_mutex_unlock().
 */
#ifndef QIMG_BLOCK_MUTEX_H
#define QIMG_BLOCK_MUTEX_H

#include <glib.h>

#if defined(__SANITIZE_THREAD__)
#define BLK_MUTEX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BLK_MUTEX_TSAN 1
#endif
#endif
#ifdef BLK_MUTEX_TSAN
#include <sanitizer/tsan_interface.h>
#endif

static inline void blk_mutex_lock(GMutex *m)
{
#ifdef BLK_MUTEX_TSAN
    __tsan_mutex_pre_lock(m, 0);
#endif
    g_mutex_lock(m);
#ifdef BLK_MUTEX_TSAN
    __tsan_mutex_post_lock(m, 0, 0);
#endif
}

static inline void blk_mutex_unlock(GMutex *m)
{
#ifdef BLK_MUTEX_TSAN
    __tsan_mutex_pre_unlock(m, 0);
#endif
    g_mutex_unlock(m);
#ifdef BLK_MUTEX_TSAN
    __tsan_mutex_post_unlock(m, 0);
#endif
}

#endif
