/*
 * bench/sched: the scheduler as a library on a synthetic cluster.  A mixed
 * queue of gang jobs (1 to 64 workers of CPU and GPU specs) is shaped and
 * placed in queue order; when the cluster is full its capacity is handed
 * back (not timed), so the figure is the cost of placement alone.  Prints
 * placements per second and the time per placement for each cluster size.
 * usage: bench_sched [JOBS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scheduler/sched.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void cluster(sched_node *n, int count)
{
    for (int i = 0; i < count; i++) {
        int gpu = i % 5 == 4; /* one node in five has GPUs */
        n[i] = (sched_node){i + 1, 1, gpu ? 96 : 64, gpu ? 1048576 : 262144, gpu ? 8 : 0,
                            gpu ? 96 : 64, gpu ? 1048576 : 262144, gpu ? 8 : 0, 0};
    }
}

static void refill(sched_node *n, int count)
{
    for (int i = 0; i < count; i++) {
        n[i].free_cpus = n[i].cap_cpus;
        n[i].free_mem = n[i].cap_mem;
        n[i].free_gpus = n[i].cap_gpus;
    }
}

int main(int argc, char **argv)
{
    int jobs = argc > 1 ? atoi(argv[1]) : 100000;
    static const int sizes[] = {1000, 2000, 5000, 10000};
    static const int64_t workers[] = {1, 2, 4, 8, 16, 32, 64};
    sched_job *q = malloc((size_t)jobs * sizeof *q);
    srand(42);
    for (int i = 0; i < jobs; i++) {
        int kind = rand() % 10; /* 6 small CPU, 3 medium CPU, 1 GPU */
        int64_t w = workers[rand() % 7];
        q[i] = (sched_job){i + 1, rand() % 50, rand() % 3, 0.0, i, w, 0,
                           kind < 6 ? 1 : kind < 9 ? 4 : 8, kind < 6 ? 2048 : kind < 9 ? 8192 : 65536,
                           kind == 9 ? 1 : 0, 0};
    }
    sched_order(q, jobs);
    double base_us = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int nn = sizes[k];
        sched_node *n = malloc((size_t)nn * sizeof *n);
        int *idx = malloc((size_t)nn * sizeof *idx);
        cluster(n, nn);
        long placed = 0, refills = 0;
        double t0 = now_s();
        sched_cluster *c = sched_cluster_new(n, nn); /* once per pass, as cohortd does */
        double timed = now_s() - t0;
        for (int i = 0; i < jobs; i++) {
            t0 = now_s();
            int64_t shape = sched_cluster_shape(c, &q[i]);
            int ok = shape > 0 && sched_cluster_place(c, &q[i], shape, idx) == 0;
            timed += now_s() - t0;
            if (ok) {
                placed++;
            } else if (shape > 0) {
                /* The cluster is full: everything ends (untimed). */
                sched_cluster_free(c);
                refill(n, nn);
                c = sched_cluster_new(n, nn);
                refills++;
                t0 = now_s();
                ok = sched_cluster_place(c, &q[i], shape, idx) == 0;
                timed += now_s() - t0;
                placed += ok;
            }
        }
        sched_cluster_free(c);
        double us = timed / placed * 1e6;
        if (k == 0)
            base_us = us;
        printf("RESULT op=sched nodes=%d jobs=%d placed=%ld refills=%ld seconds=%.2f "
               "placements_per_s=%.0f us_per_placement=%.2f growth_vs_1000_nodes=%.2f\n",
               nn, jobs, placed, refills, timed, placed / timed, us, us / base_us);
        free(n);
        free(idx);
    }
    free(q);
    return 0;
}
