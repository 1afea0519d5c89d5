/*
 * store_int: what the table modules of storage/ share and nothing outside
 * storage/ may include: connections and the prepared-statement cache.
 */
#ifndef COHORT_STORE_INT_H
#define COHORT_STORE_INT_H

#include "storage/store.h"
#include "storage/store_be.h"

/* The calling thread's read connection; NULL when it cannot be opened. */
store_conn *store_reader(store *s);
/* The writer's connection for the transaction in progress. */
store_conn *store_tx_conn(store_tx *tx);
/* Marks node_id's desired state as changed by this write (store_on_nodes);
 * on a read transaction it does nothing. */
void store_tx_touch(store_tx *tx, int64_t node_id);

/* A prepared statement for sql (a string literal: cached by address), with
 * no bindings.  The caller resets it when done. */
static inline store_st *store_stmt(store_conn *c, const char *sql)
{
    return c->be->stmt(c, sql);
}
/* The calling thread's reader and a prepared statement on it; NULL on failure. */
store_st *store_read_stmt(store *s, const char *sql);
/*
 * A statement's parameters, bound to ?1, ?2, ... in order: an array made
 * by STORE_ARGS of STORE_I (an integer, converted to int64_t), STORE_T (a
 * string, NULL binds NULL), STORE_B (a blob: pointer, length), STORE_D (a
 * double) and STORE_NULL; or NULL for none.  Values are copied when bound.
 */
struct store_arg {
    char kind; /* 'i', 't', 'b', 'd', 'n'; 0 ends the array */
    int64_t i;
    const char *t;
    const void *b;
    int n;
    double d;
};
#define STORE_I(x) {.kind = 'i', .i = (x)}
#define STORE_T(s) {.kind = 't', .t = (s)}
#define STORE_B(p, len) {.kind = 'b', .b = (p), .n = (len)}
#define STORE_D(x) {.kind = 'd', .d = (x)}
#define STORE_NULL {.kind = 'n'}
#define STORE_ARGS(...) ((const store_arg[]){__VA_ARGS__, {.kind = 0}})

/* The cached statement for sql on c with args bound; the caller steps and
 * resets it.  NULL (STORE_EIO) when c is NULL or sql cannot be prepared. */
store_st *store_prep(store_conn *c, const char *sql, const store_arg *args);
/* store_prep, then store_step_change (id as there). */
store_rc store_exec(store_conn *c, int64_t *id, const char *sql, const store_arg *args);
/* store_prep, then the first column of the first row into *out: STORE_OK,
 * STORE_NOTFOUND (no row: *out untouched) or an error. */
store_rc store_int64(store_conn *c, int64_t *out, const char *sql, const store_arg *args);

/* Runs a write statement whose only parameter, ?1, is id.
 * STORE_NOTFOUND when it changed no row. */
store_rc store_tx_exec_id(store_tx *tx, const char *sql, int64_t id);

/* The next row: STORE_ROW, STORE_DONE or an error (STORE_*). */
static inline int store_step(store_st *st)
{
    return st->be->step(st);
}
/* Ends a statement's use: drops its result and bindings. */
static inline void store_reset(store_st *st)
{
    st->be->reset(st);
}

/* Binding one parameter (1-based) after store_prep; values are copied. */
static inline void store_bind_int64(store_st *st, int i, int64_t v)
{
    const store_arg a = STORE_I(v);
    st->be->bind(st, i, &a);
}
static inline void store_bind_double(store_st *st, int i, double v)
{
    const store_arg a = STORE_D(v);
    st->be->bind(st, i, &a);
}
/* Binds text or NULL. */
static inline void store_bind_text(store_st *st, int i, const char *s)
{
    const store_arg a = STORE_T(s);
    st->be->bind(st, i, &a);
}
static inline void store_bind_blob(store_st *st, int i, const void *p, int len)
{
    const store_arg a = STORE_B(p, len);
    st->be->bind(st, i, &a);
}
static inline void store_bind_null(store_st *st, int i)
{
    const store_arg a = STORE_NULL;
    st->be->bind(st, i, &a);
}

