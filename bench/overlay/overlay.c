/*
 * bench/overlay: what a job's own network costs its allreduce.  Two hosts
 * of the bench's own (network namespaces on a bridge, as the tests make
 * them), one rank of bench_allreduce on each, first over the hosts' own
 * addresses (an agent's --network host), then over the job's overlay as
 * an agent builds it (agent/netns.c: a VXLAN device in a namespace of the
 * job on each host), RUNS times in turn (default 7: this VM's single runs
 * scatter by +-20%), printing each run's busbw and then the median of
 * each size for both, with their ratio.  Then two ranks on one host: its
 * loopback against the loopback of a job's namespace (bench_allreduce's
 * tables, once).
 *
 *   bench_overlay BUILD_DIR [RUNS]      (as root; needs iproute2)
 */
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/netns.h"
#include "lib/util.h"

static char tag[32], ip[] = "/usr/sbin/ip", bridge[] = "/usr/sbin/bridge";
static int net;

static void cleanup(void)
{
    util_system("for n in h1 h2 j1 j2; do ip netns del %s-$n 2>/dev/null; done; "
                "ip link del %s-br 2>/dev/null; true", tag, tag);
}

#define MAX_SIZES 16
#define MAX_RUNS 25

/* Runs bench_allreduce RANKS PORT MASTER RANK in namespace ns, its output
 * to out (-1: stdout); its pid. */
