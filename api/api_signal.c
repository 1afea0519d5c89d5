/*
 * api_signal: what another cohortd on the same database says (store.h's
 * signals), dispatched to the caches it concerns and to the scheduler.
 * It sits above api_auth.c and api_nodes.c, so that neither calls the
 * other to hear it.
 */
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "scheduler/sched_service.h"

void api_on_signal(void *arg, const char *what)
{
    api_ctx *ctx = arg;
    if (what && !strncmp(what, "forget ", 7)) {
        api_auth_forget(strtoll(what + 7, NULL, 10));
        return;
    }
    if (!what) { /* a revocation or a drain may be among what was lost */
        api_auth_forget_all();
        api_nodes_forget(NULL, 0);
    }
    sched_signal(ctx->sched, what);
}
