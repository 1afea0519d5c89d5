/*
 * api_nodes: the cluster as the platform admin sees it and as agents speak
 * to it.
 *   POST /v1/nodes/join-tokens, GET /v1/nodes, GET /v1/nodes/{id},
 *   POST /v1/nodes/{id}/drain|undrain, GET|PUT /v1/tenants/{t}/quota;
 *   agents: POST /v1/agent/register (join token), POST /v1/agent/heartbeat
 *   and GET /v1/agent/desired (node token).
 * The desired state is level-triggered: every call returns the complete
 * list of workers that should run on the node, each with its launch spec.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_cache.h"
#include "lib/fmt.h"
#include "api/api_int.h"
#include "api/fsquota.h"
#include "api/jobnet.h"
#include "api/stuse.h"
#include "api/seal.h"
#include "scheduler/sched_life.h"
#include "storage/store_catalog.h"
#include "storage/store_job.h"

#define JOIN_TOKEN_MAX_LIFETIME (365LL * 24 * 3600)

static cJSON *node_json(const store_node *n)
{
    cJSON *o = api_object(n->id, n->name);
    cJSON_AddStringToObject(o, "address", n->address);
    cJSON_AddStringToObject(o, "state", n->state);
    cJSON_AddBoolToObject(o, "drained", n->drained);
    cJSON_AddStringToObject(o, "network", n->network);
    api_add_resources(cJSON_AddObjectToObject(o, "capacity"), n->cpus, n->memory_mb, n->gpus,
                      n->gpu_type);
    cJSON *a = cJSON_AddObjectToObject(o, "allocated");
    cJSON_AddNumberToObject(a, "cpus", (double)n->used_cpus);
    cJSON_AddNumberToObject(a, "memory_mb", (double)n->used_memory_mb);
    cJSON_AddNumberToObject(a, "gpus", (double)n->used_gpus);
    cJSON_AddNumberToObject(a, "workers", (double)n->used_workers);
    cJSON *pr = cJSON_AddObjectToObject(o, "ports");
    cJSON_AddNumberToObject(pr, "lo", (double)n->port_lo);
    cJSON_AddNumberToObject(pr, "hi", (double)n->port_hi);
    api_add_time(o, "registered_at", n->registered_at);
    api_add_time(o, "last_heartbeat", n->last_heartbeat);
    api_add_time(o, "revoked_at", n->revoked_at);
    if (n->revoke_reason[0])
        cJSON_AddStringToObject(o, "revoked_reason", n->revoke_reason);
    else
        cJSON_AddNullToObject(o, "revoked_reason");
    if (n->join_token_id > 0)
        cJSON_AddNumberToObject(o, "join_token_id", (double)n->join_token_id);
    else
        cJSON_AddNullToObject(o, "join_token_id");
    api_add_time(o, "token_issued_at", n->token_issued_at);
    /* sent: a new token is out, the old one works until it is used;
     * asked: the next heartbeat sends one */
    if (n->token_next || n->token_rotate)
        cJSON_AddStringToObject(o, "token_rotation", n->token_next ? "sent" : "asked");
    else
        cJSON_AddNullToObject(o, "token_rotation");
    return o;
}

/* ---- admin ---- */

#define JOIN_TOKEN_DEFAULT_LIFETIME 3600
#define JOIN_TOKEN_MAX_USES 100000

struct join_new {
    uint8_t hash[UTIL_SHA256_LEN];
    int64_t expires_at, max_uses;
    int64_t id;
};

static store_rc join_write(store_tx *tx, void *arg)
{
    struct join_new *j = arg;
    return store_join_token_insert(tx, j->hash, j->expires_at, j->max_uses, &j->id);
}

static cJSON *join_json(const store_join_token *t)
{
    cJSON *o = api_object(t->id, NULL);
    int64_t now = util_now_ms();
    api_add_time(o, "created_at", t->created_at);
    api_add_time(o, "expires_at", t->expires_at);
    api_add_time(o, "revoked_at", t->revoked_at);
    if (t->max_uses > 0)
        cJSON_AddNumberToObject(o, "uses", (double)t->max_uses);
    else
        cJSON_AddNullToObject(o, "uses");
    cJSON_AddNumberToObject(o, "used", (double)t->uses);
    cJSON_AddStringToObject(o, "state", t->revoked_at         ? "revoked"
                                        : t->expires_at > 0 && t->expires_at <= now ? "expired"
                                        : t->max_uses > 0 && t->uses >= t->max_uses ? "used"
                                                                                     : "live");
    return o;
}

/*
 * A join token admits `uses` nodes (default 1; 0: any number, for a fleet
 * brought up at once) for `expires_in_seconds` (default an hour, at most a
 * year): a leaked one is worth little, and every node it admitted is named
 * by join_token_id.
 */
void api_join_token_create(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"expires_in_seconds", "uses", NULL};
    cJSON *in = NULL;
    int64_t ttl = JOIN_TOKEN_DEFAULT_LIFETIME, uses = 1;
    char secret[UTIL_TOKEN_LEN + 1];
    struct join_new j = {0};
    if (!api_is_platform_admin(rq->who)) {
        api_forbid(rs, "platform_admin");
        goto out;
    }
    if (rq->body_len > 0 && (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
                             api_int(in, "expires_in_seconds", 0, 1, JOIN_TOKEN_MAX_LIFETIME,
                                     &ttl, rs) < 0 ||
                             api_int(in, "uses", 0, 0, JOIN_TOKEN_MAX_USES, &uses, rs) < 0))
        goto out;
    if (util_token_new(secret) != 0) {
        api_error(rs, 500, "internal", NULL, "cannot read random bytes");
        goto out;
    }
    util_sha256(secret, strlen(secret), j.hash);
    j.expires_at = util_now_ms() + ttl * 1000;
    j.max_uses = uses;
    if (api_write(ctx, rs, join_write, &j, "join token"))
        goto out;
    store_join_token t = {j.id, util_now_ms(), j.expires_at, 0, j.max_uses, 0};
    cJSON *o = join_json(&t);
    cJSON_AddStringToObject(o, "token", secret);
    api_json(rs, 201, o);
out:
    cJSON_Delete(in);
}

API_ROWS(join_list_row, store_join_token, join_json)

/* A page of a platform admin's list opened into pg: 0, or -1 (answered). */
static int admin_list_open(const api_req *rq, api_list *pg, api_resp *rs)
{
    if (!api_is_platform_admin(rq->who))
        return api_forbid(rs, "platform_admin");
    return api_list_open(rq, pg, rs) ? -1 : 0;
}

