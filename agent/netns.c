/*
 * netns: jobs' network namespaces on a node, made and removed with
 * iproute2 (see netns.h).
 */
#include "agent/netns.h"
#include "lib/fmt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/magic.h>

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
 * Runs prog (stdin in, stderr errfd, stdout /dev/null) and waits for it:
 * its exit status, or -1.  A caller that lets the kernel reap its children
 * (the agent, SA_NOCLDWAIT) cannot wait for one, so a child of ours runs
 * it, waits for it, and says how it ended over a pipe.
 */
static int spawn_wait(const char *prog, char *const *argv, int in, int errfd)
{
    int sp[2], code = -1;
    ssize_t r;
    if (pipe2(sp, O_CLOEXEC) != 0)
        return -1;
    pid_t a = fork();
    if (a == 0) {
        struct sigaction dfl = {0};
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGCHLD, &dfl, NULL);
        pid_t b = fork(), w = -1;
        if (b == 0) {
            int null = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (null >= 0)
                dup2(null, 1);
            dup2(in, 0);
            dup2(errfd, 2);
            execv(prog, argv);
            _exit(127);
        }
        int st = 0;
        while (b > 0 && (w = waitpid(b, &st, 0)) < 0 && errno == EINTR)
            ;
        code = w == b && b > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        r = write(sp[1], &code, sizeof code);
        _exit(r == sizeof code ? 0 : 1);
    }
    close(sp[1]);
    while (a > 0 && (r = read(sp[0], &code, sizeof code)) < 0 && errno == EINTR)
        ;
    if (a <= 0 || r != sizeof code)
        code = -1;
    close(sp[0]);
    /* Where the kernel reaps, waitpid would wait for every child of ours
     * (shims still pulling an image among them): the pipe said enough. */
    struct sigaction cur;
    if (a > 0 && sigaction(SIGCHLD, NULL, &cur) == 0 && !(cur.sa_flags & SA_NOCLDWAIT) &&
        cur.sa_handler != SIG_IGN)
        while (waitpid(a, NULL, 0) < 0 && errno == EINTR)
            ;
    return code;
}

