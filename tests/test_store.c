/*
 * The store on its own: migrations from empty and re-run, refusal of a
 * newer schema, WAL, and group commit.  Under tests/with-postgres the same
 * on PostgreSQL.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storage/store.h"
#include "storage/store_bill.h"
#include "storage/store_job.h"
#include "storage/store_tenant.h"
#include "tests/harness.h"

static char dir[64], db[400];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/cohort-store-XXXXXX");
    cr_assert(mkdtemp(dir));
    th_store_target(dir, "c.db", db, sizeof db);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(store, .init = setup, .fini = teardown, .timeout = 60);

static void sql(const char *q, char *out, size_t n)
{
    th_store_query(db, q, out, n);
}

Test(store, migrations_from_empty_then_rerun)
{
    char err[256] = "", out[256];
    store *s = store_open(db, err, sizeof err);
    cr_assert(s, "%s", err);
    cr_expect_eq(store_schema_version(s), store_schema_known());
    cr_expect_gt(store_schema_known(), 0);
    store_close(s);
    /* Both engines reach the same version (PostgreSQL's in fewer files). */
    sql("SELECT max(version) FROM schema_migrations", out, sizeof out);
    cr_expect_eq(atoi(out), store_schema_known());
    sql("SELECT count(*) FROM schema_migrations", out, sizeof out);
    int applied = atoi(out);
    cr_expect_gt(applied, 0);
    if (!th_pg()) {
        sql("PRAGMA journal_mode", out, sizeof out);
        cr_expect_str_eq(out, "wal\n");
    }

    s = store_open(db, err, sizeof err);
    cr_assert(s, "%s", err);
    cr_expect_eq(store_schema_version(s), store_schema_known());
    store_close(s);
    sql("SELECT count(*) FROM schema_migrations", out, sizeof out);
    cr_expect_eq(atoi(out), applied, "migrations ran twice");
    sql("SELECT count(*) FROM tenants WHERE is_platform = 1", out, sizeof out);
    cr_expect_str_eq(out, "1\n", "seed rows applied twice");
}

Test(store, refuses_a_newer_schema)
{
    char err[256] = "";
    store *s = store_open(db, err, sizeof err);
    cr_assert(s);
    store_close(s);
    char out[64];
    sql("INSERT INTO schema_migrations VALUES (999, '999_future.sql', 0)", out, sizeof out);
    s = store_open(db, err, sizeof err);
    cr_expect_null(s, "opened a database from the future");
    cr_expect(strstr(err, "newer") != NULL, "message: %s", err);
    if (s)
        store_close(s);
}

/* A migration the engine refuses stops the open with the engine's own
 * words, kept on the connection (store_be.h) and passed on: here a table
 * in the way of the first migration. */
Test(store, a_failing_migration_says_what_the_engine_said)
{
    char err[256] = "", out[64];
    sql("CREATE TABLE tenants (x INTEGER)", out, sizeof out);
    store *s = store_open(db, err, sizeof err);
    cr_expect_null(s, "opened past a failing migration");
    cr_expect(strstr(err, "migration 0") && strstr(err, "failed: ") && /* 001, or PG's 007 */
                  strstr(err, "tenants") && strstr(err, "already exists"),
              "message: %s", err);
    if (s)
        store_close(s);
}

/* A database left at schema 7 by an older cohortd, with charges in its
 * ledger and jobs: opened, it reaches the newest, each account's charges are
 * summed into charged once (8) and into the usage totals (11), the ended
 * jobs are counted (12), and the triggers keep them from there on. */
