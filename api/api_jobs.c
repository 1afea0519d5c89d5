/*
 * api_jobs: training jobs.
 *   POST /v1/jobs (Idempotency-Key), GET /v1/jobs, GET/DELETE /v1/jobs/{id},
 *   POST /v1/jobs/{id}/cancel, GET /v1/jobs/{id}/events.
 * A submit is validated whole against the catalog and the caller's volumes,
 * priced from the worker spec at that moment, and answered 201 only once
 * its row is committed (the write goes through the store's group commit).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
#include "api/stuse.h"
#include "scheduler/sched_life.h"
#include "storage/store_bill.h"
#include "storage/store_catalog.h"
#include "storage/store_job.h"
#include "storage/store_node.h"

#define MAX_WORKERS API_MAX_WORKERS
#define MAX_DATASETS LAUNCH_MAX_DATASETS
#define MAX_ARGS LAUNCH_MAX_JOB_ARGS
#define MAX_ARG_LEN 4096
#define MAX_ENV LAUNCH_MAX_JOB_ENV
#define MAX_ENV_VALUE LAUNCH_MAX_ENV_VALUE
#define MAX_RUNTIME API_MAX_RUNTIME

/* UTF-8 without control characters. */
static int text_ok(const char *s)
{
    size_t n = strlen(s);
    if (util_utf8_invalid_at(s, n) != n)
        return 0;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
}

static int env_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128 || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
              (*s >= '0' && *s <= '9') || *s == '_'))
            return 0;
    return 1;
}

/* Stored JSON (written by this file, so already valid) goes out as it is. */
static cJSON *raw_or(const char *json, const char *fallback)
{
    return cJSON_CreateRaw(json && json[0] ? json : fallback);
}

/* position and wait (why a pending job waits) come from the scheduler. */
static cJSON *job_json(const store_job *j, int64_t position, const char *wait)
{
    cJSON *o = cJSON_CreateObject();
    api_add_int(o, "id", j->id);
    cJSON_AddStringToObject(o, "name", j->name);
    cJSON_AddStringToObject(o, "tenant", j->tenant);
    cJSON_AddStringToObject(o, "user", j->user);
    cJSON_AddStringToObject(o, "state", store_job_state_name(j->state));
    if (wait && wait[0])
        cJSON_AddStringToObject(o, "reason", wait);
    else if (j->reason[0])
        cJSON_AddStringToObject(o, "reason", j->reason);
    else
        cJSON_AddNullToObject(o, "reason");
    api_add_int_if(o, "position", position, position > 0);
    api_add_int(o, "attempt", j->attempt);
    cJSON_AddStringToObject(o, "image", j->image);
    api_add_text(o, "image_digest", j->image_digest);
    cJSON_AddStringToObject(o, "framework", j->framework);
    cJSON_AddItemToObject(o, "datasets", raw_or(j->datasets_json, "[]"));
    cJSON_AddStringToObject(o, "workspace", j->workspace);
    cJSON_AddStringToObject(o, "code_path", j->code_path);
    cJSON_AddItemToObject(o, "args", raw_or(j->args_json, "[]"));
    cJSON_AddItemToObject(o, "env", raw_or(j->env_json, "{}"));
    api_add_int(o, "epochs", j->epochs);
    cJSON_AddNumberToObject(o, "lr", j->lr);
    api_add_int(o, "batch_size", j->batch_size);
    cJSON_AddStringToObject(o, "worker_spec", j->worker_spec);
    api_add_int(o, "worker_count", j->worker_count);
    api_add_int_if(o, "workers_per_node", j->workers_per_node, j->workers_per_node > 0);
    api_add_int(o, "priority", j->priority);
    api_add_int_if(o, "max_runtime_seconds", j->max_runtime_seconds, j->max_runtime_seconds > 0);
    api_add_int(o, "max_retries", j->max_retries);
    cJSON *r = cJSON_AddObjectToObject(o, "resources");
    api_add_int(r, "cpus", j->cpus);
    api_add_int(r, "memory_mb", j->memory_mb);
    api_add_int(r, "gpus", j->gpus);
    cJSON *p = cJSON_AddObjectToObject(o, "price");
    cJSON_AddStringToObject(p, "currency", j->currency);
    api_add_int(p, "per_worker_hour", j->price_per_hour);
    api_add_int(p, "per_hour", (j->price_per_hour * j->worker_count));
    api_add_int_if(p, "estimated_max", j->estimated_max, j->estimated_max >= 0);
    api_add_time(o, "created_at", j->created_at);
    api_add_time(o, "updated_at", j->updated_at);
    api_add_time(o, "started_at", j->started_at);
    api_add_time(o, "finished_at", j->finished_at);
    return o;
}

