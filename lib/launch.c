/*
 * launch: the one reading of the contract's numbers and environment
 * (launch.h), used by cohortd's tests of what it writes, the agent, the
 * shim and the worker.
 */
#include "lib/launch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/fmt.h"

int launch_int_text(const char *text, long long lo, long long hi, long long *out)
{
    const char *digits = text && text[0] == '-' && lo < 0 ? text + 1 : text;
    if (!digits || !*digits || strspn(digits, "0123456789") != strlen(digits) ||
        strlen(digits) > 18)
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* One numeric variable of the environment into *v: 0, or -1 with why. */
static int env_num(launch_get_fn *get, void *arg, const char *name, long long lo,
                   long long hi, long long *v, char *why, size_t n)
{
    const char *t = get(arg, name);
    if (launch_int_text(t, lo, hi, v) == 0)
        return 0;
    if (!t)
        fmt_cut(why, n, "%s is not set", name);
    else
        fmt_cut(why, n, "%s='%.40s' is not a whole number from %lld to %lld", name, t, lo, hi);
    return -1;
}

/* The variables that are text: set, not empty (DATASETS may be: a job
 * without datasets), and for BACKEND one of the two. */
static int env_text(launch_get_fn *get, void *arg, char *why, size_t n)
{
    const char *const names[] = {LAUNCH_NAME(MASTER_ADDR),   LAUNCH_NAME(BACKEND),
                                 LAUNCH_NAME(DATASETS_PATH), LAUNCH_NAME(DATASETS),
                                 LAUNCH_NAME(WORKSPACE),     LAUNCH_NAME(LR)};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *t = get(arg, names[i]);
        if (!t || (!*t && strcmp(names[i], LAUNCH_NAME(DATASETS)))) {
            fmt_cut(why, n, "%s is not set", names[i]);
            return -1;
        }
    }
    const char *addr = get(arg, LAUNCH_NAME(MASTER_ADDR)), *b = get(arg, LAUNCH_NAME(BACKEND)),
               *lr = get(arg, LAUNCH_NAME(LR));
    if (strlen(addr) > LAUNCH_MAX_ADDR || strpbrk(addr, " \t\n/")) {
        fmt_cut(why, n, "MASTER_ADDR='%.40s' is not a host name or address", addr);
        return -1;
    }
    if (strcmp(b, "gloo") && strcmp(b, "nccl")) {
        fmt_cut(why, n, "BACKEND='%.40s' is not gloo or nccl", b);
        return -1;
    }
    char *end;
    double v = strtod(lr, &end); /* a tiny one (ERANGE, below DBL_MIN) is still above 0 */
    if (end == lr || *end || !(v > 0) || v > LAUNCH_MAX_LR) {
        fmt_cut(why, n, "LR='%.40s' is not a number above 0 and at most %d", lr, LAUNCH_MAX_LR);
        return -1;
    }
    return 0;
}

int launch_env_check(launch_get_fn *get, void *arg, char *why, size_t n)
{
    long long world, rank, per, node, local, port, epochs, batch;
    if (env_text(get, arg, why, n) != 0 ||
        env_num(get, arg, LAUNCH_NAME(MASTER_PORT), 1, 65535, &port, why, n) != 0 ||
        env_num(get, arg, LAUNCH_NAME(WORLD_SIZE), 1, LAUNCH_MAX_WORLD, &world, why, n) != 0 ||
        env_num(get, arg, LAUNCH_NAME(RANK), 0, world - 1, &rank, why, n) != 0 ||
        env_num(get, arg, LAUNCH_NAME(WORKER_PER_NODE), 1, world < LAUNCH_MAX_PER_NODE ? world
                                                                             : LAUNCH_MAX_PER_NODE,
                &per, why, n) != 0 ||
        env_num(get, arg, LAUNCH_NAME(NODE_RANK), 0, world / per - 1, &node, why, n) != 0 ||
        env_num(get, arg, LAUNCH_NAME(LOCAL_RANK), 0, per - 1, &local, why, n) != 0 ||
        env_num(get, arg, LAUNCH_NAME(EPOCHS), 1, LAUNCH_MAX_EPOCHS, &epochs, why, n) != 0 ||
        env_num(get, arg, LAUNCH_NAME(BATCH_SIZE), 1, LAUNCH_MAX_BATCH, &batch, why, n) != 0)
        return -1;
    if (world % per) {
        fmt_cut(why, n, "WORLD_SIZE %lld is not a multiple of WORKER_PER_NODE %lld", world, per);
        return -1;
    }
    if (rank != node * per + local) {
        fmt_cut(why, n, "RANK %lld is not NODE_RANK %lld x WORKER_PER_NODE %lld + LOCAL_RANK %lld",
                rank, node, per, local);
        return -1;
    }
    return 0;
}
