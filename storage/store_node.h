/*
 * store_node: nodes (one per agent), their join tokens, the workers (ranks)
 * placed on them, jobs' rendezvous ports and tenant quotas.
 */
#ifndef COHORT_STORE_NODE_H
#define COHORT_STORE_NODE_H

#include <stdint.h>

#include "storage/store.h"
#include "lib/util.h"

#define STORE_ADDR_MAX 255

typedef struct store_node {
    int64_t id;
    char name[UTIL_NAME_MAX + 1];
    char address[STORE_ADDR_MAX + 1];
    int64_t cpus, memory_mb, gpus;
    char gpu_type[UTIL_NAME_MAX + 1];
    int64_t port_lo, port_hi;
    char state[8]; /* up | down */
    int drained;
    char network[8]; /* what its agent gives jobs: host | job (migration 014) */
    int64_t revoked_at;    /* 0: trusted; else its token is refused (migration 015) */
    int64_t join_token_id; /* the join token that registered it; 0: not known */
    /* Its token's rotation (migration 018): when the token in use was
     * issued, whether a platform admin asked for a new one, and whether a
     * new one is out, waiting for its first use. */
    int64_t token_issued_at;
    int token_rotate, token_next;
    char revoke_reason[160]; /* why it was revoked, when cohortd did it; "" */
    int64_t registered_at, last_heartbeat;
    /* Held by live workers (assigned or running): derived on reads. */
    int64_t used_cpus, used_memory_mb, used_gpus, used_workers;
} store_node;

typedef struct store_worker {
    int64_t id;
    int64_t job_id;
    int64_t attempt;
    int64_t rank, node_rank, local_rank;
    int64_t node_id;
    char desired[8]; /* run | stop */
    char state[12];  /* assigned | running | exited | failed | lost */
    int64_t exit_code; /* -1: none */
    int64_t signal;    /* 0: none */
    char message[256];
    int64_t created_at, started_at, finished_at;
    int64_t cpu_us, memory_peak; /* what its cgroup counted; -1: not known */
    char image_digest[80];       /* the image digest it ran; "" until known */
} store_worker;

typedef struct store_quota {
    int64_t tenant_id;
    int64_t max_running_jobs, max_workers, max_cpus, max_gpus; /* -1: no limit */
    int64_t max_storage_bytes, max_pending_jobs; /* -1: the platform's default (016) */
} store_quota;

typedef struct store_join_token {
    int64_t id, created_at;
    int64_t expires_at, revoked_at; /* 0: never, not */
    int64_t max_uses, uses;         /* max_uses 0: any number */
} store_join_token;

/* expires_at 0: never; max_uses 0: any number of nodes. */
store_rc store_join_token_insert(store_tx *tx, const uint8_t hash[UTIL_SHA256_LEN],
                            int64_t expires_at, int64_t max_uses, int64_t *id);
/* STORE_OK when the join token still admits a node at now_ms (live, not
 * used up); STORE_NOTFOUND otherwise. */
store_rc store_join_token_check(store *s, const uint8_t hash[UTIL_SHA256_LEN], int64_t now_ms);
/* Counts a node against the token, when it still admits one: STORE_OK
 * with its id, or STORE_NOTFOUND (nothing changed). */
store_rc store_join_token_use(store_tx *tx, const uint8_t hash[UTIL_SHA256_LEN], int64_t now_ms,
                         int64_t *id);
store_rc store_join_token_list(store *s, int64_t after, int limit,
                          void (*row)(void *arg, const store_join_token *t), void *arg);
/* STORE_NOTFOUND when there is no such token or it is revoked already. */
store_rc store_join_token_revoke(store_tx *tx, int64_t id, int64_t now_ms);

