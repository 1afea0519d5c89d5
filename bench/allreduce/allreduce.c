/*
 * bench/allreduce: bus bandwidth of comm_allreduce (float32, sum, in place)
 * for sizes from 4 KiB to 64 MiB, over N ranks (default 2) on loopback,
 * each rank a process of its own: over Gloo, then over shared memory (the
 * ranks being on one node), one table each.  busbw follows nccl-tests:
 * algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
 *
 *   bench_allreduce [RANKS] [PORT]
 *   bench_allreduce RANKS PORT MASTER_ADDR RANK   one rank, the others run
 *                                                 elsewhere (bench/overlay,
 *                                                 bench/allreduce/two-nodes);
 *                                                 WORKER_PER_NODE=K: K ranks a
 *                                                 node share memory
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "worker/comm.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* shm: the ranks per node that share memory (0: Gloo only). */
static int run_rank(int rank, int n, int port, const char *master, int shm)
{
    struct comm_config cfg = { .master_addr = master, .master_port = port,
                               .world_size = n, .rank = rank,
                               .local_rank = shm ? rank % shm : rank,
                               .backend = COMM_BACKEND_GLOO, .timeout_ms = 60000,
                               .local_world_size = shm, .no_shm = !shm,
                               .shm_buffer_bytes = 64u << 20 };
    comm *c;
    char err[1024];
    size_t max = 64u << 20;
    float *own = NULL, *buf;

    if (comm_init(&cfg, &c, err, sizeof err) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    /* over shared memory the buffer is the rank's slot: reduced in place */
    buf = comm_buffer(c, max / sizeof(float));
    if (!buf && !(buf = own = malloc(max))) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        return 1;
    }
    for (size_t i = 0; i < max / sizeof(float); i++)
        buf[i] = (float)(i % 7);
    if (rank == 0)
        printf("%12s %10s %12s %12s   (%d ranks, %s%s, rank 0 at %s)\n", "bytes", "us/op",
               "algbw GB/s", "busbw GB/s", n, comm_transport(c), own ? "" : ", in place", master);
    for (size_t bytes = 4096; bytes <= max; bytes *= 4) {
        size_t count = bytes / sizeof(float);
        int iters = bytes <= (1u << 20) ? 200 : bytes <= (16u << 20) ? 20 : 5;
        double t0, dt;
        for (int i = 0; i < 3; i++)
            if (comm_allreduce(c, buf, count, COMM_SUM) < 0)
                goto fail;
        if (comm_barrier(c) < 0)
            goto fail;
        t0 = now_s();
        for (int i = 0; i < iters; i++)
            if (comm_allreduce(c, buf, count, COMM_SUM) < 0)
                goto fail;
        dt = (now_s() - t0) / iters;
        if (rank == 0) {
            double alg = bytes / dt / 1e9;
            printf("%12zu %10.1f %12.3f %12.3f\n", bytes, dt * 1e6, alg,
                   alg * 2.0 * (n - 1) / n);
        }
    }
    if (comm_finish(c) < 0)
        goto fail;
    comm_destroy(c);
    free(own);
    return 0;
fail:
    fprintf(stderr, "rank %d: %s\n", rank, comm_errmsg(c));
    return 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2;
    int port = argc > 2 ? atoi(argv[2]) : 29400 + (int)(getpid() % 500);
    int status = 0;
    int one = argc > 4 ? atoi(argv[4]) : -1;
    if (n < 2 || n > 64 || port <= 0 || port > 65535 || argc == 4 || argc > 5 ||
        (argc == 5 && (one < 0 || one >= n))) {
        fprintf(stderr, "usage: bench_allreduce [RANKS 2-64] [PORT]\n"
                        "       bench_allreduce RANKS PORT MASTER_ADDR RANK\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 5) { /* WORKER_PER_NODE set: its ranks of one node share memory */
        const char *per = getenv("WORKER_PER_NODE");
        return run_rank(one, n, port, argv[3], per && atoi(per) > 1 ? atoi(per) : 0);
    }
    for (int shm = 0; shm <= 1; shm++) {
        for (int r = 0; r < n; r++) {
            pid_t p = fork();
            if (p == 0)
                _exit(run_rank(r, n, port + shm, "127.0.0.1", shm ? n : 0));
            if (p < 0) {
                perror("fork");
                return 1;
            }
        }
        for (int r = 0; r < n; r++) {
            int st;
            if (wait(&st) > 0 && (!WIFEXITED(st) || WEXITSTATUS(st) != 0))
                status = 1;
        }
    }
    return status;
}
