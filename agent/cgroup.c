/*
 * cgroup: finding the cgroup v2 hierarchy, the agent's subtree with its
 * controllers, and each worker's directory, limits and usage.
 */
#include "agent/cgroup.h"

#include "agent/fileutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define CGROUP2_MAGIC 0x63677270

static const char *const ctl_names[] = {"cpu", "memory", "pids"};

/* Writes text to dir/name: 0 or -errno. */
static int write_file(const char *dir, const char *name, const char *text)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = strlen(text);
    int rc = write(fd, text, len) == (ssize_t)len ? 0 : -errno;
    close(fd);
    return rc;
}

/* 1 when word appears as a whole word in the space-separated list. */
static int has_word(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += wl)
        if ((p == list || p[-1] == ' ') && (p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n'))
            return 1;
    return 0;
}

/* The value after "key " on its own line of text, or dflt. */
static int64_t keyed(const char *text, const char *key, int64_t dflt)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, key, kl) && p[kl] == ' ')
            return strtoll(p + kl + 1, NULL, 10);
    return dflt;
}

/* Turns on, for dir's children, each controller dir itself has. */
static void enable_controllers(const char *dir)
{
    char have[512];
    if (fu_read_in(dir, "cgroup.controllers", have, sizeof have) != 0)
        return;
    for (size_t i = 0; i < sizeof ctl_names / sizeof *ctl_names; i++) {
        char op[16];
        snprintf(op, sizeof op, "+%s", ctl_names[i]);
        if (has_word(have, ctl_names[i]))
            write_file(dir, "cgroup.subtree_control", op); /* busy or refused: left off */
    }
}

/* The mount point of the first cgroup2 file system, into out: 0 or -1. */
static int find_hierarchy(char *out, size_t n)
{
    FILE *f = fopen("/proc/self/mounts", "re");
    char line[4096];
    int rc = -1;
    while (f && rc != 0 && fgets(line, sizeof line, f)) {
        char dev[256], dir[2048], type[64];
        if (sscanf(line, "%255s %2047s %63s", dev, dir, type) == 3 && !strcmp(type, "cgroup2") &&
            strlen(dir) < n) {
            memcpy(out, dir, strlen(dir) + 1); /* fits: checked just above */
            rc = 0;
        }
    }
    if (f)
        fclose(f);
    return rc;
}

static int make_dir(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

int cg_open(const char *want, const char *tag, cg_root *out, char *err, size_t errlen)
{
    char base[1024], mid[1100];
    struct statfs sf;
    memset(out, 0, sizeof *out);
    if (want && !strcmp(want, "off"))
        return 0;
    if (!want) {
        if (find_hierarchy(base, sizeof base) != 0)
            return 0; /* cgroup v1 only, or none: no cgroup per worker */
        /* <hierarchy>/cohort/<tag>: one subtree for every agent of the machine */
        snprintf(mid, sizeof mid, "%s/cohort", base);
    } else {
        snprintf(base, sizeof base, "%s", want);
        snprintf(mid, sizeof mid, "%s", want);
    }
    if (statfs(base, &sf) != 0 || sf.f_type != CGROUP2_MAGIC) {
        snprintf(err, errlen, "%s is not a cgroup v2 directory", base);
        return -1;
    }
    if (snprintf(out->path, sizeof out->path, "%s/%s", mid, tag) >= (int)sizeof out->path) {
        snprintf(err, errlen, "the cgroup path under %s is too long", mid);
        out->path[0] = '\0';
        return -1;
    }
    if (make_dir(mid) != 0 || make_dir(out->path) != 0) {
        int e = errno;
        int optional = !want && (e == EACCES || e == EROFS || e == EPERM);
        snprintf(err, errlen, "cannot create the cgroup %s: %s", out->path, strerror(e));
        out->path[0] = '\0';
        return optional ? 0 : -1;
    }
    enable_controllers(base);
    if (strcmp(mid, base))
        enable_controllers(mid);
    enable_controllers(out->path);
    char on[512] = "";
    fu_read_in(out->path, "cgroup.subtree_control", on, sizeof on);
    out->cpu = has_word(on, "cpu");
    out->memory = has_word(on, "memory");
    out->pids = has_word(on, "pids");
    return 0;
}

const char *cg_controllers(const cg_root *r, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s", r->cpu ? "cpu " : "", r->memory ? "memory " : "",
             r->pids ? "pids " : "");
    size_t len = strlen(buf);
    if (len)
        buf[len - 1] = '\0';
    else
        snprintf(buf, n, "none");
    return buf;
}

