/*
 * store_bill: money.  The billing rules (how a rank's run becomes seconds
 * and an amount), the append-only ledger of credits and per-rank charges,
 * tenants' accounts (balance and budget settings) and the holds the
 * scheduler takes on the attempts it admits.
 *
 * Rules, in one place:
 *   - a rank is billed from its reported start to its reported end (server
 *     clock), in whole seconds rounded up, at most max_runtime_seconds of
 *     its job when that is set (the platform's lateness in stopping a job
 *     is not the tenant's), but a rank killed with SIGKILL (it ignored the
 *     SIGTERM of its stop) pays its stop grace too, up to STORE_BILL_GRACE_S;
 *   - amount = seconds x price per worker-hour / 3600, rounded half up to
 *     the minor unit, per rank and attempt;
 *   - a job's estimated maximum is workers x the amount of one rank running
 *     max_runtime_seconds, so the charges of an attempt never exceed it
 *     unless a rank ignores SIGTERM.
 */
#ifndef COHORT_STORE_BILL_H
#define COHORT_STORE_BILL_H

#include <stdint.h>

#include "storage/store.h"
#include "lib/util.h"

#define STORE_NOTE_MAX 200
#define STORE_MONEY_MAX 1000000000000000LL /* 10^15 minor units: no sum overflows */

/* The stop grace billed past max_runtime_seconds: a job stopped at its
 * limit that ignores SIGTERM runs until its agent's SIGKILL, and pays for
 * it (agents refuse a --stop-grace longer than this). */
#define STORE_BILL_GRACE_S 300
int64_t store_bill_seconds(int64_t start_ms, int64_t end_ms, int64_t cap_s);
int64_t store_bill_amount(int64_t seconds, int64_t price_per_hour);
/* workers x store_bill_amount(seconds, price); -1 when it passes STORE_MONEY_MAX. */
int64_t store_bill_estimate(int64_t price_per_hour, int64_t workers, int64_t seconds);

typedef struct store_account {
    int64_t tenant_id;
    char currency[4];
    int64_t balance;     /* credits minus charges */
    int enforce;         /* prepaid: jobs are admitted only against the balance */
    int64_t monthly_cap; /* -1: none */
} store_account;

/* The tenant's account; a tenant without one reads as USD, 0, not enforced, no cap. */
store_rc store_account_get(store *s, int64_t tenant_id, store_account *out);
store_rc store_account_get_tx(store_tx *tx, int64_t tenant_id, store_account *out);
/* Sets currency, enforce and monthly_cap (never the balance).  STORE_CONFLICT
 * when the currency would change after ledger entries exist. */
store_rc store_account_set(store_tx *tx, const store_account *a);

/* Adds a credit (amount > 0) in the account's currency; *id gets the entry. */
store_rc store_credit_add(store_tx *tx, int64_t tenant_id, int64_t amount, const char *note,
                     int64_t user_id, int64_t now_ms, int64_t *id);

/* Writes the charge of a worker that started and has ended, once: calling it
 * again for the same rank changes nothing.  A worker that never started, or
 * has not ended, is not charged. */
store_rc store_charge_worker(store_tx *tx, int64_t worker_id);

/* Holds amount for an admitted attempt. */
store_rc store_hold_put(store_tx *tx, int64_t job_id, int64_t attempt, int64_t tenant_id,
                   int64_t amount, int bounded, int64_t now_ms);
/* Drops the holds of attempts that are over: no worker alive and the job
 * no longer starting or running in that attempt. */
store_rc store_hold_release_idle(store_tx *tx);

/* What a tenant's money is doing now. */
typedef struct store_money {
    store_account acct;
    int has_account;
    int64_t held;           /* sum of the holds of admitted attempts */
    int64_t reserved;       /* per attempt max(hold, accrued) - charged: set aside */
    int64_t live;           /* cost so far of ranks still running (not yet charged) */
    int64_t spent_month;    /* charges since the start of the month (UTC) */
    int64_t unbounded_rate; /* per hour: admitted attempts without max_runtime_seconds */
} store_money;

/* The tenant's money at now_ms; unbounded(arg, job_id), when not NULL, is
 * called for each job whose admitted attempt has no max_runtime_seconds. */
store_rc store_money_tx(store_tx *tx, int64_t tenant_id, int64_t now_ms, store_money *out,
                   void (*unbounded)(void *arg, int64_t job_id), void *arg);
/* Appends to ids every tenant whose account enforces a balance or has a
 * monthly cap, in id order. */
store_rc store_budget_tenants_tx(store_tx *tx, util_i64s *ids);

/* One ledger entry. */
typedef struct store_entry {
    int64_t id, tenant_id, at, amount;
    char kind[8];
    char currency[4];
    int64_t job_id, attempt, rank, user_id, gpus; /* charges; 0 for credits */
    int64_t started_at, finished_at, seconds, price_per_hour;
    char job_name[201];
    char worker_spec[64];
    char note[STORE_NOTE_MAX + 1];
} store_entry;

/* Entries of one kind ("credit" or "charge") of a tenant written in
 * [from, to), oldest first. */
store_rc store_ledger_list(store *s, int64_t tenant_id, int64_t from, int64_t to, const char *kind,
                      void (*row)(void *arg, const store_entry *e), void *arg);

/* A rank of a job, with its charge when it has one. */
typedef struct store_rank_cost {
    int64_t attempt, rank;
    char state[12];
    int64_t started_at, finished_at; /* 0: not yet */
    int charged;                     /* a ledger entry exists */
    int64_t seconds, amount;         /* the entry's, or the cost so far */
} store_rank_cost;

/* Every rank of every attempt of a job (attempt, rank order); running ranks
 * are priced at now_ms with the job's price and cap. */
store_rc store_job_cost(store *s, int64_t job_id, int64_t now_ms,
                   void (*row)(void *arg, const store_rank_cost *c), void *arg);

/* Charges of a tenant in [from, to) grouped by group ("day", "job", "user"
 * or "worker_spec"): key is the group's id (day: days since the epoch; 0 for
 * worker_spec), name its name ("" for day).  In key order (worker_spec: by
 * name), from the first key past after, at most limit groups (0: all);
 * worker_spec groups are few (the platform's specs) and come whole.  Read
 * from the running totals the ledger's trigger keeps (per day; per job and
 * month), with only the charges of the window's partial days (by job: of
 * its month outside it) read one by one. */
typedef struct store_usage {
    int64_t key;
    char name[201];
    int64_t entries, worker_seconds, gpu_seconds, amount;
    char currency[4];
} store_usage;
store_rc store_usage_group(store *s, int64_t tenant_id, int64_t from, int64_t to, const char *group,
                      int64_t after, int limit, void (*row)(void *arg, const store_usage *u),
                      void *arg);
/* The same charges all summed into out (key 0, name ""; currency "" when
 * there are none). */
store_rc store_usage_total(store *s, int64_t tenant_id, int64_t from, int64_t to, store_usage *out);

/* Per tenant (by name): running workers, and charges since ever (for /metrics). */
store_rc store_money_metrics(store *s,
                        void (*running)(void *arg, const char *tenant, int64_t workers),
                        void (*spent)(void *arg, const char *tenant, const char *currency,
                                      int64_t amount),
                        void *arg);

/* The tenant's jobs and workers now starting or running (for GET /v1/quota). */
typedef struct store_use {
    int64_t jobs, workers, cpus, gpus;
} store_use;
store_rc store_tenant_use(store *s, int64_t tenant_id, store_use *out);

#endif
