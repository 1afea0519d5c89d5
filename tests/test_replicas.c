/*
 * Several cohortd on one PostgreSQL database (this suite runs under
 * tests/with-postgres and is skipped elsewhere): two replicas share the
 * database and the data dir, each agent is given both and starts on a
 * different one.  While jobs are submitted to both, placed and running,
 * the replica that runs the scheduler is killed with SIGKILL: the other
 * takes the lead within a bound, every acknowledged job is there and
 * ends, no gang is placed twice, no rank runs twice, and the ledger
 * equals the workers' own times x price.  The killed one, started again,
 * rejoins as a follower.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

/* The lead moves at the survivor's next tick (1 s) once the server has
 * dropped the dead one's session; this bounds it with room for a loaded
 * machine. */
#define TAKEOVER_BOUND_MS 5000
#define MAX_JOBS 200
#define PRICE 3600 /* 1 a second per worker */

static th_daemon rep[2];
static th_agent ag[2];
static char tok[80];
static char listen_at[2][32];

static void teardown(void)
{
    for (int i = 0; i < 2; i++)
        th_agent_cleanup(&ag[i]);
    th_stop(&rep[1]);
    th_stop(&rep[0]);
    th_cleanup(&rep[0]); /* the dir both share */
}

TestSuite(replicas, .fini = teardown, .timeout = 240);

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* cohort_scheduler_leader of replica d: 1, 0, or -1 when it did not answer. */
static int leader(th_daemon *d)
{
    th_resp r = th_get(d, "/metrics", TH_ADMIN);
    const char *m = r.status == 200 && r.body ? strstr(r.body, "\ncohort_scheduler_leader ") : NULL;
    int v = m ? atoi(m + strlen("\ncohort_scheduler_leader ")) : -1;
    th_free(&r);
    return v;
}

static int wait_leader(th_daemon *d, int want, int ms)
{
    for (int64_t end = mono_ms() + ms; mono_ms() < end; usleep(50000))
        if (leader(d) == want)
            return 1;
    return 0;
}

/* Replica 0 in a fresh data dir (and database), 1 beside it; again: the
 * same replica started once more. */
static void start_replica(int i, int again)
{
    const char *args[] = {"--listen", listen_at[i], NULL};
    if (again)
        th_restart(&rep[i], args);
    else if (i == 0)
        th_start(&rep[0], args);
    else
        th_start_in(&rep[1], rep[0].dir, args);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

struct submitter {
    pthread_t thread;
    volatile int stop;
    int n;                 /* jobs acknowledged */
    long ids[MAX_JOBS];
    int tries, refused;
};

/* Submits a job every 80 ms, to each replica in turn; keeps the ids of
 * those answered 201.  A job's only argument is its number, which its
 * ranks write down. */
static void *submit_main(void *arg)
{
    struct submitter *s = arg;
    for (int k = 0; !s->stop && s->n < MAX_JOBS; k++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"name\":\"j%d\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"run.sh\","
                 "\"args\":[\"%d\"],\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                 "\"worker_spec\":\"meter\",\"worker_count\":2}",
                 k, k);
        th_resp r = th_post(&rep[k % 2], "/v1/jobs", tok, body);
        s->tries++;
        if (r.status == 201)
            s->ids[s->n++] = (long)th_num(&r, "id");
        else
            s->refused++;
        th_free(&r);
        usleep(80000);
    }
    return NULL;
}

/* What job id should cost from its workers' records: per rank, whole
 * seconds rounded up, times the price per hour / 3600, rounded half up. */
static long long expected_charge(th_daemon *d, long id)
{
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", id);
    cJSON *w = th_get_json(d, p, tok);
    long long sum = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(w, "items"))
    {
        const cJSON *s = cJSON_GetObjectItem(it, "started_at");
        const cJSON *f = cJSON_GetObjectItem(it, "finished_at");
        cr_assert(cJSON_IsString(s) && cJSON_IsString(f), "job %ld: a rank did not run", id);
        long long el = th_ms_of(f->valuestring) - th_ms_of(s->valuestring);
        long long secs = el > 0 ? (el + 999) / 1000 : 0;
        sum += (secs * PRICE + 1800) / 3600;
    }
    cJSON_Delete(w);
    return sum;
}

static long long db_ll(const char *sql)
{
    char out[128];
    th_db_query(&rep[1], sql, out, sizeof out);
    return atoll(out);
}

