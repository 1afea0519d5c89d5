/*
 * follow: a job's output as it is printed, `srun`-style.  One streaming
 * GET /v1/jobs/{id}/logs?follow=true per rank (libcurl's multi interface,
 * one connection each), lines prefixed with their rank when there are
 * several, a new attempt followed when the job runs again, until the job
 * has ended and every byte of its last attempt has arrived.
 */
#ifndef COHORT_CLI_FOLLOW_H
#define COHORT_CLI_FOLLOW_H

#include <stdint.h>

#include "cli/cli.h"

#define FOLLOW_RANKS_MAX 64 /* streams at once; past it, ranks 0..63 */

/*
 * Follows job id (every rank, or only rank when rank >= 0) from attempt
 * (0: the current one) until the job ends.  The final state goes into
 * state[16].  CLI_OK when it was followed to its end, else an exit code.
 */
int follow_job(cli *c, int64_t id, int rank, int64_t attempt, char state[16]);

#endif
