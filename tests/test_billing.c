/*
 * Billing against a real cohortd and real agents: the ledger equals what
 * the workers' own start and end records say (through successes, retried
 * failures, cancels, timeouts, a kill -9 of cohortd and an agent restart),
 * a budget race admits exactly one job, budget exhaustion stops a job with
 * SIGTERM and a top-up lets its retry resume, prices are taken at admission,
 * and the numbers (usage, invoices, CSV, /metrics) agree with the ledger
 * while another tenant sees none of them.  Needs root (namespaces).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "storage/store_bill.h"
#include "tests/harness.h"

static th_daemon d;
static th_agent ag[2];
static int nagents;
static char tok[80];

static void teardown(void)
{
    for (int i = 0; i < nagents; i++)
        th_agent_cleanup(&ag[i]);
    nagents = 0;
    th_stop(&d);
    th_cleanup(&d);
}

TestSuite(billing, .fini = teardown, .timeout = 180);

/* 3600 per worker-hour is 1 per second; 1000 per hour makes rounding matter. */
#define METER_PRICE 3600
#define ODD_PRICE 1000

static void spec(const char *name, long price)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"cpus\":1,\"memory_mb\":256,\"price_per_hour\":%ld,"
             "\"currency\":\"USD\"}",
             name, price);
    th_resp r = th_post(&d, "/v1/worker-specs", TH_ADMIN, body);
    cr_assert_eq(r.status, 201, "spec: %s", r.body);
    th_free(&r);
}

/* cohortd with the two specs, and agents of cpus each: those need root
 * (mount and PID namespaces); a test without agents runs as any user,
 * metering, ledger, usage and holds through cohortd and its store. */
static void platform(const char *const *args, int agents, const char *cpus)
{
    if (agents > 0 && !th_can_sandbox())
        cr_skip_test("needs root to create mount and PID namespaces");
    th_start(&d, args);
    th_user(&d, "acme", "alice", "member", tok);
    th_must(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"ws\"}"), 201);
    spec("meter", METER_PRICE);
    spec("odd", ODD_PRICE);
    static const char *const names[] = {"b1", "b2"};
    static const char *const ports[] = {"32000-32099", "32100-32199"};
    for (int i = 0; i < agents; i++) {
        const char *extra[] = {"--cpus", cpus, "--memory-mb", "65536", "--port-range", ports[i],
                               "--stop-grace", "5", NULL};
        th_agent_start(&ag[i], &d, names[i], extra);
    }
    nagents = agents;
}

static long submit_as(const char *t, const char *name, const char *code, const char *spec_name,
                      int workers, const char *extra)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"%s\","
             "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"%s\","
             "\"worker_count\":%d%s%s}",
             name, code, spec_name, workers, extra ? "," : "", extra ? extra : "");
    return th_submit(&d, t, body);
}

static long submit(const char *name, const char *code, const char *spec_name, int workers,
                   const char *extra)
{
    return submit_as(tok, name, code, spec_name, workers, extra);
}

static cJSON *get_json(const char *t, const char *fmt, long a)
{
    char p[160];
    snprintf(p, sizeof p, fmt, a);
    return th_get_json(&d, p, t);
}

static cJSON *get_path(const char *t, const char *path)
{
    return th_get_json(&d, path, t);
}

static th_resp put_json(const char *path, const char *t, const char *json)
{
    return th_req(&d, "PUT", path, t, NULL, json, strlen(json), NULL);
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    cr_assert(cJSON_IsNumber(v), "no number %s", key);
    return v->valuedouble;
}

/* Waits until no worker of the job is assigned or running (at most 30 s). */
static void wait_workers_ended(long id)
{
    for (int i = 0; i < 300; i++) {
        cJSON *w = get_json(tok, "/v1/jobs/%ld/workers", id);
        char *s = cJSON_PrintUnformatted(w);
        int live = strstr(s, "\"running\"") || strstr(s, "\"assigned\"");
        free(s);
        cJSON_Delete(w);
        if (!live)
            return;
        usleep(100000);
    }
    cr_assert_fail("job %ld still has live workers", id);
}

/*
 * What the job should have been charged, from its workers' records alone:
 * per rank and attempt, whole seconds rounded up (at most max_runtime), times
 * the price per hour / 3600, rounded half up.  *ranks counts ranks that ran.
 */
static long long expected_charge(long id, long long price, long long cap, int *ranks)
{
    cJSON *w = get_json(tok, "/v1/jobs/%ld/workers", id);
    long long sum = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(w, "items"))
    {
        const cJSON *s = cJSON_GetObjectItem(it, "started_at");
        const cJSON *f = cJSON_GetObjectItem(it, "finished_at");
        if (!cJSON_IsString(s))
            continue;
        cr_assert(cJSON_IsString(f), "job %ld: a started rank has not ended", id);
        long long el = th_ms_of(f->valuestring) - th_ms_of(s->valuestring);
        long long secs = el > 0 ? (el + 999) / 1000 : 0;
        const cJSON *sig = cJSON_GetObjectItem(it, "signal"); /* SIGKILL: grace billed */
        long long c = cap > 0 && cJSON_IsNumber(sig) && sig->valuedouble == 9
                          ? cap + STORE_BILL_GRACE_S
                          : cap;
        if (c > 0 && secs > c)
            secs = c;
        sum += (secs * price + 1800) / 3600;
        if (secs > 0)
            (*ranks)++;
    }
    cJSON_Delete(w);
    return sum;
}

static long long db_ll(const char *sql)
{
    char out[128];
    th_db_query(&d, sql, out, sizeof out);
    return atoll(out);
}

static void wait_state(long id, const char *want, int ms)
{
    char seen[16];
    if (th_wait_state(&d, tok, id, want, ms, seen))
        return;
    cJSON *j = get_json(tok, "/v1/jobs/%ld", id);
    const cJSON *why = cJSON_GetObjectItem(j, "reason");
    cr_assert_fail("job %ld is %s, not %s (%s)", id, seen, want,
                   cJSON_IsString(why) ? why->valuestring : "no reason");
}