void api_join_token_list(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    api_list pg;
    if (admin_list_open(rq, &pg, rs))
        return;
    int rc = store_join_token_list(ctx->st, pg.cursor, pg.limit, join_list_row, &pg);
    api_list_close(rs, &pg, rc, "join tokens");
}

struct revoke {
    int64_t id, now;
    store_tx *tx;
    const char *reason; /* the node's, NULL for none; also its workers' end */
};

static store_rc join_revoke_write(store_tx *tx, void *arg)
{
    const struct revoke *r = arg;
    return store_join_token_revoke(tx, r->id, r->now);
}

/* Revokes a join token: it admits no node from now on (the nodes it
 * admitted stay; DELETE /v1/nodes/{id} revokes a node). */
void api_join_token_revoke(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    struct revoke r = {api_id(rq->param[0]), util_now_ms(), NULL, NULL};
    if (!api_is_platform_admin(rq->who)) {
        api_forbid(rs, "platform_admin");
        return;
    }
    if (r.id <= 0) {
        api_store_error(rs, STORE_NOTFOUND, "join token");
        return;
    }
    if (api_write(ctx, rs, join_revoke_write, &r, "join token"))
        return;
    api_json(rs, 200, api_object(r.id, NULL));
}

API_ROWS(node_row, store_node, node_json)

void api_node_list(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    api_list pg;
    if (admin_list_open(rq, &pg, rs))
        return;
    int rc = store_node_list(ctx->st, pg.cursor, pg.limit, node_row, &pg);
    api_list_close(rs, &pg, rc, "nodes");
}

static int node_find(api_ctx *ctx, const api_req *rq, store_node *n, api_resp *rs)
{
    if (!api_is_platform_admin(rq->who))
        return api_forbid(rs, "platform_admin");
    int64_t id = api_id(rq->param[0]);
    int rc = id > 0 ? store_node_get(ctx->st, id, n) : STORE_NOTFOUND;
    return rc == STORE_OK ? 0 : api_store_error(rs, rc, "node");
}

/* A revoked node is history: 0 when n is not, else -1 answered 409. */
static int node_not_revoked(const store_node *n, api_resp *rs)
{
    if (!n->revoked_at)
        return 0;
    api_error(rs, 409, "conflict", NULL, "node %lld is revoked: register the machine again",
              (long long)n->id);
    return -1;
}

void api_node_get(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_node n;
    if (node_find(ctx, rq, &n, rs) == 0)
        api_json(rs, 200, node_json(&n));
}

/* Writes the drained flag of the node given. */
static store_rc drain_write(store_tx *tx, void *arg)
{
    const store_node *n = arg;
    return store_node_set_drained(tx, n->id, n->drained);
}

static void node_set_drained(api_ctx *ctx, const api_req *rq, api_resp *rs, int on)
{
    store_node n;
    if (node_find(ctx, rq, &n, rs) || node_not_revoked(&n, rs))
        return;
    n.drained = on;
    if (api_write(ctx, rs, drain_write, &n, "node"))
        return;
    sched_wake(ctx->sched);
    api_json(rs, 200, node_json(&n));
}

static void revoked_job(void *arg, int64_t job_id)
{
    struct revoke *r = arg;
    sched_job_eval(r->tx, job_id);
}

static store_rc node_revoke_write(store_tx *tx, void *arg)
{
    struct revoke *r = arg;
    r->tx = tx;
    int rc = store_node_revoke(tx, r->id, r->now, r->reason);
    if (rc == STORE_OK)
        rc = store_worker_lose_node(tx, r->id, r->now, r->reason ? r->reason : "node revoked",
                                    revoked_job, r);
    return rc;
}

/* Revokes a node: its token is refused from now on, its workers are lost
 * (their jobs go on as after any lost node: retried or failed), and its
 * row stays, with revoked_at. */
void api_node_delete(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_node n;
    if (node_find(ctx, rq, &n, rs) || node_not_revoked(&n, rs))
        return;
    struct revoke r = {n.id, util_now_ms(), NULL, NULL};
    if (api_write(ctx, rs, node_revoke_write, &r, "node"))
        return;
    sched_wake(ctx->sched);
    if (store_node_get(ctx->st, n.id, &n) != STORE_OK) {
        api_store_error(rs, STORE_EIO, "node");
        return;
    }
    api_json(rs, 200, node_json(&n));
}

static store_rc rotate_ask_write(store_tx *tx, void *arg)
{
    return store_node_token_ask(tx, *(const int64_t *)arg);
}

/* Asks for a new token for a node: its agent gets one with its next
 * heartbeat, and the old one is refused once the new one is used.  For a
 * token known to be leaked, revoke the node instead: whoever holds a
 * token is handed its successor. */
void api_node_rotate_token(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_node n;
    if (node_find(ctx, rq, &n, rs) || node_not_revoked(&n, rs))
        return;
    if (api_write(ctx, rs, rotate_ask_write, &n.id, "node"))
        return;
    if (store_node_get(ctx->st, n.id, &n) != STORE_OK) {
        api_store_error(rs, STORE_EIO, "node");
        return;
    }
    api_json(rs, 202, node_json(&n));
}

void api_node_drain(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    node_set_drained(ctx, rq, rs, 1);
}

void api_node_undrain(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    node_set_drained(ctx, rq, rs, 0);
}

/* ---- quotas ---- */

/* A quota as set: null where no limit (or, for the last two, where the
 * platform's default applies). */
static cJSON *quota_json(const store_quota *q)
{
    cJSON *o = cJSON_CreateObject();
    const char *names[] = {"max_running_jobs", "max_workers",       "max_cpus",
                           "max_gpus",         "max_storage_bytes", "max_pending_jobs"};
    int64_t v[] = {q->max_running_jobs, q->max_workers,       q->max_cpus,
                   q->max_gpus,         q->max_storage_bytes, q->max_pending_jobs};
    for (int i = 0; i < 6; i++) {
        if (v[i] >= 0)
            cJSON_AddNumberToObject(o, names[i], (double)v[i]);
        else
            cJSON_AddNullToObject(o, names[i]);
    }
    return o;
}

static int tenant_named(api_ctx *ctx, const api_req *rq, store_tenant *t, api_resp *rs)
{
    int rc = util_name_valid(rq->param[0]) ? store_tenant_by_name(ctx->st, rq->param[0], t)
                                           : STORE_NOTFOUND;
    if (rc == STORE_OK && !api_is_platform_admin(rq->who) && t->id != api_tenant_of(rq->who))
        rc = STORE_NOTFOUND;
    return rc == STORE_OK ? 0 : api_store_error(rs, rc, "tenant");
}

