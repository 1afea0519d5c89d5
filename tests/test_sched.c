/*
 * sched: queue order, job shape and all-or-nothing gang placement on
 * synthetic clusters.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "scheduler/sched.h"

static sched_node node(int64_t id, int64_t cpus, int64_t mem, int64_t gpus)
{
    return (sched_node){id, 1, cpus, mem, gpus, cpus, mem, gpus, 0};
}

static sched_job job(int64_t id, int64_t workers, int64_t per_node, int64_t cpus, int64_t gpus)
{
    return (sched_job){id, 1, 0, 0.0, id, workers, per_node, cpus, 1024, gpus, 0};
}

/*
 * A tier (a priority past SCHED_PRIORITY_MAX, a platform admin's) goes
 * first; then the tenants by fair share (less usage, then who has waited
 * longest); priority orders a tenant's own jobs only.
 */
Test(sched, queue_order_is_tier_then_fair_share_then_priority_within_a_tenant)
{
    sched_job j[5];
    for (int i = 0; i < 5; i++)
        j[i] = job(i + 1, 1, 0, 1, 0);
    j[0].tenant_id = 1, j[0].created_at = 10;                     /* t1's oldest */
    j[1].tenant_id = 2, j[1].created_at = 40, j[1].priority = 1000; /* t2, highest priority */
    j[2].tenant_id = 1, j[2].created_at = 20, j[2].priority = 5;  /* t1's favourite */
    j[3].tenant_id = 3, j[3].created_at = 5, j[3].usage = 100;    /* a heavy tenant */
    j[4].tenant_id = 3, j[4].created_at = 50, j[4].priority = SCHED_PRIORITY_MAX + 1; /* tier */
    for (int i = 0; i < 5; i++)
        j[i].tenant_first = j[i].tenant_id == 1 ? 10 : j[i].tenant_id == 2 ? 40 : 5;
    for (int i = 0; i < 5; i++)
        if (j[i].tenant_id == 3)
            j[i].usage = 100;
    sched_order(j, 5);
    cr_expect_eq(j[0].id, 5, "the tier first, though its tenant is the heaviest");
    cr_expect_eq(j[1].id, 3, "then tenant 1, which waited longest: its own priority first");
    cr_expect_eq(j[2].id, 1);
    cr_expect_eq(j[3].id, 2, "priority 1000 does not put tenant 2 ahead of tenant 1");
    cr_expect_eq(j[4].id, 4, "the heavy tenant last");
}

/* A gang over several nodes takes nodes of one network kind: on a cluster
 * of two job-network nodes and two host-network ones, a 2-node gang lands
 * on two of one kind, never one of each; a one-node job anywhere. */
Test(sched, a_gang_over_several_nodes_takes_one_network_kind)
{
    sched_node n[4] = {node(1, 4, 8192, 0), node(2, 4, 8192, 0), node(3, 4, 8192, 0),
                       node(4, 4, 8192, 0)};
    n[0].net = n[2].net = 1; /* 1 and 3: job networks; 2 and 4: the host's */
    n[1].free_cpus = 1;      /* a host node too busy: the host kind has one node left */
    sched_job j = job(1, 2, 1, 4, 0);
    int idx[2];
    cr_assert_eq(sched_place(n, 4, &j, 1, idx), 0);
    cr_expect_eq(n[idx[0]].net, n[idx[1]].net, "nodes %lld and %lld of two kinds",
                 (long long)n[idx[0]].id, (long long)n[idx[1]].id);
    /* one free node of each kind: no gang, though two nodes are free */
    n[0].free_cpus = 4, n[1].free_cpus = 0, n[2].free_cpus = 0, n[3].free_cpus = 4;
    sched_job k = job(2, 2, 1, 4, 0);
    cr_expect_eq(sched_place(n, 4, &k, 1, idx), -1, "placed across the two kinds");
    sched_job one = job(3, 1, 1, 4, 0);
    cr_expect_eq(sched_place(n, 4, &one, 1, idx), 0);
}

