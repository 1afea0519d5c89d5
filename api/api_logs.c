/*
 * api_logs: what workers print.
 *   PUT /v1/agent/logs/{worker}?offset=O   (node token, raw bytes)
 *   GET /v1/jobs/{id}/logs?rank=R&attempt=A&offset=O&limit=L  (or tail=N: the last N bytes)
 *   GET /v1/jobs/{id}/metrics
 * Each rank's output is one file, <data dir>/logs/<job>/<attempt>/<rank>.log,
 * appended at the offsets the agent sends: a chunk that was sent before is
 * recognised by its offset and never written twice.  Lines that begin with
 * "COHORT_METRIC " and carry one JSON object are also stored as metrics.
 *
 * What one job stores is bounded (api_logs_open): a table of recent jobs'
 * stored bytes, each filled from the files on disk the first time a job
 * is seen (or seen again after its slot was taken), and charged as chunks
 * arrive.  The files stay the truth; the table only spares a directory walk
 * per chunk.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api_int.h"
#include "lib/fmt.h"
#include "storage/store_job.h"
#include "storage/store_node.h"

#define METRIC_MARK "COHORT_METRIC "
#define LOG_READ_DEFAULT (1 << 20)
#define LOG_READ_MAX (8 << 20)
#define METRICS_PER_CHUNK 1024
/* Metric rows one job may store (each attempt and rank together). */
#define API_METRIC_ROWS_MAX 100000

static int log_path(api_ctx *ctx, int64_t job, int64_t attempt, int64_t rank, int create,
                    char *out, size_t n)
{
    char dir[4400];
    if (fmt_whole(dir, sizeof dir, "%s/logs/%lld/%lld", ctx->data_dir, (long long)job,
                  (long long)attempt) != 0)
        return -1;
    if (create) {
        char *slash = dir + strlen(ctx->data_dir);
        for (char *p = slash + 1; *p; p++) {
            if (*p == '/') {
                *p = '\0';
                if (mkdir(dir, 0750) != 0 && errno != EEXIST)
                    return -1;
                *p = '/';
            }
        }
        if (mkdir(dir, 0750) != 0 && errno != EEXIST)
            return -1;
    }
    return fmt_whole(out, n, "%s/%lld.log", dir, (long long)rank);
}

#define LOG_BUDGET_SLOTS 4096
#define LOG_LIMIT_MARK "\n[cohort] this job's stored output reached its limit (cohortd --log-limit); "\
                       "the rest of this rank's output was dropped\n"

struct api_log_budget {
    pthread_mutex_t lock;
    int64_t limit;
    struct {
        int64_t job;   /* 0: empty */
        int64_t bytes; /* stored (and reserved) */
    } slot[LOG_BUDGET_SLOTS];
};

