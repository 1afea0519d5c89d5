/*
 * shim_req.c: the launch request of cohort-shim, parsed (see shim_req.h).
 * Every string in the request is checked before it is used; what the
 * request does not say takes the defaults the agent would have sent.
 */
#include "agent/shim_req.h"
#include "lib/fmt.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/jget.h"
#include "agent/netns.h"
#include "lib/launch.h"
#include "lib/util.h"

static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* 1 when ref names no registry host ("cohort/pytorch:bookworm"): the
 * node's default registry serves it, as Docker's default does. */
static int unqualified(const char *ref)
{
    size_t h = strcspn(ref, "/");
    if (ref[h] != '/')
        return 1;
    return !memchr(ref, '.', h) && !memchr(ref, ':', h) && strncmp(ref, "localhost/", 10);
}

/* GPU device nodes for the GPUs in CUDA_VISIBLE_DEVICES, and the driver's
 * control nodes, where they exist. */
static const char **gpu_devices(const cJSON *spec, shim_req *r)
{
    char (*names)[32] = r->gpu_name;
    const char **list = r->gpu_list;
    int n = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(env)),
        LAUNCH_NAME(CUDA_VISIBLE_DEVICES));
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return NULL;
    for (const char *p = v->valuestring; *p && n < 64;) {
        char *end;
        long g = strtol(p, &end, 10);
        if (end == p || g < 0 || g > 63)
            break;
        fmt_cut(names[n], sizeof names[n], "/dev/nvidia%ld", g); /* 0..63 */
        if (access(names[n], F_OK) == 0)
            list[n] = names[n], n++;
        p = *end == ',' ? end + 1 : end;
        if (!*end)
            break;
    }
    static const char *const ctl[] = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                      NULL};
    for (int i = 0; ctl[i]; i++)
        if (access(ctl[i], F_OK) == 0)
            list[n++] = ctl[i];
    list[n] = NULL;
    return n ? list : NULL;
}

/* The value of name in the spec's env as a number, or -1. */
static long long env_number(const cJSON *spec, const char *name)
{
    const char *v = jget_str(cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(env)), name);
    char *end;
    long long n = v ? strtoll(v, &end, 10) : -1;
    return v && *v && !*end ? n : -1;
}

/* An IPv4 address in dotted form, copied into out[16]: 0, or -1. */
static int ipv4(const char *s, char out[16])
{
    struct in_addr a;
    if (!s || inet_pton(AF_INET, s, &a) != 1 || !inet_ntop(AF_INET, &a, out, 16))
        return -1;
    return 0;
}

/* cohortd's "job_network" (api/jobnet.h) into r->overlay. */
static int overlay_parse(const cJSON *jn, shim_req *r, char *err, size_t errlen)
{
    netns_overlay *ov = &r->overlay;
    const cJSON *peers = cJSON_GetObjectItemCaseSensitive(jn, "peers"), *p;
    int64_t vni = jget_int(jn, "vni", 0), plen = jget_int(jn, "prefix_len", 0);
    int n = cJSON_GetArraySize(peers);
    if (vni < 1 || vni > 16777215 || plen < 8 || plen > 30 ||
        ipv4(jget_str(jn, "address"), ov->address) || ipv4(jget_str(jn, "local"), ov->local) ||
        !cJSON_IsArray(peers) || n < 1)
        return bad(err, errlen, "the job's network from cohortd is not valid");
    if (n > NETNS_PEERS_MAX)
        return bad(err, errlen, "the job spans %d nodes; an overlay joins at most %d", n + 1,
                   NETNS_PEERS_MAX + 1);
    if (!(ov->peers = calloc((size_t)n, sizeof *ov->peers)))
        return bad(err, errlen, "out of memory");
    ov->vni = (uint32_t)vni;
    ov->prefix_len = (int)plen;
    ov->port = (int)jget_int(jn, "port", 4789);
    cJSON_ArrayForEach(p, peers)
    {
        netns_peer *e = &ov->peers[ov->npeers++];
        e->port = (int)jget_int(p, "port", 4789);
        if (ipv4(jget_str(p, "address"), e->address) || ipv4(jget_str(p, "node"), e->node) ||
            e->port < 4789 || e->port > 4852)
            return bad(err, errlen, "peer %d of the job's network is not valid", ov->npeers);
    }
    if (ov->port < 4789 || ov->port > 4852)
        return bad(err, errlen, "the job's network from cohortd is not valid");
    return 0;
}

