/*
 * sched: gang placement as pure functions over a snapshot of the cluster.
 * Nothing here touches the store or a clock, so it is tested and
 * benchmarked on synthetic clusters (see sched_service.h for the thread
 * that feeds it and writes its decisions).
 */
#ifndef COHORT_SCHED_H
#define COHORT_SCHED_H

#include <stdint.h>

typedef struct sched_node {
    int64_t id;
    int usable;                         /* up and not drained */
    int64_t cap_cpus, cap_mem, cap_gpus; /* what the node has */
    int64_t free_cpus, free_mem, free_gpus;
    int net;                            /* its agent's network kind: a gang over several
                                         * nodes takes nodes of one kind only */
} sched_node;

typedef struct sched_job {
    int64_t id;
    int64_t tenant_id;
    int64_t priority;    /* within its tenant; above SCHED_PRIORITY_MAX a tier */
    double usage;        /* the tenant's decayed past usage: less goes first */
    int64_t created_at;
    int64_t workers;     /* worker_count */
    int64_t per_node;    /* workers_per_node, 0: fill nodes */
    int64_t cpus, mem, gpus; /* per worker */
    int64_t tenant_first; /* the tenant's oldest pending job's created_at (plan) */
} sched_job;

/*
 * Fair share: a tenant's past use, decayed by half every SCHED_HALF_LIFE_MS.
 * A worker running from start to end (ms) with cpus and gpus adds, at now,
 * its resource-seconds (cpus + SCHED_GPU_WEIGHT x gpus per second) weighted
 * by 2^-(age of each second / half-life), integrated exactly.
 */
#define SCHED_HALF_LIFE_MS (3600 * 1000)
#define SCHED_GPU_WEIGHT 16
double sched_decayed_use(int64_t cpus, int64_t gpus, int64_t start, int64_t end, int64_t now);

/*
 * Priority orders a tenant's own jobs; between tenants fair share decides.
 * A priority above SCHED_PRIORITY_MAX is a tier, which only a platform admin
 * sets: a higher tier goes first whatever the tenant.
 */
#define SCHED_PRIORITY_MAX 1000
#define SCHED_TIER_MAX 1000000

/* Orders jobs for the queue: tier (high first), then the tenant's usage
 * (low first), then the tenant that has waited longest (tenant_first), then
 * within a tenant priority (high first), submit time and id. */
void sched_order(sched_job *jobs, int n);

/* Workers of j that fit on a node with these resources. */
int64_t sched_fit(int64_t cpus, int64_t mem, int64_t gpus, const sched_job *j);

/*
 * The shape of j on this cluster: workers per node, so that every node of
 * the gang holds the same number (ranks are node-major).  With per_node set
 * it is that, when enough usable nodes could ever hold it; otherwise the
 * largest divisor of workers that enough usable nodes could hold when empty.
 * 0 when the job can never fit.
 */
int64_t sched_shape(const sched_node *nodes, int n, const sched_job *j);

/*
 * Places every worker of j now, per_node on each of workers/per_node nodes,
 * or none: fills node_idx[] with indexes into nodes (node-major order, the
 * node of rank 0 first), takes their resources, and returns 0; -1 when the
 * gang does not fit now (nothing is taken).  Prefers the nodes with the
 * fewest free CPUs that hold the gang's share, so large holes stay for large
 * jobs, and keeps GPU nodes for GPU work while other nodes have room.
 */
int sched_place(sched_node *nodes, int n, const sched_job *j, int64_t per_node, int *node_idx);

/*
 * The same decisions on a large cluster, fast: a sched_cluster indexes the
 * nodes by free capacity (buckets of free CPUs, GPU nodes apart) and by
 * capacity class, so shaping and placing a job cost no more with 10,000
 * nodes than with 1,000.  It works on the caller's nodes array, which it
 * updates as sched_place does; it must be rebuilt when the array changes
 * otherwise.
 */
typedef struct sched_cluster sched_cluster;

sched_cluster *sched_cluster_new(sched_node *nodes, int n);
void sched_cluster_free(sched_cluster *c);
int64_t sched_cluster_shape(const sched_cluster *c, const sched_job *j);
int sched_cluster_place(sched_cluster *c, const sched_job *j, int64_t per_node, int *node_idx);

#endif
