/*
 * store_bill: SQL for the ledger, accounts and holds, and the billing rules.
 */
#include "storage/store_bill.h"
#include "lib/fmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/store_int.h"
#include "lib/util.h"

int64_t store_bill_seconds(int64_t start_ms, int64_t end_ms, int64_t cap_s)
{
    if (start_ms <= 0 || end_ms <= start_ms)
        return 0;
    int64_t s = (end_ms - start_ms + 999) / 1000;
    return cap_s > 0 && s > cap_s ? cap_s : s;
}

int64_t store_bill_amount(int64_t seconds, int64_t price_per_hour)
{
    if (seconds <= 0 || price_per_hour <= 0)
        return 0;
    /* seconds <= ~10^11 (years of ms) and price <= 10^9: the product fits. */
    __int128 v = (__int128)seconds * price_per_hour;
    v = (v + 1800) / 3600;
    return v > STORE_MONEY_MAX ? STORE_MONEY_MAX : (int64_t)v;
}

int64_t store_bill_estimate(int64_t price_per_hour, int64_t workers, int64_t seconds)
{
    __int128 v = (__int128)store_bill_amount(seconds, price_per_hour) * workers;
    return v > STORE_MONEY_MAX ? -1 : (int64_t)v;
}

/* ---- accounts ---- */

static const char account_sql[] =
    "SELECT currency, balance, enforce, coalesce(monthly_cap, -1) FROM accounts"
    " WHERE tenant_id = ?1";

static int account_one(store_st *st, int64_t tenant_id, store_account *out)
{
    memset(out, 0, sizeof *out);
    out->tenant_id = tenant_id;
    fmt_cut(out->currency, sizeof out->currency, "USD");
    out->monthly_cap = -1;
    if (!st)
        return STORE_EIO;
    store_bind_int64(st, 1, tenant_id);
    int rc = store_step_row(st);
    if (rc == STORE_OK) {
        store_col_copy(st, 0, out->currency, sizeof out->currency);
        out->balance = store_col_int64(st, 1);
        out->enforce = store_col_int(st, 2);
        out->monthly_cap = store_col_int64(st, 3);
    }
    store_reset(st);
    return rc;
}

store_rc store_account_get(store *s, int64_t tenant_id, store_account *out)
{
    int rc = account_one(store_read_stmt(s, account_sql), tenant_id, out);
    return rc == STORE_NOTFOUND ? STORE_OK : rc;
}

store_rc store_account_get_tx(store_tx *tx, int64_t tenant_id, store_account *out)
{
    int rc = account_one(store_stmt(store_tx_conn(tx), account_sql), tenant_id, out);
    return rc == STORE_NOTFOUND ? STORE_OK : rc;
}

