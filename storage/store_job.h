/*
 * store_job: jobs and their event history.  Every state change of a job is
 * written together with an event row in the same transaction.
 */
#ifndef COHORT_STORE_JOB_H
#define COHORT_STORE_JOB_H

#include <stdint.h>

#include "storage/store.h"
#include "storage/store_catalog.h"
#include "storage/store_volume.h"
#include "lib/util.h"

/* A job's state.  The database and the API spell it by name
 * (store_job_state_name); the code compares the enum. */
typedef enum job_state {
    JOB_PENDING,
    JOB_STARTING,
    JOB_RUNNING,
    JOB_SUCCEEDED,
    JOB_FAILED,
    JOB_CANCELLED,
    JOB_NSTATES
} job_state;

/* "PENDING" ... "CANCELLED"; "" for a value that is no state. */
const char *store_job_state_name(job_state s);
/* The state called name, or -1 when name calls none. */
int store_job_state_of(const char *name);
/* 1 when s is one a job never leaves. */
int store_job_state_final(job_state s);

#define STORE_JOB_NAME_MAX 200
#define STORE_REASON_MAX 512
#define STORE_IDEM_MAX 255
#define STORE_RDZV_SECRET_BYTES 32 /* an attempt's rendezvous secret: 256 random bits */

typedef struct store_job {
    int64_t id;
    int64_t tenant_id;
    int64_t user_id;
    char tenant[UTIL_NAME_MAX + 1]; /* filled on reads */
    char user[UTIL_NAME_MAX + 1];   /* filled on reads */
    char name[STORE_JOB_NAME_MAX + 1];
    char image[UTIL_NAME_MAX + 1];
    char framework[16];
    char workspace[UTIL_NAME_MAX + 1];
    char code_path[UTIL_PATH_MAX + 1];
    char *datasets_json; /* owned: a JSON array of names */
    char *args_json;     /* owned: a JSON array of strings */
    char *env_json;      /* owned: a JSON object of strings */
    int64_t epochs;
    double lr;
    int64_t batch_size;
    char worker_spec[UTIL_NAME_MAX + 1];
    int64_t cpus, memory_mb, gpus;
    int64_t worker_count;
    int64_t workers_per_node;    /* 0: fill nodes */
    int64_t priority;
    int64_t max_runtime_seconds; /* 0: none */
    int64_t max_retries;
    char currency[4];
    int64_t price_per_hour;
    int64_t estimated_max;       /* -1: unbounded (no max_runtime_seconds) */
    job_state state;
    char reason[STORE_REASON_MAX + 1];
    int64_t attempt;
    char idem_key[STORE_IDEM_MAX + 1]; /* "" when none */
    uint8_t request_hash[UTIL_SHA256_LEN];
    int64_t created_at, updated_at, started_at, finished_at; /* 0: not yet */
    /* Placement of the current attempt (0: not placed). */
    int64_t master_node_id, master_port, placed_per_node;
    char image_digest[80]; /* what its image resolved to at its first rank's start, which
                            * every later rank and attempt runs; "" before */
    char rdzv_secret[2 * STORE_RDZV_SECRET_BYTES + 1]; /* the placed attempt's; "" */
} store_job;

typedef struct store_event {
    int64_t id;
    int64_t at;
    int64_t attempt;
    char from_state[16]; /* "" for the submit event */
    char to_state[16];
    char reason[STORE_REASON_MAX + 1];
} store_event;

typedef struct store_job_filter {
    int64_t tenant_id;   /* 0: every tenant (platform admin) */
    const char *state;   /* NULL: any */
    const char *name;    /* NULL: any; else exact name */
    int64_t before;      /* cursor: ids below this; 0: from the newest */
    int limit;
} store_job_filter;

/* Frees what a store_job owns (not the struct itself). */
void store_job_clear(store_job *j);

/* Inserts j (state PENDING) and its submit event; sets j->id and times. */
store_rc store_job_insert(store_tx *tx, store_job *j);
/* store_job_insert for the n jobs of js, in fewer statements (up to 16
 * rows each); on any failure returns its code, and the caller undoes
 * the write (the ids set on the jobs before it then name nothing). */