/* The agent's way out for job networks ("egress", egress.h), when it gives
 * one, into r->egress. */
static int egress_parse(const cJSON *eg, shim_req *r, char *err, size_t errlen)
{
    netns_egress *e = &r->egress;
    struct in_addr a;
    if (!eg)
        return 0;
    e->bridge = jget_str(eg, "bridge");
    e->veth_prefix = jget_str(eg, "veth_prefix");
    e->leases = jget_str(eg, "leases");
    e->prefix_len = (int)jget_int(eg, "prefix_len", 0);
    if (!e->bridge || !e->veth_prefix || strlen(e->veth_prefix) > 9 || !e->leases ||
        e->leases[0] != '/' || e->prefix_len < 16 || e->prefix_len > 28 ||
        inet_pton(AF_INET, jget_str(eg, "subnet") ? jget_str(eg, "subnet") : "", &a) != 1)
        return bad(err, errlen, "the agent's egress settings are not valid");
    e->subnet = ntohl(a.s_addr);
    r->sp.egress = e;
    return 0;
}

/*
 * The job's own network on this node (netns.h), where the agent gives jobs
 * networks of their own ("network": "job"): loopback only when all of the
 * attempt's ranks run here (WORKER_PER_NODE >= WORLD_SIZE), or with the
 * overlay cohortd gave ("job_network").  An attempt over several nodes
 * without one (another of its nodes keeps the host's network) is refused:
 * a job here never gets the node's network.
 */
static int job_network(const cJSON *ct, const cJSON *spec, shim_req *r, char *err,
                       size_t errlen)
{
    const char *net = jget_str(ct, "network"), *prefix = jget_str(ct, "netns_prefix");
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(job_network));
    r->sp.ip = jget_str(ct, "ip");
    r->sp.bridge = jget_str(ct, "bridge");
    long long world = env_number(spec, LAUNCH_NAME(WORLD_SIZE)),
              per = env_number(spec, LAUNCH_NAME(WORKER_PER_NODE));
    int local = world >= 1 && per >= world;
    if (!net || strcmp(net, "job"))
        return 0;
    if (!local && !cJSON_IsObject(jn))
        return bad(err, errlen, "this node gives every job a network of its own, and another "
                                "node of this job cannot join it (it runs --network host): "
                                "drain one of the two kinds of node, or run all with "
                                "--network job");
    if (!prefix || !r->sp.ip || r->sp.ip[0] != '/' ||
        netns_name(prefix, jget_int(spec, LAUNCH_KEY(job_id), 0),
                   jget_int(spec, LAUNCH_KEY(attempt), 0), r->netns,
                   sizeof r->netns) != 0)
        return bad(err, errlen, "the agent's job network settings are incomplete");
    r->sp.netns = r->netns;
    if (egress_parse(cJSON_GetObjectItemCaseSensitive(ct, "egress"), r, err, errlen) != 0)
        return -1;
    if (local)
        return 0;
    if (overlay_parse(jn, r, err, errlen) != 0)
        return -1;
    r->sp.overlay = &r->overlay;
    return 0;
}

/* s with every "from" replaced by "to": a malloc'd string, or NULL. */
static char *replaced(const char *s, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), n = 0;
    for (const char *p = s; (p = strstr(p, from)) != NULL; p += fl)
        n++;
    char *out = malloc(strlen(s) + n * (tl > fl ? tl - fl : 0) + 1), *o = out;
    for (const char *p = s, *q; out; p = q + fl) {
        if (!(q = strstr(p, from))) {
            memcpy(o, p, strlen(p) + 1);
            break;
        }
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, tl);
        o += tl;
    }
    return out;
}

