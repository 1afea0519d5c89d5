/*
 * bench/history: cohortd over a long history.  Twice, each time on a store
 * of its own: first a near-empty one (1,000 finished jobs and 10 pending),
 * then a large one (FINISHED finished jobs over the past year and PENDING
 * pending, 1,000,000 and 10,000 by default).  Each time it starts cohortd,
 * makes ten tenants (one user each) and one node through the API, stops
 * cohortd, writes the history straight into the database (sqlite3 or psql:
 * jobs with their events, workers and ledger charges, as cohortd writes
 * them), starts cohortd again with the node heartbeating, and measures, as
 * a member of one tenant (a tenth of the jobs):
 *   - GET /v1/jobs/ID (random jobs of the tenant), the jobs list's first
 *     page, pages further on by cursor, and a page filtered by state;
 *   - /v1/usage (this month, by day and by job) and this month's and last
 *     month's invoices (their first pages, and last month's 20 pages in);
 *   - the scheduler's passes over the pending queue (/metrics: the mean
 *     over a window, the longest since start, the queue's length): the
 *     pending jobs ask for 16 CPUs and the node has 4, so every pass plans
 *     over all of them and places none;
 *   - cohortd's RSS now and at its peak.
 * Prints figures; asserts nothing.
 *
 * usage: bench_history BUILD_DIR [FINISHED] [PENDING] [SAMPLES]
 * COHORT_BENCH_PG=DIR: on the PostgreSQL server whose socket is in DIR
 * (bench/history/run starts one), in databases it creates; SQLite otherwise.
 * COHORT_BENCH_KEEP=1 keeps the data dirs (their paths are printed).
 */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/common/bench_http.h"

#define ADMIN "bench-history-admin-token-0123456789"
#define TENANTS 10
#define DAY_MS 86400000LL

static char base[160];
static char node_token[128];
static int hb_stop;

struct world {
    long long tenant[TENANTS], user[TENANTS];
    long long node;
    char token[128]; /* a member of tenant 0 */
};

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000 + (double)ts.tv_nsec / 1e6;
}

