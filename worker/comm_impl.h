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

#endif
