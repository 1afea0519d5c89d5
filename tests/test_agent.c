/*
 * Real cohortd, real agents, real processes: the worker contract on one
 * node and across two, gang failure and retry, cancel leaving nothing
 * behind, placement that waits instead of splitting a gang, quotas, and a
 * cohortd restart under a running job.  Needs root (namespaces).
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <signal.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/util.h"
#include "tests/harness.h"
#include "worker/comm_store.h"

static th_daemon d;
static th_agent ag[3];
static int nagents;
static char tok[80];

/* Network namespaces and the bridge a test made, removed in teardown. */
static char net_tag[16];

static void net_cleanup(void)
{
    if (!net_tag[0])
        return;
    util_system("ip netns del %s-1 2>/dev/null; ip netns del %s-2 2>/dev/null; "
                "ip link del %s-br 2>/dev/null",
                net_tag, net_tag, net_tag);
    net_tag[0] = '\0';
}

static void teardown(void)
{
    for (int i = 0; i < nagents; i++)
        th_agent_cleanup(&ag[i]);
    th_stop(&d);
    th_cleanup(&d);
    net_cleanup();
}

TestSuite(agent, .fini = teardown, .timeout = 120);

/* cohortd, a member token, workspace "ws", dataset "ds" holding sub/a.txt. */
static void platform(const char *const *cohortd_args)
{
    if (!th_can_sandbox())
        cr_skip_test("needs root to create mount and PID namespaces");
    th_start(&d, cohortd_args);
    th_user(&d, "acme", "alice", "member", tok);
    th_must(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"ws\"}"), 201);
    th_must(th_post(&d, "/v1/datasets", tok, "{\"name\":\"ds\"}"), 201);
    th_must(th_put_file(&d, "/v1/datasets/ds/files/sub/a.txt", tok, "hello", 5), 201);
}

static void agents(int n, const char *cpus)
{
    static const char *const names[] = {"n1", "n2", "n3"};
    static const char *const ports[] = {"31000-31099", "31100-31199", "31200-31299"};
    for (int i = 0; i < n; i++) {
        const char *extra[] = {"--cpus", cpus, "--memory-mb", "65536", "--port-range", ports[i], NULL};
        th_agent_start(&ag[i], &d, names[i], extra);
    }
    nagents = n;
}

static long submit(const char *body)
{
    return th_submit(&d, tok, body);
}

/* Submits job name running code (a program in the workspace "ws", uploaded
 * first from script unless that is NULL) as workers ranks of cpu-small on the
 * native image; more: further JSON fields, or NULL. */
static long submit_sh(const char *name, const char *code, const char *script, int workers,
                      const char *more)
{
    char body[1024];
    if (script)
        th_put_text(&d, tok, "ws", code, script, "755");
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"%s\","
             "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\","
             "\"worker_count\":%d%s%s}",
             name, code, workers, more ? "," : "", more ? more : "");
    return submit(body);
}

/* Rank's log of job id (the caller th_frees it). */
static th_resp rank_log(long id, int rank)
{
    char p[96];
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=%d", id, rank);
    return th_get(&d, p, tok);
}

/* Waits up to ms for job id to succeed; returns rank 0's log (the caller
 * th_frees it), and fails the test with that log when the job did not. */
static th_resp succeeded_log(long id, int ms)
{
    char seen[16];
    int ok = th_wait_state(&d, tok, id, "SUCCEEDED", ms, seen);
    th_resp r = rank_log(id, 0);
    cr_assert(ok, "job ended %s; rank 0 printed:\n%s", seen, r.body);
    return r;
}

/* The image "trainer" (cohort-worker and its libraries, from the tests'
 * registry) and ws/train.sh, which runs the C trainer as a job. */
static void trainer_image(void)
{
    th_must(th_post(&d, "/v1/images", TH_ADMIN,
                    "{\"name\":\"trainer\",\"reference\":\"cohort/worker:test\","
                    "\"framework\":\"native\"}"), 201);
    th_put_text(&d, tok, "ws", "train.sh",
                "#!/bin/sh\nexec cohort-worker train --log-every 10 \"$@\"\n", "755");
}

/* The value of KEY in a KEY=VALUE file fetched from the workspace ("" if absent). */
static void value_of(const char *text, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    out[0] = '\0';
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncmp(p, key, kl) && p[kl] == '=') {
            size_t len = strcspn(p + kl + 1, "\n");
            snprintf(out, n, "%.*s", (int)len, p + kl + 1);
            return;
        }
    }
}

static char *fetch(const char *path)
{
    char p[256];
    snprintf(p, sizeof p, "/v1/workspaces/ws/files/%s", path);
    return th_get_body(&d, p, tok);
}

/* Dataset "synth" from the MNIST-format files cohort-worker mkdata wrote in dir. */
/* Makes a synthetic MNIST-layout set of train and test images with
 * cohort-worker and uploads it as the dataset "synth". */
static void synth_dataset(int train, int test)
{
    static const char *const files[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    static unsigned char buf[2000 * 784 + 64];
    char dir[] = "/tmp/cohort-agent-worker-XXXXXX", cmd[600], path[700], p[160];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "%s mkdata %s --train %d --test %d >/dev/null", COHORT_WORKER_BIN,
             dir, train, test);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    th_must(th_post(&d, "/v1/datasets", tok, "{\"name\":\"synth\"}"), 201);
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        FILE *f = fopen(path, "rb");
        cr_assert_not_null(f, "%s", path);
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        snprintf(p, sizeof p, "/v1/datasets/synth/files/%s", files[i]);
        th_must(th_put_file(&d, p, tok, buf, n), 201);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0, "%s", cmd);
}

/* Polls until no worker of the job reads running or assigned (at most 10 s). */
static void wait_workers_ended(long id)
{
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    for (int i = 0; i < 100; i++) {
        th_resp r = th_get(&d, p, tok);
        int live = strstr(r.body, "\"running\"") != NULL || strstr(r.body, "\"assigned\"") != NULL;
        th_free(&r);
        if (!live)
            return;
        usleep(100000);
    }
}

#define ENV_PROG                                                                               \
    "#!/bin/sh\n"                                                                              \
    "out=\"$WORKSPACE/out/env-$RANK.txt\"\n"                                                   \
    "mkdir -p \"$WORKSPACE/out\"\n"                                                            \
    "env | sort > \"$out.tmp\"\n"                                                              \
    "echo \"ARGS=$*\" >> \"$out.tmp\"\n"                                                       \
    "echo \"CWD=$(pwd)\" >> \"$out.tmp\"\n"                                                    \
    "echo \"DATA=$(cat \"$DATASETS_PATH/ds/sub/a.txt\")\" >> \"$out.tmp\"\n"                   \
    "echo \"ROWRITE=$(touch \"$DATASETS_PATH/ds/sub/new\" 2>&1)\" >> \"$out.tmp\"\n"           \
    "echo \"HIDDEN=$(ls -A \"$PROBE_HIDDEN\" 2>/dev/null | wc -l)\" >> \"$out.tmp\"\n"                \
    "echo \"PIDS=$(ls /proc | grep -c '^[0-9]')\" >> \"$out.tmp\"\n"                           \
    "echo \"NNP=$(grep NoNewPrivs /proc/self/status | tr -dc 0-9)\" >> \"$out.tmp\"\n"          \
    "echo \"FDS=$(ls /proc/self/fd | tr '\\n' ' ')\" >> \"$out.tmp\"\n"                       \
    "mv \"$out.tmp\" \"$out\"\n"

static void check_rank(int rank, int world, int per_node, const char *port)
{
    char path[64], v[512], want[128];
    snprintf(path, sizeof path, "out/env-%d.txt", rank);
    char *t = fetch(path);
    struct {
        const char *key;
        long val;
    } nums[] = {{"RANK", rank},
                {"LOCAL_RANK", rank % per_node},
                {"NODE_RANK", rank / per_node},
                {"WORLD_SIZE", world},
                {"WORKER_PER_NODE", per_node},
                {"EPOCHS", 3},
                {"BATCH_SIZE", 16}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        value_of(t, nums[i].key, v, sizeof v);
        snprintf(want, sizeof want, "%ld", nums[i].val);
        cr_expect_str_eq(v, want, "rank %d: %s", rank, nums[i].key);
    }
    /* one node: its loopback; several: rank 0's node on the job's overlay */
    const char *master = world > per_node ? "10.77.0.1" : "127.0.0.1";
    const char *strs[][2] = {{"MASTER_ADDR", master},      {"MASTER_PORT", port},
                             {"BACKEND", "gloo"},          {"DATASETS", "ds"},
                             {"DATASETS_PATH", "/cohort/datasets"},
                             {"WORKSPACE", "/cohort/workspace"},
                             {"LR", "0.05"},               {"MY_VAR", "from the job"},
                             {"CWD", "/cohort/workspace"}, {"DATA", "hello"},
                             {"HIDDEN", "0"}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        value_of(t, strs[i][0], v, sizeof v);
        cr_expect_str_eq(v, strs[i][1], "rank %d: %s", rank, strs[i][0]);
    }
    value_of(t, "ARGS", v, sizeof v);
    snprintf(want, sizeof want, "--local_rank=%d --foo bar baz", rank % per_node);
    cr_expect_str_eq(v, want, "rank %d: the command line", rank);
    value_of(t, "ROWRITE", v, sizeof v);
    cr_expect(strstr(v, "Read-only file system") != NULL, "rank %d: a dataset write gave '%s'",
              rank, v);
    value_of(t, "PIDS", v, sizeof v);
    cr_expect_lt(atoi(v), 10, "rank %d sees %s processes: not its own PID namespace", rank, v);
    value_of(t, "NNP", v, sizeof v);
    cr_expect_str_eq(v, "1", "rank %d may gain privileges (NoNewPrivs %s)", rank, v);
    /* ls sees stdin, stdout, stderr and its own listing of the directory: nothing else. */
    value_of(t, "FDS", v, sizeof v);
    cr_expect_str_eq(v, "0 1 2 3 ", "rank %d inherited descriptors: %s", rank, v);
    free(t);
}

static void master_port(long job, char *out, size_t n)
{
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", job);
    th_must(th_get(&d, p, tok), 200);
    char *t = fetch("out/env-0.txt");
    value_of(t, "MASTER_PORT", out, n);
    free(t);
}

/* Runs ENV_PROG (uploaded as prog.sh) as job name of workers ranks, with
 * dataset ds, arguments and an environment check_rank looks for; more:
 * further JSON fields, or NULL.  Waits for it to succeed: its id, and its
 * MASTER_PORT in port[16]. */
static long run_env_job(const char *name, int workers, const char *more, char *port)
{
    char body[1024], seen[16];
    th_put_text(&d, tok, "ws", "prog.sh", ENV_PROG, "755");
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"image\":\"native\",\"datasets\":[\"ds\"],\"workspace\":\"ws\","
             "\"code_path\":\"prog.sh\",\"args\":[\"--foo\",\"bar baz\"],\"epochs\":3,\"lr\":0.05,"
             "\"batch_size\":16,\"worker_spec\":\"cpu-small\",\"worker_count\":%d,%s%s"
             "\"env\":{\"MY_VAR\":\"from the job\",\"PROBE_HIDDEN\":\"%s/volumes\"}}",
             name, workers, more ? more : "", more ? "," : "", d.dir);
    long id = submit(body);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "job ended %s", seen);
    master_port(id, port, 16);
    return id;
}

/* The old path for a trusted single-tenant node: --runtime host runs the
 * workers as host processes (private mount and PID namespaces, datasets
 * read-only, cohortd's volumes hidden), and the agent warns at start. */
Test(agent, the_host_runtime_keeps_the_worker_contract_and_warns)
{
    platform(NULL);
    const char *extra[] = {"--cpus", "8", "--port-range", "31000-31099", "--runtime", "host",
                           NULL};
    th_agent_start(&ag[0], &d, "n1", extra);
    nagents = 1;
    char port[16], logp[600], line[512];
    run_env_job("env", 2, NULL, port);
    for (int rank = 0; rank < 2; rank++)
        check_rank(rank, 2, 2, port);
    snprintf(logp, sizeof logp, "%s.log", ag[0].dir);
    FILE *f = fopen(logp, "r");
    int warned = 0;
    while (f && fgets(line, sizeof line, f))
        warned |= strstr(line, "WARNING: --runtime host") != NULL;
    if (f)
        fclose(f);
    cr_expect(warned, "the agent did not warn about --runtime host");
}

Test(agent, worker_contract_on_one_node)
{
    platform(NULL);
    agents(1, "8");
    char port[16];
    long id = run_env_job("env", 4, NULL, port);
    cr_expect(atoi(port) >= 31000 && atoi(port) <= 31099, "MASTER_PORT %s outside the range", port);
    for (int rank = 0; rank < 4; rank++)
        check_rank(rank, 4, 4, port);

    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/events", id);
    th_resp r = th_get(&d, p, tok);
    const char *order[] = {"PENDING", "STARTING", "RUNNING", "SUCCEEDED"};
    const cJSON *items = cJSON_GetObjectItem(r.json, "items");
    cr_assert_eq(cJSON_GetArraySize(items), 4, "%s", r.body);
    for (int i = 0; i < 4; i++)
        cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(items, i), "to")->valuestring,
                         order[i]);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    r = th_get(&d, p, tok);
    const cJSON *w;
    int n = 0;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(r.json, "items"))
    {
        cr_expect_str_eq(cJSON_GetObjectItem(w, "state")->valuestring, "exited");
        cr_expect_eq(cJSON_GetObjectItem(w, "exit_code")->valuedouble, 0);
        n++;
    }
    cr_expect_eq(n, 4);
    th_free(&r);
}

