/*
 * api_files: files inside datasets and workspaces.
 *   PUT    /v1/{datasets|workspaces}/{name}/files/{path}[?mode=755]  (raw body)
 *   GET    the same path to download, DELETE to remove
 *   GET    /v1/{datasets|workspaces}/{name}/files[?prefix=&limit=&cursor=&sha256=true]
 * Every path is validated (util_relpath_valid) and then opened one
 * component at a time with O_NOFOLLOW, so no symlink, planted or not, can
 * lead outside the volume.  Uploads go to a temporary file beside the
 * target and are renamed over it after fsync: a file is whole or absent.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api_int.h"
#include "api/stuse.h"

#define TMP_PREFIX ".cohort-upload-"
#define LIST_SCAN_MAX 100000
/* What one listing with ?sha256=true reads to hash its page's files: past
 * it the rest of the page comes without a sum (counted in sha256_skipped). */
#define LIST_HASH_MAX (1LL << 30)

/*
 * Opens the directory holding path's last component, creating missing
 * directories when create is set.  Returns the fd (or -errno) and points
 * *leaf at the last component inside path.
 */
static int open_parent(int root, const char *path, int create, const char **leaf)
{
    char comp[256];
    int fd = dup(root);
    if (fd < 0)
        return -errno;
    const char *p = path;
    for (;;) {
        const char *slash = strchr(p, '/');
        if (!slash)
            break;
        size_t n = (size_t)(slash - p);
        memcpy(comp, p, n);
        comp[n] = '\0';
        int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, comp, 0755) != 0 && errno != EEXIST) {
                int e = errno;
                close(fd);
                return -e;
            }
            next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        int e = errno;
        close(fd);
        if (next < 0)
            return e == ENOTDIR ? -ELOOP : -e; /* a symlink to a directory reads ENOTDIR */
        fd = next;
        p = slash + 1;
    }
    *leaf = p;
    return fd;
}

int api_open_beneath(int root, const char *path)
{
    const char *leaf;
    int dir = open_parent(root, path, 0, &leaf);
    if (dir < 0)
        return dir;
    int fd = openat(dir, leaf, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    int e = errno;
    close(dir);
    if (fd < 0)
        return -e;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return -EISDIR;
    }
    return fd;
}

/* Error response for a failed open of a user path; returns -1. */
static int path_error(api_resp *rs, int err, const char *path)
{
    switch (err) {
    case ENOENT:
        api_error(rs, 404, "not_found", "path", "no file at '%.200s'", path);
        break;
    case ELOOP:
    case EMLINK:
        api_error(rs, 422, "invalid_path", "path",
                  "'%.200s' passes through a symbolic link, which is never followed", path);
        break;
    case EISDIR:
    case ENOTDIR:
        api_error(rs, 409, "conflict", "path", "'%.200s' is a directory, not a file", path);
        break;
    case ENOSPC:
    case EDQUOT:
        api_error(rs, 507, "no_space", NULL, "no space left for the file");
        break;
    default:
        api_error(rs, 500, "internal", NULL, "cannot open '%.200s': %s", path, strerror(err));
        break;
    }
    return -1;
}

static int check_path(const char *path, api_resp *rs)
{
    if (!util_relpath_valid(path, strlen(path))) {
        api_error(rs, 422, "invalid_path", "path",
                  "file paths are relative, without '.', '..', empty components, "
                  "backslashes, NUL or control characters, at most %d bytes",
                  UTIL_PATH_MAX);
        return -1;
    }
    return 0;
}

/* Looks up the volume and opens its root; for writes also checks rights. */
static int volume_open(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k,
                       int write, store_volume *v)
{
    if (api_volume_find(ctx, rq->who, k, rq->param[0], v, rs))
        return -1;
    if (write && api_volume_writable(rq->who, v, rs))
        return -1;
    if (write && v->sealed) {
        api_error(rs, 409, "sealed", NULL, "dataset '%s' is sealed: no more writes", v->name);
        return -1;
    }
    int root = api_volume_root(ctx, k, v, 1);
    if (root < 0)
        api_error(rs, 500, "internal", NULL, "cannot open the volume's directory");
    return root;
}

/* volume_open for a request naming a file (its path in param[1]), once the
 * path is known to be acceptable. */
static int file_volume_open(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k,
                            int write)
{
    store_volume v;
    if (check_path(rq->param[1], rs))
        return -1;
    return volume_open(ctx, rq, rs, k, write, &v);
}