/* ---- submit ---- */

struct job_new {
    store_job j;
    int replayed;
};

static store_rc job_insert_write(store_tx *tx, void *arg)
{
    struct job_new *n = arg;
    if (n->j.idem_key[0]) {
        store_job old;
        int rc = store_job_by_idem_tx(tx, n->j.tenant_id, n->j.idem_key, &old);
        if (rc == STORE_OK) {
            int same = util_ct_equal(old.request_hash, n->j.request_hash, UTIL_SHA256_LEN);
            if (!same) {
                store_job_clear(&old);
                return STORE_CONFLICT;
            }
            store_job_clear(&n->j);
            n->j = old;
            n->replayed = 1;
            return STORE_OK;
        }
        if (rc != STORE_NOTFOUND)
            return rc;
    }
    return store_job_insert(tx, &n->j);
}

/* Creates without an Idempotency-Key (nothing to look up first), queued
 * together: their rows in a few statements. */
static store_rc job_insert_many(store_tx *tx, void *const *ctxs, int n)
{
    store_job *js[64];
    int rc = STORE_OK;
    for (int at = 0, k; at < n && rc == STORE_OK; at += k) {
        k = n - at < 64 ? n - at : 64;
        for (int i = 0; i < k; i++)
            js[i] = &((struct job_new *)ctxs[at + i])->j;
        rc = store_job_insert_many(tx, js, k);
    }
    return rc;
}

static void job_insert_done(api_ctx *ctx, api_resp *rs, void *arg, int rc)
{
    struct job_new *n = arg;
    if (rc == STORE_CONFLICT) {
        api_error(rs, 409, "idempotency_conflict", NULL,
                  "this Idempotency-Key was used with a different request body");
    } else if (rc != STORE_OK) {
        api_store_error(rs, rc, "job");
    } else {
        /* The job as stored: every field was set here or by the insert (a replay
         * carries the stored job), so no read-back. */
        api_json(rs, 201, job_json(&n->j, 0, NULL));
        rs->replayed = (char)n->replayed;
        sched_wake(ctx->sched);
        fmt_cut(rs->location, sizeof rs->location, "/v1/jobs/%lld", (long long)n->j.id);
    }
    store_job_clear(&n->j);
    free(n);
}

/* Validates datasets[] and stores it as a JSON array. */
static int job_datasets(api_ctx *ctx, const api_req *rq, const cJSON *in, store_job *j,
                        api_resp *rs)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(in, "datasets");
    cJSON *out = cJSON_CreateArray();
    int rc = -1;
    if (a && !cJSON_IsNull(a)) {
        if (!cJSON_IsArray(a)) {
            api_error(rs, 400, "invalid_type", "datasets", "'datasets' must be an array of names");
            goto out;
        }
        if (cJSON_GetArraySize(a) > MAX_DATASETS) {
            api_error(rs, 422, "invalid_value", "datasets", "at most %d datasets", MAX_DATASETS);
            goto out;
        }
        for (const cJSON *d = a->child; d; d = d->next) {
            store_volume v;
            if (!cJSON_IsString(d) || !util_name_valid(d->valuestring)) {
                api_error(rs, 422, "invalid_value", "datasets",
                          "each dataset must be a name matching [a-z0-9][a-z0-9._-]{0,62}");
                goto out;
            }
            for (const cJSON *e = a->child; e != d; e = e->next) {
                if (!strcmp(e->valuestring, d->valuestring)) {
                    api_error(rs, 422, "invalid_value", "datasets", "dataset '%s' is listed twice",
                              d->valuestring);
                    goto out;
                }
            }
            if (store_volume_get(ctx->st, STORE_DATASET, api_tenant_of(rq->who), d->valuestring,
                                 1, &v) != STORE_OK) {
                api_error(rs, 422, "not_found", "datasets", "no dataset named '%s'",
                          d->valuestring);
                goto out;
            }
            cJSON_AddItemToArray(out, cJSON_CreateString(d->valuestring));
        }
    }
    j->datasets_json = cJSON_PrintUnformatted(out);
    rc = j->datasets_json ? 0 : -1;
out:
    cJSON_Delete(out);
    return rc;
}