/* In a job's own network its ranks meet over the loopback: MASTER_ADDR,
 * and the node's address in TF_CONFIG, become 127.0.0.1. */
static int loopback_env(shim_req *r, char *err, size_t errlen)
{
    char from[300] = "";
    for (int i = 0; i < r->nenv_malloced; i++)
        if (!strncmp(r->env[i], "MASTER_ADDR=", 12))
            if (fmt_whole(from, sizeof from, "\"%s:", r->env[i] + 12) != 0)
                return bad(err, errlen, "MASTER_ADDR is too long");
    for (int i = 0; i < r->nenv_malloced; i++) {
        char *v = NULL;
        if (!strncmp(r->env[i], "MASTER_ADDR=", 12))
            v = strdup("MASTER_ADDR=127.0.0.1");
        else if (!strncmp(r->env[i], "TF_CONFIG=", 10) && from[1] != ':')
            v = replaced(r->env[i], from, "\"127.0.0.1:");
        else
            continue;
        if (!v)
            return bad(err, errlen, "out of memory");
        free(r->env[i]);
        r->env[i] = v;
    }
    return 0;
}

/* The container settings of the request and the spec into r->sp. */
static int container_setup(const cJSON *ct, const cJSON *spec, shim_req *r, char *err,
                           size_t errlen)
{
    shim_spec *sp = &r->sp;
    char host[256];
    const char *want = jget_str(spec, LAUNCH_KEY(image_ref)), *reg = jget_str(ct, "registry");
    int64_t uid_base = jget_int(spec, LAUNCH_KEY(uid_base), 0);
    sp->crun = jget_str(ct, "crun");
    sp->crun_root = jget_str(ct, "crun_root");
    sp->init = jget_str(ct, "init");
    sp->start_ms = jget_int(ct, "start_timeout_ms", 15000);
    sp->cache.dir = jget_str(ct, "image_cache");
    sp->cache.skopeo = jget_str(ct, "skopeo");
    sp->cache.umoci = jget_str(ct, "umoci");
    sp->cache.max_bytes = jget_int(ct, "image_cache_max", 0);
    sp->cache.resolve_ttl_s = jget_int(ct, "resolve_ttl", 10);
    sp->cache.tmp_dir = r->dir;
    if (!sp->crun || !sp->crun_root || !sp->init || !sp->cache.dir || !sp->cache.skopeo ||
        !sp->cache.umoci)
        return bad(err, errlen, "the agent's container settings are incomplete");
    if (!want)
        return bad(err, errlen, "image %.64s has no reference: register it with one",
                   jget_str(spec, LAUNCH_KEY(image)) ? jget_str(spec, LAUNCH_KEY(image)) : "?");
    if (strlen(want) > IMG_REF_MAX || (reg && strlen(reg) > 255))
        return bad(err, errlen, "image reference %.64s... is too long", want);
    /* bounded just above: both fit r->ref */
    if (unqualified(want))
        fmt_cut(r->ref, sizeof r->ref, "%s/%s", reg ? reg : "127.0.0.1:5000", want);
    else
        fmt_cut(r->ref, sizeof r->ref, "%s", want);
    /* The digest the job's first rank resolved: every later rank and
     * attempt runs it, whatever the tag points at now. */
    const char *pin = jget_str(spec, LAUNCH_KEY(image_digest));
    if (pin) {
        char tagged[sizeof r->ref];
        memcpy(tagged, r->ref, sizeof tagged);
        if (img_reference_pin(tagged, pin, r->ref, sizeof r->ref) != 0)
            return bad(err, errlen, "the job's image digest %.80s is not sha256:HEX", pin);
    }
    if (!img_reference_valid(r->ref))
        return bad(err, errlen, "image reference %.400s is not valid", r->ref);
    /* Never host root, never past the uid space. */
    if (uid_base < 65536 || uid_base > 4294967295LL - 2 * 65536)
        return bad(err, errlen, "the tenant's uid range (%lld) is not usable",
                   (long long)uid_base);
    img_reference_host(r->ref, host, sizeof host);
    sp->image.reference = r->ref;
    sp->image.insecure = jget_has_string(cJSON_GetObjectItemCaseSensitive(ct, "insecure"), host);
    sp->uid_base = (uint32_t)uid_base;
    sp->framework = jget_str(spec, LAUNCH_KEY(framework));
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(resources));
    /* PyTorch's DataLoader and NCCL want a large /dev/shm: half the memory. */
    sp->shm_mb = jget_int(res, "memory_mb", 128) / 2;
    if (sp->shm_mb < 64)
        sp->shm_mb = 64;
    sp->tmp_mb = jget_int(res, "memory_mb", 0);
    sp->devices = gpu_devices(spec, r);
    if (job_network(ct, spec, r, err, errlen) != 0)
        return -1;
    sp->gpu_driver = cJSON_GetObjectItemCaseSensitive(ct, "gpu_driver");
    /* The OCI seccomp object the agent converted once (runtime.c). */
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(ct, "seccomp");
    if (sc && !cJSON_IsObject(sc))
        return bad(err, errlen, "the agent's seccomp profile is not an object");
    sp->seccomp = sc;
    return 0;
}