Test(sched, shape_fills_nodes_with_equal_ranks_per_node)
{
    sched_node n[3] = {node(1, 4, 8192, 0), node(2, 4, 8192, 0), node(3, 4, 8192, 0)};
    sched_job j = job(1, 8, 0, 1, 0);
    cr_expect_eq(sched_shape(n, 3, &j), 4, "8 one-CPU workers fill two 4-CPU nodes");
    j.workers = 6;
    cr_expect_eq(sched_shape(n, 3, &j), 3, "6 workers: 3 on each of 2 nodes");
    j.workers = 12;
    cr_expect_eq(sched_shape(n, 3, &j), 4);
    j.workers = 13;
    cr_expect_eq(sched_shape(n, 3, &j), 0, "13 is prime: one per node, which 3 nodes cannot hold");
    j.workers = 16;
    cr_expect_eq(sched_shape(n, 3, &j), 0, "more than the cluster holds: never fits");
    j = job(1, 4, 2, 1, 0);
    cr_expect_eq(sched_shape(n, 3, &j), 2, "workers_per_node is honoured");
    j.per_node = 3;
    cr_expect_eq(sched_shape(n, 3, &j), 0, "4 workers cannot be 3 per node");
    j = job(1, 2, 0, 1, 1);
    cr_expect_eq(sched_shape(n, 3, &j), 0, "GPU workers need GPU nodes");
}

Test(sched, placement_is_all_or_nothing)
{
    sched_node n[3] = {node(1, 4, 8192, 0), node(2, 4, 8192, 0), node(3, 4, 8192, 0)};
    int idx[3];
    sched_job a = job(1, 8, 4, 1, 0); /* 2 nodes of 4 */
    cr_assert_eq(sched_place(n, 3, &a, 4, idx), 0);
    cr_expect_neq(idx[0], idx[1]);
    sched_job b = job(2, 8, 4, 1, 0); /* needs 2 more full nodes: only 1 is left */
    sched_node before[3];
    memcpy(before, n, sizeof n);
    cr_expect_eq(sched_place(n, 3, &b, 4, idx), -1);
    cr_expect_eq(memcmp(before, n, sizeof n), 0, "a failed gang took something");
    sched_job c = job(3, 4, 4, 1, 0);
    cr_expect_eq(sched_place(n, 3, &c, 4, idx), 0, "the last node still holds a 4-worker gang");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(n[i].free_cpus, 0);
}

Test(sched, skips_unusable_nodes_and_prefers_the_tightest_fit)
{
    sched_node n[3] = {node(1, 16, 65536, 0), node(2, 4, 8192, 0), node(3, 64, 262144, 0)};
    n[2].usable = 0; /* drained or down */
    int idx[1];
    sched_job small = job(1, 4, 4, 1, 0);
    cr_assert_eq(sched_place(n, 3, &small, 4, idx), 0);
    cr_expect_eq(n[idx[0]].id, 2, "a 4-worker gang belongs on the 4-CPU node");
    sched_job big = job(2, 32, 32, 1, 0);
    cr_expect_eq(sched_place(n, 3, &big, 32, idx), -1, "only the unusable node could hold it");
    cr_expect_eq(sched_shape(n, 3, &big), 0);
}

Test(sched, memory_and_gpus_bound_a_node)
{
    sched_node n[1] = {node(1, 64, 4096, 8)};
    sched_job j = job(1, 8, 0, 1, 0);
    j.mem = 1024;
    cr_expect_eq(sched_fit(64, 4096, 8, &j), 4, "memory holds 4");
    j.mem = 512;
    j.gpus = 2;
    cr_expect_eq(sched_fit(64, 4096, 8, &j), 4, "GPUs hold 4");
    int idx[2];
    j.workers = 4;
    cr_expect_eq(sched_place(n, 1, &j, 4, idx), 0);
    cr_expect_eq(n[0].free_gpus, 0);
}

