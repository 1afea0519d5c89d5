/*
 * store_job: SQL for jobs and job_events.
 */
#include "storage/store_job.h"
#include "lib/fmt.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/store_int.h"

#define JOB_COLS                                                                           \
    "j.id, j.tenant_id, j.user_id, t.name, u.name, j.name, j.image, j.framework,"          \
    " j.workspace, j.code_path, j.datasets_json, j.args_json, j.env_json, j.epochs, j.lr," \
    " j.batch_size, j.worker_spec, j.cpus, j.memory_mb, j.gpus, j.worker_count,"           \
    " coalesce(j.workers_per_node, 0), j.priority, coalesce(j.max_runtime_seconds, 0),"    \
    " j.max_retries, j.currency, j.price_per_hour, coalesce(j.estimated_max, -1), j.state," \
    " coalesce(j.reason, ''), j.attempt, coalesce(j.idempotency_key, ''), j.request_hash," \
    " j.created_at, j.updated_at, coalesce(j.started_at, 0), coalesce(j.finished_at, 0),"     \
    " coalesce(j.master_node_id, 0), coalesce(j.master_port, 0), coalesce(j.placed_per_node, 0),"   \
    " coalesce(j.image_digest, ''), coalesce(j.rdzv_secret, '')"
#define JOB_FROM                                                                           \
    " FROM jobs j JOIN tenants t ON t.id = j.tenant_id JOIN users u ON u.id = j.user_id"

void store_job_clear(store_job *j)
{
    free(j->datasets_json);
    free(j->args_json);
    free(j->env_json);
    j->datasets_json = j->args_json = j->env_json = NULL;
}

static const char *const state_names[JOB_NSTATES] = {"PENDING",   "STARTING", "RUNNING",
                                                     "SUCCEEDED", "FAILED",   "CANCELLED"};

const char *store_job_state_name(job_state s)
{
    return s >= 0 && s < JOB_NSTATES ? state_names[s] : "";
}

int store_job_state_of(const char *name)
{
    for (int i = 0; name && i < JOB_NSTATES; i++)
        if (!strcmp(name, state_names[i]))
            return i;
    return -1;
}

int store_job_state_final(job_state s)
{
    return s == JOB_SUCCEEDED || s == JOB_FAILED || s == JOB_CANCELLED;
}

/* A state column: the schema's CHECK admits only the names above. */
static job_state state_col(store_st *st, int i)
{
    int s = store_job_state_of(store_col_text(st, i));
    return s < 0 ? JOB_FAILED : (job_state)s;
}

static int job_row(store_st *st, store_job *j)
{
    int i = 0; /* every field is assigned below: no memset of the large struct */
    j->id = store_col_int64(st, i++);
    j->tenant_id = store_col_int64(st, i++);
    j->user_id = store_col_int64(st, i++);
    store_col_copy(st, i++, j->tenant, sizeof j->tenant);
    store_col_copy(st, i++, j->user, sizeof j->user);
    store_col_copy(st, i++, j->name, sizeof j->name);
    store_col_copy(st, i++, j->image, sizeof j->image);
    store_col_copy(st, i++, j->framework, sizeof j->framework);
    store_col_copy(st, i++, j->workspace, sizeof j->workspace);
    store_col_copy(st, i++, j->code_path, sizeof j->code_path);
    j->datasets_json = store_col_strdup(st, i++);
    j->args_json = store_col_strdup(st, i++);
    j->env_json = store_col_strdup(st, i++);
    j->epochs = store_col_int64(st, i++);
    j->lr = store_col_double(st, i++);
    j->batch_size = store_col_int64(st, i++);
    store_col_copy(st, i++, j->worker_spec, sizeof j->worker_spec);
    j->cpus = store_col_int64(st, i++);
    j->memory_mb = store_col_int64(st, i++);
    j->gpus = store_col_int64(st, i++);
    j->worker_count = store_col_int64(st, i++);
    j->workers_per_node = store_col_int64(st, i++);
    j->priority = store_col_int64(st, i++);
    j->max_runtime_seconds = store_col_int64(st, i++);
    j->max_retries = store_col_int64(st, i++);
    store_col_copy(st, i++, j->currency, sizeof j->currency);
    j->price_per_hour = store_col_int64(st, i++);
    j->estimated_max = store_col_int64(st, i++);
    j->state = state_col(st, i++);
    store_col_copy(st, i++, j->reason, sizeof j->reason);
    j->attempt = store_col_int64(st, i++);
    store_col_copy(st, i++, j->idem_key, sizeof j->idem_key);
    int hlen;
    const void *h = store_col_blob(st, i, &hlen);
    if (hlen == UTIL_SHA256_LEN)
        memcpy(j->request_hash, h, UTIL_SHA256_LEN);
    else
        memset(j->request_hash, 0, UTIL_SHA256_LEN);
    i++;
    j->created_at = store_col_int64(st, i++);
    j->updated_at = store_col_int64(st, i++);
    j->started_at = store_col_int64(st, i++);
    j->finished_at = store_col_int64(st, i++);
    j->master_node_id = store_col_int64(st, i++);
    j->master_port = store_col_int64(st, i++);
    j->placed_per_node = store_col_int64(st, i++);
    store_col_copy(st, i++, j->image_digest, sizeof j->image_digest);
    store_col_copy(st, i++, j->rdzv_secret, sizeof j->rdzv_secret);
    if (!j->datasets_json || !j->args_json || !j->env_json) {
        store_job_clear(j);
        return STORE_NOMEM;
    }
    return STORE_OK;
}