/* The contract's variables, then a minimal base the job did not set, then HOME. */
static int environment(const cJSON *spec, shim_req *r, char *err, size_t errlen)
{
    static const char *const base[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
        "PYTHONUNBUFFERED=1", NULL};
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(env)), *d;
    if (env && !cJSON_IsObject(env))
        return bad(err, errlen, "the launch spec's env is not an object");
    cJSON_ArrayForEach(d, env)
    {
        if (!cJSON_IsString(d) || !d->string)
            return bad(err, errlen, "a variable of the launch spec's env is not a string");
        if (r->nenv == SHIM_REQ_MAX_ENV)
            return bad(err, errlen, "the launch spec sets more than %d variables",
                       SHIM_REQ_MAX_ENV);
        size_t len = strlen(d->string) + strlen(d->valuestring) + 2;
        if (!(r->env[r->nenv] = malloc(len)))
            return bad(err, errlen, "out of memory");
        fmt_cut(r->env[r->nenv++], len, "%s=%s", d->string, d->valuestring); /* len counted */
        r->nenv_malloced = r->nenv;
    }
    r->sp.nenv_own = r->nenv;
    for (int i = 0; base[i]; i++) {
        size_t k = strcspn(base[i], "=");
        int set = 0;
        for (int j = 0; j < r->sp.nenv_own; j++)
            set |= !strncmp(r->env[j], base[i], k + 1);
        if (!set)
            r->env[r->nenv++] = (char *)base[i];
    }
    if (fmt_whole(r->home, sizeof r->home, "HOME=%s/workspace", r->sp.mount_root) != 0)
        return bad(err, errlen, "the mount root is too long");
    r->env[r->nenv++] = r->home;
    r->env[r->nenv] = NULL;
    r->sp.env = r->env;
    return 0;
}

/* The agent's cgroup subtrees and what they hold, into sp. */
static int cgroup_setup(const cJSON *cg, shim_spec *sp, char *err, size_t errlen)
{
    const char *path = jget_str(cg, "path");
    const cJSON *v1 = cJSON_GetObjectItemCaseSensitive(cg, "v1");
    if (!path || strlen(path) >= sizeof sp->cgroup.path)
        return bad(err, errlen, "the agent's cgroup path is missing or too long");
    memcpy(sp->cgroup.path, path, strlen(path) + 1);
    if (v1 && (!cJSON_IsArray(v1) || cJSON_GetArraySize(v1) != CG_V1_N))
        return bad(err, errlen, "the agent's cgroup v1 paths are not %d strings", CG_V1_N);
    for (int i = 0; v1 && i < CG_V1_N; i++) {
        const char *p = cJSON_GetStringValue(cJSON_GetArrayItem(v1, i));
        if (!p || strlen(p) >= sizeof sp->cgroup.v1[i])
            return bad(err, errlen, "the agent's cgroup v1 path %d is missing or too long", i);
        memcpy(sp->cgroup.v1[i], p, strlen(p) + 1);
    }
    sp->cgroup.cpu = (int)jget_int(cg, "cpu", 0);
    sp->cgroup.memory = (int)jget_int(cg, "memory", 0);
    sp->cgroup.pids = (int)jget_int(cg, "pids", 0);
    sp->cgroup.devices = (int)jget_int(cg, "devices", 0);
    sp->pids_max = jget_int(cg, "pids_max", 0);
    if (sp->pids_max < 0 || sp->pids_max > 4194304)
        return bad(err, errlen, "the agent's pids_max is out of range");
    return 0;
}