void api_quota_get(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_tenant t;
    store_quota q;
    if (tenant_named(ctx, rq, &t, rs))
        return;
    int rc = store_quota_get(ctx->st, t.id, &q);
    if (rc != STORE_OK)
        api_store_error(rs, rc, "quota");
    else
        api_json(rs, 200, quota_json(&q));
}

static store_rc quota_write(store_tx *tx, void *arg)
{
    return store_quota_put(tx, arg);
}

void api_quota_put(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"max_running_jobs", "max_workers",       "max_cpus",
                                         "max_gpus",         "max_storage_bytes", "max_pending_jobs",
                                         NULL};
    cJSON *in = NULL;
    store_tenant t;
    store_quota q = {0, -1, -1, -1, -1, -1, -1};
    if (tenant_named(ctx, rq, &t, rs))
        goto out;
    if (!api_is_platform_admin(rq->who)) {
        api_forbid(rs, "platform_admin");
        goto out;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_int(in, "max_running_jobs", 0, 0, 1000000, &q.max_running_jobs, rs) < 0 ||
        api_int(in, "max_workers", 0, 0, 100000000, &q.max_workers, rs) < 0 ||
        api_int(in, "max_cpus", 0, 0, 1000000000, &q.max_cpus, rs) < 0 ||
        api_int(in, "max_gpus", 0, 0, 100000000, &q.max_gpus, rs) < 0 ||
        api_int(in, "max_storage_bytes", 0, 0, 1LL << 60, &q.max_storage_bytes, rs) < 0 ||
        api_int(in, "max_pending_jobs", 0, 0, 100000000, &q.max_pending_jobs, rs) < 0)
        goto out;
    q.tenant_id = t.id;
    if (api_write(ctx, rs, quota_write, &q, "quota"))
        goto out;
    /* On btrfs the file system holds the storage quota too. */
    if (ctx->fsq && fsquota_limit(ctx->fsq, t.id, stuse_quota(ctx->stuse, t.id)) != 0)
        fprintf(stderr, "cohortd: tenant %s: cannot set its btrfs qgroup's limit\n", t.name);
    sched_wake(ctx->sched);
    api_json(rs, 200, quota_json(&q));
out:
    cJSON_Delete(in);
}

/* ---- agents ---- */

/*
 * Node tokens to nodes, cached: a node is never removed and its token
 * never changes, and what an entry says of its state and drain is dropped
 * by api_on_nodes whenever a commit (here or in another cohortd) changes
 * them: a drain, a node marked down.  An entry also lives at most
 * NODE_TTL_MS.  Its capacities in use are as of its lookup.
 */
#define NODE_SLOTS 4096
#define NODE_TTL_MS 5000
#define NODE_FORGET_MAX 64 /* more nodes at once: forget them all */

API_CACHE(nodes, NODE_SLOTS, store_node);

struct id_set {
    const int64_t *ids;
    size_t n;
};

static int node_among(const void *value, void *arg)
{
    const struct id_set *set = arg;
    for (size_t i = 0; i < set->n; i++)
        if (set->ids[i] == ((const store_node *)value)->id)
            return 1;
    return 0;
}

void api_nodes_forget(const int64_t *ids, size_t n)
{
    struct id_set set = {ids, n};
    api_cache_forget(&nodes, ids && n <= NODE_FORGET_MAX ? node_among : NULL, &set);
}

void api_on_nodes(void *arg, const int64_t *ids, size_t n)
{
    api_ctx *ctx = arg;
    api_nodes_forget(ids, n);
    sched_nodes_changed(ctx->sched, ids, n);
}

static store_rc promote_write(store_tx *tx, void *arg)
{
    int64_t id;
    return store_node_token_promote(tx, arg, util_now_ms(), &id);
}

/* A token that is no node's own may be a node's next one, sent with a
 * heartbeat: its first use makes it the node's token (and the old one is
 * refused from then on).  STORE_OK then, else STORE_NOTFOUND. */
static store_rc node_token_promote(api_ctx *ctx, uint8_t h[UTIL_SHA256_LEN])
{
    int64_t id;
    store_rc rc = store_node_by_next_token(ctx->st, h, &id);
    return rc == STORE_OK ? store_write(ctx->st, promote_write, h) : rc;
}

/*
 * A token a node gave up is presented again: two parties hold the node's
 * token, one of them not its agent, and cohortd cannot tell which.  The
 * node is revoked, as OAuth's refresh tokens are on reuse: its workers are
 * lost and every holder is refused.  A token a rotation replaced counts
 * past NODE_REUSE_MS (requests of the agent's own still on their way come
 * sooner); a successor forgotten for a newer one before its first use
 * counts at once, as the agent never uses a successor it did not keep:
 * only a second party's heartbeats make cohortd hand out another.
 */
#define NODE_REUSE_MS 5000
#define NODE_REUSE_WHY                                                                     \
    "node revoked: a token it gave up was used again (two holders of its token)"

static int node_token_reused(api_ctx *ctx, const uint8_t h[UTIL_SHA256_LEN])
{
    int64_t id, at, now = util_now_ms();
    int replaced;
    if (store_node_by_retired_token(ctx->st, h, &id, &at, &replaced) != STORE_OK)
        return 0;
    if (!replaced || now - at > NODE_REUSE_MS) {
        struct revoke r = {id, now, NULL, NODE_REUSE_WHY};
        if (store_write(ctx->st, node_revoke_write, &r) == STORE_OK) {
            fprintf(stderr, "cohortd: node %lld: %s\n", (long long)id, NODE_REUSE_WHY);
            sched_wake(ctx->sched);
        }
    }
    return 1;
}

int api_authenticate_node(api_ctx *ctx, const char *authorization, store_node *node,
                          api_resp *rs)
{
    if (!authorization || strncmp(authorization, "Bearer ", 7) != 0 ||
        strlen(authorization + 7) != UTIL_TOKEN_LEN) {
        api_error(rs, 401, "unauthorized", NULL, "send 'Authorization: Bearer <node token>'");
        return -1;
    }
    uint8_t h[UTIL_SHA256_LEN];
    util_sha256(authorization + 7, UTIL_TOKEN_LEN, h);
    int64_t now = util_now_ms();
    if (api_cache_get(&nodes, h, now, node))
        return 0;
    int rc = store_node_by_token(ctx->st, h, node);
    if (rc == STORE_NOTFOUND && node_token_promote(ctx, h) == STORE_OK)
        rc = store_node_by_token(ctx->st, h, node);
    if (rc == STORE_NOTFOUND && node_token_reused(ctx, h)) {
        api_error(rs, 401, "unauthorized", NULL, "unknown node token");
        return -1;
    }
    if (rc == STORE_NOTFOUND) {
        api_error(rs, 401, "unauthorized", NULL, "unknown node token");
        return -1;
    }
    if (rc != STORE_OK)
        return api_store_error(rs, rc, "node");
    api_cache_put(&nodes, h, now + NODE_TTL_MS, node);
    return 0;
}