static int event_insert(store_conn *c, int64_t job_id, int64_t at, int64_t attempt,
                        const char *from, const char *to, const char *reason)
{
    static const char sql[] =
        "INSERT INTO job_events(job_id, at, attempt, from_state, to_state, reason)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
    return store_exec(c, NULL, sql, STORE_ARGS(STORE_I(job_id), STORE_I(at), STORE_I(attempt),
            STORE_T(from), STORE_T(to), STORE_T(reason && reason[0] ? reason : NULL)));
}

store_rc store_job_note(store_tx *tx, int64_t job_id, int64_t attempt, const char *reason)
{
    static const char sql[] = "SELECT state FROM jobs WHERE id = ?1";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, sql);
    char state[16];
    int rc;
    if (!st)
        return STORE_EIO;
    store_bind_int64(st, 1, job_id);
    rc = store_step(st);
    if (rc == STORE_ROW)
        fmt_cut(state, sizeof state, "%s", store_col_text(st, 0)); /* a state's name */
    store_reset(st);
    if (rc != STORE_ROW)
        return rc == STORE_DONE ? STORE_NOTFOUND : rc;
    return event_insert(c, job_id, util_now_ms(), attempt, state, state, reason);
}

#define JOB_INSERT                                                                                 \
    "INSERT INTO jobs(tenant_id, user_id, name, image, framework, workspace, code_path,"           \
    " datasets_json, args_json, env_json, epochs, lr, batch_size, worker_spec, cpus,"              \
    " memory_mb, gpus, worker_count, workers_per_node, priority, max_runtime_seconds,"             \
    " max_retries, currency, price_per_hour, estimated_max, state, reason, attempt,"               \
    " idempotency_key, request_hash, created_at, updated_at) VALUES "
#define JOB_INSERT_PARAMS 29 /* the ?N of one row */
/* One row's values, parameters from ?(base+1): "'PENDING'" and attempt 1
 * written in, created_at twice. */
#define JOB_INSERT_ROW                                                                             \
    "(?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d,"        \
    " ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, ?%d, 'PENDING', ?%d, 1, ?%d, ?%d, ?%d, ?%d)"
#define ROW_ARGS(b)                                                                                \
    b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10, b + 11, b + 12, b + 13, \
        b + 14, b + 15, b + 16, b + 17, b + 18, b + 19, b + 20, b + 21, b + 22, b + 23, b + 24,    \
        b + 25, b + 26, b + 27, b + 28, b + 29, b + 29

#define INSERT_SIZES 5 /* statements of 1, 2, 4, 8 and 16 rows */
#define INSERT_ROWS_MAX (1 << (INSERT_SIZES - 1))
/* Room for INSERT_ROWS_MAX rows of 3-digit parameters. */
#define INSERT_SQL_MAX (sizeof JOB_INSERT + INSERT_ROWS_MAX * (sizeof JOB_INSERT_ROW + 72) + 16)

static char insert_text[INSERT_SIZES][INSERT_SQL_MAX];
static pthread_once_t insert_once = PTHREAD_ONCE_INIT;