int api_logs_open(api_ctx *ctx, int64_t limit, char *err, size_t errlen)
{
    struct api_log_budget *b = calloc(1, sizeof *b);
    if (!b) {
        fmt_cut(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&b->lock, NULL);
    b->limit = limit;
    ctx->logs = b;
    return 0;
}

void api_logs_close(api_ctx *ctx)
{
    if (!ctx->logs)
        return;
    pthread_mutex_destroy(&ctx->logs->lock);
    free(ctx->logs);
    ctx->logs = NULL;
}

/* logs/<job>/<attempt>/<rank>.log */
int64_t api_logs_job_bytes(api_ctx *ctx, int64_t job)
{
    char dir[4200];
    int64_t sum = 0;
    DIR *jd = fmt_whole(dir, sizeof dir, "%s/logs/%lld", ctx->data_dir, (long long)job) == 0
                  ? opendir(dir)
                  : NULL;
    struct dirent *a, *r;
    while (jd && (a = readdir(jd)) != NULL) {
        if (a->d_name[0] == '.')
            continue;
        int afd = openat(dirfd(jd), a->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *ad = afd >= 0 ? fdopendir(afd) : NULL;
        if (!ad && afd >= 0)
            close(afd);
        while (ad && (r = readdir(ad)) != NULL) {
            struct stat sb;
            if (r->d_name[0] != '.' && fstatat(dirfd(ad), r->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(sb.st_mode))
                sum += sb.st_size;
        }
        if (ad)
            closedir(ad);
    }
    if (jd)
        closedir(jd);
    return sum;
}

/* Reserves up to n of the job's remaining bytes; returns how many (n when
 * unbounded).  n = 0 asks only whether any are left (1 or 0). */
static int64_t budget_take(api_ctx *ctx, int64_t job, int64_t n)
{
    struct api_log_budget *b = ctx->logs;
    int64_t got;
    if (!b)
        return n ? n : 1;
    size_t i = (size_t)job % LOG_BUDGET_SLOTS;
    pthread_mutex_lock(&b->lock);
    if (b->slot[i].job != job) {
        pthread_mutex_unlock(&b->lock);
        int64_t on_disk = api_logs_job_bytes(ctx, job); /* outside the lock: a directory walk */
        pthread_mutex_lock(&b->lock);
        if (b->slot[i].job != job) {
            b->slot[i].job = job;
            b->slot[i].bytes = on_disk;
        }
    }
    int64_t left = b->limit - b->slot[i].bytes;
    if (left < 0)
        left = 0;
    if (n == 0) {
        got = left > 0;
    } else {
        got = n < left ? n : left;
        b->slot[i].bytes += got;
    }
    pthread_mutex_unlock(&b->lock);
    return got;
}

/* Gives back bytes reserved but not written. */
static void budget_give_back(api_ctx *ctx, int64_t job, int64_t n)
{
    struct api_log_budget *b = ctx->logs;
    if (!b || n <= 0)
        return;
    size_t i = (size_t)job % LOG_BUDGET_SLOTS;
    pthread_mutex_lock(&b->lock);
    if (b->slot[i].job == job)
        b->slot[i].bytes -= n;
    pthread_mutex_unlock(&b->lock);
}

struct log_note {
    int64_t job, attempt;
    char reason[160];
};

static store_rc note_write(store_tx *tx, void *arg)
{
    struct log_note *n = arg;
    int rc = store_job_note(tx, n->job, n->attempt, n->reason);
    return rc == STORE_NOTFOUND ? STORE_OK : rc; /* deleted meanwhile: nothing to say */
}

/* A rank's log was cut: its file ends with the mark (once), and the job
 * gets one event saying so (the first rank to be cut writes it). */
static void mark_cut(api_ctx *ctx, int fd, const store_worker *w)
{
    char tail[sizeof LOG_LIMIT_MARK], flag[4200];
    size_t ml = strlen(LOG_LIMIT_MARK);
    struct stat sb;
    if (fstat(fd, &sb) == 0 && sb.st_size >= (off_t)ml &&
        pread(fd, tail, ml, sb.st_size - (off_t)ml) == (ssize_t)ml && !memcmp(tail, LOG_LIMIT_MARK, ml))
        return;
    if (write(fd, LOG_LIMIT_MARK, ml) != (ssize_t)ml)
        return; /* a full disk: the cut shows in the job's event */
    int ffd = fmt_whole(flag, sizeof flag, "%s/logs/%lld/.log-limit", ctx->data_dir,
                        (long long)w->job_id) == 0
                  ? open(flag, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640)
                  : -1;
    if (ffd < 0)
        return; /* another rank said it already */
    close(ffd);
    struct log_note n = {w->job_id, w->attempt, ""};
    fmt_cut(n.reason, sizeof n.reason,
             "output past %lld bytes was not stored (cohortd --log-limit), from rank %lld on",
             (long long)ctx->logs->limit, (long long)w->rank);
    if (store_write(ctx->st, note_write, &n) != STORE_OK)
        fprintf(stderr, "cohortd: job %lld: cannot record that its log was cut\n",
                (long long)w->job_id);
}

struct metrics {
    int64_t job, attempt, rank, at;
    int n;
    int64_t dropped; /* past the job's bound: not stored */
    char *json[METRICS_PER_CHUNK];
};

static store_rc metrics_write(store_tx *tx, void *arg)
{
    struct metrics *m = arg;
    int64_t granted = 0;
    int rc = store_metric_reserve(tx, m->job, m->n, API_METRIC_ROWS_MAX, &granted);
    for (int i = 0; rc == STORE_OK && i < granted; i++)
        rc = store_metric_insert(tx, m->job, m->attempt, m->rank, m->at, m->json[i]);
    m->dropped = m->n - granted;
    /* The first write to be cut says so, once, in the job's events. */
    if (rc == STORE_OK && m->dropped > 0 && granted > 0) {
        char why[160];
        fmt_cut(why, sizeof why, "metrics: the job stored %d metric rows, its most; later "
                                  "COHORT_METRIC lines stay in its log only",
                 API_METRIC_ROWS_MAX);
        rc = store_job_note(tx, m->job, m->attempt, why);
        if (rc == STORE_NOTFOUND)
            rc = STORE_OK;
    }
    return rc;
}

char *api_metric_json(const char *line, size_t len)
{
    size_t ml = strlen(METRIC_MARK);
    char *text = NULL;
    if (len <= ml || memcmp(line, METRIC_MARK, ml) ||
        util_utf8_invalid_at(line + ml, len - ml) != len - ml)
        return NULL; /* stored metrics are served as JSON: UTF-8 only */
    cJSON *o = cJSON_ParseWithLength(line + ml, len - ml);
    if (cJSON_IsObject(o))
        text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* Collects the metric lines of data (whole lines only). */
static void scan_metrics(const char *data, size_t n, struct metrics *m)
{
    size_t start = 0;
    for (size_t i = 0; i < n && m->n < METRICS_PER_CHUNK; i++) {
        if (data[i] != '\n')
            continue;
        char *text = api_metric_json(data + start, i - start);
        start = i + 1;
        if (text)
            m->json[m->n++] = text;
    }
}

/* Appends to the log at fd as much of data[want] as the job's budget
 * leaves: how many bytes, or -1 with rs set (the disk refused them, and
 * what was not written is given back). */
static int64_t append_budgeted(api_ctx *ctx, int fd, int64_t job, const char *data,
                               size_t want, api_resp *rs)
{
    size_t n = (size_t)budget_take(ctx, job, (int64_t)want), done = 0;
    while (done < n) {
        ssize_t wr = write(fd, data + done, n - done);
        if (wr < 0 && errno == EINTR)
            continue;
        if (wr < 0) {
            int e = errno;
            budget_give_back(ctx, job, (int64_t)(n - done));
            api_error(rs, e == ENOSPC || e == EDQUOT ? 507 : 500,
                      e == ENOSPC || e == EDQUOT ? "no_space" : "internal", NULL,
                      "cannot write the log: %s", strerror(e));
            return -1;
        }
        done += (size_t)wr;
    }
    return (int64_t)n;
}

void api_agent_log(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_worker w;
    char path[4500];
    int fd = -1;
    struct metrics m = {0};
    int64_t id = api_id(rq->param[0]);
    const char *o = rq->query(rq->h, "offset");
    long long off;
    if (launch_int_text(o, 0, 1LL << 53, &off) != 0) { /* "-1" and "abc" were read as 0 */
        api_error(rs, 400, "invalid_value", "offset",
                  "offset must be a byte offset: decimal digits, 0 or more");
        goto out;
    }
    int rc = id > 0 ? store_worker_get(ctx->st, id, &w) : STORE_NOTFOUND;
    if (rc == STORE_OK && w.node_id != rq->node->id)
        rc = STORE_NOTFOUND;
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "worker");
        goto out;
    }
    if (log_path(ctx, w.job_id, w.attempt, w.rank, 1, path, sizeof path) != 0 ||
        (fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0640)) < 0) {
        int e = errno;
        api_error(rs, e == ENOSPC || e == EDQUOT ? 507 : 500,
                  e == ENOSPC || e == EDQUOT ? "no_space" : "internal", NULL,
                  "cannot open the log: %s", strerror(e));
        goto out;
    }
    struct stat sb;
    fstat(fd, &sb);
    int64_t size = sb.st_size;
    /* Where the agent's copy of the output goes on from (its offsets count
     * what it sent, dropped bytes too). */
    int64_t accepted = size;
    if (off > size && !budget_take(ctx, w.job_id, 0)) {
        accepted = off + (int64_t)rq->body_len; /* past the limit: taken, and dropped */
    } else if (off > size) {
        api_error(rs, 409, "gap", "offset", "the log holds %lld bytes; send from there",
                  (long long)size);
        rs->xname = "X-Log-Size";
        fmt_cut(rs->xvalue, sizeof rs->xvalue, "%lld", (long long)size);
        goto out;
    }
    /* Only what lies past the end is new: a resent chunk adds nothing. */
    int64_t skip = size - off;
    if (off <= size && (int64_t)rq->body_len > skip) {
        const char *data = rq->body + skip;
        size_t want = rq->body_len - (size_t)skip;
        int64_t got = append_budgeted(ctx, fd, w.job_id, data, want, rs);
        if (got < 0)
            goto out;
        size_t n = (size_t)got;
        size += (int64_t)n;
        accepted = size;
        if (n < want) {
            mark_cut(ctx, fd, &w);
            accepted = off + (int64_t)rq->body_len;
        }
        m = (struct metrics){w.job_id, w.attempt, w.rank, util_now_ms(), 0, 0, {0}};
        scan_metrics(data, n, &m);
        if (m.n && (rc = store_write(ctx->st, metrics_write, &m)) != STORE_OK) {
            api_store_error(rs, rc, "metrics");
            goto out;
        }
    }
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "size", (double)size);
    cJSON_AddNumberToObject(res, "offset", (double)accepted);
    if (accepted > size)
        cJSON_AddBoolToObject(res, "cut", 1); /* the agent may stop sending this worker's output */
    api_json(rs, 200, res);
out:
    for (int i = 0; i < m.n; i++)
        free(m.json[i]);
    if (fd >= 0)
        close(fd);
}