static int job_args(const cJSON *in, store_job *j, api_resp *rs)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(in, "args");
    if (a && !cJSON_IsNull(a)) {
        if (!cJSON_IsArray(a)) {
            api_error(rs, 400, "invalid_type", "args", "'args' must be an array of strings");
            return -1;
        }
        if (cJSON_GetArraySize(a) > MAX_ARGS) {
            api_error(rs, 422, "invalid_value", "args", "at most %d args", MAX_ARGS);
            return -1;
        }
        for (const cJSON *s = a->child; s; s = s->next) {
            if (!cJSON_IsString(s)) {
                api_error(rs, 400, "invalid_type", "args", "every arg must be a string");
                return -1;
            }
            if (strlen(s->valuestring) > MAX_ARG_LEN) {
                api_error(rs, 422, "invalid_value", "args", "an arg is longer than %d bytes",
                          MAX_ARG_LEN);
                return -1;
            }
        }
        j->args_json = cJSON_PrintUnformatted(a);
    } else {
        j->args_json = strdup("[]");
    }
    return j->args_json ? 0 : -1;
}

static int job_env(const cJSON *in, store_job *j, api_resp *rs)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(in, "env");
    if (e && !cJSON_IsNull(e)) {
        if (!cJSON_IsObject(e)) {
            api_error(rs, 400, "invalid_type", "env", "'env' must be an object of strings");
            return -1;
        }
        if (cJSON_GetArraySize(e) > MAX_ENV) {
            api_error(rs, 422, "invalid_value", "env", "at most %d variables", MAX_ENV);
            return -1;
        }
        for (const cJSON *v = e->child; v; v = v->next) {
            if (!env_name_ok(v->string)) {
                api_error(rs, 422, "invalid_value", "env",
                          "'%.64s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", v->string);
                return -1;
            }
            for (const char *const *r = api_env_names; *r; r++) {
                if (!strcmp(*r, v->string)) {
                    api_error(rs, 422, "reserved", "env",
                              "%s is set by the platform and cannot be overridden", v->string);
                    return -1;
                }
            }
            if (!strncmp(v->string, "COHORT_", 7)) {
                api_error(rs, 422, "reserved", "env", "COHORT_* variables are the platform's");
                return -1;
            }
            for (const cJSON *p = e->child; p != v; p = p->next) {
                if (!strcmp(p->string, v->string)) {
                    api_error(rs, 400, "duplicate_field", "env", "%.64s appears twice", v->string);
                    return -1;
                }
            }
            if (!cJSON_IsString(v)) {
                api_error(rs, 400, "invalid_type", "env", "the value of %.64s must be a string",
                          v->string);
                return -1;
            }
            if (strlen(v->valuestring) > MAX_ENV_VALUE) {
                api_error(rs, 422, "invalid_value", "env", "the value of %.64s is too long",
                          v->string);
                return -1;
            }
        }
        j->env_json = cJSON_PrintUnformatted(e);
    } else {
        j->env_json = strdup("{}");
    }
    return j->env_json ? 0 : -1;
}

/* code_path must name a regular file inside the workspace, reached without symlinks. */
static int job_code_path(api_ctx *ctx, const store_volume *ws, const char *path, api_resp *rs)
{
    if (!util_relpath_valid(path, strlen(path))) {
        api_error(rs, 422, "invalid_path", "code_path",
                  "code_path must be a relative path inside the workspace, without '..'");
        return -1;
    }
    int root = api_volume_root(ctx, STORE_WORKSPACE, ws, 1);
    int fd = root >= 0 ? api_open_beneath(root, path) : -1;
    if (root >= 0)
        close(root);
    if (fd < 0) {
        api_error(rs, 422, "not_found", "code_path",
                  "no regular file '%.200s' in workspace '%s' (symlinks are not followed)",
                  path, ws->name);
        return -1;
    }
    close(fd);
    return 0;
}


/* What the tenant keeps bounds what it may add: no job while its volumes
 * are past its storage quota, none past max_pending_jobs waiting.  0, or -1
 * answered. */
