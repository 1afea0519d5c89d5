/*
 * comm: collective communication for a job's ranks (cohort-worker's
 * communication library).
 *
 * Start-up is torch.distributed's env:// method: MASTER_ADDR, MASTER_PORT,
 * WORLD_SIZE, RANK, LOCAL_RANK and BACKEND (gloo or nccl) come from the
 * environment.  Rank 0 serves the rendezvous store (comm_store.h) on
 * MASTER_PORT; every rank meets the others through it and then talks to
 * them over the backend: Gloo's TCP transport (comm_gloo.cc) or NCCL
 * (comm_nccl.c).  A world of one rank needs neither.
 *
 * Every collective either completes or fails within the timeout (default
 * 30 s, COHORT_COMM_TIMEOUT in seconds, or comm_config.timeout_ms): when a
 * peer dies or rank 0 is gone, each remaining rank gets -1 and a message in
 * comm_errmsg() naming what was lost.  Finding that out takes up to 2 s more:
 * the failed rank closes its backend and holds a roll call in the store
 * (comm.c).  A comm that failed once stays failed, its backend closed.
 *
 * Ranks on one node: with BACKEND=gloo, when every rank of the world is on
 * this node (WORKER_PER_NODE, or torchrun's LOCAL_WORLD_SIZE, equals
 * WORLD_SIZE, and each rank's node, its boot id and network namespace, is
 * the same), collectives go through shared memory instead (comm_shm.c),
 * with the same sums bit for bit; when several nodes hold WORKER_PER_NODE
 * ranks each, through shared memory within a node and Gloo between node
 * leaders (comm_hier.c).  COHORT_COMM_SHM=0 keeps Gloo.
 *
 * Buffers: host memory for gloo; device memory for nccl.
 */
#ifndef COHORT_COMM_H
#define COHORT_COMM_H

#include <stddef.h>

typedef struct comm comm;

enum comm_backend { COMM_BACKEND_GLOO = 0, COMM_BACKEND_NCCL = 1 };
enum comm_reduce { COMM_SUM = 0, COMM_AVG = 1 };

struct comm_config {
    const char *master_addr;   /* host or address of rank 0 */
    int master_port;
    int world_size;
    int rank;
    int local_rank;
    enum comm_backend backend;
    int timeout_ms;            /* 0: the default, 30 s */
    /* How long a failed rank waits for the others to answer its roll call;
     * 0: a fifth of the timeout, at most 2 s (COHORT_ROLL_CALL_MS). */
    int roll_call_ms;
    /* The attempt's rendezvous secret (COHORT_RDZV_SECRET), which rank 0's
     * store asks of every rank; NULL outside Cohort (no secret asked). */
    const char *secret;
    /* Ranks on this node (WORKER_PER_NODE or LOCAL_WORLD_SIZE); 0: unknown. */
    int local_world_size;
    int no_shm;                /* COHORT_COMM_SHM=0: Gloo even on one node */
    /* Bytes of the largest buffer the caller will reduce through
     * comm_buffer (0: 4 MiB): what each rank's slot of shared memory holds. */
    size_t shm_buffer_bytes;
};

/* Fills cfg from the environment.  Returns 0, or -1 with a message naming
 * the variable that is missing or malformed.  cfg->master_addr points into
 * the environment. */
int comm_config_from_env(struct comm_config *cfg, char *err, size_t errlen);

/* Meets the other ranks.  Returns 0 and a comm the caller frees with
 * comm_destroy(), or -1 with a message. */
int comm_init(const struct comm_config *cfg, comm **out, char *err, size_t errlen);

int comm_rank(const comm *c);
int comm_size(const comm *c);
int comm_local_rank(const comm *c);
enum comm_backend comm_backend_of(const comm *c);
/* What carries the collectives: "shm", "gloo", "nccl", or "none" (one rank). */
const char *comm_transport(const comm *c);
const char *comm_backend_name(enum comm_backend b);
/* Whether this build has the NCCL backend. */
int comm_have_nccl(void);

/*
 * A buffer of count floats to reduce with comm_allreduce: over shared
 * memory, this rank's own slot (the reduction then copies nothing in or
 * out); NULL on other transports, past cfg.shm_buffer_bytes, or when it was
 * handed out already: use memory of your own then.  It belongs to c and
 * lives until comm_destroy; its contents after an allreduce are the result.
 */
float *comm_buffer(comm *c, size_t count);

/* In place, float32.  Returns 0, or -1 with the reason in comm_errmsg(). */
int comm_allreduce(comm *c, float *buf, size_t count, enum comm_reduce op);
int comm_broadcast(comm *c, void *buf, size_t bytes, int root);
int comm_barrier(comm *c);
const char *comm_errmsg(const comm *c);

/* The orderly end of a job: returns 0 once every rank has called it, after
 * which the ranks may exit in any order without a peer seeing a lost
 * connection (rank 0, the store host, leaves last). */
int comm_finish(comm *c);

void comm_destroy(comm *c);

#endif
