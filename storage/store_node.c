/*
 * store_node: SQL for nodes, join tokens, workers, ports and quotas.
 */
#include "storage/store_node.h"
#include "lib/fmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/store_bill.h"
#include "storage/store_int.h"
#include "storage/store_job.h"
#include "lib/util.h"

/* Live workers hold their node's resources until the agent reports them done. */
#define NODE_SELECT                                                                        \
    "SELECT n.id, n.name, n.address, n.cpus, n.memory_mb, n.gpus, coalesce(n.gpu_type, ''),"  \
    " n.port_lo, n.port_hi, n.state, n.drained, n.registered_at, n.last_heartbeat,"          \
    " coalesce(sum(j.cpus), 0), coalesce(sum(j.memory_mb), 0), coalesce(sum(j.gpus), 0),"     \
    " count(w.id), n.network, coalesce(n.revoked_at, 0), coalesce(n.join_token_id, 0),"      \
    " coalesce(n.token_issued_at, n.registered_at), n.token_rotate,"                          \
    " CASE WHEN n.next_token_hash IS NULL THEN 0 ELSE 1 END, coalesce(n.revoke_reason, '')"   \
    " FROM nodes n LEFT JOIN workers w ON w.node_id = n.id"                                   \
    "  AND w.state IN ('assigned', 'running')"                                                \
    " LEFT JOIN jobs j ON j.id = w.job_id"

static void node_row(store_st *st, void *out)
{
    store_node *n = out;
    n->id = store_col_int64(st, 0);
    store_col_copy(st, 1, n->name, sizeof n->name);
    store_col_copy(st, 2, n->address, sizeof n->address);
    n->cpus = store_col_int64(st, 3);
    n->memory_mb = store_col_int64(st, 4);
    n->gpus = store_col_int64(st, 5);
    store_col_copy(st, 6, n->gpu_type, sizeof n->gpu_type);
    n->port_lo = store_col_int64(st, 7);
    n->port_hi = store_col_int64(st, 8);
    store_col_copy(st, 9, n->state, sizeof n->state);
    n->drained = store_col_int(st, 10);
    n->registered_at = store_col_int64(st, 11);
    n->last_heartbeat = store_col_int64(st, 12);
    n->used_cpus = store_col_int64(st, 13);
    n->used_memory_mb = store_col_int64(st, 14);
    n->used_gpus = store_col_int64(st, 15);
    n->used_workers = store_col_int64(st, 16);
    store_col_copy(st, 17, n->network, sizeof n->network);
    n->revoked_at = store_col_int64(st, 18);
    n->join_token_id = store_col_int64(st, 19);
    n->token_issued_at = store_col_int64(st, 20);
    n->token_rotate = store_col_int(st, 21);
    n->token_next = store_col_int(st, 22);
    store_col_copy(st, 23, n->revoke_reason, sizeof n->revoke_reason);
}

STORE_ROWS(node_rows, store_node, node_row)

static int node_each(store_st *st, void (*row)(void *arg, const store_node *n), void *arg)
{
    struct node_rows r = {row, arg};
    return store_each(st, node_rows, &r);
}

store_rc store_join_token_insert(store_tx *tx, const uint8_t hash[UTIL_SHA256_LEN],
                            int64_t expires_at, int64_t max_uses, int64_t *id)
{
    static const char sql[] =
        "INSERT INTO node_join_tokens(hash, created_at, expires_at, max_uses)"
        " VALUES (?1, ?2, ?3, ?4) RETURNING id";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, sql, STORE_ARGS(STORE_B(hash, UTIL_SHA256_LEN),
            STORE_I(util_now_ms())));
    if (!st)
        return STORE_EIO;
    if (expires_at > 0)
        store_bind_int64(st, 3, expires_at);
    if (max_uses > 0)
        store_bind_int64(st, 4, max_uses);
    return store_step_change(c, st, id);
}

/* A token that still admits a node at now: not revoked, not expired, not
 * used up. */
#define JOIN_LIVE                                                                          \
    " revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?2)"                      \
    " AND (max_uses IS NULL OR uses < max_uses)"

store_rc store_join_token_check(store *s, const uint8_t hash[UTIL_SHA256_LEN], int64_t now_ms)
{
    static const char sql[] = "SELECT hash FROM node_join_tokens WHERE hash = ?1 AND" JOIN_LIVE;
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_B(hash, UTIL_SHA256_LEN),
            STORE_I(now_ms)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK && !store_col_equal(st, 0, hash, UTIL_SHA256_LEN))
        rc = STORE_NOTFOUND;
    store_reset(st);
    return rc;
}