Test(billing, ledger_equals_the_workers_records_through_failures_cancels_timeouts_and_a_crash)
{
    /* A fixed port: the agents find cohortd again after its restart. */
    char listen[32];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", th_free_port());
    const char *args[] = {"--listen", listen, NULL};
    platform(args, 2, "4");
    th_put_text(&d, tok, "ws", "ok.sh", "#!/bin/sh\nsleep 1.5\n", "755");
    th_put_text(&d, tok, "ws", "flaky.sh",
                "#!/bin/sh\nif [ \"$RANK\" = 1 ]; then sleep 1; exit 3; fi\nexec sleep 60\n",
                "755");
    th_put_text(&d, tok, "ws", "long.sh", "#!/bin/sh\nexec sleep 60\n", "755");
    th_put_text(&d, tok, "ws", "steady.sh", "#!/bin/sh\nsleep 7\n", "755");

    long ok = submit("ok", "ok.sh", "meter", 2, NULL);
    long flaky = submit("flaky", "flaky.sh", "odd", 2, "\"max_retries\":1");
    long cancel = submit("cancelled", "long.sh", "meter", 2, NULL);
    long timeout = submit("timeout", "long.sh", "odd", 1, "\"max_runtime_seconds\":2");
    long steady = submit("steady", "steady.sh", "meter", 1, NULL);

    wait_state(cancel, "RUNNING", 20000);
    wait_state(steady, "RUNNING", 20000);
    /* cohortd dies hard and comes back; one agent restarts (and adopts its workers). */
    th_kill9(&d);
    usleep(500000);
    th_restart(&d, args);
    th_agent_kill9(&ag[0]);
    usleep(300000);
    th_agent_restart(&ag[0], &d, NULL);
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/cancel", cancel);
    th_resp r = th_post(&d, p, tok, NULL);
    cr_assert_eq(r.status, 200, "cancel: %s", r.body);
    th_free(&r);

    wait_state(ok, "SUCCEEDED", 30000);
    wait_state(flaky, "FAILED", 40000);
    wait_state(timeout, "FAILED", 30000);
    wait_state(steady, "SUCCEEDED", 40000);
    long ids[] = {ok, flaky, cancel, timeout, steady};
    long long prices[] = {METER_PRICE, ODD_PRICE, METER_PRICE, ODD_PRICE, METER_PRICE};
    long long caps[] = {0, 0, 0, 2, 0};
    long long want = 0;
    int ranks = 0;
    for (int i = 0; i < 5; i++) {
        wait_workers_ended(ids[i]);
        long long e = expected_charge(ids[i], prices[i], caps[i], &ranks);
        want += e;
        /* The job's own cost agrees, to the minor unit, and is all charged. */
        cJSON *c = get_json(tok, "/v1/jobs/%ld/cost", ids[i]);
        cr_expect_eq((long long)num(c, "total"), e, "job %ld: cost %g, expected %lld", ids[i],
                     num(c, "total"), e);
        cr_expect_eq(num(c, "total"), num(c, "charged"), "job %ld: not all charged", ids[i]);
        cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(c, "running")));
        cJSON_Delete(c);
    }
    cJSON *fj = get_json(tok, "/v1/jobs/%ld", flaky);
    cr_expect_eq(num(fj, "attempt"), 2, "the flaky job was not retried");
    cJSON_Delete(fj);
    cr_expect(want > 0);
    long long got = db_ll("SELECT coalesce(sum(amount), 0) FROM ledger WHERE kind = 'charge';");
    cr_expect_eq(got, want, "ledger %lld, workers' records say %lld", got, want);
    /* One entry per rank and attempt that ran: none twice, none lost. */
    cr_expect_eq(db_ll("SELECT count(*) FROM ledger WHERE kind = 'charge' AND seconds > 0;"),
                 ranks);
    cr_expect_eq(db_ll("SELECT count(*) FROM (SELECT job_id, attempt, rank FROM ledger"
                       " GROUP BY 1, 2, 3 HAVING count(*) > 1);"),
                 0);
    /* The balance is the ledger's sum (no credits: minus the charges). */
    cr_expect_eq(db_ll("SELECT balance FROM accounts a JOIN tenants t ON t.id = a.tenant_id"
                       " WHERE t.name = 'acme';"),
                 -want);
    /* The ledger refuses to be rewritten. */
    char out[256];
    th_db_query(&d, "UPDATE ledger SET amount = 0;", out, sizeof out);
    cr_expect_eq(db_ll("SELECT coalesce(sum(amount), 0) FROM ledger WHERE kind = 'charge';"),
                 want);
    /* Usage and the month's invoice say the same. */
    cJSON *u = get_path(tok, "/v1/usage?group_by=job");
    cr_expect_eq((long long)num(cJSON_GetObjectItem(u, "total"), "amount"), want);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(u, "items")), 5);
    cJSON_Delete(u);
}

/* ---- the budget race ---- */

struct racer {
    int i;
    long status;
};

static void *race(void *arg)
{
    struct racer *rc = arg;
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\":\"race-%d\",\"image\":\"native\",\"workspace\":\"ws\","
             "\"code_path\":\"long.sh\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
             "\"worker_spec\":\"meter\",\"worker_count\":1,\"max_runtime_seconds\":60}",
             rc->i);
    th_resp r = th_post(&d, "/v1/jobs", tok, body);
    rc->status = r.status;
    th_free(&r);
    return NULL;
}

static void balance_of(const char *t, long long *balance, long long *available)
{
    cJSON *q = get_path(t, "/v1/quota");
    const cJSON *m = cJSON_GetObjectItem(q, "money");
    *balance = (long long)num(m, "balance");
    const cJSON *a = cJSON_GetObjectItem(m, "available");
    *available = cJSON_IsNumber(a) ? (long long)a->valuedouble : -1;
    cJSON_Delete(q);
}

/*
 * A job stopped at its max_runtime_seconds that ignores SIGTERM runs through
 * its agent's stop grace (5 s here) until SIGKILL, and pays for it; one that
 * stops on SIGTERM pays max_runtime_seconds at most.
 */
Test(billing, a_job_that_ignores_sigterm_pays_its_stop_grace, .timeout = 90)
{
    platform(NULL, 1, "4");
    th_put_text(&d, tok, "ws", "deaf.sh",
                "#!/bin/sh\ntrap '' TERM\nwhile :; do sleep 1; done\n", "755");
    th_put_text(&d, tok, "ws", "long.sh", "#!/bin/sh\nexec sleep 60\n", "755");
    long deaf = submit("deaf", "deaf.sh", "meter", 1, "\"max_runtime_seconds\":2");
    long polite = submit("polite", "long.sh", "meter", 1, "\"max_runtime_seconds\":2");
    wait_state(deaf, "FAILED", 30000);
    wait_state(polite, "FAILED", 30000);
    long ids[] = {deaf, polite};
    for (int i = 0; i < 2; i++) {
        int ranks = 0;
        wait_workers_ended(ids[i]);
        long long e = expected_charge(ids[i], METER_PRICE, 2, &ranks);
        cJSON *c = get_json(tok, "/v1/jobs/%ld/cost", ids[i]);
        cr_expect_eq((long long)num(c, "total"), e, "job %ld: cost %g, expected %lld", ids[i],
                     num(c, "total"), e);
        cJSON_Delete(c);
    }
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT seconds FROM ledger WHERE kind = 'charge' AND job_id = %ld;",
             deaf);
    long long secs = db_ll(sql);
    cr_expect_geq(secs, 2 + 4, "the deaf job was billed %lld s: its stop grace went free", secs);
    snprintf(sql, sizeof sql, "SELECT seconds FROM ledger WHERE kind = 'charge' AND job_id = %ld;",
             polite);
    cr_expect_eq(db_ll(sql), 2, "a job that stopped on SIGTERM pays max_runtime_seconds at most");
}

