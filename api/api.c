/*
 * api: the route table and path matching.  Owns nothing at run time.
 */
#include "api/api_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define R(m, p, f, b, a) {API_##m, p, f, API_BODY_##b, a}

#define API_ENV_NAME_(n) #n,
const char *const api_env_names[API_ENV_COUNT + 1] = {API_CONTRACT_ENV(API_ENV_NAME_) NULL};

static const api_route routes[] = {
    R(GET, "/healthz", api_healthz, NONE, 0),
    R(GET, "/v1/whoami", api_whoami, NONE, 1),
    R(GET, "/v1/registry/token", api_registry_token, NONE, 0),
    R(POST, "/v1/tenants", api_tenant_create, JSON, 1),
    R(GET, "/v1/tenants", api_tenant_list, NONE, 1),
    R(GET, "/v1/tenants/{}", api_tenant_get, NONE, 1),
    R(POST, "/v1/tenants/{}/users", api_user_create, JSON, 1),
    R(GET, "/v1/tenants/{}/users", api_user_list, NONE, 1),
    R(GET, "/v1/users/{}", api_user_get, NONE, 1),
    R(POST, "/v1/users/{}/tokens", api_token_create, JSON, 1),
    R(GET, "/v1/users/{}/tokens", api_token_list, NONE, 1),
    R(DELETE, "/v1/tokens/{}", api_token_delete, NONE, 1),
    R(GET, "/v1/worker-specs", api_spec_list, NONE, 1),
    R(POST, "/v1/worker-specs", api_spec_create, JSON, 1),
    R(GET, "/v1/worker-specs/{}", api_spec_get, NONE, 1),
    R(PUT, "/v1/worker-specs/{}", api_spec_update, JSON, 1),
    R(GET, "/v1/images", api_image_list, NONE, 1),
    R(POST, "/v1/images", api_image_create, JSON, 1),
    R(GET, "/v1/images/{}", api_image_get, NONE, 1),
    R(POST, "/v1/datasets", api_dataset_create, JSON, 1),
    R(GET, "/v1/datasets", api_dataset_list, NONE, 1),
    R(GET, "/v1/datasets/{}", api_dataset_get, NONE, 1),
    R(DELETE, "/v1/datasets/{}", api_dataset_delete, NONE, 1),
    R(POST, "/v1/datasets/{}/seal", api_dataset_seal, NONE, 1),
    R(GET, "/v1/datasets/{}/files", api_dataset_file_list, NONE, 1),
    R(PUT, "/v1/datasets/{}/files/{*}", api_dataset_file_put, UPLOAD, 1),
    R(GET, "/v1/datasets/{}/files/{*}", api_dataset_file_get, NONE, 1),
    R(DELETE, "/v1/datasets/{}/files/{*}", api_dataset_file_delete, NONE, 1),
    R(POST, "/v1/workspaces", api_workspace_create, JSON, 1),
    R(GET, "/v1/workspaces", api_workspace_list, NONE, 1),
    R(GET, "/v1/workspaces/{}", api_workspace_get, NONE, 1),
    R(DELETE, "/v1/workspaces/{}", api_workspace_delete, NONE, 1),
    R(GET, "/v1/workspaces/{}/files", api_workspace_file_list, NONE, 1),
    R(PUT, "/v1/workspaces/{}/files/{*}", api_workspace_file_put, UPLOAD, 1),
    R(GET, "/v1/workspaces/{}/files/{*}", api_workspace_file_get, NONE, 1),
    R(DELETE, "/v1/workspaces/{}/files/{*}", api_workspace_file_delete, NONE, 1),
    R(POST, "/v1/jobs", api_job_create, JSON, 1),
    R(GET, "/v1/jobs", api_job_list, NONE, 1),
    R(GET, "/v1/jobs/{}", api_job_get, NONE, 1),
    R(DELETE, "/v1/jobs/{}", api_job_delete, NONE, 1),
    R(POST, "/v1/jobs/{}/cancel", api_job_cancel, NONE, 1),
    R(POST, "/v1/jobs/{}/priority", api_job_priority, JSON, 1),
    R(POST, "/v1/jobs/{}/retry", api_job_retry, NONE, 1),
    R(GET, "/v1/jobs/{}/cost", api_job_cost, NONE, 1),
    R(GET, "/v1/jobs/{}/events", api_job_events, NONE, 1),
    R(GET, "/v1/jobs/{}/workers", api_job_workers, NONE, 1),
    R(POST, "/v1/nodes/join-tokens", api_join_token_create, JSON, 1),
    R(GET, "/v1/nodes/join-tokens", api_join_token_list, NONE, 1),
    R(DELETE, "/v1/nodes/join-tokens/{}", api_join_token_revoke, NONE, 1),
    R(GET, "/v1/nodes", api_node_list, NONE, 1),
    R(GET, "/v1/nodes/{}", api_node_get, NONE, 1),
    R(DELETE, "/v1/nodes/{}", api_node_delete, NONE, 1),
    R(POST, "/v1/nodes/{}/drain", api_node_drain, NONE, 1),
    R(POST, "/v1/nodes/{}/undrain", api_node_undrain, NONE, 1),
    R(POST, "/v1/nodes/{}/rotate-token", api_node_rotate_token, NONE, 1),
    R(GET, "/v1/tenants/{}/quota", api_quota_get, NONE, 1),
    R(PUT, "/v1/tenants/{}/quota", api_quota_put, JSON, 1),
    R(POST, "/v1/tenants/{}/credits", api_credit_add, JSON, 1),
    R(GET, "/v1/tenants/{}/budget", api_budget_get, NONE, 1),
    R(PUT, "/v1/tenants/{}/budget", api_budget_put, JSON, 1),
    R(POST, "/v1/quote", api_quote, JSON, 1),
    R(GET, "/v1/quota", api_my_quota, NONE, 1),
    R(GET, "/v1/usage", api_usage, NONE, 1),
    R(GET, "/v1/invoices/{}", api_invoice, NONE, 1),
    R(POST, "/v1/agent/register", api_agent_register, JSON, 0),
    R(POST, "/v1/agent/heartbeat", api_agent_heartbeat, JSON, 2),
    R(GET, "/v1/agent/desired", api_agent_desired, NONE, 2),
    R(PUT, "/v1/agent/logs/{}", api_agent_log, RAW, 2),
    R(GET, "/v1/jobs/{}/logs", api_job_logs, NONE, 1),
    R(GET, "/v1/jobs/{}/metrics", api_job_metrics, NONE, 1),
    {0, NULL, NULL, 0, 0},
};

