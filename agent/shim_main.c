/*
 * cohort-shim: started by cohort-agent (posix_spawn) for each worker, with
 * its launch request on standard input:
 *   {"dir", "spec" (the launch spec from cohortd), "launcher", "agent_dir",
 *    "agent_lock", "lease_ms", "grace_ms", "cgroup" ({"path", "cpu", "memory",
 *    "pids"}: the agent's cgroup subtree, absent for none), "container" (absent
 *    on a trusted node that runs host processes: {"crun", "crun_root", "init",
 *    "skopeo", "umoci", "image_cache", "image_cache_max", "resolve_ttl", "registry" (for
 *    references without a host), "insecure" (hosts spoken to over plain HTTP),
 *    "seccomp" (the OCI seccomp object, or absent)})}
 * The launch spec of a container worker carries "image_ref", "uid_base" and,
 * for a private image with credentials, "registry_auth" {"username", "password"}.
 * It creates the worker's state directory, turns the launch spec into the
 * sandbox of shim.h, detaches and runs the worker.  A request it cannot use
 * ends as dir/status "error ..." when dir is known.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "agent/oci.h"
#include "agent/shim.h"
#include "storage/util.h"

#define REQUEST_MAX (4 << 20)

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t jint(const cJSON *o, const char *k, int64_t dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

static void fail(const char *dir, const char *msg)
{
    char path[4200];
    fprintf(stderr, "cohort-shim: %s\n", msg);
    if (!dir)
        return;
    snprintf(path, sizeof path, "%s/status", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "error %s\n", msg);
        fclose(f);
    }
}

/* Reads all of standard input (bounded). */
static char *slurp(void)
{
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len + 1 == cap) {
            if (cap >= REQUEST_MAX) {
                free(buf);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(0, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    if (buf)
        buf[len] = '\0';
    return buf;
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

static int host_listed(const cJSON *hosts, const char *host)
{
    const cJSON *h;
    cJSON_ArrayForEach(h, hosts)
    {
        if (cJSON_IsString(h) && !strcmp(h->valuestring, host))
            return 1;
    }
    return 0;
}

/* GPU device nodes for the GPUs in CUDA_VISIBLE_DEVICES, and the driver's
 * control nodes, where they exist. */
static const char **gpu_devices(const cJSON *spec)
{
    static char names[72][32];
    static const char *list[72];
    int n = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(spec, "env"), "CUDA_VISIBLE_DEVICES");
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return NULL;
    for (const char *p = v->valuestring; *p && n < 64;) {
        char *end;
        long g = strtol(p, &end, 10);
        if (end == p || g < 0 || g > 63)
            break;
        snprintf(names[n], sizeof names[n], "/dev/nvidia%ld", g);
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

/* The container settings of the request and the spec into sp. */
static int container_setup(const cJSON *ct, const cJSON *spec, shim_spec *sp, const char *dir)
{
    static char ref[IMG_REF_MAX + 300], host[256];
    char msg[700];
    const char *want = jstr(spec, "image_ref"), *reg = jstr(ct, "registry");
    int64_t uid_base = jint(spec, "uid_base", 0);
    sp->crun = jstr(ct, "crun");
    sp->crun_root = jstr(ct, "crun_root");
    sp->init = jstr(ct, "init");
    sp->cache.dir = jstr(ct, "image_cache");
    sp->cache.skopeo = jstr(ct, "skopeo");
    sp->cache.umoci = jstr(ct, "umoci");
    sp->cache.max_bytes = jint(ct, "image_cache_max", 0);
    sp->cache.resolve_ttl_s = jint(ct, "resolve_ttl", 10);
    sp->cache.tmp_dir = dir;
    if (!sp->crun || !sp->crun_root || !sp->init || !sp->cache.dir || !sp->cache.skopeo ||
        !sp->cache.umoci) {
        fail(dir, "the agent's container settings are incomplete");
        return -1;
    }
    if (!want) {
        snprintf(msg, sizeof msg, "image %.64s has no reference: register it with one",
                 jstr(spec, "image") ? jstr(spec, "image") : "?");
        fail(dir, msg);
        return -1;
    }
    if (unqualified(want))
        snprintf(ref, sizeof ref, "%s/%s", reg ? reg : "127.0.0.1:5000", want);
    else
        snprintf(ref, sizeof ref, "%s", want);
    if (!img_reference_valid(ref)) {
        snprintf(msg, sizeof msg, "image reference %.400s is not valid", ref);
        fail(dir, msg);
        return -1;
    }
    /* Never host root, never past the uid space. */
    if (uid_base < 65536 || uid_base > 4294967295LL - 2 * 65536) {
        snprintf(msg, sizeof msg, "the tenant's uid range (%lld) is not usable",
                 (long long)uid_base);
        fail(dir, msg);
        return -1;
    }
    img_reference_host(ref, host, sizeof host);
    sp->image.reference = ref;
    sp->image.insecure = host_listed(cJSON_GetObjectItemCaseSensitive(ct, "insecure"), host);
    const cJSON *auth = cJSON_GetObjectItemCaseSensitive(spec, "registry_auth");
    sp->image.username = jstr(auth, "username");
    sp->image.password = jstr(auth, "password");
    sp->uid_base = (uint32_t)uid_base;
    sp->framework = jstr(spec, "framework");
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(spec, "resources");
    /* PyTorch's DataLoader and NCCL want a large /dev/shm: half the memory. */
    sp->shm_mb = jint(res, "memory_mb", 128) / 2;
    if (sp->shm_mb < 64)
        sp->shm_mb = 64;
    sp->devices = gpu_devices(spec);
    /* The OCI seccomp object the agent converted once (runtime.c). */
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(ct, "seccomp");
    if (sc && !cJSON_IsObject(sc)) {
        fail(dir, "the agent's seccomp profile is not an object");
        return -1;
    }
    sp->seccomp = sc;
    return 0;
}

int main(void)
{
    static char *envv[300], *argv[300];
    int ne = 0, na = 0, rc = 1;
    char msg[300], *note = NULL;
    cJSON *auth = NULL;
    shim_spec sp = {0};
    char *text = slurp();
    cJSON *req = text ? cJSON_Parse(text) : NULL;
    const char *dir = jstr(req, "dir");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(req, "spec");
    if (!dir || !cJSON_IsObject(spec)) {
        fail(dir, "the launch request is unreadable");
        goto out;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(msg, sizeof msg, "cannot create %.200s: %s", dir, strerror(errno));
        fail(NULL, msg);
        goto out;
    }
    const char *fw = jstr(spec, "framework");
    sp.program = jstr(spec, "program");
    sp.mount_root = jstr(spec, "mount_root");
    sp.workspace = jstr(spec, "workspace");
    sp.launcher = jstr(req, "launcher");
    if (!fw || !sp.program || !sp.mount_root || !sp.workspace ||
        !util_relpath_valid(sp.program, strlen(sp.program))) {
        fail(dir, "the launch spec is incomplete (is the workspace gone?)");
        goto out;
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(req, "container");
    if (cJSON_IsObject(ct) && container_setup(ct, spec, &sp, dir) != 0)
        goto out;
    if (!sp.crun && strcmp(fw, "native") && !sp.launcher) {
        snprintf(msg, sizeof msg, "no launcher on this node for image %.60s (see --launcher)",
                 jstr(spec, "image") ? jstr(spec, "image") : fw);
        fail(dir, msg);
        goto out;
    }
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(spec, "datasets"))
    {
        const char *name = jstr(d, "name"), *path = jstr(d, "path");
        if (!name || !util_name_valid(name) || !path || sp.ndatasets == SHIM_MAX_DATASETS) {
            snprintf(msg, sizeof msg, "dataset %.64s is missing", name ? name : "?");
            fail(dir, msg);
            goto out;
        }
        sp.ds_name[sp.ndatasets] = name;
        sp.ds_path[sp.ndatasets++] = path;
    }
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(spec, "hide"))
    {
        if (cJSON_IsString(d) && sp.nhide < SHIM_MAX_HIDE - 1)
            sp.hide[sp.nhide++] = d->valuestring;
    }
    if (jstr(req, "agent_dir"))
        sp.hide[sp.nhide++] = jstr(req, "agent_dir");
    /* The contract's variables, then a minimal base the job did not set. */
    static const char *const base[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
        "PYTHONUNBUFFERED=1", NULL};
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(spec, "env"))
    {
        if (!cJSON_IsString(d) || ne >= 280)
            continue;
        size_t len = strlen(d->string) + strlen(d->valuestring) + 2;
        if ((envv[ne] = malloc(len)) != NULL)
            snprintf(envv[ne++], len, "%s=%s", d->string, d->valuestring);
    }
    sp.nenv_own = ne;
    for (int i = 0; base[i]; i++) {
        size_t k = strcspn(base[i], "=");
        int set = 0;
        for (int j = 0; j < ne; j++)
            set |= !strncmp(envv[j], base[i], k + 1);
        if (!set)
            envv[ne++] = (char *)base[i];
    }
    char home[4200];
    snprintf(home, sizeof home, "HOME=%s/workspace", sp.mount_root);
    envv[ne++] = home;
    envv[ne] = NULL;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(spec, "args"))
    {
        if (cJSON_IsString(d) && na < 298)
            argv[na++] = d->valuestring;
    }
    argv[na] = NULL;
    sp.env = envv;
    sp.args = argv;
    sp.agent_lock = jstr(req, "agent_lock");
    sp.lease_ms = jint(req, "lease_ms", 30000);
    sp.grace_ms = jint(req, "grace_ms", 10000);
    const cJSON *cg = cJSON_GetObjectItemCaseSensitive(req, "cgroup");
    if (jstr(cg, "path")) {
        snprintf(sp.cgroup.path, sizeof sp.cgroup.path, "%s", jstr(cg, "path"));
        sp.cgroup.cpu = (int)jint(cg, "cpu", 0);
        sp.cgroup.memory = (int)jint(cg, "memory", 0);
        sp.cgroup.pids = (int)jint(cg, "pids", 0);
    }
    /* The worker spec's share of the node: what its cgroup is limited to. */
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(spec, "resources");
    sp.id = jint(spec, "id", 0);
    sp.cpu_milli = jint(res, "cpus", 0) * 1000;
    sp.memory_mb = jint(res, "memory_mb", 0);
    /* Registry credentials stay out of spec.json (kept in memory for the
     * pull: the detached item is never freed). */
    auth = cJSON_DetachItemFromObjectCaseSensitive((cJSON *)spec, "registry_auth");
    note = cJSON_PrintUnformatted(spec);
    if (shim_start(dir, &sp, note) != 0) {
        fail(dir, "cannot start the shim");
        goto out;
    }
    rc = 0; /* the detached shim goes on with its own copy of all this */
out:
    for (int i = 0; i < sp.nenv_own && i < ne; i++)
        free(envv[i]);
    free(note);
    cJSON_Delete(auth);
    cJSON_Delete(req);
    free(text);
    return rc;
}