/* Column i (0-based) of the current row. */
static inline int store_col_null(store_st *st, int i)
{
    return st->be->col_null(st, i);
}
static inline int64_t store_col_int64(store_st *st, int i)
{
    return st->be->col_int64(st, i);
}
static inline int store_col_int(store_st *st, int i)
{
    return (int)st->be->col_int64(st, i);
}
static inline double store_col_double(store_st *st, int i)
{
    return st->be->col_double(st, i);
}
/* NULL for SQL NULL; valid until the next step or reset. */
static inline const char *store_col_text(store_st *st, int i)
{
    return st->be->col_text(st, i);
}
/* The blob's bytes and *len; NULL and 0 for SQL NULL. */
static inline const void *store_col_blob(store_st *st, int i, int *len)
{
    return st->be->col_blob(st, i, len);
}

/* Steps a statement expected to yield at most one row: STORE_OK with the
 * row ready to read, STORE_NOTFOUND, or an error.  The caller resets. */
store_rc store_step_row(store_st *st);
/*
 * The two shapes of a read, in the spirit of sqlite3_exec's callback.  Both
 * take a statement prepared and bound by the caller (NULL: it could not be
 * prepared, STORE_EIO) and reset it.
 *
 * store_get_one: the first row decoded into out by decode; STORE_OK,
 * STORE_NOTFOUND when there is none, or the engine's error.
 * store_each: each(ctx, st) for every row; STORE_OK or the engine's error.
 * STORE_ROWS below defines the usual each().
 */
store_rc store_get_one(store_st *st, void (*decode)(store_st *st, void *out), void *out);
store_rc store_each(store_st *st, void (*each)(void *ctx, store_st *st), void *ctx);

/*
 * Defines struct NAME {row, arg} and static void NAME(void *ctx,
 * store_st *st), a store_each callback that decodes each row into a
 * TYPE on the stack with decode and hands it to row(arg, &item): a list
 * function passes its caller's typed callback on without a cast.
 */
#define STORE_ROWS(NAME, TYPE, decode)                                                     \
    struct NAME {                                                                          \
        void (*row)(void *arg, const TYPE *item);                                          \
        void *arg;                                                                         \
    };                                                                                     \
    static void NAME(void *ctx, store_st *st)                                              \
    {                                                                                      \
        struct NAME *r_ = ctx;                                                             \
        TYPE item_;                                                                        \
        decode(st, &item_);                                                                \
        r_->row(r_->arg, &item_);                                                          \
    }

/* Steps an INSERT/UPDATE/DELETE to its end and resets it.  *id, when not
 * NULL, gets the first column of its first row: the statement says
 * RETURNING id.  STORE_NOTFOUND when it changed no row. */
store_rc store_step_change(store_conn *c, store_st *st, int64_t *id);

/*
 * The columns of st from off on, seen as columns 0, 1, ...: one row that
 * joins several tables is decoded by each table's own decoder.  The view
 * lives in *v (the caller's) and reads st's current row.
 */
typedef struct store_view {
    store_st base;
    store_st *under;
    int off;
} store_view;
store_st *store_view_of(store_view *v, store_st *st, int off);

/* Decoders of one row each (columns from 0), shared by the modules, of
 * the columns named here, in this order. */
#define STORE_SPEC_COLS                                                                    \
    "id, name, cpus, memory_mb, gpus, coalesce(gpu_type, ''), price_per_hour, currency,"   \
    " created_at, updated_at"
#define STORE_SPEC_NCOLS 10
#define STORE_IMAGE_COLS                                                                   \
    "id, coalesce(tenant_id, 0), name, coalesce(reference, ''), framework,"                \
    " coalesce(username, ''), coalesce(password, ''), created_at"
#define STORE_IMAGE_NCOLS 8
/* Of a volume v joined with its tenant t; sealed: "v.sealed" or "0". */
#define STORE_VOL_COLS(sealed)                                                             \
    "v.id, v.tenant_id, t.name, v.name, " sealed ", t.is_platform, v.created_at"
void store_spec_row(store_st *st, void *out);  /* store_spec */
void store_image_row(store_st *st, void *out); /* store_image */
void store_vol_row(store_st *st, void *out);   /* store_volume */

/* Whether blob column i holds exactly the len bytes at p, compared in
 * constant time (a secret's hash). */
int store_col_equal(store_st *st, int i, const void *p, int len);
/* Copies column i into a fresh malloc'd string ("" for NULL); caller frees. */
char *store_col_strdup(store_st *st, int i);
/* Copies column i into out[n], truncating. */
void store_col_copy(store_st *st, int i, char *out, size_t n);

#endif