const api_route *api_routes(void)
{
    return routes;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t api_percent_decode(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        int hi, lo;
        if (r[0] == '%' && (hi = hex_digit(r[1])) >= 0 && (lo = hex_digit(r[2])) >= 0) {
            int v = hi << 4 | lo;
            *w++ = v == 0 ? '\x01' : (char)v;
            r += 2;
            continue;
        }
        *w++ = *r;
    }
    *w = '\0';
    return (size_t)(w - s);
}

enum api_method api_method_parse(const char *s)
{
    if (!strcmp(s, "GET") || !strcmp(s, "HEAD"))
        return API_GET;
    if (!strcmp(s, "POST"))
        return API_POST;
    if (!strcmp(s, "PUT"))
        return API_PUT;
    if (!strcmp(s, "DELETE"))
        return API_DELETE;
    return API_METHOD_OTHER;
}

const char *api_method_name(enum api_method m)
{
    static const char *const names[] = {"GET", "POST", "PUT", "DELETE", "OTHER"};
    return names[m];
}

/* Matches path against pattern; copies the captures one after another into buf. */
static int match(const char *pat, const char *path, const char **param, char *buf)
{
    int n = 0;
    while (*pat) {
        if (pat[0] == '{') {
            int rest = pat[1] == '*';
            size_t len = rest ? strlen(path) : strcspn(path, "/");
            if (len == 0 || n >= API_MAX_PARAMS)
                return 0;
            memcpy(buf, path, len);
            buf[len] = '\0';
            param[n++] = buf;
            buf += len + 1;
            path += len;
            pat += 2;
            if (rest)
                return 1;
            continue;
        }
        if (*pat != *path)
            return 0;
        pat++;
        path++;
    }
    return *path == '\0';
}

const api_route *api_route_match(enum api_method m, const char *path, api_req *rq, char *buf,
                                 int *other_method)
{
    *other_method = 0;
    for (const api_route *r = routes; r->pattern; r++) {
        const char *param[API_MAX_PARAMS] = {0};
        if (!match(r->pattern, path, param, buf))
            continue;
        if (r->method != m) {
            *other_method = 1;
            continue;
        }
        memcpy(rq->param, param, sizeof param);
        return r;
    }
    return NULL;
}

void api_resp_clear(api_resp *rs)
{
    free(rs->body);
    rs->body = NULL;
    if (rs->fd >= 0)
        close(rs->fd);
    rs->fd = -1;
}

void api_healthz(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    (void)rq;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddNumberToObject(o, "schema_version", store_schema_version(ctx->st));
    api_json(rs, 200, o);
}
