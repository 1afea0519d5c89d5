/*
 * store_pg: the PostgreSQL backend of store.c, through libpq.
 *
 * Owns its connections and their prepared statements.  The table
 * modules' SQL numbers its parameters ?1, ?2, ...; this file rewrites
 * them as $1, $2, ... once per statement and prepares it on first use
 * (PQprepare), then runs it with PQexecPrepared: one round trip per
 * statement, results whole (list pages are bounded by LIMIT).  Commands
 * whose answer nothing waits for (a snapshot's BEGIN, the writer's
 * savepoints between writes) are deferred and sent in one pipeline with
 * the next statement (PQenterPipelineMode), or ahead of the next exec.  Values go
 * as text except blobs (binary); results come back as text and are parsed
 * here (bytea from its hex form).
 *
 * A connection found broken gets a new session, on which its statements
 * are prepared again, where the next command begins a transaction or runs
 * outside one (a server restarted, a failover): never inside one, whose
 * earlier writes the break undid, so the error ends it and the writer
 * reports it.  While the server stays away, once a second at most.
 */
#include "lib/clock.h"
#include "lib/fmt.h"
#include "storage/store_int.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STMT_CACHE 96
#define MAX_PARAMS 512 /* a statement's $N: many rows of one insert (store_job_insert_many) */
#define LATER_MAX 8 /* deferred commands; past it they are run at once */
#define LATER_LEN 512
#define REVIVE_US 1000000 /* between two tries at a new session */
#define OID_BYTEA 17
#define OID_INT8 20
#define OID_TEXT 25
#define OID_FLOAT8 701
/* The writer's batches, across every cohortd on the database, one at a
 * time: the lock the batch's BEGIN takes ("cohort" in ASCII). */
#define WRITE_LOCK "109330144653940"

struct pg_param {
    const char *val; /* NULL: SQL NULL */
    int len, fmt;
    unsigned type;   /* an Oid; 0 lets the server infer it */
    char *heap;      /* owned copy of a text or blob value */
    char num[32];    /* an integer's or a double's text */
};

struct pg_conn;

struct pg_st {
    store_st base;
    struct pg_conn *c;
    char *sql;      /* with $N placeholders; owned */
    char name[16];
    int prepared;   /* on the connection's current session */
    int tx;         /* what it does to a transaction: TX_BEGIN, TX_END or 0 */
    int nparams;
    uint64_t used[MAX_PARAMS / 64]; /* bit i-1: $i appears in sql */
    PGresult *res;
    int row, nrows, executed;
    int64_t changes;
    unsigned char *blob; /* the last bytea read; PQfreemem */
    struct pg_param p[]; /* nparams of them */
};

struct pg_conn {
    store_conn base;
    PGconn *pg;
    unsigned next_name;
    int open;          /* a transaction begun here (sent or deferred) and not ended */
    int down;          /* the last try at a new session failed (said once) */
    int64_t revive_at; /* monotonic: no new session tried before it */
    int nlater;
    char later[LATER_MAX][LATER_LEN]; /* deferred commands, in order */
    int nstmt;
    struct {
        const char *sql;
        struct pg_st *st;
    } stmt[STMT_CACHE];
};

enum { TX_BEGIN = 1, TX_END = 2 };

/* What a command (the first of sql's) does to a transaction. */
static int tx_word(const char *sql)
{
    sql += strspn(sql, " \t\n");
    if (!strncmp(sql, "BEGIN", 5))
        return TX_BEGIN;
    if (!strncmp(sql, "COMMIT", 6) ||
        (!strncmp(sql, "ROLLBACK", 8) && strncmp(sql, "ROLLBACK TO", 11) != 0))
        return TX_END;
    return 0;
}

/* Records what a command sent did to c's transaction.  The deferred
 * commands went with an end, or belonged to the transaction it ended. */
static void track(struct pg_conn *c, int word)
{
    if (word == TX_BEGIN) {
        c->open = 1;
    } else if (word == TX_END) {
        c->open = 0;
        c->nlater = 0;
    }
}

