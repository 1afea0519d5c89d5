/*
 * sched_service: the scheduler thread inside cohortd.  Woken by submits,
 * worker reports and a tick, it marks silent nodes down (their workers
 * lost), fails jobs past their max_runtime_seconds, and places pending
 * jobs in queue order, each gang in full or not at all, in one write.
 * Owns the thread and the pending jobs' queue positions.
 */
#ifndef COHORT_SCHED_SERVICE_H
#define COHORT_SCHED_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/sched.h"
#include "storage/store.h"

typedef struct sched_config {
    int64_t node_timeout_ms; /* no heartbeat for this long: the node is down */
    int64_t tick_ms;         /* a pass at least this often */
} sched_config;

typedef struct sched_service sched_service;

sched_service *sched_start(store *st, const sched_config *cfg, char *err, size_t errlen);
/* Asks for a pass soon. */
void sched_wake(sched_service *s);
void sched_stop(sched_service *s);
/*
 * The desired-state version: bumped after every commit that places or
 * stops workers, so agents waiting on it (long poll) fetch their new state.
 * notify(arg) is called after each bump (from whichever thread bumped).
 */
uint64_t sched_version(sched_service *s);
void sched_bump(sched_service *s);
void sched_on_bump(sched_service *s, void (*notify)(void *arg), void *arg);

#define SCHED_REASON_MAX 160

/* Queue position of a pending job (1: next), 0 when not known yet; why it
 * waits goes to reason (may be NULL) as of the last pass. */
int64_t sched_position(sched_service *s, int64_t job_id, char *reason, size_t n);

/*
 * Whether j could ever run on the registered nodes (all of them, drained or
 * down included, as they may come back): 1 yes, 0 never (why says so), and
 * 1 too while no node is registered at all (the job waits for one).
 */
int sched_could_fit(store *st, const sched_job *j, char *why, size_t n);

#endif