store_rc store_account_set(store_tx *tx, const store_account *a)
{
    static const char other_sql[] =
        "SELECT 1 FROM ledger WHERE tenant_id = ?1 AND currency != ?2 LIMIT 1";
    static const char sql[] =
        "INSERT INTO accounts(tenant_id, currency, enforce, monthly_cap) VALUES (?1, ?2, ?3, ?4)"
        " ON CONFLICT(tenant_id) DO UPDATE SET currency = ?2, enforce = ?3, monthly_cap = ?4";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, other_sql, STORE_ARGS(STORE_I(a->tenant_id),
            STORE_T(a->currency)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    store_reset(st);
    if (rc != STORE_NOTFOUND)
        return rc == STORE_OK ? STORE_CONFLICT : rc;
    if (!(st = store_stmt(c, sql)))
        return STORE_EIO;
    store_bind_int64(st, 1, a->tenant_id);
    store_bind_text(st, 2, a->currency);
    store_bind_int64(st, 3, a->enforce ? 1 : 0);
    if (a->monthly_cap >= 0)
        store_bind_int64(st, 4, a->monthly_cap);
    return store_step_change(c, st, NULL);
}

store_rc store_credit_add(store_tx *tx, int64_t tenant_id, int64_t amount, const char *note,
                     int64_t user_id, int64_t now_ms, int64_t *id)
{
    static const char sql[] =
        "INSERT INTO ledger(tenant_id, at, kind, amount, currency, user_id, note)"
        " VALUES (?1, ?2, 'credit', ?3, ?4, ?5, ?6) RETURNING id";
    store_account a;
    int rc = store_account_get_tx(tx, tenant_id, &a);
    if (rc != STORE_OK)
        return rc;
    if (amount <= 0 || amount > STORE_MONEY_MAX || a.balance > STORE_MONEY_MAX - amount)
        return STORE_INVALID;
    return store_exec(store_tx_conn(tx), id, sql, STORE_ARGS(STORE_I(tenant_id), STORE_I(now_ms),
            STORE_I(amount), STORE_T(a.currency), STORE_I(user_id),
            STORE_T(note && note[0] ? note : NULL)));
}

/* ---- charges ---- */

store_rc store_charge_worker(store_tx *tx, int64_t worker_id)
{
    static const char get_sql[] =
        "SELECT w.job_id, w.attempt, w.rank, w.started_at, w.finished_at, j.tenant_id, j.name,"
        " j.user_id, j.worker_spec, j.gpus, j.price_per_hour, j.currency,"
        " coalesce(j.max_runtime_seconds, 0), coalesce(w.signal, 0)"
        " FROM workers w JOIN jobs j ON j.id = w.job_id"
        " WHERE w.id = ?1 AND w.started_at IS NOT NULL AND w.finished_at IS NOT NULL";
    static const char put_sql[] =
        "INSERT INTO ledger(tenant_id, at, kind, amount, currency, job_id, attempt, rank,"
        " job_name, user_id, worker_spec, gpus, started_at, finished_at, seconds,"
        " price_per_hour)"
        " VALUES (?1, ?2, 'charge', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
        " ON CONFLICT(job_id, attempt, rank) DO NOTHING";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, get_sql, STORE_ARGS(STORE_I(worker_id)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc != STORE_OK) {
        store_reset(st);
        return rc == STORE_NOTFOUND ? STORE_OK : rc; /* nothing to charge */
    }
    int64_t job = store_col_int64(st, 0), attempt = store_col_int64(st, 1),
            rank = store_col_int64(st, 2), start = store_col_int64(st, 3),
            end = store_col_int64(st, 4), tenant = store_col_int64(st, 5);
    char name[201], spec[64], cur[4];
    store_col_copy(st, 6, name, sizeof name);
    int64_t user = store_col_int64(st, 7);
    store_col_copy(st, 8, spec, sizeof spec);
    int64_t gpus = store_col_int64(st, 9), price = store_col_int64(st, 10);
    store_col_copy(st, 11, cur, sizeof cur);
    int64_t cap = store_col_int64(st, 12);
    /* Killed (SIGKILL): it ignored the SIGTERM of its stop and ran through
     * the grace, which is its own doing and billed. */
    if (cap > 0 && store_col_int64(st, 13) == 9)
        cap += STORE_BILL_GRACE_S;
    store_reset(st);
    int64_t secs = store_bill_seconds(start, end, cap);
    if (!(st = store_stmt(c, put_sql)))
        return STORE_EIO;
    store_bind_int64(st, 1, tenant);
    store_bind_int64(st, 2, end);
    store_bind_int64(st, 3, store_bill_amount(secs, price));
    store_bind_text(st, 4, cur);
    store_bind_int64(st, 5, job);
    store_bind_int64(st, 6, attempt);
    store_bind_int64(st, 7, rank);
    store_bind_text(st, 8, name);
    store_bind_int64(st, 9, user);
    store_bind_text(st, 10, spec);
    store_bind_int64(st, 11, gpus);
    store_bind_int64(st, 12, start);
    store_bind_int64(st, 13, end);
    store_bind_int64(st, 14, secs);
    store_bind_int64(st, 15, price);
    rc = store_step_change(c, st, NULL);
    return rc == STORE_NOTFOUND ? STORE_OK : rc;
}

/* ---- holds ---- */

store_rc store_hold_put(store_tx *tx, int64_t job_id, int64_t attempt, int64_t tenant_id,
                   int64_t amount, int bounded, int64_t now_ms)
{
    static const char sql[] =
        "INSERT INTO job_holds(job_id, attempt, tenant_id, amount, bounded, created_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
    return store_exec(store_tx_conn(tx), NULL, sql, STORE_ARGS(STORE_I(job_id), STORE_I(attempt),
            STORE_I(tenant_id), STORE_I(amount), STORE_I(bounded ? 1 : 0), STORE_I(now_ms)));
}

store_rc store_hold_release_idle(store_tx *tx)
{
    static const char sql[] =
        "DELETE FROM job_holds WHERE NOT EXISTS (SELECT 1 FROM workers w"
        "  WHERE w.job_id = job_holds.job_id AND w.attempt = job_holds.attempt"
        "  AND w.state IN ('assigned', 'running'))"
        " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = job_holds.job_id"
        "  AND j.attempt = job_holds.attempt AND j.state IN ('STARTING', 'RUNNING'))";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, sql);
    if (!st)
        return STORE_EIO;
    int rc = store_step_change(c, st, NULL);
    return rc == STORE_NOTFOUND ? STORE_OK : rc;
}

