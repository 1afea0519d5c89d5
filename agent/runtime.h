/*
 * runtime: the node's set-up for running workers in containers, done once
 * when the agent starts.  It finds crun, skopeo, umoci and cohort-init,
 * makes the image cache and crun's state directory, checks the seccomp
 * profile, and clears the one obstacle crun meets on a hybrid cgroup host:
 * crun refuses to run while any controller is attached to the cgroup v2
 * hierarchy ("cgroups in hybrid mode not supported"), so a controller found
 * there and enabled nowhere (typically hugetlb) is mounted as a cgroup v1
 * hierarchy of its own, which detaches it from v2.  The result is the
 * "container" object that every launch request carries (shim_main.c).
 */
#ifndef COHORT_AGENT_RUNTIME_H
#define COHORT_AGENT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct rt_config {
    const char *data_dir;    /* the agent's */
    const char *image_cache; /* NULL: data_dir/images */
    int64_t image_cache_max; /* bytes, 0: no bound */
    int64_t resolve_ttl_s;   /* seconds a tag's digest is remembered */
    const char *registry;    /* for references without a host */
    const char *insecure;    /* comma-separated hosts */
    const char *seccomp;     /* profile path, or "off" */
    const char *self_dir;    /* where cohort-init lies (beside the agent) */
    int64_t start_timeout_s; /* crun must have started a container by then */
} rt_config;

/* The container object, or NULL with err set (the agent cannot run
 * containers: what is missing and what to do). */
cJSON *rt_open(const rt_config *c, char *err, size_t errlen);

/* Mounts the cgroup v2 hierarchy at /sys/fs/cgroup where nothing is mounted
 * there (an agent started by `ip netns exec`, which mounts a fresh sysfs):
 * crun needs it, and so do the workers' cgroups.  0, or -1 with err set. */
int rt_mount_cgroup2(char *err, size_t errlen);

/* Moves controllers attached to the cgroup v2 hierarchy of a hybrid host
 * to v1 hierarchies of their own.  0 when nothing is left attached. */
int rt_fix_hybrid_cgroups(char *err, size_t errlen);

#endif
