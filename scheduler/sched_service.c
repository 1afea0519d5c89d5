/*
 * sched_service: the scheduling thread and its passes.
 */
#include "scheduler/sched_service.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scheduler/sched_life.h"
#include "storage/store_bill.h"
#include "storage/store_job.h"
#include "storage/store_node.h"
#include "storage/util.h"

/* A pending job's place in the queue and why it waits.  Kept in memory:
 * it changes with every pass and is no part of the job's history. */
#define SCHED_REST_MAX_US 50000
#define SCHED_REST_MIN_US 2000

struct position {
    int64_t job_id;
    int64_t pos;
    char reason[SCHED_REASON_MAX];
};

struct sched_service {
    store *st;
    sched_config cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int woken, stopping;
    struct position *pos; /* sorted by job_id */
    size_t npos;
    int no_nodes;         /* no node is up and undrained: nothing was planned */
    int64_t last_tick;    /* monotonic ms of the last tick write */
    uint64_t version;
    void (*notify)(void *arg);
    void *notify_arg;
};

/* ---- growable arrays for one pass ---- */

/* Appends v to arr (n used of cap), growing it; on out-of-memory appends
 * nothing and sets *oom, which the caller turns into STORE_NOMEM. */
#define PUSH(arr, n, cap, v, oom)                                                          \
    do {                                                                                   \
        if ((n) == (cap)) {                                                                \
            size_t nc_ = (cap) ? (cap) * 2 : 64;                                           \
            void *np_ = realloc((arr), nc_ * sizeof *(arr));                               \
            if (!np_) {                                                                    \
                *(oom) = 1;                                                                \
                break;                                                                     \
            }                                                                              \
            (arr) = np_;                                                                   \
            (cap) = nc_;                                                                   \
        }                                                                                  \
        (arr)[(n)++] = (v);                                                                \
    } while (0)

struct use {
    int64_t tenant_id;
    int64_t jobs, workers, cpus, gpus;
    double decayed; /* fair share: past use, decayed */
};

/* A running (or just placed) job: when it ends at the latest, and what it holds. */
struct active {
    int64_t id, end; /* end: INT64_MAX when it has no max_runtime_seconds */
    int64_t cpus, mem, gpus;
};

struct alloc {
    int64_t job_id, node_id, workers;
};

/* A gang the plan placed, to be committed (and checked again) in a write. */
struct placement {
    int64_t job_id, attempt, per_node, workers, cpus, mem, gpus;
    int64_t *nodes; /* node ids, node-major: the node of rank 0 first */
    int64_t tenant_id, price, hold, need, estimated_max; /* need: what must be left to admit */
    int bounded;
};

/* A tenant whose account limits what it may hold: what is left to hold. */
struct budget {
    int64_t tenant_id;
    int64_t left; /* the lesser of balance and monthly cap, less what is set aside */
    int64_t balance, reserved;
    char currency[4];
};

struct pass {
    sched_service *svc;
    int placed;
    struct placement *pl;
    size_t npl, cappl;
    int64_t now;
    struct active *act;
    size_t nact, capa;
    struct alloc *al;
    size_t nal, capal;
    sched_node *nodes;
    size_t nnodes, capn;
    sched_job *jobs;
    size_t njobs, capj;
    store_job_brief *briefs; /* by id, as read */
    size_t nbriefs, capb;
    struct use *use;
    size_t nuse, capu;
    store_quota *quota;
    size_t nquota, capq;
    struct position *pos;
    size_t npos, capp;
    struct budget *bud;
    size_t nbud, capbud;
    int oom;
};

static void pass_free(struct pass *p)
{
    for (size_t i = 0; i < p->npl; i++)
        free(p->pl[i].nodes);
    free(p->pl);
    free(p->act);
    free(p->al);
    free(p->nodes);
    free(p->jobs);
    free(p->briefs);
    free(p->use);
    free(p->quota);
    free(p->pos);
    free(p->bud);
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
                     n->gpus - n->used_gpus};
    PUSH(p->nodes, p->nnodes, p->capn, sn, &p->oom);
}

