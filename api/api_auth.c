/*
 * api_auth: bearer tokens to principals, role checks, the first platform
 * admin, and GET /v1/whoami.
 *
 * Owns a small cache of token hash -> principal, so most requests skip the
 * token query.  It is exact because every revocation goes through
 * api_auth_forget, in this cohortd and, by a store signal, in every other
 * one on the same database (api_on_signal); an entry also lives at most
 * CACHE_TTL_MS and never past the token's own expiry.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api_cache.h"
#include "lib/fmt.h"
#include "api/api_int.h"

#define TOKEN_MIN 16
#define TOKEN_MAX 256
#define CACHE_SLOTS 1024
#define CACHE_TTL_MS 10000

API_CACHE(tokens, CACHE_SLOTS, store_principal);

static int same_token(const void *value, void *arg)
{
    return ((const store_principal *)value)->token_id == *(const int64_t *)arg;
}

void api_auth_forget(int64_t token_id)
{
    api_cache_forget(&tokens, same_token, &token_id);
}

void api_auth_revoked(api_ctx *ctx, int64_t token_id)
{
    char what[40];
    api_auth_forget(token_id);
    fmt_cut(what, sizeof what, "forget %lld", (long long)token_id);
    store_signal(ctx->st, what);
}

void api_auth_forget_all(void)
{
    api_cache_forget(&tokens, NULL, NULL);
}

int api_authenticate_admin(api_ctx *ctx, const char *authorization, store_principal *who,
                           api_resp *rs)
{
    if (api_authenticate(ctx, authorization, who, rs) != 0)
        return -1;
    return api_is_platform_admin(who) ? 0 : api_forbid(rs, "platform_admin");
}

int api_authenticate(api_ctx *ctx, const char *authorization, store_principal *who,
                     api_resp *rs)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0) {
        api_error(rs, 401, "unauthorized", NULL,
                  "send 'Authorization: Bearer <token>' with an API token");
        return -1;
    }
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t n = strlen(tok);
    if (n < TOKEN_MIN || n > TOKEN_MAX) {
        api_error(rs, 401, "unauthorized", NULL, "the token is not valid");
        return -1;
    }
    uint8_t h[UTIL_SHA256_LEN];
    util_sha256(tok, n, h);
    int64_t now = util_now_ms();
    if (!api_cache_get(&tokens, h, now, who)) {
        int rc = store_token_lookup(ctx->st, h, now, who);
        if (rc == STORE_NOTFOUND) {
            api_error(rs, 401, "unauthorized", NULL, "the token is not valid, expired or revoked");
            return -1;
        }
        if (rc != STORE_OK)
            return api_store_error(rs, rc, "token");
        int64_t until = now + CACHE_TTL_MS;
        if (who->token_expires_at > 0 && who->token_expires_at < until)
            until = who->token_expires_at;
        api_cache_put(&tokens, h, until, who);
    }
    fmt_cut(rs->tenant, sizeof rs->tenant, "%s", who->user.tenant);
    return 0;
}

int api_is_platform_admin(const store_principal *p)
{
    return !strcmp(p->user.role, "platform_admin");
}

int api_is_tenant_admin(const store_principal *p, int64_t tenant_id)
{
    return api_is_platform_admin(p) ||
           (!strcmp(p->user.role, "tenant_admin") && p->user.tenant_id == tenant_id);
}

int api_can_write(const store_principal *p)
{
    return strcmp(p->user.role, "viewer") != 0;
}

int64_t api_tenant_of(const store_principal *p)
{
    return p->user.tenant_id;
}

int api_forbid(api_resp *rs, const char *need)
{
    api_error(rs, 403, "forbidden", NULL, "this needs the %s role", need);
    return -1;
}

struct boot {
    const char *token;
    int64_t user_id;
};

static store_rc boot_write(store_tx *tx, void *arg)
{
    struct boot *b = arg;
    int64_t tenant, token_id;
    uint8_t h[UTIL_SHA256_LEN];
    int rc = store_platform_tenant_tx(tx, &tenant);
    if (rc == STORE_OK)
        rc = store_user_insert(tx, tenant, "admin", "platform_admin", &b->user_id);
    util_sha256(b->token, strlen(b->token), h);
    if (rc == STORE_OK)
        rc = store_token_insert(tx, b->user_id, "bootstrap", h, 0, &token_id);
    return rc;
}

int api_bootstrap_admin(api_ctx *ctx, const char *token, char out[UTIL_TOKEN_LEN + 1],
                        int *created, char *err, size_t errlen)
{
    int64_t n = 0;
    *created = 0;
    if (store_platform_admin_count(ctx->st, &n) != STORE_OK) {
        fmt_cut(err, errlen, "cannot read users");
        return -1;
    }
    if (n > 0)
        return 0;
    if (token && *token) {
        size_t len = strlen(token);
        if (len < TOKEN_MIN || len > TOKEN_MAX || len >= UTIL_TOKEN_LEN + 1) {
            fmt_cut(err, errlen, "COHORT_ADMIN_TOKEN must be %d to %d characters", TOKEN_MIN,
                     UTIL_TOKEN_LEN);
            return -1;
        }
        fmt_cut(out, UTIL_TOKEN_LEN + 1, "%s", token);
    } else if (util_token_new(out) != 0) {
        fmt_cut(err, errlen, "cannot read random bytes from the kernel");
        return -1;
    }
    struct boot b = {out, 0};
    int rc = store_write(ctx->st, boot_write, &b);
    if (rc != STORE_OK) {
        fmt_cut(err, errlen, "cannot create the platform admin (%s)", store_rc_name(rc));
        return -1;
    }
    *created = 1;
    return 0;
}

void api_whoami(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    (void)ctx;
    const store_principal *p = rq->who;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "user_id", (double)p->user.id);
    cJSON_AddStringToObject(o, "user", p->user.name);
    cJSON_AddStringToObject(o, "tenant", p->user.tenant);
    cJSON_AddStringToObject(o, "role", p->user.role);
    cJSON_AddNumberToObject(o, "token_id", (double)p->token_id);
    api_json(rs, 200, o);
}
