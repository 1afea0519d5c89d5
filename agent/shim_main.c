/*
 * cohort-shim: started by cohort-agent (posix_spawn) for each worker, with
 * its launch request on standard input:
 *   {"dir", "spec" (the launch spec from cohortd), "launcher", "agent_dir",
 *    "agent_lock", "lease_ms", "grace_ms", "cgroup" ({"path", "cpu", "memory",
 *    "pids"}: the agent's cgroup subtree, absent for none)}
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

int main(void)
{
    static char *envv[300], *argv[300];
    int ne = 0, na = 0;
    char msg[300];
    shim_spec sp = {0};
    char *text = slurp();
    cJSON *req = text ? cJSON_Parse(text) : NULL;
    const char *dir = jstr(req, "dir");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(req, "spec");
    if (!dir || !cJSON_IsObject(spec)) {
        fail(dir, "the launch request is unreadable");
        return 1;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(msg, sizeof msg, "cannot create %.200s: %s", dir, strerror(errno));
        fail(NULL, msg);
        return 1;
    }
    const char *fw = jstr(spec, "framework");
    sp.program = jstr(spec, "program");
    sp.mount_root = jstr(spec, "mount_root");
    sp.workspace = jstr(spec, "workspace");
    sp.launcher = jstr(req, "launcher");
    if (!fw || !sp.program || !sp.mount_root || !sp.workspace ||
        !util_relpath_valid(sp.program, strlen(sp.program))) {
        fail(dir, "the launch spec is incomplete (is the workspace gone?)");
        return 1;
    }
    if (strcmp(fw, "native") && !sp.launcher) {
        snprintf(msg, sizeof msg, "no launcher on this node for image %.60s (see --launcher)",
                 jstr(spec, "image") ? jstr(spec, "image") : fw);
        fail(dir, msg);
        return 1;
    }
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(spec, "datasets"))
    {
        const char *name = jstr(d, "name"), *path = jstr(d, "path");
        if (!name || !util_name_valid(name) || !path || sp.ndatasets == SHIM_MAX_DATASETS) {
            snprintf(msg, sizeof msg, "dataset %.64s is missing", name ? name : "?");
            fail(dir, msg);
            return 1;
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
    char *note = cJSON_PrintUnformatted(spec);
    if (shim_start(dir, &sp, note) != 0) {
        fail(dir, "cannot start the shim");
        return 1;
    }
    return 0; /* the detached shim goes on */
}