static struct use *use_of(struct pass *p, int64_t tenant)
{
    for (size_t i = 0; i < p->nuse; i++)
        if (p->use[i].tenant_id == tenant)
            return &p->use[i];
    struct use u = {tenant, 0, 0, 0, 0, 0.0};
    size_t before = p->nuse;
    PUSH(p->use, p->nuse, p->capu, u, &p->oom);
    return p->nuse > before ? &p->use[p->nuse - 1] : NULL;
}

static void add_alloc(void *arg, int64_t job_id, int64_t node_id, int64_t workers)
{
    struct pass *p = arg;
    struct alloc a = {job_id, node_id, workers};
    PUSH(p->al, p->nal, p->capal, a, &p->oom);
}

static int64_t end_of(int64_t now, int64_t started_at, int64_t max_runtime_s)
{
    if (max_runtime_s <= 0)
        return INT64_MAX;
    return (started_at > 0 ? started_at : now) + max_runtime_s * 1000;
}

static void add_active(void *arg, const store_job_brief *b)
{
    struct pass *p = arg;
    struct active a = {b->id, end_of(p->now, b->started_at, b->max_runtime_seconds), b->cpus,
                       b->memory_mb, b->gpus};
    PUSH(p->act, p->nact, p->capa, a, &p->oom);
    struct use *u = use_of(p, b->tenant_id);
    if (!u) {
        p->oom = 1;
        return;
    }
    u->jobs++;
    u->workers += b->worker_count;
    u->cpus += b->worker_count * b->cpus;
    u->gpus += b->worker_count * b->gpus;
}

static void add_pending(void *arg, const store_job_brief *b)
{
    struct pass *p = arg;
    sched_job j = {b->id,        b->tenant_id,  b->priority,         0.0, b->created_at,
                   b->worker_count, b->workers_per_node, b->cpus, b->memory_mb, b->gpus};
    PUSH(p->jobs, p->njobs, p->capj, j, &p->oom);
    PUSH(p->briefs, p->nbriefs, p->capb, *b, &p->oom);
}

static void add_usage(void *arg, int64_t tenant, int64_t cpus, int64_t gpus, int64_t start,
                      int64_t end)
{
    struct pass *p = arg;
    struct use *u = use_of(p, tenant);
    if (u)
        u->decayed += sched_decayed_use(cpus, gpus, start, end ? end : p->now, p->now);
}

static void add_quota(void *arg, const store_quota *q)
{
    struct pass *p = arg;
    PUSH(p->quota, p->nquota, p->capq, *q, &p->oom);
}

static const store_job_brief *brief_of(struct pass *p, int64_t id)
{
    size_t lo = 0, hi = p->nbriefs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->briefs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nbriefs && p->briefs[lo].id == id ? &p->briefs[lo] : NULL;
}

/* The first limit of the tenant's quota that j would pass, or NULL. */
static const char *over_quota(struct pass *p, const sched_job *j, struct use *u, char *buf,
                              size_t n)
{
    for (size_t i = 0; i < p->nquota; i++) {
        const store_quota *q = &p->quota[i];
        if (q->tenant_id != j->tenant_id)
            continue;
        if (q->max_running_jobs >= 0 && u->jobs + 1 > q->max_running_jobs)
            snprintf(buf, n, "quota: max_running_jobs %lld reached", (long long)q->max_running_jobs);
        else if (q->max_workers >= 0 && u->workers + j->workers > q->max_workers)
            snprintf(buf, n, "quota: max_workers %lld", (long long)q->max_workers);
        else if (q->max_cpus >= 0 && u->cpus + j->workers * j->cpus > q->max_cpus)
            snprintf(buf, n, "quota: max_cpus %lld", (long long)q->max_cpus);
        else if (q->max_gpus >= 0 && u->gpus + j->workers * j->gpus > q->max_gpus)
            snprintf(buf, n, "quota: max_gpus %lld", (long long)q->max_gpus);
        else
            return NULL;
        return buf;
    }
    return NULL;
}

int64_t sched_hold(const sched_config *cfg, int64_t price_per_hour, int64_t workers,
                   int64_t max_runtime_s)
{
    int64_t secs = max_runtime_s > 0 ? max_runtime_s : cfg->min_hold_s;
    return store_bill_estimate(price_per_hour, workers, secs);
}