static void insert_init(void)
{
    for (int i = 0; i < INSERT_SIZES; i++) {
        char *o = insert_text[i], *end = o + INSERT_SQL_MAX;
        int bad = fmt_whole(o, (size_t)(end - o), "%s", JOB_INSERT);
        for (int r = 0; !bad && r < 1 << i; r++) {
            int b = r * JOB_INSERT_PARAMS;
            o += strlen(o);
            bad = fmt_whole(o, (size_t)(end - o), "%s" JOB_INSERT_ROW, r ? ", " : "",
                            ROW_ARGS(b));
        }
        o += strlen(o);
        if (bad || fmt_whole(o, (size_t)(end - o), " RETURNING id") != 0)
            insert_text[i][0] = '\0'; /* never: sized above; the prepare then fails */
    }
}

/* The insert of 1 << i rows: one text per size, for the statement caches,
 * which know a statement by its address. */
static const char *insert_sql(int i)
{
    pthread_once(&insert_once, insert_init);
    return insert_text[i];
}

/* Binds j as the row whose parameters start after base. */
static void bind_job(store_st *st, int base, const store_job *j, int64_t now)
{
    store_bind_int64(st, base + 1, j->tenant_id);
    store_bind_int64(st, base + 2, j->user_id);
    store_bind_text(st, base + 3, j->name);
    store_bind_text(st, base + 4, j->image);
    store_bind_text(st, base + 5, j->framework);
    store_bind_text(st, base + 6, j->workspace);
    store_bind_text(st, base + 7, j->code_path);
    store_bind_text(st, base + 8, j->datasets_json);
    store_bind_text(st, base + 9, j->args_json);
    store_bind_text(st, base + 10, j->env_json);
    store_bind_int64(st, base + 11, j->epochs);
    store_bind_double(st, base + 12, j->lr);
    store_bind_int64(st, base + 13, j->batch_size);
    store_bind_text(st, base + 14, j->worker_spec);
    store_bind_int64(st, base + 15, j->cpus);
    store_bind_int64(st, base + 16, j->memory_mb);
    store_bind_int64(st, base + 17, j->gpus);
    store_bind_int64(st, base + 18, j->worker_count);
    if (j->workers_per_node > 0)
        store_bind_int64(st, base + 19, j->workers_per_node);
    store_bind_int64(st, base + 20, j->priority);
    if (j->max_runtime_seconds > 0)
        store_bind_int64(st, base + 21, j->max_runtime_seconds);
    store_bind_int64(st, base + 22, j->max_retries);
    store_bind_text(st, base + 23, j->currency);
    store_bind_int64(st, base + 24, j->price_per_hour);
    if (j->estimated_max >= 0)
        store_bind_int64(st, base + 25, j->estimated_max);
    store_bind_text(st, base + 26, j->reason[0] ? j->reason : NULL);
    if (j->idem_key[0]) {
        store_bind_text(st, base + 27, j->idem_key);
        store_bind_blob(st, base + 28, j->request_hash, UTIL_SHA256_LEN);
    }
    store_bind_int64(st, base + 29, now);
}

/* What the insert set on a job that had no id. */
static void job_inserted(store_job *j, int64_t id, int64_t now)
{
    j->id = id;
    j->state = JOB_PENDING;
    j->attempt = 1;
    j->created_at = j->updated_at = now;
}

store_rc store_job_insert(store_tx *tx, store_job *j)
{
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, insert_sql(0));
    if (!st)
        return STORE_EIO;
    int64_t now = util_now_ms(), id = 0;
    bind_job(st, 0, j, now);
    /* Its first event (submitted) comes with it: the jobs_submitted trigger. */
    int rc = store_step_change(c, st, &id);
    if (rc == STORE_OK)
        job_inserted(j, id, now);
    return rc;
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Inserts the 1 << i jobs of js in one statement. */
static int insert_rows(store_conn *c, store_job *const *js, int i)
{
    int n = 1 << i, got = 0, rc;
    int64_t now = util_now_ms(), ids[INSERT_ROWS_MAX];
    store_st *st = store_stmt(c, insert_sql(i));
    if (!st)
        return STORE_EIO;
    for (int r = 0; r < n; r++)
        bind_job(st, r * JOB_INSERT_PARAMS, js[r], now);
    while ((rc = store_step(st)) == STORE_ROW)
        if (got < n)
            ids[got++] = store_col_int64(st, 0);
    store_reset(st);
    if (rc != STORE_DONE)
        return rc;
    if (got != n)
        return STORE_EIO;
    /* Ids come from the table's sequence (SQLite: one past the largest), row
     * after row as the VALUES list gives them, so in ascending order; the
     * order RETURNING lists them in is not promised on either engine. */
    qsort(ids, (size_t)n, sizeof ids[0], cmp_id);
    for (int r = 0; r < n; r++)
        job_inserted(js[r], ids[r], now);
    return STORE_OK;
}

