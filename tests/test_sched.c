/*
 * sched: queue order, job shape and all-or-nothing gang placement on
 * synthetic clusters.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "scheduler/sched.h"

static sched_node node(int64_t id, int64_t cpus, int64_t mem, int64_t gpus)
{
    return (sched_node){id, 1, cpus, mem, gpus, cpus, mem, gpus};
}

static sched_job job(int64_t id, int64_t workers, int64_t per_node, int64_t cpus, int64_t gpus)
{
    return (sched_job){id, 1, 0, 0.0, id, workers, per_node, cpus, 1024, gpus};
}

Test(sched, queue_order_is_priority_then_usage_then_submit_time)
{
    sched_job j[4] = {job(1, 1, 0, 1, 0), job(2, 1, 0, 1, 0), job(3, 1, 0, 1, 0), job(4, 1, 0, 1, 0)};
    j[0].created_at = 10; /* oldest, low priority */
    j[1].priority = 5;
    j[1].created_at = 40;
    j[2].created_at = 20;
    j[2].usage = 100; /* a heavy tenant */
    j[3].created_at = 30;
    sched_order(j, 4);
    cr_expect_eq(j[0].id, 2, "priority first");
    cr_expect_eq(j[1].id, 1, "then the lighter tenants in submit order");
    cr_expect_eq(j[2].id, 4);
    cr_expect_eq(j[3].id, 3, "the heavy tenant last");
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
