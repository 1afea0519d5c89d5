/*
 * sched_service: the scheduling thread and its passes.  A pass reads a
 * snapshot of the cluster from the store, has sched_plan decide, and
 * commits the placements, each checked again against the state of now.
 */
#include "scheduler/sched_service.h"
#include "lib/fmt.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scheduler/sched_life.h"
#include "scheduler/sched_plan.h"
#include "storage/store_bill.h"
#include "storage/store_job.h"
#include "storage/store_node.h"
#include "lib/util.h"

/* Bounds on the rest between passes (see sched_main). */
#define SCHED_REST_MAX_US 50000
#define SCHED_REST_MIN_US 2000
/* Nodes 1 .. VER_PAGES * VER_PAGE - 1 have versions of their own; a bump
 * of any other wakes every node. */
#define VER_PAGE 4096
#define VER_PAGES 256

struct sched_service {
    store *st;
    sched_config cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int woken, stopping;
    /* Each pending job's place in the queue and why it waits, as of the
     * last pass: in memory, as it changes with every pass and is no part
     * of the job's history.  Sorted by job_id. */
    sched_wait *pos;
    size_t npos;
    int no_nodes;         /* no node is up and undrained: nothing was planned */
    int64_t last_tick;    /* monotonic ms of the last tick write */
    /* Desired-state versions: each node's is the later of the epoch (the
     * last bump of every node) and its own slot; both take the next value
     * of counter.  Pages of slots are allocated on a node's first bump. */
    uint64_t counter, epoch;  /* atomic */
    uint64_t *ver[VER_PAGES]; /* pointers atomic; allocated under ver_lock */
    pthread_mutex_t ver_lock;
    void (*notify)(void *arg);
    void *notify_arg;
    int leads;            /* this cohortd ran the last pass (store_lead); atomic */
    int64_t lead_since;   /* monotonic ms this cohortd took the lead; 0: not leading */
    /* The registered nodes' capacities for sched_could_fit, read at most
     * once per FIT_CACHE_MS (a submit would read every node otherwise). */
    pthread_mutex_t fit_lock;
    sched_node *fit_nodes;
    size_t fit_n;
    int64_t fit_at;       /* monotonic ms of the read; 0: none */
    sched_stats stats;    /* under lock */
};

#define FIT_CACHE_MS 1000

/* One pass: the snapshot read from the store, and what the plan decided. */
struct pass {
    sched_service *svc;
    int64_t now;
    sched_node *nodes;
    size_t nnodes, capn;
    sched_active *act;
    size_t nact, capa;
    sched_alloc *al;
    size_t nal, capal;
    sched_pending *pend;
    size_t npend, cappend;
    sched_usage *use;
    size_t nuse, capu;
    sched_quota *quota;
    size_t nquota, capq;
    sched_budget *bud;
    size_t nbud, capbud;
    sched_decisions dec;
    int oom;
};

static void pass_free(struct pass *p)
{
    free(p->nodes);
    free(p->act);
    free(p->al);
    free(p->pend);
    free(p->use);
    free(p->quota);
    free(p->bud);
    sched_decisions_free(&p->dec);
}

static void add_node(void *arg, const store_node *n)
{
    struct pass *p = arg;
    sched_node sn = {n->id,
                     !strcmp(n->state, "up") && !n->drained,
                     n->cpus,
                     n->memory_mb,
                     n->gpus,
                     n->cpus - n->used_cpus,
                     n->memory_mb - n->used_memory_mb,
                     n->gpus - n->used_gpus,
                     !strcmp(n->network, "job")};
    UTIL_PUSH(p->nodes, p->nnodes, p->capn, sn, &p->oom);
}

static void add_alloc(void *arg, int64_t job_id, int64_t node_id, int64_t workers)
{
    struct pass *p = arg;
    sched_alloc a = {job_id, node_id, workers};
    UTIL_PUSH(p->al, p->nal, p->capal, a, &p->oom);
}

static void add_active(void *arg, const store_job_brief *b)
{
    struct pass *p = arg;
    int64_t end = INT64_MAX;
    if (b->max_runtime_seconds > 0)
        end = (b->started_at > 0 ? b->started_at : p->now) + b->max_runtime_seconds * 1000;
    sched_active a = {b->id,  b->tenant_id,  end, b->worker_count,
                      b->cpus, b->memory_mb, b->gpus};
    UTIL_PUSH(p->act, p->nact, p->capa, a, &p->oom);
}