/* Drops the server's notices (CREATE TABLE IF NOT EXISTS and the like). */
static void quiet(void *arg, const PGresult *res)
{
    (void)arg;
    (void)res;
}

/* The STORE_* of a failed result, by its SQLSTATE. */
static int pg_rc(const PGresult *res)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (!state)
        return STORE_EIO;
    if (!strcmp(state, "23505"))
        return STORE_CONFLICT;
    if (!strncmp(state, "23", 2))
        return STORE_INVALID;
    if (!strcmp(state, "53100"))
        return STORE_FULL;
    if (!strcmp(state, "53200"))
        return STORE_NOMEM;
    return STORE_EIO;
}

/* Reports an error worth a line in the log: not a refused constraint,
 * which the callers turn into 409s and 400s. */
static void report(const struct pg_conn *c, const PGresult *res, const char *sql)
{
    int rc = pg_rc(res);
    if (rc == STORE_CONFLICT || rc == STORE_INVALID)
        return;
    const char *msg = res ? PQresultErrorMessage(res) : "";
    fprintf(stderr, "store: postgresql: %s%s%s\n", *msg ? msg : PQerrorMessage(c->pg),
            sql ? "  in: " : "", sql ? sql : "");
}

/*
 * What every session runs first.  A 201 only after the commit is on disk,
 * whatever the server's default.  No parallel workers: cohortd's queries
 * are short, and starting the workers cost more than they saved (the
 * scheduler's usage read at a million jobs: 50 - 127 ms with them, 5 - 18
 * without; bench/history).
 */
static int session_setup(struct pg_conn *c, char *err, size_t errlen)
{
    static const char sql[] =
        "SET synchronous_commit = on; SET max_parallel_workers_per_gather = 0";
    PQsetNoticeReceiver(c->pg, quiet, NULL);
    PGresult *res = PQexec(c->pg, sql);
    int rc = PQresultStatus(res) == PGRES_COMMAND_OK ? STORE_OK : pg_rc(res);
    if (rc != STORE_OK && err) {
        const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg);
        fmt_cut(err, errlen, "%.*s", (int)strcspn(msg, "\n"), msg);
    }
    PQclear(res);
    return rc;
}

/* Closes the connection's session and opens another, on which every
 * statement is prepared again.  0 when the new one is not usable. */
static int new_session(struct pg_conn *c)
{
    PQreset(c->pg);
    for (int i = 0; i < c->nstmt; i++)
        c->stmt[i].st->prepared = 0;
    return PQstatus(c->pg) == CONNECTION_OK && session_setup(c, NULL, 0) == STORE_OK;
}

/* Whether nothing of c's transaction has reached the server yet: none is
 * open, or its BEGIN still waits among the deferred commands.  Only then
 * may a broken connection be replaced under the next command. */
static int fresh(const struct pg_conn *c)
{
    return !c->open || (c->nlater > 0 && tx_word(c->later[0]) == TX_BEGIN);
}

/*
 * Whether c can carry a command: a broken connection gets a new session
 * when the command is fresh (above), at most once per REVIVE_US while the
 * server stays away; the loss and the return are logged once each.  What
 * c->open says holds on the new session too: nothing had been sent.
 */
static int revive(struct pg_conn *c)
{
    if (PQstatus(c->pg) != CONNECTION_BAD)
        return 1;
    int64_t now = util_mono_us();
    if (!fresh(c) || now < c->revive_at)
        return 0;
    if (!new_session(c)) {
        c->revive_at = now + REVIVE_US;
        if (!c->down) {
            const char *msg = PQerrorMessage(c->pg);
            fprintf(stderr, "store: postgresql: connection lost (%.*s); trying again each second\n",
                    (int)strcspn(msg, "\n"), msg);
        }
        c->down = 1;
        return 0;
    }
    fprintf(stderr, "store: postgresql: connection re-established\n");
    c->down = 0;
    return 1;
}

/* Runs sql (after the deferred commands, in the same round trip): on a
 * connection that broke under a fresh command, once more on a new one. */
