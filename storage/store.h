/*
 * store: the durable state of cohortd, in one SQLite database (the
 * embedded default) or in PostgreSQL (several cohortd on one database).
 *
 * Owns the database's connections and the single writer thread.
 * Reads run on a per-thread connection (WAL, or PostgreSQL's MVCC, lets
 * them run beside the writer).  Writes are functions handed to the writer, which runs many of
 * them in one transaction (group commit), each inside its own savepoint so
 * one failing write does not undo the others, and commits with
 * durably (synchronous=FULL; PostgreSQL's synchronous_commit) before it
 * reports any of them done.  On PostgreSQL each batch first takes one
 * transaction-scoped advisory lock, so the writers of several cohortd
 * run one at a time, as one SQLite writer does.
 *
 * The table families live in store_tenant.h, store_catalog.h,
 * store_volume.h and store_job.h.
 */
#ifndef COHORT_STORE_H
#define COHORT_STORE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The one result code of cohortd's writes and reads, as curl has CURLcode:
 * what the store says, and what the job lifecycle's writes (scheduler/
 * sched_life.h, api/api_jobs.c) refuse, in one numbering, so no two layers
 * ever give one value two meanings.  Functions declared to return int with
 * "STORE_*" in their comment return these.
 */
typedef enum store_rc {
    STORE_OK = 0,
    STORE_NOTFOUND = -1,
    STORE_CONFLICT = -2, /* a unique key already exists */
    STORE_EIO = -3,      /* SQLite or the disk failed */
    STORE_INVALID = -4,  /* a constraint refused the row */
    STORE_NOMEM = -5,
    STORE_BUSY = -6,     /* the store is shutting down */
    STORE_FULL = -7,     /* the disk (or the database's size limit) is full */
    /* The job lifecycle's refusals. */
    STORE_JOB_FINAL = -8,         /* the job has already ended */
    STORE_JOB_ACTIVE = -9,        /* the job has not ended (deleting needs it to have) */
    STORE_JOB_NOT_RETRYABLE = -10, /* only a FAILED or CANCELLED job can be retried */
    STORE_JOB_STOPPING = -11,     /* the job's workers are still stopping */
    STORE_DOWN = -12,             /* the database server cannot be reached (PostgreSQL) */
    STORE_JOIN_REFUSED = -13,     /* the join token admits no more nodes */
} store_rc;

/* The code's name ("STORE_NOTFOUND"), for logs; "STORE_?" for no code. */
const char *store_rc_name(int rc);

typedef struct store store;
typedef struct store_tx store_tx; /* a write in progress, valid inside a store_write_fn */

/* A write run by the writer thread inside a transaction.  A return other
 * than STORE_OK rolls back this write only. */
typedef store_rc (*store_write_fn)(store_tx *tx, void *ctx);
/* Several writes of one kind applied at once, in order: ctxs[0..n-1] are
 * the ctx of n writes queued one after the other with this function
 * (store_submit_many).  All or none: on any failure it returns that code,
 * the writer undoes what it did and runs each write's own store_write_fn
 * alone, so each gets its own result.  The fewer statements are what it is
 * for (on PostgreSQL, one round trip for many rows). */
typedef store_rc (*store_write_many_fn)(store_tx *tx, void *const *ctxs, int n);
/* Told when a submitted write is durable (STORE_OK) or failed. */
typedef void (*store_done_fn)(void *arg, store_rc rc);

/*
 * Opens the database target names, applies migrations and starts the
 * writer.  target: "sqlite:PATH" or a bare PATH (the file is created when
 * absent), or a libpq URL "postgresql://..." (the database must exist).
 * Refuses a database whose schema is newer than this binary.  On failure
 * returns NULL and writes a message into err.
 */
store *store_open(const char *target, char *err, size_t errlen);

/* "sqlite" or "postgresql". */
const char *store_backend_name(store *s);

/* Stops the writer after the queued writes, closes every connection. */
void store_close(store *s);

/* Runs fn in the writer and waits until it is committed.  Returns fn's code,
 * or STORE_EIO when the commit failed. */