store_rc store_join_token_use(store_tx *tx, const uint8_t hash[UTIL_SHA256_LEN], int64_t now_ms,
                         int64_t *id)
{
    static const char sql[] = "UPDATE node_join_tokens SET uses = uses + 1 WHERE hash = ?1 AND"
                              JOIN_LIVE " RETURNING id";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, sql, STORE_ARGS(STORE_B(hash, UTIL_SHA256_LEN),
            STORE_I(now_ms)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK)
        *id = store_col_int64(st, 0);
    store_reset(st);
    return rc;
}

static void join_row(store_st *st, void *out)
{
    store_join_token *t = out;
    t->id = store_col_int64(st, 0);
    t->created_at = store_col_int64(st, 1);
    t->expires_at = store_col_int64(st, 2);
    t->revoked_at = store_col_int64(st, 3);
    t->max_uses = store_col_int64(st, 4);
    t->uses = store_col_int64(st, 5);
}

STORE_ROWS(join_rows, store_join_token, join_row)

store_rc store_join_token_list(store *s, int64_t after, int limit,
                          void (*row)(void *arg, const store_join_token *t), void *arg)
{
    static const char sql[] =
        "SELECT id, created_at, coalesce(expires_at, 0), coalesce(revoked_at, 0),"
        " coalesce(max_uses, 0), uses FROM node_join_tokens WHERE id > ?1 ORDER BY id LIMIT ?2";
    struct join_rows r = {row, arg};
    return store_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(after),
            STORE_I(limit))), join_rows, &r);
}

store_rc store_join_token_revoke(store_tx *tx, int64_t id, int64_t now_ms)
{
    static const char sql[] = "UPDATE node_join_tokens SET revoked_at = ?2"
                              " WHERE id = ?1 AND revoked_at IS NULL";
    return store_exec(store_tx_conn(tx), NULL, sql, STORE_ARGS(STORE_I(id), STORE_I(now_ms)));
}

store_rc store_node_insert(store_tx *tx, store_node *n, const uint8_t token_hash[UTIL_SHA256_LEN])
{
    static const char sql[] =
        "INSERT INTO nodes(name, address, cpus, memory_mb, gpus, gpu_type, port_lo, port_hi,"
        " token_hash, registered_at, last_heartbeat, network, join_token_id)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12) RETURNING id";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, sql);
    if (!st)
        return STORE_EIO;
    int64_t now = util_now_ms();
    store_bind_text(st, 1, n->name);
    store_bind_text(st, 2, n->address);
    store_bind_int64(st, 3, n->cpus);
    store_bind_int64(st, 4, n->memory_mb);
    store_bind_int64(st, 5, n->gpus);
    store_bind_text(st, 6, n->gpu_type[0] ? n->gpu_type : NULL);
    store_bind_int64(st, 7, n->port_lo);
    store_bind_int64(st, 8, n->port_hi);
    store_bind_blob(st, 9, token_hash, UTIL_SHA256_LEN);
    store_bind_int64(st, 10, now);
    store_bind_text(st, 11, !strcmp(n->network, "job") ? "job" : "host");
    if (n->join_token_id > 0)
        store_bind_int64(st, 12, n->join_token_id);
    n->registered_at = n->last_heartbeat = now;
    fmt_cut(n->state, sizeof n->state, "up");
    return store_step_change(c, st, &n->id);
}

static int node_one(store_st *st, store_node *out)
{
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK) {
        node_row(st, out);
        if (out->id == 0) /* the aggregate's empty row */
            rc = STORE_NOTFOUND;
    }
    store_reset(st);
    return rc;
}

store_rc store_node_by_token(store *s, const uint8_t hash[UTIL_SHA256_LEN], store_node *out)
{
    static const char sql[] = NODE_SELECT " WHERE n.token_hash = ?1 AND n.revoked_at IS NULL"
                                          " GROUP BY n.id";
    return node_one(
        store_prep(store_reader(s), sql, STORE_ARGS(STORE_B(hash, UTIL_SHA256_LEN))), out);
}

static const char node_get_sql[] = NODE_SELECT " WHERE n.id = ?1 GROUP BY n.id";

store_rc store_node_get(store *s, int64_t id, store_node *out)
{
    return node_one(store_prep(store_reader(s), node_get_sql, STORE_ARGS(STORE_I(id))), out);
}

store_rc store_node_get_tx(store_tx *tx, int64_t id, store_node *out)
{
    return node_one(store_prep(store_tx_conn(tx), node_get_sql, STORE_ARGS(STORE_I(id))), out);
}

store_rc store_node_list(store *s, int64_t after, int limit,
                    void (*row)(void *arg, const store_node *n), void *arg)
{
    static const char sql[] = NODE_SELECT " WHERE n.id > ?1 GROUP BY n.id ORDER BY n.id LIMIT ?2";
    return node_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(after),
            STORE_I(limit))), row, arg);
}