store_rc store_job_insert_many(store_tx *tx, store_job *const *js, int n)
{
    store_conn *c = store_tx_conn(tx);
    int rc = STORE_OK;
    while (n > 0 && rc == STORE_OK) {
        int i = INSERT_SIZES - 1;
        while (1 << i > n)
            i--;
        rc = i ? insert_rows(c, js, i) : store_job_insert(tx, js[0]);
        js += 1 << i;
        n -= 1 << i;
    }
    return rc;
}

store_rc store_job_refs(store *s, int64_t tenant_id, const char *image, const char *spec,
                   const char *workspace, store_image *im, store_spec *sp, store_volume *ws,
                   int *found)
{
    /* One row whatever is missing: each part NULL where its table has none. */
    static const char sql[] =
        "SELECT s.*, i.*, w.* FROM (SELECT 1 AS one) o"
        " LEFT JOIN (SELECT " STORE_SPEC_COLS " FROM worker_specs WHERE name = ?1) s ON 1 = 1"
        " LEFT JOIN (SELECT " STORE_IMAGE_COLS " FROM images WHERE name = ?2"
        "  AND (tenant_id IS NULL OR tenant_id = ?3) ORDER BY tenant_id IS NULL LIMIT 1) i"
        "  ON 1 = 1"
        " LEFT JOIN (SELECT " STORE_VOL_COLS("0") " FROM workspaces v"
        "  JOIN tenants t ON t.id = v.tenant_id WHERE v.name = ?4 AND v.tenant_id = ?3) w"
        "  ON 1 = 1";
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_T(spec), STORE_T(image),
            STORE_I(tenant_id), STORE_T(workspace)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    *found = 0;
    if (rc == STORE_OK) {
        store_view v;
        if (!store_col_null(st, 0)) {
            store_spec_row(st, sp);
            *found |= STORE_REF_SPEC;
        }
        if (!store_col_null(st, STORE_SPEC_NCOLS)) {
            store_image_row(store_view_of(&v, st, STORE_SPEC_NCOLS), im);
            *found |= STORE_REF_IMAGE;
        }
        if (!store_col_null(st, STORE_SPEC_NCOLS + STORE_IMAGE_NCOLS)) {
            store_vol_row(store_view_of(&v, st, STORE_SPEC_NCOLS + STORE_IMAGE_NCOLS), ws);
            *found |= STORE_REF_WORKSPACE;
        }
    }
    store_reset(st);
    return rc;
}

static int job_get_conn(store_conn *c, int64_t tenant_id, int64_t id, store_job *out)
{
    static const char sql[] =
        "SELECT " JOB_COLS JOB_FROM " WHERE j.id = ?1 AND (?2 = 0 OR j.tenant_id = ?2)";
    store_st *st = store_prep(c, sql, STORE_ARGS(STORE_I(id), STORE_I(tenant_id)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK)
        rc = job_row(st, out);
    store_reset(st);
    return rc;
}

store_rc store_job_get(store *s, int64_t tenant_id, int64_t id, store_job *out)
{
    store_conn *c = store_reader(s);
    return c ? job_get_conn(c, tenant_id, id, out) : STORE_EIO;
}

store_rc store_job_get_tx(store_tx *tx, int64_t tenant_id, int64_t id, store_job *out)
{
    return job_get_conn(store_tx_conn(tx), tenant_id, id, out);
}

store_rc store_job_by_idem_tx(store_tx *tx, int64_t tenant_id, const char *key, store_job *out)
{
    static const char sql[] =
        "SELECT " JOB_COLS JOB_FROM " WHERE j.tenant_id = ?1 AND j.idempotency_key = ?2";
    store_st *st = store_prep(store_tx_conn(tx), sql, STORE_ARGS(STORE_I(tenant_id),
            STORE_T(key)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK)
        rc = job_row(st, out);
    store_reset(st);
    return rc;
}

store_rc store_job_list(store *s, const store_job_filter *f,
                   void (*row)(void *arg, const store_job *j), void *arg)
{
    static const char sql[] =
        "SELECT " JOB_COLS JOB_FROM
        " WHERE (?1 = 0 OR j.tenant_id = ?1) AND (?2 IS NULL OR j.state = ?2)"
        " AND (?3 IS NULL OR j.name = ?3) AND (?4 = 0 OR j.id < ?4)"
        " ORDER BY j.id DESC LIMIT ?5";
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(f->tenant_id),
            STORE_T(f->state), STORE_T(f->name), STORE_I(f->before), STORE_I(f->limit)));
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW) {
        store_job j;
        if (job_row(st, &j) != STORE_OK) {
            rc = STORE_NOMEM;
            break;
        }
        row(arg, &j);
        store_job_clear(&j);
    }
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

