/*
 * api_catalog: worker specs and images.  Everyone reads; the platform admin
 * writes.
 *   GET/POST /v1/worker-specs, GET/PUT /v1/worker-specs/{name},
 *   GET/POST /v1/images, GET /v1/images/{name}.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "lib/fmt.h"
#include "api/seal.h"
#include "storage/store_catalog.h"

#define PRICE_MAX 1000000000LL /* minor units per worker-hour */

static cJSON *spec_json(const store_spec *sp)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", sp->name);
    api_add_resources(o, sp->cpus, sp->memory_mb, sp->gpus, sp->gpu_type);
    cJSON_AddNumberToObject(o, "price_per_hour", (double)sp->price_per_hour);
    cJSON_AddStringToObject(o, "currency", sp->currency);
    api_add_time(o, "updated_at", sp->updated_at);
    return o;
}

API_ROWS(spec_row, store_spec, spec_json)

void api_spec_list(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    api_list pg;
    if (api_list_open(rq, &pg, rs))
        return;
    int rc = store_spec_list(ctx->st, pg.cursor, pg.limit, spec_row, &pg);
    api_list_close(rs, &pg, rc, "worker specs");
}

void api_spec_get(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_spec sp;
    int rc = util_name_valid(rq->param[0]) ? store_spec_get(ctx->st, rq->param[0], &sp)
                                           : STORE_NOTFOUND;
    if (rc != STORE_OK)
        api_store_error(rs, rc, "worker spec");
    else
        api_json(rs, 200, spec_json(&sp));
}

/* Reads the spec's fields from in over sp; required applies to creation. */
static int spec_fields(const cJSON *in, int required, store_spec *sp, api_resp *rs)
{
    const char *gpu_type = NULL, *cur = NULL;
    int g;
    if (api_int(in, "cpus", required, 1, 4096, &sp->cpus, rs) < 0 ||
        api_int(in, "memory_mb", required, 1, 64LL << 20, &sp->memory_mb, rs) < 0 ||
        api_int(in, "gpus", 0, 0, 64, &sp->gpus, rs) < 0 ||
        (g = api_name(in, "gpu_type", 0, &gpu_type, rs)) < 0 ||
        api_int(in, "price_per_hour", required, 0, PRICE_MAX, &sp->price_per_hour, rs) < 0 ||
        api_str(in, "currency", required, 3, &cur, rs) < 0)
        return -1;
    if (g == 1)
        fmt_cut(sp->gpu_type, sizeof sp->gpu_type, "%s", gpu_type);
    if (cur) {
        if (strlen(cur) != 3 || !isupper((unsigned char)cur[0]) ||
            !isupper((unsigned char)cur[1]) || !isupper((unsigned char)cur[2])) {
            api_error(rs, 422, "invalid_value", "currency",
                      "currency must be an ISO 4217 code such as USD");
            return -1;
        }
        memcpy(sp->currency, cur, 4);
    }
    if (sp->gpus > 0 && !sp->gpu_type[0])
        fmt_cut(sp->gpu_type, sizeof sp->gpu_type, "nvidia");
    return 0;
}

static const char *const spec_keys[] = {"name", "cpus", "memory_mb", "gpus", "gpu_type",
                                        "price_per_hour", "currency", NULL};

static store_rc spec_insert_write(store_tx *tx, void *arg)
{
    return store_spec_insert(tx, arg, NULL);
}

static store_rc spec_update_write(store_tx *tx, void *arg)
{
    return store_spec_update(tx, arg);
}

void api_spec_create(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    cJSON *in = NULL;
    store_spec sp = {0};
    const char *name;
    if (!api_is_platform_admin(rq->who)) {
        api_forbid(rs, "platform_admin");
        goto out;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, spec_keys, rs) ||
        api_name(in, "name", 1, &name, rs) < 0 || spec_fields(in, 1, &sp, rs) < 0)
        goto out;
    sp.updated_at = util_now_ms();
    fmt_cut(sp.name, sizeof sp.name, "%s", name);
    if (api_write(ctx, rs, spec_insert_write, &sp, "worker spec"))
        goto out;
    api_created(rs, spec_json(&sp), "/v1/worker-specs/%s", sp.name);
out:
    cJSON_Delete(in);
}

