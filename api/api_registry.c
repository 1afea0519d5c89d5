/*
 * api_registry: GET /v1/registry/token, the token endpoint of the
 * registry's token authentication, and who may do what there.
 *
 * A client (skopeo, podman, docker login) that the registry answered 401
 * asks here with the scope it needs and, to be someone, Basic credentials
 * whose password is a Cohort API token (the user name is not read).  The
 * answer is a token holding the part of that scope the caller may have:
 *   cohort/NAME         anyone pulls (anonymous too); a platform admin pushes
 *   TENANT/NAME         the tenant's users pull; its tenant admins push and
 *                       delete
 *   registry:catalog:*  a platform admin only
 * A platform admin may do anything; nothing else is granted to anyone.
 * Bad credentials answer 401, as the protocol wants; a scope the caller may
 * not have is granted empty, and the registry then refuses the request.
 */
#include "api/api_int.h"
#include "api/regtoken.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "lib/util.h"

#define MAX_SCOPES 8
#define SCOPE_MAX 1024
#define CRED_MAX 4096 /* the password may be a pull token (a JWT) */

/* Who asks, from the request's credentials. */
struct asker {
    store_principal who; /* when known */
    regtoken_grant *pull; /* when the password is a token this cohortd signed */
    int known;
};

/*
 * Fills a from the Authorization header: nothing (anonymous), Bearer or
 * Basic with an API token as the password (the user name is not read), or
 * Basic with a token this cohortd signed as the password: an agent pulls
 * with the pull token of its launch spec through an auth file, and gets
 * what that token holds, for as long as it lives, never more.  0, or -1
 * with rs set (401) for credentials that are neither.
 */
static int caller(api_ctx *ctx, const api_req *rq, struct asker *a, api_resp *rs)
{
    const char *h = rq->header(rq->h, "Authorization");
    char bearer[CRED_MAX + 16];
    unsigned char plain[CRED_MAX];
    memset(a, 0, sizeof *a);
    if (!h || !*h)
        return 0;
    if (!strncasecmp(h, "Bearer ", 7)) {
        a->known = api_authenticate(ctx, h, &a->who, rs) == 0;
        return a->known ? 0 : -1;
    }
    size_t n = strncasecmp(h, "Basic ", 6) ? 0 : strlen(h + 6);
    if (n == 0 || n > 4 * (CRED_MAX / 3) - 4) {
        api_error(rs, 401, "unauthorized", NULL,
                  "log in with any user name and a Cohort API token as the password");
        return -1;
    }
    /* EVP_DecodeBlock counts the zero bytes of the padding */
    int pad = (h[6 + n - 1] == '=') + (n > 1 && h[6 + n - 2] == '=');
    int len = EVP_DecodeBlock(plain, (const unsigned char *)h + 6, (int)n);
    if (len >= pad)
        len -= pad;
    const char *colon = len > 0 ? memchr(plain, ':', (size_t)len) : NULL;
    if (!colon) {
        api_error(rs, 401, "unauthorized", NULL, "the Basic credentials are not user:password");
        return -1;
    }
    int plen = (int)(len - (colon + 1 - (char *)plain));
    if (memchr(colon + 1, '.', (size_t)plen)) {
        char jwt[CRED_MAX];
        fmt_cut(jwt, sizeof jwt, "%.*s", plen, colon + 1);
        a->pull = regtoken_verify(ctx->regtoken, jwt, util_now_ms() / 1000);
        if (a->pull)
            return 0;
        api_error(rs, 401, "unauthorized", NULL, "the pull token is not valid");
        return -1;
    }
    fmt_cut(bearer, sizeof bearer, "Bearer %.*s", plen, colon + 1);
    a->known = api_authenticate(ctx, bearer, &a->who, rs) == 0;
    return a->known ? 0 : -1;
}

