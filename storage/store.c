/*
 * store: connection setup (WAL, synchronous=FULL, foreign keys, busy
 * timeout), the migration runner, per-thread read connections, the
 * prepared-statement cache and the group-commit writer thread.
 */
#include "storage/store_int.h"
#include "storage/store_migrations.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/util.h"

#define STMT_CACHE 96
#define BATCH_MAX 1024
#define BUSY_TIMEOUT_MS 10000
#define SLOW_BATCH_US 100000 /* a batch slower than this is reported */
#define WRITER_NICE -5
#define CHECKPOINT_FRAMES 1000 /* about 4 MiB of WAL: short fsyncs of the database file */

struct store_conn {
    sqlite3 *db;
    pthread_t owner;
    struct store_conn *next;
    int nstmt;
    struct {
        const char *sql;
        sqlite3_stmt *st;
    } stmt[STMT_CACHE];
};

struct op {
    store_write_fn fn;
    void *ctx;
    store_done_fn done;
    void *arg;
    struct op *next;
};

struct store_tx {
    store_conn *conn;
};

struct store {
    char path[4096];
    unsigned gen;             /* tells one store's thread-local reader from another's */
    store_conn *writer;
    pthread_mutex_t lock;     /* guards readers, queue, stopping */
    pthread_cond_t wake;
    store_conn *readers;
    struct op *head, *tail;
    int stopping;
    pthread_t thread;
    pthread_t ckpt_thread;
    pthread_cond_t ckpt_wake;
    int ckpt_due;             /* WAL frames past the threshold: checkpoint now */
    int schema;
    uint64_t batches, writes;
};

static unsigned store_gen_next = 1;
static pthread_once_t sqlite_once = PTHREAD_ONCE_INIT;

/* Every connection is used by one thread at a time: no SQLite mutexes on
 * connections, and no global mutex for memory statistics. */
static void sqlite_setup(void)
{
    sqlite3_config(SQLITE_CONFIG_MULTITHREAD);
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    sqlite3_initialize();
}
static __thread struct {
    store *s;
    unsigned gen;
    store_conn *c;
} tl_reader;

int store_rc_sqlite(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return STORE_OK;
    case SQLITE_CONSTRAINT:
        if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
            return STORE_CONFLICT;
        return STORE_INVALID;
    case SQLITE_NOMEM:
        return STORE_NOMEM;
    case SQLITE_FULL:
        return STORE_FULL;
    default:
        return STORE_EIO;
    }
}

static int exec(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK && err)
        snprintf(err, errlen, "%s", msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return rc;
}

static store_conn *conn_open(const char *path, int create, char *err, size_t errlen)
{
    store_conn *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(path, &c->db, flags, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot open database %s: %s", path,
                 c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        goto fail;
    }
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_busy_timeout(c->db, BUSY_TIMEOUT_MS);
    if (exec(c->db,
             "PRAGMA journal_mode=WAL;"
             "PRAGMA synchronous=FULL;"
             "PRAGMA foreign_keys=ON;",
             err, errlen) != SQLITE_OK)
        goto fail;
    c->owner = pthread_self();
    return c;
fail:
    sqlite3_close(c->db);
    free(c);
    return NULL;
}

static void conn_close(store_conn *c)
{
    for (int i = 0; i < c->nstmt; i++)
        sqlite3_finalize(c->stmt[i].st);
    sqlite3_close(c->db);
    free(c);
}

sqlite3 *store_conn_db(store_conn *c)
{
    return c->db;
}

sqlite3_stmt *store_stmt(store_conn *c, const char *sql)
{
    for (int i = 0; i < c->nstmt; i++) {
        if (c->stmt[i].sql == sql) {
            sqlite3_reset(c->stmt[i].st);
            sqlite3_clear_bindings(c->stmt[i].st);
            return c->stmt[i].st;
        }
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "store: cannot prepare statement: %s\n%s\n", sqlite3_errmsg(c->db), sql);
        return NULL;
    }
    if (c->nstmt < STMT_CACHE) {
        c->stmt[c->nstmt].sql = sql;
        c->stmt[c->nstmt].st = st;
        c->nstmt++;
    } else {
        /* Not expected: more distinct statements than the cache holds.
         * Evict the oldest so the statement stays owned by the cache. */
        sqlite3_finalize(c->stmt[0].st);
        memmove(&c->stmt[0], &c->stmt[1], sizeof c->stmt[0] * (STMT_CACHE - 1));
        c->stmt[STMT_CACHE - 1].sql = sql;
        c->stmt[STMT_CACHE - 1].st = st;
    }
    return st;
}