int64_t sched_hold(const sched_config *cfg, int64_t price_per_hour, int64_t workers,
                   int64_t max_runtime_s)
{
    int64_t secs = max_runtime_s > 0 ? max_runtime_s : cfg->min_hold_s;
    return store_bill_estimate(price_per_hour, workers, secs);
}

/* What must be left for a job to be admitted: its hold, and for a job
 * without a bound also the grace period's price (else it would be stopped
 * at once). */
static int64_t hold_need(const sched_config *cfg, int64_t hold, int64_t price, int64_t workers,
                         int64_t max_runtime_s)
{
    if (hold < 0 || max_runtime_s > 0)
        return hold;
    int64_t grace = store_bill_estimate(price, workers, cfg->budget_grace_s);
    return grace < 0 ? -1 : hold + grace;
}

static void add_pending(void *arg, const store_job_brief *b)
{
    struct pass *p = arg;
    const sched_config *cfg = &p->svc->cfg;
    sched_pending t = {{b->id, b->tenant_id, b->priority, 0.0, b->created_at, b->worker_count,
                        b->workers_per_node, b->cpus, b->memory_mb, b->gpus, 0},
                       b->attempt,
                       b->price_per_hour,
                       b->max_runtime_seconds > 0 ? b->max_runtime_seconds : 0,
                       0,
                       0,
                       -1,
                       ""};
    t.hold = sched_hold(cfg, b->price_per_hour, b->worker_count, b->max_runtime_seconds);
    t.need = hold_need(cfg, t.hold, b->price_per_hour, b->worker_count, b->max_runtime_seconds);
    if (b->max_runtime_seconds > 0)
        t.estimated_max =
            store_bill_estimate(b->price_per_hour, b->worker_count, b->max_runtime_seconds);
    fmt_cut(t.currency, sizeof t.currency, "%s", b->currency);
    UTIL_PUSH(p->pend, p->npend, p->cappend, t, &p->oom);
}

/* Sums a tenant's decayed use over its workers' rows. */
static void add_usage(void *arg, int64_t tenant, int64_t cpus, int64_t gpus, int64_t start,
                      int64_t end)
{
    struct pass *p = arg;
    double d = sched_decayed_use(cpus, gpus, start, end ? end : p->now, p->now);
    for (size_t i = 0; i < p->nuse; i++)
        if (p->use[i].tenant_id == tenant) {
            p->use[i].decayed += d;
            return;
        }
    sched_usage u = {tenant, d};
    UTIL_PUSH(p->use, p->nuse, p->capu, u, &p->oom);
}

static void add_quota(void *arg, const store_quota *q)
{
    struct pass *p = arg;
    sched_quota sq = {q->tenant_id, q->max_running_jobs, q->max_workers, q->max_cpus,
                      q->max_gpus};
    UTIL_PUSH(p->quota, p->nquota, p->capq, sq, &p->oom);
}

/* How much of the tenant's money is left to hold, from its account now. */
static int64_t money_left(const store_money *m)
{
    int64_t left = INT64_MAX;
    if (m->acct.enforce)
        left = m->acct.balance - m->reserved;
    if (m->acct.monthly_cap >= 0 && m->acct.monthly_cap - m->spent_month - m->reserved < left)
        left = m->acct.monthly_cap - m->spent_month - m->reserved;
    return left;
}

static int read_budgets(store_tx *tx, struct pass *p)
{
    util_i64s ids = {0};
    int rc = store_budget_tenants_tx(tx, &ids);
    for (size_t i = 0; rc == STORE_OK && !p->oom && i < ids.n; i++) {
        store_money m;
        rc = store_money_tx(tx, ids.v[i], p->now, &m, NULL, NULL);
        if (rc != STORE_OK)
            break;
        sched_budget b = {ids.v[i], money_left(&m), m.acct.balance, m.reserved, ""};
        fmt_cut(b.currency, sizeof b.currency, "%s", m.acct.currency);
        UTIL_PUSH(p->bud, p->nbud, p->capbud, b, &p->oom);
    }
    free(ids.v);
    return rc == STORE_OK && p->oom ? STORE_NOMEM : rc;
}

