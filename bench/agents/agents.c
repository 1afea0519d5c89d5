/*
 * bench/agents: many agents against one cohortd.  Light simulated agents,
 * all in this process on one libcurl multi handle, each with a node token
 * of its own: registered as a real agent registers, heartbeating every 2 s
 * and long-polling its desired state as cohort-agent does (they run no
 * workers).  At 100, 500, 1,000 and 2,000 nodes (up to MAX_NODES) it
 * measures for WINDOW seconds: cohortd's share of one CPU and its RSS,
 * heartbeat latency, and the wake-up of long polls: from a job's submit to
 * the answer of the poll of the node it was placed on, for jobs submitted
 * one at a time during the window.  Prints figures; asserts nothing.
 *
 * usage: bench_agents BUILD_DIR [MAX_NODES] [WINDOW_S]
 * COHORT_BENCH_STORE=URL runs cohortd with --store URL (bench/agents/run
 * starts a PostgreSQL server for it); COHORT_BENCH_THREADS, its --threads
 * (default 2, one per CPU here).
 */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/common/bench_http.h"

#define ADMIN "bench-agents-admin-token-0123456789"
#define HEARTBEAT_MS 2000
#define POLL_WAIT_S 30
#define MAX_JOB_ID 100000
#define JOBS_PER_WINDOW 40

struct agent {
    char token[128];
    char version[32];
    CURL *poll, *hb;
    struct curl_slist *auth;
    bench_sink poll_out, hb_out;
    long long hb_started, next_hb; /* ms */
};

static char base[160];
static struct agent *agents;
static int nagents;
static CURLM *multi;
static long long submitted_at[MAX_JOB_ID]; /* ms; 0: not watched */
static char seen[MAX_JOB_ID];

/* Latencies of the window, ms. */
struct samples {
    double *v;
    size_t n, cap;
};
static struct samples hb_lat, wake_lat;
static int measuring;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void add(struct samples *s, double v)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        double *nv = realloc(s->v, cap * sizeof *nv);
        if (!nv)
            return;
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = v;
}

static double pct(struct samples *s, double p)
{
    return bench_pct(s->v, s->n, p);
}

static void start_poll(struct agent *a)
{
    char url[256];
    snprintf(url, sizeof url, "%s/v1/agent/desired?version=%s&wait=%d", base, a->version,
             POLL_WAIT_S);
    a->poll_out.len = 0;
    curl_multi_remove_handle(multi, a->poll);
    curl_easy_setopt(a->poll, CURLOPT_URL, url);
    curl_multi_add_handle(multi, a->poll);
}

static void start_hb(struct agent *a, long long now)
{
    static const char body[] = "{\"workers\":[]}";
    char url[256];
    snprintf(url, sizeof url, "%s/v1/agent/heartbeat", base);
    a->hb_out.len = 0;
    curl_multi_remove_handle(multi, a->hb);
    curl_easy_setopt(a->hb, CURLOPT_URL, url);
    curl_easy_setopt(a->hb, CURLOPT_POSTFIELDS, body);
    a->hb_started = now;
    a->next_hb = 0; /* in flight */
    curl_multi_add_handle(multi, a->hb);
}

static CURL *easy_for(struct agent *a, bench_sink *sink, long timeout_ms)
{
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, a->auth);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bench_sink_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PRIVATE, a);
    return c;
}

/* Registers one more node; 0 or -1. */
static int register_agent(CURL *c, int i)
{
    bench_sink out = {0};
    char body[512], join[128] = "";
    int rc = -1;
    if (bench_call(c, base, ADMIN, "POST", "/v1/nodes/join-tokens", NULL, NULL, 0, NULL, &out) !=
            201 ||
        sscanf(strstr(out.buf, "\"token\":\"") ? strstr(out.buf, "\"token\":\"") + 9 : "",
               "%127[^\"]", join) != 1)
        goto out;
    snprintf(body, sizeof body,
             "{\"join_token\":\"%s\",\"name\":\"sim-%d\",\"address\":\"127.0.0.%d\",\"cpus\":4,"
             "\"memory_mb\":16384,\"port_lo\":20000,\"port_hi\":20999}",
             join, i, 1 + i % 250);
    struct agent *a = &agents[i];
    const char *t;
    if (bench_call(c, base, ADMIN, "POST", "/v1/agent/register", "application/json", body,
                   strlen(body), NULL, &out) != 201 ||
        !(t = strstr(out.buf, "\"node_token\":\"")) ||
        sscanf(t + 14, "%127[^\"]", a->token) != 1)
        goto out;
    char h[200];
    snprintf(h, sizeof h, "Authorization: Bearer %s", a->token);
    a->auth = curl_slist_append(NULL, h);
    a->auth = curl_slist_append(a->auth, "Content-Type: application/json");
    snprintf(a->version, sizeof a->version, "0");
    a->poll = easy_for(a, &a->poll_out, (POLL_WAIT_S + 10) * 1000L);
    a->hb = easy_for(a, &a->hb_out, 10000L);
    a->next_hb = now_ms() + rand() % HEARTBEAT_MS; /* spread over the period */
    start_poll(a);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench/agents: registering node %d failed: %s\n", i, out.buf);
    bench_sink_free(&out);
    return rc;
}