static int islower_or_digit(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* Whether the asker a may do action on name of type. */
static int allowed(const struct asker *a, const char *type, const char *name, const char *action)
{
    if (a->pull)
        return regtoken_grant_allows(a->pull, type, name, action);
    const store_principal *who = a->known ? &a->who : NULL;
    int admin = who && api_is_platform_admin(who);
    if (!strcmp(type, "registry"))
        return admin && !strcmp(name, "catalog");
    if (strcmp(type, "repository"))
        return 0;
    if (admin)
        return 1;
    if (!strncmp(name, "cohort/", 7))
        return !strcmp(action, "pull");
    if (!who)
        return 0;
    size_t tl = strlen(who->user.tenant);
    if (tl == 0 || strncmp(name, who->user.tenant, tl) || name[tl] != '/')
        return 0;
    if (!strcmp(action, "pull"))
        return 1;
    return api_is_tenant_admin(who, who->user.tenant_id) &&
           (!strcmp(action, "push") || !strcmp(action, "delete") || !strcmp(action, "*"));
}

/* 1 when host[hl] ("HOST:PORT") names the loopback: localhost, 127.*. */
static int loopback_host(const char *host, size_t hl)
{
    return (hl > 10 && !strncmp(host, "localhost:", 10)) ||
           (hl > 4 && !strncmp(host, "127.", 4));
}

/* 1 when host[hl] names the registry at reg ("HOST:PORT"): the same text,
 * or both on the loopback with the same port (localhost:5000 is
 * 127.0.0.1:5000). */
static int same_registry(const char *host, size_t hl, const char *reg)
{
    size_t rl = strlen(reg);
    if (rl == hl && !strncmp(host, reg, hl))
        return 1;
    const char *hp = memchr(host, ':', hl), *rp = strrchr(reg, ':');
    return hp && rp && loopback_host(host, hl) && loopback_host(reg, rl) &&
           (size_t)(host + hl - hp) == strlen(rp) && !strncmp(hp, rp, strlen(rp));
}

int api_registry_repo(const api_ctx *ctx, const char *ref, char *repo, size_t n)
{
    size_t first = strcspn(ref, "/");
    int has_host = ref[first] == '/' && (memchr(ref, '.', first) || memchr(ref, ':', first) ||
                                         (first == 9 && !strncmp(ref, "localhost", 9)));
    const char *path = ref;
    if (has_host) {
        if (!ctx->registry[0] || !same_registry(ref, first, ctx->registry))
            return 0;
        path = ref + first + 1;
    }
    /* the repository ends at its tag or digest (no ':' or '@' in a path) */
    size_t len = strcspn(path, ":@");
    if (len == 0 || len >= n)
        return 0;
    memcpy(repo, path, len);
    repo[len] = '\0';
    return 1;
}

int api_registry_tenant_may_pull(const char *tenant, const char *repo)
{
    size_t tl = strlen(tenant);
    return !strncmp(repo, "cohort/", 7) ||
           (tl > 0 && !strncmp(repo, tenant, tl) && repo[tl] == '/');
}

char *api_registry_pull_token(const api_ctx *ctx, const char *subject, const char *repo)
{
    if (!ctx->regtoken)
        return NULL;
    regtoken_access g = {"repository", repo, {"pull", NULL}};
    return regtoken_sign(ctx->regtoken, subject, &g, 1, util_now_ms() / 1000, 0);
}

/* A repository name as the registry takes it: components of lower-case
 * letters and digits, joined inside by '.', '_', '__' or dashes, separated
 * by single '/' (no "..", no empty component), at most 255 bytes. */
static int repository_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 255)
        return 0;
    for (const char *c = name; *c;) {
        size_t len = strcspn(c, "/");
        if (len == 0 || !islower_or_digit(c[0]) || !islower_or_digit(c[len - 1]))
            return 0;
        for (size_t i = 0; i < len; i++) {
            char ch = c[i];
            if (!islower_or_digit(ch) && ch != '.' && ch != '_' && ch != '-')
                return 0;
            if (ch == '.' && (c[i + 1] == '.' || c[i + 1] == '_' || c[i + 1] == '-'))
                return 0;
        }
        c += len;
        if (*c == '/' && !*++c)
            return 0; /* a trailing '/' */
    }
    return 1;
}