struct node_new {
    store_node n;
    uint8_t hash[UTIL_SHA256_LEN];
    uint8_t join[UTIL_SHA256_LEN]; /* the join token's, counted in the same write */
};

static store_rc node_write(store_tx *tx, void *arg)
{
    struct node_new *nn = arg;
    int rc = store_join_token_use(tx, nn->join, util_now_ms(), &nn->n.join_token_id);
    if (rc == STORE_NOTFOUND)
        return STORE_JOIN_REFUSED;
    return rc == STORE_OK ? store_node_insert(tx, &nn->n, nn->hash) : rc;
}

void api_agent_register(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"join_token", "name", "address", "cpus", "memory_mb",
                                         "gpus", "gpu_type", "port_lo", "port_hi", "network",
                                         NULL};
    cJSON *in = NULL;
    struct node_new nn = {0};
    const char *join, *name, *addr, *gpu_type = NULL, *network = NULL;
    char secret[UTIL_TOKEN_LEN + 1];
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_str(in, "join_token", 1, 256, &join, rs) < 0)
        goto out;
    util_sha256(join, strlen(join), nn.join);
    if (store_join_token_check(ctx->st, nn.join, util_now_ms()) != STORE_OK) {
        api_error(rs, 401, "unauthorized", "join_token", "the join token is not valid");
        goto out;
    }
    if (api_name(in, "name", 1, &name, rs) < 0 ||
        api_str(in, "address", 1, STORE_ADDR_MAX, &addr, rs) < 0 ||
        api_int(in, "cpus", 1, 1, 1 << 20, &nn.n.cpus, rs) < 0 ||
        api_int(in, "memory_mb", 1, 1, 1LL << 40, &nn.n.memory_mb, rs) < 0 ||
        api_int(in, "gpus", 0, 0, 1024, &nn.n.gpus, rs) < 0 ||
        api_name(in, "gpu_type", 0, &gpu_type, rs) < 0 ||
        api_int(in, "port_lo", 1, 1024, 65535, &nn.n.port_lo, rs) < 0 ||
        api_int(in, "port_hi", 1, 1024, 65535, &nn.n.port_hi, rs) < 0 ||
        api_str(in, "network", 0, 8, &network, rs) < 0)
        goto out;
    if (network && strcmp(network, "job") && strcmp(network, "host")) {
        api_error(rs, 422, "invalid_value", "network", "network must be \"job\" or \"host\"");
        goto out;
    }
    fmt_cut(nn.n.network, sizeof nn.n.network, "%s", network ? network : "host");
    struct in_addr v4;
    if (!strcmp(nn.n.network, "job") && inet_pton(AF_INET, addr, &v4) != 1) {
        api_error(rs, 422, "invalid_value", "address",
                  "a node that gives jobs networks of their own registers with an IPv4 "
                  "address (the overlay between nodes runs over it)");
        goto out;
    }
    if (nn.n.port_hi < nn.n.port_lo) {
        api_error(rs, 422, "invalid_value", "port_hi", "port_hi is below port_lo");
        goto out;
    }
    if (!util_host_valid(addr)) {
        api_error(rs, 422, "invalid_value", "address",
                  "address must be a host name or an IP address");
        goto out;
    }
    fmt_cut(nn.n.name, sizeof nn.n.name, "%s", name);
    fmt_cut(nn.n.address, sizeof nn.n.address, "%s", addr);
    if (gpu_type)
        fmt_cut(nn.n.gpu_type, sizeof nn.n.gpu_type, "%s", gpu_type);
    if (util_token_new(secret) != 0) {
        api_error(rs, 500, "internal", NULL, "cannot read random bytes");
        goto out;
    }
    util_sha256(secret, strlen(secret), nn.hash);
    int rc = store_write(ctx->st, node_write, &nn);
    if (rc == STORE_JOIN_REFUSED) { /* used up, or revoked, since the check above */
        api_error(rs, 401, "unauthorized", "join_token", "the join token is not valid");
        goto out;
    }
    if (rc == STORE_CONFLICT) {
        api_error(rs, 409, "conflict", "name", "a node named '%s' is registered already", name);
        goto out;
    }
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "node");
        goto out;
    }
    sched_wake(ctx->sched);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "node_id", (double)nn.n.id);
    cJSON_AddStringToObject(o, "node_token", secret);
    cJSON_AddNumberToObject(o, "heartbeat_seconds", (double)ctx->heartbeat_s);
    cJSON_AddNumberToObject(o, "lease_seconds", (double)ctx->lease_s);
    api_json(rs, 201, o);
out:
    cJSON_Delete(in);
}

#define REPORT_MAX 4096

struct report {
    int64_t node_id;
    char network[8]; /* to store: the agent says another than the node's; "" */
    int n;
    struct {
        int64_t id, exit_code, signal, cpu_us, memory_peak, hidden;
        char state[12];
        char message[256];
        char digest[80]; /* "" when not reported */
    } w[REPORT_MAX];
    int changed;
};

/*
 * 1 when worker *id ran another image than its job's pinned digest (ranks
 * of one placement that resolved the tag at once, across a re-tag): the
 * worker is then failed, with why in msg, and the attempt with it.
 */
static int digest_differs(store_tx *tx, const int64_t *id, const char *digest, char *msg,
                          size_t n)
{
    store_worker w;
    store_job j;
    int differs = 0;
    if (store_worker_get_tx(tx, *id, &w) != STORE_OK)
        return 0;
    if (store_job_get_tx(tx, 0, w.job_id, &j) != STORE_OK)
        return 0;
    if (j.image_digest[0] && strcmp(j.image_digest, digest)) {
        fmt_cut(msg, n, "its image resolved to %.19s..., not the job's %.19s...: the tag "
                         "moved while the job started",
                 digest, j.image_digest);
        differs = 1;
    }
    store_job_clear(&j);
    return differs;
}