/* The lowest free port of the node's range into *port; STORE_CONFLICT when
 * every one is held. */
static int free_port(store_tx *tx, const store_node *n, int64_t *port)
{
    int rc = store_port_lowest_free(tx, n->id, n->port_lo, n->port_hi, port);
    return rc == STORE_OK && *port < 0 ? STORE_CONFLICT : rc;
}

/*
 * Writes one placement: workers node-major, the port, STARTING.  Checked
 * against the state of now first: the job still pending in that attempt,
 * every node up, undrained and with room.  STORE_CONFLICT when not.
 */
/*
 * What the plan saw, checked again as of this write: the tenant's money
 * (two passes never hold the same money) and each node's state and room.
 * Rank 0's node into *master.  STORE_OK, STORE_CONFLICT when it no longer
 * fits, or the store's error.
 */
static int placement_still_fits(store_tx *tx, const sched_placement *pl, store_node *master)
{
    store_account acct;
    int rc = store_account_get_tx(tx, pl->tenant_id, &acct);
    if (rc != STORE_OK)
        return rc;
    if (acct.enforce || acct.monthly_cap >= 0) {
        store_money m;
        rc = store_money_tx(tx, pl->tenant_id, util_now_ms(), &m, NULL, NULL);
        if (rc != STORE_OK)
            return rc;
        if (pl->need < 0 || pl->need > money_left(&m))
            return STORE_CONFLICT;
    }
    for (int64_t r = 0; r < pl->workers / pl->per_node; r++) {
        store_node n;
        if (store_node_get_tx(tx, pl->nodes[r], &n) != STORE_OK || strcmp(n.state, "up") ||
            n.drained || n.cpus - n.used_cpus < pl->per_node * pl->cpus ||
            n.memory_mb - n.used_memory_mb < pl->per_node * pl->mem ||
            n.gpus - n.used_gpus < pl->per_node * pl->gpus)
            return STORE_CONFLICT;
        if (r == 0)
            *master = n;
    }
    return STORE_OK;
}

static int commit_placement(store_tx *tx, const sched_placement *pl)
{
    int64_t m = pl->workers / pl->per_node;
    store_node master;
    store_job j;
    int rc = store_job_get_tx(tx, 0, pl->job_id, &j);
    if (rc != STORE_OK)
        return rc;
    int ok = j.state == JOB_PENDING && j.attempt == pl->attempt;
    /* TensorFlow lists every worker at host:port: each rank gets a port of
     * its own node; other frameworks meet at rank 0's port alone. */
    int port_per_rank = !strcmp(j.framework, "tensorflow");
    store_job_clear(&j);
    if (!ok)
        return STORE_CONFLICT;
    rc = placement_still_fits(tx, pl, &master);
    if (rc != STORE_OK)
        return rc;
    int64_t port;
    rc = free_port(tx, &master, &port);
    if (rc != STORE_OK)
        return rc;
    rc = store_port_reserve(tx, master.id, port, pl->job_id, pl->attempt, 0);
    for (int64_t r = 0; rc == STORE_OK && r < m; r++) {
        store_node n = master;
        if (port_per_rank && r > 0 && store_node_get_tx(tx, pl->nodes[r], &n) != STORE_OK)
            return STORE_CONFLICT;
        for (int64_t l = 0; rc == STORE_OK && l < pl->per_node; l++) {
            int64_t rank = r * pl->per_node + l;
            if (port_per_rank && rank > 0) {
                int64_t p;
                rc = free_port(tx, &n, &p);
                if (rc == STORE_OK)
                    rc = store_port_reserve(tx, n.id, p, pl->job_id, pl->attempt, rank);
                if (rc != STORE_OK)
                    break;
            }
            store_worker w = {.job_id = pl->job_id, .attempt = pl->attempt, .rank = rank,
                              .node_rank = r, .local_rank = l, .node_id = pl->nodes[r]};
            rc = store_worker_insert(tx, &w);
        }
    }
    if (rc == STORE_OK)
        rc = store_job_place(tx, pl->job_id, master.id, port, pl->per_node);
    if (rc == STORE_OK)
        rc = store_job_admit(tx, pl->job_id, pl->price, pl->estimated_max, util_now_ms());
    if (rc == STORE_OK)
        /* A hold past the money range only where no budget applies (with
         * one, need < 0 waits): held as the most there is. */
        rc = store_hold_put(tx, pl->job_id, pl->attempt, pl->tenant_id,
                            pl->hold < 0 ? STORE_MONEY_MAX : pl->hold, pl->bounded, util_now_ms());
    char why[128];
    fmt_cut(why, sizeof why, "placed: %lld x %lld workers, rank 0 on %s", (long long)m,
             (long long)pl->per_node, master.name);
    if (rc == STORE_OK)
        rc = store_job_transition(tx, pl->job_id, JOB_PENDING, JOB_STARTING, why);
    return rc;
}