static pid_t rank(const char *bin, const char *ns, int ranks, int port, const char *master,
                  int r, int out)
{
    char n[16], p[16], rs[16];
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(p, sizeof p, "%d", port);
    snprintf(rs, sizeof rs, "%d", r);
    pid_t pid = fork();
    if (pid == 0) {
        if (out >= 0)
            dup2(out, 1);
        if (r < 0)
            execl(ip, ip, "netns", "exec", ns, bin, n, p, (char *)NULL);
        else
            execl(ip, ip, "netns", "exec", ns, bin, n, p, master, rs, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* One run of a rank in each of ns0 and ns1: the busbw of each size of rank
 * 0's table into bw[] and the sizes into bytes[]; their count, or -1. */
static int both(const char *bin, const char *ns0, const char *ns1, const char *master, int port,
                long bytes[MAX_SIZES], double bw[MAX_SIZES])
{
    int st0, st1, fds[2], quiet = open("/dev/null", O_WRONLY | O_CLOEXEC), n = 0;
    if (quiet < 0 || pipe(fds) != 0)
        return -1;
    pid_t a = rank(bin, ns0, 2, port, master, 0, fds[1]);
    pid_t b = rank(bin, ns1, 2, port, master, 1, quiet);
    close(fds[1]);
    close(quiet);
    FILE *f = fdopen(fds[0], "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        double us, alg;
        if (n < MAX_SIZES && sscanf(line, "%ld %lf %lf %lf", &bytes[n], &us, &alg, &bw[n]) == 4)
            n++;
    }
    if (f)
        fclose(f);
    else
        close(fds[0]);
    waitpid(a, &st0, 0);
    waitpid(b, &st1, 0);
    return st0 == 0 && st1 == 0 && n > 0 ? n : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The two hosts' allreduce, host network and overlay in turn, runs times:
 * each run's figures, then the medians.  0 or -1. */
static int two_hosts(const char *bin, const char *h1, const char *h2, const char *j1,
                     const char *j2, int runs)
{
    static double bw[2][MAX_SIZES][MAX_RUNS];
    long bytes[MAX_SIZES];
    double one[MAX_SIZES];
    char master[32];
    int sizes = 0;
    snprintf(master, sizeof master, "10.213.%d.2", net);
    printf("== two hosts, one rank each: gloo busbw GB/s, the hosts' own network (--network "
           "host) and the job's overlay (--network job, VXLAN) in turn\n");
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < 2; k++) {
            int n = both(bin, k ? j1 : h1, k ? j2 : h2, k ? "10.77.0.1" : master,
                         29500 + 2 * r + k, bytes, one);
            if (n < 0 || (sizes && n != sizes))
                return -1;
            sizes = n;
            printf("run %d %-8s", r + 1, k ? "overlay" : "host");
            for (int i = 0; i < n; i++) {
                bw[k][i][r] = one[i];
                printf(" %6.3f", one[i]);
            }
            printf("\n");
        }
    printf("== medians of %d runs\n       bytes   host GB/s   overlay GB/s   overlay/host\n",
           runs);
    for (int i = 0; i < sizes; i++) {
        double h = median(bw[0][i], runs), o = median(bw[1][i], runs);
        printf("%12ld %11.3f %14.3f %14.2f\n", bytes[i], h, o, h > 0 ? o / h : NAN);
    }
    return 0;
}

/* The job's namespace NAME made by the agent's own code, from inside host
 * namespace host (where the overlay's UDP socket lies). */
static int job_ns(const char *host, const char *name, int me)
{
    pid_t p = fork();
    if (p == 0) {
        char path[300], err[512];
        snprintf(path, sizeof path, "/run/netns/%s", host);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        netns_peer peer;
        netns_overlay ov = {.vni = 77, .prefix_len = 16, .port = 4789, .npeers = 1,
                            .peers = &peer};
        peer.port = 4789;
        unsigned char n8 = (unsigned char)net, m = (unsigned char)(me & 1);
        snprintf(ov.address, sizeof ov.address, "10.77.0.%u", m + 1u);
        snprintf(ov.local, sizeof ov.local, "10.213.%u.%u", n8, m + 2u);
        snprintf(peer.address, sizeof peer.address, "10.77.0.%u", 2u - m);
        snprintf(peer.node, sizeof peer.node, "10.213.%u.%u", n8, 3u - m);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
            perror(path);
            _exit(1);
        }
        if (netns_ensure(ip, bridge, name, &ov, NULL, path, sizeof path, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", name, err);
            _exit(1);
        }
        _exit(0);
    }
    int st;
    waitpid(p, &st, 0);
    return st == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    char bin[4096], h1[48], h2[48], j1[48], j2[48];
    int rc = 1, runs = argc == 3 ? atoi(argv[2]) : 7;
    if (argc < 2 || argc > 3 || geteuid() != 0 || runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "usage (as root): bench_overlay BUILD_DIR [RUNS, 1-%d]\n", MAX_RUNS);
        return 2;
    }
    snprintf(bin, sizeof bin, "%s/bench_allreduce", argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    net = 100 + getpid() % 150;
    snprintf(tag, sizeof tag, "cbo%d", (int)getpid() % 100000);
    snprintf(h1, sizeof h1, "%s-h1", tag);
    snprintf(h2, sizeof h2, "%s-h2", tag);
    snprintf(j1, sizeof j1, "%s-j1", tag);
    snprintf(j2, sizeof j2, "%s-j2", tag);
    cleanup();
    if (util_system("ip link add %s-br type bridge && ip link set %s-br up", tag, tag) != 0)
        goto out;
    for (int i = 1; i <= 2; i++)
        if (util_system("ip netns add %s-h%d && ip link add %s-a%d type veth peer name %s-b%d && "
                        "ip link set %s-a%d master %s-br up && ip link set %s-b%d netns %s-h%d && "
                        "ip -n %s-h%d addr add 10.213.%d.%d/24 dev %s-b%d && "
                        "ip -n %s-h%d link set %s-b%d up && ip -n %s-h%d link set lo up",
                        tag, i, tag, i, tag, i, tag, i, tag, tag, i, tag, i, tag, i, net, i + 1,
                        tag, i, tag, i, tag, i, tag, i) != 0)
            goto out;
    if (job_ns(h1, j1, 0) != 0 || job_ns(h2, j2, 1) != 0)
        goto out;
    util_system("echo \"MTU: the hosts' $(ip -n %s -o link show %s-b1 2>/dev/null | "
                "sed 's/.* mtu \\([0-9]*\\).*/\\1/'), the overlay's $(ip -n %s -o link show "
                "eth0 2>/dev/null | sed 's/.* mtu \\([0-9]*\\).*/\\1/')\"",
                h1, tag, j1);
    if (two_hosts(bin, h1, h2, j1, j2, runs) != 0)
        goto out;
    printf("== one host, two ranks: the host's loopback\n");
    int st;
    waitpid(rank(bin, h1, 2, 29600, NULL, -1, -1), &st, 0);
    printf("== one host, two ranks: the loopback of the job's namespace\n");
    waitpid(rank(bin, j1, 2, 29601, NULL, -1, -1), &st, 0);
    rc = st == 0 ? 0 : 1;
out:
    if (rc)
        fprintf(stderr, "bench_overlay: a step failed (see above)\n");
    cleanup();
    return rc;
}
