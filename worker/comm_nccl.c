/*
 * comm_nccl.c: the NCCL backend (built only where CUDA and NCCL are found;
 * see worker/CMakeLists.txt).  It owns one NCCL communicator and one CUDA
 * stream on the device LOCAL_RANK picks.  The unique id travels through the
 * rendezvous store.  The communicator is non-blocking, so that every wait
 * can be bounded: a collective that does not finish within the timeout, or
 * that reports an error, aborts the communicator and fails.
 * Buffers given to it are device memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "lib/clock.h"
#include "lib/fmt.h"
#include "worker/comm_impl.h"

#define ID_KEY "cohort/nccl/unique-id"

struct nccl_state {
    ncclComm_t comm;
    cudaStream_t stream;
    float *scratch;      /* one float on the device, for barrier */
    int timeout_ms;
    int aborted;
    char err[512]; /* why the last operation failed */
};

static double now_ms(void)
{
    return (double)util_mono_us() / 1e3;
}

/* Polls until the communicator is no longer in progress (and, when
 * stream_too, the stream has drained).  Aborts it on error or timeout. */
static int settle(struct nccl_state *s, int stream_too, const char *what)
{
    double end = now_ms() + s->timeout_ms;
    for (;;) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t rc = ncclCommGetAsyncError(s->comm, &async);
        if (rc != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
            fmt_cut(s->err, sizeof s->err, "%s: %s", what,
                     ncclGetErrorString(rc != ncclSuccess ? rc : async));
            break;
        }
        if (async == ncclSuccess) {
            cudaError_t ce = stream_too ? cudaStreamQuery(s->stream) : cudaSuccess;
            if (ce == cudaSuccess)
                return 0;
            if (ce != cudaErrorNotReady) {
                fmt_cut(s->err, sizeof s->err, "%s: CUDA: %s", what, cudaGetErrorString(ce));
                break;
            }
        }
        if (now_ms() > end) {
            fmt_cut(s->err, sizeof s->err, "%s did not complete within %d ms", what, s->timeout_ms);
            break;
        }
        usleep(50);
    }
    ncclCommAbort(s->comm);
    s->aborted = 1;
    return -1;
}

static int nccl_allreduce(void *b, float *buf, size_t count, int average)
{
    struct nccl_state *s = b;
    ncclResult_t rc;
    if (s->aborted) {
        fmt_cut(s->err, sizeof s->err, "the NCCL communicator was aborted earlier");
        return -1;
    }
    rc = ncclAllReduce(buf, buf, count, ncclFloat32, average ? ncclAvg : ncclSum, s->comm,
                       s->stream);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        fmt_cut(s->err, sizeof s->err, "ncclAllReduce: %s", ncclGetErrorString(rc));
        return -1;
    }
    return settle(s, 1, "allreduce");
}

static int nccl_broadcast(void *b, void *buf, size_t bytes, int root)
{
    struct nccl_state *s = b;
    ncclResult_t rc;
    if (s->aborted) {
        fmt_cut(s->err, sizeof s->err, "the NCCL communicator was aborted earlier");
        return -1;
    }
    rc = ncclBroadcast(buf, buf, bytes, ncclUint8, root, s->comm, s->stream);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        fmt_cut(s->err, sizeof s->err, "ncclBroadcast: %s", ncclGetErrorString(rc));
        return -1;
    }
    return settle(s, 1, "broadcast");
}

static int nccl_barrier(void *b)
{
    struct nccl_state *s = b;
    return nccl_allreduce(b, s->scratch, 1, 0);
}

static const char *nccl_errmsg(const void *b)
{
    return ((const struct nccl_state *)b)->err;
}

static void nccl_destroy(void *b)
{
    struct nccl_state *s = b;
    if (!s)
        return;
    if (s->comm && !s->aborted)
        ncclCommDestroy(s->comm);
    if (s->scratch)
        cudaFree(s->scratch);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    free(s);
}

const struct comm_backend_ops comm_nccl_ops = {
    nccl_allreduce, nccl_broadcast, nccl_barrier, nccl_errmsg, nccl_destroy,
};

int comm_nccl_open(int rank, int size, int local_rank, comm_store *store, int timeout_ms,
                   void **out, char *err, size_t errlen)
{
    struct nccl_state *s = calloc(1, sizeof *s);
    ncclUniqueId id;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclResult_t rc;
    cudaError_t ce;
    int ndev = 0;
    void *v = NULL;
    size_t vlen = 0;

    if (!s) {
        fmt_cut(err, errlen, "out of memory");
        return -1;
    }
    s->timeout_ms = timeout_ms;
    ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        fmt_cut(err, errlen, "no CUDA device: %s",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
        goto fail;
    }
    if ((ce = cudaSetDevice(local_rank % ndev)) != cudaSuccess ||
        (ce = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (ce = cudaMalloc((void **)&s->scratch, sizeof(float))) != cudaSuccess) {
        fmt_cut(err, errlen, "CUDA device %d: %s", local_rank % ndev, cudaGetErrorString(ce));
        goto fail;
    }
    if (rank == 0) {
        if ((rc = ncclGetUniqueId(&id)) != ncclSuccess) {
            fmt_cut(err, errlen, "ncclGetUniqueId: %s", ncclGetErrorString(rc));
            goto fail;
        }
        if (comm_store_set(store, ID_KEY, &id, sizeof id) < 0) {
            fmt_cut(err, errlen, "%s", comm_store_errmsg(store));
            goto fail;
        }
    } else {
        if (comm_store_get(store, ID_KEY, timeout_ms, &v, &vlen) < 0) {
            fmt_cut(err, errlen, "%s", comm_store_errmsg(store));
            goto fail;
        }
        if (vlen != sizeof id) {
            fmt_cut(err, errlen, "the NCCL id in the store has %zu bytes, not %zu", vlen,
                     sizeof id);
            free(v);
            goto fail;
        }
        memcpy(&id, v, sizeof id);
        free(v);
    }
    config.blocking = 0;
    rc = ncclCommInitRankConfig(&s->comm, size, id, rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        fmt_cut(err, errlen, "ncclCommInitRankConfig: %s", ncclGetErrorString(rc));
        goto fail;
    }
    if (settle(s, 0, "ncclCommInitRank") < 0) {
        fmt_cut(err, errlen, "%s", s->err); /* no handle to keep it on */
        goto fail;
    }
    *out = s;
    return 0;
fail:
    nccl_destroy(s);
    return -1;
}