/* ---- money now ---- */

/* The cost so far of one attempt's running ranks. */
static int live_cost(store_conn *c, int64_t job_id, int64_t attempt, int64_t price, int64_t cap,
                     int64_t now, int64_t *cost, int64_t *running)
{
    static const char sql[] =
        "SELECT started_at FROM workers WHERE job_id = ?1 AND attempt = ?2"
        " AND started_at IS NOT NULL AND finished_at IS NULL";
    store_st *st = store_prep(c, sql, STORE_ARGS(STORE_I(job_id), STORE_I(attempt)));
    if (!st)
        return STORE_EIO;
    int rc;
    *cost = 0;
    *running = 0;
    while ((rc = store_step(st)) == STORE_ROW) {
        *cost += store_bill_amount(store_bill_seconds(store_col_int64(st, 0), now, cap),
                                   price);
        (*running)++;
    }
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

/* A job's hold on its tenant's money, and what it has cost so far. */
struct hold {
    int64_t job, attempt, amount, price, cap, charged;
    int bounded, active;
};

/* Every hold of the tenant, read whole into *holds (n of them; the caller
 * frees): the live costs use statements of their own, and the caller's
 * callback may write.  STORE_OK or the error. */
static int holds_read(store_conn *c, int64_t tenant_id, struct hold **holds, size_t *n)
{
    static const char holds_sql[] =
        "SELECT h.job_id, h.attempt, h.amount, h.bounded, j.price_per_hour,"
        " coalesce(j.max_runtime_seconds, 0), j.state IN ('STARTING', 'RUNNING')"
        "  AND j.attempt = h.attempt,"
        " (SELECT coalesce(sum(l.amount), 0) FROM ledger l WHERE l.job_id = h.job_id"
        "  AND l.attempt = h.attempt AND l.kind = 'charge')"
        " FROM job_holds h JOIN jobs j ON j.id = h.job_id WHERE h.tenant_id = ?1"
        " ORDER BY h.job_id, h.attempt";
    size_t cap = 0;
    int oom = 0, rc;
    *holds = NULL;
    *n = 0;
    store_st *st = store_prep(c, holds_sql, STORE_ARGS(STORE_I(tenant_id)));
    if (!st)
        return STORE_EIO;
    while (!oom && (rc = store_step(st)) == STORE_ROW) {
        struct hold h = {
            .job = store_col_int64(st, 0),
            .attempt = store_col_int64(st, 1),
            .amount = store_col_int64(st, 2),
            .bounded = store_col_int(st, 3),
            .price = store_col_int64(st, 4),
            .cap = store_col_int64(st, 5),
            .active = store_col_int(st, 6),
            .charged = store_col_int64(st, 7),
        };
        UTIL_PUSH(*holds, *n, cap, h, &oom);
    }
    store_reset(st);
    if (oom)
        return STORE_NOMEM;
    return rc == STORE_DONE ? STORE_OK : rc;
}

store_rc store_money_tx(store_tx *tx, int64_t tenant_id, int64_t now_ms, store_money *out,
                   void (*unbounded)(void *arg, int64_t job_id), void *arg)
{
    static const char has_sql[] = "SELECT 1 FROM accounts WHERE tenant_id = ?1";
    /* This month's charges from the ledger's running totals per day (a
     * month starts at a day's start): at most 31 days' rows, where summing
     * the charges read a month of them for every budgeted tenant in every
     * scheduler pass. */
    static const char month_sql[] =
        "SELECT coalesce(sum(amount), 0) FROM usage_days WHERE tenant_id = ?1 AND day >= ?2";
    struct hold *holds = NULL;
    size_t n = 0;
    memset(out, 0, sizeof *out);
    store_conn *c = store_tx_conn(tx);
    int64_t one, month, next;
    int rc = store_account_get_tx(tx, tenant_id, &out->acct);
    if (rc == STORE_OK) /* a failure to read is an error, not "no account" */
        rc = store_int64(c, &one, has_sql, STORE_ARGS(STORE_I(tenant_id)));
    if (rc != STORE_OK && rc != STORE_NOTFOUND)
        return rc;
    out->has_account = rc == STORE_OK;
    util_month_bounds(now_ms, &month, &next);
    rc = store_int64(c, &out->spent_month, month_sql,
                     STORE_ARGS(STORE_I(tenant_id), STORE_I(month / 86400000)));
    if (rc == STORE_OK)
        rc = holds_read(c, tenant_id, &holds, &n);
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        struct hold *h = &holds[i];
        int64_t live, running;
        rc = live_cost(c, h->job, h->attempt, h->price, h->bounded ? h->cap : 0, now_ms, &live,
                       &running);
        if (rc != STORE_OK)
            break;
        int64_t accrued = h->charged + live;
        out->held += h->amount;
        out->live += live;
        out->reserved += (accrued > h->amount ? accrued : h->amount) - h->charged;
        if (!h->bounded && h->active) {
            out->unbounded_rate += h->price * running;
            if (unbounded)
                unbounded(arg, h->job);
        }
    }
    free(holds);
    return rc;
}

