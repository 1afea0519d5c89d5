/*
 * sched: queue order, job shape and all-or-nothing gang placement.
 */
#include "scheduler/sched.h"

#include <math.h>
#include <stdlib.h>

double sched_decayed_use(int64_t cpus, int64_t gpus, int64_t start, int64_t end, int64_t now)
{
    if (end <= start || end > now)
        end = end > now ? now : end;
    if (end <= start)
        return 0;
    double w = (double)cpus + SCHED_GPU_WEIGHT * (double)gpus;
    double h = SCHED_HALF_LIFE_MS / 1000.0, k = log(2.0) / h;
    double a = (double)(now - end) / 1000.0, b = (double)(now - start) / 1000.0;
    /* integral over ages a..b of 2^(-age/h) */
    return w * (exp(-k * a) - exp(-k * b)) / k;
}

static int job_cmp(const void *a, const void *b)
{
    const sched_job *x = a, *y = b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    if (x->usage != y->usage)
        return x->usage < y->usage ? -1 : 1;
    if (x->created_at != y->created_at)
        return x->created_at < y->created_at ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

void sched_order(sched_job *jobs, int n)
{
    if (n > 1)
        qsort(jobs, (size_t)n, sizeof *jobs, job_cmp);
}

int64_t sched_fit(int64_t cpus, int64_t mem, int64_t gpus, const sched_job *j)
{
    if (cpus < 0 || mem < 0 || gpus < 0)
        return 0;
    int64_t k = cpus / j->cpus;
    if (mem / j->mem < k)
        k = mem / j->mem;
    if (j->gpus > 0 && gpus / j->gpus < k)
        k = gpus / j->gpus;
    return k;
}

/* Usable nodes that could hold w workers of j when empty. */
static int64_t nodes_holding(const sched_node *nodes, int n, const sched_job *j, int64_t w)
{
    int64_t c = 0;
    for (int i = 0; i < n; i++)
        if (nodes[i].usable && sched_fit(nodes[i].cap_cpus, nodes[i].cap_mem, nodes[i].cap_gpus, j) >= w)
            c++;
    return c;
}

int64_t sched_shape(const sched_node *nodes, int n, const sched_job *j)
{
    if (j->workers <= 0 || j->cpus <= 0 || j->mem <= 0)
        return 0;
    if (j->per_node > 0) {
        if (j->workers % j->per_node)
            return 0;
        return nodes_holding(nodes, n, j, j->per_node) >= j->workers / j->per_node ? j->per_node
                                                                                   : 0;
    }
    int64_t most = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = nodes[i].usable
                        ? sched_fit(nodes[i].cap_cpus, nodes[i].cap_mem, nodes[i].cap_gpus, j)
                        : 0;
        if (k > most)
            most = k;
    }
    if (most > j->workers)
        most = j->workers;
    for (int64_t w = most; w >= 1; w--)
        if (j->workers % w == 0 && nodes_holding(nodes, n, j, w) >= j->workers / w)
            return w;
    return 0;
}

int sched_place(sched_node *nodes, int n, const sched_job *j, int64_t per_node, int *node_idx)
{
    if (per_node <= 0 || j->workers % per_node)
        return -1;
    int64_t want = j->workers / per_node;
    int64_t got = 0;
    /* Best fit: repeatedly take the fitting node with the least room left. */
    char *taken = calloc((size_t)n, 1);
    if (!taken)
        return -1;
    while (got < want) {
        int best = -1;
        int64_t best_k = 0;
        for (int i = 0; i < n; i++) {
            if (taken[i] || !nodes[i].usable)
                continue;
            int64_t k = sched_fit(nodes[i].free_cpus, nodes[i].free_mem, nodes[i].free_gpus, j);
            if (k >= per_node && (best < 0 || k < best_k)) {
                best = i;
                best_k = k;
            }
        }
        if (best < 0)
            break;
        taken[best] = 1;
        node_idx[got++] = best;
    }
    free(taken);
    if (got < want)
        return -1;
    for (int64_t i = 0; i < want; i++) {
        sched_node *nd = &nodes[node_idx[i]];
        nd->free_cpus -= per_node * j->cpus;
        nd->free_mem -= per_node * j->mem;
        nd->free_gpus -= per_node * j->gpus;
    }
    return 0;
}