/* Two replicas, replica 0 leading; a tenant and its workspace. */
static void pair(void)
{
    if (!th_pg())
        cr_skip_test("several cohortd need PostgreSQL: run under tests/with-postgres");
    for (int i = 0; i < 2; i++)
        snprintf(listen_at[i], sizeof listen_at[i], "127.0.0.1:%d", th_free_port());
    start_replica(0, 0);
    cr_assert(wait_leader(&rep[0], 1, 5000), "the first cohortd does not lead");
    start_replica(1, 0);
    th_user(&rep[0], "acme", "alice", "member", tok);
    th_must(th_post(&rep[1], "/v1/workspaces", tok, "{\"name\":\"ws\"}"), 201);
}

Test(replicas, the_leader_killed_mid_load_loses_nothing_and_places_nothing_twice)
{
    pair();
    if (!th_can_sandbox())
        cr_skip_test("needs root for the agents");
    cr_expect_eq(leader(&rep[1]), 0, "two cohortd lead at once");
    th_put_text(&rep[1], tok, "ws", "run.sh",
                "#!/bin/sh\nfor a in \"$@\"; do n=$a; done\n" /* the job's argument comes last */
                "echo \"$n $RANK\" >> \"$WORKSPACE/runs.log\"\nsleep 1\n",
                "755");
    th_must(th_post(&rep[0], "/v1/worker-specs", TH_ADMIN,
                    "{\"name\":\"meter\",\"cpus\":1,\"memory_mb\":256,\"price_per_hour\":3600,"
                    "\"currency\":\"USD\"}"),
            201);

    /* Each agent knows both and starts on a different one. */
    char servers[2][200];
    snprintf(servers[0], sizeof servers[0], "http://%s,http://%s", listen_at[0], listen_at[1]);
    snprintf(servers[1], sizeof servers[1], "http://%s,http://%s", listen_at[1], listen_at[0]);
    static const char *const ports[] = {"33000-33099", "33100-33199"};
    for (int i = 0; i < 2; i++) {
        char name[8];
        snprintf(name, sizeof name, "r%d", i);
        const char *extra[] = {"--runtime", "host", "--cpus", "4", "--memory-mb", "8192",
                               "--port-range", ports[i], NULL};
        th_agent_start_on(&ag[i], &rep[0], servers[i], name, extra);
    }

    static struct submitter sub;
    memset(&sub, 0, sizeof sub);
    cr_assert_eq(pthread_create(&sub.thread, NULL, submit_main, &sub), 0);
    usleep(3000000);
    int before_kill = sub.n;
    th_kill9(&rep[0]);
    int64_t killed = mono_ms();
    cr_assert(wait_leader(&rep[1], 1, TAKEOVER_BOUND_MS),
              "the survivor did not take the lead within %d ms", TAKEOVER_BOUND_MS);
    int64_t took = mono_ms() - killed;
    usleep(2500000);
    sub.stop = 1;
    pthread_join(sub.thread, NULL);
    cr_log_info("lead taken over in %lld ms; %d jobs acknowledged (%d before the kill), %d of %d "
                "submits refused",
                (long long)took, sub.n, before_kill, sub.refused, sub.tries);
    cr_assert_gt(before_kill, 10, "too few jobs before the kill to mean anything");
    cr_assert_gt(sub.n, before_kill + 5, "too few jobs after the kill");

    /* Every acknowledged job is there and ends well, through the survivor. */
    for (int i = 0; i < sub.n; i++) {
        char seen[16];
        cr_assert(th_wait_state(&rep[1], tok, sub.ids[i], "SUCCEEDED", 60000, seen),
                  "acknowledged job %ld is %s", sub.ids[i], seen);
    }
    /* No gang placed twice: one attempt each, with exactly its two ranks. */
    long long jobs = db_ll("SELECT count(*) FROM jobs");
    cr_expect_eq(jobs, sub.n, "jobs in the database: %lld, acknowledged: %d", jobs, sub.n);
    cr_expect_eq(db_ll("SELECT count(*) FROM jobs WHERE attempt <> 1"), 0);
    cr_expect_eq(db_ll("SELECT count(*) FROM workers"), 2 * jobs);
    cr_expect_eq(db_ll("SELECT count(*) FROM (SELECT job_id FROM workers GROUP BY job_id"
                       " HAVING count(*) <> 2) x"),
                 0);

    /* No rank ran twice: each job number and rank wrote one line. */
    char *log = th_get_body(&rep[1], "/v1/workspaces/ws/files/runs.log", tok);
    cr_assert(log, "no runs.log");
    char *line[2 * MAX_JOBS + 8];
    int lines = 0;
    for (char *l = log, *nl; *l && lines < (int)(sizeof line / sizeof *line); l = nl + 1) {
        nl = strchr(l, '\n');
        cr_assert(nl, "a line of runs.log is cut");
        *nl = '\0';
        line[lines++] = l;
    }
    qsort(line, (size_t)lines, sizeof *line, cmp_str);
    for (int i = 1; i < lines; i++)
        cr_expect_str_neq(line[i], line[i - 1], "job and rank '%s' ran twice", line[i]);
    cr_expect_eq(lines, 2 * sub.n, "runs.log has %d lines for %d jobs of 2 ranks", lines, sub.n);
    free(log);

    /* The ledger equals the workers' own records times the price. */
    long long want = 0;
    for (int i = 0; i < sub.n; i++)
        want += expected_charge(&rep[1], sub.ids[i]);
    long long got = 0;
    for (int i = 0; i < 100; i++) {
        got = db_ll("SELECT coalesce(sum(amount), 0) FROM ledger WHERE kind = 'charge'");
        if (got == want)
            break;
        usleep(100000);
    }
    cr_expect_eq(got, want, "ledger %lld, the workers' records say %lld", got, want);
    cr_expect_eq(db_ll("SELECT count(*) FROM ledger WHERE kind = 'charge'"), 2 * sub.n);

    /* The agent that started on the killed one moved to the survivor. */
    char logp[420], agentlog[65536], want_move[96];
    snprintf(logp, sizeof logp, "%s.log", ag[0].dir);
    th_read_text(logp, agentlog, sizeof agentlog);
    snprintf(want_move, sizeof want_move, "now using http://%s", listen_at[1]);
    cr_expect(strstr(agentlog, want_move), "agent r0 never moved to the survivor:\n%s", agentlog);

    /* The killed one comes back as a follower and serves the API. */
    start_replica(0, 1);
    usleep(1500000);
    cr_expect_eq(leader(&rep[0]), 0, "the restarted cohortd took the lead from a live one");
    cr_expect_eq(leader(&rep[1]), 1);
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld", sub.ids[sub.n - 1]);
    th_resp r = th_get(&rep[0], p, tok);
    cr_expect_eq(r.status, 200, "%s", r.body);
    th_free(&r);
}