Test(billing, fifty_concurrent_submits_against_a_budget_for_one_run_one)
{
    platform(NULL, 1, "64");
    th_put_text(&d, tok, "ws", "long.sh", "#!/bin/sh\nexec sleep 60\n", "755");
    th_must(put_json("/v1/tenants/acme/budget", TH_ADMIN, "{\"enforce\":true}"), 200);
    /* One job holds 60 (60 s at 1 per second); 100 does not hold two. */
    th_must(th_post(&d, "/v1/tenants/acme/credits", TH_ADMIN, "{\"amount\":100,\"note\":\"race\"}"), 201);
    pthread_t th[50];
    struct racer rc[50];
    for (int i = 0; i < 50; i++) {
        rc[i].i = i;
        pthread_create(&th[i], NULL, race, &rc[i]);
    }
    for (int i = 0; i < 50; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(rc[i].status, 201);
    }
    long long bal, avail;
    int running = 0, budget = 0;
    for (int round = 0; round < 30; round++) { /* 3 s of passes, watching the money */
        balance_of(tok, &bal, &avail);
        cr_assert(bal >= 0 && avail >= 0, "balance %lld, available %lld", bal, avail);
        usleep(100000);
    }
    cJSON *l = get_path(tok, "/v1/jobs?limit=100");
    const cJSON *j;
    cJSON_ArrayForEach(j, cJSON_GetObjectItem(l, "items"))
    {
        const char *st = cJSON_GetObjectItem(j, "state")->valuestring;
        const cJSON *why = cJSON_GetObjectItem(j, "reason");
        if (!strcmp(st, "STARTING") || !strcmp(st, "RUNNING"))
            running++;
        else if (!strcmp(st, "PENDING") && cJSON_IsString(why) &&
                 !strncmp(why->valuestring, "budget:", 7))
            budget++;
    }
    cJSON_Delete(l);
    cr_expect_eq(running, 1, "%d jobs run", running);
    cr_expect_eq(budget, 49, "%d jobs wait for the budget", budget);
    balance_of(tok, &bal, &avail);
    cr_expect_eq(bal, 100);
    cr_expect(avail >= 0 && avail <= 40, "available %lld with one job holding 60", avail);
}

/* ---- exhaustion, then top-up and retry ---- */

Test(billing, exhaustion_stops_with_sigterm_and_a_topped_up_retry_resumes)
{
    const char *args[] = {"--min-hold", "5", "--budget-grace", "3", NULL};
    platform(args, 1, "4");
    /* Counts seconds into its workspace; on SIGTERM saves and says so. */
    th_put_text(&d, tok, "ws", "count.sh",
                "#!/bin/sh\n"
                "n=$(cat state 2>/dev/null || echo 0)\n"
                "echo \"start $n\" >> log.txt\n"
                "trap 'echo $n > state; echo \"term $n\" >> log.txt; exit 143' TERM\n"
                "while true; do n=$((n + 1)); echo $n > state; sleep 1 & wait $!; done\n",
                "755");
    th_must(put_json("/v1/tenants/acme/budget", TH_ADMIN, "{\"enforce\":true}"), 200);
    th_must(th_post(&d, "/v1/tenants/acme/credits", TH_ADMIN, "{\"amount\":15}"), 201);
    long id = submit("counter", "count.sh", "meter", 1, NULL);
    wait_state(id, "RUNNING", 20000);
    wait_state(id, "FAILED", 40000);
    cJSON *j = get_json(tok, "/v1/jobs/%ld", id);
    const char *why = cJSON_GetObjectItem(j, "reason")->valuestring;
    cr_expect(!strncmp(why, "budget_exhausted", 16), "reason: %s", why);
    cJSON_Delete(j);
    wait_workers_ended(id);
    /* SIGTERM came first: the program saved its state and exited on its own. */
    th_resp lg = th_get(&d, "/v1/workspaces/ws/files/log.txt", tok);
    cr_assert_eq(lg.status, 200);
    cr_expect(strstr(lg.body, "term ") != NULL, "log: %s", lg.body);
    th_free(&lg);
    cJSON *w = get_json(tok, "/v1/jobs/%ld/workers", id);
    const cJSON *w0 = cJSON_GetArrayItem(cJSON_GetObjectItem(w, "items"), 0);
    cr_expect_eq(num(w0, "exit_code"), 143, "not stopped by its own SIGTERM handler");
    cJSON_Delete(w);
    long long bal, avail;
    balance_of(tok, &bal, &avail);
    cr_expect(bal >= 0, "balance %lld", bal);
    cr_expect(bal < 15, "nothing was charged");

    /* A retry without money waits for the budget... */
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/retry", id);
    th_must(th_post(&d, p, tok, NULL), 200);
    usleep(1500000);
    j = get_json(tok, "/v1/jobs/%ld", id);
    cr_expect_str_eq(cJSON_GetObjectItem(j, "state")->valuestring, "PENDING");
    const cJSON *wr = cJSON_GetObjectItem(j, "reason");
    cr_expect(cJSON_IsString(wr) && !strncmp(wr->valuestring, "budget:", 7), "reason: %s",
              cJSON_IsString(wr) ? wr->valuestring : "null");
    cJSON_Delete(j);
    /* ...and a top-up lets it run on from its saved state. */
    th_must(th_post(&d, "/v1/tenants/acme/credits", TH_ADMIN, "{\"amount\":1000}"), 201);
    wait_state(id, "RUNNING", 20000);
    usleep(1500000);
    lg = th_get(&d, "/v1/workspaces/ws/files/log.txt", tok);
    cr_assert_eq(lg.status, 200);
    const char *second = strstr(lg.body, "start ");
    second = second ? strstr(second + 1, "start ") : NULL;
    cr_expect(second && atoi(second + 6) > 0, "the retry did not resume: %s", lg.body);
    th_free(&lg);
    th_resp r = th_post(&d, p, tok, NULL); /* a running job cannot be retried */
    cr_expect_eq(r.status, 409, "%s", r.body);
    th_free(&r);
    th_cancel(&d, tok, id);
}

/* ---- prices at admission ---- */

Test(billing, a_price_change_applies_only_to_jobs_admitted_after_it)
{
    platform(NULL, 1, "4");
    th_put_text(&d, tok, "ws", "long.sh", "#!/bin/sh\nexec sleep 60\n", "755");
    long before = submit("before", "long.sh", "meter", 1, "\"max_runtime_seconds\":100");
    wait_state(before, "RUNNING", 20000);
    th_resp r = put_json("/v1/worker-specs/meter", TH_ADMIN,
                         "{\"cpus\":1,\"memory_mb\":256,\"price_per_hour\":7200,"
                         "\"currency\":\"USD\"}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    th_free(&r);
    long after = submit("after", "long.sh", "meter", 1, "\"max_runtime_seconds\":100");
    wait_state(after, "RUNNING", 20000);
    cJSON *a = get_json(tok, "/v1/jobs/%ld", before);
    cJSON *b = get_json(tok, "/v1/jobs/%ld", after);
    cr_expect_eq(num(cJSON_GetObjectItem(a, "price"), "per_worker_hour"), 3600);
    cr_expect_eq(num(cJSON_GetObjectItem(a, "price"), "estimated_max"), 100);
    cr_expect_eq(num(cJSON_GetObjectItem(b, "price"), "per_worker_hour"), 7200);
    cr_expect_eq(num(cJSON_GetObjectItem(b, "price"), "estimated_max"), 200);
    cJSON_Delete(a);
    cJSON_Delete(b);
    /* Their cost so far is live: running ranks priced now, in the job and its cost. */
    usleep(1200000);
    cJSON *c = get_json(tok, "/v1/jobs/%ld/cost", before);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(c, "running")));
    cr_expect(num(c, "total") >= 2, "cost so far %g", num(c, "total"));
    cr_expect_eq(num(c, "charged"), 0);
    cJSON_Delete(c);
    a = get_json(tok, "/v1/jobs/%ld", after);
    cr_expect(num(cJSON_GetObjectItem(a, "price"), "cost_so_far") >= 2);
    cJSON_Delete(a);
    r = th_get(&d, "/metrics", TH_ADMIN);
    cr_expect(strstr(r.body, "cohort_tenant_running_workers{tenant=\"acme\"} 2\n") != NULL,
              "/metrics lacks acme's 2 running workers");
    th_free(&r);
    /* The quote shows the new price. */
    r = th_post(&d, "/v1/quote", tok,
                "{\"worker_spec\":\"meter\",\"worker_count\":3,\"max_runtime_seconds\":1800}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(th_num(&r, "price_per_hour"), 3 * 7200);
    cr_expect_eq(th_num(&r, "estimated_max"), 3 * 3600);
    cr_expect_eq(th_num(&r, "hold"), 3 * 3600);
    th_free(&r);
    for (int i = 0; i < 2; i++)
        th_cancel(&d, tok, i ? after : before);
    wait_workers_ended(before);
    wait_workers_ended(after);
    cr_expect_eq(db_ll("SELECT count(*) FROM ledger WHERE kind = 'charge' AND"
                       " price_per_hour != CASE job_name WHEN 'before' THEN 3600 ELSE 7200 END;"),
                 0);
}