Test(store, schema_7_with_a_ledger_upgrades_and_keeps_its_charges)
{
    char cmd[2048], out[256], err[256] = "";
    static const char mig[] = "CREATE TABLE schema_migrations(version INTEGER PRIMARY KEY,"
                              " name TEXT NOT NULL, applied_at BIGINT NOT NULL)";
    if (th_pg()) {
        snprintf(cmd, sizeof cmd,
                 "psql -X -q -v ON_ERROR_STOP=1 '%s' -f '%s/migrations/postgresql/007_schema.sql'"
                 " -c '%s' -c \"INSERT INTO schema_migrations VALUES (7, '007_schema.sql', 0)\""
                 " >/dev/null",
                 db, COHORT_SOURCE_DIR, mig);
    } else {
        snprintf(cmd, sizeof cmd,
                 "cat '%s'/migrations/00[1-7]_*.sql | sqlite3 -bail '%s' && sqlite3 '%s' '%s;"
                 " INSERT INTO schema_migrations VALUES (7, \"007\", 0)'",
                 COHORT_SOURCE_DIR, db + 7, db + 7, mig);
    }
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    /* job 1: two ranks on 1970-01-01 (one past midnight, UTC); job 3: a rank on
     * 1970-01-31 and its retry on 1970-02-01 */
    sql("INSERT INTO ledger(tenant_id, at, kind, amount, currency) VALUES (1, 1, 'credit', 1000,"
        " 'USD'); INSERT INTO ledger(tenant_id, at, kind, amount, currency, job_id, attempt, rank,"
        " job_name, user_id, worker_spec, gpus, seconds)"
        " VALUES (1, 2, 'charge', 30, 'USD', 1, 1, 0, 'a', 7, 'gpu-1x', 1, 60),"
        " (1, 3, 'charge', 12, 'USD', 1, 1, 1, 'a', 7, 'gpu-1x', 1, 40),"
        " (1, 2678399999, 'charge', 5, 'USD', 3, 1, 0, 'c', 7, NULL, 0, 9),"
        " (1, 2678400000, 'charge', 6, 'USD', 3, 2, 0, 'c', 8, 'cpu-small', NULL, NULL)",
        out, sizeof out);
    sql("SELECT balance FROM accounts WHERE tenant_id = 1", out, sizeof out);
    cr_assert_str_eq(out, "947\n", "the schema 7 trigger");
    /* jobs that ended, and one that runs, to be counted by 12 */
    sql("INSERT INTO users(id, tenant_id, name, role, created_at) VALUES (7, 1, 'u', 'member', 0);"
        " INSERT INTO jobs(tenant_id, user_id, name, image, framework, workspace, code_path,"
        " epochs, lr, batch_size, worker_spec, cpus, memory_mb, gpus, worker_count, currency,"
        " price_per_hour, created_at, updated_at, state)"
        " VALUES (1, 7, 'a', 'i', 'native', 'ws', 'c', 1, 0.1, 1, 's', 1, 1, 0, 1, 'USD', 1, 0, 0,"
        " 'SUCCEEDED'), (1, 7, 'b', 'i', 'native', 'ws', 'c', 1, 0.1, 1, 's', 1, 1, 0, 1, 'USD',"
        " 1, 0, 0, 'FAILED'), (1, 7, 'c', 'i', 'native', 'ws', 'c', 1, 0.1, 1, 's', 1, 1, 0, 1,"
        " 'USD', 1, 0, 0, 'SUCCEEDED'), (1, 7, 'd', 'i', 'native', 'ws', 'c', 1, 0.1, 1, 's', 1,"
        " 1, 0, 1, 'USD', 1, 0, 0, 'RUNNING')",
        out, sizeof out);

    store *s = store_open(db, err, sizeof err);
    cr_assert(s, "%s", err);
    cr_expect_eq(store_schema_version(s), store_schema_known());
    cr_expect_eq(store_schema_known(), 18);
    store_close(s);
    sql("SELECT balance, charged FROM accounts WHERE tenant_id = 1", out, sizeof out);
    cr_expect_str_eq(out, "947|53\n");
    sql("SELECT tenant_id, state, jobs FROM job_end_counts ORDER BY tenant_id, state", out,
        sizeof out);
    cr_expect_str_eq(out, "1|FAILED|1\n1|SUCCEEDED|2\n", "job_end_counts filled from the jobs");
    static const char days[] =
        "SELECT day, user_id, worker_spec, entries, worker_seconds, gpu_seconds, amount, currency"
        " FROM usage_days ORDER BY day, user_id, worker_spec";
    static const char months[] =
        "SELECT month, job_id, job_name, entries, worker_seconds, gpu_seconds, amount, currency"
        " FROM usage_job_months ORDER BY month, job_id";
    sql(days, out, sizeof out);
    cr_expect_str_eq(out,
                     "0|7|gpu-1x|2|100|100|42|USD\n30|7||1|9|0|5|USD\n"
                     "31|8|cpu-small|1|0|0|6|USD\n",
                     "usage_days filled from the ledger");
    sql(months, out, sizeof out);
    cr_expect_str_eq(out,
                     "0|1|a|2|100|100|42|USD\n0|3|c|1|9|0|5|USD\n"
                     "2678400000|3|c|1|0|0|6|USD\n",
                     "usage_job_months filled from the ledger");
    /* from here on the trigger adds each charge, and no credit */
    sql("INSERT INTO ledger(tenant_id, at, kind, amount, currency, job_id, attempt, rank,"
        " job_name, user_id, worker_spec, gpus, seconds)"
        " VALUES (1, 4, 'charge', 8, 'USD', 2, 1, 0, 'b', 7, 'gpu-1x', 2, 5),"
        " (1, 2678400001, 'charge', 1, 'USD', 3, 2, 1, 'c', 8, 'cpu-small', 0, 3);"
        " INSERT INTO ledger(tenant_id, at, kind, amount, currency) VALUES (1, 5, 'credit', 100,"
        " 'USD')",
        out, sizeof out);
    sql("SELECT balance, charged FROM accounts WHERE tenant_id = 1", out, sizeof out);
    cr_expect_str_eq(out, "1038|62\n", "the trigger of schema 8");
    sql(days, out, sizeof out);
    cr_expect_str_eq(out,
                     "0|7|gpu-1x|3|105|110|50|USD\n30|7||1|9|0|5|USD\n"
                     "31|8|cpu-small|2|3|0|7|USD\n",
                     "usage_days kept by the trigger");
    sql(months, out, sizeof out);
    cr_expect_str_eq(out,
                     "0|1|a|2|100|100|42|USD\n0|2|b|1|5|10|8|USD\n0|3|c|1|9|0|5|USD\n"
                     "2678400000|3|c|2|3|0|7|USD\n",
                     "usage_job_months kept by the trigger");
}

