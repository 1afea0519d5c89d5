/*
 * oci: writes a worker container's config.json and converts seccomp
 * profiles.  Pure functions over their inputs: no process, no mount.
 */
#include "agent/oci.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "agent/jget.h"

/* The capabilities container engines give by default (Docker, Podman),
 * effective only inside the container's own user namespace. */
static const char *const caps[] = {
    "CAP_CHOWN",  "CAP_DAC_OVERRIDE", "CAP_FOWNER",           "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID",       "CAP_SETPCAP",          "CAP_SETFCAP",
    "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", NULL};

static const char *const masked[] = {
    "/proc/acpi",          "/proc/asound",      "/proc/kcore",      "/proc/keys",
    "/proc/latency_stats", "/proc/timer_list",  "/proc/timer_stats", "/proc/sched_debug",
    "/proc/scsi",          "/sys/firmware",     "/sys/devices/virtual/powercap",
    "/sys/kernel/debug",   "/sys/fs/cgroup",    NULL};

static const char *const readonly[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                       "/proc/sysrq-trigger", NULL};

static cJSON *strings(const char *const *v)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; v && v[i]; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
    return a;
}

static void add_mount(cJSON *mounts, const char *dst, const char *type, const char *src,
                      const char *const *opts)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "destination", dst);
    cJSON_AddStringToObject(m, "type", type);
    cJSON_AddStringToObject(m, "source", src);
    cJSON_AddItemToObject(m, "options", strings(opts));
    cJSON_AddItemToArray(mounts, m);
}

static cJSON *mapping(uint32_t base)
{
    cJSON *a = cJSON_CreateArray(), *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "containerID", 0);
    cJSON_AddNumberToObject(m, "hostID", (double)base);
    cJSON_AddNumberToObject(m, "size", OCI_UID_RANGE);
    cJSON_AddItemToArray(a, m);
    return a;
}

static void add_mounts(const oci_spec *s, cJSON *mounts)
{
    static const char *const proc[] = {"nosuid", "noexec", "nodev", NULL};
    static const char *const dev[] = {"nosuid", "strictatime", "mode=755", "size=65536k", NULL};
    static const char *const sys[] = {"rbind", "nosuid", "noexec", "nodev", "ro", NULL};
    static const char *const root[] = {"nosuid", "nodev", "mode=755", "size=64k", NULL};
    static const char *const ro_file[] = {"bind", "ro", "nosuid", "nodev", "noexec", NULL};
    static const char *const init[] = {"bind", "ro", "nosuid", "nodev", NULL};
    static const char *const bind_rw[] = {"rbind", "rw", "nosuid", "nodev", "idmap", NULL};
    static const char *const bind_ro[] = {"rbind", "ro", "nosuid", "nodev", "idmap", NULL};
    static const char *const gpu[] = {"bind", "rw", "nosuid", "noexec", NULL};
    static const char *const host_file[] = {"bind", "ro", "nosuid", "nodev", NULL};
    char shm[64], tmp_size[64];
    /* Both are tmpfs: their pages are charged to the memory cgroup of the
     * worker that writes them, so neither holds more than the spec's memory. */
    snprintf(shm, sizeof shm, "size=%lldm", (long long)(s->shm_mb > 0 ? s->shm_mb : 64));
    snprintf(tmp_size, sizeof tmp_size, "size=%lldm", (long long)s->tmp_mb);
    const char *const shm_opts[] = {"nosuid", "noexec", "nodev", "mode=1777", shm, NULL};
    const char *const tmp[] = {"nosuid", "nodev", "mode=1777", s->tmp_mb > 0 ? tmp_size : NULL,
                               NULL};
    add_mount(mounts, "/proc", "proc", "proc", proc);
    add_mount(mounts, "/dev", "tmpfs", "tmpfs", dev);
    add_mount(mounts, "/dev/shm", "tmpfs", "shm", shm_opts);
    add_mount(mounts, "/tmp", "tmpfs", "tmpfs", tmp);
    /* A container cannot mount a sysfs itself (netns.h): the job's
     * namespace's own, or else the node's. */
    add_mount(mounts, "/sys", "bind", s->sys ? s->sys : "/sys", sys);
    add_mount(mounts, "/etc/hosts", "bind", "/etc/hosts", ro_file);
    add_mount(mounts, "/etc/resolv.conf", "bind", "/etc/resolv.conf", ro_file);
    add_mount(mounts, s->mount_root, "tmpfs", "tmpfs", root);
    add_mount(mounts, s->init_at, "bind", s->init, init);
    for (int i = 0; i < s->nbinds; i++)
        add_mount(mounts, s->binds[i].dst, "bind", s->binds[i].src,
                  s->binds[i].ro ? bind_ro : bind_rw);
    for (int i = 0; i < s->nfiles; i++)
        add_mount(mounts, s->files[i].dst, "bind", s->files[i].src, host_file);
    for (int i = 0; s->devices && s->devices[i]; i++)
        add_mount(mounts, s->devices[i], "bind", s->devices[i], gpu);
}