Test(billing, a_monthly_cap_admits_only_what_fits_under_it)
{
    platform(NULL, 1, "4");
    th_put_text(&d, tok, "ws", "long.sh", "#!/bin/sh\nexec sleep 60\n", "755");
    /* Not prepaid (the balance may go negative) but capped at 50 a month. */
    th_must(put_json("/v1/tenants/acme/budget", TH_ADMIN, "{\"monthly_cap\":50}"), 200);
    long big = submit("big", "long.sh", "meter", 1, "\"max_runtime_seconds\":60");
    long small = submit("small", "long.sh", "meter", 1, "\"max_runtime_seconds\":30");
    wait_state(small, "RUNNING", 20000);
    usleep(1200000);
    cJSON *j = get_json(tok, "/v1/jobs/%ld", big);
    cr_expect_str_eq(cJSON_GetObjectItem(j, "state")->valuestring, "PENDING");
    const cJSON *why = cJSON_GetObjectItem(j, "reason");
    cr_expect(cJSON_IsString(why) && strstr(why->valuestring, "budget: admitting it holds 60"),
              "reason: %s", cJSON_IsString(why) ? why->valuestring : "null");
    cJSON_Delete(j);
    cJSON *q = get_path(tok, "/v1/quota");
    const cJSON *m = cJSON_GetObjectItem(q, "money");
    cr_expect_eq(num(m, "monthly_cap"), 50);
    cr_expect_eq(num(m, "held"), 30);
    cr_expect_eq(num(m, "available"), 20);
    cr_expect_eq(num(cJSON_GetObjectItem(q, "running_jobs"), "used"), 1);
    cJSON_Delete(q);
    th_cancel(&d, tok, small);
    th_cancel(&d, tok, big);
    /* Once its workers have ended the unused part of the hold is released:
     * what is left is the cap less what was charged. */
    wait_workers_ended(small);
    long long charged = 0, held = -1, avail = -1;
    for (int i = 0; i < 50 && held != 0; i++) {
        usleep(100000);
        q = get_path(tok, "/v1/quota");
        m = cJSON_GetObjectItem(q, "money");
        held = (long long)num(m, "held");
        avail = (long long)num(m, "available");
        charged = (long long)num(m, "spent_this_month");
        cJSON_Delete(q);
    }
    cr_expect_eq(held, 0, "the hold was not released");
    cr_expect(charged > 0);
    cr_expect_eq(avail, 50 - charged);
}

/* ---- the numbers, CSV, and who sees them ---- */

/* Rows of a CSV body and the sum of column col (0-based) below the header;
 * every row must have ncols fields.  Quoted fields may hold commas. */
static int csv_rows(const char *body, int ncols, int col, long long *sum)
{
    int rows = -1;
    *sum = 0;
    const char *p = body;
    while (*p) {
        int field = 0, inq = 0;
        const char *start = p;
        long long v = 0;
        for (; *p && (inq || *p != '\n'); p++) {
            if (*p == '"')
                inq = !inq;
            else if (*p == ',' && !inq) {
                if (field == col)
                    v = atoll(start);
                field++;
                start = p + 1;
            }
        }
        if (field == col)
            v = atoll(start);
        cr_assert_eq(field + 1, ncols, "a row has %d fields", field + 1);
        if (rows >= 0)
            *sum += v;
        rows++;
        if (*p)
            p++;
    }
    return rows;
}

/* count charges of acme written straight into the ledger: job ids
 * 5000 + i, amounts 1 + i, at first_ms + i * step_ms. */
static void charges(int count, long long first_ms, long long step_ms)
{
    char sql[2048], out[256];
    long long t = db_ll("SELECT id FROM tenants WHERE name = 'acme'");
    long long u = db_ll("SELECT id FROM users WHERE name = 'alice'");
    snprintf(sql, sizeof sql,
             "INSERT INTO ledger(tenant_id, at, kind, amount, currency, job_id, attempt, rank,"
             " job_name, user_id, worker_spec, gpus, seconds, price_per_hour)"
             " SELECT %lld, %lld + (a.column1 * 10 + b.column1) * %lld, 'charge',"
             " 1 + a.column1 * 10 + b.column1, 'USD', 5000 + a.column1 * 10 + b.column1, 1, 0,"
             " 'p', %lld, 'meter', 0, 10, 3600"
             " FROM (VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9),(10),(11),(12)) a,"
             " (VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)) b"
             " WHERE a.column1 * 10 + b.column1 < %d",
             t, first_ms, step_ms, u, count);
    th_db_query(&d, sql, out, sizeof out);
    cr_assert_eq(db_ll("SELECT count(*) FROM ledger WHERE kind = 'charge'"), count, "%s", out);
}

/* Walks the pages of path (limit per page) and checks them: keys of field
 * ascending and never twice, every page but the last full, its items
 * summing to the total of total_key.  Returns how many items it saw. */
static int walk_pages(const char *path, const char *items_key, const char *field, int limit,
                      const char *total_key, long long want_total)
{
    char p[256], cursor[32] = "";
    long long sum = 0, last = -1;
    int n = 0;
    for (int page = 0; page < 20; page++) {
        snprintf(p, sizeof p, "%s%slimit=%d%s%s", path, strchr(path, '?') ? "&" : "?", limit,
                 cursor[0] ? "&cursor=" : "", cursor);
        th_resp r = th_get(&d, p, tok);
        cr_assert_eq(r.status, 200, "%s: %s", p, r.body);
        const cJSON *items = cJSON_GetObjectItem(r.json, items_key), *it;
        int got = 0;
        cJSON_ArrayForEach(it, items)
        {
            long long key;
            const cJSON *k = cJSON_GetObjectItem(it, field);
            if (cJSON_IsString(k)) { /* a day */
                struct tm tm = {0};
                cr_assert(strptime(k->valuestring, "%Y-%m-%d", &tm), "%s", k->valuestring);
                key = (long long)timegm(&tm);
            } else {
                key = (long long)num(it, field);
            }
            cr_expect_gt(key, last, "%s: %s %lld after %lld", p, field, key, last);
            last = key;
            sum += (long long)num(it, "amount");
            got++;
        }
        n += got;
        const cJSON *total = cJSON_GetObjectItem(r.json, "total");
        long long t = cJSON_IsObject(total) ? (long long)num(total, "amount")
                                            : (long long)th_num(&r, total_key);
        cr_expect_eq(t, want_total, "%s: the total is the whole period's", p);
        const cJSON *next = cJSON_GetObjectItem(r.json, "next_cursor");
        cr_assert(cJSON_IsString(next) || cJSON_IsNull(next), "%s: %s", p, r.body);
        if (cJSON_IsNull(next)) {
            cr_expect_leq(got, limit);
            th_free(&r);
            break;
        }
        cr_expect_eq(got, limit, "%s: a page with a next_cursor is full", p);
        snprintf(cursor, sizeof cursor, "%s", next->valuestring);
        th_free(&r);
    }
    cr_expect_eq(sum, want_total, "%s: the pages' items sum to the total", path);
    return n;
}

