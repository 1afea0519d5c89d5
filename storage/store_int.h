/*
 * store_int: what the table modules of storage/ share and nothing outside
 * storage/ may include: connections and the prepared-statement cache.
 */
#ifndef COHORT_STORE_INT_H
#define COHORT_STORE_INT_H

#include <sqlite3.h>

#include "storage/store.h"

typedef struct store_conn store_conn;

/* The calling thread's read connection; NULL when it cannot be opened. */
store_conn *store_reader(store *s);
/* The writer's connection for the transaction in progress. */
store_conn *store_tx_conn(store_tx *tx);

/* A prepared statement for sql (a string literal: cached by address),
 * reset and with its bindings cleared.  The caller resets it when done. */
sqlite3_stmt *store_stmt(store_conn *c, const char *sql);
sqlite3 *store_conn_db(store_conn *c);
/* The calling thread's reader and a prepared statement on it; NULL on failure. */
sqlite3_stmt *store_read_stmt(store *s, const char *sql);
/*
 * A statement's parameters, bound to ?1, ?2, ... in order: an array made
 * by STORE_ARGS of STORE_I (an integer, converted to int64_t), STORE_T (a
 * string, NULL binds NULL), STORE_B (a blob: pointer, length) and
 * STORE_NULL; or NULL for none.  Values are copied when bound.
 */
typedef struct store_arg {
    char kind; /* 'i', 't', 'b', 'n'; 0 ends the array */
    int64_t i;
    const char *t;
    const void *b;
    int n;
} store_arg;
#define STORE_I(x) {.kind = 'i', .i = (x)}
#define STORE_T(s) {.kind = 't', .t = (s)}
#define STORE_B(p, len) {.kind = 'b', .b = (p), .n = (len)}
#define STORE_NULL {.kind = 'n'}
#define STORE_ARGS(...) ((const store_arg[]){__VA_ARGS__, {.kind = 0}})

/* The cached statement for sql on c with args bound; the caller steps and
 * resets it.  NULL (STORE_EIO) when c is NULL or sql cannot be prepared. */
sqlite3_stmt *store_prep(store_conn *c, const char *sql, const store_arg *args);
/* store_prep, then store_step_change (id as there). */
int store_exec(store_conn *c, int64_t *id, const char *sql, const store_arg *args);
/* store_prep, then the first column of the first row into *out: STORE_OK,
 * STORE_NOTFOUND (no row: *out untouched) or an error. */
int store_int64(store_conn *c, int64_t *out, const char *sql, const store_arg *args);

/* Runs a write statement whose only parameter, ?1, is id.
 * STORE_NOTFOUND when it changed no row. */
int store_tx_exec_id(store_tx *tx, const char *sql, int64_t id);

/* Maps a SQLite result code to STORE_*. */
int store_rc_sqlite(int sqlite_rc);

/* Steps a statement expected to yield at most one row: STORE_OK with the
 * row ready to read, STORE_NOTFOUND, or an error.  The caller resets. */
int store_step_row(sqlite3_stmt *st);
/*
 * The two shapes of a read, in the spirit of sqlite3_exec's callback.  Both
 * take a statement prepared and bound by the caller (NULL: it could not be
 * prepared, STORE_EIO) and reset it.
 *
 * store_get_one: the first row decoded into out by decode; STORE_OK,
 * STORE_NOTFOUND when there is none, or SQLite's error.
 * store_each: each(ctx, st) for every row; STORE_OK or SQLite's error.
 * STORE_ROWS below defines the usual each().
 */
int store_get_one(sqlite3_stmt *st, void (*decode)(sqlite3_stmt *st, void *out), void *out);
int store_each(sqlite3_stmt *st, void (*each)(void *ctx, sqlite3_stmt *st), void *ctx);

/*
 * Defines struct NAME {row, arg} and static void NAME(void *ctx,
 * sqlite3_stmt *st), a store_each callback that decodes each row into a
 * TYPE on the stack with decode and hands it to row(arg, &item): a list
 * function passes its caller's typed callback on without a cast.
 */
#define STORE_ROWS(NAME, TYPE, decode)                                                     \
    struct NAME {                                                                          \
        void (*row)(void *arg, const TYPE *item);                                          \
        void *arg;                                                                         \
    };                                                                                     \
    static void NAME(void *ctx, sqlite3_stmt *st)                                          \
    {                                                                                      \
        struct NAME *r_ = ctx;                                                             \
        TYPE item_;                                                                        \
        decode(st, &item_);                                                                \
        r_->row(r_->arg, &item_);                                                          \
    }

/* Steps an INSERT/UPDATE/DELETE, resets it; *id gets the new row id when
 * not NULL.  STORE_NOTFOUND when an UPDATE/DELETE changed no row. */
int store_step_change(store_conn *c, sqlite3_stmt *st, int64_t *id);

/* Binds text or NULL. */
void store_bind_text(sqlite3_stmt *st, int i, const char *s);
/* Copies column i into a fresh malloc'd string ("" for NULL); caller frees. */
char *store_col_strdup(sqlite3_stmt *st, int i);
/* Copies column i into out[n], truncating. */
void store_col_copy(sqlite3_stmt *st, int i, char *out, size_t n);

#endif
