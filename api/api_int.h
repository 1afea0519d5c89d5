/*
 * api_int: what the resource files of api/ share: JSON in and out, field
 * validation, role checks and the handler declarations the route table
 * names.  Not for use outside api/.
 */
#ifndef COHORT_API_INT_H
#define COHORT_API_INT_H

#include <cjson/cJSON.h>

#include "api/api.h"
#include "lib/fmt.h"
#include "lib/launch.h"

/* ---- JSON in and out (api_json.c) ---- */

/* Sends obj (consumed) as the JSON body with status. */
void api_json(api_resp *rs, int status, cJSON *obj);
/* Parses the body as one JSON object; on failure fills rs (400) and returns NULL.
 * The caller frees the result with cJSON_Delete. */
cJSON *api_parse_object(const api_req *rq, api_resp *rs);
/* Refuses members not in allowed (NULL-terminated) and duplicate members: 400. */
int api_fields_known(const cJSON *obj, const char *const *allowed, api_resp *rs);

/* Typed members.  Each returns 1 when present and valid, 0 when absent and
 * optional, -1 after filling rs with the field's error. */
int api_str(const cJSON *obj, const char *key, int required, size_t maxlen, const char **out,
            api_resp *rs);
int api_int(const cJSON *obj, const char *key, int required, int64_t min, int64_t max,
            int64_t *out, api_resp *rs);
int api_num(const cJSON *obj, const char *key, int required, double min, double max,
            double *out, api_resp *rs);
int api_bool(const cJSON *obj, const char *key, int required, int *out, api_resp *rs);
/* A member that must be a valid name ([a-z0-9][a-z0-9._-]{0,62}). */
int api_name(const cJSON *obj, const char *key, int required, const char **out, api_resp *rs);

/* Pagination: ?limit (1..API_LIST_MAX) and ?cursor (a positive id). */
int api_page(const api_req *rq, int *limit, int64_t *cursor, api_resp *rs);
/* Parses a decimal id from a path parameter; 0 when not a positive integer. */
int64_t api_id(const char *s);

/* A page of a list: items plus next_cursor (the last id, when the page is full). */
typedef struct api_list {
    cJSON *items; /* made by the first api_list_add when NULL */
    int n;
    int64_t last;
    int limit;      /* the page asked for (api_list_open) */
    int64_t cursor;
} api_list;
/* An empty page for ?limit= and ?cursor=: 0, or -1 with the 400 in rs. */
int api_list_open(const api_req *rq, api_list *pg, api_resp *rs);
/* api_list_done for a page opened by api_list_open. */
void api_list_close(api_resp *rs, api_list *pg, int rc, const char *what);
/* Sends {"items": [...], "next_cursor": "..." | null}; consumes pg->items. */
void api_list_send(api_resp *rs, api_list *pg, int limit);
/* Adds o's "next_cursor": pg's last id when the page of limit is full, else
 * null (limit 0: a list given whole). */
void api_list_next(cJSON *o, const api_list *pg, int limit);
void api_list_add(api_list *pg, cJSON *item, int64_t id);
/* Defines static void NAME(void *arg, const TYPE *row): a store list's row
 * callback that adds TO_JSON(row) to the api_list at arg, keyed by row->id. */
#define API_ROWS(NAME, TYPE, TO_JSON)                                                      \
    static void NAME(void *arg, const TYPE *row)                                           \
    {                                                                                      \
        api_list_add(arg, TO_JSON(row), row->id);                                          \
    }
/* Ends a list handler: sends the page when rc is STORE_OK, else drops it and
 * answers the store's error about what. */
void api_list_done(api_resp *rs, api_list *pg, int limit, int rc, const char *what);

void api_add_time(cJSON *o, const char *key, int64_t ms); /* RFC 3339, or null when 0 */
/* A new object holding "id" and, unless name is NULL, "name": the start of
 * every resource's JSON.  NULL when memory runs out. */