/* With nothing submitted to wake it, the follower takes the lead at its
 * next tick once the leader's session is gone. */
Test(replicas, an_idle_leader_killed_is_replaced_within_the_bound)
{
    pair();
    usleep(1500000);
    cr_expect_eq(leader(&rep[1]), 0);
    th_kill9(&rep[0]);
    int64_t killed = mono_ms();
    cr_assert(wait_leader(&rep[1], 1, TAKEOVER_BOUND_MS),
              "no lead within %d ms of the leader's death", TAKEOVER_BOUND_MS);
    cr_log_info("idle takeover in %lld ms", (long long)(mono_ms() - killed));
}

/* Starts the pair and one agent (two CPUs, the host runtime, ports in
 * ports) named name that talks to replica 1 only, or to both (0 first);
 * uploads run.sh, which sleeps 30 s. */
static void pair_and_agent(int both, const char *name, const char *ports)
{
    char servers[96];
    pair();
    if (!th_can_sandbox())
        cr_skip_test("needs root for the agent");
    th_put_text(&rep[1], tok, "ws", "run.sh", "#!/bin/sh\nsleep 30\n", "755");
    snprintf(servers, sizeof servers, "%s%s%shttp://%s", both ? "http://" : "",
             both ? listen_at[0] : "", both ? "," : "", listen_at[1]);
    const char *extra[] = {"--runtime", "host", "--cpus", "2", "--port-range", ports, NULL};
    th_agent_start_on(&ag[0], &rep[1], servers, name, extra);
}

/* Submits run.sh as workers one-CPU ranks through replica i: the job's id. */
static long submit_run(int i, int workers)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\":\"w\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"run.sh\","
             "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\","
             "\"worker_count\":%d}",
             workers);
    return th_submit(&rep[i], tok, body);
}

/*
 * An agent long-polling the follower only: the leader's placement wakes it
 * through the database's notification, long before its 30 s poll ends.
 */