store_rc store_budget_tenants_tx(store_tx *tx, util_i64s *ids)
{
    static const char sql[] =
        "SELECT tenant_id FROM accounts WHERE enforce = 1 OR monthly_cap IS NOT NULL"
        " ORDER BY tenant_id";
    store_st *st = store_stmt(store_tx_conn(tx), sql);
    if (!st)
        return STORE_EIO;
    int rc, nomem = 0;
    while (!nomem && (rc = store_step(st)) == STORE_ROW)
        nomem = util_i64s_push(ids, store_col_int64(st, 0)) != 0;
    store_reset(st);
    if (nomem)
        return STORE_NOMEM;
    return rc == STORE_DONE ? STORE_OK : rc;
}

/* ---- queries ---- */

store_rc store_ledger_list(store *s, int64_t tenant_id, int64_t from, int64_t to, const char *kind,
                      void (*row)(void *arg, const store_entry *e), void *arg)
{
    static const char sql[] =
        "SELECT id, tenant_id, at, kind, amount, currency, coalesce(job_id, 0),"
        " coalesce(attempt, 0), coalesce(rank, 0), coalesce(job_name, ''),"
        " coalesce(user_id, 0), coalesce(worker_spec, ''), coalesce(gpus, 0),"
        " coalesce(started_at, 0), coalesce(finished_at, 0), coalesce(seconds, 0),"
        " coalesce(price_per_hour, 0), coalesce(note, '')"
        " FROM ledger WHERE tenant_id = ?1 AND kind = ?4 AND at >= ?2 AND at < ?3"
        " ORDER BY at, id";
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(tenant_id),
            STORE_I(from), STORE_I(to), STORE_T(kind)));
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW) {
        store_entry e;
        e.id = store_col_int64(st, 0);
        e.tenant_id = store_col_int64(st, 1);
        e.at = store_col_int64(st, 2);
        store_col_copy(st, 3, e.kind, sizeof e.kind);
        e.amount = store_col_int64(st, 4);
        store_col_copy(st, 5, e.currency, sizeof e.currency);
        e.job_id = store_col_int64(st, 6);
        e.attempt = store_col_int64(st, 7);
        e.rank = store_col_int64(st, 8);
        store_col_copy(st, 9, e.job_name, sizeof e.job_name);
        e.user_id = store_col_int64(st, 10);
        store_col_copy(st, 11, e.worker_spec, sizeof e.worker_spec);
        e.gpus = store_col_int64(st, 12);
        e.started_at = store_col_int64(st, 13);
        e.finished_at = store_col_int64(st, 14);
        e.seconds = store_col_int64(st, 15);
        e.price_per_hour = store_col_int64(st, 16);
        store_col_copy(st, 17, e.note, sizeof e.note);
        row(arg, &e);
    }
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