cJSON *api_object(int64_t id, const char *name);
/* key: the string s, or null when s is NULL or "". */
void api_add_text(cJSON *o, const char *key, const char *s);
/* key: the integer v when present, null otherwise. */
void api_add_int_if(cJSON *o, const char *key, int64_t v, int present);
/* A worker's or a node's resources: cpus, memory_mb, gpus and gpu_type (null when ""). */
void api_add_resources(cJSON *o, int64_t cpus, int64_t memory_mb, int64_t gpus,
                       const char *gpu_type);
/* An integer member, printed as digits once: cJSON's own numbers are
 * doubles printed (and read back to check) through printf, which the hot
 * answers (jobs, workers, events) pay for on every field.  The member is
 * raw: it is for output, not to be read back as a number. */
void api_add_int(cJSON *o, const char *key, int64_t v);

/* ---- roles (api_auth.c) ---- */
/* Drops a revoked token from the authentication cache. */
void api_auth_forget(int64_t token_id);
/* Every cached token (a signal from another cohortd may have been lost). */
void api_auth_forget_all(void);
/* Drops the cached node-token lookups of nodes ids (NULL: of every node). */
void api_nodes_forget(const int64_t *ids, size_t n);
/* api_auth_forget here, and a signal that makes every other cohortd on the
 * database forget it too. */
void api_auth_revoked(api_ctx *ctx, int64_t token_id);
int api_is_platform_admin(const store_principal *p);
/* May manage users and tokens of tenant_id. */
int api_is_tenant_admin(const store_principal *p, int64_t tenant_id);
/* May change the tenant's jobs, datasets, workspaces (member or above). */
int api_can_write(const store_principal *p);
/* The tenant whose objects the caller sees: its own. */
int64_t api_tenant_of(const store_principal *p);
/* 403 with a message naming the role needed; returns -1. */
int api_forbid(api_resp *rs, const char *need);

/* Runs fn as a durable write and finishes the response with fin. */
void api_defer(api_resp *rs, store_write_fn fn, void *wctx,
               void (*fin)(api_ctx *ctx, api_resp *rs, void *wctx, int rc));
/* api_defer for a write that many can apply together with others of its
 * kind (store_submit_many). */
void api_defer_many(api_resp *rs, store_write_fn fn, store_write_many_fn many, void *wctx,
                    void (*fin)(api_ctx *ctx, api_resp *rs, void *wctx, int rc));
/* Maps a store error to a response; returns -1. */
int api_store_error(api_resp *rs, int rc, const char *what);
/* Runs fn as a durable write now: 0, or -1 with the store's error answered
 * for what. */
