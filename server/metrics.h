/*
 * metrics: request counters by route and status, a latency histogram, and
 * their Prometheus text rendering (with jobs by state from the store).
 * Counters are lock-free atomics; one instance per process.
 */
#ifndef COHORT_METRICS_H
#define COHORT_METRICS_H

#include <stdint.h>

#include "scheduler/sched_service.h"
#include "storage/store.h"
#include "lib/util.h"

/* Route labels: index i names label[i]; at most METRICS_ROUTES. */
#define METRICS_ROUTES 96

int metrics_init(const char *const *labels, int n);
void metrics_observe(int route, int status, int64_t micros);
/* Appends the exposition text to b; the scheduler's passes from sched
 * (NULL: none runs here). */
void metrics_render(util_buf *b, store *st, sched_service *sched);

#endif
