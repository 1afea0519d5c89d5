/*
 * cgroup: the cgroups of one agent's workers, on cgroup v2, v1 and hybrid
 * hosts.
 *
 * The agent (cg_open) finds where the machine keeps each controller: the
 * cgroup v2 hierarchy, where it enables cpu, memory and pids for
 * <hierarchy>/cohort/<tag>; and, for each of cpu, cpuacct, memory, pids and
 * devices that v2 does not offer, the cgroup v1 hierarchy that holds it,
 * where the subtree is <hierarchy>/<the agent's own cgroup>/cohort/<tag> (as
 * crun and the kubelet use v1 where the host keeps it there).  Each
 * worker's shim then owns one directory below each of them
 * (cg_worker_make, cg_join, cg_worker_end): the worker spec's CPUs and
 * memory, a bound on its processes, the device allow-list (an eBPF device
 * program on the worker's v2 directory, as crun and the kubelet attach on
 * cgroup v2, and the v1 devices controller too where the host has it), and,
 * when the worker ends, what the kernel counted
 * (CPU time, peak memory, OOM kills) before the directories are removed.
 *
 * On a machine with no cgroup at all (or with --cgroup off) workers run
 * without a cgroup of their own; their PID namespace still ends all of them.
 */
#ifndef COHORT_AGENT_CGROUP_H
#define COHORT_AGENT_CGROUP_H

#include <stddef.h>
#include <stdint.h>

#define CG_PATH_MAX 1024

/* The cgroup v1 controllers a worker may be put under. */
enum { CG_V1_CPU, CG_V1_CPUACCT, CG_V1_MEMORY, CG_V1_PIDS, CG_V1_DEVICES, CG_V1_N };

typedef struct cg_root {
    char path[CG_PATH_MAX];           /* the cgroup v2 subtree, "" for none */
    char v1[CG_V1_N][CG_PATH_MAX];    /* the subtree in each v1 hierarchy, "" for none */
    int cpu, memory, pids, devices;   /* which limits hold, in either version */
} cg_root;

/* What one worker is held to (0 for a number: no limit). */
typedef struct cg_limits {
    int64_t cpu_milli, memory_mb, pids_max;
    const char *const *devices; /* device nodes allowed beyond the standard ones
                                 * (null, zero, full, random, urandom, tty,
                                 * ptmx, pts): NULL-terminated, or NULL */
    int restrict_devices;       /* 0: no device allow-list at all */
} cg_limits;

/* One worker's cgroups: a directory per hierarchy used, and the
 * cgroup.procs of each, open for cg_join. */
typedef struct cg_worker {
    char path[CG_PATH_MAX + 32];
    char v1[CG_V1_N][CG_PATH_MAX + 32];
    int fd[1 + CG_V1_N];
} cg_worker;

/*
 * want: NULL for whatever the machine has (having none is not an error:
 * cg_used is 0 then), "off" for none, or a directory of a cgroup v2
 * hierarchy to put the subtree under (which must work; no v1 then).  tag
 * names this agent's subtree.  0, or -1 with err set; a controller that
 * could not be used is left off, and says so in err with 0.
 */
int cg_open(const char *want, const char *tag, cg_root *out, char *err, size_t errlen);

/* 1 when workers get a cgroup of their own under r. */
int cg_used(const cg_root *r);

/* "cpu memory pids devices" (with "(v1)" after those kept there), or
 * "none", for messages: into buf, returned. */
const char *cg_controllers(const cg_root *r, char *buf, size_t n);

/*
 * Makes the directories of worker id under root, with lim's limits where the
 * controllers are on, and opens their cgroup.procs.  Directories left from
 * before are reused.  0, or -1 with err set and nothing left.
 */
int cg_worker_make(const cg_root *root, int64_t id, const cg_limits *lim, cg_worker *w,
                   char *err, size_t errlen);

/* Moves the calling process into every cgroup of w: 0 or -errno. */
int cg_join(const cg_worker *w);

/* Closes w's cgroup.procs descriptors (the directories stay). */
void cg_worker_close(cg_worker *w);

/* SIGKILL to every process in w's cgroups (cgroup.kill, or one by one from
 * cgroup.procs, again until none is left): 0 or -errno. */
int cg_kill(const cg_worker *w);

typedef struct cg_usage {
    int64_t cpu_us;      /* CPU time of every process that ran in it */
    int64_t memory_peak; /* bytes, -1 when the memory controller is off */
    int64_t memory_max;  /* bytes, -1 when unlimited or unknown */
    int64_t oom_kills;   /* processes the OOM killer ended for its limit */
    int64_t pids_max;    /* its bound on processes, -1 when none */
    int64_t forks_refused; /* forks refused at that bound */
} cg_usage;

/*
 * After the worker's last process: reads the usage into u and removes the
 * directories (waiting up to wait_ms for dying processes to leave them).
 * 0, or -1 when one stays (u is filled all the same).
 */
int cg_worker_end(cg_worker *w, cg_usage *u, int wait_ms);

/* Removes the agent's subtrees when no worker's cgroup is left in them. */
void cg_close(const cg_root *r);

/* Removes what is left of worker id's directories under root (no error). */
void cg_worker_forget(const cg_root *root, int64_t id);

#endif
