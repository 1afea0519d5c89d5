/*
 * stuse: tenants' storage use, measured by a walk, and its enforcement
 * (see stuse.h).
 */
#include "api/stuse.h"
#include "lib/fmt.h"

#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "api/api_int.h"
#include "scheduler/sched_life.h"
#include "storage/store_job.h"
#include "storage/store_node.h"

struct tenant_use {
    int64_t tenant, walked, added; /* bytes at the last walk, uploads since */
    int64_t files_walked, files_added; /* entries, likewise */
    int64_t logs; /* bytes of its jobs' logs at the last walk */
};

/* A job's tenant, remembered for the walk of the logs (a job never
 * changes tenant): an open-addressed table, job 0 empty. */
struct job_tenant {
    int64_t job, tenant;
};

/* What a running worker hides in deleted, open files (stuse_hidden). */
struct hidden {
    int64_t worker, tenant, bytes, at_ms;
};

#define HIDDEN_MAX 4096 /* workers hiding bytes at once, all nodes together */

struct stuse {
    api_ctx *ctx;
    int64_t interval_ms, default_quota, max_files;
    struct hidden hid[HIDDEN_MAX];
    int nhid;
    struct job_tenant *jt; /* the walker's own: no lock */
    size_t njt, capjt;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stop;
    struct tenant_use *t;
    size_t n, cap;
};

/* Under u->lock: the tenant's entry, made when missing (NULL: no memory). */
static struct tenant_use *entry(stuse *u, int64_t tenant)
{
    for (size_t i = 0; i < u->n; i++)
        if (u->t[i].tenant == tenant)
            return &u->t[i];
    if (u->n == u->cap) {
        size_t cap = u->cap ? u->cap * 2 : 64;
        struct tenant_use *p = realloc(u->t, cap * sizeof *p);
        if (!p)
            return NULL;
        u->t = p;
        u->cap = cap;
    }
    u->t[u->n] = (struct tenant_use){tenant, 0, 0, 0, 0, 0};
    return &u->t[u->n++];
}

/* Under u->lock: what the tenant's running workers hide now, entries gone
 * stale dropped on the way. */
static int64_t hidden_of(stuse *u, int64_t tenant, int64_t now_ms)
{
    int64_t ttl = 3000 * (u->ctx->heartbeat_s > 0 ? u->ctx->heartbeat_s : 10), sum = 0;
    for (int i = 0; i < u->nhid;) {
        if (u->hid[i].at_ms < now_ms - ttl) {
            u->hid[i] = u->hid[--u->nhid];
            continue;
        }
        if (u->hid[i].tenant == tenant) /* each at most a file system's size */
            sum = sum > INT64_MAX / 2 ? sum : sum + u->hid[i].bytes;
        i++;
    }
    return sum;
}

/* The size of the file system the volumes lie on: no deleted file on it
 * holds more.  INT64_MAX / 4 when it cannot be read. */
static int64_t volumes_fs_bytes(const stuse *u)
{
    char path[4200];
    struct statvfs sv;
    if (fmt_path(path, sizeof path, u->ctx->data_dir, "volumes") != 0 || statvfs(path, &sv) != 0 ||
        sv.f_blocks == 0)
        return INT64_MAX / 4;
    double b = (double)sv.f_blocks * (double)sv.f_frsize;
    return b < (double)(INT64_MAX / 4) ? (int64_t)b : INT64_MAX / 4;
}

void stuse_hidden(stuse *u, int64_t worker, int64_t tenant, int64_t bytes, int64_t now_ms)
{
    if (!u)
        return;
    /* An agent's figure is believed up to what the file system can hold: a
     * node that claims more than that for its worker counts no more. */
    if (bytes > 0) {
        int64_t most = volumes_fs_bytes(u);
        bytes = bytes < most ? bytes : most;
    }
    pthread_mutex_lock(&u->lock);
    int i = 0;
    while (i < u->nhid && u->hid[i].worker != worker)
        i++;
    if (bytes <= 0 && i < u->nhid)
        u->hid[i] = u->hid[--u->nhid];
    else if (bytes > 0 && (i < u->nhid || u->nhid < HIDDEN_MAX))
        u->hid[i == u->nhid ? u->nhid++ : i] = (struct hidden){worker, tenant, bytes, now_ms};
    pthread_mutex_unlock(&u->lock);
}

