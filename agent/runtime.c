/*
 * runtime: finds the container tools and prepares the node (runtime.h).
 */
#include "agent/runtime.h"
#include "lib/fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "agent/fileutil.h"
#include "agent/nvdriver.h"
#include "agent/oci.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

/* Reads a one-line file into out; "" when unreadable. */
static void read_line(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "re");
    out[0] = '\0';
    if (f) {
        if (!fgets(out, (int)n, f))
            out[0] = '\0';
        fclose(f);
    }
    out[strcspn(out, "\n")] = '\0';
}

#ifndef SYSFS_MAGIC
#define SYSFS_MAGIC 0x62656572
#endif

/* 1 when the space-separated list holds name as a whole word. */
static int controller_listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

int rt_mount_cgroup2(char *err, size_t errlen)
{
    struct statfs fs;
    if (statfs("/sys/fs/cgroup", &fs) != 0 || fs.f_type != SYSFS_MAGIC)
        return 0;
    if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) !=
        0) {
        fmt_cut(err, errlen, "nothing is mounted at /sys/fs/cgroup and cgroup2 could not be: %s",
                 strerror(errno));
        return -1;
    }
    printf("cohort-agent: mounted the cgroup v2 hierarchy at /sys/fs/cgroup (nothing was)\n");
    return 0;
}