Test(sched, fair_share_decays_by_half_each_half_life)
{
    int64_t hour = SCHED_HALF_LIFE_MS, now = 100 * hour;
    /* One CPU for one second, just now: about one CPU-second. */
    double recent = sched_decayed_use(1, 0, now - 1000, now, now);
    cr_expect(recent > 0.999 && recent < 1.0, "%f", recent);
    /* The same second one half-life ago weighs half. */
    double old = sched_decayed_use(1, 0, now - hour - 1000, now - hour, now);
    cr_expect(old > 0.4995 && old < 0.5005, "%f", old);
    /* A GPU weighs SCHED_GPU_WEIGHT CPUs; a running worker counts up to now. */
    double gpu = sched_decayed_use(0, 1, now - 1000, 0, now);
    cr_expect_eq(gpu, 0, "an end of 0 is not 'running' here: the caller passes now");
    gpu = sched_decayed_use(0, 1, now - 1000, now, now);
    cr_expect(gpu > SCHED_GPU_WEIGHT * 0.999, "%f", gpu);
    /* A whole day of 8 CPUs, a day ago, weighs little beside an hour now. */
    double day = sched_decayed_use(8, 0, now - 48 * hour, now - 24 * hour, now);
    double hour_now = sched_decayed_use(8, 0, now - hour, now, now);
    cr_expect_lt(day, hour_now / 1000);
}

/* ---- sched_plan: a pass's policy on synthetic snapshots ---- */

#include "scheduler/sched_plan.h"

/* A snapshot built up by a test (view() points a sched_snapshot at it). */
struct snap {
    sched_node nodes[8];
    size_t nn;
    sched_active act[8];
    size_t na;
    sched_alloc al[8];
    size_t nal;
    sched_pending pend[8];
    size_t np;
    sched_usage use[4];
    size_t nu;
    sched_quota q[4];
    size_t nq;
    sched_budget b[4];
    size_t nb;
};

#define NOW 1000000000LL

static sched_snapshot view(const struct snap *s)
{
    return (sched_snapshot){NOW,   s->nodes, s->nn, s->act, s->na, s->al, s->nal, s->pend,
                            s->np, s->use,   s->nu, s->q,   s->nq, s->b,  s->nb};
}

/* Plans over s's view into d; the test stops when planning fails. */
static void plan(const struct snap *s, sched_decisions *d)
{
    sched_snapshot v = view(s);
    cr_assert_eq(sched_plan(&v, d), 0);
}

/* A pending job of tenant: workers of cpus CPUs each, submitted at id,
 * bound to max_rt seconds (0: none), holding hold USD to admit. */
static void add_job(struct snap *s, int64_t id, int64_t tenant, int64_t workers, int64_t cpus,
                    int64_t max_rt, int64_t hold)
{
    sched_pending t = {{id, tenant, 0, 0.0, id, workers, 0, cpus, 1024, 0, 0},
                       1,
                       100,
                       max_rt,
                       hold,
                       hold,
                       max_rt ? hold : -1,
                       "USD"};
    s->pend[s->np++] = t;
}

/* A running job of tenant: workers of cpus CPUs on node (taken from its
 * free room), ending at end. */
static void add_running(struct snap *s, int64_t id, int64_t tenant, int64_t node_idx,
                        int64_t workers, int64_t cpus, int64_t end)
{
    s->act[s->na++] = (sched_active){id, tenant, end, workers, cpus, 1024, 0};
    s->al[s->nal++] = (sched_alloc){id, s->nodes[node_idx].id, workers};
    s->nodes[node_idx].free_cpus -= workers * cpus;
    s->nodes[node_idx].free_mem -= workers * 1024;
}

static const sched_placement *placed(const sched_decisions *d, int64_t id)
{
    for (size_t i = 0; i < d->nplaced; i++)
        if (d->placed[i].job_id == id)
            return &d->placed[i];
    return NULL;
}

static const sched_wait *waiting(const sched_decisions *d, int64_t id)
{
    for (size_t i = 0; i < d->nwaits; i++)
        if (d->waits[i].job_id == id)
            return &d->waits[i];
    return NULL;
}