struct insert {
    store *s;
    int base;
    int failures;
};

static store_rc tenant_write(store_tx *tx, void *arg)
{
    int64_t id;
    return store_tenant_insert(tx, arg, &id);
}

static void *writer(void *arg)
{
    struct insert *in = arg;
    for (int i = 0; i < 200; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d-%d", in->base, i);
        if (store_write(in->s, tenant_write, name) != STORE_OK)
            in->failures++;
    }
    return NULL;
}

Test(store, group_commit_batches_concurrent_writes)
{
    char err[256];
    store *s = store_open(db, err, sizeof err);
    cr_assert(s, "%s", err);
    pthread_t t[16];
    struct insert in[16];
    for (int i = 0; i < 16; i++) {
        in[i] = (struct insert){s, i, 0};
        pthread_create(&t[i], NULL, writer, &in[i]);
    }
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(in[i].failures, 0);
    }
    uint64_t batches, writes;
    store_writer_stats(s, &batches, &writes);
    cr_expect_eq(writes, 3200);
    cr_expect_lt(batches, writes, "no two writes shared a commit");
    cr_log_info("3200 writes in %llu commits", (unsigned long long)batches);
    /* A failing write rolls back only itself. */
    cr_expect_eq(store_write(s, tenant_write, "t0-0"), STORE_CONFLICT);
    store_close(s);
    char out[64];
    sql("SELECT count(*) FROM tenants WHERE is_platform = 0", out, sizeof out);
    cr_expect_str_eq(out, "3200\n");
}

static void queued_done(void *arg, store_rc rc)
{
    *(int *)arg = rc;
}

/*
 * Writes queued together share a batch; one that fails in the middle
 * (here every third, a duplicate name) is undone alone and answered
 * CONFLICT, and every write around it is committed.  On PostgreSQL the
 * savepoints between writes ride with the next write's first statement.
 */