void api_spec_update(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    cJSON *in = NULL;
    store_spec sp;
    const char *name = NULL;
    if (!api_is_platform_admin(rq->who)) {
        api_forbid(rs, "platform_admin");
        goto out;
    }
    int rc = util_name_valid(rq->param[0]) ? store_spec_get(ctx->st, rq->param[0], &sp)
                                           : STORE_NOTFOUND;
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "worker spec");
        goto out;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, spec_keys, rs) ||
        api_name(in, "name", 0, &name, rs) < 0 || spec_fields(in, 0, &sp, rs) < 0)
        goto out;
    if (name && strcmp(name, sp.name)) {
        api_error(rs, 422, "invalid_value", "name", "a worker spec cannot be renamed");
        goto out;
    }
    sp.updated_at = util_now_ms();
    if (api_write(ctx, rs, spec_update_write, &sp, "worker spec"))
        goto out;
    api_json(rs, 200, spec_json(&sp));
out:
    cJSON_Delete(in);
}

static cJSON *image_json(const store_image *im)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", im->name);
    api_add_text(o, "reference", im->reference);
    cJSON_AddStringToObject(o, "framework", im->framework);
    cJSON_AddStringToObject(o, "visibility", im->tenant_id ? "private" : "public");
    /* Credentials are write-only: whether there are some, never what. */
    cJSON_AddBoolToObject(o, "has_credentials", im->username[0] != 0);
    api_add_time(o, "created_at", im->created_at);
    return o;
}

API_ROWS(image_row, store_image, image_json)

/* Whose images the caller sees: the public ones and its tenant's own; the
 * platform admin sees every one. */
static int64_t image_scope(const api_req *rq)
{
    return api_is_platform_admin(rq->who) ? -1 : api_tenant_of(rq->who);
}

void api_image_list(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    api_list pg;
    if (api_list_open(rq, &pg, rs))
        return;
    int rc = store_image_list(ctx->st, image_scope(rq), pg.cursor, pg.limit, image_row, &pg);
    api_list_close(rs, &pg, rc, "images");
}

void api_image_get(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_image im;
    int64_t scope = image_scope(rq);
    int rc = util_name_valid(rq->param[0])
                 ? store_image_get(ctx->st, scope < 0 ? 0 : scope, rq->param[0], &im)
                 : STORE_NOTFOUND;
    if (rc != STORE_OK)
        api_store_error(rs, rc, "image");
    else
        api_json(rs, 200, image_json(&im));
    memset(im.password, 0, sizeof im.password);
}

static store_rc image_write(store_tx *tx, void *arg)
{
    return store_image_insert(tx, arg, NULL);
}

/* Passwords kept before they were sealed, sealed now (once, at start). */
struct reseal {
    const seal *seal;
    struct {
        int64_t id;
        char sealed[STORE_CRED_SEALED_MAX + 1];
    } *v;
    size_t n, cap;
    int64_t last;
    int failed;
};

static void reseal_row(void *arg, const store_image *im)
{
    struct reseal *r = arg;
    r->last = im->id;
    if (!im->username[0] || !im->password[0] || seal_is_sealed(im->password))
        return;
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 16;
        void *nv = realloc(r->v, nc * sizeof *r->v);
        if (!nv) {
            r->failed = 1;
            return;
        }
        r->v = nv;
        r->cap = nc;
    }
    r->v[r->n].id = im->id;
    if (seal_encrypt(r->seal, im->password, r->v[r->n].sealed, sizeof r->v[r->n].sealed) != 0)
        r->failed = 1;
    else
        r->n++;
}

static store_rc reseal_write(store_tx *tx, void *arg)
{
    struct reseal *r = arg;
    int rc = STORE_OK;
    for (size_t i = 0; rc == STORE_OK && i < r->n; i++)
        rc = store_image_set_password(tx, r->v[i].id, r->v[i].sealed);
    return rc;
}

int api_images_reseal(api_ctx *ctx, char *err, size_t errlen)
{
    struct reseal r = {ctx->seal, NULL, 0, 0, 0, 0};
    int rc = STORE_OK;
    for (int64_t before = -1; rc == STORE_OK && r.last != before && !r.failed;) {
        before = r.last;
        rc = store_image_list(ctx->st, -1, r.last, 500, reseal_row, &r);
    }
    if (rc == STORE_OK && !r.failed && r.n > 0)
        rc = store_write(ctx->st, reseal_write, &r);
    if (rc != STORE_OK || r.failed)
        fmt_cut(err, errlen, "cannot seal the registry passwords kept before: %s",
                 r.failed ? "out of memory" : store_rc_name(rc));
    else if (r.n > 0)
        fprintf(stderr, "cohortd: sealed %zu registry password(s) kept in the clear before\n",
                r.n);
    for (size_t i = 0; i < r.n; i++)
        memset(r.v[i].sealed, 0, sizeof r.v[i].sealed);
    free(r.v);
    return rc == STORE_OK && !r.failed ? 0 : -1;
}