store_rc store_node_all_tx(store_tx *tx, void (*row)(void *arg, const store_node *n), void *arg)
{
    static const char sql[] = NODE_SELECT " GROUP BY n.id ORDER BY n.id";
    return node_each(store_prep(store_tx_conn(tx), sql, NULL), row, arg);
}

store_rc store_node_heartbeat(store_tx *tx, int64_t id, int64_t now_ms)
{
    static const char sql[] = "UPDATE nodes SET last_heartbeat = ?2, state = 'up' WHERE id = ?1"
                              " AND revoked_at IS NULL";
    return store_exec(store_tx_conn(tx), NULL, sql, STORE_ARGS(STORE_I(id), STORE_I(now_ms)));
}

store_rc store_node_set_drained(store_tx *tx, int64_t id, int drained)
{
    static const char *const sql[2] = {"UPDATE nodes SET drained = 0 WHERE id = ?1",
                                       "UPDATE nodes SET drained = 1 WHERE id = ?1"};
    store_tx_touch(tx, id); /* its agent is told */
    return store_tx_exec_id(tx, sql[drained != 0], id);
}

store_rc store_node_set_network(store_tx *tx, int64_t id, const char *network)
{
    static const char sql[] = "UPDATE nodes SET network = ?2 WHERE id = ?1";
    store_tx_touch(tx, id); /* its cached row goes */
    return store_exec(store_tx_conn(tx), NULL, sql,
                      STORE_ARGS(STORE_I(id), STORE_T(!strcmp(network, "job") ? "job" : "host")));
}

store_rc store_node_revoke(store_tx *tx, int64_t id, int64_t now_ms, const char *reason)
{
    static const char sql[] = "UPDATE nodes SET revoked_at = ?2, state = 'down', drained = 1,"
                              " next_token_hash = NULL, revoke_reason = ?3"
                              " WHERE id = ?1 AND revoked_at IS NULL";
    store_tx_touch(tx, id); /* its cached token goes */
    if (!reason)
        return store_exec(store_tx_conn(tx), NULL, sql,
                          STORE_ARGS(STORE_I(id), STORE_I(now_ms), STORE_NULL));
    return store_exec(store_tx_conn(tx), NULL, sql,
                      STORE_ARGS(STORE_I(id), STORE_I(now_ms), STORE_T(reason)));
}

store_rc store_node_token_ask(store_tx *tx, int64_t id)
{
    static const char sql[] = "UPDATE nodes SET token_rotate = 1 WHERE id = ?1"
                              " AND revoked_at IS NULL";
    store_tx_touch(tx, id); /* its cached row goes */
    return store_tx_exec_id(tx, sql, id);
}

/* Keeps a token node id gives up in node_token_history: its token in use
 * (replaced 1, a rotation replaces it) or its successor out (replaced 0,
 * a newer one is handed out before its first use), when there is one. */
static store_rc token_retire(store_tx *tx, int64_t id, int replaced, int64_t now_ms)
{
    static const char *const sql[2] = {
        "INSERT INTO node_token_history(hash, node_id, retired_at, replaced)"
        " SELECT next_token_hash, id, ?2, 0 FROM nodes WHERE id = ?1"
        " AND next_token_hash IS NOT NULL",
        "INSERT INTO node_token_history(hash, node_id, retired_at, replaced)"
        " SELECT token_hash, id, ?2, 1 FROM nodes WHERE id = ?1"};
    store_rc rc = store_exec(store_tx_conn(tx), NULL, sql[replaced != 0],
                             STORE_ARGS(STORE_I(id), STORE_I(now_ms)));
    return rc == STORE_NOTFOUND ? STORE_OK : rc;
}

store_rc store_node_token_next(store_tx *tx, int64_t id, const uint8_t hash[UTIL_SHA256_LEN],
                               int64_t now_ms)
{
    static const char sql[] = "UPDATE nodes SET next_token_hash = ?2 WHERE id = ?1"
                              " AND revoked_at IS NULL";
    store_tx_touch(tx, id);
    store_rc rc = token_retire(tx, id, 0, now_ms);
    return rc != STORE_OK ? rc
                          : store_exec(store_tx_conn(tx), NULL, sql,
                                       STORE_ARGS(STORE_I(id), STORE_B(hash, UTIL_SHA256_LEN)));
}

store_rc store_node_by_next_token(store *s, const uint8_t hash[UTIL_SHA256_LEN], int64_t *id)
{
    static const char sql[] = "SELECT id FROM nodes WHERE next_token_hash = ?1"
                              " AND revoked_at IS NULL";
    return store_int64(store_reader(s), id, sql, STORE_ARGS(STORE_B(hash, UTIL_SHA256_LEN)));
}