Test(agent, two_per_node_on_two_agents)
{
    platform(NULL);
    agents(2, "2");
    char port[16];
    long id = run_env_job("env2", 4, "\"workers_per_node\":2", port);
    for (int rank = 0; rank < 4; rank++)
        check_rank(rank, 4, 2, port);
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    th_resp r = th_get(&d, p, tok);
    double node[4];
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(r.json, "items"))
    {
        int rank = (int)cJSON_GetObjectItem(w, "rank")->valuedouble;
        node[rank] = cJSON_GetObjectItem(w, "node_id")->valuedouble;
    }
    th_free(&r);
    cr_expect_eq(node[0], node[1], "ranks 0 and 1 share a node");
    cr_expect_eq(node[2], node[3], "ranks 2 and 3 share a node");
    cr_expect_neq(node[0], node[2], "the gang spans both nodes");
}

Test(agent, a_failed_rank_stops_the_gang_retries_then_fails)
{
    platform(NULL);
    agents(1, "8");
    th_put_text(&d, tok, "ws", "fail.sh",
                "#!/bin/sh\n"
                "if [ \"$RANK\" = 1 ]; then sleep 0.5; exit 3; fi\n"
                "exec sleep 60\n",
                "755");
    long id = submit_sh("fails", "fail.sh", NULL, 2, "\"max_retries\":1");
    char seen[16];
    cr_assert(th_wait_state(&d, tok, id, "FAILED", 40000, seen), "job ended %s", seen);
    char p[128];
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect(strstr(th_str(&r, "reason"), "rank 1 on node n1 exited with status 3") != NULL,
              "reason: %s", th_str(&r, "reason"));
    cr_expect_eq(th_num(&r, "attempt"), 2, "there was no retry");
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/events", id);
    r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "attempt 1 failed: rank 1 on node n1 exited with status 3; retrying") != NULL,
              "%s", r.body);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    wait_workers_ended(id);
    r = th_get(&d, p, tok);
    const cJSON *w;
    int stopped = 0;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(r.json, "items"))
    {
        if (cJSON_GetObjectItem(w, "rank")->valuedouble == 0) {
            cr_expect_str_eq(cJSON_GetObjectItem(w, "state")->valuestring, "exited");
            cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(w, "signal")), "rank 0 was not stopped: %s",
                      r.body);
            stopped++;
        }
    }
    cr_expect_eq(stopped, 2, "rank 0 of both attempts: %s", r.body);
    /* Attempts never overlap: attempt 2 was placed after attempt 1 ended. */
    char last_end[40] = "", first_start[40] = "~";
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(r.json, "items"))
    {
        int attempt = (int)cJSON_GetObjectItem(w, "attempt")->valuedouble;
        const char *fin = cJSON_GetObjectItem(w, "finished_at")->valuestring;
        const char *made = cJSON_GetObjectItem(w, "created_at")->valuestring;
        if (attempt == 1 && fin && strcmp(fin, last_end) > 0)
            snprintf(last_end, sizeof last_end, "%s", fin);
        if (attempt == 2 && strcmp(made, first_start) < 0)
            snprintf(first_start, sizeof first_start, "%s", made);
    }
    cr_expect(strcmp(first_start, last_end) >= 0, "attempt 2 placed at %s, attempt 1 ended %s",
              first_start, last_end);
    th_free(&r);

    /* The same four workers a page at a time, in attempt and rank order,
     * and one attempt's alone. */
    char cursor[32] = "";
    int seen_n = 0;
    for (int page = 0; page < 2; page++) {
        snprintf(p, sizeof p, "/v1/jobs/%ld/workers?limit=3%s%s", id, cursor[0] ? "&cursor=" : "",
                 cursor);
        r = th_get(&d, p, tok);
        cr_assert_eq(r.status, 200, "%s", r.body);
        cJSON_ArrayForEach(w, cJSON_GetObjectItem(r.json, "items"))
        {
            cr_expect_eq(cJSON_GetObjectItem(w, "attempt")->valuedouble, 1 + seen_n / 2);
            cr_expect_eq(cJSON_GetObjectItem(w, "rank")->valuedouble, seen_n % 2);
            seen_n++;
        }
        const cJSON *next = cJSON_GetObjectItem(r.json, "next_cursor");
        cr_expect_eq(th_items(&r), page ? 1 : 3, "%s", r.body);
        cr_expect(page ? cJSON_IsNull(next) : cJSON_IsString(next), "%s", r.body);
        if (cJSON_IsString(next))
            snprintf(cursor, sizeof cursor, "%s", next->valuestring);
        th_free(&r);
    }
    cr_expect_eq(seen_n, 4);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers?attempt=2", id);
    r = th_get(&d, p, tok);
    cr_expect_eq(th_items(&r), 2, "%s", r.body);
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(r.json, "items"))
        cr_expect_eq(cJSON_GetObjectItem(w, "attempt")->valuedouble, 2);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers?attempt=0", id);
    r = th_get(&d, p, tok);
    cr_expect_eq(r.status, 400, "%s", r.body);
    cr_expect_not_null(strstr(r.body, "\"field\":\"attempt\""), "%s", r.body);
    th_free(&r);
}

/* Waits up to 5 s for exactly n processes carrying the marker and returns the
 * last count: a shell's fork is briefly counted twice (child and parent share
 * the command line until the child execs), so one look can see one too many. */
static int wait_marked(const char *marker, int n)
{
    int got = th_count_marked(marker);
    for (int i = 0; i < 100 && got != n; i++) {
        usleep(50000);
        got = th_count_marked(marker);
    }
    return got;
}

Test(agent, cancel_leaves_no_process_behind)
{
    platform(NULL);
    agents(1, "8");
    char marker[64], prog[512];
    snprintf(marker, sizeof marker, "cohort-marker-%d", (int)getpid());
    snprintf(prog, sizeof prog,
             "#!/bin/sh\n"
             "trap '' TERM\n"
             "setsid sh -c 'trap \"\" TERM; while :; do sleep 1; done' %s &\n"
             "while :; do sleep 1; done\n",
             marker);
    long id = submit_sh("stubborn", "stubborn.sh", prog, 2, NULL);
    char seen[16];
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 20000, seen), "job is %s", seen);
    cr_assert_eq(wait_marked(marker, 2), 2, "the grandchildren never started");
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/cancel", id);
    th_resp r = th_post(&d, p, tok, NULL);
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(th_str(&r, "state"), "CANCELLED");
    th_free(&r);
    int left = -1;
    for (int i = 0; i < 200 && (left = th_count_marked(marker)) > 0; i++)
        usleep(50000); /* the agent's grace period is 2 s here */
    cr_expect_eq(left, 0, "%d processes of the job outlived its cancel", left);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    wait_workers_ended(id);
    r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "\"running\"") == NULL, "a worker still reads running: %s", r.body);
    th_free(&r);
}

/* The first cgroup v2 mount point, into out: 0, or -1 when there is none. */
static int cgroup2_mount(char *out, size_t n)
{
    FILE *f = fopen("/proc/self/mounts", "r");
    char line[4096], dev[256], dir[2048], type[64];
    int rc = -1;
    while (f && rc && fgets(line, sizeof line, f))
        if (sscanf(line, "%255s %2047s %63s", dev, dir, type) == 3 && !strcmp(type, "cgroup2")) {
            snprintf(out, n, "%s", dir);
            rc = 0;
        }
    if (f)
        fclose(f);
    return rc;
}

/* Why a limit of the controller ctl cannot be tested here, or NULL when the
 * cgroup v2 hierarchy (its mount point into mnt) has that controller. */
static const char *controller_missing(const char *ctl, char *mnt, size_t n)
{
    char path[2200], have[512];
    if (cgroup2_mount(mnt, n) != 0)
        return "no cgroup v2 hierarchy is mounted here";
    snprintf(path, sizeof path, "%s/cgroup.controllers", mnt);
    if (th_read_text(path, have, sizeof have) != 0)
        return "the cgroup v2 hierarchy lists no controllers";
    for (char *t = strtok(have, " \n"); t; t = strtok(NULL, " \n"))
        if (!strcmp(t, ctl))
            return NULL;
    return "the controller is not in the cgroup v2 hierarchy here (a hybrid host keeps it in "
           "cgroup v1)";
}

/* Each worker's processes, a background grandchild among them, are in a
 * cgroup v2 of the worker's own, under the agent's subtree, limited to the
 * worker spec where the cpu and memory controllers are on; the cgroup is
 * gone when the worker is. */
Test(agent, each_worker_runs_in_a_cgroup_of_its_own)
{
    char mnt[2048], path[4200], buf[4096], p[128], seen[16];
    if (cgroup2_mount(mnt, sizeof mnt) != 0)
        cr_skip_test("no cgroup v2 hierarchy is mounted here");
    platform(NULL);
    agents(1, "8");
    long id = submit_sh("cg", "cg.sh",
                        "#!/bin/sh\n"
                        "mkdir -p out\n"
                        "sleep 60 &\n"
                        "grep '^0::' /proc/self/cgroup > out/cg-$RANK.txt\n"
                        "wait\n",
                        2, NULL);
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 20000, seen), "job is %s", seen);
    char rel[2][512];
    for (int r = 0; r < 2; r++) {
        char file[32];
        snprintf(file, sizeof file, "out/cg-%d.txt", r);
        char *t = NULL;
        for (int i = 0; i < 100; i++) {
            snprintf(path, sizeof path, "/v1/workspaces/ws/files/%s", file);
            th_resp fr = th_get(&d, path, tok);
            if (fr.status == 200 && fr.body && strchr(fr.body, '\n')) {
                t = fr.body;
                fr.body = NULL;
            }
            th_free(&fr);
            if (t)
                break;
            usleep(100000);
        }
        cr_assert_not_null(t, "rank %d wrote no %s", r, file);
        t[strcspn(t, "\n")] = '\0';
        /* Inside, a cgroup namespace of its own: its cgroup is its root. */
        cr_expect_str_eq(t, "0::/", "rank %d sees its cgroup as %s", r, t);
        free(t);
    }
    /* On the host: 0::/cohort/n1-<hash>/w<worker id>, from each worker's
     * container init (its pid file in the agent's state). */
    snprintf(path, sizeof path, "/v1/jobs/%ld/workers", id);
    th_resp wr = th_get(&d, path, tok);
    const cJSON *w;
    int nw = 0;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(wr.json, "items"))
    {
        char pidf[600];
        long wid = (long)cJSON_GetObjectItem(w, "id")->valuedouble;
        snprintf(pidf, sizeof pidf, "%s/workers/%ld/pid", ag[0].dir, wid);
        cr_assert_eq(th_read_text(pidf, buf, sizeof buf), 0, "%s is missing", pidf);
        snprintf(path, sizeof path, "/proc/%ld/cgroup", atol(buf));
        cr_assert_eq(th_read_text(path, buf, sizeof buf), 0, "%s", path);
        char *line = strstr(buf, "0::");
        cr_assert_not_null(line, "%s: %s", path, buf);
        line[strcspn(line, "\n")] = '\0';
        cr_expect(!strncmp(line, "0::/cohort/n1-", 14) && strstr(line, "/w") != NULL,
                  "worker %ld is in %s", wid, line);
        cr_assert_lt(nw, 2);
        snprintf(rel[nw++], sizeof rel[0], "%s", line + 3);
    }
    th_free(&wr);
    cr_assert_eq(nw, 2, "two workers");
    cr_expect_str_neq(rel[0], rel[1], "two ranks share a cgroup");
    for (int r = 0; r < 2; r++) {
        /* The shell, its background sleep and the namespace's init. */
        snprintf(path, sizeof path, "%s%s/cgroup.procs", mnt, rel[r]);
        cr_assert_eq(th_read_text(path, buf, sizeof buf), 0, "%s is missing", path);
        int procs = 0;
        for (char *q = buf; *q; q++)
            procs += *q == '\n';
        cr_expect_geq(procs, 3, "rank %d's cgroup holds %d processes", r, procs);
        /* The limits of cpu-small (1 CPU, 2048 MiB) where the controllers are on. */
        snprintf(path, sizeof path, "%s%s/cpu.max", mnt, rel[r]);
        if (th_read_text(path, buf, sizeof buf) == 0)
            cr_expect_str_eq(buf, "100000 100000\n");
        else
            cr_log_info("the cpu controller is not on here: no cpu.max to check");
        snprintf(path, sizeof path, "%s%s/memory.max", mnt, rel[r]);
        if (th_read_text(path, buf, sizeof buf) == 0)
            cr_expect_eq(strtoll(buf, NULL, 10), 2048LL << 20, "memory.max %s", buf);
        else
            cr_log_info("the memory controller is not on here: no memory.max to check");
    }
    snprintf(p, sizeof p, "/v1/jobs/%ld/cancel", id);
    th_resp r = th_post(&d, p, tok, NULL);
    cr_expect_eq(r.status, 200);
    th_free(&r);
    wait_workers_ended(id);
    for (int k = 0; k < 2; k++) {
        struct stat sb;
        snprintf(path, sizeof path, "%s%s", mnt, rel[k]);
        int gone = 0;
        for (int i = 0; i < 50 && !gone; i++, usleep(100000))
            gone = stat(path, &sb) != 0;
        cr_expect(gone, "%s outlived its worker", path);
    }
}

/* Workers in this agent's state directory (numbered directories). */
static int worker_dirs(const th_agent *a)
{
    char path[512];
    snprintf(path, sizeof path, "%s/workers", a->dir);
    DIR *dp = opendir(path);
    struct dirent *e;
    int n = 0;
    while (dp && (e = readdir(dp)) != NULL)
        n += e->d_name[0] >= '1' && e->d_name[0] <= '9';
    if (dp)
        closedir(dp);
    return n;
}

