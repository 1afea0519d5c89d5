/*
 * comm_hier: a world over several nodes with several ranks on some, as a
 * backend (comm_impl.h).  Within a node the ranks go through shared memory
 * (comm_shm.c); between nodes only one leader per node (its local rank 0)
 * speaks, over a Gloo context of the leaders alone:
 *   allreduce  the node's sum in shared memory, the leaders' allreduce of
 *              those sums over Gloo, everyone reads the total back;
 *   broadcast  within the root's node to its leader, between leaders from
 *              that one, within every node from its leader;
 *   barrier    within each node, between leaders, within each node.
 * A leader whose Gloo step fails marks its node's memory broken, so its
 * members fail at once rather than at the timeout; the roll call then
 * names who was lost, as for the other backends.
 */
#include <stdio.h>
#include <stdlib.h>

#include "worker/comm_impl.h"
#include "lib/fmt.h"

struct hier {
    comm_shm *local;
    void *leaders;      /* the leaders' Gloo state: on leaders only */
    int node, nnodes, world;
    int nlocal;         /* ranks per node */
    char err[768];      /* why the last operation failed */
};

int comm_hier_open(comm_shm *local, void *leaders, int node, int nnodes, int world,
                   void **out, char *err, size_t errlen)
{
    struct hier *h = calloc(1, sizeof *h);
    if (!h) {
        fmt_cut(err, errlen, "out of memory");
        return -1;
    }
    h->local = local;
    h->leaders = leaders;
    h->node = node;
    h->nnodes = nnodes;
    h->world = world;
    h->nlocal = world / nnodes;
    *out = h;
    return 0;
}

float *comm_hier_buffer(void *b, size_t count)
{
    struct hier *h = b;
    return comm_shm_buffer(h->local, count);
}

/* A step within the node: rc, its why kept on h when it failed. */
static int within(struct hier *h, int rc)
{
    if (rc < 0)
        fmt_cut(h->err, sizeof h->err, "%s", comm_shm_errmsg(h->local));
    return rc;
}

/* A leader's step between nodes: rc; a failure breaks its node's memory
 * too, and its why is kept on h. */
static int between(struct hier *h, int rc)
{
    if (rc < 0) {
        comm_shm_abort(h->local);
        fmt_cut(h->err, sizeof h->err, "between nodes: %s",
                comm_gloo_ops.errmsg(h->leaders));
    }
    return rc;
}

/* The leaders' sum of the node sums, in place in shared memory. */
static int leaders_sum(void *arg, float *sum, size_t m)
{
    struct hier *h = arg;
    return between(h, comm_gloo_ops.allreduce(h->leaders, sum, m, 0));
}

static int hier_allreduce(void *b, float *buf, size_t count, int average)
{
    struct hier *h = b;
    h->err[0] = '\0';
    int rc = comm_shm_reduce_apply(h->local, buf, count, leaders_sum, h,
                                   average ? 1.0f / (float)h->world : 1.0f);
    if (rc < 0 && !h->err[0]) /* not the leaders' step: within the node */
        within(h, rc);
    return rc;
}

static int hier_broadcast(void *b, void *buf, size_t bytes, int root)
{
    struct hier *h = b;
    int root_node = root / h->nlocal, root_local = root % h->nlocal;
    if (h->node == root_node && root_local != 0 &&
        within(h, comm_shm_broadcast(h->local, buf, bytes, root_local)) < 0)
        return -1;
    if (h->leaders &&
        between(h, comm_gloo_ops.broadcast(h->leaders, buf, bytes, root_node)) < 0)
        return -1;
    return within(h, comm_shm_broadcast(h->local, buf, bytes, 0));
}

static int hier_barrier(void *b)
{
    struct hier *h = b;
    if (within(h, comm_shm_barrier(h->local)) < 0)
        return -1;
    if (h->leaders && between(h, comm_gloo_ops.barrier(h->leaders)) < 0)
        return -1;
    return within(h, comm_shm_barrier(h->local));
}

static const char *hier_errmsg(const void *b)
{
    return ((const struct hier *)b)->err;
}

static void hier_destroy(void *b)
{
    struct hier *h = b;
    if (!h)
        return;
    if (h->leaders)
        comm_gloo_ops.destroy(h->leaders);
    comm_shm_close(h->local);
    free(h);
}

const struct comm_backend_ops comm_hier_ops = {hier_allreduce, hier_broadcast, hier_barrier,
                                               hier_errmsg, hier_destroy};