/* A reference as the API takes it: with a registry host, or without one
 * (then the node's default registry serves it). */
static int reference_valid(const char *ref)
{
    char full[UTIL_IMAGE_REF_MAX + 16];
    if (util_image_ref_valid(ref) && strchr(ref, '/'))
        return 1;
    return strlen(ref) <= UTIL_IMAGE_REF_MAX - 9 &&
           fmt_whole(full, sizeof full, "registry/%s", ref) == 0 && util_image_ref_valid(full);
}

/*
 * POST /v1/images {name, reference, framework, username?, password?}: the
 * platform admin registers public images; a tenant admin registers images
 * private to its tenant (404 to every other tenant).
 */
void api_image_create(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"name", "reference", "framework", "username",
                                         "password", NULL};
    cJSON *in = NULL;
    store_image im = {0};
    const char *name, *fw, *ref, *user = NULL, *pass = NULL;
    int platform = api_is_platform_admin(rq->who);
    if (!platform && !api_is_tenant_admin(rq->who, api_tenant_of(rq->who))) {
        api_forbid(rs, "tenant_admin");
        goto out;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_name(in, "name", 1, &name, rs) < 0 ||
        api_str(in, "reference", 1, UTIL_IMAGE_REF_MAX, &ref, rs) < 0 ||
        api_str(in, "framework", 1, 15, &fw, rs) < 0 ||
        api_str(in, "username", 0, STORE_CRED_MAX, &user, rs) < 0 ||
        api_str(in, "password", 0, STORE_CRED_MAX, &pass, rs) < 0)
        goto out;
    if (strcmp(fw, "pytorch") && strcmp(fw, "tensorflow") && strcmp(fw, "native")) {
        api_error(rs, 422, "invalid_value", "framework",
                  "framework must be pytorch, tensorflow or native");
        goto out;
    }
    if (!reference_valid(ref)) {
        api_error(rs, 422, "invalid_value", "reference",
                  "reference must be HOST[:PORT]/REPOSITORY[:TAG] or "
                  "HOST[:PORT]/REPOSITORY@sha256:DIGEST (lower-case repository)");
        goto out;
    }
    /* cohortd's own registry: a tenant's images come from its namespace,
     * or from cohort/ (its tokens would not pull anything else anyway). */
    char repo[256];
    if (!platform && api_registry_repo(ctx, ref, repo, sizeof repo) &&
        !api_registry_tenant_may_pull(rq->who->user.tenant, repo)) {
        api_error(rs, 422, "invalid_value", "reference",
                  "an image of this platform's registry must lie in %s/ or cohort/",
                  rq->who->user.tenant);
        goto out;
    }
    if (!user != !pass || (user && (!user[0] || strchr(user, ':')))) {
        api_error(rs, 422, "invalid_value", user ? "username" : "password",
                  "username and password go together; the username is not empty and has no ':'");
        goto out;
    }
    im.tenant_id = platform ? 0 : api_tenant_of(rq->who);
    fmt_cut(im.name, sizeof im.name, "%s", name);
    fmt_cut(im.reference, sizeof im.reference, "%s", ref);
    fmt_cut(im.framework, sizeof im.framework, "%s", fw);
    if (user) {
        fmt_cut(im.username, sizeof im.username, "%s", user);
        /* kept sealed: the database alone holds no registry password */
        if (!ctx->seal || seal_encrypt(ctx->seal, pass, im.password, sizeof im.password) != 0) {
            api_error(rs, 500, "internal", NULL, "cannot seal the password");
            goto out;
        }
    }
    im.created_at = util_now_ms();
    if (api_write(ctx, rs, image_write, &im, "image"))
        goto out;
    api_created(rs, image_json(&im), "/v1/images/%s", im.name);
out:
    memset(im.password, 0, sizeof im.password);
    if (pass)
        memset((char *)pass, 0, strlen(pass));
    cJSON_Delete(in);
}