static store_rc heartbeat_write(store_tx *tx, void *arg)
{
    struct report *r = arg;
    int64_t now = util_now_ms();
    int rc = store_node_heartbeat(tx, r->node_id, now);
    if (rc == STORE_OK && r->network[0])
        rc = store_node_set_network(tx, r->node_id, r->network);
    int64_t jobs[REPORT_MAX];
    int nj = 0;
    for (int i = 0; rc == STORE_OK && i < r->n; i++) {
        if (r->w[i].digest[0]) {
            int d = store_worker_digest(tx, r->w[i].id, r->node_id, r->w[i].digest);
            if (d != STORE_OK && d != STORE_NOTFOUND)
                return d;
            if (d == STORE_OK && digest_differs(tx, &r->w[i].id, r->w[i].digest,
                                                r->w[i].message, sizeof r->w[i].message))
                fmt_cut(r->w[i].state, sizeof r->w[i].state, "failed");
        }
        if (!strcmp(r->w[i].state, "starting")) { /* pulling its image: no transition */
            int p = store_worker_phase(tx, r->w[i].id, r->node_id, r->w[i].message);
            if (p != STORE_OK && p != STORE_NOTFOUND)
                return p;
            continue;
        }
        int c = store_worker_report(tx, r->w[i].id, r->node_id, r->w[i].state, r->w[i].exit_code,
                                    r->w[i].signal, r->w[i].message, now);
        if (c == STORE_OK && (r->w[i].cpu_us >= 0 || r->w[i].memory_peak >= 0))
            c = store_worker_usage(tx, r->w[i].id, r->node_id, r->w[i].cpu_us,
                                   r->w[i].memory_peak);
        if (c == STORE_NOTFOUND)
            continue; /* unchanged, or not this node's */
        if (c != STORE_OK)
            return c;
        store_worker w;
        if (store_worker_get_tx(tx, r->w[i].id, &w) == STORE_OK)
            jobs[nj++] = w.job_id;
        r->changed = 1;
    }
    for (int i = 0; rc == STORE_OK && i < nj; i++)
        rc = sched_job_eval(tx, jobs[i]);
    return rc;
}

/* One worker of a heartbeat's "workers", read into r's next slot: 0, or
 * -1 answered. */
static int report_worker(const cJSON *w, struct report *r, api_resp *rs)
{
    static const char *const wfields[] = {"id",           "state",       "exit_code",
                                          "signal",       "message",     "cpu_us",
                                          "memory_peak",  "image_digest", "hidden_bytes",
                                          NULL};
    const char *state, *msg = NULL, *digest = NULL;
    int64_t id, code = -1, sig = 0, cpu_us = -1, mem_peak = -1, hidden = 0;
    if (r->n == REPORT_MAX) {
        api_error(rs, 413, "too_large", "workers", "at most %d workers a heartbeat", REPORT_MAX);
        return -1;
    }
    if (!cJSON_IsObject(w)) {
        api_error(rs, 400, "invalid_type", "workers", "each worker must be an object");
        return -1;
    }
    if (api_fields_known(w, wfields, rs) || api_int(w, "id", 1, 1, INT64_MAX / 2, &id, rs) < 0 ||
        api_str(w, "state", 1, 11, &state, rs) < 0 ||
        api_int(w, "exit_code", 0, 0, 255, &code, rs) < 0 ||
        api_int(w, "signal", 0, 0, 64, &sig, rs) < 0 || api_str(w, "message", 0, 255, &msg, rs) < 0 ||
        api_int(w, "cpu_us", 0, 0, INT64_MAX / 2, &cpu_us, rs) < 0 ||
        api_int(w, "memory_peak", 0, 0, INT64_MAX / 2, &mem_peak, rs) < 0 ||
        api_str(w, "image_digest", 0, UTIL_DIGEST_LEN, &digest, rs) < 0 ||
        api_int(w, "hidden_bytes", 0, 0, INT64_MAX / 2, &hidden, rs) < 0)
        return -1;
    if (strcmp(state, "running") && strcmp(state, "exited") && strcmp(state, "failed") &&
        strcmp(state, "starting")) {
        api_error(rs, 422, "invalid_value", "workers",
                  "state must be starting, running, exited or failed");
        return -1;
    }
    if (digest && !util_digest_valid(digest)) {
        api_error(rs, 422, "invalid_value", "image_digest", "image_digest must be sha256:HEX");
        return -1;
    }
    fmt_cut(r->w[r->n].digest, sizeof r->w[r->n].digest, "%s", digest ? digest : "");
    r->w[r->n].id = id;
    r->w[r->n].exit_code = code;
    r->w[r->n].signal = sig;
    r->w[r->n].cpu_us = cpu_us;
    r->w[r->n].memory_peak = mem_peak;
    r->w[r->n].hidden = hidden;
    fmt_cut(r->w[r->n].state, sizeof r->w[r->n].state, "%s", state);
    fmt_cut(r->w[r->n].message, sizeof r->w[r->n].message, "%s", msg ? msg : "");
    r->n++;
    return 0;
}

/* A heartbeat's body into r: its workers, and the network its agent runs
 * now (an agent restarted with another --network: the node is that kind
 * from now on; job networks only at an IPv4 address, as at registration).
 * The parsed body into *in (the caller deletes it); 0, or -1 answered. */
static int report_read(const api_req *rq, struct report *r, cJSON **in, api_resp *rs)
{
    static const char *const fields[] = {"workers", "network", NULL};
    const char *net = NULL;
    struct in_addr v4;
    if (!(*in = api_parse_object(rq, rs)) || api_fields_known(*in, fields, rs))
        return -1;
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(*in, "workers");
    if (ws && !cJSON_IsArray(ws)) {
        api_error(rs, 400, "invalid_type", "workers", "'workers' must be an array");
        return -1;
    }
    if (api_str(*in, "network", 0, 8, &net, rs) < 0)
        return -1;
    if (net && strcmp(net, "job") && strcmp(net, "host")) {
        api_error(rs, 422, "invalid_value", "network", "network must be \"job\" or \"host\"");
        return -1;
    }
    if (net && strcmp(net, rq->node->network) &&
        (strcmp(net, "job") || inet_pton(AF_INET, rq->node->address, &v4) == 1))
        fmt_cut(r->network, sizeof r->network, "%s", net);
    for (const cJSON *w = ws ? ws->child : NULL; w; w = w->next)
        if (report_worker(w, r, rs) != 0)
            return -1;
    return 0;
}