/* The number after "key": in s, or -1. */
static long long num_after(const char *s, const char *key)
{
    const char *p = s ? strstr(s, key) : NULL;
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* The string after "key":" in s into out; 0 or -1. */
static int str_after(const char *s, const char *key, char *out, size_t n)
{
    const char *p = s ? strstr(s, key) : NULL;
    size_t k = 0;
    if (!p)
        return -1;
    for (p += strlen(key); *p && *p != '"' && k + 1 < n; p++)
        out[k++] = *p;
    out[k] = '\0';
    return k ? 0 : -1;
}

/* Tenants, their users, a member token of tenant 0, and the node. */
static int setup(CURL *c, struct world *w)
{
    bench_sink out = {0};
    char body[512], path[160], join[128];
    int rc = -1;
    for (int t = 0; t < TENANTS; t++) {
        int n = snprintf(body, sizeof body, "{\"name\":\"hist-%d\"}", t);
        if (bench_call(c, base, ADMIN, "POST", "/v1/tenants", "application/json", body,
                       (size_t)n, NULL, &out) != 201 ||
            (w->tenant[t] = num_after(out.buf, "\"id\":")) < 0)
            goto out;
        snprintf(path, sizeof path, "/v1/tenants/hist-%d/users", t);
        if (bench_call(c, base, ADMIN, "POST", path, "application/json",
                       "{\"name\":\"u\",\"role\":\"member\"}", 28, NULL, &out) != 201 ||
            (w->user[t] = num_after(out.buf, "\"id\":")) < 0)
            goto out;
    }
    snprintf(path, sizeof path, "/v1/users/%lld/tokens", w->user[0]);
    if (bench_call(c, base, ADMIN, "POST", path, "application/json", "{\"name\":\"b\"}", 12, NULL,
                   &out) != 201 ||
        str_after(out.buf, "\"token\":\"", w->token, sizeof w->token) ||
        bench_call(c, base, ADMIN, "POST", "/v1/nodes/join-tokens", NULL, NULL, 0, NULL, &out) !=
            201 ||
        str_after(out.buf, "\"token\":\"", join, sizeof join))
        goto out;
    int n = snprintf(body, sizeof body,
                     "{\"join_token\":\"%s\",\"name\":\"n1\",\"address\":\"127.0.0.1\",\"cpus\":4,"
                     "\"memory_mb\":16384,\"port_lo\":20000,\"port_hi\":20999}",
                     join);
    if (bench_call(c, base, ADMIN, "POST", "/v1/agent/register", "application/json", body,
                   (size_t)n, NULL, &out) != 201 ||
        (w->node = num_after(out.buf, "\"node_id\":")) < 0 ||
        str_after(out.buf, "\"node_token\":\"", node_token, sizeof node_token))
        goto out;
    rc = 0;
out:
    return bench_setup_end(rc, "bench/history: setting up", &out);
}

/* The node's heartbeat, every second, while cohortd runs (or restarts). */
static void *heartbeat_main(void *arg)
{
    static const char body[] = "{\"workers\":[]}";
    bench_sink out = {0};
    CURL *c = curl_easy_init();
    (void)arg;
    while (!__atomic_load_n(&hb_stop, __ATOMIC_ACQUIRE)) {
        if (base[0])
            bench_call(c, base, node_token, "POST", "/v1/agent/heartbeat", "application/json",
                       body, sizeof body - 1, NULL, &out);
        usleep(1000000);
    }
    bench_sink_free(&out);
    curl_easy_cleanup(c);
    return NULL;
}

/* The rows of n integers 1..n, as a subquery named s with column n. */
static void series(char *out, size_t len, int pg, long long n)
{
    if (pg)
        snprintf(out, len, "(SELECT generate_series(CAST(1 AS BIGINT), %lld) AS n) s", n);
    else
        snprintf(out, len,
                 "(WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < %lld)"
                 " SELECT n FROM c) s",
                 n);
}

/*
 * The history, as SQL both engines take: finished jobs 1..fin, created
 * evenly over the year before now (a tenth per tenant, k = id % 10), each
 * with one or two workers that ran 1 to 60 minutes on the node, their
 * charges and four events; then pend pending jobs of 16 CPUs.
 */
static char *history_sql(const struct world *w, int pg, long long fin, long long pend)
{
    long long now = now_ms(), t0 = now - 365 * DAY_MS, step = 365 * DAY_MS / fin;
    char sf[256], sp[256];
    size_t cap = 16384, len = 0;
    char *sql = malloc(cap);
    if (!sql)
        return NULL;
    series(sf, sizeof sf, pg, fin);
    series(sp, sizeof sp, pg, pend);
    len += (size_t)snprintf(sql + len, cap - len,
                            "BEGIN;\nCREATE TEMP TABLE hist_tu(k BIGINT PRIMARY KEY, tenant BIGINT,"
                            " usr BIGINT);\nINSERT INTO hist_tu VALUES ");
    for (int t = 0; t < TENANTS; t++)
        len += (size_t)snprintf(sql + len, cap - len, "%s(%d, %lld, %lld)", t ? ", " : "", t,
                                w->tenant[t], w->user[t]);
    /* The ended jobs' counts, on PostgreSQL, as the ledger's totals below:
     * filled once after the load, not by a trigger a million times. */
    if (pg)
        len += (size_t)snprintf(sql + len, cap - len,
                                ";\nALTER TABLE jobs DISABLE TRIGGER jobs_end_insert");
    static const char cols[] =
        "id, tenant_id, user_id, name, image, framework, workspace, code_path, epochs, lr,"
        " batch_size, worker_spec, cpus, memory_mb, gpus, worker_count, currency,"
        " price_per_hour, state, reason, attempt, created_at, updated_at, started_at,"
        " finished_at, admitted_at, image_digest, placed_per_node";
    len += (size_t)snprintf(
        sql + len, cap - len,
        ";\nINSERT INTO jobs(%s)\n"
        " SELECT n, tu.tenant, tu.usr, 'run-' || n, 'pytorch', 'pytorch', 'ws', 'train.py', 10,"
        " 0.01, 64, 'cpu-small', 1, 2048, 0, CASE WHEN n %% 4 = 0 THEN 2 ELSE 1 END, 'USD', 5,"
        " CASE WHEN n %% 33 = 0 THEN 'CANCELLED' WHEN n %% 14 = 0 THEN 'FAILED'"
        " ELSE 'SUCCEEDED' END,"
        " CASE WHEN n %% 33 = 0 THEN 'cancelled by u' WHEN n %% 14 = 0 THEN"
        " 'worker 0 exited with status 1' END, 1, %lld + n * %lld,"
        " %lld + n * %lld + 5000 + (60 + n * 7919 %% 3540) * 1000,"
        " %lld + n * %lld + 5000, %lld + n * %lld + 5000 + (60 + n * 7919 %% 3540) * 1000,"
        " %lld + n * %lld + 1000, 'sha256:' || n, 1\n"
        " FROM %s JOIN hist_tu tu ON tu.k = n %% 10;\n",
        cols, t0, step, t0, step, t0, step, t0, step, t0, step, sf);
    len += (size_t)snprintf(
        sql + len, cap - len,
        "INSERT INTO workers(job_id, attempt, rank, node_rank, local_rank, node_id, desired,"
        " state, exit_code, created_at, started_at, finished_at, cpu_us, memory_peak,"
        " image_digest)\n"
        " SELECT j.id, 1, r.rk, 0, r.rk, %lld, 'stop', 'exited',"
        " CASE WHEN j.state = 'FAILED' THEN 1 ELSE 0 END, j.admitted_at, j.started_at,"
        " j.finished_at, (j.finished_at - j.started_at) * 900, 104857600, j.image_digest\n"
        " FROM jobs j JOIN (SELECT 0 AS rk UNION ALL SELECT 1) r ON r.rk < j.worker_count;\n",
        w->node);
    /* On PostgreSQL the balance and usage triggers are left out of the bulk
     * load and their results written once: a million updates of a few
     * thousand rows in one transaction leave each row a chain of dead
     * versions that every next update walks. */
    if (pg)
        len += (size_t)snprintf(sql + len, cap - len,
                                "ALTER TABLE ledger DISABLE TRIGGER ledger_balance;\n"
                                "ALTER TABLE ledger DISABLE TRIGGER ledger_usage;\n");
    len += (size_t)snprintf(
        sql + len, cap - len,
        "INSERT INTO ledger(tenant_id, at, kind, amount, currency, job_id, attempt, rank,"
        " job_name, user_id, worker_spec, gpus, started_at, finished_at, seconds,"
        " price_per_hour)\n"
        " SELECT j.tenant_id, w.finished_at, 'charge',"
        " ((w.finished_at - w.started_at) / 1000 * j.price_per_hour + 3599) / 3600, 'USD', j.id,"
        " 1, w.rank, j.name, j.user_id, j.worker_spec, 0, w.started_at, w.finished_at,"
        " (w.finished_at - w.started_at) / 1000, j.price_per_hour\n"
        " FROM workers w JOIN jobs j ON j.id = w.job_id;\n");
    if (pg)
        len += (size_t)snprintf(
            sql + len, cap - len,
            "ALTER TABLE ledger ENABLE TRIGGER ledger_balance;\n"
            "ALTER TABLE ledger ENABLE TRIGGER ledger_usage;\n"
            "INSERT INTO accounts(tenant_id, currency, balance, charged)"
            " SELECT tenant_id, 'USD', -sum(amount), sum(amount) FROM ledger GROUP BY tenant_id"
            " ON CONFLICT(tenant_id) DO UPDATE SET balance = accounts.balance + excluded.balance,"
            " charged = accounts.charged + excluded.charged;\n"
            /* the running totals as migration 011 fills them */
            "INSERT INTO usage_days SELECT tenant_id, at / 86400000, user_id, worker_spec,"
            " count(*), sum(seconds), sum(seconds * gpus), sum(amount), max(currency)"
            " FROM ledger WHERE kind = 'charge' GROUP BY 1, 2, 3, 4;\n"
            "INSERT INTO usage_job_months SELECT tenant_id, usage_month(at), job_id,"
            " max(job_name), count(*), sum(seconds), sum(seconds * gpus), sum(amount),"
            " max(currency) FROM ledger WHERE kind = 'charge' GROUP BY 1, 2, 3;\n"
            /* and the ended jobs' counts as migration 012 fills them */
            "ALTER TABLE jobs ENABLE TRIGGER jobs_end_insert;\n"
            "INSERT INTO job_end_counts SELECT tenant_id, state, count(*) FROM jobs"
            " WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') GROUP BY 1, 2;\n");
    len += (size_t)snprintf(
        sql + len, cap - len,
        /* Each job's submit event comes with its row (the jobs_submitted trigger). */
        "INSERT INTO job_events(job_id, at, attempt, from_state, to_state, reason)\n"
        " SELECT id, admitted_at, 1, 'PENDING', 'STARTING', NULL FROM jobs\n"
        " UNION ALL SELECT id, started_at, 1, 'STARTING', 'RUNNING', NULL FROM jobs\n"
        " UNION ALL SELECT id, finished_at, 1, 'RUNNING', state, reason FROM jobs;\n");
    len += (size_t)snprintf(
        sql + len, cap - len,
        "INSERT INTO jobs(id, tenant_id, user_id, name, image, framework, workspace, code_path,"
        " epochs, lr, batch_size, worker_spec, cpus, memory_mb, gpus, worker_count, currency,"
        " price_per_hour, state, attempt, created_at, updated_at)\n"
        " SELECT %lld + n, tu.tenant, tu.usr, 'queued-' || n, 'pytorch', 'pytorch', 'ws',"
        " 'train.py', 10, 0.01, 64, 'cpu-large', 16, 65536, 0, 1, 'USD', 80, 'PENDING', 1,"
        " %lld + n, %lld + n\n"
        " FROM %s JOIN hist_tu tu ON tu.k = n %% 10;\n",
        fin, now - pend - 60000, now - pend - 60000, sp);
    if (pg)
        len += (size_t)snprintf(sql + len, cap - len,
                                "SELECT setval(pg_get_serial_sequence('jobs', 'id'),"
                                " (SELECT max(id) FROM jobs));\nCOMMIT;\nVACUUM ANALYZE;\n");
    else
        len += (size_t)snprintf(sql + len, cap - len, "COMMIT;\n");
    if (len >= cap) {
        free(sql);
        return NULL;
    }
    return sql;
}

/* Runs sql through sqlite3 or psql on target; 0 or -1. */
static int run_sql(const char *dir, const char *target, int pg, const char *sql)
{
    char file[256], cmd[1024];
    snprintf(file, sizeof file, "%s/history.sql", dir);
    FILE *f = fopen(file, "w");
    if (!f || fputs(sql, f) < 0 || fclose(f) != 0)
        return -1;
    if (pg)
        snprintf(cmd, sizeof cmd, "psql -X -q -v ON_ERROR_STOP=1 '%s' -f '%s' >/dev/null", target,
                 file);
    else
        snprintf(cmd, sizeof cmd, "sqlite3 -bail '%s' < '%s' >/dev/null", target, file);
    return system(cmd) == 0 ? 0 : -1;
}

struct series_ms {
    double *v;
    size_t n;
    size_t bytes; /* the last answer's body */
};

/* samples calls of GET path (a fresh %lld from ids[] when it has one). */
static int measure(CURL *c, const char *token, const char *path, const long long *ids, int samples,
                   struct series_ms *out)
{
    bench_sink body = {0};
    out->bytes = 0;
    char p[512];
    out->v = calloc((size_t)samples, sizeof *out->v);
    out->n = 0;
    if (!out->v)
        return -1;
    for (int i = 0; i < samples; i++) {
        snprintf(p, sizeof p, path, ids ? ids[i] : 0LL);
        double t = mono_ms();
        long st = bench_call(c, base, token, "GET", p, NULL, NULL, 0, NULL, &body);
        double dt = mono_ms() - t;
        if (st != 200) {
            fprintf(stderr, "bench/history: GET %s: %ld %s\n", p, st, body.buf);
            bench_sink_free(&body);
            return -1;
        }
        out->v[out->n++] = dt;
        out->bytes = body.len;
    }
    bench_sink_free(&body);
    return 0;
}

/* The value of a /metrics line that starts with name and a space. */
static double metric(CURL *c, const char *name)
{
    bench_sink out = {0};
    double v = -1;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    if (bench_call(c, base, ADMIN, "GET", "/metrics", NULL, NULL, 0, NULL, &out) == 200) {
        const char *p = strstr(out.buf, key);
        if (p)
            v = strtod(p + strlen(key), NULL);
    }
    bench_sink_free(&out);
    return v;
}

static void month_of(long long ms, int back, char *out, size_t n)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    int m = tm.tm_year * 12 + tm.tm_mon - back;
    snprintf(out, n, "%04d-%02d", 1900 + m / 12, m % 12 + 1);
}

