/*
 * The job program of bench/e2e: records the wall-clock time it started, in
 * nanoseconds, in $WORKSPACE/started/$BENCH_I, and exits at once.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const char *ws = getenv("WORKSPACE"), *i = getenv("BENCH_I");
    if (!ws || !i)
        return 2;
    char path[4096], line[32];
    snprintf(path, sizeof path, "%s/started/%s", ws, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return 1;
    int n = snprintf(line, sizeof line, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    int ok = write(fd, line, (size_t)n) == n;
    close(fd);
    return ok ? 0 : 1;
}