store_rc store_job_cost(store *s, int64_t job_id, int64_t now_ms,
                   void (*row)(void *arg, const store_rank_cost *c), void *arg)
{
    static const char sql[] =
        "SELECT w.attempt, w.rank, w.state, coalesce(w.started_at, 0),"
        " coalesce(w.finished_at, 0), l.id IS NOT NULL, coalesce(l.seconds, 0),"
        " coalesce(l.amount, 0), j.price_per_hour, coalesce(j.max_runtime_seconds, 0)"
        " FROM workers w JOIN jobs j ON j.id = w.job_id"
        " LEFT JOIN ledger l ON l.job_id = w.job_id AND l.attempt = w.attempt"
        "  AND l.rank = w.rank"
        " WHERE w.job_id = ?1 ORDER BY w.attempt, w.rank";
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(job_id)));
    if (!st)
        return STORE_EIO;
    int rc;
    while ((rc = store_step(st)) == STORE_ROW) {
        store_rank_cost c;
        c.attempt = store_col_int64(st, 0);
        c.rank = store_col_int64(st, 1);
        store_col_copy(st, 2, c.state, sizeof c.state);
        c.started_at = store_col_int64(st, 3);
        c.finished_at = store_col_int64(st, 4);
        c.charged = store_col_int(st, 5);
        c.seconds = store_col_int64(st, 6);
        c.amount = store_col_int64(st, 7);
        if (!c.charged && c.started_at > 0 && c.finished_at == 0) {
            int64_t price = store_col_int64(st, 8), cap = store_col_int64(st, 9);
            c.seconds = store_bill_seconds(c.started_at, now_ms, cap);
            c.amount = store_bill_amount(c.seconds, price);
        }
        row(arg, &c);
    }
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

/*
 * Usage reads the running totals that the ledger's trigger keeps (migration
 * 011), not every charge.  A window [from, to) is its whole UTC days, read
 * from usage_days, and the partial days at its two ends, read from the
 * ledger: three arms of one statement, so they share one snapshot.  Every
 * such statement takes ?1 the tenant, ?2..?5 the two partial ends (ms,
 * [?2, ?3) and [?4, ?5)) and ?6..?7 the whole days ([?6, ?7), days).
 */
#define DAY_MS 86400000LL

/* SQL pieces, laid out as the statements read. */
/* clang-format off */
#define USAGE_SUMS                                                                                 \
    " count(*) AS e, sum(l.seconds) AS ws, sum(l.seconds * l.gpus) AS gs, sum(l.amount) AS a,"     \
    " max(l.currency) AS c"
#define USAGE_LEDGER(lo, hi)                                                                       \
    " FROM ledger l WHERE l.tenant_id = ?1 AND l.kind = 'charge'"                                  \
    " AND l.at >= " lo " AND l.at < " hi
#define USAGE_ROLLUP                                                                               \
    " sum(entries), sum(worker_seconds), sum(gpu_seconds), sum(amount), max(currency)"             \
    " FROM usage_days WHERE tenant_id = ?1 AND day >= ?6 AND day < ?7"
/* One arm: the ledger's charges in [lo, hi), keyed by key, filtered by where. */
#define USAGE_ARM(key, lo, hi, where)                                                              \
    "SELECT " key " AS k," USAGE_SUMS USAGE_LEDGER(lo, hi) where " GROUP BY 1"
/* The window's charges grouped by a key: raw_key over the ledger's rows,
 * day_key over usage_days', each arm filtered further by its where. */