int cg_worker_make(const cg_root *root, int64_t id, int64_t cpu_milli, int64_t memory_mb,
                   char *path, size_t n, char *err, size_t errlen)
{
    char v[64];
    if (snprintf(path, n, "%s/w%lld", root->path, (long long)id) >= (int)n) {
        snprintf(err, errlen, "the cgroup path is too long");
        return -1;
    }
    if (make_dir(path) != 0) {
        snprintf(err, errlen, "cannot create the cgroup %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    const char *what = "";
    if (root->cpu && cpu_milli > 0) {
        /* quota per 100 ms period: 1000 milli-CPUs is 100 ms of every 100 ms */
        snprintf(v, sizeof v, "%lld 100000", (long long)(cpu_milli * 100));
        what = "cpu.max";
        rc = write_file(path, "cpu.max", v);
    }
    if (rc == 0 && root->memory && memory_mb > 0) {
        snprintf(v, sizeof v, "%lld", (long long)memory_mb * 1024 * 1024);
        what = "memory.max";
        rc = write_file(path, "memory.max", v);
        /* The limit is the memory the spec sold: no swapping past it. */
        if (rc == 0)
            write_file(path, "memory.swap.max", "0");
    }
    if (rc != 0) {
        snprintf(err, errlen, "cannot set %s of %s: %s", what, path, strerror(-rc));
        rmdir(path);
        return -1;
    }
    return 0;
}

int cg_procs_open(const char *path, char *err, size_t errlen)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/cgroup.procs", path);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        snprintf(err, errlen, "cannot open %s: %s", p, strerror(errno));
    return fd;
}

int cg_join(int procs_fd)
{
    return write(procs_fd, "0", 1) == 1 ? 0 : -errno;
}

int cg_kill(const char *path)
{
    int rc = write_file(path, "cgroup.kill", "1");
    if (rc == 0)
        return 0;
    /* Kernels before 5.14 have no cgroup.kill: one signal per process. */
    char buf[8192];
    if (fu_read_in(path, "cgroup.procs", buf, sizeof buf) != 0)
        return rc;
    for (char *p = buf, *end; *p; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 1)
            kill((pid_t)pid, SIGKILL);
    }
    return 0;
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

int cg_worker_end(const char *path, cg_usage *u, int wait_ms)
{
    char buf[2048];
    /* The namespace's last processes are being killed: let them leave. */
    for (int waited = 0; waited < wait_ms; waited += 5) {
        if (fu_read_in(path, "cgroup.events", buf, sizeof buf) != 0 ||
            keyed(buf, "populated", 1) == 0)
            break;
        nap_ms(5);
    }
    u->cpu_us =
        fu_read_in(path, "cpu.stat", buf, sizeof buf) == 0 ? keyed(buf, "usage_usec", 0) : 0;
    u->memory_peak =
        fu_read_in(path, "memory.peak", buf, sizeof buf) == 0 ? strtoll(buf, NULL, 10) : -1;
    u->memory_max = fu_read_in(path, "memory.max", buf, sizeof buf) == 0 && buf[0] != 'm'
                        ? strtoll(buf, NULL, 10)
                        : -1;
    u->oom_kills =
        fu_read_in(path, "memory.events", buf, sizeof buf) == 0 ? keyed(buf, "oom_kill", 0) : 0;
    for (int waited = 0; rmdir(path) != 0; waited += 5) {
        if (errno == ENOENT)
            return 0;
        if (errno != EBUSY || waited >= wait_ms)
            return -1;
        nap_ms(5);
    }
    return 0;
}

void cg_worker_forget(const char *root, int64_t id)
{
    char path[1200];
    if (!root || !root[0])
        return;
    snprintf(path, sizeof path, "%s/w%lld", root, (long long)id);
    rmdir(path);
}

void cg_close(const cg_root *r)
{
    if (r->path[0])
        rmdir(r->path); /* EBUSY while workers that outlive the agent are in it */
}
