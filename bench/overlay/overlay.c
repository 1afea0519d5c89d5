/*
 * bench/overlay: what a job's own network costs its allreduce.  Two hosts
 * of the bench's own (network namespaces on a bridge, as the tests make
 * them), one rank of bench_allreduce on each, first over the hosts' own
 * addresses (an agent's --network host), then over the job's overlay as
 * an agent builds it (agent/netns.c: a VXLAN device in a namespace of the
 * job on each host).  Then two ranks on one host: its loopback against
 * the loopback of a job's namespace.  Prints bench_allreduce's tables.
 *
 *   bench_overlay BUILD_DIR      (as root; needs iproute2)
 */
#include <fcntl.h>
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

/* Runs bench_allreduce RANKS PORT MASTER RANK in namespace ns; its pid. */
static pid_t rank(const char *bin, const char *ns, int ranks, int port, const char *master,
                  int r, int quiet)
{
    char n[8], p[8], rs[8];
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(p, sizeof p, "%d", port);
    snprintf(rs, sizeof rs, "%d", r);
    pid_t pid = fork();
    if (pid == 0) {
        if (quiet)
            dup2(open("/dev/null", O_WRONLY), 1);
        if (r < 0)
            execl(ip, ip, "netns", "exec", ns, bin, n, p, (char *)NULL);
        else
            execl(ip, ip, "netns", "exec", ns, bin, n, p, master, rs, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int both(const char *bin, const char *ns0, const char *ns1, const char *master, int port)
{
    int st0, st1;
    pid_t a = rank(bin, ns0, 2, port, master, 0, 0);
    pid_t b = rank(bin, ns1, 2, port, master, 1, 1);
    waitpid(a, &st0, 0);
    waitpid(b, &st1, 0);
    return st0 == 0 && st1 == 0 ? 0 : -1;
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
    char bin[4096], h1[48], h2[48], j1[48], j2[48], master[32];
    int rc = 1;
    if (argc != 2 || geteuid() != 0) {
        fprintf(stderr, "usage (as root): bench_overlay BUILD_DIR\n");
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
    printf("== two hosts, one rank each: the hosts' own network (--network host)\n");
    snprintf(master, sizeof master, "10.213.%d.2", net);
    if (both(bin, h1, h2, master, 29500) != 0)
        goto out;
    printf("== two hosts, one rank each: the job's overlay (--network job, VXLAN)\n");
    if (both(bin, j1, j2, "10.77.0.1", 29501) != 0)
        goto out;
    printf("== one host, two ranks: the host's loopback\n");
    int st;
    waitpid(rank(bin, h1, 2, 29502, NULL, -1, 0), &st, 0);
    printf("== one host, two ranks: the loopback of the job's namespace\n");
    waitpid(rank(bin, j1, 2, 29503, NULL, -1, 0), &st, 0);
    rc = st == 0 ? 0 : 1;
out:
    if (rc)
        fprintf(stderr, "bench_overlay: a step failed (see above)\n");
    cleanup();
    return rc;
}
