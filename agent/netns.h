/*
 * netns: the network namespaces of the jobs on a node.
 *
 * Every attempt of a job whose ranks all run on this node gets one network
 * namespace, PREFIX-j<job>-a<attempt> (the prefix names the agent), shared
 * by the job's containers there and holding a loopback only: its ranks meet
 * over 127.0.0.1 on any port, and nothing else is reachable from it (the
 * node's addresses and services, the registry, another tenant's job, other
 * networks).  They are made with iproute2 (`ip netns add`, so they lie at
 * /run/netns/NAME) by the first shim of the attempt, under a lock, and
 * removed by the agent once no worker of the attempt is left (netns_gc).
 *
 * An attempt over several nodes gets the same namespace on each, and in it
 * one more device, eth0: a VXLAN device of the attempt's VNI (cohortd's
 * api/jobnet.h), made in the node's own namespace (where its UDP socket,
 * port 4789 on the node's address, stays) and then moved into the job's.
 * Its peers are static: a neighbour entry and a forwarding entry for each
 * other node of the attempt, whose MAC address follows from its overlay
 * address, so nothing is learnt or flooded.  The namespace's only routes
 * are the loopback and the overlay's subnet: the ranks reach each other,
 * and nothing of the node or of any other network.
 *
 * Where the agent gives jobs a way out (--egress on, egress.h), the
 * namespace also gets out0, a veth whose other end is a port of the
 * agent's bridge, isolated from its other ports, with an address leased
 * from the bridge's subnet (a symlink INDEX -> NAME in the lease
 * directory) and the default route through the bridge; the node's
 * nftables rules decide what passes.
 */
#ifndef COHORT_AGENT_NETNS_H
#define COHORT_AGENT_NETNS_H

#include <stddef.h>
#include <stdint.h>

#define NETNS_DIR "/run/netns"
#define NETNS_SYS_DIR "/run/cohort-sys"
#define NETNS_NAME_MAX 128
#define NETNS_PEERS_MAX 4096 /* other nodes of one attempt */
#define NETNS_VXLAN_PORT "4789"
#define NETNS_VXLAN_PORTS "4789-4852" /* agents sharing an address take the next ones */

/* An overlay address and the node's own address behind it, both IPv4. */
typedef struct netns_peer {
    char address[16], node[16];
    int port; /* its VXLAN port (NETNS_VXLAN_PORT unless it shares an address) */
} netns_peer;

/* The attempt's overlay on this node, as cohortd gave it. */
typedef struct netns_overlay {
    uint32_t vni;              /* 1 .. 2^24-1 */
    char address[16], local[16]; /* this node's overlay and own addresses */
    int prefix_len;            /* of the overlay's subnet, 8 .. 30 */
    int port;                  /* this node's VXLAN port */
    int npeers;
    netns_peer *peers;         /* owned by whoever filled it in */
} netns_overlay;

/* The agent's way out for job networks (egress.h), as the shim needs it. */
typedef struct netns_egress {
    const char *bridge;      /* the agent's bridge */
    const char *veth_prefix; /* host ends are VETH_PREFIX<index>, <= 15 bytes */
    const char *leases;      /* the lease directory */
    uint32_t subnet;         /* host order */
    int prefix_len;          /* 16 .. 28 */
} netns_egress;

/*
 * Runs prog with args (at most 14) and input (or nothing) on its stdin; the
 * first line it writes to stderr goes to why (may be NULL).  Its exit
 * status, or -1.
 */
int netns_run(const char *prog, const char *const *args, const char *input, char *why,
              size_t whylen);

/* PREFIX-j<job>-a<attempt> into out: 0, or -1 when it does not fit. */
int netns_name(const char *prefix, int64_t job, int64_t attempt, char *out, size_t n);

/* Where the sysfs of namespace name lies (NETNS_SYS_DIR/name), into out: 0,
 * or -1 when it does not fit. */
int netns_sys_path(const char *name, char *out, size_t n);

/*
 * Makes the namespace name (with its loopback up, the overlay ov and the
 * way out eg, each unless NULL, and its sysfs) unless it exists, with
 * iproute2's ip and bridge programs; its path goes to path.  0, or -1 with
 * err set (and nothing left behind).
 */
int netns_ensure(const char *ip, const char *bridge, const char *name, const netns_overlay *ov,
                 const netns_egress *eg, char *path, size_t n, char *err, size_t errlen);

/* Removes the namespace name and its sysfs: 0, or -1. */
int netns_delete(const char *ip, const char *name);

/* Removes the namespaces of prefix whose attempt live(arg, job, attempt)
 * says has no worker left here, at most max of them (each costs an exec of
 * ip: the caller's loop is not held up for long), and then the leases in
 * directory leases (unless NULL) whose namespace is gone.  How many
 * namespaces it removed. */
int netns_gc(const char *ip, const char *prefix, const char *leases,
             int (*live)(void *arg, int64_t job, int64_t attempt), void *arg, int max);

#endif
