/*
 * fuzz/fuzz-json-name.c: libFuzzer target for the option names qimg
 * parses without opening anything (api/json-name.c, json-flat.c,
 * open-opts.c and the mappings behind them): above all a "json:{...}"
 * backing file name, which an image from a stranger writes in its header
 * (json-name.c invariant 1).
 *
 * The first byte picks the entry point, the rest is the name (NUL-free
 * copy): 0-1 a backing name read from an image (with and without the
 * image's backing format), 2 a caller's json: name, 3 --image-opts'
 * key=value list, 4 a name (plain or json:) with key=value options beside
 * it, after the first newline.  "json:" is put in front where a
 * json: name is expected.  Only parsing: nothing is opened, so a refusal
 * or an accepted name are both fine; any crash, sanitizer report, leak or
 * hang is a bug (DESIGN.md on-disk rule 4).
 */
#include "api/api.h"
#include "block/block.h"

#include <stdint.h>
#include <string.h>

#define NAME_CAP (64u << 10)

static void run(uint8_t mode, const char *text)
{
    BlkOpenOptions o = {0};
    ApiOpenLayers l = {0};
    g_autofree char *path = NULL;
    g_autoptr(GError) err = NULL;

    switch (mode % 5) {
    case 0:
    case 1: {
        g_autofree char *name = g_strconcat("json:", text, NULL);
        o.format = mode % 5 ? "qcow2" : NULL;
        (void)api_json_backing_name(name, &o, &path, &err);
        break;
    }
    case 2: {
        g_autofree char *name = g_strconcat("json:", text, NULL);
        (void)api_json_name(name, &o, &path, &l, &err);
        break;
    }
    case 3:
        (void)api_image_opts_name(text, &o, &path, &l, &err);
        break;
    default: {
        const char *nl = strchr(text, '\n');
        g_autofree char *name = nl ? g_strndup(text, (gsize)(nl - text)) : NULL;
        (void)api_options_name(name, nl ? nl + 1 : text, &o, &path, &l, &err);
        break;
    }
    }
    api_open_layers_clear(&l);
    blk_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > NAME_CAP) {
        return 0;
    }
    /* a name is a C string: stop at the first NUL, as a header's would */
    g_autofree char *text = g_strndup((const char *)data + 1, size - 1);

    run(data[0], text);
    return 0;
}