/* A finished worker's directory (its output.log above all) does not stay on
 * the node for ever: it goes --keep-finished seconds after cohortd has the
 * whole log, which cohortd still serves. */
Test(agent, finished_workers_leave_the_node_after_keep_finished)
{
    platform(NULL);
    const char *extra[] = {"--cpus", "8", "--keep-finished", "1", NULL};
    th_agent_start(&ag[0], &d, "n1", extra);
    nagents = 1;
    long id = submit_sh("hi", "hi.sh", "#!/bin/sh\necho \"hello from $RANK\"\n", 2, NULL);
    char seen[16], p[96];
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 20000, seen), "job ended %s", seen);
    int left = -1;
    for (int i = 0; i < 100 && (left = worker_dirs(&ag[0])) > 0; i++)
        usleep(100000);
    cr_expect_eq(left, 0, "%d worker directories stayed", left);
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=1", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect_str_eq(r.body, "hello from 1\n");
    th_free(&r);
}

/* What a worker's cgroup counted reaches /workers once it has ended: the
 * CPU time of all its processes (a busy child's too), and its peak memory
 * where the memory controller is on. */
Test(agent, workers_show_the_cpu_time_their_cgroup_counted)
{
    char mnt[2048], path[2200], ctl[512] = "", seen[16], p[96];
    if (cgroup2_mount(mnt, sizeof mnt) != 0)
        cr_skip_test("no cgroup v2 hierarchy is mounted here");
    snprintf(path, sizeof path, "%s/cgroup.controllers", mnt);
    th_read_text(path, ctl, sizeof ctl);
    platform(NULL);
    agents(1, "8");
    /* about half a second of CPU in a child, then the program's own */
    th_put_text(&d, tok, "ws", "busy.sh",
                "#!/bin/sh\n"
                "sh -c 'i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done' &\n"
                "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done\n"
                "wait\n",
                "755");
    long id = submit_sh("busy", "busy.sh", NULL, 2, NULL);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "job ended %s", seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    th_resp r = th_get(&d, p, tok);
    const cJSON *w;
    int n = 0;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(r.json, "items"))
    {
        const cJSON *cpu = cJSON_GetObjectItem(w, "cpu_seconds");
        const cJSON *mem = cJSON_GetObjectItem(w, "memory_peak_mb");
        cr_assert(cJSON_IsNumber(cpu), "no cpu_seconds: %s", r.body);
        cr_log_info("rank %d: %.3f CPU seconds", n, cpu->valuedouble);
        /* two shell loops of 150,000 steps: well over a tenth of a second */
        cr_expect_gt(cpu->valuedouble, 0.1, "%s", r.body);
        cr_expect_lt(cpu->valuedouble, 60.0, "%s", r.body);
        /* in the v2 hierarchy, or in a v1 one beside it (a hybrid host) */
        if (strstr(ctl, "memory") || system("grep -q ' cgroup [^ ]*memory' /proc/self/mounts") == 0)
            cr_expect(cJSON_IsNumber(mem) && mem->valuedouble > 0, "%s", r.body);
        else
            cr_expect(cJSON_IsNull(mem), "memory counted without a memory controller: %s", r.body);
        n++;
    }
    cr_expect_eq(n, 2);
    th_free(&r);
}

/* A one-CPU worker running two busy loops for 3 s gets about one CPU: the
 * CPU time its cgroup counted is about its wall time (measured inside, from
 * /proc/uptime: the image is busybox, whose date has no %N), not the twice
 * that two loops take on two free CPUs.  (each_worker_runs_in_a_cgroup_of_its_own
 * checks the cpu.max behind it from the host.)  Needs the cpu controller in
 * the cgroup v2 hierarchy (a hybrid host, like this project's CI, has it in
 * cgroup v1). */
Test(agent, a_worker_gets_no_more_cpu_than_its_spec, .timeout = 90)
{
    char mnt[2048], seen[16], p[96];
    const char *why = controller_missing("cpu", mnt, sizeof mnt);
    if (why)
        cr_skip_test("%s: CPU limits cannot be enforced", why);
    platform(NULL);
    agents(1, "8");
    /* centiseconds since boot */
    const char *prog = "#!/bin/sh\n"
                       "cs() { tr -d . < /proc/uptime | cut -d' ' -f1; }\n"
                       "t0=$(cs)\n"
                       "sh -c 'while :; do :; done' & a=$!\n"
                       "sh -c 'while :; do :; done' & b=$!\n"
                       "sleep 3\n"
                       "kill $a $b\n"
                       "wait\n"
                       "echo $(( ($(cs) - t0) * 10 ))\n";
    long id = submit_sh("spin", "spin.sh", prog, 1, NULL);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "job ended %s", seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=0", id);
    th_resp r = th_get(&d, p, tok);
    long wall_ms = 0;
    cr_assert(r.body && sscanf(r.body, "%ld", &wall_ms) == 1 && wall_ms >= 3000, "log: %s",
              r.body);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    r = th_get(&d, p, tok);
    const cJSON *w = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0);
    const cJSON *cpu = cJSON_GetObjectItem(w, "cpu_seconds");
    cr_assert(cJSON_IsNumber(cpu), "no cpu_seconds: %s", r.body);
    double share = cpu->valuedouble * 1000.0 / (double)wall_ms;
    cr_log_info("two busy loops in a one-CPU worker: %.2f CPU seconds in %ld ms, %.2f CPUs",
                cpu->valuedouble, wall_ms, share);
    /* about one CPU, not the two that two loops take on free CPUs */
    cr_expect_gt(share, 0.3, "%s", r.body);
    cr_expect_lt(share, 1.25, "%s", r.body);
    th_free(&r);
}

/* A worker's CUDA_VISIBLE_DEVICES, as its program wrote it: the list into
 * ids (returns how many), and the position of its own GPU (its LOCAL_RANK). */
static int visible_gpus(const char *file, int *ids, int max, int *local_rank)
{
    char *t = fetch(file), val[128];
    value_of(t, "LOCAL_RANK", val, sizeof val);
    *local_rank = atoi(val);
    value_of(t, "CUDA_VISIBLE_DEVICES", val, sizeof val);
    free(t);
    int n = 0;
    for (char *p = strtok(val, ","); p && n < max; p = strtok(NULL, ","))
        ids[n++] = atoi(p);
    return n;
}

static const char *const gpu_agent[] = {"--cpus", "8", "--memory-mb", "65536", "--gpus", "4",
                                        NULL};
/* A job of workers of worker spec, tagged tag (%s, %s, %d, %s). */
static const char *const job = "{\"name\":\"%s\",\"image\":\"native\",\"workspace\":\"ws\","
                               "\"code_path\":\"gpu.sh\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                               "\"worker_spec\":\"%s\",\"worker_count\":%d,\"env\":{\"TAG\":\"%s\"}}";

/* cohortd with worker spec gpu-test (1 GPU), an agent with 4 GPUs, and
 * gpu.sh: writes out/TAG-RANK.txt (LOCAL_RANK, BACKEND and what
 * CUDA_VISIBLE_DEVICES says), then waits for the file "release". */
static void gpu_node(void)
{
    platform(NULL);
    th_must(th_post(&d, "/v1/worker-specs", TH_ADMIN,
                    "{\"name\":\"gpu-test\",\"cpus\":1,\"memory_mb\":1024,\"gpus\":1,"
                    "\"gpu_type\":\"nvidia\",\"price_per_hour\":10,\"currency\":\"USD\"}"), 201);
    th_agent_start(&ag[0], &d, "n1", gpu_agent);
    nagents = 1;
    th_put_text(&d, tok, "ws", "gpu.sh",
                "#!/bin/sh\n"
                "mkdir -p out\n"
                "{ echo \"LOCAL_RANK=$LOCAL_RANK\"; echo \"BACKEND=$BACKEND\";\n"
                "  echo \"CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}\"; } > out/$TAG-$RANK.tmp\n"
                "mv out/$TAG-$RANK.tmp out/$TAG-$RANK.txt\n"
                "while [ ! -e release ]; do sleep 0.1; done\n",
                "755");
}

/* Waits for a worker's out/TAG-RANK.txt (at most 10 s). */
static void await_file(const char *file)
{
    char p[128];
    snprintf(p, sizeof p, "/v1/workspaces/ws/files/%s", file);
    for (int i = 0; i < 100; i++) {
        th_resp r = th_get(&d, p, tok);
        int there = r.status == 200;
        th_free(&r);
        if (there)
            return;
        usleep(100000);
    }
    cr_assert_fail("%s never appeared", file);
}

/* On a node with 4 GPUs, two 2-worker jobs of 1 GPU per worker run side by
 * side on GPUs of their own: each worker's CUDA_VISIBLE_DEVICES lists its
 * job's GPUs on the node with its own at position LOCAL_RANK (what a torch
 * script's set_device(LOCAL_RANK) picks); no GPU is in two jobs; a CPU job
 * sees none; a third GPU job waits, then gets the GPUs the first two held. */
Test(agent, gpu_workers_get_gpus_of_their_own, .timeout = 90)
{
    gpu_node();
    th_resp r;
    char body[512], seen[16], file[64];
    long ids[4];
    const char *tags[] = {"a", "b", "cpu", "c"};
    for (int j = 0; j < 4; j++) {
        snprintf(body, sizeof body, job, tags[j], j == 2 ? "cpu-small" : "gpu-test", j == 2 ? 1 : 2,
                 tags[j]);
        ids[j] = submit(body);
        if (j < 3)
            cr_assert(th_wait_state(&d, tok, ids[j], "RUNNING", 20000, seen), "%s is %s", tags[j],
                      seen);
    }
    /* a and b hold all 4 GPUs: c waits */
    usleep(1000000);
    snprintf(body, sizeof body, "/v1/jobs/%ld", ids[3]);
    r = th_get(&d, body, tok);
    cr_expect_str_eq(th_str(&r, "state"), "PENDING", "%s", r.body);
    th_free(&r);
    int used[4] = {0};
    for (int j = 0; j < 2; j++) {
        int lists[2][8], n[2];
        for (int rank = 0; rank < 2; rank++) {
            int lr;
            snprintf(file, sizeof file, "out/%s-%d.txt", tags[j], rank);
            await_file(file);
            n[rank] = visible_gpus(file, lists[rank], 8, &lr);
            cr_assert_eq(n[rank], 2, "job %s rank %d sees %d GPUs", tags[j], rank, n[rank]);
            cr_expect_eq(lr, rank);
        }
        cr_expect(lists[0][0] == lists[1][0] && lists[0][1] == lists[1][1],
                  "the ranks of %s see different lists", tags[j]);
        cr_expect_neq(lists[0][0], lists[0][1], "two ranks of %s share a GPU", tags[j]);
        for (int k = 0; k < 2; k++) {
            int g = lists[0][k];
            cr_assert(g >= 0 && g < 4, "GPU %d on a 4-GPU node", g);
            cr_expect_eq(used[g], 0, "GPU %d is in two jobs", g);
            used[g] = 1;
        }
    }
    char *t = fetch("out/cpu-0.txt");
    cr_expect_not_null(strstr(t, "CUDA_VISIBLE_DEVICES=\n"), "a CPU job sees GPUs: %s", t);
    cr_expect_not_null(strstr(t, "BACKEND=gloo"), "%s", t);
    free(t);
    th_put_text(&d, tok, "ws", "release", "", NULL);
    for (int j = 0; j < 3; j++)
        cr_expect(th_wait_state(&d, tok, ids[j], "SUCCEEDED", 20000, seen), "%s ended %s",
                  tags[j], seen);
    cr_expect(th_wait_state(&d, tok, ids[3], "SUCCEEDED", 20000, seen), "c ended %s", seen);
    int lists[8], lr;
    cr_expect_eq(visible_gpus("out/c-1.txt", lists, 8, &lr), 2);
    t = fetch("out/c-0.txt");
    cr_expect_not_null(strstr(t, "BACKEND=nccl"), "%s", t);
    free(t);
}

/* An agent killed and restarted keeps its running workers' GPUs: a job
 * placed after the restart gets the other GPUs of the node. */
Test(agent, a_restarted_agent_keeps_its_workers_gpus, .timeout = 90)
{
    gpu_node();
    char body[512], seen[16];
    snprintf(body, sizeof body, job, "a", "gpu-test", 2, "a");
    long a = submit(body);
    cr_assert(th_wait_state(&d, tok, a, "RUNNING", 20000, seen), "a is %s", seen);
    await_file("out/a-0.txt");
    await_file("out/a-1.txt");
    th_agent_kill9(&ag[0]);
    usleep(300000);
    th_agent_restart(&ag[0], &d, gpu_agent);
    snprintf(body, sizeof body, job, "b", "gpu-test", 2, "b");
    long b = submit(body);
    cr_assert(th_wait_state(&d, tok, b, "RUNNING", 20000, seen), "b is %s", seen);
    await_file("out/b-0.txt");
    int la[8], lb[8], lr;
    cr_assert_eq(visible_gpus("out/a-0.txt", la, 8, &lr), 2);
    cr_assert_eq(visible_gpus("out/b-0.txt", lb, 8, &lr), 2);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++)
            cr_expect_neq(la[i], lb[k], "GPU %d went to b while a held it", la[i]);
    th_put_text(&d, tok, "ws", "release", "", NULL);
    cr_expect(th_wait_state(&d, tok, a, "SUCCEEDED", 20000, seen), "a ended %s", seen);
    cr_expect(th_wait_state(&d, tok, b, "SUCCEEDED", 20000, seen), "b ended %s", seen);
    snprintf(body, sizeof body, "/v1/jobs/%ld", a);
    th_resp r = th_get(&d, body, tok);
    cr_expect_eq(th_num(&r, "attempt"), 1, "a's workers were started again instead of adopted");
    th_free(&r);
}