/* The tenant's bytes (files 0: with what its workers hide) or entries
 * (files 1) as of the last walk plus what landed since. */
static int64_t use_of(stuse *u, int64_t tenant, int files)
{
    if (!u)
        return 0;
    pthread_mutex_lock(&u->lock);
    struct tenant_use *e = entry(u, tenant);
    int64_t v = !e ? 0
                : files ? e->files_walked + e->files_added
                        : e->walked + e->added + e->logs + hidden_of(u, tenant, util_now_ms());
    pthread_mutex_unlock(&u->lock);
    return v < 0 ? 0 : v;
}

int64_t stuse_used(stuse *u, int64_t tenant)
{
    return use_of(u, tenant, 0);
}

void stuse_add(stuse *u, int64_t tenant, int64_t delta)
{
    if (!u)
        return;
    pthread_mutex_lock(&u->lock);
    struct tenant_use *e = entry(u, tenant);
    if (e)
        e->added += delta;
    pthread_mutex_unlock(&u->lock);
}

int stuse_take(stuse *u, int64_t tenant, int64_t n, int64_t quota)
{
    int rc = 0;
    if (!u)
        return 0;
    pthread_mutex_lock(&u->lock);
    struct tenant_use *e = entry(u, tenant);
    if (!e || (quota >= 0 && e->walked + e->added + n > quota))
        rc = -1;
    else
        e->added += n;
    pthread_mutex_unlock(&u->lock);
    return rc;
}

int64_t stuse_files(stuse *u, int64_t tenant)
{
    return use_of(u, tenant, 1);
}

int64_t stuse_max_files(const stuse *u)
{
    return u ? u->max_files : -1;
}

int stuse_take_file(stuse *u, int64_t tenant)
{
    int rc = 0;
    if (!u)
        return 0;
    pthread_mutex_lock(&u->lock);
    struct tenant_use *e = entry(u, tenant);
    if (!e || (u->max_files >= 0 && e->files_walked + e->files_added + 1 > u->max_files))
        rc = -1;
    else
        e->files_added++;
    pthread_mutex_unlock(&u->lock);
    return rc;
}

void stuse_add_files(stuse *u, int64_t tenant, int64_t delta)
{
    if (!u)
        return;
    pthread_mutex_lock(&u->lock);
    struct tenant_use *e = entry(u, tenant);
    if (e)
        e->files_added += delta;
    pthread_mutex_unlock(&u->lock);
}

int64_t stuse_quota(stuse *u, int64_t tenant)
{
    store_quota q;
    if (!u || store_quota_get(u->ctx->st, tenant, &q) != STORE_OK)
        return -1;
    return q.max_storage_bytes >= 0 ? q.max_storage_bytes : u->default_quota;
}

/* ---- the walk (one thread: nftw's callback state is this file's) ---- */

static int64_t walk_sum, walk_files;

static int walk_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    if (flag == FTW_F && S_ISREG(sb->st_mode))
        walk_sum += (int64_t)sb->st_blocks * 512;
    walk_files += ftw->level > 0; /* every entry but the tenant's own directory */
    return 0;
}

struct overdue {
    int64_t tenant, used, quota, files, max_files;
};

struct stop_ctx {
    const struct overdue *o;
    size_t n;
    util_i64s jobs, tenants;
    int oom;
};

static void running_row(void *arg, const store_job_brief *b)
{
    struct stop_ctx *c = arg;
    for (size_t i = 0; i < c->n; i++)
        if (c->o[i].tenant == b->tenant_id &&
            (util_i64s_push(&c->jobs, b->id) != 0 || util_i64s_push(&c->tenants, i) != 0))
            c->oom = 1;
}

