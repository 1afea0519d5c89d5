/*
 * bench/e2e: single-worker jobs that exit at once, through the REST API and
 * one local agent, in two phases:
 *   burst: JOBS submitted at once from 8 connections: jobs completed per
 *          second (first submit to last SUCCEEDED), and submit-to-start
 *          latency, which there is mostly time spent queued;
 *   paced: PACED more, RATE a second (default 50, one every 20 ms), each
 *          submitted on its slot: submit-to-start latency of the platform
 *          itself, and at higher RATEs how it holds under a steady load.
 * The job's program records when it started.  Needs root (namespaces).
 * Workers run in containers (crun) from a busybox image in a registry of
 * the bench's own, cached on the node by a warm-up job before anything is
 * timed; COHORT_E2E_RUNTIME=host runs them as host processes instead (the
 * agent's --runtime host), to compare, and COHORT_E2E_NETWORK=job|host sets
 * the agent's --network.
 * usage: bench_e2e BUILD_DIR [JOBS] [PACED] [RATE]
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/common/bench_http.h"

#define ADMIN "bench-e2e-admin-token-0123456789"

#define SUBMITTERS 8

static char base[160], dir[64];
static CURL *curl; /* the main thread's; each submitter has its own */

static long call_on(CURL *c, const char *method, const char *path, const char *ctype,
                    const char *body, size_t n, bench_sink *out)
{
    return bench_call(c, base, ADMIN, method, path, ctype, body, n, NULL, out);
}

