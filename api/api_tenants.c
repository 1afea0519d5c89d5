/*
 * api_tenants: tenants, users and API tokens.
 *   POST/GET /v1/tenants, GET /v1/tenants/{t}, POST/GET /v1/tenants/{t}/users,
 *   GET /v1/users/{u}, POST/GET /v1/users/{u}/tokens, DELETE /v1/tokens/{id}.
 * Objects of another tenant are reported missing (404), never forbidden.
 */
#include <stdio.h>
#include <string.h>

#include "api/api_int.h"

#define MAX_TOKEN_LIFETIME (10LL * 365 * 24 * 3600)

static cJSON *tenant_json(const store_tenant *t)
{
    cJSON *o = api_object(t->id, t->name);
    api_add_time(o, "created_at", t->created_at);
    return o;
}

static cJSON *user_json(const store_user *u)
{
    cJSON *o = api_object(u->id, u->name);
    cJSON_AddStringToObject(o, "tenant", u->tenant);
    cJSON_AddStringToObject(o, "role", u->role);
    api_add_time(o, "created_at", u->created_at);
    return o;
}

static cJSON *token_json(const store_token *t)
{
    cJSON *o = api_object(t->id, NULL);
    cJSON_AddNumberToObject(o, "user_id", (double)t->user_id);
    cJSON_AddStringToObject(o, "name", t->name);
    api_add_time(o, "created_at", t->created_at);
    api_add_time(o, "expires_at", t->expires_at);
    api_add_time(o, "revoked_at", t->revoked_at);
    return o;
}

/* The tenant named in the path, when the caller may see it. */
static int tenant_find(api_ctx *ctx, const api_req *rq, store_tenant *t, api_resp *rs)
{
    const char *name = rq->param[0];
    int rc = util_name_valid(name) ? store_tenant_by_name(ctx->st, name, t) : STORE_NOTFOUND;
    if (rc == STORE_OK && !api_is_platform_admin(rq->who) && t->id != api_tenant_of(rq->who))
        rc = STORE_NOTFOUND;
    return rc == STORE_OK ? 0 : api_store_error(rs, rc, "tenant");
}

/* The user named in the path, when the caller may see it. */
static int user_find(api_ctx *ctx, const api_req *rq, store_user *u, api_resp *rs)
{
    int64_t id = api_id(rq->param[0]);
    int rc = id > 0 ? store_user_get(ctx->st, id, u) : STORE_NOTFOUND;
    if (rc == STORE_OK && !api_is_platform_admin(rq->who) && u->tenant_id != api_tenant_of(rq->who))
        rc = STORE_NOTFOUND;
    return rc == STORE_OK ? 0 : api_store_error(rs, rc, "user");
}

struct tenant_new {
    const char *name;
    int64_t id;
};

static store_rc tenant_write(store_tx *tx, void *arg)
{
    struct tenant_new *t = arg;
    return store_tenant_insert(tx, t->name, &t->id);
}

void api_tenant_create(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"name", NULL};
    cJSON *in = NULL;
    struct tenant_new t = {0};
    if (!api_is_platform_admin(rq->who)) {
        api_forbid(rs, "platform_admin");
        goto out;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_name(in, "name", 1, &t.name, rs) < 0)
        goto out;
    if (api_write(ctx, rs, tenant_write, &t, "tenant"))
        goto out;
    store_tenant row = {.id = t.id, .created_at = util_now_ms()};
    fmt_cut(row.name, sizeof row.name, "%s", t.name);
    api_created(rs, tenant_json(&row), "/v1/tenants/%s", t.name);
out:
    cJSON_Delete(in);
}

API_ROWS(tenant_row, store_tenant, tenant_json)

void api_tenant_list(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    api_list pg;
    if (api_list_open(rq, &pg, rs))
        return;
    int rc = STORE_OK;
    if (api_is_platform_admin(rq->who)) {
        rc = store_tenant_list(ctx->st, pg.cursor, pg.limit, tenant_row, &pg);
    } else {
        /* Everyone else sees one tenant: their own. */
        store_tenant t;
        if (pg.cursor == 0 && store_tenant_by_name(ctx->st, rq->who->user.tenant, &t) == STORE_OK)
            tenant_row(&pg, &t);
    }
    api_list_close(rs, &pg, rc, "tenants");
}

void api_tenant_get(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_tenant t;
    if (tenant_find(ctx, rq, &t, rs) == 0)
        api_json(rs, 200, tenant_json(&t));
}

struct user_new {
    int64_t tenant_id;
    const char *name;
    const char *role;
    int64_t id;
};

static store_rc user_write(store_tx *tx, void *arg)
{
    struct user_new *u = arg;
    return store_user_insert(tx, u->tenant_id, u->name, u->role, &u->id);
}

void api_user_create(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"name", "role", NULL};
    cJSON *in = NULL;
    store_tenant t;
    struct user_new u = {0};
    if (tenant_find(ctx, rq, &t, rs))
        goto out;
    if (!api_is_tenant_admin(rq->who, t.id)) {
        api_forbid(rs, "tenant_admin");
        goto out;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_name(in, "name", 1, &u.name, rs) < 0 ||
        api_str(in, "role", 1, 16, &u.role, rs) < 0)
        goto out;
    int platform_role = !strcmp(u.role, "platform_admin");
    if (strcmp(u.role, "tenant_admin") && strcmp(u.role, "member") && strcmp(u.role, "viewer") &&
        !(platform_role && t.is_platform)) {
        api_error(rs, 422, "invalid_value", "role",
                  "role must be tenant_admin, member or viewer");
        goto out;
    }
    /* No one makes a role above its own. */
    if (platform_role && !api_is_platform_admin(rq->who)) {
        api_forbid(rs, "platform_admin");
        goto out;
    }
    u.tenant_id = t.id;
    if (api_write(ctx, rs, user_write, &u, "user"))
        goto out;
    store_user row = {.id = u.id, .tenant_id = t.id, .created_at = util_now_ms()};
    fmt_cut(row.tenant, sizeof row.tenant, "%s", t.name);
    fmt_cut(row.name, sizeof row.name, "%s", u.name);
    fmt_cut(row.role, sizeof row.role, "%s", u.role);
    api_created(rs, user_json(&row), "/v1/users/%lld", (long long)u.id);
