/*
 * shim: starts one worker in its sandbox and records how it ended.
 *
 * cohort-shim (shim_main.c) is spawned by the agent for each worker and
 * detaches (new session, never the agent's child), so workers outlive an
 * agent restart.  The shim enters a new mount
 * and PID namespace, lays out the volumes under mount_root (datasets
 * read-only, submounts included; the workspace writable), hides the host
 * paths listed in hide, and forks the namespace's init, which starts the
 * worker as its own process group with no new privileges and none of the
 * agent's file descriptors.  When the worker ends, init ends, and the kernel
 * kills whatever is left in the namespace: nothing of a worker survives it.
 *
 * With a cgroup root (cgroup.h), the namespace's init joins a cgroup of the
 * worker's own there, with the spec's limits, before anything else runs.
 *
 * Files in the worker's state directory:
 *   shim        pid of the shim itself, from its start (it pulls images first)
 *   phase       while it starts: what it is doing ("pulling image ...: 3 of 9 MB")
 *   digest      the image digest the worker runs (containers)
 *   pid         host pid of the namespace's init (signal it to stop the worker)
 *   status      "exit N", "signal N" or "error MESSAGE", written once, atomically;
 *               with a cgroup, "cpu_us N", "memory_peak N", "memory_max N" and
 *               "oom_kills N" lines follow
 *   output.log  the worker's stdout and stderr
 */
#ifndef COHORT_AGENT_SHIM_H
#define COHORT_AGENT_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "agent/cgroup.h"
#include "agent/image.h"
#include "lib/launch.h"

#define SHIM_MAX_DATASETS 32
#define SHIM_MAX_HIDE 64  /* paths hidden from a host-runtime worker; more is refused */
#define SHIM_MAX_ARGS 298 /* a worker's arguments after its program; more is refused */
/* They hold whatever the contract allows (lib/launch.h). */
_Static_assert(SHIM_MAX_ARGS >= LAUNCH_MAX_ARGS, "the shim's arguments hold a launch spec's");
_Static_assert(SHIM_MAX_DATASETS >= LAUNCH_MAX_DATASETS, "the shim's datasets hold a spec's");

typedef struct shim_spec {
    const char *program;    /* path inside the workspace */
    const char *launcher;   /* absolute path of an interpreter, or NULL to exec program */
    const char *mount_root; /* e.g. /cohort: datasets/ and workspace/ appear there */
    const char *workspace;  /* host path */
    int ndatasets;
    const char *ds_name[SHIM_MAX_DATASETS];
    const char *ds_path[SHIM_MAX_DATASETS]; /* host paths */
    int nhide;
    const char *hide[SHIM_MAX_HIDE];
    char **env;  /* NULL-terminated "NAME=value" */
    int nenv_own; /* env[0 .. nenv_own) are the platform's and the job's; the
                   * rest are defaults an image's Env may replace */
    char **args; /* NULL-terminated, after the program */
    /* The agent holds agent_lock (flock) while it lives.  When no agent has
     * held it for lease_ms, the shim stops its worker: SIGTERM, then SIGKILL
     * after grace_ms. */
    const char *agent_lock;
    int64_t lease_ms, grace_ms;
    /* The agent's cgroup subtrees (cg_used 0 for none); the worker's cgroup
     * is w<id> below each, limited to cpu_milli, memory_mb and pids_max (0:
     * unlimited) and, in a container, to the standard devices and its own. */
    cg_root cgroup;
    int64_t id, cpu_milli, memory_mb, pids_max;
    /* A container (crun set) or, on a trusted node, a host process (crun
     * NULL: the namespaces and mounts above, as root, on the host's files). */
    const char *crun;      /* the crun program */
    const char *crun_root; /* crun's state directory for this agent */
    const char *init;      /* cohort-init on the host */
    int64_t start_ms;      /* crun that has not started the container by then is
                            * killed and run once more; 0: no bound */
    img_cache cache;       /* the node's images */
    img_source image;      /* this worker's */
    uint32_t uid_base;     /* the tenant's host uid range */
    const char *framework; /* native: the program is the command */
    const cJSON *seccomp;  /* OCI seccomp object, or NULL */
    int64_t shm_mb, tmp_mb; /* sizes of the container's /dev/shm and /tmp */
    const char *ip;             /* iproute2's ip program */
    const char *bridge;         /* and its bridge program */
    const char *netns;          /* the job's network namespace on this node
                                 * (netns.h), or NULL: the node's network */
    const struct netns_overlay *overlay; /* its overlay to the attempt's other
                                          * nodes, or NULL: loopback only */
    const struct netns_egress *egress;   /* its way out, or NULL: none */
    const char *const *devices; /* GPU device nodes, NULL-terminated */
    const cJSON *gpu_driver;    /* the host driver's files (nvdriver.h), bound into
                                 * containers that get devices */
} shim_spec;

/*
 * Runs the worker described by sp with state directory dir (which exists);
 * note, when not NULL, goes to dir/spec.json for people.  The calling
 * process forks the detached shim and returns 0 at once; the outcome
 * appears in dir/status later.  -1 when even that failed.
 */
int shim_start(const char *dir, const shim_spec *sp, const char *note);

#endif