/* The spec's datasets, the paths hidden from the worker and its
 * arguments, each refused past its bound, never cut: 0, or -1 with err. */
static int lists(const cJSON *spec, shim_req *r, char *err, size_t errlen)
{
    const cJSON *d;
    int na = 0;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(datasets)))
    {
        const char *name = jget_str(d, "name"), *path = jget_str(d, "path");
        if (!name || !util_name_valid(name) || !path || r->sp.ndatasets == SHIM_MAX_DATASETS)
            return bad(err, errlen, "dataset %.64s is missing", name ? name : "?");
        r->sp.ds_name[r->sp.ndatasets] = name;
        r->sp.ds_path[r->sp.ndatasets++] = path;
    }
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(hide)))
    {
        if (!cJSON_IsString(d) || d->valuestring[0] != '/')
            return bad(err, errlen, "a path to hide is not an absolute path");
        if (r->sp.nhide == SHIM_MAX_HIDE - 1) /* one left for the agent's own */
            return bad(err, errlen, "more than %d paths to hide from the worker",
                       SHIM_MAX_HIDE - 1);
        r->sp.hide[r->sp.nhide++] = d->valuestring;
    }
    if (jget_str(r->json, "agent_dir"))
        r->sp.hide[r->sp.nhide++] = jget_str(r->json, "agent_dir");
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(args)))
    {
        if (!cJSON_IsString(d))
            return bad(err, errlen, "argument %d of the worker is not a string", na + 1);
        if (na == SHIM_MAX_ARGS)
            return bad(err, errlen, "the worker has more than %d arguments", SHIM_MAX_ARGS);
        r->args[na++] = d->valuestring;
    }
    r->args[na] = NULL;
    r->sp.args = r->args;
    return 0;
}

/* The registry's credentials and pull token, taken out of the spec (they
 * stay out of spec.json, kept only for the pull, a repeated key too): 0,
 * or -1 with err. */
static int credentials(const cJSON *spec, shim_req *r, char *err, size_t errlen)
{
    const char *ak = LAUNCH_KEY(registry_auth), *tk = LAUNCH_KEY(registry_token);
    r->auth = cJSON_DetachItemFromObjectCaseSensitive((cJSON *)spec, ak);
    while (cJSON_GetObjectItemCaseSensitive(spec, ak))
        cJSON_DeleteItemFromObjectCaseSensitive((cJSON *)spec, ak);
    r->token = cJSON_DetachItemFromObjectCaseSensitive((cJSON *)spec, tk);
    while (cJSON_GetObjectItemCaseSensitive(spec, tk))
        cJSON_DeleteItemFromObjectCaseSensitive((cJSON *)spec, tk);
    if (r->token && (!cJSON_IsString(r->token) || strlen(r->token->valuestring) > 8192 ||
                     strspn(r->token->valuestring, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrs"
                                                   "tuvwxyz0123456789-_.") !=
                         strlen(r->token->valuestring)))
        return bad(err, errlen, "the launch spec's registry token is not a JWT");
    r->sp.image.token = r->token ? r->token->valuestring : NULL;
    r->sp.image.username = jget_str(r->auth, "username");
    r->sp.image.password = jget_str(r->auth, "password");
    return 0;
}