/* What the node's running workers hide in deleted, open files, to their
 * tenants' storage use (stuse_hidden); a worker that hides nothing (any
 * more) drops out.  Only this node's own workers count. */
static void report_hidden(api_ctx *ctx, const struct report *r)
{
    int64_t now = util_now_ms();
    for (int i = 0; i < r->n; i++) {
        store_worker w;
        store_job j;
        if (strcmp(r->w[i].state, "running") || r->w[i].hidden <= 0) { /* ended, or hides none */
            stuse_hidden(ctx->stuse, r->w[i].id, 0, 0, now);
            continue;
        }
        if (store_worker_get(ctx->st, r->w[i].id, &w) != STORE_OK || w.node_id != r->node_id ||
            store_job_get(ctx->st, 0, w.job_id, &j) != STORE_OK)
            continue;
        stuse_hidden(ctx->stuse, r->w[i].id, j.tenant_id, r->w[i].hidden, now);
        store_job_clear(&j);
    }
}

struct token_next {
    int64_t id;
    uint8_t hash[UTIL_SHA256_LEN];
};

static store_rc token_next_write(store_tx *tx, void *arg)
{
    struct token_next *t = arg;
    return store_node_token_next(tx, t->id, t->hash, util_now_ms());
}

/* A node whose token rotation is asked for, or due by its age, is sent a
 * new token in its heartbeat's answer o ("node_token").  Until the agent
 * uses it, every heartbeat sends another (the one before is forgotten),
 * so an answer lost on the way costs nothing; nothing is sent when the
 * new token cannot be made or kept. */
static void token_hand_out(api_ctx *ctx, const store_node *n, cJSON *o)
{
    char secret[UTIL_TOKEN_LEN + 1];
    struct token_next t = {n->id, {0}};
    int64_t age_ms = util_now_ms() - n->token_issued_at;
    if (!n->token_rotate &&
        (ctx->node_token_rotate_s <= 0 || age_ms < ctx->node_token_rotate_s * 1000))
        return;
    if (util_token_new(secret) != 0)
        return;
    util_sha256(secret, strlen(secret), t.hash);
    if (store_write(ctx->st, token_next_write, &t) == STORE_OK)
        cJSON_AddStringToObject(o, "node_token", secret);
}

void api_agent_heartbeat(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    cJSON *in = NULL;
    struct report *r = calloc(1, sizeof *r);
    if (!r) {
        api_error(rs, 500, "internal", NULL, "out of memory");
        return;
    }
    r->node_id = rq->node->id;
    if (report_read(rq, r, &in, rs) != 0)
        goto out;
    /* Only alive, and known up (and of the same network): written with the
     * others within half a second. */
    int up = !strcmp(rq->node->state, "up");
    int rc = r->n == 0 && up && !r->network[0] &&
                     api_beats_note(ctx, r->node_id, util_now_ms()) == 0
                 ? STORE_OK
                 : store_write(ctx->st, heartbeat_write, r);
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "heartbeat");
        goto out;
    }
    report_hidden(ctx, r);
    if (!up)
        api_nodes_forget(&r->node_id, 1); /* it is up again */
    if (r->changed)
        sched_wake(ctx->sched); /* a failed rank may have stopped its gang */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "heartbeat_seconds", (double)ctx->heartbeat_s);
    cJSON_AddNumberToObject(o, "lease_seconds", (double)ctx->lease_s);
    token_hand_out(ctx, rq->node, o);
    api_json(rs, 200, o);
out:
    cJSON_Delete(in);
    free(r);
}

/* Shortest decimal that reads back as v. */
static void fmt_double(double v, char *out, size_t n)
{
    fmt_cut(out, n, "%.15g", v);
    if (strtod(out, NULL) != v)
        fmt_cut(out, n, "%.17g", v);
}

static void env_add(cJSON *env, const char *k, const char *v)
{
    cJSON_AddStringToObject(env, k, v);
}

static void env_addi(cJSON *env, const char *k, int64_t v)
{
    char b[24];
    fmt_cut(b, sizeof b, "%lld", (long long)v);
    env_add(env, k, b);
}

struct tf_ports {
    int64_t n;
    char (*addr)[64];
    int64_t *port;
};

static void tf_port_row(void *arg, int64_t rank, const char *address, int64_t port)
{
    struct tf_ports *t = arg;
    if (rank < 0 || rank >= t->n || !address)
        return;
    fmt_cut(t->addr[rank], sizeof t->addr[rank], "%s", address);
    t->port[rank] = port;
}

/* TF_CONFIG: every worker of the attempt at its node's address and the
 * port reserved for its rank there, and this worker's index. */
static void tf_config(api_ctx *ctx, const store_job *j, const store_worker *w,
                      const store_node *master, const jobnet *net, cJSON *env)
{
    char ov[24];
    struct tf_ports t = {j->worker_count, calloc((size_t)j->worker_count, sizeof *t.addr),
                         calloc((size_t)j->worker_count, sizeof *t.port)};
    util_buf tf = {0};
    if (t.addr && t.port)
        store_port_list(ctx->st, j->id, w->attempt, tf_port_row, &t);
    util_buf_printf(&tf, "{\"cluster\":{\"worker\":[");
    for (int64_t r = 0; r < j->worker_count; r++) {
        /* A placement from before ports per rank existed: rank 0's node and
         * the ports after MASTER_PORT, as then. */
        int known = t.port && t.port[r] > 0;
        util_buf_printf(&tf, "%s\"%s:%lld\"", r ? "," : "",
                        jobnet_map(net, known ? t.addr[r] : master->address, ov, sizeof ov),
                        (long long)(known ? t.port[r] : j->master_port + r));
    }
    util_buf_printf(&tf, "]},\"task\":{\"type\":\"worker\",\"index\":%lld}}", (long long)w->rank);
    env_add(env, API_ENV(TF_CONFIG), tf.buf ? tf.buf : "{}");
    free(tf.buf);
    free(t.addr);
    free(t.port);
}

struct desired {
    api_ctx *ctx;
    const store_node *node;
    cJSON *items;
    int failed;
    jobnet net; /* of the last attempt seen: a node's workers come by job */
};

/* The password of im as the agent needs it: opened when sealed, as kept
 * when it predates sealing.  0, or -1 (said on stderr: the pull will be
 * refused, and the job's reason says so). */