/* What must be left for j to be admitted: its hold, and for a job without a
 * bound also the grace period's price (else it would be stopped at once). */
static int64_t hold_need(const sched_config *cfg, int64_t hold, int64_t price, int64_t workers,
                         int64_t max_runtime_s)
{
    if (hold < 0 || max_runtime_s > 0)
        return hold;
    int64_t grace = store_bill_estimate(price, workers, cfg->budget_grace_s);
    return grace < 0 ? -1 : hold + grace;
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

static struct budget *budget_of(struct pass *p, int64_t tenant)
{
    for (size_t i = 0; i < p->nbud; i++)
        if (p->bud[i].tenant_id == tenant)
            return &p->bud[i];
    return NULL;
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
        struct budget b = {ids.v[i], money_left(&m), m.acct.balance, m.reserved, ""};
        snprintf(b.currency, sizeof b.currency, "%s", m.acct.currency);
        PUSH(p->bud, p->nbud, p->capbud, b, &p->oom);
    }
    free(ids.v);
    return rc == STORE_OK && p->oom ? STORE_NOMEM : rc;
}

static const char *over_budget(const struct budget *b, const store_job_brief *jb, int64_t hold,
                               int64_t need, char *buf, size_t n)
{
    if (!b)
        return NULL;
    if (strcmp(b->currency, jb->currency) != 0)
        snprintf(buf, n, "budget: the job is priced in %s, the tenant's account is in %s",
                 jb->currency, b->currency);
    else if (hold < 0 || need > b->left)
        snprintf(buf, n,
                 "budget: admitting it holds %lld %s, %lld %s is left to hold (balance %lld, "
                 "set aside for running jobs %lld)",
                 (long long)need, b->currency, (long long)(b->left > 0 ? b->left : 0),
                 b->currency, (long long)b->balance, (long long)b->reserved);
    else
        return NULL;
    return buf;
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
static int commit_placement(store_tx *tx, const struct placement *pl)
{
    int64_t m = pl->workers / pl->per_node;
    store_node master;
    store_job j;
    int rc = store_job_get_tx(tx, 0, pl->job_id, &j);
    if (rc != STORE_OK)
        return rc;
    int ok = !strcmp(j.state, "PENDING") && j.attempt == pl->attempt;
    /* TensorFlow lists every worker at host:port: each rank gets a port of
     * its own node; other frameworks meet at rank 0's port alone. */
    int port_per_rank = !strcmp(j.framework, "tensorflow");
    store_job_clear(&j);
    if (!ok)
        return STORE_CONFLICT;
    /* The money, again, as of this write: two passes never hold the same money. */
    store_account acct;
    rc = store_account_get_tx(tx, pl->tenant_id, &acct);
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
    for (int64_t r = 0; r < m; r++) {
        store_node n;
        if (store_node_get_tx(tx, pl->nodes[r], &n) != STORE_OK || strcmp(n.state, "up") ||
            n.drained || n.cpus - n.used_cpus < pl->per_node * pl->cpus ||
            n.memory_mb - n.used_memory_mb < pl->per_node * pl->mem ||
            n.gpus - n.used_gpus < pl->per_node * pl->gpus)
            return STORE_CONFLICT;
        if (r == 0)
            master = n;
    }
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
            store_worker w = {0};
            w.job_id = pl->job_id;
            w.attempt = pl->attempt;
            w.rank = rank;
            w.node_rank = r;
            w.local_rank = l;
            w.node_id = pl->nodes[r];
            rc = store_worker_insert(tx, &w);
        }
    }
    if (rc == STORE_OK)
        rc = store_job_place(tx, pl->job_id, master.id, port, pl->per_node);
    if (rc == STORE_OK)
        rc = store_job_admit(tx, pl->job_id, pl->price, pl->estimated_max, util_now_ms());
    if (rc == STORE_OK)
        rc = store_hold_put(tx, pl->job_id, pl->attempt, pl->tenant_id, pl->hold, pl->bounded,
                            util_now_ms());
    char why[128];
    snprintf(why, sizeof why, "placed: %lld x %lld workers, rank 0 on %s", (long long)m,
             (long long)pl->per_node, master.name);
    if (rc == STORE_OK)
        rc = store_job_transition(tx, pl->job_id, "PENDING", "STARTING", why);
    return rc;
}