store_rc store_node_by_retired_token(store *s, const uint8_t hash[UTIL_SHA256_LEN], int64_t *id,
                                     int64_t *retired_at, int *replaced)
{
    static const char sql[] = "SELECT h.node_id, h.retired_at, h.replaced"
                              " FROM node_token_history h JOIN nodes n ON n.id = h.node_id"
                              " WHERE h.hash = ?1 AND n.revoked_at IS NULL";
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_B(hash, UTIL_SHA256_LEN)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK) {
        *id = store_col_int64(st, 0);
        *retired_at = store_col_int64(st, 1);
        *replaced = store_col_int(st, 2);
    }
    store_reset(st);
    return rc;
}

/* What history a node keeps of its given-up tokens: a stolen copy older
 * than this is caught by the rotations since, not by its own use. */
#define TOKEN_HISTORY_MS (90LL * 86400 * 1000)

store_rc store_node_token_promote(store_tx *tx, const uint8_t hash[UTIL_SHA256_LEN],
                                  int64_t now_ms, int64_t *id)
{
    static const char sql[] =
        "UPDATE nodes SET token_hash = next_token_hash,"
        " next_token_hash = NULL, token_rotate = 0, token_issued_at = ?2"
        " WHERE next_token_hash = ?1 AND revoked_at IS NULL RETURNING id";
    static const char prune[] = "DELETE FROM node_token_history WHERE retired_at < ?1";
    int64_t node;
    store_rc rc = store_int64(store_tx_conn(tx), &node,
                              "SELECT id FROM nodes WHERE next_token_hash = ?1"
                              " AND revoked_at IS NULL",
                              STORE_ARGS(STORE_B(hash, UTIL_SHA256_LEN)));
    if (rc == STORE_OK)
        rc = token_retire(tx, node, 1, now_ms);
    if (rc == STORE_OK)
        rc = store_exec(store_tx_conn(tx), NULL, prune,
                        STORE_ARGS(STORE_I(now_ms - TOKEN_HISTORY_MS)));
    if (rc == STORE_NOTFOUND)
        rc = STORE_OK; /* nothing to prune */
    store_st *st = rc == STORE_OK ? store_prep(store_tx_conn(tx), sql,
                                               STORE_ARGS(STORE_B(hash, UTIL_SHA256_LEN),
                                                          STORE_I(now_ms)))
                                  : NULL;
    if (rc != STORE_OK || !st)
        return rc != STORE_OK ? rc : STORE_EIO;
    rc = store_step_row(st);
    if (rc == STORE_OK) {
        *id = store_col_int64(st, 0);
        store_tx_touch(tx, *id); /* its old token's cached row goes */
    }
    store_reset(st);
    return rc;
}

store_rc store_node_mark_down(store_tx *tx, int64_t cutoff_ms, void (*row)(void *arg, int64_t id),
                         void *arg)
{
    static const char sql[] = "UPDATE nodes SET state = 'down'"
                              " WHERE state = 'up' AND last_heartbeat < ?1 RETURNING id";
    store_st *st = store_prep(store_tx_conn(tx), sql, STORE_ARGS(STORE_I(cutoff_ms)));
    if (!st)
        return STORE_EIO;
    util_i64s ids = {0};
    int nomem = 0, rc;
    while ((rc = store_step(st)) == STORE_ROW) {
        store_tx_touch(tx, store_col_int64(st, 0)); /* its cached state is dropped */
        nomem |= util_i64s_push(&ids, store_col_int64(st, 0)) != 0;
    }
    store_reset(st);
    if (rc == STORE_DONE)
        rc = nomem ? STORE_NOMEM : STORE_OK; /* an error rolls the marks back */
    /* Told after the statement is done, so row() may write. */
    for (size_t i = 0; rc == STORE_OK && i < ids.n; i++)
        row(arg, ids.v[i]);
    free(ids.v);
    return rc;
}

#define WORKER_COLS                                                                        \
    "id, job_id, attempt, rank, node_rank, local_rank, node_id, desired, state,"           \
    " coalesce(exit_code, -1), coalesce(signal, 0), coalesce(message, ''), created_at,"    \
    " coalesce(started_at, 0), coalesce(finished_at, 0), coalesce(cpu_us, -1),"            \
    " coalesce(memory_peak, -1), coalesce(image_digest, '')"

static void worker_row(store_st *st, void *out)
{
    store_worker *w = out;
    w->id = store_col_int64(st, 0);
    w->job_id = store_col_int64(st, 1);
    w->attempt = store_col_int64(st, 2);
    w->rank = store_col_int64(st, 3);
    w->node_rank = store_col_int64(st, 4);
    w->local_rank = store_col_int64(st, 5);
    w->node_id = store_col_int64(st, 6);
    store_col_copy(st, 7, w->desired, sizeof w->desired);
    store_col_copy(st, 8, w->state, sizeof w->state);
    w->exit_code = store_col_int64(st, 9);
    w->signal = store_col_int64(st, 10);
    store_col_copy(st, 11, w->message, sizeof w->message);
    w->created_at = store_col_int64(st, 12);
    w->started_at = store_col_int64(st, 13);
    w->finished_at = store_col_int64(st, 14);
    w->cpu_us = store_col_int64(st, 15);
    w->memory_peak = store_col_int64(st, 16);
    store_col_copy(st, 17, w->image_digest, sizeof w->image_digest);
}

