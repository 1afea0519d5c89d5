/*
 * sched_life: the gang lifecycle of a job, applied inside a store write:
 * STARTING -> RUNNING when every rank runs, SUCCEEDED when every rank exited
 * 0; on any rank's failure the whole attempt is stopped and the job retried
 * (back to PENDING as the next attempt) or FAILED with the rank, node and
 * status in its reason.  Cancel and timeout stop every rank too.
 */
#ifndef COHORT_SCHED_LIFE_H
#define COHORT_SCHED_LIFE_H

#include <stdint.h>

#include "storage/store.h"

#include "storage/store_job.h"

/* Re-reads the job's current attempt and moves the job on as its workers say. */
store_rc sched_job_eval(store_tx *tx, int64_t job_id);

/* Stops every rank of the job's attempt, frees its port and moves it to
 * final state to (JOB_CANCELLED or JOB_FAILED) with reason.  STORE_NOTFOUND
 * when the job (of tenant_id, 0: any) is absent; STORE_JOB_FINAL when it
 * already ended. */
store_rc sched_job_end(store_tx *tx, int64_t tenant_id, int64_t job_id, job_state to,
                       const char *reason);

#endif