int netns_run(const char *prog, const char *const *args, const char *input, char *why,
                    size_t whylen)
{
    const char *argv[16];
    int n = 0, st = 0, in = -1, errfd = -1;
    if (why && whylen)
        why[0] = '\0';
    argv[n++] = prog;
    for (int i = 0; args[i]; i++) {
        if (n == 15) {
            fmt_cut(why, whylen, "more than 14 arguments for %s", prog);
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
    st = spawn_wait(prog, (char *const *)argv, in, errfd);
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
    return netns_run(ip, args, NULL, NULL, 0);
}

/* The namespace at NETNS_DIR/name exists. */
static int ns_exists(const char *name)
{
    char path[NETNS_NAME_MAX + 32];
    struct stat sb;
    if (fmt_path(path, sizeof path, NETNS_DIR, name) != 0)
        return 0;
    return stat(path, &sb) == 0;
}

/* A free index of eg's subnet leased to name (2 .. size-2: the bridge is
 * 1): the index, or -1.  Under the caller's lock; a lease whose namespace
 * is gone is taken back. */
static int lease(const netns_egress *eg, const char *name)
{
    char path[4200], held[NETNS_NAME_MAX + 1];
    int64_t size = (int64_t)1 << (32 - eg->prefix_len);
    if (mkdir(eg->leases, 0700) != 0 && errno != EEXIST)
        return -1;
    for (int64_t i = 2; i < size - 1; i++) {
        if (fmt_whole(path, sizeof path, "%s/%lld", eg->leases, (long long)i) != 0)
            return -1;
        if (symlink(name, path) == 0)
            return (int)i;
        ssize_t n = errno == EEXIST ? readlink(path, held, sizeof held - 1) : -1;
        if (n <= 0)
            continue;
        held[n] = '\0';
        if (!ns_exists(held) && unlink(path) == 0 && symlink(name, path) == 0)
            return (int)i;
    }
    return -1;
}

/* out0 in the namespace name: a veth to eg's bridge, isolated there, with a
 * leased address and the default route through the bridge.  0, or -1 with
 * err set (the veth goes with the namespace; the lease with the next gc). */
static int egress_up(const char *ip, const char *bridge, const char *name,
                     const netns_egress *eg, char *err, size_t errlen)
{
    char host[32], why[256], in[256];
    int i = lease(eg, name);
    if (i < 0) {
        fmt_cut(err, errlen, "no address is free in the agent's egress subnet");
        return -1;
    }
    uint32_t a = eg->subnet + (uint32_t)i, gw = eg->subnet + 1;
    if (fmt_whole(host, sizeof host, "%s%d", eg->veth_prefix, i) != 0 || strlen(host) >= 16) {
        fmt_cut(err, errlen, "the egress device's name is too long");
        return -1;
    }
    const char *add[] = {"link", "add", host, "type", "veth", "peer", "name", "out0", "netns",
                         name, NULL};
    const char *up[] = {"link", "set", host, "master", eg->bridge, "up", NULL};
    const char *iso[] = {"link", "set", "dev", host, "isolated", "on", NULL};
    fmt_cut(in, sizeof in,
             "addr add %u.%u.%u.%u/%d dev out0\nlink set out0 up\n"
             "route add default via %u.%u.%u.%u\n",
             a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255, eg->prefix_len, gw >> 24,
             (gw >> 16) & 255, (gw >> 8) & 255, gw & 255);
    const char *batch[] = {"-n", name, "-batch", "-", NULL};
    if (netns_run(ip, add, NULL, why, sizeof why) != 0 ||
        netns_run(ip, up, NULL, why, sizeof why) != 0 ||
        netns_run(bridge, iso, NULL, why, sizeof why) != 0 ||
        netns_run(ip, batch, in, why, sizeof why) != 0) {
        fmt_cut(err, errlen, "cannot give the job's network its way out: %s", why);
        return -1;
    }
    return 0;
}

int netns_name(const char *prefix, int64_t job, int64_t attempt, char *out, size_t n)
{
    return fmt_whole(out, n, "%s-j%" PRId64 "-a%" PRId64, prefix, job, attempt) != 0 ||
                   strlen(out) >= NETNS_NAME_MAX
               ? -1
               : 0;
}

/* The MAC address of an overlay address: 02:c0 and its four bytes. */
static void overlay_mac(const char *address, char *out, size_t n)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    sscanf(address, "%u.%u.%u.%u", &a, &b, &c, &d);
    fmt_cut(out, n, "02:c0:%02x:%02x:%02x:%02x", a & 255, b & 255, c & 255, d & 255);
}

/* What VXLAN over IPv4 adds to a frame: outer IP 20, UDP 8, VXLAN 8 and the
 * inner Ethernet header 14. */
#define VXLAN_OVERHEAD 50

/*
 * The MTU the overlay's device takes: that of the node's device holding
 * the address local (in the caller's network namespace), less what VXLAN
 * adds, so that no encapsulated packet is larger than the node's network
 * carries (a VXLAN device made without a lower device keeps 1500, and its
 * full-size packets then leave in IP fragments).  0 when none holds it.
 */
static int overlay_mtu(const char *local)
{
    struct ifaddrs *all = NULL;
    struct in_addr want;
    int mtu = 0;
    if (inet_pton(AF_INET, local, &want) != 1 || getifaddrs(&all) != 0)
        return 0;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    for (struct ifaddrs *a = all; a && fd >= 0 && !mtu; a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET ||
            ((struct sockaddr_in *)a->ifa_addr)->sin_addr.s_addr != want.s_addr)
            continue;
        struct ifreq ifr = {0};
        if (strlen(a->ifa_name) >= sizeof ifr.ifr_name)
            continue;
        memcpy(ifr.ifr_name, a->ifa_name, strlen(a->ifa_name));
        if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > VXLAN_OVERHEAD + 576)
            mtu = ifr.ifr_mtu - VXLAN_OVERHEAD;
    }
    if (fd >= 0)
        close(fd);
    freeifaddrs(all);
    return mtu;
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
    char dev[16], vni[16], port[8], mac[24], why[256], mtu[16];
    char *ipt = NULL, *brt = NULL;
    size_t ipn = 0, brn = 0;
    FILE *ipf = NULL, *brf = NULL;
    int rc = -1;
    fmt_cut(dev, sizeof dev, "cvx%d", (int)getpid());
    fmt_cut(vni, sizeof vni, "%u", (unsigned)ov->vni);
    fmt_cut(port, sizeof port, "%d", ov->port);
    int lower = overlay_mtu(ov->local);
    fmt_cut(mtu, sizeof mtu, "%d", lower);
    const char *add[] = {"link", "add", dev,      "mtu",     mtu,  "type",       "vxlan", "id",
                         vni,    "local", ov->local, "dstport", port, "nolearning", NULL};
    if (!lower) /* the kernel's own 1500 */
        memmove(add + 3, add + 5, sizeof add - 5 * sizeof *add);
    if (netns_run(ip, add, NULL, why, sizeof why) != 0) {
        fmt_cut(err, errlen, "cannot make the job's overlay device (VNI %s): %s", vni, why);
        goto out;
    }
    const char *move[] = {"link", "set", dev, "netns", name, NULL};
    if (netns_run(ip, move, NULL, why, sizeof why) != 0) {
        const char *del[] = {"link", "del", dev, NULL};
        run_ip(ip, del);
        fmt_cut(err, errlen, "cannot move the overlay device into %s: %s", name, why);
        goto out;
    }
    if (!(ipf = open_memstream(&ipt, &ipn)) || !(brf = open_memstream(&brt, &brn))) {
        fmt_cut(err, errlen, "out of memory");
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
        fprintf(brf, "fdb add %s dev eth0 dst %s port %d self permanent\n", mac,
                ov->peers[i].node, ov->peers[i].port);
    }
    int bad = ferror(ipf) || ferror(brf);
    bad |= fclose(ipf) != 0;
    bad |= fclose(brf) != 0;
    ipf = brf = NULL;
    if (bad || !ipt || !brt) {
        fmt_cut(err, errlen, "out of memory");
        goto out;
    }
    const char *batch[] = {"-n", name, "-batch", "-", NULL};
    if (netns_run(ip, batch, ipt, why, sizeof why) != 0 ||
        (ov->npeers && netns_run(bridge, batch, brt, why, sizeof why) != 0)) {
        fmt_cut(err, errlen, "cannot set up the job's overlay in %s: %s", name, why);
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

int netns_sys_path(const char *name, char *out, size_t n)
{
    return fmt_path(out, n, NETNS_SYS_DIR, name);
}

/* Whether a sysfs is mounted at dir. */
static int sysfs_at(const char *dir)
{
    struct statfs fs;
    return statfs(dir, &fs) == 0 && fs.f_type == SYSFS_MAGIC;
}

/*
 * Mounts a sysfs of the namespace at path (read-only, nosuid, nodev,
 * noexec) at NETNS_SYS_DIR/name, from a child that joins the namespace: a
 * sysfs shows the network devices of its mounter's namespace.  0 (or
 * already there), or -1 with err set.
 */
static int sysfs_up(const char *name, const char *path, char *err, size_t errlen)
{
    char dir[NETNS_NAME_MAX + 64];
    if (netns_sys_path(name, dir, sizeof dir) != 0) {
        fmt_cut(err, errlen, "the namespace's sysfs path is too long");
        return -1;
    }
    if (sysfs_at(dir))
        return 0;
    if ((mkdir(NETNS_SYS_DIR, 0755) != 0 && errno != EEXIST) ||
        (mkdir(dir, 0755) != 0 && errno != EEXIST)) {
        fmt_cut(err, errlen, "cannot make %s: %s", dir, strerror(errno));
        return -1;
    }
    pid_t p = fork();
    if (p < 0) {
        fmt_cut(err, errlen, "cannot fork: %s", strerror(errno));
        return -1;
    }
    if (p == 0) {
        int ns = open(path, O_RDONLY | O_CLOEXEC);
        if (ns < 0 || setns(ns, CLONE_NEWNET) != 0 ||
            mount("sysfs", dir, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
            _exit(errno & 0x7f);
        _exit(0);
    }
    int st = 0;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR)
            break;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !sysfs_at(dir)) {
        fmt_cut(err, errlen, "cannot mount a sysfs of %s at %s: %s", name, dir,
                 WIFEXITED(st) ? strerror(WEXITSTATUS(st)) : "killed");
        rmdir(dir);
        return -1;
    }
    return 0;
}

/* Unmounts and removes the sysfs of namespace name, if any. */
static void sysfs_down(const char *name)
{
    char dir[NETNS_NAME_MAX + 64];
    if (netns_sys_path(name, dir, sizeof dir) != 0)
        return;
    while (sysfs_at(dir) && umount2(dir, MNT_DETACH) == 0)
        ;
    rmdir(dir);
}

int netns_delete(const char *ip, const char *name)
{
    const char *del[] = {"netns", "delete", name, NULL};
    sysfs_down(name);
    return run_ip(ip, del);
}

/*
 * No IPv6 in the namespace at path: nothing of Cohort's speaks it, and a
 * router advertisement put into an overlay by a stranger would otherwise
 * give the job addresses and routes.  Written from a child that joins the
 * namespace (/proc/sys/net is its network namespace's).  0, or -1.
 */
static int ipv6_off(const char *path)
{
    pid_t p = fork();
    if (p < 0)
        return -1;
    if (p == 0) {
        static const char *const knobs[] = {"/proc/sys/net/ipv6/conf/all/disable_ipv6",
                                            "/proc/sys/net/ipv6/conf/default/disable_ipv6"};
        int ns = open(path, O_RDONLY | O_CLOEXEC);
        if (ns < 0 || setns(ns, CLONE_NEWNET) != 0)
            _exit(1);
        for (int i = 0; i < 2; i++) {
            int fd = open(knobs[i], O_WRONLY | O_CLOEXEC);
            if (fd < 0 && errno == ENOENT)
                _exit(0); /* a kernel without IPv6 */
            if (fd < 0 || write(fd, "1\n", 2) != 2)
                _exit(1);
            close(fd);
        }
        _exit(0);
    }
    int st = 0;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int netns_ensure(const char *ip, const char *bridge, const char *name, const netns_overlay *ov,
                 const netns_egress *eg, char *path, size_t n, char *err, size_t errlen)
{
    struct stat sb;
    int rc = -1, lock = -1;
    if (fmt_whole(path, n, "%s/%s", NETNS_DIR, name) != 0) {
        fmt_cut(err, errlen, "the network namespace's path is too long");
        return -1;
    }
    if ((ov || eg) && (!bridge || bridge[0] != '/')) {
        fmt_cut(err, errlen, "a job's network needs iproute2's bridge program");
        return -1;
    }
    /* Several workers of the attempt start at once: one makes it. */
    if ((mkdir(NETNS_DIR, 0755) != 0 && errno != EEXIST) ||
        (lock = open(NETNS_DIR "/.cohort.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
        flock(lock, LOCK_EX) != 0) {
        fmt_cut(err, errlen, "cannot lock %s: %s", NETNS_DIR, strerror(errno));
        goto out;
    }
    if (stat(path, &sb) == 0) {
        rc = sysfs_up(name, path, err, errlen); /* gone with a reboot of /run, say */
        goto out;
    }
    const char *add[] = {"netns", "add", name, NULL};
    const char *lo[] = {"-n", name, "link", "set", "lo", "up", NULL};
    if (run_ip(ip, add) != 0 || run_ip(ip, lo) != 0) {
        fmt_cut(err, errlen, "cannot make the job's network namespace %s with %s", name, ip);
        goto fail;
    }
    if ((ov && overlay_up(ip, bridge, name, ov, err, errlen) != 0) ||
        (eg && egress_up(ip, bridge, name, eg, err, errlen) != 0))
        goto fail;
    if (ipv6_off(path) != 0) {
        fmt_cut(err, errlen, "cannot turn IPv6 off in the job's network namespace %s", name);
        goto fail;
    }
    if (sysfs_up(name, path, err, errlen) != 0)
        goto fail;
    rc = 0;
    goto out;
fail:
    netns_delete(ip, name);
out:
    if (lock >= 0)
        close(lock);
    return rc;
}

/* Removes the leases in directory leases whose namespace is gone. */
static void leases_gc(const char *leases)
{
    DIR *d = opendir(leases);
    struct dirent *e;
    char held[NETNS_NAME_MAX + 1];
    while (d && (e = readdir(d)) != NULL) {
        ssize_t n = e->d_name[0] != '.' ? readlinkat(dirfd(d), e->d_name, held, sizeof held - 1)
                                        : -1;
        if (n <= 0)
            continue;
        held[n] = '\0';
        if (!ns_exists(held))
            unlinkat(dirfd(d), e->d_name, 0);
    }
    if (d)
        closedir(d);
}

int netns_gc(const char *ip, const char *prefix, const char *leases,
             int (*live)(void *arg, int64_t job, int64_t attempt), void *arg, int max)
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
        removed += netns_delete(ip, e->d_name) == 0;
    }
    if (d)
        closedir(d);
    if (leases && removed > 0)
        leases_gc(leases);
    return removed;
}