/* --cgroup names a directory that must be of cgroup v2; off runs without. */
Test(agent, cgroup_option_refuses_what_is_not_cgroup_v2)
{
    char dir[] = "/tmp/cohort-agent-cg-XXXXXX", cmd[1024], out[1024];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "timeout 10 %s --server http://127.0.0.1:1 --name n1 --data-dir %s/a --mount-root "
             "%s/m --cgroup %s 2>&1",
             COHORT_AGENT_BIN, dir, dir, dir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "exit status %d: %s", st, out);
    char want[200];
    snprintf(want, sizeof want, "--cgroup: %s is not a cgroup v2 directory", dir);
    cr_expect_not_null(strstr(out, want), "it said: %s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* GPUs as nvidia-smi -L lists them become the node's capacity and type.  No
 * GPU here: a stand-in nvidia-smi first on PATH prints what the real one
 * prints on a two-GPU H200 machine. */
Test(agent, gpus_are_detected_through_nvidia_smi)
{
    char dir[] = "/tmp/cohort-nvsmi-XXXXXX", path[128], env[4200], cmd[160];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/nvidia-smi", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\n[ \"$1\" = -L ] || exit 9\n"
               "echo 'GPU 0: NVIDIA H200 (UUID: GPU-5f1e4c3a-8d2b-4a61-9e0f-7c6b5a493821)'\n"
               "echo 'GPU 1: NVIDIA H200 (UUID: GPU-0b9c8d7e-6f5a-4b3c-2d1e-0f9a8b7c6d5e)'\n");
    fclose(f);
    chmod(path, 0755);
    platform(NULL);
    const char *old = getenv("PATH");
    char *saved = strdup(old ? old : "/usr/bin:/bin");
    snprintf(env, sizeof env, "%s:%s", dir, saved);
    setenv("PATH", env, 1);
    const char *extra[] = {"--cpus", "8", NULL};
    th_agent_start(&ag[0], &d, "g1", extra);
    nagents = 1;
    setenv("PATH", saved, 1);
    free(saved);
    th_resp r = th_get(&d, "/v1/nodes", TH_ADMIN);
    const cJSON *n = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0);
    const cJSON *cap = cJSON_GetObjectItem(n, "capacity");
    cr_assert_not_null(cap, "%s", r.body);
    cr_expect_eq(cJSON_GetObjectItem(cap, "gpus")->valuedouble, 2, "%s", r.body);
    cr_expect_not_null(strstr(r.body, "\"gpu_type\":\"nvidia-h200\""), "%s", r.body);
    th_free(&r);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Where the memory controller can be used: a worker that allocates past its
 * spec's memory is killed by the kernel, and the job says why. */
Test(agent, a_worker_over_its_memory_is_killed_and_the_reason_says_so, .timeout = 90)
{
    char mnt[2048], seen[16];
    const char *why = controller_missing("memory", mnt, sizeof mnt);
    if (why)
        cr_skip_test("%s: memory limits cannot be enforced", why);
    platform(NULL);
    agents(1, "8");
    /* 2.5 GiB, touched (dd reads into one buffer of its block size), in a
     * 2048 MiB worker; the busybox image, no interpreter needed */
    long id = submit_sh("hog", "hog.sh",
                        "#!/bin/sh\nexec dd if=/dev/zero of=/dev/null bs=2560M count=1\n", 1, NULL);
    cr_assert(th_wait_state(&d, tok, id, "FAILED", 60000, seen), "job ended %s", seen);
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect(strstr(th_str(&r, "reason"), "out of memory: over its limit of 2048 MiB") != NULL,
              "reason: %s", th_str(&r, "reason"));
    th_free(&r);
}

Test(agent, gangs_wait_whole_never_fit_refused_quota_holds)
{
    platform(NULL);
    agents(2, "4"); /* 8 one-CPU workers in all */
    th_put_text(&d, tok, "ws", "sleep.sh", "#!/bin/sh\nexec sleep 60\n", "755");
    const char *big = "{\"name\":\"%s\",\"image\":\"native\",\"workspace\":\"ws\","
                      "\"code_path\":\"sleep.sh\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                      "\"worker_spec\":\"cpu-small\",\"worker_count\":%d}";
    char body[512];
    snprintf(body, sizeof body, big, "a", 6);
    long a = submit(body);
    snprintf(body, sizeof body, big, "b", 6);
    long b = submit(body);
    char seen[16];
    cr_assert(th_wait_state(&d, tok, a, "RUNNING", 20000, seen), "a is %s", seen);
    usleep(1500000); /* a few scheduler passes */
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld", b);
    th_resp r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "state"), "PENDING");
    cr_expect(!strncmp(th_str(&r, "reason"), "resources", 9), "reason: %s", th_str(&r, "reason"));
    cr_expect_eq(th_num(&r, "position"), 1);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", b);
    r = th_get(&d, p, tok);
    cr_expect_eq(th_items(&r), 0, "part of the waiting gang was placed: %s", r.body);
    th_free(&r);

    snprintf(body, sizeof body, big, "huge", 9);
    th_expect_error(th_post(&d, "/v1/jobs", tok, body), 422, "never_fits", NULL);

    th_expect(th_req(&d, "PUT", "/v1/tenants/acme/quota", TH_ADMIN, NULL, "{\"max_workers\":6}", 17,
                     NULL),
              200);
    snprintf(body, sizeof body, big, "c", 1);
    long c = submit(body);
    usleep(1500000);
    snprintf(p, sizeof p, "/v1/jobs/%ld", c);
    r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "state"), "PENDING", "over quota and yet %s", th_str(&r, "state"));
    cr_expect(!strncmp(th_str(&r, "reason"), "quota", 5), "reason: %s", th_str(&r, "reason"));
    th_free(&r);

    /* When a ends, b gets the room. */
    r = th_req(&d, "PUT", "/v1/tenants/acme/quota", TH_ADMIN, NULL, "{}", 2, NULL);
    th_free(&r);
    th_cancel(&d, tok, a);
    cr_expect(th_wait_state(&d, tok, b, "RUNNING", 20000, seen), "b is %s", seen);
    th_cancel(&d, tok, b);
    th_cancel(&d, tok, c);
}

Test(agent, a_job_survives_a_cohortd_restart)
{
    char listen[32];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", th_free_port());
    const char *args[] = {"--listen", listen, NULL};
    platform(args);
    agents(1, "8");
    long id = submit_sh("slow", "slow.sh",
                        "#!/bin/sh\nsleep 3\necho done > \"$WORKSPACE/done-$RANK\"\n", 2, NULL);
    char seen[16];
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 20000, seen), "job is %s", seen);
    cr_assert_eq(th_stop(&d), 0);
    usleep(500000);
    th_restart(&d, args);
    cr_expect(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "after the restart: %s", seen);
    char *t = fetch("done-1");
    cr_expect_str_eq(t, "done\n");
    free(t);
}

Test(agent, logs_are_whole_in_order_once_and_metrics_are_kept)
{
    platform(NULL);
    agents(1, "8");
    th_put_text(&d, tok, "ws", "chatty.sh",
                "#!/bin/sh\n"
                "echo 'COHORT_METRIC {\"epoch\":1,\"loss\":0.75}'\n"
                "i=0\n"
                "while [ $i -lt 100000 ]; do echo \"line $i\"; i=$((i+1)); done\n"
                "echo 'COHORT_METRIC {\"epoch\":2,\"loss\":0.25}'\n"
                "echo 'COHORT_METRIC not json'\n",
                "755");
    long id = submit_sh("chatty", "chatty.sh", NULL, 2, NULL);
    char seen[16];
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "job ended %s", seen);
    char p[128];
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=1&limit=8388608", id);
    th_resp r = th_get(&d, p, tok);
    cr_assert_eq(r.status, 200, "%s", r.body);
    /* The whole output, in order, each line once. */
    long next = 0, lines = 0;
    int ok = 1;
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
        lines++;
        if (!strncmp(line, "COHORT_METRIC", 13))
            continue;
        long v;
        if (sscanf(line, "line %ld", &v) != 1 || v != next) {
            ok = 0;
            cr_expect_fail("line %ld: '%.40s', expected line %ld", lines, line, next);
            break;
        }
        next++;
    }
    cr_expect(ok);
    cr_expect_eq(next, 100000, "%ld lines arrived", next);
    cr_expect_eq(lines, 100003);
    th_free(&r);

    snprintf(p, sizeof p, "/v1/jobs/%ld/metrics", id);
    r = th_get(&d, p, tok);
    cr_assert_eq(r.status, 200);
    cr_expect_eq(th_items(&r), 4, "two metrics from each rank: %s", r.body);
    cr_expect(strstr(r.body, "\"values\":{\"epoch\":2,\"loss\":0.25}") != NULL, "%s", r.body);
    th_free(&r);

    /* The agent resends a chunk it sent before: nothing is added. */
    char path[500], buf[512];
    snprintf(path, sizeof path, "%s/node.json", ag[0].dir);
    FILE *f = fopen(path, "r");
    cr_assert(f);
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    cJSON *node = cJSON_Parse(buf);
    const char *node_token = cJSON_GetObjectItem(node, "node_token")->valuestring;
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    r = th_get(&d, p, tok);
    long wid = (long)cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0),
                                         "id")->valuedouble;
    th_free(&r);
    snprintf(p, sizeof p, "/v1/agent/logs/%ld?offset=0", wid);
    const char again[] = "COHORT_METRIC {\"epoch\":1,\"loss\":0.75}\nline 0\n";
    r = th_req(&d, "PUT", p, node_token, "application/octet-stream", again, sizeof again - 1, NULL);
    cr_expect_eq(r.status, 200, "%s", r.body);
    double size = th_num(&r, "size");
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=0&limit=8388608", id);
    r = th_get(&d, p, tok);
    cr_expect_eq((double)r.len, size, "the log grew on a resent chunk");
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/metrics", id);
    r = th_get(&d, p, tok);
    cr_expect_eq(th_items(&r), 4, "a resent chunk stored its metrics again");
    th_free(&r);
    /* Another tenant's token sees none of it. */
    char other[80];
    th_user(&d, "globex", "eve", "member", other);
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=0", id);
    th_expect(th_get(&d, p, other), 404);
    cJSON_Delete(node);
}

Test(agent, a_lost_node_fails_its_ranks_and_the_gang_reruns_elsewhere, .timeout = 90)
{
    const char *args[] = {"--node-timeout", "2", "--lease", "4", "--heartbeat", "1", NULL};
    platform(args);
    agents(3, "1");
    char marker[64], prog[768];
    snprintf(marker, sizeof marker, "cohort-orphan-%d", (int)getpid());
    /* The first attempt of each rank runs until stopped; later ones finish. */
    snprintf(prog, sizeof prog,
             "#!/bin/sh\n"
             "if [ ! -e \"$WORKSPACE/first-$RANK\" ]; then\n"
             "  touch \"$WORKSPACE/first-$RANK\"\n"
             "  exec sh -c 'while :; do sleep 1; done' %s\n"
             "fi\n"
             "sleep 1\n",
             marker);
    long id = submit_sh("survivor", "node.sh", prog, 2, "\"workers_per_node\":1,\"max_retries\":1");
    char seen[16];
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 20000, seen), "job is %s", seen);
    cr_assert_eq(wait_marked(marker, 2), 2);

    /* Kill the agent that holds rank 0. */
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    th_resp r = th_get(&d, p, tok);
    double node0 = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0),
                                       "node_id")->valuedouble;
    th_free(&r);
    snprintf(p, sizeof p, "/v1/nodes/%.0f", node0);
    r = th_get(&d, p, TH_ADMIN);
    char victim[64];
    snprintf(victim, sizeof victim, "%s", th_str(&r, "name"));
    th_free(&r);
    int k = victim[1] - '1';
    cr_assert(k >= 0 && k < 3, "node %s", victim);
    th_agent_kill9(&ag[k]);

    cr_expect(th_wait_state(&d, tok, id, "SUCCEEDED", 40000, seen), "job ended %s", seen);
    r = th_get(&d, p, TH_ADMIN);
    cr_expect_str_eq(th_str(&r, "state"), "down", "node %s", victim);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    r = th_get(&d, p, tok);
    cr_expect_eq(th_num(&r, "attempt"), 2);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    r = th_get(&d, p, tok);
    const cJSON *w;
    int lost = 0, stopped = 0, placed_on_victim = 0;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(r.json, "items"))
    {
        int attempt = (int)cJSON_GetObjectItem(w, "attempt")->valuedouble;
        const char *state = cJSON_GetObjectItem(w, "state")->valuestring;
        if (attempt == 1 && !strcmp(state, "lost"))
            lost++;
        if (attempt == 1 && !strcmp(state, "exited") && cJSON_IsNumber(cJSON_GetObjectItem(w, "signal")))
            stopped++;
        if (attempt == 2 && cJSON_GetObjectItem(w, "node_id")->valuedouble == node0)
            placed_on_victim++;
    }
    cr_expect_eq(lost, 1, "%s", r.body);
    cr_expect_eq(stopped, 1, "the other rank was not stopped: %s", r.body);
    cr_expect_eq(placed_on_victim, 0, "attempt 2 went to the down node");
    th_free(&r);
    /* The rank left on the dead agent's node stops once its lease runs out. */
    int left = -1;
    for (int i = 0; i < 300 && (left = th_count_marked(marker)) > 0; i++)
        usleep(50000);
    cr_expect_eq(left, 0, "%d processes outlived their agent's lease", left);
}

