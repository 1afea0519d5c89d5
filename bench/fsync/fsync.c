/*
 * bench/fsync: the latency of the disk's fsync, which bounds the latency of
 * every durable write (cohortd commits with synchronous=FULL).  Appends
 * 4 KiB and fsyncs, repeatedly, for a few seconds, and prints percentiles.
 * usage: bench_fsync [DIR] [SECONDS]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    double secs = argc > 2 ? atof(argv[2]) : 10;
    char path[4096];
    snprintf(path, sizeof path, "%s/.cohort-fsync-probe", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    size_t cap = 1 << 20, n = 0;
    double *lat = malloc(cap * sizeof *lat);
    char block[4096];
    memset(block, 'x', sizeof block);
    double end = now_ms() + secs * 1000;
    int rc = 0;
    while (lat && n < cap && now_ms() < end) {
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block) {
            perror("write");
            rc = 1;
            break;
        }
        double t0 = now_ms();
        if (fsync(fd) != 0) {
            perror("fsync");
            rc = 1;
            break;
        }
        lat[n++] = now_ms() - t0;
    }
    close(fd);
    unlink(path);
    if (!lat || n == 0) {
        free(lat);
        return 1;
    }
    qsort(lat, n, sizeof *lat, cmp);
    size_t over = 0;
    for (size_t i = 0; i < n; i++)
        over += lat[i] > 50;
    printf("RESULT op=fsync samples=%zu p50_ms=%.2f p99_ms=%.2f p999_ms=%.2f max_ms=%.1f "
           "over_50ms=%zu\n",
           n, lat[n / 2], lat[n * 99 / 100], lat[n * 999 / 1000], lat[n - 1], over);
    free(lat);
    return rc;
}