sqlite3_stmt *store_read_stmt(store *s, const char *sql)
{
    store_conn *c = store_reader(s);
    return c ? store_stmt(c, sql) : NULL;
}

sqlite3_stmt *store_prep(store_conn *c, const char *sql, const store_arg *args)
{
    sqlite3_stmt *st = c ? store_stmt(c, sql) : NULL;
    for (int i = 1; st && args && args[i - 1].kind; i++) {
        const store_arg *a = &args[i - 1];
        switch (a->kind) {
        case 'i': sqlite3_bind_int64(st, i, a->i); break;
        case 't': store_bind_text(st, i, a->t); break;
        case 'b': sqlite3_bind_blob(st, i, a->b, a->n, SQLITE_TRANSIENT); break;
        default: break; /* STORE_NULL: it stays NULL */
        }
    }
    return st;
}

int store_exec(store_conn *c, int64_t *id, const char *sql, const store_arg *args)
{
    sqlite3_stmt *st = store_prep(c, sql, args);
    return st ? store_step_change(c, st, id) : STORE_EIO;
}

int store_int64(store_conn *c, int64_t *out, const char *sql, const store_arg *args)
{
    sqlite3_stmt *st = store_prep(c, sql, args);
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK)
        *out = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc;
}

int store_tx_exec_id(store_tx *tx, const char *sql, int64_t id)
{
    sqlite3_stmt *st = store_prep(tx->conn, sql, STORE_ARGS(STORE_I(id)));
    if (!st)
        return STORE_EIO;
    return store_step_change(tx->conn, st, NULL);
}

int store_step_row(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return STORE_OK;
    return rc == SQLITE_DONE ? STORE_NOTFOUND : store_rc_sqlite(rc);
}

int store_get_one(sqlite3_stmt *st, void (*decode)(sqlite3_stmt *st, void *out), void *out)
{
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK)
        decode(st, out);
    sqlite3_reset(st);
    return rc;
}

int store_each(sqlite3_stmt *st, void (*each)(void *ctx, sqlite3_stmt *st), void *ctx)
{
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        each(ctx, st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? STORE_OK : store_rc_sqlite(rc);
}

int store_step_change(store_conn *c, sqlite3_stmt *st, int64_t *id)
{
    int rc = store_rc_sqlite(sqlite3_step(st));
    sqlite3_reset(st);
    if (rc != STORE_OK)
        return rc;
    if (id)
        *id = sqlite3_last_insert_rowid(c->db);
    return sqlite3_changes(c->db) > 0 ? STORE_OK : STORE_NOTFOUND;
}

void store_bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

char *store_col_strdup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return strdup(t ? (const char *)t : "");
}

void store_col_copy(sqlite3_stmt *st, int i, char *out, size_t n)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(out, n, "%s", t ? (const char *)t : "");
}

store_conn *store_reader(store *s)
{
    if (tl_reader.s == s && tl_reader.gen == s->gen)
        return tl_reader.c;
    pthread_t self = pthread_self();
    store_conn *c;
    pthread_mutex_lock(&s->lock);
    for (c = s->readers; c; c = c->next)
        if (pthread_equal(c->owner, self))
            break;
    pthread_mutex_unlock(&s->lock);
    if (!c) {
        char err[256];
        c = conn_open(s->path, 0, err, sizeof err);
        if (!c) {
            fprintf(stderr, "store: %s\n", err);
            return NULL;
        }
        pthread_mutex_lock(&s->lock);
        c->next = s->readers;
        s->readers = c;
        pthread_mutex_unlock(&s->lock);
    }
    tl_reader.s = s;
    tl_reader.gen = s->gen;
    tl_reader.c = c;
    return c;
}

int store_tx_mark(store_tx *tx)
{
    return exec(tx->conn->db, "SAVEPOINT nested", NULL, 0) == SQLITE_OK ? STORE_OK : STORE_EIO;
}

void store_tx_keep(store_tx *tx)
{
    exec(tx->conn->db, "RELEASE nested", NULL, 0);
}