/* A month of many jobs comes a page at a time: usage by job and the
 * invoice's lines in pages of limit (default 50), in job order, each line
 * once; totals always over the whole period; CSV whole.  Days page too. */
Test(billing, usage_and_invoice_lines_come_in_pages_with_whole_totals)
{
    platform(NULL, 0, "4");
    long long now = (long long)time(NULL) * 1000;
    charges(130, now - 130000, 1000); /* the last 130 s: this month, bar its first 130 s */
    long long all = 130 * 131 / 2;
    cr_expect_eq(walk_pages("/v1/usage?group_by=job", "items", "job_id", 50, NULL, all), 130);
    cr_expect_eq(walk_pages("/v1/usage?group_by=job", "items", "job_id", 200, NULL, all), 130);
    cr_expect_eq(walk_pages("/v1/usage?group_by=user", "items", "user_id", 1, NULL, all), 1);
    time_t t = (time_t)(now / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char inv[64];
    snprintf(inv, sizeof inv, "/v1/invoices/%04d-%02d", tm.tm_year + 1900, tm.tm_mon + 1);
    cr_expect_eq(walk_pages(inv, "lines", "job_id", 50, "total", all), 130);
    cr_expect_eq(walk_pages(inv, "lines", "job_id", 7, "total", all), 130);
    /* without limit: 50 */
    th_resp r = th_get(&d, inv, tok);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "lines")), 50, "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(r.json, "next_cursor")->valuestring, "5049");
    th_free(&r);
    r = th_get(&d, "/v1/usage?group_by=job", tok);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "items")), 50, "%s", r.body);
    th_free(&r);
    /* CSV: every line, whatever the limit */
    long long csum;
    r = th_req(&d, "GET", inv, tok, NULL, NULL, 0, "Accept: text/csv");
    cr_expect_eq(csv_rows(r.body, 6, 4, &csum), 130);
    cr_expect_eq(csum, all);
    th_free(&r);
    /* bad pages change nothing and say why */
    static const char *const bad[] = {"limit=0", "limit=201", "cursor=abc", "cursor=-3"};
    for (int i = 0; i < 4; i++) {
        char p[128], field[8];
        snprintf(field, sizeof field, "%.*s", (int)strcspn(bad[i], "="), bad[i]);
        snprintf(p, sizeof p, "%s?%s", inv, bad[i]);
        th_expect_error(th_get(&d, p, tok), 400, "invalid_value", field);
        snprintf(p, sizeof p, "/v1/usage?group_by=day&%s", bad[i]);
        th_expect_error(th_get(&d, p, tok), 400, "invalid_value", field);
    }
}

/* Usage by day over a period of ten days, three days a page. */
Test(billing, usage_by_day_pages_through_a_period)
{
    platform(NULL, 0, "4");
    charges(10, 1740830400000LL, 86400000LL); /* 2025-03-01T12:00Z, a day apart */
    cr_expect_eq(walk_pages("/v1/usage?group_by=day&from=2025-03-01&to=2025-04-01", "items", "day",
                            3, NULL, 55),
                 10);
    cr_expect_eq(walk_pages("/v1/usage?group_by=day&from=2025-03-04&to=2025-03-06", "items", "day",
                            1, NULL, 4 + 5),
                 2);
    /* worker_spec groups come whole, with no next page */
    th_resp r =
        th_get(&d, "/v1/usage?group_by=worker_spec&from=2025-03-01&to=2025-04-01&limit=1", tok);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "items")), 1, "%s", r.body);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(r.json, "next_cursor")), "%s", r.body);
    th_free(&r);
}

/*
 * Usage and invoices read running totals (per day, and per job and month)
 * kept beside the ledger, plus the ledger's own charges at a window's
 * partial ends.  Whatever the window, what they answer must be what the
 * ledger's charges of that window sum to: 600 charges over three months,
 * at odd times, of two users and two specs, jobs whose ranks straddle days
 * and months, and windows aligned to months, to days, to neither, inside
 * one day and across months.  The database sums the expected answers from
 * the ledger itself.
 */
static long long iso_ms(const char *s)
{
    struct tm tm = {0};
    cr_assert(strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm), "%s", s);
    return (long long)timegm(&tm) * 1000;
}

/* The ledger's charges of acme in [from, to): SELECT cols ... tail. */
static void ledger_sums(const char *cols, const char *tail, const char *from, const char *to,
                        char *out, size_t n)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT %s FROM ledger WHERE tenant_id = (SELECT id FROM tenants WHERE name = 'acme')"
             " AND kind = 'charge' AND at >= %lld AND at < %lld%s",
             cols, iso_ms(from), iso_ms(to), tail);
    th_db_query(&d, sql, out, n);
}

/* The groups of r as ledger_sums prints them: key|entries|seconds|GPU seconds|amount. */
static void usage_lines(const th_resp *r, const char *items_key, const char *field, char *out,
                        size_t n)
{
    size_t len = 0;
    const cJSON *it;
    out[0] = '\0';
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(r->json, items_key))
    {
        const cJSON *k = cJSON_GetObjectItem(it, field);
        char key[64];
        if (!strcmp(field, "day")) {
            cr_assert(cJSON_IsString(k));
            char at[32];
            snprintf(at, sizeof at, "%.10sT00:00:00Z", k->valuestring);
            snprintf(key, sizeof key, "%lld", iso_ms(at) / 86400000);
        } else if (cJSON_IsString(k)) {
            snprintf(key, sizeof key, "%s", k->valuestring);
        } else {
            snprintf(key, sizeof key, "%lld", (long long)num(it, field));
        }
        len += (size_t)snprintf(out + len, n - len, "%s|%lld|%lld|%lld|%lld\n", key,
                                (long long)num(it, "entries"), (long long)num(it, "worker_seconds"),
                                (long long)num(it, "gpu_seconds"), (long long)num(it, "amount"));
        cr_assert_lt(len, n);
    }
}

#define LEDGER_GROUPS ", count(*), sum(seconds), sum(seconds * gpus), sum(amount)"
#define LEDGER_TOTAL                                                                               \
    "coalesce(sum(seconds), 0), coalesce(sum(seconds * gpus), 0), coalesce(sum(amount), 0)"

