/*
 * store_sqlite: the embedded backend of store.c, one SQLite file in WAL
 * mode.  Owns its connections (synchronous=FULL, foreign keys, a busy
 * timeout), their prepared-statement caches, and the writer's
 * checkpointer thread, which folds the WAL back into the database file
 * from a connection of its own so commits never pay for it.
 */
#include "storage/store_int.h"
#include "lib/fmt.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/util.h"

#define STMT_CACHE 96
#define BUSY_TIMEOUT_MS 10000
#define CHECKPOINT_FRAMES 1000 /* about 4 MiB of WAL: short fsyncs of the database file */

struct lite_st {
    store_st base;
    sqlite3 *db;
    sqlite3_stmt *st;
    int64_t changes;
};

/* The writer's checkpointer: a thread with its own connection, woken by
 * the WAL hook once the log has grown past CHECKPOINT_FRAMES. */
struct ckpt {
    char path[4096];
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int due, stopping, started;
};

struct lite_conn {
    store_conn base;
    sqlite3 *db;
    int nstmt;
    struct {
        const char *sql;
        struct lite_st *st;
    } stmt[STMT_CACHE];
    struct ckpt *ckpt; /* the writer's only */
};

static pthread_once_t lite_once = PTHREAD_ONCE_INIT;

/* Every connection is used by one thread at a time: no SQLite mutexes on
 * connections, and no global mutex for memory statistics. */
static void lite_setup(void)
{
    sqlite3_config(SQLITE_CONFIG_MULTITHREAD);
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    sqlite3_initialize();
}


/* The database file and its WAL and shared-memory files, cohortd's alone:
 * mode 0600 (SQLite gives those it makes later the database's own mode).
 * Files not there yet (":memory:", a WAL not made yet) are left.  0, or -1
 * with err set. */
