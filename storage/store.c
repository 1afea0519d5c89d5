/*
 * store: the backend-independent half of the store: the group-commit
 * writer thread, per-thread read connections, read snapshots and the
 * migration runner.  The engine behind them is a store_be (store_be.h):
 * store_sqlite.c by default, store_pg.c for a postgresql:// target.
 */
#include "storage/store_int.h"
#include "lib/fmt.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/util.h"

#define BATCH_MAX 1024
#define GROUP_MAX 256        /* writes handed to one store_write_many_fn */
#define SLOW_BATCH_US 100000 /* a batch slower than this is reported */
#define WRITER_NICE -5
#define SIGNAL_MAX 1000 /* bytes of one signal, under PostgreSQL's 8,000 */

struct op {
    store_write_fn fn;
    store_write_many_fn many; /* NULL: fn alone */
    void *ctx;
    store_done_fn done;
    void *arg;
    struct op *next;
};

struct store_tx {
    store_conn *conn;
    int writing;       /* a write batch's, not a read snapshot's */
    int touched_all;   /* too many nodes, or memory ran out: any node */
    util_i64s touched; /* nodes whose desired state changed (store_on_nodes) */
};

struct store {
    const store_be *be;
    char target[4096];        /* what be->open takes: a path, a connection string */
    unsigned gen;             /* tells one store's thread-local reader from another's */
    store_conn *writer;
    pthread_mutex_t lock;     /* guards readers, queue, stopping */
    pthread_cond_t wake;
    store_conn *readers;
    struct op *head, *tail;
    int stopping;
    pthread_t thread;
    int schema;
    uint64_t batches, writes;
    /* Several cohortd on one database (see store_shared). */
    char id[20];              /* this process's mark on its signals */
    store_conn *leader;       /* holds the leader lock; store_lead's thread only */
    int leading;
    pthread_t listener;
    int listening;
    pthread_mutex_t sig_lock; /* held while on_signal runs and when it is set */
    void (*on_signal)(void *arg, const char *what);
    void *on_signal_arg;
    pthread_mutex_t nodes_lock; /* held while on_nodes runs and when it is set */
    void (*on_nodes)(void *arg, const int64_t *ids, size_t n);
    void *on_nodes_arg;
};

static unsigned store_gen_next = 1;

static __thread struct {
    store *s;
    unsigned gen;
    store_conn *c;
    int want; /* a snapshot was asked for: it begins at the first statement */
} tl_reader;

store_st *store_read_stmt(store *s, const char *sql)
{
    store_conn *c = store_reader(s);
    return c ? store_stmt(c, sql) : NULL;
}

store_st *store_prep(store_conn *c, const char *sql, const store_arg *args)
{
    store_st *st = c ? store_stmt(c, sql) : NULL;
    for (int i = 1; st && args && args[i - 1].kind; i++)
        st->be->bind(st, i, &args[i - 1]);
    return st;
}

store_rc store_exec(store_conn *c, int64_t *id, const char *sql, const store_arg *args)
{
    store_st *st = store_prep(c, sql, args);
    return st ? store_step_change(c, st, id) : STORE_EIO;
}

store_rc store_int64(store_conn *c, int64_t *out, const char *sql, const store_arg *args)
{
    store_st *st = store_prep(c, sql, args);
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK)
        *out = store_col_int64(st, 0);
    store_reset(st);
    return rc;
}

store_rc store_tx_exec_id(store_tx *tx, const char *sql, int64_t id)
{
    return store_exec(tx->conn, NULL, sql, STORE_ARGS(STORE_I(id)));
}

store_rc store_step_row(store_st *st)
{
    int rc = store_step(st);
    if (rc == STORE_ROW)
        return STORE_OK;
    return rc == STORE_DONE ? STORE_NOTFOUND : rc;
}

store_rc store_get_one(store_st *st, void (*decode)(store_st *st, void *out), void *out)
{
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK)
        decode(st, out);
    store_reset(st);
    return rc;
}

store_rc store_each(store_st *st, void (*each)(void *ctx, store_st *st), void *ctx)
{
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW)
        each(ctx, st);
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