static int open_password(api_ctx *ctx, const store_image *im, char *out, size_t n)
{
    if (!seal_is_sealed(im->password))
        return fmt_whole(out, n, "%s", im->password);
    if (ctx->seal && seal_decrypt(ctx->seal, im->password, out, n) == 0)
        return 0;
    fprintf(stderr, "cohortd: the password of image %s cannot be opened with this cohortd's "
                    "secrets.key\n", im->name);
    return -1;
}

/* A token pulling the job's image from cohortd's registry, for minutes, when
 * the image lies there in a repository the job's tenant may pull (its own
 * namespace, or cohort/): the agent has no other credentials for it. */
static void add_pull_token(api_ctx *ctx, const store_job *j, const char *ref, cJSON *o)
{
    char repo[256], subject[64];
    if (!api_registry_repo(ctx, ref, repo, sizeof repo) ||
        !api_registry_tenant_may_pull(j->tenant, repo))
        return;
    fmt_cut(subject, sizeof subject, "job/%lld", (long long)j->id);
    char *t = api_registry_pull_token(ctx, subject, repo);
    if (t)
        cJSON_AddStringToObject(o, LAUNCH_KEY(registry_token), t);
    free(t);
}

/* The complete launch spec of one worker. */
/* The launch spec's workspace, datasets (their names also into dl) and the
 * storage hidden from the worker. */
static void launch_volumes(api_ctx *ctx, const store_job *j, cJSON *o, util_buf *dl)
{
    char path[4400];
    store_volume ws;
    /* Volumes, by their host paths; the agent binds them under mount_root. */
    if (store_volume_get(ctx->st, STORE_WORKSPACE, j->tenant_id, j->workspace, 0, &ws) == STORE_OK) {
        if (api_volume_path(ctx, STORE_WORKSPACE, &ws, path, sizeof path) == 0)
            cJSON_AddStringToObject(o, LAUNCH_KEY(workspace), path);
        else
            cJSON_AddNullToObject(o, LAUNCH_KEY(workspace)); /* the agent refuses it, saying so */
    } else {
        cJSON_AddNullToObject(o, LAUNCH_KEY(workspace));
    }
    cJSON *ds = cJSON_AddArrayToObject(o, LAUNCH_KEY(datasets));
    cJSON *names = cJSON_Parse(j->datasets_json);
    const cJSON *d;
    cJSON_ArrayForEach(d, names)
    {
        store_volume v;
        if (!cJSON_IsString(d))
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", d->valuestring);
        if (store_volume_get(ctx->st, STORE_DATASET, j->tenant_id, d->valuestring, 1, &v) ==
                STORE_OK &&
            api_volume_path(ctx, STORE_DATASET, &v, path, sizeof path) == 0) {
            cJSON_AddStringToObject(e, "path", path);
        } else {
            cJSON_AddNullToObject(e, "path");
        }
        cJSON_AddItemToArray(ds, e);
        util_buf_printf(dl, "%s%s", dl->len ? "," : "", d->valuestring);
    }
    cJSON_Delete(names);
    /* Storage the worker must not see: every tenant's volumes. */
    cJSON *hide = cJSON_AddArrayToObject(o, LAUNCH_KEY(hide));
    if (fmt_path(path, sizeof path, ctx->data_dir, "volumes") == 0)
        cJSON_AddItemToArray(hide, cJSON_CreateString(path));

}