/* Ends every running or starting job of the tenants over their quota. */
static store_rc stop_write(store_tx *tx, void *arg)
{
    struct stop_ctx *c = arg;
    c->jobs.n = c->tenants.n = 0;
    int rc = store_job_briefs_tx(tx, JOB_RUNNING, running_row, c);
    if (rc == STORE_OK)
        rc = store_job_briefs_tx(tx, JOB_STARTING, running_row, c);
    if (rc == STORE_OK && c->oom)
        rc = STORE_NOMEM;
    for (size_t i = 0; rc == STORE_OK && i < c->jobs.n; i++) {
        const struct overdue *o = &c->o[c->tenants.v[i]];
        char why[256];
        if (o->quota >= 0 && o->used > o->quota)
            fmt_cut(why, sizeof why,
                    "storage_quota_exceeded: the tenant's workspaces, datasets and logs hold "
                    "%" PRId64 " bytes, past its quota of %" PRId64 " (GET /v1/quota)",
                    o->used, o->quota);
        else
            fmt_cut(why, sizeof why,
                     "storage_quota_exceeded: the tenant's workspaces and datasets hold %" PRId64
                     " files and directories, past the bound of %" PRId64 " (GET /v1/quota)",
                     o->files, o->max_files);
        int r = sched_job_end(tx, 0, c->jobs.v[i], JOB_FAILED, why);
        if (r != STORE_OK && r != STORE_JOB_FINAL)
            rc = r;
    }
    return rc;
}

/* ---- the logs' walk ---- */

static size_t jt_slot(const stuse *u, int64_t job)
{
    size_t i = (size_t)(((uint64_t)job * 11400714819323198485ull) >> 20) & (u->capjt - 1);
    while (u->jt[i].job && u->jt[i].job != job)
        i = (i + 1) & (u->capjt - 1);
    return i;
}

/* The tenant of job: remembered, or read from the store (and remembered);
 * 0 for a job the store no longer has. */
static int64_t tenant_of_job(stuse *u, int64_t job)
{
    if (u->njt * 2 >= u->capjt) { /* grow, and place every entry again */
        size_t cap = u->capjt ? u->capjt * 2 : 1024;
        struct job_tenant *old = u->jt, *t = calloc(cap, sizeof *t);
        if (!t)
            return 0;
        size_t oldcap = u->capjt;
        u->jt = t;
        u->capjt = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].job)
                u->jt[jt_slot(u, old[i].job)] = old[i];
        free(old);
    }
    size_t i = jt_slot(u, job);
    if (u->jt[i].job)
        return u->jt[i].tenant;
    store_job j;
    store_read_begin(u->ctx->st);
    int rc = store_job_get(u->ctx->st, 0, job, &j);
    store_read_end(u->ctx->st);
    if (rc != STORE_OK)
        return 0;
    u->jt[i] = (struct job_tenant){job, j.tenant_id};
    u->njt++;
    store_job_clear(&j);
    return u->jt[i].tenant;
}

/* Every job's logs (DATA_DIR/logs/<job>) added up by tenant, into each
 * tenant's logs: logs count in its storage use, and go when it deletes
 * the job. */
static void walk_logs(stuse *u)
{
    char root[sizeof u->ctx->data_dir + 16];
    util_i64s tenants = {0}, bytes = {0};
    DIR *d = fmt_path(root, sizeof root, u->ctx->data_dir, "logs") == 0 ? opendir(root) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char *end;
        long long job = strtoll(e->d_name, &end, 10);
        int64_t tenant = *end || job <= 0 ? 0 : tenant_of_job(u, job);
        if (tenant <= 0)
            continue;
        size_t k = 0;
        while (k < tenants.n && tenants.v[k] != tenant)
            k++;
        if (k == tenants.n && (util_i64s_push(&tenants, tenant) || util_i64s_push(&bytes, 0)))
            break;
        bytes.v[k] += api_logs_job_bytes(u->ctx, job);
    }
    if (d)
        closedir(d);
    pthread_mutex_lock(&u->lock);
    for (size_t i = 0; i < u->n; i++)
        u->t[i].logs = 0;
    for (size_t k = 0; k < tenants.n && k < bytes.n; k++) {
        struct tenant_use *t = entry(u, tenants.v[k]);
        if (t)
            t->logs = bytes.v[k];
    }
    pthread_mutex_unlock(&u->lock);
    free(tenants.v);
    free(bytes.v);
}