/* The write of a pass: every placement, each all or nothing. */
static store_rc commit_all(store_tx *tx, void *arg)
{
    struct pass *p = arg;
    for (size_t i = 0; i < p->dec.nplaced; i++) {
        if (store_tx_mark(tx) != STORE_OK)
            return STORE_EIO;
        if (commit_placement(tx, &p->dec.placed[i]) == STORE_OK)
            store_tx_keep(tx);
        else
            store_tx_undo(tx); /* the next pass looks again */
    }
    return STORE_OK;
}

/* Reads a pass's snapshot and plans on it.  Writes nothing. */
static int plan(store_tx *tx, struct pass *p)
{
    int rc = store_node_all_tx(tx, add_node, p);
    if (rc == STORE_OK)
        rc = store_job_briefs_tx(tx, JOB_STARTING, add_active, p);
    if (rc == STORE_OK)
        rc = store_job_briefs_tx(tx, JOB_RUNNING, add_active, p);
    if (rc == STORE_OK)
        rc = store_job_briefs_tx(tx, JOB_PENDING, add_pending, p);
    if (rc == STORE_OK)
        rc = store_quota_all_tx(tx, add_quota, p);
    if (rc == STORE_OK)
        rc = store_alloc_tx(tx, add_alloc, p);
    /* Uses older than 24 half-lives weigh under 1e-7: left out. */
    if (rc == STORE_OK)
        rc = store_usage_tx(tx, p->now - 24LL * SCHED_HALF_LIFE_MS, add_usage, p);
    if (rc == STORE_OK)
        rc = read_budgets(tx, p);
    if (rc != STORE_OK || p->oom)
        return rc != STORE_OK ? rc : STORE_NOMEM;
    sched_snapshot snap = {p->now,  p->nodes, p->nnodes, p->act,   p->nact,
                           p->al,   p->nal,   p->pend,   p->npend, p->use,
                           p->nuse, p->quota, p->nquota, p->bud,   p->nbud};
    return sched_plan(&snap, &p->dec) == 0 ? STORE_OK : STORE_NOMEM;
}

struct tick {
    int64_t now, node_timeout_ms; /* node_timeout_ms 0: judge no node yet */
    const sched_config *cfg;
    store_tx *tx;
};

static void job_lost(void *arg, int64_t job_id)
{
    struct tick *t = arg;
    sched_job_eval(t->tx, job_id);
}

static void node_down(void *arg, int64_t node_id)
{
    struct tick *t = arg;
    store_worker_lose_node(t->tx, node_id, t->now, "node down", job_lost, t);
}

/* The running jobs past their max_runtime_seconds, all of them. */
struct timeout_scan {
    int64_t now;
    util_i64s ids, limits;
    int oom;
};

static void find_timeouts(void *arg, const store_job_brief *b)
{
    struct timeout_scan *s = arg;
    if (b->max_runtime_seconds > 0 && b->started_at > 0 &&
        s->now - b->started_at > b->max_runtime_seconds * 1000 &&
        (util_i64s_push(&s->ids, b->id) != 0 ||
         util_i64s_push(&s->limits, b->max_runtime_seconds) != 0))
        s->oom = 1;
}

struct unbounded {
    util_i64s ids;
    int oom;
};

static void add_unbounded(void *arg, int64_t job_id)
{
    struct unbounded *u = arg;
    if (util_i64s_push(&u->ids, job_id) != 0)
        u->oom = 1;
}