static int keep_private(const char *path, char *err, size_t errlen)
{
    static const char *const tails[] = {"", "-wal", "-shm"};
    char p[4200];
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
        struct stat sb;
        if (fmt_whole(p, sizeof p, "%s%s", path, tails[i]) != 0)
            continue;
        if (stat(p, &sb) != 0 || (sb.st_mode & 077) == 0)
            continue;
        if (chmod(p, sb.st_mode & 07700) != 0) {
            fmt_cut(err, errlen, "cannot make %s private: %s", p, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Maps a SQLite result code to STORE_*. */
static int lite_rc(int rc)
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

static int lite_exec_db(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK && err)
        fmt_cut(err, errlen, "%s", msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return lite_rc(rc);
}

static int lite_exec(store_conn *c, const char *sql)
{
    return lite_exec_db(((struct lite_conn *)c)->db, sql, c->err, sizeof c->err);
}

static store_conn *lite_open(const char *path, int mode, char *err, size_t errlen)
{
    int writer = mode == STORE_OPEN_WRITER;
    pthread_once(&lite_once, lite_setup);
    struct lite_conn *c = calloc(1, sizeof *c);
    if (!c) {
        fmt_cut(err, errlen, "out of memory");
        return NULL;
    }
    c->base.be = &store_be_sqlite;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (writer ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(path, &c->db, flags, NULL);
    if (rc != SQLITE_OK) {
        fmt_cut(err, errlen, "cannot open database %s: %s", path,
                 c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        goto fail;
    }
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_busy_timeout(c->db, BUSY_TIMEOUT_MS);
    if (writer && keep_private(path, err, errlen) != 0)
        goto fail;
    if (lite_exec_db(c->db,
                     "PRAGMA journal_mode=WAL;"
                     "PRAGMA synchronous=FULL;"
                     "PRAGMA foreign_keys=ON;"
                     "PRAGMA temp_store=MEMORY;",
                     err, errlen) != STORE_OK)
        goto fail;
    if (writer) {
        c->ckpt = calloc(1, sizeof *c->ckpt);
        if (!c->ckpt || fmt_whole(c->ckpt->path, sizeof c->ckpt->path, "%s", path) != 0) {
            fmt_cut(err, errlen, c->ckpt ? "database path too long" : "out of memory");
            goto fail;
        }
        pthread_mutex_init(&c->ckpt->lock, NULL);
        pthread_cond_init(&c->ckpt->wake, NULL);
    }
    return &c->base;
fail:
    free(c->ckpt);
    sqlite3_close(c->db);
    free(c);
    return NULL;
}

/* After each commit: wake the checkpointer once the WAL has grown. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    (void)db;
    (void)name;
    struct ckpt *k = arg;
    if (frames >= CHECKPOINT_FRAMES) {
        pthread_mutex_lock(&k->lock);
        k->due = 1;
        pthread_cond_signal(&k->wake);
        pthread_mutex_unlock(&k->lock);
    }
    return SQLITE_OK;
}

/* Copies the WAL back into the database, PASSIVE so the writer is never
 * blocked. */
static void *checkpointer_main(void *arg)
{
    struct ckpt *k = arg;
    char err[256];
    store_conn *c = lite_open(k->path, 0, err, sizeof err);
    if (!c) {
        fprintf(stderr, "store: checkpointer: %s\n", err);
        return NULL;
    }
    sqlite3 *db = ((struct lite_conn *)c)->db;
    pthread_mutex_lock(&k->lock);
    for (;;) {
        while (!k->due && !k->stopping)
            pthread_cond_wait(&k->wake, &k->lock);
        if (k->stopping)
            break;
        k->due = 0;
        pthread_mutex_unlock(&k->lock);
        int64_t t0 = util_mono_us();
        int frames = 0, done = 0;
        sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, &frames, &done);
        int64_t us = util_mono_us() - t0;
        if (getenv("COHORT_STORE_TRACE"))
            fprintf(stderr, "store: checkpoint %d/%d frames in %lld ms\n", done, frames,
                    (long long)us / 1000);
        pthread_mutex_lock(&k->lock);
    }
    pthread_mutex_unlock(&k->lock);
    store_be_sqlite.close(c);
    return NULL;
}

static int lite_ready(store_conn *sc)
{
    struct lite_conn *c = (struct lite_conn *)sc;
    if (!c->ckpt)
        return STORE_OK;
    sqlite3_wal_autocheckpoint(c->db, 0);
    sqlite3_wal_hook(c->db, wal_hook, c->ckpt);
    if (pthread_create(&c->ckpt->thread, NULL, checkpointer_main, c->ckpt) != 0) {
        fmt_cut(sc->err, sizeof sc->err, "cannot start the checkpoint thread");
        sqlite3_wal_hook(c->db, NULL, NULL);
        return STORE_EIO;
    }
    c->ckpt->started = 1;
    return STORE_OK;
}

static void lite_close(store_conn *sc)
{
    struct lite_conn *c = (struct lite_conn *)sc;
    if (!c)
        return;
    if (c->ckpt) {
        if (c->ckpt->started) {
            pthread_mutex_lock(&c->ckpt->lock);
            c->ckpt->stopping = 1;
            pthread_cond_signal(&c->ckpt->wake);
            pthread_mutex_unlock(&c->ckpt->lock);
            pthread_join(c->ckpt->thread, NULL);
            /* Fold the WAL back into the main file so the database closes clean. */
            sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
        }
        pthread_mutex_destroy(&c->ckpt->lock);
        pthread_cond_destroy(&c->ckpt->wake);
        free(c->ckpt);
    }
    for (int i = 0; i < c->nstmt; i++) {
        sqlite3_finalize(c->stmt[i].st->st);
        free(c->stmt[i].st);
    }
    sqlite3_close(c->db);
    free(c);
}

static store_st *lite_stmt(store_conn *sc, const char *sql)
{
    struct lite_conn *c = (struct lite_conn *)sc;
    for (int i = 0; i < c->nstmt; i++) {
        if (c->stmt[i].sql == sql) {
            struct lite_st *ls = c->stmt[i].st;
            sqlite3_reset(ls->st);
            sqlite3_clear_bindings(ls->st);
            return &ls->base;
        }
    }
    struct lite_st *ls = calloc(1, sizeof *ls);
    if (!ls)
        return NULL;
    if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &ls->st, NULL) !=
        SQLITE_OK) {
        fprintf(stderr, "store: cannot prepare statement: %s\n%s\n", sqlite3_errmsg(c->db), sql);
        free(ls);
        return NULL;
    }
    ls->base.be = &store_be_sqlite;
    ls->db = c->db;
    if (c->nstmt == STMT_CACHE) {
        /* Not expected: more distinct statements than the cache holds.
         * Evict the oldest so every statement stays owned by the cache. */
        sqlite3_finalize(c->stmt[0].st->st);
        free(c->stmt[0].st);
        memmove(&c->stmt[0], &c->stmt[1], sizeof c->stmt[0] * (STMT_CACHE - 1));
        c->nstmt--;
    }
    c->stmt[c->nstmt].sql = sql;
    c->stmt[c->nstmt].st = ls;
    c->nstmt++;
    return &ls->base;
}

static void lite_bind(store_st *s, int i, const store_arg *a)
{
    sqlite3_stmt *st = ((struct lite_st *)s)->st;
    switch (a->kind) {
    case 'i': sqlite3_bind_int64(st, i, a->i); break;
    case 'd': sqlite3_bind_double(st, i, a->d); break;
    case 't':
        if (a->t)
            sqlite3_bind_text(st, i, a->t, -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_null(st, i);
        break;
    case 'b': sqlite3_bind_blob(st, i, a->b, a->n, SQLITE_TRANSIENT); break;
    default: sqlite3_bind_null(st, i); break;
    }
}

static int lite_step(store_st *s)
{
    struct lite_st *ls = (struct lite_st *)s;
    int rc = sqlite3_step(ls->st);
    if (rc == SQLITE_ROW)
        return STORE_ROW;
    if (rc == SQLITE_DONE) {
        ls->changes = sqlite3_changes64(ls->db);
        return STORE_DONE;
    }
    return lite_rc(rc);
}

static void lite_reset(store_st *s)
{
    struct lite_st *ls = (struct lite_st *)s;
    sqlite3_reset(ls->st);
    sqlite3_clear_bindings(ls->st);
}

static int64_t lite_changes(store_st *s)
{
    return ((struct lite_st *)s)->changes;
}

static int lite_col_null(store_st *s, int i)
{
    return sqlite3_column_type(((struct lite_st *)s)->st, i) == SQLITE_NULL;
}

static int64_t lite_col_int64(store_st *s, int i)
{
    return sqlite3_column_int64(((struct lite_st *)s)->st, i);
}

static double lite_col_double(store_st *s, int i)
{
    return sqlite3_column_double(((struct lite_st *)s)->st, i);
}

static const char *lite_col_text(store_st *s, int i)
{
    return (const char *)sqlite3_column_text(((struct lite_st *)s)->st, i);
}

static const void *lite_col_blob(store_st *s, int i, int *len)
{
    sqlite3_stmt *st = ((struct lite_st *)s)->st;
    const void *p = sqlite3_column_blob(st, i);
    *len = p ? sqlite3_column_bytes(st, i) : 0;
    return p;
}

static int lite_in_tx(store_conn *c)
{
    return !sqlite3_get_autocommit(((struct lite_conn *)c)->db);
}

const store_be store_be_sqlite = {
    .name = "sqlite",
    .open = lite_open,
    .ready = lite_ready,
    .close = lite_close,
    .exec = lite_exec,
    .stmt = lite_stmt,
    .bind = lite_bind,
    .step = lite_step,
    .reset = lite_reset,
    .changes = lite_changes,
    .col_null = lite_col_null,
    .col_int64 = lite_col_int64,
    .col_double = lite_col_double,
    .col_text = lite_col_text,
    .col_blob = lite_col_blob,
    .in_tx = lite_in_tx,
    .begin_write = "BEGIN IMMEDIATE",
    .begin_read = "BEGIN",
    .migrations = store_migrations,
    .migrations_count = &store_migrations_count,
};
