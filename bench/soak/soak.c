/*
 * bench/soak: the platform under a long, mixed, hostile load, then a count
 * of what it owes.  A real cohortd, its registry and four agents (two in
 * network namespaces of the bench's own, on a bridge) run TENANTS tenants'
 * jobs, JOBS of them over MINUTES minutes: most finish, some fail a rank and
 * are retried, some are cancelled while they run.  In the middle one agent
 * is killed (-9) and restarted, and a little later cohortd itself.  Clients
 * retry a submit whose answer was lost, with an Idempotency-Key, as a real
 * client would.  At the end it checks, and prints:
 *   - every acknowledged job is final, none is missing, none is there twice;
 *   - no container and no mount of a worker is left on any node;
 *   - the ledger equals the workers' own times x price, to the minor unit;
 *   - cohortd's RSS and open descriptors, sampled every 10 s (flat after
 *     the warm-up is what to look for; the restart starts them again).
 * Each agent offers SOAK_AGENT_CPUS (16) CPUs.  Needs root.  Exits 1 when a
 * check fails (the data dir is kept then).
 * usage: bench_soak BUILD_DIR [MINUTES] [JOBS] [TENANTS]
 */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/common/bench_http.h"
#include "lib/util.h"

#define ADMIN "bench-soak-admin-token-012345678"
#define MAX_TENANTS 200
#define NAGENTS 4

static char dir[64], base[160], build[512], net_tag[32], bridge_ip[32], reg[64];
static int net;
static pid_t cohortd_pid, reg_pid, agent_pid[NAGENTS];
static char join[NAGENTS][128];
static volatile int sampling = 1;
/* Each agent's CPUs (SOAK_AGENT_CPUS, default 16): its slots for cpu-1 workers.
 * The jobs mostly sleep, so this is how many may wait at once, not load. */
static char agent_cpus[16] = "16";

/* One HTTP call; the status (0: no answer).  out->buf holds the body. */
static long call(CURL *c, const char *token, const char *method, const char *path,
                 const char *ctype, const void *body, size_t n, const char *idem,
                 bench_sink *out)
{
    return bench_call(c, base, token, method, path, ctype, body, n, idem, out);
}

/* The string value of "key" in a flat JSON answer (first match). */
static int json_str(const char *json, const char *key, char *out, size_t n)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":\"", key);
    const char *p = json ? strstr(json, k) : NULL;
    if (!p)
        return -1;
    p += strlen(k);
    size_t len = strcspn(p, "\"");
    snprintf(out, n, "%.*s", (int)len, p);
    return 0;
}

static long json_num(const char *json, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = json ? strstr(json, k) : NULL;
    return p ? atol(p + strlen(k)) : -1;
}

static double now_s(void)
{
    return (double)util_mono_us() / 1e6;
}

static pid_t spawn(const char *netns, char *const argv[], const char *log)
{
    fflush(stdout); /* nothing buffered may be written twice, by the child too */
    pid_t p = fork();
    if (p == 0) {
        /* No stdio in the child: another thread may have held its lock at the fork. */
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* Nothing of the soak's own: a cohortd restarted mid-run would
         * otherwise hold every socket its clients had open then. */
        close_range(3, ~0U, 0);
        if (netns) {
            char *nargv[40] = {"/usr/sbin/ip", "netns", "exec", (char *)netns};
            int n = 4;
            for (int i = 0; argv[i] && n < 39; i++)
                nargv[n++] = argv[i];
            nargv[n] = NULL;
            execv(nargv[0], nargv);
        } else {
            execv(argv[0], argv);
        }
        _exit(127);
    }
    return p;
}

/* ---- the platform ---- */

static void net_down(void)
{
    util_system("ip netns del %s-3 2>/dev/null; ip netns del %s-4 2>/dev/null; "
                "ip link del %s-br 2>/dev/null",
                net_tag, net_tag, net_tag);
}