store_rc store_job_transition(store_tx *tx, int64_t id, job_state from, job_state to,
                         const char *reason)
{
    static const char sql[] =
        "UPDATE jobs SET state = ?2, reason = ?3, updated_at = ?4,"
        " started_at = CASE WHEN ?2 = 'RUNNING' AND started_at IS NULL THEN ?4"
        "  ELSE started_at END,"
        " finished_at = CASE WHEN ?2 IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN ?4"
        "  ELSE finished_at END"
        " WHERE id = ?1 AND state = ?5 RETURNING attempt";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, sql);
    if (!st)
        return STORE_EIO;
    int64_t now = util_now_ms();
    store_bind_int64(st, 1, id);
    store_bind_text(st, 2, store_job_state_name(to));
    store_bind_text(st, 3, reason && reason[0] ? reason : NULL);
    store_bind_int64(st, 4, now);
    store_bind_text(st, 5, store_job_state_name(from));
    int rc = store_step_row(st);
    int64_t attempt = rc == STORE_OK ? store_col_int64(st, 0) : 0;
    if (rc == STORE_OK && store_step(st) != STORE_DONE)
        rc = STORE_EIO;
    store_reset(st);
    if (rc != STORE_OK)
        return rc;
    return event_insert(c, id, now, attempt, store_job_state_name(from),
                        store_job_state_name(to), reason);
}

store_rc store_job_count_pending(store *s, int64_t tenant_id, int64_t limit, int64_t *n)
{
    static const char sql[] = "SELECT count(*) FROM (SELECT 1 FROM jobs WHERE tenant_id = ?1"
                              " AND state = 'PENDING' LIMIT ?2) AS p";
    return store_int64(store_reader(s), n, sql, STORE_ARGS(STORE_I(tenant_id), STORE_I(limit)));
}

store_rc store_job_set_priority(store_tx *tx, int64_t id, int64_t priority, int64_t now_ms)
{
    static const char sql[] = "UPDATE jobs SET priority = ?2, updated_at = ?3 WHERE id = ?1"
                              " AND state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')";
    return store_exec(store_tx_conn(tx), NULL, sql, STORE_ARGS(STORE_I(id), STORE_I(priority),
            STORE_I(now_ms)));
}

store_rc store_job_delete(store_tx *tx, int64_t id)
{
    static const char sql[] = "DELETE FROM jobs WHERE id = ?1";
    return store_tx_exec_id(tx, sql, id);
}

static void event_row(store_st *st, void *out)
{
    store_event *e = out;
    e->id = store_col_int64(st, 0);
    e->at = store_col_int64(st, 1);
    e->attempt = store_col_int64(st, 2);
    store_col_copy(st, 3, e->from_state, sizeof e->from_state);
    store_col_copy(st, 4, e->to_state, sizeof e->to_state);
    store_col_copy(st, 5, e->reason, sizeof e->reason);
}

STORE_ROWS(event_rows, store_event, event_row)

store_rc store_job_events(store *s, int64_t job_id, int64_t after, int limit,
                     void (*row)(void *arg, const store_event *e), void *arg)
{
    static const char sql[] =
        "SELECT id, at, attempt, coalesce(from_state, ''), to_state, coalesce(reason, '')"
        " FROM job_events WHERE job_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
    struct event_rows r = {row, arg};
    return store_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(job_id), STORE_I(after),
            STORE_I(limit))), event_rows, &r);
}

store_rc store_job_admit(store_tx *tx, int64_t job_id, int64_t price_per_hour,
                    int64_t estimated_max, int64_t now_ms)
{
    static const char sql[] =
        "UPDATE jobs SET price_per_hour = ?2, estimated_max = ?3, admitted_at = ?4,"
        " currency = coalesce((SELECT currency FROM worker_specs s WHERE s.name = jobs.worker_spec),"
        "  currency)"
        " WHERE id = ?1 AND admitted_at IS NULL";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, sql, STORE_ARGS(STORE_I(job_id), STORE_I(price_per_hour)));
    if (!st)
        return STORE_EIO;
    if (estimated_max >= 0)
        store_bind_int64(st, 3, estimated_max);
    store_bind_int64(st, 4, now_ms);
    int rc = store_step_change(c, st, NULL);
    return rc == STORE_NOTFOUND ? STORE_OK : rc;
}