/*
 * Jobs without max_runtime_seconds run on their tenant's money until it
 * would run out: when what is left would pay for less than the grace
 * period of them, every such job of the tenant is stopped (SIGTERM first,
 * by its agent, so it can checkpoint) and ends FAILED with budget_exhausted.
 */
static int stop_exhausted(struct tick *t)
{
    util_i64s ids = {0};
    int rc = store_budget_tenants_tx(t->tx, &ids);
    for (size_t i = 0; rc == STORE_OK && i < ids.n; i++) {
        store_money m;
        struct unbounded u = {{0}, 0};
        rc = store_money_tx(t->tx, ids.v[i], t->now, &m, add_unbounded, &u);
        if (rc == STORE_OK && u.oom)
            rc = STORE_NOMEM;
        int64_t left = money_left(&m);
        int64_t need = store_bill_amount(t->cfg->budget_grace_s, m.unbounded_rate);
        if (rc != STORE_OK || u.ids.n == 0 || left > need) {
            free(u.ids.v);
            continue;
        }
        char why[256];
        fmt_cut(why, sizeof why,
                 "budget_exhausted: %lld %s left to spend (balance %lld) would not pay for "
                 "%lld s more of the tenant's jobs without max_runtime_seconds",
                 (long long)(left > 0 ? left : 0), m.acct.currency, (long long)m.acct.balance,
                 (long long)t->cfg->budget_grace_s);
        for (size_t k = 0; rc == STORE_OK && k < u.ids.n; k++) {
            int r = sched_job_end(t->tx, 0, u.ids.v[k], JOB_FAILED, why);
            if (r != STORE_OK && r != STORE_JOB_FINAL)
                rc = r;
        }
        free(u.ids.v);
    }
    free(ids.v);
    return rc;
}

static store_rc tick(store_tx *tx, void *arg)
{
    struct tick *t = arg;
    t->tx = tx;
    int rc = store_port_release_idle(tx);
    if (rc == STORE_OK)
        rc = store_hold_release_idle(tx);
    if (rc == STORE_OK)
        rc = stop_exhausted(t);
    if (rc == STORE_OK && t->node_timeout_ms > 0)
        rc = store_node_mark_down(tx, t->now - t->node_timeout_ms, node_down, t);
    struct timeout_scan s = {.now = t->now};
    if (rc == STORE_OK)
        rc = store_job_briefs_tx(tx, JOB_RUNNING, find_timeouts, &s);
    if (rc == STORE_OK && s.oom)
        rc = STORE_NOMEM;
    for (size_t i = 0; rc == STORE_OK && i < s.ids.n; i++) {
        char why[128];
        fmt_cut(why, sizeof why, "timeout: ran longer than max_runtime_seconds (%lld)",
                 (long long)s.limits.v[i]);
        int r = sched_job_end(tx, 0, s.ids.v[i], JOB_FAILED, why);
        if (r != STORE_OK && r != STORE_JOB_FINAL)
            rc = r;
    }
    free(s.ids.v);
    free(s.limits.v);
    return rc;
}

static int pos_cmp(const void *a, const void *b)
{
    const sched_wait *x = a, *y = b;
    return (x->job_id > y->job_id) - (x->job_id < y->job_id);
}

static void count_usable(void *arg, const store_node *n)
{
    *(int *)arg += !strcmp(n->state, "up") && !n->drained;
}

