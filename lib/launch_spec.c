/*
 * launch_spec: the launch spec's keys, types and bounds (launch_spec.h).
 */
#include "lib/launch_spec.h"

#include <math.h>
#include <string.h>

#include "lib/fmt.h"
#include "lib/util.h"

static const struct {
    const char *name;
    char type; /* i s o a */
    int required;
} keys[] = {
#define LAUNCH_KEY_ROW_(n, t, r) {#n, t, r},
    LAUNCH_KEYS(LAUNCH_KEY_ROW_)
#undef LAUNCH_KEY_ROW_
};

static int of_type(const cJSON *v, char type)
{
    switch (type) {
    case 'i':
        return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0 &&
               floor(v->valuedouble) == v->valuedouble;
    case 's': return cJSON_IsString(v);
    case 'o': return cJSON_IsObject(v);
    default: return cJSON_IsArray(v);
    }
}

/* Every key of the table present where required and of its type. */
static int keys_check(const cJSON *spec, char *why, size_t n)
{
    static const char *const kind[] = {"a whole number", "text", "an object", "an array"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, keys[i].name);
        if ((!v || cJSON_IsNull(v)) && keys[i].required) {
            fmt_cut(why, n, "it has no %s%s", keys[i].name,
                    !strcmp(keys[i].name, "workspace") ? " (is the workspace gone?)" : "");
            return -1;
        }
        if (v && !cJSON_IsNull(v) && !of_type(v, keys[i].type)) {
            fmt_cut(why, n, "its %s is not %s", keys[i].name,
                    kind[strchr("isoa", keys[i].type) - "isoa"]);
            return -1;
        }
    }
    return 0;
}

static const char *env_get(void *arg, const char *name)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(arg, name));
}

/* env: only text, within the bounds, and the contract's variables valid. */
static int env_check(const cJSON *spec, char *why, size_t n)
{
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(env)), *e;
    int count = 0;
    cJSON_ArrayForEach(e, env)
    {
        if (!cJSON_IsString(e) || !e->string || !e->string[0] || strchr(e->string, '=')) {
            fmt_cut(why, n, "its variable %.40s is not NAME=text", e->string ? e->string : "?");
            return -1;
        }
        if (strlen(e->valuestring) > LAUNCH_MAX_ENV_VALUE && strcmp(e->string, "TF_CONFIG")) {
            fmt_cut(why, n, "its variable %.40s is longer than %d bytes", e->string,
                    LAUNCH_MAX_ENV_VALUE);
            return -1;
        }
        if (++count > LAUNCH_MAX_ENV) {
            fmt_cut(why, n, "it sets more than %d variables", LAUNCH_MAX_ENV);
            return -1;
        }
    }
    char sub[200];
    if (launch_env_check(env_get, (void *)env, sub, sizeof sub) != 0) {
        fmt_cut(why, n, "its environment: %s", sub);
        return -1;
    }
    long long rank;
    if (launch_int_text(env_get((void *)env, LAUNCH_NAME(RANK)), 0, LAUNCH_MAX_WORLD, &rank) ||
        rank != (long long)cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(rank))->valuedouble) {
        fmt_cut(why, n, "its RANK is not its rank");
        return -1;
    }
    return 0;
}

/* args, datasets, hide: counts within bounds, and entries of their form. */
static int lists_check(const cJSON *spec, char *why, size_t n)
{
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(args)), *e;
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(datasets));
    if (cJSON_GetArraySize(args) > LAUNCH_MAX_ARGS ||
        cJSON_GetArraySize(ds) > LAUNCH_MAX_DATASETS) {
        fmt_cut(why, n, "it has more than %d arguments or %d datasets", LAUNCH_MAX_ARGS,
                LAUNCH_MAX_DATASETS);
        return -1;
    }
    cJSON_ArrayForEach(e, args)
    {
        if (!cJSON_IsString(e)) {
            fmt_cut(why, n, "an argument is not text");
            return -1;
        }
    }
    cJSON_ArrayForEach(e, ds)
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "path"));
        if (!name || !util_name_valid(name) || !path || path[0] != '/') {
            fmt_cut(why, n, "dataset %.64s is missing (was it deleted?)", name ? name : "?");
            return -1;
        }
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(hide)))
    {
        if (!cJSON_IsString(e) || e->valuestring[0] != '/') {
            fmt_cut(why, n, "a path to hide is not an absolute path");
            return -1;
        }
    }
    return 0;
}

static const char *spec_str(const cJSON *spec, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, key));
}

/* The numbers and paths: ids, rank, resources, program, workspace, digest. */
static int values_check(const cJSON *spec, char *why, size_t n)
{
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(resources));
    const char *rk[] = {"cpus", "memory_mb", "gpus"};
    const double hi[] = {LAUNCH_MAX_CPUS, (double)LAUNCH_MAX_MEMORY_MB, LAUNCH_MAX_GPUS};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(res, rk[i]);
        if (!of_type(v, 'i') || v->valuedouble > hi[i]) {
            fmt_cut(why, n, "its resources' %s is not a whole number from 0 to %.0f", rk[i],
                    hi[i]);
            return -1;
        }
    }
    const char *ids[] = {LAUNCH_KEY(id), LAUNCH_KEY(job_id), LAUNCH_KEY(attempt)};
    for (int i = 0; i < 3; i++)
        if (cJSON_GetObjectItemCaseSensitive(spec, ids[i])->valuedouble < 1) {
            fmt_cut(why, n, "its %s is not above 0", ids[i]);
            return -1;
        }
    const char *prog = spec_str(spec, LAUNCH_KEY(program));
    const char *ws = spec_str(spec, LAUNCH_KEY(workspace));
    const char *dg = spec_str(spec, LAUNCH_KEY(image_digest));
    if (!util_relpath_valid(prog, strlen(prog))) {
        fmt_cut(why, n, "its program is not a path inside the workspace");
        return -1;
    }
    if (ws[0] != '/') {
        fmt_cut(why, n, "its workspace is not an absolute path");
        return -1;
    }
    if (dg && !util_digest_valid(dg)) {
        fmt_cut(why, n, "its image_digest is not sha256:HEX");
        return -1;
    }
    return 0;
}

int launch_spec_check(const cJSON *spec, char *why, size_t n)
{
    if (!cJSON_IsObject(spec)) {
        fmt_cut(why, n, "it is not an object");
        return -1;
    }
    if (keys_check(spec, why, n) != 0 || values_check(spec, why, n) != 0 ||
        lists_check(spec, why, n) != 0 || env_check(spec, why, n) != 0)
        return -1;
    return 0;
}