/* A poll answered: its version, and the wake-up of every watched job in it. */
static void polled(struct agent *a, long status, long long now)
{
    const char *v = a->poll_out.buf ? strstr(a->poll_out.buf, "\"version\":\"") : NULL;
    if (status == 200 && v)
        sscanf(v + 11, "%31[^\"]", a->version);
    for (const char *p = a->poll_out.buf; p && (p = strstr(p, "\"job_id\":")); p += 9) {
        long id = strtol(p + 9, NULL, 10);
        if (id > 0 && id < MAX_JOB_ID && __atomic_load_n(&submitted_at[id], __ATOMIC_ACQUIRE) &&
            !__atomic_exchange_n(&seen[id], 1, __ATOMIC_ACQ_REL) && measuring)
            add(&wake_lat, (double)(now - submitted_at[id]));
    }
}

/* Runs the agents for ms milliseconds. */
static void run_for(long long ms)
{
    long long end = now_ms() + ms;
    for (long long now = now_ms(); now < end; now = now_ms()) {
        for (int i = 0; i < nagents; i++)
            if (agents[i].next_hb && agents[i].next_hb <= now)
                start_hb(&agents[i], now);
        int running;
        curl_multi_perform(multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            struct agent *a;
            long status = 0;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&a);
            curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            long long t = now_ms();
            if (m->easy_handle == a->hb) {
                if (measuring && status == 200)
                    add(&hb_lat, (double)(t - a->hb_started));
                a->next_hb = a->hb_started + HEARTBEAT_MS;
                if (a->next_hb <= t)
                    a->next_hb = t + 1;
            } else {
                polled(a, status, t);
                start_poll(a);
            }
        }
        curl_multi_poll(multi, NULL, 0, 20, NULL);
    }
}

struct submitter {
    char token[128];
    int n;
    long long spacing_ms;
};

/* Submits n one-worker jobs, spacing_ms apart, noting when each was sent. */
static void *submit_main(void *arg)
{
    struct submitter *s = arg;
    static const char body[] =
        "{\"name\":\"w\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"run\","
        "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\","
        "\"worker_count\":1}";
    CURL *c = curl_easy_init();
    bench_sink out = {0};
    for (int i = 0; i < s->n; i++) {
        long long t = now_ms();
        long st = bench_call(c, base, s->token, "POST", "/v1/jobs", "application/json", body,
                             sizeof body - 1, NULL, &out);
        const char *id = strstr(out.buf, "\"id\":");
        long j = id ? strtol(id + 5, NULL, 10) : 0;
        if (st == 201 && j > 0 && j < MAX_JOB_ID)
            __atomic_store_n(&submitted_at[j], t, __ATOMIC_RELEASE);
        long long rest = t + s->spacing_ms - now_ms();
        if (rest > 0)
            usleep((useconds_t)rest * 1000);
    }
    bench_sink_free(&out);
    curl_easy_cleanup(c);
    return NULL;
}