/* The write of a pass: every placement, each all or nothing. */
static int commit_all(store_tx *tx, void *arg)
{
    struct pass *p = arg;
    p->placed = 0;
    for (size_t i = 0; i < p->npl; i++) {
        if (store_tx_mark(tx) != STORE_OK)
            return STORE_EIO;
        if (commit_placement(tx, &p->pl[i]) == STORE_OK) {
            store_tx_keep(tx);
            p->placed++;
        } else {
            store_tx_undo(tx); /* the next pass looks again */
        }
    }
    return STORE_OK;
}

static int active_cmp(const void *a, const void *b)
{
    const struct active *x = a, *y = b;
    return (x->end > y->end) - (x->end < y->end);
}

static int node_index(const struct pass *p, int64_t id)
{
    size_t lo = 0, hi = p->nnodes; /* nodes come in id order */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->nodes[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nnodes && p->nodes[lo].id == id ? (int)lo : -1;
}

/*
 * The head's reservation (EASY backfill): the earliest time it would fit
 * if every running job ended at its max_runtime_seconds bound.  INT64_MAX
 * when that time is not known (a job it waits for has no bound).
 */
static int64_t shadow_time(struct pass *p, const sched_job *head, int64_t shape)
{
    sched_node *copy = malloc((p->nnodes + 1) * sizeof *copy);
    int *idx = malloc((p->nnodes + 1) * sizeof *idx);
    int64_t shadow = INT64_MAX;
    if (!copy || !idx)
        goto out;
    memcpy(copy, p->nodes, p->nnodes * sizeof *copy);
    if (p->nact > 1)
        qsort(p->act, p->nact, sizeof *p->act, active_cmp);
    for (size_t a = 0; a < p->nact && p->act[a].end != INT64_MAX; a++) {
        const struct active *ac = &p->act[a];
        for (size_t k = 0; k < p->nal; k++) {
            int i = p->al[k].job_id == ac->id ? node_index(p, p->al[k].node_id) : -1;
            if (i < 0)
                continue;
            copy[i].free_cpus += p->al[k].workers * ac->cpus;
            copy[i].free_mem += p->al[k].workers * ac->mem;
            copy[i].free_gpus += p->al[k].workers * ac->gpus;
        }
        /* Several jobs may end at once: check after the last of them. */
        if (a + 1 < p->nact && p->act[a + 1].end == ac->end)
            continue;
        sched_node *trial = malloc((p->nnodes + 1) * sizeof *trial);
        if (!trial)
            break;
        memcpy(trial, copy, p->nnodes * sizeof *trial);
        sched_cluster *c = sched_cluster_new(trial, (int)p->nnodes);
        int fits = c && sched_cluster_place(c, head, shape, idx) == 0;
        sched_cluster_free(c);
        free(trial);
        if (fits) {
            shadow = ac->end;
            break;
        }
    }
out:
    free(copy);
    free(idx);
    return shadow;
}

/* Counts a job placed in this pass as running, for later reservations. */
static void note_placed(struct pass *p, const sched_job *j, const store_job_brief *b,
                        int64_t per_node, const int *idx)
{
    struct active a = {j->id, end_of(p->now, 0, b->max_runtime_seconds), j->cpus, j->mem,
                       j->gpus};
    PUSH(p->act, p->nact, p->capa, a, &p->oom);
    for (int64_t r = 0; r < j->workers / per_node; r++) {
        struct alloc al = {j->id, p->nodes[idx[r]].id, per_node};
        PUSH(p->al, p->nal, p->capal, al, &p->oom);
    }
}

static int id_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Plans a pass on a read snapshot: what to place, and every pending job's
 * position and reason.  Writes nothing. */
static int plan(store_tx *tx, struct pass *p)
{
    int rc = store_node_all_tx(tx, add_node, p);
    if (rc == STORE_OK)
        rc = store_job_briefs_tx(tx, "STARTING", add_active, p);
    if (rc == STORE_OK)
        rc = store_job_briefs_tx(tx, "RUNNING", add_active, p);
    if (rc == STORE_OK)
        rc = store_job_briefs_tx(tx, "PENDING", add_pending, p);
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
    for (size_t i = 0; i < p->njobs; i++) {
        struct use *u = use_of(p, p->jobs[i].tenant_id);
        p->jobs[i].usage = u ? u->decayed : 0.0;
    }
    sched_order(p->jobs, (int)p->njobs);
    int *idx = malloc((p->nnodes + 1) * sizeof *idx);
    sched_cluster *cl = sched_cluster_new(p->nodes, (int)p->nnodes);
    if (!idx || !cl) {
        free(idx);
        sched_cluster_free(cl);
        return STORE_NOMEM;
    }
    int blocked = 0;
    int64_t position = 0, head = 0, shadow = INT64_MAX;
    /* Jobs with live workers, from the allocations read above. */
    int64_t *live = malloc((p->nal + 1) * sizeof *live);
    size_t nlive = 0;
    for (size_t k = 0; live && k < p->nal; k++)
        live[nlive++] = p->al[k].job_id;
    if (nlive > 1)
        qsort(live, nlive, sizeof *live, id_cmp);
    for (size_t i = 0; i < p->njobs; i++) {
        sched_job *j = &p->jobs[i];
        const store_job_brief *b = brief_of(p, j->id);
        struct use *u = use_of(p, j->tenant_id);
        char why[STORE_REASON_MAX + 1];
        if (!b || !u)
            continue;
        int64_t shape = sched_cluster_shape(cl, j);
        const char *q = over_quota(p, j, u, why, sizeof why);
        const sched_config *cfg = &p->svc->cfg;
        int64_t hold = sched_hold(cfg, b->price_per_hour, j->workers, b->max_runtime_seconds);
        int64_t need = hold_need(cfg, hold, b->price_per_hour, j->workers, b->max_runtime_seconds);
        struct budget *bud = budget_of(p, j->tenant_id);
        if (!q)
            q = over_budget(bud, b, hold, need, why, sizeof why);
        const char *wait = NULL;
        if (nlive && bsearch(&j->id, live, nlive, sizeof *live, id_cmp)) {
            /* Two attempts of one gang never overlap. */
            wait = "retry: waiting for the previous attempt's workers to stop";
        } else if (q) {
            wait = q;
        } else if (p->nnodes == 0) {
            wait = "resources: no node has registered yet";
        } else if (shape == 0) {
            wait = "resources: no usable nodes can hold this job now";
        } else if (blocked && !(b->max_runtime_seconds > 0 &&
                                p->now + b->max_runtime_seconds * 1000 <= shadow &&
                                sched_cluster_place(cl, j, shape, idx) == 0)) {
            /* Behind a blocked head only a job that ends before the head's
             * reservation may start (backfill); the others wait. */
            snprintf(why, sizeof why,
                     shadow == INT64_MAX
                         ? "resources: waiting behind job %lld"
                         : "resources: waiting behind job %lld (backfill only for jobs whose "
                           "max_runtime_seconds ends before its start)",
                     (long long)head);
            wait = why;
        } else if (!blocked && sched_cluster_place(cl, j, shape, idx) != 0) {
            blocked = 1;
            head = j->id;
            shadow = shadow_time(p, j, shape);
            wait = "resources: waiting for room on the nodes";
        } else {
            struct placement pl = {j->id,
                                   b->attempt,
                                   shape,
                                   j->workers,
                                   j->cpus,
                                   j->mem,
                                   j->gpus,
                                   malloc((size_t)(j->workers / shape) * sizeof(int64_t)),
                                   j->tenant_id,
                                   b->price_per_hour,
                                   hold,
                                   need,
                                   b->max_runtime_seconds > 0
                                       ? store_bill_estimate(b->price_per_hour, j->workers,
                                                             b->max_runtime_seconds)
                                       : -1,
                                   b->max_runtime_seconds > 0};
            if (pl.hold < 0)
                pl.hold = STORE_MONEY_MAX; /* only where no budget applies: need < 0 waits */
            if (bud)
                bud->left -= hold;
            if (pl.nodes) {
                size_t before = p->npl;
                for (int64_t r = 0; r < j->workers / shape; r++)
                    pl.nodes[r] = p->nodes[idx[r]].id;
                PUSH(p->pl, p->npl, p->cappl, pl, &p->oom);
                if (p->npl == before)
                    free(pl.nodes);
            } else {
                p->oom = 1;
            }
            note_placed(p, j, b, shape, idx);
            u->jobs++;
            u->workers += j->workers;
            u->cpus += j->workers * j->cpus;
            u->gpus += j->workers * j->gpus;
            continue;
        }
        struct position ps = {j->id, ++position, ""};
        snprintf(ps.reason, sizeof ps.reason, "%.159s", wait ? wait : "resources");
        PUSH(p->pos, p->npos, p->capp, ps, &p->oom);
    }
    free(live);
    free(idx);
    sched_cluster_free(cl);
    return p->oom ? STORE_NOMEM : STORE_OK;
}

struct tick {
    int64_t now, node_timeout_ms;
    const sched_config *cfg;
    store_tx *tx;
    int changed; /* workers lost or jobs stopped */
};

static void job_lost(void *arg, int64_t job_id)
{
    struct tick *t = arg;
    sched_job_eval(t->tx, job_id);
}

static void node_down(void *arg, int64_t node_id)
{
    struct tick *t = arg;
    t->changed = 1;
    store_worker_lose_node(t->tx, node_id, t->now, job_lost, t);
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
        snprintf(why, sizeof why,
                 "budget_exhausted: %lld %s left to spend (balance %lld) would not pay for "
                 "%lld s more of the tenant's jobs without max_runtime_seconds",
                 (long long)(left > 0 ? left : 0), m.acct.currency, (long long)m.acct.balance,
                 (long long)t->cfg->budget_grace_s);
        for (size_t k = 0; rc == STORE_OK && k < u.ids.n; k++) {
            int r = sched_job_end(t->tx, 0, u.ids.v[k], "FAILED", why);
            if (r != STORE_OK && r != SCHED_FINAL)
                rc = r;
            t->changed = 1;
        }
        free(u.ids.v);
    }
    free(ids.v);
    return rc;
}