store_rc store_job_briefs_tx(store_tx *tx, job_state state,
                        void (*row)(void *arg, const store_job_brief *b), void *arg)
{
    static const char sql[] =
        /* The spec's price and currency for a job not admitted yet: one join
         * (specs are few), not two subqueries per job. */
        "SELECT j.id, j.tenant_id, j.priority, j.created_at, j.attempt, j.worker_count,"
        " coalesce(j.workers_per_node, 0), j.cpus, j.memory_mb, j.gpus,"
        " coalesce(j.max_runtime_seconds, 0), coalesce(j.started_at, 0), j.state,"
        " coalesce(j.reason, ''),"
        " CASE WHEN j.admitted_at IS NULL THEN coalesce(s.price_per_hour, j.price_per_hour)"
        "  ELSE j.price_per_hour END,"
        " coalesce(j.admitted_at, 0),"
        " CASE WHEN j.admitted_at IS NULL THEN coalesce(s.currency, j.currency)"
        "  ELSE j.currency END"
        " FROM jobs j LEFT JOIN worker_specs s ON s.name = j.worker_spec"
        " WHERE j.state = ?1 ORDER BY j.id";
    store_st *st =
        store_prep(store_tx_conn(tx), sql, STORE_ARGS(STORE_T(store_job_state_name(state))));
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW) {
        store_job_brief b;
        b.id = store_col_int64(st, 0);
        b.tenant_id = store_col_int64(st, 1);
        b.priority = store_col_int64(st, 2);
        b.created_at = store_col_int64(st, 3);
        b.attempt = store_col_int64(st, 4);
        b.worker_count = store_col_int64(st, 5);
        b.workers_per_node = store_col_int64(st, 6);
        b.cpus = store_col_int64(st, 7);
        b.memory_mb = store_col_int64(st, 8);
        b.gpus = store_col_int64(st, 9);
        b.max_runtime_seconds = store_col_int64(st, 10);
        b.started_at = store_col_int64(st, 11);
        b.state = state_col(st, 12);
        store_col_copy(st, 13, b.reason, sizeof b.reason);
        b.price_per_hour = store_col_int64(st, 14);
        b.admitted_at = store_col_int64(st, 15);
        store_col_copy(st, 16, b.currency, sizeof b.currency);
        row(arg, &b);
    }
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}


store_rc store_metric_reserve(store_tx *tx, int64_t job_id, int64_t n, int64_t max, int64_t *granted)
{
    static const char get[] = "SELECT metric_rows FROM jobs WHERE id = ?1";
    static const char put[] = "UPDATE jobs SET metric_rows = ?2 WHERE id = ?1";
    int64_t have = 0;
    int rc = store_int64(store_tx_conn(tx), &have, get, STORE_ARGS(STORE_I(job_id)));
    if (rc != STORE_OK)
        return rc;
    *granted = have >= max ? 0 : n < max - have ? n : max - have;
    if (*granted == 0)
        return STORE_OK;
    return store_exec(store_tx_conn(tx), NULL, put, STORE_ARGS(STORE_I(job_id),
            STORE_I(have + *granted)));
}

store_rc store_metric_insert(store_tx *tx, int64_t job_id, int64_t attempt, int64_t rank,
                        int64_t at, const char *json)
{
    static const char sql[] =
        "INSERT INTO job_metrics(job_id, attempt, rank, at, data) VALUES (?1, ?2, ?3, ?4, ?5)";
    return store_exec(store_tx_conn(tx), NULL, sql, STORE_ARGS(STORE_I(job_id), STORE_I(attempt),
            STORE_I(rank), STORE_I(at), STORE_T(json)));
}

/* A metric row; its json points into the statement until the next step. */
static void metric_row(store_st *st, void *out)
{
    store_metric *m = out;
    *m = (store_metric){store_col_int64(st, 0), store_col_int64(st, 1),
                        store_col_int64(st, 2), store_col_int64(st, 3),
                        store_col_text(st, 4)};
}

STORE_ROWS(metric_rows, store_metric, metric_row)

store_rc store_metric_list(store *s, int64_t job_id, int64_t after, int limit,
                      void (*row)(void *arg, const store_metric *m), void *arg)
{
    static const char sql[] = "SELECT id, attempt, rank, at, data FROM job_metrics"
                              " WHERE job_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
    struct metric_rows r = {row, arg};
    return store_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(job_id), STORE_I(after),
            STORE_I(limit))), metric_rows, &r);
}
