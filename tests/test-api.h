/*
 * tests/test-api.h: handles for unit tests that drive a node through the
 * public API (api/api.h: a QimgImage wraps a BlkNode).
 */
#ifndef QIMG_TEST_API_H
#define QIMG_TEST_API_H

#include "api/api.h"

/* api_open_node() wrapped in a handle (NULL with *error set). */
static inline QimgImage *tu_open_handle(const char *name, const BlkOpenOptions *o,
                                        GError **error)
{
    BlkNode *node = api_open_node(name, o, NULL, error);
    return node ? api_image_new(node) : NULL;
}

#endif
