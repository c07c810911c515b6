/*
 * aio/plug.c: the count of held-back submissions and the kick that hands
 * them to the kernel before a thread sleeps (aio/plug.h invariants).
 */
#include "aio/plug.h"

#include <stddef.h>

unsigned plug_held;
static void (*plug_kick_fn)(void);

void plug_set_kick(void (*kick)(void))
{
    __atomic_store_n(&plug_kick_fn, kick, __ATOMIC_RELEASE);
}

void plug_kick_slow(void)
{
    void (*kick)(void) = __atomic_load_n(&plug_kick_fn, __ATOMIC_ACQUIRE);

    if (kick) {
        kick(); /* invariant 2 */
    }
}