/* A whole gang or nothing, and the room it takes is gone for the next job. */
Test(plan, places_whole_gangs_and_takes_their_room)
{
    struct snap s = {0};
    s.nodes[s.nn++] = node(1, 4, 8192, 0);
    s.nodes[s.nn++] = node(2, 4, 8192, 0);
    add_job(&s, 1, 1, 8, 1, 0, 10);
    add_job(&s, 2, 1, 1, 1, 0, 10);
    sched_decisions d;
    plan(&s, &d);
    const sched_placement *p = placed(&d, 1);
    cr_assert_not_null(p, "the 8-worker gang fills both nodes");
    cr_expect_eq(p->per_node, 4);
    cr_expect(p->nodes[0] != p->nodes[1] && p->nodes[0] >= 1 && p->nodes[0] <= 2 &&
              p->nodes[1] >= 1 && p->nodes[1] <= 2);
    cr_expect_eq(p->attempt, 1);
    cr_expect_eq(p->hold, 10);
    const sched_wait *w = waiting(&d, 2);
    cr_assert_not_null(w, "no room is left for job 2");
    cr_expect_eq(w->pos, 1);
    cr_expect_str_eq(w->reason, "resources: waiting for room on the nodes");
    cr_expect_null(placed(&d, 2));
    sched_decisions_free(&d);
}

/* EASY backfill: behind a head that waits for a bounded job to end, a job
 * that would end before the head's reservation starts; one that would end
 * after it, or has no bound, waits, though it fits. */
Test(plan, backfill_starts_only_jobs_that_end_before_the_head)
{
    struct snap s = {0};
    s.nodes[s.nn++] = node(1, 8, 65536, 0);
    add_running(&s, 10, 2, 0, 6, 1, NOW + 100000); /* 2 CPUs free for 100 s */
    add_job(&s, 1, 1, 4, 1, 0, 10);   /* the head: needs 4, gets them in 100 s */
    add_job(&s, 2, 1, 1, 1, 50, 10);  /* ends at 50 s: backfilled */
    add_job(&s, 3, 1, 1, 1, 200, 10); /* ends at 200 s: would delay the head */
    add_job(&s, 4, 1, 1, 1, 0, 10);   /* no bound: would delay the head */
    add_job(&s, 5, 1, 1, 1, 30, 10);  /* ends at 30 s: backfilled */
    sched_decisions d;
    plan(&s, &d);
    cr_expect_null(placed(&d, 1));
    cr_expect_str_eq(waiting(&d, 1)->reason, "resources: waiting for room on the nodes");
    cr_expect_not_null(placed(&d, 2), "a job ending before the head's start is backfilled");
    cr_expect_not_null(placed(&d, 5), "a job ending before the head's start is backfilled");
    for (int64_t id = 3; id <= 4; id++) {
        const sched_wait *w = waiting(&d, id);
        cr_assert_not_null(w, "job %lld", (long long)id);
        cr_expect_str_eq(w->reason,
                         "resources: waiting behind job 1 (backfill only for jobs whose "
                         "max_runtime_seconds ends before its start)");
    }
    cr_expect_eq(waiting(&d, 1)->pos, 1);
    cr_expect_eq(waiting(&d, 3)->pos, 2);
    cr_expect_eq(waiting(&d, 4)->pos, 3);
    cr_expect_eq(d.nplaced, 2);
    sched_decisions_free(&d);
}

/* A head waiting for a job without a bound has no reservation time: a job
 * behind it with a bound may start where it fits; one without a bound
 * waits behind the head (the reason names it). */
Test(plan, behind_a_head_with_no_reservation_only_bounded_jobs_start)
{
    struct snap s = {0};
    s.nodes[s.nn++] = node(1, 8, 65536, 0);
    add_running(&s, 10, 2, 0, 6, 1, INT64_MAX);
    add_job(&s, 1, 1, 4, 1, 0, 10);
    add_job(&s, 2, 1, 1, 1, 0, 10);
    add_job(&s, 3, 1, 1, 1, 5, 10);
    sched_decisions d;
    plan(&s, &d);
    cr_expect_eq(d.nplaced, 1);
    cr_expect_not_null(placed(&d, 3));
    cr_assert_not_null(waiting(&d, 2));
    cr_expect_str_eq(waiting(&d, 2)->reason, "resources: waiting behind job 1");
    sched_decisions_free(&d);
}

/* Fair share: of two tenants' jobs of equal priority, the tenant that used
 * less lately goes first, though its job came later. */