Test(store, a_failing_write_inside_a_batch_is_undone_alone)
{
    char err[256];
    store *s = store_open(db, err, sizeof err);
    cr_assert(s, "%s", err);
    cr_assert_eq(store_write(s, tenant_write, "dup"), STORE_OK);
    static char names[60][16];
    static int rc[60];
    for (int i = 0; i < 60; i++) {
        rc[i] = 1; /* not answered yet */
        if (i % 3 == 1)
            snprintf(names[i], sizeof names[i], "dup");
        else
            snprintf(names[i], sizeof names[i], "q%d", i);
        cr_assert_eq(store_submit(s, tenant_write, names[i], queued_done, &rc[i]), 0);
    }
    /* Answered after every write queued before it. */
    cr_assert_eq(store_write(s, tenant_write, "last"), STORE_OK);
    uint64_t batches, writes;
    store_writer_stats(s, &batches, &writes);
    cr_expect_lt(batches, writes, "no two writes shared a batch");
    store_close(s);
    int conflicts = 0, ok = 0;
    for (int i = 0; i < 60; i++) {
        if (i % 3 == 1)
            conflicts += rc[i] == STORE_CONFLICT;
        else
            ok += rc[i] == STORE_OK;
    }
    cr_expect_eq(conflicts, 20);
    cr_expect_eq(ok, 40);
    char out[64];
    sql("SELECT count(*) FROM tenants WHERE is_platform = 0", out, sizeof out);
    cr_expect_str_eq(out, "42\n");
}

/* ---- creates queued together: store_submit_many ---- */

#define GROUPED 37 /* rows in statements of 16, 16, 4 and 1 */

struct owner {
    int64_t tenant, user;
};

static store_rc owner_write(store_tx *tx, void *arg)
{
    struct owner *o = arg;
    int rc = store_tenant_insert(tx, "grouped", &o->tenant);
    return rc ? rc : store_user_insert(tx, o->tenant, "u", "member", &o->user);
}

/* Holds the writer until released: what is queued meanwhile goes in
 * the next batch together. */
struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    int entered, open;
};

static store_rc gate_write(store_tx *tx, void *arg)
{
    (void)tx;
    struct gate *g = arg;
    pthread_mutex_lock(&g->m);
    g->entered = 1;
    pthread_cond_broadcast(&g->c);
    while (!g->open)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
    return STORE_OK;
}

static void ignore_done(void *arg, store_rc rc)
{
    (void)arg;
    (void)rc;
}

static store_rc job_one(store_tx *tx, void *arg)
{
    return store_job_insert(tx, arg);
}

static int many_calls, many_rows, many_ok;

static store_rc job_many(store_tx *tx, void *const *ctxs, int n)
{
    store_job *js[GROUPED];
    many_calls++;
    many_rows += n;
    for (int i = 0; i < n; i++)
        js[i] = ctxs[i];
    int rc = store_job_insert_many(tx, js, n);
    many_ok += rc == STORE_OK;
    return rc;
}

static void event_count(void *arg, const store_event *e)
{
    cr_expect_str_eq(e->to_state, "PENDING");
    (*(int *)arg)++;
}

/* Queues GROUPED creates behind a held write, dup_at (if >= 0) with the
 * Idempotency-Key of job 0; returns their answers in rc[]. */
