/*
 * sched_plan: one pass's policy over a snapshot (see sched_plan.h).  It
 * works on copies of the snapshot's nodes, active jobs, allocations, use
 * and budgets, taking what each placement takes as it goes, so a later job
 * of the same pass sees the cluster and the tenant as they will be.
 */
#include "scheduler/sched_plan.h"
#include "lib/fmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

/* A tenant's running use: jobs, workers, CPUs and GPUs held now. */
struct use {
    int64_t tenant_id;
    int64_t jobs, workers, cpus, gpus;
    double decayed;
    int64_t first_pending; /* its oldest pending job's created_at; 0: none */
};

struct plan {
    const sched_snapshot *s;
    sched_node *nodes;       /* copy: free resources taken as gangs are placed */
    sched_active *act;       /* copy, plus the gangs placed in this pass */
    size_t nact, capact;
    sched_alloc *al;         /* copy, plus the gangs placed in this pass */
    size_t nal, capal;
    struct use *use;
    size_t nuse, capuse;
    sched_budget *bud;       /* copy: left shrinks with each hold */
    const sched_pending **by_id;
    sched_job *queue;        /* the pending jobs in queue order */
    int64_t *live;           /* jobs with live workers, sorted */
    size_t nlive;
    sched_decisions *out;
    size_t capplaced, capwaits;
    int oom;
};

static int id_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int pending_cmp(const void *a, const void *b)
{
    const sched_pending *x = *(const sched_pending *const *)a, *y = *(const sched_pending *const *)b;
    return (x->job.id > y->job.id) - (x->job.id < y->job.id);
}

static int active_cmp(const void *a, const void *b)
{
    const sched_active *x = a, *y = b;
    return (x->end > y->end) - (x->end < y->end);
}

static const sched_pending *pending_of(const struct plan *p, int64_t id)
{
    size_t lo = 0, hi = p->s->npending;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->by_id[mid]->job.id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->s->npending && p->by_id[lo]->job.id == id ? p->by_id[lo] : NULL;
}

static struct use *use_of(struct plan *p, int64_t tenant)
{
    for (size_t i = 0; i < p->nuse; i++)
        if (p->use[i].tenant_id == tenant)
            return &p->use[i];
    struct use u = {tenant, 0, 0, 0, 0, 0.0, 0};
    size_t before = p->nuse;
    UTIL_PUSH(p->use, p->nuse, p->capuse, u, &p->oom);
    return p->nuse > before ? &p->use[p->nuse - 1] : NULL;
}

static void take_use(struct use *u, int64_t workers, int64_t cpus, int64_t gpus)
{
    u->jobs++;
    u->workers += workers;
    u->cpus += workers * cpus;
    u->gpus += workers * gpus;
}

static sched_budget *budget_of(struct plan *p, int64_t tenant)
{
    for (size_t i = 0; i < p->s->nbudgets; i++)
        if (p->bud[i].tenant_id == tenant)
            return &p->bud[i];
    return NULL;
}