/* One walk of every tenant's volumes, then the stops it calls for. */
static void walk_all(stuse *u)
{
    walk_logs(u);
    char root[4200], dir[4500];
    DIR *d = fmt_path(root, sizeof root, u->ctx->data_dir, "volumes") == 0 ? opendir(root) : NULL;
    struct dirent *e;
    struct overdue *over = NULL;
    size_t nover = 0, capover = 0;
    while (d && (e = readdir(d)) != NULL) {
        char *end;
        long long tenant = strtoll(e->d_name, &end, 10);
        if (*end || tenant <= 0 || fmt_path(dir, sizeof dir, root, e->d_name) != 0)
            continue;
        /* What uploads and removals counted before this walk began is in
         * it; what they count while it runs stays counted beside it (an
         * upload the walk saw too is counted twice until the next walk:
         * never less than the truth, which a reset to nothing would be). */
        pthread_mutex_lock(&u->lock);
        struct tenant_use *t = entry(u, tenant);
        int64_t added = t ? t->added : 0, files_added = t ? t->files_added : 0;
        pthread_mutex_unlock(&u->lock);
        walk_sum = walk_files = 0;
        nftw(dir, walk_one, 16, FTW_PHYS | FTW_MOUNT);
        pthread_mutex_lock(&u->lock);
        if ((t = entry(u, tenant)) != NULL) {
            t->walked = walk_sum;
            t->files_walked = walk_files;
            t->added -= added;
            t->files_added -= files_added;
        }
        /* for the stops below: its logs and what its workers hide too */
        walk_sum += (t ? t->logs : 0) + hidden_of(u, tenant, util_now_ms());
        pthread_mutex_unlock(&u->lock);
        store_read_begin(u->ctx->st);
        int64_t quota = stuse_quota(u, tenant);
        store_read_end(u->ctx->st);
        if ((quota >= 0 && walk_sum > quota) || (u->max_files >= 0 && walk_files > u->max_files)) {
            if (nover == capover) {
                capover = capover ? capover * 2 : 8;
                struct overdue *p = realloc(over, capover * sizeof *p);
                if (!p)
                    break;
                over = p;
            }
            over[nover++] = (struct overdue){tenant, walk_sum, quota, walk_files, u->max_files};
        }
    }
    if (d)
        closedir(d);
    if (nover > 0) {
        struct stop_ctx c = {over, nover, {0}, {0}, 0};
        int rc = store_write(u->ctx->st, stop_write, &c);
        if (rc != STORE_OK && rc != STORE_BUSY)
            fprintf(stderr, "cohortd: cannot stop jobs over their storage quota (%s)\n",
                    store_rc_name(rc));
        if (rc == STORE_OK && c.jobs.n > 0)
            sched_wake(u->ctx->sched);
        free(c.jobs.v);
        free(c.tenants.v);
    }
    free(over);
}

static void *walker(void *arg)
{
    stuse *u = arg;
    pthread_mutex_lock(&u->lock);
    while (!u->stop) {
        pthread_mutex_unlock(&u->lock);
        walk_all(u);
        pthread_mutex_lock(&u->lock);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += u->interval_ms / 1000;
        until.tv_nsec += (u->interval_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!u->stop && pthread_cond_timedwait(&u->wake, &u->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&u->lock);
    return NULL;
}

stuse *stuse_start(api_ctx *ctx, int64_t interval_ms, int64_t default_quota, int64_t max_files)
{
    stuse *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->ctx = ctx;
    u->interval_ms = interval_ms > 0 ? interval_ms : 30000;
    u->default_quota = default_quota;
    u->max_files = max_files;
    pthread_mutex_init(&u->lock, NULL);
    pthread_cond_init(&u->wake, NULL);
    if (pthread_create(&u->thread, NULL, walker, u) != 0) {
        pthread_mutex_destroy(&u->lock);
        pthread_cond_destroy(&u->wake);
        free(u);
        return NULL;
    }
    return u;
}

void stuse_stop(stuse *u)
{
    if (!u)
        return;
    pthread_mutex_lock(&u->lock);
    u->stop = 1;
    pthread_cond_broadcast(&u->wake);
    pthread_mutex_unlock(&u->lock);
    pthread_join(u->thread, NULL);
    pthread_mutex_destroy(&u->lock);
    pthread_cond_destroy(&u->wake);
    free(u->t);
    free(u->jt);
    free(u);
}