STORE_ROWS(worker_rows, store_worker, worker_row)

static int worker_each(store_st *st, void (*row)(void *arg, const store_worker *w),
                       void *arg)
{
    struct worker_rows r = {row, arg};
    return store_each(st, worker_rows, &r);
}

store_rc store_worker_insert(store_tx *tx, store_worker *w)
{
    static const char sql[] =
        "INSERT INTO workers(job_id, attempt, rank, node_rank, local_rank, node_id, created_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, sql);
    if (!st)
        return STORE_EIO;
    w->created_at = util_now_ms();
    store_bind_int64(st, 1, w->job_id);
    store_bind_int64(st, 2, w->attempt);
    store_bind_int64(st, 3, w->rank);
    store_bind_int64(st, 4, w->node_rank);
    store_bind_int64(st, 5, w->local_rank);
    store_bind_int64(st, 6, w->node_id);
    store_bind_int64(st, 7, w->created_at);
    store_tx_touch(tx, w->node_id);
    return store_step_change(c, st, &w->id);
}

store_rc store_worker_list_tx(store_tx *tx, int64_t job_id, int64_t attempt,
                         void (*row)(void *arg, const store_worker *w), void *arg)
{
    static const char sql[] = "SELECT " WORKER_COLS " FROM workers"
                              " WHERE job_id = ?1 AND attempt = ?2 ORDER BY rank";
    return worker_each(store_prep(store_tx_conn(tx), sql, STORE_ARGS(STORE_I(job_id),
            STORE_I(attempt))), row, arg);
}

store_rc store_worker_list(store *s, int64_t job_id, int64_t attempt, int64_t after, int limit,
                      void (*row)(void *arg, const store_worker *w), void *arg)
{
    /* Ids grow with the attempt and, within one placement, with the rank. */
    static const char sql[] = "SELECT " WORKER_COLS " FROM workers WHERE job_id = ?1"
                              " AND (?2 = 0 OR attempt = ?2) AND id > ?3 ORDER BY id LIMIT ?4";
    return worker_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(job_id),
            STORE_I(attempt), STORE_I(after), STORE_I(limit))), row, arg);
}

store_rc store_worker_desired(store *s, int64_t node_id,
                         void (*row)(void *arg, const store_worker *w), void *arg)
{
    static const char sql[] = "SELECT " WORKER_COLS " FROM workers WHERE node_id = ?1"
                              " AND desired = 'run' AND state IN ('assigned', 'running')"
                              " ORDER BY id";
    return worker_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(node_id))), row, arg);
}

static const char worker_get_sql[] = "SELECT " WORKER_COLS " FROM workers WHERE id = ?1";

static int worker_one(store_st *st, int64_t id, store_worker *out)
{
    if (st)
        store_bind_int64(st, 1, id);
    return store_get_one(st, worker_row, out);
}

store_rc store_worker_get(store *s, int64_t id, store_worker *out)
{
    return worker_one(store_read_stmt(s, worker_get_sql), id, out);
}

store_rc store_worker_get_tx(store_tx *tx, int64_t id, store_worker *out)
{
    return worker_one(store_stmt(store_tx_conn(tx), worker_get_sql), id, out);
}

/* Sets text on worker id of node_id (w_sql: ?1 id, ?2 node, ?3 text) and,
 * when that changed a row, on its job (j_sql: ?1 worker id, ?2 text).
 * STORE_NOTFOUND when the worker's row did not change. */