static store *queue_creates(store_job *js, int *rc, int dup_at, struct owner *who)
{
    char err[256];
    store *s = store_open(db, err, sizeof err);
    cr_assert(s, "%s", err);
    cr_assert_eq(store_write(s, owner_write, who), STORE_OK);
    static struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    cr_assert_eq(store_submit(s, gate_write, &g, ignore_done, NULL), 0);
    /* The writer holds the gate's batch: nothing queued now joins it. */
    pthread_mutex_lock(&g.m);
    while (!g.entered)
        pthread_cond_wait(&g.c, &g.m);
    pthread_mutex_unlock(&g.m);
    many_calls = many_rows = many_ok = 0;
    for (int i = 0; i < GROUPED; i++) {
        store_job *j = &js[i];
        *j = (store_job){.tenant_id = who->tenant,
                         .user_id = who->user,
                         .epochs = 1 + i,
                         .lr = 0.5,
                         .batch_size = 8,
                         .cpus = 1,
                         .memory_mb = 64,
                         .worker_count = 1 + i % 3,
                         .max_retries = 0,
                         .price_per_hour = 10 * i,
                         .estimated_max = i % 2 ? -1 : 100 + i};
        snprintf(j->name, sizeof j->name, "g%02d", i);
        snprintf(j->image, sizeof j->image, "native");
        snprintf(j->framework, sizeof j->framework, "native");
        snprintf(j->workspace, sizeof j->workspace, "ws");
        snprintf(j->code_path, sizeof j->code_path, "train");
        snprintf(j->worker_spec, sizeof j->worker_spec, "cpu-small");
        snprintf(j->currency, sizeof j->currency, "USD");
        if (i == 0 || i == dup_at)
            snprintf(j->idem_key, sizeof j->idem_key, "key-0");
        j->datasets_json = strdup("[]");
        j->args_json = strdup("[]");
        j->env_json = strdup("{}");
        rc[i] = 1; /* not answered yet */
        cr_assert_eq(store_submit_many(s, job_one, job_many, j, queued_done, &rc[i]), 0);
    }
    pthread_mutex_lock(&g.m);
    g.open = 1;
    pthread_cond_broadcast(&g.c);
    pthread_mutex_unlock(&g.m);
    return s;
}

/* Every job stored is the one its id was given to, with its submit event. */
static void expect_stored(store *s, store_job *js, const int *rc, const struct owner *who)
{
    for (int i = 0; i < GROUPED; i++) {
        store_job got;
        if (rc[i] != STORE_OK) {
            store_job_clear(&js[i]);
            continue;
        }
        cr_assert_eq(store_job_get(s, who->tenant, js[i].id, &got), STORE_OK, "job %d", i);
        cr_expect_str_eq(got.name, js[i].name, "id %lld", (long long)js[i].id);
        cr_expect_eq(got.epochs, 1 + i);
        cr_expect_eq(got.worker_count, 1 + i % 3);
        cr_expect_eq(got.estimated_max, i % 2 ? -1 : 100 + i);
        cr_expect_eq(got.state, JOB_PENDING);
        cr_expect_eq(got.created_at, js[i].created_at);
        int events = 0;
        cr_expect_eq(store_job_events(s, js[i].id, 0, 10, event_count, &events), STORE_OK);
        cr_expect_eq(events, 1, "job %d has %d submit events", i, events);
        store_job_clear(&got);
        store_job_clear(&js[i]);
    }
}

/*
 * Creates queued one after another go to their many together: 37 rows in
 * 4 statements, and each job gets the id of its own row (the rows'
 * RETURNING order is not relied on), its values and its submit event.
 */
Test(store, creates_queued_together_are_inserted_together_each_with_its_own_id)
{
    static store_job js[GROUPED];
    static int rc[GROUPED];
    struct owner who;
    store *s = queue_creates(js, rc, -1, &who);
    /* Answered after every write queued before it. */
    cr_assert_eq(store_write(s, tenant_write, "after"), STORE_OK);
    cr_expect_eq(many_calls, 1, "the creates were not handed over together");
    cr_expect_eq(many_rows, GROUPED);
    cr_expect_eq(many_ok, 1, "the rows were not inserted together");
    for (int i = 0; i < GROUPED; i++) {
        cr_expect_eq(rc[i], STORE_OK, "job %d: %s", i, store_rc_name(rc[i]));
        for (int k = 0; k < i; k++)
            cr_expect_neq(js[i].id, js[k].id);
    }
    expect_stored(s, js, rc, &who);
    store_close(s);
    char out[64];
    sql("SELECT count(*) FROM jobs", out, sizeof out);
    cr_expect_str_eq(out, "37\n");
}

/*
 * One create of the group refused (its Idempotency-Key is job 0's): the
 * group is undone and each is run alone, so that one gets its CONFLICT
 * and the 36 others are stored, each under its own id.
 */
