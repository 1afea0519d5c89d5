/*
 * launch: the contract between cohortd, its agents and the workers they
 * start: the environment a worker is given (its names, one list) and the
 * bounds all three hold to (one number each, refused with a reason past
 * it, never cut).  cohortd writes it (api/api_nodes.c), the agent and shim
 * read and pass it on (agent/), the worker reads it (worker/comm.c).
 */
#ifndef COHORT_LAUNCH_H
#define COHORT_LAUNCH_H

/* The worker's environment, in the order the API documents it. */
#define LAUNCH_ENV(X)                                                                      \
    X(MASTER_ADDR) X(MASTER_PORT) X(WORLD_SIZE) X(RANK) X(LOCAL_RANK) X(NODE_RANK)         \
    X(WORKER_PER_NODE) X(BACKEND) X(DATASETS_PATH) X(DATASETS) X(WORKSPACE) X(EPOCHS)      \
    X(LR) X(BATCH_SIZE) X(TF_CONFIG) X(CUDA_VISIBLE_DEVICES) X(COHORT_RDZV_SECRET)

/* One name as a string: LAUNCH_NAME(WORLD_SIZE) is "WORLD_SIZE", checked
 * against the list above at compile time (a name not in it does not build). */
#define LAUNCH_ENUM_(n) LAUNCH_ENV_##n,
enum launch_env { LAUNCH_ENV(LAUNCH_ENUM_) LAUNCH_ENV_COUNT };
#define LAUNCH_NAME(n) ((void)LAUNCH_ENV_##n, #n)

/* Ranks of one job: cohortd refuses a job of more, a worker a WORLD_SIZE
 * past it. */
#define LAUNCH_MAX_WORLD 10000
/* Workers one agent runs at once (its table of them). */
#define LAUNCH_MAX_NODE_WORKERS 4096
/* Ranks of one job on one node (workers_per_node, LOCAL_RANK). */
#define LAUNCH_MAX_PER_NODE 1024

#endif