struct upload_state {
    int dir;
    int64_t tenant, quota;   /* the quota: -1 none */
    int new_file;            /* took one of the tenant's entries (stuse_take_file) */
    struct stuse *stuse;
    int64_t reserved;        /* of the tenant's quota, taken as bytes came */
    char tmp[64];
    char leaf[256];
    char path[UTIL_PATH_MAX + 1];
    mode_t mode;
};

/* api_upload.reserve: n more bytes of the tenant's quota, or -1. */
static int upload_reserve(api_upload *up, int64_t n)
{
    struct upload_state *u = up->state;
    if (stuse_take(u->stuse, u->tenant, n, u->quota) != 0)
        return -1;
    u->reserved += n;
    return 0;
}

static void upload_abort(api_upload *up)
{
    struct upload_state *u = up->state;
    if (u && u->reserved)
        stuse_add(u->stuse, u->tenant, -u->reserved); /* never landed */
    if (u && u->new_file)
        stuse_add_files(u->stuse, u->tenant, -1);
    if (up->fd >= 0)
        close(up->fd);
    up->fd = -1;
    if (u) {
        unlinkat(u->dir, u->tmp, 0);
        close(u->dir);
        free(u);
    }
    up->state = NULL;
}

static void upload_finish(api_ctx *ctx, const api_req *rq, api_resp *rs, api_upload *up)
{
    (void)rq;
    struct upload_state *u = up->state;
    if (fchmod(up->fd, u->mode) != 0 || fsync(up->fd) != 0) {
        path_error(rs, errno, u->path);
        goto out;
    }
    if (renameat(u->dir, u->tmp, u->dir, u->leaf) != 0) {
        path_error(rs, errno, u->path);
        goto out;
    }
    u->tmp[0] = '\0';
    fsync(u->dir);
    /* counted until the next walk: as it came (reserve), or now */
    if (!up->reserve)
        stuse_add(ctx->stuse, u->tenant, up->written);
    u->reserved = 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", u->path);
    cJSON_AddNumberToObject(o, "size", (double)up->written);
    char mode[8];
    fmt_cut(mode, sizeof mode, "%o", (unsigned)u->mode); /* 644 or 755 */
    cJSON_AddStringToObject(o, "mode", mode);
    api_json(rs, 201, o);
out:
    if (u->tmp[0]) {
        unlinkat(u->dir, u->tmp, 0);
        if (u->new_file)
            stuse_add_files(ctx->stuse, u->tenant, -1);
    }
    close(up->fd);
    up->fd = -1;
    close(u->dir);
    free(u);
    up->state = NULL;
}

/* The name and mode of an upload, from its path and ?mode: 0, or -1
 * answered. */
static int upload_args(const api_req *rq, api_resp *rs, mode_t *mode)
{
    const char *path = rq->param[1];
    const char *m = rq->query(rq->h, "mode");
    if (m && strcmp(m, "644") && strcmp(m, "755")) {
        api_error(rs, 422, "invalid_value", "mode", "mode must be 644 or 755");
        return -1;
    }
    *mode = m && !strcmp(m, "755") ? 0755 : 0644;
    if (check_path(path, rs))
        return -1;
    const char *base = strrchr(path, '/');
    if (!strncmp(base ? base + 1 : path, TMP_PREFIX, strlen(TMP_PREFIX))) {
        api_error(rs, 422, "invalid_path", "path", "names starting %s are reserved", TMP_PREFIX);
        return -1;
    }
    return 0;
}

/* The tenant's storage quota (into *quota, *used): a body that says it is
 * larger than what is left is refused at once; one that says nothing,
 * where it passes.  0, or -1 answered. */
static int upload_fits(api_ctx *ctx, const api_req *rq, api_resp *rs, int64_t tenant,
                       int64_t *quota, int64_t *used)
{
    *quota = stuse_quota(ctx->stuse, tenant);
    *used = stuse_used(ctx->stuse, tenant);
    const char *cl = rq->header(rq->h, "Content-Length");
    if (*quota >= 0 && (*used >= *quota || (cl && strtoll(cl, NULL, 10) > *quota - *used))) {
        api_error(rs, 507, "storage_quota_exceeded", NULL,
                  "the tenant's workspaces, datasets and logs hold %lld bytes of its "
                  "%lld-byte quota: "
                  "this file does not fit (GET /v1/quota)",
                  (long long)*used, (long long)*quota);
        return -1;
    }
    return 0;
}

