/*
 * netns: jobs' network namespaces on a node, made and removed with
 * iproute2 (see netns.h).
 */
#include "agent/netns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A memfd holding len bytes of text, rewound; -1 on failure. */
static int text_fd(const char *text, size_t len)
{
    int fd = memfd_create("cohort-netns", MFD_CLOEXEC);
    size_t off = 0;
    while (fd >= 0 && off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (fd >= 0 && lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/*
 * Runs prog with its arguments (at most 14), input (or nothing) on its
 * stdin; what it says on stderr goes to why (its first line), the rest is
 * dropped.  Its exit status, or -1.
 */
static int run_tool(const char *prog, const char *const *args, const char *input, char *why,
                    size_t whylen)
{
    const char *argv[16];
    int n = 0, st = 0, in = -1, errfd = -1;
    if (why && whylen)
        why[0] = '\0';
    argv[n++] = prog;
    for (int i = 0; args[i]; i++) {
        if (n == 15) {
            snprintf(why, whylen, "more than 14 arguments for %s", prog);
            return -1;
        }
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    if ((in = text_fd(input ? input : "", input ? strlen(input) : 0)) < 0 ||
        (errfd = memfd_create("cohort-netns-err", MFD_CLOEXEC)) < 0) {
        st = -1;
        goto out;
    }
    pid_t p = fork();
    if (p < 0) {
        st = -1;
        goto out;
    }
    if (p == 0) {
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0)
            dup2(null, 1);
        dup2(in, 0);
        dup2(errfd, 2);
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR) {
            st = -1;
            goto out;
        }
    st = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (why && whylen > 1 && lseek(errfd, 0, SEEK_SET) == 0) {
        ssize_t r = read(errfd, why, whylen - 1);
        why[r > 0 ? r : 0] = '\0';
        why[strcspn(why, "\n")] = '\0';
    }
out:
    if (in >= 0)
        close(in);
    if (errfd >= 0)
        close(errfd);
    return st;
}

static int run_ip(const char *ip, const char *const *args)
{
    return run_tool(ip, args, NULL, NULL, 0);
}

int netns_name(const char *prefix, int64_t job, int64_t attempt, char *out, size_t n)
{
    int w = snprintf(out, n, "%s-j%" PRId64 "-a%" PRId64, prefix, job, attempt);
    return w > 0 && (size_t)w < n && (size_t)w < NETNS_NAME_MAX ? 0 : -1;
}

/* The MAC address of an overlay address: 02:c0 and its four bytes. */
static void overlay_mac(const char *address, char *out, size_t n)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    sscanf(address, "%u.%u.%u.%u", &a, &b, &c, &d);
    snprintf(out, n, "02:c0:%02x:%02x:%02x:%02x", a & 255, b & 255, c & 255, d & 255);
}

/*
 * The overlay's eth0 in the namespace name: made as a VXLAN device in the
 * node's namespace under a name of this process, moved into the job's,
 * then given its address and its peers in one batch for ip and one for
 * bridge.  0, or -1 with err set (the device goes with the namespace).
 */
static int overlay_up(const char *ip, const char *bridge, const char *name,
                      const netns_overlay *ov, char *err, size_t errlen)
{
    char dev[16], vni[16], mac[24], why[256];
    char *ipt = NULL, *brt = NULL;
    size_t ipn = 0, brn = 0;
    FILE *ipf = NULL, *brf = NULL;
    int rc = -1;
    snprintf(dev, sizeof dev, "cvx%d", (int)getpid());
    snprintf(vni, sizeof vni, "%u", (unsigned)ov->vni);
    const char *add[] = {"link", "add", dev, "type", "vxlan", "id", vni, "local", ov->local,
                         "dstport", NETNS_VXLAN_PORT, "nolearning", NULL};
    if (run_tool(ip, add, NULL, why, sizeof why) != 0) {
        snprintf(err, errlen, "cannot make the job's overlay device (VNI %s): %s", vni, why);
        goto out;
    }
    const char *move[] = {"link", "set", dev, "netns", name, NULL};
    if (run_tool(ip, move, NULL, why, sizeof why) != 0) {
        const char *del[] = {"link", "del", dev, NULL};
        run_ip(ip, del);
        snprintf(err, errlen, "cannot move the overlay device into %s: %s", name, why);
        goto out;
    }
    if (!(ipf = open_memstream(&ipt, &ipn)) || !(brf = open_memstream(&brt, &brn))) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    overlay_mac(ov->address, mac, sizeof mac);
    fprintf(ipf, "link set %s name eth0\nlink set eth0 address %s\naddr add %s/%d dev eth0\n"
                 "link set eth0 up\n",
            dev, mac, ov->address, ov->prefix_len);
    for (int i = 0; i < ov->npeers; i++) {
        overlay_mac(ov->peers[i].address, mac, sizeof mac);
        fprintf(ipf, "neigh add %s lladdr %s dev eth0 nud permanent\n", ov->peers[i].address,
                mac);
        fprintf(brf, "fdb add %s dev eth0 dst %s self permanent\n", mac, ov->peers[i].node);
    }
    int bad = ferror(ipf) || ferror(brf);
    bad |= fclose(ipf) != 0;
    bad |= fclose(brf) != 0;
    ipf = brf = NULL;
    if (bad || !ipt || !brt) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    const char *batch[] = {"-n", name, "-batch", "-", NULL};
    if (run_tool(ip, batch, ipt, why, sizeof why) != 0 ||
        (ov->npeers && run_tool(bridge, batch, brt, why, sizeof why) != 0)) {
        snprintf(err, errlen, "cannot set up the job's overlay in %s: %s", name, why);
        goto out;
    }
    rc = 0;
out:
    if (ipf)
        fclose(ipf);
    if (brf)
        fclose(brf);
    free(ipt);
    free(brt);
    return rc;
}

int netns_ensure(const char *ip, const char *bridge, const char *name, const netns_overlay *ov,
                 char *path, size_t n, char *err, size_t errlen)
{
    struct stat sb;
    int rc = -1, lock = -1;
    if (snprintf(path, n, "%s/%s", NETNS_DIR, name) >= (int)n) {
        snprintf(err, errlen, "the network namespace's path is too long");
        return -1;
    }
    if (ov && (!bridge || bridge[0] != '/')) {
        snprintf(err, errlen, "a job over several nodes needs iproute2's bridge program");
        return -1;
    }
    /* Several workers of the attempt start at once: one makes it. */
    if ((mkdir(NETNS_DIR, 0755) != 0 && errno != EEXIST) ||
        (lock = open(NETNS_DIR "/.cohort.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
        flock(lock, LOCK_EX) != 0) {
        snprintf(err, errlen, "cannot lock %s: %s", NETNS_DIR, strerror(errno));
        goto out;
    }
    if (stat(path, &sb) == 0) {
        rc = 0;
        goto out;
    }
    const char *add[] = {"netns", "add", name, NULL};
    const char *lo[] = {"-n", name, "link", "set", "lo", "up", NULL};
    if (run_ip(ip, add) != 0 || run_ip(ip, lo) != 0) {
        snprintf(err, errlen, "cannot make the job's network namespace %s with %s", name, ip);
        goto fail;
    }
    if (ov && overlay_up(ip, bridge, name, ov, err, errlen) != 0)
        goto fail;
    rc = 0;
    goto out;
fail:;
    const char *del[] = {"netns", "delete", name, NULL};
    run_ip(ip, del);
out:
    if (lock >= 0)
        close(lock);
    return rc;
}

int netns_gc(const char *ip, const char *prefix, int (*live)(void *arg, int64_t job,
                                                             int64_t attempt),
             void *arg, int max)
{
    DIR *d = opendir(NETNS_DIR);
    struct dirent *e;
    size_t pl = strlen(prefix);
    int removed = 0;
    /* No lock: a namespace removed here belongs to an attempt with no
     * worker on the node, so no shim is making or joining it (the agent
     * registers a worker before its shim starts, in this same thread). */
    while (d && removed < max && (e = readdir(d)) != NULL) {
        long long job, attempt;
        char tail;
        if (strncmp(e->d_name, prefix, pl) ||
            sscanf(e->d_name + pl, "-j%lld-a%lld%c", &job, &attempt, &tail) != 2 ||
            live(arg, job, attempt))
            continue;
        const char *del[] = {"netns", "delete", e->d_name, NULL};
        removed += run_ip(ip, del) == 0;
    }
    if (d)
        closedir(d);
    return removed;
}