/*
 * cohortd stopped for longer than --node-timeout (but within the agents'
 * lease) fails no job: after its restart a node is judged by heartbeats it
 * has been up to receive, so the running job's node is not marked down
 * from a heartbeat older than the outage, and the job runs to its end.
 */
Test(agent, a_cohortd_restart_longer_than_the_node_timeout_fails_no_job, .timeout = 90)
{
    char listen[40];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", th_free_port()); /* the same after restart */
    const char *args[] = {"--node-timeout", "2", "--lease", "30", "--heartbeat", "1",
                          "--listen", listen, NULL};
    platform(args);
    agents(1, "1");
    long id = submit_sh("long", "long.sh", "#!/bin/sh\nsleep 14\n", 1, NULL);
    char seen[16], p[64];
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 20000, seen), "job is %s", seen);
    cr_assert_eq(th_stop(&d), 0);
    sleep(5); /* 2.5 node timeouts without cohortd */
    th_restart(&d, args);
    sleep(4); /* two more node timeouts, now with heartbeats coming in */
    th_resp r = th_get(&d, "/v1/nodes/1", TH_ADMIN);
    cr_expect_str_eq(th_str(&r, "state"), "up", "%s", r.body);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "state"), "RUNNING", "%s", r.body);
    th_free(&r);
    cr_expect(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "job ended %s", seen);
}

Test(agent, a_restarted_agent_adopts_its_running_workers)
{
    platform(NULL);
    agents(1, "8");
    long id = submit_sh(
        "steady", "steady.sh",
        "#!/bin/sh\nsleep 4\necho \"rank $RANK done\" > \"$WORKSPACE/steady-$RANK\"\n", 2, NULL);
    char seen[16];
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 20000, seen), "job is %s", seen);
    th_agent_kill9(&ag[0]);
    usleep(300000);
    th_agent_restart(&ag[0], &d, NULL);
    cr_expect(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "job ended %s", seen);
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect_eq(th_num(&r, "attempt"), 1, "the workers were started again instead of adopted");
    th_free(&r);
    char *t = fetch("steady-1");
    cr_expect_str_eq(t, "rank 1 done\n");
    free(t);
}

/* The node token kept in agent a's node.json into out[80] ("" if none). */
static void kept_token(const th_agent *a, char *out)
{
    char path[512], text[512];
    snprintf(path, sizeof path, "%s/node.json", a->dir);
    out[0] = '\0';
    if (th_read_text(path, text, sizeof text) < 0)
        return;
    cJSON *o = cJSON_Parse(text);
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(o, "node_token"));
    snprintf(out, 80, "%s", t ? t : "");
    cJSON_Delete(o);
}

/*
 * A real agent takes the new node token a heartbeat sends, keeps it in its
 * node.json and goes on with it.  With cohortd rotating tokens every 2 s, a
 * job of 6 s runs through several rotations, the agent's long poll never
 * loses the node (a 401 there would end the agent), its old token is
 * refused, and a job after that still runs.
 */
Test(agent, an_agent_goes_on_through_node_token_rotations, .timeout = 90)
{
    const char *const args[] = {"--node-token-rotate", "2", "--heartbeat", "1", NULL};
    char first[80], last[80], log[512], text[65536];
    platform(args);
    agents(1, "8");
    for (int i = 0; i < 100 && (kept_token(&ag[0], first), !first[0]); i++)
        usleep(100 * 1000); /* registered, and kept, soon after it starts */
    cr_assert(first[0], "no node token in node.json");
    /* its join token came through its environment: not on its command line */
    char cmdline[4096], procf[64];
    snprintf(procf, sizeof procf, "/proc/%d/cmdline", (int)ag[0].pid);
    FILE *cf = fopen(procf, "rb");
    cr_assert_not_null(cf);
    size_t cn = fread(cmdline, 1, sizeof cmdline - 1, cf);
    fclose(cf);
    for (size_t i = 0; i < cn; i++)
        cmdline[i] = cmdline[i] ? cmdline[i] : ' ';
    cmdline[cn] = '\0';
    cr_expect(strstr(cmdline, "coh_") == NULL && strstr(cmdline, "join") == NULL, "%s", cmdline);
    long id = submit_sh("rot", "rot.sh", "#!/bin/sh\nsleep 6\necho rotated through\n", 1, NULL);
    th_resp r = succeeded_log(id, 40000);
    cr_expect(strstr(r.body, "rotated through") != NULL, "%s", r.body);
    th_free(&r);
    kept_token(&ag[0], last);
    cr_expect_str_neq(last, first, "the agent never took a new token");
    th_expect(th_post(&d, "/v1/agent/heartbeat", first, "{\"workers\":[]}"), 401);
    snprintf(log, sizeof log, "%s.log", ag[0].dir);
    cr_assert(th_read_text(log, text, sizeof text) >= 0);
    int n = 0;
    for (const char *at = text; (at = strstr(at, "node token rotated")); at++)
        n++;
    cr_expect(n >= 2, "%d rotations in 6 s of job:\n%s", n, text);
    cr_expect(strstr(text, "does not know this node") == NULL, "%s", text);
    cr_expect(strstr(text, "refuses this node's token") == NULL, "%s", text);
    r = th_get(&d, "/v1/nodes/1", TH_ADMIN);
    cr_expect_str_eq(th_str(&r, "revoked_at"), "", "a rotation revoked the node: %s", r.body);
    th_free(&r);
    cr_expect_eq(kill(ag[0].pid, 0), 0, "the agent ended");
    id = submit_sh("after", "after.sh", "#!/bin/sh\necho still here\n", 1, NULL);
    r = succeeded_log(id, 30000);
    th_free(&r);
}

/* A heartbeat with node token tok and no workers: the status, and a new
 * token it was sent into next[80] ("" for none). */
static long beat_as(const char *tok, char *next)
{
    th_resp r = th_post(&d, "/v1/agent/heartbeat", tok, "{\"workers\":[]}");
    long st = r.status;
    snprintf(next, 80, "%s", st == 200 ? th_str(&r, "node_token") : "");
    th_free(&r);
    return st;
}

/*
 * A thief with a copy of a node's token takes it over through a rotation
 * (a probe did: the real agent was shut out, exited, and the admin saw a
 * rotation like any other).  Now the real agent keeps presenting its
 * token, which a rotation replaced; past cohortd's grace that revokes the
 * node, saying why: the thief's token is refused, the job fails, and the
 * agent gives up once refused for 10 s.
 */
Test(agent, a_node_token_taken_over_by_a_thief_revokes_the_node, .timeout = 90)
{
    char stolen[80], mine[80], got[80], seen[16], log[512], text[65536];
    platform(NULL);
    agents(1, "8");
    long id = submit_sh("victim", "victim.sh", "#!/bin/sh\nsleep 60\n", 1, NULL);
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 30000, seen), "job is %s", seen);
    kept_token(&ag[0], stolen);
    kill(ag[0].pid, SIGSTOP); /* the thief is quicker than the agent's next heartbeat */
    th_must(th_post(&d, "/v1/nodes/1/rotate-token", TH_ADMIN, NULL), 202);
    cr_expect_eq(beat_as(stolen, mine), 200);
    cr_expect_eq(beat_as(mine, got), 200, "the thief's new token was refused");
    kill(ag[0].pid, SIGCONT);
    cr_expect(th_wait_state(&d, tok, id, "FAILED", 30000, seen), "job is %s", seen);
    th_resp r = th_get(&d, "/v1/nodes/1", TH_ADMIN);
    cr_expect(strstr(th_str(&r, "revoked_reason"), "two holders") != NULL, "%s", r.body);
    th_free(&r);
    cr_expect_eq(beat_as(mine, got), 401, "the thief keeps the node");
    snprintf(log, sizeof log, "%s.log", ag[0].dir);
    for (int i = 0; i < 200; i++) { /* it gives up 10 s after the first refusal */
        cr_assert(th_read_text(log, text, sizeof text) >= 0);
        if (strstr(text, "does not know this node"))
            break;
        usleep(100 * 1000);
    }
    cr_expect(strstr(text, "refuses this node's token") != NULL, "%s", text);
    cr_expect(strstr(text, "does not know this node") != NULL, "the agent did not give up:\n%s",
              text);
}

/*
 * A second probe's race: with a copy of the node's token, a thief
 * heartbeats every 20 ms while a rotation is asked, so that each successor
 * the agent keeps is forgotten for the thief's next before the agent uses
 * it (the agent then gave up, refused, and the thief kept the node).  A
 * successor forgotten that way and then used revokes the node at once.
 */
Test(agent, a_thief_racing_for_the_new_token_gets_the_node_revoked, .timeout = 90)
{
    char stolen[80], mine[80], got[80], seen[16];
    platform(NULL);
    agents(1, "8");
    long id = submit_sh("victim", "victim.sh", "#!/bin/sh\nsleep 60\n", 1, NULL);
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 30000, seen), "job is %s", seen);
    kept_token(&ag[0], stolen);
    mine[0] = '\0';
    th_must(th_post(&d, "/v1/nodes/1/rotate-token", TH_ADMIN, NULL), 202);
    for (int i = 0; i < 200; i++) { /* 4 s: the agent heartbeats in them */
        if (beat_as(stolen, got) == 200 && got[0])
            snprintf(mine, sizeof mine, "%s", got);
        usleep(20 * 1000);
    }
    beat_as(mine, got); /* the thief takes the node, or is caught */
    char why[200] = "";
    for (int i = 0; i < 150 && !strstr(why, "two holders"); i++) {
        th_resp r = th_get(&d, "/v1/nodes/1", TH_ADMIN);
        snprintf(why, sizeof why, "%s", th_str(&r, "revoked_reason"));
        th_free(&r);
        usleep(100 * 1000);
    }
    cr_expect(strstr(why, "two holders") != NULL, "the node was not revoked: '%s'", why);
    cr_expect_eq(beat_as(mine, got), 401, "the thief keeps the node");
    cr_expect(th_wait_state(&d, tok, id, "FAILED", 30000, seen), "job is %s", seen);
}

/* Bytes written to, and bytes on disk of, every output.log of an agent's
 * workers; returns how many there are. */
static int node_logs(const th_agent *a, long *written, long *disk)
{
    char cmd[600];
    long sz, blocks;
    int n = 0;
    *written = *disk = 0;
    snprintf(cmd, sizeof cmd, "find '%s/workers' -name output.log -printf '%%s %%b\\n'", a->dir);
    FILE *f = popen(cmd, "r");
    while (f && fscanf(f, "%ld %ld", &sz, &blocks) == 2) {
        *written += sz;
        *disk += blocks * 512;
        n++;
    }
    if (f)
        pclose(f);
    return n;
}

/*
 * The node frees what it has shipped of a worker's output.log (all but the
 * newest MB).  An agent killed after it did so, restarted, ships the rest
 * from where the file's data begins: the log cohortd keeps is whole, in
 * order, once, with no byte of the freed part (zeros) in it.
 */
Test(agent, a_restarted_agent_resumes_a_log_it_has_trimmed, .timeout = 90)
{
    platform(NULL);
    agents(1, "8");
    long id = submit_sh("long", "long.sh",
                        "#!/bin/sh\nseq 0 299999 | sed 's/^/line /'\nsleep 3\n"
                        "seq 300000 309999 | sed 's/^/line /'\n",
                        1, NULL);
    char seen[16];
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 20000, seen), "job is %s", seen);
    /* Wait until the first 3.4 MB are printed and all but a MB of them freed. */
    long written = 0, disk = 0;
    for (int i = 0; i < 200; i++) {
        if (node_logs(&ag[0], &written, &disk) == 1 && written > 3000000 &&
            disk < written - 1500000)
            break;
        usleep(25000);
    }
    cr_assert_lt(disk, written - 1500000, "the node kept %ld of %ld bytes", disk, written);
    th_agent_kill9(&ag[0]);
    usleep(300000);
    th_agent_restart(&ag[0], &d, NULL);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "job ended %s", seen);
    char p[128];
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=0&limit=8388608", id);
    th_resp r = th_get(&d, p, tok);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(strlen(r.body), r.len, "the log has a zero byte at %zu", strlen(r.body));
    long next = 0;
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
        long v;
        if (sscanf(line, "line %ld", &v) != 1 || v != next) {
            cr_expect_fail("after line %ld came '%.40s'", next - 1, line);
            break;
        }
        next++;
    }
    cr_expect_eq(next, 310000, "%ld lines arrived in order", next);
    th_free(&r);
    node_logs(&ag[0], &written, &disk);
    cr_log_info("output.log on the node: %ld bytes written, %ld on disk", written, disk);
}

Test(agent, max_runtime_ends_a_job_as_timeout)
{
    platform(NULL);
    agents(1, "8");
    long id = submit_sh("forever", "forever.sh", "#!/bin/sh\nexec sleep 600\n", 1,
                        "\"max_runtime_seconds\":2,\"max_retries\":3");
    char seen[16];
    cr_assert(th_wait_state(&d, tok, id, "FAILED", 20000, seen), "job ended %s", seen);
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect(!strncmp(th_str(&r, "reason"), "timeout", 7), "reason: %s", th_str(&r, "reason"));
    cr_expect_eq(th_num(&r, "attempt"), 1, "a timeout is not retried");
    th_free(&r);
    wait_workers_ended(id);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "\"signal\":15") != NULL, "the worker was not stopped: %s", r.body);
    th_free(&r);
}

