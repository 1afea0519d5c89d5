/*
 * shim_req: the launch request cohort-shim reads on its standard input,
 * turned into the sandbox description of shim.h.  Parsing only: nothing is
 * created or started here, so the parser can be tested and fuzzed alone.
 *
 * The request, from cohort-agent:
 *   {"dir", "spec" (the launch spec from cohortd), "launcher", "agent_dir",
 *    "agent_lock", "lease_ms", "grace_ms", "cgroup" ({"path" (v2, "" for none),
 *    "v1" (the CG_V1_N subtrees of cgroup.h, "" each for none), "cpu", "memory",
 *    "pids", "devices" (1 where the limit holds), "pids_max"}: absent for no
 *    cgroup), "container" (absent
 *    on a trusted node that runs host processes: {"crun", "crun_root", "init",
 *    "skopeo", "umoci", "image_cache", "image_cache_max", "resolve_ttl", "registry" (for
 *    references without a host), "insecure" (hosts spoken to over plain HTTP),
 *    "seccomp" (the OCI seccomp object, or absent), "network" ("job" gives
 *    jobs networks of their own: netns.h), "netns_prefix", "ip", "bridge",
 *    "egress" (absent for none: {"bridge", "veth_prefix", "leases", "subnet",
 *    "prefix_len"})})}
 * The launch spec of a container worker carries "image_ref", "uid_base" and,
 * for a private image with credentials, "registry_auth" {"username", "password"};
 * for an image of cohortd's own registry, "registry_token" (a pull token);
 * for an attempt over several nodes of job networks, "job_network" {"vni",
 * "address", "prefix_len", "local", "peers" [{"address", "node"}]}.
 */
#ifndef COHORT_AGENT_SHIM_REQ_H
#define COHORT_AGENT_SHIM_REQ_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "agent/image.h"
#include "agent/netns.h"
#include "agent/shim.h"

/* The longest mount root (where volumes appear in the container): every
 * path under it the shim makes then fits its buffer of 4,200 bytes. */
#define SHIM_MOUNT_ROOT_MAX 1024
#define SHIM_REQ_MAX_ENV 280   /* the job's and the platform's variables */
_Static_assert(SHIM_REQ_MAX_ENV >= LAUNCH_MAX_ENV, "the shim's environment holds a spec's");

typedef struct shim_req {
    const char *dir; /* the worker's state directory, once known (even on failure) */
    shim_spec sp;    /* points into json, auth and the buffers below */
    char *note;      /* the spec for dir/spec.json, credentials removed; owned */
    cJSON *json;     /* the parsed request; owned */
    cJSON *auth;     /* registry_auth, taken out of the spec; owned */
    cJSON *token;    /* registry_token, taken out of the spec; owned */
    int nenv, nenv_malloced;
    char *env[SHIM_REQ_MAX_ENV + 8]; /* env[0 .. nenv_malloced) are owned */
    char *args[SHIM_MAX_ARGS + 1];
    char home[4200];
    char ref[IMG_REF_MAX + 300];
    char netns[128];
    netns_overlay overlay; /* its peers are owned */
    netns_egress egress;   /* its strings point into json */
    char gpu_name[72][32];
    const char *gpu_list[72];
} shim_req;

/* Parses text (NUL-terminated) into *r, which the caller provides (it is
 * large: allocate it).  0, or -1 with a message for the worker's status in
 * err.  Either way the caller calls shim_req_free(r) afterwards. */
int shim_req_parse(const char *text, shim_req *r, char *err, size_t errlen);
void shim_req_free(shim_req *r);

#endif