Test(plan, fair_share_puts_the_lighter_tenant_first)
{
    struct snap s = {0};
    s.nodes[s.nn++] = node(1, 1, 8192, 0);
    add_job(&s, 1, 1, 1, 1, 0, 10);
    add_job(&s, 2, 2, 1, 1, 0, 10);
    sched_decisions d;
    plan(&s, &d);
    cr_expect_not_null(placed(&d, 1), "no use on record: submit order");
    sched_decisions_free(&d);
    s.use[s.nu++] = (sched_usage){1, 500.0};
    s.use[s.nu++] = (sched_usage){2, 10.0};
    plan(&s, &d);
    cr_expect_not_null(placed(&d, 2), "tenant 2 used less: its job first");
    cr_assert_not_null(waiting(&d, 1));
    cr_expect_eq(waiting(&d, 1)->pos, 1);
    sched_decisions_free(&d);
}

/* A member's job at the top priority does not go ahead of another tenant's
 * earlier one: the plan fills in who has waited longest. */
Test(plan, priority_does_not_cross_tenants)
{
    struct snap s = {0};
    s.nodes[s.nn++] = node(1, 1, 8192, 0);
    add_job(&s, 1, 1, 1, 1, 0, 10);
    add_job(&s, 2, 2, 1, 1, 0, 10);
    s.pend[1].job.priority = SCHED_PRIORITY_MAX;
    sched_decisions d;
    plan(&s, &d);
    cr_expect_not_null(placed(&d, 1), "tenant 2's priority put it ahead of tenant 1");
    cr_assert_not_null(waiting(&d, 2));
    sched_decisions_free(&d);
    s.pend[1].job.priority = SCHED_PRIORITY_MAX + 1; /* a platform admin's tier */
    plan(&s, &d);
    cr_expect_not_null(placed(&d, 2), "the tier did not go first");
    sched_decisions_free(&d);
}

/* A quota holds back its tenant only, and counts what the same pass placed. */
Test(plan, quota_holds_back_its_tenant_and_no_other)
{
    struct snap s = {0};
    s.nodes[s.nn++] = node(1, 16, 65536, 0);
    add_running(&s, 10, 1, 0, 1, 1, INT64_MAX);
    s.q[s.nq++] = (sched_quota){1, 1, -1, -1, -1};
    s.q[s.nq++] = (sched_quota){2, -1, -1, 3, -1};
    add_job(&s, 1, 1, 1, 1, 0, 10); /* tenant 1 runs one already */
    add_job(&s, 2, 2, 2, 1, 0, 10); /* 2 of tenant 2's 3 CPUs */
    add_job(&s, 3, 2, 2, 1, 0, 10); /* 4 > 3 */
    add_job(&s, 4, 2, 1, 1, 0, 10); /* 3: fits the quota */
    add_job(&s, 5, 3, 4, 1, 0, 10); /* no quota */
    sched_decisions d;
    plan(&s, &d);
    cr_assert_not_null(waiting(&d, 1));
    cr_expect_str_eq(waiting(&d, 1)->reason, "quota: max_running_jobs 1 reached");
    cr_expect_not_null(placed(&d, 2));
    cr_assert_not_null(waiting(&d, 3));
    cr_expect_str_eq(waiting(&d, 3)->reason, "quota: max_cpus 3");
    cr_expect_not_null(placed(&d, 4), "a smaller job within the quota is not held back");
    cr_expect_not_null(placed(&d, 5));
    sched_decisions_free(&d);
}

/* A budget admits what its money holds, each admission taking its hold
 * from what is left; a job priced in another currency never starts; a
 * tenant without a budget is not limited. */
