/*
 * api_volumes: datasets and workspaces as objects (create, list, get,
 * delete, seal) and where their files live on disk:
 *   <data_dir>/volumes/<tenant id>/<datasets|workspaces>/<volume id>/
 * A volume's directory is named by its row id, so a deleted volume's files
 * can never reappear under a new volume of the same name.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api_int.h"
#include "lib/fmt.h"
#include "api/fsquota.h"
#include "api/stuse.h"

static const char *const kind_dir[2] = {"datasets", "workspaces"};
static const char *const kind_what[2] = {"dataset", "workspace"};

/* mkdir -p for a path made by this file (no user input in it). */
static int mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0750);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0750) == 0 || errno == EEXIST ? 0 : -1;
}

int api_volume_path(api_ctx *ctx, store_vol_kind k, const store_volume *v, char *out, size_t n)
{
    return fmt_whole(out, n, "%s/volumes/%lld/%s/%lld", ctx->data_dir, (long long)v->tenant_id,
                     kind_dir[k], (long long)v->id);
}

int api_volume_root(api_ctx *ctx, store_vol_kind k, const store_volume *v, int create)
{
    char path[4400], err[512];
    if (api_volume_path(ctx, k, v, path, sizeof path) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (create && ctx->fsq) {
        /* A subvolume in its tenant's qgroup: the file system stops a write
         * at the tenant's quota (fsquota.h). */
        char *slash = strrchr(path, '/');
        *slash = '\0';
        int made = mkdirs(path);
        *slash = '/';
        if (made != 0 || fsquota_make(ctx->fsq, path, v->tenant_id,
                                      stuse_quota(ctx->stuse, v->tenant_id), err,
                                      sizeof err) != 0) {
            if (made == 0)
                fprintf(stderr, "cohortd: %s\n", err);
            return -1;
        }
    } else if (create && mkdirs(path) != 0) {
        return -1;
    }
    return open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

void api_rm_tree(int parent, const char *name)
{
    if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
        return;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        api_rm_tree(dirfd(d), e->d_name);
    }
    closedir(d);
    unlinkat(parent, name, AT_REMOVEDIR);
}

int api_volume_find(api_ctx *ctx, const store_principal *who, store_vol_kind k,
                    const char *name, store_volume *out, api_resp *rs)
{
    int rc = util_name_valid(name)
                 ? store_volume_get(ctx->st, k, api_tenant_of(who), name, k == STORE_DATASET, out)
                 : STORE_NOTFOUND;
    return rc == STORE_OK ? 0 : api_store_error(rs, rc, kind_what[k]);
}

static cJSON *volume_json(store_vol_kind k, const store_volume *v)
{
    cJSON *o = api_object(v->id, v->name);
    cJSON_AddStringToObject(o, "tenant", v->tenant);
    if (k == STORE_DATASET) {
        cJSON_AddBoolToObject(o, "public", v->is_public);
        cJSON_AddBoolToObject(o, "sealed", v->sealed);
    }
    api_add_time(o, "created_at", v->created_at);
    return o;
}

struct vol_new {
    store_vol_kind k;
    int64_t tenant_id;
    const char *name;
    int64_t id;
};

static store_rc vol_insert_write(store_tx *tx, void *arg)
{
    struct vol_new *v = arg;
    return store_volume_insert(tx, v->k, v->tenant_id, v->name, &v->id);
}

struct vol_id {
    store_vol_kind k;
    int64_t id;
};

static store_rc vol_delete_write(store_tx *tx, void *arg)
{
    struct vol_id *v = arg;
    return store_volume_delete(tx, v->k, v->id);
}

/* Datasets, and workspaces, one tenant may have (each is a directory). */
#define MAX_VOLUMES_PER_TENANT 1000

static void volume_create(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k)
{
    static const char *const fields[] = {"name", NULL};
    cJSON *in = NULL;
    struct vol_new nv = {k, api_tenant_of(rq->who), NULL, 0};
    if (!api_can_write(rq->who)) {
        api_forbid(rs, "member");
        goto out;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_name(in, "name", 1, &nv.name, rs) < 0)
        goto out;
    int64_t have = 0;
    int crc = store_volume_count(ctx->st, k, nv.tenant_id, &have);
    if (crc != STORE_OK) {
        api_store_error(rs, crc, kind_what[k]);
        goto out;
    }
    if (have >= MAX_VOLUMES_PER_TENANT) {
        api_error(rs, 422, "quota_exceeded", NULL,
                  "the tenant has %lld %ss, the most it may have: delete one first",
                  (long long)have, kind_what[k]);
        goto out;
    }
    if (api_write(ctx, rs, vol_insert_write, &nv, kind_what[k]))
        goto out;
    store_volume v;
    int rc = store_volume_get(ctx->st, k, nv.tenant_id, nv.name, 0, &v);
    if (rc != STORE_OK) {
        api_store_error(rs, rc, kind_what[k]);
        goto out;
    }
    int fd = api_volume_root(ctx, k, &v, 1);
    if (fd < 0) {
        /* No row without its directory: take the row back. */
        int e = errno;
        struct vol_id undo = {k, v.id};
        if (store_write(ctx->st, vol_delete_write, &undo) != STORE_OK)
            fprintf(stderr, "cohortd: %s %lld has no directory and stays listed\n",
                    kind_what[k], (long long)v.id);
        if (e == ENOSPC || e == EDQUOT)
            api_error(rs, 507, "no_space", NULL,
                      "the server's disk is full: the %s was not created", kind_what[k]);
        else
            api_error(rs, 500, "internal", NULL, "cannot create the %s's directory: %s",
                      kind_what[k], strerror(e));
        goto out;
    }
    close(fd);
    api_created(rs, volume_json(k, &v), "/v1/%s/%s", kind_dir[k], v.name);
out:
    cJSON_Delete(in);
}

struct vol_list {
    api_list pg;
    store_vol_kind k;
};

static void vol_row(void *arg, const store_volume *v)
{
    struct vol_list *l = arg;
    api_list_add(&l->pg, volume_json(l->k, v), v->id);
}

static void volume_list(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k)
{
    struct vol_list l = {.k = k};
    if (api_list_open(rq, &l.pg, rs))
        return;
    int rc = store_volume_list(ctx->st, k, api_tenant_of(rq->who), k == STORE_DATASET,
                               l.pg.cursor, l.pg.limit, vol_row, &l);
    api_list_close(rs, &l.pg, rc, kind_what[k]);
}

static void volume_get(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k)
{
    store_volume v;
    if (api_volume_find(ctx, rq->who, k, rq->param[0], &v, rs) == 0)
        api_json(rs, 200, volume_json(k, &v));
}

/* The caller may change v: member or above of the owning tenant. */
int api_volume_writable(const store_principal *who, const store_volume *v, api_resp *rs)
{
    if (v->tenant_id != api_tenant_of(who)) {
        api_error(rs, 403, "forbidden", NULL, "public datasets are read-only");
        return -1;
    }
    if (!api_can_write(who))
        return api_forbid(rs, "member");
    return 0;
}

static store_rc vol_seal_write(store_tx *tx, void *arg)
{
    return store_dataset_seal(tx, ((struct vol_id *)arg)->id);
}

/* Finds the volume named by param[0] that the caller may write, into v,
 * and applies write (given a struct vol_id) to it: 0, or -1 with the error
 * answered. */
static int volume_change(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k,
                         store_write_fn write, store_volume *v)
{
    if (api_volume_find(ctx, rq->who, k, rq->param[0], v, rs) ||
        api_volume_writable(rq->who, v, rs))
        return -1;
    struct vol_id d = {k, v->id};
    int rc = store_write(ctx->st, write, &d);
    if (rc != STORE_OK) {
        api_store_error(rs, rc, kind_what[k]);
        return -1;
    }
    return 0;
}

static void volume_delete(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k)
{
    store_volume v;
    if (volume_change(ctx, rq, rs, k, vol_delete_write, &v))
        return;
    char parent[4400], name[24];
    int pfd = fmt_whole(parent, sizeof parent, "%s/volumes/%lld/%s", ctx->data_dir,
                        (long long)v.tenant_id, kind_dir[k]) == 0 &&
                      fmt_whole(name, sizeof name, "%lld", (long long)v.id) == 0
                  ? open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                  : -1;
    if (pfd >= 0) {
        api_rm_tree(pfd, name);
        close(pfd);
    }
    rs->status = 204;
}

void api_dataset_seal(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_volume v;
    if (volume_change(ctx, rq, rs, STORE_DATASET, vol_seal_write, &v))
        return;
    v.sealed = 1;
    api_json(rs, 200, volume_json(STORE_DATASET, &v));
}

void api_dataset_create(api_ctx *c, const api_req *q, api_resp *r) { volume_create(c, q, r, STORE_DATASET); }
void api_dataset_list(api_ctx *c, const api_req *q, api_resp *r) { volume_list(c, q, r, STORE_DATASET); }
void api_dataset_get(api_ctx *c, const api_req *q, api_resp *r) { volume_get(c, q, r, STORE_DATASET); }
void api_dataset_delete(api_ctx *c, const api_req *q, api_resp *r) { volume_delete(c, q, r, STORE_DATASET); }
void api_workspace_create(api_ctx *c, const api_req *q, api_resp *r) { volume_create(c, q, r, STORE_WORKSPACE); }
void api_workspace_list(api_ctx *c, const api_req *q, api_resp *r) { volume_list(c, q, r, STORE_WORKSPACE); }
void api_workspace_get(api_ctx *c, const api_req *q, api_resp *r) { volume_get(c, q, r, STORE_WORKSPACE); }
void api_workspace_delete(api_ctx *c, const api_req *q, api_resp *r) { volume_delete(c, q, r, STORE_WORKSPACE); }