/* One store: set up, fill, measure, print.  0 or -1. */
static int phase(const char *build, const char *label, long long fin, long long pend, int samples)
{
    const char *pgdir = getenv("COHORT_BENCH_PG");
    int pg = pgdir && *pgdir;
    char dir[] = "/tmp/cohort-bench-history-XXXXXX", store[512], target[512], cmd[1024];
    struct world w = {0};
    CURL *c = curl_easy_init();
    int rc = -1;
    pid_t pid = -1;
    pthread_t hb;
    int hb_on = 0;
    if (!mkdtemp(dir) || !c)
        return -1;
    if (pg) {
        snprintf(cmd, sizeof cmd,
                 "psql -X -q 'postgresql:///postgres?host=%s&user=cohort' -c 'CREATE DATABASE "
                 "hist_%s'",
                 pgdir, label);
        if (system(cmd) != 0)
            goto out;
        snprintf(store, sizeof store, "postgresql:///hist_%s?host=%s&user=cohort", label, pgdir);
        snprintf(target, sizeof target, "%s", store);
    } else {
        snprintf(store, sizeof store, "sqlite:%s/cohort.db", dir);
        snprintf(target, sizeof target, "%s/cohort.db", dir);
    }
    const char *extra[] = {"--access-log", "off", "--rate-limit", "0", "--store", store, NULL};
    base[0] = '\0';
    if ((pid = bench_cohortd_start(build, dir, ADMIN, extra, base, sizeof base)) < 0 ||
        setup(c, &w))
        goto out;
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    pid = -1;
    char *sql = history_sql(&w, pg, fin, pend);
    double t = mono_ms();
    int filled = sql ? run_sql(dir, target, pg, sql) : -1;
    free(sql);
    if (filled) {
        fprintf(stderr, "bench/history: writing the history failed (%s/history.sql)\n", dir);
        goto out;
    }
    double fill_s = (mono_ms() - t) / 1000;
    __atomic_store_n(&hb_stop, 0, __ATOMIC_RELEASE);
    if ((pid = bench_cohortd_start(build, dir, ADMIN, extra, base, sizeof base)) < 0 ||
        pthread_create(&hb, NULL, heartbeat_main, NULL) != 0)
        goto out;
    hb_on = 1;
    sleep(3); /* the node up again, a few passes run */

    /* Random jobs of tenant 0 (ids k*10), a tenth of them failed or cancelled. */
    long long *ids = malloc((size_t)samples * sizeof *ids);
    if (!ids)
        goto out;
    srand(7);
    for (int i = 0; i < samples; i++)
        ids[i] = 10LL * (1 + rand() % (int)(fin / 10));
    char cur[16], prev[16], page[64] = "";
    month_of(now_ms(), 0, cur, sizeof cur);
    month_of(now_ms(), 1, prev, sizeof prev);
    /* A cursor 20 pages in: where a user paging back through the list is. */
    {
        bench_sink out = {0};
        char p[160] = "/v1/jobs?limit=50";
        for (int i = 0; i < 20; i++) {
            if (bench_call(c, base, w.token, "GET", p, NULL, NULL, 0, NULL, &out) != 200 ||
                str_after(out.buf, "\"next_cursor\":\"", page, sizeof page))
                break;
            snprintf(p, sizeof p, "/v1/jobs?limit=50&cursor=%s", page);
        }
        bench_sink_free(&out);
    }
    char deep[160], inv_cur[64], inv_prev[64];
    snprintf(deep, sizeof deep, "/v1/jobs?limit=50&cursor=%s", page);
    snprintf(inv_cur, sizeof inv_cur, "/v1/invoices/%s", cur);
    snprintf(inv_prev, sizeof inv_prev, "/v1/invoices/%s", prev);
    /* An invoice's lines 20 pages in, as the console's More lines gets them. */
    char inv_deep[160];
    {
        bench_sink out = {0};
        char p[160], next[64] = "";
        snprintf(p, sizeof p, "%s", inv_prev);
        for (int i = 0; i < 20; i++) {
            if (bench_call(c, base, w.token, "GET", p, NULL, NULL, 0, NULL, &out) != 200 ||
                str_after(out.buf, "\"next_cursor\":\"", next, sizeof next))
                break;
            snprintf(p, sizeof p, "%s?cursor=%s", inv_prev, next);
        }
        bench_sink_free(&out);
        snprintf(inv_deep, sizeof inv_deep, "%s", p);
    }
    struct {
        const char *what, *path;
        const long long *ids;
        int samples;
    } q[] = {
        {"job GET", "/v1/jobs/%lld", ids, samples},
        {"jobs list, first page (50)", "/v1/jobs?limit=50", NULL, samples},
        {"jobs list, page 21 by cursor", deep, NULL, samples},
        {"jobs list, state=FAILED", "/v1/jobs?limit=50&state=FAILED", NULL, samples},
        {"job events", "/v1/jobs/%lld/events", ids, samples},
        {"usage, this month by day", "/v1/usage", NULL, samples / 5 + 1},
        {"usage, this month by job (50)", "/v1/usage?group_by=job", NULL, samples / 5 + 1},
        {"invoice, this month (50 lines)", inv_cur, NULL, samples / 5 + 1},
        {"invoice, last month (50 lines)", inv_prev, NULL, samples / 5 + 1},
        {"invoice, last month, page 21", inv_deep, NULL, samples / 5 + 1},
    };
    printf("\n== %s store (%s, %s): %lld finished jobs, %lld pending; history written in "
           "%.1f s\n",
           label, pg ? "postgresql" : "sqlite", dir, fin, pend, fill_s);
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) {
        struct series_ms s;
        if (measure(c, w.token, q[i].path, q[i].ids, q[i].samples, &s)) {
            free(s.v);
            free(ids);
            goto out;
        }
        printf("RESULT store=%s %-30s n=%-4zu p50_ms=%8.2f p99_ms=%8.2f body_kb=%.1f\n", label,
               q[i].what, s.n, bench_pct(s.v, s.n, 50), bench_pct(s.v, s.n, 99),
               (double)s.bytes / 1024);
        free(s.v);
    }
    free(ids);
    {
        struct series_ms s;
        if (measure(c, ADMIN, "/metrics", NULL, samples / 5 + 1, &s)) {
            free(s.v);
            goto out;
        }
        printf("RESULT store=%s %-30s n=%-4zu p50_ms=%8.2f p99_ms=%8.2f\n", label,
               "/metrics (platform admin)", s.n, bench_pct(s.v, s.n, 50), bench_pct(s.v, s.n, 99));
        free(s.v);
    }
    double n0 = metric(c, "cohort_scheduler_pass_seconds_count"),
           s0 = metric(c, "cohort_scheduler_pass_seconds_sum");
    sleep(10);
    double n1 = metric(c, "cohort_scheduler_pass_seconds_count"),
           s1 = metric(c, "cohort_scheduler_pass_seconds_sum");
    double maxp = metric(c, "cohort_scheduler_max_pass_seconds"),
           pending = metric(c, "cohort_scheduler_last_pass_pending");
    long long ticks;
    long rss, peak;
    bench_proc_usage(pid, &ticks, &rss, &peak);
    printf("RESULT store=%s scheduler passes=%.0f over 10 s pass_mean_ms=%.1f pass_max_ms=%.1f "
           "(since start) pending_planned=%.0f\n",
           label, n1 - n0, n1 > n0 ? (s1 - s0) / (n1 - n0) * 1000 : -1.0, maxp * 1000, pending);
    printf("RESULT store=%s cohortd rss_mb=%.1f peak_rss_mb=%.1f\n", label, (double)rss / 1024,
           (double)peak / 1024);
    fflush(stdout);
    rc = 0;