static int tick(store_tx *tx, void *arg)
{
    struct tick *t = arg;
    t->tx = tx;
    int rc = store_port_release_idle(tx);
    if (rc == STORE_OK)
        rc = store_hold_release_idle(tx);
    if (rc == STORE_OK)
        rc = stop_exhausted(t);
    if (rc == STORE_OK)
        rc = store_node_mark_down(tx, t->now - t->node_timeout_ms, node_down, t);
    struct timeout_scan s = {.now = t->now};
    if (rc == STORE_OK)
        rc = store_job_briefs_tx(tx, "RUNNING", find_timeouts, &s);
    if (rc == STORE_OK && s.oom)
        rc = STORE_NOMEM;
    for (size_t i = 0; rc == STORE_OK && i < s.ids.n; i++) {
        char why[128];
        snprintf(why, sizeof why, "timeout: ran longer than max_runtime_seconds (%lld)",
                 (long long)s.limits.v[i]);
        int r = sched_job_end(tx, 0, s.ids.v[i], "FAILED", why);
        if (r != STORE_OK && r != SCHED_FINAL)
            rc = r;
        t->changed = 1;
    }
    free(s.ids.v);
    free(s.limits.v);
    return rc;
}

static int pos_cmp(const void *a, const void *b)
{
    const struct position *x = a, *y = b;
    return (x->job_id > y->job_id) - (x->job_id < y->job_id);
}