char *oci_config(const oci_spec *s, char *err, size_t errlen)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "ociVersion", "1.0.2");
    cJSON *p = cJSON_AddObjectToObject(c, "process");
    cJSON_AddBoolToObject(p, "terminal", 0);
    cJSON *user = cJSON_AddObjectToObject(p, "user");
    cJSON_AddNumberToObject(user, "uid", 0);
    cJSON_AddNumberToObject(user, "gid", 0);
    cJSON *argv = cJSON_AddArrayToObject(p, "args");
    cJSON_AddItemToArray(argv, cJSON_CreateString(s->init_at));
    for (int i = 0; s->argv[i]; i++)
        cJSON_AddItemToArray(argv, cJSON_CreateString(s->argv[i]));
    cJSON_AddItemToObject(p, "env", strings((const char *const *)s->env));
    cJSON_AddStringToObject(p, "cwd", s->cwd);
    cJSON *cp = cJSON_AddObjectToObject(p, "capabilities");
    cJSON_AddItemToObject(cp, "bounding", strings(caps));
    cJSON_AddItemToObject(cp, "effective", strings(caps));
    cJSON_AddItemToObject(cp, "permitted", strings(caps));
    cJSON_AddBoolToObject(p, "noNewPrivileges", 1);
    /* No rlimits: the worker keeps the node's (a user namespace cannot
     * raise a hard limit anyway). */

    cJSON *root = cJSON_AddObjectToObject(c, "root");
    cJSON_AddStringToObject(root, "path", s->rootfs);
    cJSON_AddBoolToObject(root, "readonly", 1);
    cJSON_AddStringToObject(c, "hostname", s->hostname);
    add_mounts(s, cJSON_AddArrayToObject(c, "mounts"));

    cJSON *l = cJSON_AddObjectToObject(c, "linux");
    cJSON_AddItemToObject(l, "uidMappings", mapping(s->uid_base));
    cJSON_AddItemToObject(l, "gidMappings", mapping(s->uid_base));
    cJSON *ns = cJSON_AddArrayToObject(l, "namespaces");
    static const char *const kinds[] = {"pid", "ipc", "uts", "mount", "user", "cgroup", NULL};
    for (int i = 0; kinds[i]; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", kinds[i]);
        cJSON_AddItemToArray(ns, o);
    }
    if (s->netns) { /* the job's own network on this node (netns.h) */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "network");
        cJSON_AddStringToObject(o, "path", s->netns);
        cJSON_AddItemToArray(ns, o);
    }
    cJSON_AddItemToObject(l, "maskedPaths", strings(masked));
    cJSON_AddItemToObject(l, "readonlyPaths", strings(readonly));
    /* GPU device nodes: allowed (crun's device cgroup is off with the cgroup
     * manager, so the bind mounts above are what grants them). */
    if (s->seccomp)
        cJSON_AddItemToObject(l, "seccomp", cJSON_Duplicate(s->seccomp, 1));
    char *text = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    if (!text)
        snprintf(err, errlen, "out of memory writing the container's configuration");
    return text;
}