static int net_up(void)
{
    net = 50 + getpid() % 150;
    snprintf(net_tag, sizeof net_tag, "sk%d", (int)getpid() % 100000);
    snprintf(bridge_ip, sizeof bridge_ip, "10.213.%d.1", net);
    net_down();
    if (util_system(
            "ip link add %s-br type bridge && ip addr add %s/24 dev %s-br && ip link set %s-br up",
            net_tag, bridge_ip, net_tag, net_tag))
        return -1;
    for (int i = 3; i <= 4; i++)
        if (util_system("ip netns add %s-%d && ip link add %s-h%d type veth peer name %s-n%d && "
                        "ip link set %s-h%d master %s-br up && ip link set %s-n%d netns %s-%d && "
                        "ip -n %s-%d addr add 10.213.%d.%d/24 dev %s-n%d && "
                        "ip -n %s-%d link set %s-n%d up && ip -n %s-%d link set lo up",
                        net_tag, i, net_tag, i, net_tag, i, net_tag, i, net_tag, net_tag, i,
                        net_tag, i, net_tag, i, net, i, net_tag, i, net_tag, i, net_tag, i, net_tag,
                        i))
            return -1;
    return 0;
}

static int start_registry(void)
{
    char conf[128], log[128];
    snprintf(reg, sizeof reg, "%s:%d", bridge_ip, 15000 + getpid() % 1000);
    snprintf(log, sizeof log, "%s/registry.log", dir);
    if (bench_registry_conf(dir, reg, conf, sizeof conf) != 0)
        return -1;
    char *argv[] = {"/usr/bin/docker-registry", "serve", conf, NULL};
    reg_pid = spawn(NULL, argv, log);
    for (int i = 0; i < 100 && util_system("curl -sf http://%s/v2/ >/dev/null", reg); i++)
        usleep(50000);
    return util_system("'%s/tests/make-test-image' %s cohort/cohort:bookworm >/dev/null",
                       COHORT_SOURCE_DIR, reg)
               ? -1
               : 0;
}

static void start_cohortd(const char *listen)
{
    char bin[600], log[128];
    snprintf(bin, sizeof bin, "%s/cohortd", build);
    snprintf(log, sizeof log, "%s/cohortd.log", dir);
    char *argv[] = {bin, "--listen", (char *)listen, "--data-dir", dir, "--access-log", "off",
                    NULL};
    cohortd_pid = spawn(NULL, argv, log);
    CURL *c = curl_easy_init();
    bench_sink out = {0};
    for (int i = 0; i < 200 && call(c, ADMIN, "GET", "/healthz", NULL, NULL, 0, NULL, &out) != 200;
         i++)
        usleep(50000);
    bench_sink_free(&out);
    curl_easy_cleanup(c);
}

static void start_agent(int i)
{
    char bin[600], adir[128], log[128], name[16], addr[32], ports[32], cache[128];
    snprintf(bin, sizeof bin, "%s/cohort-agent", build);
    snprintf(adir, sizeof adir, "%s/agent-%d", dir, i + 1);
    snprintf(log, sizeof log, "%s/agent-%d.log", dir, i + 1);
    snprintf(name, sizeof name, "n%d", i + 1);
    snprintf(cache, sizeof cache, "%s/images", dir);
    /* n1 and n2 share the host's network (ports apart); n3 and n4 are hosts of their own. */
    if (i < 2)
        snprintf(addr, sizeof addr, "%s", bridge_ip);
    else
        snprintf(addr, sizeof addr, "10.213.%d.%d", net, i + 1);
    snprintf(ports, sizeof ports, "%d-%d", 33000 + 100 * i, 33099 + 100 * i);
    char *argv[] = {bin,           "--server",  base,        "--join-token", join[i],
                    "--name",      name,        "--data-dir", adir,          "--cpus",
                    agent_cpus,    "--memory-mb", "65536",   "--address",    addr,
                    "--port-range", ports,      "--registry", reg,           "--insecure-registry",
                    reg,           "--image-cache", cache,   NULL};
    char ns[sizeof net_tag + 16];
    snprintf(ns, sizeof ns, "%s-%d", net_tag, i + 1);
    agent_pid[i] = spawn(i < 2 ? NULL : ns, argv, log);
}