Test(agent, an_agent_cut_off_past_its_lease_stops_its_workers)
{
    const char *args[] = {"--lease", "3", NULL};
    platform(args);
    agents(1, "8");
    char marker[64], prog[256];
    snprintf(marker, sizeof marker, "cohort-cutoff-%d", (int)getpid());
    snprintf(prog, sizeof prog, "#!/bin/sh\nexec sh -c 'while :; do sleep 1; done' %s\n", marker);
    long id = submit_sh("loop", "loop.sh", prog, 1, NULL);
    char seen[16];
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 20000, seen), "job is %s", seen);
    cr_assert_eq(wait_marked(marker, 1), 1);
    kill(d.pid, SIGSTOP); /* cohortd stops answering */
    int left = -1;
    for (int i = 0; i < 300 && (left = th_count_marked(marker)) > 0; i++)
        usleep(50000);
    kill(d.pid, SIGCONT);
    cr_expect_eq(left, 0, "the worker kept running with its agent cut off past the lease");
}

Test(agent, fair_share_puts_the_lighter_tenant_first)
{
    platform(NULL);
    agents(1, "1"); /* one worker at a time */
    char tb[80];
    th_user(&d, "globex", "bob", "member", tb);
    th_resp r = th_post(&d, "/v1/workspaces", tb, "{\"name\":\"ws\"}");
    th_free(&r);
    th_put_text(&d, tb, "ws", "quick.sh", "#!/bin/sh\nexit 0\n", "755");
    th_put_text(&d, tok, "ws", "quick.sh", "#!/bin/sh\nexit 0\n", "755");
    th_put_text(&d, tok, "ws", "busy.sh", "#!/bin/sh\nsleep 2\n", "755");
    const char *busy = "{\"name\":\"busy\",\"image\":\"native\",\"workspace\":\"ws\","
                       "\"code_path\":\"busy.sh\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                       "\"worker_spec\":\"cpu-small\",\"worker_count\":1}";
    const char *quick = "{\"name\":\"quick\",\"image\":\"native\",\"workspace\":\"ws\","
                        "\"code_path\":\"quick.sh\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                        "\"worker_spec\":\"cpu-small\",\"worker_count\":1}";
    char seen[16];
    long warm = submit(busy); /* acme uses the node for 2 s */
    cr_assert(th_wait_state(&d, tok, warm, "SUCCEEDED", 20000, seen), "%s", seen);
    long block = submit(busy);
    cr_assert(th_wait_state(&d, tok, block, "RUNNING", 20000, seen), "%s", seen);
    long a = submit(quick); /* acme first... */
    usleep(100000);
    long b = th_submit(&d, tb, quick); /* ...then globex, which used nothing */
    cr_assert(th_wait_state(&d, tok, a, "SUCCEEDED", 20000, seen), "%s", seen);
    cr_assert(th_wait_state(&d, tb, b, "SUCCEEDED", 20000, seen), "%s", seen);
    char pa[64], pb[64];
    snprintf(pa, sizeof pa, "/v1/jobs/%ld", a);
    snprintf(pb, sizeof pb, "/v1/jobs/%ld", b);
    th_resp ra = th_get(&d, pa, tok), rb = th_get(&d, pb, tb);
    cr_expect(strcmp(th_str(&rb, "started_at"), th_str(&ra, "started_at")) < 0,
              "globex's job started %s, after acme's %s", th_str(&rb, "started_at"),
              th_str(&ra, "started_at"));
    th_free(&ra);
    th_free(&rb);
}

/* Uploads the source tree's file src to the workspace as name. */
static void put_source_file(const char *src, const char *name)
{
    char path[512];
    static char text[16384];
    snprintf(path, sizeof path, "%s/%s", COHORT_SOURCE_DIR, src);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    th_put_text(&d, tok, "ws", name, text, NULL);
}

/* Two hosts of the test's own: network namespaces on a bridge, each with an
 * agent of cpus CPUs (n1 at .2, n2 at .3); cohortd listens on the bridge.
 * The platform() of the other tests, with the agents. */
static char hosts_registry[64]; /* the registry two_hosts started on the bridge */

static void two_hosts(const char *cpus)
{
    if (!th_can_sandbox())
        cr_skip_test("needs root to create network namespaces");
    int net = 100 + getpid() % 150;
    snprintf(net_tag, sizeof net_tag, "ct%d", (int)getpid() % 100000);
    net_cleanup();
    snprintf(net_tag, sizeof net_tag, "ct%d", (int)getpid() % 100000);
    util_system("ip link add %s-br type bridge && ip addr add 10.211.%d.1/24 dev %s-br && "
                "ip link set %s-br up",
                net_tag, net, net_tag, net_tag);
    for (int i = 1; i <= 2; i++)
        util_system("ip netns add %s-%d && ip link add %s-h%d type veth peer name %s-n%d && "
                    "ip link set %s-h%d master %s-br up && ip link set %s-n%d netns %s-%d && "
                    "ip -n %s-%d addr add 10.211.%d.%d/24 dev %s-n%d && "
                    "ip -n %s-%d link set %s-n%d up && ip -n %s-%d link set lo up",
                    net_tag, i, net_tag, i, net_tag, i, net_tag, i, net_tag, net_tag, i, net_tag, i,
                    net_tag, i, net, 1 + i, net_tag, i, net_tag, i, net_tag, i, net_tag, i);
    char listen[40], ns[2][40], addr[2][24];
    snprintf(listen, sizeof listen, "10.211.%d.1:0", net);
    const char *args[] = {"--listen", listen, NULL};
    platform(args);
    /* Their images from a registry on the bridge, as a cluster's would be. */
    char bridge[32];
    snprintf(bridge, sizeof bridge, "10.211.%d.1", net);
    const char *reg = th_registry_on(bridge);
    snprintf(hosts_registry, sizeof hosts_registry, "%s", reg);
    /* One machine: its agents share one image cache (one pull, one unpack). */
    const char *cache = th_shared_image_cache();
    for (int i = 0; i < 2; i++) {
        snprintf(ns[i], sizeof ns[i], "%s-%d", net_tag, i + 1);
        snprintf(addr[i], sizeof addr[i], "10.211.%d.%d", net, i + 2);
        const char *extra[] = {"--cpus",       cpus,          "--address", addr[i],
                               "--port-range", "32000-32099", "--registry", reg,
                               "--insecure-registry", reg, "--image-cache", cache, NULL};
        th_agent_start_in(&ag[i], &d, ns[i], i ? "n2" : "n1", extra);
    }
    nagents = 2;
}

/* The job's two ranks, one per host, meet at MASTER_ADDR:MASTER_PORT. */
/* Whether this machine's kernel has the pids controller on (v1 or v2). */
static int host_has_pids(void)
{
    char line[256];
    int on = 0;
    FILE *f = fopen("/proc/cgroups", "r");
    while (f && fgets(line, sizeof line, f)) {
        unsigned hier, num, enabled;
        char name[64];
        if (sscanf(line, "%63s %u %u %u", name, &hier, &num, &enabled) == 4 &&
            !strcmp(name, "pids"))
            on = enabled == 1;
    }
    if (f)
        fclose(f);
    return on;
}

Test(agent, ranks_meet_across_two_network_namespaces, .timeout = 90)
{
    two_hosts("1");
    /* Each "host" sees the machine's cgroup hierarchies, as a real one
     * does, and limits its workers there (hybrid hosts' v1 controllers
     * too, which a fresh /sys under `ip netns exec` had hidden). */
    for (int i = 0; i < 2 && host_has_pids(); i++) {
        char logp[420], log[8192] = "";
        snprintf(logp, sizeof logp, "%s.log", ag[i].dir);
        for (int k = 0; k < 50 && !strstr(log, "cgroup"); k++) {
            th_read_text(logp, log, sizeof log);
            usleep(100000);
        }
        const char *at = strstr(log, "controllers:");
        cr_expect(at && strstr(at, "pids") && strstr(at, "memory"),
                  "host %d's agent limits no pids or memory: %s", i + 1, log);
    }
    FILE *f = fopen(COHORT_RENDEZVOUS_BIN, "rb");
    cr_assert(f);
    static char bin[2 << 20];
    size_t n = fread(bin, 1, sizeof bin, f);
    fclose(f);
    th_must(th_put_file(&d, "/v1/workspaces/ws/files/meet?mode=755", tok, bin, n), 201);
    long id = submit_sh("meet", "meet", NULL, 2, "\"workers_per_node\":1");
    char seen[16];
    cr_expect(th_wait_state(&d, tok, id, "SUCCEEDED", 40000, seen), "job ended %s", seen);
    char p[128];
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=1", id);
    th_resp r = th_get(&d, p, tok);
    /* over the job's overlay: rank 0's node is 10.77.0.1 there */
    cr_expect(strstr(r.body, "rank 1 reached rank 0 at 10.77.0.1:") != NULL, "rank 1 said: %s",
              r.body);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=0", id);
    r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "rank 0 met all 2 ranks") != NULL, "rank 0 said: %s", r.body);
    th_free(&r);
    /* The ranks ran on different hosts: MASTER_ADDR was the other namespace's. */
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    r = th_get(&d, p, tok);
    const cJSON *items = cJSON_GetObjectItem(r.json, "items");
    cr_expect_neq(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 0), "node_id")->valuedouble,
                  cJSON_GetObjectItem(cJSON_GetArrayItem(items, 1), "node_id")->valuedouble);
    th_free(&r);
}

/* What a job over two hosts reaches, as a hostile tenant would try it.
 * acme's pair meets over its own overlay (rank 0 listens on MASTER_PORT on
 * one host, rank 1 says hello from the other); globex's pair, on the same
 * two hosts, reaches its own ranks and nothing else: not acme's port at
 * either host's address or at acme's overlay address, not cohortd, not the
 * registry.  Nor does the host side reach acme's port. */
Test(agent, a_job_over_two_hosts_reaches_its_own_ranks_and_nothing_else, .timeout = 180)
{
    char tok_b[80], seen[16], env[1536], cmd[256];
    two_hosts("2");
    const char *bridge = d.base + strlen("http://"); /* 10.211.N.1:PORT */
    char net[32];
    snprintf(net, sizeof net, "%.*s", (int)(strrchr(bridge, '.') - bridge), bridge);
    th_user(&d, "globex", "bob", "member", tok_b);
    th_must(th_post(&d, "/v1/workspaces", tok_b, "{\"name\":\"ws\"}"), 201);
    long victim = submit_sh("pair", "pair.sh",
                            "#!/bin/sh\nif [ \"$RANK\" = 0 ]; then echo \"$MASTER_PORT\" > "
                            "port.txt; nc -l -p \"$MASTER_PORT\" > got.txt; else sleep 10; "
                            "echo \"hello from rank 1 via $MASTER_ADDR\" | nc -w 5 "
                            "\"$MASTER_ADDR\" \"$MASTER_PORT\"; fi\n",
                            2, "\"workers_per_node\":1");
    cr_assert(th_wait_state(&d, tok, victim, "RUNNING", 60000, seen), "%s", seen);
    char *port = NULL;
    for (int i = 0; i < 100 && !port; i++) {
        th_resp r = th_get(&d, "/v1/workspaces/ws/files/port.txt", tok);
        if (r.status == 200 && atoi(r.body) > 0)
            port = strdup(r.body);
        th_free(&r);
        if (!port)
            usleep(100000);
    }
    cr_assert_not_null(port, "acme's rank 0 never wrote its port");
    port[strcspn(port, "\n")] = '\0';
    snprintf(env, sizeof env,
             ",\"workers_per_node\":1,\"env\":{\"VICTIM_PORT\":\"%s\",\"NET\":\"%s\","
             "\"COHORTD\":\"%s\",\"REGISTRY\":\"%s\"}",
             port, net, bridge, hosts_registry);
    th_put_text(&d, tok_b, "ws", "reach.sh",
                "#!/bin/sh\nif [ \"$RANK\" = 0 ]; then nc -l -p \"$MASTER_PORT\" > peer.txt; "
                "exit 0; fi\nsleep 2\n"
                "t() { k=$1; shift; if \"$@\" > /dev/null 2>&1; then echo \"$k=reached\"; "
                "else echo \"$k=no\"; fi; }\n"
                "{ t HOST1 sh -c \"echo evil | nc -w 2 $NET.2 $VICTIM_PORT\"\n"
                "  t HOST2 sh -c \"echo evil | nc -w 2 $NET.3 $VICTIM_PORT\"\n"
                "  t OVERLAY sh -c \"echo evil | nc -w 2 10.77.0.1 $VICTIM_PORT\"\n"
                "  t COHORTD wget -q -T 2 -O - http://$COHORTD/healthz\n"
                "  t REGISTRY wget -q -T 2 -O - http://$REGISTRY/v2/\n"
                "  t PEER sh -c \"echo peer | nc -w 2 $MASTER_ADDR $MASTER_PORT\"\n"
                "  echo \"IPV6=$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6)\"\n"
                "  echo \"MTU=$(cat /sys/class/net/eth0/mtu)\"\n"
                "} > reach.txt\n",
                "755");
    char body[2048];
    snprintf(body, sizeof body,
             "{\"name\":\"reach\",\"image\":\"native\",\"workspace\":\"ws\","
             "\"code_path\":\"reach.sh\",\"epochs\":1,\"lr\":0.1,\"batch_size\":1,"
             "\"worker_spec\":\"cpu-small\",\"worker_count\":2%s}",
             env);
    long attacker = th_submit(&d, tok_b, body);
    cr_assert(th_wait_state(&d, tok_b, attacker, "SUCCEEDED", 60000, seen), "%s", seen);
    /* the host side, at either host's address */
    int host_reached = 0;
    for (int h = 2; h <= 3; h++) {
        snprintf(cmd, sizeof cmd, "echo host | nc -w 2 %s.%d %s >/dev/null 2>&1", net, h, port);
        host_reached |= system(cmd) == 0;
    }
    cr_assert(th_wait_state(&d, tok, victim, "SUCCEEDED", 60000, seen), "%s", seen);
    char *got = th_get_body(&d, "/v1/workspaces/ws/files/got.txt", tok);
    cr_expect_str_eq(got, "hello from rank 1 via 10.77.0.1\n", "acme's rank 0 heard: %s", got);
    free(got);
    char *t = th_get_body(&d, "/v1/workspaces/ws/files/reach.txt", tok_b);
    static const char *const want[] = {"HOST1=no",    "HOST2=no",    "OVERLAY=no",
                                       "COHORTD=no",  "REGISTRY=no", "PEER=reached",
                                       "IPV6=1",  /* no router advert reconfigures it */
                                       /* the hosts' 1500 less VXLAN's 50: no packet of
                                        * the overlay leaves a host in fragments */
                                       "MTU=1450"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(strstr(t, want[i]) != NULL, "not %s: %s", want[i], t);
    free(t);
    cr_expect(!host_reached, "the host side reached acme's port %s", port);
    free(port);
}

/* A node that gives jobs networks of their own never hands a job the
 * node's network: a gang of two on a cluster of one --network job node and
 * one --network host node is not placed across the two kinds (it waits,
 * saying why), and nothing of it runs. */
Test(agent, a_job_network_node_never_falls_back_to_the_hosts_network, .timeout = 90)
{
    platform(NULL);
    const char *job_args[] = {"--cpus", "1", "--memory-mb", "65536", "--port-range",
                              "31000-31099", NULL};
    const char *host_args[] = {"--cpus", "1", "--memory-mb", "65536", "--port-range",
                               "31100-31199", "--network", "host", NULL};
    th_agent_start(&ag[0], &d, "n1", job_args);
    th_agent_start(&ag[1], &d, "n2", host_args);
    nagents = 2;
    long id = submit_sh("mixed", "mixed.sh", "#!/bin/sh\nsleep 30\n", 2,
                        "\"workers_per_node\":1");
    char p[64];
    sleep(4); /* several scheduler passes */
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "state"), "PENDING", "placed across the two kinds: %s", r.body);
    cr_expect(th_str(&r, "reason") && strstr(th_str(&r, "reason"), "resources"), "%s", r.body);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    r = th_get(&d, p, tok);
    cr_expect_eq(th_items(&r), 0, "workers were made: %s", r.body);
    th_free(&r);
}

