/*
 * libqimg public API: consistency check and repair (qemu-img check).
 */
#ifndef QIMG_CHECK_H
#define QIMG_CHECK_H

#include "qimg/qimg.h"

G_BEGIN_DECLS

typedef enum QimgCheckFix {
    QIMG_CHECK_FIX_LEAKS = 1 << 0,  /* -r leaks */
    QIMG_CHECK_FIX_ERRORS = 1 << 1, /* -r all (together with FIX_LEAKS) */
} QimgCheckFix;

/* Counters as qemu-img check reports them (ImageCheck). */
typedef struct QimgCheckResult {
    uint32_t struct_size; /* sizeof(QimgCheckResult): QIMG_CHECK_RESULT_INIT */
    int64_t corruptions;
    int64_t leaks;
    int64_t check_errors;
    int64_t corruptions_fixed;
    int64_t leaks_fixed;
    int64_t image_end_offset; /* 0: unknown */
    int64_t total_clusters;
    int64_t allocated_clusters;
    int64_t fragmented_clusters;
    int64_t compressed_clusters;
    bool unsupported; /* the format cannot be checked (exit 63) */
    /* Human-readable findings, one per line, as qemu-img prints them
     * ("Leaked cluster 5 refcount=1 reference=0", "ERROR ..."). */
    GPtrArray *messages; /* char*, owned */
    /* Optional, set by the caller before the check: called now and then with
     * work done out of the total (qemu-img's -p). */
    void (*progress)(void *opaque, uint64_t done, uint64_t total);
    void *progress_opaque;
} QimgCheckResult;

#define QIMG_CHECK_RESULT_INIT                                                           \
    {                                                                                    \
        .struct_size = sizeof(QimgCheckResult)                                           \
    }

/*
 * Check the image (open it with QimgOpenOptions.check_mode and, to repair,
 * read-write).  Returns FALSE only when the check could not run or complete
 * (res->check_errors > 0 or error set).  After a repair, the counters describe
 * the image as re-checked afterwards, with *_fixed set, like qemu-img.
 */
gboolean qimg_image_check(QimgImage *img, QimgCheckResult *res, unsigned fix,
                          GError **error);
void qimg_check_result_clear(QimgCheckResult *res);

G_END_DECLS

#endif
