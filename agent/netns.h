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
 */
#ifndef COHORT_AGENT_NETNS_H
#define COHORT_AGENT_NETNS_H

#include <stddef.h>
#include <stdint.h>

#define NETNS_DIR "/run/netns"
#define NETNS_NAME_MAX 128

/* PREFIX-j<job>-a<attempt> into out: 0, or -1 when it does not fit. */
int netns_name(const char *prefix, int64_t job, int64_t attempt, char *out, size_t n);

/*
 * Makes the namespace name (with its loopback up) unless it exists, with the
 * iproute2 program ip; its path goes to path.  0, or -1 with err set.
 */
int netns_ensure(const char *ip, const char *name, char *path, size_t n, char *err,
                 size_t errlen);

/* Removes the namespaces of prefix whose attempt live(arg, job, attempt)
 * says has no worker left here, at most max of them (each costs an exec of
 * ip: the caller's loop is not held up for long).  How many it removed. */
int netns_gc(const char *ip, const char *prefix, int (*live)(void *arg, int64_t job,
                                                             int64_t attempt),
             void *arg, int max);

#endif