static int pg_exec(store_conn *sc, const char *sql)
{
    struct pg_conn *c = (struct pg_conn *)sc;
    char *all = NULL;
    int again = fresh(c), rc = STORE_EIO;
    PGresult *res = NULL;
    if (c->nlater) { /* the deferred commands first, in the same round trip */
        size_t n = strlen(sql) + 1;
        for (int i = 0; i < c->nlater; i++)
            n += strlen(c->later[i]) + 2;
        if (!(all = malloc(n))) {
            fmt_cut(sc->err, sizeof sc->err, "out of memory");
            return STORE_NOMEM;
        }
        size_t off = 0;
        for (int i = 0; i < c->nlater; i++) { /* n was counted for them all */
            fmt_cut(all + off, n - off, "%s; ", c->later[i]);
            off += strlen(all + off);
        }
        fmt_cut(all + off, n - off, "%s", sql);
    }
    for (int tries = 0; tries < 2; tries++) {
        if (!revive(c))
            break;
        PQclear(res);
        res = PQexec(c->pg, all ? all : sql);
        ExecStatusType s = PQresultStatus(res);
        rc = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? STORE_OK : pg_rc(res);
        if (rc == STORE_OK || !again || PQstatus(c->pg) != CONNECTION_BAD)
            break;
    }
    if (PQstatus(c->pg) != CONNECTION_BAD)
        c->nlater = 0; /* sent: on a broken connection they wait for the next session */
    else if (rc == STORE_EIO)
        rc = STORE_DOWN;
    track(c, tx_word(sql));
    if (rc != STORE_OK) { /* kept on the connection, for the caller to say */
        const char *msg = res ? PQresultErrorMessage(res) : "";
        if (!*msg)
            msg = PQerrorMessage(c->pg);
        fmt_cut(sc->err, sizeof sc->err, "%.*s", (int)strcspn(msg, "\n"), msg);
    }
    PQclear(res);
    free(all);
    return rc;
}

static store_conn *pg_open(const char *target, int mode, char *err, size_t errlen)
{
    struct pg_conn *c = calloc(1, sizeof *c);
    if (!c) {
        fmt_cut(err, errlen, "out of memory");
        return NULL;
    }
    c->base.be = &store_be_pg;
    c->pg = PQconnectdb(target);
    if (c->pg && PQstatus(c->pg) == CONNECTION_BAD && mode == STORE_OPEN_READER) {
        /* Down now: revive() tries again when the thread next reads. */
        c->revive_at = util_mono_us() + REVIVE_US;
        c->down = 1;
        return &c->base;
    }
    if (PQstatus(c->pg) != CONNECTION_OK) {
        const char *msg = PQerrorMessage(c->pg);
        fmt_cut(err, errlen, "cannot connect to PostgreSQL: %.*s", (int)strcspn(msg, "\n"),
                 msg);
        goto fail;
    }
    if (session_setup(c, err, errlen) != STORE_OK)
        goto fail;
    return &c->base;
fail:
    PQfinish(c->pg);
    free(c);
    return NULL;
}

static void param_clear(struct pg_param *p)
{
    free(p->heap);
    memset(p, 0, sizeof *p);
}

static void st_clear(struct pg_st *st)
{
    PQclear(st->res);
    st->res = NULL;
    st->row = st->nrows = st->executed = 0;
    if (st->blob)
        PQfreemem(st->blob);
    st->blob = NULL;
}

static void st_free(struct pg_st *st)
{
    st_clear(st);
    for (int i = 0; i < st->nparams; i++)
        free(st->p[i].heap);
    free(st->sql);
    free(st);
}

static void pg_close(store_conn *sc)
{
    struct pg_conn *c = (struct pg_conn *)sc;
    if (!c)
        return;
    for (int i = 0; i < c->nstmt; i++)
        st_free(c->stmt[i].st);
    PQfinish(c->pg);
    free(c);
}

/*
 * Rewrites sql's ?N and ? as $N into a fresh string, outside quoted text;
 * records how many parameters it takes and which appear.  NULL when it
 * names a parameter past MAX_PARAMS or memory runs out.
 */
