/*
 * cgroup: the cgroup v2 subtree of one agent's workers.
 *
 * The agent (cg_open) finds the machine's cgroup v2 hierarchy, makes
 * <hierarchy>/cohort/<tag> and enables there whichever of the cpu, memory
 * and pids controllers the hierarchy offers.  Each worker's shim then owns
 * one directory below it (cg_worker_make, cg_join, cg_worker_end): the
 * worker spec's CPUs as cpu.max and its memory as memory.max where those
 * controllers are on, and, when the worker ends, what the kernel counted
 * (CPU time, peak memory, OOM kills) before the directory is removed.
 *
 * On a machine without cgroup v2 (or with --cgroup off) workers run without
 * a cgroup of their own; their PID namespace still ends all of them.
 */
#ifndef COHORT_AGENT_CGROUP_H
#define COHORT_AGENT_CGROUP_H

#include <stddef.h>
#include <stdint.h>

typedef struct cg_root {
    char path[1024]; /* "" when workers get no cgroup */
    int cpu, memory, pids; /* controllers enabled for workers */
} cg_root;

/*
 * want: NULL for the machine's cgroup v2 hierarchy, if any (no hierarchy is
 * not an error: out->path stays ""), "off" for none, or a directory of a
 * cgroup v2 hierarchy to put the subtree under (which must work).  tag
 * names this agent's subtree.  0, or -1 with err set.
 */
int cg_open(const char *want, const char *tag, cg_root *out, char *err, size_t errlen);

/* "cpu memory pids", or "none", for messages: into buf, returned. */
const char *cg_controllers(const cg_root *r, char *buf, size_t n);

/*
 * Makes the directory of worker id under root (cg_open's path), with its
 * limits: cpu_milli thousandths of a CPU as cpu.max when cpu is on,
 * memory_mb as memory.max when memory is on (0: no limit).  A directory left
 * from before is reused.  Its path goes to path.  0, or -1 with err set.
 */
int cg_worker_make(const cg_root *root, int64_t id, int64_t cpu_milli, int64_t memory_mb,
                   char *path, size_t n, char *err, size_t errlen);

/* Opens path's cgroup.procs for cg_join: a descriptor, or -1 with err set. */
int cg_procs_open(const char *path, char *err, size_t errlen);
/* Moves the calling process into the cgroup of procs_fd: 0 or -errno. */
int cg_join(int procs_fd);

/* SIGKILL to every process in the cgroup at path (cgroup.kill, or one by
 * one from cgroup.procs where the kernel lacks it): 0 or -errno. */
int cg_kill(const char *path);

typedef struct cg_usage {
    int64_t cpu_us;      /* CPU time of every process that ran in it */
    int64_t memory_peak; /* bytes, -1 when the memory controller is off */
    int64_t memory_max;  /* bytes, -1 when unlimited or unknown */
    int64_t oom_kills;   /* processes the OOM killer ended for its limit */
} cg_usage;

/*
 * After the worker's last process: reads the usage into u and removes the
 * directory (waiting up to wait_ms for dying processes to leave it).
 * 0, or -1 when the directory stays (u is filled all the same).
 */
int cg_worker_end(const char *path, cg_usage *u, int wait_ms);

/* Removes the agent's subtree when no worker's cgroup is left in it. */
void cg_close(const cg_root *r);

/* Removes what is left of worker id's directory under root (no error). */
void cg_worker_forget(const char *root, int64_t id);

#endif