static int64_t query_int(const api_req *rq, const char *key, int64_t dflt)
{
    const char *v = rq->query(rq->h, key);
    if (!v)
        return dflt;
    if (!strcmp(v, "0"))
        return 0;
    int64_t n = api_id(v);
    return n > 0 ? n : -1;
}

/* follow=true: the log as it grows, until the attempt has ended and every
 * byte of it has arrived (an agent reports a rank ended only after shipping
 * its whole output). */
struct follow {
    api_stream s;
    api_ctx *ctx;
    int64_t job_id, attempt, rank;
    char path[4500];
    int fd;
    int64_t off;
};

/* 1 when the attempt is over: the job moved past it, or ended, and none of
 * its workers is alive. */
static int attempt_over(struct follow *f)
{
    store_job j;
    if (store_job_get(f->ctx->st, 0, f->job_id, &j) != STORE_OK)
        return 1; /* deleted */
    int moved_on = j.attempt > f->attempt || store_job_state_final(j.state);
    store_job_clear(&j);
    if (!moved_on)
        return 0;
    return !store_attempt_live(f->ctx->st, f->job_id, f->attempt);
}

static ssize_t follow_read(api_stream *s, char *buf, size_t n)
{
    struct follow *f = s->state;
    if (f->fd < 0)
        f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (f->fd >= 0) {
        ssize_t got = pread(f->fd, buf, n, f->off);
        if (got > 0) {
            f->off += got;
            return got;
        }
    }
    /* Nothing new: over, or wait.  Checked in that order, then the file once
     * more, so bytes written just before the end are not lost. */
    if (!attempt_over(f))
        return 0;
    if (f->fd < 0)
        f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    ssize_t got = f->fd >= 0 ? pread(f->fd, buf, n, f->off) : 0;
    if (got > 0) {
        f->off += got;
        return got;
    }
    return -1;
}