static int tenant_may_add_a_job(api_ctx *ctx, int64_t tenant, api_resp *rs)
{
    store_quota q;
    /* bytes, then files and directories: what it holds, against its bound */
    const int64_t held[2] = {stuse_used(ctx->stuse, tenant), stuse_files(ctx->stuse, tenant)};
    const int64_t bound[2] = {stuse_quota(ctx->stuse, tenant), stuse_max_files(ctx->stuse)};
    static const char *const what[2] = {"bytes", "files and directories"};
    for (int i = 0; i < 2; i++)
        if (bound[i] >= 0 && held[i] > bound[i]) {
            api_error(rs, 507, "storage_quota_exceeded", NULL,
                      "the tenant's workspaces, datasets (and logs) hold %lld %s, past its bound of "
                      "%lld: free some before submitting (GET /v1/quota)",
                      (long long)held[i], what[i], (long long)bound[i]);
            return -1;
        }
    int rc = store_quota_get(ctx->st, tenant, &q);
    int64_t max = rc == STORE_OK && q.max_pending_jobs >= 0 ? q.max_pending_jobs
                                                            : ctx->default_max_pending;
    int64_t n = 0;
    if (rc == STORE_OK && max >= 0)
        rc = store_job_count_pending(ctx->st, tenant, max, &n);
    if (rc != STORE_OK)
        return api_store_error(rs, rc, "quota");
    if (max >= 0 && n >= max) {
        api_error(rs, 422, "quota_exceeded", "max_pending_jobs",
                  "the tenant has %lld jobs waiting, its max_pending_jobs: submit more as "
                  "they start", (long long)n);
        return -1;
    }
    return 0;
}

/* The names a create refers to, as the body gave them. */
struct job_names {
    const char *name, *image, *ws, *code_path, *spec;
};

/* The body's scalar fields into j and names: 0, or -1 answered. */
static int job_fields(const api_req *rq, const cJSON *in, store_job *j, struct job_names *nm,
                      api_resp *rs)
{
    if (api_str(in, "name", 1, STORE_JOB_NAME_MAX, &nm->name, rs) < 0 ||
        api_name(in, "image", 1, &nm->image, rs) < 0 ||
        api_name(in, "workspace", 1, &nm->ws, rs) < 0 ||
        api_str(in, "code_path", 1, UTIL_PATH_MAX, &nm->code_path, rs) < 0 ||
        api_int(in, "epochs", 1, 1, LAUNCH_MAX_EPOCHS, &j->epochs, rs) < 0 ||
        api_num(in, "lr", 1, 0, LAUNCH_MAX_LR, &j->lr, rs) < 0 ||
        api_int(in, "batch_size", 1, 1, LAUNCH_MAX_BATCH, &j->batch_size, rs) < 0 ||
        api_name(in, "worker_spec", 1, &nm->spec, rs) < 0 ||
        api_int(in, "worker_count", 1, 1, MAX_WORKERS, &j->worker_count, rs) < 0 ||
        api_int(in, "workers_per_node", 0, 1, LAUNCH_MAX_PER_NODE, &j->workers_per_node, rs) < 0 ||
        api_int(in, "priority", 0, -SCHED_PRIORITY_MAX, SCHED_TIER_MAX, &j->priority, rs) < 0 ||
        api_int(in, "max_runtime_seconds", 0, 1, MAX_RUNTIME, &j->max_runtime_seconds, rs) < 0 ||
        api_int(in, "max_retries", 0, 0, 100, &j->max_retries, rs) < 0)
        return -1;
    if (j->priority > SCHED_PRIORITY_MAX && !api_is_platform_admin(rq->who)) {
        api_error(rs, 422, "invalid_value", "priority",
                  "priority must be -%d..%d: above is a tier across tenants, which only a "
                  "platform admin sets", SCHED_PRIORITY_MAX, SCHED_PRIORITY_MAX);
        return -1;
    }
    if (nm->name[0] == '\0' || !text_ok(nm->name)) {
        api_error(rs, 422, "invalid_value", "name",
                  "name must be 1..%d characters without control characters", STORE_JOB_NAME_MAX);
        return -1;
    }
    if (j->lr <= 0) {
        api_error(rs, 422, "invalid_value", "lr", "lr must be greater than 0");
        return -1;
    }
    if (j->workers_per_node > 0 && j->worker_count % j->workers_per_node != 0) {
        api_error(rs, 422, "invalid_value", "workers_per_node",
                  "worker_count (%lld) must be a multiple of workers_per_node (%lld)",
                  (long long)j->worker_count, (long long)j->workers_per_node);
        return -1;
    }
    return 0;
}

/* The image, worker spec and workspace named, copied into j: 0, or -1
 * answered (422 not_found naming the first missing one). */
