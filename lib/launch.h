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
/* A job's training parameters (EPOCHS, BATCH_SIZE, LR: above 0, at most). */
#define LAUNCH_MAX_EPOCHS 1000000
#define LAUNCH_MAX_BATCH (1 << 24)
#define LAUNCH_MAX_LR 1000
/* MASTER_ADDR: a host name or an address. */
#define LAUNCH_MAX_ADDR 253

/*
 * A number of the contract as text: decimal digits only (no sign, space or
 * '+'; a leading '-' only where lo < 0), lo <= v <= hi.  0 with *out, or -1.
 * The worker reads its environment, the agent and shim the launch spec's,
 * through this one reading.
 */
int launch_int_text(const char *text, long long lo, long long hi, long long *out);

/*
 * The contract's environment as cohortd writes it into a launch spec, read
 * through get (NULL for a variable not set): every variable of LAUNCH_ENV
 * but TF_CONFIG, CUDA_VISIBLE_DEVICES and COHORT_RDZV_SECRET set, each
 * within its bound, and the ranks consistent (node-major: RANK is NODE_RANK
 * x WORKER_PER_NODE + LOCAL_RANK, and WORLD_SIZE a multiple of
 * WORKER_PER_NODE).  0, or -1 with why naming the first that is not.
 */
typedef const char *launch_get_fn(void *arg, const char *name);
int launch_env_check(launch_get_fn *get, void *arg, char *why, size_t n);

/* The launch spec's keys (LAUNCH_KEY(name) is "name", checked at compile
 * time as LAUNCH_NAME is) and the JSON type each has: i integer, s string,
 * o object, a array; required ones first.  "workspace" is null when the
 * job's workspace is gone (refused, saying so). */
#define LAUNCH_KEYS(X)                                                                     \
    X(id, 'i', 1) X(job_id, 'i', 1) X(attempt, 'i', 1) X(rank, 'i', 1) X(image, 's', 1)   \
    X(framework, 's', 1) X(program, 's', 1) X(mount_root, 's', 1) X(workspace, 's', 1)    \
    X(datasets, 'a', 1) X(env, 'o', 1) X(args, 'a', 1) X(resources, 'o', 1)              \
    X(image_ref, 's', 0) X(image_digest, 's', 0) X(uid_base, 'i', 0)                      \
    X(registry_auth, 'o', 0) X(registry_token, 's', 0) X(job_network, 'o', 0)             \
    X(hide, 'a', 0)
#define LAUNCH_KEY_ENUM_(n, t, r) LAUNCH_KEY_##n,
enum launch_key { LAUNCH_KEYS(LAUNCH_KEY_ENUM_) LAUNCH_KEY_COUNT };
#define LAUNCH_KEY(n) ((void)LAUNCH_KEY_##n, #n)

/* What a job gives its workers (cohortd refuses more at submit): datasets,
 * arguments after its program, variables of its own and their length. */
#define LAUNCH_MAX_DATASETS 32
#define LAUNCH_MAX_JOB_ARGS 256
#define LAUNCH_MAX_JOB_ENV 64
#define LAUNCH_MAX_ENV_VALUE 4096
/* What a launch spec then holds: cohortd's --local_rank before the job's
 * arguments; the contract's variables, the job's, and the two socket
 * interface names of a job network.  The shim's buffers hold at least
 * these (agent/shim.h asserts it). */
#define LAUNCH_MAX_ARGS (LAUNCH_MAX_JOB_ARGS + 1)
#define LAUNCH_MAX_ENV (LAUNCH_MAX_JOB_ENV + LAUNCH_ENV_COUNT + 2)
/* A worker's share of its node (the spec's "resources"). */
#define LAUNCH_MAX_CPUS (1 << 20)
#define LAUNCH_MAX_MEMORY_MB (1LL << 40)
#define LAUNCH_MAX_GPUS 1024

#endif