#define USAGE_ARMS(raw_key, raw_where, day_key, day_where)                                         \
    USAGE_ARM(raw_key, "?2", "?3", raw_where) " UNION ALL "                                        \
    USAGE_ARM(raw_key, "?4", "?5", raw_where) " UNION ALL "                                        \
    "SELECT " day_key "," USAGE_ROLLUP day_where " GROUP BY 1"
#define USER_KEY "coalesce(l.user_id, 0)"
#define SPEC_KEY "coalesce(l.worker_spec, '')"
#define USAGE_GROUPED " sum(t.e), sum(t.ws), sum(t.gs), sum(t.a), max(t.c) FROM ("
/* The month's charges outside the window [?3, ?4), by job: [?2 (the
 * month's start), ?3) and [?4, ?5 (the month's end)). */
#define OUTSIDE_ARMS                                                                               \
    USAGE_ARM("l.job_id", "?2", "?3", " AND l.job_id > ?6") " UNION ALL "                          \
    USAGE_ARM("l.job_id", "?4", "?5", " AND l.job_id > ?6")
/* clang-format on */

/* The arguments ?2..?7 above for [from, to): where it holds no whole day,
 * all of it is the first end. */
struct usage_span {
    int64_t lo0, hi0, lo1, hi1, d0, d1;
};

static void usage_span(int64_t from, int64_t to, struct usage_span *w)
{
    if (from < 0) /* no charge is older than the epoch */
        from = 0;
    if (to < from)
        to = from;
    int64_t d0 = from / DAY_MS + (from % DAY_MS != 0), d1 = to / DAY_MS;
    if (d0 < d1)
        *w = (struct usage_span){from, d0 * DAY_MS, d1 * DAY_MS, to, d0, d1};
    else
        *w = (struct usage_span){from, to, to, to, 0, 0};
}

/* Hands each row of st (key, name, entries, seconds, GPU seconds, amount,
 * currency) to row and resets st: the number of rows, or a store error
 * (negative). */
static int usage_rows(store_st *st, void (*row)(void *arg, const store_usage *u), void *arg)
{
    int rc, n = 0;
    while ((rc = store_step(st)) == STORE_ROW) {
        store_usage u;
        u.key = store_col_int64(st, 0);
        store_col_copy(st, 1, u.name, sizeof u.name);
        u.entries = store_col_int64(st, 2);
        u.worker_seconds = store_col_int64(st, 3);
        u.gpu_seconds = store_col_int64(st, 4);
        u.amount = store_col_int64(st, 5);
        store_col_copy(st, 6, u.currency, sizeof u.currency);
        row(arg, &u);
        n++;
    }
    store_reset(st);
    return rc == STORE_DONE ? n : (rc < 0 ? rc : STORE_EIO);
}

/*
 * A page of jobs of a window [from, to) inside one month, from the month's
 * totals per job less the ledger's charges of the month outside the window
 * (before from; from to to the month's end).  One statement, so one
 * snapshot; a job all of whose charges lie outside is left out.  Its cost
 * is the page and the charges outside, so it is taken only where those are
 * fewer than the window's own, as far as time tells: none are written in
 * the future, so the month past now counts for nothing (past now there
 * may still be a few, from a replica whose clock runs ahead, and they are
 * subtracted like any other).  1: not taken (the caller sums the window's
 * charges); else STORE_OK or the store's error.
 */