out:
    cJSON_Delete(in);
}

API_ROWS(user_row, store_user, user_json)

void api_user_list(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_tenant t;
    api_list pg;
    if (tenant_find(ctx, rq, &t, rs) || api_list_open(rq, &pg, rs))
        return;
    int rc = store_user_list(ctx->st, t.id, pg.cursor, pg.limit, user_row, &pg);
    api_list_close(rs, &pg, rc, "users");
}

void api_user_get(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_user u;
    if (user_find(ctx, rq, &u, rs) == 0)
        api_json(rs, 200, user_json(&u));
}

/* Self, or an admin of the user's tenant. */
/* A user's own tokens, or those of a user of a tenant p administers: but a
 * platform admin's tokens are its own and other platform admins' alone (a
 * tenant admin of the platform tenant would otherwise mint one). */
static int may_manage_tokens(const store_principal *p, const store_user *u)
{
    if (!strcmp(u->role, "platform_admin"))
        return p->user.id == u->id || api_is_platform_admin(p);
    return p->user.id == u->id || api_is_tenant_admin(p, u->tenant_id);
}

struct token_new {
    int64_t user_id;
    const char *name;
    uint8_t hash[UTIL_SHA256_LEN];
    int64_t expires_at;
    int64_t id;
};

static store_rc token_write(store_tx *tx, void *arg)
{
    struct token_new *t = arg;
    return store_token_insert(tx, t->user_id, t->name, t->hash, t->expires_at, &t->id);
}

#define MAX_TOKENS_PER_USER 100

void api_token_create(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"name", "expires_in_seconds", NULL};
    cJSON *in = NULL;
    store_user u;
    struct token_new t = {0};
    int64_t ttl = 0;
    char secret[UTIL_TOKEN_LEN + 1];
    if (user_find(ctx, rq, &u, rs))
        goto out;
    if (!may_manage_tokens(rq->who, &u)) {
        api_forbid(rs, "tenant_admin");
        goto out;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_name(in, "name", 1, &t.name, rs) < 0 ||
        api_int(in, "expires_in_seconds", 0, 1, MAX_TOKEN_LIFETIME, &ttl, rs) < 0)
        goto out;
    /* A bound on what one user keeps: tokens are for scripts and people,
     * not a way around the tenant's own limits. */
    int64_t live = 0;
    int rc = store_token_count_live(ctx->st, u.id, util_now_ms(), &live);
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "token");
        goto out;
    }
    if (live >= MAX_TOKENS_PER_USER) {
        api_error(rs, 422, "quota_exceeded", NULL,
                  "user %s has %d live tokens, the most one may have: revoke one first",
                  u.name, MAX_TOKENS_PER_USER);
        goto out;
    }
    if (util_token_new(secret) != 0) {
        api_error(rs, 500, "internal", NULL, "cannot read random bytes");
        goto out;
    }
    util_sha256(secret, strlen(secret), t.hash);
    t.user_id = u.id;
    t.expires_at = ttl > 0 ? util_now_ms() + ttl * 1000 : 0;
    if (api_write(ctx, rs, token_write, &t, "token"))
        goto out;
    store_token row = {.id = t.id, .user_id = u.id, .created_at = util_now_ms(),
                       .expires_at = t.expires_at};
    fmt_cut(row.name, sizeof row.name, "%s", t.name);
    cJSON *o = token_json(&row);
    cJSON_AddStringToObject(o, "token", secret);
    api_json(rs, 201, o);
out:
    cJSON_Delete(in);
}

API_ROWS(token_row, store_token, token_json)

void api_token_list(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_user u;
    api_list pg;
    if (user_find(ctx, rq, &u, rs) || api_list_open(rq, &pg, rs))
        return;
    if (!may_manage_tokens(rq->who, &u)) {
        api_forbid(rs, "tenant_admin");
        return;
    }
    int rc = store_token_list(ctx->st, u.id, pg.cursor, pg.limit, token_row, &pg);
    api_list_close(rs, &pg, rc, "tokens");
}

struct token_del {
    int64_t id;
};

static store_rc token_revoke_write(store_tx *tx, void *arg)
{
    return store_token_revoke(tx, ((struct token_del *)arg)->id, util_now_ms());
}

void api_token_delete(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_token t;
    int64_t id = api_id(rq->param[0]);
    int rc = id > 0 ? store_token_get(ctx->st, id, &t) : STORE_NOTFOUND;
    if (rc == STORE_OK && !api_is_platform_admin(rq->who) && t.tenant_id != api_tenant_of(rq->who))
        rc = STORE_NOTFOUND;
    if (rc == STORE_OK && t.revoked_at)
        rc = STORE_NOTFOUND;
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "token");
        return;
    }
    store_user owner;
    if ((rc = store_user_get(ctx->st, t.user_id, &owner)) != STORE_OK) {
        api_store_error(rs, rc, "token");
        return;
    }
    if (!may_manage_tokens(rq->who, &owner)) {
        api_forbid(rs, "tenant_admin");
        return;
    }
    struct token_del d = {id};
    if (api_write(ctx, rs, token_revoke_write, &d, "token"))
        return;
    api_auth_revoked(ctx, id);
    rs->status = 204;
}
