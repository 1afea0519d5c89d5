/*
 * fsquota: btrfs subvolumes and qgroups for tenants' volumes (fsquota.h).
 */
#include "api/fsquota.h"
#include "lib/fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define BTRFS_MAGIC 0x9123683E

struct fsquota {
    char btrfs[4096]; /* the program */
    char dir[4096];   /* a path on the file system, for qgroup commands */
};

/* Runs btrfs with args; its first output line into out (when not NULL).
 * Its exit status, or -1. */
static int run_btrfs(const fsquota *q, const char *const *args, char *out, size_t n)
{
    const char *argv[12];
    int k = 0, pfd[2], st = 0;
    argv[k++] = q->btrfs;
    for (int i = 0; args[i]; i++) {
        if (k == 11)
            return -1;
        argv[k++] = args[i];
    }
    argv[k] = NULL;
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    pid_t p = fork();
    if (p < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (p == 0) {
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        dup2(null, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        execv(q->btrfs, (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    char buf[512], rest[512];
    size_t have = 0;
    ssize_t r;
    while (have < sizeof buf - 1 && (r = read(pfd[0], buf + have, sizeof buf - 1 - have)) > 0)
        have += (size_t)r;
    while ((r = read(pfd[0], rest, sizeof rest)) > 0 || (r < 0 && errno == EINTR))
        ; /* the rest, so that it never blocks on a full pipe */
    close(pfd[0]);
    buf[have] = '\0';
    if (out && n)
        fmt_cut(out, n, "%.*s", (int)strcspn(buf, "\n"), buf);
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int find_btrfs(char *out, size_t n)
{
    static const char *const dirs[] = {"/usr/bin", "/usr/sbin", "/bin", "/sbin"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        if (fmt_path(out, n, dirs[i], "btrfs") == 0 && access(out, X_OK) == 0)
            return 0;
    }
    return -1;
}

fsquota *fsquota_open(const char *dir, char *err, size_t errlen)
{
    struct statfs sf;
    fsquota *q = NULL;
    if (statfs(dir, &sf) != 0 || (uint32_t)sf.f_type != BTRFS_MAGIC) {
        fmt_cut(err, errlen, "%s is not on btrfs", dir);
        return NULL;
    }
    if (!(q = calloc(1, sizeof *q)) || find_btrfs(q->btrfs, sizeof q->btrfs) != 0) {
        fmt_cut(err, errlen, "%s is on btrfs, but btrfs-progs' btrfs is not installed", dir);
        goto fail;
    }
    char why[256] = "";
    if (fmt_whole(q->dir, sizeof q->dir, "%s", dir) != 0) {
        fmt_cut(err, errlen, "%.200s: the path is too long", dir);
        goto fail;
    }
    const char *enable[] = {"quota", "enable", q->dir, NULL};
    if (run_btrfs(q, enable, why, sizeof why) != 0) {
        fmt_cut(err, errlen, "cannot enable btrfs quotas on %s: %s", dir, why);
        goto fail;
    }
    return q;
fail:
    free(q);
    return NULL;
}

void fsquota_close(fsquota *q)
{
    free(q);
}

int fsquota_limit(fsquota *q, int64_t tenant, int64_t limit)
{
    char group[32], bytes[32];
    fmt_cut(group, sizeof group, "1/%" PRId64, tenant);
    if (limit >= 0)
        fmt_cut(bytes, sizeof bytes, "%" PRId64, limit);
    else
        fmt_cut(bytes, sizeof bytes, "none");
    const char *args[] = {"qgroup", "limit", bytes, group, q->dir, NULL};
    return q && run_btrfs(q, args, NULL, 0) == 0 ? 0 : -1;
}

int fsquota_make(fsquota *q, const char *path, int64_t tenant, int64_t limit, char *err,
                 size_t errlen)
{
    char why[256] = "", id[64] = "", group[32], sub[80];
    struct stat sb;
    if (stat(path, &sb) == 0)
        return 0; /* made before */
    const char *create[] = {"subvolume", "create", path, NULL};
    if (run_btrfs(q, create, why, sizeof why) != 0) {
        fmt_cut(err, errlen, "cannot make the subvolume %s: %s", path, why);
        return -1;
    }
    fmt_cut(group, sizeof group, "1/%" PRId64, tenant);
    const char *rootid[] = {"inspect-internal", "rootid", path, NULL};
    const char *make_group[] = {"qgroup", "create", group, q->dir, NULL};
    char *end;
    int ok = run_btrfs(q, rootid, id, sizeof id) == 0 && strtoull(id, &end, 10) > 0 && !*end;
    fmt_cut(sub, sizeof sub, "0/%s", id);
    const char *assign[] = {"qgroup", "assign", sub, group, q->dir, NULL};
    run_btrfs(q, make_group, NULL, 0); /* there already for the tenant's second volume */
    if (!ok || run_btrfs(q, assign, why, sizeof why) != 0 || fsquota_limit(q, tenant, limit) != 0) {
        const char *del[] = {"subvolume", "delete", path, NULL};
        run_btrfs(q, del, NULL, 0);
        fmt_cut(err, errlen, "cannot put %s in its tenant's qgroup %s: %s", path, group, why);
        return -1;
    }
    chmod(path, 0750);
    return 0;
}