store_rc store_step_change(store_conn *c, store_st *st, int64_t *id)
{
    (void)c;
    int rc = store_step(st);
    if (rc == STORE_ROW && id)
        *id = store_col_int64(st, 0);
    while (rc == STORE_ROW)
        rc = store_step(st);
    int64_t changed = rc == STORE_DONE ? st->be->changes(st) : 0;
    store_reset(st);
    if (rc != STORE_DONE)
        return rc;
    return changed > 0 ? STORE_OK : STORE_NOTFOUND;
}

/* ---- column views ---- */

static int view_col_null(store_st *s, int i)
{
    store_view *v = (store_view *)s;
    return v->under->be->col_null(v->under, i + v->off);
}

static int64_t view_col_int64(store_st *s, int i)
{
    store_view *v = (store_view *)s;
    return v->under->be->col_int64(v->under, i + v->off);
}

static double view_col_double(store_st *s, int i)
{
    store_view *v = (store_view *)s;
    return v->under->be->col_double(v->under, i + v->off);
}

static const char *view_col_text(store_st *s, int i)
{
    store_view *v = (store_view *)s;
    return v->under->be->col_text(v->under, i + v->off);
}

static const void *view_col_blob(store_st *s, int i, int *len)
{
    store_view *v = (store_view *)s;
    return v->under->be->col_blob(v->under, i + v->off, len);
}

/* Reads only: a view is never stepped, bound or reset. */
static const store_be view_be = {
    .name = "view",
    .col_null = view_col_null,
    .col_int64 = view_col_int64,
    .col_double = view_col_double,
    .col_text = view_col_text,
    .col_blob = view_col_blob,
};

store_st *store_view_of(store_view *v, store_st *st, int off)
{
    v->base.be = &view_be;
    v->under = st;
    v->off = off;
    return &v->base;
}

int store_col_equal(store_st *st, int i, const void *p, int len)
{
    int n;
    const void *b = store_col_blob(st, i, &n);
    return b && n == len && util_ct_equal(b, p, (size_t)len);
}

char *store_col_strdup(store_st *st, int i)
{
    const char *t = store_col_text(st, i);
    return strdup(t ? t : "");
}

void store_col_copy(store_st *st, int i, char *out, size_t n)
{
    const char *t = store_col_text(st, i);
    fmt_cut(out, n, "%s", t ? t : ""); /* the API bounded it before it was stored */
}

static int run_cached(store_conn *c, const char *sql);

/* The calling thread's read connection, opened on first use. */
static store_conn *reader_conn(store *s)
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
        c = s->be->open(s->target, STORE_OPEN_READER, err, sizeof err);
        if (!c) {
            fprintf(stderr, "store: %s\n", err);
            return NULL;
        }
        c->owner = self;
        pthread_mutex_lock(&s->lock);
        c->next = s->readers;
        s->readers = c;
        pthread_mutex_unlock(&s->lock);
    }
    tl_reader.s = s;
    tl_reader.gen = s->gen;
    tl_reader.c = c;
    tl_reader.want = 0;
    return c;
}

store_conn *store_reader(store *s)
{
    store_conn *c = reader_conn(s);
    if (c && tl_reader.want && !c->be->in_tx(c) &&
        (c->be->defer ? c->be->defer(c, c->be->begin_read) : run_cached(c, c->be->begin_read)) !=
            STORE_OK)
        fprintf(stderr, "store: cannot begin a read snapshot\n");
    return c;
}

store_rc store_tx_mark(store_tx *tx)
{
    return tx->conn->be->exec(tx->conn, "SAVEPOINT nested");
}

void store_tx_keep(store_tx *tx)
{
    tx->conn->be->exec(tx->conn, "RELEASE nested");
}

void store_tx_undo(store_tx *tx)
{
    tx->conn->be->exec(tx->conn, "ROLLBACK TO nested");
    tx->conn->be->exec(tx->conn, "RELEASE nested");
}

