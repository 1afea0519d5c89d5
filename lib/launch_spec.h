/*
 * launch_spec: the one check of a launch spec, the document cohortd sends
 * an agent for each worker (api/api_nodes.c) and the agent hands its shim:
 * every key of LAUNCH_KEYS of its type, each value within the bounds of
 * launch.h, and the contract's environment (launch_env_check).  The agent
 * refuses a worker whose spec fails it, with the reason; cohortd's tests
 * check what it writes against it.
 */
#ifndef COHORT_LAUNCH_SPEC_H
#define COHORT_LAUNCH_SPEC_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "lib/launch.h"

/* 0, or -1 with why naming the first key or variable that is not valid. */
int launch_spec_check(const cJSON *spec, char *why, size_t n);

#endif