static char *rewrite(const char *sql, int *nparams, uint64_t *used)
{
    size_t n = strlen(sql);
    /* "$N" is no longer than "?N"; a bare "?" grows to at most "$512". */
    size_t cap = n * 4 + 1;
    char *out = malloc(cap), *o = out;
    int next = 1, max = 0;
    char quote = 0;
    memset(used, 0, sizeof(uint64_t) * (MAX_PARAMS / 64));
    if (!out)
        return NULL;
    for (const char *s = sql; *s; s++) {
        if (quote) {
            if (*s == quote)
                quote = 0;
            *o++ = *s;
            continue;
        }
        if (*s == '\'' || *s == '"') {
            quote = *s;
            *o++ = *s;
            continue;
        }
        if (*s != '?') {
            *o++ = *s;
            continue;
        }
        long k = next;
        if (s[1] >= '0' && s[1] <= '9') {
            char *end;
            k = strtol(s + 1, &end, 10);
            s = end - 1;
        }
        if (k < 1 || k > MAX_PARAMS) {
            free(out);
            return NULL;
        }
        next = (int)k + 1;
        max = k > max ? (int)k : max;
        used[(k - 1) / 64] |= 1ULL << ((k - 1) % 64);
        fmt_cut(o, cap - (size_t)(o - out), "$%ld", k); /* cap holds "$512" for each "?" */
        o += strlen(o);
    }
    *o = '\0';
    *nparams = max;
    return out;
}

static store_st *pg_stmt(store_conn *sc, const char *sql)
{
    struct pg_conn *c = (struct pg_conn *)sc;
    for (int i = 0; i < c->nstmt; i++) {
        if (c->stmt[i].sql == sql) {
            struct pg_st *st = c->stmt[i].st;
            st_clear(st);
            for (int k = 0; k < st->nparams; k++)
                param_clear(&st->p[k]);
            return &st->base;
        }
    }
    uint64_t used[MAX_PARAMS / 64];
    int nparams;
    char *text = rewrite(sql, &nparams, used);
    if (!text) {
        fprintf(stderr, "store: postgresql: cannot rewrite statement: %.200s\n", sql);
        return NULL;
    }
    struct pg_st *st = calloc(1, sizeof *st + sizeof st->p[0] * (size_t)nparams);
    if (!st) {
        free(text);
        return NULL;
    }
    st->base.be = &store_be_pg;
    st->c = c;
    st->sql = text;
    st->nparams = nparams;
    memcpy(st->used, used, sizeof used);
    fmt_cut(st->name, sizeof st->name, "c%u", c->next_name++); /* 11 at most */
    st->tx = tx_word(sql);
    if (c->nstmt == STMT_CACHE) {
        /* Not expected: evict the oldest; the server keeps its plan until
         * the session ends, which bounds it to the statements' count. */
        st_free(c->stmt[0].st);
        memmove(&c->stmt[0], &c->stmt[1], sizeof c->stmt[0] * (STMT_CACHE - 1));
        c->nstmt--;
    }
    c->stmt[c->nstmt].sql = sql;
    c->stmt[c->nstmt].st = st;
    c->nstmt++;
    return &st->base;
}

static void pg_bind(store_st *s, int i, const store_arg *a)
{
    struct pg_st *st = (struct pg_st *)s;
    if (i < 1 || i > st->nparams)
        return;
    struct pg_param *p = &st->p[i - 1];
    param_clear(p);
    switch (a->kind) {
    case 'i':
        fmt_cut(p->num, sizeof p->num, "%lld", (long long)a->i);
        p->len = (int)strlen(p->num);
        p->val = p->num;
        p->type = OID_INT8;
        break;
    case 'd':
        fmt_cut(p->num, sizeof p->num, "%.17g", a->d);
        p->len = (int)strlen(p->num);
        p->val = p->num;
        p->type = OID_FLOAT8;
        break;
    case 't':
        if (a->t && (p->heap = strdup(a->t)))
            p->val = p->heap;
        p->type = OID_TEXT;
        break;
    case 'b':
        if ((p->heap = malloc(a->n > 0 ? (size_t)a->n : 1))) {
            memcpy(p->heap, a->b, (size_t)(a->n > 0 ? a->n : 0));
            p->val = p->heap;
            p->len = a->n;
            p->fmt = 1;
        }
        p->type = OID_BYTEA;
        break;
    default:
        break;
    }
}