/* Runs a cached statement that returns no rows (BEGIN, COMMIT): exec would
 * parse the SQL on every request. */
static int run_cached(store_conn *c, const char *sql)
{
    store_st *st = store_stmt(c, sql);
    if (!st)
        return STORE_EIO;
    int rc = store_step(st);
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc < 0 ? rc : STORE_EIO;
}

static const char sql_commit[] = "COMMIT";

/* The snapshot begins with the first statement read through it: a request
 * that reads nothing (a cached token, a heartbeat) costs the database
 * nothing, and on PostgreSQL saves BEGIN's and COMMIT's round trips. */
store_rc store_read_begin(store *s)
{
    if (!reader_conn(s))
        return STORE_EIO;
    tl_reader.want = 1;
    return STORE_OK;
}

void store_read_end(store *s)
{
    if (tl_reader.s != s || tl_reader.gen != s->gen || !tl_reader.c)
        return;
    tl_reader.want = 0;
    store_conn *c = tl_reader.c;
    if (!c->be->in_tx(c))
        return;
    if (run_cached(c, sql_commit) != STORE_OK)
        c->be->exec(c, "ROLLBACK");
}

void store_read_each(store *s)
{
    if (tl_reader.s == s && tl_reader.gen == s->gen)
        tl_reader.want = 0;
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

#define TOUCHED_MAX 4096 /* past it a batch says "any node" */

void store_tx_touch(store_tx *tx, int64_t node_id)
{
    if (!tx->writing || tx->touched_all)
        return;
    if (tx->touched.n >= TOUCHED_MAX || util_i64s_push(&tx->touched, node_id) != 0)
        tx->touched_all = 1;
}

/* ---- migrations ---- */

int store_schema_known(void)
{
    return store_migrations_count ? store_migrations[store_migrations_count - 1].version : 0;
}

static int be_schema_known(const store_be *be)
{
    int n = *be->migrations_count;
    return n ? be->migrations[n - 1].version : 0;
}

static int migrate(store_conn *c, int *version, char *err, size_t errlen)
{
    const store_be *be = c->be;
    static const char sql_create[] =
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)";
    static const char sql_current[] = "SELECT coalesce(max(version), 0) FROM schema_migrations";
    static const char sql_record[] =
        "INSERT INTO schema_migrations(version, name, applied_at) VALUES (?1, ?2, ?3)";
    int64_t cur = -1;
    if (be->exec(c, sql_create) != STORE_OK) {
        fmt_cut(err, errlen, "cannot create schema_migrations: %s", c->err);
        return -1;
    }
    if (store_int64(c, &cur, sql_current, NULL) != STORE_OK) {
        fmt_cut(err, errlen, "cannot read the schema version");
        return -1;
    }
    if (cur > be_schema_known(be)) {
        fmt_cut(err, errlen,
                 "database schema version %lld is newer than this cohortd knows (%d); "
                 "run a newer cohortd",
                 (long long)cur, be_schema_known(be));
        return -1;
    }
    for (int i = 0; i < *be->migrations_count; i++) {
        const struct store_migration *m = &be->migrations[i];
        if (m->version <= cur)
            continue;
        /* Another cohortd on the same database may have applied it while
         * this one waited for the write lock. */
        int64_t now_cur = cur;
        c->err[0] = '\0';
        if (be->exec(c, be->begin_write) != STORE_OK ||
            store_int64(c, &now_cur, sql_current, NULL) != STORE_OK) {
            fmt_cut(err, errlen, "migration %s: %s", m->name, c->err[0] ? c->err : "cannot begin");
            be->exec(c, "ROLLBACK");
            return -1;
        }
        if (now_cur >= m->version) {
            be->exec(c, "COMMIT");
            cur = now_cur;
            continue;
        }
        if (be->exec(c, m->sql) != STORE_OK) {
            fmt_cut(err, errlen, "migration %s failed: %s", m->name, c->err);
            be->exec(c, "ROLLBACK");
            return -1;
        }
        if (store_exec(c, NULL, sql_record,
                       STORE_ARGS(STORE_I(m->version), STORE_T(m->name),
                                  STORE_I(util_now_ms()))) != STORE_OK ||
            be->exec(c, "COMMIT") != STORE_OK) {
            fmt_cut(err, errlen, "migration %s could not be recorded: %s", m->name, c->err);
            be->exec(c, "ROLLBACK");
            return -1;
        }
        cur = m->version;
    }
    *version = (int)cur;
    return 0;
}