static int usage_job_month(store *s, int64_t tenant_id, int64_t from, int64_t to, int64_t after,
                           int64_t limit, void (*row)(void *arg, const store_usage *u), void *arg)
{
    static const char sql[] =
        "SELECT m.job_id, m.job_name, m.entries - coalesce(x.e, 0),"
        " m.worker_seconds - coalesce(x.ws, 0), m.gpu_seconds - coalesce(x.gs, 0),"
        " m.amount - coalesce(x.a, 0), m.currency FROM usage_job_months m"
        " LEFT JOIN (SELECT t.k, sum(t.e) AS e, sum(t.ws) AS ws, sum(t.gs) AS gs, sum(t.a) AS a"
        " FROM (" OUTSIDE_ARMS ") t GROUP BY t.k) x ON x.k = m.job_id"
        " WHERE m.tenant_id = ?1 AND m.month = ?2 AND m.job_id > ?6"
        " AND m.entries > coalesce(x.e, 0) ORDER BY m.job_id LIMIT ?7";
    int64_t month, next, now = util_now_ms();
    util_month_bounds(from, &month, &next);
    if (to > next)
        return 1;
    int64_t outside = (from - month) + (to < now ? (now < next ? now : next) - to : 0);
    if (outside > (to < now ? to : now) - from)
        return 1;
    store_st *st =
        store_prep(store_reader(s), sql,
                   STORE_ARGS(STORE_I(tenant_id), STORE_I(month), STORE_I(from), STORE_I(to),
                              STORE_I(next), STORE_I(after), STORE_I(limit)));
    if (!st)
        return STORE_EIO;
    int n = usage_rows(st, row, arg);
    return n < 0 ? n : STORE_OK;
}

store_rc store_usage_group(store *s, int64_t tenant_id, int64_t from, int64_t to, const char *group,
                      int64_t after, int limit, void (*row)(void *arg, const store_usage *u),
                      void *arg)
{
    /* ?8 is the key to start past (the day's is applied to the window),
     * ?9 the page's size. */
    /* clang-format off */
    static const char day_sql[] =
        "SELECT t.k, ''," USAGE_GROUPED
            USAGE_ARMS("l.at / 86400000", "", "day", "")
        ") t GROUP BY t.k ORDER BY t.k LIMIT ?9";
    static const char user_sql[] =
        "SELECT t.k, coalesce((SELECT name FROM users u WHERE u.id = t.k), '')," USAGE_GROUPED
            USAGE_ARMS(USER_KEY, " AND " USER_KEY " > ?8", "user_id", " AND user_id > ?8")
        ") t GROUP BY t.k ORDER BY t.k LIMIT ?9";
    static const char spec_sql[] =
        "SELECT 0, t.k," USAGE_GROUPED
            USAGE_ARMS(SPEC_KEY, "", "worker_spec", "")
        ") t GROUP BY t.k ORDER BY t.k";
    /* A window not mostly one month's: the ledger's charges, by job. */
    static const char job_sql[] =
        "SELECT l.job_id, max(l.job_name)," USAGE_SUMS USAGE_LEDGER("?2", "?3")
        " AND l.job_id > ?4 GROUP BY 1 ORDER BY 1 LIMIT ?5";
    /* clang-format on */
    int is_day = !strcmp(group, "day"), is_job = !strcmp(group, "job");
    const char *sql = is_day                          ? day_sql
                      : !strcmp(group, "user")        ? user_sql
                      : !strcmp(group, "worker_spec") ? spec_sql
                                                      : NULL;
    if ((!sql && !is_job) || after < 0 || limit < 0)
        return STORE_INVALID;
    if (is_day && after > 0 && after < INT64_MAX / DAY_MS && (after + 1) * DAY_MS > from)
        from = (after + 1) * DAY_MS;
    if (from >= to) /* paged past the window */
        return STORE_OK;
    int64_t lim = limit > 0 ? limit : INT32_MAX;
    store_st *st;
    if (is_job) {
        int rc = usage_job_month(s, tenant_id, from, to, after, lim, row, arg);
        if (rc != 1)
            return rc;
        st = store_prep(store_reader(s), job_sql,
                        STORE_ARGS(STORE_I(tenant_id), STORE_I(from), STORE_I(to), STORE_I(after),
                                   STORE_I(lim)));
    } else {
        struct usage_span w;
        usage_span(from, to, &w);
        st = sql == spec_sql
                 ? store_prep(store_reader(s), sql,
                              STORE_ARGS(STORE_I(tenant_id), STORE_I(w.lo0), STORE_I(w.hi0),
                                         STORE_I(w.lo1), STORE_I(w.hi1), STORE_I(w.d0),
                                         STORE_I(w.d1)))
                 : store_prep(store_reader(s), sql,
                              STORE_ARGS(STORE_I(tenant_id), STORE_I(w.lo0), STORE_I(w.hi0),
                                         STORE_I(w.lo1), STORE_I(w.hi1), STORE_I(w.d0),
                                         STORE_I(w.d1), STORE_I(after), STORE_I(lim)));
    }
    if (!st)
        return STORE_EIO;
    int n = usage_rows(st, row, arg);
    return n < 0 ? n : STORE_OK;
}