store_rc store_write(store *s, store_write_fn fn, void *ctx);

/* Inside a write: a nested step that can be undone alone.  store_tx_undo
 * rolls back to the last store_tx_mark; store_tx_keep keeps it. */
store_rc store_tx_mark(store_tx *tx);
void store_tx_keep(store_tx *tx);
void store_tx_undo(store_tx *tx);

/* Queues fn and returns at once; done(arg, rc) is called from the writer
 * thread after the commit.  Returns 0, or STORE_BUSY when shutting down. */
store_rc store_submit(store *s, store_write_fn fn, void *ctx, store_done_fn done, void *arg);
/* store_submit for a write that many can apply together with its
 * neighbours of the same kind (many NULL: store_submit). */
store_rc store_submit_many(store *s, store_write_fn fn, store_write_many_fn many, void *ctx,
                           store_done_fn done, void *arg);

/*
 * A read snapshot on the calling thread's connection: every read until
 * store_read_end sees the same committed state and takes SQLite's locks
 * once.  It begins at the first read, not at store_read_begin.  store_write and store_submit end
 * the caller's snapshot, so what the caller reads after a write includes it.  Never keep one open
 * across a wait.
 */
store_rc store_read_begin(store *s);
void store_read_end(store *s);
/* For a caller whose reads need not agree with each other (each stands
 * alone, or a write checks again): the rest of them run without a shared
 * snapshot, where none has begun yet.  On PostgreSQL a single read then
 * costs one round trip, not two (BEGIN with it, then COMMIT). */
void store_read_each(store *s);

/* The calling thread's read connection as a store_tx, for the *_tx read
 * functions outside a write (inside store_read_begin/end for one snapshot).
 * Never pass it to a function that writes. */
store_tx *store_read_tx(store *s);

/* The schema version of the open database, and the newest this binary knows. */
int store_schema_version(store *s);
int store_schema_known(void);

/* Counts per job state for /metrics: calls fn once per state present. */
store_rc store_job_state_counts(store *s, void (*fn)(void *arg, const char *state, int64_t n),
                           void *arg);

/* Writes per-batch statistics: batches committed and writes in them. */
void store_writer_stats(store *s, uint64_t *batches, uint64_t *writes);

/*
 * Several cohortd on one database (PostgreSQL).  On SQLite, which one
 * cohortd owns, store_shared is 0, store_signal does nothing,
 * store_on_signal never calls and store_lead is always 1.
 *
 * store_signal: tells every other cohortd on the database what (a short
 * word), after the caller's writes are committed (it ends the caller's
 * read snapshot).  store_on_signal: fn(arg, what) is called on a thread of
 * the store's for each signal from another cohortd, and fn(arg, NULL) when
 * signals may have been missed (its connection was re-established);
 * store_on_signal(s, NULL, NULL) stops the calls: once it returns none is
 * running.  store_lead: whether this cohortd leads (holds
 * the database's leader lock, taken here when free; released by the
 * server when this process's session ends, however it ends).  Call it
 * from one thread only.
 */
int store_shared(store *s);
void store_signal(store *s, const char *what);
store_rc store_on_signal(store *s, void (*fn)(void *arg, const char *what), void *arg);
int store_lead(store *s);
/* What the last store_lead found, from any thread (1 on SQLite). */
int store_leads(store *s);

/*
 * Nodes whose desired state (the workers they are to run, the node's
 * drain) a commit changed.  fn(arg, ids, n) runs once a write batch that
 * changed any is durable, here or, on a shared store, in another cohortd
 * (whose commit sends the ids along, inside its own transaction).  ids may
 * repeat one; ids NULL means any node (too many to name, or memory ran
 * out).  fn runs on the writer or the listener thread and must be quick.
 * store_on_nodes(s, NULL, NULL) stops the calls: once it returns none is
 * running.  Signals lost with a broken connection reach store_on_signal's
 * fn as NULL, not this one.
 */
void store_on_nodes(store *s, void (*fn)(void *arg, const int64_t *ids, size_t n), void *arg);

#endif