/* cohort-worker from its image, one rank on each of two hosts (network
 * namespaces), trains over Gloo across them. */
Test(agent, cohort_worker_trains_across_two_hosts_from_its_image, .timeout = 240)
{
    char p[160];
    two_hosts("2");
    synth_dataset(1000, 200);
    th_resp r;
    trainer_image();
    long id = submit("{\"name\":\"cw2\",\"image\":\"trainer\",\"datasets\":[\"synth\"],"
                     "\"workspace\":\"ws\",\"code_path\":\"train.sh\",\"epochs\":3,"
                     "\"lr\":0.05,\"batch_size\":32,\"worker_spec\":\"cpu-small\","
                     "\"worker_count\":2,\"workers_per_node\":1}");
    r = succeeded_log(id, 180000);
    cr_expect_not_null(strstr(r.body, "2 ranks over gloo"), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "epoch 3 done"), "%s", r.body);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    r = th_get(&d, p, tok);
    const cJSON *items = cJSON_GetObjectItem(r.json, "items");
    cr_expect_neq(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 0), "node_id")->valuedouble,
                  cJSON_GetObjectItem(cJSON_GetArrayItem(items, 1), "node_id")->valuedouble,
                  "both ranks on one host");
    th_free(&r);
}

/* A tensorflow job of 4 workers, 2 on each host: TF_CONFIG lists every
 * worker at its own node's address and a port reserved for it there, no
 * two entries alike, and each worker reaches every other. */
Test(agent, tensorflow_workers_reach_each_other_through_tf_config, .timeout = 300)
{
    th_registry_add_pytorch();
    two_hosts("2");
    /* No Debian package holds TensorFlow: a Python image launched by the
     * TensorFlow convention (TF_CONFIG, no --local_rank) stands in, as a
     * user's own TensorFlow image would be registered. */
    th_resp ri = th_create(&d, "/v1/images", TH_ADMIN,
                           "{\"name\":\"tf-test\",\"reference\":\"cohort/pytorch:bookworm\","
                           "\"framework\":\"tensorflow\"}");
    th_free(&ri);
    put_source_file("tests/tf_cluster.py", "cluster.py");
    long id = submit("{\"name\":\"tf\",\"image\":\"tf-test\",\"workspace\":\"ws\","
                     "\"code_path\":\"cluster.py\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                     "\"worker_spec\":\"cpu-small\",\"worker_count\":4,\"workers_per_node\":2}");
    char seen[16], p[128];
    int ok = th_wait_state(&d, tok, id, "SUCCEEDED", 240000, seen);
    char *logs[4];
    for (int r = 0; r < 4; r++) {
        snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=%d", id, r);
        th_resp lr = th_get(&d, p, tok);
        logs[r] = th_take_body(&lr);
    }
    cr_assert(ok, "job ended %s; rank 0: %s rank 1: %s rank 2: %s rank 3: %s", seen, logs[0],
              logs[1], logs[2], logs[3]);
    /* Ranks 0 and 1 listen on one host, ranks 2 and 3 on the other, each at
     * a port of its own, at their host's address on the job's overlay
     * (10.77.0.1 and 10.77.0.2). */
    int ports[4] = {0}, hosts[4] = {0}, master_port = 0;
    for (int r = 0; r < 4; r++) {
        char want[64];
        snprintf(want, sizeof want, "worker %d met all 4 workers", r);
        cr_expect_not_null(strstr(logs[r], want), "rank %d said: %s", r, logs[r]);
        const char *at = strstr(logs[r], "listening at 10.77.0.");
        cr_assert_not_null(at, "rank %d said: %s", r, logs[r]);
        int mp;
        cr_assert_eq(sscanf(at, "listening at 10.77.0.%d:%d, MASTER_PORT %d", &hosts[r],
                            &ports[r], &mp), 3);
        for (int q = 0; q < r; q++)
            cr_expect(hosts[q] != hosts[r] || ports[q] != ports[r],
                      "ranks %d and %d share .%d:%d", q, r, hosts[r], ports[r]);
        if (r == 0)
            master_port = mp;
        cr_expect_eq(mp, master_port, "rank %d was given MASTER_PORT %d", r, mp);
        free(logs[r]);
    }
    /* Node-major ranks: 0 and 1 on one host, 2 and 3 on the other. */
    cr_expect(hosts[0] == hosts[1] && hosts[2] == hosts[3] && hosts[0] != hosts[2],
              "ranks on hosts .%d .%d .%d .%d", hosts[0], hosts[1], hosts[2], hosts[3]);
    /* Rank 0's port is the job's MASTER_PORT. */
    cr_expect_eq(ports[0], master_port);
}

Test(agent, follow_streams_the_log_until_the_attempt_ends)
{
    platform(NULL);
    agents(1, "8");
    th_put_text(&d, tok, "ws", "tick.sh",
                "#!/bin/sh\nfor i in 1 2 3 4 5 6 7 8; do echo \"tick $i\"; sleep 0.2; done\n", "755");
    long id = submit_sh("tick", "tick.sh", NULL, 1, NULL);
    /* Followed from before the job starts; the answer ends when it does. */
    char p[128];
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=0&follow=true", id);
    th_resp r = th_get(&d, p, tok);
    cr_assert_eq(r.status, 200);
    cr_expect_str_eq(r.body, "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\ntick 7\ntick 8\n");
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "state"), "SUCCEEDED", "the stream ended before the job");
    th_free(&r);
}

/* An IDX file: two zero bytes, type 0x08 (unsigned byte), the number of
 * dimensions, each dimension big-endian, then the bytes. */
static size_t idx_header(unsigned char *out, int ndim, const unsigned *dims)
{
    out[0] = out[1] = 0;
    out[2] = 0x08;
    out[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        out[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
        out[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
        out[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
        out[7 + 4 * i] = (unsigned char)dims[i];
    }
    return 4 + 4 * (size_t)ndim;
}

/* The first and the last epoch's loss rank 0 of ddp_train.py printed in
 * the log r (freed here); -1 where none. */
static void ddp_losses(th_resp *r, double *first, double *last)
{
    for (char *line = strtok(r->body, "\n"); line; line = strtok(NULL, "\n")) {
        int epoch;
        double loss;
        if (sscanf(line, "rank 0/2 epoch %d loss %lf", &epoch, &loss) == 2) {
            if (*first < 0)
                *first = loss;
            *last = loss;
        }
    }
    th_free(r);
}

/* Dataset "digits": 512 8x8 images of 10 classes in MNIST's idx format,
 * a fixed pattern per class plus noise. */
static void digits_dataset(void)
{
    enum { N = 512, SIDE = 8 };
    static unsigned char images[16 + N * SIDE * SIDE], labels[8 + N];
    unsigned dims3[] = {N, SIDE, SIDE}, dims1[] = {N};
    size_t hi = idx_header(images, 3, dims3), hl = idx_header(labels, 1, dims1);
    srand(7);
    for (int i = 0; i < N; i++) {
        int c = i % 10;
        labels[hl + i] = (unsigned char)c;
        for (int p = 0; p < SIDE * SIDE; p++)
            images[hi + (size_t)i * SIDE * SIDE + p] =
                (unsigned char)(((p * 7 + c * 13) % 10 < 3 ? 180 : 20) + rand() % 60);
    }
    th_resp r = th_post(&d, "/v1/datasets", tok, "{\"name\":\"digits\"}");
    th_free(&r);
    th_must(th_put_file(&d, "/v1/datasets/digits/files/train-images-idx3-ubyte", tok, images,
                        hi + N * SIDE * SIDE), 201);
    th_must(th_put_file(&d, "/v1/datasets/digits/files/train-labels-idx1-ubyte", tok, labels, hl + N), 201);
}

Test(agent, an_unmodified_torch_distributed_script_trains, .timeout = 600)
{
    platform(NULL);
    th_registry_add_pytorch();
    const char *extra[] = {"--cpus", "8", "--image-cache", th_shared_image_cache(), NULL};
    th_agent_start(&ag[0], &d, "n1", extra);
    nagents = 1;
    digits_dataset();
    put_source_file("cli/examples/mnist/train.py", "ddp_train.py");
    long id = submit("{\"name\":\"ddp\",\"image\":\"pytorch\",\"datasets\":[\"digits\"],"
                     "\"workspace\":\"ws\",\"code_path\":\"ddp_train.py\",\"epochs\":6,"
                     "\"lr\":0.5,\"batch_size\":32,\"worker_spec\":\"cpu-small\","
                     "\"worker_count\":2,\"env\":{\"OMP_NUM_THREADS\":\"1\"}}");
    char seen[16];
    th_resp r = succeeded_log(id, 400000);
    /* The loss falls: the last epoch's is below the first's. */
    double first = -1, last = -1;
    ddp_losses(&r, &first, &last);
    cr_expect(first > 0 && last >= 0, "no loss lines in the log");
    cr_expect_lt(last, first * 0.7, "the loss went from %.4f to %.4f", first, last);
    char p[128];
    snprintf(p, sizeof p, "/v1/jobs/%ld/metrics", id);
    r = th_get(&d, p, tok);
    cr_expect_eq(th_items(&r), 12, "6 epochs from each of 2 ranks: %s", r.body);
    th_free(&r);
    /* The torch it ran is the image's: not the host's file (if the host
     * has one at all), and the job recorded the image's digest. */
    th_put_text(&d, tok, "ws", "which.py",
                "import os, torch\n"
                "st = os.stat(torch.__file__)\n"
                "print('TORCH %s %s %d' % (torch.__file__, torch.__version__, st.st_ino))\n",
                NULL);
    long w = submit("{\"name\":\"which\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                    "\"code_path\":\"which.py\",\"epochs\":1,\"lr\":0.1,\"batch_size\":1,"
                    "\"worker_spec\":\"cpu-small\",\"worker_count\":1}");
    cr_assert(th_wait_state(&d, tok, w, "SUCCEEDED", 60000, seen), "%s", seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=0", w);
    r = th_get(&d, p, tok);
    char file[256] = "", version[64] = "";
    unsigned long ino = 0;
    const char *line = strstr(r.body, "TORCH ");
    cr_assert(line && sscanf(line, "TORCH %255s %63s %lu", file, version, &ino) == 3, "%s",
              r.body);
    th_free(&r);
    struct stat host;
    if (stat(file, &host) == 0)
        cr_expect_neq((unsigned long)host.st_ino, ino, "the job imported the host's %s", file);
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    r = th_get(&d, p, tok);
    cr_expect(!strncmp(th_str(&r, "image_digest"), "sha256:", 7), "%s", r.body);
    th_free(&r);
}

/* The same unmodified script, one rank on each of two hosts: torch's own
 * env:// rendezvous and gloo meet over the job's overlay. */
Test(agent, an_unmodified_torch_distributed_script_trains_across_two_hosts, .timeout = 600)
{
    th_registry_add_pytorch();
    two_hosts("2");
    digits_dataset();
    put_source_file("cli/examples/mnist/train.py", "ddp_train.py");
    long id = submit("{\"name\":\"ddp2\",\"image\":\"pytorch\",\"datasets\":[\"digits\"],"
                     "\"workspace\":\"ws\",\"code_path\":\"ddp_train.py\",\"epochs\":4,"
                     "\"lr\":0.5,\"batch_size\":32,\"worker_spec\":\"cpu-small\","
                     "\"worker_count\":2,\"workers_per_node\":1,"
                     "\"env\":{\"OMP_NUM_THREADS\":\"1\"}}");
    th_resp r = succeeded_log(id, 400000);
    double first = -1, last = -1;
    ddp_losses(&r, &first, &last);
    cr_expect(first > 0 && last >= 0, "no loss lines in the log");
    cr_expect_lt(last, first, "the loss went from %.4f to %.4f", first, last);
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    r = th_get(&d, p, tok);
    const cJSON *items = cJSON_GetObjectItem(r.json, "items");
    cr_expect_neq(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 0), "node_id")->valuedouble,
                  cJSON_GetObjectItem(cJSON_GetArrayItem(items, 1), "node_id")->valuedouble,
                  "both ranks on one host");
    th_free(&r);
}

/* cohort-worker as a job's program: the agent's rank environment is all it
 * needs (a native job whose program execs it). */
Test(agent, cohort_worker_trains_as_a_two_rank_job, .timeout = 180)
{
    char p[160];
    platform(NULL);
    agents(1, "8");
    synth_dataset(2000, 500);
    th_resp r;
    /* cohort-worker from an image that holds it (and its libraries), not
     * from the host */
    trainer_image();
    long id = submit("{\"name\":\"cw\",\"image\":\"trainer\",\"datasets\":[\"synth\"],"
                     "\"workspace\":\"ws\",\"code_path\":\"train.sh\",\"epochs\":4,"
                     "\"lr\":0.05,\"batch_size\":32,\"worker_spec\":\"cpu-small\","
                     "\"worker_count\":2}");
    r = succeeded_log(id, 150000);
    /* two containers of one job on one node: their network namespace is
     * one, and they reduce through shared memory */
    cr_expect_not_null(strstr(r.body, "2 ranks over shm"), "%s", r.body);
    const char *done = strstr(r.body, "epoch 4 done");
    cr_assert_not_null(done, "%s", r.body);
    const char *acc = strstr(done, "accuracy ");
    cr_assert_not_null(acc);
    cr_expect_gt(atof(acc + 9), 90.0, "%s", r.body);
    th_free(&r);
    /* its COHORT_METRIC lines became the job's metrics: rank 0's only */
    snprintf(p, sizeof p, "/v1/jobs/%ld/metrics", id);
    r = th_get(&d, p, tok);
    cr_expect_geq(th_items(&r), 4, "%s", r.body);
    cr_expect_not_null(strstr(r.body, "accuracy"), "%s", r.body);
    th_free(&r);
    /* and the checkpoint of the last epoch is in the workspace */
    r = th_get(&d, "/v1/workspaces/ws/files?prefix=checkpoints", tok);
    cr_expect_not_null(strstr(r.body, "epoch-000004.ckpt"), "%s", r.body);
    th_free(&r);
}

/* The launch spec a worker of job id was given (the agent's spec.json), once
 * its shim has written it: parsed, the caller deletes it. */
static cJSON *worker_spec_json(long job, int index)
{
    char p[128], path[700];
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", job);
    th_resp r = th_get(&d, p, tok);
    const cJSON *w = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), index);
    cr_assert_not_null(w, "no worker %d: %s", index, r.body);
    snprintf(path, sizeof path, "%s/workers/%ld/spec.json", ag[0].dir,
             (long)cJSON_GetObjectItem(w, "id")->valuedouble);
    th_free(&r);
    static char text[65536];
    for (int i = 0; i < 100 && th_read_text(path, text, sizeof text) != 0; i++)
        usleep(50000);
    cJSON *spec = cJSON_Parse(text);
    cr_assert_not_null(spec, "%s: %s", path, text);
    return spec;
}