/* ---- the writer ---- */

static void tell_nodes(store *s, const int64_t *ids, size_t n)
{
    pthread_mutex_lock(&s->nodes_lock);
    if (s->on_nodes)
        s->on_nodes(s->on_nodes_arg, ids, n);
    pthread_mutex_unlock(&s->nodes_lock);
}

/* Between two writes of a batch: the last one kept, the next one's undo
 * point set; deferred, where the engine can, to ride with the next
 * write's first statement. */
static int next_savepoint(store_conn *c)
{
    static const char sql[] = "RELEASE w; SAVEPOINT w";
    return c->be->defer ? c->be->defer(c, sql) : c->be->exec(c, sql);
}

/* Sends the batch's nodes to the other cohortd as "ID nodes N N ...",
 * within SIGNAL_MAX bytes a signal; "ID nodes" alone means any node. */
static void notify_nodes(store *s, const struct store_tx *tx)
{
    char payload[SIGNAL_MAX];
    size_t i = 0;
    do {
        fmt_cut(payload, sizeof payload, "%s nodes", s->id); /* the id is 16 hex digits */
        int len = (int)strlen(payload);
        for (; !tx->touched_all && i < tx->touched.n; i++) {
            char one[24];
            fmt_cut(one, sizeof one, " %lld", (long long)tx->touched.v[i]); /* 21 at most */
            int k = (int)strlen(one);
            if ((size_t)(len + k) >= sizeof payload)
                break;
            memcpy(payload + len, one, (size_t)k + 1);
            len += k;
        }
        if (s->be->notify(tx->conn, payload) != STORE_OK)
            fprintf(stderr, "store: cannot signal the other cohortd (nodes)\n");
    } while (!tx->touched_all && i < tx->touched.n);
}

/* How many writes from o on can go to o's many together: 1 for a write
 * that has none. */
static int group_len(const struct op *o)
{
    int k = 1;
    if (o->many)
        for (const struct op *p = o->next; p && p->many == o->many && k < GROUP_MAX; p = p->next)
            k++;
    return k;
}

/*
 * Applies the k writes from o under savepoint w, already set: through their
 * many when there is one and it succeeds, else one at a time, each undone
 * alone when it fails and the next given its own savepoint.  rcs gets their
 * codes.  Returns 0, or the code of a savepoint that failed between two of
 * them (nothing after it could be undone alone).
 */
static int apply(store_conn *c, struct store_tx *tx, struct op *o, int k, int *rcs)
{
    int sp;
    if (k > 1) {
        void *ctxs[GROUP_MAX];
        struct op *p = o;
        for (int i = 0; i < k; i++, p = p->next)
            ctxs[i] = p->ctx;
        if (o->many(tx, ctxs, k) == STORE_OK) {
            memset(rcs, 0, sizeof *rcs * (size_t)k);
            return 0;
        }
        /* One of them is refused, or the engine failed: each alone says which. */
        c->be->exec(c, "ROLLBACK TO w");
    }
    for (int i = 0; i < k; i++, o = o->next) {
        if (i > 0 && (sp = next_savepoint(c)) != STORE_OK)
            return sp;
        rcs[i] = o->fn(tx, o->ctx);
        if (rcs[i] != 0)
            c->be->exec(c, "ROLLBACK TO w");
    }
    return 0;
}

/*
 * One transaction for a batch of writes, each inside savepoint w so that a
 * failing one is undone alone (consecutive writes with one many share it:
 * apply).  The savepoint statements ride with their
 * neighbours ("BEGIN ...; SAVEPOINT w", "RELEASE w; SAVEPOINT w" between
 * writes, none after the last: COMMIT ends it): on PostgreSQL each exec is
 * a round trip, and a write of two statements then costs three, not four.
 */