static void run_pass(sched_service *s)
{
    /* Of several cohortd on one database only the leader ticks and places;
     * the others try to take the lead at every tick.  (Correctness does not
     * rest on it: every placement is checked again inside its write.)  A
     * follower still plans, on a snapshot, and writes nothing: its API then
     * gives pending jobs queue positions and reasons as the leader's does. */
    int lead = store_lead(s->st);
    __atomic_store_n(&s->leads, lead, __ATOMIC_RELEASE);
    /* Timeouts and silent nodes are looked for once per tick, not on every wake. */
    int rc = STORE_OK;
    int64_t mono = util_mono_us() / 1000;
    if (!lead)
        s->lead_since = 0;
    else if (!s->lead_since)
        s->lead_since = mono;
    if (lead && mono - s->last_tick >= s->cfg.tick_ms) {
        /* A node is judged by the heartbeats this cohortd has been here to
         * receive: none is down before --node-timeout has passed since it
         * took the lead, however long the restart (or failover) before. */
        int judge = mono - s->lead_since >= s->cfg.node_timeout_ms;
        struct tick t = {util_now_ms(), judge ? s->cfg.node_timeout_ms : 0, &s->cfg, NULL};
        rc = store_write(s->st, tick, &t);
        if (rc != STORE_OK && rc != STORE_BUSY)
            fprintf(stderr, "scheduler: tick failed (%s)\n", store_rc_name(rc));
        s->last_tick = mono;
    }
    struct pass p = {.svc = s, .now = util_now_ms()};
    int64_t t0 = util_mono_us();
    /* Planned on a snapshot outside the writer; only placements are written.
     * Without a usable node nothing can be placed: no plan at all, however
     * long the queue. */
    store_read_begin(s->st);
    store_tx *rtx = store_read_tx(s->st);
    int usable = 0;
    rc = rtx ? store_node_all_tx(rtx, count_usable, &usable) : STORE_EIO;
    if (rc == STORE_OK && usable)
        rc = plan(rtx, &p);
    store_read_end(s->st);
    pthread_mutex_lock(&s->lock);
    s->no_nodes = rc == STORE_OK && !usable;
    pthread_mutex_unlock(&s->lock);
    if (lead && rc == STORE_OK && p.dec.nplaced > 0) {
        /* A placement that no longer held is planned again at the next
         * pass; the nodes of those that did are told by the store. */
        rc = store_write(s->st, commit_all, &p);
    }
    if (rc != STORE_OK && rc != STORE_BUSY)
        fprintf(stderr, "scheduler: pass failed (%s)\n", store_rc_name(rc));
    if (lead && usable) {
        int64_t us = util_mono_us() - t0;
        pthread_mutex_lock(&s->lock);
        s->stats.passes++;
        s->stats.sum_us += (uint64_t)us;
        s->stats.last_us = us;
        if (us > s->stats.max_us)
            s->stats.max_us = us;
        s->stats.last_pending = (int64_t)p.npend;
        pthread_mutex_unlock(&s->lock);
    }
    if (rc == STORE_OK) {
        if (p.dec.nwaits > 1)
            qsort(p.dec.waits, p.dec.nwaits, sizeof *p.dec.waits, pos_cmp);
        pthread_mutex_lock(&s->lock);
        free(s->pos);
        s->pos = p.dec.waits; /* the service owns them from here */
        s->npos = p.dec.nwaits;
        pthread_mutex_unlock(&s->lock);
        p.dec.waits = NULL;
        p.dec.nwaits = 0;
    }
    pass_free(&p);
}

static void *sched_main(void *arg)
{
    sched_service *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        if (!s->woken) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += s->cfg.tick_ms / 1000;
            ts.tv_nsec += (s->cfg.tick_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->wake, &s->lock, &ts);
        }
        if (s->stopping)
            break;
        s->woken = 0;
        pthread_mutex_unlock(&s->lock);
        int64_t t0 = util_mono_us();
        run_pass(s);
        /* Rest as long as the pass took: under a flood of submits the
         * scheduler takes at most about half a core from the requests, and
         * a short queue keeps its passes, and so its latency, short. */
        int64_t took = util_mono_us() - t0;
        if (took > SCHED_REST_MAX_US)
            took = SCHED_REST_MAX_US; /* bounds what a submit may wait */
        if (took < SCHED_REST_MIN_US)
            took = SCHED_REST_MIN_US; /* a flood of wakes makes one pass per rest */
        {
            struct timespec rest = {took / 1000000, (took % 1000000) * 1000};
            nanosleep(&rest, NULL);
        }
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