Test(store, a_refused_create_in_a_group_fails_alone)
{
    static store_job js[GROUPED];
    static int rc[GROUPED];
    struct owner who;
    store *s = queue_creates(js, rc, 21, &who);
    cr_assert_eq(store_write(s, tenant_write, "after"), STORE_OK);
    cr_expect_eq(many_calls, 1);
    cr_expect_eq(many_ok, 0);
    for (int i = 0; i < GROUPED; i++)
        cr_expect_eq(rc[i], i == 21 ? STORE_CONFLICT : STORE_OK, "job %d: %s", i,
                     store_rc_name(rc[i]));
    expect_stored(s, js, rc, &who);
    store_close(s);
    char out[64];
    sql("SELECT count(*) FROM jobs", out, sizeof out);
    cr_expect_str_eq(out, "36\n");
    sql("SELECT count(*) FROM job_events", out, sizeof out);
    cr_expect_str_eq(out, "36\n");
}

/* ---- the running counts of ended jobs (migration 012) ---- */

#define MOVES 8

/* Changes of state (and deletes, to == JOB_NSTATES) made in one write. */
struct moves {
    int n;
    int64_t id[MOVES];
    job_state from[MOVES], to[MOVES];
};

static store_rc moves_write(store_tx *tx, void *arg)
{
    const struct moves *m = arg;
    for (int i = 0; i < m->n; i++) {
        int rc = m->to[i] == JOB_NSTATES
                     ? store_job_delete(tx, m->id[i])
                     : store_job_transition(tx, m->id[i], m->from[i], m->to[i], "test");
        if (rc != STORE_OK)
            return rc;
    }
    return STORE_OK;
}

static void move(struct moves *m, int64_t id, job_state from, job_state to)
{
    cr_assert_lt(m->n, MOVES);
    m->id[m->n] = id;
    m->from[m->n] = from;
    m->to[m->n++] = to;
}

static void count_into(void *arg, const char *state, int64_t n)
{
    int64_t *counts = arg;
    int i = store_job_state_of(state);
    cr_assert_geq(i, 0, "a count for %s", state);
    counts[i] += n;
}

/* What /metrics is given is what counting the jobs themselves says, state
 * by state, and the running counts hold per tenant. */
static void expect_counts(store *s, const char *when)
{
    int64_t counts[JOB_NSTATES] = {0};
    char q[600], out[64];
    cr_assert_eq(store_job_state_counts(s, count_into, counts), STORE_OK);
    for (int i = 0; i < JOB_NSTATES; i++) {
        snprintf(q, sizeof q, "SELECT count(*) FROM jobs WHERE state = '%s'",
                 store_job_state_name((job_state)i));
        sql(q, out, sizeof out);
        cr_expect_eq(counts[i], atoll(out), "%s: %s counted %lld, the jobs say %s", when,
                     store_job_state_name((job_state)i), (long long)counts[i], out);
    }
    sql("SELECT count(*) FROM (SELECT tenant_id, state, count(*) AS n FROM jobs"
        " WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') GROUP BY tenant_id, state) g"
        " FULL JOIN job_end_counts e ON e.tenant_id = g.tenant_id AND e.state = g.state"
        " WHERE coalesce(g.n, 0) <> coalesce(e.jobs, 0)",
        out, sizeof out);
    cr_expect_str_eq(out, "0\n", "%s: tenants' counts that differ from their jobs", when);
}

/*
 * Jobs end, in every ending state and several in one write; one leaves an
 * ending state again, one ended job is deleted, and jobs are inserted
 * already ended for another tenant: after each step the counts /metrics
 * reads equal what counting the jobs says.
 */