static void run_batch(store *s, struct op *batch)
{
    store_conn *c = s->writer;
    const store_be *be = c->be;
    struct store_tx tx = {.conn = c, .writing = 1};
    int n = 0;
    char begin[200];
    int64_t t0 = util_mono_us();
    c->err[0] = '\0';
    int begun = fmt_whole(begin, sizeof begin, "%s; SAVEPOINT w", be->begin_write) != 0
                    ? STORE_EIO
                    : be->exec(c, begin),
        ok = begun == STORE_OK, crc;
    int rcs[BATCH_MAX];
    if (!ok) {
        fprintf(stderr, "store: cannot begin a write: %s\n", c->err);
        be->exec(c, "ROLLBACK");
    }
    for (struct op *o = batch, *next; o; o = next) {
        int k = group_len(o), sp = 0;
        next = o;
        for (int i = 0; i < k; i++)
            next = next->next;
        if (!ok) {
            for (int i = 0; i < k; i++)
                rcs[n + i] = begun;
        } else if ((sp = apply(c, &tx, o, k, rcs + n)) != 0 ||
                   (next && (sp = next_savepoint(c)) != STORE_OK)) {
            /* Not expected: nothing after this write could be undone alone. */
            fprintf(stderr, "store: savepoint failed: %s\n", c->err);
            begun = sp;
            ok = 0;
            for (int i = 0; i < n + k; i++)
                rcs[i] = sp;
            be->exec(c, "ROLLBACK");
        }
        n += k;
    }
    int64_t t1 = util_mono_us();
    int touched = tx.touched_all || tx.touched.n > 0;
    if (ok && touched && be->notify)
        notify_nodes(s, &tx); /* delivered with the commit, or not at all */
    if (ok && (crc = be->exec(c, sql_commit)) != STORE_OK) {
        fprintf(stderr, "store: commit failed: %s\n", c->err);
        be->exec(c, "ROLLBACK");
        /* A full disk stays a full disk to the caller (507), not "storage error". */
        for (int i = 0; i < n; i++)
            rcs[i] = crc;
        ok = 0;
    }
    if (ok && touched)
        tell_nodes(s, tx.touched_all ? NULL : tx.touched.v, tx.touched.n);
    free(tx.touched.v);
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
        "STORE_JOB_FINAL", "STORE_JOB_ACTIVE", "STORE_JOB_NOT_RETRYABLE", "STORE_JOB_STOPPING",
        "STORE_DOWN",      "STORE_JOIN_REFUSED"};
    return rc <= 0 && -rc < (int)(sizeof names / sizeof names[0]) ? names[-rc] : "STORE_?";
}

store_rc store_submit(store *s, store_write_fn fn, void *ctx, store_done_fn done, void *arg)
{
    return store_submit_many(s, fn, NULL, ctx, done, arg);
}