/* The worker spec's share of the node (what its cgroup is limited to) and
 * the supervision's timings: 0, or -1 with err. */
static int resources(const cJSON *spec, shim_req *r, char *err, size_t errlen)
{
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(resources));
    const cJSON *cg = cJSON_GetObjectItemCaseSensitive(r->json, "cgroup");
    r->sp.agent_lock = jget_str(r->json, "agent_lock");
    r->sp.lease_ms = jget_int(r->json, "lease_ms", 30000);
    r->sp.grace_ms = jget_int(r->json, "grace_ms", 10000);
    if (cJSON_IsObject(cg) && cgroup_setup(cg, &r->sp, err, errlen) != 0)
        return -1;
    r->sp.id = jget_int(spec, LAUNCH_KEY(id), 0);
    r->sp.cpu_milli = jget_int(res, "cpus", 0);
    r->sp.memory_mb = jget_int(res, "memory_mb", 0);
    if (r->sp.cpu_milli < 0 || r->sp.cpu_milli > LAUNCH_MAX_CPUS || r->sp.memory_mb < 0 ||
        r->sp.memory_mb > LAUNCH_MAX_MEMORY_MB)
        return bad(err, errlen, "the worker spec's resources are out of range");
    r->sp.cpu_milli *= 1000;
    return 0;
}

int shim_req_parse(const char *text, shim_req *r, char *err, size_t errlen)
{
    const cJSON *spec, *ct;
    const char *fw;

    memset(r, 0, sizeof *r);
    r->json = text ? cJSON_Parse(text) : NULL;
    r->dir = jget_str(r->json, "dir");
    spec = cJSON_GetObjectItemCaseSensitive(r->json, "spec");
    if (!r->dir || !r->dir[0] || !cJSON_IsObject(spec))
        return bad(err, errlen, "the launch request is unreadable");
    fw = jget_str(spec, LAUNCH_KEY(framework));
    r->sp.program = jget_str(spec, LAUNCH_KEY(program));
    r->sp.mount_root = jget_str(spec, LAUNCH_KEY(mount_root));
    r->sp.workspace = jget_str(spec, LAUNCH_KEY(workspace));
    r->sp.launcher = jget_str(r->json, "launcher");
    if (r->sp.mount_root && strlen(r->sp.mount_root) > SHIM_MOUNT_ROOT_MAX)
        return bad(err, errlen, "the mount root is longer than %d bytes", SHIM_MOUNT_ROOT_MAX);
    if (!fw || !r->sp.program || !r->sp.mount_root || !r->sp.workspace ||
        !util_relpath_valid(r->sp.program, strlen(r->sp.program)))
        return bad(err, errlen, "the launch spec is incomplete (is the workspace gone?)");
    ct = cJSON_GetObjectItemCaseSensitive(r->json, "container");
    if (cJSON_IsObject(ct) && container_setup(ct, spec, r, err, errlen) != 0)
        return -1;
    if (!r->sp.crun && strcmp(fw, "native") && !r->sp.launcher)
        return bad(err, errlen, "no launcher on this node for image %.60s (see --launcher)",
                   jget_str(spec, LAUNCH_KEY(image)) ? jget_str(spec, LAUNCH_KEY(image)) : fw);
    if (lists(spec, r, err, errlen) != 0 || environment(spec, r, err, errlen) != 0 ||
        (r->sp.netns && !r->sp.overlay && loopback_env(r, err, errlen)) ||
        resources(spec, r, err, errlen) != 0 || credentials(spec, r, err, errlen) != 0)
        return -1;
    r->note = cJSON_PrintUnformatted(spec);
    if (!r->note)
        return bad(err, errlen, "out of memory");
    return 0;
}

void shim_req_free(shim_req *r)
{
    for (int i = 0; i < r->nenv_malloced; i++)
        free(r->env[i]);
    free(r->note);
    cJSON_Delete(r->auth);
    cJSON_Delete(r->token);
    cJSON_Delete(r->json);
    free(r->overlay.peers);
    memset(r, 0, sizeof *r);
}