/* A new file is one more entry of the tenant's: taken, or refused past the
 * bound (one that replaces a file adds none).  0, or -1 answered. */
static int upload_entry(api_ctx *ctx, api_resp *rs, struct upload_state *u, const char *leaf)
{
    struct stat sb;
    if (fstatat(u->dir, leaf, &sb, AT_SYMLINK_NOFOLLOW) == 0)
        return 0;
    if (stuse_take_file(ctx->stuse, u->tenant) != 0) {
        api_error(rs, 507, "storage_quota_exceeded", NULL,
                  "the tenant's workspaces and datasets hold %lld files and directories, "
                  "the most one tenant keeps: this file does not fit (GET /v1/quota)",
                  (long long)stuse_files(ctx->stuse, u->tenant));
        return -1;
    }
    u->new_file = 1;
    return 0;
}

static void file_put(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k)
{
    store_volume v;
    const char *path = rq->param[1], *leaf;
    mode_t mode;
    int64_t quota, used;
    struct upload_state *u = NULL;
    api_upload *up = NULL;
    if (upload_args(rq, rs, &mode) != 0)
        return;
    int root = volume_open(ctx, rq, rs, k, 1, &v);
    if (root < 0)
        return;
    if (upload_fits(ctx, rq, rs, v.tenant_id, &quota, &used) != 0) {
        close(root);
        return;
    }
    u = calloc(1, sizeof *u);
    up = calloc(1, sizeof *up);
    int dir = open_parent(root, path, 1, &leaf);
    close(root);
    if (!u || !up || dir < 0) {
        if (dir < 0)
            path_error(rs, -dir, path);
        else
            api_error(rs, 500, "internal", NULL, "out of memory");
        goto fail;
    }
    *u = (struct upload_state){.dir = dir, .tenant = v.tenant_id, .quota = quota,
                               .stuse = ctx->stuse, .mode = mode};
    if (upload_entry(ctx, rs, u, leaf) != 0)
        goto fail;
    if (fmt_whole(u->leaf, sizeof u->leaf, "%s", leaf) != 0 ||
        fmt_whole(u->path, sizeof u->path, "%s", path) != 0) {
        api_error(rs, 422, "invalid_path", "path", "the path is too long");
        if (u->new_file)
            stuse_add_files(ctx->stuse, v.tenant_id, -1);
        goto fail;
    }
    uint8_t rnd[8];
    util_random(rnd, sizeof rnd);
    memcpy(u->tmp, TMP_PREFIX, strlen(TMP_PREFIX));
    util_hex(rnd, sizeof rnd, u->tmp + strlen(TMP_PREFIX));
    up->fd = openat(dir, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (up->fd < 0) {
        path_error(rs, errno, path);
        if (u->new_file)
            stuse_add_files(ctx->stuse, v.tenant_id, -1);
        goto fail;
    }
    up->limit = ctx->upload_limit;
    up->quota_left = quota >= 0 ? (quota > used ? quota - used : 0) : -1;
    if (quota >= 0)
        up->reserve = upload_reserve;
    up->state = u;
    up->finish = upload_finish;
    up->abort = upload_abort;
    rs->upload = up;
    return;
fail:
    if (dir >= 0)
        close(dir);
    free(u);
    free(up);
}

static void file_get(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k)
{
    const char *path = rq->param[1];
    int root = file_volume_open(ctx, rq, rs, k, 0);
    if (root < 0)
        return;
    int fd = api_open_beneath(root, path);
    close(root);
    if (fd < 0) {
        path_error(rs, -fd, path);
        return;
    }
    struct stat sb;
    fstat(fd, &sb);
    rs->status = 200;
    rs->fd = fd;
    rs->fsize = sb.st_size;
    rs->ctype = "application/octet-stream";
}

static void file_delete(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k)
{
    const char *path = rq->param[1];
    store_volume v;
    if (check_path(path, rs))
        return;
    int root = volume_open(ctx, rq, rs, k, 1, &v);
    if (root < 0)
        return;
    const char *leaf;
    int dir = open_parent(root, path, 0, &leaf);
    close(root);
    if (dir < 0) {
        path_error(rs, -dir, path);
        return;
    }
    struct stat sb;
    int rc = fstatat(dir, leaf, &sb, AT_SYMLINK_NOFOLLOW);
    if (rc == 0 && S_ISDIR(sb.st_mode))
        errno = EISDIR, rc = -1;
    if (rc == 0)
        rc = unlinkat(dir, leaf, 0);
    int e = errno;
    if (rc == 0) {
        fsync(dir);
        stuse_add_files(ctx->stuse, v.tenant_id, -1); /* till the next walk */
    }
    close(dir);
    if (rc != 0) {
        path_error(rs, e, path);
        return;
    }
    rs->status = 204;
}

struct entry {
    char *path;
    int64_t size;
    int64_t mtime_ms;
    unsigned mode;
};

struct scan {
    struct entry *e;
    size_t n, cap;
    int truncated;
    int64_t unlisted; /* files (or directories) whose names are not UTF-8 */
};

static void scan_dir(int fd, const char *prefix, struct scan *sc, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL && !sc->truncated) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            !strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)))
            continue;
        /* A job may name a file anything; JSON holds UTF-8 only, and the
         * API's paths are UTF-8: such a name is counted, not listed. */
        size_t nl = strlen(de->d_name);
        if (util_utf8_invalid_at(de->d_name, nl) != nl) {
            sc->unlisted++;
            continue;
        }
        struct stat sb;
        if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        char path[UTIL_PATH_MAX + 2];
        if (fmt_whole(path, sizeof path - 1, "%s%s", prefix, de->d_name) != 0)
            continue; /* past UTIL_PATH_MAX: the API could not name it */
        int n = (int)strlen(path);
        if (S_ISDIR(sb.st_mode) && depth < 64) {
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                path[n] = '/'; /* n <= UTIL_PATH_MAX: room for the slash and the NUL */
                path[n + 1] = '\0';
                scan_dir(sub, path, sc, depth + 1);
            }
            continue;
        }
        if (!S_ISREG(sb.st_mode))
            continue; /* symlinks and specials are not listed */
        if (sc->n == LIST_SCAN_MAX) {
            sc->truncated = 1;
            break;
        }
        if (sc->n == sc->cap) {
            size_t cap = sc->cap ? sc->cap * 2 : 64;
            struct entry *ne = realloc(sc->e, cap * sizeof *ne);
            if (!ne) {
                sc->truncated = 1;
                break;
            }
            sc->e = ne;
            sc->cap = cap;
        }
        struct entry *en = &sc->e[sc->n];
        en->path = strdup(path);
        if (!en->path)
            continue;
        en->size = sb.st_size;
        en->mtime_ms = (int64_t)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000;
        en->mode = sb.st_mode & 0777;
        sc->n++;
    }
    closedir(d);
}