store_rc store_submit_many(store *s, store_write_fn fn, store_write_many_fn many, void *ctx,
                           store_done_fn done, void *arg)
{
    /* Reads after this write must see it: end the caller's snapshot. */
    store_read_end(s);
    struct op *o = malloc(sizeof *o);
    if (!o)
        return STORE_NOMEM;
    *o = (struct op){fn, many, ctx, done, arg, NULL};
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

/* The backend a target names, and what its open takes, in *rest. */
static const store_be *pick_backend(const char *target, const char **rest)
{
    if (!strncmp(target, "postgresql://", 13) || !strncmp(target, "postgres://", 11)) {
        *rest = target;
        return &store_be_pg;
    }
    *rest = !strncmp(target, "sqlite:", 7) ? target + 7 : target;
    return &store_be_sqlite;
}

store *store_open(const char *target, char *err, size_t errlen)
{
    store *s = calloc(1, sizeof *s);
    const char *rest;
    if (!s) {
        fmt_cut(err, errlen, "out of memory");
        return NULL;
    }
    s->be = pick_backend(target, &rest);
    if (!*rest || fmt_whole(s->target, sizeof s->target, "%s", rest) != 0) {
        fmt_cut(err, errlen, *rest ? "store target too long" : "store target is empty");
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->sig_lock, NULL);
    pthread_mutex_init(&s->nodes_lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->gen = __atomic_fetch_add(&store_gen_next, 1, __ATOMIC_RELAXED);
    fmt_cut(s->id, sizeof s->id, "%llx", /* 16 hex digits at most */
             (unsigned long long)((uint64_t)util_now_ms() ^ (uint64_t)getpid() << 40 ^
                                  (uint64_t)(uintptr_t)s));
    s->writer = s->be->open(s->target, STORE_OPEN_WRITER, err, errlen);
    if (!s->writer)
        goto fail;
    s->writer->owner = pthread_self();
    if (migrate(s->writer, &s->schema, err, errlen) != 0)
        goto fail;
    if (s->be->ready && s->be->ready(s->writer) != STORE_OK) {
        fmt_cut(err, errlen, "%s", s->writer->err);
        goto fail;
    }
    if (pthread_create(&s->thread, NULL, writer_main, s) != 0) {
        fmt_cut(err, errlen, "cannot start the writer thread");
        goto fail;
    }
    return s;
fail:
    if (s->writer)
        s->be->close(s->writer);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->sig_lock);
    pthread_mutex_destroy(&s->nodes_lock);
    pthread_cond_destroy(&s->wake);
    free(s);
    return NULL;
}

void store_close(store *s)
{
    if (!s)
        return;
    util_thread_stop(&s->lock, &s->wake, &s->stopping, s->thread);
    if (s->listening)
        pthread_join(s->listener, NULL);
    if (s->leader)
        s->be->close(s->leader);
    for (store_conn *c = s->readers, *next; c; c = next) {
        next = c->next;
        s->be->close(c);
    }
    s->be->close(s->writer);
    if (tl_reader.s == s)
        tl_reader.s = NULL;
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->sig_lock);
    pthread_mutex_destroy(&s->nodes_lock);
    pthread_cond_destroy(&s->wake);
    free(s);
}

const char *store_backend_name(store *s)
{
    return s->be->name;
}

/* ---- several cohortd on one database ---- */

#define SIGNAL_WAIT_MS 500  /* how soon the listener sees store_close */
#define SIGNAL_RETRY_MS 1000

int store_shared(store *s)
{
    return s->be->notify != NULL;
}

void store_signal(store *s, const char *what)
{
    if (!s->be->notify)
        return;
    store_read_end(s); /* a NOTIFY inside a snapshot would wait for its end */
    store_conn *c = store_reader(s);
    char payload[64];
    if (fmt_whole(payload, sizeof payload, "%s %s", s->id, what) != 0 ||
        (c && s->be->notify(c, payload) != STORE_OK))
        fprintf(stderr, "store: cannot signal the other cohortd (%s)\n", what);
}

static int stopping(store *s)
{
    pthread_mutex_lock(&s->lock);
    int stop = s->stopping;
    pthread_mutex_unlock(&s->lock);
    return stop;
}

static void tell(store *s, const char *what)
{
    pthread_mutex_lock(&s->sig_lock);
    if (s->on_signal)
        s->on_signal(s->on_signal_arg, what);
    pthread_mutex_unlock(&s->sig_lock);
}

/* A signal from another cohortd: its nodes (notify_nodes) or a word. */
static void heard(store *s, const char *what)
{
    if (strncmp(what, "nodes", 5) || (what[5] && what[5] != ' ')) {
        tell(s, what);
        return;
    }
    int64_t ids[SIGNAL_MAX / 2];
    size_t n = 0;
    for (const char *p = what + 5; *p == ' ' && n < sizeof ids / sizeof *ids;) {
        char *end;
        long long v = strtoll(p + 1, &end, 10);
        if (end == p + 1 || v <= 0)
            break;
        ids[n++] = v;
        p = end;
    }
    tell_nodes(s, n ? ids : NULL, n);
}