static void follow_done(api_stream *s)
{
    struct follow *f = s->state;
    if (f->fd >= 0)
        close(f->fd);
    free(f);
}

/* What a log read asks for (GET /v1/jobs/{id}/logs). */
struct log_ask {
    int64_t job_id, rank, attempt, off, limit, tail;
};

/* The read's rank, attempt, offset, limit and tail for job j, each in its
 * range: 0, or -1 answered. */
static int log_ask_read(const api_req *rq, const store_job *j, struct log_ask *a, api_resp *rs)
{
    *a = (struct log_ask){j->id, query_int(rq, "rank", 0), query_int(rq, "attempt", j->attempt),
                          query_int(rq, "offset", 0), query_int(rq, "limit", LOG_READ_DEFAULT),
                          query_int(rq, "tail", 0)};
    if (a->rank < 0 || a->rank >= j->worker_count) {
        api_error(rs, 400, "invalid_value", "rank", "rank must be 0..%lld",
                  (long long)j->worker_count - 1);
        return -1;
    }
    if (a->attempt < 1 || a->attempt > j->attempt) {
        api_error(rs, 400, "invalid_value", "attempt", "attempt must be 1..%lld",
                  (long long)j->attempt);
        return -1;
    }
    if (a->off < 0 || a->limit < 1 || a->limit > LOG_READ_MAX) {
        api_error(rs, 400, "invalid_value", a->off < 0 ? "offset" : "limit",
                  "offset is a byte offset; limit is 1..%d", LOG_READ_MAX);
        return -1;
    }
    if (a->tail < 0 || a->tail > LOG_READ_MAX) {
        api_error(rs, 400, "invalid_value", "tail", "tail is a byte count 1..%d", LOG_READ_MAX);
        return -1;
    }
    return 0;
}

