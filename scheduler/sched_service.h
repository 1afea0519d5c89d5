/*
 * sched_service: the scheduler thread inside cohortd.  Woken by submits,
 * worker reports and a tick, it marks silent nodes down (their workers
 * lost), fails jobs past their max_runtime_seconds, stops jobs whose
 * tenant's money runs out, and places pending jobs in queue order, each
 * gang in full or not at all and only when its tenant's budget can hold
 * its price, in one write.
 * Owns the thread and the pending jobs' queue positions.
 */
#ifndef COHORT_SCHED_SERVICE_H
#define COHORT_SCHED_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/sched.h"
#include "scheduler/sched_plan.h"
#include "storage/store.h"

typedef struct sched_config {
    int64_t node_timeout_ms; /* no heartbeat for this long: the node is down */
    int64_t tick_ms;         /* a pass at least this often */
    int64_t min_hold_s;      /* a job without max_runtime_seconds holds this long's price */
    int64_t budget_grace_s;  /* stop such jobs this long before their tenant's money ends */
} sched_config;

#define SCHED_MIN_HOLD_S 600
#define SCHED_BUDGET_GRACE_S 30

typedef struct sched_service sched_service;

sched_service *sched_start(store *st, const sched_config *cfg, char *err, size_t errlen);
/* Asks for a pass soon. */
void sched_wake(sched_service *s);
void sched_stop(sched_service *s);
/*
 * Each node's desired-state version: it moves after every commit that
 * changes what the node is to run (sched_nodes_changed), so its agent,
 * waiting on it in a long poll, fetches its new state; a change on one
 * node wakes no other.  node_id 0 or unknown: the version every node
 * shares.  notify(arg) is called after each bump (from the thread that
 * bumped).
 */
uint64_t sched_version(sched_service *s, int64_t node_id);
/* Moves the versions of nodes ids (NULL: of every node) and wakes their
 * long polls: what store_on_nodes says, passed on. */
void sched_nodes_changed(sched_service *s, const int64_t *ids, size_t n);
void sched_on_bump(sched_service *s, void (*notify)(void *arg), void *arg);
/*
 * What another cohortd on the database signalled (store_on_signal): "wake"
 * (a pass is wanted, run here if this one leads), "bump" (every node's
 * desired state may have changed), NULL (signals may have been lost:
 * both).  sched_wake sends "wake".
 */
void sched_signal(sched_service *s, const char *what);

/* What the passes of this cohortd cost: counted only where it leads, timed
 * from the snapshot read to the placements' commit (the tick excluded). */
typedef struct sched_stats {
    uint64_t passes;      /* passes that planned (a usable node and the lead) */
    uint64_t sum_us;      /* their time, all together */
    int64_t last_us;      /* the last one's */
    int64_t max_us;       /* the longest since start */
    int64_t last_pending; /* jobs the last one planned over */
} sched_stats;

/* A consistent copy of s's figures into out. */
void sched_stats_get(sched_service *s, sched_stats *out);

/* Queue position of a pending job (1: next), 0 when not known yet; why it
 * waits goes to reason (may be NULL) as of the last pass. */
int64_t sched_position(sched_service *s, int64_t job_id, char *reason, size_t n);

/*
 * Whether j could ever run on the registered nodes (all of them, drained or
 * down included, as they may come back): 1 yes, 0 never (why says so), and
 * 1 too while no node is registered at all (the job waits for one).  The
 * nodes are read at most once a second; a "never" is checked on a fresh
 * read.
 */
int sched_could_fit(sched_service *s, const sched_job *j, char *why, size_t n);

/* What admitting a job holds: its estimated maximum, or, without
 * max_runtime_seconds, min_hold_s of its price; -1 past the money range. */
int64_t sched_hold(const sched_config *cfg, int64_t price_per_hour, int64_t workers,
                   int64_t max_runtime_s);

#endif