static int job_refs(api_ctx *ctx, const api_req *rq, const struct job_names *nm, store_job *j,
                    store_volume *ws, api_resp *rs)
{
    store_image im;
    store_spec sp;
    int found = 0;
    /* The references and each dataset stand alone: no snapshot shared
     * between them (a create's reads cost one round trip each). */
    store_read_each(ctx->st);
    int rc = store_job_refs(ctx->st, api_tenant_of(rq->who), nm->image, nm->spec, nm->ws, &im,
                            &sp, ws, &found);
    if (rc != STORE_OK)
        return api_store_error(rs, rc, "job");
    static const struct {
        int bit;
        const char *field, *what;
    } refs[] = {{STORE_REF_IMAGE, "image", "image"},
                {STORE_REF_SPEC, "worker_spec", "worker spec"},
                {STORE_REF_WORKSPACE, "workspace", "workspace"}};
    const char *asked[] = {nm->image, nm->spec, nm->ws};
    for (int i = 0; i < 3; i++)
        if (!(found & refs[i].bit)) {
            api_error(rs, 422, "not_found", refs[i].field, "no %s named '%s'", refs[i].what,
                      asked[i]);
            return -1;
        }
    fmt_cut(j->image, sizeof j->image, "%s", im.name);
    fmt_cut(j->framework, sizeof j->framework, "%s", im.framework);
    fmt_cut(j->workspace, sizeof j->workspace, "%s", ws->name);
    fmt_cut(j->worker_spec, sizeof j->worker_spec, "%s", sp.name);
    j->cpus = sp.cpus;
    j->memory_mb = sp.memory_mb;
    j->gpus = sp.gpus;
    fmt_cut(j->currency, sizeof j->currency, "%s", sp.currency);
    j->price_per_hour = sp.price_per_hour;
    return 0;
}

void api_job_create(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {
        "name", "image", "datasets", "workspace", "code_path", "args", "epochs", "lr",
        "batch_size", "worker_spec", "worker_count", "workers_per_node", "priority",
        "max_runtime_seconds", "max_retries", "env", NULL};
    cJSON *in = NULL;
    struct job_new *n = calloc(1, sizeof *n);
    store_job *j = n ? &n->j : NULL;
    struct job_names nm = {0};
    store_volume ws;
    if (!n) {
        api_error(rs, 500, "internal", NULL, "out of memory");
        return;
    }
    if (!api_can_write(rq->who)) {
        api_forbid(rs, "member");
        goto fail;
    }
    const char *key = rq->header(rq->h, "Idempotency-Key");
    if (key && (strlen(key) == 0 || strlen(key) > STORE_IDEM_MAX || !text_ok(key))) {
        api_error(rs, 400, "invalid_value", NULL,
                  "Idempotency-Key must be 1..%d printable characters", STORE_IDEM_MAX);
        goto fail;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        job_fields(rq, in, j, &nm, rs) || job_refs(ctx, rq, &nm, j, &ws, rs) ||
        job_code_path(ctx, &ws, nm.code_path, rs) || job_datasets(ctx, rq, in, j, rs) ||
        job_args(in, j, rs) || job_env(in, j, rs))
        goto fail;
    if (!j->datasets_json || !j->args_json || !j->env_json) {
        api_error(rs, 500, "internal", NULL, "out of memory");
        goto fail;
    }
    j->tenant_id = api_tenant_of(rq->who);
    j->user_id = rq->who->user.id;
    fmt_cut(j->tenant, sizeof j->tenant, "%s", rq->who->user.tenant);
    fmt_cut(j->user, sizeof j->user, "%s", rq->who->user.name);
    fmt_cut(j->name, sizeof j->name, "%s", nm.name);
    fmt_cut(j->code_path, sizeof j->code_path, "%s", nm.code_path);
    if (api_job_estimate(j->price_per_hour, j->worker_count, j->max_runtime_seconds,
                         &j->estimated_max, rs) ||
        api_job_could_fit(ctx, j, rs) || tenant_may_add_a_job(ctx, j->tenant_id, rs))
        goto fail;
    if (key) {
        fmt_cut(j->idem_key, sizeof j->idem_key, "%s", key);
        util_sha256(rq->body, rq->body_len, j->request_hash);
    }
    cJSON_Delete(in);
    api_defer_many(rs, job_insert_write, key ? NULL : job_insert_many, n, job_insert_done);
    return;
fail:
    cJSON_Delete(in);
    store_job_clear(j);
    free(n);
}

/* ---- read ---- */