/* The listener: one connection LISTENing, re-established when it breaks
 * (the callback then hears NULL: what was sent meanwhile is lost). */
static void *listener_main(void *arg)
{
    store *s = arg;
    store_conn *c = NULL;
    int lost = 0;
    char buf[SIGNAL_MAX + 1], err[256];
    while (!stopping(s)) {
        if (!c) {
            c = s->be->open(s->target, STORE_OPEN_OTHER, err, sizeof err);
            if (c && s->be->listen(c) != STORE_OK) {
                s->be->close(c);
                c = NULL;
            }
            if (!c) {
                struct timespec ts = {SIGNAL_RETRY_MS / 1000, 0};
                nanosleep(&ts, NULL);
                lost = 1;
                continue;
            }
            if (lost)
                tell(s, NULL);
        }
        int rc = s->be->wait_note(c, SIGNAL_WAIT_MS, buf, sizeof buf);
        if (rc < 0) {
            fprintf(stderr, "store: the signal connection broke; reconnecting\n");
            s->be->close(c);
            c = NULL;
            lost = 1;
            continue;
        }
        size_t idlen = strlen(s->id);
        if (rc == 1 && !(strncmp(buf, s->id, idlen) == 0 && buf[idlen] == ' '))
            heard(s, strchr(buf, ' ') ? strchr(buf, ' ') + 1 : buf);
    }
    if (c)
        s->be->close(c);
    return NULL;
}

store_rc store_on_signal(store *s, void (*fn)(void *arg, const char *what), void *arg)
{
    if (!s->be->listen)
        return STORE_OK;
    pthread_mutex_lock(&s->sig_lock);
    s->on_signal = fn;
    s->on_signal_arg = arg;
    pthread_mutex_unlock(&s->sig_lock);
    if (!fn || s->listening)
        return STORE_OK;
    if (pthread_create(&s->listener, NULL, listener_main, s) != 0)
        return STORE_EIO;
    s->listening = 1;
    return STORE_OK;
}

void store_on_nodes(store *s, void (*fn)(void *arg, const int64_t *ids, size_t n), void *arg)
{
    pthread_mutex_lock(&s->nodes_lock);
    s->on_nodes = fn;
    s->on_nodes_arg = arg;
    pthread_mutex_unlock(&s->nodes_lock);
}

int store_lead(store *s)
{
    if (!s->be->try_lead)
        return 1;
    char err[256];
    if (!s->leader && !(s->leader = s->be->open(s->target, STORE_OPEN_OTHER, err, sizeof err))) {
        if (s->leading)
            fprintf(stderr, "store: lost the lead: %s\n", err);
        __atomic_store_n(&s->leading, 0, __ATOMIC_RELEASE);
        return 0;
    }
    int rc = s->be->try_lead(s->leader, s->leading);
    if (rc < 0) {
        s->be->close(s->leader); /* the session, and any lock it held, is gone */
        s->leader = NULL;
        rc = 0;
    }
    if (rc != s->leading)
        fprintf(stderr, "store: this cohortd %s\n",
                rc ? "leads now (runs the scheduler)" : "lost the lead");
    __atomic_store_n(&s->leading, rc, __ATOMIC_RELEASE);
    return rc;
}

int store_leads(store *s)
{
    return s->be->try_lead ? __atomic_load_n(&s->leading, __ATOMIC_ACQUIRE) : 1;
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

store_rc store_job_state_counts(store *s, void (*fn)(void *arg, const char *state, int64_t n), void *arg)
{
    /* The few jobs not yet ended, from the index; those that ended, from the
     * running counts that migration 012's triggers keep per tenant. */
    static const char sql[] =
        "SELECT state, count(*) FROM jobs WHERE state IN ('PENDING', 'STARTING', 'RUNNING')"
        " GROUP BY state"
        " UNION ALL SELECT state, CAST(sum(jobs) AS BIGINT) FROM job_end_counts GROUP BY state";
    store_st *st = store_read_stmt(s, sql);
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW)
        fn(arg, store_col_text(st, 0), store_col_int64(st, 1));
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}