/* One scope, "type:name:action,action", cut in place into g with only the
 * actions who may have.  0, or -1 when it is not a scope. */
static int grant(char *scope, const struct asker *who, regtoken_access *g)
{
    char *first = strchr(scope, ':'), *last = strrchr(scope, ':');
    if (!first || first == last || first == scope || last[1] == '\0')
        return -1;
    *first = '\0';
    *last = '\0';
    g->type = scope;
    g->name = first + 1;
    if (!repository_name_valid(g->name))
        return -1;
    int k = 0;
    for (char *save = NULL, *a = strtok_r(last + 1, ",", &save); a && k < 3;
         a = strtok_r(NULL, ",", &save))
        if (allowed(who, g->type, g->name, a))
            g->actions[k++] = a;
    g->actions[k] = NULL;
    return 0;
}

/* The scopes the request asks for, each cut to what a may have, into g:
 * their count, or -1 with rs set. */
static int scopes_granted(const api_req *rq, const struct asker *a, char *buf,
                          regtoken_access g[MAX_SCOPES], api_resp *rs)
{
    const char *scope = rq->query(rq->h, "scope");
    int n = 0;
    if (scope && strlen(scope) > SCOPE_MAX) {
        api_error(rs, 400, "too_large", "scope", "a scope of at most %d bytes", SCOPE_MAX);
        return -1;
    }
    fmt_cut(buf, SCOPE_MAX + 1, "%s", scope ? scope : "");
    for (char *save = NULL, *s = strtok_r(buf, " ", &save); s; s = strtok_r(NULL, " ", &save)) {
        if (n == MAX_SCOPES || grant(s, a, &g[n]) != 0) {
            api_error(rs, 400, "invalid_value", "scope",
                      "at most %d scopes of the form repository:NAME:pull,push", MAX_SCOPES);
            return -1;
        }
        n++;
    }
    return n;
}

void api_registry_token(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    struct asker a = {0};
    char scopes[SCOPE_MAX + 1], subject[2 * UTIL_NAME_MAX + 2] = "", at[32], *token = NULL;
    regtoken_access g[MAX_SCOPES];
    if (!ctx->regtoken) {
        api_error(rs, 404, "not_found", NULL, "this cohortd signs no registry tokens");
        return;
    }
    const char *service = rq->query(rq->h, "service");
    if (service && strcmp(service, REGTOKEN_SERVICE)) {
        api_error(rs, 400, "invalid_value", "service", "this cohortd signs tokens for %s only",
                  REGTOKEN_SERVICE);
        return;
    }
    int n;
    if (caller(ctx, rq, &a, rs) != 0 || (n = scopes_granted(rq, &a, scopes, g, rs)) < 0)
        goto out;
    if (a.known)
        fmt_cut(subject, sizeof subject, "%s/%s", a.who.user.tenant, a.who.user.name);
    else if (a.pull)
        fmt_cut(subject, sizeof subject, "%s", regtoken_grant_subject(a.pull));
    int64_t now = util_now_ms();
    /* A pull token buys what it holds until it ends: never a longer life. */
    int64_t exp = a.pull ? regtoken_grant_exp(a.pull) : 0;
    if (!(token = regtoken_sign(ctx->regtoken, subject, g, n, now / 1000, exp))) {
        api_error(rs, 500, "internal", NULL, "cannot sign the token");
        goto out;
    }
    util_rfc3339(now, at);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", token);
    cJSON_AddStringToObject(o, "access_token", token);
    cJSON_AddNumberToObject(o, "expires_in", (double)(exp ? exp - now / 1000 : REGTOKEN_TTL_S));
    cJSON_AddStringToObject(o, "issued_at", at);
    api_json(rs, 200, o);
out:
    free(token);
    regtoken_grant_free(a.pull);
}
