/*
 * sched: queue order, job shape and all-or-nothing gang placement.
 */
#include "scheduler/sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

static int64_t tier(const sched_job *j)
{
    return j->priority > SCHED_PRIORITY_MAX ? j->priority : 0;
}

static int job_cmp(const void *a, const void *b)
{
    const sched_job *x = a, *y = b;
    if (tier(x) != tier(y))
        return tier(x) > tier(y) ? -1 : 1;
    if (x->tenant_id != y->tenant_id) {
        if (x->usage != y->usage)
            return x->usage < y->usage ? -1 : 1;
        if (x->tenant_first != y->tenant_first)
            return x->tenant_first < y->tenant_first ? -1 : 1;
        return x->tenant_id < y->tenant_id ? -1 : 1;
    }
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
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

/* ---- capacity classes: the shape of a job ---- */

struct klass {
    int64_t cpus, mem, gpus;
    int64_t count; /* usable nodes of this capacity */
};

/* ---- free capacity: nodes without GPUs by free CPUs, GPU nodes by free GPUs ---- */

struct bucketset {
    int64_t nb;        /* buckets 0..nb-1, by free CPUs (the last holds all above) */
    int *head;         /* first node of each bucket, -1 when empty */
    uint64_t *bits;    /* non-empty buckets */
};

struct sched_cluster {
    sched_node *nodes;
    int n;
    struct klass *k;
    int nk;
    struct bucketset set[2]; /* [0]: nodes without GPUs, [1]: nodes with GPUs */
    int *next, *prev, *bucket, *which; /* per node: list links, its bucket and set */
    char *taken;
    int mixed; /* nodes of more than one network kind */
};

static void set_bit(uint64_t *b, int64_t i, int on)
{
    if (on)
        b[i / 64] |= 1ull << (i % 64);
    else
        b[i / 64] &= ~(1ull << (i % 64));
}

/* The first non-empty bucket at or above from, or -1. */
static int64_t next_bucket(const struct bucketset *bs, int64_t from)
{
    if (from >= bs->nb)
        from = bs->nb - 1;
    int64_t w = from / 64;
    uint64_t word = bs->bits[w] & (~0ull << (from % 64));
    for (;;) {
        if (word)
            return w * 64 + __builtin_ctzll(word);
        if (++w >= (bs->nb + 63) / 64)
            return -1;
        word = bs->bits[w];
    }
}

static int64_t bucket_of(const struct bucketset *bs, int64_t free)
{
    if (free < 0)
        return 0;
    return free < bs->nb ? free : bs->nb - 1;
}

/* What a node is filed by in its set: free CPUs, or free GPUs for GPU nodes. */
static int64_t key_of(const sched_cluster *c, int i)
{
    return c->which[i] ? c->nodes[i].free_gpus : c->nodes[i].free_cpus;
}

static void unlink_node(sched_cluster *c, int i)
{
    struct bucketset *bs = &c->set[c->which[i]];
    int64_t b = c->bucket[i];
    if (c->prev[i] >= 0)
        c->next[c->prev[i]] = c->next[i];
    else
        bs->head[b] = c->next[i];
    if (c->next[i] >= 0)
        c->prev[c->next[i]] = c->prev[i];
    if (bs->head[b] < 0)
        set_bit(bs->bits, b, 0);
}

static void link_node(sched_cluster *c, int i)
{
    struct bucketset *bs = &c->set[c->which[i]];
    int64_t b = bucket_of(bs, key_of(c, i));
    c->bucket[i] = (int)b;
    c->prev[i] = -1;
    c->next[i] = bs->head[b];
    if (bs->head[b] >= 0)
        c->prev[bs->head[b]] = i;
    bs->head[b] = i;
    set_bit(bs->bits, b, 1);
}

void sched_cluster_free(sched_cluster *c)
{
    if (!c)
        return;
    for (int s = 0; s < 2; s++) {
        free(c->set[s].head);
        free(c->set[s].bits);
    }
    free(c->k);
    free(c->next);
    free(c->prev);
    free(c->bucket);
    free(c->which);
    free(c->taken);
    free(c);
}

sched_cluster *sched_cluster_new(sched_node *nodes, int n)
{
    sched_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->nodes = nodes;
    c->n = n;
    size_t sz = (size_t)(n > 0 ? n : 1);
    c->next = malloc(sz * sizeof(int));
    c->prev = malloc(sz * sizeof(int));
    c->bucket = malloc(sz * sizeof(int));
    c->which = malloc(sz * sizeof(int));
    c->taken = calloc(sz, 1);
    c->k = malloc(sz * sizeof *c->k);
    int64_t most[2] = {1, 1};
    for (int i = 0; i < n; i++) {
        if (nodes[i].net != nodes[0].net)
            c->mixed = 1;
        if (nodes[i].cap_cpus > most[0])
            most[0] = nodes[i].cap_cpus;
        if (nodes[i].cap_gpus > most[1])
            most[1] = nodes[i].cap_gpus;
    }
    for (int s = 0; s < 2; s++) {
        c->set[s].nb = most[s] + 1;
        c->set[s].head = malloc((size_t)(most[s] + 1) * sizeof(int));
        c->set[s].bits = calloc((size_t)(most[s] + 64) / 64, sizeof(uint64_t));
        if (c->set[s].head)
            memset(c->set[s].head, 0xff, (size_t)(most[s] + 1) * sizeof(int));
    }
    if (!c->next || !c->prev || !c->bucket || !c->which || !c->taken || !c->k ||
        !c->set[0].head || !c->set[1].head || !c->set[0].bits || !c->set[1].bits) {
        sched_cluster_free(c);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!nodes[i].usable)
            continue;
        c->which[i] = nodes[i].cap_gpus > 0;
        link_node(c, i);
        /* Capacity classes: few in real clusters, so a linear look-up. */
        int k = 0;
        while (k < c->nk && !(c->k[k].cpus == nodes[i].cap_cpus &&
                              c->k[k].mem == nodes[i].cap_mem && c->k[k].gpus == nodes[i].cap_gpus))
            k++;
        if (k == c->nk)
            c->k[c->nk++] = (struct klass){nodes[i].cap_cpus, nodes[i].cap_mem, nodes[i].cap_gpus, 0};
        c->k[k].count++;
    }
    return c;
}

