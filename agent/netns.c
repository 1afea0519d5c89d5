/*
 * netns: jobs' network namespaces on a node, made and removed with
 * iproute2 (see netns.h).
 */
#include "agent/netns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs ip with its arguments, its output dropped: its exit status, or -1. */
static int run_ip(const char *ip, const char *const *args)
{
    const char *argv[12];
    int n = 0;
    argv[n++] = ip;
    for (int i = 0; args[i] && n < 11; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t p = fork();
    if (p < 0)
        return -1;
    if (p == 0) {
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
        }
        execv(ip, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int netns_name(const char *prefix, int64_t job, int64_t attempt, char *out, size_t n)
{
    int w = snprintf(out, n, "%s-j%" PRId64 "-a%" PRId64, prefix, job, attempt);
    return w > 0 && (size_t)w < n && (size_t)w < NETNS_NAME_MAX ? 0 : -1;
}

int netns_ensure(const char *ip, const char *name, char *path, size_t n, char *err,
                 size_t errlen)
{
    struct stat sb;
    int rc = -1, lock = -1;
    if (snprintf(path, n, "%s/%s", NETNS_DIR, name) >= (int)n) {
        snprintf(err, errlen, "the network namespace's path is too long");
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
        const char *del[] = {"netns", "delete", name, NULL};
        run_ip(ip, del);
        snprintf(err, errlen, "cannot make the job's network namespace %s with %s", name, ip);
        goto out;
    }
    rc = 0;
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