static void count_usable(void *arg, const store_node *n)
{
    *(int *)arg += !strcmp(n->state, "up") && !n->drained;
}

static void run_pass(sched_service *s)
{
    /* Timeouts and silent nodes are looked for once per tick, not on every wake. */
    int rc = STORE_OK;
    int64_t mono = util_mono_us() / 1000;
    if (mono - s->last_tick >= s->cfg.tick_ms) {
        struct tick t = {util_now_ms(), s->cfg.node_timeout_ms, &s->cfg, NULL, 0};
        rc = store_write(s->st, tick, &t);
        if (rc != STORE_OK && rc != STORE_BUSY)
            fprintf(stderr, "scheduler: tick failed (store error %d)\n", rc);
        if (rc == STORE_OK && t.changed)
            sched_bump(s);
        s->last_tick = mono;
    }
    struct pass p = {.svc = s, .now = util_now_ms()};
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
    if (rc == STORE_OK && p.npl > 0) {
        rc = store_write(s->st, commit_all, &p);
        /* A placement that no longer held is planned again at the next pass. */
        if (rc == STORE_OK && p.placed)
            sched_bump(s);
    }
    if (rc != STORE_OK && rc != STORE_BUSY)
        fprintf(stderr, "scheduler: pass failed (store error %d)\n", rc);
    if (rc == STORE_OK) {
        if (p.npos > 1)
            qsort(p.pos, p.npos, sizeof *p.pos, pos_cmp);
        pthread_mutex_lock(&s->lock);
        free(s->pos);
        s->pos = p.pos;
        s->npos = p.npos;
        pthread_mutex_unlock(&s->lock);
        p.pos = NULL;
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
        snprintf(err, errlen, "out of memory");
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
    pthread_cond_init(&s->wake, NULL);
    s->woken = 1; /* a first pass at once */
    s->version = (uint64_t)util_now_ms(); /* never below what a previous run handed out */
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        snprintf(err, errlen, "cannot start the scheduler thread");
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->wake);
        free(s);
        return NULL;
    }
    return s;
}

