/*
 * A job program for the tests: the ranks meet at MASTER_ADDR:MASTER_PORT
 * the way env:// rendezvous does.  Rank 0 listens on MASTER_PORT and hears
 * from every other rank; the others connect (retrying for up to 30 s), say
 * who they are and wait for rank 0's answer.  Exits 0 when all met.
 *
 * `rendezvous udp ADDRESS PORT` instead sends one datagram there (busybox's
 * nc speaks no UDP): exits 0 once it is sent.
 *
 * `rendezvous hold-mapped FILE BYTES SECONDS` writes BYTES into FILE,
 * deletes it, keeps it mapped, closes its descriptor and sleeps: a file
 * nobody can name, held by a mapping alone (the storage quota's test).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int env_int(const char *k)
{
    const char *v = getenv(k);
    return v ? atoi(v) : -1;
}

/* One datagram "from a job" to address:port: 0 when sent. */
static int send_udp(const char *address, const char *port)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || inet_pton(AF_INET, address, &to.sin_addr) != 1)
        return 2;
    ssize_t n = sendto(fd, "from a job", 10, 0, (struct sockaddr *)&to, sizeof to);
    close(fd);
    return n == 10 ? 0 : 1;
}

static int hold_mapped(const char *path, long bytes, int seconds)
{
    static char block[65536];
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || unlink(path) != 0)
        return 1;
    memset(block, 'x', sizeof block);
    for (long done = 0; done < bytes; done += (long)sizeof block)
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block)
            return 1;
    fsync(fd);
    void *m = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return 1;
    close(fd);
    sleep((unsigned)seconds);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "udp"))
        return send_udp(argv[2], argv[3]);
    if (argc == 5 && !strcmp(argv[1], "hold-mapped"))
        return hold_mapped(argv[2], atol(argv[3]), atoi(argv[4]));
    int rank = env_int("RANK"), world = env_int("WORLD_SIZE"), port = env_int("MASTER_PORT");
    const char *addr = getenv("MASTER_ADDR");
    char line[256];
    if (rank < 0 || world < 1 || port <= 0 || !addr) {
        fprintf(stderr, "the rank environment is incomplete\n");
        return 2;
    }
    if (rank == 0) {
        int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 64) != 0) {
            fprintf(stderr, "rank 0 cannot listen on port %d: %s\n", port, strerror(errno));
            return 1;
        }
        for (int i = 1; i < world; i++) {
            int c = accept(s, NULL, NULL);
            ssize_t n = c >= 0 ? read(c, line, sizeof line - 1) : -1;
            if (n <= 0)
                return 1;
            line[n] = '\0';
            printf("rank 0 heard: %s", line);
            if (write(c, "ok\n", 3) != 3)
                return 1;
            close(c);
        }
        printf("rank 0 met all %d ranks\n", world);
        return 0;
    }
    /* The agents give numeric addresses: no resolver (this program is static). */
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &to.sin_addr) != 1) {
        fprintf(stderr, "MASTER_ADDR %s is not an IPv4 address\n", addr);
        return 1;
    }
    for (int tries = 0; tries < 300; tries++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&to, sizeof to) == 0) {
            int n = snprintf(line, sizeof line, "rank %d of %d\n", rank, world);
            ssize_t got = write(s, line, (size_t)n) == n ? read(s, line, sizeof line - 1) : -1;
            close(s);
            if (got > 0 && !strncmp(line, "ok", 2)) {
                printf("rank %d reached rank 0 at %s:%d\n", rank, addr, port);
                return 0;
            }
            return 1;
        }
        close(s);
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "rank %d could not reach %s:%d\n", rank, addr, port);
    return 1;
}