/*
 * Prepares st on its connection's session.  The parameter types are those
 * of this first binding; a NULL leaves its type to the server, and where
 * the server cannot tell it (a bare "?2 IS NULL": SQLSTATE 42P18) it is
 * taken for text.  A parameter the SQL never names is declared an integer,
 * which the server needs it to be something.  Inside a transaction the
 * attempt runs under a savepoint: a refused PREPARE would otherwise end
 * the transaction (once per statement and connection, so it costs little).
 */
static int prepare(struct pg_st *st)
{
    unsigned types[MAX_PARAMS];
    PGresult *res = NULL;
    int in_tx = PQtransactionStatus(st->c->pg) == PQTRANS_INTRANS;
    if (in_tx && pg_exec(&st->c->base, "SAVEPOINT cohort_prepare") != STORE_OK)
        return STORE_EIO;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < st->nparams; i++) {
            types[i] = (st->used[i / 64] >> (i % 64) & 1) ? st->p[i].type : OID_INT8;
            if (pass == 1 && !types[i])
                types[i] = OID_TEXT;
        }
        PQclear(res);
        res = PQprepare(st->c->pg, st->name, st->sql, st->nparams, types);
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (in_tx && state)
            pg_exec(&st->c->base, "ROLLBACK TO cohort_prepare");
        if (!state || strcmp(state, "42P18") != 0)
            break;
    }
    if (in_tx)
        pg_exec(&st->c->base, "RELEASE cohort_prepare");
    int rc = PQresultStatus(res) == PGRES_COMMAND_OK ? STORE_OK : pg_rc(res);
    if (rc != STORE_OK)
        report(st->c, res, st->sql);
    PQclear(res);
    if (rc == STORE_OK)
        st->prepared = 1;
    return rc;
}

/*
 * Sends the deferred commands and st in one pipeline and reads every
 * answer: st's into st->res.  A failed deferred command is reported and
 * returned (what follows it was aborted).  On a broken connection the
 * commands stay deferred, for the session a reconnect opens.
 */
static int run_piped(struct pg_st *st, const char *const *vals, const int *lens, const int *fmts)
{
    struct pg_conn *c = st->c;
    PGconn *pg = c->pg;
    int n = c->nlater, rc = STORE_OK, cmd = 0;
    if (!PQenterPipelineMode(pg))
        return STORE_EIO;
    int sent = 1;
    for (int i = 0; sent && i < n; i++)
        sent = PQsendQueryParams(pg, c->later[i], 0, NULL, NULL, NULL, NULL, 0);
    sent = sent && PQsendQueryPrepared(pg, st->name, st->nparams, vals, lens, fmts, 0) &&
           PQpipelineSync(pg);
    /* Each command's results end with a NULL; the sync's result ends it all. */
    for (int guard = 0; guard < 4 * (n + 2); guard++) {
        PGresult *res = PQgetResult(pg);
        if (!res) {
            if (++cmd > n + 1 || PQstatus(pg) == CONNECTION_BAD)
                break;
            continue;
        }
        ExecStatusType s = PQresultStatus(res);
        if (s == PGRES_PIPELINE_SYNC) {
            PQclear(res);
            break;
        }
        if (cmd < n && s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK && rc == STORE_OK) {
            rc = pg_rc(res);
            report(c, res, c->later[cmd]);
        }
        if (cmd == n && !st->res)
            st->res = res;
        else
            PQclear(res);
    }
    if (!PQexitPipelineMode(pg)) {
        /* Answers left unread: only a connection that broke mid-way.  A
         * new session, or the next call finds it still in pipeline mode. */
        if (rc == STORE_OK)
            rc = STORE_EIO;
        if (!new_session(c))
            c->revive_at = util_mono_us() + REVIVE_US;
        PQclear(st->res);
        st->res = NULL;
        return rc;
    }
    if (PQstatus(pg) != CONNECTION_BAD)
        c->nlater = 0;
    if (!sent && rc == STORE_OK)
        rc = STORE_EIO;
    if (rc != STORE_OK) {
        PQclear(st->res);
        st->res = NULL;
    }
    return rc;
}