/* ---- the load ---- */

struct tenant {
    char name[16], token[80];
    CURL *c;
};

struct job {
    long id;      /* 0: not acknowledged (set by its submitter, read after the join) */
    int tenant;
    int kind;     /* 0 ok, 1 a failing rank (retried once), 2 cancelled while it runs */
    int cancel_after_s;
    int64_t cancel_at_ms; /* atomic: 0 none yet, > 0 due (monotonic ms), -1 done */
};

#define SUBMITTERS 8

static struct tenant ten[MAX_TENANTS];
static struct job *jobs;
static int njobs;

static const char *const programs[] = {
    "ok.sh", "#!/bin/sh\nsleep 0.$(( $$ % 9 + 1 ))\necho done\n",
    "flaky.sh", "#!/bin/sh\nif [ \"$RANK\" = 1 ]; then sleep 0.5; exit 3; fi\nexec sleep 30\n",
    "long.sh", "#!/bin/sh\nexec sleep 60\n",
};

static int setup_tenant(CURL *c, int t)
{
    bench_sink out = {0};
    char body[256], path[128], uid[32];
    int rc = -1;
    snprintf(ten[t].name, sizeof ten[t].name, "t%03d", t);
    snprintf(body, sizeof body, "{\"name\":\"%.15s\"}", ten[t].name);
    if (call(c, ADMIN, "POST", "/v1/tenants", "application/json", body, strlen(body), NULL,
             &out) != 201)
        goto out;
    snprintf(path, sizeof path, "/v1/tenants/%.15s/users", ten[t].name);
    snprintf(body, sizeof body, "{\"name\":\"u%03d\",\"role\":\"member\"}", t);
    if (call(c, ADMIN, "POST", path, "application/json", body, strlen(body), NULL, &out) != 201)
        goto out;
    snprintf(uid, sizeof uid, "%ld", json_num(out.buf, "id"));
    snprintf(path, sizeof path, "/v1/users/%s/tokens", uid);
    if (call(c, ADMIN, "POST", path, "application/json", "{\"name\":\"soak\"}", 15, NULL, &out) !=
            201 ||
        json_str(out.buf, "token", ten[t].token, sizeof ten[t].token))
        goto out;
    ten[t].c = curl_easy_init();
    if (call(ten[t].c, ten[t].token, "POST", "/v1/workspaces", "application/json",
             "{\"name\":\"ws\"}", 13, NULL, &out) != 201)
        goto out;
    for (int p = 0; p < 6; p += 2) {
        snprintf(path, sizeof path, "/v1/workspaces/ws/files/%s?mode=755", programs[p]);
        if (call(ten[t].c, ten[t].token, "PUT", path, "application/octet-stream", programs[p + 1],
                 strlen(programs[p + 1]), NULL, &out) != 201)
            goto out;
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench/soak: tenant %d: %s\n", t, out.buf ? out.buf : "no answer");
    bench_sink_free(&out);
    return rc;
}

/* Submits job i, retrying with its Idempotency-Key while cohortd is away
 * (up to 60 s): 0 once acknowledged. */
static int submit(CURL *c, int i)
{
    struct job *j = &jobs[i];
    struct tenant *t = &ten[j->tenant];
    bench_sink out = {0};
    char body[512], key[32];
    static const char *const prog[] = {"ok.sh", "flaky.sh", "long.sh"};
    int workers = j->kind == 1 ? 2 : 1 + i % 2;
    snprintf(body, sizeof body,
             "{\"name\":\"soak-%d\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"%s\","
             "\"epochs\":1,\"lr\":0.1,\"batch_size\":1,\"worker_spec\":\"%s\","
             "\"worker_count\":%d,\"max_retries\":%d}",
             i, prog[j->kind], i % 3 ? "soak" : "soak-odd", workers, j->kind == 1 ? 1 : 0);
    snprintf(key, sizeof key, "soak-%d", i);
    double until = now_s() + 60;
    long st = 0;
    while (now_s() < until) {
        st = call(c, t->token, "POST", "/v1/jobs", "application/json", body, strlen(body), key,
                  &out);
        if (st == 201 || (st >= 400 && st < 500 && st != 429))
            break;
        usleep(200000);
    }
    if (st == 201)
        j->id = json_num(out.buf, "id");
    else
        fprintf(stderr, "bench/soak: job %d not acknowledged: %ld %s\n", i, st,
                out.buf ? out.buf : "");
    bench_sink_free(&out);
    return st == 201 ? 0 : -1;
}

static void cancel(CURL *c, int i)
{
    bench_sink out = {0};
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%ld/cancel", jobs[i].id);
    call(c, ten[jobs[i].tenant].token, "POST", path, NULL, NULL, 0, NULL, &out);
    bench_sink_free(&out);
}

static double t0, span;
static int acked, lost;

static int64_t mono_ms(void)
{
    return (int64_t)(now_s() * 1000);
}

/* Submits jobs k, k + SUBMITTERS, ... each at its time, on a handle of its own. */
static void *submitter(void *arg)
{
    int k = (int)(intptr_t)arg;
    CURL *c = curl_easy_init();
    for (int i = k; c && i < njobs; i += SUBMITTERS) {
        double due = t0 + span * i / njobs;
        while (now_s() < due)
            usleep(2000);
        if (submit(c, i) == 0) {
            __atomic_add_fetch(&acked, 1, __ATOMIC_RELAXED);
            if (jobs[i].kind == 2)
                __atomic_store_n(&jobs[i].cancel_at_ms,
                                 mono_ms() + 1000LL * jobs[i].cancel_after_s, __ATOMIC_RELEASE);
        } else {
            __atomic_add_fetch(&lost, 1, __ATOMIC_RELAXED);
        }
    }
    curl_easy_cleanup(c);
    return NULL;
}

/* cohortd's RSS (kB) and open descriptors, every 10 s. */
static void *sampler(void *arg)
{
    (void)arg;
    double t0 = now_s(), next = t0;
    while (sampling) {
        if (now_s() >= next) {
            char path[64], line[256];
            long rss = -1;
            int fds = 0;
            snprintf(path, sizeof path, "/proc/%d/status", (int)cohortd_pid);
            FILE *f = fopen(path, "r");
            while (f && fgets(line, sizeof line, f))
                if (!strncmp(line, "VmRSS:", 6))
                    rss = atol(line + 6);
            if (f)
                fclose(f);
            snprintf(path, sizeof path, "/proc/%d/fd", (int)cohortd_pid);
            DIR *d = opendir(path);
            struct dirent *e;
            while (d && (e = readdir(d)) != NULL)
                fds += e->d_name[0] != '.';
            if (d)
                closedir(d);
            printf("SAMPLE t=%.0f cohortd_pid=%d rss_kb=%ld fds=%d\n", now_s() - t0,
                   (int)cohortd_pid, rss, fds);
            fflush(stdout);
            next += 10;
        }
        usleep(200000);
    }
    return NULL;
}

static long long db_ll(const char *sql)
{
    char cmd[2048], out[64] = "";
    snprintf(cmd, sizeof cmd, "sqlite3 -readonly '%s/cohort.db' \"%s\"", dir, sql);
    FILE *p = popen(cmd, "r");
    if (p && !fgets(out, sizeof out, p))
        out[0] = '\0';
    if (p)
        pclose(p);
    return atoll(out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_soak BUILD_DIR [MINUTES] [JOBS] [TENANTS]\n");
        return 2;
    }
    snprintf(build, sizeof build, "%s", argv[1]);
    double minutes = argc > 2 ? atof(argv[2]) : 10;
    njobs = argc > 3 ? atoi(argv[3]) : 10000;
    int ntenants = argc > 4 ? atoi(argv[4]) : 50;
    if (minutes <= 0 || minutes > 600 || njobs < 10 || njobs > 1000000 || ntenants < 1 ||
        ntenants > MAX_TENANTS) {
        fprintf(stderr, "bench/soak: MINUTES 0..600, JOBS 10..1000000, TENANTS 1..%d\n",
                MAX_TENANTS);
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "bench/soak: needs root (containers, network namespaces)\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("COHORT_ADMIN_TOKEN", ADMIN, 1); /* for cohortd; set before any thread starts */
    if (getenv("SOAK_AGENT_CPUS"))
        snprintf(agent_cpus, sizeof agent_cpus, "%d", atoi(getenv("SOAK_AGENT_CPUS")));
    snprintf(dir, sizeof dir, "/tmp/cohort-soak-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    chmod(dir, 0711);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (net_up() != 0 || start_registry() != 0) {
        fprintf(stderr, "bench/soak: the network or the registry failed (see %s)\n", dir);
        net_down();
        return 1;
    }
    char listen[64];
    snprintf(listen, sizeof listen, "%s:%d", bridge_ip, 16000 + getpid() % 1000);
    snprintf(base, sizeof base, "http://%s", listen);
    start_cohortd(listen);
    CURL *admin = curl_easy_init();
    bench_sink out = {0};
    for (int i = 0; i < NAGENTS; i++) {
        call(admin, ADMIN, "POST", "/v1/nodes/join-tokens", NULL, NULL, 0, NULL, &out);
        json_str(out.buf, "token", join[i], sizeof join[i]);
        start_agent(i);
    }
    /* Priced so that every second of a rank shows in the ledger (3,600 an
     * hour: one a second) and rounding is exercised (1,000 an hour). */
    static const char *const specs[] = {
        "{\"name\":\"soak\",\"cpus\":1,\"memory_mb\":256,\"price_per_hour\":3600,"
        "\"currency\":\"USD\"}",
        "{\"name\":\"soak-odd\",\"cpus\":1,\"memory_mb\":256,\"price_per_hour\":1000,"
        "\"currency\":\"USD\"}"};
    for (int k = 0; k < 2; k++)
        if (call(admin, ADMIN, "POST", "/v1/worker-specs", "application/json", specs[k],
                 strlen(specs[k]), NULL, &out) != 201) {
            fprintf(stderr, "bench/soak: worker spec: %s\n", out.buf ? out.buf : "no answer");
            return 1;
        }
    for (int t = 0; t < ntenants; t++)
        if (setup_tenant(admin, t) != 0)
            return 1;
    for (int i = 0; i < 300; i++) {
        call(admin, ADMIN, "GET", "/v1/nodes?limit=10", NULL, NULL, 0, NULL, &out);
        int up = 0;
        for (const char *p = out.buf; p && (p = strstr(p, "\"state\":\"up\"")); p++)
            up++;
        if (up == NAGENTS)
            break;
        usleep(100000);
    }
    printf("RESULT op=setup tenants=%d agents=%d dir=%s\n", ntenants, NAGENTS, dir);

    jobs = calloc((size_t)njobs, sizeof *jobs);
    srand(12345);
    for (int i = 0; i < njobs; i++) {
        int r = rand() % 100;
        jobs[i].tenant = rand() % ntenants;
        jobs[i].kind = r < 80 ? 0 : r < 90 ? 1 : 2;
        jobs[i].cancel_after_s = 2 + rand() % 5;
    }
    CURL *admin_cancel = curl_easy_init(); /* the main thread's, for the cancels */
    pthread_t samp;
    pthread_create(&samp, NULL, sampler, NULL);
    t0 = now_s();
    span = minutes * 60;
    int agent_killed = 0, cohortd_killed = 0, cancels = 0;
    pthread_t sub[SUBMITTERS];
    for (int k = 0; k < SUBMITTERS; k++)
        pthread_create(&sub[k], NULL, submitter, (void *)(intptr_t)k);
    /* Meanwhile: the kills at 40% and 50% of the time, and the cancels when due. */
    for (;;) {
        double t = now_s() - t0;
        if (!agent_killed && t >= span * 0.4) {
            printf("EVENT t=%.0f kill -9 agent n2\n", t);
            kill(agent_pid[1], SIGKILL);
            waitpid(agent_pid[1], NULL, 0);
            sleep(3);
            start_agent(1);
            agent_killed = 1;
        }
        if (!cohortd_killed && t >= span * 0.5) {
            printf("EVENT t=%.0f kill -9 cohortd\n", t);
            kill(cohortd_pid, SIGKILL);
            waitpid(cohortd_pid, NULL, 0);
            sleep(1);
            start_cohortd(listen);
            cohortd_killed = 1;
        }
        int64_t now = mono_ms();
        for (int k = 0; k < njobs; k++) {
            int64_t at = __atomic_load_n(&jobs[k].cancel_at_ms, __ATOMIC_ACQUIRE);
            if (at > 0 && now >= at) {
                cancel(admin_cancel, k);
                __atomic_store_n(&jobs[k].cancel_at_ms, -1, __ATOMIC_RELEASE);
                cancels++;
            }
        }
        if (t > span && __atomic_load_n(&acked, __ATOMIC_RELAXED) +
                                __atomic_load_n(&lost, __ATOMIC_RELAXED) == njobs)
            break;
        usleep(100000);
    }
    for (int k = 0; k < SUBMITTERS; k++)
        pthread_join(sub[k], NULL);
    for (int k = 0; k < njobs; k++)
        if (jobs[k].cancel_at_ms > 0) {
            cancel(admin_cancel, k);
            cancels++;
        }
    printf("RESULT op=submitted jobs=%d acked=%d unacked=%d cancels=%d seconds=%.0f\n", njobs,
           acked, lost, cancels, now_s() - t0);

    /* Until nothing is left queued or running (at most 10 minutes). */
    long open_jobs = -1;
    for (int w = 0; w < 3000; w++) {
        call(admin, ADMIN, "GET", "/metrics", NULL, NULL, 0, NULL, &out);
        open_jobs = 0;
        static const char *const open_states[] = {"PENDING", "STARTING", "RUNNING", NULL};
        for (int s = 0; open_states[s]; s++) {
            char key[64];
            snprintf(key, sizeof key, "cohort_jobs{state=\"%s\"} ", open_states[s]);
            const char *p = out.buf ? strstr(out.buf, key) : NULL;
            open_jobs += p ? atol(p + strlen(key)) : 0;
        }
        if (open_jobs == 0)
            break;
        usleep(200000);
    }
    double drained = now_s() - t0;
    sampling = 0;
    pthread_join(samp, NULL);

    /* Checks. */
    int failures = 0, missing = 0;
    for (int i = 0; i < njobs; i++) {
        char path[64], state[24] = "";
        if (!jobs[i].id)
            continue;
        snprintf(path, sizeof path, "/v1/jobs/%ld", jobs[i].id);
        long st = call(ten[jobs[i].tenant].c, ten[jobs[i].tenant].token, "GET", path, NULL, NULL,
                       0, NULL, &out);
        json_str(out.buf, "state", state, sizeof state);
        if (st != 200 || (strcmp(state, "SUCCEEDED") && strcmp(state, "FAILED") &&
                          strcmp(state, "CANCELLED"))) {
            if (missing++ < 10)
                fprintf(stderr, "bench/soak: job %ld: %ld %s\n", jobs[i].id, st, state);
        }
    }
    long long twice = db_ll("SELECT count(*) FROM (SELECT tenant_id, name FROM jobs GROUP BY 1, 2"
                            " HAVING count(*) > 1);");
    long long stored = db_ll("SELECT count(*) FROM jobs;");
    printf("RESULT op=jobs acked=%d stored=%lld not_final_or_missing=%d twice=%lld "
           "drained_after_s=%.0f jobs_per_s=%.1f\n",
           acked, stored, missing, twice, drained, drained > 0 ? acked / drained : 0);
    failures += missing > 0 || twice > 0 || open_jobs != 0;

    /* No container or worker mount left on any node. */
    int containers = 0, mounts = 0;
    for (int i = 0; i < NAGENTS; i++) {
        char cmd[600], line[256];
        snprintf(cmd, sizeof cmd, "crun --root '%s/agent-%d/crun' list -q 2>/dev/null | wc -l",
                 dir, i + 1);
        FILE *p = popen(cmd, "r");
        if (p && fgets(line, sizeof line, p))
            containers += atoi(line);
        if (p)
            pclose(p);
    }
    {
        char line[1024];
        FILE *m = fopen("/proc/self/mountinfo", "r");
        while (m && fgets(line, sizeof line, m))
            mounts += strstr(line, dir) != NULL && strstr(line, "/workers/") != NULL;
        if (m)
            fclose(m);
    }
    printf("RESULT op=leftovers containers=%d worker_mounts=%d\n", containers, mounts);
    failures += containers > 0 || mounts > 0;

    /* The ledger against the workers' own records (cohortd stopped first). */
    kill(cohortd_pid, SIGTERM);
    waitpid(cohortd_pid, NULL, 0);
    long long ledger = db_ll("SELECT coalesce(sum(amount), 0) FROM ledger WHERE kind = 'charge';");
    long long want = db_ll(
        "SELECT coalesce(sum((s * price + 1800) / 3600), 0) FROM (SELECT j.price_per_hour AS price,"
        " CASE WHEN j.max_runtime_seconds > 0 AND x.raw > j.max_runtime_seconds"
        " THEN j.max_runtime_seconds ELSE x.raw END AS s FROM (SELECT job_id,"
        " CASE WHEN finished_at > started_at THEN (finished_at - started_at + 999) / 1000"
        " ELSE 0 END AS raw FROM workers WHERE started_at IS NOT NULL) x"
        " JOIN jobs j ON j.id = x.job_id);");
    long long ranks = db_ll("SELECT count(*) FROM ledger WHERE kind = 'charge' AND seconds > 0;");
    long long dup = db_ll("SELECT count(*) FROM (SELECT job_id, attempt, rank FROM ledger"
                          " WHERE kind = 'charge' GROUP BY 1, 2, 3 HAVING count(*) > 1);");
    printf("RESULT op=ledger charged=%lld workers_say=%lld ranks_charged=%lld twice=%lld\n", ledger,
           want, ranks, dup);
    failures += ledger != want || dup != 0;

    for (int i = 0; i < NAGENTS; i++) {
        kill(agent_pid[i], SIGTERM);
        waitpid(agent_pid[i], NULL, 0);
    }
    kill(reg_pid, SIGTERM);
    waitpid(reg_pid, NULL, 0);
    net_down();

    /* On a sanitizer build: every report any of its programs wrote (cohortd
     * and the agents to their logs, shims to their workers' files). */
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "grep -rIhcE 'ERROR: (Address|Leak)Sanitizer|runtime error: |WARNING: "
             "ThreadSanitizer' '%s' --exclude-dir=images --exclude-dir=rootfs 2>/dev/null"
             " | awk '{n += $1} END {print n + 0}'",
             dir);
    long long reports = -1;
    FILE *g = popen(cmd, "r");
    char line[64];
    if (g && fgets(line, sizeof line, g))
        reports = atoll(line);
    if (g)
        pclose(g);
    printf("RESULT op=sanitizers reports=%lld\n", reports);
    failures += reports != 0;
    printf("RESULT op=soak %s\n", failures ? "FAILED" : "passed");
    if (!failures)
        util_system("rm -rf '%s'", dir);
    bench_sink_free(&out);
    return failures ? 1 : 0;
}