Test(store, the_counts_of_ended_jobs_follow_every_change_of_state)
{
    static store_job js[GROUPED];
    static int rc[GROUPED];
    struct owner who;
    store *s = queue_creates(js, rc, -1, &who);
    cr_assert_eq(store_write(s, tenant_write, "after"), STORE_OK);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(rc[i], STORE_OK);
    expect_counts(s, "created");

    struct moves m = {0};
    move(&m, js[0].id, JOB_PENDING, JOB_STARTING);
    move(&m, js[0].id, JOB_STARTING, JOB_RUNNING);
    move(&m, js[0].id, JOB_RUNNING, JOB_SUCCEEDED);
    move(&m, js[1].id, JOB_PENDING, JOB_CANCELLED);
    move(&m, js[2].id, JOB_PENDING, JOB_STARTING);
    move(&m, js[2].id, JOB_STARTING, JOB_FAILED);
    move(&m, js[3].id, JOB_PENDING, JOB_CANCELLED);
    move(&m, js[4].id, JOB_PENDING, JOB_STARTING);
    cr_assert_eq(store_write(s, moves_write, &m), STORE_OK);
    expect_counts(s, "ended in one write");

    m = (struct moves){0};
    move(&m, js[2].id, JOB_FAILED, JOB_PENDING);
    move(&m, js[1].id, JOB_CANCELLED, JOB_NSTATES);
    move(&m, js[4].id, JOB_STARTING, JOB_SUCCEEDED);
    cr_assert_eq(store_write(s, moves_write, &m), STORE_OK);
    expect_counts(s, "one queued again, one deleted");
    char out[64];
    sql("SELECT jobs FROM job_end_counts WHERE state = 'FAILED'", out, sizeof out);
    cr_expect_str_eq(out, "0\n", "the failed job that was queued again");

    /* already ended, for the platform's tenant (id 1), from jobs 5 to 9 */
    char q[1200];
    snprintf(q, sizeof q,
             "INSERT INTO jobs(tenant_id, user_id, name, image, framework, workspace, code_path,"
             " epochs, lr, batch_size, worker_spec, cpus, memory_mb, gpus, worker_count,"
             " currency, price_per_hour, created_at, updated_at, state)"
             " SELECT 1, user_id, name, image, framework, workspace, code_path, epochs, lr,"
             " batch_size, worker_spec, cpus, memory_mb, gpus, worker_count, currency,"
             " price_per_hour, created_at, updated_at,"
             " CASE WHEN epochs %% 2 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END"
             " FROM jobs WHERE id BETWEEN %lld AND %lld",
             (long long)js[5].id, (long long)js[9].id);
    sql(q, out, sizeof out);
    expect_counts(s, "inserted ended");
    sql("SELECT count(*) FROM job_end_counts WHERE tenant_id = 1", out, sizeof out);
    cr_expect_str_eq(out, "2\n", "the platform tenant's counts");
    store_close(s);
}

/* One name table for job states: every state's name reads back as it, and
 * nothing else (the API's spelling, case included) names a state. */
Test(store, job_state_names_read_back_and_nothing_else_names_one)
{
    for (int s = 0; s < JOB_NSTATES; s++) {
        const char *name = store_job_state_name((job_state)s);
        cr_expect_neq(name[0], '\0', "state %d has no name", s);
        cr_expect_eq(store_job_state_of(name), s, "%s", name);
    }
    cr_expect_str_eq(store_job_state_name(JOB_CANCELLED), "CANCELLED");
    cr_expect_eq(store_job_state_of("pending"), -1);
    cr_expect_eq(store_job_state_of(""), -1);
    cr_expect_eq(store_job_state_of(NULL), -1);
    cr_expect_str_eq(store_job_state_name(JOB_NSTATES), "");
    cr_expect(store_job_state_final(JOB_FAILED) && !store_job_state_final(JOB_RUNNING));
}

/* One result code: every code has its own name, the job lifecycle's
 * refusals included (they once shared -100 between two layers). */