/* The launch spec's environment: the worker contract's, then the job's own. */
static void launch_env(api_ctx *ctx, const store_worker *w, const store_job *j,
                       const store_node *master, const jobnet *net, const char *datasets,
                       cJSON *o)
{
    char buf[64], ov[24];
    /* The worker contract's environment, then the job's own variables. */
    cJSON *env = cJSON_AddObjectToObject(o, LAUNCH_KEY(env));
    env_add(env, API_ENV(MASTER_ADDR), jobnet_map(net, master->address, ov, sizeof ov));
    env_addi(env, API_ENV(MASTER_PORT), j->master_port);
    env_addi(env, API_ENV(WORLD_SIZE), j->worker_count);
    env_addi(env, API_ENV(RANK), w->rank);
    env_addi(env, API_ENV(LOCAL_RANK), w->local_rank);
    env_addi(env, API_ENV(NODE_RANK), w->node_rank);
    env_addi(env, API_ENV(WORKER_PER_NODE), j->placed_per_node);
    env_add(env, API_ENV(BACKEND), j->gpus > 0 ? "nccl" : "gloo");
    env_add(env, API_ENV(DATASETS_PATH), API_MOUNT_ROOT "/datasets");
    env_add(env, API_ENV(DATASETS), datasets);
    env_add(env, API_ENV(WORKSPACE), API_MOUNT_ROOT "/workspace");
    env_addi(env, API_ENV(EPOCHS), j->epochs);
    fmt_double(j->lr, buf, sizeof buf);
    env_add(env, API_ENV(LR), buf);
    env_addi(env, API_ENV(BATCH_SIZE), j->batch_size);
    /* cohort-worker's rendezvous store admits only the attempt's ranks. */
    if (j->rdzv_secret[0])
        env_add(env, API_ENV(COHORT_RDZV_SECRET), j->rdzv_secret);
    if (!strcmp(j->framework, "tensorflow"))
        tf_config(ctx, j, w, master, net, env);
    cJSON *user_env = cJSON_Parse(j->env_json);
    const cJSON *e;
    cJSON_ArrayForEach(e, user_env)
    {
        if (cJSON_IsString(e) && !cJSON_GetObjectItemCaseSensitive(env, e->string))
            env_add(env, e->string, e->valuestring);
    }
    cJSON_Delete(user_env);
    /* Over the overlay, Gloo and NCCL find their peers on eth0 (they would
     * take the address the hostname resolves to: the loopback), unless the
     * job says otherwise. */
    static const char *const ifnames[] = {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"};
    for (int i = 0; net && net->nodes > 0 && i < 2; i++)
        if (!cJSON_GetObjectItemCaseSensitive(env, ifnames[i]))
            env_add(env, ifnames[i], "eth0");

}

/* The launch spec's arguments after the program. */
static void launch_args(const store_worker *w, const store_job *j, cJSON *o)
{
    char buf[64];
    /* Arguments after the program: --local_rank=N as torch.distributed.launch does. */
    cJSON *args = cJSON_AddArrayToObject(o, LAUNCH_KEY(args));
    if (strcmp(j->framework, "tensorflow")) {
        fmt_cut(buf, sizeof buf, "--local_rank=%lld", (long long)w->local_rank);
        cJSON_AddItemToArray(args, cJSON_CreateString(buf));
    }
    cJSON *user_args = cJSON_Parse(j->args_json);
    const cJSON *a;
    cJSON_ArrayForEach(a, user_args)
    {
        if (cJSON_IsString(a))
            cJSON_AddItemToArray(args, cJSON_CreateString(a->valuestring));
    }
    cJSON_Delete(user_args);
}

static cJSON *launch_spec(api_ctx *ctx, const store_worker *w, const store_job *j,
                          const store_node *master, const jobnet *net)
{
    util_buf dl = {0}; /* the datasets' names, for DATASETS */
    cJSON *o = api_object(w->id, NULL);
    cJSON_AddNumberToObject(o, LAUNCH_KEY(job_id), (double)j->id);
    cJSON_AddNumberToObject(o, LAUNCH_KEY(attempt), (double)w->attempt);
    cJSON_AddNumberToObject(o, LAUNCH_KEY(rank), (double)w->rank);
    cJSON_AddStringToObject(o, LAUNCH_KEY(image), j->image);
    cJSON_AddStringToObject(o, LAUNCH_KEY(framework), j->framework);
    /* The image as the job's tenant sees it (its own private one first);
     * credentials go only to the agent that pulls it. */
    store_image im;
    if (store_image_get(ctx->st, j->tenant_id, j->image, &im) == STORE_OK && im.reference[0]) {
        cJSON_AddStringToObject(o, LAUNCH_KEY(image_ref), im.reference);
        if (!im.username[0])
            add_pull_token(ctx, j, im.reference, o);
        char plain[STORE_CRED_SEALED_MAX + 1] = "";
        if (im.username[0] && open_password(ctx, &im, plain, sizeof plain) == 0) {
            cJSON *auth = cJSON_AddObjectToObject(o, LAUNCH_KEY(registry_auth));
            cJSON_AddStringToObject(auth, "username", im.username);
            cJSON_AddStringToObject(auth, "password", plain);
        }
        memset(plain, 0, sizeof plain);
        memset(im.password, 0, sizeof im.password);
    }
    /* Pinned by the first rank that resolved it: a re-tag mid-job changes
     * nothing for the ranks and attempts still to start. */
    if (j->image_digest[0])
        cJSON_AddStringToObject(o, LAUNCH_KEY(image_digest), j->image_digest);
    /* The tenant's own host uid range: container root is API_UID_BASE +
     * tenant id x 65536 on the host, a range no other tenant shares. */
    if (j->tenant_id > 0 && j->tenant_id < API_UID_TENANTS)
        cJSON_AddNumberToObject(o, LAUNCH_KEY(uid_base),
                                (double)(API_UID_BASE + j->tenant_id * 65536LL));
    cJSON_AddStringToObject(o, LAUNCH_KEY(program), j->code_path);
    cJSON_AddStringToObject(o, LAUNCH_KEY(mount_root), API_MOUNT_ROOT);
    cJSON *res = cJSON_AddObjectToObject(o, LAUNCH_KEY(resources));
    cJSON_AddNumberToObject(res, "cpus", (double)j->cpus);
    cJSON_AddNumberToObject(res, "memory_mb", (double)j->memory_mb);
    cJSON_AddNumberToObject(res, "gpus", (double)j->gpus);
    launch_volumes(ctx, j, o, &dl);
    launch_env(ctx, w, j, master, net, dl.buf ? dl.buf : "", o);
    free(dl.buf);
    launch_args(w, j, o);
    return o;
}

static void desired_row(void *arg, const store_worker *w)
{
    struct desired *d = arg;
    store_job j;
    store_node master;
    if (store_job_get(d->ctx->st, 0, w->job_id, &j) != STORE_OK) {
        d->failed = 1;
        return;
    }
    if (d->net.job_id != w->job_id || d->net.attempt != w->attempt) {
        jobnet_clear(&d->net);
        if (jobnet_load(d->ctx->st, w->job_id, w->attempt, j.rdzv_secret, &d->net) != STORE_OK)
            d->failed = 1;
    }
    /* The node of rank 0 was recorded when the gang was placed. */
    if (!d->failed && store_node_get(d->ctx->st, j.master_node_id, &master) == STORE_OK) {
        cJSON *spec = launch_spec(d->ctx, w, &j, &master, &d->net);
        cJSON *net = jobnet_spec(&d->net, w->node_rank);
        if (net)
            cJSON_AddItemToObject(spec, LAUNCH_KEY(job_network), net);
        cJSON_AddItemToArray(d->items, spec);
    } else {
        d->failed = 1;
    }
    store_job_clear(&j);
}

#define DESIRED_WAIT_MAX 60

void api_agent_desired(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    const char *v = rq->query(rq->h, "version"), *w = rq->query(rq->h, "wait");
    uint64_t known = v ? strtoull(v, NULL, 10) : 0;
    int64_t wait = w ? api_id(w) : 0;
    /* The version is read before the snapshot the list comes from: whatever
     * commits after it bumps past it and wakes the next poll.  The request's
     * snapshot (opened to authenticate the node) may be older: end it. */
    store_read_end(ctx->st);
    uint64_t version = sched_version(ctx->sched, rq->node->id);
    store_read_begin(ctx->st);
    /* Another version than the one known, even a lower one (the agent's
     * last answer came from another cohortd, whose versions are its own):
     * answer at once. */
    if (!rq->waited && wait > 0 && v && version == known) {
        rs->wait_version = known;
        rs->wait_node = rq->node->id;
        rs->wait_ms = (wait > DESIRED_WAIT_MAX ? DESIRED_WAIT_MAX : wait) * 1000;
        return;
    }
    /* A poll that waited was authenticated before its wait: its node's
     * drain is read again. */
    store_node now = *rq->node;
    int rc = rq->waited ? store_node_get(ctx->st, now.id, &now) : STORE_OK;
    struct desired d = {ctx, rq->node, cJSON_CreateArray(), 0, {0}};
    if (rc == STORE_OK)
        rc = store_worker_desired(ctx->st, rq->node->id, desired_row, &d);
    jobnet_clear(&d.net);
    if (rc != STORE_OK || d.failed) {
        cJSON_Delete(d.items);
        api_store_error(rs, rc != STORE_OK ? rc : STORE_EIO, "desired state");
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "node_id", (double)rq->node->id);
    char vb[24];
    fmt_cut(vb, sizeof vb, "%llu", (unsigned long long)version);
    cJSON_AddStringToObject(o, "version", vb);
    cJSON_AddBoolToObject(o, "drained", now.drained);
    cJSON_AddItemToObject(o, "workers", d.items);
    api_json(rs, 200, o);
}