/* Adds "sha256" to item it, the sum of the file at path under root, while
 * *budget lasts; 1 when the file was left without one. */
static int add_sha256(cJSON *it, int root, const char *path, int64_t size, int64_t *budget)
{
    if (size > *budget)
        return 1;
    int fd = api_open_beneath(root, path);
    if (fd < 0)
        return 1;
    uint8_t sum[UTIL_SHA256_LEN];
    char hex[2 * UTIL_SHA256_LEN + 1];
    int64_t n = 0;
    int rc = util_sha256_fd(fd, *budget, sum, &n);
    close(fd);
    *budget -= n;
    if (rc)
        return 1;
    util_hex(sum, sizeof sum, hex);
    cJSON_AddStringToObject(it, "sha256", hex);
    return 0;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->path, ((const struct entry *)b)->path);
}

static void file_list(api_ctx *ctx, const api_req *rq, api_resp *rs, store_vol_kind k)
{
    store_volume v;
    const char *prefix = rq->query(rq->h, "prefix");
    const char *cursor = rq->query(rq->h, "cursor");
    const char *l = rq->query(rq->h, "limit");
    const char *sums = rq->query(rq->h, "sha256");
    int64_t limit = l ? api_id(l) : 1000;
    if (limit < 1 || limit > 1000) {
        api_error(rs, 400, "invalid_value", "limit", "limit must be 1..1000");
        return;
    }
    if (sums && strcmp(sums, "true") && strcmp(sums, "false")) {
        api_error(rs, 400, "invalid_value", "sha256", "sha256 must be true or false");
        return;
    }
    int want_sums = sums && !strcmp(sums, "true");
    int64_t hash_budget = LIST_HASH_MAX, unsummed = 0;
    int root = volume_open(ctx, rq, rs, k, 0, &v);
    if (root < 0)
        return;
    struct scan sc = {0};
    /* scan_dir closes what it is given; root stays open for the sums */
    scan_dir(fcntl(root, F_DUPFD_CLOEXEC, 0), "", &sc, 0);
    if (sc.n > 1)
        qsort(sc.e, sc.n, sizeof *sc.e, entry_cmp);
    cJSON *o = cJSON_CreateObject();
    cJSON *items = cJSON_AddArrayToObject(o, "items");
    int64_t count = 0;
    const char *last = NULL;
    for (size_t i = 0; i < sc.n; i++) {
        struct entry *e = &sc.e[i];
        if (cursor && strcmp(e->path, cursor) <= 0)
            continue;
        if (prefix && strncmp(e->path, prefix, strlen(prefix)))
            continue;
        if (count == limit)
            break;
        cJSON *it = cJSON_CreateObject();
        cJSON_AddStringToObject(it, "path", e->path);
        cJSON_AddNumberToObject(it, "size", (double)e->size);
        char mode[8];
        fmt_cut(mode, sizeof mode, "%o", e->mode); /* 4 octal digits */
        cJSON_AddStringToObject(it, "mode", mode);
        api_add_time(it, "modified_at", e->mtime_ms);
        if (want_sums)
            unsummed += add_sha256(it, root, e->path, e->size, &hash_budget);
        cJSON_AddItemToArray(items, it);
        last = e->path;
        count++;
    }
    if (count == limit && last)
        cJSON_AddStringToObject(o, "next_cursor", last);
    else
        cJSON_AddNullToObject(o, "next_cursor");
    cJSON_AddBoolToObject(o, "truncated", sc.truncated);
    if (sc.unlisted > 0)
        cJSON_AddNumberToObject(o, "unlisted_not_utf8", (double)sc.unlisted);
    if (want_sums)
        cJSON_AddNumberToObject(o, "sha256_skipped", (double)unsummed);
    close(root);
    api_json(rs, 200, o);
    for (size_t i = 0; i < sc.n; i++)
        free(sc.e[i].path);
    free(sc.e);
}