/* Inserts n (id, registered_at, last_heartbeat set here). */
store_rc store_node_insert(store_tx *tx, store_node *n, const uint8_t token_hash[UTIL_SHA256_LEN]);
store_rc store_node_by_token(store *s, const uint8_t hash[UTIL_SHA256_LEN], store_node *out);
store_rc store_node_get(store *s, int64_t id, store_node *out);
store_rc store_node_get_tx(store_tx *tx, int64_t id, store_node *out);
store_rc store_node_list(store *s, int64_t after, int limit,
                    void (*row)(void *arg, const store_node *n), void *arg);
/* Every node with its use, for the scheduler (inside its write). */
store_rc store_node_all_tx(store_tx *tx, void (*row)(void *arg, const store_node *n), void *arg);
store_rc store_node_heartbeat(store_tx *tx, int64_t id, int64_t now_ms);
store_rc store_node_set_drained(store_tx *tx, int64_t id, int drained);
/* What node id's agent gives jobs: "job" or "host" (migration 014). */
store_rc store_node_set_network(store_tx *tx, int64_t id, const char *network);
/* Withdraws trust in node id: its token is refused from now on, it is down
 * and drained, and its row stays, with reason (NULL: none said).
 * STORE_NOTFOUND when there is no such node or it is revoked already.  The
 * caller loses its workers. */
store_rc store_node_revoke(store_tx *tx, int64_t id, int64_t now_ms, const char *reason);
/* A rotation of node id's token is asked for: the next heartbeat hands
 * its agent a new one.  STORE_NOTFOUND when there is no such node or it is
 * revoked. */
store_rc store_node_token_ask(store_tx *tx, int64_t id);
/* hash is node id's next token, handed out at now_ms; an earlier one out
 * and not used is forgotten, kept in its history as given up (replaced 0).
 * STORE_NOTFOUND when revoked. */
store_rc store_node_token_next(store_tx *tx, int64_t id, const uint8_t hash[UTIL_SHA256_LEN],
                               int64_t now_ms);
/* The node whose next token hash is: its id, or STORE_NOTFOUND. */
store_rc store_node_by_next_token(store *s, const uint8_t hash[UTIL_SHA256_LEN], int64_t *id);
/* The live node that gave up token hash (migration 018): its id, when,
 * and whether a rotation replaced it (1) or a newer one was handed out
 * before its first use (0).  STORE_NOTFOUND for a token never given up. */
store_rc store_node_by_retired_token(store *s, const uint8_t hash[UTIL_SHA256_LEN], int64_t *id,
                                     int64_t *retired_at, int *replaced);
/* The first use of a next token: it becomes the node's token, issued at
 * now_ms, and the one before is refused from then on (and kept in the
 * history, replaced 1, to tell its later use; entries past 90 days go).  STORE_OK with the
 * node's id, or STORE_NOTFOUND (nothing changed). */
store_rc store_node_token_promote(store_tx *tx, const uint8_t hash[UTIL_SHA256_LEN],
                                  int64_t now_ms, int64_t *id);
/* Marks down every up node silent since before cutoff_ms; row() gets each. */
store_rc store_node_mark_down(store_tx *tx, int64_t cutoff_ms, void (*row)(void *arg, int64_t id),
                         void *arg);

store_rc store_worker_insert(store_tx *tx, store_worker *w);
/* The workers of one attempt of a job, in rank order. */
store_rc store_worker_list_tx(store_tx *tx, int64_t job_id, int64_t attempt,
                         void (*row)(void *arg, const store_worker *w), void *arg);
/* A page of a job's workers by attempt and rank: those of attempt (0: every
 * attempt) with an id above after, at most limit. */
store_rc store_worker_list(store *s, int64_t job_id, int64_t attempt, int64_t after, int limit,
                      void (*row)(void *arg, const store_worker *w), void *arg);
/* What should run on a node: workers it holds whose desired state is run. */
store_rc store_worker_desired(store *s, int64_t node_id,
                         void (*row)(void *arg, const store_worker *w), void *arg);
store_rc store_worker_get_tx(store_tx *tx, int64_t id, store_worker *out);
store_rc store_worker_get(store *s, int64_t id, store_worker *out);
/* Records what the agent reported; times are set when the state first
 * becomes running or final.  STORE_NOTFOUND when the worker is not on the node. */