/* ---- seccomp ---- */

#if defined(__x86_64__)
#define ARCH_GO "amd64"
#define ARCH_SCMP "SCMP_ARCH_X86_64"
#elif defined(__aarch64__)
#define ARCH_GO "arm64"
#define ARCH_SCMP "SCMP_ARCH_AARCH64"
#else
#error "seccomp: unknown architecture"
#endif

static int has_cap(const char *cap)
{
    for (int i = 0; caps[i]; i++)
        if (!strcmp(caps[i], cap))
            return 1;
    return 0;
}

/* 1 when a rule's includes all hold and none of its excludes does. */
static int rule_applies(const cJSON *rule)
{
    const cJSON *inc = cJSON_GetObjectItemCaseSensitive(rule, "includes");
    const cJSON *exc = cJSON_GetObjectItemCaseSensitive(rule, "excludes");
    const cJSON *e, *a;
    a = cJSON_GetObjectItemCaseSensitive(inc, "arches");
    if (cJSON_GetArraySize(a) > 0 && !jget_has_string(a, ARCH_GO))
        return 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(inc, "caps"))
    {
        if (!cJSON_IsString(e) || !has_cap(e->valuestring))
            return 0;
    }
    a = cJSON_GetObjectItemCaseSensitive(exc, "arches");
    if (jget_has_string(a, ARCH_GO))
        return 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(exc, "caps"))
    {
        if (cJSON_IsString(e) && has_cap(e->valuestring))
            return 0;
    }
    return 1;
}

/* names without clone, clone3 and unshare, which no_new_userns rules. */
static cJSON *names_but_clone(const cJSON *names)
{
    cJSON *out = cJSON_CreateArray();
    const cJSON *n;
    cJSON_ArrayForEach(n, names)
    {
        if (cJSON_IsString(n) && strcmp(n->valuestring, "clone") &&
            strcmp(n->valuestring, "clone3") && strcmp(n->valuestring, "unshare"))
            cJSON_AddItemToArray(out, cJSON_CreateString(n->valuestring));
    }
    return out;
}

/* A rule on one syscall whose first argument, masked with CLONE_NEWUSER,
 * equals value. */
static void add_newuser_rule(cJSON *rules, const char *name, const char *action, int value,
                             int errno_ret)
{
    cJSON *r = cJSON_CreateObject(), *names = cJSON_AddArrayToObject(r, "names");
    cJSON_AddItemToArray(names, cJSON_CreateString(name));
    cJSON_AddStringToObject(r, "action", action);
    if (errno_ret)
        cJSON_AddNumberToObject(r, "errnoRet", errno_ret);
    cJSON *args = cJSON_AddArrayToObject(r, "args"), *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "index", 0);
    /* MASKED_EQ: (arg & value) == valueTwo */
    cJSON_AddNumberToObject(a, "value", 0x10000000); /* CLONE_NEWUSER */
    cJSON_AddNumberToObject(a, "valueTwo", value);
    cJSON_AddStringToObject(a, "op", "SCMP_CMP_MASKED_EQ");
    cJSON_AddItemToArray(args, a);
    cJSON_AddItemToArray(rules, r);
}

/*
 * Cohort's own rules on top of the profile: no user namespace inside a
 * container (a nested one would give the tenant capabilities over new
 * namespaces of its own: mounts, netfilter, all the kernel surface behind
 * them), as Docker's profile does.  clone and unshare are allowed without
 * CLONE_NEWUSER and refused (EPERM) with it; clone3, whose flags seccomp
 * cannot read, answers ENOSYS so that libc falls back to clone.
 */