void sched_wake(sched_service *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->woken = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

void sched_stop(sched_service *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    free(s->pos);
    free(s);
}

uint64_t sched_version(sched_service *s)
{
    return s ? __atomic_load_n(&s->version, __ATOMIC_ACQUIRE) : 0;
}

void sched_bump(sched_service *s)
{
    if (!s)
        return;
    __atomic_add_fetch(&s->version, 1, __ATOMIC_RELEASE);
    /* Under the lock: once sched_on_bump(NULL) returns, no call is running. */
    pthread_mutex_lock(&s->lock);
    if (s->notify)
        s->notify(s->notify_arg);
    pthread_mutex_unlock(&s->lock);
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
    struct position key = {.job_id = job_id};
    pthread_mutex_lock(&s->lock);
    struct position *hit =
        s->npos && !s->no_nodes ? bsearch(&key, s->pos, s->npos, sizeof key, pos_cmp) : NULL;
    int64_t pos = hit ? hit->pos : 0;
    if (hit && reason && n)
        snprintf(reason, n, "%s", hit->reason);
    else if (s->no_nodes && reason && n)
        snprintf(reason, n, "resources: no node is up and undrained");
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
    sched_node sn = {n->id, 1, n->cpus, n->memory_mb, n->gpus, n->cpus, n->memory_mb, n->gpus};
    PUSH(f->nodes, f->n, f->cap, sn, &f->oom);
}

int sched_could_fit(store *st, const sched_job *j, char *why, size_t n)
{
    struct fit_scan f = {0};
    int64_t after = 0;
    for (;;) {
        size_t before = f.n;
        if (store_node_list(st, after, 200, fit_node, &f) != STORE_OK)
            break;
        if (f.n == before || f.n - before < 200)
            break;
        after = f.nodes[f.n - 1].id;
    }
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
            snprintf(why, n,
                     "can never fit: %lld nodes with room for %lld workers each are needed; "
                     "the cluster's %zu nodes hold at most %lld each",
                     (long long)(j->workers / j->per_node), (long long)j->per_node, f.n,
                     (long long)most);
        else
            snprintf(why, n,
                     "can never fit: %lld workers of this spec; the cluster's %zu nodes hold "
                     "%lld in all (at most %lld on one)",
                     (long long)j->workers, f.n, (long long)total, (long long)most);
        ok = 0;
    }
    free(f.nodes);
    return ok;
}
