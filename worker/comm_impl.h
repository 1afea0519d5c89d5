/*
 * comm_impl: what comm.c needs of a backend (internal to worker/).  A
 * backend is an opaque state and its operations; an operation that fails
 * returns -1 and keeps why on the state (errmsg), as comm keeps its own.
 * Opening, when there is no state yet, writes why into err.
 */
#ifndef COHORT_COMM_IMPL_H
#define COHORT_COMM_IMPL_H

#include <stddef.h>

#include "worker/comm_store.h"

struct comm_backend_ops {
    int (*allreduce)(void *b, float *buf, size_t count, int average);
    int (*broadcast)(void *b, void *buf, size_t bytes, int root);
    int (*barrier)(void *b);
    const char *(*errmsg)(const void *b); /* why the last operation failed */
    void (*destroy)(void *b);
};

/* Gloo over TCP; local_addr is the address the other ranks reach this one
 * at; prefix (or NULL) scopes the store's keys, for a context of some of
 * the ranks.  The store is used only during the call. */
int comm_gloo_open(int rank, int size, comm_store *store, const char *prefix,
                   const char *local_addr, int timeout_ms, void **out, char *err,
                   size_t errlen);
extern const struct comm_backend_ops comm_gloo_ops;

/* NCCL; present only in builds with CUDA (COHORT_HAVE_NCCL). */
int comm_nccl_open(int rank, int size, int local_rank, comm_store *store,
                   int timeout_ms, void **out, char *err, size_t errlen);
extern const struct comm_backend_ops comm_nccl_ops;

/*
 * The ranks of one node through shared memory (comm_shm.c): members 0..n-1
 * (index), member 0 serving the segment under the store key key.  Open is
 * collective among the members.  allreduce sums over the members in member
 * order and multiplies by scale (1: the sum); broadcast copies root's buf.
 */
typedef struct comm_shm comm_shm;
int comm_shm_open(int index, int n, comm_store *store, const char *key, size_t slot_bytes,
                  int timeout_ms, comm_shm **out, char *err, size_t errlen);
/* This member's own slot as the caller's buffer of count floats (once), or
 * NULL when it does not fit: comm_shm_allreduce of it copies nothing. */
float *comm_shm_buffer(comm_shm *s, size_t count);
/* These return 0, or -1 with why in comm_shm_errmsg(s). */
int comm_shm_allreduce(comm_shm *s, float *buf, size_t count, float scale);
int comm_shm_broadcast(comm_shm *s, void *buf, size_t bytes, int root);
/* What member 0 does with the node's sum (m floats, in shared memory)
 * before the others read it back: 0, or -1 (why kept by arg's owner). */
typedef int comm_shm_leader_fn(void *arg, float *sum, size_t m);
/* The node's sum of buf, handed to fn on member 0, then read back by every
 * member into buf, times scale (the hierarchical allreduce's steps 1 and 3). */
int comm_shm_reduce_apply(comm_shm *s, float *buf, size_t count, comm_shm_leader_fn *fn,
                          void *arg, float scale);
/* Marks the segment broken: every member's wait fails at once. */
void comm_shm_abort(comm_shm *s);
int comm_shm_barrier(comm_shm *s);
const char *comm_shm_errmsg(const comm_shm *s);
void comm_shm_close(comm_shm *s);
/* comm_shm as a backend, for a world whose ranks are all on one node. */
extern const struct comm_backend_ops comm_shm_ops;

/*
 * Several nodes of several ranks each (comm_hier.c): shared memory within a
 * node, Gloo between one leader per node.  local: this node's members
 * (local rank = member index); leaders: the leaders' Gloo context (on
 * leaders only, else NULL).  Takes both over.
 */
int comm_hier_open(comm_shm *local, void *leaders, int node, int nnodes, int world,
                   void **out, char *err, size_t errlen);
extern const struct comm_backend_ops comm_hier_ops;
/* comm_shm_buffer of a comm_hier state's node memory. */
float *comm_hier_buffer(void *b, size_t count);

#endif