/* Adds price.cost_so_far: charged ranks and running ones priced now. */
static cJSON *with_cost(api_ctx *ctx, cJSON *o, const store_job *j)
{
    cJSON *p = cJSON_GetObjectItem(o, "price");
    int64_t cost = j->state == JOB_PENDING && j->attempt == 1 ? 0 : api_job_cost_total(ctx, j->id);
    api_add_int_if(p, "cost_so_far", cost, cost >= 0);
    return o;
}

void api_job_get(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_job j;
    if (api_job_find(ctx, rq, &j, rs))
        return;
    char wait[SCHED_REASON_MAX];
    int64_t pos = j.state == JOB_PENDING ? sched_position(ctx->sched, j.id, wait, sizeof wait)
                                         : (wait[0] = '\0', 0);
    api_json(rs, 200, with_cost(ctx, job_json(&j, pos, wait), &j));
    store_job_clear(&j);
}

struct job_rows {
    api_list pg;
    api_ctx *ctx;
};

static void job_row(void *arg, const store_job *j)
{
    struct job_rows *r = arg;
    char wait[SCHED_REASON_MAX];
    int64_t pos = j->state == JOB_PENDING ? sched_position(r->ctx->sched, j->id, wait, sizeof wait)
                                          : (wait[0] = '\0', 0);
    api_list_add(&r->pg, with_cost(r->ctx, job_json(j, pos, wait), j), j->id);
}

void api_job_list(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_job_filter f = {0};
    if (api_page(rq, &f.limit, &f.before, rs))
        return;
    f.tenant_id = api_is_platform_admin(rq->who) ? 0 : api_tenant_of(rq->who);
    f.state = rq->query(rq->h, "state");
    f.name = rq->query(rq->h, "name");
    if (f.state) {
        if (store_job_state_of(f.state) < 0) {
            api_error(rs, 400, "invalid_value", "state",
                      "state must be PENDING, STARTING, RUNNING, SUCCEEDED, FAILED or CANCELLED");
            return;
        }
    }
    if (f.name && strlen(f.name) > STORE_JOB_NAME_MAX) {
        api_error(rs, 400, "invalid_value", "name", "name filter too long");
        return;
    }
    struct job_rows rows = {.ctx = ctx};
    int rc = store_job_list(ctx->st, &f, job_row, &rows);
    api_list_done(rs, &rows.pg, f.limit, rc, "jobs");
}

static cJSON *event_json(const store_event *e)
{
    cJSON *o = cJSON_CreateObject();
    api_add_int(o, "id", e->id);
    api_add_time(o, "at", e->at);
    api_add_int(o, "attempt", e->attempt);
    api_add_text(o, "from", e->from_state);
    cJSON_AddStringToObject(o, "to", e->to_state);
    api_add_text(o, "reason", e->reason);
    return o;
}

API_ROWS(event_row, store_event, event_json)

int api_job_list_open(api_ctx *ctx, const api_req *rq, api_list *pg, int64_t *job,
                      api_resp *rs)
{
    store_job j;
    if (api_list_open(rq, pg, rs) || api_job_find(ctx, rq, &j, rs))
        return -1;
    *job = j.id;
    store_job_clear(&j);
    return 0;
}

void api_job_events(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    api_list pg;
    int64_t job;
    if (api_job_list_open(ctx, rq, &pg, &job, rs) == 0)
        api_list_close(rs, &pg, store_job_events(ctx->st, job, pg.cursor, pg.limit, event_row, &pg),
                       "events");
}

/* ---- cancel and delete ---- */

struct job_change {
    int64_t tenant_id;
    int64_t id;
    char reason[STORE_REASON_MAX + 1];
    store_job after;
    int deleting; /* a delete: its logs go too once it is done */
};

static store_rc job_cancel_write(store_tx *tx, void *arg)
{
    struct job_change *c = arg;
    store_rc rc = sched_job_end(tx, c->tenant_id, c->id, JOB_CANCELLED, c->reason);
    if (rc == STORE_OK)
        rc = store_job_get_tx(tx, c->tenant_id, c->id, &c->after);
    return rc;
}

/* DATA_DIR/logs/<job> removed, with every attempt's logs. */
static void logs_remove(api_ctx *ctx, int64_t job)
{
    char dir[sizeof ctx->data_dir + 16], name[24];
    int fd = fmt_path(dir, sizeof dir, ctx->data_dir, "logs") == 0
                 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                 : -1;
    if (fd < 0)
        return;
    fmt_cut(name, sizeof name, "%lld", (long long)job);
    api_rm_tree(fd, name);
    close(fd);
}