/* ?follow=true: the log streamed from the offset as it grows, until the
 * attempt ends. */
static void log_follow(api_ctx *ctx, const struct log_ask *a, api_resp *rs)
{
    if (a->tail > 0) {
        api_error(rs, 400, "invalid_value", "tail", "tail reads the end once: not with follow");
        return;
    }
    struct follow *f = calloc(1, sizeof *f);
    if (!f || log_path(ctx, a->job_id, a->attempt, a->rank, 0, f->path, sizeof f->path) != 0) {
        free(f);
        api_error(rs, 500, "internal", NULL, "out of memory");
        return;
    }
    f->s = (api_stream){follow_read, follow_done, f};
    f->ctx = ctx;
    f->job_id = a->job_id;
    f->attempt = a->attempt;
    f->rank = a->rank;
    f->fd = -1;
    f->off = a->off;
    rs->status = 200;
    rs->ctype = "text/plain; charset=utf-8";
    rs->stream = &f->s;
}

void api_job_logs(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_job j;
    struct log_ask a;
    char path[4500];
    if (api_job_find(ctx, rq, &j, rs))
        return;
    int bad = log_ask_read(rq, &j, &a, rs);
    store_job_clear(&j);
    if (bad)
        return;
    const char *follow = rq->query(rq->h, "follow");
    if (follow && !strcmp(follow, "true")) {
        log_follow(ctx, &a, rs);
        return;
    }
    int64_t size = 0, off = a.off, limit = a.limit;
    int fd = -1;
    if (log_path(ctx, a.job_id, a.attempt, a.rank, 0, path, sizeof path) == 0 &&
        (fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
        struct stat sb;
        fstat(fd, &sb);
        size = sb.st_size;
    }
    if (a.tail > 0) { /* the last tail bytes, whatever the offset */
        off = size > a.tail ? size - a.tail : 0;
        limit = a.tail;
    }
    if (off > size)
        off = size;
    int64_t n = size - off < limit ? size - off : limit;
    rs->status = 200;
    rs->ctype = "text/plain; charset=utf-8";
    rs->xname = "X-Next-Offset";
    fmt_cut(rs->xvalue, sizeof rs->xvalue, "%lld", (long long)(off + n));
    if (fd >= 0 && n > 0) {
        rs->fd = fd;
        rs->foffset = off;
        rs->fsize = n;
    } else {
        if (fd >= 0)
            close(fd);
        rs->body = strdup("");
        rs->len = 0;
    }
}

static void metric_row(void *arg, const store_metric *m)
{
    cJSON *o = api_object(m->id, NULL);
    cJSON_AddNumberToObject(o, "attempt", (double)m->attempt);
    cJSON_AddNumberToObject(o, "rank", (double)m->rank);
    api_add_time(o, "at", m->at);
    cJSON_AddItemToObject(o, "values", cJSON_CreateRaw(m->data));
    api_list_add(arg, o, m->id);
}

void api_job_metrics(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    api_list pg;
    int64_t job;
    if (api_job_list_open(ctx, rq, &pg, &job, rs) == 0)
        api_list_close(rs, &pg, store_metric_list(ctx->st, job, pg.cursor, pg.limit, metric_row,
                                                  &pg), "metrics");
}