store_rc store_job_insert_many(store_tx *tx, store_job *const *js, int n);

/*
 * What a submit names, read at once: the image of that name the tenant may
 * use (its own first), the worker spec and the tenant's workspace.  *found
 * gets STORE_REF_* of those that exist, each filled; STORE_OK or an error.
 */
enum { STORE_REF_IMAGE = 1, STORE_REF_SPEC = 2, STORE_REF_WORKSPACE = 4 };
store_rc store_job_refs(store *s, int64_t tenant_id, const char *image, const char *spec,
                   const char *workspace, store_image *im, store_spec *sp, store_volume *ws,
                   int *found);
/* Inside a write: the tenant's job submitted with this idempotency key. */
store_rc store_job_by_idem_tx(store_tx *tx, int64_t tenant_id, const char *key, store_job *out);
/* The job id of tenant_id (0: any tenant); the caller clears out. */
store_rc store_job_get(store *s, int64_t tenant_id, int64_t id, store_job *out);
store_rc store_job_get_tx(store_tx *tx, int64_t tenant_id, int64_t id, store_job *out);
/* Jobs newest first; row() borrows the job for the call only. */
store_rc store_job_list(store *s, const store_job_filter *f,
                   void (*row)(void *arg, const store_job *j), void *arg);
/* Moves a job from state from to state to with an event; sets
 * started/finished times as the state implies.  STORE_NOTFOUND when the job
 * is absent or not in state from. */
store_rc store_job_transition(store_tx *tx, int64_t id, job_state from, job_state to,
                         const char *reason);
/* An event that changes no state (from and to are the job's state now):
 * something the job's owner should know, such as its log being cut. */
store_rc store_job_note(store_tx *tx, int64_t job_id, int64_t attempt, const char *reason);
/* Deletes a job and its events. */
/* The tenant's PENDING jobs into *n, counted up to limit at most. */
store_rc store_job_count_pending(store *s, int64_t tenant_id, int64_t limit, int64_t *n);
/* Sets the priority of job id unless it has ended (STORE_NOTFOUND then). */
store_rc store_job_set_priority(store_tx *tx, int64_t id, int64_t priority, int64_t now_ms);
store_rc store_job_delete(store_tx *tx, int64_t id);
store_rc store_job_events(store *s, int64_t job_id, int64_t after, int limit,
                     void (*row)(void *arg, const store_event *e), void *arg);

/* What the scheduler needs of a job. */
typedef struct store_job_brief {
    int64_t id, tenant_id, priority, created_at, attempt;
    int64_t worker_count, workers_per_node, cpus, memory_mb, gpus;
    int64_t max_runtime_seconds, started_at;
    /* The price it will be (or was) admitted at: the worker spec's now until
     * its first admission, then the snapshot taken then. */
    int64_t price_per_hour, admitted_at;
    char currency[4];
    job_state state;
    char reason[STORE_REASON_MAX + 1];
} store_job_brief;

/* Takes the price snapshot at a job's first admission (later ones keep it). */
store_rc store_job_admit(store_tx *tx, int64_t job_id, int64_t price_per_hour,
                    int64_t estimated_max, int64_t now_ms);

/* Jobs in state (submit order); row() may not write. */
store_rc store_job_briefs_tx(store_tx *tx, job_state state,
                        void (*row)(void *arg, const store_job_brief *b), void *arg);

typedef struct store_metric {
    int64_t id, attempt, rank, at;
    const char *data; /* JSON object text, valid during the callback */
} store_metric;

/* Takes room for n metric rows of job_id within max in all (migration 017):
 * *granted says how many fit (0 once the job has max). */
store_rc store_metric_reserve(store_tx *tx, int64_t job_id, int64_t n, int64_t max, int64_t *granted);
store_rc store_metric_insert(store_tx *tx, int64_t job_id, int64_t attempt, int64_t rank,
                        int64_t at, const char *json);
/* Metrics of a job with id > after, oldest first. */
store_rc store_metric_list(store *s, int64_t job_id, int64_t after, int limit,
                      void (*row)(void *arg, const store_metric *m), void *arg);


#endif