static void job_change_done(api_ctx *ctx, api_resp *rs, void *arg, int rc)
{
    struct job_change *c = arg;
    if (rc == STORE_JOB_FINAL)
        api_error(rs, 409, "job_finished", NULL, "job %lld has already finished",
                  (long long)c->id);
    else if (rc == STORE_JOB_ACTIVE)
        api_error(rs, 409, "job_active", NULL,
                  "job %lld has not finished: cancel it before deleting it", (long long)c->id);
    else if (rc == STORE_JOB_NOT_RETRYABLE)
        api_error(rs, 409, "job_not_retryable", NULL,
                  "only a FAILED or CANCELLED job can be retried");
    else if (rc == STORE_JOB_STOPPING)
        api_error(rs, 409, "job_stopping", NULL,
                  "job %lld still has workers stopping (they are billed until they end): try "
                  "again when they have ended", (long long)c->id);
    else if (rc != STORE_OK)
        api_store_error(rs, rc, "job");
    else if (c->after.id)
        api_json(rs, 200, job_json(&c->after, 0, NULL));
    else
        rs->status = 204;
    if (rc == STORE_OK && !c->after.id && c->deleting)
        logs_remove(ctx, c->id); /* they count in the tenant's storage until then */
    if (rc == STORE_OK)
        sched_wake(ctx->sched); /* the store tells the agents of its workers */
    store_job_clear(&c->after);
    free(c);
}

static store_rc job_retry_write(store_tx *tx, void *arg);

static store_rc job_delete_write(store_tx *tx, void *arg)
{
    struct job_change *c = arg;
    store_job j;
    int rc = store_job_get_tx(tx, c->tenant_id, c->id, &j);
    if (rc != STORE_OK)
        return rc;
    /* Deleting the job deletes its workers: only once none runs, so every
     * rank's charge is in the ledger (which keeps it after the job is gone). */
    if (!store_job_state_final(j.state))
        rc = STORE_JOB_ACTIVE;
    else if (store_job_live_tx(tx, j.id))
        rc = STORE_JOB_STOPPING;
    else
        rc = store_job_delete(tx, j.id);
    store_job_clear(&j);
    return rc;
}

static void job_change(api_ctx *ctx, const api_req *rq, api_resp *rs, store_write_fn fn)
{
    (void)ctx;
    int64_t id = api_id(rq->param[0]);
    if (id <= 0) {
        api_store_error(rs, STORE_NOTFOUND, "job");
        return;
    }
    /* A viewer learns nothing about ids it cannot see: check existence first. */
    store_job j;
    if (api_job_find(ctx, rq, &j, rs))
        return;
    store_job_clear(&j);
    if (!api_can_write(rq->who)) {
        api_forbid(rs, "member");
        return;
    }
    struct job_change *c = calloc(1, sizeof *c);
    if (!c) {
        api_error(rs, 500, "internal", NULL, "out of memory");
        return;
    }
    c->tenant_id = api_is_platform_admin(rq->who) ? 0 : api_tenant_of(rq->who);
    c->id = id;
    c->deleting = fn == job_delete_write;
    fmt_cut(c->reason, sizeof c->reason, "%s by %s/%s",
             fn == job_retry_write ? "retried" : "cancelled", rq->who->user.tenant,
             rq->who->user.name);
    api_defer(rs, fn, c, job_change_done);
}

/* A FAILED or CANCELLED job goes back to PENDING as its next attempt (and,
 * with its workspace, resumes from its checkpoints). */
static store_rc job_retry_write(store_tx *tx, void *arg)
{
    struct job_change *c = arg;
    store_job j;
    int rc = store_job_get_tx(tx, c->tenant_id, c->id, &j);
    if (rc != STORE_OK)
        return rc;
    if (j.state != JOB_FAILED && j.state != JOB_CANCELLED)
        rc = STORE_JOB_NOT_RETRYABLE;
    else
        rc = store_job_transition(tx, j.id, j.state, JOB_PENDING, c->reason);
    if (rc == STORE_OK)
        rc = store_job_next_attempt(tx, j.id);
    if (rc == STORE_OK)
        rc = store_job_get_tx(tx, c->tenant_id, c->id, &c->after);
    store_job_clear(&j);
    return rc;
}

