/*
 * egress: the way out of the jobs' networks on a node (--egress on).
 *
 * Off by default: jobs read their data from mounted volumes, and a route
 * out is also a way to send a tenant's data off the node.  On, the agent
 * keeps a bridge of its own (cb<hash>, the first address of --egress-subnet)
 * whose ports are the jobs' out0 veths (netns.h), each isolated from the
 * others, and an nftables table of its own (inet cohort_<hash>):
 *   - nothing from the bridge reaches the node itself (input: dropped);
 *   - nothing passes between two jobs' ports, nor to the private,
 *     shared, loopback, link-local (cloud metadata) and multicast ranges,
 *     nor to cohortd's and the registry's addresses, nor to what
 *     --egress-deny adds (the cluster's own public addresses); no IPv6, and
 *     no VXLAN (UDP 4789) anywhere: a job never speaks into an overlay;
 *   - the rest is forwarded and masqueraded behind the node's address, and
 *     only replies come back.
 * Made (again, as the same) at start; removed at a stop that left no worker.
 */
#ifndef COHORT_AGENT_EGRESS_H
#define COHORT_AGENT_EGRESS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define EGRESS_DENY_MAX 64

typedef struct egress {
    char ip[4096], nft[4096];
    char bridge[16], veth_prefix[16], table[32];
    char leases[4200]; /* the lease directory (netns.h) */
    uint32_t subnet; /* host order */
    int prefix_len;
    uint32_t deny[EGRESS_DENY_MAX]; /* --egress-deny, host order */
    int deny_len[EGRESS_DENY_MAX], ndeny;
    int up;
} egress;

/* "A.B.C.D/N" into *addr and *len (the address aligned to its prefix,
 * lo <= N <= hi): 0, or -1. */
int egress_cidr(const char *text, int lo, int hi, uint32_t *addr, int *len);

/*
 * Makes the bridge and the table for an agent told hash (its data
 * directory's), subnet (--egress-subnet), deny ("CIDR,..." or NULL) and
 * services (cohortd's URLs and the registry's host:port, comma-separated:
 * each address they resolve to is denied too), and
 * adds what a shim needs to container ("egress", shim_req.h), its leases
 * in lease_root/egress-<hash>.  0, or -1 with err set.
 */
int egress_open(egress *e, uint32_t hash, const char *subnet, const char *deny,
                const char *services, const char *lease_root, cJSON *container, char *err,
                size_t errlen);

/* Removes the table and the bridge (nothing when e never opened). */
void egress_close(egress *e);

#endif