int rt_fix_hybrid_cgroups(char *err, size_t errlen)
{
    struct statfs fs;
    char ctl[512], on[512], dir[300];
    if (rt_mount_cgroup2(err, errlen) != 0)
        return -1;
    /* Hybrid: a tmpfs at /sys/fs/cgroup with the v2 hierarchy under unified/. */
    if (statfs("/sys/fs/cgroup", &fs) != 0 || fs.f_type != TMPFS_MAGIC)
        return 0;
    read_line("/sys/fs/cgroup/unified/cgroup.controllers", ctl, sizeof ctl);
    read_line("/sys/fs/cgroup/unified/cgroup.subtree_control", on, sizeof on);
    for (char *save = NULL, *c = strtok_r(ctl, " ", &save); c; c = strtok_r(NULL, " ", &save)) {
        if (fmt_path(dir, sizeof dir, "/sys/fs/cgroup", c) != 0 ||
            (mkdir(dir, 0755) != 0 && errno != EEXIST) ||
            mount("cgroup", dir, "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, c) != 0) {
            int e = errno;
            char now[512];
            /* Another agent starting beside this one may have moved it. */
            read_line("/sys/fs/cgroup/unified/cgroup.controllers", now, sizeof now);
            if (!controller_listed(now, c))
                continue;
            errno = e;
            fmt_cut(err, errlen,
                     "crun cannot run on this hybrid cgroup host while the %s controller is in "
                     "the cgroup v2 hierarchy (enabled: '%s'), and it could not be moved to "
                     "cgroup v1 at %s: %s",
                     c, on, dir, strerror(errno));
            return -1;
        }
        printf("cohort-agent: moved the %s controller from cgroup v2 to %s (crun needs cgroup "
               "v2 without controllers on a hybrid host)\n",
               c, dir);
    }
    read_line("/sys/fs/cgroup/unified/cgroup.controllers", ctl, sizeof ctl);
    if (ctl[0]) {
        fmt_cut(err, errlen, "controllers still in the cgroup v2 hierarchy: %s", ctl);
        return -1;
    }
    return 0;
}

/* dir exists, owned by root, traversable by every uid (no listing). */
static int traversable_dir(const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0711) != 0 && errno != EEXIST) {
        fmt_cut(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    if (chmod(dir, 0711) != 0) {
        fmt_cut(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* Every directory from / to path must let other users through (o+x): the
 * containers' uids walk it to reach an image's root file system. */
static int walkable(const char *path, char *err, size_t errlen)
{
    char p[PATH_MAX + 16];
    if (fmt_whole(p, sizeof p, "%s", path) != 0) {
        fmt_cut(err, errlen, "%.200s...: the path is too long", path);
        return -1;
    }
    for (char *slash = strrchr(p, '/'); slash; slash = strrchr(p, '/')) {
        struct stat sb;
        *slash = '\0';
        const char *dir = p[0] ? p : "/";
        if (stat(dir, &sb) != 0 || !(sb.st_mode & S_IXOTH)) {
            fmt_cut(err, errlen,
                     "%s is not traversable by other users (mode %04o): the containers' uids "
                     "could not reach their images under %s; chmod o+x it, or choose "
                     "--image-cache elsewhere",
                     dir, (unsigned)(sb.st_mode & 07777), path);
            return -1;
        }
        if (!p[0])
            break;
    }
    return 0;
}

/* Copies the program at src to dst (mode 0755, atomically, through a
 * temporary name of this process: agents sharing an image cache copy at
 * once): 0 or -1. */
static int copy_program(const char *src, const char *dst, char *err, size_t errlen)
{
    char tmp[PATH_MAX + 64], buf[65536];
    int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    if (in < 0 || fmt_whole(tmp, sizeof tmp, "%s.tmp.%d", dst, (int)getpid()) != 0 ||
        (out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755)) < 0)
        goto out;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto out;
        if (n == 0)
            break;
        if (write(out, buf, (size_t)n) != n)
            goto out;
    }
    if (fchmod(out, 0755) != 0 || close(out) != 0) {
        out = -1;
        goto out;
    }
    out = -1;
    rc = rename(tmp, dst);
out:
    if (rc != 0)
        fmt_cut(err, errlen, "cannot copy %s to %s: %s", src, dst, strerror(errno));
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/*
 * The host's device files that crun binds into every container, owned by
 * root and 0666 again where they are not: an earlier shim (or another
 * runtime) that gave crun /dev/null for a standard stream left it owned by
 * a tenant's container root, which could then chmod it from its next job.
 */
static void repair_dev_nodes(void)
{
    static const char *const nodes[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                                        "/dev/urandom", "/dev/tty", NULL};
    for (int i = 0; nodes[i]; i++) {
        struct stat sb;
        if (stat(nodes[i], &sb) != 0 || !S_ISCHR(sb.st_mode))
            continue;
        if (sb.st_uid == 0 && sb.st_gid == 0 && (sb.st_mode & 07777) == 0666)
            continue;
        int ok = chown(nodes[i], 0, 0) == 0 && chmod(nodes[i], 0666) == 0;
        fprintf(stderr,
                "cohort-agent: warning: the host's %s was owned by %d:%d with mode %o%s\n",
                nodes[i], (int)sb.st_uid, (int)sb.st_gid, (unsigned)(sb.st_mode & 07777),
                ok ? ": set back to root:root 0666" : ", and could not be set back");
    }
}

/* The hosts of "a,b,c" as a JSON array (empty ones and ones of 256 bytes
 * or more left out). */
static cJSON *host_list(const char *list)
{
    cJSON *a = cJSON_CreateArray();
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        char host[256];
        if (len > 0 && len < sizeof host) {
            fmt_cut(host, sizeof host, "%.*s", (int)len, p); /* len < sizeof host */
            cJSON_AddItemToArray(a, cJSON_CreateString(host));
        }
        p += len + (p[len] == ',');
    }
    return a;
}

/*
 * The agent's directories for containers: its data dir and image cache
 * traversable by the tenants' uids (the agent's files keep their own 0600
 * modes), crun's state dir (croot, 0700), the cache's real path (real_cache,
 * PATH_MAX) walkable all the way, and cohort-init copied into it (init_copy)
 * where the containers' uids reach it, whatever the modes of the
 * directories the agent was installed in.  0, or -1 with err set.
 */
static int rt_dirs(const rt_config *c, const char *init, char *croot, size_t cn,
                   char *real_cache, char *init_copy, size_t icn, char *err, size_t errlen)
{
    char cache[PATH_MAX + 16], probe[PATH_MAX + 8];
    if (traversable_dir(c->data_dir, err, errlen) != 0)
        return -1;
    if ((c->image_cache ? fmt_whole(cache, sizeof cache, "%s", c->image_cache)
                        : fmt_path(cache, sizeof cache, c->data_dir, "images")) != 0 ||
        fmt_path(croot, cn, c->data_dir, "crun") != 0) {
        fmt_cut(err, errlen, "the image cache's or crun's path is too long");
        return -1;
    }
    if (traversable_dir(cache, err, errlen) != 0 ||
        (mkdir(croot, 0700) != 0 && errno != EEXIST)) {
        if (!err[0])
            fmt_cut(err, errlen, "%s: %s", croot, strerror(errno));
        return -1;
    }
    if (!realpath(cache, real_cache)) {
        fmt_cut(err, errlen, "%s: %s", cache, strerror(errno));
        return -1;
    }
    if (strlen(real_cache) > AGENT_DIR_MAX) {
        fmt_cut(err, errlen, "the image cache's path is longer than %d bytes: %.200s...",
                AGENT_DIR_MAX, real_cache);
        return -1;
    }
    if (fmt_path(probe, sizeof probe, real_cache, "x") != 0 ||
        walkable(probe, err, errlen) != 0 || fmt_path(init_copy, icn, real_cache, ".cohort-init") != 0)
        return -1; /* fits: real_cache is at most AGENT_DIR_MAX */
    return copy_program(init, init_copy, err, errlen);
}

cJSON *rt_open(const rt_config *c, char *err, size_t errlen)
{
    char crun[PATH_MAX], skopeo[PATH_MAX], umoci[PATH_MAX], init[PATH_MAX + 32],
        croot[PATH_MAX + 16];
    if (fu_find_program("crun", crun, sizeof crun) != 0 ||
        fu_find_program("skopeo", skopeo, sizeof skopeo) != 0 ||
        fu_find_program("umoci", umoci, sizeof umoci) != 0) {
        fmt_cut(err, errlen, "crun, skopeo and umoci are needed to run containers "
                              "(apt-get install crun skopeo umoci), or --runtime host on a "
                              "trusted single-tenant node");
        return NULL;
    }
    if (fmt_path(init, sizeof init, c->self_dir, "cohort-init") != 0) {
        fmt_cut(err, errlen, "the agent's directory's path is too long");
        return NULL;
    }
    if (access(init, X_OK) != 0) {
        fmt_cut(err, errlen, "cannot run %s: %s", init, strerror(errno));
        return NULL;
    }
    if (rt_fix_hybrid_cgroups(err, errlen) != 0)
        return NULL;
    repair_dev_nodes();
    /* Every directory on the way to an image's rootfs must be traversable
     * by the tenants' uids; the agent's files keep their own 0600 modes. */
    char real_cache[PATH_MAX], init_copy[PATH_MAX + 32];
    if (rt_dirs(c, init, croot, sizeof croot, real_cache, init_copy, sizeof init_copy, err,
                errlen) != 0)
        return NULL;
    int seccomp = c->seccomp && strcmp(c->seccomp, "off");
    cJSON *profile = NULL;
    if (seccomp && !(profile = oci_seccomp_load(c->seccomp, err, errlen)))
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "crun", crun);
    cJSON_AddStringToObject(o, "crun_root", croot);
    cJSON_AddStringToObject(o, "init", init_copy);
    cJSON_AddNumberToObject(o, "start_timeout_ms", (double)c->start_timeout_s * 1000);
    cJSON *driver = nvd_find(err, errlen);
    if (!driver) {
        cJSON_Delete(o);
        cJSON_Delete(profile);
        return NULL;
    }
    cJSON_AddItemToObject(o, "gpu_driver", driver);
    cJSON_AddStringToObject(o, "skopeo", skopeo);
    cJSON_AddStringToObject(o, "umoci", umoci);
    cJSON_AddStringToObject(o, "image_cache", real_cache);
    cJSON_AddNumberToObject(o, "image_cache_max", (double)c->image_cache_max);
    cJSON_AddNumberToObject(o, "resolve_ttl", (double)c->resolve_ttl_s);
    cJSON_AddStringToObject(o, "registry", c->registry);
    cJSON_AddItemToObject(o, "insecure", host_list(c->insecure));
    if (profile) /* converted once here, not by every worker's shim */
        cJSON_AddItemToObject(o, "seccomp", profile);
    return o;
}