void api_job_retry(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    job_change(ctx, rq, rs, job_retry_write);
}

struct priority_set {
    int64_t id, priority;
};

static store_rc priority_write(store_tx *tx, void *arg)
{
    const struct priority_set *p = arg;
    return store_job_set_priority(tx, p->id, p->priority, util_now_ms());
}

/*
 * POST /v1/jobs/{id}/priority {"priority": N}: a member reorders its
 * tenant's jobs (-1000..1000); a platform admin also sets a tier (up to
 * SCHED_TIER_MAX), which goes ahead of every tenant's regular jobs.
 */
void api_job_priority(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"priority", NULL};
    cJSON *in = NULL;
    store_job j = {0};
    struct priority_set p = {0, 0};
    /* The body first: a malformed one is refused before anything is looked up. */
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_int(in, "priority", 1, -SCHED_PRIORITY_MAX, SCHED_TIER_MAX, &p.priority, rs) < 0)
        goto out;
    if (api_job_find(ctx, rq, &j, rs))
        goto out;
    if (!api_can_write(rq->who)) {
        api_forbid(rs, "member");
        goto out;
    }
    p.id = j.id;
    if (p.priority > SCHED_PRIORITY_MAX && !api_is_platform_admin(rq->who)) {
        api_error(rs, 422, "invalid_value", "priority",
                  "priority must be -%d..%d: above is a tier across tenants, which only a "
                  "platform admin sets", SCHED_PRIORITY_MAX, SCHED_PRIORITY_MAX);
        goto out;
    }
    int rc = store_write(ctx->st, priority_write, &p);
    if (rc == STORE_NOTFOUND) {
        api_error(rs, 409, "job_finished", NULL, "job %lld has already finished",
                  (long long)p.id);
        goto out;
    }
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "job");
        goto out;
    }
    sched_wake(ctx->sched);
    store_job_clear(&j);
    if (api_job_find(ctx, rq, &j, rs) == 0)
        api_json(rs, 200, job_json(&j, 0, NULL));
out:
    store_job_clear(&j);
    cJSON_Delete(in);
}

void api_job_cancel(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    job_change(ctx, rq, rs, job_cancel_write);
}

void api_job_delete(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    job_change(ctx, rq, rs, job_delete_write);
}

/* ---- workers ---- */

static void worker_row(void *arg, const store_worker *w)
{
    cJSON *o = cJSON_CreateObject();
    api_add_int(o, "id", w->id);
    api_add_int(o, "attempt", w->attempt);
    api_add_int(o, "rank", w->rank);
    api_add_int(o, "node_rank", w->node_rank);
    api_add_int(o, "local_rank", w->local_rank);
    api_add_int(o, "node_id", w->node_id);
    cJSON_AddStringToObject(o, "state", w->state);
    cJSON_AddStringToObject(o, "desired", w->desired);
    api_add_int_if(o, "exit_code", w->exit_code, w->exit_code >= 0);
    api_add_int_if(o, "signal", w->signal, w->signal > 0);
    api_add_text(o, "message", w->message);
    api_add_time(o, "created_at", w->created_at);
    api_add_time(o, "started_at", w->started_at);
    api_add_time(o, "finished_at", w->finished_at);
    /* What its cgroup counted, once it has ended (null where not counted). */
    if (w->cpu_us >= 0) /* a fraction: not api_add_int */
        cJSON_AddNumberToObject(o, "cpu_seconds", (double)w->cpu_us / 1e6);
    else
        cJSON_AddNullToObject(o, "cpu_seconds");
    api_add_int_if(o, "memory_peak_mb", (w->memory_peak + (1 << 20) - 1) >> 20,
                   w->memory_peak >= 0);
    api_add_text(o, "image_digest", w->image_digest);
    api_list_add(arg, o, w->id);
}

void api_job_workers(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_job j;
    api_list pg;
    int64_t attempt = 0;
    const char *a = rq->query(rq->h, "attempt");
    if (api_list_open(rq, &pg, rs))
        return;
    if (a && (attempt = api_id(a)) <= 0) {
        api_error(rs, 400, "invalid_value", "attempt", "attempt must be a positive integer");
        return;
    }
    if (api_job_find(ctx, rq, &j, rs))
        return;
    int rc = store_worker_list(ctx->st, j.id, attempt, pg.cursor, pg.limit, worker_row, &pg);
    store_job_clear(&j);
    api_list_close(rs, &pg, rc, "workers");
}