Test(billing, usage_from_running_totals_equals_the_ledger_over_any_window)
{
    platform(NULL, 0, "4");
    char bob[80], sql[2048], out[256];
    long long t = db_ll("SELECT id FROM tenants WHERE name = 'acme'");
    long long u1 = db_ll("SELECT id FROM users WHERE name = 'alice'");
    long long u2 = th_user(&d, "acme", "bob", "member", bob);
    /* charge n (1..600) at 2025-01-20 + n * 3.65 h + n^2 % 5 s, of job 7000 + n / 3;
     * then job 9001's two ranks, a millisecond each side of March's first instant */
    snprintf(
        sql, sizeof sql,
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 600)"
        " INSERT INTO ledger(tenant_id, at, kind, amount, currency, job_id, attempt, rank,"
        " job_name, user_id, worker_spec, gpus, seconds, price_per_hour)"
        " SELECT %lld, 1737331200000 + CAST(n AS BIGINT) * 13131313 + (n * n) %% 5000, 'charge',"
        " n %% 13 + 1, 'USD', 7000 + n / 3, 1, n %% 3, 'j' || (n / 3),"
        " CASE WHEN n %% 5 < 2 THEN %lld ELSE %lld END,"
        " CASE WHEN n %% 3 = 1 THEN 'gpu-1x' ELSE 'cpu-small' END,"
        " CASE WHEN n %% 3 = 1 THEN 1 ELSE 0 END, n %% 97 + 1, 3600 FROM c;"
        " INSERT INTO ledger(tenant_id, at, kind, amount, currency, job_id, attempt, rank,"
        " job_name, user_id, worker_spec, gpus, seconds, price_per_hour) VALUES"
        " (%lld, 1740787199999, 'charge', 100, 'USD', 9001, 1, 0, 'edge', %lld, 'gpu-1x', 2,"
        " 50, 3600), (%lld, 1740787200000, 'charge', 200, 'USD', 9001, 1, 1, 'edge', %lld,"
        " 'gpu-1x', 2, 70, 3600)",
        t, u1, u2, t, u1, t, u1);
    th_db_query(&d, sql, out, sizeof out);
    cr_assert_eq(db_ll("SELECT count(*) FROM ledger WHERE kind = 'charge'"), 602, "%s", out);

    static const char *const windows[][2] = {
        {"2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z"}, /* a month */
        {"2025-03-01T00:00:00Z", "2025-04-01T00:00:00Z"},
        {"2025-04-01T00:00:00Z", "2025-05-01T00:00:00Z"}, /* the last, in part */
        {"2025-02-01T00:00:00Z", "2025-02-17T05:00:00Z"}, /* a month's start, not its end */
        {"2025-02-01T00:00:00Z", "2025-03-15T00:00:00Z"}, /* a month and more */
        {"2025-02-03T07:30:00Z", "2025-02-21T19:00:00Z"}, /* neither end a day's */
        {"2025-02-10T01:00:00Z", "2025-02-10T23:00:00Z"}, /* inside one day */
        {"2025-02-28T00:00:00Z", "2025-03-02T00:00:00Z"}, /* days across a month's end */
        {"2025-01-25T13:00:00Z", "2025-04-02T02:00:00Z"}, /* months, neither end aligned */
        {"2024-12-01T00:00:00Z", "2025-01-01T00:00:00Z"}, /* before any charge */
    };
    static const struct {
        const char *group, *field, *key;
    } groups[] = {
        {"day", "day", "at / 86400000"},
        {"job", "job_id", "job_id"},
        {"user", "user_id", "user_id"},
        {"worker_spec", "worker_spec", "worker_spec"},
    };
    static char want[16384], got[16384];
    int lines = 0;
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
        const char *from = windows[w][0], *to = windows[w][1];
        char total[128];
        ledger_sums(LEDGER_TOTAL, "", from, to, total, sizeof total);
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
            char p[256], cols[128];
            snprintf(p, sizeof p, "/v1/usage?group_by=%s&from=%s&to=%s&limit=200", groups[g].group,
                     from, to);
            snprintf(cols, sizeof cols, "%s" LEDGER_GROUPS, groups[g].key);
            ledger_sums(cols, " GROUP BY 1 ORDER BY 1", from, to, want, sizeof want);
            th_resp r = th_get(&d, p, tok);
            cr_assert_eq(r.status, 200, "%s: %s", p, r.body);
            cr_expect(cJSON_IsNull(cJSON_GetObjectItem(r.json, "next_cursor")), "%s", p);
            usage_lines(&r, "items", groups[g].field, got, sizeof got);
            cr_expect_str_eq(got, want, "%s", p);
            lines += cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "items"));
            const cJSON *tot = cJSON_GetObjectItem(r.json, "total");
            snprintf(got, sizeof got, "%lld|%lld|%lld\n", (long long)num(tot, "worker_seconds"),
                     (long long)num(tot, "gpu_seconds"), (long long)num(tot, "amount"));
            cr_expect_str_eq(got, total, "%s: the total", p);
            th_free(&r);
        }
        /* jobs a few at a time, through the cursor */
        char p[256];
        snprintf(p, sizeof p, "/v1/usage?group_by=job&from=%s&to=%s", from, to);
        ledger_sums("count(DISTINCT job_id), coalesce(sum(amount), 0)", "", from, to, want,
                    sizeof want);
        cr_expect_eq(walk_pages(p, "items", "job_id", 13, NULL, atoll(strchr(want, '|') + 1)),
                     atoi(want), "%s", p);
    }
    cr_expect_gt(lines, 500, "the windows held groups: %d", lines);
    /* invoices: a month's lines by job, and the month's totals */
    static const char *const months[][3] = {
        {"2025-01", "2025-01-01T00:00:00Z", "2025-02-01T00:00:00Z"},
        {"2025-02", "2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z"},
        {"2025-03", "2025-03-01T00:00:00Z", "2025-04-01T00:00:00Z"},
    };
    for (int m = 0; m < 3; m++) {
        char p[64], total[64];
        snprintf(p, sizeof p, "/v1/invoices/%s?limit=200", months[m][0]);
        ledger_sums("job_id" LEDGER_GROUPS, " GROUP BY 1 ORDER BY 1", months[m][1], months[m][2],
                    want, sizeof want);
        ledger_sums("coalesce(sum(amount), 0)", "", months[m][1], months[m][2], total,
                    sizeof total);
        th_resp r = th_get(&d, p, tok);
        cr_assert_eq(r.status, 200, "%s: %s", p, r.body);
        usage_lines(&r, "lines", "job_id", got, sizeof got);
        cr_expect_str_eq(got, want, "%s", p);
        cr_expect_eq((long long)th_num(&r, "total"), atoll(total), "%s: %s", p, r.body);
        th_free(&r);
    }
    /* What budgets count as spent this month: this month's charges (from the
     * totals per day), and not one a millisecond before it began. */
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    tm.tm_mday = 1;
    tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    long long month = (long long)timegm(&tm) * 1000;
    snprintf(sql, sizeof sql,
             "INSERT INTO ledger(tenant_id, at, kind, amount, currency, job_id, attempt, rank,"
             " job_name, user_id, worker_spec, gpus, seconds, price_per_hour) VALUES"
             " (%lld, %lld, 'charge', 1000, 'USD', 9100, 1, 0, 'm', %lld, 'gpu-1x', 1, 9, 3600),"
             " (%lld, %lld, 'charge', 20, 'USD', 9100, 1, 1, 'm', %lld, 'gpu-1x', 1, 9, 3600),"
             " (%lld, %lld, 'charge', 3, 'USD', 9101, 1, 0, 'n', %lld, 'cpu-small', 0, 9, 3600)",
             t, month - 1, u1, t, month, u1, t,
             now * 1000LL - 5000 > month ? now * 1000LL - 5000 : month, u2);
    th_db_query(&d, sql, out, sizeof out);
    th_resp r = th_get(&d, "/v1/quota", tok);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_eq((long long)num(cJSON_GetObjectItem(r.json, "money"), "spent_this_month"), 23, "%s",
                 r.body);
    th_free(&r);
}