static int node_index(const struct plan *p, int64_t id)
{
    size_t lo = 0, hi = p->s->nnodes; /* nodes come in id order */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->nodes[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->s->nnodes && p->nodes[lo].id == id ? (int)lo : -1;
}

/* The copies the plan works on, the tenants' use and the lookups. */
static int plan_open(struct plan *p, const sched_snapshot *s, sched_decisions *out)
{
    memset(p, 0, sizeof *p);
    memset(out, 0, sizeof *out);
    p->s = s;
    p->out = out;
    p->nodes = malloc((s->nnodes + 1) * sizeof *p->nodes);
    p->act = malloc((s->nactive + 1) * sizeof *p->act);
    p->al = malloc((s->nallocs + 1) * sizeof *p->al);
    p->bud = malloc((s->nbudgets + 1) * sizeof *p->bud);
    p->by_id = malloc((s->npending + 1) * sizeof *p->by_id);
    p->queue = malloc((s->npending + 1) * sizeof *p->queue);
    p->live = malloc((s->nallocs + 1) * sizeof *p->live);
    if (!p->nodes || !p->act || !p->al || !p->bud || !p->by_id || !p->queue || !p->live)
        return -1;
    if (s->nnodes)
        memcpy(p->nodes, s->nodes, s->nnodes * sizeof *p->nodes);
    if (s->nactive)
        memcpy(p->act, s->active, s->nactive * sizeof *p->act);
    if (s->nallocs)
        memcpy(p->al, s->allocs, s->nallocs * sizeof *p->al);
    if (s->nbudgets)
        memcpy(p->bud, s->budgets, s->nbudgets * sizeof *p->bud);
    p->nact = s->nactive;
    p->capact = s->nactive + 1;
    p->nal = s->nallocs;
    p->capal = s->nallocs + 1;
    for (size_t i = 0; i < s->nallocs; i++)
        p->live[p->nlive++] = s->allocs[i].job_id;
    if (p->nlive > 1)
        qsort(p->live, p->nlive, sizeof *p->live, id_cmp);
    for (size_t i = 0; i < s->nactive; i++) {
        struct use *u = use_of(p, s->active[i].tenant_id);
        if (u)
            take_use(u, s->active[i].workers, s->active[i].cpus, s->active[i].gpus);
    }
    for (size_t i = 0; i < s->nusage; i++) {
        struct use *u = use_of(p, s->usage[i].tenant_id);
        if (u)
            u->decayed += s->usage[i].decayed;
    }
    for (size_t i = 0; i < s->npending; i++) {
        struct use *u = use_of(p, s->pending[i].job.tenant_id);
        int64_t c = s->pending[i].job.created_at;
        if (u && (!u->first_pending || c < u->first_pending))
            u->first_pending = c;
    }
    for (size_t i = 0; i < s->npending; i++) {
        p->by_id[i] = &s->pending[i];
        p->queue[i] = s->pending[i].job;
        struct use *u = use_of(p, p->queue[i].tenant_id);
        p->queue[i].usage = u ? u->decayed : 0.0;
        p->queue[i].tenant_first = u ? u->first_pending : p->queue[i].created_at;
    }
    if (s->npending > 1)
        qsort(p->by_id, s->npending, sizeof *p->by_id, pending_cmp);
    sched_order(p->queue, (int)s->npending);
    return p->oom ? -1 : 0;
}

static void plan_close(struct plan *p)
{
    free(p->nodes);
    free(p->act);
    free(p->al);
    free(p->use);
    free(p->bud);
    free(p->by_id);
    free(p->queue);
    free(p->live);
}

/* The first limit of the tenant's quota that j would pass, or NULL. */
static const char *over_quota(const struct plan *p, const sched_job *j, const struct use *u,
                              char *buf, size_t n)
{
    for (size_t i = 0; i < p->s->nquotas; i++) {
        const sched_quota *q = &p->s->quotas[i];
        if (q->tenant_id != j->tenant_id)
            continue;
        if (q->max_running_jobs >= 0 && u->jobs + 1 > q->max_running_jobs)
            fmt_cut(buf, n, "quota: max_running_jobs %lld reached", (long long)q->max_running_jobs);
        else if (q->max_workers >= 0 && u->workers + j->workers > q->max_workers)
            fmt_cut(buf, n, "quota: max_workers %lld", (long long)q->max_workers);
        else if (q->max_cpus >= 0 && u->cpus + j->workers * j->cpus > q->max_cpus)
            fmt_cut(buf, n, "quota: max_cpus %lld", (long long)q->max_cpus);
        else if (q->max_gpus >= 0 && u->gpus + j->workers * j->gpus > q->max_gpus)
            fmt_cut(buf, n, "quota: max_gpus %lld", (long long)q->max_gpus);
        else
            return NULL;
        return buf;
    }
    return NULL;
}

static const char *over_budget(const sched_budget *b, const sched_pending *t, char *buf, size_t n)
{
    if (!b)
        return NULL;
    if (strcmp(b->currency, t->currency) != 0)
        fmt_cut(buf, n, "budget: the job is priced in %s, the tenant's account is in %s",
                 t->currency, b->currency);
    else if (t->hold < 0 || t->need < 0)
        fmt_cut(buf, n, "budget: the job's price over its run is past what an account can hold");
    else if (t->need > b->left)
        fmt_cut(buf, n,
                 "budget: admitting it holds %lld %s, %lld %s is left to hold (balance %lld, "
                 "set aside for running jobs %lld)",
                 (long long)t->need, b->currency, (long long)(b->left > 0 ? b->left : 0),
                 b->currency, (long long)b->balance, (long long)b->reserved);
    else
        return NULL;
    return buf;
}

/*
 * The head's reservation (EASY backfill): the earliest time it would fit
 * if every running job ended at its max_runtime_seconds bound.  INT64_MAX
 * when that time is not known (a job it waits for has no bound).
 */
static int64_t shadow_time(struct plan *p, const sched_job *head, int64_t shape)
{
    size_t nn = p->s->nnodes;
    sched_node *copy = malloc((nn + 1) * sizeof *copy);
    sched_node *trial = malloc((nn + 1) * sizeof *trial);
    int *idx = malloc((nn + 1) * sizeof *idx);
    int64_t shadow = INT64_MAX;
    if (!copy || !trial || !idx)
        goto out;
    memcpy(copy, p->nodes, nn * sizeof *copy);
    if (p->nact > 1)
        qsort(p->act, p->nact, sizeof *p->act, active_cmp);
    for (size_t a = 0; a < p->nact && p->act[a].end != INT64_MAX; a++) {
        const sched_active *ac = &p->act[a];
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
        memcpy(trial, copy, nn * sizeof *trial);
        sched_cluster *c = sched_cluster_new(trial, (int)nn);
        int fits = c && sched_cluster_place(c, head, shape, idx) == 0;
        sched_cluster_free(c);
        if (fits) {
            shadow = ac->end;
            break;
        }
    }
out:
    free(copy);
    free(trial);
    free(idx);
    return shadow;
}

/* j placed per_node on each of the nodes idx[]: a decision, and from now on
 * a running job of its tenant, for the quotas, budgets and reservations of
 * the jobs after it. */
static void place(struct plan *p, const sched_job *j, const sched_pending *t, int64_t per_node,
                  const int *idx, struct use *u, sched_budget *bud)
{
    int64_t m = j->workers / per_node;
    sched_placement pl = {j->id,   t->attempt,         j->tenant_id,     per_node, j->workers,
                          j->cpus, j->mem,             j->gpus,          NULL,     t->price_per_hour,
                          t->hold, t->need,            t->estimated_max, t->max_runtime_s > 0};
    pl.nodes = malloc((size_t)m * sizeof *pl.nodes);
    if (!pl.nodes) {
        p->oom = 1;
        return;
    }
    for (int64_t r = 0; r < m; r++)
        pl.nodes[r] = p->nodes[idx[r]].id;
    size_t before = p->out->nplaced;
    UTIL_PUSH(p->out->placed, p->out->nplaced, p->capplaced, pl, &p->oom);
    if (p->out->nplaced == before)
        free(pl.nodes);
    if (bud)
        bud->left -= t->hold;
    sched_active a = {j->id, j->tenant_id,
                      t->max_runtime_s > 0 ? p->s->now + t->max_runtime_s * 1000 : INT64_MAX,
                      j->workers, j->cpus, j->mem, j->gpus};
    UTIL_PUSH(p->act, p->nact, p->capact, a, &p->oom);
    for (int64_t r = 0; r < m; r++) {
        sched_alloc al = {j->id, p->nodes[idx[r]].id, per_node};
        UTIL_PUSH(p->al, p->nal, p->capal, al, &p->oom);
    }
    take_use(u, j->workers, j->cpus, j->gpus);
}

static void leave_waiting(struct plan *p, const sched_job *j, int64_t pos, const char *why)
{
    sched_wait w = {j->id, pos, ""};
    fmt_cut(w.reason, sizeof w.reason, "%.159s", why ? why : "resources");
    UTIL_PUSH(p->out->waits, p->out->nwaits, p->capwaits, w, &p->oom);
}

int sched_plan(const sched_snapshot *s, sched_decisions *out)
{
    struct plan p;
    int *idx = NULL;
    sched_cluster *cl = NULL;
    int rc = -1;
    if (plan_open(&p, s, out) != 0)
        goto out;
    idx = malloc((s->nnodes + 1) * sizeof *idx);
    cl = sched_cluster_new(p.nodes, (int)s->nnodes);
    if (!idx || !cl)
        goto out;
    int blocked = 0;
    int64_t position = 0, head = 0, shadow = INT64_MAX;
    for (size_t i = 0; i < s->npending && !p.oom; i++) {
        const sched_job *j = &p.queue[i];
        const sched_pending *t = pending_of(&p, j->id);
        struct use *u = use_of(&p, j->tenant_id);
        char why[256];
        if (!t || !u)
            continue;
        int64_t shape = sched_cluster_shape(cl, j);
        sched_budget *bud = budget_of(&p, j->tenant_id);
        const char *q = over_quota(&p, j, u, why, sizeof why);
        if (!q)
            q = over_budget(bud, t, why, sizeof why);
        const char *reason = NULL;
        if (p.nlive && bsearch(&j->id, p.live, p.nlive, sizeof *p.live, id_cmp)) {
            /* Two attempts of one gang never overlap. */
            reason = "retry: waiting for the previous attempt's workers to stop";
        } else if (q) {
            reason = q;
        } else if (s->nnodes == 0) {
            reason = "resources: no node has registered yet";
        } else if (shape == 0) {
            reason = "resources: no usable nodes can hold this job now";
        } else if (blocked && !(t->max_runtime_s > 0 && s->now + t->max_runtime_s * 1000 <= shadow &&
                                sched_cluster_place(cl, j, shape, idx) == 0)) {
            /* Behind a blocked head only a job that ends before the head's
             * reservation may start (backfill); the others wait. */
            fmt_cut(why, sizeof why,
                     shadow == INT64_MAX
                         ? "resources: waiting behind job %lld"
                         : "resources: waiting behind job %lld (backfill only for jobs whose "
                           "max_runtime_seconds ends before its start)",
                     (long long)head);
            reason = why;
        } else if (!blocked && sched_cluster_place(cl, j, shape, idx) != 0) {
            blocked = 1;
            head = j->id;
            shadow = shadow_time(&p, j, shape);
            reason = "resources: waiting for room on the nodes";
        } else {
            place(&p, j, t, shape, idx, u, bud);
            continue;
        }
        leave_waiting(&p, j, ++position, reason);
    }
    rc = p.oom ? -1 : 0;
out:
    free(idx);
    sched_cluster_free(cl);
    plan_close(&p);
    return rc;
}

void sched_decisions_free(sched_decisions *d)
{
    for (size_t i = 0; i < d->nplaced; i++)
        free(d->placed[i].nodes);
    free(d->placed);
    free(d->waits);
    memset(d, 0, sizeof *d);
}