static int worker_then_job(store_tx *tx, int64_t id, int64_t node_id, const char *text,
                           const char *w_sql, const char *j_sql)
{
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, w_sql, STORE_ARGS(STORE_I(id), STORE_I(node_id),
            STORE_T(text)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_change(c, st, NULL);
    if (rc != STORE_OK)
        return rc;
    if (!(st = store_stmt(c, j_sql)))
        return STORE_EIO;
    store_bind_int64(st, 1, id);
    store_bind_text(st, 2, text);
    rc = store_step_change(c, st, NULL);
    return rc == STORE_NOTFOUND ? STORE_OK : rc;
}

store_rc store_worker_phase(store_tx *tx, int64_t id, int64_t node_id, const char *message)
{
    return worker_then_job(tx, id, node_id, message,
                           "UPDATE workers SET message = ?3 WHERE id = ?1 AND node_id = ?2"
                           " AND state = 'assigned' AND coalesce(message, '') != ?3",
                           "UPDATE jobs SET reason = ?2 WHERE state = 'STARTING'"
                           " AND id = (SELECT job_id FROM workers WHERE id = ?1)"
                           " AND attempt = (SELECT attempt FROM workers WHERE id = ?1)");
}

store_rc store_worker_digest(store_tx *tx, int64_t id, int64_t node_id, const char *digest)
{
    return worker_then_job(tx, id, node_id, digest,
                           "UPDATE workers SET image_digest = ?3 WHERE id = ?1 AND node_id = ?2"
                           " AND image_digest IS NULL",
                           "UPDATE jobs SET image_digest = ?2 WHERE image_digest IS NULL"
                           " AND id = (SELECT job_id FROM workers WHERE id = ?1)");
}

store_rc store_worker_report(store_tx *tx, int64_t id, int64_t node_id, const char *state,
                        int64_t exit_code, int64_t signal, const char *message, int64_t now_ms)
{
    /* A final state is never left; started_at and finished_at are set once.
     * An exit's message is its own (out of memory, a bound on processes):
     * the phase it started with is no part of how it ended. */
    static const char sql[] =
        "UPDATE workers SET state = ?3,"
        " exit_code = CASE WHEN ?4 >= 0 THEN ?4 ELSE exit_code END,"
        " signal = CASE WHEN ?5 > 0 THEN ?5 ELSE signal END,"
        " message = CASE WHEN ?3 = 'exited' THEN ?6 ELSE coalesce(?6, message) END,"
        " started_at = coalesce(started_at, CASE WHEN ?3 != 'assigned' THEN ?7 END),"
        " finished_at = coalesce(finished_at, CASE WHEN ?3 IN ('exited', 'failed', 'lost')"
        "  THEN ?7 END)"
        " WHERE id = ?1 AND node_id = ?2 AND state IN ('assigned', 'running') AND state != ?3";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, sql, STORE_ARGS(STORE_I(id), STORE_I(node_id), STORE_T(state),
            STORE_I(exit_code), STORE_I(signal), STORE_T(message && message[0] ? message : NULL),
            STORE_I(now_ms)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_change(c, st, NULL);
    if (rc == STORE_OK)
        store_tx_touch(tx, node_id);
    /* The rank's charge goes into the ledger in the same transaction as its end. */
    if (rc == STORE_OK && strcmp(state, "assigned") && strcmp(state, "running"))
        rc = store_charge_worker(tx, id);
    return rc;
}

store_rc store_worker_usage(store_tx *tx, int64_t id, int64_t node_id, int64_t cpu_us,
                       int64_t memory_peak)
{
    static const char sql[] =
        "UPDATE workers SET cpu_us = CASE WHEN ?3 >= 0 THEN ?3 ELSE cpu_us END,"
        " memory_peak = CASE WHEN ?4 >= 0 THEN ?4 ELSE memory_peak END"
        " WHERE id = ?1 AND node_id = ?2 AND state IN ('exited', 'failed')";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, sql, STORE_ARGS(STORE_I(id), STORE_I(node_id), STORE_I(cpu_us),
            STORE_I(memory_peak)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_change(c, st, NULL);
    return rc == STORE_NOTFOUND ? STORE_OK : rc;
}

store_rc store_worker_stop_attempt(store_tx *tx, int64_t job_id, int64_t attempt)
{
    static const char sql[] = "UPDATE workers SET desired = 'stop'"
                              " WHERE job_id = ?1 AND attempt = ?2 RETURNING node_id";
    store_st *st =
        store_prep(store_tx_conn(tx), sql, STORE_ARGS(STORE_I(job_id), STORE_I(attempt)));
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW)
        store_tx_touch(tx, store_col_int64(st, 0));
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

store_rc store_worker_lose_node(store_tx *tx, int64_t node_id, int64_t now_ms, const char *why,
                           void (*row)(void *arg, int64_t job_id), void *arg)
{
    static const char sql[] =
        "UPDATE workers SET state = 'lost', message = ?3, finished_at = ?2,"
        " desired = 'stop' WHERE node_id = ?1 AND state IN ('assigned', 'running')"
        " RETURNING job_id, id";
    store_st *st = store_prep(store_tx_conn(tx), sql, STORE_ARGS(STORE_I(node_id),
            STORE_I(now_ms), STORE_T(why)));
    if (!st)
        return STORE_EIO;
    /* Every changed row must be charged: the statement is stepped to its end
     * (all rows are updated whatever is read) and every id kept. */
    int64_t *ids = NULL; /* job, worker pairs */
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            int64_t *grown = realloc(ids, ncap * 2 * sizeof *grown);
            if (!grown) {
                rc = STORE_NOMEM;
                break;
            }
            ids = grown;
            cap = ncap;
        }
        ids[2 * n] = store_col_int64(st, 0);
        ids[2 * n + 1] = store_col_int64(st, 1);
        n++;
    }
    store_reset(st);
    rc = rc == STORE_DONE ? STORE_OK : rc;
    if (n)
        store_tx_touch(tx, node_id);
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        rc = store_charge_worker(tx, ids[2 * i + 1]);
        if (rc == STORE_OK)
            row(arg, ids[2 * i]);
    }
    free(ids);
    return rc;
}