Test(billing, usage_invoices_csv_and_metrics_match_the_ledger_and_stay_with_their_tenant)
{
    platform(NULL, 1, "4");
    th_put_text(&d, tok, "ws", "ok.sh", "#!/bin/sh\nsleep 1.2\n", "755");
    long a = submit("a-one", "ok.sh", "meter", 2, NULL);
    long b = submit("a,two", "ok.sh", "odd", 1, NULL);
    wait_state(a, "SUCCEEDED", 30000);
    wait_state(b, "SUCCEEDED", 30000);
    wait_workers_ended(a);
    wait_workers_ended(b);
    long long ledger = db_ll("SELECT sum(amount) FROM ledger WHERE kind = 'charge';");
    long long secs = db_ll("SELECT sum(seconds) FROM ledger WHERE kind = 'charge';");
    cr_assert(ledger > 0 && secs >= 6, "ledger %lld over %lld s", ledger, secs);

    static const char *const groups[] = {"day", "job", "user", "worker_spec"};
    for (int g = 0; g < 4; g++) {
        char path[96];
        snprintf(path, sizeof path, "/v1/usage?group_by=%s", groups[g]);
        th_resp r = th_get(&d, path, tok);
        cr_assert_eq(r.status, 200, "%s", r.body);
        const cJSON *t = cJSON_GetObjectItem(r.json, "total");
        cr_expect_eq((long long)num(t, "amount"), ledger, "group %s", groups[g]);
        cr_expect_eq((long long)num(t, "worker_seconds"), secs, "group %s", groups[g]);
        long long sum = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(r.json, "items"))
        {
            sum += (long long)num(it, "amount");
        }
        cr_expect_eq(sum, ledger, "group %s: items sum %lld", groups[g], sum);
        th_free(&r);
        r = th_req(&d, "GET", path, tok, NULL, NULL, 0, "Accept: text/csv");
        cr_assert_eq(r.status, 200);
        int two = !strcmp(groups[g], "job") || !strcmp(groups[g], "user");
        long long csum;
        int rows = csv_rows(r.body, two ? 6 : 5, two ? 4 : 3, &csum);
        cr_expect(rows >= 1, "%s: %s", groups[g], r.body);
        cr_expect_eq(csum, ledger, "CSV %s: %s", groups[g], r.body);
        th_free(&r);
    }
    /* This month's invoice: one line per job, totals from the ledger; an old month is final and empty. */
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char month[64], path[128];
    snprintf(month, sizeof month, "%04d-%02d", tm.tm_year + 1900, tm.tm_mon + 1);
    snprintf(path, sizeof path, "/v1/invoices/%s", month);
    th_resp r = th_get(&d, path, tok);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_eq((long long)th_num(&r, "total"), ledger);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "lines")), 2);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(r.json, "final")));
    th_free(&r);
    r = th_req(&d, "GET", path, tok, NULL, NULL, 0, "Accept: text/csv");
    long long csum;
    cr_expect_eq(csv_rows(r.body, 6, 4, &csum), 2, "%s", r.body);
    cr_expect_eq(csum, ledger);
    cr_expect(strstr(r.body, "\"a,two\"") != NULL, "a name with a comma is quoted: %s", r.body);
    th_free(&r);
    r = th_get(&d, "/v1/invoices/2020-01", tok);
    cr_expect_eq(r.status, 200);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r.json, "final")));
    cr_expect_eq(th_num(&r, "total"), 0);
    th_free(&r);
    /* The job cost as CSV: a header and one row per rank. */
    char cp[64];
    snprintf(cp, sizeof cp, "/v1/jobs/%ld/cost", a);
    r = th_req(&d, "GET", cp, tok, NULL, NULL, 0, "Accept: text/csv");
    cr_expect_eq(csv_rows(r.body, 10, 7, &csum), 2, "%s", r.body);
    th_free(&r);
    /* /metrics counts the spend. */
    r = th_get(&d, "/metrics", TH_ADMIN);
    char line[128];
    snprintf(line, sizeof line, "cohort_tenant_spend_total{tenant=\"acme\",currency=\"USD\"} %lld\n",
             ledger);
    cr_expect(strstr(r.body, line) != NULL, "no '%s' in /metrics", line);
    th_free(&r);
    /* Quota: limits beside use, money beside them. */
    r = th_get(&d, "/v1/quota", tok);
    cr_assert_eq(r.status, 200);
    const cJSON *m = cJSON_GetObjectItem(r.json, "money");
    cr_expect_eq((long long)num(m, "spent_this_month"), ledger);
    cr_expect_eq((long long)num(m, "balance"), -ledger);
    cr_expect(num(cJSON_GetObjectItem(r.json, "storage_bytes"), "used") > 0);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(m, "available")), "nothing limits acme");
    th_free(&r);

    /* Tenant B sees none of it. */
    char tb[80];
    th_user(&d, "globex", "bob", "tenant_admin", tb);
    static const char *const hidden[] = {"/v1/usage?tenant=acme", "/v1/quota?tenant=acme",
                                         "/v1/invoices/2026-01?tenant=acme",
                                         "/v1/tenants/acme/budget"};
    for (int i = 0; i < 4; i++) {
        r = th_get(&d, hidden[i], tb);
        cr_expect_eq(r.status, 404, "%s: %ld %s", hidden[i], r.status, r.body);
        cr_expect(strstr(r.body, "acme") == NULL || strstr(r.body, "amount") == NULL);
        th_free(&r);
    }
    r = th_get(&d, cp, tb);
    cr_expect_eq(r.status, 404, "another tenant's job cost: %ld", r.status);
    th_free(&r);
    th_expect(th_post(&d, "/v1/tenants/acme/credits", tb, "{\"amount\":5}"), 404);
    r = th_get(&d, "/v1/usage", tb);
    cr_expect_eq(num(cJSON_GetObjectItem(r.json, "total"), "amount"), 0);
    cr_expect_eq(th_items(&r), 0);
    th_free(&r);
    /* A member may not credit its own tenant; the admin may see any tenant's numbers. */
    th_expect(th_post(&d, "/v1/tenants/acme/credits", tok, "{\"amount\":5}"), 403);
    r = th_get(&d, "/v1/usage?tenant=acme", TH_ADMIN);
    cr_expect_eq((long long)num(cJSON_GetObjectItem(r.json, "total"), "amount"), ledger);
    th_free(&r);

    /* Bad input: a clear error, nothing written (the ledger and the account
     * stay as they were; nodes' heartbeats keep changing, so no digest). */
    char before[256], after[256];
    static const char money_sql[] =
        "SELECT count(*), sum(amount), (SELECT group_concat(tenant_id || currency || balance ||"
        " enforce || coalesce(monthly_cap, '-')) FROM accounts) FROM ledger;";
    th_db_query(&d, money_sql, before, sizeof before);
    static const char *const bad_get[] = {"/v1/usage?from=yesterday", "/v1/usage?group_by=week",
                                          "/v1/usage?from=2026-02-30",
                                          "/v1/usage?from=2026-03-01&to=2026-02-01",
                                          "/v1/invoices/2026-13", "/v1/invoices/26-01"};
    for (int i = 0; i < 6; i++) {
        r = th_get(&d, bad_get[i], tok);
        cr_expect_eq(r.status, 400, "%s: %ld", bad_get[i], r.status);
        th_free(&r);
    }
    static const char *const bad_credit[] = {"{\"amount\":-5}", "{\"amount\":0}",
                                             "{\"amount\":\"5\"}", "{\"amount\":1.5}",
                                             "{\"amount\":5,\"extra\":1}", "[5]"};
    for (int i = 0; i < 6; i++) {
        r = th_post(&d, "/v1/tenants/acme/credits", TH_ADMIN, bad_credit[i]);
        cr_expect(r.status == 400 || r.status == 422, "%s: %ld", bad_credit[i], r.status);
        th_free(&r);
    }
    th_expect_error(th_post(&d, "/v1/quote", tok, "{\"worker_spec\":\"nope\",\"worker_count\":1}"),
                    422, NULL, "worker_spec");
    r = put_json("/v1/tenants/acme/budget", TH_ADMIN, "{\"currency\":\"EUR\"}");
    cr_expect_eq(r.status, 409, "the currency changed under existing charges");
    th_free(&r);
    th_db_query(&d, money_sql, after, sizeof after);
    cr_expect_str_eq(before, after, "a refused request changed the money");
}