void store_tx_undo(store_tx *tx)
{
    exec(tx->conn->db, "ROLLBACK TO nested", NULL, 0);
    exec(tx->conn->db, "RELEASE nested", NULL, 0);
}

int store_read_begin(store *s)
{
    store_conn *c = store_reader(s);
    if (!c)
        return STORE_EIO;
    if (!sqlite3_get_autocommit(c->db))
        return STORE_OK;
    /* Cached statements: sqlite3_exec would parse the SQL on every request. */
    static const char sql_begin[] = "BEGIN";
    sqlite3_stmt *st = store_stmt(c, sql_begin);
    int rc = st ? sqlite3_step(st) : SQLITE_ERROR;
    if (st)
        sqlite3_reset(st);
    return rc == SQLITE_DONE ? STORE_OK : STORE_EIO;
}

void store_read_end(store *s)
{
    if (tl_reader.s != s || tl_reader.gen != s->gen || !tl_reader.c)
        return;
    if (sqlite3_get_autocommit(tl_reader.c->db))
        return;
    static const char sql_commit[] = "COMMIT";
    sqlite3_stmt *st = store_stmt(tl_reader.c, sql_commit);
    if (st) {
        sqlite3_step(st);
        sqlite3_reset(st);
    } else {
        exec(tl_reader.c->db, "COMMIT", NULL, 0);
    }
}

store_tx *store_read_tx(store *s)
{
    static __thread struct store_tx rtx;
    rtx.conn = store_reader(s);
    return rtx.conn ? &rtx : NULL;
}

store_conn *store_tx_conn(store_tx *tx)
{
    return tx->conn;
}

/* ---- migrations ---- */