/* Usable nodes that could hold w workers of j when empty. */
static int64_t holding(const sched_cluster *c, const sched_job *j, int64_t w)
{
    int64_t n = 0;
    for (int k = 0; k < c->nk; k++)
        if (sched_fit(c->k[k].cpus, c->k[k].mem, c->k[k].gpus, j) >= w)
            n += c->k[k].count;
    return n;
}

int64_t sched_cluster_shape(const sched_cluster *c, const sched_job *j)
{
    if (j->workers <= 0 || j->cpus <= 0 || j->mem <= 0)
        return 0;
    if (j->per_node > 0) {
        if (j->workers % j->per_node)
            return 0;
        return holding(c, j, j->per_node) >= j->workers / j->per_node ? j->per_node : 0;
    }
    int64_t most = 0;
    for (int k = 0; k < c->nk; k++) {
        int64_t f = sched_fit(c->k[k].cpus, c->k[k].mem, c->k[k].gpus, j);
        if (f > most)
            most = f;
    }
    if (most > j->workers)
        most = j->workers;
    for (int64_t w = most; w >= 1; w--)
        if (j->workers % w == 0 && holding(c, j, w) >= j->workers / w)
            return w;
    return 0;
}

/* Best fit in one set: the untaken node with the least free (CPUs, or GPUs
 * in the GPU set) that holds per_node workers of j; -1 when none. */
static int best_in(sched_cluster *c, int s, const sched_job *j, int64_t per_node)
{
    const struct bucketset *bs = &c->set[s];
    int64_t need = per_node * (s ? j->gpus : j->cpus);
    for (int64_t b = next_bucket(bs, need); b >= 0; b = next_bucket(bs, b + 1)) {
        for (int i = bs->head[b]; i >= 0; i = c->next[i]) {
            const sched_node *nd = &c->nodes[i];
            if (!c->taken[i] && sched_fit(nd->free_cpus, nd->free_mem, nd->free_gpus, j) >= per_node)
                return i;
        }
        if (b == bs->nb - 1)
            break;
    }
    return -1;
}

/* The gang's nodes, taken from those not marked taken: how many found. */
static int64_t pick(sched_cluster *c, const sched_job *j, int64_t per_node, int64_t want,
                    int *node_idx)
{
    int64_t got = 0;
    while (got < want) {
        /* CPU work goes to nodes without GPUs first: GPU nodes stay for GPU work. */
        int i = j->gpus > 0 ? best_in(c, 1, j, per_node) : best_in(c, 0, j, per_node);
        if (i < 0 && j->gpus == 0)
            i = best_in(c, 1, j, per_node);
        if (i < 0)
            break;
        c->taken[i] = 1;
        node_idx[got++] = i;
    }
    for (int64_t g = 0; g < got; g++)
        c->taken[node_idx[g]] = 0;
    return got;
}

/* pick among the nodes of network kind net only (the others held taken). */
static int64_t pick_kind(sched_cluster *c, const sched_job *j, int64_t per_node, int64_t want,
                         int net, int *node_idx)
{
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i].net != net && !c->taken[i])
            c->taken[i] = 2;
    int64_t got = pick(c, j, per_node, want, node_idx);
    for (int i = 0; i < c->n; i++)
        if (c->taken[i] == 2)
            c->taken[i] = 0;
    return got;
}

int sched_cluster_place(sched_cluster *c, const sched_job *j, int64_t per_node, int *node_idx)
{
    if (per_node <= 0 || j->workers % per_node)
        return -1;
    int64_t want = j->workers / per_node, got;
    if (want > 1 && c->mixed) {
        /* A gang over several nodes meets over one kind of network: every
         * node's agent gives jobs their own, or every node shares its own. */
        got = pick_kind(c, j, per_node, want, 1, node_idx);
        if (got < want)
            got = pick_kind(c, j, per_node, want, 0, node_idx);
    } else {
        got = pick(c, j, per_node, want, node_idx);
    }
    if (got < want)
        return -1;
    for (int64_t g = 0; g < want; g++) {
        int i = node_idx[g];
        sched_node *nd = &c->nodes[i];
        unlink_node(c, i);
        nd->free_cpus -= per_node * j->cpus;
        nd->free_mem -= per_node * j->mem;
        nd->free_gpus -= per_node * j->gpus;
        link_node(c, i);
    }
    return 0;
}

int64_t sched_shape(const sched_node *nodes, int n, const sched_job *j)
{
    sched_cluster *c = sched_cluster_new((sched_node *)nodes, n);
    int64_t w = c ? sched_cluster_shape(c, j) : 0;
    sched_cluster_free(c);
    return w;
}

int sched_place(sched_node *nodes, int n, const sched_job *j, int64_t per_node, int *node_idx)
{
    sched_cluster *c = sched_cluster_new(nodes, n);
    int rc = c ? sched_cluster_place(c, j, per_node, node_idx) : -1;
    sched_cluster_free(c);
    return rc;
}
