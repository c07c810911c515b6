/*
 * qimg nbd -L: a server's exports in qemu-nbd's format (tools/nbd.c fact 6).
 *
 * Owns: the listing, and libnbd for it: loaded here at the first use, not
 * linked, as block/nbd-lib.c loads it for the library (libnbd brings
 * libxml2, ICU and the C++ runtime: 16 ms of CPU at every start of a qimg
 * that links it, for a listing few commands make).  The table's entries
 * have the types of libnbd.h's functions (__typeof__).
 */
#include "qimg-tool.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#ifdef QIMG_HAVE_LIBNBD
#include <dlfcn.h>
#include <libnbd.h>

#define NBD_LIST_FUNCS(X)                                                                \
    X(nbd_can_cache)                                                                     \
    X(nbd_can_df)                                                                        \
    X(nbd_can_fast_zero)                                                                 \
    X(nbd_can_flush)                                                                     \
    X(nbd_can_fua)                                                                       \
    X(nbd_can_multi_conn)                                                                \
    X(nbd_can_trim)                                                                      \
    X(nbd_can_zero)                                                                      \
    X(nbd_close)                                                                         \
    X(nbd_connect_tcp)                                                                   \
    X(nbd_connect_unix)                                                                  \
    X(nbd_create)                                                                        \
    X(nbd_get_block_size)                                                                \
    X(nbd_get_error)                                                                     \
    X(nbd_get_size)                                                                      \
    X(nbd_is_read_only)                                                                  \
    X(nbd_is_rotational)                                                                 \
    X(nbd_opt_abort)                                                                     \
    X(nbd_opt_info)                                                                      \
    X(nbd_opt_list)                                                                      \
    X(nbd_opt_list_meta_context)                                                         \
    X(nbd_set_export_name)                                                               \
    X(nbd_set_opt_mode)

static struct {
#define NBD_LIST_FIELD(f) __typeof__(f) *f;
    NBD_LIST_FUNCS(NBD_LIST_FIELD)
#undef NBD_LIST_FIELD
} L;