void api_dataset_file_put(api_ctx *c, const api_req *q, api_resp *r) { file_put(c, q, r, STORE_DATASET); }
void api_dataset_file_get(api_ctx *c, const api_req *q, api_resp *r) { file_get(c, q, r, STORE_DATASET); }
void api_dataset_file_delete(api_ctx *c, const api_req *q, api_resp *r) { file_delete(c, q, r, STORE_DATASET); }
void api_dataset_file_list(api_ctx *c, const api_req *q, api_resp *r) { file_list(c, q, r, STORE_DATASET); }
void api_workspace_file_put(api_ctx *c, const api_req *q, api_resp *r) { file_put(c, q, r, STORE_WORKSPACE); }
void api_workspace_file_get(api_ctx *c, const api_req *q, api_resp *r) { file_get(c, q, r, STORE_WORKSPACE); }
void api_workspace_file_delete(api_ctx *c, const api_req *q, api_resp *r) { file_delete(c, q, r, STORE_WORKSPACE); }
void api_workspace_file_list(api_ctx *c, const api_req *q, api_resp *r) { file_list(c, q, r, STORE_WORKSPACE); }

/* ---- unfinished uploads ---- */

/* One sweep a process: what nftw's callback needs. */
static time_t sweep_before;
static long sweep_removed;

static int sweep_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    const char *base = path + ftw->base;
    if (flag == FTW_F && S_ISREG(sb->st_mode) && sb->st_mtime < sweep_before &&
        !strncmp(base, TMP_PREFIX, strlen(TMP_PREFIX)) && unlink(path) == 0)
        sweep_removed++;
    return 0;
}

static void *sweep_run(void *arg)
{
    char *root = arg;
    /* Not followed: links, and directories on other file systems. */
    nftw(root, sweep_entry, 16, FTW_PHYS | FTW_MOUNT);
    if (sweep_removed > 0)
        fprintf(stderr, "cohortd: removed %ld unfinished uploads (from before this start)\n",
                sweep_removed);
    free(root);
    return NULL;
}

int api_uploads_sweep(const char *data_dir)
{
    pthread_t t;
    pthread_attr_t at;
    size_t n = strlen(data_dir) + sizeof "/volumes";
    char *root = malloc(n);
    if (!root)
        return -1;
    fmt_cut(root, n, "%s/volumes", data_dir); /* n counted for it */
    sweep_before = time(NULL);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &at, sweep_run, root);
    pthread_attr_destroy(&at);
    if (rc != 0)
        free(root);
    return rc == 0 ? 0 : -1;
}