Test(replicas, a_placement_by_the_leader_wakes_an_agent_waiting_on_the_other)
{
    pair_and_agent(0, "only-b", "33200-33299");
    usleep(1500000); /* its poll is parked on replica 1 */
    int64_t t0 = mono_ms();
    long id = submit_run(0, 1);
    char seen[16];
    cr_assert(th_wait_state(&rep[1], tok, id, "RUNNING", 10000, seen), "job is %s", seen);
    int64_t ms = mono_ms() - t0;
    cr_log_info("submitted to the leader, running on the follower's agent in %lld ms",
                (long long)ms);
    cr_expect_lt(ms, 5000, "the agent was not woken: %lld ms", (long long)ms);
}

/* The queue position of pending job id on replica i, 0 when it has none. */
static long position_on(int i, long id)
{
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    cJSON *j = th_get_json(&rep[i], p, tok);
    const cJSON *pos = cJSON_GetObjectItem(j, "position");
    long v = cJSON_IsNumber(pos) ? (long)pos->valuedouble : 0;
    cJSON_Delete(j);
    return v;
}

/* A follower plans on its own snapshot and writes nothing, so pending jobs
 * have the same queue positions through either replica. */
Test(replicas, a_follower_gives_pending_jobs_the_leaders_queue_positions)
{
    pair_and_agent(1, "n1", "33300-33399");
    long id[3];
    for (int k = 0; k < 3;
         k++) /* two one-CPU workers: the node's two CPUs hold one job at a time */
        id[k] = submit_run(k % 2, 2);
    char seen[16];
    cr_assert(th_wait_state(&rep[0], tok, id[0], "RUNNING", 15000, seen), "job is %s", seen);
    long pos[2][2] = {{0}};
    int64_t t0 = mono_ms();
    while (mono_ms() - t0 < 5000) {
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 2; k++)
                pos[i][k] = position_on(i, id[k + 1]);
        if (pos[1][0] == 1 && pos[1][1] == 2 && pos[0][0] == 1 && pos[0][1] == 2)
            break;
        usleep(100000);
    }
    cr_expect(leader(&rep[0]) && !leader(&rep[1]), "replica 0 no longer leads");
    cr_expect(pos[0][0] == 1 && pos[0][1] == 2, "leader: positions %ld, %ld", pos[0][0],
              pos[0][1]);
    cr_expect(pos[1][0] == 1 && pos[1][1] == 2, "follower: positions %ld, %ld", pos[1][0],
              pos[1][1]);
}

/* A token revoked through one replica is refused by the other at once,
 * though the other had it in its cache (which keeps entries 10 s). */
Test(replicas, a_token_revoked_on_one_is_refused_by_the_other_at_once)
{
    pair();
    th_must(th_get(&rep[1], "/v1/whoami", tok), 200); /* now in replica 1's cache */
    char p[80];
    cJSON *me = th_get_json(&rep[0], "/v1/whoami", tok);
    long uid = (long)cJSON_GetObjectItem(me, "user_id")->valuedouble;
    cJSON_Delete(me);
    snprintf(p, sizeof p, "/v1/users/%ld/tokens", uid);
    cJSON *list = th_get_json(&rep[0], p, TH_ADMIN);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(list, "items"), 0);
    cr_assert(first, "no token listed");
    snprintf(p, sizeof p, "/v1/tokens/%ld", (long)cJSON_GetObjectItem(first, "id")->valuedouble);
    cJSON_Delete(list);
    th_must(th_req(&rep[0], "DELETE", p, TH_ADMIN, NULL, NULL, 0, NULL), 204);
    int64_t t0 = mono_ms();
    long status = 200;
    while (status == 200 && mono_ms() - t0 < 3000) {
        th_resp r = th_get(&rep[1], "/v1/whoami", tok);
        status = r.status;
        th_free(&r);
        if (status == 200)
            usleep(20000);
    }
    cr_expect_eq(status, 401, "replica 1 still takes the revoked token");
    cr_log_info("revoked on one, refused by the other after %lld ms", (long long)(mono_ms() - t0));
}

/* Once the database takes connections again, every replica writes within
 * this: a broken connection is tried again each second (store_pg.c),
 * with room for a loaded machine. */
#define RECOVERY_BOUND_MS 5000

/* Runs sql on the server's maintenance database, as the superuser. */
static void on_server(const char *sql, char *out, size_t n)
{
    char target[300];
    snprintf(target, sizeof target, "postgresql:///postgres?host=%s&user=cohort",
             getenv("COHORT_TEST_PG"));
    th_store_query(target, sql, out, n);
}

/* Submits a job named name through replica i: the answer's status, and
 * its error code into code (64 bytes) when it has one. */