/* libnbd.so.0 into L, all of it or none: false after printing why. */
static bool load_libnbd(void)
{
    void *h = dlopen("libnbd.so.0", RTLD_NOW | RTLD_LOCAL);
    void *sym;

    if (!h) {
        tool_error("-L needs libnbd.so.0 (Debian: libnbd0): %s", dlerror());
        return false;
    }
    /* memcpy: ISO C has no conversion from void * to a function pointer */
#define NBD_LIST_LOAD(f)                                                                 \
    if (!(sym = dlsym(h, #f))) {                                                         \
        tool_error("-L: libnbd.so.0 has no %s", #f);                                     \
        return false;                                                                    \
    }                                                                                    \
    memcpy(&L.f, &sym, sizeof(sym));
    NBD_LIST_FUNCS(NBD_LIST_LOAD)
#undef NBD_LIST_LOAD
    return true;
}

typedef struct ExportList {
    GPtrArray *names, *descs;
} ExportList;

static int on_export(void *opaque, const char *name, const char *desc)
{
    ExportList *l = opaque;

    g_ptr_array_add(l->names, g_strdup(name));
    g_ptr_array_add(l->descs, g_strdup(desc ? desc : ""));
    return 0;
}

static int on_context(void *opaque, const char *name)
{
    g_ptr_array_add(opaque, g_strdup(name));
    return 0;
}

/* Fact 6: the transmission flags, rebuilt from what libnbd tells. */
static unsigned export_flags(struct nbd_handle *h)
{
    const struct { /* not static: the functions are known only once loaded */
        int (*can)(struct nbd_handle *);
        unsigned bit;
    } map[] = {
        {L.nbd_is_read_only, 1},   {L.nbd_can_flush, 2},      {L.nbd_can_fua, 3},
        {L.nbd_is_rotational, 4},  {L.nbd_can_trim, 5},       {L.nbd_can_zero, 6},
        {L.nbd_can_df, 7},         {L.nbd_can_multi_conn, 8}, {L.nbd_can_cache, 10},
        {L.nbd_can_fast_zero, 11},
    };
    unsigned flags = 1; /* HAS_FLAGS */

    for (size_t i = 0; i < G_N_ELEMENTS(map); i++) {
        if (map[i].can(h) == 1) {
            flags |= 1u << map[i].bit;
        }
    }
    return flags;
}

static void print_export(struct nbd_handle *h, const char *name, const char *desc)
{
    static const char *const names[] = {
        NULL,     "readonly", "flush", "fua",    "rotational", "trim",
        "zeroes", "df",       "multi", "resize", "cache",      "fast-zero",
    };
    unsigned flags = export_flags(h);
    int64_t minb = L.nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
    g_autoptr(GPtrArray) ctx = g_ptr_array_new_with_free_func(g_free);

    printf(" export: '%s'\n", name);
    if (*desc) {
        printf("  description: %s\n", desc);
    }
    printf("  size:  %" PRId64 "\n", L.nbd_get_size(h));
    printf("  flags: 0x%x (", flags);
    for (unsigned bit = 0; bit < G_N_ELEMENTS(names); bit++) {
        if (names[bit] && (flags & (1u << bit))) {
            printf(" %s", names[bit]);
        }
    }
    printf(" )\n");
    if (minb > 0) {
        printf("  min block: %" PRId64 "\n", minb);
        printf("  opt block: %" PRId64 "\n",
               L.nbd_get_block_size(h, LIBNBD_SIZE_PREFERRED));
        printf("  max block: %" PRId64 "\n",
               L.nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM));
    }
    L.nbd_opt_list_meta_context(
        h, (nbd_context_callback){.callback = on_context, .user_data = ctx});
    if (ctx->len) {
        printf("  available meta contexts: %u\n", ctx->len);
        for (unsigned i = 0; i < ctx->len; i++) {
            printf("   %s\n", (char *)ctx->pdata[i]);
        }
    }
}

/* Fact 6: -L, qemu-nbd's listing of a server's exports. */
int tool_nbd_list(const char *sock, const char *host, const char *port)
{
    struct nbd_handle *h;
    ExportList l;
    int ret = 1;

    if (!load_libnbd()) {
        return 1;
    }
    h = L.nbd_create();
    l = (ExportList){g_ptr_array_new_with_free_func(g_free),
                     g_ptr_array_new_with_free_func(g_free)};
    if (!h || L.nbd_set_opt_mode(h, true) < 0 ||
        (sock ? L.nbd_connect_unix(h, sock)
              : L.nbd_connect_tcp(h, host ? host : "localhost", port ? port : "10809")) <
            0 ||
        L.nbd_opt_list(h, (nbd_list_callback){.callback = on_export, .user_data = &l}) <
            0) {
        tool_error("%s", h && L.nbd_get_error() ? L.nbd_get_error()
                                                : "cannot list the exports");
        goto out;
    }
    printf("exports available: %u\n", l.names->len);
    for (unsigned i = 0; i < l.names->len; i++) {
        if (L.nbd_set_export_name(h, l.names->pdata[i]) < 0 || L.nbd_opt_info(h) < 0) {
            tool_error("export '%s': %s", (char *)l.names->pdata[i], L.nbd_get_error());
            goto out;
        }
        print_export(h, l.names->pdata[i], l.descs->pdata[i]);
    }
    ret = 0;
out:
    if (h) {
        L.nbd_opt_abort(h);
        L.nbd_close(h);
    }
    g_ptr_array_unref(l.names);
    g_ptr_array_unref(l.descs);
    return ret;
}
#else
int tool_nbd_list(const char *sock, const char *host, const char *port)
{
    (void)sock;
    (void)host;
    (void)port;
    tool_error("-L needs qimg built with libnbd");
    return 1;
}
#endif
