/*
 * sched_plan: the policy of one scheduling pass as a pure function.  Given
 * a snapshot of the cluster (nodes, running gangs and where their workers
 * are, pending jobs with their prices, tenants' use, quotas and budgets),
 * it decides which gangs to place where and why each other pending job
 * waits: queue order with fair share, quota and budget admission, all or
 * nothing gang placement, EASY backfill behind a blocked head.  It reads
 * no store and no clock (now is in the snapshot) and changes nothing in the
 * snapshot, so each rule is unit-tested on a synthetic one
 * (tests/test_sched.c).  sched_service gathers the snapshot from the store
 * and commits the placements.
 */
#ifndef COHORT_SCHED_PLAN_H
#define COHORT_SCHED_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/sched.h"

#define SCHED_REASON_MAX 160

/* A job that holds resources now (STARTING or RUNNING). */
typedef struct sched_active {
    int64_t id, tenant_id;
    int64_t end;              /* its max_runtime_seconds bound (ms); INT64_MAX without */
    int64_t workers;
    int64_t cpus, mem, gpus;  /* per worker */
} sched_active;

/* workers of job_id on node_id (live workers: running, starting or stopping). */
typedef struct sched_alloc {
    int64_t job_id, node_id, workers;
} sched_alloc;

/* A pending job: its shape and resources, and the terms of its admission. */
typedef struct sched_pending {
    sched_job job;           /* usage is filled in by the plan from the tenants' use */
    int64_t attempt;
    int64_t price_per_hour;
    int64_t max_runtime_s;   /* 0: none */
    int64_t hold;            /* what admitting it holds; -1 past the money range */
    int64_t need;            /* what must be left to admit it (hold, plus a grace) */
    int64_t estimated_max;   /* price x workers x max runtime; -1 without a bound */
    char currency[4];
} sched_pending;

/* A tenant's decayed past use (fair share). */
typedef struct sched_usage {
    int64_t tenant_id;
    double decayed;
} sched_usage;

typedef struct sched_quota {
    int64_t tenant_id;
    int64_t max_running_jobs, max_workers, max_cpus, max_gpus; /* -1: no limit */
} sched_quota;

/* A tenant whose account limits what it may hold. */
typedef struct sched_budget {
    int64_t tenant_id;
    int64_t left; /* the lesser of balance and monthly cap, less what is set aside */
    int64_t balance, reserved;
    char currency[4];
} sched_budget;

/* Everything a pass decides on.  A tenant without a quota or budget entry
 * has no limit of that kind; one without a usage entry has used nothing. */
typedef struct sched_snapshot {
    int64_t now; /* ms, the clock the active jobs' ends are on */
    const sched_node *nodes;        /* in id order, free resources as of now */
    size_t nnodes;
    const sched_active *active;
    size_t nactive;
    const sched_alloc *allocs;
    size_t nallocs;
    const sched_pending *pending;
    size_t npending;
    const sched_usage *usage;
    size_t nusage;
    const sched_quota *quotas;
    size_t nquotas;
    const sched_budget *budgets;
    size_t nbudgets;
} sched_snapshot;

/* A gang to place: workers/per_node nodes, per_node workers on each. */
typedef struct sched_placement {
    int64_t job_id, attempt, tenant_id;
    int64_t per_node, workers, cpus, mem, gpus;
    int64_t *nodes; /* node ids, node-major: the node of rank 0 first (owned) */
    int64_t price, hold, need, estimated_max;
    int bounded;    /* it has a max_runtime_seconds */
} sched_placement;

/* A pending job left waiting: its place in the queue (1: next) and why. */
typedef struct sched_wait {
    int64_t job_id, pos;
    char reason[SCHED_REASON_MAX];
} sched_wait;

typedef struct sched_decisions {
    sched_placement *placed; /* in queue order */
    size_t nplaced;
    sched_wait *waits;       /* in queue order */
    size_t nwaits;
} sched_decisions;

/*
 * Plans one pass over s into *out (which the caller frees with
 * sched_decisions_free, on failure too).  0, or -1 when out of memory.
 */
int sched_plan(const sched_snapshot *s, sched_decisions *out);
void sched_decisions_free(sched_decisions *d);

#endif