sched_service *sched_start(store *st, const sched_config *cfg, char *err, size_t errlen)
{
    sched_service *s = calloc(1, sizeof *s);
    if (!s) {
        fmt_cut(err, errlen, "out of memory");
        return NULL;
    }
    s->st = st;
    s->cfg = *cfg;
    if (s->cfg.tick_ms <= 0)
        s->cfg.tick_ms = 1000;
    if (s->cfg.min_hold_s <= 0)
        s->cfg.min_hold_s = SCHED_MIN_HOLD_S;
    if (s->cfg.budget_grace_s <= 0)
        s->cfg.budget_grace_s = SCHED_BUDGET_GRACE_S;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->fit_lock, NULL);
    pthread_mutex_init(&s->ver_lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->woken = 1; /* a first pass at once */
    s->counter = s->epoch = (uint64_t)util_now_ms(); /* never below a previous run's */
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        fmt_cut(err, errlen, "cannot start the scheduler thread");
        pthread_mutex_destroy(&s->lock);
        pthread_mutex_destroy(&s->fit_lock);
        pthread_mutex_destroy(&s->ver_lock);
        pthread_cond_destroy(&s->wake);
        free(s);
        return NULL;
    }
    return s;
}

static void wake_local(sched_service *s)
{
    pthread_mutex_lock(&s->lock);
    s->woken = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

void sched_stop(sched_service *s)
{
    if (!s)
        return;
    util_thread_stop(&s->lock, &s->wake, &s->stopping, s->thread);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->fit_lock);
    pthread_mutex_destroy(&s->ver_lock);
    pthread_cond_destroy(&s->wake);
    for (int i = 0; i < VER_PAGES; i++)
        free(s->ver[i]);
    free(s->fit_nodes);
    free(s->pos);
    free(s);
}

void sched_stats_get(sched_service *s, sched_stats *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->stats;
    pthread_mutex_unlock(&s->lock);
}

uint64_t sched_version(sched_service *s, int64_t node_id)
{
    if (!s)
        return 0;
    uint64_t v = __atomic_load_n(&s->epoch, __ATOMIC_ACQUIRE);
    if (node_id > 0 && node_id < (int64_t)VER_PAGES * VER_PAGE) {
        uint64_t *page = __atomic_load_n(&s->ver[node_id / VER_PAGE], __ATOMIC_ACQUIRE);
        uint64_t own = page ? __atomic_load_n(&page[node_id % VER_PAGE], __ATOMIC_ACQUIRE) : 0;
        if (own > v)
            v = own;
    }
    return v;
}

/* Gives node_id a version of its own; 0 when it cannot (out of range, or
 * memory ran out), and the caller bumps every node instead. */
static int bump_one(sched_service *s, int64_t node_id)
{
    if (node_id <= 0 || node_id >= (int64_t)VER_PAGES * VER_PAGE)
        return 0;
    uint64_t **pp = &s->ver[node_id / VER_PAGE];
    uint64_t *page = __atomic_load_n(pp, __ATOMIC_ACQUIRE);
    if (!page) {
        pthread_mutex_lock(&s->ver_lock);
        if (!(page = *pp) && (page = calloc(VER_PAGE, sizeof *page)))
            __atomic_store_n(pp, page, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&s->ver_lock);
        if (!page)
            return 0;
    }
    uint64_t v = __atomic_add_fetch(&s->counter, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&page[node_id % VER_PAGE], v, __ATOMIC_RELEASE);
    return 1;
}

/* Bumps the nodes named (ids NULL: every node) and wakes their long polls. */
static void bump_local(sched_service *s, const int64_t *ids, size_t n)
{
    int all = !ids;
    for (size_t i = 0; !all && i < n; i++)
        all = !bump_one(s, ids[i]);
    if (all)
        __atomic_store_n(&s->epoch, __atomic_add_fetch(&s->counter, 1, __ATOMIC_ACQ_REL),
                         __ATOMIC_RELEASE);
    /* Under the lock: once sched_on_bump(NULL) returns, no call is running. */
    pthread_mutex_lock(&s->lock);
    if (s->notify)
        s->notify(s->notify_arg);
    pthread_mutex_unlock(&s->lock);
}

void sched_nodes_changed(sched_service *s, const int64_t *ids, size_t n)
{
    if (s)
        bump_local(s, ids, n);
}

void sched_wake(sched_service *s)
{
    if (!s)
        return;
    wake_local(s);
    /* The pass runs where the lead is. */
    if (store_shared(s->st) && !__atomic_load_n(&s->leads, __ATOMIC_ACQUIRE))
        store_signal(s->st, "wake");
}

void sched_signal(sched_service *s, const char *what)
{
    if (!s)
        return;
    if (!what || !strcmp(what, "bump"))
        bump_local(s, NULL, 0);
    if (!what || !strcmp(what, "wake"))
        wake_local(s);
}

