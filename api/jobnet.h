/*
 * jobnet: the network of one attempt of a job that spans several nodes.
 *
 * Where every node of the attempt runs an agent that gives jobs networks of
 * their own ("network": "job" at registration, with an IPv4 address), the
 * attempt's ranks meet over an overlay of that attempt alone: a VXLAN
 * segment (its VNI drawn from the attempt's secret) between the nodes' own
 * addresses, in which node rank r holds 10.77.(r+1 >> 8).(r+1 & 255)
 * (10.77.0.1 for rank 0's node).  Nodes that share an address (agents of one
 * machine) each get a UDP port of their own: the k-th at an address listens
 * on 4789 + k.  cohortd decides it here, once for every
 * agent of the attempt, and tells each agent its address and its peers in
 * the launch spec ("job_network"); MASTER_ADDR and TF_CONFIG name overlay
 * addresses.  Anywhere else the attempt keeps the nodes' own network.
 */
#ifndef COHORT_API_JOBNET_H
#define COHORT_API_JOBNET_H

#include <stddef.h>
#include <stdint.h>

#include "storage/store.h"
#include "storage/store_node.h"

#define JOBNET_PREFIX_LEN 16 /* the overlay is 10.77.0.0/16 */
#define JOBNET_NODES_MAX 65000
#define JOBNET_PORT 4789       /* IANA's VXLAN port */
#define JOBNET_SHARED_MAX 63   /* more agents than this at one address: no overlay */

typedef struct jobnet {
    int64_t job_id, attempt;
    int nodes;       /* 0: the attempt keeps the nodes' network */
    uint32_t vni;    /* 1 .. 2^24-2 */
    char (*addr)[STORE_ADDR_MAX + 1]; /* each node's own address, by node rank */
    int *port;       /* each node's VXLAN port, by node rank */
} jobnet;

/* Loads the network of (job_id, attempt) into net (cleared first; free with
 * jobnet_clear); secret is the attempt's rendezvous secret, which its VNI
 * is drawn from.  STORE_OK, also where the attempt keeps the nodes' network
 * (net->nodes 0), or the store's error. */
int jobnet_load(store *st, int64_t job_id, int64_t attempt, const char *secret, jobnet *net);
void jobnet_clear(jobnet *net);

/* The overlay address of node rank r into out ("10.77.H.L"). */
void jobnet_address(int64_t node_rank, char *out, size_t n);

/* addr, a node's own address, as the ranks of net reach it: its overlay
 * address when net has one and addr is among its nodes, else addr. */
const char *jobnet_map(const jobnet *net, const char *addr, char *buf, size_t n);

/* The launch spec's "job_network" of a worker at node_rank, or NULL where
 * the attempt keeps the nodes' network.  The caller owns the result. */
struct cJSON *jobnet_spec(const jobnet *net, int64_t node_rank);

#endif