static long call(const char *method, const char *path, const char *ctype, const char *body,
                 size_t n, bench_sink *out)
{
    return call_on(curl, method, path, ctype, body, n, out);
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static pid_t spawn(char *const argv[], const char *log)
{
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        setenv("COHORT_ADMIN_TOKEN", ADMIN, 1);
        close_range(3, ~0U, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    return p;
}

/* A loopback port free now. */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* The bench's registry on a free port, holding the busybox image that the
 * built-in "native" image names; its pid, or -1. */
static pid_t start_registry(char *addr, size_t n)
{
    char conf[128], log[128], cmd[1024];
    snprintf(addr, n, "127.0.0.1:%d", free_port());
    snprintf(log, sizeof log, "%s/registry.log", dir);
    if (bench_registry_conf(dir, addr, conf, sizeof conf) != 0)
        return -1;
    char *argv[] = {"/usr/bin/docker-registry", "serve", conf, NULL};
    pid_t p = spawn(argv, log);
    snprintf(cmd, sizeof cmd, "curl -sf http://%s/v2/ >/dev/null", addr);
    for (int i = 0; i < 100 && system(cmd) != 0; i++)
        usleep(50000);
    snprintf(cmd, sizeof cmd, "'%s/tests/make-test-image' %s cohort/cohort:bookworm >/dev/null",
             COHORT_SOURCE_DIR, addr);
    return system(cmd) == 0 ? p : -1;
}

struct submitter {
    int first, step, jobs;
    long long *submitted;
    int failed;
};

/* Submits jobs first, first+step, ... over a connection of its own. */
static void *submit_main(void *arg)
{
    struct submitter *sb = arg;
    CURL *c = curl_easy_init();
    bench_sink out = {0};
    for (int i = sb->first; c && i < sb->jobs; i += sb->step) {
        char body[512];
        int n = snprintf(body, sizeof body,
                         "{\"name\":\"e2e-%d\",\"image\":\"native\",\"workspace\":\"ws\","
                         "\"code_path\":\"stamp\",\"epochs\":1,\"lr\":0.1,\"batch_size\":1,"
                         "\"worker_spec\":\"cpu-small\",\"worker_count\":1,"
                         "\"env\":{\"BENCH_I\":\"%d\"}}",
                         i, i);
        sb->submitted[i] = now_ns();
        if (call_on(c, "POST", "/v1/jobs", "application/json", body, (size_t)n, &out) != 201)
            sb->failed++;
    }
    bench_sink_free(&out);
    curl_easy_cleanup(c);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static long count_state(const char *metrics, const char *state)
{
    char key[64];
    snprintf(key, sizeof key, "cohort_jobs{state=\"%s\"} ", state);
    const char *p = strstr(metrics, key);
    return p ? atol(p + strlen(key)) : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_e2e BUILD_DIR [JOBS] [PACED] [RATE]\n");
        return 2;
    }
    const char *build = argv[1];
    int jobs = argc > 2 ? atoi(argv[2]) : 1000;
    int paced = argc > 3 ? atoi(argv[3]) : 200;
    int rate = argc > 4 ? atoi(argv[4]) : 50;
    if (jobs < 1 || jobs > 100000 || paced < 1 || paced > 100000 || rate < 1 || rate > 10000) {
        fprintf(stderr, "bench/e2e: JOBS and PACED must be 1..100000, RATE 1..10000\n");
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "bench/e2e: needs root (the agent sandboxes workers in namespaces)\n");
        return 1;
    }
    char agent[512], prog[512], path[1024];
    snprintf(agent, sizeof agent, "%s/cohort-agent", build);
    snprintf(prog, sizeof prog, "%s/bench_e2e_started", build);
    snprintf(dir, sizeof dir, "/tmp/cohort-e2e-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    chmod(dir, 0711); /* the agent's image cache inside: containers' uids walk through */
    const char *runtime = getenv("COHORT_E2E_RUNTIME") ? getenv("COHORT_E2E_RUNTIME") : "crun";
    char reg[64] = "";
    pid_t rpid = -1;
    if (strcmp(runtime, "host") && (rpid = start_registry(reg, sizeof reg)) < 0) {
        fprintf(stderr, "bench/e2e: the registry or its image failed (see %s)\n", dir);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    curl = curl_easy_init();
    /* One token submits everything: no per-token rate limit. */
    static const char *const cargs[] = {"--access-log", "off", "--rate-limit", "0", NULL};
    pid_t cpid = bench_cohortd_start(build, dir, ADMIN, cargs, base, sizeof base);
    if (cpid < 0)
        return 1;

    bench_sink out = {0};
    call("POST", "/v1/nodes/join-tokens", NULL, NULL, 0, &out);
    char join[128] = "";
    char *t = strstr(out.buf, "\"token\":\"");
    if (t)
        sscanf(t + 9, "%127[^\"]", join);
    char adir[256];
    snprintf(adir, sizeof adir, "%s/agent", dir);
    snprintf(path, sizeof path, "%s/agent.log", dir);
    char *aargs[] = {agent, "--server", base, "--join-token", join, "--name", "bench",
                     "--data-dir", adir, "--cpus", "64", "--memory-mb", "262144",
                     "--address", "127.0.0.1", NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                     NULL, NULL};
    int na = 15;
    /* COHORT_E2E_CGROUP=off|DIR: the agent's --cgroup, to see what cgroups cost */
    if (getenv("COHORT_E2E_CGROUP")) {
        aargs[na++] = "--cgroup";
        aargs[na++] = getenv("COHORT_E2E_CGROUP");
    }
    /* COHORT_E2E_NETWORK=job|host: the agent's --network, to see what a
     * network of the job's own costs its start */
    if (getenv("COHORT_E2E_NETWORK")) {
        aargs[na++] = "--network";
        aargs[na++] = getenv("COHORT_E2E_NETWORK");
    }
    if (!strcmp(runtime, "host")) {
        aargs[na++] = "--runtime";
        aargs[na++] = "host";
    } else {
        aargs[na++] = "--registry";
        aargs[na++] = reg;
        aargs[na++] = "--insecure-registry";
        aargs[na++] = reg;
    }
    pid_t apid = spawn(aargs, path);
    for (int i = 0; i < 100; i++) {
        call("GET", "/v1/nodes", NULL, NULL, 0, &out);
        if (strstr(out.buf, "\"bench\""))
            break;
        usleep(50000);
    }
    const char ws[] = "{\"name\":\"ws\"}";
    call("POST", "/v1/workspaces", "application/json", ws, sizeof ws - 1, &out);
    FILE *pf = fopen(prog, "rb");
    static char bin[1 << 20];
    size_t blen = pf ? fread(bin, 1, sizeof bin, pf) : 0;
    if (pf)
        fclose(pf);
    long st = call("PUT", "/v1/workspaces/ws/files/stamp?mode=755", "application/octet-stream",
                   bin, blen, &out);
    /* A directory for the start stamps, by uploading a placeholder into it. */
    call("PUT", "/v1/workspaces/ws/files/started/.keep", "application/octet-stream", "", 0, &out);
    if (st != 201 || !join[0]) {
        fprintf(stderr, "bench/e2e: set-up failed (%ld): %s\n", st, out.buf);
        return 1;
    }

    /* One job first, untimed: the node pulls and unpacks the image once. */
    const char warm_job[] = "{\"name\":\"warm-up\",\"image\":\"native\",\"workspace\":\"ws\","
                            "\"code_path\":\"stamp\",\"epochs\":1,\"lr\":0.1,\"batch_size\":1,"
                            "\"worker_spec\":\"cpu-small\",\"worker_count\":1,"
                            "\"env\":{\"BENCH_I\":\"warm\"}}";
    long long tw = now_ns();
    call("POST", "/v1/jobs", "application/json", warm_job, sizeof warm_job - 1, &out);
    const long warm = 1;
    for (int i = 0; i < 3000; i++) {
        call("GET", "/metrics", NULL, NULL, 0, &out);
        if (count_state(out.buf, "SUCCEEDED") + count_state(out.buf, "FAILED") >= warm)
            break;
        usleep(20000);
    }
    if (count_state(out.buf, "SUCCEEDED") != warm) {
        fprintf(stderr, "bench/e2e: the warm-up job failed (see %s)\n", dir);
        return 1;
    }
    printf("RESULT op=warm_up runtime=%s seconds=%.2f\n", runtime, (double)(now_ns() - tw) / 1e9);

    long long *submitted = calloc((size_t)(jobs + paced), sizeof *submitted);
    long long t0 = now_ns();
    pthread_t th[SUBMITTERS];
    struct submitter sb[SUBMITTERS];
    for (int k = 0; k < SUBMITTERS; k++) {
        sb[k] = (struct submitter){k, SUBMITTERS, jobs, submitted, 0};
        pthread_create(&th[k], NULL, submit_main, &sb[k]);
    }
    for (int k = 0; k < SUBMITTERS; k++) {
        pthread_join(th[k], NULL);
        if (sb[k].failed) {
            fprintf(stderr, "bench/e2e: %d submits failed\n", sb[k].failed);
            return 1;
        }
    }
    long long t_submitted = now_ns();
    long done = 0, failed = 0;
    for (int i = 0; i < 6000 && done + failed < jobs; i++) {
        call("GET", "/metrics", NULL, NULL, 0, &out);
        done = count_state(out.buf, "SUCCEEDED") - warm;
        failed = count_state(out.buf, "FAILED");
        usleep(10000);
    }
    long long t_done = now_ns();

    /* Paced: RATE jobs a second, each submitted on its slot (at once when
     * the previous submit ran past it). */
    long long t_paced = now_ns(), slot = 1000000000LL / rate;
    for (int i = jobs; i < jobs + paced; i++) {
        long long due = t_paced + (long long)(i - jobs) * slot, wait = due - now_ns();
        if (wait > 0)
            usleep((useconds_t)(wait / 1000));
        char body[512];
        int n = snprintf(body, sizeof body,
                         "{\"name\":\"paced-%d\",\"image\":\"native\",\"workspace\":\"ws\","
                         "\"code_path\":\"stamp\",\"epochs\":1,\"lr\":0.1,\"batch_size\":1,"
                         "\"worker_spec\":\"cpu-small\",\"worker_count\":1,"
                         "\"env\":{\"BENCH_I\":\"%d\"}}",
                         i, i);
        submitted[i] = now_ns();
        if (call("POST", "/v1/jobs", "application/json", body, (size_t)n, &out) != 201) {
            fprintf(stderr, "bench/e2e: paced submit %d failed: %s\n", i, out.buf);
            return 1;
        }
    }
    double paced_secs = (double)(now_ns() - t_paced) / 1e9;
    long paced_done = 0;
    for (int i = 0; i < 6000; i++) {
        call("GET", "/metrics", NULL, NULL, 0, &out);
        paced_done = count_state(out.buf, "SUCCEEDED") - warm - done;
        if (paced_done + count_state(out.buf, "FAILED") - failed >= paced)
            break;
        usleep(10000);
    }
    double paced_all = (double)(now_ns() - t_paced) / 1e9;

    /* Where the workspace is on disk: tenant 1 (platform), workspace 1. */
    long long *lat = calloc((size_t)(jobs + paced), sizeof *lat);
    double secs = (double)(t_done - t0) / 1e9;
    printf("RESULT op=e2e runtime=%s jobs=%d succeeded=%ld failed=%ld seconds=%.2f "
           "jobs_per_s=%.0f submit_per_s=%.0f\n",
           runtime, jobs, done, failed, secs, done / secs,
           jobs / ((double)(t_submitted - t0) / 1e9));
    printf("RESULT op=e2e runtime=%s phase=paced jobs=%d succeeded=%ld seconds=%.2f "
           "jobs_per_s=%.0f\n",
           runtime, paced, paced_done, paced_all, paced_done / paced_all);
    for (int phase = 0; phase < 2; phase++) {
        int lo = phase ? jobs : 0, hi = phase ? jobs + paced : jobs, nl = 0;
        for (int i = lo; i < hi; i++) {
            snprintf(path, sizeof path, "%s/volumes/1/workspaces/1/started/%d", dir, i);
            FILE *f = fopen(path, "r");
            long long s;
            if (f && fscanf(f, "%lld", &s) == 1)
                lat[nl++] = s - submitted[i];
            if (f)
                fclose(f);
        }
        qsort(lat, (size_t)nl, sizeof *lat, cmp);
        if (nl > 0 && phase)
            printf("RESULT op=submit_to_start runtime=%s phase=paced rate=%d submitted_per_s=%.0f "
                   "samples=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f\n",
                   runtime, rate, paced / paced_secs, nl, lat[nl / 2] / 1e6, lat[nl * 99 / 100] / 1e6,
                   lat[nl - 1] / 1e6);
        else if (nl > 0)
            printf("RESULT op=submit_to_start runtime=%s phase=burst samples=%d p50_ms=%.1f "
                   "p99_ms=%.1f max_ms=%.1f\n",
                   runtime, nl, lat[nl / 2] / 1e6, lat[nl * 99 / 100] / 1e6, lat[nl - 1] / 1e6);
    }
    kill(apid, SIGTERM);
    waitpid(apid, NULL, 0);
    kill(cpid, SIGTERM);
    waitpid(cpid, NULL, 0);
    if (rpid > 0) {
        kill(rpid, SIGTERM);
        waitpid(rpid, NULL, 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (getenv("COHORT_BENCH_KEEP"))
        printf("bench/e2e: kept %s\n", dir);
    else if (system(cmd) != 0)
        return 1;
    free(submitted);
    free(lat);
    bench_sink_free(&out);
    curl_easy_cleanup(curl);
    return done == jobs ? 0 : 1;
}