static int run(struct pg_st *st)
{
    const char *vals[MAX_PARAMS];
    int lens[MAX_PARAMS], fmts[MAX_PARAMS];
    for (int i = 0; i < st->nparams; i++) {
        vals[i] = st->p[i].val;
        lens[i] = st->p[i].len;
        fmts[i] = st->p[i].fmt;
    }
    int rc = st->prepared ? STORE_OK : prepare(st);
    if (rc != STORE_OK)
        return rc;
    if (st->c->nlater) {
        if ((rc = run_piped(st, vals, lens, fmts)) != STORE_OK)
            return rc;
    } else {
        st->res = PQexecPrepared(st->c->pg, st->name, st->nparams, vals, lens, fmts, 0);
    }
    ExecStatusType s = PQresultStatus(st->res);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        rc = pg_rc(st->res);
        report(st->c, st->res, st->sql);
        return rc;
    }
    st->nrows = s == PGRES_TUPLES_OK ? PQntuples(st->res) : 0;
    const char *n = PQcmdTuples(st->res);
    st->changes = n && *n ? strtoll(n, NULL, 10) : 0;
    return STORE_OK;
}

static int pg_step(store_st *s)
{
    struct pg_st *st = (struct pg_st *)s;
    if (!st->executed) {
        struct pg_conn *c = st->c;
        int again = fresh(c), rc = STORE_EIO;
        st->executed = 1;
        for (int tries = 0; tries < 2; tries++) {
            if (!revive(c))
                break;
            PQclear(st->res);
            st->res = NULL;
            rc = run(st);
            if (rc != STORE_EIO || !again || PQstatus(c->pg) != CONNECTION_BAD)
                break;
        }
        track(c, st->tx);
        if (rc == STORE_EIO && PQstatus(c->pg) == CONNECTION_BAD)
            rc = STORE_DOWN;
        if (rc != STORE_OK)
            return rc;
    } else {
        st->row++;
    }
    if (st->blob) {
        PQfreemem(st->blob);
        st->blob = NULL;
    }
    return st->row < st->nrows ? STORE_ROW : STORE_DONE;
}

static void pg_reset(store_st *s)
{
    struct pg_st *st = (struct pg_st *)s;
    st_clear(st);
    for (int k = 0; k < st->nparams; k++)
        param_clear(&st->p[k]);
}

static int64_t pg_changes(store_st *s)
{
    return ((struct pg_st *)s)->changes;
}

static int pg_col_null(store_st *s, int i)
{
    struct pg_st *st = (struct pg_st *)s;
    return PQgetisnull(st->res, st->row, i);
}

static int64_t pg_col_int64(store_st *s, int i)
{
    struct pg_st *st = (struct pg_st *)s;
    const char *v = PQgetvalue(st->res, st->row, i);
    if (!v || !*v)
        return 0;
    if (*v == 't' || *v == 'f') /* a boolean */
        return *v == 't';
    return strtoll(v, NULL, 10);
}

static double pg_col_double(store_st *s, int i)
{
    struct pg_st *st = (struct pg_st *)s;
    const char *v = PQgetvalue(st->res, st->row, i);
    return v && *v ? strtod(v, NULL) : 0;
}

static const char *pg_col_text(store_st *s, int i)
{
    struct pg_st *st = (struct pg_st *)s;
    return PQgetisnull(st->res, st->row, i) ? NULL : PQgetvalue(st->res, st->row, i);
}

static const void *pg_col_blob(store_st *s, int i, int *len)
{
    struct pg_st *st = (struct pg_st *)s;
    *len = 0;
    if (PQgetisnull(st->res, st->row, i))
        return NULL;
    if (st->blob)
        PQfreemem(st->blob);
    size_t n = 0;
    st->blob = PQunescapeBytea((const unsigned char *)PQgetvalue(st->res, st->row, i), &n);
    *len = st->blob ? (int)n : 0;
    return st->blob;
}

