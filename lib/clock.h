/*
 * clock: the one monotonic clock of every program (cohortd, agent, shim,
 * worker).  Header-only, so that programs which link nothing of lib/'s
 * libraries (the shim, the worker) read time the same way as those that do.
 */
#ifndef COHORT_CLOCK_H
#define COHORT_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Microseconds on CLOCK_MONOTONIC: for intervals and deadlines, never dates. */
static inline int64_t util_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The same in milliseconds. */
static inline int64_t util_mono_ms(void)
{
    return util_mono_us() / 1000;
}

#endif