int api_write(api_ctx *ctx, api_resp *rs, store_write_fn fn, void *arg, const char *what);
/* Answers 201 with body (taken) and the Location the format gives. */
void api_created(api_resp *rs, cJSON *body, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A worker's output line of len bytes (no newline): when it is
 * "COHORT_METRIC " and one JSON object, that object re-printed compactly
 * (malloc'd, the caller frees); otherwise NULL. */
char *api_metric_json(const char *line, size_t len);

/* ---- handlers ---- */
void api_healthz(api_ctx *, const api_req *, api_resp *);
void api_whoami(api_ctx *, const api_req *, api_resp *);
void api_tenant_create(api_ctx *, const api_req *, api_resp *);
void api_tenant_list(api_ctx *, const api_req *, api_resp *);
void api_tenant_get(api_ctx *, const api_req *, api_resp *);
void api_user_create(api_ctx *, const api_req *, api_resp *);
void api_user_list(api_ctx *, const api_req *, api_resp *);
void api_user_get(api_ctx *, const api_req *, api_resp *);
void api_token_create(api_ctx *, const api_req *, api_resp *);
void api_token_list(api_ctx *, const api_req *, api_resp *);
void api_token_delete(api_ctx *, const api_req *, api_resp *);
void api_spec_list(api_ctx *, const api_req *, api_resp *);
void api_spec_get(api_ctx *, const api_req *, api_resp *);
void api_spec_create(api_ctx *, const api_req *, api_resp *);
void api_spec_update(api_ctx *, const api_req *, api_resp *);
void api_image_list(api_ctx *, const api_req *, api_resp *);
void api_image_get(api_ctx *, const api_req *, api_resp *);
void api_image_create(api_ctx *, const api_req *, api_resp *);
void api_dataset_create(api_ctx *, const api_req *, api_resp *);
void api_dataset_list(api_ctx *, const api_req *, api_resp *);
void api_dataset_get(api_ctx *, const api_req *, api_resp *);
void api_dataset_delete(api_ctx *, const api_req *, api_resp *);
void api_dataset_seal(api_ctx *, const api_req *, api_resp *);
void api_workspace_create(api_ctx *, const api_req *, api_resp *);
void api_workspace_list(api_ctx *, const api_req *, api_resp *);
void api_workspace_get(api_ctx *, const api_req *, api_resp *);
void api_workspace_delete(api_ctx *, const api_req *, api_resp *);
void api_dataset_file_put(api_ctx *, const api_req *, api_resp *);
void api_dataset_file_get(api_ctx *, const api_req *, api_resp *);
void api_dataset_file_delete(api_ctx *, const api_req *, api_resp *);
void api_dataset_file_list(api_ctx *, const api_req *, api_resp *);
void api_workspace_file_put(api_ctx *, const api_req *, api_resp *);
void api_workspace_file_get(api_ctx *, const api_req *, api_resp *);
void api_workspace_file_delete(api_ctx *, const api_req *, api_resp *);
void api_workspace_file_list(api_ctx *, const api_req *, api_resp *);
void api_job_create(api_ctx *, const api_req *, api_resp *);
void api_job_list(api_ctx *, const api_req *, api_resp *);
void api_job_get(api_ctx *, const api_req *, api_resp *);
void api_job_cancel(api_ctx *, const api_req *, api_resp *);
void api_job_delete(api_ctx *, const api_req *, api_resp *);
void api_job_events(api_ctx *, const api_req *, api_resp *);
void api_job_priority(api_ctx *, const api_req *, api_resp *);
/* A job's estimated maximum into *out (-1 without max_runtime_s): 0, or -1
 * answered 422 when it passes what the platform bills.  Create and quote
 * refuse alike. */
int api_job_estimate(int64_t price_per_hour, int64_t workers, int64_t max_runtime_s,
                     int64_t *out, api_resp *rs);
/* 0 when j's shape could ever fit the nodes, else -1 answered 422 never_fits. */
struct store_job;
int api_job_could_fit(api_ctx *ctx, const struct store_job *j, api_resp *rs);
void api_job_workers(api_ctx *, const api_req *, api_resp *);
void api_join_token_create(api_ctx *, const api_req *, api_resp *);
void api_join_token_list(api_ctx *, const api_req *, api_resp *);
void api_join_token_revoke(api_ctx *, const api_req *, api_resp *);
void api_node_delete(api_ctx *, const api_req *, api_resp *);
void api_node_list(api_ctx *, const api_req *, api_resp *);
void api_node_get(api_ctx *, const api_req *, api_resp *);
void api_node_drain(api_ctx *, const api_req *, api_resp *);
void api_node_undrain(api_ctx *, const api_req *, api_resp *);
void api_node_rotate_token(api_ctx *, const api_req *, api_resp *);
void api_quota_get(api_ctx *, const api_req *, api_resp *);
void api_quota_put(api_ctx *, const api_req *, api_resp *);
void api_agent_register(api_ctx *, const api_req *, api_resp *);
void api_agent_heartbeat(api_ctx *, const api_req *, api_resp *);
void api_agent_desired(api_ctx *, const api_req *, api_resp *);
void api_agent_log(api_ctx *, const api_req *, api_resp *);
void api_job_logs(api_ctx *, const api_req *, api_resp *);
void api_job_metrics(api_ctx *, const api_req *, api_resp *);
void api_job_retry(api_ctx *, const api_req *, api_resp *);
void api_job_cost(api_ctx *, const api_req *, api_resp *);
void api_quote(api_ctx *, const api_req *, api_resp *);
void api_usage(api_ctx *, const api_req *, api_resp *);
void api_my_quota(api_ctx *, const api_req *, api_resp *);
void api_invoice(api_ctx *, const api_req *, api_resp *);
void api_credit_add(api_ctx *, const api_req *, api_resp *);
void api_budget_get(api_ctx *, const api_req *, api_resp *);
void api_budget_put(api_ctx *, const api_req *, api_resp *);
void api_registry_token(api_ctx *, const api_req *, api_resp *);

/* ---- cohortd's registry (api_registry.c) ---- */

/* The repository of ref ("acme/app", without host, tag or digest) when ref
 * lies in cohortd's registry (no host, or ctx->registry's), into repo: 1;
 * 0 when it lies elsewhere. */
int api_registry_repo(const api_ctx *ctx, const char *ref, char *repo, size_t n);
/* Whether the jobs of tenant may pull repo of cohortd's registry: its own
 * namespace and cohort/. */
int api_registry_tenant_may_pull(const char *tenant, const char *repo);
/* A token pulling repo for subject, for an agent: malloc'd, or NULL. */
char *api_registry_pull_token(const api_ctx *ctx, const char *subject, const char *repo);
/*
 * The worker contract: the variables the platform sets in every worker's
 * environment, which a job may not set itself.  One list, read by job
 * validation (api_jobs.c) and by the launch document (api_nodes.c), which
 * names each one as API_ENV(NAME) so that a name outside it cannot compile.
 */
#define API_CONTRACT_ENV(X) LAUNCH_ENV(X) /* lib/launch.h: one list for cohortd, agent, worker */
#define API_ENV_ENUM_(n) API_ENV_##n,
enum api_env { API_CONTRACT_ENV(API_ENV_ENUM_) API_ENV_COUNT };
/* Their names, in that order, then NULL. */
extern const char *const api_env_names[API_ENV_COUNT + 1];
#define API_ENV(n) (api_env_names[API_ENV_##n])

/* Job submission limits, shared with quotes. */
#define API_MAX_WORKERS LAUNCH_MAX_WORLD
#define API_MAX_RUNTIME (30LL * 24 * 3600)
/* The job's cost so far (charged and running ranks, all attempts); -1 on error. */
int64_t api_job_cost_total(api_ctx *ctx, int64_t job_id);
/* The tenant a billing query is about: the caller's own, or for the
 * platform admin the one named by ?tenant=.  404 for a tenant not the
 * caller's.  Fills *id and name[UTIL_NAME_MAX + 1]. */
int api_billing_tenant(api_ctx *ctx, const api_req *rq, int64_t *id, char *name, api_resp *rs);

/* The job in the path when the caller may see it (404 otherwise); caller clears j. */
struct store_job;
int api_job_find(api_ctx *ctx, const api_req *rq, struct store_job *j, api_resp *rs);
/* The page asked for of one of the job in the path's lists (events, metrics):
 * 0 with its id in *job, or -1 with the 400 or 404 in rs. */
int api_job_list_open(api_ctx *ctx, const api_req *rq, api_list *pg, int64_t *job,
                      api_resp *rs);

/* ---- volumes shared with jobs (api_volumes.c, api_files.c) ---- */
#include "storage/store_volume.h"
/* Resolves a volume the caller may see; fills rs with 404 when absent. */
int api_volume_find(api_ctx *ctx, const store_principal *who, store_vol_kind k,
                    const char *name, store_volume *out, api_resp *rs);
/* The caller may change v (member or above of the owning tenant); else 403. */
int api_volume_writable(const store_principal *who, const store_volume *v, api_resp *rs);
/* Opens the volume's root directory (O_DIRECTORY|O_PATH); -1 on error. */
int api_volume_root(api_ctx *ctx, store_vol_kind k, const store_volume *v, int create);
/* The volume's directory on the host, into out[n]: 0, or -1 when it does
 * not fit (out is "" then). */
int api_volume_path(api_ctx *ctx, store_vol_kind k, const store_volume *v, char *out, size_t n)
    __attribute__((warn_unused_result));
/* Removes everything under parent/name, following no symbolic link. */
void api_rm_tree(int parent, const char *name);
/* Bytes of a job's logs on disk (DATA_DIR/logs/<job>). */
int64_t api_logs_job_bytes(api_ctx *ctx, int64_t job);
/* Opens path (already validated) beneath root without following any
 * symlink; returns an fd for a regular file opened O_RDONLY, or -errno. */
int api_open_beneath(int root, const char *path);

#endif
