/*
 * api/json-data-file.c: a caller's "data-file" options (json-name.c
 * invariant 5) into the data file the qcow2 driver opens instead of the
 * one the image names.
 *
 * Owns: which data-file nodes qimg takes -- a plain file (driver file,
 * or raw over file), a blkdebug node, or raw over one (json-name.c
 * invariant 13), QEMU's null-co/null-aio node with its own options
 * (json-name.c invariant 16) -- and the messages for the rest.
 */
#include "api/api.h"

#include <errno.h>
#include <string.h>

/* json-name.c invariant 16: a null-co/null-aio data file's options onto *d, its name
 * onto *path. */
static gboolean data_file_null(GHashTable *sub, const char *drv, char **path,
                               BlkOpenOptions *d, GError **error)
{
    GHashTableIter it;
    gpointer k, v;

    g_hash_table_iter_init(&it, sub);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        if (strcmp(k, "driver") == 0) {
            continue;
        }
        if (strcmp(k, "size") != 0 && strcmp(k, "read-zeroes") != 0 &&
            strcmp(k, "latency-ns") != 0) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "Block protocol '%s' doesn't support the option '%s'", drv,
                        (char *)k);
            return FALSE;
        }
        if (api_runtime_option(drv, k, v, d, error) < 0) {
            return FALSE;
        }
    }
    *path = g_strdup_printf("%s://", drv);
    return TRUE;
}

gboolean api_data_file_options(GHashTable *sub, char **path, BlkOpenOptions *d,
                               GError **error)
{
    const char *drv = g_hash_table_lookup(sub, "driver");
    const char *fdrv = g_hash_table_lookup(sub, "file.driver");
    const char *file = g_hash_table_lookup(sub, "file.filename");
    const char *name = g_hash_table_lookup(sub, "filename");
    GHashTableIter it;
    gpointer k;

    if (drv && (strcmp(drv, "null-co") == 0 || strcmp(drv, "null-aio") == 0)) {
        return data_file_null(sub, drv, path, d, error);
    }
    if ((fdrv && strcmp(fdrv, "blkdebug") == 0 && (!drv || strcmp(drv, "raw") == 0)) ||
        (drv && strcmp(drv, "blkdebug") == 0)) {
        /* json-name.c invariant 13: a blkdebug node over the data file,
         * under raw or itself the data file */
        bool under_raw = !drv || strcmp(drv, "blkdebug") != 0;
        g_hash_table_remove(sub, "driver");
        if (!api_blkdebug_options(sub, under_raw ? "file." : "", NULL, path, NULL,
                                  error)) {
            return FALSE;
        }
        g_hash_table_remove(sub, "file.driver");
        if (g_hash_table_size(sub)) {
            g_autoptr(GList) rest =
                g_list_sort(g_hash_table_get_keys(sub), (GCompareFunc)strcmp);
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "Option 'data-file.%s' is not supported by qimg",
                        (char *)rest->data);
            g_clear_pointer(path, g_free);
            return FALSE;
        }
        return TRUE;
    }
    g_hash_table_iter_init(&it, sub);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        if (strcmp(k, "driver") != 0 && strcmp(k, "file.driver") != 0 &&
            strcmp(k, "file.filename") != 0 && strcmp(k, "filename") != 0) {
            g_set_error(error, QIMG_ERROR, ENOTSUP,
                        "Option 'data-file.%s' is not supported by qimg", (char *)k);
            return FALSE;
        }
    }
    if ((drv && strcmp(drv, "file") != 0 && strcmp(drv, "raw") != 0) ||
        (fdrv && strcmp(fdrv, "file") != 0)) {
        g_set_error(error, QIMG_ERROR, ENOTSUP,
                    "qimg opens a data file only as a plain file: driver '%s' refused",
                    fdrv && strcmp(fdrv, "file") != 0 ? fdrv : drv);
        return FALSE;
    }
    if (drv && strcmp(drv, "raw") == 0) {
        if (!file) {
            g_set_error(error, QIMG_ERROR, EINVAL,
                        "A block device must be specified for \"file\"");
            return FALSE;
        }
        name = file;
    } else if (file || fdrv) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "Block protocol 'file' does not support the option '%s'",
                    file ? "file.filename" : "file.driver");
        return FALSE;
    }
    if (!name || !*name) {
        g_set_error(error, QIMG_ERROR, EINVAL,
                    "The 'file' block driver requires a file name");
        return FALSE;
    }
    *path = g_strdup(name);
    return TRUE;
}