static void no_new_userns(cJSON *rules)
{
    add_newuser_rule(rules, "clone", "SCMP_ACT_ALLOW", 0, 0);
    add_newuser_rule(rules, "clone", "SCMP_ACT_ERRNO", 0x10000000, 1);
    add_newuser_rule(rules, "unshare", "SCMP_ACT_ALLOW", 0, 0);
    add_newuser_rule(rules, "unshare", "SCMP_ACT_ERRNO", 0x10000000, 1);
    cJSON *r = cJSON_CreateObject(), *names = cJSON_AddArrayToObject(r, "names");
    cJSON_AddItemToArray(names, cJSON_CreateString("clone3"));
    cJSON_AddStringToObject(r, "action", "SCMP_ACT_ERRNO");
    cJSON_AddNumberToObject(r, "errnoRet", 38); /* ENOSYS */
    cJSON_AddItemToArray(rules, r);
}

cJSON *oci_seccomp_convert(const cJSON *profile, char *err, size_t errlen)
{
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(profile, "defaultAction");
    const cJSON *rules = cJSON_GetObjectItemCaseSensitive(profile, "syscalls");
    if (!cJSON_IsString(def) || !cJSON_IsArray(rules)) {
        snprintf(err, errlen, "not a seccomp profile (no defaultAction or syscalls)");
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "defaultAction", def->valuestring);
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(profile, "defaultErrnoRet");
    if (cJSON_IsNumber(dr))
        cJSON_AddNumberToObject(o, "defaultErrnoRet", dr->valuedouble);
    /* The native architecture only, not the profile's sub-architectures
     * (x86, x32): a 32-bit system call from a container kills it.  Workers
     * are 64-bit programs, and the filter compiles in half the time (crun
     * compiles it for every container: 17 against 33 ms here). */
    cJSON *arches = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arches, cJSON_CreateString(ARCH_SCMP));
    cJSON *out = cJSON_AddArrayToObject(o, "syscalls");
    const cJSON *r;
    cJSON_ArrayForEach(r, rules)
    {
        const cJSON *names = cJSON_GetObjectItemCaseSensitive(r, "names");
        const cJSON *action = cJSON_GetObjectItemCaseSensitive(r, "action");
        if (!cJSON_IsArray(names) || !cJSON_IsString(action) || !rule_applies(r))
            continue;
        cJSON *only = names_but_clone(names);
        if (cJSON_GetArraySize(only) == 0) {
            cJSON_Delete(only);
            continue;
        }
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToObject(e, "names", only);
        cJSON_AddStringToObject(e, "action", action->valuestring);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(r, "args");
        if (cJSON_IsArray(args) && cJSON_GetArraySize(args) > 0)
            cJSON_AddItemToObject(e, "args", cJSON_Duplicate(args, 1));
        const cJSON *er = cJSON_GetObjectItemCaseSensitive(r, "errnoRet");
        if (cJSON_IsNumber(er))
            cJSON_AddNumberToObject(e, "errnoRet", er->valuedouble);
        cJSON_AddItemToArray(out, e);
    }
    no_new_userns(out);
    return o;
}

cJSON *oci_seccomp_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    char *text = NULL;
    cJSON *in = NULL, *out = NULL;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        snprintf(err, errlen, "%s: cannot seek", path);
        goto done;
    }
    long n = ftell(f);
    rewind(f);
    if (n <= 0 || n > (8 << 20) || !(text = malloc((size_t)n + 1)) ||
        fread(text, 1, (size_t)n, f) != (size_t)n) {
        snprintf(err, errlen, "%s: cannot read it (or over 8 MiB)", path);
        goto done;
    }
    text[n] = '\0';
    if (!(in = cJSON_Parse(text))) {
        snprintf(err, errlen, "%s: not JSON", path);
        goto done;
    }
    out = oci_seccomp_convert(in, err, errlen);
done:
    fclose(f);
    free(text);
    cJSON_Delete(in);
    return out;
}
