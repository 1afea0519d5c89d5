/*
 * jobnet: which attempts get an overlay, and what each agent is told of it
 * (see jobnet.h).
 */
#include "api/jobnet.h"
#include "lib/fmt.h"

#include "lib/util.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The node ids of an attempt by node rank, as its workers list them. */
struct ranks {
    int64_t *node; /* by node rank; 0: none seen */
    int64_t n, cap, last_id;
    int rows, bad;
};

static void rank_row(void *arg, const store_worker *w)
{
    struct ranks *r = arg;
    r->last_id = w->id;
    r->rows++;
    if (w->node_rank < 0 || w->node_rank >= JOBNET_NODES_MAX) {
        r->bad = 1;
        return;
    }
    if (w->node_rank >= r->cap) {
        int64_t cap = r->cap ? r->cap * 2 : 16;
        while (cap <= w->node_rank)
            cap *= 2;
        int64_t *p = realloc(r->node, (size_t)cap * sizeof *p);
        if (!p) {
            r->bad = 1;
            return;
        }
        memset(p + r->cap, 0, (size_t)(cap - r->cap) * sizeof *p);
        r->node = p;
        r->cap = cap;
    }
    if (r->node[w->node_rank] && r->node[w->node_rank] != w->node_id)
        r->bad = 1; /* one node rank on two nodes: not a placement of ours */
    r->node[w->node_rank] = w->node_id;
    if (w->node_rank + 1 > r->n)
        r->n = w->node_rank + 1;
}

void jobnet_clear(jobnet *net)
{
    free(net->addr);
    free(net->port);
    memset(net, 0, sizeof *net);
}

/* 1 when every node is an agent of job networks at an IPv4 address; each
 * gets its port (the k-th at one address 4789 + k). */
static int overlay_fits(store *st, const struct ranks *r, jobnet *net)
{
    struct in_addr a;
    net->addr = calloc((size_t)r->n, sizeof *net->addr);
    net->port = calloc((size_t)r->n, sizeof *net->port);
    if (!net->addr || !net->port)
        return 0;
    for (int64_t i = 0; i < r->n; i++) {
        store_node nd;
        if (!r->node[i] || store_node_get(st, r->node[i], &nd) != STORE_OK ||
            strcmp(nd.network, "job") || inet_pton(AF_INET, nd.address, &a) != 1)
            return 0;
        fmt_cut(net->addr[i], sizeof net->addr[i], "%s", nd.address);
        net->port[i] = JOBNET_PORT;
        for (int64_t k = 0; k < i; k++)
            if (!strcmp(net->addr[k], nd.address) && net->port[k] >= net->port[i])
                net->port[i] = net->port[k] + 1;
        if (net->port[i] > JOBNET_PORT + JOBNET_SHARED_MAX)
            return 0;
    }
    return 1;
}

/*
 * The attempt's VNI: drawn from its rendezvous secret (random, kept with
 * the job, the same for every cohortd), so a stranger cannot guess it and
 * two clusters on one host do not meet.  Two live attempts on one node
 * share one with a chance of 1 in 2^24 for each pair; the kernel then
 * refuses the second (its worker fails, saying so), never joins them.
 * An attempt placed before secrets existed: from its job and attempt.
 */
static uint32_t vni_of(int64_t job_id, int64_t attempt, const char *secret)
{
    uint8_t h[UTIL_SHA256_LEN];
    if (!secret || !secret[0])
        return (uint32_t)(((uint64_t)job_id * 8 + (uint64_t)attempt % 8) % 16777214u) + 1;
    util_sha256(secret, strlen(secret), h);
    uint32_t v = ((uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2]) % 16777214u;
    return v + 1;
}

int jobnet_load(store *st, int64_t job_id, int64_t attempt, const char *secret, jobnet *net)
{
    struct ranks r = {0};
    int rc = STORE_OK;
    memset(net, 0, sizeof *net);
    net->job_id = job_id;
    net->attempt = attempt;
    do { /* pages of the attempt's workers, by id */
        r.rows = 0;
        rc = store_worker_list(st, job_id, attempt, r.last_id, 1000, rank_row, &r);
    } while (rc == STORE_OK && !r.bad && r.rows == 1000);
    if (rc == STORE_OK && !r.bad && r.n > 1 && overlay_fits(st, &r, net)) {
        net->nodes = (int)r.n;
        net->vni = vni_of(job_id, attempt, secret);
    } else {
        free(net->addr);
        free(net->port);
        net->addr = NULL;
        net->port = NULL;
    }
    free(r.node);
    return rc;
}

void jobnet_address(int64_t node_rank, char *out, size_t n)
{
    int64_t h = node_rank + 1;
    fmt_cut(out, n, "10.77.%d.%d", (int)(h >> 8) & 255, (int)h & 255);
}

const char *jobnet_map(const jobnet *net, const char *addr, char *buf, size_t n)
{
    for (int i = 0; net && i < net->nodes; i++)
        if (!strcmp(net->addr[i], addr)) {
            jobnet_address(i, buf, n);
            return buf;
        }
    return addr;
}

cJSON *jobnet_spec(const jobnet *net, int64_t node_rank)
{
    char a[24];
    if (!net || node_rank < 0 || node_rank >= net->nodes)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "vni", (double)net->vni);
    jobnet_address(node_rank, a, sizeof a);
    cJSON_AddStringToObject(o, "address", a);
    cJSON_AddNumberToObject(o, "prefix_len", JOBNET_PREFIX_LEN);
    cJSON_AddStringToObject(o, "local", net->addr[node_rank]);
    cJSON_AddNumberToObject(o, "port", net->port[node_rank]);
    cJSON *peers = cJSON_AddArrayToObject(o, "peers");
    for (int i = 0; i < net->nodes; i++) {
        if (i == node_rank)
            continue;
        cJSON *p = cJSON_CreateObject();
        jobnet_address(i, a, sizeof a);
        cJSON_AddStringToObject(p, "address", a);
        cJSON_AddStringToObject(p, "node", net->addr[i]);
        cJSON_AddNumberToObject(p, "port", net->port[i]);
        cJSON_AddItemToArray(peers, p);
    }
    return o;
}