/* A stranger on the node (another tenant's job shares its network today)
 * reaches a running cohort-worker job's rendezvous store on MASTER_PORT:
 * without the attempt's secret, or with a wrong one, it reads, forges and
 * counts nothing, and the job trains on to its accuracy.  Both ranks were
 * given the same secret. */
Test(agent, a_stranger_cannot_use_a_jobs_rendezvous_store, .timeout = 180)
{
    char seen[16], err[256];
    platform(NULL);
    /* the node's network, as jobs over several nodes have it today (a job on
     * one node has a network of its own, which no stranger reaches) */
    const char *extra[] = {"--cpus", "8", "--memory-mb", "65536", "--port-range", "31000-31099",
                           "--network", "host", NULL};
    th_agent_start(&ag[0], &d, "n1", extra);
    nagents = 1;
    synth_dataset(2000, 500);
    trainer_image();
    /* rank 1 comes late: rank 0's store waits for it, and the stranger
     * comes meanwhile */
    th_put_text(&d, tok, "ws", "late.sh",
                "#!/bin/sh\n[ \"$RANK\" = 1 ] && sleep 6\n"
                "exec cohort-worker train --log-every 10 \"$@\"\n",
                "755");
    long id = submit("{\"name\":\"victim\",\"image\":\"trainer\",\"datasets\":[\"synth\"],"
                     "\"workspace\":\"ws\",\"code_path\":\"late.sh\",\"epochs\":4,"
                     "\"lr\":0.05,\"batch_size\":32,\"worker_spec\":\"cpu-small\","
                     "\"worker_count\":2}");
    if (!th_wait_state(&d, tok, id, "RUNNING", 60000, seen)) {
        th_resp l = rank_log(id, 1);
        cr_assert_fail("the job is %s; rank 1 printed:\n%s", seen, l.body);
    }
    char secret[2][128] = {"", ""}, addr[128] = "";
    int port = 0;
    for (int i = 0; i < 2; i++) {
        cJSON *spec = worker_spec_json(id, i);
        const cJSON *env = cJSON_GetObjectItem(spec, "env");
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(env, "COHORT_RDZV_SECRET"));
        const char *mp = cJSON_GetStringValue(cJSON_GetObjectItem(env, "MASTER_PORT"));
        const char *ma = cJSON_GetStringValue(cJSON_GetObjectItem(env, "MASTER_ADDR"));
        cr_assert(s && mp && ma, "no secret, port or address in the launch spec");
        snprintf(secret[i], sizeof secret[i], "%s", s);
        snprintf(addr, sizeof addr, "%s", ma);
        port = atoi(mp);
        cJSON_Delete(spec);
    }
    cr_expect_eq(strlen(secret[0]), 64, "the secret is '%s'", secret[0]);
    cr_expect_str_eq(secret[0], secret[1], "the ranks were given different secrets");

    comm_store *none, *wrong;
    cr_assert_eq(comm_store_connect(addr, port, 20000, &none, err, sizeof err), 0, "%s", err);
    int64_t r;
    cr_expect_eq(comm_store_set(none, "stranger", "6.6.6.6:1", 9), -1, "wrote without the secret");
    cr_expect(strstr(comm_store_errmsg(none), "closed the connection") != NULL, "%s",
              comm_store_errmsg(none));
    cr_assert_eq(comm_store_connect(addr, port, 2000, &wrong, err, sizeof err), 0, "%s", err);
    cr_expect_eq(comm_store_auth(wrong, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
                 -1, "a wrong secret was taken");
    cr_expect_eq(comm_store_add(wrong, "barrier", 1, &r), -1);
    comm_store_close(none);
    comm_store_close(wrong);
    snprintf(err, sizeof err, "/v1/jobs/%ld", id);
    th_resp jr = th_get(&d, err, tok);
    cr_expect_str_eq(th_str(&jr, "state"), "RUNNING", "the attack came after the job's end");
    th_free(&jr);

    th_resp lr = succeeded_log(id, 150000);
    const char *done = strstr(lr.body, "epoch 4 done");
    const char *acc = done ? strstr(done, "accuracy ") : NULL;
    cr_expect(acc && atof(acc + 9) > 90.0, "%s", lr.body);
    th_free(&lr);
}

Test(agent, backfill_only_what_ends_before_the_blocked_head_starts)
{
    platform(NULL);
    agents(1, "4");
    th_put_text(&d, tok, "ws", "s3.sh", "#!/bin/sh\nsleep 3\n", "755");
    th_put_text(&d, tok, "ws", "s1.sh", "#!/bin/sh\nsleep 1\n", "755");
    const char *fmt = "{\"name\":\"%s\",\"image\":\"native\",\"workspace\":\"ws\","
                      "\"code_path\":\"%s\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                      "\"worker_spec\":\"cpu-small\",\"worker_count\":%d,"
                      "\"max_runtime_seconds\":%d}";
    char body[512], seen[16], p[64];
    snprintf(body, sizeof body, fmt, "a", "s3.sh", 3, 6);
    long a = submit(body);
    cr_assert(th_wait_state(&d, tok, a, "RUNNING", 20000, seen), "a is %s", seen);
    snprintf(body, sizeof body, fmt, "head", "s1.sh", 4, 60); /* needs the whole node */
    long head = submit(body);
    snprintf(body, sizeof body, fmt, "short", "s1.sh", 1, 2); /* ends before head can start */
    long c = submit(body);
    snprintf(body, sizeof body, fmt, "long", "s1.sh", 1, 30); /* would outlast a's bound */
    long dd = submit(body);
    cr_expect(th_wait_state(&d, tok, c, "SUCCEEDED", 10000, seen), "the short job is %s", seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld", head);
    th_resp r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "state"), "PENDING", "the head started while a ran");
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld", dd);
    r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "state"), "PENDING", "a job that outlasts the head's reservation"
                                                     " was backfilled");
    cr_expect(strstr(th_str(&r, "reason"), "waiting behind job") != NULL, "reason: %s",
              th_str(&r, "reason"));
    th_free(&r);
    /* When a ends, the head runs first; the long job after it. */
    cr_expect(th_wait_state(&d, tok, head, "SUCCEEDED", 20000, seen), "the head is %s", seen);
    cr_expect(th_wait_state(&d, tok, dd, "SUCCEEDED", 20000, seen), "the long job is %s", seen);
    th_resp rh, rd;
    snprintf(p, sizeof p, "/v1/jobs/%ld", head);
    rh = th_get(&d, p, tok);
    snprintf(p, sizeof p, "/v1/jobs/%ld", dd);
    rd = th_get(&d, p, tok);
    cr_expect(strcmp(th_str(&rh, "started_at"), th_str(&rd, "started_at")) <= 0,
              "the long job passed the head");
    snprintf(p, sizeof p, "/v1/jobs/%ld", c);
    th_resp rc = th_get(&d, p, tok);
    cr_expect(strcmp(th_str(&rc, "started_at"), th_str(&rh, "started_at")) < 0,
              "the short job was not backfilled: it started %s, the head %s",
              th_str(&rc, "started_at"), th_str(&rh, "started_at"));
    th_free(&rc);
    th_free(&rh);
    th_free(&rd);
}

Test(agent, a_drained_node_takes_no_new_workers)
{
    platform(NULL);
    agents(1, "4");
    th_put_text(&d, tok, "ws", "q.sh", "#!/bin/sh\nexit 0\n", "755");
    th_resp r = th_post(&d, "/v1/nodes/1/drain", TH_ADMIN, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r.json, "drained")));
    th_free(&r);
    long id = submit_sh("q", "q.sh", NULL, 1, NULL);
    usleep(1500000);
    char p[64], seen[16];
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "state"), "PENDING", "placed on a drained node");
    th_free(&r);
    th_expect(th_post(&d, "/v1/nodes/1/undrain", TH_ADMIN, NULL), 200);
    cr_expect(th_wait_state(&d, tok, id, "SUCCEEDED", 20000, seen), "after undrain: %s", seen);
    /* Only the platform admin sees or drains nodes. */
    th_expect(th_post(&d, "/v1/nodes/1/drain", tok, NULL), 403);
}

Test(agent, dataset_submounts_are_read_only_too)
{
    platform(NULL);
    agents(1, "4");
    /* A mount inside the dataset's directory on the host (as storage often is). */
    long ds = th_id(&d, "/v1/datasets/ds", tok);
    long tenant = th_id(&d, "/v1/tenants/acme", TH_ADMIN);
    char src[300], dst[400], cmd[2000];
    snprintf(src, sizeof src, "%s/elsewhere", d.dir);
    snprintf(dst, sizeof dst, "%s/volumes/%ld/datasets/%ld/mnt", d.dir, tenant, ds);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s' && echo inner > '%s/f' && mount --bind '%s' '%s'",
             src, dst, src, src, dst);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    th_put_text(&d, tok, "ws", "sub.sh",
                "#!/bin/sh\n"
                "cat \"$DATASETS_PATH/ds/mnt/f\" > \"$WORKSPACE/inner\"\n"
                "touch \"$DATASETS_PATH/ds/mnt/new\" 2> \"$WORKSPACE/err\"\n"
                "exit 0\n",
                "755");
    long id = submit("{\"name\":\"sub\",\"image\":\"native\",\"datasets\":[\"ds\"],"
                     "\"workspace\":\"ws\",\"code_path\":\"sub.sh\",\"epochs\":1,\"lr\":0.1,"
                     "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}");
    char seen[16];
    int ok = th_wait_state(&d, tok, id, "SUCCEEDED", 20000, seen);
    snprintf(cmd, sizeof cmd, "umount '%s'", dst);
    cr_expect_eq(system(cmd), 0);
    cr_assert(ok, "job ended %s", seen);
    char *t = fetch("inner");
    cr_expect_str_eq(t, "inner\n", "the submount was not visible");
    free(t);
    t = fetch("err");
    cr_expect(strstr(t, "Read-only file system") != NULL, "a write into a submount gave: '%s'", t);
    free(t);
    struct stat sb;
    snprintf(cmd, sizeof cmd, "%s/new", src);
    cr_expect(stat(cmd, &sb) != 0, "the write went through to the host");
}