/* A tenant member's token and a workspace with a program, for submits. */
static int tenant(CURL *c, char *tok, size_t n)
{
    bench_sink out = {0};
    int rc = -1;
    const char *p;
    static const char prog[] = "#!/bin/sh\nexit 0\n";
    if (bench_call(c, base, ADMIN, "POST", "/v1/tenants", "application/json",
                   "{\"name\":\"bench\"}", 16, NULL, &out) != 201 ||
        bench_call(c, base, ADMIN, "POST", "/v1/tenants/bench/users", "application/json",
                   "{\"name\":\"b\",\"role\":\"member\"}", 28, NULL, &out) != 201 ||
        !(p = strstr(out.buf, "\"id\":")))
        goto out;
    char path[96];
    snprintf(path, sizeof path, "/v1/users/%ld/tokens", strtol(p + 5, NULL, 10));
    if (bench_call(c, base, ADMIN, "POST", path, "application/json", "{\"name\":\"b\"}", 12, NULL,
                   &out) != 201 ||
        !(p = strstr(out.buf, "\"token\":\"")) || sscanf(p + 9, "%127[^\"]", tok) != 1)
        goto out;
    (void)n;
    if (bench_call(c, base, tok, "POST", "/v1/workspaces", "application/json",
                   "{\"name\":\"ws\"}", 13, NULL, &out) != 201 ||
        bench_call(c, base, tok, "PUT", "/v1/workspaces/ws/files/run?mode=755",
                   "application/octet-stream", prog, sizeof prog - 1, NULL, &out) != 201)
        goto out;
    rc = 0;
out:
    return bench_setup_end(rc, "bench/agents: setting up a tenant", &out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_agents BUILD_DIR [MAX_NODES] [WINDOW_S]\n");
        return 2;
    }
    int max_nodes = argc > 2 ? atoi(argv[2]) : 2000;
    int window_s = argc > 3 ? atoi(argv[3]) : 20;
    if (max_nodes < 1 || max_nodes > 20000 || window_s < 2) {
        fprintf(stderr, "bench/agents: MAX_NODES 1..20000, WINDOW_S >= 2\n");
        return 2;
    }
    /* Two descriptors per simulated agent here, and as many in cohortd. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    char dir[] = "/tmp/cohort-bench-agents-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    const char *store = getenv("COHORT_BENCH_STORE");
    /* Heartbeats wait for their commit in a request thread: threads bound
     * how many commit at once. */
    const char *threads = getenv("COHORT_BENCH_THREADS");
    if (!threads || !*threads)
        threads = "2";
    const char *extra[] = {"--access-log", "off", "--rate-limit", "0", "--max-conns-per-ip", "0",
                           "--node-timeout", "30", "--threads", threads,
                           store ? "--store" : NULL, store, NULL};
    pid_t pid = bench_cohortd_start(argv[1], dir, ADMIN, extra, base, sizeof base);
    if (pid < 0)
        return 1;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    multi = curl_multi_init();
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)max_nodes * 2 + 16);
    agents = calloc((size_t)max_nodes, sizeof *agents);
    CURL *c = curl_easy_init();
    struct submitter sub = {.n = JOBS_PER_WINDOW};
    if (!agents || !c || tenant(c, sub.token, sizeof sub.token))
        return 1;
    printf("bench/agents: cohortd on %s, %ld CPUs, heartbeats every %d s, long polls of %d s, "
           "%d s windows, %d one-worker jobs submitted in each\n",
           store ? "postgresql" : "sqlite", sysconf(_SC_NPROCESSORS_ONLN), HEARTBEAT_MS / 1000,
           POLL_WAIT_S, window_s, JOBS_PER_WINDOW);
    static const int steps[] = {100, 500, 1000, 2000, 5000, 10000, 20000};
    long tick = sysconf(_SC_CLK_TCK);
    for (size_t k = 0; k < sizeof steps / sizeof *steps; k++) {
        int n = steps[k] < max_nodes ? steps[k] : max_nodes;
        if (n <= nagents)
            break;
        long long t0 = now_ms();
        while (nagents < n) {
            if (register_agent(c, nagents))
                return 1;
            nagents++;
            if (nagents % 50 == 0)
                run_for(1); /* keep the registered ones heartbeating */
        }
        long long reg_ms = now_ms() - t0;
        run_for(2 * HEARTBEAT_MS); /* every agent heartbeating and polling */
        hb_lat.n = wake_lat.n = 0;
        long long ticks0, ticks1;
        long rss, peak;
        bench_proc_usage(pid, &ticks0, &rss, &peak);
        long long w0 = now_ms();
        measuring = 1;
        sub.spacing_ms = (long long)window_s * 1000 / (JOBS_PER_WINDOW + 1);
        pthread_t st;
        pthread_create(&st, NULL, submit_main, &sub);
        run_for((long long)window_s * 1000);
        pthread_join(st, NULL);
        run_for(1000); /* the last job's wake-up */
        measuring = 0;
        long long w1 = now_ms();
        bench_proc_usage(pid, &ticks1, &rss, &peak);
        double cpu = (double)(ticks1 - ticks0) / (double)tick / ((double)(w1 - w0) / 1000.0);
        printf("RESULT nodes=%d register_s=%.1f cohortd_cpu=%.3f rss_mb=%.1f heartbeats=%zu "
               "hb_per_s=%.0f hb_p50_ms=%.1f hb_p99_ms=%.1f wakeups=%zu wake_p50_ms=%.0f "
               "wake_p99_ms=%.0f\n",
               n, (double)reg_ms / 1000, cpu, (double)rss / 1024, hb_lat.n,
               (double)hb_lat.n * 1000 / (double)(w1 - w0), pct(&hb_lat, 50), pct(&hb_lat, 99),
               wake_lat.n, pct(&wake_lat, 50), pct(&wake_lat, 99));
        fflush(stdout);
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench/agents: could not remove %s\n", dir);
    return 0;
}