/* ---- no silent limits: more tenants, holds and timeouts than once fit ---- */

/* Runs SQL on the running cohortd's database (waiting out its writes). */
static void db(const char *sql, char *out, size_t n)
{
    char q[7000];
    /* psql waits for PostgreSQL's locks by itself. */
    cr_assert_lt((size_t)snprintf(q, sizeof q, "%s%s", th_pg() ? "" : "PRAGMA busy_timeout = 10000; ",
                                  sql),
                 sizeof q);
    th_db_query(&d, q, out, n);
}

/* Makes n copies of job id in the database, then runs set (an UPDATE of
 * the jobs whose name is copy-<id>). */
static void copy_job(long id, int n, const char *set)
{
    char cols[1024], sql[6000], out[256];
    th_db_query(&d,
                th_pg() ? "SELECT string_agg(column_name, ',' ORDER BY ordinal_position)"
                          " FROM information_schema.columns WHERE table_name = 'jobs'"
                          " AND column_name NOT IN ('id', 'name')"
                        : "SELECT group_concat(name, ',') FROM pragma_table_info('jobs')"
                          " WHERE name NOT IN ('id', 'name')",
                cols, sizeof cols);
    cols[strcspn(cols, "\n")] = '\0';
    cr_assert(strstr(cols, "tenant_id"), "columns of jobs: %s", cols);
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < %d)"
             " INSERT INTO jobs(name, %s) SELECT 'copy-%ld', %s FROM jobs, k WHERE id = %ld;"
             " %s; SELECT count(*) FROM jobs WHERE name = 'copy-%ld';",
             n, cols, id, cols, id, set, id);
    db(sql, out, sizeof out);
    char *last = strrchr(out, '\n');
    while (last && last > out && last[1] == '\0') {
        *last = '\0';
        last = strrchr(out, '\n');
    }
    cr_assert_eq(atol(last ? last + 1 : out), n, "copies made: %s", out);
}

/*
 * 1,100 tenants with budgets, and one more whose monthly cap is 1: its job
 * waits for budget.  (The scheduler once read only the first 1,024 budgeted
 * tenants, and the rest ran unchecked.)
 */
Test(billing, a_budget_past_a_thousand_budgeted_tenants_still_holds)
{
    platform(NULL, 1, "1");
    char out[256];
    db("WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 1100)"
       " INSERT INTO tenants(name, created_at) SELECT 'bulk-' || i, 0 FROM k;"
       " INSERT INTO accounts(tenant_id, currency, balance, enforce)"
       " SELECT id, 'USD', 1000000000, 1 FROM tenants WHERE name LIKE 'bulk-%';"
       " SELECT count(*) FROM accounts WHERE enforce = 1;",
       out, sizeof out);
    cr_assert(strstr(out, "1100"), "budgeted tenants: %s", out);
    char late[80];
    th_user(&d, "late", "lee", "member", late);
    th_resp r = put_json("/v1/tenants/late/budget", TH_ADMIN, "{\"monthly_cap\":1}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    th_free(&r);
    th_must(th_post(&d, "/v1/workspaces", late, "{\"name\":\"ws\"}"), 201);
    th_put_text(&d, late, "ws", "x.sh", "#!/bin/sh\ntrue\n", "755");
    long id = submit_as(late, "capped", "x.sh", "meter", 1, "\"max_runtime_seconds\":60");
    char reason[256] = "";
    for (int i = 0; i < 100 && !strstr(reason, "budget"); i++) {
        usleep(50000);
        cJSON *j = get_json(late, "/v1/jobs/%ld", id);
        const cJSON *why = cJSON_GetObjectItem(j, "reason");
        snprintf(reason, sizeof reason, "%s", cJSON_IsString(why) ? why->valuestring : "");
        cJSON_Delete(j);
    }
    cr_expect(strstr(reason, "budget: admitting it holds 60"), "the 1,101st budgeted tenant's "
              "job waits for: %s", reason);
}

/*
 * 5,000 admitted attempts of one tenant, each holding 7: the quota shows
 * 35,000 held, every one counted.  (Once only the first 4,096 were.)
 */
Test(billing, five_thousand_live_holds_are_all_reserved)
{
    platform(NULL, 0, "1");
    th_put_text(&d, tok, "ws", "x.sh", "#!/bin/sh\ntrue\n", "755");
    long id = submit("one", "x.sh", "meter", 1, "\"max_runtime_seconds\":3600");
    char set[512];
    snprintf(set, sizeof set,
             "UPDATE jobs SET state = 'RUNNING', attempt = 1, started_at = %lld"
             " WHERE name = 'copy-%ld';"
             " INSERT INTO job_holds(job_id, attempt, tenant_id, amount, bounded, created_at)"
             " SELECT id, 1, tenant_id, 7, 1, 0 FROM jobs WHERE name = 'copy-%ld'",
             (long long)time(NULL) * 1000, id, id);
    copy_job(id, 5000, set);
    cJSON *q = get_path(tok, "/v1/quota");
    const cJSON *m = cJSON_GetObjectItem(q, "money");
    cr_expect_eq(num(m, "held"), 35000, "held: %.0f", num(m, "held"));
    cJSON_Delete(q);
}

/*
 * 300 running jobs past their max_runtime_seconds end in one tick, which is
 * one transaction: the first look that sees any of them FAILED with the
 * timeout reason sees all 300.  (Once 256 a tick, and the rest a tick,
 * at least a second, later.)
 */
Test(billing, three_hundred_timeouts_end_in_one_tick)
{
    platform(NULL, 0, "1");
    th_put_text(&d, tok, "ws", "x.sh", "#!/bin/sh\ntrue\n", "755");
    long id = submit("one", "x.sh", "meter", 1, "\"max_runtime_seconds\":1");
    char set[512], out[512];
    snprintf(set, sizeof set,
             "UPDATE jobs SET state = 'RUNNING', attempt = 1, started_at = %lld"
             " WHERE name = 'copy-%ld'",
             (long long)time(NULL) * 1000 - 60000, id);
    copy_job(id, 300, set);
    snprintf(set, sizeof set,
             "SELECT count(*) FROM jobs WHERE name = 'copy-%ld' AND state = 'FAILED'"
             " AND reason LIKE 'timeout:%%'",
             id);
    long first = 0;
    for (int i = 0; i < 1000 && first == 0; i++) {
        usleep(10000);
        db(set, out, sizeof out);
        char *last = strrchr(out, '\n');
        while (last && last > out && last[1] == '\0') {
            *last = '\0';
            last = strrchr(out, '\n');
        }
        first = atol(last ? last + 1 : out);
    }
    cr_expect_eq(first, 300, "the first look saw %ld of 300 timed out", first);
}