static int schema_current(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(db, "SELECT coalesce(max(version),0) FROM schema_migrations", -1,
                           &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

int store_schema_known(void)
{
    return store_migrations_count ? store_migrations[store_migrations_count - 1].version : 0;
}

static int migrate(sqlite3 *db, int *version, char *err, size_t errlen)
{
    if (exec(db,
             "CREATE TABLE IF NOT EXISTS schema_migrations ("
             " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
             err, errlen) != SQLITE_OK)
        return -1;
    int cur = schema_current(db);
    if (cur < 0) {
        snprintf(err, errlen, "cannot read schema version: %s", sqlite3_errmsg(db));
        return -1;
    }
    if (cur > store_schema_known()) {
        snprintf(err, errlen,
                 "database schema version %d is newer than this cohortd knows (%d); "
                 "run a newer cohortd",
                 cur, store_schema_known());
        return -1;
    }
    for (int i = 0; i < store_migrations_count; i++) {
        const struct store_migration *m = &store_migrations[i];
        if (m->version <= cur)
            continue;
        char msg[400];
        if (exec(db, "BEGIN IMMEDIATE", msg, sizeof msg) != SQLITE_OK ||
            exec(db, m->sql, msg, sizeof msg) != SQLITE_OK) {
            snprintf(err, errlen, "migration %s failed: %s", m->name, msg);
            exec(db, "ROLLBACK", NULL, 0);
            return -1;
        }
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(
            db, "INSERT INTO schema_migrations(version,name,applied_at) VALUES(?,?,?)", -1, &st,
            NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int(st, 1, m->version);
            sqlite3_bind_text(st, 2, m->name, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 3, util_now_ms());
            rc = sqlite3_step(st);
        }
        sqlite3_finalize(st);
        if ((rc != SQLITE_DONE && rc != SQLITE_OK) ||
            exec(db, "COMMIT", msg, sizeof msg) != SQLITE_OK) {
            snprintf(err, errlen, "migration %s could not be recorded: %s", m->name,
                     sqlite3_errmsg(db));
            exec(db, "ROLLBACK", NULL, 0);
            return -1;
        }
        cur = m->version;
    }
    *version = cur;
    return 0;
}

/* ---- the writer ---- */

static void run_batch(store *s, struct op *batch)
{
    sqlite3 *db = s->writer->db;
    struct store_tx tx = {s->writer};
    int n = 0;
    int64_t t0 = util_mono_us();
    int begun = exec(db, "BEGIN IMMEDIATE", NULL, 0), ok = begun == SQLITE_OK, crc;
    int rcs[BATCH_MAX];
    for (struct op *o = batch; o; o = o->next, n++) {
        int sp;
        if (!ok) {
            rcs[n] = store_rc_sqlite(begun);
            continue;
        }
        if ((sp = exec(db, "SAVEPOINT w", NULL, 0)) != SQLITE_OK) {
            rcs[n] = store_rc_sqlite(sp);
            continue;
        }
        rcs[n] = o->fn(&tx, o->ctx);
        if (rcs[n] != 0)
            exec(db, "ROLLBACK TO w", NULL, 0);
        exec(db, "RELEASE w", NULL, 0);
    }
    int64_t t1 = util_mono_us();
    if (ok && (crc = exec(db, "COMMIT", NULL, 0)) != SQLITE_OK) {
        fprintf(stderr, "store: commit failed: %s\n", sqlite3_errmsg(db));
        exec(db, "ROLLBACK", NULL, 0);
        /* A full disk stays a full disk to the caller (507), not "storage error". */
        for (int i = 0; i < n; i++)
            rcs[i] = store_rc_sqlite(crc);
    }
    int64_t t2 = util_mono_us();
    if (t2 - t0 > SLOW_BATCH_US)
        fprintf(stderr, "store: slow commit: %d writes, %lld ms applying, %lld ms committing\n",
                n, (long long)(t1 - t0) / 1000, (long long)(t2 - t1) / 1000);
    __atomic_add_fetch(&s->batches, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->writes, (uint64_t)n, __ATOMIC_RELAXED);
    n = 0;
    for (struct op *o = batch, *next; o; o = next, n++) {
        next = o->next;
        o->done(o->arg, rcs[n]);
        free(o);
    }
}

/* After each commit: wake the checkpointer once the WAL has grown. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    (void)db;
    (void)name;
    store *s = arg;
    if (frames >= CHECKPOINT_FRAMES) {
        pthread_mutex_lock(&s->lock);
        s->ckpt_due = 1;
        pthread_cond_signal(&s->ckpt_wake);
        pthread_mutex_unlock(&s->lock);
    }
    return SQLITE_OK;
}

/*
 * Copies the WAL back into the database from its own connection, PASSIVE so
 * the writer is never blocked: commits never pay for a checkpoint.
 */
static void *checkpointer_main(void *arg)
{
    store *s = arg;
    char err[256];
    store_conn *c = conn_open(s->path, 0, err, sizeof err);
    if (!c) {
        fprintf(stderr, "store: checkpointer: %s\n", err);
        return NULL;
    }
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->ckpt_due && !s->stopping)
            pthread_cond_wait(&s->ckpt_wake, &s->lock);
        if (s->stopping)
            break;
        s->ckpt_due = 0;
        pthread_mutex_unlock(&s->lock);
        int64_t t0 = util_mono_us();
        int frames = 0, done = 0;
        sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &frames, &done);
        int64_t us = util_mono_us() - t0;
        if (getenv("COHORT_STORE_TRACE"))
            fprintf(stderr, "store: checkpoint %d/%d frames in %lld ms\n", done, frames,
                    (long long)us / 1000);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    conn_close(c);
    return NULL;
}

