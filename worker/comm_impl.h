/*
 * comm_impl: what comm.c needs of a backend (internal to worker/).  A
 * backend is an opaque state and four operations; errors are -1 with a
 * message written into err.
 */
#ifndef COHORT_COMM_IMPL_H
#define COHORT_COMM_IMPL_H

#include <stddef.h>

#include "worker/comm_store.h"

struct comm_backend_ops {
    int (*allreduce)(void *b, float *buf, size_t count, int average, char *err, size_t errlen);
    int (*broadcast)(void *b, void *buf, size_t bytes, int root, char *err, size_t errlen);
    int (*barrier)(void *b, char *err, size_t errlen);
    void (*destroy)(void *b);
};

/* Gloo over TCP; local_addr is the address the other ranks reach this one
 * at.  The store is used only during the call. */
int comm_gloo_open(int rank, int size, comm_store *store, const char *local_addr,
                   int timeout_ms, void **out, char *err, size_t errlen);
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
int comm_shm_allreduce(comm_shm *s, float *buf, size_t count, float scale, char *err,
                       size_t errlen);
int comm_shm_broadcast(comm_shm *s, void *buf, size_t bytes, int root, char *err, size_t errlen);
int comm_shm_barrier(comm_shm *s, char *err, size_t errlen);
void comm_shm_close(comm_shm *s);
/* comm_shm as a backend, for a world whose ranks are all on one node. */
extern const struct comm_backend_ops comm_shm_ops;

#endif