void sched_on_bump(sched_service *s, void (*notify)(void *arg), void *arg)
{
    pthread_mutex_lock(&s->lock);
    s->notify_arg = arg;
    s->notify = notify;
    pthread_mutex_unlock(&s->lock);
}

int64_t sched_position(sched_service *s, int64_t job_id, char *reason, size_t n)
{
    if (reason && n)
        reason[0] = '\0';
    if (!s)
        return 0;
    sched_wait key = {.job_id = job_id};
    pthread_mutex_lock(&s->lock);
    sched_wait *hit =
        s->npos && !s->no_nodes ? bsearch(&key, s->pos, s->npos, sizeof key, pos_cmp) : NULL;
    int64_t pos = hit ? hit->pos : 0;
    if (hit && reason && n)
        fmt_cut(reason, n, "%s", hit->reason);
    else if (s->no_nodes && reason && n)
        fmt_cut(reason, n, "resources: no node is up and undrained");
    pthread_mutex_unlock(&s->lock);
    return pos;
}

struct fit_scan {
    sched_node *nodes;
    size_t n, cap;
    int oom;
};

static void fit_node(void *arg, const store_node *n)
{
    struct fit_scan *f = arg;
    sched_node sn = {n->id,        1,        n->cpus, n->memory_mb, n->gpus, n->cpus, n->memory_mb,
                     n->gpus,      !strcmp(n->network, "job")};
    UTIL_PUSH(f->nodes, f->n, f->cap, sn, &f->oom);
}

/* Every registered node's capacity, into the cache (on a failed read the
 * cache keeps what it had). */
static void fit_read(sched_service *s)
{
    struct fit_scan f = {0};
    int64_t after = 0;
    for (;;) {
        size_t before = f.n;
        if (store_node_list(s->st, after, 200, fit_node, &f) != STORE_OK || f.oom) {
            free(f.nodes);
            return;
        }
        if (f.n == before || f.n - before < 200)
            break;
        after = f.nodes[f.n - 1].id;
    }
    free(s->fit_nodes);
    s->fit_nodes = f.nodes; /* the cache owns them */
    s->fit_n = f.n;
    s->fit_at = util_mono_us() / 1000;
}

/* The verdict on the cached nodes; 1 when j fits or no node is known. */
static int fit_verdict(const sched_service *s, const sched_job *j, char *why, size_t n)
{
    struct fit_scan f = {s->fit_nodes, s->fit_n, s->fit_n, 0};
    int ok = 1;
    if (f.n > 0 && sched_shape(f.nodes, (int)f.n, j) == 0) {
        int64_t most = 0, total = 0;
        for (size_t i = 0; i < f.n; i++) {
            int64_t k = sched_fit(f.nodes[i].cap_cpus, f.nodes[i].cap_mem, f.nodes[i].cap_gpus, j);
            total += k;
            if (k > most)
                most = k;
        }
        if (j->per_node > 0)
            fmt_cut(why, n,
                     "can never fit: %lld nodes with room for %lld workers each are needed; "
                     "the cluster's %zu nodes hold at most %lld each",
                     (long long)(j->workers / j->per_node), (long long)j->per_node, f.n,
                     (long long)most);
        else
            fmt_cut(why, n,
                     "can never fit: %lld workers of this spec; the cluster's %zu nodes hold "
                     "%lld in all (at most %lld on one)",
                     (long long)j->workers, f.n, (long long)total, (long long)most);
        ok = 0;
    }
    return ok;
}

int sched_could_fit(sched_service *s, const sched_job *j, char *why, size_t n)
{
    if (!s)
        return 1;
    pthread_mutex_lock(&s->fit_lock);
    int fresh = !s->fit_at || util_mono_us() / 1000 - s->fit_at >= FIT_CACHE_MS;
    if (fresh)
        fit_read(s);
    int ok = fit_verdict(s, j, why, n);
    /* "Never" is said only on what the nodes are now: one may have joined
     * since the cache was read (here or through another cohortd). */
    if (!ok && !fresh) {
        fit_read(s);
        ok = fit_verdict(s, j, why, n);
    }
    pthread_mutex_unlock(&s->fit_lock);
    return ok;
}