static void *writer_main(void *arg)
{
    store *s = arg;
    /* Every write waits on this one thread: let it run ahead of the request
     * threads when the CPUs are busy.  Without the privilege it stays at the
     * default priority. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WRITER_NICE) != 0 &&
        getenv("COHORT_STORE_TRACE"))
        fprintf(stderr, "store: writer keeps the default priority\n");
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->wake, &s->lock);
        if (!s->head && s->stopping)
            break;
        struct op *batch = s->head, *last = batch;
        int n = 1;
        while (last->next && n < BATCH_MAX) {
            last = last->next;
            n++;
        }
        s->head = last->next;
        if (!s->head)
            s->tail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&s->lock);
        run_batch(s, batch);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

const char *store_rc_name(int rc)
{
    static const char *const names[] = {
        "STORE_OK",        "STORE_NOTFOUND",  "STORE_CONFLICT",          "STORE_EIO",
        "STORE_INVALID",   "STORE_NOMEM",     "STORE_BUSY",              "STORE_FULL",
        "STORE_JOB_FINAL", "STORE_JOB_ACTIVE", "STORE_JOB_NOT_RETRYABLE", "STORE_JOB_STOPPING"};
    return rc <= 0 && -rc < (int)(sizeof names / sizeof names[0]) ? names[-rc] : "STORE_?";
}

store_rc store_submit(store *s, store_write_fn fn, void *ctx, store_done_fn done, void *arg)
{
    /* Reads after this write must see it: end the caller's snapshot. */
    store_read_end(s);
    struct op *o = malloc(sizeof *o);
    if (!o)
        return STORE_NOMEM;
    *o = (struct op){fn, ctx, done, arg, NULL};
    pthread_mutex_lock(&s->lock);
    if (s->stopping) {
        pthread_mutex_unlock(&s->lock);
        free(o);
        return STORE_BUSY;
    }
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

struct waiter {
    pthread_mutex_t m;
    pthread_cond_t c;
    int done;
    int rc;
};

static void waiter_done(void *arg, store_rc rc)
{
    struct waiter *w = arg;
    pthread_mutex_lock(&w->m);
    w->rc = rc;
    w->done = 1;
    pthread_cond_signal(&w->c);
    pthread_mutex_unlock(&w->m);
}

store_rc store_write(store *s, store_write_fn fn, void *ctx)
{
    struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    int rc = store_submit(s, fn, ctx, waiter_done, &w);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&w.m);
    while (!w.done)
        pthread_cond_wait(&w.c, &w.m);
    pthread_mutex_unlock(&w.m);
    pthread_mutex_destroy(&w.m);
    pthread_cond_destroy(&w.c);
    return w.rc;
}

store *store_open(const char *path, char *err, size_t errlen)
{
    store *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (snprintf(s->path, sizeof s->path, "%s", path) >= (int)sizeof s->path) {
        snprintf(err, errlen, "database path too long");
        free(s);
        return NULL;
    }
    pthread_once(&sqlite_once, sqlite_setup);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->ckpt_wake, NULL);
    s->gen = __atomic_fetch_add(&store_gen_next, 1, __ATOMIC_RELAXED);
    s->writer = conn_open(path, 1, err, errlen);
    if (!s->writer)
        goto fail;
    if (migrate(s->writer->db, &s->schema, err, errlen) != 0)
        goto fail;
    sqlite3_wal_autocheckpoint(s->writer->db, 0);
    sqlite3_wal_hook(s->writer->db, wal_hook, s);
    if (pthread_create(&s->ckpt_thread, NULL, checkpointer_main, s) != 0) {
        snprintf(err, errlen, "cannot start the checkpoint thread");
        goto fail;
    }
    if (pthread_create(&s->thread, NULL, writer_main, s) != 0) {
        snprintf(err, errlen, "cannot start the writer thread");
        pthread_mutex_lock(&s->lock);
        s->stopping = 1;
        pthread_cond_signal(&s->ckpt_wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->ckpt_thread, NULL);
        goto fail;
    }
    return s;
fail:
    if (s->writer)
        conn_close(s->writer);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->ckpt_wake);
    free(s);
    return NULL;
}

void store_close(store *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_cond_signal(&s->wake);
    pthread_cond_signal(&s->ckpt_wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_join(s->ckpt_thread, NULL);
    for (store_conn *c = s->readers, *next; c; c = next) {
        next = c->next;
        conn_close(c);
    }
    /* Fold the WAL back into the main file so the database closes clean. */
    sqlite3_wal_checkpoint_v2(s->writer->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    conn_close(s->writer);
    if (tl_reader.s == s)
        tl_reader.s = NULL;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->ckpt_wake);
    free(s);
}

int store_schema_version(store *s)
{
    return s->schema;
}

void store_writer_stats(store *s, uint64_t *batches, uint64_t *writes)
{
    *batches = __atomic_load_n(&s->batches, __ATOMIC_RELAXED);
    *writes = __atomic_load_n(&s->writes, __ATOMIC_RELAXED);
}

int store_job_state_counts(store *s, void (*fn)(void *arg, const char *state, int64_t n), void *arg)
{
    static const char sql[] = "SELECT state, count(*) FROM jobs GROUP BY state";
    sqlite3_stmt *st = store_read_stmt(s, sql);
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        fn(arg, (const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1));
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? STORE_OK : store_rc_sqlite(rc);
}