store_rc store_usage_tx(store_tx *tx, int64_t since_ms,
                   void (*row)(void *arg, int64_t tenant_id, int64_t cpus, int64_t gpus,
                               int64_t started_at, int64_t finished_at),
                   void *arg)
{
    static const char sql[] =
        "SELECT j.tenant_id, j.cpus, j.gpus, w.started_at, coalesce(w.finished_at, 0)"
        " FROM workers w JOIN jobs j ON j.id = w.job_id"
        " WHERE w.started_at IS NOT NULL AND (w.finished_at IS NULL OR w.finished_at > ?1)";
    store_st *st = store_prep(store_tx_conn(tx), sql, STORE_ARGS(STORE_I(since_ms)));
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW)
        row(arg, store_col_int64(st, 0), store_col_int64(st, 1),
            store_col_int64(st, 2), store_col_int64(st, 3), store_col_int64(st, 4));
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

store_rc store_alloc_tx(store_tx *tx, void (*row)(void *arg, int64_t job_id, int64_t node_id,
                                             int64_t workers),
                   void *arg)
{
    static const char sql[] = "SELECT job_id, node_id, count(*) FROM workers"
                              " WHERE state IN ('assigned', 'running') GROUP BY job_id, node_id";
    store_st *st = store_stmt(store_tx_conn(tx), sql);
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW)
        row(arg, store_col_int64(st, 0), store_col_int64(st, 1),
            store_col_int64(st, 2));
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

store_rc store_port_reserve(store_tx *tx, int64_t node_id, int64_t port, int64_t job_id,
                       int64_t attempt, int64_t rank)
{
    static const char sql[] = "INSERT INTO job_ports(node_id, port, job_id, attempt, rank)"
                              " VALUES (?1, ?2, ?3, ?4, ?5)";
    return store_exec(store_tx_conn(tx), NULL, sql, STORE_ARGS(STORE_I(node_id), STORE_I(port),
            STORE_I(job_id), STORE_I(attempt), STORE_I(rank)));
}

store_rc store_port_list(store *s, int64_t job_id, int64_t attempt,
                    void (*row)(void *arg, int64_t rank, const char *address, int64_t port),
                    void *arg)
{
    static const char sql[] = "SELECT p.rank, n.address, p.port FROM job_ports p"
                              " JOIN nodes n ON n.id = p.node_id"
                              " WHERE p.job_id = ?1 AND p.attempt = ?2 ORDER BY p.rank";
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(job_id),
            STORE_I(attempt)));
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW)
        row(arg, store_col_int64(st, 0), store_col_text(st, 1),
            store_col_int64(st, 2));
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

store_rc store_port_release_idle(store_tx *tx)
{
    static const char sql[] =
        "DELETE FROM job_ports WHERE NOT EXISTS (SELECT 1 FROM workers w"
        " WHERE w.job_id = job_ports.job_id AND w.attempt = job_ports.attempt"
        " AND w.state IN ('assigned', 'running'))";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, sql);
    if (!st)
        return STORE_EIO;
    int rc = store_step_change(c, st, NULL);
    return rc == STORE_NOTFOUND ? STORE_OK : rc;
}

int store_attempt_live(store *s, int64_t job_id, int64_t attempt)
{
    static const char sql[] = "SELECT 1 FROM workers WHERE job_id = ?1 AND attempt = ?2"
                              " AND state IN ('assigned', 'running') LIMIT 1";
    store_st *st = store_read_stmt(s, sql);
    if (!st)
        return 1;
    store_bind_int64(st, 1, job_id);
    store_bind_int64(st, 2, attempt);
    int rc = store_step_row(st);
    store_reset(st);
    return rc == STORE_OK;
}


int store_job_live_tx(store_tx *tx, int64_t job_id)
{
    static const char sql[] = "SELECT 1 FROM workers WHERE job_id = ?1"
                              " AND state IN ('assigned', 'running') LIMIT 1";
    store_st *st = store_stmt(store_tx_conn(tx), sql);
    if (!st)
        return 1;
    store_bind_int64(st, 1, job_id);
    int rc = store_step_row(st);
    store_reset(st);
    return rc != STORE_NOTFOUND; /* an error counts as live: nothing is deleted */
}