/* ---- several cohortd on one database ---- */

#define CHANNEL "cohort"
/* The leader's session lock ("lead" in ASCII), apart from WRITE_LOCK. */
#define LEAD_LOCK "1818583396"

static int pg_notify(store_conn *sc, const char *payload)
{
    static const char sql[] = "SELECT pg_notify('" CHANNEL "', ?1)";
    store_st *st = store_prep(sc, sql, STORE_ARGS(STORE_T(payload)));
    if (!st)
        return STORE_EIO;
    int rc = store_step(st);
    store_reset(st);
    return rc == STORE_ROW || rc == STORE_DONE ? STORE_OK : rc;
}

static int pg_listen(store_conn *sc)
{
    return pg_exec(sc, "LISTEN " CHANNEL);
}

static int pg_wait_note(store_conn *sc, int timeout_ms, char *buf, size_t n)
{
    struct pg_conn *c = (struct pg_conn *)sc;
    for (int waited = 0;; waited = 1) {
        if (!PQconsumeInput(c->pg))
            return STORE_EIO;
        PGnotify *note = PQnotifies(c->pg);
        if (note) {
            fmt_cut(buf, n, "%s", note->extra ? note->extra : ""); /* SIGNAL_MAX, sent so */
            PQfreemem(note);
            return 1;
        }
        if (waited)
            return 0;
        struct pollfd p = {.fd = PQsocket(c->pg), .events = POLLIN};
        if (p.fd < 0)
            return STORE_EIO;
        if (poll(&p, 1, timeout_ms) < 0 && errno != EINTR)
            return STORE_EIO;
    }
}

static int pg_try_lead(store_conn *sc, int held)
{
    static const char sql_take[] = "SELECT pg_try_advisory_lock(" LEAD_LOCK ")";
    static const char sql_alive[] = "SELECT 1";
    int64_t v = 0;
    int rc = store_int64(sc, &v, held ? sql_alive : sql_take, NULL);
    if (rc != STORE_OK)
        return rc == STORE_NOTFOUND ? STORE_EIO : rc;
    return v == 1;
}

static int pg_in_tx(store_conn *sc)
{
    struct pg_conn *c = (struct pg_conn *)sc;
    return c->open || c->nlater > 0;
}

static int pg_defer(store_conn *sc, const char *sql)
{
    struct pg_conn *c = (struct pg_conn *)sc;
    for (const char *p = sql; *p;) {
        size_t n = strcspn(p, ";");
        if (c->nlater == LATER_MAX || n >= LATER_LEN) {
            int rc = pg_exec(sc, p); /* the rest, now */
            if (rc != STORE_OK)
                return rc;
            break;
        }
        memcpy(c->later[c->nlater], p, n);
        c->later[c->nlater++][n] = '\0';
        if (tx_word(p) == TX_BEGIN)
            c->open = 1;
        p += n;
        p += strspn(p, "; ");
    }
    return STORE_OK;
}

const store_be store_be_pg = {
    .name = "postgresql",
    .open = pg_open,
    .ready = NULL,
    .close = pg_close,
    .exec = pg_exec,
    .stmt = pg_stmt,
    .bind = pg_bind,
    .step = pg_step,
    .reset = pg_reset,
    .changes = pg_changes,
    .col_null = pg_col_null,
    .col_int64 = pg_col_int64,
    .col_double = pg_col_double,
    .col_text = pg_col_text,
    .col_blob = pg_col_blob,
    .in_tx = pg_in_tx,
    .defer = pg_defer,
    .notify = pg_notify,
    .listen = pg_listen,
    .wait_note = pg_wait_note,
    .try_lead = pg_try_lead,
    .begin_write = "BEGIN; SELECT pg_advisory_xact_lock(" WRITE_LOCK ")",
    .begin_read = "BEGIN ISOLATION LEVEL REPEATABLE READ",
    .migrations = store_migrations_pg,
    .migrations_count = &store_migrations_pg_count,
};
