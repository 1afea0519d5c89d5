/*
 * store_be: what a storage backend gives store.c, and nothing outside
 * storage/ may include.  Two backends exist: store_sqlite.c (the embedded
 * default, one file) and store_pg.c (PostgreSQL, for several cohortd
 * sharing one database).  store.c owns the writer thread, group commit,
 * the per-thread readers and the migration runner, on top of one of them,
 * as Redis's ae.c sits on ae_epoll.c.
 *
 * Every statement, row and column goes through these functions, so the
 * table modules (store_tenant.c, store_job.c, ...) hold SQL text and
 * nothing of either engine.  Their SQL keeps to what both engines accept:
 * numbered parameters ?1, ?2, ...; an INSERT that needs its new id says
 * RETURNING id.
 */
#ifndef COHORT_STORE_BE_H
#define COHORT_STORE_BE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/store_migrations.h"

typedef struct store_conn store_conn;
typedef struct store_st store_st;
typedef struct store_be store_be;
typedef struct store_arg store_arg;

/* store_be.open's modes. */
enum { STORE_OPEN_OTHER = 0, STORE_OPEN_WRITER = 1, STORE_OPEN_READER = 2 };
/* What store_be.step returns besides an error (a negative STORE_*). */
enum { STORE_ROW = 1, STORE_DONE = 2 };

/* The head of every backend's connection and statement. */
struct store_conn {
    const store_be *be;
    pthread_t owner;
    struct store_conn *next; /* store.c's list of readers */
    char err[400];           /* the engine's why, when exec or ready failed */
};
struct store_st {
    const store_be *be;
};

struct store_be {
    const char *name; /* "sqlite", "postgresql" */
    /*
     * Opens a connection to target (a file path, a libpq connection
     * string).  mode: STORE_OPEN_WRITER, the one connection that writes
     * and may create the database; STORE_OPEN_READER, a request thread's,
     * which where a server cannot be reached now may come back unconnected
     * (its statements fail with STORE_DOWN until a later one reaches it);
     * STORE_OPEN_OTHER.  NULL with a message in err on failure.
     */
    store_conn *(*open)(const char *target, int mode, char *err, size_t errlen);
    /* Called on the writer once migrations are applied (may be NULL). */
    int (*ready)(store_conn *c);
    void (*close)(store_conn *c);
    /* Runs one or more statements with no parameters: STORE_OK or an error,
     * the engine's message in err when err is not NULL. */
    int (*exec)(store_conn *c, const char *sql);
    /* The cached statement for sql (cached by the address of sql), with
     * no bindings and no result.  NULL when it cannot be prepared. */
    store_st *(*stmt)(store_conn *c, const char *sql);
    /* Binds parameter i (1-based); the value is copied. */
    void (*bind)(store_st *st, int i, const store_arg *a);
    /* The next row: STORE_ROW, STORE_DONE or an error (STORE_*). */
    int (*step)(store_st *st);
    /* Drops the result and the bindings; the statement stays cached. */
    void (*reset)(store_st *st);
    /* Rows changed by the last step of st. */
    int64_t (*changes)(store_st *st);
    int (*col_null)(store_st *st, int i);
    int64_t (*col_int64)(store_st *st, int i);
    double (*col_double)(store_st *st, int i);
    /* NULL for SQL NULL; valid until the next step or reset. */
    const char *(*col_text)(store_st *st, int i);
    const void *(*col_blob)(store_st *st, int i, int *len);
    /* Whether c is inside a transaction. */
    int (*in_tx)(store_conn *c);
    /* Optional: runs sql (statements separated by "; ", no quoted ';')
     * ahead of the connection's next statement, in the same round trip;
     * an error in it is that statement's.  in_tx counts it as begun.
     * NULL: the caller runs it with exec. */
    int (*defer)(store_conn *c, const char *sql);
    /*
     * Several cohortd on one database; NULL where the engine has one
     * process only (SQLite).  notify: sends payload to every connection
     * listening.  listen: this connection receives them from now on.
     * wait_note: the next payload into buf, waiting up to timeout_ms: 1,
     * 0 on timeout, an error when the connection broke.  try_lead: whether
     * this connection holds the leader's lock (held: it did until now, and
     * the check is that its session is alive): 1, 0, or an error.
     */
    int (*notify)(store_conn *c, const char *payload);
    int (*listen)(store_conn *c);
    int (*wait_note)(store_conn *c, int timeout_ms, char *buf, size_t n);
    int (*try_lead)(store_conn *c, int held);
    const char *begin_write; /* the writer's BEGIN of a batch */
    const char *begin_read;  /* a reader's BEGIN of a snapshot */
    const struct store_migration *migrations;
    const int *migrations_count;
};

extern const store_be store_be_sqlite;
extern const store_be store_be_pg;

#endif