store_rc store_port_lowest_free(store_tx *tx, int64_t node_id, int64_t lo, int64_t hi, int64_t *port)
{
    static const char sql[] = "SELECT port FROM job_ports WHERE node_id = ?1"
                              " AND port BETWEEN ?2 AND ?3 ORDER BY port";
    store_st *st = store_prep(store_tx_conn(tx), sql, STORE_ARGS(STORE_I(node_id), STORE_I(lo),
            STORE_I(hi)));
    if (!st)
        return STORE_EIO;
    /* The ports in use come in order: the first gap is the answer. */
    int64_t want = lo;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW) {
        int64_t used = store_col_int64(st, 0);
        if (used > want)
            break;
        if (used == want)
            want++;
    }
    store_reset(st);
    if (rc != STORE_DONE && rc != STORE_ROW)
        return rc;
    *port = want <= hi ? want : -1;
    return STORE_OK;
}

#define QUOTA_COLS                                                                         \
    "tenant_id, coalesce(max_running_jobs, -1), coalesce(max_workers, -1),"               \
    " coalesce(max_cpus, -1), coalesce(max_gpus, -1), coalesce(max_storage_bytes, -1),"   \
    " coalesce(max_pending_jobs, -1)"

static void quota_row(store_st *st, void *out)
{
    *(store_quota *)out = (store_quota){store_col_int64(st, 0), store_col_int64(st, 1),
                                        store_col_int64(st, 2), store_col_int64(st, 3),
                                        store_col_int64(st, 4), store_col_int64(st, 5),
                                        store_col_int64(st, 6)};
}

STORE_ROWS(quota_rows, store_quota, quota_row)

store_rc store_quota_get(store *s, int64_t tenant_id, store_quota *out)
{
    static const char sql[] = "SELECT " QUOTA_COLS " FROM tenant_quotas WHERE tenant_id = ?1";
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(tenant_id)));
    int rc = store_get_one(st, quota_row, out);
    if (rc == STORE_NOTFOUND) { /* no quota: no limit */
        *out = (store_quota){tenant_id, -1, -1, -1, -1, -1, -1};
        rc = STORE_OK;
    }
    return rc;
}

store_rc store_quota_all_tx(store_tx *tx, void (*row)(void *arg, const store_quota *q), void *arg)
{
    static const char sql[] = "SELECT " QUOTA_COLS " FROM tenant_quotas";
    struct quota_rows r = {row, arg};
    return store_each(store_stmt(store_tx_conn(tx), sql), quota_rows, &r);
}

static void bind_limit(store_st *st, int i, int64_t v)
{
    if (v >= 0)
        store_bind_int64(st, i, v);
    else
        store_bind_null(st, i);
}

store_rc store_quota_put(store_tx *tx, const store_quota *q)
{
    static const char sql[] =
        "INSERT INTO tenant_quotas(tenant_id, max_running_jobs, max_workers, max_cpus, max_gpus,"
        " max_storage_bytes, max_pending_jobs)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(tenant_id) DO UPDATE SET"
        " max_running_jobs = ?2, max_workers = ?3, max_cpus = ?4, max_gpus = ?5,"
        " max_storage_bytes = ?6, max_pending_jobs = ?7";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, sql, STORE_ARGS(STORE_I(q->tenant_id)));
    if (!st)
        return STORE_EIO;
    bind_limit(st, 2, q->max_running_jobs);
    bind_limit(st, 3, q->max_workers);
    bind_limit(st, 4, q->max_cpus);
    bind_limit(st, 5, q->max_gpus);
    bind_limit(st, 6, q->max_storage_bytes);
    bind_limit(st, 7, q->max_pending_jobs);
    return store_step_change(c, st, NULL);
}

store_rc store_job_place(store_tx *tx, int64_t job_id, int64_t master_node, int64_t port,
                    int64_t per_node)
{
    /* The attempt's rendezvous secret (migration 013), drawn here: every
     * rank of the attempt gets the same one, and no other attempt. */
    static const char sql[] = "UPDATE jobs SET master_node_id = ?2, master_port = ?3,"
                              " placed_per_node = ?4, rdzv_secret = ?5 WHERE id = ?1";
    uint8_t raw[STORE_RDZV_SECRET_BYTES];
    char secret[2 * STORE_RDZV_SECRET_BYTES + 1];
    if (util_random(raw, sizeof raw) != 0)
        return STORE_EIO;
    util_hex(raw, sizeof raw, secret);
    return store_exec(store_tx_conn(tx), NULL, sql, STORE_ARGS(STORE_I(job_id),
            STORE_I(master_node), STORE_I(port), STORE_I(per_node), STORE_T(secret)));
}

store_rc store_job_next_attempt(store_tx *tx, int64_t job_id)
{
    /* started_at and finished_at are the current attempt's: its timeout counts from its start. */
    static const char sql[] = "UPDATE jobs SET attempt = attempt + 1, master_node_id = NULL,"
                              " master_port = NULL, rdzv_secret = NULL, started_at = NULL,"
                              " finished_at = NULL WHERE id = ?1";
    return store_tx_exec_id(tx, sql, job_id);
}