store_rc store_usage_total(store *s, int64_t tenant_id, int64_t from, int64_t to, store_usage *out)
{
    /* clang-format off */
    static const char sql[] =
        "SELECT" USAGE_GROUPED
            "SELECT" USAGE_SUMS USAGE_LEDGER("?2", "?3") " UNION ALL"
            " SELECT" USAGE_SUMS USAGE_LEDGER("?4", "?5") " UNION ALL"
            " SELECT" USAGE_ROLLUP
        ") t";
    /* clang-format on */
    struct usage_span w;
    usage_span(from, to, &w);
    memset(out, 0, sizeof *out);
    store_st *st =
        store_prep(store_reader(s), sql,
                   STORE_ARGS(STORE_I(tenant_id), STORE_I(w.lo0), STORE_I(w.hi0), STORE_I(w.lo1),
                              STORE_I(w.hi1), STORE_I(w.d0), STORE_I(w.d1)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK) {
        out->entries = store_col_int64(st, 0);
        out->worker_seconds = store_col_int64(st, 1);
        out->gpu_seconds = store_col_int64(st, 2);
        out->amount = store_col_int64(st, 3);
        store_col_copy(st, 4, out->currency, sizeof out->currency);
    }
    store_reset(st);
    return rc;
}

store_rc store_money_metrics(store *s,
                        void (*running)(void *arg, const char *tenant, int64_t workers),
                        void (*spent)(void *arg, const char *tenant, const char *currency,
                                      int64_t amount),
                        void *arg)
{
    /* Running workers through their state's index; charges as the ledger's
     * trigger keeps them in accounts (the ledger itself only grows). */
    static const char run_sql[] =
        "SELECT t.name, count(*) FROM workers w JOIN jobs j ON j.id = w.job_id"
        " JOIN tenants t ON t.id = j.tenant_id WHERE w.state = 'running' GROUP BY t.name";
    static const char spent_sql[] =
        "SELECT t.name, a.currency, a.charged FROM accounts a"
        " JOIN tenants t ON t.id = a.tenant_id WHERE a.charged > 0 ORDER BY t.name";
    store_st *st = store_read_stmt(s, run_sql);
    if (!st)
        return STORE_EIO;
    int rc;
    char name[64], cur[4];
    while ((rc = store_step(st)) == STORE_ROW) {
        store_col_copy(st, 0, name, sizeof name);
        running(arg, name, store_col_int64(st, 1));
    }
    store_reset(st);
    if (rc != STORE_DONE)
        return rc;
    if (!(st = store_read_stmt(s, spent_sql)))
        return STORE_EIO;
    while ((rc = store_step(st)) == STORE_ROW) {
        store_col_copy(st, 0, name, sizeof name);
        store_col_copy(st, 1, cur, sizeof cur);
        spent(arg, name, cur, store_col_int64(st, 2));
    }
    store_reset(st);
    return rc == STORE_DONE ? STORE_OK : rc;
}

store_rc store_tenant_use(store *s, int64_t tenant_id, store_use *out)
{
    static const char sql[] =
        "SELECT count(*), coalesce(sum(worker_count), 0), coalesce(sum(worker_count * cpus), 0),"
        " coalesce(sum(worker_count * gpus), 0) FROM jobs"
        " WHERE tenant_id = ?1 AND state IN ('STARTING', 'RUNNING')";
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(tenant_id)));
    if (!st)
        return STORE_EIO;
    int rc = store_step_row(st);
    if (rc == STORE_OK) {
        out->jobs = store_col_int64(st, 0);
        out->workers = store_col_int64(st, 1);
        out->cpus = store_col_int64(st, 2);
        out->gpus = store_col_int64(st, 3);
    }
    store_reset(st);
    return rc;
}