/* A worker still starting (pulling its image): its message, and the reason
 * of its job while that is STARTING.  STORE_NOTFOUND when unchanged. */
store_rc store_worker_phase(store_tx *tx, int64_t id, int64_t node_id, const char *message);
/* The image digest a worker runs, recorded once, and on its job when the
 * job has none yet: the first one pins the job's image (store_job).
 * STORE_NOTFOUND when known already. */
store_rc store_worker_digest(store_tx *tx, int64_t id, int64_t node_id, const char *digest);
store_rc store_worker_report(store_tx *tx, int64_t id, int64_t node_id, const char *state,
                        int64_t exit_code, int64_t signal, const char *message, int64_t now_ms);
/* The usage a worker's cgroup counted (cpu_us, memory_peak: -1 when not
 * known), recorded once it has ended. */
store_rc store_worker_usage(store_tx *tx, int64_t id, int64_t node_id, int64_t cpu_us,
                       int64_t memory_peak);
/* Asks every worker of the attempt to stop. */
store_rc store_worker_stop_attempt(store_tx *tx, int64_t job_id, int64_t attempt);
/* Live workers of a node become lost with message why ("node down");
 * row() gets each job id. */
store_rc store_worker_lose_node(store_tx *tx, int64_t node_id, int64_t now_ms, const char *why,
                           void (*row)(void *arg, int64_t job_id), void *arg);

/* Workers that ran since since_ms (or still run), with their job's tenant
 * and size, for fair share: row() gets finished_at 0 while running. */
store_rc store_usage_tx(store_tx *tx, int64_t since_ms,
                   void (*row)(void *arg, int64_t tenant_id, int64_t cpus, int64_t gpus,
                               int64_t started_at, int64_t finished_at),
                   void *arg);

/* Live workers grouped by job and node: row() gets how many of the job's
 * workers hold that node. */
store_rc store_alloc_tx(store_tx *tx, void (*row)(void *arg, int64_t job_id, int64_t node_id,
                                             int64_t workers),
                   void *arg);

/* Reserves port on node for one rank of an attempt of a job (rank 0: the
 * job's MASTER_PORT); STORE_CONFLICT when taken. */
store_rc store_port_reserve(store_tx *tx, int64_t node_id, int64_t port, int64_t job_id,
                       int64_t attempt, int64_t rank);
/* The ports reserved for an attempt, by rank: row() gets each with the
 * address of its node. */
store_rc store_port_list(store *s, int64_t job_id, int64_t attempt,
                    void (*row)(void *arg, int64_t rank, const char *address, int64_t port),
                    void *arg);
/* Frees the ports of attempts none of whose workers is alive any more. */
store_rc store_port_release_idle(store_tx *tx);
/* 1 when a worker of that attempt is still assigned or running. */
int store_attempt_live(store *s, int64_t job_id, int64_t attempt);
/* 1 when a worker of any attempt of the job is still assigned or running. */
int store_job_live_tx(store_tx *tx, int64_t job_id);
/* The lowest port of lo..hi that no job holds on node into *port, -1 when
 * every one is held. */
store_rc store_port_lowest_free(store_tx *tx, int64_t node_id, int64_t lo, int64_t hi, int64_t *port);

store_rc store_quota_get(store *s, int64_t tenant_id, store_quota *out);
store_rc store_quota_put(store_tx *tx, const store_quota *q);
/* Every tenant's quota (tenants without one are not listed). */
store_rc store_quota_all_tx(store_tx *tx, void (*row)(void *arg, const store_quota *q), void *arg);

/* Sets the placement of the job's current attempt and draws its rendezvous
 * secret (store_job.rdzv_secret). */
store_rc store_job_place(store_tx *tx, int64_t job_id, int64_t master_node, int64_t port,
                    int64_t per_node);
/* Bumps the attempt of a job going back to PENDING. */
store_rc store_job_next_attempt(store_tx *tx, int64_t job_id);

#endif