out:
    __atomic_store_n(&hb_stop, 1, __ATOMIC_RELEASE);
    if (hb_on)
        pthread_join(hb, NULL);
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    curl_easy_cleanup(c);
    if (rc == 0 && !getenv("COHORT_BENCH_KEEP")) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench/history: could not remove %s\n", dir);
    } else {
        fprintf(stderr, "bench/history: kept %s\n", dir);
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_history BUILD_DIR [FINISHED] [PENDING] [SAMPLES]\n");
        return 2;
    }
    long long fin = argc > 2 ? atoll(argv[2]) : 1000000;
    long long pend = argc > 3 ? atoll(argv[3]) : 10000;
    int samples = argc > 4 ? atoi(argv[4]) : 200;
    if (fin < 1000 || fin > 100000000 || pend < 1 || pend > 10000000 || samples < 5 ||
        samples > 100000) {
        fprintf(stderr, "bench/history: FINISHED >= 1000, PENDING >= 1, SAMPLES >= 5\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    printf("bench/history: %ld CPUs; GETs one at a time as a member of one tenant of %d "
           "(a tenth of the jobs)\n",
           sysconf(_SC_NPROCESSORS_ONLN), TENANTS);
    fflush(stdout);
    if (phase(argv[1], "small", 1000, 10, samples) ||
        phase(argv[1], "large", fin, pend, samples))
        return 1;
    curl_global_cleanup();
    return 0;
}
