/*
 * block/error.c: the error convention of every layer below the public API.
 *
 * Owns: the per-thread message that internal code records with blk_error()
 * next to the -errno it returns; api/ turns it into the GError of the
 * public call (api/error.c).
 *
 * Invariants:
 *  1. A message belongs to the thread that recorded it.  The public API
 *     clears it when a call begins and when it turns it into a GError, so a
 *     failure never shows a stale message.
 *  2. The first message wins: blk_error() records its message only when
 *     none is recorded yet.  The first failure is what a person must read;
 *     whatever fails while cleaning up after it (a rollback, a free) cannot
 *     overwrite it.  A caller that rewords a failure on purpose says so:
 *     blk_error_replace() or blk_error_prefix().
 *  3. blk_error() always returns -errnum (errnum > 0), so it can be used as
 *     `return blk_error(EINVAL, "...")`.  The errno is recorded with the
 *     message, for functions that fail by returning NULL.
 */
#include "block/block.h"

#include <errno.h>
#include <stdarg.h>

typedef struct ErrState {
    int code; /* errno of the recorded message, 0 if none */
    char *msg;
} ErrState;

static void err_state_free(gpointer p)
{
    ErrState *e = p;

    g_free(e->msg);
    g_free(e);
}

static GPrivate last_err = G_PRIVATE_INIT(err_state_free);

static ErrState *err_state(void)
{
    ErrState *e = g_private_get(&last_err);

    if (!e) {
        e = g_new0(ErrState, 1);
        g_private_set(&last_err, e);
    }
    return e;
}

static void err_set(int code, char *msg)
{
    ErrState *e = err_state();

    g_free(e->msg);
    e->msg = msg;
    e->code = msg ? code : 0;
}

int blk_error(int errnum, const char *fmt, ...)
{
    va_list ap;

    g_assert(errnum > 0);
    if (!err_state()->msg) { /* invariant 2 */
        va_start(ap, fmt);
        err_set(errnum, g_strdup_vprintf(fmt, ap));
        va_end(ap);
    }
    return -errnum;
}

int blk_error_replace(int errnum, const char *fmt, ...)
{
    va_list ap;

    g_assert(errnum > 0);
    va_start(ap, fmt);
    err_set(errnum, g_strdup_vprintf(fmt, ap));
    va_end(ap);
    return -errnum;
}

int blk_error_prefix(int ret, const char *fmt, ...)
{
    const char *msg = err_state()->msg;
    int errnum = ret < 0 ? -ret : (err_state()->code ? err_state()->code : EIO);
    g_autofree char *prefix = NULL;
    va_list ap;

    va_start(ap, fmt);
    prefix = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    err_set(errnum, g_strdup_printf("%s: %s", prefix, msg ? msg : g_strerror(errnum)));
    return -errnum;
}

void blk_error_clear(void)
{
    err_set(0, NULL);
}

const char *blk_error_message(void)
{
    return err_state()->msg;
}

bool blk_error_mark(void)
{
    return err_state()->msg != NULL;
}

void blk_error_unwind(bool had_error)
{
    if (!had_error) {
        blk_error_clear();
    }
}

int blk_error_code(void)
{
    return err_state()->code;
}

char *blk_error_take(void)
{
    ErrState *e = err_state();
    char *msg = e->msg;

    e->msg = NULL;
    e->code = 0;
    return msg;
}