Test(store, every_result_code_has_a_name_of_its_own)
{
    const int codes[] = {STORE_OK,        STORE_NOTFOUND,   STORE_CONFLICT,
                         STORE_EIO,       STORE_INVALID,    STORE_NOMEM,
                         STORE_BUSY,      STORE_FULL,       STORE_JOB_FINAL,
                         STORE_JOB_ACTIVE, STORE_JOB_NOT_RETRYABLE, STORE_JOB_STOPPING,
                         STORE_DOWN};
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        cr_expect_str_neq(store_rc_name(codes[i]), "STORE_?", "code %d", codes[i]);
        for (size_t k = 0; k < i; k++)
            cr_expect_str_neq(store_rc_name(codes[i]), store_rc_name(codes[k]));
    }
    cr_expect_str_eq(store_rc_name(STORE_JOB_FINAL), "STORE_JOB_FINAL");
    cr_expect_str_eq(store_rc_name(-100), "STORE_?");
    cr_expect_str_eq(store_rc_name(1), "STORE_?");
}

/* ---- metering without root: the store and a clock of the test's own ---- */

struct charge_ids {
    int64_t w[2];
};

static store_rc charge_write(store_tx *tx, void *arg)
{
    const struct charge_ids *c = arg;
    int rc = STORE_OK;
    for (int i = 0; rc == STORE_OK && i < 2; i++)
        rc = store_charge_worker(tx, c->w[i]);
    return rc;
}

/*
 * A rank's charge, as its end reports it: whole seconds from its start to
 * its end, at most max_runtime_seconds, unless it ended by SIGKILL (it
 * ignored the SIGTERM of its stop and ran through the stop grace), which
 * is billed up to max_runtime + STORE_BILL_GRACE_S.  Times are the test's
 * own (ms since the epoch 0): no agent, no root, no sleeping.
 */
Test(store, a_killed_rank_pays_its_stop_grace_and_a_polite_one_its_cap)
{
    char err[256], out[256];
    store *s = store_open(db, err, sizeof err);
    cr_assert(s, "%s", err);
    /* 3,600 an hour: one unit a second.  Both ranks ran 12 s against a cap of 2. */
    char q[2048];
    snprintf(q, sizeof q,
        "INSERT INTO tenants(id, name, created_at) VALUES (5, 'acme', 0);"
        " INSERT INTO users(id, tenant_id, name, role, created_at) VALUES (9, 5, 'u', 'member', 0);"
        " INSERT INTO nodes(id, name, address, cpus, memory_mb, port_lo, port_hi, token_hash,"
        " registered_at, last_heartbeat) VALUES (3, 'n', '127.0.0.1', 4, 4096, 30000, 30099,"
        " %s, 0, 0);"
        " INSERT INTO jobs(id, tenant_id, user_id, name, image, framework, workspace, code_path,"
        " epochs, lr, batch_size, worker_spec, cpus, memory_mb, gpus, worker_count, currency,"
        " price_per_hour, created_at, updated_at, state, max_runtime_seconds)"
        " VALUES (11, 5, 9, 'j', 'i', 'native', 'ws', 'c', 1, 0.1, 1, 's', 1, 1, 0, 2, 'USD', 3600,"
        " 0, 0, 'FAILED', 2);"
        " INSERT INTO workers(id, job_id, attempt, rank, node_rank, local_rank, node_id, state,"
        " signal, created_at, started_at, finished_at) VALUES"
        " (21, 11, 1, 0, 0, 0, 3, 'exited', 9, 0, 1000, 13000),"
        " (22, 11, 1, 1, 0, 1, 3, 'exited', 15, 0, 1000, 13000)",
        th_pg() ? "'\\x00'::bytea" : "x'00'");
    sql(q, out, sizeof out);
    struct charge_ids c = {{21, 22}};
    cr_assert_eq(store_write(s, charge_write, &c), STORE_OK);
    sql("SELECT rank, seconds, amount FROM ledger WHERE kind = 'charge' AND job_id = 11"
        " ORDER BY rank", out, sizeof out);
    cr_expect_str_eq(out, "0|12|12\n1|2|2\n",
                     "the killed rank pays its 12 s, the polite one its cap of 2: %s", out);
    /* charged once: a second report changes nothing */
    cr_assert_eq(store_write(s, charge_write, &c), STORE_OK);
    sql("SELECT count(*), sum(amount) FROM ledger WHERE kind = 'charge'", out, sizeof out);
    cr_expect_str_eq(out, "2|14\n", "%s", out);
    store_close(s);
}