Test(plan, budget_admits_what_the_money_holds)
{
    struct snap s = {0};
    s.nodes[s.nn++] = node(1, 16, 65536, 0);
    s.b[s.nb++] = (sched_budget){1, 150, 200, 50, "USD"};
    add_job(&s, 1, 1, 1, 1, 60, 100);
    add_job(&s, 2, 1, 1, 1, 60, 100);
    add_job(&s, 3, 1, 1, 1, 60, 40);
    add_job(&s, 4, 1, 1, 1, 60, 1);
    snprintf(s.pend[3].currency, sizeof s.pend[3].currency, "EUR");
    add_job(&s, 5, 2, 1, 1, 60, 1000000);
    add_job(&s, 6, 1, 1, 1, 60, -1); /* its price is past the money range */
    sched_decisions d;
    plan(&s, &d);
    cr_expect_not_null(placed(&d, 1));
    cr_assert_not_null(waiting(&d, 2));
    cr_expect_str_eq(waiting(&d, 2)->reason,
                     "budget: admitting it holds 100 USD, 50 USD is left to hold (balance 200, "
                     "set aside for running jobs 50)");
    cr_expect_not_null(placed(&d, 3), "40 of the 50 left");
    cr_assert_not_null(waiting(&d, 4));
    cr_expect_str_eq(waiting(&d, 4)->reason,
                     "budget: the job is priced in EUR, the tenant's account is in USD");
    cr_expect_not_null(placed(&d, 5), "tenant 2 has no budget");
    cr_assert_not_null(waiting(&d, 6));
    cr_expect_str_eq(waiting(&d, 6)->reason,
                     "budget: the job's price over its run is past what an account can hold");
    sched_decisions_free(&d);
}

/* A job whose previous attempt still has workers waits for them; a job
 * that no usable node can hold, or a cluster without nodes, say so. */
Test(plan, retries_and_clusters_that_cannot_hold_a_job_say_why)
{
    struct snap s = {0};
    s.nodes[s.nn++] = node(1, 4, 8192, 0);
    s.al[s.nal++] = (sched_alloc){1, 1, 1}; /* attempt 1's worker, stopping */
    add_job(&s, 1, 1, 1, 1, 0, 10);
    add_job(&s, 2, 1, 8, 1, 0, 10);
    sched_decisions d;
    plan(&s, &d);
    cr_expect_str_eq(waiting(&d, 1)->reason,
                     "retry: waiting for the previous attempt's workers to stop");
    cr_expect_str_eq(waiting(&d, 2)->reason, "resources: no usable nodes can hold this job now");
    sched_decisions_free(&d);
    s.nn = 0;
    s.nal = 0;
    plan(&s, &d);
    cr_expect_str_eq(waiting(&d, 1)->reason, "resources: no node has registered yet");
    sched_decisions_free(&d);
}

/* The plan changes nothing it is given: the same snapshot planned twice
 * gives the same decisions. */
Test(plan, leaves_its_snapshot_as_it_was)
{
    struct snap s = {0};
    s.nodes[s.nn++] = node(1, 8, 65536, 0);
    s.nodes[s.nn++] = node(2, 8, 65536, 0);
    add_running(&s, 10, 2, 0, 6, 1, NOW + 100000);
    s.b[s.nb++] = (sched_budget){1, 150, 200, 50, "USD"};
    add_job(&s, 1, 1, 4, 1, 0, 100);
    add_job(&s, 2, 1, 12, 1, 0, 10);
    add_job(&s, 3, 2, 1, 1, 50, 10);
    struct snap before = s;
    sched_snapshot v = view(&s);
    sched_decisions d1, d2;
    cr_assert_eq(sched_plan(&v, &d1), 0);
    cr_expect_eq(memcmp(&before, &s, sizeof s), 0, "the snapshot was changed");
    cr_assert_eq(sched_plan(&v, &d2), 0);
    cr_assert_eq(d1.nplaced, d2.nplaced);
    cr_assert_eq(d1.nwaits, d2.nwaits);
    cr_expect(d1.nplaced > 0 && d1.nwaits > 0);
    for (size_t i = 0; i < d1.nplaced; i++) {
        cr_expect_eq(d1.placed[i].job_id, d2.placed[i].job_id);
        cr_expect_eq(d1.placed[i].nodes[0], d2.placed[i].nodes[0]);
    }
    for (size_t i = 0; i < d1.nwaits; i++)
        cr_expect_str_eq(d1.waits[i].reason, d2.waits[i].reason);
    sched_decisions_free(&d1);
    sched_decisions_free(&d2);
}