static long submit_named(int i, const char *name, char *code)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"run.sh\","
             "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\","
             "\"worker_count\":1}",
             name);
    th_resp r = th_post(&rep[i], "/v1/jobs", tok, body);
    long st = r.status;
    snprintf(code, 64, "%s", th_err_code(&r) ? th_err_code(&r) : "");
    th_free(&r);
    return st;
}

/*
 * The database goes away under both replicas (every session of theirs
 * ended, new ones refused for 2 s: a server restart or a failover as the
 * replicas see it).  Meanwhile requests get 503 database_unavailable and
 * change nothing.  Once it is back, each replica's writer, readers and
 * scheduler lock come back by themselves, within the bound, and nothing
 * acknowledged before is lost.
 */
Test(replicas, a_database_outage_answers_503_and_every_connection_comes_back)
{
    pair();
    th_put_text(&rep[1], tok, "ws", "run.sh", "#!/bin/sh\nsleep 30\n", "755");
    long before = submit_run(0, 1);
    char db[64], sql[256], out[256], code[64];
    const char *name = strstr(rep[0].store, ":///");
    cr_assert(name, "not a PostgreSQL store: %s", rep[0].store);
    snprintf(db, sizeof db, "%.*s", (int)strcspn(name + 4, "?"), name + 4);

    snprintf(sql, sizeof sql,
             "ALTER DATABASE %s ALLOW_CONNECTIONS false; SELECT count(pg_terminate_backend(pid))"
             " > 0 FROM pg_stat_activity WHERE datname = '%s'",
             db, db);
    on_server(sql, out, sizeof out);
    cr_assert_str_eq(out, "t\n", "no session of the replicas ended: %s", out);
    for (int k = 0; k < 3; k++) { /* at once, and past a failed try at a new session */
        for (int i = 0; i < 2; i++) {
            long st = submit_named(i, "during", code);
            cr_expect_eq(st, 503, "replica %d took a create with its database away: %ld", i, st);
            cr_expect_str_eq(code, "database_unavailable");
            th_resp r = th_get(&rep[i], "/v1/jobs", tok);
            cr_expect_eq(r.status, 503, "replica %d listed jobs with its database away", i);
            th_free(&r);
        }
        usleep(700000);
    }
    snprintf(sql, sizeof sql, "ALTER DATABASE %s ALLOW_CONNECTIONS true", db);
    on_server(sql, out, sizeof out);
    int64_t back = mono_ms();
    for (int i = 0; i < 2; i++) {
        long st = 0;
        while (st != 201 && mono_ms() - back < RECOVERY_BOUND_MS) {
            if ((st = submit_named(i, "after", code)) != 201)
                usleep(50000);
        }
        cr_assert_eq(st, 201, "replica %d writes nothing %d ms after the database came back", i,
                     RECOVERY_BOUND_MS);
        cr_log_info("replica %d writes again %lld ms after the database came back", i,
                    (long long)(mono_ms() - back));
    }
    /* Every request thread's reader, on both, within the same bound: a
     * reader that last tried for a new session less than a second before
     * the database came back tries again only when that second is up
     * (store_pg), so a GET right after the creates may still get 503. */
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%ld", before);
    for (int k = 0; k < 20; k++) {
        long st = 0;
        while (st != 200 && mono_ms() - back < RECOVERY_BOUND_MS) {
            th_resp g = th_get(&rep[k % 2], path, tok);
            if ((st = g.status) != 200)
                usleep(50000);
            th_free(&g);
        }
        cr_assert_eq(st, 200, "replica %d reads nothing %d ms after the database came back",
                     k % 2, RECOVERY_BOUND_MS);
    }
    th_resp r = th_get(&rep[1], "/v1/jobs?name=after", tok);
    cr_expect_eq(th_items(&r), 2, "%s", r.body);
    th_free(&r);
    r = th_get(&rep[0], "/v1/jobs?name=during", tok);
    cr_expect_eq(th_items(&r), 0, "a create answered 503 was stored: %s", r.body);
    th_free(&r);
    /* The scheduler's lock: one of them leads again. */
    int leaders = -1;
    for (int64_t end = mono_ms() + TAKEOVER_BOUND_MS; mono_ms() < end; usleep(100000)) {
        int a = leader(&rep[0]), b = leader(&rep[1]);
        if ((leaders = a < 0 || b < 0 ? -1 : a + b) == 1)
            break;
    }
    cr_expect_eq(leaders, 1, "after the outage %d replicas lead", leaders);
}
